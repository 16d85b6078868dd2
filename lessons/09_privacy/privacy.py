# Lesson 09_privacy, yours to edit: generated from
# solutions/09_privacy/privacy.py; `sessionlab reset 09` makes it again.
"""Sessions are personal data: delete, expire, collect.

Deleting a session removes its log, its meta file, its lock, its side-chains and the
blobs only it used; expiring deletes the sessions nobody has written for a retention
period; collecting removes blobs that no line refers to any more. Each takes the
session's lock, so nothing is deleted under a writer.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .messages import check_session_id, SESSION_ID
from .files import now, read_file
from .lock import SessionBusy
from .blobs import BLOB_NAME, blob_references, blobs_of, discard_blob, drop_blobs
from .log import SessionLog


# expire(): a session whose log nobody has appended to for this long is deleted. Claude
# Code's default is 30 days (its cleanupPeriodDays setting).
RETENTION_SECONDS = 30 * 24 * 3600


# collect_blobs(): a blob touched this recently is kept even if no log refers to it
# yet. A writer stores (or touches) a blob before it writes the line pointing to it,
# and this is how long it may take between the two.
BLOB_GRACE_SECONDS = 3600.0


def session_files(folder: Path, session_id: str) -> list[Path]:
    """A session's files but its lock: its log, its meta file, and the temporary files
    a fork, a meta write or an erase that crashed left behind (they hold its words too).
    """
    names = [f"{session_id}.jsonl", f"{session_id}.meta.json"]
    found = [folder / name for name in names if os.path.lexists(folder / name)]
    for name in names:
        found += sorted(folder.glob(f".{name}.*.tmp"))
    return found


def delete_session(folder: str | Path, session_id: str, *,
                   idle_before: float | None = None) -> bool:
    """Delete session `session_id`: its log, meta file, leftover temporary files and
    lock, then each blob it used that no other file refers to. True if it deleted
    anything; False when there was nothing (deleting twice is not an error).

    Done as the session's writer, under its lock: SessionBusy, deleting nothing, while
    another writer holds it. With `idle_before` (a time.time()), the session is deleted
    only if its log was last changed before then, judged under the lock.
    Forks are sessions of their own: they stay.
    """
    folder = Path(folder)
    started = time.time()
    if not session_files(folder, check_session_id(session_id)):
        return False    # nothing to delete: and no lock file created for nothing
    with SessionLog(folder, session_id) as log:
        # TODO(09.1): Delete a session under its lock.
        # Hints: `sessionlab hint 09`; the docs page of lesson 09_privacy.
        raise NotImplementedError(
            "task 09.1 is not written yet: Delete a session under its lock"
        )
    drop_blobs(folder, blobs, touched_after=started)     # the lock is let go by now
    return True


def expire(folder: str | Path, *, older_than: float = RETENTION_SECONDS,
           now: float | None = None) -> tuple[list[str], list[str]]:
    """Delete every session of `folder` whose log nobody has changed for `older_than`
    seconds. Returns (the ids deleted, the ids skipped because a writer holds them).

    "Older than" goes by the log's last change, its modification time: every append
    moves it, an erase keeps it. Not by the meta file's "created": a session forked long
    ago and used yesterday is in use. A session being written is never deleted: it is
    skipped, and expired next time if it is still idle.
    """
    folder = Path(folder)
    cutoff = (time.time() if now is None else now) - older_than
    deleted: list[str] = []
    busy: list[str] = []
    # TODO(09.2): Expire the sessions nobody has used for a while.
    # Hints: `sessionlab hint 09`; the docs page of lesson 09_privacy.
    raise NotImplementedError(
        "task 09.2 is not written yet: Expire the sessions nobody has used for a while"
    )
    return deleted, busy


def collect_blobs(folder: str | Path, *,
                  grace: float = BLOB_GRACE_SECONDS) -> list[str]:
    """Remove every blob of `folder` that no file refers to and no writer touched in the
    last `grace` seconds, and what crashed writes left in blobs/; return the names of
    the blobs removed.

    A writer stores a blob before the line that points to it (lesson 06), so a blob no
    log mentions may be one a writer in another process is about to point to: only a
    blob left untouched for `grace` seconds is taken.
    """
    folder = Path(folder)
    blobs = folder / "blobs"
    if not blobs.is_dir():
        return []
    # TODO(09.5): Collect the blobs no log refers to, never one a writer has just
    # stored.
    # Hints: `sessionlab hint 09`; the docs page of lesson 09_privacy.
    raise NotImplementedError(
        "task 09.5 is not written yet: Collect the blobs no log refers to, never one a "
        "writer has just stored"
    )
    return removed
