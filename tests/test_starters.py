"""The starter generator: fenced solution regions become TODOs, the rest is kept byte for byte."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sessionlab import course
from sessionlab.cli import main
from sessionlab.course import CourseError, Lesson, Task
from sessionlab.pytest_plugin import _advice
from sessionlab.site import expand
from sessionlab.starters import (Starter, expected_starter, generated_file,
                                 make_starter, marked_tasks, strip_markers)

LESSON = Lesson(number="03", name="03_fork", title="Fork", summary="", root=Path("."),
                tasks=(Task("03.1", "Copy the history", "fork", "", ("a", "b")),
                       Task("03.2", 'Write the "meta" file', "fork", "", ("a", "b"))))

SOLUTION = '''def fork():
    """Docstring stays."""
    kept = 1
    # BEGIN 03.1
    copied = kept + 1
    # END 03.1
    if copied:
        # BEGIN 03.2
        write()
        # END 03.2
    return copied
'''


def test_each_fenced_region_becomes_a_todo_and_a_raise_at_its_indentation():
    starter = make_starter(SOLUTION, LESSON)

    assert starter.splitlines() == [
        "def fork():",
        '    """Docstring stays."""',
        "    kept = 1",
        "    # TODO(03.1): Copy the history.",
        "    # What it asks: `sessionlab task 03.1`. Hints: `sessionlab hint --task 03.1`.",
        '    raise NotImplementedError("task 03.1 is not written yet: Copy the history")',
        "    if copied:",
        '        # TODO(03.2): Write the "meta" file.',
        "        # What it asks: `sessionlab task 03.2`. Hints: `sessionlab hint --task 03.2`.",
        # 89 columns on one line: the message goes on lines of its own.
        "        raise NotImplementedError(",
        '            "task 03.2 is not written yet: Write the \\"meta\\" file"',
        "        )",
        "    return copied",
    ]
    compile(starter, "starter", "exec")


def test_strip_markers_keeps_the_code_and_drops_the_fences():
    stripped = strip_markers(SOLUTION)
    assert "BEGIN" not in stripped and "END" not in stripped
    assert "copied = kept + 1" in stripped and "write()" in stripped


def test_marked_tasks_lists_each_task_once_in_order():
    assert marked_tasks(SOLUTION + "# BEGIN 03.1\n# END 03.1\n") == ["03.1", "03.2"]


@pytest.mark.parametrize("broken, complaint", [
    ("# BEGIN 03.1\nx = 1\n", "never closed"),
    ("# BEGIN 03.1\n# BEGIN 03.2\n# END 03.2\n# END 03.1\n", "inside"),
    ("# END 03.1\n", "without BEGIN"),
    ("# BEGIN 03.9\n# END 03.9\n", "not listed"),
    ("# BEGIN 02.1\n# END 02.1\n", "another lesson"),
])
def test_malformed_fences_are_refused_with_the_line(broken, complaint):
    with pytest.raises(CourseError, match=complaint):
        make_starter(broken, LESSON, source="solutions/03_fork/agent.py")


# --- the starter the course ships, whatever a student's copy holds ----------------------

ROOT = Path(__file__).resolve().parent.parent
GENERATED = "generated\n"


@pytest.mark.parametrize("working, committed, holds_work, drifted", [
    (GENERATED, GENERATED, False, False),        # untouched
    ("mine\n", GENERATED, True, False),          # a student's work
    (None, GENERATED, True, False),              # a student removed it
    (GENERATED, "stale\n", False, False),        # regenerated, not committed yet
    ("stale\n", "stale\n", False, True),         # drift, committed
    ("mine\n", "stale\n", True, True),           # drift, and a student's work on top
    ("mine\n", None, False, True),               # no git: the file as it is
    (GENERATED, None, False, False),
])
def test_a_starter_is_drift_only_where_what_ships_differs(working, committed,
                                                          holds_work, drifted):
    item = Starter(LESSON, GENERATED, working, committed)
    assert (item.holds_work, item.drifted) == (holds_work, drifted)


TODO = 'def f():\n    raise NotImplementedError("task 01.1 is not written yet: {}")\n'
ANSWER = "def f():\n    return 1\n"


@pytest.mark.parametrize("working, committed, holds_work, drifted", [
    (ANSWER, TODO.format("new"), True, False),       # an answer on the course's starter
    (ANSWER, None, True, False),                     # no git: a task written is work
    (TODO.format("old"), TODO.format("old"), False, True),  # a stale title is drift
    (ANSWER, TODO.format("old"), True, True),        # drift under a student's answer
])
def test_a_task_written_is_a_students_work_committed_or_not(working, committed,
                                                           holds_work, drifted):
    """A starter whose task no longer raises the generator's NotImplementedError holds
    a student's answer (outside git that is what tells it from drift); drift is the
    course's committed starter differing, whatever its words."""
    item = Starter(LESSON, TODO.format("new"), working, committed)
    assert (item.holds_work, item.drifted) == (holds_work, drifted)


@pytest.fixture
def student_copy(tmp_path):
    """Lessons 00 and 01 of the course, each starter replaced by a student's half-work
    that does not even parse."""
    for side in ("lessons", "solutions"):
        for name in ("00_memory", "01_append"):
            shutil.copytree(ROOT / side / name, tmp_path / side / name,
                            ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("00_memory", "01_append"):
        (tmp_path / "lessons" / name / "agent.py").write_text(
            "class Agent:\n    MINE = 1\n    def run(self, :\n", encoding="utf-8")
    return tmp_path


def test_the_generated_file_is_the_starter_not_the_working_tree(student_copy):
    lesson = course.lesson("01", student_copy)

    assert generated_file(student_copy, "lessons/01_append/agent.py") == \
        expected_starter(lesson)
    assert generated_file(student_copy, "lessons/01_append/test_append.py") is None
    assert generated_file(student_copy, "solutions/01_append/agent.py") is None
    assert generated_file(student_copy, "lessons/09_none/agent.py") is None


def test_the_site_shows_the_generated_starter_in_a_students_copy(student_copy):
    """A lesson page (and the instructors' page) shows the starter the course ships,
    made from the solution, never the student's lessons/NN/agent.py."""
    page = expand('{{ tasks("01_append") }}\n'
                  '{{ code("lessons/00_memory/agent.py", "Agent.run") }}\n',
                  student_copy, "lessons/01_append.md")

    assert "MINE" not in page
    assert "TODO(01.1)" in page and '"task 01.1 is not written yet' in page
    assert "lessons/01_append/log.py · SessionLog.append (starter)" in page
    assert "def run(self" in page and "TODO(00." in page


def test_a_failing_lesson_test_points_at_the_hint_command_and_the_built_page(tmp_path,
                                                                             capsys):
    """The advice under a failure names what has the words: `sessionlab hint --task`
    for that task, and the task's heading on the lesson's built page."""
    for name in ("conftest.py", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    for side in ("lessons", "solutions"):
        shutil.copytree(ROOT / side / "00_memory", tmp_path / side / "00_memory",
                        ignore=shutil.ignore_patterns("__pycache__"))
    lesson = course.lesson("00", tmp_path)
    (lesson.folder / "agent.py").write_text(expected_starter(lesson), encoding="utf-8")

    done = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p",
                           "no:cacheprovider", "lessons/00_memory"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PY_COLORS": "0"})

    # Under CI pytest repeats each message whole in its short summary: read the failure.
    failure = done.stdout.split("short test summary info")[0]
    advice = [line for line in failure.splitlines()
              if line.startswith(("Task:", "Hints:", "Page:", "Read:"))]
    assert len(advice) == 3, done.stdout
    task = re.fullmatch(r"Hints: `sessionlab hint --task (00\.\d+)` \(one more each "
                        r"time you run it\)\.", advice[1])
    assert task, advice
    assert advice[0] == f"Task: `sessionlab task {task[1]}` (what it asks).", advice
    anchor = "task-" + task[1].replace(".", "-")
    assert advice[2] == ("Page: `mkdocs serve`, then "
                         f"http://127.0.0.1:8000/lessons/00_memory/#{anchor}"), advice
    # The page is docs/lessons/00_memory.md built; the anchor is the task's heading.
    source = (ROOT / "docs/lessons/00_memory.md").read_text(encoding="utf-8")
    assert "{#" + anchor + "}" in expand(source, ROOT, "lessons/00_memory.md")
    capsys.readouterr()
    status = main(["--course", str(tmp_path), "hint", "--task", task[1]])
    shown = capsys.readouterr().out
    assert status == 0 and lesson.task(task[1]).title in shown, shown
    assert "Hint 1 of" in shown, shown
    status = main(["--course", str(tmp_path), "task", task[1]])
    shown = capsys.readouterr().out
    assert status == 0 and lesson.task(task[1]).title in shown, shown
    assert "Hint 1 of" not in shown and "shows hint 1 of" in shown, (
        f"`sessionlab task` shows the contract and no hint: {shown}")


@pytest.mark.parametrize("task_id, hint, page", [
    (None, "sessionlab hint 03", "lessons/03_fork/"),
    ("03.2", "sessionlab hint --task 03.2", "lessons/03_fork/#task-03-2"),
    ("01.1", "sessionlab hint --task 01.1", "lessons/03_fork/"),
])
def test_the_advice_is_three_short_lines_for_any_task(task_id, hint, page):
    task, first, second = _advice(LESSON, task_id).splitlines()
    assert task == f"Task: `sessionlab task {task_id or '03'}` (what it asks)."
    assert first.startswith(f"Hints: `{hint}`")
    several = _advice(LESSON, task_id, also=["03.3"]).splitlines()[0]
    assert f"`sessionlab task {task_id or '03'}`" in several and "`sessionlab task 03.3`" \
        in several, f"a test of two tasks names both: {several}"
    assert second == f"Page: `mkdocs serve`, then http://127.0.0.1:8000/{page}"


def test_a_long_task_title_is_wrapped_to_88_columns_and_says_the_same():
    # Course code is read on the site and in a terminal, about 88 columns wide; a task
    # title long enough to overflow must wrap, and the exception must keep every word.
    title = ('Put the content back on load, trusting no "blob" without checking its hash, '
             "and name the blob, the log and the line in every refusal")
    lesson = Lesson(number="03", name="03_fork", title="Fork", summary="", root=Path("."),
                    tasks=(Task("03.1", title, "fork", "", ("a", "b")),))
    solution = "class Log:\n    def load(self):\n        if True:\n            # BEGIN 03.1\n" \
               "            pass\n            # END 03.1\n"

    starter = make_starter(solution, lesson)

    wide = [line for line in starter.splitlines() if len(line) > 88]
    assert not wide, f"lines wider than 88 columns in the starter: {wide}"
    assert f"TODO(03.1): {title}." in " ".join(
        line.strip().removeprefix("# ") for line in starter.splitlines()), starter
    namespace: dict = {}
    exec(compile(starter, "starter", "exec"), namespace)
    with pytest.raises(NotImplementedError) as raised:
        namespace["Log"]().load()
    assert str(raised.value) == f"task 03.1 is not written yet: {title}"
