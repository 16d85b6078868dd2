"""The lesson registry: where the course lives on disk and what each lesson asks for.

Each lesson is a folder `lessons/NN_topic/` holding the student's `agent.py`, its tests and a
`lesson.toml` (title, tasks), the way rustlings keeps `info.toml`. The finished modules
live in `solutions/NN_topic/`, and beside them the tasks' progressive hints (`hints.toml`).
"""

from __future__ import annotations

import dataclasses
import importlib.machinery
import importlib.util
import marshal
import os
import re
import stat
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

MODULE = "agent.py"       # a lesson's entry: the agent loop, and the file a lesson is named by
# The course modules, each one idea of the store, in the order they build on each other:
# a module imports only from those before it (agent.py, the loop, comes last).
MODULE_ORDER = ("messages", "files", "tools", "reading", "lock", "blobs", "undo",
                "compaction", "erase", "sidechain", "log", "forks", "privacy", "postgres",
                "pgprivacy", "agent")
LESSON_FOLDER = re.compile(r"^([0-9][0-9])_[a-z][a-z0-9_]*$")     # ASCII digits only


class CourseError(Exception):
    """The course folder itself is broken or missing: say where and what."""


@dataclass(frozen=True)
class Task:
    id: str            # "03.1"
    title: str
    where: str         # the function or method the student writes
    description: str
    hints: tuple[str, ...]
    # A design task: its fence is whole functions whose shape the student chooses, and
    # its tests check behaviour only, so any correct design passes (see designs.py)
    design: bool = False


@dataclass(frozen=True)
class Lesson:
    number: str        # "03"
    name: str          # "03_fork"
    title: str
    summary: str
    tasks: tuple[Task, ...]
    root: Path = field(compare=False)
    # Services its tests need beyond Python (lesson 11: "postgresql"); without one, the
    # tests skip in one line saying how to install it
    needs: tuple[str, ...] = ()

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
        root = Path(env).resolve()
        # The grader's view of a student's copy may hold no solutions/; lessons/ it needs.
        if not (root / "lessons").is_dir():
            raise CourseError(f"SESSIONLAB_ROOT={env}: not a course folder (it needs "
                              "lessons/); unset it, or point it at your copy")
        return root
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
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise CourseError(f"{toml_path}: {error}") from None
    except OSError as error:
        raise CourseError(f"{toml_path}: cannot be read ({error.strerror or error})") from None
    tasks = data.get("tasks", [])
    if not isinstance(tasks, list):
        raise CourseError(f"{toml_path}: `tasks` must be a list of [[tasks]] tables")
    needs = data.get("needs", [])
    if not isinstance(needs, list) or not all(isinstance(n, str) for n in needs):
        raise CourseError(f"{toml_path}: `needs` must be a list of strings")
    found = tuple(_task(entry, k, toml_path) for k, entry in enumerate(tasks, 1))
    return Lesson(number=name[:2], name=name, title=_text(data, "title", toml_path),
                  summary=_text(data, "summary", toml_path, required=False).strip(),
                  tasks=_with_hints(found, root / "solutions" / name / HINTS),
                  root=root, needs=tuple(needs))


# A lesson's hints climb to the code of its answers: they are kept beside the reference
# solution, not in the lesson folder a student works in, where one look at lesson.toml
# would show every level at once (`sessionlab hint` shows them one at a time, and counts).
HINTS = "hints.toml"
# The answers a lesson's page folds away, beside its hints: the site fills each fold from
# it, and `sessionlab answer` prints them in a terminal
ANSWERS = "answers.toml"


def _with_hints(tasks: tuple[Task, ...], path: Path) -> tuple[Task, ...]:
    """The tasks with their hints from solutions/NN_topic/hints.toml (a copy without
    solutions/, as the grader may see a student's, has tasks without hints)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return tasks
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise CourseError(f"{path}: {error}") from None
    except OSError as error:
        raise CourseError(f"{path}: cannot be read ({error.strerror or error})") from None
    table = data.get("hints", {})
    if not isinstance(table, dict):
        raise CourseError(f"{path}: `hints` must be a table of task ids")
    ids = {task.id for task in tasks}
    if stray := sorted(set(table) - ids):
        raise CourseError(f"{path}: hints for {', '.join(stray)}, which the lesson's "
                          f"lesson.toml does not list (its tasks: {', '.join(sorted(ids))})")
    result = []
    for task in tasks:
        hints = table.get(task.id, [])
        if not isinstance(hints, list) or not all(isinstance(h, str) for h in hints):
            raise CourseError(f"{path}: task {task.id}: its hints must be a list of strings")
        result.append(dataclasses.replace(task, hints=tuple(hints)))
    return tuple(result)


def _task(entry: object, k: int, toml_path: Path) -> Task:
    """One [[tasks]] table, checked: a broken one is named by its place in the file."""
    where = f"task {k}"
    if not isinstance(entry, dict):
        raise CourseError(f"{toml_path}: {where} is not a [[tasks]] table")
    task_id = _text(entry, "id", toml_path, where)
    where = f"task {task_id}"
    if "hints" in entry:
        raise CourseError(f"{toml_path}: {where}: hints belong in "
                          f"solutions/{toml_path.parent.name}/{HINTS}, beside the solution "
                          "(in the lesson folder, a student would see every level at once)")
    design = entry.get("design", False)
    if not isinstance(design, bool):
        raise CourseError(f"{toml_path}: {where}: `design` must be true or false")
    return Task(id=task_id, title=_text(entry, "title", toml_path, where),
                where=_text(entry, "where", toml_path, where, required=False),
                description=_text(entry, "description", toml_path, where,
                                  required=False).strip(),
                hints=(), design=design)


def _text(table: dict, key: str, toml_path: Path, where: str = "",
          required: bool = True) -> str:
    """A string value of lesson.toml; a missing or mistyped one names the file and key."""
    place = f"{toml_path}: {where + ': ' if where else ''}"
    if key not in table:
        if required:
            raise CourseError(f"{place}missing key `{key}`")
        return ""
    value = table[key]
    if not isinstance(value, str):
        raise CourseError(f"{place}`{key}` must be a string, not {type(value).__name__}")
    return value


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


def lesson_number(text: str) -> int | None:
    """The number plain ASCII digits spell (`3`, `03`); None for anything else. A digit
    of another script (`³`, `١`, `３`) is a digit to str.isdigit(), and int() reads some of
    them: a lesson is never named by one."""
    if not (text.isascii() and text.isdigit()) or len(text) > 6:
        return None
    return int(text)


def lesson(ref: str, root: Path | None = None) -> Lesson:
    """A lesson by number in ASCII digits (`3`, `03`) or by folder name (`03_fork`,
    `lessons/03_fork/`); anything else is a CourseError naming the lessons there are."""
    all_lessons = lessons(root)
    wanted = ref.strip().rstrip("/").split("/")[-1]
    number = lesson_number(wanted)
    for item in all_lessons:
        if wanted == item.name or (number is not None and number == int(item.number)):
            return item
    known = ", ".join(item.name for item in all_lessons)
    shown = ref if len(ref) <= 40 else ref[:20] + "…"
    raise CourseError(f"no lesson {shown!r}; the lessons are: {known}")


def _read_regular(path: str) -> bytes:
    """A regular file's bytes; OSError for anything else (a pipe, a folder), which is never
    read: opened without waiting, and checked before a byte is read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise IsADirectoryError(path) if stat.S_ISDIR(os.fstat(fd).st_mode) \
                else OSError(f"{path}: not a regular file")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as file:
            return file.read()
    finally:
        os.close(fd)


class HashCheckedLoader(importlib.machinery.SourceFileLoader):
    """Imports a lesson module through a .pyc that is checked against the source's hash.

    A lesson module is the file a student is editing. Python's usual .pyc is trusted while
    the source's size and modification time in whole seconds match it, so two saves within
    one second that keep the size (`<` for `>`, one digit for another) would run the older
    one. A hash-checked .pyc (PEP 552) is used only for the exact source it was made from,
    and still saves compiling the module (~20 ms for the last lesson's) on every run."""

    FLAGS = (0b11).to_bytes(4, "little")        # hash-based, checked against the source

    def get_code(self, fullname: str):
        source = self.get_data(self.path)
        cached = importlib.util.cache_from_source(self.path)
        stamp = importlib.util.MAGIC_NUMBER + self.FLAGS + importlib.util.source_hash(source)
        try:
            data = _read_regular(cached)
            if data[:16] == stamp:
                return marshal.loads(data[16:])
        except (OSError, ValueError, EOFError, TypeError):
            pass                 # missing, unreadable, damaged, or a pipe: compile the source
        code = self.source_to_code(source, self.path)
        if not sys.dont_write_bytecode:
            temp = f"{cached}.{os.getpid()}.tmp"
            try:
                os.makedirs(os.path.dirname(cached), exist_ok=True)
                with open(temp, "wb") as file:
                    file.write(stamp + marshal.dumps(code))
                os.replace(temp, cached)     # whole, or not at all: other processes read it
            except OSError:
                try:
                    os.unlink(temp)
                except OSError:
                    pass
        return code


def module_rank(file_name: str) -> int:
    """Where a module's file stands in MODULE_ORDER (any other file: after them all)."""
    stem = file_name.removesuffix(".py")
    return MODULE_ORDER.index(stem) if stem in MODULE_ORDER else len(MODULE_ORDER)


def is_lesson_module(path: Path) -> bool:
    """A file of a lesson's code (agent.py, log.py, lock.py ...), wherever it lies:
    the student's, a solution, a mutant."""
    return path.suffix == ".py" and path.stem in MODULE_ORDER


def lesson_modules(folder: Path) -> list[Path]:
    """The course modules of a lesson folder, in the order they build on each other.

    A lesson's store is split by idea (messages.py, files.py, log.py, lock.py ...); which
    of them a lesson has grows with the course. Tests, lesson.toml and helper scripts are
    not course modules."""
    return [folder / f"{name}.py" for name in MODULE_ORDER if (folder / f"{name}.py").is_file()]


class LessonPackage(ModuleType):
    """A lesson's code as one namespace: every public name of its modules.

    A test may replace one of them for a moment (`monkeypatch.setattr(lesson, "fork",
    ...)`); the replacement then stands in every module of the lesson that sees the
    name, as it did when a lesson was one file, and putting the old one back undoes it
    everywhere."""

    def __setattr__(self, key: str, value: object) -> None:
        missing = object()
        old = self.__dict__.get(key, missing)
        if old is not missing and not key.startswith("__"):
            for module in self.__dict__.get("_modules", ()):
                if module.__dict__.get(key, missing) is old:
                    module.__dict__[key] = value
        super().__setattr__(key, value)


def load_module(path: Path, name: str | None = None) -> ModuleType:
    """Import a lesson's code from its folder under a name of its own.

    `path` is the lesson's agent.py (or its folder). The folder is imported as a package
    whose modules import each other relatively (`from .log import SessionLog`), so that
    every lesson, the student's and the solution, and several wrong implementations can
    be loaded in one process without their modules meeting. The package returned holds
    every public name of every course module of the folder, so a test reads
    `lesson.SessionLog` or `lesson.fork` without knowing which file defines it.
    """
    path = Path(path).resolve()
    folder = path if path.is_dir() else path.parent
    entry = folder / MODULE
    if not entry.is_file():
        raise CourseError(f"{entry}: no such file")
    name = name or f"sessionlab_impl.{folder.parent.name}_{folder.name}"
    if name in sys.modules:
        return sys.modules[name]
    package = LessonPackage(name, f"the lesson code in {folder}")
    package.__path__ = [str(folder)]
    package.__file__ = str(entry)
    package.__package__ = name
    package.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    package.__spec__.submodule_search_locations = [str(folder)]
    sys.modules[name] = package
    try:
        for module_path in lesson_modules(folder):
            full = f"{name}.{module_path.stem}"
            if full not in sys.modules:
                spec = importlib.util.spec_from_file_location(
                    full, module_path, loader=HashCheckedLoader(full, str(module_path)))
                assert spec and spec.loader
                module = importlib.util.module_from_spec(spec)
                sys.modules[full] = module
                spec.loader.exec_module(module)
                setattr(package, module_path.stem, module)
        modules = [sys.modules[f"{name}.{path.stem}"] for path in lesson_modules(folder)]
        package.__dict__["_modules"] = modules
        for module in modules:
            for key, value in vars(module).items():
                if not key.startswith("__") and key not in MODULE_ORDER:
                    package.__dict__.setdefault(key, value)
    except BaseException:
        for full in (name, *[key for key in sys.modules if key.startswith(name + ".")]):
            sys.modules.pop(full, None)
        raise
    return package
