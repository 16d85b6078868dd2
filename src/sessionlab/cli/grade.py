"""`sessionlab grade DIR...`: every lesson's tests against each student's copy of the course.

Each student folder is a copy of the course. For every student and every lesson, the
course's own tests run against the student's lesson modules in a sandbox
(bubblewrap: no network, nothing of yours or of other students visible, every process of
the run killed with it), on a private copy, under a timeout and resource limits. Without
bubblewrap, grading still works, with less isolation, and says so in one line.

Under the table: the hint levels each student asked for, per lesson (`sessionlab hint`
counts them in the student's .sessionlab/hints.json), a measure of where a class needed help.

A lesson that timed out, crashed, is missing or does not compile scores 0 of all its tests;
a run whose report fails the grader's checks is marked `suspect` and scores 0. A student who
edited a lesson's tests is marked `*` (the course's tests were used anyway); `--own-tests`
runs the tests in each student's copy instead, and only when asked.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from .. import course
from ..course import Lesson
from ..grading import outputs, sandbox
from ..grading.guard import Guard
from ..grading.run import (Grade, Setup, build_view, collect, grade_lesson, read_module,
                           shadow_flags)
from ..cli.runner import STATE_DIR, LessonResult, starter_places
from .progress import HINTS_FILE
from . import find_course
from .ui import Ui

TABLE_LIMIT = 160        # characters of a problem's message under the table
SHORT = {"syntax error": "syntax"}
NO_SANDBOX_HINT = "student code runs with your rights (docs/instructors.md, isolation)"


@dataclass
class Student:
    name: str
    path: Path
    problem: str | None = None
    grades: dict[str, Grade] = field(default_factory=dict)
    edited: set[str] = field(default_factory=set)      # lessons whose test files differ
    flags: list[str] = field(default_factory=list)     # about the folder as a whole
    hints: dict[str, int] = field(default_factory=dict)   # task id -> hint levels seen

    def passed(self) -> int:
        return sum(g.passed for g in self.grades.values() if g.counted)

    def hints_used(self, lesson: Lesson) -> tuple[int, int]:
        """(hint levels this student asked for, levels there are) in `lesson`."""
        return (sum(min(self.hints.get(task.id, 0), len(task.hints)) for task in lesson.tasks),
                sum(len(task.hints) for task in lesson.tasks))

    def total(self, expected: dict[str, int]) -> int:
        """Every test of every lesson graded, whatever happened to the runs."""
        return sum(g.total for g in self.grades.values()) if self.grades \
            else sum(expected.values())


def is_course(path: Path) -> bool:
    return (path / "lessons").is_dir()


def find_students(dirs: list[str]) -> list[Student]:
    """Student folders from the arguments. A folder of student folders stands for all of
    its folders: those that are not a copy of the course are listed as problems, not
    dropped."""
    paths: list[Path] = []
    for given in dirs:
        path = Path(given)
        if path.is_dir() and not is_course(path):
            children = sorted(p for p in path.iterdir()
                              if p.is_dir() and not p.name.startswith("."))
            if any(is_course(p) for p in children):
                paths += children
                continue
        paths.append(path)
    # `grade .` or `grade ..`: the folder's own name (Path(".").name is empty)
    names = [p.resolve().name for p in paths]
    students = []
    for path in paths:
        name = path.resolve().name
        name = name if name and names.count(name) == 1 else str(path)
        problem = None
        if not path.is_dir():
            problem = "no such folder"
        elif not is_course(path):
            problem = "not a copy of the course (no lessons/ folder)"
        students.append(Student(name, path.resolve(), problem))
    return students


def read_hints(student: Path) -> tuple[dict[str, int], str | None]:
    """The hint levels a student asked for (`sessionlab hint` and watch's `h` count them
    in .sessionlab/hints.json): task id -> the highest level seen, and what was wrong
    with the file, if anything. Read like a student's module: a plain file, bounded."""
    path = student / STATE_DIR / HINTS_FILE
    if not os.path.lexists(path):
        return {}, None
    try:
        data = json.loads(read_module(path))
        seen = data["seen"]
        if not isinstance(seen, dict):
            raise TypeError("`seen` is not a table")
        return {str(task): int(level) for task, level in seen.items()
                if isinstance(level, int) and level > 0}, None
    except (OSError, ValueError, KeyError, TypeError) as error:
        why = getattr(error, "strerror", None) or error
        return {}, f"{STATE_DIR}/{HINTS_FILE} unreadable ({why}): hint use not counted"


def _digest(folder: Path) -> str:
    """The lesson's test files, hashed to compare a student's copy with the course's: only
    plain files, read with a bound (a link to /dev/zero must not hang the grader)."""
    digest = hashlib.sha256()
    for path in sorted(folder.glob("test_*.py")) + sorted(folder.glob("conftest.py")):
        try:
            data = read_module(path)
        except (OSError, ValueError):
            data = b"\0not a plain file"
        digest.update(path.name.encode() + b"\0" + data)
    return digest.hexdigest()


def argument_problem(args: argparse.Namespace) -> str | None:
    """The first option that cannot work, in one line, before anything runs."""
    if args.jobs is not None and args.jobs < 1:
        return f"--jobs {args.jobs}: give 1 or more test processes at once"
    if not (math.isfinite(args.timeout) and args.timeout >= 1):
        return f"--timeout {args.timeout:g}: give a number of seconds, 1 or more"
    given = [p for p in (args.csv, args.json) if p]
    if len(given) == 2 and Path(args.csv).resolve() == Path(args.json).resolve():
        return f"--csv and --json are the same file ({args.csv}): give two"
    for path in given:
        if problem := outputs.output_problem(path):
            return problem
    return None


def cmd_grade(args: argparse.Namespace, ui: Ui, root: Path | None) -> int:
    if problem := argument_problem(args):
        ui.error(problem)
        return 2
    course_root: Path | None = None
    if not args.own_tests:
        try:
            course_root = find_course(args)
        except course.CourseError as error:
            ui.error(str(error), "run `grade` inside the course (or give --course DIR); "
                                 "--own-tests grades with each student's own tests")
            return 2
    students = find_students(args.dirs)
    ok = [s for s in students if s.problem is None]
    if not ok:
        for student in students:
            ui.error(f"{student.path}: {student.problem}")
        return 2
    lessons = course.lessons(course_root or ok[0].path)
    if args.lessons is not None:
        wanted = [w.strip() for part in args.lessons for w in part.split(",") if w.strip()]
        if not wanted:        # `--lessons ,` would grade nothing and pass for a grading
            known = ", ".join(lesson.name for lesson in lessons)
            ui.error(f"--lessons {','.join(args.lessons)!r} names no lesson; the lessons are: "
                     f"{known}")
            return 2
        lessons = [course.lesson(w, course_root or ok[0].path) for w in wanted]
    for student in ok:
        student.flags = shadow_flags(student.path)
        student.hints, unreadable = read_hints(student.path)
        if unreadable:
            student.flags.append(unreadable)
        for lesson in lessons:
            mine = student.path / "lessons" / lesson.name
            if course_root is not None and mine.is_dir() and \
                    _digest(mine) != _digest(course_root / "lessons" / lesson.name):
                student.edited.add(lesson.name)

    available = sandbox.Availability(False, "--no-sandbox") if args.no_sandbox \
        else sandbox.probe()
    if not available.usable:
        ui.note(f"grading without a sandbox ({available.why}): {NO_SANDBOX_HINT}")
    names = [lesson.name for lesson in lessons]
    guarded = {f"student {s.name}": (s.path, False) for s in ok}
    if course_root is not None:
        guarded["the course copy"] = (course_root, True)
    guarded["the kit"] = (sandbox.kit_folder(), True)
    guard = Guard(guarded)
    with tempfile.TemporaryDirectory(prefix="sessionlab-grade-") as scratch:
        scratch_path = Path(os.path.realpath(scratch))
        scratch_path.chmod(0o711)     # see run._fresh_folder: searchable, not listable
        expected = None
        views: dict[str, Path] = {}
        if course_root is not None:
            view = build_view(course_root, names, scratch_path / "course")
            expected = collect(view, names)
            views = {s.name: view for s in ok}
        else:
            for i, student in enumerate(ok):
                views[student.name] = build_view(student.path, names, scratch_path / f"own{i}")
        places = {lesson.name: starter_places(lesson) for lesson in lessons} \
            if course_root is not None else None
        setup = Setup(scratch_path, available.usable, args.timeout, expected, places)
        _run_all(ok, names, views, setup, args.jobs, ui)
    alarms = guard.check()
    counts = {name: len(ids) for name, ids in (expected or {}).items()}
    _print_table(ui, students, lessons, counts)
    for alarm in alarms:
        ui.error(alarm)
    status = 1 if alarms else 0
    graded = [g for s in ok for g in s.grades.values() if g.state != "missing"]
    if graded and all(g.state == "timeout" for g in graded):
        ui.error(f"every run timed out: if the students' code is not to blame, "
                 f"raise --timeout (now {args.timeout:g} s)")
        status = 1
    report = Report(students, lessons, counts, course_root, available, alarms)
    for given, render in ((args.csv, report.csv), (args.json, report.json)):
        if given:
            try:
                outputs.write_whole(Path(given), render())
                ui.note(f"wrote {given}")
            except OSError as error:    # each file on its own: one failing loses not the other
                ui.error(f"{given}: not written: {error.strerror or error}")
                status = 1
    return status


def _run_all(students: list[Student], names: list[str], views: dict[str, Path],
             setup: Setup, jobs: int | None, ui: Ui) -> None:
    work = [(s, n) for s in students for n in names]
    workers = jobs or max(1, min(8, os.cpu_count() or 1))
    progress = Progress(TextColumn("grading"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), TextColumn("{task.description}"),
                        console=ui.err, transient=True, disable=not ui.err.is_terminal)
    with progress, ThreadPoolExecutor(max_workers=workers) as pool:
        task = progress.add_task("", total=len(work))
        futures = {pool.submit(grade_lesson, s.path, n, views[s.name], setup): (s, n)
                   for s, n in work}
        started = time.monotonic()
        for done, future in enumerate(as_completed(futures), 1):
            student, name = futures[future]
            student.grades[name] = future.result()
            progress.update(task, advance=1, description=f"{student.name} {name[:2]}")
            if not ui.err.is_terminal:
                # No bar where nobody watches a terminal (a pipe, a log file): a plain
                # line a lesson instead, so a long run is never minutes of nothing
                ui.err.print(f"graded {done}/{len(work)}: {student.name} {name} "
                             f"({time.monotonic() - started:.0f} s)", highlight=False,
                             markup=False)


def cell(grade: Grade | None, edited: bool) -> Text:
    if grade is None:
        return Text("-", style="dim")
    marks = ("*" if edited else "") + ("!" if grade.flags else "")
    if not grade.counted:
        return Text(SHORT.get(grade.state, grade.state) + marks, style="red")
    style = "green" if grade.state == "done" else ("yellow" if grade.passed else "dim")
    return Text(f"{grade.passed}/{grade.total}{marks}", style=style)


def _print_table(ui: Ui, students: list[Student], lessons: list[Lesson],
                 counts: dict[str, int]) -> None:
    table = ui.table(title="Tests passed, per student and lesson" if not ui.plain else None)
    table.add_column("Student")
    for lesson in lessons:
        table.add_column(lesson.number, justify="right")
    table.add_column("Total", justify="right")
    # In a narrow terminal a two-word header would be folded inside a word ("Lesson/s").
    table.add_column("Done" if ui.tight else "Lessons done", justify="right")
    notes: list[str] = []
    for student in students:
        if student.problem:
            table.add_row(Text(student.name), *[Text("-", style="dim")] * len(lessons),
                          f"0/{student.total(counts)}", f"0/{len(lessons)}")
            notes.append(f"{student.name}: {student.problem}")
            continue
        done = sum(g.state == "done" for g in student.grades.values())
        table.add_row(student.name, *[cell(student.grades.get(l.name), l.name in student.edited)
                                      for l in lessons],
                      f"{student.passed()}/{student.total(counts)}", f"{done}/{len(lessons)}")
        notes += [f"{student.name}: {flag}" for flag in student.flags]
        for lesson in lessons:
            grade = student.grades.get(lesson.name)
            if grade is None:
                continue
            if not grade.counted:
                notes.append(f"{student.name} {lesson.number}: {grade.state}: "
                             + outputs.cut(grade.error, TABLE_LIMIT).replace("\n", " | "))
            notes += [f"{student.name} {lesson.number}: {flag}" for flag in grade.flags]
    ui.out.print(table)
    _print_hints(ui, students, lessons)
    if any(s.edited for s in students):
        ui.out.print(Text("* the student's copy of this lesson's tests differs from the "
                          "course's; the grade above used the course's tests.", style="dim"))
    if notes:
        ui.out.print(Text("! flagged, and what went wrong (a lesson that did not run scores "
                          "0 of all its tests):", style="dim"))
        for note in notes:
            ui.out.print(Text("  " + outputs.cut(note, TABLE_LIMIT + 60)), soft_wrap=True)


def _print_hints(ui: Ui, students: list[Student], lessons: list[Lesson]) -> None:
    """Hint levels each student asked for, per lesson: where a class needed help."""
    graded = [s for s in students if s.problem is None]
    if not any(s.hints for s in graded):
        ui.out.print(Text("No student asked for a hint (`sessionlab hint`, watch's h).",
                          style="dim"))
        return
    ui.out.print(Text("Hint levels asked for, of those there are, per student and "
                      "lesson:", style="bold"))
    table = ui.table()
    table.add_column("Student")
    for lesson in lessons:
        table.add_column(lesson.number, justify="right")
    for student in graded:
        cells = []
        for lesson in lessons:
            used, there = student.hints_used(lesson)
            cells.append(Text(f"{used}/{there}", style="yellow" if used else "dim"))
        table.add_row(student.name, *cells)
    ui.out.print(table)


@dataclass
class Report:
    students: list[Student]
    lessons: list[Lesson]
    counts: dict[str, int]
    course_root: Path | None
    sandbox: sandbox.Availability
    alarms: list[str]

    def rows(self) -> list[dict]:
        rows = []
        for student in self.students:
            base = {"student": student.name, "path": str(student.path), "flags": ""}
            if student.problem:
                rows.append({**base, "lesson": "", "passed": 0,
                             "total": student.total(self.counts), "state": "problem",
                             "tests_edited": "", "hints_used": "", "hints_available": "",
                             "error": student.problem})
                continue
            for lesson in self.lessons:
                grade = student.grades[lesson.name]
                flags = student.flags + grade.flags
                used, there = student.hints_used(lesson)
                rows.append({**base, "lesson": lesson.name, "passed": grade.passed,
                             "total": grade.total, "state": grade.state,
                             "tests_edited": "yes" if lesson.name in student.edited else "no",
                             "hints_used": used, "hints_available": there,
                             "flags": "; ".join(flags), "error": grade.error or ""})
        for alarm in self.alarms:
            rows.append({"student": "", "lesson": "", "passed": 0, "total": 0,
                         "state": "alarm", "tests_edited": "", "hints_used": "",
                         "hints_available": "", "flags": "", "error": alarm, "path": ""})
        return rows

    def csv(self) -> str:
        return outputs.csv_text(self.rows())

    def json(self) -> str:
        data = {"course": str(self.course_root) if self.course_root else None,
                "tests": "course" if self.course_root else "own",
                "sandbox": {"used": self.sandbox.usable, "why": self.sandbox.why},
                "lessons": [lesson.name for lesson in self.lessons],
                "alarms": self.alarms, "students": []}
        for student in self.students:
            data["students"].append(self._student(student))
        return outputs.json_text(data)

    def _student(self, student: Student) -> dict:
        cut = outputs.cut
        entry = {"name": student.name, "path": str(student.path), "problem": student.problem,
                 "flags": student.flags, "lessons": {}}
        for lesson in self.lessons:
            grade = student.grades.get(lesson.name)
            if grade is None:
                continue
            result = LessonResult(lesson.name, "impl", tests=grade.tests,
                                  written=grade.written)
            failures = [t for t in grade.tests if not t.passed]
            used, there = student.hints_used(lesson)
            entry["lessons"][lesson.name] = {
                "passed": grade.passed, "total": grade.total, "state": grade.state,
                "error": cut(grade.error, outputs.JSON_LIMIT) or None,
                "flags": grade.flags, "tests_edited": lesson.name in student.edited,
                "tasks": {t.id: result.task_state(t.id) if grade.counted else grade.state
                          for t in lesson.tasks},
                "hints": {"used": used, "available": there,
                          "levels": {t.id: min(student.hints.get(t.id, 0), len(t.hints))
                                     for t in lesson.tasks}},
                "failure_count": len(failures),
                "failures": [{"test": cut(t.name, 300), "tasks": t.tasks,
                              "exception": cut(t.exception, 100),
                              "message": cut(t.message, outputs.JSON_LIMIT)}
                             for t in failures[:outputs.JSON_FAILURES]],
            }
        entry["passed"], entry["total"] = student.passed(), student.total(self.counts)
        return entry


def register(commands, common: argparse.ArgumentParser) -> None:
    p = commands.add("grade", cmd_grade, "teacher",
                     "every lesson's tests against each student's copy: a table, and CSV or JSON",
                     needs_root=False, parents=[common], description=__doc__.split("\n\n", 1)[1])
    p.add_argument("dirs", nargs="+", metavar="DIR",
                   help="a student's copy of the course (or a folder holding one copy per student)")
    p.add_argument("--lessons", action="append", metavar="NN[,MM]", help="grade only these lessons")
    p.add_argument("--own-tests", action="store_true",
                   help="run the tests in each student's copy, not the course's")
    p.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS",
                   help="stop a lesson's tests after this long (default 120, at least 1)")
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="test processes at once (default: CPUs, up to 8)")
    p.add_argument("--no-sandbox", action="store_true",
                   help="grade without bubblewrap even where it works (you trust the code)")
    p.add_argument("--csv", metavar="FILE",
                   help="also write the grades as CSV (a row per student and lesson)")
    p.add_argument("--json", metavar="FILE",
                   help="also write the grades as JSON, with every failure's message")
