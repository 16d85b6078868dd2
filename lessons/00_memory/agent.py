# Lesson 00_memory, yours to edit: generated from
# solutions/00_memory/agent.py; `sessionlab reset 00` makes it again.
"""The agent loop.

Send the conversation to the model; while it answers with tool calls, run each one and
send its result back under the call's id; a plain answer ends the turn. Every message is
recorded the moment it exists: in memory in lesson 00, in the session's log from lesson
01 on.
"""

from __future__ import annotations

from typing import Any

from .messages import Message, normalize_reply
from .tools import MaxTurnsExceeded, run_tool, Tools


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
        # Your design: the whole function is yours to shape; the tests check only what
        # it does.
        # What it asks: `sessionlab task 00.2`. Hints: `sessionlab hint --task 00.2`.
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
        # A refusal (content null, the model's words in `refusal`) is what it said: the
        # answer the user reads, stored and sent back as its text
        content = reply.content
        if content is None and isinstance(getattr(reply, "refusal", None), str):
            content = reply.refusal
        return {"role": "assistant", "content": content, "tool_calls": calls}
