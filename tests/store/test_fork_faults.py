"""A fork that fails after its log got its name (issue 23, item 10).

A fork publishes its log last: the moment the log has its name, the fork exists. Two steps
still follow (removing the temporary file's name, and in durable mode syncing the folder),
and either can fail with EIO on a failing disk. The store takes the log back then, and the
meta file with it: an error means "no fork", and the same fork, run again, must work rather
than say the session exists. Each fault is an errno raised at the OS call the store makes
(os.unlink for one file, os.fsync for the folder once the log is there); each test failed
before the fix, which left the log, removed its meta file and raised.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

HISTORY = [{"role": "user", "content": "Ask the elder about the cave."},
           {"role": "assistant", "content": "The elder says: bring a rope."}]


@pytest.fixture
def folder(store, tmp_path) -> Path:
    """A sessions folder holding session "quest" (two messages)."""
    sessions = tmp_path / "sessions"
    with store.SessionLog(sessions, "quest") as log:
        for message in HISTORY:
            log.append(message)
    return sessions


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def is_temporary_of_fork(path: object) -> bool:
    name = os.path.basename(str(path))
    return name.startswith(".what-if.jsonl.") and name.endswith(".tmp")


def failing_unlink(monkeypatch, folder: Path, times: int | None, also=lambda path: False):
    """os.unlink raises EIO for the fork's temporary file: the first `times` tries once
    its log exists, or (None) every try; and for any path `also` accepts. Returns the
    list of paths it failed."""
    real = os.unlink
    failed: list[str] = []

    def unlink(path, *args, **kwargs):
        linked = (folder / "what-if.jsonl").exists()
        temporary = is_temporary_of_fork(path) and (
            times is None or (linked and len(failed) < times))
        if temporary or also(path):
            failed.append(str(path))
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(path))
        return real(path, *args, **kwargs)
    monkeypatch.setattr(os, "unlink", unlink)
    return failed


def failing_folder_sync(monkeypatch, folder: Path, when) -> list[bool]:
    """os.fsync of a folder raises EIO once, the first time `when()` is true."""
    real = os.fsync
    failed: list[bool] = []

    def fsync(fd):
        if not failed and stat.S_ISDIR(os.fstat(fd).st_mode) and when():
            failed.append(True)
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(fd)
    monkeypatch.setattr(os, "fsync", fsync)
    return failed


def assert_no_fork_and_the_retry_works(store, folder: Path, error: BaseException | None,
                                       fault: str) -> None:
    assert isinstance(error, OSError) and error.errno == errno.EIO, (
        f"{fault}: the fork should raise the disk's error (EIO); it "
        + ("returned" if error is None else f"raised {type(error).__name__}: {error}"))
    assert names(folder) == ["quest.jsonl"], (
        f"{fault}: the fork raised, so it must leave nothing; the folder holds "
        f"{names(folder)}")
    assert "what-if" in str(error), f"the error should name the fork: {error}"
    try:
        store.fork(folder, "quest", "what-if", durable=True)
    except Exception as retry:      # noqa: BLE001 - the failure is the point
        pytest.fail(f"{fault}: the fork failed, and the same fork, run again with the disk "
                    f"well, failed too: {type(retry).__name__}: {retry}")
    assert store.SessionLog(folder, "what-if").load() == HISTORY
    assert os.stat(folder / "what-if.jsonl").st_nlink == 1, "the fork's log has one name"


def fork(store, folder: Path, **options) -> BaseException | None:
    try:
        store.fork(folder, "quest", "what-if", **options)
    except Exception as error:      # noqa: BLE001
        return error
    return None


@pytest.mark.parametrize("durable", [False, True])
def test_eio_removing_the_forks_temporary_file_leaves_no_fork(store, folder, monkeypatch,
                                                                 durable):
    """EIO unlinking the temporary file after the link: the log is taken back with its meta
    file, and the retry works (it was refused with "the session exists")."""
    failed = failing_unlink(monkeypatch, folder, times=1)
    error = fork(store, folder, durable=durable)
    monkeypatch.undo()
    assert failed, "the fault should have been injected: no temporary file was unlinked"
    assert_no_fork_and_the_retry_works(store, folder, error,
                                       "EIO removing the fork's temporary file")


def test_eio_syncing_the_folder_after_the_link_leaves_no_fork(store, folder, monkeypatch):
    """Durable: EIO from the folder's fsync once the log has its name. Going on would
    report a durable fork whose name may not survive a power cut; it is taken back."""
    failed = failing_folder_sync(monkeypatch, folder,
                                 lambda: (folder / "what-if.jsonl").exists())
    error = fork(store, folder, durable=True)
    monkeypatch.undo()
    assert failed, "the fault should have been injected: the folder was not synced"
    assert_no_fork_and_the_retry_works(store, folder, error,
                                       "EIO syncing the folder after the log's link")


def test_eio_syncing_the_folder_after_the_meta_file_leaves_no_fork(store, folder,
                                                                    monkeypatch):
    """Durable: EIO from the folder's fsync right after the meta file's rename, before the
    log: the meta file goes too."""
    failed = failing_folder_sync(
        monkeypatch, folder, lambda: (folder / "what-if.meta.json").exists()
        and not (folder / "what-if.jsonl").exists())
    error = fork(store, folder, durable=True)
    monkeypatch.undo()
    assert failed, "the fault should have been injected: the folder was not synced"
    assert_no_fork_and_the_retry_works(store, folder, error,
                                       "EIO syncing the folder after the meta file")


def test_a_temporary_file_that_cannot_be_removed_never_keeps_the_fork(store, folder,
                                                                       monkeypatch):
    """Every unlink of the temporary file fails: the fork raises, no session is there
    (a retry is not told the session exists), and what stays is a stray temporary file,
    no second name of a live log."""
    failing_unlink(monkeypatch, folder, times=None)
    error = fork(store, folder)
    again = fork(store, folder)
    monkeypatch.undo()
    assert isinstance(error, OSError) and error.errno == errno.EIO, repr(error)
    assert not isinstance(again, FileExistsError), (
        f"the fork failed and left no session, yet the retry says it exists: {again}")
    left = names(folder)
    assert "what-if.jsonl" not in left and "what-if.meta.json" not in left, left
    strays = [name for name in left if is_temporary_of_fork(name)]
    assert strays and all(os.stat(folder / name).st_nlink == 1 for name in strays), left
    store.fork(folder, "quest", "what-if")
    assert store.SessionLog(folder, "what-if").load() == HISTORY


def test_a_fork_that_cannot_be_taken_back_says_its_log_is_there(store, folder, monkeypatch):
    """Two faults: EIO unlinking the temporary file, then EIO unlinking the log to take it
    back. The log stays, whole; the error says so, for "failed" alone would be a lie."""
    failing_unlink(monkeypatch, folder, times=1,
                   also=lambda path: str(path) == str(folder / "what-if.jsonl"))
    error = fork(store, folder)
    monkeypatch.undo()
    assert isinstance(error, OSError), repr(error)
    assert "what-if.jsonl" in str(error) and "is there" in str(error), (
        f"the log could not be taken back: the error should say it is there; it says "
        f"{error}")
    assert store.SessionLog(folder, "what-if").load() == HISTORY
