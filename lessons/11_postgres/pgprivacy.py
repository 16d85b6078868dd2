# Lesson 11_postgres, yours to edit: generated from
# solutions/11_postgres/pgprivacy.py; `sessionlab reset 11` makes it again.
"""Lesson 09's privacy operations on PostgreSQL: delete, expire, erase, collect.

The same four ways out as the file store's, with the same meaning: a session deleted
under its lock (and the blobs only it used), the sessions nobody wrote for a retention
period expired, one message erased for good as a tombstone (its quotes in every other
row too), and the blobs no row refers to collected. The database makes two things
simpler: an erase is one transaction (no temporary file, no rename), and a blob and
the row that points to it commit together, so no grace period is needed.
"""

from __future__ import annotations

import time
from typing import Any

from .messages import encode_line, MARKER, Message
from .files import now
from .lock import SessionBusy
from .erase import contents_of, EraseError, QUOTE_MIN_CHARS, scrub, tombstone
from .blobs import BlobError
from .privacy import RETENTION_SECONDS
from .postgres import (
    connect, describe, hold_blobs, jsonb_body, PostgresSessionLog, psycopg, state_of,
    StoreBusy)

# Any 64 hexadecimal digits in a row's line count as a reference to that blob, parsed
# or not: a hash that happens to sit in a message keeps a blob, the safe mistake (the
# file store's mentioned_blobs reads its files the same way).
BLOB_NAMES = r"[0-9a-f]{64}"


def drop_blobs_of(connection: Any, names: list[str]) -> list[str]:
    """Remove each blob of `names` that no row of any session refers to; return the
    names removed. In a transaction of its own, after every writer storing a blob."""
    if not names:
        return []
    with connection.transaction():
        hold_blobs(connection, exclusive=True)
        return [row[0] for row in connection.execute(
            "DELETE FROM session_blobs b WHERE sha256 = ANY(%s) AND NOT EXISTS ("
            "SELECT 1 FROM session_entries e WHERE strpos(e.line, b.sha256) > 0) "
            "RETURNING sha256", (sorted(set(names)),))]


def blobs_of_session(connection: Any, session_id: str) -> list[str]:
    """Every blob name the session's rows mention."""
    return [row[0] for row in connection.execute(
        "SELECT DISTINCT m[1] FROM session_entries, regexp_matches(line, %s, 'g') m "
        "WHERE session_id = %s", (f"({BLOB_NAMES})", session_id))]


def shown_index(log: PostgresSessionLog, position: int) -> int:
    """PostgresSessionLog.index_of: the index (as undo markers count) of the
    `position`-th message the session shows."""
    if not log.writing:
        log._open()
    shown = state_of(log._rows(), log.where).shown()
    if not 0 <= position < len(shown):
        raise EraseError(f"{log.where} shows {len(shown)} message(s): there is no "
                         f"message {position}; nothing was erased")
    return shown[position][0]


def erase_rows(log: PostgresSessionLog, index: int) -> bool:
    """PostgresSessionLog.erase: lesson 09's erase, on rows. Message `index` (counting
    every message, undone ones included) becomes its tombstone, every other row that
    quotes its words has them replaced by ERASED, and an erase marker is added, in one
    transaction: all of it, or nothing. True; False when it was erased before. Then
    each blob the rewritten rows used goes, unless another row still refers to it.

    The erase is no use of the session: the marker row keeps the time of the last row
    before it, which expire_postgres() goes by, as the file store keeps its log's
    modification time. Raises EraseError, changing nothing, for an index the session
    does not hold.
    """
    if not log.writing:
        log._open()     # the writer first: its lock keeps every other writer out
    state = state_of(log._rows(), log.where)
    positions = [p for p, entry in enumerate(state.entries) if MARKER not in entry]
    if not 0 <= index < len(positions):
        raise EraseError(f"{log.where} holds {len(positions)} message(s): there is no "
                         f"message {index}; nothing was erased")
    if any(entry.get(MARKER) == "erase" and entry.get("index") == index
           for entry in state.entries):
        return False
    target = positions[index]
    texts = erased_texts(log, state.entries[target], state.lines[target])
    rewritten: list[str] = []

    def rows_then_marker() -> list[Message]:
        # Inside _write's transaction: a scrubbed content is stored as a new blob
        # here, so no collection may run from now until this transaction commits
        hold_blobs(log._connection())
        for position, entry in enumerate(state.entries):
            seq = state.lines[position]
            new = (tombstone(entry) if position == target
                   else scrubbed_row(log, entry, seq, texts))
            if new is None:
                continue
            line = encode_line(new).decode("utf-8")[:-1]
            log._connection().execute(
                "UPDATE session_entries SET line = %s, body = %s::jsonb "
                "WHERE session_id = %s AND seq = %s",
                (line, jsonb_body(line), log.id, seq))
            rewritten.extend(blob_of_entry(entry))
        return [{MARKER: "erase", "index": index, "at": now()}]

    def keep_the_time() -> None:
        # The marker is the session's last row: this writer holds the lock, and the
        # rows it just stored are in this transaction, seen by it alone
        log._connection().execute(
            "WITH marker AS (SELECT max(seq) AS seq FROM session_entries "
            "WHERE session_id = %s) "
            "UPDATE session_entries SET written = coalesce((SELECT max(written) FROM "
            "session_entries WHERE session_id = %s AND seq < (SELECT seq FROM marker)),"
            " written) WHERE session_id = %s AND seq = (SELECT seq FROM marker)",
            (log.id, log.id, log.id))

    log._write(rows_then_marker, together=True, then=keep_the_time)
    drop_blobs_of(log._connection(), rewritten)
    return True


def erased_texts(log: PostgresSessionLog, message: Message, seq: int) -> list[str]:
    """The texts of `message` to look for in every other row (its content read back
    from its blob), each at least QUOTE_MIN_CHARS long."""
    try:
        message = log.inline(message, seq)
    except BlobError:
        pass    # its blob is gone or damaged: what is left of it is the preview
    return [text for text in contents_of(message) if len(text) >= QUOTE_MIN_CHARS]


def scrubbed_row(log: PostgresSessionLog, entry: Message, seq: int,
             texts: list[str]) -> Message | None:
    """`entry` with every quote of `texts` replaced by ERASED (in a marker, any part
    of them), or None when it quotes none; a blob content is read back whole, and
    stored scrubbed as a new blob."""
    whole = entry
    if MARKER not in entry:
        try:
            whole = log.inline(entry, seq)
        except BlobError:
            pass    # a blob that cannot be read: its preview can still be scrubbed
    new = scrub(whole, texts)
    if new == whole:
        return None
    return new if MARKER in new else log.outline(new)


def blob_of_entry(entry: Message) -> list[str]:
    """The blob a row's entry points to, if any."""
    content = entry.get("content")
    name = content.get("$blob") if isinstance(content, dict) else None
    return [name] if isinstance(name, str) else []


def delete_postgres(url: str, session_id: str, *,
                    idle_before: float | None = None) -> bool:
    """Delete session `session_id`: its rows, its row of `sessions`, then each blob it
    used that no other row refers to. True if it deleted anything; False when there was
    nothing (deleting twice is not an error).

    Done as the session's writer, under its lock: SessionBusy, deleting nothing, while
    another writer holds it. With `idle_before` (a time.time()), the session is deleted
    only if its last row was written before then (its creation, for a session with
    none), judged under the lock. Forks are sessions of their own: they stay.
    """
    with PostgresSessionLog(url, session_id) as log:
        log._lock()     # SessionBusy while another writer holds it
        connection = log._connection()
        with connection.transaction():
            # The session's row locked first: a fork reading it waits, then finds none
            found = connection.execute(
                "SELECT coalesce((SELECT max(written) FROM session_entries WHERE "
                "session_id = %s), created) FROM sessions WHERE id = %s FOR UPDATE",
                (session_id, session_id)).fetchone()
            if found is None:
                return False
            if idle_before is not None and found[0].timestamp() >= idle_before:
                return False    # written to since the caller looked: in use
            names = blobs_of_session(connection, session_id)
            connection.execute("DELETE FROM session_entries WHERE session_id = %s",
                               (session_id,))
            connection.execute("DELETE FROM sessions WHERE id = %s", (session_id,))
        drop_blobs_of(connection, names)
    return True


def expire_postgres(url: str, *, older_than: float = RETENTION_SECONDS,
                    now: float | None = None) -> tuple[list[str], list[str]]:
    """Delete every session of the database whose last row was written `older_than`
    seconds ago or more. Returns (the ids deleted, the ids skipped because a writer
    holds them), as expire() does for a folder. An erase is no use (it keeps the time);
    a fork is a session of its own, as old as its rows."""
    cutoff = (time.time() if now is None else now) - older_than
    with connect(url) as connection:
        idle = [row[0] for row in connection.execute(
            "SELECT s.id FROM sessions s LEFT JOIN session_entries e "
            "ON e.session_id = s.id GROUP BY s.id, s.created "
            "HAVING coalesce(max(e.written), s.created) < to_timestamp(%s) "
            "ORDER BY s.id", (cutoff,))]
    deleted: list[str] = []
    busy: list[str] = []
    for session_id in idle:
        try:
            if delete_postgres(url, session_id, idle_before=cutoff):
                deleted.append(session_id)
        except SessionBusy:
            busy.append(session_id)
    return deleted, busy


def collect_postgres_blobs(url: str) -> list[str]:
    """Remove every blob no row refers to; return their names.

    Under BLOB_LOCK held exclusive: it waits for the writers in the middle of storing a
    blob (their rows are then committed, and seen), and holds back the next ones for
    the moment it takes. A blob whose row never committed (its writer died) went with
    its transaction, so there is no grace period to wait out. StoreBusy when a writer
    holds its transaction open longer than the connection's network_timeout.
    """
    with connect(url) as connection:
        try:
            with connection.transaction():
                hold_blobs(connection, exclusive=True)
                return [row[0] for row in connection.execute(
                    "WITH referenced AS (SELECT DISTINCT m[1] AS sha256 FROM "
                    "session_entries, regexp_matches(line, %s, 'g') m) "
                    "DELETE FROM session_blobs b WHERE NOT EXISTS (SELECT 1 FROM "
                    "referenced r WHERE r.sha256 = b.sha256) RETURNING sha256",
                    (f"({BLOB_NAMES})",))]
        except psycopg.errors.LockNotAvailable:
            raise StoreBusy(f"{describe(url)}: a writer has been storing a blob "
                            "for longer than the network timeout; nothing was "
                            "collected. Collect again later.") from None
