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
    # BEGIN 00.1
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as error:
            text = arguments[:200]
            raise ValueError(f"are not valid JSON ({error}): {text!r}") from None
    if not isinstance(arguments, dict):
        raise ValueError(f"must be a JSON object, not {type(arguments).__name__}")
    return arguments
    # END 00.1


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
        return (
            f"error: there is no tool called {name!r}; the tools are: "
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
        return f"error: {name} failed: {type(error).__name__}: {error}"
    # END 00.1


def normalize_reply(reply: Message, history: list[Message]) -> Message:
    """The model's reply as a message that can be stored, and sent back to any server.

    `reply` is what ask_model() got, with whatever quirks the server put in it;
    `history` is the conversation so far. Every tool call gets an id no other call in
    the conversation has, and arguments that are a string holding a JSON object ("{}"
    when the model's could not be read: run_tool tells the model what was wrong). The
    content is text, "" when the server sent null; a reply without calls has no
    "tool_calls".
    """
    # BEGIN 00.3
    taken = {call["id"] for message in history
             for call in message.get("tool_calls") or []}
    calls = []
    for call in reply.get("tool_calls") or []:
        # No id, or one already used: a result could not say which call it answers.
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id or call_id in taken:
            call_id = f"call_{uuid.uuid4().hex[:24]}"
        taken.add(call_id)
        arguments = call["function"]["arguments"]
        try:
            parsed = read_arguments(arguments)
            if not (isinstance(arguments, str) and arguments):
                # An object, "" or null: store the JSON text of what they mean.
                arguments = json.dumps(parsed, ensure_ascii=False)
        except ValueError:
            arguments = "{}"    # what all servers read back; run_tool reports the error
        function = {"name": call["function"]["name"], "arguments": arguments}
        calls.append({"id": call_id, "type": "function", "function": function})
    # Sent back, a null content is refused: by OpenAI without tool calls, by Ollama (and
    # LM Studio) with them. "" is taken by all.
    content = reply.get("content")
    text = content if isinstance(content, str) else ""
    message: Message = {"role": "assistant", "content": text}
    if calls:       # never "tool_calls": [], which OpenAI refuses
        message["tool_calls"] = calls
    return message
    # END 00.3



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
        # BEGIN 00.2
        self.record({"role": "user", "content": user_text})
        for _ in range(self.max_turns):
            reply = self.ask_model()
            message = normalize_reply(reply, self.messages)
            self.record(message)
            # Decide from tool_calls, not finish_reason: some OpenAI-compatible servers
            # answer finish_reason="stop" together with tool calls.
            calls = message.get("tool_calls") or []
            if not calls:
                return message["content"]
            # Run each call as the model sent it (so that run_tool can say what was
            # wrong with its arguments); answer it under the id its stored copy carries.
            for call, asked in zip(calls, reply["tool_calls"]):
                self.record({"role": "tool", "tool_call_id": call["id"],
                             "content": run_tool(self.tools, asked)})
        raise MaxTurnsExceeded(
            f"the model still wanted tools after {self.max_turns} requests; giving up "
            "on this turn"
        )
        # END 00.2

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
