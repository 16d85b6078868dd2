"""How a lesson's failures read in a student's plain `pytest lessons/NN_topic`: the test's
words first, every task a test checks named in the lesson's order, a task not written yet
said once in full, and `--task NN.K` to run one task's tests."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Three failures of a test file's own making, in lesson 01's folder: marked for two tasks
# (in the reverse of the lesson's order), failed with pytest.fail, and a bare assert.
WORDS = '''
import pytest

@pytest.mark.task("01.3")
@pytest.mark.task("01.2")
def test_two_tasks_with_words():
    history = ["day one"] * 3
    assert len(history) == 2, "day two was sent 3 messages of day one, and 2 were expected"

@pytest.mark.task("01.2")
def test_failed_in_words():
    pytest.fail("the log lost its last line", pytrace=True)

@pytest.mark.task("01.2")
def test_a_bare_assert():
    assert 1 + 1 == 3

@pytest.mark.task("01.2")
@pytest.mark.task("01.3")
def test_that_knows_whose_code_failed_it():
    from sessionlab.testing import fail_in
    fail_in("01.3", "day two's request forgot day one")
'''


@pytest.fixture
def student(tmp_path: Path) -> Path:
    """A student's copy of lessons 01 and 02: the starter as shipped, and the file above."""
    for name in ("conftest.py", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    for side in ("lessons", "solutions"):
        for name in ("01_append", "02_load"):
            shutil.copytree(ROOT / side / name, tmp_path / side / name,
                            ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def pytest_run(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *args], cwd=folder, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PY_COLORS": "0"})


def failures(done: subprocess.CompletedProcess) -> dict[str, str]:
    """Each failure's report, by test name (the short summary left out)."""
    text = re.split(r"^=+ short test summary info", done.stdout, flags=re.M)[0]
    parts = re.split(r"^_+ (test_\w+(?:\[.*\])?) _+$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_a_tests_own_words_come_first_and_a_bare_assert_keeps_pytests(student):
    (student / "lessons/01_append/test_words.py").write_text(WORDS, encoding="utf-8")

    reports = failures(pytest_run(student, "lessons/01_append/test_words.py"))

    both = reports["test_two_tasks_with_words"]
    first = both.strip().splitlines()[0]
    assert first == ("test_words.py:8: day two was sent 3 messages of day one, and 2 were "
                     "expected"), both
    assert "def test_" not in both and "history = " not in both, (
        f"the test's source is printed with its words:\n{both}")
    assert "lesson 01_append, tasks 01.2 and 01.3" in both, (
        f"the tasks are named in the lesson's order:\n{both}")
    assert "Hints: `sessionlab hint 01`" in both, (
        "one failure of a test of two tasks cannot tell whose code is wrong: the hint "
        f"command that weighs the lesson's failures is named, not the first task's:\n{both}")

    failed = reports["test_failed_in_words"]
    assert failed.strip().splitlines()[0] == "test_words.py:12: the log lost its last line"
    assert "pytest.fail(" not in failed, failed

    blamed = reports["test_that_knows_whose_code_failed_it"]
    assert blamed.strip().splitlines()[0] == (
        "test_words.py:22: day two's request forgot day one"), blamed
    assert "lesson 01_append, task 01.3 " in blamed and "01.2" not in blamed, (
        f"a test that says whose code failed it names that task alone:\n{blamed}")
    assert "Hints: `sessionlab hint --task 01.3`" in blamed and "#task-01-3" in blamed

    bare = reports["test_a_bare_assert"]
    assert "assert (1 + 1) == 3" in bare or "assert 1 + 1 == 3" in bare, (
        f"a bare assert has only pytest's introspection to say what failed:\n{bare}")


def test_a_task_not_written_is_said_in_full_once_then_in_one_line(student):
    done = pytest_run(student, "lessons/02_load")

    reports = failures(done)
    assert reports, done.stdout
    full = [name for name, text in reports.items() if "This test checks" in text]
    short = [name for name, text in reports.items() if "(as above)" in text]
    missing = {re.search(r"task (02\.\d) is not written yet", text)[1]
               for text in reports.values()}
    assert len(full) == len(missing) and len(full) + len(short) == len(reports), (
        f"{len(full)} failures said in full for {len(missing)} tasks not written "
        f"({sorted(missing)}), {len(short)} in one line, of {len(reports)}")
    for name in short:
        assert len(reports[name].strip().splitlines()) == 1, reports[name]
    for name in full:
        task = re.search(r"task (02\.\d) is not written yet", reports[name])[1]
        alone = f"(its tests alone: `pytest lessons/02_load --task {task}`)"
        assert alone in reports[name], (
            f"a task's first failure gives the command that runs its tests alone, "
            f"{alone}:\n{reports[name]}")


def test_a_students_own_placeholder_is_read_by_its_tasks_number(student):
    """A student who puts a placeholder of their own in a task's place, punctuated their
    way ("task 02.1: ..."), is told to write task 02.1, never "task 02.1:", a task no
    command knows."""
    for name in ("log.py", "agent.py"):
        module = student / "lessons/02_load" / name
        module.write_text(module.read_text(encoding="utf-8").replace(
            '"task 02.1 is not written yet: ', '"task 02.1: load not done yet, '),
            encoding="utf-8")

    done = pytest_run(student, "lessons/02_load/test_load.py")

    said = "\n".join(failures(done).values())
    assert "02.1:" not in said.replace("task 02.1: load not done", ""), (
        f"the task is 02.1, whatever punctuation follows it:\n{said[:3000]}")
    assert "`pytest lessons/02_load --task 02.1`" in said, said[:3000]


WAITS = '''
import pytest

@pytest.mark.task("01.1")
def test_of_01_1_that_needs_01_3_too():
    raise NotImplementedError("task 01.3 is not written yet: see the page")

@pytest.mark.task("01.1")
def test_of_01_1_itself():
    raise NotImplementedError("task 01.1 is not written yet: see the page")
'''


def test_under_task_a_test_that_waits_for_a_later_task_is_skipped_not_failed(student):
    """`--task 01.1` asks how 01.1 stands: its test that runs into 01.3, not written
    yet, is skipped and counted in one line; its test that meets 01.1's own placeholder
    fails; without --task both fail."""
    (student / "lessons/01_append/test_waits.py").write_text(WAITS)
    chosen = pytest_run(student, "lessons/01_append/test_waits.py", "--task", "01.1")
    assert "1 failed, 1 skipped" in chosen.stdout, chosen.stdout
    assert "waits for task 01.3, not written yet" in chosen.stdout, chosen.stdout
    assert ("1 test of 01.1 also needs task 01.3, not written yet: skipped, not "
            "failed; it runs once 01.3 is written.") in chosen.stdout, chosen.stdout
    every = pytest_run(student, "lessons/01_append/test_waits.py")
    assert "2 failed" in every.stdout and "skipped" not in every.stdout, every.stdout


@pytest.mark.campaign
def test_task_option_runs_one_tasks_tests_and_refuses_a_task_no_test_checks(student):
    every = pytest_run(student, "--co", "lessons/01_append")
    one = pytest_run(student, "--co", "lessons/01_append", "--task", "01.3")
    count = lambda done: len([line for line in done.stdout.splitlines() if "::" in line])
    assert 0 < count(one) < count(every), (one.stdout, every.stdout)
    assert "test_each_message_is_on_disk_before_the_next_model_call" in one.stdout  # + 01.3
    assert "test_a_second_log_object_appends_and_never_truncates" not in one.stdout  # no 01.3

    unknown = pytest_run(student, "lessons/01_append", "--task", "01.9")
    assert unknown.returncode == 4, unknown.stdout + unknown.stderr
    assert "--task 01.9: no test collected here checks that task (tasks here: 01.1, " \
        "01.2, 01.3, 01.4, 01.5)" in unknown.stderr, unknown.stderr


@pytest.mark.campaign
def test_a_test_that_hangs_in_its_own_code_keeps_the_hangs_explanation(student):
    (student / "lessons/01_append/test_hang.py").write_text('''
import threading
import pytest

@pytest.mark.task("01.2")
def test_waits_in_the_test():
    threading.Event().wait()
''', encoding="utf-8")

    report = failures(pytest_run(student, "lessons/01_append/test_hang.py", "--timeout",
                                 "2"))["test_waits_in_the_test"]

    first = report.strip().splitlines()[0]
    assert first.startswith("test test_waits_in_the_test did not finish in 2 s:"), (
        f"a hang is explained in words of its own, even raised in the test's code:\n"
        f"{report}")


@pytest.mark.parametrize("edit, error", [
    ("import jsonn", "ModuleNotFoundError: No module named 'jsonn'"),
    ("import json as", "SyntaxError: invalid syntax"),
], ids=["a module that does not exist", "a syntax error"])
def test_code_that_does_not_import_is_said_once_at_its_line(student, edit, error):
    messages = student / "lessons/01_append/messages.py"
    text = messages.read_text(encoding="utf-8")
    line = text.splitlines().index("import json") + 1
    messages.write_text(text.replace("import json\n", edit + "\n", 1), encoding="utf-8")

    done = pytest_run(student, "lessons/01_append")

    where = f"lessons/01_append/messages.py:{line}"
    said = [text for text in re.split(r"^_+ ERROR at setup of .* _+$", done.stdout,
                                      flags=re.M)[1:]]
    assert said and said[0].strip().splitlines()[0] == f"{where}: {error}", done.stdout
    assert "does not import, so none of its tests can run" in said[0], said[0]
    assert all(text.split("=====")[0].strip() == f"{where}: the lesson's code does not "
               "import (as above)." for text in said[1:]), (
        "after the first, each test that could not import the code says so in one line:"
        f"\n{done.stdout[:3000]}")
