"""`sessionlab demo`: every lesson plays what its code can, the output in a pipe is plain text,
and outside a copy of the course the demo still plays, with the reference the kit ships."""

from __future__ import annotations

import pytest

from sessionlab import demo

from .conftest import REPO, STARTER, run_module
from .readonly import run_read_only

EARLY = ["00_memory", "01_append", "02_load", "03_fork"]


@pytest.fixture
def early_course(course_copy):
    return course_copy({name: STARTER for name in EARLY})


def plain(text: str) -> bool:
    return not any(mark in text for mark in ("\x1b", "╭", "╰", "│", "─", "━"))


@pytest.mark.parametrize("lesson, says", [
    ("00", "lesson 00 keeps the conversation in memory only"),
    ("01", "lesson 01 only appends"),
    ("02", "the fork is skipped: lesson 02's code cannot fork"),
])
def test_an_early_lesson_plays_what_its_code_can_and_says_what_it_skips(early_course, tmp_path, lesson, says):
    run = run_module("demo", "--course", early_course, "--lesson", lesson, cwd=tmp_path)
    assert run.status == 0, run.text
    assert "Traceback" not in run.text
    assert says in run.err
    assert "Day 2" in run.out and "What did the elder tell us?" in run.out
    remembered = "Here is what we heard" in run.out
    assert remembered == (lesson == "02"), "only a lesson that reads the log back remembers day 1"
    logs = sorted(p.name for p in (tmp_path / "demo-sessions").glob("*")
                  if p.name != demo.RECORD) if lesson != "00" else []
    assert logs == ([] if lesson == "00" else ["quest.jsonl"])


def test_demo_takes_course_like_every_command_and_prints_plain_text_in_a_pipe(early_course, tmp_path):
    # The whole demo in a pipe: the fork, its files, plain text.
    run = run_module("demo", "--course", early_course, "--dir", tmp_path / "d", cwd=tmp_path)
    assert run.status == 0, run.text
    assert "A fork: back to the end of day 1" in run.out
    assert (tmp_path / "d" / "quest-guard.jsonl").is_file()
    assert plain(run.out) and plain(run.err), "no colour codes and no boxes in a pipe"
    assert "== Day 1 ==" in run.out
    shown = run_module("show", tmp_path / "d")
    assert "quest" in shown.out and "forked from quest" in shown.out

    wrong = run_module("demo", "--course", tmp_path / "nowhere", cwd=tmp_path)
    assert wrong.status == 2 and "Traceback" not in wrong.text
    assert wrong.err.splitlines()[0].startswith("error: ") and "not a course folder" in wrong.err


def test_demo_in_a_read_only_folder_names_it_in_one_line(early_course, tmp_path):
    here = tmp_path / "here"
    here.mkdir()
    run = run_read_only([here], "demo", "--course", early_course, "--dir", here / "logs", cwd=here)
    assert run.status == 1, run.text
    assert "Traceback" not in run.text
    assert run.err.splitlines()[0].startswith(f"error: cannot write the demo's logs in {here / 'logs'}: ")


@pytest.mark.campaign
def test_outside_a_copy_the_demo_plays_the_reference_the_kit_ships_and_show_finds_it(tmp_path):
    run = run_module("demo", cwd=tmp_path, env={"SESSIONLAB_ROOT": ""})
    assert run.status == 0, run.text
    assert "shipped with the kit" in run.err
    assert (tmp_path / "demo-sessions" / "quest-guard.jsonl").is_file()
    assert "get a copy: git clone" in run.out and "pip install -e ." in run.out, "the way to the lessons"

    # `show` right after `demo`: there is no ./sessions, and it says where the demo's logs are.
    shown = run_module("show", cwd=tmp_path)
    assert shown.status == 1 and "Traceback" not in shown.text
    assert shown.err.splitlines()[0] == "error: no sessions folder sessions/ here yet"
    assert "`sessionlab show --sessions demo-sessions`" in shown.err
    assert "quest-guard" in run_module("show", "--sessions", "demo-sessions", cwd=tmp_path).out


def test_outside_a_copy_a_command_says_how_to_get_one(tmp_path):
    for argv in (["list"], ["demo", "--lesson", "03"]):
        run = run_module(*argv, cwd=tmp_path, env={"SESSIONLAB_ROOT": ""})
        assert run.status == 2 and "Traceback" not in run.text
        assert "git clone" in run.err and "pip install -e ." in run.err, run.err


def test_the_shipped_reference_is_the_latest_solution_that_can_fork():
    from sessionlab import demo
    from sessionlab.demo import latest_solution_with, shipped_reference

    shipped = shipped_reference()
    latest = latest_solution_with(REPO, "fork")
    assert shipped is not None, f"the kit ships no reference under {demo.SHIPPED}"
    assert shipped.parent.name == latest.name, (
        f"the kit ships {shipped.parent.name}, the latest solution that forks is {latest.name}: "
        f"point {demo.SHIPPED}/<lesson>/*.py at solutions/{latest.name}/*.py")
    from sessionlab import course
    shipped_files = {path.name: path.read_bytes()
                     for path in course.lesson_modules(shipped.parent)}
    solution_files = {path.name: path.read_bytes()
                      for path in course.lesson_modules(latest.solution_folder)}
    assert shipped_files == solution_files, (
        f"{demo.SHIPPED}/{latest.name}/ must hold a link to every module of "
        f"solutions/{latest.name}/, and nothing else")
