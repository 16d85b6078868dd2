#!/usr/bin/env python3
"""Open the built course site in headless Chromium and check it as a reader would see it.

    python scripts/browser_check.py                    # build the site, serve it, check it
    python scripts/browser_check.py --site site        # check an already built site
    python scripts/browser_check.py --viewport phone   # one width only
    python scripts/browser_check.py --scheme dark      # one palette only
    python scripts/browser_check.py --page lessons/03_fork/   # one page only

The site is served on loopback by Python's http.server (in a thread) and driven with
Playwright through the distribution's Chromium (never a browser Playwright downloads). Every
page is checked at two widths, a desktop (1280 px) and a phone (390 px), each in the light and
the dark palette:

- it loads (HTTP 200) and nothing is logged as an error (uncaught exceptions, failed
  requests, console.error); no include directive was left unexpanded;
- nothing is clipped or widens the page: the page does not scroll sideways, no element of
  the article reaches past the screen outside a horizontal scroll container, and a code
  block, table or diagram wider than its box scrolls (overflow-x auto or scroll);
- a box cut at its edge shows that it scrolls: its edge fades (a mask) or a scrollbar is
  drawn; headless Chromium, like a phone, draws none, so the fade is what a reader sees;
- no control is drawn over text: a copy button, or any other button, covers no word of
  the text around it where that text can be seen;
- figures stay readable: a Mermaid diagram or SVG image is never scaled down so far that its
  smallest text is under MIN_FIGURE_TEXT_PX (a wider figure has to scroll instead), and no
  label of a diagram's arrow lies over a box's text or another arrow's label;
- on every lesson page, additionally: each Mermaid diagram rendered to an SVG, hints and the
  reference solution are folded away.

Screenshots at both widths, in both palettes, go to site-artifacts/. Exits 0 when every check passes, 1 when one
fails (each failure is listed), 2 when the check itself cannot run (no Playwright, no
Chromium, the build failed). Install: pip install -e '.[browser]' and
scripts/install_chromium.sh.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Flags that work as root in a container: no sandbox (root), no GPU, nothing fetched from
# the network behind the check's back.
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars", "--mute-audio",
]
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser")
PAGE_TIMEOUT = 30.0        # seconds for one page to load and its diagrams to render
# Subpixel layout makes a box that fits report a width one pixel over.
TOLERANCE_PX = 1.0
# The smallest text a figure may be scaled down to. Material's own smallest type is about
# 12.8 px; under 11 px a diagram's labels are no longer read, only guessed.
MIN_FIGURE_TEXT_PX = 11.0
# A scrollbar thinner than this is no sign that a box scrolls (an overlay one draws none).
MIN_SCROLLBAR_PX = 3.0
SCHEMES = ("light", "dark")
SCROLLING = ("auto", "scroll")
UNEXPANDED = re.compile(r"\{\{\s*[a-z_]+\(")


@dataclass(frozen=True)
class Viewport:
    name: str
    width: int
    height: int
    scale: float           # device pixels per CSS pixel
    mobile: bool


VIEWPORTS = {
    "desktop": Viewport("desktop", 1280, 900, 1, False),
    "phone": Viewport("phone", 390, 844, 2, True),
}

# (viewport, palette, screenshot file, page, element to scroll to first or None)
PLOT = "article img[src$='.svg']"
SCREENSHOTS = [
    ("desktop", "light", "home.png", "", None),
    ("desktop", "light", "getting-started.png", "getting-started/", None),
    ("desktop", "light", "lesson-03_fork.png", "lessons/03_fork/", None),
    ("desktop", "light", "lesson-03_fork-diagram.png", "lessons/03_fork/", "div.mermaid"),
    ("desktop", "light", "lesson-05_lock-diagram.png", "lessons/05_lock/", "div.mermaid"),
    ("desktop", "light", "benchmarks-plot.png", "benchmarks/", PLOT),
    ("desktop", "dark", "dark-benchmarks-plot.png", "benchmarks/", PLOT),
    ("phone", "light", "phone-home.png", "", None),
    ("phone", "light", "phone-home-code.png", "", "article .highlight"),
    ("phone", "light", "phone-lesson-00_memory-diagram.png", "lessons/00_memory/", "div.mermaid"),
    ("phone", "light", "phone-lesson-03_fork.png", "lessons/03_fork/", None),
    ("phone", "light", "phone-lesson-03_fork-diagram.png", "lessons/03_fork/", "div.mermaid"),
    ("phone", "light", "phone-lesson-03_fork-code.png", "lessons/03_fork/", "article .highlight"),
    ("phone", "dark", "phone-dark-lesson-11_postgres-diagram.png", "lessons/11_postgres/",
     "div.mermaid"),
    ("phone", "light", "phone-benchmarks-table.png", "benchmarks/", "article table"),
    ("phone", "light", "phone-benchmarks-plot.png", "benchmarks/", PLOT),
    ("phone", "dark", "phone-dark-benchmarks-plot.png", "benchmarks/", PLOT),
]


class CheckError(Exception):
    """The check itself cannot run (as opposed to a page that fails a check)."""


# --- deciding from measured numbers (no browser needed) -------------------------------------


def scrolls(overflow_x: str) -> bool:
    return overflow_x in SCROLLING


def overflows(box: dict[str, Any]) -> bool:
    """Is the box's content wider than the box itself?"""
    return box["scrollWidth"] > box["clientWidth"] + TOLERANCE_PX


def block_problems(blocks: list[dict[str, Any]]) -> list[str]:
    """A code block, table or diagram wider than its box must scroll; any other box whose
    overflow is hidden must not hide content sideways (it would be cut off unseen)."""
    found = []
    for box in blocks:
        if not overflows(box) or scrolls(box["overflowX"]):
            continue
        if box["mustScroll"] or box["overflowX"] in ("hidden", "clip"):
            found.append(f"{box['what']} is clipped: {box['scrollWidth']:.0f} px of content in "
                         f"{box['clientWidth']:.0f} px with overflow-x {box['overflowX']} "
                         "(it should scroll)")
    return found


def sign_problems(blocks: list[dict[str, Any]]) -> list[str]:
    """A box that scrolls and is cut at its edge must show it: a fade at the edge where more
    is hidden, or a scrollbar that is drawn. Without either, a diagram or a line of code
    looks cut off, and a reader on a phone does not know to swipe."""
    found = []
    for box in blocks:
        if not overflows(box) or not scrolls(box["overflowX"]):
            continue
        if box.get("fades") or box.get("scrollbarPx", 0) >= MIN_SCROLLBAR_PX:
            continue
        found.append(f"{box['what']} is cut at its edge with no sign that it scrolls: "
                     f"{box['scrollWidth']:.0f} px of content in {box['clientWidth']:.0f} px, "
                     "no fade at the edge and no scrollbar drawn")
    return found


def overlap(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Do two boxes (left, top, right, bottom) share more than a pixel each way?"""
    return (min(a["right"], b["right"]) - max(a["left"], b["left"]) > TOLERANCE_PX
            and min(a["bottom"], b["bottom"]) - max(a["top"], b["top"]) > TOLERANCE_PX)


def control_problems(controls: list[dict[str, Any]]) -> list[str]:
    """A button drawn over words that can be seen hides them ("insta[copy]ll")."""
    found = []
    for control in controls:
        covered = [word["text"] for word in control["words"] if overlap(control, word)]
        if covered:
            found.append(f"{control['what']} is drawn over text: "
                         + ", ".join(f'"{word}"' for word in covered[:3]))
    return found


def diagram_label_problems(diagrams: list[dict[str, Any]]) -> list[str]:
    """An arrow's label must not lie over a box's text or over another arrow's label: Mermaid
    places labels at the middle of their arrows, and where arrows cross, labels collide."""
    found = []
    for diagram in diagrams:
        labels, nodes = diagram.get("labels", []), diagram.get("nodes", [])
        for index, label in enumerate(labels):
            hit = next((node for node in nodes if overlap(label, node)), None) or \
                next((other for other in labels[index + 1:] if overlap(label, other)), None)
            if hit is not None:
                found.append(f"{diagram['what']}: the label \"{label['text']}\" lies over "
                             f"\"{hit['text']}\"")
    return found


def page_width_problems(scroll_width: float, viewport_width: int) -> list[str]:
    if scroll_width > viewport_width + TOLERANCE_PX:
        return [f"the page scrolls sideways: {scroll_width:.0f} px wide on a "
                f"{viewport_width} px screen"]
    return []


def escape_problems(escapes: list[dict[str, Any]], viewport_width: int) -> list[str]:
    """Elements that reach past the screen's edge and sit in no horizontal scroll container:
    what is past the edge cannot be seen (the theme hides the page's own overflow)."""
    return [f"{e['what']} reaches past the screen ({e['left']:.0f} to {e['right']:.0f} px "
            f"on a {viewport_width} px screen) outside any scroll container"
            for e in escapes
            if e["right"] > viewport_width + TOLERANCE_PX or e["left"] < -TOLERANCE_PX]


def rendered_text_px(figure: dict[str, Any]) -> float:
    """The smallest text of a figure as drawn: its font size times its scale on the page."""
    if figure["naturalWidth"] <= 0:
        return figure["fontPx"]
    return figure["fontPx"] * figure["renderedWidth"] / figure["naturalWidth"]


def figure_problems(figures: list[dict[str, Any]]) -> list[str]:
    found = []
    for figure in figures:
        if figure["renderedWidth"] <= 0:
            continue       # not on screen (in a folded hint): nothing to read yet
        drawn = rendered_text_px(figure)
        if drawn < MIN_FIGURE_TEXT_PX:
            found.append(f"{figure['what']} is shrunk unreadably: drawn "
                         f"{figure['renderedWidth']:.0f} px wide of its "
                         f"{figure['naturalWidth']:.0f} px, so its smallest text is "
                         f"{drawn:.1f} px (at least {MIN_FIGURE_TEXT_PX:g} px; a wider "
                         "figure should scroll)")
    return found


def layout_problems(layout: dict[str, Any], viewport_width: int) -> list[str]:
    """Every overflow problem of one page at one width, from what the browser measured."""
    return (page_width_problems(layout["scrollWidth"], viewport_width)
            + escape_problems(layout["escapes"], viewport_width)
            + block_problems(layout["blocks"])
            + sign_problems(layout["blocks"])
            + control_problems(layout.get("controls", []))
            + figure_problems(layout["figures"])
            + diagram_label_problems(layout["figures"]))


def lesson_problems(facts: dict[str, Any], expected_diagrams: int) -> list[str]:
    found = []
    if expected_diagrams == 0:
        found.append("no Mermaid diagram on a lesson page")
    if facts["tips"] == 0 or facts["openTips"]:
        found.append(f"hints should be folded away: {facts['tips']} hint blocks, "
                     f"{facts['openTips']} open")
    # The reference solution, and the diff of what a student writes (labelled as the
    # solution too), each stay folded until the reader opens them.
    if facts["solutions"] == 0 or facts.get("openSolutions", 0):
        found.append("the reference solution should be folded away: "
                     f"{facts['solutions']} solution blocks, "
                     f"{facts.get('openSolutions', 0)} open")
    if facts["code"] < 2:
        found.append(f"expected starter and solution code, found {facts['code']} code blocks")
    return found


def logged_problems(logged: list[str]) -> list[str]:
    """What the page logged, each failed request said once: a 404 is logged by the console
    with its status and reported again, less clearly, as a failed request."""
    said = [line for line in logged if not line.startswith("request failed: ")]
    return [line for line in logged
            if not line.startswith("request failed: ")
            or not any(line.split()[2] in other for other in said)]


def unexpanded_problems(text: str) -> list[str]:
    # The page that explains the include syntax shows it on purpose.
    if UNEXPANDED.search(text) and "How this site is built" not in text:
        return ["an include directive was left unexpanded in the page"]
    return []


# --- measuring in the page -------------------------------------------------------------------

# Run in the page: the boxes that may overflow, the elements that reach past the screen, and
# the SVG images with their smallest font (read from the image's own source).
MEASURE_JS = r"""
async (viewportWidth) => {
  const article = document.querySelector('article') || document.body;
  const describe = el => {
    const cls = [...el.classList].slice(0, 2).map(c => '.' + c).join('');
    const text = (el.textContent || el.getAttribute('src') || '').trim()
      .replace(/\s+/g, ' ').slice(0, 40);
    return `<${el.tagName.toLowerCase()}${cls}>` + (text ? ` "${text}"` : '');
  };
  const overflowX = el => getComputedStyle(el).overflowX;
  const inScroller = el => {
    for (let p = el.parentElement; p; p = p.parentElement) {
      if (['auto', 'scroll'].includes(overflowX(p))) return true;
      if (p === article) return false;
    }
    return false;
  };
  const mustScroll = 'pre, pre > code, table, div.mermaid, .md-typeset__scrollwrap';
  const blocks = [];
  for (const el of article.querySelectorAll('*')) {
    const style = getComputedStyle(el);
    if (style.display === 'inline' || style.display === 'none') continue;
    const strict = el.matches(mustScroll);
    if (!strict && style.overflowX === 'visible') continue;
    const mask = style.maskImage || style.webkitMaskImage || 'none';
    blocks.push({what: describe(el), scrollWidth: el.scrollWidth,
                 clientWidth: el.clientWidth, overflowX: style.overflowX,
                 mustScroll: strict, fades: mask !== 'none',
                 scrollbarPx: el.offsetHeight - el.clientHeight
                   - parseFloat(style.borderTopWidth) - parseFloat(style.borderBottomWidth)});
  }
  // Controls and the words around them that can be seen (clipped to the box that scrolls
  // them): whether one covers another is decided in Python.
  const box = r => ({left: r.left, top: r.top, right: r.right, bottom: r.bottom});
  const seenIn = node => {
    for (let p = node.parentElement; p && p !== document.body; p = p.parentElement) {
      if (overflowX(p) !== 'visible') {
        const r = p.getBoundingClientRect();
        const left = r.left + p.clientLeft, top = r.top + p.clientTop;
        return {left, top, right: left + p.clientWidth, bottom: top + p.clientHeight};
      }
    }
    return {left: -1e9, top: -1e9, right: 1e9, bottom: 1e9};
  };
  const controls = [];
  for (const el of article.querySelectorAll('.md-code__nav, button, [role="button"]')) {
    const nav = el.closest('.md-code__nav');
    if (nav && nav !== el) continue;          // a button in a nav: the nav is the control
    const r = el.getBoundingClientRect();
    if (!r.width || !r.height || getComputedStyle(el).visibility === 'hidden') continue;
    const around = el.closest('pre, .highlight, details, table, figure') || el.parentElement;
    const words = [];
    const walker = document.createTreeWalker(around, NodeFilter.SHOW_TEXT);
    const range = document.createRange();
    for (let node = walker.nextNode(); node && words.length < 5; node = walker.nextNode()) {
      if (el.contains(node) || !node.textContent.trim()) continue;
      range.selectNodeContents(node);
      const whole = range.getBoundingClientRect();
      if (whole.bottom < r.top || whole.top > r.bottom) continue;
      const clip = seenIn(node);
      for (const match of node.textContent.matchAll(/\S+/g)) {
        range.setStart(node, match.index);
        range.setEnd(node, match.index + match[0].length);
        for (const w of range.getClientRects()) {
          const seen = {left: Math.max(w.left, clip.left), right: Math.min(w.right, clip.right),
                        top: Math.max(w.top, clip.top), bottom: Math.min(w.bottom, clip.bottom)};
          if (seen.left < seen.right && seen.top < seen.bottom && seen.left < r.right
              && seen.right > r.left && seen.top < r.bottom && seen.bottom > r.top) {
            words.push({text: match[0], ...seen});
          }
        }
      }
    }
    const named = el.title ? el : el.querySelector('[title]');
    controls.push({what: describe(el) + (named ? ` (${named.title})` : ''), ...box(r), words});
  }
  const escapes = [];
  const reported = new Set();
  for (const el of article.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;
    if (r.right <= viewportWidth + 1 && r.left >= -1) continue;
    if (getComputedStyle(el).visibility === 'hidden' || inScroller(el)) continue;
    let p = el.parentElement, under = false;
    for (; p && p !== article; p = p.parentElement) if (reported.has(p)) { under = true; break; }
    if (under) continue;
    reported.add(el);
    if (escapes.length < 5) escapes.push({what: describe(el), left: r.left, right: r.right});
  }
  const figures = [];
  for (const img of article.querySelectorAll('img')) {
    const src = img.currentSrc || img.src;
    if (!/\.svg(\?|#|$)/.test(src) || !img.naturalWidth) continue;
    let svg;
    try {       // an image that does not load is reported by the console already
      const response = await fetch(src);
      if (!response.ok) continue;
      svg = new DOMParser().parseFromString(await response.text(), 'image/svg+xml')
        .documentElement;
    } catch (error) { continue; }
    const size = el => {
      for (let e = el; e && e.getAttribute; e = e.parentElement) {
        const v = parseFloat(e.getAttribute('font-size'));
        if (!isNaN(v)) return v;
      }
      return 16;
    };
    const texts = [...svg.querySelectorAll('text')].filter(t => t.textContent.trim());
    const vb = svg.viewBox && svg.viewBox.baseVal;
    figures.push({what: `the image ${src.split('/').pop()}`,
                  naturalWidth: (vb && vb.width) || img.naturalWidth,
                  renderedWidth: img.getBoundingClientRect().width,
                  fontPx: texts.length ? Math.min(...texts.map(size)) : 16});
  }
  return {scrollWidth: document.documentElement.scrollWidth, blocks, escapes, figures,
          controls};
}
"""

# Run on a diagram's (closed) shadow root, reached through the DevTools protocol.
DIAGRAM_JS = r"""
function () {
  const svg = this.querySelector('svg');
  if (!svg) return null;
  const r = svg.getBoundingClientRect();
  const vb = svg.viewBox && svg.viewBox.baseVal;
  let font = Infinity;
  for (const el of this.querySelectorAll('svg *')) {
    const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (own) font = Math.min(font, parseFloat(getComputedStyle(el).fontSize));
  }
  // The text of each arrow's label and of each box, where it is drawn on the page.
  const textBox = el => {
    const inner = el.querySelector('p, span, text') || el;
    const b = inner.getBoundingClientRect();
    return {text: el.textContent.trim(), left: b.left, top: b.top, right: b.right,
            bottom: b.bottom};
  };
  const labels = [...this.querySelectorAll('g.edgeLabel')]
    .filter(el => el.textContent.trim()).map(textBox);
  const nodes = [...this.querySelectorAll('g.node')]
    .filter(el => el.textContent.trim()).map(el => textBox(el.querySelector('.label') || el));
  return {naturalWidth: (vb && vb.width) || r.width, renderedWidth: r.width,
          fontPx: font === Infinity ? 16 : font, labels, nodes};
}
"""

UNFOLD_JS = """(open) => {
    const folded = open ? 'article details:not([open])' : 'article details[data-check-opened]';
    for (const details of document.querySelectorAll(folded)) {
        details.open = open;
        if (open) details.dataset.checkOpened = ''; else delete details.dataset.checkOpened;
    }
}"""

FACTS_JS = """() => ({
    h1: (document.querySelector('article h1') || {}).textContent || '',
    text: document.querySelector('article') ? document.querySelector('article').innerText : '',
    tips: document.querySelectorAll('article details.tip').length,
    openTips: document.querySelectorAll('article details.tip[open]').length,
    solutions: document.querySelectorAll('article details.success').length,
    openSolutions: document.querySelectorAll('article details.success[open]').length,
    code: document.querySelectorAll('article .highlight').length
})"""


def shadow_roots_of_diagrams(node: dict[str, Any]) -> list[int]:
    """Backend ids of the shadow roots of div.mermaid elements, in a pierced DOM tree."""
    found = []
    stack = [node]
    while stack:
        current = stack.pop()
        attributes = current.get("attributes") or []
        classes = dict(zip(attributes[::2], attributes[1::2])).get("class", "").split()
        if current.get("nodeName") == "DIV" and "mermaid" in classes:
            found.extend(root["backendNodeId"] for root in current.get("shadowRoots") or [])
        stack.extend(current.get("children") or [])
        stack.extend(current.get("shadowRoots") or [])
    return found


def measure_diagrams(cdp: Any) -> list[dict[str, Any]]:
    """Measure every rendered diagram. Material draws them in closed shadow roots, which the
    page's own scripts (and Playwright's selectors) cannot enter; DevTools can. Only the
    diagrams are described, not the whole pierced document (slow on a long page)."""
    document = cdp.send("DOM.getDocument", {"depth": 0})["root"]["nodeId"]
    hosts = cdp.send("DOM.querySelectorAll",
                     {"nodeId": document, "selector": "div.mermaid"})["nodeIds"]
    diagrams = []
    for number, host in enumerate(hosts, 1):
        node = cdp.send("DOM.describeNode", {"nodeId": host, "depth": 1, "pierce": True})["node"]
        for backend_id in shadow_roots_of_diagrams(node):
            handle = cdp.send("DOM.resolveNode", {"backendNodeId": backend_id})["object"]
            result = cdp.send("Runtime.callFunctionOn", {
                "objectId": handle["objectId"], "functionDeclaration": DIAGRAM_JS,
                "returnByValue": True})
            if value := result.get("result", {}).get("value"):
                diagrams.append({"what": f"Mermaid diagram {number}", **value})
    return diagrams


# --- one page at one width ---------------------------------------------------------------------


class PageCheck:
    """A browser tab at one width, with what it logs collected as problems."""

    def __init__(self, context: Any) -> None:
        self.page = context.new_page()
        self.page.set_default_timeout(PAGE_TIMEOUT * 1000)
        self.cdp = context.new_cdp_session(self.page)
        self.logged: list[str] = []
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda error: self._log(f"uncaught exception: {error}"))
        self.page.on("requestfailed", self._request_failed)

    def _log(self, text: str) -> None:
        # One line a problem: a parser's message spans lines (the text, a caret under it).
        self.logged.append(" / ".join(line.strip() for line in text.splitlines() if line.strip()))

    def _console(self, message: Any) -> None:
        if message.type in ("error", "assert"):
            where = message.location.get("url", "")
            self._log(f"console.{message.type}: {message.text} {where}".strip())

    def _request_failed(self, request: Any) -> None:
        self._log(f"request failed: {request.url} ({request.failure})")

    def load(self, url: str) -> list[str]:
        self.logged.clear()
        response = self.page.goto(url, wait_until="load")
        status = response.status if response is not None else None
        return [] if status == 200 else [f"HTTP {status} for {url}"]

    def wait_for_diagrams(self, expected: int) -> tuple[int, list[str]]:
        """Material swaps each <pre class="mermaid"> for a <div class="mermaid"> once the
        diagram is drawn; wait for all of them, or for an error that stops the drawing."""
        deadline = time.monotonic() + PAGE_TIMEOUT
        while True:
            drawn = self.page.evaluate("document.querySelectorAll('div.mermaid').length")
            if drawn >= expected:
                return drawn, []
            if any(line.startswith("uncaught") for line in self.logged):
                return drawn, [f"Mermaid: {drawn} of {expected} diagrams rendered to SVG "
                               "(the page threw an exception)"]
            if time.monotonic() > deadline:
                return drawn, [f"Mermaid: {drawn} of {expected} diagrams rendered to SVG "
                               f"within {PAGE_TIMEOUT:.0f} s"]
            self.page.wait_for_timeout(100)

    def settle(self) -> None:
        """Let the page's own scripts finish what a change set off (the scroll signs are set
        on the next animation frame after a diagram is drawn or a block unfolds)."""
        self.page.evaluate("() => new Promise(done => requestAnimationFrame("
                           "() => requestAnimationFrame(done)))")

    def measure(self, viewport: Viewport) -> dict[str, Any]:
        self.settle()
        layout = self.page.evaluate(MEASURE_JS, viewport.width)
        layout["figures"].extend(measure_diagrams(self.cdp))
        return layout

    def measure_unfolded(self, viewport: Viewport) -> dict[str, Any]:
        """Measure again with every folded block (hints, the solution) open, as a reader who
        opens them sees it, then fold them back."""
        self.page.evaluate(UNFOLD_JS, True)
        try:
            self.page.wait_for_timeout(100)
            return self.measure(viewport)
        finally:
            self.page.evaluate(UNFOLD_JS, False)

    def close(self) -> None:
        try:
            self.page.close(run_before_unload=False)
        except Exception:       # noqa: BLE001 - a tab that is already gone is closed enough
            pass

    def screenshot(self, target: Path, scroll_to: str | None) -> None:
        if scroll_to:
            self.page.evaluate("(sel) => (document.querySelector(sel) || document.body)"
                               ".scrollIntoView({block: 'center'})", scroll_to)
        else:
            self.page.evaluate("window.scrollTo(0, 0)")
        self.page.wait_for_timeout(300)    # let the header settle after the scroll
        self.page.screenshot(path=str(target))


def diagrams_in(html_file: Path) -> int:
    """How many Mermaid diagrams the built page holds, before any script ran."""
    return html_file.read_text(encoding="utf-8").count('<pre class="mermaid">')


def check_page(tab: PageCheck, viewport: Viewport, url: str, html_file: Path,
               is_lesson: bool) -> tuple[list[str], dict[str, str]]:
    problems = tab.load(url)
    expected = diagrams_in(html_file)
    drawn, waiting = tab.wait_for_diagrams(expected)
    problems += waiting
    layout = tab.measure(viewport)
    rendered = sum(1 for f in layout["figures"] if f["what"].startswith("Mermaid"))
    if not waiting and rendered < expected:
        problems.append(f"Mermaid: {rendered} of {expected} diagrams rendered to SVG")
    facts = tab.page.evaluate(FACTS_JS)
    unfolded = tab.measure_unfolded(viewport)
    tab.page.wait_for_timeout(200)     # late console messages
    problems += layout_problems(layout, viewport.width)
    problems += [problem + " (with the folded blocks open)"
                 for problem in layout_problems(unfolded, viewport.width)
                 if problem not in problems]
    problems += unexpanded_problems(facts["text"])
    if is_lesson:
        problems += lesson_problems(facts, expected)
    problems += logged_problems(tab.logged)
    return problems, {"diagrams": f"{rendered}/{expected}", "h1": facts["h1"].strip().rstrip("¶")}


# --- serving, building, launching ---------------------------------------------------------------


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass


def serve(folder: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def find_chromium(explicit: str | None) -> str:
    for candidate in [explicit] if explicit else CHROMIUM_CANDIDATES:
        if candidate and (path := shutil.which(candidate)):
            return path
    wanted = explicit or "chromium"
    raise CheckError(f"no Chromium found ({wanted}): run scripts/install_chromium.sh "
                     "(Debian's chromium package)")


def build_site(into: Path) -> None:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(into)],
        cwd=ROOT, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise CheckError(build_failure(result.stdout + result.stderr))


def build_failure(output: str) -> str:
    """One line for a failed build: its first warning or error, and how many more."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"(ERROR|WARNING)\b", line)]
    if not errors:
        return f"mkdocs build --strict failed: {lines[-1] if lines else 'no output'}"
    more = (f" (and {len(errors) - 1} more: run mkdocs build --strict to see them)"
            if len(errors) > 1 else "")
    return f"mkdocs build --strict failed: {errors[0]}{more}"


def pages_of(site: Path) -> list[str]:
    pages = sorted(str(p.relative_to(site).parent).replace(os.sep, "/")
                   for p in site.rglob("index.html")
                   if p.relative_to(site).parts[0] not in ("assets", "search"))
    return ["" if page == "." else page + "/" for page in pages]


def first_line(error: BaseException) -> str:
    """Playwright's errors carry a call log after the first line; the first line says it."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


# --- main --------------------------------------------------------------------------------


def check_viewport(browser: Any, viewport: Viewport, site: Path, base: str, pages: list[str],
                   lessons: list[str], artifacts: Path, every_page: bool,
                   scheme: str = "light") -> dict[str, list[str]]:
    from playwright.sync_api import Error as PlaywrightError

    # The site follows the reader's palette (prefers-color-scheme), as a browser set to
    # light or dark would ask for it.
    context = browser.new_context(
        viewport={"width": viewport.width, "height": viewport.height},
        device_scale_factor=viewport.scale, is_mobile=viewport.mobile,
        has_touch=viewport.mobile, color_scheme=scheme)
    where = f"{viewport.name} {scheme}"
    failures: dict[str, list[str]] = {}
    try:
        tab = PageCheck(context)
        for page in pages:
            try:
                problems, facts = check_page(tab, viewport, base + page,
                                             site / page / "index.html", page in lessons)
                shots = [(name, scroll_to) for v, palette, name, p, scroll_to in SCREENSHOTS
                         if v == viewport.name and palette == scheme and p == page]
                for name, scroll_to in shots:
                    tab.screenshot(artifacts / name, scroll_to)
            except PlaywrightError as error:
                if not browser.is_connected():
                    raise
                # One page that hangs or breaks the tab fails alone; the next gets a new tab.
                problems = [f"the page could not be checked: {first_line(error)}"]
                facts, shots = {"diagrams": "?", "h1": ""}, []
                tab.close()
                tab = PageCheck(context)
            report(where, page, problems, facts, [artifacts / name for name, _ in shots])
            if problems:
                failures[f"{where} /{page}"] = problems
        missing = [n for v, palette, n, p, _ in SCREENSHOTS
                   if every_page and v == viewport.name and palette == scheme and p not in pages]
        for name in missing:
            failures[f"{where} {name}"] = [f"the page for screenshot {name} is missing"]
            print(f"FAIL {where:<13} the page for screenshot {name} is missing")
    finally:
        context.close()
    return failures


def report(where: str, page: str, problems: list[str], facts: dict[str, str],
           screenshots: list[Path]) -> None:
    mark = "FAIL" if problems else "ok  "
    print(f"{mark} {where:<13} /{page:<30} diagrams {facts['diagrams']:<5} "
          f"{facts['h1'][:38]}")
    for problem in problems:
        print(f"       - {problem}")
    for shot in screenshots:
        print(f"       screenshot: {shot}")


def chosen_pages(site: Path, wanted: list[str] | None) -> list[str]:
    """Every page of the site, or the ones asked for (each must exist)."""
    pages = pages_of(site)
    if not wanted:
        return pages
    chosen = [page.strip("/") + "/" if page.strip("/") else "" for page in wanted]
    missing = [page for page in chosen if page not in pages]
    if missing:
        raise CheckError(f"no such page in {site}: {', '.join('/' + p for p in missing)}")
    return chosen


def run(site: Path, binary: str, viewports: list[Viewport], artifacts: Path,
        wanted: list[str] | None = None, schemes: tuple[str, ...] = SCHEMES) -> int:
    started = time.monotonic()
    pages = chosen_pages(site, wanted)
    try:
        from playwright.sync_api import Error as PlaywrightError
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise CheckError("Playwright is not installed: pip install -e '.[browser]'") from None
    lessons = [p for p in pages if re.fullmatch(r"lessons/\d\d_[a-z0-9_]+/", p)]
    failures: dict[str, list[str]] = {}
    if not lessons and not wanted:
        failures["(site)"] = ["no lesson pages found under lessons/"]
    artifacts.mkdir(parents=True, exist_ok=True)
    server, base = serve(site)
    try:
        with sync_playwright() as playwright:
            try:
                browser = playwright.chromium.launch(
                    executable_path=binary, headless=True, args=CHROMIUM_FLAGS)
            except PlaywrightError as error:
                raise CheckError(f"Chromium ({binary}) did not start: {first_line(error)}") \
                    from None
            try:
                for viewport in viewports:
                    for scheme in schemes:
                        failures.update(check_viewport(browser, viewport, site, base, pages,
                                                       lessons, artifacts, not wanted, scheme))
            except PlaywrightError as error:
                raise CheckError(f"the browser failed: {first_line(error)}") from None
            finally:
                browser.close()
    finally:
        server.shutdown()
    checked = len(pages) * len(viewports) * len(schemes)
    print(f"{len(pages)} page{'s' * (len(pages) != 1)} ({len(lessons)} of them lessons) at "
          f"{', '.join(f'{v.name} {v.width} px' for v in viewports)}, "
          f"{' and '.join(schemes)} in {time.monotonic() - started:.1f} s")
    # The closing line, in the form CI logs are read for.
    print(f"browser: {checked - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", type=Path, help="a built site to check (default: build one now)")
    parser.add_argument("--artifacts", type=Path, default=ROOT / "site-artifacts",
                        help="where screenshots go (default: site-artifacts/)")
    parser.add_argument("--chromium", help="the Chromium binary (default: /usr/bin/chromium, "
                                           "else chromium on the PATH)")
    parser.add_argument("--viewport", choices=sorted(VIEWPORTS), action="append",
                        help="check at this width only (repeatable; default: all)")
    parser.add_argument("--scheme", choices=SCHEMES, action="append",
                        help="check in this palette only (repeatable; default: light and dark)")
    parser.add_argument("--page", action="append", metavar="PATH",
                        help="check this page only, as in lessons/03_fork/ (repeatable; "
                             "default: every page)")
    args = parser.parse_args(argv)

    viewports = [VIEWPORTS[name] for name in args.viewport or VIEWPORTS]
    with tempfile.TemporaryDirectory(prefix="sessionlab-site-", ignore_cleanup_errors=True) as temp:
        try:
            site = args.site.resolve() if args.site else Path(temp) / "site"
            if not args.site:
                build_site(site)
            if not (site / "index.html").is_file():
                raise CheckError(f"{site} holds no built site (no index.html)")
            return run(site, find_chromium(args.chromium), viewports, args.artifacts,
                       args.page, tuple(args.scheme or SCHEMES))
        except (CheckError, OSError) as error:
            print(f"browser check: {error}", file=sys.stderr)
            return 2


if __name__ == "__main__":
    sys.exit(main())
