"""The maintainers' check run beside the quick tests (sessionlab.check_in_background): it
reports what the check in the same process would, and stops with the run."""

import os
import signal
import time
from pathlib import Path

import pytest

from sessionlab import maintainers
from sessionlab.check_in_background import BackgroundCheck

ROOT = Path(__file__).resolve().parent.parent
STATIC_ONLY = dict(corpus=False, key=False, docs=False, lessons=False, starters=False)

pytestmark = pytest.mark.campaign


def test_the_child_reports_every_check_in_order_and_each_as_it_ends():
    """The findings come back in the order of all_checks, with their problems, and
    progress is called once for each, numbered to the total."""
    seen = []
    findings = BackgroundCheck(ROOT, STATIC_ONLY, strict=False).findings(
        lambda finding, done, total: seen.append((finding.check, done, total)))
    in_process = maintainers.run_all(ROOT, strict=False, **STATIC_ONLY)
    assert [finding.check for finding in findings] == [f.check for f in in_process]
    assert len(findings) == len(maintainers.all_checks(ROOT, **STATIC_ONLY))
    assert sorted(check for check, _, _ in seen) == sorted(f.check for f in findings)
    assert [done for _, done, _ in seen] == list(range(1, len(findings) + 1))
    assert {total for _, _, total in seen} == {len(findings)}
    assert all(finding.ok for finding in findings), [f.problems for f in findings]


def test_a_check_that_cannot_run_says_why(tmp_path):
    """A child that dies (here: a folder that holds no course) is an error with its
    words, not an empty list of findings that would pass."""
    with pytest.raises(RuntimeError, match="(?s)maintainers' check stopped.*Error"):
        BackgroundCheck(tmp_path, STATIC_ONLY, strict=False).findings()


def test_stopping_ends_the_check_and_every_pytest_run_it_started():
    """A quick run stopped early (-x, Ctrl-C) ends its check, pytest runs and all."""
    check = BackgroundCheck(ROOT, dict(corpus=False, key=False, docs=False), strict=False)
    time.sleep(3)               # its static checks done, its first pytest runs started
    group = check._child.pid
    check.stop()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.killpg(group, signal.SIGKILL)
    pytest.fail("a process of the stopped check was still running 10 s later")
