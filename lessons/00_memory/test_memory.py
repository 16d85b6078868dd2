"""Lesson 00: the agent loop in memory.

Run: pytest lessons/00_memory            (your code)
     pytest lessons/00_memory --solution (the reference)
"""

import json
import re

import openai
import pytest

from sessionlab import scripted
from sessionlab.scripted import Fail, call, raw_call, say, use
from sessionlab.testing import described, fail_in, raises, until_written


def new_agent(lesson, model, town, **options):
    return lesson.Agent(model.client(), model=model.model, tools=town, **options)


def stored_as_sent(reply, history):
    """A stand-in for `normalize_reply` (task 00.3) while it is not written yet. The
    replies of this file's tests are well formed (each call has its own id and JSON
    text arguments), so storing them as they came is enough here; the quirks that
    task 00.3 handles are in test_replies.py, which never uses this."""
    message = {"role": "assistant", "content": reply.get("content") or ""}
    if reply.get("tool_calls"):
        message["tool_calls"] = [
            {"id": call["id"], "type": "function", "function": dict(call["function"])}
            for call in reply["tool_calls"]]
    return message


@pytest.fixture(autouse=True)
def until_task_00_3_is_written(request, monkeypatch):
    """The loop (task 00.2) stores each reply through `normalize_reply` (task 00.3).
    So that a loop written first is tested at once, this file's tests store replies
    with `stored_as_sent` for as long as `normalize_reply` says it is not written;
    once it is, the student's own runs, and an exception it raises fails the test as
    task 00.3's, not as a traceback of the loop's. The tests of 00.3 alone never use
    it."""
    tasks = {mark.args[0] for mark in request.node.iter_markers("task")}
    if tasks <= {"00.3"} or "lesson" not in request.fixturenames:
        return
    lesson = request.getfixturevalue("lesson")
    until_written(monkeypatch, lesson, "normalize_reply", "00.3", stored_as_sent)
    written = lesson.normalize_reply

    def normalize_reply(reply, history):
        try:
            return written(reply, history)
        except NotImplementedError:
            raise
        except Exception as error:
            held = len(history) if isinstance(history, list) else history
            fail_in("00.3", f"normalize_reply raised {described(error)}, given the "
                    f"reply {str(reply)[:200]} and a history of {held} messages: it "
                    "makes a message to store of whatever a server sends, on any turn "
                    "of the conversation (task 00.3)")

    monkeypatch.setattr(lesson, "normalize_reply", normalize_reply)


def assert_error_result(result, what):
    """`result` is text that starts with "error:", as every failed call's result does:
    a tool's own answer may hold the word "error", so only the start tells a failure
    from an answer, for the model and for a person reading the log."""
    assert isinstance(result, str) and result.startswith("error:"), (
        f"{what}: expected an error result, text starting with 'error:'; got "
        f"{result!r}")


def run_call(lesson, tools, call, what):
    """run_tool(tools, call), failing in words if an exception escapes it: whatever a
    tool raises is the model's to read, not the agent's to crash on."""
    try:
        return lesson.run_tool(tools, call)
    except NotImplementedError:
        raise
    except Exception as error:
        pytest.fail(f"{what}, and run_tool let {type(error).__name__} ({error}) "
                    "escape: the agent crashed where the model should have read an "
                    "error result", pytrace=False)


def blame_the_stop_caught(lesson, tools, call, stop: type[BaseException],
                          happened: str) -> None:
    """Fail with `happened`, naming whose code caught `stop` (a Ctrl-C, a request to
    exit): run_tool's (task 00.1) if it returns on its own, else the loop's (00.2)."""
    name = stop.__name__
    try:
        alone = lesson.run_tool(tools, call)
    except stop:
        fail_in("00.2", f"{happened}run_tool lets {name} through; the loop (task "
                "00.2) must not catch it either")
    fail_in("00.1", f"{happened}run_tool (task 00.1) returned {alone!r} instead of "
            f"letting {name} through")


@pytest.mark.task("00.1")
def test_a_tool_runs_by_its_exact_name_with_its_arguments_by_name(lesson):
    """A call runs the tool of exactly the name the model sent (a name the town does
    not have, even one that differs in case or by a space, is an error result that
    names it, whatever the arguments), with the arguments as the tool's parameters by
    name, in whatever order they came."""
    paid = []

    def pay(item, gold):
        paid.append((item, gold))
        return f"{item} for {gold} gold"

    sent = '{"gold": 3, "item": "rope"}'
    result = run_call(lesson, FewTools(pay=pay), tool_call("pay", sent),
                      f"pay(item, gold) was called with {sent}")
    assert result == "rope for 3 gold" and paid == [("rope", 3)], (
        f"the model called pay(item, gold) with {sent}: each argument is the "
        "parameter of its name, whatever the order the model wrote them in, and the "
        f"tool should have paid 3 gold for a rope; it ran with {paid} and the result "
        f"is {result!r}")
    for name, arguments in (("Pay", sent), ("pay ", sent), ("Pay", "{item: rope"),
                            ("payer_l'épée", sent)):
        what = f"the model called {name!r}, and the town has 'pay', not {name!r}"
        if arguments != sent:
            what += f", with {arguments!r}, which is no JSON"
        result = run_call(lesson, FewTools(pay=pay), tool_call(name, arguments), what)
        assert_error_result(result, what)
        assert re.search(r"""(['"`])""" + re.escape(name) + r"\1", result), (
            f"{what}: the error result should name the tool as the model sent it, "
            f"{name!r}, in quotes, so that it sees the name it got wrong (a space at "
            "its end included, its letters beyond ASCII as letters, not escapes), "
            "whatever its arguments: no arguments run until it "
            f"names a tool the town has; got {result!r}")

    def fly(**arguments):
        raise KeyError("fly")

    failed = run_call(lesson, FewTools(fly=fly), tool_call("fly", "{}"),
                      "the tool fly raised KeyError('fly')")
    unknown = run_call(lesson, FewTools(pay=pay), tool_call("fly", "{}"),
                       "the model called 'fly', which the town does not have")
    assert_error_result(unknown, "the model called 'fly', which the town does not have")
    long = json.dumps({"to": "the cave, " * 12_000})
    unknown = run_call(lesson, FewTools(pay=pay), tool_call("fly", long),
                       "the model called 'fly', which the town does not have")
    assert len(unknown) < 2_000, (
        f"the model called 'fly', which the town does not have, with arguments of "
        f"{len(long):,} characters, and the error result is {len(unknown):,}: it goes "
        "back to the model with every later request, so what was sent is quoted only "
        f"in part, if at all; it begins {unknown[:200]!r}")
    assert unknown != failed, (
        f"the model called 'fly', which the town does not have, and reads {unknown!r}, "
        "the same result as when the town has a tool 'fly' that fails with "
        "KeyError('fly'): the model cannot tell that the tool it named is not there, "
        "and sends the same call again")
    assert paid == [("rope", 3)], (
        "a call to 'Pay' or 'pay ' names no tool the town has (the model must learn "
        "the name it got wrong, or it keeps sending it), and the tool ran for them: "
        f"{paid}")


def as_a_tool_module_defines_it(function):
    """`function` named as a tool module's function is: Python's TypeError for a
    parameter it does not have names the function by its qualified name, which for one
    made inside a test is 'test_....<locals>.buy', longer than any real tool's. A
    result that quotes only the start of long words should reach the parameter's name
    in any tool's words, not only in a test's."""
    function.__qualname__ = function.__name__
    return function


@pytest.mark.task("00.1")
def test_a_parameter_the_tool_does_not_have_is_an_error_result_naming_it(lesson):
    """Arguments are the tool's parameters by name, all of them: one of a name the tool
    does not have is the model's mistake, told in a result that names it, and the tool
    does not run on the rest as if that one had not been sent."""
    bought = []

    @as_a_tool_module_defines_it
    def buy(item, count=1):
        bought.append((item, count))
        return f"You bought {count} {item}."

    sent = '{"item": "torch", "amount": 2}'
    what = f"buy(item, count=1) was called with {sent}, and it has no 'amount'"
    result = run_call(lesson, FewTools(buy=buy), tool_call("buy", sent), what)

    assert bought == [], (
        f"{what}: the model meant two torches, and the tool ran as {bought}: an "
        "argument left out without a word buys what the model never asked for; the "
        "call fails, and the model learns which parameter it got wrong")
    assert_error_result(result, what)
    assert "amount" in result, (
        f"{what}: the error result should name 'amount', the parameter the model got "
        f"wrong, so that it can correct it; got {result!r}")


@pytest.mark.task("00.1")
def test_a_tool_taking_any_keyword_runs_with_the_arguments_sent(lesson):
    """A tool may take whatever keywords it is given (**arguments), as a tool that
    passes them on to a service does: every argument the model sent is one of its
    parameters, and it runs with them all, by name."""
    noted = []

    def note(**arguments):
        noted.append(arguments)
        return f"noted {len(arguments)} things"

    sent = '{"npc": "elder", "topic": "the cave"}'
    what = f"note(**arguments) was called with {sent}"
    result = run_call(lesson, FewTools(note=note), tool_call("note", sent), what)

    assert noted == [{"npc": "elder", "topic": "the cave"}] and (
        result == "noted 2 things"), (
        f"{what}: a tool that takes any keyword takes every argument the model sent, "
        f"and should have run once with them, answering 'noted 2 things'; it ran "
        f"with {noted}, and the result is {result!r}")


@pytest.mark.task("00.1")
@pytest.mark.parametrize("tool", ["note", "look"])
def test_an_argument_sent_as_null_reaches_the_tool_as_none(lesson, tool):
    """An argument the model sent as null is an argument it sent: the tool gets None
    for it, not its own default, nor nothing at all (a call that says a value is null
    is not a call that said nothing)."""
    given = []

    def note(**arguments):
        given.append(arguments)
        return "noted"

    def look(at="the square", mood=None):
        given.append({"at": at})
        return f"you look at {at}"

    sent = '{"at": null}'
    what = f"{tool}() was called with {sent}"
    result = run_call(lesson, FewTools(note=note, look=look), tool_call(tool, sent),
                      what)

    assert given == [{"at": None}], (
        f"{what}: the tool should have run once with at=None, as the model sent it; "
        f"it ran with {given} (its result: {result!r}): an argument sent as null "
        "was dropped, and the tool used what it takes when nothing is sent")


@pytest.mark.task("00.1")
def test_a_call_that_failed_runs_again_when_the_model_sends_it_again(lesson):
    """Trying again is the model's choice: a call that failed, sent again on a later
    request (the same tool, the same arguments), runs again, and its result is what
    the tool does this time, not the failure remembered from the first; a call that
    worked, sent again, runs again too."""
    tries = []

    def buy(item):
        tries.append(item)
        if len(tries) == 1:
            raise RuntimeError("the shop is closed")
        return f"You bought a {item}."

    call_sent = tool_call("buy", '{"item": "torch"}')
    first = run_call(lesson, FewTools(buy=buy), dict(call_sent),
                     "the tool buy raised RuntimeError")
    again = run_call(lesson, FewTools(buy=buy), dict(call_sent),
                     "the model sent the same call again, and the shop was open")

    assert_error_result(first, "the tool buy raised RuntimeError")
    assert tries == ["torch", "torch"] and again == "You bought a torch.", (
        "the model sent buy with {\"item\": \"torch\"}; the shop was closed, and the "
        "model sent the same call again once it opened: the call should run again "
        f"and answer 'You bought a torch.'; the tool ran {len(tries)} time(s) and "
        f"the second result is {again!r}, the first failure told again")
    third = run_call(lesson, FewTools(buy=buy), dict(call_sent),
                     "the model sent the same call a third time")
    assert tries == ["torch"] * 3 and third == "You bought a torch.", (
        "the model sent the same call to buy a torch a third time, after it had "
        f"worked: it should run again (the model asked for a second torch); the tool "
        f"ran {len(tries)} time(s) in all and the third result is {third!r}: a call "
        "sent again runs again, whatever became of it before")


@pytest.mark.task("00.1")
def test_a_call_sent_again_runs_with_the_arguments_sent_not_what_a_tool_left(lesson):
    """A tool may change a list it was given (a pack that takes each item off the list
    as it stows it). The same call sent again runs with its arguments as the model
    sent them, read afresh, never with what the first run left of them."""
    given = []

    def pack(items):
        given.append(list(items))
        while items:
            items.pop()
        return "Packed."

    call_sent = tool_call("pack", '{"items": ["rope", "torch"]}')
    for time in ("first", "second"):
        run_call(lesson, FewTools(pack=pack), dict(call_sent),
                 f"the model sent pack with two items, a {time} time")

    assert given == [["rope", "torch"]] * 2, (
        "the model sent pack with {\"items\": [\"rope\", \"torch\"]} twice; the "
        "tool took the items off the list it was given, and the two runs got the "
        f"lists {given}: a call sent again runs with the arguments the model sent, "
        "read afresh, not with what an earlier run of the tool left of them")


@pytest.mark.task("00.1")
@pytest.mark.parametrize("arguments", ["[" * 100_000, "{item: rope", '{"item": "rope"}',
                                       '{"count": NaN}',
                                       '{"item": ' + "7" * 5_000 + "}"],
                         ids=["nested", "no-json", "fine", "nan", "long-number"])
def test_reading_arguments_leaves_the_program_as_it_was(lesson, town, arguments):
    """Reading a call's arguments, fine or not, changes nothing of the program around
    it: Python's recursion limit, and its limit on the digits of a number, are the
    same after as before (a limit lifted to read deep JSON or a long number and not
    set back leaves every later call of the program under it)."""
    import sys

    limit = sys.getrecursionlimit()
    digits = sys.get_int_max_str_digits()
    try:
        lesson.read_arguments(arguments)
    except ValueError:
        pass
    run_call(lesson, town, tool_call("buy", arguments),
             f"the arguments were {arguments[:40]!r}")
    after = sys.getrecursionlimit()
    digits_after = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(digits)
    assert digits_after == digits, (
        f"Python's limit on the digits of a number was {digits} before the arguments "
        f"{arguments[:40]!r} were read, and is {digits_after} after: reading "
        "arguments should leave the program as it found it (a limit lifted to read a "
        "long number, and not set back, lets every later reading of the program, of "
        "any text, take numbers of millions of digits, each slow to read)")
    # The program changes its own limit later on: the next reading leaves that one,
    # not the limit an earlier call saw.
    sys.setrecursionlimit(limit + 321)
    try:
        run_call(lesson, town, tool_call("buy", arguments),
                 f"the arguments were {arguments[:40]!r}")
        later = sys.getrecursionlimit()
    finally:
        sys.setrecursionlimit(limit)

    assert after == limit, (
        f"Python's recursion limit was {limit} before the arguments "
        f"{arguments[:40]!r} were read, and is {after} after: reading arguments "
        "should leave the program as it found it, whether they could be read or not "
        "(a limit set back only when the reading succeeds is left changed on a "
        "failure)")
    assert later == limit + 321, (
        f"the program set its recursion limit to {limit + 321} after an earlier call, "
        f"and after the arguments {arguments[:40]!r} were read again it is {later}: "
        "reading arguments should leave the program as it finds it at each call (a "
        "limit remembered from an earlier call, or from the import, is set back to an "
        "old value)")


@pytest.mark.task("00.1")
def test_arguments_that_are_not_json_become_an_error_result(lesson, town):
    """Arguments that are not valid JSON become an error result that says so, and the
    tool does not run."""
    result = lesson.run_tool(
        town,
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "buy", "arguments": "{item: rope"},
        },
    )

    assert_error_result(result, "the arguments '{item: rope' are not JSON")
    assert "json" in result.lower(), (
        "the arguments '{item: rope' are not JSON, and the error result does not say "
        f"so (it never mentions JSON): {result!r}")
    assert town.inventory == [], (
        "the arguments '{item: rope' cannot be read, so nothing should be bought; the "
        f"inventory is {town.inventory}")


@pytest.mark.task("00.1")
def test_the_error_for_unreadable_arguments_quotes_what_the_model_sent(lesson, town):
    """The error result for arguments that are not JSON quotes them as they were
    written, letters beyond ASCII included, so that the model sees the text it got
    wrong."""
    result = lesson.run_tool(town, {"id": "call_1", "type": "function",
                                    "function": {"name": "buy",
                                                 "arguments": '{"item": rope}'}})

    assert isinstance(result, str) and '{"item": rope}' in result, (
        "the arguments were '{\"item\": rope}' (rope without quotes); the error result "
        "should quote them, so that the model sees what it got wrong; got "
        f"{result!r}")
    sent = '{"item": épée}'
    result = run_call(lesson, town, tool_call("buy", sent),
                      f"the arguments were {sent!r}, no JSON")
    assert isinstance(result, str) and sent in result, (
        f"the arguments were {sent!r} (épée without quotes); the error result should "
        "quote them as the model wrote them, its letters beyond ASCII as letters, "
        "not escapes, so that the model recognises what it sent; got "
        f"{result!r}")


@pytest.mark.task("00.1")
def test_a_number_too_long_for_python_to_read_is_quoted_like_other_unreadable_text(
        lesson, town):
    """Arguments holding a number of thousands of digits are JSON, but Python's reader
    refuses them, with an error of its own kind (not its decode error): they could not
    be read, so the tool does not run, and the result says so and quotes their start,
    saying it was cut, as it does for any long arguments that could not be read; and
    it does not blame a NaN or Infinity the arguments do not hold."""
    sent = '{"item": ' + "7" * 5_000 + "}"
    result = run_call(lesson, town, tool_call("buy", sent),
                      "the arguments held a number of 5,000 digits")

    what = "the arguments held a number of 5,000 digits, which Python cannot read"
    assert_error_result(result, what)
    assert sent[:40] in result, (
        f"{what}; the error result should quote their start between quote marks, "
        f"{sent[:40]!r}..., as it does for any arguments that could not be read, so "
        f"that the model sees what it sent; got {result[:300]!r}")
    try:
        json.loads(sent)
    except ValueError as error:
        python_says = str(error)        # "Exceeds the limit (4300 digits) ..."
    # Python's words and the quoted digits hold numbers that say nothing of a cut.
    told = re.sub("7{4,}", "", result.replace(python_says, ""))
    assert says_it_was_cut(told), (
        f"{what}; the error result quotes their start and never says that they went "
        "on (no word such as 'cut', no '...', no length, besides Python's own words "
        "about the number): the model takes the start for all it sent; got "
        f"{result[:600]!r}")
    # What went wrong is the number: a result that blames NaN or Infinity, which the
    # arguments do not hold, sends the model looking for a value it never wrote (a
    # result may name them among the causes, beside the number's length).
    blamed = [word for word in ("nan", "infinity") if word in told.lower()]
    length = any(word in told.lower() for word in ("digit", "long", "large", "limit"))
    assert not blamed or length, (
        f"{what}, and no NaN or Infinity; the error result speaks of {blamed}, and "
        f"of nothing too long: {result[:600]!r}. From the result alone the model "
        "must tell what went wrong, and the arguments hold no such value (a number "
        "read past Python's limit and refused when written back is refused for its "
        "length)")
    # And it says what was wrong, in its own words or in Python's: the number's
    # length. The arguments are JSON (a number may have any length), so a result
    # that only calls them unreadable JSON leaves the model nothing it can change.
    said = re.sub("7{4,}", "", result).lower()
    assert any(word in said for word in ("digit", "long", "large", "limit", "big",
                                         "huge", "exceed", "size", "length")), (
        f"{what}; the error result quotes them but never says what was wrong with "
        "them (no word of the number's length, its digits or a limit, in its own "
        f"words or in Python's): {result[:600]!r}. The arguments are JSON, and from "
        "the result alone the model must tell what went wrong")


@pytest.mark.task("00.1")
def test_unreadable_arguments_over_several_lines_are_quoted_past_the_first(
        lesson, town):
    """Models often write their arguments indented, over several lines: the error
    result quotes the start of what was sent (its first 40 characters), line breaks
    and all, not only its first line, which may hold no more than a brace."""
    sent = '{\n  "item": "rope",\n  "count": two\n}'
    what = f"the arguments were {sent!r}, no JSON (two is no number)"
    result = run_call(lesson, town, tool_call("buy", sent), what)

    assert_error_result(result, what)
    missing = [line.strip() for line in sent.splitlines()
               if line.strip() not in result]
    assert not missing, (
        f"{what}; the error result should quote their start, every line of it (a "
        "line break may show as \\n), so that the model recognises what it sent; "
        f"it lacks {missing} and reads {result!r}")


@pytest.mark.task("00.1")
def test_running_a_call_leaves_the_call_as_it_was(lesson, town):
    """run_tool reads the call it is given and changes nothing in it: the caller may
    hold that call in a history that goes back to the model with every request."""
    for arguments in ('{"item": "rope"}', "{item: rope", {"item": "torch"}, ""):
        given = tool_call("buy", arguments)
        kept = json.loads(json.dumps(given))
        run_call(lesson, town, given, f"the call had the arguments {arguments!r}")
        assert given == kept, (
            f"run_tool was given the call {kept} and left it as {given}: the call it "
            "runs is the caller's (a history may hold it, and a changed call goes back "
            "to the model, or is refused, with every later request); run_tool only "
            "reads it")


@pytest.mark.task("00.1")
def test_a_long_quote_holds_only_letters_the_model_wrote(lesson, town):
    """Unreadable arguments written in a script of several bytes a letter (Chinese and
    Japanese, in UTF-8) are quoted only in part, saying so: the quote ends on a whole
    letter, and holds no character the model never wrote."""
    sent = '{"item": "' + "洞窟の松明、" * 400       # never closed: no JSON
    what = f"the arguments were {len(sent):,} characters of Japanese text, no JSON"
    result = run_call(lesson, town, tool_call("buy", sent), what)

    assert_error_result(result, what)
    assert sent[:40] in result, (
        f"{what}; the error result should quote their start, its letters as letters; "
        f"it begins {result[:300]!r}")
    strange = sorted({c for c in result if not c.isascii() and c not in sent})
    assert not strange, (
        f"{what}; the error result holds {strange}, which the model never wrote: a "
        "quote cut in bytes rather than letters breaks a letter in two, and the model "
        f"reads a character it did not send; the result is {result[:300]!r}...")
    assert says_it_was_cut(result), (
        f"{what}; the error result quotes their start and never says that they went "
        "on (no word such as 'cut', no '...', no length): the model takes the start "
        f"for all it sent; got {result!r}")


@pytest.mark.task("00.1")
def test_unreadable_arguments_are_quoted_between_quote_marks(lesson, town):
    """The quote of unreadable arguments is marked as one, so that the model sees where
    what it sent starts and ends: arguments of blanks alone, or with a blank at their
    end, show those blanks."""
    for sent in ("  ", "{item: rope} "):
        what = f"the arguments were {sent!r}, no JSON"
        result = run_call(lesson, town, tool_call("buy", sent), what)
        assert_error_result(result, what)
        assert re.search(r"""(['"`])""" + re.escape(sent) + r"\1", result), (
            f"{what}; the error result should quote them between quote marks, so that "
            "the model sees where what it sent starts and ends (its blanks "
            f"included); got {result!r}")


@pytest.mark.task("00.1")
def test_a_long_quote_of_unreadable_arguments_is_closed_by_its_quote_mark(lesson,
                                                                         town):
    """A long text of unreadable arguments is quoted only in part, and the part is a
    quote all the same: it opens and closes with the same quote mark, and what lies
    between is the start of what the model sent (a quote cut after it was made loses
    its closing mark, and the model cannot see where what it sent ends). The result
    says that the quote was cut: closed, it looks like all that was sent."""
    sent = '{"item": "' + "rope, " * 20_000          # never closed: no JSON
    what = f"the arguments were {len(sent):,} characters, no JSON"
    result = run_call(lesson, town, tool_call("buy", sent), what)

    assert_error_result(result, what)
    quotes = [match.group(2) for match in re.finditer(
        r"""(['"`])(""" + re.escape(sent[:40]) + r""".*?)\1""", result)]
    assert any(sent.startswith(quoted) for quoted in quotes), (
        f"{what}; the error result should quote their start between two quote marks "
        "of the same kind, the closing one right after the part quoted; it holds no "
        f"such quote: it begins {result[:120]!r} and ends {result[-120:]!r}")
    assert says_it_was_cut(result), (
        f"{what}; the error result quotes their start, closed by its quote mark, and "
        "never says that they went on (no word such as 'cut', no '...', no length): "
        f"the model takes the quote for all it sent; got {result!r}")


@pytest.mark.task("00.1")
@pytest.mark.parametrize("arguments, kind, words", [
    ('["rope"]', "a list", r"list|array|\[\W*rope"),
    ("42", "a number", r"int|number|42"),
    ('"rope"', "a string", r"str|rope"),
    (["rope"], "a list sent as the arguments themselves", r"list|array|\[\W*rope"),
], ids=["list", "number", "string", "list-as-is"])
def test_arguments_that_are_json_but_not_an_object_become_an_error_result(
        lesson, town, arguments, kind, words):
    """Arguments that are valid JSON but not an object (a list, a number, a string)
    cannot be keyword arguments: they become an error result too, which says what the
    model sent, since the stored call will not show it. So do an empty list, 0 or
    false sent as the arguments themselves: falsy, but sent, and no object (only None
    or "" means a call without arguments), so a tool that takes nothing does not run."""
    result = lesson.run_tool(
        town,
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "buy", "arguments": arguments},
        },
    )

    assert_error_result(result, f"the arguments were {kind} of JSON, not an object")
    assert re.search(words, result, re.IGNORECASE), (
        f"the arguments were {kind} of JSON ({arguments}), and the error result does "
        "not say so: it should name what the model sent (its kind, or the text "
        f"itself), for the model to see what it got wrong; got {result!r}")
    other = run_call(lesson, town, tool_call("buy", "true"),
                     "the arguments were true, a boolean of JSON")
    assert result != other, (
        f"the arguments were {kind} of JSON ({arguments}), and the error result is "
        f"{result!r}, the very result the arguments true (a boolean) get: it does "
        "not say what the model sent, only what it might have sent")
    # Falsy, but sent: no object either, whatever run_tool takes for "no arguments"
    ran = []

    def look():
        ran.append("look")
        return "the square is empty"

    for sent in ([], 0, False):
        what = (f"the arguments were {sent!r}, sent as they are, to a tool that takes "
                "nothing: JSON that is no object (only None or \"\" means no "
                "arguments)")
        result = run_call(lesson, FewTools(look=look), tool_call("look", sent), what)
        assert not ran and str(result).startswith("error:"), (
            f"{what}: the tool should not run, and the result should be an error "
            f"saying what was sent; the tool ran {len(ran)} times and the result is "
            f"{result!r} (run_tool runs only what read_arguments reads)")


class ShopClosed(Exception):
    """An exception of a tool's own, as a tool library defines them."""


@pytest.mark.task("00.1")
@pytest.mark.parametrize("kind", [RuntimeError, OSError, ShopClosed, AttributeError,
                                  UnicodeError],
                         ids=lambda kind: kind.__name__)
def test_any_exception_inside_a_tool_becomes_an_error_result(lesson, kind):
    """Whatever a tool raises (not only TypeError: a tool's own exception, an OSError)
    comes back as an error text with its type and its words."""
    def buy(item):
        raise kind("the shop is closed for the night")

    try:
        result = lesson.run_tool(FewTools(buy=buy),
                                 tool_call("buy", '{"item": "rope"}'))
    except NotImplementedError:
        raise
    except Exception as error:
        pytest.fail(f"a tool raised {type(error).__name__} ({error}) and run_tool let "
                    "it escape: the agent crashed where the model should have read an "
                    "error result and tried again")
    assert_error_result(result, f"the tool raised {kind.__name__}")
    assert "the shop is closed for the night" in result, (
        "the error result should carry what the tool's exception says, so that the "
        f"model knows what went wrong: got {result!r}")
    assert kind.__name__ in result, (
        f"the tool raised {kind.__name__}('the shop is closed for the night'), and "
        f"the error result {result!r} does not name the exception's type: the type "
        "says what kind of failure it was, which its words alone may not")


@pytest.mark.task("00.1")
def test_a_tool_that_fails_runs_once_and_is_not_tried_again(lesson):
    """A tool that raises may have done part of its work before it failed (the gold
    paid, no torch given): run_tool runs a call once and reports the failure; trying
    again is the model's to decide, with the result in front of it."""
    tries = []

    def buy(item):
        tries.append(item)
        raise RuntimeError(f"the {item} slipped out of the shopkeeper's hands")

    what = "the tool buy raised RuntimeError"
    result = run_call(lesson, FewTools(buy=buy), tool_call("buy", '{"item": "torch"}'),
                      what)

    assert_error_result(result, what)
    assert len(tries) == 1, (
        f"the model asked once for a torch and the tool buy failed; it ran "
        f"{len(tries)} times: a call runs once, as the model sent it, and its failure "
        "is the result (each try of a shop may take the gold again)")


@pytest.mark.task("00.1")
def test_a_tools_own_value_error_is_not_blamed_on_the_arguments(lesson):
    """A tool may raise ValueError itself (a shop refusing an item, a tool that reads
    JSON of its own): the model's arguments were fine, and the result must not tell it
    they were not."""
    def buy(item):
        raise ValueError(f"the shop will not sell a {item} to strangers")

    result = run_call(lesson, FewTools(buy=buy), tool_call("buy", '{"item": "rope"}'),
                      "the tool raised ValueError")

    assert_error_result(result, "the tool raised ValueError")
    assert "will not sell a rope" in result, (
        "the error result should carry what the tool's exception says; got "
        f"{result!r}")
    unreadable = run_call(lesson, FewTools(buy=buy), tool_call("buy", "{item: rope"),
                          "the arguments were '{item: rope', which are not JSON")
    try:
        lesson.read_arguments("{item: rope")
    except ValueError as error:
        judged = str(error)

        def refuses(item):
            raise ValueError(judged)
        ran = run_call(lesson, FewTools(buy=refuses), tool_call("buy", '{"item": 1}'),
                       f"the tool raised ValueError({judged!r})")
        if ran == unreadable:
            pytest.fail(
                "the model sent the arguments '{item: rope', which are not JSON, and "
                f"reads {unreadable!r}: the same result as when its arguments were "
                f"fine and the tool itself raised ValueError({judged!r}). The model "
                "cannot tell that the tool never ran; a failure to read the arguments "
                "is told as one, not as the tool's", pytrace=False)
    if blamed_on_the_arguments(without('{"item": "rope"}', result),
                               "the shop will not sell a rope to strangers",
                               without("{item: rope", unreadable)):
        pytest.fail(
            "the model sent the arguments '{\"item\": \"rope\"}', which are fine, "
            "and the tool itself refused with ValueError; the result reads as the "
            f"result for unreadable arguments does: {result!r}, where arguments that "
            f"are not JSON give {unreadable!r}. The model will change arguments that "
            "were right, and never learn the shop said no", pytrace=False)


def without(arguments, result):
    """`result` with every quote of `arguments` (as sent, in repr, JSON-escaped) made
    one placeholder: two results that quote different arguments can then be compared."""
    forms = {arguments, repr(arguments)[1:-1], json.dumps(arguments)[1:-1]}
    for form in sorted(forms, key=len, reverse=True):
        result = result.replace(form, "<the arguments>")
    return result


def blamed_on_the_arguments(result, words, unreadable):
    """Does `result` put the tool's own `words` in the frame that the result for
    unreadable arguments uses, a frame that speaks of arguments or JSON? The tool's own
    words may say anything (even "argument"), and a result may speak of arguments in
    its own way; only the same frame reads as the same failure."""
    start = result.find(words)
    before, after = result[:start], result[start + len(words):]
    frame = (before + after).lower()
    return (("argument" in frame or "json" in frame)
            and unreadable.startswith(before) and unreadable.endswith(after))


@pytest.mark.task("00.1")
@pytest.mark.parametrize("error", [KeyError(), ZeroDivisionError(), LookupError(),
                                   TypeError()],
                         ids=lambda error: type(error).__name__)
def test_an_exception_without_words_still_says_what_went_wrong(lesson, error):
    """An exception may carry no words of its own (a bare KeyError): the result still
    tells the model what kind of failure it was."""
    def count_gold():
        raise error

    what = f"the tool raised {type(error).__name__}()"
    result = run_call(lesson, FewTools(count_gold=count_gold),
                      tool_call("count_gold", "{}"), what)

    assert_error_result(result, what)
    assert type(error).__name__ in result, (
        f"the tool raised {type(error).__name__}() (an exception with no message), "
        f"and the result {result!r} does not say what went wrong: the model reads an "
        "error with nothing in it to act on")


@pytest.mark.task("00.1")
def test_an_exception_of_several_arguments_keeps_all_its_words(lesson):
    """An exception may be made of several arguments, as an OSError is of its error
    number, its words and the file it names: the result carries them all, as Python
    shows the exception, not its first argument alone (a bare number the model can do
    nothing with)."""
    import errno

    def read_map(name):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", name)

    what = ("the tool read_map raised FileNotFoundError(2, 'No such file or "
            "directory', 'map-of-the-cave.txt')")
    result = run_call(lesson, FewTools(read_map=read_map),
                      tool_call("read_map", '{"name": "map-of-the-cave.txt"}'), what)

    assert_error_result(result, what)
    missing = [words for words in ("FileNotFoundError", "No such file or directory",
                                   "map-of-the-cave.txt") if words not in result]
    assert not missing, (
        f"{what}: the error result should carry the exception's type and all its "
        f"words, as Python shows it ([Errno 2] No such file or directory: "
        f"'map-of-the-cave.txt'), so that the model learns which map is missing; it "
        f"lacks {missing} and reads {result!r}")


@pytest.mark.task("00.1")
def test_a_tools_words_over_several_lines_are_told_whole(lesson):
    """A tool may word its failure over several lines (a shop's notice on the door):
    short as they are, every line reaches the model. A result that keeps the first
    line alone leaves the rest out without saying so, and the model never reads what
    to do next."""
    words = "the shop is closed\nit opens at dawn\nknock twice for the keeper"

    def buy(item):
        raise RuntimeError(words)

    what = f"the tool buy raised RuntimeError({words!r})"
    result = run_call(lesson, FewTools(buy=buy), tool_call("buy", '{"item": "rope"}'),
                      what)

    assert_error_result(result, what)
    missing = [line for line in words.splitlines() if line not in result]
    assert not missing, (
        f"{what}, {len(words)} characters over three lines; the error result lacks "
        f"the lines {missing} and reads {result!r}: a tool's short words reach the "
        "model whole, every line of them (only words too long to send again are cut, "
        "and the result then says so)")


@pytest.mark.task("00.1")
def test_an_error_result_names_the_tool_whose_call_failed(lesson):
    """From an error result alone the model must tell what went wrong, and a reply
    may hold several calls: the result for arguments that could not be read, and the
    result for a tool that failed, name the tool the model called, as the result for
    a tool the town does not have names it. Without the name, 'the arguments are not
    valid JSON' or 'RuntimeError: the purse is torn' says neither which call nor
    whose failure it was, to the model or to a person reading the log."""
    def count_gold(purse):
        raise RuntimeError("the purse is torn")

    for arguments, happened in (
            ("{purse: left", "sent the arguments '{purse: left', which are no JSON"),
            ('{"purse": "left"}', "the tool raised RuntimeError('the purse is torn')")):
        what = f"the model called count_gold and {happened}"
        result = run_call(lesson, FewTools(count_gold=count_gold),
                          tool_call("count_gold", arguments), what)
        assert_error_result(result, what)
        assert "count_gold" in result, (
            f"{what}; the error result {result!r} does not name the tool: the model "
            "reads that something failed, not that it was its call of count_gold "
            "(the result of every failed call says which tool it called)")


@pytest.mark.task("00.1")
@pytest.mark.parametrize("arguments, size", [     # none is ever closed: no JSON
    ('{"item": "' + "rope, " * 20_000, "120 KB"),
    ('{"item": "' + "rope, " * 330, "1,990 characters"),
    ('{"item": "a rope, a torch, a lamp and a map of the cave' + "\n" * 100_000,
     "100 KB (nearly all line breaks)")], ids=["120KB", "1990", "line-breaks"])
def test_long_unreadable_arguments_are_quoted_only_in_part(lesson, town, arguments,
                                                           size):
    """A model stuck repeating itself can send 100 KB of broken arguments: the error
    quotes their start, so the model sees what it sent, and not all of it, which would
    fill every later request; and it says that it cut them, or the model takes the
    start for all it sent. Arguments just short of 2,000 characters too, and
    arguments of line breaks, which a quote writes as two characters each: the result
    stays well under 2,000."""
    what = f"the arguments were {size} of text that is no JSON"
    result = run_call(lesson, town, tool_call("buy", arguments), what)

    assert_error_result(result, what)
    assert arguments[:40] in result, (
        "the error result should quote the start of what the model sent, so that it "
        f"sees what it got wrong; it begins {result[:300]!r}")
    assert len(result) < 2_000, (
        f"the arguments were {len(arguments):,} characters, and the error result "
        f"quoting them is {len(result):,}: it goes back to the model with every later "
        "request, and a start is enough for the model to see what it sent")
    assert says_it_was_cut(result), (
        f"{what}; the error result quotes their start and never says that they went "
        "on (no word such as 'cut', no '...', no length): the model takes the start "
        f"for all it sent; got {result!r}")
    assert town.inventory == [], (
        "the arguments could not be read, so nothing should be bought; the inventory "
        f"is {town.inventory}")


@pytest.mark.task("00.1")
def test_unreadable_arguments_of_a_usual_length_are_quoted_whole(lesson, town):
    """Unreadable arguments of a usual length are quoted whole, between quote marks,
    and the result says nothing of a cut: a note that something was left out, where
    nothing was, sends the model looking for a rest it never wrote. A length is the
    model's letters, in any script: Japanese text of the same length (three bytes a
    letter in UTF-8, six characters a letter as JSON escapes) is as usual as English."""
    for sent in ('{"item": "coil of elven rope, forty feet", "shop": "the mill by the '
                 'cave", count: 2}',
                 '{"品物": "エルフの綱、四十フィート、洞窟の北の水車小屋のそば'
                 'の店で買った丈夫で長くて軽いもの", "店": "洞窟の北にある古い'
                 '水車小屋のそばの店", "数": 二}'):
        what = f"the arguments were {sent!r} ({len(sent)} characters), no JSON"
        result = run_call(lesson, town, tool_call("buy", sent), what)

        assert_error_result(result, what)
        assert re.search(r"""(['"`])""" + re.escape(sent) + r"\1", result), (
            f"{what}; arguments of {len(sent)} characters are of a usual length, and "
            "the error result should quote them whole, between quote marks, for the "
            f"model to see what it sent; got {result!r}")
        assert not says_it_was_cut(result), (
            f"{what}; the error result quotes them whole, yet says that something was "
            "left out (a word such as 'cut', a '...' or a length): the model looks for "
            f"a rest it never sent (a length counts the letters the model wrote, not "
            f"the bytes that encode them); got {result!r}")


@pytest.mark.task("00.1")
@pytest.mark.parametrize("arguments, what", [
    ("[" + '"rope", ' * 20_000 + '"rope"]', "a JSON list of 20,000 ropes"),
    (json.dumps("rope, " * 20_000), "a JSON string of 120 KB"),
    (json.dumps(json.dumps({"item": "rope", "note": "rope, " * 20_000})),
     "an object of 120 KB encoded twice")], ids=["list", "string", "encoded-twice"])
def test_long_arguments_that_are_no_object_give_a_short_result(lesson, town,
                                                               arguments, what):
    """Long arguments that are JSON but no object are refused like any others, in a
    result that quotes at most their start: it goes back with every later request."""
    result = run_call(lesson, town, tool_call("buy", arguments), f"the arguments were "
                      f"{what}")

    assert_error_result(result, f"the arguments were {what}, no object")
    assert len(result) < 2_000, (
        f"the arguments were {what}, {len(arguments):,} characters, and the error "
        f"result is {len(result):,}: it goes back to the model with every later "
        "request, so a long text is quoted only in part; it begins "
        f"{result[:200]!r}")


@pytest.mark.task("00.1")
def test_a_tools_failure_on_long_arguments_gives_a_short_result(lesson):
    """A tool may fail on long arguments that were fine: its result, like any other,
    quotes at most the start of what was sent."""
    def buy(item):
        raise ValueError("the shop is closed")

    arguments = json.dumps({"item": "rope, " * 20_000})
    result = run_call(lesson, FewTools(buy=buy), tool_call("buy", arguments),
                      "the tool raised ValueError on 120 KB of arguments")

    assert_error_result(result, "the tool raised ValueError")
    assert "the shop is closed" in result, (
        f"the arguments were {len(arguments):,} characters of a JSON object, and fine: "
        "the tool should have run on them, however long, and its failure ('the shop "
        "is closed') be the result; the result does not carry the tool's words, it "
        f"begins {result[:300]!r}")
    assert len(result) < 2_000, (
        f"the tool failed on arguments of {len(arguments):,} characters (which were "
        f"fine), and the error result is {len(result):,}: it goes back to the model "
        "with every later request, so what was sent is quoted only in part, if at "
        f"all; it begins {result[:200]!r}")


# What tells the model that a quote holds only the start of what it sent: a word for it
# (cut, truncated, shortened, omitted, "...", more), a size in kilobytes, or a number of
# four digits or more (how long it was, or how much was left out).
SAYS_CUT = re.compile(r"\bcut\b|truncat|shorten|omit|elid|\.\.\.|…|\bmore\b|too long|"
                      r"\d\s*(?:K|k|Ki)B\b|\d[\d,._ ]*\d{3}\b", re.IGNORECASE)


def says_it_was_cut(result):
    """Does `result` tell the model that it holds only the start of what was sent? (The
    long texts the tests send hold no such word and no digit: only the result's own
    words can say it.)"""
    return bool(SAYS_CUT.search(result))


@pytest.mark.task("00.1")
@pytest.mark.parametrize("name", [None, 7, ["buy"], {"name": "buy"}], ids=repr)
def test_a_name_that_is_no_text_is_told_to_the_model_as_it_came(lesson, name):
    """A server's slip can send a call whose tool name is null, a number or a list
    (JSON lets it). No tool has such a name: the call gets an error result, as for a
    name of no tool, showing what came (the model reads None, not the text 'None'),
    and nothing runs. The turn goes on: the server's slip is not the agent's crash.
    What came is never quoted as text ('None' between quote marks is a name the model
    never sent)."""
    ran = []

    def buy(item):
        ran.append(item)
        return f"bought the {item}"

    what = f"the server sent a call whose tool name is {name!r}, no text"
    result = run_call(lesson, FewTools(buy=buy), tool_call(name, '{"item": "rope"}'),
                      what)
    assert_error_result(result, what)
    assert not ran, f"{what}, and buy ran on it: no tool has a name that is no text"
    assert repr(name) in result, (
        f"{what}; the error result should show it as it came, {name!r}, for the "
        f"model to see what it sent; got {result!r}")
    as_text = [f"{mark}{name}{mark}" for mark in "'\"`"]
    assert not any(quoted in result for quoted in as_text), (
        f"{what}; the error result quotes it as if it were the text {str(name)!r}: "
        f"the model reads that it sent a name it never sent, and tries again with "
        f"the same slip. Show it as Python shows the value, {name!r}; got {result!r}")
    assert "buy" in result.replace(repr(name), ""), (
        f"{what}; the error result should list the tools there are (buy), for the "
        f"model to pick one; got {result!r}")


@pytest.mark.task("00.1")
def test_a_long_name_of_no_tool_is_quoted_only_in_part(lesson):
    """A model stuck repeating itself can send a tool name of 100 KB. The error result
    goes back with every later request, so it stays short: it quotes the name's start
    between quote marks, says that the name was cut, and lists the tools the town has,
    for the model to pick one. A name as long as real tools' names get (64 characters)
    is quoted whole. A name that is no text (a list the model repeated) is shown as
    Python shows it, and only its start too."""
    ran = []

    def pay(item):
        ran.append(item)
        return f"paid for the {item}"

    tools = FewTools(pay=pay, buy=pay)
    name = "fly_to_the_cave_" * 6_400
    what = (f"the model called a tool whose name is {len(name):,} characters "
            "('fly_to_the_cave_' again and again), and the town has only pay and buy")
    result = run_call(lesson, tools, tool_call(name, '{"item": "rope"}'), what)

    assert_error_result(result, what)
    assert len(result) < 2_000, (
        f"{what}; the error result is {len(result):,} characters: it goes back to the "
        "model with every later request, so the name is quoted only in part; it "
        f"begins {result[:200]!r}")
    quotes = [match.group(2) for match in re.finditer(
        r"""(['"`])(""" + re.escape(name[:40]) + r""".*?)\1""", result)]
    assert any(name.startswith(quoted) for quoted in quotes), (
        f"{what}; the error result should quote the name's start between two quote "
        "marks of the same kind (the closing one right after the part quoted), so "
        f"that the model sees the name it sent; got {result!r}")
    assert says_it_was_cut(result), (
        f"{what}; the error result quotes the name's start and never says that the "
        "name went on (no word such as 'cut', no '...', no length): the model takes "
        f"the start for the whole name it sent; got {result!r}")
    assert "pay" in result and "buy" in result, (
        f"{what}; the error result should still name the tools the town has, pay and "
        f"buy, for the model to call one of them; got {result!r}")
    assert ran == [], f"{what}, and a tool ran: {ran}"
    name = "walk_to_the_cave_north_of_the_mill_and_light_the_torch_at_the_do"
    what = f"the model called {name!r} ({len(name)} characters), which the town lacks"
    result = run_call(lesson, tools, tool_call(name, "{}"), what)
    assert_error_result(result, what)
    assert re.search(r"""(['"`])""" + re.escape(name) + r"\1", result), (
        f"{what}; a name of {len(name)} characters is as long as real tools' names "
        "get, and the error result should quote it whole, in quotes, for the model to "
        f"see the name it got wrong; got {result!r}")
    name = ["fly_to_the_cave"] * 6_400
    what = (f"the server sent a call whose tool name is a list, no text, shown as "
            f"Python shows it {len(repr(name)):,} characters long")
    result = run_call(lesson, tools, tool_call(name, '{"item": "rope"}'), what)
    assert_error_result(result, what)
    assert len(result) < 2_000, (
        f"{what}; the error result is {len(result):,} characters: whatever the model "
        "sent, a name that is no text too, it shows only its start, for the result "
        f"goes back with every later request; it begins {result[:200]!r}")
    assert repr(name)[:40] in result and says_it_was_cut(result), (
        f"{what}; the error result should show the start of it as it came and say "
        f"that it was cut; got {result!r}")
    assert ran == [], f"{what}, and a tool ran: {ran}"


@pytest.mark.task("00.1")
def test_a_name_of_no_tool_is_answered_with_every_tool_there_is(lesson):
    """Only what the model sent is cut to keep an error result short: the names of
    the tools are the harness's own, the model's one way to a call that works, and a
    name of no tool comes back with all of them, however many the harness has."""
    ran = []

    def look(**place):
        ran.append(place)
        return "you see the mill"

    names = [f"look_at_place_number_{n:02}" for n in range(40)]
    what = (f"the harness has {len(names)} tools ({len(', '.join(names))} characters "
            "of names), and the model called 'fly', which it lacks")
    result = run_call(lesson, FewTools(**dict.fromkeys(names, look)),
                      tool_call("fly", "{}"), what)
    assert_error_result(result, what)
    missing = [name for name in names if name not in result]
    assert not missing, (
        f"{what}; the error result should list every tool there is, for the model to "
        f"pick one, and leaves out {len(missing)} of them ({missing[:3]} ...): only "
        f"what the model sent is cut, not the names it may call; got {result!r}")
    assert ran == [], f"{what}, and a tool ran: {ran}"


@pytest.mark.task("00.1")
def test_a_long_parameter_the_tool_does_not_have_is_named_only_in_part(lesson):
    """The name of a parameter the tool does not have is the model's too, and may be
    100 KB (Python's TypeError quotes it whole): the error result names its start and
    says it was cut, in a result that stays short, and the tool does not run."""
    bought = []

    @as_a_tool_module_defines_it
    def buy(item):
        bought.append(item)
        return f"You bought a {item}."

    parameter = "amount_" * 17_000
    sent = json.dumps({"item": "rope", parameter: 2})
    what = (f"buy(item) was called with 'item' and a parameter it does not have, whose "
            f"name is {len(parameter):,} characters ('amount_' again and again)")
    result = run_call(lesson, FewTools(buy=buy), tool_call("buy", sent), what)

    assert bought == [], f"{what}, and the tool ran anyway: {bought}"
    assert_error_result(result, what)
    assert len(result) < 2_000, (
        f"{what}; the error result is {len(result):,} characters: it goes back to the "
        "model with every later request, so the name is given only in part; it "
        f"begins {result[:200]!r}")
    assert parameter[:20] in result, (
        f"{what}; the error result should name the start of that parameter "
        f"({parameter[:20]!r}...), for the model to see which one it got wrong; got "
        f"{result!r}")
    assert says_it_was_cut(result), (
        f"{what}; the error result gives the name's start and never says that it went "
        "on (no word such as 'cut', no '...', no length): the model takes the start "
        f"for the whole name it sent; got {result!r}")


@pytest.mark.task("00.1")
def test_a_tools_long_words_are_told_only_in_part(lesson):
    """A tool's error may echo what the model sent: a shop that has no item named 120 KB
    of text says so, quoting it. The error result names the exception's type and the
    start of its words, says they were cut, and stays short; words of a usual length
    are told whole, in any script, and say nothing of a cut: a length is counted in
    the letters written, not in the bytes that encode them (three a letter, for
    Japanese in UTF-8)."""
    def buy(item):
        raise LookupError(f"the shop has no item {item}")

    item = "rope, " * 20_000
    what = (f"the tool buy raised LookupError('the shop has no item ' + {len(item):,} "
            "characters the model sent)")
    result = run_call(lesson, FewTools(buy=buy),
                      tool_call("buy", json.dumps({"item": item})), what)

    assert_error_result(result, what)
    assert len(result) < 2_000, (
        f"{what}; the error result is {len(result):,} characters: it goes back to the "
        "model with every later request, so the tool's words are told only in part; "
        f"it begins {result[:200]!r}")
    assert "LookupError" in result and "the shop has no item rope, rope" in result, (
        f"{what}; the error result should name the exception's type, LookupError, and "
        "the start of its words ('the shop has no item rope, rope...'), for the model "
        f"to know what went wrong; got {result!r}")
    assert says_it_was_cut(result), (
        f"{what}; the error result tells the start of the tool's words and never says "
        "that they went on (no word such as 'cut', no '...', no length): the model "
        f"takes them for all the tool said; got {result!r}")
    for item in ("coil of elven rope, forty feet, from the shop by the mill",
                 "洞窟の北にある古い水車小屋のそばの店で売っている丈夫なエルフの"
                 "綱、四十フィート、松明と火打ち石と洞窟の地図と油の小瓶と小さな鈴"
                 "つき"):
        words = f"the shop has no item {item}"
        what = (f"the tool buy raised LookupError({words!r}), {len(words)} "
                "characters, words of a usual length")
        result = run_call(lesson, FewTools(buy=buy),
                          tool_call("buy", json.dumps({"item": item})), what)
        assert words in result, (
            f"{what}, and the error result should tell them whole; got {result!r}")
        assert not says_it_was_cut(result), (
            f"{what}; the error result tells them whole, yet says that something was "
            "left out (a word such as 'cut', a '...' or a length): the model looks for "
            "words the tool never said (a length counts letters, not the bytes that "
            f"encode them); got {result!r}")


def counts_bytes_as_letters(result, text):
    """Does `result` give the size of `text` in UTF-8 bytes as a number of characters
    or letters? (For text beyond ASCII the two differ: a letter of Japanese is three
    bytes.) A design may count in bytes, if it says bytes."""
    digits = str(len(text.encode()))
    size = r"[,._ \u202f]?".join(digits)
    return bool(re.search(r"(?<![\d,._])" + size + r"(?![\d,._]\d)\s*"
                          r"(?:characters|chars|letters)", result, re.IGNORECASE))


@pytest.mark.task("00.1")
def test_a_long_text_in_another_script_is_cut_on_a_letter_and_told_in_letters(
        lesson, town):
    """Unreadable arguments and a tool's words in Japanese, thousands of letters long,
    are told only in part, saying so: the part ends on a whole letter (nothing the
    model or the tool never wrote), and a result that says how long the text was in
    characters counts the characters, not the bytes of UTF-8 (three times as many
    here): the model would look for a rest three times as long as what it sent."""
    sent = '{"item": "' + "洞窟の松明、" * 400          # never closed: no JSON

    def buy(item):
        raise LookupError(f"the shop has no item {item}")

    words = f"the shop has no item {'洞窟の松明、' * 400}"
    for text, what, tools, arguments in (
            (sent, f"the arguments were {len(sent):,} characters of Japanese text, "
             "no JSON", town, sent),
            (words, f"the tool buy raised LookupError of {len(words):,} characters, "
             "Japanese text", FewTools(buy=buy),
             json.dumps({"item": "洞窟の松明、" * 400}, ensure_ascii=False))):
        result = run_call(lesson, tools, tool_call("buy", arguments), what)
        assert_error_result(result, what)
        assert text[:30] in result and says_it_was_cut(result), (
            f"{what}; the error result should tell its start, its letters as letters, "
            f"and say that it was cut; it begins {result[:300]!r}")
        strange = sorted({c for c in result if not c.isascii() and c not in text})
        assert not strange, (
            f"{what}; the error result holds {strange}, which no one wrote: a text "
            "cut in bytes rather than letters breaks a letter in two; the result is "
            f"{result[:300]!r}")
        assert not counts_bytes_as_letters(result, text), (
            f"{what} ({len(text.encode()):,} bytes of UTF-8); the error result gives "
            f"{len(text.encode()):,} as its number of characters: a length in "
            "characters counts the letters, and the model looks for a rest three "
            f"times as long as the text; got {result[:400]!r}")


@pytest.mark.task("00.1")
def test_arguments_nested_deeper_than_the_reader_goes_are_refused(lesson, town):
    """A small model that repeats itself can open a hundred thousand lists and close
    none: read_arguments refuses that like any other unreadable text, with ValueError,
    and run_tool turns it into an error result. Lists nested some hundreds deep and
    closed are JSON the reader takes: they are read, or refused with ValueError, and
    nothing that looks at what was read gives up on its depth with another error."""
    arguments = "[" * 100_000
    try:
        lesson.read_arguments(arguments)
    except ValueError:
        pass
    except RecursionError as error:
        pytest.fail("read_arguments('[' * 100_000) let "
                    f"{type(error).__name__} ({error}) escape, where a ValueError "
                    "saying what is wrong was expected: "
                    "run_tool and normalize_reply take ValueError as the model's "
                    "mistake, and anything else crashes the agent", pytrace=False)
    else:
        pytest.fail("read_arguments('[' * 100_000) returned, where a ValueError was "
                    "expected: it is no JSON object", pytrace=False)
    what = "the arguments were 100,000 '[' and nothing else"
    result = run_call(lesson, town, tool_call("buy", arguments), what)
    assert_error_result(result, what)
    assert arguments[:40] in result and len(result) < 2_000, (
        f"{what}: the error result should quote their start ({arguments[:40]!r}), so "
        "that the model sees what it sent, in a result well under 2,000 characters, "
        f"since it goes back with every later request; it is {len(result):,} "
        f"characters and begins {result[:200]!r}")
    assert says_it_was_cut(result), (
        f"{what}: the error result quotes their start and never says that they went "
        "on (no word such as 'cut', no '...', no length): the model takes the start "
        f"for all it sent; got {result[:600]!r}")
    # Nested deep, but closed: JSON Python's reader takes. Read or refused, whatever
    # looks at what was read must not itself give up on its depth.
    deep = '{"item": ' + "[" * 600 + "]" * 600 + "}"
    try:
        lesson.read_arguments(deep)
    except ValueError:
        pass
    except RecursionError as error:
        pytest.fail("read_arguments got an object whose one argument is a list nested "
                    "600 deep, JSON that Python's reader takes, and let "
                    f"{described(error)} escape: read or refused (with ValueError), "
                    "arguments never crash the agent, however deep what was read is",
                    pytrace=False)


@pytest.mark.task("00.1")
@pytest.mark.parametrize("arguments", [
    '{"item": NaN}', '{"item": "rope", "count": Infinity}', '{"gold": -Infinity}',
    '{"count": 1e999}', '{"gold": -1e999}', {"item": float("nan")},
    {"count": float("inf")}, {"order": [{"count": float("nan")}]},
    '{"item": NaN, "note": "' + "rope, " * 20_000 + '"}',
    {"item": float("nan"), "note": "rope, " * 20_000}],
    ids=["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "object-NaN",
         "object-Infinity", "object-nested-NaN", "long-NaN", "long-object-NaN"])
def test_arguments_holding_nan_or_infinity_are_unreadable(lesson, town, arguments):
    """NaN and Infinity are not JSON: Python's reader takes them (and reads 1e999 as
    Infinity, -1e999 as -Infinity), a strict provider refuses a stored call that holds
    them. Arguments holding one anywhere, as text or as an object, are refused like
    any unreadable arguments, the tool does not run, and the result quotes what was
    sent: whole when it is short, saying nothing of a cut; else only its start, saying
    that it was cut."""
    try:
        got = lesson.read_arguments(arguments)
    except ValueError:
        pass
    else:
        pytest.fail(f"read_arguments({str(arguments)[:60]!r}) returned "
                    f"{str(got)[:60]}, where a "
                    "ValueError was expected: NaN and Infinity are not JSON, and a "
                    "call stored with them is one a strict provider refuses with every "
                    "later request", pytrace=False)
    what = f"the arguments {str(arguments)[:60]!r} hold a number JSON does not have"
    result = run_call(lesson, town, tool_call("buy", arguments), what)
    assert_error_result(result, what)
    if isinstance(arguments, str):
        assert arguments[:40] in result, (
            f"{what}: the error result should quote the start of what the model sent "
            f"({arguments[:40]!r}), so that it sees what it got wrong; it begins "
            f"{result[:300]!r}")
        if len(arguments) <= 200:
            assert re.search(r"""(['"`])""" + re.escape(arguments) + r"\1", result), (
                f"{what}: the error result should quote them as the model wrote them, "
                "once, between two quote marks of the same kind, as it quotes any "
                "arguments that could not be read (a quote of their quote adds marks "
                f"and backslashes the model never wrote); got {result!r}")
    else:
        first = next(iter(arguments))
        assert first in result, (
            f"{what}: they came as an object, and the error result should quote its "
            f"start (its first argument, {first!r}, included), so that the model sees "
            f"which of its arguments it got wrong; it begins {result[:300]!r}")
    assert len(result) < 2_000, (
        f"{what}; they are {len(str(arguments)):,} characters, and the error result "
        f"quoting them is {len(result):,}: it goes back to the model with every later "
        "request, and a start is enough for the model to see what it sent")
    # The quote alone does not say what was wrong: 1e999 is a number to any reader
    # (only once read is it Infinity), and NaN may look like a word. Past the quote
    # of what was sent, the result names the value JSON does not have.
    shown = arguments if isinstance(arguments, str) else repr(arguments)
    told = result
    for end in range(min(len(shown), len(result)), 0, -1):
        if shown[:end] in told:
            told = told.replace(shown[:end], "")
            break
    assert re.search(r"nan|infinit|finite|too large|out of range|overflow", told,
                     re.IGNORECASE), (
        f"{what}; the error result quotes them and never says what was wrong with "
        "them, past the quote (no word of NaN or Infinity, of a number not finite "
        f"or too large): {result!r}. From the result alone the model must tell what "
        "went wrong, and text that reads as JSON, quoted, does not tell it")
    if len(str(arguments)) > 2_000:
        assert says_it_was_cut(result), (
            f"{what}; they are {len(str(arguments)):,} characters, and the error "
            "result quotes their start and never says that they went on (no word such "
            "as 'cut', no '...', no length): the model takes the start for all it "
            f"sent; got {result!r}")
    else:
        assert not says_it_was_cut(result), (
            f"{what}; they are {len(str(arguments))} characters, quoted whole, and the "
            "error result says that something was left out (a word such as 'cut', a "
            f"'...' or a length): the model looks for a rest it never sent; got "
            f"{result!r}")
    assert town.inventory == [], (
        f"{what}: they cannot be read, so nothing should be bought; the inventory is "
        f"{town.inventory}")


@pytest.mark.task("00.1")
def test_arguments_encoded_twice_are_a_string_not_an_object(lesson, town):
    """A server may encode the arguments twice: JSON text of a string whose text is
    the object. That is a string, refused like any JSON that is no object, never read
    a second time: the tool does not run, and the result tells the model it sent no
    object."""
    arguments = json.dumps(json.dumps({"item": "rope"}))      # '"{\\"item\\": ..."'
    try:
        got = lesson.read_arguments(arguments)
    except ValueError:
        pass
    else:
        pytest.fail(f"read_arguments({arguments!r}) returned {got!r}, where a "
                    "ValueError was expected: that text is JSON of a string, not of an "
                    "object, and the arguments of a call are an object", pytrace=False)
    what = f"the arguments were {arguments!r}, a string holding an object's text"
    result = run_call(lesson, town, tool_call("buy", arguments), what)
    assert_error_result(result, what)
    assert "object" in result.lower(), (
        f"{what}: the error result should tell the model that its arguments were no "
        f"object; it never says 'object': {result!r}")
    assert town.inventory == [], (
        f"{what}: the tool should not run, and the inventory is {town.inventory}")


@pytest.mark.task("00.1")
@pytest.mark.parametrize("arguments", ["", "{}", None])
def test_a_tool_without_parameters_runs_with_empty_arguments(lesson, arguments):
    """A call to a tool that takes nothing may carry "" or null as arguments, which
    mean {}: it runs like any call, and its failure is an error result like any."""
    result = lesson.run_tool(FewTools(look_around=lambda: "You see the town square."),
                             tool_call("look_around", arguments))

    assert result == "You see the town square.", (
        f"a tool with no parameters, called with arguments {arguments!r} (some "
        "servers send an empty string for no arguments), should run and return its "
        f"text; got {result!r}")

    def look_around():
        raise OSError("the map is torn")

    what = (f"a tool with no parameters, called with arguments {arguments!r}, raised "
            "OSError('the map is torn')")
    result = run_call(lesson, FewTools(look_around=look_around),
                      tool_call("look_around", arguments), what)
    assert_error_result(result, what)


@pytest.mark.task("00.1")
def test_a_tool_result_is_always_text(lesson):
    """A tool that returns a number still gives the model text: a string; one that
    returns text gives it as it is, however long; one that returns anything else (a
    list, a set, None, bytes, a Decimal, a path) gives its text as Python writes it
    (str, not repr: 2.50 gold, not Decimal('2.50')), and it is its answer, not an
    error."""
    result = lesson.run_tool(FewTools(count_gold=lambda: 6),
                             tool_call("count_gold", "{}"))

    assert result == "6", (
        "a tool message's content must be a string (providers refuse a number "
        f"there); the tool returned the int 6 and run_tool gave {result!r} "
        f"({type(result).__name__}), where the text '6' was expected")
    result = lesson.run_tool(FewTools(count_gold=lambda: 0),
                             tool_call("count_gold", "{}"))
    assert result == "0", (
        "the tool returned the int 0 (no gold left), and run_tool gave "
        f"{result!r}, where the text '0' was expected: a value that is falsy is "
        "still the tool's answer, and the model must read it")
    import decimal
    import pathlib

    # Values whose text is not their repr: the text is the tool's answer
    for returned in (["rope", "torch"], {"a map of the cave"}, None,
                     b"a map of the cave", b"\x89PNG\r\n", decimal.Decimal("2.50"),
                     pathlib.PurePosixPath("maps/cave.txt")):
        result = run_call(lesson, FewTools(look=lambda value=returned: value),
                          tool_call("look", "{}"), f"the tool returned {returned!r}")
        assert result == str(returned), (
            f"the tool ran and returned {returned!r}, and run_tool gave {result!r}, "
            f"where its text as Python writes it, {str(returned)!r}, was expected: "
            "whatever a tool returns is its answer, never an error (it ran, and did "
            "what it does), and the model reads it as the tool gave it")
    told = "The elder speaks of the cave. " * 200
    result = lesson.run_tool(FewTools(talk_to=lambda: told), tool_call("talk_to", "{}"))
    assert result == told, (
        f"the tool answered {len(told):,} characters of text, and run_tool gave "
        f"{len(result) if isinstance(result, str) else result!r}"
        f"{' characters' if isinstance(result, str) else ''}: a tool's answer goes to "
        "the model whole, as the tool wrote it (only unreadable arguments are quoted "
        "in part)")


@pytest.mark.task("00.1")
def test_an_answer_that_cannot_be_made_text_is_an_error_result(lesson):
    """Making text of what a tool returned is part of running it: a value whose text
    cannot be made (its __str__ raises, as a library's object in a broken state may)
    is the tool's failure, an error result that says what went wrong, never an
    exception that crashes the agent after the tool ran."""
    class Torn:
        def __str__(self):
            raise RuntimeError("the map is torn in two")

    what = ("the tool read_map returned an object whose text cannot be made (str() "
            "of it raises RuntimeError('the map is torn in two'))")
    result = run_call(lesson, FewTools(read_map=lambda: Torn()),
                      tool_call("read_map", "{}"), what)

    assert_error_result(result, what)
    assert "the map is torn in two" in result, (
        f"{what}: the error result should carry what the failure says, as for any "
        f"failure of the tool's, so that the model knows what went wrong; got "
        f"{result!r}")


@pytest.mark.task("00.3")
@pytest.mark.key
@pytest.mark.task("00.2")
def test_a_plain_answer_ends_the_turn(lesson, model, town):
    """A reply with text and no tool calls ends the turn: run() returns that text after
    one model call, and the history holds the question and the answer."""
    model.add(say("Welcome to town, adventurer."))
    agent = new_agent(lesson, model, town)

    answer = agent.run("Hello!\n")

    assert answer == "Welcome to town, adventurer.", (
        f"run() should return the model's text, got {answer!r}"
    )
    assert len(model.requests) == 1, (
        f"one plain answer needs one model call, the agent made {len(model.requests)}"
    )
    expected = [
        {"role": "user", "content": "Hello!\n"},
        {"role": "assistant", "content": "Welcome to town, adventurer."},
    ]
    if agent.messages != expected:
        which = ["the user's message, as the user wrote it", "the answer, as it came"]
        wrong = [f"{which[k]}: {want} expected, the history holds {got}"
                 for k, (got, want) in enumerate(zip(agent.messages, expected))
                 if got != want]
        pytest.fail(
            f"after one turn the history should hold {len(expected)} messages, each "
            "nothing more than what was said (a message recorded is never changed "
            f"after); it holds {len(agent.messages)}: "
            + ("; ".join(wrong) or f"got {agent.messages}"), pytrace=False)


@pytest.mark.key
@pytest.mark.task("00.2")
@pytest.mark.task("00.3")
def test_several_tool_calls_in_one_reply_are_each_answered_in_order(
    lesson, model, town
):
    """A reply may ask for several tools at once; each gets a result carrying its own
    tool_call_id, in the order of the calls, or the next request is rejected."""
    model.add(use(call("talk_to", npc="elder"), call("buy", item="torch")),
              say("Done."))
    agent = new_agent(lesson, model, town)

    agent.run("Ask the elder about the cave and buy a torch.")

    assert len(model.requests) == 2, (
        f"expected two model calls (tools, then the answer), got {len(model.requests)}"
    )
    second = model.requests[1]["messages"]
    calls = second[1]["tool_calls"]
    results = [m for m in second if m["role"] == "tool"]
    assert [r["tool_call_id"] for r in results] == [c["id"] for c in calls], (
        "each tool result must carry the id of the call it answers, in the order of "
        f"the calls; calls {[c['id'] for c in calls]}, results "
        f"{[r['tool_call_id'] for r in results]}"
    )
    assert "torch and a rope" in results[0]["content"], (
        f"the elder's words should be the first result, got {results[0]['content']!r}"
    )
    assert "You bought a torch" in results[1]["content"], (
        f"the purchase should be the second result, got {results[1]['content']!r}"
    )
    assert town.inventory == ["torch"], (
        f"the buy tool should really have run once, inventory is {town.inventory}"
    )


@pytest.mark.task("00.2")
def test_each_call_of_a_reply_runs_once_in_the_order_the_model_sent_them(
    lesson, model, town
):
    """Three calls of two tools in one reply, two of them alike: each runs exactly once
    (two torches are two purchases), in the model's order, and its result is the one
    its own call gave."""
    model.add(use(call("buy", item="torch"), call("talk_to", npc="elder"),
                  call("buy", item="torch")), say("Done."))
    ran = []

    def logged(name):
        def run(**arguments):
            ran.append((name, arguments))
            return f"{name} #{len(ran)}"
        return run

    tools = FewTools(buy=logged("buy"), talk_to=logged("talk_to"))
    tools.schemas = town.schemas
    agent = lesson.Agent(model.client(), model=model.model, tools=tools)

    agent.run("Buy a torch, ask the elder, buy another torch.")

    expected = [("buy", {"item": "torch"}), ("talk_to", {"npc": "elder"}),
                ("buy", {"item": "torch"})]
    assert ran == expected, (
        f"the model asked for {expected}, in that order, each once; the tools ran "
        f"{ran}. A call skipped or run twice buys too little or too much, and calls "
        "run out of order act on a world the model did not plan for")
    results = [m.get("content") for m in agent.messages if m.get("role") == "tool"]
    assert results == ["buy #1", "talk_to #2", "buy #3"], (
        "each result should be what its own call returned, in the order of the calls "
        f"(buy #1, talk_to #2, buy #3); the results recorded are {results}")


@pytest.mark.task("00.2")
def test_a_call_that_fails_does_not_stop_the_calls_after_it(lesson, model, town):
    """A reply's first call names a tool the town does not have, its second buys a
    torch: a failed call is answered with its error, and the calls after it still run
    and are answered, each under its own id."""
    model.add(use(call("fly", to="the cave"), call("buy", item="torch")),
              say("I walked, and bought a torch."))
    agent = new_agent(lesson, model, town)

    agent.run("Fly to the cave and buy a torch.")

    assert town.inventory == ["torch"], (
        "the reply called 'fly' (which the town does not have) and then buy a torch: "
        "the second call should still run after the first failed; inventory "
        f"{town.inventory}")
    assert len(model.requests) == 2, (
        f"expected two model calls (tools, then the answer), got {len(model.requests)}")
    second = model.requests[1]["messages"]
    calls = [c["id"] for m in second for c in m.get("tool_calls") or []]
    answered = [m.get("tool_call_id") for m in second if m.get("role") == "tool"]
    assert answered == calls, (
        f"the next request holds the calls {calls} and should answer each, in order; "
        f"its results answer {answered}. A call left without its result (because one "
        "before it failed) makes a provider refuse the request")


@pytest.mark.task("00.2")
def test_an_empty_tool_answer_reaches_the_model_empty(lesson, model, town):
    """A tool may answer with empty text (a note with nothing written on it): that is
    its answer, and the model reads it as the tool gave it. A word of the loop's own
    put in its place ('(no output)') is text no tool wrote, in the history and in
    every later request."""
    model.add(use(call("talk_to", npc="scribe")), say("The note is blank."))
    tools = FewTools(talk_to=lambda npc: "")
    tools.schemas = town.schemas
    asked = tool_call("talk_to", '{"npc": "scribe"}')
    alone = run_call(lesson, tools, asked, "the tool talk_to answered ''")
    if alone != "":
        fail_in("00.1", f"the tool talk_to answered '' (empty text), and run_tool "
                f"(task 00.1) returned {alone!r}: a tool's answer is told as it is")
    agent = lesson.Agent(model.client(), model=model.model, tools=tools)

    agent.run("Read the scribe's note.")

    sent = [m.get("content") for m in model.requests[-1]["messages"]
            if m.get("role") == "tool"]
    assert sent == [""], (
        "the tool talk_to answered '' (empty text), and run_tool returns '' for it; "
        f"the next request's results are {sent}: the loop records each result as "
        "run_tool gave it, the empty answer included, not words of its own")


@pytest.mark.task("00.2")
def test_a_long_tool_result_reaches_the_model_whole(lesson, model, town):
    """A tool's answer goes back to the model as the tool wrote it, however long: only
    the quotes of unreadable arguments are cut, never what a tool answered."""
    told = "The elder speaks of the cave, and of the dragon in it. " * 100
    model.add(use(call("talk_to", npc="elder")), say("The cave it is."))
    tools = FewTools(talk_to=lambda npc: told)
    tools.schemas = town.schemas
    agent = lesson.Agent(model.client(), model=model.model, tools=tools)

    agent.run("Ask the elder about the cave.")

    sent = [m.get("content") for m in model.requests[-1]["messages"]
            if m.get("role") == "tool"]
    assert sent == [told], (
        f"the elder answered {len(told):,} characters, and the next request's results "
        f"are {[len(text) if isinstance(text, str) else text for text in sent]} "
        "characters long: the model should read the tool's answer whole, as it was "
        "written")


@pytest.mark.task("00.2")
def test_tool_calls_are_run_even_when_finish_reason_says_stop(lesson, model, town):
    """Some servers answer finish_reason 'stop' together with tool calls: the calls
    still run, and the turn goes on to the answer, returned as the model wrote it."""
    model.add(use(call("buy", item="rope"), finish_reason="stop"), say("Bought.\n"))
    agent = new_agent(lesson, model, town)

    answer = agent.run("Buy a rope.")

    assert town.inventory == ["rope"], (
        "the reply had a tool call and finish_reason 'stop' (some servers send both): "
        "the call should have run and the turn gone on, but the rope was not bought; "
        f"inventory {town.inventory}, run() returned {answer!r}"
    )
    if answer != "Bought.\n":
        stored = agent.messages[-1].get("content") if agent.messages else None
        whose = ("00.2", "") if stored == "Bought.\n" else ("00.3", (
            f" (normalize_reply stored it as {stored!r}: nothing the model said may be "
            "changed)"))
        fail_in(whose[0], "after the rope was bought the model answered 'Bought.\\n', "
                "and run() should return that answer as the model wrote it, newline "
                f"and all; it returned {answer!r}{whose[1]}")


def result_sent_back(model, agent, what):
    """The last message of the request after the model's one call: the call's result.
    Fails in words, naming whose code it was, when no request followed the call."""
    if len(model.requests) >= 2:
        return model.requests[1]["messages"][-1]
    calls = [c for m in agent.messages if m.get("role") == "assistant"
             for c in m.get("tool_calls") or []]
    fail_in("00.2" if calls else "00.3",
            f"{what}, and the turn ended after {len(model.requests)} request(s), with "
            "no request carrying the call's result: "
            + ("the stored reply holds the call, and the loop (task 00.2) should have "
               "run it and asked again" if calls else
               "the stored reply holds no call at all, so nothing ran; normalize_reply "
               "(task 00.3) keeps every call the model sent, whatever the server "
               f"left out of it (the history is {agent.messages})"))


@pytest.mark.task("00.2")
@pytest.mark.task("00.1")
def test_an_unknown_tool_becomes_an_error_result_the_model_can_read(
    lesson, model, town
):
    """A call to a tool that does not exist becomes an error result naming it, so the
    model can correct itself instead of the agent crashing."""
    model.add(use(call("fly", to="the cave")), say("I cannot fly."))
    agent = new_agent(lesson, model, town)

    answer = agent.run("Fly to the cave.")

    result = result_sent_back(model, agent, "the model called 'fly'")
    assert result["role"] == "tool", (
        f"the request after the call should end with its result, it ends with {result}")
    assert_error_result(result["content"], "the model called 'fly', which the town "
                        "does not have")
    assert "fly" in result["content"], (
        "the error result should name the tool the model asked for, 'fly', so that "
        f"it knows which call was wrong; got {result['content']!r}")
    assert answer == "I cannot fly.", (
        "after an error result the loop goes on and the model answers 'I cannot fly.', "
        f"which run() should return; it returned {answer!r}")


@pytest.mark.task("00.1")
def test_a_tool_that_raises_becomes_an_error_result(lesson, model, town):
    """An exception inside a tool is the model's business, not the user's: it becomes an
    error result and the loop goes on."""
    # talk_to takes `npc`; `person` makes Python raise TypeError inside the call.
    model.add(use(raw_call("talk_to", '{"person": "elder"}')), say("Let me try again."))
    agent = new_agent(lesson, model, town)

    agent.run("Talk to the elder.")

    result = result_sent_back(model, agent, "the model called talk_to")
    assert result["role"] == "tool", (
        f"the request after the call should end with its result, it ends with {result}")
    assert_error_result(result["content"], "talk_to was called with 'person', a "
                        "parameter it does not have")
    assert "person" in result["content"], (
        "talk_to was called with 'person', a parameter it does not have, and the error "
        "result never names it: the model reads that something went wrong, not what, "
        "and sends the same call again. The tool's exception says it (TypeError: ... "
        f"unexpected keyword argument 'person'); the result is {result['content']!r}")


def names_the_limit(error, limit):
    """Fail, in words, unless MaxTurnsExceeded's message names the limit it reached."""
    said = str(error)
    assert re.search(rf"(?<![\d.]){limit}(?!\d|\.\d)", said) and re.search(
            r"turn|request|call", said, re.IGNORECASE), (
        f"with max_turns={limit}, MaxTurnsExceeded should name the limit it reached, "
        f"{limit} model calls, in words (turns, requests or calls, not a bare number), "
        f"so that whoever reads it knows which setting stopped the turn; it says "
        f"{said!r}")


@pytest.mark.task("00.2")
def test_max_turns_stops_a_model_that_never_stops_calling_tools(lesson, model, town):
    """A model that keeps calling tools is stopped after exactly max_turns model calls,
    with an error rather than an endless bill; a limit of 0 allows none."""
    model.script = lambda request: use(call("talk_to", npc="guard"),
                                       call("talk_to", npc="elder"))
    agent = new_agent(lesson, model, town, max_turns=3)

    with raises(lesson.MaxTurnsExceeded,
                "run() returned although the model was still calling tools after "
                "max_turns=3 model calls: the caller takes the task for done, where "
                "MaxTurnsExceeded was expected") as raised:
        agent.run("Keep talking.")
    assert len(model.requests) == 3, (
        "max_turns=3 allows exactly 3 model calls (each reply here asks for two "
        f"tools), the agent made {len(model.requests)}"
    )
    replies = [len(m.get("tool_calls") or []) for m in agent.messages
               if m.get("role") == "assistant"]
    assert replies == [2, 2, 2], (
        "the model answered 3 requests, each with a reply of two calls, and the "
        f"history holds {len(replies)} replies, with {replies} calls: each reply is "
        "recorded, the last one too, with its calls run and answered, so that the "
        "history is the whole turn as it happened (the next lesson saves it)")
    refused = [m.get("content") for m in agent.messages if m.get("role") == "tool"
               and str(m.get("content")).startswith("error:")]
    assert not refused, (
        "every call of the 3 replies should have run, the last reply's too (the limit "
        "counts model calls; the calls a reply asked for still run): the results "
        f"hold errors {refused[:2]}")
    asked = [c["id"] for m in agent.messages for c in m.get("tool_calls") or []]
    answered = [m.get("tool_call_id") for m in agent.messages if m["role"] == "tool"]
    assert sorted(answered) == sorted(asked), (
        "when MaxTurnsExceeded is raised, every call the history holds should have "
        "its result, so that the session can go on with the next message (a provider "
        f"refuses a call left unanswered); the calls {asked} got results for "
        f"{answered}")
    names_the_limit(raised.value, 3)
    # The same agent's next turn reaches the same limit, and its error names it: the
    # limit is the turn's, whatever the turns before it asked.
    with raises(lesson.MaxTurnsExceeded,
                "on the agent's second turn, run() returned although the model was "
                "still calling tools after max_turns=3 model calls, where "
                "MaxTurnsExceeded was expected") as again:
        agent.run("Keep talking, again.")
    said = str(again.value)
    assert re.search(r"(?<![\d.])3(?!\d|\.\d)", said), (
        "with max_turns=3, the agent's second turn gave up after its own 3 model "
        f"calls, and MaxTurnsExceeded says {said!r}: it should name the limit that "
        "turn reached, 3 (the turns before it count for nothing), so that whoever "
        "reads it knows which setting stopped the turn")

    before = len(model.requests)
    with raises(lesson.MaxTurnsExceeded,
                "run() returned with max_turns=0, where MaxTurnsExceeded was expected "
                "before any model call") as raised:
        idle = new_agent(lesson, model, town, max_turns=0)
        idle.run("Keep talking.")
    assert len(model.requests) == before, (
        "max_turns=0 allows no model call at all, and the agent made "
        f"{len(model.requests) - before}: the limit counts every call, the first one "
        "too")
    names_the_limit(raised.value, 0)
    said = {"role": "user", "content": "Keep talking."}
    assert idle.messages == [said], (
        "a turn that gives up keeps what it did, the user's message first, even when "
        "its limit allowed no model call: with max_turns=0 the history should be "
        f"[{said}], the user's message that was said, and it is {idle.messages}")


@pytest.mark.task("00.2")
def test_a_limit_below_zero_allows_no_model_call(lesson, model, town):
    """max_turns bounds the model calls of a turn: a limit below zero (a setting read
    from a file, mistyped) allows none, as 0 does, and the turn raises rather than
    asking the model with no bound at all (a count that waits to reach the limit
    exactly never reaches one below zero). It gives up as any turn at its limit
    does: with MaxTurnsExceeded, the one error a caller catches for the limit, and
    with the user's message in the history, as it was said."""
    model.add(say("Hello, traveller."))
    agent = new_agent(lesson, model, town, max_turns=-1)

    raised = None
    try:
        answer = agent.run("Hello?")
    except NotImplementedError:
        raise
    except Exception as error:
        answer, raised = None, error
    assert answer is None and not model.requests, (
        f"with max_turns=-1, run() made {len(model.requests)} model call(s) and "
        f"returned {answer!r}: a limit below zero allows no model call, as 0 does, and "
        "the turn raises (MaxTurnsExceeded): a limit that is never reached leaves a "
        "model that keeps calling tools asked for ever, on the user's bill")
    assert isinstance(raised, lesson.MaxTurnsExceeded), (
        f"with max_turns=-1, run() made no model call and raised {described(raised)}, "
        "where MaxTurnsExceeded was expected: a limit below zero is reached at once, "
        "as 0 is, and the turn gives up as any turn at its limit does (a caller that "
        "catches MaxTurnsExceeded, the one error the limit raises, does not catch "
        f"{type(raised).__name__}, and the program stops on a setting)")
    said = {"role": "user", "content": "Hello?"}
    assert agent.messages == [said], (
        "a turn that gives up keeps what it did, the user's message first, even when "
        "its limit allowed no model call: with max_turns=-1 the history should be "
        f"[{said}], the user's message that was said, and it is {agent.messages}")


@pytest.mark.task("00.2")
def test_a_turn_after_max_turns_gets_model_calls_of_its_own(lesson, model, town,
                                                            monkeypatch):
    """A turn that ran out of model calls ends the turn, not the agent: the user's
    next message gets max_turns model calls of its own, and is answered."""
    # Well-formed replies, stored as they came: the loop alone is tested here
    monkeypatch.setattr(lesson, "normalize_reply", stored_as_sent)
    model.add(use(call("talk_to", npc="guard")), say("The cave is north."))
    agent = new_agent(lesson, model, town, max_turns=1)

    with raises(lesson.MaxTurnsExceeded,
                "run() returned although the model was still calling tools after "
                "max_turns=1 model call, where MaxTurnsExceeded was expected"):
        agent.run("Find the cave.")
    before = len(model.requests)
    try:
        answer = agent.run("Where is it?")
    except lesson.MaxTurnsExceeded as error:
        pytest.fail(
            f"with max_turns=1, the first turn ran out of model calls; the next turn "
            f"raised MaxTurnsExceeded ({error}) after {len(model.requests) - before} "
            "model calls of its own, where the model would have answered its first: "
            "the limit counts the calls of one turn, and a turn that ran out does not "
            "use up the next one's", pytrace=False)
    assert answer == "The cave is north.", (
        "after a turn that ran out of model calls, the next turn's model answered "
        f"'The cave is north.', and run() returned {answer!r}")


@pytest.mark.task("00.2")
def test_a_turn_after_a_failed_model_call_gets_model_calls_of_its_own(lesson, model,
                                                                      town,
                                                                      monkeypatch):
    """A turn whose model call failed (the server answered 500 on its second request)
    ends there and uses up nothing of the next: the user's next message gets
    max_turns model calls of its own, and is answered."""
    # Well-formed replies, stored as they came: the loop alone is tested here
    monkeypatch.setattr(lesson, "normalize_reply", stored_as_sent)
    model.add(use(call("talk_to", npc="guard")), Fail(500),
              use(call("talk_to", npc="elder")), use(call("talk_to", npc="guard")),
              say("The cave is north."))
    agent = new_agent(lesson, model, town, max_turns=3)

    with raises(Exception, "the model answered the second request with HTTP 500, and "
                "run() went on as if it had answered: the caller should hear of the "
                "failure") as raised:
        agent.run("Find the cave.")
    if isinstance(raised.value, NotImplementedError) or not tells_of_the_500(
            raised.value):
        raise raised.value      # an error of run()'s own: the student should see it
    before = len(model.requests)
    try:
        answer = agent.run("Where is it?")
    except lesson.MaxTurnsExceeded as error:
        pytest.fail(
            "with max_turns=3, the first turn's second model call failed with HTTP "
            f"500; the next turn raised MaxTurnsExceeded ({error}) after "
            f"{len(model.requests) - before} model calls of its own, where the model "
            "would have answered its third: the limit counts the calls of one turn, "
            "and a turn that failed does not use up the next one's", pytrace=False)
    assert answer == "The cave is north.", (
        "after a turn whose model call failed, the next turn's model answered 'The "
        f"cave is north.' on its third request, and run() returned {answer!r}")


@pytest.mark.task("00.2")
def test_every_call_of_a_reply_with_many_calls_gets_its_result(lesson, model, town,
                                                              monkeypatch):
    """A reply may hold many calls (a model greeting the whole town at once): each
    runs and is answered, however many there are."""
    # Well-formed replies, stored as they came: the loop alone is tested here
    monkeypatch.setattr(lesson, "normalize_reply", stored_as_sent)
    npcs = ["elder", "guard", "mayor's daughter"] * 8
    model.add(use(*[call("talk_to", npc=npc) for npc in npcs]), say("Done."))
    agent = new_agent(lesson, model, town)

    agent.run("Talk to everyone.")

    asked = [c["id"] for m in agent.messages for c in m.get("tool_calls") or []]
    answered = [m.get("tool_call_id") for m in agent.messages if m["role"] == "tool"]
    assert answered == asked and len(asked) == len(npcs), (
        f"the model sent one reply of {len(npcs)} calls; the history holds "
        f"{len(asked)} calls and {len(answered)} results: every call the model asks "
        "for runs and is answered, however many a reply holds (a provider refuses a "
        "request with a call left without its result)")


@pytest.mark.task("00.2")
def test_each_turn_starts_afresh_with_its_message_and_its_max_turns(lesson, model,
                                                                    town):
    """max_turns bounds the model calls of one user message: an agent whose every
    turn needs two calls (a tool, then the answer) goes on for as many turns as the
    user has, with max_turns=2, each turn recorded from its user's message on (a
    message said twice is recorded twice, an empty one too)."""
    for day in range(3):
        model.add(use(call("talk_to", npc="elder")), say(f"Day {day + 1} done."))
    agent = new_agent(lesson, model, town, max_turns=2)
    expected = ["Ask the elder.", "Ask the elder.", ""]

    answers = []
    for day in range(3):
        try:
            answers.append(agent.run(expected[day]))
        except lesson.MaxTurnsExceeded as error:
            pytest.fail(f"with max_turns=2, turn {day + 1} needed 2 model calls (a "
                        f"tool, then the answer) and raised MaxTurnsExceeded ({error}) "
                        f"after {answers}: the limit is the model calls of one user "
                        "message, counted afresh each turn, not over the agent's "
                        "life", pytrace=False)
    assert answers == ["Day 1 done.", "Day 2 done.", "Day 3 done."], (
        f"three turns of two model calls each should answer in turn; got {answers}")
    asked = [m["content"] for m in agent.messages if m["role"] == "user"]
    assert asked == expected, (
        f"after three turns the history should hold each user message, in order, as "
        f"often as it was said, {expected}; it holds {asked}: every turn starts by "
        "recording its user's message, or the model answers a question it was never "
        "asked")


@pytest.mark.key
@pytest.mark.task("00.2")
def test_the_system_prompt_is_sent_first_but_never_stored(lesson, model, town):
    """The system prompt leads every request but is configuration, not conversation: it
    never enters the history that later lessons save."""
    model.add(say("Aye."))
    agent = new_agent(lesson, model, town, system="You are a brave adventurer.")

    agent.run("Ready?")

    sent = model.requests[0]["messages"]
    assert sent[0] == {"role": "system", "content": "You are a brave adventurer."}, (
        "every request should start with the system prompt, {'role': 'system', "
        "'content': 'You are a brave adventurer.'}; the first message sent was "
        f"{sent[0]}")
    told = [m for m in sent if m.get("role") == "system"]
    assert len(told) == 1, (
        f"the request carried the system prompt {len(told)} times: {told}; it is "
        "sent once, first, by ask_model, and the history never holds it, not even "
        "for the time of a request")
    stored = [m for m in agent.messages if m.get("role") == "system"]
    assert not stored, (
        "the system prompt is configuration, not history: self.messages should hold "
        f"no system message, and it holds {stored}")


@pytest.mark.task("00.2")
def test_the_system_prompt_leads_every_request_of_every_turn(lesson, model, town):
    """The model keeps nothing between requests: the system prompt leads every one of
    them, the requests after a tool result and those of a later turn too."""
    model.add(use(call("talk_to", npc="elder")), say("Aye."), say("Onward."))
    agent = new_agent(lesson, model, town, system="You are a brave adventurer.")

    agent.run("Ask the elder.")
    agent.run("Ready?")

    prompt = {"role": "system", "content": "You are a brave adventurer."}
    led = [request["messages"][:1] == [prompt] and [
        m for m in request["messages"] if m.get("role") == "system"] == [prompt]
        for request in model.requests]
    assert led == [True] * 3, (
        "two turns made 3 requests (a tool call, then the answer; then a second "
        "turn's answer), and each should start with the system prompt, once: the "
        "model remembers nothing between requests. Request by request, it led "
        f"{led}")


@pytest.mark.key
@pytest.mark.task("00.2")
def test_a_new_agent_remembers_nothing(lesson, model, town):
    """A second agent starts with an empty history: everything the first heard is lost
    with it, the problem the rest of the course solves."""
    model.add(
        use(call("talk_to", npc="elder")),
        say("The elder says: torch and rope."),
        say("Who?"),
    )
    lesson.Agent(model.client(), model=model.model, tools=town).run(
        "Ask the elder about the cave."
    )

    tomorrow = new_agent(lesson, model, town)
    tomorrow.run("What did the elder say?")

    sent = model.requests[-1]["messages"]
    assert sent == [{"role": "user", "content": "What did the elder say?"}], (
        "a new agent starts from an empty list, so its first request should carry only "
        f"its own question; it carried {len(sent)} messages: {sent}. (Everything the "
        "first agent heard is gone: that is the problem the next lessons solve.)")


class FewTools:
    """Tools for one test: the given functions and no schemas."""

    def __init__(self, **functions):
        self.schemas = []
        self.functions = functions


def tool_call(name, arguments):
    return {"id": "call_1", "type": "function",
            "function": {"name": name, "arguments": arguments}}


@pytest.mark.task("00.2")
def test_a_reply_with_text_and_tool_calls_runs_the_tools(lesson, model, town):
    """A reply with text that also asks for tools is not a final answer: run them."""
    model.add(use(call("buy", item="rope"), content="Let me buy that for you."),
              say("Bought."))
    agent = new_agent(lesson, model, town)

    answer = agent.run("Buy a rope.")

    if town.inventory != ["rope"]:
        said = ("the reply had text ('Let me buy that for you.') and a tool call; "
                "some servers send both. Only a reply without tool calls ends the "
                f"turn, so the rope should have been bought; inventory is "
                f"{town.inventory} and run() returned {answer!r}")
        stored = agent.messages[1] if len(agent.messages) > 1 else {}
        if stored.get("role") == "assistant" and not stored.get("tool_calls"):
            fail_in("00.3", f"{said}. normalize_reply stored that reply as {stored}, "
                    "without its call: text that comes with calls stays with them "
                    "(task 00.3)")
        fail_in("00.2", said)
    assert answer == "Bought.", (
        f"the turn ends with the answer after the tool result, got {answer!r}")


@pytest.mark.task("00.1")
def test_ctrl_c_inside_a_tool_stops_the_agent(lesson):
    """Ctrl-C (KeyboardInterrupt) while a tool runs stops the program: no tool error."""
    def wait_for_dawn():
        raise KeyboardInterrupt

    try:
        result = lesson.run_tool(FewTools(wait_for_dawn=wait_for_dawn),
                                 tool_call("wait_for_dawn", "{}"))
    except KeyboardInterrupt:
        return
    pytest.fail("the user pressed Ctrl-C while a tool ran, and run_tool returned "
                f"{result!r} instead of letting KeyboardInterrupt stop the program: "
                "the user cannot stop the agent while a tool runs")


@pytest.mark.task("00.1")
def test_a_tool_that_ends_the_program_ends_it(lesson):
    """A tool that asks the program to exit (SystemExit) ends it, as Ctrl-C does: a
    tool's failures are the model's to read, not what stops the program."""
    def leave_town():
        raise SystemExit("The adventurer goes home.")

    try:
        result = lesson.run_tool(FewTools(leave_town=leave_town),
                                 tool_call("leave_town", "{}"))
    except SystemExit:
        return
    pytest.fail("the tool leave_town asked the program to exit (SystemExit), and "
                f"run_tool returned {result!r}: the program goes on as if a tool had "
                "failed, where whoever wrote the tool meant it to end; only a tool's "
                "failures are the model's to read", pytrace=False)


@pytest.mark.task("00.2")
def test_ctrl_c_inside_a_tool_stops_the_turn(lesson, model, town):
    """Ctrl-C while a tool runs stops run() too: the loop does not turn it into a
    result and go on asking the model. A call of the same reply that ran before it
    keeps its result: it happened (a torch was bought)."""
    def wait_for_dawn():
        raise KeyboardInterrupt

    model.add(use(call("buy", item="torch"), call("wait_for_dawn")),
              say("Good morning."))
    tools = FewTools(buy=town.functions["buy"], wait_for_dawn=wait_for_dawn)
    tools.schemas = town.schemas
    agent = lesson.Agent(model.client(), model=model.model, tools=tools)
    try:
        answer = agent.run("Buy a torch, then wait for dawn.")
    except KeyboardInterrupt:
        results = [m.get("content") for m in agent.messages if m.get("role") == "tool"]
        # The interrupted call may be answered with an error before the loop lets
        # Ctrl-C go on, or left open (lesson 04 settles it): the contract allows both.
        assert town.inventory == ["torch"] and len(results) in (1, 2) and (
            "torch" in str(results[0])) and all(
                str(later).startswith("error") for later in results[1:]), (
            "the reply called buy (a torch), then wait_for_dawn, where the user "
            f"pressed Ctrl-C; the inventory is {town.inventory}, and the history "
            f"holds the results {results}: the torch was bought, and its call's "
            "result should be recorded as soon as the call ran, before the next call "
            "runs, or the history says nothing of a purchase that happened (the "
            "interrupted call has no result, or one that says it failed)")
        return
    blame_the_stop_caught(
        lesson, tools, tool_call("wait_for_dawn", "{}"), KeyboardInterrupt,
        "the user pressed Ctrl-C while a tool ran, and run() returned "
        f"{answer!r} after {len(model.requests)} model calls: the user cannot stop "
        "the agent. ")


@pytest.mark.task("00.2")
def test_a_call_stopped_by_ctrl_c_never_runs_again(lesson, model, town, monkeypatch):
    """A call the user stopped with Ctrl-C ran once, as far as it got: a later turn
    never runs it again, even against a server that takes a history whose call has no
    result (not every local server checks that), and whose next reply calls a tool."""
    monkeypatch.setattr(scripted, "validate", lambda body: None)     # a lenient server
    dawns = []

    def wait_for_dawn():
        dawns.append("dawn")
        if len(dawns) == 1:
            raise KeyboardInterrupt
        return "It is dawn."

    model.add(use(call("wait_for_dawn")), use(call("buy", item="rope")), say("Done."))
    tools = FewTools(buy=town.functions["buy"], wait_for_dawn=wait_for_dawn)
    tools.schemas = town.schemas
    agent = lesson.Agent(model.client(), model=model.model, tools=tools)
    with raises(KeyboardInterrupt, "the user pressed Ctrl-C while wait_for_dawn ran, "
                "and run() did not let it stop the turn"):
        agent.run("Wait for dawn.")
    agent.run("Buy a rope, then.")
    assert len(dawns) == 1 and town.inventory == ["rope"], (
        "the user stopped wait_for_dawn with Ctrl-C on the first turn; the second turn "
        "asked for a rope only, and wait_for_dawn ran "
        f"{len(dawns)} times in all, the inventory is {town.inventory}: a call runs "
        "once, on the turn the model asks for it, and no later turn runs a call of an "
        "earlier one again (the user stopped it, and the model asked for something "
        "else since)")


@pytest.mark.task("00.2")
def test_every_message_passes_through_record(lesson, model, town):
    """run() adds every message, tool results included, through record()."""
    model.add(use(call("talk_to", npc="elder"), call("buy", item="torch")),
              say("Done."))
    agent = new_agent(lesson, model, town)
    recorded = []
    seen = []
    real_record = agent.record

    def record(message):
        recorded.append(message)
        seen.append(json.loads(json.dumps(message)))   # as it was when recorded
        return real_record(message)

    agent.record = record

    agent.run("Ask the elder and buy a torch.")

    roles = [m.get("role") for m in recorded]
    assert recorded == agent.messages, (
        f"record() saw the roles {roles}, the history holds "
        f"{[m.get('role') for m in agent.messages]}: every message of the conversation "
        "should pass through record(), the one place the next lesson saves to disk")
    for when, now in zip(seen, agent.messages):
        if when != now:
            fail_in("00.2", "a message was changed after it went through record(): "
                    f"record() was given {when}, and the history now holds {now} in "
                    "its place. record() is where the next lesson saves to disk, so "
                    "what it is given must be the message whole, as it stays (the "
                    "reply with its calls, as normalize_reply stores it), never one "
                    "completed after")


AFTER_A_TOOL = pytest.mark.parametrize("before", [0, 1],
                                       ids=["first-request", "after-a-tool"])


def requests_before(before):
    """Words for the request that failed: the first, or the one after a tool ran."""
    return ("its first request" if not before else
            "its second request, after a tool call it asked for ran,")


@pytest.mark.task("00.2")
@AFTER_A_TOOL
def test_a_failed_model_call_raises_instead_of_answering_nothing(lesson, model, town,
                                                                  before):
    """A server error reaches the caller as an exception, not as an empty answer: on
    the turn's first request, and on a later one, after tools ran."""
    model.add(*[use(call("talk_to", npc="elder"))] * before, Fail(500))
    agent = new_agent(lesson, model, town)

    try:
        answer = agent.run("Hello?")
    except NotImplementedError:
        raise
    except Exception as error:
        raised = error
    else:
        pytest.fail(f"the model answered {requests_before(before)} with HTTP 500, "
                    f"and run() returned {answer!r} as if that were the answer: the "
                    "caller cannot tell a failed request from an empty reply, so it "
                    "can neither tell the user nor retry", pytrace=False)
    assert tells_of_the_500(raised) and not isinstance(raised,
                                                       lesson.MaxTurnsExceeded), (
        f"the model answered {requests_before(before)} with HTTP 500, and run() raised "
        f"{type(raised).__name__} ({raised}) after {len(model.requests)} "
        "requests: the caller should hear of the server's failure, the 500 itself "
        "(or an error that carries it, not one raised from None, which hides it), "
        "not of something that did not happen")


def tells_of_the_500(raised):
    """Whether the error `raised` carries the server's HTTP 500: it is the openai
    client's, or the cause shown with it is (not one raised from None, which hides
    it)."""
    seen = raised
    while seen is not None:
        if (isinstance(seen, openai.APIStatusError) and seen.status_code == 500
                or "500" in str(seen)):
            return True
        # What the caller is shown: the cause, or the error it happened in, unless
        # it was raised "from None", which hides it.
        seen = seen.__cause__ or (None if seen.__suppress_context__
                                  else seen.__context__)
    return False


@pytest.mark.task("00.2")
@AFTER_A_TOOL
def test_a_failed_model_call_is_not_made_again_by_run(lesson, model, town, before):
    """run() does not ask the model again on its own when a request fails: the caller
    hears of the failure, even when the next request would have gone through, and
    whether to try again is the caller's choice."""
    model.add(*[use(call("talk_to", npc="elder"))] * before, Fail(500),
              say("Hello, traveller."))
    agent = new_agent(lesson, model, town)

    try:
        answer = agent.run("Hello?")
    except Exception as error:
        if not tells_of_the_500(error):
            raise   # run()'s own error, not the server's: the student sees it as it is
        answer = None
    made = len(model.requests)
    assert answer is None and made == 1 + before, (
        f"the model answered {requests_before(before)} with HTTP 500; run() made "
        f"{made} requests and returned {answer!r}: it should make {1 + before} and "
        "raise, so that the caller hears of the failure (a request asked again "
        "behind its back hides it, and may pay for a reply twice)")


@pytest.mark.task("00.2")
@AFTER_A_TOOL
def test_a_failed_model_call_leaves_no_reply_in_the_history(lesson, model, town,
                                                             before):
    """When the model call fails, the model said nothing: the history holds no reply
    it never gave (an error written as its answer would go back to it, as its own
    words, with every later request), on the turn's first request or a later one."""
    model.add(*[use(call("talk_to", npc="elder"))] * before, Fail(500))
    agent = new_agent(lesson, model, town)

    with raises(Exception, "the model answered HTTP 500, and run() went on as if it "
                "had answered: the caller should hear of the failure") as raised:
        agent.run("Hello?")

    if isinstance(raised.value, NotImplementedError):
        raise raised.value
    made_up = agent.messages[1 + 2 * before:]     # past the question, reply, result
    assert made_up == [], (
        f"the model answered {requests_before(before)} with HTTP 500, so it said "
        f"nothing then; the history holds {made_up}, which the model never sent, "
        "and which would go back to it as its own words")


@pytest.mark.task("00.2")
@AFTER_A_TOOL
def test_a_failed_model_call_keeps_what_the_turn_did_before_it(lesson, model, town,
                                                                before, monkeypatch):
    """A server error does not undo the turn: the user's message stays in the history,
    and so does every call that ran, with its result (the torch was bought)."""
    # Well-formed replies, stored as they came: the loop alone is tested here
    monkeypatch.setattr(lesson, "normalize_reply", stored_as_sent)
    model.add(*[use(call("buy", item="torch"))] * before, Fail(500))
    agent = new_agent(lesson, model, town)

    with raises(Exception, "the model answered HTTP 500, and run() went on as if it "
                "had answered: the caller should hear of the failure") as raised:
        agent.run("Buy a torch.")

    if isinstance(raised.value, NotImplementedError) or not tells_of_the_500(
            raised.value):
        raise raised.value      # an error of run()'s own: the student should see it
    roles = [m.get("role") for m in agent.messages]
    expected = ["user"] + ["assistant", "tool"] * before
    assert roles == expected, (
        f"the model answered {requests_before(before)} with HTTP 500, after "
        f"{before} call(s) to buy ran (the town's inventory: {town.inventory}); the "
        f"history should keep what the turn did before the failure, {expected}, and "
        f"holds {roles}: a call that ran stays in the history with its result, and the "
        "user's message with them, or the next request tells the model nothing of a "
        "torch that was bought")


@pytest.mark.task("00.2")
def test_every_request_goes_through_ask_model(lesson, model, town):
    """run() asks the model only through ask_model(), the one place a request is built
    (the system prompt first; later lessons write the log before every request)."""
    model.add(use(call("talk_to", npc="elder")), say("Done."))
    agent = new_agent(lesson, model, town)
    asked = []
    real_ask = agent.ask_model
    agent.ask_model = lambda: (asked.append(1), real_ask())[1]

    agent.run("Ask the elder.")

    assert len(asked) == len(model.requests) == 2, (
        f"the model got {len(model.requests)} requests and ask_model() made "
        f"{len(asked)} of them: every request should go through ask_model(), where "
        "the system prompt is put first and later lessons save the log before the "
        "model sees it")


@pytest.mark.task("00.2")
def test_a_tool_that_ends_the_program_ends_the_turn(lesson, model, town):
    """A tool that asks the program to exit (SystemExit) ends run() too: the loop does
    not answer it with an error result and go on asking the model."""
    def leave_town():
        raise SystemExit("The adventurer goes home.")

    model.add(use(call("leave_town")), say("Farewell."))
    tools = FewTools(leave_town=leave_town)
    tools.schemas = town.schemas
    agent = lesson.Agent(model.client(), model=model.model, tools=tools)
    try:
        answer = agent.run("Go home.")
    except SystemExit:
        return
    blame_the_stop_caught(
        lesson, tools, tool_call("leave_town", "{}"), SystemExit,
        "the tool leave_town asked the program to exit (SystemExit), and run() "
        f"returned {answer!r} after {len(model.requests)} model calls: the program "
        "should end, as the tool meant it to; a tool's failures are the model's to "
        "read, not its request to exit. ")


@pytest.mark.task("00.2")
@AFTER_A_TOOL
def test_ctrl_c_while_the_model_is_asked_stops_the_turn(lesson, model, town, before):
    """The user's Ctrl-C while the model is asked stops run(): it is not an empty
    answer, and the history gains no reply the model never sent, on the turn's first
    request or a later one; what the turn did before it stays."""
    model.add(*[use(call("talk_to", npc="elder"))] * before, say("Hello, traveller."))
    agent = new_agent(lesson, model, town)
    asked = []
    real_ask = agent.ask_model

    def ask_model():
        asked.append(1)
        if len(asked) == 1 + before:
            raise KeyboardInterrupt
        return real_ask()

    agent.ask_model = ask_model
    with raises(KeyboardInterrupt, f"the user pressed Ctrl-C during "
                f"{requests_before(before)} and run() did not let it stop the turn: "
                "the caller takes what it returned for the model's answer"):
        agent.run("Hello?")
    roles = [m.get("role") for m in agent.messages]
    assert roles == ["user"] + ["assistant", "tool"] * before, (
        f"the user pressed Ctrl-C during {requests_before(before)}, so the model said "
        f"nothing then; the history should hold the user's message"
        f"{' and the call that ran, with its result' if before else ''}, and its "
        f"roles are {roles}: a reply the model never sent would go back to it as its "
        "own words, with every later request")


@pytest.mark.task("00.1")
def test_ctrl_c_while_arguments_are_read_stops_the_program(lesson, monkeypatch):
    """The user's Ctrl-C while a call's long arguments are read stops the program, as
    it does while the tool runs: it is no mistake of the model's to answer with an
    error result."""
    ran = []
    interrupted = []

    def loads(*args, **kwargs):
        interrupted.append(1)
        raise KeyboardInterrupt

    sent = '{"item": "' + "rope " * 20_000 + '"}'
    try:
        with monkeypatch.context() as patch:
            patch.setattr(lesson.json, "loads", loads)
            result = lesson.run_tool(FewTools(buy=lambda item: ran.append(item)),
                                     tool_call("buy", sent))
    except KeyboardInterrupt:
        return
    if not interrupted:
        return      # arguments read without json.loads: nothing to interrupt here
    pytest.fail("the user pressed Ctrl-C while the arguments of a call to buy (100 KB "
                f"of JSON) were read, and run_tool returned {str(result)[:100]!r}: "
                "Ctrl-C is the user stopping the program, not a mistake of the "
                "model's; whatever catches the JSON reader's errors must let it "
                "through", pytrace=False)


@pytest.mark.task("00.2")
def test_ctrl_c_inside_a_tool_stops_the_calls_after_it(lesson, model, town):
    """Ctrl-C while a tool runs stops the turn where it is: a call the same reply asks
    for after it never runs, since the user stopped the agent before it (no torch is
    bought behind the user's back so that every call has its result)."""
    def wait_for_dawn():
        raise KeyboardInterrupt

    model.add(use(call("wait_for_dawn"), call("buy", item="torch")), say("Done."))
    tools = FewTools(buy=town.functions["buy"], wait_for_dawn=wait_for_dawn)
    tools.schemas = town.schemas
    agent = lesson.Agent(model.client(), model=model.model, tools=tools)
    with raises(KeyboardInterrupt, "the user pressed Ctrl-C while wait_for_dawn ran, "
                "and run() did not let it stop the turn"):
        agent.run("Wait for dawn, then buy a torch.")
    assert town.inventory == [] and len(model.requests) == 1, (
        "the reply called wait_for_dawn, where the user pressed Ctrl-C, then buy (a "
        f"torch); the inventory is {town.inventory} after {len(model.requests)} model "
        "call(s): Ctrl-C stops the turn where it is, as it stops the tool, and the "
        "calls after it never run (the user stopped the agent before them; a call left "
        "without a result is lesson 04's to settle, a torch bought behind the user's "
        "back is not)")
