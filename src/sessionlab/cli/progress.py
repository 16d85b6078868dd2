"""The student's progress: list and check, and what other commands share with them
(running lessons, the hint text, the diff printer)."""

from __future__ import annotations

import argparse
import difflib
from pathlib import Path

from rich.console import Group
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from .. import course, starters
from ..course import Lesson
from .runner import LessonResult, Outcome, Runner, current_lesson, load_state, save_state
from .ui import LEGEND, Ui, bar, human

HINTS_FILE = "hints.json"


# --- shared by several commands --------------------------------------------------------------


MAX_SECONDS = 86400.0     # a day: beyond it time.sleep and select overflow, and no run needs it


def seconds(text: str) -> float:
    """An argparse type: a number of seconds above 0 (a wait of 0 or less, or of nan,
    would spin, time out at once, or crash deep inside the loop that uses it)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= MAX_SECONDS:     # also false for nan
        raise argparse.ArgumentTypeError(
            f"{text} is not a number of seconds above 0 (and at most {MAX_SECONDS:g})")
    return value


def count(text: str) -> int:
    """An argparse type: a whole number of 1 or more (a limit of 0 turns, or of fewer,
    could never let the agent answer)."""
    value = text.strip()
    if not (value.lstrip("-").isascii() and value.lstrip("-").isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    if int(value) < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a whole number of 1 or more")
    return int(value)


MIN_INTERVAL = 0.01       # seconds: a look at a file more often is a busy loop


def interval(text: str) -> float:
    """An argparse type: seconds between two looks at a file, MIN_INTERVAL or more."""
    value = seconds(text)
    if value < MIN_INTERVAL:
        raise argparse.ArgumentTypeError(
            f"{value:g} is below {MIN_INTERVAL:g} s (a shorter wait is a busy loop that "
            "takes a core)")
    return value


def add_run_options(parser: argparse.ArgumentParser, solution: bool = True) -> None:
    if solution:
        parser.add_argument("--solution", action="store_true",
                            help="run against the reference in solutions/ instead of your lessons/")
    parser.add_argument("--fresh", action="store_true",
                        help="run the tests again even if nothing changed since the last run")
    parser.add_argument("--timeout", type=seconds, default=None, metavar="SECONDS",
                        help="give up on a lesson's tests after this long (default 120)")


def runner_for(args: argparse.Namespace, root: Path) -> Runner:
    options = {}
    if getattr(args, "timeout", None):
        options["timeout"] = args.timeout
    return Runner(root, side="solution" if getattr(args, "solution", False) else "lesson", **options)


def run_lessons(ui: Ui, runner: Runner, lessons: list[Lesson], *, fresh: bool = False) -> dict[str, LessonResult]:
    """Results for the lessons, with a spinner in a terminal while tests run."""
    status = None

    def started(todo: list[Lesson]) -> None:
        nonlocal status
        if ui.out.is_terminal:
            which = ", ".join(lesson.number for lesson in todo)
            status = ui.out.status(f"running the tests of lesson{'s' if len(todo) > 1 else ''} {which} …")
            status.start()

    try:
        return runner.run(lessons, fresh=fresh, on_start=started)
    finally:
        if status is not None:
            status.stop()


def pick_lesson(ref: str | None, root: Path, ui: Ui, runner: Runner, *, fresh: bool = False) -> tuple[Lesson, dict[str, LessonResult]]:
    """The lesson named by `ref`, or the current one (the first not passing) with every result."""
    all_lessons = course.lessons(root)
    if ref is not None:
        lesson = course.lesson(ref, root)
        return lesson, run_lessons(ui, runner, [lesson], fresh=fresh)
    results = run_lessons(ui, runner, all_lessons, fresh=fresh)
    return current_lesson(all_lessons, results) or all_lessons[-1], results


def lesson_heading(lesson: Lesson, side: str = "lesson") -> Text:
    text = Text(f"Lesson {lesson.number} · ", style="bold")
    text.append(lesson.title, style="bold cyan")
    folder = "solutions" if side == "solution" else "lessons"
    text.append(f"   {folder}/{lesson.name}/", style="dim")
    return text


def waiting_for(task_id: str, tests: list[Outcome]) -> dict[str, int]:
    """Later task -> how many of `tests` (those of task `task_id`) fail only because it
    is not written yet."""
    waits: dict[str, int] = {}
    for test in tests:
        if not test.passed and test.waits_for not in (None, task_id):
            waits[test.waits_for] = waits.get(test.waits_for, 0) + 1
    return waits


def lesson_report(ui: Ui, lesson: Lesson, result: LessonResult, *, every_failure: bool = False) -> Group:
    """What a student needs to see about one lesson: tasks, counts, the first failure in words."""
    parts: list = [lesson_heading(lesson, result.side)]
    tasks = ui.grid(padding=(0, 1))
    for wraps in (False, False, True, False):      # only the title wraps in a narrow terminal
        tasks.add_column(no_wrap=not wraps)
    for task in lesson.tasks:
        state = result.task_state(task.id)
        tests = result.task_tests(task.id)
        count = f"{sum(t.passed for t in tests)}/{len(tests)}" if tests else "-"
        if state != "todo" and (waits := waiting_for(task.id, tests)):
            # A task that is done but whose tests also play a later one: say what they
            # wait for, or the student takes a finished task for a broken one
            count += " · " + ", ".join(f"{n} wait for {later}"
                                       for later, n in waits.items())
        tasks.add_row(ui.mark(state), Text(task.id, style="bold"), Text(task.title),
                      Text(count, style="dim"))
    parts.append(tasks)
    if result.error is not None:
        parts.append(Text(f"Could not judge this lesson: {result.error}", style="bold red"))
        if result.output:
            parts.append(Text(result.output, style="dim"))
        return Group(*parts)
    summary = Text(f"{result.passed_count}/{result.total} tests pass", style="bold green" if result.passed else "bold")
    if result.passed:
        summary.append(" · lesson done", style="green")
    else:       # the same words as `list` and watch's bar, from the same rule
        summary.append(" · not started: no task is written yet" if result.state == "not started"
                       else f" · {result.state}", style="dim")
    parts.append(summary)
    failures = [t for t in result.tests if not t.passed and t.outcome != "skipped"]
    first = result.first_failure(lesson)
    shown = ([first] + [t for t in failures if t is not first]) if every_failure and first else ([first] if first else [])
    for i, test in enumerate(shown):
        label = "First failure: " if i == 0 else "Also failing: "
        line = Text(label, style="bold red" if i == 0 else "red")
        line.append(human(test.name), style="bold")
        if test.tasks:
            # A test of a written task that stops at a later one says so here too: its
            # marks alone would read as a fault of the written task
            waits = test.waits_for
            waiting = f"; waits for {waits}" if waits and waits not in test.tasks else ""
            line.append(f"  (task {', '.join(test.tasks)}{waiting})", style="dim")
        parts.append(line)
        message = (test.message or test.exception or "failed").strip()
        if test.exception and test.exception not in ("AssertionError", "NotImplementedError", "Failed"):
            message = f"{test.exception}: {message}"
        parts.append(Text("  " + message.replace("\n", "\n  ")))
    if first is not None:
        switch = " --solution" if result.side == "solution" else ""
        parts.append(Text(f"Full output: pytest lessons/{lesson.name}{switch}", style="dim"))
    return Group(*parts)


def lesson_rows(ui: Ui, lessons: list[Lesson], results: dict[str, LessonResult], current: Lesson | None) -> Table:
    table = ui.table()
    # Short columns never wrap, so that in a narrow terminal the room goes to the title
    # (which wraps, whole words first, and is never cut).
    # In a tight terminal every cell counts: the arrow is one cell wide there, and a
    # title may wrap one column sooner, so that counts of three digits (a lesson of a
    # hundred tests) still fit in 30 columns.
    table.add_column("", width=1 if ui.tight else 2, no_wrap=True)
    table.add_column("#", no_wrap=True)
    table.add_column("Lesson", min_width=9 if ui.tight else 10)
    table.add_column("" if ui.tight else "State", min_width=1 if ui.tight else 7)
    table.add_column("Tasks", justify="right", no_wrap=True)
    table.add_column("Tests", justify="right", no_wrap=True)
    for lesson in lessons:
        result = results[lesson.name]
        done_tasks = sum(result.task_state(t.id) == "passed" for t in lesson.tasks)
        here = current is not None and lesson.name == current.name
        table.add_row("->" if here and ui.plain else ("→" if here else ""), lesson.number,
                      Text(lesson.title, style="bold" if here else ""), ui.mark(result.state),
                      f"{done_tasks}/{len(lesson.tasks)}",
                      "-" if result.error else f"{result.passed_count}/{result.total}")
    return table


def states(lessons: list[Lesson], results: dict[str, LessonResult]) -> list[str]:
    return [results[lesson.name].state for lesson in lessons]


# --- list ------------------------------------------------------------------------------------


def cmd_list(args: argparse.Namespace, ui: Ui, root: Path) -> int:
    lessons = course.lessons(root)
    runner = runner_for(args, root)
    results = run_lessons(ui, runner, lessons, fresh=args.fresh)
    current = current_lesson(lessons, results)
    ui.out.print(bar(states(lessons, results), ui))
    ui.out.print(lesson_rows(ui, lessons, results, current))
    if ui.tight:
        ui.out.print(Text(LEGEND, style="dim"))
    if current is None:
        ui.out.print(Text("Every lesson passes. Well done.", style="bold green"))
    else:
        ui.out.print(Text(f"Next: lesson {current.number} ({current.name}). "
                          f"Run `sessionlab` to work on it, `sessionlab hint` when stuck.", style="dim"))
    return 0


# --- check -----------------------------------------------------------------------------------


def cmd_check(args: argparse.Namespace, ui: Ui, root: Path) -> int:
    runner = runner_for(args, root)
    lesson, results = pick_lesson(args.lesson, root, ui, runner, fresh=args.fresh)
    result = results[lesson.name]
    ui.out.print(lesson_report(ui, lesson, result, every_failure=args.verbose))
    return 0 if result.passed else 1


# --- hints: shown by `hint` (study.py) and by watch's h key -----------------------------


def hints_problem(data: dict) -> str | None:
    """What makes a table no hints file: `seen` maps task ids to the levels shown."""
    seen = data.get("seen", {})
    if not isinstance(seen, dict):
        return "a table whose `seen` is not a table of tasks"
    if not all(isinstance(level, int) and not isinstance(level, bool) and level >= 0
               for level in seen.values()):
        return "a table whose `seen` holds a level that is not a whole number"
    return None


def next_hint_advice(task: course.Task, level: int, *, key: str | None = None) -> str:
    """How to see hint `level` of `task`. It names the task, never only the lesson:
    `sessionlab hint NN` follows the first failing task, which may be another task by
    then, or none at all once the lesson passes ("no hint needed")."""
    command = f"`sessionlab hint --task {task.id} --level {level}`"
    if key:
        return f"Press {key} again for hint {level} (or run {command})."
    return f"{command} shows hint {level}."


def task_heading(task: course.Task) -> Text:
    """`Task 03.1 · its title   in where it is written`: how hint and task name a task."""
    return Text.assemble(("Task ", "bold"), (task.id, "bold"), " · ", (task.title, "bold cyan"),
                         (f"   in {task.where}" if task.where else "", "dim"))


def show_hint(ui: Ui, root: Path, lesson: Lesson, task: course.Task, level: int | None = None,
              *, key: str | None = None) -> Group:
    """The task and its hints up to `level` (default: one more than last time); `key` is
    the key that shows the next one where there is one (watch's `h`)."""
    state = load_state(root, HINTS_FILE, hints_problem)
    seen = state.setdefault("seen", {})
    total = len(task.hints)
    if level is None:
        level = min(seen.get(task.id, 0) + 1, total)
    level = max(1, min(level, total)) if total else 0
    seen[task.id] = max(seen.get(task.id, 0), level)
    save_state(root, HINTS_FILE, state)
    parts: list = [task_heading(task)]
    if task.description:
        parts.append(Text(task.description))
    if not total:
        parts.append(Text("This task has no hints; the lesson's page explains it.", style="dim"))
        return Group(*parts)
    for k in range(1, level + 1):
        newest = k == level
        parts.append(Text(f"Hint {k} of {total}: ", style="bold yellow" if newest else "dim")
                     + Text(task.hints[k - 1], style="" if newest else "dim"))
    if level < total:
        parts.append(Text(next_hint_advice(task, level + 1, key=key), style="dim"))
    else:
        parts.append(Text(f"That was the last hint. Once the lesson passes, `sessionlab solution {lesson.number}` "
                          "shows the reference beside your code.", style="dim"))
    return Group(*parts)


# --- shared with solution and diff (study.py) ----------------------------------------------


def reference_texts(lesson: Lesson) -> dict[str, str]:
    """The reference solution as a reader sees it: each module, without its fences and
    its generated-from header."""
    return {path.name: starters.strip_markers(path.read_text(encoding="utf-8"))
            for path in course.lesson_modules(lesson.solution_folder)}


def print_diffs(ui: Ui, old: dict[str, str], new: dict[str, str], old_folder: str,
                new_folder: str) -> bool:
    """One diff a module, for every module either side has (the course's order); a
    module only one side has is diffed against nothing. False when nothing differs."""
    differs = False
    for name in sorted(old.keys() | new.keys(), key=course.module_rank):
        old_name = f"{old_folder}/{name}" if name in old else "/dev/null"
        new_name = f"{new_folder}/{name}" if name in new else "/dev/null"
        differs |= print_diff(ui, old.get(name, ""), new.get(name, ""), old_name,
                              new_name)
    return differs


def print_diff(ui: Ui, old: str, new: str, old_name: str, new_name: str) -> bool:
    lines = list(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                      old_name, new_name))
    if not lines:
        return False
    text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    if ui.plain:
        ui.out.print(text, end="", markup=False, highlight=False, soft_wrap=True)
    else:
        ui.out.print(Syntax(text, "diff", theme="ansi_dark", word_wrap=True))
    return True


# --- registration ----------------------------------------------------------------------------


def register(commands, common: argparse.ArgumentParser) -> None:
    p = commands.add(
        "list", cmd_list, "student", "every lesson: done, in progress or not started, with task counts",
        parents=[common])
    add_run_options(p)

    p = commands.add(
        "check", cmd_check, "student", "run one lesson's tests; exit status 0 only if it passes",
        parents=[common])
    p.add_argument("lesson", nargs="?", metavar="NN", help="lesson number or folder (default: the current lesson)")
    p.add_argument("-v", "--verbose", action="store_true", help="show every failure, not only the first")
    add_run_options(p)
