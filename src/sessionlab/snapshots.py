"""Every lesson's reference code, generated from one annotated source.

The course's code is kept once, in `course/` (one module per idea of the store), the way
Crafting Interpreters keeps its book's code: each line says in which lessons it stands.
Lines outside a block stand in every lesson from the file's first on; a block says
otherwise:

    #| 05+  05_lock        first line of the file: the module exists from lesson 05 on
    #> 07+                 the lines below stand from lesson 07 on (lesson 07 adds them)
    #> 02-06               ... in lessons 02 to 06 (lesson 07 replaces them)
    #> 04                  ... in lesson 04 only
    #<                     end of the block (blocks do not nest)

A task's fence (`# BEGIN 03.1` ... `# END 03.1`, what the student writes) is kept in its
own lesson's snapshot only. Imports are written once, as everything the module ever
imports; each snapshot keeps the names its own code uses, so that a lesson's imports
say exactly what that lesson's module needs.

`solutions/NN_topic/*.py` are these snapshots (committed, compared with by instructors,
run with `--solution`); the starters in `lessons/` are made from them (starters.py).
The maintainers' check fails when a committed snapshot differs from what this makes.
"""

from __future__ import annotations

import ast
import os
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from . import syntax
from .course import MODULE_ORDER, CourseError, Lesson, module_rank

SOURCE = "course"          # the folder of the hand-kept source, at the course root
WIDTH = 88
FILE_RANGE = re.compile(r"^#\| (?P<first>\d\d)\+(?:\s.*)?$")
OPEN = re.compile(r"^[ \t]*#> (?P<first>\d\d)(?:(?P<plus>\+)|-(?P<last>\d\d))?\s*$")
CLOSE = re.compile(r"^[ \t]*#<\s*$")
FENCE = re.compile(r"^[ \t]*# (?:BEGIN|END) (?P<lesson>\d\d)\.\d+\s*$")
LAST = 99


@dataclass(frozen=True)
class Line:
    text: str
    first: int     # the first lesson (number) the line stands in
    last: int      # the last one (LAST: every later lesson)

    def stands_in(self, number: int) -> bool:
        return self.first <= number <= self.last


@dataclass(frozen=True)
class SourceFile:
    path: Path
    first: int
    lines: tuple[Line, ...]

    @property
    def name(self) -> str:
        return self.path.name


def read_source(path: Path, shown: str | None = None) -> SourceFile:
    """One annotated module of `course/`, its markers checked (errors name file:line)."""
    shown = shown or str(path)
    raw = path.read_text(encoding="utf-8").splitlines(keepends=True)
    if not raw or not (head := FILE_RANGE.match(raw[0].rstrip("\n"))):
        raise CourseError(f"{shown}:1: the first line must say from which lesson the "
                          "module stands, as `#| 05+  05_lock`")
    first = int(head["first"])
    block: tuple[int, int] | None = None
    opened_at = 0
    lines: list[Line] = []
    for number, text in enumerate(raw[1:], start=2):
        if match := OPEN.match(text):
            if block is not None:
                raise CourseError(f"{shown}:{number}: a block opens inside the block of "
                                  f"line {opened_at} (blocks do not nest; close it with #<)")
            start = int(match["first"])
            end = LAST if match["plus"] else int(match["last"] or start)
            if start < first or end < start:
                raise CourseError(f"{shown}:{number}: lessons {text.strip()[3:]} are not "
                                  f"within the module's own ({first:02d}+)")
            block, opened_at = (start, end), number
        elif CLOSE.match(text):
            if block is None:
                raise CourseError(f"{shown}:{number}: #< closes no block")
            block = None
        else:
            start, end = block or (first, LAST)
            lines.append(Line(text, start, end))
    if block is not None:
        raise CourseError(f"{shown}:{opened_at}: this block is never closed (#<)")
    return SourceFile(path, first, tuple(lines))


def snapshot(source: SourceFile, lesson: Lesson, shown: str) -> str | None:
    """The module as lesson `lesson` has it (None: it does not exist there yet)."""
    number = int(lesson.number)
    if number < source.first:
        return None
    kept = []
    for line in source.lines:
        fence = FENCE.match(line.text)
        if line.stands_in(number) and (not fence or int(fence["lesson"]) == number):
            kept.append(line.text)
    body = prune_imports("".join(kept), f"{shown} (lesson {lesson.name})")
    return header(shown, lesson) + body


def header(shown: str, lesson: Lesson) -> str:
    return (f"# Generated from {shown} for lesson {lesson.name}:\n"
            "# edit that source, then run `sessionlab dev generate`.\n")


HEADER = re.compile(r"\A# Generated from (?P<source>\S+) for lesson \S+:\n"
                    r"# edit that source, then run `sessionlab dev generate`\.\n")


def without_header(text: str) -> str:
    return HEADER.sub("", text, count=1)


def prune_imports(text: str, shown: str) -> str:
    """`text` with every imported name its code does not use taken out of the imports
    at the top of the module (a statement left with none goes)."""
    try:
        tree = syntax.parse(text)
    except SyntaxError as error:
        raise CourseError(f"{shown}: the generated module does not parse, line "
                          f"{error.lineno}: {error.msg}") from None
    used = names_used(tree)
    lines = text.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []
    for node in tree.body:
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        keep = [alias for alias in node.names
                if (alias.asname or alias.name.split(".")[0]) in used]
        if len(keep) == len(node.names):
            continue
        edits.append((node.lineno, node.end_lineno or node.lineno,
                      render_import(node, keep)))
    for start, end, new in reversed(edits):
        lines[start - 1:end] = [new] if new else []
    return "".join(lines)


def names_used(tree: ast.AST) -> set[str]:
    """Every name the code reads, a name in a quoted annotation ("SessionLog") too."""
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            used.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if re.fullmatch(r"[A-Za-z_][\w.\[\], |]*", node.value):
                used.update(re.findall(r"[A-Za-z_]\w*", node.value))
    return used


def render_import(node: ast.Import | ast.ImportFrom, names: list[ast.alias]) -> str:
    if not names:
        return ""
    spelled = [alias.name + (f" as {alias.asname}" if alias.asname else "")
               for alias in names]
    if isinstance(node, ast.Import):
        return "".join(f"import {name}\n" for name in spelled)
    module = "." * node.level + (node.module or "")
    one = f"from {module} import {', '.join(spelled)}\n"
    if len(one) <= WIDTH + 1:
        return one
    wrapped = textwrap.wrap(", ".join(spelled) + ")", WIDTH - 4, break_long_words=False,
                            break_on_hyphens=False)
    return f"from {module} import (\n" + "".join(f"    {piece}\n" for piece in wrapped)


def source_files(root: Path) -> list[SourceFile]:
    folder = root / SOURCE
    if not folder.is_dir():
        raise CourseError(f"{folder}: missing (the course's annotated source)")
    found = []
    for path in sorted(folder.glob("*.py")):
        if path.stem not in MODULE_ORDER:
            raise CourseError(f"{SOURCE}/{path.name}: not a course module; the modules are "
                              + ", ".join(f"{name}.py" for name in MODULE_ORDER))
        found.append(read_source(path, f"{SOURCE}/{path.name}"))
    return sorted(found, key=lambda source: module_rank(source.name))


def generate(root: Path, lessons: list[Lesson]) -> dict[Path, str]:
    """Every snapshot of the course: `solutions/NN_topic/<module>.py` -> its text."""
    made: dict[Path, str] = {}
    for source in source_files(root):
        shown = f"{SOURCE}/{source.name}"
        for lesson in lessons:
            text = snapshot(source, lesson, shown)
            if text is not None:
                made[lesson.solution_folder / source.name] = text
    return made


def write_snapshots(root: Path, lessons: list[Lesson]) -> list[Path]:
    """Write every snapshot into solutions/; remove a course module there that the
    source no longer makes. Returns the files that changed."""
    made = generate(root, lessons)
    changed = []
    for path, text in made.items():
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            changed.append(path)
    for lesson in lessons:
        for name in MODULE_ORDER:
            path = lesson.solution_folder / f"{name}.py"
            if path.is_file() and path not in made:
                path.unlink()
                changed.append(path)
    changed += link_shipped_reference(root)
    return changed


def link_shipped_reference(root: Path) -> list[Path]:
    """The reference the kit ships (for the demo outside a copy of the course) is a
    folder of links to the modules of one lesson's solution: link each module that lesson
    has, and drop a link to one it no longer has. Returns the links changed."""
    shipped = root / "src" / "sessionlab" / "reference"
    changed = []
    for folder in sorted(shipped.glob("[0-9][0-9]_*")) if shipped.is_dir() else []:
        solution = root / "solutions" / folder.name
        wanted = {path.name for path in solution.glob("*.py")}
        for name in sorted(wanted):
            link = folder / name
            target = os.path.relpath(solution / name, folder)
            if not (link.is_symlink() and os.readlink(link) == target):
                if link.is_symlink() or link.exists():
                    link.unlink()
                link.symlink_to(target)
                changed.append(link)
        for link in sorted(folder.glob("*.py")):
            if link.name not in wanted:
                link.unlink()
                changed.append(link)
    return changed
