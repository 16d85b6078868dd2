"""Reading what lies in a lesson folder, a state folder or beside a log without being fooled.

A folder a person works in holds more than their files: an editor's lock (Emacs' `.#agent.py`,
a symlink to nowhere), swap files (vim's `.agent.py.swp`), backups (`agent.py~`, `#agent.py#`),
and now and then a pipe, a socket or a folder where a file was expected. The kit reads such
folders in many places (the cache key of a lesson's tests, the watch loop's look at the files,
a session's meta and lock files, its own state files); each goes through here, so that:

- editor litter is never taken for the student's work (a save is not a save of agent.py);
- nothing that is not a regular file is ever opened for reading: reading a pipe waits for a
  writer that may never come, and a folder cannot be read at all. Files are opened with
  O_NONBLOCK and checked with fstat before a byte is read, so even a file swapped for a pipe
  between a look and the open cannot hang the command.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import stat
from pathlib import Path

# What editors leave beside the file being edited; never a part of anyone's work.
LITTER = (
    ".#*",            # Emacs: the lock of a file being edited (a symlink, often to nowhere)
    "#*#",            # Emacs: auto-save
    "*~",             # Emacs, vim, nano: backups
    ".*.sw?",         # vim: swap files (.agent.py.swp, .swo, .swn ...)
    "*.swp", "*.swo", "*.swx",
    "4913",           # vim: the file it writes to test that a folder is writable
    ".~lock.*#",      # LibreOffice
    ".DS_Store",      # macOS Finder
    "*.orig", "*.rej",    # patch leftovers
    ".*.tmp",         # a half-written file of a tool that writes through a temp file
)


def is_litter(name: str) -> bool:
    """True for a file an editor (or a tool) leaves beside the files being edited."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in LITTER)


def kind(mode: int) -> str:
    """What a file that is not a regular file is, in a word a user knows."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "not a regular file"


class NotRegularFile(OSError):
    """A path that names something other than a regular file (a folder, a pipe, a device):
    an OSError, so that every place that already says "cannot read X: <why>" says why."""

    def __init__(self, path: os.PathLike | str, mode: int) -> None:
        what = kind(mode)
        super().__init__(errno.EINVAL, f"{what}, not a regular file" if what != "not a regular file"
                         else what, str(path))


def is_regular(path: os.PathLike | str, *, follow: bool = True) -> bool:
    """Is `path` a regular file (following a symlink, unless `follow` is False)? Never opens it,
    never raises."""
    try:
        info = os.stat(path, follow_symlinks=follow)
    except (OSError, ValueError):
        return False
    return stat.S_ISREG(info.st_mode)


def read_bytes(path: os.PathLike | str, limit: int | None = None, *,
               follow: bool = True) -> bytes:
    """The bytes of a regular file; NotRegularFile (an OSError) for anything else, without
    waiting on it. `limit`: read at most that many bytes (None: all). `follow=False` refuses
    a symbolic link too (ELOOP)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(path, mode)
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as file:
            return file.read() if limit is None else file.read(limit)
    finally:
        os.close(fd)


def read_text(path: os.PathLike | str, limit: int | None = None) -> str:
    """The UTF-8 text of a regular file (see read_bytes); UnicodeDecodeError if it is not."""
    return read_bytes(path, limit).decode("utf-8")


def entries(folder: Path, *, recursive: bool = False) -> list[Path]:
    """The names in `folder` that are not editor litter, sorted (with `recursive`, those in
    its subfolders too, never following a link to a folder). A folder that cannot be read
    gives what could be read."""
    found: list[Path] = []
    try:
        with os.scandir(folder) as scan:
            items = sorted(scan, key=lambda entry: entry.name)
    except OSError:
        return found
    for entry in items:
        if is_litter(entry.name):
            continue
        path = folder / entry.name
        found.append(path)
        try:
            inside = recursive and entry.is_dir(follow_symlinks=False)
        except OSError:
            inside = False
        if inside:
            found += entries(path, recursive=True)
    return found


__all__ = ["LITTER", "NotRegularFile", "entries", "is_litter", "is_regular", "kind",
           "read_bytes", "read_text"]
