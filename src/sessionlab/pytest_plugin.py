"""The lesson machinery inside pytest.

* `--solution` (or SESSIONLAB_SOLUTION=1) runs a lesson's tests against `solutions/NN_topic`
  instead of the student's `lessons/NN_topic`; `--impl PATH` (or SESSIONLAB_IMPL) against any
  agent.py, which is how the maintainers' check runs early lessons' tests on later solutions.
* Fixtures: `lesson` (the module under test, imported per test, never at the top of a file),
  `model` (a fresh scripted model), `client`, `town`, `sessions` (an empty sessions folder).
* A failure names its task and where to read more; a task not written yet is reported in one
  line instead of a traceback.
* `--sessionlab-report FILE` writes every outcome as JSON for the command line and the grader.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from . import calls, course, hangs, lazy_sdk, starters, tracebacks

# Before anything imports openai: a lesson's cold run then loads the SDK's chat-completions
# parts only, not every API it covers (most of a second; see sessionlab.lazy_sdk).
lazy_sdk.install()

# Lesson 11's server (a throwaway PostgreSQL cluster, or SESSIONLAB_POSTGRES_URL): the
# fixtures `postgres_server` and `database`, registered here by being imported.
from .pgserver import database, postgres_server  # noqa: F401
from .scripted import ScriptedModel
from .town import Town

REPORT_KEY = pytest.StashKey[list]()
KILLED_KEY = pytest.StashKey[set]()
HUNG_KEY = pytest.StashKey[set]()     # the implementations a test has timed out on
RECORDER_KEY = pytest.StashKey["calls.CallRecorder | None"]()   # --sessionlab-calls
FAILED_KEY = pytest.StashKey[list]()   # the tests that failed, in the order they did
IMPORT_FAILED_KEY = pytest.StashKey[bool]()   # the module under test did not import
IMPL_PATHS_KEY = pytest.StashKey[list]()   # the --impl paths, resolved
# Under --task: task not written yet -> how many of the chosen tasks' tests wait for it
WAITING_KEY = pytest.StashKey[dict]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sessionlab")
    group.addoption("--solution", action="store_true", default=_env_flag("SESSIONLAB_SOLUTION"),
                    help="run lesson tests against solutions/NN_topic instead of lessons/NN_topic")
    group.addoption("--impl", default=os.environ.get("SESSIONLAB_IMPL"), metavar="PATH",
                    help="run lesson tests against this agent.py (maintainers: later solutions on "
                         "earlier tests); several paths joined by ':' run every test once per path, "
                         "with test ids [impl00], [impl01] ...")
    group.addoption("--task", action="append", default=[], metavar="NN.K", dest="only_tasks",
                    help="run only the tests of this task (repeat for several): "
                         "`pytest lessons/06_blobs --task 06.1`")
    group.addoption("--sessionlab-report", default=None, metavar="FILE",
                    help="write each test's outcome and task as JSON to FILE")
    group.addoption("--sessionlab-calls", default=None, metavar="FILE",
                    help="write, for each test, the lesson functions it calls and "
                         "the lines it reaches (or 'all'), as JSON to FILE: see "
                         "sessionlab.calls")
    group.addoption("--sessionlab-only", default=None, metavar="FILE",
                    help="JSON {implementation path: [test names]}: run only those tests "
                         "on those implementations (the others run every test)")
    group.addoption("--sessionlab-stop-after-failure", action="store_true",
                    default=False,
                    help="skip the rest of an implementation's tests once one fails "
                         "(the "
                         "mutation pass: a mutant is killed by its first failure)")


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes", "on")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[REPORT_KEY] = []
    config.stash[KILLED_KEY] = set()
    config.stash[HUNG_KEY] = set()
    config.stash[FAILED_KEY] = []
    config.stash[WAITING_KEY] = {}
    config.stash[RECORDER_KEY] = (
        calls.CallRecorder(config.rootpath / "solutions")
        if config.getoption("--sessionlab-calls") else None)
    config.addinivalue_line("markers", "task(id): the lesson task a test checks, such as task('03.1')")
    config.addinivalue_line("markers", "key: a test later lessons' solutions must still pass")


# --- which module a test runs against ----------------------------------------------------


def lesson_folder_of(path: Path) -> Path | None:
    for folder in (path.parent, *path.parents):
        if course.LESSON_FOLDER.match(folder.name) and folder.parent.name == "lessons":
            return folder
    return None


def impl_paths(config: pytest.Config) -> list[Path]:
    """The --impl paths, resolved once: each test of a maintainers' run asks for them,
    and resolving forty paths (an lstat for each part of each) is not free."""
    if (found := config.stash.get(IMPL_PATHS_KEY, None)) is None:
        impl = config.getoption("--impl")
        found = config.stash[IMPL_PATHS_KEY] = [
            Path(part).resolve() for part in impl.split(os.pathsep) if part] if impl else []
    return found


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Several implementations in one process: the maintainers' check runs every wrong
    # implementation of a lesson this way instead of paying pytest's start-up per mutant.
    paths = impl_paths(metafunc.config)
    if len(paths) > 1 and "lesson" in metafunc.fixturenames:
        metafunc.parametrize("lesson", paths, indirect=True,
                             ids=[f"impl{i:02d}" for i in range(len(paths))])


def module_under_test(config: pytest.Config, test_path: Path) -> Path:
    if paths := impl_paths(config):
        return paths[0]
    folder = lesson_folder_of(test_path)
    if folder is None:
        raise course.CourseError(f"{test_path} is not inside lessons/NN_topic/")
    if config.getoption("--solution"):
        return folder.parent.parent / "solutions" / folder.name / course.MODULE
    return folder / course.MODULE


@pytest.fixture
def lesson(request: pytest.FixtureRequest) -> ModuleType:
    """The lesson module under test: the student's agent.py, or the solution with --solution."""
    if hasattr(request, "param"):   # one of several --impl paths
        index = impl_paths(request.config).index(request.param)
        path, name = request.param, f"sessionlab_impl.impl{index:02d}"
    else:
        path = module_under_test(request.config, Path(str(request.path)))
        side = "impl" if request.config.getoption("--impl") else (
            "solution" if request.config.getoption("--solution") else "lesson")
        name = f"sessionlab_impl.{side}_{path.parent.name}"
    try:
        return course.load_module(path, name)
    except BaseException:
        # Reported as such: the maintainers' check tells a mutant that does not import
        # (a broken wrong.toml edit) from one a test caught.
        request.node.stash[IMPORT_FAILED_KEY] = True
        raise


@pytest.fixture
def model() -> ScriptedModel:
    """A fresh scripted model with an empty script: add steps with `model.add(...)`."""
    return ScriptedModel()


@pytest.fixture
def client(model: ScriptedModel):
    """A real openai.OpenAI client talking to `model` (no network)."""
    return model.client()


@pytest.fixture
def town() -> Town:
    return Town()


@pytest.fixture
def sessions(tmp_path: Path) -> Path:
    """An empty folder for session logs."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    return folder


def pytest_collection_modifyitems(config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    # A test that blocks (a flock without LOCK_NB, a lock never released) ends on its
    # own.
    hangs.install(config, items,
                  lambda item: lesson_folder_of(Path(str(item.path))) is not None)
    if wanted := config.getoption("only_tasks"):
        _keep_tasks(config, items, wanted)
    if only := config.getoption("--sessionlab-only"):
        _keep_only(config, items, json.loads(Path(only).read_text(encoding="utf-8")))


def _keep_only(config: pytest.Config, items: list[pytest.Item],
               only: dict[str, list[str]]) -> None:
    """--sessionlab-only: on each implementation it names, only the tests it lists
    (by function name); the tests of the others all run."""
    keep, dropped = [], []
    # A run on one implementation gives its tests no implementation of their own
    # (_implementation is ""): the selection's one entry is then that run's.
    alone = next(iter(only.values())) if len(only) == 1 else None
    for item in items:
        impl = _implementation(item)
        wanted = only.get(impl) if impl else alone
        named = getattr(item, "originalname", item.name)
        (keep if wanted is None or named in wanted else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def _keep_tasks(config: pytest.Config, items: list[pytest.Item],
                wanted: list[str]) -> None:
    """--task NN.K: the tests marked with one of the tasks named, the others deselected
    (a task no test is marked with is refused, rather than running nothing in silence)."""
    marked = {task for item in items for task in _tasks(item)}
    unknown = [task for task in wanted if task not in marked]
    if unknown:
        known = ", ".join(sorted(marked)) or "none"
        raise pytest.UsageError(
            f"--task {', '.join(unknown)}: no test collected here checks "
            f"{'that task' if len(unknown) == 1 else 'those tasks'} (tasks here: {known})")
    keep, dropped = [], []
    for item in items:
        (keep if set(_tasks(item)) & set(wanted) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def _implementation(item: pytest.Item) -> str:
    """Which of several --impl paths a test runs on ("" when there is one)."""
    callspec = getattr(item, "callspec", None)
    return str(callspec.params.get("lesson", "")) if callspec is not None else ""


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """On a mutant that has hung once (several --impl paths: the maintainers' runs),
    the rest of its tests get hangs.HUNG_AGAIN_TIMEOUT: a lock it never lets go, say,
    hangs every test after, and each would wait the whole limit. Before
    pytest-timeout's own wrapper, which reads the limit from the closest marker.

    That limit covers the test function only (func_only): a limit over the whole
    protocol can run out between phases, in pytest's own reporting, where its failure is
    an INTERNALERROR that ends the run and every mutant of the group with it; a test
    that takes about as long as the short limit met that often."""
    if (impl := _implementation(item)) and impl in item.config.stash[HUNG_KEY]:
        item.add_marker(pytest.mark.timeout(hangs.HUNG_AGAIN_TIMEOUT, func_only=True),
                        append=False)
    found = _process_state()
    recorder = item.config.stash[RECORDER_KEY]
    try:
        if recorder is None:
            yield
            return
        # Setup and teardown too: a fixture may call the lesson's code
        failed_before = len(item.config.stash[FAILED_KEY])
        recorder.start()
        try:
            yield
        finally:
            recorder.stop(getattr(item, "originalname", item.name),
                          passed=len(item.config.stash[FAILED_KEY]) == failed_before)
    finally:
        _restore_process_state(found)


@pytest.hookimpl(tryfirst=True, specname="pytest_runtest_protocol")
def pytest_runtest_protocol_passing_over(item: pytest.Item, nextitem: pytest.Item | None
                                         ) -> bool | None:
    """--sessionlab-stop-after-failure: the tests left of an implementation that has
    failed one are not run at all. A mutant fails on its tenth test of a hundred, and
    a skip reported for each of the other ninety (setup, report, the terminal's "s")
    was a third of a maintainers' run. Only where the next test has the same parent
    (a module, a class): nothing of this one was set up, and what the last one left
    set up is what the next needs; at a boundary pytest's own protocol runs, and
    pytest_runtest_setup skips the test after tearing down what the next does not
    share."""
    if (item.config.getoption("--sessionlab-stop-after-failure")
            and nextitem is not None and nextitem.parent is item.parent
            and _implementation(item) in item.config.stash[KILLED_KEY]):
        return True
    return None


def _process_state() -> tuple[int, int, str]:
    """What lesson code can change for the whole process and a test cannot see undone:
    the recursion limit, the umask, the working folder."""
    umask = os.umask(0o022)
    os.umask(umask)
    return sys.getrecursionlimit(), umask, os.getcwd()


def _restore_process_state(found: tuple[int, int, str]) -> None:
    """Each test starts from the process as the one before found it: code that leaves
    the recursion limit raised (deeply nested JSON then overflows the C stack and kills
    the process) or the umask changed fails its own test, not every test after it, nor,
    in the maintainers' runs, every mutant after it in the same process."""
    limit, umask, cwd = found
    sys.setrecursionlimit(limit)
    os.umask(umask)
    try:
        os.chdir(cwd)
    except OSError:     # a test removed the folder it started in: stay where it left us
        pass


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.config.getoption("--sessionlab-stop-after-failure") \
            and _implementation(item) in item.config.stash[KILLED_KEY]:
        pytest.skip("this implementation already failed a test")


# --- failures that teach ------------------------------------------------------------------


def _tasks(item: pytest.Item) -> list[str]:
    return [mark.args[0] for mark in item.iter_markers("task")]


def _lesson_of(item: pytest.Item) -> course.Lesson | None:
    folder = lesson_folder_of(Path(str(item.path)))
    return None if folder is None else _lesson_in(folder)


@functools.cache
def _lesson_in(folder: Path) -> course.Lesson | None:
    """The lesson.toml of a lesson folder, read once per run however many tests fail."""
    try:
        return course.load_lesson(folder.parent.parent, folder.name)
    except course.CourseError:
        return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    # Before anything formats it: a hang's traceback may hold an entry without a line,
    # which pytest cannot format (see sessionlab.tracebacks).
    if call.excinfo is not None and tracebacks.give_every_entry_a_line(call.excinfo.value):
        call.excinfo = pytest.ExceptionInfo.from_exception(call.excinfo.value)
    lesson = _lesson_of(item) if call.excinfo is not None else None
    worded = _worded_failure(call.excinfo, item) if lesson is not None else None
    import_failed = (lesson is not None and call.when == "setup"
                     and item.stash.get(IMPORT_FAILED_KEY, False))
    words_replace_traceback = lesson is not None and (import_failed or (
        call.when == "call" and (_not_written(call.excinfo) or worded is not None)))
    if words_replace_traceback:
        # pytest would format the traceback (parsing the test file for each of its
        # frames) only for _teach to put words in its place: on a starter, where every
        # test fails, that formatting was most of the run.
        # (A failed setup is formatted by _repr_failure_py, a failed call by repr_failure.)
        item.repr_failure = item._repr_failure_py = _placeholder_repr
    try:
        outcome = yield
    finally:
        if words_replace_traceback:
            del item.repr_failure, item._repr_failure_py
    report: pytest.TestReport = outcome.get_result()
    if waited := _waits_for(item, call, report):
        # `--task 04.1` asks how 04.1 stands: a test of it that also needs a later task,
        # not written yet, says nothing of 04.1 so far. Listed as a failure it buried
        # the task's own failures (55 of them, around 12 real ones, in a trial).
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0,
                           f"waits for task {waited}, not written yet")
        waiting = item.config.stash[WAITING_KEY]
        waiting[waited] = waiting.get(waited, 0) + 1
    entry: dict[str, Any] = {"nodeid": item.nodeid, "name": item.name, "when": report.when,
                             "outcome": report.outcome, "tasks": _tasks(item),
                             "key": item.get_closest_marker("key") is not None,
                             "seconds": round(report.duration, 3)}
    if report.failed:
        item.config.stash[KILLED_KEY].add(_implementation(item))
        item.config.stash[FAILED_KEY].append(item.nodeid)
    if report.failed and call.excinfo is not None:
        if item.stash.get(IMPORT_FAILED_KEY, False):
            entry["import_failed"] = True
        entry["exception"] = call.excinfo.typename
        entry["message"] = _plain_message(call.excinfo)
        entry["raised_in"], entry["raised_at"] = _raised_in(call.excinfo, item)
        entry["in_function"] = _student_function(call.excinfo)
        if isinstance(blamed := getattr(call.excinfo.value, "task", None), str):
            entry["blames"] = blamed        # testing.fail_in
        if hangs.is_timeout(call.excinfo):
            item.config.stash[HUNG_KEY].add(_implementation(item))
            entry["exception"] = "Timeout"
            entry["message"] = hangs.explain(call.excinfo, item.name,
                                             hangs.limit_of(item))
            report.longrepr = entry["message"]
        if import_failed:
            report.longrepr = _does_not_import(item, call.excinfo, lesson)
        elif lesson is not None:
            _teach(report, item, call.excinfo, lesson, worded)
    if report.when == "call" or report.failed or report.skipped:
        item.config.stash[REPORT_KEY].append(entry)


def _waits_for(item: pytest.Item, call: pytest.CallInfo,
               report: pytest.TestReport) -> str | None:
    """Under --task: the task, not written yet and not one of those chosen, that this
    test failed on (a test of a chosen task that needs a later one too); else None."""
    chosen = item.config.getoption("only_tasks")
    if not (chosen and report.failed and call.when == "call"
            and call.excinfo is not None and _not_written(call.excinfo)):
        return None
    missing = _missing_task(call.excinfo)
    return missing if missing not in chosen else None


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int,
                            config: pytest.Config) -> None:
    chosen = " and ".join(config.getoption("only_tasks"))
    for task, count in sorted(config.stash[WAITING_KEY].items()):
        tests, need, run = (("test", "needs", "it runs") if count == 1
                            else ("tests", "need", "they run"))
        terminalreporter.write_line(
            f"{count} {tests} of {chosen} also {need} task {task}, not written yet: "
            f"skipped, not failed; {run} once {task} is written.")


def _not_written(excinfo: pytest.ExceptionInfo) -> bool:
    """A starter's NotImplementedError: "task NN.K is not written yet ..."."""
    return (excinfo.errisinstance(NotImplementedError)
            and starters.placeholder_task(str(excinfo.value)) is not None)


def _missing_task(excinfo: pytest.ExceptionInfo) -> str:
    """The task a placeholder (see _not_written) says is not written yet."""
    return starters.placeholder_task(str(excinfo.value)) or "?"


def _placeholder_repr(excinfo: pytest.ExceptionInfo, *args: Any, **kwargs: Any) -> str:
    return str(excinfo.value)


def _student_function(excinfo: pytest.ExceptionInfo) -> str | None:
    """The lesson code's function the failure came out of (innermost frame in one of
    the lesson's modules)."""
    for entry in reversed(excinfo.traceback):
        if course.is_lesson_module(Path(str(entry.path))):
            return entry.name
    return None


def _raised_in(excinfo: pytest.ExceptionInfo, item: pytest.Item) -> tuple[str, str]:
    """Whose code raised, and at which line: "module" (the lesson's modules), "test"
    (the test file), or "other" (the kit, pytest). Library frames count for the code
    that called them."""
    test_file = Path(str(item.path)).resolve()
    for entry in reversed(excinfo.traceback):
        path = Path(str(entry.path))
        if course.is_lesson_module(path):
            return "module", f"{path.name}:{entry.lineno + 1}"
        if path.resolve() == test_file:
            return "test", f"{path.name}:{entry.lineno + 1}"
    return "other", ""


def _plain_message(excinfo: pytest.ExceptionInfo) -> str:
    text = str(excinfo.value).strip()
    # pytest's assertion rewriting appends "assert ..." detail after the message; keep the words.
    return text.split("\nassert ")[0].strip() or excinfo.typename


def _teach(report: pytest.TestReport, item: pytest.Item, excinfo: pytest.ExceptionInfo,
           lesson: course.Lesson, worded: str | None) -> None:
    """Words for a lesson test's failure: its task, what to run next, and `worded` (the
    test's own message, see _worded_failure) in place of its traceback."""
    tasks = [t for t in _tasks(item) if t.startswith(lesson.number + ".")] or _tasks(item)
    order = {task.id: i for i, task in enumerate(lesson.tasks)}
    tasks.sort(key=lambda t: order.get(t, len(order)))     # in the lesson's order
    blamed = getattr(excinfo.value, "task", None)           # testing.fail_in
    if isinstance(blamed, str) and blamed in order:
        tasks = [blamed]        # the test told whose code failed it
    where = f"lesson {lesson.name}"
    if len(tasks) == 1:
        try:
            where += f", task {tasks[0]} {lesson.task(tasks[0]).title}"
        except course.CourseError:
            where += f", task {tasks[0]}"
    elif tasks:     # titles would bury the point; `sessionlab task NN.K` shows each
        where += f", tasks {', '.join(tasks[:-1])} and {tasks[-1]}"
    advice = _advice(lesson, tasks[0] if tasks else None, also=tasks[1:])
    if _not_written(excinfo):
        missing = _missing_task(excinfo)
        advice = _advice(lesson, missing)
        if tasks and missing not in tasks:
            # A test of a finished task that runs into a later one: name the one to
            # write, and the test's other tasks still unwritten, so that the student
            # does not learn of them one run at a time.
            others = [task for task in _unwritten(item, lesson)
                      if task != missing and task not in tasks]   # those: named above
            more = (f" Also not written yet in this lesson: {', '.join(others)} (this "
                    f"test may need {'it' if len(others) == 1 else 'them'} too)."
                    if others else "")
            # Under -x this may be the first test a student meets while writing the
            # earlier task: say how to see that task's own tests meanwhile.
            own = (f" Until then, `pytest lessons/{lesson.name} --task {tasks[0]}` shows "
                   f"how the rest of task {tasks[0]} stands.")
            report.longrepr = (f"{_student_frame(excinfo, lesson)}: {excinfo.value}\n"
                               f"This test checks {where}, and it needs task "
                               f"{missing} too, which is not written yet. Write task "
                               f"{missing} and run the tests again.{own}{more}\n{advice}")
            return
        if _said_before(item, missing):
            # The first run of a starter fails every test this way: one line each after
            # the first, so that the run's output stays readable.
            report.longrepr = (f"{_student_frame(excinfo, lesson)}: task {missing} is not "
                               f"written yet (as above).")
            return
        part = (f"task {missing}, which is not written yet" if len(tasks) > 1
                else "that part of the lesson's code")
        # Once per task, the command that runs its tests alone: a student working
        # through the lesson task by task need not read past the other tasks' failures.
        alone = f"pytest lessons/{lesson.name} --task {missing}"
        report.longrepr = (f"{_student_frame(excinfo, lesson)}: {excinfo.value}\n"
                           f"This test checks {where}. Write {part}, and run the tests "
                           f"again (its tests alone: `{alone}`).\n{advice}")
        return
    if worded:
        # The test said what went wrong in words: those words, not its source, come first.
        report.longrepr = worded
    report.sections.append(("what this test checks", f"{where}\n{advice}"))


def _does_not_import(item: pytest.Item, excinfo: pytest.ExceptionInfo,
                     lesson: course.Lesson) -> str:
    """The lesson's code raised while it was imported: no test of the lesson can run. One
    error, said in full once (where, what) and in one line for every later test, instead
    of the same import traceback under each of the lesson's tests."""
    error, source = excinfo.value, ""
    if isinstance(error, SyntaxError) and error.filename:
        # str() of a SyntaxError repeats the place: its msg, and the line it is in.
        where = f"{_shown(Path(error.filename))}:{error.lineno}"
        error, source = error.msg, f"\n    {(error.text or '').strip()}"
    else:
        where = next((f"{_shown(Path(str(entry.path)))}:{entry.lineno + 1}"
                      for entry in reversed(excinfo.traceback)
                      if course.is_lesson_module(Path(str(entry.path)))),
                     f"lessons/{lesson.name}")
    said = f"{where}: {excinfo.typename}: {error}"
    if _said_before(item, said):
        return f"{where}: the lesson's code does not import (as above)."
    return (f"{said}{source}\nThe lesson's code does not import, so none of its tests can run. "
            f"Fix this line first, then run the tests again.")


def _said_before(item: pytest.Item, key: str) -> bool:
    """Whether a failure with this key was already reported in full in this run."""
    said = item.config.stash.setdefault(SAID_KEY, set())
    if key in said:
        return True
    said.add(key)
    return False


SAID_KEY = pytest.StashKey[set]()


def _worded_failure(excinfo: pytest.ExceptionInfo, item: pytest.Item) -> str | None:
    """A test's own failure that carries its message (pytest.fail, or an assert with a
    message), as the test's line and the message alone: pytest would print the test's
    source first, some forty lines above the words. None for anything else (a bare assert,
    whose introspection is all it says, or an error out of the lesson's code, whose
    traceback is the student's)."""
    raised_in, at = _raised_in(excinfo, item)
    if raised_in != "test" or hangs.is_timeout(excinfo):    # a hang has words of its own
        return None
    if excinfo.errisinstance(pytest.fail.Exception):
        message = excinfo.value.msg
    elif excinfo.errisinstance(AssertionError):
        message = str(excinfo.value).split("\nassert ")[0].strip()
        if not message or message.startswith("assert "):
            return None
    else:
        return None
    return f"{at}: {message}"


def _unwritten(item: pytest.Item, lesson: course.Lesson) -> list[str]:
    """The lesson's tasks that the module under test has not written yet ([] when that
    cannot be told): asked only when a test has run into a task not written."""
    key = (lesson.name, str(item.path))
    cache = item.config.stash.setdefault(UNWRITTEN_KEY, {})
    if key not in cache:
        try:
            from .cli.runner import written_tasks
            module = module_under_test(item.config, Path(str(item.path)))
            written = written_tasks(lesson, module) or {}
            cache[key] = [task for task, done in written.items() if not done]
        except Exception:       # only words are at stake: never fail a report for them
            cache[key] = []
    return cache[key]


UNWRITTEN_KEY = pytest.StashKey[dict]()


# The site's pages as `mkdocs serve` shows them: docs/lessons/NN.md holds only
# directives, so a failure points at words (the hint command) and the built page.
SITE = "http://127.0.0.1:8000"


def _advice(lesson: course.Lesson, task_id: str | None, also: list[str] = ()) -> str:
    """Three short lines: what the task asks (its contract, which costs no hint), the hint
    command for it, and the lesson's page on the site. A test of several tasks (`also`)
    cannot tell whose code failed it: the first line names each, so that the advice never
    points at one task only while another's code is wrong."""
    page = f"{SITE}/lessons/{lesson.name}/"
    if task_id and task_id.startswith(lesson.number + ".") and not also:
        page += f"#task-{task_id.replace('.', '-')}"   # the task's heading on the page
    if also:
        asks = (", ".join(f"`sessionlab task {each}`" for each in [task_id or lesson.number, *also])
                + " (what each asks: this test checks them together).")
        # Which of them is wrong, this one failure cannot tell; the lesson's hint command
        # weighs all of its failures to choose.
        hints = (f"`sessionlab hint {lesson.number}` (for the task this lesson's failures "
                 "point at; one more each time you run it).")
    else:
        asks = f"`sessionlab task {task_id or lesson.number}` (what it asks)."
        hints = (f"`sessionlab hint {f'--task {task_id}' if task_id else lesson.number}` "
                 "(one more each time you run it).")
    return f"Task: {asks}\nHints: {hints}\nPage: `mkdocs serve`, then {page}"


def _student_frame(excinfo: pytest.ExceptionInfo, lesson: course.Lesson) -> str:
    """Where the student's unwritten task raised: the frame in a lesson module, or (raised
    in another thread or process, and raised again here) the starter's line that raises
    it, found by the task's number in the lesson's modules."""
    for entry in reversed(excinfo.traceback):
        path = Path(str(entry.path))
        if course.is_lesson_module(path):
            return f"{_shown(path)}:{entry.lineno + 1} in {entry.name}"
    marker = f"TODO({_missing_task(excinfo)})" if _not_written(excinfo) else None
    for path in sorted(lesson.folder.glob("*.py")) if marker else ():
        if not path.name.startswith("test_") and marker in _text(path):
            return str(_shown(path))
    return f"lessons/{lesson.name}"


def _shown(path: Path) -> Path:
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    outcome = yield
    report: pytest.CollectReport = outcome.get_result()
    if report.failed:
        # Recorded so the check can tell "import error" from "not done yet".
        collector.config.stash[REPORT_KEY].append({
            "nodeid": report.nodeid, "when": "collect", "outcome": "error", "tasks": [],
            "exception": "CollectionError", "message": str(report.longrepr)[-2000:]})


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if (recorder := session.config.stash[RECORDER_KEY]) is not None:
        Path(session.config.getoption("--sessionlab-calls")).write_text(
            json.dumps(recorder.record()), encoding="utf-8")
        recorder.close()
    target = session.config.getoption("--sessionlab-report")
    if not target:
        return
    results = session.config.stash[REPORT_KEY]
    Path(target).write_text(json.dumps({"exitstatus": int(exitstatus), "results": results}, indent=1),
                            encoding="utf-8")
