"""Privacy and side-chains at the store's edges (issue 23): erase, delete, expire and collect
when a system call fails, another process is in the middle of its work, or the disk is full.

Each test failed against the store before the issue was fixed. The faults are real: an errno
raised at the OS call the store makes (os.open, os.fsync, os.write ... wrapped for one path or
one moment), a real second process stopped between its blob and its line, a real SIGKILL, a
file size limit that fills the disk for one process.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from sessionlab import course
from sessionlab.scripted import MODEL_NAME, ScriptedModel, call, say, use
from sessionlab.testing import in_child
from sessionlab.town import HelperTown, Town

SECRET = "My sister Ilse lives at 12 Elm Street, by the mill."
LARGE = "Ilse's diary: " + "the cave is cold and the mill is near. " * 150    # a blob
ROOT = Path(__file__).resolve().parents[2]
BLOB_WRITER = ROOT / "lessons" / "09_privacy" / "blob_writer.py"


@pytest.fixture
def private(store):
    if not hasattr(store, "delete_session"):
        pytest.skip("this store has no privacy operations (lesson 09)")
    return store


@pytest.fixture
def helpers(store):
    if not hasattr(store, "sidechains"):
        pytest.skip("this store has no side-chains (lesson 10)")
    return store


def holding(folder: Path, text: str) -> list[str]:
    needle = text.encode()
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if p.is_file() and not p.is_symlink() and needle in p.read_bytes())


def lines_of(path: Path) -> list[dict]:
    return [json.loads(raw) for raw in path.read_bytes().split(b"\n") if raw]


def failing(monkeypatch, name: str, error: int, when) -> None:
    """os.<name> raises OSError(error) each time `when(*args)` is true."""
    real = getattr(os, name)

    def wrapped(*args, **kwargs):
        if when(*args):
            raise OSError(error, os.strerror(error), str(args[0]) if args else None)
        return real(*args, **kwargs)
    monkeypatch.setattr(os, name, wrapped)


def age(path: Path, days: float) -> None:
    then = time.time() - days * 86400
    os.utime(path, (then, then), follow_symlinks=False)


def with_helper(store, folder: Path, question: str = SECRET, answer: str = "Noted.",
                user: str = SECRET) -> None:
    """A session whose user message went to a helper: its words are in the parent's call
    (the question), in the side-chain (the helper's user message), and in the answer."""
    model = ScriptedModel([use(call("ask_helper", question=question)), say(answer),
                           say("The helper says: " + answer)])
    with store.SessionLog(folder, "quest") as log:
        agent = store.Agent(model.client(), model=MODEL_NAME, tools=HelperTown(),
                            session=log)
        agent.run(user)


# --- 1. an erase that fails after its rename -----------------------------------------------


@pytest.mark.parametrize("step", ["open", "fsync", "utime", "fstat"])
def test_a_failure_after_the_erase_renamed_never_acknowledges_into_an_unnamed_file(
        private, tmp_path, monkeypatch, step):
    """EMFILE, EIO or ENOSPC at any step after the rewritten log took the log's name: the
    writer then writes to the file the name reaches, or refuses every write; a message it
    acknowledges is in the log when the session is opened again."""
    store = private
    folder = tmp_path / "sessions"
    log = store.SessionLog(folder, "quest")
    log.append({"role": "user", "content": SECRET})
    log.append({"role": "assistant", "content": "Noted."})
    renamed = []
    real_replace = os.replace

    def replace(source, target, *args, **kwargs):
        real_replace(source, target, *args, **kwargs)
        if str(target).endswith("quest.jsonl"):
            renamed.append(True)
    monkeypatch.setattr(os, "replace", replace)
    failing(monkeypatch, step, errno.EIO if step == "fsync" else errno.EMFILE,
            lambda *args: bool(renamed))
    try:
        log.erase(0)
    except OSError:
        pass
    monkeypatch.undo()
    assert renamed, "the erase should have got as far as its rename"
    try:
        log.append({"role": "user", "content": "Acknowledged after the erase."})
        acknowledged = True
    except Exception:                       # noqa: BLE001 - any refusal will do
        acknowledged = False
    finally:
        log.close()
    contents = [m["content"] for m in store.SessionLog(folder, "quest").load()]
    if acknowledged:
        assert contents[-1] == "Acknowledged after the erase.", (
            f"a failure at {step} after the rename: append() returned, and the message "
            f"is not in the log (it went to the old, unlinked file): {contents}")
    assert SECRET not in contents, "the rename happened: the log is the erased one"


def test_an_agent_whose_erase_failed_after_the_rewrite_keeps_no_words_in_memory(
        private, tmp_path, monkeypatch):
    """The log was rewritten, then a later step failed: the agent's next request must not
    carry the erased words (it would send them to the model again)."""
    store = private
    folder = tmp_path / "sessions"
    model = ScriptedModel([say("Noted."), say("On we go.")])
    with store.SessionLog(folder, "quest") as log:
        agent = store.Agent(model.client(), model=MODEL_NAME, tools=Town(), session=log)
        agent.run(SECRET)
        renamed = []
        real_replace = os.replace

        def replace(source, target, *args, **kwargs):
            real_replace(source, target, *args, **kwargs)
            renamed.append(True)
        monkeypatch.setattr(os, "replace", replace)
        failing(monkeypatch, "open", errno.EMFILE, lambda *args: bool(renamed))
        with pytest.raises(OSError):
            agent.erase(0)
        monkeypatch.undo()
        assert SECRET not in json.dumps(agent.messages), (
            "the erase failed after the log was rewritten, and the agent still holds the "
            "words in memory")


# --- 2. delete: the children first, and a delete that stopped is finished by the next ------


def test_a_delete_refused_by_a_busy_side_chain_deletes_nothing_and_a_second_finishes(
        helpers, tmp_path):
    """A side-chain another writer holds: delete says so (SessionBusy) before touching the
    parent, and the next delete, once the side-chain is free, removes everything."""
    store = helpers
    folder = tmp_path / "sessions"
    with_helper(store, folder)
    [(_, chain)] = store.sidechains(folder, "quest")
    busy = store.SessionLog(chain.parent, chain.name[:-len(".jsonl")])
    busy.open_for_append()
    try:
        with pytest.raises(store.SessionBusy):
            store.delete_session(folder, "quest")
        assert (folder / "quest.jsonl").exists(), (
            "delete removed the parent's log although a side-chain was busy: run again, "
            "it would say 'nothing to delete' and the side-chains would stay for good")
    finally:
        busy.close()
    assert store.delete_session(folder, "quest") is True
    assert sorted(p.name for p in folder.iterdir()) in ([], ["blobs"]), (
        f"the second delete should remove everything: {sorted(folder.iterdir())}")


def test_a_delete_stopped_midway_by_an_io_error_is_finished_by_running_it_again(
        helpers, tmp_path, monkeypatch):
    """EIO unlinking a side-chain's log: the delete raises; running it again finishes,
    side-chains included, and nothing of the session is left."""
    store = helpers
    folder = tmp_path / "sessions"
    with_helper(store, folder)
    failing(monkeypatch, "unlink", errno.EIO,
            lambda *args: ".sidechains" in str(args[0]) and str(args[0]).endswith(".jsonl"))
    with pytest.raises(OSError):
        store.delete_session(folder, "quest")
    monkeypatch.undo()
    assert store.delete_session(folder, "quest") is True, (
        "the delete that stopped midway left files: deleting again must finish it")
    assert holding(folder, "Ilse") == [], holding(folder, "Ilse")
    assert not (folder / "quest.sidechains").exists()


def test_expire_finds_the_side_chains_a_stopped_delete_left(helpers, tmp_path):
    """A parent log gone and its side-chains left (a delete of an older store stopped
    midway): expire deletes them once they are old, and delete_session does too."""
    store = helpers
    folder = tmp_path / "sessions"
    with_helper(store, folder)
    (folder / "quest.jsonl").unlink()
    for path in (folder / "quest.sidechains").rglob("*"):
        age(path, 40)
    age(folder / "quest.sidechains", 40)
    deleted, busy = store.expire(folder)
    assert (deleted, busy) == (["quest"], []), (deleted, busy)
    assert holding(folder, "Ilse") == [] and not (folder / "quest.sidechains").exists()


# --- 3. erase reaches every place the store keeps the words ---------------------------------


def test_erase_reaches_the_arguments_the_side_chain_and_the_agents_memory(
        helpers, tmp_path):
    """The user's words went to a helper: erase takes them from the call's arguments, the
    side-chain's log and the agent's memory; the next request does not carry them."""
    store = helpers
    folder = tmp_path / "sessions"
    model = ScriptedModel([use(call("ask_helper", question=SECRET)),
                           say("She is safe, " + SECRET), say("Noted."),
                           say("On we go.")])
    with store.SessionLog(folder, "quest") as log:
        agent = store.Agent(model.client(), model=MODEL_NAME, tools=HelperTown(),
                            session=log)
        agent.run(SECRET)
        agent.erase(0)
        agent.run("Go on.")
    assert SECRET not in json.dumps(model.requests[-1]["messages"]), (
        "the request after the erase still carries the erased words: "
        + json.dumps(model.requests[-1]["messages"])[:400])
    assert holding(folder, "Ilse") == [], (
        f"after the erase, these files still hold the words: {holding(folder, 'Ilse')}")


def test_erase_reaches_a_summary_that_quotes_part_of_the_message(private, tmp_path):
    """A compaction summary quoting part of the erased message (not all of it) loses it."""
    store = private
    folder = tmp_path / "sessions"
    with store.SessionLog(folder, "quest") as log:
        log.append({"role": "user", "content": SECRET})
        log.append({"role": "assistant", "content": "Noted."})
        log.compact("The user said their sister Ilse lives at 12 Elm Street; noted.", 0)
        log.erase(0)
    assert holding(folder, "Ilse lives at 12 Elm Street") == [], (
        "the summary still quotes the erased words: "
        f"{[e.get('summary') for e in lines_of(folder / 'quest.jsonl')]}")


def test_erase_says_which_side_chain_it_could_not_reach(helpers, tmp_path):
    """A side-chain another writer holds cannot be rewritten: erase says so, naming it,
    and still erases the parent."""
    store = helpers
    folder = tmp_path / "sessions"
    with_helper(store, folder)
    [(_, chain)] = store.sidechains(folder, "quest")
    busy = store.SessionLog(chain.parent, chain.name[:-len(".jsonl")])
    busy.open_for_append()
    try:
        with store.SessionLog(folder, "quest") as log:
            with pytest.raises(store.EraseError) as raised:
                log.erase(0)
    finally:
        busy.close()
    assert chain.name in str(raised.value), str(raised.value)
    assert holding(folder, "Ilse") == [str(chain.relative_to(folder))], holding(folder, "Ilse")


# --- 4. and 5. unreadable means keep; side-chains' blobs ------------------------------------


def test_a_log_that_cannot_be_read_keeps_its_blobs(private, tmp_path, monkeypatch):
    """EIO reading another session's log while collecting: its blobs are kept (the
    collection says it could not read it), and that session still loads."""
    store = private
    folder = tmp_path / "sessions"
    with store.SessionLog(folder, "other") as log:
        log.append({"role": "user", "content": LARGE})
    for blob in (folder / "blobs").iterdir():
        age(blob, 2)
    failing(monkeypatch, "open", errno.EIO,
            lambda *args: str(args[0]).endswith("other.jsonl"))
    try:
        store.collect_blobs(folder, grace=0)
    except OSError as error:
        assert "other.jsonl" in str(error), error
    monkeypatch.undo()
    assert store.SessionLog(folder, "other").load()[0]["content"] == LARGE


def test_a_torn_side_chain_line_does_not_keep_its_blobs_from_delete(helpers, tmp_path):
    store = helpers
    folder = tmp_path / "sessions"
    with_helper(store, folder, answer=LARGE)
    [(_, chain)] = store.sidechains(folder, "quest")
    with open(chain, "ab") as file:        # a crash in the middle of a blob's line
        file.write(b'{"role": "user", "content": {"$blob": "' + b"ab" * 20)
    store.delete_session(folder, "quest")
    assert holding(folder, "Ilse") == [], holding(folder, "Ilse")


def test_collect_visits_side_chains_and_never_follows_a_linked_blobs_folder(
        helpers, tmp_path):
    store = helpers
    folder = tmp_path / "sessions"
    with_helper(store, folder, answer=LARGE)
    [(_, chain)] = store.sidechains(folder, "quest")
    chain.unlink()                                  # its blob is referenced no more
    for blob in (chain.parent / "blobs").iterdir():
        age(blob, 2)
    removed = store.collect_blobs(folder)
    assert list((chain.parent / "blobs").iterdir()) == [], (
        f"collect left the side-chain's unreferenced old blob; it removed {removed}")
    other = tmp_path / "other"
    with store.SessionLog(other, "mine") as log:
        log.append({"role": "user", "content": LARGE})
    (other / "mine.jsonl").unlink()
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "blobs").symlink_to(other / "blobs")
    store.collect_blobs(planted, grace=0)
    assert len(list((other / "blobs").iterdir())) == 1, (
        "collect followed a blobs folder that is a link and removed another folder's blobs")


# --- 6. a blob reused at the moment a delete starts --------------------------------------


def test_a_blob_a_writer_in_another_process_stored_again_survives_a_delete(
        private, tmp_path):
    """A real second process stores the content of a session being deleted and stops
    before its line (its touch came before the delete began): the blob stays, and its log
    loads once it is done."""
    store = private
    folder = tmp_path / "sessions"
    with store.SessionLog(folder, "old") as log:
        log.append({"role": "user", "content": LARGE})
    text = tmp_path / "text"
    text.write_text(LARGE)
    module = course.latest_solution(ROOT).module_path("solution")
    writer = subprocess.Popen(
        [sys.executable, str(BLOB_WRITER), str(module), str(folder), "new", str(text)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "stored"
        time.sleep(0.05)        # the writer's touch is well before the delete begins
        store.delete_session(folder, "old")
        writer.stdin.write("go\n")
        writer.stdin.flush()
        assert writer.stdout.readline().strip() == "done"
    finally:
        writer.kill()
        writer.wait()
    try:
        assert store.SessionLog(folder, "new").load()[0]["content"] == LARGE
    except store.BlobError as error:
        pytest.fail(f"the delete removed a blob another writer was pointing to: {error}")


# --- 7. a full disk -----------------------------------------------------------------------


def test_delete_and_expire_work_on_a_full_disk(private, tmp_path, child):
    """No byte can be written (ENOSPC at every write): delete and expire, which only free
    space, still work."""
    store = private
    folder = tmp_path / "sessions"
    for name in ("quest", "old"):
        with store.SessionLog(folder, name) as log:
            log.append({"role": "user", "content": SECRET})
    age(folder / "old.jsonl", 40)

    def work():
        real_write = os.write

        real_pwrite = os.pwrite

        def full(*args):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        os.write = os.pwrite = full
        try:
            return [store.delete_session(folder, "quest"), store.expire(folder)]
        finally:
            os.write, os.pwrite = real_write, real_pwrite
    outcome = child(work)
    assert outcome == [True, [["old"], []]], outcome
    assert holding(folder, "Ilse") == []


# --- 8. two collections at once ----------------------------------------------------------


def test_two_collections_at_once_and_an_erase_during_one_raise_nothing(
        private, tmp_path, monkeypatch):
    store = private
    folder = tmp_path / "sessions"
    for number in range(3):
        with store.SessionLog(folder, f"s{number}") as log:
            log.append({"role": "user", "content": f"{number} " + LARGE})
        (folder / f"s{number}.jsonl").unlink()
    with store.SessionLog(folder, "quest") as log:
        log.append({"role": "user", "content": SECRET + " " + LARGE})
    nested = []
    real_rename = os.rename
    real_unlink = os.unlink

    def during(*args, real, **kwargs):
        done = real(*args, **kwargs)
        if not nested and "blobs" in str(args[0]):
            nested.append(True)
            store.collect_blobs(folder, grace=0)        # a second collection, right now
            with store.SessionLog(folder, "quest") as other:
                other.erase(0)
        return done
    monkeypatch.setattr(os, "rename", lambda *a, **k: during(*a, real=real_rename, **k))
    monkeypatch.setattr(os, "unlink", lambda *a, **k: during(*a, real=real_unlink, **k))
    store.collect_blobs(folder, grace=0)
    monkeypatch.undo()
    assert nested
    assert holding(folder, "Ilse") == [], holding(folder, "Ilse")


# --- 9. smaller -------------------------------------------------------------------------


def test_a_folder_named_like_a_log_does_not_stop_expire(private, tmp_path):
    store = private
    folder = tmp_path / "sessions"
    (folder / "b.jsonl").mkdir(parents=True)
    age(folder / "b.jsonl", 40)
    with store.SessionLog(folder, "c") as log:
        log.append({"role": "user", "content": SECRET})
    age(folder / "c.jsonl", 40)
    assert store.expire(folder) == (["c"], [])
    assert (folder / "b.jsonl").is_dir()


def test_deleting_a_session_leaves_the_temporary_files_of_another_alone(private, tmp_path):
    store = private
    folder = tmp_path / "sessions"
    with store.SessionLog(folder, "quest") as log:
        log.append({"role": "user", "content": SECRET})
    theirs = folder / ".quest.jsonl.jsonl.ab12cd34.tmp"      # session "quest.jsonl"'s fork
    theirs.write_text("a fork of quest.jsonl in progress")
    store.delete_session(folder, "quest")
    assert theirs.exists(), "delete of 'quest' removed a temporary file of 'quest.jsonl'"


def test_delete_after_a_helper_was_killed_leaves_no_side_chain_folder(helpers, tmp_path):
    """A helper killed by SIGKILL while it held its lock: the delete removes its lock file
    and the whole side-chains folder."""
    store = helpers
    folder = tmp_path / "sessions"

    def helper_dies():
        model = ScriptedModel([use(call("ask_helper", question=SECRET))])
        take_lock = store.SessionLog._lock

        def dies_once_locked(log):
            take_lock(log)
            if log.folder.name.endswith(".sidechains"):    # the helper, before its log
                os.kill(os.getpid(), signal.SIGKILL)
        store.SessionLog._lock = dies_once_locked
        with store.SessionLog(folder, "quest") as log:
            agent = store.Agent(model.client(), model=MODEL_NAME, tools=HelperTown(),
                                session=log)
            agent.run(SECRET)
    with pytest.raises(AssertionError):
        in_child(helper_dies)
    chains = folder / "quest.sidechains"
    assert list(chains.glob("*.lock")), "the killed helper should have left its lock"
    assert store.delete_session(folder, "quest") is True
    assert not chains.exists(), sorted(p.name for p in chains.iterdir())


def test_delete_on_a_folder_it_cannot_read_says_so(private, child, request):
    """A sessions folder its user may not read (run as `nobody`): delete raises the
    permission error naming the folder, rather than saying there was nothing to delete."""
    store = private
    root = Path(tempfile.mkdtemp(prefix="sessionlab-unreadable-"))
    request.addfinalizer(lambda: shutil.rmtree(root, ignore_errors=True))
    root.chmod(0o755)
    folder = root / "sessions"
    with store.SessionLog(folder, "quest") as log:
        log.append({"role": "user", "content": SECRET})
    folder.chmod(0o000)

    def work():
        if os.geteuid() == 0:
            os.setgid(65534)
            os.setuid(65534)
        try:
            return store.delete_session(folder, "quest")
        except PermissionError as error:
            return f"PermissionError {error.filename}"
    try:
        outcome = child(work)
    finally:
        folder.chmod(0o700)
    assert isinstance(outcome, str) and "sessions" in outcome, (
        f"delete on a folder it cannot read returned {outcome!r}: it should raise the "
        "permission error, not say there was nothing to delete")
    assert (folder / "quest.jsonl").exists()
