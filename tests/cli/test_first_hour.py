"""A newcomer's first hour: each command a new user typed that went wrong, run as typed.

Every failure here must be one line naming what was wrong (the file, the argument, the
lesson), with no traceback, and must run nothing it does not need to.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from sessionlab.cli import main, runner

from .conftest import REPO, STARTER, Run, run_module
from .terminal import default_sigint

# The campaign (tests/conftest.py): odd inputs to every command, each in a process of its own.
pytestmark = pytest.mark.campaign


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


@pytest.mark.parametrize("argv, said", [
    (["serve", "--port", "abc"], "sessionlab serve: argument --port: invalid int"),
    (["grade", "--jobs", "many"], "sessionlab grade: argument --jobs"),
    (["show", "--no-such-option"], "unrecognized arguments: --no-such-option"),
    (["demo", "--lesson"], "sessionlab demo: argument --lesson"),
    (["chat", "--model"], "sessionlab chat: argument --model"),
    (["dev", "check", "--workers", "two"], "sessionlab dev check: argument --workers"),
    (["dev", "mutate", "--bogus"], "unrecognized arguments: --bogus"),
    (["no-such-command"], "invalid choice: 'no-such-command'"),
])
def test_a_mistyped_argument_of_any_command_is_one_line(course, no_runs, capsys, argv,
                                                         said):
    """Every command, not only list/check/watch: argparse's usage block buries what was
    wrong, so a mistake is one line naming the argument."""
    with pytest.raises(SystemExit) as stopped:
        main(["--course", str(course), *argv])
    assert stopped.value.code == 2
    captured = capsys.readouterr()
    one_line_error(Run(2, captured.out, captured.err), said)


def test_a_sessionlab_root_that_is_no_course_is_one_line(tmp_path, monkeypatch):
    """SESSIONLAB_ROOT left pointing at a folder that is gone: one line naming it."""
    gone = tmp_path / "gone"
    run = run_module("list", cwd=tmp_path, env={"SESSIONLAB_ROOT": str(gone)})

    assert run.status == 2
    assert one_line_error(Run(2, "", run.err.splitlines()[0] + "\n"),
                          "SESSIONLAB_ROOT", str(gone))


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


# --- 3. failure messages are bounded -----------------------------------------------------


CHATTY = '''    def run(self, user_text: str) -> str:
        print("chatter " * 40 + "\\n", end="")
        print("step\\n" * 20000)
        raise ValueError("dump:\\n" + "a line of the dump\\n" * 2000
                         + "x" * 20_000 + "\\nthe end")
'''


def test_check_bounds_each_failure_of_a_chatty_module(cli, course):
    module = course / "lessons" / "00_memory" / "agent.py"
    text = module.read_text()
    module.write_text(text.replace('    def run(self, user_text: str) -> str:\n', CHATTY, 1))

    run = cli("--course", course, "check", "00", "-v")

    assert run.status == 1
    failures = re.split(r"(?:First failure|Also failing): ", run.out)[1:]
    assert len(failures) > 10, run.out[:2000]
    assert len(run.out) < 20_000 * len(failures) / 10 + 20_000, f"{len(run.out)} characters"
    for failure in failures:
        lines = failure.splitlines()
        assert len(lines) < 30, f"one failure took {len(lines)} lines"
        assert "dump:" in failure and "the end" in failure, "its head and its tail are kept"
        assert re.search(r"\.\.\. \d+ lines cut; `pytest '?lessons/00_memory/test_\w+\.py::", failure)
        assert re.search(r"\.\.\. \d+ characters cut", failure), "a huge line is cut too"


def test_a_childs_output_is_held_in_bounded_memory():
    import sys

    spill = ("import sys\n"
             "for k in range(200):\n"
             "    sys.stdout.write(f'line {k} ' + 'x' * 100_000 + '\\n')\n"
             "print('the last line')\n")
    status, output = runner.run_process([sys.executable, "-c", spill], cwd=REPO,
                                        env=dict(os.environ), timeout=120)

    assert status == 0
    assert len(output) < 100_000, f"{len(output)} characters kept of 20 MB"
    assert output.startswith("line 0 ") and output.rstrip().endswith("the last line")
    assert re.search(r"\.\.\. \d+ bytes of output cut \.\.\.", output)


def test_a_process_a_run_left_behind_in_its_group_ends_with_it(tmp_path):
    # A forked child that a timed-out test gave up on would loop on, taking a core for
    # the rest of the machine's work: what the run leaves in its group goes with it
    marker = tmp_path / "child"
    leave = ("import os, sys, time\n"
             "if os.fork() == 0:\n"
             f"    open({str(marker)!r}, 'w').write(str(os.getpid()))\n"
             "    sys.stdout.close(); os.close(1)\n"
             "    time.sleep(600)\n"
             "    os._exit(0)\n"
             f"while not os.path.exists({str(marker)!r}): time.sleep(0.01)\n")
    status, _ = runner.run_process([sys.executable, "-c", leave], cwd=REPO,
                                   env=dict(os.environ), timeout=120)
    assert status == 0
    child = int(marker.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail(f"process {child}, forked by the run and left in its group, was "
                    "still running 10 s after the run ended")


# --- 4. Ctrl-C during a test run ---------------------------------------------------------


STUCK = '''    def run(self, user_text: str) -> str:
        import os, pathlib, subprocess, time
        helper = subprocess.Popen(["sleep", "600"])
        pathlib.Path({marker!r}).write_text(f"{{os.getpid()}} {{helper.pid}}")
        time.sleep(600)
'''


def gone(pid: int) -> bool:
    """No such process, or only its zombie (killed, not yet reaped by whoever adopted it)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_ctrl_c_during_a_test_run_stops_the_tests_at_once_and_exits_130(course, tmp_path):
    marker = tmp_path / "stuck.pids"
    module = course / "lessons" / "00_memory" / "agent.py"
    module.write_text(module.read_text().replace(
        '    def run(self, user_text: str) -> str:\n', STUCK.format(marker=str(marker)), 1))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("FORCE_COLOR", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "sessionlab", "--course", str(course), "check", "00",
         "--fresh", "--timeout", "600"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        preexec_fn=default_sigint)
    try:
        for _ in range(1200):                     # a guard against a hang, not a measure
            if marker.exists() and len(marker.read_text().split()) == 2:
                break
            time.sleep(0.1)
        else:
            pytest.fail("the lesson's tests never started")
        tests_pid, helper_pid = map(int, marker.read_text().split())

        process.send_signal(signal.SIGINT)        # what Ctrl-C sends
        try:
            out, err = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("Ctrl-C did not stop `sessionlab check` within 30 s")
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()

    assert process.returncode == 130
    assert err.strip().splitlines() == ["interrupted"], err
    for pid in (tests_pid, helper_pid):
        for _ in range(100):
            if gone(pid):
                break
            time.sleep(0.1)
        assert gone(pid), f"process {pid} of the test run outlived Ctrl-C"
