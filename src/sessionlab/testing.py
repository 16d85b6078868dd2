"""Small helpers that lesson tests share (the kit's side, not the student's)."""

from __future__ import annotations

import inspect
from types import ModuleType


def keep_lines_large(lesson: ModuleType, size: int) -> dict[str, int]:
    """SessionLog options that keep content of `size` bytes inside the log's line.

    From lesson 06 on, large content moves to blobs/. Tests about large *lines* (one write
    per line, no interleaving between writers) pass this so that they still write them
    when run against a later lesson's solution.
    """
    parameters = inspect.signature(lesson.SessionLog).parameters
    return {"blob_threshold": 2 * size} if "blob_threshold" in parameters else {}
