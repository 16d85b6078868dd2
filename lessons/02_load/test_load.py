"""Lesson 02: continue tomorrow.

Run: pytest lessons/02_load            (your code)
     pytest lessons/02_load --solution (the reference)
"""

import array
import builtins
import contextlib
import errno
import fcntl
import gc
import io
import json
import os
import pwd
import resource
import subprocess
import sys
import termios
import threading
import unicodedata
from pathlib import Path

import pytest

from sessionlab import course
from sessionlab.scripted import ScriptedModel, call, say, use
from sessionlab.testing import described, names_line, names_path, open_descriptors
from sessionlab.town import Town

DAY_ONE = [
    use(call("talk_to", npc="elder")),
    say("The elder says: bring a torch and a rope."),
]


def play_day(lesson, sessions, script, text, session_id="quest-1", town=None):
    """One day of the quest:
    a fresh model, client and agent, as a new process would have."""
    model = ScriptedModel(list(script))
    with lesson.SessionLog(sessions, session_id) as log:
        agent = lesson.Agent(
            model.client(), model=model.model, tools=town or Town(), session=log
        )
        agent.run(text)
    return agent, model


def played(lesson, sessions, script, text, setting):
    """play_day, failing with words (`setting`, then what was raised and what was
    sent) when the day raises."""
    model = ScriptedModel(list(script))
    try:
        with lesson.SessionLog(sessions, "quest-1") as log:
            agent = lesson.Agent(model.client(), model=model.model, tools=Town(),
                                 session=log)
            agent.run(text)
    except NotImplementedError:
        raise
    except Exception as error:
        sent = (f"; the model was sent {len(model.requests[-1]['messages'])} messages"
                if model.requests else ", before any request was sent")
        pytest.fail(f"{setting}, and asked a question it raised {described(error)}"
                    f"{sent}. A new agent starts from the messages its log holds, as a "
                    "list (empty for a session not started), each exactly as appended, "
                    "and sends them, then the question", pytrace=False)
    return agent, model


def write_log(lesson, sessions, messages):
    """quest-1's log, holding `messages` as the lesson's writer appends them."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in messages:
            log.append(message)


def fingerprint(path):
    info = os.stat(path)
    return path.read_bytes(), info.st_ino, info.st_mtime_ns, info.st_size


def left_as_it_was(path, data, why):
    """Fail in words unless the log at `path` still holds `data`: `why` says what ran
    on it (a load, an agent made on it), which only ever reads."""
    if not path.is_file():
        there = sorted(p.name for p in path.parent.iterdir())
        pytest.fail(f"{why}, and {path.name} is no longer there (the sessions folder "
                    f"holds {there}): loading only ever reads, whatever it finds in "
                    "the log, and leaves it where it was", pytrace=False)
    assert path.read_bytes() == data, (
        f"{why}, and it changed the log: loading only ever reads")


def load(log, holding):
    """log.load(); if it raises, the test fails saying so: `holding` is what the log
    holds and what the load should have returned."""
    try:
        loaded = log.load()
    except NotImplementedError:
        raise           # a task not written yet: the plugin says which
    except Exception as error:
        pytest.fail(f"{holding}; load() raised {described(error)}", pytrace=False)
    if not isinstance(loaded, list):
        pytest.fail(f"{holding}; load() returned a {type(loaded).__name__}, where it "
                    "should return the messages as a list: the agent adds to it, and "
                    "a caller may count it or read it twice", pytrace=False)
    return loaded


def load_or_error(log):
    """What log.load() returned, or the error it raised (judged by the test)."""
    try:
        return log.load()
    except NotImplementedError:
        raise           # a task not written yet: the plugin says which
    except Exception as error:      # noqa: BLE001 - the caller judges it
        return error


def history_of_new_agent(lesson, model, town, log, holding):
    """The history a new agent on `log` starts with; if making it raises, the test
    fails saying so: `holding` is what the log holds."""
    try:
        return lesson.Agent(model.client(), model=model.model, tools=town,
                            session=log).messages
    except NotImplementedError:
        raise
    except Exception as error:
        pytest.fail(f"{holding}; making a new agent on the session raised "
                    f"{described(error)}, where it should start from what the log "
                    "holds", pytrace=False)


def agent_started_on(lesson, model, town, log, setting, refusals, error):
    """The history a new agent on `log` starts with, or the error when it is refused
    with one of `refusals` (judged by the caller); any other exception fails the test,
    naming `error`, the one the load gives."""
    try:
        return lesson.Agent(model.client(), model=model.model, tools=town,
                            session=log).messages
    except refusals as refused:
        return refused
    except NotImplementedError:
        raise
    except Exception as found:
        pytest.fail(f"{setting}; making a new agent on the session raised "
                    f"{described(found)}, where it should raise the error load gives "
                    f"({error}): the caller learns what went wrong from it",
                    pytrace=False)


@pytest.mark.key
def history_started_from(lesson, model, town, log):
    """The history a new Agent on `log` starts from, or the error making it raised
    (judged by the caller); a task not written yet raises as it is."""
    try:
        return lesson.Agent(model.client(), model=model.model, tools=town,
                            session=log).messages
    except NotImplementedError:
        raise
    except Exception as error:      # noqa: BLE001 - judged by the caller
        return error


@pytest.mark.task("02.1")
def test_day_two_first_request_carries_all_of_day_one(lesson, sessions):
    """A new agent with day 1's session id reads the log back before its first request,
    so day 2's model sees all of day 1."""
    day_one, _ = played(lesson, sessions, DAY_ONE, "Ask the elder about the cave.",
                        "day 1 starts a new session (no log yet)")
    day_two, model = played(
        lesson, sessions, [say("A torch and a rope.")], "What did the elder say?",
        f"day 1 left {len(day_one.messages)} messages in the log (user, tool call, "
        "tool result, answer); day 2 starts a new agent on the session")

    first_request = model.requests[0]["messages"]
    assert first_request[:-1] == day_one.messages, (
        f"day 1 left {len(day_one.messages)} messages in the log (user, tool call, "
        f"tool result, answer); day 2's first request carried {len(first_request) - 1} "
        f"before the new question: {first_request[:-1]}"
    )
    question = {"role": "user", "content": "What did the elder say?"}
    assert first_request[-1] == question, (
        "day 2's first request should end with the new question, after day 1; it "
        f"ends with {first_request[-1]}")


@pytest.mark.key
@pytest.mark.task("02.1")
def test_day_two_is_appended_after_day_one(lesson, sessions):
    """Day 2 appends only its own messages after day 1's; writing the loaded history
    again would double the log."""
    day_one, _ = play_day(lesson, sessions, DAY_ONE, "Ask the elder about the cave.")
    day_two, _ = play_day(
        lesson, sessions, [say("A torch and a rope.")], "What did the elder say?"
    )

    with lesson.SessionLog(sessions, "quest-1") as log:
        loaded = load(log, "after two days the log should load as day 1 then day 2")
    assert loaded == day_two.messages, (
        "the log should hold day 1 then day 2, exactly what the agent holds"
    )
    assert len(loaded) == len(day_one.messages) + 2, (
        f"day 2 adds two messages to day 1's {len(day_one.messages)}; the log has "
        f"{len(loaded)} "
        "(did day 2 write day 1's messages a second time?)")


@pytest.mark.key
@pytest.mark.task("02.1")
def test_a_new_agent_on_a_log_open_for_writing_starts_from_all_it_holds(
        lesson, sessions, town):
    """A SessionLog the caller has written through and still holds open is a session
    like any other: a new agent given it starts from everything its log holds, and
    the log stays as it was."""
    said = [{"role": "user", "content": "Ask the elder about the cave."},
            {"role": "assistant", "content": "North, past the mill."}]
    model = ScriptedModel([say("A torch and a rope.")])
    holding = ("the caller appended 2 messages through a SessionLog it still holds "
               "open, then made a new agent on that SessionLog")
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in said:
            log.append(message)
        started = history_of_new_agent(lesson, model, town, log, holding)
        assert started == said, (
            f"{holding}; the agent started from {started}, where it should start "
            f"from the 2 messages the log holds, {said}: a writer that is open is no "
            "reason to skip the log, whoever opened it")
    with lesson.SessionLog(sessions, "quest-1") as log:
        stored = load(log, f"{holding}; the log holds those 2 messages")
    assert stored == said, (
        f"{holding}; making the agent should leave the log as it was, {said}; it "
        f"holds {stored}")


@pytest.mark.task("02.1")
def test_a_new_agent_leaves_the_writer_it_is_given_as_it_was(lesson, sessions, town):
    """Making an agent on a SessionLog the caller holds open only reads: the writer
    stays as it was, its descriptor too. Its log removed by a person while it was
    held, the writer still knows it: the agent starts empty (no log at the name) and
    its first append is refused, never written to a new file that lacks the
    conversation's start."""
    model = ScriptedModel([say("Hello.")])
    path = sessions / "quest-1.jsonl"
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": "Ask the elder about the cave."})
        path.unlink()
        holding = ("the caller appended a message through a SessionLog it holds open; "
                   "a person then removed the log, and a new agent was made on that "
                   "SessionLog")
        agent = lesson.Agent(model.client(), model=model.model, tools=town,
                             session=log)
        try:
            agent.run("Hello?")
        except NotImplementedError:
            raise
        except OSError:
            ran = None
        except Exception as error:      # noqa: BLE001 - said below
            ran = f"raised {described(error)}"
        else:
            ran = "returned"
    made = path.read_bytes() if path.exists() else None
    assert ran is None and made is None, (
        f"{holding}; its first run() {ran or 'raised OSError'}, and the log's name "
        f"now holds {made!r}: the writer lost its log while it held it open, and its "
        "appends are refused (OSError) until the session is opened again. Making the "
        "agent only reads: it leaves the writer it is given as it was (closing it lets "
        "the next append open a new file that lacks the conversation's start)")


@pytest.mark.task("02.1")
def test_a_load_through_an_open_writer_leaves_it_holding_its_log(lesson, sessions):
    """A load through a SessionLog that holds its log open to append leaves that
    writer as it was: still holding its file, and nothing more open once it is
    closed. When a person then saves another file over the log's name (as an editor
    does), the writer knows that its file is gone and refuses to append, as it would
    without any load: it never appends to the new file, which lacks the
    conversation's start."""
    said = {"role": "user", "content": "Ask the elder about the cave."}
    edited = {"role": "user", "content": "Edited by hand."}
    path = sessions / "quest-1.jsonl"
    gc.collect()
    before = open_descriptors()
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append(said)
        load(log, "the SessionLog appended one message, which should load")
        # A person saves another file over the log's name, as an editor does
        saved = sessions / ".quest-1.jsonl.swp"
        saved.write_bytes(json.dumps(edited).encode() + b"\n")
        os.replace(saved, path)
        data = path.read_bytes()
        loaded = load(log, "a person saved a log of one message over the log")
        try:
            log.append({"role": "user", "content": "Day 2."})
        except NotImplementedError:
            raise
        except OSError:
            appended = None
        except Exception as error:      # noqa: BLE001 - said below
            appended = f"raised {described(error)}"
        else:
            appended = "returned"
    leaked = open_descriptors() - before
    setting = ("a SessionLog appended a message and loaded the log; a person then "
               "saved another file over the log's name (as an editor does), and the "
               "same SessionLog loaded it again and appended")
    assert loaded == [edited], (
        f"{setting}; the second load returned {loaded!r}, where the log now holds "
        f"{[edited]!r}: each load reads the log as it is at that moment")
    kept = path.read_bytes()
    assert appended is None and kept == data, (
        f"{setting}: the append {appended or 'raised OSError'}, and the log's name "
        f"now holds {kept!r}, where it held {data!r}. The writer holds the file it "
        "opened, which the save took away from the log's name, and refuses to append "
        "(OSError) until the session is opened again; a load leaves the writer as it "
        "was (a writer made to let go of its file opens the new one, and appends "
        "after a history the model never saw)")
    assert leaked <= 0, (
        f"{setting}, then closed it; {leaked} more descriptor(s) are open than before "
        "the SessionLog was made: a load leaves nothing open, and leaves the writer's "
        "own descriptor to the writer, which close() lets go of")


@pytest.mark.task("02.1")
@pytest.mark.parametrize("through", ["load", "agent"])
@pytest.mark.parametrize("damage, then", [
    (b'{"content": "a line with no role"}\n', "mended"),
    (b'{"content": "a line with no role"}\n', "removed"),
    (b'{"role": "user", "content": "caf\xe9"}\n', "mended"),
    (b'{"role": "user", "content": "caf\xe9"}\n', "removed"),
    (None, "removed"),
], ids=["no role-mended", "no role-removed", "not UTF-8-mended",
        "not UTF-8-removed", "a folder-removed"])
def test_a_refused_load_through_an_open_writer_leaves_it_holding_its_log(
        lesson, sessions, model, town, through, damage, then):
    """A load that refuses a damaged line (or a folder a person put at the log's
    name, which cannot be read) leaves the writer it ran through as it was, as a
    load that succeeds does: 'however it ends'. Once a person mends the log in place,
    the writer appends to it as before; once a person removes what is at the log's
    name (to start over), the writer still holds its removed file: its next append
    is refused, never written to a new file that lacks the conversation's start.
    Through load() and through a new Agent on the SessionLog alike."""
    said = {"role": "user", "content": "Ask the elder about the cave."}
    path = sessions / "quest-1.jsonl"
    found = ("a person put a folder at the log's name" if damage is None else
             f"another program appended a line {damage!r} that is no message")
    more = {"role": "user", "content": "And the rope?"}
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append(said)
        data = path.read_bytes()
        if damage is None:      # a person puts a folder at the log's name
            path.unlink()
            path.mkdir()
        else:
            with open(path, "ab") as other:     # another program adds a bad line
                other.write(damage)
        if through == "load":
            refused = load_or_error(log)
        else:
            refused = agent_started_on(lesson, model, town, log, found,
                                       (ValueError, OSError),
                                       "the error that says what it cannot read")
        if not (path.is_dir() if damage is None else path.is_file()):
            there = sorted(p.name for p in sessions.iterdir())
            pytest.fail(f"{found}, and {through}() on the SessionLog gave {refused!r}; "
                        f"after it the sessions folder holds {there}, without what was "
                        "at the log's name: loading only ever reads, whatever it finds",
                        pytrace=False)
        mended = appended = None
        if then == "mended":    # a person mends the log in place: the bad line cut
            with open(path, "r+b") as file:
                file.truncate(len(data))
            try:
                log.append(more)
            except NotImplementedError:
                raise
            except Exception as error:      # noqa: BLE001 - said below
                mended = error
        else:
            if damage is None:
                path.rmdir()    # the person removes the folder
            else:
                path.unlink()   # a person removes the damaged log, to start over
            try:
                log.append({"role": "user", "content": "Day 2."})
            except NotImplementedError:
                raise
            except OSError:
                pass
            except Exception as error:      # noqa: BLE001 - said below
                appended = f"raised {described(error)}"
            else:
                appended = "returned"
    made = path.read_bytes() if path.exists() else None
    setting = (f"a SessionLog appended a message, {found}, and {through}() on that "
               f"SessionLog gave {refused!r}")
    assert isinstance(refused, Exception), (
        f"{setting}, where it should refuse what it cannot read (an OSError, or "
        "InvalidMessage naming the file and the line)")
    assert mended is None, (
        f"{setting}; a person then cut the bad line off the log in place, and the "
        f"SessionLog's next append raised {described(mended)}: the writer holds the "
        "same file, whole again, and appends to it as before. A load that refuses a "
        "line leaves the writer as it was however it ends (a writer stopped by a "
        "refused load cannot go on with a log that was mended)")
    assert then == "mended" or appended is None and made is None, (
        f"{setting}; a person then removed what was at the log's name, and the "
        "SessionLog's next append "
        f"{appended or 'raised OSError'}, leaving {made!r} at the log's name. The "
        "writer still holds the file it opened, which the person removed, and "
        "refuses to append (OSError) until the session is opened again: a load "
        "leaves the writer as it was however it ends, a refusal included (a writer "
        "closed by a refused load opens a new file at its next append, which lacks "
        "the conversation's start)")


@pytest.mark.task("02.1")
def test_an_unknown_session_starts_empty_and_creates_nothing(lesson, sessions):
    """An id with no log yet loads as an empty history, and loading it creates no
    file."""
    with lesson.SessionLog(sessions, "never-played") as log:
        loaded = load(log, "session 'never-played' has no log yet, and its load should "
                      "return [] (a conversation not started)")

    assert loaded == [], (
        f"a session with no log has no history; load() returned {loaded}")
    assert list(sessions.iterdir()) == [], (
        "loading a session that has no log created "
        f"{sorted(p.name for p in sessions.iterdir())}: loading only ever reads")
    # The empty history is the caller's own too: an agent records its messages into it
    if isinstance(loaded, list):
        loaded.append({"role": "user", "content": "Said on the first new session."})

    folder = sessions / "not-made-yet"
    with lesson.SessionLog(folder, "never-played") as log:
        loaded = load(log, "session 'never-played' lives in a folder that is not made "
                      "yet, and its load should return [] (a conversation not started)")
    made = "now exists" if folder.exists() else "is not made"
    assert loaded == [] and not folder.exists(), (
        "session 'never-played' lives in a folder not made yet (and the caller of an "
        "earlier load of another session not started added a message, in memory, to "
        f"the empty list it got); its load returned {loaded!r} and the folder {made}: "
        "a conversation not started loads as a new [] of its own, never a list an "
        "earlier caller holds, and loading creates nothing, not even its folder (the "
        "first append makes it)")


@pytest.mark.task("02.1")
def test_a_log_with_no_line_yet_loads_empty_and_stays(lesson, sessions, model, town):
    """A log that is there with no line in it (its writer opened it and stopped before
    its first line), or only empty lines, is a conversation with nothing said: it loads
    as [], a new agent starts empty, and the file stays as it was."""
    for data, what in [(b"", "an empty file (0 bytes)"),
                       (b"\n\n", "two empty lines and nothing else")]:
        path = sessions / "quest-1.jsonl"
        path.write_bytes(data)
        holding = (f"the session's log is {what}, a session with nothing said yet, "
                   "whose load should return []")
        with lesson.SessionLog(sessions, "quest-1") as log:
            loaded = load(log, holding)
            assert loaded == [], f"{holding}; load() returned {loaded!r}"
            started = history_of_new_agent(lesson, model, town, log, holding)
        assert started == [], (
            f"{holding}; a new agent on the session started with {started!r}, where it "
            "should start empty")
        kept = path.read_bytes() if path.is_file() else None
        assert kept == data, (
            f"{holding}; loading it "
            f"{'removed the file' if kept is None else f'changed it to {kept!r}'}: "
            "loading only ever reads, and a log its writer opened is a session, "
            "whose next append lands in it")


@pytest.mark.task("02.1")
def test_a_new_agent_on_an_unknown_session_starts_empty(
        lesson, sessions, model, town):
    """A new agent on an id with no log yet starts with an empty history."""
    with lesson.SessionLog(sessions, "never-played") as log:
        agent = lesson.Agent(model.client(), model=model.model, tools=town, session=log)

    assert agent.messages == [], (
        "a session with no log has no history; the new agent starts with "
        f"{agent.messages}")
    made = sorted(p.name for p in sessions.iterdir())
    assert made == [], (
        f"making an agent on a session with no log created {made}: resuming only "
        "reads, and the log is made by the first message appended to it")

    folder = sessions / "not-made-yet"
    with lesson.SessionLog(folder, "never-played") as log:
        agent = lesson.Agent(model.client(), model=model.model, tools=town, session=log)
    made = "now exists" if folder.exists() else "is not made"
    assert agent.messages == [] and not folder.exists(), (
        "session 'never-played' lives in a folder not made yet; a new agent on it "
        f"started with {agent.messages!r} and the folder {made}: it starts empty, and "
        "resuming creates nothing, not even the folder (the first append makes it)")


@pytest.mark.task("02.1")
def test_a_new_agent_on_a_damaged_log_raises_rather_than_starting_over(
        lesson, sessions, model, town):
    """A log holding a line that is no message is no new session: the new agent
    refuses it with the error load gives, whose words name the file and the line,
    and the log stays as it was, rather than starting empty and appending after a
    history the model never saw."""
    path = sessions / "quest-1.jsonl"
    data = (b'{"role": "user", "content": "Remember the rope."}\n'
            b'{"content": "a line with no role"}\n')
    path.write_bytes(data)
    with lesson.SessionLog(sessions, "quest-1") as log:
        try:
            agent = lesson.Agent(model.client(), model=model.model, tools=town,
                                 session=log)
        except lesson.InvalidMessage as error:
            missing = unnamed(str(error), path, 2)
            assert not missing, (
                "line 2 of the session's log is no message (it has no role), and "
                f"making a new agent on the session raised {described(error)}, whose "
                f"words do not name {missing}: the "
                "error load gives reaches whoever made the agent as it is, so that "
                "the person who reads it (on a screen, in a server's log, which show "
                "an error's words, not what it was chained to) finds the line to "
                "mend")
        except NotImplementedError:
            raise
        except Exception as error:
            pytest.fail(
                "line 2 of the session's log is no message (it has no role), and "
                f"making a new agent on the session raised {described(error)}, where "
                "it should raise the InvalidMessage load gives, naming the file and "
                "the line", pytrace=False)
        else:
            pytest.fail(
                "line 2 of the session's log is no message (it has no role), and a "
                f"new agent on the session started with {agent.messages!r} instead of "
                "raising the error load gives (InvalidMessage, naming the file and the "
                "line). Started over, the session's next messages land after a "
                "history the model never saw, and the damage is never mended",
                pytrace=False)
    left_as_it_was(path, data, "line 2 of the session's log is no message, and a new "
                   "agent was made on the session")


GOOD_LINE = b'{"role": "user", "content": "Remember the rope."}'
AGENT_CASES = [  # (what the log holds, its bytes, the line refused or None: loads)
    ("a first line that is JSON but no message (it has no role)",
     b'{"content": "no role"}\n' + GOOD_LINE + b"\n", 1),
    ("a line of spaces between two messages",
     GOOD_LINE + b"\n   \n" + GOOD_LINE + b"\n", 2),
    ("a carriage return alone on a line between two messages",
     GOOD_LINE + b"\n\r\n" + GOOD_LINE + b"\n", 2),
    ("two messages, then a last line torn by a writer killed mid-line",
     GOOD_LINE + b"\n" + GOOD_LINE + b'\n{"role": "user", "con', 3),
    ("a byte-order mark before its first message",
     b"\xef\xbb\xbf" + GOOD_LINE + b"\n" + GOOD_LINE + b"\n", 1),
    ("a second line whose bytes are not UTF-8",
     GOOD_LINE + b'\n{"role": "user", "content": "caf\xe9"}\n', 2),
    ("two messages, the second without its newline",
     GOOD_LINE + b"\n" + GOOD_LINE, None),
]


def unnamed(words, path, line) -> str:
    """What an error's words leave out of what a person needs to find a line: the
    file's whole path, its line number, or both, in words; '' when they name both."""
    missing = [what for what, named in (
        (f"the file by its path ({path})", names_path(words, path)),
        (f"line {line}", names_line(words, line))) if not named]
    return " nor ".join(missing)


def what_it_did(result) -> str:
    """'raised ...' or 'returned ...': what a call came to, in words."""
    if isinstance(result, BaseException):
        return f"raised {described(result)}"
    return f"returned {result!r:.300}"


@pytest.mark.task("02.1")
def test_a_new_agent_starts_from_what_load_reads_and_is_refused_where_it_refuses(
        lesson, sessions, model, town):
    """A new agent's history is what load reads, line for line, by the same rule: on
    each log load refuses (a line that is no message, of spaces, torn, with a
    byte-order mark, not UTF-8) making the agent raises the InvalidMessage load gives,
    and a log load reads whole starts the agent from all of it. A resume that reads
    the log by a rule of its own resumes logs load refuses, or refuses logs it reads."""
    path = sessions / "quest-1.jsonl"
    for what, data, refused in AGENT_CASES:
        path.write_bytes(data)
        setting = f"the session's log holds {what}: {data!r}"
        with lesson.SessionLog(sessions, "quest-1") as log:
            started = history_started_from(lesson, model, town, log)
            # Which of the two is wrong: a load that reads the log otherwise than the
            # format says is the fault to name, not the agent that trusts it
            try:
                loaded = log.load()
            except NotImplementedError:
                raise
            except Exception as error:      # told in words below
                loaded = error
        if refused is None and loaded != [json.loads(GOOD_LINE)] * 2:
            pytest.fail(f"{setting}; every line of it is a message, so load() should "
                        f"read both, and it {what_it_did(loaded)}", pytrace=False)
        if refused is not None and not isinstance(loaded, lesson.InvalidMessage):
            pytest.fail(f"{setting}; line {refused} is no message, so load() should "
                        "refuse the log with InvalidMessage naming that line, and it "
                        f"{what_it_did(loaded)}", pytrace=False)
        if refused is None:
            expected = [json.loads(GOOD_LINE)] * 2
            got = (f"raised {described(started)}" if isinstance(started, Exception)
                   else f"started with {started!r}")
            assert started == expected, (
                f"{setting}; load() reads {expected!r} from it, and a new agent on the "
                f"session {got}, where it should start from what load reads, all of it")
        elif not isinstance(started, lesson.InvalidMessage):
            got = (f"raised {described(started)}" if isinstance(started, BaseException)
                   else f"started with {started!r}")
            pytest.fail(f"{setting}; load() refuses it (InvalidMessage, line "
                        f"{refused}), and a new agent on the session {got}, where "
                        "making it should raise the InvalidMessage load gives: the "
                        "agent resumes what load reads, by the same rule, and a log "
                        "load refuses is no history to start from", pytrace=False)
        elif missing := unnamed(str(loaded), path, refused):
            pytest.fail(f"{setting}; line {refused} is no message, and load() refused "
                        f"the log with {described(loaded)}, whose words do not name "
                        f"{missing}: a person finds the line to mend by those words",
                        pytrace=False)
        elif missing := unnamed(str(started), path, refused):
            pytest.fail(f"{setting}; load() refuses it naming the file and line "
                        f"{refused}, and making a new agent on the session raised "
                        f"{described(started)}, whose words do not name {missing}: "
                        "the error load gives reaches whoever made the agent as it "
                        "is, so that the person who reads it finds the line to mend",
                        pytrace=False)
        left_as_it_was(path, data, f"{setting}; a new agent was made on it")


@pytest.mark.task("02.1")
def test_an_agent_without_a_session_starts_empty(lesson, model, town):
    """An agent given no session works in memory as in lesson 00 and starts empty."""
    try:
        agent = lesson.Agent(model.client(), model=model.model, tools=town)
    except (AttributeError, TypeError) as error:
        pytest.fail("an agent given no session (session=None, as in lesson 00) could "
                    f"not be made: resuming it raised {type(error).__name__}: {error}. "
                    "Such an agent has no log to read and starts empty", pytrace=False)
    assert agent.messages == [], (
        "an agent given no session should start empty; it starts with "
        f"{agent.messages}")
    model.add(say("Hello, adventurer."))
    agent.run("Hello?")
    second = lesson.Agent(model.client(), model=model.model, tools=town)
    assert second.messages == [], (
        "an agent given no session talked (its history now holds "
        f"{len(agent.messages)} messages); a second agent given no session should "
        f"start empty, and starts with {second.messages!r}: each agent's history is "
        "its own, never a list that every agent without a session shares")

    guide = "You are a guide in a small town."
    model.add(say("Welcome to the town."))
    prompted = lesson.Agent(model.client(), model=model.model, tools=town,
                            system=guide)
    started = list(prompted.messages)
    prompted.run("Where am I?")
    sent = model.requests[-1]["messages"]
    expected = [{"role": "system", "content": guide},
                {"role": "user", "content": "Where am I?"}]
    assert started == [] and sent == expected, (
        f"an agent given no session and the system prompt {guide!r} started with "
        f"{started!r}, and its first request carried roles "
        f"{[m.get('role') for m in sent]}: {sent!r}. It should start empty and send "
        "its prompt once, first, then the question: the prompt is the agent's "
        "setting, sent with every request, never a message of its history")


@pytest.mark.key
@pytest.mark.task("02.1")
def test_loading_never_rewrites_or_truncates_the_log(lesson, sessions):
    """Loading only reads: the log's bytes, inode and modification time stay as they
    were, so a reader can never damage a session."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in [{"role": "user", "content": "Ask the elder about the cave."},
                        {"role": "assistant", "content": "Bring a torch and a rope."}]:
            log.append(message)
    path = sessions / "quest-1.jsonl"
    before = fingerprint(path)

    for _ in range(2):
        with lesson.SessionLog(sessions, "quest-1") as log:
            load(log, "the log holds two messages, which should load")

    after = fingerprint(path)
    assert after[0] == before[0], "loading changed the log's bytes"
    assert after[1] == before[1], (
        "loading replaced the log with a new file (its inode changed)"
    )
    assert after[2] == before[2], (
        "loading wrote to the log: its bytes are the same, but its modification time "
        "changed, so a load opened it to write"
    )


@pytest.mark.task("02.1")
def test_unicode_line_separators_inside_content_load_back_exactly(lesson, sessions):
    """Content holding U+2028, U+2029 or U+0085 loads back exactly: they are text inside
    a line, not the end of one. So do the line ends of its text, whatever they are
    ('\\r\\n' of a text pasted on Windows among them): a load does not clean them."""
    tricky = "one\u2028two\u2029three\x85four\x1cfive\rsix\nseven\r\neight"
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": tricky})
        log.append({"role": "assistant", "content": "noted"})
        wrote = (f"append wrote two messages, the first with the text {tricky!r} "
                 "(U+2028, U+2029 and U+0085 stand unescaped in its line, the rest "
                 "escaped), the second 'noted'")
        try:
            loaded = log.load()
        except NotImplementedError:
            raise
        except Exception as error:
            # Say what load raised; guess at a cause only when its words show one.
            pieces = ("not JSON" in str(error) and "line 1" in str(error)
                      and "codec" not in str(error))
            why = (". Line 1 is one whole JSON object: a piece of it that is no JSON "
                   "was cut somewhere inside it" if pieces else "")
            pytest.fail(f"{wrote}; load() raised {described(error)}, where it should "
                        f"return both messages{why}", pytrace=False)

    contents = [m.get("content") if isinstance(m, dict) else m for m in loaded]
    assert contents == [tricky, "noted"], (
        f"{wrote}; load() returned the contents {contents!r}, where it should return "
        "the two texts exactly as written")


CR_CASES = [  # (what line 2 holds, its bytes, the messages it is: None if refused)
    ("a message with a carriage return between two of its JSON values",
     b'{"role": "user",\r"content": "Remember the rope."}', 1),
    ("a message with a carriage return after it, before its newline",
     GOOD_LINE + b"\r", 1),
    ("two messages with a carriage return, not a newline, between them",
     GOOD_LINE + b"\r" + GOOD_LINE, None),
]


@pytest.mark.task("02.1")
@pytest.mark.parametrize("what, line, count", CR_CASES, ids=["between", "after",
                                                            "joining"])
def test_a_carriage_return_ends_no_line_of_the_log(lesson, sessions, what, line, count):
    """Only the newline byte ends a line of the log. A carriage return is whitespace
    JSON allows between values: a line holding one, before a value or after the last,
    is one message, as parse_line reads it; two messages joined by one are one line
    that is no message, refused as such."""
    path = sessions / "quest-1.jsonl"
    data = GOOD_LINE + b"\n" + line + b"\n" + GOOD_LINE + b"\n"
    path.write_bytes(data)
    setting = f"the log's line 2, between two messages, holds {what}: {line!r}"
    with lesson.SessionLog(sessions, "quest-1") as log:
        loaded = load_or_error(log)
    if count is not None:
        got = (f"raised {described(loaded)}" if isinstance(loaded, Exception)
               else f"returned {loaded!r}")
        assert loaded == [json.loads(GOOD_LINE)] * 3, (
            f"{setting}; load() {got}, where it should return the three messages: "
            "only the newline byte ends a line of this log (append ends each line "
            "with it), and a carriage return between JSON values is whitespace, "
            "which parse_line reads")
    else:
        named = (isinstance(loaded, lesson.InvalidMessage)
                 and names_line(str(loaded), 2))
        got = (f"raised {described(loaded)}" if isinstance(loaded, Exception)
               else f"returned {loaded!r}")
        assert named, (
            f"{setting}; load() {got}, where it should raise an InvalidMessage "
            "naming the file and line 2: only the newline byte ends a line of this "
            "log, so line 2 is one line, and no message")
    left_as_it_was(path, data, f"{setting}; load() ran on it")


@pytest.mark.task("02.1")
def test_tool_calls_and_empty_content_survive_the_round_trip(
        lesson, sessions, model, town):
    """Tool calls, tool results, a null content, a content left out, a content in
    parts and keys of a provider's own load back exactly as they were written, and a
    new agent starts from them as they are, so the resumed request is the one that
    was valid."""
    def calling(call_id, name, arguments):
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        return [{"id": call_id, "type": "function",
                 "function": {"name": name, "arguments": arguments}}]
    messages = [
        {"role": "user", "content": "Buy a rope.\u2028Or two, café\x85?",
         "name": "adventurer"},
        {"role": "assistant", "content": None,
         "tool_calls": calling("call_1_0", "buy", '{"item":"rope","for":"Zoë"}')},
        {"role": "tool", "tool_call_id": "call_1_0",
         "content": "You bought a rope for 4 gold. 6 gold left."},
        {"role": "assistant", "reasoning_content": "The elder may know more.",
         "tool_calls": calling("call_1_1", "talk_to", {"npc": "elder"})},
        {"role": "tool", "tool_call_id": "call_1_1", "content": ""},
        {"role": "user", "content": [
            {"type": "text", "text": "And this map?\r\nThe cafe\u0301 is on it."},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]},
        {"role": "assistant", "content": None},
        {"role": "assistant", "content": ""},
    ]
    write_log(lesson, sessions, messages)
    wrote = ("append wrote a user message with a name (its text holding U+2028 and "
             "U+0085, which end no line of the log), a tool call with content null "
             "(its arguments the text '{\"item\":\"rope\",\"for\":\"Zoë\"}', "
             "written without spaces, as a model may), its result, a tool call "
             "whose message has no content at all but a key of a provider's own "
             "(reasoning_content), its result, empty, a user's message in parts "
             "(an image, and a text holding a line end '\\r\\n' and an e with a "
             "combining accent, as they were typed), an answer with content null and "
             "no tool call (another harness appends a model that said nothing so), "
             "and an answer "
             "with content \"\"")

    def changes(got):
        said = []
        for n, (put, back) in enumerate(zip(messages, got), start=1):
            if isinstance(back, dict) and set(put) ^ set(back):
                said.append(f"message {n} lost {sorted(set(put) - set(back))} and "
                            f"gained {sorted(set(back) - set(put))}")
        return f" ({'; '.join(said)})" if said else ""

    with lesson.SessionLog(sessions, "quest-1") as log:
        loaded = load(log, f"{wrote}, which should load back exactly")
        assert loaded == messages, (
            f"{wrote}; they should load back exactly as written{changes(loaded)}; "
            f"wrote {messages!r}, loaded {loaded!r}")
        started = history_of_new_agent(lesson, model, town, log, wrote)
    assert started == messages, (
        f"{wrote}; a new agent on the session should start from them exactly as "
        f"written{changes(started)}, and started from {started!r}: resuming sends "
        "what was said, neither cleaned nor filled in")


@pytest.mark.task("02.1")
def test_text_holding_nan_or_infinity_as_words_loads_back_exactly(lesson, sessions):
    """NaN and Infinity are refused as numbers, never as words: messages whose text
    says them (or whose key is named so), as append writes them, load back exactly."""
    said = [{"role": "user", "content": "NaN"},
            {"role": "assistant", "content": "Infinity and -Infinity are no numbers "
             "of JSON; NaN is none either.", "Infinity": "NaN"}]
    write_log(lesson, sessions, said)
    holding = (f"the log holds two messages that say NaN and Infinity as words, "
               f"{said!r}, as append wrote them, and they should load back exactly")
    with lesson.SessionLog(sessions, "quest-1") as log:
        loaded = load(log, holding)
    assert loaded == said, f"{holding}; load() returned {loaded!r}"


@pytest.mark.task("02.1")
def test_a_log_a_crash_left_unanswered_loads_as_it_is(lesson, sessions, model, town):
    """A crash between a tool call and its results leaves a log that ends with calls
    not all answered. This lesson's load mends nothing: it returns the log's messages
    as they are, and a new agent starts from them (lesson 04 repairs such a tail)."""
    calls = [{"id": f"call_1_{n}", "type": "function",
              "function": {"name": "talk_to", "arguments": json.dumps({"npc": npc})}}
             for n, npc in enumerate(["elder", "guard"])]
    history = [{"role": "user", "content": "Ask the elder and the guard."},
               {"role": "assistant", "content": None, "tool_calls": calls},
               {"role": "tool", "tool_call_id": "call_1_0",
                "content": "The elder says: bring a torch."}]
    for session_id, kept, left in [("quest-1", 2, "no result of either"),
                                   ("quest-2", 3, "the result of the first only")]:
        with lesson.SessionLog(sessions, session_id) as log:
            for message in history[:kept]:
                log.append(message)
        path = sessions / f"{session_id}.jsonl"
        data = path.read_bytes()
        holding = (f"the log of {session_id} ends as a crash left it: a user message, "
                   f"the model's two tool calls, then {left}")
        with lesson.SessionLog(sessions, session_id) as log:
            loaded = load(log, holding)
            assert loaded == history[:kept], (
                f"{holding}; load() returned {loaded!r}, where it should return the "
                f"{kept} messages as they are: loading mends nothing, whatever it "
                "finds (repairing a tail is lesson 04's, and writes what it adds to "
                "the log)")
            agent = lesson.Agent(model.client(), model=model.model, tools=town,
                                 session=log)
        assert agent.messages == history[:kept], (
            f"{holding}; a new agent on the session started from {agent.messages!r}, "
            f"where it should start from the {kept} messages as the log holds them")
        left_as_it_was(path, data, f"{holding}; load() and a new agent ran on it")


@pytest.mark.task("02.1")
def test_a_tool_result_whose_call_the_log_lacks_loads_as_it_is(lesson, sessions,
                                                               model, town):
    """A log another harness wrote may hold a tool result whose call it does not hold
    (that harness kept the call elsewhere, or began the log mid-exchange), or one
    before its call. Each is a message by its JSON value: load returns it and a new
    agent starts from it, in its place, line for line. Whether a provider takes the
    request is the request's matter (lesson 04 mends only a torn tail); a load that
    refuses or drops it sends a history the log does not hold."""
    call_id = "call_elder_1"
    history = [
        {"role": "tool", "tool_call_id": "call_day_0", "content": "The gate is shut."},
        {"role": "user", "content": "Ask the elder."},
        {"role": "tool", "tool_call_id": call_id, "content": "Bring a torch."},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": "talk_to", "arguments": '{"npc": "elder"}'}}]},
        {"role": "assistant", "content": "The elder says: bring a torch."},
    ]
    path = sessions / "quest-1.jsonl"
    path.write_bytes(b"".join(json.dumps(message).encode() + b"\n"
                              for message in history))
    data = path.read_bytes()
    holding = ("the log, as another harness wrote it, begins with a tool result whose "
               "call it does not hold, and holds a result before the call it answers")
    with lesson.SessionLog(sessions, "quest-1") as log:
        loaded = load_or_error(log)
        started = history_started_from(lesson, model, town, log)
    for who, got in [("load()", loaded), ("a new agent on the session", started)]:
        said = (f"raised {described(got)}" if isinstance(got, Exception)
                else f"gave {got!r}")
        assert got == history, (
            f"{holding}; {who} {said}, where it should give the log's "
            f"{len(history)} messages as they are, in their order: each line that "
            "holds a message is one, and a load neither judges the conversation nor "
            "mends it")
    left_as_it_was(path, data, f"{holding}; a load and a new agent ran on it")


@pytest.mark.task("02.1")
def test_a_log_whose_turns_reuse_a_call_id_loads_as_it_is(lesson, sessions, model,
                                                        town):
    """Some servers number a turn's tool calls from call_0 again in every turn, and a
    harness may append a tool's result twice (the tool retried). Each line is a
    message all the same: load returns them, and a new agent starts from them, line
    for line, every id as written. A resume that gives a repeated id a new one leaves
    the results answering no call; one that keeps a call's first result only drops
    later turns' results."""
    def calling(name, **arguments):
        return {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_0", "type": "function",
             "function": {"name": name, "arguments": json.dumps(arguments)}}]}
    history = [
        {"role": "user", "content": "Ask the elder."},
        calling("talk_to", npc="elder"),
        {"role": "tool", "tool_call_id": "call_0", "content": "(no answer)"},
        {"role": "tool", "tool_call_id": "call_0", "content": "Bring a torch."},
        {"role": "assistant", "content": "The elder says: bring a torch."},
        {"role": "user", "content": "Buy one."},
        calling("buy", item="torch"),
        {"role": "tool", "tool_call_id": "call_0", "content": "Bought a torch."},
        {"role": "assistant", "content": "You have a torch."},
    ]
    write_log(lesson, sessions, history)
    expected = json.loads(json.dumps(history))
    holding = ("the log holds two turns whose tool calls both have the id call_0 (a "
               "server that numbers each turn's calls from 0), the first answered "
               "twice (its tool retried)")
    with lesson.SessionLog(sessions, "quest-1") as log:
        loaded = load_or_error(log)
        started = history_started_from(lesson, model, town, log)
    for who, got in [("load()", loaded), ("a new agent on the session", started)]:
        ids = ([[c.get("id") for c in m.get("tool_calls") or []]
                or m.get("tool_call_id") for m in got if isinstance(m, dict)]
               if isinstance(got, list) else [])
        said = (f"raised {described(got)}" if isinstance(got, Exception)
                else f"gave {len(got)} messages, their ids {ids}")
        assert got == expected, (
            f"{holding}; {who} {said}, where it should give the log's "
            f"{len(history)} messages as written, in their order, every id as it is: "
            "a load neither judges the conversation nor mends it, and a new id, or a "
            "result left out, makes a history the log does not hold")


@pytest.mark.task("02.1")
def test_a_log_larger_than_one_read_loads_whole(lesson, sessions):
    """A log of CJK text, and of megabytes, loads back exactly, whatever the reads: no
    read of a fixed size, however generous, is the whole of every log."""
    # 3-byte characters after a 1-byte one: every power-of-two read size ends, somewhere
    # in the file, in the middle of a character.
    messages = [{"role": "user", "content": "x" + "洞窟の地図" * 8_000 + f" part {n}"}
                for n in range(3)]
    # One pasted text of 17 MiB: larger than a read of 1 MB, 1, 4 or 16 MiB.
    messages.insert(2, {"role": "user", "content": "The map: " + "ab" * (17 << 19)})
    write_log(lesson, sessions, messages)
    size = (sessions / "quest-1.jsonl").stat().st_size

    with lesson.SessionLog(sessions, "quest-1") as log:
        loaded = load(log, f"append wrote 4 messages, three of CJK text and one of "
                      f"17 MiB, {size // 1024} KiB in all, which should load back "
                      "whole")

    lengths = [len(m.get("content") or "") for m in loaded if isinstance(m, dict)]
    expected = [len(m["content"]) for m in messages]
    assert len(loaded) == 4, (
        f"the log holds 4 messages in {size // 1024} KiB and load() returned "
        f"{len(loaded)} (of {lengths} characters, expected {expected}): the end of the "
        "log was never read")
    same = loaded == messages       # not in the assert: no diff of MiB of text
    assert same, (
        f"the {size // 1024} KiB log came back changed ({lengths} characters, "
        f"expected {expected}, or different text). All but one of the characters of "
        "the CJK messages are 3 bytes long in UTF-8, and some came back lost or "
        "replaced")


def bytes_waiting(fd):
    """How many bytes the pipe open as `fd` holds, not read yet."""
    waiting = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, waiting)
    return waiting[0]


@pytest.mark.task("02.1")
def test_a_log_whose_reads_return_less_than_asked_loads_whole(lesson, sessions):
    """A read may return fewer bytes than it asked for before the end of a file: a
    pipe does, and so may a network or user-space file system, whose size, as stat
    says it, may be 0. Only a read that returns nothing is the end. A log another
    program writes into a named pipe at its name, a line at a time (each one given
    only once the last is read), loads whole, however the load reads; or, if the load
    will not read a pipe, it says so with an error, never with fewer messages."""
    messages = [{"role": "user", "content": "Ask the elder about the cave."},
                {"role": "assistant", "content": "洞窟の地図: north, then east."},
                {"role": "user", "content": "Buy a torch."}]
    data = b"".join(json.dumps(message, ensure_ascii=False).encode("utf-8") + b"\n"
                    for message in messages)
    pieces = data.splitlines(keepends=True)
    path = sessions / "quest-1.jsonl"
    os.mkfifo(path, 0o600)
    writer = [os.open(path, os.O_RDWR)]     # a pipe holds what is written, unread
    os.write(writer[0], pieces[0])
    done = threading.Event()

    def feed():
        for piece in [*pieces[1:], None]:
            while bytes_waiting(writer[0]):     # until the load has read it all
                if done.wait(0.001):
                    return
            if piece is None:
                os.close(writer.pop())          # the end: the next read returns b""
            else:
                os.write(writer[0], piece)
        while not done.wait(0.002):     # a second open of the pipe finds its end too
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        with lesson.SessionLog(sessions, "quest-1") as log:
            loaded = load_or_error(log)
    finally:
        done.set()
        feeder.join()
        for fd in writer:
            os.close(fd)
    refused = (isinstance(loaded, Exception)
               and not isinstance(loaded, lesson.InvalidMessage))
    if loaded == messages or refused:
        return      # all of it, or an error that says it was not read: no history lost
    sizes = ", ".join(str(len(piece)) for piece in pieces)
    setting = (f"the log's {len(data)} bytes, 3 messages, came to the load's reads a "
               f"line at a time, in pieces of {sizes} bytes: it is a named pipe "
               "another program writes into, whose reads return what is there, and "
               "whose size, as stat says it, is 0")
    if isinstance(loaded, BaseException):
        said = (f"load() raised {described(loaded)}, though every line of it is a "
                "whole message")
    else:
        held = len(loaded) if isinstance(loaded, list) else loaded
        said = f"load() returned {held!r} message(s), where it should return the 3"
    pytest.fail(f"{setting}; {said}. A read that returns fewer bytes than it asked for "
                "is not the end of the file, nor is the size stat gives: only a read "
                "that returns nothing is, as on a network or user-space file system "
                "(a load that will not read such a file raises an error that says "
                "so, rather than return part of a history)", pytrace=False)


@pytest.mark.task("02.1")
def test_a_long_history_is_resumed_whole(lesson, sessions, model, town):
    """A new agent starts from every message of a long log, not from its last few,
    nor from as many as some budget of words allows, and from each message whole:
    1,000 messages, 1 MB of text, one of them a pasted map of 100,000 characters."""
    history = []
    for n in range(500):
        history += [{"role": "user", "content": f"question {n} " + "where? " * 140},
                    {"role": "assistant", "content": f"answer {n} " + "there. " * 140}]
    history[600] = {"role": "user", "content": "The map: " + "ab" * 50_000}
    write_log(lesson, sessions, history)
    model.add(say("All of it."))

    with lesson.SessionLog(sessions, "quest-1") as log:
        agent = lesson.Agent(model.client(), model=model.model, tools=town, session=log)
        agent.run("What did we talk about?")

    sent = model.requests[0]["messages"] if model.requests else []
    changed = [n for n, (was, now) in enumerate(zip(history, sent)) if was != now]
    if len(sent) - 1 == len(history) and changed:
        was, now = history[changed[0]], sent[changed[0]]
        pytest.fail(
            f"the first request of the new agent carried the {len(history)} messages "
            f"of the log, but {len(changed)} of them changed: message "
            f"{changed[0] + 1}, {len(str(was.get('content')))} characters of text as "
            f"appended, was sent as {len(str(now.get('content')))} characters "
            f"({str(now)[:80]}...). Resume returns each message exactly as appended, "
            "however long: trimming it to fit a context window is a later decision, "
            "made on the request, never on what is loaded", pytrace=False)
    assert sent[:-1] == history, (
        f"the log holds {len(history)} messages (1 MB of text); the first request of "
        f"the new agent carried {max(len(sent) - 1, 0)} of them"
        f"{' (not the first ones)' if sent[:1] != history[:1] else ''}. Resume "
        "returns the whole history: "
        "trimming it to fit a context window is a later decision, made on the "
        "request, never on what is loaded")


@pytest.mark.task("02.1")
def test_a_log_that_cannot_be_read_is_an_error_not_an_empty_session(lesson, sessions):
    """Only a missing log is a new session; a log that cannot be read raises."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": "Remember the rope."})
    log = lesson.SessionLog(sessions, "quest-1")

    # A real "too many open files": lower this process's descriptor limit to the lowest
    # free descriptor, so that opening the log fails with EMFILE, then restore it.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowest = os.open(os.devnull, os.O_RDONLY)
    os.close(lowest)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest, hard))
    try:
        loaded = log.load()
    except OSError as error:
        loaded = error      # judged below, once the limit is back
    except NotImplementedError:
        raise
    except Exception as error:
        pytest.fail("the log exists but could not be opened (too many open files), "
                    f"and load() raised {described(error)}, where it should let the "
                    "OSError that says so reach the caller", pytrace=False)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        log.close()
    if isinstance(loaded, OSError):
        assert names_path(str(loaded), log.path), (
            "the log exists but could not be opened (too many open files), and load() "
            f"raised {described(loaded)}, whose words do not name the log by its path "
            f"({log.path}): the error reaches the caller naming the file it could not "
            "read and why, so that whoever reads it knows which log to look at")
        assert loaded.errno == errno.EMFILE, (
            "the log exists but could not be opened (too many open files), and load() "
            f"raised {described(loaded)}, with the errno {loaded.errno!r}, where the "
            "error that happened (EMFILE) should reach the caller as it is: a server "
            "tells 'too many open files', which passes, from a log it may not read by "
            "the error's errno, which an OSError made from words alone loses")
        return
    if loaded == [{"role": "user", "content": "Remember the rope."}]:
        return      # it read the log without a new descriptor: that is a load too
    pytest.fail(
        "the log exists but could not be opened (too many open files) and load() "
        f"returned {loaded!r}, as if the session were new. The caller must learn that "
        "the log could not be read: an empty history starts the session over, and its "
        "next append lands in the old log")


@pytest.mark.task("02.1")
def test_loading_many_times_leaks_no_descriptors(lesson, sessions):
    """load() closes the file it reads, however often it is called, and when it
    refuses a damaged log too, or one it cannot read (a folder at its name)."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": "hello"})
    gc.collect()        # what earlier tests left to be collected closes now, not below
    before = open_descriptors()
    with lesson.SessionLog(sessions, "quest-1") as log:
        for _ in range(20):
            load(log, "the log holds one message, which should load")
    leaked = open_descriptors() - before

    assert leaked <= 0, (
        f"after 20 loads, {leaked} more descriptors are open than before them: each "
        "load left the log open, and a server resuming many sessions runs out of "
        "descriptors")

    def leaked_by_20_refused_loads(session_id):
        """(descriptors left open, errors kept) after 20 loads of a log load refuses,
        the caller keeping each error, as a server keeps the errors it reports."""
        gc.collect()
        before = open_descriptors()
        refusals = []
        with lesson.SessionLog(sessions, session_id) as log:
            for _ in range(20):
                try:
                    log.load()
                except NotImplementedError:
                    raise
                except Exception as error:  # noqa: BLE001 - refusals tested elsewhere
                    refusals.append(error)
        leaked, kept = open_descriptors() - before, len(refusals)
        refusals.clear()    # a failing test keeps its variables: let the files go now
        return leaked, kept

    (sessions / "damaged.jsonl").write_bytes(
        b'{"role": "user", "content": "hello"}\n{"content": "no role"}\n')
    leaked, kept = leaked_by_20_refused_loads("damaged")
    assert leaked <= 0, (
        f"after 20 loads of a log whose line 2 is no message, each refused (the caller "
        f"keeping the {kept} errors, to report them), {leaked} more "
        "descriptors are open than before them: a load that stops at a damaged line "
        "leaves the log open (an error keeps the load's variables alive while it is "
        "kept, an open file among them, unless the load closed it), and a server that "
        "meets such logs runs out of descriptors")

    (sessions / "unreadable.jsonl").mkdir()     # opened, it cannot be read (EISDIR)
    leaked, kept = leaked_by_20_refused_loads("unreadable")
    assert leaked <= 0, (
        f"after 20 loads of a log that is a folder, each refused (the caller keeping "
        f"the {kept} errors), {leaked} more descriptors are open than before them: a "
        "load whose read fails leaves the log open, and a server that meets such logs "
        "runs out of descriptors")


@pytest.mark.task("02.1")
def test_a_folder_at_the_logs_name_is_an_error_not_an_empty_session(
        lesson, sessions, model, town):
    """A folder where the log should be is there but is no log that can be read: the
    load and the new agent raise, rather than start the session over, and the load's
    error names the log by its path (an error that knows only a descriptor, 'Is a
    directory', leaves whoever reads it to guess which of many logs it was)."""
    path = sessions / "quest-1.jsonl"
    path.mkdir()
    (path / "notes.txt").write_bytes(b"not a log\n")
    setting = ("quest-1.jsonl, the session's log, is a folder (holding a file), not a "
               "file")
    with lesson.SessionLog(sessions, "quest-1") as log:
        loaded = load_or_error(log)
        started = agent_started_on(lesson, model, town, log, setting,
                                   (OSError, ValueError),
                                   "the OSError that says what is there")
    if isinstance(loaded, Exception) and not isinstance(loaded, (OSError, ValueError)):
        pytest.fail(f"{setting}; load() raised {described(loaded)}, where it should "
                    "raise the OSError that says what is there (or an InvalidMessage "
                    "naming it)", pytrace=False)
    assert isinstance(loaded, Exception), (
        f"{setting}; load() returned {loaded!r}, as if the session were new. Only a "
        "missing log is a conversation not started: started over here, the session's "
        "first append fails, or lands after a history nobody read")
    assert names_path(str(loaded), path), (
        f"{setting}; load() raised {described(loaded)}, whose words do not name the "
        f"log by its path ({path}): anything at the log's name that cannot be read is "
        "an error naming the log, so that whoever reads it knows which file to look at "
        "(os.read, or a file object made on a descriptor, knows no name: say it)")
    assert not isinstance(loaded, OSError) or loaded.errno is not None, (
        f"{setting}; load() raised {described(loaded)}, an OSError with no errno, "
        "made from words alone: the error that happened (IsADirectoryError, EISDIR) "
        "reaches the caller as it is, its kind kept, so that a program can tell what "
        "went wrong without reading its words")
    assert isinstance(started, Exception), (
        f"{setting}; a new agent on the session started with {started!r}, as if the "
        "session were new, where making it should raise the error load gives")
    assert names_path(str(started), path), (
        f"{setting}; making a new agent on the session raised {described(started)}, "
        f"whose words do not name the log by its path ({path}), where load's error "
        "does: the agent lets the error load gives reach its caller as it is")
    assert sorted(p.name for p in sessions.iterdir()) == ["quest-1.jsonl"] and (
        [p.name for p in (sessions / "quest-1.jsonl").iterdir()] == ["notes.txt"]), (
        "loading must never change what is in the sessions folder")


@pytest.mark.task("02.1")
@pytest.mark.parametrize("relative", [False, True], ids=["absolute", "relative"])
def test_a_symbolic_link_at_the_logs_name_is_no_new_session(
        lesson, sessions, model, town, tmp_path, relative):
    """A symbolic link at the log's name, to a log elsewhere, is there: the load reads
    what it points to, or raises an error that says why it will not, naming the log;
    it never passes for a session not started. A relative link ('../elsewhere/...')
    leads from the link's own folder, whatever the working directory. Read through or
    refused, the link stays the SessionLog's log: the writer, which never writes
    through a link at the log's name, is left as it was, and appends nothing to the
    file the link leads to."""
    elsewhere = tmp_path / "elsewhere"
    with lesson.SessionLog(elsewhere, "quest-1") as log:
        log.append({"role": "user", "content": "Remember the rope."})
    target = elsewhere / "quest-1.jsonl"
    data = target.read_bytes()
    path = sessions / "quest-1.jsonl"
    path.symlink_to(os.path.relpath(target, sessions) if relative else target)
    setting = (f"quest-1.jsonl, the session's log, is a symbolic link to a log of one "
               f"message in another folder ({os.readlink(path)!r}, "
               f"{'relative to the link' if relative else 'an absolute path'})")
    with lesson.SessionLog(sessions, "quest-1") as log:
        loaded = load_or_error(log)
        if isinstance(loaded, Exception):
            if not isinstance(loaded, (OSError, ValueError)):
                pytest.fail(f"{setting}; load() raised {described(loaded)}, where it "
                            "should return the message, or raise the OSError that says "
                            "why it will not read it", pytrace=False)
            assert names_path(str(loaded), path), (
                f"{setting}; load() refused it with {described(loaded)}, whose words "
                f"do not name the log by its path ({path}): a load may refuse a link, "
                "with an error that says which file and why")
            loaded = None
        started = agent_started_on(lesson, model, town, log, setting,
                                   (OSError, ValueError),
                                   "the OSError that says why it will not read it")
        # The writer after the loads: it never writes through a link at the log's
        # name (lesson 01), and a load leaves it as it was
        try:
            log.append({"role": "user", "content": "Day 2."})
        except NotImplementedError:
            raise
        except Exception:       # noqa: BLE001 - refused: what counts is the files
            pass
    said = [f"{what} {got!r}" for what, got in [("load() returned", loaded), (
        "a new agent on the session started from", started)] if got == []]
    assert not said, (
        f"{setting}; {' and '.join(said)}, as if the session were new. The log is "
        "there: read it, or refuse it with an error; passed off as new, the session "
        "starts over, and its next append fails or lands after a history nobody read")
    message = {"role": "user", "content": "Remember the rope."}
    assert loaded in (None, [message]), (
        f"{setting}; load() returned {loaded!r}, where, reading through the link, it "
        f"should return the message the log it leads to holds, {[message]!r}")
    kept = target.read_bytes()
    assert path.is_symlink() and kept == data, (
        f"{setting}; after a load and a new agent, an append through the same "
        f"SessionLog left the link {'in place' if path.is_symlink() else 'gone'} and "
        f"the file it leads to holding {kept!r}, where it held {data!r}: the writer "
        "never writes through a link at the log's name (it refuses it), and a load "
        "leaves it as it was, its log the name in its own folder, not the file a link "
        "there led to (another folder's session)")


@pytest.mark.task("02.1")
@pytest.mark.parametrize("where", ["log", "folder"])
def test_a_loop_of_symbolic_links_at_the_logs_name_is_no_new_session(
        lesson, sessions, model, town, tmp_path, where):
    """A symbolic link that leads back to itself, at the log's name or at its sessions
    folder's, is there, but no file can be read through it (ELOOP): the load and a new
    agent raise an error naming it, and change nothing. Only a missing log is a
    session not started; Path.exists(), os.path.exists() and Path.is_file() answer
    False for a loop as for no file, so a load or a resume that asks them first
    passes the session off as new, and its first append then fails."""
    if where == "log":
        folder, named = sessions, sessions / "quest-1.jsonl"
        named.symlink_to(named.name)
        setting = ("quest-1.jsonl, the session's log, is a symbolic link to itself "
                   "(a loop: reading through it fails with ELOOP)")
    else:
        folder = named = tmp_path / "looped"
        named.symlink_to(named.name)
        setting = (f"the sessions folder, {folder}, is a symbolic link to itself (a "
                   "loop: no file in it can be reached, ELOOP)")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with lesson.SessionLog(folder, "quest-1") as log:
        loaded = load_or_error(log)
        started = agent_started_on(lesson, model, town, log, setting,
                                   (OSError, ValueError),
                                   "the OSError that says the link loops")
    if isinstance(loaded, Exception) and not isinstance(loaded, (OSError, ValueError)):
        pytest.fail(f"{setting}; load() raised {described(loaded)}, where it should "
                    "raise the OSError that says why it cannot read the log (or an "
                    "InvalidMessage naming it)", pytrace=False)
    assert isinstance(loaded, Exception), (
        f"{setting}; load() returned {loaded!r}, as if the session were new. Only a "
        "missing log is a conversation not started; a name that is there but cannot "
        "be read is an error naming the log (a look first with exists() or "
        "is_file(), which answer False for a loop, hides it)")
    assert str(named) in str(loaded), (
        f"{setting}; load() raised {described(loaded)}, whose words do not name "
        f"{named}: the error says which file it could not read, so that whoever reads "
        "it knows where to look")
    assert isinstance(started, Exception), (
        f"{setting}; a new agent on the session started with {started!r}, as if the "
        "session were new, where making it should raise the error load gives: "
        "started over, the session's first append fails only later, after the user "
        "has asked a question")
    after = sorted(p.name for p in tmp_path.rglob("*"))
    assert after == before and named.is_symlink(), (
        f"{setting}; after a load and a new agent, the folder holds {after}, where it "
        f"held {before}: loading only ever reads, whatever it finds")


@pytest.mark.task("02.1")
def test_a_sessions_folder_that_is_a_file_is_no_new_session(
        lesson, sessions, model, town):
    """A sessions folder that is a file (the day-1 log itself passed as the folder, a
    common slip of a caller) holds no log, but it is there: nothing can be looked up
    in it (ENOTDIR), and that is no session not started. The load and a new agent
    raise an error naming it, and change nothing, where an empty history would pass
    the session off as new and let its history be asked about in vain."""
    folder = sessions / "quest-1.jsonl"
    data = b'{"role": "user", "content": "Ask the elder about the cave."}\n'
    folder.write_bytes(data)
    setting = (f"the sessions folder given, {folder}, is a file (the day-1 log "
               "itself), not a folder")
    with lesson.SessionLog(folder, "quest-1") as log:
        loaded = load_or_error(log)
        started = agent_started_on(lesson, model, town, log, setting,
                                   (OSError, ValueError),
                                   "the OSError that says it is no folder")
    assert isinstance(loaded, (OSError, ValueError)), (
        f"{setting}; load() gave {loaded!r}, where it should raise the OSError that "
        "says why it cannot read the log (ENOTDIR: only a missing log is a "
        "conversation not started; this one cannot even be looked for)")
    assert str(folder) in str(loaded), (
        f"{setting}; load() raised {described(loaded)}, whose words do not name "
        f"{folder}: the error says where it could not read, so that whoever reads it "
        "knows where to look")
    assert isinstance(started, Exception), (
        f"{setting}; a new agent on the session started with {started!r}, as if the "
        "session were new, where making it should raise the error load gives")
    assert folder.read_bytes() == data and sorted(
        p.name for p in sessions.iterdir()) == ["quest-1.jsonl"], (
        f"{setting}; the load and the new agent changed what was there: loading only "
        "ever reads, whatever it finds")


@pytest.mark.task("02.1")
def test_a_load_leaves_nothing_in_the_sessions_folder(lesson, sessions):
    """Loading only ever reads, and leaves nothing behind, whether it returns or
    refuses: no copy, no temporary file, no mark of its own beside the log (a person
    listing the folder would take it for another session)."""
    write_log(lesson, sessions, [{"role": "user", "content": "hello"}])
    (sessions / "damaged.jsonl").write_bytes(
        b'{"role": "user", "content": "hello"}\n{"content": "no role"}\n')
    with lesson.SessionLog(sessions, "quest-1") as log:
        for _ in range(3):
            load(log, "quest-1's log holds one message, which should load")
    refused = []
    with lesson.SessionLog(sessions, "damaged") as log:
        for _ in range(3):
            try:
                log.load()
            except NotImplementedError:
                raise
            except Exception as error:  # noqa: BLE001 - refusals tested elsewhere
                refused.append(type(error).__name__)
    there = sorted(p.name for p in sessions.iterdir())

    assert there == ["damaged.jsonl", "quest-1.jsonl"], (
        "after three loads of quest-1 and three of damaged (whose line 2 is no "
        f"message; the loads raised {refused}), the sessions folder holds {there}, "
        "where only the two logs were expected: a load only ever reads, and leaves "
        "nothing beside the log, whether it returns or refuses")


@pytest.mark.task("02.1")
def test_the_same_message_twice_loads_twice(lesson, sessions, model, town):
    """A log may hold the same message twice (the adventurer said "Yes." twice, the
    model answered the same): each line is a message of its own, and the load and a
    new agent keep every one, in a row or apart."""
    history = [{"role": "user", "content": "Yes."},
               {"role": "user", "content": "Yes."},
               {"role": "assistant", "content": "Then we go."},
               {"role": "assistant", "content": "Then we go."},
               {"role": "user", "content": "Yes."},
               {"role": "assistant", "content": "Then we go."}]
    write_log(lesson, sessions, history)
    holding = (f"the log holds six lines, {history!r} (the same messages twice in a "
               "row, then again apart)")
    with lesson.SessionLog(sessions, "quest-1") as log:
        loaded = load(log, holding)
        assert loaded == history, (
            f"{holding}, and load() returned {loaded!r}: each line is a message of "
            "the conversation, said twice if it is there twice, and the load returns "
            "every one")
        agent = lesson.Agent(model.client(), model=model.model, tools=town, session=log)
    assert agent.messages == history, (
        f"{holding}, and a new agent on the session started from {agent.messages!r}: "
        "it starts from every message the log holds, a message said twice twice, as "
        "the model heard it")


@pytest.mark.task("02.1")
def test_system_and_developer_messages_in_the_log_resume_where_they_are(
        lesson, sessions, model, town):
    """The agent's own system prompt is never stored, but a log may hold system or
    developer messages another harness appended: a new agent resumes them as the log
    holds them, in their places, after its own system prompt, the first line too, even
    when it says what the agent's own prompt says."""
    guide = "You are a guide in a small town."
    history = [{"role": "system", "content": guide},
               {"role": "developer", "content": "Answer in one sentence."},
               {"role": "user", "content": "Ask the elder."},
               {"role": "system", "content": "The elder is asleep until noon."},
               {"role": "assistant", "content": "The elder sleeps."},
               {"role": "user", "content": "Then the guard."}]
    write_log(lesson, sessions, history)
    model.add(say("The guard opens at dawn."))

    with lesson.SessionLog(sessions, "quest-1") as log:
        agent = lesson.Agent(model.client(), model=model.model, tools=town,
                             session=log, system=guide)
        started = list(agent.messages)
        agent.run("And now?")

    roles = [m.get("role") for m in history]
    assert started == history, (
        f"the log holds {len(history)} messages, roles {roles} (system and "
        "developer messages among them, appended by another harness, the first line "
        "one of them, saying what the agent's own prompt says); the new "
        f"agent started from {[m.get('role') for m in started]}: {started!r}. It "
        "starts from everything the log holds, in its order, whatever a line says: "
        "only its own system prompt, which the log never holds, stays out of the "
        "history")
    sent = model.requests[0]["messages"] if model.requests else []
    expected = [{"role": "system", "content": guide}, *history,
                {"role": "user", "content": "And now?"}]
    assert sent == expected, (
        f"the log holds {len(history)} messages, roles {roles}; with its own system "
        "prompt, the agent's first request should carry that prompt, then the log's "
        "messages in their order, then the new question: roles "
        f"{[m.get('role') for m in expected]}. It carried roles "
        f"{[m.get('role') for m in sent]}")

    # A later agent's own prompt differs from the one the log's line 1 holds: that
    # line is still a message of the log, resumed as it is.
    city = "You are a guide in a big city."
    with lesson.SessionLog(sessions, "quest-1") as log:
        again = lesson.Agent(model.client(), model=model.model, tools=town,
                             session=log, system=city).messages
    assert again == agent.messages, (
        f"the log holds {len(agent.messages)} messages, its line 1 the system message "
        f"{guide!r} that another harness appended; a new agent whose own prompt is "
        f"{city!r} started from roles {[m.get('role') for m in again]}, line 1 "
        f"being {again[:1]!r}: it starts from every line as the log holds it, "
        "whatever its own prompt says (which it sends first, and never stores)")


@pytest.mark.task("02.1")
def test_a_session_id_with_dots_resumes_its_own_history(lesson, sessions):
    """An id such as 'quest.day-2' loads `<id>.jsonl`, not a name cut at a dot, nor
    any other session's log beside it, however alike their names (one that starts or
    ends with the id, one that sorts before it) or newer; an id with no log of its own
    loads empty, whatever logs of alike names lie beside it."""
    with lesson.SessionLog(sessions, "quest.day-2") as log:
        log.append({"role": "user", "content": "Day two begins."})
    for other in ("quest", "quest.day-20", "quest.day-2.old", "quest.day-2-b",
                  "old.quest.day-2", "quest.day-2a"):
        with lesson.SessionLog(sessions, other) as log:
            log.append({"role": "user", "content": f"This is {other}."})
    names = sorted(p.name for p in sessions.iterdir())

    with lesson.SessionLog(sessions, "quest.day-2") as log:
        loaded = load(log, "session 'quest.day-2' has one message, which should load")

    assert loaded == [{"role": "user", "content": "Day two begins."}], (
        f"session 'quest.day-2' has one message in {names}, load() returned "
        f"{loaded!r}: it should read quest.day-2.jsonl, and that log alone (the "
        "others, written after it, are other sessions')")

    for unknown in ("quest.day", "day-2", "quest.day-2.o"):
        with lesson.SessionLog(sessions, unknown) as log:
            loaded = load(log, f"session {unknown!r} has no log of its own, and its "
                          "load should return []")
        assert loaded == [], (
            f"session {unknown!r} has no log of its own in {names}; load() returned "
            f"{loaded!r}, where it should return []: {unknown}.jsonl is its log and "
            "no other, and a log whose name merely holds the id is another session's")


@pytest.mark.task("02.1")
def test_a_sessions_folder_reached_through_a_symbolic_link_resumes(
        lesson, tmp_path, model, town):
    """A sessions folder reached through a symbolic link (a home folder often is one)
    is a folder like any other: its logs load, and a new agent resumes them."""
    (tmp_path / "disk" / "sessions").mkdir(parents=True)
    (tmp_path / "home").symlink_to(tmp_path / "disk")
    folder = tmp_path / "home" / "sessions"
    said = [{"role": "user", "content": "Remember the rope."}]
    write_log(lesson, folder, said)
    setting = (f"the sessions folder {folder} is reached through a symbolic link "
               "(home -> disk), and quest-1's log there holds one message")
    with lesson.SessionLog(folder, "quest-1") as log:
        loaded = load(log, setting)
        started = history_of_new_agent(lesson, model, town, log, setting)
    assert loaded == said and started == said, (
        f"{setting}; load() returned {loaded!r} and a new agent started from "
        f"{started!r}: the log's own name is no link, and it is read like any other")


def folds_case(folder):
    """Does the file system of `folder` take names that differ in case for one?"""
    probe = folder / "case-probe"
    probe.write_text("")
    try:
        return (folder / "CASE-PROBE").exists()
    finally:
        probe.unlink()


@pytest.mark.task("02.1")
def test_ids_that_differ_only_in_case_are_two_sessions(lesson, sessions):
    """Where the file system tells names apart by case, 'Quest-1' and 'quest-1' name
    two logs, two sessions: one never resumes the other's history."""
    if folds_case(sessions):
        pytest.skip("this file system takes Quest-1.jsonl and quest-1.jsonl for one "
                    "file: there, the two ids are one session")
    write_log(lesson, sessions, [{"role": "user", "content": "Remember the rope."}])
    with lesson.SessionLog(sessions, "Quest-1") as log:
        loaded = load(log, "session 'Quest-1' has no log of its own (quest-1 has one "
                      "message), and its load should return []")
    assert loaded == [], (
        f"session 'Quest-1' has no log of its own, and load() returned {loaded!r}, "
        "quest-1's history: Quest-1.jsonl is its log and no other, and on this file "
        "system quest-1.jsonl is another file, another session's; resumed, its history "
        "would be sent as this session's, and this session's appends go to a log that "
        "never held it")


@pytest.mark.task("02.1")
def test_a_second_load_sees_what_was_appended_since(lesson, sessions, model, town):
    """Each load reads the log as it is now, with the lines appended since the last,
    a line rewritten in place, or lines taken out (a log shorter than the last load
    found it), and so does each new agent made on the same SessionLog."""
    first = {"role": "user", "content": "first"}
    second = {"role": "user", "content": "second"}
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append(first)
        load(log, "the log holds one message, which should load")
        log.append(second)
        loaded = load(log, "the log holds two messages, which should load")

    assert loaded == [first, second], (
        f"after appending a second message, load() returned {loaded!r}: the message "
        "appended since the first load is not among them")

    # Another program mends a line in place: the same size, other words.
    path = sessions / "quest-1.jsonl"
    mended = path.read_bytes().replace(b'"second"', b'"mended"')
    path.write_bytes(mended)
    with lesson.SessionLog(sessions, "quest-1") as log:
        load(log, "the log holds two messages, which should load")
        kept = os.stat(path)
        path.write_bytes(mended.replace(b'"mended"', b'"again!"'))
        # As a restore from a backup does (cp -p, rsync -t): the old times, new words
        os.utime(path, ns=(kept.st_atime_ns, kept.st_mtime_ns))
        loaded = load(log, "the log holds two messages, which should load")
    assert loaded == [first, {"role": "user", "content": "again!"}], (
        "between two loads of one SessionLog, another program rewrote the log's "
        "second line, 'mended' to 'again!', in place, and kept the file's size and "
        "modification time (as a restore from a backup does); the second load "
        f"returned {loaded!r}: each load reads the log as it is at that moment, not "
        "what an earlier load found")

    # Two agents made one after the other on one SessionLog: another writer appended
    # between them.
    third = {"role": "user", "content": "third"}
    with lesson.SessionLog(sessions, "quest-1") as log:
        try:
            lesson.Agent(model.client(), model=model.model, tools=town, session=log)
            with lesson.SessionLog(sessions, "quest-1") as other:
                other.append(third)
            started = lesson.Agent(model.client(), model=model.model, tools=town,
                                   session=log).messages
        except NotImplementedError:
            raise
        except Exception as error:      # noqa: BLE001 - said below
            started = error
    expected = [first, {"role": "user", "content": "again!"}, third]
    got = (f"raised {described(started)}" if isinstance(started, Exception)
           else f"started from {started!r}")
    assert started == expected, (
        "a new agent was made on a SessionLog of a log of two messages; another "
        "SessionLog then appended a third, and a second new agent on the first "
        f"SessionLog {got}: each new agent starts from the log as it is when it is "
        "made, all three, not from what an earlier agent found")

    # A person takes lines out (or a repair cuts the log back): shorter now.
    with lesson.SessionLog(sessions, "quest-1") as log:
        load(log, "the log holds three messages, which should load")
        path.write_bytes(path.read_bytes().split(b"\n", 1)[0] + b"\n")
        loaded = load_or_error(log)
    got = (f"raised {described(loaded)}" if isinstance(loaded, Exception)
           else f"returned {loaded!r}")
    assert loaded == [first], (
        "a SessionLog loaded a log of three messages; a person then took out all "
        "but the first line, leaving the log shorter than that load found it, and a "
        f"second load() of the same SessionLog {got}, where the log now holds "
        f"{[first]!r}: "
        "each load reads the log as it is at that moment, a shorter one too (a line "
        "taken out, an end cut back), never measured against what an earlier load "
        "found")


def times_of_one_tick(monkeypatch):
    """Play a file system whose clock does not tick while the test runs: os.stat,
    os.lstat and os.fstat report every file's access, modification and change times
    as one and the same moment (what a clock of coarse ticks reports for writes within
    one tick); every other field is the file's own."""
    moment = 1_700_000_000
    times = {"st_atime": float(moment), "st_mtime": float(moment),
             "st_ctime": float(moment), "st_atime_ns": moment * 10**9,
             "st_mtime_ns": moment * 10**9, "st_ctime_ns": moment * 10**9}

    def frozen(real):
        def stat(*args, **kwargs):
            info = real(*args, **kwargs)
            fields = list(info)
            fields[7:10] = [moment] * 3
            extra = {name: getattr(info, name) for name in dir(info)
                     if name.startswith("st_") and name not in FIELDS}
            return os.stat_result(fields, {**extra, **times})
        return stat

    for name in ("stat", "lstat", "fstat"):
        monkeypatch.setattr(os, name, frozen(getattr(os, name)))


FIELDS = ("st_mode", "st_ino", "st_dev", "st_nlink", "st_uid", "st_gid", "st_size")


@pytest.mark.task("02.1")
def test_a_log_rewritten_within_one_tick_of_its_clock_loads_anew(
        lesson, sessions, model, town, monkeypatch):
    """A file system keeps a file's times to a tick of its clock (a second on ext3 and
    HFS+, two on FAT, a few milliseconds on older Linux kernels): writes within one
    tick leave the same modification and change (ctime) times. Each load reads the log
    as it is at that moment, so a line another program rewrites in place (the same
    size, other words) within that tick is seen by the next load through the same
    SessionLog, and by the next agent made on it, whatever the file's times say."""
    first = {"role": "user", "content": "first"}
    write_log(lesson, sessions, [first, {"role": "user", "content": "second"}])
    path = sessions / "quest-1.jsonl"
    times_of_one_tick(monkeypatch)
    setting = ("the log's file system reports the same times for every write (they "
               "all fall in one tick of its clock); between two reads through one "
               "SessionLog, another program rewrote the log's second line in place, "
               "the same size, 'second' to ")
    with lesson.SessionLog(sessions, "quest-1") as log:
        load(log, "the log holds two messages, which should load")
        path.write_bytes(path.read_bytes().replace(b'"second"', b'"mended"'))
        loaded = load(log, "the log holds two messages, which should load")
        path.write_bytes(path.read_bytes().replace(b'"mended"', b'"again!"'))
        started = history_of_new_agent(lesson, model, town, log,
                                       "the log holds two messages")
    assert loaded == [first, {"role": "user", "content": "mended"}], (
        f"{setting}'mended', and the second load() returned {loaded!r}: each load "
        "reads the log as it is at that moment, not what an earlier load found "
        "while the file's size and times stay the same (two writes within one tick "
        "of the clock leave the same times, ctime included)")
    assert started == [first, {"role": "user", "content": "again!"}], (
        f"{setting}'again!' after a load, and a new agent on that SessionLog started "
        f"from {started!r}: each new agent starts from the log as it is when it is "
        "made, not from what an earlier load found while the file's size and times "
        "stay the same")


@pytest.mark.task("02.1")
def test_a_writer_stopped_by_a_failed_write_still_loads_what_the_log_holds(
        lesson, sessions, monkeypatch):
    """A durable writer whose sync failed (EIO) stops: whether its line will survive is
    unknown, and it refuses to write again (lesson 01). Reading is how its caller
    learns what the log holds: a load through that very SessionLog, while the disk
    still refuses every sync, reads the log as it is then, the line whose sync failed
    included, and leaves it as it was (a load only reads: it has nothing to sync)."""
    first = {"role": "user", "content": "Ask the elder."}
    second = {"role": "assistant", "content": "The elder says: bring a torch."}
    path = sessions / "quest-1.jsonl"
    with lesson.SessionLog(sessions, "quest-1", durable=True) as log:
        log.append(first)

        def fsync(fd):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        # The disk goes on refusing every sync, as a failing one does, while what was
        # written is still read back: a load only reads, so it reads all the same
        with monkeypatch.context() as patch:
            patch.setattr(os, "fsync", fsync)
            patch.setattr(os, "fdatasync", fsync)
            with pytest.raises(OSError):
                log.append(second)
            data = path.read_bytes()
            loaded = load_or_error(log)
            try:
                log.append({"role": "user", "content": "And now?"})
            except lesson.WriterStopped:
                still = None
            except NotImplementedError:
                raise
            except Exception as error:      # noqa: BLE001 - said below
                still = f"raised {described(error)}"
            else:
                still = "returned"
    got = (f"raised {described(loaded)}" if isinstance(loaded, Exception)
           else f"returned {loaded!r}")
    assert loaded == [first, second], (
        "a durable SessionLog appended a message, then a second whose sync failed "
        "with EIO, so the writer stopped (its line is in the file, whether it stays "
        "there is unknown); while the disk still refused every sync, a load() through "
        f"that same SessionLog {got}, where the log holds {[first, second]!r}: each "
        "load reads the log as it is at that moment, whatever state its writer or the "
        "disk's syncs are in (a load only reads: it has nothing to sync), and is how "
        "the caller learns what reached it")
    left_as_it_was(path, data, "a load ran through a writer stopped by a failed sync")
    assert still is None, (
        "a durable SessionLog appended a message, then a second whose sync failed with "
        "EIO, so the writer stopped; after a load() through that same SessionLog, its "
        f"next append {still}, where WriterStopped was expected: a load leaves the "
        "writer as it was, a stopped one stopped (the line in doubt may be torn, or "
        "lost at the next power cut; only a new SessionLog writes again)")


@pytest.mark.task("02.1")
def test_a_load_that_found_no_log_reads_the_one_written_since(lesson, sessions, model,
                                                              town):
    """A SessionLog whose first load found no log (a session not started yet) reads
    the log on its next load all the same, once another writer (another SessionLog,
    another process: day 1's agent) has written it, and a new agent made on it starts
    from it: a session found new once is not new for ever."""
    said = {"role": "user", "content": "day 1, in another process"}
    with lesson.SessionLog(sessions, "quest-1") as log:
        first = load(log, "the session has no log yet; the load should return []")
        with lesson.SessionLog(sessions, "quest-1") as other:
            other.append(said)
        loaded = load(log, "another SessionLog has since appended one message")
        started = history_started_from(lesson, model, town, log)

    assert first == [] and loaded == [said], (
        f"the first load, before the session had a log, returned {first!r}; another "
        f"SessionLog then appended {said!r}, and the second load of the first "
        f"SessionLog returned {loaded!r}: each load reads the log as it is at that "
        "moment, and a session found new once may have been written since")
    got = (f"raised {described(started)}" if isinstance(started, Exception)
           else f"started from {started!r}")
    assert started == [said], (
        "a SessionLog found no log on its first load; another SessionLog then "
        f"appended a message, and a new agent made on the first {got}: it starts from "
        "what the log holds when the agent is made")


@pytest.mark.task("02.1")
def test_two_sessions_folders_resume_their_own_logs_of_one_id(lesson, sessions,
                                                              tmp_path, model, town):
    """Two sessions folders (two users', two projects') may each hold a session of the
    same id, used in one process: each agent resumes the log in its own folder, never
    another folder's, even one of the same id and the same size."""
    elsewhere = tmp_path / "other-sessions"
    north = {"role": "user", "content": "go north"}
    south = {"role": "user", "content": "go south"}
    write_log(lesson, sessions, [north])
    write_log(lesson, elsewhere, [south])
    started = {}
    for folder, name in ((sessions, "the first"), (elsewhere, "the second")):
        with lesson.SessionLog(folder, "quest-1") as log:
            try:
                started[name] = lesson.Agent(model.client(), model=model.model,
                                             tools=town, session=log).messages
            except NotImplementedError:
                raise
            except Exception as error:      # noqa: BLE001 - said below
                started[name] = error

    assert started == {"the first": [north], "the second": [south]}, (
        "two sessions folders each hold a log of the session quest-1, of the same "
        f"size: the first's holds {north!r}, the second's {south!r}; new agents made "
        f"on them, one after the other in one process, started from {started}. A "
        "session's log is the file its id names in its own sessions folder, and no "
        "other: what another folder holds under the same id says nothing of it")


@pytest.mark.task("02.1")
def test_while_a_log_loads_it_stays_where_it_is(lesson, sessions, monkeypatch):
    """What another process sees in the middle of a load: the log at its name, as it
    was, and nothing beside it (no copy, no log moved aside). A load only reads: a
    writer opening the session meanwhile finds its log, and a load killed part-way
    leaves the folder as it found it."""
    lines = [{"role": "user", "content": f"message {n}"} for n in range(3)]
    path = sessions / "quest-1.jsonl"
    write_log(lesson, sessions, lines)
    data = path.read_bytes()
    log_module = sys.modules[lesson.SessionLog.__module__]
    real_parse = log_module.parse_line
    seen = []

    def parse_line(line):
        if not seen:
            there = sorted(p.name for p in sessions.iterdir())
            held = path.read_bytes() if path.is_file() else None
            seen.append((there, held == data))
        return real_parse(line)

    monkeypatch.setattr(log_module, "parse_line", parse_line)
    with lesson.SessionLog(sessions, "quest-1") as log:
        load(log, "the log holds three messages, which should load")
    if not seen:
        return      # this load reads its lines without parse_line: nothing to see
    there, whole = seen[0]
    assert there == ["quest-1.jsonl"] and whole, (
        "while the load read the log's first line, the sessions folder held "
        f"{there}" + ("" if whole else ", and quest-1.jsonl did not hold the log's "
                      "bytes") + ": another process looking then would not find the "
        "log as it is, at its name, alone (a writer opening the session would start "
        "it over). A load only ever reads: it moves nothing, copies nothing, and "
        "leaves nothing beside the log, even for the time it reads")


@pytest.mark.task("02.1")
def test_each_load_returns_messages_of_its_own(lesson, sessions, model, town):
    """What a load returns is the caller's own: a caller that changes that list, or a
    message in it, changes neither the log nor what the next load, or a new agent,
    reads from it."""
    history = [{"role": "user", "content": "Yes."},
               {"role": "assistant", "content": "Then we go."},
               {"role": "user", "content": "Yes."}]
    write_log(lesson, sessions, history)
    holding = (f"the log holds three messages, {history!r}; a first load returned "
               "them, and its caller then changed, in memory only, the first message's "
               "text to 'No.' and added a fourth message to the list")
    with lesson.SessionLog(sessions, "quest-1") as log:
        first = load(log, "the log holds three messages, which should load")
        if first and isinstance(first[0], dict):
            first[0]["content"] = "No."
        first.append({"role": "user", "content": "Never said."})
        seen = [("a second load of the same SessionLog", load(log, holding))]
        with lesson.SessionLog(sessions, "quest-1") as other:
            seen.append(("a load by a new SessionLog", load(other, holding)))
        seen.append(("a new agent on the session",
                     history_of_new_agent(lesson, model, town, log, holding)))
    for what, got in seen:
        assert got == history, (
            f"{holding}; {what} then returned {got!r}, where the log still holds "
            f"{history!r}: each load reads the log as it is at that moment, and hands "
            "back messages of its own, never a list or a message an earlier caller "
            "holds and may change")
    changed = [{"role": "user", "content": "No."}, *history[1:],
               {"role": "user", "content": "Never said."}]
    assert first == changed, (
        f"{holding}; after two more loads and a new agent, the first load's list "
        f"holds {first!r}, where its caller left it {changed!r}: what a load returns "
        "is the caller's own, and a later load hands out a list of its own, never "
        "empties and refills one an earlier caller holds (an agent's history, a list "
        "trimmed to fit a context window)")


@pytest.mark.task("02.1")
def test_a_change_deep_inside_a_loaded_message_never_comes_back(lesson, sessions):
    """Messages of its own go all the way down: a caller that changes a tool call's
    arguments, or adds a call, in a message it loaded, finds none of it in the next
    load."""
    history = [{"role": "user", "content": "Buy a rope."},
               {"role": "assistant", "content": "", "tool_calls": [
                   {"id": "call_1", "type": "function",
                    "function": {"name": "buy", "arguments": '{"item": "rope"}'}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": "Bought."}]
    write_log(lesson, sessions, history)
    expected = json.loads(json.dumps(history))
    holding = ("the log holds a question, a call to buy a rope and its result; a first "
               "load returned them, and its caller then changed, in memory only, the "
               "call's arguments to a sword's and added a second call to the message")
    with lesson.SessionLog(sessions, "quest-1") as log:
        first = load(log, "the log holds three messages, which should load")
        calls = first[1].get("tool_calls") if len(first) > 1 else None
        if isinstance(calls, list) and calls:
            calls[0]["function"]["arguments"] = '{"item": "sword"}'
            calls.append({"id": "call_2", "type": "function",
                          "function": {"name": "buy", "arguments": "{}"}})
        again = load(log, holding)

    assert again == expected, (
        f"{holding}; the next load returned {again!r}, where the log still holds "
        f"{expected!r}: a load hands back messages of its own, every part of them "
        "(their calls and their arguments too), never parts an earlier caller holds "
        "and may change")


@pytest.mark.task("02.1")
def test_non_ascii_text_loads_back_exactly(lesson, sessions):
    """Accented letters, CJK and emoji, written as UTF-8 by append, load back as the
    same text, code point for code point: a letter written as a base and a combining
    accent (as macOS writes file names) stays two, never made one by a normalization
    that the writer did not apply."""
    texts = ["café au lait", "洞窟の地図", "a torch 🔥",
             "cafe\u0301 noir (an e and a combining accent)"]
    with lesson.SessionLog(sessions, "quest-1") as log:
        for text in texts:
            log.append({"role": "user", "content": text})
    with lesson.SessionLog(sessions, "quest-1") as log:
        loaded = [m.get("content") if isinstance(m, dict) else m
                  for m in load(log, f"append wrote the contents {texts!r}, which "
                                "should load back as they are")]

    if loaded == texts:
        return
    # Name a wrong encoding only when the text shows it: UTF-8 bytes read as another.
    misread = [
        enc
        for enc in ("latin-1", "cp1252")
        if loaded == [t.encode("utf-8").decode(enc, errors="replace") for t in texts]
    ]
    # Name a normalization only when the text shows it: the same text, other code points
    normalized = [form for form in ("NFC", "NFD", "NFKC", "NFKD")
                  if loaded == [unicodedata.normalize(form, t) for t in texts]]
    why = (f"these are the UTF-8 bytes decoded as {misread[0]}, but the log is UTF-8 "
           "(append writes it so), whatever the machine's locale") if misread else (
           f"the text came back in Unicode's {normalized[0]} form, other code points "
           "than were appended: a load returns each message exactly as it was written, "
           "its text neither cleaned nor normalized") if normalized else (
           "the text changed on its way through the log")
    pytest.fail(f"wrote the contents {texts!r}, load() returned {loaded!r}; {why}")


@pytest.mark.task("02.1")
def test_a_system_prompt_is_sent_once_on_day_two_and_never_stored(lesson, sessions):
    """The system prompt is the agent's, sent first with every request and never part
    of the history: day 2 sends it once, before day 1's messages, and the log never
    holds it."""
    guide = "You are a guide in a small town."

    def day(script, text):
        model = ScriptedModel(list(script))
        with lesson.SessionLog(sessions, "quest-1") as log:
            agent = lesson.Agent(model.client(), model=model.model, tools=Town(),
                                 session=log, system=guide)
            agent.run(text)
        return agent, model

    day_one, _ = day(DAY_ONE, "Ask the elder about the cave.")
    day_two, model = day([say("A torch and a rope.")], "What did the elder say?")

    sent = model.requests[0]["messages"]
    systems = [m for m in sent if m.get("role") == "system"]
    assert sent[0] == {"role": "system", "content": guide} and len(systems) == 1, (
        "day 2's first request should carry the system prompt once, first; it carries "
        f"{len(systems)} system message(s): {[m.get('role') for m in sent]}")
    assert sent[1:-1] == day_one.messages, (
        "after the system prompt come day 1's messages as the log holds them")
    stored = [json.loads(line) for line in (sessions / "quest-1.jsonl").read_bytes()
              .split(b"\n") if line]
    assert not any(m.get("role") == "system" for m in stored), (
        "the system prompt is the agent's setting, not a message of the session: the "
        "log should never hold it")


# A new process under the C locale with Python's UTF-8 mode off: its default encoding
# for text files is then ASCII ("ANSI_X3.4-1968"), as on a server or in a container with
# no locale set. (Under LC_ALL=C alone, Python 3.7+ turns UTF-8 mode on by itself.)
C_LOCALE = {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
LOAD_IN_A_NEW_PROCESS = """
import json, locale, os, sys, traceback
from pathlib import Path
from sessionlab import course
lesson = course.load_module(sys.argv[1], "lesson_under_test")
result = {"encoding": locale.getpreferredencoding(False)}
try:
    with lesson.SessionLog(sys.argv[2], sys.argv[3]) as log:
        result["returned"] = log.load()
except BaseException as error:
    frames = [frame for frame in traceback.extract_tb(error.__traceback__)
              if course.is_lesson_module(Path(frame.filename))]
    at = (f" (at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno})"
          if frames else "")
    result["raised"] = f"{type(error).__name__}: {error}{at}"
print(json.dumps(result))       # ASCII: readable whatever the locale
"""


@pytest.mark.task("02.1")
def test_a_log_loads_the_same_under_a_locale_that_is_not_utf8(lesson, sessions):
    """The log is UTF-8 whatever the machine's locale: a process whose default
    encoding is ASCII (the C locale) loads the same messages."""
    messages = [{"role": "user", "content": "café au lait, 洞窟の地図, a torch 🔥"},
                {"role": "assistant", "content": "one\u2028two\u2029three\x85four"}]
    write_log(lesson, sessions, messages)
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("LC_", "LANG", "PYTHONIOENCODING"))}
    environment.update(C_LOCALE)
    child = subprocess.run(
        [sys.executable, "-c", LOAD_IN_A_NEW_PROCESS, lesson.__path__[0],
         str(sessions), "quest-1"],
        env=environment, capture_output=True, timeout=60)
    try:
        result = json.loads(child.stdout.decode("ascii").splitlines()[-1])
    except (ValueError, IndexError):
        pytest.fail("a new process that loads the log under the C locale said nothing "
                    f"readable; its errors: {child.stderr.decode(errors='replace')}",
                    pytrace=False)
    if result["encoding"].lower().replace("-", "") in ("utf8", "utf_8"):
        pytest.skip("this machine's C locale decodes text as UTF-8 already")
    setting = (f"append wrote {messages!r}; a new process whose default encoding is "
               f"{result['encoding']} (LC_ALL=C, Python's UTF-8 mode off, as on a "
               "server with no locale set) loaded the log")
    if "NotImplementedError: task " in result.get("raised", ""):
        raise NotImplementedError(result["raised"].split(": ", 1)[1])
    if "raised" in result:
        pytest.fail(f"{setting}, and load() raised {result['raised']}, where it should "
                    "return the two messages: the log is UTF-8, whatever the machine's "
                    "locale", pytrace=False)
    assert result["returned"] == messages, (
        f"{setting}, and load() returned {result['returned']!r}: the log is UTF-8, "
        "whatever the machine's locale, and should load back exactly")


@pytest.mark.task("02.1")
def test_a_log_loads_the_same_where_a_line_of_text_ends_otherwise(
        lesson, sessions, monkeypatch):
    """The writer ends every line with one newline byte, on any machine: a process
    whose text lines end in '\\r\\n' (os.linesep on Windows) loads the same log."""
    messages = [{"role": "user", "content": "Ask the elder."},
                {"role": "assistant", "content": "The elder says: a torch."}]
    write_log(lesson, sessions, messages)
    monkeypatch.setattr(os, "linesep", "\r\n")
    setting = (f"append wrote {messages!r}, each line ended by one newline byte; a "
               "process whose os.linesep is '\\r\\n', as on Windows, loaded the log")
    with lesson.SessionLog(sessions, "quest-1") as log:
        loaded = load(log, setting)
    monkeypatch.undo()
    assert loaded == messages, (
        f"{setting}, and load() returned {loaded!r}. A line of the log ends at the "
        "newline byte the writer wrote, whatever the machine's own line end")


WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


@contextlib.contextmanager
def files_refused(monkeypatch, folder, code, *, reading, searching=False):
    """Play what a file system does to the files in `folder`: every open of one of
    them to write (and, if `reading`, to read; if `searching`, every look at them, as
    os.stat's), and every change to their names and times, fails with OSError(`code`),
    as the operating system fails it; os.access says no to what may not be read. The
    tests run as root, whom chmod does not stop, so the refusal is played in Python's
    calls that open and change files (os, io, builtins). Yields the list of refused
    attempts."""
    folder = os.path.abspath(folder)
    refused = []

    def inside(path):
        if isinstance(path, int):
            return False
        path = os.path.abspath(os.fsdecode(path))
        return path == folder or os.path.dirname(path) == folder

    def refuse(what, path):
        refused.append(f"{what} {os.path.basename(os.fsdecode(path))}")
        raise OSError(code, os.strerror(code), os.fsdecode(path))

    real_os_open, real_io_open, real_file_io = os.open, io.open, io.FileIO

    def os_open(path, flags, *args, **kwargs):
        if inside(path) and (reading or flags & WRITES):
            refuse(f"os.open (flags {flags:#o}) of", path)
        return real_os_open(path, flags, *args, **kwargs)

    def writes(mode):
        return reading or any(letter in str(mode) for letter in "wax+")

    def io_open(file, mode="r", *args, **kwargs):
        if inside(file) and writes(mode):
            refuse(f"open (mode {mode!r}) of", file)
        return real_io_open(file, mode, *args, **kwargs)

    class FileIO(real_file_io):
        def __init__(self, file, mode="r", *args, **kwargs):
            if inside(file) and writes(mode):
                refuse(f"io.FileIO (mode {mode!r}) of", file)
            super().__init__(file, mode, *args, **kwargs)

    def changing(name):
        real = getattr(os, name)

        def change(*args, **kwargs):
            for path in args[:2]:
                if isinstance(path, (str, bytes, os.PathLike)) and inside(path):
                    refuse(f"os.{name} of", path)
            return real(*args, **kwargs)
        return change

    real_access = os.access

    def access(path, mode, *args, **kwargs):
        # A look that answers rather than raises: no, for what may not be read (or,
        # in a folder that may not be searched, for anything)
        if inside(path) and (searching or (reading and mode & os.R_OK)):
            refused.append(f"os.access of {os.path.basename(os.fsdecode(path))}")
            return False
        return real_access(path, mode, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(os, "open", os_open)
        patch.setattr(os, "access", access)
        patch.setattr(io, "open", io_open)
        patch.setattr(builtins, "open", io_open)
        patch.setattr(io, "FileIO", FileIO)
        for name in ("truncate", "utime", "rename", "replace", "remove", "unlink",
                     "mkdir", "chmod", "link", "symlink") + (
                         ("stat", "lstat") if searching else ()):
            patch.setattr(os, name, changing(name))
        yield refused


STAT_EXTRA = ("st_atime", "st_mtime", "st_ctime", "st_atime_ns", "st_mtime_ns",
              "st_ctime_ns", "st_blksize", "st_blocks", "st_rdev", "st_flags")


def owned_by_another_user(monkeypatch, path):
    """Make the file at `path` another user's, as stat tells it: os.stat, os.lstat and
    os.fstat give it the user and group of 'nobody' (or 65534), however they reach it
    (a path, a descriptor). Changing a file's owner needs root, which the tests may not
    have, so the owner is played in Python's calls, as files_refused plays refusals.
    Returns (uid, gid)."""
    try:
        nobody = pwd.getpwnam("nobody")
        uid, gid = nobody.pw_uid, nobody.pw_gid
    except KeyError:
        uid, gid = 65534, 65534
    if uid == os.geteuid():
        uid += 1
    real = os.stat(path)

    def owned(info):
        if (info.st_dev, info.st_ino) != (real.st_dev, real.st_ino):
            return info
        fields = list(info)
        fields[4], fields[5] = uid, gid     # st_uid, st_gid
        return os.stat_result(fields, {name: getattr(info, name)
                                       for name in STAT_EXTRA if hasattr(info, name)})

    for name in ("stat", "lstat", "fstat"):
        call = getattr(os, name)
        monkeypatch.setattr(os, name, lambda *args, _call=call, **kwargs: owned(
            _call(*args, **kwargs)))
    return uid, gid


@pytest.mark.task("02.1")
def test_a_log_on_a_read_only_medium_loads_and_is_never_opened_to_write(
        lesson, sessions, monkeypatch):
    """A log on a medium that cannot be written (a backup mounted read-only, a
    snapshot) still loads: loading never opens the log, or anything beside it, to
    write."""
    messages = [{"role": "user", "content": "Remember the rope."},
                {"role": "assistant", "content": "A rope and a torch."}]
    write_log(lesson, sessions, messages)
    setting = ("the log holds two messages on a read-only medium (any open of a file "
               "there to write fails with EROFS, 'Read-only file system')")

    log = lesson.SessionLog(sessions, "quest-1")
    with files_refused(monkeypatch, sessions, errno.EROFS, reading=False) as refused:
        try:
            loaded = log.load()
        except NotImplementedError:
            raise
        except Exception as error:
            pytest.fail(f"{setting}; load() raised {described(error)}, where it should "
                        "return them: loading only ever reads, so a log it may not "
                        "write still loads", pytrace=False)
    assert not refused, (
        f"{setting}; load() tried to write: {'; '.join(refused)}. Loading only ever "
        "reads: a load that opens the one copy of a conversation to write can cut or "
        "change it, and fails where the log may only be read")
    assert loaded == messages, (
        f"{setting}; load() returned {loaded!r}, where it should return them")


@pytest.mark.task("02.1")
def test_a_log_another_user_owns_and_lets_this_one_read_loads(
        lesson, sessions, monkeypatch):
    """A log another user wrote and lets this one read (a team's shared sessions, a
    service's log a person reviews) loads like any other: this user may open it to
    read, and nothing more. The system refuses what only a file's owner may do: open
    it to write, change its mode or times, or open it with O_NOATIME (EPERM), the flag
    that keeps a read from touching its access time."""
    noatime = getattr(os, "O_NOATIME", 0)
    if not noatime:
        pytest.skip("this system has no O_NOATIME")
    messages = [{"role": "user", "content": "Remember the rope."},
                {"role": "assistant", "content": "A rope and a torch."}]
    write_log(lesson, sessions, messages)
    (sessions / "quest-1.jsonl").chmod(0o644)
    owned_by_another_user(monkeypatch, sessions / "quest-1.jsonl")
    setting = ("the log holds two messages, written by another user who lets this one "
               "read it (mode 0644, and stat names that user as its owner): opening it "
               "to write, or changing it, fails with "
               "EACCES, and opening it with O_NOATIME, which only a file's owner may "
               "use, fails with EPERM, as the system refuses them")
    folder = os.path.abspath(sessions)
    log = lesson.SessionLog(sessions, "quest-1")
    with files_refused(monkeypatch, sessions, errno.EACCES, reading=False) as refused:
        owners_open = os.open

        def os_open(path, flags, *args, **kwargs):
            inside = not isinstance(path, int) and os.path.dirname(
                os.path.abspath(os.fsdecode(path))) == folder
            if inside and flags & noatime:
                refused.append(f"os.open with O_NOATIME of {os.path.basename(path)}")
                raise OSError(errno.EPERM, os.strerror(errno.EPERM), os.fsdecode(path))
            return owners_open(path, flags, *args, **kwargs)

        with monkeypatch.context() as patch:
            patch.setattr(os, "open", os_open)
            loaded = load_or_error(log)
    got = (f"raised {described(loaded)}" if isinstance(loaded, BaseException)
           else f"returned {loaded!r}")
    assert loaded == messages, (
        f"{setting}; load() {got}, where it should return the two messages; it tried: "
        f"{'; '.join(refused) or 'nothing refused'}. Loading only reads, so a log this "
        "user may read loads, whoever owns it; keeping its access time is the file "
        "system's matter (noatime, relatime), not a load's")


SHARED_MODES = [  # (the log's mode, its folder's, whose log it is, in words)
    (0o644, 0o755, "another user's, who lets every user read it"),
    (0o664, 0o2775, "a team's, written under umask 002 in the team's folder: its "
                    "group may write it too"),
    (0o666, 0o777, "a service's, written under umask 000: every user may write it, "
                   "and its folder, too"),
]


@pytest.mark.task("02.1")
@pytest.mark.parametrize("mode, folder_mode, whose", SHARED_MODES,
                         ids=["0644", "0664", "0666"])
def test_a_log_others_own_or_may_write_loads_as_any_other(
        lesson, sessions, model, town, monkeypatch, mode, folder_mode, whose):
    """Whose a log is, and who else may write it or its folder, says nothing of what
    it holds: a log this user may read loads, and a new agent resumes it, whoever owns
    it (another user, as stat says) and whatever the modes (0644; 0664 in a folder of
    a team's group; 0666 in a folder of 0777, as a service under umask 000 makes
    them). Only a log that cannot be read is an error: a load that judges the file's
    owner or modes, as OpenSSH judges a key file, turns away a history that is
    there."""
    messages = [{"role": "user", "content": "Remember the rope."},
                {"role": "assistant", "content": "A rope and a torch."}]
    write_log(lesson, sessions, messages)
    path = sessions / "quest-1.jsonl"
    path.chmod(mode)
    sessions.chmod(folder_mode)
    uid, gid = owned_by_another_user(monkeypatch, path)
    setting = (f"the log holds two messages and is {whose} (mode {mode:04o}, in a "
               f"folder of mode {folder_mode:04o}, owned, as stat says, by user {uid} "
               f"and group {gid}, not this process's)")
    with lesson.SessionLog(sessions, "quest-1") as log:
        loaded = load_or_error(log)
        started = history_started_from(lesson, model, town, log)
    for who, got in [("load()", loaded), ("a new agent on the session", started)]:
        said = (f"raised {described(got)}" if isinstance(got, BaseException)
                else f"gave {got!r}")
        assert got == messages, (
            f"{setting}; {who} {said}, where it should give the two messages: this "
            "user may read the log, so it loads, whoever owns it and whoever else may "
            "write it. Only a log that cannot be read is an error; refusing one by its "
            "owner or its mode turns away a team's shared sessions, and a service's")


@pytest.mark.task("02.1")
@pytest.mark.parametrize("searching", [False, True], ids=["file", "folder"])
def test_a_log_this_user_may_not_read_is_an_error_not_an_empty_session(
        lesson, sessions, model, town, monkeypatch, searching):
    """A log that is there but that this user may not read (another user's service
    wrote it, or its folder is another user's) is no new session: the load and the new
    agent raise the error."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": "Remember the rope."})
    setting = ("the log holds a message but this user may not read it (every open of "
               "it fails with EACCES, 'Permission denied', as for another user's file)"
               if not searching else
               "the log holds a message but its folder is another user's, which this "
               "user may not search (every open of the log and every look at it, as "
               "os.stat's, fails with EACCES, 'Permission denied', and os.access says "
               "no): whether the log is "
               "there cannot be known, which is not the same as its absence")

    log = lesson.SessionLog(sessions, "quest-1")
    with files_refused(monkeypatch, sessions, errno.EACCES, reading=True,
                       searching=searching):
        # One load: its refusal is judged below, and by its words
        loaded = load_or_error(log)
        refused = loaded if isinstance(loaded, OSError) else None
        if isinstance(loaded, Exception) and refused is None:
            pytest.fail(f"{setting}; load() raised {described(loaded)}, where it "
                        "should let the OSError that says so reach the caller",
                        pytrace=False)
        loaded = None if refused is not None else loaded
        started = agent_started_on(lesson, model, town, log, setting, OSError,
                                   "the OSError that says the log may not be read")
    path = sessions / "quest-1.jsonl"
    if refused is not None and not names_path(str(refused), path):
        pytest.fail(f"{setting}; load() raised {described(refused)}, whose words do "
                    f"not name the log by its path ({path}): the error that happened "
                    "reaches the caller naming the file it could not read and why, so "
                    "that whoever reads it knows which log to look at (a session's id "
                    "names none: every sessions folder may hold a quest-1.jsonl)",
                    pytrace=False)
    if refused is not None and not (isinstance(refused, PermissionError)
                                    and refused.errno == errno.EACCES):
        pytest.fail(f"{setting}; load() raised {described(refused)}, with the errno "
                    f"{refused.errno!r}, where the PermissionError that happened "
                    "(errno EACCES) should reach the caller as it is: a program tells "
                    "'may not read' from other failures by the error's kind (to ask "
                    "for access rather than retry), which an OSError made from words "
                    "alone loses", pytrace=False)
    assert loaded is None, (
        f"{setting}; load() returned {loaded!r}, as if the session were new. The "
        "caller must learn that the log could not be read: an empty history starts the "
        "session over, and its next append lands after a history the model never saw")
    assert isinstance(started, OSError), (
        f"{setting}; a new agent on the session started with {started!r}, as if the "
        "session were new, where making it should raise the error load gives")
    assert names_path(str(started), path) and isinstance(started, PermissionError), (
        f"{setting}; making a new agent on the session raised {described(started)}, "
        f"where load's error, a PermissionError naming the log by its path ({path}), "
        "should reach the caller as it is: words of the agent's own that name the "
        "session's id name no file (every sessions folder may hold a quest-1.jsonl), "
        "and an error made from words loses its kind")


@pytest.mark.task("02.1")
@pytest.mark.parametrize("where", ["a line is read", "the log is read"])
def test_a_load_stopped_by_ctrl_c_leaves_nothing_open(lesson, sessions, monkeypatch,
                                                      where):
    """The user's Ctrl-C while a log loads stops the load as it is: it reaches the
    caller as KeyboardInterrupt, not as a refusal that blames a line of the log, and it
    leaves nothing open, whether it comes while a line is read or while the file is
    (read with os.read or through a file object that open gives: the descriptor is
    closed on that way out too, not only once the load is done).
    A new agent on the session, which resumes it, lets it reach its caller too."""
    lines = [{"role": "user", "content": f"message {n}"} for n in range(3)]
    (sessions / "quest-1.jsonl").write_bytes(
        b"".join(json.dumps(line).encode() + b"\n" for line in lines))
    interrupted = []
    log_module = sys.modules[lesson.SessionLog.__module__]
    real_parse, real_read, real_open = log_module.parse_line, os.read, io.open

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    class Interrupted:
        """The log opened as a file object, whose first read is cut by Ctrl-C. What
        raises holds no reference to the file: only the load's own names keep it."""

        def __init__(self, file):
            self._file = file

        def __getattr__(self, name):
            if not interrupted and name.startswith("read") and name != "readable":
                interrupted.append(where)
                return ctrl_c
            return getattr(self._file, name)

        def __enter__(self):
            self._file.__enter__()
            return self

        def __exit__(self, *exc_info):
            return self._file.__exit__(*exc_info)

        def __iter__(self):
            return self

        def __next__(self):
            if not interrupted:
                interrupted.append(where)
                del self
                raise KeyboardInterrupt
            return next(self._file)

    def open_file(file, *args, **kwargs):
        opened = real_open(file, *args, **kwargs)
        return Interrupted(opened) if stat_is_log(opened.fileno()) else opened

    def parse_line(line):
        if len(interrupted) == 0 and b"message 1" in line:
            interrupted.append(where)
            raise KeyboardInterrupt
        return real_parse(line)

    def read(fd, size):
        if not interrupted and stat_is_log(fd):
            interrupted.append(where)
            raise KeyboardInterrupt
        return real_read(fd, size)

    def stat_is_log(fd):
        try:
            return os.path.samestat(os.fstat(fd), os.stat(sessions / "quest-1.jsonl"))
        except OSError:
            return False

    gc.collect()
    before = open_descriptors()
    stopped = None
    with lesson.SessionLog(sessions, "quest-1") as log:
        with monkeypatch.context() as patch:
            if where == "a line is read":
                patch.setattr(log_module, "parse_line", parse_line)
            else:
                patch.setattr(os, "read", read)
                patch.setattr(io, "open", open_file)
                patch.setattr(builtins, "open", open_file)
            try:
                log.load()
            except NotImplementedError:
                raise
            except BaseException as error:  # noqa: BLE001 - what reached the caller
                stopped = error
        if not interrupted:
            return      # this load reads without that call: nothing to interrupt here
        still_open = open_descriptors() - before
    told = described(stopped) if stopped is not None else "nothing"
    assert isinstance(stopped, KeyboardInterrupt), (
        f"the user pressed Ctrl-C while {where} during a load of a log whose lines are "
        f"all messages, and the caller got {told}: Ctrl-C must reach the caller as "
        "KeyboardInterrupt, to stop the program, never as a refusal of a line nothing "
        "is wrong with (whoever reads it would go and mend a log that is fine)")
    assert still_open <= 0, (
        f"the user pressed Ctrl-C while {where} during a load, and {still_open} more "
        "descriptor(s) are open than before it, while the KeyboardInterrupt is kept: a "
        "load leaves nothing open however it ends, Ctrl-C included (close the file in "
        "a finally or a with, not in an except Exception)")
    if where != "a line is read":
        return
    # A new agent on the session resumes through the load: the Ctrl-C reaches whoever
    # made the agent, never an agent that goes on as if the session were new.
    interrupted.clear()
    with lesson.SessionLog(sessions, "quest-1") as log:
        with monkeypatch.context() as patch:
            patch.setattr(log_module, "parse_line", parse_line)
            try:
                agent = lesson.Agent(None, model="scripted", tools=None, session=log)
            except NotImplementedError:
                raise
            except BaseException as error:  # noqa: BLE001 - what reached the caller
                stopped = error
            else:
                stopped = None
    if not interrupted:
        return          # this agent resumes without that call: nothing to interrupt
    told = (described(stopped) if stopped is not None else
            f"an agent whose history is {agent.messages!r}")
    assert isinstance(stopped, KeyboardInterrupt), (
        f"the user pressed Ctrl-C while a line was read as a new agent on quest-1 "
        f"resumed it, and the caller got {told}: Ctrl-C during a load reaches the "
        "caller as it came, to stop the program; an agent that goes on from what was "
        "read, or from nothing, appends after a history the model never saw")


@pytest.mark.task("02.1")
def test_running_out_of_memory_while_a_line_is_read_blames_no_line(
        lesson, sessions, monkeypatch):
    """A line too large for the memory left (a pasted document, a machine short of
    memory) makes reading it raise MemoryError: that reaches the caller as it came, as
    the machine's failure, never as a refusal of a line nothing is wrong with (whoever
    reads that goes to mend a log that is fine)."""
    lines = [{"role": "user", "content": f"message {n}"} for n in range(3)]
    (sessions / "quest-1.jsonl").write_bytes(
        b"".join(json.dumps(line).encode() + b"\n" for line in lines))
    log_module = sys.modules[lesson.SessionLog.__module__]
    real_parse = log_module.parse_line
    ran_out = []

    def parse_line(line):
        if b"message 1" in line:
            ran_out.append(line)
            raise MemoryError
        return real_parse(line)

    monkeypatch.setattr(log_module, "parse_line", parse_line)
    with lesson.SessionLog(sessions, "quest-1") as log:
        try:
            got = log.load()
        except NotImplementedError:
            raise
        except BaseException as error:      # noqa: BLE001 - what reached the caller
            got = error
    if not ran_out:
        return      # this load reads its lines without parse_line: nothing to play
    told = (f"raised {described(got)}" if isinstance(got, BaseException)
            else f"returned {got!r}")
    assert isinstance(got, MemoryError), (
        "the machine ran out of memory (MemoryError) while line 2 of a log of three "
        f"messages was read, and load() {told}: the error reaches the caller as it "
        "came, MemoryError, never as a refusal that blames a line nothing is wrong "
        "with, nor as a history without it (catch what parse_line raises for a line "
        "that is no message, ValueError, not every Exception)")
