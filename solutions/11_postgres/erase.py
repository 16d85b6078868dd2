# Generated from course/erase.py for lesson 11_postgres:
# edit that source, then run `sessionlab dev generate`.
"""Erasing one message's words for good.

On an append-only file that is a rewrite: under the writer's lock, a new file without
the words (and without the quotes of them in later messages), synced, then renamed over
the log. The message keeps its place as a tombstone, so every index stays valid.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from .messages import encode_line, MARKER, Message
from .files import _write_temp, fsync_folder, now, read_all
from .reading import Compaction, CorruptLog, KNOWN_LOGS, parse_log
from .lock import SessionBusy
from .blobs import BlobError, blobs_of, drop_blobs


class SessionErase:
    """SessionLog's erase:
    one message's words gone from the file, by a whole rewrite.
    """

    # --- lesson 09: erase one message for good ----------------------------------------

    def index_of(self, position: int) -> int:
        """The index (as undo markers count) of the `position`-th message the log shows.
        """
        if self._fd is None:
            self._open()
        state = parse_log(read_all(self._fd, self.path), self.path)
        shown = state.shown()
        if not 0 <= position < len(shown):
            raise EraseError(f"{self.path} shows {len(shown)} message(s): there is no "
                             f"message {position}; nothing was erased")
        return shown[position][0]

    def erase(self, index: int) -> bool:
        """Erase message `index` from the log for good, and return True (False when it
        was erased before: erasing twice changes nothing).

        `index` counts every message in the file from 0, undone ones included, as an
        undo marker does. The message's line becomes its tombstone(); every other line
        that quotes its text (a message, a marker) has the quote replaced by ERASED; an
        erase marker is added; and the log is rewritten whole, all or nothing, under
        the lock. Then each blob the rewritten lines used goes too, unless another file
        still refers to it.
        Raises EraseError, changing nothing, for an index the log does not hold.
        """
        started = time.time()
        if self._fd is None:
            if not self.path.exists():
                # No log, no message to erase: becoming the writer would create the
                # log and its lock file for a refusal (as undo and compact refuse)
                raise EraseError(f"{self.path} holds 0 message(s): there is no "
                                 f"message {index}; nothing was erased")
            self._open()  # the writer first: its lock keeps every other writer out
        if self.in_doubt:
            self._write(b"")    # WriterStopped: an earlier rewrite did not finish
        data = read_all(self._fd, self.path)
        state = parse_log(data, self.path)
        positions = [p for p, entry in enumerate(state.entries) if MARKER not in entry]
        if not 0 <= index < len(positions):
            raise EraseError(f"{self.path} holds {len(positions)} message(s): there is "
                             f"no message {index}; nothing was erased")
        if any(entry.get(MARKER) == "erase" and entry.get("index") == index
               for entry in state.entries):
            return False
        texts = self.quoted(state.entries[positions[index]],
                            state.lines[positions[index]])
        raw = data[:state.end].split(b"\n")
        lines: list[bytes] = []
        rewritten: list[str] = []   # the blobs of the lines rewritten
        for position, entry in enumerate(state.entries):
            if position == positions[index]:
                new = tombstone(entry)
            else:
                new = self.scrubbed(entry, state.lines[position], texts)
            if new is None:     # every other line keeps its bytes exactly
                lines.append(raw[state.lines[position] - 1] + b"\n")
            else:
                lines.append(encode_line(new))
                rewritten += blobs_of(entry)
        lines.append(encode_line({MARKER: "erase", "index": index, "at": now()}))
        self._rewrite(b"".join(lines))
        # Lesson 10: a helper's transcript holds what it was asked, and what it found
        unreached = self.erase_in_sidechains(texts)
        try:
            drop_blobs(self.folder, rewritten, touched_after=started)
        except OSError as error:
            unreached.append(f"the blobs of the rewritten lines, kept: {error}")
        if unreached:
            raise EraseIncomplete(self.path, unreached)
        return True

    def quoted(self, message: Message, line: int) -> list[str]:
        """The texts of `message` that erase() looks for in every other line: its
        content (read back from its blob), each text at least QUOTE_MIN_CHARS long."""
        try:
            message = self.inline(message, line)
        except BlobError:
            pass    # its blob is gone or damaged: what is left of it is the preview
        return [text for text in contents_of(message) if len(text) >= QUOTE_MIN_CHARS]

    def scrubbed(self, entry: Message, line: int, texts: list[str],
                 parts: bool = False) -> Message | None:
        """`entry` with every quote of `texts` replaced by ERASED, or None when it
        quotes none of them (with `parts`, any part of them too: see scrub()). A
        message whose content is a blob is read back whole and, scrubbed, stored as a
        new blob (the old one is then no longer referred to)."""
        whole = entry
        if MARKER not in entry:
            try:
                whole = self.inline(entry, line)
            except BlobError:
                pass    # a blob that cannot be read: its preview can still be scrubbed
        new = scrub(whole, texts, parts)
        if new == whole:
            return None
        return new if MARKER in new else self.outline(new)

    def scrub_quotes(self, texts: list[str]) -> bool:
        """Replace, in every line of this log, each quote of `texts` or of a part of
        them by ERASED, by the same whole rewrite as erase(); True if a line changed.

        For a side-chain (lesson 10): its helper was asked in the parent's words, and
        everything in its transcript follows from them.
        """
        if self._fd is None:
            self._open()
        started = time.time()
        data = read_all(self._fd, self.path)
        state = parse_log(data, self.path)
        raw = data[:state.end].split(b"\n")
        lines: list[bytes] = []
        rewritten: list[str] = []
        for position, entry in enumerate(state.entries):
            new = self.scrubbed(entry, state.lines[position], texts, parts=True)
            if new is None:
                lines.append(raw[state.lines[position] - 1] + b"\n")
            else:
                lines.append(encode_line(new))
                rewritten += blobs_of(entry)
        if not rewritten and all(line == raw[number - 1] + b"\n" for line, number
                                 in zip(lines, state.lines)):
            self.release_blobs()
            return False
        self._rewrite(b"".join(lines))
        drop_blobs(self.folder, rewritten, touched_after=started)
        return True

    def erase_in_sidechains(self, texts: list[str]) -> list[str]:
        """Scrub `texts` from every side-chain of this session, each under its own
        lock; return what could not be reached, one line each, naming the file."""
        # Imported here: the side-chains module comes after this one in SessionLog's
        # bases, and needs nothing of it
        from .sidechain import sidechain_folder
        unreached: list[str] = []
        chains = sidechain_folder(self.folder, self.id)
        if chains.is_symlink() or not chains.is_dir():
            return unreached
        for path in sorted(chains.glob("*.jsonl")):
            name = path.name[:-len(".jsonl")]
            try:
                with type(self)(chains, name, durable=self.durable) as chain:
                    chain.scrub_quotes(texts)
            except (SessionBusy, OSError, CorruptLog, BlobError, ValueError) as error:
                unreached.append(f"{path}: {error}")
        return unreached

    def _rewrite(self, data: bytes) -> None:
        """Replace the whole log with `data`: after a crash or a power cut at any
        moment the log's name reaches the old bytes or the new ones, never a mix and
        never bytes not yet on disk, and once it returns the writer appends to the file
        the name reaches. A failure before the log is replaced leaves it and the writer
        as they were, and no copy of the words beside it; a failure after stops the
        writer until the session is opened again.
        """
        before = os.fstat(self._fd)
        temp = _write_temp(self.path, data, durable=True)
        try:
            # Opened before the rename, so that nothing can fail between the rename
            # and the moment the writer holds the file its name reaches.
            fd = os.open(temp, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW)
        except BaseException:
            os.unlink(temp)     # it holds the words: no copy left behind
            raise
        try:
            os.replace(temp, self.path)
        except BaseException:
            os.close(fd)
            os.unlink(temp)
            raise
        old, self._fd = self._fd, fd
        try:
            os.close(old)
            # Another program may have put its own file (a link, say) where the new
            # log was, just before the rename: then the log's name reaches that, and
            # no name reaches the file this writer holds. What it took would be lost.
            named, held = os.lstat(self.path), os.fstat(fd)
            if (named.st_dev, named.st_ino) != (held.st_dev, held.st_ino):
                raise OSError(f"{self.path} no longer reaches the log this erase wrote "
                              "(another program put a file in its place just before "
                              "the rename); open the session again")
            fsync_folder(self.folder)   # the new name survives a power cut
            # An erase is not a use: the log keeps the time of its last append, which
            # is what expire() goes by.
            os.utime(fd, ns=(before.st_atime_ns, before.st_mtime_ns))
        except BaseException:
            # The writer holds the new file, but this rewrite did not finish: it
            # refuses every write until the session is opened again (WriterStopped).
            self.in_doubt = True
            raise
        self.release_blobs()    # the scrubbed lines' new blobs are referred to now
        try:
            # Bookkeeping: what this process knew of the log (lesson 07's KNOWN_LOGS:
            # its size, where its lines end) is of the bytes before the erase. Start
            # again from the bytes written.
            KNOWN_LOGS.pop(self._identity, None)
            self._know(parse_log(data, self.path))
        except BaseException:
            self.in_doubt = True
            raise


class AgentErase:
    """Agent's erase: the words gone from the log and from the agent's memory."""

    # --- lesson 09 --------------------------------------------------------------------

    def erase(self, position: int) -> Message:
        """Erase message `position` of the conversation (as self.messages numbers it)
        for good: in memory and in the log. Returns its tombstone. Raises EraseError,
        changing nothing, for a position the conversation does not have.
        """
        if not 0 <= position < len(self.messages):
            raise EraseError(f"the conversation has {len(self.messages)} message(s): "
                             f"there is no message {position}; nothing was erased")
        texts = [text for text in contents_of(self.messages[position])
                 if len(text) >= QUOTE_MIN_CHARS]
        # Everything that can fail is inside the try: a write refused by a full disk,
        # the log's lookup, its erase. Whatever fails, the finally forgets.
        try:
            # Pending messages are written first: the log then numbers every message
            # the conversation holds, and none of them is written later with the words.
            self.flush()
            index = None if self.session is None else self.session.index_of(position)
            if index is not None:
                self.session.erase(index)
        finally:
            # Even when the log's erase failed half-way (after its rewrite, say): the
            # next request must not send the words again. Every message in memory
            # loses its quotes, as the log's lines did, and the summary any part. In
            # place, as record() and undo() change it: whoever holds the list (a view
            # of the conversation) holds the words no longer either.
            self.messages[:] = [scrub(message, texts) for message in self.messages]
            self.messages[position] = tombstone(self.messages[position])
            # The pending messages are the last ones of self.messages, and the flush
            # writes the buffer's own dicts: it takes the scrubbed ones, so that what
            # is written later (the erased message, a note that quoted it) holds no
            # erased word.
            self.pending[:] = self.messages[len(self.messages) - len(self.pending):]
            if self.compaction is not None:
                # Lesson 08's summary, sent with every request, may quote the words:
                # the view loses them too, as the log's compaction marker did.
                summary = redact(self.compaction.summary, texts, parts=True)
                self.compaction = Compaction(summary, self.compaction.boundary)
        return self.messages[position]


# --- lesson 09: sessions are personal data --------------------------------------------
#
# Four ways out for what a person said: delete a whole session, expire the ones nobody
# has used for a while, erase one message, and collect the blobs no log refers to any
# more. Each works under the session's lock, as its writer would, and each can be run
# twice, or again after a crash, with the same result.


class EraseError(ValueError):
    """Asked to erase a message the session does not hold: nothing was changed."""


class EraseIncomplete(EraseError):
    """The message is erased from the log, but some place that held its words could not
    be reached (a side-chain another writer holds, a file that cannot be read): the
    error names each one, so that the person can deal with them."""

    def __init__(self, path: Path, unreached: list[str]) -> None:
        super().__init__(f"{path}: the message is erased from the log, but not from: "
                         + "; ".join(unreached))
        self.unreached = unreached


# What an erased message's line says instead of its words. The line stays a message: the
# indices of the messages after it do not shift (undo markers name messages by index).
ERASED = "[erased at the user's request]"


def tombstone(message: Message) -> Message:
    """The message that takes an erased message's place in the log.

    It says that the message was erased and holds nothing anyone said; the history
    around it stays one a provider takes. `message` is left as it was.
    """
    kept: Message = {"role": message["role"], "content": ERASED}
    if message.get("tool_call_id"):
        kept["tool_call_id"] = message["tool_call_id"]
    if message.get("tool_calls"):
        kept["tool_calls"] = [
            {"id": call["id"], "type": "function",
             "function": {"name": call["function"]["name"], "arguments": "{}"}}
            for call in message["tool_calls"]
        ]
    return kept


def contents_of(message: Message) -> list[str]:
    """The texts a message holds: its content, or the text of each of its parts, and a
    blob reference's preview."""
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    if isinstance(content, dict):   # a blob reference that could not be read back
        return [content.get("preview") or ""]
    return [part["text"] for part in content or []
            if isinstance(part, dict) and isinstance(part.get("text"), str)]


# The shortest text erase() looks for in the other lines of the log. A shorter message
# ("yes", "the cave") is too common to be taken for a quote: "yes" is in "yesterday".
QUOTE_MIN_CHARS = 12


def scrub(entry: Message, texts: list[str], parts: bool = False) -> Message:
    """A line's entry with every quote of `texts` replaced by ERASED.

    In a marker, any string but its kind, and any part of the texts: a compaction
    summary (lesson 08) is made from what it summarizes, and may quote a piece. In a
    message, its content (a part of a text too with `parts`) and each tool call's
    arguments, where the model may have passed a part of it on to a tool; nothing else
    of it changes.
    """
    if MARKER in entry:
        return redact(entry, texts, parts=True)
    new = dict(entry)
    if "content" in entry:
        new["content"] = redact(entry["content"], texts, parts)
    if isinstance(entry.get("tool_calls"), list):
        new["tool_calls"] = [scrub_call(call, texts) for call in entry["tool_calls"]]
    return new if new != entry else entry


def scrub_call(call: Any, texts: list[str]) -> Any:
    """A tool call whose arguments (a JSON text) quote no part of `texts`."""
    try:
        arguments = call["function"]["arguments"]
    except (KeyError, TypeError):
        return call
    if not isinstance(arguments, str):
        return call
    try:    # the words in a JSON text may be escaped: look at the values themselves
        new = json.dumps(redact(json.loads(arguments), texts, parts=True),
                         ensure_ascii=False)
        if new == json.dumps(json.loads(arguments), ensure_ascii=False):
            new = arguments     # quoting nothing: the call keeps its bytes
    except ValueError:
        new = redact(arguments, texts, parts=True)
    if new == arguments:
        return call
    return {**call, "function": {**call["function"], "arguments": new}}


def redact(value: Any, texts: list[str], parts: bool = False) -> Any:
    """`value` with every one of `texts` replaced by ERASED wherever a string holds it
    (a marker's kind, under the key "$marker", is never changed). With `parts`, every
    run of at least QUOTE_MIN_CHARS characters that one of `texts` also holds goes too.
    """
    if isinstance(value, str):
        for text in texts:
            value = value.replace(text, ERASED)
        return redact_parts(value, texts) if parts else value
    if isinstance(value, dict):
        return {key: item if key == MARKER else redact(item, texts, parts)
                for key, item in value.items()}
    if isinstance(value, list):
        return [redact(item, texts, parts) for item in value]
    return value


def redact_parts(value: str, texts: list[str]) -> str:
    """`value` with each run of characters that quotes a piece of one of `texts` at
    least QUOTE_MIN_CHARS long replaced by ERASED."""
    size = QUOTE_MIN_CHARS
    pieces = {text[i:i + size] for text in texts for i in range(len(text) - size + 1)}
    if not pieces or len(value) < size:
        return value
    quoted = [False] * len(value)
    for start in range(len(value) - size + 1):
        if value[start:start + size] in pieces:
            quoted[start:start + size] = [True] * size
    out: list[str] = []
    for position, character in enumerate(value):
        if not quoted[position]:
            out.append(character)
        elif position == 0 or not quoted[position - 1]:
            out.append(ERASED)
    return "".join(out)
