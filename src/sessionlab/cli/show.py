"""`sessionlab show`: a session log as people read a chat, and a folder as its fork tree.

It reads the on-disk format directly (never through lesson code), and tolerates logs from any
lesson: plain messages (01), repair markers (04), blob references (06), undo markers (07), a
torn last line or a corrupt line in the middle (shown, not fatal).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from . import compaction, files
from .ui import Ui

PREVIEW = 240


# --- reading ---------------------------------------------------------------------------------

# Characters a terminal acts on instead of printing (escape sequences, carriage return,
# bell, C1 controls, bidirectional overrides) and lone surrogates (which cannot be encoded):
# text from a log is data, so they are shown escaped, never passed to the terminal.
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e"
                    "\u2066-\u2069\ud800-\udfff]")
UNSAFE_LINES = re.compile(UNSAFE.pattern[:-1] + "\n\t]")
# Past this depth a value is not walked (it would exhaust Python's stack); its line is shown raw.
DEEPEST = 200


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str, *, lines: bool = True) -> str:
    """`text` with every character a terminal would act on written as an escape (`\\x1b`).

    With lines=False a newline or tab is escaped too: for names, ids and one-line notes;
    otherwise a Windows line end (CR LF) is read as the line end it is.
    """
    if lines:
        return UNSAFE.sub(_escape, text.replace("\r\n", "\n"))
    return UNSAFE_LINES.sub(_escape, text)


class TooDeep(ValueError):
    """A value nested deeper than show walks."""


def cleaned(value: Any, depth: int = 0) -> Any:
    """A parsed JSON value with every string (keys too) made `visible`."""
    if depth > DEEPEST:
        raise TooDeep(f"nested more than {DEEPEST} levels deep")
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, list):
        return [cleaned(item, depth + 1) for item in value]
    if isinstance(value, dict):
        return {visible(str(key)): cleaned(item, depth + 1) for key, item in value.items()}
    return value


@dataclass
class Entry:
    line: int                       # 1-based line number in the file
    kind: str                       # message / marker / torn / corrupt / blank
    data: Any = None
    index: int | None = None        # the message's index (messages only, markers not counted)
    raw: bytes = b""
    error: str = ""

    def raw_text(self, limit: int | None = 80) -> str:
        return shorten(visible(self.raw.decode("utf-8", "replace"), lines=False), limit)


@dataclass
class Log:
    path: Path
    entries: list[Entry] = field(default_factory=list)
    meta: dict[str, Any] | None = None
    lock: dict[str, Any] | None = None
    size: int = 0

    @property
    def id(self) -> str:
        return self.path.name.removesuffix(".jsonl")

    @property
    def folder(self) -> Path:
        return self.path.parent

    @property
    def messages(self) -> list[Entry]:
        return [e for e in self.entries if e.kind == "message"]

    def skipped(self) -> set[int]:
        """Message indices that undo markers take back.

        As lesson 07 reads them: a marker takes back only messages written before it, so
        every index is below the number of messages seen so far, and a range in a marker
        (`[start, end)`, from hand-written logs) is clipped to them before it is expanded:
        `[[0, 10**12]]` costs no more than the log's own messages.
        """
        skip: set[int] = set()
        seen = 0
        for entry in self.entries:
            if entry.kind == "message":
                seen += 1
            elif entry.kind == "marker" and entry.data.get("$marker") == "undo":
                skip.update(skip_values(entry.data.get("skip"), seen))
        return skip


def _is_int(value: Any) -> bool:
    return type(value) is int      # not a bool, which JSON's true would become


def skip_values(skip: Any, before: int) -> set[int]:
    """The indices an undo marker's `skip` names among the first `before` messages."""
    found: set[int] = set()
    if not isinstance(skip, list):
        return found
    for value in skip:
        if _is_int(value) and 0 <= value < before:
            found.add(value)
        elif isinstance(value, list) and len(value) == 2 and all(_is_int(v) for v in value):
            found.update(range(max(value[0], 0), min(value[1], before)))
    return found


def skip_understood(skip: Any) -> bool:
    """Whether a marker's `skip` is a list of message indices, as lesson 07 writes it."""
    return isinstance(skip, list) and all(_is_int(value) for value in skip)


def parse_entry(number: int, raw: bytes, last: bool, index: int) -> Entry:
    """One line of a log as an Entry; never raises for what the line holds."""
    if raw.strip() == b"":
        return Entry(number, "blank", raw=raw)
    try:
        value = cleaned(json.loads(raw))
    except TooDeep as error:
        return Entry(number, "corrupt", raw=raw, error=str(error))
    except (ValueError, RecursionError) as error:
        kind = "torn" if last else "corrupt"        # no "\n" at the end: a write cut short
        reason = "nested too deeply" if isinstance(error, RecursionError) else str(error)
        return Entry(number, kind, raw=raw, error=visible(reason, lines=False))
    if isinstance(value, dict) and "$marker" in value:
        return Entry(number, "marker", value, raw=raw)
    if isinstance(value, dict) and "role" in value:
        return Entry(number, "message", value, index=index, raw=raw)
    return Entry(number, "corrupt", value, raw=raw, error="neither a message nor a marker")


def parse_entries(lines: list[tuple[int, bytes]], torn_last: bool) -> list[Entry]:
    """The entries of a log's (line number, bytes), each message with its index;
    `torn_last`: the last line has no newline after it (a tail that may be torn)."""
    entries: list[Entry] = []
    index = 0
    for position, (number, raw) in enumerate(lines, start=1):
        entry = parse_entry(number, raw, torn_last and position == len(lines), index)
        index += entry.kind == "message"
        entries.append(entry)
    return entries


def read_log(path: Path) -> Log:
    """The log at `path`, every line kept; OSError if the file cannot be read."""
    data = files.read_bytes(path)          # a pipe in a log's place: NotRegularFile
    log = Log(path=path, size=len(data))
    lines = list(enumerate(data.split(b"\n"), start=1))
    ended = lines[-1][1] == b""                     # the file ends with "\n", as it should
    log.entries = parse_entries(lines[:-1] if ended else lines, torn_last=not ended)
    log.meta = _read_json(path.with_name(f"{log.id}.meta.json"))
    log.lock = _read_json(path.with_name(f"{log.id}.lock"))
    if log.lock is None and path.with_name(f"{log.id}.lock").exists():
        log.lock = {}
    return log


META_LIMIT = 1 << 20      # bytes of a meta or lock file read: they hold a few fields


def _read_json(path: Path) -> dict[str, Any] | None:
    """A meta or lock file's table; None when there is none, or it is no such file (a
    pipe or a folder of that name is never opened: reading a pipe waits for ever)."""
    try:
        value = cleaned(json.loads(files.read_bytes(path, META_LIMIT).decode("utf-8")))
        return value if isinstance(value, dict) else None
    except (OSError, ValueError, RecursionError):
        return None


# --- pieces of a message ---------------------------------------------------------------------


def size_text(size: Any) -> str:
    try:
        size = float(size)
    except (TypeError, ValueError, OverflowError):
        return "?"
    if not math.isfinite(size) or size < 0:
        return "?"
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size} B"


def shorten(text: str, limit: int | None) -> str:
    text = text.replace("\r\n", "\n")
    if limit is None or len(text) <= limit + limit // 4:     # never cut off just a few words
        return text
    return text[:limit].rstrip() + f" … ({len(text) - limit} more characters)"


def as_json(value: Any) -> str:
    """A value as JSON for one line of display (strings in it were made visible on reading)."""
    return json.dumps(value, ensure_ascii=False, default=str)


SHA256 = re.compile(r"[0-9a-f]{64}")


def blob_label(content: dict[str, Any], folder: Path | None) -> str:
    digest = content.get("$blob")
    size = content.get("size")
    if not (isinstance(digest, str) and SHA256.fullmatch(digest)):
        return f"[blob {size_text(size)} · not a sha256: {shorten(as_json(digest), 40)}]"
    label = f"[blob {size_text(size)} · sha256 {digest[:12]}…"
    if folder is not None and not (folder / "blobs" / digest).is_file():
        label += " · MISSING from blobs/"
    return label + "]"


def content_text(content: Any, folder: Path | None, limit: int | None) -> Text:
    """A message's content as text: strings, content parts, and blob references."""
    if content is None:
        return Text("")
    if isinstance(content, str):
        return Text(shorten(content, limit))
    if isinstance(content, dict) and "$blob" in content:
        text = Text(blob_label(content, folder), style="magenta")
        preview = content.get("preview")
        size = content.get("size")
        if preview:
            more = _is_int(size) and len(str(preview)) < size
            text.append(" " + shorten(str(preview), limit) + (" …" if more else ""))
        return text
    if isinstance(content, list):
        parts = Text()
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                parts.append(shorten(part["text"], limit))
            elif isinstance(part, dict) and "$blob" in part:
                parts.append_text(content_text(part, folder, limit))
            else:
                parts.append(shorten(as_json(part), limit))
            parts.append(" ")
        return parts
    return Text(shorten(as_json(content), limit))


def call_text(tool_call: Any, limit: int | None = PREVIEW) -> str:
    """`buy(item="rope")` from a tool call; the raw arguments when they are not a JSON object."""
    if not isinstance(tool_call, dict):
        return f"?({shorten(as_json(tool_call), limit)})   (not a tool call)"
    function = tool_call.get("function")
    function = function if isinstance(function, dict) else {}
    name = function.get("name", "?")
    name = name if isinstance(name, str) else as_json(name)
    raw = function.get("arguments")
    try:
        arguments = json.loads(raw) if isinstance(raw, str) else raw
    except (ValueError, RecursionError):
        arguments = None
    if isinstance(arguments, dict):
        inner = ", ".join(f"{visible(str(key), lines=False)}={_argument(value)}"
                          for key, value in arguments.items())
    else:
        inner = repr(raw) if isinstance(raw, str) else as_json(raw)
    return f"{visible(name, lines=False)}({shorten(inner, limit)})"


def _argument(value: Any) -> str:
    # Arguments parsed here from a JSON string were not cleaned on reading.
    try:
        return visible(as_json(cleaned(value)), lines=False)
    except (TooDeep, RecursionError, ValueError):
        return "…"


def id_text(value: Any) -> str:
    """A call id as shown: the string itself, anything else as JSON."""
    return visible(value if isinstance(value, str) else as_json(value), lines=False)


ROLE_STYLE = {"user": ("you", "bold cyan"), "assistant": ("agent", "bold green"),
              "tool": ("result", "yellow"), "system": ("system", "bold magenta"),
              "developer": ("developer", "bold magenta")}


def message_rows(message: dict[str, Any], *, tool: str | None = None, folder: Path | None = None,
                 limit: int | None = PREVIEW, prefix: str = "") -> list[Text]:
    """One or more lines for a message: who speaks, what was said, which tools were called.

    `tool` is the name of the tool a result answers (see `result_names`). Every string is
    made `visible` here too, for messages that come from a model rather than from a file.
    """
    try:
        message = cleaned(message)
    except (TooDeep, RecursionError):
        return [Text(prefix + "(a message nested too deeply to show)", style="red")]
    if not isinstance(message, dict):
        return [Text(prefix + f"(not a message: {shorten(as_json(message), limit)})", style="red")]
    role = message.get("role", "?")
    label, style = ROLE_STYLE.get(role, (None, "bold")) if isinstance(role, str) else (None, "bold")
    if label is None:
        label = visible(role if isinstance(role, str) else as_json(role), lines=False)
    rows: list[Text] = []
    head = Text(prefix)
    head.append(f"{label:<7}", style=style)
    head.append(" ")
    if role == "tool":
        call_id = id_text(message.get("tool_call_id", "?"))
        head.append("← ", style="yellow")
        head.append_text(content_text(message.get("content"), folder, limit))
        head.append(f"   ({tool + ', ' if tool else ''}{call_id})", style="dim")
        return [head]
    body = content_text(message.get("content"), folder, limit)
    calls = message.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        head.append_text(body)
        head.append(f"   (tool_calls is not a list: {shorten(as_json(calls), limit)})", style="red")
        return [head]
    calls = calls or []
    if body.plain.strip() or not calls:
        head.append_text(body)
        rows.append(head)
    for tool_call in calls:
        line = Text(" " * len(prefix) + " " * 8) if rows else head
        line.append("→ ", style="yellow")
        line.append(call_text(tool_call, limit), style="yellow")
        if isinstance(tool_call, dict):
            line.append(f"   ({id_text(tool_call.get('id', '?'))})", style="dim")
        rows.append(line)
    return rows


def hanging(row: Text, indent: int, ui: Ui):
    """A row that wraps under its text, not under its label, in a terminal; one line in plain text."""
    if ui.plain:
        return row
    grid = Table.grid(padding=0)
    grid.add_column(width=indent, no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row(row[:indent], row[indent:])
    return grid


def _id_key(value: Any) -> str:
    # Ids are compared as JSON text, so that an id that is a list or an object (odd, but
    # valid JSON) is compared too, rather than breaking a dict.
    return as_json(value)


class ResultNames:
    """Which tool each result answers, read in order, one message at a time.

    A result answers the nearest earlier call with its id that is not answered yet: models
    reuse call ids (the scripted one does after an undo), so a map of id -> name over the
    whole log would give an early result the name of a later call.
    """

    def __init__(self) -> None:
        self.open: dict[str, list[str]] = {}

    def name(self, message: Any) -> str | None:
        """The tool `message` answers if it is a result; records its calls if it makes any."""
        if not isinstance(message, dict):
            return None
        if message.get("role") == "tool":
            waiting = self.open.get(_id_key(message.get("tool_call_id")))
            return waiting.pop() if waiting else None
        calls = message.get("tool_calls")
        for tool_call in calls if isinstance(calls, list) else []:
            if isinstance(tool_call, dict):
                function = tool_call.get("function")
                name = function.get("name") if isinstance(function, dict) else None
                name = visible(name if isinstance(name, str) else "?", lines=False)
                self.open.setdefault(_id_key(tool_call.get("id")), []).append(name)
        return None


def result_names(messages: list[Any]) -> list[str | None]:
    """For each message, the tool it answers (None for anything but a result)."""
    names = ResultNames()
    return [names.name(message) for message in messages]


# --- a whole log -----------------------------------------------------------------------------

PID_MAX = 2**22        # Linux's largest pid: beyond it a number names no process


def lock_text(lock: dict[str, Any]) -> Text:
    pid = lock.get("pid")
    host = lock.get("host")
    alive = ""
    here = host is None or host == socket.gethostname()
    if not (_is_int(pid) and 0 < pid <= PID_MAX):
        alive = " (not a process id)" if pid is not None else ""
    elif here:
        alive = " (running)" if process_running(pid) else \
            " (that process is gone: the next writer takes the lock over)"
    since = lock.get("since")
    shown_pid = "?" if pid is None else shorten(as_json(pid) if not isinstance(pid, str) else pid, 40)
    shown_host = f" on {shorten(str(host), 80)}" if host else ""
    return Text(f"locked by pid {shown_pid}{shown_host}{alive}{', since ' + _when(since) if since else ''}",
                style="yellow")


def process_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)          # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, OSError):
        return False
    return True


def _when(value: Any) -> str:
    """A time from a meta or lock file: seconds since the epoch, or the text as written."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(value))
        except (OverflowError, OSError, ValueError):
            return f"{shorten(as_json(value), 40)} (not a time)"
    return _value(value)


def _value(value: Any) -> str:
    """A value from a meta or lock file on one line: a string as written, anything else as JSON."""
    return shorten(visible(value if isinstance(value, str) else as_json(value), lines=False), 80)


def heading(log: Log) -> list[Text]:
    parts: list[Text] = []
    title = Text(f"session {visible(log.id, lines=False)}", style="bold")
    count = len(log.messages)
    title.append(f"   {visible(str(log.path), lines=False)}  ·  {count} message{'s' if count != 1 else ''}"
                 f"  ·  {size_text(log.size)}", style="dim")
    parts.append(title)
    if log.meta:
        parent = log.meta.get("parent")
        info = []
        if parent:
            at = log.meta.get("forked_at")
            info.append(f"forked from {_value(parent)}" + (f" at message {_value(at)}" if at is not None else ""))
        from .sidechains import heading_info    # lesson 10: a helper's own log
        info += heading_info(log.meta)
        if log.meta.get("created"):
            info.append(f"created {_when(log.meta['created'])}")
        if info:
            parts.append(Text("  " + " · ".join(info), style="dim"))
    if log.lock is not None:
        parts.append(Text("  ") + lock_text(log.lock))
    return parts


def marker_row(data: dict[str, Any], limit: int | None) -> Text:
    kind = data.get("$marker")
    details = {k: v for k, v in data.items() if k != "$marker"}
    shown = shorten(", ".join(f"{k}={as_json(v)}" for k, v in details.items()), limit)
    if kind == "repair":
        return Text(f"  ── repair ── {shown}", style="bold yellow")
    if kind == "compaction":       # lesson 08
        return compaction.marker_row(data, shorten, limit)
    if kind == "undo":
        row = Text(f"  ── undo ── {shown}", style="bold blue")
        if not skip_understood(data.get("skip")):
            row.append("   (its skip is not a list of message indices: lesson 07 refuses this log)",
                       style="red")
        return row
    if kind == "erase":     # lesson 09
        return Text(f"  ── erase ── message {as_json(data.get('index'))} was erased at "
                    f"{as_json(data.get('at'))}: its line holds a tombstone", style="bold magenta")
    label = kind if isinstance(kind, str) else as_json(kind)
    return Text(f"  ── {shorten(label, 40)} ── {shown}", style="bold")


def damage_row(entry: Entry) -> Text:
    if entry.kind == "torn":
        return Text(f"  ── torn last line ({len(entry.raw)} bytes, no newline): a write was cut short; "
                    "lesson 04's repair drops it on resume ──", style="bold red")
    if entry.kind == "blank":
        return Text(f"  ── line {entry.line} is blank ──", style="dim")
    return Text(f"  ── line {entry.line} is not a message or a marker: {entry.error} ── "
                f"{entry.raw_text()}", style="bold red")


def raw_row(entry: Entry, why: str) -> Text:
    """A line show could not draw: its number, why, and its bytes (escaped)."""
    return Text(f"  ── line {entry.line}, shown as written ({why}) ── {entry.raw_text(PREVIEW)}",
                style="red")


def render_log(log: Log, ui: Ui, *, limit: int | None = PREVIEW) -> Group:
    try:
        return Group(*_log_parts(log, ui, limit))
    except Exception as error:      # anything this code did not foresee: the lines as written
        note = Text(f"session {visible(log.id, lines=False)}: show cannot draw this log "
                    f"({type(error).__name__}); its lines as written:", style="bold red")
        return Group(note, *(raw_row(entry, entry.kind) for entry in log.entries))


def _log_parts(log: Log, ui: Ui, limit: int | None) -> list:
    parts: list = heading(log)
    skipped = log.skipped()
    names = ResultNames()
    repairing = False
    boundaries = compaction.boundaries(log)     # lesson 08: where requests start
    for entry in log.entries:
        try:
            if entry.kind == "message" and entry.index in boundaries:
                line = boundaries[entry.index]
                parts.append(compaction.boundary_row(line, line == max(boundaries.values())))
            if entry.kind == "message":
                tool = names.name(entry.data)
                role = entry.data.get("role")
                if role != "tool":
                    repairing = False
                parts += message_parts(entry, tool, entry.index in skipped, repairing, log, ui, limit)
            elif entry.kind == "marker" and entry.data.get("$marker") == "sidechain":
                from .sidechains import pointer_parts   # lesson 10: the helper's own log
                parts += pointer_parts(entry.data, log, ui, limit)
            elif entry.kind == "marker":
                repairing = repairing or entry.data.get("$marker") == "repair"
                parts.append(marker_row(entry.data, limit))
            else:
                parts.append(damage_row(entry))
        except Exception as error:  # one line show cannot draw: shown as written, the rest goes on
            parts.append(raw_row(entry, f"{type(error).__name__}"))
    if skipped:
        parts.append(Text(f"{len(skipped)} message(s) undone: struck through above, skipped on resume.", style="dim"))
    return parts


def message_parts(entry: Entry, tool: str | None, undone: bool, repairing: bool, log: Log,
                  ui: Ui, limit: int | None) -> list:
    prefix = f"[{entry.index}] ".rjust(6)
    rows = message_rows(entry.data, tool=tool, folder=log.folder, limit=limit, prefix=prefix)
    parts = []
    for row in rows:
        if undone:
            row.stylize("strike dim")
            if ui.plain:
                row.append("   (undone)")
        if repairing and entry.data.get("role") == "tool":
            row.append("   [written by the repair]", style="bold yellow")
        parts.append(hanging(row, len(prefix) + 8, ui))
    return parts


# --- a folder: the fork tree -----------------------------------------------------------------


def _regular(path: Path) -> bool:
    # A folder or a pipe named `x.jsonl` is not a log (reading a pipe would wait forever).
    try:
        return path.is_file()
    except OSError:
        return False


def folder_sessions(folder: Path) -> tuple[list[str], set[str], list[str]]:
    """(every session id, the ids with a log file, names ending in .jsonl that are not files)."""
    logs: set[str] = set()
    odd: list[str] = []
    for path in folder.glob("*.jsonl"):
        (logs.add if _regular(path) else odd.append)(path.name.removesuffix(".jsonl"))
    metas = {p.name.removesuffix(".meta.json") for p in folder.glob("*.meta.json") if _regular(p)}
    return sorted(logs | metas), logs, sorted(odd)


def summary(folder: Path, session_id: str, logs: set[str]) -> Log | str | None:
    """The session's log; None if it has only a meta file; the reason if it cannot be read."""
    if session_id not in logs:
        return None
    try:
        return read_log(folder / f"{session_id}.jsonl")
    except OSError as error:
        return error.strerror or type(error).__name__


def label_text(session_id: str, log: Log | str | None, meta: dict[str, Any], ids: list[str]) -> Text:
    text = Text()
    text.append(visible(session_id, lines=False), style="bold")
    if log is None:
        text.append("  (meta file only: a fork that did not finish; forking again "
                    "onto this id replaces it)", style="red")
        return text
    if isinstance(log, str):
        text.append(f"  (cannot be read: {log})", style="bold red")
        return text
    count = len(log.messages)
    text.append(f"  {count} message{'s' if count != 1 else ''}")
    parent = meta.get("parent")
    if parent:
        at = meta.get("forked_at")
        text.append(f"  forked from {_value(parent)}" + (f" at {_value(at)}" if at is not None else ""),
                    style="dim")
        if parent not in ids:
            text.append(" (that session is gone)", style="red")
    if meta.get("created"):
        text.append(f"  created {_when(meta['created'])}", style="dim")
    from .sidechains import label     # lesson 10: how many helpers' logs
    text.append_text(label(log))
    skipped = log.skipped()
    if skipped:
        text.append(f"  {len(skipped)} undone", style="blue")
    if any(e.kind == "marker" and e.data.get("$marker") == "repair" for e in log.entries):
        text.append("  repaired", style="yellow")
    if (compacted := compaction.label(log)) is not None:     # lesson 08
        text.append_text(compacted)
    if any(e.kind in ("torn", "corrupt") for e in log.entries):
        text.append("  damaged", style="bold red")
    if log.lock is not None:
        text.append("  ")
        text.append_text(lock_text(log.lock))
    return text


def tree_order(ids: list[str], metas: dict[str, dict[str, Any]]) -> list[tuple[list[bool], str]]:
    """(the trail of is-last-child flags down to the session, session id) in tree order."""
    children: dict[str | None, list[str]] = {}
    for session_id in ids:
        parent = metas[session_id].get("parent")
        children.setdefault(parent if isinstance(parent, str) and parent in ids else None,
                            []).append(session_id)
    order: list[tuple[list[bool], str]] = []
    seen: set[str] = set()

    def walk(parent: str | None, trail: list[bool]) -> None:
        # A stack, not recursion: a chain of thousands of forks must not exhaust Python's.
        stack: list[tuple[str, list[bool]]] = []

        def push_children(node: str | None, path: list[bool]) -> None:
            kids = [k for k in children.get(node, []) if k not in seen]
            seen.update(kids)
            stack.extend(reversed([(k, path + [n == len(kids) - 1]) for n, k in enumerate(kids)]))

        push_children(parent, trail)
        while stack:
            session_id, path = stack.pop()
            order.append((path, session_id))
            push_children(session_id, path)

    walk(None, [])
    for session_id in ids:          # a parent loop (hand-edited meta files): still show them
        if session_id not in seen:
            seen.add(session_id)
            order.append(([True], session_id))
            walk(session_id, [True])
    return order


def render_folder(folder: Path, ui: Ui) -> list:
    ids, logs, odd = folder_sessions(folder)
    shown = visible(str(folder), lines=False)
    notes = [Text(f"{visible(name, lines=False)}.jsonl is not a file: not a session log", style="dim")
             for name in odd]
    if not ids:
        return [Text(f"{shown}: no sessions here yet."), *notes]
    summaries = {session_id: summary(folder, session_id, logs) for session_id in ids}
    # read_log reads a session's meta file too: read each one once.
    metas = {session_id: (log.meta if isinstance(log, Log) else _read_json(folder / f"{session_id}.meta.json"))
             or {} for session_id, log in summaries.items()}
    order = tree_order(ids, metas)
    labels = {session_id: label_text(session_id, summaries[session_id], metas[session_id], ids)
              for session_id in ids}
    if ui.plain:
        # Plain text: ASCII guides, one unbroken line per session.
        parts: list = [Text(shown)]
        for trail, session_id in order:
            guide = "".join("    " if last else "|   " for last in trail[:-1]) + ("`-- " if trail[-1] else "|-- ")
            parts.append(Text(guide) + labels[session_id])
    else:
        root_node = Tree(Text(shown, style="bold"), guide_style="dim")
        nodes: dict[int, Tree] = {0: root_node}
        for trail, session_id in order:
            nodes[len(trail)] = nodes[len(trail) - 1].add(labels[session_id])
        parts = [root_node]
    parts += notes
    parts += blob_summary(folder)
    parts.append(Text(f"`sessionlab show ID --sessions {shown}` shows one log.", style="dim"))
    return parts


def blob_summary(folder: Path) -> list[Text]:
    blobs = folder / "blobs"
    try:
        if not blobs.is_dir():
            return []
        sizes = [p.stat().st_size for p in blobs.iterdir() if _regular(p)]
    except OSError as error:
        return [Text(f"blobs/: cannot be read ({error.strerror})", style="red")]
    return [Text(f"blobs/: {len(sizes)} file(s), {size_text(sum(sizes))}, shared by every session here",
                 style="dim")]


# --- the command -----------------------------------------------------------------------------


def _folder(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def resolve(target: str | None, sessions: Path) -> Path:
    """The file or folder to show: FileNotFoundError if there is none of that name."""
    if target is None:
        if not _folder(sessions):
            raise FileNotFoundError(sessions)
        return sessions
    path = Path(target)
    candidates = [path, sessions / f"{target}.jsonl"]
    if path.suffix != ".jsonl":
        candidates.append(path.with_name(path.name + ".jsonl"))
    for candidate in candidates:
        if _folder(candidate) or _exists(candidate):
            return candidate
    raise FileNotFoundError(target)


def no_such(args: argparse.Namespace, sessions: Path, ui: Ui) -> int:
    where = visible(str(sessions), lines=False)
    if args.target is None:
        demo = Path("demo-sessions")
        hint = ("the demo's logs are in demo-sessions/: `sessionlab show --sessions demo-sessions`"
                if _folder(demo) else "`sessionlab chat` writes its sessions there; --sessions DIR names another folder")
        ui.error(f"no sessions folder {where}/ here yet", hint)
        return 1
    known = sorted(folder_sessions(sessions)[1]) if _folder(sessions) else []
    ui.error(f"no session {visible(args.target, lines=False)!r} in {where}/ and no such file or folder",
             ("the sessions there: " + ", ".join(visible(k, lines=False) for k in known)) if known
             else "give a session id with --sessions DIR, a .jsonl file, or a sessions folder")
    return 1


def cmd_show(args: argparse.Namespace, ui: Ui, root: Path | None) -> int:
    if args.store:      # lesson 11's sessions, in PostgreSQL
        from .database import cmd_show_store
        return cmd_show_store(args, ui)
    sessions = Path(args.sessions)
    try:
        path = resolve(args.target, sessions)
    except FileNotFoundError:
        return no_such(args, sessions, ui)
    shown = visible(str(path), lines=False)
    if _folder(path) and path.name.endswith(".jsonl"):
        ui.error(f"{shown} is a folder, not a session log", f"`sessionlab show {visible(str(path.parent), lines=False)}` "
                 "shows the sessions beside it")
        return 1
    if _folder(path):
        try:
            parts = render_folder(path, ui)
        except OSError as error:
            ui.error(f"cannot read the folder {shown}: {error.strerror or error}")
            return 1
        for part in parts:
            ui.out.print(part)
        return 0
    if not _regular(path):
        ui.error(f"{shown} is not a regular file (a pipe or a device): not a session log")
        return 1
    try:
        log = read_log(path)
    except OSError as error:
        ui.error(f"cannot read {shown}: {error.strerror or error}")
        return 1
    ui.out.print(render_log(log, ui, limit=None if args.full else PREVIEW))
    return 0


def register(commands, common: argparse.ArgumentParser) -> None:
    p = commands.add("show", cmd_show, "chat",
                     "a session log as a chat (tool calls, blobs, undo, repairs), or a folder's fork tree",
                     needs_root=False, parents=[common], description=__doc__.split("\n\n", 1)[1])
    p.add_argument("target", nargs="?", metavar="SESSION",
                   help="a session id (in --sessions), a .jsonl file, or a sessions folder (default: the folder)")
    p.add_argument("--sessions", default="sessions", metavar="DIR", help="the sessions folder (default ./sessions)")
    p.add_argument("--full", action="store_true", help="do not shorten long contents")
    p.add_argument("--store", metavar="URL",
                   help="read sessions from PostgreSQL (postgresql://user@host/db), as lesson 11 keeps them")
