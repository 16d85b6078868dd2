# Generated from course/undo.py for lesson 07_undo:
# edit that source, then run `sessionlab dev generate`.
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
        # BEGIN 07.1
        if self._fd is None:
            if not self.path.exists():
                # No log, no message to take back: becoming the writer would create
                # the log and its lock file for a refusal
                raise UndoError(f"cannot undo {count} message(s) of session "
                                f"{self.id!r}: it has no log yet ({self.path})")
            # The writer first: its repair may add messages to the end, and it fills
            # self.shown from the log it opened.
            self._open()
        shown = self.shown
        if not 0 < count <= len(shown):
            raise UndoError(
                f"cannot undo {count} message(s) of {self.path}: it shows {len(shown)}"
            )
        if seen is not None and seen != len(shown):
            raise UndoError(
                f"cannot undo {count} message(s): {self.path} shows {len(shown)} "
                f"where the caller saw {seen}, so another writer has changed it since "
                "and its last messages may not be the caller's. Resume the session to "
                "see it as it is, then undo"
            )
        skip = [index for index, _ in shown[len(shown) - count:]]
        self._write(encode_line({MARKER: "undo", "skip": skip, "at": now()}))
        del shown[len(shown) - count:]      # only once the marker is written
        return skip
        # END 07.1


class AgentUndo:
    """Agent's undo: whole turns taken back, from the buffer or by a marker."""

    def undo(self, turns: int = 1) -> list[Message]:
        """Take back the last `turns` turns and return the messages taken back.

        A turn is a user message and everything after it up to the next user message, so
        a tool call is never taken back without its results. Raises UndoError,
        changing nothing, when the conversation has fewer turns, or when the log shows
        more than this agent wrote (another writer's turn is not its to take back).
        """
        # BEGIN 07.3
        # A run stopped with calls open, its log closed since: the undo's takeover
        # repairs them (lesson 04). Take the log back first, as run does, so that the
        # agent holds what that repair wrote: else the log shows more than it saw.
        self.take_log_back()
        starts = [i for i, m in enumerate(self.messages) if m.get("role") == "user"]
        if not 0 < turns <= len(starts):
            raise UndoError(
                f"cannot undo {turns} turn(s): the conversation has {len(starts)}"
            )
        cut = starts[len(starts) - turns]
        taken = self.messages[cut:]
        # The newest messages are the pending ones:
        # for them, dropping is the whole undo.
        dropped = min(len(taken), len(self.pending))
        written = len(taken) - dropped
        if written and self.session is not None:
            self.session.undo(written, seen=len(self.messages) - len(self.pending))
        del self.pending[len(self.pending) - dropped:]
        del self.messages[cut:]
        return taken
        # END 07.3
