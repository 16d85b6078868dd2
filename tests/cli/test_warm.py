"""The watch loop's warm server (sessionlab.warm): every run is a fresh child that sees the
student's latest save, nothing one run does reaches the next, and whenever the server cannot
be trusted the run is a cold one with the same result."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from sessionlab import course as sessionlab_course, starters, warm
from sessionlab.cli.runner import Children, child_env, run_pytest

from .conftest import SOLUTION

# The campaign (tests/conftest.py): the warm server's processes, killed and replaced.
pytestmark = [pytest.mark.campaign,
              pytest.mark.skipif(not warm.SUPPORTED, reason="no fork on this platform")]


@pytest.fixture
def course00(course_copy) -> Path:
    return course_copy({"00_memory": SOLUTION})


@pytest.fixture
def server(course00):
    with warm.WarmPytest(course00, child_env(course00)) as handle:
        handle.start()
        yield handle


def lesson00(root: Path):
    return sessionlab_course.lesson("00", root)


def run(root: Path, server, **options):
    lesson = lesson00(root)
    return run_pytest(root, [lesson], warm=server, **options)[lesson.name]


def add_test(root: Path, name: str, source: str) -> None:
    (root / "lessons" / "00_memory" / name).write_text(source, encoding="utf-8")


def test_a_warm_run_reports_what_a_cold_run_reports(course00, server):
    """Same outcomes and messages, test by test, from the starter's failures."""
    module = course00 / "lessons" / "00_memory" / "agent.py"
    module.write_text(starters.expected_starter(lesson00(course00)), encoding="utf-8")

    warm_result = run(course00, server)
    cold_result = run(course00, None)

    assert server.runs == 1, "the first run should have gone through the warm server"
    assert warm_result.error is None and cold_result.error is None, (warm_result.error,
                                                                     cold_result.error)
    assert [(t.nodeid, t.outcome, t.message) for t in warm_result.tests] == \
        [(t.nodeid, t.outcome, t.message) for t in cold_result.tests]


def test_each_run_sees_the_latest_save_even_within_the_same_second(course00, server):
    """Two saves of the same size in the same second: a cached .pyc keyed on the whole
    second and the size would run the first one again."""
    module = course00 / "lessons" / "00_memory" / "agent.py"
    add_test(course00, "test_probe.py",
             "def test_the_answer(lesson):\n"
             "    assert lesson.ANSWER == 42, f'ANSWER is {lesson.ANSWER}'\n")
    original = module.read_text(encoding="utf-8")
    stamp = os.stat(module).st_mtime_ns

    module.write_text(original + "\nANSWER = 41\n", encoding="utf-8")
    os.utime(module, ns=(stamp, stamp))
    first = run(course00, server)
    module.write_text(original + "\nANSWER = 42\n", encoding="utf-8")
    os.utime(module, ns=(stamp, stamp))
    second = run(course00, server)

    probe = "lessons/00_memory/test_probe.py::test_the_answer"
    outcome = {t.nodeid.split("course/", 1)[-1]: t.outcome for t in second.tests}
    assert not next(t for t in first.tests if t.nodeid.endswith(probe)).passed
    assert outcome.get(probe) == "passed", (
        f"the second save (ANSWER = 42) should be the one tested; got {outcome.get(probe)}")
    assert server.runs == 2


def test_nothing_one_run_changes_reaches_the_next(course00, server):
    """A module the server preloaded, changed by a run, is as new in the next run."""
    add_test(course00, "test_leak.py",
             "import sessionlab.scripted as scripted\n\n"
             "def test_a_fresh_process():\n"
             "    assert not hasattr(scripted, 'touched'), 'state of an earlier run leaked'\n"
             "    scripted.touched = True\n")

    for _ in range(2):
        result = run(course00, server)
        leak = next(t for t in result.tests if t.name == "test_a_fresh_process")
        assert leak.passed, leak.message
    assert server.runs == 2


def test_a_change_to_the_kit_makes_the_next_run_cold_and_the_server_new(course00, server):
    """conftest.py stands for the kit here: the server may have loaded it, so a change
    makes the server untrustworthy."""
    assert run(course00, server).passed and server.runs == 1
    first = server.process.pid

    conftest = course00 / "conftest.py"
    conftest.write_text(conftest.read_text() + "\n# changed\n", encoding="utf-8")
    result = run(course00, server)

    assert result.passed, result.error
    assert server.runs == 1, "the run after the change should have been a cold one"
    assert server.process is not None and server.process.pid != first, \
        "a new server should be started for the runs after it"
    assert run(course00, server).passed and server.runs == 2


def test_a_server_that_died_is_replaced_and_the_run_is_not_lost(course00, server):
    """The server killed between two runs: the next run is cold, the one after warm."""
    assert run(course00, server).passed and server.runs == 1
    os.kill(server.process.pid, signal.SIGKILL)
    server.process.wait()

    result = run(course00, server)

    assert result.passed, result.error
    assert server.runs == 1, "the run after the server died should have been a cold one"
    assert server.process is not None and server.process.poll() is None, \
        "a new server should be running"
    assert run(course00, server).passed and server.runs == 2


def test_a_run_that_exits_the_process_costs_only_its_child(course00, server):
    """os._exit in the student's code, then a hang: each ends its own child; the server
    goes on serving."""
    add_test(course00, "test_exit.py",
             "import os\n\ndef test_exits():\n    os._exit(3)\n")
    gone = run(course00, server)
    assert gone.error == "pytest stopped without a report (exit status 3)", gone.error

    (course00 / "lessons" / "00_memory" / "test_exit.py").unlink()
    add_test(course00, "test_hang.py",
             "import pytest, time\n\n@pytest.mark.timeout(0)\n"
             "def test_hangs():\n    time.sleep(600)\n")
    started = time.monotonic()
    hung = run(course00, server, timeout=3)
    assert hung.error and hung.error.startswith("timed out"), hung.error
    assert time.monotonic() - started < 30

    (course00 / "lessons" / "00_memory" / "test_hang.py").unlink()
    assert run(course00, server).passed
    assert server.runs == 3, "all three runs should have been warm"


def test_ctrl_c_kills_the_running_child(course00, server):
    """Children.stop (what Ctrl-C calls) kills a warm child as it kills a process."""
    add_test(course00, "test_hang.py",
             "import pytest, time\n\n@pytest.mark.timeout(0)\n"
             "def test_hangs():\n    time.sleep(600)\n")
    children = Children()
    results = {}
    thread = threading.Thread(target=lambda: results.update(
        run(course00, server, children=children, timeout=120).__dict__))
    thread.start()
    deadline = time.monotonic() + 60
    while not children.live and time.monotonic() < deadline:
        time.sleep(0.05)
    assert children.live, "the warm child should be tracked while it runs"
    children.stop()
    thread.join(timeout=30)
    assert not thread.is_alive(), "the run should end once its child is killed"


def test_no_server_starts_before_the_watch_asks_for_one(course00):
    """The watch's first results run cold, beside each other: a server starting among
    them would slow them down on two cores."""
    with warm.WarmPytest(course00, child_env(course00)) as handle:
        assert run(course00, handle).passed
        assert handle.process is None and handle.runs == 0
