"""The lesson registry: where the course lives on disk and what each lesson asks for.

Each lesson is a folder `lessons/NN_topic/` holding the student's `agent.py`, its tests and a
`lesson.toml` (title, tasks, progressive hints), the way rustlings keeps `info.toml`.
The finished module lives at `solutions/NN_topic/agent.py`.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

MODULE = "agent.py"
LESSON_FOLDER = re.compile(r"^(\d\d)_[a-z][a-z0-9_]*$")


class CourseError(Exception):
    """The course folder itself is broken or missing: say where and what."""


@dataclass(frozen=True)
class Task:
    id: str            # "03.1"
    title: str
    where: str         # the function or method the student writes
    description: str
    hints: tuple[str, ...]


@dataclass(frozen=True)
class Lesson:
    number: str        # "03"
    name: str          # "03_fork"
    title: str
    summary: str
    tasks: tuple[Task, ...]
    root: Path = field(compare=False)

    @property
    def folder(self) -> Path:
        return self.root / "lessons" / self.name

    @property
    def solution_folder(self) -> Path:
        return self.root / "solutions" / self.name

    def module_path(self, side: str = "lesson") -> Path:
        folder = self.solution_folder if side == "solution" else self.folder
        return folder / MODULE

    def task(self, task_id: str) -> Task:
        for task in self.tasks:
            if task.id == task_id:
                return task
        raise CourseError(f"lesson {self.name} has no task {task_id!r}")


def find_root(start: Path | None = None) -> Path:
    """The course root: the nearest folder at or above `start` with `lessons/` and `solutions/`.

    SESSIONLAB_ROOT overrides the search (the grader points it at a student's copy).
    """
    if env := os.environ.get("SESSIONLAB_ROOT"):
        return Path(env).resolve()
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "lessons").is_dir() and (folder / "solutions").is_dir():
            return folder
    raise CourseError(
        f"no course found at or above {here}: expected a folder holding lessons/ and solutions/. "
        "Run this from inside your copy of Session Lab."
    )


def load_lesson(root: Path, name: str) -> Lesson:
    toml_path = root / "lessons" / name / "lesson.toml"
    try:
        data = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CourseError(f"{toml_path}: missing (every lesson folder needs a lesson.toml)") from None
    except tomllib.TOMLDecodeError as error:
        raise CourseError(f"{toml_path}: {error}") from None
    number = name[:2]
    tasks = tuple(
        Task(id=t["id"], title=t["title"], where=t.get("where", ""),
             description=t.get("description", "").strip(), hints=tuple(t.get("hints", ())))
        for t in data.get("tasks", ())
    )
    return Lesson(number=number, name=name, title=data["title"],
                  summary=data.get("summary", "").strip(), tasks=tasks, root=root)


def lessons(root: Path | None = None) -> list[Lesson]:
    """Every lesson of the course, in order."""
    root = root or find_root()
    folder = root / "lessons"
    return [load_lesson(root, name) for name in lesson_folders(root)
            if (folder / name / "lesson.toml").is_file()]


def latest_solution(root: Path | None = None) -> Lesson:
    """The highest-numbered lesson that has a reference solution (solutions/NN_topic/agent.py)."""
    solved = [item for item in lessons(root) if item.module_path("solution").is_file()]
    if not solved:
        raise CourseError(f"no solutions/NN_topic/{MODULE} in the course: no lesson is solved yet")
    return solved[-1]


def lesson_folders(root: Path) -> list[str]:
    """Names of every folder under lessons/ that looks like a lesson (NN_topic)."""
    folder = root / "lessons"
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and LESSON_FOLDER.match(p.name))


def lesson(ref: str, root: Path | None = None) -> Lesson:
    """A lesson by number (`3`, `03`) or folder name (`03_fork`)."""
    all_lessons = lessons(root)
    wanted = ref.strip().rstrip("/").split("/")[-1]
    for item in all_lessons:
        if wanted in (item.name, item.number) or (wanted.isdigit() and int(wanted) == int(item.number)):
            return item
    known = ", ".join(item.name for item in all_lessons)
    raise CourseError(f"no lesson {ref!r}; the lessons are: {known}")


def load_module(path: Path, name: str | None = None) -> ModuleType:
    """Import a lesson module from its file under a name of its own.

    Every lesson's module is called agent.py, so each is imported under a unique name
    (`sessionlab_impl.solution_03_fork`) and several lessons can run in one pytest.
    """
    path = Path(path).resolve()
    if not path.is_file():
        raise CourseError(f"{path}: no such file")
    name = name or f"sessionlab_impl.{path.parent.parent.name}_{path.parent.name}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
