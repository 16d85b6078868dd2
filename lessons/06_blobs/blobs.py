# Lesson 06_blobs, yours to edit: generated from
# solutions/06_blobs/blobs.py; `sessionlab reset 06` makes it again.
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
        # TODO(06.1): Take large content out of the line, stored whole before anything
        # points to it.
        # Your design: the whole function is yours to shape; the tests check only what
        # it does.
        # What it asks: `sessionlab task 06.1`. Hints: `sessionlab hint --task 06.1`.
        raise NotImplementedError(
            "task 06.1 is not written yet: Take large content out of the line, stored "
            "whole before anything points to it"
        )

    def store_blob(self, data: bytes) -> str:
        """Store `data` as `blobs/<sha256 of data>`, whole, and return the hash.

        Content-addressed: the same bytes always get the same name, so they are stored
        once, and any session of the folder (a fork, say) can point to them without a
        copy.
        """
        # TODO(06.1): Take large content out of the line, stored whole before anything
        # points to it.
        # Your design: the whole function is yours to shape; the tests check only what
        # it does.
        # What it asks: `sessionlab task 06.1`. Hints: `sessionlab hint --task 06.1`.
        raise NotImplementedError(
            "task 06.1 is not written yet: Take large content out of the line, stored "
            "whole before anything points to it"
        )

    def inline(self, message: Message, line: int) -> Message:
        """The message as the agent sees it: a blob reference replaced by its content.

        `line` is the message's line number in the log, for the error messages.
        """
        # TODO(06.2): Put the content back on load, trusting no blob without checking
        # its hash.
        # Your design: the whole function is yours to shape; the tests check only what
        # it does.
        # What it asks: `sessionlab task 06.2`. Hints: `sessionlab hint --task 06.2`.
        raise NotImplementedError(
            "task 06.2 is not written yet: Put the content back on load, trusting no "
            "blob without checking its hash"
        )
