# Lesson 00_memory, yours to edit: generated from
# solutions/00_memory/tools.py; `sessionlab reset 00` makes it again.
"""Running one tool call, and what its result says.

The agent's tools are plain functions looked up by name. Whatever goes wrong in a call
(an unknown tool, arguments that are not a JSON object, an error the tool raises) comes
back as a result the model can read and answer, never as a crash of the loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from .messages import Message, read_arguments


class Tools(Protocol):
    """What the agent needs from its tools (the town provides exactly this)."""

    # Told to the model with every request
    schemas: list[dict[str, Any]]
    # Tool name -> the function that runs it
    functions: Mapping[str, Callable[..., str]]


class MaxTurnsExceeded(RuntimeError):
    """The model kept calling tools and never gave a plain answer."""


def run_tool(tools: Tools, call: Message) -> str:
    """Run one tool call from the model and return its result as text.

    Whatever goes wrong (a tool that does not exist, arguments that are not JSON, a tool
    that raises) becomes a result the model can read and react to. An agent that crashes
    on a model's typo is an agent that cannot finish a quest.
    """
    # TODO(00.1): Read a tool call's arguments and run it, whatever the model sent.
    # What it asks: `sessionlab task 00.1`. Hints: `sessionlab hint --task 00.1`.
    raise NotImplementedError(
        "task 00.1 is not written yet: Read a tool call's arguments and run it, "
        "whatever the model sent"
    )
