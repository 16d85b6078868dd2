"""The generated mutation pass (`sessionlab dev mutate`): edits only inside task fences,
each one a wrong.toml-style find/replace, and survivors triaged in wrong.toml are not
survivors."""

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sessionlab import course, maintainers, mutate

ROOT = Path(__file__).resolve().parent.parent

# The tests that run a lesson's tests on a broken copy, about a second each: the
# campaign's (`pytest -m campaign`), so that the README's quick command stays quick.
CHECKS_A_PYTEST_RUN = pytest.mark.campaign


@pytest.fixture
def copy(tmp_path):
    """A copy of the course with lesson 01 only."""
    for name in ("conftest.py", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(
        ROOT / "solutions" / "01_append",
        tmp_path / "solutions" / "01_append",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    # As it ships: in a student's copy, lessons/ holds their work (tests too).
    maintainers.lay_out_lesson(ROOT, tmp_path, "01_append")
    return tmp_path


def test_every_mutant_is_one_edit_inside_a_fence_and_a_valid_wrong_toml_pair():
    files = maintainers.solution_files(course.lesson("01", ROOT))
    found = mutate.lesson_mutants(files)

    assert found, "lesson 01's fences hold code to mutate"
    kinds = {m.kind for m in found}
    assert {"call", "compare", "constant"} <= kinds, kinds
    assert any(
        m.kind == "call" and "os.fsync" in m.find and "os.fsync" not in m.replace
        for m in found
    ), "removing a call made for its effect (os.fsync) is a mutant"
    for m in found:
        solution = files[m.module]
        fenced = mutate.fenced_lines(solution)
        assert m.line in fenced and fenced[m.line] == m.task, m.describe()
        assert solution.count(m.find) == 1, m.describe()
        assert solution.replace(m.find, m.replace) == m.source, m.describe()
        compile(m.source, m.module, "exec")


def without_test(path: Path, name: str) -> None:
    """Remove the test function `name` (decorators included) from the file at `path`."""
    text = path.read_text(encoding="utf-8")
    node = next(n for n in ast.parse(text).body
                if isinstance(n, ast.FunctionDef) and n.name == name)
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
    lines = text.splitlines(keepends=True)
    path.write_text("".join(lines[: first - 1] + lines[node.end_lineno :]),
                    encoding="utf-8")


def only_tests_of(path: Path, task: str) -> None:
    """Keep only the tests marked with `task` in the file at `path`: every mutant then
    runs a handful of tests, not the lesson's fifty."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    for node in reversed(ast.parse(text).body):
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            marks = [ast.unparse(d) for d in node.decorator_list]
            if f"pytest.mark.task({task!r})" not in marks:
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                del lines[first - 1 : node.end_lineno]
    path.write_text("".join(lines), encoding="utf-8")


@CHECKS_A_PYTEST_RUN
def test_a_survivor_recorded_as_equivalent_is_no_longer_a_survivor(copy):
    lesson = course.lesson("01", copy)
    only_tests_of(lesson.folder / "test_append.py", "01.4")
    # Without the tests that catch a leaked folder descriptor, leaving out
    # os.close(folder) survives: a survivor to record.
    for test in ("test_durable_logs_leak_no_descriptors",
                 "test_a_folder_sync_that_fails_leaves_no_descriptor_open"):
        without_test(lesson.folder / "test_append.py", test)
    target = next(
        m
        for m in mutate.lesson_mutants(maintainers.solution_files(lesson))
        if m.kind == "call" and "os.close(folder)" in m.find
    )
    # Only 01.4's fences: the other tasks' mutants would run against 01.4's tests alone.
    before = mutate.mutate_lesson(copy, lesson, tasks={"01.4"})
    assert target in before.survivors, (
        "closing the folder's descriptor is not tested (yet)"
    )

    wrong = lesson.solution_folder / "wrong.toml"
    entry = target.toml().replace(
        'caught_by = "test_..."   # or: equivalent = "why no user can tell"',
        'equivalent = "a leaked read-only descriptor of the folder changes no byte on '
        'disk"',
    )
    # The copy's corpus holds this entry alone: the check below then runs one mutant, not
    # the lesson's sixty (none of them is one of 01.4's generated mutants).
    wrong.write_text(entry, encoding="utf-8")

    after = mutate.mutate_lesson(copy, lesson, tasks={"01.4"})

    assert target not in after.survivors
    assert target in [after.mutants[i] for i in after.equivalent]
    problems = maintainers.check_wrong_implementations(lesson).problems
    assert not [p for p in problems if "os.close(folder)" in p], problems


def test_dev_mutate_lists_the_mutants_of_a_lesson():
    done = subprocess.run(
        [sys.executable, "-m", "sessionlab", "dev", "mutate", "00", "--list"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines and all(line.startswith("00_memory 00.") for line in lines), (
        done.stdout
    )


@CHECKS_A_PYTEST_RUN
def test_dev_mutate_fails_on_a_survivor_and_writes_the_report_to_out(copy, tmp_path):
    """`dev mutate` (CI's step) exits 1 on a survivor no wrong.toml entry judges, and
    `--out FILE` is where its report goes: the report is made, never committed."""
    only_tests_of(copy / "lessons/01_append/test_append.py", "01.4")
    for test in ("test_durable_logs_leak_no_descriptors",
                 "test_a_folder_sync_that_fails_leaves_no_descriptor_open"):
        without_test(copy / "lessons/01_append/test_append.py", test)
    out = tmp_path / "survivors.txt"
    env = {k: v for k, v in os.environ.items() if k != "SESSIONLAB_ROOT"}

    done = subprocess.run(
        [sys.executable, "-m", "sessionlab", "dev", "mutate", "--out", str(out)],
        cwd=copy, env=env, capture_output=True, text=True, timeout=300,
    )

    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    report = out.read_text(encoding="utf-8")
    assert report.startswith("## 01_append:"), report
    assert "  survivor: 01.4" in report and "os.close(folder)  ->  pass" in report, report


@pytest.mark.parametrize("name, index", [
    ("test_fork[impl00]", 0), ("test_fork[impl07]", 7), ("test_fork[impl99]", 99),
    ("test_fork[impl100]", 100), ("test_fork[impl112-durable]", 112),
    ("test_fork[3-impl104]", 104), ("test_fork", None), ("test_fork[simple]", None)])
def test_a_result_is_given_to_the_implementation_its_test_ran_on(name, index):
    """Lesson 09 has over a hundred wrong implementations: impl104 is the 105th, not
    impl10 (the id was once read as two digits, giving results to the wrong entry)."""
    assert mutate.impl_index(name) == index, (
        f"{name!r} ran on implementation {index}, read as {mutate.impl_index(name)}")


def test_a_run_that_pytest_gave_up_leaves_its_mutants_without_results(monkeypatch):
    # pytest ends a run early on an internal error (exit status 3): the tests it did
    # not reach are unknown, so no mutant of that run may pass for tested.
    lesson = course.lesson("01", ROOT)
    files = maintainers.solution_files(lesson)
    module = next(iter(files))
    ran = {"name": "test_x[impl00]", "nodeid": "t::test_x[impl00]", "outcome": "passed"}

    def run_pytest(root, paths, *args):
        return 3, {"results": [ran, {**ran, "name": "test_x[impl01]"}]}, "INTERNALERROR>"

    monkeypatch.setattr(maintainers, "run_pytest", run_pytest)
    results, _ = mutate.run_mutants(ROOT, lesson, [(module, files[module])] * 2)

    assert results == {0: [], 1: []}


@CHECKS_A_PYTEST_RUN
@pytest.mark.parametrize("mutants", [1, 2], ids=["alone", "two in one run"])
def test_only_the_selected_tests_run_on_a_mutant_run_alone_or_with_others(mutants):
    # A mutant whose group died runs again alone, and then its tests carry no
    # implementation of their own: the selection must still be its own (it once ran
    # every test of the lesson there).
    lesson = course.lesson("00", ROOT)
    files = maintainers.solution_files(lesson)
    module = next(iter(files))
    chosen = "test_a_tool_runs_by_its_exact_name_with_its_arguments_by_name"
    results, output = mutate.run_mutants(ROOT, lesson, [(module, files[module])] * mutants,
                                         stop_at_first_failure=False,
                                         only=[{chosen}] * mutants)
    for i in range(mutants):
        ran = sorted({entry["name"].split("[")[0] for entry in results[i]})
        assert ran == [chosen], f"mutant {i} ran {ran}, not [{chosen!r}]:\n{output}"


@CHECKS_A_PYTEST_RUN
def test_after_its_first_failure_no_test_runs_on_a_mutant_while_the_others_run_on():
    """A mutant stops at its first failure: no test of it passes or fails after (at
    most one is reported skipped where a test module ends), while the solution in the
    same run, beside it, meets every test of the lesson (lesson 00: two modules)."""
    lesson = course.lesson("00", ROOT)
    files = maintainers.solution_files(lesson)
    wrong = next(w for w in maintainers.wrong_implementations(lesson) if w.caught_by)
    module, text = maintainers.apply_wrong(files, wrong)
    results, output = mutate.run_mutants(ROOT, lesson, [(module, text),
                                                        (module, files[module])])
    outcomes = [entry["outcome"] for entry in results[0]]
    failed = next((i for i, o in enumerate(outcomes) if o in ("failed", "error")), None)
    assert failed is not None, f"the mutant failed no test: {outcomes}\n{output}"
    after = outcomes[failed + 1:]
    assert set(after) <= {"skipped"} and len(after) <= 2, (
        f"after its first failure the mutant went on: {after}")
    ran = sorted({entry["name"].split("[")[0] for entry in results[1]})
    assert ran == sorted(maintainers.test_marks(lesson)), (
        f"the solution beside the mutant met {len(ran)} tests:\n{output}")
    assert {entry["outcome"] for entry in results[1]} == {"passed"}, output


def test_a_lesson_whose_tests_wait_runs_more_groups_at_once(tmp_path):
    """wrong.toml may set groups_at_once (lessons 05 and 11 do: their tests wait on
    locks and a server); any other lesson runs two; a value out of range is named."""
    copy = tmp_path / "course"
    for side in ("lessons", "solutions"):
        shutil.copytree(ROOT / side / "03_fork", copy / side / "03_fork")
    assert mutate.groups_at_once(course.lesson("05", ROOT)) == 5
    assert mutate.groups_at_once(course.lesson("03", ROOT)) == mutate.GROUPS_AT_ONCE

    lesson = course.lesson("03", copy)
    wrong = lesson.solution_folder / "wrong.toml"
    entries = wrong.read_text(encoding="utf-8")
    for bad in ("0", "9", "true", '"4"'):
        wrong.write_text(f"groups_at_once = {bad}\n\n{entries}", encoding="utf-8")
        with pytest.raises(course.CourseError, match="groups_at_once must be"):
            mutate.groups_at_once(lesson)
        problems = maintainers.check_metadata(lesson).problems
        assert any("groups_at_once must be" in p for p in problems), problems
