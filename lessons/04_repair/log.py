# Lesson 04_repair, yours to edit: generated from
# solutions/04_repair/log.py; `sessionlab reset 04` makes it again.
"""A session's log: the file every message is appended to as one JSON line.

SessionLog appends each message the moment it exists, with one write of one whole line,
and reads the log back for an agent that continues the session. The abilities the course
adds to it (the lock, blobs, undo, compaction, erase, side-chains) live in modules of
their own, and the class takes them in as mixins as they come.
"""

from __future__ import annotations

import os
from pathlib import Path

from .messages import (
    check_message, check_plain_json, check_session_id, encode_line, MARKER, Message)
from .files import check_still_linked, make_folder, MAX_WRITE, now, read_all
from .reading import interrupted_result, LogState, parse_log, read_log, unanswered_calls


class WriterStopped(RuntimeError):
    """An earlier write of this writer failed, leaving the end of the log unknown.

    Maybe the line is in the file, maybe part of it, maybe none: a retry could write a
    message twice. So the writer refuses every later write. Open the session again (a
    new SessionLog, a new Agent): what is really in the log is then read back.
    """


class SessionLog:
    """One session's append-only log, `<folder>/<session_id>.jsonl`: an entry a line.

    The object that writes a log is its writer. It becomes the writer at
    open_for_append() (an agent resuming the session) or at its first append, and it
    repairs the log's tail right then, once, before anything else is written. Reading
    (load) never changes the file. With durable=True every write is flushed to the disk
    (fsync) before it returns.
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
        # The repair marker this writer wrote, if any
        self.repaired: Message | None = None

    def open_for_append(self) -> list[Message]:
        """Become the session's writer and return its history, with the tail repaired.

        A session with no log yet has nothing to repair: it stays uncreated until the
        first append (loading a session must not create its file).
        """
        if self._fd is None and self.path.exists():
            return self._open().messages    # the log as the repair read it: parsed once
        return self.load()

    def append(self, message: Message) -> None:
        """Write one message as one line, with a single write() of the whole line."""
        # The rule first: a message that reading would refuse is never written, and no
        # file is created for it.
        check_plain_json(message)
        check_message(message)
        data = encode_line(message)
        if self._fd is None:
            self._open()
        self._write(data)

    def _write(self, data: bytes) -> None:
        """Add whole lines at the end of the log with one write(); fsync if durable.

        Raises WriterStopped, writing nothing, once a write of this writer has failed
        without saying what it left in the file.
        """
        # Removed under this writer, the log would take these bytes where no reader
        # finds them: refused, writing nothing (OSError, naming the log).
        check_still_linked(self._fd, self.path)
        if self.in_doubt:
            raise WriterStopped(
                f"{self.path}: an earlier write failed after its bytes may have "
                "reached the file, so this writer stopped (a retry could write a "
                "message twice). Close it and open the session again: its history is "
                "then read from the log.")
        if len(data) > MAX_WRITE:
            # One write() moves at most MAX_WRITE bytes on Linux: the line could not
            # land whole, so it is refused before a byte is written.
            raise ValueError(f"{self.path}: a line of {len(data)} bytes is more than "
                             f"one write() can take ({MAX_WRITE}); nothing was written")
        # From here until the line is known to be whole (and on disk, in durable
        # mode), an error leaves the file in doubt: a signal after write() returned, a
        # short write that could not be taken back, an fsync that failed (EIO: the
        # bytes may never reach the disk).
        self.in_doubt = True
        try:
            written = os.write(self._fd, data)
        except OSError:
            self.in_doubt = False   # write() refused whole: nothing written, retry safe
            raise
        if written != len(data):
            # The disk filled up (or a file size limit was hit) part-way: take the part
            # back, so that the log still ends on a whole line and the next write starts
            # clean.
            os.ftruncate(self._fd, os.fstat(self._fd).st_size - written)
            self.in_doubt = False   # taken back: the log is as it was before this write
            raise OSError(f"{self.path}: short write, {written} of {len(data)} bytes "
                          "(taken back)")
        if self.durable:
            os.fsync(self._fd)
        self.in_doubt = False

    def _open(self) -> LogState:
        """Become the writer: open the log for appending, then repair its tail.

        Returns the log's entries as this writer leaves them, so that a resume need not
        read and parse the whole log a second time.
        """
        make_folder(self.folder, self.durable)
        # O_APPEND, as in lesson 01. O_NOFOLLOW: a log that is a symbolic link is
        # refused (OSError, ELOOP), never followed out of the folder; 0o600: only its
        # owner may read it. O_RDWR: this descriptor can read the file it opened, too.
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
        self._fd = os.open(self.path, flags, 0o600)
        self.repaired = None    # this takeover's repair marker, if it makes one
        try:
            if self.durable:
                # The log's name may not be on the disk yet, whoever created it: this
                # writer just now, one whose sync of the name then failed, or one that
                # was not durable (it syncs no name, and may have written lines since).
                # Nothing in the file tells which, so a durable writer syncs the folder
                # each time it opens the log: once per open, before its first line. A
                # failed sync closes the log (below): the next open syncs again.
                self._sync_folder()
            # TODO(04.3): Repair the tail once, when the writer takes the log over.
            # What it asks: `sessionlab task 04.3`. Hints: `sessionlab hint --task
            # 04.3`.
            raise NotImplementedError(
                "task 04.3 is not written yet: Repair the tail once, when the writer "
                "takes the log over"
            )
        except BaseException:
            self.close()    # a log we refuse to repair is one we do not write to
            raise

    def _repair(self, data: bytes, state: LogState) -> None:
        """A place for the change to the file, if you want it in a method of its own.

        Only _open calls it: its parameters, what it returns, and whether it is there
        at all are yours to choose (task 04.3). Change them freely.
        """
        # TODO(04.3): Repair the tail once, when the writer takes the log over.
        # What it asks: `sessionlab task 04.3`. Hints: `sessionlab hint --task 04.3`.
        raise NotImplementedError(
            "task 04.3 is not written yet: Repair the tail once, when the writer takes "
            "the log over"
        )

    def _sync_folder(self) -> None:
        """Make the log's name itself durable: once this returns, a power cut can no
        longer take away the name that reaches the file (its bytes are another matter,
        synced where they are written)."""
        # fsync on the file saves its bytes; the entry "quest-1.jsonl" lives in the
        # folder, and until the folder is synced a power cut can lose the whole file.
        folder = os.open(self.folder, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)

    def load(self) -> list[Message]:
        """Every complete message in the log, in order; [] for a log not written yet.

        Read-only: markers are left out, a torn tail is skipped (not cut: only the
        writer repairs), and a corrupt line before the tail raises CorruptLog.
        """
        return read_log(self.path).messages

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "SessionLog":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def entries_for(entries: list[Message], count: int) -> int:
    """How many entries hold the first `count` messages (and the markers among them)."""
    seen = kept = 0
    for entry in entries:
        if seen == count:
            break
        kept += 1
        seen += MARKER not in entry
    return kept
