"""Running lesson tests the way a student would, in a separate process, and reading the results.

Every run is `python -m pytest lessons/NN_topic ... --sessionlab-report FILE` in a subprocess
(a student's endless loop or crash can never take the command down with it), killed with its
whole process group after a timeout. The JSON report gives each test's outcome, tasks, and the
plain message of its failure. The watch loop runs the same command in a child forked from a
warm server instead (sessionlab.warm), which saves the second of start-up; anything that
makes that server untrustworthy falls back to the subprocess.

Results are cached in `.sessionlab/results.json` under the course root, keyed by a hash of the
lesson's files (module, tests, lesson.toml), the reference module for `--solution` runs, and the
kit's own code: a cached result is reused only while nothing it depends on has changed.
Several lessons that are not cached run in one pytest process per CPU, in parallel.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import course, starters
from ..starters import starter_raises
from ..warm import WarmPytest, WorkerGone, kit_fingerprint
from ..course import Lesson
from . import files

TIMEOUT = 120.0
CACHE_VERSION = 3          # 3: results say which tasks are written
STATE_DIR = ".sessionlab"
IGNORED_PARTS = ("__pycache__", ".pytest_cache")
IGNORED_SUFFIXES = (".pyc", ".bak")


@dataclass
class Outcome:
    """One test's result, as read from the report."""

    nodeid: str
    name: str
    outcome: str                 # passed / failed / skipped / error
    tasks: list[str] = field(default_factory=list)
    exception: str | None = None
    message: str | None = None
    key: bool = False
    raised_in: str | None = None      # "module" (agent.py), "test" (its file), "other"
    in_function: str | None = None    # the agent.py function the failure came out of
    blames: str | None = None         # the task the test itself said failed it (fail_in)

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"

    @property
    def not_written(self) -> bool:
        return self.exception == "NotImplementedError"

    @property
    def waits_for(self) -> str | None:
        """The task this test stopped at because it is not written yet ("task NN.K is
        not written yet: ..."), or None."""
        message = self.message or ""
        return starters.placeholder_task(message) if self.not_written else None


@dataclass
class LessonResult:
    """One lesson's test run: every test's outcome, or why there are none."""

    lesson: str                  # "03_fork"
    side: str = "lesson"         # lesson / solution / impl
    tests: list[Outcome] = field(default_factory=list)
    error: str | None = None     # timeout, crash, collection error: the lesson could not be judged
    output: str = ""             # the tail of pytest's own output, for when something is off
    seconds: float = 0.0
    cached: bool = False
    # Task id -> written (False while the task still raises its starter's
    # NotImplementedError); None when the module could not be read.
    written: dict[str, bool] | None = None

    @property
    def total(self) -> int:
        return len(self.tests)

    @property
    def passed_count(self) -> int:
        return sum(t.passed for t in self.tests)

    @property
    def passed(self) -> bool:
        return self.error is None and self.total > 0 and self.passed_count == self.total

    @property
    def state(self) -> str:
        """done / in progress / not started / error.

        Not started means no task is written yet, whatever the tests say: a few tests of
        an untouched starter pass for free (they check what the starter already does)."""
        if self.error is not None:
            return "error"
        if self.passed:
            return "done"
        if self.written is not None:
            return "in progress" if any(self.written.values()) else "not started"
        if self.passed_count == 0 and all(t.not_written for t in self.tests if not t.passed):
            return "not started"
        return "in progress"

    def task_tests(self, task_id: str) -> list[Outcome]:
        return [t for t in self.tests if task_id in t.tasks]

    def task_state(self, task_id: str) -> str:
        """passed / failing / started (written in part) / todo (not written yet) /
        untested."""
        tests = self.task_tests(task_id)
        written = None if self.written is None else self.written.get(task_id)
        if written is False:
            return "todo"           # its tests may pass for free: the task is still not written
        if not tests:
            return "untested"
        if all(t.passed for t in tests):
            return "passed"
        if all(t.not_written for t in tests if not t.passed):
            # Nothing fails but for code not written yet: a task written in one of its
            # places (00.1 has two) is started, not todo, though its tests still stop there.
            return "started" if written else "todo"
        return "failing"

    def first_failure(self, lesson: Lesson | None = None) -> Outcome | None:
        """The failure to show first: the one most likely to be the cause of the others.

        1. A failure that names its task itself: a NotImplementedError of task X, or an
           exception out of the function a task writes (its `where` in lesson.toml); and,
           when a task is not written yet, a failed check of a test of written tasks
           alone. The earliest such task in the lesson's order wins (later tasks build on
           earlier ones).
        2. Otherwise (assertions in tests): the earliest task that is broken, most of
           its tests failing, before one with a single failing test among passing ones
           (which more likely fails through another task); then the earliest failing
           task.
        Within the chosen task: its own tests first, those of it alone before those it
        shares with another task, then a failure inside the student's code before one in
        a test's own check, then file order.
        """
        failing = [t for t in self.tests if not t.passed and t.outcome != "skipped"]
        if not failing:
            return None
        if lesson is None:
            return failing[0]
        order = {task.id: i for i, task in enumerate(lesson.tasks)}
        strong: dict[int, str] = {}
        for i, test in enumerate(failing):
            if cause := _named_cause(test, lesson):
                strong[i] = cause

        def pick(task_id: str, candidates: list[int]) -> Outcome:
            # A test of this task alone says more of its code than one it shares with
            # another task (which the other's mistake may fail just as well).
            return failing[min(candidates, key=lambda i: (
                task_id not in failing[i].tasks, len(failing[i].tasks) > 1,
                failing[i].raised_in != "module", i))]

        # A task not written yet whose tests fail is where the student starts, even when
        # its tests first reach a later task's unwritten code (lesson 00's tool calls go
        # through the loop): the lessons are written in their order.
        unwritten = self._first_unwritten(lesson) if strong else None
        if unwritten is not None:
            # Except where written code fails its own checks: a test of written tasks
            # alone that failed without reaching unwritten code is a fault the student
            # fixes before starting the next task (its failures would hide it).
            for i, test in enumerate(failing):
                if (i not in strong and test.waits_for is None and test.tasks
                        and all(self.written.get(t, True) for t in test.tasks)):
                    strong[i] = min(test.tasks, key=lambda t: order.get(t, len(order)))
            strong = {**strong, -1: unwritten}
        if strong:
            task_id = min(strong.values(), key=lambda t: order.get(t, len(order)))
            return pick(task_id, [i for i, test in enumerate(failing)
                                  if strong.get(i) == task_id or task_id in test.tasks])
        failing_tasks = [task.id for task in lesson.tasks
                         if any(task.id in t.tasks for t in failing)]
        if not failing_tasks:
            return failing[0]

        def broken(task_id: str) -> bool:
            mine = self.task_tests(task_id)
            return 2 * sum(not t.passed for t in mine) >= len(mine)

        task_id = next((t for t in failing_tasks if broken(t)), failing_tasks[0])
        return pick(task_id, [i for i, t in enumerate(failing) if task_id in t.tasks])

    def _first_unwritten(self, lesson: Lesson) -> str | None:
        """The earliest task not written yet that has a failing test (see first_failure)."""
        if not self.written:
            return None
        return next((task.id for task in lesson.tasks if not self.written.get(task.id, True)
                     and any(not t.passed and t.outcome != "skipped" and task.id in t.tasks
                             for t in self.tests)), None)

    def first_failing_task(self, lesson: Lesson) -> str | None:
        """The task of the first failure (see first_failure), else the first task not
        passing."""
        first = self.first_failure(lesson)
        if first is not None:
            cause = _named_cause(first, lesson) or next(
                (task.id for task in lesson.tasks if task.id in first.tasks), None)
            unwritten = self._first_unwritten(lesson)
            if unwritten is not None and unwritten in first.tasks:
                # Chosen as where the student starts, unless the failure names an
                # earlier task itself (a bug in a task already written).
                order = [task.id for task in lesson.tasks]
                if cause not in order or order.index(unwritten) < order.index(cause):
                    return unwritten
            if cause:
                return cause
        for task in lesson.tasks:
            if self.task_state(task.id) in ("failing", "started", "todo"):
                return task.id
        return None

    def to_json(self) -> dict:
        data = asdict(self)
        data.pop("cached")
        return data

    @classmethod
    def from_json(cls, data: dict) -> "LessonResult":
        """A result as to_json wrote it; ValueError naming what is off for anything else
        (a damaged or hand-edited cache is never taken for a result)."""
        if not isinstance(data, dict):
            raise ValueError(f"a result is {_shape(data)}, not a table")
        tests = data.get("tests", [])
        if not isinstance(tests, list):
            raise ValueError(f"`tests` is {_shape(tests)}, not a list")
        written = data.get("written")
        if written is not None and not (isinstance(written, dict) and all(
                isinstance(k, str) and isinstance(v, bool) for k, v in written.items())):
            raise ValueError("`written` is not a table of tasks")
        fields = {"lesson": (str,), "side": (str,), "error": (str, type(None)),
                  "output": (str,), "seconds": (int, float)}
        for name, kinds in fields.items():
            if name in data and not isinstance(data[name], kinds):
                raise ValueError(f"`{name}` is {_shape(data[name])}")
        if "lesson" not in data:
            raise ValueError("a result names no lesson")
        return cls(lesson=data["lesson"], side=data.get("side", "lesson"),
                   tests=[_outcome(t) for t in tests], error=data.get("error"),
                   output=data.get("output", ""), seconds=data.get("seconds", 0.0),
                   written=written)


OUTCOME_FIELDS = {"nodeid": (str,), "name": (str,), "outcome": (str,), "tasks": (list,),
                  "exception": (str, type(None)), "message": (str, type(None)),
                  "key": (bool,), "raised_in": (str, type(None)),
                  "in_function": (str, type(None)), "blames": (str, type(None))}


def _outcome(data: object) -> Outcome:
    """One test's outcome from the cache, every field of the type it must have."""
    if not isinstance(data, dict):
        raise ValueError(f"a test's outcome is {_shape(data)}, not a table")
    for name, value in data.items():
        kinds = OUTCOME_FIELDS.get(name)
        if kinds is None or not isinstance(value, kinds):
            raise ValueError(f"a test's `{name}` is {_shape(value)}")
    if not all(isinstance(task, str) for task in data.get("tasks", [])):
        raise ValueError("a test's `tasks` is not a list of task ids")
    if not {"nodeid", "name", "outcome"} <= data.keys():
        raise ValueError("a test's outcome lacks its nodeid, name or outcome")
    return Outcome(**data)


def _shape(value: object) -> str:
    """What a JSON value is, in words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    return {dict: "a table", list: "a list", str: "a string", int: "a number",
            float: "a number"}.get(type(value), type(value).__name__)


def _named_cause(test: Outcome, lesson: Lesson) -> str | None:
    """The task a failure itself points at, if any (see LessonResult.first_failure)."""
    if test.blames and any(task.id == test.blames for task in lesson.tasks):
        return test.blames          # the test said whose code failed it
    if (task_id := test.waits_for) and any(task.id == task_id for task in lesson.tasks):
        return task_id
    if test.in_function and test.raised_in == "module":
        for task in lesson.tasks:
            names = [part.strip().strip("`").removesuffix("()").rsplit(".", 1)[-1]
                     for part in task.where.replace(" and ", ",").split(",")
                     if part.strip()]
            if test.in_function in names:
                return task.id
    return None


# --- which tasks are written ---------------------------------------------------------------


def written_tasks(lesson: Lesson, module: Path) -> dict[str, bool] | None:
    """Task id -> whether the student has written it: a task is not written while every
    place the starter gave it still raises the starter's NotImplementedError.

    `module` is the lesson's agent.py; every module of its folder counts."""
    if not module.is_file():
        return None
    try:
        mine = raises_in(path.read_text(encoding="utf-8")
                         for path in course.lesson_modules(module.parent))
    except (OSError, UnicodeDecodeError):
        return None
    return written_against(mine, starter_places(lesson))


def starter_places(lesson: Lesson) -> dict[str, int]:
    """Task id -> how many places of the lesson's starter raise its NotImplementedError
    (0 when the course's reference cannot be read: then one raise left means not
    written)."""
    try:
        given = raises_in(starters.expected_starters(lesson).values())
    except (OSError, UnicodeDecodeError, course.CourseError):
        given = {}
    return {task.id: given.get(task.id, 0) for task in lesson.tasks}


def raises_in(sources: Iterable[str]) -> dict[str, int]:
    """The starter's raises of each task, counted over the modules of a lesson."""
    counts: dict[str, int] = {}
    for source in sources:
        for task, count in starter_raises(source).items():
            counts[task] = counts.get(task, 0) + count
    return counts


def written_against(mine: dict[str, int], places: dict[str, int]) -> dict[str, bool]:
    """Task id -> written: fewer of its raises are left than the starter has."""
    return {task: mine.get(task, 0) < max(1, count) for task, count in places.items()}


# --- keeping what is shown short -----------------------------------------------------------


HEAD_LINES, TAIL_LINES = 15, 5      # of one failure's message
LINE_WIDTH = 300                    # characters of one line of it


def shorten(text: str, *, head: int = HEAD_LINES, tail: int = TAIL_LINES,
            width: int = LINE_WIDTH, see: str | None = None) -> str:
    """`text` with at most head + tail lines of at most about `width` characters each:
    the middle is replaced by a note saying how much was cut and, with `see`, the
    command that shows all of it. A student's code that prints or repeats a lot must not
    turn one failure into megabytes on the screen (or in the cache)."""
    where = f"; `{see}` shows it all" if see else ""
    lines = [_shorten_line(line, width, where) for line in text.splitlines()]
    if len(lines) > head + tail + 1:
        cut = len(lines) - head - tail
        lines = [*lines[:head], f"... {cut} lines cut{where} ...",
                 *(lines[-tail:] if tail else [])]
    return "\n".join(lines)


def _shorten_line(line: str, width: int, where: str) -> str:
    if len(line) <= width + 40:       # cutting less than the note's length saves nothing
        return line
    keep = width // 2
    return f"{line[:keep]} ... {len(line) - 2 * keep} characters cut{where} ... {line[-keep:]}"


def see_all(nodeid: str) -> str:
    """The command that shows a test's whole failure."""
    import shlex
    return f"pytest {shlex.quote(nodeid)}" if "::" in nodeid else f"pytest {nodeid} -x"


# --- reading a report ---------------------------------------------------------------------


def read_report(path: Path, lessons: list[Lesson]) -> dict[str, list[Outcome]]:
    """Outcomes per lesson name from one pytest report (which may cover several lessons)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    merged: dict[str, Outcome] = {}
    order: list[str] = []
    for entry in data.get("results", []):
        nodeid = entry.get("nodeid", "")
        outcome = entry.get("outcome", "failed")
        if entry.get("when") == "collect":
            outcome = "error"
        new = Outcome(nodeid=nodeid, name=entry.get("name") or nodeid.split("::")[-1],
                      outcome=outcome, tasks=list(entry.get("tasks") or []),
                      exception=entry.get("exception"),
                      message=None if entry.get("message") is None
                      else shorten(str(entry["message"]), see=see_all(nodeid)),
                      key=bool(entry.get("key")), raised_in=entry.get("raised_in"),
                      in_function=entry.get("in_function"),
                      blames=entry.get("blames"))
        if nodeid not in merged:
            merged[nodeid] = new
            order.append(nodeid)
            continue
        old = merged[nodeid]
        # Several phases of one test (call, then teardown): a failure anywhere fails it.
        if old.outcome == "passed" and new.outcome != "passed":
            merged[nodeid] = new
    per_lesson: dict[str, list[Outcome]] = {lesson.name: [] for lesson in lessons}
    for nodeid in order:
        test = merged[nodeid]
        for lesson in lessons:
            if f"lessons/{lesson.name}/" in nodeid.replace("\\", "/") + "/":
                per_lesson[lesson.name].append(test)
                break
        else:
            if len(lessons) == 1:
                per_lesson[lessons[0].name].append(test)
    return per_lesson


# --- running ------------------------------------------------------------------------------


def child_env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    # PYTHONDONTWRITEBYTECODE stays as the user has it: a lesson's module is imported
    # through a .pyc checked against its source's hash (course.HashCheckedLoader), so no
    # cached .pyc can run an older save, and the kit's and the tests' cached .pyc files
    # save a tenth of a second a run.
    for name in ("SESSIONLAB_SOLUTION", "SESSIONLAB_IMPL", "PYTEST_ADDOPTS", "PYTEST_PLUGINS"):
        env.pop(name, None)
    env["SESSIONLAB_ROOT"] = str(root)
    env["PY_COLORS"] = "0"
    return env


KEEP_HEAD = 16 * 1024       # bytes of a child's output kept from its start ...
KEEP_TAIL = 64 * 1024       # ... and from its end: a student's code may print gigabytes


class BoundedOutput:
    """What a child printed, held in bounded memory: its first and last bytes, and how
    many were dropped between them."""

    def __init__(self, head: int = KEEP_HEAD, tail: int = KEEP_TAIL) -> None:
        self.head, self.tail = bytearray(), bytearray()
        self.head_limit, self.tail_limit = head, tail
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        if len(self.tail) > self.tail_limit:
            excess = len(self.tail) - self.tail_limit
            del self.tail[:excess]
            self.dropped += excess

    def text(self) -> str:
        cut = f"\n... {self.dropped} bytes of output cut ...\n" if self.dropped else ""
        return (bytes(self.head).decode("utf-8", "replace") + cut
                + bytes(self.tail).decode("utf-8", "replace"))


class Children:
    """The process groups a run has started, so that Ctrl-C stops all of them at once
    (the main thread gets KeyboardInterrupt; the children run in other threads' calls)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.live: set[subprocess.Popen] = set()
        self.stopped = False

    def start(self, command: list[str], **options) -> subprocess.Popen:
        with self.lock:
            if self.stopped:          # after Ctrl-C no thread starts anything new
                raise KeyboardInterrupt
            process = subprocess.Popen(command, **options)
            self.live.add(process)
            return process

    def track(self, process) -> None:
        """Add a process started elsewhere (a warm server's child: `pid`, `kill()`)."""
        with self.lock:
            if self.stopped:
                process.kill()
                raise KeyboardInterrupt
            self.live.add(process)

    def done(self, process) -> None:
        with self.lock:
            self.live.discard(process)

    def stop(self) -> None:
        """Kill every live process group now, and refuse to start more."""
        with self.lock:
            self.stopped = True
            for process in list(self.live):
                _kill(process)


def run_process(command: list[str], *, cwd: Path, env: dict[str, str], timeout: float,
                children: Children | None = None) -> tuple[int | None, str]:
    """Run a command in its own process group; (exit status or None on timeout, output).

    The output is read as it comes by a thread that keeps only its head and tail
    (BoundedOutput), so a child printing without end costs a bounded amount of memory."""
    children = children or Children()
    process = children.start(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
    output = BoundedOutput()
    reader = threading.Thread(target=_drain, args=(process.stdout, output), daemon=True,
                              name="sessionlab-output")
    try:
        reader.start()
        try:
            status: int | None = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill(process)
            process.wait()
            status = None
        else:
            # What the run started and left running in its group (a forked child a
            # timed-out test gave up on) dies with it, rather than take a core for ever
            _kill(process)
        # A grandchild that left the group may hold the pipe open: do not wait on it for ever.
        reader.join(timeout=5)
        return status, output.text()
    except BaseException:
        _kill(process)       # Ctrl-C in the command: take the tests (and their children) down too
        process.wait()
        raise
    finally:
        children.done(process)
        if not reader.is_alive():
            process.stdout.close()


def _drain(stream, output: BoundedOutput) -> None:
    try:
        while chunk := stream.read1(65536):
            output.add(chunk)
    except (OSError, ValueError):
        pass             # the pipe was closed under us: what was read is kept


def _kill(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, AttributeError):
        try:
            process.kill()
        except ProcessLookupError:
            pass


def run_warm_or_cold(args: list[str], *, cwd: Path, env: dict[str, str], timeout: float,
                     children: Children | None = None,
                     warm: WarmPytest | None = None) -> tuple[int | None, str]:
    """`pytest ARGS`: in a child of the warm server when there is one to trust, else in
    a new process; (exit status or None on timeout, output) either way."""
    children = children or Children()
    if warm is not None and warm.usable():
        output = BoundedOutput()
        try:
            status = warm.run(args, cwd=cwd, env=env, timeout=timeout, children=children,
                              output=output)
            return status, output.text()
        except WorkerGone:
            pass             # the same run, cold; the server is started again after it
    result = run_process([sys.executable, "-m", "pytest", *args], cwd=cwd, env=env,
                         timeout=timeout, children=children)
    if warm is not None:
        warm.revive()
    return result


def run_pytest(root: Path, lessons: list[Lesson], *, side: str = "lesson", impl: Path | None = None,
               tests_root: Path | None = None, timeout: float = TIMEOUT,
               children: Children | None = None,
               warm: WarmPytest | None = None) -> dict[str, LessonResult]:
    """One pytest run over `lessons`; a result per lesson.

    `tests_root` (default `root`) is where the tests are taken from; `impl` runs them against
    that agent.py (the grader runs the course's own tests against a student's module).
    `children` is the group of processes that Ctrl-C stops together; `warm`, a server to
    run in instead of a new process.
    """
    tests_root = tests_root or root
    started = time.monotonic()
    # Read before the run, like the cache key: the state describes the file that was tested.
    written = {lesson.name: written_tasks(lesson, impl or (
        root / ("solutions" if side == "solution" else "lessons") / lesson.name / course.MODULE))
        for lesson in lessons}
    with tempfile.TemporaryDirectory(prefix="sessionlab-") as scratch:
        report = Path(scratch) / "report.json"
        args = [*[str(tests_root / "lessons" / lesson.name) for lesson in lessons],
                "-q", "--tb=short", "--no-header", "-p", "no:cacheprovider",
                "--continue-on-collection-errors",   # one lesson's broken file must not hide the others
                "--sessionlab-report", str(report)]
        if side == "solution":
            args.append("--solution")
        if impl is not None:
            args += ["--impl", str(impl)]
        # One timeout for the whole run, however many lessons: a lesson's tests take a second or
        # two, so a batch that needs longer has a lesson that hangs, and is run again lesson by lesson.
        status, output = run_warm_or_cold(args, cwd=root, env=child_env(root), timeout=timeout,
                                          children=children, warm=warm)
        seconds = (time.monotonic() - started) / len(lessons)
        tail = _tail(output)
        if status is None:
            error = f"timed out after {timeout:g} s (an endless loop, or a process that never ends?)"
            return {lesson.name: LessonResult(lesson.name, side, error=error, output=tail, seconds=seconds,
                                              written=written[lesson.name])
                    for lesson in lessons}
        try:
            per_lesson = read_report(report, lessons)
        except (OSError, ValueError):
            error = f"pytest stopped without a report (exit status {status})"
            return {lesson.name: LessonResult(lesson.name, side, error=error, output=tail, seconds=seconds,
                                              written=written[lesson.name])
                    for lesson in lessons}
    results = {}
    for lesson in lessons:
        tests = per_lesson[lesson.name]
        broken = [t for t in tests if t.outcome == "error" and "::" not in t.nodeid]
        error = None
        if broken:
            message = (broken[0].message or "").strip()
            error = "the tests could not be collected" + (f": {message.splitlines()[-1]}" if message else "")
            tests = [t for t in tests if t not in broken]
        elif not tests:
            error = f"no tests ran (pytest exit status {status})"
        results[lesson.name] = LessonResult(lesson.name, side, tests=tests, error=error,
                                            output=tail if error else "", seconds=seconds,
                                            written=written[lesson.name])
    return results


def _tail(output: str, lines: int = 40) -> str:
    """The end of pytest's own output (where it says what went wrong), lines bounded too."""
    return shorten("\n".join(output.rstrip().splitlines()[-lines:]), head=lines, tail=0)


# --- the cache ----------------------------------------------------------------------------


def _hash_folder(digest, folder: Path, label: str) -> None:
    """Every file of `folder` that can change what its tests do, name and content.

    An editor's litter (`.#agent.py`, swap files, backups) is left out: it comes and goes
    as the student types and is no part of the code. Nothing that is not a regular file
    is opened (a pipe would be waited on for ever): a link to nothing, a pipe or a device
    counts by what it is."""
    if not folder.is_dir():
        digest.update(f"{label}: missing\n".encode())
        return
    for path in files.entries(folder, recursive=True):
        relative = path.relative_to(folder)
        if any(part in IGNORED_PARTS for part in relative.parts) \
                or path.name.endswith(IGNORED_SUFFIXES) or _is_folder(path):
            continue
        digest.update(f"{label}/{relative.as_posix()}\n".encode())
        digest.update(_content_digest(path))


def _is_folder(path: Path) -> bool:
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False


def _content_digest(path: Path) -> bytes:
    """The hash of a regular file's bytes (a link to one counts as the file); for anything
    else, what it is."""
    try:
        return hashlib.sha256(files.read_bytes(path)).digest()
    except files.NotRegularFile as error:
        return f"not a file: {error.strerror}".encode()
    except OSError as error:      # a link to nothing or to itself, a file that went away
        try:
            target = os.readlink(path)
        except OSError:
            target = ""
        return f"unreadable: {error.strerror} {target}".encode()


def cache_key(root: Path, lesson: Lesson, side: str, kit: str | None = None) -> str:
    """`kit` is `kit_fingerprint()`, passed in when several lessons are keyed at once."""
    kit = kit or kit_fingerprint()
    digest = hashlib.sha256(f"v{CACHE_VERSION} {side} {sys.version} {kit}\n".encode())
    _hash_folder(digest, lesson.folder, "lesson")
    if side == "solution":
        _hash_folder(digest, lesson.solution_folder, "solution")
    for name in ("conftest.py", "pyproject.toml"):
        path = root / name
        digest.update(name.encode() + (hashlib.sha256(path.read_bytes()).digest() if path.is_file() else b"-"))
    return digest.hexdigest()


class Cache:
    def __init__(self, root: Path) -> None:
        self.path = root / STATE_DIR / "results.json"

    def _load(self) -> dict:
        """The cache: {} of entries when there is none, when it was written by an older kit,
        or when it is damaged (set aside with a warning, see read_state)."""
        data = read_state(self.path, cache_problem)
        if data is None or data.get("version") != CACHE_VERSION:
            return {"version": CACHE_VERSION, "entries": {}}
        return data

    def get(self, lesson: Lesson, side: str, key: str, data: dict | None = None) -> LessonResult | None:
        """The cached result, if its key still matches; `data` is a `_load()` already made."""
        entry = (data or self._load())["entries"].get(f"{side}:{lesson.name}")
        if not entry or entry.get("key") != key:
            return None
        result = LessonResult.from_json(entry["result"])     # checked by cache_problem
        result.cached = True
        return result

    def put(self, lesson: Lesson, side: str, key: str, result: LessonResult) -> None:
        data = self._load()
        data["entries"][f"{side}:{lesson.name}"] = {"key": key, "result": result.to_json()}
        write_json(self.path, data)


def cache_problem(data: object) -> str | None:
    """What makes `data` no results cache (None when it is one). A cache of another
    version is not a problem: it is an older kit's, and simply not used."""
    if not isinstance(data, dict):
        return f"{_shape(data)}, not a table"
    if not isinstance(data.get("version"), int) or isinstance(data.get("version"), bool):
        return "without a version number"
    if data["version"] != CACHE_VERSION:
        return None
    entries = data.get("entries")
    if not isinstance(entries, dict):
        return f"`entries` is {_shape(entries)}, not a table"
    for name, entry in entries.items():
        if not (isinstance(entry, dict) and isinstance(entry.get("key"), str)):
            return f"entry {name!r} is not a key and a result"
        try:
            LessonResult.from_json(entry.get("result"))
        except (ValueError, TypeError) as error:
            return f"entry {name!r}: {error}"
    return None


def write_json(path: Path, data) -> None:
    """Write a small state file whole (temp file + rename); never fail a command over it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temp.write_text(json.dumps(data, indent=1, ensure_ascii=False), encoding="utf-8")
        os.replace(temp, path)
    except OSError:
        pass


# --- what the commands call -----------------------------------------------------------------


@dataclass
class Runner:
    """Runs lessons for one course root, through the cache, in parallel where it can."""

    root: Path
    side: str = "lesson"
    timeout: float = TIMEOUT
    jobs: int = 0
    use_cache: bool = True
    warm: WarmPytest | None = None     # the watch's warm server, if it has one

    def __post_init__(self) -> None:
        self.cache = Cache(self.root)
        self.jobs = self.jobs or max(1, min(4, os.cpu_count() or 1))

    def run(self, lessons: Iterable[Lesson], *, fresh: bool = False,
            on_start: Callable[[list[Lesson]], None] | None = None) -> dict[str, LessonResult]:
        """Results for `lessons`, running only those not cached (or all with `fresh`)."""
        lessons = list(lessons)
        results: dict[str, LessonResult] = {}
        todo: list[Lesson] = []
        keys: dict[str, str] = {}
        kit = kit_fingerprint()                      # once per run, not once per lesson
        stored = None if fresh or not self.use_cache else self.cache._load()
        for lesson in lessons:
            keys[lesson.name] = cache_key(self.root, lesson, self.side, kit)
            hit = None if stored is None else self.cache.get(lesson, self.side, keys[lesson.name], stored)
            if hit is not None:
                results[lesson.name] = hit
            else:
                todo.append(lesson)
        if todo:
            if on_start:
                on_start(todo)
            for name, result in self._run_parallel(todo).items():
                results[name] = result
                lesson = next(l for l in todo if l.name == name)
                # A timeout or a crash may be the machine, not the code: never cache those.
                if result.error is None or result.error.startswith("the tests could not be collected"):
                    self.cache.put(lesson, self.side, keys[name], result)
        return {lesson.name: results[lesson.name] for lesson in lessons}

    def _run_parallel(self, lessons: list[Lesson]) -> dict[str, LessonResult]:
        groups = [lessons[i::self.jobs] for i in range(min(self.jobs, len(lessons)))]
        results: dict[str, LessonResult] = {}
        children = Children()
        pool = ThreadPoolExecutor(max_workers=len(groups))
        try:
            for future in [pool.submit(self._run_group, group, children) for group in groups]:
                results.update(future.result())
        except BaseException:
            # Ctrl-C lands here, in the main thread: stop every test process now; leaving
            # the pool's `with` would first wait for each of them to finish.
            children.stop()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()
        return results

    def _run_group(self, group: list[Lesson], children: Children) -> dict[str, LessonResult]:
        batch = run_pytest(self.root, group, side=self.side, timeout=self.timeout,
                           children=children, warm=self.warm)
        if len(group) > 1 and any(r.error and not r.tests for r in batch.values()):
            # One lesson hung or crashed pytest: run each alone so the others still get results.
            batch = {}
            for lesson in group:
                batch.update(run_pytest(self.root, [lesson], side=self.side,
                                        timeout=self.timeout, children=children))
        return batch


def current_lesson(lessons: list[Lesson], results: dict[str, LessonResult]) -> Lesson | None:
    """The first lesson that does not pass; None when every lesson passes."""
    for lesson in lessons:
        if not results[lesson.name].passed:
            return lesson
    return None


def state_dir(root: Path) -> Path:
    return root / STATE_DIR


STATE_LIMIT = 64 << 20      # bytes: a state file larger than this is not one the kit wrote


def read_state(path: Path, problem: Callable[[Any], str | None]) -> Any:
    """The JSON held in a state file of the kit (.sessionlab/...), None when there is none.

    A file the kit cannot take (not UTF-8, not JSON, of the wrong shape as `problem` says,
    a folder or a pipe in its place) is set aside, never deleted: renamed to
    `<name>.bad-<date>-<time>` beside it, with one warning; the command goes on as if
    there were none, and writes a new one. The next run finds no bad file: warned once."""
    if not os.path.lexists(path):
        return None
    try:
        raw = files.read_bytes(path, STATE_LIMIT + 1)
        if len(raw) > STATE_LIMIT:
            raise ValueError(f"over {STATE_LIMIT >> 20} MB")
        data = json.loads(raw.decode("utf-8"))
        why = problem(data)
    except files.NotRegularFile as error:
        why = error.strerror
    except UnicodeDecodeError:
        why = "not UTF-8 text"
    except RecursionError:
        why = "nested too deeply"
    except ValueError as error:
        why = f"not JSON ({error})"
    except OSError:
        return None           # cannot be read (a link to nothing, no permission): not used
    if why is None:
        return data
    set_aside(path, why)
    return None


def set_aside(path: Path, why: str) -> None:
    """Rename a state file the kit cannot use out of its way, and say so in one line."""
    from .ui import make_ui

    stamp = time.strftime("%Y%m%d-%H%M%S")
    kept = path.with_name(f"{path.name}.bad-{stamp}")
    n = 1
    while os.path.lexists(kept):
        n += 1
        kept = path.with_name(f"{path.name}.bad-{stamp}-{n}")
    shown = f"{path.parent.name}/{path.name}"
    try:
        os.rename(path, kept)
    except FileNotFoundError:
        return                  # another sessionlab set it aside a moment ago, and warned
    except OSError as error:
        make_ui().warn(f"{shown} is {why}, and cannot be set aside ({error.strerror}): "
                       "it is not used; move it away to start it afresh")
        return
    make_ui().warn(f"{shown} was {why}: it is kept as {path.parent.name}/{kept.name}, "
                   "and a new one is started")


def load_state(root: Path, name: str, problem: Callable[[Any], str | None] | None = None) -> dict:
    """A state file of the kit as a table ({} when there is none); `problem` says what
    else it must hold (see read_state)."""
    def check(data: object) -> str | None:
        if not isinstance(data, dict):
            return f"{_shape(data)}, not a table"
        return problem(data) if problem else None
    return read_state(state_dir(root) / name, check) or {}


def save_state(root: Path, name: str, data: dict) -> None:
    write_json(state_dir(root) / name, data)


__all__ = ["Outcome", "LessonResult", "Runner", "run_pytest", "current_lesson"]
