"""The systematic pass over the student's code (`sessionlab dev mutate [NN]`).

Where `solutions/NN_topic/wrong.toml` lists the mistakes people make, this pass finds
the ones nobody thought of: it makes every small edit an AST mutator can make *inside
the task fences* of a solution (the code a student writes), runs the lesson's tests on
each mutant, and lists the survivors, the mutants no test fails on.

Why not mutmut: mutmut 3 mutates whole functions of whole files, through trampolines
that need the code importable as a package from its `mutants/` copy; it cannot be
pointed at line ranges (only lines can be excluded, one `# pragma: no mutate` at a
time), and a lesson's code is loaded by path under a name of its own. The edits here are
the ones mutation tools make (mutmut's and cosmic-ray's operators), restricted to the
fenced lines.

The edits:
  compare     <  <=  >  >=  ==  !=  in / not in  is / is not: each to its neighbour
  boolean     and <-> or; `not x` -> x; a condition of if/while negated
  constant    an int n -> n+1 and n-1; True <-> False
  slice       a bound that is an expression -> expression + 1
  arithmetic  + <-> -, += <-> -=
  call        a call made for its effect removed (os.fsync, flush, close, append ...);
              the first two positional arguments swapped; a keyword argument left out
              (`durable=True`, `ensure_ascii=False`, `missing_ok=True`: the default
              instead, the mistake of a student who forgot it)
  return      `return x` -> `return None`
  except      an except branch's body replaced by `raise` (as if it were not there)
  loop        break <-> continue

Each mutant is also a find/replace pair over the solution's text, the form wrong.toml
entries take: a survivor is triaged by adding a test and recording it with `caught_by`,
or by recording it with `equivalent = "why no user can tell"`. Mutants that match a
wrong.toml entry (the same mutated text) are the corpus's, not the pass's, and are not
run twice.

All of a lesson's mutants run in one pytest process (two at a time), each one's tests
stopping at its first failure.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import sys
import tempfile
import time
import tomllib
from collections.abc import Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from . import course, starters, syntax
from .cli.ui import one_line_errors

MUTANT_TEST_TIMEOUT = (
    15.0  # seconds a test may take on a mutant: a mutant that hangs is caught
)
CHUNK = 60  # mutants in one pytest process
GROUPS_AT_ONCE = 2  # pytest runs of one lesson's mutants side by side (run_mutants)
MOST_AT_ONCE = 8    # the most a lesson's wrong.toml may ask for (groups_at_once)


def groups_at_once(lesson: course.Lesson) -> int:
    """How many pytest runs of the lesson's mutants go side by side: GROUPS_AT_ONCE,
    or the lesson's own number (`groups_at_once` at the top of its wrong.toml). A
    lesson whose tests mostly wait (for a lock another process holds, for a database
    server) leaves the processor idle at two: more of its runs fill that time."""
    path = lesson.solution_folder / "wrong.toml"
    if not path.exists():
        return GROUPS_AT_ONCE
    asked = tomllib.loads(path.read_text(encoding="utf-8")).get(
        "groups_at_once", GROUPS_AT_ONCE)
    if not isinstance(asked, int) or isinstance(asked, bool) \
            or not 1 <= asked <= MOST_AT_ONCE:
        raise course.CourseError(f"{path}: groups_at_once must be a whole number from 1 "
                                 f"to {MOST_AT_ONCE}, not {asked!r}")
    return asked


@dataclass(frozen=True)
class Mutant:
    task: str  # the fence it is in: "03.1"
    line: int  # first line of the edit in its module
    kind: str  # "compare", "constant", "call" ...
    find: str  # the solution's text around the edit (occurs exactly once)
    replace: str  # the same text with the edit made
    source: str  # the whole mutated module
    module: str = course.MODULE  # which module of the solution it changes

    def describe(self) -> str:
        old = " / ".join(
            line.strip() for line in self.find.splitlines()[-self._span() :]
        )
        new = (
            " / ".join(
                line.strip() for line in self.replace.splitlines()[-self._span() :]
            )
            or "(removed)"
        )
        return (f"{self.task} {self.module}:{self.line} ({self.kind}): {old}  ->  "
                f"{new}")

    def _span(self) -> int:
        return max(1, len(self.find.splitlines()) - self._context())

    def _context(self) -> int:
        """Lines of context before the edit that find and replace share."""
        n = 0
        for a, b in zip(self.find.splitlines(), self.replace.splitlines()):
            if a != b:
                break
            n += 1
        return min(n, len(self.find.splitlines()) - 1)

    def toml(self) -> str:
        """A wrong.toml entry for this mutant, to fill in once triaged."""
        return (
            "[[wrong]]\n"
            f"what = {json.dumps('(generated) ' + self.describe(), ensure_ascii=False)}"
            "\n"
            f"find = {json.dumps(self.find, ensure_ascii=False)}\n"
            f"replace = {json.dumps(self.replace, ensure_ascii=False)}\n"
            'caught_by = "test_..."   # or: equivalent = "why no user can tell"\n'
        )


# --- where the student's code is ------------------------------------------------------


def fenced_lines(solution: str) -> dict[int, str]:
    """Line number (1-based) -> task id, for every line strictly inside a task fence."""
    lines: dict[int, str] = {}
    task = None
    for number, line in enumerate(solution.splitlines(), start=1):
        if begin := starters.BEGIN.match(line):
            task = begin["task"]
        elif starters.END.match(line):
            task = None
        elif task is not None:
            lines[number] = task
    return lines


# --- the edits ------------------------------------------------------------------------

COMPARE_SWAPS: dict[type, tuple[type, ...]] = {
    ast.Lt: (ast.LtE,),
    ast.LtE: (ast.Lt,),
    ast.Gt: (ast.GtE,),
    ast.GtE: (ast.Gt,),
    ast.Eq: (ast.NotEq,),
    ast.NotEq: (ast.Eq,),
    ast.In: (ast.NotIn,),
    ast.NotIn: (ast.In,),
    ast.Is: (ast.IsNot,),
    ast.IsNot: (ast.Is,),
}
BINOP_SWAPS = {ast.Add: ast.Sub, ast.Sub: ast.Add}


@dataclass(frozen=True)
class Edit:
    start: tuple[int, int]  # (line, column) where the replaced text starts
    end: tuple[int, int]  # (line, column) where it ends
    text: str  # what goes there
    kind: str


def _span(node: ast.AST) -> tuple[tuple[int, int], tuple[int, int]]:
    return (node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset)


def _expr(node: ast.AST, new: ast.AST, kind: str) -> Edit:
    return Edit(*_span(node), f"({ast.unparse(new)})", kind)


def _copy(node: ast.AST) -> ast.AST:
    return syntax.parse(ast.unparse(node), mode="eval").body


def edits(tree: ast.AST) -> Iterator[tuple[ast.AST, Edit]]:
    """Every edit the mutator makes, with the node it is made to."""
    inside_fstring: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):  # positions inside f-strings are unreliable
            inside_fstring.update(
                id(child) for child in ast.walk(node) if child is not node
            )
    for node in ast.walk(tree):
        if id(node) in inside_fstring or not hasattr(node, "lineno"):
            continue
        yield from ((node, edit) for edit in _edits_of(node))


def _edits_of(node: ast.AST) -> Iterator[Edit]:
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            for other in COMPARE_SWAPS.get(type(op), ()):
                new = _copy(node)
                new.ops[i] = other()
                yield _expr(node, new, "compare")
    elif isinstance(node, ast.BoolOp):
        new = _copy(node)
        new.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        yield _expr(node, new, "boolean")
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield Edit(*_span(node), f"({ast.unparse(node.operand)})", "boolean")
    elif (
        isinstance(node, ast.BinOp)
        and type(node.op) in BINOP_SWAPS
        and not any(
            isinstance(side, ast.JoinedStr)
            or (isinstance(side, ast.Constant) and isinstance(side.value, (str, bytes)))
            for side in (node.left, node.right)
        )
    ):  # "a" - "b" only ever raises TypeError
        new = _copy(node)
        new.op = BINOP_SWAPS[type(node.op)]()
        yield _expr(node, new, "arithmetic")
    elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
        yield Edit(*_span(node), str(not node.value), "constant")
    elif isinstance(node, ast.Constant) and isinstance(node.value, int):
        for value in (node.value + 1, node.value - 1):
            text = _like(getattr(node, "text", ""), value)
            yield Edit(*_span(node), text if value >= 0 else f"({text})", "constant")
    elif isinstance(node, ast.Slice):
        for bound in (node.lower, node.upper):
            if bound is not None and not isinstance(bound, ast.Constant):
                yield Edit(*_span(bound), f"({ast.unparse(bound)}) + 1", "slice")
    elif isinstance(node, ast.Call):
        positional = [a for a in node.args if not isinstance(a, ast.Starred)]
        if len(positional) >= 2 and len(positional) == len(node.args):
            new = _copy(node)
            new.args[0], new.args[1] = new.args[1], new.args[0]
            yield _expr(node, new, "arguments")
        for i, keyword in enumerate(node.keywords):
            if keyword.arg is not None:     # a keyword forgotten: the default instead
                new = _copy(node)
                del new.keywords[i]
                yield _expr(node, new, "keyword")
    if isinstance(node, (ast.If, ast.While)) and not _flips_itself(node.test):
        yield Edit(*_span(node.test), f"not ({ast.unparse(node.test)})", "negate")
    elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        yield Edit(*_span(node), "pass", "call")
    elif (
        isinstance(node, ast.Return)
        and node.value is not None
        and not (isinstance(node.value, ast.Constant) and node.value.value is None)
    ):
        yield Edit(*_span(node), "return None", "return")
    elif isinstance(node, ast.AugAssign) and type(node.op) in BINOP_SWAPS:
        new = ast.AugAssign(
            target=node.target, op=BINOP_SWAPS[type(node.op)](), value=node.value
        )
        yield Edit(*_span(node), ast.unparse(new), "arithmetic")
    elif isinstance(node, ast.Break):
        yield Edit(*_span(node), "continue", "loop")
    elif isinstance(node, ast.Continue):
        yield Edit(*_span(node), "break", "loop")
    elif isinstance(node, ast.ExceptHandler):
        first, last = node.body[0], node.body[-1]
        yield Edit(
            (first.lineno, first.col_offset),
            (last.end_lineno, last.end_col_offset),
            "raise",
            "except",
        )


def _like(written: str, value: int) -> str:
    """`value` written the way the original literal was (0o600 -> 0o601, 0x10 -> 0x11).
    """
    for prefix, form in (("0o", "o"), ("0x", "x"), ("0b", "b")):
        if written.lower().startswith(prefix) and value >= 0:
            return prefix + format(value, form)
    return str(value)


def _flips_itself(test: ast.AST) -> bool:
    """A condition whose own edit already negates it (`x is None`, `not x`)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return True
    return (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and type(test.ops[0])
        in (ast.Eq, ast.NotEq, ast.In, ast.NotIn, ast.Is, ast.IsNot)
    )


def _apply(lines: list[str], edit: Edit) -> list[str]:
    (l1, c1), (l2, c2) = edit.start, edit.end
    head, tail = lines[l1 - 1][:c1], lines[l2 - 1][c2:]
    return (
        lines[: l1 - 1]
        + (head + edit.text + tail).splitlines(keepends=True)
        + lines[l2:]
    )


def _unique_find(
    solution_lines: list[str],
    mutated_lines: list[str],
    first: int,
    last: int,
    text: str,
) -> tuple[str, str] | None:
    """find/replace texts covering lines first..last (1-based), widened upwards until
    unique."""
    grown = len(mutated_lines) - len(solution_lines)
    for before in range(0, 6):
        start = max(1, first - before)
        find = "".join(solution_lines[start - 1 : last])
        replace = "".join(mutated_lines[start - 1 : last + grown])
        if text.count(find) == 1:
            return find, replace
        if start == 1:
            break
    return None


def lesson_mutants(files: dict[str, str]) -> list[Mutant]:
    """Every compilable mutant of the fenced code of a solution's modules."""
    return [mutant for module, text in files.items()
            for mutant in mutants(text, module)]


def mutants(solution: str, module: str = course.MODULE) -> list[Mutant]:
    """Every compilable mutant of the fenced code of `solution` (the text of one
    module), each a distinct program."""
    fenced = fenced_lines(solution)
    tree = syntax.parse(solution)
    lines = solution.splitlines(keepends=True)
    for node in ast.walk(tree):  # how each int literal is written, for off-by-one edits
        if isinstance(node, ast.Constant) and type(node.value) is int:
            node.text = ast.get_source_segment(solution, node) or ""
    seen = {solution}
    found = []
    for node, edit in edits(tree):
        first, last = edit.start[0], edit.end[0]
        if not all(n in fenced for n in range(first, last + 1)):
            continue
        mutated_lines = _apply(lines, edit)
        source = "".join(mutated_lines)
        if source in seen:
            continue
        seen.add(source)
        try:
            compile(source, module, "exec")
        except SyntaxError:
            continue
        pair = _unique_find(lines, mutated_lines, first, last, solution)
        if pair is None or pair[0] == pair[1]:
            continue
        found.append(Mutant(fenced[first], first, edit.kind, pair[0], pair[1], source,
                            module))
    found.sort(key=lambda m: (m.line, m.kind))
    return found


# --- running them ---------------------------------------------------------------------


@dataclass
class LessonMutation:
    lesson: str
    mutants: list[Mutant] = field(default_factory=list)
    killed: dict[int, str] = field(
        default_factory=dict
    )  # index -> the first test that failed
    in_corpus: list[int] = field(
        default_factory=list
    )  # same program as a wrong.toml entry
    equivalent: list[int] = field(default_factory=list)  # ... entry argued equivalent
    unjudged: dict[int, str] = field(
        default_factory=dict
    )  # index -> why it could not be run
    broken: dict[int, str] = field(
        default_factory=dict
    )  # index -> why it does not import: no program to test, neither killed nor alive
    seconds: float = 0.0

    @property
    def survivors(self) -> list[Mutant]:
        skip = (
            set(self.killed)
            | set(self.in_corpus)
            | set(self.equivalent)
            | set(self.unjudged)
            | set(self.broken)
        )
        return [m for i, m in enumerate(self.mutants) if i not in skip]

    @property
    def score(self) -> float:
        """Killed (or caught by the corpus) of the mutants not argued equivalent."""
        judged = (len(self.mutants) - len(self.equivalent) - len(self.unjudged)
                  - len(self.broken))
        return 1.0 if judged <= 0 else (judged - len(self.survivors)) / judged


def impl_index(test_name: str) -> int | None:
    """Which implementation a test ran on, from its id: test_x[impl07], test_y[3-impl112]
    (impl00 ... impl99, then impl100: every digit counts, not two)."""
    found = re.search(r"\bimpl(\d+)\b", test_name)
    return int(found[1]) if found else None


# pytest's exit status when it gives a run up (pytest.ExitCode.INTERNAL_ERROR)
PYTEST_INTERNAL_ERROR = 3


def run_mutants(
    root: Path,
    lesson: course.Lesson,
    sources: list[tuple[str, str]],
    *,
    timeout: float = MUTANT_TEST_TIMEOUT,
    stop_at_first_failure: bool = True,
    extra: tuple[str, ...] = (),
    group: int | None = None,
    only: list[set[str] | None] | None = None,
    at_once: int = GROUPS_AT_ONCE,
) -> tuple[dict[int, list[dict]], str]:
    """Run the lesson's tests on each mutant, (module, its mutated text), the rest of
    the solution as it is; (index -> that mutant's test results, output tail). With
    `group`, one pytest run for each `group` mutants: every test on every mutant of a
    lesson whose tests need a server takes minutes, and one run must stay well inside
    the time that stops a hang. `only`, beside `sources`: the names of the tests to
    run on each mutant (None: every test; see sessionlab.calls).

    The groups run `at_once` at a time (see groups_at_once): a lesson's tests often
    wait (on a writer process, a lock, the database server), so a second run fills
    the time one leaves idle.

    Results of a mutant whose process died (a crash, an overall timeout) are missing:
    the caller may run those alone.
    """
    if group and len(sources) > group:
        starts = range(0, len(sources), group)

        def run_group(start: int) -> tuple[dict[int, list[dict]], str]:
            return run_mutants(root, lesson, sources[start:start + group],
                               timeout=timeout, extra=extra,
                               stop_at_first_failure=stop_at_first_failure,
                               only=only[start:start + group] if only else None)

        merged: dict[int, list[dict]] = {}
        outputs = []
        with ThreadPoolExecutor(max_workers=at_once) as pool:
            for start, (found, output) in zip(starts, pool.map(run_group, starts)):
                merged.update({start + i: entries for i, entries in found.items()})
                outputs.append(output)
        return merged, "\n".join(outputs)[-3000:]
    from .maintainers import run_pytest

    results: dict[int, list[dict]] = {i: [] for i in range(len(sources))}
    with tempfile.TemporaryDirectory(prefix="sessionlab-mutants-") as temp:
        paths = []
        modules = course.lesson_modules(lesson.solution_folder)
        for i, (module, source) in enumerate(sources):
            folder = Path(temp) / f"m{i:03d}"
            folder.mkdir()
            for path in modules:
                shutil.copyfile(path, folder / path.name)
            (folder / module).write_text(source, encoding="utf-8")
            paths.append(str(folder / course.MODULE))
        # --tb=no: what is read of a failure is the report's entry (its exception, its
        # words); pytest's traceback, which reads the source of every frame, would be
        # formatted for no one.
        args = ["--impl", os.pathsep.join(paths), "--timeout", f"{timeout:g}", "--tb=no",
                *extra]
        if only and any(names is not None for names in only):
            selection = Path(temp) / "only.json"
            selection.write_text(json.dumps({
                str(Path(path).resolve()): sorted(names)
                for path, names in zip(paths, only) if names is not None}))
            args += ["--sessionlab-only", str(selection)]
        if stop_at_first_failure:
            args.append("--sessionlab-stop-after-failure")
        status, report, output = run_pytest(root, [f"lessons/{lesson.name}"], *args)
    for entry in report.get("results", []):
        name = entry.get("name", "")
        index = impl_index(name)
        if index is not None:
            results.setdefault(index, []).append(entry)
        elif len(sources) == 1:
            results[0].append(entry)
    # A run that timed out, or that pytest itself gave up (exit status 3, an internal
    # error: one seen formatting a mutant's traceback), stopped at some test: what it
    # left unrun is unknown, so none of its mutants has results (the caller may run
    # them alone).
    if status is None or status == PYTEST_INTERNAL_ERROR or not report.get("results"):
        for i in results:
            results[i] = []
    return results, output


def failed_tests(entries: list[dict]) -> list[str]:
    return sorted(
        {
            e["name"].split("[", 1)[0]
            for e in entries
            if e["outcome"] in ("failed", "error")
        }
    )


def mutate_lesson(
    root: Path, lesson: course.Lesson, workers: int = 2,
    tasks: Collection[str] = (),
) -> LessonMutation:
    """The mutation pass over a lesson's fenced code, or over the fences of `tasks` only
    (a maintainer working on one task need not wait for the lesson's other mutants)."""
    from .maintainers import (
        apply_wrong, recorded_calls, solution_files, wrong_implementations)

    started = time.perf_counter()
    files = solution_files(lesson)
    result = LessonMutation(lesson.name, [mutant for mutant in lesson_mutants(files)
                                          if not tasks or mutant.task in tasks])
    corpus = {}
    for wrong in wrong_implementations(lesson):
        mutated = apply_wrong(files, wrong)
        if mutated is not None:
            corpus[mutated] = wrong
    todo = []
    for i, mutant in enumerate(result.mutants):
        wrong = corpus.get((mutant.module, mutant.source))
        if wrong is None:
            todo.append(i)
        elif wrong.equivalent:
            result.equivalent.append(i)
        else:
            result.in_corpus.append(i)
    size = max(1, min(CHUNK, -(-len(todo) // workers)))  # every worker gets a share
    chunks = [todo[i : i + size] for i in range(0, len(todo), size)]
    # On each mutant, only the tests that reach what it changed (the others pass on it
    # as on the solution: sessionlab.calls)
    from .calls import Record, tests_for_edit
    record = recorded_calls(lesson) if todo else Record({}, {})

    def run(chunk: list[int]) -> dict[int, list[dict]]:
        mutants = [result.mutants[i] for i in chunk]
        found, output = run_mutants(
            root, lesson, [(mutant.module, mutant.source) for mutant in mutants],
            only=[tests_for_edit(record, files[m.module], m.source, m.module)
                  for m in mutants]
        )
        return {chunk[j]: entries for j, entries in found.items()}

    with ThreadPoolExecutor(max_workers=workers) as pool:
        for found in pool.map(run, chunks):
            for index, entries in found.items():
                if not entries:
                    # Its whole process died: run this mutant alone to see which one it
                    # was.
                    alone, output = run_mutants(
                        root, lesson, [(result.mutants[index].module,
                                        result.mutants[index].source)]
                    )
                    entries = alone.get(0, [])
                if not entries:
                    result.unjudged[index] = "its pytest run ended without a report"
                elif failure := next(
                    (e for e in entries if e.get("import_failed")), None
                ):
                    result.broken[index] = (
                        f"does not import ({failure.get('exception')}: "
                        f"{''.join(str(failure.get('message', '')).splitlines()[:1])[:200]})"
                    )
                elif failed := failed_tests(entries):
                    result.killed[index] = failed[0]
    result.seconds = time.perf_counter() - started
    return result


def report_text(results: list[LessonMutation], overall: bool = True) -> str:
    """Survivors per lesson and the score, as plain text (also the file `--out` writes).
    """
    out = []
    for r in results:
        out.append(
            f"## {r.lesson}: {len(r.mutants)} mutants, {len(r.killed)} killed by "
            f"tests, "
            f"{len(r.in_corpus)} in wrong.toml, {len(r.equivalent)} argued equivalent, "
            f"{len(r.unjudged)} unjudged, "
            + (f"{len(r.broken)} that do not import, " if r.broken else "")
            + f"{len(r.survivors)} survivors; "
            f"score {r.score:.0%} ({r.seconds:.0f} s)"
        )
        for index, why in sorted(r.unjudged.items()):
            out.append(f"  unjudged: {r.mutants[index].describe()}: {why}")
        for index, why in sorted(r.broken.items()):
            out.append(f"  not counted: {r.mutants[index].describe()}: {why}")
        for mutant in r.survivors:
            out.append(f"  survivor: {mutant.describe()}")
        out.append("")
    total = sum(
        len(r.mutants) - len(r.equivalent) - len(r.unjudged) - len(r.broken)
        for r in results
    )
    alive = sum(len(r.survivors) for r in results)
    if total and overall:
        out.append(
            f"overall: {total - alive} of {total} killed "
            f"({(total - alive) / total:.0%})"
        )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="sessionlab dev mutate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "lessons", nargs="*", help="lesson numbers or names (default: all)"
    )
    parser.add_argument(
        "--list", action="store_true", help="only list the mutants, run nothing"
    )
    parser.add_argument(
        "--toml",
        action="store_true",
        help="print each survivor as a wrong.toml entry to fill in",
    )
    parser.add_argument(
        "--out", metavar="FILE", help="also write the survivors to FILE"
    )
    parser.add_argument(
        "--workers", type=int, default=2, help="pytest processes at once"
    )
    parser.add_argument(
        "--task", action="append", default=[], metavar="NN.K",
        help="only the mutants of this task's fences (may be given more than once)",
    )
    args = one_line_errors(parser).parse_args(argv)
    root = course.find_root()
    chosen = [course.lesson(ref, root) for ref in args.lessons] or [
        item for item in course.lessons(root) if item.module_path("solution").is_file()
    ]
    if args.task:
        known = {task.id for lesson in chosen for task in lesson.tasks}
        if unknown := [task for task in args.task if task not in known]:
            parser.error(f"--task {unknown[0]}: no such task in "
                          f"{', '.join(lesson.name for lesson in chosen)}")
        chosen = [lesson for lesson in chosen
                  if any(task.id in args.task for task in lesson.tasks)]
    if args.list:
        for lesson in chosen:
            from .maintainers import solution_files
            for mutant in lesson_mutants(solution_files(lesson)):
                if not args.task or mutant.task in args.task:
                    print(f"{lesson.name} {mutant.describe()}")
        return 0
    results = []
    for lesson in chosen:
        result = mutate_lesson(root, lesson, workers=args.workers, tasks=args.task)
        results.append(result)
        print(report_text([result], overall=False), end="", flush=True)
        if args.toml:
            for mutant in result.survivors:
                print(mutant.toml())
    text = report_text(results)
    print(text.splitlines()[-1])
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    return 1 if any(r.survivors or r.unjudged for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
