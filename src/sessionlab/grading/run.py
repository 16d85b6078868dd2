"""One (student, lesson): a private copy, a sandboxed pytest, and a verdict on its report.

The course view is taken once per grading (the course's test files, lesson.toml, conftest
and pyproject, never its solutions), so a student who changes the course copy during
grading changes nobody's grade. Each run gets its own copy of the view with the student's
agent.py in it (only that file: nothing else of the student's folder can shadow a module or
reach a test), plus a test of the grader's own that must fail, under a name drawn at random.

The verdict trusts nothing the run says about itself without a check: the tests in the
report must be exactly the course's (collected once, by the grader, without student code),
the grader's test must be reported failed, pytest's exit status must be 1 and match the
report's, and there must be exactly one report. A run that fails a check is "suspect" and
scores 0; a run that timed out, crashed, is missing or does not compile scores 0 of the
lesson's whole count of tests, shown as what it is.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import course
from ..cli import files
from ..cli.runner import LessonResult, Outcome, raises_in, written_against
from . import sandbox
from .guard import TOKEN_VARIABLE, kill_leftovers

AGENT_LIMIT = 2 * 1024 ** 2         # bytes of a student's agent.py the grader will take
REPORT_LIMIT = 4 * 1024 ** 2        # an honest report is far smaller (messages are cut)
OUTPUT_LIMIT = 64 * 1024            # the tail of pytest's own output that is kept
COPY_LIMIT = 16 * 1024 ** 2         # bytes of a lesson folder copied into a view
SHADOWING = set(sys.stdlib_module_names) | {
    "pytest", "_pytest", "pluggy", "sessionlab", "openai", "httpx", "httpx2", "respx", "rich",
    "sitecustomize", "usercustomize", "conftest"}
CANARY_MESSAGE = "the grader's own test: it must fail in every honest run"
# Seconds a stopped run's keeper has to kill what the run left, before its whole group
# is killed (the keeper's own sweep gives up after 10)
KEEPER_SECONDS = 15


@dataclass
class Grade:
    """One student's result for one lesson. `total` is the lesson's whole count of tests."""

    lesson: str
    state: str       # done / in progress / not started / missing / timeout / syntax error /
                     # error / suspect
    passed: int = 0
    total: int = 0
    tests: list[Outcome] = field(default_factory=list)
    error: str | None = None
    flags: list[str] = field(default_factory=list)
    # Task id -> written (see runner.written_tasks); None when not known (--own-tests)
    written: dict[str, bool] | None = None

    @property
    def counted(self) -> bool:
        """Whether the tests' outcomes stand (else the lesson scores 0)."""
        return self.state in ("done", "in progress", "not started")


@dataclass
class Raw:
    """What came out of a run, every part bounded."""

    returncode: int | None
    timed_out: bool
    output: str
    report: bytes
    report_overflow: bool


# --- the course view ---------------------------------------------------------------------


def copy_files(source: Path, target: Path, *, skip: tuple[str, ...] = ()) -> list[str]:
    """Copy the regular files at the top of `source` (never following a link), up to
    COPY_LIMIT bytes; the names copied."""
    target.mkdir(parents=True, exist_ok=True)
    copied, budget = [], COPY_LIMIT
    try:
        entries = sorted(os.scandir(source), key=lambda e: e.name)
    except OSError:
        return copied
    for entry in entries:
        if entry.name in skip or entry.name.endswith(".pyc"):
            continue
        try:
            if not entry.is_file(follow_symlinks=False) or entry.stat(
                    follow_symlinks=False).st_size > budget:
                continue
            data = Path(entry.path).read_bytes()
        except OSError:
            continue
        budget -= len(data)
        (target / entry.name).write_bytes(data)
        copied.append(entry.name)
    return copied


def build_view(source: Path, lessons: list[str], target: Path) -> Path:
    """The tests' side of a course: root conftest and pyproject, each lesson's files but its
    modules (agent.py, log.py ...). Solutions, other lessons and anything else stay out."""
    target.mkdir(parents=True)
    copy_files(source, target, skip=tuple(
        p.name for p in source.iterdir() if p.name not in ("conftest.py", "pyproject.toml"))
        if source.is_dir() else ())
    if not (target / "pyproject.toml").exists():
        (target / "pyproject.toml").write_text("", encoding="utf-8")   # no stray ini file
    for name in lessons:
        copy_files(source / "lessons" / name, target / "lessons" / name,
                   skip=MODULE_FILES)
    return target


def test_files(view: Path, lesson: str) -> list[str]:
    return sorted(p.name for p in (view / "lessons" / lesson).glob("test_*.py"))


def pytest_options(root: str) -> list[str]:
    return ["-q", "--no-header", "-p", "no:cacheprovider", "-c", f"{root}/pyproject.toml",
            "--rootdir", root]


def collect(view: Path, lessons: list[str], timeout: float = 300) -> dict[str, list[str]]:
    """The node ids of the course's tests, per lesson: every grade's denominator.

    Collected by the grader on its own view of the course, which holds no student code
    (collecting runs the test files' top level, never the module under test)."""
    files = [f"lessons/{name}/{test}" for name in lessons for test in test_files(view, name)]
    found: dict[str, list[str]] = {name: [] for name in lessons}
    if not files:
        return found
    command = [sys.executable, "-P", "-m", "pytest", "--collect-only", *files,
               *pytest_options(str(view))]
    env = sandbox.clean_environment({"SESSIONLAB_ROOT": str(view), "HOME": str(view)})
    done = subprocess.run(command, cwd=view, env=env, capture_output=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    out = done.stdout.decode("utf-8", "replace")
    if done.returncode != 0:
        last = (out.strip().splitlines() or ["no output"])[-1]
        raise course.CourseError(f"the course's own tests do not collect: {last}")
    for line in out.splitlines():
        parts = line.strip().split("/")
        if "::" in line and len(parts) > 2 and parts[0] == "lessons" and parts[1] in found:
            found[parts[1]].append(line.strip())
    return found


# --- checks on the student's folder ---------------------------------------------------


def pyc_flags(folder: Path) -> list[str]:
    """Bytecode a run would never read but that says someone tried: a .pyc outside
    __pycache__ (importable without its source), or a hash-based one (CPython and pytest
    write timestamp-based .pyc files; an unchecked hash is how a .pyc hides its source)."""
    flags = []
    if not folder.is_dir():
        return flags
    found = []
    for current, dirs, names in os.walk(folder):      # never into a linked folder
        found += [Path(current) / name for name in names if name.endswith(".pyc")]
        if len(found) > 200:
            break
    for path in sorted(found)[:200]:
        where = path.relative_to(folder.parent.parent).as_posix()
        if path.parent.name != "__pycache__":
            flags.append(f"stray bytecode {where} (ignored: never imported)")
            continue
        try:
            header = files.read_bytes(path, 8, follow=False)   # never a pipe: it would hang
        except OSError:
            continue
        if len(header) == 8 and int.from_bytes(header[4:8], "little") & 0b11:
            flags.append(f"hash-based bytecode {where} (ignored: never imported)")
    return flags


def shadow_flags(student: Path) -> list[str]:
    """Files at the top of a student's copy named like a module the tests import."""
    flags = []
    try:
        names = sorted(p.name for p in student.iterdir())
    except OSError:
        return flags
    for name in names:
        module = name.removesuffix(".py")
        if (name.endswith(".py") or (student / name).is_dir()) and module in SHADOWING \
                and name != "conftest.py":
            flags.append(f"{name} in the folder's root would shadow `{module}` (ignored)")
    return flags


# A lesson's modules: the student's code, which the grader takes from the student's copy.
MODULE_FILES = tuple(f"{name}.py" for name in course.MODULE_ORDER)


def _syntax_error(source: bytes, name: str = course.MODULE) -> str | None:
    try:
        compile(source, name, "exec", dont_inherit=True)
    except SyntaxError as error:
        return f"{name} line {error.lineno}: {error.msg}"
    except (ValueError, MemoryError, RecursionError) as error:
        return f"{name}: {type(error).__name__}: {error}"
    return None


# --- running -----------------------------------------------------------------------------


class _Bounded:
    """Bytes read from a pipe: the first `limit` kept (or the last, with `tail`)."""

    def __init__(self, limit: int, tail: bool = False) -> None:
        self.limit, self.tail = limit, tail
        self.data = bytearray()
        self.overflow = False

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        if len(self.data) > self.limit:
            self.overflow = True
            if self.tail:
                del self.data[:len(self.data) - self.limit]
            else:
                del self.data[self.limit:]


def execute(command: list[str], *, cwd: Path, env: dict[str, str], timeout: float,
            token: str) -> Raw:
    """Run the command (under its keeper: sandbox.limited) with the report pipe; read
    both pipes with bounds until it ends, or stop it when its time is up."""
    read_end, write_end = os.pipe()
    command = [part.replace("{fd}", str(write_end)) for part in command]
    try:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   pass_fds=(write_end,), start_new_session=True)
    finally:
        os.close(write_end)
    output, report = _Bounded(OUTPUT_LIMIT, tail=True), _Bounded(REPORT_LIMIT)
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ, output)
    selector.register(read_end, selectors.EVENT_READ, report)
    deadline = time.monotonic() + timeout
    timed_out = False
    try:
        while process.poll() is None:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            _pump(selector, min(left, 0.1))
        _stop(process)                  # what the run detached goes with its keeper
        kill_leftovers(token)           # and what outlived the keeper, by its token
        end = time.monotonic() + 2
        while selector.get_map() and time.monotonic() < end:
            _pump(selector, 0.05)       # what was written before the end, not after
    finally:
        _stop(process)
        selector.close()
        process.stdout.close()
        os.close(read_end)
    text = output.data.decode("utf-8", "replace")
    return Raw(None if timed_out else process.returncode, timed_out, text,
               bytes(report.data), report.overflow)


def _pump(selector: selectors.BaseSelector, wait: float) -> None:
    for key, _ in selector.select(wait):
        fd = key.fd
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            chunk = b""
        if chunk:
            key.data.add(chunk)
        else:
            selector.unregister(key.fileobj)


def _stop(process: subprocess.Popen) -> None:
    """End the run and wait for it. Its keeper first, with SIGTERM, so that it kills
    what the run detached before it ends; then the keeper's whole process group (a
    lingering `sleep`, or everything, should the keeper not end in time)."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=KEEPER_SECONDS)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


@dataclass
class Setup:
    """What every run of one grading shares."""

    scratch: Path
    sandboxed: bool
    timeout: float
    expected: dict[str, list[str]] | None      # None: the students' own tests
    # Lesson -> task id -> places its starter raises NotImplementedError (None: unknown),
    # so that an untouched lesson is "not started" though a few of its tests pass for free
    places: dict[str, dict[str, int]] | None = None


def grade_lesson(student: Path, lesson: str, view: Path, setup: Setup) -> Grade:
    """Grade one lesson of one student against `view` (the course's, or the student's own
    tests with --own-tests)."""
    expected = setup.expected[lesson] if setup.expected is not None else None
    total = len(expected) if expected is not None else 0
    folder = student / "lessons" / lesson
    flags = pyc_flags(folder)
    sources: dict[str, bytes] = {}
    for name in MODULE_FILES:
        if name != course.MODULE and not os.path.lexists(folder / name):
            continue        # a module this lesson does not have (agent.py it must)
        try:
            sources[name] = read_module(folder / name)
        except FileNotFoundError:
            return Grade(lesson, "missing", total=total, flags=flags,
                         error=f"no lessons/{lesson}/{name}")
        except (OSError, ValueError) as error:
            why = error.strerror if isinstance(error, OSError) and error.strerror else error
            return Grade(lesson, "error", total=total, flags=flags,
                         error=f"lessons/{lesson}/{name}: {why}")
        if problem := _syntax_error(sources[name], name):
            return Grade(lesson, "syntax error", total=total, flags=flags, error=problem)
    run = Path(os.path.realpath(_fresh_folder(setup.scratch)))
    try:
        raw, canary = _run(run, view, lesson, sources, setup)
    finally:
        shutil.rmtree(run, ignore_errors=True)
    written = None
    if setup.places is not None and lesson in setup.places:
        mine = raises_in(source.decode("utf-8", "replace") for source in sources.values())
        written = written_against(mine, setup.places[lesson])
    grade = judge(raw, lesson, expected, canary, setup.timeout, written)
    grade.flags = flags + grade.flags
    return grade


def read_module(path: Path) -> bytes:
    """A student's module, read once: a plain file (never a link, a pipe or a device,
    which could make the grader read forever) of at most AGENT_LIMIT bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise ValueError("a link, not a plain file") from None
        raise
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise ValueError("not a plain file (a link?)")
        source = handle.read(AGENT_LIMIT + 1)
    if len(source) > AGENT_LIMIT:
        raise ValueError(f"over {AGENT_LIMIT} bytes")
    return source


def _fresh_folder(scratch: Path) -> Path:
    import tempfile
    run = Path(tempfile.mkdtemp(prefix="run-", dir=scratch))
    # Without the sandbox, lesson tests run as root drop to `nobody` in a child, which
    # must still reach its own files below here: searchable, not listable.
    run.chmod(0o711)
    return run


def _run(run: Path, view: Path, lesson: str, sources: dict[str, bytes],
         setup: Setup) -> tuple[Raw, str]:
    root = run / "root"
    root.mkdir()
    for name in ("conftest.py", "pyproject.toml"):
        if (view / name).is_file():
            shutil.copy2(view / name, root / name)
    lesson_dir = root / "lessons" / lesson
    course_files = copy_files(view / "lessons" / lesson, lesson_dir)
    for name, source in sources.items():
        (lesson_dir / name).write_bytes(source)
    token = secrets.token_hex(6)
    canary = f"test_{token}.py"
    (lesson_dir / canary).write_text(
        f"def test_{token}():\n    assert False, {CANARY_MESSAGE!r}\n", encoding="utf-8")
    tests = test_files(view, lesson)
    inside = sandbox.SANDBOX_ROOT if setup.sandboxed else str(root)
    private = "/tmp" if setup.sandboxed else str(run / "tmp")
    (run / "tmp").mkdir()
    pytest_command = [sys.executable, "-P", "-m", "pytest",
                      *[f"lessons/{lesson}/{name}" for name in [*tests, canary]],
                      *pytest_options(inside), "--tb=short", "--continue-on-collection-errors",
                      "--impl", f"{inside}/lessons/{lesson}/{course.MODULE}",
                      "-p", "sessionlab.grading.channel", "--sessionlab-grade-fd", "{fd}"]
    if setup.sandboxed:
        files = [*course_files, *sources, canary]
        command = sandbox.bwrap_args(root, lesson, files) + pytest_command
    else:
        command = pytest_command
    env = sandbox.clean_environment({
        "HOME": private, "TMPDIR": private, "SESSIONLAB_ROOT": inside,
        "PYTHONPYCACHEPREFIX": f"{private}/pycache",     # no .pyc but the run's own
        TOKEN_VARIABLE: token})
    raw = execute(sandbox.limited(command, setup.timeout), cwd=root, env=env,
                  timeout=setup.timeout, token=token)
    return raw, f"lessons/{lesson}/{canary}::test_{token}"


# --- the verdict -------------------------------------------------------------------------


def _documents(data: bytes) -> tuple[dict | None, int, str | None]:
    """The first JSON report on the pipe, how many there were, and what was wrong."""
    lines = [line for line in data.split(b"\n") if line.strip()]
    if not lines:
        return None, 0, None
    try:
        first = json.loads(lines[0])
    except ValueError:
        return None, len(lines), "the report is not the kit's JSON"
    if not isinstance(first, dict) or not isinstance(first.get("results"), list):
        return None, len(lines), "the report is not the kit's JSON"
    return first, len(lines), None


def _outcomes(results: list) -> tuple[dict[str, Outcome], list[dict]]:
    """Outcome per node id (a failure in any phase fails the test), and collection errors."""
    merged: dict[str, Outcome] = {}
    broken = []
    for entry in results:
        if not isinstance(entry, dict):
            continue
        nodeid = str(entry.get("nodeid", ""))
        if entry.get("when") == "collect" or "::" not in nodeid:
            broken.append(entry)
            continue
        tasks = entry.get("tasks")
        new = Outcome(nodeid=nodeid, name=str(entry.get("name") or nodeid.split("::")[-1]),
                      outcome=str(entry.get("outcome", "failed")),
                      tasks=[str(t) for t in tasks] if isinstance(tasks, list) else [],
                      exception=_text(entry.get("exception")),
                      message=_text(entry.get("message")), key=bool(entry.get("key")))
        old = merged.get(nodeid)
        if old is None or (old.outcome == "passed" and new.outcome != "passed"):
            merged[nodeid] = new
    return merged, broken


def _text(value) -> str | None:
    return None if value is None else str(value)


def judge(raw: Raw, lesson: str, expected: list[str] | None, canary: str,
          timeout: float, written: dict[str, bool] | None = None) -> Grade:
    total = len(expected) if expected is not None else 0
    if raw.timed_out:
        return Grade(lesson, "timeout", total=total, error=(
            f"timed out after {timeout:g} s (an endless loop, or a process that never ends?)"))
    document, count, bad = _documents(raw.report)
    if raw.report_overflow:
        return Grade(lesson, "suspect", total=total,
                     error=f"the report is over {REPORT_LIMIT} bytes: no honest run's is")
    if document is None:
        if bad:
            return Grade(lesson, "suspect", total=total, error=bad)
        return Grade(lesson, "error", total=total, error=(
            f"exited early: pytest stopped without a report (exit status {raw.returncode})"
            + _last_line(raw.output)))
    reasons = []
    if count > 1:
        reasons.append(f"{count} reports were written to the grader's pipe, not one")
    if document.get("exitstatus") != raw.returncode:
        reasons.append(f"the report says exit status {document.get('exitstatus')!r}, "
                       f"pytest ended with {raw.returncode}")
    if raw.returncode == 0:
        reasons.append("pytest exited as if every test passed, the grader's failing "
                       "test too")
    merged, broken = _outcomes(document["results"])
    check = merged.pop(canary, None)
    if check is None or check.passed:
        reasons.append("the grader's own failing test was reported "
                       + ("missing" if check is None else check.outcome))
    if expected is not None:
        unknown = [n for n in merged if n not in set(expected)]
        absent = [n for n in expected if n not in merged]
        if unknown:
            reasons.append(f"the report names {len(unknown)} test(s) the course does not "
                           f"have ({unknown[0]})")
        if absent and not broken:
            reasons.append(f"{len(absent)} of the course's {total} tests are missing from "
                           "the report (the run ended early?)")
    if reasons:
        return Grade(lesson, "suspect", total=total, error="; ".join(reasons))
    if broken:
        message = str(broken[0].get("message") or "").strip().splitlines()
        return Grade(lesson, "error", total=total, error="the tests could not be collected"
                     + (f": {message[-1]}" if message else ""))
    tests = [merged[n] for n in expected] if expected is not None else list(merged.values())
    if not tests:
        return Grade(lesson, "error", total=total,
                     error=f"no tests ran (pytest exit status {raw.returncode})")
    result = LessonResult(lesson, "impl", tests=tests, written=written)
    return Grade(lesson, result.state, passed=result.passed_count, total=len(tests),
                 tests=tests, written=written)


def _last_line(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return f": {lines[-1][:200]}" if lines else ""
