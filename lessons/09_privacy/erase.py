# Lesson 09_privacy, yours to edit: generated from
# solutions/09_privacy/erase.py; `sessionlab reset 09` makes it again.
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
from .reading import Compaction, KNOWN_LOGS, parse_log
from .blobs import BlobError, blobs_of, drop_blobs


class SessionErase:
    """SessionLog's erase:
    one message's words gone from the file, by a whole rewrite.
    """

    # --- lesson 09: erase one message for good ----------------------------------------

    def index_of(self, position: int) -> int:
        """The index (as undo markers count) of the `position`-th message the log shows.
        """
        # TODO(09.4): The agent forgets what the user erases.
        # What it asks: `sessionlab task 09.4`. Hints: `sessionlab hint --task 09.4`.
        raise NotImplementedError(
            "task 09.4 is not written yet: The agent forgets what the user erases"
        )

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
        # TODO(09.3): Erase a message from the log: a tombstone in its place, all or
        # nothing.
        # What it asks: `sessionlab task 09.3`. Hints: `sessionlab hint --task 09.3`.
        raise NotImplementedError(
            "task 09.3 is not written yet: Erase a message from the log: a tombstone "
            "in its place, all or nothing"
        )

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

    def _rewrite(self, data: bytes) -> None:
        """Replace the whole log with `data`: after a crash or a power cut at any
        moment the log's name reaches the old bytes or the new ones, never a mix and
        never bytes not yet on disk, and once it returns the writer appends to the file
        the name reaches. A failure before the log is replaced leaves it and the writer
        as they were, and no copy of the words beside it; a failure after stops the
        writer until the session is opened again.
        """
        # TODO(09.3): Erase a message from the log: a tombstone in its place, all or
        # nothing.
        # What it asks: `sessionlab task 09.3`. Hints: `sessionlab hint --task 09.3`.
        raise NotImplementedError(
            "task 09.3 is not written yet: Erase a message from the log: a tombstone "
            "in its place, all or nothing"
        )
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
        # TODO(09.4): The agent forgets what the user erases.
        # What it asks: `sessionlab task 09.4`. Hints: `sessionlab hint --task 09.4`.
        raise NotImplementedError(
            "task 09.4 is not written yet: The agent forgets what the user erases"
        )


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
    be reached (blobs kept because a file that may refer to them cannot be read): the
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
    # TODO(09.3): Erase a message from the log: a tombstone in its place, all or
    # nothing.
    # What it asks: `sessionlab task 09.3`. Hints: `sessionlab hint --task 09.3`.
    raise NotImplementedError(
        "task 09.3 is not written yet: Erase a message from the log: a tombstone in "
        "its place, all or nothing"
    )


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
