"""A lesson's state (done, in progress, not started) comes from whether its tasks are
written, the same in `list`, `check` and watch: a starter whose tests pass in part for
free is still not started."""

from __future__ import annotations

import ast
import re

import pytest

from sessionlab import starters
from sessionlab.cli import runner
from sessionlab.cli.runner import LessonResult, Outcome
from sessionlab.cli.ui import make_ui
from sessionlab.cli.watch import Watch
from sessionlab.course import lessons

from .conftest import REPO, STARTER

ALL = lessons(REPO)


def row_of(out: str, number: str) -> str:
    return next(line for line in out.splitlines() if re.search(rf"(^|\s){number}\s", line))


@pytest.mark.parametrize("lesson", ALL, ids=[lesson.name for lesson in ALL])
def test_every_untouched_starter_has_no_task_written_and_every_solution_all(lesson,
                                                                         tmp_path):
    # The starter as generated: lessons/NN/ may hold a student's work.
    for name, text in starters.expected_starters(lesson).items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    starter = runner.written_tasks(lesson, tmp_path / "agent.py")
    solution = runner.written_tasks(lesson, lesson.module_path("solution"))

    assert starter == {task.id: False for task in lesson.tasks}
    assert solution == {task.id: True for task in lesson.tasks}


def test_a_task_with_two_places_is_written_once_either_is(tmp_path):
    lesson = next(item for item in ALL if item.number == "00")
    given = starters.expected_starters(lesson)
    places = {name: starters.starter_raises(text).get("00.1", 0)
              for name, text in given.items()}
    assert sum(places.values()) == 2, f"00.1 has two places in the starter: {places}"
    for name, text in given.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    # The first of 00.1's raises (it may span lines) becomes the student's code.
    name = next(name for name, count in places.items() if count)
    starter = given[name]
    first = next(node for node in ast.walk(ast.parse(starter))
                 if isinstance(node, ast.Raise) and "task 00.1" in ast.unparse(node))
    lines = starter.splitlines(keepends=True)
    indent = " " * first.col_offset
    lines[first.lineno - 1:first.end_lineno] = [indent + "pass  # mine\n"]
    (tmp_path / name).write_text("".join(lines))
    module = tmp_path / "agent.py"
    module.write_text(given["agent.py"] + f"\n# {indent}raise NotImplementedError("
                      "\"task 00.2 is not written yet\")\n")

    written = runner.written_tasks(lesson, module)

    assert written["00.1"] is True, "one of its two places is written"
    assert written["00.2"] is False, "a comment quoting the raise does not write 00.2"


def test_the_state_ignores_tests_that_pass_for_free():
    free = Outcome("t::a", "test_a", "passed", tasks=["03.1"])
    todo = Outcome("t::b", "test_b", "failed", tasks=["03.1"],
                   exception="NotImplementedError", message="task 03.1 is not written yet")
    untouched = LessonResult("03_fork", tests=[free, todo],
                             written={"03.1": False, "03.2": False})
    begun = LessonResult("03_fork", tests=[free, todo],
                         written={"03.1": False, "03.2": True})

    assert untouched.state == "not started"
    assert untouched.task_state("03.1") == "todo"
    assert begun.state == "in progress"


@pytest.mark.campaign
def test_list_check_and_watch_call_an_untouched_starter_not_started(cli, course_copy):
    # Lesson 09's starter passes a test for free (its erase's given first lines take the
    # lock); the static rule above covers every lesson, one lesson is run here.
    course = course_copy({"09_privacy": STARTER})

    listed = cli("--course", course, "list")

    assert listed.status == 0, listed.text
    row = row_of(listed.out, "09")
    assert "not started" in row and "in progress" not in row, row
    assert re.search(r"\s[1-9]\d*/\d+\s*$", row), f"some tests pass for free: {row}"
    assert "[" + "." * 40 + "] 0/1" in listed.out, "the bar: no lesson done, none begun"

    checked = cli("--course", course, "check", "09")
    assert "not started: no task is written yet" in checked.out, checked.out
    assert all(line.split()[0] == "todo" for line in checked.out.splitlines()
               if re.match(r"todo|ok|FAIL", line)), checked.out

    watch = Watch(make_ui(), course, "09")
    watch.start()
    assert watch.results["09_privacy"].state == "not started"

    # The student writes task 09.1 (here: the reference's code for it): now it has begun.
    lesson = next(item for item in lessons(course) if item.number == "09")
    solution = (course / "solutions" / "09_privacy" / "privacy.py").read_text()
    mine = starters.make_starter(solution.replace("# BEGIN 09.1", "# BEGUN").replace(
        "# END 09.1", "# ENDED"), lesson)
    (course / "lessons" / "09_privacy" / "privacy.py").write_text(mine)

    again = cli("--course", course, "list")
    assert "in progress" in row_of(again.out, "09"), again.out
