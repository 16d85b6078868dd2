"""Lesson 05: one writer per session.

Run: pytest lessons/05_lock            (your code)
     pytest lessons/05_lock --solution (the reference)

Most of these tests start real processes (writer_process.py, next to this file) running
your agent.py. They take turns through pipes: the other process says a word when it has
done a step, and waits for a line from the test before the next one. Every process is
killed at the end of its test, whatever happens.
"""

import contextlib
import errno
import fcntl
import importlib.util
import json
import os
import platform
import queue
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from sessionlab.scripted import Crash, SimulatedCrash, say
from sessionlab.testing import (described, fail_in, in_child, keep_lines_large,
                                open_descriptors, raises, sleeps_of, unless_unfinished,
                                until_written, wait_past, with_file_size_limit)

WRITER = Path(__file__).with_name("writer_process.py")
HANG = 30   # seconds: only a guard against a test that would otherwise wait for ever
WAIT = 3    # seconds a writer may wait for the lock where the holder lets go at once
HOLD = 0.1  # seconds a holder keeps the lock while a writer with a timeout waits
# Seconds a waiting writer may take to get the lock once its holder lets go: "about
# LOCK_POLL_SECONDS" (0.05 s), with room for a busy machine to start the holder's step
LATE = 0.7  # a writer that sleeps a whole second between tries comes 0.9 s late
STAND_IN = "SESSIONLAB_UNLOCK_STAND_IN"


def _writer_module():
    spec = importlib.util.spec_from_file_location("sessionlab_lesson05_writer", WRITER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# What close() does in task 05.2's place while 05.2 is not written (the lock goes, its
# file stays), shared with the other processes the tests start
let_go = _writer_module().let_go


def stands_in(request):
    """Whether a test lets go through `let_go` while task 05.2 is not written: every
    test but those of 05.2, so that 05.1 is checked as soon as it is written."""
    return "05.2" not in {mark.args[0] for mark in request.node.iter_markers("task")}


@pytest.fixture(autouse=True)
def until_task_05_2_is_written(request, monkeypatch):
    """Every writer lets go in `_unlock` (task 05.2), on close. Until 05.2 is written, a
    test of another task lets go through `let_go` (the lock goes, its file stays); once
    it is, the student's own `_unlock` runs. The tests of 05.2 never use `let_go`."""
    if stands_in(request) and "lesson" in request.fixturenames:
        until_written(monkeypatch, request.getfixturevalue("lesson").SessionLog,
                      "_unlock", "05.2", let_go)


@contextlib.contextmanager
def handed_to_unlock(lesson):
    """The lock's descriptor (`_lock_fd`, None for none) that each close hands task
    05.2's `_unlock` while the block runs, both names the contract's: whether a writer
    still knew its lock when it was closed, and so whose code a lock file left behind
    is (05.1's, that forgot it, or 05.2's, that was given it). The class is as it was
    once the block ends."""
    given, unlock = [], lesson.SessionLog._unlock
    own = "_unlock" in vars(lesson.SessionLog)

    def unlocking(log):
        given.append(log._lock_fd)
        return unlock(log)

    lesson.SessionLog._unlock = unlocking
    try:
        yield given
    finally:
        if own:
            lesson.SessionLog._unlock = unlock
        else:
            del lesson.SessionLog._unlock


class Other:
    """Another process running writer_process.py on the lesson module under test
    (letting go through `let_go` while 05.2 is not written, if `stand_in`)."""

    def __init__(self, module, folder, session_id, action, *args, stand_in=False):
        environment = {key: value for key, value in os.environ.items()
                       if key != STAND_IN}
        if stand_in:
            environment[STAND_IN] = "1"
        self.errors = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [
                sys.executable,
                str(WRITER),
                module,
                str(folder),
                session_id,
                action,
                *map(str, args),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            text=True,
            env=environment,
        )
        self.pid = self.process.pid
        self.lines = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)    # the process closed its output: it has ended

    def expect(self, word):
        """Wait until the process says its next line, which must start with `word`."""
        try:
            line = self.lines.get(timeout=HANG)
        except queue.Empty:
            raise AssertionError(
                f"process {self.pid} said nothing for {HANG} s while the test waited "
                f"for {word!r}"
            ) from None
        if line is None or not line.startswith(word):
            self.stop()
            self.errors.seek(0)
            errors = self.errors.read().decode(errors="replace")
            if "NotImplementedError: task " in errors:
                # The other process ran into a task not written yet:
                # report it as this test's own.
                raise NotImplementedError(
                    errors.rsplit("NotImplementedError: ", 1)[1].strip()
                )
            said = "nothing more (it ended)" if line is None else repr(line)
            raise AssertionError(
                f"process {self.pid} was expected to say {word!r} and said {said}"
                f"{last_error(errors)}. Its error output:\n{errors[-3000:]}"
            )
        return line

    def go(self):
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def kill(self):
        os.kill(self.pid, signal.SIGKILL)
        self.process.wait()

    def stop(self):
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        # The reader meets the end of the output now that the process is gone: wait
        # for it, so that every descriptor of this process is closed before the next
        # test counts the open ones.
        self.reader.join(timeout=HANG)
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass

    def close(self):
        """stop(), and close the file that kept the process's error output."""
        self.stop()
        self.errors.close()


def last_error(errors):
    """The error a process ended on, in words first: ", after OSError: ..." (with what a
    raw errno means where a file is cut or written), or "" when it printed none."""
    lines = [line.strip() for line in errors.strip().splitlines() if line.strip()]
    if not lines or not lines[-1][:1].isalpha() or "Error" not in lines[-1]:
        return ""
    found, call = lines[-1], (lines[-2] if len(lines) > 1 else "")
    if ("[Errno 22]" in found and "ftruncate" in call) or (
            "[Errno 9]" in found and "write" in call):
        found += (" (the call that failed cuts or writes a file, through a descriptor "
                  "opened without the right to write)")
    return ", after " + found


@pytest.fixture
def other(request, lesson, sessions):
    """other(action, ...) starts another process on `sessions`;
    all are killed after the test."""
    started = []

    def start(action, *args, session_id="quest-1"):
        process = Other(lesson.__file__, sessions, session_id, action, *args,
                        stand_in=stands_in(request))
        started.append(process)
        return process

    yield start
    for process in started:
        process.close()


# As writer_process.py writes it
FIRST = {"role": "user", "content": "Ask the elder about the cave."}


def present(path):
    """`path`, which must be there: a session's log the test wrote or saw written. Its
    absence fails the test in words (a close() that removed the log, not its lock)."""
    if not path.exists():
        pytest.fail(f"{path.name}, a session's log, should be there, and it is gone: "
                    "something removed it (closing a writer removes its lock file, "
                    f"{path.stem}.lock, and never the log)", pytrace=False)
    return path


def file_misnamed(error, path):
    """Why the OSError `error` does not name `path` as an OSError names its file, or
    None. Its words must hold the path; and the file it gives to callers (`filename`,
    which a program shows or acts on: "cannot use <file>"), when it gives one, must be
    that path, as a string or a Path, not other words put in its place."""
    if str(path) not in str(error):
        return (f"it does not name {path} (its name alone does not say which "
                f"folder's: sessions may live in many); it says: {error}")
    given = error.filename
    if given is not None and (not isinstance(given, (str, os.PathLike))
                              or os.fspath(given) != str(path)):
        return (f"its filename, the file a caller is told it is about, is {given!r}, "
                f"not the lock file {str(path)!r} (OSError's arguments are errno, "
                f"words, file, in that order); it says: {error}")
    return None


def lines_of(path):
    """The log's lines as JSON;
    a line that is not whole JSON fails the test, saying where."""
    found = []
    for number, raw in enumerate(present(path).read_bytes().split(b"\n"), start=1):
        if raw:
            try:
                found.append(json.loads(raw))
            except ValueError:
                raise AssertionError(
                    f"line {number} of {path.name} is not whole JSON (torn, or spliced "
                    f"with another line): it starts {raw[:60]!r} and ends {raw[-60:]!r}"
                ) from None
    return found


def contents(path):
    return [entry.get("content") for entry in lines_of(path)]


def lock_record(path):
    """The holder's record in a lock file, as a dict; fails the test, in words, if the
    file holds no JSON object."""
    data = path.read_bytes() if path.exists() else None
    try:
        record = json.loads(data)
    except (TypeError, ValueError):
        record = None
    if not isinstance(record, dict):
        pytest.fail(f"{path.name} should hold the holder's record as one JSON object "
                    f"{{\"pid\", \"host\", \"since\"}}; it holds {data!r:.200}",
                    pytrace=False)
    return record


def record_in(data):
    """The JSON object `data` (a lock file's bytes, or None) holds, or None."""
    try:
        record = json.loads(data) if data is not None else None
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def watch_unlock(monkeypatch, lesson, lock, record) -> list[str]:
    """Note, in the list returned, what task 05.2's _unlock does wrong while a refused
    writer goes its way out (its close runs _unlock, and it holds no lock: no
    descriptor in _lock_fd): an error it raises, or the holder's lock file (`record`,
    its bytes) changed or gone. A test of 05.1 that meets it then says it is 05.2's
    (said_as_05_2), not the refusal's."""
    noted: list[str] = []
    real = lesson.SessionLog._unlock
    closed: list = []   # the logs whose _unlock has run once already (kept alive)

    def watched(log) -> None:
        ran = any(seen is log for seen in closed)
        if getattr(log, "_lock_fd", None) is not None and not ran:
            # The refusal (05.1's) left a descriptor's number behind: what the close
            # does with it is that refusal's mistake, said as 05.1's. (Left by an
            # earlier _unlock of the same log, it is 05.2's own: watched below.)
            return real(log)
        again = " (closed a second time)" if ran else ""
        closed.append(log)
        before = lock.read_bytes() if lock.exists() else None
        try:
            real(log)
        except NotImplementedError:
            raise
        except Exception as error:
            noted.append(f"closing a writer that holds no lock (refused it){again}, "
                         f"_unlock raised {described(error)}: it has nothing to let "
                         "go of")
            raise
        after = lock.read_bytes() if lock.exists() else None
        if before == record and after != record:
            noted.append("closing a writer that holds no lock (refused it), _unlock "
                         "left the holder's lock file, which said "
                         f"{record!r}, " + ("gone" if after is None else f"saying "
                                            f"{after!r}") + ": a newcomer would get "
                         "in beside the holder; a log that holds no lock must leave "
                         "the holder's alone")

    monkeypatch.setattr(lesson.SessionLog, "_unlock", watched)
    return noted


def closes_twice_quietly(log, what: str, why: str) -> None:
    """Close `log` twice: neither close may raise (a task not written yet still says
    so, by its NotImplementedError)."""
    for time_ in ("once", "twice"):
        try:
            log.close()
        except NotImplementedError:
            raise
        except Exception as error:  # noqa: BLE001 - the failure is the point
            pytest.fail(f"{what} was closed {time_}, and close() raised "
                        f"{type(error).__name__}: {error}; {why}", pytrace=False)


@contextlib.contextmanager
def said_as_05_2(noted: list[str]):
    """Whatever the block raises, a mistake watch_unlock noted in it is said first."""
    try:
        yield
    finally:
        if noted:
            fail_in("05.2", noted[0])


# --- 05.1: a second writer is refused, by name (first: a student starts here) -----


@pytest.mark.key
@pytest.mark.task("05.1")
def test_a_second_writer_is_refused_with_an_error_naming_the_session_and_the_holder(
    lesson, sessions, other, model, town, monkeypatch
):
    """While another process writes the session, appending or resuming raises
    SessionBusy, at once, naming the session and the holder as its lock file names it,
    and leaves nothing open and the holder's record as it was."""
    holder = other("hold")
    holder.expect("holding")
    before = (sessions / "quest-1.jsonl").read_bytes()
    lock = sessions / "quest-1.lock"
    record = lock.read_bytes() if lock.exists() else None
    descriptors = open_descriptors()
    unlocked = watch_unlock(monkeypatch, lesson, lock, record)

    with raises(lesson.SessionBusy,
                "another process holds quest-1, and this writer appended to it "
                "anyway, with no error") as busy:
        with said_as_05_2(unlocked):
            with lesson.SessionLog(sessions, "quest-1") as log:
                log.append({"role": "user", "content": "Me too."})
    with raises(lesson.SessionBusy,
                "another process holds quest-1, and an agent resumed it anyway (a "
                "resume may repair the tail: it is a writer too)"):
        with said_as_05_2(unlocked):
            with lesson.SessionLog(sessions, "quest-1") as log:
                lesson.Agent(model.client(), model=model.model, tools=town,
                             session=log)

    message = str(busy.value)
    assert "quest-1" in message, (
        f"SessionBusy should name the session 'quest-1': {message}"
    )
    assert busy.value.session_id == "quest-1", (
        "SessionBusy's session_id should be the session's id, 'quest-1', for a caller "
        f"to act on (fork it, wait for it); it is {busy.value.session_id!r}")
    assert str(holder.pid) in message, (
        f"SessionBusy should name the holder, process {holder.pid}: {message}"
    )
    assert busy.value.pid == holder.pid, (
        f"SessionBusy's pid should be the holder's, {holder.pid}, for a caller to act "
        f"on; it is {busy.value.pid!r}")
    named = record_in(record)
    if named is not None:
        assert busy.value.holder == named, (
            f"SessionBusy should name the holder as quest-1.lock names it, {named}, "
            "so that it says which process, on which host, has held the session "
            f"since when; it was given {busy.value.holder} and says: {message}")
    assert (sessions / "quest-1.jsonl").read_bytes() == before, (
        "a refused writer must not write a byte"
    )
    after = lock.read_bytes() if lock.exists() else None
    assert after == record, (
        f"two writers were refused, and the holder's lock file, which said {record!r}, "
        + ("is gone" if after is None else f"now says {after!r}")
        + ": a refused writer must leave the holder's record as it was, or the next "
        "one refused cannot say who holds the session")
    assert open_descriptors() == descriptors, (
        "two writers were refused at once, and the process now holds "
        f"{open_descriptors() - descriptors} more open descriptor(s) than before: a "
        "refused writer keeps nothing open (a program that tries many busy sessions "
        "would run out of descriptors, one for each refusal)")


# --- closing a log that holds no lock (05.2), before the other tests close ---------


@pytest.mark.task("05.2")
def test_closing_a_log_that_never_took_the_lock_leaves_the_holders_lock_alone(
        lesson, sessions):
    """A reader loads the session while another holds it (here the test itself holds
    quest-1.lock, flocked, with its record), and closes, twice: it never held the lock,
    so closing raises nothing and leaves the holder's lock file as it was."""
    sessions.mkdir(parents=True, exist_ok=True)
    (sessions / "quest-1.jsonl").write_text(json.dumps(FIRST) + "\n", encoding="utf-8")
    lock = sessions / "quest-1.lock"
    held = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(held, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                   "since": "2026-01-01T00:00:00+00:00"}).encode())
        before = lock.read_bytes()
        reader = lesson.SessionLog(sessions, "quest-1")
        reader.load()
        closes_twice_quietly(reader, "a reader that never took the lock",
                             "it has nothing to let go of")
        after = lock.read_bytes() if lock.exists() else None
        assert after == before, (
            "a reader that never took the lock closed, and quest-1.lock, the holder's, "
            + ("is gone" if after is None else "changed")
            + ": a newcomer would now make a new lock file and get in beside the "
            "holder; closing a log that holds no lock must leave the holder's alone")
    finally:
        os.close(held)


def newcomer_gets_in(lesson, sessions) -> bool:
    """Whether a newcomer that does not wait gets into quest-1 now (it appends one
    message if it does, and closes either way)."""
    newcomer = lesson.SessionLog(sessions, "quest-1", timeout=0)
    try:
        newcomer.append({"role": "user", "content": "Me too."})
        return True
    except lesson.SessionBusy:
        return False
    finally:
        newcomer.close()


@pytest.mark.task("05.2")
@pytest.mark.task("05.1")
def test_a_process_forked_from_the_writer_lets_go_of_nothing_when_it_closes(
        lesson, sessions):
    """A writer holds quest-1, and the program forks (a worker, a subprocess started
    the old way): the child holds copies of the writer's descriptors and of the
    SessionLog, and closes it, as a with block or a clean-up does. The lock is the
    parent's: the child's close leaves quest-1.lock where it is, a newcomer is still
    refused, and the parent goes on writing. (A child that removed the name would let
    a newcomer make a new lock file beside the held one, and in.)"""
    base = open_descriptors()
    log = lesson.SessionLog(sessions, "quest-1")
    log.append(FIRST)
    writer_holds = open_descriptors() - base    # its log's and its lock's
    lock = sessions / "quest-1.lock"
    try:
        before = lock.read_bytes()

        def close_the_copy():
            """Close the inherited writer; how many descriptors it left open."""
            held = open_descriptors()
            log.close()
            return held - open_descriptors()

        closed = unless_unfinished(in_child(close_the_copy))
        assert isinstance(closed, int), (
            "a process forked from quest-1's writer closed the writer it inherited, "
            f"and its close failed: {closed}. Closing a copy of a writer lets go of "
            "the copy's descriptors, raising nothing")
        assert closed == writer_holds, (
            "a process forked from quest-1's writer closed the writer it inherited, "
            f"which held {writer_holds} descriptors (its log's and its lock's), and "
            f"{closed} of them were closed: the copy's descriptors are its own, and "
            "a process that closes what it inherited keeps none of them open (the "
            "lock itself stays the parent's, through the parent's own descriptor)")
        after = lock.read_bytes() if lock.exists() else None
        if after != before:
            fail_in("05.2", "a process forked from quest-1's writer closed the writer "
                    "it inherited, and quest-1.lock "
                    + ("is gone" if after is None else "changed")
                    + " while the parent still holds the lock: a newcomer now makes "
                    "a new lock file, takes it, and writes beside the parent. The "
                    "lock, and the file it is under, are the process's that took it")
        assert not newcomer_gets_in(lesson, sessions), (
            "a process forked from quest-1's writer closed the writer it inherited, "
            "and then a newcomer got into quest-1 while the parent still held it: "
            "two writers in one log")
        log.append({"role": "user", "content": "Still here."})
    finally:
        log.close()
    assert not lock.exists(), (
        "the parent closed in the end, and quest-1.lock is still there: the lock file "
        "goes when the process that took it lets go")
    assert contents(sessions / "quest-1.jsonl") == [FIRST["content"], "Still here."], (
        "the parent went on writing after its forked copy closed; the log should hold "
        f"its two messages only: {contents(sessions / 'quest-1.jsonl')}")


@pytest.mark.task("05.2")
def test_a_process_forked_twice_from_the_writer_lets_go_of_nothing_when_it_closes(
        lesson, sessions):
    """A writer holds quest-1, and the program becomes a daemon (or starts a worker
    that starts its own): it forks, and the child forks again. The grandchild holds
    copies of the writer's descriptors and of the SessionLog, and closes it. Its
    parent is not the writer's process, yet the lock is still that process's, not the
    grandchild's: quest-1.lock stays as it was, and a newcomer is still refused. Any
    process but the one that took the lock lets go of its copies only."""
    log = lesson.SessionLog(sessions, "quest-1")
    log.append(FIRST)
    lock = sessions / "quest-1.lock"
    try:
        before = lock.read_bytes()

        def close_the_copy():
            log.close()
            return [os.getpid(), os.getppid()]

        closed = unless_unfinished(in_child(
            lambda: unless_unfinished(in_child(close_the_copy))))
        assert isinstance(closed, list), (
            "a process forked from a process forked from quest-1's writer closed the "
            f"writer it inherited, and its close failed: {closed}. Closing a copy of a "
            "writer lets go of the copy's descriptors, raising nothing")
        after = lock.read_bytes() if lock.exists() else None
        assert after == before, (
            f"process {closed[0]}, forked from process {closed[1]}, itself forked from "
            f"quest-1's writer (process {os.getpid()}), closed the writer it "
            "inherited, and quest-1.lock "
            + ("is gone" if after is None else "changed")
            + " while the writer still holds the lock: a newcomer now makes a new lock "
            "file, takes it, and writes beside the writer. A forked copy is told by "
            "its own pid, not its parent's: the lock, and the file it is under, are "
            "the process's that took it, however many forks away the copy is")
        assert not newcomer_gets_in(lesson, sessions), (
            "a process forked twice from quest-1's writer closed the writer it "
            "inherited, and then a newcomer got into quest-1 while the writer still "
            "held it: two writers in one log")
    finally:
        log.close()
    assert not lock.exists(), (
        "the writer closed in the end, and quest-1.lock is still there: the lock file "
        "goes when the process that took it lets go")


# --- 05.2: closing a writer, before the tests of 05.1 that close many -----------------


@pytest.mark.task("05.2")
def test_closing_a_writer_raises_nothing_and_leaves_its_log_whole(lesson, sessions):
    """A writer appends and closes, then closes again: neither close raises, and the
    session's log is still there, whole. Closing lets go of the lock and of its file,
    never of the log."""
    log = lesson.SessionLog(sessions, "quest-1")
    log.append(FIRST)
    closes_twice_quietly(log, "a writer that appended one message",
                         "closing a writer lets go of its lock and raises nothing "
                         "(called again, it finds nothing left to let go of)")
    assert (sessions / "quest-1.jsonl").exists(), (
        "a writer appended one message and closed, and quest-1.jsonl, the session's "
        "log, is gone: close() lets go of the lock and removes quest-1.lock, never the "
        "log")
    assert contents(sessions / "quest-1.jsonl") == [FIRST["content"]], (
        "a writer appended one message and closed: its log should hold that message, "
        f"whole; it holds {contents(sessions / 'quest-1.jsonl')}")


@pytest.mark.task("05.2")
@pytest.mark.parametrize(("durable", "rounds"), [(False, 100), (True, 10)],
                         ids=["plain", "durable"])
def test_writers_that_take_and_let_go_a_hundred_times_leave_no_descriptor_open(
        lesson, sessions, durable, rounds):
    """A hundred writers, one after the other, take the session (an append) and close:
    while one holds it, it has the log and the lock open, and once it has closed, the
    process holds exactly the descriptors it held before it began. A descriptor left
    open at each take or each close is one more for every writer the program ever made,
    until it can open no file at all. Durable writers (each write synced to the disk,
    and each name in its folder: ten of them) leave none either."""
    for round_ in range(1, rounds + 1):
        before = open_descriptors()
        log = lesson.SessionLog(sessions, "quest-1", durable=durable)
        writer = f"{'durable ' if durable else ''}writer {round_}"
        try:
            log.append({"role": "user", "content": f"Round {round_}."})
            held = open_descriptors() - before
            kept = getattr(log, "_lock_fd", None)   # where the page keeps it
        finally:
            log.close()
        left = open_descriptors() - before
        if left <= 0:
            continue
        if kept is None:
            fail_in("05.1", f"{writer} took the session but kept no descriptor "
                    "in self._lock_fd, so close() had none to let go of: once it had "
                    f"closed, {left} more descriptor(s) were still open, the lock with "
                    "them")
        if held > 2:
            fail_in("05.1", f"{writer} took the session with "
                    f"{held} descriptors open beyond those the process had before (the "
                    "log's and the lock's make two), and once it had closed, "
                    f"{left} more were still open: taking the lock opened a descriptor "
                    "(a second open of the lock file, maybe to look at its name, or of "
                    "its folder, to sync it) that nothing ever closes")
        pytest.fail(f"{writer} took the session and closed, and the process "
                    f"then held {left} more descriptor(s) than before it began: "
                    "letting go of the lock opened (or kept) a descriptor that nothing "
                    "closes, so every writer the program makes leaves one more open",
                    pytrace=False)


@pytest.mark.task("05.1")
def test_a_second_writer_in_the_same_process_is_refused_too(lesson, sessions):
    """Two SessionLog objects for one session in one process are two writers:
    the second (timeout 0, the default) is refused at once, with no sleep first."""
    with lesson.SessionLog(sessions, "quest-1") as first:
        first.append(FIRST)
        with sleeps_of(lesson) as slept, raises(
                lesson.SessionBusy, "a second writer in the holder's own process got "
                "the session: two SessionLog objects in one program both wrote "
                "quest-1") as busy:
            with lesson.SessionLog(sessions, "quest-1") as second:
                second.append({"role": "user", "content": "Me too."})

    assert str(os.getpid()) in str(busy.value), (
        f"the holder is this very process, {os.getpid()}; the error should still name "
        f"it: {busy.value}"
    )
    assert not slept, (
        f"a writer with timeout 0 (the default) slept {slept} before it was refused: "
        "with no time to wait it should be refused at once, not after a poll; a "
        "program that checks many sessions waits that long for each busy one")


@pytest.mark.task("05.1")
def test_reading_the_log_in_the_holders_process_keeps_the_lock(lesson, sessions, other):
    """load(),
    another reader and a fork in the holder's process do not drop its lock."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append(FIRST)
        log.load()
        with lesson.SessionLog(sessions, "quest-1") as reader:
            reader.load()
        (sessions / "quest-1.jsonl").read_bytes()
        lesson.fork(sessions, "quest-1", "what-if")

        intruder = other("try")
        said = intruder.expect("")

    assert said.startswith("busy") and str(os.getpid()) in said, (
        "after reading its own log (a load, another reader, a fork), this process must "
        "still hold the session: another process should be refused, naming pid "
        f"{os.getpid()}; it said {said!r}"
    )


@pytest.mark.task("05.1")
def test_the_lock_file_names_the_holder(lesson, sessions, other):
    """<id>.lock holds {"pid", "host", "since"}, and nothing else, while a writer holds
    the session, and only its owner may read it. The pid is the holder's process, the
    one to ask: a writer in a thread of its own names its process too, and a process
    forked from one that has held sessions (a server's worker) names itself, not its
    parent."""
    holder = other("hold")
    holder.expect("holding")

    lock = sessions / "quest-1.lock"
    assert lock.exists(), "while a writer holds the session, quest-1.lock should exist"
    record = lock_record(lock)
    assert sorted(record) == ["host", "pid", "since"], (
        "the lock file's record names the holder, pid, host and since, and nothing "
        f"else; it holds {record}")
    assert lock.stat().st_mode & 0o777 == 0o600, (
        "like the log, the lock file should be readable and writable by its owner only "
        f"(0o600); its mode is {oct(lock.stat().st_mode & 0o777)}: one its owner may "
        "not read and write cannot be taken over by the owner's next writer once it is "
        "stale (only root ignores a file's mode)")
    assert record.get("pid") == holder.pid, (
        f"the lock file should hold the holder's pid {holder.pid}: {record}"
    )
    assert record.get("host") == socket.gethostname(), f"and its host name: {record}"
    since = str(record.get("since"))
    try:
        zone = datetime.fromisoformat(since).tzinfo
    except ValueError:
        zone = None
    assert zone is not None, (
        f"and since when, as ISO 8601 with a zone (as now() gives it): {record}")

    def pid_named(session_id):
        """The pid the record of `session_id` names while its writer holds it."""
        with lesson.SessionLog(sessions, session_id) as log:
            log.append(FIRST)
            return lock_record(sessions / f"{session_id}.lock").get("pid")

    named = []
    thread = threading.Thread(target=lambda: named.append(pid_named("in-a-thread")))
    thread.start()
    thread.join(HANG)
    assert named == [os.getpid()], (
        "a writer in a thread of its own should name its process, "
        f"{os.getpid()}, in the lock file's pid; it named {named[:1]} (a thread's "
        "id is no process a user can find or ask)")
    pid_named("in-this-process")    # this process has held a session: now a copy
    in_copy = unless_unfinished(in_child(lambda: [os.getpid(),
                                                  pid_named("in-a-copy")]))
    assert isinstance(in_copy, list) and in_copy[0] == in_copy[1], (
        "a process forked from this one (which had held a session before) took a "
        "session, and its lock file should name that process, "
        + (f"{in_copy[0]}; it named {in_copy[1]}"
           + (" (the parent's pid, kept from before the fork)"
              if in_copy[1] == os.getpid() else "")
           if isinstance(in_copy, list) else f"but it failed: {in_copy}"))


@pytest.mark.task("05.1")
@pytest.mark.parametrize("host", ["quest-box", "Quest-Box.LAN", "bücherei-7",
                                  "工作站-2", "box-\udcff"],
                         ids=["ascii", "capitals", "latin", "cjk", "no-utf8"])
def test_the_lock_file_names_a_host_whatever_letters_its_name_holds(
        lesson, sessions, monkeypatch, host):
    """This host's name may hold letters beyond ASCII (two or three bytes each in
    UTF-8), or even bytes that are no UTF-8, which Python gives as lone surrogates. A
    writer takes over a stale lock file whose dead holder's record was longer than its
    own: the lock file then holds the new record whole, one JSON object naming this
    host as it is called (not as the environment may still say: HOSTNAME, exported by
    a shell before the host was renamed), and a second writer is refused naming that
    host."""
    sessions.mkdir(parents=True, exist_ok=True)
    lock = sessions / "quest-1.lock"
    stale = {"pid": a_pid_no_process_has(), "host": "a-much-longer-host-name." * 8,
             "since": "2026-01-01T00:00:00+00:00"}
    lock.write_text(json.dumps(stale), encoding="utf-8")   # killed long ago
    lock.chmod(0o600)
    # Every way the standard library tells this host's name gives that name
    real = os.uname()
    monkeypatch.setattr(socket, "gethostname", lambda: host)
    monkeypatch.setattr(os, "uname", lambda: os.uname_result(
        (real.sysname, host, real.release, real.version, real.machine)))
    monkeypatch.setattr(platform, "node", lambda: host)
    # What a shell exported when it started, before the host got its name: not it
    monkeypatch.setenv("HOSTNAME", "the-name-before")
    log = lesson.SessionLog(sessions, "quest-1")
    try:
        log.append(FIRST)
    except NotImplementedError:
        raise
    except Exception as error:
        log.close()
        pytest.fail(f"this host is called {host!r}, and the writer could not take the "
                    f"session: {described(error)}. The record names the host whatever "
                    "its name holds: letters beyond ASCII, or bytes that are no UTF-8 "
                    "(Python gives those as lone surrogates, and JSON spells each with "
                    "an escape)", pytrace=False)
    with log:
        data = lock.read_bytes()
        record = record_in(data)
        assert record is not None, (
            f"this host is called {host!r} ({len(host)} letters, "
            f"{len(host.encode('utf-8', 'surrogateescape'))} bytes), and the lock "
            "file a writer "
            f"took over holds no JSON object: it holds {data!r:.300}. The record is "
            "bytes: its length, where the file is cut after it, counts bytes, not "
            "letters")
        assert record.get("host") == host and record.get("pid") == os.getpid(), (
            f"the lock file should name this process, {os.getpid()}, and this host, "
            f"{host!r}, as it is called; it holds {record}"
            + (": HOSTNAME, in the environment, is what a shell exported when it "
               "started (here from before the host was renamed), not the host's name"
               if record.get("host") == "the-name-before" else ""))
        try:
            with lesson.SessionLog(sessions, "quest-1") as second:
                second.append(FIRST)
        except lesson.SessionBusy as busy:
            refused = busy.holder
        else:
            pytest.fail(f"a second writer got quest-1 while this process, on host "
                        f"{host!r}, held it", pytrace=False)
    assert refused.get("host") == host, (
        f"a writer refused while this process held the session, on host {host!r}, "
        f"should name that host as the lock file does; its error names {refused}")


@contextlib.contextmanager
def time_of_day_ahead(lesson, seconds):
    """While the block runs, the time of day reads `seconds` later than it is, however
    the lesson's modules read it: time.time(), and datetime.now() in every module of
    theirs that imported the class (now() among them). The clocks of the time that goes
    by are left alone."""
    real_time = time.time

    class Later(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.now(tz) + timedelta(seconds=seconds)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(time, "time", lambda: real_time() + seconds)
        for name, module in list(sys.modules.items()):
            ours = name == lesson.__name__ or name.startswith(lesson.__name__ + ".")
            if ours and getattr(module, "datetime", None) is datetime:
                patch.setattr(module, "datetime", Later)
        yield


def since_in(record):
    """The aware time a holder's record says in since, or None."""
    try:
        since = datetime.fromisoformat(str(record.get("since")))
    except ValueError:
        return None
    return since if since.tzinfo is not None else None


@pytest.mark.task("05.1")
def test_a_writer_written_to_again_writes_the_record_of_its_new_take(lesson, sessions):
    """A writer closed and written to again takes the lock anew, and the record it
    writes then is that take's own, as a new writer's would be: taken again an hour
    later (the time of day moved on, with no wait), it says since then, not since its
    first take; taken again in a process forked from this one (a worker that inherited
    the writer, closed), it names that process, and lets go there as any holder does
    (no lock file left behind, once its close removes one)."""
    lock = sessions / "quest-1.lock"
    log = lesson.SessionLog(sessions, "quest-1")
    try:
        with time_of_day_ahead(lesson, 3600):
            log.append(FIRST)
            first = since_in(lock_record(lock))
        log.close()
        # Whether a close removes its lock file (task 05.2 written)
        removes = not os.path.lexists(lock)
        assert first is not None, (
            "the lock file should say since when its holder holds the session, as ISO "
            f"8601 with a zone (as now() gives it); it holds {lock_record(lock)}")
        later = datetime.now(timezone.utc) + timedelta(hours=1)
        if abs((first - later).total_seconds()) < 600:
            ahead, began = 7200, later + timedelta(hours=1)
        else:   # the writer reads the time some way this test cannot move: wait
            ahead, began = 0, wait_past(first)
        with time_of_day_ahead(lesson, ahead):
            log.append({"role": "user", "content": "Back again."})
            again = since_in(lock_record(lock))
        log.close()
    finally:
        log.close()
    assert again is not None and again >= began - timedelta(seconds=2), (
        f"a writer took quest-1 (its record said since {first.isoformat()}), closed, "
        f"and was written to again at {began.isoformat()}: it took the lock anew, and "
        f"its record says since {again.isoformat() if again else again}, its first "
        "take's time. The record is the take's own, made when the lock is granted: "
        "another writer may have held the session in between")
    newcomer = lesson.SessionLog(sessions, "quest-1")
    try:
        newcomer.append({"role": "user", "content": "A newcomer."})
    except lesson.SessionBusy as busy:
        fail_in("05.2", "a writer took quest-1, closed, was written to again (which "
                "took the lock anew) and closed again; a newcomer was then refused, "
                f"this process still holding the session: {busy}. Every close lets go "
                "of the lock the writer holds then, the second as the first")
    finally:
        newcomer.close()

    def take_again_in_a_copy():
        log.append({"role": "user", "content": "From a worker."})
        try:
            named = lock_record(lock).get("pid")
        finally:
            log.close()
        return [os.getpid(), named, os.path.lexists(lock)]

    copy = unless_unfinished(in_child(take_again_in_a_copy))
    assert isinstance(copy, list), (
        "a process forked from this one inherited quest-1's writer, closed, and wrote "
        f"to it again, which takes the lock anew there; it failed: {copy}")
    child, named, left = copy
    assert named == child, (
        f"a process forked from this one ({child}) inherited quest-1's writer, closed, "
        f"and wrote to it again: its lock file names process {named}"
        + (" (this one, its parent, named at the writer's first take)"
           if named == os.getpid() else "")
        + f", where it should name the process that took the lock then, {child}: a "
        "refused writer is told whom to ask")
    assert not (removes and left), (
        f"a process forked from this one ({child}) inherited quest-1's writer, closed, "
        "wrote to it again, which took the lock there, and closed it: it left "
        "quest-1.lock behind, where every other close removes it. The take noted "
        "another process than its own as the one that took the lock (a forked copy's "
        "close leaves the file to the process that took it): note it at every take")


@pytest.mark.task("05.1")
def test_the_lock_file_is_never_readable_by_others(lesson, sessions, monkeypatch):
    """Under a umask of 022, the lock file is readable and writable by its owner only
    from the moment it exists: when the writer asks for the lock, and while it holds
    it."""
    lock = sessions / "quest-1.lock"
    seen = []
    real_flock = lesson.fcntl.flock

    def flock(fd, operation):
        if not seen and lock.exists():
            seen.append(lock.stat().st_mode & 0o777)
        return real_flock(fd, operation)

    monkeypatch.setattr(lesson.fcntl, "flock", flock)
    old_umask = os.umask(0o022)
    try:
        with lesson.SessionLog(sessions, "quest-1") as log:
            log.append(FIRST)
            seen.append(lock.stat().st_mode & 0o777 if lock.exists() else None)
    finally:
        os.umask(old_umask)

    loose = [mode for mode in seen if mode is not None and mode & 0o077]
    assert not loose, (
        "under a umask of 022 the lock file had mode "
        f"{' then '.join(oct(mode) for mode in seen if mode is not None)} (when the "
        "lock was asked for, then held): others could read who holds the session; it "
        "should be 0o600 from the moment it is made")


@pytest.mark.key
@pytest.mark.task("05.1")
def test_a_holder_killed_with_sigkill_blocks_no_one(lesson, sessions, other):
    """The kernel drops a dead holder's lock;
    its stale lock file is simply taken over."""
    holder = other("hold")
    holder.expect("holding")

    holder.kill()   # SIGKILL: no close(), no finally, no cleanup of any kind

    assert (sessions / "quest-1.lock").exists(), (
        "a killed holder cannot remove its lock file (it stays, stale)"
    )
    try:
        log = lesson.SessionLog(sessions, "quest-1")
        log.append({"role": "user", "content": "Day 2, after the crash."})
    except lesson.SessionBusy as busy:
        log.close()
        pytest.fail("the holder was killed with SIGKILL, and the next writer was "
                    "refused: a dead process still blocks the session, and would until "
                    f"someone deletes a file by hand. The refusal said: {busy}",
                    pytrace=False)
    with log:
        record = lock_record(sessions / "quest-1.lock")
        assert record.get("pid") == os.getpid(), (
            "the new writer should have written its own pid over the dead holder's: "
            f"{record}"
        )
    assert contents(sessions / "quest-1.jsonl") == [
        FIRST["content"],
        "Day 2, after the crash.",
    ]


@pytest.mark.task("05.1")
def test_a_stale_lock_file_naming_a_running_process_is_taken_over(lesson, sessions):
    """A lock file no one holds names a process that runs on this host: its holder
    died (before a reboot, say) and its pid went to another program since. The record
    is for people to read; only the lock says whether the session is held. A writer
    takes the session over at once, and the lock file then names it."""
    sessions.mkdir(parents=True, exist_ok=True)
    lock = sessions / "quest-1.lock"
    running = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                               stdin=subprocess.PIPE)
    try:
        lock.write_text(json.dumps({"pid": running.pid, "host": socket.gethostname(),
                                    "since": "2026-01-01T00:00:00+00:00"}),
                        encoding="utf-8")
        lock.chmod(0o600)
        log = lesson.SessionLog(sessions, "quest-1")
        try:
            log.append(FIRST)
        except lesson.SessionBusy as busy:
            log.close()
            pytest.fail(f"quest-1.lock names process {running.pid}, which runs here "
                        "but holds no lock (its pid was given to it after the holder "
                        f"died), and the writer was refused: {busy}. Only the lock "
                        "says whether the session is held: a pid goes to another "
                        "program once its holder is gone, and a session refused for "
                        "that stays blocked until someone deletes the file by hand",
                        pytrace=False)
        with log:
            record = lock_record(lock)
    finally:
        running.kill()
        running.wait()
        running.stdin.close()
    assert record.get("pid") == os.getpid(), (
        f"the writer took over a stale lock file naming process {running.pid}: it "
        f"should now name this process, {os.getpid()}; it holds {record}")


def descriptors_open() -> set[int]:
    """The numbers of this process's open descriptors (not the one that lists them)."""
    listed = [int(fd) for fd in os.listdir("/proc/self/fd")]
    return {fd for fd in listed if os.path.exists(f"/proc/self/fd/{fd}")}


AS_IT_ASKS = "as it asks for the lock"
OPENED = "just after it opened the lock file"


@pytest.mark.task("05.1")
@pytest.mark.parametrize(("timeout", "moment"),
                         [(WAIT, AS_IT_ASKS), (None, AS_IT_ASKS), (WAIT, OPENED)],
                         ids=["timeout=3", "timeout=None", "timeout=3, once opened"])
def test_a_writer_that_gets_the_lock_as_its_holder_lets_go_shares_it_with_no_one(
    lesson, sessions, monkeypatch, timeout, moment
):
    """The holder lets go, and its lock file goes, just as a second writer asks for the
    lock (its flock), or just after it opened quest-1.lock: the second writer (waiting
    up to 3 s, or as long as it takes) gets the session, no third writer gets in beside
    it, and no descriptor is left open."""
    descriptors = descriptors_open()
    lock = sessions / "quest-1.lock"
    holder = lesson.SessionLog(sessions, "quest-1")
    holder.append(FIRST)
    real_flock, real_open = lesson.fcntl.flock, os.open
    first_try = []
    held = []       # the holder's lock descriptor, if its close left it open

    def holder_lets_go(fd):
        first_try.append(fd)
        kept = getattr(holder, "_lock_fd", None)    # as the holder knows its own
        # The holder lets go, and its lock file is gone. (Its 05.2 removes the file;
        # until 05.2 is written, close() leaves it, and the test removes it here in
        # its place.)
        holder.close()
        lock.unlink(missing_ok=True)
        if kept is not None and kept in descriptors_open():
            held.append(kept)

    def flock(fd, operation):
        if not first_try:   # (once opened: a lock file opened other than by os.open)
            holder_lets_go(fd)
        return real_flock(fd, operation)

    def opening(path, *args, **kwargs):
        fd = real_open(path, *args, **kwargs)
        if not first_try and os.fspath(path) == str(lock):
            holder_lets_go(fd)
        return fd

    monkeypatch.setattr(lesson.fcntl, "flock", flock)
    if moment == OPENED:
        monkeypatch.setattr(os, "open", opening)
    second = lesson.SessionLog(sessions, "quest-1", timeout=timeout)
    try:
        second.append({"role": "user", "content": "second"})
    except OSError as error:
        failed = error
    else:
        failed = None
    finally:
        monkeypatch.setattr(os, "open", real_open)
    if failed is not None:      # outside the except: the words come first, alone
        second.close()
        if not first_try:
            holder.close()
        pytest.fail(f"the holder let go, and removed quest-1.lock, {moment}: the "
                    "second writer should then have taken the session with a new "
                    "quest-1.lock (the file it opened has no name any more: it is no "
                    "planted file, only a lock file let go), but it failed with "
                    f"{type(failed).__name__}: {failed}", pytrace=False)
    with second:
        monkeypatch.setattr(lesson.fcntl, "flock", real_flock)
        with raises(lesson.SessionBusy,
                    "the second writer locked the file its holder had just removed, "
                    "and a third writer then locked the new quest-1.lock: two "
                    "writers at once"):
            with lesson.SessionLog(sessions, "quest-1") as third:
                third.append({"role": "user", "content": "third"})
    if not first_try:   # the holder let go in flock above, if flock was ever called
        holder.close()

    assert contents(sessions / "quest-1.jsonl") == [FIRST["content"], "second"], (
        "the second writer locked the file its holder had just removed, and a third "
        "writer then locked the new quest-1.lock: two writers at once, both in the "
        f"log: {contents(sessions / 'quest-1.jsonl')}")
    left = descriptors_open() - descriptors
    if held and held[0] in left:
        # The holder knew its lock's descriptor, and its close did not let go of it.
        fail_in("05.2", "the holder's close() left its lock's descriptor open: the "
                "session stays locked by a writer that said it let go, until its "
                "process ends")
    assert not left, (
        f"every writer is closed, yet {len(left)} more descriptor(s) are open: the "
        "lock file found removed kept its descriptor")


@pytest.mark.task("05.1")
@pytest.mark.parametrize("timeout", [WAIT, None], ids=["timeout=3", "timeout=None"])
def test_a_writer_that_waits_gets_the_lock_once_the_holder_lets_go(
        lesson, sessions, other, monkeypatch, timeout):
    """With a timeout (None: no limit), a writer that finds the session taken waits,
    keeping no core busy, and gets it within about LOCK_POLL_SECONDS once the holder
    closes (after 0.1 s)."""
    holder = other("hold")
    holder.expect("holding")
    tries = []
    real_flock = lesson.fcntl.flock

    def flock(fd, operation):
        tries.append(operation)
        return real_flock(fd, operation)

    monkeypatch.setattr(lesson.fcntl, "flock", flock)
    # The holder lets go after HOLD s, told from another thread, whatever way the
    # writer waits (tries again and again, or a call that blocks until the lock is
    # free). It is another process: should its close fail, its end lets go all the
    # same, so no writer here waits for ever.
    told = []

    def let_go_now():
        told.append(time.monotonic())   # the holder lets go no sooner than this
        holder.go()

    letting_go = threading.Timer(HOLD, let_go_now)
    started = time.monotonic()
    letting_go.start()
    got = None
    try:
        with lesson.SessionLog(sessions, "quest-1", timeout=timeout) as waiting:
            waiting.append({"role": "user", "content": "Worth the wait."})
            got = time.monotonic()
    except lesson.SessionBusy as busy:
        wait = "as long as it takes" if timeout is None else f"up to {timeout} s"
        pytest.fail(f"with timeout={timeout} the writer should wait {wait}; the "
                    f"holder let go after {HOLD} s, but the writer was refused after "
                    f"{time.monotonic() - started:.2f} s: {busy}", pytrace=False)
    except OSError as error:
        if got is not None:     # out of close(): it held the session, and wrote
            fail_in("05.2", "the writer that waited got the session and wrote, then "
                    f"closing it raised {type(error).__name__}: {error}. Its holder, "
                    "in another process, had let go just before: when a holder "
                    "touches the lock file's name after letting go of the lock, the "
                    "next writer takes the same name for its own, and both remove it. "
                    "Remove the name while you still hold the lock")
        if "0 names" not in str(error):
            wait = "as long as it takes" if timeout is None else f"up to {timeout} s"
            fail_in("05.1", f"with timeout={timeout} the writer should wait {wait} for "
                    "the holder to let go, then write; it raised "
                    f"{type(error).__name__}: {error}. A session another writer holds "
                    "is waited for, and past the timeout refused with SessionBusy, "
                    "which names the holder")
        # The file it was granted lost its name between two looks: only the holder's
        # close removes it, and only after letting go can a waiter hold it then.
        fail_in("05.2", "the waiting writer was granted the lock and then found its "
                f"lock file removed ({error}): the holder removed quest-1.lock after "
                "letting go of the lock. Remove the name while you still hold it")
    finally:
        letting_go.cancel()
        letting_go.join()
    waited = time.monotonic() - started

    assert waited >= HOLD, (
        f"the writer got the session {waited:.2f} s after it asked, but its holder let "
        f"go only after {HOLD} s: for a while both held it")
    poll = lesson.LOCK_POLL_SECONDS
    assert len(tries) <= 5 + 2 * waited / poll, (
        f"with timeout={timeout}, the writer tried flock {len(tries)} times in the "
        f"{waited:.2f} s it waited: it kept a core busy (one try every "
        f"LOCK_POLL_SECONDS, {poll} s, is about {waited / poll:.0f}); a writer that "
        "waits minutes for a busy session would burn a core all along")
    assert contents(sessions / "quest-1.jsonl") == [
        FIRST["content"],
        "Worth the wait.",
    ], (
        "a writer with a timeout should wait, and write once the holder let go; the "
        f"log holds {contents(sessions / 'quest-1.jsonl')}"
    )
    if not told:
        pytest.fail(f"the writer got the session {got - started:.2f} s after it asked, "
                    "before its holder was even told to let go: for a while both held "
                    "it", pytrace=False)
    late = got - told[0]
    assert late < LATE, (
        f"the holder was told to let go {told[0] - started:.2f} s after the writer "
        f"asked, and the writer got the session only {late:.2f} s after that (more "
        f"than {LATE} s): it should get it within about LOCK_POLL_SECONDS "
        f"({lesson.LOCK_POLL_SECONDS} s) of the holder letting go; a user whose "
        "writer waits for a busy session sits idle that long after it is free")


@pytest.mark.task("05.1")
def test_a_writer_that_waited_says_since_when_it_holds_the_session(lesson, sessions,
                                                                   monkeypatch):
    """A writer waits for the session, and its holder (in this process) lets go in a
    later second than the one the writer began to wait in: the record the writer then
    writes says since when it holds the session (now(), once the lock is granted), not
    since when it asked. The host was renamed while it waited (hostnamectl, a container
    given its name late): the record names the host as the system calls it once the
    lock is granted, not as it was called when the writer began to ask."""
    holder = lesson.SessionLog(sessions, "quest-1")
    holder.append(FIRST)
    lock = sessions / "quest-1.lock"
    outcome = []

    def write():
        try:
            with lesson.SessionLog(sessions, "quest-1", timeout=HANG) as log:
                log.append({"role": "user", "content": "Worth the wait."})
                outcome.append(lock.read_bytes() if lock.exists() else b"")
        except BaseException as error:   # noqa: B036 (reported below)
            outcome.append(error)

    thread = threading.Thread(target=write)
    thread.start()
    try:
        time.sleep(0.1)     # the writer has asked by now, and waits
        asked = datetime.now(timezone.utc).replace(microsecond=0)
        let_go_at = wait_past(asked)    # the holder lets go in the next second
        # The host gets its new name while the writer waits: every way the standard
        # library tells this host's name gives the new one from now on
        real = os.uname()
        monkeypatch.setattr(socket, "gethostname", lambda: "renamed-host")
        monkeypatch.setattr(os, "uname", lambda: os.uname_result(
            (real.sysname, "renamed-host", real.release, real.version, real.machine)))
        monkeypatch.setattr(platform, "node", lambda: "renamed-host")
    finally:
        let_go(holder)     # as 05.1 lets go, whatever 05.2's close does
        thread.join(HANG)
        holder.close()
    if not outcome or not isinstance(outcome[0], bytes):
        pytest.fail(f"the holder let go, and the writer waiting for it "
                    f"(timeout={HANG}) should then have appended; it "
                    + (f"raised {type(outcome[0]).__name__}: {outcome[0]}" if outcome
                       else f"was still waiting after {HANG} s"), pytrace=False)
    try:
        since = datetime.fromisoformat(str(json.loads(outcome[0]).get("since")))
    except (ValueError, AttributeError):
        since = None
    assert since is not None and since.tzinfo is not None, (
        "the lock file should name the holder with since, as ISO 8601 with a zone (as "
        f"now() gives it); it holds {outcome[0]!r:.200}")
    assert since >= let_go_at, (
        f"the writer began to wait at {asked.isoformat()}, and got the session once "
        f"its holder let go, at {let_go_at.isoformat()} or later; its record says "
        f"since {since.isoformat()}, before it held the session: since is when the "
        "writer took the session, now() once the lock is granted, not when it began to "
        "ask")
    host = json.loads(outcome[0]).get("host")
    assert host == "renamed-host", (
        "the host was renamed, to renamed-host, while the writer waited for quest-1; "
        f"once granted the lock, the writer's record names the host {host!r}: it "
        "should name the host as the system calls it when the writer becomes the "
        "holder (asked once the lock is granted), not as it was called when the "
        "writer began to ask")


@pytest.mark.task("05.1")
def test_a_writer_that_times_out_names_the_holder(lesson, sessions, other, monkeypatch):
    """A timeout only delays the refusal: SessionBusy still names the session and the
    holder, once the whole timeout has passed. While it waits, the writer keeps no core
    busy, sleeps no longer than LOCK_POLL_SECONDS between tries, and the descriptors it
    holds do not grow with its tries; once refused, it holds none."""
    holder = other("hold")
    holder.expect("holding")
    lock = sessions / "quest-1.lock"
    named = record_in(lock.read_bytes() if lock.exists() else None)
    tries = []
    real_flock = lesson.fcntl.flock
    descriptors = open_descriptors()

    def flock(fd, operation):
        tries.append(open_descriptors() - descriptors)  # held at this try
        return real_flock(fd, operation)

    monkeypatch.setattr(lesson.fcntl, "flock", flock)
    started = time.monotonic()
    with sleeps_of(lesson) as slept, raises(
            lesson.SessionBusy, "another process holds quest-1 and a writer with "
            "timeout=0.2 appended anyway") as busy:
        with lesson.SessionLog(sessions, "quest-1", timeout=0.2) as log:
            log.append({"role": "user", "content": "Me too."})
    waited = time.monotonic() - started

    assert str(holder.pid) in str(busy.value), (
        f"the error should name process {holder.pid}: {busy.value}"
    )
    assert busy.value.session_id == "quest-1", (
        "refused past its timeout, the writer's SessionBusy should carry the "
        "session's id, 'quest-1', for a caller to act on (fork it, wait again), as a "
        f"writer refused at once does; it is {busy.value.session_id!r}")
    if named is not None:
        assert busy.value.holder == named, (
            "refused past its timeout, SessionBusy should name the holder as "
            f"quest-1.lock names it, {named}; it was given {busy.value.holder}")
    assert waited >= 0.2, (
        f"a writer with timeout=0.2 was refused after {waited:.3f} s: it should wait "
        "the whole timeout for the holder to let go, and give up only past it")
    poll = lesson.LOCK_POLL_SECONDS
    assert not [seconds for seconds in slept if seconds > 1.5 * poll], (
        f"between its tries the writer slept {sorted(set(slept))} s, where "
        f"LOCK_POLL_SECONDS is {poll} s: once the holder lets go, a writer that "
        "sleeps that long comes that much later than the next poll would; sleep at "
        "most LOCK_POLL_SECONDS between tries")
    assert len(tries) <= 20, (
        f"in 0.2 s the writer tried flock {len(tries)} times: waiting, it kept a core "
        f"busy (one try every LOCK_POLL_SECONDS, {lesson.LOCK_POLL_SECONDS} s, is "
        "about four)")
    assert not [held for held in tries[1:] if held > tries[0]], (
        f"while it waited, the writer held {tries} more descriptor(s) than before at "
        "its successive tries: every refused try kept its descriptor open until the "
        "writer gave up. A writer that waits minutes for a busy session (timeout=None) "
        "would run out of descriptors (a process may hold about a thousand), and then "
        "fail at everything it opens")
    assert open_descriptors() == descriptors, (
        f"after {len(tries)} refused tries the process holds "
        f"{open_descriptors() - descriptors} more open descriptor(s): a descriptor "
        "that stays open for every refused try adds up, until the process can open no "
        "file at all")


@pytest.mark.task("05.1")
def test_a_waiting_writer_keeps_no_refused_try_open_while_it_sleeps(
        lesson, sessions, monkeypatch):
    """A writer with timeout=0.2 waits for a session this process holds: at each of
    its sleeps between tries it holds no descriptor of a refused try, for a try that
    was refused is over (a Ctrl-C in that sleep, or a wait of hours with other work
    to do, would otherwise keep it)."""
    holder = lesson.SessionLog(sessions, "quest-1")
    holder.append(FIRST)
    real_sleep = time.sleep
    held = []
    descriptors = open_descriptors()

    def sleep(seconds):
        held.append(open_descriptors() - descriptors)
        real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", sleep)
    try:
        with raises(lesson.SessionBusy,
                    "this process held quest-1 for the whole wait, and a writer with "
                    "timeout=0.2 appended anyway"):
            with lesson.SessionLog(sessions, "quest-1", timeout=0.2) as log:
                log.append({"role": "user", "content": "Me too."})
    finally:
        monkeypatch.setattr(time, "sleep", real_sleep)
        holder.close()
    assert not any(held), (
        f"a writer waiting for a busy session slept {len(held)} times between its "
        f"tries, holding {held} more descriptor(s) than before at each sleep: the "
        "refused try's file stayed open while it slept. Close it as soon as it is "
        "refused; a Ctrl-C in the sleep would leave it open for good")


# Python's clocks of the time that goes by (never set back): a writer may count its
# wait on any of them, so a test that moves the time moves them all
CLOCKS = ("monotonic", "perf_counter", "monotonic_ns", "perf_counter_ns")


def clocks_moved(monkeypatch, ahead):
    """Make each of CLOCKS read `ahead()` seconds more than it would (`ahead` is asked
    at each look); returns the real clocks, for clocks_back."""
    real = {name: getattr(time, name) for name in CLOCKS}
    for name, clock in real.items():
        if name.endswith("_ns"):
            monkeypatch.setattr(time, name,
                                lambda clock=clock: clock() + round(ahead() * 1e9))
        else:
            monkeypatch.setattr(time, name, lambda clock=clock: clock() + ahead())
    return real


def clocks_back(monkeypatch, real):
    """Put back the clocks clocks_moved replaced."""
    for name, clock in real.items():
        monkeypatch.setattr(time, name, clock)


@pytest.mark.task("05.1")
def test_a_writer_gives_up_at_its_timeout_however_slow_each_try_is(
        lesson, sessions, monkeypatch):
    """On a machine so busy that each try of the lock takes 0.2 s, a writer with
    timeout=0.4 still gives up about when its timeout has passed (at its next try): the
    timeout counts the time that went by, tries included, not the sleeps between
    them. And on one so busy that the writer is held up between any two looks at the
    clock (each finds 0.6 s more gone than the last), a writer with timeout=1 is still
    refused with SessionBusy once its timeout has passed, never with an error of its
    own arithmetic: the time left, as one look found it, may be gone by the next."""
    holder = lesson.SessionLog(sessions, "quest-1")
    holder.append(FIRST)
    real_flock, real_clocks = lesson.fcntl.flock, None
    slow, timeout = 0.2, 0.4

    def flock(fd, operation):
        time.sleep(slow)    # a busy machine: the call comes back late
        return real_flock(fd, operation)

    looks = []

    def held_up():
        looks.append(None)  # held up before each look: 0.6 s more gone every time
        return 0.6 * len(looks)

    monkeypatch.setattr(lesson.fcntl, "flock", flock)
    started = time.monotonic()
    try:
        with raises(lesson.SessionBusy,
                    f"this process held quest-1 for the whole wait, and a writer with "
                    f"timeout={timeout} appended anyway"):
            with lesson.SessionLog(sessions, "quest-1", timeout=timeout) as log:
                log.append({"role": "user", "content": "Me too."})
        waited = time.monotonic() - started
        monkeypatch.setattr(lesson.fcntl, "flock", real_flock)
        real_clocks = clocks_moved(monkeypatch, held_up)
        try:
            with lesson.SessionLog(sessions, "quest-1", timeout=1) as log:
                log.append({"role": "user", "content": "Me too."})
            leapt = "it appended, while this process held quest-1"
        except lesson.SessionBusy:
            leapt = ""
        except Exception as error:  # noqa: BLE001 - said below, in words
            leapt = f"it raised {described(error)}"
        finally:
            clocks_back(monkeypatch, real_clocks)
    finally:
        monkeypatch.setattr(lesson.fcntl, "flock", real_flock)
        if real_clocks:
            clocks_back(monkeypatch, real_clocks)
        holder.close()
    assert not leapt, (
        "on a machine so busy that a writer with timeout=1 was held up before each "
        "look at the clock (each look found 0.6 s more gone than the one before), the "
        "writer, refused while this process held quest-1, should have been refused "
        f"with SessionBusy once its timeout had passed; {leapt}. Look at the clock "
        "once for each decision: the time left that one look found may be gone by "
        "the next (a sleep handed a negative number raises ValueError)")
    assert waited < 1.2, (
        f"a writer with timeout={timeout}, each of whose tries of the lock took {slow} "
        f"s (a busy machine), was refused only after {waited:.2f} s: past its timeout "
        f"it should give up at its next try (about {timeout} s, plus a try and "
        "LOCK_POLL_SECONDS). A timeout counts the time that went by, on a clock, not "
        f"the sleeps between tries: a user who gave the writer {timeout} s waits far "
        "longer")


@pytest.mark.task("05.1")
def test_a_writer_whose_first_try_outlasts_its_timeout_is_refused_after_it(
        lesson, sessions, monkeypatch):
    """A writer with timeout=1 asks for a session this process holds, and its very
    first try takes 5 s (a machine that stalled, a lock file on a slow disk): its
    timeout has passed by the time that try is refused, so it is refused then, with
    SessionBusy, and waits no more. A timeout counts from when the writer asks, its
    first try included, not from its first refusal. (The time is the test's own: the
    stalled try moves the clock on, and each sleep moves it by what it asked for.)"""
    holder = lesson.SessionLog(sessions, "quest-1")
    holder.append(FIRST)
    moved, slept, tries = [0.0], [], []
    real_flock, real_sleep = lesson.fcntl.flock, time.sleep

    class StillWaiting(Exception):
        """The writer kept on trying far past its timeout: stop it here."""

    def flock(fd, operation):
        tries.append(fd)
        if len(tries) == 1:
            moved[0] += 5.0     # the first try stalls
        return real_flock(fd, operation)

    def sleep(seconds):
        slept.append(seconds)
        moved[0] += seconds
        if moved[0] > 60:
            raise StillWaiting

    # Should the writer sleep, or read the clock, by a name this cannot replace, its
    # wait is real: the holder then lets go after a while, so that no test waits for
    # ever, and the writer gets in.
    guard = threading.Timer(WAIT, holder.close)
    real_clocks = clocks_moved(monkeypatch, lambda: moved[0])
    monkeypatch.setattr(lesson.fcntl, "flock", flock)
    monkeypatch.setattr(time, "sleep", sleep)
    guard.start()
    try:
        try:
            with lesson.SessionLog(sessions, "quest-1", timeout=1) as log:
                log.append({"role": "user", "content": "Me too."})
            outcome = "got the session"
        except lesson.SessionBusy:
            outcome = "refused"
        except StillWaiting:
            outcome = "still waiting"
    finally:
        clocks_back(monkeypatch, real_clocks)
        monkeypatch.setattr(time, "sleep", real_sleep)
        monkeypatch.setattr(lesson.fcntl, "flock", real_flock)
        guard.cancel()
        guard.join()
        holder.close()
    assert outcome != "got the session", (
        "this process held quest-1 for the whole wait of a writer with timeout=1, and "
        "the writer got the session all the same")
    waited = sum(slept)
    assert outcome == "refused" and waited <= 1.5 * lesson.LOCK_POLL_SECONDS, (
        "a writer with timeout=1 asked for quest-1, which this process holds, and its "
        "first try took 5 s: its timeout had passed when that try was refused, yet it "
        + ("was still trying a minute later" if outcome == "still waiting" else
           f"slept {waited:.2f} s more, over {len(tries)} tries, before it was "
           "refused")
        + ". A timeout counts from when the writer asks, its tries included, the "
        "first one too: the writer should be refused once that try is, not given its "
        "whole timeout again from its first refusal")


@pytest.mark.task("05.1")
def test_a_writer_gives_up_at_its_timeout_when_the_clock_is_set_back(
        lesson, sessions, monkeypatch):
    """The system clock is set back an hour (NTP, a person, a VM resumed) as a writer
    with timeout=0.3 starts to wait: it still gives up after about 0.3 s, refused with
    SessionBusy. A timeout counts the time that goes by, which the time of day does
    not."""
    holder = lesson.SessionLog(sessions, "quest-1")
    holder.append(FIRST)
    real_flock, real_time, tries = lesson.fcntl.flock, time.time, []

    def flock(fd, operation):
        tries.append(fd)
        if len(tries) == 1:     # the writer's first try: the clock goes back an hour
            monkeypatch.setattr(time, "time", lambda: real_time() - 3600)
        if len(tries) == 60:    # some 3 s of tries: let go, so that the test ends
            holder.close()
        return real_flock(fd, operation)

    monkeypatch.setattr(lesson.fcntl, "flock", flock)
    try:
        with raises(lesson.SessionBusy,
                    "the clock was set back an hour as a writer with timeout=0.3 began "
                    "to wait; this process held quest-1 for some 3 s, and the writer "
                    "still waited, then got in. A timeout counts the time that goes by "
                    "(a monotonic clock), not the time of day, which can go back"):
            with lesson.SessionLog(sessions, "quest-1", timeout=0.3) as log:
                log.append({"role": "user", "content": "Me too."})
    finally:
        monkeypatch.setattr(time, "time", real_time)
        monkeypatch.setattr(lesson.fcntl, "flock", real_flock)
        holder.close()


@pytest.mark.task("05.1")
def test_a_writer_with_no_timeout_waits_through_any_number_of_tries(
        lesson, sessions, monkeypatch):
    """A writer with timeout=None waits as long as it takes, however many tries that
    is: its holder, in this process, lets go only after 12 000 of the writer's sleeps
    between tries (ten minutes of polls, the sleeps made instant here), and the writer
    then gets the session."""
    holder = lesson.SessionLog(sessions, "quest-1")
    holder.append(FIRST)
    tries, slept, kept = 12_000, [], []
    descriptors = open_descriptors()

    class StillWaiting(Exception):
        """The writer kept on trying long after its holder let go: stop it here."""

    def sleep(seconds):     # no time goes by: the sleeps are only counted
        slept.append(seconds)
        if len(slept) % 100 == 0 and open_descriptors() - descriptors > 10:
            kept.append(open_descriptors() - descriptors)
            raise StillWaiting
        if len(slept) == tries:
            holder.close()
        elif len(slept) > 2 * tries:
            raise StillWaiting

    # Should the writer sleep by a name this cannot replace, it sleeps for real: the
    # holder then lets go after a while all the same, so that no test waits for ever.
    guard = threading.Timer(WAIT, holder.close)
    real_sleep = time.sleep
    monkeypatch.setattr(time, "sleep", sleep)
    guard.start()
    try:
        with lesson.SessionLog(sessions, "quest-1", timeout=None) as log:
            log.append({"role": "user", "content": "Worth the wait."})
    except lesson.SessionBusy as busy:
        pytest.fail(f"a writer with timeout=None should wait as long as it takes; "
                    f"after {len(slept)} sleeps between its tries (the holder let go "
                    f"only after {tries}) it was refused: {busy}. No number of tries "
                    "is too many when no timeout was given", pytrace=False)
    except StillWaiting:
        said = (f"after {len(slept)} tries it held {kept[0]} more descriptors than "
                "before it asked: a refused try's descriptor stays open, and a long "
                "wait runs out of them" if kept else
                f"the holder let go after {tries} of its tries, and it was still "
                f"trying {tries} tries later")
        pytest.fail(f"a writer with timeout=None waited for a busy session, and {said}",
                    pytrace=False)
    finally:
        guard.cancel()
        guard.join()
        monkeypatch.setattr(time, "sleep", real_sleep)
        holder.close()


@pytest.mark.task("05.1")
@pytest.mark.parametrize("poll", [0.01, 0.02])
def test_a_waiting_writer_sleeps_as_long_as_lock_poll_seconds_says(
        lesson, sessions, monkeypatch, poll):
    """LOCK_POLL_SECONDS is the program's to set: set shorter (0.01 s, 0.02 s), so that
    a writer gets a free session sooner, a writer that waits 0.2 s for a session this
    process holds sleeps no longer than that between its tries."""
    monkeypatch.setattr(lesson, "LOCK_POLL_SECONDS", poll)
    holder = lesson.SessionLog(sessions, "quest-1")
    holder.append(FIRST)
    try:
        with sleeps_of(lesson) as slept, raises(
                lesson.SessionBusy, "this process held quest-1 for the whole wait, and "
                "a writer with timeout=0.2 appended anyway"):
            with lesson.SessionLog(sessions, "quest-1", timeout=0.2) as log:
                log.append({"role": "user", "content": "Me too."})
    finally:
        holder.close()
    longer = sorted({seconds for seconds in slept if seconds > 1.5 * poll})
    assert slept and not longer, (
        f"LOCK_POLL_SECONDS was set to {poll} s, and a writer waiting for a busy "
        + (f"session slept {longer} s between its tries: it should sleep about "
           "LOCK_POLL_SECONDS, whatever the program set it to, so that it gets a free "
           "session within that much of the holder letting go (a number of its own "
           "in its place ignores the setting)" if longer else
           "session never slept between its tries (a core kept busy)"))


@pytest.mark.task("05.1")
@pytest.mark.parametrize("timeout", [90, 3600, 86_400], ids=["90s", "1h", "1d"])
def test_a_writer_waits_as_long_as_its_timeout_however_long_that_is(
        lesson, sessions, monkeypatch, timeout):
    """A writer given a long timeout (a minute and a half, an hour, a day) for a
    session this process holds all along waits that long, no less and not much more:
    it is refused with SessionBusy once its timeout has gone by. The time is the test's
    own: each of the writer's sleeps moves the clock on by a hundredth of the timeout
    (and takes no time), so the hour goes by in a moment."""
    holder = lesson.SessionLog(sessions, "quest-1")
    holder.append(FIRST)
    step, moved, real_sleep = timeout / 100, [0.0], time.sleep

    class StillWaiting(Exception):
        """The writer kept on trying far past its timeout: stop it here."""

    def sleep(seconds):
        moved[0] += step
        if moved[0] > 20 * timeout:
            raise StillWaiting

    # Should the writer sleep, or read the clock, by a name this cannot replace, its
    # wait is real: the holder then lets go after a while, so that no test waits for
    # ever, and the writer gets in.
    guard = threading.Timer(WAIT, holder.close)
    real_clocks = clocks_moved(monkeypatch, lambda: moved[0])
    monkeypatch.setattr(time, "sleep", sleep)
    guard.start()
    try:
        try:
            with lesson.SessionLog(sessions, "quest-1", timeout=timeout) as log:
                log.append({"role": "user", "content": "Me, once you are done."})
            outcome = "got the session"
        except lesson.SessionBusy:
            outcome = "refused"
        except StillWaiting:
            outcome = "still waiting"
    finally:
        clocks_back(monkeypatch, real_clocks)
        monkeypatch.setattr(time, "sleep", real_sleep)
        guard.cancel()
        guard.join()
        holder.close()
    waited = moved[0]
    assert outcome != "got the session", (
        f"this process held quest-1 for the whole wait of a writer with "
        f"timeout={timeout}, and the writer got the session all the same")
    assert outcome == "refused" and waited >= timeout - step / 2, (
        f"a writer with timeout={timeout} s, for a session held all along, "
        + (f"was still trying after {waited:.0f} s" if outcome == "still waiting"
           else f"was refused after {waited:.0f} s")
        + f": it should wait up to its timeout, {timeout} s, whatever it is, and then "
        "be refused with SessionBusy (a caller that gives a long timeout means it: a "
        "constant in its place, or the timeout read in other units, breaks it)")
    assert waited <= timeout + 3 * step, (
        f"a writer with timeout={timeout} s was refused only after {waited:.0f} s: "
        "it should give up once its timeout has gone by")


@pytest.mark.task("05.1")
def test_a_writer_refused_once_waits_its_whole_timeout_when_asked_again(
        lesson, sessions):
    """A writer with timeout=0.3 is refused: the session stayed busy for its whole
    wait. Asked again (the next append of the same SessionLog), it waits up to its
    timeout again, and gets the session when its holder lets go 0.1 s later."""
    holder = lesson.SessionLog(sessions, "quest-1")
    holder.append(FIRST)
    writer = lesson.SessionLog(sessions, "quest-1", timeout=0.3)
    again = {"role": "user", "content": "Me, once you are done."}
    # A writer that never gives up gets in once the holder lets go, after WAIT s
    guard = threading.Timer(WAIT, holder.close)
    guard.start()
    try:
        with raises(lesson.SessionBusy,
                    f"this process held quest-1 for {WAIT} s, and a writer with "
                    "timeout=0.3 waited until it let go, then appended"):
            writer.append(again)
        guard.cancel()
        guard.join()
        letting_go = threading.Timer(HOLD, holder.close)
        started = time.monotonic()
        letting_go.start()
        try:
            writer.append(again)
        except lesson.SessionBusy as busy:
            pytest.fail(f"a writer with timeout=0.3 was refused once, then asked again "
                        f"by its next append; its holder let go {HOLD} s later, but "
                        f"the writer was refused after "
                        f"{time.monotonic() - started:.2f} s: {busy}. Each time it "
                        "asks for the session it waits up to its timeout, counted "
                        "from then, not from its first wait", pytrace=False)
        finally:
            letting_go.cancel()
            letting_go.join()
    finally:
        guard.cancel()
        guard.join()
        writer.close()
        holder.close()
    held = contents(sessions / "quest-1.jsonl")
    assert held == [FIRST["content"], again["content"]], (
        "the writer asked again got the session and appended once, after the "
        f"holder's message; the log holds {held}")


@pytest.mark.task("05.1")
def test_a_writer_given_a_negative_timeout_is_refused_at_once(lesson, sessions):
    """A timeout below 0 (a caller's time left, counted down past zero) leaves no time
    to wait: a writer given timeout=-1 for a session this process holds is refused with
    SessionBusy at once, with no sleep, as with 0. Only None waits as long as it takes:
    a negative number is no "for ever" here, as it is to threading's Lock.acquire."""
    holder = lesson.SessionLog(sessions, "quest-1")
    holder.append(FIRST)
    outcome = "appended, beside the holder"
    try:
        with given_up_within(2, "05.1", "a writer with timeout=-1 waited for quest-1, "
                             "which this process holds", instead="been refused at "
                             "once, as with timeout 0 (only None waits as long as it "
                             "takes)"):
            with sleeps_of(lesson) as slept:
                try:
                    with lesson.SessionLog(sessions, "quest-1", timeout=-1) as log:
                        log.append({"role": "user", "content": "Me too."})
                except lesson.SessionBusy:
                    outcome = None
                except NotImplementedError:
                    raise
                except Exception as error:  # noqa: BLE001 - said below, in words
                    outcome = f"raised {described(error)}"
    finally:
        holder.close()
    assert outcome is None, (
        "a writer with timeout=-1 asked for quest-1, which this process holds, and "
        f"{outcome}: a timeout below 0 leaves no time to wait, so it is refused with "
        "SessionBusy at once, as with 0")
    assert not slept, (
        f"a writer with timeout=-1 slept {slept} before it was refused: a timeout "
        "below 0 leaves no time to wait, so it is refused at once, as with 0")


@pytest.mark.task("05.1")
@pytest.mark.parametrize("failing", ["flock", "open"])
def test_a_lock_the_system_cannot_give_is_no_busy_session(lesson, sessions,
                                                         monkeypatch, failing):
    """No one holds quest-1, but the system cannot give its lock: flock fails with
    ENOLCK (a network file system with no lock service), or the lock file cannot be
    opened at all (EACCES: made by another user in a shared folder). That is no busy
    session: a writer ready to wait 0.3 s gets the system's own error at once, its
    errno with it, not SessionBusy after a wait (which would say that another process
    is writing the session: untrue), and keeps no descriptor open. Once the system
    can lock again, the same writer takes the session."""
    sessions.mkdir(parents=True, exist_ok=True)
    lock = sessions / "quest-1.lock"
    real_flock, real_open = lesson.fcntl.flock, os.open
    code = errno.ENOLCK if failing == "flock" else errno.EACCES
    cause = ("flock failed with ENOLCK (no locks available: a network file system "
             "with no lock service)" if failing == "flock" else
             "the lock file could not be opened, EACCES (made by another user in a "
             "shared folder)")

    def flock(fd, operation):
        if operation & fcntl.LOCK_EX:
            raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))
        return real_flock(fd, operation)

    def opening(path, flags, *args, **kwargs):
        if os.fspath(path) in (str(lock), lock.name):
            raise OSError(errno.EACCES, os.strerror(errno.EACCES), str(lock))
        return real_open(path, flags, *args, **kwargs)

    descriptors = open_descriptors()
    log = lesson.SessionLog(sessions, "quest-1", timeout=0.3)
    if failing == "flock":
        monkeypatch.setattr(lesson.fcntl, "flock", flock)
    else:
        monkeypatch.setattr(os, "open", opening)
    try:
        with sleeps_of(lesson) as slept:
            try:
                log.append(FIRST)
                got = None
            except lesson.SessionBusy as error:
                got = error
            except OSError as error:
                got = error
    finally:
        monkeypatch.setattr(lesson.fcntl, "flock", real_flock)
        monkeypatch.setattr(os, "open", real_open)
    if got is None:
        log.close()
        pytest.fail(f"no one holds quest-1, {cause}, and the writer appended all the "
                    "same, without the lock", pytrace=False)
    if isinstance(got, lesson.SessionBusy):
        log.close()
        pytest.fail(f"no one holds quest-1, but {cause}; the writer took that for "
                    f"another holder, waited, and said: {got}. That is untrue: only "
                    "another holder is waited for; when the system cannot give the "
                    "lock at all, its own error reaches the caller at once, with its "
                    "errno", pytrace=False)
    assert got.errno == code, (
        f"no one holds quest-1, but {cause}: that error should reach the caller as "
        f"it is, with errno {errno.errorcode[code]}; the writer raised "
        f"{type(got).__name__}, errno {got.errno!r}: {got}")
    assert not slept, (
        f"no one holds quest-1, but {cause}; the writer slept {slept} before it "
        "raised: nothing will change by waiting, so the error comes at once")
    assert open_descriptors() == descriptors, (
        f"no one holds quest-1, but {cause}; the writer raised, and the process now "
        f"holds {open_descriptors() - descriptors} more open descriptor(s) than "
        "before: a failed take keeps nothing open")
    try:
        log.append(FIRST)
    except OSError as error:
        pytest.fail(f"{cause} once; the system could lock again, and the same writer, "
                    f"asked again, failed: {type(error).__name__}: {error}. Nothing of "
                    "a failure stays with the writer", pytrace=False)
    finally:
        log.close()


def a_pid_no_process_has():
    """The pid of a process that has ended (and been waited for)."""
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    return child.pid


@pytest.mark.task("05.1")
def test_a_waiting_writer_gets_the_session_soon_whenever_the_holder_lets_go(
        lesson, sessions, monkeypatch):
    """A holder in this process lets go 0.06, 0.12, 0.18 and 0.4 s after a writer in a
    thread was first refused: each moment falls elsewhere between the writer's tries,
    and it gets the session within a few LOCK_POLL_SECONDS of each let-go (a writer that
    tries every 0.3 s comes 0.18 s late on average, one that doubles its sleep after
    each try 0.35 s late after the longest hold; noise only adds to it)."""
    real_flock = lesson.fcntl.flock
    waiters, refused, granted = set(), threading.Event(), []

    def flock(fd, operation):
        try:
            real_flock(fd, operation)
        except BlockingIOError:
            if threading.get_ident() in waiters:
                refused.set()
            raise
        if operation & lesson.fcntl.LOCK_EX and threading.get_ident() in waiters:
            granted.append(time.monotonic())     # the last grant is the one it kept

    monkeypatch.setattr(lesson.fcntl, "flock", flock)
    late = []
    holds = (0.06, 0.12, 0.18, 0.4)
    for number, hold in enumerate(holds):
        session = f"quest-{number}"
        holding = lesson.SessionLog(sessions, session)
        holding.append(FIRST)
        refused.clear()
        granted.clear()
        outcome = []

        def write():
            waiters.add(threading.get_ident())
            try:
                with lesson.SessionLog(sessions, session, timeout=HANG) as log:
                    log.append({"role": "user", "content": "Worth the wait."})
                outcome.append("appended")
            except BaseException as error:   # noqa: B036 (reported below)
                outcome.append(error)

        thread = threading.Thread(target=write)
        thread.start()
        try:
            assert refused.wait(WAIT), (
                "a writer with a timeout, in a thread, was not refused by flock "
                f"within {WAIT} s while another writer held the session: it never "
                "asked for an exclusive flock without waiting, or got one beside the "
                "holder")
            time.sleep(hold)
            let_go_at = time.monotonic()
        finally:
            let_go(holding)     # as 05.1 lets go, whatever 05.2's close does
            thread.join(HANG)
            holding.close()
        assert outcome == ["appended"], (
            f"the holder let go {hold} s after the waiting writer was first refused, "
            f"and the writer, with timeout={HANG}, should then have appended; it "
            + (f"raised {type(outcome[0]).__name__}: {outcome[0]}" if outcome
               else f"was still waiting after {HANG} s"))
        late.append(granted[-1] - let_go_at)
    average = sum(late) / len(late)
    assert average < 0.15 and max(late) < 0.25, (
        "the holder let go " + ", ".join(map(str, holds)) + " s after the waiting "
        "writer was first refused, and the writer got the session "
        + ", ".join(f"{seconds:.2f}" for seconds in late)
        + f" s after each let-go ({average:.2f} s on average): it should get it within "
        f"about LOCK_POLL_SECONDS ({lesson.LOCK_POLL_SECONDS} s) of the let-go, "
        "trying again that often; a user whose writer waits for a busy session sits "
        "idle that long after it is free")


@pytest.mark.task("05.1")
def test_a_writer_in_a_thread_of_its_own_waits_and_is_refused_the_same_way(
        lesson, sessions, other):
    """A web server or a helper agent opens sessions from threads of its own: waiting
    for a busy session works there as in the main thread (a signal handler or timer,
    which only the main thread may set, does not)."""
    holder = other("hold")
    holder.expect("holding")
    outcome = []

    def write():
        try:
            with lesson.SessionLog(sessions, "quest-1", timeout=0.2) as log:
                log.append({"role": "user", "content": "From a thread."})
            outcome.append("appended")
        except BaseException as error:   # noqa: B036 (reported below, whatever it is)
            outcome.append(error)

    thread = threading.Thread(target=write)
    thread.start()
    thread.join(HANG)
    assert outcome, (f"a writer with timeout=0.2 in a thread of its own was still "
                     f"waiting after {HANG} s for the session another process holds")
    assert isinstance(outcome[0], lesson.SessionBusy), (
        "a writer with timeout=0.2 in a thread of its own should wait, then be refused "
        "with SessionBusy, as in the main thread; it "
        + ("appended, beside the holder" if outcome[0] == "appended" else
           f"raised {type(outcome[0]).__name__}: {outcome[0]}"))


@pytest.mark.task("05.1")
def test_writers_waiting_in_two_threads_each_keep_their_own_timeout(lesson, sessions):
    """A server's threads open sessions at once: one writer waits up to 3 s for a busy
    session while another thread takes a free session (timeout 0). The second writer's
    timeout is its own: the first still gets its session once the holder lets go."""
    holder = lesson.SessionLog(sessions, "quest-1")
    holder.append(FIRST)
    outcome = []

    def write():
        try:
            with lesson.SessionLog(sessions, "quest-1", timeout=WAIT) as log:
                log.append({"role": "user", "content": "From a thread."})
            outcome.append("appended")
        except BaseException as error:   # noqa: B036 (reported below, whatever it is)
            outcome.append(error)

    thread = threading.Thread(target=write)
    try:
        thread.start()
        time.sleep(0.05)    # the thread's writer is waiting for quest-1 by now
        with lesson.SessionLog(sessions, "quest-2") as other_session:
            other_session.append(FIRST)     # another thread's session, timeout 0
        time.sleep(HOLD)
    finally:
        holder.close()
        thread.join(HANG)
    assert outcome, (f"a writer with timeout={WAIT} in a thread of its own was still "
                     f"waiting after {HANG} s for a session that was let go")
    assert outcome[0] == "appended", (
        f"a writer in a thread of its own waited (timeout={WAIT}) for quest-1, which "
        f"was let go {HOLD} s after another writer, of quest-2 and with timeout 0, "
        "took its own session; it should have got quest-1, and it "
        + f"raised {type(outcome[0]).__name__}: {outcome[0]}"
        + (": it gave up at the other writer's timeout, as if the deadline were "
           "shared by every writer" if isinstance(outcome[0], lesson.SessionBusy)
           else ""))


@pytest.mark.task("05.1")
def test_a_holder_whose_record_names_no_running_process_is_still_the_holder(
        lesson, sessions, other):
    """The record in the lock file says who holds the session, for a person to read;
    only the lock says whether it is held. A holder on another host, or in another pid
    namespace (a container), names a pid no process here has, and a holder that has
    just been granted the lock has not written its record yet: a second writer is
    still refused, naming the holder as the record names it, whole (a key another
    program wrote, a pid written as text, each as it is), and the holder's lock file
    is left where it is."""
    holder = other("hold")
    holder.expect("holding")
    lock = sessions / "quest-1.lock"
    if not lock.exists():
        pytest.fail(f"process {holder.pid} holds quest-1, and there is no "
                    "quest-1.lock: a writer holds the session by a lock on that file",
                    pytrace=False)
    gone = a_pid_no_process_has()
    records = {
        f"names pid {gone} on another host, a pid no process here has": json.dumps(
            {"pid": gone, "host": "another-host",
             "since": "2026-01-01T00:00:00+00:00"}).encode(),
        # Another program's record: a key of its own, and its pid as a pid file's text
        "was written by another program, with a key of its own (the user it runs "
        "for) and its pid as text": json.dumps(
            {"pid": str(gone), "host": "another-host",
             "since": "2026-01-01T00:00:00+00:00", "user": "ann"}).encode(),
        # As a holder leaves it between the lock granted and its record written
        "is empty": b""}
    for says, data in records.items():
        with open(lock, "r+b") as record:
            record.truncate(0)
            record.write(data)
        held = lock.stat()

        with raises(lesson.SessionBusy,
                    f"process {holder.pid} holds quest-1, whose lock file {says}; a "
                    "second writer took the session all the same, as if the lock "
                    "were stale: only the lock says whether the session is held, the "
                    "record only says by whom") as busy:
            with lesson.SessionLog(sessions, "quest-1") as log:
                log.append({"role": "user", "content": "Me too."})
        named = record_in(data)
        if named is not None:
            assert busy.value.holder == named, (
                f"the holder's lock file {says}; the refusal should name that holder "
                f"as the lock file names it, whole, {named}, for its user to find it "
                f"(on that host, or in its container), whatever runs here and "
                f"whatever keys and values this program would write itself; it was "
                f"given {busy.value.holder}: {busy.value}")
        else:
            assert busy.value.holder == {}, (
                f"the holder's lock file {says}: it names no one yet, so the refusal's "
                "holder should be empty ({}), as the record it stands for is; it was "
                f"given {busy.value.holder}, a record of the writer's own making that "
                "no lock file holds (a caller that asks whether the lock says who "
                "holds the session is told yes)")
        assert lock.exists() and os.path.samestat(lock.stat(), held), (
            f"the holder's lock file {says}, and the refused writer removed or "
            "replaced it: a third writer would now make a new one and get in beside "
            "the holder")


@pytest.mark.task("05.1")
@pytest.mark.parametrize("then", ["let go, its lock file gone",
                                  "half-way through a new record"])
def test_a_writer_refused_as_the_lock_file_changes_says_the_session_is_busy(
        lesson, sessions, monkeypatch, then):
    """A writer (timeout 0) is refused the lock, and in the very moment after, before
    it has read whose the session is, the lock file changes under it: its holder lets
    go and the file goes, or a holder is half-way through writing its record. The
    writer still says what it met, a busy session: SessionBusy for quest-1, naming the
    holder as far as the lock file could tell (no one, or the holder it was refused
    by), never an error of its own reading of a lock file that is gone or not yet
    whole."""
    holder = lesson.SessionLog(sessions, "quest-1")
    holder.append(FIRST)
    lock = sessions / "quest-1.lock"
    record = record_in(lock.read_bytes() if lock.exists() else None)
    real_flock, refused = lesson.fcntl.flock, []

    def flock(fd, operation):
        try:
            return real_flock(fd, operation)
        except BlockingIOError:
            if not refused:
                refused.append(fd)
                if then.startswith("let go"):
                    let_go(holder)      # as 05.1 lets go, whatever 05.2's close does
                    lock.unlink(missing_ok=True)
                else:
                    with open(lock, "r+b") as half:
                        half.truncate(0)
                        half.write(b'{"pid": 4242, "ho')
            raise

    monkeypatch.setattr(lesson.fcntl, "flock", flock)
    try:
        with lesson.SessionLog(sessions, "quest-1") as log:
            log.append({"role": "user", "content": "Me too."})
        got, named = "it appended", None
    except lesson.SessionBusy as busy:
        got, named = None, busy
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001 - said below, in words
        got, named = f"it raised {described(error)}", None
    finally:
        monkeypatch.setattr(lesson.fcntl, "flock", real_flock)
        holder.close()
    if not refused:
        pytest.fail("this process held quest-1, yet the second writer was never "
                    "refused by fcntl.flock: it took the session without asking for "
                    "the lock", pytrace=False)
    assert got is None, (
        "a writer with timeout 0 was refused quest-1, which this process held, and "
        f"just after the refusal its holder was {then}; {got}. Refused, the writer "
        "raises SessionBusy for the session it could not take, naming the holder as "
        "far as the lock file can tell then (no one, if it is gone or not yet whole): "
        "a lock file that changes under a reader is what a busy session looks like")
    assert named.session_id == "quest-1" and named.holder in ({}, record), (
        f"a writer refused quest-1 (its holder then {then}) should name the session "
        "and, as holder, what the lock file could tell: no one ({}) or the holder it "
        f"was refused by, {record}; it named {named.session_id!r} and {named.holder}")


@pytest.mark.task("05.1")
def test_a_writer_refused_after_a_wait_names_the_holder_at_the_end_of_it(
        lesson, sessions):
    """The session changes hands while a writer waits (its holder hands it to another
    with no moment free): refused at the end of its wait, the writer names the holder
    the lock file names then, not the one that held the session when it began."""
    sessions.mkdir(parents=True, exist_ok=True)
    lock = sessions / "quest-1.lock"
    gone = a_pid_no_process_has()
    held, wait = [], 1.0

    def take(path, pid):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        held.append(fd)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, json.dumps({"pid": pid, "host": socket.gethostname(),
                                 "since": "2026-01-01T00:00:00+00:00"}).encode())

    def hand_over():
        fresh = sessions / "quest-1.lock.next"
        take(fresh, os.getpid())
        os.replace(fresh, lock)
        os.close(held.pop(0))

    take(lock, gone)
    timer = threading.Timer(0.2, hand_over)
    timer.start()
    try:
        with raises(lesson.SessionBusy,
                    f"quest-1 was held for the whole of the writer's {wait:g} s wait, "
                    "and the writer appended anyway") as busy:
            with lesson.SessionLog(sessions, "quest-1", timeout=wait) as log:
                log.append({"role": "user", "content": "Me too."})
    finally:
        timer.join()
        for fd in held:
            os.close(fd)
    assert busy.value.pid == os.getpid(), (
        f"process {gone} held quest-1 when the writer began to wait, and handed it to "
        f"process {os.getpid()} 0.2 s later; refused {wait:g} s later, the writer "
        f"should name the holder the lock file named then, {os.getpid()}, for its user "
        f"to ask the right process; it names {busy.value.pid!r}: {busy.value}")


@pytest.mark.task("05.1")
@pytest.mark.parametrize("found", ["the holder's lock file",
                                   "no lock file, made by the writer itself",
                                   "the holder's lock file, moved aside by hand"])
def test_a_writer_whose_lock_file_was_replaced_while_it_asked_is_not_let_in(
        lesson, sessions, monkeypatch, found):
    """Between a writer's open of quest-1.lock and its flock, the holder lets go, its
    lock file goes (removed, or moved aside by hand to quest-1.lock.old, where it keeps
    a name), and a third writer takes the session with a new one: the flock is granted
    on the old file, which the lock's name no longer reaches. The name is there, but
    it is not that file: the writer (timeout 0) must be refused, and never write
    beside the third. The old file may be the holder's, or one the writer has just
    made itself, which the holder opened and locked first: a file this writer made is
    not its lock either once the lock's name no longer reaches it."""
    descriptors = descriptors_open()
    lock = sessions / "quest-1.lock"
    moved = found.endswith("moved aside by hand")
    holder = lesson.SessionLog(sessions, "quest-1")
    if found.startswith("the holder's lock file"):
        holder.append(FIRST)
    third = lesson.SessionLog(sessions, "quest-1")
    real_flock = lesson.fcntl.flock
    first_try = []

    def flock(fd, operation):
        if not first_try:
            first_try.append(fd)
            if not found.startswith("the holder's lock file"):
                # The holder comes after this writer made quest-1.lock, and locks it
                # first
                holder.append(FIRST)
            # The holder lets go (as 05.1 lets go, whatever 05.2's close does) and its
            # lock file goes, or is moved aside by hand; then a third writer takes the
            # session, with a lock file of its own under the same name.
            let_go(holder)
            if moved:
                os.rename(lock, sessions / "quest-1.lock.old")
            else:
                lock.unlink(missing_ok=True)
            third.append({"role": "user", "content": "third"})
        return real_flock(fd, operation)

    monkeypatch.setattr(lesson.fcntl, "flock", flock)
    second = lesson.SessionLog(sessions, "quest-1")
    gone = ("someone moved quest-1.lock aside by hand (to quest-1.lock.old, where it "
            "keeps a name), its holder let go" if moved else
            "its holder let go, removed quest-1.lock")
    try:
        with raises(lesson.SessionBusy,
                    f"while the second writer asked for the lock, {gone}, and a third "
                    "writer took the session with a new quest-1.lock; the second "
                    "writer was granted the old file, which the lock's name no longer "
                    "reaches, and went on as the session's writer beside the third: "
                    "a name that exists is not yet the file you locked, and a file "
                    "with a name is not yet the one at the lock's name"):
            second.append({"role": "user", "content": "second"})
    finally:
        kept = getattr(third, "_lock_fd", None)     # as the third writer knows its own
        second.close()
        third.close()
        holder.close()
    assert first_try, "the second writer took the session without fcntl.flock"
    assert contents(sessions / "quest-1.jsonl") == [FIRST["content"], "third"], (
        "the second writer locked the file its holder had just removed while a third "
        "writer held the new quest-1.lock: two writers at once, both in the log: "
        f"{contents(sessions / 'quest-1.jsonl')}")
    left = descriptors_open() - descriptors
    if kept is not None and kept in descriptors_open():
        fail_in("05.2", "the third writer's close() left its lock's descriptor open: "
                "the session stays locked by a writer that said it let go, until its "
                "process ends")
    assert not left, (
        f"every writer is closed, yet {len(left)} more descriptor(s) are open: the "
        "old lock file the second writer was granted kept its descriptor")


@pytest.mark.task("05.2")
def test_no_newcomer_ever_shares_the_session_while_the_holder_lets_go(
    lesson, sessions, monkeypatch
):
    """A newcomer tries to take the session at the moment the holder's lock file goes:
    whatever it gets, no third writer gets in beside it."""
    lock = sessions / "quest-1.lock"
    holder = lesson.SessionLog(sessions, "quest-1")
    holder.append(FIRST)
    # Tries the moment the lock file is removed
    newcomer = lesson.SessionLog(sessions, "quest-1")
    took_over = []

    def removing(real):
        def remove(path, *args, **kwargs):
            # The lock file by its path, or by its name in a folder opened (dir_fd)
            named = os.fspath(path) == str(lock) or (
                os.fspath(path) == lock.name
                and {"dir_fd", "src_dir_fd"} & {k for k, v in kwargs.items() if v})
            if named and not took_over:
                took_over.append(False)
                try:
                    newcomer.append({"role": "user", "content": "newcomer"})
                    took_over[0] = True
                except lesson.SessionBusy:
                    pass  # right: the holder still holds the lock while it removes it
                if not os.path.lexists(lock) and not took_over[0]:
                    pytest.fail("the holder, letting go, came to remove quest-1.lock, "
                                "and a newcomer, refused, closed in the meantime; "
                                "quest-1.lock was then gone: the refused newcomer "
                                "removed a lock file it never held", pytrace=False)
            return real(path, *args, **kwargs)
        return remove

    # os.remove and os.unlink are two names of one call (Path.unlink uses the latter);
    # a rename takes the name away too (the file then goes under another name)
    calls = {name: getattr(os, name) for name in ("unlink", "remove", "rename",
                                                  "replace")}
    for name, real in calls.items():
        monkeypatch.setattr(os, name, removing(real))
    holder.close()
    for name, real in calls.items():
        monkeypatch.setattr(os, name, real)
    try:
        if took_over and took_over[0]:
            with raises(lesson.SessionBusy,
                        "the holder let go of the lock before removing "
                        "quest-1.lock: a newcomer locked that file in between, the "
                        "holder then removed the newcomer's lock file, and a third "
                        "writer got in beside the newcomer",
                        match="quest-1"):
                with lesson.SessionLog(sessions, "quest-1") as third:
                    third.append({"role": "user", "content": "third"})
    finally:
        newcomer.close()

    assert took_over, "closing the holder should remove quest-1.lock"
    assert "third" not in contents(sessions / "quest-1.jsonl"), (
        "the holder let go of the lock before removing quest-1.lock: a newcomer locked "
        "that file in between, the holder then removed the newcomer's lock file, and a "
        "third writer got in beside the newcomer: two writers at once"
    )


# --- 05.2: let go on close and on exceptions ------------------------------------------


@pytest.mark.task("05.2")
def test_the_lock_file_goes_when_its_holder_lets_go(lesson, sessions, other):
    """Once its holder has closed its log, the session's folder holds no lock file, and
    the next writer appends."""
    holder = other("hold")
    holder.expect("holding")
    holder.go()
    holder.expect("released")

    left = sorted(p.name for p in sessions.iterdir())
    assert left == ["quest-1.jsonl"], (
        f"after the holder closed its log, the folder holds {left}: a folder of idle "
        "sessions should hold no lock file")
    try:
        with lesson.SessionLog(sessions, "quest-1") as log:
            log.append({"role": "user", "content": "My turn."})
    except lesson.SessionBusy as busy:
        pytest.fail("the holder closed its log, and the next writer was refused: "
                    f"{busy}", pytrace=False)
    assert contents(sessions / "quest-1.jsonl") == [FIRST["content"], "My turn."], (
        "once the holder has closed its log, the next writer appends")


@pytest.mark.task("05.2")
def test_a_fork_that_fails_to_publish_leaves_no_lock_file(lesson, sessions,
                                                          monkeypatch):
    """A fork publishes under the new id's lock, as its writer would. When publishing
    fails (a full disk as the fork's log gets its name), the fork lets go of that lock
    and leaves no file behind: not its log, not its lineage, not a lock file beside no
    session."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append(FIRST)

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "link", disk_full)
    with raises(OSError, "the fork's log could not get its name (a full disk), and "
                "the fork returned as if it had been made"):
        lesson.fork(sessions, "quest-1", "what-if")
    monkeypatch.undo()

    left = sorted(p.name for p in sessions.iterdir())
    assert left == ["quest-1.jsonl"], (
        "a fork onto what-if took that id's lock to publish, and publishing failed (a "
        f"full disk); the folder now holds {left}, where it held quest-1.jsonl alone. "
        "A writer that lets go leaves no lock file of its own, a writer with no log "
        "beside it too: a folder of idle sessions holds no lock files")


@pytest.mark.key
@pytest.mark.task("05.2")
def test_the_lock_is_released_on_close_and_on_exceptions(lesson, sessions, model, town):
    """close(), an exception in a with-block,
    and a crash mid-turn all let the session go."""
    log = lesson.SessionLog(sessions, "quest-1")
    log.append(FIRST)
    log.close()
    try:
        log.close()
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001 - whatever it raises, say it in words
        pytest.fail(f"close() called a second time should do nothing; it raised "
                    f"{type(error).__name__}: {error}", pytrace=False)
    log.append({"role": "user", "content": "the same writer again"})   # a new lock
    log.close()
    try:
        with lesson.SessionLog(sessions, "quest-1") as log:
            log.append({"role": "user", "content": "after close"})
    except lesson.SessionBusy as busy:
        pytest.fail("a writer closed (twice), then written to again, took the lock "
                    "anew, and was closed again; after that close this process still "
                    f"holds the session: {busy}. Every close lets go of the lock the "
                    "writer holds then, the first and every later one", pytrace=False)

    with pytest.raises(KeyError):
        with lesson.SessionLog(sessions, "quest-1") as log:
            log.append({"role": "user", "content": "before an error"})
            raise KeyError("something went wrong in the middle of a turn")
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": "after an error"})

    model.add(Crash())
    with pytest.raises(SimulatedCrash):
        with lesson.SessionLog(sessions, "quest-1") as log:
            lesson.Agent(
                model.client(), model=model.model, tools=town, session=log
            ).run("Crash now.")
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": "after a crash"})

    assert contents(sessions / "quest-1.jsonl")[-1] == "after a crash", (
        "each writer should find the session free once the previous one has left its "
        "with-block"
    )
    assert not (sessions / "quest-1.lock").exists(), (
        "no lock file should remain once every writer has closed"
    )


@pytest.mark.task("05.2")
def test_a_writer_refused_for_a_corrupt_log_keeps_no_lock(
    lesson, sessions, model, town
):
    """When taking the log over fails (CorruptLog),
    the lock is let go and no lock file is left."""
    path = sessions / "quest-1.jsonl"
    path.write_bytes(
        b'{"role": "user", "content": "fine"}\n{damaged\n{"role": "user", "content":'
        b' "fine"}\n'
    )

    for attempt in ("first", "second"):
        # Not SessionBusy: the first attempt let go
        with raises(lesson.CorruptLog,
                    "quest-1.jsonl has a damaged line before its last one: taking it "
                    f"over should raise CorruptLog, at the {attempt} attempt too, and "
                    "leave the log as it was"):
            lesson.Agent(model.client(), model=model.model, tools=town,
                         session=lesson.SessionLog(sessions, "quest-1"))

    assert sorted(p.name for p in sessions.iterdir()) == ["quest-1.jsonl"], (
        "a failed takeover must leave no lock file: "
        f"{sorted(p.name for p in sessions.iterdir())}"
    )


# --- many writers, large lines --------------------------------------------------------


@pytest.mark.key
@pytest.mark.task("05.1")
def test_writers_appending_large_lines_at_once_lose_and_interleave_nothing(
    lesson, sessions, other
):
    """Three processes, four 96 KiB lines each, started together:
    twelve whole lines, one writer after another."""
    size, count = 96 * 1024, 4
    writers = [other("append", name, count, size) for name in ("w-a", "w-b", "w-c")]
    for writer in writers:
        writer.expect("ready")
    for writer in writers:
        writer.go()     # all three start appending at once
    for writer in writers:
        writer.expect("done")

    found = contents(sessions / "quest-1.jsonl")   # fails if any line is not whole JSON
    strangers = [entry for entry in lines_of(sessions / "quest-1.jsonl")
                 if not isinstance(entry.get("content"), str)]
    assert not strangers, (
        f"the log holds {len(strangers)} line(s) that none of the writers appended: "
        f"{strangers[:3]}")
    assert len(found) == 3 * count, (
        f"expected {3 * count} lines, found {len(found)}: lines were lost or spliced"
    )
    order = [text.split(" ", 1)[0] for text in found]
    runs = [order[i] for i in range(len(order)) if i == 0 or order[i] != order[i - 1]]
    assert sorted(runs) == ["w-a", "w-b", "w-c"], (
        "each writer's lines should come together, one writer after the other; the "
        f"order was {order}"
    )
    for name in ("w-a", "w-b", "w-c"):
        mine = [text for text in found if text.startswith(name + " ")]
        expected = [f"{name} {n} " + name[-1] * size for n in range(count)]
        assert mine == expected, f"{name}'s lines came back changed or out of order"


@pytest.mark.task("05.1")
@pytest.mark.task("01.2")
def test_each_record_is_written_with_one_write_call(lesson, sessions, monkeypatch):
    """One append is one os.write of the whole line:
    print or json.dump would split a large one."""
    writes = []
    real_write = os.write

    def write(fd, data):
        writes.append((os.fstat(fd).st_ino, bytes(data)))
        return real_write(fd, data)

    monkeypatch.setattr(lesson.os, "write", write)
    big = {
        "role": "tool",
        "tool_call_id": "call_1_0",
        "content": "map of the cave " * 16_000,
    }
    with lesson.SessionLog(
        sessions, "quest-1", **keep_lines_large(lesson, 256_000)
    ) as log:
        log.append(FIRST)
        log.append(big)

    log_inode = present(sessions / "quest-1.jsonl").stat().st_ino
    to_log = [data for inode, data in writes if inode == log_inode]
    assert len(to_log) == 2, (
        "two appends should be two write() calls to the log, one whole line each; "
        "there were "
        f"{len(to_log)} (of sizes {[len(d) for d in to_log]}): another process's "
        "write can land between two parts of a line"
    )
    assert [json.loads(data) for data in to_log] == [FIRST, big] and all(
        d.endswith(b"\n") for d in to_log
    ), ("each write() to the log should be one whole record, ending in a newline; "
        f"they were {[d[:40] + b'...' + d[-20:] for d in to_log]}")


# --- readers never repair -------------------------------------------------------------


@pytest.mark.key
@pytest.mark.task("05.1")
def test_a_reader_never_repairs_a_session_another_process_is_writing(
    lesson, sessions, other, model, town
):
    """Mid-write, the tail looks torn;
    loading, forking or a refused resume must not cut it."""
    writer = other("tear")
    writer.expect("torn")
    path = sessions / "quest-1.jsonl"
    mid_write = path.read_bytes()
    assert not mid_write.endswith(b"\n"), (
        "the other process should be in the middle of a line"
    )

    with lesson.SessionLog(sessions, "quest-1") as log:
        loaded = log.load()
    lesson.fork(sessions, "quest-1", "what-if")
    with raises(lesson.SessionBusy,
                "an agent resumed quest-1 while another process was writing it, "
                "with no error (a resume may repair the tail: it is a writer too)"):
        lesson.Agent(model.client(), model=model.model, tools=town,
                     session=lesson.SessionLog(sessions, "quest-1"))

    assert loaded == [FIRST], (
        "load() should return the one whole message, and skip the line being written: "
        f"{loaded}"
    )
    assert path.read_bytes() == mid_write, (
        "a process that does not hold the lock changed the log while another was "
        "writing it: the line being written, which looked torn, was cut or mended; "
        f"the log ends {path.read_bytes()[-80:]!r}")
    assert contents(sessions / "what-if.jsonl") == [FIRST["content"]], (
        "a fork copies whole lines only"
    )

    writer.go()
    writer.expect("done")
    with lesson.SessionLog(sessions, "quest-1") as log:
        assert [m["role"] for m in log.load()] == ["user", "assistant"], (
            "once the writer has finished its line, both messages load whole")


@pytest.mark.task("05.1")
def test_loading_while_another_process_appends_sees_only_whole_messages(
    lesson, sessions, other
):
    """Loads taken during a burst of large appends
    each see a prefix of whole messages."""
    size, count = 64 * 1024, 64
    writer = other("append", "w-a", count, size)
    writer.expect("ready")
    expected = [
        {"role": "user", "content": f"w-a {n} " + "a" * size} for n in range(count)
    ]

    writer.go()
    seen = []
    while writer.process.poll() is None or not seen:
        with lesson.SessionLog(sessions, "quest-1") as log:
            loaded = log.load()
        assert loaded == expected[: len(loaded)], (
            "a load during the writes returned something other than the first "
            f"{len(loaded)} messages"
        )
        seen.append(len(loaded))
    writer.expect("done")

    with lesson.SessionLog(sessions, "quest-1") as log:
        assert log.load() == expected, (
            "after the writer is done every message is there, whole"
        )


# --- a new session started twice ------------------------------------------------------


@pytest.mark.task("05.1")
def test_starting_a_session_another_writer_began_meanwhile_is_refused(
    lesson, sessions, model, town
):
    """An agent that found no log must not append its
    story after one another writer began since."""
    late = lesson.Agent(model.client(), model=model.model, tools=town,
                        session=lesson.SessionLog(sessions, "quest-2"))
    assert late.messages == [], (
        "quest-2 has no log yet: an agent on it should start with no messages; it "
        f"loaded {late.messages}")
    with lesson.SessionLog(sessions, "quest-2") as early:
        early.append({"role": "user", "content": "I was first."})
    before = present(sessions / "quest-2.jsonl").read_bytes()

    model.add(say("never sent"))
    with raises(lesson.SessionExists,
                "an agent that loaded quest-2 as new appended after the story "
                "another writer began meanwhile: two stories in one log"):
        late.run("I thought this session was new.")
    late.session.close()

    assert (sessions / "quest-2.jsonl").read_bytes() == before, (
        "the late agent's history is empty but the log is not: appending would splice "
        "two stories"
    )
    logs = sorted(p.name for p in sessions.iterdir() if p.suffix != ".lock")
    assert logs == ["quest-2.jsonl"], (
        f"the late agent was refused, yet the folder holds {logs}")


# --- the lock file is the session's own, and is always let go ------------------------


class StillTrying(Exception):
    """Raised by a timer in a test whose writer should have given up long before."""


@contextlib.contextmanager
def given_up_within(seconds, task, doing, instead="given up at once"):
    """Fail the test in words, naming `task`, unless the block ends within `seconds`:
    for a step that must end at once and could instead try again for ever (`instead`
    says what it should have done). The test's own hang guard (a SIGALRM timer too)
    goes on with the time it had left."""
    def still_trying(signum, frame):
        raise StillTrying

    began = time.monotonic()
    previous = signal.signal(signal.SIGALRM, still_trying)
    # Again every 0.2 s, should the code under test catch the first and go on
    guard, _ = signal.setitimer(signal.ITIMER_REAL, seconds, 0.2)
    try:
        yield
    except StillTrying:
        fail_in(task, f"{doing}, and was still at it {seconds} s later, where it "
                f"should have {instead}")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if guard:
            left = guard - (time.monotonic() - began)
            signal.setitimer(signal.ITIMER_REAL, max(left, 0.001))


def linked_sessions(sessions):
    """A sessions folder reached through a symbolic link, home -> disk, as a home
    folder moved to another disk leaves it: its path through the link."""
    disk = sessions / "disk"
    disk.mkdir(mode=0o700)
    (sessions / "home").symlink_to(disk)
    return sessions / "home"


@pytest.mark.task("05.1")
def test_a_writer_takes_a_session_in_a_folder_reached_through_a_link(lesson, sessions):
    """In a sessions folder reached through a symbolic link a writer takes a session
    no one holds at once, as anywhere else, and a second writer is refused: a link on
    the way to the folder is no file planted at the lock's name."""
    folder = linked_sessions(sessions)
    first = lesson.SessionLog(folder, "quest-1")
    try:
        with given_up_within(2, "05.1", "a writer asked for quest-1, which no one "
                             "holds, in a sessions folder reached through a symbolic "
                             "link", instead="taken it at once"):
            first.append(FIRST)
        with raises(lesson.SessionBusy, "a writer holds quest-1, in a sessions folder "
                    "reached through a symbolic link, yet a second writer got in "
                    "beside it"):
            with lesson.SessionLog(folder, "quest-1") as second:
                second.append({"role": "user", "content": "second"})
    finally:
        first.close()


@pytest.mark.task("05.2")
def test_a_writer_lets_go_of_a_session_in_a_folder_reached_through_a_link(
        lesson, sessions):
    """In a sessions folder reached through a symbolic link, a writer that closes
    leaves no lock file behind, as anywhere else, and the next writer gets in."""
    folder = linked_sessions(sessions)
    with lesson.SessionLog(folder, "quest-1") as log:
        log.append(FIRST)
    left = sorted(p.name for p in folder.iterdir())
    assert left == ["quest-1.jsonl"], (
        f"after its writer closed, the sessions folder (reached through a symbolic "
        f"link) holds {left}: a writer lets go of its lock file wherever the folder "
        "is reached from, so that a folder of idle sessions holds no lock files")
    with lesson.SessionLog(folder, "quest-1") as log:
        log.append({"role": "user", "content": "My turn."})


PLANTED = {"hard link": "a hard link to another session's log",
           "hard link to an empty log": "a hard link to another session's log, still "
                                        "empty",
           "symbolic link": "a symbolic link to another session's log",
           "symbolic link to nothing": "a symbolic link to a file that does not exist"}


@pytest.mark.task("05.1")
@pytest.mark.parametrize("timeout", [0, None], ids=["timeout=0", "timeout=None"])
@pytest.mark.parametrize("kind", list(PLANTED))
def test_a_lock_file_hard_linked_to_another_log_is_refused_never_truncated(lesson,
                                                                          sessions,
                                                                          kind,
                                                                          timeout):
    """Another session's log planted as `quest-1.lock`, under a second name (a hard
    link, to a log that holds lines or to one still empty: a lock file is told by its
    names, not by what it holds) or as a symbolic link, or a symbolic link to a file
    that does not exist: the writer refuses it at once with OSError (EPERM for a
    second name, the system's own ELOOP for a link), whatever its timeout (one that
    waits as long as it takes too: no one holds a planted file), keeps no descriptor
    of it, and leaves it as it was: the log is never truncated, nor its mode changed,
    the link's target never created, and the planted name stays, still naming what
    it named."""
    with lesson.SessionLog(sessions, "other") as log:
        log.append(FIRST)
    if kind.endswith("empty log"):
        (sessions / "other.jsonl").write_bytes(b"")  # made, its first line not yet
    precious = present(sessions / "other.jsonl").read_bytes()
    (sessions / "other.jsonl").chmod(0o644)     # its owner lets others read it
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append(FIRST)
    planted = sessions / "planted"
    target = sessions / ("nowhere.jsonl" if kind.endswith("nothing") else "other.jsonl")
    if kind.startswith("hard link"):
        os.link(target, planted)
    else:
        os.symlink(target, planted)
    lock = sessions / "quest-1.lock"
    os.replace(planted, lock)   # whatever was there before
    descriptors = open_descriptors()
    try:
        with given_up_within(2, "05.1", f"the writer kept trying to take quest-1.lock, "
                             f"{PLANTED[kind]} planted at the lock's name (a link "
                             "followed reaches a file the name never names: tried "
                             "again, it never becomes the lock)"):
            with lesson.SessionLog(sessions, "quest-1", timeout=timeout) as log:
                log.append(FIRST)
    except OSError as error:
        refused = error
    else:
        pytest.fail(f"the writer (timeout={timeout}) took a lock file that is "
                    f"{PLANTED[kind]}, and wrote the session with no error (05.1): "
                    "a planted file is refused at once, whatever the timeout",
                    pytrace=False)
    assert (sessions / "other.jsonl").read_bytes() == precious, (
        f"the lock file was {PLANTED[kind]}: that log was overwritten by the writer "
        f"(timeout={timeout})")
    mode = (sessions / "other.jsonl").stat().st_mode & 0o777
    assert mode == 0o644, (
        f"the lock file was {PLANTED[kind]}, of mode 0o644, and the refused writer "
        f"left that log at {oct(mode)}: a planted file is not the writer's to touch, "
        "its mode neither; look at what you opened before you change it")
    assert not (sessions / "nowhere.jsonl").exists(), (
        f"the lock file was {PLANTED[kind]} (nowhere.jsonl), and the refused writer "
        "created that file: an open that follows the link creates what it points to, "
        "wherever that is")
    if kind.startswith("hard link"):
        kept = lock.exists() and not lock.is_symlink() and os.path.samestat(
            lock.stat(), (sessions / "other.jsonl").stat())
    else:
        kept = lock.is_symlink() and os.readlink(lock) == str(target)
    assert kept, (
        f"quest-1.lock was {PLANTED[kind]}, and the refused writer "
        + ("removed it" if not os.path.lexists(lock) else "changed what it names")
        + ": a planted file is not the writer's to touch, its name neither")
    misnamed = file_misnamed(refused, lock)
    assert misnamed is None, (
        f"the refusal of the planted lock file ({kind}) should be an OSError naming "
        f"the lock file by its path: {misnamed}")
    if kind.startswith("hard link"):
        assert refused.errno == errno.EPERM, (
            "the refusal should be an OSError with errno EPERM, so that a caller can "
            f"tell it by its errno; its errno is {refused.errno!r} ({refused})")
    else:
        assert refused.errno == errno.ELOOP, (
            f"the refusal of {PLANTED[kind]} should be the system's own error, the "
            "ELOOP an open that follows no link gives (a link is refused by the "
            "system, not by words of the writer's own: EPERM is for what the system "
            "would take, a second name or a pipe); its errno is "
            f"{errno.errorcode.get(refused.errno, refused.errno)} ({refused})")
    assert open_descriptors() == descriptors, (
        f"the planted lock file ({kind}) was refused, and the process now holds "
        f"{open_descriptors() - descriptors} more open descriptor(s) than before: one "
        "for every refused open, for as long as the process lives, until it can open "
        "no file at all")


@pytest.mark.task("05.1")
def test_a_lock_file_that_is_no_regular_file_is_refused_and_left_alone(lesson,
                                                                       sessions):
    """A named pipe planted as `quest-1.lock` is no lock file of the session's: a
    writer, even one ready to wait 3 s for a busy session, refuses it at once with
    OSError (errno EPERM), keeps no descriptor, and leaves the pipe where it is and as
    it was, its mode too (it is not the writer's to touch). No one holds the session:
    there is nothing to wait for. A device node is no regular file either, and no
    pipe: one with /dev/null's numbers at `quest-2.lock` (a container hides a file by
    putting /dev/null in its place) is refused the same way, never made 0600 nor
    emptied. (Only root can make a device node: that case is played where the tests
    run as root, and left out, never skipped, elsewhere.)"""
    refuses_a_special_file(lesson, sessions, "quest-1", "named pipe")
    if os.geteuid() == 0:
        refuses_a_special_file(lesson, sessions, "quest-2", "device node")


def refuses_a_special_file(lesson, sessions, session_id, kind):
    """The test above, for a named pipe or a device node (`kind`) planted, of mode
    0o644, at the lock file's name of `session_id`."""
    lock = sessions / f"{session_id}.lock"
    if kind == "named pipe":
        os.mkfifo(lock, 0o600)
        expected = errno.EPERM
    else:
        os.mknod(lock, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        try:    # on a folder mounted nodev, opening it fails: the system's own error
            os.close(os.open(lock, os.O_RDWR | os.O_NOFOLLOW))
            expected = errno.EPERM
        except OSError as error:
            expected = error.errno
    os.chmod(lock, 0o644)
    kept_as = lock.lstat()
    descriptors = open_descriptors()
    try:
        with given_up_within(2, "05.1", f"a writer with timeout=3 met a {kind} "
                             "planted at the lock's name, which no one holds, and "
                             "kept trying to take it (waiting will not make it a "
                             "lock file)"):
            with lesson.SessionLog(sessions, session_id, timeout=WAIT) as log:
                log.append(FIRST)
    except OSError as error:
        refused = error
    else:
        pytest.fail(f"the writer took a {kind} as its lock file and wrote the "
                    "session with no error (05.1)",
                    pytrace=False)
    mode = lock.lstat().st_mode & 0o777 if os.path.lexists(lock) else None
    assert mode == 0o644, (
        f"the {kind} planted at the lock's name had mode 0o644, and the refused writer "
        + ("removed it" if mode is None else f"changed it to {oct(mode)}")
        + ": a file it refuses is not its to touch, and it is no file of the "
        "session's. Anything at the lock's name that is not a regular file is refused, "
        "before anything is changed: not only the kinds you thought of")
    assert refused.errno == expected, (
        f"the refusal of the {kind} should be an OSError with errno "
        f"{errno.errorcode[expected]}, before anything is truncated or written; its "
        f"errno is {refused.errno!r} ({refused})")
    assert os.path.samestat(lock.lstat(), kept_as), (
        f"the {kind} planted at the lock's name was removed or replaced: a file the "
        "writer refused is not its to remove")
    misnamed = file_misnamed(refused, lock)
    assert misnamed is None, (
        f"the refusal of the {kind} planted as the lock file should be an OSError "
        f"naming the lock file by its path: {misnamed}")
    assert open_descriptors() == descriptors, (
        f"the {kind} planted as the lock file was refused, and the process now holds "
        f"{open_descriptors() - descriptors} more open descriptor(s) than before: one "
        "for every refused open, for as long as the process lives, until it can open "
        "no file at all")
    lock.unlink()   # the user takes the planted file away
    try:
        log.append(FIRST)
    except OSError as error:
        pytest.fail(f"the {kind} planted at the lock's name was taken away, and the "
                    "same writer, asked again, was refused once more: "
                    f"{type(error).__name__}: {error}. A refusal says what is there "
                    "when it is asked, not what was there once", pytrace=False)
    finally:
        log.close()


@pytest.mark.task("05.1")
def test_a_file_planted_at_the_lock_files_name_while_a_writer_waits_is_never_written(
        lesson, sessions, monkeypatch):
    """A writer waits for a busy session (timeout 3 s); while it waits, the holder lets
    go, its lock file goes, and another session's log is planted at `quest-1.lock`
    under a second name. What the writer finds there at its next try is judged as at
    its first: it is refused with OSError (errno EPERM) naming the lock file, and the
    planted log is left as it was, its bytes, its mode and its name. A look at the name
    before the wait says nothing of what is there after it."""
    with lesson.SessionLog(sessions, "other") as log:
        log.append(FIRST)
    other_log = present(sessions / "other.jsonl")
    other_log.chmod(0o644)      # its owner lets others read it
    precious = other_log.read_bytes()
    lock = sessions / "quest-1.lock"
    descriptors = open_descriptors()
    holder = lesson.SessionLog(sessions, "quest-1")
    holder.append(FIRST)
    real_flock = lesson.fcntl.flock
    planted = []

    def flock(fd, operation):
        try:
            return real_flock(fd, operation)
        except BlockingIOError:
            if not planted and operation & fcntl.LOCK_EX:
                # Refused once: the holder lets go, its lock file goes, and another
                # session's log is linked at the lock's name
                planted.append(fd)
                holder.close()
                lock.unlink(missing_ok=True)
                os.link(other_log, lock)
            raise

    monkeypatch.setattr(lesson.fcntl, "flock", flock)
    waiting = lesson.SessionLog(sessions, "quest-1", timeout=WAIT)
    try:
        with given_up_within(2, "05.1", "a writer with timeout=3 met another "
                             "session's log planted at the lock's name while it "
                             "waited, which no one holds, and kept trying to take it"):
            waiting.append({"role": "user", "content": "second"})
    except OSError as error:
        refused = error
    else:
        refused = None
    finally:
        waiting.close()
        monkeypatch.setattr(lesson.fcntl, "flock", real_flock)
        if not planted:
            holder.close()
    if not planted:
        pytest.fail("the holder held quest-1, yet the second writer was never refused "
                    "by fcntl.flock: it took the session without asking for the lock "
                    "(05.1)", pytrace=False)
    if other_log.read_bytes() != precious or other_log.stat().st_mode & 0o777 != 0o644:
        fail_in("05.1", "while the writer waited, its holder let go and another "
                "session's log was planted at quest-1.lock under a second name; the "
                "writer then took it for its lock file and wrote into it (that log "
                + ("now holds " + repr(other_log.read_bytes()[:80])
                   if other_log.read_bytes() != precious else
                   f"has mode {oct(other_log.stat().st_mode & 0o777)}, not 0o644")
                + "): what is at the lock's name is judged at every try, on the file "
                "the lock was granted on, not once before the wait")
    assert refused is not None, (
        "while the writer waited, another session's log was planted at quest-1.lock "
        "under a second name, and the writer took the session with no error: a "
        "planted file is refused with OSError (errno EPERM) naming the lock file")
    assert refused.errno == errno.EPERM and not file_misnamed(refused, lock), (
        "a planted file found at the lock's name after a wait should be refused as "
        "one found at once, with an OSError of errno EPERM that names "
        f"{lock} by its path; it raised {type(refused).__name__} "
        f"(errno {refused.errno!r}): {file_misnamed(refused, lock) or refused}")
    assert lock.exists() and os.path.samestat(lock.stat(), other_log.stat()), (
        "the planted link at quest-1.lock was removed or replaced by the refused "
        "writer: a file the writer refuses is not its to touch, its name neither")
    assert open_descriptors() == descriptors, (
        "the planted file found after a wait was refused, and once the holder and the "
        f"writer were closed the process held {open_descriptors() - descriptors} more "
        "open descriptor(s) than before")

@pytest.mark.task("05.1")
@pytest.mark.parametrize("kind", ["hard link", "symbolic link"])
def test_a_file_planted_at_the_lock_files_name_as_it_is_opened_is_never_written(
        lesson, sessions, monkeypatch, kind):
    """Whatever a writer looked at before it opened quest-1.lock (whether the name
    was there, whether it was a link, how many names its file had), the open reaches
    what the name holds at that instant: here another session's log, planted at the
    name (a hard link to it, or a symbolic link) the very moment the writer opens the
    lock file. The writer judges what it opened: it refuses it with an OSError naming
    the lock file (EPERM for a file with a second name), keeps no descriptor of it,
    and leaves that log as it was, its bytes and its mode."""
    with lesson.SessionLog(sessions, "other") as log:
        log.append(FIRST)
    other_log = present(sessions / "other.jsonl")
    other_log.chmod(0o644)      # its owner lets others read it
    precious = other_log.read_bytes()
    lock = sessions / "quest-1.lock"
    real_open, planted = os.open, []

    def opening(path, *args, **kwargs):
        # The lock file by its path, or by its name in a folder opened (dir_fd)
        named = os.fspath(path) == str(lock) or (
            os.fspath(path) == lock.name and kwargs.get("dir_fd") is not None)
        if named and not planted:
            planted.append(path)
            link = sessions / "planted"
            if kind == "hard link":
                os.link(other_log, link)
            else:
                os.symlink(other_log, link)
            os.replace(link, lock)      # by hand, or by another program: ln -f
        return real_open(path, *args, **kwargs)

    descriptors = open_descriptors()
    writer = lesson.SessionLog(sessions, "quest-1")
    monkeypatch.setattr(os, "open", opening)
    try:
        writer.append(FIRST)
    except OSError as error:
        refused = error
    else:
        refused = None
    finally:
        monkeypatch.setattr(os, "open", real_open)
        with contextlib.suppress(OSError):
            writer.close()
    if not planted:
        return      # the lock file is opened some other way: judged by the others
    mode = other_log.stat().st_mode & 0o777
    assert other_log.read_bytes() == precious and mode == 0o644, (
        f"as the writer opened quest-1.lock, a {kind} to other.jsonl, another "
        "session's log, was planted at that name; the writer then "
        + (f"wrote into that log, which now holds {other_log.read_bytes()[:80]!r}"
           if other_log.read_bytes() != precious else
           f"changed that log's mode, from 0o644 to {oct(mode)}")
        + ". A look at the name before the open says nothing of what the open "
        "reaches: judge the file you opened (its descriptor), and open without "
        "following a link")
    assert refused is not None, (
        f"as the writer opened quest-1.lock, a {kind} to another session's log was "
        "planted at that name, and the writer took the session with no error: a "
        "planted file is refused with an OSError naming the lock file")
    misnamed = file_misnamed(refused, lock)
    assert misnamed is None, (
        f"the refusal of the {kind} planted as the writer opened the lock file should "
        f"be an OSError naming the lock file by its path: {misnamed}")
    expected = errno.EPERM if kind == "hard link" else errno.ELOOP
    assert refused.errno == expected, (
        f"the {kind} planted as the writer opened the lock file should be refused "
        f"with errno {errno.errorcode[expected]}, as one found there before ("
        + ("EPERM: a file with a second name" if kind == "hard link" else
           "ELOOP, the system's own error for a link an open does not follow")
        + f"); its errno is {errno.errorcode.get(refused.errno, refused.errno)} "
        f"({refused})")
    assert open_descriptors() == descriptors, (
        f"the {kind} planted as the writer opened the lock file was refused, and the "
        f"process now holds {open_descriptors() - descriptors} more open "
        "descriptor(s) than before")


@pytest.mark.task("05.1")
def test_a_folder_at_the_lock_files_name_is_refused_and_left_alone(lesson, sessions):
    """A folder at the lock file's name (made by hand, or by a tool gone wrong) is no
    lock file: a writer, even one ready to wait 3 s, refuses it at once with the
    system's own OSError (EISDIR) naming the lock file, keeps no descriptor, and leaves
    the folder and what it holds as they were; once the folder is taken away, the same
    writer takes the session."""
    lock = sessions / "quest-1.lock"
    lock.mkdir()
    (lock / "notes.txt").write_text("kept\n")
    descriptors = open_descriptors()
    log = lesson.SessionLog(sessions, "quest-1", timeout=WAIT)
    try:
        with given_up_within(2, "05.1", "a writer with timeout=3 met a folder at the "
                             "lock's name, which no one holds, and kept trying to "
                             "take it (waiting will not make it a lock file)"):
            log.append(FIRST)
    except OSError as error:
        refused = error
    else:
        log.close()
        pytest.fail("the writer took a folder at the lock's name for its lock and "
                    "wrote the session with no error (05.1)", pytrace=False)
    try:
        misnamed = file_misnamed(refused, lock)
        assert misnamed is None, (
            "the refusal of the folder at the lock's name should be an OSError naming "
            f"the lock file by its path: {misnamed}")
        assert refused.errno == errno.EISDIR, (
            "the refusal of the folder at the lock's name should be the system's own "
            "error, the EISDIR an open for writing gives (a folder is refused by the "
            "system, not by words of the writer's own: EPERM is for what the system "
            "would take, a second name or a pipe); its errno is "
            f"{errno.errorcode.get(refused.errno, refused.errno)} ({refused})")
        assert lock.is_dir() and (lock / "notes.txt").read_text() == "kept\n", (
            "the folder at the lock's name, or the file it held, was changed or "
            "removed: what the writer refuses is not its to touch")
        assert open_descriptors() == descriptors, (
            "the folder at the lock's name was refused, and the process now holds "
            f"{open_descriptors() - descriptors} more open descriptor(s) than before")
        shutil.rmtree(lock)     # the user takes the folder away
        try:
            log.append(FIRST)
        except OSError as error:
            pytest.fail("the folder at the lock's name was taken away, and the same "
                        "writer, asked again, was refused once more: "
                        f"{type(error).__name__}: {error}", pytrace=False)
    finally:
        log.close()


@pytest.mark.task("05.2")
@pytest.mark.parametrize("folder_mode", [0o500, 0o000], ids=["read-only", "closed"])
def test_the_lock_is_let_go_even_when_its_file_cannot_be_removed(lesson, folder_mode):
    """close() in a folder that turned read-only, or that no one may even look into
    (in a child process, as `nobody` when run as root, since root ignores a folder's
    mode): removing the lock file fails, or even finding it does, but the flock must
    still go, with its descriptor, or this process keeps its own session busy; and
    close() then raises an OSError naming the lock file it left behind, by its path.
    Closed again, later, once another writer has taken the session over in that very
    file, the first writer does nothing: the new holder keeps its lock file, and a
    third writer is refused."""
    turned = "read-only" if folder_mode == 0o500 else "closed to its own writer"
    root = Path(tempfile.mkdtemp(prefix="sessionlab-readonly-"))
    root.chmod(0o755)
    folder = root / "sessions"
    folder.mkdir(mode=0o700)
    if os.geteuid() == 0:
        os.chown(folder, 65534, 65534)

    def work():
        if os.geteuid() == 0:
            os.setgid(65534)
            os.setuid(65534)
        before = open_descriptors()
        log = lesson.SessionLog(folder, "quest-1")
        log.append(FIRST)
        folder.chmod(folder_mode)   # the lock file can no longer be removed
        try:
            log.close()
            closed = "close() returned"
        except OSError as error:
            misnamed = file_misnamed(error, folder / "quest-1.lock")
            closed = (f"OSError: {error}" if misnamed is None
                      else f"an OSError that does not name the lock file: {misnamed}")
            if closed.startswith("OSError") and error.errno != errno.EACCES:
                carries = ("no errno" if error.errno is None else "errno "
                           + errno.errorcode.get(error.errno, str(error.errno)))
                closed = (f"an OSError that names the lock file but carries {carries} "
                          "where the system said EACCES (the system's errno tells a "
                          "caller why: a folder that turned read-only, not a read-only "
                          "file system nor any other cause; an errno of the writer's "
                          f"own tells it something untrue): {error}")
            try:
                log.close()     # closed once: a second close does nothing
            except OSError as again:
                closed = (f"closed again: {type(again).__name__}: {again}")
        if folder_mode == 0o500 and closed.startswith("OSError"):
            # The next writer of the same process takes the session in the folder
            # still read-only (the lock file it left is there), and lets go: its user
            # must be told too
            after = lesson.SessionLog(folder, "quest-1")
            after.append(FIRST)
            try:
                after.close()
                closed = "the next writer's close() returned, saying nothing"
            except OSError as error:
                if misnamed := file_misnamed(error, folder / "quest-1.lock"):
                    closed = ("the next writer's close() raised an OSError that does "
                              f"not name the lock file: {misnamed}")
        folder.chmod(0o700)
        try:
            with lesson.SessionLog(folder, "quest-1") as again:
                again.append(FIRST)
                log.close()     # let go long ago: it must do nothing now
                late = ("" if (folder / "quest-1.lock").exists()
                        else "the new holder's lock file was removed")
                third = lesson.SessionLog(folder, "quest-1")
                try:
                    third.append(FIRST)
                    late = late or "its lock file was no longer its own"
                    late += "; a third writer got in beside the new holder"
                except lesson.SessionBusy:
                    pass
                finally:
                    third.close()
        except lesson.SessionBusy as error:
            return closed, f"SessionBusy: {error}", open_descriptors() - before, ""
        return closed, "ok", open_descriptors() - before, late

    try:
        outcome = unless_unfinished(in_child(work))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    closed, again, leaked, late = (outcome if isinstance(outcome, list)
                                   else ("", outcome, 0, ""))
    assert again == "ok", (
        "removing the lock file failed, and the lock was never let go: the same "
        f"process was then told {again!r}")
    assert not closed.startswith("closed again"), (
        "close() raised its OSError for the lock file it could not remove, and a "
        f"second close() raised too ({closed.removeprefix('closed again: ')}): the "
        "writer still took itself for the holder, and let go of a descriptor it had "
        "already closed (which may by then be another file's). Once close() has let "
        "go, called again it does nothing")
    assert not closed.startswith("the next writer's"), (
        f"the folder turned {turned}, so quest-1.lock could not be removed, and "
        "close() said so; the next writer of the same process took the session in "
        f"that folder and let go, and {closed.removeprefix('the next writer')[3:]}: "
        "each close that leaves a lock file behind says so, the second as the first, "
        "for each user learns it from their own writer (task 05.2)")
    assert closed.startswith("OSError"), (
        f"the folder turned {turned}, so quest-1.lock could not be removed: close() "
        "should let go of the lock and then raise an OSError naming the lock file by "
        "its path, with the system's errno, so that its user learns which lock file "
        f"was left behind, and why; {closed}")
    assert leaked == 0, (
        f"the folder turned {turned}, so quest-1.lock could not be removed; close() "
        "let go of the lock and said so, and once both writers had closed, "
        f"{leaked} more descriptor(s) were open: the lock's descriptor stayed open, "
        "and no one remembers it to close it")
    assert not late, (
        f"the folder turned {turned}, so close() left quest-1.lock behind; once the "
        "folder was writable again another writer took the session over in that very "
        "file, and the first writer, closed long before, was closed once more: "
        f"{late}. A writer that has let go does nothing when closed again, not even "
        "try again to remove the lock file it left: it may be another's by then "
        "(task 05.2)")


class AlarmRang(Exception):
    """A program's own error, raised by its SIGALRM handler to cut a step short."""


# What a signal's handler may raise, for the tests of a take cut short by it
SIGNALLED = {"Ctrl-C": KeyboardInterrupt,
             "sys.exit() of a SIGTERM handler": SystemExit,
             "a program's own error, from its SIGALRM handler": AlarmRang}


@pytest.mark.task("05.1")
@pytest.mark.parametrize("signalled", list(SIGNALLED),
                         ids=["ctrl-c", "sigterm-exit", "alarm-error"])
def test_a_ctrl_c_the_moment_the_lock_is_taken_lets_go_of_it(lesson, sessions,
                                                             monkeypatch, signalled):
    """Ctrl-C arrives the moment flock has given this writer the lock, before its
    record is written, or another signal whose handler raises (sys.exit() in a SIGTERM
    handler, a program's own timeout error from SIGALRM): the exception reaches the
    caller as it is, and the lock goes with it, no descriptor of it left open, so the
    same process can take the session at once (a program that goes on after it, or
    its clean-up, is not refused its own session)."""
    real_flock = lesson.fcntl.flock
    interrupted = []
    raised = SIGNALLED[signalled]

    def flock(fd, operation):
        real_flock(fd, operation)
        if operation & lesson.fcntl.LOCK_EX and not interrupted:
            interrupted.append(fd)
            raise raised

    before = open_descriptors()
    monkeypatch.setattr(lesson.fcntl, "flock", flock)
    reached = False
    try:
        with lesson.SessionLog(sessions, "quest-1") as log:
            log.append(FIRST)
    except raised:
        reached = True
    finally:
        monkeypatch.setattr(lesson.fcntl, "flock", real_flock)
    assert interrupted, "the writer took the session without fcntl.flock"
    assert reached, (
        f"{signalled} ({raised.__name__}) came the moment this process got the lock, "
        "and never reached the caller: it must stop what the program was doing")
    leaked = open_descriptors() - before
    try:
        with lesson.SessionLog(sessions, "quest-1") as log:
            log.append(FIRST)
    except lesson.SessionBusy as error:
        pytest.fail(f"{signalled} ({raised.__name__}) came the moment this process got "
                    f"the lock, and the lock stayed held: the same process was then "
                    f"refused ({error}). The clean-up of a failed take must run for "
                    f"any exception, a {raised.__name__} too, whatever it derives "
                    "from", pytrace=False)
    assert leaked == 0, (
        f"{signalled} ({raised.__name__}) the moment the lock was taken left {leaked} "
        "descriptor(s) open: the clean-up of a failed take must run for any "
        f"exception, a {raised.__name__} too")


class AfterTheLock:
    """The moments between flock granting a writer the lock and the writer being ready
    (its _lock returning), one a run: Python's profile hook sees each call begin and
    each call of a C function return, which is where a signal's handler runs too. A
    run armed at moment k calls `act` at the k-th of them, once; `at` then says where,
    and stays None once k is past the last moment of the window."""

    def __init__(self, lesson, monkeypatch, act):
        self.act, self.armed, self.left, self.at = act, False, 0, None
        real_flock = lesson.fcntl.flock
        module = sys.modules[lesson.SessionLog.__module__]
        self.folder = str(Path(module.__file__).parent)

        def flock(fd, operation):
            real_flock(fd, operation)
            if operation & lesson.fcntl.LOCK_EX:
                self.armed = True

        monkeypatch.setattr(lesson.fcntl, "flock", flock)

    def _hook(self, frame, event, arg):
        if not self.armed:
            return
        if event == "return" and frame.f_code.co_name == "_lock":
            self.armed = False      # the writer is ready: the window is closed
        elif event in ("call", "c_return"):
            self.left -= 1
            if self.left == 0:
                self.armed = False
                called = arg.__name__ if event == "c_return" else frame.f_code.co_name
                where = frame if event == "c_return" else frame.f_back
                while where and not where.f_code.co_filename.startswith(self.folder):
                    where = where.f_back
                self.at = (f"as {called}() "
                           + ("returned" if event == "c_return" else "began")
                           + (f" (line {where.f_lineno} of "
                              f"{Path(where.f_code.co_filename).name})"
                              if where else ""))
                self.act()

    @contextlib.contextmanager
    def at_moment(self, moment):
        """Arm the window at `moment` for what runs inside."""
        self.armed, self.left, self.at = False, moment, None
        sys.setprofile(self._hook)
        try:
            yield
        finally:
            sys.setprofile(None)


@pytest.mark.task("05.1")
@pytest.mark.parametrize("found", ["no lock file", "a stale lock file"])
def test_a_ctrl_c_at_any_step_after_the_lock_is_granted_lets_go_of_it(lesson, sessions,
                                                                    monkeypatch,
                                                                    found):
    """Ctrl-C arrives after flock granted the lock, at any step before the writer is
    ready: Python runs a signal's handler as a call returns or a function starts, so
    the KeyboardInterrupt is raised there, at each such moment in turn (one a run). It
    reaches the caller, and the lock goes with it, no descriptor of it left open. The
    writer finds no lock file, or a stale one that others may read (left by a holder
    killed with SIGKILL, made under another umask), which it must also close to them:
    one step more where a Ctrl-C can land. A Ctrl-C that lands once the writer has
    kept the lock's descriptor leaves no lock file behind either, once its close has
    let go (as every close removes its own, once task 05.2 is written)."""
    with lesson.SessionLog(sessions, "plain") as log:
        log.append(FIRST)
    # Whether a close removes its lock file (task 05.2 written): only then can this
    # test ask it of a writer a Ctrl-C stopped
    removes = not os.path.lexists(sessions / "plain.lock")
    moments = {"log": None, "kept": False}

    def interrupt():
        # Whether the writer had kept the lock's descriptor by then
        moments["kept"] = getattr(moments["log"], "_lock_fd", None) is not None
        raise KeyboardInterrupt

    window = AfterTheLock(lesson, monkeypatch, interrupt)
    a_dead_pid = a_pid_no_process_has()
    for moment in range(1, 400):
        session = f"quest-{moment}"
        if found != "no lock file":
            sessions.mkdir(parents=True, exist_ok=True)
            stale = sessions / f"{session}.lock"
            stale.write_text(json.dumps({"pid": a_dead_pid, "host": "old-host",
                                         "since": "2026-01-01T00:00:00+00:00"}),
                             encoding="utf-8")
            stale.chmod(0o644)
        log = lesson.SessionLog(sessions, session)
        moments.update(log=log, kept=False)
        before = open_descriptors()
        reached = False
        with handed_to_unlock(lesson) as given, window.at_moment(moment):
            try:
                with log:
                    log.append(FIRST)
            except KeyboardInterrupt:
                reached = True
        if window.at is None:
            break       # every moment of the window has been tried
        if removes and moments["kept"] and os.path.lexists(
                sessions / f"{session}.lock"):
            if any(fd is not None for fd in given):
                fail_in("05.2", f"a Ctrl-C came {window.at}, once the writer had "
                        "kept the lock's descriptor; its close was given that "
                        "descriptor, let go, and left its lock file behind, where a "
                        "close removes it after a record that went in")
            pytest.fail(f"a Ctrl-C came {window.at}, once the writer had kept the "
                        "lock's descriptor, and the writer, closed, left its lock file "
                        f"behind ({found} at the lock's name before): it no longer "
                        "knew the descriptor it had kept when it was closed, so its "
                        "close (task 05.2) could not tell its own lock file. Keep the "
                        "descriptor until close lets go of it (task 05.1)",
                        pytrace=False)
        assert reached, (
            f"a Ctrl-C came {window.at}, after flock granted the lock, and "
            "the KeyboardInterrupt never reached the caller: a Ctrl-C must stop the "
            "program")
        leaked = open_descriptors() - before
        try:
            with lesson.SessionLog(sessions, session) as log:
                log.append(FIRST)
        except lesson.SessionBusy as error:
            pytest.fail(f"a Ctrl-C came {window.at}, after flock granted the "
                        f"lock ({found} at the lock's name) and before the writer "
                        "kept its descriptor, and the lock "
                        "stayed held: the same process was then refused "
                        f"({error}). Every step between the lock granted and the "
                        "descriptor kept must let go of it on any exception, a "
                        "KeyboardInterrupt too", pytrace=False)
        assert leaked == 0, (
            f"a Ctrl-C came {window.at}, after flock granted the lock ({found} at "
            f"the lock's name), and left {leaked} descriptor(s) open: every step "
            "between the lock granted and the descriptor kept must close it on any "
            "exception, a KeyboardInterrupt too")
    else:
        pytest.fail("a take of the lock made more than 400 calls", pytrace=False)


@pytest.mark.task("05.1")
def test_a_ctrl_c_while_a_writer_waits_reaches_the_caller_and_leaves_the_holder_alone(
        lesson, sessions, monkeypatch):
    """Ctrl-C arrives while a writer waits for a session this process holds: at each
    moment of two of its tries in turn (one a run), between them as it sleeps and in
    the middle of one. The KeyboardInterrupt reaches the caller as it is (the user
    asked the program to stop: not a SessionBusy, and not a wait that goes on), no
    descriptor of the wait stays open, and the holder keeps the session and its lock
    file as they were."""
    monkeypatch.setattr(lesson, "LOCK_POLL_SECONDS", 0.001)
    real_flock = lesson.fcntl.flock
    window = {"refusals": 0, "events": 0, "left": None, "at": None}

    def flock(fd, operation):
        try:
            real_flock(fd, operation)
        except BlockingIOError:
            window["refusals"] += 1
            raise

    def interrupt(frame, event, arg):
        # A signal's handler runs as a call returns or a function starts. Not as the
        # call that opened a descriptor returns: no code can close what it was never
        # given.
        if window["refusals"] == 0 or event not in ("call", "c_return"):
            return
        if event == "c_return" and arg is os.open:
            return
        window["events"] += 1
        if window["left"] is None:      # the first run only counts the moments
            if window["refusals"] >= 3:
                raise KeyboardInterrupt
            return
        window["left"] -= 1
        if window["left"] == 0:
            called = arg.__name__ if event == "c_return" else frame.f_code.co_name
            window["at"] = f"as {called}() " + ("returned" if event == "c_return"
                                                else "began")
            raise KeyboardInterrupt

    def wait_for_the_session(moment):
        """What the caller gets from a writer interrupted at `moment` of its wait:
        None for the KeyboardInterrupt, else what it got instead."""
        window.update(refusals=0, events=0, left=moment, at=None)
        sys.setprofile(interrupt)
        try:
            with lesson.SessionLog(sessions, "quest-1", timeout=WAIT) as log:
                log.append({"role": "user", "content": "Me too."})
        except KeyboardInterrupt:
            return None
        except lesson.SessionBusy as error:
            return f"SessionBusy ({error})"
        except Exception as other:
            return f"{type(other).__name__} ({other})"
        finally:
            sys.setprofile(None)
        return "a writer that appended"

    holder = lesson.SessionLog(sessions, "quest-1")
    holder.append(FIRST)
    lock_file = sessions / "quest-1.lock"
    try:
        held = lock_file.read_bytes() if lock_file.exists() else None
        monkeypatch.setattr(lesson.fcntl, "flock", flock)
        wait_for_the_session(None)
        moments = window["events"]
        if window["refusals"] < 3:
            return      # a design that waits without asking again: judged elsewhere
        for moment in range(1, moments + 1):
            before = open_descriptors()
            got = wait_for_the_session(moment)
            if window["at"] is None:
                break
            assert got is None, (
                f"a Ctrl-C came {window['at']} while a writer waited for quest-1, "
                f"which this process holds, and the caller got {got} instead of the "
                "KeyboardInterrupt: a Ctrl-C while a writer waits must reach the "
                "caller as it is, at once. The user asked the program to stop, "
                "neither to hear that the session is busy nor to go on waiting")
            leaked = open_descriptors() - before
            assert leaked == 0, (
                f"a Ctrl-C came {window['at']} while a writer waited for quest-1, and "
                f"left {leaked} descriptor(s) open: a try the Ctrl-C stops must close "
                "what it opened, as a refused try does")
            now_held = lock_file.read_bytes() if lock_file.exists() else None
            assert now_held == held, (
                f"a Ctrl-C came {window['at']} while a writer waited for quest-1, and "
                f"the holder's lock file, which held {held!r:.120}, now holds "
                f"{now_held!r:.120} (None: it is gone): a writer that never got the "
                "lock must leave the holder's lock file as it was")
            with raises(lesson.SessionBusy,
                        f"a Ctrl-C came {window['at']} while a writer waited for "
                        "quest-1, and afterwards a third writer took the session its "
                        "holder never let go of: the interrupted writer must leave "
                        "the holder's lock held"):
                with lesson.SessionLog(sessions, "quest-1") as log:
                    log.append({"role": "user", "content": "And me."})
    finally:
        monkeypatch.undo()
        with contextlib.suppress(Exception):
            holder.close()


@pytest.mark.task("05.1")
@pytest.mark.parametrize("limit", [0, 10], ids=["no room at all", "room for 10 bytes"])
def test_a_lock_record_that_cannot_be_written_lets_go_of_the_lock(lesson, sessions,
                                                                  limit):
    """The disk is full when a writer that resumes the session writes its name into
    the lock file, before it writes anything to the log: from its first byte, or
    after 10, where write() takes those and returns short (a record cut short names
    no one). The OSError reaches the caller, and the lock goes with it (a real file
    size limit), so the same process can take the session once there is room
    again; and its lock file goes as the writer is closed, as on every close (once
    task 05.2 removes it there)."""
    lock = sessions / "quest-1.lock"
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append(FIRST)
    # Whether a close removes its lock file (task 05.2 written): only then can this
    # test ask it of a writer whose record failed
    removes = not os.path.lexists(lock)

    def work():
        import resource
        before = open_descriptors()
        first_errno = None
        with handed_to_unlock(lesson) as given:
            try:
                with lesson.SessionLog(sessions, "quest-1") as log:
                    log.open_for_append()   # as an agent resumes it: the lock, no line
                first = "resumed with no error"
            except OSError as error:
                first = f"OSError: {error}"
                first_errno = error.errno
        left = os.path.lexists(lock)
        kept = any(fd is not None for fd in given)
        resource.setrlimit(resource.RLIMIT_FSIZE,
                           (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        try:
            with lesson.SessionLog(sessions, "quest-1") as log:
                log.append(FIRST)
            second = "appended"
        except lesson.SessionBusy as error:
            second = f"SessionBusy: {error}"
        return {"first": first, "errno": first_errno, "left": left, "kept": kept,
                "second": second, "leaked": open_descriptors() - before}

    kind, message, result = with_file_size_limit(limit, work)
    if kind == "NotImplementedError":
        raise NotImplementedError(message)
    assert kind == "ok", f"the writers raised {kind}: {message}"
    room = ("no file could grow at all" if not limit else
            f"files could grow to {limit} bytes only (write() took the record's first "
            f"{limit} and returned short: a record cut short names no one)")
    assert result["first"].startswith("OSError"), (
        f"{room}, so writing the holder's name into the lock file, as the writer "
        "resumed the session, should fail with OSError, and that error reach the "
        f"caller; the first writer said {result['first']!r}")
    assert result["errno"] == errno.EFBIG, (
        f"{room}, so writing the holder's name into the lock file failed with EFBIG "
        "(File too large, as a full disk's ENOSPC): that error "
        f"should reach the caller, and it got {result['first']!r}, which hides it: "
        "an error raised while cleaning up after the failed write replaced it")
    assert result["second"] == "appended", (
        "the first writer failed to write its name into the lock file, and kept the "
        f"lock: the same process was then told {result['second']!r}")
    assert result["leaked"] == 0, (
        f"both writers are closed, yet {result['leaked']} more descriptor(s) are open")
    if removes and result["left"] and result["kept"]:
        fail_in("05.2", f"{room}, so the writer's record could not be written; its "
                "close was given the lock's descriptor, let go, and left its lock file "
                "behind, where a close removes it after a record that went in: an "
                "empty or short record makes the file no less the writer's own")
    assert not (removes and result["left"]), (
        f"{room}, so the writer's record could not be written and its error reached "
        "the caller; but the writer, closed, left its lock file behind, where a "
        "writer closed after its record went in removes it: the failed writer no "
        "longer knew the lock's descriptor when it was closed, so its close (task "
        "05.2) could not tell its own lock file. Keep the descriptor until close "
        "lets go of it, a failed record's too (task 05.1)")


@pytest.mark.task("05.1")
def test_a_stale_lock_file_is_overwritten_whole(lesson, sessions):
    """A dead holder's record, longer than the new one and with a key more (an older
    program's), in a file others may read (0644), or that its group may read or write,
    or others write, and an empty one others may read (its holder was killed before its
    record went in): the lock file names the new holder and nothing else, and only its
    owner may read or write it."""
    sessions.mkdir(parents=True, exist_ok=True)
    stale = {"pid": 4_000_000, "host": "a-much-longer-host-name." * 8,
             "since": "2026-01-01T00:00:00+00:00",
             "program": "an older version, which said more"}
    found = [(mode, json.dumps(stale)) for mode in (0o644, 0o640, 0o620, 0o602)]
    for number, (stale_mode, held) in enumerate([*found, (0o644, "")]):
        session = f"quest-{number + 1}"
        lock = sessions / f"{session}.lock"
        lock.write_text(held, encoding="utf-8")     # its holder died long ago
        lock.chmod(stale_mode)  # made by an older program, or under another umask

        began = time.time()
        with lesson.SessionLog(sessions, session) as log:
            log.append(FIRST)
            record = lock_record(lock)
            mode = lock.stat().st_mode & 0o777
        ended = time.time()

        mine = (os.getpid(), socket.gethostname())
        assert (record.get("pid"), record.get("host")) == mine, (
            "the lock file should name this process and host, not the dead holder: "
            f"{record}")
        assert sorted(record) == ["host", "pid", "since"], (
            f"a dead holder's record said {sorted(stale)}; the new holder's should "
            "name it, pid, host and since, and nothing else, whatever the old one "
            f"said: it holds {record}")
        try:
            since = datetime.fromisoformat(str(record.get("since"))).timestamp()
        except ValueError:
            since = None
        took = datetime.fromtimestamp(began).astimezone().isoformat(timespec="seconds")
        assert since is not None and began - 2 <= since <= ended + 2, (
            "the lock file's since should say when this writer took the session (now, "
            f"as now() gives it), not the dead holder's time nor another: it says "
            f"{record.get('since')!r}, the writer took it at {took}")
        assert mode == 0o600, (
            f"the stale lock file had mode {oct(stale_mode)}"
            + ("" if held else " and was empty (its holder was killed before its "
               "record went in)")
            + f", and this writer wrote its own record into it and left it at "
            f"{oct(mode)}: it should be readable "
            "and writable by its owner only (0o600), not by others (who could read who "
            "holds the session, or write it), nor closed to its owner's next writer")


@pytest.mark.task("05.1")
def test_a_stale_lock_file_others_may_read_never_shows_them_the_new_holder(
        lesson, sessions):
    """A dead holder left its lock file readable by others (0644; 0666 for one another
    user made, in a folder shared with this one): the new holder closes it to them
    before its own record goes in, so that at no moment, between any two of its steps,
    can others read who holds the session now. A file of another user's is no
    exception: who made it does not make it any less readable; a writer that may not
    change its mode (as no one but root may) refuses it rather than write into it.
    (Only root can make a file another user owns: that case is played where the tests
    run as root, and left out, never skipped, elsewhere.)"""
    closes_a_stale_lock_file_to_others(lesson, sessions, "quest-1", "mine")
    if os.geteuid() == 0:
        closes_a_stale_lock_file_to_others(lesson, sessions, "quest-2",
                                           "another user's")


def closes_a_stale_lock_file_to_others(lesson, sessions, session_id, owner):
    """The test above, for a stale lock file of `session_id` left by a holder of this
    user's ("mine") or another user's."""
    sessions.mkdir(parents=True, exist_ok=True)
    lock = sessions / f"{session_id}.lock"
    stale = json.dumps({"pid": a_pid_no_process_has(), "host": "old-host",
                        "since": "2026-01-01T00:00:00+00:00"})
    lock.write_text(stale, encoding="utf-8")
    lock.chmod(0o644)
    if owner != "mine":
        os.chown(lock, 65534, 65534)    # nobody's, as another user's writer left it
        lock.chmod(0o666)
    folder = str(Path(sys.modules[lesson.SessionLog.__module__].__file__).parent)
    seen = []

    def look(frame, event, arg):
        # After each call the lesson's code makes, what others could read
        if event != "c_return" or not frame.f_code.co_filename.startswith(folder):
            return
        try:
            mode = lock.stat().st_mode & 0o777
            record = json.loads(lock.read_bytes())
        except (OSError, ValueError):
            return
        mine = isinstance(record, dict) and record.get("pid") == os.getpid()
        if mode & 0o077 and mine:
            seen.append(f"{oct(mode)} as {arg.__name__}() returned")

    log = lesson.SessionLog(sessions, session_id)
    sys.setprofile(look)
    try:
        log.append(FIRST)
    except OSError as error:
        if owner == "mine":
            raise
        refused = error     # it may not close another's file to others: no harm
    else:
        refused = None
    finally:
        sys.setprofile(None)
        log.close()
    made = "a dead holder" if owner == "mine" else "another user's dead holder"
    assert not seen, (
        f"{made}'s lock file others could read "
        f"({'0o644' if owner == 'mine' else '0o666'}) held this writer's record while "
        f"its mode was {seen[0] if seen else ''}: others could read who holds the "
        "session; the file should be closed to them (0o600) before the new record is "
        "written into it"
        + ("" if owner == "mine" else ", whoever made it, or refused"))
    if refused is not None:
        assert lock.read_text(encoding="utf-8") == stale, (
            f"the writer refused another user's stale lock file ({refused}), but "
            "changed its record first")


@pytest.mark.task("05.1")
def test_a_lock_files_name_changed_once_the_lock_is_granted_is_never_written_through(
        lesson, sessions, monkeypatch):
    """Once flock has granted the lock, the file the writer holds is the one it
    changes: its mode and its record go in through the descriptor the lock was granted
    on, never by the name, which is anyone's to change at any instant. A stale lock
    file others may read is found at quest-1.lock, and someone puts a symbolic link to
    another session's log at that name by hand, at each moment in turn (one a run)
    between the lock granted and the writer ready: whatever the writer then does (goes
    on, or refuses what the name now holds), that log keeps its bytes and its mode."""
    with lesson.SessionLog(sessions, "other") as log:
        log.append(FIRST)
    other_log = present(sessions / "other.jsonl")
    other_log.chmod(0o644)      # its owner lets others read it
    precious = other_log.read_bytes()
    planted = {"lock": None}

    def swap():
        link = planted["lock"].with_name("planted")
        os.symlink(other_log, link)
        os.replace(link, planted["lock"])   # by hand: ln -sf

    window = AfterTheLock(lesson, monkeypatch, swap)
    for moment in range(1, 400):
        session = f"quest-{moment}"
        lock = sessions / f"{session}.lock"
        lock.write_text(json.dumps({"pid": 4_000_000, "host": "old-host",
                                    "since": "2026-01-01T00:00:00+00:00"}),
                        encoding="utf-8")   # its holder died long ago
        lock.chmod(0o644)
        planted["lock"] = lock
        try:
            with window.at_moment(moment), lesson.SessionLog(sessions, session) as log:
                log.append(FIRST)
        except (OSError, lesson.SessionBusy):
            pass    # what the name holds now may be refused: that is no harm
        if window.at is None:
            break       # every moment of the window has been tried
        mode = other_log.stat().st_mode & 0o777
        assert other_log.read_bytes() == precious and mode == 0o644, (
            f"the writer was granted the lock on {lock.name} (a stale lock file "
            f"others could read), and {window.at} someone put a symbolic link to "
            "other.jsonl, another session's log, at that name; the writer then "
            + (f"wrote into that log, which now holds "
               f"{other_log.read_bytes()[:80]!r}" if other_log.read_bytes() != precious
               else f"changed that log's mode, from 0o644 to {oct(mode)}")
            + ". Once the lock is granted, change the file through the descriptor "
            "the lock was granted on: a call by the name reaches whatever the name "
            "names at that instant")
    else:
        pytest.fail("a take of the lock made more than 400 calls", pytrace=False)


@pytest.mark.task("05.1")
def test_a_planted_lock_file_whose_name_goes_once_granted_is_never_written(
        lesson, sessions, monkeypatch):
    """Another session's log, which has a second name of its own (a backup made with
    `cp -al`), is planted at quest-1.lock under a third; the writer opens it and is
    granted the lock, and someone then puts a plain file in the planted name's place
    (mv fresh quest-1.lock), at each moment in turn (one a run) between the lock
    granted and the writer ready. What the writer holds is still that log, whatever
    the name holds now: judged by its descriptor, it has other names, and is never
    written. Whatever the writer then does (refuses it, or tries again on the plain
    file), that log keeps its bytes and its mode."""
    with lesson.SessionLog(sessions, "other") as log:
        log.append(FIRST)
    other_log = present(sessions / "other.jsonl")
    other_log.chmod(0o644)      # its owner lets others read it
    precious = other_log.read_bytes()
    backup = sessions / "backup"
    backup.mkdir(mode=0o700)
    os.link(other_log, backup / "other.jsonl")      # cp -al sessions backup
    planted = {"lock": None}

    def swap():
        fresh = planted["lock"].with_name("fresh")
        fresh.write_bytes(b"")
        os.replace(fresh, planted["lock"])   # by hand: mv fresh quest-1.lock

    window = AfterTheLock(lesson, monkeypatch, swap)
    for moment in range(1, 400):
        session = f"quest-{moment}"
        lock = sessions / f"{session}.lock"
        os.link(other_log, lock)
        planted["lock"] = lock
        try:
            with window.at_moment(moment), lesson.SessionLog(sessions, session) as log:
                log.append(FIRST)
        except (OSError, lesson.SessionBusy):
            pass    # what the writer opened is refused: that is right
        if window.at is None:
            break       # every moment of the window has been tried
        mode = other_log.stat().st_mode & 0o777
        assert other_log.read_bytes() == precious and mode == 0o644, (
            f"the writer opened {lock.name}, another session's log planted there "
            "(it has two more names: other.jsonl and a backup), and was granted the "
            f"lock; {window.at} someone put a plain file in that name's place, and "
            "the writer then "
            + (f"wrote into that log, which now holds "
               f"{other_log.read_bytes()[:80]!r}" if other_log.read_bytes() != precious
               else f"changed that log's mode, from 0o644 to {oct(mode)}")
            + ". Judge the file you hold by its descriptor (os.fstat): what the name "
            "holds a moment later is another file")
        lock.unlink(missing_ok=True)
    else:
        pytest.fail("a take of the lock made more than 400 calls", pytrace=False)


@pytest.mark.task("05.2")
@pytest.mark.parametrize("by_hand", ["deleted", "moved aside"])
def test_a_lock_file_removed_by_hand_is_not_removed_again_on_close(lesson, sessions,
                                                                   by_hand):
    """Someone deletes quest-1.lock while its writer holds it, or moves it aside (to
    quest-1.lock.old, where it keeps a name), and a second writer takes a new one: the
    first writer's close() must leave the second's lock file alone, and the file moved
    aside where it was put, and once both have closed no descriptor of theirs is left
    open."""
    descriptors = open_descriptors()
    first = lesson.SessionLog(sessions, "quest-1")
    first.append(FIRST)
    if not (sessions / "quest-1.lock").exists():
        first.close()
        pytest.fail("while a writer holds the session, quest-1.lock should exist",
                    pytrace=False)
    if by_hand == "deleted":
        (sessions / "quest-1.lock").unlink()    # by hand: rm sessions/*.lock
    else:   # mv sessions/quest-1.lock sessions/quest-1.lock.old
        (sessions / "quest-1.lock").rename(sessions / "quest-1.lock.old")
    second = lesson.SessionLog(sessions, "quest-1")
    try:
        second.append({"role": "user", "content": "second"})
        first.close()
        assert (sessions / "quest-1.lock").exists(), (
            "the first writer's close() removed quest-1.lock, which was no longer its "
            f"own file but the second writer's, made after someone {by_hand} the "
            "first by hand" + (" (the first writer's file still has a name, "
                               "quest-1.lock.old, but not the lock's)"
                               if by_hand == "moved aside" else ""))
        if by_hand == "moved aside":
            assert (sessions / "quest-1.lock.old").exists(), (
                "someone moved quest-1.lock aside by hand, to quest-1.lock.old, and "
                "the first writer's close() removed that file: a writer lets go of "
                "the name it took, quest-1.lock, while it is still its own file; a "
                "name someone gave the file by hand is theirs, and the file with it")
        with raises(lesson.SessionBusy, "the second writer still holds the session, "
                    "yet a third got in after the first writer closed"):
            with lesson.SessionLog(sessions, "quest-1") as third:
                third.append({"role": "user", "content": "third"})
    finally:
        for log in (first, second):
            with contextlib.suppress(OSError):  # the assertions above say what failed
                log.close()
    assert open_descriptors() == descriptors, (
        "both writers have closed, yet "
        f"{open_descriptors() - descriptors} more descriptor(s) are open: the first "
        "writer, finding its lock file gone, never closed the file it had locked")


@pytest.mark.task("05.2")
def test_closing_after_the_lock_file_was_removed_by_hand_raises_nothing(
        lesson, sessions):
    """Someone deletes quest-1.lock while its writer holds it, and no one makes a new
    one: the writer's close() raises nothing (there is nothing of its own left to
    remove), lets go, and the next writer takes the session."""
    log = lesson.SessionLog(sessions, "quest-1")
    log.append(FIRST)
    (sessions / "quest-1.lock").unlink(missing_ok=True)     # rm sessions/*.lock
    try:
        log.close()
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001 - the failure is the point
        with contextlib.suppress(Exception):
            log.close()
        pytest.fail("quest-1.lock was deleted by hand while its writer held it; "
                    f"closing the writer then raised {type(error).__name__}: {error}, "
                    "where it should let go and raise nothing", pytrace=False)
    # The number the lock's descriptor had is free again: a file opened now may get it
    spare = os.open(os.devnull, os.O_RDONLY)
    try:
        try:
            log.close()
        except NotImplementedError:
            raise
        except Exception as error:  # noqa: BLE001 - the failure is the point
            pytest.fail("quest-1.lock was deleted by hand while its writer held it; "
                        "closed once, the writer raised nothing, and closed again it "
                        f"raised {type(error).__name__}: {error}: a second close() "
                        "should find nothing left to let go", pytrace=False)
        try:
            os.fstat(spare)
        except OSError:
            pytest.fail("quest-1.lock was deleted by hand while its writer held it; "
                        "closing the writer a second time closed a file opened after "
                        "the first close (it had the number the lock's descriptor "
                        "had): the writer still kept the number of the descriptor it "
                        "had already closed", pytrace=False)
    finally:
        with contextlib.suppress(OSError):
            os.close(spare)
    try:
        with lesson.SessionLog(sessions, "quest-1") as log:
            log.append({"role": "user", "content": "next"})
    except lesson.SessionBusy as busy:
        pytest.fail("the writer whose lock file was deleted by hand has closed, and "
                    f"the next writer was refused: {busy}", pytrace=False)


@pytest.mark.task("05.2")
@pytest.mark.task("05.1")
def test_a_lock_on_descriptor_0_is_let_go_too(lesson, sessions):
    """A daemon, or a program started with its standard input closed (`<&-`), has no
    descriptor 0, and the next file it opens gets that number, its lock file too:
    descriptor 0 is a descriptor like any other, a writer takes the session on it, and
    close() lets go of it and removes the lock file (in a child process, which may
    close its own standard input)."""
    def work():
        with contextlib.suppress(OSError):
            os.close(0)
        log = lesson.SessionLog(sessions, "quest-1")
        try:
            log.append(FIRST)
        except NotImplementedError:
            raise
        except Exception as error:
            with contextlib.suppress(Exception):
                log.close()
            return {"took": described(error)}
        with log:
            held = 0 in descriptors_open()
            zero = os.path.realpath("/proc/self/fd/0") if held else ""
        left = (sessions / "quest-1.lock").exists()
        try:
            with lesson.SessionLog(sessions, "quest-1") as log:
                log.append(FIRST)
            again = "ok"
        except lesson.SessionBusy as error:
            again = f"SessionBusy: {error}"
        return {"zero": zero, "left": left, "again": again}

    result = unless_unfinished(in_child(work))
    if "took" in result:
        fail_in("05.1", "in a process started with its standard input closed, so that "
                "the lock file's open got descriptor 0, the first writer of quest-1 "
                f"could not take the session: {result['took']}. 0 is a descriptor "
                "like any other: a lock granted on it is the writer's, kept in "
                "self._lock_fd; test a descriptor for None, not for a false value")
    assert "raised" not in result, (
        f"a writer in a process with no descriptor 0 raised {result.get('raised')}: "
        f"{result.get('message')}")
    held = (f"descriptor 0 was {Path(result['zero']).name}" if result["zero"]
            else "descriptor 0 was free")
    assert result["again"] == "ok", (
        f"in a process started with its standard input closed ({held} while the "
        "writer held the session), a writer closed, and the same process was then "
        f"told {result['again']!r}: the lock on descriptor 0 was never let go. 0 is a "
        "descriptor like any other: test for None, not for a false value")
    assert not result["left"], (
        f"in a process started with its standard input closed ({held} while the "
        "writer held the session), a writer closed and left quest-1.lock behind: "
        "descriptor 0 is a descriptor like any other")


@pytest.mark.task("05.2")
def test_a_ctrl_c_at_any_step_of_close_leaves_no_lock_that_a_second_close_cannot_free(
        lesson, sessions):
    """Ctrl-C arrives while a writer closes, at each moment in turn (one a run) where
    Python runs a signal's handler: as a call returns or a function starts. The
    KeyboardInterrupt reaches the caller; closing again then raises nothing, and
    after it this process holds no lock and no descriptor of it, so the same process
    can take the session at once; and the folder holds nothing of it but its log
    and, at most, its lock file at its own name, which the next writer removes."""
    folder = str(Path(sys.modules[lesson.SessionLog.__module__].__file__).parent)
    moments = {"left": 0, "at": None}

    def interrupt(frame, event, arg):
        if event == "c_return" and arg is sys.setprofile:
            return      # this hook being put in place, under a profiler (coverage)
        if event in ("call", "c_return"):
            moments["left"] -= 1
            if moments["left"] == 0:
                called = arg.__name__ if event == "c_return" else frame.f_code.co_name
                where = frame if event == "c_return" else frame.f_back
                while where and not where.f_code.co_filename.startswith(folder):
                    where = where.f_back
                moments["at"] = (f"as {called}() "
                                 + ("returned" if event == "c_return" else "began")
                                 + (f" (line {where.f_lineno} of "
                                    f"{Path(where.f_code.co_filename).name})"
                                    if where else ""))
                raise KeyboardInterrupt

    for moment in range(1, 400):
        session = f"quest-{moment}"
        before = open_descriptors()
        log = lesson.SessionLog(sessions, session)
        log.append(FIRST)
        moments.update(left=moment, at=None)
        reached = False
        sys.setprofile(interrupt)
        try:
            log.close()
        except KeyboardInterrupt:
            reached = True
        finally:
            sys.setprofile(None)
        if moments["at"] is None:
            break       # every moment of close() has been tried
        assert reached, (
            f"a Ctrl-C came {moments['at']}, while the writer closed, and the "
            "KeyboardInterrupt never reached the caller: a Ctrl-C must stop the "
            "program")
        try:
            log.close()
        except NotImplementedError:
            raise
        except Exception as error:  # noqa: BLE001 - the failure is the point
            pytest.fail(f"a Ctrl-C came {moments['at']}, while the writer closed; "
                        f"closing it again then raised {type(error).__name__}: "
                        f"{error}. A second close() should let go of whatever the "
                        "first left, or find nothing left, and raise nothing",
                        pytrace=False)
        stray = sorted(p.name for p in sessions.iterdir()
                       if not p.name.endswith(".jsonl") and p.name != f"{session}.lock")
        assert not stray, (
            f"a Ctrl-C came {moments['at']}, while the writer closed, and once it was "
            f"closed again the folder held {stray}. What a Ctrl-C leaves may only be "
            f"the lock file at its own name, {session}.lock, which the next writer "
            "takes over and removes: a file under any other name is one no writer will "
            "ever remove (task 05.2)")
        leaked = open_descriptors() - before
        try:
            with lesson.SessionLog(sessions, session) as again:
                again.append(FIRST)
        except lesson.SessionBusy as error:
            pytest.fail(f"a Ctrl-C came {moments['at']}, while the writer closed, "
                        "and even after a second close() the lock stayed held: the "
                        f"same process was then refused ({error}). Once the "
                        "descriptor is forgotten nothing can close it: let go of it "
                        "on every way out, a KeyboardInterrupt too", pytrace=False)
        assert leaked == 0, (
            f"a Ctrl-C came {moments['at']}, while the writer closed, and after a "
            f"second close() {leaked} descriptor(s) were still open: once the "
            "descriptor is forgotten nothing can close it")
    else:
        pytest.fail("closing a writer made more than 400 calls", pytrace=False)


@pytest.mark.task("05.1")
def test_a_writer_that_started_a_session_writes_again_after_close(lesson, sessions,
                                                                  model, town):
    """An agent started a new session (no log yet), ran a turn, and its log was closed
    (its with block ended). The log is the agent's own: its next turn reopens it, as
    any writer's append after close does, and is not refused as if another writer had
    begun the session meanwhile."""
    log = lesson.SessionLog(sessions, "quest-1")
    agent = lesson.Agent(model.client(), model=model.model, tools=town, session=log)
    model.add(say("The elder nods."), say("Dawn comes."))
    with log:
        agent.run("Thank the elder.")
    try:
        agent.run("Wait for dawn.")
    except lesson.SessionExists as error:
        pytest.fail(
            "an agent that began quest-1 itself, then closed its log, was refused its "
            f"next turn ({error}): no other writer began the session; it did",
            pytrace=False)
    finally:
        log.close()
    said = [m.get("content") for m in lesson.SessionLog(sessions, "quest-1").load()]
    assert said == ["Thank the elder.", "The elder nods.", "Wait for dawn.",
                    "Dawn comes."], (
        "the agent's two turns, one before its log was closed and one after, should "
        f"both be in quest-1, in order; it holds {said}")
