"""`sessionlab` / `sessionlab watch`: the student's loop.

Find the current lesson (the first whose tests do not pass), run its tests, show the tasks and
the first failure in words, and run them again whenever the lesson's agent.py is saved.

Saves are noticed by polling the file's modification time, size and inode every 0.025 s (file
event APIs are not in the standard library, and one stat call forty times a second costs
nothing); a change is acted on once the file has stopped changing for one more poll, so an
editor that writes a file in several steps triggers a single run.

The tests run in a fresh process forked from a warm one that has already imported pytest,
openai and the kit, so the result is on screen a few tenths of a second after the save; what
the tests print and report is what `pytest lessons/NN_topic` gives. When the kit itself
changes, that process is replaced, and that run is a plain one (`--cold` makes every run so).

It never moves to the next lesson on its own: a file can pass by accident halfway through an
edit, so moving on is the student's decision (the `n` key).
"""

from __future__ import annotations

import argparse
import os
import select
import sys
import time
from pathlib import Path

from rich.panel import Panel
from rich.text import Text

from .. import course
from ..course import Lesson
from . import files, progress
from ..warm import WarmPytest
from .runner import LessonResult, Runner, child_env, current_lesson
from .ui import Ui, bar

INTERVAL = 0.025    # seconds between two looks at the file (one stat() each)
KEYS = "h hint · l list · n next lesson (once this one passes) · r run again · q quit"


class Keys:
    """Single key presses from a terminal (cbreak mode); nothing at all when stdin is not one."""

    def __init__(self, stream=None) -> None:
        self.stream = stream or sys.stdin
        try:
            self.fd = self.stream.fileno()
            self.tty = os.isatty(self.fd)
        except (AttributeError, OSError, ValueError):
            self.fd, self.tty = -1, False
        self.saved = None

    def __enter__(self) -> "Keys":
        if self.tty:
            import termios
            import tty
            self.saved = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd)
        return self

    def __exit__(self, *exc_info) -> None:
        if self.saved is not None:
            import termios
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)
            self.saved = None

    def read(self, timeout: float) -> str | None:
        """The next key pressed within `timeout` seconds, or None."""
        if not self.tty:
            time.sleep(timeout)
            return None
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return None
        try:
            data = os.read(self.fd, 64)
        except OSError:
            data = b""                      # the terminal is gone (EIO after a hang-up)
        if not data:
            return "\x04"                   # the end of input: as Ctrl-D, the watch ends
        if data.startswith(b"\x1b"):
            return None                     # arrow keys and other escape sequences
        return data[:1].decode("latin-1").lower()


def stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size, info.st_ino


def stamps(folder: Path) -> tuple | None:
    """Every module of a lesson folder, stamped: a save to any of them changes it.
    None when the lesson's agent.py is gone. An editor's files (Emacs' `.#agent.py`
    lock, made as soon as the student types) are not saves."""
    if stamp(folder / course.MODULE) is None:
        return None
    return tuple((path.name, stamp(path)) for path in files.entries(folder)
                 if path.suffix == ".py" and not path.name.startswith("test_"))


class Watch:
    def __init__(self, ui: Ui, root: Path, ref: str | None, *, interval: float = INTERVAL,
                 timeout: float | None = None, warm: bool = True) -> None:
        self.ui = ui
        self.root = root
        self.interval = interval
        self.lessons = course.lessons(root)
        self.runner = Runner(root, timeout=timeout or 60.0,
                             warm=WarmPytest(root, child_env(root)) if warm else None)
        self.ref = ref
        self.results: dict[str, LessonResult] = {}
        # A lesson that does not exist is said before any test runs, not after all of them.
        self.lesson: Lesson | None = None if ref is None else course.lesson(ref, root)
        self.message: Text | None = None
        self.keys_live = True        # False when stdin is no terminal: the keys line says so

    # the loop ------------------------------------------------------------------------

    def start(self) -> None:
        self.results = progress.run_lessons(self.ui, self.runner, self.lessons)
        if self.lesson is None:
            self.lesson = current_lesson(self.lessons, self.results) or self.lessons[-1]
        if self.runner.warm is not None:
            # Started after the first results, not beside them: on two cores its imports
            # would slow those runs down. It is ready long before the student's first save.
            self.runner.warm.start()

    def close(self) -> None:
        if self.runner.warm is not None:
            self.runner.warm.shutdown()

    def loop(self, keys: Keys) -> int:
        self.keys_live = getattr(keys, "tty", True)     # FakeKeys in tests: live
        self.render()
        path = self.lesson.folder
        seen = stamps(path)
        pending = False
        while True:
            key = keys.read(self.interval)
            if key is not None:
                if key in ("q", "\x04"):
                    self.ui.out.print("Bye. Your progress is in your files; `sessionlab` picks it up again.")
                    return 0
                self.on_key(key)
                if self.lesson.folder != path:      # moved on with `n`
                    path = self.lesson.folder
                    seen, pending = stamps(path), False
                continue
            now = stamps(path)
            if now != seen:
                seen, pending = now, True                   # changed: wait until it settles
            elif pending and now is not None:
                pending = False
                self.rerun()

    def rerun(self) -> None:
        self.message = None
        self.results.update(progress.run_lessons(self.ui, self.runner, [self.lesson]))
        self.render()

    def on_key(self, key: str) -> None:
        if key == "h":
            result = self.results[self.lesson.name]
            task_id = result.first_failing_task(self.lesson) or (self.lesson.tasks[-1].id if self.lesson.tasks else None)
            if task_id is None:
                self.ui.out.print("This lesson has no tasks to hint at.")
                return
            self.ui.out.print()
            self.ui.out.print(progress.show_hint(self.ui, self.root, self.lesson,
                                                 self.lesson.task(task_id), key="h"))
        elif key == "l":
            self.ui.out.print()
            self.ui.out.print(progress.lesson_rows(self.ui, self.lessons, self.results, self.lesson))
        elif key == "n":
            self.next_lesson()
        elif key == "r":
            self.results.update(progress.run_lessons(self.ui, self.runner, [self.lesson], fresh=True))
            self.message = None
            self.render()
        elif key in ("?", "\n", " "):
            self.ui.out.print(Text("keys: " + KEYS, style="dim"))

    def next_lesson(self) -> None:
        result = self.results[self.lesson.name]
        if not result.passed:
            self.ui.out.print(Text(f"Lesson {self.lesson.number} does not pass yet "
                                   f"({result.passed_count}/{result.total} tests): `n` moves on once it does.",
                                   style="yellow"))
            return
        index = self.lessons.index(self.lesson)
        if index + 1 >= len(self.lessons):
            self.ui.out.print(Text("That was the last lesson: the course is done.", style="bold green"))
            return
        self.lesson = self.lessons[index + 1]
        self.message = None
        self.rerun()

    # the screen ------------------------------------------------------------------------

    def render(self) -> None:
        out = self.ui.out
        if out.is_terminal:
            out.clear()
        result = self.results[self.lesson.name]
        out.print(Text("Session Lab  ", style="bold magenta") + bar(progress.states(self.lessons, self.results), self.ui))
        out.print()
        out.print(progress.lesson_report(self.ui, self.lesson, result))
        if result.passed:
            index = self.lessons.index(self.lesson)
            then = (f"Press n to move on to lesson {self.lessons[index + 1].number} when you are ready."
                    if index + 1 < len(self.lessons) else "That was the last lesson: the course is done.")
            out.print(Panel(Text(f"Lesson {self.lesson.number} passes. {then}", style="bold green"),
                            box=self.ui.box, expand=False))
        if self.message is not None:
            out.print(self.message)
        out.print()
        if self.keys_live:
            out.print(Text(f"keys: {KEYS}", style="dim"))
        else:
            out.print(Text("no keys: standard input is not a terminal (closed or redirected); "
                           "Ctrl-C stops the watch", style="dim"))
        out.print(Text(f"watching lessons/{self.lesson.name}/*.py for saves "
                       f"(checked every {self.interval:g} s)", style="dim"))


def cmd_watch(args: argparse.Namespace, ui: Ui, root: Path) -> int:
    watch = Watch(ui, root, args.lesson, interval=args.interval, timeout=args.timeout,
                  warm=not getattr(args, "cold", False))
    try:
        watch.start()
        with Keys() as keys:
            return watch.loop(keys)
    finally:
        watch.close()


def cmd_default(args: argparse.Namespace, ui: Ui, root: Path) -> int:
    """`sessionlab` alone: watch in a terminal; elsewhere (a pipe, CI) show the status once."""
    if sys.stdin.isatty() and ui.out.is_terminal:
        args.lesson, args.interval, args.timeout, args.cold = None, INTERVAL, None, False
        return cmd_watch(args, ui, root)
    lessons = course.lessons(root)
    results = progress.run_lessons(ui, Runner(root), lessons)
    lesson = current_lesson(lessons, results)
    ui.out.print(bar(progress.states(lessons, results), ui))
    if lesson is None:
        ui.out.print(Text("Every lesson passes. Well done.", style="bold green"))
    else:
        ui.out.print(progress.lesson_report(ui, lesson, results[lesson.name]))
    ui.note("(not a terminal: shown once; run `sessionlab watch` in a terminal to re-run on every save)")
    return 0


def register(commands, common: argparse.ArgumentParser) -> None:
    p = commands.add(
        "watch", cmd_watch, "student",
        "the current lesson's tests, re-run on every save (the default command)", parents=[common],
        description=__doc__.split("\n\n", 1)[1])
    p.add_argument("lesson", nargs="?", metavar="NN", help="watch this lesson (default: the first one not passing)")
    p.add_argument("--interval", type=progress.interval, default=INTERVAL, metavar="SECONDS",
                   help=f"how often to look at the file (default {INTERVAL})")
    p.add_argument("--timeout", type=progress.seconds, default=None, metavar="SECONDS",
                   help="give up on a test run after this long (default 60)")
    p.add_argument("--cold", action="store_true",
                   help="run every time in a new Python process, as `pytest lessons/NN_topic` "
                        "does, instead of one forked from a warm process (about a second "
                        "slower a run)")
