"""The maintainers' check keeps the design the student's (sessionlab.designs)."""

import shutil
from pathlib import Path

from sessionlab import course, designs, maintainers

ROOT = Path(__file__).resolve().parents[1]

PRESUMING = '''\
def total(items):
    """The sum."""
    result = 0
    # BEGIN 01.1
    for item in items:
        result += item
    # END 01.1
    return result
'''

WHOLE = '''\
def total(items):
    """The sum."""
    # BEGIN 01.1
    result = 0
    for item in items:
        result += item
    return result
    # END 01.1
'''

CALLED = '''\
def total(items):
    """The sum."""
    # BEGIN 01.1
    return sum(items)
    # END 01.1


def report(items):
    """Given code that uses the student's function through its contract."""
    return f"total {total(items)}"
'''


def fence_of(text):
    (fence,) = designs.fences("m.py", text)
    return fence


def test_given_code_reading_a_name_the_fence_makes_is_found():
    """A starter whose given code after the TODO reads a variable the student must
    set presumes the student's design; a fence over the whole body, or given code that
    calls the student's function, does not."""
    assert designs.presumed(PRESUMING, fence_of(PRESUMING)) == ["result"]
    assert designs.presumed(WHOLE, fence_of(WHOLE)) == []
    assert designs.presumed(CALLED, fence_of(CALLED)) == []


def test_a_names_changed_in_place_counts_as_made_by_the_fence():
    """Filling a list the given code then reads presumes the list, as much as an
    assignment does; a comprehension's own variable is not the fence's."""
    text = '''\
def shown(entries):
    """Pairs."""
    pairs = []
    # BEGIN 01.1
    for position, entry in enumerate(entries):
        pairs.append((len(pairs), position))
    # END 01.1
    return [(i, position) for i, position in pairs if i]
'''
    assert designs.presumed(text, fence_of(text)) == ["pairs"]


def test_a_design_fence_must_hold_the_whole_body():
    """Given code before or after the fence in its function is reported by line; the
    docstring does not count."""
    assert designs.given_around(PRESUMING, fence_of(PRESUMING)) == [3, 8]
    assert designs.given_around(WHOLE, fence_of(WHOLE)) == []


def test_a_design_tasks_test_may_not_reach_private_names(tmp_path):
    """A design task's tests check behaviour: a private name of one design (`log._fd`)
    is reported; the standard library's (`os._exit`) and a test helper's own
    `self._x` are not."""
    tests = tmp_path / "test_x.py"
    tests.write_text('''\
import os
import pytest


class Reader:
    def go(self):
        return self._buffer


@pytest.mark.task("01.2")
def test_peeks(lesson):
    """Peeks."""
    assert lesson.log._fd > 0
    os._exit


@pytest.mark.task("01.2")
def test_patches(lesson, monkeypatch):
    """Patches."""
    monkeypatch.setattr(lesson.SessionLog, "_lock", None)


@pytest.mark.task("01.3")
def test_other(lesson):
    """Another task's test may."""
    lesson.log._fd
''')
    assert designs.private_reaches(tests, "01.2") == ["test_patches: ._lock",
                                                      "test_peeks: ._fd"]


def test_the_course_keeps_every_rule():
    """Every lesson of the course has a design task, its fences hold whole bodies, its
    tests reach no private name, and no given code reads what a fence makes."""
    assert maintainers.check_designs(ROOT).problems == []


def test_a_lesson_without_a_design_task_is_reported(tmp_path):
    """Taking the design mark off a lesson's task fails the check, naming the lesson."""
    for side in ("lessons", "solutions"):
        shutil.copytree(ROOT / side / "00_memory", tmp_path / side / "00_memory",
                        ignore=shutil.ignore_patterns("__pycache__"))
    toml = tmp_path / "lessons/00_memory/lesson.toml"
    text = toml.read_text(encoding="utf-8")
    assert "design = true\n" in text
    toml.write_text(text.replace("design = true\n", ""), encoding="utf-8")

    problems = designs.lesson_problems(course.lesson("00", tmp_path))

    assert any(p.startswith("00_memory has no design task") for p in problems), problems
