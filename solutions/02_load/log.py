# Generated from course/log.py for lesson 02_load:
# edit that source, then run `sessionlab dev generate`.
"""A session's log: the file every message is appended to as one JSON line.

SessionLog appends each message the moment it exists, with one write of one whole line,
and reads the log back for an agent that continues the session. The abilities the course
adds to it (the lock, blobs, undo, compaction, erase, side-chains) live in modules of
their own, and the class takes them in as mixins as they come.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .messages import (
    check_message, check_plain_json, check_session_id, InvalidMessage, Message,
    parse_line)
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
        # The rule first: a message that reading would refuse is never written, and no
        # file is created for it.
        check_plain_json(message)
        check_message(message)
        # ensure_ascii=False keeps "café" readable in the file; json escapes "\n" inside
        # strings, so a message is always exactly one line. allow_nan=False: NaN and
        # Infinity are not JSON (Python writes them, other readers refuse them), so they
        # are refused here.
        line = json.dumps(message, ensure_ascii=False, allow_nan=False) + "\n"
        data = line.encode("utf-8")
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
        # From here until the line is known to be whole (and on disk, in durable
        # mode), an error leaves the file in doubt: a signal after write() returned, a
        # short write, an fsync that failed (EIO: the bytes may never reach the disk).
        self.in_doubt = True
        try:
            written = os.write(self._fd, data)
        except OSError:
            self.in_doubt = False   # write() refused whole: nothing written, retry safe
            raise
        if written != len(data):
            raise OSError(f"{self.path}: short write, {written} of {len(data)} bytes")
        if self.durable:
            os.fsync(self._fd)
        self.in_doubt = False

    def _open(self) -> None:
        """Become the log's writer: open it to append to it, creating it if need be,
        and keep its descriptor in `_fd`, which close() lets go of."""
        make_folder(self.folder, self.durable)
        # O_APPEND: every write lands at the current end of the file, whatever else
        # happened. O_NOFOLLOW: a log that is a symbolic link is refused (OSError,
        # ELOOP), never followed out of the folder; 0o600: only its owner may read it.
        fd = os.open(
            self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600
        )
        try:
            # The log's name may not be on the disk yet, whoever created it: this writer
            # just now, one whose folder sync then failed, or one that was not durable
            # (it syncs no name, and may have written lines since). Nothing in the file
            # tells which, so a durable writer syncs the folder once per open, before
            # its first line. Only a durable writer asks.
            if self.durable:
                self._sync_folder()
        except BaseException:
            # Not opened: the next append comes back here, and syncs the name again
            os.close(fd)
            raise
        self._fd = fd

    def _sync_folder(self) -> None:
        """Make the new log's name itself durable: once this returns, a power cut can
        no longer take away the name that reaches the file (its bytes are another
        matter, synced where they are written)."""
        # fsync on the file saves its bytes; the entry "quest-1.jsonl" lives in the
        # folder, and until the folder is synced a power cut can lose the whole file.
        folder = os.open(self.folder, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)

    def load(self) -> list[Message]:
        """Every message of the session's log, in order."""
        # BEGIN 02.1
        try:
            data = self.path.read_bytes()   # read-only: loading never changes the log
        except FileNotFoundError:
            return []
        # Split on b"\n" only. str.splitlines() also splits on U+2028, U+0085 and
        # friends, which json.dumps(ensure_ascii=False) leaves unescaped inside strings.
        messages = []
        for number, line in enumerate(data.split(b"\n"), start=1):
            if line:
                try:
                    messages.append(parse_line(line))   # the rule append() keeps
                except ValueError as error:
                    where = f"{self.path}: line {number}"
                    raise InvalidMessage(f"{where}: {error}") from None
        return messages
        # END 02.1

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "SessionLog":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
