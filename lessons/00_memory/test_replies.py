"""Lesson 00: replies as real servers send them (task 00.3, with 00.1's read_arguments).

Ollama, llama.cpp's server, vLLM and LM Studio do not always send what OpenAI documents.
Each quirk below is a reply one of them has sent (see sessionlab.scripted.QUIRKS).
Whatever comes, the agent must not crash, and the history it keeps must be one every
server accepts when it is sent back.

Run: pytest lessons/00_memory            (your code)
     pytest lessons/00_memory --solution (the reference)
"""

import json

import openai
import pytest

from sessionlab.scripted import QUIRKS, InvalidRequest, raw, say, validate
from sessionlab.testing import described, fail_in


def new_agent(lesson, model, town):
    return lesson.Agent(model.client(), model=model.model, tools=town)


def run_or_fail(lesson, agent, text, what):
    """agent.run(text), turning a refused request into a failure that says what
    happened and which task's code left the history unsendable."""
    try:
        return agent.run(text)
    except openai.BadRequestError as error:
        refusal = error     # failed outside the except, so no chained traceback
    refused(lesson, agent.messages, refusal, what)


def refused(lesson, messages, error, what):
    """Fail with the words of a request the model refused (HTTP 400)."""
    body = error.body
    said = body.get("message") if isinstance(body, dict) else error
    pytest.fail(f"{what}: the model refused the next request with HTTP 400 ({said}). "
                f"{whose_mistake(lesson, messages)}", pytrace=False)


def assert_sendable(lesson, messages, what):
    try:
        validate({"model": "any", "messages": messages})
    except InvalidRequest as error:
        pytest.fail(f"{what}: the stored history is one a provider refuses: "
                    f"{error.message}. {whose_mistake(lesson, messages)}",
                    pytrace=False)


def holds_object(arguments):
    """Are `arguments` what a provider takes: a string holding a JSON object?"""
    try:
        return isinstance(arguments, str) and isinstance(json.loads(arguments), dict)
    except (ValueError, RecursionError):
        return False


def whose_mistake(lesson, messages):
    """Which task's code made `messages` unsendable, in words: a stored reply that a
    provider refuses even with a result for each of its calls is normalize_reply's
    (task 00.3), or read_arguments' (task 00.1) when it reads as an object arguments
    that are none; results that do not answer the stored calls are the loop's (00.2)."""
    for message in messages:
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        calls = message.get("tool_calls")
        calls = calls if isinstance(calls, list) else []
        answers = [{"role": "tool", "content": "done",
                    "tool_call_id": call.get("id") if isinstance(call, dict) else None}
                   for call in calls]
        try:
            validate({"model": "any", "messages": [{"role": "user", "content": "?"},
                                                   message, *answers]})
        except InvalidRequest as problem:
            for call in calls:
                function = call.get("function") if isinstance(call, dict) else None
                arguments = (function.get("arguments")
                             if isinstance(function, dict) else None)
                if not (isinstance(arguments, str) and arguments
                        and not holds_object(arguments)):
                    continue
                try:
                    read = lesson.read_arguments(arguments)
                except Exception:
                    continue
                return (f"A stored call holds the arguments {arguments[:200]!r}, which "
                        "are no JSON object to a provider, and read_arguments() reads "
                        f"them as {read!r}: read_arguments (task 00.1) judges what "
                        "normalize_reply stores, and it should have refused them.")
            fixed = normalized(lesson, message)
            try:
                validate({"model": "any", "messages": [
                    {"role": "user", "content": "?"}, fixed, *[
                        {"role": "tool", "content": "done", "tool_call_id": call["id"]}
                        for call in fixed.get("tool_calls") or []]]})
            except (InvalidRequest, KeyError, TypeError):
                return (f"The stored reply {str(message)[:300]} is refused even with a "
                        f"result for each of its calls ({problem.message}): what is "
                        "stored is what normalize_reply() returned (task 00.3).")
            return (f"The stored reply {str(message)[:300]} is refused even with a "
                    f"result for each of its calls ({problem.message}), and "
                    f"normalize_reply() makes it {str(fixed)[:300]}, which a provider "
                    "takes: the loop (task 00.2) stores every reply as normalize_reply "
                    "returns it.")
    for index, message in enumerate(messages):
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        if message.get("role") != "assistant" or not isinstance(calls, list):
            continue
        ids = [call.get("id") for call in calls if isinstance(call, dict)]
        results = []
        for later in messages[index + 1:]:
            if not (isinstance(later, dict) and later.get("role") == "tool"):
                break
            results.append(later.get("tool_call_id"))
        if sorted(map(repr, results)) != sorted(map(repr, ids)):
            return (f"Each stored reply is sendable, but the stored calls {ids} are "
                    f"followed by results answering {results}: a provider wants one "
                    "result for each stored call, under the id the stored call "
                    "carries. The loop records the results (task 00.2).")
    return ("Each stored reply is sendable and each stored call has its result; "
            "something else the loop recorded (task 00.2) is refused.")


def normalized(lesson, message):
    """What normalize_reply makes of a stored `message` (a dict, {} if it fails): a
    reply the loop stored without it comes out sendable."""
    try:
        fixed = lesson.normalize_reply(json.loads(json.dumps(message)), [])
    except Exception:
        return {}
    return fixed if isinstance(fixed, dict) else {}


def assert_the_model_reads(lesson, agent, name, arguments, word, expected):
    """The turn holds one result, an error holding `word` (any case), or the test fails
    in words that say whose code gave what: run_tool's (task 00.1), when it does not say
    `word` of the call the model sent, or the loop's (task 00.2), when it does and the
    model read something else."""
    results = [m.get("content") for m in agent.messages if m.get("role") == "tool"]
    if (len(results) == 1 and isinstance(results[0], str)
            and results[0].startswith("error:") and word.lower() in results[0].lower()):
        return
    sent = {"id": "call_sent", "type": "function",
            "function": {"name": name, "arguments": arguments}}
    try:
        said = lesson.run_tool(Untouched(name), sent)
    except Exception as error:
        said = f"{type(error).__name__} ({error})"
    if (isinstance(said, str) and said.startswith("error:")
            and word.lower() in said.lower() and len(results) == 1):
        task, whose = "00.2", (
            f"Given the call as the model sent it, run_tool says {said!r}, which would "
            "have told it; the result the loop recorded (task 00.2) is not that, so "
            "the model never learns what it got wrong.")
    elif len(results) != 1:
        task, whose = "00.2", ("One call should get one result; the loop records them "
                               "(task 00.2).")
    else:
        task, whose = "00.1", (f"Given the call as the model sent it, run_tool says "
                               f"{said!r} (task 00.1).")
    fail_in(task, f"{expected}; the results are {results}. {whose}")


class Untouched:
    """Tools with one tool, `name`, that changes nothing and says that it ran."""

    def __init__(self, name):
        self.schemas = []
        self.functions = {name: lambda **arguments: f"{name} ran with {arguments}"}


def calls_of(messages):
    return [call for m in messages for call in m.get("tool_calls") or []]


@pytest.mark.task("00.3")
@pytest.mark.task("00.2")
def test_a_tool_call_without_an_id_gets_one_and_its_result_answers_it(
    lesson, model, town
):
    """A call the server sent without an id is stored with a new one, and its result
    answers that new id: the stored call is the one the next request carries."""
    model.add(QUIRKS["no_id"], say("Bought."))
    agent = new_agent(lesson, model, town)

    try:
        agent.run("Buy a rope.")
    except openai.BadRequestError as error:
        refusal = error
    else:
        refusal = None

    calls = calls_of(agent.messages)
    assert len(calls) == 1 and isinstance(calls[0].get("id"), str) and calls[0]["id"], (
        f"the stored call should have a non-empty string id, got {calls}")
    answered = [m.get("tool_call_id") for m in agent.messages if m["role"] == "tool"]
    assert answered == [calls[0]["id"]], (
        f"the call came without an id and was stored as {calls[0]['id']!r}, but the "
        f"results recorded answer {answered}: the next request carries that stored "
        "call with no result for it" + (", and the model refused it (HTTP 400)"
                                        if refusal else ""))
    if refusal is not None:
        refused(lesson, agent.messages, refusal, "after a tool call without an id")
    assert town.inventory == ["rope"], (
        f"the call should still run; inventory {town.inventory}"
    )


@pytest.mark.task("00.1")
@pytest.mark.task("00.3")
@pytest.mark.task("00.2")
@pytest.mark.parametrize("quirk", sorted(QUIRKS))
def test_no_quirky_reply_makes_a_later_request_invalid(lesson, model, town, quirk):
    """After each reply real servers have sent, the turn ends and the next request is
    valid. A refusal says which task's code left the history unsendable."""
    model.add(QUIRKS[quirk], say("Done."), say("Nothing more."))
    agent = new_agent(lesson, model, town)

    run_or_fail(lesson, agent, "Buy a rope.", f"after the {quirk!r} reply")
    run_or_fail(lesson, agent, "Anything else?",
                f"on the turn after the {quirk!r} reply")

    assert_sendable(lesson, agent.messages, f"after the {quirk!r} reply")
    for message in agent.messages:
        whose = ("what normalize_reply() returned, task 00.3"
                 if message.get("role") == "assistant"
                 else "what the loop recorded, task 00.2")
        assert json.loads(json.dumps(message)) == message, (
            f"after the {quirk!r} reply: every stored message should be plain JSON, "
            f"reading back as it is; this one does not ({whose}): {message!r}")
        if message.get("role") == "assistant" and not isinstance(
                message.get("content"), str):
            said = (f"after the {quirk!r} reply: a stored reply's content should be "
                    "text, '' where the server sent none (Ollama and LM Studio refuse "
                    "a null content even beside tool calls); the loop stored "
                    f"{message!r}")
            fixed = normalized(lesson, message)
            if isinstance(fixed.get("content"), str):
                fail_in("00.2", f"{said}, where normalize_reply gives {fixed!r}: the "
                        "loop (task 00.2) stores every reply as normalize_reply "
                        "returns it")
            fail_in("00.3", f"{said}, as normalize_reply returned it (task 00.3)")


@pytest.mark.task("00.3")
@pytest.mark.task("00.2")
def test_two_calls_sharing_an_id_are_stored_with_different_ids(lesson, model, town):
    """Two calls of one reply with the same id get ids of their own,
    each answered once."""
    model.add(QUIRKS["same_id_twice"], say("Bought both."))
    agent = new_agent(lesson, model, town)

    run_or_fail(lesson, agent, "Buy a rope and a torch.",
                "after two calls sharing one id")

    ids = [call["id"] for call in calls_of(agent.messages)]
    assert len(ids) == 2 and len(set(ids)) == 2, (
        "each call needs an id of its own, or a result cannot say which it answers; "
        f"got {ids}"
    )
    assert sorted(town.inventory) == ["rope", "torch"], (
        "both calls should run, buying a rope and a torch; the inventory is "
        f"{town.inventory}")


@pytest.mark.task("00.3")
@pytest.mark.task("00.2")
def test_an_id_used_earlier_in_the_conversation_is_replaced(lesson, model, town):
    """A server that reuses a call id from an earlier turn, or from an earlier reply of
    the same turn, does not get two calls one id."""
    def buy(item, call_id="call_0"):
        return raw({"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": "buy", "arguments": json.dumps({"item": item})}}]})
    model.add(buy("rope"), say("One."), buy("torch"), say("Two."),
              buy("lamp", "call_7"), buy("oil", "call_7"), say("Three."))
    agent = new_agent(lesson, model, town)

    run_or_fail(lesson, agent, "Buy a rope.", "on the first turn")
    run_or_fail(lesson, agent, "Buy a torch.",
                "after a reply that reused the first turn's call id")

    ids = [call["id"] for call in calls_of(agent.messages)]
    assert len(set(ids)) == 2, (
        "the second turn's call came with 'call_0', the id of the first turn's call, "
        f"and the history now holds two calls with one id: {ids}; a result cannot say "
        "which of them it answers"
    )
    run_or_fail(lesson, agent, "Buy a lamp, then oil.",
                "after a reply that reused the id of a call made earlier in the turn")
    ids = [call["id"] for call in calls_of(agent.messages)]
    assert len(ids) == 4 and len(set(ids)) == 4, (
        "in the third turn the model called buy with the id 'call_7', then, in its "
        "next reply of the same turn, called buy again with 'call_7'; the history "
        f"holds the calls with the ids {ids}: every call of the conversation needs an "
        "id of its own, the calls made earlier in the turn included")


@pytest.mark.task("00.3")
def test_ids_made_up_or_kept_are_strings_no_other_call_has(lesson):
    """Whatever id a call came with (none, a number, one the history holds) it is
    stored with a string id that no earlier call and no other call of the reply has:
    made-up ids included, whatever ids the history already holds, in any of its
    replies, answered or not (a turn stopped by Ctrl-C leaves a call without a
    result). A call whose own id no other call has keeps it, wherever it sits among
    calls that needed a new one."""
    earlier = ["call_0", "call_2", "call_3"]

    def asked(ids):
        return {"role": "assistant", "content": "", "tool_calls": [
            {"id": i, "type": "function",
             "function": {"name": "buy", "arguments": "{}"}} for i in ids]}
    history = [{"role": "user", "content": "Buy."}, asked(earlier[:2])]
    history += [{"role": "tool", "tool_call_id": i, "content": "ok"}
                for i in earlier[:2]]
    history += [{"role": "assistant", "content": "Done."},
                {"role": "user", "content": "Buy more."}, asked(earlier[2:]),
                {"role": "user", "content": "Go on."}]
    sent = [None, 7, "", "call_2", "call_9", None, 7, "call_3", "call_2"]
    reply = {"role": "assistant", "content": None, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": "buy", "arguments": "{}"}}
        for i in sent]}

    message = lesson.normalize_reply(reply, history)

    taken = [c["id"] for m in history for c in m.get("tool_calls") or []]
    stored = [call.get("id") for call in message.get("tool_calls") or []]
    assert len(stored) == len(sent), (
        f"the reply had {len(sent)} calls; {len(stored)} were stored: {stored}")
    assert all(isinstance(i, str) and i for i in stored), (
        f"the calls came with ids {sent} and were stored with {stored}: every id "
        "sent back must be a non-empty string (a number is refused by OpenAI)")
    long = [i for i in stored if isinstance(i, str) and len(i) > 40]
    assert not long, (
        f"the calls came with ids {sent} and were stored with {stored}: {long} is "
        "longer than 40 characters, and OpenAI refuses a call id of more than 40, at "
        "this request and every later one. An id made up must be one every provider "
        "takes back.")
    clashes = sorted({i for i in stored if i in taken or stored.count(i) > 1})
    assert not clashes, (
        f"the calls came with ids {sent}, after a history whose calls have the ids "
        f"{taken}; they were stored with {stored}, and {clashes} is used twice: a "
        "result could not say which call it answers. A made-up id must be one that no "
        "call of the whole conversation has, not only new in this reply.")
    assert stored[4] == "call_9", (
        f"the calls came with ids {sent}; 'call_9' is a string no other call has, and "
        f"it was stored as {stored[4]!r}: a call that came with an id of its own keeps "
        "it")
    # Made-up ids fed back: a server's id may look like one made up before (a rule
    # that numbers the calls makes the same id twice), and it is kept; a call made up
    # before or after it in the same reply must still get another.
    made = [call.get("id") for call in lesson.normalize_reply({
        "role": "assistant", "content": None, "tool_calls": [
            {"id": None, "type": "function",
             "function": {"name": "buy", "arguments": "{}"}}] * 2}, history).get(
                 "tool_calls") or []]
    for echoed in made:
        for ids in ((echoed, None, None), (None, None, echoed)):
            again = [call.get("id") for call in lesson.normalize_reply({
                "role": "assistant", "content": None, "tool_calls": [
                    {"id": i, "type": "function",
                     "function": {"name": "buy", "arguments": "{}"}}
                    for i in ids]}, history).get("tool_calls") or []]
            assert len(set(again)) == 3, (
                f"after the history above, two calls without ids were given {made}; "
                f"a reply whose calls came with the ids {list(ids)} was stored with "
                f"{again}: an id kept from the server and one made up share a value, "
                "and a result could not say which call it answers. A made-up id must "
                "be one no call of the conversation has, the reply's own included, "
                "whatever ids the server sends")
            kept = again[ids.index(echoed)]
            assert kept == echoed, (
                f"after the history above, a reply whose calls came with the ids "
                f"{list(ids)} was stored with {again}: {echoed!r} is an id no call of "
                f"the conversation has, and its call was stored as {kept!r}. A call "
                "that came with an id of its own keeps it; a made-up id must be one "
                "that no call has, those the reply's later calls came with included")


def ids_stored(lesson, history_ids, sent):
    """The call ids normalize_reply stores for a reply whose calls came with the ids
    `sent`, after a turn whose calls, each answered, have `history_ids`."""
    def calls(ids):
        return [{"id": i, "type": "function",
                 "function": {"name": "buy", "arguments": "{}"}} for i in ids]

    history = [{"role": "user", "content": "Buy."},
               {"role": "assistant", "content": "", "tool_calls": calls(history_ids)},
               *({"role": "tool", "tool_call_id": i, "content": "ok"}
                 for i in history_ids)]
    reply = {"role": "assistant", "content": None, "tool_calls": calls(sent)}
    message = lesson.normalize_reply(reply, history)
    return [call.get("id") for call in message.get("tool_calls") or []]


@pytest.mark.task("00.3")
def test_ids_that_differ_only_in_case_are_two_ids(lesson):
    """Ids are compared as they are, byte for byte, as providers compare them: a call
    whose id differs from one the history holds only in case ('Call_1' after
    'call_1'), or only by a letter that looks alike, keeps its id, since no other
    call has it."""
    sent = ["Call_1", "CALL_1", "toolu_a", "call_\uff11"]
    stored = ids_stored(lesson, ["call_1", "toolu_A"], sent)
    assert stored == sent, (
        f"the history's calls have the ids 'call_1' and 'toolu_A'; the reply's calls "
        f"came with {sent}, ids no call of the conversation has (a provider tells "
        f"'Call_1' from 'call_1', byte for byte), and were stored with {stored}: a "
        "call that came with an id of its own, one no other call has, keeps it as it "
        "came")


@pytest.mark.task("00.3")
def test_ids_that_differ_only_by_blanks_are_two_ids(lesson):
    """A blank around an id is part of it, as providers compare ids: a call whose id
    differs from one the history holds, or from an earlier call's of the same reply,
    only by a blank before or after it (' call_1' after 'call_1') keeps its id as it
    came, since no other call has that one."""
    sent = [" call_1", "call_1 ", "call_2", "call_2\t", " call_2"]
    stored = ids_stored(lesson, ["call_1"], sent)
    assert stored == sent, (
        f"the history's call has the id 'call_1'; the reply's calls came with "
        f"{sent}, ids no other call of the conversation has (a provider tells "
        f"' call_1' from 'call_1', blank and all), and were stored with {stored}: a "
        "call that came with an id of its own, one no other call has, keeps it as it "
        "came")


@pytest.mark.task("00.3")
def test_an_id_taken_early_in_a_long_conversation_is_not_given_again(lesson):
    """No two calls of the whole conversation share an id, however long it is: a
    server that sends again the id of a call made hundreds of messages earlier gets
    a new one for it."""
    history = [{"role": "user", "content": "Buy a rope."},
               {"role": "assistant", "content": "", "tool_calls": [
                   {"id": "call_first", "type": "function",
                    "function": {"name": "buy", "arguments": '{"item": "rope"}'}}]},
               {"role": "tool", "tool_call_id": "call_first", "content": "ok"}]
    for day in range(300):
        history += [{"role": "user", "content": f"Day {day}?"},
                    {"role": "assistant", "content": "Rest."}]
    reply = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_first", "type": "function",
         "function": {"name": "buy", "arguments": '{"item": "torch"}'}}]}

    message = lesson.normalize_reply(reply, history)

    stored = [call.get("id") for call in message.get("tool_calls") or []]
    assert stored and stored[0] != "call_first", (
        f"a history of {len(history)} messages holds, in its second message, a call "
        "with the id 'call_first'; the reply's call came with that id again and was "
        f"stored with {stored}: two calls of the conversation share one id, and a "
        "result cannot say which it answers (the ids taken are those of the whole "
        "history, not of its latest messages)")


@pytest.mark.task("00.3")
def test_ids_made_up_after_a_thousand_calls_have_at_most_forty_characters(lesson):
    """However many calls the conversation holds (here a thousand), an id made up is
    one every provider takes back (at most 40 characters, OpenAI's limit) and one no
    call of the conversation has."""
    history = []
    for number in range(1000):
        history += [{"role": "assistant", "content": "", "tool_calls": [
                        {"id": f"call_{number}", "type": "function",
                         "function": {"name": "buy", "arguments": "{}"}}]},
                    {"role": "tool", "tool_call_id": f"call_{number}", "content": "ok"}]
    reply = {"role": "assistant", "content": None, "tool_calls": [
        {"id": None, "type": "function", "function": {"name": "buy", "arguments": "{}"}}
    ] * 2}

    message = lesson.normalize_reply(reply, history)

    stored = [call.get("id") for call in message.get("tool_calls") or []]
    long = [i for i in stored if not isinstance(i, str) or len(i) > 40]
    assert len(stored) == 2 and not long, (
        "after a conversation of a thousand calls, a reply's two calls came without "
        f"ids and were stored with {stored}: an id made up must be a string of at most "
        "40 characters, however long the conversation, or OpenAI refuses this request "
        "and every later one")
    taken = {f"call_{number}" for number in range(1000)}
    assert len(set(stored)) == 2 and not taken & set(stored), (
        "after a conversation of a thousand calls (call_0 to call_999), a reply's two "
        f"calls came without ids and were stored with {stored}: each needs an id no "
        "other call of the conversation has")


@pytest.mark.task("00.3")
def test_ids_made_up_have_at_most_forty_characters_whatever_the_call_holds(lesson):
    """An id made up is one OpenAI takes back (at most 40 characters) whatever the
    call it is made for holds: a tool of a long name, long arguments, letters beyond
    ASCII."""
    names = ["look_at_the_map_of_the_cave_north_of_the_mill", "buy",
             "洞窟の地図を見る"]
    reply = {"role": "assistant", "content": None, "tool_calls": [
        {"id": None, "type": "function", "function": {
            "name": name, "arguments": json.dumps({"note": "rope, " * 50})}}
        for name in names]}

    message = lesson.normalize_reply(reply, [])

    stored = [call.get("id") for call in message.get("tool_calls") or []]
    bad = [i for i in stored if not isinstance(i, str) or not 0 < len(i) <= 40]
    assert len(stored) == 3 and not bad and len(set(stored)) == 3, (
        f"three calls came without ids, to the tools {names}, and were stored with "
        f"the ids {stored}: each needs an id of its own, a string of at most 40 "
        "characters (OpenAI refuses a longer one, at this request and every later "
        "one), whatever the tool's name or the arguments")


@pytest.mark.task("00.3")
def test_the_ids_taken_are_those_of_the_history_given_at_each_call(lesson):
    """normalize_reply judges each reply by the history it is given at that call,
    however that list changed since the last: a caller may empty it and fill it again
    (a session put back as its log holds it), and then the ids its messages hold now
    are taken, and those it no longer holds are free."""
    def asked(call_id):
        return {"role": "assistant", "content": "", "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": "buy", "arguments": "{}"}}]}

    def stored_id(call_id, history):
        message = lesson.normalize_reply(
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function",
                 "function": {"name": "buy", "arguments": "{}"}}]}, history)
        return [call.get("id") for call in message.get("tool_calls") or []]

    history = [{"role": "user", "content": "Buy."}, asked("call_a"),
               {"role": "tool", "tool_call_id": "call_a", "content": "ok"}]
    first = stored_id("call_b", history)
    assert first == ["call_b"], (
        f"the history's one call has the id 'call_a'; a reply's call came with "
        f"'call_b' and was stored with {first}: an id no call has is kept")
    history[:] = [{"role": "user", "content": "Buy."}, asked("call_b"),
                  {"role": "tool", "tool_call_id": "call_b", "content": "ok"}]
    again = stored_id("call_b", history)
    assert again and again[0] != "call_b", (
        "the same history list was then emptied and filled again with a conversation "
        "whose one call has the id 'call_b'; a reply's call came with 'call_b' and "
        f"was stored with {again}: two calls of the conversation share an id. The ids "
        "taken are those of the history as it is at this call, not as it was at an "
        "earlier one")
    freed = stored_id("call_a", history)
    assert freed == ["call_a"], (
        "the same history list was emptied and filled again, and no call it holds now "
        f"has the id 'call_a'; a reply's call came with 'call_a' and was stored with "
        f"{freed}: a call whose id no call of the conversation has keeps it, whatever "
        "the list held at an earlier call")


@pytest.mark.task("00.3")
def test_a_history_holding_a_null_list_of_calls_is_read_like_any_other(lesson):
    """A history may hold messages another harness wrote (lesson 02 resumes them as
    they are): an assistant message whose tool_calls is null holds no call, and the
    ids taken are those of the others."""
    history = [{"role": "user", "content": "Hello."},
               {"role": "assistant", "content": "Hello to you.", "tool_calls": None},
               {"role": "user", "content": "Buy a rope."},
               {"role": "assistant", "content": "", "tool_calls": [
                   {"id": "call_1", "type": "function",
                    "function": {"name": "buy", "arguments": '{"item": "rope"}'}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": "Bought."}]
    reply = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "buy", "arguments": '{"item": "torch"}'}}]}
    try:
        message = lesson.normalize_reply(reply, history)
    except NotImplementedError:
        raise
    except Exception as error:
        pytest.fail(f"the history holds an assistant message whose tool_calls is null, "
                    f"as another harness writes it, and normalize_reply raised "
                    f"{type(error).__name__} ({error}): null holds no call, and a "
                    "resumed session with such a message must go on", pytrace=False)
    stored = [call.get("id") for call in message.get("tool_calls") or []]
    assert len(stored) == 1 and stored[0] != "call_1", (
        "the history's calls have the id 'call_1' (beside a message whose tool_calls "
        "is null), and the reply's call came with 'call_1' again; it was stored with "
        f"{stored}: no two calls of the conversation share an id")


@pytest.mark.task("00.3")
def test_thousands_of_calls_without_ids_get_thousands_of_ids(lesson):
    """A long session holds thousands of calls, and a server that never sends ids
    leaves every one of them to normalize_reply: no two of the ids it makes up are
    the same."""
    history = []
    for turn in range(20):
        reply = {"role": "assistant", "content": None, "tool_calls": [
            {"id": None, "type": "function",
             "function": {"name": "talk_to", "arguments": '{"npc": "elder"}'}}] * 100}
        history.append(lesson.normalize_reply(reply, history))
    ids = [call.get("id") for call in calls_of(history)]
    twice = sorted({i for i in ids if ids.count(i) > 1}) if len(set(ids)) < len(
        ids) else []
    assert len(ids) == 2_000 and not twice, (
        f"20 replies of 100 calls without ids, each normalized after the ones before, "
        f"were stored with {len(ids):,} calls and {len(set(ids)):,} different ids; "
        f"{twice[:5]} are given more than once: a made-up id must be one no other call "
        "of the conversation has, however many it holds (an id too short to be unique "
        "among thousands repeats)")


@pytest.mark.task("00.3")
@pytest.mark.task("00.2")
def test_arguments_sent_as_an_object_are_run_and_stored_as_json_text(
    lesson, model, town
):
    """Arguments that arrive as an object run the
    tool and are stored as a string of JSON."""
    model.add(QUIRKS["arguments_as_object"], say("Bought."))
    agent = new_agent(lesson, model, town)

    run_or_fail(lesson, agent, "Buy a rope.", "after arguments sent as an object")

    if town.inventory != ["rope"]:
        try:
            read = lesson.read_arguments({"item": "rope"})
        except Exception as error:
            read = f"{type(error).__name__} ({error})"
        try:
            ran = lesson.run_tool(Untouched("buy"), {
                "id": "call_obj", "type": "function",
                "function": {"name": "buy", "arguments": {"item": "rope"}}})
        except Exception as error:
            ran = f"{type(error).__name__} ({error})"
        whose = (("00.1", f"read_arguments({{'item': 'rope'}}) gives {read}, where "
                  "the object itself was expected (task 00.1)")
                 if read != {"item": "rope"} else
                 ("00.1", f"run_tool, given that call as it came, says {ran!r} "
                  "(task 00.1)") if not str(ran).startswith("buy ran") else
                 ("00.2", "the loop (task 00.2) should run the call as the model sent "
                  "it"))
        fail_in(whose[0], "the arguments came as an object, {'item': 'rope'}, and the "
                f"rope was not bought (inventory {town.inventory}): {whose[1]}")
    arguments = (
        calls_of(agent.messages)[0]["function"]["arguments"]
        if calls_of(agent.messages)
        else None
    )
    assert isinstance(arguments, str) and json.loads(arguments) == {
        "item": "rope"
    }, ("the stored arguments should be JSON text of that object "
        f"('{{\"item\": \"rope\"}}'), got {arguments!r}")


@pytest.mark.task("00.2")
@pytest.mark.task("00.3")
def test_arguments_that_are_not_json_are_answered_with_an_error_and_stored_sendable(
        lesson, model, town):
    """Unreadable arguments run nothing,
    the result says why, and the stored call holds {}."""
    model.add(QUIRKS["arguments_not_json"], say("Sorry."))
    agent = new_agent(lesson, model, town)

    run_or_fail(lesson, agent, "Buy a rope.", "after arguments that are not JSON")

    results = [m["content"] for m in agent.messages if m["role"] == "tool"]
    assert len(results) == 1, (
        f"one call should get one result, the history holds {len(results)}: {results}")
    if "json" not in results[0].lower():
        pytest.fail(
            "the model sent the arguments '{item: rope' (not JSON), and the result it "
            f"reads is {results[0]!r}, which does not say that what it sent could not "
            "be read: that is the result of running the tool with arguments the model "
            "never sent (the stored call's '{}'), so the model never learns what it "
            "got wrong", pytrace=False)
    assert town.inventory == [], (
        "the arguments could not be read, so nothing should be bought; the inventory "
        f"is {town.inventory}")
    arguments = (
        calls_of(agent.messages)[0]["function"]["arguments"]
        if calls_of(agent.messages)
        else None
    )
    assert arguments == "{}", (
        "the stored call is sent back with every later request, and providers refuse "
        f"arguments that are not a JSON object: expected '{{}}', got {arguments!r}")


@pytest.mark.task("00.2")
@pytest.mark.task("00.3")
@pytest.mark.task("00.1")
@pytest.mark.parametrize("arguments", ['{"item": NaN}', '{"item": Infinity}',
                                       '{"count": 1e999}', '{"count": -1e999}'],
                         ids=["NaN", "Infinity", "1e999", "-1e999"])
def test_arguments_holding_nan_are_answered_with_an_error_and_stored_sendable(
        lesson, model, town, arguments):
    """NaN and Infinity are not JSON (Python reads them, and 1e999 as Infinity; a
    strict provider refuses them): the call runs nothing, its result says what was
    sent, and the stored call holds {}, so that every later request is one any
    provider takes."""
    model.add(raw({"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_nan", "type": "function",
         "function": {"name": "buy", "arguments": arguments}}]}), say("Sorry."))
    agent = new_agent(lesson, model, town)

    run_or_fail(lesson, agent, "Buy a rope.", f"after the arguments {arguments!r}")

    stored = [call["function"]["arguments"] for call in calls_of(agent.messages)]
    assert stored == ["{}"], (
        f"the model sent the arguments {arguments!r}, which are not JSON (NaN and "
        "Infinity are Python's, not JSON's, and 1e999 is Infinity once read), so the "
        "stored call should hold '{}', "
        "which every provider takes back; it holds "
        f"{stored}. The stored arguments are what read_arguments (task 00.1) read, as "
        "normalize_reply (task 00.3) stores them")
    word = arguments.split(": ")[1].rstrip("}")
    assert_the_model_reads(
        lesson, agent, "buy", arguments, word,
        f"the arguments {arguments!r} could not be used: the one result should be an "
        f"error that quotes them ({word} included), so that the model sees what it "
        "got wrong")
    assert town.inventory == [], (
        f"the arguments {arguments!r} cannot be read, so nothing should be bought; "
        f"the inventory is {town.inventory}")


@pytest.mark.task("00.2")
@pytest.mark.task("00.3")
@pytest.mark.task("00.1")
def test_arguments_encoded_twice_run_nothing_and_are_stored_sendable(lesson, model,
                                                                     town):
    """A server that encoded the arguments twice sends a string of JSON whose text is
    the object: a string, not an object. The tool does not run, the result tells the
    model it sent no object, and the stored call holds {}."""
    model.add(QUIRKS["arguments_encoded_twice"], say("Sorry."))
    agent = new_agent(lesson, model, town)

    run_or_fail(lesson, agent, "Buy a rope.", "after arguments encoded twice")

    sent = QUIRKS["arguments_encoded_twice"].message["tool_calls"][0]
    sent = sent["function"]["arguments"]
    assert town.inventory == [], (
        f"the arguments {sent!r} are JSON of a string, not of an object: the tool "
        "should not run (read_arguments, task 00.1, refuses them); the inventory is "
        f"{town.inventory}")
    assert_the_model_reads(
        lesson, agent, "buy", sent, "object",
        f"the arguments {sent!r} are no object: the one result should be an error "
        "telling the model it sent no object (the word 'object')")
    stored = [call["function"]["arguments"] for call in calls_of(agent.messages)]
    assert stored == ["{}"], (
        "arguments read_arguments refuses are stored as '{}' (task 00.3); the stored "
        f"call holds {stored}")


@pytest.mark.task("00.3")
@pytest.mark.task("00.2")
def test_content_sent_in_parts_is_stored_as_the_text_of_its_text_parts(lesson, model,
                                                                        town):
    """A reply whose content is a list of parts (a thinking part, then text parts) is
    answered and stored as the text of its text parts, in order: nothing of the answer
    lost, nothing of the thinking kept."""
    model.add(QUIRKS["content_parts"])
    agent = new_agent(lesson, model, town)

    answer = run_or_fail(lesson, agent, "Buy a rope?", "after content in parts")

    assert answer == "A rope it is.", (
        "the answer is the text of the text parts, joined in order; got "
        f"{answer!r}")
    assert agent.messages[-1:] == [{"role": "assistant", "content": "A rope it is."}], (
        "the stored reply should hold the text of the text parts as its content, and "
        f"nothing of the thinking part; stored {agent.messages[-1:]}")


@pytest.mark.task("00.3")
@pytest.mark.task("00.2")
def test_a_null_content_is_stored_as_empty_text(lesson, model, town):
    """A reply with content null and no tool calls is stored with content ""."""
    model.add(QUIRKS["content_null"])
    agent = new_agent(lesson, model, town)

    answer = run_or_fail(lesson, agent, "Hello?", "after content null")

    assert answer == "", f"a reply with no text answers '', got {answer!r}"
    assert agent.messages[-1:] == [{"role": "assistant", "content": ""}], (
        "OpenAI refuses an assistant message whose content is null without tool calls: "
        f"the stored content should be ''; stored {agent.messages[-1:]}")


@pytest.mark.task("00.3")
@pytest.mark.task("00.2")
def test_a_refusal_is_the_answer_and_is_kept(lesson, model, town):
    """A model that declines sends no content and its words in "refusal" (OpenAI's
    way): those words are what it said, the answer the user reads, stored as the
    reply's text and sent back with the next request."""
    refusal = "I can't help with that."
    model.add(raw({"role": "assistant", "content": None, "refusal": refusal}),
              say("Then let us talk of the cave."))
    agent = new_agent(lesson, model, town)

    answer = run_or_fail(lesson, agent, "Steal the rope?", "after a refusal")

    assert answer == refusal, (
        f"the model refused in words, {refusal!r}: run() should return them, the "
        f"answer the user reads; it returned {answer!r}")
    assert agent.messages[-1:] == [{"role": "assistant", "content": refusal}], (
        "the stored reply should hold the refusal's words as its text, or the next "
        "request tells the model it said nothing; stored "
        f"{agent.messages[-1:]}")
    run_or_fail(lesson, agent, "The cave, then?", "after a refusal")
    sent = model.requests[-1]["messages"]
    assert {"role": "assistant", "content": refusal} in sent, (
        "the next request should carry the refusal as the model's reply; it sent "
        f"{[m.get('content') for m in sent]}")


@pytest.mark.task("00.3")
@pytest.mark.task("00.2")
def test_an_empty_list_of_tool_calls_is_not_stored(lesson, model, town):
    """A reply with "tool_calls": [] ends the turn and is stored without that key."""
    model.add(QUIRKS["empty_tool_calls"])
    agent = new_agent(lesson, model, town)

    answer = run_or_fail(lesson, agent, "Anything to do?",
                         "after an empty tool_calls list")

    assert answer == "Nothing to do.", (
        "the reply said 'Nothing to do.' with an empty list of calls, which calls "
        f"nothing: run() should return that text; it returned {answer!r}")
    assert "tool_calls" not in agent.messages[-1], (
        "OpenAI refuses 'tool_calls': [] in a request, and the stored reply still "
        f"has the key: {agent.messages[-1]}"
    )


@pytest.mark.task("00.3")
@pytest.mark.task("00.2")
def test_text_and_tool_calls_in_one_reply_run_the_tools_and_keep_the_text(
    lesson, model, town
):
    """A reply with both text and tool calls runs
    the calls and stores the text with them."""
    model.add(QUIRKS["text_and_tools"], say("Bought."))
    agent = new_agent(lesson, model, town)

    answer = run_or_fail(lesson, agent, "Buy a rope.",
                         "after text and tool calls in one reply")

    assert town.inventory == ["rope"], (
        "the reply had text *and* a call: the call should run and buy a rope; the "
        f"inventory is {town.inventory}")
    assert answer == "Bought.", (
        "after the call's result the model answered 'Bought.', and run() should "
        f"return that; it returned {answer!r}")
    assert agent.messages[1].get("content") == "Let me buy a rope.", (
        "the text that came with the call belongs to the stored reply: "
        f"{agent.messages[1]}"
    )


@pytest.mark.task("00.3")
def test_a_well_formed_reply_is_stored_as_it_came(lesson):
    """normalize_reply leaves a reply that is already sendable exactly as it is: ids
    of any server's form and length (vLLM's are 46 characters long: the limit of 40
    is for ids made up), blanks in them included, arguments with the spaces they came
    with, and each tool's name as the model wrote it (capitals, or a space no tool
    has: run_tool tells the model, and the history shows what it sent), and its text,
    spaces and line breaks included, with calls or without, even text that is only
    whitespace."""
    reply = {"role": "assistant", "content": " Let me look around.\n", "tool_calls": [
        {"id": "call_1_0", "type": "function",
         "function": {"name": "buy", "arguments": '{"item":"rope"}'}},
        {"id": "toolu_01A9q", "type": "function",
         "function": {"name": "talk_to", "arguments": ' {"npc": "elder"}\n'}},
        {"id": "chatcmpl-tool-3f9a2c1e8b7d4e6fa0c5b1d2e3f4a5b6", "type": "function",
         "function": {"name": "lookAround", "arguments": "{}"}},
        {"id": "call_3", "type": "function",
         "function": {"name": "buy ", "arguments": '{"item": "torch"}'}},
        {"id": " call 4 ", "type": "function",
         "function": {"name": "talk_to", "arguments": '{"npc": "guard"}'}}]}
    sent = json.loads(json.dumps(reply["tool_calls"]))

    message = lesson.normalize_reply(reply, [])

    assert message.get("tool_calls") == sent, (
        "calls with ids of their own (of any form and length: 'toolu_01A9q' is one "
        "server's, and vLLM's, 'chatcmpl-tool-' and 32 digits, is longer than the 40 "
        "characters an id made up may have; ' call 4 ' keeps its blanks), "
        "names as the model wrote them ('lookAround', 'buy ') and JSON-object "
        "arguments (spaces and a newline around them are JSON too) should be stored "
        f"byte for byte as the model sent them, {sent}; stored "
        f"{message.get('tool_calls')}")
    stored = json.dumps(message, ensure_ascii=False)
    came = json.dumps(reply, ensure_ascii=False)
    assert stored == came, (
        "a well-formed reply is stored byte for byte, its keys and its calls' keys in "
        "the order they came (the next lessons write it to a log a person reads): it "
        f"came as {came}, and is stored as {stored}")
    assert message.get("content") == " Let me look around.\n", (
        "the text that came with the calls, ' Let me look around.\\n', should be "
        "stored as the model wrote it, its space and line break included: nothing "
        f"the model said is changed; stored {message.get('content')!r}")
    for text in ("\n", " "):
        message = lesson.normalize_reply({"role": "assistant", "content": text}, [])
        assert message == {"role": "assistant", "content": text}, (
            f"a plain reply whose text is {text!r} (only whitespace, and text all the "
            "same: the content is '' only where the server sent none) should be stored "
            f"as it came, {{'role': 'assistant', 'content': {text!r}}}; stored "
            f"{message}")
    for text in ("The cave.\r\nThe torch.\r\n", "Dawn.\rDusk.", "A\u2028B\x85C"):
        message = lesson.normalize_reply({"role": "assistant", "content": text}, [])
        assert message == {"role": "assistant", "content": text}, (
            f"a plain reply whose text is {text!r} (line ends of Windows, a lone "
            "carriage return, characters Python splits lines at: the model's text all "
            "the same) should be stored as it came, byte for byte, "
            f"{{'role': 'assistant', 'content': {text!r}}}; stored {message}: the next "
            "request would send back text the model did not write")


@pytest.mark.task("00.3")
def test_arguments_sent_as_an_object_keep_non_ascii_text_readable(lesson):
    """Arguments that came as an object are stored as JSON text that keeps non-ASCII
    characters as they are, not as escapes: the stored call is what later lessons write
    to the log, and a person reads that log."""
    reply = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1_0", "type": "function",
         "function": {"name": "talk_to", "arguments": {"npc": "洞窟の番人"}}}]}

    message = lesson.normalize_reply(reply, [])

    calls = message.get("tool_calls") or [{}]
    arguments = calls[0].get("function", {}).get("arguments")
    assert isinstance(arguments, str) and "洞窟の番人" in arguments, (
        "the arguments {'npc': '洞窟の番人'} came as an object; stored as JSON "
        f"text they should read as the model wrote them, got {arguments!r}")


@pytest.mark.task("00.3")
def test_arguments_sent_as_an_object_are_stored_as_that_whole_object(lesson):
    """Arguments that came as an object are stored as the JSON text of that object,
    whole: a null, true and false, a number, a list, as the model sent them (the tool
    runs on what read_arguments read, and the stored call must say the same)."""
    sent = {"npc": "elder", "mood": None, "polite": True, "armed": False,
            "gifts": ["rope", 2.5, None], "gold": 0}
    reply = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1_0", "type": "function",
         "function": {"name": "talk_to", "arguments": dict(sent)}}]}

    message = lesson.normalize_reply(reply, [])

    calls = message.get("tool_calls") or [{}]
    arguments = calls[0].get("function", {}).get("arguments")
    try:
        read = json.loads(arguments) if isinstance(arguments, str) else None
    except ValueError:
        read = None
    assert read == sent, (
        f"the arguments came as the object {sent}; the stored call should hold the "
        "JSON text of that object, whole (its null, true and false as JSON writes "
        f"them), and holds {arguments!r}: the call is stored as something other than "
        "what the tool ran with, or as text no provider reads")


@pytest.mark.task("00.3")
@pytest.mark.parametrize("sent", [{"count": float("nan")},
                                  {"order": [{"gold": float("inf")}]}, ["rope"]],
                         ids=["object-NaN", "nested-Infinity", "list"])
def test_arguments_refused_that_came_as_a_value_are_stored_as_the_empty_object(
        lesson, sent):
    """Arguments may come as a value rather than as text (llama.cpp's server sends an
    object). When read_arguments refuses them (NaN or Infinity in them, or no object
    at all), the stored call holds the empty object, as it does for refused text:
    JSON text written from what came would hold NaN, or no object, and a strict
    provider refuses it with every later request."""
    reply = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "buy", "arguments": sent}}]}

    message = lesson.normalize_reply(reply, [])

    calls = message.get("tool_calls") or [{}]
    stored = calls[0].get("function", {}).get("arguments")
    try:
        read = json.loads(stored) if isinstance(stored, str) else None
    except ValueError:
        read = None
    assert read == {}, (
        f"the arguments came as the value {sent!r}, which read_arguments refuses "
        f"(task 00.1), and the stored call holds {stored!r}: arguments it refuses are "
        "stored as the empty object, '{}', however they came, or the stored call is "
        "one a strict provider refuses with this request and every later one")


@pytest.mark.task("00.1")
@pytest.mark.parametrize("arguments, expected", [
    ('{"item": "rope"}', {"item": "rope"}), ({"item": "rope"}, {"item": "rope"}),
    ("", {}), (None, {}),
    ('{"npc": "Infinity", "note": "NaN"}', {"npc": "Infinity", "note": "NaN"}),
    ({"npc": "-Infinity", "gold": 1e308}, {"npc": "-Infinity", "gold": 1e308}),
    ('{"note": "NaN and Infinity are words, -Infinity too"}',
     {"note": "NaN and Infinity are words, -Infinity too"})])
def test_read_arguments_takes_what_servers_send_for_an_object(
    lesson, arguments, expected
):
    """JSON text, an object, "" and null all read as the arguments they stand for; so
    do arguments whose text holds the words NaN or Infinity (alone, or among other
    words), or a large number that is still a number (only the values NaN and
    Infinity are no JSON)."""
    try:
        got = lesson.read_arguments(arguments)
    except ValueError as error:
        pytest.fail(
            f"read_arguments({arguments!r}) should give {expected!r}, it raised: "
            f"{error}"
        )
    assert got == expected, (
        f"read_arguments({arguments!r}) should give {expected!r}, got {got!r}"
    )


@pytest.mark.task("00.1")
@pytest.mark.parametrize(
    "arguments", ["{item: rope", '["rope"]', '"rope"', "42", ["rope"], [], 0, "null",
                  "None", '{"item": "ro\npe"}', " ", "\n", '{"item": "rope"}}',
                  '```json\n{"item": "rope"}\n```', '{"item": "rope"}\u00a0',
                  '\ufeff{"item": "rope"}', '{"item": "rope",}', "{'item': 'rope'}",
                  '{"item": "rope", "lit": True}', '{"item": "rope"} // a long one',
                  b'{"item": "rope"}']
)
def test_read_arguments_refuses_what_is_no_object(lesson, arguments):
    """Text that is not JSON, or JSON that is not an object, raises ValueError: the
    text null too and blank text (only a missing value, None, or "" means no
    arguments), and a line break left raw inside a string, which JSON does not
    allow; and an object with text around it (a closing brace too many, a Markdown
    code fence, a byte order mark before it), and a comma before a closing brace,
    which a lenient reader would take though no provider does; and what a model
    writes that is Python or code rather than JSON (single quote marks, True, a
    comment after the object), which a reader that forgives it runs and
    normalize_reply then keeps as it came; and bytes, which no server sends for
    arguments (JSON has text, never bytes), though Python's reader takes them."""
    try:
        got = lesson.read_arguments(arguments)
    except ValueError:
        return
    blank = (" blank text is no JSON (only None or \"\" means no arguments), and "
             "normalize_reply keeps text it reads as it came, where a provider refuses "
             "it")
    why = {"None": " the text 'None' is no JSON at all (a call without arguments "
                   "comes with the value None or \"\", never with their text), and "
                   "normalize_reply would store it as it came, where a provider "
                   "refuses it",
           "null": " the text 'null' is JSON of no object (a call without arguments "
                   "comes with None or \"\"), and normalize_reply would store it as "
                   "it came, where a provider reading an object refuses it",
           '{"item": "ro\npe"}': " a raw line break inside a JSON string is no "
                                 "JSON (it is written \\n there), and a strict "
                                 "provider refuses the stored call holding it",
           " ": blank, "\n": blank}
    around = (" an object with text around it is no JSON: normalize_reply keeps text "
              "it reads as it came, and a provider refuses the stored call (read only "
              "the text of one JSON object, whole)")
    why['{"item": "rope"}}'] = why['```json\n{"item": "rope"}\n```'] = around
    why['{"item": "rope"}\u00a0'] = (
        " a no-break space after the object is no blank to JSON (only spaces, tabs "
        "and line breaks are), so the text is no JSON: normalize_reply keeps text it "
        "reads as it came, and a strict provider refuses the stored call")
    why['\ufeff{"item": "rope"}'] = (
        " a byte order mark before the object is no blank to JSON, and Python's "
        "reader refuses it: read past it, the text runs, and normalize_reply keeps it "
        "as it came, mark and all, which a strict provider refuses")
    why['{"item": "rope",}'] = (
        " a comma before the closing brace is no JSON (small models write it, and "
        "Python's reader refuses it): taken out before reading, the call runs, and "
        "normalize_reply keeps the text as it came, comma and all, which a strict "
        "provider refuses")
    not_json = (" it is Python's way or a program's, not JSON's (JSON has only double "
                "quote marks, true, and no comments): read by a reader that forgives "
                "it, the call runs, and normalize_reply keeps the text as it came, "
                "which every strict provider refuses with every later request")
    for text in ("{'item': 'rope'}", '{"item": "rope", "lit": True}',
                 '{"item": "rope"} // a long one'):
        why[text] = not_json
    why[str(b'{"item": "rope"}')] = (
        " bytes are no text and no object: no server sends arguments as bytes, and "
        "whatever is neither what servers send for an object nor text of one is "
        "refused, however a reader could take it")
    pytest.fail(
        f"read_arguments({arguments!r}) should raise ValueError, it returned {got!r}:"
        f"{why.get(str(arguments), ' it is no JSON object')}", pytrace=False
    )


@pytest.mark.task("00.3")
def test_fields_a_server_adds_to_its_reply_are_not_stored(lesson):
    """A reasoning text, a refusal of null, annotations: whatever a server adds to its
    reply, whatever its name, is not sent back (DeepSeek refuses a request whose
    messages carry reasoning_content): the stored message holds the role, the text
    and the calls, nothing else."""
    reply = {"role": "assistant", "content": "A torch and a rope.",
             "reasoning_content": "The elder said so on day one.", "refusal": None,
             "annotations": [], "audio": None, "function_call": None,
             "tool_calls": [{"id": "call_1_0", "type": "function", "index": 0,
                             "extra_content": {"signature": "c2ln"},
                             "function": {"name": "buy", "parsed": None,
                                          "strict": None,
                                          "arguments": '{"item": "rope"}'}}]}

    message = lesson.normalize_reply(reply, [])

    assert sorted(message) == ["content", "role", "tool_calls"], (
        "the stored reply should hold role, content and tool_calls only; it holds "
        f"{sorted(message)}")
    plain = {key: value for key, value in reply.items() if key != "tool_calls"}
    stored = lesson.normalize_reply(plain, [])
    assert sorted(stored) == ["content", "role"], (
        f"a plain answer, without calls, came with the fields {sorted(plain)}; the "
        "stored reply should hold role and content only, whether the reply called "
        f"tools or not; it holds {sorted(stored)}")
    call = message["tool_calls"][0]
    assert sorted(call) == ["function", "id", "type"] and sorted(
            call["function"]) == ["arguments", "name"], (
        "a stored call should hold its id, its type and its function (a name and the "
        "arguments), nothing a server added to it (an index, a parsed copy: a "
        f"provider refuses fields it does not know); it holds {call}")


@pytest.mark.task("00.3")
def test_normalize_reply_leaves_the_reply_as_it_came_and_shares_nothing_with_it(
        lesson):
    """normalize_reply leaves the reply it is given as it came: the loop still runs
    each call from it, as the model sent it, and a caller may keep it to see what the
    server sent. And the message it returns is its own: changing the reply after
    never changes the history, nor the other way round."""
    import copy

    reply = {"role": "assistant", "reasoning_content": "Torches burn an hour.",
             "refusal": None, "content": [
                 {"type": "thinking", "thinking": "The shop first."},
                 {"type": "text", "text": "Let me "},
                 {"type": "text", "text": "shop."}],
             "tool_calls": [
                 {"id": "call_a", "type": "function", "index": 0,
                  "function": {"name": "buy", "arguments": '{"item": "rope"}'}},
                 {"id": None, "function": {"name": "buy",
                                           "arguments": {"item": "torch"}}},
                 {"id": "call_a", "function": {"name": "buy", "arguments": None}},
                 {"id": "", "type": "function",
                  "function": {"name": "buy", "arguments": "{item: rope"}}]}
    sent = copy.deepcopy(reply)

    try:
        message = lesson.normalize_reply(reply, [])
    except NotImplementedError:
        raise
    except Exception as error:      # noqa: BLE001 - reported in words below
        for call in sent["tool_calls"]:
            arguments = copy.deepcopy(call["function"]["arguments"])
            try:
                lesson.read_arguments(arguments)
            except ValueError:
                pass
            except Exception as inner:      # noqa: BLE001 - reported in words
                fail_in("00.1", f"read_arguments({arguments!r}) raised "
                        f"{described(inner)}: it gives a dict, or raises ValueError "
                        "for arguments it refuses, whatever a server sent (task 00.1)")
        fail_in("00.3", f"normalize_reply raised {described(error)}, given the reply "
                f"{sent}: it makes a message to store of whatever a server sends")

    assert reply == sent, (
        f"normalize_reply was given the reply {sent} and changed it into {reply}: the "
        "loop runs each call from the reply as the model sent it (only what it wrote "
        "lets run_tool tell it what it got wrong), and a caller may keep the reply to "
        "see what the server sent; the message to store is a new one, and the reply "
        "is left as it came")
    stored = copy.deepcopy(message)
    for call in reply["tool_calls"]:
        call["id"] = "changed"
        call["function"]["name"] = "steal"
        call["function"]["arguments"] = '{"item": "crown"}'
        call["function"]["extra"] = 1
    reply["content"].append({"type": "text", "text": " And steal."})
    reply["content"][1]["text"] = "Now "
    assert message == stored, (
        f"normalize_reply stored {stored}; the caller then changed the reply it had "
        f"given (its calls' ids, names and arguments, its parts), and the stored "
        f"message now reads {message}: the message to store shares nothing with the "
        "reply, or a change to one is a change to the history the next request sends")


@pytest.mark.task("00.3")
@pytest.mark.parametrize("sent", [{}, {"type": None}, {"type": ""}],
                         ids=["no-type", "type-null", "type-empty"])
def test_every_stored_call_has_the_type_function(lesson, sent):
    """A call may come without a type (Ollama's own format has none) or with a null
    one: the stored call says "function", the only type a provider takes back, and
    the reply's null content is stored as text."""
    reply = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1_0", **sent,
         "function": {"name": "buy", "arguments": '{"item": "rope"}'}}]}

    message = lesson.normalize_reply(reply, [])

    calls = message.get("tool_calls") or [{}]
    assert calls[0].get("type") == "function", (
        f"the call came with {sent or 'no type'} and was stored with the type "
        f"{calls[0].get('type', '(none)')!r}: a provider refuses a call whose type is "
        "not 'function' with every later request; each stored call has the type "
        "'function', whatever the server sent")
    assert message.get("content") == "", (
        "the reply came with content null beside its call, and was stored with the "
        f"content {message.get('content')!r}: a stored reply's content is text, '' "
        "where the server sent none (Ollama and LM Studio refuse null even beside "
        "tool calls)")


@pytest.mark.task("00.3")
def test_a_call_that_came_without_id_and_type_keys_is_stored_with_both(lesson):
    """Ollama's own format sends a call as its function alone: no id key and no type
    key at all (absent, not null). It is stored like a call whose id came null: a new
    id no other call has, the type function, and its arguments as they came."""
    reply = {"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "buy", "arguments": '{"item": "rope"}'}}]}
    try:
        message = lesson.normalize_reply(reply, [])
    except NotImplementedError:
        raise
    except Exception as error:
        pytest.fail("a call came without an id key or a type key, "
                    f"{reply['tool_calls']}, as Ollama's own format sends it; "
                    f"normalize_reply raised "
                    f"{described(error)}, and the turn dies with the reply unrecorded: "
                    "a call without an id gets one, whether the key is null or "
                    "absent", pytrace=False)
    calls = message.get("tool_calls") or []
    ids = [call.get("id") for call in calls]
    assert len(calls) == 1 and isinstance(ids[0], str) and 0 < len(ids[0]) <= 40 and (
        calls[0].get("type") == "function") and calls[0].get("function") == {
            "name": "buy", "arguments": '{"item": "rope"}'}, (
        f"a call came without an id key or a type key, {reply['tool_calls']}; it "
        "should be stored with a new string id (of at most 40 characters), the type "
        f"'function' and its function as it came; stored {calls}")


@pytest.mark.task("00.3")
def test_a_call_that_names_no_tool_is_stored_like_any(lesson):
    """A call whose tool name is empty, or only blanks, is the model's mistake, not a
    server's noise: it is stored like any call, in its place (run_tool tells the model
    the name it got wrong), so that nothing the model said is lost and each stored
    call stays beside the call the model sent."""
    names = ["", "buy", "  "]
    reply = {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{number}", "type": "function",
         "function": {"name": name, "arguments": '{"item": "rope"}'}}
        for number, name in enumerate(names)]}

    message = lesson.normalize_reply(reply, [])

    stored = [call.get("function", {}).get("name")
              for call in message.get("tool_calls") or []]
    assert stored == names, (
        f"the reply's calls named the tools {names}, in that order, and the stored "
        f"reply's calls name {stored}: every call the model sent is stored, in its "
        "place, a name that is empty or blank included (the loop answers each with "
        "what running it gave, an error naming what was sent)")


@pytest.mark.task("00.3")
def test_a_reply_whose_tool_calls_is_null_is_a_plain_answer(lesson):
    """A reply may say "tool_calls": null (what the OpenAI library writes out for a
    plain answer): it calls nothing, and is stored as a plain answer, its text and no
    "tool_calls" key."""
    reply = {"role": "assistant", "content": "The cave is north.", "tool_calls": None}
    try:
        message = lesson.normalize_reply(reply, [])
    except NotImplementedError:
        raise
    except Exception as error:
        pytest.fail(f"the reply {reply} calls nothing (tool_calls null, as the OpenAI "
                    f"library writes a plain answer out), and normalize_reply raised "
                    f"{described(error)}: the answer is lost and the turn dies",
                    pytrace=False)
    assert message == {"role": "assistant", "content": "The cave is north."}, (
        f"the reply {reply} is a plain answer: it should be stored as {{'role': "
        "'assistant', 'content': 'The cave is north.'}, with no 'tool_calls' (a null "
        f"one is refused by providers); stored {message}")


@pytest.mark.task("00.3")
def test_text_in_parts_beside_calls_is_kept_with_them(lesson):
    """Content in parts may come with calls (a thinking part, then what the model says
    before it acts): the text parts are its words all the same, stored as the reply's
    text beside its calls, and nothing of the thinking."""
    reply = {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "The shop first."},
        {"type": "text", "text": "Let me buy "}, {"type": "text", "text": "a rope."}],
        "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": "buy", "arguments": '{"item": "rope"}'}}]}

    message = lesson.normalize_reply(reply, [])

    assert message.get("content") == "Let me buy a rope." and len(
            message.get("tool_calls") or []) == 1, (
        "the reply came with a thinking part, two text parts ('Let me buy ', 'a "
        "rope.') and a call: the stored reply should hold the text parts' text, 'Let "
        "me buy a rope.', beside its one call (nothing the model said is lost); it "
        f"holds the content {message.get('content')!r} and the calls "
        f"{message.get('tool_calls')}")


@pytest.mark.task("00.3")
def test_only_the_text_parts_of_a_content_list_are_the_answer(lesson):
    """Content sent as parts: the answer is the text of the parts whose type is text,
    in order, a part of blanks or line breaks alone included. A part of another type
    is not the answer, even one that carries a text of its own (a reasoning part, as
    some servers send it), nor one between two text parts, whose texts are still the
    answer, as they came."""
    reply = {"role": "assistant", "tool_calls": [], "content": [
        {"type": "reasoning", "text": "The shop is closed on Sundays."},
        {"type": "text", "text": "The shop "}, {"type": "text", "text": "is open."}]}

    message = lesson.normalize_reply(reply, [])

    assert message.get("content") == "The shop is open.", (
        "the reply's content came as a reasoning part and two text parts; the stored "
        "text should be the text parts' text, 'The shop is open.', and nothing of the "
        f"reasoning; it is {message.get('content')!r}")
    thinking = {"role": "assistant", "tool_calls": [], "content": [
        {"type": "thinking", "thinking": [{"type": "text", "text": "Hmm."}]}]}
    message = lesson.normalize_reply(thinking, [])
    assert message.get("content") == "", (
        f"the reply's content came as one thinking part, {thinking['content']}, and "
        "no text part: the answer is empty text, '', and nothing of the thinking; "
        f"it was stored as {message.get('content')!r}")
    only_text = {"role": "assistant", "tool_calls": [], "content": [
        {"type": "text", "text": "The shop "}, {"type": "text", "text": "is open."}]}
    message = lesson.normalize_reply(only_text, [])
    assert message.get("content") == "The shop is open.", (
        f"the reply's content came as two text parts and nothing else, "
        f"{only_text['content']}: the stored content is text all the same, their "
        "texts put end to end, 'The shop is open.'; it was stored as "
        f"{message.get('content')!r}")
    between = {"role": "assistant", "tool_calls": [], "content": [
        {"type": "text", "text": "The shop "},
        {"type": "thinking", "thinking": [{"type": "text", "text": "Sunday?"}]},
        {"type": "text", "text": "is open.\n"}]}
    message = lesson.normalize_reply(between, [])
    assert message.get("content") == "The shop is open.\n", (
        "the reply's content came as a text part, a thinking part, and a text part; "
        "the answer is every text part, in order, put end to end as it came, "
        "'The shop is open.\\n' (its line break included), and nothing of the "
        f"thinking; it was stored as {message.get('content')!r}")
    spaced = {"role": "assistant", "tool_calls": [], "content": [
        {"type": "text", "text": "The shop"}, {"type": "text", "text": " "},
        {"type": "text", "text": "is open."}, {"type": "text", "text": "\n\n"}]}
    message = lesson.normalize_reply(spaced, [])
    assert message.get("content") == "The shop is open.\n\n", (
        f"the reply's content came as four text parts, {spaced['content']}, two of "
        "them blank: the blanks are the model's text too, and the answer is every "
        "text part put end to end, 'The shop is open.\\n\\n'; it was stored as "
        f"{message.get('content')!r}")


@pytest.mark.task("00.3")
def test_content_of_an_unknown_shape_is_never_stored_as_python_prints_it(lesson):
    """Content of a shape no server documents (a lone text part, not in a list) is
    stored as text: its part's text, or empty text, never Python's printout of the
    part (braces and quotes the model never wrote, sent back with every request). So
    is a text part whose text is no string, and a list whose items are no parts (a
    bare string, null, a number): no crash, and no printout."""
    part = {"type": "text", "text": "The shop is open."}
    message = lesson.normalize_reply({"role": "assistant", "content": part}, [])

    content = message.get("content")
    assert content in ("", "The shop is open."), (
        f"the reply's content came as a lone text part, {part}, outside a list; the "
        "stored content should be text: the part's text, 'The shop is open.', or "
        f"empty text, never Python's printout of it; it was stored as {content!r}")
    nested = [{"type": "text", "text": [{"type": "text", "text": "The shop "}]},
              {"type": "text", "text": "is open."}]
    bare = ["The shop ", None, 7, {"type": "text", "text": "is open."}]
    for parts, kind in ((nested, "the first a text part whose text is no string but "
                                 "a list (as a thinking part nests its own)"),
                        (bare, "among them a bare string, null and a number, no "
                               "parts of any shape a server documents")):
        try:
            message = lesson.normalize_reply({"role": "assistant", "content": parts},
                                             [])
        except Exception as error:
            pytest.fail(f"the reply's content came as parts, {parts}, {kind}; "
                        f"normalize_reply raised {described(error)}, and the turn "
                        "dies on it with the reply unrecorded: content of a shape no "
                        "server documents is stored as text, never a crash",
                        pytrace=False)
        content = message.get("content")
        assert (isinstance(content, str) and "{" not in content and "[" not in content
                and "None" not in content), (
            f"the reply's content came as parts, {parts}, {kind}; the stored content "
            "should be text (the text of the parts whose text is text, or empty text), "
            f"never Python's printout of a part; it was stored as {content!r}")
