"""`sessionlab` / `sessionlab watch`, in a real terminal (pexpect gives it a pty)."""

from __future__ import annotations

import os
import shutil
import sys

import pexpect
import pytest

from sessionlab import course as sessionlab_course, starters
from sessionlab.cli import watch as watch_module
from sessionlab.cli.ui import make_ui

from .conftest import REPO, run_module

# The campaign (tests/conftest.py): the watch in a pseudo-terminal, saves and keys.
pytestmark = pytest.mark.campaign

EXPECT = 90   # a guard against a hang, not a measurement: a pass takes a few seconds


def spawn(course, *args):
    env = {**os.environ, "COLUMNS": "110", "LINES": "50", "TERM": "xterm"}
    env.pop("NO_COLOR", None)
    child = pexpect.spawn(sys.executable, ["-m", "sessionlab", "--course", str(course), "watch", *args],
                          env=env, encoding="utf-8", timeout=EXPECT, dimensions=(50, 110))
    return child


@pytest.fixture
def starting(course):
    """The prepared course with lesson 00 back to its starter: the student is on lesson 00."""
    lesson = sessionlab_course.lesson("00", course)
    for name, starter in starters.expected_starters(lesson).items():
        (course / "lessons" / "00_memory" / name).write_text(starter, encoding="utf-8")
    return course


def test_watch_runs_on_save_never_moves_on_alone_and_obeys_its_keys(starting):
    child = spawn(starting)
    try:
        child.expect("Lesson 00")
        child.expect("First failure:")
        child.expect("watching lessons/00_memory/")

        child.send("n")     # not passing: refused
        child.expect("does not pass yet")

        child.send("h")
        child.expect("Hint 1 of")

        # The student finishes the lesson and saves: the tests run again by themselves.
        for path in sessionlab_course.lesson_modules(REPO / "solutions" / "00_memory"):
            shutil.copy2(path, starting / "lessons" / "00_memory" / path.name)
        child.expect(r"(\d+)/\1 tests pass")
        child.expect("Press n to move on to lesson 01")
        child.expect("watching lessons/00_memory/")

        # Still on lesson 00: the list marks it as the one being watched.
        child.send("l")
        child.expect(r"→ +│ 00")

        child.send("n")
        child.expect("Lesson 01")
        child.expect("watching lessons/01_append/")

        child.send("q")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0


def test_sessionlab_alone_in_a_terminal_watches_the_current_lesson(course):
    env = {**os.environ, "COLUMNS": "110", "TERM": "xterm"}
    child = pexpect.spawn(sys.executable, ["-m", "sessionlab", "--course", str(course)], env=env,
                          encoding="utf-8", timeout=EXPECT, dimensions=(50, 110))
    try:
        child.expect("Lesson 01")
        child.expect("watching lessons/01_append/")
        child.send("q")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0


def test_sessionlab_alone_outside_a_terminal_shows_the_status_once(course):
    run = run_module("--course", course)
    assert run.status == 0, run.text
    assert "Lesson 01" in run.out and "First failure:" in run.out
    assert "not a terminal" in run.err


class FakeKeys:
    """Keys for Watch.loop: each read() runs the next step (which may edit the file) and returns a key."""

    def __init__(self, steps):
        self.steps = list(steps)

    def read(self, timeout):
        step = self.steps.pop(0)
        return step() if callable(step) else step


def test_a_save_in_several_steps_runs_the_tests_once_after_the_file_settles(course, monkeypatch):
    watch = watch_module.Watch(make_ui(), course, "00")
    watch.lesson = next(l for l in watch.lessons if l.number == "00")
    runs = []
    monkeypatch.setattr(watch, "render", lambda: None)
    monkeypatch.setattr(watch, "rerun", lambda: runs.append(watch.lesson.name))
    module = course / "lessons" / "00_memory" / "agent.py"
    text = module.read_text()

    def write(content):
        def step():
            module.write_text(content)
            os.utime(module, ns=(os.stat(module).st_atime_ns, os.stat(module).st_mtime_ns + 10_000_000))
            return None
        return step

    status = watch.loop(FakeKeys([
        None,                        # nothing happens
        write(text[:100]),           # the editor writes half the file ...
        write(text + "\n# more\n"),  # ... and the rest: still changing, so no run yet
        None,                        # unchanged for one poll: now it runs, once
        None,
        "q",
    ]))

    assert status == 0
    assert runs == ["00_memory"], f"one run after the file settled, got {runs}"


def test_the_help_says_how_saves_are_noticed():
    run = run_module("watch", "--help")
    assert "polling" in run.out and f"{watch_module.INTERVAL:g} s" in run.out
    assert "--cold" in run.out and "warm" in run.out, "how runs are made fast, and the way out"
    assert "never" in run.out.lower() and "next lesson" in run.out.lower()
