"""Small helpers that lesson tests share (the kit's side, not the student's)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from types import ModuleType
from typing import Any


def keep_lines_large(lesson: ModuleType, size: int) -> dict[str, int]:
    """SessionLog options that keep content of `size` bytes inside the log's line.

    From lesson 06 on, large content moves to blobs/. Tests about large *lines* (one write
    per line, no interleaving between writers) pass this so that they still write them
    when run against a later lesson's solution.
    """
    parameters = inspect.signature(lesson.SessionLog).parameters
    return {"blob_threshold": 2 * size} if "blob_threshold" in parameters else {}


def with_file_size_limit(limit: int, action: Callable[[], Any]) -> tuple[str, str, Any]:
    """Run `action` in a child process whose files may not grow past `limit` bytes.

    The operating system then refuses or cuts short any write beyond the limit
    (RLIMIT_FSIZE, with SIGXFSZ ignored so the write fails with EFBIG instead of killing
    the child): a real full disk, without filling one. Returns ("ok", "", what `action`
    returned, as JSON, with str() of what JSON cannot hold), or (exception type name,
    message, None) if it raised.
    The child's files stay behind for the test to inspect.
    """
    import json
    import os
    import resource
    import signal

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:    # the child: never return into pytest
        outcome: tuple[str, str, Any] = ("ok", "", None)
        try:
            os.close(read_end)
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
            outcome = ("ok", "", action())
        except BaseException as error:  # reported to the parent, whatever it is
            outcome = (type(error).__name__, str(error)[:500], None)
        finally:
            try:
                os.write(write_end, json.dumps(outcome, default=str).encode("utf-8"))
            finally:
                os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    if not data:
        return ("ChildDied", "the child process ended without reporting", None)
    kind, message, value = json.loads(data)
    return kind, message, value


def open_descriptors() -> int:
    """How many file descriptors this process holds open right now."""
    import os

    folder = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"
    return len(os.listdir(folder))
