"""A catalogue of bad inputs, each with the outcome the final store must give it.

An outcome is one of:

* refused: a named error (InvalidSessionId, a ValueError saying why, an OSError naming the
  file) before anything is written;
* a named error that says where: CorruptLog (file, line, byte offset) or BlobError (the blob,
  the log, the line), and every file stays byte for byte as it was;
* a repair: the writer that resumes the session cuts what a crash left, after a marker;
* read as it is: the input is valid, comes back exactly, and nothing is rewritten.

Never a raw traceback: a KeyError, TypeError, RecursionError or UnicodeDecodeError escaping
the store fails the case. Each case's input and outcome are a row of the catalogue on the site
page docs/store-under-fire.md, and a test below checks that every row is there.

Cases that need a file size limit or a lower user id run in a forked child (conftest.py),
so that the test process keeps its own.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import resource
import shutil
import signal
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable

import pytest

from sessionlab.scripted import MODEL_NAME, ScriptedModel, say
from sessionlab.town import Town

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "store-under-fire.md"


def line(entry: Any) -> bytes:
    """A line as lesson 01 writes it."""
    return (json.dumps(entry, ensure_ascii=False) + "\n").encode("utf-8")


def tool_call(call_id: str, name: str, **arguments: Any) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


ASK = {"role": "user", "content": "Ask the elder about the cave."}
CALL = {"role": "assistant", "content": None, "tool_calls": [tool_call("call_1_0", "talk_to", npc="elder")]}
RESULT = {"role": "tool", "tool_call_id": "call_1_0", "content": "The elder says: bring a torch."}
ANSWER = {"role": "assistant", "content": "The elder wants a torch."}
DAY = [ASK, CALL, RESULT, ANSWER]
DAY_BYTES = b"".join(line(m) for m in DAY)
PASTE = "The elder's map of the cave, copied by hand. " * 200      # ~9 KB: stored as a blob


# --- the scene of each case ---------------------------------------------------------------


class Scene:
    """A case's world: the store, a sessions folder (not created yet) inside a scratch folder."""

    def __init__(self, store, root: Path, child: Callable) -> None:
        self.store, self.root, self.child = store, root, child
        self.folder = root / "sessions"

    def write(self, data: bytes, session_id: str = "quest") -> Path:
        self.folder.mkdir(mode=0o700, exist_ok=True)
        path = self.folder / f"{session_id}.jsonl"
        path.write_bytes(data)
        return path

    def log(self, session_id: str = "quest", **options) -> Any:
        return self.store.SessionLog(self.folder, session_id, **options)

    def load(self, session_id: str = "quest") -> list:
        return self.log(session_id).load()

    def resume(self, session_id: str = "quest") -> list:
        """What an agent resuming the session starts from (it becomes the writer, and repairs)."""
        with self.log(session_id) as log:
            return self.store.Agent(None, model=MODEL_NAME, tools=Town(), session=log).messages

    def append(self, message: Any, session_id: str = "quest", **options) -> None:
        with self.log(session_id, **options) as log:
            log.append(message)

    def fork(self, source: str = "quest", new: str = "copy") -> Path:
        return self.store.fork(self.folder, source, new)

    def files(self) -> dict:
        """Everything under the scratch folder, bytes and links: to prove nothing changed."""
        return snapshot(self.root)


def snapshot(folder: Path) -> dict:
    found: dict[str, Any] = {}
    for path in sorted(Path(folder).rglob("*")):
        name = str(path.relative_to(folder))
        if path.is_symlink():
            found[name] = ("link", os.readlink(path))
        elif path.is_dir():
            found[name] = ("folder", path.stat().st_mode & 0o777)
        else:
            found[name] = path.read_bytes()
    return found


RAW = (KeyError, TypeError, RecursionError, UnicodeError, IndexError, AttributeError, AssertionError)


def refused(action: Callable[[], Any], expected: type | tuple, *words: str) -> BaseException:
    """Run `action`; it must raise `expected` (whose message holds `words`), nothing else."""
    try:
        action()
    except BaseException as error:      # noqa: BLE001 - judged below
        if isinstance(error, expected) and not (isinstance(error, RAW) and not _named(error, expected)):
            message = str(error)
            missing = [w for w in words if w not in message]
            assert not missing, f"the {type(error).__name__} should mention {missing}; it says: {message}"
            return error
        raise AssertionError(
            f"expected {_names(expected)}; got {type(error).__name__}: {error}\n"
            + "".join(traceback.format_exception(error))) from None
    raise AssertionError(f"expected {_names(expected)}; nothing was raised")


def _named(error: BaseException, expected: type | tuple) -> bool:
    """A UnicodeError subclass is raw, unless the case expects exactly that class."""
    kinds = expected if isinstance(expected, tuple) else (expected,)
    return type(error) in kinds


def _names(expected: type | tuple) -> str:
    kinds = expected if isinstance(expected, tuple) else (expected,)
    return " or ".join(kind.__name__ for kind in kinds)


def corrupt(scene: Scene, data: bytes, number: int, *words: str) -> None:
    """The log `data` must be a CorruptLog at line `number` for every reader and writer:
    load, an agent's resume, fork. Nothing on disk changes (no lock file left either)."""
    path = scene.write(data)
    offset = sum(len(raw) + 1 for raw in data.split(b"\n")[:number - 1])
    before = scene.files()
    for action in (scene.load, scene.resume, scene.fork):
        error = refused(action, scene.store.CorruptLog, *words)
        assert (error.path, error.line, error.offset) == (path, number, offset), (
            f"CorruptLog should name {path}, line {number}, offset {offset}; it names "
            f"{error.path}, line {error.line}, offset {error.offset}")
        assert f"line {number}" in str(error) and str(path) in str(error)
        assert scene.files() == before, f"{action.__name__} changed files while refusing a corrupt log"


def torn(scene: Scene, whole: list, tail: bytes) -> None:
    """A log of `whole` messages and a `tail` a crash could leave: load skips the tail and
    changes nothing; the writer that resumes cuts it, after a repair marker saying so."""
    data = b"".join(line(m) for m in whole) + tail
    path = scene.write(data)
    assert scene.load() == whole
    assert path.read_bytes() == data, "load changed the log"
    assert scene.resume() == whole
    after = path.read_bytes()
    assert after.startswith(data[:len(data) - len(tail)]), "the repair changed bytes before the tail"
    marker = json.loads(after[len(data) - len(tail):].split(b"\n")[0])
    assert marker["$marker"] == "repair" and marker["cut_bytes"] == len(tail), marker
    assert scene.resume() == whole and path.read_bytes() == after, "a second resume changed the log again"


def read_as_it_is(scene: Scene, data: bytes, expected: list) -> None:
    """Valid input: load and resume return `expected`, and not a byte is written."""
    path = scene.write(data)
    assert scene.load() == expected
    assert scene.resume() == expected
    assert path.read_bytes() == data, "a valid log was rewritten"


def as_child(scene: Scene, work: Callable[[], Any]) -> Any:
    """`work()` in a forked child; raises AssertionError if it let a raw exception escape."""
    result = scene.child(work)
    if isinstance(result, dict) and "raised" in result:
        raise AssertionError(f"the child raised {result['raised']}: {result['message']}\n{result['traceback']}")
    return result


# --- the catalogue ------------------------------------------------------------------------

CATALOGUE: list = []
ROWS: list[tuple[str, str]] = []


def case(bad_input: str, outcome: str):
    """Register a case: its input and outcome are a row of the catalogue on the site."""
    def register(check):
        CATALOGUE.append(pytest.param(check, id=f"{bad_input}: {outcome}"))
        ROWS.append((bad_input, outcome))
        return check
    return register


def bad_ids(scene: Scene, ids: list) -> None:
    """Each id is refused by SessionLog and by fork (either side) before any file is touched."""
    scene.write(DAY_BYTES)
    before = scene.files()
    for session_id in ids:
        shown = repr(session_id)[:60]
        for action in (lambda: scene.log(session_id),
                       lambda: scene.fork("quest", session_id),
                       lambda: scene.fork(session_id, "copy")):
            error = refused(action, scene.store.InvalidSessionId)
            assert isinstance(error, ValueError) and "invalid session id" in str(error), shown
            assert len(str(error)) < 400, f"the error message for {shown} should stay short"
        assert scene.files() == before, f"the id {shown} touched a file"


@case("a session id that is a path",
      "refused: InvalidSessionId")
def _(scene):
    bad_ids(scene, ["../escape", "a/b", "..", ".", "x/../../escape", "quest/", "..\\escape"])


@case("an absolute session id",
      "refused: InvalidSessionId")
def _(scene):
    bad_ids(scene, ["/etc/passwd", "/tmp/quest", "//quest", "C:\\quest", "~/quest"])


@case("an empty session id",
      "refused: InvalidSessionId")
def _(scene):
    bad_ids(scene, [""])


@case("a session id with a NUL",
      "refused: InvalidSessionId")
def _(scene):
    bad_ids(scene, ["quest\x00", "\x00", "quest\x00/../../escape"])


@case("an overlong session id (over 128 characters)",
      "refused: InvalidSessionId; 128 works")
def _(scene):
    bad_ids(scene, ["q" * 129, "q" * 1_000_000])
    longest, other = "q" * 128, "r" * 128
    scene.append(ASK, longest)
    scene.fork(longest, other)
    assert scene.load(other) == [ASK] and (scene.folder / f"{other}.meta.json").is_file()


@case("a session id that is not text",
      "refused: InvalidSessionId")
def _(scene):
    bad_ids(scene, [None, b"quest", 7, ["quest"], Path("quest")])


@case("a session id with a newline, a space, a leading dot or non-ASCII",
      "refused: InvalidSessionId")
def _(scene):
    bad_ids(scene, ["quest\n", " quest", "quest 2", ".quest", "-quest", "quête", "quest\u2028"])


@case("invalid UTF-8 in a middle line",
      "CorruptLog naming file, line, offset")
def _(scene):
    corrupt(scene, line(ASK) + b'{"role": "user", "content": "caf\xe9"}\n' + line(ANSWER), 2, "UTF-8")


@case("invalid UTF-8 in an unfinished last line",
      "repair: cut after a marker")
def _(scene):
    torn(scene, DAY, b'{"role": "user", "content": "caf\xe9')


@case("U+2028 and U+2029 inside content",
      "read back exactly")
def _(scene):
    messages = [{"role": "user", "content": "line\u2028separator"},
                {"role": "assistant", "content": "paragraph\u2029separator \u2028\u2029"}]
    for message in messages:
        scene.append(message)
    data = (scene.folder / "quest.jsonl").read_bytes()
    assert data.count(b"\n") == 2 and len(data.decode("utf-8").splitlines()) > 2, \
        "each message is one line, which str.splitlines() would break"
    read_as_it_is(scene, data, messages)


@case("U+0085 and the other splitlines breaks inside content",
      "read back exactly")
def _(scene):
    messages = [{"role": "user", "content": f"before{c}after"} for c in "\x85\x1c\x1d\x1e\x0b\x0c\r"]
    for message in messages:
        scene.append(message)
    data = (scene.folder / "quest.jsonl").read_bytes()
    assert data.count(b"\n") == len(messages)
    read_as_it_is(scene, data, messages)


@case("a byte-order mark",
      "CorruptLog naming file, line 1, offset 0")
def _(scene):
    corrupt(scene, b"\xef\xbb\xbf" + DAY_BYTES, 1, "byte-order mark")


@case("a line in UTF-16",
      "CorruptLog naming file, line, offset")
def _(scene):
    utf16 = json.dumps(ANSWER).encode("utf-16-le").replace(b"\n\x00", b"")
    corrupt(scene, line(ASK) + utf16 + b"\n" + line(ASK), 2)


@case("NaN or Infinity in a line",
      "CorruptLog naming file, line, offset")
def _(scene):
    for constant in (b"NaN", b"Infinity", b"-Infinity"):
        corrupt(scene, line(ASK) + b'{"role": "user", "content": "x", "score": ' + constant + b"}\n"
                + line(ANSWER), 2, constant.decode().lstrip("-"))


@case("NaN or Infinity in a message to append",
      "refused: ValueError, nothing written")
def _(scene):
    scene.write(DAY_BYTES)
    before = scene.files()
    for number in (float("nan"), float("inf"), -float("inf")):
        refused(lambda: scene.append({"role": "user", "content": "x", "score": number}), ValueError, "JSON")
        assert scene.files() == before


@case("duplicate keys in a line",
      "read as common parsers read it: the last wins")
def _(scene):
    data = line(ASK) + b'{"role": "assistant", "content": "first", "content": "last"}\n'
    read_as_it_is(scene, data, [ASK, {"role": "assistant", "content": "last"}])


@case("a line nested deeper than the recursion limit",
      "CorruptLog naming file, line, offset")
def _(scene):
    depth = 100_000
    deep = b'{"role": "user", "content": ' + b"[" * depth + b"]" * depth + b"}\n"
    corrupt(scene, line(ASK) + deep + line(ANSWER), 2, "deep")


@case("a message nested deeper than the recursion limit",
      "refused: ValueError, nothing written")
def _(scene):
    scene.write(DAY_BYTES)
    before = scene.files()
    nested: list = []
    for _ in range(100_000):
        nested = [nested]
    refused(lambda: scene.append({"role": "user", "content": nested}), ValueError, "JSON")
    assert scene.files() == before


@case("a message JSON cannot hold (a set, bytes, a lone surrogate)",
      "refused: ValueError, nothing written")
def _(scene):
    scene.write(DAY_BYTES)
    before = scene.files()
    for content in ({"torch"}, b"torch", "\udcff", object()):
        refused(lambda: scene.append({"role": "user", "content": content}), ValueError, "JSON")
        assert scene.files() == before


@case("an oversize single line (32 MiB, as lesson 01 writes it)",
      "read back exactly; appended now, it goes to a blob")
def _(scene):
    huge = {"role": "tool", "tool_call_id": "call_1_0", "content": "The chronicle of the town. " * 1_250_000}
    data = line(ASK) + line(CALL) + line(huge) + line(ANSWER)
    assert len(data) > 32 * 1024 * 1024
    read_as_it_is(scene, data, [ASK, CALL, huge, ANSWER])
    scene.append(huge, "later")
    assert (scene.folder / "later.jsonl").stat().st_size < 1024 and scene.load("later") == [huge]


@case("an oversize unfinished last line",
      "repair: cut after a marker")
def _(scene):
    torn(scene, DAY, line({"role": "user", "content": "x" * 32 * 1024 * 1024})[:-1000])


@case("a corrupt line in the middle",
      "CorruptLog naming file, line, offset")
def _(scene):
    corrupt(scene, line(ASK) + line(CALL) + b'{"role": "tool", "tool_call_id": "call_1_0", "cont\n'
            + line(ANSWER), 3, "not JSON")


@case("a JSON line that is neither a message nor a marker",
      "CorruptLog naming file, line, offset")
def _(scene):
    for value in (b"[1, 2]", b'{"content": "no role"}', b'"text"', b"null", b"42", b"{}"):
        corrupt(scene, line(ASK) + value + b"\n" + line(ANSWER), 2, "neither")


@case("a message whose tool calls are malformed",
      "CorruptLog naming file, line, offset")
def _(scene):
    function = {"name": "buy", "arguments": "{}"}
    for calls in ("buy", [42], [{"function": function}], [{"id": 5, "function": function}],
                  [{"id": "c"}], [{"id": "c", "function": "buy"}], [{"id": "c", "function": {"name": "buy"}}]):
        bad = {"role": "assistant", "content": None, "tool_calls": calls}
        corrupt(scene, line(ASK) + line(bad), 2, "tool_calls")      # the last line: where the repair looks


@case("a message whose role or tool_call_id is not text",
      "CorruptLog naming file, line, offset")
def _(scene):
    for bad in ({"role": 5, "content": "x"}, {"role": None}, {"role": ["user"]},
                {"role": "tool", "tool_call_id": ["call_1_0"], "content": "x"},
                {"role": "tool", "tool_call_id": {"id": 1}, "content": "x"}):
        corrupt(scene, line(ASK) + line(CALL) + line(bad), 3)


@case("an undo marker without a list of message indices",
      "CorruptLog naming file, line, offset")
def _(scene):
    for marker in ({"$marker": "undo"}, {"$marker": "undo", "skip": 5}, {"$marker": "undo", "skip": [[1]]},
                   {"$marker": "undo", "skip": ["0"]}, {"$marker": "undo", "skip": [True]},
                   {"$marker": "undo", "skip": None}):
        corrupt(scene, DAY_BYTES + line(marker) + line(ASK), 5, "skip")


@case("a zero-filled tail",
      "skipped by load; repair: cut after a marker")
def _(scene):
    torn(scene, DAY, b"\x00" * 4096)


@case("garbage after the last record",
      "skipped by load; repair: cut after a marker")
def _(scene):
    torn(scene, DAY, b"\xde\xad\xbe\xef garbage }{")


@case("a garbage line after the last record, newline included",
      "CorruptLog naming file, line, offset")
def _(scene):
    corrupt(scene, DAY_BYTES + b"\xde\xad\xbe\xef garbage }{\n", 5, "UTF-8")


@case("Windows line endings and blank lines",
      "read as they are")
def _(scene):
    data = line(ASK).replace(b"\n", b"\r\n") + b"\n\n" + line(ANSWER).replace(b"\n", b"\r\n")
    read_as_it_is(scene, data, [ASK, ANSWER])


@case("a session log that is a folder",
      "refused: OSError (EISDIR) naming it")
def _(scene):
    (scene.folder / "quest.jsonl").mkdir(parents=True)
    before = scene.files()
    for action in (scene.load, scene.resume, scene.fork, lambda: scene.append(ASK)):
        error = refused(action, OSError)
        assert error.errno == errno.EISDIR and "quest.jsonl" in str(error), error
    assert scene.files() == before


# --- blobs -------------------------------------------------------------------------------


def with_blob(scene: Scene) -> Path:
    """A session whose second message is stored as a blob; returns the blob's path."""
    scene.append(ASK)
    scene.append({"role": "user", "content": PASTE})
    return scene.folder / "blobs" / hashlib.sha256(PASTE.encode()).hexdigest()


def blob_refused(scene: Scene, *words: str) -> None:
    before = scene.files()
    for action in (scene.load, scene.resume):
        error = refused(action, scene.store.BlobError, "quest.jsonl", "line 2", *words)
        assert isinstance(error, ValueError)
    assert scene.files() == before


@case("a tampered blob",
      "BlobError naming the blob, the log, the line")
def _(scene):
    blob = with_blob(scene)
    blob.write_bytes(PASTE.replace("cave", "lake").encode())
    blob_refused(scene, blob.name)


@case("a missing blob",
      "BlobError naming the blob, the log, the line")
def _(scene):
    blob = with_blob(scene)
    blob.unlink()
    blob_refused(scene, blob.name, "missing")


@case("a blob reference that is a path",
      "BlobError: never opened")
def _(scene):
    for name in ("../quest.jsonl", "/etc/passwd", "../../escape", "A" * 64, "a" * 63, "a" * 64 + "/x", ""):
        reference = {"role": "user", "content": {"$blob": name, "size": 10, "preview": "x"}}
        scene.write(line(ASK) + line(reference))
        blob_refused(scene, "not a sha256 hash")


@case("a blob reference that is not text",
      "BlobError: never opened")
def _(scene):
    for name in (42, None, ["a" * 64], {"a": 1}, True):
        reference = {"role": "user", "content": {"$blob": name, "size": 10, "preview": "x"}}
        scene.write(line(ASK) + line(reference))
        blob_refused(scene, "not a sha256 hash")


@case("a blob that is not UTF-8 (its hash matches)",
      "BlobError naming the blob, the log, the line")
def _(scene):
    data = b"\xff\xfe not text"
    name = hashlib.sha256(data).hexdigest()
    (scene.folder / "blobs").mkdir(parents=True)
    (scene.folder / "blobs" / name).write_bytes(data)
    scene.write(line(ASK) + line({"role": "user", "content": {"$blob": name, "size": len(data), "preview": ""}}))
    blob_refused(scene, name, "UTF-8")


@case("a blob that is a symbolic link",
      "BlobError naming the blob, the log, the line and the link, never followed; storing "
      "it again replaces the link")
def _(scene):
    blob = with_blob(scene)
    outside = scene.root / "outside"
    outside.write_bytes(blob.read_bytes())      # even with the right bytes: a blob is a plain file
    blob.unlink()
    blob.symlink_to(outside)
    blob_refused(scene, blob.name, "symbolic link")
    scene.append({"role": "user", "content": PASTE})    # the same content again: a real blob now
    assert not blob.is_symlink() and blob.read_bytes() == PASTE.encode()
    assert outside.read_bytes() == PASTE.encode()
    assert scene.load()[1]["content"] == PASTE


# --- files and folders -------------------------------------------------------------------


@case("a session log that is a symbolic link",
      "refused: OSError (ELOOP), never followed")
def _(scene):
    outside = scene.root / "elsewhere.jsonl"
    outside.write_bytes(DAY_BYTES)
    scene.folder.mkdir()
    for target in (outside, scene.root / "not-there-yet.jsonl"):     # a link, and a dangling one
        link = scene.folder / "quest.jsonl"
        link.unlink(missing_ok=True)
        link.symlink_to(target)
        before = scene.files()
        for action in (scene.load, scene.resume, scene.fork, lambda: scene.append(ASK)):
            error = refused(action, OSError)
            assert error.errno == errno.ELOOP and "quest.jsonl" in str(error), error
            assert scene.files() == before, f"{action} followed the link"


@case("a lock file that is a symbolic link",
      "refused: OSError (ELOOP), never followed")
def _(scene):
    precious = scene.root / "precious"
    precious.write_bytes(b"do not truncate me\n")
    scene.write(DAY_BYTES)
    for target in (precious, scene.root / "not-there-yet"):
        lock = scene.folder / "quest.lock"
        lock.unlink(missing_ok=True)
        lock.symlink_to(target)
        before = scene.files()
        for action in (scene.resume, lambda: scene.append(ASK)):
            error = refused(action, OSError)
            assert error.errno == errno.ELOOP and "quest.lock" in str(error), error
            assert scene.files() == before, "the lock followed the link"


def unprivileged() -> None:
    """In a child: stop being root, so that a folder's mode binds (root ignores it)."""
    if os.geteuid() == 0:
        os.setgid(65534)
        os.setuid(65534)        # nobody


@case("an unwritable sessions folder",
      "reading works; writing refused: PermissionError naming the file")
def _(scene):
    # Outside pytest's own temporary folder, which only root may enter.
    root = Path(tempfile.mkdtemp(prefix="sessionlab-unwritable-"))
    try:
        root.chmod(0o755)
        shared = Scene(scene.store, root, scene.child)
        shared.append(ASK)
        shared.append(ANSWER)
        (shared.folder / "quest.jsonl").chmod(0o644)
        shared.folder.chmod(0o555)
        before = shared.files()

        def work():
            unprivileged()
            outcomes = {"load": shared.load()}
            for name, action in (("resume", shared.resume), ("append", lambda: shared.append(ASK)),
                                 ("fork", shared.fork), ("new session", lambda: shared.append(ASK, "fresh"))):
                error = refused(action, PermissionError)
                outcomes[name] = [error.errno, str(error)]
            return outcomes

        outcomes = as_child(scene, work)
        assert outcomes.pop("load") == [ASK, ANSWER], "reading must still work"
        for name, (number, message) in outcomes.items():
            assert number == errno.EACCES and str(shared.folder) in message, (name, message)
        assert shared.files() == before
    finally:
        for folder in (root, root / "sessions"):
            if folder.exists():
                folder.chmod(0o700)
        shutil.rmtree(root)


@case("a file where the sessions folder should be",
      "refused: OSError naming it")
def _(scene):
    scene.folder.write_bytes(b"not a folder\n")
    before = scene.files()
    for action in (lambda: scene.append(ASK), scene.load, scene.resume):
        error = refused(action, OSError)
        assert error.errno in (errno.EEXIST, errno.ENOTDIR) and "sessions" in str(error), error
    assert scene.files() == before


def full_disk(extra_bytes: int) -> None:
    """In a child: any file may grow only `extra_bytes` past its current size... roughly:
    RLIMIT_FSIZE caps every file this process writes at that many bytes. SIGXFSZ is
    ignored, so a write over the limit is cut short or fails with EFBIG, as on a full disk."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (extra_bytes, resource.RLIM_INFINITY))


def disk_freed() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


LONG = {"role": "user", "content": "A long question about the cave. " * 40}    # ~1.3 KB, no blob


@case("a full disk in the middle of a line",
      "OSError; the part is taken back, the next append is clean")
def _(scene):
    path = scene.write(DAY_BYTES)

    def work():
        with scene.log() as log:
            log.append(ASK)                     # the writer is open: only the next line fails
            full_disk(path.stat().st_size + 100)
            error = refused(lambda: log.append(LONG), OSError)
            size = path.stat().st_size
            disk_freed()
            log.append(ANSWER)
        return {"error": str(error), "size after the failure": size}

    outcome = as_child(scene, work)
    assert outcome["size after the failure"] == len(DAY_BYTES) + len(line(ASK)), \
        f"the part of the line that fit should have been taken back: {outcome}"
    assert scene.load() == DAY + [ASK, ANSWER]
    assert path.read_bytes() == DAY_BYTES + line(ASK) + line(ANSWER)


@case("a full disk while the agent flushes",
      "OSError; the message stays pending, written whole later")
def _(scene):
    path = scene.write(DAY_BYTES)
    model = ScriptedModel(lambda body: say("We go on."))
    client = model.client()
    client.chat.completions.create(model=MODEL_NAME, messages=[ASK])   # built here, not in the child
    model.requests.clear()

    def work():
        with scene.log() as log:
            agent = scene.store.Agent(client, model=MODEL_NAME, tools=Town(), session=log)
            full_disk(path.stat().st_size + 100)
            error = refused(lambda: agent.run(LONG["content"]), OSError)
            disk_freed()
            answer = agent.run("Are you there?")
        return {"error": str(error), "answer": answer, "sent": model.requests[-1]["messages"]}

    outcome = as_child(scene, work)
    again = {"role": "user", "content": "Are you there?"}
    assert outcome["sent"] == DAY + [LONG, again], "the next request carries the message that waited"
    assert scene.load() == DAY + [LONG, again, {"role": "assistant", "content": "We go on."}]


@case("a full disk while a blob is written",
      "OSError; no line, no temporary file")
def _(scene):
    path = scene.write(DAY_BYTES)

    def work():
        with scene.log() as log:
            log.append(ASK)
            full_disk(4096)                     # the blob (~9 KB) does not fit
            error = refused(lambda: log.append({"role": "user", "content": PASTE}), OSError)
            leftovers = sorted(p.name for p in (scene.folder / "blobs").iterdir())
            disk_freed()
            log.append({"role": "user", "content": PASTE})
        return {"error": str(error), "blobs after the failure": leftovers}

    outcome = as_child(scene, work)
    assert outcome["blobs after the failure"] == [], f"a failed blob leaves nothing behind: {outcome}"
    assert scene.load() == DAY + [ASK, {"role": "user", "content": PASTE}]
    assert path.read_bytes().startswith(DAY_BYTES + line(ASK))


@case("a full disk during a fork",
      "OSError; no fork, no temporary file")
def _(scene):
    scene.write(DAY_BYTES * 20)
    before = scene.files()

    def work():
        full_disk(1024)
        error = refused(scene.fork, OSError)
        return str(error)

    as_child(scene, work)
    assert scene.files() == before, "a failed fork must leave no log, no meta file, no temporary file"
    scene.fork()        # with room again, the same fork works
    assert scene.load("copy") == DAY * 20


# --- the tests ----------------------------------------------------------------------------


@pytest.mark.parametrize("check", CATALOGUE)
def test_bad_input(store, tmp_path, child, check):
    check(Scene(store, tmp_path, child))


def test_the_catalogue_has_at_least_25_cases():
    assert len(CATALOGUE) >= 25, f"{len(CATALOGUE)} cases"


def test_every_case_is_a_row_of_the_catalogue_on_the_site():
    page = PAGE.read_text(encoding="utf-8")
    missing = [f"| {bad_input} | {outcome} |" for bad_input, outcome in ROWS
               if f"| {bad_input} | {outcome} |" not in page]
    assert not missing, f"{PAGE.name} should have a row for every case; missing:\n" + "\n".join(missing)
