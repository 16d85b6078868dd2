# Lesson 04_repair, yours to edit: generated from
# solutions/04_repair/reading.py; `sessionlab reset 04` makes it again.
"""Reading a log back: its lines, the state they describe, what a crash left.

A log is read as whole lines. The last one may be torn (the process died in the middle
of a write), and a tool call may have no result (it died between the two): both are
found here, and repaired by the session's writer. A corrupt line anywhere else is an
error naming the file and the line, and nothing is changed. From lesson 07 on, marker
lines (undo, compaction, side-chain pointers) shape what the log shows.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from .messages import MARKER, Message, parse_line
from .files import read_all


class CorruptLog(ValueError):
    """A whole line of the log is not a JSON message: the file was damaged.

    Damage is not a torn tail: guessing would hide it, so the error names the place,
    and nothing is changed.
    """

    def __init__(self, path: Path, line: int, offset: int, reason: str) -> None:
        super().__init__(
            f"{path}: line {line} (byte offset {offset}) is not a JSON message: "
            f"{reason}. Only the last line of a log can be torn by a crash, so this is "
            "damage, not a crash; the log was left exactly as it is. Look at that "
            "line, mend or remove it by hand, and resume again."
        )
        self.path = path
        self.line = line        # 1 for the first line
        # Bytes from the start of the file to the start of that line
        self.offset = offset


# What CorruptLog says of a tail that more_than_a_torn_line() judges
WHOLE_LINE_AND_MORE = ("it holds a whole JSON value with more after it, which no crash "
                       "leaves (a line is written with its newline)")


def more_than_a_torn_line(tail: bytes) -> bool:
    """Do these bytes after a log's last newline, which are no entry, hold more than a
    crash can leave there?

    A crash cuts one write short, and every line is written with its newline, so what
    it leaves after the last newline is the start of one line: never a whole JSON value
    with more after it (two lines joined, lines that a bare carriage return ends, as
    another program may write them). Cut as torn, those would take whole messages with
    them. Zero bytes after a whole value are no more: a file system may allocate a
    block that the crash kept it from writing.
    """
    text = tail.decode("utf-8", "replace").lstrip(" \t\r")
    try:
        _, end = json.JSONDecoder().raw_decode(text)
    except (ValueError, RecursionError):
        return False        # no whole value: the start of a line, cut short
    return bool(text[end:].strip(" \t\r\x00"))


@dataclass
class LogState:
    """What reading a log found: its complete entries, and the state of its tail."""

    # Every complete line, messages and markers, in file order
    entries: list[Message]
    # Where the complete lines end: the next line should start here
    end: int
    # The file's size when it was read; bytes past `end` are torn
    size: int
    # The last entry is complete, only its "\n" never got written
    newline_missing: bool = False

    @property
    def messages(self) -> list[Message]:
        """The conversation: the entries without the markers."""
        return [entry for entry in self.entries if MARKER not in entry]

    @property
    def torn(self) -> int:
        """How many bytes at the end are not a complete entry (0 for a whole log)."""
        return self.size - self.end


def read_whole_log(path: Path) -> tuple[bytes, LogState]:
    """A log's bytes and their parse_log(), as one moment of the file, read without the
    lock. FileNotFoundError if there is no log.

    A writer may append, or repair the tail, while a reader reads. An append only adds
    bytes after the ones read. A repair replaces a torn tail with its marker, so a read
    that straddles it can hold the old tail's first bytes followed by the end of the
    marker: a false CorruptLog, or even a message nobody wrote. So when the
    file changed during the read, read it again, and keep the first read only if the
    file still starts with it (it was only appended to).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        return read_open_log(fd, path)
    finally:
        os.close(fd)


def read_open_log(fd: int, path: Path) -> tuple[bytes, LogState]:
    """read_whole_log() of the log open as `fd`."""
    while True:     # a repair happens once per writer that opens the log: this ends
        before = os.fstat(fd)
        data = read_all(fd, path)
        after = os.fstat(fd)
        same_size = before.st_size == after.st_size == len(data)
        if same_size and before.st_mtime_ns == after.st_mtime_ns:
            return data, parse_log(data, path)  # nothing changed while we read
        if read_all(fd, path).startswith(data):
            return data, parse_log(data, path)  # only appended to: a whole first part


def read_log(path: Path) -> LogState:
    """Read a log without changing it; an empty state for a log not written yet."""
    try:
        return read_whole_log(path)[1]     # read-only: reading never changes the log
    except FileNotFoundError:
        return LogState(entries=[], end=0, size=0)


def parse_log(data: bytes, path: Path) -> LogState:
    """The LogState of a log's bytes, read from the file `path` (named in errors).

    What a crash can leave is forgiven; damage raises CorruptLog (task 04.1 says which
    is which). It only reads.
    """
    # TODO(04.1): Read a log strictly, but forgive a torn tail.
    # What it asks: `sessionlab task 04.1`. Hints: `sessionlab hint --task 04.1`.
    raise NotImplementedError(
        "task 04.1 is not written yet: Read a log strictly, but forgive a torn tail"
    )


def unanswered_calls(messages: list[Message]) -> list[Message]:
    """The tool calls that need a result before anything else can be sent, as the
    assistant message holds them, in the order the model made them ([]: none)."""
    # TODO(04.2): Find the tool calls that never got a result.
    # Your design: the whole function is yours to shape; the tests check only what it
    # does.
    # What it asks: `sessionlab task 04.2`. Hints: `sessionlab hint --task 04.2`.
    raise NotImplementedError(
        "task 04.2 is not written yet: Find the tool calls that never got a result"
    )


def interrupted_result(call: Message) -> Message:
    """The tool result that stands in for one a crash never wrote."""
    function = call["function"]
    # Say what is known and no more: the call was made; whether it ran is unknown, and
    # buying the lantern twice costs twice, so the model should check rather than
    # repeat.
    return {
        "role": "tool",
        "tool_call_id": call["id"],
        "content": (
            f"error: the call {function['name']}({function['arguments']}) was "
            "interrupted: the session stopped before its result was saved, so it may "
            "or may not have run. Check before calling it again."
        ),
    }


def unstarted_result(call: Message) -> Message:
    """The tool result for a call that is known never to have started."""
    function = call["function"]
    return {
        "role": "tool",
        "tool_call_id": call["id"],
        "content": (
            f"error: the call {function['name']}({function['arguments']}) did not "
            "run: the run stopped before it started. Call it again if it is still "
            "needed."
        ),
    }
