"""The tests a change can reach (sessionlab.calls): what each test calls and the lines it
reaches, recorded on the solution, choose the tests the maintainers' check runs on a
wrong implementation."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sessionlab import calls as chosen
from sessionlab.calls import ALL, Record, functions_around, spots_in_place

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


BODY = '''\
def save(path, text, tries=3):
    if not text:
        return None
    for _ in range(tries):
        try:
            path.write_text(text)
        except OSError:
            continue
        else:
            break
    return path
'''


def edited(old: str, new: str) -> str:
    assert BODY.count(old) == 1, old
    return BODY.replace(old, new)


def test_an_edit_in_place_is_seen_where_it_starts():
    # A line replaced: the spot is that line
    assert spots_in_place(BODY, edited("    return path\n", "    return None\n")) == [11]
    # Lines removed, or a block around a line taken away: where they began
    assert spots_in_place(BODY, edited("        return None\n", "")) == [3]
    assert spots_in_place(BODY, edited("    if not text:\n        return None\n",
                                       "    return None\n")) == [2]
    # A line added before a line at its own depth: that line
    assert spots_in_place(BODY, edited("    return path\n",
                                       "    print(path)\n    return path\n")) == [11]


def test_an_edit_that_moves_code_between_blocks_or_starts_where_no_code_is_is_not():
    # Code moved out of its `if`: it now runs where the solution never went
    assert spots_in_place(BODY, edited("        return None\n", "    return None\n")) \
        is None
    # A line added after the end of a block, at the depth of the code around it
    assert spots_in_place(BODY, edited("            break\n",
                                       "            break\n        print(1)\n")) is None
    # An `else:` has no instruction: no line event ever says it was reached
    assert spots_in_place(BODY, edited("        else:\n", "        finally:\n")) is None


def test_the_tests_chosen_are_those_that_reach_the_spot_when_the_edit_is_in_place():
    record = Record(
        calls={"test_empty": [["m.py", 1]], "test_write": [["m.py", 1]],
               "test_process": ALL},
        lines={"test_empty": [["m.py", 2], ["m.py", 3]],
               "test_write": [["m.py", n] for n in (2, 4, 5, 6, 10, 11)],
               "test_process": ALL})
    changed = edited("    return path\n", "    return None\n")
    assert chosen.tests_for_edit(record, BODY, changed, "m.py") == {
        "test_write", "test_process"}
    # Moved out of its block: every test that calls save
    moved = edited("        return None\n", "    return None\n")
    assert chosen.tests_for_edit(record, BODY, moved, "m.py") == {
        "test_empty", "test_write", "test_process"}
    # A line no test reached on the solution (the retry): to be sure, every caller
    retry = edited("            continue\n", "            break\n")
    assert chosen.tests_for_edit(record, BODY, retry, "m.py") == {
        "test_empty", "test_write", "test_process"}


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
    record = recorded(tmp_path, "lessons/00_memory/test_memory.py")
    calls, lines = record["calls"], record["lines"]
    tools = (ROOT / "solutions/00_memory/tools.py").read_text(encoding="utf-8")
    run_tool = next(number for number, line in enumerate(tools.splitlines(), 1)
                    if line.startswith("def run_tool("))
    called = calls["test_a_tool_runs_by_its_exact_name_with_its_arguments_by_name"]
    # It calls run_tool, and never the agent's loop
    assert called != ALL and ["tools.py", run_tool] in called, called
    source = (ROOT / "solutions/00_memory/agent.py").read_text(encoding="utf-8")
    run = next(number for number, line in enumerate(source.splitlines(), 1)
               if line.lstrip().startswith("def run("))
    assert ["agent.py", run] not in called, called
    # ...and reaches run_tool's first line of code, and none of the agent's
    name = "test_a_tool_runs_by_its_exact_name_with_its_arguments_by_name"
    first = min(n for n in chosen.executable_lines(tools) if n > run_tool)
    assert ["tools.py", first] in lines[name], lines[name]
    body = min(n for n in chosen.executable_lines(source) if n > run)
    assert ["agent.py", body] not in lines[name], lines[name]


CHILD_MODULE = '''\
def first():
    return 1


def second():
    return 2
'''


def child_run(tmp_path: Path, *flags: str, env: dict | None = None) -> tuple:
    """Record a 'test' that starts a Python process calling first() of a lesson-like
    module: (its calls, its lines) as the recorder keeps them."""
    folder = tmp_path / "solutions"
    folder.mkdir()
    (folder / "m.py").write_text(CHILD_MODULE, encoding="utf-8")
    recorder = chosen.CallRecorder(folder)
    recorder.start()
    try:
        subprocess.run([sys.executable, *flags, "-c",
                        f"import sys; sys.path.insert(0, {str(folder)!r}); "
                        "import m; m.first()"],
                       check=True, timeout=60,
                       env=None if env is None else env(os.environ))
    finally:
        recorder.stop("test_child", passed=True)
        recorder.close()
    return recorder.found["test_child"], recorder.lines["test_child"]


def test_a_python_process_a_test_starts_is_recorded_with_the_test(tmp_path):
    # The child reaches first()'s line, never second()'s: both are the test's
    calls, lines = child_run(tmp_path)
    assert ("m.py", 1) in calls and ("m.py", 5) not in calls, calls
    assert ("m.py", 2) in lines and ("m.py", 6) not in lines, lines


@pytest.mark.parametrize("how", ["an environment of its own", "python -I", "python -E"])
def test_a_process_started_out_of_the_recorders_sight_makes_the_test_see_everything(
        how, tmp_path):
    if how == "an environment of its own":
        calls, lines = child_run(tmp_path, env=lambda environ: {
            "PATH": environ.get("PATH", "")})
    else:
        calls, lines = child_run(tmp_path, how.split()[1])
    assert calls == lines == ALL, (calls, lines)


@pytest.mark.campaign       # threads: a second
def test_a_test_that_starts_threads_is_recorded_line_by_line_in_them(tmp_path):
    # A thread puts the recorder in place as it starts: that is no trace of the test's
    name = "test_writers_waiting_in_two_threads_each_keep_their_own_timeout"
    record = recorded(tmp_path, "lessons/05_lock", "-k", name)
    assert record["lines"][name] != ALL and record["lines"][name], record
