"""`sessionlab grade DIR...`: every lesson's tests against each student's copy of the course.

Each student folder is a copy of the course. For every student and every lesson, pytest runs
in its own process (never inside the grader), with the student's folder as its working folder
and SESSIONLAB_ROOT, and is killed with everything it started after `--timeout` seconds.
Runs go in parallel (`--jobs`).

By default the tests are the course's own (the copy `grade` is run from) run against the
student's `lessons/NN/agent.py`, so a student who edited a test cannot change the grade; the
table marks such lessons with `*`. `--own-tests` runs the tests in each student's copy instead.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from .. import course
from ..course import Lesson
from . import find_course
from .runner import LessonResult, run_pytest
from .ui import Ui


@dataclass
class Student:
    name: str
    path: Path
    problem: str | None = None
    results: dict[str, LessonResult] = field(default_factory=dict)
    edited: set[str] = field(default_factory=set)      # lessons whose test files differ from the course's

    def passed(self) -> int:
        return sum(r.passed_count for r in self.results.values())

    def total(self) -> int:
        return sum(r.total for r in self.results.values())


def is_course(path: Path) -> bool:
    return (path / "lessons").is_dir()


def find_students(dirs: list[str]) -> list[Student]:
    """Student folders from the arguments; a folder of student folders counts as all of them."""
    paths: list[Path] = []
    for given in dirs:
        path = Path(given)
        if path.is_dir() and not is_course(path):
            children = sorted(p for p in path.iterdir() if p.is_dir() and is_course(p))
            if children:
                paths += children
                continue
        paths.append(path)
    names = [p.name for p in paths]
    students = []
    for path in paths:
        name = path.name if names.count(path.name) == 1 else str(path)
        problem = None
        if not path.is_dir():
            problem = "no such folder"
        elif not is_course(path):
            problem = "not a copy of the course (no lessons/ folder)"
        students.append(Student(name, path.resolve(), problem))
    return students


def _digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.glob("test_*.py")) + sorted(folder.glob("conftest.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def grade_one(student: Student, lesson: Lesson, course_root: Path | None, timeout: float) -> LessonResult:
    module = student.path / "lessons" / lesson.name / course.MODULE
    if not module.is_file():
        return LessonResult(lesson.name, "impl", error="missing: no lessons/{}/agent.py".format(lesson.name))
    impl = module if course_root is not None else None    # --own-tests: the copy's tests on its own module
    return run_pytest(student.path, [lesson], impl=impl, tests_root=course_root, timeout=timeout)[lesson.name]


def cell(result: LessonResult | None, edited: bool, ui: Ui) -> Text:
    if result is None:
        return Text("-", style="dim")
    star = "*" if edited else ""
    if result.error is not None:
        return Text(_state(result) + star, style="red")      # missing / timeout / error
    style = "green" if result.passed else ("yellow" if result.passed_count else "dim")
    return Text(f"{result.passed_count}/{result.total}{star}", style=style)


def cmd_grade(args: argparse.Namespace, ui: Ui, root: Path | None) -> int:
    course_root: Path | None = None
    if not args.own_tests:
        try:
            course_root = find_course(args)
        except course.CourseError:
            if getattr(args, "course", None):
                raise       # a --course that is not a course: say so, do not grade with other tests
            ui.note("no course found here: running each student's own tests (--own-tests)")
    students = find_students(args.dirs)
    ok = [s for s in students if s.problem is None]
    if not ok:
        for student in students:
            ui.error(f"{student.path}: {student.problem}")
        return 2
    lessons = course.lessons(course_root or ok[0].path)
    if args.lessons:
        wanted = [w for part in args.lessons for w in part.split(",") if w]
        lessons = [course.lesson(w, course_root or ok[0].path) for w in wanted]
    for student in ok:
        for lesson in lessons:
            mine = student.path / "lessons" / lesson.name
            if course_root is not None and mine.is_dir() and _digest(mine) != _digest(course_root / "lessons" / lesson.name):
                student.edited.add(lesson.name)

    jobs = [(s, l) for s in ok for l in lessons]
    workers = args.jobs or max(1, min(8, os.cpu_count() or 1))
    progress = Progress(TextColumn("grading"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.description}"), console=ui.err, transient=True,
                        disable=not ui.err.is_terminal)
    with progress, ThreadPoolExecutor(max_workers=workers) as pool:
        task = progress.add_task("", total=len(jobs))
        futures = {pool.submit(grade_one, s, l, course_root, args.timeout): (s, l) for s, l in jobs}
        for future in as_completed(futures):
            student, lesson = futures[future]
            student.results[lesson.name] = future.result()
            progress.update(task, advance=1, description=f"{student.name} {lesson.number}")

    table = ui.table(title="Tests passed, per student and lesson" if not ui.plain else None)
    table.add_column("Student")
    for lesson in lessons:
        table.add_column(lesson.number, justify="right")
    table.add_column("Total", justify="right")
    table.add_column("Lessons done", justify="right")
    for student in students:
        if student.problem:
            table.add_row(Text(student.name), *[Text("-", style="dim")] * len(lessons),
                          Text(student.problem, style="red"), "")
            continue
        done = sum(student.results[l.name].passed for l in lessons)
        table.add_row(student.name, *[cell(student.results.get(l.name), l.name in student.edited, ui) for l in lessons],
                      f"{student.passed()}/{student.total()}", f"{done}/{len(lessons)}")
    ui.out.print(table)
    if any(s.edited for s in ok):
        ui.out.print(Text("* the student's copy of this lesson's tests differs from the course's; "
                          "the grade above used the course's tests.", style="dim"))
    if args.csv:
        write_csv(Path(args.csv), students, lessons)
        ui.note(f"wrote {args.csv}")
    if args.json:
        write_json_report(Path(args.json), students, lessons, course_root)
        ui.note(f"wrote {args.json}")
    return 0


def _state(result: LessonResult | None) -> str:
    if result is None:
        return "not run"
    if result.error and result.error.startswith("missing"):
        return "missing"
    if result.error and result.error.startswith("timed out"):
        return "timeout"
    return result.state


def write_csv(path: Path, students: list[Student], lessons: list[Lesson]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student", "lesson", "passed", "total", "state", "tests_edited", "error", "path"])
        for student in students:
            if student.problem:
                writer.writerow([student.name, "", 0, 0, "error", "", student.problem, str(student.path)])
                continue
            for lesson in lessons:
                result = student.results.get(lesson.name)
                writer.writerow([student.name, lesson.name, result.passed_count if result else 0,
                                 result.total if result else 0, _state(result),
                                 "yes" if lesson.name in student.edited else "no",
                                 (result.error or "") if result else "", str(student.path)])


def write_json_report(path: Path, students: list[Student], lessons: list[Lesson], course_root: Path | None) -> None:
    data = {"course": str(course_root) if course_root else None,
            "tests": "course" if course_root else "own",
            "lessons": [lesson.name for lesson in lessons],
            "students": []}
    for student in students:
        entry = {"name": student.name, "path": str(student.path), "problem": student.problem, "lessons": {}}
        for lesson in lessons:
            result = student.results.get(lesson.name)
            if result is None:
                continue
            entry["lessons"][lesson.name] = {
                "passed": result.passed_count, "total": result.total, "state": _state(result),
                "error": result.error, "tests_edited": lesson.name in student.edited,
                "tasks": {t.id: result.task_state(t.id) for t in lesson.tasks},
                "failures": [{"test": t.name, "tasks": t.tasks, "exception": t.exception, "message": t.message}
                             for t in result.tests if not t.passed],
            }
        entry["passed"], entry["total"] = student.passed(), student.total()
        data["students"].append(entry)
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False), encoding="utf-8")


def register(commands, common: argparse.ArgumentParser) -> None:
    p = commands.add("grade", cmd_grade, "teacher",
                     "every lesson's tests against each student's copy: a table, and CSV or JSON",
                     needs_root=False, parents=[common], description=__doc__.split("\n\n", 1)[1])
    p.add_argument("dirs", nargs="+", metavar="DIR",
                   help="a student's copy of the course (or a folder holding one copy per student)")
    p.add_argument("--lessons", action="append", metavar="NN[,MM]", help="grade only these lessons")
    p.add_argument("--own-tests", action="store_true", help="run the tests in each student's copy, not the course's")
    p.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS",
                   help="kill a lesson's tests after this long (default 120)")
    p.add_argument("--jobs", type=int, default=0, metavar="N", help="test processes at once (default: CPUs, up to 8)")
    p.add_argument("--csv", metavar="FILE", help="also write the grades as CSV (a row per student and lesson)")
    p.add_argument("--json", metavar="FILE", help="also write the grades as JSON, with every failure's message")
