# Generated from course/privacy.py for lesson 10_sidechains:
# edit that source, then run `sessionlab dev generate`.
"""Sessions are personal data: delete, expire, collect.

Deleting a session removes its log, its meta file, its lock, its side-chains and the
blobs only it used; expiring deletes the sessions nobody has written for a retention
period; collecting removes blobs that no line refers to any more. Each takes the
session's lock, so nothing is deleted under a writer.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from pathlib import Path

from .messages import check_session_id, SESSION_ID
from .files import read_file
from .lock import SessionBusy
from .blobs import BLOB_NAME, discard_leftover, drop_blobs, mentioned_blobs
from .sidechain import SIDECHAINS
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
    try:
        names = set(os.listdir(folder))
    except FileNotFoundError:
        return []
    wanted = [f"{session_id}.jsonl", f"{session_id}.meta.json"]
    found = [name for name in wanted if name in names]
    found += sorted(name for name in names for of in wanted
                    if is_temporary_of(name, of))
    # A folder that took a session's name is nothing this store wrote: it stays. A name
    # gone since the listing (a copy an erase renamed over the log) is no file of it.
    files = []
    for name in found:
        try:
            if not stat.S_ISDIR(os.lstat(folder / name).st_mode):
                files.append(folder / name)
        except FileNotFoundError:
            pass
    return files


def is_temporary_of(name: str, of: str) -> bool:
    """Is `name` a temporary file made for the file named `of` (tempfile.mkstemp's
    `.<of>.<random>.tmp`, with no dot in the random part)? Exactly that: session "quest"
    never takes one of session "quest.jsonl" (`.quest.jsonl.jsonl.<random>.tmp`)."""
    prefix, suffix = f".{of}.", ".tmp"
    middle = name[len(prefix):len(name) - len(suffix)]
    return (name.startswith(prefix) and name.endswith(suffix)
            and len(name) > len(prefix) + len(suffix) and "." not in middle)


def anything_of(folder: Path, session_id: str) -> bool:
    """Whether the folder holds anything at all of session `session_id`."""
    # Its files, a lock file its writer left when it died, or side-chains a stopped
    # delete left
    leftovers = [f"{session_id}.lock"]
    leftovers.append(f"{session_id}{SIDECHAINS}")
    return bool(session_files(folder, session_id)) or any(
        os.path.lexists(folder / name) for name in leftovers)


def delete_session(folder: str | Path, session_id: str) -> bool:
    """Delete session `session_id`: its log, meta file, leftover temporary files and
    lock, and each blob it used that no other file refers to. True if it deleted
    anything; False when there was nothing (deleting twice is not an error).

    SessionBusy, deleting nothing, while another process writes the session.
    Forks are sessions of their own: they stay. A delete that stopped half-way (a
    crash, an I/O error) is finished by running it again.
    """
    folder = Path(folder)
    started = time.time()
    if not anything_of(folder, check_session_id(session_id)):
        return False    # nothing to delete: and no lock file created for nothing
    with SessionLog(folder, session_id) as log:
        log._lock()     # SessionBusy while another process writes it
        blobs = delete_locked(folder, session_id)
    try:
        drop_blobs(folder, blobs, touched_after=started)    # the lock is let go by now
    except OSError:
        pass    # a file that cannot be read may refer to them: kept for collect_blobs()
    return True


def delete_locked(folder: Path, session_id: str) -> list[str]:
    """Remove the files of session `session_id`, whose lock the caller holds, and
    return the names of the blobs they mention (for drop_blobs(): this removes none).
    """
    files = session_files(folder, session_id)
    # Lesson 10: the helpers' transcripts first, each under its own lock. One that
    # cannot go (busy) stops the delete here, with the session still whole: run
    # again, it starts over. The parent gone first would hide them for good.
    delete_sidechains(folder, session_id)
    # The blob names of every file that goes: the log's, and those of a copy an
    # erase that crashed left (a line it scrubbed points to a blob stored anew)
    blobs: list[str] = []
    for path in files:
        try:
            blobs += mentioned_blobs(read_file(path))
        except OSError:
            pass    # one that cannot be read: collect_blobs() decides its blobs
    # The temporary copies first: no part of the session, but they hold its words,
    # and once the log and the meta file are gone no expiry would ever find them.
    files.sort(key=lambda path: not path.name.endswith(".tmp"))
    # Then the log: from then on there is no session, and a crash leaves at worst a
    # meta file without a log, which is no session (lesson 03), deleted next time.
    for path in files:
        path.unlink(missing_ok=True)
    return blobs


def expire(folder: str | Path, *, older_than: float = RETENTION_SECONDS,
           now: float | None = None) -> tuple[list[str], list[str]]:
    """Delete every session of `folder` nobody has appended to for `older_than`
    seconds. Returns (the ids deleted, the ids skipped because a writer holds them).

    "Older than" goes by the log's last append (an erase is none). Not by the meta
    file's "created": a session forked long ago and used yesterday is in use. A session
    being written is never deleted: it is skipped, and expired next time if it is still
    idle. What a stopped delete left of a session
    (a meta file, side-chains, without a log) goes too, by the same rule.
    """
    folder = Path(folder)
    cutoff = (time.time() if now is None else now) - older_than
    deleted: list[str] = []
    busy: list[str] = []
    for path in sorted(folder.glob("*.jsonl")):
        session_id = path.name[:-len(".jsonl")]
        try:
            status = os.lstat(path)
        except FileNotFoundError:
            continue    # deleted by another process since the folder was listed
        if not SESSION_ID.fullmatch(session_id) or not stat.S_ISREG(status.st_mode):
            continue    # not a file this store wrote (a link, a folder): leave it alone
        if status.st_mtime >= cutoff:
            continue
        try:
            if expire_session(folder, session_id, cutoff):
                deleted.append(session_id)
        except SessionBusy:
            busy.append(session_id)
    left, held = expire_leftovers(folder, cutoff)
    return deleted + left, busy + held


def expire_session(folder: Path, session_id: str, cutoff: float) -> bool:
    """Delete session `session_id` for expire(), if nobody has appended to it since
    `cutoff`: True if it did. SessionBusy while a writer holds it."""
    started = time.time()
    with SessionLog(folder, session_id) as log:
        log._lock()     # no writer from here on: what the log says now is final
        try:
            if os.lstat(log.path).st_mtime >= cutoff:
                return False    # appended to since expire() looked: in use again
        except FileNotFoundError:
            return False        # deleted meanwhile: what is left is a leftover's
        blobs = delete_locked(folder, session_id)
    try:
        drop_blobs(folder, blobs, touched_after=started)
    except OSError:
        pass    # a file that cannot be read may refer to them: kept for collect_blobs()
    return True


def expire_leftovers(folder: Path, cutoff: float) -> tuple[list[str], list[str]]:
    """What expire() does with what is left of sessions without their log, as old as
    `cutoff`. Returns (the ids deleted, the ids skipped because a writer holds them)."""
    deleted: list[str] = []
    busy: list[str] = []
    for session_id in left_without_log(folder, cutoff):
        try:
            if expire_leftover(folder, session_id, cutoff):
                deleted.append(session_id)
        except SessionBusy:
            busy.append(session_id)
    return deleted, busy


def expire_leftover(folder: Path, session_id: str, cutoff: float) -> bool:
    """Delete what is left of session `session_id` without its log, if it still is a
    leftover as old as `cutoff` once its lock is held: True if it did."""
    started = time.time()
    with SessionLog(folder, session_id) as log:
        log._lock()
        # Looked at again under the lock: a writer may have started the id anew since
        # the folder was listed (its log is then a session in use), or another process
        # may have removed the leftover
        if session_id not in left_without_log(folder, cutoff):
            return False
        blobs = delete_locked(folder, session_id)     # those of a crashed erase's copy
    try:
        drop_blobs(folder, blobs, touched_after=started)  # a leftover's, lock let go
    except OSError:
        pass    # a file that cannot be read may refer to them: kept for collect_blobs()
    return True


def left_without_log(folder: Path, cutoff: float) -> list[str]:
    """The ids of the sessions left without their log that expire() deletes."""
    # What a fork or a delete that stopped half-way left: a meta file, side-chains. All
    # of it older than the cutoff: a young one may be a fork being made right now.
    kinds = [".meta.json"]
    kinds.append(SIDECHAINS)
    found: dict[str, bool] = {}
    try:
        listed = os.listdir(folder)
    except FileNotFoundError:
        return []       # no sessions folder yet: nothing was left in it
    for name in sorted(listed):
        kind = next((kind for kind in kinds if name.endswith(kind)), None)
        session_id = name[:-len(kind)] if kind else ""
        if not SESSION_ID.fullmatch(session_id) or os.path.lexists(
                folder / f"{session_id}.jsonl"):
            continue
        try:
            status = os.lstat(folder / name)
        except FileNotFoundError:
            continue    # removed by another process since the folder was listed
        if stat.S_ISLNK(status.st_mode) or (
                kind == ".meta.json" and not stat.S_ISREG(status.st_mode)):
            continue    # planted (a link, a folder at a file's name): not ours
        found[session_id] = found.get(session_id, True) and status.st_mtime < cutoff
    return [session_id for session_id, old in found.items() if old]


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
    # Lesson 10: each session's side-chains keep blobs of their own, beside their logs
    try:
        listed = os.listdir(folder)
    except FileNotFoundError:
        return []       # no sessions folder yet: no blob in it
    for name in sorted(listed):
        chains = folder / name
        if name.endswith(SIDECHAINS) and not chains.is_symlink() and chains.is_dir():
            removed += collect_blobs(chains, grace=grace)
    if blobs.is_symlink() or not blobs.is_dir():
        return removed
    # A blob touched after this moment is young: kept, referred to or not.
    touched_after = time.time() - grace
    for path in sorted(blobs.iterdir()):
        if path.name.startswith("."):
            # Half a blob, or one set aside, by a write that crashed: first, so that a
            # blob set aside is a blob again, and judged below like any other
            discard_leftover(path, touched_after=touched_after)
    names = [path.name for path in sorted(blobs.iterdir())
             if BLOB_NAME.fullmatch(path.name)]
    removed += drop_blobs(folder, names, touched_after=touched_after)
    return removed


def delete_sidechains(folder: Path, session_id: str) -> None:
    """Delete every side-chain of session `session_id`, each as delete_session() deletes
    a session (under its own lock, blobs included), then their folder once it is empty.

    Called by delete_session() under the parent's lock, so no helper of this session is
    writing: a helper runs inside its parent's writer. One that is still held (a helper
    process that outlived its parent) raises SessionBusy, and the parent stays. A
    side-chain folder planted as a symbolic link is not followed.
    """
    chains = folder / f"{session_id}{SIDECHAINS}"
    if chains.is_symlink() or not chains.is_dir():
        return
    names: set[str] = set()
    for name in os.listdir(chains):     # logs, meta files, a dead helper's lock file
        for kind in (".jsonl", ".meta.json", ".lock"):
            if name.endswith(kind) and SESSION_ID.fullmatch(name[:-len(kind)]):
                names.add(name[:-len(kind)])
    for name in sorted(names):
        delete_session(chains, name)
    collect_blobs(chains, grace=0)      # no log is left there to refer to any blob
    for empty in (chains / "blobs", chains):
        try:
            empty.rmdir()
        except FileNotFoundError:
            pass
        except OSError as error:
            if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            # something this store did not write is left there, as it was
