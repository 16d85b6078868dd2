"""The "First failure" a student sees is the cause, not merely the lowest task id."""

from __future__ import annotations

from pathlib import Path

from sessionlab.cli.runner import LessonResult, Outcome
from sessionlab.course import Lesson, Task

LESSON = Lesson(
    number="04",
    name="04_repair",
    title="Repair",
    summary="",
    root=Path("."),
    tasks=(
        Task("04.1", "Read strictly", "parse_log", "", ("a", "b")),
        Task("04.2", "Find unanswered calls", "unanswered_calls", "", ("a", "b")),
        Task("04.3", "Repair the tail", "SessionLog._repair", "", ("a", "b")),
    ),
)


def outcome(name, task, passed=False, **failure) -> Outcome:
    return Outcome(
        nodeid=f"lessons/04_repair/test_repair.py::{name}",
        name=name,
        outcome="passed" if passed else "failed",
        tasks=[task],
        **(
            {}
            if passed
            else {
                "exception": "AssertionError",
                "message": "words",
                "raised_in": "test",
                **failure,
            }
        ),
    )


def test_an_exception_out_of_a_later_tasks_function_beats_an_earlier_tasks_assertion():
    result = LessonResult(
        "04_repair",
        tests=[
            outcome(
                "test_fork",
                "04.1",
                exception="KeyError",
                raised_in="module",
                in_function="_repair",
            ),
            outcome("test_parse", "04.1", passed=True),
            outcome("test_repair_once", "04.3"),
        ],
    )

    first = result.first_failure(LESSON)

    assert first.name == "test_repair_once", (
        "04.3's own test explains a crash in _repair best"
    )


def test_a_done_tasks_test_that_reaches_an_unwritten_task_points_at_that_task():
    not_written = dict(
        exception="NotImplementedError",
        raised_in="module",
        message="task 04.2 is not written yet: Find unanswered calls",
    )
    result = LessonResult(
        "04_repair",
        tests=[
            outcome(
                "test_parse_then_resume",
                "04.1",
                in_function="unanswered_calls",
                **not_written,
            ),
            outcome(
                "test_calls_found",
                "04.2",
                in_function="unanswered_calls",
                **not_written,
            ),
        ],
    )

    assert result.first_failure(LESSON).name == "test_calls_found"
    assert result.first_failing_task(LESSON) == "04.2"


def test_a_written_tasks_own_failure_comes_before_the_next_unwritten_task():
    """04.1 written, with one of its own checks failing; 04.2 not written: the student
    sees the fault in what they wrote, not a task they have not started."""
    not_written = dict(exception="NotImplementedError", raised_in="module",
                       message="task 04.2 is not written yet: Find unanswered calls")
    result = LessonResult(
        "04_repair",
        tests=[
            outcome("test_parse_a", "04.1", passed=True),
            outcome("test_parse_b", "04.1", passed=True),
            outcome("test_parse_counts_lines", "04.1"),
            outcome("test_calls_found", "04.2", **not_written),
        ],
        written={"04.1": True, "04.2": False, "04.3": False},
    )

    assert result.first_failure(LESSON).name == "test_parse_counts_lines"
    assert result.first_failing_task(LESSON) == "04.1"


def test_a_broken_task_beats_an_earlier_task_with_one_failure_among_passes():
    result = LessonResult(
        "04_repair",
        tests=[
            outcome("test_parse_a", "04.1", passed=True),
            outcome("test_parse_b", "04.1", passed=True),
            outcome("test_fork_counts", "04.1"),
            outcome("test_repair_once", "04.3"),
            outcome("test_repair_said", "04.3"),
        ],
    )

    assert result.first_failure(LESSON).name == "test_repair_once"


def test_when_every_task_is_broken_the_earliest_one_is_the_cause():
    result = LessonResult(
        "04_repair",
        tests=[
            outcome("test_repair_once", "04.3"),
            outcome("test_parse", "04.1"),
            outcome("test_calls", "04.2"),
        ],
    )

    assert result.first_failure(LESSON).name == "test_parse"
