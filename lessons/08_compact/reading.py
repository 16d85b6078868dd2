# Lesson 08_compact, yours to edit: generated from
# solutions/08_compact/reading.py; `sessionlab reset 08` makes it again.
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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .messages import (
    check_entry, MARKER, Message, parse_line, STRICT_JSON, SURROGATE_ESCAPE)
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


@dataclass(frozen=True)
class Compaction:
    """A compaction as the view needs it (lesson 08)."""

    # What the model wrote about everything before the boundary
    summary: str
    # Where the request starts again after the summary (see LogState.compaction)
    boundary: int


class EveryEntryShown(Sequence[tuple[int, int]]):
    """shown() of a log with no marker: message i is entry i, and every one is shown.

    It answers len() and [i] as the list [(0, 0), (1, 1), ...] would, without making it.
    For a log of 100,000 messages those 100,000 pairs cost more than a tenth of the
    read: Python's garbage collector goes over every object a program keeps, and that
    many more made it go over all of them once more.
    """

    def __init__(self, count: int) -> None:
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return zip(range(self.count), range(self.count))

    def __getitem__(self, index):   # an int, or a slice (Sequence asks for both)
        if isinstance(index, slice):
            return [(i, i) for i in range(*index.indices(self.count))]
        position = range(self.count)[index]     # IndexError, negative index, as a list
        return (position, position)


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
    # The line number (from 1) of each entry
    lines: list[int] = field(default_factory=list)
    # Where each entry's line ends, its "\n" included: the byte offset just after it
    ends: list[int] = field(default_factory=list)
    # Every entry is a message, its content in its line: no marker (so nothing undone),
    # no blob reference. (False when unknown.)
    plain: bool = False
    # shown(), once shown_once() has worked it out
    shown_memo: Sequence[tuple[int, int]] | None = field(default=None, repr=False)

    @property
    def messages(self) -> list[Message]:
        """The conversation: the messages the log shows (not undone), no markers."""
        return [self.entries[position] for _, position in self.shown()]

    def shown(self) -> list[tuple[int, int]]:
        """(index, position in entries) of every message not undone, in order.

        A message's index counts the messages before it in the file, undone ones
        included, from 0: it is fixed when its line is written, whatever comes later.
        Markers are not messages and have no index. An undo marker's "skip" lists
        indices to leave out.
        """
        messages: list[tuple[int, int]] = []
        skip: set[int] = set()
        for position, entry in enumerate(self.entries):
            if MARKER in entry:
                if entry[MARKER] == "undo":
                    # A marker takes back only messages written before it: an index
                    # at or after its own place (or below 0) names none it could have
                    # seen, and must never hide a message written, and shown, later.
                    skip.update(i for i in entry["skip"] if 0 <= i < len(messages))
                # A repair marker, or one this code does not know: not a message
                continue
            messages.append((len(messages), position))
        if not skip:
            return messages     # nothing undone, the usual case: every message is shown
        return [(index, position) for index, position in messages if index not in skip]

    def shown_once(self) -> Sequence[tuple[int, int]]:
        """shown(), worked out once: loading a log and remembering it need it both, and
        the state of a log as read never changes. (Not to be changed by the caller.)"""
        if self.shown_memo is None and self.plain:
            # No marker, so no undo: message i is entry i, and every one is shown
            self.shown_memo = EveryEntryShown(len(self.entries))
        if self.shown_memo is None:
            self.shown_memo = self.shown()
        return self.shown_memo

    @property
    def torn(self) -> int:
        """How many bytes at the end are not a complete entry (0 for a whole log)."""
        return self.size - self.end

    # --- lesson 08: the latest compaction -----------------------------------------

    def compaction(self) -> Compaction | None:
        """The latest compaction the log records, None if it records none: its summary,
        and its boundary, where the request starts again after the summary (task 08.1
        says in what it counts). A marker this store cannot have written (the format
        page says which) is no compaction; its summary was checked as it was recorded,
        and is read as it is.
        """
        # TODO(08.1): Keep the boundary in the log.
        # What it asks: `sessionlab task 08.1`. Hints: `sessionlab hint --task 08.1`.
        raise NotImplementedError(
            "task 08.1 is not written yet: Keep the boundary in the log"
        )


# --- what this process knows of the logs it has read or written -----------------------


@dataclass
class KnownLog:
    """Where a log's lines end and which messages it shows, as this process last saw it.

    Forking a session this process has read or written then needs no second read of
    it. A log's knowledge is kept by the file's identity (device and inode, see
    remember()) and is used only while the file has exactly the size and modification
    time it had then, the test make and rsync trust: a file changed behind the
    process's back, or replaced, is read again (recall()).

    One exception, for speed: a write of this process's writer leaves `mtime_ns` None
    rather than asking the system for the new time (an fstat() a line would cost an
    append a tenth of its time). The writer holds the session's lock, so no other
    writer may change the file; its size is checked as always, and the time is taken
    at the next recall() or when the writer closes.
    """

    # The file's size, and its modification time (None: see above), when this was true
    size: int
    mtime_ns: int | None
    # Where each entry's line ends, its "\n" included (LogState.ends)
    ends: list[int]
    # (index, position) of every message shown (LogState.shown_once())
    shown: Sequence[tuple[int, int]]
    # The last entry is complete, but its "\n" was never written
    newline_missing: bool = False
    # How many messages the log holds, undone ones included (None: not worked out)
    message_count: int | None = None
    # Known to end whole, with no tool call left open: a new writer has nothing to
    # repair, so it may start from this instead of reading the log (SessionLog._open)
    settled: bool = False
    # An undo marker of the log takes back a message that a message still shown came
    # after (see reaches_back): a fork may then have to replay what it copies
    reaches_back: bool = True
    # The latest compaction the log records (lesson 08), None if it records none; true
    # whenever message_count is worked out. A writer keeps it as it writes (a marker
    # it writes is the latest), so its undo knows the boundary without reading the log.
    compaction: Compaction | None = None


# (st_dev, st_ino) -> what is known of that file; the most recently used last
KNOWN_LOGS: dict[tuple[int, int], KnownLog] = {}


KNOWN_LOGS_KEPT = 8     # how many logs a process keeps knowing (the oldest go first)


def remember(status: os.stat_result, known: KnownLog) -> None:
    """Keep `known` as what is true of the file `status` describes, while unchanged."""
    key = (status.st_dev, status.st_ino)
    KNOWN_LOGS.pop(key, None)
    KNOWN_LOGS[key] = known
    while len(KNOWN_LOGS) > KNOWN_LOGS_KEPT:
        del KNOWN_LOGS[next(iter(KNOWN_LOGS))]


def recall(fd: int) -> KnownLog | None:
    """What is known of the file open as `fd`, if it is exactly as it was then."""
    status = os.fstat(fd)
    known = KNOWN_LOGS.get((status.st_dev, status.st_ino))
    if known is None or known.size != status.st_size:
        return None
    if known.mtime_ns is None:
        known.mtime_ns = status.st_mtime_ns     # this process's writer wrote last
    return known if known.mtime_ns == status.st_mtime_ns else None


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
    """read_whole_log() of the log open as `fd`. What it finds is remembered (see
    KnownLog) when the file did not change while it was read."""
    while True:     # a repair happens once per writer that opens the log: this ends
        before = os.fstat(fd)
        data = read_all(fd, path)
        after = os.fstat(fd)
        same_size = before.st_size == after.st_size == len(data)
        if same_size and before.st_mtime_ns == after.st_mtime_ns:
            # Nothing changed while we read: what we read is the file as `after` says
            state = parse_log(data, path)
            known = KnownLog(after.st_size, after.st_mtime_ns, state.ends,
                             state.shown_once(), state.newline_missing,
                             reaches_back=reaches_back(state))
            if state.plain:     # no marker: every entry is a message, the last one too
                known.message_count = len(state.entries)
                known.settled = not state.torn and not state.newline_missing and (
                    not state.entries or leaves_no_call_open(state.entries[-1]))
            remember(after, known)
            return data, state
        if read_all(fd, path).startswith(data):
            return data, parse_log(data, path)  # only appended to: a whole first part


def reaches_back(state: LogState) -> bool:
    """Whether an undo marker of the log takes back a message that a message still
    shown came after. This store's undo takes back the newest messages only; another
    program's may take back an older one, and its marker may then stand after a
    message a fork keeps, past the fork's cut."""
    if state.plain:
        return False    # no marker at all
    shown: list[int] = []
    written = 0
    for entry in state.entries:
        if MARKER not in entry:
            shown.append(written)
            written += 1
        elif entry[MARKER] == "undo":
            skip = {i for i in entry["skip"] if 0 <= i < written}
            taken = [index for index in shown if index in skip]
            if taken != shown[len(shown) - len(taken):]:
                return True
            del shown[len(shown) - len(taken):]
    return False


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
    end = data.rfind(b"\n") + 1     # the complete lines end here; the tail follows
    # Two ways to read the complete lines, one answer: the quick one reads a log as this
    # module writes it, and gives up (None) at anything else; the other goes line by
    # line, and names the line at fault.
    quick = read_lines_quickly(data, end)
    entries, numbers, ends, plain = quick or read_lines(data, end, path)
    state = LogState(entries, end=end, size=len(data), lines=numbers, ends=ends,
                     plain=plain)
    tail = data[end:]
    if tail:
        try:
            entry = parse_line(tail)
        except ValueError:
            if more_than_a_torn_line(tail):
                raise CorruptLog(path, data.count(b"\n") + 1, end,
                                 WHOLE_LINE_AND_MORE) from None
            return state        # torn: not an entry
        entries.append(entry)
        numbers.append(data.count(b"\n") + 1)
        ends.append(len(data))
        state.end = len(data)
        state.newline_missing = True
        state.plain = plain and is_plain(entry)
    return state


# The entries of a log's complete lines, their line numbers, where their lines end, and
# whether they are all plain (is_plain)
Lines = tuple[list[Message], list[int], list[int], bool]


def leaves_no_call_open(last: Message) -> bool:
    """Does a log whose last message is `last` surely have no tool call unanswered?
    (A tool result may answer only some of the calls: not surely.)"""
    return last.get("role") != "tool" and not last.get("tool_calls")


def is_plain(entry: Message) -> bool:
    """Is this entry a message whose content is in its line (no marker, no blob)?"""
    return MARKER not in entry and type(entry.get("content")) is not dict


def read_lines(data: bytes, end: int, path: Path) -> Lines:
    """The entries of the complete lines (up to `end`), one parse_line() a line, with
    their line numbers and where their lines end; CorruptLog for the first bad line."""
    # Split on b"\n" only:
    # str.splitlines() would also split inside strings at U+2028 & co.
    lines = data[:end].split(b"\n")[:-1]
    entries: list[Message] = []
    numbers: list[int] = []
    ends: list[int] = []
    offset = 0
    for number, line in enumerate(lines, start=1):
        if line:    # an empty line holds nothing to lose
            try:
                entries.append(parse_line(line))
            except ValueError as error:
                raise CorruptLog(path, number, offset, str(error)) from None
            numbers.append(number)
            ends.append(offset + len(line) + 1)
        offset += len(line) + 1
    return entries, numbers, ends, all(map(is_plain, entries))


# Bytes decoded at a time by read_lines_quickly(): a text of 1 MiB stays in the
# processor's cache while the decoder reads it; one text as large as the whole log
# would not (a quarter of the read's time, for a log of 100 MB)
QUICK_CHUNK = 1 << 20


def read_lines_quickly(data: bytes, end: int) -> Lines | None:
    """read_lines() for a log with nothing unusual in it, in fewer steps a line; None
    at the first unusual thing, refused or not.

    read_lines() decodes each line's bytes, checks them, then decodes its JSON: some
    twenty Python steps a line, as long as the decoding itself. Here the bytes are
    decoded and checked a piece of whole lines at a time, and the decoder reads each
    line where it is in the text (raw_decode(text, position)), then check_entry()
    checks it: what parse_line() does, in one pass. Whatever parse_line() refuses
    makes this return None, as do a few things it accepts (an empty line, spaces
    around a line's JSON, U+FEFF or a surrogate's escape anywhere); read_lines() then
    reads the log again and accepts, or names the line at fault, exactly as it always
    did.

    Why not one json.loads of b"[" + b",".join(lines) + b"]"? It is faster still, but
    the array's elements need not be the lines: a string or a list can run across the
    join, and `{...}, {...}` on one line makes up the count. Reading from where each
    line starts, finding a newline right where its JSON ends, and as many values as
    newlines in each piece, rules that out.
    """
    if SURROGATE_ESCAPE.search(data, 0, end):
        return None     # parse_line() checks those lines with check_plain_json()
    decode = STRICT_JSON.raw_decode
    entries: list[Message] = []
    ends: list[int] = []
    plain = True
    view = memoryview(data)
    base = offset = 0   # where the piece starts in the bytes; where the line does
    try:
        while base < end:
            # A piece of whole lines: up to the last newline in the next QUICK_CHUNK
            # bytes (or the first one after them, for a longer line). b"\n" is no part
            # of any other character's bytes in UTF-8, so a piece decodes on its own.
            cut = data.rfind(b"\n", base, min(base + QUICK_CHUNK, end)) + 1
            if cut <= base:
                cut = data.index(b"\n", base) + 1
            text = str(view[base:cut], "utf-8")
            if "\ufeff" in text:
                return None     # a byte-order mark, refused at the start of a line
            ascii = text.isascii()
            start, size = 0, len(text)
            lines = len(entries)
            while start < size:
                entry, stop = decode(text, start)
                if text[stop] != "\n":
                    return None     # something after the JSON: a space, a second value
                entries.append(check_entry(entry))
                # Checked here, while the entry is at hand: a later pass over all of
                # them would cost a tenth of the whole read
                if plain and not is_plain(entry):
                    plain = False
                # Where the line ends in the bytes: where it does in the text if the
                # piece is ASCII, else at least as far on (a character is 1 to 4 bytes)
                offset = (base + stop + 1 if ascii
                          else data.index(b"\n", offset + stop - start) + 1)
                ends.append(offset)
                start = stop + 1
            if len(entries) - lines != text.count("\n"):
                # Fewer values than lines: JSON ran across a newline (whitespace to
                # JSON, two lines to the log). One count a piece, not a search a line.
                return None
            base = cut
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None     # not UTF-8, a line that is not JSON, or no message
    return entries, list(range(1, len(entries) + 1)), ends, plain


def unanswered_calls(messages: list[Message]) -> list[Message]:
    """The tool calls that need a result before anything else can be sent, as the
    assistant message holds them, in the order the model made them ([]: none)."""
    answered: set[str] = set()
    for message in reversed(messages):
        if message.get("role") == "tool":
            answered.add(message.get("tool_call_id"))
        elif message.get("role") == "assistant" and message.get("tool_calls"):
            # Keep the calls' own order (a list, not a set):
            # results go back in call order.
            return [
                call for call in message["tool_calls"] if call["id"] not in answered
            ]
        else:
            return []
    return []


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
