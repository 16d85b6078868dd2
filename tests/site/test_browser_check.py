"""The browser check's decisions, from numbers a browser would measure (no browser here).

scripts/browser_check.py measures each page in Chromium and decides in plain Python whether
something is clipped, widens the page or is shrunk unreadably; those decisions are tested
here on made-up measurements. The check itself runs in CI as its own step.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

# The campaign (tests/conftest.py): the browser check's measuring, in Chromium.
pytestmark = pytest.mark.campaign

ROOT = Path(__file__).resolve().parents[2]


def _load():
    path = ROOT / "scripts" / "browser_check.py"
    spec = importlib.util.spec_from_file_location("browser_check", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module      # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


check = _load()
PHONE = check.VIEWPORTS["phone"].width


def block(scroll: float, client: float, overflow: str = "visible", strict: bool = True,
          fades: bool = True, scrollbar: float = 0, what: str = "<pre>") -> dict:
    return {"what": what, "scrollWidth": scroll, "clientWidth": client,
            "overflowX": overflow, "mustScroll": strict, "fades": fades,
            "scrollbarPx": scrollbar}


def box(left: float, top: float, right: float, bottom: float, **more) -> dict:
    return {"left": left, "top": top, "right": right, "bottom": bottom, **more}


def figure(natural: float, rendered: float, font: float = 16) -> dict:
    return {"what": "Mermaid diagram 1", "naturalWidth": natural, "renderedWidth": rendered,
            "fontPx": font}


# --- code blocks, tables, diagram boxes ------------------------------------------------------


@pytest.mark.parametrize("overflow", ["visible", "hidden", "clip"])
def test_a_code_block_wider_than_its_box_that_does_not_scroll_is_clipped(overflow):
    problems = check.block_problems([block(600, 358, overflow)])
    assert len(problems) == 1 and "clipped" in problems[0] and "600 px" in problems[0]


@pytest.mark.parametrize("overflow", ["auto", "scroll"])
def test_a_code_block_wider_than_its_box_that_scrolls_is_fine(overflow):
    assert check.block_problems([block(600, 358, overflow)]) == []


def test_a_block_that_fits_or_is_a_pixel_over_is_fine():
    assert check.block_problems([block(358, 358), block(359, 358)]) == []
    assert check.block_problems([block(360, 358)]) != []


def test_any_box_that_hides_wide_content_is_clipped_but_visible_overflow_elsewhere_is_not():
    assert check.block_problems([block(600, 358, "hidden", strict=False)]) != []
    assert check.block_problems([block(600, 358, "visible", strict=False)]) == []


# --- a box cut at its edge shows that it scrolls ---------------------------------------------


def test_a_diagram_cut_at_its_edge_with_no_sign_that_it_scrolls_fails():
    diagram = block(450, 358, "auto", fades=False, what="<div.mermaid>")
    problems = check.sign_problems([diagram])
    assert len(problems) == 1 and "<div.mermaid>" in problems[0] and "no sign" in problems[0]
    assert check.layout_problems({"scrollWidth": PHONE, "escapes": [], "blocks": [diagram],
                                  "figures": []}, PHONE) == problems


def test_a_cut_box_that_fades_at_its_edge_or_draws_a_scrollbar_shows_it_scrolls():
    assert check.sign_problems([block(450, 358, "auto", fades=True)]) == []
    assert check.sign_problems([block(450, 358, "auto", fades=False, scrollbar=8)]) == []
    assert check.sign_problems([block(450, 358, "auto", fades=False, scrollbar=0.5)]) != [], \
        "an overlay scrollbar that takes no room is no sign"


def test_a_box_that_fits_needs_no_sign_and_one_that_does_not_scroll_is_reported_as_clipped():
    assert check.sign_problems([block(358, 358, "auto", fades=False)]) == []
    clipped = block(450, 358, "hidden", fades=False)
    assert check.sign_problems([clipped]) == [] and check.block_problems([clipped]) != []


# --- no control drawn over text ---------------------------------------------------------------


def copy_button(*words: dict) -> dict:
    return box(354, 834, 386, 866, what="<nav.md-code__nav> (Copy to clipboard)",
               words=list(words))


def test_a_copy_button_drawn_over_a_word_fails_naming_the_word():
    problems = check.control_problems([copy_button(box(330, 840, 372, 858, text="install"))])
    assert len(problems) == 1 and '"install"' in problems[0] and "Copy" in problems[0]


def test_words_beside_or_a_pixel_under_the_button_are_not_covered():
    beside = box(300, 840, 353, 858, text="pip")
    grazing = box(300, 865.5, 360, 880, text="demo")
    assert check.control_problems([copy_button(beside, grazing)]) == []
    assert check.control_problems([copy_button()]) == []


def test_layout_problems_includes_controls_over_text():
    layout = {"scrollWidth": PHONE, "escapes": [], "blocks": [], "figures": [],
              "controls": [copy_button(box(330, 840, 372, 858, text="install"))]}
    assert len(check.layout_problems(layout, PHONE)) == 1


# --- a diagram's labels stay clear of its boxes ---------------------------------------------


def diagram(labels: list[dict], nodes: list[dict]) -> dict:
    return {**figure(498, 498), "labels": labels, "nodes": nodes}


def test_an_arrow_label_over_another_label_or_a_box_fails():
    no = box(266, 387, 286, 402, text="no")
    killed = box(153, 400, 292, 446, text="holder killed: the kernel lets go")
    problems = check.diagram_label_problems([diagram([no, killed], [])])
    assert len(problems) == 1 and '"no"' in problems[0] and "holder killed" in problems[0]
    on_node = check.diagram_label_problems([diagram([no], [box(250, 380, 330, 410,
                                                                 text="granted?")])])
    assert len(on_node) == 1 and "granted?" in on_node[0]


def test_labels_apart_from_each_other_and_from_the_boxes_pass():
    labels = [box(100, 400, 120, 414, text="yes"), box(250, 400, 270, 414, text="no")]
    nodes = [box(60, 300, 180, 340, text="granted?")]
    assert check.diagram_label_problems([diagram(labels, nodes)]) == []
    assert check.diagram_label_problems([figure(976, 733)]) == [], "an image has no labels"


# --- the page and what reaches past the screen -----------------------------------------------


def test_a_page_wider_than_the_screen_scrolls_sideways():
    assert check.page_width_problems(481, PHONE) != []
    assert check.page_width_problems(PHONE, PHONE) == []
    assert check.page_width_problems(PHONE + 0.5, PHONE) == []


def test_an_element_past_either_edge_outside_a_scroll_container_is_reported():
    escapes = [{"what": "<th>", "left": 0, "right": 481},
               {"what": "<div>", "left": -40, "right": 300},
               {"what": "<p>", "left": 16, "right": PHONE + 0.5}]
    problems = check.escape_problems(escapes, PHONE)
    assert len(problems) == 2
    assert "<th>" in problems[0] and "481" in problems[0] and "<div>" in problems[1]


# --- figures ----------------------------------------------------------------------------------


def test_drawn_text_size_is_the_font_times_the_figure_scale():
    assert check.rendered_text_px(figure(976, 358)) == pytest.approx(16 * 358 / 976)
    assert check.rendered_text_px(figure(0, 358, font=14)) == 14


def test_a_wide_diagram_squeezed_into_a_phone_column_is_unreadable():
    problems = check.figure_problems([figure(976, 358)])
    assert len(problems) == 1 and "5.9 px" in problems[0] and "scroll" in problems[0]


def test_a_diagram_kept_at_three_quarters_or_more_is_readable():
    assert check.figure_problems([figure(976, 733), figure(400, 358), figure(300, 300)]) == []


def test_small_fonts_need_less_shrinking_to_become_unreadable():
    assert check.figure_problems([figure(800, 688, font=11)]) != []
    assert check.figure_problems([figure(800, 800, font=11)]) == []


def test_layout_problems_gathers_every_kind():
    layout = {"scrollWidth": 481, "escapes": [{"what": "<th>", "left": 0, "right": 481}],
              "blocks": [block(481, 358), block(481, 358, "auto", fades=False)],
              "figures": [figure(976, 358)],
              "controls": [copy_button(box(330, 840, 372, 858, text="install"))]}
    problems = check.layout_problems(layout, PHONE)
    assert len(problems) == 6
    clean = {"scrollWidth": PHONE, "escapes": [], "blocks": [block(900, 358, "auto")],
             "figures": [figure(976, 733)]}
    assert check.layout_problems(clean, PHONE) == []


# --- lesson pages, includes, the site's pages ---------------------------------------------------


def test_a_lesson_page_needs_a_diagram_folded_hints_folded_solutions_and_code():
    good = {"tips": 3, "openTips": 0, "solutions": 1, "openSolutions": 0, "code": 4}
    assert check.lesson_problems(good, 1) == []
    assert check.lesson_problems({**good, "solutions": 2}, 1) == [], (
        "the diff of what a student writes is labelled as the solution too")
    assert len(check.lesson_problems({**good, "solutions": 0}, 1)) == 1
    assert len(check.lesson_problems({**good, "openSolutions": 1}, 1)) == 1
    assert len(check.lesson_problems(good, 0)) == 1
    assert len(check.lesson_problems({**good, "openTips": 1}, 1)) == 1
    assert len(check.lesson_problems({**good, "tips": 0}, 1)) == 1
    assert len(check.lesson_problems({**good, "code": 1}, 1)) == 1


def test_an_unexpanded_include_is_found_except_on_the_page_that_explains_them():
    assert check.unexpanded_problems("see {{ include('x.py') }}") != []
    assert check.unexpanded_problems("How this site is built: {{ include('x.py') }}") == []
    assert check.unexpanded_problems("a dict {{'a': 1}} in text") == []


def test_the_diagrams_of_a_built_page_are_counted_from_its_html(tmp_path):
    page = tmp_path / "index.html"
    page.write_text('<pre class="mermaid"><code>a</code></pre><p>mermaid</p>'
                    '<pre class="mermaid"><code>b</code></pre>', encoding="utf-8")
    assert check.diagrams_in(page) == 2


def test_the_shadow_roots_of_diagrams_are_found_in_a_pierced_tree():
    root = {"nodeName": "#document", "children": [
        {"nodeName": "DIV", "attributes": ["class", "mermaid"],
         "shadowRoots": [{"backendNodeId": 7}]},
        {"nodeName": "DIV", "attributes": ["class", "other"],
         "shadowRoots": [{"backendNodeId": 8}]},
        {"nodeName": "ARTICLE", "children": [
            {"nodeName": "DIV", "attributes": ["id", "x", "class", "a mermaid"],
             "shadowRoots": [{"backendNodeId": 9}]}]}]}
    assert sorted(check.shadow_roots_of_diagrams(root)) == [7, 9]


def test_pages_are_every_index_html_but_the_themes_own(tmp_path):
    for folder in ("", "lessons/00_memory", "reference/cli", "assets/x", "search"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "index.html").write_text("<html></html>", encoding="utf-8")
    assert check.pages_of(tmp_path) == ["", "lessons/00_memory/", "reference/cli/"]


# --- when the check cannot run: one line, exit 2 ----------------------------------------


def test_a_folder_without_a_built_site_exits_2_in_one_line(tmp_path, capsys):
    assert check.main(["--site", str(tmp_path), "--artifacts", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no built site" in err and str(tmp_path) in err


def test_a_missing_chromium_exits_2_naming_it(tmp_path, capsys):
    (tmp_path / "index.html").write_text("<html></html>", encoding="utf-8")
    missing = str(tmp_path / "no-such-chromium")
    assert check.main(["--site", str(tmp_path), "--chromium", missing,
                       "--artifacts", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and missing in err and "install_chromium.sh" in err


def test_missing_playwright_exits_2_saying_how_to_install_it(tmp_path, capsys, monkeypatch):
    (tmp_path / "index.html").write_text("<html></html>", encoding="utf-8")
    monkeypatch.setitem(sys.modules, "playwright", None)
    monkeypatch.setitem(sys.modules, "playwright.sync_api", None)
    assert check.main(["--site", str(tmp_path), "--chromium", sys.executable,
                       "--artifacts", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and ".[browser]" in err


def test_a_missing_file_is_reported_once_not_again_as_a_failed_request():
    url = "http://127.0.0.1:1/assets/x.js"
    logged = [f"request failed: {url} (net::ERR_ABORTED)",
              f"console.error: Failed to load resource: status of 404 {url}",
              "request failed: http://127.0.0.1:1/other.js (net::ERR_CONNECTION_RESET)"]
    assert check.logged_problems(logged) == logged[1:]


def test_folded_figures_are_not_judged_until_they_are_on_screen():
    assert check.figure_problems([figure(976, 0)]) == []


def test_a_failed_build_is_told_in_one_line_with_its_first_warning():
    output = ("INFO    -  Cleaning site directory\n"
              "WARNING -  Doc file 'a.md' contains a link 'b.md', but the target is not found.\n"
              "WARNING -  Doc file 'c.md' contains a link 'd.md', but the target is not found.\n"
              "\nAborted with 2 warnings in strict mode!\n")
    line = check.build_failure(output)
    assert "\n" not in line and "'a.md'" in line and "1 more" in line
    assert check.build_failure("Error: mkdocs.yml is not valid\n").endswith("is not valid")
    crash = check.build_failure("Traceback (most recent call last):\n  x\nValueError: y\n")
    assert "\n" not in crash and crash.endswith("ValueError: y")


def test_an_unknown_page_exits_2_naming_it(tmp_path, capsys, monkeypatch):
    (tmp_path / "index.html").write_text("<html></html>", encoding="utf-8")
    monkeypatch.setitem(sys.modules, "playwright.sync_api", None)    # as on a machine without it
    assert check.main(["--site", str(tmp_path), "--chromium", sys.executable, "--page", "nope/",
                       "--artifacts", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "/nope/" in err


# --- the check itself, in Chromium, on a made-up page ----------------------------------------

MADE_UP_PAGE = """<!doctype html>
<html><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<style>
  body { margin: 0; font: 16px sans-serif; }
  article { padding: 0 16px; }
  div.mermaid { overflow-x: auto; }
  pre { position: relative; }
  pre > code { display: block; overflow: auto; white-space: pre; padding: 12px; }
  .md-code__nav { position: absolute; top: 4px; right: 4px; width: 32px; height: 32px; }
  .md-code__nav button { width: 32px; height: 32px; }
  /* the fixes, as the site's stylesheet makes them */
  .fixed div.mermaid, .fixed pre > code {
    mask-image: linear-gradient(to left, #0002, #000 3em); }
  .fixed pre > code { border-right: 40px solid #eee; }
</style></head>
<body class="%s"><article><h1>A made-up page</h1>
<div class="mermaid"><svg width="1500" height="60" viewBox="0 0 1500 60">
  <text x="10" y="30" font-size="16">a diagram wider than any screen</text></svg></div>
<pre><nav class="md-code__nav"><button title="Copy to clipboard">c</button></nav><code>%s</code></pre>
</article></body></html>
"""


def chromium_and_playwright() -> str:
    if importlib.util.find_spec("playwright") is None:
        pytest.skip("Playwright is not installed (pip install -e '.[browser]'): the check "
                    "cannot be run in a browser here")
    try:
        return check.find_chromium(None)
    except check.CheckError as error:
        pytest.skip(str(error))


@pytest.mark.parametrize("fixed", [False, True], ids=["as-broken", "as-fixed"])
def test_in_chromium_a_cut_diagram_and_a_button_over_code_fail_at_both_widths_and_palettes(
        tmp_path, capsys, fixed):
    """The measuring half of the check, in a real browser: a diagram cut at the edge with
    no sign that it scrolls, and a copy button over a line of code, fail at 390 and 1280 px,
    light and dark; the same page with the edge faded and the button given its own column
    passes."""
    chromium = chromium_and_playwright()
    line = "python3 -m venv .venv && .venv/bin/pip install -e '.[dev]' " * 6
    (tmp_path / "index.html").write_text(MADE_UP_PAGE % ("fixed" if fixed else "", line),
                                         encoding="utf-8")
    status = check.main(["--site", str(tmp_path), "--chromium", chromium, "--page", "",
                         "--artifacts", str(tmp_path / "shots")])
    out = capsys.readouterr().out
    runs = {f"{v} {s}" for v in ("desktop", "phone") for s in ("light", "dark")}
    if fixed:
        assert status == 0, f"the fixed page should pass:\n{out}"
        return
    assert status == 1, out
    reports = {match[0]: match[1] for match in re.findall(
        r"^FAIL (\w+ \w+) +/ .*\n((?:       - .*\n)+)", out, flags=re.M)}
    assert set(reports) == runs, f"every width and palette should fail:\n{out}"
    for where, problems in reports.items():
        assert "<div.mermaid>" in problems and "no sign that it scrolls" in problems, \
            f"{where}: the cut diagram was not reported:\n{problems}"
        assert "drawn over text" in problems and "Copy to clipboard" in problems, \
            f"{where}: the button over the code was not reported:\n{problems}"
