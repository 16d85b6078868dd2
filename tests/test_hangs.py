"""A lesson test that blocks ends on its own in plain pytest, with a message saying what
it waited for (pytest-timeout, explained by sessionlab.hangs)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sessionlab import hangs

# The campaign (tests/conftest.py): tests that wait out a hang to show its words.
pytestmark = pytest.mark.campaign

ROOT = Path(__file__).resolve().parent.parent


def run_lesson(impl: Path | str, *args: str) -> subprocess.CompletedProcess:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SESSIONLAB_", "PYTEST_"))
    }
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "lessons/05_lock",
            "-q",
            "-p",
            "no:cacheprovider",
            "--impl",
            str(impl),
            *args,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def blocking_lock(folder: Path) -> Path:
    """Lesson 05's solution with a lock taken without LOCK_NB, in `folder`: its
    agent.py."""
    solution = (ROOT / "solutions/05_lock/lock.py").read_text(encoding="utf-8")
    blocking = "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)"
    assert solution.count(blocking) == 1
    for path in (ROOT / "solutions/05_lock").glob("*.py"):
        shutil.copyfile(path, folder / path.name)
    (folder / "lock.py").write_text(
        solution.replace(blocking, "fcntl.flock(fd, fcntl.LOCK_EX)"), encoding="utf-8"
    )
    return folder / "agent.py"


def test_a_flock_without_lock_nb_fails_with_what_it_waited_for(tmp_path):
    mutant = blocking_lock(tmp_path)

    done = run_lesson(
        mutant,
        "--timeout",
        "3",
        "-k",
        "test_a_second_writer_in_the_same_process_is_refused_too",
    )

    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert (
        "test_a_second_writer_in_the_same_process_is_refused_too did not finish in 3 s"
        in out
    ), out
    assert "waiting in fcntl.flock at " in out and "lock.py:" in out, out
    assert "without LOCK_NB" in out, out


def test_every_lesson_test_gets_the_default_time_limit(tmp_path):
    # Far above a correct solution's slowest test (a few seconds), and still an end to a
    # hang.
    assert 10 <= hangs.LESSON_TEST_TIMEOUT <= 60
    (tmp_path / "timeout_probe.py").write_text(
        "def pytest_collection_finish(session):\n"
        "    for item in session.items:\n"
        "        marker = item.get_closest_marker('timeout')\n"
        "        print('LIMIT', item.name, marker.args[0] if marker else None)\n"
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SESSIONLAB_", "PYTEST_"))
    }
    env["PYTHONPATH"] = str(tmp_path)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "lessons/00_memory",
            "--solution",
            "--co",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "timeout_probe",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    limits = [
        line.split()[-1]
        for line in done.stdout.splitlines()
        if line.startswith("LIMIT")
    ]
    assert limits and set(limits) == {str(hangs.LESSON_TEST_TIMEOUT)}, (
        done.stdout + done.stderr
    )


def test_a_mutant_that_hung_once_gets_a_shorter_limit_for_its_other_tests(tmp_path):
    # The maintainers' runs of many mutants (several --impl paths): the blocking lock
    # hangs every test that takes the lock twice; the first waits the whole limit, the
    # rest hangs.HUNG_AGAIN_TIMEOUT. The reference beside it keeps its limit and passes.
    mutant = blocking_lock(tmp_path)
    reference = ROOT / "solutions/05_lock/agent.py"
    limit = 8

    # -rN: no short summary, whose lines repeat the messages (whole under CI=true)
    done = run_lesson(f"{mutant}{os.pathsep}{reference}", "--timeout", str(limit),
                      "-rN", "-k", "second_writer or times_out")

    out = done.stdout
    again = f"{hangs.HUNG_AGAIN_TIMEOUT:g}"
    assert out.count(f"did not finish in {limit} s") == 1, out
    assert out.count(f"did not finish in {again} s") >= 2, out
    assert "3 failed, 3 passed" in out, out      # the reference passes all three
