# Lesson 03_fork, yours to edit: generated from
# solutions/03_fork/forks.py; `sessionlab reset 03` makes it again.
"""Forking a session: "what if?" as a log of its own.

A fork copies a session's history, all of it or its first messages, into a new session,
and records its lineage in `<id>.meta.json`. From then on the two logs never touch. A
fork copies history, not the world: gold spent in town stays spent.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from .messages import check_session_id, FORMAT_VERSION
from .messages import InvalidMessage, parse_line
from .files import publish_new, SessionExists, SessionNotFound, write_whole


def fork(folder: str | Path, source_id: str, new_id: str, *, upto: int | None = None,
         durable: bool = False) -> Path:
    """Start session `new_id` with the history of `source_id` (its first `upto`).

    Returns the new log's path. Refuses, changing nothing, when the source does not
    exist, when `new_id` is taken, or when `upto` is more than the source holds.

    With durable=True the fork and its meta file are on disk (fsync, then the folder)
    before it returns, as an append is in durable mode; without, a power cut soon after
    the fork can leave it empty or missing (the source is never at risk).
    """
    # TODO(03.1): Copy the history into a new, independent log.
    # Your design: the whole function is yours to shape; the tests check only what it
    # does.
    # What it asks: `sessionlab task 03.1`. Hints: `sessionlab hint --task 03.1`.
    raise NotImplementedError(
        "task 03.1 is not written yet: Copy the history into a new, independent log"
    )




def publish_fork(folder: Path, source_id: str, new_id: str, count: int, copy: bytes,
                 durable: bool) -> None:
    """Create fork `new_id`, all or nothing: its log holding `copy`, and its meta file
    recording its lineage (`count` messages of `source_id`)."""
    # TODO(03.2): Publish the fork and its lineage: all or nothing.
    # Your design: the whole function is yours to shape; the tests check only what it
    # does.
    # What it asks: `sessionlab task 03.2`. Hints: `sessionlab hint --task 03.2`.
    raise NotImplementedError(
        "task 03.2 is not written yet: Publish the fork and its lineage: all or nothing"
    )
