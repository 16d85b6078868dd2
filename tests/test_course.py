"""The maintainers' check, run by the root `pytest` (and so by CI).

Every check of `sessionlab dev check` becomes one test here. The pytest runs behind them
happen once, two at a time, in a child process that tests/conftest.py starts as collection
ends (sessionlab.check_in_background), so that they run beside the kit's other tests; the
tests here run last, and each reports its own finding. The starters are run only to prove
they fail for the right reason, never as if they should pass, and they are the ones
generated from solutions/ (in a temporary copy of the course), never a student's edited
lessons/NN/agent.py: that work is named in a warning.

The bare `pytest` (the README's quick command) runs the static checks and every solution
on its lesson; every starter, the earlier lessons' key tests on every solution and the
strict build of the docs are the campaign's (`pytest -m campaign`, which CI runs too).
The corpus of wrong implementations (solutions/NN_topic/wrong.toml) is left out of both:
`sessionlab dev check` runs it, and CI runs all of it, every wrong implementation up to
its first failing test and the generated mutation pass, as a step of its own
(`sessionlab dev check --mutate`).
"""

import warnings
from contextlib import nullcontext
from pathlib import Path

import pytest

from sessionlab import maintainers
from sessionlab.check_in_background import HEAVY, QUICK

ROOT = Path(__file__).resolve().parent.parent
CHECKS = maintainers.all_checks(ROOT, **QUICK)
HEAVY_CHECKS = maintainers.all_checks(ROOT, **HEAVY)


def progress_shown(request):
    """A line as each check ends, past pytest's output capture: the checks run every
    lesson's tests (a minute or two) and the run says what is happening.
    (pytest captures a fixture's output at the file descriptor: let the lines through)"""
    plugins = request.config.pluginmanager
    terminal = plugins.get_plugin("terminalreporter")
    capture = plugins.get_plugin("capturemanager")

    def progress(finding, done, total):
        if terminal is None:
            return
        with capture.global_and_fixture_disabled() if capture else nullcontext():
            if done == 1:
                terminal.write_line("")
                terminal.write_line("the maintainers' check of every lesson "
                                    f"({total} checks, two at a time):")
            terminal.write_line("  " + maintainers.progress_line(finding, done, total))

    return progress


@pytest.fixture(scope="session")
def findings(request, quick_check):
    found = quick_check.findings(progress_shown(request))
    return {name: finding for (name, _), finding in zip(CHECKS, found)}


@pytest.fixture(scope="session")
def heavy_findings(request, heavier_check):
    found = heavier_check.findings(progress_shown(request))
    return {name: finding for (name, _), finding in zip(HEAVY_CHECKS, found)}


def passes(finding) -> None:
    for line in finding.warnings:   # such as: lessons/ holds a student's work, left out
        warnings.warn(f"{finding.check}: {line}", UserWarning, stacklevel=1)
    assert finding.ok, f"{finding.check}:\n" + "\n".join(finding.problems)


@pytest.mark.parametrize("name", [name for name, _ in CHECKS])
def test_the_course_passes_the_maintainers_check(findings, name):
    passes(findings[name])


@pytest.mark.campaign
@pytest.mark.parametrize("name", [name for name, _ in HEAVY_CHECKS])
def test_the_course_passes_the_maintainers_heavier_checks(heavy_findings, name):
    passes(heavy_findings[name])
