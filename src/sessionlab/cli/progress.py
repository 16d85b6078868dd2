"""The student's commands: list, check, hint, reset, solution, diff."""

from __future__ import annotations

import argparse
import difflib
import shutil
import time
from pathlib import Path

from rich.console import Group
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from .. import course, starters
from ..course import Lesson
from .runner import LessonResult, Runner, current_lesson, load_state, save_state, state_dir
from .ui import Ui, bar, human

HINTS_FILE = "hints.json"


# --- shared by several commands --------------------------------------------------------------


def add_run_options(parser: argparse.ArgumentParser, solution: bool = True) -> None:
    if solution:
        parser.add_argument("--solution", action="store_true",
                            help="run against the reference in solutions/ instead of your lessons/")
    parser.add_argument("--fresh", action="store_true",
                        help="run the tests again even if nothing changed since the last run")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
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
    text.append(f"   {folder}/{lesson.name}/{course.MODULE}", style="dim")
    return text


def lesson_report(ui: Ui, lesson: Lesson, result: LessonResult, *, every_failure: bool = False) -> Group:
    """What a student needs to see about one lesson: tasks, counts, the first failure in words."""
    parts: list = [lesson_heading(lesson, result.side)]
    tasks = Table.grid(padding=(0, 1))
    for task in lesson.tasks:
        state = result.task_state(task.id)
        tests = result.task_tests(task.id)
        count = f"{sum(t.passed for t in tests)}/{len(tests)}" if tests else "-"
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
    parts.append(summary)
    failures = [t for t in result.tests if not t.passed and t.outcome != "skipped"]
    first = result.first_failure(lesson)
    shown = ([first] + [t for t in failures if t is not first]) if every_failure and first else ([first] if first else [])
    for i, test in enumerate(shown):
        label = "First failure: " if i == 0 else "Also failing: "
        line = Text(label, style="bold red" if i == 0 else "red")
        line.append(human(test.name), style="bold")
        if test.tasks:
            line.append(f"  (task {', '.join(test.tasks)})", style="dim")
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
    table.add_column("", width=2)
    table.add_column("#")
    table.add_column("Lesson")
    table.add_column("State")
    table.add_column("Tasks", justify="right")
    table.add_column("Tests", justify="right")
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


# --- hint ------------------------------------------------------------------------------------


def cmd_hint(args: argparse.Namespace, ui: Ui, root: Path) -> int:
    runner = runner_for(args, root)
    if args.task:
        lesson = course.lesson(args.task.split(".")[0], root)
        task = lesson.task(args.task)
    else:
        lesson, results = pick_lesson(args.lesson, root, ui, runner, fresh=args.fresh)
        result = results[lesson.name]
        task_id = result.first_failing_task(lesson)
        if task_id is None:
            if result.passed:
                ui.out.print(Text(f"Lesson {lesson.number} passes: no hint needed. "
                                  f"`sessionlab hint --task {lesson.number}.1` shows a task's hints anyway.",
                                  style="green"))
                return 0
            ui.error(f"lesson {lesson.number} could not be judged: {result.error}",
                     f"run `pytest lessons/{lesson.name}` to see why")
            return 1
        task = lesson.task(task_id)
    ui.out.print(show_hint(ui, root, lesson, task, args.level))
    return 0


def show_hint(ui: Ui, root: Path, lesson: Lesson, task: course.Task, level: int | None = None) -> Group:
    """The task and its hints up to `level` (default: one more than last time)."""
    state = load_state(root, HINTS_FILE)
    seen = state.setdefault("seen", {})
    total = len(task.hints)
    if level is None:
        level = min(seen.get(task.id, 0) + 1, total)
    level = max(1, min(level, total)) if total else 0
    seen[task.id] = max(seen.get(task.id, 0), level)
    save_state(root, HINTS_FILE, state)
    parts: list = [Text.assemble(("Task ", "bold"), (task.id, "bold"), " · ", (task.title, "bold cyan"),
                                 (f"   in {task.where}" if task.where else "", "dim"))]
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
        parts.append(Text(f"`sessionlab hint --task {task.id} --level {level + 1}` shows hint {level + 1}.", style="dim"))
    else:
        parts.append(Text(f"That was the last hint. Once the lesson passes, `sessionlab solution {lesson.number}` "
                          "shows the reference beside your code.", style="dim"))
    return Group(*parts)


# --- reset -----------------------------------------------------------------------------------


def cmd_reset(args: argparse.Namespace, ui: Ui, root: Path) -> int:
    lesson = course.lesson(args.lesson, root)
    target = lesson.module_path("lesson")
    starter = starters.expected_starter(lesson)
    current = target.read_text(encoding="utf-8") if target.exists() else None
    if current == starter:
        ui.out.print(f"lessons/{lesson.name}/{course.MODULE} is already the starter: nothing to reset.")
        return 0
    backup = None
    if current is not None:
        backups = state_dir(root) / "backups" / lesson.name
        backups.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        backup = backups / f"agent-{stamp}.py"
        n = 1
        while backup.exists():
            n += 1
            backup = backups / f"agent-{stamp}-{n}.py"
        shutil.copy2(target, backup)
    target.write_text(starter, encoding="utf-8")
    ui.out.print(Text(f"lessons/{lesson.name}/{course.MODULE} is the starter again.", style="bold"))
    if backup is not None:
        shown = backup.relative_to(root)
        ui.out.print(f"Your version is kept in {shown}")
        ui.out.print(Text(f"To get it back: cp {shown} lessons/{lesson.name}/{course.MODULE}", style="dim"))
    return 0


# --- solution / diff -------------------------------------------------------------------------


def reference_text(lesson: Lesson) -> str:
    return starters.strip_markers(lesson.module_path("solution").read_text(encoding="utf-8"))


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


def cmd_solution(args: argparse.Namespace, ui: Ui, root: Path) -> int:
    lesson = course.lesson(args.lesson, root)
    if not args.force:
        result = run_lessons(ui, Runner(root), [lesson])[lesson.name]
        if not result.passed:
            ui.error(f"lesson {lesson.number} does not pass yet ({result.passed_count}/{result.total} tests): "
                     "the reference stays folded until you have your own answer",
                     f"`sessionlab hint {lesson.number}` helps; `sessionlab solution {lesson.number} --force` shows it anyway")
            return 1
    reference = reference_text(lesson)
    if args.full:
        if ui.plain:
            ui.out.print(reference, end="", markup=False, highlight=False, soft_wrap=True)
        else:
            ui.out.print(Syntax(reference, "python", theme="ansi_dark", line_numbers=True))
        return 0
    mine_path = lesson.module_path("lesson")
    mine = mine_path.read_text(encoding="utf-8") if mine_path.exists() else ""
    ui.out.print(Text(f"Your lessons/{lesson.name}/{course.MODULE} (-) beside the reference (+):", style="bold"))
    if not print_diff(ui, mine, reference, f"lessons/{lesson.name}/{course.MODULE}",
                      f"solutions/{lesson.name}/{course.MODULE}"):
        ui.out.print("They are the same, line for line.")
    return 0


def cmd_diff(args: argparse.Namespace, ui: Ui, root: Path) -> int:
    first, second = course.lesson(args.first, root), course.lesson(args.second, root)
    side = "starter" if args.starter else "solution"
    if args.starter:
        old, new = starters.expected_starter(first), starters.expected_starter(second)
    else:
        old, new = reference_text(first), reference_text(second)
    ui.out.print(Text(f"What grew from lesson {first.number} to lesson {second.number} ({side}s):", style="bold"))
    folder = "lessons" if args.starter else "solutions"
    if not print_diff(ui, old, new, f"{folder}/{first.name}/{course.MODULE}",
                      f"{folder}/{second.name}/{course.MODULE}"):
        ui.out.print("No difference.")
    return 0


# --- registration ----------------------------------------------------------------------------


def register(commands, common: argparse.ArgumentParser) -> None:
    p = commands.add("list", cmd_list, "student", "every lesson: done, in progress or not started, with task counts",
                     parents=[common])
    add_run_options(p)

    p = commands.add("check", cmd_check, "student", "run one lesson's tests; exit status 0 only if it passes",
                     parents=[common])
    p.add_argument("lesson", nargs="?", metavar="NN", help="lesson number or folder (default: the current lesson)")
    p.add_argument("-v", "--verbose", action="store_true", help="show every failure, not only the first")
    add_run_options(p)

    p = commands.add("hint", cmd_hint, "student", "the next hint for the first failing task", parents=[common])
    p.add_argument("lesson", nargs="?", metavar="NN", help="lesson (default: the current lesson)")
    p.add_argument("--level", type=int, metavar="K", help="show hints 1..K (default: one more than last time)")
    p.add_argument("--task", metavar="NN.K", help="hints for this task, failing or not")
    add_run_options(p, solution=False)

    p = commands.add("reset", cmd_reset, "student", "restore a lesson's starter, keeping a backup of your file",
                     parents=[common])
    p.add_argument("lesson", metavar="NN")

    p = commands.add("solution", cmd_solution, "student",
                     "your module beside the reference, as a diff (once the lesson passes)", parents=[common])
    p.add_argument("lesson", metavar="NN")
    p.add_argument("--force", action="store_true", help="show it even though the lesson does not pass yet")
    p.add_argument("--full", action="store_true", help="print the whole reference instead of a diff")

    p = commands.add("diff", cmd_diff, "student", "what grew between two lessons' solutions", parents=[common])
    p.add_argument("first", metavar="NN")
    p.add_argument("second", metavar="MM")
    p.add_argument("--starter", action="store_true", help="compare the generated starters instead")
