# Generated from course/lock.py for lesson 11_postgres:
# edit that source, then run `sessionlab dev generate`.
"""One writer per session.

A writer holds an exclusive lock on `<id>.lock` for as long as it writes, and says in it
who it is; a second writer is refused with an error naming the holder. The kernel drops
the lock when its holder dies, however it dies, so a killed writer blocks no one.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import stat
import time
from collections.abc import Mapping
from typing import Any

from .files import now


class SessionBusy(RuntimeError):
    """Another writer holds the session: the error names the session and the holder."""

    def __init__(self, session_id: str, holder: Mapping[str, Any]) -> None:
        who = (
            f"process {holder.get('pid')} on host {holder.get('host')!r} has been "
            f"writing it since {holder.get('since')}"
            if holder.get("pid")
            else (
                "another process is writing it (its lock does not say who yet)"
            )
        )
        super().__init__(
            f"session {session_id!r} is busy: {who}. A session has one writer at a "
            "time: close the other one, wait for it with SessionLog(..., "
            "timeout=seconds), or fork the session and go on in the copy."
        )
        self.session_id = session_id
        self.holder = dict(holder)  # {"pid", "host", "since"} as the lock file says
        self.pid: int | None = holder.get("pid")


# --- one writer: the lock -------------------------------------------------------------

LOCK_POLL_SECONDS = 0.05    # how often a writer that waits for the lock tries again


LOCK_RECORD_BYTES = 256     # the holder's record, padded with spaces to this length


class SessionLock:
    """SessionLog's lock: one writer per session, and who holds it."""

    def _lock(self) -> None:
        """Make this SessionLog the session's one writer, waiting up to self.timeout
        seconds for another to let go (and getting it within about LOCK_POLL_SECONDS
        once it has), and record in the lock file who holds it. SessionBusy, naming the
        holder, if it stays taken.

        The lock is an flock on `<id>.lock`: the kernel lets go of it when its holder
        closes the file or dies, so a crashed writer never leaves the session locked.
        """
        pid = os.getpid()   # which process takes it (see 05.2)
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while True:
            # O_NOFOLLOW: a lock file that is a symbolic link is refused, never followed
            # (the next lines would truncate whatever it points to).
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                # Granted; but the holder may have removed this file as it let go, and
                # a third writer may hold a new one under the name: then it is not the
                # lock.
                try:
                    ours = os.path.samestat(os.stat(self.lock_path), os.fstat(fd))
                except FileNotFoundError:
                    ours = False
                # A lock file with other names (a hard link to another session's log,
                # planted like a symbolic link) or that is no regular file must not be
                # truncated below.
                found = os.fstat(fd)
                if ours and (found.st_nlink != 1 or not stat.S_ISREG(found.st_mode)):
                    raise OSError(errno.EPERM, "the lock file is not a plain file "
                                  f"of its own (it has {found.st_nlink} names, or is "
                                  "not a regular file); refusing to write into it",
                                  str(self.lock_path))
            except BlockingIOError:
                os.close(fd)
                if deadline is not None and time.monotonic() >= deadline:
                    raise SessionBusy(self.id, self.holder()) from None
                time.sleep(LOCK_POLL_SECONDS)
                continue
            except BaseException:
                # A planted file, or a Ctrl-C at any step since the lock came: the lock
                # goes with it. (Python raises a Ctrl-C as a call returns or a function
                # starts, and the steps from this try to self._lock_fd call nothing.)
                os.close(fd)
                raise
            if ours:
                break
            # We locked a file that was removed as its holder let go: retry
            os.close(fd)
        # One statement: a Ctrl-C between the two would leave a lock of no process
        self._lock_fd, self._lock_pid = fd, pid
        # A file found there keeps its mode whatever mode the open asked for
        if found.st_mode & 0o077:
            os.fchmod(fd, 0o600)
        # Whoever held it before (even one killed with SIGKILL) left its name here:
        # overwrite.
        # Lesson 09: in place, at a fixed length, never truncated to nothing first (a
        # truncate makes ext4 flush the file at close: milliseconds for every writer).
        # And the name is only for messages: on a full disk the flock still locks, so
        # delete and expire, which only free space, still work.
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                             "since": now()}).encode("utf-8").ljust(LOCK_RECORD_BYTES)
        try:
            if found.st_size > len(record):
                os.ftruncate(fd, len(record))   # a longer record of another kind
            os.pwrite(fd, record, 0)
        except OSError as error:
            if error.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                raise

    def _unlock(self) -> None:
        """Let go of the session, if this SessionLog holds it. Every close calls it."""
        pid = os.getpid()   # before the descriptor is taken: nothing lost if a Ctrl-C
        fd, self._lock_fd = self._lock_fd, None
        if fd is None:
            return      # never locked, or let go already: a second close does nothing
        if self._lock_pid != pid:
            # A process forked from the writer closes its copy of the descriptor:
            # the writer still holds the lock through its own, under this name.
            os.close(fd)
            return
        # Remove the name first, while the lock is still ours: a writer that opened this
        # file and is waiting on it will find, once it gets the lock, that the name
        # points nowhere and try again on a new file. (Remove it after letting go, and a
        # newcomer's fresh lock file could be the one removed.)
        try:
            # Only if the name is still our file: removed by hand, it may now name a
            # lock file another writer made and holds.
            try:
                ours = os.path.samestat(os.stat(self.lock_path), os.fstat(fd))
            except FileNotFoundError:
                ours = False
            if ours:
                os.unlink(self.lock_path)
        finally:
            # Even if the name could not be removed (a read-only folder): a lock file
            # left behind only shows a stale name, a lock still held blocks everyone.
            os.close(fd)     # the flock goes with its last descriptor

    def holder(self) -> dict[str, Any]:
        """Who holds the session, says the lock file: {"pid", "host", "since"} or {}."""
        try:
            # Like every file of the session: no link followed, a regular file only, and
            # no more than a pid record can need (a planted device could never end).
            fd = os.open(self.lock_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    return {}
                found = json.loads(os.read(fd, 4096))
            finally:
                os.close(fd)
        # No lock file, or its holder is writing it right now
        except (OSError, ValueError):
            return {}
        return found if isinstance(found, dict) else {}
