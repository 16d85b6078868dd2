# Lesson 05_lock, yours to edit: generated from
# solutions/05_lock/tools.py; `sessionlab reset 05` makes it again.
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
    def short(text: Any, show: Callable[[Any], str] = str) -> str:
        """`text` as `show` writes it, whole when it is short; else only its start,
        saying that it was cut and how long it was. An error result goes back with
        every later request, and what the model sent (or a tool's words that echo it)
        may be 100 KB: its start is enough for the model to recognise it."""
        if not isinstance(text, str):   # a name that is no text (a list of 100 KB):
            text, show = show(text), str  # as Python shows it, then cut like text
        if len(text) <= 200:
            return show(text)
        return f"{show(text[:200])}... (cut: {len(text):,} characters in all)"

    name = call["function"]["name"]
    # A server's slip may name no text at all (null, a list): no tool has that name
    function = tools.functions.get(name) if isinstance(name, str) else None
    if function is None:
        # The name is the model's, whatever its length: quoted (cut before the quote
        # is made, so that it is closed), for the model to see the name it got wrong.
        return (
            f"error: there is no tool called {short(name, repr)}; the tools are: "
            f"{', '.join(tools.functions)}"
        )
    try:
        arguments = read_arguments(call["function"]["arguments"])
    except ValueError as error:
        return f"error: the arguments for {name} {error}; send a JSON object"
    try:
        return str(function(**arguments))
    # The model should hear about it, not the user's terminal
    except Exception as error:
        # The type names the failure; the words may echo what the model sent (a
        # parameter the tool does not have, an item of 100 KB), so only their start.
        return f"error: {name} failed: {type(error).__name__}: {short(str(error))}"
