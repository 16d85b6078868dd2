"""Which tests can see a change: the lesson lines each test reaches.

Running the tests on every wrong implementation (`sessionlab dev check --mutate`, or
`--every-test`) is most of the maintainers' check. A test that never reaches the code an
edit changed runs on the mutant exactly as on the solution, and passes; so the check
first runs the lesson's tests once on the solution, recording the lesson functions each
one calls and the lines of them it reaches (`--sessionlab-calls FILE`), and then runs on
each mutant only the tests that can see its edit. mutmut selects tests by coverage the
same way.

An edit made in place (it replaces or removes lines, or adds some before a line, with
the block structure around it left as it was) is seen by the tests that reach the lines
it replaces or the line it adds before: until the mutant's code reaches that spot, it
runs as the solution does, and the solution reaching the spot runs that line. Any other
edit (one that moves code into or out of a block, or at a line no instruction is on: an
`else:`, a comment) is seen by every test that calls the function it is in.

A Python process a test starts is recorded with it: the recorder puts a sitecustomize
of its own on the PYTHONPATH the child inherits, which traces the child the same way
and writes each function and line it reaches to a file the test's record reads when the
test ends (at once, so that a child killed with SIGKILL loses nothing it reached).

A test is recorded as seeing everything (ALL) when what it runs cannot be seen: it
forks or starts a process in a way the child's tracing cannot follow (os.fork,
os.system, an environment without the recorder's variable, python -I or -E), it puts a
trace function of its own in place of the recorder's, or it fails on the solution. An
edit outside every function body (a constant, a class attribute, an import, a `def`
line with its defaults) runs at import: every test sees it.
"""

from __future__ import annotations

import ast
import difflib
import functools
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any, Callable, NamedTuple

from . import syntax

ALL = "all"

# Audit events of a new process whose calls are out of this process's sight (a
# subprocess.Popen is followed, through the environment it inherits: _untraceable).
SPAWNS = frozenset({"os.fork", "os.forkpty", "os.posix_spawn", "os.spawn",
                    "os.system", "os.exec"})

# The environment a test's child processes inherit while it is recorded: the file
# each writes what it reaches to, and the folder of the lesson code to trace.
TRACE_TO, TRACE_UNDER = "SESSIONLAB_TRACE_TO", "SESSIONLAB_TRACE_UNDER"
SITECUSTOMIZE = """\
try:
    from sessionlab.calls import trace_this_process
    trace_this_process()
except Exception:   # never a reason for a test's child to fail
    pass
"""
# Flags that make a child ignore PYTHONPATH (-I, -E) or the site module (-S)
BLIND = ("-I", "-E", "-S")

# Where a new thread puts threading.settrace's function (the recorder's) in place
THREAD_START = threading.Thread._bootstrap_inner.__code__   # type: ignore[attr-defined]

Called = set[tuple[str, int]]      # (module file name, first line of the function)
Reached = set[tuple[str, int]]     # (module file name, line)


class Record(NamedTuple):
    """What each test of a lesson did on the solution, by test function name."""
    calls: dict[str, Any]       # its calls, [[file, first line], ...], or ALL
    lines: dict[str, Any]       # the lines it reached, [[file, line], ...], or ALL

    @classmethod
    def read(cls, found: dict[str, Any]) -> "Record":
        """The record a run wrote (--sessionlab-calls), each test's calls and lines as
        a set: a lesson's corpus asks of every test, for each of hundreds of entries,
        whether it reached a line."""
        return cls(*({name: ALL if seen == ALL else _pairs(seen)
                      for name, seen in found.get(part, {}).items()}
                     for part in ("calls", "lines")))


class CallRecorder:
    """The lesson functions (in files under `folder`) a test calls, and the lines of
    them it reaches, test by test."""

    def __init__(self, folder: Path) -> None:
        self.prefixes = tuple({str(folder), str(folder.resolve())})
        self.called: Called | None = None
        self.reached: Reached = set()
        self.spawned = self.replaced = False
        self.found: dict[str, Any] = {}     # test function name -> sorted calls, or ALL
        self.lines: dict[str, Any] = {}     # test function name -> sorted lines, or ALL
        self.hook = self._trace             # one bound method, to tell it from others
        # Where the children write, and the sitecustomize that makes them
        self.children = Path(tempfile.mkdtemp(prefix="sessionlab-calls-"))
        (self.children / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
        self.tests = 0
        self.environment: dict[str, str | None] = {}
        sys.addaudithook(self._audit)       # for the life of the process: no way back

    def _audit(self, event: str, args: tuple) -> None:
        if self.called is not None and event in SPAWNS:
            self.spawned = True
        elif self.called is not None and event == "subprocess.Popen" and \
                self._untraceable(*args[1:4:2]):
            self.spawned = True
        elif self.called is not None and event == "sys.settrace" and \
                sys._getframe(1).f_code is not THREAD_START:
            self.replaced = True    # even if the test puts the recorder back after

    def _trace(self, frame: FrameType, event: str, arg: Any
               ) -> Callable[..., Any] | None:
        """The global trace function: called as each frame starts. Only the lesson's
        frames are traced line by line; every other returns None (no cost after)."""
        if event != "call" or self.called is None:
            return None
        code = frame.f_code
        if not code.co_filename.startswith(self.prefixes):
            return None
        name = Path(code.co_filename).name
        self.called.add((name, code.co_firstlineno))
        reached = self.reached

        def line(frame: FrameType, event: str, arg: Any) -> Callable[..., Any]:
            if event == "line":
                reached.add((name, frame.f_lineno))
            return line
        return line

    def _untraceable(self, args: Any, env: Any) -> bool:
        """Whether a child started with `args` and `env` escapes the tracing: its
        environment is not the one the recorder set, or a flag makes it ignore it."""
        if env is not None and env.get(TRACE_TO) != os.environ.get(TRACE_TO):
            return True
        words = [args] if isinstance(args, (str, bytes)) else list(args or [])
        return any(str(word) in BLIND for word in words[1:])

    def start(self) -> None:
        self.reached, self.spawned, self.replaced = set(), False, False
        self.tests += 1
        self._set_environment({
            TRACE_TO: str(self.children / f"test-{self.tests}"),
            TRACE_UNDER: os.pathsep.join(self.prefixes),
            "PYTHONPATH": os.pathsep.join(
                [str(self.children), *filter(None, [os.environ.get("PYTHONPATH")])])})
        threading.settrace(self.hook)
        sys.settrace(self.hook)
        self.called = set()     # from here, a sys.settrace is the test's own

    def _set_environment(self, values: dict[str, str]) -> None:
        self.environment = {name: os.environ.get(name) for name in values}
        os.environ.update(values)

    def _children_reached(self) -> tuple[Called, Reached]:
        """What the test's child processes wrote they called and reached; the
        environment as it was before the test."""
        written = Path(os.environ.get(TRACE_TO, ""))
        for name, value in self.environment.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        called: Called = set()
        reached: Reached = set()
        if written.name and written.exists():
            for line in written.read_text(encoding="utf-8").splitlines():
                kind, _, rest = line.partition(" ")
                module, _, number = rest.rpartition(" ")
                if number.isdigit():
                    (called if kind == "call" else reached).add((module, int(number)))
            written.unlink()
        return called, reached

    def stop(self, name: str, passed: bool) -> None:
        """End the recording of test `name` (its function's name: all of its
        parameters share one entry)."""
        called, self.called = self.called or set(), None
        replaced = self.replaced or sys.gettrace() is not self.hook
        sys.settrace(None)
        threading.settrace(None)    # type: ignore[arg-type]
        reached, self.reached = self.reached, set()
        in_children = self._children_reached()
        called, reached = called | in_children[0], reached | in_children[1]
        if self.found.get(name) == ALL or replaced or self.spawned or not passed:
            self.found[name] = self.lines[name] = ALL
        else:
            self.found[name] = sorted({*map(tuple, self.found.get(name, [])), *called})
            self.lines[name] = sorted({*map(tuple, self.lines.get(name, [])), *reached})

    def close(self) -> None:
        """Remove the children's folder (the run is over)."""
        shutil.rmtree(self.children, ignore_errors=True)

    def record(self) -> dict[str, Any]:
        """What the run recorded, as the --sessionlab-calls file holds it."""
        return {"calls": self.found, "lines": self.lines}


def trace_this_process() -> None:
    """In a child process of a recorded test (its sitecustomize): trace the lesson's
    code as CallRecorder does, writing each function and line at its first call or
    reach to the file the environment names."""
    target, under = os.environ.get(TRACE_TO), os.environ.get(TRACE_UNDER)
    if not target or not under:
        return
    prefixes = tuple(under.split(os.pathsep))
    descriptor = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    seen: set[tuple[str, str, int]] = set()

    def write(kind: str, module: str, number: int) -> None:
        if (kind, module, number) not in seen:
            seen.add((kind, module, number))
            os.write(descriptor, f"{kind} {module} {number}\n".encode())

    def trace(frame: FrameType, event: str, arg: Any) -> Callable[..., Any] | None:
        if event != "call" or not frame.f_code.co_filename.startswith(prefixes):
            return None
        module = Path(frame.f_code.co_filename).name
        write("call", module, frame.f_code.co_firstlineno)

        def line(frame: FrameType, event: str, arg: Any) -> Callable[..., Any]:
            if event == "line":
                write("line", module, frame.f_lineno)
            return line
        return line

    threading.settrace(trace)
    sys.settrace(trace)


def functions_around(source: str, lines: list[int]) -> Called | None:
    """The functions (file-less: first line only) whose bodies hold the edited `lines`
    of a module, each with every function around it; None when a line lies outside
    every function body, where every test sees it."""
    bodies = _function_bodies(source)
    found: set[int] = set()
    for line in lines:
        around = [first for first, body, end in bodies if body <= line <= end]
        if not around:
            return None
        found.update(around)
    return {("", first) for first in found}


@functools.lru_cache(maxsize=64)
def _function_bodies(source: str) -> tuple[tuple[int, int, int], ...]:
    """Each function of a module: (its first line as the recorder sees it, the first
    line of its body, its last line). Every entry of a lesson's corpus asks about the
    same few modules: each is parsed once."""
    return tuple(
        # A function's code starts at its first decorator, as the recorder sees it
        (min([node.lineno, *(d.lineno for d in node.decorator_list)]),
         node.body[0].lineno, node.end_lineno or node.lineno)
        for node in ast.walk(syntax.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)))


def tests_that_see(calls: dict[str, Any], module: str, functions: Called | None
                   ) -> set[str] | None:
    """The names of the tests that call one of `functions` of `module`, or see every
    change; None for every test (an edit outside functions, or none recorded)."""
    if functions is None or not calls:
        return None
    wanted = {(module, first) for _, first in functions}
    return {name for name, called in calls.items()
            if called == ALL or not wanted.isdisjoint(_pairs(called))}


def changed_lines(before: str, after: str) -> list[int]:
    """The lines (1-based) of `before` an edit to `after` replaces or removes, and for
    an addition the line after which it is added (the function it goes on)."""
    old, new = before.splitlines(), after.splitlines()
    found: set[int] = set()
    for tag, i1, i2, _, _ in difflib.SequenceMatcher(
            a=old, b=new, autojunk=False).get_opcodes():
        if tag == "insert":
            found.add(max(i1, 1))
        elif tag != "equal":
            found.update(range(i1 + 1, i2 + 1))
    return sorted(found)


def spots_in_place(before: str, after: str) -> list[int] | None:
    """The lines of `before` at which an edit made in place changes it: the first of
    each run of lines it replaces or removes, the line before which it adds. None when
    some part of the edit is not in place: it starts at a line no instruction is on
    (a comment, an `else:`), or it changes the blocks around it (a line of it indented
    less than the spot, as code moved out of an `if`, or added at another depth)."""
    old, new = before.splitlines(), after.splitlines()
    executable = executable_lines(before)
    spots = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(
            a=old, b=new, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        if i1 >= len(old) or i1 + 1 not in executable:
            return None
        depth = _indent(old[i1])
        if any(_indent(line) < depth for line in [*old[i1:i2], *new[j1:j2]]
               if line.strip()):
            return None
        if tag in ("replace", "insert") and new[j1].strip() and \
                _indent(new[j1]) != depth:
            return None
        spots.append(i1 + 1)
    return spots


@functools.lru_cache(maxsize=64)
def executable_lines(source: str) -> frozenset[int]:
    """The lines of a module that instructions are on (a line event can fire there);
    asked of the same solution module for every entry of a corpus: compiled once."""
    found: set[int] = set()
    todo = [compile(source, "<module>", "exec")]
    while todo:
        code = todo.pop()
        found.update(line for _, _, line in code.co_lines() if line is not None)
        todo.extend(const for const in code.co_consts if hasattr(const, "co_lines"))
    return frozenset(found)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def tests_that_reach(lines: dict[str, Any], module: str, spots: list[int]
                     ) -> set[str]:
    """The names of the tests that reached one of `spots` of `module`, or see every
    change."""
    wanted = {(module, spot) for spot in spots}
    return {name for name, reached in lines.items()
            if reached == ALL or not wanted.isdisjoint(_pairs(reached))}


def _pairs(found: Any) -> frozenset[tuple[str, int]]:
    """A test's recorded calls or lines as a set of (file, line): as read from the
    record's JSON, lists of two; as Record.read gives them, a set already."""
    if isinstance(found, frozenset):
        return found
    return frozenset(tuple(pair) for pair in found)


def tests_for_edit(record: Record, before: str, after: str, module: str
                   ) -> set[str] | None:
    """The names of the tests to run on the edit of `module` from `before` to `after`;
    None for every test. When no test but those that see everything reaches the
    edit, the tests that call its function (to be sure); when none calls it either,
    every test."""
    by_calls = tests_that_see(record.calls, module,
                              functions_around(before, changed_lines(before, after)))
    spots = spots_in_place(before, after)
    if by_calls is None or spots is None or not record.lines:
        return by_calls or None
    reach = tests_that_reach(record.lines, module, spots)
    if not reach - {name for name, lines in record.lines.items() if lines == ALL}:
        return by_calls or None
    return reach
