# Generated from course/log.py for lesson 07_undo:
# edit that source, then run `sessionlab dev generate`.
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
from .files import (
    check_still_linked, make_folder, MAX_WRITE, now, read_all, SessionExists)
from .reading import (
    interrupted_result, KNOWN_LOGS, KnownLog, leaves_no_call_open, LogState, parse_log,
    reaches_back, read_log, recall, remember, unanswered_calls)
from .lock import SessionLock
from .blobs import BLOB_THRESHOLD, SessionBlobs
from .undo import SessionUndo


class WriterStopped(RuntimeError):
    """An earlier write of this writer failed, leaving the end of the log unknown.

    Maybe the line is in the file, maybe part of it, maybe none: a retry could write a
    message twice. So the writer refuses every later write. Open the session again (a
    new SessionLog, a new Agent): what is really in the log is then read back.
    """


class SessionLog(SessionLock, SessionBlobs, SessionUndo):
    """One session's append-only log, `<folder>/<session_id>.jsonl`: an entry a line.

    The object that writes a log is its writer, and a session has one writer at a time.
    It becomes the writer at open_for_append() (an agent resuming the session) or at its
    first append: it takes the session's lock (`<id>.lock`), then repairs the log's
    tail, once, before anything else is written; it holds the lock until close().
    Creating a SessionLog, or only reading with load(), takes no lock and creates no
    file. `timeout` is how many seconds to wait for a busy session (None: as long as it
    takes) before SessionBusy. With durable=True every write is flushed to the disk
    (fsync). A string content larger than `blob_threshold` bytes is stored in
    `<folder>/blobs/<sha256>`, shared by every session of the folder, and its line keeps
    a small reference to it.
    """

    def __init__(
        self,
        folder: str | Path,
        session_id: str,
        *,
        durable: bool = False,
        timeout: float | None = 0,
        blob_threshold: int = BLOB_THRESHOLD,
    ) -> None:
        self.id = check_session_id(session_id)
        # Made absolute now: the working directory may move while the session is in
        # use, and a relative name would then reach another folder's files
        self.folder = Path(folder).absolute()
        self.path = self.folder / f"{self.id}.jsonl"
        self.lock_path = self.folder / f"{self.id}.lock"
        self.blobs = self.folder / "blobs"      # shared by every session in the folder
        self.blob_threshold = blob_threshold
        self.synced_blobs: set[str] = set()     # blobs this writer knows are on disk
        self.durable = durable
        self.timeout = timeout
        self._fd: int | None = None
        self.in_doubt = False       # a write failed leaving the log's end unknown: stop
        self._lock_fd: int | None = None
        # open_for_append found no log: a new session
        self._found_no_log = False
        # The repair marker this writer wrote, if any
        self.repaired: Message | None = None
        # (index, position) of every message the log shows, as LogState.shown() gives
        # them, and how many messages it holds, undone ones included. Built from the
        # log as the writer opens it (_open reads it anyway, for the repair).
        self.shown: list[tuple[int, int]] = []
        self.message_count = 0
        # What this process knows of the log (see KnownLog): set when this object
        # becomes the writer, kept true by every write.
        self.known: KnownLog | None = None
        self._identity: tuple[int, int] | None = None    # the log's (device, inode)

    def open_for_append(self) -> list[Message]:
        """Become the session's writer and return its history, with the tail repaired.

        A session with no log yet has nothing to repair and nothing to lock: it stays
        uncreated, lock file included, until the first append (loading a session must
        not create its file).
        """
        if self._fd is None:
            if self.path.exists():
                # The log as the repair read it: parsed once
                return self.history(self._open(for_history=True))
            self._found_no_log = True
        return self.load()

    def append(self, message: Message) -> None:
        """Write one message as one line, with a single write() of the whole line."""
        # The rule first: a message that reading would refuse is never written, and no
        # file is created for it.
        check_plain_json(message)
        check_message(message)
        if self._fd is None:
            self._open()        # become the writer first: only the writer stores blobs
        # A large content goes to its blob first, whole; only then is the line that
        # points to it written. A crash in between leaves a blob nothing points to,
        # never a line pointing to nothing.
        self._write(encode_line(self.outline(message)))
        # Shown, with its index as written, at the position of the line just written
        self.shown.append((self.message_count, len(self.known.ends) - 1))
        self.message_count += 1
        self.known.message_count = self.message_count
        self.known.settled = leaves_no_call_open(message)

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
        # The log now holds a line of this writer's: whatever it holds later is this
        # session's own, not one another writer began after this one found none
        self._found_no_log = False
        if self.known is not None:
            # Once the writer is open, each write adds one whole line: the size and the
            # line ends this process knows of the log stay true (see KnownLog).
            self.known.size += len(data)
            self.known.mtime_ns = None
            self.known.ends.append(self.known.size)
            self.known.settled = False      # until append() says otherwise
            # A read of the same file in this process may have put its own there
            KNOWN_LOGS[self._identity] = self.known

    def _open(self, for_history: bool = False) -> LogState | None:
        """Become the writer: take the lock, open the log to append, repair its tail.

        Returns the log's entries as this writer leaves them, so that a resume need not
        read and parse the whole log a second time. Unless they are asked for, a log
        this process knows as it is now (see KnownLog), with nothing to repair, is not
        read at all: the writer starts from what is known, and returns None.
        """
        make_folder(self.folder, self.durable)
        self.known = None       # the log may have changed since this object last wrote
        self.repaired = None    # this takeover's repair marker, if it makes one
        try:
            # The lock comes first: a tail that looks torn may be a line another
            # writer is in the middle of writing. Only the lock holder may judge it, and
            # cut it. Inside the try: a failure writing the lock file lets go of it.
            self._lock()
            if (
                self._found_no_log
                and self.path.exists()
                and self.path.stat().st_size > 0
            ):
                # Our agent started from an empty history; another writer began the
                # session since. Appending now would splice two stories into one log.
                raise SessionExists(
                    f"session {self.id!r} was started by another writer after this one "
                    "found it empty; resume it again to continue from its history"
                )
            # O_APPEND: every write lands at the current end of the file, whatever else
            # happened. O_NOFOLLOW: a log that is a symbolic link is refused (OSError,
            # ELOOP), never followed out of the folder; 0o600: only its owner may read
            # it. O_RDWR: the writer reads the log through this same descriptor
            # (read_all).
            flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
            self._fd = os.open(self.path, flags, 0o600)
            if self.durable:
                # The log's name may not be on the disk yet, whoever created it: this
                # writer just now, one whose sync of the name then failed, or one that
                # was not durable (it syncs no name, and may have written lines since).
                # Nothing in the file tells which, so a durable writer syncs the folder
                # each time it opens the log: once per open, before its first line. A
                # failed sync closes the log (below): the next open syncs again.
                self._sync_folder()
            known = None if for_history else recall(self._fd)
            if known is not None and known.settled and known.message_count is not None:
                # Parsed whole by this process (no corrupt line), unchanged since, and
                # ending whole with no call open: a read would find nothing to repair.
                self._know_from(known)
                return None
            # Read what was opened, not the name again: it may name another file by now.
            data = read_all(self._fd, self.path)
            # Raises CorruptLog before anything is changed
            state = parse_log(data, self.path)
            # A repair that wrote (a newline, a marker, results) changed the log: read
            # it again. That happens once after a crash; any other open parses it once.
            if self._repair(data, state):
                state = parse_log(read_all(self._fd, self.path), self.path)
            self._know(state)
        except BaseException:
            self.close()    # a log we cannot take over is one we neither write nor lock
            raise
        return state

    def _know(self, state: LogState) -> None:
        """Start from the log as this writer opened it: which messages it shows, how
        many it holds, and where its lines end."""
        self.shown = state.shown()
        self.message_count = sum(MARKER not in entry for entry in state.entries)
        status = os.fstat(self._fd)
        self._identity = (status.st_dev, status.st_ino)
        # The repair has just answered every call left open.
        self.known = KnownLog(status.st_size, status.st_mtime_ns, state.ends,
                              self.shown, message_count=self.message_count,
                              settled=True, reaches_back=reaches_back(state))
        remember(status, self.known)

    def _know_from(self, known: KnownLog) -> None:
        """Start from what this process knows of the log, as _know() from a read."""
        self.shown = list(known.shown)
        self.message_count = known.message_count
        status = os.fstat(self._fd)
        self._identity = (status.st_dev, status.st_ino)
        self.known = KnownLog(known.size, known.mtime_ns, list(known.ends), self.shown,
                              message_count=self.message_count, settled=True,
                              reaches_back=known.reaches_back)
        remember(status, self.known)

    def _repair(self, data: bytes, state: LogState) -> bool:
        """Make the log whole before this writer adds to it (a whole log: leave it).

        `data` is the log's bytes and `state` their parse_log(), as _open() read them.
        When it returns, the log ends in whole lines, the ones that were whole are as
        they were, and no call is left open at its end; self.repaired is the marker
        that says what was done, if bytes were cut or calls answered. Killed at any
        moment, it leaves a log the next writer's repair completes: never a marker
        without the results it names, never a made-up result without its marker.
        Returns whether it wrote anything.
        """
        calls = unanswered_calls(state.messages)
        # So that the next line starts clean
        fix = b"\n" if state.newline_missing else b""
        if state.torn:
            # O_APPEND writes then land at the new end
            os.ftruncate(self._fd, state.end)
        if state.torn or calls:
            cut = data[state.end:state.end + 80]
            self.repaired = {
                MARKER: "repair",
                "at": now(),
                "cut_bytes": state.torn,
                "cut_preview": cut.decode("utf-8", "replace"),
                "interrupted": [call["id"] for call in calls],
            }
            entries = [self.repaired, *(interrupted_result(call) for call in calls)]
            fix += b"".join(encode_line(entry) for entry in entries)
        if fix:
            # One write: marker and results land together or not at all
            self._write(fix)
        return bool(fix)

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
        """Every complete message the log shows, in order (undone ones left out); [] for
        a session that does not exist yet.

        Read-only: markers are left out, a torn tail is skipped (not cut: only the
        writer repairs), and a corrupt line before the tail raises CorruptLog. Each
        content stored as a blob is read back and checked against its hash (BlobError if
        it cannot be trusted).
        """
        return self.history(read_log(self.path))

    def history(self, state: LogState) -> list[Message]:
        """The messages `state` shows, each blob reference replaced by its content."""
        if state.plain:
            # The usual log: every entry is a message, shown, with its content
            return list(state.entries)
        shown = state.shown_once()
        return [self.inline(state.entries[position], state.lines[position])
                for _, position in shown]

    def close(self) -> None:
        """Close the log, then let go of the lock (safe to call more than once)."""
        try:
            if self._fd is not None:
                fd, self._fd = self._fd, None
                if self.known is not None:
                    recall(fd)      # the time of this writer's last write: see KnownLog
                os.close(fd)
        finally:
            self._unlock()      # whatever closing the log raised

    def __enter__(self) -> "SessionLog":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()  # on an exception too: a crashed writer must not keep the session
