"""A test that never ends is a failure with a reason, not a frozen terminal.

Every lesson test runs under pytest-timeout (`LESSON_TEST_TIMEOUT` seconds unless the
run sets its own `--timeout`). When one runs out, pytest-timeout interrupts it with
SIGALRM and fails it with "Timeout (>30s) from pytest-timeout." at the line the test was
stuck on. `explain` turns that into words a student can act on: which test, how long,
the innermost line of the lesson's own code that was running, the call it was waiting
in, and what usually makes that call wait forever.
"""

from __future__ import annotations

import ast
import functools
import os
from pathlib import Path

import pytest

from . import syntax
from .course import is_lesson_module

# Far above anything a correct solution needs: the slowest lesson tests (real processes
# in lesson 05) take a few seconds on a loaded two-core machine.
LESSON_TEST_TIMEOUT = 30.0
# The limit of each later test on a mutant that has already hung (the maintainers' runs
# of many mutants): it is caught, and its other hangs need only be seen to be there. A
# slow test cut short here (lesson 05's waits take about a second) fails after the
# mutant's first failure, so it changes neither whether the mutant is caught nor by
# which test first; the corpus of lesson 05 spent half its time in these waits at 3 s.
HUNG_AGAIN_TIMEOUT = 1.0

TIMEOUT_PREFIX = "Timeout (>"  # pytest-timeout's failure message starts so

# The call a test was stuck in -> what usually makes it wait forever. Matched on the
# last part of the called name (`fcntl.flock` -> "flock").
BLOCKING_CALLS = {
    "flock": "a lock taken without LOCK_NB waits forever while another holder keeps it",
    "lockf": "a lock taken without LOCK_NB waits forever while another holder keeps it",
    "acquire": "a lock that is never released makes the next acquire wait forever "
    "(release it in a `finally`, or give acquire a timeout)",
    "wait": "it waits for a process, thread or event that never finishes",
    "join": "it waits for a thread or process that never finishes",
    "communicate": "it waits for a child process that never exits",
    "sleep": "a retry loop that never gives up (give it a deadline)",
    "read": "it reads from something that never sends more (a pipe nobody closes?)",
    "readline": "it reads from something that never sends a whole line",
    "recv": "it reads from a socket that never sends more",
    "accept": "it waits for a connection that never comes",
    "get": "it waits on a queue nobody puts into",
    "select": "it waits for a descriptor that never becomes ready",
    "poll": "it waits for a descriptor that never becomes ready",
    "open": "opening a FIFO (a named pipe) waits until something opens its other end",
    # Names as common as `run` are known by their module: the lesson's own Agent.run
    # waits for nothing
    "subprocess.run": "it waits for a child process that never exits",
    "subprocess.check_output": "it waits for a child process that never exits",
    "waitpid": "it waits for a child process that never exits",
    "connect": "it waits for a connection that never comes",
    "execute": "the database makes a statement wait while another transaction holds "
    "what it needs",
}


@functools.cache
def _machinery_folders() -> tuple[Path, ...]:
    """Where the machinery's frames live (pytest, pluggy, pytest-timeout, this kit)."""
    import _pytest
    import pluggy

    folders = [
        Path(_pytest.__file__).parent,
        Path(pluggy.__file__).parent,
        Path(__file__).parent,
    ]
    try:
        import pytest_timeout

        folders.append(Path(pytest_timeout.__file__))
    except ImportError:
        pass
    return tuple(folder.resolve() for folder in folders)


def is_timeout(excinfo: pytest.ExceptionInfo) -> bool:
    return excinfo.errisinstance(pytest.fail.Exception) and str(
        excinfo.value
    ).startswith(TIMEOUT_PREFIX)


def _calls_in(statement: str) -> list[str]:
    """Called names in a line of source, outermost first (`fcntl.flock(fd, ...)` ->
    fcntl.flock)."""
    try:
        tree = syntax.parse(statement.strip())
    except SyntaxError:
        return []
    return [
        ast.unparse(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)
    ]


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return path.name


def _machinery(path: Path) -> bool:
    path = path.resolve()
    return any(
        path == folder or folder in path.parents for folder in _machinery_folders()
    )


def explain(
    excinfo: pytest.ExceptionInfo,
    test_name: str,
    seconds: float | None,
) -> str:
    """What a test that ran out of time was doing, in one paragraph."""
    entries = [
        entry for entry in excinfo.traceback if not _machinery(Path(str(entry.path)))
    ]
    limit = f"{seconds:g} s" if seconds else "its time limit"
    head = f"test {test_name} did not finish in {limit}"
    if not entries:
        return head + "."
    innermost = entries[-1]
    # The lesson's code: any of its modules (agent.py, log.py, lock.py ...)
    student = [e for e in entries if is_lesson_module(Path(str(e.path)))]
    tests = [e for e in entries if Path(str(e.path)).name.startswith("test_")]
    anchor = student[-1] if student else (tests[-1] if tests else innermost)
    where = f"{_shown(Path(str(anchor.path)))}:{anchor.lineno + 1}"
    statement = str(anchor.statement).strip()
    # The call the program was blocked in: a library function below the anchor, or a
    # call made on the anchor's own line (a C function such as fcntl.flock has no
    # frame).
    if innermost is not anchor:
        below = entries[entries.index(anchor) + 1]
        path = Path(str(below.path))
        module = path.parent.name if path.stem == "__init__" else path.stem
        call = f"{module}.{below.name}"
    else:
        calls = _calls_in(statement)
        call = calls[0] if calls else ""
    short = call.rsplit(".", 1)[-1]
    if not call:
        text = (
            f"{head}: it was still running at {where} (`{statement}`), which looks "
            f"like a "
            "loop whose exit condition never becomes true"
        )
    elif call not in BLOCKING_CALLS and short not in BLOCKING_CALLS:
        # Caught in a call that returns by itself (mkstemp, a hash): saying it "was
        # waiting" there sends the student to the call, when what never ends is the
        # code that calls it again and again.
        text = (
            f"{head}: it was in {call} at {where} (`{statement}`) when its time ran "
            f"out; {short} does not wait by itself, so the likely cause is a loop "
            "around this line that never ends"
        )
    else:
        text = f"{head}: it was waiting in {call} at {where} (`{statement}`)"
        reason = BLOCKING_CALLS.get(call) or BLOCKING_CALLS.get(short)
        if short in ("flock", "lockf") and "LOCK_NB" in statement:
            reason = (
                "it was called with LOCK_NB, so it is the loop around it that never "
                "gives up"
            )
        if reason:
            text += f": {reason}"
    if not student and tests:
        text += (
            ". The test itself was waiting there, on something the lesson's code "
            "started or should have finished"
        )
    return text + "."


def install(config: pytest.Config, items: list[pytest.Item], in_lesson) -> None:
    """Give every lesson test a time limit, unless the run chose its own."""
    # Registered as "timeout" when loaded from its entry point, as "pytest_timeout" when
    # named by its module (`-p pytest_timeout`, as the course's pyproject.toml does).
    plugins = config.pluginmanager
    if not (plugins.hasplugin("timeout") or plugins.hasplugin("pytest_timeout")):
        return
    if (
        config.getoption("timeout", None) is not None
        or os.environ.get("PYTEST_TIMEOUT")
        or config.getini("timeout")
    ):
        return
    for item in items:
        if in_lesson(item) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(LESSON_TEST_TIMEOUT))


def limit_of(item: pytest.Item) -> float | None:
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    value = item.config.getoption("timeout", None)
    return float(value) if value else None
