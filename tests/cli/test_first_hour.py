"""A newcomer's first hour: each command a new user typed that went wrong, run as typed.

Every failure here must be one line naming what was wrong (the file, the argument, the
lesson), with no traceback, and must run nothing it does not need to.
"""

from __future__ import annotations

import re

import pytest

from sessionlab.cli import main, runner

from .conftest import SOLUTION, STARTER, Run, run_module


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


# --- 5. watch --interval -1; watch 99 ----------------------------------------------------


@pytest.mark.parametrize("argv, said", [
    (["watch", "--interval", "-1"], "--interval: -1 is not a number of seconds above 0"),
    (["watch", "--interval", "0"], "--interval: 0 is not a number of seconds above 0"),
    (["watch", "--interval", "nan"], "--interval: nan is not a number of seconds above 0"),
    (["watch", "--interval", "1e999"], "--interval: 1e999 is not a number of seconds"),
    (["watch", "--timeout", "-3"], "--timeout: -3 is not a number of seconds above 0"),
    (["list", "--timeout", "0"], "--timeout: 0 is not a number of seconds above 0"),
    (["check", "00", "--timeout", "-1"], "--timeout: -1 is not a number of seconds above 0"),
    (["check", "--timeout", "soon"], "--timeout: 'soon' is not a number of seconds"),
])
def test_a_wait_that_is_not_above_0_seconds_is_refused_in_one_line(
        course, no_runs, capsys, argv, said):
    with pytest.raises(SystemExit) as stopped:    # argparse's way out, with its status
        main(["--course", str(course), *argv])
    assert stopped.value.code == 2
    captured = capsys.readouterr()
    one_line_error(Run(2, captured.out, captured.err), f"sessionlab {argv[0]}", said)
    assert captured.out == ""


def test_watch_interval_minus_1_as_typed(course):
    run = run_module("--course", course, "watch", "--interval", "-1")

    assert run.status == 2
    line = one_line_error(run, "sessionlab watch", "--interval", "-1",
                          "not a number of seconds above 0")
    assert line.startswith("error: ")
    assert run.out == ""


@pytest.mark.parametrize("argv", [["watch", "99"], ["check", "99"], ["hint", "99"],
                                  ["reset", "99"], ["solution", "99"], ["diff", "00", "99"],
                                  ["watch", "00_nothing"]])
def test_a_lesson_that_does_not_exist_is_named_before_anything_runs(
        cli, course, no_runs, argv):
    (course / ".sessionlab" / "results.json").unlink()   # nothing cached: a run would run

    run = cli("--course", course, *argv)

    assert run.status == 2
    one_line_error(run, f"no lesson '{argv[-1]}'", "the lessons are: 00_memory, 01_append")
    assert no_runs == []


# --- 8. the next hint's advice names a command that shows it ------------------------------


def advised_command(text: str) -> list[str]:
    found = re.findall(r"`(sessionlab hint[^`]*)`", text)
    assert found, f"no hint command advised in:\n{text}"
    return found[-1].split()[1:]


def test_watch_h_on_a_passing_lesson_advises_a_command_that_shows_the_next_hint(
        cli, course, capsys):
    from sessionlab.cli.ui import make_ui
    from sessionlab.cli.watch import Watch

    watch = Watch(make_ui(), course, "00")     # lesson 00 passes in this course
    watch.start()
    capsys.readouterr()
    watch.on_key("h")
    shown = capsys.readouterr().out
    assert "Hint 1 of" in shown and "Press h again for hint 2" in shown, shown

    advised = cli("--course", course, *advised_command(shown))

    assert advised.status == 0, advised.text
    assert "no hint needed" not in advised.out
    assert "Hint 2 of" in advised.out, advised.out


@pytest.mark.parametrize("first", [["hint", "01"], ["hint", "--task", "00.2"]])
def test_the_hint_commands_advice_shows_the_next_hint_when_followed(cli, course, first):
    shown = cli("--course", course, *first)
    assert "Hint 1 of" in shown.out, shown.text

    followed = cli("--course", course, *advised_command(shown.out))

    assert "Hint 2 of" in followed.out, followed.out
    assert followed.out.split("Task ")[1].split()[0] == shown.out.split("Task ")[1].split()[0]


# --- 2. names cut in a pipe and at 40 columns --------------------------------------------


ANSI = re.compile(r"\x1b\[[0-9;]*m")
LONG_TITLE = ("Append: save as you go, told at length so that no table of any width can "
              "hold it on one line without a very wide terminal indeed")


def test_list_and_check_in_a_pipe_print_every_name_whole(cli, course, monkeypatch):
    toml = course / "lessons" / "01_append" / "lesson.toml"
    toml.write_text(toml.read_text().replace('"Append: save as you go"', f'"{LONG_TITLE}"', 1))
    from sessionlab.course import lessons

    for columns in (None, "40"):     # a pipe, and a pipe from a shell that exports COLUMNS
        if columns:
            monkeypatch.setenv("COLUMNS", columns)
        else:
            monkeypatch.delenv("COLUMNS", raising=False)

        listed = cli("--course", course, "list")
        checked = cli("--course", course, "check", "01")

        for lesson in lessons(course):
            row = next(line for line in listed.out.splitlines()
                       if f" {lesson.number} " in line)
            assert lesson.title in row, f"{lesson.title!r} is not whole on its row: {row!r}"
            assert "not started" in row or "done" in row, row
        assert LONG_TITLE in checked.out.splitlines()[0]
        for task in next(l for l in lessons(course) if l.number == "01").tasks:
            assert any(task.title in line and task.id in line
                       for line in checked.out.splitlines()), (task.title, checked.out)
        assert "…" not in listed.out + checked.out


def test_list_and_check_at_40_columns_wrap_names_and_never_cut_them(cli, course,
                                                                    monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")    # rich: a terminal
    monkeypatch.setenv("COLUMNS", "40")
    from sessionlab.course import lessons

    listed = ANSI.sub("", cli("--course", course, "list").out)
    checked = ANSI.sub("", cli("--course", course, "check", "01").out)

    for text in (listed, checked):
        assert "…" not in text, text
        assert max(len(line) for line in text.splitlines()) <= 40, text
    words = {word for lesson in lessons(course) for word in lesson.title.split()}
    words |= {word for lesson in lessons(course) if lesson.number == "01"
              for task in lesson.tasks for word in task.title.split()}
    for word in words:
        assert word in listed + checked, f"{word!r} was cut"
    for number in ("00", "01"):
        assert re.search(rf"\b{number}\b.*\d+/\d+\s+\d+/\d+", listed), \
            f"lesson {number}'s counts stay on its first line:\n{listed}"
