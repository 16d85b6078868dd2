"""Lesson 09: sessions are personal data. Delete, expire, erase, collect.

Run: pytest lessons/09_privacy            (your code)
     pytest lessons/09_privacy --solution (the reference)

Where a test says "no byte behind", it reads every file under the sessions folder, blobs
included, and looks for the erased words. The tests about collecting blobs start a real
second process (blob_writer.py, next to this file) that stops between storing a blob
and writing the line that points to it; it is killed at the end of its test, whatever
happens.
"""

import builtins
import contextlib
import errno
import fcntl
import hashlib
import io
import json
import os
import queue
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from sessionlab.scripted import InvalidRequest, ScriptedModel, call, say, use, validate
from sessionlab.town import Town
from sessionlab.testing import check_time, fail_in, open_descriptors, raises, wait_past

BLOB_WRITER = Path(__file__).with_name("blob_writer.py")
HANG = 30       # seconds: only a guard against a process that would never answer
DAY = 24 * 3600

SECRET = "My sister Ilse lives at 12 Elm Street"
# Large enough to be stored as a blob (lesson 06), and easy to find
LARGE_SECRET = "Ilse's diary: " + "the cave is cold. " * 400
TURN_A = ("Ask the elder about the cave.", [say("The elder says: bring a torch.")])
TURN_SECRET = (SECRET, [say("Noted.")])
TURN_TOOLS = (
    "Ask the guard, then buy a rope.",
    [use(call("talk_to", npc="guard"), call("buy", item="rope")),
     say("The guard nods; the rope is yours.")],
)
TURN_C = ("Thank the elder.", [say("The elder nods.")])
# A large content of a fork's own (a blob), with none of SECRET's words
FORK_MAP = "The fork's map: " + "north by the mill, then east. " * 300


# --- helpers --------------------------------------------------------------------------


def open_agent(lesson, sessions, script=(), session_id="quest-1"):
    """A new agent on the session, as a new process would make it."""
    model = ScriptedModel(list(script))
    log = lesson.SessionLog(sessions, session_id)
    try:
        agent = lesson.Agent(model.client(), model=model.model, tools=Town(),
                             session=log)
    except BaseException:
        log.close()
        raise
    return agent, model, log


def play(lesson, sessions, *turns, session_id="quest-1"):
    """Play whole turns in one agent, as one process would; let go of the session."""
    script = [step for _, steps in turns for step in steps]
    agent, _, log = open_agent(lesson, sessions, script, session_id)
    with log:
        for text, _ in turns:
            agent.run(text)
    return agent.messages


def resume(lesson, sessions, session_id="quest-1"):
    """What a new process sees when it opens the session."""
    agent, _, log = open_agent(lesson, sessions, session_id=session_id)
    log.close()
    return agent.messages


def files_holding(folder, text):
    """Every file under `folder` (blobs included) whose bytes hold `text`."""
    needle = text.encode("utf-8")
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*")
                  if path.is_file() and needle in path.read_bytes())


def lines_of(path):
    return [json.loads(line) for line in path.read_bytes().split(b"\n") if line]


def erase_markers(path):
    return [line for line in lines_of(path) if line.get("$marker") == "erase"]


def age(path, days):
    """Make `path` look last written `days` days ago."""
    then = time.time() - days * DAY
    os.utime(path, (then, then))


def numbers_in(error, path=None):
    """The whole numbers the words of `error` give, the path `path` taken out."""
    words = str(error) if path is None else str(error).replace(str(path), "")
    return [int(number) for number in re.findall(r"(?<![\w.])-?\d+(?!\w|\.\d)", words)]


def abbreviated(names, width=12):
    """Blob names cut short for a failure message; what is no name is shown whole."""
    return [name[:width] if isinstance(name, str) else name for name in names]


def blob_names(sessions):
    blobs = sessions / "blobs"
    return sorted(p.name for p in blobs.iterdir()) if blobs.is_dir() else []


@pytest.fixture
def before_the_lock(lesson, monkeypatch):
    """before_the_lock(action): the next time anything takes a session's lock, `action`
    runs first, once: what another process may do between a look and the lock."""
    def install(action):
        real = lesson.SessionLog._lock
        done = []

        def lock(self, *args, **kwargs):
            if not done:
                done.append(True)
                action()
            return real(self, *args, **kwargs)

        monkeypatch.setattr(lesson.SessionLog, "_lock", lock)
    return install


@pytest.fixture
def after_the_lock(lesson, monkeypatch):
    """after_the_lock(action): the next time anything lets go of a session's lock,
    `action` runs just after, once: what another process may do as soon as it can."""
    def install(action):
        real = lesson.SessionLog._unlock
        done = []

        def unlock(self, *args, **kwargs):
            held = self._lock_fd is not None
            result = real(self, *args, **kwargs)
            if held and not done:
                done.append(True)
                action()
                install.ran = True
            return result

        monkeypatch.setattr(lesson.SessionLog, "_unlock", unlock)
    install.ran = False
    return install


def a_writer_appends(lesson, sessions, content: str):
    """What another process does when it gets in: open quest-1 and append `content`."""
    def append() -> None:
        with lesson.SessionLog(sessions, "quest-1") as writer:
            writer.append({"role": "user", "content": content})
    return append


def assert_locked_with_the_writers_lock(after_the_lock, name: str) -> None:
    """The test's writer came in when the lock was let go: else `name` never took the
    session's lock through the writer's lock of lesson 05, which the task names."""
    assert after_the_lock.ran, (
        f"{name} never let go of quest-1's lock through the writer's lock of lesson 05 "
        "(SessionLog), so this test could not let a writer in at that moment: take "
        "the session's lock with it, as the task says")


def failing_open(monkeypatch, name):
    """From now on, opening a file named `name` fails with EIO, as a bad disk does."""
    real = os.open

    def open_(path, *args, **kwargs):
        if Path(path).name == name:
            raise OSError(5, "Input/output error (the test's)", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)


@contextlib.contextmanager
def reading_back_after_an_erase(what, path):
    """`what` (a second erase by the same writer, say) runs after an erase of the log
    at `path`. Words for what it meets when the first erase left the writer with a
    file it cannot read back (EBADF), or with the file the log's name no longer
    reaches: the first erase then comes undone (its marker line is gone)."""
    markers = [line for line in path.read_bytes().split(b"\n")
               if b'"erase"' in line and erase_marker(line)]
    try:
        yield
    except OSError as error:
        if error.errno != errno.EBADF:
            raise
        pytest.fail(f"{what} failed with {error}: after the erase, the file the writer "
                    "holds cannot be read back, yet the writer reads its log again for "
                    "every later erase (and compaction), as it did before",
                    pytrace=False)
    if not all(marker in path.read_bytes() for marker in markers):
        pytest.fail(f"{what} undid the erase before it: the log no longer holds "
                    "that erase's marker line, nor (most likely) its tombstone. The "
                    "second erase rewrote the log from what it read through the "
                    "writer, and that was the log as it was before the first erase",
                    pytrace=False)


def erase_marker(line):
    """Whether a line of the log (bytes) is an erase marker."""
    try:
        entry = json.loads(line)
    except ValueError:
        return False
    return isinstance(entry, dict) and entry.get("$marker") == "erase"


def erase_refused(lesson, log, path, index, held):
    """Fail in words unless erase(`index`) on the log at `path`, of `held` messages, is
    refused with EraseError naming the log and the index asked for, and leaves the log
    as it was; gives the error."""
    before = path.read_bytes()
    with raises(lesson.EraseError,
                f"erase({index}) on a log of {held} messages was allowed") as raised:
        log.erase(index)
    assert path.read_bytes() == before, f"a refused erase({index}) changed the log"
    error = raised.value
    assert str(path) in str(error), (
        f"erase({index}) on {path.name}, a log of {held} messages, was refused in "
        f"words that do not name the log by its path ({path}), so a user erasing in "
        f"several sessions cannot tell which one refused: {error}")
    assert index in numbers_in(error, path), (
        f"erase({index}) on {path.name}, a log of {held} messages, was refused in "
        f"words that do not say which message was asked for ({index}, counted from "
        f"0 as the index given): {error}")
    return error


def store_again(lesson, sessions, session_id, data):
    """Another writer stores `data` as a blob (a second later than a moment ago) and
    lets go before its line: the blob is touched, and pinned no more."""
    time.sleep(0.05)        # the file system's clock is coarser than time.time()
    with lesson.SessionLog(sessions, session_id) as other:
        return other.store_blob(data)


def sent_on_going_on(agent, model):
    """Run "Shall we go on?" and give the request it sent, as JSON text."""
    agent.run("Shall we go on?")
    return json.dumps(model.requests[-1]["messages"], ensure_ascii=False)


def left_by_a_stopped_erase_and_delete(sessions):
    """Leave of quest-1 what a stopped erase and delete leave, 40 days old (an old meta
    file, and the erase's copy of the log, without the log): gives the meta file and
    the copy."""
    log = sessions / "quest-1.jsonl"
    copy = sessions / ".quest-1.jsonl.k2j4h1.tmp"
    copy.write_bytes(log.read_bytes())
    log.unlink()
    meta = sessions / "quest-1.meta.json"
    meta.write_text(json.dumps({"format": 1, "id": "quest-1"}))
    for path in (meta, copy):
        age(path, 40)
    return meta, copy


# --- 09.1: delete ---------------------------------------------------------------------


@pytest.mark.key
@pytest.mark.task("09.1")
@pytest.mark.task("09.5")
def test_delete_removes_the_log_the_meta_file_the_lock_and_blobs_only_it_used(
    lesson, sessions
):
    """delete_session removes the session's log, meta file and lock, and each blob it
    used that no other session refers to; other sessions stay as they were. The fork
    quest-1b has a meta file (its lineage), shares quest-1's blob, and has a blob of
    its own, named by its log only."""
    play(lesson, sessions, TURN_A, (LARGE_SECRET, [say("Noted.")]))
    play(lesson, sessions, TURN_C, session_id="quest-2")
    [blob] = blob_names(sessions)
    lesson.fork(sessions, "quest-1", "quest-1b")
    assert (sessions / "quest-1b.meta.json").exists(), (
        "the test's own set-up: a fork has a meta file")
    play(lesson, sessions, (FORK_MAP, [say("Noted.")]), session_id="quest-1b")
    [own] = [name for name in blob_names(sessions) if name != blob]
    other = (sessions / "quest-2.jsonl").read_bytes()
    source = (sessions / "quest-1.jsonl").read_bytes()

    assert lesson.delete_session(sessions, "quest-1b") is True, (
        "delete_session should return True when it deleted a session")
    left = sorted(p.name for p in sessions.iterdir())
    assert left == ["blobs", "quest-1.jsonl", "quest-2.jsonl"], (
        "deleting the fork quest-1b should remove its log and its meta file (and leave "
        f"no lock file), and nothing of the other sessions; the folder holds {left}")
    assert own not in blob_names(sessions), (
        "the fork quest-1b stored a blob of its own (the map its user pasted), which "
        "only its log names; the delete removed its log and its meta file and left "
        f"that blob ({own[:12]}...) in blobs/. Every file the delete removes is read "
        "for the blobs it names, the log as much as the meta file beside it, and "
        "each blob no other file names goes with them")
    assert blob_names(sessions) == [blob], (
        "quest-1 still refers to the blob it shares with its fork: deleting the fork "
        "must keep it, or quest-1 no longer loads")
    assert (sessions / "quest-1.jsonl").read_bytes() == source, (
        "deleting the fork quest-1b changed the log of quest-1, its source")
    assert (sessions / "quest-2.jsonl").read_bytes() == other, (
        "deleting quest-1b changed the log of quest-2")

    assert lesson.delete_session(sessions, "quest-1") is True
    assert blob_names(sessions) == [], (
        "once no session refers to a blob, deleting the last one that did removes it; "
        f"blobs/ still holds {blob_names(sessions)}")
    assert files_holding(sessions, "Ilse") == [], (
        "after both sessions that held the words were deleted, no file may hold them")
    assert sorted(p.name for p in sessions.iterdir() if p.name != "blobs") == [
        "quest-2.jsonl"], (
        "after deleting quest-1 and its fork, only quest-2 (and blobs/) should be left")


@pytest.mark.task("09.1")
@pytest.mark.task("09.5")
def test_a_delete_drops_the_blob_a_log_longer_than_a_read_buffer_points_to_at_its_end(
    lesson, sessions
):
    """A quest of many days: 500 messages (about 90 KiB, more than a buffer of 64 KiB
    holds), then the pasted diary, stored as a blob, at the very end. The delete reads
    the whole log for the blobs it mentions: the diary's blob goes with it."""
    path = sessions / "quest-1.jsonl"
    path.write_text("".join(
        json.dumps({"role": "user" if k % 2 == 0 else "assistant",
                    "content": f"On day {k} we rest by the mill. " * 5}) + "\n"
        for k in range(500)))
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": LARGE_SECRET})
    assert path.stat().st_size > 64 * 1024 and blob_names(sessions), (
        "the test's own set-up: a log past 64 KiB whose last turn's blob is stored")
    assert lesson.delete_session(sessions, "quest-1") is True
    assert files_holding(sessions, "Ilse") == [] and blob_names(sessions) == [], (
        f"the session's log was {path.name}, 500 messages long, with the diary's blob "
        "mentioned on its last line; after the delete, blobs/ still holds "
        f"{abbreviated(blob_names(sessions))}: the log was read for blob "
        "names only in part (up to a buffer's size?), and the person's words stay")


@pytest.mark.key
@pytest.mark.task("09.1")
def test_delete_refuses_a_session_another_writer_holds_and_deletes_nothing(
    lesson, sessions
):
    """A session with a writer is not deleted: SessionBusy, and every file stays."""
    play(lesson, sessions, TURN_A)
    before = sorted(p.name for p in sessions.iterdir())
    with lesson.SessionLog(sessions, "quest-1") as writer:
        writer.append({"role": "user", "content": "Still talking."})
        with raises(lesson.SessionBusy,
                    "delete_session went ahead while another process held the "
                    "session and was writing it; it should refuse with "
                    "SessionBusy"):
            lesson.delete_session(sessions, "quest-1")
        assert (sessions / "quest-1.jsonl").exists(), (
            "a refused delete must leave the log where it is")
        writer.append({"role": "user", "content": "And still."})
    assert [m["content"] for m in resume(lesson, sessions)][-2:] == [
        "Still talking.", "And still."], (
        "the writer's messages should all be in the log after a refused delete")
    assert sorted(p.name for p in sessions.iterdir()) == before


@pytest.mark.task("09.1")
def test_delete_locked_removes_the_files_under_the_callers_lock_and_names_the_blobs(
    lesson, sessions
):
    """delete_locked is the part of a delete done under the lock, for a caller that
    already holds it: every file of the session goes (a copy a crash left included),
    the lock file stays the caller's until it lets go, and the names of the blobs
    the files mentioned come back, for the caller to drop."""
    play(lesson, sessions, (LARGE_SECRET, [say("Noted.")]))
    play(lesson, sessions, TURN_C, session_id="quest-2")
    [blob] = blob_names(sessions)
    (sessions / ".quest-1.jsonl.k2j4h1.tmp").write_bytes(
        (sessions / "quest-1.jsonl").read_bytes())
    with lesson.SessionLog(sessions, "quest-1") as holder:
        holder.open_for_append()    # the caller: it holds the session's lock
        named = lesson.delete_locked(sessions, "quest-1")
        left = sorted(p.name for p in sessions.iterdir())
        assert left == ["blobs", "quest-1.lock", "quest-2.jsonl"], (
            "delete_locked(folder, 'quest-1'), called while the caller held the "
            "session's lock, should remove the log and the copy a crash left beside "
            "it, leave the lock file to its holder (it lets go of it itself) and "
            f"leave quest-2 alone; the folder holds {left}")
        assert named is not None and blob in named, (
            "quest-1's log pointed to a blob: delete_locked should return its name "
            f"among the blobs the removed files mentioned (the caller drops them "
            f"once it lets go of the lock); it returned {named!r}")
        assert blob in blob_names(sessions), (
            "delete_locked(folder, 'quest-1') removed the blob quest-1's log pointed "
            "to: it removes the session's files only and names its blobs; dropping "
            "them is the caller's, once it has let go of the lock")
    assert not (sessions / "quest-1.lock").exists()


@pytest.mark.task("09.1")
def test_deleting_twice_or_a_session_that_never_was_changes_nothing(
    lesson, sessions, before_the_lock
):
    """Deleting is idempotent: a session already deleted, or never made, gives False and
    creates nothing, not even a lock file for a moment, nor a folder that was not
    there."""
    play(lesson, sessions, TURN_A)
    try:
        deleted = lesson.delete_session(str(sessions), "quest-1")
    except (TypeError, AttributeError) as error:
        pytest.fail(f"delete_session() given its folder as a str raised {error!r}: "
                    "the folder may be a str or a Path", pytrace=False)
    assert deleted is True
    locked = []
    before_the_lock(lambda: locked.append(True))
    assert lesson.delete_session(sessions, "quest-1") is False, (
        "deleting a session that is already gone should return False, not raise")
    assert lesson.delete_session(sessions, "never-was") is False
    assert list(sessions.iterdir()) == [], (
        "deleting sessions that do not exist must create nothing, found "
        f"{sorted(p.name for p in sessions.iterdir())}")
    assert not locked, (
        "deleting a session of which the folder holds nothing took its lock: that "
        "makes a lock file, for a moment, for a session that is not there")
    nowhere = sessions / "nowhere"
    try:
        found = lesson.delete_session(nowhere, "quest-1")
    except OSError as error:
        pytest.fail(f"deleting a session in a folder that does not exist raised "
                    f"{error!r}: there is nothing of it, so the answer is False",
                    pytrace=False)
    assert found is False and not nowhere.exists(), (
        f"deleting in a folder that does not exist should return False and create "
        f"nothing; it returned {found!r}, and the folder exists: {nowhere.exists()}")
    # A session whose id merely starts like the one deleted (an id may hold dots)
    play(lesson, sessions, TURN_A, session_id="quest-1.day-2")
    locked.clear()
    before_the_lock(lambda: locked.append(True))
    found = lesson.delete_session(sessions, "quest-1")
    assert found is False and not locked, (
        "the folder holds only quest-1.day-2, another session whose id merely starts "
        "like quest-1: deleting quest-1 should answer False and take no lock; it "
        f"returned {found!r}" + (", and took quest-1's lock" if locked else ""))
    assert (sessions / "quest-1.day-2.jsonl").exists()


@pytest.mark.task("09.1")
def test_delete_refuses_a_session_whose_writer_holds_the_lock_before_its_log_exists(
    lesson, sessions
):
    """A writer takes the session's lock before it creates its log: a lock file alone
    may be a writer's that is opening the session right now. The delete takes the lock
    to know: SessionBusy, and the lock file stays its holder's."""
    writer = lesson.SessionLog(sessions, "quest-1")
    try:
        writer.append({"role": "user", "content": "Hello."})    # it holds the lock
        # The moment a writer opening the session holds the lock and has made no log
        # yet: the test takes the log away from under it to make that moment
        (sessions / "quest-1.jsonl").unlink()
        with raises(lesson.SessionBusy,
                    "delete_session went ahead while a writer held quest-1's lock (its "
                    "log not created yet); it should refuse with SessionBusy"):
            lesson.delete_session(sessions, "quest-1")
        assert (sessions / "quest-1.lock").exists(), (
            "a refused delete removed the lock file of the writer that holds the "
            "lock: another writer could now take the session beside it")
    finally:
        writer.close()


@pytest.mark.task("09.1")
def test_delete_removes_a_lock_file_a_dead_writer_left_alone(lesson, sessions):
    """A writer killed before it wrote a line leaves only its lock file: that is
    something of the session, so deleting it removes the lock file and answers True."""
    lock_file = sessions / "quest-1.lock"
    lock_file.write_text('{"pid": 999999, "host": "gone", "since": "day 1"}')
    assert lesson.delete_session(sessions, "quest-1") is True, (
        "the folder held quest-1's lock file, left by a writer that died: deleting "
        "quest-1 should remove it and return True")
    assert list(sessions.iterdir()) == [], (
        "after deleting quest-1, nothing of it may be left; the folder holds "
        f"{sorted(p.name for p in sessions.iterdir())}")


@pytest.mark.task("09.1")
def test_delete_removes_a_meta_file_a_failed_fork_left_without_its_log(
    lesson, sessions
):
    """A meta file with no log (a fork that failed half-way) is no session, but it
    names one: deleting that id removes it."""
    (sessions / "quest-9.meta.json").write_text('{"format": 1, "id": "quest-9"}')
    try:
        found = lesson.delete_session(sessions, "quest-9")
    except OSError as error:
        pytest.fail(f"deleting a session with a meta file and no log raised {error!r}: "
                    "the meta file names the session, and goes", pytrace=False)
    assert found is True and list(sessions.iterdir()) == [], (
        "a meta file left without its log names session quest-9: deleting quest-9 "
        f"should remove it and return True; it returned {found!r}, and the folder "
        f"holds {sorted(p.name for p in sessions.iterdir())}")


@pytest.mark.task("09.1")
def test_delete_removes_a_log_no_line_was_ever_written_to(lesson, sessions):
    """A log of zero bytes (its writer died before its first line) is something of
    the session all the same: deleting the session removes it and answers True."""
    (sessions / "quest-1.jsonl").write_bytes(b"")
    found = lesson.delete_session(sessions, "quest-1")
    left = sorted(p.name for p in sessions.iterdir())
    assert found is True and left == [], (
        "the folder held quest-1's log, empty (its writer died before its first "
        "line): deleting quest-1 should remove it and return True; it returned "
        f"{found!r}, and the folder holds {left}")


@pytest.mark.task("09.1")
def test_delete_leaves_a_session_whose_id_differs_only_in_case(lesson, sessions):
    """Session ids are told apart character by character: Quest-1 is another session
    than quest-1. Deleting quest-1 leaves Quest-1's log, meta file and the temporary
    copy a crash left of its log as they were."""
    probe = sessions / "Probe"
    probe.write_text("")
    folds_case = (sessions / "probe").exists()
    probe.unlink()
    if folds_case:
        pytest.skip("this file system ignores case: Quest-1 and quest-1 are one name")
    play(lesson, sessions, TURN_A, session_id="Quest-1")
    (sessions / "Quest-1.meta.json").write_text('{"format": 1, "id": "Quest-1"}')
    copy = sessions / ".Quest-1.jsonl.k2j4h1.tmp"
    copy.write_bytes((sessions / "Quest-1.jsonl").read_bytes())
    play(lesson, sessions, TURN_SECRET)
    before = {p.name: p.read_bytes() for pattern in ("Quest-1.*", ".Quest-1.*")
              for p in sessions.glob(pattern)}
    assert lesson.delete_session(sessions, "quest-1") is True
    after = {p.name: p.read_bytes() for pattern in ("Quest-1.*", ".Quest-1.*")
             for p in sessions.glob(pattern)}
    assert after == before, (
        "deleting quest-1 changed the files of Quest-1, another session whose id "
        f"differs only in case: it had {sorted(before)}, it has {sorted(after)}. An id "
        "names one session exactly; every other session stays as it was")


@pytest.mark.task("09.1")
@pytest.mark.parametrize("what", ["the-folder", "the-log"])
def test_a_folder_that_cannot_be_listed_is_never_answered_as_empty(
    lesson, sessions, monkeypatch, what
):
    """The sessions folder cannot be listed (permission denied, say), or the log it
    lists cannot be looked at (an I/O error from the disk): the delete cannot know
    what of the session is there. It never answers False (nothing of the session in
    the folder), nor True (deleted), while the session's log is still there: the
    caller hears the error."""
    play(lesson, sessions, TURN_SECRET)
    folder = os.fspath(sessions)

    def refusing(real):
        def list_(path=".", *args, **kwargs):
            if os.fspath(path).rstrip(os.sep) == folder:
                raise PermissionError(13, "Permission denied (the test's)", folder)
            return real(path, *args, **kwargs)
        return list_

    def failing(real):
        def look(path, *args, **kwargs):
            if not isinstance(path, int) and Path(path).name == "quest-1.jsonl":
                raise OSError(5, "Input/output error (the test's)", str(path))
            return real(path, *args, **kwargs)
        return look

    if what == "the-folder":
        for name in ("listdir", "scandir"):
            monkeypatch.setattr(os, name, refusing(getattr(os, name)))
    else:
        for name in ("lstat", "stat"):
            monkeypatch.setattr(os, name, failing(getattr(os, name)))
    try:
        found = lesson.delete_session(sessions, "quest-1")
    except OSError:
        found = None    # the caller heard it
    finally:
        monkeypatch.undo()
    still = (sessions / "quest-1.jsonl").exists()
    failure = ("the sessions folder could not be listed (permission denied)"
               if what == "the-folder" else
               "quest-1's log could not be looked at (an I/O error from lstat)")
    assert not (found is not None and still), (
        f"{failure}, and delete_session() answered {found!r}, as if "
        + ("nothing of quest-1 were there" if found is False else "quest-1 were gone")
        + "; its log, with the person's words, is still there. An error that leaves "
        "the session's files unknown must reach the caller")


@pytest.mark.task("09.1")
def test_delete_also_removes_what_a_crashed_write_of_the_session_left(lesson, sessions):
    """A temporary file a crashed erase or fork left beside the log holds the session's
    words too: deleting the session removes it, and every other such copy (two crashes
    leave two)."""
    play(lesson, sessions, TURN_SECRET)
    leftover = sessions / ".quest-1.jsonl.k2j4h1.tmp"
    leftover.write_bytes((sessions / "quest-1.jsonl").read_bytes())
    # A second crash, a second copy: every copy goes, not one of each file's
    (sessions / ".quest-1.jsonl.p0q9.tmp").write_bytes(leftover.read_bytes())
    (sessions / ".quest-1.meta.json.a8_b2.tmp").write_text("{}")
    (sessions / ".quest-10.jsonl.zz.tmp").write_text("another session's")
    # The temporary copy of the log of session "quest-1.jsonl" (an id may hold dots)
    (sessions / ".quest-1.jsonl.jsonl.zz.tmp").write_text("another session's")
    # Names no temporary copy of quest-1's files takes (a dot, the file's whole name,
    # a dot, a random part without a dot, .tmp): someone else's files
    others = ["quest-1.jsonl.zz.tmp", ".quest-1.jsonl.zz.bak", ".quest-1.jsonl.tmp",
              ".quest-1.jsonl..tmp", ".quest-1.jsonl..zz.tmp", ".quest-1_jsonl.zz.tmp",
              ".quest-1.jsonl.zz.tmp~", ".quest-1.jsonl.tmpfile",
              ".quest-1.jsonl.zzxtmp"]
    for name in others:
        (sessions / name).write_text("someone else's")
    lesson.delete_session(sessions, "quest-1")
    removed = [name for name in others if not (sessions / name).exists()]
    assert not removed, (
        f"deleting quest-1 removed {removed}: no temporary copy of quest-1's log or "
        "meta file is named so. A temporary copy of a file is a dot, that file's whole "
        "name, a dot, a random part (no dot in it) and .tmp; any other name is not the "
        "session's, and stays")
    assert files_holding(sessions, "Ilse") == [], (
        "two temporary copies of the log were left behind by two crashes; deleting "
        "the session must remove every one of them. Still holding the words: "
        f"{files_holding(sessions, 'Ilse')}")
    assert not (sessions / ".quest-1.meta.json.a8_b2.tmp").exists(), (
        "a temporary copy of the meta file, left by a crashed meta write, is still "
        "there after the delete: it is the session's too (it names its lineage). Its "
        "random part, a8_b2, is as tempfile makes one: letters, digits and '_'")
    assert (sessions / ".quest-10.jsonl.zz.tmp").exists(), (
        "deleting quest-1 removed a temporary file of quest-10")
    assert (sessions / ".quest-1.jsonl.jsonl.zz.tmp").exists(), (
        "deleting quest-1 removed .quest-1.jsonl.jsonl.zz.tmp, the temporary copy of "
        "the log of another session, 'quest-1.jsonl' (an id may hold dots): its name "
        "merely starts like a temporary copy of quest-1's log. A temporary copy of a "
        "file is a dot, that file's whole name, a dot, a random part and .tmp")


@pytest.mark.task("09.1")
def test_a_file_of_the_session_gone_while_the_delete_runs_is_no_error(
    lesson, sessions, monkeypatch
):
    """Another program (a person cleaning the folder by hand) removes the session's
    files while the delete runs, just as it removes its first one: the others, or that
    very one, a moment before the delete does. A file already gone is not an error:
    the delete answers True and goes on, with nothing of the session left."""
    play(lesson, sessions, TURN_SECRET)
    real = {name: getattr(os, name) for name in ("unlink", "remove")}
    for which in ("the others", "that very one"):
        lesson.fork(sessions, "quest-1", "quest-1b")
        (sessions / ".quest-1b.jsonl.k2j4h1.tmp").write_text("a copy")
        gone = []

        def removing_first(name):
            def remove(path, *args, **kwargs):
                base = Path(path).name
                if not gone and "quest-1b" in base and not base.endswith(".lock"):
                    gone.extend(sorted(
                        p.name for p in sessions.iterdir()
                        if "quest-1b" in p.name and not p.name.endswith(".lock")
                        and (p.name == base) == (which == "that very one")))
                    for other in gone:
                        real["unlink"](sessions / other)
                return real[name](path, *args, **kwargs)
            return remove

        for name in real:
            monkeypatch.setattr(os, name, removing_first(name))
        try:
            found = lesson.delete_session(sessions, "quest-1b")
        except FileNotFoundError as error:
            pytest.fail(f"another program removed {gone} while delete_session was "
                        f"removing quest-1b's files, and the delete raised {error!r}: "
                        "a file already gone is what the delete wanted, not an error",
                        pytrace=False)
        finally:
            monkeypatch.undo()
        assert gone, (
            "the test's own set-up: the delete removed none of quest-1b's files")
        left = sorted(p.name for p in sessions.iterdir() if "quest-1b" in p.name)
        assert found is True and not left, (
            f"another program removed {gone} ({which} of quest-1b's files, as the "
            "delete came to its first file) a moment before the delete did: the "
            f"delete should answer True and go on, leaving nothing of quest-1b; it "
            f"returned {found!r}, and these files of quest-1b are left: {left}")


@pytest.mark.task("09.1")
def test_a_copy_gone_between_the_listing_and_the_look_is_no_error(
    lesson, sessions, monkeypatch
):
    """A temporary copy of the log is listed, then gone before the delete looks at it
    (another process's erase renamed it over the log just then): the delete raises
    nothing, answers True, and leaves nothing of the session.

    The test removes the copy the first time anything asks for its status."""
    play(lesson, sessions, TURN_SECRET)
    (sessions / ".quest-1.jsonl.k2j4h1.tmp").write_text("a copy")
    gone = {".quest-1.jsonl.k2j4h1.tmp"}
    real = os.lstat

    def lstat(path, *args, **kwargs):
        name = os.path.basename(os.fspath(path))
        if name in gone:
            gone.discard(name)
            os.unlink(path)     # renamed away by another process, just then
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", lstat)
    try:
        found = lesson.delete_session(sessions, "quest-1")
    except FileNotFoundError as error:
        pytest.fail(f"a temporary copy of quest-1's log was gone by the time the "
                    f"delete looked at the file it had listed, and the delete raised "
                    f"{error!r}: a file already gone is no error", pytrace=False)
    finally:
        monkeypatch.undo()
    assert found is True and not [p for p in sessions.iterdir()
                                  if "quest-1" in p.name], (
        f"the delete should answer True and leave nothing of quest-1; it returned "
        f"{found!r}, and the folder holds {sorted(p.name for p in sessions.iterdir())}")


@pytest.mark.task("09.1")
def test_delete_leaves_a_folder_that_took_a_temporary_copys_name_alone(
    lesson, sessions, before_the_lock
):
    """A folder named like a temporary copy of the log is nothing this store wrote:
    the delete goes ahead, answers True, and leaves that folder as it was. Once only
    that folder is left, nothing of the session is: deleting again answers False and
    takes no lock."""
    play(lesson, sessions, TURN_A)
    planted = sessions / ".quest-1.jsonl.mine.tmp"
    planted.mkdir()
    (planted / "notes.txt").write_text("someone's own")
    try:
        found = lesson.delete_session(sessions, "quest-1")
    except OSError as error:
        pytest.fail(f"deleting quest-1 raised {error!r}: a folder that took the name "
                    "of a temporary copy of its log is no file of the session (no "
                    "crashed write makes a folder), and stays", pytrace=False)
    assert found is True and not (sessions / "quest-1.jsonl").exists(), (
        f"the delete returned {found!r}: quest-1 should be deleted, its log gone")
    assert (planted / "notes.txt").exists(), (
        "the delete removed a folder that only took the name of a temporary copy of "
        "quest-1's log, and what it held: it is not the session's")
    locked = []
    before_the_lock(lambda: locked.append(True))
    again = lesson.delete_session(sessions, "quest-1")
    assert again is False and not locked, (
        "the folder holds nothing of quest-1 any more, only a folder that took the "
        "name of a temporary copy of its log: deleting quest-1 again should answer "
        f"False and take no lock; it returned {again!r}"
        + (", and took quest-1's lock" if locked else ""))
    assert (planted / "notes.txt").exists()


@pytest.mark.task("09.1")
def test_delete_removes_a_link_planted_under_a_sessions_name_and_not_what_it_reaches(
    lesson, sessions
):
    """A symbolic link someone put under one of the session's names (its meta file's,
    pointing to a folder; a temporary copy's, pointing to a file; another copy's,
    pointing to a file that is gone) is something of the session: the delete removes
    the link itself, whatever it reaches (or nothing), answers True and leaves what
    the links reach as it was."""
    play(lesson, sessions, TURN_A)
    album = sessions.parent / "album"
    album.mkdir()
    (album / "photo.txt").write_text("someone's own")
    notes = sessions.parent / "notes.txt"
    notes.write_text("someone's own notes")
    planted = [sessions / "quest-1.meta.json", sessions / ".quest-1.jsonl.x7k2p9.tmp",
               sessions / ".quest-1.meta.json.q8w3e1.tmp"]
    planted[0].symlink_to(album)
    planted[1].symlink_to(notes)
    planted[2].symlink_to(sessions.parent / "gone.txt")     # reaches nothing
    found = lesson.delete_session(sessions, "quest-1")
    left = [path.name for path in planted if os.path.lexists(path)]
    assert found is True and left == [], (
        "quest-1 had three links planted under its names (its meta file's, reaching a "
        "folder, a temporary copy's, reaching a file, and another copy's, reaching a "
        "file that is gone): after a delete that "
        f"returned {found!r}, the folder still holds {left}. A link under a session's "
        "name is something of it (only a folder that took the name is not), also one "
        "that reaches nothing: the delete removes the link itself, never following "
        "it")
    assert (album / "photo.txt").read_text() == "someone's own" and (
        notes.read_text() == "someone's own notes"), (
        "the delete changed what a link planted under quest-1's names reaches: only "
        "the link goes")


@pytest.mark.task("09.1")
@pytest.mark.parametrize("name", ["quest-1.jsonl", "quest-1.meta.json", "quest-1.lock"],
                         ids=["the-log", "the-meta-file", "the-lock-file"])
def test_delete_removes_a_link_that_reaches_nothing_under_a_sessions_name(
    lesson, sessions, name
):
    """All that is left of quest-1 is a symbolic link under one of its names (its
    log's, its meta file's, its lock file's) that reaches nothing. A link under a
    session's name is something of it, whatever it reaches: a look that follows links
    (Path.exists, os.path.isfile) sees nothing there, and the delete would answer False
    and leave the link. The delete removes the link itself and answers True (or
    refuses, naming it), and makes nothing where the link points."""
    link = sessions / name
    gone = sessions.parent / f"gone-{name}"
    link.symlink_to(gone)
    try:
        found = lesson.delete_session(sessions, "quest-1")
    except OSError as error:
        assert str(link) in str(error), (
            f"the delete refused quest-1, whose {name} is a link to nothing, in words "
            f"that do not name {link}: {error}")
    else:
        assert found is True and not os.path.lexists(link), (
            f"all that was left of quest-1 was a link to nothing under its name "
            f"{name}; delete_session() returned {found!r} and the link is "
            f"{'still' if os.path.lexists(link) else 'not'} there. A link under a "
            "session's name is something of the session, also one that reaches "
            "nothing (a look through the link, as Path.exists() or os.path.isfile() "
            "make, finds nothing): the delete removes the link and answers True (or "
            "refuses, naming it), never 'there was nothing'")
    assert not os.path.lexists(gone), (
        f"the delete followed quest-1's link {name} and made {gone}")


@pytest.mark.task("09.1")
def test_delete_refuses_an_id_that_is_a_path_whatever_the_folder_holds(
    lesson, sessions
):
    """An id that is a path is refused, as everywhere in the store (lesson 01), also
    when the folder holds nothing of it: the caller learns that the id is wrong, not
    that there was nothing to delete."""
    (sessions.parent / "quest-1.jsonl").write_text("")     # outside the folder
    for bad_id in ("../quest-1", "", "a/b"):
        with raises(lesson.InvalidSessionId,
                    f"delete_session(folder, {bad_id!r}) answered without refusing "
                    "the id: it is no plain name (a path reaches outside the folder), "
                    "and the answer False would say that the session was simply not "
                    "there"):
            lesson.delete_session(sessions, bad_id)
    assert (sessions.parent / "quest-1.jsonl").exists()


def delete_stopped(lesson, sessions, monkeypatch, session_id, stop_after, failure):
    """Delete `session_id`, stopped (an I/O error, or a Ctrl-C) as it is about to
    remove its file number `stop_after + 1`; return the names it removed, and what the
    delete returned (None when it raised)."""
    removed = []
    real = {name: getattr(os, name) for name in ("unlink", "remove")}

    def failing(name):
        def remove(path, *args, **kwargs):
            base = Path(path).name
            if base.startswith((f"{session_id}.", f".{session_id}.")) and base.endswith(
                    (".jsonl", ".meta.json", ".tmp")):
                if len(removed) == stop_after:
                    if failure == "ctrl-c":
                        raise KeyboardInterrupt("the test's Ctrl-C")
                    raise OSError(5, "Input/output error (the test's)", str(path))
                removed.append(base)
            return real[name](path, *args, **kwargs)
        return remove

    for name in real:
        monkeypatch.setattr(os, name, failing(name))
    try:
        outcome = lesson.delete_session(sessions, session_id)
    except (OSError, KeyboardInterrupt):
        outcome = None  # the delete stopped: what it left is what the test is about
    monkeypatch.undo()
    return removed, outcome


@pytest.mark.task("09.1")
@pytest.mark.parametrize("stop_after", [1, 2], ids=["one-removal", "two-removals"])
@pytest.mark.parametrize("failure", ["io-error", "ctrl-c"])
def test_a_delete_stopped_half_way_leaves_no_session_that_looks_whole(
    lesson, sessions, monkeypatch, stop_after, failure
):
    """A delete that stops after removing one of the session's three files, or two of
    them (an I/O error, a crash, a Ctrl-C), leaves the whole session (its log and its
    meta file: a temporary copy may be gone, it was never part of it) or no session at
    all (a meta file or a copy without its log is none), never a log that still opens
    without its meta file; deleting again, in the same process too, finishes the job:
    the stopped delete held on to nothing, its lock included (a Ctrl-C is a
    KeyboardInterrupt, which is no Exception)."""
    play(lesson, sessions, TURN_SECRET)
    lesson.fork(sessions, "quest-1", "quest-1b")
    (sessions / ".quest-1b.jsonl.k2j4h1.tmp").write_bytes(
        (sessions / "quest-1b.jsonl").read_bytes())
    removed, outcome = delete_stopped(lesson, sessions, monkeypatch, "quest-1b",
                                      stop_after, failure)
    stop = "a Ctrl-C" if failure == "ctrl-c" else "an I/O error"
    assert len(removed) == stop_after, (
        f"the test's own set-up: the delete removed {removed} of quest-1b's three "
        f"files, the test stops it after {stop_after}")
    left = sorted(p.name for p in sessions.iterdir() if "quest-1b" in p.name)
    if (sessions / "quest-1b.jsonl").exists():
        assert "quest-1b.meta.json" in left, (
            f"the delete of quest-1b removed {' and '.join(removed)} and then stopped "
            f"({stop}); it left {left}: the fork's log without its meta file, a "
            "session that still opens and resumes but has lost its lineage, and no "
            "later look can tell that a delete was under way")
    assert outcome is not True, (
        f"the delete of quest-1b removed {' and '.join(removed)}, then could not "
        f"remove the next file ({stop}), and returned True; it left {left}: "
        "the caller was told the session is gone, and its words are still there. "
        "The error reaches the caller")
    try:
        again = lesson.delete_session(sessions, "quest-1b")
    except lesson.SessionBusy as error:
        pytest.fail(f"a delete of quest-1b stopped half-way ({stop}) and left {left}; "
                    f"deleting it again in the same process was refused: {error}. The "
                    "stopped delete kept the session's lock, where it should hold "
                    "nothing once it is over, whatever stopped it", pytrace=False)
    assert again is True, (
        f"a delete that stopped half-way ({stop}) left {left}: deleting again should "
        f"finish the job and return True; it returned {again!r}")
    assert not [p.name for p in sessions.iterdir() if "quest-1b" in p.name], (
        "deleting again after a delete that stopped half-way should leave nothing of "
        f"quest-1b; the folder holds {sorted(p.name for p in sessions.iterdir())}")


@pytest.mark.task("09.1")
def test_a_ctrl_c_as_the_delete_takes_the_lock_leaves_the_session_to_the_next_delete(
    lesson, sessions, monkeypatch
):
    """A Ctrl-C (a KeyboardInterrupt, which is no Exception) that lands as the delete
    takes the session's lock, once the lock is granted and the delete writes its name
    into the lock file, reaches the caller and deletes nothing; the stopped delete
    holds nothing, its lock included: deleting again, in the same process, deletes
    the session."""
    play(lesson, sessions, TURN_A)
    lock = sessions / "quest-1.lock"
    real = os.pwrite

    def interrupted(fd, data, offset):
        try:
            ours = os.path.samestat(os.fstat(fd), os.lstat(lock))
        except OSError:
            ours = False
        if ours:
            monkeypatch.setattr(os, "pwrite", real)
            raise KeyboardInterrupt("the test's Ctrl-C")
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", interrupted)
    with raises(KeyboardInterrupt, "a Ctrl-C as the delete of quest-1 wrote its name "
                "into the session's lock file did not reach the caller"):
        lesson.delete_session(sessions, "quest-1")
    monkeypatch.undo()
    assert (sessions / "quest-1.jsonl").exists(), (
        "a Ctrl-C as the delete took the session's lock, before it removed anything, "
        "left no log of quest-1: the delete went on after the user stopped it")
    try:
        again = lesson.delete_session(sessions, "quest-1")
    except lesson.SessionBusy as error:
        pytest.fail("a Ctrl-C stopped the delete of quest-1 as it took the session's "
                    "lock; deleting it again in the same process was refused: "
                    f"{error}. The stopped delete kept the lock, where it should hold "
                    "nothing once it is over, whatever stopped it, and at whatever "
                    "moment: this Ctrl-C came while the delete was still taking the "
                    "lock, once it was granted, as its name went into the lock file",
                    pytrace=False)
    left = sorted(p.name for p in sessions.iterdir() if "quest-1" in p.name)
    assert again is True and left == [], (
        "deleting quest-1 again after a Ctrl-C stopped the first delete as it took the "
        f"lock should delete it and return True; it returned {again!r} and left {left}")


@pytest.mark.task("09.1")
@pytest.mark.task("09.5")
@pytest.mark.parametrize("step", ["opening-the-log", "removing-its-blob"])
def test_a_ctrl_c_while_a_delete_reads_or_drops_the_blobs_reaches_the_caller(
    lesson, sessions, monkeypatch, step
):
    """The user presses Ctrl-C (a KeyboardInterrupt, which is no Exception) while
    delete_session opens the session's log to read the blobs it mentions, or while it
    removes the blob only that session used. A Ctrl-C is no file that cannot be read
    and no blob to leave for later: it stops the delete and reaches the caller, and
    the stopped delete holds nothing: deleting again is not refused, and leaves nothing
    of the session."""
    play(lesson, sessions, (LARGE_SECRET, [say("Noted.")]))
    [blob] = blob_names(sessions)
    stopped = []

    def interrupting(real):
        def call(path, *args, **kwargs):
            if not isinstance(path, int) and not stopped and Path(path).name == (
                    "quest-1.jsonl" if step == "opening-the-log" else blob):
                stopped.append(True)
                raise KeyboardInterrupt("the test's Ctrl-C")
            return real(path, *args, **kwargs)
        return call

    if step == "opening-the-log":
        patched = [(os, "open"), (io, "open"), (builtins, "open")]
    else:
        patched = [(os, name) for name in ("unlink", "remove", "rename", "replace")]
    for module, name in patched:
        monkeypatch.setattr(module, name, interrupting(getattr(module, name)))
    try:
        outcome = lesson.delete_session(sessions, "quest-1")
    except KeyboardInterrupt:
        outcome = "stopped"
    finally:
        monkeypatch.undo()
    doing = ("opened quest-1's log to read the blobs it mentions"
             if step == "opening-the-log" else "removed the blob only quest-1 used")
    assert stopped, f"the test's own set-up: delete_session never {doing}"
    assert outcome == "stopped", (
        f"the user pressed Ctrl-C while delete_session {doing}, and the delete went on "
        f"and returned {outcome!r}: a Ctrl-C stops the delete and reaches the caller, "
        "whatever step it lands in; it is no file that cannot be read")
    try:
        lesson.delete_session(sessions, "quest-1")
    except lesson.SessionBusy as error:
        pytest.fail(f"a delete of quest-1 stopped by a Ctrl-C while it {doing}; "
                    f"deleting it again in the same process was refused: {error}. The "
                    "stopped delete should hold nothing once it is over", pytrace=False)
    left = sorted(p.name for p in sessions.iterdir() if "quest-1" in p.name)
    assert not left, (
        f"a delete stopped by a Ctrl-C while it {doing}, then deleted again, should "
        f"leave nothing of quest-1; the folder holds {left}")


@pytest.mark.task("09.1")
def test_delete_removes_a_copy_of_the_log_that_appeared_after_the_caller_looked(
    lesson, sessions, before_the_lock
):
    """What the caller saw may be out of date: a temporary copy of the log that
    appears while delete_session runs (a crashed erase of another process left it) is
    removed too.

    The copy appears just before the session's lock is taken."""
    play(lesson, sessions, TURN_SECRET)
    copy = sessions / ".quest-1.jsonl.r4nd0m.tmp"
    words = (sessions / "quest-1.jsonl").read_bytes()
    before_the_lock(lambda: copy.write_bytes(words))
    assert lesson.delete_session(sessions, "quest-1") is True
    assert files_holding(sessions, "Ilse") == [], (
        "a temporary copy of the log appeared while delete_session ran (before it "
        "held the session), and is still there after the delete, with the words: "
        f"{files_holding(sessions, 'Ilse')}")


@pytest.mark.task("09.1")
@pytest.mark.task("09.5")
def test_delete_removes_the_blobs_of_a_damaged_log(lesson, sessions):
    """A log with a corrupt line in the middle (cut in the middle of a character: its
    bytes are no UTF-8 text) and a torn last line (its writer crashed after storing a
    blob, in the middle of the line that points to it) is deleted all the same, and the
    blobs both lines name go with it."""
    play(lesson, sessions, TURN_A, (LARGE_SECRET, [say("Noted.")]))
    with lesson.SessionLog(sessions, "scratch") as other:
        torn = other.store_blob(("Ilse's letters: " + "dear sister, " * 400).encode())
    path = sessions / "quest-1.jsonl"
    lines = path.read_bytes().split(b"\n")
    lines.insert(1, b'{"role": "user", "content": "half a caf\xc3')   # cut mid-char
    path.write_bytes(b"\n".join(lines)
                     + b'{"role": "user", "content": {"$blob": "' + torn.encode())
    assert len(blob_names(sessions)) == 2, "the test's own set-up: two blobs"
    try:
        assert lesson.delete_session(sessions, "quest-1") is True
    except (ValueError, OSError) as error:
        pytest.fail(f"delete_session refused a damaged log ({error!r}): a person's "
                    "words must be deletable whatever state their log is in (this one "
                    "has a corrupt middle line, cut in the middle of a character, and "
                    "a torn last line): its bytes are read as bytes, not as text",
                    pytrace=False)
    assert blob_names(sessions) == [], (
        "the blobs named by the damaged log (one by its torn last line) should go with "
        f"it; blobs/ still holds {abbreviated(blob_names(sessions))}")


@pytest.mark.task("09.1")
@pytest.mark.task("09.5")
@pytest.mark.parametrize("log", ["readable", "unreadable"])
def test_delete_removes_the_blob_only_a_copy_a_crashed_erase_left_refers_to(
    lesson, sessions, monkeypatch, log
):
    """An erase of another process crashed while it rewrote the log: its copy of the
    log is left beside it, and a line of the copy points to a blob that no other file
    names (the erase stored a scrubbed message anew). Deleting the session removes
    the copy, and that blob with it: it holds the person's words too. Also when the
    log itself cannot be read: the copy can, and says what it points to."""
    play(lesson, sessions, TURN_A)
    with lesson.SessionLog(sessions, "scratch") as other:
        blob = other.store_blob(LARGE_SECRET.encode())
    age(sessions / "blobs" / blob, 1)
    scrubbed = {"role": "user", "content": {"$blob": blob, "size": len(LARGE_SECRET),
                                            "preview": LARGE_SECRET[:20]}}
    copy = sessions / ".quest-1.jsonl.e5r4s3.tmp"
    copy.write_bytes((sessions / "quest-1.jsonl").read_bytes()
                     + json.dumps(scrubbed).encode() + b"\n")
    if log == "unreadable":
        failing_open(monkeypatch, "quest-1.jsonl")
    try:
        assert lesson.delete_session(sessions, "quest-1") is True
    except OSError as error:
        pytest.fail(f"with quest-1.jsonl unreadable (EIO), delete_session raised "
                    f"{error!r}: the session should be deleted all the same",
                    pytrace=False)
    monkeypatch.undo()
    assert not copy.exists(), "the copy a crashed erase left of the log should go"
    assert blob_names(sessions) == [], (
        "the copy of the log that a crashed erase left pointed to a blob no other file "
        f"names ({blob[:12]}...); the delete removed the copy and left the blob, with "
        "the person's words in it, for no file to reach: the blobs only the session "
        "used are those its copies point to as well"
        + ("; and a log that cannot be read (EIO here) keeps only the blobs it may "
           "point to, not those the other files of the session name"
           if log == "unreadable" else ""))


@pytest.mark.task("09.1")
@pytest.mark.parametrize("unreadable", ["quest-1.jsonl", "quest-2.jsonl"])
def test_delete_goes_ahead_when_a_file_cannot_be_read(
    lesson, sessions, monkeypatch, unreadable
):
    """The session's own log cannot be read (no blob names then), or another log that
    may refer to its blobs cannot (no blob can be judged): the session is deleted all
    the same, without an error, and its blob is kept for collect_blobs to judge."""
    play(lesson, sessions, (LARGE_SECRET, [say("Noted.")]))
    play(lesson, sessions, TURN_C, session_id="quest-2")
    [blob] = blob_names(sessions)
    failing_open(monkeypatch, unreadable)
    try:
        deleted = lesson.delete_session(sessions, "quest-1")
    except OSError as error:
        pytest.fail(f"with {unreadable} unreadable (EIO), delete_session raised "
                    f"{error!r}: the session should be deleted all the same, its blobs "
                    "left for collect_blobs", pytrace=False)
    monkeypatch.undo()
    assert deleted is True and not (sessions / "quest-1.jsonl").exists(), (
        f"with {unreadable} unreadable, delete_session should still delete quest-1")
    assert blob_names(sessions) == [blob], (
        "a blob that may still be referred to (a file could not be read) must stay")


@pytest.mark.task("09.1")
def test_a_blob_stored_again_while_the_delete_runs_stays(
    lesson, sessions, before_the_lock
):
    """Another writer stores the same bytes again while the delete runs (it will write
    the line that points to them next): the blob is young, and stays."""
    play(lesson, sessions, (LARGE_SECRET, [say("Noted.")]))
    [blob] = blob_names(sessions)
    age(sessions / "blobs" / blob, 2)
    before_the_lock(lambda: store_again(lesson, sessions, "quest-2",
                                        LARGE_SECRET.encode()))
    assert lesson.delete_session(sessions, "quest-1") is True
    assert blob_names(sessions) == [blob], (
        "another writer stored the blob again after the delete began, and the delete "
        "removed it: that writer's next line would point to nothing")


@pytest.mark.task("09.1")
def test_deleting_many_sessions_leaves_no_descriptor_open(lesson, sessions):
    """A delete holds nothing once it returns: deleting a hundred sessions, each with
    its log, its meta file and a copy a crashed write left, leaves this process with
    as many open files as before, and the folder empty."""
    for number in range(100):
        session_id = f"quest-{number}"
        line = json.dumps({"role": "user", "content": f"{SECRET} ({number})"})
        (sessions / f"{session_id}.jsonl").write_text(line + "\n")
        (sessions / f".{session_id}.jsonl.k2j4h1.tmp").write_text(line + "\n")
        (sessions / f"{session_id}.meta.json").write_text(
            json.dumps({"format": 1, "id": session_id}))
    before = open_descriptors()
    for number in range(100):
        assert lesson.delete_session(sessions, f"quest-{number}") is True
    left = open_descriptors() - before
    assert left == 0, (
        f"deleting 100 sessions (3 files each) left {left} more file descriptor(s) "
        "open than before: each file a delete reads (for the blobs it names) must be "
        "closed again, or a store that deletes every day runs out of them")
    assert sorted(p.name for p in sessions.iterdir()) == [], (
        "after deleting every session, the folder still holds "
        f"{sorted(p.name for p in sessions.iterdir())[:5]}")


# --- 09.2: expire ---------------------------------------------------------------------


@pytest.mark.key
@pytest.mark.task("09.1")
def test_a_writer_that_takes_the_session_once_the_delete_lets_go_keeps_its_log(
    lesson, sessions, after_the_lock
):
    """The delete holds the session's lock until its files are gone: a writer that
    takes the session the moment the delete lets go of it starts the session anew,
    and keeps the message it was told is written."""
    play(lesson, sessions, TURN_A)
    after_the_lock(a_writer_appends(lesson, sessions, "Back again."))
    assert lesson.delete_session(sessions, "quest-1") is True
    assert_locked_with_the_writers_lock(after_the_lock, "delete_session")
    kept = [m.get("content") for m in resume(lesson, sessions)]
    assert kept == ["Back again."], (
        "a writer took quest-1 as soon as the delete let go of its lock, and appended "
        "one message: the session should now hold that message alone (the delete "
        f"was done before), and it holds {kept}. A delete that lets go of the lock "
        "before its files are gone removes a log a writer is appending to")


@pytest.mark.task("09.2")
def test_expire_deletes_the_sessions_nobody_appended_to_within_the_retention(
    lesson, sessions
):
    """expire() deletes a session whose log was last appended to 31 days ago, read
    yesterday or not, keeps one of 29 days, and keeps a fork made 40 days ago (its
    meta file says so) that was used yesterday: "older than" is the last append, not
    the creation, nor the last read."""
    for session_id in ("old", "read", "young", "forked"):
        play(lesson, sessions, TURN_A, session_id=session_id)
    meta = sessions / "forked.meta.json"
    meta.write_text(json.dumps({"format": 1, "id": "forked", "parent": "young",
                                "forked_at": 1,
                                "created": "2026-01-01T00:00:00+00:00"}))
    age(meta, 40)
    age(sessions / "old.jsonl", 31)
    # Appended to 31 days ago, read yesterday (a viewer, a backup tool)
    os.utime(sessions / "read.jsonl", (time.time() - DAY, time.time() - 31 * DAY))
    age(sessions / "young.jsonl", 29)
    age(sessions / "forked.jsonl", 1)

    deleted, busy = lesson.expire(sessions)

    assert deleted == ["old", "read"], (
        "with the default retention of 30 days, only 'old' and 'read' (last appended "
        "to 31 days ago: their modification time; the time their status changed is "
        "today's, as the test set their times back, and 'read' was last read "
        f"yesterday) should be deleted; expire() deleted {deleted}")
    assert busy == []
    left = sorted(p.name for p in sessions.iterdir())
    assert left == ["forked.jsonl", "forked.meta.json", "young.jsonl"], (
        f"after expire() the folder should hold the young sessions, it holds {left}")
    assert lesson.expire(sessions, older_than=0.5 * DAY) == (["forked", "young"], []), (
        "with a retention of half a day both remaining sessions are idle long enough")


@pytest.mark.key
@pytest.mark.task("09.2")
def test_expire_skips_a_session_a_writer_holds_however_old(lesson, sessions):
    """A session whose writer is still there is never deleted under it: expire() skips
    it and says so; the next expire() deletes it once the writer let go."""
    play(lesson, sessions, TURN_A)
    play(lesson, sessions, TURN_C, session_id="quest-2")
    age(sessions / "quest-2.jsonl", 31)
    with lesson.SessionLog(sessions, "quest-1") as writer:
        writer.open_for_append()    # holds the lock, appends nothing: the log stays old
        age(sessions / "quest-1.jsonl", 31)
        deleted, busy = lesson.expire(sessions)
        assert "quest-2" in deleted, (
            "quest-1 is busy (a writer holds it), and quest-2, idle as long and held "
            "by nobody, comes after it: expire() should report quest-1 busy and go on "
            f"to delete quest-2; it returned deleted={deleted}, busy={busy}")
        deleted.remove("quest-2")
        assert (deleted, busy) != ([], []), (
            "expire() took quest-1 for a session in use: it neither deleted it nor "
            "reported it busy. Its log was last appended to 31 days ago (the test set "
            "its modification time back; the time its status changed is today's): it "
            "is idle, and its writer makes it busy")
        assert (deleted, busy) == ([], ["quest-1"]), (
            "quest-1 is idle but another writer holds it: it must be skipped and "
            f"reported as busy; expire() returned deleted={deleted}, busy={busy}")
        assert (sessions / "quest-1.jsonl").exists(), "expire() deleted under a writer"
    assert lesson.expire(sessions) == (["quest-1"], [])


@pytest.mark.task("09.2")
def test_expire_counts_back_from_now_and_keeps_a_log_changed_at_the_cutoff(
    lesson, sessions
):
    """The cutoff is `now` less `older_than`: a log last changed exactly then is not
    older than the retention, and stays; one changed a second, or half a second,
    before goes. A meta file left without its log follows the same rule: changed
    exactly at the cutoff, it stays."""
    play(lesson, sessions, TURN_A, session_id="at-cutoff")
    play(lesson, sessions, TURN_A, session_id="before-it")
    play(lesson, sessions, TURN_A, session_id="half-before")
    then = 1_700_000_000        # whole seconds: the file system keeps them exactly
    os.utime(sessions / "at-cutoff.jsonl", (then, then))
    os.utime(sessions / "before-it.jsonl", (then - 1, then - 1))
    half = (then * 10**9 - 5 * 10**8,) * 2      # in nanoseconds: kept exactly too
    os.utime(sessions / "half-before.jsonl", ns=half)
    left = sessions / "left-at-cutoff.meta.json"    # a stopped delete's meta file
    left.write_text(json.dumps({"format": 1, "id": "left-at-cutoff"}))
    os.utime(left, (then, then))
    early = lesson.expire(sessions, older_than=0, now=0.0)
    assert early == ([], []), (
        "with now = 0.0 (the first moment of 1970) and older_than = 0, the cutoff is "
        "0.0, and no file of the folder is older than that: nothing should go. "
        f"expire() returned {early}: was a `now` of 0 taken for no `now` at all?")
    with lesson.SessionLog(sessions, "at-cutoff") as writer:
        writer.open_for_append()    # holds the lock, appends nothing
        found = lesson.expire(sessions, older_than=100, now=then + 100)
    assert found == (["before-it", "half-before"], []), (
        "with now = T + 100 and older_than = 100, the cutoff is T: a log changed at T "
        "stays, and so does a meta file left without its log changed at T (it is not "
        "older than the cutoff either); the logs changed at T - 1 and at T - 0.5 go "
        "(a time is compared as it is, not rounded to a whole second). The log "
        "changed at T is not idle, so the writer holding it makes it no busy one "
        f"either. expire() returned {found}")
    assert left.exists(), (
        "a meta file left without its log, last changed exactly at the cutoff, was "
        "removed: like a log changed then, it is not older than the retention")
    play(lesson, sessions, TURN_A, session_id="later")
    later = sessions / "left-later.meta.json"
    later.write_text(json.dumps({"format": 1, "id": "left-later"}))
    for path in (sessions / "later.jsonl", later):
        os.utime(path, ns=(then * 10**9 + 75 * 10**7,) * 2)
    with lesson.SessionLog(sessions, "later") as writer:
        writer.open_for_append()    # holds the lock, appends nothing
        found = lesson.expire(sessions, older_than=100, now=then + 100.5)
    assert found == (["at-cutoff", "left-at-cutoff"], []), (
        "with now = T + 100.5 and older_than = 100, the cutoff is T + 0.5: the log "
        "and the meta file changed at T go, the log and the meta file changed at "
        "T + 0.75 stay (a "
        "time is compared as it is: cut to a whole second, T + 0.75 would be T). "
        "The log changed at T + 0.75 is not idle, so the writer holding it makes "
        "it no busy one either: reported busy, its lock was tried, which only a "
        "time read as older than it is (cut to a whole second, say) leads to, at "
        f"the first look or the one under the lock. expire() returned {found}")
    found = lesson.expire(sessions, older_than=0, now=then + 1)
    assert found == (["later", "left-later"], []), (
        "with now = T + 1 and older_than = 0 (no retention at all), the cutoff is "
        "T + 1: the log and the meta file changed at T + 0.75 go. expire() returned "
        f"{found}: was an older_than of 0 taken for no older_than at all?")


@pytest.mark.task("09.2")
def test_each_expire_counts_back_from_the_present_of_its_own_run(lesson, sessions):
    """A program that expires every night, in one process: each run with no `now`
    counts back from the present of that run. A log last appended to exactly 30 days
    before the first run ended is not older than the retention then; by the next run,
    a moment later, it is, and that run deletes it."""
    play(lesson, sessions, TURN_A)
    lesson.expire(sessions)
    ended = time.time()
    # Exactly the retention before the first run ended, to the nanosecond
    then = int((ended - lesson.RETENTION_SECONDS) * 10**9)
    os.utime(sessions / "quest-1.jsonl", ns=(then, then))
    while time.time() < ended + 0.001:    # the present moves on: a millisecond, no more
        pass
    found = lesson.expire(sessions)
    assert found == (["quest-1"], []), (
        "a first expire() ran; then a log was set to have been last appended to "
        "exactly 30 days before that run ended, and a later expire() ran, with no "
        "`now`: its cutoff is 30 days before its own present, later than that, so the "
        f"log is older than the retention and goes. expire() returned {found}: a "
        "present read once, at an earlier run, is out of date by the next")


@pytest.mark.task("09.2")
@pytest.mark.task("09.5")
def test_expire_removes_the_blobs_only_the_expired_sessions_used(lesson, sessions):
    """A session expire() deletes leaves nothing behind, as after a delete: the blob
    only it used goes; a blob a young session (here its fork) still refers to stays."""
    play(lesson, sessions, (LARGE_SECRET, [say("Noted.")]), session_id="old")
    play(lesson, sessions, (LARGE_SECRET.upper(), [say("Noted.")]), session_id="shared")
    lesson.fork(sessions, "shared", "young")
    shared = [name for name in blob_names(sessions)
              if lesson.blobs_of(lines_of(sessions / "young.jsonl")[0]) == [name]]
    for session_id in ("old", "shared"):
        age(sessions / f"{session_id}.jsonl", 40)
    found = lesson.expire(sessions)
    assert found == (["old", "shared"], []), (
        f"'old' and 'shared' are 40 days idle, their fork 'young' is not; expire() "
        f"returned {found}")
    assert blob_names(sessions) == shared, (
        "the blob only 'old' used should go with it, and the one the young fork still "
        "refers to stay; blobs/ holds "
        f"{abbreviated(blob_names(sessions))}, the fork's is "
        f"{abbreviated(shared)}")
    assert files_holding(sessions, "Ilse's diary: the cave") == [], (
        "an expired session's words are still in the folder: "
        f"{files_holding(sessions, 'Ilse' + chr(39) + 's diary: the cave')}")


@pytest.mark.task("09.2")
@pytest.mark.parametrize("expired", ["a-session", "a-leftover"])
def test_a_blob_stored_again_while_expire_runs_stays(
    lesson, sessions, before_the_lock, expired
):
    """Another writer stores the same bytes as an expired session's blob while expire
    runs (it will write the line that points to them next): the blob stays. Also when
    what expire takes is what a stopped erase and delete left of the session (an old
    meta file, and the erase's copy of the log, which points to the blob)."""
    play(lesson, sessions, (LARGE_SECRET, [say("Noted.")]))
    [blob] = blob_names(sessions)
    age(sessions / "blobs" / blob, 40)
    if expired == "a-leftover":
        left_by_a_stopped_erase_and_delete(sessions)
    else:
        age(sessions / "quest-1.jsonl", 40)
    before_the_lock(lambda: store_again(lesson, sessions, "quest-2",
                                        LARGE_SECRET.encode()))
    assert lesson.expire(sessions) == (["quest-1"], [])
    assert blob_names(sessions) == [blob], (
        "another writer stored the expired "
        + ("session's" if expired == "a-session" else "leftover's")
        + " blob again while expire() ran, and expire removed it: that writer's next "
        "line would point to nothing. A blob touched after the expiry of "
        + ("the session" if expired == "a-session" else "a leftover")
        + " began is another writer's")


@pytest.mark.task("09.2")
def test_expire_goes_on_when_a_file_cannot_be_read(lesson, sessions, monkeypatch):
    """Another log, which may refer to an expired session's blob, cannot be read: the
    session is expired all the same, without an error, and its blob is kept for
    collect_blobs to judge."""
    play(lesson, sessions, (LARGE_SECRET, [say("Noted.")]))
    play(lesson, sessions, TURN_C, session_id="quest-2")
    [blob] = blob_names(sessions)
    age(sessions / "quest-1.jsonl", 40)
    failing_open(monkeypatch, "quest-2.jsonl")
    try:
        found = lesson.expire(sessions)
    except OSError as error:
        pytest.fail(f"with quest-2.jsonl unreadable (EIO), expire() raised {error!r}: "
                    "quest-1 should be expired all the same, its blob left for "
                    "collect_blobs", pytrace=False)
    monkeypatch.undo()
    assert found == (["quest-1"], []) and blob_names(sessions) == [blob], (
        f"expire() returned {found} and blobs/ holds {len(blob_names(sessions))} "
        "blob(s): quest-1 should be expired, and its blob kept (quest-2, which could "
        "not be read, may refer to it)")


def expired_or_none(lesson, sessions, monkeypatch):
    """expire(sessions) with the disk's failures the test planted, then undone: what it
    returned, or None when an OSError reached the caller."""
    try:
        return lesson.expire(sessions)
    except OSError:
        return None     # the caller heard it
    finally:
        monkeypatch.undo()


@pytest.mark.task("09.2")
@pytest.mark.parametrize("step", ["removing", "looking-at"])
def test_expire_lets_an_error_removing_a_log_reach_the_caller(
    lesson, sessions, monkeypatch, step
):
    """An idle session's log cannot be removed, or even looked at (an I/O error from
    the disk). No writer holds that session, so it is not busy; it was not deleted by
    another process either; and its words are still on disk. expire() lets the error
    reach the caller: it neither reports a writer that is not there nor says
    nothing."""
    play(lesson, sessions, TURN_SECRET)
    age(sessions / "quest-1.jsonl", 40)
    failed = []

    def refusing(real):
        def remove(path, *args, **kwargs):
            if not isinstance(path, int) and Path(path).name == "quest-1.jsonl":
                failed.append(True)
                raise OSError(5, "Input/output error (the test's)", str(path))
            return real(path, *args, **kwargs)
        return remove

    names = (("unlink", "remove", "rename", "replace") if step == "removing"
             else ("lstat", "stat"))
    for name in names:
        monkeypatch.setattr(os, name, refusing(getattr(os, name)))
    found = expired_or_none(lesson, sessions, monkeypatch)
    if not failed:
        return      # a design that never asks the disk about the log by its name
    doing = "removing" if step == "removing" else "looking at"
    assert found is None, (
        f"{doing} quest-1's log failed (an I/O error), and expire() returned {found}"
        + (": it reports quest-1 as held by a writer, and no writer holds it"
           if "quest-1" in found[1] else ": the error is lost")
        + "; the person's words are still on disk, and the caller must hear why")


@pytest.mark.task("09.2")
@pytest.mark.parametrize("what",
                         ["the-log-under-the-lock", "a-leftover", "the-folder"])
def test_expire_lets_an_error_looking_at_the_folder_reach_the_caller(
    lesson, sessions, monkeypatch, before_the_lock, what
):
    """What expire must look at cannot be looked at: an idle session's log once its
    lock is held (an I/O error from the disk), the meta file a stopped delete left
    without its log, or the sessions folder itself (permission denied). Nothing says
    the session was deleted meanwhile, and its words may still be on disk: expire()
    lets the error reach the caller, and every file stays, rather than returning as
    if there were nothing to expire."""
    failed = []

    def failing(name, error):
        def wrap(real):
            def look(path=".", *args, **kwargs):
                if not isinstance(path, int) and Path(path).name == name:
                    failed.append(True)
                    raise error
                return real(path, *args, **kwargs)
            return look
        return wrap

    if what == "a-leftover":
        play(lesson, sessions, TURN_C, session_id="quest-2")
        meta = sessions / "quest-1.meta.json"
        meta.write_text(json.dumps({"format": 1, "id": "quest-1"}))
        age(meta, 40)
    else:
        play(lesson, sessions, TURN_SECRET)
        age(sessions / "quest-1.jsonl", 40)
    before = sorted(p.name for p in sessions.iterdir())
    if what == "the-log-under-the-lock":
        error = OSError(5, "Input/output error (the test's)", "quest-1.jsonl")
        wrap = failing("quest-1.jsonl", error)
        # From the moment the lock is taken: the first look, without it, went well
        before_the_lock(lambda: [monkeypatch.setattr(os, name, wrap(getattr(os, name)))
                                 for name in ("lstat", "stat")])
        doing = "looking at quest-1's log again once its lock was held"
    elif what == "a-leftover":
        error = OSError(5, "Input/output error (the test's)", "quest-1.meta.json")
        for name in ("lstat", "stat"):
            monkeypatch.setattr(os, name,
                                failing("quest-1.meta.json", error)(getattr(os, name)))
        doing = "looking at the meta file quest-1 left without its log"
    else:
        error = PermissionError(13, "Permission denied (the test's)", str(sessions))
        for name in ("listdir", "scandir"):
            monkeypatch.setattr(os, name,
                                failing(sessions.name, error)(getattr(os, name)))
        doing = "listing the sessions folder"
    found = expired_or_none(lesson, sessions, monkeypatch)
    if not failed:
        return      # a design that never asks the disk this by a name
    assert found is None, (
        f"{doing} failed ({error}), and expire() returned {found}: the error is "
        "lost, and the caller never learns of it. Nothing says that the session is "
        "gone, and its words may still be on disk: an error that is no writer's lock "
        "reaches the caller")
    assert sorted(p.name for p in sessions.iterdir()) == before, (
        f"{doing} failed, and expire() changed the folder all the same: it held "
        f"{before}, it holds {sorted(p.name for p in sessions.iterdir())}")


def expire_stopped_at(lesson, sessions, monkeypatch, name):
    """Run expire() with the user's Ctrl-C as it first removes or renames the file
    called `name`: (whether it came to that file, what expire returned, or None when
    the Ctrl-C stopped it)."""
    stopped = []

    def interrupting(real):
        def remove(path, *args, **kwargs):
            if Path(path).name == name and not stopped:
                stopped.append(True)
                raise KeyboardInterrupt("the test's Ctrl-C")
            return real(path, *args, **kwargs)
        return remove

    for call in ("unlink", "remove", "rename", "replace"):
        monkeypatch.setattr(os, call, interrupting(getattr(os, call)))
    try:
        found = lesson.expire(sessions)
    except KeyboardInterrupt:
        found = None    # the run stopped with it
    finally:
        monkeypatch.undo()
    return stopped, found

@pytest.mark.task("09.2")
def test_a_ctrl_c_stops_expire_and_leaves_every_session_free(
    lesson, sessions, monkeypatch
):
    """The user presses Ctrl-C (a KeyboardInterrupt, which is no Exception) while
    expire() removes an idle session's log. The run stops with it: it is no busy
    session and no error to go past, and the session after it in name order is not
    touched. Once it is over, expire holds nothing: a writer of the same process takes
    the stopped session, and the next expire deletes both sessions, neither busy."""
    for session_id in ("quest-1", "quest-2"):
        play(lesson, sessions, TURN_A, session_id=session_id)
        age(sessions / f"{session_id}.jsonl", 40)
    stopped, found = expire_stopped_at(lesson, sessions, monkeypatch, "quest-1.jsonl")
    assert stopped, "the test's own set-up: expire() never removed quest-1's log"
    assert found is None, (
        f"the user pressed Ctrl-C while expire() removed quest-1's log, and expire() "
        f"went on and returned {found}: a Ctrl-C stops the run, it is no busy session "
        "and no error to go past")
    assert (sessions / "quest-2.jsonl").exists(), (
        "expire() was stopped by a Ctrl-C at quest-1, yet quest-2, which comes after "
        "it in name order, is gone: the run went on after the user stopped it")
    try:
        with lesson.SessionLog(sessions, "quest-1") as log:
            log.open_for_append()
    except lesson.SessionBusy as error:
        pytest.fail("expire() was stopped by a Ctrl-C while it deleted quest-1, and "
                    "quest-1 is still locked in this process: a writer is refused it "
                    f"({error}). A stopped expire holds nothing once it is over",
                    pytrace=False)
    again = lesson.expire(sessions)
    assert again == (["quest-1", "quest-2"], []), (
        "after an expire() stopped by a Ctrl-C, the next one should delete both idle "
        f"sessions, quest-1 and quest-2, neither busy; it returned {again}")


@pytest.mark.task("09.2")
@pytest.mark.task("09.5")
@pytest.mark.parametrize("expired", ["a-session", "a-leftover"])
def test_a_ctrl_c_while_an_expired_sessions_blob_goes_stops_expire(
    lesson, sessions, monkeypatch, expired
):
    """The user presses Ctrl-C while expire() removes the blob only quest-1 used, once
    quest-1's files are gone: quest-1 an idle session, or what a stopped erase and
    delete left of it. The run stops there too, whatever step of a session's expiry it
    was at: the Ctrl-C reaches the caller, and what comes after in the run (the idle
    session quest-2, the old leftover quest-3) is not touched; the next expire takes
    what is left."""
    play(lesson, sessions, (LARGE_SECRET, [say("Noted.")]))
    play(lesson, sessions, TURN_A, session_id="quest-2")
    [blob] = blob_names(sessions)
    if expired == "a-leftover":
        left_by_a_stopped_erase_and_delete(sessions)
    else:
        age(sessions / "quest-1.jsonl", 40)
    age(sessions / "quest-2.jsonl", 40)
    leftover = sessions / "quest-3.meta.json"
    leftover.write_text(json.dumps({"format": 1, "id": "quest-3"}))
    age(leftover, 40)
    stopped, found = expire_stopped_at(lesson, sessions, monkeypatch, blob)
    assert stopped, "the test's own set-up: expire() never removed quest-1's blob"
    after = ["quest-2", "quest-3"] if expired == "a-session" else ["quest-3"]
    gone = [session_id for session_id in after if not any(
        (sessions / f"{session_id}{ending}").exists()
        for ending in (".jsonl", ".meta.json"))]
    assert found is None and not gone, (
        "the user pressed Ctrl-C while expire() removed the blob only "
        + ("the idle session" if expired == "a-session" else "the leftover")
        + " quest-1 used, and expire() "
        + ("went on and returned " + str(found) if found is not None
           else "stopped, yet " + ", ".join(gone) + " is gone")
        + ": a Ctrl-C stops the run where it is, at every step of an expiry "
        "(dropping the blobs too), and what comes after it in the run stays")
    again = lesson.expire(sessions)
    assert again == (after, []), (
        "after an expire() stopped by a Ctrl-C, the next one should delete what is "
        f"left, {after}, none busy; it returned {again}")


@pytest.mark.task("09.2")
def test_expire_names_the_sessions_in_the_order_of_their_logs_names(lesson, sessions):
    """expire() returns the ids it deleted in the order of the log names, whatever the
    order the folder lists them in: names compared as text, character by character
    (capitals before small letters, quest-10 before quest-9)."""
    names = ["quest-c", "quest-a", "Quest-e", "quest-10", "quest-9", "Quest-d",
             "quest-a-2"]
    for session_id in names:
        play(lesson, sessions, TURN_A, session_id=session_id)
        age(sessions / f"{session_id}.jsonl", 40)
    try:
        deleted, busy = lesson.expire(str(sessions))
    except (TypeError, AttributeError) as error:
        pytest.fail(f"expire() given its folder as a str raised {error!r}: the "
                    "folder may be a str or a Path", pytrace=False)
    expected = sorted(names, key=lambda session_id: f"{session_id}.jsonl")
    assert deleted == expected and busy == [], (
        f"expire() should return {expected} (the log names' order, as text: capitals "
        "first, quest-10 before quest-9, quest-a-2.jsonl before quest-a.jsonl, "
        f"'-' coming before '.'), it returned {deleted}")


@pytest.mark.task("09.2")
def test_expire_removes_what_a_stopped_delete_left_once_it_is_old(lesson, sessions):
    """A meta file whose log is gone (a fork or a delete stopped half-way) holds a
    person's words too: once it was last changed before the cutoff, expire() removes
    it and names its id; a young one stays."""
    # Made in an order that is not the names' (a folder lists names in its own order)
    for session_id in ("left-b", "left-old", "left-young", "left-a", "left-a-2"):
        meta = sessions / f"{session_id}.meta.json"
        meta.write_text(json.dumps({"format": 1, "id": session_id,
                                    "parent": "Ilse's diary", "forked_at": 1}))
    for session_id in ("left-b", "left-old", "left-a", "left-a-2"):
        age(sessions / f"{session_id}.meta.json", 40)
    elsewhere = sessions.parent / "elsewhere.meta.json"
    elsewhere.write_text("{}")
    age(elsewhere, 99)
    (sessions / "left-link.meta.json").symlink_to(elsewhere)   # planted: no leftover
    os.utime(sessions / "left-link.meta.json", (0, 0), follow_symlinks=False)
    play(lesson, sessions, TURN_A, session_id="old")
    age(sessions / "old.jsonl", 40)
    deleted, busy = lesson.expire(sessions)
    expected = ["old", "left-a-2", "left-a", "left-b", "left-old"]
    assert (deleted, busy) == (expected, []), (
        "expire() should delete the old session, then remove the old meta files that "
        "lost their log, and say so, the sessions' ids first and the leftovers' after, "
        "each in the order of the files' names (left-a-2.meta.json before "
        f"left-a.meta.json: '-' comes before '.'): deleted={expected}; it returned "
        f"deleted={deleted}, busy={busy}")
    assert sorted(p.name for p in sessions.iterdir()) == [
        "left-link.meta.json", "left-young.meta.json"], (
        "the old meta file without its log should be gone, the young one kept, and "
        "the link planted in the folder left alone")


@pytest.mark.task("09.2")
def test_expire_deletes_an_old_log_no_line_was_ever_written_to(lesson, sessions):
    """An old log of zero bytes (its writer died before its first line, 40 days ago)
    is a session nobody has appended to: expire() deletes it and names it."""
    log = sessions / "quest-1.jsonl"
    log.write_bytes(b"")
    age(log, 40)
    found = lesson.expire(sessions)
    left = sorted(p.name for p in sessions.iterdir())
    assert found == (["quest-1"], []) and left == [], (
        "quest-1's log is empty and 40 days old: nobody has appended to it within "
        "the retention, so expire() should delete it and name it (deleted="
        f"['quest-1'], busy=[]); it returned {found}, and the folder holds {left}")


@pytest.mark.task("09.2")
def test_expire_judges_a_leftover_by_when_its_file_changed_not_by_what_it_says(
    lesson, sessions
):
    """A meta file left without its log goes by when the file was last changed, not by
    the "created" it holds (the time a fork was begun, any text or even a number, as a
    file anyone can edit may hold): an old file that says "just now" goes, one
    changed just now that says "long ago" stays, and an old one whose "created" is
    no time at all goes too, with no error."""
    said = {"left-new": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "left-old": "2020-01-01T00:00:00+00:00", "left-odd": 5}
    for session_id, created in said.items():
        meta = sessions / f"{session_id}.meta.json"
        meta.write_text(json.dumps({"format": 1, "id": session_id,
                                    "created": created}))
    for session_id in ("left-new", "left-odd"):
        age(sessions / f"{session_id}.meta.json", 40)
    try:
        found = lesson.expire(sessions)
    except NotImplementedError:
        raise    # a task not written yet: the starter's own failure
    except Exception as error:
        pytest.fail(f"expire() raised {type(error).__name__} ({error}) on meta files "
                    "left without their log, one of whose \"created\" is the number "
                    "5: a leftover goes by when its file was last changed, whatever "
                    "it holds", pytrace=False)
    left = sorted(p.name for p in sessions.iterdir())
    assert found == (["left-new", "left-odd"], []) and left == [
        "left-old.meta.json"], (
        "left-new's and left-odd's meta files were last changed 40 days ago (one says "
        "it was created just now, the other holds the number 5), left-old's just now "
        "(it says 2020): expire() should remove the two old files and keep left-old "
        f"(deleted=['left-new', 'left-odd']); it returned {found}, and the folder "
        f"holds {left}")


@pytest.mark.task("09.2")
def test_expire_reports_a_leftover_a_writer_holds_as_busy_and_goes_on(
    lesson, sessions
):
    """An old meta file without its log whose id a writer holds (a fork being made
    anew under that id) stays and is reported busy, after the sessions; the next
    leftover is still removed. Every id a writer holds is reported, in name order."""
    for session_id in ("left-a", "left-b", "left-c"):
        meta = sessions / f"{session_id}.meta.json"
        meta.write_text(json.dumps({"format": 1, "id": session_id}))
        age(meta, 40)
    for session_id in ("old", "quest-held", "quest-hold"):
        play(lesson, sessions, TURN_A, session_id=session_id)
        age(sessions / f"{session_id}.jsonl", 40)
    with contextlib.ExitStack() as stack:
        for session_id in ("left-a", "left-c", "quest-held", "quest-hold"):
            held = stack.enter_context(open(sessions / f"{session_id}.lock", "w"))
            fcntl.flock(held, fcntl.LOCK_EX)    # another writer's lock
        try:
            found = lesson.expire(sessions)
        except lesson.SessionBusy as error:
            pytest.fail(f"expire() stopped with {error!r}: a writer holds left-a, "
                        "whose meta file lost its log; it should be reported busy and "
                        "the run go on", pytrace=False)
    assert found == (["old", "left-b"], ["quest-held", "quest-hold", "left-a",
                                          "left-c"]), (
        "expire() should delete the old session and the free leftover left-b, and "
        "report the old sessions quest-held and quest-hold and the leftovers left-a "
        "and left-c, each held by a writer, as busy, the sessions first in each list "
        "(deleted=['old', 'left-b'], busy=['quest-held', 'quest-hold', 'left-a', "
        f"'left-c']); it returned {found}")
    assert (sessions / "left-a.meta.json").exists(), (
        "expire() removed left-a's meta file while a writer held that id")


@pytest.mark.task("09.2")
def test_expire_neither_reports_nor_holds_a_young_leftover_a_fork_is_making(
    lesson, sessions
):
    """A meta file without its log, written just now, may be a fork being made right
    now (its maker holds the new id's lock): expire() has nothing to do with it. It
    stays, it is not reported busy, and expire() does not stand in its maker's way."""
    meta = sessions / "fork-new.meta.json"
    meta.write_text(json.dumps({"format": 1, "id": "fork-new"}))
    with open(sessions / "fork-new.lock", "w") as making:   # the fork's maker
        fcntl.flock(making, fcntl.LOCK_EX)
        try:
            found = lesson.expire(sessions)
        except lesson.SessionBusy as error:
            pytest.fail(f"expire() stopped with {error!r} on fork-new, a meta file "
                        "written just now: it is not old, and expire() should not "
                        "have tried to take it", pytrace=False)
    assert found == ([], []), (
        "fork-new's meta file was written just now (a fork being made, its maker "
        "holding the id): expire() should leave it alone and report nothing, "
        f"neither deleted nor busy; it returned {found}")
    assert meta.exists(), "expire() removed a meta file written just now"


@pytest.mark.task("09.2")
@pytest.mark.parametrize("unreadable", [False, True],
                         ids=["every file readable", "another log unreadable"])
def test_expire_removes_a_leftovers_blobs_as_a_delete_does(
    lesson, sessions, monkeypatch, unreadable
):
    """What a stopped erase and delete left of quest-1 (an old meta file, and the
    erase's copy of the log, which points to a blob, without the log) is expired like
    a session: the blob only it used goes too. When another log cannot be read (it may
    refer to the blob), the leftover goes all the same, without an error, and the blob
    stays for collect_blobs."""
    play(lesson, sessions, (LARGE_SECRET, [say("Noted.")]))
    play(lesson, sessions, TURN_C, session_id="quest-2")
    [blob] = blob_names(sessions)
    meta, copy = left_by_a_stopped_erase_and_delete(sessions)
    if unreadable:
        failing_open(monkeypatch, "quest-2.jsonl")
    try:
        found = lesson.expire(sessions)
    except OSError as error:
        pytest.fail(f"with quest-2.jsonl unreadable (EIO), expire() raised {error!r}: "
                    "quest-1's leftover should be expired all the same, its blob left "
                    "for collect_blobs", pytrace=False)
    monkeypatch.undo()
    assert found == (["quest-1"], []) and not meta.exists() and not copy.exists(), (
        f"quest-1's leftover is 40 days old: expire() should remove its meta file and "
        f"the erase's copy, and name it; it returned {found}, and the folder holds "
        f"{sorted(p.name for p in sessions.iterdir())}")
    kept = [blob] if unreadable else []
    assert blob_names(sessions) == kept, (
        "the leftover's copy of the log pointed to a blob no other file uses: "
        + ("quest-2.jsonl could not be read, so the blob should stay for collect_blobs"
           if unreadable else "it should go with the leftover, as after a delete")
        + f"; blobs/ holds {len(blob_names(sessions))} blob(s)")


@pytest.mark.task("09.2")
@pytest.mark.parametrize("anew", ["a-writer", "a-fork"])
def test_expire_keeps_a_session_started_anew_on_a_leftovers_id_while_it_runs(
    lesson, sessions, before_the_lock, anew
):
    """An old meta file without its log is a leftover; but a writer may start a session
    under that id while expire() runs, after expire saw no log and before the id is its
    own. Under the lock, what expire saw is no longer so: the new session, its log and
    the message its writer was told is written, stay. So does a meta file a fork wrote
    anew meanwhile (it is young: the fork may be publishing its log right now).

    The writer appends (or the fork writes its meta file) just before a session's lock
    is first taken."""
    meta = sessions / "quest-1.meta.json"
    meta.write_text(json.dumps({"format": 1, "id": "quest-1"}))
    age(meta, 40)

    def a_writer_starts_anew():
        with lesson.SessionLog(sessions, "quest-1") as writer:
            writer.append({"role": "user", "content": "A new day, a new quest."})

    def a_fork_writes_its_meta_file_anew():
        meta.write_text(json.dumps({"format": 1, "id": "quest-1", "parent": "quest"}))

    if anew == "a-fork":
        before_the_lock(a_fork_writes_its_meta_file_anew)
        found = lesson.expire(sessions)
        assert meta.exists() and found == ([], []), (
            "expire() saw an old meta file without its log; before the id was its own, "
            "a fork wrote that meta file anew (a fork writes its meta file first, then "
            "its log), and expire "
            + ("deleted it" if not meta.exists() else f"returned {found}")
            + ": under the session's lock, look again. A meta file changed at or "
            "after the cutoff may be a fork being made right now: it stays, neither "
            "deleted nor busy")
        return
    before_the_lock(a_writer_starts_anew)
    found = lesson.expire(sessions)
    assert (sessions / "quest-1.jsonl").exists(), (
        "a writer started quest-1 anew while expire() ran, after expire had seen only "
        "an old meta file without its log and before the id was its own: expire "
        "deleted the new log, with the message its writer had just been told was "
        "written. Under the session's lock, look again: is the log still missing, the "
        "meta file still old?")
    assert found == ([], []), (
        "quest-1 has a log again, written just now: it is neither deleted nor busy; "
        f"expire() returned {found}")
    assert resume(lesson, sessions)[-1]["content"] == "A new day, a new quest."


@pytest.mark.task("09.2")
def test_expire_reports_as_busy_only_the_idle_sessions_a_writer_holds(
    lesson, sessions
):
    """A young session is simply kept: expire() does not report it busy while a
    writer holds it (it is not idle, so no writer keeps it from expiring)."""
    play(lesson, sessions, TURN_A)
    with lesson.SessionLog(sessions, "quest-1") as writer:
        writer.open_for_append()
        found = lesson.expire(sessions)
        writer.append({"role": "user", "content": "Still here."})
    assert found == ([], []), (
        "the session was written just now and its writer holds it: it is not idle, so "
        f"neither deleted nor reported busy; expire() returned {found}")


@pytest.mark.task("09.2")
def test_a_writer_opening_a_young_session_while_expire_runs_is_never_refused(
    lesson, sessions, monkeypatch
):
    """While expire() runs, a writer that opens a session written just now (not idle)
    is never refused: expire() has nothing to do with that session, and a user would
    see their chat refused for nothing."""
    play(lesson, sessions, TURN_A)
    lock_file = sessions / "quest-1.lock"
    real = fcntl.flock
    refused, tried = [], []

    def flock(fd, operation):
        real(fd, operation)
        if (not tried and operation & fcntl.LOCK_EX and os.path.lexists(lock_file)
                and os.fstat(fd).st_ino == os.lstat(lock_file).st_ino):
            tried.append(True)      # once, and not for the writer below
            try:                    # expire holds the session: a writer comes
                with lesson.SessionLog(sessions, "quest-1") as other:
                    other.append({"role": "user", "content": "Opened meanwhile."})
            except lesson.SessionBusy as error:
                refused.append(str(error))

    monkeypatch.setattr(fcntl, "flock", flock)
    found = lesson.expire(sessions)
    monkeypatch.undo()
    assert not refused, (
        "while expire() ran, a writer opening quest-1 (written just now, not idle) was "
        f"refused ({refused[0] if refused else ''}): expire() held a session it had "
        "nothing to expire in")
    assert found == ([], []), f"quest-1 is not idle; expire() returned {found}"


@pytest.mark.task("09.2")
def test_expire_keeps_a_session_a_writer_appends_to_while_it_runs(
    lesson, sessions, before_the_lock
):
    """A writer that appends to an old session while expire() runs, before the session
    is deleted, keeps its session, and its message.

    The writer appends just before the session's lock is first taken."""
    play(lesson, sessions, TURN_A)
    age(sessions / "quest-1.jsonl", 31)

    before_the_lock(a_writer_appends(lesson, sessions, "Back after a month."))
    found = lesson.expire(sessions)
    assert (sessions / "quest-1.jsonl").exists(), (
        "a writer appended to quest-1 (31 days idle) while expire() ran, after expire "
        "had seen its log old and before the session was deleted: the session was in "
        "use again, and expire deleted it, with the message the writer had just "
        "been told was written")
    assert found == ([], []), (
        "quest-1 was appended to while expire() ran, and kept: it is neither deleted "
        f"nor busy; expire() returned {found}")
    assert resume(lesson, sessions)[-1]["content"] == "Back after a month."


@pytest.mark.task("09.2")
def test_a_writer_that_takes_the_session_once_expire_lets_go_keeps_its_log(
    lesson, sessions, after_the_lock
):
    """expire() holds an idle session's lock until its files are gone: a writer that
    takes the session the moment expire lets go of it keeps the message it appended.
    """
    play(lesson, sessions, TURN_A)
    age(sessions / "quest-1.jsonl", 31)

    after_the_lock(a_writer_appends(lesson, sessions, "Back after a month."))
    lesson.expire(sessions)
    assert_locked_with_the_writers_lock(after_the_lock, "expire")
    kept = [m.get("content") for m in resume(lesson, sessions)]
    assert kept[-1:] == ["Back after a month."], (
        "a writer took quest-1 (31 days idle) as soon as expire() let go of its lock, "
        "and appended one message that it was told is written: the log should end "
        f"with it, and the session holds {kept}. Expire that lets go of the lock "
        "before the files are gone deletes what a writer has just appended")


@pytest.mark.task("09.2")
def test_expire_keeps_a_session_appended_to_exactly_at_the_cutoff_while_it_runs(
    lesson, sessions, before_the_lock
):
    """A writer appends to an idle session while expire() runs, and its append is
    stamped exactly at the cutoff (a clock that counts whole seconds, say): the log is
    not older than the cutoff when the session is expire's own, so it stays.

    The append's time is set just before the session's lock is first taken."""
    play(lesson, sessions, TURN_A)
    path = sessions / "quest-1.jsonl"
    then = 1_700_000_000
    os.utime(path, (then - 1, then - 1))

    def an_append_at_the_cutoff():
        with lesson.SessionLog(sessions, "quest-1") as writer:
            writer.append({"role": "user", "content": "Back, on the second."})
        os.utime(path, (then, then))

    before_the_lock(an_append_at_the_cutoff)
    found = lesson.expire(sessions, older_than=100, now=then + 100)
    assert path.exists(), (
        "quest-1's log was older than the cutoff T when expire() first looked, then a "
        "writer appended, stamped exactly T, before the session was expire's: a log "
        "changed at the cutoff is not older than it, and the session was deleted "
        "with the message the writer had just written (the look made under the lock "
        "must use the same rule as the first)")
    assert found == ([], []), (
        f"quest-1 was in use again and kept: expire() should name it nowhere; it "
        f"returned {found}")


@pytest.mark.task("09.2")
@pytest.mark.parametrize("what", ["a-session", "a-leftover"])
def test_expire_says_nothing_of_a_session_another_process_deleted_meanwhile(
    lesson, sessions, before_the_lock, what
):
    """Another process deletes an old session (or what a stopped delete left of one, a
    meta file without its log) while expire() runs, after expire saw it old and before
    the session is its own: expire raises nothing, and does not name it among the ids
    it deleted (it deleted nothing of it).

    The other delete runs just before the session's lock is first taken."""
    if what == "a-session":
        play(lesson, sessions, TURN_A)
        age(sessions / "quest-1.jsonl", 31)
    else:
        meta = sessions / "quest-1.meta.json"
        meta.write_text(json.dumps({"format": 1, "id": "quest-1"}))
        age(meta, 31)
    before_the_lock(lambda: lesson.delete_session(sessions, "quest-1"))
    try:
        found = lesson.expire(sessions)
    except OSError as error:
        pytest.fail(f"another process deleted quest-1 while expire() ran, and expire "
                    f"raised {error!r}: a session gone meanwhile is nothing more to "
                    "expire", pytrace=False)
    assert found == ([], []), (
        "another process deleted quest-1 while expire() ran: expire deleted nothing of "
        f"it, and returns the ids it deleted itself; it returned {found}")
    assert list(sessions.iterdir()) == [], (
        f"the folder holds {sorted(p.name for p in sessions.iterdir())}")


@pytest.mark.task("09.2")
def test_expire_goes_on_past_what_another_process_removed_after_the_listing(
    lesson, sessions, monkeypatch
):
    """Another process removes an old session's log, and a leftover meta file, after
    expire() listed the folder and before it holds their lock: expire raises nothing,
    names neither, and expires the rest.

    The test removes each file at the first, the second or the third time anything
    asks for its status (following a link or not) while nobody holds its session's lock,
    whichever look that is: a delete of another process can come between any two."""
    for nth in (1, 2, 3):
        folder = sessions / f"run-{nth}"
        folder.mkdir()
        for session_id in ("quest-1", "quest-2", "quest-3"):
            play(lesson, folder, TURN_A, session_id=session_id)
            age(folder / f"{session_id}.jsonl", 40)
        for session_id in ("left-1", "left-2"):
            meta = folder / f"{session_id}.meta.json"
            meta.write_text(json.dumps({"format": 1, "id": session_id}))
            age(meta, 40)
        looks = {"quest-2.jsonl": 0, "left-1.meta.json": 0}
        removed = set()
        real = {"lstat": os.lstat, "stat": os.stat}

        def looking(kind):
            def look(path, *args, **kwargs):
                name = os.path.basename(os.fspath(path)) if not isinstance(
                    path, int) else ""
                session_id = name.split(".")[0]
                if (name in looks and name not in removed
                        and not os.path.lexists(folder / f"{session_id}.lock")):
                    looks[name] += 1
                    if looks[name] == nth:
                        removed.add(name)
                        os.unlink(folder / name)    # another process's delete
                return real[kind](path, *args, **kwargs)
            return look

        monkeypatch.setattr(os, "lstat", looking("lstat"))
        monkeypatch.setattr(os, "stat", looking("stat"))
        try:
            found = lesson.expire(folder)
        except FileNotFoundError as error:
            pytest.fail(f"another process removed {sorted(removed)} after expire() "
                        f"listed the folder, at expire's look number {nth} at each "
                        f"before it held the lock, and expire raised {error!r}: what "
                        "is gone is nothing more to expire, and the run goes on",
                        pytrace=False)
        finally:
            monkeypatch.undo()
        expected = (["quest-1"] + ["quest-2"] * ("quest-2.jsonl" not in removed)
                    + ["quest-3"] + ["left-1"] * ("left-1.meta.json" not in removed)
                    + ["left-2"], [])
        assert found == expected, (
            f"another process removed {sorted(removed)} while expire() ran (at its "
            f"look number {nth} at each): expire should return {expected}, naming only "
            f"what it deleted itself; it returned {found}")


@pytest.mark.task("09.2")
def test_expire_leaves_a_link_put_at_an_old_logs_name_before_it_holds_the_lock(
    lesson, sessions, before_the_lock
):
    """An old session; between expire's look at its log and its lock, another program
    puts a symbolic link at the log's name, reaching an old copy of the log outside
    the folder. Under the lock the name reaches no log this store wrote: expire
    deletes nothing and names nothing, and the link and what it reaches stay."""
    play(lesson, sessions, TURN_A)
    log = sessions / "quest-1.jsonl"
    age(log, 40)
    elsewhere = sessions.parent / "elsewhere.jsonl"
    elsewhere.write_bytes(log.read_bytes())
    age(elsewhere, 40)

    def plant():
        planted = sessions.parent / "planted-link"
        planted.symlink_to(elsewhere)
        os.replace(planted, log)

    before_the_lock(plant)
    found = lesson.expire(sessions)
    assert found == ([], []), (
        "while expire() waited for quest-1's lock, another program put a symbolic "
        "link at quest-1.jsonl reaching an old file outside the folder; expire() "
        f"returned {found}. Under the lock, the log's name reaches no log this store "
        "wrote (a link, just made): nothing of it is expired. The time that counts is "
        "that of the file at the name, never of what a link reaches")
    assert log.is_symlink() and elsewhere.exists(), (
        "the link put at quest-1.jsonl, or the file it reaches, was removed by "
        "expire(): neither is a session of the folder, and expire leaves anything "
        "else alone")


@pytest.mark.task("09.2")
def test_expire_takes_a_session_id_with_dots_whole(lesson, sessions):
    """A session id may hold dots (lesson 01): the log of quest.1 is quest.1.jsonl, the
    meta file left.2 left without its log is left.2.meta.json, and the log of
    notes.jsonl is notes.jsonl.jsonl. expire() takes each id whole: it expires
    notes.jsonl, quest.1 and the leftover left.2, and keeps quest and left, young
    sessions whose ids are where the others' start."""
    for session_id in ("quest", "quest.1", "left", "notes.jsonl"):
        play(lesson, sessions, TURN_A, session_id=session_id)
    age(sessions / "quest.1.jsonl", 40)
    age(sessions / "notes.jsonl.jsonl", 40)
    meta = sessions / "left.2.meta.json"
    meta.write_text(json.dumps({"format": 1, "id": "left.2"}))
    age(meta, 40)
    found = lesson.expire(sessions)
    left = sorted(p.name for p in sessions.iterdir())
    assert found == (["notes.jsonl", "quest.1", "left.2"], []) and left == [
        "left.jsonl", "quest.jsonl"], (
        "the sessions notes.jsonl and quest.1 (their logs 40 days idle) and the "
        "leftover left.2 (its meta file 40 days old, no log) should be expired, and "
        "the young sessions quest and left kept: an id is the whole name before the "
        "last .jsonl or .meta.json, dots included. expire() returned "
        f"{found}, and the folder holds {left}")


@pytest.mark.task("09.2")
def test_expire_leaves_files_that_are_not_sessions_alone(lesson, sessions):
    """expire() only deletes sessions: a file whose name is no session id (a space in
    it, a name reserved on Windows, more than 128 characters), or a link, a folder or
    a named pipe planted in the folder (under a log's name or a meta file's), stays,
    is not named, and the sessions after them are still expired."""
    notes = sessions / "notes .jsonl"
    notes.write_text("not a session\n")
    album = sessions / "album.jsonl"    # a folder that took a log's name
    album.mkdir()
    age(album, 99)
    # A meta file's name with no session id before it: no leftover of a session
    stray = sessions / "old notes.meta.json"
    stray.write_text("{}")
    age(stray, 99)
    shelf = sessions / "shelf.meta.json"   # a folder that took a meta file's name
    shelf.mkdir()
    age(shelf, 99)
    target = sessions.parent / "elsewhere.jsonl"
    target.write_text("{}\n")
    (sessions / "link.jsonl").symlink_to(target)
    for path in (notes, target):
        age(path, 99)
    os.utime(sessions / "link.jsonl", (0, 0), follow_symlinks=False)
    # A link to nowhere planted under a log's name, beside an old meta file
    (sessions / "planted.jsonl").symlink_to(sessions.parent / "nowhere.jsonl")
    meta = sessions / "planted.meta.json"
    meta.write_text(json.dumps({"format": 1, "id": "planted"}))
    age(meta, 99)
    os.utime(sessions / "planted.jsonl", (0, 0), follow_symlinks=False)
    # A named pipe (a FIFO) under a log's name, and one under a meta file's name with
    # no log beside it: files, and no regular ones
    pipe = sessions / "pipe.jsonl"
    tube = sessions / "tube.meta.json"
    for fifo in (pipe, tube):
        os.mkfifo(fifo)
        age(fifo, 99)
    # Names the store never gives a session: one reserved on Windows, one longer than
    # an id may be (128 characters)
    unnamed = [sessions / "con.jsonl", sessions / f"{'a' * 129}.jsonl"]
    for path in unnamed:
        path.write_text("not a session\n")
        age(path, 99)
    play(lesson, sessions, TURN_A, session_id="quest-1")
    age(sessions / "quest-1.jsonl", 99)
    try:
        found = lesson.expire(sessions)
    except ValueError as error:
        pytest.fail(f"expire() raised {error!r}: the folder holds con.jsonl and a log "
                    "name of 129 characters before .jsonl, names that hold no session "
                    "id (SESSION_ID: no name reserved on Windows, at most 128 "
                    "characters); they are no sessions, left alone, and the run goes "
                    "on", pytrace=False)
    gone = [path.name[:12] for path in unnamed if not path.exists()]
    assert gone == [], (
        f"expire() removed {gone}: names that hold no session id (SESSION_ID: no name "
        "reserved on Windows, at most 128 characters) are no sessions, and stay")
    for fifo, what in ((pipe, "log"), (tube, "meta file")):
        assert fifo.exists() and stat.S_ISFIFO(os.lstat(fifo).st_mode), (
            f"someone made {fifo.name}, a named pipe (a FIFO), 99 days ago; expire() "
            f"removed it (and returned {found}). A {what} is a regular file: anything "
            f"else under a {what}'s name (a link, a folder, a pipe, a device) is no "
            f"{what} of this store, and stays")
    assert (sessions / "planted.jsonl").is_symlink(), (
        "someone planted planted.jsonl, a link to a file that does not exist, beside "
        "an old planted.meta.json; expire() removed the link. A link under a log's "
        "name is no log of this store: it stays, and a meta file beside it is no "
        "meta file left without its log (a log that does not exist, seen through the "
        "link, is not a name that is free)")
    assert found == (["quest-1"], []), (
        "expire() should skip the files that are no sessions and go on: quest-1, "
        f"sorted after them, is old and must be deleted; expire() returned {found}")
    assert notes.exists() and target.exists() and (sessions / "link.jsonl").is_symlink()
    assert album.is_dir(), "expire() removed album.jsonl, a folder: no log of a session"
    assert shelf.is_dir(), (
        "expire() removed shelf.meta.json, a folder: no meta file a session left")
    assert stray.exists(), (
        "expire() removed 'old notes.meta.json': its name holds no session id (a "
        "space), so it is no meta file a session left, and it stays")


@pytest.mark.task("09.1")
@pytest.mark.parametrize("session_id, stop_after", [
    ("quest-1b", 1), ("quest-1b", 2), ("quest-1", 1)],
    ids=["fork-one-removal", "fork-two-removals", "no-meta-file-one-removal"])
def test_what_a_stopped_delete_leaves_expire_takes_once_it_is_old(
    lesson, sessions, monkeypatch, session_id, stop_after
):
    """A delete stopped half-way and never run again (the program that ran it is
    gone): what it left holds the person's words, and the expiry that goes through
    the folder must take it once it is old. So whatever a stopped delete leaves is the
    whole session, or a meta file without its log (task 09.2 takes both), never a
    temporary copy alone (a crashed write's or erase's, `.<id>.jsonl.<random>.tmp`):
    that is no session and no leftover, and nothing would ever remove it. A session
    with no meta file (one never forked) counts too."""
    play(lesson, sessions, TURN_SECRET)
    lesson.fork(sessions, "quest-1", "quest-1b")
    (sessions / f".{session_id}.jsonl.k2j4h1.tmp").write_bytes(
        (sessions / f"{session_id}.jsonl").read_bytes())
    removed, _ = delete_stopped(lesson, sessions, monkeypatch, session_id,
                                stop_after, "io-error")

    def of_it():
        return sorted(path.name for path in sessions.iterdir()
                      if path.name.startswith((f"{session_id}.", f".{session_id}."))
                      and not path.name.endswith(".lock"))

    left = of_it()
    for name in left:
        age(sessions / name, 40)
    expired = lesson.expire(sessions)
    assert of_it() == [], (
        f"a delete of {session_id} removed {' and '.join(removed)}, then stopped (an "
        f"I/O error) and was never run again; it left {left}. 40 days later expire() "
        f"returned {expired} and left {of_it()}: the person's words stay for good. A "
        "stopped delete should leave the whole session or a meta file without its log "
        "(both of which expire takes), never a temporary copy alone, which is neither")


# --- 09.3: erase from the log ---------------------------------------------------------


@pytest.mark.key
@pytest.mark.task("09.3")
@pytest.mark.task("09.4")
@pytest.mark.task("09.5")
def test_an_erased_message_leaves_no_byte_behind_in_the_sessions_folder(
    lesson, sessions
):
    """After erase, no file under the sessions folder holds the erased words: not the
    log, not a temporary file, not the blob of a large message."""
    play(lesson, sessions, TURN_A, TURN_SECRET, (LARGE_SECRET, [say("Noted.")]))
    assert files_holding(sessions, "Ilse"), "the test's own set-up: the words are there"
    agent, _, log = open_agent(lesson, sessions)
    with log:
        agent.erase(2)      # the user's SECRET
        with reading_back_after_an_erase("the second erase by the same writer",
                                         sessions / "quest-1.jsonl"):
            agent.erase(4)      # the large one, stored as a blob
    assert files_holding(sessions, "Ilse") == [], (
        "after erasing both messages, these files still hold their words: "
        f"{files_holding(sessions, 'Ilse')}")
    assert blob_names(sessions) == [], (
        "the erased message's blob is referred to by no other log: it must go too")
    messages = resume(lesson, sessions)
    assert [m["role"] for m in messages] == ["user", "assistant"] * 3
    assert messages[2] == messages[4] == {"role": "user", "content": lesson.ERASED}, (
        "an erased message reads back as its tombstone: its role, and ERASED as its "
        f"content; found {messages[2]!r}")


@pytest.mark.key
@pytest.mark.task("09.3")
@pytest.mark.task("09.4")
def test_erase_keeps_every_index_in_place_so_undo_markers_still_hide_the_right_messages(
    lesson, sessions
):
    """Erasing messages of a log with an undo marker changes no index: the undone turn
    stays hidden, every other message keeps its place, the marker its bytes. (The last
    message shown is message 3 of the conversation and index 5 of the file.)"""
    agent, _, log = open_agent(lesson, sessions,
                               TURN_SECRET[1] + TURN_A[1] + TURN_C[1])
    with log:
        agent.run(TURN_SECRET[0])
        agent.run(TURN_A[0])
        agent.undo()
        agent.run(TURN_C[0])
        expected = list(agent.messages)
        undo_line = next(line for line in (sessions / "quest-1.jsonl").read_bytes()
                         .split(b"\n") if b'"undo"' in line)
        agent.erase(0)
        with reading_back_after_an_erase("the second erase by the same writer",
                                         sessions / "quest-1.jsonl"):
            agent.erase(len(expected) - 1)  # after the undone turn: index 5, position 3
    expected[0] = {"role": "user", "content": lesson.ERASED}
    expected[-1] = {"role": "assistant", "content": lesson.ERASED}
    found = resume(lesson, sessions)
    assert found == expected, (
        "after erasing the first and the last message, a new process should see "
        "their tombstones in their places, the undone turn still hidden, and the rest "
        "unchanged; it sees "
        f"{[m.get('content') for m in found]}")
    assert undo_line in (sessions / "quest-1.jsonl").read_bytes(), (
        "the undo marker's line must stay byte for byte: only the erased line changes")
    path = sessions / "quest-1.jsonl"
    indices = [marker.get("index") for marker in erase_markers(path)]
    assert indices == [0, 5], (
        "each erase marker should name its message as undo markers do (its index "
        "among the file's messages: the last one is message 5, the undo marker is no "
        f"message); the markers say {indices}")


@pytest.mark.key
@pytest.mark.task("09.3")
@pytest.mark.task("09.4")
def test_an_erased_tool_call_and_result_keep_the_conversation_sendable(
    lesson, sessions
):
    """Erasing an assistant message with tool calls and one of its results keeps the
    ids: the next request is accepted by the (strict) scripted model."""
    play(lesson, sessions, TURN_TOOLS, TURN_A)
    agent, model, log = open_agent(lesson, sessions, TURN_C[1])
    with log:
        agent.undo()        # an undo marker, to show that no marker is touched
        marker = (sessions / "quest-1.jsonl").read_bytes().split(b"\n")[-2]
        calls = agent.messages[1]["tool_calls"]
        agent.erase(1)      # the assistant's calls: talk_to(guard), buy(rope)
        with reading_back_after_an_erase("the second erase by the same writer",
                                         sessions / "quest-1.jsonl"):
            agent.erase(3)      # the result of buy(rope)
        agent.run(TURN_C[0])    # a 400 (lesson 04's unresumable session) would raise
    found = resume(lesson, sessions)
    assert found[1].get("content") == found[3].get("content") == lesson.ERASED, (
        "both erased messages should read back as erased (ERASED where their words "
        f"stood); a new process reads {found[1]!r} and {found[3]!r}")
    assert [(c.get("id"), c.get("function", {}).get("name"))
            for c in found[1].get("tool_calls") or []] == [
                (c["id"], c["function"]["name"]) for c in calls], (
        "an erased tool call keeps each call, by its id and its tool, in order (every "
        f"result after it answers one); found {found[1]!r}")
    assert found[3].get("tool_call_id") == calls[1]["id"], (
        f"an erased tool result keeps the call it answers; found {found[3]!r}")
    assert "guard" not in json.dumps(found[1]) and "rope" not in json.dumps(found[3]), (
        "the erased call still holds its arguments (what the model told the tool), or "
        f"the erased result its content: {found[1]!r}, {found[3]!r}")
    assert marker + b"\n" in (sessions / "quest-1.jsonl").read_bytes(), (
        "the erased call's content was empty, so no marker quotes it: the undo marker "
        "must keep its bytes (replacing \"\" inserts ERASED between every character)")


def tombstone_problems(lesson, message, found):
    """What is wrong with `found` as the tombstone of `message`, in words ([] if
    nothing). The personal words in the tests' messages all hold "Ilse"."""
    if not isinstance(found, dict):
        return [f"it is {found!r}, not a message"]
    problems = []
    if found.get("role") != message["role"]:
        problems.append(f"its role is {found.get('role')!r}, the erased message's was "
                        f"{message['role']!r}")
    if found.get("content") != lesson.ERASED:
        problems.append(f"its content is {found.get('content')!r}: a reader should "
                        "find ERASED where the words stood, also for a message that "
                        "had none")
    if "Ilse" in json.dumps(found, ensure_ascii=False):
        problems.append("it still holds words a person or the model said (\"Ilse\")")
    if message.get("tool_call_id") and (
            found.get("tool_call_id") != message["tool_call_id"]):
        problems.append("it no longer answers the call the erased result answered")
    calls, kept = message.get("tool_calls") or [], found.get("tool_calls")
    if [(c["id"], c["function"]["name"]) for c in calls] != [
            (c.get("id"), (c.get("function") or {}).get("name"))
            for c in kept or [] if isinstance(c, dict)]:
        problems.append("its calls are not the erased message's calls (each call's "
                        "id and tool, in order): every result after it answers one of "
                        "them")
    extra = sorted(set(found) - {"role", "content", "tool_call_id", "tool_calls"})
    extra += sorted({key for call in kept or [] if isinstance(call, dict)
                     for key in set(call) - {"id", "type", "function"}})
    extra += sorted({key for call in kept or [] if isinstance(call, dict)
                     for key in set(call.get("function") or {})
                     - {"name", "arguments"}})
    if extra:
        problems.append(f"it keeps {extra}: nothing of the erased message but what "
                        "the conversation needs may be in it (a server adds keys of "
                        "its own)")
    if found.get("role") == "tool":
        history = [{"role": "user", "content": "Hello."},
                   {"role": "assistant", "content": None, "tool_calls": [
                       {"id": found.get("tool_call_id"), "type": "function",
                        "function": {"name": "talk_to", "arguments": "{}"}}]}, found]
    else:
        history = [{"role": "user", "content": "Hello."}, found] + [
            {"role": "tool", "tool_call_id": call.get("id"), "content": "Done."}
            for call in kept or [] if isinstance(call, dict)]
    try:
        validate({"model": "scripted", "messages": history})
    except InvalidRequest as error:
        problems.append(f"a provider refuses a history that holds it: {error}")
    return problems


@pytest.mark.task("09.3")
def test_a_tombstone_keeps_no_other_key_of_the_message(lesson):
    """A tombstone keeps nothing a person could have filled: not a name, not any other
    key of the message."""
    message = {"role": "user", "content": [{"type": "text", "text": SECRET}],
               "name": "Ilse"}
    answer = {"role": "tool", "tool_call_id": "call_1", "content": SECRET}
    for erased in (message, answer):
        found = lesson.tombstone(erased)
        problems = tombstone_problems(lesson, erased, found)
        assert not problems, (
            f"tombstone({erased!r}) returned {found!r}: " + "; ".join(problems))


@pytest.mark.task("09.3")
def test_a_tombstone_is_a_new_message_with_only_what_each_call_needs(lesson):
    """A call keeps what a provider needs of it and nothing else a server added to it
    (an index, a signature), nor the arguments the model gave the tool; and the message
    given to tombstone is left as it was: it may be the agent's memory, or another
    line's entry."""
    message = {
        "role": "assistant", "content": SECRET, "reasoning": "Ilse is the sister",
        "tool_calls": [{"id": "call_1", "type": "function", "index": 0,
                        "function": {"name": "talk_to",
                                     "arguments": '{"npc": "Ilse"}',
                                     "signature": "Ilse"}}]}
    given = json.loads(json.dumps(message))
    found = lesson.tombstone(message)
    problems = tombstone_problems(lesson, given, found)
    assert not problems, (
        f"tombstone({given!r}) returned {found!r}: " + "; ".join(problems))
    assert message == given, (
        "tombstone changed the message it was given (now "
        f"{message!r}): the caller's copy, the agent's memory, lost its words too")


@pytest.mark.task("09.3")
def test_every_tombstone_holds_its_role_and_erased_as_its_content(lesson):
    """Every tombstone says it was erased, also for a message that had no content, or
    None there (an assistant message that only called tools); and a list of tool calls
    that is empty holds no call, so the tombstone calls nothing either."""
    call = {"id": "call_1", "type": "function",
            "function": {"name": "talk_to", "arguments": '{"npc": "Ilse"}'}}
    cases = [
        {"role": "assistant", "tool_calls": [call]},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "assistant", "content": SECRET, "tool_calls": []},
        {"role": "assistant", "content": SECRET, "tool_calls": [
            {"id": "call_2", "function": {"name": "buy", "arguments": '"Ilse"'}}]},
    ]
    for message in cases:
        found = lesson.tombstone(message)
        problems = tombstone_problems(lesson, message, found)
        assert not problems, (
            f"tombstone({message!r}) returned {found!r}: " + "; ".join(problems))


@pytest.mark.key
@pytest.mark.task("09.3")
def test_messages_written_after_an_erase_reach_the_log(lesson, sessions):
    """The writer goes on after an erase: what it appends next is in the log a new
    process reads, and the erase leaves no descriptor open."""
    agent, _, log = open_agent(lesson, sessions, TURN_SECRET[1] + TURN_C[1])
    with log:
        agent.run(TURN_SECRET[0])
        before = open_descriptors()
        log.erase(0)        # the log's erase alone: the agent's is task 09.4
        assert open_descriptors() == before, (
            f"erase() left {open_descriptors() - before} more file descriptor(s) "
            "open than before it: a writer that erases often runs out of them")
        agent.run(TURN_C[0])
    contents = [m["content"] for m in resume(lesson, sessions)]
    assert contents == [lesson.ERASED, "Noted.", TURN_C[0], "The elder nods."], (
        "after an erase, the writer's next messages must be appended to the rewritten "
        "log; a new process sees "
        f"{contents}: the messages the writer took after the erase are not in the "
        "file the log's name reaches")


@pytest.mark.task("09.3")
@pytest.mark.parametrize("step", ["open", "close", "fsync", "fsync-interrupted",
                                  "utime"])
def test_a_failure_after_the_rename_never_lets_the_writer_append_to_a_lost_file(
    lesson, sessions, monkeypatch, step
):
    """A step after the rename fails (too many open files, the old log that cannot be
    closed, an I/O error, a Ctrl-C, the old times that cannot be set back): the writer
    then appends to the file the log's
    name reaches, or refuses every write until the session is opened again; and if the
    erase raised, it refuses. A message it acknowledged is never in a file no name
    reaches."""
    step, interrupted = step.split("-")[0], step.endswith("-interrupted")
    log = lesson.SessionLog(sessions, "quest-1")
    log.append({"role": "user", "content": SECRET})
    renamed = []
    real_replace, real_step = os.replace, getattr(os, step)

    def replace(source, target, *args, **kwargs):
        real_replace(source, target, *args, **kwargs)
        renamed.append(target)

    def failing(*args, **kwargs):
        if renamed and interrupted:
            raise KeyboardInterrupt(f"a Ctrl-C during the {step} (the test's)")
        if renamed:
            raise OSError(24 if step == "open" else 5, f"injected failure of {step}")
        return real_step(*args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, step, failing)
    try:
        log.erase(0)
        failed = False
    except (OSError, KeyboardInterrupt):
        failed = True
    monkeypatch.undo()
    stopped = log.in_doubt
    try:
        log.append({"role": "user", "content": "Written after the erase."})
        acknowledged = True
    except Exception:       # noqa: BLE001 - a refusal (WriterStopped) is the other way
        acknowledged = False
    finally:
        log.close()
    contents = [m["content"] for m in resume(lesson, sessions)]
    assert not acknowledged or contents[-1:] == ["Written after the erase."], (
        f"the {step} after the rename failed, then append() returned, and its message "
        f"is not in the log ({contents}): it went to the old file, which no name "
        "reaches: a message acknowledged and lost")
    assert not (failed and acknowledged), (
        f"the {step} after the rename failed and erase() raised, yet the writer took "
        "the next message: a rewrite that did not finish (the new name may not survive "
        "a power cut) must leave the writer refusing every write until the session is "
        "opened again")
    assert not failed or stopped, (
        f"the {step} after the rename failed and erase() raised, yet the writer was "
        "not stopped (in_doubt not set): a rewrite that did not finish must leave it "
        "refusing every write with WriterStopped until the session is opened again, "
        "whatever file it holds")
    assert contents and contents[0] == lesson.ERASED, (
        f"the session opened again should show the erased message's tombstone, shows "
        f"{contents}")


def erase_failing_before_its_rename(lesson, folder, monkeypatch, step, nth=1):
    """Erase message 0 of a new session in `folder`, failing the `nth` opening of a
    file (step "open": too many open files) or the rename onto the log (step "replace":
    an I/O error) that the erase makes while the log's name still reaches the old log;
    step "interrupt": Ctrl-C (KeyboardInterrupt) at the `nth` opening, or at the rename
    when the erase opens fewer files.
    Returns what a test checks: (the error raised or None, the openings it made before
    the rename, the folder's names before and after, the log's bytes before and after,
    the descriptors left open, and the writer's next message as a new process sees
    it, or the error that refused it)."""
    log = lesson.SessionLog(folder, "quest-1")
    log.append({"role": "user", "content": SECRET})
    log.append({"role": "user", "content": "Keep this."})
    path = folder / "quest-1.jsonl"
    before, old = sorted(p.name for p in folder.iterdir()), path.read_bytes()
    descriptors = open_descriptors()
    real = {"os": os.open, "io": io.open, "replace": os.replace, "rename": os.rename}
    opened, renamed = [], []

    def failing_open(kind):
        def open_(file, *args, **kwargs):
            if not renamed and not isinstance(file, int):
                opened.append(os.fspath(file))
                if step == "open" and len(opened) == nth:
                    raise OSError(24, "Too many open files (the test's)", str(file))
                if step == "interrupt" and len(opened) == nth:
                    raise KeyboardInterrupt
            return real[kind](file, *args, **kwargs)
        return open_

    def renaming(kind):
        def rename(source, target, *args, **kwargs):
            if Path(target).name == "quest-1.jsonl":
                if step == "replace":
                    raise OSError(5, "Input/output error (the test's)", str(target))
                if step == "interrupt":
                    raise KeyboardInterrupt
                renamed.append(True)
            return real[kind](source, target, *args, **kwargs)
        return rename

    monkeypatch.setattr(os, "open", failing_open("os"))
    monkeypatch.setattr(io, "open", failing_open("io"))
    monkeypatch.setattr(builtins, "open", failing_open("io"))
    monkeypatch.setattr(os, "replace", renaming("replace"))
    monkeypatch.setattr(os, "rename", renaming("rename"))
    try:
        log.erase(0)
        raised = None
    except (OSError, KeyboardInterrupt) as error:
        raised = error
    finally:
        monkeypatch.undo()
    after, new = sorted(p.name for p in folder.iterdir()), path.read_bytes()
    still_open = open_descriptors() - descriptors
    try:
        log.append({"role": "user", "content": "Written after the erase."})
    except Exception as error:      # noqa: BLE001 - the test says what it means
        next_message = error
    else:
        log.close()
        next_message = resume(lesson, folder)[-1]["content"]
    finally:
        log.close()
    return raised, opened, (before, after), (old, new), still_open, next_message


@pytest.mark.task("09.3")
@pytest.mark.parametrize("step", ["open", "replace", "interrupt"])
def test_an_erase_that_fails_before_its_rename_leaves_no_copy_and_no_descriptor(
    lesson, sessions, monkeypatch, step
):
    """An erase that fails before the new log has the log's name raises, and the log is
    as it was, with no temporary copy left beside it (a copy holds every other
    message's words, and nothing would ever remove it), no descriptor left open, and
    the writer goes on appending.

    "replace": the rename onto the log fails (an I/O error). "open": each opening of a
    file the erase makes before that rename fails in turn (too many open files), one
    erase for each, whatever file it opens and however it opens it. "interrupt": the
    user presses Ctrl-C at each of those moments in turn, the rename included (a
    KeyboardInterrupt, which is no OSError)."""
    for nth in range(1, 50):
        folder = sessions / f"try-{nth}"
        raised, opened, (before, after), (old, new), still_open, next_message = (
            erase_failing_before_its_rename(lesson, folder, monkeypatch, step, nth))
        if step == "open" and len(opened) < nth:
            assert raised is None, (
                f"the erase opened {len(opened)} file(s) before its rename, none of "
                f"them failed, and it raised {raised!r}")
            break
        at_rename = step == "replace" or len(opened) < nth
        what = ("the rename onto the log failed (an I/O error)" if step == "replace"
                else "Ctrl-C (KeyboardInterrupt) stopped the rename onto the log"
                if at_rename
                else f"opening {opened[nth - 1]!r} failed (too many open files), the "
                f"erase's opening number {nth} before its rename" if step == "open"
                else f"Ctrl-C (KeyboardInterrupt) stopped the opening of "
                f"{opened[nth - 1]!r}, the erase's opening number {nth} before its "
                "rename")
        if raised is None:      # a design that got over the failure: then it is done
            assert lesson.ERASED.encode() in new and SECRET.encode() not in new, (
                f"{what}; erase() returned, yet the log is not erased")
        else:
            assert new == old, (
                f"{what}, erase() raised {raised!r}, and the log changed: a failed "
                "erase leaves the log byte for byte as it was")
        assert after == before, (
            f"{what}: the folder should hold what it held ({before}), with no copy of "
            f"the log left beside it (it holds the words); it holds {after}")
        assert still_open <= 0, (
            f"{what}, and {still_open} more descriptor(s) stayed open after the erase: "
            "a writer that erases often runs out of them")
        assert next_message == "Written after the erase.", (
            f"{what}; then the writer's next message should be appended to the log, "
            f"as before the erase. A new process sees {next_message!r} last")
        if at_rename:
            break


@pytest.mark.task("09.3")
def test_erase_rewrites_a_marker_that_quotes_the_erased_message(lesson, sessions):
    """A marker line that quotes the erased text (lesson 08's compaction summary is one)
    is rewritten too, the quote replaced by ERASED, its kind kept; a line that quotes
    nothing keeps its bytes."""
    play(lesson, sessions, TURN_SECRET)
    summary = {"$marker": "compaction", "summary": f"The user said: {SECRET}. Noted.",
               "upto": 2}
    # A line written by another program, compact and with escapes: no quote, so kept
    foreign = b'{"role":"user","content":"Caf\\u00e9 at dawn?"}\n'
    with open(sessions / "quest-1.jsonl", "ab") as file:
        file.write(json.dumps(summary).encode() + b"\n" + foreign)
    with lesson.SessionLog(sessions, "quest-1") as log:
        assert log.erase(0) is True
    [marker] = [line for line in lines_of(sessions / "quest-1.jsonl")
                if line.get("$marker") == "compaction"]
    assert marker["summary"] == f"The user said: {lesson.ERASED}. Noted.", (
        "a marker quoting the erased message should have the quote replaced by ERASED, "
        f"found {marker!r}")
    assert files_holding(sessions, "Ilse") == []
    assert foreign in (sessions / "quest-1.jsonl").read_bytes(), (
        "a line that does not quote the erased message must keep its bytes exactly")


@pytest.mark.task("09.3")
def test_erase_rewrites_a_repair_marker_that_previews_the_erased_words(lesson,
                                                                      sessions):
    """A crash cut the user's message in the middle of its line; the next writer's
    repair (lesson 04) cut the torn bytes and recorded their start in its marker's
    preview. The user then said it again, and asks for it to be erased: the words go
    from the repair marker too, whose kind stays."""
    path = sessions / "quest-1.jsonl"
    said = [{"role": "user", "content": TURN_A[0]},
            {"role": "assistant", "content": "The elder says: bring a torch."}]
    torn = json.dumps({"role": "user", "content": SECRET})[:-12]
    path.write_text("".join(json.dumps(m) + "\n" for m in said) + torn)
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": SECRET})     # said again
        log.append({"role": "assistant", "content": "Noted."})
        assert any(line.get("$marker") == "repair" and "Ilse" in json.dumps(line)
                   for line in lines_of(path)), (
            "the test's own set-up: the repair marker previews the torn line")
        assert log.erase(2) is True
    repairs = [line for line in lines_of(path) if line.get("$marker") == "repair"]
    assert len(repairs) == 1 and files_holding(sessions, "Ilse") == [], (
        "the erased message's words were also in the repair marker's preview of the "
        "line a crash cut (lesson 04): after the erase the log should hold them "
        "nowhere, the marker kept as a repair marker; its repair markers are "
        f"{repairs}")


@pytest.mark.task("09.3")
@pytest.mark.task("09.4")
def test_an_erased_message_is_not_sent_again_in_the_compaction_summary(
    lesson, sessions
):
    """Lesson 08's summary quotes what it summarises, whole or in part, and every
    request sends it: after the erase, neither the log's compaction marker nor the
    agent's next request holds the erased words, nor a piece of them."""
    model = ScriptedModel([say("Noted."), say("The elder nods."), say("Yes.")],
                          summarise=lambda body: f"The user said: {SECRET}. So the "
                                                 "sister lives at 12 Elm Street.")
    with lesson.SessionLog(sessions, "quest-1") as log:
        agent = lesson.Agent(model.client(), model=model.model, tools=Town(),
                             session=log)
        agent.run(SECRET)
        agent.run("Thank the elder.")
        assert agent.compact(), "the agent should compact the first turn by hand"
        agent.erase(0)
        agent.run("Shall we go on?")
    contents = [m.get("content") for m in model.requests[-1]["messages"]]
    assert "Noted." not in contents and "Thank the elder." in contents, (
        "the first turn was compacted before the erase: the request after it should "
        "still send the summary in its place and the turns after it, as before the "
        f"erase (the erase changes the summary's words, not what it stands for); it "
        f"sent {contents}")
    sent = json.dumps(model.requests[-1]["messages"], ensure_ascii=False)
    assert "Ilse" not in sent, (
        "the request after the erase still sent the erased words, in the compaction "
        f"summary the agent keeps: {sent[:300]}")
    assert "Elm Street" not in sent, (
        "the request after the erase still sent a piece of the erased words ('lives "
        "at 12 Elm Street'), in the compaction summary the agent keeps: a summary is "
        f"made from what it summarises, and may quote any part: {sent[:300]}")
    assert files_holding(sessions, "Ilse") == files_holding(sessions, "Elm") == [], (
        "the compaction marker in the log should have lost the quote too")


@pytest.mark.task("09.3")
@pytest.mark.task("09.5")
def test_erase_scrubs_the_messages_that_quote_the_erased_one_blobs_included(
    lesson, sessions
):
    """The model's answer repeating the erased words, and a large message (a blob)
    quoting them, keep their place and their other words: only the quote goes, from
    their lines and from their blobs."""
    quoting = "Understood: " + SECRET + ". I will remember."
    large = "Notes for the quest. " * 300 + SECRET
    play(lesson, sessions, (SECRET, [say(quoting)]), (large, [say("Filed.")]))
    [old_blob] = blob_names(sessions)
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.erase(0)
    assert files_holding(sessions, "Ilse") == [], (
        "messages quoting the erased words still hold them: "
        f"{files_holding(sessions, 'Ilse')}")
    messages = resume(lesson, sessions)
    assert messages[1]["content"] == f"Understood: {lesson.ERASED}. I will remember.", (
        "the answer that quoted the erased message keeps its other words, the quote "
        f"replaced by ERASED; found {messages[1]['content']!r}")
    assert messages[2]["content"] == "Notes for the quest. " * 300 + lesson.ERASED
    assert old_blob not in blob_names(sessions), (
        "the blob that quoted the erased words must go: the scrubbed content is a new "
        "blob")


@pytest.mark.task("09.3")
def test_erase_finds_every_quote_before_the_message_too_and_all_of_a_large_one(
    lesson, sessions
):
    """A quote may come before the erased message: the user's own words that the
    model's reply (erased) repeated. And the text of a large message is all of it, read
    back from its blob, not the preview its line keeps: a reply that copied it whole
    loses all of it. No file is left with the words, blobs included."""
    play(lesson, sessions, (f"{SECRET}. Please write to her.", [say(SECRET)]),
         (LARGE_SECRET, [say(f"Copied: {LARGE_SECRET}")]))
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.erase(1)    # the reply that repeated the user's words
        log.erase(2)    # the large message (a blob), which the next reply copied
    contents = [m["content"] for m in resume(lesson, sessions)]
    assert len(contents) == 4, (
        f"the log held 4 messages before the two erases, and should hold 4 after "
        f"(each erased one keeps its place as a tombstone); it holds {len(contents)}")
    assert contents[0] == f"{lesson.ERASED}. Please write to her.", (
        "erasing message 1 (the model's reply, the words of SECRET) left them in "
        f"message 0, the user's message before it that holds them: {contents[0]!r}. "
        "Every other line that quotes the erased text loses the quote, the lines "
        "before it as well as those after")
    assert contents[3] == f"Copied: {lesson.ERASED}", (
        "erasing the large message 2 left part of its words in message 3, the reply "
        f"that copied it whole: {contents[3][:120]!r}... The text looked for is the "
        "whole content, read back from the blob, not the preview its line keeps")
    assert files_holding(sessions, "Ilse") == [], (
        "after the two erases these files still hold the words: "
        f"{files_holding(sessions, 'Ilse')}. The blobs of every line the erase "
        "rewrote go (the erased message's, and the old blob of the reply that copied "
        "it), not only the last one's")


@pytest.mark.task("09.3")
def test_a_line_the_erase_rewrites_keeps_its_other_words_readable(lesson, sessions):
    """A line that quoted the erased message is written again as the store writes
    every line (lesson 01): UTF-8, its non-ASCII words as they are, not escaped."""
    play(lesson, sessions, TURN_SECRET, (f"Café, crème — {SECRET}", [say("Oui.")]))
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.erase(0)
    data = (sessions / "quest-1.jsonl").read_bytes()
    assert "Café, crème — ".encode("utf-8") in data, (
        "message 2 quoted the erased words and was rewritten without them; its other "
        "words should read as they did, in UTF-8, and the log holds no 'Café, crème — "
        "' any more (escaped as \\u00e9, say?): "
        f"{[line for line in data.split(bytes([10])) if b'Caf' in line]}")


@pytest.mark.task("09.3")
def test_a_short_message_is_erased_without_touching_the_other_lines(lesson, sessions):
    """A short message ("yes") is erased in its own line only: looked for elsewhere it
    would also be found in "yesterday". Every other line keeps its bytes."""
    play(lesson, sessions, ("yes", [say("Then yesterday's plan holds.")]))
    path = sessions / "quest-1.jsonl"
    second = path.read_bytes().split(b"\n")[1]
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.erase(0)
    assert path.read_bytes().split(b"\n")[1] == second, (
        "erasing 'yes' changed the next line; only quotes of at least QUOTE_MIN_CHARS "
        "characters are looked for elsewhere")


@pytest.mark.task("09.3")
def test_a_line_holding_only_a_piece_of_the_words_keeps_its_bytes(lesson, sessions):
    """A message's line loses a quote of the erased message's whole text, not a piece
    of it: a later message that shares some words with it (a paraphrase, which no
    program can tell from other words) keeps its bytes, as the agent's memory keeps
    it (task 09.4). Only a marker, such as lesson 08's summary, loses any piece."""
    piece = "The one who lives at 12 Elm, yes."
    play(lesson, sessions, TURN_SECRET, (piece, [say("Understood.")]))
    path = sessions / "quest-1.jsonl"
    third = path.read_bytes().split(b"\n")[2]
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.erase(0)
    after = path.read_bytes().split(b"\n")[2]
    assert after == third, (
        f"message 2, {piece!r}, shares a piece with the erased message ('lives at 12 "
        "Elm') but does not quote its whole text; its line should keep its bytes, and "
        f"the erase changed it to {after.decode('utf-8', 'replace')}")


@pytest.mark.task("09.3")
def test_erase_counts_no_marker_of_a_kind_it_does_not_know_and_scrubs_it(
    lesson, sessions
):
    """A marker of a kind this code does not know (another program's note, a later
    lesson's) is a marker all the same: no message, so it moves no index, and a line
    like any other, so the erase takes the quote out of it, its kind and its other
    keys kept. Only an erase marker says a message was erased: a note that names the
    message it is about by an "index" is no erase."""
    play(lesson, sessions, TURN_A)
    note = {"$marker": "note", "by": "a reviewer", "index": 2,
            "text": f"The user said: {SECRET}"}
    path = sessions / "quest-1.jsonl"
    with open(path, "ab") as file:
        file.write(json.dumps(note).encode() + b"\n")
    play(lesson, sessions, TURN_SECRET, TURN_C)
    before = resume(lesson, sessions)
    with lesson.SessionLog(sessions, "quest-1") as log:
        erased = log.erase(2)       # the SECRET: the note before it is no message
    assert erased is True, (
        "erase(2) returned False, as if message 2 had been erased before; the log "
        "holds no erase marker, only a marker of the kind 'note' that names message 2 "
        "by its \"index\" (a reviewer's note about it). Only a marker of the kind "
        "'erase' says that a message was erased: message 2 still holds the words, and "
        "the erase should have taken them out")
    found = resume(lesson, sessions)
    expected = before[:2] + [{"role": "user", "content": lesson.ERASED}] + before[3:]
    assert found == expected, (
        "a marker of the kind 'note' (one this code does not know) stands before "
        "message 2 of the log; erase(2) should have erased message 2, the markers not "
        f"counted, and left the others; a new process sees "
        f"{[m.get('content') for m in found]}")
    notes = [line for line in lines_of(path) if line.get("$marker") == "note"]
    assert notes == [{**note, "text": f"The user said: {lesson.ERASED}"}], (
        "the marker of kind 'note' quoted the erased words: it should stay in the log, "
        "its kind and keys kept, the quote replaced by ERASED (as in any other line); "
        f"the log holds {notes}")
    assert files_holding(sessions, "Ilse") == [], (
        "after the erase these files still hold the words: "
        f"{files_holding(sessions, 'Ilse')}")


@pytest.mark.task("09.3")
def test_erase_keeps_every_other_line_whatever_bytes_it_holds(lesson, sessions):
    """Lines another program wrote (a blank line, a line separator U+2028 inside a
    text, which JSON need not escape, a line ended with CR LF) are lines like any
    other: the erase replaces the erased message's line and leaves every other message
    as it was."""
    play(lesson, sessions, TURN_A)
    path = sessions / "quest-1.jsonl"
    with open(path, "ab") as file:
        file.write(b"\n")      # a blank line: no message
        file.write('{"role": "user", "content": "Line one\u2028line two"}\n'
                   .encode("utf-8"))
        file.write(b'{"role": "assistant", "content": "Ended with CR LF."}\r\n')
    play(lesson, sessions, TURN_SECRET, TURN_C)
    before = resume(lesson, sessions)
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.erase(4)        # the SECRET: the blank line is no message
    expected = before[:4] + [{"role": "user", "content": lesson.ERASED}] + before[5:]
    found = resume(lesson, sessions)
    assert found == expected, (
        "after erasing message 4, a new process should see every other message as it "
        f"was; it sees {[m.get('content') for m in found]}. The log holds a blank "
        "line, a text with U+2028 in it and a line that ends with CR LF")
    assert "Line one\u2028line two".encode() in path.read_bytes()
    assert b'"Ended with CR LF."}\r\n' in path.read_bytes(), (
        "the line another program ended with CR LF lost its bytes in the erase: a line "
        "of the log ends at a newline, and what comes before it is the line's, a CR "
        "included")


@pytest.mark.task("09.3")
def test_an_erase_that_cannot_drop_the_blobs_says_so(lesson, sessions, monkeypatch):
    """The log is erased, but another log that cannot be read (EIO) may refer to the
    erased message's blob, so the blob stays: erase raises EraseIncomplete naming the
    log, and the log itself no longer holds the words."""
    play(lesson, sessions, (LARGE_SECRET, [say("Noted.")]))
    play(lesson, sessions, TURN_C, session_id="quest-2")
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.open_for_append()
        failing_open(monkeypatch, "quest-2.jsonl")
        try:
            with raises(lesson.EraseIncomplete,
                        "the erased message's blob could not be dropped (a log could "
                        "not be read) and erase() said nothing: the person must learn "
                        "that a copy of their words is left") as raised:
                log.erase(0)
        except OSError as error:
            pytest.fail(f"erase() let {error!r} out, after the log was rewritten: "
                        "expected EraseIncomplete (an EraseError) naming the log and "
                        "what was not reached", pytrace=False)
        finally:
            monkeypatch.undo()
        try:
            log.append({"role": "user", "content": "Shall we go on?"})
        except Exception as error:
            pytest.fail(f"after EraseIncomplete the writer refused the next message "
                        f"with {error!r}: its log was rewritten whole and it holds it; "
                        "only the blobs were not reached, and the session goes on",
                        pytrace=False)
    try:
        last = lines_of(sessions / "quest-1.jsonl")[-1]
    except ValueError as error:
        pytest.fail("after EraseIncomplete the writer took the next message, and the "
                    f"log no longer reads ({error}): a line is cut or runs into "
                    "another. The writer's next line belongs at the end of the log "
                    "the erase wrote", pytrace=False)
    assert last.get("content") == "Shall we go on?", (
        "the message the writer took after EraseIncomplete should be the log's last "
        f"line; the log ends with {last!r}")
    assert str(sessions / "quest-1.jsonl") in str(raised.value), (
        "EraseIncomplete should name the log, by its path (a person with sessions in "
        f"several folders must tell which log it is); it says: {raised.value}")
    unreached = raised.value.unreached
    assert (isinstance(unreached, list) and len(unreached) == 1
            and "quest-2.jsonl" in str(unreached[0])
            and "blob" in str(unreached[0]).lower()), (
        "one place was not reached (the blobs, kept because quest-2.jsonl could not be "
        "read): EraseIncomplete's unreached should hold one line saying so (that the "
        "blobs were kept), with the error that names quest-2.jsonl; it holds "
        f"{unreached!r}")
    assert "Ilse" not in (sessions / "quest-1.jsonl").read_text(encoding="utf-8"), (
        "the log should be erased all the same")


@pytest.mark.task("09.3")
def test_a_blob_stored_again_while_the_erase_runs_stays(
    lesson, sessions, monkeypatch
):
    """Another session's writer stores the same bytes while the erase rewrites the log
    (its line comes next): the blob is young, and the erase leaves it."""
    play(lesson, sessions, (LARGE_SECRET, [say("Noted.")]))
    [blob] = blob_names(sessions)
    age(sessions / "blobs" / blob, 2)
    done = []

    def renaming(real):
        def rename(source, target, *args, **kwargs):
            real(source, target, *args, **kwargs)
            if Path(target).name == "quest-1.jsonl" and not done:
                done.append(store_again(lesson, sessions, "quest-2",
                                        LARGE_SECRET.encode()))
        return rename

    with lesson.SessionLog(sessions, "quest-1") as log:
        log.open_for_append()
        # os.rename replaces a file as os.replace does (POSIX): either may be the one
        monkeypatch.setattr(os, "replace", renaming(os.replace))
        monkeypatch.setattr(os, "rename", renaming(os.rename))
        log.erase(0)
        monkeypatch.undo()
    assert done == [blob], "the test's own set-up: the blob was stored again"
    assert blob_names(sessions) == [blob], (
        "another writer stored the blob again while the erase ran, and the erase "
        "removed it: that writer's next line would point to nothing")


@pytest.mark.task("09.3")
def test_a_message_whose_blob_is_missing_can_still_be_erased(lesson, sessions):
    """A message whose blob is gone (or damaged) can still be erased: the person wants
    it gone, and its line still holds a preview of it."""
    play(lesson, sessions, (LARGE_SECRET, [say("Noted.")]))
    for blob in (sessions / "blobs").iterdir():
        blob.unlink()
    with lesson.SessionLog(sessions, "quest-1") as log:
        try:
            log.erase(0)
        except lesson.BlobError as error:
            pytest.fail(f"erase refused a message whose blob is missing ({error}): "
                        "there is nothing to read back, erase its line anyway",
                        pytrace=False)
    assert files_holding(sessions, "Ilse") == []
    assert resume(lesson, sessions)[0]["content"] == lesson.ERASED


@pytest.mark.key
@pytest.mark.task("09.3")
def test_erasing_twice_changes_nothing_and_erasing_what_is_not_there_is_refused(
    lesson, sessions
):
    """A second erase of the same message returns False and leaves the log byte for
    byte; an index the log does not hold raises EraseError and changes nothing."""
    play(lesson, sessions, TURN_SECRET)
    path = sessions / "quest-1.jsonl"
    with lesson.SessionLog(sessions, "quest-1") as log:
        assert log.erase(0) is True
        after = path.read_bytes()
        with reading_back_after_an_erase("erasing the same message again", path):
            again = log.erase(0)
        assert again is False, "erasing an erased message again should be False" + (
            "; it returned True, and the log its name reaches holds the same bytes as "
            "before, that erase's marker included: the second erase did not read that "
            "log, but the file the writer held before the first erase's rename, which "
            "no name reaches any more" if path.read_bytes() == after else "")
        assert path.read_bytes() == after, "a second erase must not change the log"
        for index in (2, 7, -1):
            refused = erase_refused(lesson, log, path, index, 2)
            assert 2 in numbers_in(refused, path), (
                f"erase({index}) on a log of 2 messages (and one erase marker, which "
                "is no message) was refused, in words that do not say how many "
                "messages the log holds, so the caller cannot tell what would be "
                f"right: {refused}")
    assert len(erase_markers(path)) == 1, (
        "one erase, one erase marker: found " + str(erase_markers(path)))
    [marker] = erase_markers(path)
    assert lines_of(path)[-1] == marker and sorted(marker) == ["$marker", "at",
                                                               "index"], (
        "the erase marker should be the log's last line, with its kind, the index and "
        f"the time; the log ends with {lines_of(path)[-1]!r}")
    try:
        at = datetime.fromisoformat(marker["at"])
    except (TypeError, ValueError):
        at = None
    assert at is not None and at.tzinfo is not None and abs(
        at.timestamp() - time.time()) < 60, (
        f"the erase marker's 'at' should be the time of the erase as now() writes it "
        f"(an ISO date and time with its zone), found {marker['at']!r}")
    assert issubclass(lesson.EraseError, ValueError)


@pytest.mark.task("09.3")
def test_a_message_after_a_marker_erased_twice_is_erased_once(lesson, sessions):
    """The erase marker names the message by its index, as undo markers count, and a
    second erase of it looks for that index: in a log where a marker (an earlier
    erase's) comes before the message, the second erase returns False, changes
    nothing, and the log holds one erase marker for it."""
    play(lesson, sessions, TURN_A)
    with lesson.SessionLog(sessions, "quest-1") as log:
        assert log.erase(0) is True
    play(lesson, sessions, TURN_SECRET)     # messages 2 and 3, after the marker
    path = sessions / "quest-1.jsonl"
    with lesson.SessionLog(sessions, "quest-1") as log:
        assert log.erase(2) is True
        after = path.read_bytes()
        again = log.erase(2)
    indices = [marker.get("index") for marker in erase_markers(path)]
    assert again is False and path.read_bytes() == after and indices == [0, 2], (
        "message 2 comes after an erase marker (the erase of message 0) in the file; "
        "erasing it twice should erase it once: the second erase returning False and "
        "changing nothing, the log holding the erase markers of indices [0, 2]. The "
        f"second returned {again!r} and the markers' indices are {indices}: the "
        "marker says the message's index (markers do not count), and the look for "
        "an earlier erase must count the same way")


@pytest.mark.task("09.3")
def test_erasing_in_a_log_of_no_message_is_refused(lesson, sessions):
    """A log that holds no message at all (its writer died before its first line)
    has no message 0: erase(0) raises EraseError saying it holds 0 messages, and the
    log stays as it was."""
    path = sessions / "quest-1.jsonl"
    path.write_bytes(b"")
    with lesson.SessionLog(sessions, "quest-1") as log:
        refused = erase_refused(lesson, log, path, 0, 0)
    assert 0 in numbers_in(refused, path), (
        "erase(0) on a log of no message was refused, in words that do not say how "
        f"many messages the log holds (0): {refused}")


@pytest.mark.task("09.3")
def test_erase_keeps_every_line_of_a_log_of_hundreds_of_messages(lesson, sessions):
    """A log of 300 messages (over 100 KB) is read and rewritten whole: after the
    first message is erased, every other line is there, in its place, byte for
    byte, and the erase marker after them. Whole also when the system writes fewer
    bytes than asked at a time (POSIX allows it; a call moves at most 2 GiB on
    Linux): what a write did not take is written next."""
    path = sessions / "quest-1.jsonl"
    real_write = os.write

    def write_in_halves(fd, data):
        if len(data) > 1:
            data = memoryview(data)[:len(data) // 2]
        return real_write(fd, data)

    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": SECRET})
        for number in range(1, 300):
            log.append({"role": "user" if number % 2 == 0 else "assistant",
                        "content": f"Day {number}: " + "the road goes on. " * 20})
        before = path.read_bytes().split(b"\n")
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(os, "write", write_in_halves)
            assert log.erase(0) is True
    after = path.read_bytes().split(b"\n")
    kept = sum(1 for old, new in zip(before[1:-1], after[1:]) if old == new)
    assert len(after) == len(before) + 1 and kept == 299, (
        f"the log held 300 messages ({sum(map(len, before))} bytes); after erasing "
        f"the first, it should hold them all and the erase marker, 301 lines, the 299 "
        f"others as they were; it holds {len(after) - 1} lines, of which {kept} are "
        "the others as they were (was the log read with a buffer of fixed size? Or "
        "written with one write() call, though the system wrote half of what was "
        "asked each time, as it may: the rest must be written too)")
    assert erase_marker(after[-2]), (
        "the erase marker should follow the other 299 messages, as the last line")


@pytest.mark.task("09.3")
def test_a_message_far_into_a_long_log_is_erased_in_its_place_and_only_once(
    lesson, sessions
):
    """Indices go past the few that short logs hold: in a log of 300 messages, erasing
    message 290 puts its tombstone on that very line, and erasing it again returns
    False and leaves the log byte for byte. An index is a number compared by its value:
    Python's `is` says two equal numbers are the same only for small ones (up to 256),
    so an erase that compares indices with it finds no line, or no earlier erase, past
    them. The message is short, no quote the other lines are scrubbed of: only its
    tombstone takes its words away."""
    path = sessions / "quest-1.jsonl"
    far, words = 290, "Elm St. 12"
    assert len(words) < lesson.QUOTE_MIN_CHARS
    with lesson.SessionLog(sessions, "quest-1") as log:
        for number in range(300):
            log.append({"role": "user" if number % 2 == 0 else "assistant",
                        "content": words if number == far
                        else f"Day {number}: the road goes on."})
        first = log.erase(far)
        after = path.read_bytes()
        again = log.erase(far)
    entries = lines_of(path)
    assert first is True and words.encode() not in after, (
        f"erase({far}) on a log of 300 messages returned {first!r}, and the log "
        f"{'still' if words.encode() in after else 'no longer'} holds message "
        f"{far}'s words ({words!r}): the message at that index should be erased, its "
        "line a tombstone (was the index compared with `is`, which holds only for "
        "small numbers?)")
    assert entries[far].get("role") == "user" and (
        entries[far].get("content") == lesson.ERASED), (
        f"line {far + 1} of the log should hold message {far}'s tombstone, the user's "
        f"role and ERASED as its content; it holds {entries[far]!r}")
    assert again is False and path.read_bytes() == after, (
        f"erasing message {far} a second time should return False and leave the log "
        f"as the first erase left it; it returned {again!r}"
        + ("" if path.read_bytes() == after else
           f", and the log now holds {len(erase_markers(path))} erase markers")
        + " (the earlier erase marker's index is found by its value, not with `is`)")


@pytest.mark.task("09.3")
def test_erase_counts_the_undone_messages_as_undo_markers_do(lesson, sessions):
    """An index counts the file's messages as undo markers do, undone ones included:
    the log of two turns, the last one undone, shows two messages and holds four. An
    undone message is erased like any other (its words are in the file) and stays
    hidden; an index the log does not have is refused in words that say it holds
    four."""
    agent, _, log = open_agent(lesson, sessions, TURN_A[1] + TURN_SECRET[1])
    path = sessions / "quest-1.jsonl"
    with log:
        agent.run(TURN_A[0])
        agent.run(TURN_SECRET[0])
        agent.undo()
        try:
            erased = log.erase(2)
        except lesson.EraseError as error:
            pytest.fail(f"erase(2), the undone message of a log of 4, raised "
                        f"{error!r}: an undone message is still in the file, words "
                        "and all, and the index counts it", pytrace=False)
        assert erased is True and files_holding(sessions, "Ilse") == [], (
            f"erase(2), the undone message that held the words, returned {erased!r}, "
            f"and these files still hold them: {files_holding(sessions, 'Ilse')}")
        for index in (5, -1):
            refused = erase_refused(lesson, log, path, index, 4)
            assert 4 in numbers_in(refused, path), (
                f"erase({index}) on a log of 4 messages (the last 2 undone: it shows "
                "2) was refused, in words that do not say how many messages the log "
                "holds as an index counts them, undone ones included, so the caller "
                f"cannot tell what would be right: {refused}")
    shown = [m["content"] for m in resume(lesson, sessions)]
    assert shown == [TURN_A[0], "The elder says: bring a torch."], (
        f"the undone turn should stay hidden after its message was erased: {shown}")


@pytest.mark.task("09.3")
def test_each_erase_marker_says_when_its_own_erase_was_made(lesson, sessions):
    """The erase marker's "at" is the time of that erase, an ISO 8601 time with its
    zone: one writer's second erase, in a later second of the clock, writes its own."""
    play(lesson, sessions, TURN_SECRET, TURN_A)
    path = sessions / "quest-1.jsonl"
    times = []
    with lesson.SessionLog(sessions, "quest-1") as log:
        for index in (0, 2):
            if times:   # the second erase in a later second of the clock
                wait_past(times[-1][1])
            before = datetime.now(timezone.utc).replace(microsecond=0)
            log.erase(index)
            times.append((before, datetime.now(timezone.utc)))
    found = erase_markers(path)
    assert len(found) == 2, (
        f"two erases should leave two erase markers; the log has {found}")
    for number, (marker, (before, after)) in enumerate(zip(found, times), start=1):
        check_time(marker.get("at"), before, after, f"\"at\" of erase {number} of "
                   "one writer", "the time of that erase", "a time taken once, when "
                   "the writer opened, say, and written again by a later erase, is the "
                   "wrong one")


@pytest.mark.task("09.3")
def test_a_message_that_only_reads_as_erased_is_still_erased_when_asked(
    lesson, sessions
):
    """Whether a message was erased is what the log's erase markers say, not what its
    text reads: a message that repeated the erased one whole (its text is ERASED now),
    or one in which the user typed those words, is erased when asked, and gets its
    own marker; and one erased before, whatever was erased since, is not again."""
    play(lesson, sessions, TURN_SECRET, (SECRET, [say("You said that.")]),
         (lesson.ERASED, [say("Indeed.")]))
    path = sessions / "quest-1.jsonl"
    with lesson.SessionLog(sessions, "quest-1") as log:
        assert log.erase(0) is True
        for index in (2, 4):
            erased = log.erase(index)
            assert erased is True, (
                f"message {index} reads {lesson.ERASED!r} (a repeat of the erased "
                "message, scrubbed, or the user's own words) but was never erased: "
                f"erase({index}) returned {erased!r}, as if it had been. What was "
                "erased is what the erase markers say")
        after = path.read_bytes()
        for index in (0, 2):
            again = log.erase(index)
            assert again is False and path.read_bytes() == after, (
                f"message {index} was erased already (its erase marker is in the log, "
                "another erase's after it): erasing it again should return False and "
                f"leave the log as it is; erase({index}) returned {again!r}"
                + ("" if path.read_bytes() == after else ", and changed the log"))
    indices = [marker["index"] for marker in erase_markers(path)]
    assert indices == [0, 2, 4], (
        f"three messages were erased (0, 2 and 4): the log's erase markers name "
        f"{indices}")


@pytest.mark.task("09.3")
def test_a_message_another_writer_erased_is_not_erased_again(lesson, sessions):
    """Whether a message was erased is what the log says, whoever erased it: once a
    writer has erased message 0 and let the session go, another writer (the next
    program to open the session) asked to erase it returns False and leaves the log
    byte for byte."""
    play(lesson, sessions, TURN_SECRET)
    path = sessions / "quest-1.jsonl"
    with lesson.SessionLog(sessions, "quest-1") as first:
        assert first.erase(0) is True
    after = path.read_bytes()
    with lesson.SessionLog(sessions, "quest-1") as second:
        again = second.erase(0)
    markers = erase_markers(path)
    assert again is False and path.read_bytes() == after, (
        "message 0 was erased by a writer that has let the session go (its erase "
        "marker is in the log); another writer asked to erase it again should return "
        f"False and leave the log as it is: it returned {again!r}, and the log holds "
        f"{len(markers)} erase marker(s): {markers}. What was erased is what the log's "
        "erase markers say, not what one writer remembers doing")


@pytest.mark.task("09.3")
def test_erase_rewrites_the_log_its_writer_holds_not_what_the_name_reaches(
    lesson, sessions
):
    """The writer has opened the session and appended; then another program puts a
    copy of the log as it was before that append in the log's place (a backup
    restored over it: the swap of lesson 04). The erase reads the log its writer
    holds: the log it leaves under the name holds every message the writer has, the
    erased one as its tombstone, and the words are gone."""
    play(lesson, sessions, TURN_SECRET)
    path = sessions / "quest-1.jsonl"
    backup = sessions / "backup-of-quest-1"
    backup.write_bytes(path.read_bytes())
    age(backup, 40)     # an old backup
    backup_ns = os.stat(backup).st_mtime_ns
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": TURN_C[0]})
        appended_ns = os.stat(path).st_mtime_ns
        os.replace(backup, path)
        log.erase(0)
    kept_ns = os.stat(path).st_mtime_ns
    contents = [m["content"] for m in resume(lesson, sessions)]
    assert contents == [lesson.ERASED, "Noted.", TURN_C[0]], (
        "after the writer appended, an older copy of the log took the log's name; the "
        "writer then erased message 0, and the session now shows "
        f"{contents}, not [ERASED, 'Noted.', {TURN_C[0]!r}]: the erase rewrote the "
        "file the name reached, not the log the writer holds, and the message the "
        "writer had acknowledged is gone")
    assert files_holding(sessions, "Ilse") == [], (
        f"after the erase the words are still in {files_holding(sessions, 'Ilse')}")
    whose = ("those of the backup the name reached" if kept_ns == backup_ns
             else "a time of its own")
    assert kept_ns == appended_ns, (
        "the erase rewrote the log the writer holds, last appended to just now, and "
        f"the new log should keep that log's times; it has {whose} "
        f"({(time.time_ns() - kept_ns) / 1e9 / DAY:.0f} days old): an erase is no use "
        "of the session, and expire() judges a session by its last append")


@pytest.mark.task("09.3")
def test_after_an_erase_a_write_taken_back_leaves_no_gap_in_the_log(
    lesson, sessions, monkeypatch
):
    """After an erase, the disk fills up in the middle of a line: the writer takes the
    part back (lesson 04) and raises. Once there is room, its next message lands right
    after the last whole line, as it did before the erase: the log holds no gap."""
    log = lesson.SessionLog(sessions, "quest-1")
    try:
        log.append({"role": "user", "content": SECRET})
        log.append({"role": "assistant", "content": "Noted."})
        log.erase(0)
        real_write = os.write
        cut = []

        def write(fd, data):
            if cut:
                return real_write(fd, data)
            cut.append(True)    # the disk is full half-way through this line
            return real_write(fd, bytes(data)[:len(data) // 2])

        monkeypatch.setattr(os, "write", write)
        with pytest.raises(OSError):
            log.append({"role": "user", "content": "Lost to a full disk."})
        monkeypatch.undo()
        log.append({"role": "user", "content": TURN_C[0]})
    finally:
        log.close()
    data = (sessions / "quest-1.jsonl").read_bytes()
    assert b"\0" not in data and b"Lost to" not in data, (
        "after an erase, a line the full disk cut short was taken back, and the next "
        f"line did not land at the end of the log: the log holds {data.count(0)} NUL "
        "byte(s) where the part taken back was, and no longer loads. The file the "
        "writer holds after an erase must be written as the log always was, at its "
        "end, wherever the last write left off")
    contents = [m["content"] for m in resume(lesson, sessions)]
    assert contents == [lesson.ERASED, "Noted.", TURN_C[0]], (
        f"the session should show the tombstone, the reply and the next message: "
        f"{contents}")


@pytest.mark.task("09.3")
def test_erase_is_done_under_the_lock(lesson, sessions):
    """Erasing a session another writer holds is refused (SessionBusy), changing
    nothing: a rewrite under a writer would lose what it appends."""
    play(lesson, sessions, TURN_SECRET)
    before = (sessions / "quest-1.jsonl").read_bytes()
    with lesson.SessionLog(sessions, "quest-1") as writer:
        writer.open_for_append()
        with lesson.SessionLog(sessions, "quest-1") as other:
            with raises(lesson.SessionBusy,
                        "erase() went ahead while another writer held the session"):
                other.erase(0)
    assert (sessions / "quest-1.jsonl").read_bytes() == before


@pytest.mark.task("09.3")
def test_a_failed_erase_leaves_the_old_log_whole_and_no_copy_behind(
    lesson, sessions, monkeypatch
):
    """If the rename cannot happen (here: it fails), the log is the old one, byte for
    byte, no temporary copy is left, and the writer can go on appending. Nothing of
    the failed erase counts as done: asked again, the same writer erases the message."""
    play(lesson, sessions, TURN_SECRET)
    path = sessions / "quest-1.jsonl"
    before = path.read_bytes()

    def refuse(*args, **kwargs):
        raise OSError(5, "Input/output error (the test's)")

    with lesson.SessionLog(sessions, "quest-1") as log:
        log.open_for_append()
        monkeypatch.setattr(lesson.os, "replace", refuse)
        monkeypatch.setattr(lesson.os, "rename", refuse)    # its POSIX twin
        with raises(OSError, "the erase never renamed a new file over the log: it "
                    "changed the log in place, where a crash leaves half of each"):
            log.erase(0)
        monkeypatch.undo()
        assert path.read_bytes() == before, (
            "an erase whose rename failed changed the log: a crash at that moment "
            "leaves neither the old log nor the new one")
        log.append({"role": "user", "content": "Still here."})
        again = log.erase(0)
        held = "still holds" if b"Ilse" in path.read_bytes() else "no longer holds"
        assert again is True and held == "no longer holds", (
            "the erase of message 0 failed (its rename refused) and left the log as "
            "it was; asked again by the same writer, the disk working now, the erase "
            f"should take the words out of the log and return True; it returned "
            f"{again!r}, and the log {held} them. A failed erase erased nothing: "
            "only an erase marker in the log says that a message was erased")
    assert sorted(p.name for p in sessions.iterdir()) == ["quest-1.jsonl"], (
        "a failed erase must leave no temporary copy of the log (it holds the words)")
    assert resume(lesson, sessions)[-1]["content"] == "Still here."


@pytest.mark.task("09.3")
@pytest.mark.task("09.1")
def test_the_copy_an_erase_leaves_as_it_crashes_goes_with_the_session(
    lesson, sessions, monkeypatch, tmp_path
):
    """A crash (a power cut, a kill) just before the erase renames its new log over
    the old one leaves that copy beside the log, with every other message's words.
    It is a temporary copy of the log, named as task 09.1 says one is, so deleting
    the session leaves none of them. (The test copies the folder as the rename
    begins: what a crash right then leaves on disk.)"""
    play(lesson, sessions, TURN_SECRET, TURN_A)
    crashed = tmp_path / "as-the-crash-left-it"
    log_path = sessions / "quest-1.jsonl"

    def as_the_crash_leaves_it(real):
        def rename(source, target, *args, **kwargs):
            if Path(target) == log_path and not crashed.exists():
                shutil.copytree(sessions, crashed, symlinks=True)
            return real(source, target, *args, **kwargs)
        return rename

    with lesson.SessionLog(sessions, "quest-1") as log:
        log.open_for_append()
        for name in ("replace", "rename"):
            real = getattr(os, name)
            monkeypatch.setattr(lesson.os, name, as_the_crash_leaves_it(real))
        log.erase(0)
        monkeypatch.undo()
    assert crashed.exists(), "the erase never renamed a new file over the log"
    lesson.delete_session(crashed, "quest-1")
    left = files_holding(crashed, "elder")
    assert left == [], (
        "a crash just before the erase's rename left its new log beside the old one; "
        f"deleting the session then left {left}, which hold its words. The erase's "
        "copy should be a temporary copy of the log as task 09.1 names one (a dot, "
        "the log's name, a dot, a random part, .tmp): no delete looks for another")


@pytest.mark.task("09.3")
@pytest.mark.parametrize("when", ["at-its-first-use", "at-the-rename"])
def test_a_link_planted_in_place_of_the_new_log_never_becomes_the_log(
    lesson, sessions, monkeypatch, when
):
    """While the erase runs, another program replaces the erase's new file (a file of
    the folder the erase made) by a symbolic link to a copy of it outside the sessions
    folder: "at-its-first-use", just before the erase first uses that file by its name
    after making it (opens it, renames it); "at-the-rename", just before the rename
    that gives it the log's name, the last moment (nothing can then keep the link from
    taking the log's name). Whenever it comes, the link never receives the writer's
    messages, and no message the writer acknowledges is lost: the writer appends to
    the log, or refuses every write until the session is opened again, and then the
    erase has said so. Planted before the erase opens the file by name, the link never
    becomes the log: the old log is there, byte for byte. And once the session is
    closed, the process holds no file the erase opened, whichever way it went out."""
    play(lesson, sessions, TURN_SECRET)
    path = sessions / "quest-1.jsonl"
    old = path.read_bytes()
    descriptors = open_descriptors()
    before = {p.name for p in sessions.iterdir()}
    target = sessions.parent / "planted.jsonl"
    real = {"open": os.open, "io": io.open, "replace": os.replace, "rename": os.rename}
    planted = []

    def plant(file, kind):
        found = Path(os.fspath(file))
        if (planted or found.parent != sessions or found.name in before
                or not os.path.lexists(found) or os.path.islink(found)):
            return
        planted.append(kind)     # first: the test's own reads below pass through
        target.write_bytes(found.read_bytes())
        os.unlink(found)
        os.symlink(target, found)
        planted[0] = (kind, target.read_bytes())

    def opening(kind):
        def open_(file, *args, **kwargs):
            if when == "at-its-first-use" and not isinstance(file, int):
                plant(file, "open")
            return real[kind](file, *args, **kwargs)
        return open_

    def renaming(kind):
        def rename(source, target_, *args, **kwargs):
            if when == "at-its-first-use" or Path(target_).name == "quest-1.jsonl":
                plant(source, "rename")
            return real[kind](source, target_, *args, **kwargs)
        return rename

    with lesson.SessionLog(sessions, "quest-1") as log:
        log.open_for_append()
        monkeypatch.setattr(os, "open", opening("open"))
        monkeypatch.setattr(io, "open", opening("io"))
        monkeypatch.setattr(builtins, "open", opening("io"))
        monkeypatch.setattr(os, "replace", renaming("replace"))
        monkeypatch.setattr(os, "rename", renaming("rename"))
        try:
            log.erase(0)
            erase_raised = None
        except OSError as error:
            erase_raised = error    # a refusal: what it left is checked below
        finally:
            monkeypatch.undo()
        assert planted, (
            "the test's own set-up: the erase never renamed a file it made over the "
            "log")
        (kind, planted_bytes), = planted
        erased = None if path.is_symlink() else path.read_bytes()
        try:
            log.append({"role": "user", "content": "After the erase."})
            refused = None
        except Exception as error:   # noqa: BLE001 - a writer that stopped is no harm
            refused = error
    where = ("just before the erase opened it by name" if kind == "open"
             else "just before the erase renamed it")
    left_open = open_descriptors() - descriptors
    assert left_open == 0, (
        f"a symbolic link was put in place of the erase's new log {where}; once the "
        f"session was closed, the process still held {left_open} more file "
        "descriptor(s) than before the erase: a file it opened (the old log, or its "
        "new one) was never closed on the way out")
    assert target.read_bytes() == planted_bytes, (
        f"a symbolic link was put in place of the erase's new log {where}, and bytes "
        f"went through it, to {target}, outside the sessions folder: the writer's "
        "messages (or the erase's) went there")
    assert refused is not None or (not path.is_symlink() and b"After the erase."
                                   in path.read_bytes()), (
        f"a symbolic link was put in place of the erase's new log {where}; then "
        "append() took a message, and it is not in the log (the log's name now "
        f"{'leads through the link' if path.is_symlink() else 'reaches another file'}"
        "): a message acknowledged and lost")
    assert refused is None or erase_raised is not None, (
        f"a symbolic link was put in place of the erase's new log {where}; erase() "
        f"returned as if all was well, and then the writer refused the next message "
        f"({refused!r}): the erase should have said that it did not finish")
    if kind == "open":
        assert erased == old, (
            f"a symbolic link was put in place of the erase's new log {where}, and "
            f"{path.name} is {'now that link' if erased is None else 'changed'}: "
            "a file reached through a link another program planted became the log")
    assert sorted(p.name for p in sessions.iterdir()) == ["quest-1.jsonl"], (
        "the erase left the planted link (or a copy of the log) beside the log: "
        f"{sorted(p.name for p in sessions.iterdir())}")


@pytest.mark.task("09.3")
def test_a_hard_link_put_in_place_of_the_new_log_at_the_rename_gets_no_message(
    lesson, sessions, monkeypatch
):
    """Just before the rename that gives the erase's new file the log's name, another
    program puts in its place a hard link to a file of its own outside the sessions
    folder: the same file under a second name, which an open does not refuse as it
    refuses a symbolic link. The rename gives that file the log's name; it never
    receives the writer's messages: the writer appends to the log it wrote, or refuses
    every write until the session is opened again, and then the erase has said so.
    Once the session is closed, the process holds no file the erase opened (the old
    log's descriptor included, whichever way the erase went out)."""
    play(lesson, sessions, TURN_SECRET)
    path = sessions / "quest-1.jsonl"
    own = sessions.parent / "own-notes.txt"
    notes = b"another program's own notes\n"
    own.write_bytes(notes)
    descriptors = open_descriptors()
    real = {"replace": os.replace, "rename": os.rename}
    planted = []

    def renaming(kind):
        def rename(source, target, *args, **kwargs):
            found, onto = Path(os.fspath(source)), Path(os.fspath(target))
            if not planted and onto.name == path.name and found.parent == sessions:
                planted.append(found.name)
                os.unlink(found)
                os.link(own, found)
            return real[kind](source, target, *args, **kwargs)
        return rename

    with lesson.SessionLog(sessions, "quest-1") as log:
        log.open_for_append()
        monkeypatch.setattr(os, "replace", renaming("replace"))
        monkeypatch.setattr(os, "rename", renaming("rename"))
        try:
            log.erase(0)
            erase_raised = None
        except OSError as error:
            erase_raised = error    # a refusal: what it left is checked below
        finally:
            monkeypatch.undo()
        assert planted, (
            "the test's own set-up: the erase never renamed a file it made over the "
            "log")
        try:
            log.append({"role": "user", "content": "After the erase."})
            refused = None
        except Exception as error:   # noqa: BLE001 - a writer that stopped is no harm
            refused = error
    assert own.read_bytes() == notes, (
        "a hard link to another program's file was put in place of the erase's new "
        "log just before the rename gave it the log's name, and that file received "
        f"bytes: it now ends in {own.read_bytes()[-80:]!r}. The writer went on "
        "writing to the file the log's name reached after the rename (opened by its "
        "name), not to the log the erase wrote")
    assert refused is None or erase_raised is not None, (
        "a hard link was put in place of the erase's new log just before the rename; "
        "erase() returned as if all was well, and then the writer refused the next "
        f"message ({refused!r}): the erase should have said that it did not finish")
    left_open = open_descriptors() - descriptors
    assert left_open == 0, (
        "a hard link was put in place of the erase's new log just before the rename; "
        f"once the session was closed, the process still held {left_open} more file "
        "descriptor(s) than before the erase: a file the erase opened (the old log, "
        "or its new one) was never closed on the way out, and each such erase loses "
        "one more")
    assert erase_raised is None or str(path) in str(erase_raised), (
        "a hard link was put in place of the erase's new log just before the rename, "
        f"and erase() said it did not finish in words that do not name the log by its "
        f"path ({path}): a person with sessions in several folders cannot tell which "
        f"one to open again: {erase_raised}")


@pytest.mark.task("09.3")
def test_the_rewritten_log_is_on_disk_before_its_name_points_to_it(
    lesson, sessions, monkeypatch
):
    """A power cut at any moment of an erase leaves the old log or the new one, never
    the log's name on bytes that are not on disk, and once the erase has returned, the
    new log's name survives one."""
    play(lesson, sessions, TURN_SECRET)
    events = []
    fsync = lesson.os.fsync

    def recording_fsync(fd):
        found = os.fstat(fd)
        events.append(("fsync", found.st_ino, stat.S_ISDIR(found.st_mode)))
        fsync(fd)

    def recording(replace):
        def recording_replace(source, target, **options):
            events.append(("rename", os.stat(source).st_ino, False))
            replace(source, target, **options)
        return recording_replace

    with lesson.SessionLog(sessions, "quest-1") as log:
        log.open_for_append()
        monkeypatch.setattr(lesson.os, "fsync", recording_fsync)
        # fdatasync makes a file's bytes durable as fsync does: either may be the one
        monkeypatch.setattr(lesson.os, "fdatasync", recording_fsync)
        # os.rename replaces a file as os.replace does (POSIX): either may be the one
        monkeypatch.setattr(lesson.os, "replace", recording(lesson.os.replace))
        monkeypatch.setattr(lesson.os, "rename", recording(lesson.os.rename))
        log.erase(0)
        monkeypatch.undo()
    renames = [k for k, event in enumerate(events) if event[0] == "rename"]
    assert len(renames) == 1, f"expected one rename of the new log, saw {events}"
    new_log = events[renames[0]][1]
    assert ("fsync", new_log, False) in events[:renames[0]], (
        "the new log was renamed over the old one before its bytes were fsynced: a "
        "power cut just after can leave the log's name on bytes that never reached "
        "the disk")
    assert any(e[0] == "fsync" and e[2] for e in events[renames[0]:]), (
        "the folder was not fsynced after the rename: a power cut can undo it, and "
        "bring the old log back, words and all")


@pytest.mark.task("09.3")
def test_erase_keeps_the_file_private_and_the_log_as_old_as_it_was(lesson, sessions):
    """The rewritten log is 0600 like every file of a session, and keeps the old file's
    times: the time of its last append, so that an erase does not make an idle session
    young again, and its access time.

    The test sets the access time an hour ahead, later than every other time of the
    file, so that a read leaves it as it is where the file system updates access times
    only when they are older (Linux's default, relatime)."""
    play(lesson, sessions, TURN_SECRET)
    path = sessions / "quest-1.jsonl"
    os.chmod(path, 0o644)   # as another program, or a careless copy, may have left it
    # Times with nanoseconds (123 of them), as a file system keeps them
    read_ns = int(time.time() + 3600) * 10**9 + 123
    written_ns = int(time.time() - 20 * DAY) * 10**9 + 123
    read_at, written_at = read_ns / 1e9, written_ns / 1e9
    os.utime(path, ns=(read_ns, written_ns))
    path.read_bytes()
    reads_leave_it = os.stat(path).st_atime_ns == read_ns
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.erase(0)
    found = os.stat(path)
    mode = stat.S_IMODE(found.st_mode)
    assert mode == 0o600, (
        f"the rewritten log is {oct(mode)}, not 0o600: the log it replaced was 0o644, "
        "and the new one holds a person's words like every file of a session: private, "
        "whatever the old file's mode")
    assert abs(found.st_mtime - written_at) < 1, (
        "an erase is not a use: the log should keep the modification time of its last "
        "append, 20 days ago; expire() goes by it")
    assert found.st_mtime_ns == written_ns, (
        f"the log's modification time was {written_ns} ns, and after the erase it is "
        f"{found.st_mtime_ns} ns: the new log should keep the old file's time exactly "
        "(a time taken as a float of seconds has lost its last digits)")
    if reads_leave_it:      # else every read sets it: nothing an erase could keep
        assert found.st_atime_ns == read_ns, (
            f"the log's access time was {datetime.fromtimestamp(read_at):%H:%M:%S} "
            "(the test set it), and after the erase it is "
            f"{datetime.fromtimestamp(found.st_atime):%H:%M:%S}: the new log should "
            "keep the old file's access time too")


@pytest.mark.task("09.3")
@pytest.mark.task("09.5")
def test_erase_keeps_a_blob_a_fork_still_refers_to_and_the_fork_keeps_its_words(
    lesson, sessions
):
    """A fork is a copy (lesson 03): erasing in the source leaves the fork's words and
    the blob the fork refers to. Erased in the fork too, nothing is left."""
    play(lesson, sessions, (LARGE_SECRET, [say("Noted.")]))
    lesson.fork(sessions, "quest-1", "quest-1b")
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.erase(0)
    assert len(blob_names(sessions)) == 1, (
        "the fork still refers to the blob: the erase in quest-1 must keep it, or the "
        "fork no longer loads")
    assert resume(lesson, sessions, "quest-1b")[0]["content"] == LARGE_SECRET, (
        "erasing in quest-1 must not change what its fork holds")
    with lesson.SessionLog(sessions, "quest-1b") as log:
        log.erase(0)
    assert files_holding(sessions, "Ilse") == [] and blob_names(sessions) == [], (
        "erased in the fork too, neither log nor blob may hold the words")


# --- 09.4: the agent forgets (it needs 09.3's erase from the log) ---------------------


@pytest.mark.task("09.4")
def test_the_agent_sends_no_quote_of_the_erased_words_again(lesson, sessions):
    """The model's reply repeated the user's words: after the user's message is erased,
    the agent's next request holds them nowhere, and neither does the log. And the
    agent's memory keeps what the log keeps: a later reply that holds only a piece of
    the words (a paraphrase, which no program can find) stays as it was in both."""
    echo = f"Noted: {SECRET}."
    piece = "The one who lives at 12 Elm, yes."
    agent, model, log = open_agent(lesson, sessions,
                                   [say(echo), say(piece), say("Yes.")])
    with log:
        agent.run(SECRET)
        agent.run("Which sister?")
        found = agent.erase(0)
        agent.run("Shall we go on?")
    assert found == {"role": "user", "content": lesson.ERASED}, (
        "Agent.erase should return the erased message's tombstone, it returned "
        f"{found!r}")
    sent = json.dumps(model.requests[-1]["messages"], ensure_ascii=False)
    assert "Ilse" not in sent, (
        "after the user's message was erased, the next request still sent its words, "
        f"in the reply that repeated them: {sent[:300]}")
    assert files_holding(sessions, "Ilse") == [], (
        "the log's reply that repeated the words should have lost them too; still "
        f"holding them: {files_holding(sessions, 'Ilse')}")
    resumed = resume(lesson, sessions)
    assert agent.messages == resumed, (
        "after the erase, the agent's memory and its log hold different messages: a "
        "new process would send what the log holds, this agent sends something else. "
        "The agent takes the quotes out of its messages as the log's erase takes them "
        "out of its lines (a message loses the whole erased text; only lesson 08's "
        "summary loses any piece of it). In memory: "
        f"{[m.get('content') for m in agent.messages]}; in the log: "
        f"{[m.get('content') for m in resumed]}")


@pytest.mark.task("09.4")
def test_the_agent_keeps_the_tombstone_the_log_keeps_when_the_words_are_in_erased(
    lesson, sessions
):
    """The erased words are a piece of ERASED itself (the user answered "at the user's
    request"). The log's line holds the tombstone as tombstone() makes it; the agent's
    memory holds the same message, not a tombstone whose own text then lost the words
    (a tombstone is what takes the message's place, not one more message to scrub)."""
    words = "at the user's request"
    assert words in lesson.ERASED and len(words) >= lesson.QUOTE_MIN_CHARS, (
        "the test's own set-up: its words should be a quotable piece of ERASED")
    agent, _, log = open_agent(lesson, sessions, [say("Why was the letter sent?"),
                                                  say("Noted.")])
    with log:
        agent.run("Send the letter to Ilse.")
        agent.run(words)
        found = agent.erase(2)
    resumed = resume(lesson, sessions)
    assert found == resumed[2] and agent.messages == resumed, (
        f"the user erased their message {words!r}, a piece of ERASED: the log's line "
        f"now holds {resumed[2]!r}, the agent returned {found!r} and holds "
        f"{[m.get('content') for m in agent.messages]} where the log holds "
        f"{[m.get('content') for m in resumed]}. The agent's memory should keep what "
        "the log keeps: the erased message becomes its tombstone as it is, after the "
        "other messages lost their quotes")


@pytest.mark.task("09.4")
def test_whoever_holds_the_agents_conversation_sees_the_erase(lesson, sessions):
    """The agent's conversation is one list, which every turn changes in place (record
    appends to it): a chat window, or any caller, that took agent.messages before the
    erase shows the conversation as the agent holds it after, the tombstone in the
    erased message's place and no quote of its words; not the words the agent let go."""
    agent, _, log = open_agent(lesson, sessions, [say(f"Noted: {SECRET}."),
                                                  say("Yes.")])
    with log:
        shown = agent.messages      # what a chat window keeps to draw the conversation
        agent.run(SECRET)
        agent.erase(0)
        agent.run("Shall we go on?")
    held = json.dumps(shown, ensure_ascii=False)
    assert "Ilse" not in held and shown == agent.messages, (
        "a caller took agent.messages before the user's message was erased (a chat "
        "window showing the conversation); after the erase and one more turn it holds "
        f"{[m.get('content') for m in shown]}, the agent "
        f"{[m.get('content') for m in agent.messages]}. The conversation is one list "
        "that the agent changes in place, as every turn does: an erase that puts a new "
        "list in its place leaves the words with whoever holds the old one")


@pytest.mark.task("09.3")
@pytest.mark.task("09.4")
def test_the_agent_finds_the_message_in_the_log_its_writer_holds(lesson, sessions):
    """The agent's session has written its messages; then another program puts an
    older copy of the log in its place (a backup restored over it). The user erases a
    message the older copy does not hold: the agent finds it in the log its writer
    holds, not in the file the name reaches, and the words are gone."""
    path = sessions / "quest-1.jsonl"
    backup = sessions / "backup-of-quest-1"
    agent, _, log = open_agent(lesson, sessions, [say("The elder nods."),
                                                  say("Noted.")])
    with log:
        agent.run("Ask the elder about the cave.")
        backup.write_bytes(path.read_bytes())
        agent.run(SECRET)
        os.replace(backup, path)
        try:
            agent.erase(2)
        except lesson.EraseError as error:
            pytest.fail(
                "the agent's writer holds 4 messages; an older copy of the log, of "
                "2, then took the log's name, and erasing message 2 raised "
                f"{error!r}: the agent looked the message up in the file the name "
                "reaches, not in the log its writer holds", pytrace=False)
    assert files_holding(sessions, "Ilse") == [], (
        f"after the erase the words are still in {files_holding(sessions, 'Ilse')}")


@pytest.mark.task("09.3")
@pytest.mark.task("09.4")
def test_the_agent_takes_the_words_out_of_the_tool_calls_that_quoted_them(
    lesson, sessions
):
    """The model passed the user's words on to a tool: after the user's message is
    erased, neither the next request nor the log holds them in that call's arguments,
    and the agent's memory keeps what the log keeps."""
    agent, model, log = open_agent(
        lesson, sessions,
        [use(call("talk_to", npc=SECRET), call("buy", item="a map of 12 Elm Street")),
         say("Noted."), say("Yes.")])
    with log:
        agent.run(SECRET)
        agent.erase(0)
        sent = sent_on_going_on(agent, model)
    assert "Ilse" not in sent, (
        "the model had passed the user's words to a tool (a call's arguments); after "
        f"the erase the next request still sent them: {sent[:300]}. A message's tool "
        "calls lose the quotes too, in memory as in the log")
    assert agent.messages == resume(lesson, sessions), (
        "after the erase, the agent's memory and its log hold different messages: a "
        "tool call whose arguments quoted the words (whole, or a piece of them: '12 "
        "Elm Street') lost them in the log, not in memory (or the other way round). A "
        "call's arguments lose any piece of the words, as a summary does")


@pytest.mark.task("09.4")
def test_a_message_not_written_yet_is_erased_and_never_written_with_the_words(
    lesson, sessions
):
    """Lesson 07's pending messages: a note the user recorded and that is not in the
    log yet can be erased like any other; and a pending note that quotes an erased
    message never reaches the log with the quote. Each note is written once, so the
    agent's memory then holds what the log holds."""
    agent, model, log = open_agent(lesson, sessions, [say("Noted."), say("Yes.")])
    with log:
        agent.run("Ask the elder about the cave.")
        agent.record({"role": "user", "content": SECRET})
        agent.record({"role": "user", "content": f"To repeat: {SECRET}"})
        try:
            agent.erase(2)
        except lesson.EraseError as error:
            pytest.fail(f"erasing message 2, a note recorded and not written yet, "
                        f"raised {error!r}: the agent holds it, so it can be erased",
                        pytrace=False)
        agent.run("Shall we go on?")
    assert files_holding(sessions, "Ilse") == [], (
        "two notes were pending when the first was erased (the second quotes it); "
        "once the agent wrote its pending messages, these files held the words: "
        f"{files_holding(sessions, 'Ilse')}")
    assert "Ilse" not in json.dumps(model.requests[-1]["messages"]), (
        "the next request still sent the erased words")
    resumed = resume(lesson, sessions)
    assert resumed[2] == {"role": "user", "content": lesson.ERASED}, (
        "message 2 of the log should be the erased note's tombstone")
    assert agent.messages == resumed, (
        "two notes were pending when the first was erased; then the agent's memory and "
        "its log hold different messages: in memory "
        f"{[m.get('content') for m in agent.messages]}, in the log "
        f"{[m.get('content') for m in resumed]}. Each pending message is written once, "
        "as the agent holds it")


@pytest.mark.task("09.4")
def test_a_note_not_written_yet_loses_the_quote_of_a_written_message_erased(
    lesson, sessions
):
    """The user's message is in the log; a note recorded since (lesson 07) quotes it
    and is not written yet. The user erases the written message: the note, once
    written, holds no quote of it, and no request sends one."""
    agent, model, log = open_agent(lesson, sessions, [say("Noted."), say("Yes.")])
    with log:
        agent.run(SECRET)
        agent.record({"role": "user", "content": f"To repeat: {SECRET}"})
        agent.erase(0)
        agent.run("Shall we go on?")
    assert files_holding(sessions, "Ilse") == [], (
        "message 0 was in the log, and a note quoting it was pending (recorded, not "
        "written yet) when the user erased message 0; once the agent wrote its "
        f"pending messages, these files held the words: "
        f"{files_holding(sessions, 'Ilse')}. A pending message is the agent's too: "
        "it loses the quote before it is ever written")
    assert "Ilse" not in json.dumps(model.requests[-1]["messages"]), (
        "the next request still sent the erased words")


@pytest.mark.task("09.4")
def test_the_agent_erases_the_message_it_shows_when_the_same_words_came_before(
    lesson, sessions
):
    """The user said "Thank you" twice (too short to be looked for in other
    messages) and erases the second: the log erases that message, the later one,
    and keeps the first as it was; the agent's memory and the log hold the same
    messages."""
    agent, _, log = open_agent(lesson, sessions, [say("The elder nods."),
                                                  say("The elder smiles.")])
    with log:
        agent.run("Thank you")
        agent.run("Thank you")
        agent.erase(2)
    found = [m.get("content") for m in resume(lesson, sessions)]
    expected = ["Thank you", "The elder nods.", lesson.ERASED, "The elder smiles."]
    assert found == expected, (
        "the conversation was 'Thank you', 'The elder nods.', 'Thank you', 'The "
        "elder smiles.', and the user erased message 2, the second 'Thank you'; a new "
        f"process sees {found}, where it should see {expected}. The log's message is "
        "found by its place, not by its words: the same words may come more than once")
    assert agent.messages == resume(lesson, sessions), (
        "after the erase the agent's memory and its log hold different messages: in "
        f"memory {[m.get('content') for m in agent.messages]}, in the log {found}")


@pytest.mark.task("09.4")
def test_the_agent_looks_for_the_erased_text_whole_blanks_included(lesson, sessions):
    """What counts as a quote is the log's rule: the erased message's text whole, as
    it was written, its line break included, and measured so. The user pasted a text
    with a line break at its end. A reply that repeats the words without the line
    break does not quote the whole text: the log's erase leaves it as it was. A text
    of 11 letters and its line break is 12 characters long, long enough to be looked
    for: the log's erase takes it out of the reply that quotes it whole. Either way
    the agent's memory keeps what the log keeps."""
    cases = [
        (f"{SECRET}\n", f"Noted: {SECRET}.",
         "the sentence with a line break at its end, and the reply repeated the "
         "sentence without it"),
        ("Ilse at Elm\n", "You said: Ilse at Elm\nRight.",
         "'Ilse at Elm' and its line break (12 characters, as long as the shortest "
         "text looked for), and the reply quoted it whole"),
    ]
    for number, (text, reply, which) in enumerate(cases, start=1):
        session_id = f"pasted-{number}"
        agent, model, log = open_agent(lesson, sessions, [say(reply), say("Yes.")],
                                       session_id=session_id)
        with log:
            agent.run(text)
            agent.erase(0)
        resumed = resume(lesson, sessions, session_id)
        assert agent.messages == resumed, (
            f"the user's message was {which}; after erasing the user's message, the "
            "agent's memory and its log hold different messages: in memory "
            f"{[m.get('content') for m in agent.messages]}, in the log "
            f"{[m.get('content') for m in resumed]}. The agent looks for each text of "
            "the erased message whole, as it was written, and measures it so, blanks "
            "and line breaks included, as the log's erase does")


@pytest.mark.task("09.4")
def test_a_second_erase_finds_the_message_in_the_log_as_it_stands_now(lesson, sessions):
    """The user erases a message, then undoes a turn and says something new, and erases
    that too. The log changed between the two erases (an undo marker hides the turn
    taken back, and a new turn follows it): the second erase finds the message the user
    meant in the log as it stands then, not as it stood at the first erase."""
    agent, _, log = open_agent(lesson, sessions, [
        say("The elder nods."), say("You are welcome."), say("Noted.")])
    with log:
        agent.run("Ask the elder about the cave.")
        agent.run("Thank the elder for the advice.")
        agent.erase(0)
        agent.undo()
        agent.run(SECRET)
        agent.erase(2)
    if files_holding(sessions, "Ilse"):
        fail_in("09.4", "the user erased message 0, undid the last turn, said "
                f"{SECRET!r} (message 2 of the conversation, message 4 of the log, "
                "after the two the undo hides) and erased message 2: the words are "
                f"still in {files_holding(sessions, 'Ilse')}. The position is "
                "translated through the log as it stands at each erase (the first "
                "erase's reading of it is out of date once a turn was undone)")


@pytest.mark.task("09.4")
def test_the_agent_erases_the_message_it_shows_after_an_undo_naming_a_later_index(
    lesson, sessions
):
    """Another program wrote an undo marker that names an index at or after its own
    place. It takes back no message (an undo hides only messages written before it), so
    every reader shows the message later written with that index, and so does the
    agent. The user erases that message as the agent shows it: the log erases that one,
    and no other."""
    play(lesson, sessions, TURN_A)      # messages 0 and 1
    marker = {"$marker": "undo", "skip": [2, 3], "at": "2026-01-01T00:00:00+00:00"}
    with (sessions / "quest-1.jsonl").open("ab") as file:
        file.write(json.dumps(marker).encode() + b"\n")
    play(lesson, sessions, TURN_SECRET)     # messages 2 and 3, shown
    agent, _, log = open_agent(lesson, sessions)
    with log:
        shown = [message.get("content") for message in agent.messages]
        assert shown[2:] == [SECRET, "Noted."], (
            "the test's own set-up: the agent shows the messages written after an undo "
            f"marker that names their indices; it shows {shown}")
        try:
            agent.erase(2)
        except lesson.EraseError as error:
            fail_in("09.4", "an undo marker written before messages 2 and 3 names them "
                    "(it can take back neither: an undo hides only messages written "
                    "before it), and the agent shows them at positions 2 and 3. The "
                    f"user erased position 2 ({SECRET!r}), and the log refused: "
                    f"{error}. The position is translated as the log's readers show "
                    "the messages")
    contents = [message.get("content") for message in resume(lesson, sessions)]
    if files_holding(sessions, "Ilse") or contents[2:] != [lesson.ERASED, "Noted."]:
        fail_in("09.4", "an undo marker written before messages 2 and 3 names them "
                "(it can take back neither: an undo hides only messages written "
                "before it), and the agent shows them at positions 2 and 3. The user "
                f"erased position 2 ({SECRET!r}); the log now shows {contents[2:]} "
                "there, and the words are in "
                f"{files_holding(sessions, 'Ilse') or 'no file'}. The position is "
                "translated as the log's readers show the messages")


@pytest.mark.task("09.4")
def test_the_agent_keeps_the_keys_of_its_messages_it_does_not_use_as_the_log_does(
    lesson, sessions
):
    """The keys of a message the agent does not use itself (a provider's "name",
    "reasoning", a field of another program) are kept by the log's erase in every line
    it leaves or scrubs: the agent's memory keeps them too, as a new process reads
    them. So is what the log's erase does not look for: the arguments of an erased
    tool call, which a later message quotes, are no text of the erased message."""
    play(lesson, sessions, TURN_A)
    extra = [{"role": "user", "content": "Ask the smith.", "name": "ann"},
             {"role": "assistant", "content": "The smith waves.",
              "reasoning": "The smith is friendly.", "x_trace": {"id": 7, "w": 1.0}}]
    arguments = '{"at": "the smith\'s forge"}'
    calls = [{"role": "assistant", "content": None, "tool_calls": [
                 {"id": "call_look", "type": "function",
                  "function": {"name": "look", "arguments": arguments}}]},
             {"role": "tool", "tool_call_id": "call_look",
              "content": f"Looked with {arguments}: the forge glows."}]
    with open(sessions / "quest-1.jsonl", "ab") as file:
        file.write(b"".join(json.dumps(m).encode() + b"\n" for m in extra + calls))
    play(lesson, sessions, TURN_SECRET)
    agent, _, log = open_agent(lesson, sessions)
    with log:
        agent.erase(6)      # the SECRET
    found = resume(lesson, sessions)
    assert found[2:4] == extra, (
        "the log's erase of message 6 should leave messages 2 and 3 with every key "
        f"they had ({extra}); a new process reads {found[2:4]}")
    assert agent.messages == found, (
        "after erase(6) the agent's memory should hold what the log holds, the keys "
        "it does not use itself included: a new process reads "
        f"{found[2:4]} as messages 2 and 3, the agent holds {agent.messages[2:4]}")
    agent, _, log = open_agent(lesson, sessions)
    with log:
        agent.erase(4)      # the call: its text is none, its arguments no text of it
    found = resume(lesson, sessions)
    assert agent.messages == found, (
        "after erase(4), a tool call whose arguments the tool's result (message 5) "
        "quotes, the agent's memory should hold what the log holds: the log's erase "
        "looks for the texts of the erased message (its content: here none), not for "
        f"its arguments, and a new process reads message 5 as {found[5]!r}; the agent "
        f"holds {agent.messages[5]!r}")


@pytest.mark.task("09.4")
def test_words_said_again_after_an_erase_stay_in_memory_as_in_the_log(lesson, sessions):
    """The user has a message erased, then says the same words again, on purpose, and
    later erases another message. The log's second erase looks for that message's
    texts only and keeps the words said again: so does the agent's memory, which
    holds what a new process reads. An erase forgets what it was asked to, once."""
    agent, _, log = open_agent(lesson, sessions, [
        say("Noted."), say("Noted again."), say("The elder nods.")])
    with log:
        agent.run(SECRET)
        agent.erase(0)
        agent.run(f"Write it down after all: {SECRET}")
        agent.run("Ask the elder about the cave.")
        agent.erase(4)
    found = resume(lesson, sessions)
    assert agent.messages == found, (
        f"the user erased message 0 ({SECRET!r}), then said the words again in "
        "message 2, then erased message 4 ('Ask the elder about the cave.'): the log "
        "keeps message 2 as it was said, and the agent's memory should too. A new "
        f"process reads message 2 as {found[2]!r}; the agent holds "
        f"{agent.messages[2]!r}. Each erase takes out the texts of the message it "
        "erases, not those of every message erased before")


@pytest.mark.task("09.4")
def test_the_agent_forgets_even_when_the_log_cannot_be_erased_everywhere(
    lesson, sessions, monkeypatch
):
    """The log's erase stops with EraseIncomplete (another log cannot be read, so the
    blob stays): the error reaches the caller, and the agent forgets all the same."""
    play(lesson, sessions, TURN_C, session_id="quest-2")
    agent, model, log = open_agent(lesson, sessions,
                                   [say(f"Noted: {LARGE_SECRET}"), say("Yes.")])
    with log:
        agent.run(LARGE_SECRET)
        failing_open(monkeypatch, "quest-2.jsonl")
        try:
            with raises(lesson.EraseIncomplete,
                        "the log's erase could not drop the blob (quest-2.jsonl "
                        "cannot be read), and Agent.erase said nothing"):
                agent.erase(0)
        finally:
            monkeypatch.undo()
        assert agent.messages[0] == {"role": "user", "content": lesson.ERASED}, (
            "the log's erase raised EraseIncomplete after it rewrote the log, and the "
            f"agent's memory still holds the message: {agent.messages[0]!r:.300}")
        agent.run("Shall we go on?")
    assert "Ilse" not in json.dumps(model.requests[-1]["messages"]), (
        "after an erase that raised EraseIncomplete, the next request still sent the "
        "words (the message, or the reply that repeated it)")


@pytest.mark.task("09.4")
@pytest.mark.parametrize("failure", ["an-io-error", "a-ctrl-c"])
def test_the_agent_forgets_even_when_the_log_cannot_be_erased_at_all(
    lesson, sessions, monkeypatch, failure
):
    """The log's erase fails before its new log takes the log's name (the rename
    refused: an I/O error, or a Ctrl-C just then). The error reaches the caller, and
    the agent forgets all the same: its next request sends the words nowhere, lesson
    08's summary of them included."""
    model = ScriptedModel([say(f"Noted: {SECRET}."), say("The elder nods."),
                           say("Yes.")],
                          summarise=lambda body: f"The user said: {SECRET}.")
    log = lesson.SessionLog(sessions, "quest-1")
    error = (KeyboardInterrupt() if failure == "a-ctrl-c"
             else OSError(5, "Input/output error (the test's)"))
    told = "a Ctrl-C" if failure == "a-ctrl-c" else "an I/O error"

    def refuse(*args, **kwargs):
        raise error

    with log:
        agent = lesson.Agent(model.client(), model=model.model, tools=Town(),
                             session=log)
        agent.run(SECRET)
        agent.run("Thank the elder.")
        assert agent.compact(), "the agent should compact the first turn by hand"
        for name in ("replace", "rename"):
            monkeypatch.setattr(os, name, refuse)
        try:
            with raises(type(error), "the log's erase could not rename its new log "
                        f"over the old one ({told}), and Agent.erase said nothing"):
                agent.erase(0)
        finally:
            monkeypatch.undo()
        sent = sent_on_going_on(agent, model)
        assert "Ilse" not in sent, (
            f"the log's erase was stopped ({told} as it renamed its new log) and the "
            "error reached the caller; then the next request still sent the words "
            "(the message, the reply that repeated them, or the summary of the "
            f"compacted turn that quotes them): {sent[:300]}. Whatever stopped the "
            "log's erase, a Ctrl-C included, the agent forgets, in its summary too")
        again = agent.erase(0)
    assert again == {"role": "user", "content": lesson.ERASED} and files_holding(
            sessions, "Ilse") == [], (
        "the first erase of message 0 failed in the log (its rename was refused), so "
        "the user asked again, the disk working now: that erase should take the "
        "words out of the log and return the tombstone; it returned "
        f"{again!r}, and these files still hold the words: "
        f"{files_holding(sessions, 'Ilse')}. A message the agent has forgotten may "
        "still be in the log: only the log says what it erased")


@pytest.mark.task("09.4")
@pytest.mark.parametrize("room", [0, 1], ids=["no-room-at-all", "room-for-one-line"])
def test_the_agent_forgets_even_when_its_pending_messages_cannot_be_written(
    lesson, sessions, monkeypatch, room
):
    """Lesson 07's pending messages: the user's note (with a key of its own) and a
    second note that quotes it were recorded and not written yet, and the disk is full
    when the user erases the first: writing what is pending fails (OSError), at once or
    after one line. The error may reach the caller, but the agent forgets all the same:
    the next request sends the words nowhere, and once the disk works again, no line
    written from then on holds anything of the erased note (its words, its name) but
    its tombstone. Asking again erases the log's copy, if the log got one, and the
    agent's memory then holds what the log holds."""
    path = sessions / "quest-1.jsonl"
    agent, model, log = open_agent(lesson, sessions, [say("Noted."), say("Yes.")])
    told = "at once" if room == 0 else "after writing one line (the erased note's)"
    real, let_through = os.write, [room]

    def full_disk(fd, data):
        if let_through[0] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device (the test's)")
        let_through[0] -= 1
        return real(fd, data)

    with log:
        agent.run("Ask the elder about the cave.")
        agent.record({"role": "user", "content": SECRET, "name": "ann"})
        agent.record({"role": "user", "content": f"To repeat: {SECRET}"})
        monkeypatch.setattr(os, "write", full_disk)
        try:
            agent.erase(2)
        except (OSError, lesson.EraseError):
            pass    # the error may reach the caller: the log could not be erased
        finally:
            monkeypatch.setattr(os, "write", real)
        size = path.stat().st_size
        sent = sent_on_going_on(agent, model)
        assert "Ilse" not in sent, (
            "two notes were pending (the second quotes the first) when the user erased "
            f"the first, and writing them failed {told}, the disk full; then the next "
            f"request still sent the words: {sent[:300]}. Whatever fails in the erase, "
            "writing the pending messages included, the agent forgets")
        later = path.read_bytes()[size:]
        assert b"Ilse" not in later and b'"ann"' not in later, (
            "two notes were pending (the second quotes the first) when the user erased "
            f"the first, and writing them failed {told}, the disk full; once the disk "
            "worked again, the agent wrote lines that hold the erased note's words or "
            f"its name ('ann'): {later.decode(errors='replace')[:300]}. A pending "
            "message is written as the agent holds it after the erase: the erased note "
            "as its tombstone (nothing of it but its role), the other with no quote")
        again = agent.erase(2)
    assert again == {"role": "user", "content": lesson.ERASED} and files_holding(
            sessions, "Ilse") == [], (
        f"the first erase of the pending note failed as it was written ({told}), so "
        "the user asked again, the disk working now: that erase should leave no copy "
        f"of the words and return the tombstone; it returned {again!r}, and these "
        f"files still hold the words: {files_holding(sessions, 'Ilse')}")
    resumed = resume(lesson, sessions)
    assert agent.messages == resumed, (
        f"after an erase whose pending writes failed ({told}) and a second erase, the "
        "agent's memory and its log hold different messages: in memory "
        f"{agent.messages[2:]}, in the log {resumed[2:]}. The pending buffer holds the "
        "very messages the agent remembers, so what is written is what it holds")


@pytest.mark.task("09.4")
def test_the_agent_forgets_even_when_its_log_cannot_be_opened_to_find_the_message(
    lesson, sessions, monkeypatch
):
    """The agent let go of its log after the turn, and the log cannot be opened again
    when the user erases a message (an I/O error, as a bad disk gives): the log's
    message cannot even be looked up. The error reaches the caller, and the agent
    forgets all the same; asked again, the disk working, the erase reaches the log."""
    play(lesson, sessions, TURN_A, (SECRET, [say(f"Noted: {SECRET}.")]))
    agent, model, log = open_agent(lesson, sessions, [say("Yes.")])
    log.close()
    with log:
        failing_open(monkeypatch, "quest-1.jsonl")
        try:
            with raises(OSError, "the log could not be opened (an I/O error), so the "
                        "message could not be found in it, and Agent.erase said "
                        "nothing"):
                agent.erase(2)
        finally:
            monkeypatch.undo()
        sent = sent_on_going_on(agent, model)
        assert "Ilse" not in sent, (
            "the log could not be opened to find message 2 in it (an I/O error), and "
            "the error reached the caller; then the next request still sent the words "
            f"(the message, or the reply that repeated it): {sent[:300]}. Whatever "
            "fails in the erase, looking the message up in the log included, the agent "
            "forgets")
        again = agent.erase(2)
    assert again == {"role": "user", "content": lesson.ERASED} and files_holding(
            sessions, "Ilse") == [], (
        "the first erase of message 2 failed (the log could not be opened), so the "
        "user asked again, the disk working now: that erase should take the words "
        f"out of the log and return the tombstone; it returned {again!r}, and these "
        f"files still hold the words: {files_holding(sessions, 'Ilse')}")


@pytest.mark.task("09.4")
def test_a_message_the_log_no_longer_holds_is_refused_in_words_naming_the_log(
    lesson, sessions
):
    """The agent let go of its log after two turns; then an older copy of the log, of
    the first turn only, was put back in its place (a backup restored). The user erases
    message 2 of the agent's four, which the log no longer holds: EraseError, in words
    that name the log and say how many messages it shows (the user sees four), and the
    agent forgets all the same."""
    path = sessions / "quest-1.jsonl"
    backup = sessions / "backup-of-quest-1"
    agent, model, log = open_agent(lesson, sessions, [
        say("The elder nods."), say(f"Noted: {SECRET}."), say("Yes.")])
    with log:
        agent.run("Ask the elder about the cave.")
        backup.write_bytes(path.read_bytes())
        agent.run(SECRET)
    os.replace(backup, path)
    with log:
        try:
            with raises(lesson.EraseError, "the log, restored from an older copy, "
                        "shows 2 messages, and erasing message 2 of the agent's 4 was "
                        "not refused with EraseError") as raised:
                agent.erase(2)
        except IndexError as error:
            pytest.fail("the log, restored from an older copy, shows 2 messages, and "
                        f"erasing message 2 of the agent's 4 raised {error!r}; "
                        "expected EraseError, saying that the log does not hold it",
                        pytrace=False)
        sent = sent_on_going_on(agent, model)
    assert str(path) in str(raised.value) and 2 in numbers_in(raised.value, path), (
        "the log, restored from an older copy, shows 2 messages and the agent 4; "
        "erasing message 2 was refused in words that do not name the log and say how "
        "many messages it shows, so the user, who sees 4, cannot tell which file lost "
        f"it: {raised.value}")
    assert "Ilse" not in sent, (
        "the log could not erase message 2 (it no longer holds it), and the next "
        f"request still sent the words: {sent[:300]}. Whatever fails in the log's "
        "erase, the agent forgets")


@pytest.mark.task("09.4")
def test_an_agent_forgets_a_message_another_program_erased_first(lesson, sessions):
    """The agent read the session and let go of its log; another program then erased
    a message from the log. Asked to erase the same message, the agent (its log opened
    again) finds the log's work done, and still forgets the words it holds."""
    play(lesson, sessions, TURN_A, (SECRET, [say(f"Noted: {SECRET}.")]))
    agent, model, log = open_agent(lesson, sessions, [say("Yes.")])
    log.close()
    with lesson.SessionLog(sessions, "quest-1") as other:
        other.erase(2)
    with log:
        tombstone = agent.erase(2)
        kept = json.dumps(agent.messages)
        agent.run("Shall we go on?")
    if tombstone != {"role": "user", "content": lesson.ERASED} or "Ilse" in kept:
        fail_in("09.4", "another program erased message 2 from the log before the "
                "agent was asked to erase it: the log had nothing left to do, but the "
                "agent still held the words and should have forgotten them. It "
                f"returned {tombstone!r} and kept {kept}")
    assert "Ilse" not in json.dumps(model.requests[-1]["messages"]), (
        "the next request sent the words of a message erased first by another program, "
        "then by the agent")


@pytest.mark.task("09.4")
def test_an_agent_without_a_session_forgets_too(lesson):
    """An agent that keeps no log erases from its memory alone, and refuses a position
    its conversation does not have."""
    short = "Ilse, Elm 12"      # exactly as long as the shortest text looked for
    assert len(short) == lesson.QUOTE_MIN_CHARS
    model = ScriptedModel([say(f"Noted: {short}."), say("Yes.")])
    agent = lesson.Agent(model.client(), model=model.model, tools=Town())
    agent.run(short)
    before = json.loads(json.dumps(agent.messages))
    for position in (2, 7, -1):
        try:
            with raises(lesson.EraseError, f"erasing message {position} of a "
                        "conversation of two was not refused with EraseError"
                        ) as raised:
                agent.erase(position)
        except IndexError as error:
            pytest.fail(f"erasing message {position} of a conversation of two raised "
                        f"{error!r}; expected EraseError", pytrace=False)
        assert agent.messages == before, (
            f"a refused erase of message {position} changed the conversation")
        assert "2" in str(raised.value), (
            f"erasing message {position} of a conversation of 2 was refused, in words "
            "that do not say how many messages the conversation holds, so the caller "
            f"cannot tell what would be right: {raised.value}")
        assert position in numbers_in(raised.value), (
            f"erasing message {position} of a conversation of 2 was refused, in words "
            f"that do not say which message was asked for ({position}, counted from 0 "
            "as the position given), so a user who asked for several cannot tell "
            f"which one was refused: {raised.value}")
    assert agent.erase(0) == {"role": "user", "content": lesson.ERASED}
    agent.run("Shall we go on?")
    assert "Ilse" not in json.dumps(model.requests[-1]["messages"]), (
        "an agent without a session still sent the erased words (in the reply that "
        "repeated them: a text of 12 characters is long enough to be looked for)")


@pytest.mark.task("09.4")
def test_an_agent_without_a_session_takes_the_words_out_of_its_summary(lesson):
    """An agent that keeps no log compacts all the same (lesson 08): erasing a message
    its summary quotes takes the words out of the summary it sends, as with a log."""
    model = ScriptedModel([say("Noted."), say("The elder nods."), say("Yes.")],
                          summarise=lambda body: f"The user said: {SECRET}.")
    agent = lesson.Agent(model.client(), model=model.model, tools=Town())
    agent.run(SECRET)
    agent.run("Thank the elder.")
    assert agent.compact(), "the agent should compact the first turn by hand"
    agent.erase(0)
    sent = sent_on_going_on(agent, model)
    assert "Ilse" not in sent, (
        "an agent without a session erased the message its compaction summary quotes, "
        f"and the next request still sent the words, in the summary: {sent[:300]}. "
        "The summary loses them in memory, with a log or without")


@pytest.mark.task("09.4")
def test_an_agent_refusing_a_position_writes_nothing(lesson, sessions):
    """A position the conversation does not have is refused before anything is done:
    a note recorded and not written yet (lesson 07) stays unwritten, free to take
    back, and the log keeps its bytes."""
    path = sessions / "quest-1.jsonl"
    agent, _, log = open_agent(lesson, sessions, [say("Noted.")])
    with log:
        agent.run(TURN_A[0])
        agent.record({"role": "user", "content": SECRET})
        before = path.read_bytes()
        for position in (3, -1):
            with raises(lesson.EraseError, f"erasing message {position} of a "
                        "conversation of 3 was not refused with EraseError") as raised:
                agent.erase(position)
            assert path.read_bytes() == before, (
                f"a refused erase of message {position} changed the log: the note "
                "recorded and not written yet is in it now, where no undo takes it "
                "back for free")
            assert 3 in numbers_in(raised.value, path), (
                f"erasing message {position} of a conversation of 3 (the last one not "
                "written yet) was refused, in words that do not say how many messages "
                f"the conversation holds: {raised.value}")
            assert position in numbers_in(raised.value, path), (
                f"erasing message {position} of a conversation of 3 was refused, in "
                f"words that do not say which message was asked for ({position}, "
                f"counted from 0 as the position given): {raised.value}")


@pytest.mark.task("09.4")
def test_the_agent_takes_the_words_out_of_the_messages_before_the_erased_one(lesson):
    """The model's reply repeated the user's words, and the user erases the reply: the
    user's own message before it holds the same words, and loses them too, in the
    agent's memory as in the log."""
    model = ScriptedModel([say(SECRET), say("Yes.")])
    agent = lesson.Agent(model.client(), model=model.model, tools=Town())
    agent.run(f"{SECRET}. Please write to her.")
    agent.erase(1)
    agent.run("Shall we go on?")
    sent = [m.get("content") for m in model.requests[-1]["messages"]]
    assert sent[0] == f"{lesson.ERASED}. Please write to her.", (
        "after the model's reply (the words of SECRET) was erased, the next request "
        f"sent the user's message before it as {sent[0]!r}: it quotes the erased text, "
        "and loses the quote like every other message, those before the erased one "
        "as well as those after")


@pytest.mark.task("09.4")
def test_the_agent_looks_for_every_text_of_a_message_of_several_parts(
    lesson, sessions
):
    """A message whose content is a list of parts holds several texts, and a reply may
    repeat any of them: after the erase, the next request holds none of them, and the
    agent's memory keeps what the log keeps."""
    parts = [{"type": "text", "text": "About my sister, for the letter:"},
             {"type": "text", "text": SECRET}]
    agent, model, log = open_agent(lesson, sessions,
                                   [say(f"Noted: {SECRET}."), say("Yes.")])
    with log:
        agent.record({"role": "user", "content": parts})
        agent.run("Please write to her.")
        agent.erase(0)
        sent = sent_on_going_on(agent, model)
    assert "Ilse" not in sent, (
        "the erased message held two texts (its content was a list of two parts), "
        "and the model's reply repeated the second; after the erase the next request "
        f"still sent it: {sent[:300]}. Every text of the message is looked for, not "
        "only the first")
    assert agent.messages == resume(lesson, sessions), (
        "after the erase of a message of two parts, the agent's memory and its log "
        "hold different messages")


@pytest.mark.task("09.3")
@pytest.mark.task("09.4")
def test_the_summary_loses_the_words_of_a_message_erased_after_it(lesson, sessions):
    """The user repeats, after a compaction, words the summary already quotes: erasing
    that later message takes every part of its words out of the summary too, though
    the summary was made before it."""
    model = ScriptedModel([say("Noted."), say("The elder nods."), say("Yes."),
                           say("Yes.")],
                          summarise=lambda body: f"The user said: {SECRET}.")
    with lesson.SessionLog(sessions, "quest-1") as log:
        agent = lesson.Agent(model.client(), model=model.model, tools=Town(),
                             session=log)
        agent.run(SECRET)
        agent.run("Thank the elder.")
        assert agent.compact(), "the agent should compact the first turn by hand"
        agent.run(f"Again: {SECRET}")
        position = len(agent.messages) - 2
        agent.erase(position)
        sent = sent_on_going_on(agent, model)
    assert "Ilse" not in sent, (
        f"message {position} (the user's words again, after the compaction) was "
        "erased, and the summary the agent keeps, made before it, quotes a part of "
        f"them: the next request still sent it: {sent[:300]}. The summary loses any "
        "part of the erased words, whichever message was erased")


@pytest.mark.task("09.3")
@pytest.mark.task("09.4")
def test_the_summary_loses_every_text_of_a_message_of_several_parts(lesson, sessions):
    """Lesson 08's summary may quote any text of a message of several parts: after the
    erase, the next request sends none of them, in the summary either."""
    parts = [{"type": "text", "text": "About my sister, for the letter:"},
             {"type": "text", "text": SECRET}]
    model = ScriptedModel([say("Noted."), say("The elder nods."), say("Yes.")],
                          summarise=lambda body: f"The user wrote: {SECRET}.")
    with lesson.SessionLog(sessions, "quest-1") as log:
        agent = lesson.Agent(model.client(), model=model.model, tools=Town(),
                             session=log)
        agent.record({"role": "user", "content": parts})
        agent.run("Please write to her.")
        agent.run("Thank the elder.")
        assert agent.compact(), "the agent should compact the first turn by hand"
        agent.erase(0)
        sent = sent_on_going_on(agent, model)
    assert "Ilse" not in sent, (
        "the erased message held two texts (a list of two parts) and the compaction "
        "summary quoted the second: the request after the erase still sent it, in "
        f"the summary the agent keeps: {sent[:300]}. Every text of the message is "
        "looked for, not only the first")


@pytest.mark.task("09.4")
def test_the_agent_keeps_the_other_messages_when_a_short_one_is_erased(
    lesson, sessions
):
    """A text shorter than QUOTE_MIN_CHARS characters cannot be told from other words:
    the log's erase does not look for it elsewhere, and neither does the agent's
    memory. The reply that happens to hold the same words is sent again as it was.
    Characters are counted, not the bytes UTF-8 takes, and each text of a message of
    several parts on its own."""
    model = ScriptedModel([say("Thank you, traveller."), say("Onwards.")])
    agent = lesson.Agent(model.client(), model=model.model, tools=Town())
    agent.run("Thank you")
    agent.erase(0)
    agent.run("Go on.")
    sent = [m.get("content") for m in model.requests[-1]["messages"]]
    assert "Thank you, traveller." in sent, (
        "after erasing the user's 'Thank you' (9 characters: too short to be looked "
        "for in other messages, as the log's erase does not), the agent sent the "
        f"model's reply changed: {sent}. The agent's memory and the log must keep the "
        "same messages")
    reply = "Thank you, traveller: Ilse, Århus it is."
    cases = [
        ("Ilse, Århus", "'Ilse, Århus' (11 characters, though 12 bytes in UTF-8)"),
        ([{"type": "text", "text": "Thank you"},
          {"type": "text", "text": "Ilse, Århus"}],
         "a message of two parts, 'Thank you' and 'Ilse, Århus' (9 and 11 "
         "characters, 20 together)"),
    ]
    for number, (content, which) in enumerate(cases, start=1):
        session_id = f"short-{number}"
        agent, model, log = open_agent(lesson, sessions, [say(reply), say("Onwards.")],
                                       session_id=session_id)
        with log:
            agent.record({"role": "user", "content": content})
            agent.run("Is that so?")
            agent.erase(0)
            agent.run("Go on.")
        sent = [m.get("content") for m in model.requests[-1]["messages"]]
        assert reply in sent and agent.messages == resume(
                lesson, sessions, session_id), (
            f"after erasing {which}, too short to be looked for in other messages "
            "(the log's erase leaves the reply that holds the same words as it was), "
            f"the agent sent the model's reply changed, or kept in memory what its "
            f"log does not: sent {sent}. Each text is measured on its own, in "
            "characters")


@pytest.mark.task("09.4")
def test_the_summary_keeps_what_the_log_keeps_when_a_short_message_is_erased(
    lesson, sessions
):
    """A text shorter than QUOTE_MIN_CHARS is not looked for elsewhere: erasing such
    a message leaves the log's compaction summary as it was, and the summary the agent
    sends with every request keeps the same words."""
    summary = "The user said: Thank you. The elder nods."
    model = ScriptedModel([say("Noted."), say("The elder nods."), say("Yes."),
                           say("Onwards.")], summarise=lambda body: summary)
    with lesson.SessionLog(sessions, "quest-1") as log:
        agent = lesson.Agent(model.client(), model=model.model, tools=Town(),
                             session=log)
        agent.run("Thank you")
        agent.run("Thank the elder.")
        assert agent.compact(), "the agent should compact the first turn by hand"
        agent.run("Thank you")
        position = len(agent.messages) - 2
        agent.erase(position)
        agent.run("Go on.")
    kept = [line.get("summary") for line in lines_of(sessions / "quest-1.jsonl")
            if line.get("$marker") == "compaction"]
    sent = json.dumps(model.requests[-1]["messages"], ensure_ascii=False)
    assert kept == [summary] and summary in sent, (
        f"message {position}, 'Thank you' (9 characters: too short to be looked for "
        "elsewhere), was erased after a compaction whose summary holds the same words: "
        f"the log's compaction marker should keep its summary as it was ({kept}), and "
        "the summary the agent sends should keep the same words; the request sent: "
        f"{sent[:400]}")


# --- 09.5: collect --------------------------------------------------------------------


class BlobWriter:
    """blob_writer.py in another process: stores a blob, then waits before its line."""

    def __init__(self, lesson, sessions, session_id, text):
        self.text_file = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
        self.text_file.write(text)
        self.text_file.close()
        self.errors = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [sys.executable, str(BLOB_WRITER), lesson.__file__, str(sessions),
             session_id, self.text_file.name],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errors,
            text=True)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.put(line.strip())
        self.lines.put(None)

    def expect(self, word):
        try:
            line = self.lines.get(timeout=HANG)
        except queue.Empty:
            line = f"nothing for {HANG} s"
        if line != word:
            self.stop()
            self.errors.seek(0)
            errors = self.errors.read().decode(errors="replace")
            if "NotImplementedError: task " in errors:
                raise NotImplementedError(errors.rsplit("NotImplementedError: ", 1)[1])
            raise AssertionError(f"the writer process should have said {word!r}, it "
                                 f"said {line!r}. Its errors:\n{errors[-2000:]}")

    def go(self):
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def stop(self):
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.process.stdin.close()
        os.unlink(self.text_file.name)


@pytest.fixture
def blob_writer(lesson, sessions):
    started = []

    def start(session_id, text):
        writer = BlobWriter(lesson, sessions, session_id, text)
        started.append(writer)
        return writer

    yield start
    for writer in started:
        writer.stop()


@pytest.mark.key
@pytest.mark.task("09.5")
def test_collect_removes_the_blobs_no_log_refers_to_once_the_grace_is_over(
    lesson, sessions
):
    """collect_blobs() removes a blob no log refers to and nobody touched within the
    grace period; it keeps every blob a log refers to, and an unreferenced young one."""
    play(lesson, sessions, (LARGE_SECRET, [say("Noted.")]))
    [kept] = blob_names(sessions)
    age(sessions / "blobs" / kept, 2)
    old = lesson.SessionLog(sessions, "scratch").store_blob(b"old " * 2000)
    young = lesson.SessionLog(sessions, "scratch").store_blob(b"young " * 2000)
    age(sessions / "blobs" / old, 2)

    removed = lesson.collect_blobs(sessions)

    assert removed == [old], (
        f"collect_blobs() should remove only the old unreferenced blob {old[:12]}..., "
        f"it removed {abbreviated(removed)}")
    assert sorted(blob_names(sessions)) == sorted([kept, young]), (
        "a blob a log refers to stays however old; an unreferenced one stays during "
        "the grace period (a writer may be about to point to it)")
    assert resume(lesson, sessions)[0]["content"] == LARGE_SECRET
    edge = lesson.SessionLog(sessions, "scratch").store_blob(b"edge " * 2000)
    os.utime(sessions / "blobs" / edge, (time.time() - 150,) * 2)
    removed = lesson.collect_blobs(sessions, grace=100)
    assert removed == [edge], (
        f"with a grace of 100 seconds, the unreferenced blob {edge[:12]}... last "
        "touched 150 seconds ago is past it and goes, the one touched just now stays; "
        f"collect_blobs() removed {abbreviated(removed)}")
    assert lesson.collect_blobs(sessions, grace=0) == [young], (
        "with no grace period, the young unreferenced blob goes too")


@pytest.mark.task("09.5")
def test_collect_removes_nothing_when_a_file_cannot_be_read(
    lesson, sessions, monkeypatch
):
    """A log that cannot be read (EIO) may refer to any blob: collect_blobs() raises
    OSError naming it, and removes no blob."""
    play(lesson, sessions, TURN_C, session_id="quest-2")
    old = lesson.SessionLog(sessions, "scratch").store_blob(b"old " * 2000)
    age(sessions / "blobs" / old, 2)
    failing_open(monkeypatch, "quest-2.jsonl")
    try:
        with raises(OSError, "quest-2.jsonl could not be read, and collect_blobs() "
                    "said nothing: what that log refers to is unknown, and the "
                    "caller must learn that nothing could be collected") as raised:
            lesson.collect_blobs(sessions)
    finally:
        monkeypatch.undo()
    assert "quest-2.jsonl" in str(raised.value), (
        f"the error should name the file that could not be read: {raised.value}")
    assert old in blob_names(sessions), (
        "a log could not be read, so any blob may be one it refers to: collect_blobs() "
        f"should remove none, and it removed {old[:12]}...")


@pytest.mark.task("09.5")
def test_collect_lets_an_error_listing_the_blobs_reach_the_caller(
    lesson, sessions, monkeypatch
):
    """blobs/ cannot be listed (permission denied, say): what it holds is unknown, and
    an old blob nobody refers to may be there. collect_blobs() raises the error rather
    than answering that it removed nothing, as if there were nothing to collect."""
    old = lesson.SessionLog(sessions, "scratch").store_blob(b"old " * 2000)
    age(sessions / "blobs" / old, 2)
    blobs = os.fspath(sessions / "blobs")

    def refusing(real):
        def list_(path=".", *args, **kwargs):
            if not isinstance(path, int) and os.fspath(path).rstrip(os.sep) == blobs:
                raise PermissionError(13, "Permission denied (the test's)", blobs)
            return real(path, *args, **kwargs)
        return list_

    for name in ("listdir", "scandir"):
        monkeypatch.setattr(os, name, refusing(getattr(os, name)))
    try:
        found = lesson.collect_blobs(sessions)
    except OSError:
        found = None        # the caller heard it
    finally:
        monkeypatch.undo()
    assert found is None, (
        f"blobs/ could not be listed (permission denied), and collect_blobs() "
        f"returned {found!r}, as if there were nothing to collect; an old blob nobody "
        "refers to is still there, with whatever words it holds. An error that leaves "
        "what blobs/ holds unknown reaches the caller")


@pytest.mark.task("09.5")
def test_collect_removes_what_crashed_blob_writes_left(lesson, sessions):
    """Half a blob (a temporary file a crashed store left) is removed once it is older
    than the grace period."""
    blobs = sessions / "blobs"
    blobs.mkdir(mode=0o700)
    half = blobs / (".%s.x1y2.tmp" % ("ab" * 32))
    half.write_text(LARGE_SECRET[:500])
    recent = blobs / (".%s.q9.tmp" % ("cd" * 32))
    recent.write_text("being written")
    notes = blobs / "README"
    notes.write_text("not this store's")
    odd = blobs / ".notes.collected"        # set aside, but no blob's name
    odd.write_text("no blob")
    # Left by a crashed write of another kind (an older version of the store, say)
    other = blobs / (".%s.x1y2.part" % ("ef" * 32))
    other.write_text(LARGE_SECRET[:500])
    # .collected in its name, not at its end: no blob set aside, whatever it holds
    torn = blobs / (".%s.collected.part" % ("12" * 32))
    torn.write_text(LARGE_SECRET[:500])
    age(torn, 2)
    age(half, 2)
    age(notes, 2)
    age(odd, 2)
    age(other, 2)
    removed = lesson.collect_blobs(sessions)
    assert not half.exists(), "an old temporary file in blobs/ should be removed"
    assert not odd.exists() and not (blobs / "notes").exists(), (
        "an old leftover named like a set-aside blob, .notes.collected, whose name is "
        "no blob's, should be removed and nothing else: after the collection blobs/ "
        f"holds {sorted(p.name for p in blobs.iterdir())}")
    assert not other.exists(), (
        f"an old leftover, {other.name[:5]}...{other.name[-10:]}, is still in blobs/: "
        "every file of blobs/ whose name starts with a dot is what a crashed write "
        "left, whatever its name ends with, and goes once it is old and nobody's")
    assert not torn.exists() and not (blobs / ("12" * 32)).exists() and (
            "12" * 32) not in removed, (
        "an old leftover named .<a blob's name>.collected.part (.collected in its "
        "name, not at its end) is no blob set aside, which ends with .collected: it "
        "should "
        "be removed as a leftover, never given the blob's name (and then collected as "
        f"a blob); collect_blobs() returned {abbreviated(removed)} and blobs/ holds "
        f"{sorted(p.name[:14] for p in blobs.iterdir())}")
    assert recent.exists(), "a temporary file being written right now must stay"
    assert notes.exists(), (
        "a file of blobs/ that is no blob and no leftover of a crashed write (its name "
        "does not start with a dot) is not this store's: it stays")
    assert removed == [], (
        "collect_blobs() returns the blobs it removed; what crashed writes left is no "
        f"blob, yet it returned {removed}")


@pytest.mark.task("09.5")
def test_a_leftover_named_almost_like_a_set_aside_blob_gets_no_name(lesson, sessions):
    """Only a blob's name (64 lowercase hexadecimal digits) makes a leftover a blob set
    aside. A leftover whose part after the dot has a blob name's length, or starts with
    one, or is one in capitals, is only what a crashed write left: it goes, and no name
    without a dot is given to it (such a file would be no blob, kept for good, with
    whatever words it holds)."""
    blobs = sessions / "blobs"
    blobs.mkdir(mode=0o700)
    data = LARGE_SECRET.encode()
    digest = hashlib.sha256(data).hexdigest()
    names = ["Z" * 64, digest.upper(), digest + "0"]
    for name in names:
        leftover = blobs / f".{name}.a1b2c3.collected"
        leftover.write_bytes(data)
        age(leftover, 2)
    removed = lesson.collect_blobs(sessions)
    left = blob_names(sessions)
    assert left == [], (
        "three old leftovers named like blobs set aside, but whose part after the dot "
        "is no blob's name (64 capitals, a hash in capitals, a hash and one more "
        f"digit), should all be removed and none given a name; blobs/ holds {left}: "
        "only a name of 64 lowercase hexadecimal digits is a blob's")
    assert removed == [], (
        f"collect_blobs() returned {abbreviated(removed)}, but no blob was there, only "
        "leftovers of crashed writes, which it removes without naming them")


@pytest.mark.task("09.5")
def test_with_no_grace_collect_clears_a_young_leftover_nobody_holds(lesson, sessions):
    """The grace period says which leftovers are old too: with none, half a blob a
    crashed write left a moment ago (a person's words) goes at once, as no writer
    holds it; a blob being written, held by its writer, stays."""
    blobs = sessions / "blobs"
    blobs.mkdir(mode=0o700)
    crashed = blobs / (".%s.x1y2.tmp" % ("ab" * 32))
    crashed.write_text(LARGE_SECRET[:500])
    fd, held = tempfile.mkstemp(dir=blobs, prefix=".%s." % ("cd" * 32), suffix=".tmp")
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)     # held by its writer, as store_blob holds it
        os.write(fd, b"being written")
        removed = lesson.collect_blobs(sessions, grace=0)
        assert not crashed.exists(), (
            "with no grace period, half a blob a crashed write left a moment ago, held "
            "by nobody, should go: it is old enough, as every blob nobody refers to is")
        assert os.path.exists(held), (
            "a blob being written, held by its writer, must stay, grace or none")
    finally:
        os.close(fd)
    assert removed == [], f"collect_blobs() removed {removed}, no blob was there"


@pytest.mark.task("09.5")
def test_collect_judges_a_blob_a_crashed_collector_set_aside_like_any_other(
    lesson, sessions
):
    """A collector that crashed while removing a blob left it set aside, under a dot,
    the blob's name and ".collected", with or without a collector's own part between
    (.<name>.collected, .<name>.<random>.collected, .<name>.<pid>.<random>.collected).
    The next collection judges it like
    any other blob: kept under its name if a log refers to it, removed (and named) if
    none does."""
    play(lesson, sessions, (LARGE_SECRET, [say("Noted.")]))
    [kept] = blob_names(sessions)
    blobs = sessions / "blobs"
    # A collector's own part may hold dots of its own (a process id, then a random
    # part): the blob's name is what follows the first dot, up to the next
    for mine, random in (("", "9c41e2d07b3a."), ("5f0a8e61d2c4.", ""),
                         ("4242.9c41e2d0.", "")):
        with lesson.SessionLog(sessions, "scratch") as other:
            lost = other.store_blob(b"nobody's " * 2000)
        asides = (f".{kept}.{mine}collected", f".{lost}.{random}collected")
        for name, aside in zip((kept, lost), asides):
            (blobs / name).rename(blobs / aside)
            age(blobs / aside, 2)
        planted = f"a crashed collector left {asides[0][:14]}...{asides[0][-22:]} (a " \
            f"log refers to it) and {asides[1][:14]}...{asides[1][-22:]} (none does)"
        removed = lesson.collect_blobs(sessions)
        assert removed == [lost], (
            f"{planted}: the one no log refers to is old and nobody's, and this "
            "collection should remove it and name it, like any other; collect_blobs() "
            f"returned {abbreviated(removed)} and blobs/ holds "
            f"{sorted(p.name[:14] for p in blobs.iterdir())}")
        assert blob_names(sessions) == [kept], (
            f"{planted}: the one a log refers to should be back under its name; "
            f"blobs/ holds {sorted(p.name[:14] for p in blobs.iterdir())}")
    assert resume(lesson, sessions)[0]["content"] == LARGE_SECRET


def a_blob_set_aside_by_a_crashed_collector(lesson, sessions):
    """Play a paste, then set its blob aside as a collector killed in the middle leaves
    it (a log still refers to it); the blob's name."""
    play(lesson, sessions, (LARGE_SECRET, [say("Noted.")]))
    [blob] = blob_names(sessions)
    aside = sessions / "blobs" / f".{blob}.collected"
    os.rename(sessions / "blobs" / blob, aside)
    age(aside, 2)
    return blob


def refuse_to_give_back(monkeypatch, blob, failure="io-error", once=False):
    """Make every way of giving `blob` its name back (os.link, rename, replace) fail,
    with an I/O error or a Ctrl-C, every time or `once`; the failures made, for the
    test to see that its set-up was met."""
    failed = []

    def refusing(real):
        def give_back(source, target, *args, **kwargs):
            if Path(target).name == blob and not (once and failed):
                failed.append(True)
                if failure == "ctrl-c":
                    raise KeyboardInterrupt("the test's Ctrl-C")
                raise OSError(5, "Input/output error (the test's)", str(target))
            return real(source, target, *args, **kwargs)
        return give_back

    for name in ("link", "rename", "replace"):
        monkeypatch.setattr(os, name, refusing(getattr(os, name)))
    return failed


@pytest.mark.task("09.5")
@pytest.mark.parametrize("failure", ["io-error", "ctrl-c"])
def test_a_collection_that_fails_on_a_set_aside_blob_leaves_it_to_the_next(
    lesson, sessions, monkeypatch, failure
):
    """A crashed collector left a blob set aside that a log refers to. The next
    collection fails to give it its name back (an I/O error, or a Ctrl-C, which is a
    KeyboardInterrupt and no Exception): it may raise, but once it is over it holds
    nothing, so a later collection of the same process gives the blob its name back,
    and the log loads."""
    blob = a_blob_set_aside_by_a_crashed_collector(lesson, sessions)
    failed = refuse_to_give_back(monkeypatch, blob, failure, once=True)
    try:
        lesson.collect_blobs(sessions)
    except (OSError, KeyboardInterrupt):
        pass        # the failure may reach the caller
    finally:
        monkeypatch.undo()
    assert failed, "the test's own set-up: the blob set aside was never given back"
    lesson.collect_blobs(sessions)
    stop = "a Ctrl-C" if failure == "ctrl-c" else "an I/O error"
    assert blob_names(sessions) == [blob], (
        f"a collection failed ({stop}) while it gave a set-aside blob its name "
        "back; a later collection left it set aside, blobs/ holds "
        f"{[p.name[:14] for p in (sessions / 'blobs').iterdir()]}: the failed "
        "collection still holds the leftover, so no collection can clear it, and the "
        "log that refers to the blob no longer loads. A collection that fails holds "
        "nothing once it is over")
    assert resume(lesson, sessions)[0]["content"] == LARGE_SECRET


@pytest.mark.task("09.5")
def test_a_collection_that_cannot_give_a_set_aside_blob_back_says_so(
    lesson, sessions, monkeypatch
):
    """A crashed collector left a blob set aside that a log refers to, and giving it its
    name back fails (an I/O error). The collection may not answer as if all went well:
    a collect_blobs() that returns has every blob set aside that a log refers to back
    under its name; one that cannot do that raises, and the caller learns that the log
    no longer loads."""
    blob = a_blob_set_aside_by_a_crashed_collector(lesson, sessions)
    refuse_to_give_back(monkeypatch, blob)
    try:
        removed = lesson.collect_blobs(sessions)
    except OSError:
        return      # the failure reached the caller
    finally:
        monkeypatch.undo()
    assert blob_names(sessions) == [blob], (
        "giving a set-aside blob that a log refers to its name back failed (an I/O "
        f"error), and collect_blobs() returned {abbreviated(removed)} as if all went "
        "well; blobs/ holds "
        f"{[p.name[:14] for p in (sessions / 'blobs').iterdir()]}: the blob is still "
        "set aside, so the log that refers to it no longer loads, and nobody was "
        "told. An error that leaves a blob away from its name reaches the caller")


@pytest.mark.task("09.5")
def test_a_blob_set_aside_never_takes_the_name_of_one_a_writer_stored_since(
    lesson, sessions, blob_writer
):
    """Real processes: a crashed collector left a blob set aside, and no log refers to
    it. A writer in another process then stores the same bytes anew (the name was
    free) and stops before its line. The collection clears the leftover, and the
    writer's blob stays: its log loads when it is done."""
    play(lesson, sessions, (LARGE_SECRET, [say("Noted.")]))
    [blob] = blob_names(sessions)
    (sessions / "quest-1.jsonl").unlink()      # no log refers to it any more
    aside = sessions / "blobs" / f".{blob}.collected"
    os.rename(sessions / "blobs" / blob, aside)
    age(aside, 2)
    writer = blob_writer("quest-2", LARGE_SECRET)
    writer.expect("stored")
    assert blob_names(sessions) == sorted([blob, aside.name]), (
        "the test's own set-up: the writer stored the blob anew beside the set-aside "
        "one")
    lesson.collect_blobs(sessions)
    writer.go()
    writer.expect("done")
    assert not aside.exists(), "the set-aside blob, old and held by nobody, should go"
    try:
        messages = resume(lesson, sessions, "quest-2")
    except lesson.BlobError as error:
        pytest.fail("a writer stored its blob anew while a crashed collector's copy "
                    "of it was set aside; after the collection, the writer's blob is "
                    "gone and its log no longer loads (the set-aside copy, old and "
                    f"nobody's, took the name and was removed?): {error}",
                    pytrace=False)
    assert messages[0]["content"] == LARGE_SECRET


@pytest.mark.task("09.5")
def test_a_blob_set_aside_never_takes_a_name_a_writer_fills_after_it_was_looked_at(
    lesson, sessions, blob_writer, monkeypatch
):
    """Real processes: a crashed collector left a blob set aside, and no log refers to
    it. The collection looks whether the blob's name is free, and just after that
    look a writer in another process stores the same bytes anew under it and stops
    before its line. The writer's blob stays: its log loads when it is done."""
    play(lesson, sessions, (LARGE_SECRET, [say("Noted.")]))
    [blob] = blob_names(sessions)
    (sessions / "quest-1.jsonl").unlink()      # no log refers to it any more
    aside = sessions / "blobs" / f".{blob}.collected"
    os.rename(sessions / "blobs" / blob, aside)
    age(aside, 2)

    def a_writer_stores_it_anew():
        writer = blob_writer("quest-2", LARGE_SECRET)
        writer.expect("stored")
        return writer

    met = at_first_look(sessions / "blobs" / blob, monkeypatch, a_writer_stores_it_anew)
    try:
        lesson.collect_blobs(sessions)
    finally:
        monkeypatch.undo()
    writer = met[0] if met and met[0] else a_writer_stores_it_anew()
    writer.go()
    writer.expect("done")
    try:
        messages = resume(lesson, sessions, "quest-2")
    except lesson.BlobError as error:
        pytest.fail("a writer stored its blob anew just after the collection looked at "
                    "the blob's name and found it free (a crashed collector's copy was "
                    "set aside); after the collection, the writer's blob is gone and "
                    "its log no longer loads. A look, then a rename, leaves a moment "
                    "in between: the old copy took the name over the writer's, and "
                    f"was removed as nobody's: {error}", pytrace=False)
    assert messages[0]["content"] == LARGE_SECRET


@pytest.mark.task("09.5")
def test_collect_names_the_blobs_it_removed_in_name_order(lesson, sessions):
    """Several old blobs no log refers to are all removed, and named in name order."""
    names = []
    with lesson.SessionLog(sessions, "scratch") as other:
        for word in ("rope", "torch", "lamp", "map", "coin", "key"):
            names.append(other.store_blob(f"a {word} ".encode() * 2000))
    for name in names:
        age(sessions / "blobs" / name, 2)
    removed = lesson.collect_blobs(sessions)
    assert removed == sorted(names), (
        "collect_blobs() should return the names it removed sorted, it returned "
        f"{abbreviated(removed, 8)}")


def discard_meanwhile(lesson, monkeypatch, path, fd, wrapper, names, caught):
    """discard_claimed(path, fd) while each of os's `names` runs through `wrapper`
    (another process's step, a failing disk): its answer, or the `caught` error it
    raised. The claim's descriptor is closed either way."""
    with monkeypatch.context() as patch:
        for name in names:
            patch.setattr(os, name, wrapper(getattr(os, name)))
        try:
            return lesson.discard_claimed(path, fd)
        except caught as error:
            return error
        finally:
            os.close(fd)


def claimed_old_blob(lesson, sessions, content):
    """A blob of `content`, two days old, that no log refers to, claimed by this test
    with claim_blob(): (its path, the claim's descriptor)."""
    with lesson.SessionLog(sessions, "scratch") as other:
        blob = other.store_blob(content)
    path = sessions / "blobs" / blob
    age(path, 2)
    fd = lesson.claim_blob(path, touched_after=time.time() - DAY)
    assert fd is not None, "the test's own set-up: claim_blob() claims an old blob"
    return path, fd


@pytest.mark.task("09.5")
def test_discard_claimed_answers_whether_it_removed_the_blob(
    lesson, sessions, monkeypatch
):
    """discard_claimed() alone, on an old blob nobody refers to and that this test has
    claimed: while another took the blob's name away, it removes nothing and says so;
    once the name reaches the blob again, it removes it and says so. The claim stays
    the caller's: the test lets go of it. And when the disk fails the removal (an I/O
    error), that is no blob another took away: the error reaches the caller."""
    path, fd = claimed_old_blob(lesson, sessions, b"nobody's " * 2000)
    away = path.with_name("elsewhere")
    try:
        os.rename(path, away)       # another collection took the name away
        gone = lesson.discard_claimed(path, fd)
        os.rename(away, path)
        removed = lesson.discard_claimed(path, fd)
    finally:
        try:
            os.close(fd)
            closed = None
        except OSError as error:
            closed = error
    assert not gone, (
        "with the blob's name gone, discard_claimed() removes nothing and should say "
        f"so; it answered {gone!r}")
    assert removed and not path.exists(), (
        "with the name back on the claimed blob, discard_claimed() should remove it "
        f"and say so; it answered {removed!r}, and the blob is "
        f"{'still there' if path.exists() else 'gone'}")
    assert closed is None, (
        "discard_claimed() closed the claim's descriptor, which stays its caller's "
        "(drop_blobs lets go of every claim it made, once it is done): the caller's "
        f"own close then failed with {closed!r}, and a descriptor number closed twice "
        "may by then be another file's")
    # A disk that fails the removal is no blob another took away: the caller hears it
    path, fd = claimed_old_blob(lesson, sessions, b"nobody's either " * 2000)
    failed = []

    def failing(real):
        def call(source, *args, **kwargs):
            if not isinstance(source, int) and Path(source).name == path.name:
                failed.append(True)
                raise OSError(5, "Input/output error (the test's)", str(source))
            return real(source, *args, **kwargs)
        return call

    answer = discard_meanwhile(lesson, monkeypatch, path, fd, failing,
                               ("unlink", "remove", "rename", "replace"), OSError)
    assert not failed or isinstance(answer, OSError), (
        "the disk failed (an I/O error) as discard_claimed() removed a claimed blob "
        f"whose name still reached it, and it answered {answer!r}: a blob another "
        "collection took away is no disk's failure; the error should reach the "
        "caller, so that the collection fails and the next one clears what it could "
        "not")
    # Another collection takes the name away at the last moment: just as this one
    # takes the name (a rename, a link or a removal of it), whatever it looked at before
    path, fd = claimed_old_blob(lesson, sessions, b"nobody's at all " * 2000)
    away = path.with_name("taken-away")

    def taking(real):
        def call(source, *args, **kwargs):
            if (not isinstance(source, int) and Path(source).name == path.name
                    and not away.exists()):
                real_rename(path, away)     # another collection, just then
            return real(source, *args, **kwargs)
        return call

    real_rename = os.rename
    late = discard_meanwhile(lesson, monkeypatch, path, fd, taking,
                             ("unlink", "remove", "rename", "replace", "link"),
                             FileNotFoundError)
    assert not isinstance(late, BaseException) and not late and away.exists(), (
        "another collection took the blob's name away just as discard_claimed() took "
        f"it (its rename, link or removal of the name found nothing): it answered "
        f"{late!r}, and what the other took is "
        f"{'still there' if away.exists() else 'gone'}. A name another took away "
        "meanwhile, at whatever step, is no error: it removes nothing and says so "
        "(False), and no collection raises for what another did")
    # The claimed blob went (another collection) and a writer stored the same bytes
    # anew: the name reaches the writer's file. Just as discard_claimed() gives that
    # file the name back, a second writer finds the name free and fills it first.
    content = b"nobody's, then a writer's " * 2000
    path, fd = claimed_old_blob(lesson, sessions, content)
    os.unlink(path)                 # another collection removed the claimed blob
    path.write_bytes(content)       # a writer stored the same bytes anew
    filled = []

    def filling(real):
        def call(source, target, *args, **kwargs):
            if (not isinstance(target, int) and Path(target).name == path.name
                    and not os.path.lexists(path) and not filled):
                filled.append(True)     # a second writer, just then
                with open(path, "xb") as file:
                    file.write(content)
            return real(source, target, *args, **kwargs)
        return call

    answer = discard_meanwhile(lesson, monkeypatch, path, fd, filling,
                               ("rename", "replace", "link"), OSError)
    held = path.read_bytes() if path.is_file() else None
    assert not isinstance(answer, BaseException) and not answer and held == content, (
        "the claimed blob had gone (another collection) and a writer had stored the "
        "same bytes anew under its name; as discard_claimed() gave the writer's file "
        "the name back, a second writer filled the free name first. discard_claimed() "
        f"answered {answer!r}, and the name "
        f"{'reaches the same bytes' if held == content else 'reaches no such blob'}. "
        "It should answer False and raise nothing (no collection raises for what "
        "another did meanwhile), the name reaching the writers' bytes")


@pytest.mark.task("09.5")
def test_collect_never_takes_a_blob_a_writer_points_to_while_it_looks(
    lesson, sessions, monkeypatch
):
    """An old blob nobody refers to; while collect_blobs() looks at it, a writer stores
    the same bytes again and writes its line. The blob must stay, and the writer's log
    load."""
    with lesson.SessionLog(sessions, "scratch") as other:
        blob = other.store_blob(LARGE_SECRET.encode())
    path = sessions / "blobs" / blob
    age(path, 2)
    real = {name: getattr(os, name) for name in ("stat", "lstat", "open")}
    wrote = []

    def looking(name):
        def look(target, *args, **kwargs):
            found = real[name](target, *args, **kwargs)
            if not wrote and os.fspath(target) == os.fspath(path):
                wrote.append(True)      # just after collect looked: the writer
                play(lesson, sessions, (LARGE_SECRET, [say("Noted.")]),
                     session_id="quest-2")
            return found
        return look

    for name in real:
        monkeypatch.setattr(os, name, looking(name))
    lesson.collect_blobs(sessions)
    monkeypatch.undo()
    assert wrote, "the test's own set-up: collect_blobs() never looked at the blob"
    try:
        messages = resume(lesson, sessions, "quest-2")
    except lesson.BlobError as error:
        pytest.fail("a writer pointed a line to the blob while collect_blobs() looked "
                    f"at it, and the blob was removed: {error}. The writer's line "
                    "points to nothing", pytrace=False)
    assert messages[0]["content"] == LARGE_SECRET



def at_first_look(path, monkeypatch, then):
    """The first time the code under test looks at `path` (stat, lstat or open), `then`
    runs once, before the look returns: another collection, say, in the middle of this
    one. Returns a list that holds what `then` returned once it has run."""
    return the_first_time(path, ("stat", "lstat", "open"), monkeypatch, then,
                          before=False)


def raising_into(failures, then):
    """`then`, which adds to `failures` any exception it raises before raising it on:
    the code under test may take an OSError from a look at a file for a file that is
    gone, and the test must still learn that the collection it ran in between failed."""
    def run():
        try:
            return then()
        except Exception as error:
            failures.append(error)
            raise
    return run


def assert_ran_whole(failures, what):
    assert not failures, (
        f"{what}, run in the middle of another, failed with {failures[0]!r}: a "
        "collection raises nothing for what another did meanwhile")


def the_first_time(path, calls, monkeypatch, then, before):
    """The first time the code under test calls one of os's `calls` on `path`, `then`
    runs once: just before that call, or just after it has returned or raised. Returns
    a list that holds what `then` returned once it has run."""
    real = {name: getattr(os, name) for name in calls}
    met = []

    def wrapped(name):
        def call(target, *args, **kwargs):
            first = not met and os.fspath(target) == os.fspath(path)
            if first:
                met.append(None)    # first, so that `then`'s own calls pass through
                if before:
                    met[0] = then()
            try:
                return real[name](target, *args, **kwargs)
            finally:    # returned, or raised (a look at a name that is free)
                if first and not before:
                    met[0] = then()
        return call

    for name in real:
        monkeypatch.setattr(os, name, wrapped(name))
    return met

@pytest.mark.task("09.5")
def test_two_collections_and_a_writer_storing_the_same_bytes_anew_lose_no_blob(
    lesson, sessions, blob_writer, monkeypatch
):
    """Real processes: two collections run at once. The first has just looked at an old
    blob nobody refers to; the second removes it; a writer in another process then
    stores the same bytes anew (the name is free) and stops before its line. Then the
    first collection goes on: the writer's blob stays, and its log loads when it is
    done."""
    play(lesson, sessions, (LARGE_SECRET, [say("Noted.")]))
    [blob] = blob_names(sessions)
    (sessions / "quest-1.jsonl").unlink()      # no log refers to it any more
    path = sessions / "blobs" / blob
    age(path, 2)
    def second_collection_then_a_writer():
        removed = lesson.collect_blobs(sessions)
        writer = blob_writer("quest-2", LARGE_SECRET)
        writer.expect("stored")
        return removed, writer

    failures = []
    met = at_first_look(path, monkeypatch,
                        raising_into(failures, second_collection_then_a_writer))
    removed = lesson.collect_blobs(sessions)
    monkeypatch.undo()
    assert met, "the test's own set-up: collect_blobs() never looked at the blob"
    assert_ran_whole(failures, "the second collection")
    second, writer = met[0]
    assert second == [blob], (
        "the test's own set-up: the second collection should have removed the old "
        f"blob nobody referred to, it returned {abbreviated(second)}")
    assert removed == [], (
        "the first collection removed no blob (the second removed the old one, and the "
        "writer's stays), yet it returned "
        f"{abbreviated(removed)}: each removal is named once, by the "
        "collection that made it")
    writer.go()
    writer.expect("done")
    try:
        messages = resume(lesson, sessions, "quest-2")
    except lesson.BlobError as error:
        pytest.fail("a writer stored a blob anew after another collection had removed "
                    "the old file, while the first collection was looking at that old "
                    f"file; after the first collection, the writer's log no longer "
                    f"loads: {error}. blobs/ holds "
                    f"{sorted(p.name[:14] for p in (sessions / 'blobs').iterdir())}",
                    pytrace=False)
    assert messages[0]["content"] == LARGE_SECRET


@pytest.mark.task("09.5")
def test_two_collections_at_once_name_each_blob_they_removed_once_and_raise_nothing(
    lesson, sessions, monkeypatch
):
    """Two collections run at once: the first has just looked at an old blob nobody
    refers to, and the second removes it. The first goes on, raises nothing, and does
    not name the blob: it did not remove it."""
    with lesson.SessionLog(sessions, "scratch") as other:
        blob = other.store_blob(b"nobody's " * 2000)
    path = sessions / "blobs" / blob
    age(path, 2)
    failures = []
    met = at_first_look(path, monkeypatch, raising_into(
        failures, lambda: lesson.collect_blobs(sessions)))
    try:
        removed = lesson.collect_blobs(sessions)
    except OSError as error:
        pytest.fail("the second collection removed the blob the first had just looked "
                    f"at; the first then failed with {error!r} instead of going on",
                    pytrace=False)
    finally:
        monkeypatch.undo()
    assert met, "the test's own set-up: collect_blobs() never looked at the blob"
    assert_ran_whole(failures, "the second collection")
    assert met[0] == [blob], (
        "the test's own set-up: the second collection should have removed the old "
        f"blob nobody referred to, it returned {abbreviated(met[0])}")
    assert removed == [], (
        "the blob was removed by the second collection, and named by it; the first "
        f"returned {abbreviated(removed)}, naming a removal it did not make")


def when_the_name_goes(path, monkeypatch, then, before=True):
    """The first time the code under test takes `path`'s name away (unlinks it, or
    renames it to another name), `then` runs once: just before that call, or just after
    it has succeeded. Returns a list that holds what `then` returned once it has run."""
    return the_first_time(path, ("unlink", "remove", "rename", "replace"), monkeypatch,
                          then, before)


@pytest.mark.task("09.5")
@pytest.mark.parametrize("when", ["just before", "just after"])
def test_a_writers_blob_put_under_the_name_just_before_the_removal_stays(
    lesson, sessions, monkeypatch, when
):
    """A crashed collection left an old blob set aside, and no log refers to it. A
    writer found the blob's name free and wrote the same bytes anew (pinned, as
    store_blob pins), to put them under the name. The collection gives the set-aside
    blob its name back and judges it: old, nobody's, claimed. The writer's file takes
    the name just before the collection takes the name away, or just after. The
    writer's file stays, under the name, as the writer stored it; taken just before,
    the collection does not name it; and no other copy of the words is left in blobs/
    (no leftover the collection made)."""
    play(lesson, sessions, (LARGE_SECRET, [say("Noted.")]))
    [blob] = blob_names(sessions)
    (sessions / "quest-1.jsonl").unlink()      # no log refers to it any more
    blobs = sessions / "blobs"
    path = blobs / blob
    os.rename(path, blobs / f".{blob}.collected")
    age(blobs / f".{blob}.collected", 2)
    fd, temp = tempfile.mkstemp(dir=blobs, prefix=f".{blob}.", suffix=".tmp")
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)     # the writer's pin, until its line
        os.write(fd, LARGE_SECRET.encode())
        writers = os.fstat(fd).st_ino
        real_replace = os.replace
        met = when_the_name_goes(path, monkeypatch,
                                 lambda: real_replace(temp, path),
                                 before=when == "just before")
        try:
            removed = lesson.collect_blobs(sessions)
        finally:
            monkeypatch.undo()
        if not met:     # the collection never took the name: the writer's comes now
            os.replace(temp, path)
        found = os.stat(path).st_ino if os.path.lexists(path) else None
        assert found == writers, (
            f"a writer put its copy of the blob under the blob's name {when} the "
            "collection took that name away (the collection had claimed the old blob, "
            "back under that name, and found it was nobody's). After the collection "
            f"the name {'reaches another file' if found else 'is gone'}: the writer's "
            "file was removed, and the line it writes next points to "
            f"{'a file it did not store' if found else 'nothing'}")
        assert when == "just after" or blob not in removed, (
            "the writer's file is still under the blob's name, yet the collection "
            "names the blob among those it removed")
        others = sorted(p.name[:14] for p in blobs.iterdir() if p.name != blob)
        assert not others, (
            f"a writer put its copy of the blob under the blob's name {when} the "
            "collection took that name away. After the collection, blobs/ holds, "
            f"beside the writer's blob, {others}: a copy of the words the collection "
            "set aside and left there, old and held by nobody. A collection leaves "
            "none: it removes its own copy, or puts the writer's back under the name")
        with lesson.SessionLog(sessions, "quest-2") as writer:    # its line, now
            writer.append({"role": "user", "content": LARGE_SECRET})
    finally:
        os.close(fd)
    assert resume(lesson, sessions, "quest-2")[0]["content"] == LARGE_SECRET


@pytest.mark.task("09.5")
def test_two_collections_setting_the_same_blob_aside_at_once_raise_nothing(
    lesson, sessions, monkeypatch
):
    """Two collections at once: the first has just taken an old blob's name away (to
    remove the blob it claimed). The name then reaches an old copy of the same bytes
    nobody refers to (a writer stored them anew and died before its line), and a second
    collection removes it. The first goes on, raises nothing, and leaves nothing of
    either file behind."""
    with lesson.SessionLog(sessions, "scratch") as other:
        blob = other.store_blob(b"nobody's " * 2000)
    blobs = sessions / "blobs"
    path = blobs / blob
    age(path, 2)

    def dead_writer_then_second_collection():
        fd, temp = tempfile.mkstemp(dir=blobs, prefix=f".{blob}.", suffix=".tmp")
        os.write(fd, b"nobody's " * 2000)
        os.close(fd)
        os.replace(temp, path)
        age(path, 2)
        return lesson.collect_blobs(sessions)

    met = when_the_name_goes(path, monkeypatch, dead_writer_then_second_collection,
                             before=False)
    try:
        lesson.collect_blobs(sessions)
    except OSError as error:
        pytest.fail("while the first collection had the blob's name taken away, a "
                    "second collection removed an old copy of the same bytes that had "
                    f"come under that name; the first then failed with {error!r} "
                    "instead of going on", pytrace=False)
    finally:
        monkeypatch.undo()
    assert met, "the test's own set-up: the first collection never removed the blob"
    assert met[0] == [blob], (
        "the test's own set-up: the second collection should have removed the old copy "
        f"nobody refers to, it returned {abbreviated(met[0])}")
    assert sorted(p.name[:14] for p in blobs.iterdir()) == [], (
        "both files were old and nobody's, and each collection removed one: blobs/ "
        f"should be empty, it holds {sorted(p.name[:14] for p in blobs.iterdir())}")


@pytest.mark.task("09.5")
def test_a_blob_another_collection_has_set_aside_to_remove_stays_set_aside(
    lesson, sessions, monkeypatch
):
    """A collection has just set an old blob nobody refers to aside, to remove it. A
    second collection runs meanwhile: the set-aside file is held by the first, so the
    second leaves it as it is (no name given back). The first then removes the blob:
    it is gone from blobs/, and named once, by the first."""
    with lesson.SessionLog(sessions, "scratch") as other:
        blob = other.store_blob(b"nobody's " * 2000)
    blobs = sessions / "blobs"
    path = blobs / blob
    age(path, 2)
    met = when_the_name_goes(path, monkeypatch,
                             lambda: lesson.collect_blobs(sessions), before=False)
    try:
        removed = lesson.collect_blobs(sessions)
    finally:
        monkeypatch.undo()
    assert met, "the test's own set-up: the first collection never removed the blob"
    left = sorted(p.name[:14] for p in blobs.iterdir())
    assert met[0] == [] and removed == [blob] and left == [], (
        "a collection had set aside an old blob nobody refers to, to remove it, when a "
        "second collection ran: the second should leave that set-aside file as it is "
        "(the first holds it) and name nothing, and the first remove the blob and name "
        f"it; the second named {abbreviated(met[0])}, the first "
        f"{abbreviated(removed)}, and blobs/ holds {left}")


@pytest.mark.task("09.5")
@pytest.mark.parametrize("referred", [True, False], ids=["a-log-refers", "nobody"])
def test_two_collections_clearing_the_same_set_aside_blob_at_once_raise_nothing(
    lesson, sessions, monkeypatch, referred
):
    """A crashed collection left a blob set aside. Two collections run at once: the
    second has the leftover open and is about to lock it when the first clears it
    whole (the blob back under its name, the leftover gone). The second then holds a
    file no name reaches any more: it goes on, raises nothing, and the blob is judged
    as usual: back under its name when a log refers to it, removed when none does."""
    play(lesson, sessions, (LARGE_SECRET, [say("Noted.")]))
    [blob] = blob_names(sessions)
    if not referred:
        (sessions / "quest-1.jsonl").unlink()
    blobs = sessions / "blobs"
    aside = blobs / f".{blob}.collected"
    os.rename(blobs / blob, aside)
    age(aside, 2)
    real = fcntl.flock
    met = []

    def flock(fd, operation):
        if not met and operation & fcntl.LOCK_EX and os.path.realpath(
                f"/proc/self/fd/{fd}").endswith(aside.name):
            met.append([])      # first, so that the first collection's own pass
            met[0] = lesson.collect_blobs(sessions)     # the first collection, whole
        return real(fd, operation)

    monkeypatch.setattr(fcntl, "flock", flock)
    try:
        second = lesson.collect_blobs(sessions)
    except OSError as error:
        pytest.fail("a second collection had the set-aside blob open, about to lock "
                    "it, when a first collection cleared it (the blob back under its "
                    f"name, the leftover gone); the second then failed with {error!r} "
                    "instead of going on: a leftover gone meanwhile is cleared already",
                    pytrace=False)
    finally:
        monkeypatch.undo()
    left = sorted(p.name[:14] for p in blobs.iterdir())
    if referred:
        assert blob_names(sessions) == [blob], (
            "a log refers to the blob set aside: after two collections at once it "
            "should be back under its name, and nothing else left; blobs/ holds "
            f"{left}")
        assert resume(lesson, sessions)[0]["content"] == LARGE_SECRET
    else:
        assert left == [] and sorted((met[0] if met else []) + second) == [blob], (
            "nobody refers to the blob set aside, and it is old: between them, the two "
            "collections should remove it and name it once; they returned "
            f"{abbreviated(met[0] if met else [])} and "
            f"{abbreviated(second)}, and blobs/ holds {left}")


@pytest.mark.task("09.5")
def test_a_leftover_another_collection_cleared_since_the_listing_is_no_error(
    lesson, sessions, monkeypatch
):
    """A crashed collection left a blob set aside, old, that no log refers to. A second
    collection has just listed blobs/ when a first one clears that leftover whole,
    before the second looks at it at all: the second goes on, raises nothing, and
    between them the blob is removed and named once."""
    play(lesson, sessions, (LARGE_SECRET, [say("Noted.")]))
    [blob] = blob_names(sessions)
    (sessions / "quest-1.jsonl").unlink()      # no log refers to it any more
    blobs = sessions / "blobs"
    aside = blobs / f".{blob}.collected"
    os.rename(blobs / blob, aside)
    age(aside, 2)
    failures = []
    met = the_first_time(aside, ("stat", "lstat", "open"), monkeypatch,
                         raising_into(failures, lambda: lesson.collect_blobs(sessions)),
                         before=True)
    try:
        second = lesson.collect_blobs(sessions)
    except OSError as error:
        pytest.fail("a collection had just listed blobs/ when another cleared the "
                    "blob a crashed collection had set aside; it then failed with "
                    f"{error!r} instead of going on: a leftover gone meanwhile is "
                    "cleared already",
                    pytrace=False)
    finally:
        monkeypatch.undo()
    assert met, "the test's own set-up: the collection never looked at the leftover"
    assert_ran_whole(failures, "the collection that cleared the leftover")
    left = sorted(p.name[:14] for p in blobs.iterdir())
    assert left == [] and sorted(met[0] + second) == [blob], (
        "nobody refers to the blob set aside, and it is old: between them, the two "
        f"collections should remove it and name it once; they returned "
        f"{abbreviated(met[0])} and {abbreviated(second)}, and blobs/ "
        f"holds {left}")


@pytest.mark.task("09.5")
def test_two_collections_taking_the_same_blob_name_at_once_keep_a_writers_blob(
    lesson, sessions, monkeypatch
):
    """Three collections and two writers, each at its worst moment. The first
    collection has just looked at an old blob nobody refers to; a second removes it,
    and a writer stores the same bytes anew (pinned, before its line). The first goes
    on and takes the blob's name away: it reaches the writer's file now. Just then the
    name comes to reach an old copy of the same bytes nobody refers to (another writer
    stored them and died before its line), and a third collection removes that copy.
    The first collection puts away no file but its own: when it is done, the writer's
    file is under the name, and the writer's log loads."""
    with lesson.SessionLog(sessions, "scratch") as other:
        blob = other.store_blob(LARGE_SECRET.encode())
    blobs = sessions / "blobs"
    path = blobs / blob
    age(path, 2)
    writer = {}

    def dead_writers_copy_then_a_third_collection():
        fd, temp = tempfile.mkstemp(dir=blobs, prefix=f".{blob}.", suffix=".tmp")
        os.write(fd, LARGE_SECRET.encode())
        os.close(fd)
        os.replace(temp, path)
        age(path, 2)
        return lesson.collect_blobs(sessions)

    def second_collection_then_a_writer():
        removed = lesson.collect_blobs(sessions)
        fd, temp = tempfile.mkstemp(dir=blobs, prefix=f".{blob}.", suffix=".tmp")
        writer["fd"] = fd
        fcntl.flock(fd, fcntl.LOCK_SH)     # the writer's pin, until its line
        os.write(fd, LARGE_SECRET.encode())
        os.replace(temp, path)
        writer["inode"] = os.fstat(fd).st_ino
        writer["third"] = when_the_name_goes(
            path, monkeypatch, dead_writers_copy_then_a_third_collection, before=False)
        return removed

    met = at_first_look(path, monkeypatch, second_collection_then_a_writer)
    try:
        try:
            first = lesson.collect_blobs(sessions)
        except OSError as error:
            pytest.fail("while the first collection had the blob's name taken away, "
                        "a third collection removed an old copy that had come under "
                        f"that name; the first then failed with {error!r} instead of "
                        "going on", pytrace=False)
        finally:
            monkeypatch.undo()
        assert met and met[0] == [blob], (
            "the test's own set-up: the second collection should have removed the old "
            "blob the first had just looked at")
        # A first collection that sees the file it claimed is gone (the second
        # removed it) may leave the name alone at once: then no third collection
        # comes, and what counts is the same, the writer's file under the name.
        if writer.get("third"):
            assert writer["third"][0] == [blob], (
                "the test's own set-up: the third collection should have removed the "
                "old copy nobody refers to")
        found = os.stat(path).st_ino if os.path.lexists(path) else None
        assert found == writer["inode"], (
            "the first collection took the blob's name away when it reached a writer's "
            "file (stored anew, pinned, before its line); meanwhile a third collection "
            "took the name away from an old copy and removed it. After the first "
            f"collection the name {'reaches another file' if found else 'is gone'}: "
            "the writer's file was lost, and the line it writes next points to "
            f"{'a file it did not store' if found else 'nothing'}. Where does each "
            "collection put what it takes away, and can one put its file over "
            "another's?")
        assert blob not in first, (
            "the writer's file is still under the blob's name, yet the first "
            "collection names the blob among those it removed")
        with lesson.SessionLog(sessions, "quest-2") as line:     # its line, now
            line.append({"role": "user", "content": LARGE_SECRET})
    finally:
        if "fd" in writer:
            os.close(writer["fd"])
    assert resume(lesson, sessions, "quest-2")[0]["content"] == LARGE_SECRET


@pytest.mark.task("09.5")
def test_an_old_leftover_its_writer_still_holds_stays(lesson, sessions):
    """A writer is storing a blob: its temporary file, held by the writer until the
    blob is done, has half the bytes, and the writer was stopped right there two days
    ago (a laptop put to sleep). The collection leaves that file as it is: when the
    writer wakes up, it finishes the blob, and its log loads."""
    blobs = sessions / "blobs"
    blobs.mkdir(mode=0o700)
    data = LARGE_SECRET.encode()
    digest = hashlib.sha256(data).hexdigest()
    fd, temp = tempfile.mkstemp(dir=blobs, prefix=f".{digest}.", suffix=".tmp")
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)     # held by its writer, as store_blob holds it
        os.write(fd, data[:1000])
        age(Path(temp), 2)
        removed = lesson.collect_blobs(sessions)
        assert os.path.exists(temp), (
            "a writer was storing a blob, and was stopped two days ago with half of it "
            "written; it still holds the file. The collection removed it as a leftover "
            "of a crashed write: the writer, woken up, finishes a blob that no name "
            "reaches, and its log points to nothing. A leftover goes once it is old "
            "and nobody holds it")
        assert removed == [], f"collect_blobs() removed {removed}, no blob was there"
        os.write(fd, data[1000:])
        os.replace(temp, blobs / digest)
    finally:
        os.close(fd)
    with lesson.SessionLog(sessions, "quest-2") as writer:
        writer.append({"role": "user", "content": LARGE_SECRET})
    assert resume(lesson, sessions, "quest-2")[0]["content"] == LARGE_SECRET


class Crash(BaseException):
    """The test's stand-in for a process killed where it stands."""


@pytest.mark.task("09.5")
def test_what_a_collection_stopped_after_taking_a_blobs_name_left_the_next_clears(
    lesson, sessions, monkeypatch
):
    """A collection stops (a crash) just after it took the name of an old blob nobody
    refers to. Whatever it left of the blob, the next collection, once that is old,
    clears it and names the blob it removed; blobs/ is then empty."""
    with lesson.SessionLog(sessions, "scratch") as other:
        blob = other.store_blob(b"nobody's " * 2000)
    blobs = sessions / "blobs"
    path = blobs / blob
    age(path, 2)

    def crash():
        raise Crash()

    met = when_the_name_goes(path, monkeypatch, crash, before=False)
    try:
        lesson.collect_blobs(sessions)
    except Crash:
        pass
    finally:
        monkeypatch.undo()
    assert met, "the test's own set-up: the collection never removed the blob"
    left = sorted(p.name for p in blobs.iterdir())
    for name in left:
        age(blobs / name, 2)        # the crash was two days ago
    removed = lesson.collect_blobs(sessions)
    assert sorted(p.name for p in blobs.iterdir()) == [], (
        "a collection crashed just after it took the blob's name away, leaving "
        f"{[name[:14] + '...' for name in left]}; two days later, the next collection "
        "should clear it all, yet blobs/ holds "
        f"{sorted(p.name[:14] + '...' for p in blobs.iterdir())}")
    assert removed == ([blob] if left else []), (
        f"the crashed collection left {[name[:14] + '...' for name in left]} of an "
        "old blob nobody refers to: the next collection should name the blob it "
        f"removed ({blob[:12]}...) {'' if left else '(none: nothing was left) '}"
        f"and returned {abbreviated(removed)}")


@pytest.mark.task("09.5")
def test_a_blob_a_crashed_collection_set_aside_comes_back_for_a_log_restored_since(
    lesson, sessions, monkeypatch
):
    """A collection stops (a crash) just after it took the name of an old blob no log
    referred to (its session's log had been removed by hand). The person then puts
    that log back from a backup. Once what the crash left is old, the next collection
    gives the blob its name back, wherever the crashed one set it aside: the restored
    log loads."""
    play(lesson, sessions, (LARGE_SECRET, [say("Noted.")]))
    [blob] = blob_names(sessions)
    log = sessions / "quest-1.jsonl"
    backup = log.read_bytes()
    log.unlink()
    age(sessions / "blobs" / blob, 2)

    def crash():
        raise Crash()

    met = when_the_name_goes(sessions / "blobs" / blob, monkeypatch, crash,
                             before=False)
    try:
        lesson.collect_blobs(sessions)
    except Crash:
        pass
    finally:
        monkeypatch.undo()
    assert met, "the test's own set-up: the collection never removed the blob"
    log.write_bytes(backup)
    for path in [path for path in sessions.rglob("*") if path.is_file()]:
        age(path, 2)        # the crash was two days ago
    lesson.collect_blobs(sessions)
    try:
        messages = resume(lesson, sessions)
    except lesson.BlobError as error:
        pytest.fail("a collection crashed just after it took the name of an old blob "
                    "no log referred to; a log that refers to it was then restored, "
                    "and the next collection did not give the blob its name back: "
                    f"the log no longer loads ({error}). A blob set aside is set "
                    "aside in blobs/, under a name the next collection knows (a dot, "
                    "the blob's name, .collected), so that it can come back",
                    pytrace=False)
    assert messages[0]["content"] == LARGE_SECRET


@pytest.mark.key
@pytest.mark.task("09.5")
def test_collect_never_takes_a_blob_another_process_stored_and_has_not_pointed_to(
    lesson, sessions, blob_writer
):
    """Real processes: a writer has stored its blob and not yet written the line that
    points to it. collect_blobs() then finds a blob no log refers to, and must keep it:
    the writer's log must load when it is done."""
    writer = blob_writer("quest-2", LARGE_SECRET)
    writer.expect("stored")
    assert len(blob_names(sessions)) == 1
    removed = lesson.collect_blobs(sessions)
    writer.go()
    writer.expect("done")
    assert removed == [], (
        "collect_blobs() removed the blob a writer had just stored and was about to "
        "point to: keep every blob touched within the grace period")
    try:
        messages = resume(lesson, sessions, "quest-2")
    except lesson.BlobError as error:
        pytest.fail(f"the writer's log no longer loads: {error}", pytrace=False)
    assert messages[0]["content"] == LARGE_SECRET


@pytest.mark.task("09.5")
def test_collect_never_takes_an_old_blob_a_writer_in_another_process_is_reusing(
    lesson, sessions, blob_writer
):
    """Real processes: an old blob nobody refers to any more (its session was deleted)
    is stored again by a writer, which stops before its line. The writer touched it:
    collect_blobs() must keep it, and the writer's log must load."""
    play(lesson, sessions, (LARGE_SECRET, [say("Noted.")]))
    [blob] = blob_names(sessions)
    (sessions / "quest-1.jsonl").unlink()      # no log refers to it any more
    age(sessions / "blobs" / blob, 2)
    writer = blob_writer("quest-2", LARGE_SECRET)
    writer.expect("stored")
    removed = lesson.collect_blobs(sessions)
    writer.go()
    writer.expect("done")
    assert removed == [], (
        "collect_blobs() removed an old blob that a writer had just stored again: the "
        "writer touched it, so it is young")
    try:
        messages = resume(lesson, sessions, "quest-2")
    except lesson.BlobError as error:
        pytest.fail(f"the writer's log no longer loads: {error}", pytrace=False)
    assert messages[0]["content"] == LARGE_SECRET


@pytest.mark.task("09.5")
def test_collect_keeps_a_blob_whose_line_a_writer_wrote_before_the_claim(
    lesson, sessions, blob_writer, monkeypatch
):
    """Real processes: a writer has stored its blob (pinned) and not yet written its
    line when a collection with no grace begins. After the collection has read what
    the files refer to, and before it claims the blob, the writer writes its line and
    lets go. The blob is referred to before it is claimed: it stays, and the writer's
    log loads. What the files refer to is known only once the blob is claimed."""
    writer = blob_writer("quest-2", LARGE_SECRET)
    writer.expect("stored")
    [blob] = blob_names(sessions)

    def the_writer_writes_its_line():
        writer.go()
        writer.expect("done")

    wrote = at_first_look(sessions / "blobs" / blob, monkeypatch,
                          the_writer_writes_its_line)
    removed = lesson.collect_blobs(sessions, grace=0)
    monkeypatch.undo()
    assert wrote, "the test's own set-up: collect_blobs() never looked at the blob"
    try:
        messages = resume(lesson, sessions, "quest-2")
    except lesson.BlobError as error:
        pytest.fail(
            "a writer wrote the line pointing to its blob (and let go of it) after "
            "collect_blobs(grace=0) had read what the files refer to and before it "
            f"claimed the blob; the collection removed it ({abbreviated(removed)}), so "
            f"the writer's log no longer loads: {error}. What the files refer to must "
            "be read once the blob is claimed: only then can no line come in between",
            pytrace=False)
    assert messages[0]["content"] == LARGE_SECRET
    assert removed == [], (
        f"collect_blobs() says it removed {abbreviated(removed)}, yet the one blob of "
        "the folder is referred to and still there")


@pytest.mark.task("09.5")
def test_collect_removes_more_old_blobs_than_a_process_may_hold_open(lesson, sessions):
    """Months of pasted pages: 400 old blobs no log refers to any more, in a process
    that may open only 200 files more than it has open (macOS allows 256 in all by
    default). The collection removes them all and names them: it never needs one open
    file a blob."""
    import resource
    blobs = sessions / "blobs"
    blobs.mkdir()
    names = []
    for k in range(400):
        data = f"page {k} of the diary".encode()
        name = hashlib.sha256(data).hexdigest()
        (blobs / name).write_bytes(data)
        age(blobs / name, 2)
        names.append(name)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # Room for 200 more, above the highest descriptor open now (the limit bounds the
    # numbers): what the program has open already is not the collection's to pay for.
    listed = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"
    highest = max(int(name) for name in os.listdir(listed))
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(highest + 1 + 200, hard), hard))
    try:
        removed = lesson.collect_blobs(sessions)
    except OSError as error:
        removed = error
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert removed == sorted(names), (
        "400 old blobs nobody refers to, in a process allowed 200 more open files: the "
        "collection should remove them all and name them; it "
        + (f"failed with {removed!r}" if isinstance(removed, OSError) else
           f"named {len(removed)}") + ", as if it held a file open for every blob")


@pytest.mark.task("09.3")
def test_erasing_in_a_session_with_no_log_creates_nothing(lesson, sessions):
    """A session with no log holds no message to erase: erase(0) raises EraseError
    saying it holds 0 messages, and the folder stays as it was: no empty log (a session
    that was never started, which expire and delete would then have to find), no lock
    file. Lesson 08's compact and undo refuse a session with no log the same way."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        with raises(lesson.EraseError, "erase(0) of session quest-1, which has no log, "
                    "went ahead: there is no message to erase"):
            log.erase(0)
    left = sorted(path.name for path in sessions.iterdir())
    assert left == [], (
        "erase(0) of a session with no log was refused, as it should be, but it left "
        f"{left} in the sessions folder, which was empty: a refused erase creates "
        "nothing, not a log, not a lock file")


@pytest.mark.task("09.2")
def test_expire_of_a_folder_no_session_was_saved_in_yet_deletes_nothing(lesson,
                                                                         tmp_path):
    """A retention job that runs before the first session was ever saved: the sessions
    folder is not there yet. expire() deletes nothing and reports nothing, as
    delete_session() and collect_blobs() answer for such a folder, and creates none."""
    folder = tmp_path / "sessions"
    try:
        result = lesson.expire(folder)
    except FileNotFoundError as error:
        pytest.fail(f"expire() of a sessions folder not made yet failed with "
                    f"{error!r}: no session is there, so none is deleted or busy",
                    pytrace=False)
    assert result == ([], []) and not folder.exists(), (
        f"expire() of a sessions folder not made yet should return two empty lists and "
        f"create nothing; it returned {result!r}, and the folder "
        f"{'exists now' if folder.exists() else 'is still not there'}")
