# Lesson 01_append, yours to edit: generated from
# solutions/01_append/log.py; `sessionlab reset 01` makes it again.
"""A session's log: the file every message is appended to as one JSON line.

SessionLog appends each message the moment it exists, with one write of one whole line.
Nothing reads the log back yet: an agent that continues a session from it is the next
lesson's. The abilities the course adds later (the lock, blobs, undo, compaction, erase,
side-chains) live in modules of their own, and the class takes them in as mixins as
they come.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .messages import check_message, check_plain_json, check_session_id, Message
from .files import check_still_linked, make_folder


class WriterStopped(RuntimeError):
    """An earlier write of this writer failed, leaving the end of the log unknown.

    Maybe the line is in the file, maybe part of it, maybe none: a retry could write a
    message twice. So the writer refuses every later write. Open the session again (a
    new SessionLog, a new Agent): what is really in the log is then read back.
    """


class SessionLog:
    """One session's append-only log, `<folder>/<session_id>.jsonl`: a message a line.

    The file is opened on the first append, in O_APPEND mode, and stays open until
    close(). With durable=True every line is flushed to the disk (fsync) before append()
    returns.
    """

    def __init__(
        self, folder: str | Path, session_id: str, *, durable: bool = False
    ) -> None:
        self.id = check_session_id(session_id)
        # Made absolute now: the working directory may move while the session is in
        # use, and a relative name would then reach another folder's files
        self.folder = Path(folder).absolute()
        self.path = self.folder / f"{self.id}.jsonl"
        self.durable = durable
        self._fd: int | None = None
        self.in_doubt = False       # a write failed leaving the log's end unknown: stop

    def append(self, message: Message) -> None:
        """Write one message as one line, with a single write() of the whole line."""
        # TODO(01.2): Append one message as one JSON line, in one write.
        # Your design: the whole function is yours to shape; the tests check only what
        # it does.
        # What it asks: `sessionlab task 01.2`. Hints: `sessionlab hint --task 01.2`.
        raise NotImplementedError(
            "task 01.2 is not written yet: Append one message as one JSON line, in one "
            "write"
        )

    def _write(self, data: bytes) -> None:
        """Add whole lines at the end of the log with one write(); fsync if durable.

        Raises WriterStopped, writing nothing, once a write of this writer has failed
        without saying what it left in the file.
        """
        # Removed under this writer, the log would take these bytes where no reader
        # finds them: refused, writing nothing (OSError, naming the log).
        check_still_linked(self._fd, self.path)
        # TODO(01.5): Write a line whole, and stop after a write whose outcome is
        # unknown.
        # What it asks: `sessionlab task 01.5`. Hints: `sessionlab hint --task 01.5`.
        raise NotImplementedError(
            "task 01.5 is not written yet: Write a line whole, and stop after a write "
            "whose outcome is unknown"
        )

    def _open(self) -> None:
        """Become the log's writer: open it to append to it, creating it if need be,
        and keep its descriptor in `_fd`, which close() lets go of."""
        # TODO(01.4): Open the log, and make a new log's name survive a power cut.
        # What it asks: `sessionlab task 01.4`. Hints: `sessionlab hint --task 01.4`.
        raise NotImplementedError(
            "task 01.4 is not written yet: Open the log, and make a new log's name "
            "survive a power cut"
        )

    def _sync_folder(self) -> None:
        """Make the new log's name itself durable: once this returns, a power cut can
        no longer take away the name that reaches the file (its bytes are another
        matter, synced where they are written)."""
        # TODO(01.4): Open the log, and make a new log's name survive a power cut.
        # What it asks: `sessionlab task 01.4`. Hints: `sessionlab hint --task 01.4`.
        raise NotImplementedError(
            "task 01.4 is not written yet: Open the log, and make a new log's name "
            "survive a power cut"
        )

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "SessionLog":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
