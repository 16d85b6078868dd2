"""The kit's own tests, in two parts.

`pytest` at the root (the README's test command) runs the quick part: every unit of the
kit, the commands a student and an instructor type, and the maintainers' check of every
lesson. The heavier campaign is marked `campaign`: real processes killed in the middle of a
write, PostgreSQL servers stopped, the site built by two generators and looked at in a
browser, a hostile class graded in the sandbox, the benchmarks' own checks, the
maintainers' tools tried on broken copies of the course, and the few commands' tests that
take seconds each (a lesson that hangs until its timeout, say), so that the quick part
stays within three minutes on two cores. It runs with
`pytest -m campaign`, and CI runs it on every submission, after the quick part.

A test file or folder named on the command line runs whole, campaign or not: the split is
only for the bare `pytest`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sessionlab import maintainers
from sessionlab.check_in_background import HEAVY, QUICK, BackgroundCheck

CAMPAIGN = "campaign"
ROOT = Path(__file__).resolve().parent.parent
# The tests that report each part of the maintainers' check (tests/test_course.py), and
# what that part runs
QUICK_REPORT = "tests/test_course.py::test_the_course_passes_the_maintainers_check["
HEAVY_REPORT = "tests/test_course.py::test_the_course_passes_the_maintainers_heavier_checks["
REPORTS = {QUICK_REPORT: QUICK, HEAVY_REPORT: HEAVY}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{CAMPAIGN}: one of the heavier tests, left out of the bare `pytest` "
                   f"(run them with `pytest -m {CAMPAIGN}`; CI runs both)")


def bare_run(config: pytest.Config) -> bool:
    """`pytest` with no test named and no -m: the README's quick test command."""
    return config.args_source == pytest.Config.ArgsSource.TESTPATHS \
        and not config.option.markexpr


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The maintainers' check runs beside the other tests (pytest_collection_finish): the
    # tests that report it go last, so that the others need not wait for it.
    items.sort(key=lambda item: item.nodeid.startswith(tuple(REPORTS)))
    if not bare_run(config):
        return
    heavy = [item for item in items if item.get_closest_marker(CAMPAIGN)]
    if heavy:
        config.hook.pytest_deselected(items=heavy)
        items[:] = [item for item in items if not item.get_closest_marker(CAMPAIGN)]
        config.stash[LEFT_OUT] = len(heavy)


LEFT_OUT = pytest.StashKey[int]()
BACKGROUND = pytest.StashKey[dict[str, BackgroundCheck]]()


def started(config: pytest.Config, report: str) -> BackgroundCheck:
    """The part of the maintainers' check that the tests named `report...` report,
    started now in a child process if it is not running yet."""
    running = config.stash.setdefault(BACKGROUND, {})
    if report not in running:
        # In CI (a clean clone) any starter that differs from the generator fails; on a
        # student's machine their work in lessons/ is left out with a warning.
        running[report] = BackgroundCheck(ROOT, REPORTS[report], strict=maintainers.ci())
    return running[report]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start each part of the maintainers' check that a test reports now, in a child
    process: its pytest runs use the core that the kit's tests, one at a time, leave idle."""
    for report in REPORTS:
        if any(item.nodeid.startswith(report) for item in session.items):
            started(session.config, report)


def pytest_sessionfinish(session: pytest.Session) -> None:
    for background in session.config.stash.get(BACKGROUND, {}).values():
        background.stop()


@pytest.fixture(scope="session")
def quick_check(request: pytest.FixtureRequest) -> BackgroundCheck:
    """The maintainers' quick check (the README's command), started as collection ended."""
    return started(request.config, QUICK_REPORT)


@pytest.fixture(scope="session")
def heavier_check(request: pytest.FixtureRequest) -> BackgroundCheck:
    """The maintainers' heavier checks (the campaign's), started as collection ended."""
    return started(request.config, HEAVY_REPORT)


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    left_out = config.stash.get(LEFT_OUT, 0)
    if left_out:
        terminalreporter.write_line(
            f"{left_out} heavier tests (the campaign) were left out of this quick run: "
            f"`pytest -m {CAMPAIGN}` runs them, and CI runs both.")
