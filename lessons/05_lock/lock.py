# Lesson 05_lock, yours to edit: generated from
# solutions/05_lock/lock.py; `sessionlab reset 05` makes it again.
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

from .files import now, write_all


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
        # TODO(05.1): Take the session's lock, or say who holds it.
        # Your design: the whole function is yours to shape; the tests check only what
        # it does.
        # What it asks: `sessionlab task 05.1`. Hints: `sessionlab hint --task 05.1`.
        raise NotImplementedError(
            "task 05.1 is not written yet: Take the session's lock, or say who holds it"
        )

    def _unlock(self) -> None:
        """Let go of the session, if this SessionLog holds it. Every close calls it."""
        # TODO(05.2): Let go of the lock and of its file.
        # Your design: the whole function is yours to shape; the tests check only what
        # it does.
        # What it asks: `sessionlab task 05.2`. Hints: `sessionlab hint --task 05.2`.
        raise NotImplementedError(
            "task 05.2 is not written yet: Let go of the lock and of its file"
        )

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
