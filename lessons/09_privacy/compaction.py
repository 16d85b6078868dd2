# Lesson 09_privacy, yours to edit: generated from
# solutions/09_privacy/compaction.py; `sessionlab reset 09` makes it again.
"""The request is a view of the log.

When the next request would not fit the model's window, the older part of the
conversation is summarised by one model call and a compaction marker records the
summary. The log keeps every message; only what is sent shrinks. The summary is checked
before anything records it: every later request is built on it.
"""

from __future__ import annotations

import json
from typing import Any

from .messages import Message, normalize_reply, reply_answer
from .reading import LogState


class ContextOverflow(RuntimeError):
    """Even after compaction the next request is larger than the budget: the turn in
    progress alone does not fit. Nothing was lost: the log holds every message."""


class BadSummary(ValueError):
    """The model's reply to a summary request gives no summary to record. It says what
    the model sent. Nothing was compacted and nothing written."""


def compaction_marker(state: LogState, keep: int, summary: str, where: object
                      ) -> Message:
    """The compaction marker that records `summary` standing for every message `state`
    shows but the last `keep`, as LogState.compaction() reads it back. ValueError,
    naming `where`, for a `keep` the log does not show. The file store and the database
    store write the same marker.

    ValueError too for a `summary` that is not what check_summary() returns (through
    reply_answer): a store never records a reply that no check has read.
    """
    try:
        checked = reply_answer(summary)
    except ValueError as error:
        raise ValueError(f"refusing to record a compaction of {where} whose summary is "
                         f"{error}: a summary is the text check_summary() returns"
                         ) from None
    if checked != summary:
        raise ValueError(f"refusing to record a compaction of {where} whose summary "
                         "is not what a check of it returns (that would be "
                         f"{checked[:60]!r}): a summary is the text check_summary() "
                         "returns")
    from .files import now
    from .messages import MARKER
    shown = state.shown()
    if not 0 <= keep <= len(shown):
        raise ValueError(f"cannot keep {keep} message(s) of {where} after a "
                         f"compaction: it shows {len(shown)}")
    written = sum(MARKER not in entry for entry in state.entries)
    upto = shown[len(shown) - keep][0] if keep else written
    return {MARKER: "compaction", "summary": summary, "upto": upto, "at": now()}


class SessionCompaction:
    """SessionLog's compaction marker:
    the summary that replaces the older part of a request.
    """

    # --- lesson 08: a compaction marker -----------------------------------------------

    def compact(self, summary: str, keep: int) -> int:
        """Record that `summary` stands for every message the log shows but the last
        `keep`, with one marker line (compaction_marker). Returns the marker's "upto".
        No message is removed: the log stays the whole truth, and the summary only
        changes what is sent.
        """
        from .files import read_all
        from .messages import encode_line
        from .reading import parse_log
        if self._fd is None:
            if not self.path.exists():
                # No log, no message a summary could stand for: becoming the writer
                # would create the log and its lock file for a refusal
                raise ValueError(f"cannot compact session {self.id!r}: it has no log "
                                 f"yet ({self.path})")
            self._open()  # the writer first: its repair may add messages to the end
        # A compaction is rare (it costs a model call): reading the log again, through
        # the writer's own descriptor, costs little beside it and keeps this plain.
        state = parse_log(read_all(self._fd, self.path), self.path)
        marker = compaction_marker(state, keep, summary, self.path)
        self._write(encode_line(marker))
        return marker["upto"]


# --- lesson 08: sizes and summaries ---------------------------------------------------

# Tokens the budget keeps free for the model's answer: a request that fills the window
# leaves the model no room to reply.
REPLY_ROOM = 512


SUMMARY_PROMPT = (
    "Summarise the conversation below for whoever continues it: the goal, what was "
    "said and decided, what the tools did and returned (people met, items bought, "
    "gold left), and what is still open. Plain sentences, no more than a page."
)


# Added to the instruction when the first reply could not be used: what was wrong
FIRMER = ("Your last reply could not be used as the summary: it was {problem}. Reply "
          "with the summary itself, in plain sentences: no tool call, no JSON, no "
          "<think> block.")


# What the request shows before the summary, so the model reads it as one.
SUMMARY_INTRO = "(The conversation so far, summarised to fit the window.)\n"


def estimate_tokens(value: Any) -> int:
    """About how many tokens `value` costs a model: the bytes of its JSON, / 4.

    Every model has its own tokenizer, and the exact count is only known once the
    server answers. Four bytes a token is the usual rule of thumb for English text; the
    JSON counts the roles, ids and quotes the server tokenizes too. It counts low for
    scripts of three bytes a character: Chinese runs about a token a character, which
    bytes / 4 counts as three quarters of one. `reply_room` is the margin.
    """
    data = json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return (len(data) + 3) // 4


def summary_prompt(room: int | None, problem: str | None = None) -> str:
    """The summary request's instruction: SUMMARY_PROMPT, the length `room` (estimated
    tokens) allows, and, after a reply that could not be used, what was wrong with
    it."""
    prompt = SUMMARY_PROMPT
    if room is not None:
        # About 1.5 estimated tokens a word: a word and its space are about 6 bytes
        prompt += f" Use at most {max(room * 2 // 3, 1)} words."
    if problem is not None:
        prompt += " " + FIRMER.format(problem=problem)
    return prompt


def check_summary(reply: Message) -> str:
    """The summary a reply to the summary request gives, ready to record. BadSummary,
    whose message is a phrase saying what the model sent instead, for a reply that
    gives none. `reply` is normalized (normalize_reply), with the server's
    "finish_reason" beside it, as ask_for_summary returns it."""
    calls = reply.get("tool_calls") or []
    if calls:
        names = ", ".join(str(call["function"]["name"]) for call in calls)
        raise BadSummary(f"a call to {names} instead of text")
    try:
        answer = reply_answer(reply.get("content"))
    except ValueError as error:
        raise BadSummary(str(error)) from None
    if reply.get("finish_reason") == "length":
        raise BadSummary("a summary the server cut off at its length limit, whose "
                         "end was lost")
    return answer


def transcript(summary: str | None, messages: list[Message]) -> str:
    """The conversation as plain text, a line a message, for the summary request."""
    lines = [f"[summary of what came before] {summary}"] if summary else []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):   # parts: keep their text
            content = " ".join(str(part.get("text", "")) for part in content
                               if isinstance(part, dict))
        role = message.get("role")
        if content:
            lines.append(f"[{role}] {content}")
        for call in message.get("tool_calls") or []:
            function = call["function"]
            lines.append(f"[{role} calls] {function['name']}({function['arguments']})")
    return "\n".join(lines)


class AgentCompaction:
    """Agent's requests as a view of the log: what is sent, and when to compact."""

    # --- lesson 08: the request is a view -----------------------------------------

    def view(self) -> list[Message]:
        """The messages of the next request, as the conversation and its compaction
        (if any) stand. `self.messages` is never cut."""
        system = [{"role": "system", "content": self.system}] if self.system else []
        if self.compaction is None:
            return system + self.messages
        summary = {"role": "user", "content": SUMMARY_INTRO + self.compaction.summary}
        return system + [summary] + self.messages[self.compaction.boundary:]

    def request_size(self, messages: list[Message]) -> int:
        """The estimated tokens a request with these messages needs: the messages, the
        tools' schemas (sent with every request) and the room left for the reply."""
        return (estimate_tokens(messages) + estimate_tokens(self.tools.schemas)
                + self.reply_room)

    def request_messages(self) -> list[Message]:
        """The next request's messages, within the budget: compacted first when the view
        is over it. ContextOverflow when it cannot be brought within the budget."""
        messages = self.view()
        if self.budget is None or self.request_size(messages) <= self.budget:
            return messages
        compacted = self.compact()
        messages = self.view()
        if not compacted or self.request_size(messages) > self.budget:
            raise ContextOverflow(
                f"the next request needs about {self.request_size(messages)} tokens, "
                f"more than the budget of {self.budget}, even with everything before "
                "the turn in progress summarised: that turn alone does not fit. "
                "Nothing was lost (the log holds every message): undo the turn, or "
                "raise the budget"
            )
        return messages

    def compact(self) -> bool:
        """Summarise what the request can do without and make that the view, in this
        process and in the log. True if it did; False, changing nothing, if no summary
        could make the request smaller. BadSummary, changing nothing, when the model
        gave no summary that can be recorded.
        """
        from .reading import Compaction
        start = self.compaction.boundary if self.compaction is not None else 0
        # The marker counts the log's messages from its end: write the pending ones.
        self.flush()
        starts = [i for i, m in enumerate(self.messages)
                  if m.get("role") == "user" and i > start]
        if not starts:
            return False
        cut = starts[-1]
        room = self.summary_room(cut)
        if room is not None and room <= 0:
            return False    # the turn in progress alone fills the budget
        summary = self.summarise(self.messages[start:cut], cut)
        if self.session is not None:
            self.session.compact(summary, keep=len(self.messages) - cut)
        self.compaction = Compaction(summary, cut)
        return True

    def summary_room(self, cut: int) -> int | None:
        """About how many tokens the budget leaves a summary when the request keeps the
        messages from `cut` on (None: no budget)."""
        if self.budget is None:
            return None
        return self.budget - self.compacted_size("", cut)

    def compacted_size(self, summary: str, cut: int) -> int:
        """The estimated size (request_size) of the next request once a compaction at
        place `cut` with this summary is made. Asked before the summary exists (how
        long may it be?) and of the model's reply (does it fit?), so it must be the
        size that request will have when it is sent."""
        system = [{"role": "system", "content": self.system}] if self.system else []
        intro = {"role": "user", "content": SUMMARY_INTRO + summary}
        return self.request_size(system + [intro] + self.messages[cut:])

    def check_fits(self, summary: str, cut: int) -> str:
        """`summary`, if the request it would begin is within the budget; BadSummary,
        blaming the summary's length, if not."""
        size = self.compacted_size(summary, cut)
        if self.budget is not None and size > self.budget:
            room = max(self.summary_room(cut) or 0, 0)
            raise BadSummary(
                f"a summary of about {estimate_tokens(summary)} tokens, too long: the "
                f"budget of {self.budget} leaves a summary about {room} beside the "
                f"turn in progress (with this one the request would need {size})")
        return summary

    def ask_for_summary(self, prompt: str, conversation: str) -> Message:
        """One model call: `prompt` as the system message, the conversation as text in
        one user message, with no tools. The reply, normalized (normalize_reply), with
        the server's "finish_reason" beside it ("length" when the server cut the reply
        off at its limit on tokens)."""
        response = self.client.chat.completions.create(
            model=self.model,
            messages=[{"role": "system", "content": prompt},
                      {"role": "user", "content": conversation}])
        choice = response.choices[0]
        reply = choice.message
        calls = [{"id": c.id, "function": {"name": c.function.name,
                                           "arguments": c.function.arguments}}
                 for c in reply.tool_calls or []]
        message = normalize_reply({"content": reply.content, "tool_calls": calls}, [])
        # Only the server knows that it stopped mid-sentence: a cut summary reads as
        # a whole one, so the reason goes along for check_summary to judge.
        return {**message, "finish_reason": choice.finish_reason}

    def summarise(self, messages: list[Message], cut: int) -> str:
        """A checked summary of the previous summary (if any) and `messages`, which
        leaves the request from `cut` on within the budget.

        The conversation goes as text in one user message, with no tools: no provider
        can refuse the request for a tool exchange (pi does the same). A model may still
        answer with no summary: such a reply is never returned, so nothing records it.
        BadSummary, saying what the model sent, when no summary came.
        """
        earlier = self.compaction.summary if self.compaction is not None else None
        conversation = transcript(earlier, messages)
        room = self.summary_room(cut)
        refused: list[str] = []
        for _ in range(2):      # the first request, then one more, firmer
            prompt = summary_prompt(room, refused[-1] if refused else None)
            reply = self.ask_for_summary(prompt, conversation)
            try:
                return self.check_fits(check_summary(reply), cut)
            except BadSummary as error:
                refused.append(str(error))
        again = "the same" if refused[1] == refused[0] else refused[1]
        raise BadSummary(f"the model answered the summary request with {refused[0]}; "
                         f"asked again more firmly, with {again}. Nothing was "
                         "compacted, and the log holds every message")
