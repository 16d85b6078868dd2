"""The tests a change can reach (sessionlab.calls): what each test calls, recorded on the
solution, chooses the tests the maintainers' check runs on a wrong implementation."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sessionlab import calls as chosen
from sessionlab.calls import ALL, functions_around

ROOT = Path(__file__).resolve().parent.parent

MODULE = '''\
LIMIT = 3


def outer(x, y=LIMIT):
    """Adds."""
    def inner():
        return x + y
    return inner()


@staticmethod
def decorated():
    return 1
'''


def test_an_edit_inside_a_body_names_its_function_and_those_around_it():
    assert functions_around(MODULE, [7]) == {("", 4), ("", 6)}
    assert functions_around(MODULE, [5]) == {("", 4)}       # the docstring is the body
    # A decorated function's code starts at its decorator, as a profile sees it
    assert functions_around(MODULE, [13]) == {("", 11)}


def test_an_edit_outside_every_body_is_seen_by_every_test():
    assert functions_around(MODULE, [1]) is None             # a constant
    assert functions_around(MODULE, [4]) is None             # a def line: its defaults
    assert functions_around(MODULE, [7, 1]) is None


def test_the_tests_chosen_are_those_that_call_the_function_or_see_everything():
    calls = {"test_a": [["m.py", 4]], "test_b": [["m.py", 11]], "test_c": ALL,
             "test_d": [["other.py", 4]]}
    assert chosen.tests_that_see(calls, "m.py", {("", 4)}) == {"test_a", "test_c"}
    assert chosen.tests_that_see(calls, "m.py", None) is None
    assert chosen.tests_that_see({}, "m.py", {("", 4)}) is None     # nothing recorded


def recorded(tmp_path: Path, *targets: str) -> dict:
    """What each test of `targets` calls, recorded on the solutions."""
    record = tmp_path / "calls.json"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SESSIONLAB_", "PYTEST_"))}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--solution",
         *targets, "--sessionlab-calls", str(record)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(record.read_text())


@pytest.mark.campaign
def test_a_run_on_the_solution_records_what_each_test_calls(tmp_path):
    calls = recorded(tmp_path, "lessons/00_memory/test_memory.py")
    source = (ROOT / "solutions/00_memory/tools.py").read_text(encoding="utf-8")
    run_tool = next(number for number, line in enumerate(source.splitlines(), 1)
                    if line.startswith("def run_tool("))
    called = calls["test_a_tool_runs_by_its_exact_name_with_its_arguments_by_name"]
    # It calls run_tool, and never the agent's loop
    assert called != ALL and ["tools.py", run_tool] in called, called
    source = (ROOT / "solutions/00_memory/agent.py").read_text(encoding="utf-8")
    run = next(number for number, line in enumerate(source.splitlines(), 1)
               if line.lstrip().startswith("def run("))
    assert ["agent.py", run] not in called, called


@pytest.mark.campaign       # real writer processes: seconds
def test_a_test_that_starts_a_process_is_recorded_as_seeing_everything(tmp_path):
    # The writers run in processes of their own, whose calls no profile here sees
    name = "test_writers_appending_large_lines_at_once_lose_and_interleave_nothing"
    assert recorded(tmp_path, "lessons/05_lock", "-k", name) == {name: ALL}
