"""Output for the command line: rich in a terminal, plain readable text in a pipe or CI.

Every command prints through `out` (stdout) and `err` (stderr). When stdout is not a
terminal, rich drops colours and cursor tricks by itself; on top of that `plain` switches the
glyphs (check marks, block bars) to words and ASCII so logs and `grep` stay readable.
NO_COLOR is honoured; FORCE_COLOR forces a terminal.
"""

from __future__ import annotations

import argparse

import os
import re
import sys
from dataclasses import dataclass

from rich import box
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.segment import Segment
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
PLAIN_GAP = "  "          # between the columns of a plain table
PLAIN_WIDTH = 100         # what a pipe is rendered at: wide enough for anything but tables
NARROW = 60               # a terminal narrower than this gets tables without a frame
TIGHT = 48                # ... and this, a lesson's state as its glyph alone (see LEGEND)
LEGEND = "✓ done · ◐ in progress · ○ not started · ! error"


class FitTable(Table):
    """A table that never cuts a cell.

    In a terminal, a cell too long for its column wraps (a word longer than the column is
    broken across lines) instead of ending in "…". In plain text (a pipe, a file, CI) every
    row is one line holding every cell whole, however wide that makes it: `grep` and
    `cut` want whole names, and a log has no width to fit.
    """

    def add_column(self, *args, **options) -> None:
        options.setdefault("overflow", "fold")
        super().add_column(*args, **options)

    def add_row(self, *renderables, **options) -> None:
        # Columns that add_row would create itself would cut ("ellipsis"): make them here.
        while len(self.columns) < len(renderables):
            self.add_column()
        super().add_row(*renderables, **options)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if console.is_terminal:
            yield from super().__rich_console__(console, options)
            return
        for line in plain_table_lines(self, console):
            yield Segment(line)
            yield Segment.line()


def plain_table_lines(table: Table, console: Console) -> list[str]:
    """The table as lines of plain text, one a row, each cell whole."""
    columns = table.columns
    cells = [[_plain_cell(cell, console) for cell in column.cells] for column in columns]
    headers = [_plain_cell(column.header, console) for column in columns]
    rows = [list(row) for row in zip(*cells)] if cells else []
    shown = ([headers] if table.show_header else []) + rows
    widths = [max((len(row[k]) for row in shown), default=0) for k in range(len(columns))]

    def line(row: list[str]) -> str:
        parts = [cell.rjust(width) if column.justify == "right" else cell.ljust(width)
                 for cell, width, column in zip(row, widths, columns)]
        return PLAIN_GAP.join(parts).rstrip()

    lines = [str(table.title)] if table.title else []
    if table.show_header:
        lines += [line(headers), PLAIN_GAP.join("-" * max(1, w) for w in widths)]
    return lines + [line(row) for row in rows]


def _plain_cell(cell: RenderableType, console: Console) -> str:
    """A cell's text on one line (a newline in a cell would break its row in two)."""
    if isinstance(cell, Text):
        text = cell.plain
    elif isinstance(cell, str):
        text = console.render_str(cell).plain
    else:
        wide = console.options.update(width=10_000, no_wrap=True, overflow="ignore")
        text = "\n".join("".join(segment.text for segment in line)
                         for line in console.render_lines(cell, wide, pad=False))
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


# --- secrets: a connection string's password is never shown ------------------------------

# The password of a URL's user part (scheme://user:password@host), whatever it holds up to
# the last "@" of the word (an unencoded "/" or "@" in it is still the password), and the
# value of a `password=` in a query string or a libpq key/value string (quoted or not).
URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^:/@\s\"']*:)[^\s\"']*@")
KEY_PASSWORD = re.compile(r"(?P<head>\bpassword\s*=\s*)(?:'(?:[^'\\]|\\.)*'|[^\s&'\"]*)",
                          re.IGNORECASE)
HIDDEN = "***"
_secrets: set[str] = set()


def secrets_in(text: str | None) -> list[str]:
    """The passwords a connection string or URL holds: as written, and percent-decoded
    (a driver's message may show either)."""
    from urllib.parse import unquote

    found: list[str] = []
    for match in re.finditer(r"[A-Za-z][A-Za-z0-9+.-]*://([^\s\"']*)@", text or ""):
        user, colon, password = match.group(1).partition(":")
        if colon:
            found.append(password)
    for match in KEY_PASSWORD.finditer(text or ""):
        value = match.group(0)[len(match.group("head")):]
        found.append(value)
        if value.startswith("'") and value.endswith("'") and len(value) > 1:
            found.append(re.sub(r"\\(.)", r"\1", value[1:-1]))
    found += [unquote(value) for value in found]
    # A very short one would turn every such letter of every message into ***: the
    # patterns above still hide it where a URL or a key/value string shows it.
    return [value for value in dict.fromkeys(found) if len(value) >= 3]


def keep_secret(text: str | None) -> None:
    """Never show the passwords `text` (a --store URL, a --base-url, an API key) holds."""
    _secrets.update(secrets_in(text))


def keep_key(key: str | None) -> None:
    """Never show this value (an API key) in a message."""
    if key and len(key) >= 3:
        _secrets.add(key)


def redact(text: str) -> str:
    """`text` with every password of a URL or connection string replaced by ***."""
    text = URL_PASSWORD.sub(lambda m: m.group("head") + HIDDEN + "@", text)
    text = KEY_PASSWORD.sub(lambda m: m.group("head") + HIDDEN, text)
    for secret in sorted(_secrets, key=len, reverse=True):
        text = text.replace(secret, HIDDEN)
    return text


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
        """A table in the house style: rounded in a terminal, bare columns in plain text;
        either way no cell is ever cut (see FitTable)."""
        # A narrow terminal keeps its columns for the cells, not for the frame.
        roomy = not self.plain and self.out.width >= NARROW
        options.setdefault("box", self.box if roomy or self.plain else box.SIMPLE_HEAD)
        options.setdefault("show_edge", roomy)
        options.setdefault("pad_edge", roomy)
        if not roomy and not self.plain:
            options.setdefault("padding", (0, 0))     # the frame's blank divider is enough
        return FitTable(**options)

    def grid(self, **options) -> Table:
        """Columns without lines (a list of tasks), cut no more than `table`."""
        return FitTable.grid(**options)

    def error(self, message: str, hint: str | None = None) -> None:
        """One line saying what went wrong, and one saying what to do about it."""
        text = Text("error: ", style="bold red")
        text.append(redact(message))
        self.err.print(text, soft_wrap=True)
        if hint:
            self.err.print(Text("  " + redact(hint), style="yellow"), soft_wrap=True)

    def warn(self, message: str) -> None:
        """One line about something odd that the command got past."""
        text = Text("warning: ", style="bold yellow")
        text.append(redact(message))
        self.err.print(text, soft_wrap=True)

    def note(self, message: str) -> None:
        self.err.print(Text(redact(message), style="dim"), soft_wrap=True)

    def mark(self, state: str) -> Text:
        """A lesson or task state as a short coloured mark (words when plain)."""
        glyphs = {
            "done": ("✓ done", "done", "green"),
            "passed": ("✓", "ok", "green"),
            "in progress": ("◐ in progress", "in progress", "yellow"),
            "failing": ("✗", "FAIL", "red"),
            "started": ("◔", "started", "yellow"),
            "todo": ("·", "todo", "dim"),
            "not started": ("○ not started", "not started", "dim"),
            "error": ("! error", "ERROR", "bold red"),
            "untested": ("?", "untested", "dim"),
            "info": ("·", "-", "dim"),
            "warn": ("!", "warn", "yellow"),
        }
        fancy, word, style = glyphs.get(state, (state, state, ""))
        if self.tight:
            fancy = fancy.split(" ")[0]
        return Text(word if self.plain else fancy, style=style)

    @property
    def tight(self) -> bool:
        """A terminal so narrow that "in progress" would take the room of the counts:
        states are shown as glyphs, with LEGEND under the table."""
        return not self.plain and self.out.width < TIGHT


def make_ui(stdout=None, stderr=None) -> Ui:
    """Consoles on the current sys.stdout / sys.stderr (so tests capturing them see the text)."""
    return Ui(out=_console(stdout or sys.stdout), err=_console(stderr or sys.stderr))


class Redacting:
    """A stream that hides passwords (see redact) in everything written to it: the last
    guard, behind each message's own care, so that no line the kit prints, whatever it
    quotes (a driver's error, a URL in a row of `doctor`, a spinner's label), shows one."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(redact(text))
        return len(text)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _console(file) -> Console:
    file = file if isinstance(file, Redacting) else Redacting(file)
    console = Console(file=file, highlight=False)
    if not console.is_terminal:
        # Plain text: a line is never broken in two (grep and logs want whole lines), and
        # there is no terminal to ask for a width, whatever COLUMNS says (a narrow COLUMNS
        # exported by a shell would otherwise cut a pipe's output at 40 columns).
        console = Console(file=file, highlight=False, soft_wrap=True,
                          width=max(PLAIN_WIDTH, console.width if os.environ.get("COLUMNS") else 0))
    return console


def bar(states: list[str], ui: Ui, width: int = 40) -> Text:
    """A progress bar over lessons, one segment a lesson, coloured by its state; narrower
    in a narrow terminal, so that it stays one line with its count."""
    if not states:
        return Text("")
    if not ui.plain:
        width = min(width, ui.out.width - len(f" {len(states)}/{len(states)} lessons done") - 1)
    per = max(1, width // len(states))
    text = Text("[" if ui.plain else "")
    for state in states:
        if ui.plain:
            glyph = {"done": "#", "in progress": "+"}.get(state, ".")
            text.append(glyph * per)
        else:
            style = {"done": "green", "in progress": "yellow", "error": "red"}.get(state, "grey35")
            text.append("━" * (per - 1) + " " if per > 1 else "━", style=style)
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


def one_line_errors(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """A mistake in this command's arguments is one line (argparse's own way prints the
    whole usage first, which buries what was wrong); exit status 2 as argparse's."""
    def error(message: str):
        make_ui().error(f"{parser.prog}: {message} (`{parser.prog} --help` lists the options)")
        raise SystemExit(2)

    parser.error = error     # type: ignore[method-assign]
    return parser
