"""Lesson 08: the request is a view of the log (compaction).

Run: pytest lessons/08_compact            (your code)
     pytest lessons/08_compact --solution (the reference)
"""

import contextlib
import json
import os
import re
import sys
import time
from datetime import datetime, timezone

import openai
import pytest

from sessionlab.scripted import (
    ANSWER_AFTER_THOUGHT, CALL_TEXT, Crash, Disconnect, Fail, InvalidRequest,
    is_retried_summary, is_summary_request, long_reply, NO_ANSWER, ODD_REPLIES,
    ScriptedModel,
    SimulatedCrash, THOUGHT, call, raw, say, summaries, use, validate)
from sessionlab.town import TOOL_SCHEMAS, Town
from sessionlab.testing import (check_time, fail_in, in_child,
                                local_clock_ahead_of_utc, open_descriptors, raises,
                                unless_unfinished, until_written, wait_past)

SYSTEM = "You are an adventurer in a small town."
# A system prompt read from a blank file: set, and not empty, so every lesson sends it
BLANK_SYSTEM = "\n"
# Room for the answer in these tests: small, so that a budget of a few hundred tokens
# holds a few turns of the quest.
REPLY_ROOM = 100
# With the town's tools (about 160 tokens) and the room above, a budget of 420 leaves
# the messages about 150 tokens: four or five short turns, then a compaction.
BUDGET = 420


# Plain summaries as the tests record them: one line, lines, words beyond ASCII
PLAIN_SUMMARIES = ("summary #1", "summary of days",
                   "Day 1: the elder\nsaid \u00abthe ledge\u00bb \u2014 steep.")


@pytest.fixture(autouse=True)
def the_check_takes_a_plain_summary(request, lesson):
    """Every compaction recorded goes through the summary's check (task 08.4's
    reply_answer, called by compaction_marker): a check that refuses or changes a plain
    summary would fail the tests of the other tasks in words about their own code. So,
    once 08.4 is written, it is tried first, and such a failure names 08.4."""
    if "08.4" in [mark.args[0] for mark in request.node.iter_markers("task")]:
        return      # its own tests say what they find
    for summary in PLAIN_SUMMARIES:
        try:
            answer = lesson.reply_answer(summary)
        except NotImplementedError:
            return      # not written yet: a test that needs it says so
        except ValueError as error:
            fail_in("08.4", f"reply_answer({summary!r}), the check every summary "
                    f"passes before it is recorded, refused it ({error}): a plain "
                    "text is the answer it gives, so no compaction could be recorded")
        if answer != summary:
            fail_in("08.4", f"reply_answer({summary!r}), the check every summary "
                    f"passes before it is recorded, gave {answer!r}: a plain text is "
                    "its own answer, given back as it is")


def day(n):
    """One short turn of the quest: the user's message and the model's answer."""
    return (f"Day {n}: what now?", [say(f"On day {n} we rest by the mill.")])


def numbered_summaries():
    """A summariser for the scripted model: "summary #1", "summary #2" ... in order,
    short, so that the tests decide the sizes."""
    made = []

    def summarise(body):
        made.append(body)
        return f"summary #{len(made)}"
    return summarise


def open_agent(lesson, sessions, script=(), *, budget=BUDGET, session_id="quest-1",
               tools=None, summarise=None):
    """A new agent on the session, as a new process makes it, with its own model.
    With `sessions` None, an agent with no session (its log is then a stand-in that
    only closes), for the tests that need nothing the log records."""
    model = ScriptedModel(script if callable(script) else list(script),
                          summarise=summarise or numbered_summaries())
    if sessions is None:
        agent = lesson.Agent(model.client(), model=model.model, tools=tools or Town(),
                             system=SYSTEM, budget=budget, reply_room=REPLY_ROOM)
        return agent, model, NoLog()
    log = lesson.SessionLog(sessions, session_id)
    try:
        agent = lesson.Agent(model.client(), model=model.model, tools=tools or Town(),
                             session=log, system=SYSTEM, budget=budget,
                             reply_room=REPLY_ROOM)
    except BaseException:
        log.close()
        raise
    return agent, model, log


class NoLog:
    """What open_agent returns as the log of an agent with no session."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def as_log(lines) -> str:
    """Entries (messages and markers) as a log's text: a JSON line each."""
    return "".join(json.dumps(line) + "\n" for line in lines)


def lines_of(path):
    return [json.loads(line) for line in path.read_bytes().split(b"\n") if line]


def messages_in(path):
    return [line for line in lines_of(path) if "$marker" not in line]


def compactions_in(path):
    return [line for line in lines_of(path) if line.get("$marker") == "compaction"]


def size_of(lesson, request):
    """What a request costs, as the budget counts it: its messages, its tools and the
    room for the reply."""
    return (lesson.estimate_tokens(request["messages"])
            + lesson.estimate_tokens(request.get("tools") or []) + REPLY_ROOM)


# A ContextOverflow tells the user what they can do: a larger budget is one way
RAISE_THE_BUDGET = re.compile(r"(?i)\b(raise|increase|grow)\b[^.;:]{0,30}\bbudget\b"
                              r"|\b(larger|bigger|higher)\s+budget\b"
                              r"|\bbudget\b[^.;:]{0,20}\b(raised|increased)\b")


def overflow_says_enough(refusal, budget, sizes):
    """Why a ContextOverflow's message falls short, or None: it gives the budget, the
    request's size (one of `sizes`, or any number over the budget when `sizes` is
    None) and what the user can do (undo the turn, or raise the budget)."""
    numbers = {int(n) for n in re.findall(r"\d+", refusal)}
    size = (numbers & set(sizes)) if sizes is not None else {
        n for n in numbers if n > budget}
    # The number nearest a mention of the budget is the budget, not the size
    nearest = [min(re.finditer(r"\d+", refusal),
                   key=lambda n: min(abs(n.start() - word.end()),
                                     abs(word.start() - n.end())), default=None)
               for word in re.finditer(r"(?i)budget", refusal)]
    missing = [what for what, there in (
        (f"the budget ({budget})", budget in numbers),
        (f"the budget ({budget}) where it says 'budget' (not the size there)",
         any(n is not None and int(n.group()) == budget for n in nearest)),
        ("the request's size" + (f" ({' or '.join(map(str, sorted(sizes)))})"
                                 if sizes is not None else ", more than the budget"),
         bool(size)),
        ("that the turn can be undone", re.search(r"(?i)\bundo", refusal)),
        ("that the budget can be raised", RAISE_THE_BUDGET.search(refusal)))
        if not there]
    return ", ".join(missing) or None


def assert_overflow_says_enough(refusal, budget, sizes=None, where=""):
    missing = overflow_says_enough(refusal, budget, sizes)
    assert missing is None, (
        f"a ContextOverflow{where} should tell the user how large the request is, the "
        "budget, and what they can do (undo the turn, or raise the budget), whatever "
        f"path raised it; it leaves out {missing}. It says {refusal!r}")


# What a refusal raised as it should be, but without the words asked for, left out
NAME_THE_LOG = ("It should name the log (quest-1), so that the user knows which log "
                "refused")
SAY_FORK = ("It should say that a fork from before the boundary is the way back to "
            "the messages the summary stands for")


def undo_refused(lesson, log, path, count, why,
                 unchanged="a refused undo must not write to the log"):
    """The log's undo(count) raises UndoError (`why` says what is wrong if it goes
    ahead), saying that a fork is the way back, and writes nothing. Returns the
    error."""
    before = path.read_bytes()
    with raises(lesson.UndoError, why, match="(?i)fork",
                unmatched=SAY_FORK) as raised:
        log.undo(count)
    assert path.read_bytes() == before, unchanged
    return raised.value


def shape(messages, width=40):
    """A request's messages as (role, start of the content): what a failure shows."""
    return [(m.get("role"), str(m.get("content"))[:width]) for m in messages]


def compacted_view(lesson, summary, kept, system=SYSTEM):
    """The messages of a request made after a compaction with `summary`, followed by
    the messages `kept`, as the agent's own view() (task 08.2) makes it: how the summary
    stands in a request is that task's design, which its own test holds to the
    contract."""
    agent = agent_without_session(lesson, kept, lesson.Compaction(summary, 0),
                                  system=system)
    return agent.view()


def summary_message(lesson, summary):
    """The message in which the agent's own view() (task 08.2) puts `summary`, for the
    tests that look for it in a request: what view() sends between the system prompt and
    the messages kept."""
    view = compacted_view(lesson, summary, [])
    if len(view) != 2 or view[0] != {"role": "system", "content": SYSTEM}:
        fail_in("08.2", "after a compaction that keeps no message, the request "
                "view() makes should hold the system prompt and then only what tells "
                "the model the summary, as recorded; the model gets "
                f"{shape(view)}")
    return view[1]


def text_of(content):
    """A message's text: its content, or the text of its parts."""
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content
                       if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def what_a_compacted_view_gets_wrong(lesson, view, summary, kept, before, system):
    """Why `view` is not a request a provider takes and that shows the model its system
    prompt, `summary` for the messages `before` and then the messages `kept`, or None.
    Behaviour only: how the summary is worded around the lesson's intro is free."""
    try:
        validate({"model": "m", "messages": view or [{"role": "user", "content": ""}]})
    except InvalidRequest as error:
        return f"a provider refuses it (HTTP 400: {error.message})"
    rules = [m for m in view if m.get("role") in ("system", "developer")]
    if any(summary in text_of(m.get("content")) for m in rules):
        return ("the summary is in a system message: the model reads a system message "
                "as its rules, and would take the account of earlier turns for "
                "instructions, not 'for what it is: another model's account of earlier "
                "turns' (and some providers refuse a system message after the first, "
                "and some models read only the first)")
    head = [{"role": "system", "content": system}] if system else []
    if view[:len(head)] != head:
        return ("it should begin with the system prompt as it was set, and only when "
                "there is one (an empty prompt is none, as in every lesson before)")
    if len(view) < len(head) + len(kept) or view[len(view) - len(kept):] != kept:
        return (f"it should end with the {len(kept)} message(s) from the boundary on, "
                "as they were said, in order: the model is working on them")
    middle = view[len(head):len(view) - len(kept)]
    if not middle:
        return ("nothing stands between the system prompt and the messages from the "
                "boundary on: the model never learns of the turns before the boundary, "
                "which it should learn of from the summary, as recorded")
    if len(middle) != 1:
        return (f"between the system prompt and the messages from the boundary on it "
                f"holds {len(middle)} messages, {shape(middle, 30)}: the model should "
                "learn of the turns before the boundary only from the summary, as "
                "recorded")
    role, text = middle[0].get("role"), text_of(middle[0].get("content"))
    if role == "assistant":
        return ("the summary is an assistant message: the model reads those as its own "
                "words, and would take another model's account of earlier turns for "
                "something it said itself, not 'for what it is'")
    intro = text.find(lesson.SUMMARY_INTRO)
    if intro < 0 or text.find(summary, intro + len(lesson.SUMMARY_INTRO)) < 0:
        return ("the summary message should hold the summary as recorded, after "
                "SUMMARY_INTRO, so that the model reads it as an account of earlier "
                f"turns and not as something just said; it holds {text[:80]!r}")
    sent = [text_of(m.get("content")) for m in before if text_of(m.get("content"))]
    leaked = [said for said in sent if said in text]
    if leaked:
        return (f"the summary message also carries {leaked[0]!r}, which the summary "
                "stands for: the model is told it twice, and the request does not "
                "shrink")
    return None


def turn_requests(model):
    """The requests of the quest itself, not the ones asking for a summary."""
    return [r for r in model.requests if r not in model.summary_requests]


def play_until_compacted(lesson, agent, model, first_day=1, compactions=1, limit=30):
    """Play short days until the model has been asked for `compactions` summaries;
    return the days played."""
    days = []
    for n in range(first_day, first_day + limit):
        text, steps = day(n)
        model.add(*steps)
        agent.run(text)
        days.append(n)
        if len(model.summary_requests) >= compactions:
            return days
    pytest.fail(f"{limit} days of the quest were played with a budget of {BUDGET} "
                f"tokens and the model was asked for {len(model.summary_requests)} "
                f"summary(ies), not {compactions}: the requests grew past the budget, "
                "and the model was never asked to summarise what came before",
                pytrace=False)


@contextlib.contextmanager
def compaction_markers_refused(monkeypatch):
    """While it lasts, writing a compaction marker fails as on a full disk, and that
    OSError ends the with block quietly."""
    real = os.write

    def write(fd, data):
        if b'"compaction"' in bytes(data):
            raise OSError(28, "No space left on device (the test's)")
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)
    try:
        yield
    except OSError:
        pass
    finally:
        monkeypatch.setattr(os, "write", real)   # not undo(): 08.4's stand-in stays


def agent_without_session(lesson, messages, compaction=None, system=SYSTEM):
    """An agent with no log, holding `messages` and `compaction`: what a task's own
    code does with them needs no other task."""
    model = ScriptedModel([])
    agent = lesson.Agent(model.client(), model=model.model, tools=Town(),
                         system=system, budget=None, reply_room=REPLY_ROOM)
    agent.messages = list(messages)
    agent.compaction = compaction
    return agent


def conversation(count):
    """`count` messages, a user's and the model's in turn."""
    return [{"role": "user" if k % 2 == 0 else "assistant", "content": f"message {k}"}
            for k in range(count)]


class Library(Town):
    """The town and its library: `read(book)` returns a long page."""

    def __init__(self):
        super().__init__()
        self.schemas = TOOL_SCHEMAS + [{"type": "function", "function": {
            "name": "read", "description": "Read a book in the library.",
            "parameters": {"type": "object", "properties": {"book": {"type": "string"}},
                           "required": ["book"]}}}]
        self.functions = {**self.functions, "read": self.read}

    def read(self, book):
        return f"The {book} says: " + "the cave is deep and the ledge is steep. " * 20


def summarised_as_sent(lesson):
    """The stand-in for task 08.4's summarise: one summary request, and its text taken
    as it came. No check of the reply, no second request: those are task 08.4."""
    def summarise(agent, messages, cut):
        earlier = agent.compaction.summary if agent.compaction is not None else None
        reply = agent.ask_for_summary(lesson.SUMMARY_PROMPT,
                                      lesson.transcript(earlier, messages))
        return (reply.get("content") or "").strip()
    return summarise


def answer_as_sent(content):
    """The stand-in for task 08.4's reply_answer, which compaction_marker reads a
    summary with before recording it: the text as it came, spaces trimmed; only a
    missing or blank text is refused."""
    if not isinstance(content, str) or not content.strip():
        raise ValueError("no text")
    return content.strip()


@pytest.fixture(autouse=True)
def until_task_08_4_is_written(request, monkeypatch):
    """Every compaction asks for its summary through `summarise`, and the log reads it
    through `reply_answer` before recording it (task 08.4). So that 08.1 to 08.3 are
    tested as soon as they are written, a test that does not check 08.4 goes through
    `summarised_as_sent` and `answer_as_sent` for as long as those say they are not
    written; once they are, the student's own run. The tests of 08.4 never use the
    stand-ins."""
    tasks = {mark.args[0] for mark in request.node.iter_markers("task")}
    if "08.4" in tasks or "lesson" not in request.fixturenames:
        return
    lesson = request.getfixturevalue("lesson")
    until_written(monkeypatch, lesson.Agent, "summarise", "08.4",
                  summarised_as_sent(lesson))
    compaction = sys.modules[lesson.AgentCompaction.__module__]
    until_written(monkeypatch, compaction, "reply_answer", "08.4", answer_as_sent)


# --- first: the marker of task 08.1, where a student starts -------------------------


@pytest.mark.key
@pytest.mark.task("08.1")
def test_the_compaction_is_one_marker_line_naming_the_first_message_kept_by_index(
        lesson, sessions):
    """The log's compact (no agent, no model: no other task is needed): a compaction is
    one marker line, {"$marker": "compaction", "summary": ..., "upto": ...}, with no
    role; "upto" is the index of the first message kept, counting every message in the
    file, undone ones too."""
    path = sessions / "quest-1.jsonl"
    # Two messages in the file that the log no longer shows: a turn undone on day 0
    path.write_text(as_log([{"role": "user", "content": day(0)[0]},
                            {"role": "assistant", "content": "We rest."},
                            {"$marker": "undo", "skip": [0, 1]}]))
    days = [1, 2, 3]
    with lesson.SessionLog(sessions, "quest-1") as log:
        for n in days:
            log.append({"role": "user", "content": day(n)[0]})
            log.append({"role": "assistant", "content": f"On day {n} we rest."})
        returned = log.compact(SUMMARY_ABROAD, keep=2)      # day 3's turn kept
    markers = compactions_in(path)
    assert len(markers) == 1, f"one compaction, one marker line; found {len(markers)}"
    marker = markers[0]
    assert "role" not in marker, (
        f"the compaction marker has a 'role' ({marker.get('role')!r}): a reader would "
        "take it for a message, and send it to the model")
    fields = sorted(marker)
    assert fields == sorted(["$marker", "summary", "upto", "at"]), (
        "the compaction marker has the fields the format page gives it, $marker, "
        f"summary, upto and at, and no other (every reader, lesson 11's database "
        f"store too, reads that format); it has {fields}")
    assert marker.get("summary") == SUMMARY_ABROAD, (
        f"the marker keeps the model's summary as it came; it holds "
        f"{marker.get('summary')!r}")
    assert SUMMARY_ABROAD.encode() in path.read_bytes(), (
        "the marker's summary should be in the file as UTF-8 text, readable as every "
        "message has been since lesson 01 (ensure_ascii=False, as encode_line writes "
        "a line), not as \\u escapes")
    newest = {"role": "user", "content": day(days[-1])[0]}
    assert newest in messages_in(path), (
        f"the log lost day {days[-1]}'s user message: a compaction appends a marker "
        "and removes no line")
    expected = messages_in(path).index(newest)
    assert marker.get("upto") == expected, (
        f"'upto' should be {expected}, the index of the first message kept (day "
        f"{days[-1]}'s, counting the two undone messages too: an index, not a place "
        f"among the messages shown, and not a line number); it is {marker.get('upto')}")
    assert returned == expected, (
        f"the log's compact should return the marker's 'upto' ({expected}); it "
        f"returned {returned!r}")
    try:
        at = datetime.fromisoformat(marker.get("at"))
    except (TypeError, ValueError):
        at = None
    assert at is not None and at.tzinfo is not None and abs(
        at.timestamp() - time.time()) < 600, (
        f"the marker should say when it was written ('at', as now() writes it); it "
        f"holds {marker!r}")
    with lesson.SessionLog(sessions, "quest-1") as again:
        upto = again.compact("everything", keep=0)
    assert upto == len(messages_in(path)) == compactions_in(path)[-1]["upto"], (
        "keeping no message, 'upto' is the number of messages in the file "
        f"({len(messages_in(path))}: the two undone ones count, markers do not); it "
        f"is {upto}")


# --- the budget, the view and the log -----------------------------------------------


@pytest.mark.task("08.4")
def test_summarise_alone_takes_a_good_first_reply_with_one_request(lesson, sessions):
    """summarise() alone, with no budget (nothing else is needed): a first reply that
    is a summary is the one returned, and the model is asked once, since the user waits
    for every call. First in the file, so that a summary asked for twice is blamed on
    the code that asks for it, before the tests of the budget count the requests. On an
    agent compacted already, every summary request, the firmer second one too, carries
    the previous summary beside the messages to summarise, those it is given and no
    other. On an agent with a log, it writes nothing: compact() records only what
    summarise() returns."""
    agent, model, log = open_agent(lesson, None, budget=None)
    # The model's first answer begins with its thinking, kept as it was said
    said = [*conversation(6)]
    said[1] = {"role": "assistant",
               "content": "<think>Is the elder awake?</think>\n\nmessage 1  "}
    agent.messages = [dict(message) for message in said]
    with log:
        summary = agent.summarise(agent.messages[:4], 4)
    asked = len(model.summary_requests)
    assert summary == "summary #1" and asked == 1, (
        "the model's first reply to the summary request, 'summary #1', is a summary: "
        f"summarise() should return it, having asked once; it returned {summary!r} "
        f"after {asked} request(s)")
    # Later compactions of the same agent: each summarise asks anew, once
    with log:
        for number, time in ((2, "second"), (3, "third")):
            try:
                again = agent.summarise(agent.messages[:4], 4)
            except lesson.BadSummary as error:
                pytest.fail(
                    f"summarise() was called a {time} time on the same agent (a "
                    "later compaction), each earlier call having taken the model's "
                    f"first reply; it raised BadSummary ({error}) where it should "
                    "have asked the model again: every compaction gets its own "
                    "requests, two at most", pytrace=False)
            asked = len(model.summary_requests)
            assert again == f"summary #{number}" and asked == number, (
                f"summarise() called a {time} time on the same agent should ask "
                f"once more and return the reply, 'summary #{number}'; it returned "
                f"{again!r}, the model having been asked {asked} time(s) in all")
    assert agent.messages == said, (
        "summarise() changed the conversation it summarised: its first messages are "
        f"now {shape(agent.messages[:2], 60)}, and were {shape(said[:2], 60)}. The "
        "messages it is given are the agent's own, which stay as they were said, as "
        "the log keeps them")
    # Compacted already, and a first reply that is no summary: both requests carry
    # the previous summary and the messages to summarise
    earlier = "The elder warned of the ledge."
    agent, model, log = open_agent(lesson, None, budget=None, summarise=summaries(
        "", then=numbered_summaries()))
    agent.messages = conversation(6)
    agent.compaction = lesson.Compaction(earlier, 2)
    with log:
        agent.summarise(agent.messages[2:4], 4)
    for number, request in enumerate(model.summary_requests, start=1):
        text = " ".join(str(m.get("content")) for m in request["messages"]
                        if m.get("role") == "user")
        missing = [said for said in (earlier, *(m["content"] for m in
                                                agent.messages[2:4]))
                   if said not in text]
        assert not missing, (
            f"an agent already compacted, summarising what followed its boundary: "
            f"summary request {number} should carry the previous summary and the "
            "messages it is given (the next summary stands for both, and the earlier "
            f"turns are told nowhere else); it lacked {missing}")
        again = [m["content"] for m in agent.messages[:2] if m["content"] in text]
        assert not again, (
            f"an agent already compacted at message 2, summarising messages 2 and 3: "
            f"summary request {number} should carry only the previous summary and the "
            "messages it is given, never again the ones the previous summary stands "
            f"for (resending those is what compaction is meant to stop); it carried "
            f"{again}")
    # With a log (one with no compaction: nothing of 08.1 is read), nothing is written
    path = sessions / "quest-1.jsonl"
    path.write_text(as_log(conversation(6)))
    agent, model, log = open_agent(lesson, sessions, budget=None)
    with log:
        before = path.read_bytes()
        summary = agent.summarise(agent.messages[:4], 4)
        assert path.read_bytes() == before, (
            f"summarise() returned {summary!r} and should have written nothing: "
            "compact() records the summary it returns, once, and a summary refused "
            "after it is asked for must leave the log as it was; the log gained "
            f"{lines_of(path)[len(conversation(6)):]}")


@pytest.mark.task("08.4")
@pytest.mark.parametrize("first", ["fits", "empty"])
def test_summarise_alone_on_an_agent_compacted_already_judges_the_fit_at_cut(lesson,
                                                                            first):
    """summarise() alone, on an agent compacted already (boundary at place 2), asked
    for a summary of messages 2 to 5 that leaves the request from place 6 on: the
    messages it is given do not begin at the start, so their number (4) is not the
    place the request starts again (6). A summary that fits beside the messages from
    place 6 on, exactly at the budget, is taken, first time or (after a reply that is
    no summary) second; judged at another place, it would be refused as too long, and
    the compaction would fail with a summary that fits in hand."""
    said = conversation(8)
    agent, model, log = open_agent(lesson, None, budget=None, summarise=summaries(
        *(() if first == "fits" else ("",)), then=numbered_summaries()))
    agent.messages = list(said)
    agent.compaction = lesson.Compaction("The elder warned of the ledge.", 2)
    agent.budget = agent.compacted_size("summary #1", 6)
    asked = 1 if first == "fits" else 2
    setting = ("the model's first reply, 'summary #1'" if first == "fits" else
               "after a first reply with no text, the second, 'summary #1'")
    with log:
        try:
            got = agent.summarise(agent.messages[2:6], 6)
        except lesson.BadSummary as error:
            pytest.fail(
                f"an agent compacted at place 2 asked summarise() for a summary of "
                f"messages 2 to 5, the request starting again at place 6; {setting} "
                f"makes that request exactly the budget ({agent.budget}), and "
                f"summarise() refused it: {error}. The fit is judged at the place "
                "summarise() is given (6), where the request starts again, not at the "
                "number of messages it summarises (4)", pytrace=False)
    assert got == "summary #1" and len(model.summary_requests) == asked, (
        f"{setting} fits the budget beside the messages from place 6 on: summarise() "
        f"should return it after {asked} request(s); it returned {got!r} after "
        f"{len(model.summary_requests)}")


@pytest.mark.task("08.2")
def test_the_view_is_the_system_prompt_the_summary_and_the_messages_from_the_boundary(
        lesson):
    """view() alone, on an agent whose compaction is set by hand (no other task is
    needed): without a compaction, the system prompt and the whole conversation; with
    one, wherever its boundary falls (at the start, at a user's message, at a call of
    the model's, past the end), a request every provider takes that shows the model its
    system prompt, the summary as an account of what came before, and the messages
    from the boundary on, whole. The conversation itself stays whole."""
    said = [*conversation(3),
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "talk_to", "arguments": '{"npc": "elder"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "message 4"},
            *[{**m, "content": f"message {k + 5}"} for k, m in
              enumerate(conversation(4)[1:])]]
    agent = agent_without_session(lesson, said)
    system = {"role": "system", "content": SYSTEM}
    view = agent.view()
    assert view == [system, *said], (
        "with no compaction the model should get what it got in every lesson before, "
        f"the system prompt and the {len(said)} messages as they are; it got "
        f"{shape(view)}")
    for none in (None, ""):     # lessons 00 to 07 send no system message for either
        plain = agent_without_session(lesson, said, system=none)
        view = plain.view()
        assert view == said, (
            f"an agent whose system prompt is {none!r}, not compacted: the model "
            f"should get the {len(said)} messages and no system message, as in every "
            f"lesson before; it got {shape(view)}")
        view.clear()    # what a caller does with a request is its own business
        assert plain.messages == said, (
            "clearing the request view() returned emptied the conversation itself "
            "(agent.messages): whoever trims or adds to a request changes what the "
            "agent remembers, and what a resume, an undo or a fork starts from. "
            "self.messages stays the whole conversation, whatever view returns")
    # A prompt of only a line end (read from a blank file) is set, and not empty:
    # lesson 07 sent it, so the view sends it too, as it was set
    blank = agent_without_session(lesson, said, system=BLANK_SYSTEM)
    view = blank.view()
    assert view == [{"role": "system", "content": BLANK_SYSTEM}, *said], (
        f"an agent whose system prompt is {BLANK_SYSTEM!r}, not compacted: the model "
        "should get that prompt as a system message, then the messages, as lesson 07 "
        "sent them (only a missing or empty prompt is no message, and a prompt is "
        f"sent as it was set, never trimmed); it got {shape(view)}")
    summaries = ("the first turn",
                 "Day 1: the elder\nsaid \u00abthe ledge\u00bb \u2014 steep.")
    # SYSTEM + "\n": a prompt read from a file, sent as it was set; BLANK_SYSTEM, one
    # read from a blank file, is set and not empty: sent too
    for prompt in (SYSTEM, None, "", SYSTEM + "\n", BLANK_SYSTEM):
        for cut in (2, 3, 0, len(said)):
            for summary in summaries:
                agent = agent_without_session(lesson, said,
                                              lesson.Compaction(summary, cut),
                                              system=prompt)
                view = agent.view()
                wrong = what_a_compacted_view_gets_wrong(
                    lesson, view, summary, said[cut:], said[:cut], prompt)
                assert wrong is None, (
                    f"an agent whose system prompt is {prompt!r}, compacted at place "
                    f"{cut} of {len(said)} with the summary {summary[:20]!r}: the "
                    f"request it makes is {shape(view)}, and {wrong}")
                assert agent.messages == said, (
                    "view() changed the conversation: agent.messages must stay "
                    "whole, only the request shrinks")
    # A turn taken back and another said in its place, as many messages as before:
    # the next request is the conversation as it stands now
    other = [{"role": "user", "content": "Day 9: is the inn open?"},
             {"role": "assistant", "content": "The inn is full tonight."}]
    for compaction in (None, lesson.Compaction("the first turn", 2)):
        agent = agent_without_session(lesson, said, compaction)
        agent.view()
        del agent.messages[len(said) - 2:]
        agent.messages.extend(other)
        view = agent.view()
        assert view[len(view) - 2:] == other, (
            f"an agent {'compacted' if compaction else 'not compacted'}: after view(), "
            "its last turn was taken back and another said in its place; the next "
            "request should end with that turn, as the conversation stands now, and "
            f"it ends with {shape(view[len(view) - 2:])}")
    # The program changes the system prompt between requests (a new instruction for
    # day 2, then none): each request carries the prompt as it is set then
    for compaction in (None, lesson.Compaction("the first turn", 2)):
        agent = agent_without_session(lesson, said, compaction)
        agent.view()
        for prompt in ("Day 2: answer in one line.", None, SYSTEM):
            agent.system = prompt
            view = agent.view()
            sent = [m.get("content") for m in view if m.get("role") == "system"]
            assert sent == ([prompt] if prompt else []), (
                f"an agent {'compacted' if compaction else 'not compacted'} made a "
                f"request, then its system prompt was set to {prompt!r}: the next "
                "request should carry the prompt as it is set now"
                f"{'' if prompt else ' (none)'}; its system messages are {sent}. A "
                "request built from what an earlier one held goes out of date as the "
                "agent changes")


@pytest.mark.task("08.2")
# SYSTEM + "\n": a prompt read from a file, which the view sends as it was set;
# BLANK_SYSTEM, read from a blank file: set, not empty, so sent and counted too
@pytest.mark.parametrize("system", [SYSTEM, None, "", SYSTEM + "\n", BLANK_SYSTEM])
def test_the_size_of_a_compaction_is_known_before_its_summary_and_is_the_size_sent(
        lesson, system):
    """Before the model is asked for a summary, the room the budget leaves it is worked
    out from the request that compaction would make (summary_room, check_fits, both
    given, build on compacted_size): a summary that fills the room exactly is taken
    and its request, then sent, is exactly at the budget; one token longer is refused.
    With a system prompt, with one that ends with a line end (read from a file: sent,
    and so counted, as it was set), with none, and with an empty one (sent as none);
    with the boundary anywhere from the start to past the last message; and planned, as
    a second compaction plans it, while the agent still holds the earlier one. A
    summary in other scripts (more bytes than characters) counts as it counts in the
    request sent."""
    said = conversation(8)
    earlier = lesson.Compaction("An earlier summary, longer than the new ones. " * 4, 1)
    for cut in (2, 4, 6, 0, 8):
        # "": the request before any summary, which summary_room measures
        # SUMMARY_ABROAD: a summary in other scripts, of more bytes than characters
        for summary in ("Days one and two.", "The elder spoke of a ledge. " * 9,
                        SUMMARY_ABROAD, ""):
            agent = agent_without_session(lesson, said, earlier if cut else None,
                                          system=system)
            held, before = agent.compaction, agent.view()
            planned = agent.compacted_size(summary, cut)
            assert agent.compaction == held and agent.view() == before, (
                "compacted_size only measures a request that does not exist yet: "
                f"after it, the agent's compaction is {agent.compaction!r} (it was "
                f"{held!r}) and the next request would be {shape(agent.view(), 20)}")
            agent.compaction = lesson.Compaction(summary, cut)
            view = agent.view()
            agent.compaction = None
            size = size_of(lesson, {"messages": view, "tools": Town().schemas})
            assert planned == size, (
                f"compacted_size gives {planned} tokens for a compaction at place "
                f"{cut} with a summary of {len(summary)} characters, and the request "
                f"view() then makes ({shape(view, 20)}) needs {size}: the room the "
                "model is told it has, and the judgement of its reply, are off by "
                f"{size - planned} token(s)")
            agent.budget = size
            try:
                taken = agent.check_fits(summary, cut)
            except lesson.BadSummary as error:
                pytest.fail(f"the request a compaction at place {cut} would send "
                            f"needs {size} tokens, exactly the budget, and its summary "
                            f"was refused as too long ({error})", pytrace=False)
            assert taken == summary, (
                f"check_fits returned {taken!r}, not the summary it was given")
            agent.budget = size - 1
            with raises(lesson.BadSummary, f"a summary that makes the request at place "
                        f"{cut} need {size} tokens was taken with a budget of "
                        f"{size - 1}"):
                agent.check_fits(summary, cut)
    # The program changes the system prompt after a first size was asked for: the next
    # size is that of the request the agent makes now
    agent = agent_without_session(lesson, said, earlier, system=system)
    agent.compacted_size("Days one and two.", 4)
    for prompt in ("Day 2: answer every question in one short line.", None, system):
        agent.system = prompt
        planned = agent.compacted_size("Days one and two.", 4)
        agent.compaction = lesson.Compaction("Days one and two.", 4)
        size = size_of(lesson, {"messages": agent.view(), "tools": Town().schemas})
        agent.compaction = earlier
        assert planned == size, (
            f"the agent's system prompt was {system!r} when compacted_size was first "
            f"asked, then set to {prompt!r}; compacted_size now gives {planned} tokens "
            f"for a compaction at place 4, and the request view() then makes needs "
            f"{size}: a size is that of the request as the agent would send it now, "
            "with the prompt it holds now")


@pytest.mark.task("08.1")
@pytest.mark.key
@pytest.mark.task("08.2")
@pytest.mark.task("08.3")
def test_no_request_exceeds_the_budget_and_the_log_keeps_every_message(
        lesson, sessions):
    """However long the quest, no request passes the budget (system prompt, tools,
    summary, messages and the reply's room counted), and the log still holds every
    message, byte for byte, in order."""
    agent, model, log = open_agent(lesson, sessions)
    path = sessions / "quest-1.jsonl"
    with log:
        play_until_compacted(lesson, agent, model)
        before = path.read_bytes()
        play_until_compacted(lesson, agent, model, first_day=100, compactions=3)
        everything = list(agent.messages)
    for number, request in enumerate(turn_requests(model), start=1):
        size = size_of(lesson, request)
        assert size <= BUDGET, (
            f"request {number} needs about {size} tokens with the tools and the "
            f"reply's room, more than the budget of {BUDGET}, and it was sent: a "
            "model whose window is the budget refuses it, or cuts its start")
    assert path.read_bytes().startswith(before), (
        "a compaction must only add to the log: the bytes written before it changed")
    assert messages_in(path) == everything, (
        "the log must keep every message of the conversation, in order, compactions or "
        f"not: it holds {len(messages_in(path))} messages, the conversation "
        f"{len(everything)}. Compaction changes the request, never the log")
    assert everything[0] == {"role": "user", "content": "Day 1: what now?"}, (
        f"after the compactions, agent.messages begins with {everything[0]!r}, not "
        "day 1's message: the conversation in memory lost its start, which the log "
        "still holds")


@pytest.mark.key
@pytest.mark.task("08.2")
@pytest.mark.task("08.3")
def test_after_a_compaction_the_request_is_the_summary_and_the_newest_turn(lesson):
    """The request after a compaction made by the agent as the quest goes on is the
    view: the system prompt, the summary, and the turn in progress as it was said;
    nothing older."""
    agent, model, log = open_agent(lesson, None)
    with log:
        days = play_until_compacted(lesson, agent, model)
    summary_at = model.requests.index(model.summary_requests[0])
    sent = next(request for request in model.requests[summary_at:]
                if request not in model.summary_requests)["messages"]
    newest = {"role": "user", "content": day(days[-1])[0]}
    expected = compacted_view(lesson, "summary #1", [newest])
    assert sent[:3] == expected, (
        "after the compaction the model should get the system prompt, the summary "
        "('summary #1') as the view shows it, then the turn in progress as it was "
        f"said; it got {shape(sent)}")
    assert sent == expected, (
        f"the request after the compaction carried {len(sent)} messages: only the "
        "system prompt, the summary and the turn in progress should be there")
    asked = " ".join(m["content"] for m in model.summary_requests[0]["messages"])
    assert newest["content"] not in asked, (
        "the summary request carried the newest user message, which the request after "
        "the compaction also carries as it is: the model is told it twice, once in the "
        "summary")


@pytest.mark.key
@pytest.mark.task("08.3")
def test_a_tool_exchange_is_never_split_at_the_boundary(lesson):
    """A compaction in the middle of a turn (a long tool result pushed the next call
    over the budget) keeps the whole turn after the boundary: the model is never sent a
    tool result without the call it answers."""
    script = [
        say("The elder is asleep. " * 12),
        use(call("read", book="chronicle"), call("read", book="almanac")),
        say("Both books say the cave is deep."),
    ]
    agent, model, log = open_agent(lesson, None, script, budget=920,
                                   tools=Library())
    with log:
        agent.run("Is the elder awake?")
        try:
            agent.run("Read the chronicle and the almanac.")
        except openai.BadRequestError as error:
            pytest.fail("the request after the compaction was refused by the model "
                        f"(HTTP 400): {error.message}. It held a tool call without "
                        "its results, or a result without its call",
                        pytrace=False)
    assert model.summary_requests, (
        "the two long results should have pushed the turn's second call over the "
        "budget of 920 tokens, and made a compaction")
    sent = turn_requests(model)[-1]["messages"]
    turn = {"role": "user", "content": "Read the chronicle and the almanac."}
    assert sent[2] == turn, (
        "after a compaction in the middle of a turn, the request should go on with "
        "that turn whole, from its user message; after the system prompt and the "
        f"summary it went on with {sent[2]}")


@pytest.mark.task("08.3")
def test_a_tool_result_too_large_for_the_budget_is_refused_never_cut(lesson):
    """Two long tool results push the next call of a turn over the budget, and the turn
    alone leaves no room for a summary: ContextOverflow, giving the size, the budget and
    what the user can do, as on every other path. The results are never cut short to
    make the request fit: the model reads the turn it is working on as it was said."""
    script = [say("The elder is asleep. " * 12),
              use(call("read", book="chronicle"), call("read", book="almanac")),
              say("Both books say the cave is deep.")]
    budget = 700
    agent, model, log = open_agent(lesson, None, script, budget=budget,
                                   tools=Library())
    with log:
        agent.run("Is the elder awake?")
        with raises(lesson.ContextOverflow, "the two results of the library's books "
                    "(about 450 tokens) pushed the turn's second call over the budget "
                    f"of {budget}, with no room left for any summary beside that "
                    "turn, and the turn went on: the request cannot fit as it was "
                    "said, and the model must never read a result cut short"
                    ) as raised:
            agent.run("Read the chronicle and the almanac.")
        view = agent.view()
    assert_overflow_says_enough(str(raised.value), budget, {agent.request_size(view)},
                                " (a tool result in the middle of a turn)")
    results = [m for m in agent.messages if m.get("role") == "tool"]
    for number, request in enumerate(turn_requests(model), start=1):
        cut = [m for m in request["messages"]
               if m.get("role") == "tool" and m not in results]
        assert not cut, (
            f"request {number} carried a tool result that is not the one the tool "
            f"gave ({str(cut[0].get('content'))[:60]!r}...): the model should read "
            "the turn it is working on as it was said")


@pytest.mark.task("08.1")
@pytest.mark.task("08.3")
@pytest.mark.key
@pytest.mark.task("08.2")
def test_a_resume_after_a_compaction_sends_the_same_request_without_a_second_summary(
        lesson, sessions):
    """A process that crashed right after a compaction resumes with the same request it
    was sending: the marker in the log says where the view starts, so no second summary
    is asked for."""
    def quest(body):
        return Crash() if model.summary_requests else say("We rest by the mill.")
    agent, model, log = open_agent(lesson, sessions, quest)
    with log:
        with raises(SimulatedCrash, "29 days of the quest were played and the model "
                    "was never asked for a summary (the script crashes the process at "
                    "its first request after one): with a budget of "
                    f"{BUDGET} tokens, a compaction should have come within a few "
                    "days"):
            for n in range(1, 30):
                agent.run(day(n)[0])
    assert model.summary_requests, "no compaction within 30 days (see the budget tests)"
    crashed = model.requests[-1]["messages"]

    agent, model, log = open_agent(lesson, sessions, [say("We go on.")])
    with log:
        resumed = agent.request_messages()
        assert not model.requests, (
            f"the resumed agent asked the model {len(model.requests)} time(s) before "
            "its first request, although the log already records a compaction: a "
            "second summary costs a call, and tells the model a different past after "
            "every restart")
        assert resumed == crashed, (
            "after a resume the request should be the one sent before the crash: the "
            "summary from the marker, then the messages after the boundary. It has "
            f"{len(resumed)} messages, the one before the crash {len(crashed)}")
        agent.run("Go on.")


@pytest.mark.task("08.3")
def test_a_second_compaction_summarises_the_previous_summary_and_what_followed(
        lesson):
    """A second compaction sends the model the first summary and the messages after the
    first boundary, never the messages the first summary already stands for."""
    agent, model, log = open_agent(lesson, None)
    with log:
        play_until_compacted(lesson, agent, model, compactions=2)
    first, second = model.summary_requests[:2]
    asked = " ".join(m["content"] for m in second["messages"] if m["role"] == "user")
    assert "summary #1" in asked, (
        "the second summary request should carry the first summary: it stands for "
        "everything before the first boundary")
    for number, request in enumerate((first, second), start=1):
        text = " ".join(m["content"] for m in request["messages"]
                        if m["role"] == "user")
        assert SYSTEM not in text and lesson.SUMMARY_INTRO.strip() not in text, (
            f"summary request {number} sent the model the system prompt, or a summary "
            "as the request shows it: neither stands before the boundary (the system "
            "prompt is sent as it is, and the summary goes along once, as the previous "
            f"summary). It sent {text[:160]!r}")
    assert asked.count("summary #1") == 1, (
        "the second summary request should carry the first summary once: it carried "
        f"it {asked.count('summary #1')} times")
    assert "Day 1:" not in asked, (
        "the second summary request sent day 1 again, which the first summary already "
        "stands for: the model was sent those messages twice, and every summary "
        "request would grow with the whole history")
    first_asked = " ".join(m["content"] for m in first["messages"]
                           if m["role"] == "user")
    kept = [m["content"] for m in agent.messages if m["role"] == "user"
            and m["content"] not in first_asked]
    assert kept[0] in asked, (
        f"the second summary request should carry the turns after the first boundary, "
        f"starting with {kept[0]!r}")
    sent = turn_requests(model)[-1]["messages"]
    assert "summary #2" in text_of(sent[1].get("content")), (
        "after the second compaction the request starts from the second summary")


@pytest.mark.task("08.3")
@pytest.mark.task("08.1")
def test_compacting_by_hand_keeps_the_newest_turn_and_with_one_turn_changes_nothing(
        lesson, sessions):
    """compact() called by hand (the chat's /compact) summarises all but the newest
    turn; with only one turn since the boundary it returns False and writes nothing."""
    agent, model, log = open_agent(lesson, sessions, day(1)[1], budget=None)
    path = sessions / "quest-1.jsonl"
    with log:
        agent.run(day(1)[0])
        before = path.read_bytes()
        assert agent.compact() is False, (
            "with a single turn there is nothing before the newest turn to summarise: "
            "compact() should return False")
        assert path.read_bytes() == before and not model.summary_requests, (
            "a compact() with nothing to summarise must not ask the model or write to "
            "the log")
        model.add(*day(2)[1], *day(3)[1])
        agent.run(day(2)[0])
        agent.run(day(3)[0])
        told, summarise = [], agent.summarise

        def telling(messages, cut):
            told.append((list(messages), cut))
            return summarise(messages, cut)

        agent.summarise = telling
        assert agent.compact() is True, "three turns: compact() should summarise two"
        assert len(model.summary_requests) == 1
        assert told == [(agent.messages[:4], 4)], (
            "three turns of two messages, compacted by hand: summarise() should be "
            "given days 1 and 2 (messages 0 to 3) and the place the request will "
            "start from (4, day 3's message), so that it asks for a summary that "
            "fits beside day 3; it was given "
            f"{[(shape(messages, 20), cut) for messages, cut in told]}")
    markers = compactions_in(path)
    assert len(markers) == 1 and markers[0]["upto"] == 4, (
        "three turns of two messages, compacted by hand: one marker whose 'upto' is 4, "
        f"the index of day 3's message; found {markers}")


@pytest.mark.task("08.3")
def test_a_resumed_agent_compacts_by_hand_as_the_one_that_wrote_the_log(
        lesson, sessions):
    """Three turns written by one process; a new process resumes the session and calls
    compact() by hand (the chat's /compact) before saying anything. Its messages were
    read back from the log, not made by its own code: the turns are found in them all
    the same (a role is compared by its text, whatever object holds it), days 1 and 2
    are summarised with one model call, and the marker keeps day 3 from its message,
    index 4, as the writing process would have."""
    agent, model, log = open_agent(lesson, sessions, [*day(1)[1], *day(2)[1],
                                                      *day(3)[1]], budget=None)
    with log:
        for n in (1, 2, 3):
            agent.run(day(n)[0])
    path = sessions / "quest-1.jsonl"
    agent, model, log = open_agent(lesson, sessions, budget=None)
    with log:
        made = agent.compact()
    markers = compactions_in(path)
    if made is not True or len(model.summary_requests) != 1 or [
            marker.get("upto") for marker in markers] != [4]:
        pytest.fail("a session of three turns of two messages, resumed by a new "
                    "process, compacted by hand: compact() should return True, ask "
                    "the model for one summary (of days 1 and 2) and record one "
                    "marker whose 'upto' is 4, day 3's message. It returned "
                    f"{made!r}, asked for {len(model.summary_requests)} summary(ies), "
                    f"and the log records {markers}: the turns of a conversation read "
                    "back from its log are turns too", pytrace=False)


@pytest.mark.task("08.3")
def test_the_summary_request_carries_every_message_before_the_boundary(lesson):
    """compact() by hand after a turn with a tool exchange: the summary stands for every
    message the view showed before the new boundary, the model's call and the tool's
    result included (once summarised, the summary is all the model knows of them), and
    for none of the turn kept after it."""
    said = [{"role": "user", "content": "Ask the elder about the cave."},
            {"role": "assistant", "content": "", "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "talk_to", "arguments": '{"npc": "elder"}'}}]},
            {"role": "tool", "tool_call_id": "call_1",
             "content": "The elder says: the ledge inside is steep."},
            {"role": "assistant", "content": "The elder warns of a steep ledge."},
            {"role": "user", "content": "Buy a rope."},
            {"role": "assistant", "content": "We buy a rope."}]
    agent, model, log = open_agent(lesson, None, budget=None)
    agent.messages = list(said)
    with log:
        assert agent.compact() is True, (
            "two turns, the first with a tool exchange: compact() should summarise it")
    asked = " ".join(text_of(m.get("content"))
                     for m in model.summary_requests[0]["messages"]
                     if m.get("role") == "user")
    told = {"the user's message": said[0]["content"], "the model's call": "talk_to",
            "the tool's result": said[2]["content"],
            "the model's answer": said[3]["content"]}
    missing = [what for what, text in told.items() if text not in asked]
    assert not missing, (
        "the summary request should carry every message of the turn before the "
        f"boundary; it lacked {', '.join(missing)}: once summarised, those messages "
        "are never sent again, and the summary is all the model will know of them. "
        f"It sent {asked[:200]!r}")
    assert said[4]["content"] not in asked, (
        "the summary request carried the newest turn, which the request keeps as it "
        "is: the model would be told it twice")


@pytest.mark.task("08.3")
def test_compacting_by_hand_keeps_a_turn_whatever_its_message_holds_and_once(lesson):
    """compact() by hand on an agent with no log: a user message begins a turn
    whatever it holds (no text, or text in parts), so the newest turn begins the view;
    called again with nothing said since, compact() returns False and asks nothing.
    A content of None (no text at all, as a client may record an attachment's message)
    is a user message all the same: the role begins a turn, not what it holds."""
    for holds, newest in (("no text", ""), ("no content at all (None)", None),
                          ("its text in parts", [{"type": "text", "text": "Go on."}])):
        said = [*conversation(4), {"role": "user", "content": newest},
                {"role": "assistant", "content": "We go on."}]
        agent, model, log = open_agent(lesson, None, budget=None)
        agent.messages = list(said)
        with log:
            assert agent.compact() is True, (
                f"two turns, then one whose user message holds {holds}: compact() "
                "should summarise the first two")
            boundary = agent.compaction.boundary if agent.compaction else None
            assert boundary == 4, (
                f"the newest turn begins with a user message that holds {holds}, at "
                f"place 4: the compaction should start the view there (a user message "
                f"begins a turn, as undo counts turns); it starts at {boundary}")
            asked = len(model.summary_requests)
            again = agent.compact()
            assert again is False and len(model.summary_requests) == asked, (
                "compact() called again right after a compaction, with nothing said "
                "since: nothing is left to summarise before the newest turn, so it "
                f"should return False and ask nothing; it returned {again!r} after "
                f"{len(model.summary_requests) - asked} more summary request(s)")
        assert agent.messages == said, "compact() changed the conversation"
    # An agent without a session records any message (lesson 07), one with no role
    # too: it starts no turn, and goes with the turn before it into the summary
    note = {"content": "A note with no role, kept by an agent without a log."}
    said = [*conversation(4), note, {"role": "user", "content": "Go on."},
            {"role": "assistant", "content": "We go on."}]
    agent, model, log = open_agent(lesson, None, budget=None)
    agent.messages = list(said)
    with log:
        try:
            compacted = agent.compact()
        except NotImplementedError:
            raise
        except Exception as error:
            pytest.fail(f"compact() by hand on an agent without a session, whose "
                        f"conversation holds a note with no role between two turns "
                        f"and the newest one, raised {type(error).__name__} ({error}): "
                        "a message with no role starts no turn (lesson 07), and is "
                        "summarised with the turn before it", pytrace=False)
        boundary = agent.compaction.boundary if agent.compaction else None
        assert compacted is True and boundary == 5, (
            "two turns, a note with no role, then the newest turn at place 5: "
            "compact() should summarise what comes before place 5, the note with "
            f"it, and start the view there; it returned {compacted!r}, the view "
            f"starting at {boundary}")
    assert agent.messages == said, "compact() changed the conversation"


@pytest.mark.task("08.3")
def test_a_note_of_another_role_inside_the_newest_turn_stays_in_that_turn(lesson):
    """compact() by hand, on a conversation whose newest turn holds, after the user's
    message, a note the application recorded as a developer (or system) message, or
    with no role at all (an agent without a session records any message, lesson 07):
    the shop closes at dusk. The turn in progress is still the user's message and all
    that answers it, and the model still reads it as it was said: a note is no user's
    message, whatever role it lacks, and begins no turn."""
    for role in ("developer", "system", None):
        note = {"content": "The shop closes at dusk."}
        if role is not None:
            note["role"] = role
        said = [*conversation(4), {"role": "user", "content": "Buy a rope."}, note,
                {"role": "assistant", "content": "We buy a rope before dusk."}]
        role = role or "role-less"
        agent, model, log = open_agent(lesson, None, budget=None)
        agent.messages = list(said)
        with log:
            assert agent.compact() is True, (
                f"two turns, then one holding a {role} note: compact() should "
                "summarise the first two")
        boundary = agent.compaction.boundary if agent.compaction else None
        assert boundary == 4, (
            f"the newest turn is 'Buy a rope.' (place 4), a {role} note the "
            "application recorded in it, and the answer: compacted by hand, the view "
            "should still hold that turn as it was said, from the user's message; the "
            f"compaction starts it at {boundary}, so the model reads an answer to a "
            "message it is never shown")
        assert agent.messages == said, "compact() changed the conversation"


@pytest.mark.task("08.3")
def test_compacting_by_hand_counts_a_message_recorded_but_not_yet_written(lesson,
                                                                          sessions):
    """compact() by hand between turns, after a message was recorded and not yet
    written (lesson 07's pending buffer): the boundary is that message, in the log as
    in the agent, so a resume sends the request this agent sends. The note is on disk
    before the summary request: since lesson 07, what is pending is written before
    any model call."""
    agent, model, log = open_agent(lesson, sessions, day(1)[1] + day(2)[1], budget=None)
    path = sessions / "quest-1.jsonl"
    note = {"role": "user", "content": "A note from the mayor: the ledge is steep."}
    # Inside each summary request: what the log holds at that moment
    model.on_request(lambda body: messages_in(path) if is_summary_request(body)
                     else None)
    with log:
        agent.run(day(1)[0])
        agent.run(day(2)[0])
        agent.record(note)      # pending: nothing has acted on it yet
        assert agent.compact() is True, (
            "two turns and a note recorded after them: compact() should summarise the "
            "two turns")
        view = agent.view()
    on_disk = [seen for seen in model.observations if seen is not None]
    assert on_disk and note in on_disk[0], (
        "the note recorded before compact() was still pending, not in the log, when "
        "the model was asked for the summary: since lesson 07, what is pending is "
        "written before any model call (a crash during that call would lose it)")
    markers = compactions_in(path)
    assert [marker["upto"] for marker in markers] == [4], (
        "the conversation is days 1 and 2 (messages 0 to 3) and the note (4), which "
        "was still pending when compact() was called: one marker whose 'upto' is 4, "
        f"the note's index, was expected; found {markers}")
    resumed, _, log = open_agent(lesson, sessions, budget=None)
    with log:
        assert resumed.view() == view, (
            "a resume should send the request the compacting agent sent (the summary, "
            f"then the note); it sends {shape(resumed.view())}, the agent sent "
            f"{shape(view)}")


@pytest.mark.task("08.3")
def test_a_ctrl_c_as_the_log_records_a_compaction_leaves_none_in_the_agent(lesson,
                                                                          sessions):
    """compact() by hand, and the user presses Ctrl-C just as the log is to record the
    compaction: the KeyboardInterrupt reaches the caller, the log records nothing, and
    the agent holds no compaction either, so its next request is the one a resume
    sends. The next compact() asks again and records it."""
    agent, model, log = open_agent(lesson, sessions, day(1)[1] + day(2)[1], budget=None)
    path = sessions / "quest-1.jsonl"
    with log:
        agent.run(day(1)[0])
        agent.run(day(2)[0])
        held = agent.compaction
        compact, asked = log.compact, []

        def interrupted(*arguments, **options):
            asked.append(arguments)
            raise KeyboardInterrupt     # before the log writes a byte

        log.compact = interrupted
        try:
            agent.compact()
            outcome = "returned"
        except KeyboardInterrupt:
            outcome = "raised KeyboardInterrupt"
        finally:
            log.compact = compact
        if not asked:
            return      # the log recorded it some other way: no Ctrl-C to judge
        assert outcome == "raised KeyboardInterrupt", (
            "Ctrl-C was pressed as the log was to record the compaction, and compact() "
            f"{outcome}: the interrupt should reach the caller")
        assert not compactions_in(path), (
            "the test's own set-up: no marker was written")
        assert agent.compaction == held, (
            "the log never recorded the compaction (a Ctrl-C stopped it first), yet "
            f"the agent now holds {agent.compaction!r} where it held {held!r}: its "
            "next request would start from a summary the log does not hold, and a "
            "resume sends another. The agent takes a compaction as its own only "
            "once the log has recorded it, whatever stops the log (a "
            "KeyboardInterrupt is no OSError)")
        assert agent.compact() is True, (
            "after the interrupted compaction, compact() by hand should ask again and "
            "make one")
        view = agent.view()
    assert len(compactions_in(path)) == 1, (
        f"one compaction recorded was expected; the log holds {compactions_in(path)}")
    resumed, _, log = open_agent(lesson, sessions, budget=None)
    with log:
        assert resumed.view() == view, (
            "a resume should send the request the agent sends after its compaction; "
            f"it sends {shape(resumed.view())}, the agent {shape(view)}")


@pytest.mark.task("08.3")
@pytest.mark.task("08.1")
def test_compacting_after_an_undo_starts_the_request_at_the_newest_turn(lesson,
                                                                        sessions):
    """compact() by hand on a session where a turn was undone earlier (its messages
    stay in the file, hidden by a marker, so the log's index of a message is past its
    place in the conversation): the request starts at the newest turn, in this process
    (08.3) and after a resume (the log's marker, 08.1, too)."""
    script = [*day(1)[1], *day(2)[1], *day(3)[1], *day(4)[1]]
    agent, model, log = open_agent(lesson, sessions, script, budget=None)
    with log:
        agent.run(day(1)[0])
        agent.run(day(2)[0])
        agent.undo()            # day 2, written: a marker hides it
        agent.run(day(3)[0])
        agent.run(day(4)[0])
        newest = agent.messages[-2:]
        assert agent.compact() is True, (
            "days 1, 3 and 4 (day 2 undone): compact() should summarise days 1 and 3")
        view = agent.view()
    if view != compacted_view(lesson, "summary #1", newest):
        fail_in("08.3", "days 1, 3 and 4 said (day 2 undone, its two messages still in "
                "the file), compacted by hand: the request should be the summary, then "
                "day 4's turn (places 4 and 5 in the conversation, a place and not the "
                f"log's index of the message); it is {shape(view)}")
    resumed, _, log = open_agent(lesson, sessions, budget=None)
    with log:
        assert resumed.view() == view, (
            "a resume should send the request the compacting agent sent (the summary, "
            f"then day 4's turn); it sends {shape(resumed.view())}")


# --- the marker ---------------------------------------------------------------------


def resumed_after_the_boundary(lesson, sessions, session_id="quest-1"):
    """The messages a new agent on the session sends after the summary: those of its
    conversation from the boundary of the compaction the log gives it (the view, task
    08.2, is not needed for that)."""
    agent, model, log = open_agent(lesson, sessions, budget=None, session_id=session_id)
    with log:
        if agent.compaction is None:
            fail_in("08.1", "the log records a compaction, and a new agent on it got "
                    "none (SessionLog.compacted is None once the log is read): its "
                    "requests would resend the whole conversation")
        return agent.messages[agent.compaction.boundary:]


SUMMARY_ABROAD = "summary #1: the elder said \u00abthe ledge\u00bb, \u60ac\u5d16"


@pytest.mark.task("08.1")
def test_each_compaction_marker_says_when_it_was_written(lesson, sessions):
    """Each compaction marker's "at" is the time its marker was written (the format
    page's field), not a time taken once and written again: two compactions of one
    writer, in two different seconds of the clock, carry two times, each its own, on
    a machine whose local clock is not UTC's."""
    path = sessions / "quest-1.jsonl"
    times = []
    with lesson.SessionLog(sessions, "quest-1") as log, local_clock_ahead_of_utc():
        for n in (1, 2):
            if times:   # the second compaction in a later second of the clock
                wait_past(times[-1][1])
            log.append({"role": "user", "content": day(n)[0]})
            log.append({"role": "assistant", "content": f"On day {n} we rest."})
            before = datetime.now(timezone.utc).replace(microsecond=0)
            log.compact(f"summary #{n}: days up to {n}", keep=0)
            times.append((before, datetime.now(timezone.utc)))
    found = compactions_in(path)
    assert len(found) == 2, f"two compactions should leave two markers; found {found}"
    for number, (marker, (before, after)) in enumerate(zip(found, times), start=1):
        check_time(marker.get("at"), before, after, f"\"at\" of compaction {number} "
                   "of one writer", "the time its marker was written", "a time taken "
                   "once, and written again by a later compaction, is the wrong one; "
                   "so is the local time, 5 h 45 min ahead here, labelled as UTC")


@pytest.mark.task("08.1")
def test_the_log_refuses_to_keep_more_messages_than_it_shows(lesson, sessions):
    """SessionLog.compact() refuses a `keep` outside 0 ... the messages shown, writing
    nothing, saying the keep asked and how many messages it shows (those shown, not
    those written); keep=0 summarises them all ("upto" is then the number of
    messages)."""
    path = sessions / "quest-1.jsonl"
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in conversation(4):
            log.append(message)
        before = path.read_bytes()
        for keep in (5, -1):
            with raises(ValueError, f"compact(keep={keep}) on a log showing 4 messages "
                        "was allowed; its error should name the log",
                        match="quest-1",
                        unmatched=NAME_THE_LOG):
                log.compact("too much", keep=keep)
            assert path.read_bytes() == before, (
                f"a refused compact(keep={keep}) must not write to the log")
        assert log.compact("all of it", keep=0) == 4, (
            "compact(keep=0) keeps no message: 'upto' is the number of messages (4)")
        assert log.compact("all but the last", keep=1) == 3
        assert log.compact("none of it", keep=4) == 0, (
            "compact(keep=4) on a log showing 4 messages keeps them all: 'upto' is 0")
    # A log whose every message was undone shows none: keep=0 is the only keep it shows
    path = sessions / "quest-2.jsonl"
    path.write_text(as_log([*conversation(2), {"$marker": "undo", "skip": [0, 1]}]))
    with lesson.SessionLog(sessions, "quest-2") as log:
        try:
            upto = log.compact("nothing said", keep=0)
        except Exception as error:
            pytest.fail(f"compact(keep=0) on a log whose two messages were both undone "
                        f"(it shows none, so keeping none is a keep it shows) raised "
                        f"{type(error).__name__}: {error}", pytrace=False)
    assert upto == 2 and [m.get("upto") for m in compactions_in(path)] == [2], (
        "compact(keep=0) on a log whose two messages were both undone: one marker "
        "whose 'upto' is 2, the number of messages in the file, as for any keep=0; "
        f"compact returned {upto!r}, and the log holds {compactions_in(path)}")
    # Six messages written, two undone: the log shows 4, and counts those it shows
    path = sessions / "quest-3.jsonl"
    path.write_text(as_log([*conversation(6), {"$marker": "undo", "skip": [4, 5]}]))
    with lesson.SessionLog(sessions, "quest-3") as log:
        with raises(ValueError, "compact(keep=5) on a log showing 4 messages (6 "
                    "written, 2 undone) was allowed") as raised:
            log.compact("too much", keep=5)
    words = str(raised.value).replace(str(path), "").replace("quest-3", "")
    assert not re.search(r"(?<![\d.])6(?!\d)", words), (
        "compact(keep=5) on a log of 6 messages, 2 of them undone, was refused, as it "
        "should be, but its error counts 6 messages: any count it gives is of the "
        "messages the log shows (4), the only ones a keep can name, or the user tries "
        f"a keep of 6 next; it says {str(raised.value)!r}")
    said = {n for n in (4, 5) if re.search(rf"(?<![\d.]){n}(?!\d)", words)}
    assert said == {4, 5}, (
        "compact(keep=5) on a log showing 4 messages was refused, as it should be, "
        "but its error should say both what was asked (keep 5) and what the log shows "
        "(4), so that whoever called it sees why the keep was wrong; it leaves out "
        f"{' and '.join(str(n) for n in (5, 4) if n not in said)}. It says "
        f"{str(raised.value)!r}")


@pytest.mark.task("08.1")
def test_compaction_marker_makes_the_whole_marker_from_a_log_state_alone(
        lesson, sessions, monkeypatch):
    """compaction_marker is shared: lesson 11's database store makes its marker with it
    from rows, with no file anywhere. Given the state of a log (six messages written,
    two of them undone) and nothing else, it returns the whole marker, whose "upto" a
    reader takes back as the boundary that keeps the last `keep` messages shown, and it
    writes nothing: what only a file needs belongs in SessionLog.compact."""
    path = sessions / "quest-1.jsonl"
    data = as_log([*conversation(6), {"$marker": "undo", "skip": [2, 3]}]).encode()
    state = lesson.parse_log(data, path)
    monkeypatch.chdir(sessions)
    for keep, upto in ((0, 6), (1, 5), (3, 1)):
        try:
            marker = lesson.compaction_marker(state, keep, "summary of days", "quest-1")
        except NotImplementedError:
            raise       # the task not written yet: the plugin says which
        except Exception as error:
            pytest.fail(f"compaction_marker(state, keep={keep}, ...) on the state of a "
                        "log of six messages, two of them undone (it shows four), "
                        f"raised {type(error).__name__}: {error}", pytrace=False)
        assert not os.listdir(sessions), (
            f"compaction_marker(state, keep={keep}, ...) wrote "
            f"{sorted(os.listdir(sessions))} into the folder it ran in: it makes a "
            "marker from a state, and lesson 11's store calls it with no file at all; "
            "writing is SessionLog.compact's")
        fields = {key: marker.get(key) for key in ("$marker", "summary", "upto")}
        assert fields == {"$marker": "compaction", "summary": "summary of days",
                          "upto": upto} and "at" in marker, (
            f"compaction_marker(state, keep={keep}, ...) on a log of six messages, "
            "of which 2 and 3 were undone, should return the whole marker, "
            f"{{'$marker': 'compaction', 'summary': ..., 'upto': {upto}, 'at': ...}}: "
            "'upto' is the index of the first message kept, counting every message "
            f"in the file (the number of messages for keep=0); it returned {marker!r}")
        again = lesson.parse_log(data + (json.dumps(marker) + "\n").encode(), path)
        read = again.compaction()
        assert read is not None and read.boundary == 4 - keep, (
            f"the marker compaction_marker made for keep={keep}, written after the log "
            "of four messages shown, should be read back with its boundary before the "
            f"last {keep} of them ({4 - keep}); LogState.compaction() read {read!r}")


@pytest.mark.task("08.1")
def test_a_compaction_of_a_session_with_no_log_creates_nothing(lesson, sessions):
    """SessionLog.compact() on a session that has no log yet: no message is there for a
    summary to stand for. It is refused with ValueError naming the session, and the
    folder stays as it was: no log holding only a marker, no lock file. A log removed
    behind its writer's back is not a session with no log: the compaction raises the
    `OSError` every write of that writer raises, naming the log, and writes nothing."""
    for keep in (0, 1):
        with lesson.SessionLog(sessions, "quest-1") as log:
            with raises(ValueError, f"compact(keep={keep}) of session quest-1, which "
                        "has no log, was allowed: a summary there stands for no "
                        "message", match="quest-1", unmatched=NAME_THE_LOG):
                log.compact("nothing said yet", keep=keep)
        left = sorted(path.name for path in sessions.iterdir())
        assert left == [], (
            f"compact(keep={keep}) of a session with no log was refused, as it should "
            f"be, but it left {left} in the sessions folder, which was empty: a "
            "refused compaction creates nothing, not a log, not a lock file")

    path = sessions / "quest-2.jsonl"
    with lesson.SessionLog(sessions, "quest-2") as log:
        for n in range(2):
            log.append({"role": "user", "content": f"message {n}"})
        os.remove(path)     # the writer's own file, removed
        with raises(OSError, (
                "the writer's log was removed behind its back; its compact() should "
                "raise the OSError every write of that writer raises, naming the log, "
                "where it returned"), re.escape(path.name), unmatched=(
                "The error should name the log, as the writer's own error does, not "
                "call the session one with no log yet.")):
            log.compact("two messages", keep=0)
    assert not path.exists(), (
        "the compaction of a writer whose log was removed should write nothing, and "
        f"leave no file at its name; {path.name} now holds {path.read_bytes()!r}")


@pytest.mark.task("08.1")
def test_a_writer_whose_log_is_descriptor_0_compacts_as_any_other(lesson, sessions):
    """A service started with its standard input closed (a daemon, a job under cron)
    opens its first file as descriptor 0: a writer's log may be descriptor 0, which
    Python counts as false. That writer compacts as any other: one marker in the log it
    holds, its upto returned, and the next message written after it; never the log
    taken for one not open yet, opened again beside itself and refused by its own
    lock. (Played in a child process, whose descriptor 0 is closed just as the writer
    opens its log.)"""
    log_path = sessions / "quest-1.jsonl"

    def work():
        real_open = os.open

        def opening(path, flags, *args, **kwargs):
            if os.fspath(path) == os.fspath(log_path) and flags & os.O_APPEND:
                os.close(0)     # no standard input: the log gets descriptor 0
            return real_open(path, flags, *args, **kwargs)
        os.open = opening
        with lesson.SessionLog(sessions, "quest-1") as log:
            for n in range(3):
                log.append({"role": "user", "content": f"message {n}"})
            try:
                held = os.path.samestat(os.fstat(0), os.stat(log_path))
            except OSError:
                held = False
            upto = log.compact("Three messages were said.", keep=1)
            log.append({"role": "user", "content": "after the compaction"})
        return {"held": held, "upto": upto}

    outcome = unless_unfinished(in_child(work))
    if isinstance(outcome, dict) and "raised" in outcome:
        pytest.fail("a writer whose log is descriptor 0 (a service with no standard "
                    "input) wrote 3 messages; its compact(keep=1) should record the "
                    f"compaction, and it raised {outcome['raised']}: "
                    f"{outcome['message']}. Descriptor 0 is an open file like any "
                    "other: a writer that holds its log there must not take it for "
                    "none and open the session again (its own lock refuses it)",
                    pytrace=False)
    result = outcome
    if not result["held"]:
        pytest.skip("this writer did not open its log as the descriptor the test "
                    "freed (nothing to check)")
    kinds = []      # each line's marker kind or role, in order
    for line in log_path.read_bytes().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            kinds.append(f"a line that is no JSON ({line[:40]!r})")
            continue
        kinds.append(entry.get("$marker", entry.get("role"))
                     if isinstance(entry, dict) else repr(entry))
    expected = ["user", "user", "user", "compaction", "user"]
    if kinds != expected or result["upto"] != 2:
        pytest.fail("a writer whose log is descriptor 0 wrote 3 messages, compacted "
                    "keeping 1, then wrote one more; its log should hold "
                    f"{expected} and compact() return 2 (the first message kept). The "
                    f"log holds {kinds}, and compact() returned {result['upto']!r}",
                    pytrace=False)


@pytest.mark.task("08.1")
def test_keep_counts_the_messages_shown_when_an_undo_is_among_the_last(lesson,
                                                                     sessions):
    """A turn near the end of the log was undone, and more was said after it: `keep`
    counts the messages the log shows, not those in its file. Keeping more than it
    shows is refused, and a compaction keeping the last four starts the resumed
    request at the fourth message shown from the end."""
    said = conversation(8)
    path = sessions / "quest-1.jsonl"
    # Messages 4 and 5 undone, 6 and 7 said after: the log shows 0, 1, 2, 3, 6, 7
    path.write_text(as_log([*said[:6], {"$marker": "undo", "skip": [4, 5]}, *said[6:]]))
    with lesson.SessionLog(sessions, "quest-1") as log:
        before = path.read_bytes()
        with raises(ValueError, "compact(keep=7) on a log that shows 6 messages (its "
                    "file holds 8, two of them undone) was allowed; the error should "
                    "name the log", match="quest-1",
                        unmatched=NAME_THE_LOG) as raised:
            log.compact("too much", keep=7)
        refusal = str(raised.value).replace(str(path), "").replace("quest-1", "")
        # Numbers a true error may give: the keep, the messages shown, those in the
        # file, those undone, how many too many
        stray = {int(n) for n in re.findall(r"\d+", refusal)} - {7, 6, 8, 2, 1}
        assert not stray, (
            f"the error of compact(keep=7) on a log that shows 6 messages (its file "
            f"holds 8 messages and 9 lines) gives {sorted(stray)}, which counts "
            f"neither what the log shows nor what was asked: the user is told a wrong "
            f"count. It says {str(raised.value)!r}")
        assert path.read_bytes() == before, (
            "a refused compact(keep=7) must not write to the log")
        upto = log.compact("The first turn.", keep=4)
    marker = compactions_in(path)[-1] if compactions_in(path) else None
    assert upto == 2 and marker is not None and marker.get("upto") == 2, (
        "the log shows messages 0, 1, 2, 3, 6 and 7 (4 and 5 undone): keeping the last "
        "four keeps message 2 on, so 'upto' should be 2, its index; compact returned "
        f"{upto!r} and the marker is {marker!r}")
    kept = resumed_after_the_boundary(lesson, sessions)
    assert kept == [said[k] for k in (2, 3, 6, 7)], (
        "a resume should start its request, after the summary, at messages 2, 3, 6 "
        f"and 7, the four the compaction kept; it starts at {shape(kept)}")
    with lesson.SessionLog(sessions, "quest-1") as log:
        upto = log.compact("The first two turns.", keep=2)
    assert upto == 6, (
        "keeping the last two of the messages shown (0, 1, 2, 3, 6, 7) keeps message 6 "
        "on: 'upto' should be 6, the index of the first message kept (as the format "
        "page defines it), not that of an undone message before it; compact returned "
        f"{upto!r}")
    # The newest turn (6 and 7) taken back, then everything shown summarised: the
    # first message the summary does not cover is the next one the file will hold
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.undo(2)
        upto = log.compact("Everything so far.", keep=0)
    marker = compactions_in(path)[-1]
    assert upto == marker.get("upto") == len(messages_in(path)) == 8, (
        "the log shows messages 0 to 3, and its file holds 8 (4 to 7 undone, the last "
        "two at its end): keeping none, 'upto' should be 8, the number of messages in "
        "the file, undone ones included (the index the next message will have, as "
        "the format page counts), not the index after the last message shown; "
        f"compact returned {upto!r} and the marker is {marker!r}")


@pytest.mark.task("08.1")
def test_keep_counts_the_messages_a_resume_reads_after_the_tail_is_repaired(lesson,
                                                                          sessions):
    """A crash left a tool call without its result; a new process compacts the log
    before writing anything to it. `keep` counts among the messages a resume reads:
    those the log shows once this process is its writer, the answer its repair adds
    to the open call included. The resume starts its request at the message the
    compaction kept first."""
    path = sessions / "quest-1.jsonl"
    rope = {"role": "user", "content": "Buy a rope."}
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "late", "type": "function",
         "function": {"name": "buy", "arguments": "{\"item\": \"rope\"}"}}]}
    path.write_text(as_log([*conversation(4), rope, call]))
    with lesson.SessionLog(sessions, "quest-1") as log:
        upto = log.compact("The first two turns.", keep=3)
    marker = compactions_in(path)[-1] if compactions_in(path) else None
    assert upto == 4 and marker is not None and marker.get("upto") == 4, (
        "the log shows 7 messages once the writer has answered the crashed call, so "
        "keeping the last 3 keeps the rope turn whole: 'upto' should be 4, the index "
        f"of 'Buy a rope.'; compact returned {upto!r} and the marker is {marker!r}")
    kept = resumed_after_the_boundary(lesson, sessions)
    assert [m.get("role") for m in kept] == ["user", "assistant", "tool"] and (
        kept[0] == rope), (
        "a resume should start its request, after the summary, at the rope turn "
        f"whole: the user's message, the call and its result; it starts at {kept}")


@pytest.mark.task("08.1")
def test_a_compaction_counts_keep_from_the_end_of_a_log_longer_than_a_read_buffer(
        lesson, sessions):
    """A quest of many days: a log of 2,000 short messages, about 90 KiB, longer than
    the 64 KiB a single read of a buffer brings in. The log's compact counts `keep`
    from the end of the whole log, so the marker names the first kept message near
    its end, and a resume starts its request there."""
    path = sessions / "quest-1.jsonl"
    said = conversation(2000)
    path.write_text(as_log(said))
    assert path.stat().st_size > 64 * 1024, "the test's log should pass 64 KiB"
    with lesson.SessionLog(sessions, "quest-1") as log:
        upto = log.compact("A thousand turns.", keep=2)
    marker = compactions_in(path)[-1] if compactions_in(path) else None
    assert upto == 1998 and marker is not None and marker.get("upto") == 1998, (
        f"the log holds 2,000 messages ({path.stat().st_size} bytes), so keeping the "
        "last 2 makes 'upto' 1998, the index of the first one kept; compact returned "
        f"{upto!r} and the marker is {marker!r}: the log was counted from less than "
        "the whole of it (a read that stopped at a buffer's size?)")
    kept = resumed_after_the_boundary(lesson, sessions)
    assert kept == said[-2:], (
        "a resume should start its request, after the summary, at the last turn of "
        f"the 2,000 messages; it starts {len(kept)} messages before the end")


@pytest.mark.task("08.1")
def test_the_log_compacts_its_own_file_after_the_working_directory_changed(
        lesson, tmp_path, monkeypatch):
    """A program opened its log from a relative sessions folder, then changed its
    working directory (a tool it ran moved it) to another project whose sessions folder
    holds a session of the same id. Its compact counts among the messages of the log it
    writes, and a resume of that log starts its request at the message kept first."""
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    for folder, count in ((here, 6), (elsewhere, 2)):
        (folder / "sessions").mkdir(parents=True)
        (folder / "sessions" / "quest-1.jsonl").write_text(as_log(conversation(count)))
    other = (elsewhere / "sessions" / "quest-1.jsonl").read_bytes()
    monkeypatch.chdir(here)
    with lesson.SessionLog("sessions", "quest-1") as log:
        log.append({"role": "user", "content": "Day 4: what now?"})    # its writer now
        monkeypatch.chdir(elsewhere)
        try:
            upto = log.compact("The first three turns.", keep=1)
        except Exception as error:      # what the user would see: said in words below
            upto = f"{type(error).__name__}: {error}"
        monkeypatch.chdir(here)     # the log lets go of its lock where it took it
    path = here / "sessions" / "quest-1.jsonl"
    markers = [marker.get("upto") for marker in compactions_in(path)]
    assert upto == 6 and markers == [6], (
        "a log opened from the relative folder 'sessions' holds 7 messages; its "
        "process then moved to another folder whose 'sessions' holds a session "
        "'quest-1' of 2. "
        "Compacting the log it writes, keeping the last message, should record and "
        f"return 'upto' 6; compact gave {upto!r}, and the log's markers say {markers}: "
        "the compaction was counted among another log's messages (or not made), and a "
        "resume would start its request at another message than the one kept")
    assert (elsewhere / "sessions" / "quest-1.jsonl").read_bytes() == other, (
        "the other project's session 'quest-1' changed: a compaction writes to its own "
        "log only")


@pytest.mark.task("08.1")
def test_the_marker_lands_whole_or_not_at_all(lesson, sessions, monkeypatch):
    """The log's compact adds its marker as one whole line: when the disk fails (or
    the process dies) right after the first write to the log, the log ends with the
    whole marker line or with no part of it, never half a line. A compaction whose
    marker the disk refused is none: the writer's own undo goes on as in lesson 07."""
    path = sessions / "quest-1.jsonl"
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in conversation(4):
            log.append(message)
        before = path.read_bytes()
        inode, real, writes = os.stat(path).st_ino, os.write, []

        def write(fd, data):
            if os.fstat(fd).st_ino == inode:
                if writes:
                    raise OSError(5, "Input/output error (the test's)")
                writes.append(bytes(data))
            return real(fd, data)

        monkeypatch.setattr(os, "write", write)
        try:
            log.compact("Days 1 and 2.", keep=2)
        except OSError:
            pass        # the failure after the first write: what it left is checked
        monkeypatch.setattr(os, "write", real)   # not undo(): 08.4's stand-in stays
    added = path.read_bytes()[len(before):]
    assert added == b"" or (added.endswith(b"\n") and added.count(b"\n") == 1), (
        "the disk failed right after the first write of the log's compact, and the log "
        f"now ends with {added[:60]!r}{'...' if len(added) > 60 else ''}: part of the "
        "marker, not a whole line")
    # The disk fills up in the middle of the marker: write() takes half of it
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.load()
        before = path.read_bytes()

        def short(fd, data):
            if os.fstat(fd).st_ino == inode and b'"compaction"' in bytes(data):
                return real(fd, bytes(data)[:len(data) // 2])
            return real(fd, data)

        monkeypatch.setattr(os, "write", short)
        try:
            log.compact("Days 1 and 2, again.", keep=2)
        except OSError:
            pass
        monkeypatch.setattr(os, "write", real)
        added = path.read_bytes()[len(before):]
        assert added == b"" or (added.endswith(b"\n") and added.count(b"\n") == 1), (
            "the disk filled up in the middle of the log's compact (write() took half "
            f"the marker), and the log now ends with {added[:60]!r}: half a line, to "
            "which the next line would be glued (the writer's own write takes a short "
            "write back)")
    # A compaction whose marker the disk refused is no compaction: the writer's own
    # undo goes on as it did before
    path = sessions / "quest-2.jsonl"
    with lesson.SessionLog(sessions, "quest-2") as log:
        for message in conversation(4):
            log.append(message)
        with compaction_markers_refused(monkeypatch):
            log.compact("Days 1 and 2.", keep=1)
        try:
            log.undo(2)
        except lesson.UndoError as error:
            pytest.fail("the disk refused the marker of a compaction keeping the last "
                        "message, so the log records no compaction; its writer then "
                        f"refused to undo the last two messages ({error}): a "
                        "compaction the log could not record is none, and an undo "
                        "goes on as in lesson 07", pytrace=False)
    assert not compactions_in(path) and len(lines_of(path)) == 5, (
        "the disk refused the compaction marker, then the last two messages were "
        "undone: the log should hold the four messages and one undo marker; it holds "
        f"{lines_of(path)}")


# --- reading it back ------------------------------------------------------------------


@pytest.mark.task("08.1")
def test_a_log_state_gives_the_latest_valid_compaction_as_a_place(lesson, sessions):
    """LogState.compaction() alone, on a parsed log (no other task is needed): the
    latest marker that names messages written before it wins, and its "upto" index
    becomes a place among the messages shown; a log without a marker has none."""
    said = conversation(8)
    lines = [*said[:4], {"$marker": "undo", "skip": [2, 3]}, *said[4:],
             {"$marker": "compaction", "summary": "first", "upto": 4},
             {"$marker": "compaction", "summary": "second", "upto": 6},
             {"$marker": "compaction", "summary": "ahead", "upto": 9}]
    path = sessions / "quest-1.jsonl"
    data = as_log(lines).encode()
    found = lesson.parse_log(data, path).compaction()
    assert found == lesson.Compaction("second", 4), (
        "messages 0 to 7 with 2 and 3 undone, then markers with 'upto' 4, 6 and 9 (9 "
        "names messages never written before it): the latest valid one keeps index 6, "
        "the fifth message shown, so its boundary is place 4. compaction() returned "
        f"{found!r}")
    plain = as_log(said).encode()
    assert lesson.parse_log(plain, path).compaction() is None, (
        "a log with no compaction marker has no compaction (None)")
    # The log's compact records any `keep` the log shows: asked to keep more than
    # the last compaction did, it writes a marker whose "upto" is the smaller one.
    lines = [*said, {"$marker": "compaction", "summary": "kept two", "upto": 6},
             {"$marker": "compaction", "summary": "kept four", "upto": 4}]
    data = as_log(lines).encode()
    found = lesson.parse_log(data, path).compaction()
    assert found == lesson.Compaction("kept four", 4), (
        "eight messages, then a compaction keeping the last two ('upto' 6) and a later "
        "one keeping the last four ('upto' 4): the later one is what the writer last "
        "recorded, so its boundary, place 4, is where requests start. compaction() "
        f"returned {found!r}")
    # Two compactions at the same place: the later summary is the one recorded last
    lines = [*said, {"$marker": "compaction", "summary": "told once", "upto": 6},
             {"$marker": "compaction", "summary": "told again", "upto": 6}]
    found = lesson.parse_log(as_log(lines).encode(), path).compaction()
    assert found == lesson.Compaction("told again", 6), (
        "eight messages, then two compactions with 'upto' 6, the summaries 'told once' "
        "and 'told again': the later is the latest, whatever place it keeps. "
        f"compaction() returned {found!r}")
    # After an undo, a valid "upto" may pass the number of messages shown: it counts
    # every message in the file, undone ones too
    lines = [*said[:4], {"$marker": "undo", "skip": [2, 3]}, *said[4:],
             {"$marker": "compaction", "summary": "kept one", "upto": 7},
             {"$marker": "compaction", "summary": "kept none", "upto": 8}]
    found = lesson.parse_log(as_log(lines).encode(), path).compaction()
    assert found == lesson.Compaction("kept none", 6), (
        "messages 0 to 7 with 2 and 3 undone (six shown), then compactions with "
        "'upto' 7 and 8: both name messages written before them (an index counts the "
        "undone ones too, so 8 is every message in the file), and the latest keeps "
        f"none, so its boundary is place 6. compaction() returned {found!r}")
    # Another program's undo marker after message 1 names -1, message 1 and message 5,
    # written after it: only message 1 is taken back (lesson 07), so the compaction
    # keeping index 6 on starts at place 5, after messages 0, 2, 3, 4 and 5
    lines = [*said[:2], {"$marker": "undo", "skip": [-1, 1, 5]}, *said[2:],
             {"$marker": "compaction", "summary": "kept two", "upto": 6}]
    found = lesson.parse_log(as_log(lines).encode(), path).compaction()
    assert found == lesson.Compaction("kept two", 5), (
        "messages 0 to 7, with another program's undo marker after message 1 naming "
        "-1, 1 and 5: it takes back message 1 only (no message is -1, and message 5 "
        "was written after it), so the log shows 0, 2, 3, 4, 5, 6, 7, and the "
        "compaction keeping index 6 on starts at place 5, the messages shown before "
        "it; a boundary counted from the marker's list as written starts the view "
        "where the log does not, sending a message the summary stands for. "
        f"compaction() returned {found!r}")


@pytest.mark.key
@pytest.mark.task("08.1")
def test_the_boundary_is_a_place_among_the_messages_shown_and_the_latest_marker_wins(
        lesson, sessions):
    """Reading a log, the latest valid compaction is where a resumed agent's requests
    start; its "upto" index becomes a place among the messages shown (undone ones are
    not shown). Only the log is read (no other task is needed)."""
    said = [{"role": "user" if k % 2 == 0 else "assistant", "content": f"message {k}"}
            for k in range(8)]
    lines = [*said[:4], {"$marker": "undo", "skip": [2, 3]}, *said[4:],
             {"$marker": "compaction", "summary": "first", "upto": 4},
             {"$marker": "compaction", "summary": "second", "upto": 6}]
    (sessions / "quest-1.jsonl").write_text(
        as_log(lines))
    agent, model, log = open_agent(lesson, sessions)
    with log:
        pass
    assert agent.messages == [said[k] for k in (0, 1, 4, 5, 6, 7)], (
        "agent.messages stays the whole conversation the log shows")
    expected = lesson.Compaction("second", 4)
    assert agent.compaction == expected, (
        "the log shows messages 0, 1, 4, 5, 6, 7 (2 and 3 undone), and its latest "
        "compaction keeps index 6 on, the fifth message shown: the resumed agent "
        f"should hold {expected!r}, so that its requests start at message 6; it holds "
        f"{agent.compaction!r}")


@pytest.mark.task("08.1")
def test_the_latest_compaction_is_the_one_written_last_whatever_its_time_says(
        lesson, sessions):
    """LogState.compaction() alone: the latest compaction is the one the log records
    last. A marker's "at" says what the clock said as it was written, and clocks are set
    back (a clock that ran fast, corrected by the network), or a time is written in
    another zone: two markers whose times read in the other order still give the one
    written last."""
    said = conversation(8)
    path = sessions / "quest-1.jsonl"
    for first, then, why in (
            ("2026-03-29T10:30:00+00:00", "2026-03-29T09:45:00+00:00",
             "the clock set back an hour between them"),
            ("2026-03-29T10:30:00+00:00", "2026-03-29T09:45:00-01:00",
             "the second's time written in another zone, 10:45 UTC")):
        lines = [*said,
                 {"$marker": "compaction", "summary": "first", "upto": 4, "at": first},
                 {"$marker": "compaction", "summary": "second", "upto": 6, "at": then}]
        found = lesson.parse_log(as_log(lines).encode(), path).compaction()
        assert found == lesson.Compaction("second", 6), (
            f"eight messages, then two compaction markers, 'first' ('upto' 4, at "
            f"{first}) and 'second' ('upto' 6, at {then}; {why}): 'second' is the one "
            "the log records last, so requests start again at place 6 with its "
            f"summary. compaction() returned {found!r}")


@pytest.mark.task("08.1")
def test_a_compaction_marker_naming_messages_written_after_it_is_ignored(lesson,
                                                                        sessions):
    """LogState.compaction() alone: a compaction marker can only summarise what was
    written before it; one whose "upto" is past those messages (or below 0) is not one
    the store wrote, and is ignored. Both ends are valid: nothing summarised, and
    everything written before it."""
    said = conversation(4)
    path = sessions / "quest-1.jsonl"

    def compaction_of(lines):
        data = as_log(lines).encode()
        return lesson.parse_log(data, path).compaction()

    found = compaction_of([said[0], said[1],
                           {"$marker": "compaction", "summary": "ahead", "upto": 3},
                           {"$marker": "compaction", "summary": "behind", "upto": -1},
                           *said[2:]])
    assert found is None, (
        "a compaction marker with 'upto' 3 written after two messages (or with 'upto' "
        "-1) names messages it cannot have summarised: the log has no compaction, and "
        f"requests carry the whole conversation. compaction() returned {found!r}")
    found = compaction_of([said[0], said[1], {"$marker": "undo", "skip": [1]},
                           {"$marker": "compaction", "summary": "ahead", "upto": 3},
                           *said[2:]])
    assert found is None, (
        "two messages, an undo marker, then a compaction marker with 'upto' 3: an undo "
        "marker is no message, so only two were written before it, and the compaction "
        f"marker must be ignored. compaction() returned {found!r}")
    for upto, boundary in ((0, 0), (4, 4)):
        marker = {"$marker": "compaction", "summary": f"upto {upto}", "upto": upto}
        found = compaction_of([*said, marker])
        assert found == lesson.Compaction(f"upto {upto}", boundary), (
            f"a compaction marker with 'upto' {upto} after four messages is one the "
            f"store can write (it keeps {4 - upto} of them): its boundary is place "
            f"{boundary}. compaction() returned {found!r}")


# A log of lesson 07: a repair, an undo, no compaction.
LESSON_07_LOG = [
    {"role": "user", "content": "Ask the elder."},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {
            "name": "talk_to", "arguments": "{\"npc\": \"elder\"}"}}]},
    {"$marker": "repair", "at": "2026-01-01T00:00:00+00:00", "cut_bytes": 0,
     "cut_preview": "", "interrupted": ["c1"]},
    {"role": "tool", "tool_call_id": "c1", "content": "error: interrupted"},
    {"role": "user", "content": "Buy a rope."},
    {"role": "assistant", "content": "Done."},
    {"$marker": "undo", "skip": [3, 4]}]
LESSON_07_SHOWN = [*LESSON_07_LOG[:2], LESSON_07_LOG[3]]


@pytest.mark.task("08.1")
def test_logs_written_by_earlier_lessons_still_load(lesson, sessions):
    """A log without compaction markers (repairs, undos, plain messages) loads as
    before, with no compaction; a compaction marker that is not one is refused, naming
    the line. Only the log is read (no other task is needed)."""
    path = sessions / "quest-1.jsonl"
    path.write_text(as_log(LESSON_07_LOG))
    log = lesson.SessionLog(sessions, "quest-1")
    messages = log.load()
    assert messages == LESSON_07_SHOWN, (
        "a log of lesson 07 (a repair, an undo, no compaction) should load the "
        "messages it shows, as before; it loaded "
        f"{[m.get('content') for m in messages]}")
    assert log.compacted is None, (
        f"a log with no compaction marker has no compaction; it read {log.compacted!r}")

    path.write_text(path.read_text()
                    + json.dumps({"$marker": "compaction", "summary": 7, "upto": "2"})
                    + "\n" + json.dumps({"role": "user", "content": "more"}) + "\n")
    with raises(lesson.CorruptLog, "a compaction marker whose summary is no text and "
                "whose upto is no index was read as if it were one"):
        lesson.SessionLog(sessions, "quest-1").load()


@pytest.mark.key
@pytest.mark.task("08.1")
@pytest.mark.task("08.2")
@pytest.mark.task("08.3")
def test_logs_written_by_earlier_lessons_are_sent_whole(lesson, sessions):
    """Every request of a session whose log has no compaction marker carries its whole
    history, as in lessons 01 to 07."""
    path = sessions / "quest-1.jsonl"
    path.write_text(as_log(LESSON_07_LOG))
    agent, model, log = open_agent(lesson, sessions, [say("Hello again.")], budget=None)
    with log:
        assert agent.view() == [{"role": "system", "content": SYSTEM},
                                *LESSON_07_SHOWN], (
            "a log of lesson 07 (a repair, an undo, no compaction): the request should "
            "be the system prompt and every message it shows")
        agent.run("Hello.")
    assert model.requests[0]["messages"][1:-1] == LESSON_07_SHOWN, (
        "a log of lesson 07 (a repair, an undo, no compaction) should be sent whole")


# --- undo, fork, repair -------------------------------------------------------------


@pytest.mark.task("08.1")
def test_undo_stops_at_the_boundary_on_an_agent_compacted_by_hand(lesson):
    """undo() alone, on an agent whose compaction (boundary at place 6) is set by hand:
    the turns from the boundary on are taken back; an undo that reaches the turn before
    it, alone or with later ones, is refused with UndoError naming the message it would
    take back that the summary stands for, and nothing changes."""
    said = conversation(10)
    agent = agent_without_session(lesson, said, lesson.Compaction("the first turns", 6))
    with raises(lesson.UndoError, "the undo of the last three turns (places 4 to 9) "
                "went ahead: the last two come after the boundary at 6, but the first, "
                "at place 4, is one the summary stands for") as raised:
        agent.undo(3)
    assert agent.messages == said, (
        "a refused undo of three turns changed the conversation")
    assert re.search(r"(?<![\d.])4(?!\d)", str(raised.value)), (
        "the refusal of the last three turns should say which message the summary "
        "stands for that the undo would take back (the first of them, at place 4); it "
        "says "
        f"{str(raised.value)!r}")
    try:
        agent.undo()
        agent.undo()
    except lesson.UndoError as error:
        pytest.fail(f"with the boundary at place 6, undoing the turns at 8 and at 6 "
                    f"was refused ({error}): the turn that begins the view is not in "
                    "the summary", pytrace=False)
    assert agent.messages == said[:6], (
        f"two undos should leave messages 0 to 5; left {len(agent.messages)}")
    with raises(lesson.UndoError, "the undo of the turn the summary stands for (place "
                "4, before the boundary at 6) went ahead", match="(?i)fork",
                        unmatched=SAY_FORK) as raised:
        agent.undo()
    assert agent.messages == said[:6], "a refused undo changed the conversation"
    refusal = str(raised.value)
    assert re.search(r"(?<![\d.])4(?!\d)", refusal), (
        "the refusal should say which message the summary stands for that the undo "
        "would take back (the turn starting at place 4, 'message 4'), so the user "
        f"knows where a fork must be cut; it says {refusal!r}")


@pytest.mark.task("08.1")
def test_undo_refuses_a_turn_of_one_message_just_before_the_boundary(lesson):
    """A turn whose model call failed is one message, the user's: the next turn then
    starts right after it, and a compaction there puts that lone message just before
    the boundary, among those the summary stands for. undo() alone, on an agent
    compacted by hand: the newest turn goes; an undo that reaches the lone message too
    is refused with UndoError, changing nothing, however near the boundary it is."""
    said = [{"role": "user", "content": "Day 1: what now?"},
            {"role": "assistant", "content": "We rest by the mill."},
            {"role": "user", "content": "Day 2: and now? (the model never answered)"},
            {"role": "user", "content": "Day 3: the cave?"},
            {"role": "assistant", "content": "The ledge is steep."}]
    agent = agent_without_session(lesson, said, lesson.Compaction("days one, two", 3))
    with raises(lesson.UndoError, "the undo of the last two turns went ahead: the "
                "first of them is the lone message at place 2, just before the "
                "boundary at 3, and the summary stands for it (it would still tell "
                "the model of day 2)"):
        agent.undo(2)
    assert agent.messages == said, (
        "a refused undo of the last two turns changed the conversation: it is now "
        f"{shape(agent.messages)}")
    try:
        taken = agent.undo()
    except lesson.UndoError as error:
        pytest.fail(f"with the boundary at place 3, the undo of the turn that starts "
                    f"there was refused ({error}): that turn is not in the summary",
                    pytrace=False)
    assert taken == said[3:] and agent.messages == said[:3], (
        "undoing the newest turn, which starts at the boundary (place 3), should take "
        f"back its two messages and leave three; it took {shape(taken)} and left "
        f"{shape(agent.messages)}")
    with raises(lesson.UndoError, "the undo of the lone message at place 2, just "
                "before the boundary at 3, went ahead: the summary stands for it"):
        agent.undo()
    assert agent.messages == said[:3], "a refused undo changed the conversation"


def four_days_compacted(lesson, sessions):
    """quest-1's log of four days (a question and an answer each), compacted with days
    3 and 4 after the boundary; the messages said, and the log's path."""
    said = [message for n in range(1, 5) for message in (
        {"role": "user", "content": day(n)[0]},
        {"role": "assistant", "content": f"On day {n} we rest."})]
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in said:
            log.append(message)
        log.compact("summary #1", keep=4)     # days 3 and 4 after the boundary
    return said, sessions / "quest-1.jsonl"


@pytest.mark.key
@pytest.mark.task("08.1")
def test_undo_after_the_boundary_works_and_undo_behind_it_is_refused(lesson, sessions):
    """An agent resumed on a log that records a compaction (no model is needed): undo
    takes back turns after the boundary as in lesson 07; a turn the summary stands for
    is refused, changing nothing (the summary would still tell the model)."""
    said, path = four_days_compacted(lesson, sessions)
    agent, model, log = open_agent(lesson, sessions, budget=None)
    with log:
        try:
            agent.undo()        # day 4, after the boundary
            agent.undo()        # day 3, the turn the boundary starts
        except lesson.UndoError as error:
            pytest.fail(f"undoing turns after the compaction's boundary was refused "
                        f"({error}): neither is in the summary (the turn at the "
                        "boundary begins the view), so nothing of them would stay "
                        "behind", pytrace=False)
        assert agent.messages == said[:4], (
            "two undos after the boundary should leave days 1 and 2; the conversation "
            f"is {shape(agent.messages)}")
        messages, before = list(agent.messages), path.read_bytes()
        with raises(lesson.UndoError, "undoing a turn the compaction summarised was "
                    "allowed: the summary would still tell the model about it; the "
                    "refusal should say that a fork from before the boundary is the "
                    "way back", match="(?i)fork",
                    unmatched=SAY_FORK):
            agent.undo()
        assert agent.messages == messages and path.read_bytes() == before, (
            "a refused undo must change neither the conversation nor the log")
        note = {"role": "user", "content": "A note from the mayor: the ledge is steep."}
        agent.record(note)      # pending: not written yet
        with raises(lesson.UndoError, "undoing the note's turn and day 2's, which the "
                    "compaction summarised, was allowed"):
            agent.undo(2)
        assert path.read_bytes() == before, (
            "a refused undo must leave the log as it was: the note recorded before it, "
            "still pending, was written by the refusal (what is pending is written "
            "when the agent writes it, not by an undo that changes nothing); the log "
            f"ends with {shape(messages_in(path)[-1:])}")
        agent.flush()
        assert messages_in(path)[-1:] == [note], (
            "a refused undo must leave what is pending as it was: the note recorded "
            "before it, not yet written, should reach the log once the agent writes "
            f"what is pending; the log ends with {shape(messages_in(path)[-1:])}")
    assert resumed_after_the_boundary(lesson, sessions) == [note], (
        "after undoing both turns after the boundary and recording a note, a resume "
        "should send the summary and the note")


@pytest.mark.task("08.1")
def test_an_agent_refusing_an_undo_behind_the_boundary_leaves_the_session_free(
        lesson, sessions):
    """An agent resumed on a compacted log, whose program has closed the log since (its
    with block ended), is asked to undo turns the summary stands for. The agent knows
    its own boundary, so it refuses with UndoError at once and changes nothing: not the
    log, and not who may write it. Another program can write the session right after;
    a refusal left to the log's own undo would first make this agent the session's
    writer again, and keep it locked for nothing."""
    said, path = four_days_compacted(lesson, sessions)
    agent, model, log = open_agent(lesson, sessions, budget=None)
    with log:
        pass        # the program is done with the log for now
    before = path.read_bytes()
    try:
        with raises(lesson.UndoError, "the undo of days 2 to 4 went ahead, with a log "
                    "closed since the resume: day 2's turn is one the summary stands "
                    "for (the boundary is at day 3)"):
            agent.undo(3)
        assert path.read_bytes() == before, "a refused undo must not write to the log"
        note = {"role": "user", "content": "Another program's note."}
        try:
            with lesson.SessionLog(sessions, "quest-1") as other:
                other.append(note)
        except Exception as error:
            pytest.fail(
                "after the agent refused an undo behind the boundary (its log closed "
                "before it was asked), another program could not write the session: "
                f"{type(error).__name__}: {error}. The agent knows its boundary, so a "
                "refusal needs no writer: it should leave the session as free as it "
                "found it, not take the lock to refuse and keep it", pytrace=False)
    finally:
        log.close()
    assert messages_in(path)[-1:] == [note], (
        f"another program's note should end the log; it ends with "
        f"{shape(messages_in(path)[-1:])}")


@pytest.mark.key
@pytest.mark.task("08.1")
def test_the_log_itself_refuses_an_undo_behind_the_boundary_in_a_new_process(
        lesson, sessions):
    """The log's own undo (the chat's, another process's, an adapter's), on a log that
    records a compaction, by a process that never read its history: messages from the
    boundary on are taken back; an undo that reaches one the summary stands for, alone
    or with later ones, is refused, naming the log and the way back, and nothing is
    written. An undo earlier in the log makes the
    marker's "upto" (an index) and the boundary (a place) differ."""
    said = conversation(8)
    path = sessions / "quest-1.jsonl"
    # Indices 2 and 3 undone: message 6 (the first kept) is the fifth shown, place 4
    path.write_text(as_log([*said[:4], {"$marker": "undo", "skip": [2, 3]}, *said[4:],
                            {"$marker": "compaction", "summary": "Four turns.",
                             "upto": 6}]))
    with lesson.SessionLog(sessions, "quest-1") as log:
        undo_refused(lesson, log, path, 3,
                     "the log's own undo of its last three messages (places 3 to 5) "
                     "went ahead: the last two come after the boundary at place 4, but "
                     "the first is one the summary stands for")
        try:
            log.undo(2)
        except lesson.UndoError as error:
            pytest.fail("the log shows 6 messages and its compaction's view starts "
                        "at the fifth (index 6, place 4): undoing the last two takes "
                        "back nothing the summary stands for, and it was refused "
                        f"({error})", pytrace=False)
        error = undo_refused(lesson, log, path, 1,
                             "the log's own undo took back the fourth message shown "
                             "(index 5), which the compaction's summary stands for")
        before = path.read_bytes()      # what every later refusal must leave
    refusal = str(error)
    assert "quest-1" in refusal, (
        f"the log's refusal should name the log (quest-1); it says {refusal!r}")
    numbers = refusal.replace(str(path), "").replace("quest-1", "")
    assert re.search(r"(?<![\d.])3(?!\d)", numbers), (
        "the log's refusal should give the place of the first message the undo would "
        "take back (the fourth shown, place 3; the view starts at place 4), so the "
        f"user knows where a fork must be cut; it says {refusal!r}")
    assert not re.search(r"(?<![\d.])5(?!\d)", numbers), (
        "the log's refusal should name the first message the undo would take back by "
        "its place among the messages the log shows (place 3), wherever it names it, "
        "never by its index in the file (5, the two undone messages counted): a fork "
        f"counts the messages shown, and would be cut elsewhere; it says {refusal!r}")
    with lesson.SessionLog(sessions, "quest-1") as again:
        for count in (3, 4):    # 4: every message the log shows
            with raises(lesson.UndoError, f"the log's own undo of {count} messages, in "
                        "a process that opened the log just now, went ahead behind "
                        "the boundary; its refusal should name the log",
                        match="quest-1",
                        unmatched=NAME_THE_LOG) as raised:
                again.undo(count)
            # The log shows 4: the first taken back is at place 4 - count. Every place
            # the refusal names is that one (or the boundary, 4), never the next.
            first = 4 - count
            words = str(raised.value).replace(str(path), "").replace("quest-1", "")
            if not re.search(rf"(?<![\d.]){first}(?!\d)", words) or re.search(
                    rf"(?<![\d.]){first + 1}(?!\d)", words):
                fail_in("08.1", f"the log shows 4 messages, so an undo of {count} "
                        f"would take back places {first} to 3, and {first} is the "
                        "first the summary stands for: a fork must be cut before "
                        f"it. The refusal should name place {first} wherever it names "
                        f"that message (and never {first + 1}, the message after it); "
                        f"it says {str(raised.value)!r}")
        # A program that says how many messages it saw (lesson 07's `seen`, as an
        # agent passes it) is refused the same: the boundary is the log's rule, not a
        # check left to whoever calls it with or without that count
        for count in (1, 4):
            with raises(lesson.UndoError, f"the log's own undo of {count} message(s), "
                        "called with seen=4 (the number of messages it shows, as a "
                        "program that has just read it says), went ahead behind the "
                        "boundary: the log refuses whoever asks, whatever count of "
                        "messages the caller says it saw",
                        match="quest-1", unmatched=NAME_THE_LOG):
                again.undo(count, seen=4)
        with raises(lesson.UndoError, "the log's own undo of 5 messages, more than "
                    "the 4 it shows, went ahead") as raised:
            again.undo(5)
    said_more = str(raised.value).replace(str(path), "").replace("quest-1", "")
    assert re.search(r"(?<![\d.])4(?!\d)", said_more) and not re.search(
            r"-\d", said_more), (
        "an undo of more messages than the log shows is refused as in lesson 07, "
        "saying how many it shows (4), not as one behind the boundary of a message "
        f"that does not exist; it says {str(raised.value)!r}")
    assert path.read_bytes() == before, "a refused undo must not write to the log"
    agent, model, log = open_agent(lesson, sessions, budget=None)
    with log:
        assert agent.messages == said[:2] + said[4:6], (
            "after the allowed undo the log should show messages 0, 1, 4 and 5 (the "
            f"refused ones changed nothing); it shows {agent.messages}")


@pytest.mark.task("08.1")
def test_the_log_refuses_an_undo_behind_a_compaction_it_has_just_written(lesson,
                                                                          sessions):
    """The writer that records a compaction refuses, right after, an undo that reaches
    behind it; the message at the boundary may still be taken back. What a writer knew
    at an earlier undo is no longer true once it records a compaction: after a second
    one, the boundary is the second's, also for a writer that undid a message after the
    first."""
    path = sessions / "quest-1.jsonl"
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in conversation(6):
            log.append(message)
        log.compact("The first two turns.", keep=2)
        log.undo(2)         # the messages at places 4 and 5: the view starts at 4
        undo_refused(lesson, log, path, 1,
                     "right after recording a compaction that keeps places 4 and 5, "
                     "the log took back place 3, which its summary stands for")
        before = path.read_bytes()
        with raises(lesson.UndoError, "right after recording a compaction that keeps "
                    "places 4 and 5, the log took back place 3, which its summary "
                    "stands for, when the caller said it saw the 4 messages the log "
                    "shows (seen=4, as an agent says it): the refusal is the log's "
                    "rule, whoever calls it and however"):
            log.undo(1, seen=4)
        assert path.read_bytes() == before, (
            "a refused undo (seen=4) must not write to the log")
    # A writer that took a message back before it recorded the compaction: what it
    # knew of the log at that undo (no compaction) is no longer true
    path = sessions / "quest-2.jsonl"
    with lesson.SessionLog(sessions, "quest-2") as log:
        for message in conversation(7):
            log.append(message)
        log.undo(1)         # message 6, before any compaction
        log.compact("The first two turns.", keep=2)     # the view starts at place 4
        undo_refused(lesson, log, path, 3,
                     "a writer that had undone a message, then recorded a compaction "
                     "keeping places 4 and 5, took back places 3 to 5: its summary "
                     "stands for place 3",
                     unchanged="a refused undo must not write to the log, also from a "
                     "writer that undid a message before it recorded the compaction")
    # Two compactions, an undo between them: the second's boundary holds at once
    path = sessions / "quest-3.jsonl"
    with lesson.SessionLog(sessions, "quest-3") as log:
        for message in conversation(8):
            log.append(message)
        log.compact("The first turn.", keep=6)          # the view starts at place 2
        log.undo(1)         # place 7, after that boundary: allowed
        log.compact("The first three turns.", keep=2)   # now the view starts at place 5
        undo_refused(lesson, log, path, 3,
                     "a writer that recorded a compaction, undid a message after its "
                     "boundary, then recorded a second compaction keeping places 5 and "
                     "6, took back places 4 to 6: the second summary stands for place "
                     "4 (the first compaction's boundary, place 2, is no longer the "
                     "one requests start from)",
                     unchanged="a refused undo must not write to the log, also after a "
                     "second compaction")


@pytest.mark.task("08.1")
def test_the_log_refuses_an_undo_behind_the_boundary_of_a_dotted_session_id(lesson,
                                                                          sessions):
    """Session ids may hold dots and digits (a date and a place: '2026.05.cave'). The
    log's own refusal of an undo behind its compaction names that log, by the whole of
    its id, never by a part of it that may name another session."""
    for session_id in ("2026.05.cave", "cave.v2"):
        path = sessions / f"{session_id}.jsonl"
        with lesson.SessionLog(sessions, session_id) as log:
            for message in conversation(4):
                log.append(message)
            log.compact("The first turn.", keep=2)
            error = undo_refused(lesson, log, path, 3,
                                 f"the log {session_id!r} took back place 1, which "
                                 "its summary stands for")
        assert session_id in str(error), (
            f"the refusal of the log {session_id!r} should name that log, so that the "
            f"user knows which one refused; it says {str(error)!r}")


@pytest.mark.task("08.1")
def test_the_log_names_the_first_message_an_undo_would_take_back_across_the_boundary(
        lesson, sessions):
    """The log's own undo, in a process that opened the log just now, of messages on
    both sides of the boundary: thirteen shown, the view from place 10, an undo of the
    last six (places 7 to 12). The refusal names place 7, the first message taken back
    that the summary stands for, where a fork must be cut: counted back from the end of
    what the log shows, not from the boundary (10 - 6 = 4), and never place 8. The
    numbers differ here (the count 6, the boundary 10, the first 7), so no other number
    the refusal gives can stand in for the one it must give."""
    path = sessions / "quest-1.jsonl"
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in conversation(13):
            log.append(message)
        log.compact("The first turns.", keep=3)     # the view starts at place 10
    with lesson.SessionLog(sessions, "quest-1") as log:
        error = undo_refused(lesson, log, path, 6,
                             "the log's own undo of its last six messages (places 7 "
                             "to 12) went ahead: places 7 to 9 come before the "
                             "boundary at place 10, and the summary stands for them")
    words = str(error).replace(str(path), "").replace("quest-1", "")
    if not re.search(r"(?<![\d.])7(?!\d)", words) or re.search(
            r"(?<![\d.])8(?!\d)", words):
        fail_in("08.1", "the log shows 13 messages and its view starts at place 10, "
                "so an undo of 6 would take back places 7 to 12, and 7 is the first "
                "the summary stands for: a fork must be cut before it. The refusal "
                "should name place 7 wherever it names that message (and never 8, the "
                "message after it; nor only 4, the boundary less the count, which "
                "counts from the boundary rather than from the end of what the log "
                f"shows); it says {str(error)!r}")


@pytest.mark.key
@pytest.mark.task("08.1")
def test_a_fork_before_the_boundary_has_no_compaction(lesson, sessions):
    """A fork cut before the boundary gets the full history and no summary; a fork of
    the whole session gets the compaction too, and starts its requests where its
    source does. The log's own compact makes the compaction (no other task is
    needed)."""
    history = conversation(8)
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in history:
            log.append(message)
        log.compact("The first three turns.", keep=2)
    source, _, source_log = open_agent(lesson, sessions, budget=None)
    with source_log:
        compaction = source.compaction
    boundary = 6
    lesson.fork(sessions, "quest-1", "before", upto=boundary)
    lesson.fork(sessions, "quest-1", "whole")

    early, _, early_log = open_agent(lesson, sessions, session_id="before", budget=None)
    with early_log:
        assert early.messages == history[:boundary] and early.compaction is None, (
            f"a fork of the first {boundary} messages (all before the boundary) should "
            "hold them all and no compaction (its log has no marker), so that its "
            f"requests send them all; it holds {len(early.messages)} messages and the "
            f"compaction {early.compaction!r}")
    whole, _, whole_log = open_agent(lesson, sessions, session_id="whole")
    with whole_log:
        assert whole.messages == history and whole.compaction == compaction, (
            "a fork of the whole session should hold the same conversation and the "
            f"same compaction as its source ({compaction!r}), so that it sends the "
            f"same request; it holds {whole.compaction!r}")


@pytest.mark.task("08.1")
def test_a_repair_after_a_compaction_keeps_the_compaction(lesson, sessions):
    """A crash between a tool call and its result after a compaction: the resume
    repairs the tail (lesson 04) and the request still starts from the summary, the
    crashed turn after it, its call answered."""
    path = sessions / "quest-1.jsonl"
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in conversation(6):
            log.append(message)
        log.compact("The first two turns.", keep=2)
    with path.open("a") as file:   # the call of a turn that crashed before its result
        file.write(json.dumps({"role": "user", "content": "Buy a rope."}) + "\n")
        file.write(json.dumps({"role": "assistant", "content": "", "tool_calls": [
            {"id": "late", "type": "function", "function": {
                "name": "buy", "arguments": "{\"item\": \"rope\"}"}}]}) + "\n")
    kept = resumed_after_the_boundary(lesson, sessions)
    roles = [m.get("role") for m in kept]
    assert kept[:2] == conversation(6)[4:] and roles[2:] == ["user", "assistant",
                                                             "tool"], (
        "after a repair, the request should still start from the summary: then the "
        "two messages the compaction kept, the crashed turn, and the repair's answer "
        f"to its call; after the boundary the resumed agent holds {shape(kept)}")


# --- the budget's limits ------------------------------------------------------------


@pytest.mark.task("08.3")
def test_request_messages_alone_sends_the_view_or_compacts_once_or_refuses(lesson):
    """request_messages() alone, on an agent whose compact() is the test's own (no
    other task is needed): a request within the budget is the view, with no summary;
    one over it is compacted and sent if it then fits; when nothing was summarised, or
    the compacted request is still over, ContextOverflow giving the size, the budget
    and what the user can do (undo the turn, or raise the budget), the conversation
    unchanged. A request is measured with the tools it carries, whatever tools came
    with the one before."""
    said = conversation(10)
    agent = agent_without_session(lesson, said)
    whole = agent.view()
    asked = []      # one entry a summary

    def compacting(boundary):
        """A compact() that summarises everything before `boundary` (None: there is
        nothing to summarise). Called again, it finds nothing more, as a real one
        does: the turn in progress then begins the view."""
        def compact():
            if boundary is None or agent.compaction is not None:
                return False
            asked.append(boundary)
            agent.compaction = lesson.Compaction("days 1 to 3", boundary)
            return True
        return compact

    def request(budget, boundary):
        agent.budget, agent.compaction = budget, None
        agent.compact = compacting(boundary)
        asked.clear()
        return agent.request_messages()

    size = agent.request_size(whole)
    sent = request(size, 8)
    assert sent == whole and not asked, (
        f"a request of {size} tokens, exactly the budget, should be the view as it is, "
        f"with no summary; compact() summarised {len(asked)} time(s)")
    sent = request(size - 1, 8)
    assert asked == [8] and sent == agent.view(), (
        f"a request one token over the budget should be compacted and the compacted "
        f"view sent; compact() summarised {len(asked)} time(s), and the request held "
        f"{len(sent)} messages, the compacted view {len(agent.view())}")
    for boundary, why in ((None, "compact() summarised nothing"),
                          (2, "the compacted request is still over the budget")):
        small = agent.request_size(whole[:1] + whole[-2:])
        with raises(lesson.ContextOverflow, f"{why}, and the request was sent over "
                    f"the budget of {small}") as raised:
            request(small, boundary)
        # The size of the request as it would go, compacted: how far the budget falls
        # short (the size before the compaction would have the user raise it too far)
        sizes = {agent.request_size(agent.view())}
        assert_overflow_says_enough(str(raised.value), small, sizes, f" ({why})")
        assert agent.messages == said, "a refused request changed the conversation"
    # A compaction that leaves the request one token over the budget: refused, with
    # the size of the request as it would go; at the budget exactly, it is sent
    agent.compaction = lesson.Compaction("days 1 to 3", 8)
    compacted = agent.request_size(agent.view())
    with raises(lesson.ContextOverflow, "a compaction left the request one token over "
                f"the budget of {compacted - 1} (the summary counted, as it is sent), "
                "and the request was sent") as raised:
        request(compacted - 1, 8)
    assert_overflow_says_enough(str(raised.value), compacted - 1, {compacted},
                                " (a compaction one token short)")
    sent = request(compacted, 8)
    assert asked == [8] and sent == agent.view(), (
        f"a compacted request of {compacted} tokens, exactly the budget, should be "
        f"sent; compact() summarised {len(asked)} time(s) and the request held "
        f"{shape(sent, 20)}")
    # A budget of 0 is a budget (only None is none): no request fits it
    with raises(lesson.ContextOverflow, "with a budget of 0 tokens the request was "
                "sent whole, as if there were no budget: only None means none"
                ) as raised:
        request(0, None)
    assert_overflow_says_enough(str(raised.value), 0, {agent.request_size(whole)},
                                " (a budget of 0)")
    # A compaction already starts at the newest turn (place 8), and the view is still
    # over the budget: a real compact() finds nothing more to summarise.
    agent.compaction = lesson.Compaction("days 1 to 4", 8)
    view = agent.view()
    agent.budget = agent.request_size(view) - 1
    agent.compact = compacting(None)
    with raises(lesson.ContextOverflow, "a compaction already starts at the newest "
                "turn, the view is still over the budget, and the request was sent"
                ) as raised:
        agent.request_messages()
    assert_overflow_says_enough(str(raised.value), agent.budget,
                                {agent.request_size(view)},
                                " (a compaction already at the newest turn)")
    # No budget: nothing is compacted, yet a compaction the agent holds (the log's, or
    # one made by /compact) still stands for the messages before its boundary
    agent.budget, agent.compaction = None, lesson.Compaction("days 1 to 4", 8)
    asked.clear()
    sent = agent.request_messages()
    assert sent == agent.view() and not asked, (
        "with no budget, the request should be the view as it stands: the compaction "
        "the agent holds (boundary at place 8) still replaces the messages before it "
        f"with its summary; the request held {len(sent)} messages, the view "
        f"{len(agent.view())}, and compact() summarised {len(asked)} time(s)")
    # The program gives the agent other tools between requests (the library opens):
    # each request is measured with the schemas it will carry, those of its own tools
    agent = agent_without_session(lesson, said)
    agent.budget = size_of(lesson, {"messages": agent.view(), "tools": Town().schemas})
    agent.compact = compacting(None)
    agent.request_messages()
    agent.tools = Library()
    with raises(lesson.ContextOverflow, "a request exactly at the budget was sent; "
                "then the agent's tools became the library's, whose schemas are "
                "longer, so the same conversation with them is over the budget, and "
                "nothing can be summarised: request_messages() should have raised, and "
                "the request went out, measured as if the old tools came with it"):
        agent.request_messages()


@pytest.mark.task("08.3")
def test_a_request_exactly_at_the_budget_is_sent_before_and_after_a_compaction(
        lesson):
    """The budget is the largest request allowed: one of exactly that size is sent
    as it is, and so is a compacted one of exactly that size."""
    script = day(1)[1] + day(2)[1]
    agent, model, log = open_agent(lesson, None, script, budget=None)
    with log:
        agent.run(day(1)[0])
        agent.run(day(2)[0])
    exact = size_of(lesson, model.requests[-1])
    agent, model, log = open_agent(lesson, None, script, budget=exact)
    with log:
        agent.run(day(1)[0])
        agent.run(day(2)[0])
    assert not model.summary_requests, (
        f"a request of {exact} tokens, exactly the budget, was compacted: the budget "
        "is the largest request allowed, not one more than it")

    paste = "A long letter from the mayor. " * 12
    after = compacted_view(lesson, "summary #1", [{"role": "user", "content": paste}])
    budget = size_of(lesson, {"messages": after, "tools": TOOL_SCHEMAS})
    agent, model, log = open_agent(lesson, None, script + [say("Noted.")],
                                   budget=budget)
    with log:
        agent.run(day(1)[0])
        agent.run(day(2)[0])
        try:
            agent.run(paste)
        except lesson.ContextOverflow as error:
            pytest.fail(f"a compacted request of exactly the budget ({budget} tokens) "
                        f"was refused: {error}", pytrace=False)
        except lesson.BadSummary as error:
            fail_in("08.4", f"the summary 'summary #1' leaves the compacted request at "
                    f"exactly the budget ({budget} tokens), and it was refused: "
                    f"{error}. A summary fits when the request it begins is within "
                    "the budget (check_fits says when)")
    assert model.requests[-1]["messages"] == after


@pytest.mark.key
@pytest.mark.task("08.3")
def test_without_a_budget_every_request_carries_the_whole_history(lesson, sessions):
    """With no budget (the default) nothing is compacted: every request carries the
    whole conversation, as in lessons 01 to 07."""
    script = [step for n in range(1, 13) for step in day(n)[1]]
    agent, model, log = open_agent(lesson, sessions, script, budget=None)
    with log:
        for n in range(1, 13):
            agent.run(day(n)[0])
        history = list(agent.messages)
    assert not model.summary_requests, (
        "with budget=None the agent must never compact: it asked for a summary")
    assert model.requests[-1]["messages"] == [
        {"role": "system", "content": SYSTEM}, *history[:-1]], (
        "with budget=None the last request should carry the whole conversation")
    assert not compactions_in(sessions / "quest-1.jsonl")


@pytest.mark.key
@pytest.mark.task("08.3")
def test_a_turn_too_large_for_the_budget_is_refused_once_clearly_and_loses_nothing(
        lesson, sessions):
    """When even the newest turn alone is over the budget, the agent summarises what
    it can once, then raises ContextOverflow; it never loops, never sends a request over
    the budget, and the log keeps the message."""
    agent, model, log = open_agent(lesson, sessions, day(1)[1] + day(2)[1])
    path = sessions / "quest-1.jsonl"
    paste = "A very long letter from the mayor. " * 60
    with log:
        agent.run(day(1)[0])
        agent.run(day(2)[0])
        with raises(lesson.ContextOverflow, "a turn larger than the budget by itself "
                    "was not refused") as raised:
            agent.run(paste)
        assert_overflow_says_enough(str(raised.value), BUDGET)
        assert len(model.summary_requests) <= 1, (
            f"the agent asked for {len(model.summary_requests)} summaries for one "
            "request whose turn in progress alone is over the budget: the user waited "
            "for each call, and none could make that turn smaller")
    for request in turn_requests(model):
        assert size_of(lesson, request) <= BUDGET, (
            f"a request of about {size_of(lesson, request)} tokens was sent, over the "
            f"budget of {BUDGET}")
    assert messages_in(path)[-1:] == [{"role": "user", "content": paste}], (
        "the refused message must still be in the log: nothing is lost")

    agent, model, log = open_agent(lesson, sessions, budget=REPLY_ROOM + 10,
                                   session_id="quest-2")
    with log:
        with raises(lesson.ContextOverflow, "a budget smaller than the tools and the "
                    "reply's room was not refused") as raised:
            agent.run("Hello?")
        assert_overflow_says_enough(str(raised.value), REPLY_ROOM + 10,
                                    where=" (a budget smaller than the tools)")
    assert not model.requests, (
        "with a budget smaller than the tools alone, no request may be sent (and there "
        f"is nothing to summarise); {len(model.requests)} were")
    assert messages_in(sessions / "quest-2.jsonl") == [
        {"role": "user", "content": "Hello?"}], "the refused message stays in the log"


@pytest.mark.task("08.3")
def test_a_request_after_an_undo_is_measured_as_it_stands(lesson):
    """A turn is undone, and a new one sent in its place: as many messages as the turn
    taken back, but far longer, over the budget on its own. Its request is measured as
    it stands, never by the size an earlier request of as many messages needed: it is
    refused with ContextOverflow, and never sent."""
    agent, model, log = open_agent(lesson, None, [say("On day 1 we rest by the mill."),
                                                  say("The chronicle says the cave is "
                                                      "deep.")])
    chronicle = ("Read me the whole chronicle of the town, page by page: "
                 + "the cave is deep and the ledge is steep. " * 40)
    with log:
        agent.run(day(1)[0])
        agent.undo()
        with contextlib.suppress(lesson.ContextOverflow):
            agent.run(chronicle)
    over = [(number, size_of(lesson, request))
            for number, request in enumerate(turn_requests(model), start=1)
            if size_of(lesson, request) > BUDGET]
    assert not over, (
        f"day 1's turn was undone, and a message of about "
        f"{lesson.estimate_tokens(chronicle)} tokens sent in its place (its request "
        f"holds as many messages as day 1's did): request {over[0][0]} went out "
        f"needing {over[0][1]} tokens, over the budget of "
        f"{BUDGET}. A request is measured as it stands, not by what an earlier one of "
        "as many messages needed")


# --- the summary's contract ---------------------------------------------------------

# Replies to the summary request that give no summary to record: each of ODD_REPLIES
# that gives no answer (a tool call, no text, only thinking, a call written as text),
# and a summary far longer than the whole budget.
# A summary the server cut off at its limit on tokens: it reads as whole, and only
# the reply's finish_reason says that its end is missing.
CUT_TEXT = ("Day 1: the elder warned us of the ledge. Day 2: we bought a rope and "
            "walked to the cave, where the guard")
CUT_OFF_SUMMARY = raw({"role": "assistant", "content": CUT_TEXT},
                      finish_reason="length")
NO_SUMMARY = {**{key: ODD_REPLIES[key] for key in NO_ANSWER},
              "too_long": long_reply(2000), "cut_off": CUT_OFF_SUMMARY}
# What the user (and, asked again, the model) must be told each of them was: the tool
# called, no text, thinking only, a call written as text, too long.
# (No text: in any of the words a user reads it in, "empty", "blank", "whitespace" ...)
NO_TEXT = (r"(?i)\bno (text|content)\b|\bempty\b|\bnothing\b|\bblank\b|"
           r"\bwhite ?space\b|\bonly spaces\b|\bnull\b")
THINKING, AS_TEXT = r"(?i)think", r"(?i)\bjson\b|\btext\b"
AS_TEXT_CALL = ["talk_to", AS_TEXT]
# A tool call: the message reads on after "it was", so it says a call was made, and
# to which tool ("a call to talk_to"), not the tool's name alone
A_CALL = [r"(?i)\bcall(s|ed|ing)?\b[^.;]{0,30}talk_to|talk_to[^.;]{0,30}\bcall"]
WHAT_IT_WAS = {"empty": [NO_TEXT], "null": [NO_TEXT], "tool_call": A_CALL,
               "call_with_text": A_CALL, "call_as_json": AS_TEXT_CALL,
               "call_in_fence": AS_TEXT_CALL, "call_in_tag": AS_TEXT_CALL,
               "unfinished_think": [THINKING], "only_think": [THINKING],
               "too_long": [r"(?i)too long"],
               "cut_off": [r"(?i)cut|length|limit|truncat|unfinished|incomplete"]}
# Each of those, in words, for a failure to show
SAYS = {NO_TEXT: "that it held no text", THINKING: "that it was only thinking (a think "
        "block)", AS_TEXT: "that it was written as (JSON) text", "talk_to":
        "the tool named, talk_to", A_CALL[0]: "that it was a call to talk_to (a phrase "
        "that reads on after 'it was', not the tool's name alone)",
        r"(?i)too long": "that it was too long",
        WHAT_IT_WAS["cut_off"][0]: "that the server cut it off at its length limit"}
# An exception as Python shows it (repr), which no reader takes for plain words:
# BadSummary('...'), ValueError("...")
PYTHON_REPR = re.compile(r"\b[A-Z]\w*(?:Error|Summary|Exception)\(['\"]")
# What a refusal must not say of a reply: the pattern, and what it would wrongly tell
CUT_OFF = r"(?i)never ends|cut off|unfinished|unclosed|not (closed|ended|finished)"
WHAT_IT_WAS_NOT = {"empty": (r"(?i)\bblock\b|" + CUT_OFF[4:], "thinking it never sent"),
                   "null": (r"(?i)\bblock\b|" + CUT_OFF[4:], "thinking it never sent"),
                   "only_think": (CUT_OFF, "thinking cut off, and it was ended"),
                   "cut_off": (NO_TEXT + r"|(?i:think)", "no text, or thinking, and it "
                               "was a summary with its end cut off")}


@pytest.mark.task("08.4")
@pytest.mark.parametrize("odd", list(NO_ANSWER))
def test_check_summary_alone_refuses_a_reply_that_is_no_summary(lesson, odd):
    """check_summary() alone (no compaction is needed), on each reply the tests send
    that gives no summary: BadSummary, whose message names what the model sent, and
    names nothing it did not send."""
    sent = json.dumps(ODD_REPLIES[odd].message)
    reply = lesson.normalize_reply(json.loads(sent), [])
    with raises(lesson.BadSummary, f"check_summary() took a reply that is no summary "
                f"({odd}: {sent[:120]})") as raised:
        lesson.check_summary(reply)
    said = str(raised.value)
    for pattern in WHAT_IT_WAS[odd]:
        assert re.search(pattern, said), (
            f"the BadSummary for a reply that is no summary ({odd}: {sent[:100]}) "
            f"should say what the model sent: {SAYS[pattern]} (the words matching "
            f"{pattern!r}); it says {said!r}")
    first = re.match(r"\S+", said)
    assert first and not (first.group()[0].isupper() and not first.group().isupper()
                          ) and not said.rstrip().endswith("."), (
        f"the BadSummary for a reply that is no summary ({odd}) should be a phrase "
        "naming what was sent that reads on after 'it was' (the firmer instruction "
        "quotes it so, and the final error quotes it too), not a sentence of its own, "
        f"a capital first and a full stop last; it says {said!r}")
    wrong = WHAT_IT_WAS_NOT.get(odd)
    assert wrong is None or not re.search(wrong[0], said), (
        f"the BadSummary for a reply that is no summary ({odd}: {sent[:100]}) says "
        f"{said!r}, which tells of {wrong[1]}: the user, and the model asked again, "
        "are told of something the model did not send")


@pytest.mark.task("08.4")
def test_check_summary_alone_says_what_a_long_reply_was_without_quoting_it_whole(
        lesson):
    """check_summary() alone, on replies that give no summary and are long: thinking
    the server cut off at its limit, a call written as text with a long argument, a
    tool call beside a long text. The BadSummary says what each was, in a phrase: it
    goes into the second summary request and onto the user's screen, so it names the
    kind of reply, not the whole of its text (a quoted start is fine)."""
    musing = "Which matters most, the elder, the guard or the rope? " * 400
    call = {"id": "call_long", "type": "function",
            "function": {"name": "talk_to", "arguments": '{"npc": "elder"}'}}
    long_replies = {
        "thinking cut off at the length limit": (
            {"role": "assistant", "content": "<think>\n" + musing}, "length"),
        "a call written as text, with a long argument": (
            {"role": "assistant", "content": json.dumps(
                {"name": "talk_to", "arguments": {"npc": "the elder " * 1000}})},
            "stop"),
        "a tool call beside a long text": (
            {"role": "assistant", "content": "Let me ask the elder. " * 1000,
             "tool_calls": [call]}, "tool_calls")}
    for kind, (message, reason) in long_replies.items():
        reply = {**lesson.normalize_reply(message, []), "finish_reason": reason}
        with raises(lesson.BadSummary, f"check_summary() took {kind} (a reply of "
                    f"{len(str(message['content']))} characters) for a summary"
                    ) as raised:
            lesson.check_summary(reply)
        said = str(raised.value)
        assert len(said) <= 500, (
            f"the BadSummary for {kind}, a reply of {len(str(message['content']))} "
            f"characters, is {len(said)} characters long: it should say what the reply "
            "was in a phrase (the second summary request carries it to the model, and "
            "the user reads it in one line), not quote the reply whole; it begins "
            f"{said[:160]!r}")


@pytest.mark.task("08.4")
def test_check_summary_alone_refuses_a_reply_of_only_spaces(lesson):
    """check_summary() alone, on a reply whose text is only spaces and line ends."""
    reply = lesson.normalize_reply({"role": "assistant", "content": " \n\t \n"}, [])
    with raises(lesson.BadSummary, "check_summary() took a reply of only spaces and "
                "line ends for a summary") as raised:
        lesson.check_summary(reply)
    said = str(raised.value)
    assert re.search(NO_TEXT, said) and not re.search(WHAT_IT_WAS_NOT["empty"][0],
                                                      said), (
        "the BadSummary for a reply of only spaces should say that it held no text, "
        f"and nothing it did not hold; it says {said!r}")


@pytest.mark.task("08.4")
def test_check_summary_alone_refuses_a_call_written_as_text_after_thinking(lesson):
    """check_summary() alone, on a reply of a reasoning model that thought, then wrote
    a tool call as JSON text (as small local models do). Recorded, it would tell every
    later request that the conversation so far was a call that never ran: a call
    written as text is among what BadSummary names."""
    content = f"<think>\nThe elder first.\n</think>\n\n{CALL_TEXT}"
    reply = lesson.normalize_reply({"role": "assistant", "content": content}, [])
    with raises(lesson.BadSummary, "check_summary() took a think block followed by a "
                f"call written as JSON text ({content!r}) for a summary: the call "
                "would be recorded, and every later request would tell the model that "
                "the conversation so far was a call to talk_to") as raised:
        lesson.check_summary(reply)
    said = str(raised.value)
    assert all(re.search(pattern, said) for pattern in AS_TEXT_CALL), (
        "the BadSummary for a think block, then a call written as JSON text, should "
        f"say that it was a call to talk_to written as text; it says {said!r}")


@pytest.mark.task("08.4")
def test_check_summary_alone_refuses_thinking_begun_again_and_cut_off(lesson):
    """check_summary() alone, on a reply whose thinking ended, then began again and was
    cut off by the length limit (a template that opens the block in the prompt, then
    a model that thinks once more): it was thinking, and gives no account of the
    conversation. Recorded, it would tell every later request that thinking; and the
    store, reading it again, refuses it. So is a reply of such a template that only
    thought, and ended its thinking: it holds no <think>, only the closing tag, and
    is said to be thinking all the same, not to hold no text."""
    for content, what in (
            (f"{THOUGHT}\n</think>\n\n<think>\nOn second thought, the rope",
             "ended, then begun again and cut off"),
            (f"{THOUGHT}\n</think>\n\n",
             "opened in the prompt, so only its closing tag is sent, and ended")):
        reply = lesson.normalize_reply({"role": "assistant", "content": content}, [])
        with raises(lesson.BadSummary, f"check_summary() took thinking {what} "
                    f"({content!r}) for a summary") as raised:
            lesson.check_summary(reply)
        said = str(raised.value)
        assert re.search(THINKING, said), (
            f"the BadSummary for a reply that is only thinking ({what}) should say "
            f"that it was thinking (a think block); it says {said!r}")


@pytest.mark.task("08.4")
def test_check_summary_alone_returns_the_text_after_the_thinking_trimmed(lesson):
    """check_summary() alone, on a summary after a think block, and on one with spaces
    around it: what it returns is what every later request carries."""
    reply = lesson.normalize_reply(
        json.loads(json.dumps(ODD_REPLIES["think_then_text"].message)), [])
    assert lesson.check_summary(reply) == ANSWER_AFTER_THOUGHT, (
        "a think block, then a summary: check_summary returned "
        f"{lesson.check_summary(reply)!r}, which every later request and every resume "
        "would tell the model in place of the earlier turns; only an account of the "
        "conversation, as the next reader of the request should read it, is recorded")
    plain = lesson.normalize_reply({"role": "assistant", "content": "  Days 1-3.\n"},
                                   [])
    assert lesson.check_summary(plain) == "Days 1-3.", (
        "a summary with spaces and a line end around it: check_summary returned "
        f"{lesson.check_summary(plain)!r}; the summary is the whole answer as the "
        "model wrote it, trimmed")
    # Some chat templates open the think block in the prompt: the reply has its end only
    ended = lesson.normalize_reply({"role": "assistant", "content": (
        "The user wants the gist; the ledge matters.\n</think>\n\n"
        + ANSWER_AFTER_THOUGHT)}, [])
    got = lesson.check_summary(ended)
    assert got == ANSWER_AFTER_THOUGHT, (
        "a reply whose think block has only its end (some chat templates open it in "
        f"the prompt), then the summary: check_summary returned {got!r}, which every "
        "later request would tell the model in place of the earlier turns; only an "
        "account of the conversation, as the next reader of the request should read "
        "it, is recorded")
    # A model that thought twice before answering: both blocks are thinking
    twice = lesson.normalize_reply({"role": "assistant", "content": (
        f"<think>{THOUGHT}</think>\n<think>The rope too.</think>\n\n"
        + ANSWER_AFTER_THOUGHT)}, [])
    got = lesson.check_summary(twice)
    assert got == ANSWER_AFTER_THOUGHT, (
        "a reply of two think blocks, then the summary: check_summary returned "
        f"{got!r}, which every later request would tell the model in place of the "
        "earlier turns; only an account of the conversation, as the next reader of "
        "the request should read it, is recorded")
    # A heading the model put before its account is part of the answer it wrote
    labelled = "Summary: the elder warned of the ledge, and a rope was bought."
    got = lesson.check_summary(
        lesson.normalize_reply({"role": "assistant", "content": labelled}, []))
    assert got == labelled, (
        f"a summary the model began with a heading ({labelled!r}) should be returned "
        f"whole, as the model wrote it: check_summary returned {got!r}")
    for quoting in ('{"gold": 3} was all the ledger said; the rope is bought.',
                    'The guard said {"name": "talk_to"} was a word of the old tongue.'):
        reply = lesson.normalize_reply({"role": "assistant", "content": quoting}, [])
        try:
            got = lesson.check_summary(reply)
        except lesson.BadSummary as error:
            pytest.fail(f"a summary that quotes some JSON ({quoting!r}) was refused "
                        f"({error}): it is an account of the conversation, and the "
                        "model, asked again, and the user would be told it was "
                        "something it was not", pytrace=False)
        assert got == quoting, (
            f"a summary that quotes some JSON should be returned as the model wrote "
            f"it; got {got!r}")


@pytest.mark.task("08.4")
def test_check_summary_alone_returns_a_long_summary_whole(lesson):
    """check_summary() alone, on a summary of many paragraphs and lines, longer than a
    page, and on one with \\r\\n line ends, spaces before a line end and characters
    such as \\u2028 inside its lines; plain, after a think block, or with line ends
    and a tab around it. The summary is the whole answer as the model wrote it,
    trimmed: never cut to a length or to a paragraph, never reflowed. Its length is the
    budget's to judge (check_fits, given): a summary cut short has lost the newest of
    what it tells."""
    long = "\n\n".join(f"Day {n}: the elder warned us of the ledge; we bought  a "
                       f"rope,\nand {n * 3} gold was left." for n in range(1, 81))
    # Line ends as servers send them (\r\n), spaces before a line end, and characters
    # that some readings of text take for line ends, inside a line: all the model's
    odd = ("Day 1: the elder warned us of the ledge;   \r\nwe bought a rope\u2028(two "
           "gold)\x85and went on.\r\n\r\nDay 2: the cave\x0cthe mill\x1cthe inn.")
    for what, summary in ((f"{len(long)} characters in 80 paragraphs", long),
                          ("\\r\\n line ends, spaces before a line end and \\u2028, "
                           "\\x85, \\x0c, \\x1c inside lines", odd)):
        for how, content in (("plain", summary),
                             ("after a think block", f"<think>{THOUGHT}</think>\n\n"
                                                     f"{summary}\n"),
                             ("with \\r\\n and a tab around it",
                              f"\r\n{summary}\t\r\n")):
            reply = lesson.normalize_reply({"role": "assistant", "content": content},
                                           [])
            got = lesson.check_summary(reply)
            if got != summary:
                same = next((k for k, (a, b) in enumerate(zip(got, summary))
                             if a != b), min(len(got), len(summary)))
                pytest.fail(f"a summary of {what} ({how}) should be returned whole, "
                            f"as the model wrote it; check_summary returned "
                            f"{len(got)} characters, the same up to character "
                            f"{same}: {got[max(same - 30, 0):same + 30]!r} where the "
                            f"summary has {summary[max(same - 30, 0):same + 30]!r}",
                            pytrace=False)


@pytest.mark.task("08.4")
def test_check_summary_alone_refuses_a_summary_the_server_cut_off(lesson):
    """check_summary() alone, on a plain summary that the server cut off at its
    length limit (finish_reason "length", which ask_for_summary passes on): it reads
    as a whole summary, yet the newest of what it tells is lost, and every later
    request and resume would be built on it. The same text, ended by the model, is
    a summary."""
    reply = as_asked(lesson, CUT_OFF_SUMMARY)
    with raises(lesson.BadSummary, "check_summary() took, as a summary, a reply the "
                "server cut off at its length limit (finish_reason 'length'): "
                f"{CUT_TEXT[-40:]!r} ends mid-sentence, and what came after is lost"
                ) as raised:
        lesson.check_summary(reply)
    said = str(raised.value)
    pattern, wrong = WHAT_IT_WAS["cut_off"][0], WHAT_IT_WAS_NOT["cut_off"]
    assert re.search(pattern, said) and not re.search(wrong[0], said), (
        "the BadSummary for a summary the server cut off should say so (the words "
        f"matching {pattern!r}), and tell of nothing it did not send ({wrong[1]}); "
        f"it says {said!r}")
    # Cut where a sentence ends: it still reads as whole, and is as cut as the rest
    at_a_full_stop = CUT_TEXT[:CUT_TEXT.index(".") + 1]
    with raises(lesson.BadSummary, "check_summary() took, as a summary, a reply the "
                "server cut off at its length limit (finish_reason 'length') right "
                f"after a full stop ({at_a_full_stop!r}): only the server knows that "
                "it stopped there, whatever the text's last character"):
        lesson.check_summary({**reply, "content": at_a_full_stop})
    for ended in ("stop", None):
        whole = {**reply, "finish_reason": ended}
        try:
            got = lesson.check_summary(whole)
        except lesson.BadSummary as error:
            pytest.fail(f"a summary the model ended itself (finish_reason {ended!r}) "
                        f"was refused: {error}. Only the server's length limit "
                        "says that a text was cut off", pytrace=False)
        assert got == CUT_TEXT, (
            f"a summary the model ended (finish_reason {ended!r}) should be returned "
            f"as it is; got {got!r}")
    # A reasoning model's summary, after its thinking, cut off: as cut as a plain one
    after_thought = as_asked(lesson, raw(
        {"role": "assistant", "content": f"<think>{THOUGHT}</think>\n\n{CUT_TEXT}"},
        finish_reason="length"))
    with raises(lesson.BadSummary, "check_summary() took, as a summary, a summary "
                "after a think block that the server cut off at its length limit "
                f"(finish_reason 'length'): {CUT_TEXT[-40:]!r} ends mid-sentence; a "
                "summary after thinking is cut off as surely as a plain one"):
        lesson.check_summary(after_thought)
    # Thinking the server cut off at its limit: no summary at all, not a cut one
    thinking = as_asked(lesson, raw({"role": "assistant",
                                     "content": f"<think>\n{THOUGHT}"},
                                    finish_reason="length"))
    with raises(lesson.BadSummary, "check_summary() took, as a summary, a reply that "
                "is only a think block the server cut off at its length limit"
                ) as raised:
        lesson.check_summary(thinking)
    said = str(raised.value)
    assert re.search(THINKING, said), (
        "the BadSummary for a reply that is only thinking, cut off by the server at "
        "its length limit, should say that it was thinking (a think block): it held "
        f"no summary, cut off or whole; it says {said!r}")
    assert re.search(CUT_OFF + "|" + WHAT_IT_WAS["cut_off"][0][4:], said), (
        "the BadSummary for a reply that is only thinking, cut off by the server at "
        "its length limit, should say that its thinking was cut off (or never ends): "
        "asked again, the model learns to think for less, which a reply that ended "
        f"its thinking would not teach it; it says {said!r}")
    # Thinking ended, then the limit; and no text at all: neither is a cut summary
    for content, pattern, what in (
            (f"<think>\n{THOUGHT}\n</think>\n", THINKING, "only a think block, ended"),
            ("", NO_TEXT, "no text")):
        reply = as_asked(lesson, raw({"role": "assistant", "content": content},
                                     finish_reason="length"))
        with raises(lesson.BadSummary, f"check_summary() took, as a summary, a reply "
                    f"of {what} that the server ended at its length limit"
                    ) as raised:
            lesson.check_summary(reply)
        said = str(raised.value)
        assert re.search(pattern, said), (
            f"the BadSummary for a reply of {what}, which the server ended at its "
            f"length limit, should say what it was ({SAYS[pattern]}), whatever its "
            f"finish reason: it held no summary, cut off or whole; it says {said!r}")


@pytest.mark.task("08.4")
def test_summarise_alone_tells_two_refused_replies_in_the_order_they_came(lesson):
    """summarise() alone, with no budget: the model first calls a tool, then, asked
    again, sends no text. The BadSummary tells both, the first reply first: the user
    reads what the model sent, then what it sent once told what was wrong."""
    agent, model, log = open_agent(lesson, None, budget=None, summarise=summaries(
        NO_SUMMARY["tool_call"], NO_SUMMARY["empty"]))
    agent.messages = conversation(6)
    with log:
        with raises(lesson.BadSummary, "summarise() returned a summary after a reply "
                    "that called a tool and one with no text") as raised:
            agent.summarise(agent.messages[:4], 4)
    message = str(raised.value)
    first, second = (what_check_summary_says(lesson, key)
                     for key in ("tool_call", "empty"))
    assert first in message and second in message and (
        message.find(first) < message.find(second)), (
        f"the error should tell the two replies in the order the model sent them: "
        f"first {first!r} (a call), then {second!r} (no text); it says {message!r}")
    assert not PYTHON_REPR.search(message), (
        "the error should tell the user what the model sent in plain words; it quotes "
        f"a Python exception as Python shows it ({PYTHON_REPR.search(message)[0]!r}"
        f"...): it says {message!r}")


@pytest.mark.task("08.4")
def test_summarise_alone_tells_two_summaries_too_long_each_by_its_length(lesson):
    """summarise() alone, with a budget: the model sends a summary far too long, then,
    asked again, a shorter one still too long. Both were refused for their length,
    but not for the same length: the BadSummary gives each as check_fits (given) said
    of it, the first first, so the user sees how near the model came (and how large a
    budget would have taken it); 'the same' is true only of the same words."""
    first, second = long_reply(2600), long_reply(2000)
    agent, model, log = open_agent(lesson, None, summarise=summaries(first, second))
    agent.messages = conversation(6)
    said = []
    for reply in (first, second):
        with raises(lesson.BadSummary, "check_fits() took a summary of "
                    f"{len(reply.content)} characters for one that fits"
                    ) as raised:
            agent.check_fits(reply.content.strip(), 4)
        said.append(str(raised.value))
    with log:
        with raises(lesson.BadSummary, "summarise() returned a summary after two "
                    "replies too long for the budget") as raised:
            agent.summarise(agent.messages[:4], 4)
    message = str(raised.value)
    assert said[0] in message and said[1] in message and (
        message.find(said[0]) < message.find(said[1])), (
        "the model sent a summary too long, then a shorter one still too long: the "
        f"error should tell each as check_fits said of it, first {said[0]!r}, then "
        f"{said[1]!r} (the lengths differ, so the second is not 'the same'); it says "
        f"{message!r}")

    # Two summaries one byte apart: the same estimate of their own, but the request the
    # second would begin needs one token more. Their words differ only in that size.
    def words(text):
        try:
            agent.check_fits(text, 4)
        except lesson.BadSummary as error:
            return str(error)
        return None
    pair = next(((a, b) for a, b in (("x" * n, "x" * (n + 1))
                                     for n in range(8000, 8008))
                 if lesson.estimate_tokens(a) == lesson.estimate_tokens(b)
                 and None is not words(a) != words(b) is not None), None)
    if pair is None:
        return      # no such pair with this agent's sizes: nothing more to see
    said = [words(text) for text in pair]
    agent, model, log = open_agent(lesson, None,
                                   summarise=summaries(*(say(text) for text in pair)))
    agent.messages = conversation(6)
    with log:
        with raises(lesson.BadSummary, "summarise() returned a summary after two "
                    "replies too long for the budget") as raised:
            agent.summarise(agent.messages[:4], 4)
    message = str(raised.value)
    assert said[1] in message, (
        "the model sent two summaries too long, one byte apart: check_fits said of "
        f"the first {said[0]!r} and of the second {said[1]!r}, which differ (the "
        "request the second begins needs one token more), so the second is not 'the "
        f"same' and the error should tell it as check_fits said it; it says "
        f"{message!r}")


@pytest.mark.task("08.4")
def test_check_summary_alone_leaves_the_reply_as_it_came(lesson):
    """check_summary() only reads the reply it is given: the caller's reply (which an
    application may log, or check again) keeps every field, the server's finish reason
    too, and the same reply checked twice gets the same verdict."""
    reply = as_asked(lesson, CUT_OFF_SUMMARY)
    before = json.loads(json.dumps(reply))
    for attempt in ("first", "second"):
        with raises(lesson.BadSummary, f"check_summary() took, at its {attempt} "
                    "check of one reply, a summary the server cut off at its length "
                    "limit (finish_reason 'length'): the same reply must get the same "
                    "verdict however often it is checked"):
            lesson.check_summary(reply)
    assert reply == before, (
        "check_summary() changed the reply it was given (the caller's own dict): it "
        f"was {before!r} and is now {reply!r}; a check only reads what it judges")


@pytest.mark.task("08.4")
def test_check_summary_alone_names_every_call_of_a_reply(lesson):
    """check_summary() alone, on a reply that calls two tools: the BadSummary names
    both, since the user and the model asked again are told what was sent."""
    calls = [{"id": f"call_{n}", "type": "function",
              "function": {"name": name, "arguments": arguments}}
             for n, (name, arguments) in enumerate(
                 [("talk_to", '{"npc": "elder"}'), ("buy", '{"item": "rope"}')])]
    reply = lesson.normalize_reply({"role": "assistant", "content": None,
                                    "tool_calls": calls}, [])
    with raises(lesson.BadSummary, "check_summary() took a reply of two tool calls "
                "for a summary") as raised:
        lesson.check_summary(reply)
    said = str(raised.value)
    assert "talk_to" in said and "buy" in said, (
        "a reply that calls talk_to and buy is no summary, and its BadSummary should "
        f"name both calls, not only the first; it says {said!r}")
    written = json.dumps([{"name": "talk_to", "arguments": {"npc": "elder"}},
                          {"name": "buy", "arguments": {"item": "rope"}}])
    reply = lesson.normalize_reply({"role": "assistant", "content": written}, [])
    with raises(lesson.BadSummary, "check_summary() took two calls written as JSON "
                f"text ({written}) for a summary") as raised:
        lesson.check_summary(reply)
    said = str(raised.value)
    assert "talk_to" in said and "buy" in said, (
        "a reply whose text is two calls written as JSON, to talk_to and buy, is no "
        f"summary, and its BadSummary should name both, not only the first; it says "
        f"{said!r}")


def as_asked(lesson, step):
    """The reply ask_for_summary (given) returns for `step`, as check_summary is given
    it: normalized, with the server's finish_reason beside it."""
    agent, model, log = open_agent(lesson, None, budget=None, summarise=summaries(step))
    with log:
        return agent.ask_for_summary(lesson.SUMMARY_PROMPT, "[user] Day 1: what now?")


def what_check_summary_says(lesson, key):
    """The BadSummary message check_summary gives for NO_SUMMARY[key] (None for the
    summary too long, which check_summary takes: check_fits refuses it)."""
    if key == "too_long":
        return None
    reply = as_asked(lesson, NO_SUMMARY[key])
    try:
        lesson.check_summary(reply)
    except lesson.BadSummary as error:
        return str(error)
    pytest.fail(f"check_summary() took a reply that is no summary ({key}) for a "
                "summary", pytrace=False)


def summary_instruction(request):
    return next(m["content"] for m in request["messages"] if m["role"] == "system")


@pytest.mark.task("08.4")
def test_the_summary_request_says_how_long_the_summary_may_be(lesson):
    """A model told nothing about length writes a page where a paragraph fits: the
    summary request's instruction gives the room the budget leaves beside the turn the
    request keeps (summary_prompt and summary_room, both given, make and measure it).
    With no budget, no room: the instruction sets no length."""
    agent, model, log = open_agent(lesson, None)
    agent.messages = conversation(9)
    with log:
        agent.summarise(agent.messages[:8], 8)
    # The request would keep the newest message alone
    room = agent.summary_room(8)
    expected = lesson.summary_prompt(room)
    told = [m.get("content") for m in model.summary_requests[0]["messages"]
            if m.get("role") == "system"]
    assert told == [expected], (
        "the summary request's instruction should be the one summary_prompt makes "
        f"with the room the budget leaves beside the turn kept (about {room} tokens): "
        f"{expected!r}; it was {told!r}")
    # With no budget (a compaction asked for by hand), nothing limits the summary:
    # summary_room gives None, and the instruction gives no length
    agent, model, log = open_agent(lesson, None, budget=None)
    agent.messages = conversation(9)
    with log:
        agent.summarise(agent.messages[:8], 8)
    expected = lesson.summary_prompt(None)
    told = [m.get("content") for m in model.summary_requests[0]["messages"]
            if m.get("role") == "system"]
    assert told == [expected], (
        "with no budget, nothing limits how long the summary may be (summary_room "
        "gives None): the instruction should be the one summary_prompt makes with no "
        f"room, {expected!r}, with no length in it; it was {told!r}")


@pytest.mark.task("08.4")
def test_a_summary_after_long_thinking_is_judged_by_what_is_recorded(lesson,
                                                                     sessions):
    """A reasoning model thinks at length, then gives a short summary that fits the
    budget beside the turn in progress: the user waits for every model call, and a
    reply that gives a summary to record needs no second request."""
    musing = "The elder, the guard, the rope: which of them matters most? " * 60
    reply = f"<think>\n{musing}</think>\n\n{ANSWER_AFTER_THOUGHT}"
    agent, model, log = open_agent(lesson, sessions, summarise=summaries(reply))
    path = sessions / "quest-1.jsonl"
    with log:
        play_until_compacted(lesson, agent, model)
    recorded = [marker["summary"] for marker in compactions_in(path)]
    assert recorded == [ANSWER_AFTER_THOUGHT] and len(model.summary_requests) == 1, (
        f"the first reply thought for about {lesson.estimate_tokens(musing)} tokens, "
        "far more than the room, then gave a short summary, which fits the budget "
        "beside the turn in progress: it should be recorded at once. The model was "
        f"asked {len(model.summary_requests)} time(s), the user waiting for each, and "
        f"the log records {[text[:60] for text in recorded]}")


@pytest.mark.key
@pytest.mark.task("08.4")
@pytest.mark.parametrize("odd", list(NO_SUMMARY))
def test_a_reply_that_is_no_summary_is_never_recorded_and_is_asked_for_once_more(
        lesson, sessions, odd):
    """A first reply to the summary request that gives no summary (each kind the
    tests send) is never recorded: the model is asked once more, with an instruction
    that says what was wrong, and the second reply's summary is the one the marker and
    the requests hold."""
    agent, model, log = open_agent(lesson, sessions, summarise=summaries(
        NO_SUMMARY[odd], then=numbered_summaries()))
    path = sessions / "quest-1.jsonl"
    with log:
        try:
            play_until_compacted(lesson, agent, model, compactions=2)
        except lesson.BadSummary as error:
            pytest.fail(f"the model's first reply to the summary request was no "
                        f"summary ({odd}) and its second a good one, yet the "
                        f"compaction failed after {len(model.summary_requests)} "
                        f"summary request(s): {error}", pytrace=False)
    first, second = model.summary_requests[:2]
    length = summary_instruction(first).replace(lesson.SUMMARY_PROMPT, "").strip()
    assert length in summary_instruction(second), (
        f"the second summary request should still say how long the summary may be "
        f"({length!r}, as the first did): a model told nothing about length writes a "
        f"page where a paragraph fits. It asked {summary_instruction(second)!r}")
    said = [[m.get("content") for m in request["messages"] if m.get("role") != "system"]
            for request in (first, second)]
    assert said[0] == said[1], (
        "the second summary request should send the same conversation as the first "
        "(the previous summary and the messages to summarise); only the instruction "
        f"says more. The first sent {str(said[0])[:120]!r}, the second "
        f"{str(said[1])[:120]!r}")
    assert not is_retried_summary(first) and is_retried_summary(second), (
        "the second summary request should say why the first reply could not be used "
        "(and the first say nothing of a refusal): asked the same way, a model tends "
        f"to send the same reply. The second asked {summary_instruction(second)!r}")
    told = summary_instruction(second)
    assert not PYTHON_REPR.search(told), (
        f"the second summary request should tell the model what its first reply "
        f"({odd}) was in plain words; it quotes a Python exception as Python shows it "
        f"({PYTHON_REPR.search(told)[0]!r}...), which no model reads as a reason: "
        f"{told!r}")
    for fixed in (lesson.SUMMARY_PROMPT, *lesson.FIRMER.split("{problem}")):
        told = told.replace(fixed, " ")
    for pattern in WHAT_IT_WAS[odd]:
        assert re.search(pattern, told), (
            f"the second summary request should tell the model what its first reply "
            f"({odd}) was: {SAYS[pattern]} (the words matching {pattern!r}); beside "
            f"the instruction's fixed words it said {told.strip()!r}")
    summaries_recorded = [marker["summary"] for marker in compactions_in(path)]
    assert summaries_recorded == ["summary #1"], (
        f"the first reply ({odd}) is no summary and must never be recorded; the marker "
        "should hold the second reply's summary, 'summary #1'. The log's compaction "
        f"markers hold {[text[:80] for text in summaries_recorded]}")
    sent = turn_requests(model)[-1]["messages"]
    summary = summary_message(lesson, "summary #1")
    assert sent[1] == summary, (
        "the request after the compaction should carry the second reply's summary, "
        f"'summary #1', where the view puts a summary; it began {shape(sent[:2])} "
        "(role, start of the content)")
    for number, request in enumerate(turn_requests(model), start=1):
        assert size_of(lesson, request) <= BUDGET, (
            f"request {number} was sent over the budget of {BUDGET} (about "
            f"{size_of(lesson, request)} tokens), after a first reply to the summary "
            f"request that was no summary ({odd})")


@pytest.mark.task("08.4")
def test_a_later_compaction_asks_plainly_after_an_earlier_reply_was_refused(lesson):
    """The model's first reply to a summary request was no summary, its second a good
    one. The next compaction asks afresh: its first summary request says nothing of a
    refusal, for the model has sent nothing wrong in it."""
    agent, model, log = open_agent(lesson, None, summarise=summaries(
        NO_SUMMARY["empty"], then=numbered_summaries()))
    with log:
        play_until_compacted(lesson, agent, model, compactions=3)
    third = model.summary_requests[2]
    assert not is_retried_summary(third), (
        "the second compaction's first summary request told the model its last reply "
        "could not be used: that reply belonged to the first compaction, which a good "
        "summary then ended. A new summary request says nothing of a refusal until "
        f"its own reply is refused. It asked {summary_instruction(third)!r}")


@pytest.mark.task("08.4")
def test_a_think_block_before_the_summary_is_left_out_of_what_is_recorded(lesson,
                                                                         sessions):
    """A reasoning model's reply: a <think> block, then a real summary. What the
    marker records, every later request and every resume tell the model in place of
    the earlier turns: only an account of the conversation, as the next reader of the
    request should read it, is recorded; and a reply that gives one costs no second
    request."""
    agent, model, log = open_agent(lesson, sessions, summarise=summaries(
        ODD_REPLIES["think_then_text"], then=numbered_summaries()))
    with log:
        play_until_compacted(lesson, agent, model)
        model.add(*day(99)[1])
        agent.run(day(99)[0])
    path = sessions / "quest-1.jsonl"
    recorded = [marker["summary"] for marker in compactions_in(path)]
    assert recorded == [ANSWER_AFTER_THOUGHT], (
        f"the marker records {[text[:80] for text in recorded]}, which every later "
        "request would tell the model in place of the earlier turns; the reply was "
        f"thinking, then the account {ANSWER_AFTER_THOUGHT!r}")
    assert len(model.summary_requests) == 1, (
        "the reply gave a summary after its thinking, yet the model was asked "
        f"{len(model.summary_requests)} times: the user waits for every model call, "
        "and a reply that gives a summary to record needs no second request")
    sent = turn_requests(model)[-1]["messages"][1]["content"]
    assert "<think>" not in sent and "</think>" not in sent, (
        f"the request carried the model's thinking with the summary: {sent[:120]!r}")


@pytest.mark.key
@pytest.mark.task("08.4")
@pytest.mark.task("08.3")
@pytest.mark.parametrize("replies", [
    ("tool_call", "call_as_json"), ("tool_call", "empty"),
    ("unfinished_think", "empty"), ("too_long", "too_long"), ("cut_off", "cut_off"),
], ids="-then-".join)
def test_two_replies_that_are_no_summary_stop_the_turn_and_the_session_resumes(
        lesson, sessions, replies):
    """When the second reply is no summary either, the turn stops with BadSummary
    saying what the model sent (it blames the summary, never the turn); nothing is
    recorded, no request goes out over the budget, and the session resumes: a new agent
    on it compacts and answers."""
    agent, model, log = open_agent(lesson, sessions, summarise=summaries(
        *(NO_SUMMARY[key] for key in replies), then=numbered_summaries()))
    path = sessions / "quest-1.jsonl"
    with log:
        with raises(lesson.BadSummary, f"two replies to the summary request "
                    f"({replies[0]}, then {replies[1]}) gave no summary, and the turn "
                    "went on") as raised:
            play_until_compacted(lesson, agent, model)
        assert len(model.summary_requests) == 2, (
            f"the model was asked {len(model.summary_requests)} times for this "
            "summary: once, then once more, then stop")
        everything = list(agent.messages)
    message = str(raised.value)
    for which, key in zip(("first", "second"), replies):
        said = what_check_summary_says(lesson, key)
        if said is None:        # too long: check_fits (given) says so
            assert re.search(r"(?i)too long", message), (
                f"the error for two replies that are no summary ({replies[0]}, then "
                f"{replies[1]}) should say that the {which} was too long, as "
                f"check_fits said of it; it says {message!r}")
        elif which == "first" or said != what_check_summary_says(lesson, replies[0]):
            assert said in message, (
                f"the error for two replies that are no summary ({replies[0]}, then "
                f"{replies[1]}) should say what each reply was, in the words "
                f"check_summary gave for it (the task quotes them to the user in this "
                f"error): for the {which} ({key}), {said!r}; it says {message!r}")
    assert "turn alone" not in message, (
        f"the summary is what failed, not the turn; the error says {message!r}")
    assert not compactions_in(path), (
        "a reply that is no summary must never be recorded: the log has a compaction "
        f"marker holding {compactions_in(path)[0]['summary'][:80]!r}")
    assert messages_in(path) == everything, (
        "the log must keep every message, the user message of the turn that stopped "
        "too")
    for number, request in enumerate(turn_requests(model), start=1):
        assert size_of(lesson, request) <= BUDGET, (
            f"request {number} was sent over the budget of {BUDGET}")

    agent, model, log = open_agent(lesson, sessions, [say("We go on.")])
    with log:
        assert agent.messages == everything, (
            "the resumed agent should read every message")
        agent.run("Go on.")
    assert len(compactions_in(path)) == 1 and compactions_in(path)[0]["summary"] in \
        text_of(model.requests[-1]["messages"][1].get("content")), (
        "resumed with a model that summarises, the session should compact and go on")


# A summary request that fails: an error from the server, or a dropped connection
FAILED_REQUESTS = {"server_error": Fail(500, "The summary server is overloaded."),
                   "dropped": Disconnect()}


@pytest.mark.task("08.4")
@pytest.mark.task("08.3")
@pytest.mark.parametrize("failure", list(FAILED_REQUESTS))
def test_a_summary_request_that_fails_reaches_the_caller_as_it_is(lesson, sessions,
                                                                  failure):
    """The summary request itself fails (a server's error, a dropped connection): the
    model sent nothing to judge. summarise() lets that error reach its caller, as a
    turn's own request does, without asking again, and no BadSummary tells the user
    that the model answered; the turn ends with it, nothing is recorded, and the
    session resumes."""
    # summarise() alone (task 08.4): the first request fails, or the second after a
    # first reply that was no summary; the server answered nothing to judge either way
    for before, setting in (((), f"the summary request failed ({failure})"), (
            (NO_SUMMARY["empty"],), f"the first reply to the summary request was "
            f"empty, and the second request failed ({failure})")):
        agent, model, log = open_agent(lesson, None, budget=None, summarise=summaries(
            *before, FAILED_REQUESTS[failure], then=numbered_summaries()))
        agent.messages = conversation(6)
        with log:
            try:
                got = agent.summarise(agent.messages[:4], 4)
            except openai.APIError:
                got = None
            except NotImplementedError:
                raise
            except Exception as error:
                fail_in("08.4", f"{setting}: the server sent no reply, yet "
                        f"summarise() raised {type(error).__name__}: {error} (a "
                        "BadSummary tells the user what the model sent). The "
                        "request's own error should reach the caller as it is, as a "
                        "turn's request's does")
        if got is not None or len(model.summary_requests) != len(before) + 1:
            fail_in("08.4", f"{setting}: summarise() should let that error reach its "
                    f"caller, having asked {len(before) + 1} time(s), no more; it "
                    f"asked {len(model.summary_requests)} time(s) and returned "
                    f"{got!r}, as if the failure were a reply to refuse")
    # The agent's compaction (task 08.3): the turn ends with that error
    agent, model, log = open_agent(lesson, sessions, summarise=summaries(
        FAILED_REQUESTS[failure], then=numbered_summaries()))
    path = sessions / "quest-1.jsonl"
    with log:
        try:
            play_until_compacted(lesson, agent, model)
        except openai.APIError:
            pass
        except NotImplementedError:
            raise
        except Exception as error:
            fail_in("08.3", f"the summary request failed ({failure}) in a compaction "
                    f"a turn needed; the turn ended with {type(error).__name__}: "
                    f"{error}. The request's own error should end it as it is: the "
                    "turn did fit, once summarised, and the model answered nothing")
        else:
            fail_in("08.3", f"the summary request failed ({failure}) in a compaction "
                    "a turn needed, and the turn went on as if nothing had failed")
        everything = list(agent.messages)
    assert not compactions_in(path) and messages_in(path) == everything, (
        f"a summary request that failed ({failure}) gave no summary: the log should "
        "record no compaction and keep every message; it records "
        f"{len(compactions_in(path))} compaction(s)")
    agent, model, log = open_agent(lesson, sessions, [say("We go on.")])
    with log:
        agent.run("Go on.")
    assert len(compactions_in(path)) == 1, (
        "resumed with a model that summarises, the session should compact and go on")


@pytest.mark.task("08.3")
@pytest.mark.parametrize("then", ["next request", "compact by hand"])
def test_after_a_summary_request_that_failed_the_same_agent_asks_again(lesson, then):
    """The summary request of a compaction a turn needed fails (the server's error):
    nothing was compacted, and nothing stands in the way of the next try. The same
    agent, in the same process, asks for a summary again at its next request over the
    budget, or when the user asks for one by hand (the chat's /compact), as it would
    have the first time; and the turn goes on within the budget."""
    agent, model, log = open_agent(lesson, None, summarise=summaries(
        FAILED_REQUESTS["server_error"], then=numbered_summaries()))
    with log:
        with raises(openai.APIError, "the summary request of a compaction a turn "
                    "needed failed (HTTP 500), and the turn went on as if nothing had "
                    "failed"):
            play_until_compacted(lesson, agent, model)
        asked = len(model.summary_requests)
        if then == "compact by hand":
            done = agent.compact()
            if done is not True or len(model.summary_requests) != asked + 1:
                fail_in("08.3", "right after a summary request that failed, compact() "
                        "by hand (the chat's /compact, to ask again) should ask the "
                        f"model once more and return True; it returned {done!r} after "
                        f"{len(model.summary_requests) - asked} more summary "
                        "request(s)")
        else:
            try:
                agent.run("Go on.")
            except lesson.ContextOverflow as error:
                fail_in("08.3", "after a summary request that failed, the same agent's "
                        "next request over the budget should ask for a summary again "
                        f"(the summary failed, not the turn); it was refused: {error}")
            if len(model.summary_requests) != asked + 1:
                fail_in("08.3", "after a summary request that failed, the same agent's "
                        "next request over the budget should ask for a summary once "
                        f"more; it asked {len(model.summary_requests) - asked} time(s)")
    for number, request in enumerate(turn_requests(model), start=1):
        assert size_of(lesson, request) <= BUDGET, (
            f"request {number} was sent over the budget of {BUDGET}")


@pytest.mark.task("08.3")
def test_a_history_many_times_the_budget_is_compacted_not_refused(lesson):
    """Day 100: the history the agent holds is many times the budget, and the turn in
    progress is short. One compaction brings the request within the budget: the size
    of what came before is what a summary shrinks, never a reason to refuse, and the
    summary request carries all of it, every day from the first."""
    agent, model, log = open_agent(lesson, None, [say("We go on to the cave.")])
    history = []
    for n in range(1, 100):
        answer = f"On day {n} we rest by the mill."
        history += [{"role": "user", "content": day(n)[0]},
                    {"role": "assistant", "content": answer}]
    agent.messages = history
    with log:
        try:
            agent.run(day(100)[0])
        except lesson.ContextOverflow as error:
            size = size_of(lesson, {"messages": history})
            pytest.fail(f"99 days of history, about {size} tokens with a budget of "
                        f"{BUDGET}, and a short new day: the "
                        "request was refused, although a summary of the 99 days leaves "
                        f"it within the budget ({error})", pytrace=False)
    sent = turn_requests(model)
    assert len(model.summary_requests) == 1 and sent and size_of(
        lesson, sent[-1]) <= BUDGET, (
        "99 days of history and a short new day: one summary should bring the request "
        f"within the budget of {BUDGET}; the model was asked for "
        f"{len(model.summary_requests)} summary(ies) and the request sent needs "
        f"{size_of(lesson, sent[-1]) if sent else 'nothing (none was sent)'}")
    asked = " ".join(text_of(m.get("content"))
                     for m in model.summary_requests[0]["messages"]
                     if m.get("role") == "user")
    missing = [n for n in range(1, 100) if f"Day {n}:" not in asked]
    assert not missing, (
        f"the summary stands for every message before the boundary, all 99 days, "
        f"and is all the model will know of them; the summary request left out "
        f"{len(missing)} day(s), days {missing[0]} to {missing[-1]} among them, which "
        "no later request will carry")


@pytest.mark.task("08.3")
def test_a_turn_that_alone_fills_the_budget_asks_the_model_for_no_summary(lesson):
    """When the turn in progress alone leaves no room for a summary, no summary can
    make the request fit: ContextOverflow at once, without a summary request."""
    agent, model, log = open_agent(lesson, None, day(1)[1] + day(2)[1])
    with log:
        agent.run(day(1)[0])
        agent.run(day(2)[0])
        with raises(lesson.ContextOverflow, "a turn larger than the budget by itself "
                    "was not refused") as raised:
            agent.run("A very long letter from the mayor. " * 60)
        assert_overflow_says_enough(str(raised.value), BUDGET,
                                    where=" (a turn that alone fills the budget)")
    assert not model.summary_requests, (
        f"the model was asked {len(model.summary_requests)} time(s) for a summary, "
        "although the turn in progress alone is over the budget: no summary could have "
        "made the request fit, and the user waited for the call")
    # The same after an earlier compaction: a summary already standing changes
    # nothing of what the newest turn alone costs, so a second one cannot help either
    agent, model, log = open_agent(lesson, None)
    letter = {"role": "user", "content": "A very long letter from the mayor. " * 60}
    agent.messages = [*conversation(8), letter]
    agent.compaction = lesson.Compaction("The first two turns.", 4)
    with log:
        try:
            done = agent.compact()
        except lesson.BadSummary as error:
            done = error
        with raises(lesson.ContextOverflow, "a turn larger than the budget by itself, "
                    "after an earlier compaction, was not refused"):
            agent.request_messages()
    assert done is False and not model.summary_requests, (
        "an agent already compacted once (its view starting at place 4) whose newest "
        "turn alone is over the budget: no second summary could make the request fit, "
        "so compact() should return False and ask nothing; it returned "
        f"{done!r} after {len(model.summary_requests)} summary request(s), and the "
        "user waited for each")


@pytest.mark.task("08.1")
@pytest.mark.task("08.4")
def test_the_log_refuses_to_record_a_summary_no_check_has_read(lesson, sessions):
    """The store records a summary only as a check of it returns it (compaction_marker,
    given, through reply_answer, task 08.4): a text the check would refuse, or would
    return otherwise, is refused, and nothing is written. The database store of lesson
    11 makes its marker the same way."""
    path = sessions / "quest-1.jsonl"
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in conversation(4):
            log.append(message)
        before = path.read_bytes()
        for summary in ("", "  ", "<think>The elder", "<think>a</think>The elder.",
                        CALL_TEXT, " The elder. ", None, 42,
                        [{"type": "text", "text": "The elder."}]):
            with raises(ValueError, f"the log recorded {summary!r} as a summary"):
                log.compact(summary, keep=2)
            assert path.read_bytes() == before, (
                f"a refused compact({summary!r}) must not write to the log")
        assert log.compact("The elder warned us.", keep=2) == 2


@pytest.mark.task("08.3")
def test_a_turn_that_leaves_exactly_no_room_asks_for_no_summary(lesson):
    """When the turn in progress and an empty summary take exactly the whole budget,
    the room left for a summary is 0: no summary can fit, so none is asked for."""
    agent, model, log = open_agent(lesson, None, day(1)[1] + day(2)[1], budget=None)
    newest = "Tell me about the mill by the river."
    with log:
        agent.run(day(1)[0])
        agent.run(day(2)[0])
        empty = {"messages": compacted_view(lesson, "", [{"role": "user",
                                                          "content": newest}]),
                 "tools": Town().schemas}
        agent.budget = size_of(lesson, empty)
        with raises(lesson.ContextOverflow, "the turn in progress leaves no room for "
                    "a summary, and the request went out") as raised:
            agent.run(newest)
        assert_overflow_says_enough(str(raised.value), agent.budget,
                                    where=" (a turn that leaves no room)")
    assert not model.summary_requests, (
        "with the turn in progress and an empty summary exactly at the budget, the "
        "room for a summary is 0, and no summary can fit: the model should not be "
        f"asked for one; it was asked {len(model.summary_requests)} time(s)")
    done = agent.compact()
    assert done is False, (
        "compact() with no room for a summary changes nothing and says so: it should "
        f"return False, it returned {done!r}")


@pytest.mark.task("08.3")
def test_a_turn_that_leaves_one_token_of_room_asks_for_a_summary(lesson):
    """One token more in the budget than the turn and an empty summary need: the room
    for a summary is 1, a summary of a word could fit, so the model is asked (its
    longer reply is then refused as too long: BadSummary, not ContextOverflow)."""
    agent, model, log = open_agent(lesson, None, day(1)[1] + day(2)[1], budget=None)
    newest = "Tell me about the mill by the river."
    with log:
        agent.run(day(1)[0])
        agent.run(day(2)[0])
        empty = {"messages": compacted_view(lesson, "", [{"role": "user",
                                                          "content": newest}]),
                 "tools": Town().schemas}
        agent.budget = size_of(lesson, empty) + 1
        try:
            agent.run(newest)
        except (lesson.BadSummary, lesson.ContextOverflow):
            pass
    assert model.summary_requests, (
        "with one token of room beside the turn in progress, a summary could still "
        "fit: the model should be asked for one (only a room of 0 or less asks for "
        "none); it was never asked")


@pytest.mark.task("08.3")
@pytest.mark.task("08.1")
def test_a_compaction_the_log_could_not_record_is_not_used(lesson, sessions,
                                                          monkeypatch):
    """Writing the marker fails (a full disk): the compaction did not happen, in the
    log or in the agent. The next turn compacts again, asking the model for a summary of
    everything before its own boundary (the turn the failure stopped included), and
    records it, so that a resume sends what this process sends."""
    agent, model, log = open_agent(lesson, sessions)
    path = sessions / "quest-1.jsonl"
    with log:
        with compaction_markers_refused(monkeypatch):
            try:
                play_until_compacted(lesson, agent, model)
            except lesson.ContextOverflow as error:
                fail_in("08.3", "writing the compaction's marker failed (a full disk), "
                        f"and the turn ended with ContextOverflow ({error}): the "
                        "request fitted once summarised, and the user is told that the "
                        "turn is too large, never that the disk refused. The write's "
                        "error should reach the caller as it came")
        assert not compactions_in(path), "the test's own set-up: no marker was written"
        stopped = text_of(agent.messages[-1].get("content"))
        asked_before = len(model.summary_requests)
        model.add(*day(98)[1])
        agent.run(day(98)[0])
        sent = turn_requests(model)[-1]["messages"]
    if len(model.summary_requests) == asked_before:
        fail_in("08.3", "the first compaction could not be recorded; the next turn, "
                "over the budget, compacted again without asking the model for a "
                "summary: it recorded the summary made before, which does not tell of "
                f"what came since ({stopped!r}, the turn the failure stopped), so the "
                "model is never told of it again. A compaction the log could not "
                "record is no compaction: the next one asks for its own summary")
    asked = " ".join(text_of(m.get("content"))
                     for m in model.summary_requests[-1]["messages"]
                     if m.get("role") == "user")
    if stopped not in asked:
        fail_in("08.3", "the compaction after the one the log could not record should "
                f"summarise every message before its boundary, {stopped!r} among them; "
                f"its summary request carried {asked[-160:]!r}")
    assert compactions_in(path), (
        "the first compaction could not be recorded; the agent then sent "
        f"{[m.get('content', '')[:30] for m in sent]} without ever recording a "
        "compaction: it went on with a summary the log does not hold, and a resume "
        "would send another request")
    assert sent[1] == summary_message(lesson, compactions_in(path)[-1]["summary"]), (
        "the request should start from the summary the log recorded")


@pytest.mark.task("08.3")
@pytest.mark.task("08.1")
def test_a_compaction_whose_log_was_removed_is_none_in_the_agent_either(lesson,
                                                                       sessions):
    """The log's file is removed behind its writer's back (a cleanup, another
    program), then the user compacts by hand (the chat's /compact): the log cannot
    record the compaction (its writer refuses to write where no reader would find it),
    so there is none, in the agent either, and the writer's error reaches the caller as
    it came. A compaction the agent kept with no marker would make, in this process,
    requests that no resume of the log makes."""
    agent, model, log = open_agent(lesson, sessions,
                                   day(1)[1] + day(2)[1] + day(3)[1], budget=None)
    path = sessions / "quest-1.jsonl"
    with log:
        for n in (1, 2, 3):
            agent.run(day(n)[0])
        before = agent.view()
        os.remove(path)     # the writer's own file, removed behind its back
        try:
            compacted = agent.compact()
        except OSError:
            compacted = None
        assert compacted is None, (
            "the session's log was removed behind its writer's back, then compact() "
            f"by hand returned {compacted!r}: the log could not record the "
            "compaction, and its writer's error (an OSError naming the log) should "
            "reach the caller as it came, not be passed over")
        assert agent.compaction is None and agent.view() == before, (
            "compact() by hand could not record its compaction (the log was removed), "
            f"yet the agent holds {agent.compaction!r} and its next request would be "
            f"{shape(agent.view(), 20)}: a compaction the log could not record is "
            "none, in the agent too, or this process sends what no resume sends")


@pytest.mark.task("08.3")
@pytest.mark.task("08.1")
def test_a_second_compaction_the_log_could_not_record_leaves_the_first(lesson, sessions,
                                                                      monkeypatch):
    """The first compaction is recorded; writing the second one's marker fails (a full
    disk). That failure makes no compaction, and takes none back: the agent still holds
    the first, so the next request compacts again from the first boundary, its summary
    request carrying the first summary and never the days it stands for, and a resume
    sends what this process sends."""
    agent, model, log = open_agent(lesson, sessions)
    path = sessions / "quest-1.jsonl"
    with log:
        play_until_compacted(lesson, agent, model)
        with compaction_markers_refused(monkeypatch):
            play_until_compacted(lesson, agent, model, first_day=100, compactions=2)
        assert len(compactions_in(path)) == 1, (
            "the test's own set-up: the first compaction recorded, the second not")
        model.add(*day(98)[1])
        agent.run(day(98)[0])
        view = agent.view()
    asked = " ".join(text_of(m.get("content"))
                     for m in model.summary_requests[-1]["messages"]
                     if m.get("role") == "user")
    if "summary #1" not in asked or "Day 1:" in asked:
        fail_in("08.3", "the second compaction could not be recorded, and the next "
                "request compacted again: its summary request should carry the first "
                "summary ('summary #1', which the agent still holds: the failure took "
                "no compaction back) and never day 1, which that summary stands for; "
                f"it sent {asked[:160]!r}")
    resumed, _, log = open_agent(lesson, sessions, budget=None)
    with log:
        assert resumed.view() == view, (
            "a resume should send the request this agent sends after the compaction "
            f"it recorded; it sends {shape(resumed.view())}, the agent {shape(view)}")


@pytest.mark.task("08.1")
def test_compactions_leave_no_descriptor_open(lesson, sessions):
    """The log's compact reads the log again, through its writer: two hundred
    compactions, by a writer that stays open and by one closed after each, and a
    hundred refused for a keep the log does not show, leave the process holding no
    more file descriptors than before. (Each one left open would, in a long-lived
    program, end with no descriptor left to open a file.)"""
    path = sessions / "quest-1.jsonl"
    path.write_text(as_log(conversation(6)))
    log = lesson.SessionLog(sessions, "quest-1")
    try:
        log.compact(SUMMARY_ABROAD, keep=2)     # anything opened for good, opened now
    finally:
        log.close()
    before = open_descriptors()
    try:
        for _ in range(100):
            log.compact(SUMMARY_ABROAD, keep=2)
    finally:
        log.close()
    for _ in range(100):
        try:
            log.compact(SUMMARY_ABROAD, keep=2)
        finally:
            log.close()
    after = open_descriptors()
    assert after <= before, (
        f"after 200 compactions the process holds {after - before} more file "
        f"descriptors than before ({before} then {after}): something each compaction "
        "opened is never closed")
    for _ in range(100):    # refused: a keep the log does not show
        try:
            log.compact(SUMMARY_ABROAD, keep=99)
        except ValueError:
            pass
    log.close()
    after = open_descriptors()
    assert after <= before, (
        f"after 100 compactions refused for a keep the log does not show, the process "
        f"holds {after - before} more file descriptors than before ({before} then "
        f"{after}): what a compaction opens to read the log, it closes on every way "
        "out, its refusals included")
    assert len(compactions_in(path)) == 201, (
        f"each compaction is one marker line: 201 compactions, 201 markers; the log "
        f"holds {len(compactions_in(path))}")


@pytest.mark.task("08.1")
@pytest.mark.parametrize("odd", [{"$marker": "bookmark", "name": "before the cave"},
                                 {"$marker": None},
                                 {"$marker": "recap", "summary": "A newer program's.",
                                  "upto": 1}],
                         ids=["a bookmark", "no kind", "a recap with a summary"])
def test_a_marker_of_a_kind_this_code_does_not_know_moves_no_boundary(lesson, sessions,
                                                                       odd):
    """A marker of a kind this code does not know (another program's bookmark), or of
    no kind, is no message: it takes no index. Nor is it a compaction, whatever its
    fields: only a marker of the kind "compaction" records one, and a newer program's
    marker may carry a "summary" and an "upto" of its own. A compaction marker read
    after it is judged by the messages written before it, and one the log's compact
    writes after it counts its "upto" among the messages alone, with some kept or with
    none."""
    said = conversation(4)
    path = sessions / "quest-1.jsonl"
    ahead = [*said[:2], odd, *said[2:],
             {"$marker": "compaction", "summary": "ahead", "upto": 5}]
    found = lesson.parse_log(as_log(ahead).encode(), path).compaction()
    assert found is None, (
        f"messages 0 to 3 with the marker {odd} among them, then a compaction whose "
        "'upto' is 5: only 4 messages were written before it (a marker is no message), "
        "so it names a message never written before it and is no compaction; nor is "
        "a marker of another kind one, whatever fields it carries (the model would be "
        "told its words as the summary of the turns before it). "
        f"compaction() returned {found!r}")
    for keep, upto in ((1, 3), (0, 4)):
        path.write_text(as_log([*said[:2], odd, *said[2:]]))
        with lesson.SessionLog(sessions, "quest-1") as log:
            returned = log.compact(f"Kept {keep}.", keep=keep)
        markers = [marker.get("upto") for marker in compactions_in(path)]
        found = lesson.read_log(path).compaction()
        assert returned == upto and markers == [upto], (
            f"a log of 4 messages with the marker {odd} among them, compacted keeping "
            f"{keep}: the marker is no message, so 'upto' should be {upto}; compact "
            f"returned {returned!r} and the log's markers say {markers}")
        assert found == lesson.Compaction(f"Kept {keep}.", upto), (
            f"read back, that compaction should stand, its boundary at place {upto}; "
            f"the log gives {found!r}")


@pytest.mark.task("08.2")
@pytest.mark.parametrize("boundary", [None, 0, 2, 3])
def test_the_view_sends_the_messages_from_the_boundary_as_they_were_said(lesson,
                                                                         boundary):
    """view() alone: the messages from the boundary on go as they were said, every key
    of them, those this code does not use too (a user's "name", a provider's
    "reasoning" or "refusal", a field another program added), with a compaction or
    without one."""
    said = [{"role": "user", "content": "message 0", "name": "Ana"},
            {"role": "assistant", "content": "message 1", "reasoning": "Think."},
            {"role": "user", "content": "message 2", "name": "Ana",
             "x-origin": {"app": "map", "v": 1.0}},
            {"role": "assistant", "content": "message 3", "refusal": None,
             "reasoning": {"steps": [1, 2.0]}}]
    compaction = None if boundary is None else lesson.Compaction("Before.", boundary)
    agent = agent_without_session(lesson, said, compaction)
    view = agent.view()
    kept = said[boundary or 0:]
    got = view[len(view) - len(kept):]
    assert got == kept, (
        f"with {'no compaction' if boundary is None else f'the boundary at {boundary}'}"
        f", the request should end with the messages from the boundary on as they were "
        f"said, every key kept: {kept}; it ends with {got}")


@pytest.mark.task("08.1")
def test_the_log_compacts_the_file_it_writes_not_whatever_its_name_points_to(
        lesson, sessions):
    """The log's compact counts `keep` among the messages of the log its writer
    writes: if the name now points to another file (another program replaced it), the
    marker still names the writer's own message, and lands in the writer's log."""
    said = conversation(6)
    path = sessions / "quest-1.jsonl"
    path.write_text(as_log(said))
    decoy = sessions / "decoy.jsonl"
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": "message 6"})    # its writer now
        decoy.write_text(as_log(said[:2]))
        os.link(path, sessions / "kept-aside")  # the writer's log, under another name
        os.replace(decoy, path)     # the name: 2 messages now
        try:
            upto = log.compact("The first turns.", keep=1)
        except Exception as error:      # what the user would see: said in words below
            upto = f"{type(error).__name__}: {error}"
    assert upto == 6, (
        "the writer's log holds 7 messages, so a compaction keeping the last one "
        f"should record and return 'upto' 6; compact gave {upto!r}"
        + (", counted among the 2 messages of the file its name now points to, not "
           "the log this writer opened" if upto == 1 else ""))
