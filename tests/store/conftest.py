"""The store under fire: the reference solution of the last lesson, whichever that is.

Besides the `store` fixture, this holds the `child` fixture: a piece of work run in a forked
child, so that a umask, a file size limit or a lower user id never touches the test process.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sessionlab import course
from sessionlab.testing import in_child

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


@pytest.fixture
def child():
    """sessionlab.testing.in_child: run a piece of work in a forked child."""
    return in_child

