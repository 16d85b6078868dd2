"""The store under fire: the reference solution of the last lesson, whichever that is.

Besides the `store` fixture, this holds the `child` fixture: a piece of work run in a forked
child, so that a umask, a file size limit or a lower user id never touches the test process.
"""

from __future__ import annotations

import json
import os
import traceback
from pathlib import Path
from typing import Any, Callable

import pytest

from sessionlab import course

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def store(request):
    """The final lesson's reference module (SessionLog, fork, Agent ...), or the module given
    with --impl PATH: `pytest tests/store --impl lessons/07_undo/agent.py` puts a student's
    store under the same fire."""
    impl = request.config.getoption("--impl")
    if impl:
        return course.load_module(Path(impl.split(os.pathsep)[0]).resolve(), "sessionlab_impl.store_under_test")
    return course.load_module(course.latest_solution(ROOT).module_path("solution"), "sessionlab_impl.final_store")


# --- work in a forked child ---------------------------------------------------------------


def in_child(work: Callable[[], Any]) -> Any:
    """Run `work()` in a forked copy of this process and return what it returned.

    The child starts with everything this process has imported (no second import of openai),
    and whatever it changes about itself (umask, rlimits, uid, a patched module) dies with it.
    `work` returns something JSON can carry. If it raises, the result is
    {"raised": class name, "message": str(error), "errno": ..., "traceback": ...}, so that the
    test can tell a named error from a raw traceback.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:    # the child: never return into pytest
        status = 0
        try:
            os.close(read_end)
            try:
                result = {"returned": work()}
            except BaseException as error:      # noqa: BLE001 - reported to the parent as data
                result = {"raised": type(error).__name__, "message": str(error),
                          "errno": getattr(error, "errno", None),
                          "traceback": traceback.format_exc()}
            data = json.dumps(result, default=repr).encode("utf-8")
            while data:
                data = data[os.write(write_end, data):]
        except BaseException:                  # noqa: BLE001
            status = 1
        finally:
            os._exit(status)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 1 << 16):
        chunks.append(chunk)
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    if not chunks:
        raise AssertionError(f"the child process ended without a result (wait status {status})")
    result = json.loads(b"".join(chunks))
    return result["returned"] if "returned" in result else result


@pytest.fixture
def child():
    return in_child

