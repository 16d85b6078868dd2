"""Is the design left to the student? Two rules of the maintainers' check.

1. No given code after a task's fence reads what the fence makes. A starter that says
   "TODO" and then goes on with code using a variable the student must set hands over the
   design: which variables, of which shape. The student's part ends in a result that the
   given code takes through a call (a function's contract), never through a local name.
2. Every lesson has a design task (`design = true` in lesson.toml): its fence holds the
   whole body of each function it is in, so the shape is the student's, and the tests
   marked with it check behaviour only: they reach no private name of the lesson's code
   (an attribute starting with one underscore), so any correct design passes.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from . import course, syntax

BEGIN = re.compile(r"\s*# BEGIN (?P<task>\d\d\.\d+)\s*$")


@dataclass(frozen=True)
class Fence:
    task: str
    module: str          # file name in the lesson's solution folder
    begin: int           # line of "# BEGIN", from 1
    end: int             # line of "# END"


def fences(module: str, text: str) -> list[Fence]:
    """The task fences of one solution module."""
    lines = text.splitlines()
    found = []
    for number, line in enumerate(lines, start=1):
        if match := BEGIN.match(line):
            closing = f"# END {match['task']}"
            end = next((k for k in range(number, len(lines) + 1)
                        if lines[k - 1].strip() == closing), None)
            if end is not None:
                found.append(Fence(match["task"], module, number, end))
    return found


def enclosing_function(tree: ast.AST, fence: Fence) -> ast.FunctionDef | None:
    """The innermost function whose body holds the fence."""
    best = None
    for node in ast.walk(tree):
        if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                and node.lineno < fence.begin < node.end_lineno
                and (best is None or node.lineno > best.lineno)):
            best = node
    return best


def _made_inside(function: ast.AST, fence: Fence) -> set[str]:
    """Local names the fence binds or changes in place (`x = …`, `x.append(…)`,
    `x[k] = …`)."""
    made: set[str] = set()
    for node in ast.walk(function):
        if not fence.begin < getattr(node, "lineno", 0) < fence.end:
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            made.add(node.id)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and isinstance(node.func.value, ast.Name)):
            made.add(node.func.value.id)
        elif (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store)
              and isinstance(node.value, ast.Name)):
            made.add(node.value.id)
    return made


def _comprehension_names(function: ast.AST) -> set[str]:
    """Names bound by comprehensions: each lives in its own scope."""
    return {target.id for node in ast.walk(function) if isinstance(node, ast.comprehension)
            for target in ast.walk(node.target) if isinstance(target, ast.Name)}


def presumed(text: str, fence: Fence) -> list[str]:
    """The names the fence makes that given code after it, in the same function,
    reads: what the starter presumes of the student's design."""
    tree = syntax.parse(text)
    function = enclosing_function(tree, fence)
    if function is None:
        return []
    made = _made_inside(function, fence) - _comprehension_names(function)
    read_after = {node.id for node in ast.walk(function)
                  if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
                  and getattr(node, "lineno", 0) > fence.end}
    # `self` is the object, not a variable of the student's design
    return sorted((made & read_after) - {"self", "cls"})


def _body_without_docstring(function: ast.FunctionDef) -> list[ast.stmt]:
    body = function.body
    if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)):
        body = body[1:]
    return body


def given_around(text: str, fence: Fence) -> list[int]:
    """Lines of code in the fence's function that the fence does not hold (given code
    before or after it): [] when the student writes the whole body."""
    tree = syntax.parse(text)
    function = enclosing_function(tree, fence)
    if function is None:
        return [fence.begin]
    return [statement.lineno for statement in _body_without_docstring(function)
            if not fence.begin < statement.lineno < fence.end]


def private_reaches(path: Path, task: str) -> list[str]:
    """`test: ._name` for every private attribute that a test marked with `task`
    reaches on something other than its own `self` or a module it imports."""
    tree = syntax.parse(path.read_text(encoding="utf-8"), filename=str(path))
    # `os._exit` is the standard library's, not a name of the student's design
    modules = {alias.asname or alias.name for node in tree.body
               if isinstance(node, ast.Import) for alias in node.names}
    reaches = []
    for node in tree.body:
        if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")):
            continue
        marks = [d.args[0].value for d in node.decorator_list
                 if isinstance(d, ast.Call) and ast.unparse(d.func) == "pytest.mark.task"
                 and d.args and isinstance(d.args[0], ast.Constant)]
        if task not in marks:
            continue
        for sub in ast.walk(node):
            # setattr(x, "_name", …) and monkeypatch.setattr(x, "_name", …) reach it too
            if (isinstance(sub, ast.Call) and len(sub.args) >= 2
                    and ast.unparse(sub.func).endswith("setattr")
                    and isinstance(sub.args[1], ast.Constant)
                    and isinstance(sub.args[1].value, str)
                    and sub.args[1].value.startswith("_")
                    and not sub.args[1].value.startswith("__")):
                reaches.append(f"{node.name}: .{sub.args[1].value}")
            if (isinstance(sub, ast.Attribute) and sub.attr.startswith("_")
                    and not sub.attr.startswith("__")
                    and not (isinstance(sub.value, ast.Name)
                             and sub.value.id in modules | {"self"})):
                reaches.append(f"{node.name}: .{sub.attr}")
    return sorted(set(reaches))


def lesson_problems(lesson: course.Lesson) -> list[str]:
    """What rules 1 and 2 find in one lesson."""
    problems = []
    modules = {path.name: path.read_text(encoding="utf-8")
               for path in course.lesson_modules(lesson.solution_folder)}
    all_fences = [fence for name, text in modules.items() for fence in fences(name, text)]
    for fence in all_fences:
        if names := presumed(modules[fence.module], fence):
            problems.append(
                f"task {fence.task}: the code after its fence in {fence.module} (line "
                f"{fence.end}) reads {', '.join(names)}, which the student's part makes: "
                "the starter presumes their design. Widen the fence to the whole "
                "function, or make the student's part a function whose result is used")
    designs = [task for task in lesson.tasks if task.design]
    if not designs:
        problems.append(f"{lesson.name} has no design task: mark one task `design = true`"
                        " whose fence is whole functions and whose tests check behaviour")
    tests = sorted(lesson.folder.glob("test_*.py"))
    for task in designs:
        for fence in (f for f in all_fences if f.task == task.id):
            if lines := given_around(modules[fence.module], fence):
                problems.append(
                    f"design task {task.id}: its fence in {fence.module} leaves given code "
                    f"in the function (lines {', '.join(map(str, lines))}): a design task"
                    " fences whole function bodies")
        for path in tests:
            for reach in private_reaches(path, task.id):
                problems.append(f"design task {task.id}: {path.name} {reach} is a private "
                                "name of one design: test what it does instead")
    return problems
