"""The student's commands that read or write a lesson's files: task, hint, reset, solution,
diff.

One rule runs through them: the reference answer of a lesson stays folded until the student
has an answer of their own (the lesson passes), or asks for it anyway with `--force`. `diff`
shows, by default, what a student is given (the generated starters); the reference solutions'
diff falls under the same rule as `solution`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path

from rich.text import Text

from .. import course, starters
from ..course import Lesson
from .progress import (add_run_options, pick_lesson, print_diffs, reference_texts,
                       run_lessons, runner_for, show_hint, task_heading)
from . import files
from .runner import Runner, state_dir
from .ui import Ui


class Refused(Exception):
    """A request the command turns down: one line saying why, one saying what to do."""

    def __init__(self, message: str, hint: str | None = None, status: int = 2) -> None:
        super().__init__(message)
        self.message, self.hint, self.status = message, hint, status


def refusing(command):
    """Run `command`, turning a Refused into its two lines and its exit status."""
    def run(args: argparse.Namespace, ui: Ui, root: Path) -> int:
        try:
            return command(args, ui, root)
        except Refused as refused:
            ui.error(refused.message, refused.hint)
            return refused.status
    run.__name__ = command.__name__
    run.__doc__ = command.__doc__
    return run


# --- task ------------------------------------------------------------------------------------


def first_failing(ref: str | None, args: argparse.Namespace, ui: Ui,
                  root: Path) -> tuple[Lesson, course.Task | None]:
    """The first failing task of lesson `ref` (the current lesson without it), run as
    task and hint run it; None when the lesson passes. A lesson whose tests could not be
    judged is refused."""
    lesson, results = pick_lesson(ref, root, ui, runner_for(args, root), fresh=args.fresh)
    result = results[lesson.name]
    task_id = result.first_failing_task(lesson)
    if task_id is None and not result.passed:
        raise Refused(f"lesson {lesson.number} could not be judged: {result.error}",
                      f"run `pytest lessons/{lesson.name}` to see why", status=1)
    return lesson, lesson.task(task_id) if task_id else None


def show_task(task: course.Task) -> Text:
    """A task's contract: its title, where it is written, what must hold. No hint: those are
    counted, and reading what to do must not cost one."""
    text = task_heading(task) + "\n"
    text.append(task.description.strip() + "\n" if task.description else
                "(no description: the lesson's page explains it)\n")
    total = len(task.hints)
    if total:
        text.append(f"Stuck? `sessionlab hint --task {task.id}` shows hint 1 of {total} "
                    "(each level you ask for is counted).\n", style="dim")
    return text


@refusing
def cmd_task(args: argparse.Namespace, ui: Ui, root: Path) -> int:
    """What a task asks: NN.K one task, NN every task of a lesson, nothing the current
    task (the first failing one of the current lesson)."""
    ref = args.task
    if ref and "." in ref:
        tasks = [course.lesson(ref.split(".")[0], root).task(ref)]
    elif ref:
        tasks = list(course.lesson(ref, root).tasks)
    else:
        lesson, task = first_failing(None, args, ui, root)
        if task is None:
            ui.out.print(Text(f"Lesson {lesson.number} has no failing task. "
                              f"`sessionlab task {lesson.number}` shows what each task asks.",
                              style="green"))
            return 0
        tasks = [task]
    for number, task in enumerate(tasks):
        if number:
            ui.out.print()
        ui.out.print(show_task(task))
    return 0


# --- hint ------------------------------------------------------------------------------------


def check_level(level: int | None, task: course.Task) -> None:
    """Refuse a hint level that names no hint (0, negative, past the last)."""
    if level is None:
        return
    total = len(task.hints)
    every = f"`sessionlab hint --task {task.id} --level {total}` shows them all" if total else None
    if level < 1:
        raise Refused(f"--level {level}: hints are numbered from 1 (task {task.id} has "
                      f"{total} hint{'s' if total != 1 else ''})", every)
    if level > total:
        raise Refused(f"--level {level}: task {task.id} has {total} hint{'s' if total != 1 else ''}, "
                      "so there is no such level", every)


@refusing
def cmd_hint(args: argparse.Namespace, ui: Ui, root: Path) -> int:
    if args.task:
        lesson = course.lesson(args.task.split(".")[0], root)
        task = lesson.task(args.task)
    else:
        lesson, task = first_failing(args.lesson, args, ui, root)
        if task is None:
            ui.out.print(Text(f"Lesson {lesson.number} passes: no hint needed. "
                              f"`sessionlab hint --task {lesson.number}.1` shows a task's hints anyway.",
                              style="green"))
            return 0
    check_level(args.level, task)
    ui.out.print(show_hint(ui, root, lesson, task, args.level))
    return 0


# --- reset -----------------------------------------------------------------------------------


def backup_path(root: Path, lesson: Lesson, target: Path) -> Path:
    """A new name in .sessionlab/backups/NN_topic/ for a copy of `target`:
    <module>-<date>-<time>.py, with -2, -3 ... when taken."""
    backups = state_dir(root) / "backups" / lesson.name
    stamp = time.strftime("%Y%m%d-%H%M%S")
    backups.mkdir(parents=True, exist_ok=True)
    backup = backups / f"{target.stem}-{stamp}.py"
    n = 1
    while os.path.lexists(backup):
        n += 1
        backup = backups / f"{target.stem}-{stamp}-{n}.py"
    return backup


def keep_backup(root: Path, lesson: Lesson, target: Path, *, move: bool = False) -> Path:
    """Keep the student's file in .sessionlab/backups/NN_topic/: a copy of its bytes (a
    link to a file: of the file's), or, with `move`, the thing itself moved there (a
    folder, a pipe or a link to nothing in the module's place, which cannot be copied)."""
    backups = state_dir(root) / "backups" / lesson.name
    try:
        backup = backup_path(root, lesson, target)
        if move:
            os.rename(target, backup)
        else:
            backup.write_bytes(files.read_bytes(target))     # never waits on a pipe
            shutil.copystat(target, backup)
    except OSError as error:
        raise Refused(f"cannot keep a backup of your file in {backups}: {error.strerror or error}; "
                      "nothing was reset", "make the course folder writable, then reset again", status=1) from None
    return backup


def replace_whole(path: Path, text: str) -> None:
    """Write `path` through a temp file and a rename: a failed write leaves the old file whole."""
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


@refusing
def cmd_reset(args: argparse.Namespace, ui: Ui, root: Path) -> int:
    lesson = course.lesson(args.lesson, root)
    changed = 0
    for module, starter in starters.expected_starters(lesson).items():
        changed += reset_module(ui, root, lesson, module, starter)
    if not changed:
        ui.out.print(f"lessons/{lesson.name} is already the starter: nothing to reset.")
    return 0


def reset_module(ui: Ui, root: Path, lesson: Lesson, module: str, starter: str) -> bool:
    """Put one module of the lesson back to its starter, keeping the student's version
    as a backup. False when it already is the starter.

    Whatever is in the module's place is kept, never lost: a file's bytes, UTF-8 or not
    (reset is how a student recovers from a file an editor saved in another encoding), a
    link's file; a folder, a pipe or a link to nothing is moved into the backups."""
    target = lesson.folder / module
    shown_target = f"lessons/{lesson.name}/{module}"
    odd = None                     # what is there, when it is not a (link to a) file
    try:
        info = os.stat(target)
        if not stat.S_ISREG(info.st_mode):
            odd = files.kind(info.st_mode)
    except FileNotFoundError:
        odd = "a link to nothing" if os.path.islink(target) else None
    except OSError as error:          # a link to itself (ELOOP), no permission
        if not os.path.islink(target):
            raise Refused(f"cannot read {shown_target}: {error.strerror or error}; "
                          "nothing more was reset", status=1) from None
        odd = "a link that cannot be followed"
    current = None
    if odd is None and os.path.lexists(target):
        try:
            current = files.read_bytes(target)
        except OSError as error:
            raise Refused(f"cannot read {shown_target}: {error.strerror or error}; "
                          "nothing more was reset", status=1) from None
        if current == starter.encode("utf-8"):
            return False
    backup = None
    if odd is not None:
        backup = keep_backup(root, lesson, target, move=True)
    elif current is not None:
        backup = keep_backup(root, lesson, target)
    try:
        replace_whole(target, starter)
    except OSError as error:
        kept = f"; your file is unchanged (a copy is in {backup.relative_to(root)})" if backup else ""
        raise Refused(f"cannot write {shown_target} in {target.parent}: {error.strerror or error}{kept}",
                      "make the lesson's folder writable, then reset again", status=1) from None
    ui.out.print(Text(f"{shown_target} is the starter again.", style="bold"))
    if backup is not None:
        shown = backup.relative_to(root)
        if odd is not None:
            ui.out.print(f"It was {odd}, not a file: that is moved to {shown}")
        else:
            ui.out.print(f"Your version is kept in {shown}")
            ui.out.print(Text(f"To get it back: cp {shown} {shown_target}", style="dim"))
    return True


# --- solution / diff -------------------------------------------------------------------------


def require_passing(ui: Ui, root: Path, lessons: list[Lesson], command: str) -> None:
    """Refuse unless every lesson passes: their reference stays folded until then."""
    results = run_lessons(ui, Runner(root), lessons)
    for lesson in lessons:
        result = results[lesson.name]
        if not result.passed:
            raise Refused(f"lesson {lesson.number} does not pass yet ({result.passed_count}/{result.total} tests): "
                          "the reference stays folded until you have your own answer",
                          f"`sessionlab hint {lesson.number}` helps; `sessionlab {command} --force` shows it anyway",
                          status=1)


def my_modules(ui: Ui, lesson: Lesson) -> dict[str, str]:
    """The student's modules as text to diff. A file that is not UTF-8 is shown with �
    where its bytes are not (and said so); one that cannot be read (a folder or a pipe in
    its place) is left out, and said so: the reference is shown all the same."""
    mine: dict[str, str] = {}
    for path in [lesson.folder / f"{name}.py" for name in course.MODULE_ORDER]:
        if not os.path.lexists(path):
            continue
        shown = f"lessons/{lesson.name}/{path.name}"
        try:
            data = files.read_bytes(path)
        except OSError as error:
            ui.note(f"{shown} cannot be read ({error.strerror or error}): shown as missing")
            continue
        try:
            mine[path.name] = data.decode("utf-8")
        except UnicodeDecodeError as error:
            ui.note(f"{shown} is not UTF-8 text (byte {data[error.start]:#04x} at offset "
                    f"{error.start}): shown with � for what cannot be read; Python will not "
                    f"import it until it is saved as UTF-8")
            mine[path.name] = data.decode("utf-8", errors="replace")
    return mine


@refusing
def cmd_solution(args: argparse.Namespace, ui: Ui, root: Path) -> int:
    from rich.syntax import Syntax

    lesson = course.lesson(args.lesson, root)
    if not args.force:
        require_passing(ui, root, [lesson], f"solution {lesson.number}")
    references = reference_texts(lesson)
    if args.full:
        for module, reference in references.items():
            ui.out.print(Text(f"solutions/{lesson.name}/{module}", style="bold"))
            if ui.plain:
                ui.out.print(reference, end="", markup=False, highlight=False,
                             soft_wrap=True)
            else:
                ui.out.print(Syntax(reference, "python", theme="ansi_dark",
                                    line_numbers=True))
        return 0
    mine = my_modules(ui, lesson)
    ui.out.print(Text(f"Your lessons/{lesson.name} (-) beside the reference (+):",
                      style="bold"))
    if not print_diffs(ui, mine, references, f"lessons/{lesson.name}",
                       f"solutions/{lesson.name}"):
        ui.out.print("They are the same, line for line.")
    return 0


@refusing
def cmd_diff(args: argparse.Namespace, ui: Ui, root: Path) -> int:
    first, second = course.lesson(args.first, root), course.lesson(args.second, root)
    if args.force and not args.solutions:
        # The starters need no force; taking --force for --solutions would give the
        # reference away to a student who only meant "show it anyway".
        raise Refused(f"--force works with --solutions only: `sessionlab diff {first.number} "
                      f"{second.number}` shows the starters, `... --solutions --force` the "
                      "reference solutions before both lessons pass")
    solutions = args.solutions
    if solutions:
        if not args.force:
            # Both answers show in a diff of the solutions: each lesson must pass, as for `solution`.
            require_passing(ui, root, [first, second] if first != second else [first],
                            f"diff {first.number} {second.number} --solutions")
        old, new = reference_texts(first), reference_texts(second)
        folder, side = "solutions", "reference solutions"
    else:
        old, new = starters.expected_starters(first), starters.expected_starters(second)
        folder, side = "lessons", "starters, what you are given"
    ui.out.print(Text(f"What grew from lesson {first.number} to lesson {second.number} ({side}):", style="bold"))
    if not print_diffs(ui, old, new, f"{folder}/{first.name}", f"{folder}/{second.name}"):
        ui.out.print("No difference.")
    if not solutions:
        ui.out.print(Text(f"`sessionlab diff {first.number} {second.number} --solutions` compares the reference "
                          "solutions once both lessons pass.", style="dim"))
    return 0


# --- registration ----------------------------------------------------------------------------


def register(commands, common: argparse.ArgumentParser) -> None:
    p = commands.add("task", cmd_task, "student", "what a task asks (its contract, no hint)",
                     parents=[common])
    p.add_argument("task", nargs="?", metavar="NN.K|NN",
                   help="a task, or every task of a lesson (default: the current task)")
    add_run_options(p, solution=False)

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

    p = commands.add("diff", cmd_diff, "student", "what grew between two lessons (their starters)",
                     parents=[common])
    p.add_argument("first", metavar="NN")
    p.add_argument("second", metavar="MM")
    p.add_argument("--solutions", action="store_true",
                   help="compare the reference solutions instead (once both lessons pass, as `solution`)")
    p.add_argument("--force", action="store_true", help="with --solutions: even though a lesson does not pass yet")
    p.add_argument("--starter", action="store_true", help=argparse.SUPPRESS)   # the default now; kept for old scripts
