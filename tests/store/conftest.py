"""The store under fire: the reference solution of the last lesson, whichever that is."""

from pathlib import Path

import pytest

from sessionlab import course

ROOT = Path(__file__).resolve().parents[2]


def final_solution() -> Path:
    solved = [l.module_path("solution") for l in course.lessons(ROOT) if l.module_path("solution").is_file()]
    return solved[-1]


@pytest.fixture(scope="session")
def store():
    """The final lesson's reference module (SessionLog, fork, Agent ...)."""
    return course.load_module(final_solution(), "sessionlab_impl.final_store")
