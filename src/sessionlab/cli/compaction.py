"""The chat's side of lesson 08 (compaction): a budget for every request, `/compact`, and
a line in the chat each time the agent compacts.

From lesson 08 on the agent takes `budget=` (estimated tokens for a whole request). The chat
gives it one by default, DEFAULT_BUDGET, so that a long chat compacts where you can see it;
`--budget N` sets another, `--budget 0` none (every request then carries everything). With
an earlier lesson's code `--budget` is refused: that agent cannot compact.
"""

from __future__ import annotations

import argparse
import inspect
from typing import Any

from rich.text import Text

from . import replies
from .ui import Ui

# Ollama has long run a model with a small window unless told otherwise (its num_ctx:
# 2048 tokens, later 4096) and cuts the start of a longer prompt: the chat assumes 4096.
DEFAULT_BUDGET = 4096
OVERFLOW_HINT = ("take the turn back with /undo, or chat again with a larger --budget: the "
                 "log keeps every message")
# A compaction whose summary the lesson's check refused twice (lesson 08's BadSummary)
BAD_SUMMARY_HINT = ("the chat goes on: /compact asks for a summary again, /undo takes the turn "
                    "back, a larger --budget needs no summary yet, and a larger model follows the "
                    "instruction better")


def is_bad_summary(error: BaseException, module: Any) -> bool:
    """Is `error` the lesson's BadSummary: a reply to the summary request that is no summary?"""
    refused = getattr(module, "BadSummary", None)
    return isinstance(refused, type) and isinstance(error, refused)


def can_compact(agent_class: type) -> bool:
    """Does this lesson's Agent take a budget and compact (lesson 08 on)?"""
    try:
        parameters = inspect.signature(agent_class).parameters
    except (TypeError, ValueError):
        return False
    return "budget" in parameters and callable(getattr(agent_class, "compact", None))


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--budget", type=int, metavar="TOKENS",
                        help="lesson 08 on: the largest request, in estimated tokens; older "
                             f"messages are summarised beyond it (default {DEFAULT_BUDGET}, "
                             "0 for none)")


def agent_options(args: argparse.Namespace, agent_class: type, lesson_number: str) -> dict[str, Any]:
    """The Agent's keyword arguments for compaction: {} for a lesson without it.

    Raises ValueError, saying why, for a budget that cannot be one (the chat shows it)."""
    budget = getattr(args, "budget", None)
    if not can_compact(agent_class):
        if budget is not None:
            raise ValueError(f"lesson {lesson_number}'s agent has no budget: compaction "
                             "arrives in lesson 08 (--lesson 08)")
        return {}
    if budget is not None and budget < 0:
        raise ValueError(f"--budget {budget}: a budget is a number of tokens, 0 or more "
                         "(0: no budget)")
    return {"budget": DEFAULT_BUDGET if budget is None else (budget or None)}


def describe(agent: Any, ui: Ui) -> None:
    """One dim line under the session's: the budget, and where requests start."""
    if not hasattr(agent, "budget"):
        return
    budget = (f"requests within {agent.budget} estimated tokens (--budget)"
              if agent.budget else "no budget: every request carries the whole history")
    compacted = getattr(agent, "compaction", None)
    where = (f"; compacted: requests start with a summary, then message "
             f"[{compacted.boundary}]" if compacted is not None else "")
    ui.out.print(Text(budget + where, style="dim"))


def announcing(agent_class: type, ui: Ui) -> type:
    """The Agent, printing a line each time it compacts (the lesson code unchanged)."""
    if not can_compact(agent_class):
        return agent_class

    class AnnouncedAgent(agent_class):  # type: ignore[misc, valid-type]
        def compact(self):
            before = self.request_size(self.view())
            compacted = super().compact()
            if compacted:
                boundary = self.compaction.boundary
                after = self.request_size(self.view())
                ui.out.print(Text(
                    f"── compacted: messages [0] to [{boundary - 1}] are summarised in the "
                    f"request, which now starts at [{boundary}] (about {before} → {after} "
                    "tokens); the log keeps every message ──", style="bold blue"))
            return compacted

    AnnouncedAgent.__name__ = agent_class.__name__
    AnnouncedAgent.__qualname__ = agent_class.__qualname__
    return AnnouncedAgent


def help_line(agent: Any) -> str:
    return ("/compact  summarise all but the newest turn in the requests (the log keeps "
            "everything)\n" if hasattr(agent, "compact") else "")


def command(word: str, agent: Any, ui: Ui) -> bool:
    """Run `/compact`; False when `word` is not this module's command."""
    if word != "compact":
        return False
    if not hasattr(agent, "compact"):
        ui.error("this lesson's agent cannot compact", "compaction arrives in lesson 08: --lesson 08")
        return True
    try:
        compacted = agent.compact()
    except Exception as error:      # a model that failed, a log that cannot be written
        ui.error(f"nothing was compacted: {type(error).__name__}: {error}",
                 "the conversation and the log are as they were")
        return True
    if not compacted:
        ui.out.print("nothing to compact: the newest turn already starts the request (or, "
                     "with a budget, fills it alone)")
    return True


# --- `sessionlab show`: the boundary ------------------------------------------------------
# show reads the format itself, never through lesson code: a compaction marker is read
# here as lesson 08 reads it (an "upto" at most the messages written before it counts).


def boundaries(log: Any) -> dict[int, int]:
    """{message index where requests start: the line of the compaction marker} for every
    compaction marker of `log` (a show.Log) that lesson 08 would honour."""
    found: dict[int, int] = {}
    seen = 0
    for entry in log.entries:
        if entry.kind == "message":
            seen += 1
        elif entry.kind == "marker" and entry.data.get("$marker") == "compaction":
            upto = entry.data.get("upto")
            if type(upto) is int and 0 <= upto <= seen:
                found[upto] = entry.line
    return found


def boundary_row(line: int, latest: bool = True) -> Text:
    """The row drawn just before the first message a compaction keeps."""
    if not latest:
        return Text(f"  ┄┄ an earlier compaction boundary (marker on line {line}), "
                    "summarised again by a later one ┄┄", style="dim blue")
    return Text(f"  ┄┄ compaction boundary (marker on line {line}): requests start here, "
                "after the summary; the messages above stay in the log ┄┄", style="blue")


def marker_row(data: dict[str, Any], shorten: Any, limit: int | None) -> Text:
    """A compaction marker: what it summarises, and the summary itself (shortened)."""
    upto, summary = data.get("upto"), data.get("summary")
    if not (type(upto) is int and isinstance(summary, str)):
        return Text(f"  ── compaction ── {shorten(str(data), limit)}   (its summary is not "
                    "text or its upto is no message index: lesson 08 refuses this log)",
                    style="red")
    span = f"messages [0] to [{upto - 1}]" if upto > 0 else "no message"
    row = Text(f"  ── compaction ── the summary of {span} that requests carry from here on: ",
               style="bold blue")
    row.append(shorten(" ".join(summary.split()), limit))
    problem = summary_problem(summary)
    if problem:
        row.append(f"   (no summary: {problem}, recorded unchecked; every request sends it as "
                   "the conversation so far: a fork cut before this boundary, "
                   "--fork-from ID --at K, has the messages instead)", style="red")
    return row


def summary_problem(summary: str) -> str | None:
    """What lesson 08 refuses in a reply it would record as the summary, found in one a log
    already holds (written before the check, or by other code); None for a summary."""
    thinking, answer = replies.split_thinking(summary)
    if not summary.strip():
        return "it is empty"
    if not answer:
        return "it is only the model's thinking"
    calls = replies.tool_calls_in_text(answer)
    if calls:
        return f"it is a call to {', '.join(calls)} written as JSON text"
    if thinking or "</think>" in summary:
        return "it holds the model's <think> block before the summary"
    return None


def label(log: Any) -> Text | None:
    """The fork tree's note for a compacted session."""
    count = sum(entry.kind == "marker" and entry.data.get("$marker") == "compaction"
                for entry in log.entries)
    return Text(f"  {count} compaction{'s' if count != 1 else ''}", style="blue") if count else None
