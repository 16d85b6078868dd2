# Generated from course/agent.py for lesson 04_repair:
# edit that source, then run `sessionlab dev generate`.
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
from .reading import interrupted_result, unanswered_calls, unstarted_result
from .log import SessionLog


class Agent:
    """An agent whose memory, `self.messages`, is saved line by line to its log."""

    def __init__(
        self,
        client: Any,
        *,
        model: str,
        tools: Tools,
        session: SessionLog | None = None,
        system: str | None = None,
        max_turns: int = 8,
    ) -> None:
        self.client = client  # an openai.OpenAI (or anything with the same shape)
        self.model = model
        self.tools = tools
        # Where messages are saved; None keeps them in memory only
        self.session = session
        self.system = system          # sent first with every request, never stored
        self.max_turns = max_turns    # model calls allowed for one user message
        self.messages: list[Message] = self.resume()

    def resume(self) -> list[Message]:
        """The history to start from: the session's log, repaired (none without one)."""
        if self.session is None:
            return []
        # Not load(): this agent will write, so it takes the log over as its writer, and
        # a writer repairs the tail before the history is sent to any model.
        return self.session.open_for_append()

    def run(self, user_text: str) -> str:
        """Handle one user message: call the model until it answers in plain text.

        Returns the final answer. Raises MaxTurnsExceeded when the model is still
        calling tools after `max_turns` requests.
        """
        # BEGIN 04.4
        self.take_log_back()    # a log closed since a run stopped is taken over first
        self.settle()       # a run that stopped half-way may have left calls open
        # END 04.4
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

    def take_log_back(self) -> None:
        """After a run that stopped with calls open, make this agent the log's writer
        again before anything answers them, and take in what that takeover wrote.

        A program may close the session's log after the stop (its with block ends) and
        run the same agent again. The next write then takes the log over once more,
        and that writer's repair (lesson 04) answers every call the log shows open; an
        answer of settle() written after it would answer those calls twice, and a log
        that answers a call twice is one no provider takes back. So the log is taken
        over first, and the answers its repair wrote are this agent's too.
        """
        if self.session is None or not unanswered_calls(self.messages):
            return
        logged = self.messages
        history = self.session.open_for_append()
        if len(history) > len(logged) and history[:len(logged)] == logged:
            self.messages[len(logged):len(logged)] = history[len(logged):]

    def settle(self) -> None:
        """Leave the conversation one a model accepts, after a run of this agent that
        stopped half-way (task 04.4)."""
        # BEGIN 04.4
        # This agent runs its calls one at a time, in the model's order, and records
        # each result before the next call starts: of the calls left open, the first
        # may have run (Ctrl-C inside it, or its result not written), the others had
        # not started. Unless a settle stopped half-way (the disk filled as it wrote):
        # the answer it made up last ends the conversation, and no call ran since.
        # The repair cannot say so: a log may come from any writer.
        last = self.messages[-1] if self.messages else {}
        asked = {call["id"]: call for message in self.messages
                 for call in message.get("tool_calls") or ()}
        answered = asked.get(last.get("tool_call_id"))
        ran_none = answered is not None and last in (
            interrupted_result(answered), unstarted_result(answered))
        # Counted from 1 when no call ran since: then none of them is the first
        first = 1 if ran_none else 0
        for number, call in enumerate(unanswered_calls(self.messages), start=first):
            self.record(unstarted_result(call) if number else interrupted_result(call))
        # END 04.4

    def record(self, message: Message) -> None:
        """Add one message to the conversation: on disk first, then in memory."""
        # Disk first: if the write fails, memory does not claim a message the log lacks.
        if self.session is not None:
            self.session.append(message)
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
