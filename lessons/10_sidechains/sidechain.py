# Lesson 10_sidechains, yours to edit: generated from
# solutions/10_sidechains/sidechain.py; `sessionlab reset 10` makes it again.
"""A helper agent with a transcript of its own.

The agent answers the tool call `ask_helper` with a helper: the same loop, its own
conversation, its own log in `<parent id>.sidechains/`, its own lock. The parent's log
keeps a pointer marker to it, so the whole story can be followed from the parent.
"""

from __future__ import annotations

import errno
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .messages import (
    check_session_id, encode_line, FORMAT_VERSION, InvalidSessionId, MARKER, Message,
    read_arguments, reply_answer, SESSION_ID)
from .files import now, publish_new, SessionExists
from .tools import MaxTurnsExceeded, run_tool, Tools
from .reading import read_log


class SessionSidechains:
    """SessionLog's side-chains:
    a helper's log beside this one, and the pointer to it.
    """

    # --- side-chains: the logs of this session's helpers (lesson 10) ------------------

    def start_sidechain(self, call_id: str) -> "SessionLog":
        """Start the side-chain of the helper that answers tool call `call_id`.

        The helper gets a name of its own in `<id>.sidechains/`, with its meta file,
        this log a pointer marker to it; returns the side-chain's SessionLog: a writer
        of its own, with its own lock. This log keeps its lock all along.
        """
        if self._fd is None:
            self._open()    # the parent's writer: it alone names side-chains of its own
        folder = sidechain_folder(self.folder, self.id)
        if folder.is_symlink():
            # Planted, like a linked log or lock file: the helper's words would be
            # written wherever it points.
            raise OSError(errno.ELOOP, "the side-chains folder is a symbolic link; "
                          "refusing to write a helper's log through it", str(folder))
        base = sidechain_id(call_id)
        # TODO(10.2): Claim the side-chain's name and leave a pointer in the parent's
        # log.
        # Hints: `sessionlab hint --task 10.2`; the docs page of lesson 10_sidechains.
        raise NotImplementedError(
            "task 10.2 is not written yet: Claim the side-chain's name and leave a "
            "pointer in the parent's log"
        )


class AgentHelpers:
    """Agent's helpers: the tool call ask_helper answered by an agent of its own."""

    # --- a helper with its own log (lesson 10) ----------------------------------------

    def use_tool(self, call: Message, asked: Message) -> str:
        """The result of one tool call: run_tool's, or a helper's answer to ask_helper.

        `call` is the stored call (its id is the one the result answers), `asked` the
        call as the model sent it. The helper runs only when the tools offer ask_helper:
        an agent given the town of lessons 00-07 behaves as it did. The helper's answer
        is its last reply without thinking; one that gives none (no text, only
        thinking, a call written as text) becomes an error result saying what it was.
        """
        if (call["function"]["name"] != HELPER_TOOL
                or HELPER_TOOL not in self.tools.functions):
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
        try:
            # Read as any reply passed on is (lesson 08's summary too): the parent's
            # model gets the answer, not the helper's thinking, and hears when there is
            # none. The helper's own log keeps its reply as it came.
            return reply_answer(answer)
        except ValueError as error:
            return f"error: the helper gave no answer: it sent {error}"

    def ask_helper(self, call_id: str, question: str) -> str:
        """Hand `question` to a helper agent and return its answer.

        The helper is this same loop with a history of its own: the same client, model
        and tools (ask_helper left out: a helper starts no helper of its own). With a
        session, its messages go to a side-chain log of their own, under its own lock,
        while this agent keeps its lock; the parent's log gets only a pointer to it
        and the answer as the result.
        """
        tools = without(self.tools, HELPER_TOOL)
        # TODO(10.3): Run the helper: the same loop, its own history, its own log.
        # Hints: `sessionlab hint --task 10.3`; the docs page of lesson 10_sidechains.
        raise NotImplementedError(
            "task 10.3 is not written yet: Run the helper: the same loop, its own "
            "history, its own log"
        )


# --- side-chains: a helper agent's own log (lesson 10) --------------------------------

HELPER_TOOL = "ask_helper"      # the tool whose call the agent answers with a helper


HELPER_SYSTEM = ("You are a helper. Work on the question with your tools, then answer "
                 "it in a few words: your answer is all the one who asked will see.")


SIDECHAINS = ".sidechains"      # `<parent id>.sidechains/` holds the helpers' logs


LONGEST_KEPT = 64   # a call id longer than this is hashed (hashed names are longer)


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
    """A session id for the helper of tool call `call_id`, distinct for distinct calls.

    A call id comes from the model's server: most are plain names (`call_3_0`), kept as
    they are so a person can match a side-chain to its call. Any other (a ':' or a '/'
    in it, or too long) becomes `call-` and its sha256.
    """
    # TODO(10.1): Name a side-chain after its tool call.
    # Hints: `sessionlab hint --task 10.1`; the docs page of lesson 10_sidechains.
    raise NotImplementedError(
        "task 10.1 is not written yet: Name a side-chain after its tool call"
    )


def sidechains(folder: str | Path, session_id: str) -> list[tuple[str, Path]]:
    """(tool call id, side-chain log) for every pointer in the session's log, in order.

    For a fork too: its copied pointers lead to the logs its source's helpers wrote. A
    pointer that names no valid id is refused with the log's name and line, never
    followed out of the folder.
    """
    # TODO(10.4): Follow the pointers: which side-chains a session's calls started.
    # Your design: the whole function is yours to shape; the tests check only what it
    # does.
    # Hints: `sessionlab hint --task 10.4`; the docs page of lesson 10_sidechains.
    raise NotImplementedError(
        "task 10.4 is not written yet: Follow the pointers: which side-chains a "
        "session's calls started"
    )
