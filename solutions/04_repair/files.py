# Generated from course/files.py for lesson 04_repair:
# edit that source, then run `sessionlab dev generate`.
"""Careful file operations the store is built on.

A write that loops until every byte is out, a file published whole under its name or not
at all (temporary file, then rename or link), and the fsyncs that make a new file, and
the folder entry that names it, survive a power cut. Each exists because a plainer call
loses data in some crash the lessons show.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from datetime import datetime, timezone
from pathlib import Path


class SessionNotFound(FileNotFoundError):
    """The session to fork from has no log."""


class SessionExists(FileExistsError):
    """The new session's id is already taken."""


def read_file(path: Path) -> bytes:
    """The bytes of one of a session's files, refusing a symbolic link (OSError, ELOOP)
    and anything but a regular file.

    A session's files are plain files in its folder; a link planted there could point
    anywhere: another user's session, a device that never ends.
    """
    # O_NONBLOCK: opening a FIFO planted there returns at once, never waits forever.
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        return read_all(fd, path)
    finally:
        os.close(fd)


def read_all(fd: int, path: Path) -> bytes:
    """Every byte of the open file `fd`, from its start, read through the descriptor.

    Never by name again: between the open and the read, the name may have been given to
    another file. OSError for what is not a regular file (a FIFO, a device, a folder).
    """
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        raise OSError(errno.EISDIR if stat.S_ISDIR(mode) else errno.EINVAL,
                      "not a regular file, refusing to read it", str(path))
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        with open(fd, "rb", closefd=False) as file:
            return file.read()
    except OSError as error:
        # A read through a descriptor fails naming no file (EIO from a failing disk):
        # the error names the log, as every other error of the course does
        if error.filename is not None:
            raise
        raise OSError(error.errno, error.strerror, str(path)) from None


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# The most one write() moves on Linux (2 GiB less a page); larger calls come back short.
MAX_WRITE = 0x7FFFF000


def make_folder(folder: Path, durable: bool = False) -> None:
    """Create `folder` and any parents it lacks, each readable by its owner only (0700).

    A session holds what a person said, and its name may say about what: other users
    should not even list them. (Path.mkdir(parents=True) would leave the parents to the
    umask: 0777 under umask 000.) With durable=True each new folder's name is synced in
    its parent.
    """
    if folder.is_dir():
        # Every writer calls this as it opens a session, and the folder is nearly
        # always there already: one stat, rather than one for each of its parents.
        return
    for path in [*reversed(folder.parents), folder]:
        if not path.is_dir():
            path.mkdir(mode=0o700, exist_ok=True)
            if durable:
                # A folder's name lives in its parent: until the parent is synced, a
                # power cut can lose the new folder, and every file in it with it.
                parent = os.open(path.parent, os.O_RDONLY)
                try:
                    os.fsync(parent)
                finally:
                    os.close(parent)


def check_still_linked(fd: int, path: Path) -> None:
    """Raise OSError (ESTALE) when the file open as `fd` has no name left.

    A writer keeps its log open. If a person removes the log, or saves another file
    over its name (as an editor does), the file the writer holds is unlinked: what it
    adds there no reader would ever find. (A log renamed, kept under another name, is
    still a file someone can read: its writer goes on writing to it.)
    """
    if os.fstat(fd).st_nlink == 0:
        raise OSError(errno.ESTALE, "the log was removed, or another file saved over "
                      "it, since this writer opened it: no name reaches the file it "
                      "holds, so nothing was written there. Close the writer and open "
                      "the session again", str(path))


def fsync_folder(folder: Path) -> None:
    """fsync a folder, so that the names just created in it survive a power cut."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish_new(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Publish a fork's file at `path` holding `data`, all or nothing (lesson 03).

    SessionExists when `path` exists: what is there stays as it was. A crash of the
    process leaves at worst a stray temporary file, never a half-written session.
    Surviving a power cut takes durable=True: the bytes, then the new name, are fsynced
    before it returns.

    When it raises, whichever step failed, `path` is not there and no temporary file is
    left: a step after the link (EIO removing the temporary name, or syncing the
    folder) takes the file back (see withdraw) before the error goes on.
    """
    temp = _write_temp(path, data, durable)
    try:
        # The real name by a link, which fails if the name exists (os.replace would
        # silently overwrite it)
        os.link(temp, path)
    except BaseException as error:
        os.unlink(temp)
        if isinstance(error, FileExistsError):
            raise SessionExists(f"cannot create {path}: it already exists") from None
        raise
    step = "removing its temporary name"
    try:
        os.unlink(temp)     # the file's second name: it would share every later write
        if durable:
            step = "syncing its folder"
            fsync_folder(path.parent)
    except OSError as error:
        withdraw(path, temp, error)
        # fsync's error names no file: say which, and that nothing is left
        raise OSError(error.errno, f"{path} was not created: {error.strerror} while "
                      f"{step}, so it was taken back") from error
    except BaseException as error:
        withdraw(path, temp, error)
        raise


def withdraw(path: Path, temp: str, error: BaseException) -> None:
    """Take back `path`, created a moment ago, after `error` in a step that followed.

    Back, rather than on: the caller gets an exception, which says "not created", so a
    retry must find the name free. And going on cannot make the file whole: a temporary
    name left is a second name of the file, which every later write would reach and no
    erase would; a folder whose sync failed may lose the name at a power cut, and
    durable promised it would not. The caller holds the name alone (a fork holds the
    new id's lock from lesson 05): no one has written to the file. No sync after: a
    power cut may still bring the name back, and a durable file comes back whole (its
    bytes were synced before the link).
    """
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as undo:
        # Two faults: the file stays, whole (its bytes were written, and synced if
        # durable, before the link). Say so: the error alone would read "not created".
        raise OSError(undo.errno, f"{path} is there, whole, though creating it "
                      f"failed ({error}): taking it back failed too "
                      f"({undo.strerror})") from error
    try:
        os.unlink(temp)
    except OSError:
        pass    # a stray temporary file, as a crash there leaves: no session's name


def write_whole(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace `path` with `data` atomically: readers see the old file or the new."""
    temp = _write_temp(path, data, durable)
    try:
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)     # a failed rename (a folder at that name): no copy left
        raise
    if durable:
        try:
            fsync_folder(path.parent)
        except OSError as error:    # fsync's error names no file: say which
            raise OSError(error.errno, f"{path} was written, but {error.strerror} "
                          "while syncing its folder: its name may not survive a power "
                          "cut") from error


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data` to a file no one reads yet, in as many write() calls as it
    takes.

    Unlike a log line, such a file need not land in one write: one call moves at most
    2 GiB on Linux, and a full disk then shows as the next call's own error (ENOSPC,
    EFBIG), not as a short write.
    """
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _write_temp(path: Path, data: bytes, durable: bool) -> str:
    make_folder(path.parent, durable)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        write_all(fd, data)
        if durable:
            os.fsync(fd)    # the bytes are on disk before the name points to them
    except BaseException as error:
        # A write that failed (a full disk) leaves no half-written file behind
        os.unlink(temp)
        if isinstance(error, OSError) and error.filename is None:
            # write's and fsync's errors name no file: say which, and that no file
            # was made or changed
            raise OSError(error.errno, f"{error.strerror} while writing {path}, which "
                          "was not created or changed") from error
        raise
    finally:
        os.close(fd)
    return temp
