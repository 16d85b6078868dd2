# Generated from course/sidechain.py for lesson 11_postgres:
# edit that source, then run `sessionlab dev generate`.
"""A helper agent with a transcript of its own.

The agent answers the tool call `ask_helper` with a helper: the same loop, its own
conversation, its own log in `<parent id>.sidechains/`, its own lock. The parent's log
keeps a pointer marker to it, so the whole story can be followed from the parent.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .messages import check_session_id, InvalidSessionId, MARKER, Message
from .tools import Tools
from .reading import read_log


class SessionSidechains:
    """SessionLog's side-chains:
    a helper's log beside this one, and the pointer to it.
    """

    # --- side-chains: the logs of this session's helpers (lesson 10) ------------------

    def start_sidechain(self, call_id: str) -> "SessionLog":
        """Start the side-chain of the helper that answers tool call `call_id`.

        Returns the side-chain's SessionLog, already its writer (its lock taken);
        this log keeps its own lock all along.
        """
        from .messages import check_text, InvalidMessage
        # Its meta file and the pointer hold it as UTF-8: refused before either is
        # written (a model's reply with such an id never reaches the log). An id that
        # is no text at all is sidechain_id()'s to refuse.
        if isinstance(call_id, str):
            try:
                check_text(call_id)
            except InvalidMessage as error:
                raise InvalidMessage(f"{self.path}: the call id {call_id!r} names no "
                                     f"side-chain: {error}") from None
        if self._fd is None:
            self._open()    # the parent's writer: it alone names side-chains of its own
        folder = sidechain_folder(self.folder, self.id)
        if folder.is_symlink():
            # Planted, like a linked log or lock file: the helper's words would be
            # written wherever it points.
            raise OSError(errno.ELOOP, "the side-chains folder is a symbolic link; "
                          "refusing to write a helper's log through it", str(folder))
        base = sidechain_id(call_id)
        from .files import now, publish_new, SessionExists
        from .log import WriterStopped
        from .messages import encode_line, FORMAT_VERSION
        if self.in_doubt:
            # No pointer can be written: a name claimed now would be no one's
            raise WriterStopped(f"{self.path}: this writer has stopped (an earlier "
                                "write left the log in doubt), so it can point to no "
                                "side-chain; none was started")
        # An undone turn's call id can come back (the model numbers its calls): the
        # name then has a suffix, so a helper never writes into another one's log.
        number = 1
        while True:
            name = base if number == 1 else f"{base}.{number}"
            number += 1
            # Anything at the log's name takes it: a symbolic link too, even one that
            # leads nowhere (exists() would follow it and find nothing)
            if os.path.lexists(folder / f"{name}.jsonl"):
                continue
            meta = {"format": FORMAT_VERSION, "id": name, "sidechain_of": self.id,
                    "call": call_id, "created": now()}
            try:
                # Created, never replaced: a name that exists is another helper's
                publish_new(folder / f"{name}.meta.json",
                            json.dumps(meta, ensure_ascii=False, indent=1).encode(),
                            durable=self.durable)
            except SessionExists:
                continue
            break
        # Its lock from the claim on: no other process can take the side-chain
        # between the claim and the helper's first line.
        side = type(self)(folder, name, durable=self.durable)
        side._lock()
        try:
            # The pointer before the side-chain's log exists: a crash inside the helper
            # leaves the call (repaired on resume) and, beside it, where its work is,
            # and never a side-chain's log that nothing points to.
            self._write(encode_line({MARKER: "sidechain", "call": call_id,
                                     "session": self.id, "sidechain": name,
                                     "at": now()}))
            side._open()    # its writer, holding the lock already: the log is created
        except BaseException:
            side.close()    # no helper will write it: its lock goes
            raise
        return side


class AgentHelpers:
    """Agent's helpers: the tool call ask_helper answered by an agent of its own."""

    # --- a helper with its own log (lesson 10) ----------------------------------------

    def use_tool(self, call: Message, asked: Message) -> str:
        """The content of the tool result that answers `call`, as run() records it.

        `call` is the call as stored (its id is the one the result answers), `asked`
        the same call as the model sent it.
        """
        from .messages import read_arguments, reply_answer
        from .tools import MaxTurnsExceeded, run_tool
        # Offered is what the model was told it may call: the schemas it is sent
        offered = [schema.get("function", {}).get("name")
                   for schema in self.tools.schemas]
        if call["function"]["name"] != HELPER_TOOL or HELPER_TOOL not in offered:
            return run_tool(self.tools, asked)
        try:
            question = read_arguments(asked["function"]["arguments"]).get("question")
        except ValueError as error:
            return f"error: the arguments for {HELPER_TOOL} {error}; send a JSON object"
        if not isinstance(question, str) or not question.strip():
            return (f"error: {HELPER_TOOL} needs a 'question': what the helper should "
                    "find out, as text")
        try:
            answer = self.ask_helper(call["id"], question)
        except MaxTurnsExceeded as error:
            # The helper's own way of failing: the model hears it, as from any tool
            return f"error: the helper gave up: {error}"
        except AnswerCutOff as cut:
            try:
                said = f"; it had said: {reply_answer(cut.answer)}"
            except ValueError:
                said = ", before it said anything"
            return ("error: the helper's answer was cut off at the server's length "
                    f"limit, and its end is lost{said}")
        try:
            # Read as any reply passed on is (lesson 08's summary too): the parent's
            # model gets the answer, not the helper's thinking, and hears when there is
            # none. The helper's own log keeps its reply as it came.
            return reply_answer(answer)
        except ValueError as error:
            return f"error: the helper gave no answer: it sent {error}"

    def ask_helper(self, call_id: str, question: str) -> str:
        """Hand `question`, asked by tool call `call_id`, to a helper; its answer."""
        tools = without(self.tools, HELPER_TOOL)    # a helper starts no helper
        if self.session is None:
            # No log to point from: the helper lives in memory, like its parent
            helper = type(self)(self.client, model=self.model, tools=tools,
                                system=HELPER_SYSTEM, max_turns=self.max_turns,
                                budget=self.budget, reply_room=self.reply_room)
            return answer_of(helper, question)
        # The call is on disk already: run() writes it before any tool runs. The
        # side-chain's log is the helper's; this agent's session stays open, locked.
        with self.session.start_sidechain(call_id) as log:
            helper = type(self)(self.client, model=self.model, tools=tools, session=log,
                                system=HELPER_SYSTEM, max_turns=self.max_turns,
                                budget=self.budget, reply_room=self.reply_room)
            return answer_of(helper, question)


def answer_of(helper: Any, question: str) -> str:
    """The answer of `helper` (an agent) to `question`, whole: AnswerCutOff when the
    server cut its last reply off at the length limit."""
    answer = helper.run(question)
    if helper.cut_off:
        # It reads as whole, and the parent's model would take it so
        raise AnswerCutOff(answer)
    return answer


class AnswerCutOff(Exception):
    """A helper's last reply, cut off by the server at its length limit: `answer` is
    the text it got (its end is lost)."""

    def __init__(self, answer: str | None) -> None:
        super().__init__("the helper's answer was cut off at the server's length limit")
        self.answer = answer


# --- side-chains: a helper agent's own log (lesson 10) --------------------------------

HELPER_TOOL = "ask_helper"      # the tool whose call the agent answers with a helper


HELPER_SYSTEM = ("You are a helper. Work on the question with your tools, then answer "
                 "it in a few words: your answer is all the one who asked will see.")


SIDECHAINS = ".sidechains"      # `<parent id>.sidechains/` holds the helpers' logs


@dataclass
class Toolbox:
    """Tools as lesson 00's protocol wants them: schemas, and the functions by name."""

    schemas: list[dict[str, Any]]
    functions: Mapping[str, Callable[..., str]]


def without(tools: Tools, name: str) -> Toolbox:
    """The same tools, the same world (the town's own functions), but for `name`."""
    schemas = [schema for schema in tools.schemas
               if schema.get("function", {}).get("name") != name]
    functions = {key: function for key, function in tools.functions.items()
                 if key != name}
    return Toolbox(schemas, functions)


def sidechain_folder(folder: str | Path, session_id: str) -> Path:
    """`<folder>/<session id>.sidechains`: where the session's helpers keep their logs.

    A folder of its own: no side-chain can take a top-level session's name, and a
    listing of `*.jsonl` in the sessions folder never mistakes one for a session.
    """
    return Path(folder) / f"{check_session_id(session_id)}{SIDECHAINS}"


def sidechain_id(call_id: str) -> str:
    """The name of the side-chain of tool call `call_id`: the call id itself where it
    can be, so that a person can match the two; distinct for distinct calls."""
    import hashlib
    from .messages import SESSION_ID
    if not isinstance(call_id, str):
        # No text, no name: str() would give 7 the name of the call id "7"
        raise TypeError(f"a call id is text; got {call_id!r} "
                        f"({type(call_id).__name__}), which names no side-chain")
    # Kept as it is: a session id of at most 64 characters. A hashed name has 69
    # (call- and 64 digits), so no call id kept can be another call's hashed name.
    if len(call_id) <= 64 and SESSION_ID.fullmatch(call_id):
        return call_id
    digest = hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"call-{digest}"


def sidechains(folder: str | Path, session_id: str) -> list[tuple[str, Path]]:
    """(tool call id, side-chain log) for every pointer in the session's log, in
    order."""
    path = Path(folder) / f"{check_session_id(session_id)}.jsonl"
    state = read_log(path)
    found: list[tuple[str, Path]] = []
    for line, entry in zip(state.lines, state.entries):
        if entry.get(MARKER) != "sidechain":
            continue
        try:
            # The pointer's own session: a fork's copied pointers were written by its
            # source's helpers, in the source's folder
            where = sidechain_folder(folder, entry["session"])
            name = check_session_id(entry["sidechain"])
            call_id = entry["call"]
        except (KeyError, InvalidSessionId) as error:
            raise ValueError(f"{path}: line {line}: a side-chain pointer that names no "
                             f"side-chain ({error}); refusing to follow it") from None
        if not isinstance(call_id, str):
            raise ValueError(f"{path}: line {line}: a side-chain pointer whose call is "
                             f"{call_id!r}, not a call id; refusing it")
        found.append((call_id, where / f"{name}.jsonl"))
    return found
