"""Which tests can see a change: the lesson functions each test calls.

Running every test on every wrong implementation (`sessionlab dev check --mutate`) is
most of the maintainers' check. A test that never calls the function an edit is in runs
on the mutant exactly as on the solution, and passes; so the check first runs the
lesson's tests once on the solution, recording the lesson functions each one calls
(`--sessionlab-calls FILE`), and then runs on each mutant only the tests that call an
edited function. mutmut selects tests by coverage the same way.

A test is recorded as seeing everything (ALL) when what it calls cannot be seen from
its process: it starts a process or forks (the child's calls are not traced), it puts a
profile function of its own in place of the recorder's, or it fails on the solution. An
edit outside every function body (a constant, a class attribute, an import, a `def`
line with its defaults) runs at import: every test sees it.
"""

from __future__ import annotations

import ast
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

ALL = "all"

# Audit events of a new process: its calls are out of this process's sight.
SPAWNS = frozenset({"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn",
                    "os.spawn", "os.system", "os.exec"})

Called = set[tuple[str, int]]      # (module file name, first line of the function)


class CallRecorder:
    """The lesson functions (in files under `folder`) a test calls, test by test."""

    def __init__(self, folder: Path) -> None:
        self.prefixes = tuple({str(folder), str(folder.resolve())})
        self.called: Called | None = None
        self.spawned = False
        self.found: dict[str, Any] = {}     # test function name -> sorted calls, or ALL
        self.hook = self._profile           # one bound method, to tell it from others
        sys.addaudithook(self._audit)       # for the life of the process: no way back

    def _audit(self, event: str, args: tuple) -> None:
        if self.called is not None and event in SPAWNS:
            self.spawned = True

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and self.called is not None:
            code = frame.f_code
            if code.co_filename.startswith(self.prefixes):
                self.called.add((Path(code.co_filename).name, code.co_firstlineno))

    def start(self) -> None:
        self.called, self.spawned = set(), False
        threading.setprofile(self.hook)
        sys.setprofile(self.hook)

    def stop(self, name: str, passed: bool) -> None:
        """End the recording of test `name` (its function's name: all of its
        parameters share one entry)."""
        replaced = sys.getprofile() is not self.hook
        sys.setprofile(None)
        threading.setprofile(None)   # type: ignore[arg-type]
        called, self.called = self.called or set(), None
        earlier = self.found.get(name, [])
        if earlier == ALL or replaced or self.spawned or not passed:
            self.found[name] = ALL
        else:
            self.found[name] = sorted({*map(tuple, earlier), *called})


def functions_around(source: str, lines: list[int]) -> Called | None:
    """The functions (file-less: first line only) whose bodies hold the edited `lines`
    of a module, each with every function around it; None when a line lies outside
    every function body, where every test sees it."""
    tree = ast.parse(source)
    found: set[int] = set()
    for line in lines:
        around = [node for node in ast.walk(tree)
                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body[0].lineno <= line <= (node.end_lineno or node.lineno)]
        if not around:
            return None
        # A function's code starts at its first decorator, as the recorder sees it
        found.update(min([node.lineno, *(d.lineno for d in node.decorator_list)])
                     for node in around)
    return {("", first) for first in found}


def tests_that_see(calls: dict[str, Any], module: str, functions: Called | None
                   ) -> set[str] | None:
    """The names of the tests that call one of `functions` of `module`, or see every
    change; None for every test (an edit outside functions, or none recorded)."""
    if functions is None or not calls:
        return None
    wanted = {(module, first) for _, first in functions}
    return {name for name, called in calls.items()
            if called == ALL or wanted & {tuple(c) for c in called}}


def tests_for_edit(calls: dict[str, Any], source: str, module: str,
                   lines: list[int]) -> set[str] | None:
    """The names of the tests to run on an edit of `lines` of `module` (its text
    `source`); None for every test, also when no test calls what it changed (to be
    sure)."""
    return tests_that_see(calls, module, functions_around(source, lines)) or None
