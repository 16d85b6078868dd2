"""The course site: it builds strictly, its includes come from the files, and they fail loudly.

The build itself runs `mkdocs build --strict` in a subprocess, exactly as CI and a maintainer
would; the include hook is also tested directly on a small course made in a temporary folder.
The browser check (scripts/browser_check.py) is separate: it needs Chromium.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sessionlab import course
from sessionlab.scripted import validate
from sessionlab.site import IncludeError, expand, lesson_tests, section

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


# --- the real site ---------------------------------------------------------------------------------


def test_the_site_builds_strictly_with_links_and_anchors_checked(tmp_path):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{output}"
    for lesson in course.lessons(ROOT):
        page = tmp_path / "site" / "lessons" / lesson.name / "index.html"
        assert page.is_file(), f"no page was built for lesson {lesson.name}"
        html = page.read_text(encoding="utf-8")
        assert 'class="mermaid"' in html, f"the page of {lesson.name} has no Mermaid diagram"
        assert "{{" not in re.sub(r"<pre.*?</pre>", "", html, flags=re.S), \
            f"an include directive was left unexpanded on the page of {lesson.name}"


def test_the_site_is_configured_to_validate_links_and_anchors():
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    validation = config[config.index("validation:"):]
    for setting in ("not_found: warn", "anchors: warn", "unrecognized_links: warn", "omitted_files: warn"):
        assert setting in validation, f"mkdocs.yml validation should set {setting} (strict turns warnings into errors)"


def test_every_lesson_has_a_page_in_the_navigation():
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for lesson in course.lessons(ROOT):
        assert (DOCS / "lessons" / f"{lesson.name}.md").is_file(), f"docs/lessons/{lesson.name}.md is missing"
        assert f"lessons/{lesson.name}.md" in config, f"lessons/{lesson.name}.md is not in the nav of mkdocs.yml"


def _own_pages():
    # reference/cli.md is written by the command line's generator, not by hand.
    return sorted(p for p in DOCS.rglob("*.md") if p.relative_to(DOCS).as_posix() != "reference/cli.md")


@pytest.mark.parametrize("page", _own_pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_every_page_ends_with_where_to_go_next(page):
    text = page.read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", text, flags=re.M)
    assert headings and headings[-1] == "Where next", f"{page.name}: the last section should be '## Where next'"
    last = text[text.rindex("## Where next"):]
    assert re.search(r"\]\([^)]+\.md(#[^)]*)?\)", last), f"{page.name}: 'Where next' should link to another page"


def test_the_format_examples_are_real_logs():
    examples = DOCS / "reference" / "examples"
    raw = (examples / "quest.jsonl").read_bytes()
    assert raw.endswith(b"\n"), "every line of a log ends with a newline"
    messages = [json.loads(line) for line in raw.split(b"\n") if line]
    assert all("role" in m for m in messages)
    validate({"model": "example", "messages": messages})   # a provider would accept it as history
    meta = json.loads((examples / "quest-guard.meta.json").read_text(encoding="utf-8"))
    assert meta["format"] == 1 and {"id", "parent", "forked_at", "created"} <= meta.keys()

    # The latest lesson that can load reads it back exactly.
    solutions = [lesson.module_path("solution") for lesson in course.lessons(ROOT)]
    loaders = [path for path in solutions if path.is_file() and "def load(" in path.read_text(encoding="utf-8")]
    assert loaders, "no solution has SessionLog.load yet"
    module = course.load_module(loaders[-1], f"sessionlab_impl.site_example_{loaders[-1].parent.name}")
    with module.SessionLog(examples, "quest") as log:
        assert log.load() == messages


# --- the include hook, on a small course of its own -------------------------------------------------


@pytest.fixture
def tiny(tmp_path):
    """A course with lessons 00 and 01, each with one task, one test and a marked solution."""
    for number, name in (("00", "00_first"), ("01", "01_second")):
        folder, solution = tmp_path / "lessons" / name, tmp_path / "solutions" / name
        folder.mkdir(parents=True)
        solution.mkdir(parents=True)
        (folder / "lesson.toml").write_text(textwrap.dedent(f'''
            title = "Lesson {number}"
            discussion = "Why <this> way."
            [[tasks]]
            id = "{number}.1"
            title = "Write <greet>"
            where = "Greeter.greet"
            description = "Return a greeting for `<name>`."
            hints = ["Start small.", "Use an f-string."]
            '''), encoding="utf-8")
        (folder / "test_it.py").write_text(textwrap.dedent(f'''
            import pytest

            @pytest.mark.key
            @pytest.mark.task("{number}.1")
            def test_a_greeting_names_the_person(lesson):
                """A greeting names the person greeted.

                Only the first paragraph is shown on the site."""
                greeting = lesson.Greeter().greet("Ada")
                assert greeting == "Hello, Ada", f"expected a greeting for Ada, got {{greeting!r}}"
            '''), encoding="utf-8")
        extra = "\n\nLOUD = True\n" if number == "01" else "\n"
        (solution / "agent.py").write_text(textwrap.dedent(f'''
            class Greeter:
                def greet(self, name):
                    # BEGIN {number}.1
                    return f"Hello, {{name}}"
                    # END {number}.1
            ''') + extra, encoding="utf-8")
        (folder / "agent.py").write_text(textwrap.dedent(f'''
            class Greeter:
                def greet(self, name):
                    # TODO({number}.1): Write <greet>.
                    raise NotImplementedError("task {number}.1")
            '''), encoding="utf-8")
    return tmp_path


def test_a_function_is_found_by_name_and_solutions_lose_their_fences(tiny):
    out = expand('{{ code("solutions/00_first/agent.py", "Greeter.greet") }}\n', tiny)
    assert 'return f"Hello, {name}"' in out
    assert "BEGIN" not in out and "END 00.1" not in out, "solutions are shown without their fence lines"
    assert out.lstrip().startswith("``` python") and "class Greeter" not in out


def test_raw_keeps_the_fences_for_instructors(tiny):
    out = expand('{{ code("solutions/00_first/agent.py", raw=True) }}\n', tiny)
    assert "# BEGIN 00.1" in out


def test_an_indented_directive_is_indented_output(tiny):
    out = expand('??? note "x"\n\n    {{ code("lessons/00_first/agent.py", "Greeter") }}\n', tiny)
    body = out.split("\n\n", 1)[1]
    assert all(line.startswith("    ") for line in body.splitlines() if line.strip()), body


def test_a_task_shows_its_text_starter_tests_and_folded_hints(tiny):
    out = expand('{{ task("00.1") }}\n{{ tests("00.1") }}\n{{ hints("00.1") }}\n', tiny)
    assert "### Task 00.1: Write &lt;greet&gt; {#task-00-1}" in out
    assert "`<name>`" in out, "code spans in descriptions are kept as written"
    assert "TODO(00.1)" in out, "the task shows its starter code"
    assert "`test_a_greeting_names_the_person` *(key)*: A greeting names the person greeted.\n" in out, (
        "a test is described by the first paragraph of its docstring")
    assert "Only the first paragraph" not in out
    assert '??? tip "Hint 1 of 2 for task 00.1"' in out and '??? tip "Hint 2 of 2 for task 00.1"' in out


def test_a_text_field_of_lesson_toml_is_included_as_prose(tiny):
    assert expand('{{ field("00_first", "discussion") }}\n', tiny).strip() == "Why &lt;this&gt; way."


def test_the_diff_runs_from_the_previous_lessons_solution(tiny):
    out = expand('{{ diff("01_second") }}\n', tiny)
    assert "solutions/00_first/agent.py → solutions/01_second/agent.py" in out
    assert "+LOUD = True" in out and "BEGIN" not in out


@pytest.mark.parametrize("directive, named", [
    ('{{ code("lessons/00_first/missing.py") }}', "lessons/00_first/missing.py: no such file"),
    ('{{ code("solutions/00_first/agent.py", "Greeter.shout") }}', "no function or class 'Greeter.shout'"),
    ('{{ task("04.1") }}', "lesson '04' does not exist yet"),
    ('{{ tasks("04_repair") }}', "lesson '04_repair' does not exist yet"),
    ('{{ task("00.7") }}', "has no task 00.7"),
    ('{{ diff("00_first") }}', "first one"),
    ('{{ code("../outside.py") }}', "outside the course folder"),
    ('{{ nonsense("x") }}', "unknown directive 'nonsense'"),
    ('{{ field("00_first", "epilogue") }}', "has no text field 'epilogue'"),
])
def test_anything_missing_stops_the_build_and_names_it(tiny, directive, named):
    with pytest.raises(IncludeError) as error:
        expand(f"# A page\n\n{directive}\n", tiny, "lessons/a_page.md")
    message = str(error.value)
    assert "docs/lessons/a_page.md:3" in message, f"the error should name the page and line: {message}"
    assert named in message


def test_directives_inside_code_fences_are_shown_not_run(tiny):
    page = '```text\n{{ code("nope.py") }}\n```\n'
    assert expand(page, tiny) == page


def test_the_real_lessons_tests_are_read_with_their_tasks():
    tests = lesson_tests(ROOT / "lessons" / "00_memory")
    assert tests and all(t.name.startswith("test_") for t in tests)
    assert all(t.tasks for t in tests), "every lesson test carries a task mark"


def test_section_keeps_decorators_and_reports_the_first_line():
    text = "import x\n\n@decorate\ndef f():\n    return 1\n"
    code, first = section(text, "f")
    assert code.startswith("@decorate") and first == 3
