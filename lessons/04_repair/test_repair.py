"""Lesson 04: repair a session on resume.

Run: pytest lessons/04_repair            (your code)
     pytest lessons/04_repair --solution (the reference)

The logs here are written by hand, byte by byte, the way a crash leaves them.
"""

import contextlib
import errno
import itertools
import json
import os
import re
import signal
import time
from datetime import datetime, timezone
from types import SimpleNamespace

import openai
import pytest

from sessionlab.scripted import Fail, ScriptedModel, call, raw_call, say, use
from sessionlab.testing import (check_time, described, fail_in, open_descriptors,
                                raises)


def tool_call(call_id, name, **arguments):
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


ASK = {"role": "user", "content": "Buy a lantern, a rope and a torch."}
# The model asked for three purchases at once;
# their ids are deliberately not in sorted order.
BUY_THREE = {"role": "assistant", "content": None, "tool_calls": [
    tool_call("call_z", "buy", item="lantern"),
    tool_call("call_a", "buy", item="rope"),
    tool_call("call_m", "buy", item="torch"),
]}
CALL_ORDER = ["call_z", "call_a", "call_m"]


def result(call_id, text="You bought it."):
    return {"role": "tool", "tool_call_id": call_id, "content": text}


A_FINISHED_DAY = [
    {"role": "user", "content": "Ask the elder about the cave."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [tool_call("call_1_0", "talk_to", npc="elder")],
    },
    result("call_1_0", "The elder says: bring a torch and a rope."),
    {"role": "assistant", "content": "The elder wants a torch and a rope."},
]
TORN = b'{"role": "user", "content": "And a lant'   # a line the crash cut short


def line(entry):
    return (json.dumps(entry, ensure_ascii=False) + "\n").encode("utf-8")


def write_log(sessions, entries, tail=b"", session_id="quest-1"):
    path = sessions / f"{session_id}.jsonl"
    path.write_bytes(b"".join(line(entry) for entry in entries) + tail)
    return path


def entries_in(path):
    """Every line of the file parsed as JSON; fails the test if a line is not JSON."""
    data = path.read_bytes()
    assert data.endswith(b"\n"), (
        "the log should end with a newline, so the next line starts clean; it ends "
        f"{data[-60:]!r}"
    )
    found = []
    for number, raw in enumerate(data.split(b"\n")[:-1], start=1):
        try:
            found.append(json.loads(raw))
        except ValueError:
            pytest.fail(
                f"line {number} of the log is not JSON: {raw[:80]!r}. The whole file: "
                f"{data[-400:]!r}"
            )
    return found


def snapshot(folder):
    return {
        p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.iterdir())
    }


@pytest.fixture
def resume(lesson, sessions, model, town):
    """resume() opens the session as a new day's agent does;
    every log is closed after the test."""
    opened = []

    def resume(session_id="quest-1"):
        log = lesson.SessionLog(sessions, session_id)
        opened.append(log)
        agent = lesson.Agent(model.client(), model=model.model, tools=town, session=log)
        return agent, log

    yield resume
    for log in opened:
        log.close()


def markers(entries):
    return [entry for entry in entries if "$marker" in entry]


def preview_of(cut):
    """What cut_preview must be for the cut bytes `cut`: the first 80 of them (all,
    when fewer), as UTF-8, U+FFFD standing for each piece that is no whole character."""
    return cut[:80].decode("utf-8", "replace")


def check_marker(marker, cut, interrupted, situation):
    """Fail, blaming task 04.3, unless `marker` is the whole repair marker a writer
    that cut the bytes `cut` and answered the calls `interrupted` writes: those five
    fields, these values (`at` a time, which its own test checks), no other field."""
    at = marker.get("at") if isinstance(marker, dict) else None
    expected = {"$marker": "repair",
                "at": at if isinstance(at, str) else "<the time of the repair>",
                "cut_bytes": len(cut), "cut_preview": preview_of(cut),
                "interrupted": interrupted}
    if marker != expected:
        fields = set(marker) if isinstance(marker, dict) else set()
        missing, extra = sorted(set(expected) - fields), sorted(fields - set(expected))
        wrong = [f"{name}: {how_it_differs(marker[name], expected[name])}"
                 for name in expected
                 if name in fields and marker[name] != expected[name]]
        said = "; ".join(
            ([f"missing {', '.join(missing)}"] if missing else [])
            + ([f"fields no reader expects: {', '.join(extra)}"] if extra else [])
            + wrong)
        fail_in("04.3", f"{situation}: the repair marker should be "
                f"{shortly(expected)}, its five fields and no other; it is "
                f"{shortly(marker)} ({said})")


def shortly(value, most=300):
    """repr(value), its middle left out past `most` characters (a preview of 80 NULs
    shown whole hides the one that differs)."""
    text = repr(value)
    return text if len(text) <= most else (
        f"{text[:most // 2]} ... {text[-most // 2:]} ({len(text):,} characters)")


def how_it_differs(found, due):
    """A marker's field that is not what is due, in words that show where: for two
    texts, their lengths and the first character that differs."""
    if not (isinstance(found, str) and isinstance(due, str)):
        return f"{shortly(found, 120)} where {shortly(due, 120)} is due"
    at = next((i for i, (a, b) in enumerate(zip(found, due)) if a != b),
              min(len(found), len(due)))
    return (f"{len(found)} characters where {len(due)} are due, the first difference "
            f"at character {at}: {found[at:at + 12]!r} where {due[at:at + 12]!r} is "
            f"due (it is {shortly(found, 120)})")


def resume_whole(resume, path, whole, what):
    """resume(), failing in words when it raises although the log's first bytes,
    `whole`, are complete lines and only `what` follows them."""
    try:
        return resume()
    except NotImplementedError:
        raise                           # a task not written yet says so itself
    except Exception as error:          # noqa: BLE001 - reported in words below
        now = path.read_bytes()
        if not now.startswith(whole):
            seam = now[len(whole) - 60:len(whole) + 60]
            pytest.fail(f"the log's complete lines were followed only by {what}, but "
                        "the repair changed the complete lines themselves: they now "
                        f"end {seam!r}, where only the bytes after them should have "
                        "changed (resuming then raised "
                        f"{type(error).__name__}: {error})", pytrace=False)
        pytest.fail(f"the log's complete lines were followed only by {what}; resuming "
                    f"should repair that, but raised {type(error).__name__}: {error}",
                    pytrace=False)


# --- the problem ----------------------------------------------------------------------


@pytest.mark.key
@pytest.mark.task("04.1")
def test_resumed_unrepaired_an_interrupted_session_is_refused_with_400(
    lesson, sessions, model, town
):
    """The history as the crash left it:
    the scripted model answers 400, as OpenAI would."""
    write_log(sessions, [ASK, BUY_THREE])
    with lesson.SessionLog(sessions, "quest-1") as log:
        history = log.load()     # read as it is, no repair
    agent = lesson.Agent(model.client(), model=model.model, tools=town)
    # Sent as it is (ask_model, not run, whose settle() would answer the calls first).
    agent.messages = history + [{"role": "user", "content": "Did we get the lantern?"}]
    model.add(say("never sent"))

    with pytest.raises(openai.BadRequestError) as refused:
        agent.ask_model()

    assert refused.value.status_code == 400
    assert all(call_id in str(refused.value) for call_id in CALL_ORDER), (
        "the provider names the tool calls that have no result; it said: "
        f"{refused.value}"
    )


# --- 04.1 and 04.2 on their own: the functions, before any resume uses them -----------


ODD = {"role": "user", "content": "a\u2028b\u2029c\u0085d\x1ce\x1df\x1eg\x0bh\x0ci\rj"}
# A whole line another program wrote: valid JSON, a carriage return between its tokens
SPACED_MESSAGE = {"role": "user", "content": "Written elsewhere."}
SPACED = b'{"role": "user",\r "content": "Written elsewhere."}\n'
WHOLE = b"".join(line(entry) for entry in A_FINISHED_DAY)
AN_EMPTY_LINE = line(A_FINISHED_DAY[0]) + b"\n" + WHOLE[len(line(A_FINISHED_DAY[0])):]
# A marker is an entry too: a note about the log, kept in file order among the messages
NOTE = {"$marker": "repair", "at": "2026-01-02T10:00:00+00:00", "cut_bytes": 0,
        "cut_preview": "", "interrupted": []}
NOTED = line(A_FINISHED_DAY[0]) + line(NOTE) + WHOLE[len(line(A_FINISHED_DAY[0])):]
# A marker of a kind this lesson never writes (another program's, a later lesson's)
BOOKMARK = {"$marker": "bookmark", "title": "Before the cave", "at_message": 1}
MARKED = line(A_FINISHED_DAY[0]) + line(BOOKMARK) + WHOLE[len(line(A_FINISHED_DAY[0])):]
# Keys no code here uses, in an order of their own: a speaker's name, a provider's
# reasoning and refusal, another program's field with 1.0 and an integer past 64 bits
KEYED = [{"name": "Ana", "role": "user", "content": "Ask the elder about the cave."},
         {"role": "assistant", "reasoning": "The elder knows the cave.",
          "refusal": None, "content": "Bring a rope, says the elder.",
          "x_vendor": {"score": 1.0, "tokens": 2 ** 70}}]
KEYED_LOG = b"".join(line(entry) for entry in KEYED)
# Another program's last line, with CRLF line ends: its process died between the
# carriage return and the newline. Nothing of the message was lost.
CRLF_MESSAGE = {"role": "user", "content": "Written on Windows."}
CRLF_TAIL = b'{"role": "user", "content": "Written on Windows."}\r'
# The same program's line, cut short by a crash: a carriage return between its tokens,
# and braces in its text (code the user pasted). Still only the start of one line
TORN_SPACED = b'{"role": "user",\r "content": "if (x) {}{ y(); }'
# A long line cut short by a crash: a map pasted whole, 1.5 MB of it written. However
# long, it is the start of one line, as a short one is
TORN_LONG = b'{"role": "user", "content": "Copy the map: ' + b"north, east. " * 120000
# name: (the log's bytes, its whole entries, where they end, newline_missing)
LOGS = {
    "a whole log": (WHOLE, A_FINISHED_DAY, len(WHOLE), False),
    "half a line at the tail": (WHOLE + TORN, A_FINISHED_DAY, len(WHOLE), False),
    "zero bytes at the tail": (
        WHOLE + b"\x00" * 300, A_FINISHED_DAY, len(WHOLE), False),
    "half a character at the tail": (
        WHOLE + '{"role": "user", "content": "caf'.encode() + "é".encode()[:1],
        A_FINISHED_DAY, len(WHOLE), False),
    "JSON that is no message at the tail": (
        WHOLE + b'{"content": "no role"}', A_FINISHED_DAY, len(WHOLE), False),
    "blanks at the tail": (WHOLE + b"  \t \r", A_FINISHED_DAY, len(WHOLE), False),
    # A crash in the first write of a session: no line was ever whole
    "nothing but half a line": (TORN, [], 0, False),
    "a whole last message without its newline": (
        WHOLE[:-1], A_FINISHED_DAY, len(WHOLE) - 1, True),
    # A first write that lost only its newline: no newline in the file, a whole entry
    "one whole message, its newline missing": (
        line(ASK)[:-1], [ASK], len(line(ASK)) - 1, True),
    "an empty line, then half a line": (
        AN_EMPTY_LINE + TORN, A_FINISHED_DAY, len(AN_EMPTY_LINE), False),
    # An empty line is a whole line that holds no entry: `end` lies past it
    "an empty last line": (WHOLE + b"\n", A_FINISHED_DAY, len(WHOLE) + 1, False),
    "an empty line just before half a line": (
        WHOLE + b"\n" + TORN, A_FINISHED_DAY, len(WHOLE) + 1, False),
    "nothing but an empty line": (b"\n", [], 1, False),
    "U+2028 and its kind inside a message": (
        line(ODD) + WHOLE, [ODD, *A_FINISHED_DAY], len(line(ODD) + WHOLE), False),
    "a carriage return between a line's tokens": (
        SPACED + WHOLE, [SPACED_MESSAGE, *A_FINISHED_DAY], len(SPACED + WHOLE), False),
    "a marker among the messages": (
        NOTED, [A_FINISHED_DAY[0], NOTE, *A_FINISHED_DAY[1:]], len(NOTED), False),
    "a marker of a kind this lesson never writes": (
        MARKED, [A_FINISHED_DAY[0], BOOKMARK, *A_FINISHED_DAY[1:]], len(MARKED), False),
    # Another program's marker, written last, its newline lost: an entry all the same
    "a marker of another kind last, its newline missing": (
        WHOLE + line(BOOKMARK)[:-1], [*A_FINISHED_DAY, BOOKMARK],
        len(WHOLE + line(BOOKMARK)) - 1, True),
    "half of a long line at the tail": (
        WHOLE + TORN_LONG, A_FINISHED_DAY, len(WHOLE), False),
    "messages with keys no code here uses, then a torn end": (
        KEYED_LOG + TORN, KEYED, len(KEYED_LOG), False),
    "a whole last message ended by a carriage return, its newline missing": (
        WHOLE + CRLF_TAIL, [*A_FINISHED_DAY, CRLF_MESSAGE], len(WHOLE + CRLF_TAIL),
        True),
    "half a line with a carriage return between its tokens and braces in its text": (
        WHOLE + TORN_SPACED, A_FINISHED_DAY, len(WHOLE), False),
}


@pytest.mark.task("04.1")
@pytest.mark.parametrize("case", list(LOGS))
def test_parse_log_keeps_every_whole_line_and_ends_where_they_end(lesson, sessions,
                                                                  case):
    """parse_log itself, before any repair: the whole lines are the entries, `end` is
    the byte where they end (a torn tail starts there), and `newline_missing` tells a
    whole last entry that lacks only its newline."""
    data, entries, end, newline_missing = LOGS[case]
    try:
        state = lesson.parse_log(data, sessions / "quest-1.jsonl")
    except lesson.CorruptLog as error:
        refused = error
    else:
        refused = None
    if refused is not None:     # outside the except: the words come first, alone
        why = {"U+2028 and its kind inside a message": " U+2028, U+2029 and U+0085 "
               "are text inside one line: only the newline byte ends a line of a log, "
               "and a message cut anywhere else falls apart in pieces that are no "
               "JSON.",
               "an empty line, then half a line": " An empty line holds nothing to "
               "lose: it is no damage.",
               "a carriage return between a line's tokens": " A carriage return is no "
               "line break in a log: only the newline byte ends a line, and this "
               "whole line is a message in JSON.",
               "a marker of a kind this lesson never writes": " A marker of any kind "
               "is an entry, as parse_line says: this lesson writes only repair "
               "markers, but a log may hold others, and they are kept, not refused.",
               "half a line with a carriage return between its tokens and braces in "
               "its text": " The tail holds no whole JSON value: it is the start of "
               "one line a crash cut short, whatever characters it holds (a carriage "
               "return between tokens, '}{' in a text), and it is torn, not damage.",
               "half of a long line at the tail": " A crash cuts one write short, and "
               "a line may be as long as the message it holds (a map pasted whole): "
               "the start of one line is torn, however long, never damage."
               }.get(case, "")
        pytest.fail(f"parse_log refused {case} as damage, but only a whole line that "
                    f"is no entry is damage.{why} (CorruptLog said line "
                    f"{refused.line}: {refused})", pytrace=False)

    judged = {"a whole last message ended by a carriage return, its newline missing":
              " Whether the tail is an entry is for parse_line to say, whatever its "
              "last byte: a carriage return after the JSON is a blank, and this tail "
              "is a whole message that lacks only its newline.",
              "a marker of another kind last, its newline missing":
              " A marker is an entry as a message is: another program's, written "
              "last, that lost only its newline, is kept and gets its newline, not "
              "cut as torn bytes."}.get(case, "")
    assert state.entries == entries, (
        f"{case}: parse_log should find the {len(entries)} whole entries; it found "
        f"{len(state.entries)}: {state.entries}.{judged}")
    assert json.dumps(state.entries) == json.dumps(entries), (
        f"{case}: parse_log should hand back each entry as parse_line reads it, every "
        "key in its order and every number as it was written (1.0 stays 1.0): what no "
        f"code here uses is still the log's. It handed back {state.entries}, where "
        f"{entries} was expected")
    assert state.end == end, (
        f"{case}: `end` should be {end}, the byte where the whole lines end (the "
        f"next line starts there, and a repair cuts what lies past it); it is "
        f"{state.end}")
    assert state.size == len(data), (
        f"{case}: `size` should be the {len(data)} bytes read; it is {state.size}")
    assert state.newline_missing == newline_missing, (
        f"{case}: `newline_missing` should be {newline_missing} (it is True only when "
        f"the last entry is whole and lacks only its newline); it is "
        f"{state.newline_missing}")


# name: a whole line that is no entry (parse_line refuses it)
DAMAGE = {
    "zero bytes": b"\x00" * 40,
    "blanks (no line is empty for holding only them)": b"  \t \r",
    # An empty line holds no byte: a line of one carriage return is no empty line
    "a lone carriage return": b"\r",
    "no role": b'{"content": "no role"}',
    "not UTF-8": b'{"role": "user", "content": "caf\xe9"}',
    "half a line, the start of the first": b'{"role": "user", "content": "Ask the',
    "a message that is also a marker":
        b'{"role": "user", "content": "x", "$marker": 1}',
    "content that is an object": b'{"role": "user", "content": {"text": "x"}}',
    "an escaped lone surrogate": b'{"role": "user", "content": "\\ud800"}',
    "a number too large for a float": b'{"role": "user", "content": "x", "n": 1e999}',
    # An editor's byte-order mark: parse_line refuses it, wherever it stands
    "a byte-order mark before the message":
        b'\xef\xbb\xbf{"role": "user", "content": "x"}',
}
FIRST = line(A_FINISHED_DAY[0])
REST = b"".join(line(entry) for entry in A_FINISHED_DAY[1:])
# name: (the bytes before the damaged line, the bytes after it, its line number)
PLACES = {
    "in the middle": (FIRST, REST, 2),
    "the last whole line": (FIRST, b"", 2),
    "the last whole line, then a torn end": (FIRST, TORN, 2),
    "after two empty lines": (FIRST + b"\n\n", REST, 4),
    "the first line": (b"", REST, 1),
    # Offsets count bytes: three lines of characters of more than one byte before it
    "after lines in other scripts": (
        b"".join(line({"role": "user", "content": text}) for text in (
            "Спроси старейшину о пещере.", "洞窟について長老に聞いて。",
            "Ask the elder 🗝")), REST, 4),
}


@pytest.mark.task("04.1")
@pytest.mark.parametrize("where", ["a whole line in the middle",
                                   "a whole last line without its newline"])
def test_parse_log_lets_an_interrupt_reach_its_caller(lesson, sessions, monkeypatch,
                                                      where):
    """Ctrl-C (KeyboardInterrupt) lands while parse_log judges a line that is a whole
    message: the interrupt is no verdict on the line. It reaches the caller as itself,
    never as CorruptLog (the line is whole) and never swallowed as a torn tail (the
    writer would then cut a whole message from the log)."""
    import sys
    first = b'{"role": "user", "content": "Ask the elder."}'
    middle = b'{"role": "assistant", "content": "He sleeps."}'
    last = b'{"role": "user", "content": "Then the guard."}'
    data = first + b"\n" + middle + b"\n" + last
    target = middle if where.startswith("a whole line") else last
    reading = sys.modules[lesson.parse_log.__module__]
    real = getattr(reading, "parse_line", None)
    if real is None:
        pytest.skip("this parse_log judges its lines without parse_line")
    came = []

    def parse_line(line, *args, **kwargs):
        raw = line.encode("utf-8") if isinstance(line, str) else bytes(line)
        if raw.rstrip(b"\n") == target and not came:
            came.append(target)
            raise KeyboardInterrupt
        return real(line, *args, **kwargs)
    monkeypatch.setattr(reading, "parse_line", parse_line)
    try:
        state = lesson.parse_log(data, sessions / "quest-1.jsonl")
        found = (f"returned {len(state.entries)} entries, the bytes past {state.end} "
                 "taken for a torn tail")
    except KeyboardInterrupt:
        return
    except NotImplementedError:
        raise
    except Exception as error:      # noqa: BLE001 - reported in words below
        found = f"raised {type(error).__name__}: {error}"
    finally:
        monkeypatch.undo()
    if not came:
        pytest.skip("this parse_log judged the line by a way this test cannot stop")
    pytest.fail(f"Ctrl-C came while parse_log judged {where}, a whole message; the "
                "interrupt should reach the caller as KeyboardInterrupt, as it came: "
                "it says nothing about the line, which is whole. parse_log " + found,
                pytrace=False)


@pytest.mark.task("04.1")
@pytest.mark.parametrize("place", list(PLACES))
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_parse_log_names_a_damaged_whole_line_by_its_place_in_the_file(
        lesson, sessions, damage, place):
    """parse_log itself, before any repair: a whole line that is no entry is damage, not
    a torn tail. CorruptLog names the file, the line as an editor numbers it, the byte
    where that line starts, and the reason parse_line gave."""
    before, after, number = PLACES[place]
    data = before + DAMAGE[damage] + b"\n" + after
    path = sessions / "quest-1.jsonl"
    try:
        lesson.parse_line(DAMAGE[damage])
    except ValueError as refused:
        reason = str(refused)
    else:
        pytest.fail(f"parse_line should refuse {damage}: {DAMAGE[damage]!r}",
                    pytrace=False)
    try:
        state = lesson.parse_log(data, path)
    except lesson.CorruptLog as error:
        found = error
    else:
        pytest.fail(f"line {number} ({place}) is a whole line, {damage}, and no entry: "
                    "parse_log should raise CorruptLog for it; it returned "
                    f"{len(state.entries)} entries, end={state.end}, of {len(data)} "
                    "bytes", pytrace=False)
    where = (found.line, found.offset)
    assert where == (number, len(before)), (
        f"the damaged line ({damage}, {place}) is line {number} of the file, starting "
        f"at byte {len(before)}, where an editor shows it; CorruptLog names line "
        f"{where[0]} at byte {where[1]}: {found}")
    message = str(found)
    assert str(path) in message and f"line {number}" in message and str(
        len(before)) in message, (
        f"the error should name the file {path}, line {number} and byte offset "
        f"{len(before)}; it says: {message}")
    assert reason in message, (
        f"the error should say why the line is no entry, as parse_line said it "
        f"({reason!r}); it says: {message}")
    told = lesson.CorruptLog(path, number, len(before), reason)
    assert message == str(told), (
        f"the error should give parse_line's reason in its own words, {reason!r}, "
        "with nothing of Python's around it (no exception's name, no quotes): it is "
        f"what the user reads to mend the line. It says: {message}; CorruptLog made "
        f"of that file, line, offset and reason says: {told}")
    assert isinstance(found.path, type(path)) and found.path == path, (
        f"the error's `path` should be the log's path as parse_log was given it, "
        f"{path!r}, so that a program that catches the error can open that file; it "
        f"is {found.path!r}")


@pytest.mark.task("04.1")
@pytest.mark.parametrize("second", ["no role", "zero bytes", "not UTF-8",
                                    "two messages joined at the tail"])
def test_parse_log_names_the_first_of_two_damaged_lines(lesson, sessions, second):
    """Two lines are damaged, lines 2 and 4 (a whole line, or the tail: two messages
    joined, which no crash leaves): CorruptLog names the first, line 2, as a reader
    meets them. Whoever mends the line named and resumes is then told of the next one;
    named the other way round, the first damage would be found last."""
    if second == "two messages joined at the tail":
        data = (FIRST + DAMAGE["half a line, the start of the first"] + b"\n"
                + line(A_FINISHED_DAY[1]) + joined(*A_FINISHED_DAY[2:]))
    else:
        data = (FIRST + DAMAGE["half a line, the start of the first"] + b"\n"
                + line(A_FINISHED_DAY[1]) + DAMAGE[second] + b"\n" + REST)
    path = sessions / "quest-1.jsonl"
    try:
        state = lesson.parse_log(data, path)
    except lesson.CorruptLog as error:
        found = error
    else:
        pytest.fail(f"line 2 (half a line) and line 4 ({second}) are damage, no "
                    "entries: parse_log should raise CorruptLog; it returned "
                    f"{len(state.entries)} entries", pytrace=False)
    assert (found.line, found.offset) == (2, len(FIRST)), (
        f"lines 2 (half a line) and 4 ({second}) are damaged; CorruptLog should name "
        f"the first, line 2 at byte {len(FIRST)}, as a reader meets them, and it names "
        f"line {found.line} at byte {found.offset}: {found}")


def buy(*ids):
    """BUY_THREE's calls with these ids, as the model made them."""
    return [call for call in BUY_THREE["tool_calls"] if call["id"] in ids]


AGAIN = [A_FINISHED_DAY[0],
         {"role": "assistant", "content": None,
          "tool_calls": [tool_call("call_0", "talk_to", npc="elder")]},
         result("call_0", "Bring a torch."),
         {"role": "assistant", "content": "A torch, then."}, ASK,
         {"role": "assistant", "content": None,
          "tool_calls": [tool_call("call_0", "buy", item="torch"),
                         tool_call("call_1", "buy", item="rope")]}]
# A server that numbers each reply's calls afresh, and a model that makes the same call
# again: two assistant messages equal in every field, only the earlier one answered
SAME_AGAIN = [A_FINISHED_DAY[0],
              {"role": "assistant", "content": None,
               "tool_calls": [tool_call("call_0", "talk_to", npc="elder")]},
              result("call_0", "Bring a torch."),
              {"role": "assistant", "content": "A torch, then."},
              {"role": "user", "content": "Ask him again."},
              {"role": "assistant", "content": None,
               "tool_calls": [tool_call("call_0", "talk_to", npc="elder")]}]
# Ids are compared whole: "call_1" is not answered by the result of "call_10"
PREFIXED = [tool_call("call_1", "buy", item="lantern"),
            tool_call("call_10", "buy", item="rope")]
CASED = [tool_call("call_aB", "buy", item="lantern"),
         tool_call("call_Ab", "buy", item="rope")]
# Many calls in one reply: a crash before the last result
ARROWS = [tool_call(f"call_{number}", "buy", item="arrow") for number in range(12)]
# name: (the conversation, the calls left open at its end)
CONVERSATIONS = {
    "three calls, no result": ([ASK, BUY_THREE], buy(*CALL_ORDER)),
    "the first call answered": (
        [ASK, BUY_THREE, result("call_z")], buy("call_a", "call_m")),
    "only the second call answered": (
        [ASK, BUY_THREE, result("call_a")], buy("call_z", "call_m")),
    "only the last call answered": (
        [ASK, BUY_THREE, result("call_m")], buy("call_z", "call_a")),
    "every call answered": (
        [ASK, BUY_THREE, *(result(call_id) for call_id in CALL_ORDER)], []),
    "a plain answer": (A_FINISHED_DAY, []),
    # As a program that stores a reply object's every field writes it
    "a plain answer whose tool_calls is null": (
        [*A_FINISHED_DAY[:-1], {**A_FINISHED_DAY[-1], "tool_calls": None}], []),
    "a user message after a plain answer": (
        [*A_FINISHED_DAY, {"role": "user", "content": "And the guard?"}], []),
    "calls, then a user message": (
        [ASK, BUY_THREE, {"role": "user", "content": "Did we get them?"}], []),
    # Another program's log: a note of its harness straight after the calls
    "calls, then a developer message": (
        [ASK, BUY_THREE, {"role": "developer", "content": "Spend no more gold."}], []),
    "calls, then a system message": (
        [ASK, BUY_THREE, {"role": "system", "content": "The shop closes soon."}], []),
    "calls, one answered, then a plain answer": (
        [ASK, BUY_THREE, result("call_z"),
         {"role": "assistant", "content": "The shop is shut."}], []),
    # A program that writes every field of its message type, those it does not use
    # empty: a result is told by its role, never by a key it holds
    "calls, one answered, then a plain answer with an empty tool_call_id": (
        [ASK, BUY_THREE, result("call_z"),
         {"role": "assistant", "content": "The shop is shut.",
          "tool_call_id": ""}], []),
    "calls with a text beside them": (
        [ASK, {**BUY_THREE, "content": "Three purchases, then."}, result("call_a")],
        buy("call_z", "call_m")),
    "an id used again in a later turn": (AGAIN, AGAIN[-1]["tool_calls"]),
    # Equal is not the same: the open message is the last one, not the first its equal
    "the same call made again in a later turn": (
        SAME_AGAIN, SAME_AGAIN[-1]["tool_calls"]),
    # Ids are compared exactly: a server's base62 ids may differ only in case
    "ids that differ only in case": (
        [ASK, {"role": "assistant", "content": None, "tool_calls": CASED},
         result("call_Ab")], CASED[:1]),
    "an id that begins another's": (
        [ASK, {"role": "assistant", "content": None, "tool_calls": PREFIXED},
         result("call_10")], PREFIXED[:1]),
    "no message at all": ([], []),
    # A conversation may begin with the assistant's calls (another program's log, a
    # session that opens with a tool call): the first message is no exception
    "calls as the very first message, the first of them answered": (
        [BUY_THREE, result("call_z")], buy("call_a", "call_m")),
    # A tool may return empty text: that is its result, and it answers its call
    "calls answered, one of them by empty text": (
        [ASK, BUY_THREE, result("call_z"), result("call_a", ""), result("call_m")], []),
    "twelve calls in one reply, all but the last answered": (
        [ASK, {"role": "assistant", "content": None, "tool_calls": ARROWS},
         *(result(call["id"]) for call in ARROWS[:-1])], ARROWS[-1:]),
}


@pytest.mark.task("04.2")
@pytest.mark.parametrize("case", list(CONVERSATIONS))
def test_unanswered_calls_finds_what_needs_a_result_before_the_next_request(
        lesson, case):
    """unanswered_calls itself, before any repair or settle uses it, on conversations
    of many shapes: the calls it returns, as the assistant message holds them and in
    the model's order, are those that must get a result before anything else is
    sent. The list is one of its own; the calls in it are the message's own. The
    conversation is read back as from a log: its texts are made by the JSON reader,
    never the literals Python shares, so a role compared with `is` is seen for what it
    is."""
    # A copy (a function that changes what it is given must not change the cases),
    # read back as the log gives it: strings of its own, equal to the literals above
    # but not the same objects
    messages = json.loads(json.dumps(CONVERSATIONS[case][0]))
    expected = CONVERSATIONS[case][1]
    before = json.dumps(messages)

    found = lesson.unanswered_calls(messages)

    assert isinstance(found, list), (
        f"{case}: unanswered_calls should return a list of the open calls (an empty "
        f"one for none), which its caller may walk twice, or ask whether it holds "
        f"any; it returned {found!r}")
    ids = [call.get("id") if isinstance(call, dict) else call for call in found]
    wanted = [call["id"] for call in expected]
    last = messages[-1].get("role") if messages else None
    if case.startswith("calls,") and last in ("user", "developer", "system"):
        assert found == [], (
            f"the calls are followed by a {last} message, so they are no longer at "
            "the end of the conversation: a result written now would come after that "
            "message, where no provider accepts it either (results follow their calls "
            f"straight away). A conversation that ends in a {last} message has no "
            f"open call; unanswered_calls returned {ids}")
    if "then a plain answer" in case:
        assert found == [], (
            "the calls are followed by a plain answer of the assistant, so they are no "
            "longer at the end of the conversation: a result written now would come "
            "after that answer, where no provider accepts it. A conversation that ends "
            f"in a plain answer has no open call; unanswered_calls returned {ids}")
    assert ids == wanted, (
        f"{case}: the open calls are {wanted or 'none'}, in the order the model made "
        f"them; unanswered_calls returned {ids}")
    assert found == expected, (
        f"{case}: unanswered_calls should return the calls themselves, as the "
        f"assistant message holds them; it returned {found}")
    own = [call for message in messages for call in message.get("tool_calls") or ()]
    copies = [call["id"] for call in found if not any(call is mine for mine in own)]
    assert not copies, (
        f"{case}: unanswered_calls should return the assistant message's own calls, "
        f"in a list of its own; it returned copies of {copies}: the list is new, the "
        "calls in it are the message's")
    assert json.dumps(messages) == before, (
        f"{case}: unanswered_calls changed the conversation it was given")
    found.clear()   # a caller that takes each call off the list as it answers it
    assert json.dumps(messages) == before, (
        f"{case}: the list unanswered_calls returned is the assistant message's own "
        "list of calls: a caller that took the calls off it as it answered them "
        "emptied the message's tool_calls, in memory and in every request after. "
        "The list returned is one of its own; the calls in it are the message's")


# name: how the agent's conversation ends before its next run, with no call open
ENDED_WELL = {
    "no message yet": [],
    "a plain answer": [say("The elder sleeps until noon.")],
    # The request was refused: the conversation ends in the user's message
    "a user message the model refused": [Fail(400, "The scripted model refused it.")],
}


@pytest.mark.task("04.4")
@pytest.mark.parametrize("before", list(ENDED_WELL))
def test_a_run_after_one_that_left_no_call_open_adds_nothing_before_its_message(
        lesson, town, before):
    """An agent without a log whose conversation is empty, ends in a plain answer, or
    ends in the user's message (the model refused the request): no call is open, so
    the next run records its message straight after what memory holds and asks the
    model. Every run starts this way, the first of a session and each one after a turn
    that ended well, so whatever comes before the message must take each of these
    endings as it is (a last message that answers no call, or none at all)."""
    model = ScriptedModel([*ENDED_WELL[before], say("On we go.")])
    agent = lesson.Agent(model.client(), model=model.model, tools=town)
    if ENDED_WELL[before]:
        try:
            agent.run("Where is the elder?")
        except openai.BadRequestError:
            pass    # the refused request: the user goes on all the same
    held = list(agent.messages)
    try:
        answer, failed = agent.run("Go on."), None
    except NotImplementedError:
        raise                           # a task not written yet says so itself
    except Exception as error:          # noqa: BLE001 - reported in words below
        answer, failed = None, described(error)
    if failed is not None:      # outside the except: the words come first, alone
        pytest.fail(f"with {before} and no call open, the next run failed before the "
                    f"model answered: {failed}. Nothing needs settling there: the run "
                    "should record its message and ask the model (task 04.4)",
                    pytrace=False)
    assert answer == "On we go.", (
        f"with {before}, the next run should return the model's answer 'On we go.'; "
        f"it returned {answer!r}")
    added = agent.messages[len(held):len(held) + 1]
    assert agent.messages[:len(held)] == held and added == [
            {"role": "user", "content": "Go on."}], (
        f"with {before} and no call open, the run should add its user message right "
        "after what memory held, nothing before it; memory went from "
        f"{[m.get('role') for m in held]} to "
        f"{[m.get('role') for m in agent.messages]}")


# --- 04.2 and 04.3: answer the interrupted calls --------------------------------------


@pytest.mark.task("04.1")
@pytest.mark.key
@pytest.mark.task("04.2")
@pytest.mark.task("04.3")
def test_resumed_every_interrupted_call_gets_a_result_and_the_model_accepts_it(
    resume, sessions, model
):
    """Each unanswered call gets a tool result,
    in call order, saying it may or may not have run."""
    write_log(sessions, [ASK, BUY_THREE])

    agent, _ = resume()

    added = agent.messages[2:]
    assert [m.get("role") for m in added] == ["tool"] * 3, (
        "after the three unanswered calls the agent should hold three tool results; it "
        f"holds {added}"
    )
    assert [m["tool_call_id"] for m in added] == CALL_ORDER, (
        f"one result per call id, in the order of the calls {CALL_ORDER}; got "
        f"{[m['tool_call_id'] for m in added]}"
    )
    for message in added:
        text = message["content"].lower()
        assert "interrupted" in text and "may or may not have run" in text, (
            "the made-up result must say what is known: the call was interrupted and "
            "may or may not "
            f"have run; it says {message['content']!r}")

    model.add(say("Let me look at what we carry before buying again."))
    assert (
        agent.run("Did we get them?")
        == "Let me look at what we carry before buying again."
    ), "the model should accept the repaired history"
    assert model.requests[0]["messages"][:5] == [ASK, BUY_THREE, *added]


@pytest.mark.task("04.2")
@pytest.mark.task("04.3")
@pytest.mark.parametrize(
    "answered", [["call_z"], ["call_a"], ["call_z", "call_a"], ["call_m"]]
)
def test_only_calls_without_a_result_are_answered_in_call_order(
    lesson, resume, sessions, model, answered
):
    """A call that already has its result gets no second one;
    the others keep the model's order."""
    conversation = [ASK, BUY_THREE, *(result(call_id) for call_id in answered)]
    write_log(sessions, conversation)

    agent, _ = resume()

    missing = [call_id for call_id in CALL_ORDER if call_id not in answered]
    added = [m.get("tool_call_id") for m in agent.messages[2 + len(answered):]]
    if added != missing:
        # Whose code answered the wrong calls: the finder's (04.2), or the repair's
        # use of it (04.3) when the finder itself names the right ones?
        found = lesson.unanswered_calls(json.loads(json.dumps(conversation)))
        right = [call.get("id") for call in found] == missing
        fail_in("04.3" if right else "04.2", (
            f"with results already saved for {answered}, only {missing} need one, in "
            f"that order; the agent added results for {added}"
            + (" (unanswered_calls names the right calls: the repair should answer "
               "exactly those)" if right else "")))
    model.add(say("Noted."))
    agent.run("Go on.")   # a second result for the same id would be refused with 400


# A repair marker that a writer of another program left after calls it did not answer:
# it cut a torn line, and answered nothing
A_MARKER_ANSWERING_NOTHING = {"$marker": "repair", "at": "2026-01-02T10:00:00+00:00",
                              "cut_bytes": 9, "cut_preview": '{"role": ',
                              "interrupted": []}


# name: a marker that follows calls it did not answer
MARKERS_AFTER_CALLS = {
    "a repair marker": A_MARKER_ANSWERING_NOTHING,
    # A kind this lesson never writes (a later lesson's, another program's): a marker
    # all the same, a note about the log, no message
    "a marker of another kind": BOOKMARK,
}


@pytest.mark.task("04.3")
@pytest.mark.parametrize("kind", list(MARKERS_AFTER_CALLS))
def test_calls_a_marker_follows_are_still_open_and_get_their_results(
        resume, sessions, model, kind):
    """A marker is a note about the log, not a message, whatever its kind: when one
    follows the calls (a writer of another program cut a torn line after them and
    answered nothing, or left a bookmark there), the conversation still ends in those
    calls, and each gets its result, in call order, after a marker of this writer's
    own."""
    path = write_log(sessions, [ASK, BUY_THREE, MARKERS_AFTER_CALLS[kind]])

    agent, _ = resume()

    added = [m.get("tool_call_id") for m in agent.messages[2:]]
    assert added == CALL_ORDER, (
        f"the log holds the three calls, then {kind} ({MARKERS_AFTER_CALLS[kind]}) "
        "that answered none of them. A marker of any kind is no message (a line with "
        "$marker and no role): the conversation still ends in the calls, and the "
        f"writer that takes the log over answers {CALL_ORDER}, in that order; the "
        f"history it hands back has results for {added or 'none'}")
    check_marker(entries_in(path)[3], b"", CALL_ORDER, f"the calls {CALL_ORDER} were "
                 f"open, {kind} after them, and nothing was cut")
    model.add(say("Noted."))
    agent.run("Go on.")   # a call without its result would be refused with 400


@pytest.mark.task("04.3")
def test_a_torn_line_after_a_repair_marker_is_cut_as_any_torn_line(resume, sessions):
    """A log whose last whole line is a repair marker was mended once; a crash after
    it can tear the next line as one tore the first. The writer that takes it over
    cuts those torn bytes as it cuts any, and says so in a marker of its own: a
    marker last in the log is no sign that nothing is left to mend."""
    path = write_log(sessions, [*A_FINISHED_DAY, A_MARKER_ANSWERING_NOTHING], tail=TORN)
    whole = path.read_bytes()[:-len(TORN)]
    said = (f"the log's last whole line is a repair marker an earlier writer wrote, "
            f"and half a line ({len(TORN)} bytes) follows it")

    agent, log = resume_whole(resume, path, whole, "half a line after a repair marker")

    data = path.read_bytes()
    if TORN in data or not data.startswith(whole) or not data.endswith(b"\n"):
        fail_in("04.3", f"{said}: the writer that takes the log over should cut those "
                "bytes, as it cuts any torn tail, and keep every whole line as it was, "
                f"the marker too; the log now ends {data[-160:]!r}")
    found = markers(entries_in(path))
    if len(found) != 2:
        fail_in("04.3", f"{said}: the writer that cut them should add one marker of "
                f"its own after the one there; the log holds {len(found)} marker(s): "
                f"{found}")
    check_marker(found[1], TORN, [], f"{said}, and no call was open")
    assert log.repaired == found[1], (
        f"{said}: the writer's `repaired` should be the marker it wrote, {found[1]}; "
        f"it is {log.repaired!r}")
    assert agent.messages == A_FINISHED_DAY, (
        f"{said}: the history is the complete messages, markers left out; the resume "
        f"handed back {agent.messages}")


@pytest.mark.task("04.2")
@pytest.mark.parametrize(
    "ending", ["a plain answer", "a user message", "answered calls"]
)
@pytest.mark.task("04.3")
def test_a_whole_log_is_resumed_without_a_single_byte_written(
    lesson, resume, sessions, ending
):
    """No torn tail and no call left open:
    the writer changes nothing, not even with a marker."""
    entries = {
        "a plain answer": A_FINISHED_DAY,
        "a user message": [
            *A_FINISHED_DAY,
            {"role": "user", "content": "And the guard?"},
        ],
        "answered calls": [
            ASK,
            BUY_THREE,
            *(result(call_id) for call_id in CALL_ORDER),
        ],
    }[ending]
    path = write_log(sessions, entries)
    before = path.read_bytes(), path.stat().st_mtime_ns

    agent, log = resume()

    assert agent.messages == entries
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before, (
        f"a log ending in {ending} needs no repair: nothing may be written to it")
    assert log.repaired is None


@pytest.mark.task("04.3")
def test_a_log_larger_than_any_one_read_is_resumed_whole(
        lesson, resume, sessions, monkeypatch):
    """A log of 2 MiB, its first message a map pasted whole and 3,000 short ones after
    it, then a torn line: the writer reads all of it, however few bytes each read
    returns (a network file system, a signal: here 64 KiB at most, by read or pread,
    and often far less, a single byte at times), and cuts the torn bytes alone. A read
    that returns less than it asked is no end of the file: a log read in part looks
    torn where the read stopped, and the cut there would take the rest of the session
    with it."""
    big = {"role": "user", "content": "Copy the map: " + "north, east. " * (2 << 16)}
    short = [{"role": "assistant", "content": f"Step {step}."} for step in range(3000)]
    path = write_log(sessions, [big, *short], TORN)
    whole = path.read_bytes()[:-len(TORN)]
    try:
        state = lesson.parse_log(whole + TORN, path)
        found = (f"{len(state.entries)} ending at byte {state.end:,}, of "
                 f"{state.size:,}")
        right = (len(state.entries), state.end, state.size) == (
            3001, len(whole), len(whole) + len(TORN))
    except NotImplementedError:
        raise                           # a task not written yet says so itself
    except Exception as error:      # noqa: BLE001 - reported in words below
        found, right = f"none: it raised {type(error).__name__}: {error}", False
    if not right:
        fail_in("04.1", f"the log holds 3,001 whole lines in {len(whole):,} bytes, "
                f"then {len(TORN)} torn ones; parse_log, given all its bytes, should "
                f"find 3001 entries ending at byte {len(whole):,}, of "
                f"{len(whole) + len(TORN):,}; it found {found}")
    read, pread = os.read, os.pread
    # Each read returns at most the next of these, in turn: short reads long before
    # the end of the file, whatever size a loop asks for
    most = itertools.cycle([1 << 16, 4093, 1, 1 << 15])
    monkeypatch.setattr(os, "read", lambda fd, size: read(fd, min(size, next(most))))
    monkeypatch.setattr(os, "pread", lambda fd, size, offset: pread(
        fd, min(size, next(most)), offset))

    agent, log = resume_whole(resume, path, whole, "a torn line")

    now = path.read_bytes()
    if not now.startswith(whole):
        kept = len(os.path.commonprefix([now, whole]))
        pytest.fail(f"the log holds 3,001 whole lines in {len(whole):,} bytes, then "
                    f"{len(TORN)} torn ones; the writer kept only its first {kept:,} "
                    "bytes: it read the log in part, took where the read stopped for a "
                    "torn tail, and cut the session's history with it", pytrace=False)
    cut = (log.repaired.get("cut_bytes") if isinstance(log.repaired, dict)
           else log.repaired)
    assert cut == len(TORN) and len(agent.messages) == 3001, (
        f"the log holds 3,001 whole messages, then {len(TORN)} torn bytes; the writer "
        f"should cut those bytes alone and hand back every message. It cut {cut!r} "
        f"and handed back {len(agent.messages)} message(s)")


@pytest.mark.task("04.3")
def test_a_writer_refused_for_a_corrupt_log_takes_it_over_once_it_is_mended(
        lesson, sessions):
    """CorruptLog tells the user to mend the line by hand and resume again. The same
    writer, asked again once the line is mended, reads the log as it is now: it takes
    it over, and appends after it."""
    path = write_log(sessions, A_FINISHED_DAY)
    good = path.read_bytes()
    damaged = good.replace(b'"The elder says', b'"The eld\x00\x00er says', 1)
    try:
        lesson.parse_log(damaged, path)
        did = "returned"
    except lesson.CorruptLog:
        did = None
    except NotImplementedError:
        raise                           # a task not written yet says so itself
    except Exception as error:      # noqa: BLE001 - reported in words below
        did = f"raised {type(error).__name__}: {error}"
    if did:
        fail_in("04.1", "line 3 of the log holds two NUL bytes inside its JSON text, "
                "which no crash of an append-only writer leaves: parse_log should "
                f"refuse it with CorruptLog, and it {did}")
    if lesson.parse_log(good, path).entries != A_FINISHED_DAY:
        fail_in("04.1", "parse_log, given a whole log of the day's 4 messages, should "
                "find them, and no other entry")
    path.write_bytes(damaged)
    with lesson.SessionLog(sessions, "quest-1") as log:
        with raises(lesson.CorruptLog, "line 3 is damaged and the log was taken over "
                    "anyway"):
            log.open_for_append()
        path.write_bytes(good)      # the user mends the line, as the error says
        try:
            history = log.open_for_append()
            log.append({"role": "user", "content": "And the guard?"})
        except lesson.CorruptLog as error:
            pytest.fail("the damaged line was mended by hand, as CorruptLog asked, "
                        "and the same writer asked to resume again; it refused with "
                        f"CorruptLog once more ({error}), without reading the log as "
                        "it is now: a refusal is no verdict on the file for ever",
                        pytrace=False)
    assert history == A_FINISHED_DAY and path.read_bytes() == good + line(
        {"role": "user", "content": "And the guard?"}), (
        "the mended log holds the day's 4 messages; the same writer, resuming again, "
        f"should hand them back and append after them. It handed back {len(history)} "
        f"message(s), and the log ends {path.read_bytes()[-80:]!r}")


@pytest.mark.task("04.3")
def test_a_writer_taking_its_log_over_again_reads_it_as_it_is_then(lesson, sessions):
    """A writer that took its log over once and closed it, asked to take it over
    again, reads the log as it is then: a person may have mended a line by hand in the
    meantime, the file keeping its size, and its modification time too (a tool that
    keeps it, `touch -r`, a restore with rsync -t). What it read the first time, and
    the file's size and times, are no promise about its bytes now."""
    path = write_log(sessions, [ASK, BUY_THREE])
    with lesson.SessionLog(sessions, "quest-1") as log:
        try:
            log.open_for_append()
        except NotImplementedError:
            raise                           # a task not written yet says so itself
        except Exception as error:  # noqa: BLE001 - reported in words below
            pytest.fail("a log of a question and three calls without results should "
                        f"be taken over, and the writer raised {described(error)}",
                        pytrace=False)
        log.close()
        repaired = path.read_bytes()
        mended = repaired.replace(b"a rope and a torch.", b"a rope and a flute.", 1)
        if mended == repaired:
            pytest.fail("the writer took over a log of a question and three calls "
                        "without results; the question, 'Buy a lantern, a rope and a "
                        "torch.', is no longer in the log as it was written",
                        pytrace=False)
        before = path.stat()
        path.write_bytes(mended)    # a person mends a word, the file keeps its size
        # ... and its time, as a tool that keeps it does
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        expected = [entry for entry in entries_in(path) if "$marker" not in entry]
        try:
            read = [entry for entry in lesson.parse_log(mended, path).entries
                    if "$marker" not in entry]
        except Exception as error:  # noqa: BLE001 - reported in words below
            fail_in("04.1", "parse_log, given a log its writer repaired (a question, "
                    "three calls, a repair marker and three results), raised "
                    f"{described(error)}, where it should read the log")
        if read != expected:
            fail_in("04.1", "a person changed a word of a log's first message in place "
                    "('a torch.' to 'a flute.', the file keeping its size); parse_log, "
                    f"given the log's bytes as they are now, found {len(read)} "
                    f"messages, the first {read[0] if read else None!r}: each call "
                    "makes its state afresh from the bytes it is given")
        try:
            history = log.open_for_append()
        except Exception as error:  # noqa: BLE001 - reported in words below
            pytest.fail("the writer took its log over, repaired it, and was closed; a "
                        "person then changed a word of the first message in place ('a "
                        "torch.' to 'a flute.', the file keeping its size and its "
                        "modification time), and the same writer, asked to take the "
                        "log over again, raised "
                        f"{described(error)}", pytrace=False)
    if history != expected:
        first = history[0].get("content") if history and isinstance(
            history[0], dict) else None
        pytest.fail("the writer took its log over, repaired it, and was closed; a "
                    "person then changed a word of the first message in place ('a "
                    "torch.' to 'a flute.', the file keeping its size and its "
                    "modification time). The same writer, asked to take the log over "
                    f"again, should hand back the {len(expected)} messages the log "
                    f"holds now; it handed back {len(history)}, the first saying "
                    f"{first!r}: a writer reads the log it takes over as it is then, "
                    "never what it read before, whatever the file's size and times",
                    pytrace=False)


@pytest.mark.task("04.3")
def test_a_writer_taking_its_log_over_again_repairs_what_a_crash_left_since(lesson,
                                                                        sessions):
    """A writer that repaired its log once and was closed, asked to take it over again
    after another program's crash left calls without results and a torn line at the
    end, repairs the log again: a repair is made once per crash, not once per writer.
    Skipped, the writer's next line would land after the torn bytes, as damage in the
    middle of the log that every later resume refuses."""
    path = write_log(sessions, [ASK, BUY_THREE], TORN)
    with lesson.SessionLog(sessions, "quest-1") as log:
        try:
            log.open_for_append()
        except NotImplementedError:
            raise                           # a task not written yet says so itself
        except Exception as error:  # noqa: BLE001 - reported in words below
            pytest.fail("a log of a question, three calls without results and a torn "
                        f"line should be taken over, and the writer raised "
                        f"{described(error)}", pytrace=False)
        log.close()
        repaired = path.read_bytes()
        again = {"role": "assistant", "content": None, "tool_calls": [
            tool_call("call_q", "talk_to", npc="guard")]}
        # Another program goes on, and its process dies as it writes a line
        path.write_bytes(repaired + line(again) + TORN)
        try:
            history = log.open_for_append()
            log.append({"role": "user", "content": "Where were we?"})
        except Exception as error:  # noqa: BLE001 - reported in words below
            pytest.fail("the writer repaired its log and was closed; another program "
                        "then added a call and died writing its next line, and the "
                        "same writer, asked to take the log over again, raised "
                        f"{described(error)}", pytrace=False)
    data = path.read_bytes()
    start = repaired + line(again)
    added = data[len(start):] if data.startswith(start) else None
    try:
        found = entries_in_bytes(added) if added is not None and added.endswith(
            b"\n") else None
    except ValueError:
        found = None
    assert found is not None and [entry.get("$marker") for entry in found] == [
        "repair", None, None] and found[0].get("cut_bytes") == len(TORN) and (
        found[0].get("interrupted") == ["call_q"]) and found[1].get(
        "tool_call_id") == "call_q" and found[2].get("content") == "Where were we?", (
        "the writer repaired its log and was closed; another program then added a "
        f"call ('call_q') and died writing its next line ({len(TORN)} torn bytes). "
        "The same writer, taking the log over again, should cut those bytes and "
        "write a repair marker saying so, then the call's result, and its next line "
        "after them: a writer reads the log it takes over as it is then, and a "
        "repair is made once per crash, not once per writer. After the other "
        f"program's line the log holds {added!r}"[:900])
    assert [message.get("tool_call_id") for message in history][-1:] == ["call_q"], (
        "the history handed back should end with the result of the other program's "
        f"open call 'call_q'; it ends {history[-1:]!r}")


# name: (the entries of the log, the bytes after them, the line damaged if any)
TAKEN_OVER = {
    "a torn tail after open calls": ([ASK, BUY_THREE], TORN, None),
    "a last message without its newline": (
        A_FINISHED_DAY[:-1], line(A_FINISHED_DAY[-1])[:-1], None),
    "a whole log": (A_FINISHED_DAY, b"", None),
    "a corrupt line in the middle": (A_FINISHED_DAY, b"", b'{"content": "no role"}'),
}


@pytest.mark.task("04.3")
@pytest.mark.parametrize("durable", [False, True], ids=["plain", "durable"])
@pytest.mark.parametrize("case", list(TAKEN_OVER))
def test_a_takeover_keeps_no_descriptor_but_the_writers_own(lesson, sessions, case,
                                                            durable):
    """A writer, plain or durable, that takes a log over holds one descriptor then, its
    log's, whatever it found: a log it repaired (and read again), a whole one, or a
    corrupt one it refused, when it holds none, even while the error is still held (as
    a caller that reports it holds it). Closed, it holds none. A server resumes
    sessions all day: one descriptor more at each resume, and it runs out of them."""
    entries, tail, damage = TAKEN_OVER[case]
    path = write_log(sessions, entries, tail=tail)
    if damage is not None:
        lines = path.read_bytes().split(b"\n")
        path.write_bytes(b"\n".join([lines[0], damage, *lines[1:]]))
    log = lesson.SessionLog(sessions, "quest-1", durable=durable)
    before = open_descriptors()
    try:
        log.open_for_append()
        refused = None
    except lesson.CorruptLog as error:
        refused = error
    except NotImplementedError:
        raise                           # a task not written yet says so itself
    except Exception as error:          # noqa: BLE001 - reported in words below
        log.close()
        pytest.fail(f"a log with {case} should be taken over, and resuming raised "
                    f"{type(error).__name__}: {error}", pytrace=False)
    held = open_descriptors() - before
    did = "was refused with CorruptLog" if refused else "was taken over"
    del refused     # held until now, as a caller that reports the error holds it
    log.close()
    after = open_descriptors() - before
    expected = 0 if damage is not None else 1
    if held != expected or after:
        fail_in("04.3", f"a log with {case} {did} by a {('plain', 'durable')[durable]} "
                f"writer; the writer should then hold "
                f"{expected} descriptor(s) (its log's, if it took the log over), "
                f"and it holds {held}, {after} once closed: each resume leaves "
                f"{max(held - expected, after)} more open, and a process that resumes "
                "sessions all day runs out of them. Close every descriptor you open "
                "to read the log, refused or not")


@pytest.mark.task("04.3")
@pytest.mark.parametrize("before", ["no log yet", "an empty log"])
def test_a_new_sessions_first_message_is_the_first_line_of_its_log(lesson, sessions,
                                                                    before):
    """A session with no log yet, or with an empty one (a writer that failed before
    its first line leaves that): the writer that takes it over adds nothing, so its
    first message is the log's first line, and the log holds that line alone."""
    path = sessions / "quest-1.jsonl"
    if before == "an empty log":
        path.write_bytes(b"")

    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append(ASK)
        repaired = log.repaired

    data = path.read_bytes()
    assert data == line(ASK), (
        f"{before}: the first append should leave the log holding its one line, "
        f"{line(ASK)!r}; the log holds {data!r}")
    assert repaired is None, (
        f"{before}: nothing was torn and no call was open, so there is no repair "
        f"marker; self.repaired is {repaired}")


@pytest.mark.key
@pytest.mark.task("04.3")
def test_the_repair_is_written_to_the_log_once(resume, sessions):
    """A second resume finds nothing left to repair and adds nothing."""
    path = write_log(sessions, [ASK, BUY_THREE, result("call_z")])

    first, log = resume()
    log.close()
    after_first = path.read_bytes()
    second, log = resume()
    log.close()

    assert path.read_bytes() == after_first, (
        "the second resume wrote to the log again: the repair must be written once, so "
        "that the "
        "next resume finds every call answered")
    entries = entries_in(path)
    assert len(markers(entries)) == 1, (
        f"one repair, one marker: found {markers(entries)}"
    )
    check_marker(markers(entries)[0], b"", CALL_ORDER[1:], "nothing was cut, and of "
                 f"the calls {CALL_ORDER} the first had its result already")
    answers = [e["tool_call_id"] for e in entries if e.get("role") == "tool"]
    assert answers == CALL_ORDER, (
        f"each call answered exactly once, in order: {answers}"
    )
    assert second.messages == first.messages


@pytest.mark.task("04.3")
def test_the_repair_is_recorded_by_a_marker_that_is_not_a_message(
    lesson, resume, sessions
):
    """A {"$marker": "repair"} line comes before the made-up results;
    load() leaves it out."""
    path = write_log(sessions, [ASK, BUY_THREE])

    agent, log = resume()

    entries = entries_in(path)
    assert entries[:2] == [ASK, BUY_THREE], "the repair only adds to the end of the log"
    assert len(entries) > 2, "resuming with an unanswered call should append a repair"
    assert entries[2].get("$marker") == "repair", (
        "the line after the last original one should be the repair marker; it is "
        f"{entries[2]}"
    )
    check_marker(entries[2], b"", CALL_ORDER, "nothing was cut, and the calls "
                 f"{CALL_ORDER} were open")
    assert [e.get("tool_call_id") for e in entries[3:]] == CALL_ORDER
    assert log.repaired == entries[2], (
        "log.repaired reports the marker this writer wrote"
    )
    assert markers(agent.messages) == [] and markers(log.load()) == [], (
        "a marker is not a message: neither the agent nor load() may return it (the "
        "model would "
        "refuse a message without a role)")


# --- 04.1 and 04.3: a torn tail -------------------------------------------------------


@pytest.mark.key
@pytest.mark.task("04.1")
@pytest.mark.task("04.3")
def test_a_torn_last_line_is_cut_off_and_reported(resume, sessions):
    """Half a line at the end is cut;
    the marker says how many bytes, and the rest is untouched."""
    path = write_log(sessions, A_FINISHED_DAY, tail=TORN)
    whole = path.read_bytes()[:-len(TORN)]

    agent, log = resume_whole(resume, path, whole, "half a line")

    assert agent.messages == A_FINISHED_DAY, (
        f"the complete messages are the history; got {agent.messages}"
    )
    data = path.read_bytes()
    assert data.startswith(whole), "the repair must not change any complete line"
    assert TORN not in data, (
        f"the torn bytes should be cut off; the log ends {data[-120:]!r}"
    )
    repair = markers(entries_in(path))
    assert repair, (
        f"the {len(TORN)} torn bytes are gone, but the log holds no repair marker: "
        "nothing in it says that bytes were cut, or how many")
    assert len(repair) == 1, f"one cut, one repair marker; the log holds {repair}"
    check_marker(repair[0], TORN, [], f"{len(TORN)} torn bytes were cut and no call "
                 "was open")
    assert log.repaired == repair[0]


@pytest.mark.task("04.1")
@pytest.mark.task("04.3")
@pytest.mark.parametrize(
    "tail",
    [
        b"\x00" * 300,
        b"\xff\xfe\x00garbage",
        '{"role": "user", "content": "caf'.encode() + "é".encode()[:1],
        b'[1, 2, 3]',
        b'{"content": "no role"}',
        line(A_FINISHED_DAY[0])[:-1] + b"\x00" * 100,
        b"{",
        b"\x00",
    ],
    ids=[
        "zero bytes",
        "garbage",
        "half a character",
        "JSON, not an object",
        "an object that is no message",
        "a whole message, then zero bytes where its newline was",
        "one byte, the first of a line",
        "one zero byte",
    ],
)
def test_zero_bytes_or_garbage_at_the_tail_count_as_torn(resume, sessions, tail):
    """Whatever follows the last newline and is not a complete message is torn,
    and is cut: however few its bytes, down to one (a crash may cut a write after its
    first byte), since what is left of it would start the next line."""
    path = write_log(sessions, A_FINISHED_DAY, tail=tail)
    whole = path.read_bytes()[:-len(tail)]

    agent, _ = resume_whole(resume, path, whole, f"a torn tail {tail[:20]!r}")

    assert agent.messages == A_FINISHED_DAY
    entries = entries_in(path)
    assert entries[:4] == A_FINISHED_DAY and [
        e.get("$marker") for e in entries[4:]
    ] == [
        "repair"
    ], f"expected the four messages and one repair marker, found {entries[4:]}"
    check_marker(entries[4], tail, [], f"a torn tail of {len(tail)} bytes was cut and "
                 "no call was open")


@pytest.mark.task("04.1")
@pytest.mark.task("04.3")
@pytest.mark.parametrize("written", ["by this course", "by another program"])
def test_a_complete_last_message_missing_only_its_newline_is_kept(resume, sessions,
                                                                  written):
    """The last message is whole, only its newline is missing:
    keep it, byte for byte as it was written, and add the newline."""
    last = (line(A_FINISHED_DAY[-1])[:-1] if written == "by this course"
            else json.dumps(A_FINISHED_DAY[-1], separators=(",", ":")).encode())
    path = write_log(sessions, A_FINISHED_DAY[:-1], tail=last)
    before = path.read_bytes()

    agent, log = resume()

    assert agent.messages == A_FINISHED_DAY, (
        "a complete JSON message without its newline is not torn: it must be kept; "
        f"the agent holds {len(agent.messages)} of 4 messages")
    assert entries_in(path) == A_FINISHED_DAY, (
        "the newline should be added, and nothing else"
    )
    after = path.read_bytes()
    assert after == before + b"\n", (
        f"the last line, whole, written {written} as {last!r}, lacked only its "
        "newline: the newline should be added after its bytes as they were, and "
        f"nothing else changed; the log now ends {after[-(len(last) + 40):]!r}")
    assert log.repaired is None, (
        "nothing was cut and no call was open: no repair marker"
    )


@pytest.mark.key
@pytest.mark.task("04.3")
@pytest.mark.parametrize("tail", [TORN, line(A_FINISHED_DAY[-1])[:-1], b""],
                         ids=["torn", "missing newline", "whole"])
def test_the_next_append_starts_on_a_clean_line(resume, sessions, model, tail):
    """After a resume, the new turn's messages are lines of their own."""
    missing_newline = tail == line(A_FINISHED_DAY[-1])[:-1]
    path = write_log(
        sessions, A_FINISHED_DAY[:-1] if missing_newline else A_FINISHED_DAY, tail=tail
    )
    model.add(say("At dawn."))

    agent, _ = resume()
    agent.run("When does the guard open the gate?")

    found = [e for e in entries_in(path) if "$marker" not in e]
    assert found == agent.messages, (
        "the log should hold exactly the agent's messages, each on its own line"
    )
    assert found[-2:] == [
        {"role": "user", "content": "When does the guard open the gate?"},
        {"role": "assistant", "content": "At dawn."},
    ]


# name: (the log's whole entries, the bytes after them)
DAMAGED_TAILS = {
    "torn": (A_FINISHED_DAY, TORN),
    "missing newline": (A_FINISHED_DAY[:-1], line(A_FINISHED_DAY[-1])[:-1]),
    # Its writer was killed in its first write: no line was ever whole
    "nothing but half a line": ([], TORN),
    # A crash right after the first byte of a write: one byte is torn bytes too
    "one byte": (A_FINISHED_DAY, b"{"),
}


@pytest.mark.task("04.3")
@pytest.mark.parametrize("case", list(DAMAGED_TAILS))
def test_appending_without_resuming_first_still_starts_on_a_clean_line(
    lesson, sessions, case
):
    """A plain append to a damaged tail repairs it first:
    whoever writes takes the log over."""
    entries, tail = DAMAGED_TAILS[case]
    path = write_log(sessions, entries, tail=tail)
    # The messages it holds whole: a last one lacking only its newline is one of them
    whole = A_FINISHED_DAY if entries else []

    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": "Straight to the point."})

    found = [e for e in entries_in(path) if "$marker" not in e]
    assert found == [
        *whole,
        {"role": "user", "content": "Straight to the point."},
    ], (f"a plain append to a log with a damaged tail ({case}) should leave the whole "
        f"messages, then the new one, each on a line of its own; the log holds "
        f"{found}")
    if case != "missing newline":
        repair = markers(entries_in(path))
        assert len(repair) == 1, (
            f"{case}: the torn bytes were cut, so one repair marker says so; the log "
            f"holds {repair}")
        check_marker(repair[0], tail, [], f"{case}: {len(tail)} torn bytes were cut "
                     "and no call was open")


# --- 04.1: damage before the tail -----------------------------------------------------


@pytest.mark.key
@pytest.mark.task("04.1")
def test_a_corrupt_line_in_the_middle_raises_naming_the_file_line_and_offset(
    lesson, resume, sessions
):
    """CorruptLog (a ValueError) names the file, the line number and its byte offset;
    nothing changes."""
    good = line(A_FINISHED_DAY[0])
    bad = b'{"role": "assistant", "content": "The eld\x00\x00\x00\n'
    path = sessions / "quest-1.jsonl"
    path.write_bytes(good + bad + b"".join(line(m) for m in A_FINISHED_DAY[1:]) + TORN)
    before = snapshot(sessions)

    with raises(lesson.CorruptLog,
                "line 2 is damaged and the session was resumed anyway: only the "
                "bytes after the last newline can be torn; a damaged whole line "
                "must stop the load") as damaged:
        resume()

    message = str(damaged.value)
    assert isinstance(damaged.value, ValueError), "CorruptLog should be a ValueError"
    if str(path) not in message:
        # Whose words: parse_log's (04.1), or the path the takeover gave it (04.3)?
        try:
            lesson.parse_log(path.read_bytes(), path)
        except lesson.CorruptLog as direct:
            named = str(path) in str(direct)
        else:
            named = False
        fail_in("04.3" if named else "04.1", (
            f"the error should name the file {path}; it says: {message}"
            + (" (parse_log, given the log's path, names it: the writer that takes "
               "the log over should give parse_log the log's path)" if named else "")))
    assert "line 2" in message, f"the damaged line is line 2; the error says: {message}"
    assert str(len(good)) in message, (
        f"line 2 starts at byte offset {len(good)}; the error should say so: {message}")
    assert (damaged.value.line, damaged.value.offset) == (2, len(good))
    if snapshot(sessions) != before:
        # parse_log only reads: whatever changed, the takeover (04.3) changed it
        fail_in("04.3", "a damaged log must be left exactly as it is (not cut at the "
                "damage, its torn tail not cut either, not repaired), and no other "
                "file created: the takeover changed it before CorruptLog was raised")

    with raises(lesson.CorruptLog, "load() read past a damaged line 2"):
        lesson.SessionLog(sessions, "quest-1").load()
    assert snapshot(sessions) == before


@pytest.mark.task("04.1")
@pytest.mark.parametrize("damage", [
    b"\x00" * 40 + b"\n",
    b'{"content": "no role"}\n',
    b'{"role": "user", "content": "caf\xe9"}\n',
    b'{"role": "user", "content": "cut short\n',
], ids=["zero bytes", "no role", "not UTF-8", "half a line"])
@pytest.mark.parametrize("where", ["in the middle", "last whole line"])
def test_damage_before_the_tail_is_never_taken_for_a_torn_tail(
    lesson, resume, sessions, damage, where
):
    """Only the bytes after the last newline can be torn;
    a damaged whole line is an error."""
    after = (
        b"".join(line(m) for m in A_FINISHED_DAY[1:])
        if where == "in the middle"
        else b""
    )
    path = sessions / "quest-1.jsonl"
    path.write_bytes(line(A_FINISHED_DAY[0]) + damage + after)
    before = snapshot(sessions)

    with raises(lesson.CorruptLog,
                f"a damaged whole line ({where}) was taken for a torn tail or "
                "skipped: only the bytes after the last newline can be torn",
                ) as damaged:
        resume()

    assert damaged.value.line == 2, (
        f"the damage is on line 2; CorruptLog says line {damaged.value.line}"
    )
    assert snapshot(sessions) == before, "a damaged log must be left exactly as it is"


def joined(*entries, end=b""):
    """The entries' JSON, one after another with `end` after each and no newline."""
    return b"".join(line(entry)[:-1] + end for entry in entries)


@pytest.mark.key
@pytest.mark.task("04.1")
@pytest.mark.parametrize("whole, tail, number", [
    (A_FINISHED_DAY[:2], joined(*A_FINISHED_DAY[2:]), 3),
    ([], joined(*A_FINISHED_DAY, end=b"\r"), 1),
    (A_FINISHED_DAY[:3], joined(A_FINISHED_DAY[3]) + b" and so on", 4),
    ([], b"\r" + joined(*A_FINISHED_DAY, end=b"\r"), 1),
    (A_FINISHED_DAY[:3], b'["a note"]' + joined(A_FINISHED_DAY[3]), 4),
    # Whole values with no brace in them: a tail need not hold an object to hold more
    (A_FINISHED_DAY[:3], b'["a note"]\r["another"]\r', 4),
    # Zeros a crash left after a whole message, then a whole message after them: the
    # zeros are a crash's, but what follows them is a second write, no crash's
    (A_FINISHED_DAY[:3], joined(A_FINISHED_DAY[3]) + b"\x00" * 16 + joined(ASK), 4),
], ids=["two messages joined", "lines ended by a carriage return",
        "a message, then text", "lines ended by a carriage return, the first empty",
        "a value that is no object, then a message",
        "values that are no objects, ended by carriage returns",
        "a message, zero bytes, then another message"])
def test_a_tail_no_crash_could_leave_is_damage_not_a_torn_line(
    lesson, resume, sessions, whole, tail, number
):
    """A crash cuts one write short, and every line is written with its newline: what
    it leaves after the last newline is the start of one line. A whole JSON value with
    more after it (two messages joined, lines ended by a bare carriage return, as
    another program may write them, whatever the tail's first byte; a message, the zero
    bytes a crash leaves, then another message) is no such start: cut as torn, it would
    take whole messages with it. It is damage, named by its line, and the log is left
    as it is."""
    path = write_log(sessions, whole, tail=tail)
    before = snapshot(sessions)
    offset = len(path.read_bytes()) - len(tail)
    try:
        state = lesson.parse_log(path.read_bytes(), path)
    except lesson.CorruptLog as error:
        where = (error.line, error.offset)
        if where != (number, offset):
            fail_in("04.1", f"the log's bytes after its last newline "
                    f"({tail[:50]!r}...) hold a whole JSON value and more: CorruptLog "
                    f"should name line {number} at byte offset {offset}; it names "
                    f"line {where[0]} at byte offset {where[1]}")
        said = str(error)
        if not (str(path) in said and f"line {number}" in said
                and str(offset) in said):
            fail_in("04.1", f"the log's bytes after its last newline ({tail[:50]!r}"
                    "...) are damage: its words should name the file, "
                    f"{path}, line {number} and byte offset {offset}, as for a damaged "
                    "line anywhere else, so that the user can find it with an editor "
                    f"and mend it; they say: {said}")
        told = lesson.CorruptLog(path, number, offset, lesson.WHOLE_LINE_AND_MORE)
        if said != str(told):
            fail_in("04.1", f"the log's bytes after its last newline ({tail[:50]!r}"
                    "...) are its last line, and a crash may tear a last line: the "
                    "error should say why this one is not forgiven, in the words of "
                    f"WHOLE_LINE_AND_MORE ({lesson.WHOLE_LINE_AND_MORE!r}), not only "
                    "that it is no JSON (a torn line is none either). It says: "
                    f"{said}; CorruptLog made of that file, line, offset and reason "
                    f"says: {told}")
        if not (isinstance(error.path, type(path)) and error.path == path):
            fail_in("04.1", "the error's `path` should be the log's path as parse_log "
                    f"was given it, {path!r}, so that a program that catches the "
                    f"error can open that file; it is {error.path!r}")
    else:
        fail_in("04.1", f"the log's bytes after its last newline ({tail[:50]!r}...) "
                "hold a whole JSON value with more after it, which no crash leaves (a "
                "line is written with its newline): parse_log should raise CorruptLog "
                f"naming line {number}, but read {len(state.entries)} line(s) and "
                f"took {len(tail)} bytes for a torn line, which a repair would cut")
    with raises(lesson.CorruptLog, f"line {number} holds a whole JSON value with more "
                "after it, and the session was resumed anyway: a repair that cuts it "
                "as a torn line loses whole messages"):
        resume()
    if snapshot(sessions) != before:
        fail_in("04.3", "a damaged log must be left exactly as it is: the takeover "
                "changed it before CorruptLog was raised")


# --- loading only reads ---------------------------------------------------------------


@pytest.mark.key
@pytest.mark.task("04.1")
@pytest.mark.parametrize("case", ["torn tail", "open tool calls"])
def test_loading_returns_the_complete_messages_and_changes_nothing(
    lesson, sessions, case
):
    """load() skips a torn tail and repairs nothing: repairing is the writer's job."""
    if case == "torn tail":
        write_log(sessions, A_FINISHED_DAY, tail=TORN)
        expected = A_FINISHED_DAY
    else:
        write_log(sessions, [ASK, BUY_THREE])
        expected = [ASK, BUY_THREE]
    before = snapshot(sessions)

    with lesson.SessionLog(sessions, "quest-1") as log:
        loaded = log.load()

    assert loaded == expected, (
        f"load() should return the complete messages as they are; got {loaded}"
    )
    assert snapshot(sessions) == before, (
        "load() changed the folder: loading only ever reads"
    )


@pytest.mark.task("04.1")
def test_parse_log_hands_each_caller_a_state_of_its_own(lesson, sessions):
    """parse_log only reads, and every call makes its state afresh: a caller that adds
    to the entries it got back, or changes one of them or a part of one (an agent's
    history grows from them), changes nothing that the next reader of the same bytes
    is told; an empty log too (a new session whose writer died before its first
    line), whose state is no one's to share."""
    path = sessions / "quest-1.jsonl"
    data = b"".join(line(entry) for entry in A_FINISHED_DAY)
    first = lesson.parse_log(data, path)
    first.entries.append({"role": "user", "content": "a caller's own message"})
    if first.entries and isinstance(first.entries[0], dict):
        first.entries[0]["content"] = "changed by a caller"
    # A nested part too: the call of the second entry, and its list of calls
    calls = (first.entries[1].get("tool_calls") if len(first.entries) > 1
             and isinstance(first.entries[1], dict) else None)
    if isinstance(calls, list) and calls and isinstance(calls[0], dict):
        calls[0]["function"] = {"name": "buy", "arguments": '{"item": "changed"}'}
        calls.append(tool_call("call_by_a_caller", "buy", item="rope"))

    second = lesson.parse_log(data, path)

    assert second.entries == A_FINISHED_DAY, (
        "a caller added a message to the entries parse_log handed it, changed the "
        "first, and changed the call the second holds (a nested part of it); "
        "parse_log, given the same bytes again, should read the log's 4 messages "
        f"afresh. It handed back {len(second.entries)} entries: {second.entries}. "
        "The state one caller got, or a part of it, is shared with the next")

    empty = lesson.parse_log(b"", path)
    empty.entries.append({"role": "user", "content": "a caller's own message"})
    again = lesson.parse_log(b"", path).entries
    assert again == [], (
        "a caller added a message to the entries parse_log handed it for an empty log; "
        "parse_log, given an empty log again (another session's, say), should find no "
        f"entry. It handed back {again!r}: the state one caller got is shared with the "
        "next")


@pytest.mark.task("04.1")
def test_a_log_changed_in_place_is_read_as_it_is_now(lesson, sessions):
    """A person mends a word of the log by hand, the file keeping its size: the next
    load reads the log as it is now, never the state an earlier read of it found."""
    path = write_log(sessions, A_FINISHED_DAY)
    lesson.SessionLog(sessions, "quest-1").load()
    mended = [*A_FINISHED_DAY[:-1], {"role": "assistant",
                                     "content": "The elder wants a torch and a robe."}]
    path.write_bytes(path.read_bytes().replace(b"wants a torch and a rope",
                                               b"wants a torch and a robe"))

    loaded = lesson.SessionLog(sessions, "quest-1").load()

    assert loaded == mended, (
        "the log's last message was mended in place ('a rope.' to 'a robe.', the "
        "same size) after a first load; a second load should read the log as it is "
        f"now, and returned {loaded[-1:] or 'nothing'} last: parse_log turns the bytes "
        "it is given into a state, whatever it found in the file before")


# --- forks count messages, not lines --------------------------------------------------


@pytest.mark.task("04.1")
def test_a_fork_copies_whole_messages_and_counts_markers_out(lesson, resume, sessions):
    """Forking a repaired, then torn, log:
    `upto` counts messages, and torn bytes stay behind."""
    path = write_log(sessions, [ASK, BUY_THREE])
    _, log = resume()       # repaired: marker + three results
    log.close()
    with open(path, "ab") as raw:
        raw.write(TORN)     # and then a crash mid-write
    source = path.read_bytes()

    lesson.fork(sessions, "quest-1", "all")
    lesson.fork(sessions, "quest-1", "first-four", upto=4)

    assert path.read_bytes() == source, "forking must not change the source"
    whole = entries_in(sessions / "all.jsonl")
    assert TORN not in (sessions / "all.jsonl").read_bytes() and len(whole) == 6, (
        "the fork should hold the six whole lines (two messages, a marker, three "
        f"results), no torn bytes: {whole}"
    )
    with lesson.SessionLog(sessions, "first-four") as forked:
        assert forked.load() == whole[:2] + whole[3:5], (
            "upto=4 keeps the first four messages"
        )
    meta = json.loads((sessions / "first-four.meta.json").read_text(encoding="utf-8"))
    assert meta["forked_at"] == 4, f"forked_at counts messages, not lines: {meta}"


def calls_answered_in_order(entries, note=""):
    """Fail in words unless the log's `entries` are a turn's three calls, their three
    results in the order the model made the calls, then the next message and its
    answer."""
    roles = [entry.get("role") for entry in entries]
    expected = ["user", "assistant", "tool", "tool", "tool", "user", "assistant"]
    assert roles == expected, (
        "the log should hold the calls, their three results, then the next message"
        f"{note}: {roles}")
    asked = [c["id"] for c in entries[1].get("tool_calls") or []]
    answered = [entry.get("tool_call_id") for entry in entries[2:5]]
    assert answered == asked, (
        "the results should answer the calls in the order the model made them, "
        f"{asked}; they answer {answered}")


def answered_as_known(lesson, calls, answers, stopped, first=1):
    """Fail in words unless, of the calls whose run `stopped` in call number `first`
    (0 for the first), the `answers` to that call and those after it say that it may
    have run and that each later one never started."""
    places = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh",
              "eighth", "ninth", "tenth", "eleventh", "twelfth")
    expected = [("may have run", lesson.interrupted_result(calls[first]))] + [
        ("never started", lesson.unstarted_result(later))
        for later in calls[first + 1:]]
    for number, (answer, (known, wanted)) in enumerate(zip(answers, expected)):
        got = answer.get("content") if isinstance(answer, dict) else answer
        assert answer == wanted, (
            f"{stopped}: the {places[first + number]} call {known}, and its answer "
            f"should say that, no more and no less: {wanted['content']!r} (from "
            f"{'unstarted_result' if number else 'interrupted_result'}); it says "
            f"{got!r}")


def interrupted_in_buy(town):
    """The town's tools, but Ctrl-C (a real SIGINT) arrives inside every purchase; the
    arguments of each purchase it stopped are kept in the tools' `stopped`, in turn."""
    stopped = []

    def buy_interrupted(**arguments):
        stopped.append(arguments)
        # Python's own Ctrl-C handler, even where this process was started with SIGINT
        # ignored (in the background, without job control)
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            os.kill(os.getpid(), signal.SIGINT)     # Ctrl-C, pressed in the tool
            time.sleep(1)
        finally:
            signal.signal(signal.SIGINT, previous)
        return "never"

    return SimpleNamespace(schemas=town.schemas, stopped=stopped,
                           functions={**town.functions, "buy": buy_interrupted})


def elder_torch_and_rope(*more):
    """A model that asks for three calls at once (the elder, a torch, a rope), and
    the calls in `more`, then asks where they were. The three calls' ids do not sort
    in the order the model made the calls, as a server's random ids need not."""
    return ScriptedModel([use(raw_call("talk_to", '{"npc": "elder"}', "call_q9F"),
                              raw_call("buy", '{"item": "torch"}', "call_wK2"),
                              raw_call("buy", '{"item": "rope"}', "call_Ab7"), *more),
                          say("Where were we?")])


def stopped_by_ctrl_c(agent, message, place="second"):
    """Run `message`, failing in words unless Ctrl-C in its `place` call stops it."""
    with raises(KeyboardInterrupt, f"Ctrl-C was pressed inside the {place} call, "
                "and the run went on as if nothing had happened"):
        agent.run(message)


def three_calls_left_by_ctrl_c(agent):
    """Stop a run of three calls by Ctrl-C inside the second; the calls memory holds,
    failing in words unless there are three."""
    stopped_by_ctrl_c(agent, "Talk to the elder and buy a torch.")
    calls = [call for message in agent.messages
             for call in message.get("tool_calls") or ()]
    assert len(calls) == 3, (
        f"the model asked for three calls; memory holds {len(calls)}: {calls}")
    return calls


@contextlib.contextmanager
def agent_keeping_the_log(lesson, sessions, model, tools):
    """An agent of `model` with `tools` that keeps the log quest-1, while it is open."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        yield lesson.Agent(model.client(), model=model.model, tools=tools, session=log)


def refusal_of_next_run(agent, message="Go on."):
    """The model's words refusing the request the agent's next run sends, or None.
    Fails in words when a purchase of interrupted_in_buy runs during it, though the
    model asks for none (Ctrl-C stops it again): the calls a stopped run left open are
    answered, never run again."""
    stopped = getattr(agent.tools, "stopped", None)
    before = list(stopped) if isinstance(stopped, list) else None
    try:
        agent.run(message)
    except openai.BadRequestError as error:
        return error.message
    except KeyboardInterrupt:
        if before is None or stopped == before:
            raise                   # not a purchase of this test: let it through
        again = stopped[len(before):]
        pytest.fail(f"the run after one that Ctrl-C stopped inside a tool call ran a "
                    f"purchase again ({again}), though the model asked for none, and "
                    "Ctrl-C stopped it once more. A call the stopped run left "
                    "open may have run already (a lantern bought twice costs twice): "
                    "it is answered with interrupted_result or unstarted_result, "
                    "never run again (task 04.4)", pytrace=False)
    return None


def memory_holds_the_log(agent, entries, note=""):
    """Fail in words unless the agent's memory holds the log's `entries`, no more."""
    assert agent.messages == entries, (
        f"memory and log should hold the same conversation{note}; memory holds "
        f"{[m.get('role') for m in agent.messages]}, the log "
        f"{[entry.get('role') for entry in entries]}")


@pytest.mark.task("04.4")
def test_a_run_stopped_by_ctrl_c_in_its_second_tool_call_goes_on(
        lesson, sessions, town):
    """Ctrl-C (a real SIGINT) inside the second of three tool calls, then the next
    message: no message lands between a call and its results, in memory or in the log,
    each open call gets one answer, in call order, saying what is known of it, and the
    model accepts the request."""
    tools = interrupted_in_buy(town)
    model = elder_torch_and_rope()
    with agent_keeping_the_log(lesson, sessions, model, tools) as agent:
        with pytest.raises(KeyboardInterrupt):
            agent.run("Talk to the elder and buy a torch.")
        refused = refusal_of_next_run(agent)
    if refused is not None:     # outside the except: the words come first, alone
        pytest.fail("after a run stopped inside its second tool call, the next run "
                    f"sent a call without its result: {refused}. The calls the "
                    "stopped run left open still had no result when the next user "
                    "message was recorded (task 04.4)", pytrace=False)
    entries = entries_in(sessions / "quest-1.jsonl")
    calls_answered_in_order(entries)
    answered_as_known(lesson, entries[1]["tool_calls"], entries[3:5],
                      "Ctrl-C inside the second of three calls")


def ferry_that_raises(**arguments):
    raise RuntimeError("the ferry did not run today; the crossing was interrupted")


def elder_who_sleeps(**arguments):
    # A tool's own answer may begin as a made-up one does
    return "error: the call to the elder went unanswered: he sleeps until noon"


def elder_who_did_not_run(**arguments):
    # A tool's own answer in a made-up answer's very words: how it begins, what it says
    # of the call, how it ends. Only the whole answer, for its call, tells them apart
    return ("error: the call to the elder did not run: he sleeps, so it may or may not "
            "have run by noon. Call it again if it is still needed.")


@pytest.mark.task("04.4")
@pytest.mark.parametrize("first", [ferry_that_raises, elder_who_sleeps,
                                   elder_who_did_not_run, "another call's"],
                         ids=["raises", "answers-with-an-error",
                              "answers-in-a-made-up-answers-words",
                              "answers-in-another-calls-made-up-words"])
def test_a_failed_call_before_the_stopped_one_is_not_taken_for_a_made_up_answer(
        lesson, sessions, town, first):
    """The first of three calls fails (its result is run_tool's error, or the tool's
    own answer, "error: the call ...", whose words read much like a made-up answer's,
    or are word for word what the made-up answer of another call of the reply says),
    and Ctrl-C arrives inside the second: that one may have run, and the third never
    started, as after any run stopped there. A result a call really returned is no
    answer a settle made up, whatever its words: a made-up answer is one for the call
    it answers."""
    tools = interrupted_in_buy(town)
    tools.functions["talk_to"] = first
    if first == "another call's":
        def elder_who_reports_the_rope(**arguments):
            # The words of the made-up answer to the rope, the reply's third call
            rope = agent.messages[-1]["tool_calls"][2]
            return lesson.unstarted_result(rope)["content"]
        tools.functions["talk_to"] = elder_who_reports_the_rope
    model = elder_torch_and_rope()
    with agent_keeping_the_log(lesson, sessions, model, tools) as agent:
        stopped_by_ctrl_c(agent, "Talk to the elder and buy a torch.")
        refused = refusal_of_next_run(agent)
    if refused is not None:     # outside the except: the words come first, alone
        pytest.fail("after a call that failed and Ctrl-C inside the next, the next run "
                    f"sent calls without their results: {refused} (task 04.4)",
                    pytrace=False)
    entries = entries_in(sessions / "quest-1.jsonl")
    calls_answered_in_order(entries)
    answered_as_known(lesson, entries[1]["tool_calls"], entries[3:5],
                      "Ctrl-C inside the second of three calls, after the first "
                      f"failed with {entries[2].get('content')!r}")
    memory_holds_the_log(agent, entries)


@pytest.mark.task("04.1")
@pytest.mark.parametrize("where", ["in the middle", "last line"])
def test_a_message_holding_unicode_line_separators_resumes_whole(lesson, resume,
                                                                  sessions, where):
    """U+2028, U+2029, U+0085 and the like are text inside a line (json writes them as
    they are): only b"\\n" ends a line, so the log resumes unchanged."""
    odd = {"role": "user",
           "content": "a\u2028b\u2029c\u0085d\x1ce\x1df\x1eg\x0bh\x0ci\rj"}
    entries = ([odd, *A_FINISHED_DAY] if where == "in the middle"
               else [*A_FINISHED_DAY, odd])
    path = write_log(sessions, entries)
    before = path.read_bytes()

    try:
        agent, _ = resume()
    except lesson.CorruptLog as error:
        refused = error
    else:
        refused = None
    if refused is not None:     # outside the except: the words come first, alone
        pytest.fail("a log whose message holds U+2028 (and U+2029, U+0085) was "
                    "refused as damaged: those characters are text inside one line, "
                    "and only the newline byte ends a line of a log, so the message "
                    "was cut in pieces that are no JSON (CorruptLog said line "
                    f"{refused.line}: {refused})", pytrace=False)

    assert agent.messages == entries, (
        f"the message with line separators should come back whole; the agent holds "
        f"{agent.messages}")
    assert path.read_bytes() == before, (
        "a whole log must be resumed without a byte written")


@pytest.mark.task("04.1")
@pytest.mark.task("04.3")
@pytest.mark.parametrize("torn", [
    TORN,
    (TORN + b"x" * 80)[:80],
    (TORN + b"x" * 81)[:81],
    (TORN + b"x" * 500)[:500],
    TORN + "é".encode()[:1],
    "é".encode() * 100,
    b"x" + "é".encode() * 100,
    "\u20ac".encode()[:2],
    b"  \t \r",
    b'   {"role": "user", "content": "pad',
    b"{",
], ids=["short", "80 bytes", "81 bytes", "long", "cut inside a character",
        "long, not ASCII", "its 80th byte inside a character", "two bytes of three",
        "blanks", "blanks first", "one byte"])
def test_the_repair_marker_previews_the_first_bytes_it_cut(resume, sessions, torn):
    """cut_preview is the first 80 cut bytes, or all of them when fewer were cut,
    counted in bytes, not in characters, as UTF-8 text in which U+FFFD stands for each
    piece that is no whole character. Blanks are cut bytes like any other: shown as
    they were, never trimmed."""
    size = len(torn)
    path = write_log(sessions, A_FINISHED_DAY, tail=torn)

    try:
        resume()
    except NotImplementedError:
        raise                           # a task not written yet says so itself
    except Exception as error:          # noqa: BLE001 - reported in words below
        refused = f"{type(error).__name__}: {error}"
    else:
        refused = None
    if refused is not None:     # outside the except: the words come first, alone
        pytest.fail(f"a log whose torn tail is {torn[:40]!r} (of {size} bytes) should "
                    "resume with the tail cut and one repair marker whose cut_preview "
                    "shows how those bytes began, whatever they are; resuming raised "
                    f"{refused}", pytrace=False)

    found = markers(entries_in(path))
    assert len(found) == 1, (
        f"cutting a torn tail should write one repair marker: {found}")
    assert found[0].get("cut_bytes") == size, (
        f"cut_bytes counts every byte cut, {size}, not only those previewed: "
        f"{found[0]}")
    preview, wanted = found[0].get("cut_preview"), preview_of(torn)
    assert preview == wanted, (
        f"{size} bytes were cut, {torn[:100]!r}: cut_preview should be "
        f"{'all of them' if size <= 80 else 'their first 80'}, decoded as UTF-8 with "
        f"U+FFFD for each piece that is no whole character: {wanted!r} "
        f"({len(wanted)} characters); it is {preview!r}"
        + (f" ({len(preview)} characters)" if isinstance(preview, str) else ""))


@pytest.mark.task("04.3")
def test_calls_open_in_a_last_line_without_its_newline_are_answered_on_new_lines(
        resume, sessions):
    """The last line holds the calls, whole, but without its newline: the newline comes
    first, then the marker and the results, each on its own line."""
    path = write_log(sessions, [ASK], tail=line(BUY_THREE)[:-1])

    agent, _ = resume_whole(resume, path, path.read_bytes() + b"\n",
                            "a last message, whole, without its newline")

    entries = entries_in(path)      # fails, saying where, if a line was glued on
    assert entries[:2] == [ASK, BUY_THREE], (
        f"the two messages should stay as they were, each on its line: {entries[:2]}")
    answered = [e.get("tool_call_id") for e in entries[2:] if "$marker" not in e]
    assert answered == CALL_ORDER, f"each call answered once, in order: {answered}"
    marker = entries[2]
    assert (marker.get("cut_bytes"), marker.get("cut_preview")) == (0, ""), (
        "the newline added after a whole last line cuts nothing: the marker should "
        f"say cut_bytes 0 and an empty cut_preview; it says {marker}")


@pytest.mark.task("04.3")
@pytest.mark.parametrize("answered", [[], ["call_a"]],
                         ids=["no result", "the second answered"])
def test_a_torn_tail_after_open_calls_is_told_by_one_marker(resume, sessions,
                                                           answered):
    """Calls left open, then half a line: the writer cuts the torn bytes and answers
    the calls, and one repair marker says both, the bytes it cut and the calls it
    answers, before their results."""
    entries = [ASK, BUY_THREE, *(result(call_id) for call_id in answered)]
    path = write_log(sessions, entries, tail=TORN)
    whole = path.read_bytes()[:-len(TORN)]
    still_open = [call_id for call_id in CALL_ORDER if call_id not in answered]

    _, log = resume_whole(resume, path, whole, "half a line")

    found = entries_in(path)
    repair = markers(found)
    situation = (f"the calls {still_open} were open and {len(TORN)} torn bytes "
                 "followed them")
    assert len(repair) == 1, (
        f"{situation}: one repair, one marker saying both the cut and the calls; the "
        f"log holds {len(repair)}: {repair}")
    check_marker(repair[0], TORN, still_open, situation)
    added = [entry.get("tool_call_id") for entry in found[len(entries) + 1:]]
    assert found[len(entries)] == repair[0] and added == still_open, (
        f"{situation}: the marker should come right after the whole lines, then a "
        f"result for each of {still_open}, in that order; after the whole lines the "
        f"log holds {found[len(entries):]}")
    assert log.repaired == repair[0], (
        f"log.repaired should be the marker this writer wrote, {repair[0]}; it is "
        f"{log.repaired}")


# Another program's log: the three calls were closed by the user's next message, with
# no result (a gap in the middle, which no repair of the tail can mend), and the
# conversation went on
CLOSED_BY_THE_USER = [ASK, BUY_THREE,
                      {"role": "user", "content": "Never mind, ask the guard."},
                      {"role": "assistant", "content": None, "tool_calls": [
                          tool_call("call_g1", "talk_to", npc="guard"),
                          tool_call("call_g2", "talk_to", npc="elder")]}]
# name: (the log's entries, its tail, the calls this repair answers)
EARLIER_GAPS = {
    "calls open at the end": (CLOSED_BY_THE_USER, b"", ["call_g1", "call_g2"]),
    "a torn tail after a plain answer": (
        [*CLOSED_BY_THE_USER, result("call_g1", "The guard nods."),
         result("call_g2", "The elder sleeps."),
         {"role": "assistant", "content": "The guard nods."}], TORN, []),
}


@pytest.mark.task("04.3")
@pytest.mark.parametrize("case", list(EARLIER_GAPS))
def test_the_marker_names_only_the_calls_its_repair_answers(resume, sessions, case):
    """`interrupted` lists the calls this repair answers, and no other: in a log
    another program wrote, calls of an earlier turn that its user's next message
    closed without a result are no business of the repair (a result for them would
    land after that message), so the marker does not name them either. A marker
    that names a call with no result after it tells a reader of the log something
    that never happened."""
    entries, tail, answered = EARLIER_GAPS[case]
    path = write_log(sessions, entries, tail=tail)
    data = path.read_bytes()
    whole = data[:len(data) - len(tail)]

    _, log = resume_whole(resume, path, whole,
                          "half a line" if tail else "two calls left open")

    found = entries_in(path)
    repair = markers(found)
    situation = (f"{case}, in a log whose earlier calls {CALL_ORDER} the user's next "
                 "message closed without a result")
    if len(repair) != 1:
        fail_in("04.3", f"{situation}: the takeover should write one repair marker; "
                f"the log holds {len(repair)}: {repair}")
    check_marker(repair[0], tail, answered, situation)
    added = [entry.get("tool_call_id") for entry in found[len(entries) + 1:]]
    assert added == answered, (
        f"{situation}: the repair should answer {answered or 'no call'}, after its "
        f"marker; after the whole lines the log holds {found[len(entries):]}")
    assert log.repaired == repair[0], (
        f"log.repaired should be the marker this writer wrote, {repair[0]}; it is "
        f"{log.repaired}")


@pytest.mark.task("04.4")
@pytest.mark.parametrize("talks", [1, 10], ids=["the second of three calls",
                                                "the eleventh of twelve calls"])
def test_an_agent_without_a_log_goes_on_after_ctrl_c_in_a_tool_call(lesson, town,
                                                                     talks):
    """An agent that keeps no log, stopped by Ctrl-C inside the second of three calls,
    or the eleventh of twelve (one reply may make many calls: the message that made
    them then lies far back), goes on as one with a log does: each open call answered
    once, saying what is known of it, and the next request accepted."""
    where = f"the {'second of three' if talks == 1 else 'eleventh of twelve'} calls"
    talk = [call("talk_to", npc="elder")] + [
        call("talk_to", npc=f"villager {number}") for number in range(1, talks)]
    model = ScriptedModel([use(*talk, call("buy", item="torch"),
                               call("buy", item="rope")), say("Where were we?")])
    agent = lesson.Agent(model.client(), model=model.model,
                         tools=interrupted_in_buy(town))
    with pytest.raises(KeyboardInterrupt):
        agent.run("Talk to the elder and buy a torch.")
    refused = refusal_of_next_run(agent)
    if refused is not None:     # the words come alone, outside any except
        pytest.fail(f"an agent without a log, stopped inside {where}, sent the calls "
                    f"left open without results: {refused} (task 04.4: an "
                    "agent without a log goes on as one with a log, and every call "
                    "the stopped run left open is answered, however many calls the "
                    "reply made)", pytrace=False)
    roles = [message.get("role") for message in agent.messages]
    expected = ["user", "assistant", *["tool"] * (talks + 2), "user", "assistant"]
    assert roles == expected, (
        f"the calls, their {talks + 2} results, then the next message; the agent "
        f"holds {roles}")
    answered_as_known(lesson, agent.messages[1]["tool_calls"],
                      agent.messages[2 + talks:4 + talks],
                      f"Ctrl-C inside {where}, with no log", first=talks)


def a_disk_that_fills_up_in_a_purchase(town, path, monkeypatch):
    """The town's tools, but the disk fills up while the first purchase runs: from then
    on every write to the log `path` fails (ENOSPC, nothing written) until the test
    frees room by setting `room[0]` to True again (or to a number: room for that many
    more writes)."""
    room = [True]
    real_write = os.write

    def write(fd, data):
        if room[0] is not True and path.exists():
            found, target = os.fstat(fd), path.stat()
            if (found.st_dev, found.st_ino) == (target.st_dev, target.st_ino):
                if not room[0]:
                    raise OSError(errno.ENOSPC, "No space left on device")
                room[0] -= 1
        return real_write(fd, data)

    def buy_while_the_disk_fills(**arguments):
        room[0] = False
        return town.functions["buy"](**arguments)

    monkeypatch.setattr(os, "write", write)
    functions = {**town.functions, "buy": buy_while_the_disk_fills}
    tools = SimpleNamespace(schemas=town.schemas, functions=functions)
    return tools, room


def three_calls_as_the_disk_fills(town, path, monkeypatch):
    """A model that asks for three calls at once (the elder, a torch, a rope), then
    asks where they were; the disk fills up during the first purchase (see
    a_disk_that_fills_up_in_a_purchase). Gives the model, the tools and `room`."""
    tools, room = a_disk_that_fills_up_in_a_purchase(town, path, monkeypatch)
    model = elder_torch_and_rope()
    return model, tools, room


@pytest.mark.task("04.4")
def test_a_run_stopped_by_a_full_disk_goes_on_once_the_user_made_room(
        lesson, sessions, town, monkeypatch):
    """The disk fills up as the second of three results is written, and is still full
    when the user sends the next message (it fails too); the user makes room and sends
    it again: the calls left open are answered, each saying what is known of it, in the
    log and in memory alike, and the model accepts the request."""
    path = sessions / "quest-1.jsonl"
    model, tools, room = three_calls_as_the_disk_fills(town, path, monkeypatch)
    with agent_keeping_the_log(lesson, sessions, model, tools) as agent:
        with pytest.raises(OSError):
            agent.run("Talk to the elder and buy a torch.")
        # Still full: the next message fails as well, and must leave nothing behind
        # that the log lacks (memory claiming a result the disk refused)
        with pytest.raises(OSError) as still_full:
            agent.run("Go on.")
        assert still_full.value.errno == errno.ENOSPC, (
            "the disk was still full as the run settled the calls left open: the run "
            "should stop with the disk's own error, its errno ENOSPC kept, so that a "
            "caller can tell a full disk (and ask the user for room); it raised an "
            f"OSError whose errno is {still_full.value.errno}: {still_full.value}")
        room[0] = True      # the user makes room, and goes on
        refused = refusal_of_next_run(agent)
    if refused is not None:     # outside the except: the words come first, alone
        pytest.fail("the disk was full when the second result was written, and still "
                    "full as the run stopped; once there was room again, the next run "
                    f"sent calls without their results: {refused}. The calls the "
                    "stopped run left open had no result yet when the next message "
                    "was recorded (task 04.4)", pytrace=False)
    entries = entries_in(path)
    calls_answered_in_order(entries, " (sent once while the disk was still full, and "
                            "again once it had room; a result is in memory only once "
                            "it is in the log: put in memory first, a result the full "
                            "disk refused is never written again)")
    answered_as_known(lesson, entries[1]["tool_calls"], entries[3:5],
                      "the disk full as the second of three results was written")
    memory_holds_the_log(agent, entries, " after the settling")


@pytest.mark.task("04.4")
def test_a_settle_stopped_half_way_by_a_full_disk_answers_no_call_twice(
        lesson, sessions, town, monkeypatch):
    """The disk fills up as the second of three results is written; the user makes room
    for one line only, and the next message fails after the first answer was written;
    then there is room. Each open call is answered once in the log, saying what is
    known of it (the third never started: the settle that stopped half-way ran no
    call), and memory holds what the log holds at every step: a result the log got is
    never written again."""
    path = sessions / "quest-1.jsonl"
    model, tools, room = three_calls_as_the_disk_fills(town, path, monkeypatch)
    with agent_keeping_the_log(lesson, sessions, model, tools) as agent:
        with raises(OSError, "the disk filled up during the first purchase, and the "
                    "run went on as if its messages had been written"):
            agent.run("Talk to the elder and buy a torch.")
        room[0] = 1         # room for one more line: the first answer, not the second
        with raises(OSError, "the disk had room for one more line, but the run "
                    "settling three open calls wrote them all"):
            agent.run("Go on.")
        half_way = entries_in(path)
        assert agent.messages == half_way, (
            "the disk took one answer of the settling and refused the next: memory "
            "should hold what the log holds, each answer put in memory once it is in "
            f"the log; memory holds {[m.get('role') for m in agent.messages]}, the log "
            f"{[entry.get('role') for entry in half_way]}")
        room[0] = True      # now there is room, and the user goes on
        agent.run("Go on.")
    entries = entries_in(path)
    asked = [c["id"] for c in entries[1].get("tool_calls") or []]
    answers = [entry.get("tool_call_id") for entry in entries[2:]
               if entry.get("role") == "tool"]
    assert answers == asked, (
        f"each call should be answered once in the log, in call order, {asked}; the "
        f"log answers {answers}: an answer written before the disk refused the next "
        "was written again")
    answered_as_known(lesson, entries[1]["tool_calls"], entries[3:5],
                      "the disk full as the second of three results was written, then "
                      "as the answer to the third was")
    memory_holds_the_log(agent, entries)


@pytest.mark.task("04.4")
def test_a_settle_stopped_half_way_by_ctrl_c_answers_the_rest_as_never_started(
        lesson, sessions, town):
    """Ctrl-C inside the second of three calls; the next run settles, and Ctrl-C comes
    again as the answer to the third call is about to be written, after the second's
    was. A settle stopped half-way, by Ctrl-C as by a full disk, ran no call: the next
    run answers the third call as never started, once, in memory and in the log."""
    model = elder_torch_and_rope()
    with agent_keeping_the_log(lesson, sessions, model, interrupted_in_buy(town)) \
            as agent:
        calls = three_calls_left_by_ctrl_c(agent)
        log, real = agent.session, agent.session.append
        came = []

        def append(message):
            if message.get("tool_call_id") == calls[-1]["id"] and not came:
                came.append(message)
                raise KeyboardInterrupt     # Ctrl-C, as the answer is written
            return real(message)
        log.append = append
        try:
            with raises(KeyboardInterrupt, "Ctrl-C came as the settle wrote its "
                        "answer to the third call, and the run went on as if nothing "
                        "had happened"):
                agent.run("Go on.")
        finally:
            del log.append
        if not came:
            pytest.skip("this settle wrote no answer to the third call through the "
                        "log's append")
        refused = refusal_of_next_run(agent)
    if refused is not None:     # the words come alone, outside any except
        pytest.fail("Ctrl-C stopped a settle half-way; the run after it sent calls "
                    f"without their results: {refused} (task 04.4)", pytrace=False)
    entries = entries_in(sessions / "quest-1.jsonl")
    calls_answered_in_order(entries)
    answered_as_known(lesson, entries[1]["tool_calls"], entries[3:5],
                      "Ctrl-C inside the second of three calls, then again as the "
                      "settle wrote the answer to the third, after the second's")
    memory_holds_the_log(agent, entries)


def run_on_stopped_as_memory_takes_the_answer(agent, call_id):
    """Run the agent on ("Go on."): its settle answers the calls left open, and Ctrl-C
    lands as the answer to `call_id` is put in its memory (append), whatever came
    before. Skips the test for a settle that puts no such answer in memory with
    append."""
    came = []

    class Memory(list):
        """The agent's memory: Ctrl-C lands as the answer to that call comes in."""

        def append(self, message):
            if (isinstance(message, dict) and not came
                    and message.get("tool_call_id") == call_id):
                came.append(message)
                raise KeyboardInterrupt     # Ctrl-C, as memory takes the answer
            super().append(message)

    agent.messages = Memory(agent.messages)
    with raises(KeyboardInterrupt, "Ctrl-C came as the settle put its answer to the "
                "third call in memory, and the run went on as if nothing had "
                "happened"):
        agent.run("Go on.")
    if not came:
        pytest.skip("this settle put no answer to the third call in memory with "
                    "append")


@pytest.mark.task("04.4")
def test_a_settle_without_a_log_stopped_half_way_by_ctrl_c_answers_the_rest_so(
        lesson, town):
    """An agent that keeps no log, stopped by Ctrl-C inside the second of three calls;
    the next run settles, and Ctrl-C comes again as the answer to the third call is
    put in memory, after the second's. A settle stopped half-way ran no call, with a
    log or without one: the run after answers the third call as never started, once,
    and the model accepts the request."""
    model = elder_torch_and_rope()
    agent = lesson.Agent(model.client(), model=model.model,
                         tools=interrupted_in_buy(town))
    calls = three_calls_left_by_ctrl_c(agent)
    run_on_stopped_as_memory_takes_the_answer(agent, calls[-1]["id"])
    refused = refusal_of_next_run(agent)
    if refused is not None:     # the words come alone, outside any except
        pytest.fail("Ctrl-C stopped the settle of an agent without a log half-way; the "
                    f"run after it sent calls without their results: {refused} (task "
                    "04.4)", pytrace=False)
    roles = [message.get("role") for message in agent.messages]
    expected = ["user", "assistant", "tool", "tool", "tool", "user", "assistant"]
    assert roles == expected, (
        "the calls, their three results, then the next message and its answer; the "
        f"agent holds {roles}")
    answered_as_known(lesson, agent.messages[1]["tool_calls"], agent.messages[3:5],
                      "Ctrl-C inside the second of three calls, with no log, then "
                      "again as the settle put the answer to the third in memory, "
                      "after the second's")


@pytest.mark.task("04.4")
def test_a_settle_stopped_by_ctrl_c_after_the_log_got_its_answer_answers_it_once(
        lesson, sessions, town):
    """Ctrl-C inside the second of three calls; the next run settles, and Ctrl-C comes
    again as the answer to the third call is put in memory, after the log got it (the
    log's line is written first, then memory takes it). The log is the record: the run
    after answers no call twice, and memory holds what the log holds."""
    model = elder_torch_and_rope()
    with agent_keeping_the_log(lesson, sessions, model, interrupted_in_buy(town)) \
            as agent:
        calls = three_calls_left_by_ctrl_c(agent)
        run_on_stopped_as_memory_takes_the_answer(agent, calls[-1]["id"])
        logged = [entry.get("tool_call_id") for entry in
                  entries_in(sessions / "quest-1.jsonl") if entry.get("role") == "tool"]
        if calls[-1]["id"] not in logged:
            pytest.skip("this settle put its answer in memory before the log")
        refused = refusal_of_next_run(agent)
    entries = entries_in(sessions / "quest-1.jsonl")
    answers = [entry.get("tool_call_id") for entry in entries
               if entry.get("role") == "tool"]
    asked = [call["id"] for call in calls]
    assert answers == asked and refused is None, (
        "Ctrl-C stopped a settle as memory took its answer to the third call, after "
        "the log had it; the run after should answer each call once, in the log as in "
        f"memory, {asked}: the log answers {answers}"
        + (f", and the model refused: {refused}" if refused else "")
        + ". The log holds the answer memory lacks: take it in (take_log_back reads "
        "the log back), never write it again")
    answered_as_known(lesson, entries[1]["tool_calls"], entries[3:5],
                      "Ctrl-C inside the second of three calls, then again as memory "
                      "took the settle's answer to the third, after the log had it")
    memory_holds_the_log(agent, entries)


@pytest.mark.task("04.4")
def test_a_settle_stopped_after_a_call_that_never_started_answers_the_rest_so(
        lesson, sessions, town, monkeypatch):
    """Four calls; the disk fills up as the second's result is written; the user makes
    room for two lines, and the next message fails after two answers were written (the
    second call may have run, the third never started); then there is room. The fourth
    never started either: no call ran after the stopped settle, whichever answer it
    wrote last. Each call is answered once, in memory and in the log alike."""
    path = sessions / "quest-1.jsonl"
    tools, room = a_disk_that_fills_up_in_a_purchase(town, path, monkeypatch)
    model = elder_torch_and_rope(call("buy", item="lantern"))
    with agent_keeping_the_log(lesson, sessions, model, tools) as agent:
        with raises(OSError, "the disk filled up during the first purchase, and the "
                    "run went on as if its messages had been written"):
            agent.run("Talk to the elder, then buy a torch, a rope and a lantern.")
        room[0] = 2         # room for two more lines: two answers of the three
        with raises(OSError, "the disk had room for two more lines, but the run "
                    "settling three open calls wrote them all"):
            agent.run("Go on.")
        room[0] = True      # now there is room, and the user goes on
        agent.run("Go on.")
    entries = entries_in(path)
    calls = entries[1].get("tool_calls") or []
    answers = [entry for entry in entries[2:] if entry.get("role") == "tool"]
    asked = [c["id"] for c in calls]
    answered = [answer.get("tool_call_id") for answer in answers]
    assert answered == asked, (
        f"each call should be answered once in the log, in call order, {asked}; the "
        f"log answers {answered}")
    answered_as_known(lesson, calls, answers[1:],
                      "the disk full as the second of four results was written, then "
                      "as the answer to the fourth was, after the one saying the "
                      "third never started")
    memory_holds_the_log(agent, entries)


@pytest.mark.task("04.4")
def test_a_settle_whose_answer_the_disk_refused_records_no_message_after_the_gap(
        lesson, sessions, town, monkeypatch):
    """The disk fills up as the second of three results is written; as the next run
    settles the calls left open, the disk refuses the first answer, and has room again
    a moment later (another program freed some). The run stops there: the user's
    message is never recorded after calls without their results, and the next run
    answers each once."""
    path = sessions / "quest-1.jsonl"
    model, tools, room = three_calls_as_the_disk_fills(town, path, monkeypatch)
    full = os.write

    def refused_once(fd, data):
        try:
            return full(fd, data)
        except OSError:
            room[0] = True      # room again, right after this refusal
            raise

    with agent_keeping_the_log(lesson, sessions, model, tools) as agent:
        with raises(OSError, "the disk filled up during the first purchase, and the "
                    "run went on as if its messages had been written"):
            agent.run("Talk to the elder and buy a torch.")
        monkeypatch.setattr(os, "write", refused_once)
        try:
            agent.run("Go on.")
        except OSError:
            pass            # the answer was refused: the user sends the message again
        except openai.BadRequestError as error:
            sent = [entry.get("role") for entry in entries_in(path)]
            pytest.fail("the disk refused the first answer of the settling, then had "
                        "room again: the run went on and recorded the user's message "
                        "after calls that still had no result, and the model refused "
                        f"the request ({error.message}); the log holds {sent}. A run "
                        "whose settling failed must stop before the next message",
                        pytrace=False)
        agent.run("Go on.")
    entries = entries_in(path)
    calls_answered_in_order(entries)
    answered_as_known(lesson, entries[1]["tool_calls"], entries[3:5],
                      "the disk full as the second of three results was written, then "
                      "refusing the first answer of the settling once")
    memory_holds_the_log(agent, entries)


@pytest.mark.task("04.4")
def test_a_run_stopped_by_ctrl_c_in_its_first_tool_call_goes_on(lesson, sessions,
                                                                 town):
    """Ctrl-C (a real SIGINT) inside the first of three calls, before any result was
    written: the conversation ends in the calls themselves. The next message goes on
    once each call is answered, in call order, in memory and in the log alike: the
    first may have run, the other two never started. (The calls' ids do not sort in
    the order the model made the calls.)"""
    model = ScriptedModel([use(raw_call("buy", '{"item": "torch"}', "call_x1"),
                               raw_call("talk_to", '{"npc": "elder"}', "call_b2"),
                               raw_call("buy", '{"item": "rope"}', "call_m3")),
                           say("Where were we?")])
    tools = interrupted_in_buy(town)
    with agent_keeping_the_log(lesson, sessions, model, tools) as agent:
        stopped_by_ctrl_c(agent, "Buy a torch, then talk to the elder.", "first")
        refused = refusal_of_next_run(agent)
    if refused is not None:     # outside the except: the words come first, alone
        pytest.fail("after a run stopped inside its first tool call, before any "
                    f"result was written, the next run sent calls without their "
                    f"results: {refused}. The calls the stopped run left open had no "
                    "result yet when the next user message was recorded (task 04.4)",
                    pytrace=False)
    entries = entries_in(sessions / "quest-1.jsonl")
    calls_answered_in_order(entries)
    answered_as_known(lesson, entries[1]["tool_calls"], entries[2:5],
                      "Ctrl-C inside the first of three calls", first=0)
    memory_holds_the_log(agent, entries)


@pytest.mark.task("04.4")
def test_a_session_holding_an_answer_whose_tool_calls_is_null_goes_on(lesson, sessions,
                                                                      town):
    """A log another program began, which stores a plain answer with its tool_calls
    null (as a program that keeps every field of a reply writes it), is resumed; a run
    is stopped by Ctrl-C inside the first of two calls, and the next run answers both
    and goes on. A message whose tool_calls is null calls no tool: nothing the agent
    does with the conversation may stumble on it."""
    earlier = [A_FINISHED_DAY[0],
               {"role": "assistant", "content": "Bring a torch.", "tool_calls": None}]
    write_log(sessions, earlier)
    model = ScriptedModel([use(call("buy", item="torch"), call("talk_to", npc="elder")),
                           say("Where were we?")])
    tools = interrupted_in_buy(town)
    with agent_keeping_the_log(lesson, sessions, model, tools) as agent:
        for when, message in (("the run stopped by Ctrl-C", "Buy a torch, then go."),
                              ("the next run", "Go on.")):
            try:
                agent.run(message)
            except KeyboardInterrupt:
                continue
            except NotImplementedError:
                raise
            except openai.BadRequestError as error:
                pytest.fail(f"{when} sent a request the model refused: "
                            f"{error.message} (task 04.4)", pytrace=False)
            except Exception as error:      # noqa: BLE001 - reported in words
                pytest.fail(f"the session holds a plain answer stored with its "
                            f"tool_calls null, and {when} raised {described(error)}. "
                            "A message whose tool_calls is null calls no tool, as one "
                            "without the key does: the agent goes on with it",
                            pytrace=False)
    entries = entries_in(sessions / "quest-1.jsonl")
    roles = [entry.get("role") for entry in entries]
    assert roles == ["user", "assistant", "user", "assistant", "tool", "tool", "user",
                     "assistant"], (
        "the log should hold the earlier turn, the stopped turn's calls and their two "
        f"answers, then the next message and its answer: {roles}")
    answered_as_known(lesson, entries[3]["tool_calls"], entries[4:6],
                      "Ctrl-C inside the first of two calls", first=0)
    memory_holds_the_log(agent, entries)


@pytest.mark.task("04.4")
@pytest.mark.parametrize("place", ["second", "first"])
def test_a_second_run_stopped_in_a_tool_call_is_settled_as_the_first_was(lesson,
                                                                        town, place):
    """Ctrl-C inside the second of three calls, then the next message, whose turn is
    stopped inside its second call too, or inside its first (before any result of its
    own): the answers the first settling made up lie further back, and say nothing of
    the second turn's calls. The call the second turn was running may have run, the
    ones after it never started. The last message decides, not the last result."""
    three = use(call("talk_to", npc="elder"), call("buy", item="torch"),
                call("buy", item="rope"))
    again = three if place == "second" else use(
        call("buy", item="torch"), call("talk_to", npc="elder"),
        call("buy", item="rope"))
    model = ScriptedModel([three, again, say("Where were we?")])
    agent = lesson.Agent(model.client(), model=model.model,
                         tools=interrupted_in_buy(town))
    stopped_by_ctrl_c(agent, "Talk to the elder and buy a torch.")
    stopped_by_ctrl_c(agent, "Try again.", place)
    refused = refusal_of_next_run(agent)
    if refused is not None:     # the words come alone, outside any except
        pytest.fail(f"after two runs stopped inside a tool call (the second run in its "
                    f"{place} call), the next run sent calls without their results: "
                    f"{refused} (task 04.4)", pytrace=False)
    roles = [message.get("role") for message in agent.messages]
    expected = ["user", "assistant", "tool", "tool", "tool"] * 2 + ["user", "assistant"]
    assert roles == expected, (
        "each turn's calls and their three results, then the next message; the agent "
        f"holds {roles}")
    first = 1 if place == "second" else 0
    answered_as_known(lesson, agent.messages[6]["tool_calls"],
                      agent.messages[7 + first:10],
                      f"Ctrl-C inside the {place} of three calls, in a turn after one "
                      "stopped inside its second call and was settled (its made-up "
                      "answers are the last results before this turn's calls)",
                      first=first)


# --- empty lines, the reason, ids used again ------------------------------------------


@pytest.mark.task("04.1")
@pytest.mark.parametrize("tail", [b"", TORN], ids=["whole", "torn"])
@pytest.mark.parametrize("place", ["among", "first", "last"])
def test_a_log_with_a_stray_empty_line_resumes_and_loses_only_its_torn_bytes(
        lesson, resume, sessions, tail, place):
    """A stray newline among the entries, as the log's very first byte, or after its
    last entry, then the end of the log, whole or torn: the log resumes with its four
    messages; a whole one gets no byte, and a torn one loses its torn bytes, exactly
    those (the empty line is a whole line, and stays)."""
    first, rest = line(A_FINISHED_DAY[0]), b"".join(map(line, A_FINISHED_DAY[1:]))
    whole = {"among": first + b"\n" + rest, "first": b"\n" + first + rest,
             "last": first + rest + b"\n"}[place]
    path = sessions / "quest-1.jsonl"
    path.write_bytes(whole + tail)
    where = {"among": "among them", "first": "before them, the log's first line",
             "last": "after them, the last whole line"}[place]

    agent, _ = resume_whole(resume, path, whole,
                            f"an empty line {where} and " + ("a torn tail" if tail
                                                             else "nothing"))

    assert agent.messages == A_FINISHED_DAY, (
        f"the four messages with an empty line {where} are the history; got "
        f"{agent.messages}")
    data = path.read_bytes()
    if not tail:
        right = data == whole
        wrong = ("a whole log with an empty line needs no repair: nothing may be "
                 f"written; it ends {data[-80:]!r}")
    else:
        added = data[len(whole):] if data.startswith(whole) else b""
        try:
            marker = json.loads(added) if added.count(b"\n") == 1 else None
        except ValueError:
            marker = None
        right = added.endswith(b"\n") and isinstance(marker, dict) and marker.get(
            "cut_bytes") == len(TORN)
        wrong = (f"the {len(TORN)} torn bytes, and only they, are cut (an empty line "
                 "counts one byte, its newline), and one repair marker follows the "
                 f"whole lines; the log ends {data[-160:]!r}")
    if not right:
        # Whose code: parse_log's `end` (04.1), or the takeover's cut there (04.3)?
        state = lesson.parse_log(whole + tail, path)
        read = (state.end, state.newline_missing) == (len(whole), False)
        fail_in("04.3" if read else "04.1", wrong + (
            f" (parse_log says the whole lines end at byte {len(whole)}, as they do: "
            "the writer should cut there, and keep every byte before)" if read else ""))


@pytest.mark.task("04.1")
def test_a_corrupt_line_after_an_empty_line_is_named_by_its_place_in_the_file(
        lesson, resume, sessions):
    """Empty lines count as lines and as bytes: the damaged line's number and offset
    are where an editor finds it, not a count of the messages before it."""
    first = line(A_FINISHED_DAY[0])
    path = sessions / "quest-1.jsonl"
    path.write_bytes(first + b"\n\n" + b"garbage\n" + line(A_FINISHED_DAY[1]))

    with raises(lesson.CorruptLog, "line 4 is garbage and the log resumed anyway"
                ) as damaged:
        resume()

    found = (damaged.value.line, damaged.value.offset)
    assert found == (4, len(first) + 2), (
        f"the garbage is line 4 (after two empty lines), at byte {len(first) + 2}; "
        f"CorruptLog names line {found[0]} at byte {found[1]}: {damaged.value}")


@pytest.mark.task("04.1")
@pytest.mark.parametrize("damage", [
    b'{"content": "no role"}',
    b'{"role": "user", "content": "cut short',
], ids=["no role", "not JSON"])
def test_a_corrupt_line_error_says_why_the_line_is_no_message(
        lesson, resume, sessions, damage):
    """CorruptLog carries the reason the line was refused, so that whoever mends it by
    hand knows what to look for."""
    try:
        lesson.parse_line(damage)
    except ValueError as refused:
        reason = str(refused)
    else:
        pytest.fail(f"parse_line should refuse {damage!r}", pytrace=False)
    path = sessions / "quest-1.jsonl"
    path.write_bytes(line(ASK) + damage + b"\n" + line(A_FINISHED_DAY[0]))

    with raises(lesson.CorruptLog, "line 2 is damaged and the log resumed anyway"
                ) as damaged:
        resume()

    if reason not in str(damaged.value):
        # Whose words: parse_log's (04.1), or the takeover's in their place (04.3)?
        try:
            lesson.parse_log(path.read_bytes(), path)
        except lesson.CorruptLog as direct:
            said = reason in str(direct)
        else:
            said = False
        fail_in("04.3" if said else "04.1", (
            f"CorruptLog should say why line 2 is no message ({reason!r}); it says: "
            f"{damaged.value}" + (" (parse_log's own CorruptLog says it: the writer "
                                  "that takes the log over should let that error "
                                  "reach its caller as it is)" if said else "")))


@pytest.mark.task("04.1")
@pytest.mark.parametrize("where", ["a whole line", "the tail"])
def test_a_corrupt_log_error_comes_alone_not_after_the_decoders_own(
        lesson, sessions, where):
    """CorruptLog is the one error the user reads: the JSON decoder's error it was made
    from is not chained before it ("During handling of the above exception, another
    exception occurred"), which would make damage in the log look like a bug of the
    reader; the reason is already in CorruptLog's own words."""
    if where == "a whole line":
        data = line(ASK) + b'{"role": "user", "content": "cut short\n' + line(ASK)
    else:
        data = line(ASK) + joined(*A_FINISHED_DAY[2:])
    path = sessions / "quest-1.jsonl"
    try:
        lesson.parse_log(data, path)
    except lesson.CorruptLog as error:
        chained = error.__cause__
        if chained is None and not error.__suppress_context__:
            chained = error.__context__
    else:
        pytest.fail(f"the log's {where} is no message and no torn line: parse_log "
                    "should raise CorruptLog", pytrace=False)
    assert chained is None, (
        f"the log's {where} is damaged: CorruptLog should come alone, its reason in "
        "its own words; it comes chained after the error it was made from, "
        f"{type(chained).__name__}: {chained}, so the user's traceback begins with "
        "the decoder's error and 'During handling of the above exception, another "
        "exception occurred'. Raise it without the chain (from None)")


@pytest.mark.task("04.2")
def test_a_call_id_used_again_in_a_later_turn_still_needs_its_own_result(
        resume, sessions, model):
    """Some servers number calls per reply ("call_0" in every turn): an earlier turn's
    result answers the earlier call, not the open one with the same id."""
    first_call = {"role": "assistant", "content": None,
                  "tool_calls": [tool_call("call_0", "talk_to", npc="elder")]}
    second_calls = {"role": "assistant", "content": None,
                    "tool_calls": [tool_call("call_0", "buy", item="torch"),
                                   tool_call("call_1", "buy", item="rope")]}
    history = [A_FINISHED_DAY[0], first_call, result("call_0", "Bring a torch."),
               {"role": "assistant", "content": "A torch, then."}, ASK, second_calls]
    write_log(sessions, history)

    agent, _ = resume()

    added = [m.get("tool_call_id") for m in agent.messages[len(history):]]
    assert added == ["call_0", "call_1"], (
        "both calls of the last assistant message are open (the result for 'call_0' "
        "answers the first turn's call); they need results in call order; the agent "
        f"added results for {added}")
    model.add(say("Let me check our bag first."))
    agent.run("Did we buy them?")   # a call without its result would be refused (400)


# --- the repair's one write, its time, its durability ---------------------------------


def held_by(data):
    """What one write to the log held, in words: "a newline", "the repair marker",
    "the result for call_z", ... (a piece that is no whole line: its size)."""
    if data == b"\n":
        return "a newline"
    parts = []
    for raw in data.split(b"\n"):
        try:
            entry = json.loads(raw) if raw else None
        except ValueError:
            entry = None
        if isinstance(entry, dict) and "$marker" in entry:
            parts.append("the repair marker")
        elif isinstance(entry, dict) and entry.get("role") == "tool":
            parts.append(f"the result for {entry.get('tool_call_id')}")
        elif raw:
            parts.append(f"{len(raw)} bytes")
    newline = "a newline, then " if data.startswith(b"\n") else ""
    return newline + " and ".join(parts)


class Killed(BaseException):
    """The process died here: nothing after this point ran (no clean-up either)."""


# The calls that change a file's bytes: the points between which a kill can fall
CHANGES = ("write", "pwrite", "writev", "ftruncate", "truncate")


def kill_at(path, monkeypatch, step, seen):
    """From now on, record in `seen` each call that changes the file `path` (os.write,
    os.pwrite, os.writev, os.ftruncate, os.truncate), as (name, arguments); the
    `step`-th of them (from 1) raises Killed instead of changing anything (None: no
    kill, only the record)."""
    target = path.stat()

    def same(where):
        try:
            found = os.fstat(where) if isinstance(where, int) else os.stat(where)
        except (OSError, TypeError, ValueError):
            return False
        return (found.st_dev, found.st_ino) == (target.st_dev, target.st_ino)

    def watched(name, real):
        def change(where, *arguments):
            if same(where):
                seen.append((name, arguments))
                if len(seen) == step:
                    raise Killed
            return real(where, *arguments)
        return change

    for name in CHANGES:
        monkeypatch.setattr(os, name, watched(name, getattr(os, name)))


def said(change):
    """One change to the log, in words: "a cut at byte 120", "a write of the repair
    marker and the result for call_z", ..."""
    name, arguments = change
    if name in ("ftruncate", "truncate"):
        return f"a cut at byte {arguments[0]}" if arguments else "a cut"
    data = arguments[0] if arguments else b""
    if isinstance(data, (list, tuple)):
        data = b"".join(map(bytes, data))
    return f"a write of {held_by(bytes(data))}"


def made_up_results_follow_their_markers(entries):
    """None when every entry after the first ones is a repair marker or a made-up
    result, each marker followed by the results for the calls it names, in its order,
    and each made-up result after the marker that names it; else what is wrong."""
    named, marker = [], None
    for entry in entries:
        if "$marker" in entry:
            if named:
                return (f"the marker {marker} names {named}, but the next line is "
                        "another marker, not their results")
            marker, named = entry, list(entry.get("interrupted") or [])
        elif entry.get("role") == "tool":
            answers = entry.get("tool_call_id")
            if not named or named[0] != answers:
                return (f"a made-up result for {answers} follows no marker that names "
                        f"it next (the last marker: {marker})")
            named.pop(0)
        else:
            return f"an entry that is neither a marker nor a result came in: {entry}"
    if named:
        return f"the marker {marker} names {named}, whose results never follow it"
    return None


@pytest.mark.task("04.3")
@pytest.mark.parametrize("tail", [
    line(BUY_THREE)[:-1],
    line(BUY_THREE) + TORN,
    line(BUY_THREE) + line(result("call_a")) + TORN,
], ids=["missing newline", "torn", "one result saved, torn"])
def test_a_repair_killed_at_any_step_is_completed_by_the_next_writer(
        resume, sessions, monkeypatch, tail):
    """The process is killed in the middle of the repair, at each of the changes it
    makes to the file in turn (every write, every cut), and the session is resumed
    again: that resume must leave a whole log, every call answered once, each made-up
    result after a marker that names it, and no marker naming a call whose result
    does not follow it."""
    whole = line(ASK) + tail.removesuffix(TORN)
    first = len(entries_in_bytes(whole if whole.endswith(b"\n") else whole + b"\n"))
    path = sessions / "quest-1.jsonl"
    path.write_bytes(line(ASK) + tail)
    steps = []
    with monkeypatch.context() as patch:
        kill_at(path, patch, None, steps)
        resume()
    if not steps and path.read_bytes() == line(ASK) + tail:
        pytest.fail("resuming a log whose last calls have no result changed nothing in "
                    "it: the writer that takes the log over repairs it", pytrace=False)
    if not steps:
        pytest.fail("the repair changed the log through none of os.write, os.pwrite, "
                    "os.writev, os.ftruncate or os.truncate, so this test cannot stop "
                    "it half-way: write to the log through the writer's own descriptor",
                    pytrace=False)

    for step in range(1, len(steps) + 1):
        path.write_bytes(line(ASK) + tail)
        seen = []
        with monkeypatch.context() as patch:
            kill_at(path, patch, step, seen)
            try:
                resume()
            except Killed:
                pass
        done = "; ".join(map(said, seen[:step - 1])) or "nothing"
        where = (f"killed at change {step} of the {len(steps)} the repair makes "
                 f"({said(seen[-1]) if len(seen) >= step else 'none'}), after {done}")
        left = path.read_bytes()
        agent, _ = resume_whole(resume, path, whole,
                                f"what a repair {where} left: {left[len(whole):]!r}")
        data = path.read_bytes()
        assert data.startswith(whole), (
            f"{where}, and then resumed: the whole lines the log began with must stay "
            f"as they were; the log now ends {data[-200:]!r}")
        entries = entries_in(path)
        answers = [e.get("tool_call_id") for e in entries if e.get("role") == "tool"]
        assert sorted(answers) == sorted(CALL_ORDER), (
            f"{where}, and then resumed: each of the calls {CALL_ORDER} should have "
            f"exactly one result; the log answers {answers}")
        wrong = made_up_results_follow_their_markers(entries[first:])
        assert wrong is None, (
            f"{where}, and then resumed: {wrong}. A kill inside the repair must never "
            "leave part of it as whole lines for the next writer to build on")
        assert markers(agent.messages) == [] and [
            m.get("tool_call_id") for m in agent.messages
            if m.get("role") == "tool"] == answers, (
            f"{where}, and then resumed: the agent should hold the log's messages, "
            f"results included, and no marker; it holds {agent.messages}")


@pytest.mark.task("04.3")
@pytest.mark.parametrize("retry", ["the same writer", "a new writer"])
def test_a_repair_the_disk_refused_is_made_by_the_next_takeover(
        lesson, resume, sessions, model, town, monkeypatch, retry):
    """The disk is full when the writer takes over a log whose calls are open: the
    repair cannot be written, so the resume fails rather than go on from a log that
    still has them open. Once there is room, the takeover is tried again, by the same
    writer's next append or by a new writer, and makes the whole repair, once."""
    path = write_log(sessions, [ASK, BUY_THREE])
    whole = path.read_bytes()
    _, room = a_disk_that_fills_up_in_a_purchase(town, path, monkeypatch)
    room[0] = False     # full from the start: every write to the log is refused
    log = lesson.SessionLog(sessions, "quest-1")
    try:
        with raises(OSError, "the disk was full, so the repair could not be written, "
                    "yet the resume went on as if the writer had taken the log over: "
                    "the calls are still open in it, with no result and no marker"
                    ) as refused:
            lesson.Agent(model.client(), model=model.model, tools=town, session=log)
        assert refused.value.errno == errno.ENOSPC, (
            "the disk was full as the repair was written; the takeover should stop "
            "with the disk's own error, its errno ENOSPC kept, so that a caller can "
            "tell a full disk (and ask for room); it raised an OSError whose errno is "
            f"{refused.value.errno}: {refused.value}")
        room[0] = True      # the user makes room, and tries again
        if retry == "the same writer":
            log.append({"role": "user", "content": "Go on."})
        else:
            log.close()
            agent, log = resume_whole(resume, path, whole, "calls left open")
    finally:
        log.close()

    entries = entries_in(path)
    answers = [e.get("tool_call_id") for e in entries if e.get("role") == "tool"]
    assert entries[:2] == [ASK, BUY_THREE] and answers == CALL_ORDER, (
        f"the repair the full disk refused was tried again by {retry}: each call "
        f"should then be answered once, in call order, {CALL_ORDER}, after the whole "
        f"lines; the log answers {answers}: {entries}")
    repaired = entries[2:6]
    wrong = made_up_results_follow_their_markers(repaired)
    assert wrong is None, f"after the retry by {retry}: {wrong}"
    if retry == "the same writer":
        assert entries[6:] == [{"role": "user", "content": "Go on."}], (
            "the same writer's next append should come after the repair; after the "
            f"results the log holds {entries[6:]}")
    else:
        shown = [entry for entry in entries if "$marker" not in entry]
        assert agent.messages == shown, (
            "the new writer should resume the repaired history, the log's messages; "
            f"it holds {agent.messages}")


@pytest.mark.task("04.3")
def test_a_repair_the_disk_takes_only_in_part_leaves_no_half_line_behind(
        lesson, resume, sessions, model, town, monkeypatch):
    """The disk fills up part-way through the repair: write() takes only the first half
    of the bytes it is given (a short write, as a full disk or a file size limit gives
    one) and says so by its count, not by an error. The takeover must not go on from a
    log that ends in part of a line: the agent's next line would land after it, as
    damage in the middle of the log that every later resume refuses. Either the
    takeover fails, leaving the log as it was or with a torn tail the next takeover
    cuts, or it goes on from a log whose every line is whole; the next day's resume
    then finds each call answered once."""
    path = write_log(sessions, [ASK, BUY_THREE])
    target = path.stat()
    real_write = os.write
    short = []

    def write(fd, data):
        found = os.fstat(fd)
        if not short and (found.st_dev, found.st_ino) == (target.st_dev,
                                                          target.st_ino):
            short.append((len(data) // 2, len(data)))
            return real_write(fd, bytes(data)[:len(data) // 2])
        return real_write(fd, data)

    with monkeypatch.context() as patch:
        patch.setattr(os, "write", write)
        try:
            agent, log = resume()
        except OSError:
            agent = None        # refused: the disk's refusal reaches the caller
    if not short:
        pytest.skip("this takeover wrote its repair through no os.write")
    took, asked = short[0]
    if agent is not None:
        left = path.read_bytes()
        if not left.endswith(b"\n"):
            fail_in("04.3", f"the disk took only {took} of the repair's {asked} bytes "
                    "(a short write, as a full disk gives), and the takeover went on "
                    "from a log that ends in part of a line: the agent's next line "
                    "would land after it, damage in the middle of the log. A write "
                    "the disk takes in part must be taken back (or written whole) "
                    f"before the writer goes on; the log ends {left[-120:]!r}")
        model.add(say("Noted."))
        agent.run("Go on.")
        log.close()
    later = ScriptedModel([say("We go on.")])
    with lesson.SessionLog(sessions, "quest-1") as again:
        try:
            lesson.Agent(later.client(), model=later.model, tools=town,
                         session=again)
        except lesson.CorruptLog as error:
            fail_in("04.3", f"the disk took only {took} of the repair's {asked} bytes "
                    "(a short write); the takeover went on from part of a line, and "
                    "the lines written after it left damage in the middle of the log: "
                    f"the next day's resume refuses it ({error})")
    entries = entries_in(path)
    answers = [e.get("tool_call_id") for e in entries if e.get("role") == "tool"]
    assert entries[:2] == [ASK, BUY_THREE] and answers == CALL_ORDER, (
        f"the disk took only {took} of the repair's {asked} bytes (a short write); "
        "once the session is resumed again, each call should be answered once, in "
        f"call order, {CALL_ORDER}, after the whole lines; the log answers {answers}")


def entries_in_bytes(data):
    """The JSON objects of whole lines `data`."""
    return [json.loads(raw) for raw in data.split(b"\n")[:-1] if raw]


def changes_and_syncs(path, monkeypatch, events):
    """From now on, record in `events` each change to the file `path` (os.write,
    os.pwrite, os.writev, os.ftruncate, os.truncate) as ("change", its words), and each
    os.fsync or os.fdatasync of it as ("sync", the file's size then)."""
    seen = []
    kill_at(path, monkeypatch, None, seen)      # records the changes, kills nothing
    target = path.stat()

    def wrap(real):
        def sync(fd):
            found = os.fstat(fd)
            if (found.st_dev, found.st_ino) == (target.st_dev, target.st_ino):
                events.extend(("change", said(change)) for change in seen)
                seen.clear()
                events.append(("sync", found.st_size))
            return real(fd)
        return sync

    for name in ("fsync", "fdatasync"):
        monkeypatch.setattr(os, name, wrap(getattr(os, name)))
    return seen


# name: (the entries of the log, the bytes after them)
UNSYNCED = {
    "a missing newline": (A_FINISHED_DAY[:-1], line(A_FINISHED_DAY[-1])[:-1]),
    "a torn tail": (A_FINISHED_DAY, TORN),
    "open calls": ([ASK, BUY_THREE], b""),
    "open calls in a line without its newline": ([ASK], line(BUY_THREE)[:-1]),
}


@pytest.mark.task("04.3")
@pytest.mark.parametrize("case", list(UNSYNCED))
def test_a_durable_writer_has_its_repair_on_the_disk_when_the_resume_returns(
        lesson, sessions, model, town, monkeypatch, case):
    """With durable=True every byte the writer adds is on the disk before the call that
    added it returns: the repair's too, down to a newline added alone, synced after its
    last change to the file and before the resume returns."""
    entries, tail = UNSYNCED[case]
    path = write_log(sessions, entries, tail=tail)
    before = path.read_bytes()
    events = []
    with monkeypatch.context() as patch:
        unsynced = changes_and_syncs(path, patch, events)
        with lesson.SessionLog(sessions, "quest-1", durable=True) as log:
            lesson.Agent(model.client(), model=model.model, tools=town, session=log)
            after = path.read_bytes()
            events.extend(("change", said(change)) for change in unsynced)

    assert after != before, (
        f"a log ending in {case} was resumed by a durable writer, and the writer "
        "changed nothing in it: the writer that takes a log over repairs it")
    kinds = [kind for kind, _ in events]
    last = len(kinds) - 1 - kinds[::-1].index("change") if "change" in kinds else -1
    synced = [size for kind, size in events[last + 1:] if kind == "sync"]
    assert synced and synced[-1] == len(after), (
        f"a log ending in {case}, resumed by a durable writer: its repair should be on "
        "the disk when the resume returns, every byte it added synced after its last "
        f"change to the file; the log saw {events or 'neither a change nor a sync'}, "
        f"and holds {len(after)} bytes when the resume returns")


@pytest.mark.task("04.3")
def test_the_repair_marker_says_when_it_was_written(resume, sessions, monkeypatch):
    """`at` is the time of the repair, an ISO 8601 time with its zone, like every
    marker's: not the time the log was last written (here, the day before). The
    machine's clock is set to a zone five and a half hours east of UTC, as a user's
    may be: the zone `at` names is the zone its time is in (a local time labelled Z or
    +00:00 is hours off)."""
    path = write_log(sessions, [ASK, BUY_THREE])
    yesterday = time.time() - 86400
    os.utime(path, (yesterday, yesterday))
    before = datetime.now(timezone.utc).replace(microsecond=0)

    with monkeypatch.context() as patch:
        patch.setenv("TZ", "IST-5:30")      # POSIX: UTC+5:30, no zone files needed
        time.tzset()
        try:
            resume()
        finally:
            patch.undo()
            time.tzset()

    after = datetime.now(timezone.utc)
    found = markers(entries_in(path))
    at = found[0].get("at") if found else None
    assert not isinstance(at, str) or re.fullmatch(
        r"\d{4}-\d\d-\d\dT[\d:.]+(Z|[+-][\d:]+)", at), (
        "the repair marker's `at` should be an ISO 8601 time with its zone, date, T, "
        f"time, offset (as 2025-01-31T12:00:00+00:00); it is {at!r}, which a strict "
        "ISO 8601 or RFC 3339 reader refuses")
    check_time(at, before, after,
               "the repair marker's `at`", "the time of the repair",
               "the machine's clock was set to UTC+5:30 as the repair was made: a "
               "local time must carry that zone, or be turned into UTC first; "
               f"markers: {found}")


# --- the file the writer opened -------------------------------------------------------


# name: (the log's entries, its tail, the history it resumes with once repaired)
SWAPPED = {
    "a whole log": (A_FINISHED_DAY, b"", A_FINISHED_DAY),
    "a torn log": (A_FINISHED_DAY, TORN, A_FINISHED_DAY),
    "a log with open calls": ([ASK, BUY_THREE], b"", [ASK, BUY_THREE, *(
        {"role": "tool", "tool_call_id": call_id} for call_id in CALL_ORDER)]),
}


@pytest.mark.task("04.3")
@pytest.mark.parametrize("case", list(SWAPPED))
def test_a_log_whose_name_is_swapped_after_the_open_is_neither_resumed_nor_cut(
        lesson, resume, sessions, monkeypatch, case):
    """Right after the writer opened the log, another file takes its name (the log is
    kept aside under another): the writer resumes the history of the file it opened,
    repairs that file alone, whatever the other holds (a torn tail), and leaves the
    other file as it was."""
    entries, tail, history = SWAPPED[case]
    path = write_log(sessions, entries, tail=tail)
    real = path.read_bytes()
    whole = real[:len(real) - len(tail)]
    decoy = sessions / "decoy"
    stranger = line({"role": "user", "content": "Someone else's story."}) + TORN
    decoy.write_bytes(stranger)
    aside = sessions / "aside"
    real_open = os.open

    def open_then_swap(where, flags, *arguments, **options):
        fd = real_open(where, flags, *arguments, **options)
        if os.fspath(where) == str(path) and not aside.exists():
            os.rename(path, aside)      # the log, kept aside
            os.rename(decoy, path)      # another file under its name
        return fd

    with monkeypatch.context() as patch:
        patch.setattr(os, "open", open_then_swap)
        try:
            agent, _ = resume()
        except lesson.CorruptLog as error:
            fail_in("04.3", (
                f"the writer opened {case}, and another file, torn at its end, took "
                "the log's name right after: the writer should judge and mend the "
                "file it opened, through its own descriptor, whatever the name leads "
                f"to by then; the resume raised CorruptLog: {error}"))
    if not aside.exists():
        pytest.fail("the writer never opened the log's name with os.open, so this test "
                    "could not swap it: keep the given open of _open", pytrace=False)
    # The messages the log began with, then each made-up result's role and id
    resumed = agent.messages[:len(entries)] + [
        {key: message.get(key) for key in ("role", "tool_call_id")}
        for message in agent.messages[len(entries):]]
    assert resumed == history, (
        f"the log's name was given to another file right after the writer opened "
        f"{case}: the writer should resume the history of the file it opened, "
        f"{len(history)} messages once repaired; it resumed {agent.messages}")
    assert path.read_bytes() == stranger, (
        f"the writer opened {case}, and another file took the log's name right after: "
        "the writer changed that other file, where it should change only the file it "
        f"opened; the other file now ends {path.read_bytes()[-120:]!r}")
    now = aside.read_bytes()
    if not tail and history == entries:
        assert now == real, (
            f"the writer opened {case}, which needs nothing, and another file, torn "
            "at its end, took the log's name right after: the writer changed the log "
            f"it opened, judging it by the other file; it now ends {now[-200:]!r}")
    else:
        shown = [entry for entry in entries_in(aside) if "$marker" not in entry]
        assert now.startswith(whole) and shown == agent.messages, (
            f"the writer opened {case}, and another file took the log's name right "
            "after: the log it opened should keep its whole lines and hold its repair, "
            f"the history the writer resumed; it now ends {now[-200:]!r}")


# --- a durable writer and the log's name ----------------------------------------------


class FolderSyncs:
    """Counts each os.fsync and os.fdatasync of the sessions folder (the folder that
    holds the log's name) from now on; with fail=True each of them raises EIO instead,
    as a failing disk does."""

    def __init__(self, monkeypatch, sessions, fail=False):
        self.count = 0
        folder = sessions.stat()
        self.folder = (folder.st_dev, folder.st_ino)
        for name in ("fsync", "fdatasync"):
            monkeypatch.setattr(os, name, self.wrap(getattr(os, name), fail))

    def wrap(self, real, fail):
        def sync(fd):
            found = os.fstat(fd)
            if (found.st_dev, found.st_ino) == self.folder:
                self.count += 1
                if fail:
                    raise OSError(errno.EIO, "input/output error (simulated)")
            return real(fd)
        return sync


@pytest.mark.task("04.3")
@pytest.mark.parametrize("retry", ["the same writer", "a new writer"])
def test_a_durable_retry_after_a_failed_folder_sync_syncs_the_logs_name(
        lesson, sessions, monkeypatch, retry):
    """Durable mode: the sync of a new log's name (an fsync of its folder) fails with
    EIO, so the first append raises; the writer keeps nothing open. The caller retries,
    with the same SessionLog or a new one. The log is there now, created by the attempt
    that failed, but its name may still not be on the disk: the folder is synced again
    before the retried append returns. (This is the writer's given open, just before
    the takeover of task 04.3.)"""
    path = sessions / "quest-1.jsonl"
    before = open_descriptors()
    log = lesson.SessionLog(sessions, "quest-1", durable=True)
    with monkeypatch.context() as patch:
        FolderSyncs(patch, sessions, fail=True)
        try:
            log.append(ASK)
        except OSError:
            failed = True
        else:
            failed = False
    if not failed:
        log.close()
        pytest.fail("the sync of the new log's name failed (EIO), and append returned "
                    "as if the line were safe: a power cut could take the log, line "
                    "and all", pytrace=False)
    left = open_descriptors() - before
    if left:
        log.close()
        pytest.fail(f"the append whose folder sync failed left {left} descriptor(s) "
                    "open: a writer that could not sync the log's name keeps nothing, "
                    "so that its next append opens the log again and syncs the name",
                    pytrace=False)

    syncs = FolderSyncs(monkeypatch, sessions)
    if retry == "a new writer":
        log.close()
        log = lesson.SessionLog(sessions, "quest-1", durable=True)
    try:
        log.append(ASK)
        synced = syncs.count
    except NotImplementedError:
        raise
    except Exception as error:      # noqa: BLE001 - reported in words below
        pytest.fail(f"the disk works again, yet the retry by {retry} raised "
                    f"{type(error).__name__}: {error}. Nothing of the line was written "
                    "when the name's sync failed, so a retry is safe and should work",
                    pytrace=False)
    finally:
        log.close()
        monkeypatch.undo()
    assert synced, (
        f"the retry by {retry} found the log there (the failed attempt created it) and "
        "returned without syncing the sessions folder: the earlier sync of the log's "
        "name failed, so the name may still not be on the disk, and a power cut would "
        "take the log with the line just acknowledged")
    entries = entries_in(path)
    assert entries == [ASK], (
        f"the log should hold the retried message once, and nothing else: {entries}")


@pytest.mark.task("04.3")
def test_a_durable_writer_syncs_the_name_of_a_log_a_plain_writer_began(
        lesson, sessions, monkeypatch):
    """A log begun by a writer without durable mode holds lines, and its name was never
    synced. Day 2's writer is durable: it resumes the log and appends, and the sessions
    folder is synced before that append returns, or a power cut could take the whole
    log with the line it was told is saved. (This is the writer's given open, just
    before the takeover of task 04.3.)"""
    with lesson.SessionLog(sessions, "quest-1") as quick:
        for message in A_FINISHED_DAY:
            quick.append(message)
    syncs = FolderSyncs(monkeypatch, sessions)
    with lesson.SessionLog(sessions, "quest-1", durable=True) as log:
        log.open_for_append()
        log.append(ASK)
        synced = syncs.count
    monkeypatch.undo()
    assert synced, (
        "a log that a writer without durable mode began was resumed by a durable one, "
        "whose append returned without syncing the sessions folder: the log's name was "
        "never synced, so a power cut could take the log and the line just "
        "acknowledged")
    entries = entries_in(sessions / "quest-1.jsonl")
    assert entries == [*A_FINISHED_DAY, ASK], (
        "the log should hold day 1's messages, then the durable writer's one: "
        f"{entries}")


@pytest.mark.task("04.3")
def test_the_repair_writes_text_that_is_not_ascii_as_itself(resume, sessions):
    """The repair's lines are written as every line of the log is: UTF-8, with text
    that is not ASCII as itself, never as \\u escapes, so that a person reading the
    log, or searching it for an item, reads the marker's preview and the made-up
    results as the agent's own lines read."""
    sword = {"id": "call_e", "type": "function", "function": {
        "name": "buy", "arguments": '{"item": "épée d’acier"}'}}
    torn = '{"role": "tool", "content": "Vendu : épée'.encode()
    path = write_log(sessions, [ASK, {"role": "assistant", "content": None,
                                      "tool_calls": [sword]}], tail=torn)
    whole = path.read_bytes()[:-len(torn)]

    resume_whole(resume, path, whole, "a torn line and a call left open")

    added = path.read_bytes()[len(whole):]
    lines = added.split(b"\n")[:-1]
    assert len(lines) == 2, (
        "the repair should add two lines, the marker and the call's result; it added "
        f"{added!r}")
    marker, answer = lines
    for raw, what, text in [(marker, "the marker's cut_preview", "Vendu : épée"),
                            (answer, "the made-up result, which names the call's "
                             "arguments", "épée d’acier")]:
        assert text.encode() in raw and b"\\u" not in raw, (
            f"{what} holds {text!r}: the line should hold that text as itself, in "
            "UTF-8, as every line of the log does (encode_line), not escaped; the "
            f"line is {raw!r}")


@pytest.mark.task("04.4")
def test_a_run_after_ctrl_c_and_its_log_closed_answers_each_open_call_once(
        lesson, sessions, town):
    """Ctrl-C inside the second of three calls, then the program closes the session's
    log (a with block ends) and runs the same agent again: its next write takes the
    log over once more, and that writer's repair answers the calls the log shows open.
    Each open call is answered once, in the log as in memory, and the log resumes."""
    tools = interrupted_in_buy(town)
    model = elder_torch_and_rope()
    log = lesson.SessionLog(sessions, "quest-1")
    agent = lesson.Agent(model.client(), model=model.model, tools=tools, session=log)
    with log:
        with pytest.raises(KeyboardInterrupt):
            agent.run("Talk to the elder and buy a torch.")
    with log:
        refused = refusal_of_next_run(agent)
    entries = entries_in(sessions / "quest-1.jsonl")
    results = [entry.get("tool_call_id") for entry in entries
               if entry.get("role") == "tool"]
    twice = sorted({call for call in results if results.count(call) > 1})
    assert refused is None and not twice, (
        "Ctrl-C stopped a run inside the second of three calls, the program closed "
        "the session's log and ran the same agent again: its first write took the log "
        "over, and that writer's repair answered the calls the log showed open. Each "
        "call should be answered once; the log answers "
        f"{twice or 'each once'} twice"
        + (f", and the model refused: {refused}" if refused else "")
        + ". Was an answer written after the repair had written its own?")
    messages = [entry for entry in entries if "$marker" not in entry]
    memory_holds_the_log(agent, messages, " after the log was closed and taken over "
                         "again")
    later = ScriptedModel([say("We go on.")])
    with lesson.SessionLog(sessions, "quest-1") as again:
        resumed = lesson.Agent(later.client(), model=later.model, tools=town,
                               session=again)
        refused = refusal_of_next_run(resumed)
    assert refused is None, (
        "the log an agent took over again after Ctrl-C, then ran on, should resume "
        f"the next day; the model refused the resumed history: {refused}")
