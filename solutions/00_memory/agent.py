"""Session Lab, lesson 00: the agent loop, in memory.

An agent is a loop around a model: send the conversation, and while the model answers with
tool calls, run each one and send its result back under the call's id. A plain answer ends
the turn. Everything lives in `self.messages`, a list in this process's memory: when the
process ends, the conversation is gone. The rest of the course fixes that.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Protocol

Message = dict[str, Any]


class Tools(Protocol):
    """What the agent needs from its tools (the town provides exactly this)."""

    schemas: list[dict[str, Any]]                   # told to the model with every request
    functions: Mapping[str, Callable[..., str]]     # tool name -> the function that runs it


class MaxTurnsExceeded(RuntimeError):
    """The model kept calling tools and never gave a plain answer."""


def run_tool(tools: Tools, call: Message) -> str:
    """Run one tool call from the model and return its result as text.

    Whatever goes wrong (a tool that does not exist, arguments that are not JSON, a tool
    that raises) becomes a result the model can read and react to. An agent that crashes
    on a model's typo is an agent that cannot finish a quest.
    """
    # BEGIN 00.1
    name = call["function"]["name"]
    function = tools.functions.get(name)
    if function is None:
        return f"error: there is no tool called {name!r}; the tools are: {', '.join(tools.functions)}"
    try:
        arguments = json.loads(call["function"]["arguments"] or "{}")
    except json.JSONDecodeError as error:
        return f"error: the arguments for {name} are not valid JSON ({error}); send a JSON object"
    if not isinstance(arguments, dict):
        return f"error: the arguments for {name} must be a JSON object, not {type(arguments).__name__}"
    try:
        return str(function(**arguments))
    except Exception as error:  # the model should hear about it, not the user's terminal
        return f"error: {name} failed: {type(error).__name__}: {error}"
    # END 00.1


class Agent:
    """An agent whose whole memory is `self.messages`."""

    def __init__(self, client: Any, *, model: str, tools: Tools,
                 system: str | None = None, max_turns: int = 8) -> None:
        self.client = client          # an openai.OpenAI (or anything with the same shape)
        self.model = model
        self.tools = tools
        self.system = system          # sent first with every request, never stored
        self.max_turns = max_turns    # model calls allowed for one user message
        self.messages: list[Message] = []

    def run(self, user_text: str) -> str:
        """Handle one user message: call the model until it answers in plain text.

        Returns the final answer. Raises MaxTurnsExceeded when the model is still calling
        tools after `max_turns` requests.
        """
        # BEGIN 00.2
        self.record({"role": "user", "content": user_text})
        for _ in range(self.max_turns):
            reply = self.ask_model()
            self.record(reply)
            # Decide from tool_calls, not finish_reason: some OpenAI-compatible servers
            # answer finish_reason="stop" together with tool calls.
            calls = reply.get("tool_calls") or []
            if not calls:
                return reply.get("content") or ""
            for call in calls:
                self.record({"role": "tool", "tool_call_id": call["id"],
                             "content": run_tool(self.tools, call)})
        raise MaxTurnsExceeded(
            f"the model still wanted tools after {self.max_turns} requests; giving up on this turn")
        # END 00.2

    def record(self, message: Message) -> None:
        """Add one message to the conversation."""
        self.messages.append(message)

    def ask_model(self) -> Message:
        """Send the conversation to the model and return its reply as a plain dict."""
        system = [{"role": "system", "content": self.system}] if self.system else []
        response = self.client.chat.completions.create(
            model=self.model, messages=system + self.messages, tools=self.tools.schemas)
        reply = response.choices[0].message
        message: Message = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.function.name, "arguments": c.function.arguments}}
                for c in reply.tool_calls
            ]
        return message
