# Lesson 10_sidechains, yours to edit: generated from
# solutions/10_sidechains/sidechain.py; `sessionlab reset 10` makes it again.
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
        # TODO(10.2): Claim the side-chain's name and leave a pointer in the parent's
        # log.
        # What it asks: `sessionlab task 10.2`. Hints: `sessionlab hint --task 10.2`.
        raise NotImplementedError(
            "task 10.2 is not written yet: Claim the side-chain's name and leave a "
            "pointer in the parent's log"
        )


class AgentHelpers:
    """Agent's helpers: the tool call ask_helper answered by an agent of its own."""

    # --- a helper with its own log (lesson 10) ----------------------------------------

    def use_tool(self, call: Message, asked: Message) -> str:
        """The content of the tool result that answers `call`, as run() records it.

        `call` is the call as stored (its id is the one the result answers), `asked`
        the same call as the model sent it.
        """
        # TODO(10.3): Run the helper: the same loop, its own history, its own log.
        # What it asks: `sessionlab task 10.3`. Hints: `sessionlab hint --task 10.3`.
        raise NotImplementedError(
            "task 10.3 is not written yet: Run the helper: the same loop, its own "
            "history, its own log"
        )

    def ask_helper(self, call_id: str, question: str) -> str:
        """Hand `question`, asked by tool call `call_id`, to a helper; its answer."""
        # TODO(10.3): Run the helper: the same loop, its own history, its own log.
        # What it asks: `sessionlab task 10.3`. Hints: `sessionlab hint --task 10.3`.
        raise NotImplementedError(
            "task 10.3 is not written yet: Run the helper: the same loop, its own "
            "history, its own log"
        )


def answer_of(helper: Any, question: str) -> str:
    """The answer of `helper` (an agent) to `question`, whole: AnswerCutOff when the
    server cut its last reply off at the length limit."""
    # TODO(10.3): Run the helper: the same loop, its own history, its own log.
    # What it asks: `sessionlab task 10.3`. Hints: `sessionlab hint --task 10.3`.
    raise NotImplementedError(
        "task 10.3 is not written yet: Run the helper: the same loop, its own history, "
        "its own log"
    )


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
    # TODO(10.1): Name a side-chain after its tool call.
    # What it asks: `sessionlab task 10.1`. Hints: `sessionlab hint --task 10.1`.
    raise NotImplementedError(
        "task 10.1 is not written yet: Name a side-chain after its tool call"
    )


def sidechains(folder: str | Path, session_id: str) -> list[tuple[str, Path]]:
    """(tool call id, side-chain log) for every pointer in the session's log, in
    order."""
    # TODO(10.4): Follow the pointers: which side-chains a session's calls started.
    # Your design: the whole function is yours to shape; the tests check only what it
    # does.
    # What it asks: `sessionlab task 10.4`. Hints: `sessionlab hint --task 10.4`.
    raise NotImplementedError(
        "task 10.4 is not written yet: Follow the pointers: which side-chains a "
        "session's calls started"
    )
