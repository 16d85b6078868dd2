#| 11+  11_postgres
"""The same store on PostgreSQL, for a service on several hosts.

PostgresSessionLog keeps a session as rows behind the interface SessionLog has. Of what
the file had to build (one writer, whole entries, a fork all there or not at all), the
database gives some for free; the rest is code here.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import socket
import time
from collections.abc import Callable
from datetime import timezone
from typing import Any

from .messages import (
    check_message, check_plain_json, check_session_id, encode_line, MARKER, Message,
    MessageTooLarge, parse_line)
from .files import now, SessionExists, SessionNotFound
from .reading import Compaction, interrupted_result, LogState, unanswered_calls
from .lock import LOCK_POLL_SECONDS, SessionBusy
from .blobs import BLOB_NAME, BLOB_THRESHOLD, BlobError, PREVIEW_CHARS
from .undo import UndoError
from .compaction import compaction_marker
from .log import WriterStopped


try:
    import psycopg      # lesson 11's store; everything else needs only the stdlib
    import psycopg.conninfo
except ImportError:     # pip install -e '.[postgres]'
    psycopg = None


# --- lesson 11: the same store on PostgreSQL ------------------------------------------
#
# One row per entry (message or marker), in the order the file has its lines: `seq` is
# the line's place, from 0. `line` holds the entry as the file store writes it, the
# bytes the model sent, key order and all; `body` holds the same entry as jsonb, for
# queries ("every session that bought a rope"), never read back (see jsonb_body).

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id        text PRIMARY KEY,
    parent    text,
    forked_at integer,
    created   timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS session_entries (
    session_id text    NOT NULL REFERENCES sessions (id),
    seq        integer NOT NULL,
    line       text    NOT NULL,
    body       jsonb,
    written    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, seq)
);
CREATE TABLE IF NOT EXISTS session_blobs (
    sha256 text  PRIMARY KEY,
    data   bytea NOT NULL
);
DO $$ BEGIN
    -- Tables made before `written` (expire_postgres's clock) get it, once
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attname = 'written'
                   AND attrelid = 'session_entries'::regclass) THEN
        ALTER TABLE session_entries
            ADD COLUMN written timestamptz NOT NULL DEFAULT now();
    END IF;
END $$;
"""


# The largest content session_blobs takes: one bytea value, and the message that
# carries it to the server, stop at 1 GiB. (The file store has no such limit.)
MAX_BLOB_BYTES = 1023 * 2**20


# The blobs' advisory lock. Removing the blobs no row points to (pgprivacy.py) holds
# it exclusive for its whole transaction; a fork and an erase, which store rows that
# point to blobs, hold it shared for theirs. What a paste needs of it is task 11.4's
# question (an advisory lock taken in a transaction is let go as the transaction ends).
BLOB_LOCK = 0x5E5511


def hold_blobs(connection: Any, *, exclusive: bool = False) -> None:
    """Take BLOB_LOCK for the connection's current transaction (see above)."""
    function = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
    connection.execute(f"SELECT {function}(%s)", (BLOB_LOCK,))


# Any number, the same in every process: two connections creating the tables at once
# take turns on it (CREATE TABLE IF NOT EXISTS alone can fail when two race).
SCHEMA_LOCK = 0x5E5510


class SessionConflict(RuntimeError):
    """Another writer stored an entry at the place this writer meant to use: the
    session changed since this writer read it. Nothing of this write was stored."""


class CorruptRow(ValueError):
    """A row whose line is no entry: someone changed the table by hand."""


# How long, in seconds, the store waits on a peer that went silent. The server ends a
# connection whose network is gone (TCP keepalives, tcp_user_timeout) and one left idle
# inside a transaction (a writer frozen between its blob and its row), and the locks
# go with it; a statement waits this long for a row another transaction holds (the same
# content being stored), then gives up; the client gives up on a silent server.
# Without them a lost network keeps a session busy for hours: TCP alone notices a peer
# that vanished only when it next sends, and an idle lock holder sends nothing.
NETWORK_TIMEOUT_SECONDS = 30.0


class StoreBusy(RuntimeError):
    """A write waited too long for a row another transaction holds and has not
    committed (the same content being stored by another writer): nothing of this write
    was stored, and the writer may try again."""


def connection_settings(url: str, durable: bool, network_timeout: float
                        ) -> dict[str, Any]:
    """libpq's parameters for `url`: the URL's own, the timeouts added where it sets
    none. Server settings go in `options` before the URL's (the last -c wins, so an
    operator's URL can tune them), synchronous_commit after it (the caller decides)."""
    seconds = max(1, round(network_timeout))
    milliseconds = str(max(1, round(network_timeout * 1000)))
    idle, interval = str(max(1, seconds // 2)), str(max(1, seconds // 6))
    server = {"tcp_keepalives_idle": idle, "tcp_keepalives_interval": interval,
              "tcp_keepalives_count": "3", "tcp_user_timeout": milliseconds,
              "idle_in_transaction_session_timeout": milliseconds,
              "lock_timeout": milliseconds}
    client = {"keepalives": "1", "keepalives_idle": idle,
              "keepalives_interval": interval, "keepalives_count": "3",
              "tcp_user_timeout": milliseconds, "connect_timeout": str(seconds)}
    settings = psycopg.conninfo.conninfo_to_dict(url)
    options = [f"-c {name}={value}" for name, value in server.items()]
    options += [settings.get("options") or "",
                f"-c synchronous_commit={'on' if durable else 'off'}"]
    return {**client, **settings, "options": " ".join(filter(None, options))}


def connect(url: str, *, durable: bool = False,
            network_timeout: float = NETWORK_TIMEOUT_SECONDS) -> Any:
    """A connection to the database at `url`, the tables made if they are missing.

    Autocommit: every statement is a transaction of its own, committed when it returns,
    as a line is written when write() returns. durable=False sets synchronous_commit
    off: the commit returns before the server has flushed it, so a crash of the server
    (not of ours) can lose the last few commits, never a part of one: the file store's
    write() without fsync. durable=True waits for the flush, as fsync does.
    `network_timeout`: see NETWORK_TIMEOUT_SECONDS.
    """
    if psycopg is None:
        raise RuntimeError("the PostgreSQL store needs psycopg 3: "
                           "pip install -e '.[postgres]'")
    # Who this is, for a SessionBusy the other writer sees (pg_stat_activity shows it)
    me = f"sessionlab pid {os.getpid()} on {socket.gethostname()}"
    connection = psycopg.connect(
        autocommit=True, **{**connection_settings(url, durable, network_timeout),
                            "application_name": me[:63]})
    try:
        with connection.transaction():
            connection.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
            connection.execute(SCHEMA)
    except BaseException:
        connection.close()
        raise
    return connection


def lock_key(session_id: str) -> int:
    """The session's advisory lock: a signed 64-bit number made from its id."""
    digest = hashlib.sha256(session_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def lock_holder(connection: psycopg.Connection, session_id: str) -> dict[str, Any]:
    """Who holds the session's lock, as the server knows it: {"pid", "host", "since"}
    (the holder's own process, its host, since when), or {} when no one does."""
    # BEGIN 11.1
    key = lock_key(session_id)
    row = connection.execute(
        "SELECT a.application_name, a.backend_start FROM pg_locks l "
        "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' "
        # An advisory lock is one database's: the same key in another is no hold here
        "AND l.database = (SELECT oid FROM pg_database "
        "WHERE datname = current_database()) "
        "AND l.granted AND l.classid = %s AND l.objid = %s AND l.objsubid = 1",
        ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF)).fetchone()
    if row is None:
        return {}
    found = re.fullmatch(r"sessionlab pid (\d+) on (.*)", row[0] or "")
    if found is None:
        return {}
    return {"pid": int(found[1]), "host": found[2],
            "since": row[1].astimezone(timezone.utc).isoformat(timespec="seconds")}
    # END 11.1


def jsonb_body(line: str) -> str | None:
    """The entry's text for the jsonb column, or None where jsonb cannot hold it.

    jsonb stores parsed JSON, not text: it sorts an object's keys (shorter first), keeps
    only the last of duplicate keys, drops the spaces, and refuses the escape \\u0000
    (no text column holds a NUL). So the store reads `line`, the text as written, and
    keeps `body` for queries only: NULL for a line holding that escape (or an escaped
    backslash before "u0000", which only costs that row its queries).
    """
    return None if "\\u0000" in line else line


def state_of(rows: list[tuple[int, str]], where: str) -> LogState:
    """The LogState of a session's rows, (seq, line) in seq order: the replay of
    lessons 04 and 07 (markers, undone messages) works on it as on a file's."""
    entries: list[Message] = []
    for seq, line in rows:
        try:
            entries.append(parse_line(line.encode("utf-8")))
        except ValueError as error:
            raise CorruptRow(f"{where}: the row with seq {seq} is no entry: {error}. "
                             "Rows are only ever inserted, so someone changed it; "
                             "nothing was changed. Mend or remove it by hand."
                             ) from None
    # A row is a whole entry or none: nothing is torn, so end and size say nothing.
    return LogState(entries, end=0, size=0, lines=[seq for seq, _ in rows])


def describe(url: str) -> str:
    """The database, named for an error message: no password, no query string."""
    shown = re.sub(r"//[^@/]*@", "//", url)
    return shown.split("?")[0]


class PostgresSessionLog:
    """One session's log as rows of PostgreSQL's `session_entries`: an entry a row.

    The interface of SessionLog: open_for_append() becomes the writer and returns the
    history (repaired), append() adds a message, load() reads without writing, undo()
    marks the last messages undone, close() lets go. `url` is a libpq URL
    (postgresql://user@host/db). A writer holds the session's lock (lock=True), which
    goes when its connection ends, however it ends; with lock=False nothing is locked,
    and two writers' entries are still never stored at one place (the second one's
    write is refused: SessionConflict).
    """

    def __init__(
        self,
        url: str,
        session_id: str,
        *,
        durable: bool = False,
        lock: bool = True,
        timeout: float | None = 0,
        blob_threshold: int = BLOB_THRESHOLD,
        network_timeout: float = NETWORK_TIMEOUT_SECONDS,
    ) -> None:
        self.id = check_session_id(session_id)  # the same ids: a session may move
        self.url = url
        self.where = f"session {self.id!r} in {describe(url)}"
        self.durable = durable
        self.lock = lock
        self.timeout = timeout
        self.blob_threshold = blob_threshold
        self.network_timeout = network_timeout
        self.connection: Any = None
        # True once this object is the session's writer (it has read the session)
        self.writing = False
        # What this writer knows of where the session ends: task 11.2 decides what it
        # holds. Set when the writer opens; put back by _write when a write fails.
        self.end: Any = None
        # Why this writer refuses to write any more (a conflict, a lost connection)
        self.stopped: str | None = None
        # The repair marker this writer wrote, if any
        self.repaired: Message | None = None
        # The latest compaction the last read found (lesson 08's view of the history)
        self.compacted: Compaction | None = None

    def _connection(self) -> Any:
        if self.connection is None:
            self.connection = connect(self.url, durable=self.durable,
                                      network_timeout=self.network_timeout)
        return self.connection

    def _rows(self) -> list[tuple[int, str]]:
        return self._connection().execute(
            "SELECT seq, line FROM session_entries WHERE session_id = %s ORDER BY seq",
            (self.id,)).fetchall()

    def open_for_append(self) -> list[Message]:
        """Become the session's writer and return its history, with the tail repaired.

        Nothing is created for a session that has no rows yet: its first append does.
        """
        if not self.writing:
            return self.history(self._open())
        return self.load()

    def _open(self) -> LogState:
        """Take the lock, then read the session and repair it: the writer's state."""
        self.repaired = None    # this takeover's repair marker, if it makes one
        try:
            if self.lock:
                self._lock()
            state = self._repair()
        except BaseException:
            self.close()
            raise
        self.writing = True
        return state

    def _read(self) -> LogState:
        """The session as its rows are now; what this writer keeps (`end`) is learnt
        from the same rows."""
        state = state_of(self._rows(), self.where)
        # BEGIN 11.2
        self.end = state.lines[-1] + 1 if state.lines else 0
        # END 11.2
        return state

    def _lock(self) -> None:
        """Take the session's lock, waiting up to self.timeout seconds; SessionBusy,
        naming the holder, if it stays taken.

        Held until this connection unlocks it or ends: a writer whose process dies, or
        whose connection drops, lets go at once, as a flock does when its process dies.
        """
        # BEGIN 11.1
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while True:
            taken = self._connection().execute(
                "SELECT pg_try_advisory_lock(%s)", (lock_key(self.id),)).fetchone()[0]
            if taken:
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise SessionBusy(self.id, self.holder())
            time.sleep(LOCK_POLL_SECONDS)
        # END 11.1

    def holder(self) -> dict[str, Any]:
        """Who holds the session's lock: see lock_holder."""
        return lock_holder(self._connection(), self.id)

    def _repair(self) -> LogState:
        """Read the session and answer the tool calls it shows without results, after
        a repair marker (kept in `repaired`); the state the writer starts from.

        A torn line cannot happen here: an insert lands whole or not at all. A call
        without its result still can: the process died between the insert of the call
        and the insert of its result (two statements, two transactions).
        """
        # BEGIN 11.3
        while True:
            state = self._read()
            calls = unanswered_calls(state.messages)
            if not calls:
                return state
            marker = {MARKER: "repair", "at": now(), "cut_bytes": 0,
                      "cut_preview": "", "interrupted": [call["id"] for call in calls]}
            results = [interrupted_result(call) for call in calls]
            try:
                # One write, at the place after the rows just read: the marker and
                # the results land together, and only onto the session as read
                self._write(lambda: [marker, *results])
            except SessionConflict:
                # Someone stored a row since the read (another host's repair of the
                # same calls, a call's real result): this writer has told nothing
                # yet, so it is no stale writer. Decide again from the rows as they
                # are now (each round lost is a row someone else stored)
                self.stopped = None
                continue
            self.repaired = marker
            return self._read()     # the session as repaired, and where it ends now
        # END 11.3

    def append(self, message: Message) -> None:
        """Store one message as the session's next row."""
        check_plain_json(message)
        check_message(message)
        if not self.writing:
            self._open()
        content = message.get("content")
        if (isinstance(content, str)
                and len(content.encode("utf-8")) > self.blob_threshold):
            self._append_large(message)
        else:
            # One INSERT is atomic by itself: no BEGIN and COMMIT, two round trips fewer
            self._write(lambda: [message])

    def _append_large(self, message: Message) -> None:
        """Store `message`, whose content is over blob_threshold: the content in
        session_blobs (outline makes the reference and stores it), and the message's
        row, pointing to it."""
        # BEGIN 11.4
        # The blob and the row that points to it in one transaction: both or neither
        self._write(lambda: [self.outline(message)], together=True)
        # END 11.4

    def _write(self, entries: Callable[[], list[Message]], *,
               together: bool = False, then: Callable[[], None] | None = None) -> None:
        """Store the entries `entries()` makes (one INSERT: all rows or none), then
        run `then()` if given. With together=True, all of it is one transaction;
        without it, each statement commits as it returns.

        A broken connection (at BEGIN, during the insert, at COMMIT; the server ended
        it, the network went silent) leaves unknown whether the server committed, so
        this writer stops: a retry could store a message twice. WriterStopped says so.
        A statement the server refused on a sound connection stored nothing (its
        transaction is rolled back): the error goes up and the writer goes on.
        """
        connection = self._connection()
        transaction = (connection.transaction() if together
                       else contextlib.nullcontext())
        start = self.end
        try:
            with transaction:
                self._insert(entries())
                if then is not None:
                    then()
        except psycopg.Error as error:
            if not self.stopped:
                self.end = start   # rolled back, or unknown: the writer stops
            if connection.broken:
                self.stopped = (
                    f"{self.where}: the connection broke during a write "
                    f"({str(error).strip()}), so whether it was stored is unknown and "
                    "this writer stopped. Open the session again.")
                raise WriterStopped(self.stopped) from None
            if isinstance(error, psycopg.errors.LockNotAvailable):
                raise StoreBusy(self.busy_message()) from None
            raise

    def busy_message(self) -> str:
        """Why a write gave up waiting (lock_timeout): which transactions hold rows of
        the store's tables uncommitted, as the server knows them."""
        found = self._connection().execute(
            "SELECT DISTINCT a.application_name, a.pid, a.state, a.xact_start "
            "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'relation' AND l.mode = 'RowExclusiveLock' "
            "AND l.granted AND l.pid <> pg_backend_pid() AND l.relation = ANY(ARRAY["
            "'session_blobs'::regclass, 'session_entries'::regclass, "
            "'sessions'::regclass])").fetchall()
        holders = "; ".join(
            f"{name or 'a connection'} (server process {pid}, {state} in a "
            f"transaction open since {start.isoformat(timespec='seconds')})"
            for name, pid, state, start in found) or "a transaction that ended since"
        return (f"{self.where}: this write waited {self.network_timeout:g} s for rows "
                "another transaction stored and has not committed (the same large "
                f"content, or this session's next place): {holders}. Nothing of this "
                "write was stored; try again (the server ends a transaction left idle "
                f"for {self.network_timeout:g} s).")

    def _insert(self, entries: list[Message]) -> None:
        """Store `entries` as the session's next rows (in _write's transaction).

        SessionConflict when another writer stored an entry since this one read the
        session, lock or no lock.
        """
        if self.stopped:
            raise WriterStopped(self.stopped)
        lines = [encode_line(entry).decode("utf-8")[:-1] for entry in entries]
        connection = self._connection()
        # BEGIN 11.2
        seq = self.end
        rows = [(self.id, seq + k, line, jsonb_body(line))
                for k, line in enumerate(lines)]
        # The session's first entry records it in `sessions` in the same statement
        first = ("WITH made AS (INSERT INTO sessions (id) VALUES (%s) "
                 "ON CONFLICT (id) DO NOTHING) " if seq == 0 else "")
        try:
            # One statement, however many rows: they land together or not at all
            connection.execute(
                first + "INSERT INTO session_entries (session_id, seq, line, body) "
                "VALUES " + ", ".join(["(%s, %s, %s, %s::jsonb)"] * len(rows)),
                [self.id] * (seq == 0) + [value for row in rows for value in row])
        except psycopg.errors.UniqueViolation:
            self.stopped = (
                f"{self.where}: another writer stored entry {seq} first, so this "
                "writer stopped (its view of the session is out of date). Open the "
                "session again: its history is then read from the database.")
            raise SessionConflict(self.stopped) from None
        self.end = seq + len(rows)
        # END 11.2

    def load(self) -> list[Message]:
        """Every message the session shows, in order; [] for one with no rows. Read
        only: no lock, no repair."""
        return self.history(state_of(self._rows(), self.where))

    def history(self, state: LogState) -> list[Message]:
        """The messages `state` shows, each blob reference replaced by its content."""
        self.compacted = state.compaction()     # lesson 08: where requests start
        return [self.inline(state.entries[position], state.lines[position])
                for _, position in state.shown()]

    def undo(self, count: int, seen: int | None = None) -> list[int]:
        """Take back the last `count` messages the session shows, with one marker row.
        `seen`, when given, is how many messages the caller last saw it show: a session
        that shows another number was written since by someone else, and the undo is
        refused (the file store's undo, lesson 07).

        The rows stay; the marker tells every later reader to leave them out. As the
        file store's undo (lesson 08), it refuses to take back a message the session's
        latest compaction summarised, read from the rows: the summary would still tell
        the model about it, whoever undoes (a writer that never read the history too).
        """
        if not self.writing:
            self._open()
        state = state_of(self._rows(), self.where)
        shown = [index for index, _ in state.shown()]
        if not 0 < count <= len(shown):
            raise UndoError(f"cannot undo {count} message(s) of {self.where}: it "
                            f"shows {len(shown)}")
        if seen is not None and seen != len(shown):
            raise UndoError(f"cannot undo {count} message(s) of {self.where}: it shows "
                            f"{len(shown)} where the caller saw {seen}, so another "
                            "writer has changed it since. Resume the session to see it "
                            "as it is, then undo")
        compaction = state.compaction()
        first = len(shown) - count      # the place of the first message taken back
        if compaction is not None and first < compaction.boundary:
            raise UndoError(
                f"cannot undo {count} message(s) of {self.where}: message {first} is "
                "summarised by its compaction (requests start again at message "
                f"{compaction.boundary}), and the summary would still tell the model "
                f"about it. Fork the session from before message {first} instead")
        skip = shown[len(shown) - count:]
        self._write(lambda: [{MARKER: "undo", "skip": skip, "at": now()}])
        return skip

    def compact(self, summary: str, keep: int) -> int:
        """Lesson 08's compaction, as a marker row: `summary` stands for every message
        the session shows but the last `keep`. Returns the marker's "upto"."""
        if not self.writing:
            self._open()
        marker = compaction_marker(state_of(self._rows(), self.where), keep, summary,
                                   self.where)
        self._write(lambda: [marker])
        return marker["upto"]

    def index_of(self, position: int) -> int:
        """The index (as undo markers count) of the `position`-th message shown."""
        from .pgprivacy import shown_index  # lesson 09's privacy, in its own module
        return shown_index(self, position)

    def erase(self, index: int) -> bool:
        """Erase message `index` for good, as lesson 09's erase does on a file: see
        pgprivacy.erase_rows."""
        from .pgprivacy import erase_rows
        return erase_rows(self, index)

    # --- large content, stored once by its hash ---------------------------------------

    def outline(self, message: Message) -> Message:
        """The message as its row stores it: a large content, a blob reference."""
        content = message.get("content")
        if not isinstance(content, str):
            return message
        data = content.encode("utf-8")      # check_plain_json refused a lone surrogate
        if len(data) <= self.blob_threshold:
            return message
        if len(data) > MAX_BLOB_BYTES:
            raise MessageTooLarge(
                f"{self.where}: a content of {len(data)} bytes is more than the "
                f"{MAX_BLOB_BYTES} a row of session_blobs may hold (PostgreSQL's bytea "
                "and its protocol stop at 1 GiB); nothing was written")
        reference = {"$blob": self.store_blob(data), "size": len(data),
                     "preview": content[:PREVIEW_CHARS]}
        return {**message, "content": reference}

    def store_blob(self, data: bytes) -> str:
        """Store `data` in session_blobs under its sha256, once, and return the hash."""
        # BEGIN 11.4
        # The collections' lock, shared, before the insert: a collection that has
        # picked these bytes to remove finishes first (the insert stores them again);
        # one that starts later waits until the caller's transaction, and the row that
        # points to them, commits. Alone (autocommit), it ends with its statement.
        hold_blobs(self._connection())
        digest = hashlib.sha256(data).hexdigest()
        # The same bytes have the same name: if they are stored already (by any
        # session, a fork's parent, another host), there is nothing to do. The
        # conflict clause waits for another transaction storing the same name.
        self._connection().execute(
            "INSERT INTO session_blobs (sha256, data) VALUES (%s, %s) "
            "ON CONFLICT (sha256) DO NOTHING", (digest, data))
        return digest
        # END 11.4

    def inline(self, message: Message, seq: int) -> Message:
        """The message as the agent sees it: a blob reference, its content again."""
        reference = message.get("content")
        if not (isinstance(reference, dict) and "$blob" in reference):
            return message
        name = reference["$blob"]
        where = f"{self.where}: row {seq}"
        if not isinstance(name, str) or not BLOB_NAME.fullmatch(name):
            raise BlobError(f"{where}: the blob reference {name!r} is no sha256 hash")
        row = self._connection().execute(
            "SELECT data FROM session_blobs WHERE sha256 = %s", (name,)).fetchone()
        if row is None:
            raise BlobError(f"{where}: blob {name} is missing from session_blobs")
        data = bytes(row[0])
        if hashlib.sha256(data).hexdigest() != name:
            raise BlobError(f"{where}: blob {name} was changed after it was stored: "
                            "its bytes no longer match its hash")
        try:
            return {**message, "content": data.decode("utf-8")}
        except UnicodeDecodeError:
            raise BlobError(f"{where}: blob {name} is not UTF-8 text") from None

    def close(self) -> None:
        """Let go of the lock, then close the connection."""
        connection, self.connection = self.connection, None
        self.writing, self.end = False, None
        if connection is None:
            return
        try:
            if not connection.broken:
                # Now, in this statement: a closed connection's lock goes only once its
                # server process has exited, a moment later, and a writer opened right
                # after this one would find the session busy in that moment.
                connection.execute("SELECT pg_advisory_unlock_all()")
        except psycopg.Error:
            pass    # the connection broke: the server lets go once it notices
        finally:
            connection.close()

    def __enter__(self) -> "PostgresSessionLog":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def fork_postgres(url: str, source_id: str, new_id: str, *,
                  upto: int | None = None, durable: bool = False) -> None:
    """Start session `new_id` with the history of `source_id` (its first `upto`
    messages shown), in one transaction: the fork is all there, or not at all.

    durable=True returns only once the server has flushed the fork's commit
    (synchronous_commit on, as the file store's durable fork syncs its files): a fork
    it acknowledged survives a crash of the server. Without it, as a writer without
    durable, the last commits before a crash of the server may be lost, never a part
    of one.

    Refuses, changing nothing, when the source does not exist (SessionNotFound), when
    `new_id` is taken (SessionExists) or being written (SessionBusy), or when `upto` is
    more than the source shows (ValueError).
    """
    check_session_id(source_id)
    check_session_id(new_id)
    where = f"session {source_id!r} in {describe(url)}"
    with connect(url) as connection, connection.transaction():
        if durable:     # this transaction's commit waits until it is flushed
            connection.execute("SET LOCAL synchronous_commit = on")
        hold_blobs(connection)  # the copied rows point to blobs: none goes meanwhile
        # The source's row locked (shared) until the fork commits: a delete waits
        if connection.execute("SELECT 1 FROM sessions WHERE id = %s FOR SHARE",
                              (source_id,)).fetchone() is None:
            raise SessionNotFound(f"cannot fork from {source_id!r}: no such session "
                                  f"in {describe(url)}")
        # A writer starting `new_id` right now holds its lock: wait for no one
        if not connection.execute("SELECT pg_try_advisory_xact_lock(%s)",
                                  (lock_key(new_id),)).fetchone()[0]:
            raise SessionBusy(new_id, lock_holder(connection, new_id))
        state = state_of(connection.execute(
            "SELECT seq, line FROM session_entries WHERE session_id = %s "
            "ORDER BY seq", (source_id,)).fetchall(), where)
        # BEGIN 11.5
        shown = state.shown()
        count = len(shown) if upto is None else upto
        if not 0 <= count <= len(shown):
            raise ValueError(f"cannot fork the first {upto} messages of "
                             f"{source_id!r}: it shows {len(shown)}")
        # Rows up to the one holding the last message kept, as lesson 07's fork; the
        # bound is a seq, not a count (a row deleted by hand leaves a gap)
        kept = len(state.entries) if upto is None else (
            shown[count - 1][1] + 1 if count else 0)
        keep = state.lines[kept - 1] + 1 if kept else 0
        left = []
        if count and kept < len(state.entries) and shown[count - 1][0] >= count:
            # A message before the cut is taken back, maybe by a marker past it
            # (another program's marker may take back any message written before
            # it): the fork takes back itself what the rows it copies still show
            wanted = {index for index, _ in shown[:count]}
            left = [index for index, _ in LogState(state.entries[:kept], 0, 0).shown()
                    if index not in wanted]
        try:
            connection.execute(
                "INSERT INTO sessions (id, parent, forked_at) VALUES (%s, %s, %s)",
                (new_id, source_id, count))
        except psycopg.errors.UniqueViolation:
            raise SessionExists(f"cannot fork onto {new_id!r}: that session already "
                                f"exists in {describe(url)}") from None
        # One statement copies the rows inside the server; the transaction makes
        # the new session and its rows appear together, or (on any error) neither.
        connection.execute(
            "INSERT INTO session_entries (session_id, seq, line, body) "
            "SELECT %s, seq, line, body FROM session_entries "
            "WHERE session_id = %s AND seq < %s", (new_id, source_id, keep))
        if left:
            line = encode_line({MARKER: "undo", "skip": left, "at": now()})
            text = line.decode("utf-8")[:-1]
            connection.execute(
                "INSERT INTO session_entries (session_id, seq, line, body) "
                "VALUES (%s, %s, %s, %s::jsonb)",
                (new_id, keep, text, jsonb_body(text)))
        # END 11.5


def lineage(url: str, session_id: str) -> dict[str, Any] | None:
    """The session's row of `sessions` ({"id", "parent", "forked_at", "created"}), as
    the file store's meta file says it; None for no such session."""
    with connect(url) as connection:
        row = connection.execute(
            "SELECT id, parent, forked_at, created FROM sessions WHERE id = %s",
            (check_session_id(session_id),)).fetchone()
    if row is None:
        return None
    return {"id": row[0], "parent": row[1], "forked_at": row[2],
            "created": row[3].isoformat(timespec="seconds")}
