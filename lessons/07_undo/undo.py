# Lesson 07_undo, yours to edit: generated from
# solutions/07_undo/undo.py; `sessionlab reset 07` makes it again.
"""Undo on an append-only log.

A message not yet written is taken back for free; one already in the file is hidden by a
marker line that lists it, so the bytes already written never change. A whole turn goes
at once: a tool call never loses its results.
"""

from __future__ import annotations


from .messages import encode_line, MARKER, Message
from .files import now


class UndoError(ValueError):
    """Asked to undo more turns (or messages) than there are: nothing was changed."""


class SessionUndo:
    """SessionLog's undo: a marker that hides messages already written."""

    def undo(self, count: int, seen: int | None = None) -> list[int]:
        """Take back the last `count` messages the log shows, with one marker line.

        Returns their indices. Their lines stay where they are: the file is only ever
        appended to, and the marker tells every later reader to leave them out.
        `seen`, when given, is how many messages the caller last saw the log show (an
        agent: those it resumed and wrote). A log showing another number was written
        since by someone else, and its last messages are not the caller's to take back:
        the undo is refused, and nothing is written.
        """
        # TODO(07.1): Take back written messages: a marker line, and a replay that obeys
        # it.
        # Your design: the whole function is yours to shape; the tests check only what
        # it does.
        # What it asks: `sessionlab task 07.1`. Hints: `sessionlab hint --task 07.1`.
        raise NotImplementedError(
            "task 07.1 is not written yet: Take back written messages: a marker line, "
            "and a replay that obeys it"
        )


class AgentUndo:
    """Agent's undo: whole turns taken back, from the buffer or by a marker."""

    def undo(self, turns: int = 1) -> list[Message]:
        """Take back the last `turns` turns and return the messages taken back.

        A turn is a user message and everything after it up to the next user message, so
        a tool call is never taken back without its results. Raises UndoError,
        changing nothing, when the conversation has fewer turns, or when the log shows
        more than this agent wrote (another writer's turn is not its to take back).
        """
        # TODO(07.3): Find the last n turns and take them back, whole.
        # Your design: the whole function is yours to shape; the tests check only what
        # it does.
        # What it asks: `sessionlab task 07.3`. Hints: `sessionlab hint --task 07.3`.
        raise NotImplementedError(
            "task 07.3 is not written yet: Find the last n turns and take them back, "
            "whole"
        )
