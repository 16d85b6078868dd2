# Generated from course/blobs.py for lesson 11_postgres:
# edit that source, then run `sessionlab dev generate`.
"""Large content stored beside the log, by hash.

A string content over a threshold goes to `blobs/<sha256>`, written before the line that
points to it, so a crash never leaves a reference to nothing; the line keeps a short
preview. The same content is stored once, and forks share it. Reading checks every blob
against its name.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import stat
from pathlib import Path

from .messages import Message
from .files import fsync_file, fsync_folder, make_folder, read_all, read_file


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
            # Lesson 09: pin it (a shared lock on it, held until the line that points to
            # it is written: release_blobs()), then check it, then touch it. A collector
            # never removes a pinned blob; a touched one is new for collect_blobs()'s
            # grace period.
            stored = self.pin_blob(path, digest)
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
            # Pinned from the start: no collector takes it half written, nor between
            # its rename and the line that points to it
            fcntl.flock(fd, fcntl.LOCK_SH)
            if self._fd is not None:    # the writer: lets go once its line is written
                self.pinned.append(os.dup(fd))
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

    def pin_blob(self, path: Path, digest: str) -> bool:
        """Pin the blob stored at `path` if it holds the bytes named `digest`: True, and
        a shared lock on it that this writer holds until release_blobs(). False, with
        nothing held, for a blob missing, damaged or taken by a collector meanwhile.

        A collector takes an exclusive lock on a blob before it removes it, and gives up
        on one that is pinned: so a blob this writer is about to point to stays, however
        its file times read. (An object that is not the session's writer pins nothing:
        only the grace period keeps a blob it stores by hand.)
        """
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)  # waits while a collector decides about it
            # The name may have been taken away while we waited: then store it anew
            same = os.fstat(fd).st_ino == os.lstat(path).st_ino
            if not same or hashlib.sha256(read_all(fd, path)).hexdigest() != digest:
                os.close(fd)
                return False
            os.utime(fd)        # stored again: young again, for the grace period
        except BaseException:
            os.close(fd)
            raise
        if self._fd is None:
            os.close(fd)    # not the writer (a blob stored by hand): nothing to pin for
        else:
            self.pinned.append(fd)
        return True

    def release_blobs(self) -> None:
        """Let go of the blobs this writer pinned: the lines pointing to them are
        written (or will never be)."""
        while self.pinned:
            os.close(self.pinned.pop())


def blobs_of(entry: Message) -> list[str]:
    """The names of the blobs a line refers to (a message's stored content)."""
    content = entry.get("content")
    name = content.get("$blob") if isinstance(content, dict) else None
    return [name] if isinstance(name, str) and BLOB_NAME.fullmatch(name) else []


def blob_references(folder: Path) -> set[str]:
    """Every blob name that any file of the sessions folder mentions.

    Every file, not only the logs: a fork being published is still a temporary file,
    and a log that cannot be parsed still refers to its blobs. A 64-digit hash that
    happens to sit in a message keeps a blob it does not refer to: the safe mistake.
    A file that cannot be read (EIO, EACCES) raises OSError naming it: what it refers
    to is unknown, and an unknown reference keeps every blob.
    """
    found: set[str] = set()
    for name in sorted(os.listdir(folder)):
        path = folder / name
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                continue    # a folder (blobs/), a link: nothing this store wrote here
            data = read_file(path)
        except FileNotFoundError:
            continue        # removed meanwhile: it refers to nothing any more
        found.update(mentioned_blobs(data))
    return found


def mentioned_blobs(data: bytes) -> list[str]:
    """Every blob name the bytes of a file mention, parsed or not: a torn line, or a
    line that does not parse, still refers to its blob."""
    return [name.decode() for name in re.findall(rb"[0-9a-f]{64}", data)]


def claim_blob(path: Path, *, touched_after: float) -> int | None:
    """An exclusive lock on the blob at `path`, as a descriptor, or None when it must
    stay: missing, not a plain file, pinned by a writer (release_blobs), or touched
    after `touched_after` (a time.time(): the grace period)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None         # gone, or a link: not a blob to remove
    try:
        status = os.fstat(fd)
        if stat.S_ISREG(status.st_mode) and status.st_mtime <= touched_after:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
    except BlockingIOError:
        pass                # pinned by a writer, or claimed by another collector
    os.close(fd)
    return None


def discard_claimed(path: Path, fd: int) -> bool:
    """Remove the blob at `path`, which this collector claimed (`fd`, from claim_blob)
    and which no file refers to. True if it was removed, False if it stays."""
    # The claim is a lock on a file, and the name may reach another one by now: a
    # writer that stored the same bytes anew (the name was free a moment). Moved aside
    # first, in one step no writer can split, then looked at: a writer's goes back.
    # The aside name is this collector's alone: another collection setting aside the
    # same blob name at the same time would otherwise replace (and remove) what this
    # one set aside, a writer's file maybe.
    aside = path.with_name(f".{path.name}.{os.urandom(6).hex()}.collected")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return False
    if os.lstat(aside).st_ino != os.fstat(fd).st_ino:
        os.rename(aside, path)      # a writer's: the same bytes, whoever wins
        return False
    os.unlink(aside)
    return True


def discard_leftover(path: Path, *, touched_after: float) -> None:
    """Clear a file a crashed write left in blobs/ (half a blob, or a blob a collector
    had set aside), once it is older than `touched_after` and nobody holds it. After
    it, the file is gone; a blob set aside that a log refers to can be read under its
    name; and a blob a writer stored anew under that name since stays as it stored it.
    """
    fd = claim_blob(path, touched_after=touched_after)
    if fd is None:
        return      # young, gone, or held: a writer's, or another collector's
    try:
        # A blob set aside: a dot, the blob's name, then ".collected" (with whatever
        # else a collector put before it)
        name = path.name[1:].split(".", 1)[0]
        if path.name.endswith(".collected") and BLOB_NAME.fullmatch(name):
            try:
                # A link, not a rename: a rename would replace a blob a writer stored
                # anew since (and pinned) with this old, unpinned file
                os.link(path, path.with_name(name))
            except FileExistsError:
                pass        # stored again since: the same bytes
            except FileNotFoundError:
                pass        # another collection cleared it before this one held it
        path.unlink(missing_ok=True)
    finally:
        os.close(fd)


# How many blobs drop_blobs claims at once: each claim holds a file open
CLAIMS_AT_ONCE = 64


def drop_blobs(folder: Path, names: list[str], *, touched_after: float) -> list[str]:
    """Remove each of the blobs `names` that no file of the folder refers to, that no
    writer has pinned and that nobody touched after `touched_after`; return the names
    removed. Each blob removed goes through discard_claimed(), claimed.
    OSError naming a file that cannot be read: nothing is removed.
    """
    blobs = folder / "blobs"
    if not names or blobs.is_symlink() or not blobs.is_dir():
        return []   # a blobs folder planted as a link is never followed
    referenced = blob_references(folder)
    candidates = [name for name in dict.fromkeys(names)
                  if name not in referenced and BLOB_NAME.fullmatch(name)]
    removed: list[str] = []
    # Each claim holds a file open: a few at a time, or a folder of thousands of old
    # blobs runs the process out of descriptors (256 by default on macOS)
    for start in range(0, len(candidates), CLAIMS_AT_ONCE):
        claimed: dict[str, int] = {}
        try:
            for name in candidates[start:start + CLAIMS_AT_ONCE]:
                fd = claim_blob(blobs / name, touched_after=touched_after)
                if fd is not None:
                    claimed[name] = fd
            if claimed:
                referenced = blob_references(folder)
            removed += [name for name, fd in claimed.items()
                        if name not in referenced and discard_claimed(blobs / name, fd)]
        finally:
            for fd in claimed.values():
                os.close(fd)
    return removed
