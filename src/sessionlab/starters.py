"""Starters are generated from the marked solutions: one source of truth.

In `solutions/NN_topic/agent.py` the student's part of each task is fenced:

        # BEGIN 03.1
        ...the reference code...
        # END 03.1

`make_starter` replaces every fenced region with a TODO naming the task and a
`raise NotImplementedError(...)` at the same indentation, and leaves everything else
(earlier lessons' finished code, docstrings, signatures) byte for byte. So lesson N's starter
is lesson N-1's solution plus lesson N's TODOs, and `diff` between lessons shows what grew.
"""

from __future__ import annotations

import difflib
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from .course import Lesson, MODULE, CourseError, lessons

# Course code is read on the site, whose content column fits about 88 characters, and
# in a terminal: a generated line stays within that width too.
WIDTH = 88

BEGIN = re.compile(r"^(?P<indent>[ \t]*)# BEGIN (?P<task>\d\d\.\d+)\s*$")
END = re.compile(r"^[ \t]*# END (?P<task>\d\d\.\d+)\s*$")


def make_starter(solution: str, lesson: Lesson, source: str = "solution") -> str:
    """The starter text for `lesson`, made from its marked solution text."""
    out: list[str] = []
    open_task: str | None = None
    for number, line in enumerate(solution.splitlines(keepends=True), start=1):
        begin, end = BEGIN.match(line), END.match(line)
        if begin:
            if open_task:
                raise CourseError(f"{source}:{number}: BEGIN {begin['task']} inside BEGIN {open_task}")
            open_task = begin["task"]
            task = _task(lesson, open_task, f"{source}:{number}")
            out.extend(_todo(begin["indent"], task.id, task.title, lesson))
        elif end:
            if end["task"] != open_task:
                raise CourseError(f"{source}:{number}: END {end['task']} without BEGIN {end['task']}")
            open_task = None
        elif open_task is None:
            out.append(line)
    if open_task:
        raise CourseError(f"{source}: BEGIN {open_task} is never closed")
    return "".join(out)


def _todo(indent: str, task_id: str, title: str, lesson: Lesson) -> list[str]:
    """The lines that stand in for a fenced region: TODO, hints, and the raise."""
    lines = _comment(indent, f"TODO({task_id}): {title}.")
    lines += _comment(indent, f"Hints: `sessionlab hint {lesson.number}`; "
                              f"the docs page of lesson {lesson.name}.")
    message = f"task {task_id} is not written yet: {title}"
    one_line = f'{indent}raise NotImplementedError("{_quote(message)}")'
    if len(one_line) <= WIDTH:
        return [line + "\n" for line in lines + [one_line]]
    # Too wide for one line: the message as implicitly joined strings, one a line, so
    # the exception says exactly what the one-line form would have said.
    inner = indent + "    "
    pieces = _split(message, WIDTH - len(inner) - 2)
    lines += [f"{indent}raise NotImplementedError("]
    lines += [f'{inner}"{_quote(piece)}"' for piece in pieces]
    lines += [f"{indent})"]
    return [line + "\n" for line in lines]


def _comment(indent: str, text: str) -> list[str]:
    """`text` as comment lines at `indent`, wrapped at word boundaries to WIDTH."""
    return textwrap.wrap(text, WIDTH, initial_indent=f"{indent}# ",
                         subsequent_indent=f"{indent}# ", break_long_words=False,
                         break_on_hyphens=False)


def _split(text: str, width: int) -> list[str]:
    """`text` cut after spaces into pieces whose quoted form fits `width`; joined again
    they give `text` back exactly (a single word wider than `width` stays whole)."""
    pieces = [""]
    for word in re.findall(r"\S+\s*|\s+", text):
        if pieces[-1] and len(_quote(pieces[-1] + word)) > width:
            pieces.append("")
        pieces[-1] += word
    return pieces


def strip_markers(solution: str) -> str:
    """The solution as a reader should see it: the code, without the BEGIN/END fences."""
    return "".join(line for line in solution.splitlines(keepends=True)
                   if not (BEGIN.match(line) or END.match(line)))


def marked_tasks(solution: str) -> list[str]:
    """The task ids fenced in a solution, in order of first appearance."""
    seen: list[str] = []
    for line in solution.splitlines():
        if (begin := BEGIN.match(line)) and begin["task"] not in seen:
            seen.append(begin["task"])
    return seen


def _task(lesson: Lesson, task_id: str, where: str):
    if not task_id.startswith(lesson.number + "."):
        raise CourseError(f"{where}: task {task_id} belongs to another lesson than {lesson.name}; "
                          "a solution fences only its own lesson's tasks")
    try:
        return lesson.task(task_id)
    except CourseError:
        raise CourseError(f"{where}: task {task_id} is not listed in lessons/{lesson.name}/lesson.toml") from None


def _quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


@dataclass(frozen=True)
class Drift:
    lesson: Lesson
    diff: str


def expected_starter(lesson: Lesson) -> str:
    path = lesson.solution_folder / MODULE
    return make_starter(path.read_text(encoding="utf-8"), lesson, source=str(path))


def write_starters(root: Path) -> list[Path]:
    """Regenerate every starter from its solution. Returns the files that changed."""
    changed = []
    for lesson in lessons(root):
        target = lesson.folder / MODULE
        text = expected_starter(lesson)
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
            changed.append(target)
    return changed


def drift(root: Path) -> list[Drift]:
    """Committed starters that differ from what the generator makes now."""
    found = []
    for lesson in lessons(root):
        target = lesson.folder / MODULE
        want = expected_starter(lesson)
        have = target.read_text(encoding="utf-8") if target.exists() else ""
        if have != want:
            diff = "".join(difflib.unified_diff(
                have.splitlines(keepends=True), want.splitlines(keepends=True),
                f"lessons/{lesson.name}/{MODULE} (committed)", f"lessons/{lesson.name}/{MODULE} (generated)"))
            found.append(Drift(lesson, diff))
    return found
