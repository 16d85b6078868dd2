# Lesson 08_compact, yours to edit: generated from
# solutions/08_compact/blobs.py; `sessionlab reset 08` makes it again.
"""Large content stored beside the log, by hash.

A string content over a threshold goes to `blobs/<sha256>`, written before the line that
points to it, so a crash never leaves a reference to nothing; the line keeps a short
preview. The same content is stored once, and forks share it. Reading checks every blob
against its name.
"""

from __future__ import annotations

import hashlib
import os
import re

from .messages import Message
from .files import fsync_file, fsync_folder, make_folder, read_file


class BlobError(ValueError):
    """A blob reference that cannot be trusted: the blob is missing, its bytes changed,
    or the reference is not a plain sha256 hash. The message names the blob, the log and
    the line."""


# --- large content beside the log -----------------------------------------------------

BLOB_THRESHOLD = 4096  # bytes of UTF-8: a larger string content goes to blobs/<sha256>


PREVIEW_CHARS = 100    # how much of it the line keeps, for a person reading the log


BLOB_NAME = re.compile(r"[0-9a-f]{64}")   # the only names a blob reference may hold


class SessionBlobs:
    """SessionLog's blobs: large contents out of line, put back on load."""

    # --- large content, stored beside the log by its hash -----------------------------

    def outline(self, message: Message) -> Message:
        """The message as its line stores it: a large content becomes a blob reference.
        """
        content = message.get("content")
        if not isinstance(content, str):
            return message          # None, or a list of parts: stored as they are
        if len(content) * 4 <= self.blob_threshold:
            return message  # UTF-8 takes 4 bytes a character at most: it fits
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError:
            return message  # a lone surrogate: encode_line refuses it, saying why
        if len(data) <= self.blob_threshold:
            return message
        digest = self.store_blob(data)
        reference = {
            "$blob": digest,
            "size": len(data),
            "preview": content[:PREVIEW_CHARS],
        }
        return {**message, "content": reference}

    def store_blob(self, data: bytes) -> str:
        """Store `data` as `blobs/<sha256 of data>`, whole, and return the hash.

        Content-addressed: the same bytes always get the same name, so they are stored
        once, and any session of the folder (a fork, say) can point to them without a
        copy.
        """
        import tempfile     # only this way of writing a blob needs them
        from .files import write_all

        digest = hashlib.sha256(data).hexdigest()
        path = self.blobs / digest
        try:
            stored = hashlib.sha256(read_file(path)).hexdigest() == digest
        except OSError:
            stored = False      # not stored yet (or not a plain file): write it below
        if stored:
            # Stored before, and still intact: nothing to write. Maybe by a writer that
            # never synced it, though: in durable mode, sync it once (bytes, then name)
            # before a line of this writer points to it.
            if self.durable and digest not in self.synced_blobs:
                fsync_file(path)
                fsync_folder(self.blobs)
                self.synced_blobs.add(digest)
            return digest
        make_folder(self.blobs, self.durable)   # durable: the name "blobs" synced too
        # A temporary file, then a rename: the name <sha256> never holds half a blob. (A
        # blob that was damaged is replaced the same way, by the good bytes.)
        fd, temp = tempfile.mkstemp(dir=self.blobs, prefix=f".{digest}.", suffix=".tmp")
        try:
            write_all(fd, data)
            if self.durable:
                os.fsync(fd)
        except BaseException:
            # A write that failed (a full disk) leaves no half a blob behind
            os.unlink(temp)
            raise
        finally:
            os.close(fd)
        try:
            os.replace(temp, path)
        except BaseException:
            os.unlink(temp)     # a failed rename (a folder at that name): no copy left
            raise
        if self.durable:
            # The blob's name is on disk before any line uses it
            fsync_folder(self.blobs)
            self.synced_blobs.add(digest)
        return digest

    def inline(self, message: Message, line: int) -> Message:
        """The message as the agent sees it: a blob reference replaced by its content.

        `line` is the message's line number in the log, for the error messages.
        """
        reference = message.get("content")
        # Only an object is a reference: a text that quotes one (a user pasting a line
        # of a log) is text, and "$blob" in a text is no key.
        if not (isinstance(reference, dict) and "$blob" in reference):
            return message
        name = reference["$blob"]
        where = f"{self.path}: line {line}"
        # The name comes from a file anyone could edit: a path such as
        # "../quest-2.jsonl" must never be opened. Only a plain hash names a blob.
        if not isinstance(name, str) or not BLOB_NAME.fullmatch(name):
            raise BlobError(
                f"{where}: the blob reference {name!r} is not a sha256 hash "
                "(64 lowercase hexadecimal digits); refusing to open it"
            )
        try:
            # Bytes: text mode would turn \r\n into \n.
            # A symbolic link is refused (OSError).
            data = read_file(self.blobs / name)
        except FileNotFoundError:
            raise BlobError(
                f"{where}: blob {name} is missing from {self.blobs}"
            ) from None
        except OSError:
            if (self.blobs / name).is_symlink():
                raise BlobError(
                    f"{where}: blob {name} is a symbolic link, not a file this store "
                    "wrote; refusing to follow it"
                ) from None
            if not (self.blobs / name).is_file():
                # A folder, a FIFO, a device at the blob's name: none was ever a blob.
                raise BlobError(
                    f"{where}: blob {name} is not a regular file (a folder, a FIFO, "
                    "a device?), not a file this store wrote; refusing to read it"
                ) from None
            raise   # the disk's own failure (EIO): no judgement on the blob
        if hashlib.sha256(data).hexdigest() != name:
            raise BlobError(
                f"{where}: blob {name} was changed after it was written: its bytes "
                "no longer match its hash, so it is not what this session said"
            )
        try:
            return {**message, "content": data.decode("utf-8")}
        except UnicodeDecodeError:
            raise BlobError(
                f"{where}: blob {name} is not UTF-8 text, so it is no message's content"
            ) from None
