"""The student's commands: list, check, hint, reset, solution, diff (and the runner underneath)."""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys

import pytest

from sessionlab import starters
from sessionlab.cli import runner
from sessionlab.course import lessons

from .conftest import run_module


def test_list_shows_every_lesson_with_its_state_and_task_counts(cli, course):
    run = cli("--course", course, "list")

    assert run.status == 0, run.text
    lines = run.out.splitlines()
    row00 = next(line for line in lines if " 00 " in line)
    row01 = next(line for line in lines if " 01 " in line)
    tasks = len(next(l for l in lessons(course) if l.number == "00").tasks)
    assert "done" in row00 and f"{tasks}/{tasks}" in row00, row00
    assert re.search(r"\b(\d+)/\1\s*$", row00), f"every test of lesson 00 passes: {row00}"
    assert "not started" in row01 and "0/5" in row01, row01
    assert row01.lstrip().startswith("->"), f"the current lesson (01) should be marked: {row01!r}"
    assert "1/2 lessons done" in run.out, "a progress bar over all lessons"
    assert "Next: lesson 01" in run.out


def test_results_are_cached_until_a_file_of_the_lesson_changes(cli, course, monkeypatch):
    assert cli("--course", course, "list").status == 0
    cache = json.loads((course / ".sessionlab" / "results.json").read_text())
    assert {"lesson:00_memory", "lesson:01_append"} <= set(cache["entries"])

    calls = []
    real = runner.run_pytest

    def counting(root, lessons_, **options):
        calls.append([lesson.name for lesson in lessons_])
        return real(root, lessons_, **options)

    monkeypatch.setattr(runner, "run_pytest", counting)
    assert "1/2 lessons done" in cli("--course", course, "list").out
    assert calls == [], "nothing changed, so nothing should run again"

    module = course / "lessons" / "00_memory" / "agent.py"
    module.write_text(module.read_text() + "\n# thinking...\n")
    cli("--course", course, "list")
    assert calls == [["00_memory"]], f"only the edited lesson runs again, ran {calls}"


def test_check_exits_0_only_when_the_lesson_passes(cli, course):
    done = cli("--course", course, "check", "00")
    assert done.status == 0, done.text
    assert re.search(r"\b(\d+)/\1 tests pass", done.out) and "lesson done" in done.out

    todo = cli("--course", course, "check", "01")
    assert todo.status == 1
    assert "First failure:" in todo.out
    assert "not written yet" in todo.out, "a task not written yet is said in words"
    assert "Traceback" not in todo.text

    reference = cli("--course", course, "check", "00", "--solution")
    assert reference.status == 0, reference.text


def test_check_without_a_lesson_checks_the_current_one(cli, course):
    run = cli("--course", course, "check")
    assert run.status == 1
    assert "Lesson 01" in run.out


def test_the_first_failure_is_an_assertion_message_in_plain_words(cli, course):
    module = course / "lessons" / "00_memory" / "agent.py"
    # A plausible mistake: answering the tool calls in the wrong order.
    text = module.read_text()
    wrong = text.replace("            for call, asked in zip(calls, reply[\"tool_calls\"]):\n",
                         "            for call, asked in zip(calls[::-1], reply[\"tool_calls\"][::-1]):\n")
    assert wrong != text
    module.write_text(wrong)

    run = cli("--course", course, "check", "00", "-v")

    assert run.status == 1
    assert "First failure:" in run.out
    assert "in the order of the calls" in run.out.replace("\n", " ")


def test_a_module_that_does_not_even_import_is_reported_not_crashed_on(cli, course):
    (course / "lessons" / "00_memory" / "agent.py").write_text("def broken(:\n")

    run = cli("--course", course, "check", "00")

    assert run.status == 1
    assert "SyntaxError" in run.out


def test_tests_that_cannot_be_collected_are_an_error_not_a_pass(cli, course):
    (course / "lessons" / "00_memory" / "test_broken.py").write_text("import a_module_that_does_not_exist\n")

    run = cli("--course", course, "check", "00")

    assert run.status == 1
    assert "could not be collected" in run.out


@pytest.mark.campaign
def test_an_endless_loop_is_stopped_by_the_timeout(cli, course):
    module = course / "lessons" / "00_memory" / "agent.py"
    module.write_text(module.read_text().replace('    def run(self, user_text: str) -> str:\n',
                                                 '    def run(self, user_text: str) -> str:\n        while True: pass\n', 1))

    run = cli("--course", course, "check", "00", "--timeout", "2")

    assert run.status == 1
    assert "timed out" in run.out


def test_hints_come_one_level_at_a_time_and_are_remembered(cli, course):
    task = next(l for l in lessons(course) if l.number == "01").tasks[0]

    first = cli("--course", course, "hint")
    assert first.status == 0
    assert f"Task {task.id}" in first.out
    assert "Hint 1 of" in first.out and "Hint 2 of" not in first.out

    second = cli("--course", course, "hint", "01")
    assert "Hint 2 of" in second.out, "the second call shows the next level"

    again = cli("--course", course, "hint", "01", "--level", "1")
    assert "Hint 1 of" in again.out and "Hint 2 of" not in again.out

    last = cli("--course", course, "hint", "01", "--level", str(len(task.hints)))
    assert "That was the last hint" in last.out


def test_a_passing_lesson_needs_no_hint_but_a_task_can_be_asked_for(cli, course):
    run = cli("--course", course, "hint", "00")
    assert "no hint needed" in run.out
    run = cli("--course", course, "hint", "--task", "00.2")
    assert "Task 00.2" in run.out and "Hint 1 of" in run.out


def test_reset_restores_the_starter_and_keeps_a_backup(cli, course):
    module = course / "lessons" / "00_memory" / "agent.py"
    mine = module.read_text() + "\n# my notes\n"
    module.write_text(mine)

    run = cli("--course", course, "reset", "00")

    assert run.status == 0, run.text
    lesson = next(l for l in lessons(course) if l.number == "00")
    assert module.read_text() == starters.expected_starter(lesson)
    backups = list((course / ".sessionlab" / "backups" / "00_memory").glob("agent-*.py"))
    assert len(backups) == 1 and backups[0].read_text() == mine
    assert str(backups[0].relative_to(course)) in run.out, "the student is told where the backup is"

    kept = sorted(backups[0].parent.iterdir())
    again = cli("--course", course, "reset", "00")
    assert "already the starter" in again.out
    assert sorted(backups[0].parent.iterdir()) == kept, "nothing to back up the second time"


def test_the_solution_is_refused_until_the_lesson_passes(cli, course):
    refused = cli("--course", course, "solution", "01")
    assert refused.status == 1
    assert "does not pass yet" in refused.err and "--force" in refused.err
    assert "def append" not in refused.out

    forced = cli("--course", course, "solution", "01", "--force")
    assert forced.status == 0
    assert "--- lessons/01_append/log.py" in forced.out and "+++ solutions/01_append/log.py" in forced.out
    assert any(line.startswith("-") and "NotImplementedError" in line for line in forced.out.splitlines())
    assert "# BEGIN" not in forced.out, "the reference is shown without its task fences"


def test_the_solution_of_a_passing_lesson_is_shown_as_a_diff(cli, course):
    module = course / "lessons" / "00_memory" / "agent.py"
    module.write_text(starters.strip_markers(module.read_text()) + "\n# written on day 3\n")

    run = cli("--course", course, "solution", "00")

    assert run.status == 0, run.text
    assert "+++ solutions/00_memory/agent.py" in run.out
    assert "-# written on day 3" in run.out


def test_diff_shows_what_grew_between_two_lessons(cli, course):
    run = cli("--course", course, "diff", "00", "01")
    assert run.status == 0
    added = [line for line in run.out.splitlines() if line.startswith("+")]
    assert any("class SessionLog" in line for line in added)
    assert not any(line.startswith("+") and "# BEGIN" in line for line in run.out.splitlines())

    starter = cli("--course", course, "diff", "00", "01", "--starter")
    assert any("NotImplementedError" in line for line in starter.out.splitlines() if line.startswith("+"))


def test_output_in_a_pipe_is_plain_text(course):
    cli_run = run_module("list", "--course", course)
    assert cli_run.status == 0, cli_run.text
    assert "\x1b[" not in cli_run.out, "no colour codes when stdout is not a terminal"
    assert "done" in cli_run.out


def test_colours_and_marks_in_a_terminal(course):
    env = {**os.environ, "FORCE_COLOR": "1", "COLUMNS": "100"}   # rich treats FORCE_COLOR as a terminal
    process = subprocess.run([sys.executable, "-m", "sessionlab", "check", "00", "--course", str(course)],
                             env=env, capture_output=True, text=True)
    assert process.returncode == 0, process.stderr
    assert "\x1b[" in process.stdout and "✓" in process.stdout


def test_no_course_here_is_one_clear_line(tmp_path):
    run = run_module("list", cwd=tmp_path, env={"SESSIONLAB_ROOT": ""})
    assert run.status == 2
    assert "no course found" in run.err and "Traceback" not in run.err


def test_an_unknown_lesson_names_the_ones_there_are(cli, course):
    run = cli("--course", course, "check", "42")
    assert run.status == 2
    assert "00_memory" in run.err and "01_append" in run.err


@pytest.mark.campaign
def test_a_lesson_that_hangs_does_not_hide_the_results_of_the_others(course, monkeypatch):
    module = course / "lessons" / "00_memory" / "agent.py"
    module.write_text(module.read_text().replace('    def run(self, user_text: str) -> str:\n',
                                                 '    def run(self, user_text: str) -> str:\n        while True: pass\n', 1))
    real = runner.run_pytest
    runs = []

    def run_pytest(root, lessons_, **options):
        names = [lesson.name for lesson in lessons_]
        runs.append(names)
        if names == ["01_append"]:
            options["timeout"] = 120    # lesson 01 alone never hangs: give it time on a busy machine
        return real(root, lessons_, **options)

    monkeypatch.setattr(runner, "run_pytest", run_pytest)
    results = runner.Runner(course, timeout=2, jobs=1).run(lessons(course), fresh=True)

    assert runs == [["00_memory", "01_append"], ["00_memory"], ["01_append"]], runs
    assert "timed out" in (results["00_memory"].error or "")
    assert results["01_append"].error is None and results["01_append"].total > 0
    assert results["01_append"].state == "not started"


def test_a_task_whose_tests_wait_for_a_later_one_says_so(cli, course):
    """With task 00.1 written and 00.2 not, some of 00.1's tests play a conversation
    and stop at the loop: its row says how many wait for 00.2, so that a finished task
    is not taken for a broken one; a task not written yet says nothing of the kind."""
    from sessionlab import course as course_module
    lesson = course_module.lesson("00", course)
    for path in course_module.lesson_modules(lesson.solution_folder):
        text = starters.make_starter(path.read_text(encoding="utf-8"), lesson,
                                     written=["00.1"])
        (lesson.folder / path.name).write_text(text, encoding="utf-8")

    run = cli("--course", course, "check", "00")

    rows = {line.split()[1]: line for line in run.out.splitlines()
            if re.match(r"\S+\s+00\.\d\s", line)}
    assert re.search(r"\d+/\d+ · \d+ wait for 00\.2", rows["00.1"]), run.out
    assert "wait for" not in rows["00.3"], run.out
    # Each failure listed says which task it waits for, whatever its own marks are
    listed = cli("--course", course, "check", "00", "-v").out.splitlines()
    waiting = [(line, listed[number + 1]) for number, line in enumerate(listed[:-1])
               if "task 00.2 is not written yet" in listed[number + 1]
               and line.startswith(("First failure:", "Also failing:"))]
    assert waiting, "\n".join(listed)
    for line, _ in waiting:
        assert re.search(r"\(task [^)]*00\.2[^)]*\)$", line), line
