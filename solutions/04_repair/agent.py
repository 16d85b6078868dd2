"""Session Lab, lesson 04: repair a session on resume.

A crash does not wait for a line to be finished. The log can end in half a line (the
process died in the middle of a write) or in a tool call whose result was never saved
(it died between the call and the result). Sent as it is, such a history is refused by
every provider (HTTP 400). So the writer that resumes a session checks the tail first: a
torn last line is cut off, and every unanswered tool call gets a result saying it was
interrupted, written to the log once, after a `{"$marker": "repair"}` line. A corrupt
line before the tail is not a crash but damage: reading stops with CorruptLog, naming
the file, line and byte offset, and nothing on disk changes.
"""

from __future__ import annotations

import json
import errno
import os
import re
import stat
import tempfile
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from collections.abc import Callable, Mapping
from typing import Any, Protocol

Message = dict[str, Any]


class Tools(Protocol):
    """What the agent needs from its tools (the town provides exactly this)."""

    # Told to the model with every request
    schemas: list[dict[str, Any]]
    # Tool name -> the function that runs it
    functions: Mapping[str, Callable[..., str]]


class MaxTurnsExceeded(RuntimeError):
    """The model kept calling tools and never gave a plain answer."""


class InvalidSessionId(ValueError):
    """A session id that could escape the sessions folder, or no usable file name."""


class InvalidMessage(ValueError):
    """Not a message the log can hold (see check_message). append() refuses it and
    writes nothing; a line holding one is refused when the log is read."""


class WriterStopped(RuntimeError):
    """An earlier write of this writer failed, leaving the end of the log unknown.

    Maybe the line is in the file, maybe part of it, maybe none: a retry could write a
    message twice. So the writer refuses every later write. Open the session again (a
    new SessionLog, a new Agent): what is really in the log is then read back.
    """


class SessionNotFound(FileNotFoundError):
    """The session to fork from has no log."""


class SessionExists(FileExistsError):
    """The new session's id is already taken."""


class CorruptLog(ValueError):
    """A line before the log's last one is not a JSON message: the file was damaged.

    A crash can only tear the *last* line (every line is written by one append at the
    end), so damage anywhere else means something else wrote to the file. Guessing would
    hide it: the error names the place, and nothing is changed.
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


# Letters, digits, '.', '_' and '-', starting with a letter or digit: no '/', no '..',
# no NUL, nothing hidden, and short enough for any file system once '.meta.json' is
# added.
SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_session_id(session_id: str) -> str:
    """Return the id unchanged if it is a safe file name, else raise InvalidSessionId.

    A session id often comes from a user or a URL. Used as a path, `../../etc/passwd` or
    `/tmp/x` would read or write outside the sessions folder, so refuse anything that is
    not a plain name, before any file is touched.
    """
    if not isinstance(session_id, str) or not SESSION_ID.fullmatch(session_id):
        shown = (
            repr(session_id)
            if len(str(session_id)) <= 140
            else repr(str(session_id)[:40]) + "..."
        )
        raise InvalidSessionId(
            f"invalid session id {shown}: use 1 to 128 letters, digits, '.', '_' or "
            "'-', starting with a letter or digit (no '/', no '..', no spaces)"
        )
    return session_id


# --- what a message may be ------------------------------------------------------------

# The roles a chat request may carry. A message with another role (or none) would be
# refused by the provider with every later request, so the log refuses it first.
ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_DEPTH = 64      # how deep a message may nest: none needs more, json reads deeper
RESERVED = ("$marker", "$blob")     # the log's own keys: a marker, a stored content


def check_message(message: Any) -> None:
    """Raise InvalidMessage, saying why, unless `message` has the shape of a message.

    One rule, kept at both ends: append() checks it before it writes anything, and
    reading checks every line against it, so a line that reading would refuse is never
    written. The keys in RESERVED belong to the log itself (markers and blob
    references, lessons 04 and 06): a message may not have them, and its content is
    text, a list of parts or null, never an object, so nothing can pose as one.
    """
    if not isinstance(message, dict):
        raise InvalidMessage(f"it is a {type(message).__name__}, not a JSON object")
    role = message.get("role")
    if role not in ROLES:
        raise InvalidMessage("it has no 'role'" if role is None else
                             f"its role {role!r} is none of {', '.join(ROLES)}")
    for key in RESERVED:
        if key in message:
            raise InvalidMessage(f"it has the key {key!r}, which belongs to the log "
                                 "itself (a marker, a blob reference), not to messages")
    content = message.get("content")
    text_or_parts = isinstance(content, (str, list))
    if not (text_or_parts or content is None and role == "assistant"):
        raise InvalidMessage(f"its content is a {type(content).__name__}: a message's "
                             "content is text or a list of parts (null only for the "
                             "assistant)")
    calls = message.get("tool_calls")
    if calls is not None and not (isinstance(calls, list) and calls
                                  and all(map(is_tool_call, calls))):
        raise InvalidMessage("its 'tool_calls' is not a non-empty list of calls, "
                             "each with a string 'id', \"type\": \"function\" and a "
                             "'function' with a string 'name' and 'arguments' "
                             "holding a JSON object")
    call_id = message.get("tool_call_id", "")
    if not isinstance(call_id, str) or role == "tool" and not call_id:
        raise InvalidMessage("its 'tool_call_id' is not a non-empty string")


def is_tool_call(call: Any) -> bool:
    """Is `call` a call a provider takes back: an id, a name, a JSON object's text?"""
    function = call.get("function") if isinstance(call, dict) else None
    if not (isinstance(function, dict) and isinstance(call.get("id"), str)
            and call["id"] and call.get("type") == "function"
            and isinstance(function.get("name"), str)
            and isinstance(function.get("arguments"), str)):
        return False
    try:
        return isinstance(json.loads(function["arguments"]), dict)
    except (ValueError, RecursionError):
        return False


def check_plain_json(value: Any, depth: int = 0) -> None:
    """Raise InvalidMessage unless `value` is JSON that reads back exactly as it is.

    json.dumps takes more than JSON holds: a tuple comes back a list, the key 1 comes
    back "1", NaN and Infinity are not JSON, and a lone surrogate ("\\ud800", half of a
    UTF-16 pair) is no text at all: UTF-8 cannot encode it.
    """
    if depth > MAX_DEPTH:
        raise InvalidMessage(f"it is nested more than {MAX_DEPTH} levels deep, deeper "
                             "than a line of JSON in a log may be")
    if isinstance(value, str):
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidMessage("it holds a lone surrogate (half of a UTF-16 "
                                     "pair): no text, and no UTF-8 JSON can hold it"
                                     ) from None
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidMessage(f"it has the key {key!r}; JSON keys are strings")
            check_plain_json(key, depth + 1)
            check_plain_json(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            check_plain_json(item, depth + 1)
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise InvalidMessage(f"it holds {value}, which is not JSON (Python writes "
                                 "it; other readers refuse it)")
    elif not (value is None or isinstance(value, int)):     # bool is an int
        raise InvalidMessage(f"it holds a {type(value).__name__}, which is not JSON")


# --- reading a log: lines, markers and the tail ---------------------------------------

# A line with this key is a marker, a note about the log itself, never a message: it is
# not sent to the model. Lesson 04 writes {"$marker": "repair", ...} before the results
# it makes up.
MARKER = "$marker"


def encode_line(entry: Message) -> bytes:
    """One message or marker as one line of UTF-8 JSON, newline included.

    Raises ValueError, before anything is written, for what JSON cannot hold: NaN, a
    set, bytes, a lone surrogate, nesting deeper than Python can encode.
    """
    # ensure_ascii=False keeps "café" readable in the file; json escapes "\n" inside
    # strings, so an entry is always exactly one line. allow_nan=False: NaN is not JSON.
    try:
        line = json.dumps(entry, ensure_ascii=False, allow_nan=False) + "\n"
        return line.encode("utf-8")
    except (TypeError, ValueError, RecursionError) as error:
        raise ValueError(
            f"cannot write this entry as a line of JSON: {error}"
        ) from None


def refuse_constant(name: str) -> Any:
    """Called by the decoder for NaN, Infinity and -Infinity: refuse them."""
    raise InvalidMessage(f"{name} is not JSON (Python's json writes it; other readers "
                         "refuse it)")


def read_float(text: str) -> float:
    """Called by the decoder for every number with a fraction or an exponent."""
    number = float(text)
    if number in (float("inf"), float("-inf")):    # 1e999: too large, read as infinity
        raise InvalidMessage(f"the number {text[:20]} is too large for a float")
    return number


# Made once: json.loads(text, parse_constant=...) would build a decoder for every line.
# (A regular expression finds an escape such as \ud800 faster than `in` does.)
STRICT_JSON = json.JSONDecoder(parse_constant=refuse_constant, parse_float=read_float)
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def decode_json(text: str) -> Any:
    """STRICT_JSON.decode(text), with a fast path for a line as this module writes it.

    decode() looks for whitespace before and after the value with two regular
    expressions; a line written by this module has none, and for it raw_decode() alone
    gives the same answer. Anything else (spaces, garbage after the value, no JSON at
    all) takes decode(), which accepts or refuses it, with its reason, as before.
    """
    try:
        entry, end = STRICT_JSON.raw_decode(text)
        if end == len(text):
            return entry
    except json.JSONDecodeError:
        pass
    return STRICT_JSON.decode(text)


def parse_line(line: bytes) -> Message:
    """One line of a log as a message. Raises InvalidMessage, saying why, if it is none.

    The reader's side of the rule append() keeps: UTF-8 without a byte-order mark
    (json.loads would also take UTF-16, or a BOM), strict JSON (no NaN, no Infinity, no
    number too large for a float), then check_message(). The decoder makes only plain
    JSON, but for an escaped lone surrogate: check_plain_json() runs on the rare line
    with a surrogate's escape, so that loading stays fast. (Nesting deeper than
    MAX_DEPTH, which append refuses, is read: no line append wrote is refused.)
    """
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidMessage("its bytes are not UTF-8") from None
    if text.startswith("\ufeff"):
        raise InvalidMessage("it starts with a byte-order mark (U+FEFF), which the "
                             "format does not allow (an editor may have added it)")
    try:
        entry = decode_json(text)
    except json.JSONDecodeError as error:
        reason = f"not JSON ({error.msg} at column {error.colno})"
        raise InvalidMessage(reason) from None
    except RecursionError:
        raise InvalidMessage("it is nested too deep to read") from None
    if b"\\" in line and SURROGATE_ESCAPE.search(line):  # rare: we write no such escape
        check_plain_json(entry)     # half a UTF-16 pair, a lone surrogate, is no text
    if not isinstance(entry, dict) or not ("role" in entry or MARKER in entry):
        raise InvalidMessage("JSON, but neither a message (no 'role') nor a marker "
                             "(no '$marker')")
    if MARKER in entry and "role" not in entry:
        return entry        # a marker: a note about the log, never a message
    check_message(entry)
    return entry


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


def read_file(path: Path) -> bytes:
    """The bytes of one of a session's files, refusing a symbolic link (OSError, ELOOP)
    and anything but a regular file.

    A session's files are plain files in its folder; a link planted there could point
    anywhere: another user's session, a device that never ends.
    """
    # O_NONBLOCK: opening a FIFO planted there returns at once, never waits forever.
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        return read_all(fd, path)
    finally:
        os.close(fd)


def read_all(fd: int, path: Path) -> bytes:
    """Every byte of the open file `fd`, from its start, read through the descriptor.

    Never by name again: between the open and the read, the name may have been given to
    another file. OSError for what is not a regular file (a FIFO, a device, a folder).
    """
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        raise OSError(errno.EISDIR if stat.S_ISDIR(mode) else errno.EINVAL,
                      "not a regular file, refusing to read it", str(path))
    os.lseek(fd, 0, os.SEEK_SET)
    with open(fd, "rb", closefd=False) as file:
        return file.read()


def read_whole_log(path: Path) -> tuple[bytes, LogState]:
    """A log's bytes and their parse_log(), as one moment of the file, read without the
    lock. FileNotFoundError if there is no log.

    A writer may append, or repair the tail, while a reader reads. An append only adds
    bytes after the ones read. A repair cuts the torn tail and writes its marker where
    the tail began, so a read that straddles it can hold the old tail followed by the
    end of the marker: a false CorruptLog, or even a message nobody wrote. So when the
    file changed during the read, read it again, and keep the first read only if the
    file still starts with it (it was only appended to).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        while True:     # a repair happens once per writer that opens the log: this ends
            before = os.fstat(fd)
            data = read_all(fd, path)
            after = os.fstat(fd)
            same_size = before.st_size == after.st_size == len(data)
            if same_size and before.st_mtime_ns == after.st_mtime_ns:
                break                           # nothing changed while we read
            if read_all(fd, path).startswith(data):
                break                           # only appended to: a whole first part
    finally:
        os.close(fd)
    return data, parse_log(data, path)


def read_log(path: Path) -> LogState:
    """Read a log without changing it; an empty state for a log not written yet."""
    try:
        return read_whole_log(path)[1]     # read-only: reading never changes the log
    except FileNotFoundError:
        return LogState(entries=[], end=0, size=0)


def parse_log(data: bytes, path: Path) -> LogState:
    """Parse a log's bytes: entries, a tolerated torn tail, CorruptLog for the rest.

    Everything up to the last b"\\n" was written as whole lines, so each of those lines
    must parse; the first that does not raises CorruptLog(path, line number, byte
    offset, reason). The bytes after the last b"\\n" (the tail) are either a complete
    entry whose newline is missing (kept) or a write cut short: half a line, zero bytes,
    garbage (torn, not an entry).
    """
    # BEGIN 04.1
    # Split on b"\n" only:
    # str.splitlines() would also split inside strings at U+2028 & co.
    *lines, tail = data.split(b"\n")
    entries: list[Message] = []
    offset = 0
    for number, line in enumerate(lines, start=1):
        if line:    # an empty line holds nothing to lose
            try:
                entries.append(parse_line(line))
            except ValueError as error:
                raise CorruptLog(path, number, offset, str(error)) from None
        offset += len(line) + 1
    # `offset` is now where the tail starts: just after the last newline.
    if tail:
        try:
            entries.append(parse_line(tail))
        except ValueError:
            return LogState(entries, end=offset, size=len(data))    # torn: not an entry
        return LogState(entries, end=len(data), size=len(data), newline_missing=True)
    return LogState(entries, end=offset, size=len(data))
    # END 04.1


def unanswered_calls(messages: list[Message]) -> list[Message]:
    """The calls of the last assistant message that no tool message answers, in order.

    Only the end of the conversation can hold them: the agent answers every call before
    it sends anything else, so a crash can leave calls unanswered only after the last
    assistant message with tool calls. [] when the conversation ended in a plain answer
    or a user message.
    """
    # BEGIN 04.2
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
    # END 04.2


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


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# The most one write() moves on Linux (2 GiB less a page); larger calls come back short.
MAX_WRITE = 0x7FFFF000


def make_folder(folder: Path, durable: bool = False) -> None:
    """Create `folder` and any parents it lacks, each readable by its owner only (0700).

    A session holds what a person said, and its name may say about what: other users
    should not even list them. (Path.mkdir(parents=True) would leave the parents to the
    umask: 0777 under umask 000.) With durable=True each new folder's name is synced in
    its parent.
    """
    for path in [*reversed(folder.parents), folder]:
        if not path.is_dir():
            path.mkdir(mode=0o700, exist_ok=True)
            if durable:
                # A folder's name lives in its parent: until the parent is synced, a
                # power cut can lose the new folder, and every file in it with it.
                parent = os.open(path.parent, os.O_RDONLY)
                try:
                    os.fsync(parent)
                finally:
                    os.close(parent)


class SessionLog:
    """One session's append-only log, `<folder>/<session_id>.jsonl`: an entry a line.

    The object that writes a log is its writer. It becomes the writer at
    open_for_append() (an agent resuming the session) or at its first append, and it
    repairs the log's tail right then, once, before anything else is written. Reading
    (load) never changes the file. With durable=True every write is flushed to the disk
    (fsync) before it returns.
    """

    def __init__(
        self, folder: str | Path, session_id: str, *, durable: bool = False
    ) -> None:
        self.id = check_session_id(session_id)
        self.folder = Path(folder)
        self.path = self.folder / f"{self.id}.jsonl"
        self.durable = durable
        self._fd: int | None = None
        self.in_doubt = False       # a write failed leaving the log's end unknown: stop
        # The repair marker this writer wrote, if any
        self.repaired: Message | None = None

    def open_for_append(self) -> list[Message]:
        """Become the session's writer and return its history, with the tail repaired.

        A session with no log yet has nothing to repair: it stays uncreated until the
        first append (loading a session must not create its file).
        """
        if self._fd is None and self.path.exists():
            return self._open().messages    # the log as the repair read it: parsed once
        return self.load()

    def append(self, message: Message) -> None:
        """Write one message as one line, with a single write() of the whole line."""
        # The rule first: a message that reading would refuse is never written, and no
        # file is created for it.
        check_plain_json(message)
        check_message(message)
        data = encode_line(message)
        if self._fd is None:
            self._open()
        self._write(data)

    def _write(self, data: bytes) -> None:
        """Add whole lines at the end of the log with one write(); fsync if durable.

        Raises WriterStopped, writing nothing, once a write of this writer has failed
        without saying what it left in the file.
        """
        if self.in_doubt:
            raise WriterStopped(
                f"{self.path}: an earlier write failed after its bytes may have "
                "reached the file, so this writer stopped (a retry could write a "
                "message twice). Close it and open the session again: its history is "
                "then read from the log.")
        if len(data) > MAX_WRITE:
            # One write() moves at most MAX_WRITE bytes on Linux: the line could not
            # land whole, so it is refused before a byte is written.
            raise ValueError(f"{self.path}: a line of {len(data)} bytes is more than "
                             f"one write() can take ({MAX_WRITE}); nothing was written")
        # From here until the line is known to be whole (and on disk, in durable
        # mode), an error leaves the file in doubt: a signal after write() returned, a
        # short write that could not be taken back, an fsync that failed (EIO: the
        # bytes may never reach the disk).
        self.in_doubt = True
        try:
            written = os.write(self._fd, data)
        except OSError:
            self.in_doubt = False   # write() refused whole: nothing written, retry safe
            raise
        if written != len(data):
            # The disk filled up (or a file size limit was hit) part-way: take the part
            # back, so that the log still ends on a whole line and the next write starts
            # clean.
            os.ftruncate(self._fd, os.fstat(self._fd).st_size - written)
            self.in_doubt = False   # taken back: the log is as it was before this write
            raise OSError(f"{self.path}: short write, {written} of {len(data)} bytes "
                          "(taken back)")
        if self.durable:
            os.fsync(self._fd)
        self.in_doubt = False

    def _open(self) -> LogState:
        """Become the writer: open the log for appending, then repair its tail.

        Returns the log's entries as this writer leaves them, so that a resume need not
        read and parse the whole log a second time.
        """
        make_folder(self.folder, self.durable)
        is_new = not self.path.exists()
        # O_APPEND: every write lands at the current end of the file, whatever else
        # happened. O_NOFOLLOW: a log that is a symbolic link is refused (OSError,
        # ELOOP), never followed out of the folder; 0o600: only its owner may read it.
        # O_RDWR: the writer reads the log through this same descriptor (read_all).
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
        self._fd = os.open(self.path, flags, 0o600)
        try:
            if is_new and self.durable:
                self._sync_folder()
            # Read what was opened, not the name again: it may name another file by now.
            data = read_all(self._fd, self.path)
            # Raises CorruptLog before anything is changed
            state = parse_log(data, self.path)
            self._repair(data, state)
            # A repair that added entries (a marker, results) changed the log: read it
            # again. That happens once after a crash; every other resume parses it once.
            if self.repaired is not None:
                state = parse_log(read_all(self._fd, self.path), self.path)
        except BaseException:
            self.close()    # a log we refuse to repair is one we do not write to
            raise
        return state

    def _repair(self, data: bytes, state: LogState) -> None:
        """Make the log's tail whole before this writer adds to it; leave a whole one.

        Cut a torn tail, add a missing final newline, and answer each unanswered tool
        call with interrupted_result(call), after a repair marker saying what was done.
        The marker and the results go in one write, so a second repair finds nothing
        left to do. `data` is the log's bytes and `state` their parse_log(), as _open()
        read them.
        """
        # BEGIN 04.3
        calls = unanswered_calls(state.messages)
        # So that the next line starts clean
        fix = b"\n" if state.newline_missing else b""
        if state.torn:
            # O_APPEND writes then land at the new end
            os.ftruncate(self._fd, state.end)
        if state.torn or calls:
            cut = data[state.end:state.end + 80]
            self.repaired = {
                MARKER: "repair",
                "at": now(),
                "cut_bytes": state.torn,
                "cut_preview": cut.decode("utf-8", "replace"),
                "interrupted": [call["id"] for call in calls],
            }
            entries = [self.repaired, *(interrupted_result(call) for call in calls)]
            fix += b"".join(encode_line(entry) for entry in entries)
        if fix:
            # One write: marker and results land together or not at all
            self._write(fix)
        # END 04.3

    def _sync_folder(self) -> None:
        """Make the new file's name itself durable: fsync the folder that holds it."""
        # fsync on the file saves its bytes; the entry "quest-1.jsonl" lives in the
        # folder, and until the folder is synced a power cut can lose the whole file.
        folder = os.open(self.folder, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)

    def load(self) -> list[Message]:
        """Every complete message in the log, in order; [] for a log not written yet.

        Read-only: markers are left out, a torn tail is skipped (not cut: only the
        writer repairs), and a corrupt line before the tail raises CorruptLog.
        """
        return read_log(self.path).messages

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "SessionLog":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def read_arguments(arguments: Any) -> dict[str, Any]:
    """A tool call's arguments as a dict; ValueError, saying what is wrong, if none.

    On the wire they are a string holding a JSON object. Some servers send the object
    itself (llama.cpp's server has), or "" or null for a call without arguments: read
    those as what they mean. Anything else is the model's mistake, for it to hear about.
    """
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as error:
            text = arguments[:200]
            raise ValueError(f"are not valid JSON ({error}): {text!r}") from None
    if not isinstance(arguments, dict):
        raise ValueError(f"must be a JSON object, not {type(arguments).__name__}")
    return arguments


def run_tool(tools: Tools, call: Message) -> str:
    """Run one tool call from the model and return its result as text.

    Whatever goes wrong (a tool that does not exist, arguments that are not JSON, a tool
    that raises) becomes a result the model can read and react to. An agent that crashes
    on a model's typo is an agent that cannot finish a quest.
    """
    name = call["function"]["name"]
    function = tools.functions.get(name)
    if function is None:
        return (
            f"error: there is no tool called {name!r}; the tools are: "
            f"{', '.join(tools.functions)}"
        )
    try:
        arguments = read_arguments(call["function"]["arguments"])
    except ValueError as error:
        return f"error: the arguments for {name} {error}; send a JSON object"
    try:
        return str(function(**arguments))
    # The model should hear about it, not the user's terminal
    except Exception as error:
        return f"error: {name} failed: {type(error).__name__}: {error}"


def normalize_reply(reply: Message, history: list[Message]) -> Message:
    """The model's reply as a message that can be stored, and sent back to any server.

    `reply` is what ask_model() got, with whatever quirks the server put in it;
    `history` is the conversation so far. Every tool call gets an id no other call in
    the conversation has, and arguments that are a string holding a JSON object ("{}"
    when the model's could not be read: run_tool tells the model what was wrong). The
    content is text, "" when the server sent null; a reply without calls has no
    "tool_calls".
    """
    taken = {call["id"] for message in history
             for call in message.get("tool_calls") or []}
    calls = []
    for call in reply.get("tool_calls") or []:
        # No id, or one already used: a result could not say which call it answers.
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id or call_id in taken:
            call_id = f"call_{uuid.uuid4().hex[:24]}"
        taken.add(call_id)
        arguments = call["function"]["arguments"]
        try:
            parsed = read_arguments(arguments)
            if not (isinstance(arguments, str) and arguments):
                # An object, "" or null: store the JSON text of what they mean.
                arguments = json.dumps(parsed, ensure_ascii=False)
        except ValueError:
            arguments = "{}"    # what all servers read back; run_tool reports the error
        function = {"name": call["function"]["name"], "arguments": arguments}
        calls.append({"id": call_id, "type": "function", "function": function})
    # Sent back, a null content is refused: by OpenAI without tool calls, by Ollama (and
    # LM Studio) with them. "" is taken by all.
    content = reply.get("content")
    text = content if isinstance(content, str) else ""
    message: Message = {"role": "assistant", "content": text}
    if calls:       # never "tool_calls": [], which OpenAI refuses
        message["tool_calls"] = calls
    return message



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
        self.settle()       # a run that stopped half-way may have left calls open
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

    def settle(self) -> None:
        """Answer the tool calls an earlier run left without results, before anything.

        A run that stopped between two tool calls (a write that failed, Ctrl-C inside
        a tool) leaves calls open at the end of the conversation. Nothing may come
        between a call and its results: a provider refuses that history (400), and the
        repair mends only the end of a log, so a gap in the middle would stay for good.
        """
        # BEGIN 04.4
        for call in unanswered_calls(self.messages):
            self.record(interrupted_result(call))
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
        return {"role": "assistant", "content": reply.content, "tool_calls": calls}


FORMAT_VERSION = 1


def fork(folder: str | Path, source_id: str, new_id: str, *, upto: int | None = None,
         durable: bool = False) -> Path:
    """Start session `new_id` with the history of `source_id` (its first `upto`).

    Returns the new log's path. Refuses, changing nothing, when the source does not
    exist, when `new_id` is taken, or when `upto` is more than the source holds.

    With durable=True the fork and its meta file are on disk (fsync, then the folder)
    before it returns, as an append is in durable mode; without, a power cut soon after
    the fork can leave it empty or missing (the source is never at risk).
    """
    folder = Path(folder)
    source = folder / f"{check_session_id(source_id)}.jsonl"
    target = folder / f"{check_session_id(new_id)}.jsonl"
    meta = folder / f"{new_id}.meta.json"
    # A meta file without its log is what a fork that failed half-way leaves: not a
    # session, so a new fork onto that id may replace it.
    if target.exists():
        raise SessionExists(
            f"cannot fork onto {new_id!r}: session {target} already exists"
        )
    try:
        data, state = read_whole_log(source)
    except FileNotFoundError:
        raise SessionNotFound(
            f"cannot fork from {source_id!r}: no session log at {source}"
        ) from None
    # Since lesson 04 a log holds markers as well as messages, and may end in a torn
    # line: copy whole lines only, and count messages, not lines.
    # One per entry
    lines = [line + b"\n" for line in data[:state.end].split(b"\n") if line]
    count = len(state.messages) if upto is None else upto
    if not 0 <= count <= len(state.messages):
        raise ValueError(f"cannot fork the first {upto} messages of {source_id!r}: "
                         f"it holds {len(state.messages)}")
    keep = len(lines) if upto is None else entries_for(state.entries, count)
    # Copy the bytes of the lines themselves: a new, independent file (never a link).
    copy = b"".join(lines[:keep])
    # The lineage first, the log last: the fork exists from the moment its log has a
    # name, so a failure before that (a full disk, a crash) leaves no session, only a
    # meta file.
    write_whole(meta, json.dumps({
        "format": FORMAT_VERSION,
        "id": new_id,
        "parent": source_id,
        "forked_at": count,
        "created": now(),
    }, ensure_ascii=False, indent=1).encode("utf-8"), durable=durable)
    try:
        publish_new(target, copy, durable=durable)
    except BaseException:
        meta.unlink(missing_ok=True)    # no fork after all: no lineage either
        raise
    return target


def entries_for(entries: list[Message], count: int) -> int:
    """How many entries hold the first `count` messages (and the markers among them)."""
    seen = kept = 0
    for entry in entries:
        if seen == count:
            break
        kept += 1
        seen += MARKER not in entry
    return kept


def fsync_folder(folder: Path) -> None:
    """fsync a folder, so that the names just created in it survive a power cut."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish_new(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Create `path` holding `data`, all or nothing, and never over an existing file.

    The bytes go to a temporary file first; os.link then gives it its real name, and
    fails if that name exists (os.replace would silently overwrite it). A crash of the
    process leaves at worst a stray temporary file, never a half-written session.
    Surviving a power cut takes durable=True: the bytes, then the new name, are fsynced
    before it returns.
    """
    temp = _write_temp(path, data, durable)
    try:
        os.link(temp, path)
    except FileExistsError:
        raise SessionExists(f"cannot create {path}: it already exists") from None
    finally:
        os.unlink(temp)
    if durable:
        fsync_folder(path.parent)


def write_whole(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace `path` with `data` atomically: readers see the old file or the new."""
    temp = _write_temp(path, data, durable)
    try:
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)     # a failed rename (a folder at that name): no copy left
        raise
    if durable:
        fsync_folder(path.parent)


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data` to a file no one reads yet, in as many write() calls as it
    takes.

    Unlike a log line, such a file need not land in one write: one call moves at most
    2 GiB on Linux, and a full disk then shows as the next call's own error (ENOSPC,
    EFBIG), not as a short write.
    """
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _write_temp(path: Path, data: bytes, durable: bool) -> str:
    make_folder(path.parent, durable)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        write_all(fd, data)
        if durable:
            os.fsync(fd)    # the bytes are on disk before the name points to them
    except BaseException:
        # A write that failed (a full disk) leaves no half-written file behind
        os.unlink(temp)
        raise
    finally:
        os.close(fd)
    return temp
