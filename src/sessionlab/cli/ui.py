"""Output for the command line: rich in a terminal, plain readable text in a pipe or CI.

Every command prints through `out` (stdout) and `err` (stderr). When stdout is not a
terminal, rich drops colours and cursor tricks by itself; on top of that `plain` switches the
glyphs (check marks, block bars) to words and ASCII so logs and `grep` stay readable.
NO_COLOR is honoured; FORCE_COLOR forces a terminal.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text


# Plain tables: columns and a dashed line under the header, nothing else (reads well in a log).
PLAIN_BOX = box.Box(
    "    \n"
    "    \n"
    " -  \n"
    "    \n"
    "    \n"
    "    \n"
    "    \n"
    "    \n",
    ascii=True,
)


@dataclass
class Ui:
    out: Console
    err: Console

    @property
    def plain(self) -> bool:
        return not self.out.is_terminal

    @property
    def box(self) -> box.Box:
        return PLAIN_BOX if self.plain else box.ROUNDED

    def table(self, **options) -> Table:
        """A table in the house style: rounded in a terminal, bare columns in plain text."""
        options.setdefault("box", self.box)
        options.setdefault("show_edge", not self.plain)
        options.setdefault("pad_edge", not self.plain)
        return Table(**options)

    def error(self, message: str, hint: str | None = None) -> None:
        """One line saying what went wrong, and one saying what to do about it."""
        text = Text("error: ", style="bold red")
        text.append(message)
        self.err.print(text, soft_wrap=True)
        if hint:
            self.err.print(Text("  " + hint, style="yellow"), soft_wrap=True)

    def note(self, message: str) -> None:
        self.err.print(Text(message, style="dim"), soft_wrap=True)

    def mark(self, state: str) -> Text:
        """A lesson or task state as a short coloured mark (words when plain)."""
        glyphs = {
            "done": ("✓ done", "done", "green"),
            "passed": ("✓", "ok", "green"),
            "in progress": ("◐ in progress", "in progress", "yellow"),
            "failing": ("✗", "FAIL", "red"),
            "todo": ("·", "todo", "dim"),
            "not started": ("○ not started", "not started", "dim"),
            "error": ("! error", "ERROR", "bold red"),
            "untested": ("?", "untested", "dim"),
            "info": ("·", "-", "dim"),
            "warn": ("!", "warn", "yellow"),
        }
        fancy, word, style = glyphs.get(state, (state, state, ""))
        return Text(word if self.plain else fancy, style=style)


def make_ui(stdout=None, stderr=None) -> Ui:
    """Consoles on the current sys.stdout / sys.stderr (so tests capturing them see the text)."""
    width = None
    if not (stdout or sys.stdout).isatty() and not os.environ.get("COLUMNS"):
        width = 100   # pipes and CI logs: wide enough for the tables, no terminal to ask
    # In plain text a line is never broken in two (grep and logs want whole lines);
    # tables still fit the width.
    plain = width is not None
    out = Console(file=stdout or sys.stdout, highlight=False, width=width, soft_wrap=plain)
    err = Console(file=stderr or sys.stderr, highlight=False, width=width, soft_wrap=plain)
    return Ui(out=out, err=err)


def bar(states: list[str], ui: Ui, width: int = 40) -> Text:
    """A progress bar over lessons, one segment a lesson, coloured by its state."""
    if not states:
        return Text("")
    per = max(1, width // len(states))
    text = Text("[" if ui.plain else "")
    for state in states:
        if ui.plain:
            glyph = {"done": "#", "in progress": "+"}.get(state, ".")
            text.append(glyph * per)
        else:
            style = {"done": "green", "in progress": "yellow", "error": "red"}.get(state, "grey35")
            text.append("━" * (per - 1) + " ", style=style)
    if ui.plain:
        text.append("]")
    done = states.count("done")
    text.append(f" {done}/{len(states)} lessons done", style="bold")
    return text


def human(test_name: str) -> str:
    """`test_a_fork_leaves_the_original_untouched[x]` -> `a fork leaves the original untouched [x]`."""
    name, _, param = test_name.partition("[")
    words = name.removeprefix("test_").replace("_", " ")
    return f"{words} [{param}" if param else words
