"""Session Lab, lesson 00: the agent loop, in memory.

An agent is a loop around a model: send the conversation, and while the model answers
with tool calls, run each one and send its result back under the call's id. A plain
answer ends the turn. Everything lives in `self.messages`, a list in this process's
memory: when the process ends, the conversation is gone. The rest of the course fixes
that.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Protocol

Message = dict[str, Any]


class Tools(Protocol):
    """What the agent needs from its tools (the town provides exactly this)."""

    # Told to the model with every request
    schemas: list[dict[str, Any]]
    # Tool name -> the function that runs it
    functions: Mapping[str, Callable[..., str]]


class MaxTurnsExceeded(RuntimeError):
    """The model kept calling tools and never gave a plain answer."""


def read_arguments(arguments: Any) -> dict[str, Any]:
    """A tool call's arguments as a dict; ValueError, saying what is wrong, if none.

    On the wire they are a string holding a JSON object. Some servers send the object
    itself (llama.cpp's server has), or "" or null for a call without arguments: read
    those as what they mean. Anything else is the model's mistake, for it to hear about.
    """
    # TODO(00.1): Run one tool call and return its result as text.
    # Hints: `sessionlab hint 00`; the docs page of lesson 00_memory.
    raise NotImplementedError(
        "task 00.1 is not written yet: Run one tool call and return its result as text"
    )


def run_tool(tools: Tools, call: Message) -> str:
    """Run one tool call from the model and return its result as text.

    Whatever goes wrong (a tool that does not exist, arguments that are not JSON, a tool
    that raises) becomes a result the model can read and react to. An agent that crashes
    on a model's typo is an agent that cannot finish a quest.
    """
    # TODO(00.1): Run one tool call and return its result as text.
    # Hints: `sessionlab hint 00`; the docs page of lesson 00_memory.
    raise NotImplementedError(
        "task 00.1 is not written yet: Run one tool call and return its result as text"
    )


def normalize_reply(reply: Message, history: list[Message]) -> Message:
    """The model's reply as a message that can be stored, and sent back to any server.

    `reply` is what ask_model() got, with whatever quirks the server put in it;
    `history` is the conversation so far. Every tool call gets an id no other call in
    the conversation has, and arguments that are a string holding a JSON object ("{}"
    when the model's could not be read: run_tool tells the model what was wrong). The
    content is text, "" when the server sent null; a reply without calls has no
    "tool_calls".
    """
    # TODO(00.3): Turn the model's reply into a message you can store and send back.
    # Hints: `sessionlab hint 00`; the docs page of lesson 00_memory.
    raise NotImplementedError(
        "task 00.3 is not written yet: Turn the model's reply into a message you can "
        "store and send back"
    )



class Agent:
    """An agent whose whole memory is `self.messages`."""

    def __init__(self, client: Any, *, model: str, tools: Tools,
                 system: str | None = None, max_turns: int = 8) -> None:
        self.client = client  # an openai.OpenAI (or anything with the same shape)
        self.model = model
        self.tools = tools
        self.system = system          # sent first with every request, never stored
        self.max_turns = max_turns    # model calls allowed for one user message
        self.messages: list[Message] = []

    def run(self, user_text: str) -> str:
        """Handle one user message: call the model until it answers in plain text.

        Returns the final answer. Raises MaxTurnsExceeded when the model is still
        calling tools after `max_turns` requests.
        """
        # TODO(00.2): Loop until the model answers in plain text.
        # Hints: `sessionlab hint 00`; the docs page of lesson 00_memory.
        raise NotImplementedError(
            "task 00.2 is not written yet: Loop until the model answers in plain text"
        )

    def record(self, message: Message) -> None:
        """Add one message to the conversation."""
        self.messages.append(message)

    def ask_model(self) -> Message:
        """Send the conversation to the model; return its reply as it came, as a dict.

        Its fields hold whatever the server sent (an id may be None, arguments an
        object): normalize_reply() makes it a message to store.
        """
        system = [{"role": "system", "content": self.system}] if self.system else []
        response = self.client.chat.completions.create(
            model=self.model, messages=system + self.messages, tools=self.tools.schemas)
        reply = response.choices[0].message
        calls = [{"id": c.id, "function": {"name": c.function.name,
                                           "arguments": c.function.arguments}}
                 for c in reply.tool_calls or []]
        return {"role": "assistant", "content": reply.content, "tool_calls": calls}
