"""`sessionlab show`: a session log as people read a chat, and a folder as its fork tree.

It reads the on-disk format directly (never through lesson code), and tolerates logs from any
lesson: plain messages (01), repair markers (04), blob references (06), undo markers (07), a
torn last line or a corrupt line in the middle (shown, not fatal).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from .ui import Ui

PREVIEW = 240


# --- reading ---------------------------------------------------------------------------------


@dataclass
class Entry:
    line: int                       # 1-based line number in the file
    kind: str                       # message / marker / torn / corrupt / blank
    data: Any = None
    index: int | None = None        # the message's index (messages only, markers not counted)
    raw: bytes = b""
    error: str = ""


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
        """Message indices that undo markers take back."""
        skip: set[int] = set()
        for entry in self.entries:
            if entry.kind == "marker" and entry.data.get("$marker") == "undo":
                for value in entry.data.get("skip") or []:
                    if isinstance(value, int):
                        skip.add(value)
                    elif isinstance(value, (list, tuple)) and len(value) == 2:   # a [start, end) range
                        skip.update(range(int(value[0]), int(value[1])))
        return skip


def read_log(path: Path) -> Log:
    data = path.read_bytes()
    log = Log(path=path, size=len(data))
    lines = data.split(b"\n")
    index = 0
    for number, raw in enumerate(lines, start=1):
        last = number == len(lines)
        if last and raw == b"":
            break                                   # the file ends with "\n", as it should
        if raw.strip() == b"":
            log.entries.append(Entry(number, "blank", raw=raw))
            continue
        try:
            value = json.loads(raw)
        except ValueError as error:
            kind = "torn" if last else "corrupt"    # no "\n" at the end: a write cut short
            log.entries.append(Entry(number, kind, raw=raw, error=str(error)))
            continue
        if isinstance(value, dict) and "$marker" in value:
            log.entries.append(Entry(number, "marker", value, raw=raw))
        elif isinstance(value, dict) and "role" in value:
            log.entries.append(Entry(number, "message", value, index=index, raw=raw))
            index += 1
        else:
            log.entries.append(Entry(number, "corrupt", value, raw=raw, error="neither a message nor a marker"))
    log.meta = _read_json(path.with_name(f"{log.id}.meta.json"))
    log.lock = _read_json(path.with_name(f"{log.id}.lock"))
    if log.lock is None and path.with_name(f"{log.id}.lock").exists():
        log.lock = {}
    return log


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
        return value if isinstance(value, dict) else None
    except (OSError, ValueError):
        return None


# --- pieces of a message ---------------------------------------------------------------------


def size_text(size: int | float) -> str:
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


def content_text(content: Any, folder: Path | None, limit: int | None) -> Text:
    """A message's content as text: strings, content parts, and blob references."""
    if content is None:
        return Text("")
    if isinstance(content, str):
        return Text(shorten(content, limit))
    if isinstance(content, dict) and "$blob" in content:
        digest = str(content.get("$blob"))
        size = content.get("size")
        label = f"[blob {size_text(size) if isinstance(size, (int, float)) else '?'} · sha256 {digest[:12]}…"
        if folder is not None and not (folder / "blobs" / digest).is_file():
            label += " · MISSING from blobs/"
        label += "]"
        text = Text(label, style="magenta")
        preview = content.get("preview")
        if preview:
            text.append(" " + shorten(str(preview), limit) + (" …" if isinstance(size, int) and len(str(preview)) < size else ""))
        return text
    if isinstance(content, list):
        parts = Text()
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append(shorten(str(part.get("text", "")), limit))
            else:
                parts.append(content_text(part, folder, limit))
            parts.append(" ")
        return parts
    return Text(shorten(json.dumps(content, ensure_ascii=False), limit))


def call_text(tool_call: dict[str, Any]) -> str:
    """`buy(item="rope")` from a tool call; the raw arguments when they are not a JSON object."""
    function = tool_call.get("function") or {}
    name = function.get("name", "?")
    raw = function.get("arguments")
    try:
        arguments = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        arguments = None
    if isinstance(arguments, dict):
        inner = ", ".join(f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in arguments.items())
    else:
        inner = repr(raw)
    return f"{name}({inner})"


ROLE_STYLE = {"user": ("you", "bold cyan"), "assistant": ("agent", "bold green"),
              "tool": ("result", "yellow"), "system": ("system", "bold magenta"),
              "developer": ("developer", "bold magenta")}


def message_rows(message: dict[str, Any], *, names: dict[str, str] | None = None, folder: Path | None = None,
                 limit: int | None = PREVIEW, prefix: str = "") -> list[Text]:
    """One or more lines for a message: who speaks, what was said, which tools were called."""
    role = message.get("role", "?")
    label, style = ROLE_STYLE.get(role, (str(role), "bold"))
    rows: list[Text] = []
    head = Text(prefix)
    head.append(f"{label:<7}", style=style)
    head.append(" ")
    if role == "tool":
        call_id = message.get("tool_call_id", "?")
        name = (names or {}).get(call_id)
        head.append("← ", style="yellow")
        head.append_text(content_text(message.get("content"), folder, limit))
        head.append(f"   ({name + ', ' if name else ''}{call_id})", style="dim")
        return [head]
    body = content_text(message.get("content"), folder, limit)
    calls = message.get("tool_calls") or []
    if body.plain.strip() or not calls:
        head.append_text(body)
        rows.append(head)
    for k, tool_call in enumerate(calls):
        line = Text(" " * len(prefix) + " " * 8) if rows else head
        line.append("→ ", style="yellow")
        line.append(call_text(tool_call), style="yellow")
        line.append(f"   ({tool_call.get('id', '?')})", style="dim")
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


def call_names(messages) -> dict[str, str]:
    names = {}
    for message in messages:
        for tool_call in message.get("tool_calls") or []:
            if isinstance(tool_call, dict):
                names[tool_call.get("id")] = (tool_call.get("function") or {}).get("name", "?")
    return names


# --- a whole log -----------------------------------------------------------------------------


def lock_text(lock: dict[str, Any]) -> Text:
    pid = lock.get("pid")
    host = lock.get("host")
    alive = ""
    if isinstance(pid, int) and (host is None or host == socket.gethostname()):
        try:
            os.kill(pid, 0)
            alive = " (running)"
        except ProcessLookupError:
            alive = " (that process is gone: the next writer takes the lock over)"
        except PermissionError:
            alive = " (running)"
    since = lock.get("since")
    return Text(f"locked by pid {pid if pid is not None else '?'}{' on ' + str(host) if host else ''}"
                f"{alive}{', since ' + _when(since) if since else ''}", style="yellow")


def _when(value: Any) -> str:
    if isinstance(value, (int, float)):
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(value))
    return str(value)


def render_log(log: Log, ui: Ui, *, limit: int | None = PREVIEW) -> Group:
    parts: list = []
    title = Text(f"session {log.id}", style="bold")
    count = len(log.messages)
    title.append(f"   {log.path}  ·  {count} message{'s' if count != 1 else ''}  ·  {size_text(log.size)}",
                 style="dim")
    parts.append(title)
    if log.meta:
        parent = log.meta.get("parent")
        info = []
        if parent:
            at = log.meta.get("forked_at")
            info.append(f"forked from {parent}" + (f" at message {at}" if at is not None else ""))
        if log.meta.get("created"):
            info.append(f"created {_when(log.meta['created'])}")
        if info:
            parts.append(Text("  " + " · ".join(info), style="dim"))
    if log.lock is not None:
        parts.append(Text("  ") + lock_text(log.lock))
    skipped = log.skipped()
    names = call_names(e.data for e in log.messages)
    repairing = False
    for entry in log.entries:
        if entry.kind == "message":
            undone = entry.index in skipped
            role = entry.data.get("role")
            if role != "tool":
                repairing = False
            prefix = f"[{entry.index}] ".rjust(6)
            rows = message_rows(entry.data, names=names, folder=log.folder, limit=limit, prefix=prefix)
            for row in rows:
                if undone:
                    row.stylize("strike dim")
                    if ui.plain:
                        row.append("   (undone)")
                if repairing and role == "tool":
                    row.append("   [written by the repair]", style="bold yellow")
                parts.append(hanging(row, len(prefix) + 8, ui))
        elif entry.kind == "marker":
            kind = entry.data.get("$marker")
            details = {k: v for k, v in entry.data.items() if k != "$marker"}
            shown = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in details.items())
            if kind == "repair":
                repairing = True
                parts.append(Text(f"  ── repair ── {shown}", style="bold yellow"))
            elif kind == "undo":
                parts.append(Text(f"  ── undo ── {shown}", style="bold blue"))
            else:
                parts.append(Text(f"  ── {kind} ── {shown}", style="bold"))
        elif entry.kind == "torn":
            parts.append(Text(f"  ── torn last line ({len(entry.raw)} bytes, no newline): a write was cut short; "
                              "lesson 04's repair drops it on resume ──", style="bold red"))
        elif entry.kind == "corrupt":
            parts.append(Text(f"  ── line {entry.line} is not a message or a marker: {entry.error} ── "
                              f"{shorten(entry.raw.decode('utf-8', 'replace'), 80)}", style="bold red"))
        elif entry.kind == "blank":
            parts.append(Text(f"  ── line {entry.line} is blank ──", style="dim"))
    if skipped:
        parts.append(Text(f"{len(skipped)} message(s) undone: struck through above, skipped on resume.", style="dim"))
    return Group(*parts)


# --- a folder: the fork tree -----------------------------------------------------------------


def render_folder(folder: Path, ui: Ui) -> list:
    logs = {p.name.removesuffix(".jsonl") for p in folder.glob("*.jsonl")}
    ids = sorted(logs | {p.name.removesuffix(".meta.json") for p in folder.glob("*.meta.json")})
    if not ids:
        return [Text(f"{folder}: no sessions here yet.")]
    # read_log reads a session's meta file too: read each one once.
    summaries = {session_id: read_log(folder / f"{session_id}.jsonl") if session_id in logs else None
                 for session_id in ids}
    metas = {session_id: (log.meta if log is not None else _read_json(folder / f"{session_id}.meta.json")) or {}
             for session_id, log in summaries.items()}
    children: dict[str | None, list[str]] = {}
    for session_id in ids:
        parent = metas.get(session_id, {}).get("parent")
        children.setdefault(parent if parent in ids else None, []).append(session_id)

    def label(session_id: str) -> Text:
        log = summaries[session_id]
        meta = metas.get(session_id, {})
        text = Text()
        text.append(session_id, style="bold")
        if log is None:
            text.append("  (meta file only: a fork that did not finish; forking again "
                        "onto this id replaces it)", style="red")
            return text
        count = len(log.messages)
        text.append(f"  {count} message{'s' if count != 1 else ''}")
        if meta.get("parent"):
            at = meta.get("forked_at")
            text.append(f"  forked from {meta['parent']}" + (f" at {at}" if at is not None else ""), style="dim")
            if meta["parent"] not in ids:
                text.append(" (that session is gone)", style="red")
        if meta.get("created"):
            text.append(f"  created {_when(meta['created'])}", style="dim")
        skipped = log.skipped()
        if skipped:
            text.append(f"  {len(skipped)} undone", style="blue")
        if any(e.kind == "marker" and e.data.get("$marker") == "repair" for e in log.entries):
            text.append("  repaired", style="yellow")
        if any(e.kind in ("torn", "corrupt") for e in log.entries):
            text.append("  damaged", style="bold red")
        if log.lock is not None:
            text.append("  ")
            text.append_text(lock_text(log.lock))
        return text

    # (depth, is the last child, session id) in tree order
    order: list[tuple[list[bool], str]] = []

    def walk(parent: str | None, trail: list[bool], seen: set[str]) -> None:
        kids = [k for k in children.get(parent, []) if k not in seen]
        for n, session_id in enumerate(kids):
            seen.add(session_id)
            order.append((trail + [n == len(kids) - 1], session_id))
            walk(session_id, trail + [n == len(kids) - 1], seen)

    seen: set[str] = set()
    walk(None, [], seen)
    for session_id in ids:          # a parent loop (hand-edited meta files): still show them
        if session_id not in seen:
            seen.add(session_id)
            order.append(([True], session_id))
            walk(session_id, [True], seen)

    if ui.plain:
        # Plain text: ASCII guides, one unbroken line per session.
        lines: list = [Text(str(folder))]
        for trail, session_id in order:
            guide = "".join("    " if last else "|   " for last in trail[:-1]) + ("`-- " if trail[-1] else "|-- ")
            lines.append(Text(guide) + label(session_id))
        tree: Any = lines
    else:
        root_node = Tree(Text(f"{folder}", style="bold"), guide_style="dim")
        nodes: dict[int, Tree] = {0: root_node}
        for trail, session_id in order:
            nodes[len(trail)] = nodes[len(trail) - 1].add(label(session_id))
        tree = [root_node]
    parts: list = list(tree)
    blobs = folder / "blobs"
    if blobs.is_dir():
        files = [p for p in blobs.iterdir() if p.is_file()]
        parts.append(Text(f"blobs/: {len(files)} file(s), {size_text(sum(p.stat().st_size for p in files))}, "
                          "shared by every session here", style="dim"))
    parts.append(Text(f"`sessionlab show ID --sessions {folder}` shows one log.", style="dim"))
    return parts


# --- the command -----------------------------------------------------------------------------


def resolve(target: str | None, sessions: Path) -> Path:
    if target is None:
        return sessions
    path = Path(target)
    if path.is_dir() or path.is_file():
        return path
    if (sessions / f"{target}.jsonl").is_file():
        return sessions / f"{target}.jsonl"
    if path.suffix != ".jsonl" and path.with_name(path.name + ".jsonl").is_file():
        return path.with_name(path.name + ".jsonl")
    raise FileNotFoundError(target)


def cmd_show(args: argparse.Namespace, ui: Ui, root: Path | None) -> int:
    sessions = Path(args.sessions)
    try:
        path = resolve(args.target, sessions)
    except FileNotFoundError:
        known = sorted(p.name.removesuffix(".jsonl") for p in sessions.glob("*.jsonl")) if sessions.is_dir() else []
        ui.error(f"no session {args.target!r} in {sessions}/ and no such file or folder",
                 ("the sessions there: " + ", ".join(known)) if known
                 else "give a session id with --sessions DIR, a .jsonl file, or a sessions folder")
        return 1
    if path.is_dir():
        for part in render_folder(path, ui):
            ui.out.print(part)
        return 0
    ui.out.print(render_log(read_log(path), ui, limit=None if args.full else PREVIEW))
    return 0


def register(commands, common: argparse.ArgumentParser) -> None:
    p = commands.add("show", cmd_show, "chat",
                     "a session log as a chat (tool calls, blobs, undo, repairs), or a folder's fork tree",
                     needs_root=False, parents=[common], description=__doc__.split("\n\n", 1)[1])
    p.add_argument("target", nargs="?", metavar="SESSION",
                   help="a session id (in --sessions), a .jsonl file, or a sessions folder (default: the folder)")
    p.add_argument("--sessions", default="sessions", metavar="DIR", help="the sessions folder (default ./sessions)")
    p.add_argument("--full", action="store_true", help="do not shorten long contents")
