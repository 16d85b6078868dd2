"""Lesson 01:
append refuses what no log may hold (task 01.2, with the given check_message).

A line that the reader would refuse must never be written: the session could not be
opened again. So append() refuses such a message with InvalidMessage (a ValueError), and
leaves no trace of it: not a byte, not even an empty file.

Run: pytest lessons/01_append            (your code)
     pytest lessons/01_append --solution (the reference)
"""

import json
import os

import pytest

from sessionlab.testing import until_written

CALL = {"id": "call_1", "type": "function",
        "function": {"name": "buy", "arguments": '{"item": "rope"}'}}

NOT_MESSAGES = {
    "no object at all (None)": None,
    "a list of key and value pairs, not an object": [["role", "user"],
                                                     ["content", "hello"]],
    "its JSON as text, not an object": '{"role": "user", "content": "hi"}',
    "no key at all (an empty object)": {},
    "no role": {"content": "hello"},
    "an unknown role": {"role": "narrator", "content": "Once upon a time"},
    "a $marker key": {"role": "user", "content": "hi", "$marker": "undo", "skip": [0]},
    "a $blob key": {"role": "user", "content": "hi", "$blob": "0" * 64},
    "a content that is an object": {"role": "user", "content": {"$blob": "0" * 64}},
    "an empty tool_calls list": {"role": "assistant", "content": "", "tool_calls": []},
    "a tool call without an id": {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "buy", "arguments": "{}"}}]},
    "arguments that are not JSON": {"role": "assistant", "content": "", "tool_calls": [
        {**CALL, "function": {"name": "buy", "arguments": "{item: rope"}}]},
    "a tool result without tool_call_id": {"role": "tool", "content": "ok"},
    "NaN": {"role": "user", "content": "x", "score": float("nan")},
    "an infinite number": {"role": "user", "content": "x", "score": float("inf")},
    "a lone surrogate": {"role": "user", "content": "half a pair: \ud800"},
    "a key that is not a string": {"role": "user", "content": "x", 1: "one"},
    "a tuple (it would read back as a list)": {"role": "user", "content": ("a", "b")},
    "a set": {"role": "user", "content": "x", "tags": {"a"}},
    "bytes": {"role": "user", "content": b"rope"},
    "nesting 100 levels deep": {"role": "user", "content": "x",
                                "deep": __import__("functools").reduce(
                                    lambda inner, _: [inner], range(100), [])},
}


@pytest.fixture(autouse=True)
def until_tasks_01_4_and_01_5_are_written(lesson, monkeypatch):
    """Every append opens the log with `_open` (task 01.4) and ends in `_write` (task
    01.5), which these tests do not check: for as long as either says it is not
    written, they open the log and write the lines that are not refused with plain
    stand-ins (no care for durable mode, one write(), no guard), so that task 01.2 is
    tested first."""
    def plain_open(log):
        os.makedirs(log.folder, 0o700, exist_ok=True)
        log._fd = os.open(log.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def plain_write(log, data):
        if os.write(log._fd, data) != len(data):
            raise OSError(f"{log.path}: short write")

    until_written(monkeypatch, lesson.SessionLog, "_open", "01.4", plain_open)
    until_written(monkeypatch, lesson.SessionLog, "_write", "01.5", plain_write)


def the_rules_words(lesson, message) -> list[str]:
    """What the given check_plain_json and check_message say, each on its own, of a
    message they refuse, and what json says when it cannot write it as a line: any
    one's words are a reason an append can give."""
    def as_a_line(message):
        json.dumps(message, ensure_ascii=False, allow_nan=False).encode("utf-8")

    said = []
    for check in (lesson.check_plain_json, lesson.check_message, as_a_line):
        try:
            check(message)
        except UnicodeError as error:   # where it stands depends on the line's layout
            said.append(error.reason)
        except (ValueError, TypeError) as error:    # InvalidMessage is a ValueError
            said.append(str(error))
        except Exception:       # noqa: BLE001 - one check may not take what another
            pass                # refuses first: its words are no reason
    return said


@pytest.mark.task("01.2")
@pytest.mark.parametrize("what", sorted(NOT_MESSAGES))
def test_append_refuses_what_no_log_may_hold_and_writes_nothing(lesson, sessions, what):
    """A message the reader would refuse raises InvalidMessage, saying why in the words
    of the given rule (or of json, for what it cannot write): the caller has to know
    what to fix in its message. And the log stays as it was."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        path = log.path
        log.append({"role": "user", "content": "Hello."})
        before = path.read_bytes()
        try:
            log.append(NOT_MESSAGES[what])
        except lesson.InvalidMessage as error:
            said = str(error)
            why = the_rules_words(lesson, NOT_MESSAGES[what])
            assert not why or any(reason in said for reason in why), (
                f"a message with {what} was refused with InvalidMessage, as it should "
                f"be, saying {said!r}; the given rule says why: {' / '.join(why)}. "
                "The refusal should keep the reason's words (let the rule's "
                "InvalidMessage reach the caller, or quote it), so that the caller "
                "learns what to fix in the message rather than guess")
        except NotImplementedError:
            raise                       # a task not written yet says so itself
        except Exception as error:      # noqa: BLE001 - reported in words below
            pytest.fail(
                f"a message with {what} should be refused with InvalidMessage, not "
                f"{type(error).__name__}: {error}"
            )
        else:
            pytest.fail(
                f"append() wrote a message with {what}; reading the log back would "
                "refuse that line (or give back something else), so the session could "
                "never be resumed. Expected InvalidMessage, and nothing written."
            )
    assert path.read_bytes() == before, (
        f"a refused message must leave the log untouched; it changed after {what}")


# A first message of each half of the rule: one check_message refuses (its shape) and
# ones check_plain_json refuses (what JSON cannot give back), which a check split
# around the open lets through to it.
FIRST_REFUSED = ["no role", "NaN", "a lone surrogate", "a key that is not a string"]


@pytest.mark.task("01.2")
@pytest.mark.parametrize("what", FIRST_REFUSED)
def test_a_refused_first_message_creates_no_file(lesson, sessions, what):
    """When the very first message is refused, no log file is created for it, nor
    the sessions folder the log would have gone in, whichever half of the rule
    refuses it: its shape (no role) or its JSON (NaN, a lone surrogate, the key 1).
    Every check comes before the log is opened."""
    folder = sessions / "new"
    with lesson.SessionLog(folder, "quest-1") as log:
        try:
            log.append(NOT_MESSAGES[what])
        except lesson.InvalidMessage:
            pass
        except NotImplementedError:
            raise
        except Exception as error:      # noqa: BLE001 - reported in words below
            pytest.fail(f"a first message with {what} should be refused with "
                        f"InvalidMessage, not {type(error).__name__}: {error}",
                        pytrace=False)
        else:
            pytest.fail(f"append() accepted a message with {what}", pytrace=False)
    assert not folder.exists(), (
        f"the first message, one with {what}, was refused, yet the sessions folder it "
        "was to go in was created (it holds "
        f"{sorted(p.name for p in folder.iterdir())}): a refused message should "
        "leave no trace, no file and no folder, so every check of the rule comes "
        "before the log is opened"
    )


@pytest.mark.task("01.2")
def test_text_that_looks_like_a_marker_is_stored_as_text(lesson, sessions):
    """A user who types a marker's JSON gets it stored as text, not as a marker."""
    typed = '{"$marker": "undo", "skip": [0]}'
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": typed})
    line = log.path.read_text(encoding="utf-8")
    try:
        stored = json.loads(line)
    except ValueError:
        pytest.fail(f"the log's line is not one JSON object: {line!r}", pytrace=False)
    assert stored == {"role": "user", "content": typed}, (
        "text is text: the user typed a marker's JSON, and the line should hold it "
        f"as the message's content, a string, as it was typed; the line is {line!r}")


def append_each(log, messages: list, why: str) -> None:
    """Append each message in turn; fail in words if append refuses one: what it
    raised, then `why` the message is one to write."""
    for message in messages:
        try:
            log.append(message)
        except NotImplementedError:
            raise
        except Exception as error:      # noqa: BLE001 - reported in words
            pytest.fail(f"append refused {message!r}, raising "
                        f"{type(error).__name__}: {error}. {why}", pytrace=False)


def lines_read_back(path) -> list:
    """The log's lines, each read as JSON; fail in words at a line that is not."""
    read = []
    for number, line in enumerate(path.read_bytes().split(b"\n"), start=1):
        try:
            read.append(json.loads(line)) if line else None
        except ValueError:
            pytest.fail(f"line {number} of the log is not a JSON object on its own: "
                        f"{line[:80]!r}. Each message should be one whole line, ended "
                        "by a newline", pytrace=False)
    return read


@pytest.mark.task("01.2")
def test_text_holding_nan_or_infinity_as_words_is_written_as_said(lesson, sessions):
    """NaN and Infinity are refused as numbers, never as words: a message whose text
    says them (or whose key is named so) is written, and reads back as it was said."""
    said = [{"role": "user", "content": "NaN"},
            {"role": "assistant", "content": "Infinity and -Infinity are no numbers "
             "of JSON; NaN is none either.", "Infinity": "NaN"}]
    with lesson.SessionLog(sessions, "quest-1") as log:
        append_each(log, said, "Its text only says NaN or Infinity, as words: it is a "
                    "string, which JSON holds like any other, and the rule refuses NaN "
                    "and Infinity as numbers only")
    read = lines_read_back(log.path)
    assert read == said, (
        f"two messages that say NaN and Infinity as words were appended, {said!r}; "
        f"the log's lines read back as {read!r}")


@pytest.mark.task("01.2")
def test_every_message_the_rule_takes_is_written_as_given(lesson, sessions):
    """Whatever the given rule takes is written as it was given, line for line, in
    every shape providers and other harnesses send: a developer message, an assistant
    message whose content is null beside its calls (or that has no content at all), a
    message with a name, a system message among the others, keys of a message's own
    (a tool's result's, and an '$id' another harness adds: only $marker and $blob are
    the log's), an empty text, numbers and characters of every kind (a carriage
    return, U+2028, NUL, a letter and its combining accent typed apart, a full-width
    letter, blanks at both ends of a text). Only what the rule refuses is refused, and
    what a message holds is the caller's, not the writer's, to tidy."""
    given = [{"role": "developer", "content": "Answer as the town crier."},
             {"role": "user", "content": "Buy a rope.", "name": "ada"},
             {"role": "user", "content": ""},
             {"role": "user", "content": " cafe\u0301 au lait, \uff21, \ufb01n\n",
              "$id": "msg-7"},
             {"role": "assistant", "content": None, "tool_calls": [CALL]},
             {"role": "tool", "tool_call_id": "call_1", "content": "A rope."},
             {"role": "assistant", "tool_calls": [CALL]},
             {"role": "system", "content": "The shop closes at dusk."},
             {"role": "tool", "tool_call_id": "call_1", "gold": 2 ** 70, "weight": 1.0,
              "content": "a line\r\nanother\u2028a third\x00 \\n as text\u00e9"}]
    kept = json.loads(json.dumps(given))    # as given, whatever append does to them
    with lesson.SessionLog(sessions, "quest-1") as log:
        append_each(log, given, "The given rule takes it (providers take it, and the "
                    "reader loads it): what the rule takes is the caller's to write")
    read = lines_read_back(log.path)
    touched = [(sent, now) for sent, now in zip(kept, given) if sent != now]
    assert not touched, (
        f"append was given the message {touched[0][0]!r}, and the caller's message "
        f"is now {touched[0][1]!r}: append leaves the caller's message as it was (it "
        "is the agent's memory, which goes back to the model with every request)"
        if touched else "")
    changed = [(sent, line) for sent, line in zip(kept, read) if sent != line]
    assert len(read) == len(given) and not changed, (
        f"{len(given)} messages were appended, and the log holds {len(read)} lines"
        + (f"; the message {ascii(changed[0][0])} was written as "
           f"{ascii(changed[0][1])} (shown with escapes, so that every character "
           "shows)" if changed else "")
        + ": each line is the message as given, with nothing added, taken out or "
        "changed, so that the log holds what the caller's memory holds")
    for sent, line in zip(kept, read):
        assert json.dumps(line) == json.dumps(sent), (
            f"the message {json.dumps(sent)} was written as {json.dumps(line)}: each "
            "line is the message as given, its keys in their order, its numbers as "
            "they were (1.0 stays 1.0), its text with every character it holds")
