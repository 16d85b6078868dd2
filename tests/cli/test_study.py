"""hint, reset, solution and diff: the advice they give works, and what they refuse, they
refuse in one line."""

from __future__ import annotations

import json
import re

import pytest

from sessionlab import course as registry
from sessionlab import starters
from sessionlab.cli.progress import reference_texts

from .conftest import SOLUTION, STARTER
from .readonly import run_read_only


def advised(out: str) -> list[str]:
    """The `sessionlab ...` commands an output advises, as argument lists."""
    return [found.split()[1:] for found in re.findall(r"`(sessionlab [^`]+)`", out)]


@pytest.fixture
def repair_course(course_copy):
    return course_copy({"04_repair": STARTER})


def hints_of(course, task_id: str) -> int:
    """How many hints the course gives the task (the lessons' text changes; the rules here
    do not)."""
    lesson = registry.lesson(task_id[:2], course)
    return len(next(task.hints for task in lesson.tasks if task.id == task_id))


def test_the_advice_after_a_hint_shows_the_next_hint(cli, repair_course):
    last = hints_of(repair_course, "04.3")
    run = cli("--course", repair_course, "hint", "--task", "04.3", "--level", "2")
    assert run.status == 0, run.text
    assert f"Hint 2 of {last}" in run.out
    follow_up = [argv for argv in advised(run.out) if argv[:1] == ["hint"]]
    assert follow_up, f"no hint command advised in: {run.out}"

    after = cli("--course", repair_course, *follow_up[0])
    assert after.status == 0, after.text
    assert "Task 04.3" in after.out and f"Hint 3 of {last}" in after.out, after.out
    assert "no hint needed" not in after.out


def test_every_hint_of_every_task_advises_a_command_that_shows_the_next(cli, course_copy):
    root = course_copy({"01_append": STARTER, "03_fork": STARTER})
    for lesson in registry.lessons(root):
        for task in lesson.tasks:
            for level in range(1, len(task.hints)):
                run = cli("--course", root, "hint", "--task", task.id, "--level", str(level))
                follow_up = [argv for argv in advised(run.out) if argv[:1] == ["hint"]]
                after = cli("--course", root, *follow_up[0])
                assert f"Task {task.id}" in after.out and f"Hint {level + 1} of" in after.out


@pytest.mark.parametrize("level", ["0", "-1", "-30"])
def test_a_hint_level_below_1_is_refused_in_one_line(cli, repair_course, level):
    run = cli("--course", repair_course, "hint", "--task", "04.3", "--level", level)
    assert run.status == 2
    assert run.err.splitlines()[0] == (f"error: --level {level}: hints are numbered from 1 "
                                       f"(task 04.3 has {hints_of(repair_course, '04.3')} hints)")
    assert "Hint 1 of" not in run.out
    assert not (repair_course / ".sessionlab" / "hints.json").exists(), "nothing is recorded as seen"


def test_a_hint_level_past_the_last_says_how_many_there_are(cli, repair_course):
    last = hints_of(repair_course, "04.3")
    run = cli("--course", repair_course, "hint", "--task", "04.3", "--level", str(last + 1))
    assert run.status == 2
    assert f"task 04.3 has {last} hints" in run.err
    assert f"`sessionlab hint --task 04.3 --level {last}`" in run.err


def test_a_hint_level_is_checked_for_the_current_task_too(cli, course):
    run = cli("--course", course, "hint", "--level", "0")
    assert run.status == 2 and "hints are numbered from 1" in run.err


# --- diff follows solution's rule ------------------------------------------------------------


def solution_only_lines(root, number: str) -> set[str]:
    """Lines of lesson NN's reference that its starter does not have: its answer."""
    lesson = registry.lesson(number, root)
    starter = {line for text in starters.expected_starters(lesson).values()
               for line in text.splitlines()}
    return {line for text in reference_texts(lesson).values()
            for line in text.splitlines() if line.strip() and line not in starter}


def added(out: str) -> set[str]:
    return {line[1:] for line in out.splitlines() if line.startswith("+") and not line.startswith("+++")}


def test_diff_of_a_lesson_that_does_not_pass_shows_the_starters_not_its_answer(cli, course_copy):
    root = course_copy({"02_load": STARTER, "03_fork": STARTER})
    run = cli("--course", root, "diff", "02", "03")
    assert run.status == 0, run.text
    assert "+++ lessons/03_fork/forks.py" in run.out
    leaked = added(run.out) & solution_only_lines(root, "03")
    assert not leaked, f"lesson 03's answer shown before it passes: {sorted(leaked)[:3]}"
    assert any("NotImplementedError" in line for line in added(run.out)), "the new TODOs are shown"


def test_diff_of_the_solutions_is_refused_like_solution_until_both_pass(cli, course):
    # `course`: lesson 00 done, lesson 01 untouched, their results already known.
    refused = cli("--course", course, "diff", "00", "01", "--solutions")
    assert refused.status == 1
    assert "lesson 01 does not pass yet" in refused.err and "--force" in refused.err
    assert not added(refused.out) & solution_only_lines(course, "01")

    solution = cli("--course", course, "solution", "01")
    assert solution.status == refused.status, "the same rule as `solution`"

    # (--force alone is refused: test_first_hour_3, item 8)
    forced = cli("--course", course, "diff", "00", "01", "--solutions", "--force")
    assert forced.status == 0, forced.text
    assert "+++ solutions/01_append/log.py" in forced.out
    assert added(forced.out) & solution_only_lines(course, "01")


def test_diff_of_the_solutions_is_shown_once_both_lessons_pass(cli, course):
    for path in registry.lesson_modules(course / "solutions" / "01_append"):
        (course / "lessons" / "01_append" / path.name).write_text(path.read_text())
    run = cli("--course", course, "diff", "00", "01", "--solutions")
    assert run.status == 0, run.text
    assert "+++ solutions/01_append/log.py" in run.out
    assert added(run.out) & solution_only_lines(course, "01")


# --- reset where nothing can be written ------------------------------------------------------


def test_reset_in_a_read_only_course_says_so_in_one_line_and_changes_nothing(course_copy):
    root = course_copy({"00_memory": STARTER})
    module = root / "lessons" / "00_memory" / "agent.py"
    module.write_text(module.read_text() + "\n# my work\n")
    (root / ".sessionlab").mkdir(exist_ok=True)

    run = run_read_only([root], "reset", "00", cwd=root)

    assert run.status == 1, run.text
    assert "Traceback" not in run.text
    first = run.err.splitlines()[0]
    assert first.startswith("error: cannot keep a backup of your file in ") and "nothing was reset" in first
    assert module.read_text().endswith("# my work\n"), "the student's file is untouched"


def test_reset_in_a_read_only_lesson_folder_keeps_the_file_and_says_where_the_copy_is(course_copy):
    root = course_copy({"00_memory": STARTER})
    module = root / "lessons" / "00_memory" / "agent.py"
    module.write_text(module.read_text() + "\n# my work\n")

    run = run_read_only([module.parent], "reset", "00", cwd=root)

    assert run.status == 1, run.text
    assert "Traceback" not in run.text
    first = run.err.splitlines()[0]
    assert "cannot write lessons/00_memory/agent.py" in first and "your file is unchanged" in first
    assert module.read_text().endswith("# my work\n")
    backups = list((root / ".sessionlab" / "backups" / "00_memory").glob("agent-*.py"))
    assert len(backups) == 1 and str(backups[0].relative_to(root)) in first


@pytest.mark.campaign
def test_task_shows_what_a_task_asks_and_costs_no_hint(cli, course_copy):
    """`sessionlab task` is how a student reads a task's contract in a terminal: the
    description, never a hint, and no hint level counted; a lesson shows every task; the
    current task is the first failing one; a task that does not exist is refused in words."""
    root = course_copy({"00_memory": STARTER, "03_fork": STARTER})
    lesson = registry.lesson("03", root)
    one = cli("--course", root, "task", "03.2")
    assert one.status == 0, one.text
    task = lesson.task("03.2")
    assert task.title in one.out and " ".join(task.description.split()[:8]) in " ".join(
        one.out.split()), one.out
    assert not any(hint.split()[0] in one.out and hint[:40] in one.out
                   for hint in task.hints), f"a hint was shown: {one.out}"
    assert not (root / ".sessionlab" / "hints.json").exists(), "reading a task counted a hint"

    every = cli("--course", root, "task", "03")
    assert all(t.title in every.out for t in lesson.tasks), every.out

    current = cli("--course", root, "task")
    assert current.status == 0 and "Task 00.1" in current.out, current.out

    for wrong in ("03.9", "42.1", "x"):
        refused = cli("--course", root, "task", wrong)
        assert refused.status == 2 and "error:" in refused.text, refused.text
