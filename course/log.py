#| 01+  01_append
#> 01
"""A session's log: the file every message is appended to as one JSON line.

SessionLog appends each message the moment it exists, with one write of one whole line.
Nothing reads the log back yet: an agent that continues a session from it is the next
lesson's. The abilities the course adds later (the lock, blobs, undo, compaction, erase,
side-chains) live in modules of their own, and the class takes them in as mixins as
they come.
"""
#<
#> 02+
"""A session's log: the file every message is appended to as one JSON line.

SessionLog appends each message the moment it exists, with one write of one whole line,
and reads the log back for an agent that continues the session. The abilities the course
adds to it (the lock, blobs, undo, compaction, erase, side-chains) live in modules of
their own, and the class takes them in as mixins as they come.
"""
#<

from __future__ import annotations

import json
import os
from pathlib import Path

from .messages import (
    check_item_line, check_message, check_plain_json, check_session_id, encode_line,
    InvalidMessage, ITEM, MARKER, Message, parse_line)
from .files import (
    check_still_linked, make_folder, MAX_WRITE, now, read_all, SessionExists)
from .reading import (
    Compaction, interrupted_result, KNOWN_LOGS, KnownLog, LAST_LINE_WINDOW,
    leaves_no_call_open, line_number, LogState, parse_log, reaches_back, read_log,
    read_open_log, read_tail, recall, remember, TAIL_CHUNK, unanswered_calls)
from .lock import SessionLock
from .blobs import BLOB_THRESHOLD, SessionBlobs
from .undo import SessionUndo
from .compaction import SessionCompaction
from .erase import SessionErase
from .sidechain import SessionSidechains


class WriterStopped(RuntimeError):
    """An earlier write of this writer failed, leaving the end of the log unknown.

    Maybe the line is in the file, maybe part of it, maybe none: a retry could write a
    message twice. So the writer refuses every later write. Open the session again (a
    new SessionLog, a new Agent): what is really in the log is then read back.
    """


#> 01-04
class SessionLog:
#<
#> 05
class SessionLog(SessionLock):
#<
#> 06
class SessionLog(SessionLock, SessionBlobs):
#<
#> 07
class SessionLog(SessionLock, SessionBlobs, SessionUndo):
#<
#> 08
class SessionLog(SessionLock, SessionBlobs, SessionUndo, SessionCompaction):
#<
#> 09
class SessionLog(SessionLock, SessionBlobs, SessionUndo, SessionCompaction,
                 SessionErase):
#<
#> 10+
class SessionLog(SessionLock, SessionBlobs, SessionUndo, SessionCompaction,
                 SessionErase, SessionSidechains):
#<
    #> 01-03
    """One session's append-only log, `<folder>/<session_id>.jsonl`: a message a line.
    #<
    #> 04+
    """One session's append-only log, `<folder>/<session_id>.jsonl`: an entry a line.
    #<

    #> 01-03
    The file is opened on the first append, in O_APPEND mode, and stays open until
    close(). With durable=True every line is flushed to the disk (fsync) before append()
    returns.
    #<
    #> 04
    The object that writes a log is its writer. It becomes the writer at
    open_for_append() (an agent resuming the session) or at its first append, and it
    repairs the log's tail right then, once, before anything else is written. Reading
    (load) never changes the file. With durable=True every write is flushed to the disk
    (fsync) before it returns.
    #<
    #> 05+
    The object that writes a log is its writer, and a session has one writer at a time.
    It becomes the writer at open_for_append() (an agent resuming the session) or at its
    first append: it takes the session's lock (`<id>.lock`), then repairs the log's
    tail, once, before anything else is written; it holds the lock until close().
    Creating a SessionLog, or only reading with load(), takes no lock and creates no
    file. `timeout` is how many seconds to wait for a busy session (None: as long as it
    takes) before SessionBusy. With durable=True every write is flushed to the disk
    #<
    #> 05
    (fsync).
    #<
    #> 06+
    (fsync). A string content larger than `blob_threshold` bytes is stored in
    `<folder>/blobs/<sha256>`, shared by every session of the folder, and its line keeps
    a small reference to it.
    #<
    """

    #> 01-04
    def __init__(
        self, folder: str | Path, session_id: str, *, durable: bool = False
    ) -> None:
    #<
    #> 05
    def __init__(self, folder: str | Path, session_id: str, *, durable: bool = False,
                 timeout: float | None = 0) -> None:
    #<
    #> 06+
    def __init__(
        self,
        folder: str | Path,
        session_id: str,
        *,
        durable: bool = False,
        timeout: float | None = 0,
        blob_threshold: int = BLOB_THRESHOLD,
    ) -> None:
    #<
        self.id = check_session_id(session_id)
        # Made absolute now: the working directory may move while the session is in
        # use, and a relative name would then reach another folder's files
        self.folder = Path(folder).absolute()
        self.path = self.folder / f"{self.id}.jsonl"
        #> 05+
        self.lock_path = self.folder / f"{self.id}.lock"
        #<
        #> 06+
        self.blobs = self.folder / "blobs"      # shared by every session in the folder
        self.blob_threshold = blob_threshold
        self.synced_blobs: set[str] = set()     # blobs this writer knows are on disk
        #<
        #> 09+
        # Blobs stored (or found stored) for the line being written, pinned until it is
        # written: no collector removes them meanwhile (lesson 09, release_blobs())
        self.pinned: list[int] = []
        #<
        self.durable = durable
        #> 05+
        self.timeout = timeout
        #<
        self._fd: int | None = None
        self.in_doubt = False       # a write failed leaving the log's end unknown: stop
        #> 05+
        self._lock_fd: int | None = None
        # open_for_append found no log: a new session
        self._found_no_log = False
        #<
        #> 04+
        # The repair marker this writer wrote, if any
        self.repaired: Message | None = None
        #<
        #> 07+
        # (index, position) of every message the log shows, as LogState.shown() gives
        # them, and how many messages it holds, undone ones included. Built from the
        # log as the writer opens it (_open reads it anyway, for the repair).
        self.shown: list[tuple[int, int]] = []
        self.message_count = 0
        #<
        #> 08+
        # The log's latest compaction (lesson 08), None if it records none: as this
        # object last read the log (its history, or the log it opened as the writer),
        # then kept true by every compaction it records. The one place it is kept:
        # the agent starts its view from it, and the log's undo checks it.
        self.compacted: Compaction | None = None
        #<
        #> 07+
        # What this process knows of the log (see KnownLog): set when this object
        # becomes the writer, kept true by every write.
        self.known: KnownLog | None = None
        self._identity: tuple[int, int] | None = None    # the log's (device, inode)
        #<
#> 04+

    def open_for_append(self) -> list[Message]:
        """Become the session's writer and return its history, with the tail repaired.

#<
        #> 04
        A session with no log yet has nothing to repair: it stays uncreated until the
        first append (loading a session must not create its file).
        #<
        #> 05+
        A session with no log yet has nothing to repair and nothing to lock: it stays
        uncreated, lock file included, until the first append (loading a session must
        not create its file).
        #<
        #> 04+
        """
        #<
        #> 04
        if self._fd is None and self.path.exists():
            return self._open().messages    # the log as the repair read it: parsed once
        #<
        #> 05+
        if self._fd is None:
            if self.path.exists():
                # The log as the repair read it: parsed once
        #<
                #> 05
                return self._open().messages
                #<
                #> 06
                return self.history(self._open())
                #<
                #> 07+
                return self.history(self._open(for_history=True))
                #<
            #> 05+
            self._found_no_log = True
            #<
        #> 04+
        return self.load()
        #<

    def append(self, message: Message) -> None:
        """Write one message as one line, with a single write() of the whole line."""
        # BEGIN 01.2
        # The rule first: a message that reading would refuse is never written, and no
        # file is created for it.
        check_plain_json(message)
        check_message(message)
        #> 01-03
        # ensure_ascii=False keeps "café" readable in the file; json escapes "\n" inside
        # strings, so a message is always exactly one line. allow_nan=False: NaN and
        # Infinity are not JSON (Python writes them, other readers refuse them), so they
        # are refused here.
        line = json.dumps(message, ensure_ascii=False, allow_nan=False) + "\n"
        data = line.encode("utf-8")
        #<
        #> 04-05
        data = encode_line(message)
        #<
        if self._fd is None:
            #> 01-05
            self._open()
        self._write(data)
            #<
            #> 06+
            self._open()        # become the writer first: only the writer stores blobs
        # A large content goes to its blob first, whole; only then is the line that
        # points to it written. A crash in between leaves a blob nothing points to,
        # never a line pointing to nothing.
            #<
            #> 06-08
        self._write(encode_line(self.outline(message)))
            #<
            #> 09+
        try:
            self._write(encode_line(self.outline(message)))
        finally:
            self.release_blobs()    # the line is written (or never will be): unpin
            #<
        #> 01-05
        # END 01.2
        #<
        #> 07-10
        # Shown, with its index as written, at the position of the line just written
        self.shown.append((self.message_count, len(self.known.ends) - 1))
        self.message_count += 1
        self.known.message_count = self.message_count
        self.known.settled = leaves_no_call_open(message)
        #<
        #> 11+
        if self.known is not None:      # else not worked out yet (_open_at_tail)
            # Shown, with its index as written, at the position of the line just written
            self.shown.append((self.message_count, len(self.known.ends) - 1))
            self.message_count += 1
            self.known.message_count = self.message_count
            self.known.settled = leaves_no_call_open(message)
        #<

    def _write(self, data: bytes) -> None:
        """Add whole lines at the end of the log with one write(); fsync if durable.

        Raises WriterStopped, writing nothing, once a write of this writer has failed
        without saying what it left in the file.
        """
        # Removed under this writer, the log would take these bytes where no reader
        # finds them: refused, writing nothing (OSError, naming the log).
        check_still_linked(self._fd, self.path)
        # BEGIN 01.5
        if self.in_doubt:
            raise WriterStopped(
                f"{self.path}: an earlier write failed after its bytes may have "
                "reached the file, so this writer stopped (a retry could write a "
                "message twice). Close it and open the session again: its history is "
                "then read from the log.")
        #> 04+
        if len(data) > MAX_WRITE:
            # One write() moves at most MAX_WRITE bytes on Linux: the line could not
            # land whole, so it is refused before a byte is written.
            raise ValueError(f"{self.path}: a line of {len(data)} bytes is more than "
                             f"one write() can take ({MAX_WRITE}); nothing was written")
        #<
        # From here until the line is known to be whole (and on disk, in durable
        # mode), an error leaves the file in doubt: a signal after write() returned, a
        #> 01-03
        # short write, an fsync that failed (EIO: the bytes may never reach the disk).
        #<
        #> 04+
        # short write that could not be taken back, an fsync that failed (EIO: the
        # bytes may never reach the disk).
        #<
        self.in_doubt = True
        try:
            written = os.write(self._fd, data)
        except OSError:
            self.in_doubt = False   # write() refused whole: nothing written, retry safe
            raise
        if written != len(data):
            #> 01-03
            raise OSError(f"{self.path}: short write, {written} of {len(data)} bytes")
            #<
            #> 04+
            # The disk filled up (or a file size limit was hit) part-way: take the part
            # back, so that the log still ends on a whole line and the next write starts
            # clean.
            os.ftruncate(self._fd, os.fstat(self._fd).st_size - written)
            self.in_doubt = False   # taken back: the log is as it was before this write
            raise OSError(f"{self.path}: short write, {written} of {len(data)} bytes "
                          "(taken back)")
            #<
        if self.durable:
            os.fsync(self._fd)
        self.in_doubt = False
        # END 01.5
        #> 05+
        # The log now holds a line of this writer's: whatever it holds later is this
        # session's own, not one another writer began after this one found none
        self._found_no_log = False
        #<
        #> 07+
        if self.known is not None:
            # Once the writer is open, each write adds one whole line: the size and the
            # line ends this process knows of the log stay true (see KnownLog).
            self.known.size += len(data)
            self.known.mtime_ns = None
            self.known.ends.append(self.known.size)
            self.known.settled = False      # until append() says otherwise
            # A read of the same file in this process may have put its own there
            KNOWN_LOGS[self._identity] = self.known
        #<

    #> 01-03
    def _open(self) -> None:
    #<
    #> 04-06
    def _open(self) -> LogState:
    #<
    #> 07+
    def _open(self, for_history: bool = False) -> LogState | None:
    #<
        #> 04
        """Become the writer: open the log for appending, then repair its tail.
        #<
        #> 05+
        """Become the writer: take the lock, open the log to append, repair its tail.
        #<
#> 04+

        Returns the log's entries as this writer leaves them, so that a resume need not
#<
        #> 04-06
        read and parse the whole log a second time.
        #<
        #> 07+
        read and parse the whole log a second time. Unless they are asked for, a log
        this process knows as it is now (see KnownLog), with nothing to repair, is not
        read at all: the writer starts from what is known, and returns None.
        #<
        #> 04+
        """
        #<
        #> 01-03
        """Become the log's writer: open it to append to it, creating it if need be,
        and keep its descriptor in `_fd`, which close() lets go of."""
        #<
        #> 01
        # BEGIN 01.4
        #<
        make_folder(self.folder, self.durable)
        #> 01-03
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
        #<
        #> 01
        # END 01.4
        #<
        #> 04
        # O_APPEND, as in lesson 01. O_NOFOLLOW: a log that is a symbolic link is
        # refused (OSError, ELOOP), never followed out of the folder; 0o600: only its
        # owner may read it. O_RDWR: this descriptor can read the file it opened, too.
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
        self._fd = os.open(self.path, flags, 0o600)
        #<
        #> 07+
        self.known = None       # the log may have changed since this object last wrote
        #<
        #> 04+
        self.repaired = None    # this takeover's repair marker, if it makes one
        try:
        #<
            #> 05+
            # The lock comes first: a tail that looks torn may be a line another
            # writer is in the middle of writing. Only the lock holder may judge it, and
            # cut it. Inside the try: a failure writing the lock file lets go of it.
            #<
            #> 05-09
            self._lock()
            #<
            #> 10+
            if self._lock_fd is None:   # else held already: a side-chain's (lesson 10)
                self._lock()
            #<
            #> 05+
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
            #<
            #> 04+
            if self.durable:
                # The log's name may not be on the disk yet, whoever created it: this
                # writer just now, one whose sync of the name then failed, or one that
                # was not durable (it syncs no name, and may have written lines since).
                # Nothing in the file tells which, so a durable writer syncs the folder
                # each time it opens the log: once per open, before its first line. A
                # failed sync closes the log (below): the next open syncs again.
                self._sync_folder()
            #<
            #> 11+
            # A long log whose end needs nothing: start from the end, even when this
            # process knows the log (copying what it knows costs more than the end)
            if not for_history and self._open_at_tail():
                return None     # nothing to repair at the end: the log is not read
            #<
            #> 07+
            known = None if for_history else recall(self._fd)
            if known is not None and known.settled and known.message_count is not None:
                # Parsed whole by this process (no corrupt line), unchanged since, and
                # ending whole with no call open: a read would find nothing to repair.
                self._know_from(known)
                return None
            #<
            #> 04
            # BEGIN 04.3
            #<
            #> 04+
            # Read what was opened, not the name again: it may name another file by now.
            data = read_all(self._fd, self.path)
            # Raises CorruptLog before anything is changed
            state = parse_log(data, self.path)
            #<
            #> 04-06
            self._repair(data, state)
            # A repair that added entries (a marker, results) changed the log: read it
            # again. That happens once after a crash; every other resume parses it once.
            if self.repaired is not None:
            #<
            #> 07+
            # A repair that wrote (a newline, a marker, results) changed the log: read
            # it again. That happens once after a crash; any other open parses it once.
            if self._repair(data, state):
            #<
                #> 04+
                state = parse_log(read_all(self._fd, self.path), self.path)
                #<
            #> 04
            return state    # the log as this writer goes on from it
            # END 04.3
            #<
            #> 07+
            self._know(state)
            #<
        #> 04+
        except BaseException:
        #<
            #> 04
            self.close()    # a log we refuse to repair is one we do not write to
            #<
            #> 05+
            self.close()    # a log we cannot take over is one we neither write nor lock
            #<
            #> 04+
            raise
            #<
        #> 05+
        return state
        #<
        #> 04+

        #<
    #> 04-06
    def _repair(self, data: bytes, state: LogState) -> None:
    #<
    #> 07+
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
    #<
        #> 08+
        # Lesson 08: the latest compaction, from the state already parsed; the process
        # remembers it with the rest, for a later writer that starts from what is known
        self.compacted = None if state.plain else state.compaction()
        self.known.compaction = self.compacted
        #<
    #> 07+
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
    #<
        #> 08+
        self.compacted = self.known.compaction = known.compaction
        #<
    #> 07+
        remember(status, self.known)

    def _repair(self, data: bytes, state: LogState) -> bool:
    #<
        #> 04
        """A place for the change to the file, if you want it in a method of its own.

        Only _open calls it: its parameters, what it returns, and whether it is there
        at all are yours to choose (task 04.3). Change them freely.
        """
        #<
        #> 05+
        """Make the log whole before this writer adds to it (a whole log: leave it).

        `data` is the log's bytes and `state` their parse_log(), as _open() read them.
        When it returns, the log ends in whole lines, the ones that were whole are as
        they were, and no call is left open at its end; self.repaired is the marker
        that says what was done, if bytes were cut or calls answered. Killed at any
        moment, it leaves a log the next writer's repair completes: never a marker
        without the results it names, never a made-up result without its marker.
        #<
        #> 07+
        Returns whether it wrote anything.
        #<
        #> 05+
        """
        #<
        #> 04+
        # BEGIN 04.3
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
        # END 04.3
        #<
        #> 07+
        return bool(fix)
        #<

    def _sync_folder(self) -> None:
        #> 01-03
        """Make the new log's name itself durable: once this returns, a power cut can
        no longer take away the name that reaches the file (its bytes are another
        matter, synced where they are written)."""
        #<
        #> 04+
        """Make the log's name itself durable: once this returns, a power cut can no
        longer take away the name that reaches the file (its bytes are another matter,
        synced where they are written)."""
        #<
        # BEGIN 01.4
        # fsync on the file saves its bytes; the entry "quest-1.jsonl" lives in the
        # folder, and until the folder is synced a power cut can lose the whole file.
        folder = os.open(self.folder, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
        # END 01.4
#> 02+

    def load(self) -> list[Message]:
#<
        #> 02-03
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
        #<
        #> 04-06
        """Every complete message in the log, in order; [] for a log not written yet.
        #<
        #> 07+
        """Every complete message the log shows, in order (undone ones left out); [] for
        a session that does not exist yet.
        #<
#> 04+

        Read-only: markers are left out, a torn tail is skipped (not cut: only the
#<
        #> 04-05
        writer repairs), and a corrupt line before the tail raises CorruptLog.
        #<
        #> 06+
        writer repairs), and a corrupt line before the tail raises CorruptLog. Each
        content stored as a blob is read back and checked against its hash (BlobError if
        it cannot be trusted).
        #<
        #> 04+
        """
        #<
        #> 04-05
        return read_log(self.path).messages
        #<
        #> 06+
        return self.history(read_log(self.path))

    def history(self, state: LogState) -> list[Message]:
        """The messages `state` shows, each blob reference replaced by its content."""
        #<
        #> 06
        return [
            self.inline(message, line) for line, message in state.numbered_messages()
        ]
        #<
        #> 08+
        # Lesson 08: where requests start (a log with no marker has no compaction)
        self.compacted = None if state.plain else state.compaction()
        #<
        #> 07+
        if state.plain:
            # The usual log: every entry is a message, shown, with its content
            return list(state.entries)
        shown = state.shown_once()
        return [self.inline(state.entries[position], state.lines[position])
                for _, position in shown]
        #<
        #> 02-03
        # END 02.1
        #<
    #> 08+

    def compact(self, summary: str, keep: int) -> int:
        """SessionCompaction.compact (task 08.1), then `compacted` kept true: the
        compaction just recorded is the log's latest (and remembered by the process,
        with the rest it knows of the log)."""
        upto = super().compact(summary, keep)
        # The compaction as every reader finds it (LogState.compaction): a compaction
        # is rare, and one more read of the log costs little beside its model call
        state = parse_log(read_all(self._fd, self.path), self.path)
        self.compacted = state.compaction()
        if self.known is not None:
            self.known.compaction = self.compacted
        return upto
    #<

    #> 11+
    # --- what real clients need: several messages at once, the last few (lesson 11) ---

    def extend(self, entries: list[Message]) -> None:
        """Write several messages, or item lines (item_line), with one write() of all
        their lines: every one of them lands in the log, or none does.

        Each is checked first, as append() checks one, and one that reading would refuse
        makes extend() refuse them all, writing nothing. An agent framework that saves
        a turn's items together (the model's calls, their outputs) never leaves half a
        turn in the log, as a crash between single appends could.
        """
        for entry in entries:
            check_plain_json(entry)
            if type(entry) is dict and ITEM in entry and "role" not in entry:
                check_item_line(entry)
            else:
                check_message(entry)
        if not entries:
            return
        if self._fd is None:
            self._open()        # become the writer first: only the writer stores blobs
        try:
            lines = [encode_line(self.outline(entry)) for entry in entries]
            self._write(b"".join(lines))
        finally:
            self.release_blobs()    # the lines are written (or never will be): unpin
        if self.known is not None:
            # _write() counted one line; there are len(lines): where each one ends
            end = self.known.ends.pop() - sum(map(len, lines))
            for line in lines:
                end += len(line)
                self.known.ends.append(end)
        self._count(entries)

    def _count(self, entries: list[Message]) -> None:
        """Keep what this writer knows of the log true after `entries`, messages, were
        written (one line each, the last lines of the log)."""
        if self.known is None:
            return      # not worked out yet (_open_at_tail): nothing to keep current
        first = len(self.known.ends) - len(entries)
        for position, entry in enumerate(entries, start=first):
            # Shown, with its index as written, at the position of its line
            self.shown.append((self.message_count, position))
            self.message_count += 1
        self.known.message_count = self.message_count
        self.known.settled = leaves_no_call_open(entries[-1])

    def load_last(self, count: int) -> list[Message]:
        """The last `count` messages the log shows, as load()[-count:] would give them,
        read from the end of the file rather than the whole log.

        Read-only, as load(). A torn last line is skipped. When the end alone cannot say
        which messages are shown (an undo marker among the last lines, a line that does
        not parse), the log is read whole instead: the answer is the same, and a
        damaged line is named (CorruptLog). Lines before the last `count` messages are
        not read, so damage there is found by load(), not here.
        """
        if count < 0:
            raise ValueError(f"cannot load the last {count} messages of {self.path}")
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return []
        try:
            tail = read_tail(fd, count) if count else None
            if tail is None:
                messages = self.history(read_open_log(fd, self.path)[1])
                return messages[len(messages) - count:] if count else []
            return [self.inline(entry, line_number(fd, start))
                    if type(entry.get("content")) is dict else entry
                    for entry, start in zip(tail.entries, tail.starts)]
        finally:
            os.close(fd)

    # --- a writer that starts from the end of the log (lesson 11) --------------------
    # Opening a long session to add one message used to read all of it: for the repair
    # (only the end can need one) and for what undo and fork use (which messages are
    # shown, where lines end). The end is read instead, and the rest only when asked.

    _unread = False     # shown and message_count not worked out yet: see _learn()

    def _open_at_tail(self) -> bool:
        """Become the writer from the end of the log alone, if that end needs no
        repair: whole, its last message leaving no call open, no undo marker near it.
        False (nothing changed) when the whole log must be read, and for a log that
        fits in one window of the tail. Damage before the end of a longer log is then
        found by whatever reads it whole (a resume, an undo, load), not here."""
        if os.fstat(self._fd).st_size <= TAIL_CHUNK:
            return False    # read whole, as cheap: damage anywhere in it is found
        tail = read_tail(self._fd, 1, LAST_LINE_WINDOW)
        if tail is None or tail.torn or tail.newline_missing:
            return False
        if tail.entries and not leaves_no_call_open(tail.entries[-1]):
            return False
        self._unread = True
        return True

    def _learn(self) -> None:
        """Work out which messages the log shows (and the rest _know() keeps) for a
        writer that started from the end: read and parse the whole log once."""
        self._unread = False
        state = parse_log(read_all(self._fd, self.path), self.path)
        self._know(state)
        self.known.settled = not state.entries or leaves_no_call_open(state.entries[-1])

    @property
    def shown(self) -> list[tuple[int, int]]:
        """(index, position) of every message the log shows (see __init__)."""
        if self._unread:
            self._learn()
        return self._shown

    @shown.setter
    def shown(self, value: list[tuple[int, int]]) -> None:
        self._shown = value
        self._unread = False    # worked out (_know), or a new writer's empty start

    @property
    def message_count(self) -> int:
        """How many messages the log holds, undone ones included (see __init__)."""
        if self._unread:
            self._learn()
        return self._message_count

    @message_count.setter
    def message_count(self, value: int) -> None:
        self._message_count = value

    #<
    def close(self) -> None:
        #> 01-04
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        #<
        #> 05+
        """Close the log, then let go of the lock (safe to call more than once)."""
        try:
            if self._fd is not None:
                fd, self._fd = self._fd, None
        #<
                #> 07+
                if self.known is not None:
                    recall(fd)      # the time of this writer's last write: see KnownLog
                #<
                #> 05+
                os.close(fd)
        finally:
                #<
                #> 09+
            self.release_blobs()
                #<
                #> 05+
            self._unlock()      # whatever closing the log raised
                #<

    def __enter__(self) -> "SessionLog":
        return self

    def __exit__(self, *exc_info: object) -> None:
        #> 01-04
        self.close()
        #<
        #> 05+
        self.close()  # on an exception too: a crashed writer must not keep the session
        #<
#> 04-06


def entries_for(entries: list[Message], count: int) -> int:
    """How many entries hold the first `count` messages (and the markers among them)."""
    seen = kept = 0
    for entry in entries:
        if seen == count:
            break
        kept += 1
        seen += MARKER not in entry
    return kept
#<
