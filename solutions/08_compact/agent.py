# Generated from course/agent.py for lesson 08_compact:
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
from .reading import (
    Compaction, interrupted_result, unanswered_calls, unstarted_result)
from .undo import AgentUndo
from .compaction import AgentCompaction, REPLY_ROOM
from .log import SessionLog


class Agent(AgentUndo, AgentCompaction):
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
        budget: int | None = None,
        reply_room: int = REPLY_ROOM,
    ) -> None:
        self.client = client  # an openai.OpenAI (or anything with the same shape)
        self.model = model
        self.tools = tools
        # Where messages are saved; None keeps them in memory only
        self.session = session
        self.system = system          # sent first with every request, never stored
        self.max_turns = max_turns    # model calls allowed for one user message
        # The pending buffer: see record() and flush().
        self.pending: list[Message] = []
        self.messages: list[Message] = self.resume()
        # Lesson 08: the largest request, in estimated tokens, counting the system
        # prompt, the tools, the summary and `reply_room` tokens left for the answer
        # (None: no limit, nothing is ever compacted). The compaction the log recorded
        # is the view whatever the budget: a resume sends what was sent before.
        self.budget = budget
        self.reply_room = reply_room
        self.compaction: Compaction | None = (
            self.session.compacted if self.session is not None else None
        )

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
        self.take_log_back()    # a log closed since a run stopped is taken over first
        self.settle()       # a run that stopped half-way may have left calls open
        self.record({"role": "user", "content": user_text})
        for _ in range(self.max_turns):
            # Flushes first: on disk before the model sees it
            reply = self.ask_model()
            message = normalize_reply(reply, self.messages)
            self.record(message)
            # Decide from tool_calls, not finish_reason: some OpenAI-compatible servers
            # answer finish_reason="stop" together with tool calls.
            calls = message.get("tool_calls") or []
            if not calls:
                # The answer the user is about to read is on disk when run() ends
                self.flush()
                return message["content"]
            # Run each call as the model sent it (so that run_tool can say what was
            # wrong with its arguments); answer it under the id its stored copy carries.
            for call, asked in zip(calls, reply["tool_calls"]):
                # The call (and the results before it) are on disk before the tool can
                # change the world: a crash inside it leaves a call lesson 04 repairs.
                self.flush()
                self.record({"role": "tool", "tool_call_id": call["id"],
                             "content": run_tool(self.tools, asked)})
        self.flush()        # the last results, before the error says the turn ended
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
        # Pending messages are not in the log yet: they come after what it holds
        logged = self.messages[:len(self.messages) - len(self.pending)]
        history = self.session.open_for_append()
        if len(history) > len(logged) and history[:len(logged)] == logged:
            self.messages[len(logged):len(logged)] = history[len(logged):]

    def settle(self) -> None:
        """Leave the conversation one a model accepts, after a run of this agent that
        stopped half-way (task 04.4)."""
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

    def record(self, message: Message) -> None:
        """Add one message to the conversation: in memory now, in the log at flush().

        The agent flushes before every model call, before every tool runs and when run()
        ends, so only a message nothing has acted on yet stays pending: one recorded
        between turns (a note the user pasted, say) and not sent yet. Taking it back
        costs nothing; a crash loses it, and with it nothing that any model, tool or
        user has seen.
        """
        if self.session is not None:
            from .files import MAX_WRITE
            from .messages import check_message, check_plain_json, encode_line
            # Written later, but checked now, as append() checks it: a message the log
            # would refuse is refused here, changing nothing. Left to the flush, it
            # would fail every flush after it, and no model call could go out again.
            check_plain_json(message)
            check_message(message)
            # The line append writes must fit one write(). Only a line too long as it
            # stands can be too long once a large content is stored apart (outline).
            if (len(encode_line(message)) > MAX_WRITE
                    and len(encode_line(self.session.outline(message))) > MAX_WRITE):
                raise ValueError(f"{self.session.path}: the line of this message is "
                                 f"more than one write() can take ({MAX_WRITE} bytes)")
        self.messages.append(message)
        if self.session is not None:
            self.pending.append(message)

    def flush(self) -> None:
        """Write the pending messages to the log, oldest first."""
        while self.pending:
            self.session.append(self.pending[0])
            # Only once it is written: a failed write leaves it pending
            del self.pending[0]

    def ask_model(self) -> Message:
        """Send the conversation to the model; return its reply as it came, as a dict.

        Its fields hold whatever the server sent (an id may be None, arguments an
        object): normalize_reply() makes it a message to store.
        """
        self.flush()  # lesson 01's rule: every message is on disk before the model call
        # Lesson 08: the view of the log, within the budget
        messages = self.request_messages()
        response = self.client.chat.completions.create(
            model=self.model, messages=messages, tools=self.tools.schemas)
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
