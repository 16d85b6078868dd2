"""`sessionlab answer`: the answers a lesson's page folds away, read in a terminal."""

from __future__ import annotations

import shutil
import tomllib

import pytest

from sessionlab.cli import runner

from .conftest import REPO, SOLUTION, STARTER, make_course

LESSON = "08_compact"
ANSWERS = tomllib.loads((REPO / "solutions" / LESSON / "answers.toml").read_text())


def course_with(tmp_path, state):
    """Lesson 08 (its starter, or the reference in its place) and its page."""
    course = make_course(tmp_path / "course", {LESSON: state})
    (course / "docs" / "lessons").mkdir(parents=True)
    shutil.copy(REPO / "docs" / "lessons" / f"{LESSON}.md", course / "docs" / "lessons")
    return course


def first_words(key: str) -> str:
    return ANSWERS[key].strip().splitlines()[0][:40]


def test_the_page_questions_are_listed_and_a_tasks_answer_waits_for_it(cli, tmp_path):
    course = course_with(tmp_path, STARTER)

    listed = cli("--course", course, "answer", "08")
    assert listed.status == 0, listed.text
    rows = {line.split()[0]: line for line in listed.out.splitlines()[1:] if line.strip()}
    assert list(rows) == ["saw", "summary-replies", "role", "boundary"], listed.out
    assert "In which role does the summary go?" in rows["role"]
    assert "(task 08.2's question: opens once it passes)" in rows["role"], rows["role"]
    assert "opens once" not in rows["saw"], rows["saw"]

    refused = cli("--course", course, "answer", "08", "role")
    assert refused.status == 1, refused.text
    assert "task 08.2 does not pass yet" in refused.err, refused.err
    assert "sessionlab answer 08 role --force" in refused.err, refused.err
    assert first_words("role") not in refused.out

    forced = cli("--course", course, "answer", "08", "role", "--force")
    assert forced.status == 0, forced.text
    assert first_words("role") in forced.out, forced.out


def test_what_see_showed_opens_without_running_a_test(cli, tmp_path, monkeypatch):
    course = course_with(tmp_path, STARTER)

    def refuse(*args, **kwargs):
        raise AssertionError("the tests ran for an answer that waits for no task")
    monkeypatch.setattr(runner, "run_pytest", refuse)

    shown = cli("--course", course, "answer", "08", "saw")
    assert shown.status == 0, shown.text
    assert "What `sessionlab see 08` showed" in shown.out
    assert "Resuming means resending" in shown.out, shown.out
    assert "Task 08.3 prevents it" in shown.out and "](#" not in shown.out, (
        "a link to a place on the site leads nowhere in a terminal: its words stay")


@pytest.mark.campaign
def test_a_tasks_answer_opens_once_its_task_passes(cli, tmp_path):
    course = course_with(tmp_path, SOLUTION)

    shown = cli("--course", course, "answer", "08", "role")
    assert shown.status == 0, shown.text
    assert first_words("role") in shown.out, shown.out
    listed = cli("--course", course, "answer", "08")
    assert "opens once" not in listed.out, listed.out


def test_a_question_the_page_does_not_ask_is_refused_naming_those_it_does(cli, tmp_path):
    course = course_with(tmp_path, STARTER)

    refused = cli("--course", course, "answer", "08", "rolle")
    assert refused.status == 2, refused.text
    assert "asks no question 'rolle'" in refused.err
    assert "saw, summary-replies, role, boundary" in refused.err, refused.err


def test_a_copy_without_the_lessons_page_is_told_what_is_missing(cli, tmp_path):
    course = make_course(tmp_path / "course", {LESSON: STARTER})

    refused = cli("--course", course, "answer", "08")
    assert refused.status == 1, refused.text
    assert "lesson 08's questions cannot be read" in refused.err
    assert "08_compact.md" in refused.err, refused.err
