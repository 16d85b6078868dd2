"""The course site: it builds strictly, its includes come from the files, and they fail loudly.

The build itself runs `mkdocs build --strict` in a subprocess, exactly as CI and a maintainer
would, and `zensical build` on the same mkdocs.yml must give every page the same text; the
include extension is also tested directly on a small course made in a temporary folder.
The browser check (scripts/browser_check.py) is separate: it needs Chromium.
"""

from __future__ import annotations

import html.parser
import importlib.util
import json
import os
import re
import shutil
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


@pytest.fixture(scope="module")
def mkdocs_site(tmp_path_factory):
    """The site as `mkdocs build --strict` makes it (built once for the tests that read it)."""
    site = tmp_path_factory.mktemp("mkdocs") / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{output}"
    return site


@pytest.mark.campaign      # builds the site, or runs the demo or the chat
def test_the_site_builds_strictly_with_links_and_anchors_checked(mkdocs_site):
    for lesson in course.lessons(ROOT):
        page = mkdocs_site / "lessons" / lesson.name / "index.html"
        assert page.is_file(), f"no page was built for lesson {lesson.name}"
        html = page.read_text(encoding="utf-8")
        assert 'class="mermaid"' in html, f"the page of {lesson.name} has no Mermaid diagram"
        assert "{{" not in re.sub(r"<pre.*?</pre>", "", html, flags=re.S), \
            f"an include directive was left unexpanded on the page of {lesson.name}"
    # Every other page too: a directive's syntax written in prose (a page about the site
    # would show it in a code block) reads, to the browser check, as one left unexpanded.
    for page in sorted(mkdocs_site.rglob("index.html")):
        text = re.sub(r"<pre.*?</pre>", "", page.read_text(encoding="utf-8"), flags=re.S)
        assert not re.search(r"\{\{\s*[a-z_]+\(", text), (
            f"{page.relative_to(mkdocs_site)}: an include directive outside a code block "
            "(left unexpanded, or its syntax written in prose)")


class ArticleText(html.parser.HTMLParser):
    """What a reader reads on a page: the text of its <article>, a line per block, with a
    mark for each folded block, code block, table and image, so that a hint left unfolded or
    a missing diagram counts as a difference too. The theme around it (navigation, header,
    footer) is each generator's own and is not compared."""

    BLOCKS = {"p", "li", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "div", "summary", "br", "dt",
              "dd", "blockquote"}
    MARKED = {"details", "pre", "table", "img"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.depth = self.hidden = self.code = 0
        self.out: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "article":
            self.depth += 1
        if not self.depth:
            return
        if tag in ("script", "style"):
            self.hidden += 1
        if tag == "pre":
            self.code += 1
        attributes = dict(attrs)
        if tag in self.MARKED:
            shown = {key: attributes[key] for key in ("class", "open", "src") if key in attributes}
            self.out.append(f"\n[{tag} {shown}]\n")
        elif tag in self.BLOCKS:
            self.out.append("\n")

    def handle_endtag(self, tag):
        if tag == "article":
            self.depth -= 1
        elif self.depth and tag in ("script", "style") and self.hidden:
            self.hidden -= 1
        elif self.depth and tag == "pre" and self.code:
            self.code -= 1

    def handle_data(self, data):
        if self.depth and not self.hidden:
            # A line break is a line only in code; in prose it is a space.
            self.out.append(data if self.code else data.replace("\n", " "))

    @classmethod
    def of(cls, page: Path) -> list[str]:
        reader = cls()
        reader.feed(page.read_text(encoding="utf-8"))
        lines = (" ".join(line.split()) for line in "".join(reader.out).splitlines())
        return [line for line in lines if line]


def test_the_text_of_a_page_is_read_from_its_article_with_its_blocks_marked(tmp_path):
    page = tmp_path / "index.html"
    page.write_text('<nav>Menu</nav><article><h1>Fork</h1><p>A <code>fork</code>\n copies.</p>'
                    '<details class="tip"><summary>Hint 1</summary><p>Copy.</p></details>'
                    '<script>x()</script></article><footer>Made with</footer>', encoding="utf-8")
    assert ArticleText.of(page) == ["Fork", "A fork copies.", "[details {'class': 'tip'}]",
                                    "Hint 1", "Copy."]


@pytest.mark.campaign      # builds the site, or runs the demo or the chat
def test_zensical_builds_every_page_with_the_same_text_as_mkdocs(mkdocs_site, tmp_path):
    """The site does not depend on one generator: Zensical, which reads the same mkdocs.yml,
    makes every page mkdocs makes, each with the same text (the lessons' tasks, tests, hints
    and code expanded by the same extension)."""
    if importlib.util.find_spec("zensical") is None:
        pytest.skip("zensical is not installed (pip install -e '.[dev]' brings it): the "
                    "comparison of the two builds needs it")
    # Zensical writes its site inside the project it builds: build a copy of the pages, with
    # the course they include from named by SESSIONLAB_ROOT.
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    env = dict(os.environ, SESSIONLAB_ROOT=str(ROOT), NO_COLOR="1")
    result = subprocess.run([sys.executable, "-m", "zensical", "build", "--clean"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 0, f"zensical build failed:\n{output[-3000:]}"
    pages = sorted(path.relative_to(mkdocs_site) for path in mkdocs_site.rglob("index.html")
                   if path.relative_to(mkdocs_site).parts[0] not in ("assets", "search"))
    lessons = {Path("lessons", lesson.name, "index.html") for lesson in course.lessons(ROOT)}
    assert lessons <= set(pages), "mkdocs built no page for some lessons"
    different = []
    for page in pages:
        theirs = tmp_path / "site" / page
        if not theirs.is_file():
            different.append(f"{page.parent}/: zensical built no such page")
            continue
        ours, zensicals = ArticleText.of(mkdocs_site / page), ArticleText.of(theirs)
        if not ours:
            different.append(f"{page.parent}/: no text found in the page mkdocs built")
        elif ours != zensicals:
            at = next((i for i, pair in enumerate(zip(ours, zensicals)) if pair[0] != pair[1]),
                      min(len(ours), len(zensicals)))
            said = lambda lines: repr(lines[at]) if at < len(lines) else "(the page ends)"
            different.append(f"{page.parent}/ line {at + 1} of its text: mkdocs has "
                             f"{said(ours)}, zensical {said(zensicals)}")
    assert not different, ("zensical build and mkdocs build --strict made different pages:\n"
                           + "\n".join(different))


def test_the_includes_are_a_markdown_extension_not_a_generators_hook():
    """Both generators run Python-Markdown with the extensions mkdocs.yml lists; a hook or a
    plugin is one generator's API, and the other would print the raw directives."""
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert not re.search(r"^hooks:", config, flags=re.M), \
        "mkdocs.yml should not need a hook: pages must build the same in Zensical"
    extensions = config[config.index("markdown_extensions:"):]
    assert re.search(r"^  - sessionlab\.site$", extensions, flags=re.M), \
        "mkdocs.yml should list sessionlab.site under markdown_extensions"


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
    solutions = [lesson.solution_folder / "log.py" for lesson in course.lessons(ROOT)]
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
            '''), encoding="utf-8")
        (solution / "hints.toml").write_text(textwrap.dedent(f'''
            [hints]
            "{number}.1" = ["Start small.", "Use an f-string."]
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
        if number == "01":      # a page's folded answer: {{ answer("01_second", "saw") }}
            (solution / "answers.toml").write_text("saw = '**What you saw:** it.'\n",
                                                   encoding="utf-8")
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
            ''') + extra, encoding="utf-8")
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


def test_a_design_task_says_the_shape_is_the_students(tiny):
    """A task marked `design = true` tells the reader, above its text, that the whole
    function is theirs and the tests check only what it does; other tasks do not."""
    toml = tiny / "lessons/00_first/lesson.toml"
    assert '"Your design"' not in expand('{{ task("00.1") }}\n', tiny)
    toml.write_text(toml.read_text().replace('id = "00.1"\n',
                                             'id = "00.1"\ndesign = true\n'))
    out = expand('{{ task("00.1") }}\n', tiny)
    assert '!!! tip "Your design"' in out
    assert out.index("Your design") < out.index("Return a greeting")


def test_a_text_field_of_lesson_toml_is_included_as_prose(tiny):
    assert expand('{{ field("00_first", "discussion") }}\n', tiny).strip() == "Why &lt;this&gt; way."


def test_the_diff_keeps_what_you_write_apart_from_what_you_are_given(tiny):
    out = expand('{{ diff("01_second") }}\n', tiny)
    write = out[out.index('??? success "What you write'):out.index('??? abstract "What you are given')]
    given = out[out.index('??? abstract "What you are given'):]
    assert "this is the solution" in write, "the folded block that holds the solution says so"
    assert 'return f"Hello, {name}"' in write and "LOUD" not in write
    assert "+LOUD = True" in given and "+        raise NotImplementedError" in given
    assert "BEGIN" not in out
    assert out.startswith("This lesson touches `agent.py` (your tasks) in "
                          "`lessons/01_second/`."), out.splitlines()[0]
    assert ("You write **1 line** of code in 1 task region; you are given **1 new or "
            "changed line**") in out.splitlines()[0], out.splitlines()[0]


def test_a_new_helper_is_shown_as_python_and_counted_as_given(tiny):
    shared = "".join(f"\nSTEP_{k} = {k}\n" for k in range(8))
    helper = '\n\ndef shout(text):\n    """Loud."""\n    return text.upper()\n'
    for folder in ("solutions/00_first", "solutions/01_second", "lessons/01_second"):
        path = tiny / folder / "agent.py"
        text = path.read_text(encoding="utf-8") + shared
        path.write_text(text + (helper if folder != "solutions/00_first" else ""), encoding="utf-8")
    given = expand('{{ diff("01_second") }}\n', tiny).split('??? abstract "What you are given', 1)[1]
    assert '``` python title="lessons/01_second/agent.py · new"' in given, given
    assert "def shout(text):" in given and "+def shout" not in given
    first = expand('{{ diff("01_second") }}\n', tiny).splitlines()[0]
    assert "you are given **3 new or changed lines**" in first, first
    assert '"""Loud."""' in given and "Not shown" not in first, (
        "a new helper is shown with its docstring, which is then not counted as left out")


def test_changes_to_docstrings_and_comments_are_left_out_of_the_diff(tiny):
    starter = tiny / "lessons" / "01_second" / "agent.py"
    solution = tiny / "solutions" / "01_second" / "agent.py"
    for path in (starter, solution):
        text = path.read_text(encoding="utf-8")
        path.write_text(text.replace("class Greeter:\n",
                                     'class Greeter:\n    """Greets, now with a docstring."""\n\n'
                                     "    # and a comment\n"), encoding="utf-8")
    out = expand('{{ diff("01_second") }}\n', tiny)
    assert "now with a docstring" not in out and "and a comment" not in out, out
    assert "Not shown: 2 changed lines of docstrings and comments." in out


def test_a_folded_answer_comes_from_answers_toml_inside_the_fold(tiny):
    """The page keeps the question (the fold's title); its answer is kept beside the
    solution, so that the page's source does not hand it out."""
    (tiny / "solutions/01_second/answers.toml").write_text(
        "saw = '''\n**What you saw:** a `<b>` and\n\n| a | b |\n|---|---|\n'''\n",
        encoding="utf-8")
    out = expand('??? note "What did you see?"\n    {{ answer("01_second", "saw") }}\n', tiny)
    assert out.startswith('??? note "What did you see?"\n    **What you saw:** a `<b>` and\n'
                          "\n    | a | b |\n    |---|---|\n"), out


@pytest.mark.parametrize("page", sorted((DOCS / "lessons").glob("*.md")), ids=lambda p: p.name)
def test_a_lesson_pages_source_keeps_its_folded_answers_in_answers_toml(page):
    """A student reads docs/lessons/NN_topic.md in their copy, where a fold is plain
    text: what the predict step shows ("What you saw") comes through {{ answer() }}."""
    text = page.read_text(encoding="utf-8")
    assert "**What you saw:**" not in text, (
        f"docs/lessons/{page.name}: 'What you saw' is written in the page's source; keep it "
        f"in solutions/{page.stem}/answers.toml and say {{{{ answer(\"{page.stem}\", \"saw\") }}}}")
    assert f'{{{{ answer("{page.stem}", "saw") }}}}' in text, (
        f"docs/lessons/{page.name}: the folded output of the predict step should end with "
        f'{{{{ answer("{page.stem}", "saw") }}}}')


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
    ('{{ answer("00_first", "saw") }}', "solutions/00_first/answers.toml: no such file"),
    ('{{ answer("01_second", "role") }}',
     "solutions/01_second/answers.toml has no answer 'role' (it has: saw)"),
])
def test_anything_missing_stops_the_build_and_names_it(tiny, directive, named):
    with pytest.raises(IncludeError) as error:
        expand(f"# A page\n\n{directive}\n", tiny, "lessons/a_page.md")
    message = str(error.value)
    assert "docs/lessons/a_page.md:3" in message, f"the error should name the page and line: {message}"
    assert named in message


def test_markdown_with_the_extension_expands_directives_into_html(tiny, monkeypatch):
    """What both generators do with a page: Python-Markdown with sessionlab.site listed."""
    import markdown
    monkeypatch.setenv("SESSIONLAB_ROOT", str(tiny))
    html = markdown.markdown('# Greet\n\n{{ tests("00.1") }}\n',
                             extensions=["sessionlab.site"])
    assert "<code>test_a_greeting_names_the_person</code>" in html and "{{" not in html


def test_a_failed_include_in_the_extension_names_the_page_it_is_on(tiny, monkeypatch):
    import markdown
    page = tiny / "docs" / "lessons" / "00_first.md"
    page.parent.mkdir(parents=True)
    page.write_text('# First\n\nSome words.\n\n{{ task("00.7") }}\n', encoding="utf-8")
    monkeypatch.setenv("SESSIONLAB_ROOT", str(tiny))
    with pytest.raises(IncludeError) as error:
        markdown.markdown(page.read_text(encoding="utf-8"), extensions=["sessionlab.site"])
    assert "docs/lessons/00_first.md:5" in str(error.value) and "has no task 00.7" in str(error.value)


def test_directives_inside_code_fences_are_shown_not_run(tiny):
    page = '```text\n{{ code("nope.py") }}\n```\n'
    assert expand(page, tiny) == page


def test_the_real_lessons_tests_are_read_with_their_tasks(tmp_path):
    # The lesson as the course ships it: lessons/ may hold a student's own tests.
    from sessionlab.maintainers import lay_out_lesson
    (tmp_path / "lessons").mkdir()
    lay_out_lesson(ROOT, tmp_path, "00_memory")
    tests = lesson_tests(tmp_path / "lessons" / "00_memory")
    assert tests and all(t.name.startswith("test_") for t in tests)
    assert all(t.tasks for t in tests), "every lesson test carries a task mark"


def test_section_keeps_decorators_and_reports_the_first_line():
    text = "import x\n\n@decorate\ndef f():\n    return 1\n"
    code, first = section(text, "f")
    assert code.startswith("@decorate") and first == 3


# --- what the pages say, checked against the course ------------------------------------------------


def _story_texts():
    """Every page written by hand, and every lesson.toml: the prose a reader meets."""
    texts = {page.relative_to(ROOT).as_posix(): page.read_text(encoding="utf-8") for page in _own_pages()}
    for toml in [*sorted((ROOT / "lessons").glob("*/lesson.toml")),
                 *sorted((ROOT / "solutions").glob("*/answers.toml"))]:
        texts[toml.relative_to(ROOT).as_posix()] = toml.read_text(encoding="utf-8")
    return texts


def _prose_only(text):
    """The text without fenced code blocks (transcripts and code say what they say)."""
    return re.sub(r"^([ \t]*)(`{3,}|~{3,}).*?^\1\2[ \t]*$", "", text, flags=re.M | re.S)


LESSON_MENTION = re.compile(
    r"\b[Ll]essons? (?P<first>\d{1,2})\b(?:(?:,| to| and| or|-) (?:lessons? )?(?P<second>\d{1,2})\b)?")


def lessons_mentioned(text):
    """Every lesson number a text refers to: 'lesson 04', 'Lessons 01 to 06', ..."""
    found = []
    for match in LESSON_MENTION.finditer(text):
        found += [int(number) for number in match.group("first", "second") if number]
    return found


def test_mentions_of_lessons_are_read_in_every_form():
    assert lessons_mentioned("Lesson 11, on the horizon") == [11]
    assert lessons_mentioned("lessons 01 to 06 promised; lesson 4 and lesson 07") == [1, 6, 4, 7]


def test_no_page_refers_to_a_lesson_that_does_not_exist():
    numbers = {int(lesson.number) for lesson in course.lessons(ROOT)}
    wrong = [f"{where}: lesson {n}" for where, text in _story_texts().items()
             for n in lessons_mentioned(_prose_only(text)) if n not in numbers]
    assert not wrong, ("these refer to a lesson that does not exist (say 'a later lesson', or "
                       "link one that does): " + "; ".join(wrong))


def test_a_page_that_says_how_far_the_lessons_go_names_the_last_one():
    """"up to 07_undo" stayed on getting-started after the course grew to twelve lessons."""
    last = course.lessons(ROOT)[-1].name
    pages = {path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8")
             for path in [ROOT / "README.md", *DOCS.rglob("*.md")]}
    wrong = [f"{where}: up to {named}" for where, text in pages.items()
             for named in re.findall(r"\bup to (\d\d_[a-z0-9_]+)", text) if named != last]
    assert not wrong, f"the last lesson is {last}: " + "; ".join(wrong)


FIRST_PAGES = ("index.md", "getting-started.md", "self-study.md")
DESKTOP_COLUMNS = 72    # of code in the 1280 px column, clear of the copy button


def hand_written_code(text):
    """The lines of each fenced block written in the page (diagrams aside)."""
    for match in re.finditer(r"^(`{3,})(\w*)[^\n]*\n(.*?)^\1", text, flags=re.M | re.S):
        if match.group(2) != "mermaid":
            yield match.group(3).splitlines()


@pytest.mark.parametrize("name", FIRST_PAGES)
def test_the_code_written_on_the_first_pages_fits_a_desktop_column(name):
    """A newcomer's first pages show their commands and the course's layout whole at
    1280 px: no line is cut at the column's edge or runs under the copy button (the
    getting-started layout did, at 87 characters)."""
    wide = [line for block in hand_written_code((DOCS / name).read_text(encoding="utf-8"))
            for line in block if len(line) > DESKTOP_COLUMNS]
    assert not wide, (f"docs/{name}: lines over {DESKTOP_COLUMNS} characters are cut at "
                      "1280 px: " + " | ".join(wide))


@pytest.mark.campaign      # builds the site, or runs the demo or the chat
def test_the_self_study_page_names_every_chat_command_and_the_budget_and_the_helper(tmp_path):
    """What `/help` lists in a chat on the last lesson with files (every command the kit
    has), the --budget option and lesson 10's helper are each on the self-study page."""
    from sessionlab.site import _sessionlab
    listed = _sessionlab(ROOT, ["chat", "--lesson", "10", "--solution", "--sessions", "s",
                                "quest"], tmp_path, input="/help\n/quit\n")
    commands = set(re.findall(r"^(/[a-z]+)\b", listed, flags=re.M))
    assert {"/undo", "/compact", "/erase", "/delete"} <= commands, listed
    page = (DOCS / "self-study.md").read_text(encoding="utf-8")
    missing = sorted(word for word in commands | {"/help", "--budget"}
                     if not re.search(rf"`{re.escape(word)}\b", page))
    assert not missing, f"docs/self-study.md never mentions {', '.join(missing)}"
    assert "ask a helper" in page and "side-chain" in page, \
        "docs/self-study.md should say how to make the agent start a helper (lesson 10)"


def test_the_days_of_the_story_go_forward_from_lesson_to_lesson():
    """Each lesson page opens on a day of the quest; lesson 11 opened on day 9 after three
    lessons on day 30."""
    days = []
    for lesson in course.lessons(ROOT):
        # (past the note to whoever opens the page's source, an HTML comment)
        opening = re.match(r"# .*\n+(?:<!--[\s\S]*?-->\n+)?\*\*Day (\d+)\b",
                           (DOCS / "lessons" / f"{lesson.name}.md").read_text(encoding="utf-8"))
        if opening:
            days.append((lesson.name, int(opening.group(1))))
    assert len(days) >= 2, f"no lesson page opens on a day: {days}"
    back = [f"{later} (day {b}) after {earlier} (day {a})"
            for (earlier, a), (later, b) in zip(days, days[1:]) if b < a]
    assert not back, "the story goes back in time: " + "; ".join(back)


# Where a lesson says what it starts from: the lessons that built it, or whose interface it
# keeps. It starts from the lesson just before it.
STARTS_FROM = re.compile(r"\blessons 01 to (\d\d) built\b|\blesson (\d\d)'s (?:store )?interface\b"
                         r"|\| the file \(lesson (\d\d)\)")


@pytest.mark.parametrize("lesson", course.lessons(ROOT)[1:], ids=lambda lesson: lesson.name)
def test_a_lesson_says_it_starts_from_the_lesson_just_before_it(lesson):
    before = [item for item in course.lessons(ROOT) if item.number < lesson.number][-1]
    texts = {f"docs/lessons/{lesson.name}.md":
             (DOCS / "lessons" / f"{lesson.name}.md").read_text(encoding="utf-8"),
             f"lessons/{lesson.name}/lesson.toml, summary": lesson.summary or ""}
    wrong = [f"{where}: {match.group(0)!r}" for where, text in texts.items()
             for match in STARTS_FROM.finditer(text)
             if next(number for number in match.groups() if number) != before.number]
    assert not wrong, (f"lesson {lesson.name} follows {before.name}, but says it starts from "
                       "an earlier lesson: " + "; ".join(wrong))


def test_the_contract_suite_is_described_as_running_the_stores_it_runs():
    """Lesson 11's page says which stores tests/contract/ runs: the course's reference
    solutions (it read as if it checked the student's code)."""
    conftest = (ROOT / "tests" / "contract" / "conftest.py").read_text(encoding="utf-8")
    loaded = re.findall(r'reference\("(\d\d_[a-z0-9_]+)"\)', conftest)
    assert loaded, "tests/contract/conftest.py loads no reference solution"
    page = (DOCS / "lessons" / "11_postgres.md").read_text(encoding="utf-8")
    section = page[page.index("## The contract suite"):]
    section = section[:section.index("\n## ", 1)]
    missing = [name for name in loaded if f"solutions/{name}/" not in section]
    assert not missing, ("the contract suite section should name the reference solutions it "
                         f"runs: {', '.join(f'solutions/{name}/' for name in missing)}")
    assert "not your code" in section, \
        "the contract suite section should say that it does not run the student's code"


def test_no_sentence_of_a_lessons_text_starts_in_lower_case_after_a_full_stop():
    """A typo such as "into one list. so that" (a hint of task 11.2) shows on the site and
    in `sessionlab hint`."""
    stop = re.compile(r"(?<![.\w])(\w+)\. ([a-z]\w*)")
    found = []
    for lesson in course.lessons(ROOT):
        texts = [("summary", lesson.summary or "")]
        for task in lesson.tasks:
            texts.append((f"task {task.id}", task.description or ""))
            texts += [(f"task {task.id} hint {k}", hint) for k, hint in enumerate(task.hints, 1)]
        for where, text in texts:
            prose = re.sub(r"`[^`]*`", "``", text)
            found += [f"lessons/{lesson.name}/lesson.toml, {where}: {match.group(0)!r}"
                      for match in stop.finditer(prose) if match.group(1) not in ("etc", "vs")]
    assert not found, "a full stop inside a sentence: " + "; ".join(found)


NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}
SPENDING = re.compile(r"\b(costs?|cost them|gone|spent|pay|paid|price|for)\b", re.I)


def gold_mistakes(text, prices, starting):
    """Sentences whose gold figure is not what the town says.

    A sentence that spends gold on items it names must use one item's price, or the sum of
    the prices of the items it names; a sentence that names no item and spends nothing may
    only speak of what the adventurer starts with, or of what is left after buying some of
    the items in the shop.
    """
    mistakes = []
    for sentence in re.split(r"(?<=[.!?])\s+", " ".join(text.split())):
        for match in re.finditer(r"\b(\d+|" + "|".join(NUMBER_WORDS) + r") gold\b", sentence, re.I):
            word = match.group(1).lower()
            amount = int(word) if word.isdigit() else NUMBER_WORDS[word]
            named = [item for item in prices if re.search(rf"\b{item}s?\b", sentence, re.I)]
            if named and SPENDING.search(sentence):
                allowed = {prices[item] for item in named} | {sum(prices[item] for item in named)}
            elif named:
                allowed = {prices[item] for item in named} | {starting - sum(prices[item] for item in named)}
            else:
                allowed = {starting} | {starting - price for price in prices.values()} | {
                    starting - a - b for a in prices.values() for b in prices.values()}
            if amount not in allowed:
                mistakes.append(f"{amount} gold in: {sentence.strip()[:160]}")
    return mistakes


def test_a_gold_figure_that_is_no_price_is_caught():
    prices = {"torch": 3, "lantern": 8}
    assert gold_mistakes('"Buy the lantern" was a mistake: ten gold gone.', prices, 10)
    assert not gold_mistakes("The lantern costs 8 gold.", prices, 10)
    assert not gold_mistakes("The adventurer walks into town with ten gold.", prices, 10)


def test_the_gold_in_the_story_matches_the_towns_prices():
    from sessionlab.town import PRICES, STARTING_GOLD
    mistakes = [f"{where}: {mistake}" for where, text in _story_texts().items()
                if where != "docs/reference/cli.md"
                for mistake in gold_mistakes(_prose_only(text), PRICES, STARTING_GOLD)]
    assert not mistakes, ("a gold figure in the story does not match src/sessionlab/town.py "
                          f"(prices {PRICES}, starting gold {STARTING_GOLD}): " + "; ".join(mistakes))


def test_the_story_uses_the_session_names_the_demo_writes():
    from sessionlab.demo import DEMO_SESSIONS
    names = re.compile(r"(?<![\w<>/.-])([A-Za-z0-9][\w-]*)\.(?:jsonl|meta\.json|lock)\b")
    wrong = sorted({f"{where}: {match.group(0)}" for where, text in _story_texts().items()
                    for match in names.finditer(text) if match.group(1) not in DEMO_SESSIONS})
    assert not wrong, (f"the quest's sessions are called {', '.join(DEMO_SESSIONS)} everywhere "
                       "(as `sessionlab demo` names them); these use other names: " + "; ".join(wrong))


# --- hints: code in backticks ---------------------------------------------------------------------

CODE_LOOKING = re.compile(r"""
      \b[A-Za-z_][\w.]*\(                  # a call: name( or os.fsync(
    | \b[A-Za-z_]\w*\.[A-Za-z_]\w*          # a dotted name: self.path, json.dumps
    | \b[A-Za-z]\w*_\w+\b                  # snake_case or O_APPEND
    | \b_\w+\b                             # _private
    | \b[A-Z]\w*[a-z]{2,}[A-Z]\w*\b        # CamelCase: SessionBusy, JSONDecodeError
    | [=!<>]=                              # a comparison
""", re.X)
NOT_CODE = {"e.g", "i.e", "OpenAI", "GitHub", "LevelDB", "PostgreSQL", "SQLite", "JavaScript",
            "llama.cpp"}


def code_outside_backticks(text):
    """The pieces of `text` that look like code but are not inside a `code span`."""
    prose = re.sub(r"(`+)(.+?)\1", " ", text, flags=re.S)
    return [m.group(0) for m in CODE_LOOKING.finditer(prose) if m.group(0).rstrip("(") not in NOT_CODE]


def test_code_outside_backticks_is_found():
    assert code_outside_backticks("call os.fsync(fd) then self._fd = None") == ["os.fsync(", "self._fd"]
    assert code_outside_backticks("raise SessionBusy when LOCK_NB says so") == ["SessionBusy", "LOCK_NB"]
    assert code_outside_backticks("if n <= len(x)") == ["<=", "len("]
    assert not code_outside_backticks("Call `os.fsync(fd)`, then `self._fd = None` (e.g. at once).")
    assert not code_outside_backticks("A 2 GiB write, as OpenAI documents it.")


def test_every_hint_keeps_its_code_in_backticks():
    """A hint is Markdown on the site: code outside a code span renders as prose."""
    wrong = [f"lessons/{lesson.name}/lesson.toml, task {task.id}, hint {level}: {found}"
             for lesson in course.lessons(ROOT) for task in lesson.tasks
             for level, hint in enumerate(task.hints, start=1)
             if (found := code_outside_backticks(hint))]
    assert not wrong, "put code in hints between backticks:\n" + "\n".join(wrong)


def test_every_task_description_keeps_its_code_in_backticks():
    wrong = [f"lessons/{lesson.name}/lesson.toml, task {task.id}: {found}"
             for lesson in course.lessons(ROOT) for task in lesson.tasks
             if (found := code_outside_backticks(task.description or ""))]
    assert not wrong, "put code in task descriptions between backticks:\n" + "\n".join(wrong)


# --- diagrams: narrow enough for a phone ---------------------------------------------------------------

MERMAID = re.compile(r"^([ \t]*)```mermaid\n(.*?)^\1```", re.M | re.S)
LABEL_WIDTH = 26        # characters of one label line: about 200 px at the diagrams' font


def diagram_problems(source):
    """What makes a Mermaid diagram too wide for a 390 px screen."""
    problems = []
    if re.search(r"^\s*(flowchart|graph)\s+(LR|RL)\b", source, re.M):
        problems.append("drawn left to right (use flowchart TD)")
    if re.search(r"^\s*direction\s+(LR|RL)\b", source, re.M):
        problems.append("a subgraph drawn left to right")
    if source.lstrip().startswith("sequenceDiagram"):
        participants = re.findall(r"^\s*participant\s", source, re.M)
        if len(participants) > 3:
            problems.append(f"{len(participants)} participants side by side (at most 3)")
    for label in re.findall(r'"([^"]*)"|\[([^\]"]*)\]|:\s*(.+)$', source, re.M):
        for text in label:
            for line in re.split(r"<br\s*/?>", text):
                if len(line.strip()) > LABEL_WIDTH:
                    problems.append(f"a label line of {len(line.strip())} characters: {line.strip()!r}")
    return problems


def test_a_wide_diagram_is_found():
    assert diagram_problems("flowchart LR\n  A --> B\n")
    assert diagram_problems('flowchart TD\n  A["a label that goes on and on and on"] --> B\n')
    assert not diagram_problems('flowchart TD\n  A["short<br/>and narrow"] --> B\n')


@pytest.mark.parametrize("page", _own_pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_the_diagrams_fit_a_phone(page):
    text = page.read_text(encoding="utf-8")
    problems = [problem for match in MERMAID.finditer(text) for problem in diagram_problems(match.group(2))]
    assert not problems, (f"docs/{page.relative_to(DOCS).as_posix()}: a diagram too wide for "
                          "390 px: " + "; ".join(problems))


# --- the demo: the home page shows what it prints today -------------------------------------------


@pytest.fixture(scope="module")
def demo_today(tmp_path_factory):
    from sessionlab.site import run_demo
    return run_demo(ROOT, tmp_path_factory.mktemp("demo"))


REMAKE = "remake them with `python -m sessionlab.site examples`"


@pytest.mark.campaign      # builds the site, or runs the demo or the chat
def test_the_demo_transcript_on_the_site_is_what_the_demo_prints_today(demo_today):
    from sessionlab.site import normalized
    printed, _ = demo_today
    shown = (DOCS / "reference" / "examples" / "demo.txt").read_text(encoding="utf-8")
    assert normalized(shown) == normalized(printed), (
        f"docs/reference/examples/demo.txt is not what `sessionlab demo` prints today: {REMAKE}")
    home = (DOCS / "index.md").read_text(encoding="utf-8")
    assert '{{ code("docs/reference/examples/demo.txt"' in home, "the home page includes the transcript"


@pytest.mark.campaign      # builds the site, or runs the demo or the chat
@pytest.mark.parametrize("name", ["quest.jsonl", "quest-guard.jsonl", "quest-guard.meta.json"])
def test_the_example_logs_are_what_the_demo_writes_today(demo_today, name):
    from sessionlab.site import normalized
    _, logs = demo_today
    shown = (DOCS / "reference" / "examples" / name).read_text(encoding="utf-8")
    assert normalized(shown) == normalized((logs / name).read_text(encoding="utf-8")), (
        f"docs/reference/examples/{name} differs from what `sessionlab demo` writes today: {REMAKE}")


def test_a_transcript_differs_only_in_pids_and_times_once_normalized():
    from sessionlab.site import normalized
    assert normalized("process 4242 at 2026-11-30T02:50:45+00:00") == \
        normalized("process 17 at 2026-12-01T05:51:26+00:00")
    assert normalized("bought a torch for 3 gold") != normalized("bought a torch for 4 gold")


@pytest.mark.campaign      # builds the site, or runs the demo or the chat
def test_the_chat_transcript_on_the_site_is_what_chat_prints_today(tmp_path):
    from sessionlab.site import normalized, run_chat
    shown = (DOCS / "reference" / "examples" / "chat.txt").read_text(encoding="utf-8")
    assert normalized(shown) == normalized(run_chat(ROOT, tmp_path)), (
        f"docs/reference/examples/chat.txt is not what `sessionlab chat` prints today: {REMAKE}")


# --- every lesson page: a design note and a few challenges ---------------------------------------


@pytest.mark.parametrize("page", sorted((DOCS / "lessons").glob("*.md")), ids=lambda p: p.name)
def test_every_lesson_has_a_design_note_and_two_to_four_challenges(page):
    text = page.read_text(encoding="utf-8")
    sections = dict(re.findall(r"^## (.+?)\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S))
    assert sections.get("Design note", "").strip(), f"docs/lessons/{page.name} has no '## Design note'"
    challenges = re.findall(r"^\d+\. ", sections.get("Challenges", ""), flags=re.M)
    assert 2 <= len(challenges) <= 4, (
        f"docs/lessons/{page.name} should end its lesson with 2 to 4 numbered challenges "
        f"under '## Challenges', has {len(challenges)}")


def test_the_glossary_defines_the_words_the_course_relies_on():
    text = (DOCS / "glossary.md").read_text(encoding="utf-8")
    defined = {term.lower() for line in re.findall(r"^\*\*(.+?)\*\*", text, flags=re.M)
               for term in re.split(r",\s*", line)}
    wanted = {"turn", "writer", "marker", "torn tail", "durable", "pending", "key test", "fence",
              "starter", "scripted model", "blob", "fork", "skip set", "floor"}
    assert not wanted - defined, f"the glossary does not define: {sorted(wanted - defined)}"


def test_the_recap_follows_the_last_lesson_in_the_navigation():
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    last = course.lessons(ROOT)[-1]
    assert re.search(rf"lessons/{last.name}\.md\n.*recap\.md\n", config), \
        "the recap page comes right after the last lesson in the nav of mkdocs.yml"


# --- the benchmarks page: one run, ratios from the figures shown ----------------------------------


def _benchmarks_page():
    return expand((DOCS / "benchmarks.md").read_text(encoding="utf-8"), ROOT, "benchmarks.md")


def _number(text):
    return float(text.replace(",", ""))


def test_every_ratio_in_the_benchmarks_table_is_computed_from_the_figures_shown():
    page = _benchmarks_page()
    rows = [line for line in page.splitlines() if line.startswith("| ") and "<br>" in line]
    assert rows, "the benchmarks page has no table of figures"
    wrong = []
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        pairs = [re.match(r"([\d,.]+) (µs|ms)\\?\*?<br>([\d,.]+)×", cell) for cell in cells[1:]]
        figures = [(pair[1], pair[3]) for pair in pairs if pair]
        if not figures:
            continue
        floor = _number(figures[0][0])
        for value, ratio in figures:
            expected = _number(value) / floor
            shown = _number(ratio)
            # The ratio is printed to 3 significant figures at most: allow its rounding.
            if abs(shown - expected) > max(0.006, expected * 0.006):
                wrong.append(f"{cells[0]}: {value} over the floor's {figures[0][0]} is "
                             f"{expected:.3g}×, the page says {ratio}×")
    assert not wrong, "ratios on the benchmarks page do not follow from its figures: " + "; ".join(wrong)


def test_every_figure_in_the_benchmarks_prose_is_one_of_its_tables():
    page = _benchmarks_page()
    tables = "\n".join(line for line in page.splitlines() if line.startswith("|"))
    tables += "\n" + "\n".join(line for line in page.splitlines() if "takes" in line and "fork is" in line)
    prose = "\n".join(line for line in _prose_only(page).splitlines() if not line.startswith("|"))
    figures = re.findall(r"(?<![\w.,])(\d[\d,]*(?:\.\d+)?)(×| µs| ms)", prose)
    missing = sorted({f"{value}{unit}" for value, unit in figures if f"{value}{unit}" not in tables})
    assert not missing, ("figures in the benchmarks page's prose that its tables (one run) do not "
                         f"show: {missing}")


HISTORY = re.compile(r"\bused to\b|\bno longer\b|\bbefore the (last )?changes\b|× before\b"
                     r"|\|\s*Before\s*\||\bbefore: |\bwent from\b", re.I)


@pytest.mark.parametrize("name", ["benchmarks.md", "store-under-fire.md"])
def test_the_history_of_changes_is_kept_on_the_maintainers_page(name):
    text = (DOCS / name).read_text(encoding="utf-8")
    found = [line.strip()[:100] for line in text.splitlines() if HISTORY.search(line)]
    assert not found, (f"docs/{name} tells what changed when (before/after); that belongs on "
                       "docs/maintainers.md: " + " | ".join(found))
