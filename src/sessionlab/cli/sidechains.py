"""Side-chains on the command line (lesson 10): the helper's own log, drawn under its call.

A parent's log holds `{"$marker": "sidechain", "call", "session", "sidechain"}` right after
the call that started a helper; the helper's transcript is the log
`<session>.sidechains/<sidechain>.jsonl` beside the parent's, with a meta file naming the
parent (`sidechain_of`) and the call. `show` draws that log, indented, where the pointer
is; `chat` on a lesson whose agent runs helpers offers the town's ask_helper tool and
prints the helper's side-chain under the call once it has answered.

Like the rest of `show`, this reads the format itself, never through lesson code, and never
follows a pointer whose names are not plain session ids.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType
from typing import Any

from rich.text import Text

from ..town import HelperTown, Town
from . import show
from .ui import Ui

# The lessons' session-id rule (lesson 01's check_session_id), for the names in a pointer.
SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
SUFFIX = ".sidechains"
BAR = "     │ "


def is_pointer(data: Any) -> bool:
    return isinstance(data, dict) and data.get("$marker") == "sidechain"


def pointer_path(folder: Path, data: dict[str, Any]) -> Path | None:
    """The side-chain log a pointer names; None when its names are not plain ids."""
    session, name = data.get("session"), data.get("sidechain")
    if not all(isinstance(v, str) and SESSION_ID.fullmatch(v) for v in (session, name)):
        return None
    return folder / f"{session}{SUFFIX}" / f"{name}.jsonl"


def pointer_parts(data: dict[str, Any], log: show.Log, ui: Ui, limit: int | None) -> list:
    """The pointer as a heading, then the side-chain's messages, indented under it."""
    path = pointer_path(log.folder, data)
    call = show.id_text(data.get("call", "?"))
    if path is None:
        return [Text(f"  ── side-chain of call {call}: the pointer names no valid side-chain "
                     f"({show.shorten(show.as_json(data), 120)}); not followed ──", style="bold red")]
    where = show.visible(f"{path.parent.name}/{path.name}", lines=False)
    try:
        side = show.read_log(path)
    except FileNotFoundError:
        return [Text(f"  ── side-chain {where} (call {call}): missing; the helper never wrote a "
                     "line, or its log was deleted ──", style="bold red")]
    except OSError as error:
        return [Text(f"  ── side-chain {where} (call {call}): cannot be read "
                     f"({error.strerror or error}) ──", style="bold red")]
    count = len(side.messages)
    head = Text(f"  ── side-chain {where} ── helper of call {call}, {count} message"
                f"{'s' if count != 1 else ''}", style="bold magenta")
    if data.get("session") != log.id:
        head.append(f"   (written by {show.visible(str(data['session']), lines=False)}'s helper: "
                    "a fork shares its source's side-chains, never copies them)", style="dim")
    parts: list = [head]
    skipped = side.skipped()
    names = show.ResultNames()
    for entry in side.entries:
        if entry.kind == "message":
            tool = names.name(entry.data)
            for row in show.message_rows(entry.data, tool=tool, folder=path.parent, limit=limit,
                                         prefix=BAR + f"[{entry.index}] "):
                if entry.index in skipped:
                    row.stylize("strike dim")
                parts.append(show.hanging(row, len(BAR) + 12, ui))
        elif entry.kind == "marker":
            parts.append(Text(BAR) + show.marker_row(entry.data, limit))
        else:
            parts.append(Text(BAR) + show.damage_row(entry))
    if side.lock is not None:
        parts.append(Text(BAR) + show.lock_text(side.lock))
    elif not ended_in_an_answer(side):
        parts.append(Text(BAR + "(it ends without an answer: the helper stopped here, and the "
                          "parent's call was answered without it)", style="yellow"))
    return parts


def ended_in_an_answer(log: show.Log) -> bool:
    messages = [e.data for e in log.messages]
    return bool(messages) and messages[-1].get("role") == "assistant" \
        and not messages[-1].get("tool_calls")


def heading_info(meta: dict[str, Any]) -> list[str]:
    """For a side-chain's own heading: whose helper it was, and which call started it."""
    parent = meta.get("sidechain_of")
    if not parent:
        return []
    return [f"side-chain of {show._value(parent)}, started by call {show._value(meta.get('call', '?'))}"]


def label(log: show.Log) -> Text:
    """For the folder's tree: how many side-chains a session's calls started."""
    count = sum(1 for e in log.entries if e.kind == "marker" and is_pointer(e.data))
    if not count:
        return Text("")
    return Text(f"  {count} side-chain{'s' if count != 1 else ''}", style="magenta")


# --- chat -----------------------------------------------------------------------------------


def town_class(module: ModuleType) -> type[Town] | None:
    """The town a chat offers when the lesson's agent runs helpers (one with ask_helper);
    None for the others, which keep the chat's own town."""
    return HelperTown if hasattr(module, "HELPER_TOOL") else None


def show_helpers(agent_class: type, printer: Any) -> None:
    """Make a chat's agent print each helper's side-chain under its call, once it is done."""
    if not hasattr(agent_class, "ask_helper"):
        return
    ask_helper = agent_class.ask_helper

    def ask_and_show(self, call_id, question):
        try:
            return ask_helper(self, call_id, question)
        finally:
            if getattr(self, "_printer", None) is not None and self.session is not None:
                print_sidechain(self.session.folder, self.session.id, call_id, printer.ui)

    agent_class.ask_helper = ask_and_show


def print_sidechain(folder: Path, session_id: str, call_id: str, ui: Ui) -> None:
    """The side-chain of the newest pointer for `call_id` in the session's log."""
    try:
        log = show.read_log(Path(folder) / f"{session_id}.jsonl")
    except OSError:
        return
    pointers = [e.data for e in log.entries if e.kind == "marker" and is_pointer(e.data)
                and e.data.get("call") == call_id]
    if pointers:
        for part in pointer_parts(pointers[-1], log, ui, show.PREVIEW):
            ui.out.print(part)
