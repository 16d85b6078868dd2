# Lesson 11_postgres, yours to edit: generated from
# solutions/11_postgres/forks.py; `sessionlab reset 11` makes it again.
"""Forking a session: "what if?" as a log of its own.

A fork copies a session's history, all of it or its first messages, into a new session,
and records its lineage in `<id>.meta.json`. From then on the two logs never touch. A
fork copies history, not the world: gold spent in town stays spent.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .messages import check_session_id, encode_line, FORMAT_VERSION, MARKER
from .files import now, Prefix, publish_new, SessionExists, SessionNotFound, write_whole
from .reading import KnownLog, parse_log, reaches_back, read_open_log, recall
from .log import SessionLog


def fork(folder: str | Path, source_id: str, new_id: str, *, upto: int | None = None,
         durable: bool = False) -> Path:
    """Start session `new_id` with the history of `source_id` (its first `upto`).

    `upto` counts the messages the source shows: undone ones are not counted, and the
    fork shows exactly the first `upto` of them (None: all). Returns the new log's path.
    Refuses, changing nothing, when the source does not exist, when `new_id` is taken,
    or when `upto` is more than the source shows.

    With durable=True the fork and its meta file are on disk (fsync, then the folder)
    before it returns, as an append is in durable mode; without, a power cut soon after
    the fork can leave it empty or missing (the source is never at risk).
    """
    # Both ids become file names: checked before any file is read or written
    folder = Path(folder)
    source = folder / f"{check_session_id(source_id)}.jsonl"
    target = folder / f"{check_session_id(new_id)}.jsonl"
    # Refused before anything is written: publishing writes the lineage first, and
    # would replace, then take away, the meta file of the session already there.
    # A session is its log, so a meta file alone does not take the id: it is what a
    # fork killed half-way leaves, and a new fork onto that id replaces it.
    if target.exists():
        raise SessionExists(
            f"cannot fork onto {new_id!r}: session {target} already exists"
        )
    # A number of messages is a whole number. Python counts True as 1, but whoever
    # wrote upto=True meant something else (all? keep?): refused, not guessed.
    if upto is not None and (isinstance(upto, bool) or not isinstance(upto, int)):
        raise TypeError(f"cannot fork the first {upto!r} messages of {source_id!r}: "
                        "a number of messages is a whole number")
    try:
        # Never through a link, never waiting on a FIFO (read_all refuses both)
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise SessionNotFound(
            f"cannot fork from {source_id!r}: no session log at {source}"
        ) from None
    try:
        return fork_open_log(fd, folder, source_id, new_id, upto, durable)
    finally:
        os.close(fd)


def fork_open_log(fd: int, folder: Path, source_id: str, new_id: str,
                  upto: int | None, durable: bool) -> Path:
    """fork() from the source's log, open as `fd`."""
    source = folder / f"{source_id}.jsonl"
    target = folder / f"{new_id}.jsonl"
    # A session this process has read or written, unchanged since, need not be read
    # again: what it knows says where each line ends (see KnownLog). Else read it now.
    log = recall(fd)
    if log is None:
        data, state = read_open_log(fd, source)
        log = KnownLog(len(data), None, state.ends, state.shown(),
                       state.newline_missing, reaches_back=reaches_back(state))
    # Since lesson 07 some messages are undone: count the ones shown.
    shown = log.shown
    count = len(shown) if upto is None else upto
    if not 0 <= count <= len(shown):
        raise ValueError(f"cannot fork the first {upto} messages of {source_id!r}: "
                         f"it shows {len(shown)}")
    copy = fork_copy(fd, log, upto, source)
    # Publish under the new id's lock, as its writer would: an agent starting a session
    # of that name right now cannot see "no log yet" before our publish, then open ours.
    with SessionLog(folder, new_id) as claim:
        claim._lock()       # SessionBusy if another writer is creating it
        if target.exists():
            raise SessionExists(f"cannot fork onto {new_id!r}: {target} already exists")
        publish_fork(folder, source_id, new_id, count, copy, durable)
    return target


def fork_copy(fd: int, log: KnownLog, upto: int | None, source: Path
              ) -> bytes | Prefix:
    """What the log of a fork starts with, its source `source` open as `fd`: bytes, or
    a Prefix of the source's file, which publish_fork() writes as the fork's whole log.

    A fork of the first `upto` messages the source shows shows exactly them; a whole
    fork (`upto` None) shows exactly what the source shows. `log` is what is known of
    the source (see KnownLog), and `upto` is already checked against it."""
    ends = log.ends
    if upto is None:
        keep = len(ends)    # every line: markers may follow the last message
    else:
        # Up to the line holding the last message kept, which can be far below its
        # place among the messages shown when undone messages or markers come before
        # it. What the source wrote after that line is no part of the fork.
        keep = log.shown[upto - 1][1] + 1 if upto else 0
    # Whole lines only (a torn tail is no line), as they are in the source: its undo
    # markers come along. A last line whose newline never got written gets one, so
    # that the fork's first append starts on a line of its own.
    copy = Prefix(fd, ends[keep - 1] if keep else 0)
    if keep and keep == len(ends) and log.newline_missing:
        copy.then = b"\n"
    if upto and log.reaches_back and log.shown[upto - 1][0] >= upto:
        # Messages undone before the cut, in a log whose undo markers do not all take
        # back the newest messages: one may stand after the cut. What the copied
        # lines still show beyond the first `upto`, the fork takes back itself.
        data, _ = read_open_log(fd, source)
        kept = {index for index, _ in log.shown[:upto]}
        left = [index for index, _ in parse_log(data[:copy.length], source).shown()
                if index not in kept]
        if left:
            copy.then += encode_line({MARKER: "undo", "skip": left, "at": now()})
    return copy


def publish_fork(folder: Path, source_id: str, new_id: str, count: int,
                 copy: bytes | Prefix, durable: bool) -> None:
    """Record the lineage of fork `new_id` (`count` messages of `source_id`) in its
    meta file, then publish its log holding `copy`: all or nothing."""
    target = folder / f"{new_id}.jsonl"
    meta = folder / f"{new_id}.meta.json"
    # The lineage first, the log last: the fork exists from the moment its log has a
    # name, so a crash before that leaves no session, only a meta file (which the next
    # fork onto that id replaces). An error leaves not even that: publish_new raises
    # only with no log left (a failure after its link takes the log back), and the
    # meta file goes too, even when only its own folder's sync failed.
    try:
        write_whole(meta, json.dumps({
            "format": FORMAT_VERSION,
            "id": new_id,
            "parent": source_id,
            "forked_at": count,
            "created": now(),
        }, ensure_ascii=False, indent=1).encode("utf-8"), durable=durable)
        publish_new(target, copy, durable=durable)
    except BaseException:
        meta.unlink(missing_ok=True)    # no fork after all: no lineage either
        raise
