# Lesson 09_privacy, yours to edit: generated from
# solutions/09_privacy/privacy.py; `sessionlab reset 09` makes it again.
"""Sessions are personal data: delete, expire, collect.

Deleting a session removes its log, its meta file, its lock and the blobs only it
used; expiring deletes the sessions nobody has written for a retention period;
collecting removes blobs that no line refers to any more. Each takes the session's
lock, so nothing is deleted under a writer.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from .messages import check_session_id, SESSION_ID
from .files import read_file
from .lock import SessionBusy
from .blobs import BLOB_NAME, discard_leftover, drop_blobs, mentioned_blobs
from .log import SessionLog


# expire(): a session whose log nobody has appended to for this long is deleted. Claude
# Code's default is 30 days (its cleanupPeriodDays setting).
RETENTION_SECONDS = 30 * 24 * 3600


# collect_blobs(): a blob touched this recently is kept even if no log refers to it
# yet. A writer stores (or touches) a blob before it writes the line pointing to it,
# and this is how long it may take between the two.
BLOB_GRACE_SECONDS = 3600.0


def session_files(folder: Path, session_id: str) -> list[Path]:
    """The files of session `session_id` that delete_session() removes, its lock file
    aside."""
    # TODO(09.1): Delete a session under its lock.
    # Your design: the whole function is yours to shape; the tests check only what it
    # does.
    # What it asks: `sessionlab task 09.1`. Hints: `sessionlab hint --task 09.1`.
    raise NotImplementedError(
        "task 09.1 is not written yet: Delete a session under its lock"
    )


def is_temporary_of(name: str, of: str) -> bool:
    """Is `name` a temporary file made for the file named `of` (tempfile.mkstemp's
    `.<of>.<random>.tmp`, with no dot in the random part)? Exactly that: session "quest"
    never takes one of session "quest.jsonl" (`.quest.jsonl.jsonl.<random>.tmp`)."""
    # TODO(09.1): Delete a session under its lock.
    # Your design: the whole function is yours to shape; the tests check only what it
    # does.
    # What it asks: `sessionlab task 09.1`. Hints: `sessionlab hint --task 09.1`.
    raise NotImplementedError(
        "task 09.1 is not written yet: Delete a session under its lock"
    )


def anything_of(folder: Path, session_id: str) -> bool:
    """Whether the folder holds anything at all of session `session_id`."""
    # TODO(09.1): Delete a session under its lock.
    # Your design: the whole function is yours to shape; the tests check only what it
    # does.
    # What it asks: `sessionlab task 09.1`. Hints: `sessionlab hint --task 09.1`.
    raise NotImplementedError(
        "task 09.1 is not written yet: Delete a session under its lock"
    )


def delete_session(folder: str | Path, session_id: str) -> bool:
    """Delete session `session_id`: its log, meta file, leftover temporary files and
    lock, and each blob it used that no other file refers to. True if it deleted
    anything; False when there was nothing (deleting twice is not an error).

    SessionBusy, deleting nothing, while another process writes the session.
    Forks are sessions of their own: they stay. A delete that stopped half-way (a
    crash, an I/O error) is finished by running it again.
    """
    # TODO(09.1): Delete a session under its lock.
    # Your design: the whole function is yours to shape; the tests check only what it
    # does.
    # What it asks: `sessionlab task 09.1`. Hints: `sessionlab hint --task 09.1`.
    raise NotImplementedError(
        "task 09.1 is not written yet: Delete a session under its lock"
    )


def delete_locked(folder: Path, session_id: str) -> list[str]:
    """Remove the files of session `session_id`, whose lock the caller holds, and
    return the names of the blobs they mention (for drop_blobs(): this removes none).
    """
    # TODO(09.1): Delete a session under its lock.
    # Your design: the whole function is yours to shape; the tests check only what it
    # does.
    # What it asks: `sessionlab task 09.1`. Hints: `sessionlab hint --task 09.1`.
    raise NotImplementedError(
        "task 09.1 is not written yet: Delete a session under its lock"
    )


def expire(folder: str | Path, *, older_than: float = RETENTION_SECONDS,
           now: float | None = None) -> tuple[list[str], list[str]]:
    """Delete every session of `folder` nobody has appended to for `older_than`
    seconds. Returns (the ids deleted, the ids skipped because a writer holds them).

    "Older than" goes by the log's last append (an erase is none). Not by the meta
    file's "created": a session forked long ago and used yesterday is in use. A session
    being written is never deleted: it is skipped, and expired next time if it is still
    idle. What a stopped delete left of a session
    (a meta file, without a log) goes too, by the same rule.
    """
    # TODO(09.2): Expire the sessions nobody has used for a while.
    # Your design: the whole function is yours to shape; the tests check only what it
    # does.
    # What it asks: `sessionlab task 09.2`. Hints: `sessionlab hint --task 09.2`.
    raise NotImplementedError(
        "task 09.2 is not written yet: Expire the sessions nobody has used for a while"
    )


def expire_session(folder: Path, session_id: str, cutoff: float) -> bool:
    """Delete session `session_id` for expire(), if nobody has appended to it since
    `cutoff`: True if it did. SessionBusy while a writer holds it."""
    # TODO(09.2): Expire the sessions nobody has used for a while.
    # Your design: the whole function is yours to shape; the tests check only what it
    # does.
    # What it asks: `sessionlab task 09.2`. Hints: `sessionlab hint --task 09.2`.
    raise NotImplementedError(
        "task 09.2 is not written yet: Expire the sessions nobody has used for a while"
    )


def expire_leftovers(folder: Path, cutoff: float) -> tuple[list[str], list[str]]:
    """What expire() does with what is left of sessions without their log, as old as
    `cutoff`. Returns (the ids deleted, the ids skipped because a writer holds them)."""
    # TODO(09.2): Expire the sessions nobody has used for a while.
    # Your design: the whole function is yours to shape; the tests check only what it
    # does.
    # What it asks: `sessionlab task 09.2`. Hints: `sessionlab hint --task 09.2`.
    raise NotImplementedError(
        "task 09.2 is not written yet: Expire the sessions nobody has used for a while"
    )


def expire_leftover(folder: Path, session_id: str, cutoff: float) -> bool:
    """Delete what is left of session `session_id` without its log, if it still is a
    leftover as old as `cutoff` once its lock is held: True if it did."""
    # TODO(09.2): Expire the sessions nobody has used for a while.
    # Your design: the whole function is yours to shape; the tests check only what it
    # does.
    # What it asks: `sessionlab task 09.2`. Hints: `sessionlab hint --task 09.2`.
    raise NotImplementedError(
        "task 09.2 is not written yet: Expire the sessions nobody has used for a while"
    )


def left_without_log(folder: Path, cutoff: float) -> list[str]:
    """The ids of the sessions left without their log that expire() deletes."""
    # TODO(09.2): Expire the sessions nobody has used for a while.
    # Your design: the whole function is yours to shape; the tests check only what it
    # does.
    # What it asks: `sessionlab task 09.2`. Hints: `sessionlab hint --task 09.2`.
    raise NotImplementedError(
        "task 09.2 is not written yet: Expire the sessions nobody has used for a while"
    )


def collect_blobs(folder: str | Path, *,
                  grace: float = BLOB_GRACE_SECONDS) -> list[str]:
    """Remove every blob of `folder` that no file refers to and no writer touched in the
    last `grace` seconds, and what crashed writes left in blobs/; return the names of
    the blobs removed.

    A writer stores a blob before the line that points to it (lesson 06), so a blob no
    log mentions may be one a writer in another process is about to point to: only a
    blob left untouched for `grace` seconds is taken, and never one a writer has
    pinned. A file of the folder that cannot be read raises OSError naming it, and no
    blob is removed: what it refers to is unknown. A blobs folder that is a symbolic
    link is never followed.
    """
    folder = Path(folder)
    blobs = folder / "blobs"
    removed: list[str] = []
    if blobs.is_symlink() or not blobs.is_dir():
        return removed
    # TODO(09.5): Collect the blobs no log refers to, never one a writer has just
    # stored.
    # What it asks: `sessionlab task 09.5`. Hints: `sessionlab hint --task 09.5`.
    raise NotImplementedError(
        "task 09.5 is not written yet: Collect the blobs no log refers to, never one a "
        "writer has just stored"
    )
