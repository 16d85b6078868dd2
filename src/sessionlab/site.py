"""The course site's includes: code and lesson data pulled from the files, never pasted.

This module is a Python-Markdown extension (`sessionlab.site` under `markdown_extensions:` in
mkdocs.yml). Both generators that read mkdocs.yml, MkDocs with Material and Zensical, render
pages with Python-Markdown and the extensions listed there, so both expand the directives the
same way: the site's content depends on no generator's plugin or hook API. In a page, a line
that holds only a directive is replaced by Markdown made from the course's files:

    {{ code("solutions/00_memory/agent.py") }}              a whole file (raw=True keeps the fences)
    {{ code("lessons/00_memory/agent.py", "Agent.run") }}   one function, class or method (found with ast)
    {{ task("00.1") }}        the task from lesson.toml: heading, where, description, starter code
                              (starter=False leaves the code out, when an earlier task showed it)
    {{ tests("00.1") }}       the tests marked with that task: name and what each one checks
    {{ hints("00.1") }}       the task's hints, each folded away, in order
    {{ tasks("04_repair") }}  every task of a lesson, each followed by its tests and hints
    {{ field("04_repair", "discussion") }}   a text field of the lesson's lesson.toml
    {{ answer("08_compact", "role") }}       a folded answer of the page, kept under that key
                              in solutions/08_compact/answers.toml (as Markdown, not
                              in the page's source, which a student reads before thinking)
    {{ diff("01_append") }}   what grew since the previous lesson: the task code a student
                              writes (the solution), and what the starter gives around it

A directive may be indented (to sit inside an admonition); its output is indented the same way.
Solutions are shown without their `# BEGIN/END NN.k` fence lines. Anything missing (a file, a
function, a lesson, a task) stops the build with a message naming the page and the missing thing.
Directives inside fenced code blocks are left alone, so a page can show the syntax itself.

The course the directives read is the one at or above the folder the build runs in
(SESSIONLAB_ROOT overrides it, as for every command of the kit).
"""

from __future__ import annotations

import ast
import difflib
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from markdown import Markdown
from markdown.extensions import Extension
from markdown.preprocessors import Preprocessor

from sessionlab import course, syntax
from sessionlab.maintainers import test_marks
from sessionlab.starters import generated_file, strip_markers

try:  # mkdocs is only needed when the site is built, not to import this module in a test
    from mkdocs.exceptions import PluginError as _BuildError
except ImportError:  # pragma: no cover
    _BuildError = RuntimeError  # type: ignore[assignment,misc]

DIRECTIVE = re.compile(r"^(?P<indent>[ \t]*)\{\{\s*(?P<name>[a-z_]+)\((?P<args>.*)\)\s*\}\}[ \t]*$")
FENCE = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})")
DIRECTIVE_ANYWHERE = re.compile(DIRECTIVE.pattern, re.M)


class IncludeError(_BuildError):  # type: ignore[misc,valid-type]
    """An include that cannot be made: the build stops and says which one and why."""


# --- the Markdown extension -------------------------------------------------------------------


class IncludeExtension(Extension):
    """Expands the directives of a page before any other preprocessor sees it, so that what
    they make (fenced code, admonitions, tables) is read like Markdown written by hand."""

    def extendMarkdown(self, md: Markdown) -> None:  # noqa: N802 - Python-Markdown's name
        # Above normalize_whitespace (30) and the fence preprocessors (25, 31.05).
        md.preprocessors.register(IncludePreprocessor(md), "sessionlab_includes", 40)


class IncludePreprocessor(Preprocessor):
    def run(self, lines: list[str]) -> list[str]:
        markdown = "\n".join(lines)
        if not DIRECTIVE_ANYWHERE.search(markdown):
            return lines
        try:
            root = course.find_root()
        except course.CourseError as error:
            raise IncludeError(f"the site's includes need the course: {error}") from None
        try:
            return expand(markdown, root).split("\n")
        except IncludeError as error:
            # Said again with the page named: expand() only knows the line.
            raise IncludeError(str(error).replace("docs/<page>:",
                                                  f"docs/{page_of(markdown, root)}:", 1)) from None


def makeExtension(**kwargs: Any) -> IncludeExtension:  # noqa: N802 - Python-Markdown's name
    return IncludeExtension(**kwargs)


def page_of(markdown: str, root: Path) -> str:
    """The page under docs/ whose text this is, for error messages ("<page>" if none is).

    Python-Markdown is not told which file it converts, so the page is found by its text in
    the docs/ of the folder the build runs in, then in the course's. Only a failed include
    asks, so a build pays nothing for it."""
    wanted = markdown.strip()
    for docs in dict.fromkeys([Path.cwd() / "docs", root / "docs"]):
        for path in sorted(docs.rglob("*.md")):
            try:
                text = path.read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError):
                continue
            # A generator strips a page's front matter before converting the rest.
            if text == wanted or text.endswith("\n" + wanted):
                return path.relative_to(docs).as_posix()
    return "<page>"


def expand(markdown: str, root: Path, source: str = "<page>") -> str:
    """Replace every directive line of `markdown` with what it includes."""
    out: list[str] = []
    open_fence: str | None = None
    includer = Includer(root)
    for number, line in enumerate(markdown.splitlines(keepends=True), start=1):
        fence = FENCE.match(line)
        if open_fence is not None:
            if fence and fence["fence"][0] == open_fence[0] and len(fence["fence"]) >= len(open_fence):
                open_fence = None
            out.append(line)
            continue
        if fence:
            open_fence = fence["fence"]
            out.append(line)
            continue
        directive = DIRECTIVE.match(line)
        if not directive:
            out.append(line)
            continue
        where = f"docs/{source}:{number}: {line.strip()}"
        try:
            args, kwargs = _arguments(directive["args"])
            make = getattr(includer, "do_" + directive["name"], None)
            if make is None:
                raise IncludeError(f"unknown directive {directive['name']!r}; "
                                   f"known: {', '.join(Includer.names())}")
            text = make(*args, **kwargs)
        except (IncludeError, course.CourseError, TypeError, ValueError, SyntaxError) as error:
            raise IncludeError(f"{where}\n  {error}") from None
        indent = directive["indent"]
        out.extend(indent + piece if piece.strip() else piece
                   for piece in text.rstrip("\n").splitlines(keepends=True))
        out.append("\n")
    return "".join(out)


def _arguments(text: str) -> tuple[list[Any], dict[str, Any]]:
    call = syntax.parse(f"f({text})", mode="eval").body
    assert isinstance(call, ast.Call)
    args = [ast.literal_eval(arg) for arg in call.args]
    kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg}
    return args, kwargs


# --- the includes ---------------------------------------------------------------------------


@dataclass
class Includer:
    root: Path

    @classmethod
    def names(cls) -> list[str]:
        return sorted(name[3:] for name in dir(cls) if name.startswith("do_"))

    # {{ code(path, name=None, title=None) }}
    def do_code(self, path: str, name: str | None = None, *, title: str | None = None,
                raw: bool = False, lines: str | None = None) -> str:
        text = self._read(path)
        stripped = path.startswith("solutions/") and not raw
        if stripped:
            text = strip_markers(text)
        first = 1
        if name:
            text, first = section(text, name, path)
        if lines:
            text, first = line_range(text, lines, path)
        caption = title or (f"{path} · {name}" if name else path)
        # Line numbers match the file only where nothing was stripped.
        numbers = None if stripped else first
        return code_block(text, language=_language(path), title=caption, first_line=numbers)

    # {{ task("03.1") }}
    def do_task(self, task_id: str, *, starter: bool = True) -> str:
        lesson, task = self._task(task_id)
        parts = [f"### Task {task.id}: {_inline(task.title)} {{#task-{_slug(task.id)}}}\n"]
        places = [(where, self._place_of(lesson, task.id, where))
                  for where in _wheres(task.where)] if task.where else []
        if places:
            said = " and ".join(f"`{where}` in `{module}`" for where, module in places)
            parts.append(f"**Where:** {said}\n")
        if task.design:
            parts.append("!!! tip \"Your design\"\n    The whole function is yours to shape: "
                         "there is no given code to fit, and the tests check only what it "
                         "does (what is on disk, what the model is sent, what another "
                         "process sees), so any correct design passes.\n")
        if task.description:
            parts.append(_prose(task.description) + "\n")
        if starter:
            for where, module in places:
                text, first = section(self._read(module), where, module)
                parts.append(code_block(text, language="python",
                                        title=f"{module} · {where} (starter)",
                                        first_line=first))
        return "\n".join(parts)

    def _place_of(self, lesson: course.Lesson, task_id: str, where: str) -> str:
        """The starter module that defines `where` (a function, or Class.method): the
        task's own module first, then the others in the course's order."""
        own = self._module_of(lesson, task_id)
        names = [own] + [path.name for path in course.lesson_modules(lesson.solution_folder)
                         if path.name != own]
        for name in names:
            module = f"lessons/{lesson.name}/{name}"
            try:
                section(self._read(module), where, module)
            except IncludeError:
                continue
            return module
        raise IncludeError(f"task {task_id}: no module of lessons/{lesson.name}/ defines "
                           f"{where!r} (its lesson.toml says `where = {where!r}`)")

    # {{ tasks("04_repair") }}: every task of a lesson, each with its tests and hints
    def do_tasks(self, ref: str) -> str:
        lesson = self._lesson(ref)
        if not lesson.tasks:
            raise IncludeError(f"lessons/{lesson.name}/lesson.toml lists no tasks")
        parts, shown = [], set()
        for task in lesson.tasks:
            parts.append(self.do_task(task.id, starter=task.where not in shown))
            if task.where in shown:
                parts.append(f"Its starter code is the `{task.where}` shown with an earlier task above.\n")
            shown.add(task.where)
            parts.append("The tests that check it:\n")
            parts.append(self.do_tests(task.id))
            parts.append(self.do_hints(task.id))
        return "\n".join(parts)

    # {{ field("04_repair", "discussion") }}: a piece of prose kept in the lesson's lesson.toml
    def do_field(self, ref: str, key: str) -> str:
        lesson = self._lesson(ref)
        path = f"lessons/{lesson.name}/lesson.toml"
        value = tomllib.loads(self._read(path)).get(key)
        if not isinstance(value, str) or not value.strip():
            raise IncludeError(f"{path} has no text field {key!r}")
        return _prose(value.strip()) + "\n"

    # {{ answer("08_compact", "role") }}: the body of a folded answer on the page
    def do_answer(self, ref: str, key: str) -> str:
        """What a page folds away as the answer to a question it asks ("What you saw", a
        design question's answer): kept beside the reference solution, so that the page's
        source, which a student reads in a terminal, does not hand it out. The page keeps
        the fold's line (the question); this is its body, Markdown as written."""
        lesson = self._lesson(ref)
        path = f"solutions/{lesson.name}/{course.ANSWERS}"
        try:
            answers = tomllib.loads(self._read(path))
        except tomllib.TOMLDecodeError as error:
            raise IncludeError(f"{path} is not valid TOML: {error}") from None
        value = answers.get(key)
        if not isinstance(value, str) or not value.strip():
            known = ", ".join(sorted(answers)) or "none"
            raise IncludeError(f"{path} has no answer {key!r} (it has: {known})")
        return value.strip() + "\n"

    # {{ hints("03.1") }}
    def do_hints(self, task_id: str) -> str:
        lesson, task = self._task(task_id)
        if not task.hints:
            raise IncludeError(f"task {task_id} has no hints (solutions/{lesson.name}/hints.toml)")
        blocks = []
        for level, hint in enumerate(task.hints, start=1):
            body = "\n".join("    " + line if line.strip() else "" for line in _prose(hint.strip()).splitlines())
            blocks.append(f'??? tip "Hint {level} of {len(task.hints)} for task {task.id}"\n\n{body}\n')
        return "\n".join(blocks)

    # {{ tests("03.1") }} or {{ tests("03_fork") }} for every test of the lesson
    def do_tests(self, ref: str) -> str:
        if re.fullmatch(r"\d\d\.\d+", ref):
            lesson, task = self._task(ref)
            wanted: str | None = task.id
        else:
            lesson, wanted = self._lesson(ref), None
        found = [test for test in lesson_tests(lesson.folder)
                 if wanted is None or wanted in test.tasks]
        if not found and wanted:
            raise IncludeError(f"no test in lessons/{lesson.name}/ is marked for task {wanted} "
                               f"(@pytest.mark.task({wanted!r}))")
        if not found:
            raise IncludeError(f"no test found in lessons/{lesson.name}/test_*.py")
        lines = []
        for test in found:
            key = " *(key)*" if test.key else ""
            checks = f": {_inline(test.checks)}" if test.checks else ""
            lines.append(f"- `{test.name}`{key}{checks}")
        return "\n".join(lines) + "\n"

    # {{ files("03_fork") }} or {{ files("03_fork", side="solution") }}
    def do_files(self, ref: str, *, side: str = "lesson") -> str:
        """The lesson's code, as a page shows it: which modules it touches, each of them
        whole (the starter, or with side="solution" the reference), and the modules it
        leaves as the lesson before had them, named."""
        lesson = self._lesson(ref)
        folder = "solutions" if side == "solution" else "lessons"
        touched = self._touched(lesson)
        parts = [self._touches_sentence(lesson, touched) + "\n"]
        for name, _ in touched:
            path = f"{folder}/{lesson.name}/{name}"
            parts.append(f'??? {"success" if side == "solution" else "note"} "{path}"\n')
            parts.append(_indent(self.do_code(path)))
        return "\n".join(parts)

    # {{ diff("03_fork") }}
    def do_diff(self, ref: str) -> str:
        """What grew from the previous lesson, in two parts a student can tell apart.

        "What you write" is the code of this lesson's task fences in its solution (so the
        block says it holds the solution). "What you are given" compares the previous
        solution with this lesson's *starter*, module by module: new modules and helpers,
        changed signatures and the TODO placeholders, without the task code, and without
        hunks that only touch docstrings, comments or blank lines.
        """
        lesson = self._lesson(ref)
        previous = self._previous(lesson)
        touched = self._touched(lesson)
        regions: list[tuple[str, TaskRegion]] = []
        given: list[tuple[str, str, Given]] = []
        for name, _ in touched:
            new_path = f"solutions/{lesson.name}/{name}"
            old_path = f"solutions/{previous.name}/{name}"
            starter_path = f"lessons/{lesson.name}/{name}"
            regions += [(new_path, region) for region in
                        task_regions(self._read(new_path), lesson.number)]
            old = self._solution_text(previous, name)
            given.append((old_path if old else "(nothing)", starter_path,
                          given_changes(old, self._read(starter_path))))
        if not regions and not any(changes.hunks for _, _, changes in given):
            raise IncludeError(f"solutions/{lesson.name} is the same as "
                               f"solutions/{previous.name}: nothing grew in this lesson")
        written = sum(region.code_lines for _, region in regions)
        added = sum(changes.added for _, _, changes in given)
        churn = sum(changes.churn for _, _, changes in given)
        parts = [self._touches_sentence(lesson, touched) + " "
                 f"You write **{_count(written, 'line')}** of code in "
                 f"{_count(len(regions), 'task region')}; you are given "
                 f"**{_count(added, 'new or changed line')}** around them "
                 f"(the starter against solutions/{previous.name}/)."]
        if churn:
            parts[0] += (f" Not shown: {_count(churn, 'changed line')} of docstrings "
                         "and comments.")
        parts.append("")
        parts.append('??? success "What you write: the task code of the reference solution '
                     '(this is the solution; open it when you are done)"')
        parts.append("")
        for new_path, region in regions:
            block = code_block(region.code, language="python",
                               title=f"task {region.task} · {new_path} (solution)")
            parts.append(_indent(block))
        parts.append('??? abstract "What you are given: new modules, helpers and changes in '
                     f'the starter, against solutions/{previous.name}/"')
        parts.append("")
        for old_path, starter_path, changes in given:
            for hunk in changes.hunks:
                if hunk.kind == "python":
                    block = code_block(hunk.text, language="python",
                                       title=f"{starter_path} · new",
                                       first_line=hunk.first_line)
                else:
                    block = code_block(hunk.text, language="diff",
                                       title=f"{old_path} → {starter_path} (code lines)")
                parts.append(_indent(block))
        if not any(changes.hunks for _, _, changes in given):
            parts.append(_indent("Nothing but the TODOs: every line outside the tasks is as "
                                 "the previous lesson left it.\n"))
        return "\n".join(parts) + "\n"

    # {{ bench_table("docs/assets/bench/store.json") }}
    def do_bench_table(self, path: str) -> str:
        """The benchmark's figures as tables, every ratio computed from the figures shown."""
        import json
        try:
            report = json.loads(self._read(path))
            return bench_markdown(report)
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as error:
            raise IncludeError(f"{path}: not a benchmark report this page can show ({error!r})") from None

    # {{ bench_meta("docs/assets/bench/store.json") }}
    def do_bench_meta(self, path: str) -> str:
        """One sentence on the run: when, on what, what was measured, how long it took."""
        import json
        try:
            meta = json.loads(self._read(path))["meta"]
            return (f"Measured on {_date(meta['date'])} with {meta['implementation']} "
                    f"{meta['python']} ({meta['platform']}, {meta['machine']}, {meta['cpus']} "
                    f"cores). The store measured is lesson **{meta['lesson']}**'s reference "
                    f"solution (`{meta['module']}`). Sessions of {meta['n']:,} messages of about "
                    f"{meta['message_bytes']:,.0f} bytes of JSON each; the durable workload appends "
                    f"{meta['durable_n']:,}. Every figure is the median of {meta['repeat']} runs. "
                    f"The whole run took {meta['seconds'] / 60:.0f} minutes.\n")
        except (KeyError, TypeError, ValueError) as error:
            raise IncludeError(f"{path}: not a benchmark report this page can show ({error!r})") from None

    # {{ bench_targets("docs/assets/bench/store.json") }}
    def do_bench_targets(self, path: str) -> str:
        import json
        try:
            return bench_targets(json.loads(self._read(path)))
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as error:
            raise IncludeError(f"{path}: not a benchmark report this page can show ({error!r})") from None

    # helpers -----------------------------------------------------------------------------

    def _read(self, path: str) -> str:
        target = (self.root / path).resolve()
        if self.root not in target.parents:
            raise IncludeError(f"{path}: outside the course folder")
        # A starter is shown as the course ships it, made from its solution: in a
        # student's copy, lessons/NN/agent.py holds their work, not the starter.
        starter = generated_file(self.root, target.relative_to(self.root).as_posix())
        if starter is not None:
            return starter
        try:
            return target.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise IncludeError(f"{path}: no such file") from None

    def _module_of(self, lesson: course.Lesson, task_id: str) -> str:
        """The module whose fence holds the task (agent.py when none does)."""
        fence = re.compile(rf"^[ \t]*# BEGIN {re.escape(task_id)}\s*$", re.M)
        for path in course.lesson_modules(lesson.solution_folder):
            if fence.search(path.read_text(encoding="utf-8")):
                return path.name
        return course.MODULE

    def _solution_text(self, lesson: course.Lesson, name: str) -> str:
        """A module of a reference solution as a reader sees it ("" when it has none)."""
        path = lesson.solution_folder / name
        if not path.is_file():
            return ""
        return strip_markers(path.read_text(encoding="utf-8"))

    def _touched(self, lesson: course.Lesson) -> list[tuple[str, str]]:
        """The modules the lesson touches, (file name, "new" / "yours" / "changed"):
        new in it, holding its tasks, or given changed from the lesson before."""
        earlier = [item for item in course.lessons(self.root) if item.number < lesson.number]
        previous = earlier[-1] if earlier else None
        found = []
        for path in course.lesson_modules(lesson.solution_folder):
            name = path.name
            before = self._solution_text(previous, name) if previous else ""
            text = path.read_text(encoding="utf-8")
            if not before:
                found.append((name, "new"))
            elif task_regions(text, lesson.number):
                found.append((name, "yours"))
            elif strip_markers(text) != before:
                found.append((name, "changed"))
        return found

    def _touches_sentence(self, lesson: course.Lesson, touched: list[tuple[str, str]]
                          ) -> str:
        words = {"new": "new", "yours": "your tasks", "changed": "given changes"}
        listed = ", ".join(f"`{name}` ({words[kind]})" for name, kind in touched)
        rest = [path.name for path in course.lesson_modules(lesson.solution_folder)
                if path.name not in dict(touched)]
        sentence = f"This lesson touches {listed} in `lessons/{lesson.name}/`."
        if rest:
            sentence += (" The rest (" + ", ".join(f"`{name}`" for name in rest) +
                         ") is as the lesson before left it, there to read.")
        return sentence

    def _lesson(self, ref: str) -> course.Lesson:
        folder = self.root / "lessons"
        if not folder.is_dir():
            raise IncludeError("no lessons/ folder next to mkdocs.yml")
        for lesson in course.lessons(self.root):
            if ref in (lesson.name, lesson.number):
                return lesson
        raise IncludeError(f"lesson {ref!r} does not exist yet (no lessons/{ref}/lesson.toml)")

    def _previous(self, lesson: course.Lesson) -> course.Lesson:
        # The lesson before it in the course, which is not always number - 1: a course may
        # leave a number free for a lesson still to come.
        earlier = [item for item in course.lessons(self.root) if item.number < lesson.number]
        if not earlier:
            raise IncludeError(f"lesson {lesson.name} is the first one: it has no previous lesson to diff")
        return earlier[-1]

    def _task(self, task_id: str) -> tuple[course.Lesson, course.Task]:
        if not re.fullmatch(r"\d\d\.\d+", task_id):
            raise IncludeError(f"{task_id!r} is not a task id like '03.1'")
        lesson = self._lesson(task_id[:2])
        try:
            return lesson, lesson.task(task_id)
        except course.CourseError:
            known = ", ".join(task.id for task in lesson.tasks) or "none"
            raise IncludeError(f"lessons/{lesson.name}/lesson.toml has no task {task_id} "
                               f"(its tasks: {known})") from None



# --- what grew between two lessons --------------------------------------------------------------


@dataclass(frozen=True)
class TaskRegion:
    task: str
    code: str           # dedented, without the BEGIN/END lines

    @property
    def code_lines(self) -> int:
        """Lines a student types: not blank, not a comment."""
        return sum(1 for line in self.code.splitlines()
                   if line.strip() and not line.strip().startswith("#"))


def task_regions(solution: str, number: str) -> list[TaskRegion]:
    """The code inside this lesson's `# BEGIN NN.k` / `# END NN.k` fences, in file order."""
    found: list[TaskRegion] = []
    lines = solution.splitlines(keepends=True)
    begin = re.compile(rf"^[ \t]*# BEGIN (?P<task>{re.escape(number)}\.\d+)\s*$")
    for index, line in enumerate(lines):
        match = begin.match(line)
        if not match:
            continue
        end = re.compile(rf"^[ \t]*# END {re.escape(match['task'])}\s*$")
        stop = next((k for k in range(index + 1, len(lines)) if end.match(lines[k])), None)
        if stop is None:
            raise IncludeError(f"BEGIN {match['task']} is never closed")
        body = lines[index + 1:stop]
        indent = min((len(b) - len(b.lstrip()) for b in body if b.strip()), default=0)
        code = "".join(b[indent:] if b.strip() else "\n" for b in body)
        found.append(TaskRegion(match["task"], code))
    return found


PLACEHOLDER = re.compile(r"^\s*(raise NotImplementedError\(|# TODO\(|# Hints: |# What it asks: )")


@dataclass(frozen=True)
class Hunk:
    kind: str           # "python": lines added, shown as code; "diff": lines changed
    text: str
    first_line: int     # in the newer file


@dataclass(frozen=True)
class Given:
    hunks: list[Hunk]
    added: int          # added or changed lines shown
    churn: int          # changed lines left out: docstrings, comments, blank lines


def given_changes(old: str, new: str) -> Given:
    """The changes from `old` to `new` in code, leaving out docstrings, comments and blanks.

    The two files are compared without their prose lines, so a reworded docstring makes no
    hunk of its own (it is counted in `churn`). A group of changes that only adds code is shown
    as Python: the new file's lines, docstrings included, with their line numbers. A group that
    removes or replaces code is shown as a diff of the code lines.
    """
    old_lines, new_lines = old.splitlines(keepends=True), new.splitlines(keepends=True)
    old_prose, new_prose = prose_lines(old), prose_lines(new)
    old_code = [i for i in range(len(old_lines)) if i not in old_prose]
    new_code = [j for j in range(len(new_lines)) if j not in new_prose]
    matcher = difflib.SequenceMatcher(None, [old_lines[i] for i in old_code],
                                      [new_lines[j] for j in new_code], autojunk=False)
    hunks: list[Hunk] = []
    added = 0
    for group in matcher.get_grouped_opcodes(2):
        for tag, i1, i2, j1, j2 in group:
            if tag != "equal":
                # The TODO placeholders are where the student writes, not something given.
                added += sum(1 for j in new_code[j1:j2] if not PLACEHOLDER.match(new_lines[j]))
        first, last = new_code[group[0][3]], new_code[group[-1][4] - 1] + 1
        if all(tag in ("equal", "insert") for tag, *_ in group):
            hunks.append(Hunk("python", "".join(new_lines[first:last]), first + 1))
            continue
        text = []
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                text += [" " + new_lines[j] for j in new_code[j1:j2]]
                continue
            text += ["-" + old_lines[i] for i in old_code[i1:i2]]
            text += ["+" + new_lines[j] for j in new_code[j1:j2]]
        hunks.append(Hunk("diff", "".join(line if line.endswith("\n") else line + "\n"
                                          for line in text), first + 1))
    # What was left out: the docstring and comment lines (not blanks) that changed, except
    # those shown inside a new helper.
    every = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    churn = 0
    for tag, i1, i2, j1, j2 in every.get_opcodes():
        if tag != "equal":
            churn += sum(1 for i in range(i1, i2) if i in old_prose and old_lines[i].strip())
            churn += sum(1 for j in range(j1, j2) if j in new_prose and new_lines[j].strip()
                         and not any(h.kind == "python" and h.first_line - 1 <= j
                                     < h.first_line - 1 + h.text.count("\n") for h in hunks))
    return Given(hunks, added, churn)


def prose_lines(text: str) -> set[int]:
    """0-based numbers of the lines that are docstrings, comments or blank."""
    lines = text.splitlines()
    # A starter's TODO and Hints comments are no prose here: they mark where the student's
    # code goes.
    found = {i for i, line in enumerate(lines) if not line.strip()
             or (line.strip().startswith("#") and not PLACEHOLDER.match(line))}
    try:
        tree = syntax.parse(text)
    except SyntaxError:
        return found
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                found.update(range(body[0].lineno - 1, (body[0].end_lineno or body[0].lineno)))
    return found


def line_range(text: str, lines: str, path: str = "<file>") -> tuple[str, int]:
    """Lines "3-5" (1-based, inclusive) of `text`, and the first one's number."""
    match = re.fullmatch(r"(\d+)-(\d+)", lines.strip())
    every = text.splitlines(keepends=True)
    if not match or not 1 <= int(match[1]) <= int(match[2]) <= len(every):
        raise IncludeError(f"{path}: lines {lines!r} is not a range like '1-3' within its "
                           f"{len(every)} lines")
    first, last = int(match[1]), int(match[2])
    return "".join(every[first - 1:last]), first


def _date(iso: str) -> str:
    """2026-11-30 as '30 November 2026'."""
    from datetime import date
    day = date.fromisoformat(iso)
    return f"{day.day} {day:%B %Y}"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def _indent(text: str) -> str:
    return "".join("    " + line if line.strip() else line
                   for line in text.splitlines(keepends=True))


# --- finding code by name ---------------------------------------------------------------------


def section(text: str, name: str, path: str = "<file>") -> tuple[str, int]:
    """The source of one function, class or method (`Agent.run`) and its first line number."""
    try:
        tree = syntax.parse(text)
    except SyntaxError as error:
        raise IncludeError(f"{path}: cannot be parsed ({error})") from None
    scope: list[ast.stmt] = tree.body
    node: ast.AST | None = None
    for part in name.split("."):
        node = next((item for item in scope
                     if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and item.name == part), None)
        if node is None:
            raise IncludeError(f"{path}: no function or class {name!r} (looked for {part!r})")
        scope = node.body  # type: ignore[attr-defined]
    assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    lines = text.splitlines(keepends=True)[first - 1:node.end_lineno]
    indent = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
    return "".join(line[indent:] if line.strip() else line.lstrip(" \t") for line in lines), first


def code_block(text: str, *, language: str, title: str, first_line: int | None = None) -> str:
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    options = f' title="{title}"'
    if first_line is not None:
        options += f' linenums="{first_line}"'
    return f"{fence} {language}{options}\n{text.rstrip()}\n{fence}\n"


# --- reading a lesson's tests ---------------------------------------------------------------------


@dataclass(frozen=True)
class LessonTest:
    name: str
    tasks: tuple[str, ...]
    key: bool
    checks: str          # the docstring's first paragraph


def lesson_tests(folder: Path) -> list[LessonTest]:
    """Every test function in a lesson folder's test_*.py files, in file order.

    The task marks are read by maintainers.test_marks, the same reading the maintainers' check
    holds every lesson to, so the site shows exactly the marks that check counts.
    """
    tasks = test_marks(course.load_lesson(folder.parent.parent, folder.name))
    found: list[LessonTest] = []
    for path in sorted(folder.glob("test_*.py")):
        tree = syntax.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                found.append(LessonTest(node.name, tuple(tasks.get(node.name, ())), _is_key(node), _checks(node)))
    return found


def _is_key(node: ast.FunctionDef) -> bool:
    """Marked @pytest.mark.key (bare or called)."""
    return any(ast.unparse(d.func if isinstance(d, ast.Call) else d) == "pytest.mark.key"
               for d in node.decorator_list)


def _checks(node: ast.FunctionDef) -> str:
    """What a test checks, in its own words: the first paragraph of its docstring.

    Every lesson test has one (the maintainers' metadata check fails on a test without).
    """
    docstring = ast.get_docstring(node)
    return " ".join(docstring.split("\n\n")[0].split()) if docstring else ""


# --- small helpers --------------------------------------------------------------------------------


def _wheres(where: str) -> list[str]:
    return [part.strip().strip("`").removesuffix("()") for part in re.split(r",| and ", where) if part.strip()]


def _slug(task_id: str) -> str:
    return task_id.replace(".", "-")


def _language(path: str) -> str:
    return {".py": "python", ".toml": "toml", ".json": "json", ".jsonl": "json", ".sh": "bash",
            ".yml": "yaml", ".yaml": "yaml"}.get(Path(path).suffix, "text")


def _prose(text: str) -> str:
    """Markdown written in lesson.toml, with '<' and '>' outside `code` shown as themselves (not HTML)."""
    pieces = re.split(r"(`+[^`]*`+)", text)
    return "".join(piece if piece.startswith("`") else
                   piece.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") for piece in pieces)


def _inline(text: str) -> str:
    """Plain words safe inside a Markdown list item."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"([\\`*_\[\]])", r"\\\1", text)



# --- the examples the site shows: made by `sessionlab demo`, never typed ------------------------

EXAMPLES = "docs/reference/examples"
DEMO_COLUMNS = "80"


def _sessionlab(root: Path, args: list[str], cwd: Path, *, input: str | None = None,
                timeout: float = 300) -> str:
    """Run `sessionlab ARGS` on the course at `root` as a reader would in a pipe, at a
    fixed width so that the transcript is the same on every machine; return what it
    printed (stdout, then stderr)."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, SESSIONLAB_ROOT=str(root), COLUMNS=DEMO_COLUMNS, NO_COLOR="1")
    env.pop("FORCE_COLOR", None)
    result = subprocess.run([sys.executable, "-m", "sessionlab", *args], cwd=cwd, env=env,
                            input=input, stdin=None if input is not None else subprocess.DEVNULL,
                            capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"sessionlab {' '.join(args)} failed ({result.returncode}):\n"
                           f"{result.stdout}{result.stderr}")
    return result.stdout + result.stderr


def run_demo(root: Path, workdir: Path) -> tuple[str, Path]:
    """Run `sessionlab demo` on the course at `root` inside `workdir`; return what it
    printed and the folder of logs it left."""
    return _sessionlab(root, ["demo"], workdir), workdir / "demo-sessions"


CHAT_LINES = ("Ask the elder about the cave.", "Buy what we need.")


def run_chat(root: Path, workdir: Path) -> str:
    """What `sessionlab chat` prints for two typed lines, on lesson 02's reference and the town
    model, in a new session `quest` of a `sessions` folder inside `workdir`."""
    return _sessionlab(root, ["chat", "--lesson", "02", "--solution", "--sessions", "sessions",
                              "quest"], workdir, input="\n".join(CHAT_LINES) + "\n")


def run_status(root: Path) -> str:
    """What `sessionlab` alone prints outside a terminal: the watch screen, shown once.

    Slow (it runs every lesson's tests), so only `python -m sessionlab.site examples` runs it.
    """
    return _sessionlab(root, [], root, timeout=600)


def normalized(transcript: str) -> str:
    """A demo transcript without what changes from run to run: process ids and times."""
    transcript = re.sub(r"\bprocess \d+\b", "process <pid>", transcript)
    return re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?([+-]\d\d:\d\d|Z)?", "<time>", transcript)


def refresh_examples(root: Path) -> list[Path]:
    """Write every example the site shows into docs/reference/examples/: the demo's
    transcript and logs, the chat, the status screen and each lesson's `see` transcript."""
    import tempfile
    with tempfile.TemporaryDirectory() as work:
        transcript, logs = run_demo(root, Path(work))
        target = root / EXAMPLES
        written = [target / "demo.txt"]
        written[0].write_text(transcript, encoding="utf-8")
        for name in ("quest.jsonl", "quest-guard.jsonl", "quest-guard.meta.json"):
            (target / name).write_bytes((logs / name).read_bytes())
            written.append(target / name)
        chat_dir = Path(work) / "chat"
        chat_dir.mkdir()
        written.append(target / "chat.txt")
        written[-1].write_text(run_chat(root, chat_dir), encoding="utf-8")
        written.append(target / "status.txt")
        written[-1].write_text(run_status(root), encoding="utf-8")
    from . import failures      # the lessons' "predict, then see" transcripts, see/NN.txt
    return written + failures.refresh(root)


if __name__ == "__main__":      # python -m sessionlab.site examples
    import sys
    if sys.argv[1:] != ["examples"]:
        print("usage: python -m sessionlab.site examples   (remakes docs/reference/examples/: "
              "the demo, the chat, the status screen and `sessionlab see NN`)", file=sys.stderr)
        raise SystemExit(2)
    for path in refresh_examples(course.find_root()):
        print(f"wrote {path}")


# --- the benchmark's figures --------------------------------------------------------------------

BENCH_ROWS = ("append", "append_first", "append_last", "growth", "append_one", "load", "fork", "durable")
BENCH_STORES = ("floor", "subject", "naive", "sqlite3", "langchain", "agents")


def figure(value: float) -> str:
    """Three significant figures, thousands separated: 9.48, 11.0, 235, 1,365,486."""
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def shown(value: float) -> float:
    """A figure as the reader sees it, so that ratios are computed from what is printed."""
    return float(figure(value).replace(",", ""))


def bench_ratios(report: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Each store's ratio to the floor per workload, from the figures as printed.

    Growth is a store's typical last append over its typical first one, both as printed.
    """
    work = report["workloads"]
    ratios: dict[str, dict[str, float]] = {}
    for row in BENCH_ROWS:
        ratios[row] = {}
        for store in BENCH_STORES:
            if row == "growth":
                first = work["append_first"]["results"].get(store, {}).get("value")
                last = work["append_last"]["results"].get(store, {}).get("value")
                if first and last:
                    ratios[row][store] = shown(last) / shown(first)
                continue
            result = work[row]["results"].get(store, {})
            floor = work[row]["results"]["floor"]["value"]
            if result.get("value") is not None:
                ratios[row][store] = shown(result["value"]) / shown(floor)
    return ratios


def ratio_text(ratio: float) -> str:
    return f"{ratio:,.0f}×" if ratio >= 100 else f"{ratio:.1f}×" if ratio >= 10 else f"{ratio:.2f}×"


def bench_markdown(report: dict[str, Any]) -> str:
    work, meta, stores = report["workloads"], report["meta"], report["stores"]
    ratios = bench_ratios(report)
    limits = {target["workload"]: target for target in report["targets"]}
    present = [s for s in BENCH_STORES if s in stores]
    header = ["workload"] + [stores[s]["label"] for s in present] + ["target"]
    lines = ["| " + " | ".join(header) + " |",
             "|---|" + "---:|" * len(present) + ":---:|"]
    notes: list[str] = []
    for row in BENCH_ROWS:
        title = work[row]["title"]
        if row in ("append_one", "load", "fork"):
            title = title.replace(" N", f" {meta['n']:,}")
        cells = [title]
        for store in present:
            result = work[row]["results"].get(store, {})
            star = "\\*" if result.get("extrapolated") else ""
            if row == "growth":
                ratio = ratios[row].get(store)
                cells.append(f"{ratio_text(ratio)}{star}" if ratio is not None else "n/a")
            elif result.get("value") is None:
                cells.append("n/a")
            else:
                cells.append(f"{figure(result['value'])} {work[row]['unit']}{star}<br>"
                             f"{ratio_text(ratios[row][store])}")
        target = limits.get(row)
        if target:
            ratio = ratios[row]["subject"]
            verdict = "met" if ratio <= target["limit"] else "missed"
            cells.append(f"≤ {target['limit']}×<br>**{verdict}**")
        else:
            cells.append("")
        lines.append("| " + " | ".join(cells) + " |")
    for store in present:
        counted = work["append"]["results"].get(store, {})
        if counted.get("extrapolated"):
            notes.append(f"\\* {stores[store]['label']}: extrapolated. Capped at "
                         f"{meta['cap_seconds']:.0f} s per workload, it reached the cap in at "
                         f"least one of the {meta['repeat']} runs; the median run measured "
                         f"{counted['measured']:,} of {meta['n']:,} appends, and the rest is a "
                         "least-squares line of per-append cost against session size.")
        for workload, why in stores[store].get("unsupported", {}).items():
            notes.append(f"{stores[store]['label']}, {workload}: n/a, {why}.")
    reference = work["fork"].get("reference")
    if reference:
        copy = shown(reference["copy_fsync_ms"])
        subject = shown(work["fork"]["results"]["subject"]["value"])
        notes.append(f"A file copy followed by an fsync of the copy takes {figure(copy)} ms; the "
                     f"store's fork is {ratio_text(subject / copy)} that.")
    return "\n".join(lines) + "\n\n" + "  \n".join(notes) + "\n"


def bench_targets(report: dict[str, Any]) -> str:
    """The targets table: each verdict from the ratio shown in the main table."""
    ratios = bench_ratios(report)
    lines = ["| target | figure | verdict |", "|---|---|---|"]
    for target in report["targets"]:
        ratio = ratios[target["workload"]]["subject"]
        verdict = "met" if ratio <= target["limit"] else "missed"
        lines.append(f"| {target['target'].replace('x ', '× ')} | {ratio_text(ratio)} | **{verdict}** |")
    return "\n".join(lines) + "\n"
