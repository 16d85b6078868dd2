# Lesson 04_repair, yours to edit: generated from
# solutions/04_repair/forks.py; `sessionlab reset 04` makes it again.
"""Forking a session: "what if?" as a log of its own.

A fork copies a session's history, all of it or its first messages, into a new session,
and records its lineage in `<id>.meta.json`. From then on the two logs never touch. A
fork copies history, not the world: gold spent in town stays spent.
"""

from __future__ import annotations

import json
from pathlib import Path

from .messages import check_session_id, FORMAT_VERSION
from .files import now, publish_new, SessionExists, SessionNotFound, write_whole
from .reading import read_whole_log
from .log import entries_for


def fork(folder: str | Path, source_id: str, new_id: str, *, upto: int | None = None,
         durable: bool = False) -> Path:
    """Start session `new_id` with the history of `source_id` (its first `upto`).

    Returns the new log's path. Refuses, changing nothing, when the source does not
    exist, when `new_id` is taken, or when `upto` is more than the source holds.

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
        data, state = read_whole_log(source)
    except FileNotFoundError:
        raise SessionNotFound(
            f"cannot fork from {source_id!r}: no session log at {source}"
        ) from None
    # Since lesson 04 a log holds markers as well as messages, and may end in a torn
    # line: copy whole lines only, and count messages, not lines.
    # One per entry
    lines = [line + b"\n" for line in data[:state.end].split(b"\n") if line]
    count = len(state.messages) if upto is None else upto
    if not 0 <= count <= len(state.messages):
        raise ValueError(f"cannot fork the first {upto} messages of {source_id!r}: "
                         f"it holds {len(state.messages)}")
    keep = len(lines) if upto is None else entries_for(state.entries, count)
    # Copy the bytes of the lines themselves: a new, independent file (never a link).
    copy = b"".join(lines[:keep])
    publish_fork(folder, source_id, new_id, count, copy, durable)
    return target




def publish_fork(folder: Path, source_id: str, new_id: str, count: int, copy: bytes,
                 durable: bool) -> None:
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
