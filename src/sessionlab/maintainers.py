"""The maintainers' check (`sessionlab dev check`): is the course itself sound?

For every lesson:
  * its metadata: a title, tasks, at least two hints a task, every task fenced in the
    solution and checked by at least one test, every test marked with a task and
    described by a docstring (the site shows it);
  * its committed starter is exactly what the generator makes from the solution;
  * its solution passes all of its tests, and every earlier lesson's key tests;
  * its starter imports cleanly and fails for the right reason: every failure is a
    NotImplementedError or an AssertionError, and every task has a failing test;
  * every plausible wrong implementation listed in `solutions/NN_topic/wrong.toml` (the
    solution with one edit: links instead of copies, splitlines, a missing fsync ...) is
    caught by the test named for it, and the first test that fails on a mistake inside a
    task's fence names that task (the student is sent to the right place). This keeps "the
    tests fail on a wrong implementation" true as tests and solutions change.
And once: solutions/ is what course/ makes; every line of course code (course/, lessons/
and solutions/ .py files) fits 88 columns and no module a student edits runs past 800
lines; task texts are contracts and hints climb; the docs build strictly (when mkdocs is
installed).

Each lesson's tests run in their own pytest process, two at a time.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import unicodedata
from collections.abc import Callable
from concurrent.futures import as_completed, Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace as edited
from pathlib import Path

from . import course, designs, snapshots, starters, syntax
from .calls import ALL, Record, tests_for_edit
from .cli.runner import child_env, run_process
from .cli.ui import one_line_errors

PYTEST_TIMEOUT = 600    # seconds for one pytest run of the check; a lesson takes a few, so this only stops a hang
CHECK_TEST_TIMEOUT = 15.0   # seconds a test may take on a mutant; a hang is a catch
EVERY_TEST_GROUP = 12   # mutants in one pytest run when every test runs on every mutant
# Mutants in one pytest run when each stops at its first failure: a lesson's whole corpus
# (hundreds) in one run could outlast PYTEST_TIMEOUT on a busy machine, and a run stopped
# so loses every result in it.
FIRST_FAILURE_GROUP = 40

# The checks that take minutes a lesson: every test on each wrong implementation, and
# the generated mutants. run_all starts them after the quick ones, longest first.
CORPUS_CHECK, MUTATION_CHECK = "wrong implementations of ", "mutation pass over "
HEAVY_CHECKS = (CORPUS_CHECK, MUTATION_CHECK)

RIGHT_REASONS = {"NotImplementedError", "AssertionError"}


@dataclass
class Finding:
    check: str              # "metadata 03_fork", "solution 03_fork", ...
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)     # shown with --verbose
    warnings: list[str] = field(default_factory=list)  # shown, but the check passes
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems


# --- static checks -------------------------------------------------------------------


def undocumented_tests(lesson: course.Lesson) -> list[str]:
    """Tests of the lesson without a docstring (the site describes each test by its
    docstring)."""
    missing = []
    for path in sorted(lesson.folder.glob("test_*.py")):
        tree = syntax.parse(path.read_text(encoding="utf-8"), filename=str(path))
        missing += [node.name for node in tree.body if isinstance(node, ast.FunctionDef)
                    and node.name.startswith("test_") and not ast.get_docstring(node)]
    return missing


def test_marks(lesson: course.Lesson) -> dict[str, list[str]]:
    """test name -> task ids, read from the lesson's test files without importing them."""
    marks: dict[str, list[str]] = {}
    for path in sorted(lesson.folder.glob("test_*.py")):
        tree = syntax.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                marks[node.name] = [
                    d.args[0].value for d in node.decorator_list
                    if isinstance(d, ast.Call) and ast.unparse(d.func) == "pytest.mark.task"
                    and d.args and isinstance(d.args[0], ast.Constant)
                ]
    return marks


def check_metadata(lesson: course.Lesson) -> Finding:
    finding = Finding(f"metadata {lesson.name}")
    problems = finding.problems
    if not lesson.tasks:
        problems.append("lesson.toml lists no tasks")
    solution = lesson.module_path("solution")
    fenced = [task for path in course.lesson_modules(lesson.solution_folder)
              for task in starters.marked_tasks(path.read_text(encoding="utf-8"))]
    if not solution.exists():
        problems.append(f"no reference solution at solutions/{lesson.name}/{course.MODULE}")
    marks = test_marks(lesson)
    if not marks:
        problems.append(f"no tests in lessons/{lesson.name}/test_*.py")
    tested = {task for tasks in marks.values() for task in tasks}
    for task in lesson.tasks:
        if len(task.hints) < 2:
            problems.append(f"task {task.id} has {len(task.hints)} hint(s); give at least two levels")
        if task.id not in fenced:
            problems.append(f"task {task.id} is not fenced (# BEGIN {task.id}) in the solution")
        if task.id not in tested:
            problems.append(f"task {task.id} has no test marked @pytest.mark.task({task.id!r})")
        if task.id in fenced and (where := misplaced(lesson, task)):
            problems.append(where)
    from .mutate import groups_at_once
    try:
        groups_at_once(lesson)      # the corpus check's own number, when wrong.toml sets one
    except course.CourseError as error:
        problems.append(str(error))
    for name in undocumented_tests(lesson):
        problems.append(f"{name} has no docstring: say in a sentence or two what "
                        f"behaviour it "
                        "checks and why it matters (the site shows it)")
    known = {task.id for task in lesson.tasks}
    for name, tasks in marks.items():
        if not tasks:
            problems.append(f"{name} is marked with no task")
        for task in tasks:
            if task not in known and not any(task.startswith(f"{n:02d}.") for n in range(int(lesson.number))):
                problems.append(f"{name} is marked with unknown task {task}")
    return finding


# A backtick span that holds code rather than a name: a call, an assignment, an index, an
# operator or control flow. A task's text may name what to use (`SessionLog`, `fsync`),
# never spell the expression: that is the student's part.
CODE_SPAN = re.compile(r"`([^`]+)`")
CODE_LIKE = re.compile(r"\w\s*\(|[^=!<>]=[^=]|==|!=|<=|>=|\[|\b(if|for|while|return|raise|try|"
                       r"except|with|lambda|not|and|or|in|is|del|yield|await)\b.*\S|"
                       r"\.\w+\s*\(|\+|\*\*?|%")
MOST_CODE_SPANS = 15        # in every task description of the course together


def code_spans(text: str) -> list[str]:
    """The code-like backtick spans of a task's text."""
    return [span for span in CODE_SPAN.findall(text) if CODE_LIKE.search(span)]


def check_contracts(root: Path) -> Finding:
    """Tasks are contracts and hints climb: the course's task descriptions hold at most
    MOST_CODE_SPANS code-like spans together; no hint before a task's last holds one; a
    title (the starter's TODO line) holds none."""
    finding = Finding("tasks are contracts, hints climb")
    spans: list[str] = []
    for lesson in course.lessons(root):
        for task in lesson.tasks:
            spans += [f"{task.id} {span}" for span in code_spans(task.description)]
            if code_spans(task.title):
                finding.problems.append(f"task {task.id}: its title, the starter's TODO "
                                        f"line, spells code: {code_spans(task.title)}")
            for level, hint in enumerate(task.hints[:-1], start=1):
                found = code_spans(hint)
                if found:
                    finding.problems.append(
                        f"task {task.id}: hint {level} of {len(task.hints)} spells code "
                        f"({', '.join(found)}): only the last hint gives code; the first "
                        "gives the idea, the next ones the approach in words")
    if len(spans) > MOST_CODE_SPANS:
        finding.problems.append(
            f"the task descriptions spell code in {len(spans)} places (at most "
            f"{MOST_CODE_SPANS}): say what must hold and why, name the helpers, leave the "
            "expressions to the student: " + "; ".join(spans))
    return finding


def check_designs(root: Path) -> Finding:
    """The design is the student's: no given code reads what a fence makes, and every
    lesson has a design task checked by behaviour only (see designs.py)."""
    finding = Finding("designs are the student's")
    for lesson in course.lessons(root):
        finding.problems += designs.lesson_problems(lesson)
    return finding


def misplaced(lesson: course.Lesson, task: course.Task) -> str | None:
    """Why the task's `where` does not lead to its code, or None: each function it names
    is defined in a module of the solution, and one of them holds the task's fence (the
    page shows the student those functions)."""
    from .site import IncludeError, section
    modules = {path.name: path.read_text(encoding="utf-8")
               for path in course.lesson_modules(lesson.solution_folder)}
    fenced_in = []
    for where in (part.strip() for part in task.where.split(",") if part.strip()):
        for name, text in modules.items():
            try:
                code, _ = section(text, where, name)
            except IncludeError:
                continue
            if f"# BEGIN {task.id}" in code:
                fenced_in.append(where)
            break
        else:
            return (f"task {task.id}: `where` names {where!r}, which no module of "
                    f"solutions/{lesson.name}/ defines")
    if task.where and not fenced_in:
        return (f"task {task.id}: none of `where` ({task.where}) holds its fence "
                f"(# BEGIN {task.id}): name the function the student writes")
    return None


def check_folders(root: Path) -> Finding:
    finding = Finding("every lesson folder is complete")
    for name in course.lesson_folders(root):
        # answers.toml: the page's folded answers ("What you saw" at least), which the
        # page includes with {{ answer() }} rather than holding them in its source.
        for needed in (Path("lessons") / name / "lesson.toml", Path("solutions") / name / course.MODULE,
                       Path("solutions") / name / course.ANSWERS):
            if not (root / needed).is_file():
                finding.problems.append(f"{needed} is missing")
    return finding


# Course code is read on the site, whose content column fits about 88 characters, and
# in a terminal: a wider line scrolls sideways or wraps mid-word in both.
WIDTH = 88
LONGEST = 800       # lines of a module a student edits


def columns(line: str) -> int:
    """How many terminal columns `line` takes: wide characters (CJK, most emoji) take
    two, combining marks none, a tab up to the next multiple of 8."""
    line = line.expandtabs(8)
    return sum(0 if unicodedata.combining(char) else
               2 if unicodedata.east_asian_width(char) in "WF" else 1 for char in line)


def check_width(root: Path) -> Finding:
    """Every line of course code (the .py files of course/, lessons/ and solutions/)
    fits WIDTH, and no module a student edits is longer than LONGEST lines."""
    finding = Finding(f"course code fits {WIDTH} columns")
    for lesson in course.lessons(root):
        for path in course.lesson_modules(lesson.folder):
            count = path.read_bytes().count(b"\n")
            if count > LONGEST:
                finding.problems.append(
                    f"{path.relative_to(root).as_posix()}: {count} lines, longer than "
                    f"{LONGEST}: a student reads it in one sitting; split its idea off "
                    "into a module of its own")
    for side in ("course", "lessons", "solutions"):
        for path in sorted((root / side).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            where = path.relative_to(root).as_posix()
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as error:
                finding.problems.append(f"{where}: cannot be read as UTF-8 text: {error}")
                continue
            # Split on "\n" only, as editors number lines: splitlines() would also
            # split at a U+2028 inside a string and shift every number after it.
            for number, line in enumerate(text.split("\n"), start=1):
                if (width := columns(line.rstrip("\r"))) > WIDTH:
                    finding.problems.append(
                        f"{where}:{number}: {width} columns, wider than {WIDTH}: wrap it "
                        "(course code is read on the site and in a terminal)")
    return finding


def ci() -> bool:
    """Running in CI, on a clean clone: nobody's work is in lessons/ there."""
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def check_starters(root: Path, strict: bool = False) -> Finding:
    """The starters the course ships are what the generator makes.

    In a git checkout, "ships" means as the course committed it (the last commit that
    touched the lesson's solution or lesson.toml): a starter edited in the working
    tree, or committed since by a student, is their work, said in one line and left
    out. Outside git nothing tells a student's work from drift, so differences are a
    warning there. `strict` (CI, on a clean clone where nobody's work can be) makes any
    starter that differs from the generator a failure.
    """
    finding = Finding("starters match the generator")
    git = starters.Git(root)
    worked: list[str] = []
    for item in _every_starter(root, git, finding):
        if not git.available:
            if item.drifted or item.holds_work:
                worked.append(item.path)
            continue
        if item.drifted:
            finding.problems.append(
                f"{item.path} differs from what `sessionlab dev starters` generates"
                f"{'' if item.committed is not None else ' (not committed yet)'}:"
                f"\n{item.diff()}")
        elif strict and item.working != item.generated:
            finding.problems.append(
                f"{item.path} differs from what `sessionlab dev starters` generates "
                "(a clean clone holds no student's work):\n" + item.diff(working=True))
            continue
        if item.holds_work:
            worked.append(item.path)
    if worked and git.available:
        finding.warnings.append(
            f"lessons/ holds a student's work ({', '.join(worked)}: changed since the "
            "course committed them): left out of the check, which compared the "
            "committed starters and ran on starters generated from solutions/")
    elif worked:
        finding.warnings.append(
            f"not a git checkout, so nothing committed to compare with: "
            f"{', '.join(worked)} differ from the generator (a student's work, or "
            "drift that the check in a git checkout fails); the check ran on "
            "starters generated from solutions/")
    return finding


# --- the course as it ships ------------------------------------------------------------
#
# Every check that runs the lessons runs them in a temporary copy of the course whose
# starters are generated from solutions/: a student's lessons/NN/agent.py (or a test
# file they edited next to it) never decides the check.

SHIPPED_FILES = ("conftest.py", "pyproject.toml", "mkdocs.yml")
SHIPPED_FOLDERS = ("course", "solutions", "docs", "src")
NOT_SHIPPED = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache",
                                     "*.egg-info", ".sessionlab", "sessions")


def _every_starter(root: Path, git: starters.Git, finding: Finding):
    for lesson in course.lessons(root):
        try:
            yield from starters.starters_of(lesson, git)
        except course.CourseError as error:
            finding.problems.append(str(error))


def check_snapshots(root: Path) -> Finding:
    """solutions/ holds exactly what `course/` makes: no snapshot edited by hand, none
    missing, none left over."""
    finding = Finding("solutions match the course's source")
    try:
        made = snapshots.generate(root, course.lessons(root))
    except course.CourseError as error:
        finding.problems.append(str(error))
        return finding
    for path, text in made.items():
        shown = path.relative_to(root).as_posix()
        have = path.read_text(encoding="utf-8") if path.is_file() else None
        if have != text:
            diff = "".join(difflib.unified_diff(
                (have or "").splitlines(keepends=True), text.splitlines(keepends=True),
                f"{shown} (committed)", f"{shown} (generated)"))
            finding.problems.append(
                f"{shown} {'is missing' if have is None else 'differs from its source'}; "
                f"change course/ and run `sessionlab dev generate`:\n{diff[:4000]}")
    for lesson in course.lessons(root):
        for path in course.lesson_modules(lesson.solution_folder):
            if path not in made:
                finding.problems.append(
                    f"{path.relative_to(root).as_posix()} is made from no module of "
                    "course/: remove it, or add its source")
    return finding


def lay_out_pristine(root: Path, target: Path) -> None:
    """Copy the course at `root` to `target` as it ships: solutions/, docs and the
    kit as they are, each lessons/NN/agent.py generated from its solution. A lesson
    whose starter holds a student's work is taken whole (tests, lesson.toml) as
    committed, since a student who edits agent.py may have edited its tests too."""
    for name in SHIPPED_FILES:
        if (root / name).is_file():
            shutil.copy2(root / name, target / name)
    for name in SHIPPED_FOLDERS:
        if (root / name).is_dir():
            shutil.copytree(root / name, target / name, ignore=NOT_SHIPPED)
    git = starters.Git(root)
    (target / "lessons").mkdir()
    for name in course.lesson_folders(root):
        lay_out_lesson(root, target, name, git)


def lay_out_lesson(root: Path, target: Path, name: str,
                   git: starters.Git | None = None) -> None:
    """Copy lessons/`name` of the course at `root` to `target` as it ships (see
    lay_out_pristine); the kit's tests make their copies of a lesson with it too."""
    git = git or starters.Git(root)
    relative = f"lessons/{name}"
    try:
        items = starters.starters_of(course.load_lesson(root, name), git)
    except (course.CourseError, OSError):
        # No lesson.toml, no solution, broken fences: the static checks say so; the
        # copy keeps the folder as it is.
        shutil.copytree(root / relative, target / relative, ignore=NOT_SHIPPED)
        return
    worked = [item for item in items if item.holds_work]
    if not (worked and git.extract(relative, target, worked[0].commit)):
        shutil.copytree(root / relative, target / relative, ignore=NOT_SHIPPED)
    for item in items:
        (target / relative / item.module).write_text(item.generated, encoding="utf-8")


# --- checks that run pytest ------------------------------------------------------------


def run_pytest(root: Path, targets: list[str], *extra: str) -> tuple[int | None, dict, str]:
    """Run pytest in a fresh process group; return (exit status or None on timeout,
    JSON report, output tail). The process handling is the command line's own runner."""
    with tempfile.TemporaryDirectory() as temp:
        report_path = Path(temp) / "report.json"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--no-header",
                   "--sessionlab-report", str(report_path), *extra, *targets]
        status, output = run_process(command, cwd=root, env=child_env(root), timeout=PYTEST_TIMEOUT)
        report = json.loads(report_path.read_text()) if report_path.exists() else {"results": []}
    if status is None:
        output += f"\n(timed out after {PYTEST_TIMEOUT} s)"
    return status, report, output[-3000:]


def check_solution(lesson: course.Lesson) -> Finding:
    finding = Finding(f"solution {lesson.name} passes its lesson")
    status, report, output = run_pytest(lesson.root, [f"lessons/{lesson.name}"], "--solution")
    if status != 0:
        finding.problems.append(f"`pytest lessons/{lesson.name} --solution` failed:\n{output}")
    return finding


def check_key_tests(lesson: course.Lesson, earlier: list[course.Lesson]) -> Finding:
    finding = Finding(f"solution {lesson.name} passes earlier key tests")
    if not earlier:
        return finding
    impl = str(lesson.module_path("solution"))
    status, report, output = run_pytest(lesson.root, [f"lessons/{e.name}" for e in earlier],
                                        "-m", "key", "--impl", impl)
    if status != 0:
        finding.problems.append(f"key tests of {', '.join(e.name for e in earlier)} fail on "
                                f"solutions/{lesson.name}:\n{output}")
    return finding


def check_starter_fails_right(lesson: course.Lesson) -> Finding:
    finding = Finding(f"starter {lesson.name} fails for the right reason")
    status, report, output = run_pytest(lesson.root, [f"lessons/{lesson.name}"])
    results = report.get("results", [])
    if not results:
        finding.problems.append(f"no test ran for the starter:\n{output}")
        return finding
    failing_tasks: set[str] = set()
    for result in results:
        if result["outcome"] in ("failed", "error"):
            if result.get("when") != "call" or result.get("exception") not in RIGHT_REASONS:
                finding.problems.append(
                    f"{result['nodeid']} ({result.get('when')}): {result.get('exception')}: "
                    f"{str(result.get('message', ''))[:300]} - a starter may only fail with "
                    "NotImplementedError or an assertion")
            elif why := unexplained_failure(result):
                finding.problems.append(f"{_short(result['nodeid'])} on the starter "
                                        f"{why}")
            failing_tasks.update(result.get("tasks", []))
    for task in lesson.tasks:
        if task.id not in failing_tasks:
            finding.problems.append(f"no test fails on the starter for task {task.id}: "
                                    "its tests cannot tell a done task from an empty one")
    if why := starts_elsewhere(lesson, results):
        finding.problems.append(why)
    return finding


def starts_elsewhere(lesson: course.Lesson, results: list[dict]) -> str | None:
    """Why the starter's first failing test sends a student past the lesson's first
    task, or None. A student who runs `pytest -x` (or reads the first failure only) on a
    fresh starter is told to write the task whose NotImplementedError that test met:
    it must be the first task, as on the page. The lesson's first test should check
    that task and need no later one."""
    first_failure = next((r for r in results if r["outcome"] in ("failed", "error")),
                         None)
    if first_failure is None or not lesson.tasks:
        return None
    first_task = lesson.tasks[0].id
    met = starters.NOT_WRITTEN.search(str(first_failure.get("message") or ""))
    if met is None or met.group(1) == first_task:
        return None
    return (f"{_short(first_failure['nodeid'])}, the first test to fail on the starter, "
            f"stops on task {met.group(1)}, not yet written, and so sends a student who "
            f"stops at the first failure to {met.group(1)} before {first_task}: put a "
            f"test of {first_task} that needs no later task first")


def check_tasks_in_order(lesson: course.Lesson) -> Finding:
    """A student who writes the tasks in the page's order sees each pass once written.

    For each task but the last: the solution with that task and those before it
    written, the later ones as the starter has them. Every test of a written task then
    passes, or fails only because a later task is not written yet (that task's
    NotImplementedError, which the plugin names as the one to write). A failure of
    any other kind there (a test's stand-in for a later task that does not do what
    the test checks, say) tells a student that their finished task is wrong.
    """
    from .mutate import impl_index
    finding = Finding(f"the tasks of {lesson.name} pass in their order")
    order = [task.id for task in lesson.tasks]
    if len(order) < 2:
        return finding
    with tempfile.TemporaryDirectory(prefix="sessionlab-in-order-") as temp:
        impls = []
        for k in range(len(order) - 1):
            folder = Path(temp) / f"upto{k}"
            folder.mkdir()
            for path in course.lesson_modules(lesson.solution_folder):
                text = starters.make_starter(path.read_text(encoding="utf-8"), lesson,
                                             written=order[:k + 1])
                (folder / path.name).write_text(text, encoding="utf-8")
            impls.append(str(folder / course.MODULE))
        status, report, output = run_pytest(lesson.root, [f"lessons/{lesson.name}"],
                                            "--impl", os.pathsep.join(impls))
    results = report.get("results", [])
    if not results:
        finding.problems.append(f"no test ran on the lesson's tasks in order:\n{output}")
    waits: dict[str, set[str]] = {}    # task -> the later tasks some of its tests need
    for entry in results:
        # One implementation alone gets no [implNN] in its tests' names
        k = impl_index(entry.get("name", "")) if len(order) > 2 else 0
        if k is None or entry["outcome"] not in ("failed", "error"):
            continue
        written, later = order[:k + 1], order[k + 1:]
        if not set(entry.get("tasks", [])) & set(written):
            continue    # a test of later tasks only: it waits for them
        message = str(entry.get("message") or "")
        waiting = starters.NOT_WRITTEN.search(message)
        if (entry.get("exception") == "NotImplementedError" and waiting
                and waiting[1] in later):
            if written[-1] in entry.get("tasks", []):
                waits.setdefault(written[-1], set()).add(waiting[1])
            continue
        first = message.splitlines()[0][:300] if message else ""
        finding.problems.append(
            f"{_short(entry['nodeid']).split('[')[0]}, a test of "
            f"{', '.join(sorted(set(entry.get('tasks', [])) & set(written)))}, fails "
            f"with {' to '.join(dict.fromkeys((written[0], written[-1])))} written and "
            f"{', '.join(later)} not yet: {entry.get('exception')}: {first}")
    # The page tells a student which later tasks some of a task's tests wait for, so
    # that a task that is done is not taken for one that is wrong
    for task in lesson.tasks:
        if unsaid := waits.get(task.id, set()) - set(TASK_ID.findall(task.description)):
            finding.problems.append(
                f"some tests of task {task.id} wait for {', '.join(sorted(unsaid))} (they "
                f"fail, saying it is not written yet, with {task.id} done): its "
                "description should say so")
    return finding


TASK_ID = re.compile(r"\b\d\d\.\d+\b")


@dataclass(frozen=True)
class Wrong:
    """One entry of solutions/NN_topic/wrong.toml: the solution with one edit.

    Either `caught_by` (the test written for it; any failing test catches it, and the
    check says which did) or `equivalent` (why no user could tell the edit from the
    solution: the check then makes sure every test indeed passes on it).
    """
    what: str                   # the mistake, in words
    find: str                   # text of the solution to change (occurs exactly once)
    replace: str                # what the mistaken version has instead
    caught_by: str = ""         # the test that must fail on it
    equivalent: str = ""        # or: why this edit changes nothing a user can see
    # Another correct design of a task (an equivalent entry whose replace rewrites the
    # fence) may carry a short name, and a mistake may be made in that design rather
    # than in the reference: its find/replace then edit the design's text. Students
    # write other designs than ours, and their mistakes live in those.
    design: str = ""
    in_design: str = ""
    # Why a mistake's design could not be applied (read from the file, not a key).
    unusable: str = field(default="", compare=False)
    # Listed under the "Independent campaign" heading of wrong.toml: a mistake inside
    # a task fence, the code a student writes (read from the file, not an entry's key).
    campaign: bool = field(default=False, compare=False)


CAMPAIGN_HEADING = "Independent campaign"


def wrong_implementations(lesson: course.Lesson) -> list[Wrong]:
    path = lesson.solution_folder / "wrong.toml"
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    data = tomllib.loads(text)
    # Entries after the campaign's heading comment are the campaign's: count the
    # [[wrong]] tables above it.
    before = len(text.splitlines())
    for number, line in enumerate(text.splitlines()):
        if line.lstrip().startswith("#") and CAMPAIGN_HEADING in line:
            before = number
            break
    first = sum(line.strip() == "[[wrong]]" for line in text.splitlines()[:before])
    wrongs = [Wrong(**entry, campaign=i >= first)
              for i, entry in enumerate(data.get("wrong", []))]
    designs = {wrong.design: wrong for wrong in wrongs if wrong.design}
    return [in_its_design(wrong, designs) for wrong in wrongs]


def in_its_design(wrong: Wrong, designs: dict[str, Wrong]) -> Wrong:
    """A mistake made in another design, as one edit of the reference: the design's
    `find` (the fence it rewrites) replaced by its text with the mistake's edit made.
    An entry whose design cannot take the edit comes back `unusable`, saying why."""
    if not wrong.in_design:
        return wrong
    design = designs.get(wrong.in_design)
    if design is None or not design.equivalent:
        return edited(wrong, unusable=f"in_design names {wrong.in_design!r}, which no "
                      "entry recorded as equivalent declares as its design")
    if (count := design.replace.count(wrong.find)) != 1:
        return edited(wrong, unusable=f"its `find` occurs {count} times in design "
                      f"{wrong.in_design!r} (it must occur exactly once)")
    return edited(wrong, find=design.find,
                  replace=design.replace.replace(wrong.find, wrong.replace))


def solution_files(lesson: course.Lesson) -> dict[str, str]:
    """The reference solution of `lesson`: each module's file name -> its text."""
    return {path.name: path.read_text(encoding="utf-8")
            for path in course.lesson_modules(lesson.solution_folder)}


def find_wrong(files: dict[str, str], wrong: Wrong) -> str | None:
    """The module in which the entry's `find` occurs, when it occurs exactly once in the
    whole solution; else None."""
    where = [name for name, text in files.items() for _ in range(text.count(wrong.find))]
    return where[0] if len(where) == 1 else None


def apply_wrong(files: dict[str, str], wrong: Wrong) -> tuple[str, str] | None:
    """(module, its text with the entry's edit made); None when `find` does not occur
    exactly once in the solution's modules."""
    module = find_wrong(files, wrong)
    if module is None:
        return None
    text = files[module].replace(wrong.find, wrong.replace)
    return module, text + imports_for(files, module, text)


def imports_for(files: dict[str, str], module: str, text: str) -> str:
    """Imports for the names `text` (module `module`, edited) uses that it neither
    defines nor imports, where another module of the lesson has them: a wrong
    implementation may use what the lesson's code has (`os`, `read_log`), as a
    student's would, importing it. They go at the end of the module, where a
    circular import finds every module it needs already defined."""
    import builtins
    known = _known_names(tuple(files.items()), module)
    try:
        tree = syntax.parse(text)
    except SyntaxError:
        return ""
    have = _top_level_names(tree) | set(dir(builtins))
    # Names the code reads (not a quoted annotation: importing for one could only
    # make a circular import where none is needed)
    used = _free_names(tree, text)
    wanted = sorted(known[name] for name in used - have if name in known
                    and not known[name].startswith(f"from .{Path(module).stem} "))
    return "".join(f"{line}\n" for line in ["", *wanted]) if wanted else ""


@functools.lru_cache(maxsize=16)
def _known_names(files: tuple[tuple[str, str], ...], module: str) -> dict[str, str]:
    """The names the lesson's other modules have for `module` to import: name -> the
    import line (what they import, what they define)."""
    known: dict[str, str] = {}
    for name, source in files:
        imports, defined = _module_names(source)
        for bound, line in imports:
            known.setdefault(bound, line)
        if name != module:
            known.update((bound, f"from .{Path(name).stem} import {bound}")
                         for bound in defined)
    return known


@functools.lru_cache(maxsize=64)
def _module_names(source: str) -> tuple[tuple[tuple[str, str], ...], frozenset[str]]:
    """What a module imports at its top, (name bound, the import line), and the names
    it defines there; none for a module that does not parse. A lesson's corpus asks
    it of the same modules for every entry: each is parsed once."""
    try:
        tree = syntax.parse(source)
    except SyntaxError:
        return (), frozenset()
    imports: list[tuple[str, str]] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                imports.append((bound, f"import {alias.name}"
                                + (f" as {alias.asname}" if alias.asname else "")))
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            for alias in node.names:
                where = "." * node.level + (node.module or "")
                imports.append((alias.asname or alias.name,
                                f"from {where} import {alias.name}"
                                + (f" as {alias.asname}" if alias.asname else "")))
    return tuple(imports), frozenset(_top_level_names(tree))


def _free_names(tree: ast.Module, source: str) -> set[str]:
    """The names the module reads that no enclosing function binds: a parameter or a
    local named like another module's function (`now`) needs no import. Worked out
    for each statement at the top of the module apart, from its text: an entry of
    the corpus edits one of them, and the others are the solution's, met before."""
    lines = source.splitlines(keepends=True)
    free: set[str] = set()
    for node in tree.body:
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        free |= _free_in_statement("".join(lines[first - 1:node.end_lineno]))
    return free


@functools.lru_cache(maxsize=4096)
def _free_in_statement(source: str) -> frozenset[str]:
    """The free names of one statement at the top of a module (see _free_names)."""
    free: set[str] = set()

    def bound_in(function: ast.AST) -> set[str]:
        arguments = function.args
        names = {a.arg for a in [*arguments.posonlyargs, *arguments.args,
                                 *arguments.kwonlyargs]}
        names |= {a.arg for a in (arguments.vararg, arguments.kwarg) if a}
        names |= {alias.asname or alias.name.split(".")[0] for node in ast.walk(function)
                  if isinstance(node, (ast.Import, ast.ImportFrom))
                  for alias in node.names}     # imported where it is used
        return names | {node.id for node in ast.walk(function)
                        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}

    def visit(node: ast.AST, local: set[str]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            local = local | bound_in(node)
        if isinstance(node, ast.Name) and node.id not in local:
            free.add(node.id)
        for child in ast.iter_child_nodes(node):
            visit(child, local)

    visit(syntax.parse(source), set())
    return frozenset(free)


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update(alias.asname or alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.Try):
            names.update(_top_level_names(ast.Module(body=node.body, type_ignores=[])))
    return names


def first_failure_misnames(files: dict[str, str], wrong: Wrong,
                           entries: list[dict]) -> str | None:
    """Why the first test that fails on a wrong implementation sends the student to the
    wrong task, or None. The task is the fence the entry's edit is in (an edit outside
    every fence is no student's code: nothing to say)."""
    from .mutate import fenced_lines
    module = find_wrong(files, wrong)
    if module is None:
        return None
    fenced = fenced_lines(files[module])
    tasks = {fenced[line] for line in edited_lines(files[module], wrong) if line in fenced}
    first = next((e for e in entries if e["outcome"] in ("failed", "error")), None)
    if first is None:
        return None
    # A test that said whose code failed it (testing.fail_in) names that task alone.
    said = [first["blames"]] if first.get("blames") else first.get("tasks", [])
    if not tasks or tasks & set(said):
        return None
    named = ", ".join(said) or "no task"
    return (f"{wrong.what!r} is a mistake in task {', '.join(sorted(tasks))}, but the first "
            f"test that fails on it, {first['name'].split('[')[0]}, names {named}: a "
            "student sent there looks in the wrong place")


def does_not_compile(source: str) -> str | None:
    """Why `source` is no Python program (a SyntaxError or IndentationError), or None."""
    try:
        compile(source, course.MODULE, "exec")
    except SyntaxError as error:
        return f"{type(error).__name__}: {error.msg} at line {error.lineno}"
    return None


def edited_lines(solution: str, wrong: Wrong) -> list[int]:
    """The solution's lines (1-based) the entry's edit changes: those of `find` that
    `replace` does not keep as they are. An edit of two places, with the lines between
    them given for context, changes the two places only; a pure insertion is placed
    on the line before it."""
    find, replace = wrong.find.splitlines(), wrong.replace.splitlines()
    first = solution[:solution.index(wrong.find)].count("\n") + 1
    changed: list[int] = []
    opcodes = difflib.SequenceMatcher(a=find, b=replace, autojunk=False).get_opcodes()
    for tag, start, end, _, _ in opcodes:
        if tag == "equal":
            continue
        if start == end:        # an insertion: the line before it
            changed.append(first + max(0, start - 1))
        changed.extend(range(first + start, first + end))
    return sorted(set(changed)) or [first]


# Failures that teach nothing: what a test may never end in, on the starter or on a
# mutant.
PLAIN_FAILURES = {
    "AssertionError", "NotImplementedError", "Failed", "Timeout", "Skipped"}


def unexplained_failure(result: dict) -> str | None:
    """Why this failed test's message leaves a student without words, or None."""
    exception, message = result.get("exception"), str(result.get("message") or "")
    if exception == "Failed" and message.startswith(("DID NOT RAISE", "DID NOT WARN")):
        return (f"ends in a bare {message.splitlines()[0]!r}: say what was expected "
                f"instead "
                "(check the outcome in the test and fail with words)")
    if result.get("raised_in") == "test" and exception not in PLAIN_FAILURES:
        first = message.splitlines()[0] if message else ""
        return (f"ends in {exception} ({first[:120]}) raised by the test's own code at "
                f"{result.get('raised_at')}: check what the test relies on first and "
                f"fail "
                "with words about it")
    return None


def _short(nodeid: str) -> str:
    return nodeid.split("::")[-1]


def check_wrong_implementations(lesson: course.Lesson,
                                every_test: bool = False) -> Finding:
    """Each wrong implementation is caught by a test, or survives them all if
    equivalent.

    All of a lesson's mutants run in one pytest process (`--impl a:b:c`); a test that
    fails on one must fail with words (see unexplained_failure). By default a mutant
    stops at its first failing test, which is what a student sees first (an equivalent
    one, failing none, meets every test); this is what `dev check` and CI run. With
    `every_test` (`dev check --every-test`, an hour and more) every test runs on every
    mutant, so that no test anywhere ends in a bare "DID NOT RAISE" or an exception of
    its own on any of them, first failure or not.
    """
    from .mutate import failed_tests, groups_at_once, run_mutants
    finding = Finding(f"wrong implementations of {lesson.name} are caught")
    wrongs = wrong_implementations(lesson)
    if not wrongs:
        finding.problems.append(f"solutions/{lesson.name}/wrong.toml lists no wrong implementations")
        return finding
    from .mutate import fenced_lines
    files = solution_files(lesson)
    tests = set(test_marks(lesson))
    usable, sources = [], []
    for wrong in wrongs:
        mutated = apply_wrong(files, wrong)
        if mutated is not None and wrong.campaign and not all(
                line in fenced_lines(files[mutated[0]])
                for line in edited_lines(files[mutated[0]], wrong)):
            finding.warnings.append(
                f"{wrong.what!r}: its `find` is not inside a task fence (# BEGIN "
                f"{lesson.number}.k ... # END {lesson.number}.k): the campaign's "
                "mistakes are ones a student makes in the code they write")
        if wrong.unusable:
            finding.problems.append(f"{wrong.what!r}: {wrong.unusable}")
        elif bool(wrong.caught_by) == bool(wrong.equivalent):
            finding.problems.append(f"{wrong.what!r}: give exactly one of `caught_by` "
                                    f"(the test "
                                    "that fails on it) and `equivalent` (why no user "
                                    "can tell)")
        elif wrong.caught_by and wrong.caught_by not in tests:
            finding.problems.append(f"{wrong.what!r}: caught_by names "
                                    f"{wrong.caught_by}, which is "
                                    f"not a test in lessons/{lesson.name}")
        elif mutated is None:
            count = sum(text.count(wrong.find) for text in files.values())
            finding.problems.append(f"{wrong.what!r}: its `find` text occurs {count} "
                                    "times in the solution's modules (it must occur "
                                    "exactly once)")
        elif broken := does_not_compile(mutated[1]):
            finding.problems.append(f"{wrong.what!r}: the mutant does not compile "
                                    f"({broken}): fix its find/replace")
        else:
            usable.append(wrong)
            sources.append(mutated)
    if not usable:
        return finding
    # Every test on every mutant is minutes for lesson 11 (~400 mutants of ~90 tests on
    # a server): in groups, each pytest run stays inside PYTEST_TIMEOUT; and on each
    # mutant only the tests that reach what its edit changed (the others pass on it
    # as on the solution: sessionlab.calls). Up to the first failure too: a test that
    # cannot see the edit passes, so leaving it out changes no first failure.
    only = tests_that_see_each(lesson, files, usable, sources)
    # Two entries may make the same program (one mistake, told two ways): it runs once
    programs: dict[tuple[str, str], int] = {}
    program_of = [programs.setdefault(source, len(programs)) for source in sources]
    distinct = list(programs)
    at_once = groups_at_once(lesson)
    chosen = None if only is None else [_joined(
        [only[i] for i, k in enumerate(program_of) if k == program])
        for program in range(len(distinct))]
    ran, output = run_mutants(lesson.root, lesson, distinct, timeout=CHECK_TEST_TIMEOUT,
                              stop_at_first_failure=not every_test,
                              group=EVERY_TEST_GROUP if every_test
                              else FIRST_FAILURE_GROUP,
                              only=chosen, at_once=at_once)
    # A run that died (a mutant that crashed the interpreter, the time limit of a run on
    # a busy machine) took every mutant of its group with it: each of those runs again
    # alone, so that a problem is the mutant's own, never its neighbour's.
    died = [k for k in range(len(distinct)) if not ran.get(k)]
    # So does a mutant that should be caught and is not: a test run on a neighbour
    # may have left the process changed. It is a problem only if it survives alone
    # too. (Few: none, when the corpus holds.)
    died += sorted({k for i, k in enumerate(program_of) if k not in died
                    and usable[i].caught_by and not failed_tests(ran[k])})
    if len(distinct) == 1:
        died = []   # it ran alone already
    # And one recorded as equivalent that a test failed, or one whose first failure
    # names another task, even if it ran alone: a test that times a wait can miss its
    # mark on a machine busy with other runs.
    died += sorted({k for i, k in enumerate(program_of) if k not in died
                    and failed_tests(ran.get(k, [])) and (
                        usable[i].equivalent
                        or first_failure_misnames(files, usable[i], ran[k]))})
    if died:
        found, output = run_mutants(lesson.root, lesson, [distinct[k] for k in died],
                                    timeout=CHECK_TEST_TIMEOUT, group=1,
                                    stop_at_first_failure=not every_test,
                                    only=[chosen[k] for k in died] if chosen else None,
                                    at_once=at_once)
        ran.update({k: found.get(n, []) for n, k in enumerate(died)})
    results = {i: ran.get(k, []) for i, k in enumerate(program_of)}
    for i, wrong in enumerate(usable):
        entries = results.get(i, [])
        if not entries:
            finding.problems.append(f"{wrong.what!r}: no test ran on it, even alone:\n"
                                    f"{output}")
            continue
        if failure := next((e for e in entries if e.get("import_failed")), None):
            first = str(failure.get("message", "")).splitlines()[:1]
            finding.problems.append(
                f"{wrong.what!r}: the mutant does not import "
                f"({failure.get('exception')}: {''.join(first)[:200]}), so no test "
                "can be said to catch it: fix its find/replace")
            continue
        failed = failed_tests(entries)
        if failed and (misnamed := first_failure_misnames(files, wrong, entries)):
            finding.problems.append(misnamed)
        if wrong.equivalent and failed:
            finding.problems.append(
                f"{wrong.what!r} is recorded as equivalent, but {', '.join(failed)} "
                f"fail(s) on it: "
                f"record it as caught (caught_by = {failed[0]!r}) instead")
        elif wrong.caught_by and not failed:
            finding.problems.append(f"{wrong.what!r} is not caught: {wrong.caught_by} "
                                    f"passes on it "
                                    "(and so does every other test)")
        elif wrong.caught_by:
            named = "" if wrong.caught_by in failed else \
                f" (not by {wrong.caught_by}, which passes)"
            finding.notes.append(f"{wrong.what!r}: caught by "
                                 f"{', '.join(failed)}{named}")
        for entry in entries:
            failed_here = entry["outcome"] in ("failed", "error")
            if failed_here and (why := unexplained_failure(entry)):
                finding.problems.append(f"{_short(entry['nodeid']).split('[')[0]} on "
                                        f"the mutant "
                                        f"{wrong.what!r} {why}")
    return finding


def _joined(selections: list[set[str] | None]) -> set[str] | None:
    """The tests chosen for a program two entries make: those of both (None: every
    test, as soon as one entry needs every test)."""
    if any(chosen is None for chosen in selections):
        return None
    return set().union(*selections)


def recorded_calls(lesson: course.Lesson) -> Record:
    """What each test of the lesson calls of its solution, and the lines it reaches
    (sessionlab.calls), from one run of its tests there; empty when that run leaves no
    record.

    A test the record does not name sees everything: a run that stopped before it (a
    KeyboardInterrupt a test let out, a crash) must not leave it off every mutant.

    The corpus check and the mutation pass of a lesson both need it: one run serves
    both, as long as neither the lesson's tests nor its solution changed between.
    """
    key = (str(lesson.root), lesson.name, _files_digest(lesson))
    if (record := _RECORDS.get(key)) is None:
        record = _RECORDS[key] = _record_calls(lesson)
    return record


_RECORDS: dict[tuple[str, str, str], Record] = {}


def _files_digest(lesson: course.Lesson) -> str:
    """One digest of the text of the lesson's tests and solution."""
    digest = hashlib.sha256()
    for folder in (lesson.folder, lesson.solution_folder):
        for path in sorted(folder.rglob("*.py")):
            digest.update(str(path).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _record_calls(lesson: course.Lesson) -> Record:
    with tempfile.TemporaryDirectory() as temp:
        record = Path(temp) / "calls.json"
        run_pytest(lesson.root, [f"lessons/{lesson.name}"], "--solution",
                   "--sessionlab-calls", str(record))
        found = Record.read(json.loads(record.read_text()) if record.exists() else {})
    if found.calls:
        for name in test_marks(lesson):
            found.calls.setdefault(name, ALL)
            found.lines.setdefault(name, ALL)
    return found


def tests_that_see_each(lesson: course.Lesson, files: dict[str, str],
                        wrongs: list[Wrong], mutants: list[tuple[str, str]]
                        ) -> list[set[str] | None]:
    """For each wrong implementation and its mutant (module, text), the names of the
    tests that can see its edit (None: every test), from one run of the tests on the
    solution that records what each calls and reaches; with the test that should catch
    it, whatever the record says (a test that reaches a line only on some runs, as a
    thread's timing goes)."""
    record = recorded_calls(lesson)
    chosen: list[set[str] | None] = []
    for wrong, (module, text) in zip(wrongs, mutants):
        seeing = tests_for_edit(record, files[module], text, module)
        chosen.append(None if seeing is None else
                      seeing | ({wrong.caught_by} if wrong.caught_by else set()))
    return chosen


def check_docs(root: Path) -> Finding:
    finding = Finding("docs build strictly")
    if not (root / "mkdocs.yml").exists():
        finding.problems.append("no mkdocs.yml")
        return finding
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which("mkdocs")
    if mkdocs is None:
        finding.problems.append("mkdocs is not installed: pip install -e '.[docs]'")
        return finding
    with tempfile.TemporaryDirectory() as site:
        done = subprocess.run([mkdocs, "build", "--strict", "--site-dir", site], cwd=root,
                              capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        finding.problems.append(f"`mkdocs build --strict` failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return finding


# --- running them all ----------------------------------------------------------------


def static_checks(root: Path, shipped: Path | None = None, strict: bool = False
                  ) -> list[tuple[str, Callable[[], Finding]]]:
    """The checks that only read files, as (name, callable) pairs. The lessons' own
    files are read in `shipped` (the pristine copy) when given; which starters are
    committed is read at `root`."""
    shipped = shipped or root
    checks = [("lesson folders", lambda: check_folders(root)),
              ("snapshots", lambda: check_snapshots(root)),
              ("starters", lambda: check_starters(root, strict)),
              ("course code width", lambda: check_width(shipped)),
              ("contracts", lambda: check_contracts(shipped)),
              ("designs", lambda: check_designs(shipped))]
    for lesson in course.lessons(shipped):
        checks.append((f"metadata {lesson.name}", lambda l=lesson: check_metadata(l)))
    return checks


def check_mutation_pass(lesson: course.Lesson) -> Finding:
    """The generated mutants (sessionlab.mutate): every one is killed by a test, or is
    the program of a wrong.toml entry (caught or argued equivalent)."""
    from . import mutate
    finding = Finding(f"mutation pass over {lesson.name}")
    result = mutate.mutate_lesson(lesson.root, lesson,
                                  workers=mutate.groups_at_once(lesson))
    for index, why in result.unjudged.items():
        finding.problems.append(f"could not judge {result.mutants[index].describe()}: "
                                f"{why}")
    for mutant in result.survivors:
        finding.problems.append(f"survivor {mutant.describe()}: add a test that fails "
                                f"on it and "
                                "record it in wrong.toml, or record it there as "
                                "equivalent "
                                f"(`sessionlab dev mutate {lesson.number} --toml` "
                                f"prints the entry)")
    for index, why in result.broken.items():
        finding.notes.append(f"not counted: {result.mutants[index].describe()}: {why}")
    finding.notes.append(f"{len(result.mutants)} mutants, score {result.score:.0%}")
    return finding


def pytest_checks(root: Path, docs: bool = True, mutate: bool = False,
                  corpus: bool = True, key: bool = True, lessons: bool = True,
                  every_test: bool = False, starters: bool = True
                  ) -> list[tuple[str, Callable[[], Finding]]]:
    """The checks that run a process (pytest, mkdocs), as (name, callable) pairs.

    `lessons`: each solution passes its lesson; `starters`: each starter fails it for the
    right reason; `key`: each solution passes the earlier lessons' key tests, and each
    task's tests pass with the tasks written up to it (check_tasks_in_order). The root
    `pytest` runs the first (quick), and leaves the starters, the key tests and the docs
    to `pytest -m campaign`.

    `corpus`: also run each lesson's tests on its wrong implementations (wrong.toml),
    up to the first failure of each, or every test on each with `every_test`. The root
    `pytest` leaves the corpus out (it would double its time); `sessionlab dev check`
    runs it, and CI runs it whole (each entry up to its first failure, an equivalent one
    through every test), with the mutation pass (`mutate`), as a step of its own."""
    all_lessons = course.lessons(root)
    checks = []
    for i, lesson in enumerate(all_lessons):
        if (missing := missing_service(lesson)) is not None:
            checks.append((f"lesson {lesson.name}", lambda l=lesson, m=missing:
                           unchecked_lesson(l, m)))
            continue
        if lessons:
            checks.append((f"solution {lesson.name}", lambda l=lesson: check_solution(l)))
        if key:
            checks.append((f"key tests on {lesson.name}",
                           lambda l=lesson, e=all_lessons[:i]: check_key_tests(l, e)))
            checks.append((f"tasks of {lesson.name} in order",
                           lambda l=lesson: check_tasks_in_order(l)))
        if starters:
            checks.append((f"starter {lesson.name}",
                           lambda l=lesson: check_starter_fails_right(l)))
        if corpus or mutate or every_test:
            checks.append((f"{CORPUS_CHECK}{lesson.name}",
                           lambda l=lesson: check_wrong_implementations(
                               l, every_test=every_test)))
        if mutate:
            checks.append((f"{MUTATION_CHECK}{lesson.name}",
                           lambda l=lesson: check_mutation_pass(l)))
    if docs:
        checks.append(("docs", lambda: check_docs(root)))
    return checks


def missing_service(lesson: course.Lesson) -> str | None:
    """Why a service the lesson's tests need is not here (one line), or None."""
    for service in lesson.needs:
        if service == "postgresql":
            from .pgserver import why_not_available
            if (reason := why_not_available()) is not None:
                return reason
        else:
            return f"lesson.toml needs {service!r}, which the kit does not know"
    return None


def unchecked_lesson(lesson: course.Lesson, missing: str) -> Finding:
    """A lesson whose tests would all skip here: a problem in CI, which installs every
    service (`.ci/run`), and one warning elsewhere: a student or a maintainer without
    the server still runs the rest of the check, and is told what was left out."""
    finding = Finding(f"lesson {lesson.name}")
    words = f"lesson {lesson.name} was not checked: {missing}"
    (finding.problems if ci() else finding.warnings).append(words)
    return finding


def all_checks(root: Path, docs: bool = True, mutate: bool = False,
               corpus: bool = True, key: bool = True, lessons: bool = True,
               static: bool = True, every_test: bool = False, starters: bool = True
               ) -> list[tuple[str, Callable[[], Finding]]]:
    """Every check as a (name, callable) pair, cheapest first."""
    return (static_checks(root) if static else []) + pytest_checks(
        root, docs, mutate, corpus, key, lessons, every_test, starters)


def _timed(check: Callable[[], Finding]) -> Finding:
    start = time.perf_counter()
    finding = check()
    finding.seconds = time.perf_counter() - start
    return finding


def heavy_cost(root: Path, name: str, took: dict[str, float]) -> float:
    """What a heavy check is expected to take, in the seconds of the lesson's own test
    run (`took`, by check name): one run of its tests for each wrong implementation;
    the mutation pass stops each mutant at its first failure, about a quarter of that.
    A lesson whose runs go more at a time than the others' (groups_at_once) takes
    that much less.
    """
    from .mutate import GROUPS_AT_ONCE, groups_at_once
    lesson = course.lesson(name.removeprefix(CORPUS_CHECK).removeprefix(MUTATION_CHECK),
                           root)
    runs = len(wrong_implementations(lesson)) * took.get(f"solution {lesson.name}", 1.0)
    runs *= GROUPS_AT_ONCE / groups_at_once(lesson)
    return runs if name.startswith(CORPUS_CHECK) else runs / 4


def run_all(root: Path, docs: bool = True, workers: int = 2,
            mutate: bool = False, strict: bool = False,
            corpus: bool = True, key: bool = True, lessons: bool = True,
            static: bool = True, every_test: bool = False, starters: bool = True,
            progress: Callable[[Finding, int, int], None] | None = None
            ) -> list[Finding]:
    """Every finding, in the order of all_checks, on a pristine copy of the course
    (`strict`: see check_starters). `progress(finding, done, total)` is called as each
    check ends, in the order they end: long runs say what they are doing.

    The static checks run here, one after another: they parse files with `ast`, and CPython
    3.11's parser is not safe to run from two threads at once ("AST constructor recursion depth
    mismatch"). Only the checks that wait on a child process share the thread pool.
    """
    with tempfile.TemporaryDirectory(prefix="sessionlab-check-") as temp:
        shipped = Path(temp) / "course"
        shipped.mkdir()
        lay_out_pristine(root, shipped)
        static = static_checks(root, shipped, strict) if static else []
        slow = pytest_checks(shipped, docs, mutate, corpus, key, lessons, every_test,
                             starters)
        total = len(static) + len(slow)
        findings = []
        for _, check in static:
            findings.append(_timed(check))
            if progress:
                progress(findings[-1], len(findings), total)
        heavy = [i for i, (name, _) in enumerate(slow) if name.startswith(HEAVY_CHECKS)]
        light = [i for i in range(len(slow)) if i not in heavy]
        running: dict[int, Future[Finding]] = {}
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for phase in (light, heavy):
                if phase is heavy:
                    # Each heavy check is minutes: started longest first, none is left
                    # to run alone at the end while the other workers sit idle.
                    took = {slow[i][0]: running[i].result().seconds for i in light}
                    phase = sorted(heavy, key=lambda i: -heavy_cost(shipped, slow[i][0],
                                                                    took))
                now = {i: pool.submit(_timed, slow[i][1]) for i in phase}
                for done, future in enumerate(as_completed(now.values()),
                                              len(findings) + len(running) + 1):
                    if progress:
                        progress(future.result(), done, total)
                running.update(now)
            findings += [running[i].result() for i in range(len(slow))]
        for finding in findings:
            _point_home(finding, shipped, root)
    return findings


def progress_line(finding: Finding, done: int, total: int) -> str:
    """One line as a check ends: `[ 7/52] solution 03_fork: ok (4.1 s)`."""
    width = len(str(total))
    result = "ok" if finding.ok else f"{len(finding.problems)} problem(s)"
    return (f"[{done:>{width}}/{total}] {finding.check}: {result} "
            f"({finding.seconds:.1f} s)")


def _point_home(finding: Finding, shipped: Path, root: Path) -> None:
    """Paths in the copy's output name the course's own files (they are the same
    files, or their committed or generated versions)."""
    for words in (finding.problems, finding.notes, finding.warnings):
        words[:] = [text.replace(str(shipped), str(root)) for text in words]


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.table import Table

    parser = argparse.ArgumentParser(prog="sessionlab dev check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-docs", action="store_true", help="skip the strict docs build")
    parser.add_argument("--workers", type=int, default=2, help="pytest processes at once (default 2)")
    parser.add_argument("--mutate", action="store_true",
                        help="also run the generated mutation pass (`sessionlab dev "
                             "mutate`); slower, so CI runs it as a step of its own")
    parser.add_argument("--every-test", action="store_true",
                        help="run every test that reaches its edit on every wrong "
                             "implementation, not only up to its first failure, so "
                             "that each failure a mistake can meet is shown to fail "
                             "with words (an hour and more: after a change to many "
                             "tests' words)")
    parser.add_argument("--corpus-only", action="store_true",
                        help="only the wrong implementations (and, with --mutate, the "
                             "mutation pass), after each solution's run on its lesson, "
                             "which orders them: CI's step for the heavy checks, whose "
                             "earlier steps run the others (the README's test command, "
                             "the campaign)")
    parser.add_argument("--verbose", action="store_true",
                        help="also show notes: which tests caught each wrong "
                             "implementation")
    args = one_line_errors(parser).parse_args(argv)
    console = Console()
    root = course.find_root()
    # --corpus-only: each solution's run stays, as the longest-first order of the heavy
    # checks is read from how long a lesson's tests take.
    only = dict(docs=False, static=False, key=False, starters=False) \
        if args.corpus_only else dict(docs=not args.no_docs)
    findings = run_all(root, workers=args.workers, **only,
                       mutate=args.mutate, every_test=args.every_test, strict=ci(),
                       progress=lambda finding, done, total: console.print(
                           progress_line(finding, done, total), highlight=False))
    table = Table("check", "result", "seconds")
    for finding in findings:
        table.add_row(finding.check, "[green]ok[/]" if finding.ok else f"[red]{len(finding.problems)} problem(s)[/]",
                      f"{finding.seconds:.1f}")
    console.print(table)
    for finding in findings:
        for note in finding.notes if args.verbose else ():
            console.print(f"[bold]{finding.check}[/]: "
                          f"{note}", markup=True, highlight=False)
    for finding in findings:
        for warning in finding.warnings:
            console.print(f"[yellow bold]{finding.check}[/] (warning): "
                          f"{warning}", markup=True, highlight=False)
    for finding in findings:
        for problem in finding.problems:
            console.print(f"[red bold]{finding.check}[/]: {problem}", markup=True, highlight=False)
    failed = sum(not f.ok for f in findings)
    console.print(f"{len(findings) - failed} of {len(findings)} checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
