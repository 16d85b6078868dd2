"""A newcomer's first hour: each command a new user typed that went wrong, run as typed.

Every failure here must be one line naming what was wrong (the file, the argument, the
lesson), with no traceback, and must run nothing it does not need to.
"""

from __future__ import annotations

import re

import pytest

from sessionlab.cli import runner

from .conftest import SOLUTION, STARTER


def one_line_error(run, *words: str) -> str:
    """The single `error:` line of a refused command, checked to name `words`."""
    assert "Traceback" not in run.text, run.text
    lines = [line for line in run.err.splitlines() if line.strip()]
    assert len(lines) == 1, f"one line expected, got:\n{run.err}"
    for word in words:
        assert word in lines[0], f"{word!r} missing from: {lines[0]}"
    return lines[0]


@pytest.fixture
def no_runs(monkeypatch):
    """Fails the test if any lesson's tests are run."""
    ran = []

    def refuse(root, lessons, **options):
        ran.append([lesson.name for lesson in lessons])
        raise AssertionError(f"ran the tests of {ran[-1]} before refusing")

    monkeypatch.setattr(runner, "run_pytest", refuse)
    return ran


# --- 7. a lesson.toml without a title ----------------------------------------------------


BROKEN_TOML = [
    pytest.param('title = "Memory: the agent loop"\n', "", "missing key `title`",
                 id="no-title"),
    pytest.param('title = "Memory: the agent loop"\n', "title = 3\n",
                 "`title` must be a string", id="title-not-text"),
    pytest.param('id = "00.1"\n', "", "task 1: missing key `id`", id="task-without-id"),
    pytest.param('id = "00.1"\ntitle = ', 'id = "00.1"\nnot_a_title = ',
                 "task 00.1: missing key `title`", id="task-without-title"),
]


@pytest.mark.parametrize("argv", [["list"], ["check", "00"], ["check"], ["watch"],
                                  ["hint"], ["reset", "00"], ["diff", "00", "00"]])
@pytest.mark.parametrize("find, replace, said", BROKEN_TOML)
def test_a_malformed_lesson_toml_is_one_line_naming_file_and_key(
        cli, course_copy, no_runs, argv, find, replace, said):
    course = course_copy({"00_memory": STARTER})
    toml = course / "lessons" / "00_memory" / "lesson.toml"
    text = toml.read_text()
    assert find in text
    toml.write_text(text.replace(find, replace, 1))

    run = cli("--course", course, *argv)

    assert run.status == 2
    one_line_error(run, "00_memory/lesson.toml", said)


def test_doctor_names_a_malformed_lesson_toml(cli, course_copy, monkeypatch):
    course = course_copy({"00_memory": STARTER})
    toml = course / "lessons" / "00_memory" / "lesson.toml"
    toml.write_text(toml.read_text().replace('title = "Memory: the agent loop"\n', "", 1))
    monkeypatch.setenv("OLLAMA_HOST", "127.0.0.1:9")

    run = cli("--course", course, "doctor")

    assert run.status == 1, "a course whose lessons cannot be read is a problem"
    assert "Traceback" not in run.text
    row = next(line for line in run.out.splitlines() if line.split()[1:2] == ["course"])
    assert "00_memory/lesson.toml" in row and "missing key `title`" in row, row
