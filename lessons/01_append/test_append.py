"""Lesson 01: save as you go.

Run: pytest lessons/01_append            (your code)
     pytest lessons/01_append --solution (the reference)
"""

import errno
import json
import os
import re
import resource
import shutil
import signal
import stat
import sys

import pytest

from sessionlab.scripted import Crash, SimulatedCrash, call, say, use
from sessionlab.testing import (append_interrupted_after_the_write, described, fail_in,
                                in_child, names_path, open_descriptors, raises,
                                unless_unfinished, until_written, with_file_size_limit)

# Each id a plain name excludes, with what is wrong with it as a file name.
WHY_BAD = {
    "../x": "it climbs out of the sessions folder",
    "/etc/passwd": "an absolute path: joined to the folder, it replaces it",
    "a/b": "a '/' makes it a path into another folder",
    "": "it is no name at all: the log would be the hidden file '.jsonl'",
    "a\x00b": "no file name can hold a NUL byte",
    "x" * 129: "it is 129 characters long, one past the limit of 128",
    "..": "it names the folder above",
    ".hidden": "a name starting with a dot is hidden from listings",
    "quest 1": "a space is no letter, digit, '.', '_' or '-'",
    "a\\b": "a backslash is a path separator on Windows",
    "~root": "a shell reads '~root' as root's home folder",
    "quest-1\n": ("it ends with a newline, after an id that is plain: a check must "
                  "look at the whole id, to its last character (a regular "
                  "expression's '$' also matches before a final newline)"),
    "洞窟へ": ("its letters are not ASCII (a check that takes letters of every script "
            "lets it in), and the same name can be spelled in more than one way"),
    "-rf": "a name starting with '-' is read as options by a command given the file",
    "cafe\u0301": ("its 'é' is two code points, 'e' and an accent, and the same name "
                   "typed on another machine is one: two spellings, two files"),
    "quest-\u0661": ("its last character is an Arabic-Indic digit: '\\d' and isdigit() "
                     "take the digits of every script"),
    "quest:1": "a ':' separates a drive or a stream on Windows, folders on old Macs",
    "CON": ("Windows keeps CON for the console, in any case: CON.jsonl there is the "
            "screen, not a file"),
    "nul.day-2": ("Windows keeps NUL for the bin, even before a dot: nul.day-2.jsonl "
                  "there loses every line written to it"),
    "Com1": "Windows keeps COM1 to COM9 and LPT1 to LPT9 for ports, in any case",
    "lpt9.x": "Windows keeps LPT9, the last of LPT1 to LPT9, before a dot too",
    "AUX": "Windows keeps AUX for a device, in any case: AUX.jsonl there is no file",
    "prn.day-2": "Windows keeps PRN for the printer, even before a dot",
    "com9": "Windows keeps COM9, the last of COM1 to COM9, in any case",
    "LPT1.day-2": "Windows keeps LPT1, the first of LPT1 to LPT9, before a dot too",
    "aux.day-2.old": ("Windows keeps AUX whatever follows its first dot: there, "
                      "aux.day-2.old.jsonl is the device too"),
}
BAD_IDS = list(WHY_BAD)


def lines_of(path):
    """The log's lines as parsed JSON, or [] if the file does not exist yet."""
    if not path.exists():
        return []
    found = []
    for number, line in enumerate(path.read_bytes().split(b"\n"), start=1):
        try:
            found.append(json.loads(line)) if line else None
        except ValueError:
            pytest.fail(f"line {number} of {path.name} is not a JSON object on its "
                        f"own: {line[:80]!r}. Each message should be one whole line, "
                        "ended by a newline", pytrace=False)
        if line and not (isinstance(found[-1], dict) and "role" in found[-1]):
            pytest.fail(f"line {number} of {path.name} is no message (it has no role): "
                        f"{line[:80]!r}. The log holds the conversation, one message a "
                        "line, and nothing else", pytrace=False)
    return found


def the_log(lesson, folder, session_id="quest-1"):
    """The session's log, `<folder>/<session_id>.jsonl`, once appends have made it;
    fail in words, naming whose code is wrong when it can tell, if they made none."""
    path = folder / f"{session_id}.jsonl"
    if path.exists():
        return path
    returned = lesson.check_session_id(session_id)
    if returned != session_id:
        fail_in("01.1", f"check_session_id({session_id!r}) returned {returned!r}, "
                "where an id it accepts comes back unchanged: SessionLog names the log "
                f"after what it returns, so the appends never reached {path.name}")
    there = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else None
    pytest.fail(f"after the appends the log should be {path.name} in the sessions "
                "folder; " + ("that folder does not exist" if there is None else
                              f"the folder holds {there}"), pytrace=False)


def agent_on(lesson, model, town, sessions, session_id="quest-1", **options):
    log = lesson.SessionLog(sessions, session_id, **options)
    return lesson.Agent(model.client(), model=model.model, tools=town, session=log), log


def plain_write(log, data):
    """A stand-in for `SessionLog._write` (task 01.5) while it is not written yet: the
    bytes in one write(), an error for a short one, a sync in durable mode. It has none
    of 01.5's guard for a write whose outcome is unknown, and 01.5's own tests never
    use it."""
    if log._fd is None:
        pytest.fail("append handed _write a line while the log had no open "
                    "descriptor: the line has no file to go to", pytrace=False)
    if not isinstance(data, bytes):
        pytest.fail(f"append handed _write a {type(data).__name__}, where the line's "
                    "bytes (UTF-8) were expected", pytrace=False)
    written = os.write(log._fd, data)
    if written != len(data):
        raise OSError(f"{log.path}: short write, {written} of {len(data)} bytes")
    if log.durable:
        os.fsync(log._fd)


def plain_open(log):
    """A stand-in for `SessionLog._open` (task 01.4) while it is not written yet: the
    log opened to append, created if need be. It has none of 01.4's care for durable
    mode, and no test of 01.4 uses it."""
    os.makedirs(log.folder, 0o700, exist_ok=True)
    log._fd = os.open(log.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)


def the_sessions_id_is_taken(lesson):
    """Fail in words, naming task 01.1, if check_session_id refuses 'quest-1', the plain
    id the tests of the other tasks give their sessions: those tests could not even
    make their SessionLog, and would seem to fail for their own task."""
    try:
        lesson.check_session_id("quest-1")
    except NotImplementedError:
        return      # the test meets it, and says which task is not written yet
    except lesson.InvalidSessionId as error:
        fail_in("01.1", f"check_session_id refused 'quest-1', a plain id (letters, "
                f"a dash, a digit) that this test gives its session, saying: {error}. "
                "Ids such as quest-1, Day_2.branch or 7 must pass")


def the_log_opens(lesson, folder):
    """Fail in words, naming task 01.4, if `_open`, once written, cannot open a new
    session's log in an empty folder, keeps no descriptor in `_fd`, or opens it with a
    descriptor that cannot write: the tests of the other tasks open their logs with
    it, and would seem to fail for their own task."""
    try:
        log = lesson.SessionLog(folder, "quest-1")
        log._open()
    except NotImplementedError:
        return      # 01.1's the test meets; _open's, plain_open stands in for
    except Exception as error:      # noqa: BLE001 - reported in words
        fail_in("01.4", "_open could not open the log of a new session, "
                "quest-1.jsonl in an empty sessions folder: it raised "
                f"{type(error).__name__} ({error}). It opens the log to append to "
                "it, creating it if need be")
    try:
        if not isinstance(log._fd, int):
            fail_in("01.4", "_open returned for the log of a new session, "
                    "quest-1.jsonl in an empty sessions folder, and left the writer's "
                    f"_fd at {log._fd!r}: _open keeps the descriptor it opened in "
                    "_fd, where append, _write and close() find it, or no line ever "
                    "reaches the log (and the descriptor leaks)")
        os.write(log._fd, b"")      # no byte: only asks whether it may write
    except OSError as error:
        fail_in("01.4", "_open opened the log of a new session, quest-1.jsonl, with "
                "a descriptor that cannot write to it: a write of no byte through "
                f"it raised {type(error).__name__} ({error}). The log is opened to "
                "append to it (for writing, at its end), or no line ever gets in")
    finally:
        try:
            log.close()
        except OSError:
            pass    # a descriptor closed already: the failure above says so


@pytest.fixture(autouse=True)
def until_tasks_01_4_and_01_5_are_written(request, monkeypatch):
    """Every append opens the log with `_open` (task 01.4) and ends in `_write` (task
    01.5). So that each task is tested as soon as it is written, every test but those of
    01.5 alone writes through `plain_write` for as long as `_write` is not written, and
    every test not marked 01.4 opens the log with `plain_open` for as long as `_open` is
    not written; once they are, the student's own code runs. So the tests of 01.2 and
    01.3 need neither task written, those of 01.4 need 01.4 only, and those of 01.5
    never use a stand-in for it (what they check, only 01.5's writer does). A test of
    another task than 01.1 first makes sure that check_session_id takes the id its
    session has, or fails naming 01.1."""
    tasks = {mark.args[0] for mark in request.node.iter_markers("task")}
    if "lesson" in request.fixturenames and "01.1" not in tasks:
        the_sessions_id_is_taken(request.getfixturevalue("lesson"))
    if "sessions" in request.fixturenames and "01.4" not in tasks:
        the_log_opens(request.getfixturevalue("lesson"),
                      request.getfixturevalue("tmp_path_factory").mktemp("opens"))
    if tasks <= {"01.5"} or "lesson" not in request.fixturenames:
        return
    log_class = request.getfixturevalue("lesson").SessionLog
    if "01.5" not in tasks:
        until_written(monkeypatch, log_class, "_write", "01.5", plain_write)
    if "01.4" not in tasks:
        until_written(monkeypatch, log_class, "_open", "01.4", plain_open)


@pytest.mark.task("01.5")
@pytest.mark.key
@pytest.mark.task("01.3")
@pytest.mark.task("01.2")
def test_each_message_is_on_disk_before_the_next_model_call(
    lesson, model, town, sessions
):
    """Every message is in the log before the model is called again (checked from inside
    the scripted model), so a crash never loses what was already said."""
    log_path = sessions / "quest-1.jsonl"
    model.on_request(lambda request: lines_of(log_path))   # runs inside the model call
    model.add(
        use(call("talk_to", npc="elder")), say("The elder wants a torch and a rope.")
    )
    agent, log = agent_on(lesson, model, town, sessions)

    with log:
        agent.run("Ask the elder about the cave.")

    the_log(lesson, sessions)
    on_disk_at_first_call, on_disk_at_second_call = model.observations
    assert on_disk_at_first_call == model.requests[0]["messages"], (
        "when the model is called the first time, the user's message must already be "
        "in the log; "
        f"the log held {on_disk_at_first_call}")
    assert on_disk_at_second_call == model.requests[1]["messages"], (
        "at the second model call, the log must hold everything sent so far (user, "
        f"tool call, tool result); it held {len(on_disk_at_second_call)} of "
        f"{len(model.requests[1]['messages'])} messages"
    )


@pytest.mark.task("01.5")
@pytest.mark.task("01.2")
def test_a_line_of_any_length_is_written_whole_and_append_returns(lesson, sessions):
    """Lines of every length (a few bytes, a few hundred, the long output of a tool,
    letters of other scripts that take three bytes each) are written whole, and append
    returns for each. A check of what write() took that holds for short lines only (two
    numbers compared with `is`, characters counted where bytes are written) passes a
    short conversation and stops the session at its first long message."""
    messages = [{"role": "user", "content": "x" * n}
                for n in (0, 1, 200, 240, 250, 251, 1000, 70_000, 300_000)]
    messages.append({"role": "tool", "tool_call_id": "call_1",
                     "content": "洞窟へ" * 30_000})
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in messages:
            size = len(json.dumps(message, ensure_ascii=False).encode()) + 1
            try:
                log.append(message)
            except NotImplementedError:
                raise
            except Exception as error:      # noqa: BLE001 - reported in words
                pytest.fail(f"appending a message whose line is about {size:,} bytes "
                            f"raised {type(error).__name__}: {error}. The disk took "
                            "the line (nothing here fills it or cuts a write short), "
                            "so append should return: a line is written whole, and "
                            "passes for saved, whatever its length", pytrace=False)
    held = lines_of(the_log(lesson, sessions))
    assert held == messages, (
        f"{len(messages)} messages with lines from a few bytes to about 300 KB were "
        f"appended; the log holds {len(held)} lines, with contents of "
        f"{[len(m.get('content') or '') for m in held]} characters, where "
        f"{[len(m['content']) for m in messages]} were expected: each message is "
        "one whole line, whatever its length")


@pytest.mark.task("01.3")
def test_each_tool_call_is_on_disk_before_the_tool_runs(lesson, model, town, sessions):
    """A tool acts on the world (the shop takes the gold) the moment it runs: the call
    that asked for it, and every result before it, are in the log by then (checked
    from inside each tool), so that a crash while a tool runs never leaves a world
    that changed for a call the log does not hold."""
    log_path = sessions / "quest-1.jsonl"
    seen = {}       # what the log held as each tool began to run

    def observed(name, real):
        def tool(**arguments):
            seen[name] = lines_of(log_path)
            return real(**arguments)
        return tool
    for name in ("buy", "talk_to"):
        town.functions[name] = observed(name, town.functions[name])
    model.add(use(call("buy", item="rope"), call("talk_to", npc="elder")),
              say("Bought, and asked."))
    agent, log = agent_on(lesson, model, town, sessions)

    with log:
        agent.run("Buy a rope, then ask the elder.")

    said = agent.messages
    for name, before in [("buy", said[:2]), ("talk_to", said[:3])]:
        held = seen.get(name)
        assert held is None or held == before, (
            f"the model called buy, then talk_to, in one reply; as {name} began to "
            f"run, the log held {[m.get('role') for m in held]}, where "
            f"{[m.get('role') for m in before]} was expected (the user's message, "
            "the call" + (", buy's result" if name == "talk_to" else "") + "): each "
            "message is saved the moment it exists, before the next tool runs, or a "
            "crash while the tool acts on the world leaves a log without its call")


@pytest.mark.key
@pytest.mark.task("01.2")
def test_the_log_holds_exactly_the_conversation_one_json_object_per_line(
    lesson, model, town, sessions
):
    """The log holds the agent's messages in order, one JSON object per
    newline-terminated line, and nothing else."""
    model.add(
        use(call("talk_to", npc="guard"), call("buy", item="torch")), say("Ready.")
    )
    agent, log = agent_on(lesson, model, town, sessions)

    with log:
        agent.run("Get ready for the cave.")

    raw = the_log(lesson, sessions).read_bytes()
    assert raw.endswith(b"\n"), "every line, the last one included, ends with a newline"
    ends = [n for n, line in enumerate(raw.split(b"\n"), start=1)
            if line.endswith(b"\r")]
    assert not ends, (
        f"lines {ends} of the log end with '\\r\\n': a line is its JSON and one "
        "newline byte, nothing else (a reader keeps the '\\r' as part of the line, "
        "and a search for a line's end misses it)")
    assert lines_of(sessions / "quest-1.jsonl") == agent.messages, (
        "the log should hold every message of agent.messages, in order, one per line")
    keys = {"role", "content", "tool_calls", "tool_call_id"}
    added = [sorted(set(line) - keys) for line in lines_of(sessions / "quest-1.jsonl")
             if isinstance(line, dict) and set(line) - keys]
    assert not added, (
        "each line should hold its message and nothing else, as the agent made it "
        "(role, content, tool_calls, tool_call_id); lines hold the keys "
        f"{added} besides: a key append adds to a message goes into the caller's "
        "memory too, and back to the model with every later request")


@pytest.mark.task("01.3")
def test_a_crash_mid_run_leaves_every_earlier_message_on_disk(
    lesson, model, town, sessions
):
    """A crash in the middle of a turn leaves every message said before it on disk:
    saving as you go is the point of this lesson."""
    model.add(use(call("buy", item="rope")), Crash())
    agent, log = agent_on(lesson, model, town, sessions)

    with raises(
        SimulatedCrash,
        "the scripted model crashed during the second model "
        "call, yet run() returned: let an error from the model reach the caller",
    ):
        agent.run("Buy a rope.")   # the process "dies" during the second model call
    log.close()

    roles = [m["role"] for m in lines_of(sessions / "quest-1.jsonl")]
    assert roles == ["user", "assistant", "tool"], (
        "the crash happened during the second model call: the user's message, the "
        "model's tool call and the tool's result were all said before it and must be "
        f"on disk; found {roles}"
    )


@pytest.mark.task("01.3")
def test_an_agent_without_a_session_keeps_its_conversation_in_memory(
    lesson, model, town, tmp_path, monkeypatch
):
    """An agent made without a session, as in lesson 00, has no log to write to: it
    still runs its turns, and keeps the conversation in memory only."""
    monkeypatch.chdir(tmp_path)
    model.add(use(call("buy", item="rope")), say("Bought."))
    agent = lesson.Agent(model.client(), model=model.model, tools=town)

    try:
        answer = agent.run("Buy a rope.")
    except NotImplementedError:
        raise
    except Exception as error:      # noqa: BLE001 - reported in words below
        pytest.fail(f"an agent made without a session failed its turn with "
                    f"{type(error).__name__}: {error}. With no session there is no "
                    "log to write to, and the agent should keep the conversation in "
                    "memory, as lesson 00's did", pytrace=False)
    roles = [m["role"] for m in agent.messages]
    turn = ["user", "assistant", "tool", "assistant"]
    assert answer == "Bought." and roles == turn, (
        "an agent without a session should run its turn as in lesson 00 and hold it "
        f"in memory; run() returned {answer!r}, and memory holds the roles {roles}")
    assert list(tmp_path.iterdir()) == [], (
        "an agent without a session wrote files: "
        f"{sorted(p.name for p in tmp_path.iterdir())}")


@pytest.mark.task("01.5")
@pytest.mark.task("01.2")
def test_non_ascii_text_stays_readable_in_the_file(lesson, sessions):
    """Non-ASCII text is written as UTF-8, not as escapes, so the log stays readable
    and greppable by a person."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": "Café au lait, Ελληνικά, 洞窟へ"})

    data = the_log(lesson, sessions).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        pytest.fail(f"the log is not UTF-8 ({error}); it holds the bytes {data!r}, "
                    "where 'Café au lait, Ελληνικά, 洞窟へ' should have been written "
                    "in UTF-8, which every reader of a log expects", pytrace=False)
    if "Café au lait, Ελληνικά, 洞窟へ" not in text:
        # How a message becomes its line is append's (01.2), not the write's (01.5)
        fail_in("01.2", "non-ASCII text should be written as UTF-8, readable in the "
                f"file, not as \\u escapes; the file holds: {text!r}")


@pytest.mark.task("01.2")
def test_a_newline_inside_content_stays_one_line(lesson, sessions):
    """A newline inside a message's content is escaped by JSON, so one message is always
    exactly one line."""
    said = "line one\nline two\r\nline three\u2028four\u2029five\x85six\x0bseven"
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": said})
        log.append({"role": "assistant", "content": "ok"})

    raw = the_log(lesson, sessions).read_bytes()
    lines = raw.count(b"\n")
    assert lines == 2, (
        f"two messages must be exactly two lines, the file has {lines}: {raw!r}"
    )
    first_line = raw.split(b"\n")[0]
    try:
        first = json.loads(first_line)["content"]
    except (ValueError, KeyError, TypeError):
        pytest.fail("the file's first line should be the first message, a JSON "
                    f"object ended by its newline; it is {first_line[:80]!r}, in "
                    f"{raw[:120]!r}", pytrace=False)
    assert first == said, (
        "the first line should give back the message's content as it was given, its "
        "line ends of every kind included (\\n, \\r\\n, U+2028, U+2029, U+0085, a "
        f"vertical tab); it gives {first!r}")


def write_syscalls():
    """The write() calls this thread has made, as Linux counts them; None elsewhere."""
    try:
        with open("/proc/thread-self/io", encoding="ascii") as counters:
            for line in counters:
                if line.startswith("syscw:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


@pytest.mark.task("01.5")
@pytest.mark.task("01.2")
def test_each_line_is_written_with_one_write_call(lesson, sessions, monkeypatch):
    """One append is one write() system call of the whole line, the newline included."""
    messages = [{"role": "user", "content": "Map the cave."},
                {"role": "tool", "tool_call_id": "call_1_0",
                 "content": "a long map of the cave " * 12_000}]
    counts = []
    if write_syscalls() is None:
        # No kernel counter here (not Linux): count os.write calls instead, the one
        # place this test replaces an OS function.
        real_write = os.write
        calls = []
        def write(fd, data):
            calls.append(fd)
            return real_write(fd, data)
        monkeypatch.setattr(lesson.os, "write", write)
        counter = lambda: len(calls)    # noqa: E731
    else:
        counter = write_syscalls
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in messages:
            before = counter()
            log.append(message)
            counts.append(counter() - before)

    assert counts == [1, 1], (
        "each append should write its whole line (JSON and newline) with one write() "
        f"call; appending a short and a {len(messages[1]['content']) // 1024} KiB "
        f"message made {counts} write calls. Between two writes another process's "
        "line, or a crash, can land in the middle of yours (a print() inside append "
        "counts as a write too). append (task 01.2) hands the line over whole, in one "
        "piece, and _write (task 01.5) writes what it is given with one call")


@pytest.mark.key
@pytest.mark.task("01.4")
@pytest.mark.task("01.2")
def test_a_second_log_object_appends_and_never_truncates(lesson, sessions):
    """Opening the log of an existing session appends to it; a log that started over
    would lose the earlier conversation."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": "day one"})
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": "day two"})

    contents = [m["content"] for m in lines_of(sessions / "quest-1.jsonl")]
    assert contents == ["day one", "day two"], (
        "a log is append-only: opening it again must add to the end, never start over; "
        f"found {contents}"
    )


@pytest.mark.task("01.2")
def test_the_same_message_appended_twice_is_written_twice(lesson, sessions):
    """Each append writes its line, whatever was appended before: a caller that hands
    the very same message object twice (a 'Yes.' kept in a constant, a retry after a
    full disk) finds it in the log twice."""
    yes = {"role": "user", "content": "Yes."}
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append(yes)
        log.append({"role": "assistant", "content": "Are you sure?"})
        log.append(yes)
        log.append(yes)

    contents = [m["content"] for m in lines_of(the_log(lesson, sessions))]
    assert contents == ["Yes.", "Are you sure?", "Yes.", "Yes."], (
        "the same message object was appended, then another message, then the first "
        f"one twice more; the log holds {contents}: every append writes its line by "
        "the time it returns, whatever the caller handed before, the same object "
        "included")


@pytest.mark.task("01.5")
@pytest.mark.task("01.4")
@pytest.mark.task("01.2")
def test_a_log_closed_then_appended_to_opens_again(lesson, sessions):
    """close() lets the log's descriptor go, not the session: the same SessionLog's
    next append opens the log again and adds to its end."""
    log = lesson.SessionLog(sessions, "quest-1")
    log.append({"role": "user", "content": "day one"})
    log.close()
    try:
        log.append({"role": "user", "content": "day two"})
    except (NotImplementedError, lesson.InvalidMessage):
        raise
    except Exception as error:      # noqa: BLE001 - reported in words
        pytest.fail(f"a log appended to, closed, then appended to again raised "
                    f"{described(error)} on that append: the writer keeps its "
                    "descriptor in _fd until close(), and an append that finds none "
                    "opens the log again", pytrace=False)
    finally:
        log.close()

    contents = [m["content"] for m in lines_of(the_log(lesson, sessions))]
    assert contents == ["day one", "day two"], (
        "a log appended to, closed, then appended to again should hold both lines, "
        f"in order; found {contents}")


@pytest.mark.task("01.5")
@pytest.mark.task("01.2")
def test_a_refused_message_leaves_the_writer_usable(lesson, sessions):
    """A message the rule refuses is the caller's mistake, not the log's: append
    raises InvalidMessage, writes nothing, and the next good message is appended."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": "day one"})
        with raises(lesson.InvalidMessage, "append took a message with the role "
                    "'wizard', which no provider takes, where InvalidMessage was "
                    "expected"):
            log.append({"role": "wizard", "content": "abracadabra"})
        try:
            log.append({"role": "user", "content": "day two"})
        except NotImplementedError:
            raise
        except Exception as error:      # noqa: BLE001 - reported in words
            pytest.fail(f"after append refused a message with InvalidMessage, the next "
                        f"append, of a good message, raised {described(error)}: a "
                        "refused message leaves no trace, and nothing wrong with the "
                        "log, so the writer goes on (a writer must not stop without "
                        "cause)", pytrace=False)

    contents = [m["content"] for m in lines_of(the_log(lesson, sessions))]
    assert contents == ["day one", "day two"], (
        "after a good message, a refused one, then another good one, the log should "
        f"hold the two good ones, in order; found {contents}")


@pytest.mark.task("01.2")
def test_what_open_and_write_raise_reaches_the_caller_of_append_as_it_is(lesson,
                                                                        sessions):
    """What `_open` and `_write` raise reaches append's caller as it is, the very
    error: a full disk's OSError with its error number (ENOSPC), which tells the
    caller that freeing space helps, a log refused as a link with its own, a stopped
    writer's WriterStopped, a Ctrl-C. An error append makes of it, even an OSError
    naming the log, loses what the caller acts on."""
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    link = OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(sessions / "x.jsonl"))
    stopped = lesson.WriterStopped(f"{sessions / 'x.jsonl'}: stopped")
    changed = []
    for where, error in [("_write", full), ("_open", link), ("_write", stopped),
                         ("_write", KeyboardInterrupt())]:
        log = lesson.SessionLog(sessions, "quest-1")

        def raising(*args, error=error):
            raise error
        setattr(log, where, raising)    # this writer's own, for this one append
        try:
            log.append({"role": "user", "content": "Hello."})
            got = "returned"
        except NotImplementedError:
            raise
        except BaseException as other:      # noqa: BLE001 - judged below
            got = None if other is error else f"raised {described(other)}"
            if isinstance(error, OSError) and isinstance(other, OSError):
                got = got and f"{got}, error number {other.errno}"
        finally:
            log.close()
        if got is not None:
            changed.append(f"{where} raised {described(error)}"
                           + (f" (error number {error.errno})"
                              if isinstance(error, OSError) else "")
                           + f", and append {got}")
    assert not changed, (
        "what _open and _write raise should reach append's caller as it is, the very "
        f"error: {'; '.join(changed)}. The caller acts on it: a full disk's error "
        "number says that freeing space helps, WriterStopped that the session must be "
        "opened again, a Ctrl-C that the user wants to stop")


@pytest.mark.key
@pytest.mark.task("01.1")
@pytest.mark.parametrize(
    "bad_id", BAD_IDS, ids=lambda v: repr(v) if len(v) < 20 else f"{len(v)} characters"
)
def test_a_session_id_that_is_not_a_plain_name_is_refused(lesson, tmp_path, bad_id):
    """A session id that could name a path (../x, /etc/x, empty, NUL) is refused before
    any file or folder is created."""
    sessions = tmp_path / "sessions"
    before = sorted(p.name for p in tmp_path.rglob("*"))

    with raises(lesson.InvalidSessionId,
                f"check_session_id({bad_id!r}) returned the id instead of raising "
                f"InvalidSessionId, and it is no plain name: {WHY_BAD[bad_id]}"):
        lesson.check_session_id(bad_id)
    with raises(lesson.InvalidSessionId,
                f"SessionLog({bad_id!r}) was made without InvalidSessionId: the id "
                "would become a path"):
        lesson.SessionLog(sessions, bad_id)

    assert sorted(p.name for p in tmp_path.rglob("*")) == before, (
        "a refused id must not create any file or folder"
    )


# Characters with a meaning of their own somewhere a session's files go, by kind: a
# name holding one is no plain name. ("+", "@", "," and "=" are left to your rule.)
MEANINGFUL = {
    "a control character (a terminal acts on it, a listing shows it as '?' or not at "
    "all)": "".join(map(chr, range(32))) + "\x7f",
    "a space, which splits the name in two for a shell": " ",
    "a path separator, on Unix, Windows or old Macs": "/\\:",
    "a character Windows refuses in a file name, and a shell reads as a pattern, a "
    "quote or a redirection": '*?"<>|',
    "a character a shell reads as a variable, a command, a pattern or a comment":
        "$`!&;()[]{}'#~^%",
    "a letter or digit of another script, or a sign beyond ASCII (letters and digits "
    "that \\w, \\d, isalnum() and isdigit() take, and [a-z] when case is ignored; it "
    "can be spelled in more than one way, and looks like others)":
        "é洞Å\u212a\u017f\u0130١２²ﬁ\u00a0\u2028\u200b\u202e／",
}


@pytest.mark.task("01.1")
def test_no_character_with_a_meaning_elsewhere_gets_into_an_id(lesson):
    """Every character that means something to a file system, a shell or a terminal,
    and every one beyond ASCII, is refused, wherever it stands in the id, its first
    character included (a rule for how an id starts is written apart, and is as easy
    to get wrong): the check describes what it accepts, rather than list what it
    refuses."""
    let_in = {}
    for kind, characters in MEANINGFUL.items():
        for character in characters:
            for candidate in (f"{character}quest-1", f"quest{character}1",
                              f"quest-1{character}"):
                try:
                    lesson.check_session_id(candidate)
                except lesson.InvalidSessionId:
                    continue
                except NotImplementedError:
                    raise
                except Exception as error:      # noqa: BLE001 - reported in words
                    fail_in("01.1", f"check_session_id({candidate!r}) raised "
                            f"{type(error).__name__} ({error}) where InvalidSessionId "
                            "was expected: a caller catching InvalidSessionId misses "
                            "it")
                let_in.setdefault(kind, []).append(candidate)
                break
    assert not let_in, (
        f"check_session_id took {sum(map(len, let_in.values()))} ids that are no plain "
        "names, among them: " + "; ".join(
            f"{kind}: {', '.join(map(repr, ids[:6]))}" for kind, ids in let_in.items())
        + ". There are more such characters than any list of yours will hold: describe "
        "the ids you accept, and refuse everything else")


# What a refusal names of the rule: the length limit, and the characters an id may hold.
RULE = {"the length limit (128)": ("128",), "letters": ("letter", "a-z"),
        "digits": ("digit", "0-9"), "'.'": (".", "dot", "period"),
        "'_'": ("_", "underscore"), "'-'": ("-", "dash", "hyphen")}
# The names Windows keeps for devices, each with a name that only begins like it.
DEVICES = {"CON": "CONSOLE", "PRN": "PRNX", "AUX": "aux-1", "NUL": "NULL",
           "COM1": "COM10", "LPT1": "LPT10"}


def takes(lesson, session_id):
    """Does check_session_id take `session_id`?"""
    try:
        lesson.check_session_id(session_id)
    except lesson.InvalidSessionId:
        return False
    return True


@pytest.mark.task("01.1")
def test_the_refusal_says_what_a_valid_id_looks_like(lesson):
    """The refusal quotes the id it refused and says what a valid one looks like (the
    characters allowed: letters, digits, '.', '_', '-'; 128 at most; the names kept
    for Windows devices, each, and that they are kept out in small letters or before a
    dot, where they are; and how an id may start and end, where the rule says),
    so the caller can fix it: every refusal states the rule, whatever the id's trouble
    (a path, too long, empty, a sign first, a space, a device's name)."""
    with raises(ValueError, "check_session_id('../x') accepted a path") as refused:
        lesson.check_session_id("../x")
    said = str(refused.value)
    assert "../x" in said, f"the error should quote the id it refused: {said}"
    assert "128" in said, (
        "the error should say what a valid id looks like, its length limit (128) "
        "included, so that the caller can fix the id rather than guess; it says: "
        f"{said}")
    words = said.replace("../x", "").lower()    # what it says besides the id
    unnamed = [kind for kind, ways in RULE.items()
               if not any(way in words for way in ways)]
    for extra in "+@,=":        # left to your rule: named if your check takes them
        try:
            lesson.check_session_id(f"quest{extra}1")
        except lesson.InvalidSessionId:
            continue
        if extra not in words:
            unnamed.append(repr(extra))
    assert not unnamed, (
        "the error should say which characters a valid id may hold (letters, digits, "
        "'.', '_' and '-', and any other your check takes), so that the caller can fix "
        f"the id; it names no {', no '.join(unnamed)}: {said}")
    kept_out = {name: alike for name, alike in DEVICES.items()
                if not takes(lesson, name) and takes(lesson, alike)}
    unnamed = [name for name in kept_out if name[:3].lower() not in words]
    assert not unnamed, (
        f"the check refuses {', '.join(kept_out)} (names Windows keeps for devices) "
        f"and takes {', '.join(kept_out.values())}: the names it keeps out are part "
        "of its rule, and the error should name each one (the caller cannot guess "
        f"them from the characters named); it names no {', no '.join(unnamed)}: "
        f"{said}")
    # The ports are names with numbers: COM1 to COM9 are kept out, COM10 is not. Any
    # way of saying the numbers passes: a range from 1 (or from 0, which newer Windows
    # keeps out too) to 9, or each port listed.
    unnumbered = [f"{port}1 to {port}9" for port in ("COM", "LPT")
                  if f"{port}1" in kept_out and not re.search(
                      rf"{port.lower()}\s*\[?[01].{{0,40}}?9", words)]
    assert not unnumbered, (
        f"the check refuses {', '.join(kept_out)} and takes "
        f"{', '.join(kept_out.values())}, but the error does not say which "
        f"{' and which '.join(p[:3] for p in unnumbered)} numbers it keeps out "
        f"({' and '.join(unnumbered)}): which ports are kept out is part of the rule "
        "(COM10 passes, COM1 does not), so the error should say their numbers, as a "
        f"range or one by one, so that the caller need not guess; it says: {said}")
    # A rule that keeps COM0 or LPT0 out too (newer Windows does) says so: a range
    # from 1 tells the caller refused for 'COM0' that it was a name like any other.
    from_one = [f"{port}0" for port in ("COM", "LPT")
                if f"{port}1" in kept_out and not takes(lesson, f"{port}0")
                and not re.search(rf"{port.lower()}\s*\[?0", words)]
    assert not from_one, (
        f"the check refuses {' and '.join(from_one)} (and takes COM10 and LPT10), "
        "but the error gives the ports' numbers from 1, which says those names pass: "
        "which ports are kept out is part of the rule, so the error should give "
        "their numbers from 0, where the check starts, so that the caller refused "
        f"for {from_one[0]!r} can tell why; it says: {said}")
    # Kept out in small letters, or before a '.': the names alone do not tell it
    for kept, alike, how, ways in [
            ("con", "cone", "in small letters", ("case", "lower", "small")),
            ("CON.quest", "CONE.quest", "before a '.'",
             ("before", "extension", "follow", "suffix", "dot", "ending", "con.",
              "nul.", "aux.", "prn."))]:
        if not takes(lesson, kept) and takes(lesson, alike) and not any(
                way in words for way in ways):
            pytest.fail(
                f"the check refuses {kept!r} and takes {alike!r}: it keeps "
                f"the device names out {how} too, which is part of its rule, but the "
                "error names them only as they are (CON, NUL, ...), and the caller "
                f"refused for {kept!r} cannot tell why; it says: {said}", pytrace=False)
    for other, why in [("x" * 129, "too long"), ("", "empty"), ("-rf", "starts "
                       "with '-'"), ("quest 1", "holds a space"), ("CON", "a device")]:
        with raises(lesson.InvalidSessionId, f"check_session_id({other!r}) returned "
                    f"the id instead of raising InvalidSessionId ({why})") as refused:
            lesson.check_session_id(other)
        told = str(refused.value)
        if other and len(other) <= 40:
            assert repr(other) in told or f'"{other}"' in told, (
                f"the refusal of {other!r} ({why}) should quote the id, as every "
                f"refusal does, so that its trouble shows; it says: {told}")
        rest = told.replace(other, "").replace(other[:40], "").lower()
        missing = [kind for kind, ways in RULE.items()
                   if not any(way in rest for way in ways)]
        assert not missing, (
            f"the refusal of {other[:40]!r}{'...' if len(other) > 40 else ''} ({why}) "
            "should state the rule, all of it, as every refusal does, so that the "
            "caller can fix the id rather than guess (the length limit, 128, and the "
            f"characters a valid id may hold); it names no {', no '.join(missing)}: "
            f"{told}")
    for first in "-._":     # taken inside an id: refused at its start only by a rule
        if takes(lesson, f"quest{first}1") and not takes(lesson, f"{first}quest"):
            assert any(way in words for way in ("start", "begin", "first")), (
                f"the check refuses {first + 'quest'!r} and takes "
                f"{'quest' + first + '1'!r}: how an id may start is part of its rule, "
                "and the error should say it (the caller cannot guess it from the "
                f"characters named); it says: {said}")
    for last in "-._":      # taken inside an id: refused at its end only by a rule
        if takes(lesson, f"quest{last}1") and not takes(lesson, f"quest{last}"):
            assert any(way in words for way in ("end", "last", "final")), (
                f"the check refuses {'quest' + last!r} and takes "
                f"{'quest' + last + '1'!r}: how an id may end is part of its rule, "
                "and the error should say it (the caller cannot guess it from the "
                f"characters named); it says: {said}")


@pytest.mark.task("01.1")
@pytest.mark.parametrize("bad_id, what, shown", [
    ("quest-1\n", "an id ending with a newline", ("\\n",)),
    ("a\x00b", "an id holding a NUL byte", ("\\x00", "\\u0000", "\\0")),
    ("", "an empty id", ("''", '""')),
    ("the-second-day-of-the-quest-to-the-cave\n",
     "a long id ending with a newline", ("\\n",)),
    ("day\n" + "x" * 200 + "\n", "an id of 205 characters with newlines at both ends",
     ("\\n",)),
], ids=["newline", "NUL", "empty", "long, newline last", "205 characters"])
def test_the_refusal_shows_an_id_whose_trouble_is_invisible(
        lesson, bad_id, what, shown):
    """An id whose trouble cannot be seen (a newline, a NUL byte, nothing at all) is
    quoted in the refusal so that its reader sees what is wrong with it."""
    why = f"check_session_id({bad_id!r}) accepted {what}"
    with raises(lesson.InvalidSessionId, why) as refused:
        lesson.check_session_id(bad_id)
    said = str(refused.value)
    hidden = [c for c in ("\n", "\x00") if c in bad_id and c in said]
    assert not hidden and any(way in said for way in shown), (
        f"the refusal of {what} should show it, escaped and quoted, so that whoever "
        "reads the message (or the log it lands in) sees the trouble; it says "
        f"{said!r}, where the id is {'printed as is' if hidden else 'not shown'}")


@pytest.mark.task("01.1")
@pytest.mark.parametrize("bad_id, trouble", [
    ("a" * 60 + "/x", "a '/' near its end"),
    ("the-second-day-of-the-quest-to-the-cave-by-the-northern-road ",
     "a space at its end"),
    ("the-cave-by-the-road-" + "洞窟" * 20,
     "letters beyond ASCII past its start (61 characters, 141 bytes of UTF-8)"),
], ids=["slash", "space", "beyond-ascii"])
def test_the_refusal_quotes_an_id_whose_trouble_lies_past_its_start(
        lesson, bad_id, trouble):
    """An id of a few dozen characters whose trouble is near its end is quoted whole
    in the refusal, so that the trouble shows, wherever it lies."""
    why = f"check_session_id({bad_id!r}) accepted an id with {trouble}"
    with raises(lesson.InvalidSessionId, why) as refused:
        lesson.check_session_id(bad_id)
    said = str(refused.value)
    assert bad_id in said, (
        f"the id {bad_id!r}, {len(bad_id)} characters, was refused for {trouble}, and "
        f"the refusal says {said!r}: it should quote the id whole, so that whoever "
        "reads it sees what is wrong with it, not only its start")


@pytest.mark.task("01.1")
def test_the_refusal_of_a_huge_id_stays_short(lesson):
    """An id of a megabyte (a request's body passed for an id) is refused in a message
    that quotes only its start: the message goes into logs and onto screens. So is a
    body that is no text, as a web framework hands it over: a megabyte of bytes, the
    list a JSON body holds, or the object (a dict, which has no start to cut)."""
    bad_id = "quest-" + "x" * 1_000_000
    with raises(lesson.InvalidSessionId, "check_session_id accepted an id of a "
                "million characters, far past the limit of 128") as refused:
        lesson.check_session_id(bad_id)
    said = str(refused.value)
    assert len(said) < 2_000 and bad_id[:30] in said, (
        f"the refusal of an id of {len(bad_id):,} characters is {len(said):,} "
        "characters long: it should quote the id's start (its first 30 characters at "
        "least), enough to recognise it, and not all of it, so that the message stays "
        f"one a person can read; it begins {said[:200]!r}")
    for body, what in [(bad_id.encode(), "bytes"), (["quest-1"] * 100_000, "a list"),
                       ({"session": bad_id}, "a JSON object (a dict)")]:
        with raises(lesson.InvalidSessionId, f"check_session_id accepted {what} of "
                    "a megabyte for an id, which is no text") as refused:
            lesson.check_session_id(body)
        said = str(refused.value)
        assert len(said) < 2_000 and "quest-" in said, (
            f"the refusal of {what} of a megabyte passed for an id (a request's body, "
            f"as a web framework hands it over) is {len(said):,} characters long: "
            "it should quote the start of what came (as Python shows it), enough to "
            "recognise it, and not all of it, whatever its type; it begins "
            f"{said[:200]!r}")


@pytest.mark.task("01.1")
def test_a_plain_id_given_as_a_str_subclass_is_accepted(lesson):
    """An id is text, whatever class of text the caller keeps it in: a str subclass
    holding a plain name (a StrEnum member, as a program names its sessions, or a web
    framework's safe string) is a plain name, accepted and returned as that name."""
    import enum

    class Session(enum.StrEnum):
        QUEST = "quest-1"

    try:
        returned = lesson.check_session_id(Session.QUEST)
    except lesson.InvalidSessionId as error:
        pytest.fail("check_session_id refused Session.QUEST, a member of a StrEnum "
                    "(a str subclass) whose text is 'quest-1', a plain name, saying: "
                    f"{error}. A str of any class is text: what decides is the name it "
                    "holds, not its class", pytrace=False)
    assert returned == "quest-1", (
        "check_session_id(Session.QUEST), a StrEnum member whose text is 'quest-1', "
        f"returned {returned!r}: an id it accepts comes back as that name")


@pytest.mark.task("01.1")
@pytest.mark.parametrize("good_id", ["quest-1", "Day_2.branch", "x" * 128, "7",
                                     "console", "aux-1", "COM10", "LPT10",
                                     "com.acme.quest", "quest.con", "quest.jsonl",
                                     "v1..v2", "day_2__draft"],
                         ids=lambda v: v if len(v) < 20 else f"{len(v)} characters")
def test_plain_session_ids_are_accepted(lesson, good_id):
    """Ordinary ids (letters, digits, dashes, underscores, dots inside) are accepted:
    the check refuses paths, not names, and a name that only begins like one Windows
    keeps for a device (console, aux-1, COM10, or com.acme.quest, whose first part is
    COM with no number) is a name like any other, as is one where a device's name
    comes after the first dot (Windows keeps quest.con.jsonl as a file), or one that
    ends as a log's file name does (quest.jsonl is a session of its own, not quest).
    Signs may stand side by side inside a name: '..' climbs out of a folder only as
    a whole path component, so v1..v2 (a range, as git writes one) and day_2__draft
    are names like any other, letters and digits with signs among them."""
    try:
        returned = lesson.check_session_id(good_id)
    except lesson.InvalidSessionId as error:
        refusal = str(error)
    else:
        refusal = None
    if refusal is not None:
        pytest.fail(f"check_session_id({good_id!r}) refused a plain name, one people "
                    f"use, saying: {refusal}", pytrace=False)
    assert returned == good_id, (
        f"check_session_id({good_id!r}) should return the id unchanged; it returned "
        f"{returned!r}, and a caller would name the session's file after that"
        + (f": the sessions {good_id!r} and {returned!r} would write into one log"
           if isinstance(returned, str) and returned != good_id else ""))


class FsyncRecorder:
    """Wraps os.fsync and os.fdatasync (either makes a line durable),
    remembering for each call whether it synced a folder or a file."""

    def __init__(self, monkeypatch):
        self.kinds = []
        self.sizes = []     # the file's size at each file sync
        self.folders = []   # (device, inode) of each folder synced
        self.entries = []   # the names each folder held when it was synced
        for name in ("fsync", "fdatasync"):
            monkeypatch.setattr(os, name, self.wrap(getattr(os, name)))

    def wrap(self, real):
        def sync(fd):
            if not isinstance(fd, int):
                pytest.fail(f"a sync was asked of {fd!r}, which is no open descriptor: "
                            "os.fsync takes the number os.open gave, of a file or a "
                            "folder that is still open", pytrace=False)
            info = os.fstat(fd)
            self.kinds.append("folder" if stat.S_ISDIR(info.st_mode) else "file")
            if not stat.S_ISDIR(info.st_mode):
                self.sizes.append(info.st_size)
            else:
                self.folders.append((info.st_dev, info.st_ino))
                self.entries.append(sorted(os.listdir(fd)))
            real(fd)
        return sync


def fail_syncs(monkeypatch, fails, ctrl_c=False, code=errno.EIO):
    """Make os.fsync and os.fdatasync raise EIO, or the error number `code` (or
    KeyboardInterrupt, the user's Ctrl-C, with `ctrl_c`) on each descriptor
    `fails(fd)` picks."""
    for name in ("fsync", "fdatasync"):
        def sync(fd, real=getattr(os, name)):
            if fails(fd):
                if ctrl_c:
                    raise KeyboardInterrupt
                raise OSError(code, f"{os.strerror(code)} (simulated)")
            return real(fd)
        monkeypatch.setattr(os, name, sync)


@pytest.mark.task("01.5")
@pytest.mark.task("01.4")
@pytest.mark.task("01.2")
def test_durable_mode_fsyncs_every_line_and_the_folder_of_a_new_log(
    lesson, sessions, monkeypatch
):
    """In durable mode every line is fsynced, and the folder once per open, before its
    first line (nothing in a log tells whether its name reached the disk), so an
    acknowledged message survives a power cut."""
    fsync = FsyncRecorder(monkeypatch)

    with lesson.SessionLog(sessions, "quest-1", durable=True) as log:
        for n in range(3):
            log.append({"role": "user", "content": f"message {n}"})
    assert fsync.kinds.count("file") == 3, (
        f"durable mode: one file fsync per line, got {fsync.kinds}"
    )
    raw = the_log(lesson, sessions).read_bytes()
    line_ends = [i + 1 for i, byte in enumerate(raw) if byte == ord("\n")]
    assert fsync.sizes == line_ends, (
        "each fsync should come after its line is written (it saves what is already "
        f"in the file): at the fsyncs the file held {fsync.sizes} bytes, its lines "
        f"end at {line_ends}")
    assert fsync.kinds.count("folder") == 1, (
        "a new log's name lives in its folder, and a power cut can lose it until that "
        "folder is synced: expected one folder sync when the log was created, got "
        f"{fsync.kinds}"
    )
    folder = sessions.stat()
    assert fsync.folders == [(folder.st_dev, folder.st_ino)], (
        "the folder synced was not the sessions folder, the one that holds the log's "
        "name (it may have been its parent)")
    if "quest-1.jsonl" not in fsync.entries[0]:
        fail_in("01.4", "durable mode synced the sessions folder when it held "
                f"{fsync.entries[0]}, before the new log's name was in it: a folder's "
                "sync saves the names it holds at that moment, so a power cut can "
                "still lose quest-1.jsonl and every line acknowledged in it. The log "
                "is made first, then its folder synced, before the first line")

    fsync.kinds.clear()
    with lesson.SessionLog(sessions, "quest-1", durable=True) as log:
        log.append({"role": "user", "content": "again"})
        log.append({"role": "user", "content": "and again"})
    assert fsync.kinds == ["folder", "file", "file"], (
        "a second durable writer of quest-1 appended two lines, with the syncs, in "
        f"order: {fsync.kinds}; expected the folder once, as it opened the log (its "
        "name may never have reached the disk: nothing in a log tells who wrote it, "
        "durably or not), then one sync per line")

    fsync.kinds.clear()
    with lesson.SessionLog(sessions, "quest-2", durable=True) as log:
        log.append({"role": "user", "content": "a second session"})
    assert fsync.kinds.count("folder") == 1, (
        "quest-2.jsonl is a new log in a folder whose sync saved quest-1.jsonl: its "
        "own name is a new entry there, and a power cut can lose it until the folder "
        f"is synced again; expected one folder sync, got {fsync.kinds}")


@pytest.mark.task("01.5")
@pytest.mark.task("01.4")
@pytest.mark.task("01.2")
def test_without_durable_mode_nothing_is_fsynced(lesson, sessions, monkeypatch):
    """Without durable mode nothing is fsynced, not a line, not a new log's name, not
    the name of a folder the first append creates: fsync costs milliseconds a call and
    is an opt-in."""
    fsync = FsyncRecorder(monkeypatch)

    with lesson.SessionLog(sessions / "new" / "deeper", "quest-1") as log:
        log.append({"role": "user", "content": "quick"})

    assert fsync.kinds == [], (
        "without durable mode, a first append made the sessions folder (and its "
        f"parent) and wrote a line, and it synced: {fsync.kinds}. fsync costs "
        "milliseconds: only durable mode should call it, for a line, a log's name or "
        "a new folder's name alike"
    )


@pytest.mark.task("01.5")
@pytest.mark.task("01.4")
@pytest.mark.task("01.2")
def test_durable_mode_is_asked_with_any_true_value(lesson, sessions, monkeypatch):
    """durable is a flag, read as Python reads one: a true value that is not True
    itself (1, as a setting read from a file or the environment comes) asks for
    durable mode, every sync of it, and 0 asks for none. A writer that tests `durable
    is True` takes durable=1 for no, and leaves every line it acknowledges to a
    power cut."""
    fsync = FsyncRecorder(monkeypatch)
    with lesson.SessionLog(sessions, "quest-1", durable=1) as log:
        log.append({"role": "user", "content": "durable, asked with the number 1"})
    assert fsync.kinds == ["folder", "file"], (
        "a writer made with durable=1 appended the first line of a new log, with the "
        f"syncs {fsync.kinds}, where ['folder', 'file'] was expected (the new log's "
        "name, then its line), as with durable=True: any true value asks for durable "
        "mode, as `if durable:` reads it, and a caller that passes 1 counts on every "
        "acknowledged line surviving a power cut")
    fsync.kinds.clear()
    with lesson.SessionLog(sessions, "quest-2", durable=0) as log:
        log.append({"role": "user", "content": "not durable, said with the number 0"})
    assert fsync.kinds == [], (
        f"a writer made with durable=0 appended a line and synced {fsync.kinds}: 0 "
        "is false, and without durable mode nothing is synced")


@pytest.mark.task("01.4")
@pytest.mark.parametrize("durable", [False, True], ids=["plain", "durable"])
def test_a_log_without_durable_mode_is_opened_without_a_sync_on_each_write(
        lesson, sessions, monkeypatch, durable):
    """Without durable mode nothing is synced, by a call to fsync or by the way the log
    is opened: a descriptor opened with O_SYNC or O_DSYNC makes every write wait for
    the disk, the milliseconds a line that only durable mode pays. In durable mode each
    line has its one fsync (task 01.5): opened that way as well, every line would wait
    for the disk twice."""
    import fcntl

    real_open, opened = os.open, []

    def noted_open(path, flags, *rest, **options):
        fd = real_open(path, flags, *rest, **options)
        opened.append(flags)
        return fd

    monkeypatch.setattr(os, "open", noted_open)
    mode = "with durable mode" if durable else "without durable mode"
    try:
        with lesson.SessionLog(sessions, "quest-1", durable=durable) as log:
            log.append({"role": "user", "content": "quick"})
            if isinstance(log._fd, int):
                opened.append(fcntl.fcntl(log._fd, fcntl.F_GETFL))
    except NotImplementedError:
        raise
    except Exception as error:      # noqa: BLE001 - reported in words
        pytest.fail(f"the first append of a new session's log, {mode}, raised "
                    f"{described(error)}: the log is opened to append to it, created "
                    "if need be", pytrace=False)
    finally:
        monkeypatch.undo()
    synced = sorted({name for flags in opened for name in ("O_SYNC", "O_DSYNC")
                     if flags & getattr(os, name) == getattr(os, name)})
    assert not synced, (
        f"the log of a writer {mode} was opened with {synced}: every write then "
        "waits for the disk, as an fsync does, and costs milliseconds a line; only "
        "durable mode syncs, and it does so with one fsync a line"
        + (", which a descriptor opened that way makes two" if durable else ""))


@pytest.mark.task("01.5")
def test_a_stopped_writer_appends_nothing_more(lesson, sessions):
    """A writer whose flag in_doubt is set (a write of it failed after its bytes may
    have gone out) writes nothing more: each later append raises WriterStopped, the
    second retry as the first, and after the writer's descriptor is closed and opened
    again too (only a new SessionLog writes again); the log stays as it was. append
    hands its line to _write, which keeps that guard."""
    log = lesson.SessionLog(sessions, "quest-1")
    handed, outcomes = [], []   # what append handed _write; what each _write raised
    flags = []                  # the writer's in_doubt as each _write began
    write = log._write

    def noted_write(data):
        handed.append(data)
        flags.append(log.in_doubt)
        try:
            write(data)
        except BaseException as error:
            outcomes.append(type(error).__name__)
            raise
        outcomes.append(None)
    log._write = noted_write
    stopped, tries, reopened, other, open_refused = None, [], None, None, None
    try:
        log.append({"role": "user", "content": "first"})
        before = log.path.read_bytes()
        log.in_doubt = True     # as a write that failed after its bytes went out does
        try:
            log.append({"role": "user", "content": "second"})
        except lesson.WriterStopped as error:
            stopped = error
        except Exception as error:      # noqa: BLE001 - reported in words below
            if "WriterStopped" not in outcomes:
                raise
            other = error
        for reopen in (False, True):
            if stopped is None:
                break
            if reopen:
                log.close()
                held = log.in_doubt
                try:
                    log._open()
                except Exception as error:      # noqa: BLE001 - reported in words below
                    open_refused = error
                    break
                reopened = log.in_doubt or not held     # False: _open cleared it
            try:
                log.append({"role": "user", "content": "second"})
            except lesson.WriterStopped:
                tries.append("refused")
            else:
                tries.append("written")
    finally:
        log.close()
    after = log.path.read_bytes()
    if not handed:
        fail_in("01.2", "append wrote its line without handing it to _write (task "
                "01.5), the one place that keeps a writer in doubt from writing again: "
                "after a write that may have landed, a retry through append writes the "
                "message twice")
    if other is not None:
        fail_in("01.2", "the writer was stopped (in_doubt set), and the next append "
                f"raised {described(other)}: _write raised WriterStopped, and append "
                "made it an error of another kind. A stopped writer's WriterStopped "
                "reaches append's caller as it is, the one error that tells it to open "
                "the session again (a caller that catches another, InvalidMessage say, "
                "takes a good message for a bad one)")
    if stopped is None and "WriterStopped" in outcomes:
        fail_in("01.2", "the writer was stopped (in_doubt set), and the next append "
                "returned: _write raised WriterStopped, and append went on past it "
                f"(its _write calls raised {outcomes[1:]}), and the log grew by "
                f"{len(after) - len(before)} bytes. A stopped writer's error reaches "
                "append's caller: only a new SessionLog, whose owner reads the log "
                "again, writes again")
    if stopped is None and flags[1:2] == [False]:
        fail_in("01.2", "the writer was stopped (in_doubt set), and the next append "
                "cleared its flag in_doubt before it handed its line to _write, which "
                f"then wrote it: the log grew by {len(after) - len(before)} bytes. The "
                "flag says a write of this writer may have landed; append leaves it "
                "as it is, so that _write refuses (only a new SessionLog writes again)")
    if stopped is None:
        fail_in("01.5", "the writer was stopped (in_doubt set), and the next append "
                f"returned, and the log grew by {len(after) - len(before)} bytes, "
                "where WriterStopped and no byte more were expected")
    if open_refused is not None:
        fail_in("01.4", "the writer was stopped (in_doubt set) and closed, and opening "
                f"its log again (_open) raised {described(open_refused)}. Opening is "
                "no write: a stopped writer opens its log like any other, keeps its "
                "flag, and its writes stay refused (_write, task 01.5)")
    if reopened is False:
        fail_in("01.4", "the writer was stopped (in_doubt set), and opening its log "
                "again (_open, after close) cleared its flag in_doubt: the same writer "
                "then writes again, and the message whose write was in doubt may go "
                "in twice. Only a new SessionLog starts without doubt")
    if tries != ["refused", "refused"]:
        fail_in("01.5", "the writer was stopped (in_doubt set), and its first append "
                "raised WriterStopped; then a second retry, and one after its log was "
                f"closed and opened again, gave {tries} where WriterStopped each time "
                "was expected: a stopped writer stays stopped (its flag too), only a "
                "new SessionLog writes again")
    if after != before:
        fail_in("01.5", "the writer was stopped (in_doubt set), and its appends raised "
                f"WriterStopped, yet the log grew by {len(after) - len(before)} bytes, "
                "where no byte more was expected")


@pytest.mark.task("01.5")
def test_after_a_write_whose_outcome_is_unknown_the_writer_refuses_to_go_on(lesson,
                                                                           sessions):
    """Ctrl-C just after write() returned: append raised, yet its line is in the file.
    The caller's retry must be refused (WriterStopped), never write the message twice; a
    new SessionLog on the same session goes on."""
    big = {"role": "user",
           "content": "The elder's chronicle. " * 400_000 + "The end."}  # 9.2 MB
    for attempt in range(5):
        log = lesson.SessionLog(sessions, f"quest-{attempt}")
        log.append({"role": "user", "content": "first"})
        if append_interrupted_after_the_write(log, big):
            break
        log.close()
    else:
        pytest.skip("the timer never fired while the line was written (five tries)")
    the_retry_is_refused(lesson, log, big, "append raised after the line had landed "
                         "(Ctrl-C just after the write)")
    with lesson.SessionLog(sessions, log.id) as again:
        again.append({"role": "assistant", "content": "then"})
    assert [m["content"] for m in lines_of(log.path)][-1] == "then", (
        "a new SessionLog on the session should write again")


@pytest.mark.task("01.5")
@pytest.mark.task("01.2")
def test_a_write_refused_as_a_whole_leaves_the_writer_usable(lesson, sessions):
    """A write() that raises wrote nothing (here EFBIG: the file is at its size limit,
    set in a child process), so a retry is safe: the writer must not stop for it."""
    path = sessions / "quest-1.jsonl"

    def work():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        with lesson.SessionLog(sessions, "quest-1") as log:
            log.append({"role": "user", "content": "first"})
            size = path.stat().st_size
            resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))
            try:
                log.append({"role": "user", "content": "too much"})
                return "the write did not fail"
            except OSError:
                pass
            resource.setrlimit(resource.RLIMIT_FSIZE,
                               (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
            try:
                log.append({"role": "user", "content": "again"})
            except Exception as error:      # noqa: BLE001 - reported to the test
                return f"{type(error).__name__}: {error}"
        return "ok"

    outcome = unless_unfinished(in_child(work))
    assert outcome == "ok", (
        "write() raised OSError (EFBIG) and wrote nothing, so a retry is safe; the "
        f"next append should have worked, but got: {outcome}")
    contents = [m["content"] for m in lines_of(path)]
    assert contents == ["first", "again"], (
        "the refused line should have left no trace and the retry be written once: "
        f"the log holds {contents}")


@pytest.mark.task("01.5")
def test_a_write_the_system_refuses_keeps_its_error_number(lesson, sessions):
    """A write() the system refuses whole (here EFBIG: the file is at its size limit,
    set in a child process) reaches the caller as the system's own error, its error
    number kept: it is what tells a full disk or a file at its limit, where making room
    helps, from any other failure."""
    def work():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        log = lesson.SessionLog(sessions, "quest-1")
        try:
            log._open()
            log._write(b'{"role": "user", "content": "first"}\n')
            limit = os.fstat(log._fd).st_size
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
            try:
                log._write(b'{"role": "user", "content": "too much"}\n')
            except OSError as error:
                return [type(error).__name__, error.errno, str(error)]
            return None
        finally:
            log.close()

    outcome = unless_unfinished(in_child(work))
    if isinstance(outcome, dict):
        pytest.fail("the log was opened and its first line handed to _write, with no "
                    f"limit yet, and this raised {outcome.get('raised')}: "
                    f"{outcome.get('message')}", pytrace=False)
    assert outcome is not None, (
        "the file was at its size limit, and _write returned as if its line were "
        "written: a write the system refuses raises")
    assert outcome[1] == errno.EFBIG, (
        "the file was at its size limit, and write() refused the line whole with "
        f"EFBIG; _write raised {outcome[0]} whose error number is {outcome[1]} "
        f"({outcome[2]}): the system's own error, its number kept, is what lets the "
        "caller tell a full disk or a file at its limit, where making room helps, "
        "from any other failure")


@pytest.mark.task("01.5")
@pytest.mark.task("01.4")
def test_lines_another_writer_added_between_two_writes_stop_nothing(lesson, sessions):
    """Another writer may append to the same log between two lines of this one (a
    second SessionLog, another process): the file then grew by more than this writer
    wrote, and that is no short write. Each line of each writer is whole, and neither
    writer stops."""
    first = lesson.SessionLog(sessions, "quest-1")
    second = lesson.SessionLog(sessions, "quest-1")
    lines = [(first, b'{"role": "user", "content": "first writer, line 1"}\n'),
             (second, b'{"role": "user", "content": "second writer, line 1"}\n'),
             (first, b'{"role": "user", "content": "first writer, line 2"}\n'),
             (first, b'{"role": "user", "content": "first writer, line 3"}\n')]
    try:
        for number, (log, data) in enumerate(lines, start=1):
            if log._fd is None:
                log._open()
            try:
                log._write(data)
            except NotImplementedError:
                raise
            except Exception as error:      # noqa: BLE001 - reported in words below
                fail_in("01.5", f"two writers were open on the session at once; line "
                        f"{number} of the four, {data!r}, handed whole to _write, "
                        f"raised {described(error)}: another writer's lines, added "
                        "since, are no short write of this one (os.write said how many "
                        "bytes it wrote), and no reason to stop")
    finally:
        first.close()
        second.close()
    assert the_log(lesson, sessions).read_bytes() == b"".join(d for _, d in lines), (
        "two writers were open on the session at once and wrote in turn; the log "
        f"holds {the_log(lesson, sessions).read_bytes()!r}")


@pytest.mark.task("01.5")
@pytest.mark.task("01.2")
def test_a_short_write_raises_instead_of_passing_for_saved(lesson, sessions):
    """When the disk takes only part of a line, append() raises instead of returning,
    with an error that names the log the line was cut short in, by its path."""
    line = {"role": "user", "content": "x" * 2000}

    def append_to_a_nearly_full_disk():
        with lesson.SessionLog(sessions, "quest-1") as log:
            log.append(line)

    kind, message, _ = with_file_size_limit(1000, append_to_a_nearly_full_disk)
    if kind == "NotImplementedError":
        raise NotImplementedError(message)

    path = sessions / "quest-1.jsonl"
    written = path.stat().st_size if path.exists() else 0
    assert kind != "ok", (
        f"the disk took only {written} bytes of a line of about 2000 (os.write "
        "returned less than it was given) and append() returned as if the message "
        "were saved, where OSError was expected")
    the_log(lesson, sessions)      # the log is named after the id, or 01.1 is told
    assert names_path(message, path), (
        f"the disk took only {written} bytes of a line of about 2000, and append() "
        f"raised {kind}: {message!r}, which does not name the log by its path: the "
        f"caller should read which file ({path}) now ends in part of a line, so that "
        "it can open that session again (a server keeps a quest-1.jsonl in each of "
        "its sessions folders, and a file name alone does not say which)")


@pytest.mark.task("01.3")
def test_a_refused_message_leaves_memory_matching_the_log(lesson, sessions, model,
                                                          town):
    """A message the log refuses (a user's text holding a lone surrogate, as a terminal
    gives for bytes that are not UTF-8) makes run() raise the append's error, and
    memory holds nothing the log lacks: the next request carries what the log holds."""
    text = "Buy a rope \udce9"     # Python's surrogateescape of the byte 0xE9
    with lesson.SessionLog(sessions, "probe") as log:
        try:
            log.append({"role": "user", "content": text})
        except lesson.InvalidMessage:
            pass
        except NotImplementedError:
            raise
        except Exception as error:      # noqa: BLE001 - reported in words below
            fail_in("01.2", f"append of a user message whose text, {text!r}, holds a "
                    f"lone surrogate raised {described(error)}, where it should raise "
                    "InvalidMessage: no log may hold it (UTF-8 cannot encode it)")
        else:
            fail_in("01.2", f"append took a user message whose text, {text!r}, holds "
                    "a lone surrogate, where it should raise InvalidMessage: no log "
                    "may hold it (UTF-8 cannot encode it)")
    model.add(say("Bought."))
    with lesson.SessionLog(sessions, "quest-1") as log:
        agent = lesson.Agent(model.client(), model=model.model, tools=town,
                             session=log)
        try:
            agent.run(text)
        except lesson.InvalidMessage:
            pass
        except NotImplementedError:
            raise
        except Exception as error:      # noqa: BLE001 - reported in words below
            pytest.fail(f"the user's text {text!r} holds a lone surrogate, which no "
                        f"log may hold; run() raised {described(error)}, where it "
                        "should raise the InvalidMessage the log's append gives",
                        pytrace=False)
        else:
            pytest.fail(f"the user's text {text!r} holds a lone surrogate, which no "
                        "log may hold, and run() went on without raising: the "
                        "append's InvalidMessage should reach the caller",
                        pytrace=False)
    path = sessions / "quest-1.jsonl"
    held = [json.loads(line) for line in path.read_bytes().splitlines()] if (
        path.exists()) else []
    assert agent.messages == held, (
        f"the user's text {text!r} was refused by the log (InvalidMessage), which "
        f"holds {held!r}; the agent's memory holds {agent.messages!r}. Memory holds "
        "nothing the log lacks, whatever the append raised (not only an OSError): "
        "the caller may go on with this agent, and its next request would carry a "
        "message that was never saved")


@pytest.mark.task("01.3")
def test_a_message_that_is_no_object_is_refused_by_the_log_as_it_came(
        lesson, sessions, model, town):
    """record() hands the log the message as the caller gave it: one that is no JSON
    object (None, or key and value pairs a caller read from a form) is the log's to
    refuse, with its InvalidMessage, and memory stays as the log, without it. A record
    that makes a dict of it first writes a line the caller never gave, or raises an
    error of its own."""
    pairs = [["role", "user"], ["content", "Hello."]]
    given = [(None, "None"), (pairs, f"the pairs {pairs}")]
    with lesson.SessionLog(sessions, "probe") as probe:     # the log's own verdict
        for message, what in given:
            try:
                probe.append(message)
            except lesson.InvalidMessage:
                continue
            except NotImplementedError:
                raise
            except Exception as error:      # noqa: BLE001 - reported in words
                fail_in("01.2", f"append was handed {what}, which is no message (no "
                        f"JSON object), and raised {described(error)}, where "
                        "InvalidMessage was expected: the given check_message refuses "
                        "it, and append hands it the message as it came")
            fail_in("01.2", f"append was handed {what}, which is no message (no JSON "
                    "object), and wrote it: the given check_message refuses it, and "
                    "append hands it the message as it came, never a dict made of it")
    agent, log = agent_on(lesson, model, town, sessions)
    with log:
        for message, what in given:
            try:
                agent.record(message)
            except lesson.InvalidMessage:
                continue
            except NotImplementedError:
                raise
            except Exception as error:      # noqa: BLE001 - reported in words
                pytest.fail(f"record() was handed {what}, which is no message (no "
                            f"JSON object), and raised {described(error)}, where the "
                            "log's InvalidMessage should reach the caller as it is",
                            pytrace=False)
            pytest.fail(f"record() was handed {what}, which is no message (no JSON "
                        "object), and took it: the log holds "
                        f"{lines_of(sessions / 'quest-1.jsonl')} and memory "
                        f"{agent.messages}, where the log's InvalidMessage and no "
                        "change to either were expected", pytrace=False)
    assert agent.messages == [] and lines_of(sessions / "quest-1.jsonl") == [], (
        "record() was handed two things that are no message, and the log refused "
        f"them; memory holds {agent.messages} and the log "
        f"{lines_of(sessions / 'quest-1.jsonl')}, where both should be empty")


@pytest.mark.task("01.3")
def test_a_ctrl_c_before_a_message_is_saved_leaves_it_out_of_memory(
    lesson, sessions, model, town, monkeypatch
):
    """Ctrl-C comes as the log is opened for the user's first message, before a byte
    of it is written: run() raises KeyboardInterrupt, and memory holds nothing the log
    lacks. A program that catches Ctrl-C at its prompt goes on with the same agent, and
    its next request carries exactly what the log holds."""
    model.add(say("Hello."))
    agent, log = agent_on(lesson, model, town, sessions)
    path = sessions / "quest-1.jsonl"
    real_open, interrupted = os.open, []

    def open_interrupted_once(file, *args, **kwargs):
        if not interrupted and os.fspath(file) == str(path):
            interrupted.append(file)
            raise KeyboardInterrupt
        return real_open(file, *args, **kwargs)
    with log:
        # A context of its own: leaving it takes the Ctrl-C away, and only it.
        with monkeypatch.context() as interrupting:
            interrupting.setattr(os, "open", open_interrupted_once)
            try:
                agent.run("Hello?")
            except KeyboardInterrupt:
                pass
            except NotImplementedError:
                raise
            except Exception as error:      # noqa: BLE001 - reported in words below
                pytest.fail(f"Ctrl-C (KeyboardInterrupt) came as the log was opened, "
                            f"and run() raised {described(error)}: let it reach the "
                            "caller as it is", pytrace=False)
        if not interrupted:
            return      # the log was not opened with os.open: no such moment to play
        held = lines_of(path)
        assert agent.messages == held, (
            "Ctrl-C came as the log was opened for the user's message, before any of "
            f"it was written: the log holds {held}, and the agent's memory holds "
            f"{agent.messages}. Memory holds nothing the log lacks, whatever the "
            "append raised (KeyboardInterrupt is no Exception): the caller may go on "
            "with this agent, and its next request would carry a message never saved")
        agent.run("Are you there?")
    sent = model.requests[-1]["messages"]
    assert sent == lines_of(path)[:len(sent)], (
        "after the Ctrl-C the same agent ran again: its request should carry what the "
        f"log holds, and it carried {sent}")


@pytest.mark.task("01.5")
@pytest.mark.task("01.3")
def test_a_failed_write_leaves_memory_matching_the_log(lesson, sessions, model, town):
    """When a write fails mid-run, run() raises; memory holds nothing the log lacks."""
    model.add(use(call("buy", item="rope")), say("Bought."))

    def run_with_a_nearly_full_disk():
        log = lesson.SessionLog(sessions, "quest-1")
        failed = []         # what each append that failed raised, in order
        writes = []         # what each _write of an append that failed raised
        append, write = log.append, log._write

        def noted_write(data):
            try:
                write(data)
            except BaseException as error:
                writes.append(type(error).__name__)
                raise
            writes.append(None)

        def noted_append(message):
            writes.clear()
            try:
                append(message)
            except Exception as error:
                failed.append([type(error).__name__, isinstance(error, OSError),
                               list(writes)])
                raise
        log.append = noted_append
        log._write = noted_write
        agent = lesson.Agent(model.client(), model=model.model, tools=town, session=log)
        try:
            agent.run("Buy a rope.")
        except Exception as error:
            return {"raised": type(error).__name__, "why": str(error)[:300],
                    "os": isinstance(error, OSError), "memory": agent.messages,
                    "failed": failed}
        return {"raised": None, "memory": agent.messages, "failed": failed}

    # 60 bytes: room for the user's line, not for the model's reply after it.
    kind, message, outcome = with_file_size_limit(60, run_with_a_nearly_full_disk)
    if kind == "NotImplementedError":
        raise NotImplementedError(message)
    assert kind == "ok", f"the test's own run failed: {kind}: {message}"
    raised = outcome["raised"]
    if raised == "NotImplementedError":
        raise NotImplementedError(outcome["why"])

    path = sessions / "quest-1.jsonl"
    raw = path.read_bytes() if path.exists() else b""
    whole = []
    for number, line in enumerate(raw.split(b"\n")[:-1], start=1):  # whole lines only
        try:
            whole.append(json.loads(line))
        except ValueError:
            pytest.fail(f"line {number} of the log is not a JSON object on its own: "
                        f"{line[:80]!r}. Each message should be one whole line, ended "
                        "by a newline", pytrace=False)
    first = outcome["failed"][0] if outcome["failed"] else None
    if first and first[2][:1] not in ([], [None]) and len(first[2]) > 1:
        fail_in("01.2", "the disk was full: the log's _write raised "
                f"{first[2][0]} for the model's reply, and append called _write again "
                f"for the same line ({len(first[2])} calls in all, raising "
                f"{first[2]}). A write that failed may have left part of its line in "
                "the file, and its retry writes the message twice: append lets the "
                "error reach its caller")
    if first and first[1] and not outcome["os"]:
        fail_in("01.3", f"the disk was full: the log's append raised {first[0]} for "
                "the model's reply, and that error never reached the caller of run(), "
                + (f"which raised {raised} later" if raised else "which returned")
                + ": Agent.record caught it and went on. The caller needs that error "
                "(to free space, to stop), and the turn must not go on past a message "
                "that was not saved")
    if raised == "WriterStopped" and outcome["memory"] == whole:
        fail_in("01.5", "the disk was full and took only part of the model's reply; "
                f"run() raised WriterStopped ({outcome['why']}) where the OSError of a "
                "full disk was expected: a short write raises OSError, and the writer "
                "refuses the writes after it")
    assert outcome["memory"] == whole, (
        "after a failed write, memory should hold exactly what the log holds, so "
        "that the next request never carries a message the log lacks; memory has "
        f"{len(outcome['memory'])} message(s), the log {len(whole)}")
    assert raised is not None, (
        "the disk was full, so the model's reply could not be saved, yet run() went "
        f"on and returned; the log holds {len(whole)} whole message(s); the OSError "
        "should have reached the caller of run()")
    assert outcome["os"], (
        f"run() should raise OSError on a full disk; it raised {raised}: "
        f"{outcome['why']}")


def descriptor_of(path):
    """The number of this process's descriptor that leads to `path`, or None."""
    fds = "/proc/self/fd"
    for fd in os.listdir(fds) if os.path.isdir(fds) else []:
        try:
            if os.readlink(os.path.join(fds, fd)) == str(path):
                return int(fd)
        except OSError:
            pass        # closed since it was listed (the listing's own descriptor)
    return None


@pytest.mark.task("01.2")
def test_appending_many_lines_holds_one_descriptor(lesson, sessions):
    """A log opens its file once, however many lines it appends; close() lets it go.
    So it does in a service started with its standard input closed, where the log's
    descriptor is 0."""
    before = open_descriptors()
    with lesson.SessionLog(sessions, "quest-1") as log:
        for n in range(20):
            log.append({"role": "user", "content": f"message {n}"})
        during = open_descriptors() - before
    after = open_descriptors() - before

    assert during <= 1, (
        f"after 20 appends the log holds {during} open descriptors, where one was "
        "expected: a long session would run out of them")
    assert during == 1, (
        "after 20 appends the log holds no descriptor: a log opens its file once, on "
        "its first append, and keeps it until close(), rather than opening it again "
        "(a path looked up, a file opened and closed) for every line")
    assert after == 0, f"close() should release the log's descriptor; {after} are open"

    def with_standard_input_closed():
        os.close(0)
        first = open_descriptors()
        with lesson.SessionLog(sessions, "quest-2") as log:
            log.append({"role": "user", "content": "message 0"})
            descriptor = descriptor_of(sessions / "quest-2.jsonl")
            for n in range(1, 20):
                log.append({"role": "user", "content": f"message {n}"})
            return {"descriptor": descriptor, "during": open_descriptors() - first}
    child = in_child(with_standard_input_closed)
    if "raised" in child:
        pytest.fail(f"with standard input closed, append raised {child['raised']}: "
                    f"{child['message']}", pytrace=False)
    assert child["during"] <= 1, (
        "in a process whose standard input is closed, the log's first append opened "
        f"descriptor {child['descriptor']}, and after 20 appends it holds "
        f"{child['during']} open "
        "descriptors, where one was expected: a check that takes descriptor 0 for "
        "'not open yet' opens the log again on every append")


@pytest.mark.task("01.4")
def test_durable_logs_leak_no_descriptors(lesson, sessions):
    """Creating durable logs, which fsyncs their folder, leaves no descriptor open."""
    for n in range(5):
        with lesson.SessionLog(sessions, f"quest-{n}", durable=True) as log:
            log.append({"role": "user", "content": "hello"})
    # Counted on the sessions folder and the files in it alone: what another test left
    # open elsewhere in this process is no leak of these logs.
    fds = "/proc/self/fd"
    if not os.path.isdir(fds):
        pytest.skip("no /proc/self/fd to see where each descriptor leads")
    targets = []
    for fd in os.listdir(fds):
        try:
            targets.append(os.readlink(os.path.join(fds, fd)))
        except OSError:
            pass        # closed since it was listed (the listing's own descriptor)
    leaked = sum(target == str(sessions) or target.startswith(f"{sessions}{os.sep}")
                 for target in targets)

    assert leaked == 0, (
        f"after creating 5 durable logs and closing them, {leaked} descriptors are "
        "still open: a server that makes many sessions would run out of them")


@pytest.mark.task("01.1")
@pytest.mark.parametrize("not_text", [None, 7, b"quest-1", ["quest-1"],
                                      {"id": "quest-1"}], ids=repr)
def test_a_session_id_that_is_not_a_string_is_refused(lesson, not_text):
    """An id that is not a str is refused with InvalidSessionId, like any bad id, and
    its refusal, like any other, quotes it, as Python shows it (the number 7 never as
    the text '7'), and states the rule."""
    try:
        lesson.check_session_id(not_text)
    except lesson.InvalidSessionId as error:
        said = str(error)
        missing = [kind for kind, ways in RULE.items()
                   if not any(way in said.replace(repr(not_text), "").lower()
                              for way in ways)]
        assert repr(not_text) in said and not missing, (
            f"check_session_id({not_text!r}) refused an id that is not a string, "
            f"saying: {said!r}. Its refusal, like any other, should quote the id as "
            f"Python shows it ({not_text!r}) and state the rule, all of it, so that "
            "the caller sees what was passed and what an id is"
            + (f" (it names no {', no '.join(missing)})" if missing else ""))
        posing = repr(str(not_text))
        try:    # the rule's own words (its examples may hold '7') are no quote of it
            lesson.check_session_id("../quest-1")
            rule = ""
        except lesson.InvalidSessionId as other:
            rule = str(other)
        assert posing not in said or posing in rule, (
            f"check_session_id({not_text!r}) refused an id that is not a string, "
            f"saying: {said!r}. It quotes the id as the text {posing}, as if the "
            f"caller had passed the string {str(not_text)!r}: its trouble, that it is "
            f"a {type(not_text).__name__} and no text, does not show. Quote it as "
            f"Python shows it: {not_text!r}")
        return
    except NotImplementedError:
        raise
    except Exception as error:
        pytest.fail(f"check_session_id({not_text!r}) raised {type(error).__name__} "
                    f"({error}) where InvalidSessionId was expected: a caller catching "
                    "InvalidSessionId would miss it")
    pytest.fail(f"check_session_id({not_text!r}) accepted an id that is not a string")


@pytest.mark.task("01.5")
@pytest.mark.task("01.2")
def test_a_failed_append_and_its_retry_leak_no_descriptor(lesson, sessions):
    """Failed appends (a full disk), retried, then close(), leave no descriptor open."""
    def fail_twice_then_close():
        before = open_descriptors()
        log = lesson.SessionLog(sessions, "quest-1")
        failures = 0
        for _ in range(2):      # the caller retries once
            try:
                log.append({"role": "user", "content": "Is anyone there?"})
            except OSError:
                failures += 1
        log.close()
        return {"failures": failures, "leaked": open_descriptors() - before}

    # A limit of 0 bytes: every write to the log fails with EFBIG.
    kind, message, outcome = with_file_size_limit(0, fail_twice_then_close)
    if kind == "NotImplementedError":
        raise NotImplementedError(message)

    stopped = ("; WriterStopped says a write may have landed, where a write the disk "
               "refused (EFBIG) wrote nothing: that writer is not stopped"
               if kind == "WriterStopped" else "")
    assert kind == "ok", (
        "on a full disk, an append and then the caller's retry should each raise the "
        f"disk's OSError; one of them raised {kind}: {message}{stopped}")
    assert outcome["failures"] == 2, (
        f"the disk was full, yet {2 - outcome['failures']} of 2 appends returned as if "
        "saved")
    assert outcome["leaked"] == 0, (
        f"after two failed appends and close(), {outcome['leaked']} descriptor(s) are "
        "still open: each failed append seems to leave one behind that close() does "
        "not release, so a writer that retries runs out of descriptors")


@pytest.mark.task("01.2")
def test_a_stopped_writers_refused_retries_leak_no_descriptor(lesson, sessions,
                                                              monkeypatch):
    """A writer stopped by an fsync that failed (EIO) refuses every retry with
    WriterStopped; the refused retries, then close(), leave no descriptor open."""
    before = open_descriptors()
    log = lesson.SessionLog(sessions, "quest-1", durable=True)
    fail_syncs(monkeypatch, lambda fd: stat.S_ISREG(os.fstat(fd).st_mode))
    refusals = []
    for _ in range(4):      # the first append fails, the caller retries three times
        try:
            log.append({"role": "user", "content": "Is anyone there?"})
        except NotImplementedError:
            raise
        except Exception as error:      # noqa: BLE001 - which one is tested elsewhere
            refusals.append(type(error).__name__)
    monkeypatch.undo()
    log.close()
    leaked = open_descriptors() - before
    assert leaked == 0, (
        f"after an append whose fsync failed, three retries of it and close(), "
        f"{leaked} descriptor(s) are still open (the four appends raised "
        f"{refusals}): a refused retry should not open the log again, or a server "
        "whose caller retries runs out of descriptors")


def take_the_log_away(path, done_to_it):
    """What a person does to the log while its writer holds it open: removes it, or
    saves another (empty) file over it, as an editor does. Returns what has the log's
    name after it (None: nothing)."""
    if done_to_it == "removed":
        path.unlink()
    else:
        mended = path.with_name("mended.jsonl")
        mended.write_bytes(b"")
        os.replace(mended, path)
    return path.read_bytes() if path.exists() else None


@pytest.mark.task("01.2")
@pytest.mark.parametrize("durable", [False, True], ids=["plain", "durable"])
@pytest.mark.parametrize("done_to_it", ["removed", "saved over"])
def test_a_writer_whose_log_was_removed_under_it_stays_refused(lesson, sessions,
                                                               done_to_it, durable):
    """A person removes the log while its writer holds it open, or saves another file
    over it. The writer's next append is refused (the check given in `_write`), and so
    is the caller's retry: the writer never takes up of its own accord the file that
    has the log's name since, which holds none of the conversation's start. So it is
    in durable mode too: a line synced is no reason to let go of the log."""
    path = sessions / "quest-1.jsonl"
    log = lesson.SessionLog(sessions, "quest-1", durable=durable)
    try:
        log.append({"role": "user", "content": "Hello?"})
        the_log(lesson, sessions)       # there, or the test fails saying why
        there = take_the_log_away(path, done_to_it)
        for attempt in ("the next append", "the caller's retry of it"):
            try:
                log.append({"role": "user", "content": "Are you there?"})
            except NotImplementedError:
                raise
            except (OSError, lesson.WriterStopped):
                continue
            now = path.read_bytes() if path.exists() else None
            mode = "a durable writer" if durable else "its writer"
            pytest.fail(f"the log was {done_to_it} while {mode} held it open; "
                        f"{attempt} returned as if its message were saved, and the "
                        f"file at the log's name now holds {now!r} (it held "
                        f"{there!r}). A writer whose log lost its name should refuse "
                        "every append "
                        "(an OSError naming the log), not take up whatever has that "
                        "name since: that file lacks the conversation's start",
                        pytrace=False)
    finally:
        log.close()
    now = path.read_bytes() if path.exists() else None
    assert now == there, (
        f"the log was {done_to_it} while its writer held it open, and its appends were "
        f"refused; what has the log's name should stay as it was, {there!r}, and it "
        f"is {now!r}")


@pytest.mark.task("01.5")
@pytest.mark.task("01.2")
@pytest.mark.parametrize("durable", [False, True], ids=["plain", "durable"])
def test_a_log_renamed_under_its_writer_takes_its_next_lines(lesson, sessions,
                                                              durable):
    """A person renames the log while its writer holds it open (mv quest-1.jsonl
    quest-1.old.jsonl, to keep it aside). The file still has a name, so what the
    writer adds can still be found: its next append goes on into the renamed file,
    as the one before it did, and nothing is made at the old name. Only a log that
    no name reaches any more is refused."""
    path = sessions / "quest-1.jsonl"
    renamed = sessions / "quest-1.old.jsonl"
    log = lesson.SessionLog(sessions, "quest-1", durable=durable)
    try:
        log.append({"role": "user", "content": "Hello?"})
        the_log(lesson, sessions)       # there, or the test fails saying why
        os.rename(path, renamed)
        try:
            log.append({"role": "user", "content": "Are you there?"})
        except NotImplementedError:
            raise
        except Exception as error:      # noqa: BLE001 - reported in words below
            pytest.fail(f"the log was renamed to {renamed.name} while its writer held "
                        f"it open, and the writer's next append raised "
                        f"{described(error)}: a renamed log still has a name, and "
                        "what its writer adds there can be found, so the writer goes "
                        "on writing to it (only a log that no name reaches any more "
                        "takes no line)", pytrace=False)
    finally:
        log.close()
    contents = [m["content"] for m in lines_of(renamed)]
    assert contents == ["Hello?", "Are you there?"] and not path.exists(), (
        f"the log was renamed to {renamed.name} while its writer held it open, and "
        f"the writer appended again: {renamed.name} holds {contents}, and the old "
        f"name {'holds a file' if path.exists() else 'holds nothing'}, where the "
        "renamed log was expected to hold both lines and the old name nothing: the "
        "writer writes to the file it holds, which the rename only gave another name")


@pytest.mark.task("01.5")
@pytest.mark.task("01.2")
def test_a_stopped_writer_keeps_its_log_through_its_refusals(lesson, sessions):
    """A stopped writer (in_doubt set) refuses, and a refusal changes nothing: it
    neither lets go of the file it holds nor opens another by the log's name. So when
    a person removes the log after a refused append, the writer's next retry is
    refused too, and no new, empty log appears under the name: the session's files are
    as the person left them."""
    path = sessions / "quest-1.jsonl"
    log = lesson.SessionLog(sessions, "quest-1")
    outcomes = []
    try:
        log.append({"role": "user", "content": "first"})
        log.in_doubt = True     # as a write that failed after its bytes went out does
        for removed in (False, True):
            if removed and path.exists():
                path.unlink()
            try:
                log.append({"role": "user", "content": "second"})
            except NotImplementedError:
                raise
            except (OSError, lesson.WriterStopped) as error:
                outcomes.append(type(error).__name__)
            else:
                outcomes.append("returned")
    finally:
        log.close()
    assert outcomes[0] == "WriterStopped", (
        "the writer was stopped (in_doubt set), and its next append gave "
        f"{outcomes[0]} where WriterStopped was expected: a write of it may have "
        "landed, so it refuses every later write until the session is opened again")
    assert outcomes[1] != "returned" and not path.exists(), (
        "the writer was stopped (in_doubt set) and refused an append; then the log was "
        f"removed, and the writer's retry gave {outcomes[1]}, and the log's name now "
        f"holds {path.read_bytes() if path.exists() else 'nothing'!r}, where nothing "
        "was expected: a stopped writer's refusal keeps the file it holds (which has "
        "no name now, so the retry is refused), and never opens or makes a log by the "
        "name, which would bring back a log without the conversation's start")


@pytest.mark.task("01.5")
@pytest.mark.task("01.2")
def test_a_stopped_writer_closed_then_appended_to_stays_stopped(lesson, sessions):
    """A stopped writer (in_doubt set) that its caller closes is stopped still: close()
    lets go of the descriptor, not of the doubt. Its next append raises WriterStopped,
    as every write of it does until the session is opened again with a new
    SessionLog, and writes nothing."""
    path = sessions / "quest-1.jsonl"
    log = lesson.SessionLog(sessions, "quest-1")
    try:
        log.append({"role": "user", "content": "first"})
        before = path.read_bytes()
        log.in_doubt = True     # as a write that failed after its bytes went out does
        log.close()
        try:
            log.append({"role": "user", "content": "second"})
        except lesson.WriterStopped:
            outcome = None
        except NotImplementedError:
            raise
        except Exception as error:      # noqa: BLE001 - reported in words below
            outcome = f"raised {described(error)}"
        else:
            outcome = "returned"
    finally:
        log.close()
    assert outcome is None, (
        "the writer was stopped (in_doubt set) and then closed; its next append "
        f"{outcome}, where WriterStopped was expected: a closed log opens again on its "
        "next append, and a stopped writer refuses every write with WriterStopped, "
        "the one error that tells its caller to open the session again")
    after = path.read_bytes() if path.exists() else None
    assert after == before, (
        "the writer was stopped (in_doubt set) and closed, and its next append raised "
        f"WriterStopped, yet the log went from {before!r} to {after!r}, where it "
        "should have stayed as it was")


@pytest.mark.task("01.3")
def test_a_turn_after_the_log_was_closed_is_saved_too(lesson, model, town, sessions):
    """A caller that closes the log between two turns has put its descriptor away, not
    the session: the agent's next turn is saved like the first."""
    model.add(say("Good morning."), say("Good night."))
    agent, log = agent_on(lesson, model, town, sessions)
    with log:
        agent.run("Morning.")
    try:
        agent.run("Night.")
    finally:
        log.close()

    saved = lines_of(the_log(lesson, sessions))
    assert saved == agent.messages, (
        "the caller ran one turn with the log open, closed it, then ran a second turn; "
        f"the log holds {[m.get('content') for m in saved]} and the agent's memory "
        f"{[m.get('content') for m in agent.messages]}: every message of every turn "
        "goes to the log the moment it exists (a closed log opens again on its next "
        "append), so that the log holds what memory holds")


@pytest.mark.task("01.3")
def test_an_empty_answer_is_recorded_like_any_other(lesson, model, town, sessions):
    """A model that answers with empty text (small models do) has still answered:
    that message goes to the log like any other, or the log and memory part ways."""
    model.add(say(""))
    agent, log = agent_on(lesson, model, town, sessions)

    with log:
        agent.run("Say nothing.")

    assert lines_of(sessions / "quest-1.jsonl") == agent.messages, (
        "every message the agent holds should be in the log, the empty answer too: "
        f"the agent holds {agent.messages}, the log "
        f"{lines_of(sessions / 'quest-1.jsonl')}")


@pytest.mark.task("01.3")
def test_the_system_prompt_is_sent_not_saved_and_a_system_note_is_saved(
    lesson, model, town, sessions
):
    """The agent's system prompt is sent first with every request and is no message of
    the conversation: the log holds what memory holds, nothing of the prompt (a session
    read back would send it twice). A system message that is recorded (a note the
    harness adds for the model) is a message like any other: in memory, in the log,
    and sent."""
    model.add(say("Welcome, traveller."), say("Noted."))
    prompt = {"role": "system", "content": "You are the innkeeper of the village."}
    note = {"role": "system", "content": "The user speaks French from now on."}
    log = lesson.SessionLog(sessions, "quest-1")
    agent = lesson.Agent(model.client(), model=model.model, tools=town, session=log,
                         system=prompt["content"])
    with log:
        agent.run("Hello?")
        agent.record(note)
        agent.run("Bonjour ?")

    held = lines_of(the_log(lesson, sessions))
    if prompt in held and prompt not in agent.messages:
        pytest.fail("the agent was made with a system prompt, and the log holds it as "
                    f"a line, {prompt}, which memory lacks: the prompt is sent first "
                    "with every request, never recorded, and a session read back from "
                    "this log would send it twice. The log holds what memory holds",
                    pytrace=False)
    assert held == agent.messages, (
        "the caller recorded a system message, a note for the model, between two "
        f"turns; memory holds {[m.get('content') for m in agent.messages]} and the "
        f"log {[m.get('content') for m in held]}: every message recorded goes to the "
        "log, whatever its role, or the next request carries a message the log lacks")
    sent = model.requests[-1]["messages"]
    assert sent == [prompt, *held[:-1]], (
        "the last request should carry the system prompt first, then what the log "
        "held then (all of it but the answer to that request), the note included; "
        f"it carried {[m.get('content') for m in sent]}")


@pytest.mark.task("01.3")
def test_a_message_said_twice_is_recorded_twice(lesson, model, town, sessions):
    """The same words twice are two messages: a user who says "Yes." again, a model that
    answers "Fine." again. Each goes to the log, or the log and memory part ways."""
    model.add(say("Fine."), say("Fine."))
    agent, log = agent_on(lesson, model, town, sessions)

    with log:
        agent.run("Yes.")
        agent.run("Yes.")

    stored = lines_of(sessions / "quest-1.jsonl")
    assert stored == agent.messages, (
        "the user said 'Yes.' twice and the model answered 'Fine.' twice: the log "
        f"should hold all four messages, as memory does; it holds {len(stored)}: "
        f"{stored}. A message equal to an earlier one is still a message of its own")


@pytest.mark.task("01.3")
def test_a_message_recorded_twice_as_one_object_is_saved_twice(lesson, model, town,
                                                                sessions):
    """A caller may hand record() the same message object twice (the user's "Yes.",
    kept and said again): each call adds it, to memory and to the log alike, so that
    the next request carries exactly what the log holds."""
    agent, log = agent_on(lesson, model, town, sessions)
    message = {"role": "user", "content": "Yes."}

    with log:
        agent.record(message)
        agent.record(message)

    stored = lines_of(sessions / "quest-1.jsonl")
    assert stored == agent.messages, (
        "record() was handed the same message object twice: memory holds "
        f"{len(agent.messages)} message(s), {agent.messages}, and the log "
        f"{len(stored)}, {stored}. Each call records the message, in the log as in "
        "memory, however the caller made it")


@pytest.mark.task("01.3")
def test_a_message_said_again_that_the_log_refuses_leaves_memory_in_order(
    lesson, model, town, sessions
):
    """The user says "Yes.", then "Yes." again when the disk is full: run() raises, and
    memory holds what the log holds, in the log's order. What is kept out of memory is
    the message that was not saved, never an earlier one equal to it."""
    model.add(say("Fine."), say("Fine."))
    path = sessions / "quest-1.jsonl"

    def work():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        agent, log = agent_on(lesson, model, town, sessions)
        with log:
            agent.run("Yes.")
            # Full from here on: the next line is refused whole (EFBIG).
            resource.setrlimit(resource.RLIMIT_FSIZE,
                               (path.stat().st_size, resource.RLIM_INFINITY))
            try:
                agent.run("Yes.")
                second = "returned"
            except Exception as error:      # noqa: BLE001 - memory is what is judged
                second = f"raised {type(error).__name__}"
        return [second, agent.messages]

    outcome = unless_unfinished(in_child(work))
    if isinstance(outcome, dict):
        pytest.fail(f"the first turn (the user's 'Yes.', the model's 'Fine.') "
                    f"raised {outcome['raised']}: {outcome['message']}", pytrace=False)
    second, memory = outcome
    held = lines_of(path)
    assert memory == held, (
        "the user said 'Yes.' and the model answered 'Fine.'; then the disk was full "
        f"and the user said 'Yes.' again: run() {second}, the log holds {held}, and "
        f"the agent's memory holds {memory}. Memory holds what the log holds, in its "
        "order: the message kept out of memory is the one that was not saved, the "
        "last, never an earlier message equal to it")


@pytest.mark.task("01.4")
@pytest.mark.parametrize("ctrl_c, once", [(False, False), (False, True), (True, False)],
                         ids=["EIO", "EIO once", "Ctrl-C"])
def test_a_folder_sync_that_fails_leaves_no_descriptor_open(lesson, sessions,
                                                            monkeypatch, ctrl_c, once):
    """The folder's fsync fails (EIO), or the user presses Ctrl-C while it runs: the
    error reaches the caller, and no descriptor, the log's or the folder's, stays
    open. A sync that failed once is not tried again in its place: after EIO, Linux
    may report the next sync of the same folder a success with nothing saved."""
    before = open_descriptors()
    what = "Ctrl-C came during the folder's fsync" if ctrl_c else (
        "the folder's fsync failed (EIO)" + (" once" if once else ""))
    failed_once = []

    def fails(fd):
        if not stat.S_ISDIR(os.fstat(fd).st_mode) or (once and failed_once):
            return False
        failed_once.append(fd)
        return True
    # A context of its own: leaving it takes the failing syncs away, and only them (the
    # stand-in for _write, while 01.5 is not written, stays).
    with monkeypatch.context() as failing:
        fail_syncs(failing, fails, ctrl_c)
        try:
            with lesson.SessionLog(sessions, "quest-1", durable=True) as log:
                log.append({"role": "user", "content": "first"})
        except (OSError, KeyboardInterrupt) as error:
            failed = error
        else:
            failed = None
    expected = KeyboardInterrupt if ctrl_c else OSError
    assert isinstance(failed, expected) and (
        ctrl_c or failed.errno == errno.EIO), (
        f"{what}, and that should reach the caller as {expected.__name__}; got "
        f"{failed!r}")
    assert open_descriptors() == before, (
        f"{what}, and the append left {open_descriptors() - before} descriptor(s) "
        "open, where none should stay: a writer that failed to open is no writer, and "
        "a long-running program would run out of descriptors")


@pytest.mark.task("01.4")
@pytest.mark.parametrize("retry", ["the same writer", "a new writer"])
def test_a_new_logs_name_whose_sync_failed_is_synced_before_its_first_line(
    lesson, sessions, monkeypatch, retry
):
    """Durable mode: the sync of a new log's name fails (EIO), and append raises. The
    caller retries, with the same SessionLog or with a new one on the session: the line
    it is then told is saved must survive a power cut, so the log's name is synced (in
    the sessions folder) before that append returns."""
    log = lesson.SessionLog(sessions, "quest-1", durable=True)
    # A context of its own: leaving it takes the failing syncs away, and only them (the
    # stand-in for _write, while 01.5 is not written, stays).
    with monkeypatch.context() as failing:
        fail_syncs(failing, lambda fd: stat.S_ISDIR(os.fstat(fd).st_mode))
        try:
            log.append({"role": "user", "content": "first"})
        except OSError:
            pass
        except NotImplementedError:
            raise
        else:
            log.close()
            pytest.fail("the sync of the new log's name failed (EIO), and append "
                        "returned as if the line were safe: a power cut could take the "
                        "log, line and all", pytrace=False)
    fsync = FsyncRecorder(monkeypatch)
    if retry == "a new writer":
        log.close()
        log = lesson.SessionLog(sessions, "quest-1", durable=True)
    try:
        log.append({"role": "user", "content": "first"})
    except NotImplementedError:
        raise
    except Exception as error:      # noqa: BLE001 - reported in words below
        pytest.fail(f"the disk works again, yet the retry by {retry} raised "
                    f"{type(error).__name__}: {error}. Nothing of the line was written "
                    "when the name's sync failed, so a retry is safe and should work",
                    pytrace=False)
    finally:
        log.close()
    folder = sessions.stat()
    synced = (folder.st_dev, folder.st_ino) in fsync.folders
    assert synced and fsync.kinds.index("folder") < len(fsync.kinds) - 1, (
        f"the retry by {retry} wrote and synced its line, and returned, but the "
        "sessions folder was not synced before it (the syncs were, in order: "
        f"{fsync.kinds}): the earlier sync of the log's name failed, so the name may "
        "still not be on the disk, and a power cut would take the log with the line "
        "just acknowledged")
    contents = [m["content"] for m in lines_of(sessions / "quest-1.jsonl")]
    assert contents == ["first"], (
        f"the message should be in the log once, as the retry wrote it: {contents}")


@pytest.mark.task("01.4")
def test_an_empty_log_another_program_left_has_its_name_synced_first(
        lesson, sessions, monkeypatch):
    """Durable mode: an empty log already in the sessions folder (another program
    touched it, or a writer was killed between creating it and syncing its name) may
    have a name that never reached the disk. Before the first line in it is
    acknowledged, the folder is synced with the name in it, as for a log the writer
    creates itself: a file that is there proves nothing of its name."""
    path = sessions / "quest-1.jsonl"
    path.touch(mode=0o600)
    fsync = FsyncRecorder(monkeypatch)
    try:
        with lesson.SessionLog(sessions, "quest-1", durable=True) as log:
            log.append({"role": "user", "content": "first"})
    except NotImplementedError:
        raise
    except Exception as error:      # noqa: BLE001 - reported in words below
        pytest.fail("an empty log was in the sessions folder, and a durable writer's "
                    f"first append to it raised {described(error)}: an empty log is a "
                    "log like any other, appended to", pytrace=False)
    expect_the_name_synced_first(fsync, sessions, (
        "an empty log, which another program left, was in the sessions folder",
        "a writer killed between its create and its folder sync leaves just that"))


def expect_the_name_synced_first(fsync, sessions, found):
    """Fail unless the sessions folder was synced, quest-1.jsonl in it, before the
    first line a durable writer appended to quest-1 (found: what was there before,
    and how its name could have missed the disk)."""
    there, how = found
    folder = sessions.stat()
    synced = [n for n, seen in enumerate(fsync.folders)
              if seen == (folder.st_dev, folder.st_ino)
              and "quest-1.jsonl" in fsync.entries[n]]
    first_line = (fsync.kinds.index("file") if "file" in fsync.kinds
                  else len(fsync.kinds))
    folder_syncs = [n for n, kind in enumerate(fsync.kinds) if kind == "folder"]
    if not (synced and folder_syncs[synced[0]] < first_line):
        fail_in("01.4", f"{there}; a durable writer appended its first line and "
                f"returned, with the syncs, in order: {fsync.kinds}. Nothing says that "
                f"log's name ever reached the disk ({how}): the sessions folder is "
                "synced, the name in it, before this writer's first line in the log is "
                "acknowledged, or a power cut takes the log with the line")


@pytest.mark.task("01.4")
def test_a_log_a_writer_that_was_not_durable_began_has_its_name_synced_first(
        lesson, sessions, monkeypatch):
    """Durable mode: a log whose lines a writer that was not durable appended has a
    name that may never have reached the disk (that writer syncs nothing). Before a
    durable writer's first line in it is acknowledged, the folder is synced with the
    name in it: lines in a log prove nothing of its name either."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": "written without durable mode"})
    fsync = FsyncRecorder(monkeypatch)
    with lesson.SessionLog(sessions, "quest-1", durable=True) as log:
        log.append({"role": "user", "content": "first durable line"})
    expect_the_name_synced_first(fsync, sessions, (
        "quest-1.jsonl held a line that a writer without durable mode appended",
        "that writer synced nothing, its log's name included"))


@pytest.mark.task("01.4")
def test_a_failed_sync_of_a_logs_name_leaves_the_log_to_its_other_writers(
        lesson, sessions, monkeypatch):
    """Durable mode: the sync of a new log's name fails (EIO) while another program
    holds the same, still empty, log open to append to it. The failed open leaves the
    log where it is: the log is that program's too, and its lines must stay where
    readers look, under the log's name. (The retry syncs the name again.)"""
    path = sessions / "quest-1.jsonl"
    other = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    line = b'{"role": "user", "content": "from the other program"}\n'
    try:
        with monkeypatch.context() as failing:
            fail_syncs(failing, lambda fd: stat.S_ISDIR(os.fstat(fd).st_mode))
            log = lesson.SessionLog(sessions, "quest-1", durable=True)
            try:
                log._open()     # as the first append opens it
            except NotImplementedError:
                raise
            except OSError:
                pass
            finally:
                log.close()
        os.write(other, line)
    finally:
        os.close(other)
    now = path.read_bytes() if path.exists() else None
    assert now is not None and line in now, (
        "another program held the empty log open; a durable writer's open of it (as "
        "its first append makes) failed, as the sync of the log's name did (EIO); then "
        "the other program "
        f"wrote a line, and the log's name holds {now!r}, without that line: the "
        "failed open removed the log (or made another), and the other program's "
        "lines went to a file no name reaches. A failed open leaves the log as it "
        "found it")


def first_append_works(lesson, folder, setting: str, why: str, **options) -> None:
    """Append a first message to session quest-1 of `folder`; if the append fails with
    an OSError, fail in words: `setting`, what the append raised, then `why`."""
    try:
        with lesson.SessionLog(folder, "quest-1", **options) as log:
            log.append({"role": "user", "content": "hello"})
    except NotImplementedError:
        raise
    except OSError as error:
        pytest.fail(f"{setting}, and the first append failed with {described(error)}: "
                    f"{why}", pytrace=False)


@pytest.mark.task("01.4")
def test_the_first_append_creates_the_sessions_folder_it_needs(lesson, tmp_path):
    """A sessions folder that does not exist yet (nor its parent) is created by the
    first append, as the log is: a new user's first session just works."""
    folder = tmp_path / "home" / "sessions"
    first_append_works(lesson, folder, f"the sessions folder {folder} did not exist "
                       "yet", "the folder and the log should have been created")
    contents = [m["content"] for m in lines_of(folder / "quest-1.jsonl")]
    assert contents == ["hello"], (
        "the first append into a new sessions folder should leave the log holding its "
        f"line; it holds {contents}")


@pytest.mark.task("01.4")
def test_a_sessions_folder_removed_is_made_again_by_the_next_log(lesson, tmp_path):
    """A sessions folder that was there and is gone (a user cleared their sessions) is
    no folder there: the next log's first append creates it again, as the first did."""
    folder = tmp_path / "home" / "sessions"
    first_append_works(lesson, folder, f"the sessions folder {folder} did not exist "
                       "yet", "the folder and the log should have been created")
    shutil.rmtree(folder)
    first_append_works(lesson, folder, f"a first log was made in {folder}, then the "
                       "folder was removed, with the log in it", "the next log's first "
                       "append creates the folder it needs, whatever was there before")
    contents = [m["content"] for m in lines_of(folder / "quest-1.jsonl")]
    assert contents == ["hello"], (
        "after the sessions folder was removed, a new log's first append should "
        f"create it again and leave the log holding its line; it holds {contents}")


@pytest.mark.task("01.4")
def test_a_writer_whose_folder_was_removed_while_closed_makes_it_again(lesson,
                                                                      tmp_path):
    """A writer appends, and is closed; the user clears their sessions, the folder
    with them. The same writer's next append opens the log again, and creates the
    folder it needs again, private to its owner, as its first did: what a writer made
    before says nothing of what is there now."""
    folder = tmp_path / "home" / "sessions"
    log = lesson.SessionLog(folder, "quest-1")
    try:
        log.append({"role": "user", "content": "day 1"})
        log.close()
        if not (folder / "quest-1.jsonl").is_file():
            fail_in("01.4", f"a writer's first append into {folder}, which did not "
                    "exist yet, returned, but left no quest-1.jsonl there: the first "
                    "append creates the folders it needs and the log")
        shutil.rmtree(tmp_path / "home", ignore_errors=True)
        try:
            log.append({"role": "user", "content": "day 2"})
        except NotImplementedError:
            raise
        except OSError as error:
            fail_in("01.4", f"a writer appended to {folder.name}/quest-1.jsonl and was "
                    "closed; then the folder home/ was removed, sessions and all, and "
                    f"the same writer's next append failed with {described(error)}: "
                    "opening the log again creates the folders it needs again, "
                    "whatever this writer made before")
    finally:
        log.close()
    if not (folder / "quest-1.jsonl").is_file():
        fail_in("01.4", "a writer appended, was closed, and the folders home/ and "
                "sessions/ were removed; its next append returned, but left no "
                f"{folder.name}/quest-1.jsonl: opening the log again creates the "
                "folders it needs and the log, whatever this writer made before")
    contents = [m["content"] for m in lines_of(folder / "quest-1.jsonl")]
    modes = {name: oct(stat.S_IMODE(path.stat().st_mode))
             for name, path in (("home", tmp_path / "home"), ("sessions", folder))}
    assert contents == ["day 2"] and set(modes.values()) == {"0o700"}, (
        "after the folders were removed, the writer's next append should make them "
        f"again, each 0o700, with the log holding 'day 2'; the log holds {contents} "
        f"and the folders have the modes {modes}")


def append_into_a_new_folder(lesson, folder, **options):
    """Append one line to a log in `folder`, which does not exist yet; fail in words if
    the append raised OSError."""
    try:
        with lesson.SessionLog(folder, "quest-1", **options) as log:
            log.append({"role": "user", "content": "my secret plan"})
    except NotImplementedError:
        raise
    except OSError as error:
        pytest.fail(f"the sessions folder {folder} did not exist yet, and the first "
                    f"append failed with {type(error).__name__}: {error}, where the "
                    "folder and the log should have been created", pytrace=False)


@pytest.mark.task("01.4")
@pytest.mark.parametrize("folder", [".", ""], ids=["dot", "empty"])
def test_a_durable_log_in_the_working_folder_has_its_name_synced(
    lesson, sessions, monkeypatch, folder
):
    """A sessions folder given as the working folder itself, '.' or '', is a folder
    like any other: in durable mode the first append works and syncs the new log's
    name in it."""
    monkeypatch.chdir(sessions)
    fsync = FsyncRecorder(monkeypatch)
    first_append_works(lesson, folder, f"the sessions folder was given as {folder!r}, "
                       "the working folder, in durable mode", "a relative folder, the "
                       "working folder itself included, holds logs like any other",
                       durable=True)
    here = sessions.stat()
    assert fsync.folders == [(here.st_dev, here.st_ino)], (
        f"the sessions folder was given as {folder!r}, the working folder, and the "
        f"first durable append synced {len(fsync.folders)} folder(s), not that one: "
        "a new log's name lives in the folder that holds it, and a power cut can lose "
        "the log whole until that folder is synced")


@pytest.mark.task("01.4")
def test_a_session_in_a_relative_folder_stays_there_when_the_working_folder_moves(
    lesson, tmp_path, monkeypatch
):
    """A session made with a relative sessions folder is the session of the folder that
    name reached when it was made: the working folder may move before its first append
    (a tool of the agent changes it, say), and its log still goes there, never into a
    folder of the same name wherever the process happens to be."""
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    (project / "sessions").mkdir(parents=True)
    (elsewhere / "sessions").mkdir(parents=True)
    monkeypatch.chdir(project)
    log = lesson.SessionLog("sessions", "quest-1", durable=True)
    monkeypatch.chdir(elsewhere)
    with log:
        log.append({"role": "user", "content": "hello"})
    strays = sorted(path.name for path in (elsewhere / "sessions").iterdir())
    assert (project / "sessions" / "quest-1.jsonl").is_file() and not strays, (
        "the session was made with the folder 'sessions' while the working folder was "
        "project/, and appended to after it moved to elsewhere/: the log should be "
        f"project/sessions/quest-1.jsonl, but elsewhere/sessions holds {strays}. "
        "Another session of that name there would get this one's lines")


@pytest.mark.task("01.4")
def test_a_sessions_folder_reached_through_a_symbolic_link_is_used(lesson, tmp_path):
    """A sessions folder reached through a symbolic link (a home folder often is one)
    is a folder like any other: the log goes into the folder the link leads to. Only a
    log whose own name is a link is refused."""
    real = tmp_path / "disk" / "sessions"
    real.mkdir(parents=True)
    (tmp_path / "home").symlink_to(tmp_path / "disk")
    folder = tmp_path / "home" / "sessions"
    first_append_works(lesson, folder, f"the sessions folder {folder} is reached "
                       "through a symbolic link (home -> disk)", "only a log whose own "
                       "name is a link is refused, and this log's name is a plain new "
                       "file")
    contents = [m["content"] for m in lines_of(real / "quest-1.jsonl")]
    assert contents == ["hello"], (
        f"the append through the linked folder {folder} should have left its line in "
        f"the folder the link leads to; the log there holds {contents}")


@pytest.mark.task("01.4")
@pytest.mark.parametrize("durable", [False, True], ids=["plain", "durable"])
def test_a_sessions_folder_that_is_itself_a_symbolic_link_holds_logs(lesson, tmp_path,
                                                                    durable):
    """The sessions folder itself may be a symbolic link (a folder moved to another
    disk and linked back): it holds logs like any other folder, in durable mode too,
    whose sync of a new log's name goes through the link to the folder it reaches."""
    real = tmp_path / "disk" / "sessions"
    real.mkdir(parents=True)
    folder = tmp_path / "sessions"
    folder.symlink_to(real)
    mode = "durable " if durable else ""
    first_append_works(lesson, folder, f"the sessions folder {folder} is itself a "
                       f"symbolic link to {real}, and a {mode}log was opened in it",
                       "the sessions folder may be reached through a link; only a log "
                       "whose own name is a link is refused", durable=durable)
    contents = [m["content"] for m in lines_of(real / "quest-1.jsonl")]
    assert contents == ["hello"], (
        f"the append into the linked sessions folder {folder} should have left its "
        f"line in the folder the link leads to, {real}; the log there holds "
        f"{contents}")


@pytest.mark.task("01.4")
def test_the_folders_a_first_append_creates_are_readable_by_their_owner_only(
    lesson, tmp_path
):
    """Under a umask of 000, the sessions folder the first append creates, and the
    folder above it that was missing too, are readable by their owner only (0700):
    the names of a user's sessions can say what they were about."""
    home = tmp_path / "home"
    old_umask = os.umask(0)
    try:
        append_into_a_new_folder(lesson, home / "sessions")
    finally:
        os.umask(old_umask)
    modes = {path.name: stat.S_IMODE(path.stat().st_mode)
             for path in (home, home / "sessions")}
    open_to_others = {name: oct(mode) for name, mode in modes.items() if mode != 0o700}
    assert not open_to_others, (
        "under a umask of 000 the first append created the folders home/ and "
        f"home/sessions/, and these have other modes than 0o700: {open_to_others}. "
        "Every user of the machine may list (or even change) what is in them")


@pytest.mark.task("01.4")
def test_durable_mode_makes_the_name_of_each_new_folder_survive_a_power_cut(
    lesson, tmp_path, monkeypatch
):
    """Durable mode, a sessions folder that does not exist yet, nor the folder above
    it: each folder the first append creates is a name in the folder above it, and a
    power cut can lose it (and the log in it) until that folder is synced. So before
    the append returns, the folder holding each new folder's name is synced too, and
    the new sessions folder itself, which holds the new log's name."""
    home = tmp_path / "home"
    fsync = FsyncRecorder(monkeypatch)
    append_into_a_new_folder(lesson, home / "sessions", durable=True)
    holders = {"home/ (it holds the name of sessions/)": home,
               "the folder above home/ (it holds the name of home/)": tmp_path}
    unsynced = [name for name, path in holders.items()
                if (path.stat().st_dev, path.stat().st_ino) not in fsync.folders]
    assert not unsynced, (
        "durable mode: the first append created home/ and home/sessions/, and "
        f"returned without syncing {' nor '.join(unsynced)}: a power cut could take "
        "the new folder away, with the log and the line just acknowledged. The "
        f"syncs were, in order: {fsync.kinds}")
    here = (home / "sessions").stat()
    named = [n for n, seen in enumerate(fsync.folders)
             if seen == (here.st_dev, here.st_ino)
             and "quest-1.jsonl" in fsync.entries[n]]
    assert named, (
        "durable mode: the first append created home/ and home/sessions/, synced the "
        "name of each new folder in the folder above it, and returned without "
        "syncing home/sessions/ itself with the new log's name in it: a new folder's "
        "sync saves its own name, not the names made in it after, so a power cut "
        "could still take quest-1.jsonl away, with the line just acknowledged. The "
        f"syncs were, in order: {fsync.kinds}")


@pytest.mark.task("01.4")
def test_two_writers_open_at_once_both_add_to_the_end(lesson, sessions):
    """Two writers open on one session at once (two processes, say: lesson 05 makes it
    a refusal) each add their lines at the end of the file as it is then, never over
    the other's."""
    first = lesson.SessionLog(sessions, "quest-1")
    second = lesson.SessionLog(sessions, "quest-1")
    written = ["first writer, line 1", "second writer, line 1",
               "first writer, line 2", "second writer, line 2"]
    try:
        for log, text in zip([first, second, first, second], written):
            log.append({"role": "user", "content": text})
    finally:
        first.close()
        second.close()
    found = []
    for line in the_log(lesson, sessions).read_bytes().split(b"\n"):
        try:
            found.append(json.loads(line)["content"] if line else None)
        except (ValueError, KeyError, TypeError):
            found.append(line.decode("utf-8", "replace"))
    found = [text for text in found if text is not None]
    assert found == written, (
        "two writers were open on the session at once and appended in turn; the log "
        f"should hold {written}, and it holds {found}: a writer wrote where the file "
        "ended when it opened it, over the lines the other had added since")


@pytest.mark.task("01.4")
def test_a_new_log_is_readable_by_its_owner_only(lesson, sessions):
    """A log holds what a person said: created under a umask of 000, it is still
    readable and writable by its owner only (0600)."""
    old_umask = os.umask(0)
    try:
        with lesson.SessionLog(sessions, "quest-1") as log:
            log.append({"role": "user", "content": "my secret plan"})
    finally:
        os.umask(old_umask)
    mode = stat.S_IMODE(the_log(lesson, sessions).stat().st_mode)
    assert mode == 0o600, (
        f"under a umask of 000 the new log was created with mode {oct(mode)}, where "
        "0o600 (its owner only) was expected: any user of the machine could read it")


@pytest.mark.task("01.4")
def test_a_new_log_is_never_open_to_others_even_for_an_instant(lesson, sessions,
                                                               monkeypatch):
    """Under a umask of 000 the log is its owner's alone from the instant its name
    exists: created with that mode, not narrowed after. Between a wider creation and a
    narrowing, another user's process can open it, and reads through that descriptor
    whatever the mode becomes."""
    modes = []
    real_open = os.open

    def watching_open(path, flags, *args, **kwargs):
        fd = real_open(path, flags, *args, **kwargs)
        if os.fspath(path).endswith("quest-1.jsonl"):
            modes.append(stat.S_IMODE(os.fstat(fd).st_mode))
        return fd

    monkeypatch.setattr(os, "open", watching_open)
    old_umask = os.umask(0)
    try:
        with lesson.SessionLog(sessions, "quest-1") as log:
            log.append({"role": "user", "content": "my secret plan"})
    except NotImplementedError:
        raise
    except Exception:       # noqa: BLE001 - a failing append is other tests' to tell
        pass
    finally:
        os.umask(old_umask)
    wide = [oct(mode) for mode in modes if mode & 0o077]
    if wide:
        fail_in("01.4", f"under a umask of 000 the new log existed with the mode "
                f"{wide[0]} the moment it was opened, and was narrowed only after: "
                "between the two, another user's process could open it and keep "
                "reading it through that descriptor. A new log is created with its "
                "owner-only mode (0600), so that it is never open to others")


@pytest.mark.task("01.4")
def test_an_open_leaves_the_modes_of_a_folder_and_log_already_there_as_they_were(
    lesson, sessions
):
    """Only what the first append creates is made its owner's alone. A sessions folder
    and a log already there keep the modes their owner gave them (a folder shared with
    a group, a log a backup tool reads), in durable mode too: a writer that narrows
    them on every open locks out the readers their owner let in."""
    for durable in (False, True):
        os.chmod(sessions, 0o750)
        log_path = sessions / "quest-1.jsonl"
        log_path.write_bytes(b'{"role": "user", "content": "day 1"}\n')
        os.chmod(log_path, 0o640)
        try:
            with lesson.SessionLog(sessions, "quest-1", durable=durable) as log:
                log.append({"role": "user", "content": "day 2"})
        except NotImplementedError:
            raise
        except OSError as error:
            fail_in("01.4", f"appending to the log {log_path}, already there, failed "
                    f"with {described(error)}: it should have added its line")
        modes = {"the folder": oct(stat.S_IMODE(sessions.stat().st_mode)),
                 "the log": oct(stat.S_IMODE(log_path.stat().st_mode))}
        mode = "a durable" if durable else "a"
        if modes != {"the folder": "0o750", "the log": "0o640"}:
            fail_in("01.4", "the sessions folder (mode 0o750) and the log (mode "
                    f"0o640) were there already, and after {mode} writer appended to "
                    f"the log their modes are {modes}: an open changes no mode of "
                    "what is there, since the owner gave them on purpose (a group "
                    "that reads the sessions); only a folder or log the append "
                    "creates is made its owner's alone")
        log_path.unlink()


@pytest.mark.task("01.4")
def test_a_log_removed_since_it_was_last_opened_has_its_new_name_synced(
        lesson, sessions, monkeypatch):
    """A user may clear a session's log while its writer is closed. The writer's next
    append creates the log again, a new file whose name is a new entry in the folder:
    in durable mode that name is synced before its first line, as any new log's is,
    whatever the writer did for the log it had before."""
    log = lesson.SessionLog(sessions, "quest-1", durable=True)
    try:
        log.append({"role": "user", "content": "day 1"})
        log.close()
        the_log(lesson, sessions).unlink()
        fsync = FsyncRecorder(monkeypatch)
        log.append({"role": "user", "content": "day 1, after clearing"})
    finally:
        log.close()
    synced = [names for names in fsync.entries if "quest-1.jsonl" in names]
    assert synced, (
        "the log was removed after its writer closed it, and the writer's next append "
        "created it again, a new file: in durable mode its name should be synced in "
        "the sessions folder before its first line is acknowledged, as any new log's "
        f"is; the syncs were {fsync.kinds}, none of a folder that held quest-1.jsonl. "
        "What a writer did for the log it had before says nothing of the one there now")


@pytest.mark.task("01.4")
@pytest.mark.parametrize("target", ["a file outside the sessions folder",
                                    "another session's log",
                                    "nothing: a name outside the sessions folder"])
def test_a_log_that_is_a_symbolic_link_is_not_followed(lesson, sessions, tmp_path,
                                                       target):
    """A log name planted as a symbolic link is refused (OSError), and what it points
    to is left as it was: a file outside the sessions folder, another session's log
    in it, whose conversation a link would mix with this one's, or nothing at all (a
    link to a name outside the folder, which no append may create). The refusal
    names the log by its path, and changes nothing: the link stays where it was (its
    owner may have made it on purpose), and so does the program's umask."""
    sessions.mkdir(parents=True, exist_ok=True)
    pointed = (tmp_path / "outside.txt" if not target.startswith("another")
               else sessions / "quest-2.jsonl")
    kept = '{"role": "user", "content": "not this session"}\n'
    if not target.startswith("nothing"):
        pointed.write_text(kept)
    (sessions / "quest-1.jsonl").symlink_to(pointed)
    log = lesson.SessionLog(sessions, "quest-1")
    umask = os.umask(0o022)
    os.umask(umask)
    try:
        link = sessions / "quest-1.jsonl"       # its path, as written or resolved
        spelled = {str(link), str(sessions.resolve() / link.name)}
        with raises(OSError, f"the log's name was a symbolic link to {target}, and "
                    "append wrote through it: a log that is a link is refused",
                    match="|".join(map(re.escape, sorted(spelled))),
                    unmatched="A refusal names the file it refuses by its path, so "
                    "that the caller can find the link planted in the sessions folder "
                    "(a file name alone does not say which folder)"):
            log.append({"role": "user", "content": "hello"})
    finally:
        log.close()
        left = os.umask(umask)      # and the umask is the test's again, whatever came
    if not link.is_symlink() or os.readlink(link) != str(pointed):
        now = (f"a file holding {link.read_bytes()!r}" if link.exists() else "nothing")
        fail_in("01.4", f"the log's name was a symbolic link to {target}; the append "
                f"was refused, and the name now holds {now}, where the link was "
                "expected as it was: a refusal changes no file of the session. The "
                "link may be its owner's on purpose (a log kept on another disk), and "
                "who planted it is for the caller to find; a writer that removes it "
                "makes the next append start a new, empty log under the name")
    if left != umask:
        fail_in("01.4", f"the log's name was a symbolic link to {target}; the append "
                f"was refused, and left the program's umask at {oct(left)}, where it "
                f"was {oct(umask)}: every file and folder the program creates after "
                "would get other permissions than it asks for. A failed open leaves "
                "the program's settings as it found them")
    if target.startswith("nothing"):
        assert not pointed.exists(), (
            f"the log's name was a symbolic link to {target}, and append created "
            f"{pointed.name} there, out of the sessions folder: a log that is a link "
            "is refused, never followed, whether or not its target exists")
        return
    assert pointed.read_text() == kept, (
        f"the file the link points to, {target}, was changed: {pointed.read_text()!r}")


@pytest.mark.task("01.4")
def test_a_link_planted_just_as_the_log_is_opened_is_not_followed(lesson, sessions,
                                                                   tmp_path):
    """A symbolic link can appear at the log's name at any instant (another process
    plants it), between a look at the name and the open that follows: only the open
    itself can refuse a link for sure. Here a link to a file outside the sessions
    folder is planted at the very call that opens the log: the append is refused with
    an OSError, and the file the link points to is left as it was."""
    sessions.mkdir(parents=True, exist_ok=True)
    outside = tmp_path / "outside.txt"
    kept = '{"role": "user", "content": "not this session"}\n'
    outside.write_text(kept)
    link = sessions / "quest-1.jsonl"
    real_open, planted = os.open, []

    def open_once_a_link_is_planted(file, *args, **kwargs):
        if not planted and os.path.basename(os.fspath(file)) == link.name:
            planted.append(file)
            link.symlink_to(outside)
        return real_open(file, *args, **kwargs)

    log = lesson.SessionLog(sessions, "quest-1")
    outcome = "returned"
    try:
        with pytest.MonkeyPatch.context() as planting:
            planting.setattr(os, "open", open_once_a_link_is_planted)
            log.append({"role": "user", "content": "hello"})
    except NotImplementedError:
        raise
    except OSError:
        outcome = None
    except Exception as error:      # noqa: BLE001 - reported in words below
        outcome = f"raised {described(error)}"
    finally:
        log.close()
    if not planted:
        return      # the log was not opened with os.open: no such instant to play
    now = outside.read_text()
    assert outcome is None and now == kept, (
        "a symbolic link to a file outside the sessions folder appeared at the log's "
        "name just as the log was opened, after any look at the name made before the "
        f"open; the append {outcome or 'raised OSError'}, and the file the link "
        f"points to now holds {now!r} (it held {kept!r}). A look before the open "
        "(does the name exist, is it a link?) can be overtaken by another process: "
        "the open itself refuses a log that is a link, and the append raises OSError")


@pytest.mark.task("01.4")
def test_a_log_with_a_second_name_is_appended_to_like_any(lesson, sessions):
    """A log may have a second name in the folder (a hard link, as a backup tool makes
    one: backup.jsonl beside quest-1.jsonl). It is still the session's own file, not
    a link that leads elsewhere: a new writer appends to it, and both names show the
    line. Only a log that is a symbolic link is refused."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": "day one"})
    backup = sessions / "backup.jsonl"
    os.link(the_log(lesson, sessions), backup)
    try:
        with lesson.SessionLog(sessions, "quest-1") as log:
            log.append({"role": "user", "content": "day two"})
    except NotImplementedError:
        raise
    except OSError as error:
        pytest.fail("the log quest-1.jsonl had a second name, backup.jsonl (a hard "
                    "link, as a backup tool makes), and a new writer's append to it "
                    f"raised {described(error)}: the file is the session's own log, "
                    "whatever other names it has; only a log that is a symbolic link "
                    "is refused", pytrace=False)
    contents = {path.name: [m["content"] for m in lines_of(path)]
                for path in (sessions / "quest-1.jsonl", backup)}
    assert set(map(tuple, contents.values())) == {("day one", "day two")}, (
        "the log had a second name (a hard link) and a new writer appended to it: "
        f"both names should show both lines, and they hold {contents}")


def the_programs_settings():
    """What a program sets for itself and a library must leave alone: its umask, its
    working folder, how it handles each signal, and its resource limits."""
    umask = os.umask(0o022)
    os.umask(umask)
    handlers = {}
    for number in sorted(signal.valid_signals()):
        try:
            handlers[signal.Signals(number).name] = signal.getsignal(number)
        except (ValueError, OSError):
            pass        # a real-time signal without a name, or one Python cannot ask
    limits = {name: resource.getrlimit(getattr(resource, name))
              for name in ("RLIMIT_NOFILE", "RLIMIT_FSIZE", "RLIMIT_CORE")}
    return {"umask": oct(umask), "working folder": os.getcwd(), **handlers, **limits}


@pytest.mark.task("01.5")
@pytest.mark.task("01.4")
def test_an_open_leaves_the_programs_settings_as_it_found_them(lesson, sessions,
                                                               tmp_path):
    """Opening a log, and writing a line to it, change nothing of the program's own
    settings: its umask, its working folder, how it handles a signal (SIGXFSZ, a file
    past its size limit, say), its limits (how many descriptors it may hold). So it is
    whether the open creates the log or finds it, in durable mode or not, and when it
    is refused (a log that is a symbolic link): the program set them for reasons of its
    own."""
    (sessions / "quest-3.jsonl").symlink_to(tmp_path / "elsewhere.jsonl")
    line = b'{"role": "user", "content": "hello"}\n'
    # Settings of the program's own, which no default gives: Python's handler for a
    # file past its size limit (the program is stopped), fewer descriptors than allowed
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(limit[0], 1024), limit[1]))
    try:
        opens_and_writes_leave_the_settings(lesson, sessions, line)
    finally:
        signal.signal(signal.SIGXFSZ, handler)
        resource.setrlimit(resource.RLIMIT_NOFILE, limit)


def opens_and_writes_leave_the_settings(lesson, sessions, line):
    """Open, then write `line` to, each log of the test above; fail naming the task
    whose step changed the program's settings."""
    for session_id, durable, what in [
            ("quest-1", False, "a new log"),
            ("quest-1", True, "a log already there, in durable mode"),
            ("quest-2", True, "a new log, in durable mode"),
            ("quest-3", False, "a log that is a symbolic link, refused")]:
        log = lesson.SessionLog(sessions, session_id, durable=durable)
        try:
            steps = [("01.4", "opening", log._open),
                     ("01.5", "writing a line to", lambda: log._write(line))]
            for task, step, do in steps:
                before = the_programs_settings()
                try:
                    do()
                except NotImplementedError:
                    raise
                except OSError:
                    pass    # the link is refused: that the settings stay is judged
                after = the_programs_settings()
                os.chdir(before["working folder"])      # the test's, whatever happened
                changed = [f"{name} from {before[name]} to {after.get(name)}"
                           for name in before if after.get(name) != before[name]]
                if changed:
                    fail_in(task, f"{step} {what} changed the program's settings: "
                            f"{'; '.join(changed)}. A writer leaves them as it found "
                            "them, whether its call works or is refused: the program "
                            "set them for reasons of its own (every file it creates, "
                            "every path it names, every signal it gets follows them)")
                if log._fd is None:
                    break       # refused: nothing to write to
        finally:
            log.close()


@pytest.mark.task("01.4")
def test_an_open_leaves_the_umask_the_program_has_at_that_call(lesson, sessions):
    """A program may change its umask between two opens (to 027, say, for files of
    its own): after each open, whether it created the log or not, the umask is the
    one the program had as that open began, never one an earlier open saw."""
    umask = os.umask(0o022)
    left = []
    try:
        with lesson.SessionLog(sessions, "quest-1") as log:
            log.append({"role": "user", "content": "day 1"})
            left.append(os.umask(0o027))
        for session_id in ("quest-1", "quest-2"):
            with lesson.SessionLog(sessions, session_id) as log:
                log.append({"role": "user", "content": "day 2"})
                left.append(os.umask(0o027))
    finally:
        os.umask(umask)
    assert left == [0o022, 0o027, 0o027], (
        "the program's umask was 022 as a first log was opened, then 027 as the same "
        "log, then a new one, were opened; after each open it was "
        f"{[oct(m) for m in left]}, where [0o22, 0o27, 0o27] was expected: an open "
        "leaves the umask as the program had it at that call, and every file the "
        "program creates after gets the permissions it asks for")


@pytest.mark.task("01.5")
def test_after_a_short_write_the_writer_refuses_to_go_on(lesson, sessions):
    """The disk took only part of a line (a real file size limit): part of it is in the
    file, so the writer stops; its next append raises WriterStopped naming the log,
    and writes nothing."""
    path = sessions / "quest-1.jsonl"

    def work():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        with lesson.SessionLog(sessions, "quest-1") as log:
            resource.setrlimit(resource.RLIMIT_FSIZE, (1000, resource.RLIM_INFINITY))
            try:
                log.append({"role": "user", "content": "x" * 2000})
                return "the short write passed for saved"
            except OSError:
                pass
            resource.setrlimit(resource.RLIMIT_FSIZE,
                               (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
            size = path.stat().st_size
            try:
                log.append({"role": "user", "content": "again"})
            except lesson.WriterStopped as error:
                named = str(path) in str(error)
                return ("stopped" if named else f"WriterStopped without the log's "
                        f"path: {error}") if path.stat().st_size == size else \
                    "WriterStopped, but bytes were written"
            return "the next append wrote again"

    outcome = unless_unfinished(in_child(work))
    assert outcome == "stopped", (
        "after a short write part of the line is in the file: the writer must stop, "
        f"and its next append raise WriterStopped naming the log; got: {outcome}")


@pytest.mark.task("01.5")
@pytest.mark.parametrize("cut", ["half", "all but its newline"])
@pytest.mark.parametrize("text", ["x" * 2000, "é" * 1000],
                         ids=["ascii", "beyond-ascii"])
def test_the_rest_of_a_short_write_is_never_written_after_it(lesson, sessions,
                                                             monkeypatch, cut, text):
    """The disk takes part of a line (half of it, or all of it but its newline), then
    has room again: append raises OSError, and the rest is not written with a second
    write (another writer's line may already follow the part, and both would be one
    broken line). The part is counted in bytes, as write() counts it: a line of
    letters beyond ASCII has more bytes than letters."""
    real_write = os.write
    taken, given = [], []

    def write_part_once(fd, data):
        if taken:
            return real_write(fd, data)
        given.append(len(data))
        taken.append(len(data) // 2 if cut == "half" else len(data) - 1)
        return real_write(fd, bytes(data)[:taken[0]])

    line = {"role": "user", "content": text}
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": "Hello."})
        path = the_log(lesson, sessions)
        size = path.stat().st_size
        monkeypatch.setattr(os, "write", write_part_once)
        try:
            log.append(line)
            outcome = "append returned"
        except OSError:
            outcome = "append raised OSError"
        finally:
            monkeypatch.undo()
    added = path.stat().st_size - size
    if outcome == "append returned" and taken and added == taken[0]:
        pytest.fail(f"the disk took {taken[0]} bytes of a line of {given[0]} ({cut}), "
                    "and append returned as if the message were saved, where "
                    "OSError was expected: write() said how many bytes it took, and "
                    "a line is saved only when all of them are, its newline included "
                    "(without it, the next line is glued to this one)", pytrace=False)
    assert added == (taken or [0])[0] and outcome == "append raised OSError", (
        f"the disk took {taken[0] if taken else 0} bytes of a line of about 2000, "
        f"then had room again; {outcome}, and the log grew by {added} bytes: the "
        "rest of a line cut short must never follow in a second write (another "
        "process's line may already stand after the part, and the two make one broken "
        "line). A short write raises OSError, and the writer stops")


@pytest.mark.task("01.5")
def test_after_an_fsync_that_failed_the_writer_refuses_to_go_on(lesson, sessions,
                                                                monkeypatch):
    """In durable mode the fsync fails with EIO after the line was written: the line
    may or may not reach the disk, so append raises and the writer stops (the retry
    would write the message a second time). So it does when the fsync reports a full
    disk (ENOSPC), as a file system that allots space only when it syncs (NFS, say)
    does: the write had returned, and the line is in the file all the same."""
    for session, code in [("quest-1", errno.EIO), ("quest-2", errno.ENOSPC)]:
        name = errno.errorcode[code]
        with lesson.SessionLog(sessions, session) as log:
            log.append({"role": "user", "content": "first"})
        failures = []

        def first_sync_fails(fd):
            """The first sync of the log (the folder's, at the open, goes through)."""
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return False
            failures.append(fd)
            return len(failures) == 1

        with lesson.SessionLog(sessions, session, durable=True) as log:
            fail_syncs(monkeypatch, first_sync_fails, code=code)
            with raises(OSError, f"the fsync failed with {name}, and append returned "
                        "as if the line were safe on the disk"):
                log.append({"role": "user", "content": "second"})
            with raises(lesson.WriterStopped,
                        f"after an fsync that failed ({name}), the retry of the same "
                        "message was written again, where WriterStopped was expected"
                        + (" (a full disk reported by the sync comes after the write "
                           "returned: the line is in the file)"
                           if code == errno.ENOSPC else "")):
                log.append({"role": "user", "content": "second"})
            monkeypatch.undo()
        contents = [m["content"] for m in lines_of(sessions / f"{session}.jsonl")]
        assert contents == ["first", "second"], (
            f"after an fsync that failed with {name}, the message should be in the "
            f"log once: {contents}")


def the_retry_is_refused(lesson, log, message, moment):
    """After `moment` (a Ctrl-C that interrupted an append once its line had landed),
    the retry of the same message must raise WriterStopped naming the log, and the log
    hold the message once."""
    write, handed = log._write, []

    def noted_write(data):
        handed.append(data)
        return write(data)
    log._write = noted_write
    try:
        log.append(message)
    except lesson.WriterStopped as error:
        if str(log.path) not in str(error) and not handed:
            fail_in("01.2", f"{moment}; the caller's retry raised WriterStopped, as it "
                    f"should, but append raised it itself, saying {str(error)!r}, "
                    "without handing the line to _write (task 01.5), whose "
                    "WriterStopped names the log by its path: the caller needs to "
                    "know which session to open again")
        assert str(log.path) in str(error), (
            f"WriterStopped should name the log: {error}")
    except NotImplementedError:
        raise
    except Exception as error:      # noqa: BLE001 - reported in words below
        pytest.fail(f"{moment}; the caller's retry should then have raised "
                    f"WriterStopped naming the log, and it raised "
                    f"{type(error).__name__}: {error}", pytrace=False)
    else:
        pytest.fail(f"{moment}, and the caller's retry wrote the message again (it is "
                    f"in the log {lines_of(log.path).count(message)} times): the line "
                    "was already in the file, so the retry should have raised "
                    "WriterStopped and written nothing (task 01.5)", pytrace=False)
    finally:
        log.close()
    copies = lines_of(log.path).count(message)
    assert copies == 1, (
        f"the interrupted message should be in the log once, it is there {copies} "
        "times")


@pytest.mark.task("01.5")
def test_a_ctrl_c_during_the_sync_stops_the_writer(lesson, sessions, monkeypatch):
    """Durable mode, Ctrl-C while the line is synced: write() had returned, the line is
    in the file, and append raised KeyboardInterrupt. The writer cannot tell whether
    the line is safe, so it stops: the retry raises WriterStopped, never writes the
    message twice."""
    log = lesson.SessionLog(sessions, "quest-1", durable=True)
    log.append({"role": "user", "content": "first"})
    before = log.path.stat().st_size
    interrupted = []

    def sync_interrupted_once(real):
        def sync(fd):
            info = os.fstat(fd)
            if (not interrupted and stat.S_ISREG(info.st_mode)
                    and info.st_size > before):
                interrupted.append(fd)
                raise KeyboardInterrupt
            return real(fd)
        return sync

    for name in ("fsync", "fdatasync"):
        monkeypatch.setattr(os, name, sync_interrupted_once(getattr(os, name)))
    message = {"role": "user", "content": "second"}
    try:
        log.append(message)
    except KeyboardInterrupt:
        pass
    except NotImplementedError:
        log.close()
        raise
    except Exception as error:      # noqa: BLE001 - reported in words below
        log.close()
        pytest.fail(f"Ctrl-C (KeyboardInterrupt) came while the line was synced, and "
                    f"append raised {type(error).__name__} ({error}): let it reach "
                    "the caller as it is", pytrace=False)
    else:
        log.close()
        pytest.fail("Ctrl-C (KeyboardInterrupt) came while the line was synced, and "
                    "append returned as if the line were safe on the disk"
                    + ("" if interrupted else ": in durable mode no line was synced"),
                    pytrace=False)
    the_retry_is_refused(lesson, log, message,
                         "append was interrupted by Ctrl-C while its line was synced, "
                         "after write() had put it in the file")


@pytest.mark.task("01.5")
@pytest.mark.task("01.4")
def test_a_ctrl_c_during_an_append_reaches_the_caller_and_stays_as_it_was(
        lesson, sessions, monkeypatch):
    """Ctrl-C is the user's, at any instant. One pressed while a durable line is synced
    (a real SIGINT) reaches the caller of append as KeyboardInterrupt: a writer never
    ignores it for its line's sake (the line is in doubt then, and the writer stops:
    the caller's retry raises WriterStopped, however the writer handled the Ctrl-C).
    And after an append that failed (the sync of a new log's name or of a line failed
    with EIO, or the disk was full), the program stops on Ctrl-C as it did before: a
    writer leaves the program's handling of Ctrl-C as it found it, whatever fails."""
    import threading

    first = {"role": "user", "content": "first"}
    second = {"role": "user", "content": "second"}
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    left = []       # (task, what failed, the Ctrl-C handler after it)
    try:
        log = lesson.SessionLog(sessions, "quest-1", durable=True)
        pressed, outcome = [], "returned"
        try:
            log.append(first)
            before = log.path.stat().st_size

            def sync_while_ctrl_c_is_pressed(real):
                def sync(fd):
                    info = os.fstat(fd)
                    if (not pressed and stat.S_ISREG(info.st_mode)
                            and info.st_size > before):
                        pressed.append(fd)
                        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
                    return real(fd)
                return sync
            with monkeypatch.context() as pressing:
                for name in ("fsync", "fdatasync"):
                    pressing.setattr(os, name,
                                     sync_while_ctrl_c_is_pressed(getattr(os, name)))
                log.append(second)
        except KeyboardInterrupt:
            outcome = None
        except NotImplementedError:
            log.close()
            raise
        except Exception as error:      # noqa: BLE001 - reported in words below
            outcome = f"raised {described(error)}"
        retried = "not tried"
        try:
            if pressed and outcome is None:
                # The caller's retry, after the Ctrl-C, of the message in doubt
                log.append(second)
                retried = "returned"
        except lesson.WriterStopped:
            retried = None
        except NotImplementedError:
            raise
        except Exception as error:      # noqa: BLE001 - reported in words below
            retried = f"raised {described(error)}"
        finally:
            log.close()
        if pressed and outcome is not None:
            fail_in("01.5", "durable mode: the user pressed Ctrl-C (a real SIGINT) "
                    f"while the second line was synced, and append {outcome}, where "
                    "KeyboardInterrupt was expected: the user's Ctrl-C reaches the "
                    "caller, whenever it lands. A writer that ignores it while it "
                    "writes loses it (the program goes on as if nothing was pressed)")
        if pressed and retried is not None:
            copies = lines_of(log.path).count(second)
            fail_in("01.5", "durable mode: the user pressed Ctrl-C (a real SIGINT) "
                    "while the second line was synced, after write() had put it in "
                    "the file, and append raised KeyboardInterrupt; the caller's retry "
                    f"of the same message then {retried}, and the log holds it "
                    f"{copies} times, where WriterStopped and one copy were expected: "
                    "append raised after its line landed, so the writer stops, "
                    "however it handles the Ctrl-C (one put off until the line is done "
                    "still reaches the caller as a failure of that append)")

        def a_folder(fd):
            return stat.S_ISDIR(os.fstat(fd).st_mode)

        def a_file(fd):
            return stat.S_ISREG(os.fstat(fd).st_mode)

        def write_on_a_full_disk(fd, data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        for task, what, session, failure in [
                ("01.4", "the sync of a new log's name failed (EIO)", "quest-2",
                 lambda failing: fail_syncs(failing, a_folder)),
                ("01.5", "the sync of a line failed (EIO)", "quest-3",
                 lambda failing: fail_syncs(failing, a_file)),
                ("01.5", "the disk was full (write() refused the line, ENOSPC)",
                 "quest-4",
                 lambda failing: failing.setattr(os, "write", write_on_a_full_disk))]:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            with monkeypatch.context() as failing:
                log = lesson.SessionLog(sessions, session, durable=True)
                try:
                    if task == "01.5":
                        log.append(first)       # a log with a line: only it fails
                    failure(failing)
                    try:
                        log.append(second)
                    except OSError:
                        pass
                finally:
                    log.close()
            left.append((task, what, signal.getsignal(signal.SIGINT)))
    finally:
        signal.signal(signal.SIGINT, previous)
    for task, what, handler in left:
        if handler is not signal.default_int_handler:
            fail_in(task, f"durable mode: {what}, and append raised; after it, Ctrl-C "
                    f"is handled by {handler!r}, where it was Python's own handler, "
                    "which raises KeyboardInterrupt: the program no longer stops when "
                    "the user presses Ctrl-C. A writer leaves the program's handling "
                    "of Ctrl-C as it found it, whatever fails")


def interrupted_right_after_the_write(log, message):
    """Append `message` and raise KeyboardInterrupt at the first line of the log's code
    that runs once the line is in the file: the Ctrl-C that lands just after write()
    returned, at that moment exactly rather than when a timer happens to fire.

    Returns True when that happened, False when no line of that code ran after the
    write (the append then returned: there was no such moment to play)."""
    path = log.path
    before = path.stat().st_size if path.exists() else 0
    source = sys.modules[type(log).__module__].__file__
    fired = []

    def line_by_line(frame, event, arg):
        if (event == "line" and not fired and path.exists()
                and path.stat().st_size > before):
            fired.append(frame.f_lineno)
            raise KeyboardInterrupt
        return line_by_line

    def calls(frame, event, arg):
        return line_by_line if frame.f_code.co_filename == source else None

    previous = sys.gettrace()
    sys.settrace(calls)
    try:
        log.append(message)
    except KeyboardInterrupt:
        return bool(fired)
    finally:
        sys.settrace(previous)
    return False


@pytest.mark.task("01.5")
def test_a_ctrl_c_just_after_write_returned_stops_the_writer(lesson, sessions):
    """Ctrl-C just after write() returned, before the line is known to be whole: the
    line is in the file and append raised KeyboardInterrupt. The retry must raise
    WriterStopped, never write the message twice, however the writer is built: the
    moment between write() returning and the writer knowing its line whole is in doubt
    too, not only an error inside write() itself."""
    log = lesson.SessionLog(sessions, "quest-1")
    log.append({"role": "user", "content": "first"})
    message = {"role": "user", "content": "second"}
    if not interrupted_right_after_the_write(log, message):
        log.close()     # no line of the log's code ran after the write: no such moment
        return
    the_retry_is_refused(lesson, log, message,
                         "append was interrupted by Ctrl-C just after write() "
                         "returned, its line already in the file")


@pytest.mark.task("01.3")
@pytest.mark.parametrize("done_to_it", ["removed", "saved over"])
@pytest.mark.task("01.5")
def test_a_log_removed_under_its_writer_takes_no_more_messages(lesson, sessions, model,
                                                              town, done_to_it):
    """A person removes the log while its writer holds it open, or saves another file
    over it (as an editor does). The file the writer holds then has no name: a line
    written there is lost for every reader. The agent's next message is refused with
    an OSError that names the log, and is not kept as said: the agent's memory and
    whatever now has the log's name stay as they were. (The check is given in
    `_write`, before your code.)"""
    model.add(say("Hello."), say("Hello again."))
    path = sessions / "quest-1.jsonl"
    with lesson.SessionLog(sessions, "quest-1") as log:
        agent = lesson.Agent(model.client(), model=model.model, tools=town,
                             session=log)
        agent.run("Hello?")
        said = list(agent.messages)
        the_log(lesson, sessions)       # there, or the test fails saying why
        there = take_the_log_away(path, done_to_it)
        with raises(OSError, f"the log was {done_to_it} while its writer held it "
                    "open, and the agent's next run() wrote into the file no name "
                    "reaches: its messages are lost for every reader",
                    "quest-1.jsonl", unmatched="The error should name the log."):
            agent.run("Are you there?")
        try:
            agent.run("Still there?")
        except NotImplementedError:
            raise
        except (OSError, lesson.WriterStopped):
            pass
        else:
            now = path.read_bytes() if path.exists() else None
            pytest.fail(f"the log was {done_to_it} while its writer held it open; the "
                        "agent's first run() after it was refused, but the caller's "
                        "next one was saved, into the file that has the log's name "
                        f"since, which now holds {now!r}: that log lacks the "
                        "conversation's start that the agent's requests carry. Every "
                        "later turn should be refused too, until the session is "
                        "opened again", pytrace=False)
    assert agent.messages == said, (
        f"the log was {done_to_it}, and the next message could not be saved: the agent "
        "should not keep it as said; its conversation grew from "
        f"{[m.get('content') for m in said]} to "
        f"{[m.get('content') for m in agent.messages]}")
    now = path.read_bytes() if path.exists() else None
    assert now == there, (
        f"the log was {done_to_it}; what has its name now should stay as it was, "
        f"{there!r}, and it is {now!r}")


@pytest.mark.task("01.5")
def test_an_agent_whose_writer_stopped_goes_no_further(lesson, sessions, model, town,
                                                       monkeypatch):
    """After a write whose outcome is unknown (a durable line whose fsync failed with
    EIO: the line is in the file, maybe not on the disk), run() raises, and the same
    agent's next run() raises WriterStopped and writes nothing: the agent never opens
    its session again by itself to write past the doubt. The error is the writer's
    own, not one record makes of it, so that a caller catching WriterStopped sees it.
    So is the run after that one: the agent neither lets go of its session to go on
    in memory, nor ever takes a turn the log does not hold."""
    model.add(say("Hello."), say("Hello again."), say("Still here."))
    failing = [True]        # the first sync of a file fails, then none

    def fails(fd):
        if failing and not stat.S_ISDIR(os.fstat(fd).st_mode):
            failing.clear()
            return True
        return False
    fail_syncs(monkeypatch, fails)
    path = sessions / "quest-1.jsonl"
    runs = []
    with lesson.SessionLog(sessions, "quest-1", durable=True) as log:
        agent = lesson.Agent(model.client(), model=model.model, tools=town,
                             session=log)
        for text in ("Hello?", "Are you there?", "Still there?"):
            try:
                agent.run(text)
            except NotImplementedError:
                raise
            except Exception as error:      # noqa: BLE001 - judged below
                runs.append(error)
            else:
                runs.append(None)
            if len(runs) == 1:
                held = path.read_bytes() if path.exists() else b""
                doubt = log.in_doubt
            if len(runs) == 2:
                after = path.read_bytes() if path.exists() else b""
                remembered = list(agent.messages)
        last = path.read_bytes() if path.exists() else b""
        still_refuses = False   # the log refuses still, when the third run went on
        if isinstance(runs[1], lesson.WriterStopped) and not isinstance(
                runs[2], lesson.WriterStopped):
            try:
                log.append({"role": "user", "content": "Is the writer still stopped?"})
            except lesson.WriterStopped:
                still_refuses = True
            except Exception:       # noqa: BLE001 - any other outcome is judged below
                pass
        stopped = False
        if runs[1] is None and after == held:   # run() went on, yet wrote nothing
            try:
                log.append({"role": "user", "content": "Is the writer stopped?"})
            except lesson.WriterStopped:
                stopped = True      # append refuses: record hid its WriterStopped
            except Exception:       # noqa: BLE001 - any other outcome is judged below
                pass
    first, second, third = runs
    setting = ("durable mode; the fsync of the log's first line (the user's "
               "\"Hello?\") failed with EIO, after the line was written")
    cause = None if second is None else second.__cause__ or second.__context__
    if (after == held and agent.session is log and isinstance(first, OSError)
            and not isinstance(second, lesson.WriterStopped)
            and isinstance(cause, lesson.WriterStopped)):
        fail_in("01.3", f"{setting}; run() raised it, and the same agent's next run() "
                f"raised {described(second)}, made from the writer's WriterStopped: "
                "a caller that catches WriterStopped, to open the session again, "
                "misses it. Agent.record lets the log's errors reach the caller of "
                "run() as they are")
    if not isinstance(first, OSError):
        got = "returned" if first is None else f"raised {described(first)}"
        fail_in("01.3", f"{setting}, and run() {got}, where the OSError should reach "
                "its caller")
    if not doubt:
        fail_in("01.5", f"{setting}; run() raised, and the writer was left able to "
                "write (in_doubt not set): a line that may be in the log would be "
                "written again by a retry")
    if isinstance(second, lesson.WriterStopped) and after == held:
        if isinstance(third, lesson.WriterStopped) and last == held and (
                agent.messages == remembered):
            return
        got = "returned" if third is None else f"raised {described(third)}"
        refused = isinstance(third, lesson.WriterStopped) or still_refuses
        blamed = "01.3" if refused or agent.session is not log else "01.5"
        fail_in(blamed, f"{setting}; run() raised it, the same agent's next run() "
                f"raised WriterStopped, and the run after that {got}: its memory went "
                f"from {len(remembered)} to {len(agent.messages)} messages, and the "
                f"log grew by {len(last) - len(held)} bytes. The writer stays stopped, "
                "so every later run() raises WriterStopped and changes nothing: an "
                "agent that lets go of its session (or hides the error) goes on with "
                "turns the log does not hold")
    got = "returned" if second is None else f"raised {described(second)}"
    if second is not None and second is first and after == held:
        fail_in("01.3", f"{setting}; run() raised it, and the same agent's next run() "
                f"raised that very error again, {described(second)}, without handing "
                "its message to the log, whose append would have raised WriterStopped: "
                "Agent.record keeps no verdict of an earlier append (after a full "
                "disk, the caller frees some space and goes on with the same agent); "
                "each message goes to the log, and the log's own error reaches the "
                "caller")
    blamed = "01.3" if agent.session is not log else "01.2"
    if stopped and agent.session is log:
        fail_in("01.3", f"{setting}; run() raised it, and the same agent's next run() "
                f"{got}, though its log's append raises WriterStopped: Agent.record "
                "let the turn go on past a message the log refused. The error reaches "
                "the caller of run(), and only a new agent on a new SessionLog, which "
                "reads the log back, goes on")
    fail_in(blamed, f"{setting}; run() raised it, and the same agent's next run() "
            f"{got}, and the log grew by {len(after) - len(held)} bytes, where "
            "WriterStopped and no byte more were expected"
            + (" (the agent changed its session for another)" if blamed == "01.3"
               else "") + ": the line in doubt may be in the log, and going on "
            "writes after it a history the agent's memory does not match. Only a new "
            "agent on a new SessionLog, which reads the log back, goes on")


@pytest.mark.task("01.2")
def test_a_message_changed_between_two_appends_is_written_as_it_is_then(lesson,
                                                                      sessions):
    """A caller may reuse one message object, changing it before each append (one
    dict for each line the user types): each append writes the message as it is at
    that call, never the line an earlier append made of the same object."""
    said = {"role": "user", "content": "Hello."}
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append(said)
        said["content"] = "Where is the cave?"
        log.append(said)

    contents = [m["content"] for m in lines_of(the_log(lesson, sessions))]
    assert contents == ["Hello.", "Where is the cave?"], (
        "one message object was appended as 'Hello.', then its content changed to "
        "'Where is the cave?' and appended again; the log holds "
        f"{contents}: each line is the message as given at that append, whatever an "
        "earlier append made of the same object")


@pytest.mark.task("01.3")
def test_after_a_full_disk_the_same_agent_goes_on_once_there_is_room(lesson, sessions,
                                                                    model, town):
    """The disk was full as the user's message was saved (write() refused it whole:
    nothing written), and run() raised the disk's error. The caller frees some space
    and goes on with the same agent: its next message is saved and sent like any,
    since each message is tried on the log afresh. The error run() raised is the
    log's own, its error number (ENOSPC) with it: it is what tells the caller that
    freeing space helps."""
    model.add(say("Hello."))
    with lesson.SessionLog(sessions, "quest-1") as log:
        agent = lesson.Agent(model.client(), model=model.model, tools=town,
                             session=log)
        write, full = log._write, [True]
        disk_full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(log.path))

        def write_on_a_disk_full_once(data):
            if full:
                full.clear()
                raise disk_full
            write(data)
        log._write = write_on_a_disk_full_once
        with raises(OSError, "the disk was full as the user's message was saved, and "
                    "run() went on: the disk's error should reach its caller") as told:
            agent.run("Hello?")
        if told.value is not disk_full:
            fail_in("01.3", "the disk was full as the user's message was saved: the "
                    f"log's append raised {described(disk_full)}, error number "
                    f"{errno.ENOSPC} (ENOSPC), and run() raised another error, "
                    f"{described(told.value)}, error number {told.value.errno}: the "
                    "log's errors reach the caller of run() as they are, the very "
                    "error, whose number tells the caller that freeing space helps")
        try:
            answer = agent.run("Hello again?")
        except NotImplementedError:
            raise
        except Exception as error:      # noqa: BLE001 - reported in words below
            fail_in("01.3", "the disk was full as the user's first message was saved, "
                    "and run() raised it; then the disk had room again, and the same "
                    f"agent's next run() raised {described(error)}: the caller may "
                    "free some space and go on with the same agent, whose next message "
                    "is saved like any (an error of an earlier append is no verdict "
                    "kept)")
    held = lines_of(the_log(lesson, sessions))
    assert answer == "Hello." and held == [
        {"role": "user", "content": "Hello again?"},
        {"role": "assistant", "content": "Hello."}], (
        "after a full disk refused the first message, the same agent ran again once "
        f"there was room: it answered {answer!r} and the log holds {held}, where the "
        "second message and its answer were expected")
    sent = model.requests[-1]["messages"]
    assert sent == held[:1], (
        "after a full disk refused the user's first message, the same agent's next "
        f"request should carry what the log holds, {held[:1]}; it carried {sent}")
