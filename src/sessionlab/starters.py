"""Starters are generated from the marked solutions, themselves generated from `course/`.

In the modules of `solutions/NN_topic/` the student's part of each task is fenced:

        # BEGIN 03.1
        ...the reference code...
        # END 03.1

`make_starter` replaces every fenced region with a TODO naming the task and a
`raise NotImplementedError(...)` at the same indentation, and leaves everything else
(earlier lessons' finished code, docstrings, signatures) byte for byte. So lesson N's starter
is lesson N-1's solution plus lesson N's TODOs, and `diff` between lessons shows what grew.
"""

from __future__ import annotations

import ast
import difflib
import io
import os
import re
import subprocess
import tarfile
import textwrap
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from .course import Lesson, MODULE, CourseError, lesson_modules, lessons, load_lesson
from . import syntax
from .snapshots import without_header

# Course code is read on the site, whose content column fits about 88 characters, and
# in a terminal: a generated line stays within that width too.
WIDTH = 88

BEGIN = re.compile(r"^(?P<indent>[ \t]*)# BEGIN (?P<task>\d\d\.\d+)\s*$")
END = re.compile(r"^[ \t]*# END (?P<task>\d\d\.\d+)\s*$")


def make_starter(solution: str, lesson: Lesson, source: str = "solution",
                 written: Collection[str] = ()) -> str:
    """The starter text for `lesson`, made from its marked solution text; the tasks in
    `written` keep their solution (a student part-way through the lesson)."""
    out: list[str] = []
    if (body := without_header(solution)) != solution:
        out.append(f"# Lesson {lesson.name}, yours to edit: generated from\n"
                   f"# {source}; `sessionlab reset {lesson.number}` makes it again.\n")
        solution = body
    open_task: str | None = None
    for number, line in enumerate(solution.splitlines(keepends=True), start=1):
        begin, end = BEGIN.match(line), END.match(line)
        if begin:
            if open_task:
                raise CourseError(f"{source}:{number}: BEGIN {begin['task']} inside BEGIN {open_task}")
            open_task = begin["task"]
            task = _task(lesson, open_task, f"{source}:{number}")
            if open_task not in written:
                out.extend(_todo(begin["indent"], task.id, task.title, lesson))
        elif end:
            if end["task"] != open_task:
                raise CourseError(f"{source}:{number}: END {end['task']} without BEGIN {end['task']}")
            open_task = None
        elif open_task is None or open_task in written:
            out.append(line)
    if open_task:
        raise CourseError(f"{source}: BEGIN {open_task} is never closed")
    return "".join(out)


NOT_WRITTEN = re.compile(r"task (\d\d\.\d+) is not written yet")


def placeholder_task(message: str) -> str | None:
    """The task a NotImplementedError's message says is not written yet: the starter's
    words, or a student's own placeholder that begins the same way ("task 11.3: repair
    not written yet"), named by its number alone, whatever follows it."""
    match = re.match(r"task (\d\d\.\d+)\b", message)
    return match[1] if match else None


def starter_raises(source: str) -> dict[str, int]:
    """How many of each task's `raise NotImplementedError("task NN.K is not written yet
    ...")` (what the starter generator puts in a task's place) are in `source`.

    Read from the syntax tree, so a comment or a string that merely quotes the message
    does not count; a module that does not parse is read as text (its tests cannot run,
    and the lesson's state is then "error" anyway)."""
    try:
        tree = syntax.parse(source)
    except (SyntaxError, ValueError):
        found = re.findall(r"raise\s+NotImplementedError\(\s*[\"']" + NOT_WRITTEN.pattern, source)
        return {task: found.count(task) for task in set(found)}
    counts: dict[str, int] = {}
    for node in ast.walk(tree):
        call = node.exc if isinstance(node, ast.Raise) else None
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                and call.func.id == "NotImplementedError" and call.args
                and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)
                and (match := NOT_WRITTEN.match(call.args[0].value))):
            counts[match[1]] = counts.get(match[1], 0) + 1
    return counts


def unwritten_in(text: str, generated: str) -> bool:
    """Every place the generated starter raises a task's NotImplementedError still
    raises it in `text`: no task is written there (what differs is not a student's
    answer)."""
    have = starter_raises(text)
    return all(have.get(task, 0) >= n for task, n in starter_raises(generated).items())


def _todo(indent: str, task_id: str, title: str, lesson: Lesson) -> list[str]:
    """The lines that stand in for a fenced region: TODO, hints, and the raise."""
    lines = _comment(indent, f"TODO({task_id}): {title}.")
    if _task(lesson, task_id, "starter").design:
        lines += _comment(indent, "Your design: the whole function is yours to shape; "
                                  "the tests check only what it does.")
    # The same command a failing test advises, so that the two never disagree
    lines += _comment(indent, f"What it asks: `sessionlab task {task_id}`. Hints: "
                              f"`sessionlab hint --task {task_id}`.")
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
    """The solution as a reader should see it: the code, without the BEGIN/END fences
    and without the lines that say what it was generated from."""
    return "".join(line for line in without_header(solution).splitlines(keepends=True)
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
    path: str = ""      # lessons/NN_topic/<module>


def expected_starter(lesson: Lesson, module: str = MODULE) -> str:
    """The starter of one module of `lesson` (agent.py unless named)."""
    path = lesson.solution_folder / module
    return make_starter(path.read_text(encoding="utf-8"), lesson,
                        source=f"solutions/{lesson.name}/{module}")


def expected_starters(lesson: Lesson) -> dict[str, str]:
    """Every module of `lesson`'s starter: file name -> text, in the course's order."""
    return {path.name: expected_starter(lesson, path.name)
            for path in lesson_modules(lesson.solution_folder)}


def write_starters(root: Path) -> list[Path]:
    """Regenerate every starter from its solution. Returns the files that changed."""
    changed = []
    for lesson in lessons(root):
        for module, text in expected_starters(lesson).items():
            target = lesson.folder / module
            if not target.exists() or target.read_text(encoding="utf-8") != text:
                target.write_text(text, encoding="utf-8")
                changed.append(target)
    return changed


# --- what is committed -----------------------------------------------------------------
#
# A student's copy of the course is a git checkout whose lessons/NN/agent.py they edit:
# the working tree holds their work, git holds the starters the course shipped. Checks
# about the starters read git, so that a student's work never fails them.


class Git:
    """Read-only access to what is committed (HEAD) for the course at `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.prefix = self._prefix()

    @property
    def available(self) -> bool:
        """True when `root` is inside a git checkout with at least one commit."""
        return self.prefix is not None

    def _run(self, *args: str) -> subprocess.CompletedProcess[bytes] | None:
        # A GIT_DIR inherited from a hook or an outer tool would point git elsewhere.
        env = {k: v for k, v in os.environ.items()
               if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")}
        try:
            return subprocess.run(["git", "-C", str(self.root), *args], env=env,
                                  capture_output=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):  # no git on this machine
            return None

    def _prefix(self) -> str | None:
        """The course root's path inside its repository ("" at the top), or None."""
        done = self._run("rev-parse", "--verify", "--quiet", "HEAD")
        if done is None or done.returncode != 0:
            return None
        top = self._run("rev-parse", "--show-prefix")
        if top is None or top.returncode != 0:
            return None
        return top.stdout.decode("utf-8", "replace").strip()

    def course_commit(self, lesson: str) -> str:
        """The last commit that changed what lesson `lesson`'s starter is made from (its
        solution folder or lesson.toml), else HEAD. A student commits their answers
        (and may edit tests) in lessons/; the course's own commits are the ones that
        touch solutions/ too, so the lesson as that commit left it is the course's."""
        done = self._run("log", "-1", "--format=%H", "HEAD", "--",
                         f":/{self.prefix}solutions/{lesson}",
                         f":/{self.prefix}lessons/{lesson}/lesson.toml")
        found = done.stdout.decode().strip() if done and done.returncode == 0 else ""
        return found or "HEAD"

    def committed(self, relative: str, commit: str = "HEAD") -> str | None:
        """The file's text at `commit`, or None when it is not committed there."""
        if self.prefix is None:
            return None
        done = self._run("show", f"{commit}:{self.prefix}{relative}")
        if done is None or done.returncode != 0:
            return None
        return done.stdout.decode("utf-8", "replace")

    def extract(self, relative: str, target: Path, commit: str = "HEAD") -> bool:
        """Write the folder `relative` as committed at `commit` to `target`/`relative`.
        False when nothing of it is committed."""
        if self.prefix is None:
            return False
        done = self._run("archive", "--format=tar", f"{commit}:{self.prefix}{relative}")
        if done is None or done.returncode != 0:
            return False
        with tarfile.open(fileobj=io.BytesIO(done.stdout)) as archive:
            members = [m for m in archive.getmembers() if m.isfile() or m.isdir()]
            # Members come from our own repository; the "data" filter (Python 3.11.4+)
            # refuses links and absolute paths all the same where it exists.
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            archive.extractall(target / relative, members=members, **safe)
        return bool(members)


@dataclass(frozen=True)
class Starter:
    """One module of a lesson's starter three ways: generated, in the working tree,
    committed."""
    lesson: Lesson
    generated: str
    working: str | None       # lessons/NN/<module> as it is; None when missing
    committed: str | None     # as the course committed it (Git.course_commit); None
                              # outside git or untracked
    commit: str = "HEAD"      # that commit
    module: str = MODULE      # which file of the lesson

    @property
    def path(self) -> str:
        return f"lessons/{self.lesson.name}/{self.module}"

    @property
    def holds_work(self) -> bool:
        """lessons/NN/agent.py is a student's work: it differs from the generator and
        from the starter the course committed (edited, or answers committed since), or,
        outside git, has a task written (its NotImplementedError replaced)."""
        if self.working == self.generated:
            return False
        edited = self.committed is not None and self.working != self.committed
        return edited or (self.working is not None
                          and not unwritten_in(self.working, self.generated))

    @property
    def drifted(self) -> bool:
        """The starter the course ships differs from what the generator makes.

        A working tree that matches the generator is fine (regenerated, not committed
        yet). Otherwise the starter as the course committed it is what ships (see
        Git.course_commit: a student's later commits do not count); where nothing is
        committed (no git, or a lesson not added yet) the file as it is stands for it.
        """
        if self.working == self.generated:
            return False
        if self.committed is not None:
            return self.committed != self.generated
        # Outside git, a starter with a task written is a student's work, not the
        # generator's output gone stale.
        return self.working is None or unwritten_in(self.working, self.generated)

    def diff(self, working: bool = False) -> str:
        """The shipped starter (or, with `working`, the file as it is) against the
        generated one."""
        if self.committed is not None and not working:
            have, label = self.committed, "committed"
        else:
            have, label = self.working or "", "in lessons/"
        return "".join(difflib.unified_diff(
            have.splitlines(keepends=True), self.generated.splitlines(keepends=True),
            f"{self.path} ({label})", f"{self.path} (generated)"))


def survey(root: Path, git: Git | None = None) -> list[Starter]:
    """Every module of every lesson's starter: generated, in the working tree and
    committed."""
    git = git or Git(root)
    return [item for lesson in lessons(root) for item in starters_of(lesson, git)]


def starters_of(lesson: Lesson, git: Git) -> list[Starter]:
    """Each module of the lesson's starter three ways (CourseError when its solution's
    fences are broken)."""
    commit = git.course_commit(lesson.name) if git.available else "HEAD"
    found = []
    for module, generated in expected_starters(lesson).items():
        target = lesson.folder / module
        found.append(Starter(
            lesson, generated,
            target.read_text(encoding="utf-8") if target.exists() else None,
            git.committed(f"lessons/{lesson.name}/{module}", commit), commit, module))
    return found


def drift(root: Path) -> list[Drift]:
    """Starters the course ships that differ from what the generator makes now.

    In a git checkout the committed starter counts, so that a student's edits to
    lessons/NN/agent.py are never drift; outside git, the files as they are.
    """
    return [Drift(item.lesson, item.diff(), item.path) for item in survey(root)
            if item.drifted]


def generated_file(root: Path, relative: str) -> str | None:
    """The generated starter when `relative` names one (lessons/NN_topic/<module>.py of
    a lesson whose solution has that module), else None: what the course ships there,
    whatever the working tree holds."""
    parts = Path(relative).parts
    if len(parts) != 3 or parts[0] != "lessons":
        return None
    solution = root / "solutions" / parts[1]
    if not ((root / "lessons" / parts[1] / "lesson.toml").is_file()
            and (solution / parts[2]) in lesson_modules(solution)):
        return None
    return expected_starter(load_lesson(root, parts[1]), parts[2])
