"""The store at its edges: errors, races and durability (issue 11).

Each test here failed against the store as it was before the issue was fixed (run it on an
old reference with --impl) and passes now. They use real files, real processes and real
signals. Two things a test cannot make happen on an ordinary machine are named where they
would be used: an fsync that fails with EIO (it takes a failing disk, or device-mapper's
error target and root), and a short write that cannot be taken back.

Where a race decides the outcome, the test makes the worst moment happen on purpose rather
than hoping for it: it runs a real rename, a real SIGKILL or a real signal at the exact step
(by wrapping one of the store's own functions, or by watching the file from a signal
handler), never a fake OS call.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sessionlab.scripted import MODEL_NAME, ScriptedModel, call, say, use
from sessionlab.testing import append_interrupted_after_the_write
from sessionlab.town import Town

# The campaign (tests/conftest.py): a blob over 2 GiB, and the store's edges under real faults.
pytestmark = pytest.mark.campaign


def line(entry: Any) -> bytes:
    return (json.dumps(entry, ensure_ascii=False) + "\n").encode("utf-8")


ASK = {"role": "user", "content": "Ask the elder about the cave."}
ANSWER = {"role": "assistant", "content": "The elder wants a torch."}
LATER = {"role": "user", "content": "Then buy a torch."}
DONE = {"role": "assistant", "content": "Bought."}
DAY = [ASK, ANSWER]


def lines_of(path: Path) -> list[dict]:
    return [json.loads(raw) for raw in path.read_bytes().split(b"\n") if raw]


def unprivileged() -> None:
    """In a child: stop being root, so that a folder's mode binds (root ignores it)."""
    if os.geteuid() == 0:
        os.setgid(65534)
        os.setuid(65534)        # nobody


def full_disk(extra_bytes: int) -> None:
    """In a child: no file may grow past `extra_bytes` (RLIMIT_FSIZE, SIGXFSZ ignored)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (extra_bytes, resource.RLIM_INFINITY))


def disk_freed() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


def succeeded(result: Any) -> Any:
    if isinstance(result, dict) and "raised" in result:
        pytest.fail(f"the child raised {result['raised']}: {result['message']}\n"
                    f"{result['traceback']}")
    return result


# --- 1. a write whose outcome is unknown stops the writer ---------------------------------


def test_an_exception_after_the_line_landed_stops_the_writer_instead_of_a_double_write(
        store, tmp_path):
    """Ctrl-C right after write() returned: the retry is refused (WriterStopped), the line is
    in the log once, and a new writer goes on from what the log really holds."""
    folder = tmp_path / "sessions"
    big = {"role": "user", "content": "The elder's whole chronicle. " * 300_000}    # 8.7 MB
    for attempt in range(5):
        log = store.SessionLog(folder, f"quest-{attempt}", blob_threshold=1 << 30)
        log.append(ASK)                         # the writer is open; only the next line counts
        if append_interrupted_after_the_write(log, big):
            break
        log.close()
    else:
        pytest.skip("the timer never fired while the line was written (five tries)")
    stopped = getattr(store, "WriterStopped", ())
    try:
        log.append(big)     # what a caller does after an exception: try again
    except stopped:
        pass
    else:
        pytest.fail("after an exception that came once the line was in the file, the retry "
                    "wrote the message a second time; the writer should have refused "
                    f"(WriterStopped). The log holds it {lines_of(log.path).count(big)} times")
    finally:
        log.close()
    assert lines_of(log.path) == [ASK, big], "the line should be in the log exactly once"
    with store.SessionLog(folder, log.id, blob_threshold=1 << 30) as again:
        assert again.open_for_append() == [ASK, big]
        again.append(DONE)
    assert lines_of(log.path) == [ASK, big, DONE]


def test_fsync_failing_with_eio_cannot_be_made_here():
    pytest.skip("an fsync that fails with EIO takes a failing disk or device-mapper's error "
                "target (root and a block device); the same flag as the test above covers it, "
                "since the flag is set before write() and cleared only after fsync")


# --- 2. a run stopped between two tool calls ---------------------------------------------


def test_a_run_stopped_between_two_tool_calls_leaves_no_gap_in_the_log(store, tmp_path):
    """Ctrl-C (a real SIGINT) inside the second of two tool calls: the next run answers the
    open call first, so the request and the log stay valid, on this agent and on resume."""
    town = Town()

    def buy_interrupted(**arguments):
        # Python's own Ctrl-C handler, even where this process was started with SIGINT
        # ignored (in the background, without job control)
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            os.kill(os.getpid(), signal.SIGINT)     # the user presses Ctrl-C in the tool
            time.sleep(1)
        finally:
            signal.signal(signal.SIGINT, previous)
        return "never"

    tools = SimpleNamespace(schemas=town.schemas,
                            functions={**town.functions, "buy": buy_interrupted})
    model = ScriptedModel([use(call("talk_to", npc="elder"), call("buy", item="torch")),
                           say("Where were we?"), say("Still here.")])
    client = model.client()
    folder = tmp_path / "sessions"
    with store.SessionLog(folder, "quest") as log:
        agent = store.Agent(client, model=MODEL_NAME, tools=tools, session=log)
        with pytest.raises(KeyboardInterrupt):
            agent.run("Talk to the elder and buy a torch.")
        try:
            answer = agent.run("Go on.")
        except Exception as error:      # noqa: BLE001 - the provider's 400 is the failure
            pytest.fail(f"the run after an interrupted tool call was refused: {error}")
    assert answer == "Where were we?"
    with store.SessionLog(folder, "quest") as log:
        resumed = store.Agent(client, model=MODEL_NAME, tools=town, session=log)
        try:
            resumed.run("Still there?")
        except Exception as error:      # noqa: BLE001
            pytest.fail(f"resuming the session was refused: {error}")
    roles = [m.get("role") for m in model.requests[-1]["messages"]]
    assert roles[:5] == ["user", "assistant", "tool", "tool", "user"], roles


def test_a_log_that_cannot_be_read_back_is_named_by_the_error(store, tmp_path, monkeypatch):
    """A failing disk answers the resume's read of the log with EIO, which a read through a
    descriptor reports naming no file: the error names the log. (EIO is played at the seek
    that starts the read; a read's own EIO takes a failing disk.)"""
    folder = tmp_path / "sessions"
    folder.mkdir(mode=0o700)
    (folder / "quest.jsonl").write_bytes(b"".join(line(m) for m in DAY))
    real_lseek = os.lseek

    def failing(fd, position, how):
        if os.readlink(f"/proc/self/fd/{fd}").endswith("quest.jsonl"):
            raise OSError(errno.EIO, "Input/output error")
        return real_lseek(fd, position, how)
    monkeypatch.setattr(os, "lseek", failing)
    with pytest.raises(OSError) as raised:
        with store.SessionLog(folder, "quest") as log:
            log.open_for_append()
    assert raised.value.errno == errno.EIO and "quest.jsonl" in str(raised.value), (
        f"the log could not be read back: the error should say so naming it; it was "
        f"{type(raised.value).__name__}: {raised.value}")


# --- 3. the lock never leaks on error ------------------------------------------------------


def test_a_failure_while_writing_the_lock_file_lets_go_of_the_lock(store, tmp_path, child):
    """EIO when the pid goes into the lock file: the writer fails, and the same process can
    take the session right after (no "another process is writing it"). (A full disk there
    is no failure at all from lesson 09 on: the pid is only for messages, and delete must
    work on a full disk; see test_privacy_edges.py.)"""
    folder = tmp_path / "sessions"
    folder.mkdir(mode=0o700)
    (folder / "quest.jsonl").write_bytes(b"".join(line(m) for m in DAY))

    def work():
        real_write, real_pwrite = os.write, os.pwrite

        def broken(fd, data, *rest):
            if str(os.readlink(f"/proc/self/fd/{fd}")).endswith("quest.lock"):
                raise OSError(errno.EIO, "injected: the disk failed")
            return (real_pwrite if rest else real_write)(fd, data, *rest)
        os.write, os.pwrite = broken, broken
        try:
            store.SessionLog(folder, "quest").open_for_append()
            first = "nothing"
        except OSError as error:
            first = type(error).__name__
        os.write, os.pwrite = real_write, real_pwrite
        try:
            with store.SessionLog(folder, "quest") as log:
                return {"first": first, "then": log.open_for_append()}
        except Exception as error:     # noqa: BLE001
            return {"first": first, "then": f"{type(error).__name__}: {error}"}

    outcome = succeeded(child(work))
    assert outcome["first"] != "nothing", "the full disk should have failed the first open"
    assert outcome["then"] == DAY, (
        f"after the failed open, the session should be free again; got {outcome['then']}")


def test_a_lock_file_that_cannot_be_removed_still_lets_go_of_the_lock(store, child, request):
    """close() in a folder that turned read-only: the lock file stays, the flock does not;
    the next writer in the same process gets the session."""
    # Outside pytest's own temporary folder, which only root may enter.
    root = Path(tempfile.mkdtemp(prefix="sessionlab-readonly-"))
    request.addfinalizer(lambda: shutil.rmtree(root, ignore_errors=True))
    root.chmod(0o755)
    folder = root / "sessions"
    folder.mkdir(mode=0o700)
    if os.geteuid() == 0:
        os.chown(folder, 65534, 65534)

    def work():
        unprivileged()
        log = store.SessionLog(folder, "quest")
        log.append(ASK)
        folder.chmod(0o500)         # the lock file can no longer be removed
        try:
            log.close()
            closing = "closed"
        except OSError as error:
            closing = type(error).__name__
        folder.chmod(0o700)
        try:
            with store.SessionLog(folder, "quest") as again:
                return {"closing": closing, "then": again.open_for_append()}
        except Exception as error:     # noqa: BLE001
            return {"closing": closing, "then": f"{type(error).__name__}: {error}"}

    outcome = succeeded(child(work))
    assert outcome["then"] == [ASK], (
        f"the lock must be let go even when its file cannot be removed; got {outcome}")


# --- 4. fork all or nothing ----------------------------------------------------------------


def test_a_fork_killed_between_its_two_steps_can_simply_be_done_again(store, tmp_path):
    """SIGKILL after the first of the fork's two files is written: no session is left
    half-made, and the same fork, run again, works."""
    folder = tmp_path / "sessions"
    with store.SessionLog(folder, "quest") as log:
        for message in DAY:
            log.append(message)
    pid = os.fork()
    if pid == 0:
        try:
            def killed_after(real):
                def step(*args, **kwargs):
                    real(*args, **kwargs)
                    os.kill(os.getpid(), signal.SIGKILL)
                return step
            store.publish_new = killed_after(store.publish_new)
            store.write_whole = killed_after(store.write_whole)
            store.fork(folder, "quest", "copy")
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status), "the forking child should have died by SIGKILL"
    left = sorted(p.name for p in folder.iterdir())
    try:
        store.fork(folder, "quest", "copy")
    except Exception as error:     # noqa: BLE001
        pytest.fail(f"a fork that was killed half-way left {left}, and doing it again "
                    f"failed: {type(error).__name__}: {error}")
    assert store.SessionLog(folder, "copy").load() == DAY
    meta = json.loads((folder / "copy.meta.json").read_bytes())
    assert meta["parent"] == "quest" and meta["forked_at"] == 2, meta


def test_a_fork_onto_an_id_whose_writer_is_creating_it_is_refused(store, tmp_path):
    """Another writer holds the new id's lock (it is creating that session): the fork waits
    for it like any writer, and with no time to wait is refused, writing nothing."""
    folder = tmp_path / "sessions"
    with store.SessionLog(folder, "quest") as log:
        for message in DAY:
            log.append(message)
    creating = store.SessionLog(folder, "copy")
    creating._lock()        # the moment inside _open between "no log yet" and creating it
    try:
        before = sorted(p.name for p in folder.iterdir())
        try:
            store.fork(folder, "quest", "copy")
        except store.SessionBusy:
            pass
        else:
            pytest.fail("the fork published its log while another writer was creating that "
                        "session: the two would be spliced into one log")
        assert sorted(p.name for p in folder.iterdir()) == before
    finally:
        creating.close()


# --- 5. a reader never sees a false CorruptLog ---------------------------------------------


READER = """
import json, sys
from sessionlab.course import load_module
store = load_module(sys.argv[1], "store_under_test")
print("ready", flush=True)
try:
    print(json.dumps({"loaded": store.SessionLog(sys.argv[2], "quest").load()}), flush=True)
except store.CorruptLog as error:
    print(json.dumps({"CorruptLog": str(error)}), flush=True)
"""


def test_a_reader_never_takes_a_repair_in_progress_for_damage(store, tmp_path):
    """A reader's read() calls straddle a writer's repair (strace holds each of the reader's
    reads of the log for 0.4 s, and the repair runs in that pause): the reader gets a whole
    history, never a CorruptLog for a healthy file."""
    if shutil.which("strace") is None:
        pytest.skip("needs strace, to hold the reader between its two read() calls")
    folder = tmp_path / "sessions"
    with store.SessionLog(folder, "quest") as log:
        for message in DAY:
            log.append(message)
    path = folder / "quest.jsonl"
    with open(path, "ab") as torn:
        torn.write(b'{"role": "user", "content": "cut sh')     # what a crash leaves
    reader = subprocess.Popen(
        ["strace", "-qq", "-o", os.devnull, "-P", str(path), "-e", "trace=read",
         "-e", "inject=read:delay_exit=400000",
         sys.executable, "-c", READER, store.__file__, str(folder)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline().strip() == "ready"
        time.sleep(0.2)             # the reader is now inside its first read() of the log
        with store.SessionLog(folder, "quest") as log:
            assert log.open_for_append() == DAY         # the repair: cut, then a marker
        outcome = json.loads(reader.stdout.readline())
    finally:
        reader.kill()
        reader.wait()
    assert "CorruptLog" not in outcome, (
        "a reader took the log for damaged while a writer repaired its tail; the log is "
        f"healthy. It said: {outcome['CorruptLog'][:300]}")
    assert outcome["loaded"] == DAY


# --- 6. a hard-linked lock file ------------------------------------------------------------


def test_a_lock_file_hard_linked_to_another_log_is_refused_never_truncated(store, tmp_path):
    folder = tmp_path / "sessions"
    with store.SessionLog(folder, "other") as log:
        for message in DAY:
            log.append(message)
    with store.SessionLog(folder, "quest") as log:
        log.append(ASK)
    other = folder / "other.jsonl"
    precious = other.read_bytes()
    os.link(other, folder / "quest.lock")
    try:
        with store.SessionLog(folder, "quest") as log:
            log.open_for_append()
    except OSError as error:
        assert "quest.lock" in str(error), error
    else:
        pytest.fail("a writer took a lock file that is another session's log under a second "
                    "name; it should refuse it (st_nlink > 1)")
    finally:
        assert other.read_bytes() == precious, "the other session's log was overwritten"


# --- 7. nothing read by name after the O_NOFOLLOW open -------------------------------------


def test_a_log_swapped_after_the_writer_opened_it_is_neither_resumed_nor_cut(store, tmp_path,
                                                                          child):
    """Between the writer's open and its read, someone renames a decoy over the log's name
    (the real log kept aside): the writer resumes the real history and cuts nothing."""
    folder = tmp_path / "sessions"
    with store.SessionLog(folder, "quest") as log:
        for message in DAY * 3:
            log.append(message)
    real = folder / "quest.jsonl"
    precious = real.read_bytes()
    decoy = folder / "decoy"
    decoy.write_bytes(line({"role": "user", "content": "Someone else's story."}) + b'{"tor')
    aside = folder / "aside"

    def work():
        real_open = os.open

        def open_then_swap(path, flags, *args, **kwargs):
            fd = real_open(path, flags, *args, **kwargs)
            if str(path) == str(real) and not aside.exists():
                os.rename(real, aside)
                os.rename(decoy, real)
            return fd

        store.os = SimpleNamespace(**{name: getattr(os, name) for name in dir(os)
                                      if not name.startswith("__")})
        store.os.open = open_then_swap
        with store.SessionLog(folder, "quest") as log:
            return log.open_for_append()

    history = succeeded(child(work))
    assert history == DAY * 3, f"the writer resumed the decoy's history: {history}"
    assert aside.read_bytes() == precious, "the real log was cut by a repair judged on the decoy"


def test_a_lock_file_swapped_for_a_device_gives_no_holder_and_no_memory_error(store, tmp_path,
                                                                              child):
    folder = tmp_path / "sessions"
    folder.mkdir(mode=0o700)
    (folder / "quest.lock").symlink_to("/dev/zero")

    def work():
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[0])
        resource.setrlimit(resource.RLIMIT_AS, (pages * os.sysconf("SC_PAGE_SIZE") + (512 << 20),
                                                hard))
        return store.SessionLog(folder, "quest").holder()

    outcome = child(work)
    assert outcome == {}, f"holder() of a lock file that is a link to /dev/zero: {outcome}"


# --- 8. undo markers name only what came before them ---------------------------------------


def test_an_undo_marker_never_hides_messages_written_after_it(store, tmp_path):
    folder = tmp_path / "sessions"
    folder.mkdir(mode=0o700)
    marker = {"$marker": "undo", "skip": [1, 2, 3, -1], "at": "2026-01-01T00:00:00+00:00"}
    (folder / "quest.jsonl").write_bytes(b"".join(line(m) for m in [ASK, ANSWER, marker,
                                                                     LATER, DONE]))
    shown = store.SessionLog(folder, "quest").load()
    assert shown == [ASK, LATER, DONE], (
        "a marker written after two messages can take back only those two (index 1 here); "
        f"indices 2 and 3 name messages written after it, which it must not hide: {shown}")


# --- 9. durable mode syncs every new name --------------------------------------------------


class FsyncWatch:
    """Wraps os.fsync (the real one still runs) and remembers each (dev, inode) synced."""

    def __init__(self):
        self.synced: set[tuple[int, int]] = set()
        self.real = os.fsync

    def __call__(self, fd):
        info = os.fstat(fd)
        self.synced.add((info.st_dev, info.st_ino))
        self.real(fd)

    def has(self, path: Path) -> bool:
        info = path.stat()
        return (info.st_dev, info.st_ino) in self.synced


def test_durable_mode_syncs_the_parent_of_every_folder_it_makes(store, tmp_path, monkeypatch):
    watch = FsyncWatch()
    monkeypatch.setattr(store.os, "fsync", watch)
    folder = tmp_path / "app" / "data" / "sessions"
    with store.SessionLog(folder, "quest", durable=True) as log:
        log.append(ASK)
    missing = [str(p.relative_to(tmp_path.parent)) for p in
               (tmp_path, tmp_path / "app", tmp_path / "app" / "data", folder)
               if not watch.has(p)]
    assert not missing, ("each new folder's name lives in its parent; durable mode should "
                         f"fsync these folders but did not: {missing}")


def test_durable_mode_syncs_a_blob_it_reuses_that_it_did_not_write(store, tmp_path,
                                                                   monkeypatch):
    folder = tmp_path / "sessions"
    paste = {"role": "user", "content": "The elder's map, copied by hand. " * 400}
    with store.SessionLog(folder, "quick") as log:      # not durable: the blob is not synced
        log.append(paste)
    blob = folder / "blobs" / hashlib.sha256(paste["content"].encode()).hexdigest()
    assert blob.exists()
    watch = FsyncWatch()
    monkeypatch.setattr(store.os, "fsync", watch)
    with store.SessionLog(folder, "careful", durable=True) as log:
        log.append(paste)
    assert watch.has(blob), ("a durable line pointed to a blob that no one ever synced: a "
                             "power cut could keep the line and lose the blob")


# --- 10. no temporary file left behind -----------------------------------------------------


def test_a_failed_rename_leaves_no_temporary_file(store, tmp_path):
    """The blob's name (or a meta file's) is taken by a folder: each try fails, and leaves
    no full copy of the content behind."""
    folder = tmp_path / "sessions"
    paste = {"role": "user", "content": "The elder's map, copied by hand. " * 400}
    digest = hashlib.sha256(paste["content"].encode()).hexdigest()
    (folder / "blobs" / digest / "in-the-way").mkdir(parents=True, mode=0o700)
    (folder / "copy.meta.json" / "in-the-way").mkdir(parents=True, mode=0o700)
    with store.SessionLog(folder, "quest") as log:
        for _ in range(3):
            with pytest.raises(OSError):
                log.append(paste)
    for _ in range(3):
        with pytest.raises(OSError):
            store.write_whole(folder / "copy.meta.json", b'{"format": 1}')
    left = sorted(p.name for p in list((folder / "blobs").iterdir()) + list(folder.iterdir())
                  if p.name.endswith(".tmp"))
    assert left == [], f"temporary files left behind by failed renames: {left}"


# --- 11. a write larger than one write() can take -----------------------------------------


def available_memory() -> int:
    with open("/proc/meminfo") as info:
        for row in info:
            if row.startswith("MemAvailable:"):
                return int(row.split()[1]) * 1024
    return 0


def test_a_blob_over_2_gib_is_stored_whole(store, tmp_path, child):
    """One write() moves at most 2 GiB - 4 KiB on Linux. A larger blob is written in as many
    calls as it takes, not refused as 'short write (is the disk full?)'."""
    size = (2 << 30) + 4096
    if available_memory() < 3 * size:
        pytest.skip(f"needs about {3 * size >> 30} GiB of free memory")
    folder = tmp_path / "sessions"

    def work():
        data = b"x" * size
        log = store.SessionLog(folder, "quest")
        log.append(ASK)
        digest = log.store_blob(data)
        log.close()
        return [digest == hashlib.sha256(data).hexdigest(),
                (folder / "blobs" / digest).stat().st_size]

    try:
        outcome = succeeded(child(work))
        assert outcome == [True, size], outcome
    finally:
        for blob in (folder / "blobs").glob("*"):
            blob.unlink()


def test_a_compaction_marker_torn_by_a_crash_is_cut_and_the_session_compacts_again(store,
                                                                                  tmp_path):
    """A crash while the compaction marker was being written leaves half a line: the next
    writer cuts it like any torn tail (lesson 04), finds no compaction, and the next request
    over the budget summarises again; every message is still there."""
    if not hasattr(store.SessionLog, "compact"):
        pytest.skip("this store has no compaction (it arrives in lesson 08)")
    said = [{"role": "user", "content": f"day {k}"} if k % 2 == 0 else
            {"role": "assistant", "content": f"rest {k}"} for k in range(10)]
    path = tmp_path / "quest.jsonl"
    marker = line({"$marker": "compaction", "summary": "half", "upto": 8})
    path.write_bytes(b"".join(map(line, said)) + marker[:len(marker) // 2])
    model = ScriptedModel([say("Onward.")], summarise=lambda body: "again")
    with store.SessionLog(tmp_path, "quest") as log:
        agent = store.Agent(model.client(), model=MODEL_NAME, tools=Town(), session=log,
                            budget=10**6)
        assert agent.messages == said and agent.compaction is None
        assert agent.compact() is True
    with store.SessionLog(tmp_path, "quest") as log:
        assert log.load() == said
        assert log.compacted == store.Compaction("again", 8)
    assert len(model.summary_requests) == 1
