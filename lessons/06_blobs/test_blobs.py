"""Lesson 06: large content out of line.

Run: pytest lessons/06_blobs            (your code)
     pytest lessons/06_blobs --solution (the reference)
"""

import contextlib
import errno
import hashlib
import itertools
import json
import os
import re
import shutil
import signal
import stat
import sys
import tempfile

import openai
import pytest

from sessionlab.scripted import ScriptedModel, SimulatedCrash, call, say, use
from sessionlab.town import Town
from sessionlab.testing import fail_in, open_descriptors, raises, with_file_size_limit

MB = 1024 * 1024
PASTE = "".join(
    f"{n:07d} the elder's map of the cave, copied line by line\n"
    for n in range(MB // 56 + 1)
)[:MB]
NON_ASCII = "洞窟の地図 — Ελληνικά, café, emoji 🗺️🔦\n" * 400
BINARY_LOOKING = (
    "".join(chr(n) for n in range(256)) * 40 + "\r\n\r\x00\u2028\u2029\x85" * 200
)
SMALL = {"role": "user", "content": "Hello, elder."}


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def lines_of(path):
    return [json.loads(line) for line in path.read_bytes().split(b"\n") if line]


def blob_names(sessions):
    """The blobs stored in the folder (temporary files,
    which start with a dot, are not blobs)."""
    folder = sessions / "blobs"
    return (
        sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
        if folder.exists()
        else []
    )


def snapshot(folder):
    """What stands in `folder`, itself included, entry by entry, links not followed:
    its kind, its mode, its modification time, and what it holds (a file's bytes, a
    link's target and the bytes of a file it reaches). A refused load that took away
    a pipe, an empty folder or a link to nothing, or that changed a blob's mode or
    times, shows here as well as one that changed a file's bytes."""
    found = {}
    for top, folders, files in os.walk(folder):
        # The folder itself first, then what each folder holds (links not followed)
        for name in ([None] if top == os.fspath(folder) else []) + folders + files:
            path = os.path.join(top, name) if name else top
            info = os.lstat(path)
            kind = ("file" if stat.S_ISREG(info.st_mode) else
                    "link" if stat.S_ISLNK(info.st_mode) else
                    "folder" if stat.S_ISDIR(info.st_mode) else "FIFO or device")
            held = None
            if kind == "link":
                # Its target, and the bytes there when that is a file (never a pipe)
                held = os.readlink(path)
                if os.path.isfile(path):
                    with open(path, "rb") as file:
                        held = (held, file.read())
            elif kind == "file":
                with open(path, "rb") as file:
                    held = file.read()
            found[os.path.relpath(path, folder)] = (
                kind, oct(stat.S_IMODE(info.st_mode)), info.st_mtime_ns, held)
    return found


def changes(before, after):
    """In words, what differs between two snapshots of a folder."""
    said = []
    for name in sorted(before.keys() | after.keys()):
        was, now = before.get(name), after.get(name)
        if was == now:
            continue
        if now is None:
            said.append(f"{name} ({was[0]}) was taken away")
        elif was is None:
            said.append(f"{name} ({now[0]}) was made")
        else:
            what = [label for label, old, new in zip(
                ("kind", "mode", "modification time", "content"), was, now)
                if old != new]
            said.append(f"{name}: its {' and '.join(what)} changed"
                        + (f" (mode {was[1]} became {now[1]})" if was[1] != now[1]
                           else ""))
    return "; ".join(said) or "nothing"


def unchanged(sessions, before, why):
    """Fail, in words, unless the sessions folder is as `before` found it."""
    after = snapshot(sessions)
    if after != before:
        pytest.fail(f"{why}; here {changes(before, after)}", pytrace=False)


# Every file opened while a `paths_opened()` block runs, and every file created while a
# `files_created()` block runs (an audit hook sees os.open, open() and Path.read_bytes
# alike, and sees an open before it can fail).
_opened: list[str] | None = None
_created: list[str] | None = None
# Called with the target's path when anything is renamed or linked to a name (os.rename,
# os.replace, os.link, shutil.move ...), while it is set.
_renaming = None
# Called the same way, with the source's path and then the target's, while it is set.
_placing = None


def _audit(event, args):
    if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.path.abspath(os.fsdecode(args[0]))
        if _opened is not None:
            _opened.append(path)
        if _created is not None and isinstance(args[2], int) and args[2] & os.O_CREAT:
            # A folder is never made by an open: NamedTemporaryFile passes its folder
            # to open() as the name of a file its opener makes inside
            if not os.path.isdir(path):
                _created.append(path)
    elif _renaming is not None and event in ("os.rename", "os.link") and len(args) > 1:
        if isinstance(args[1], (str, bytes, os.PathLike)):
            _renaming(os.path.abspath(os.fsdecode(args[1])))
    if _placing is not None and event in ("os.rename", "os.link") and len(args) > 1:
        if all(isinstance(arg, (str, bytes, os.PathLike)) for arg in args[:2]):
            _placing(*(os.path.abspath(os.fsdecode(arg)) for arg in args[:2]))


sys.addaudithook(_audit)


@contextlib.contextmanager
def paths_opened():
    """The list of the paths opened, by anyone in this process, while the block runs."""
    global _opened
    _opened = found = []
    try:
        yield found
    finally:
        _opened = None


@contextlib.contextmanager
def files_created():
    """The list of the files opened with O_CREAT (made, or opened to be made), by
    anyone in this process, while the block runs."""
    global _created
    _created = found = []
    try:
        yield found
    finally:
        _created = None


def reference_in(message):
    content = message.get("content")
    assert isinstance(content, dict) and "$blob" in content, (
        f"a large content should be stored as {{'$blob': <sha256>, 'size': ..., "
        f"'preview': ...}}; "
        f"the line holds {str(content)[:120]!r}")
    return content


# What a refusal of 06.2 must say it met, in words a user reads (any of them will do).
REASONS = {
    "a name that is no hash":
        r"hash|sha-?256|hex|invalid|not a valid|malformed|bad name|not a( blob)? name",
    "a missing blob": r"missing|not found|no such|(not|n't) exist|not (present|there)"
                      r"|absent|gone|removed|deleted|find",
    "bytes that changed": r"chang|match|damag|corrupt|alter|modif|tamper|wrong|differ"
                          r"|integrity|checksum|verif",
    "a symbolic link": r"link|not a (plain|regular) file|follow",
    "bytes that are no text": r"utf-?8|text|decod|encod|unicode|binary",
    "something that is no file": r"regular|plain file|not a file|no file|folder|direct"
                                 r"|fifo|pipe|device|special|kind of file|type",
}


# What a refusal must not claim besides what it met: a blob that is gone and one whose
# bytes changed send the user to different work (restore a file, or find what changed
# one that is there), so words that fit both tell them neither.
OTHER_CLAIMS = {
    "a missing blob": ("that its bytes changed",
                       r"chang|damag|corrupt|tamper|alter|modif|match|differ"),
    "bytes that changed": ("that it is missing",
                           r"missing|not found|no such|(not|n't) exist|absent|gone"
                           r"|removed|deleted"),
    # Something stands at the name, and a blob that is there is no text: neither is
    # gone, and a user told it may be goes to restore a backup over what is there
    "something that is no file": ("that it is missing",
                                  r"missing|not found|no such|(not|n't) exist|absent"
                                  r"|gone|removed|deleted"),
    "bytes that are no text": ("that it is missing",
                               r"missing|not found|no such|(not|n't) exist|absent"
                               r"|gone|removed|deleted"),
}


def says_what_it_met(error, met, sessions, *quoted):
    """Fail, in words, unless the refusal's message says what it met (its paths and the
    name it quotes left out: a test's folder, or a name, may hold any word), and, for a
    missing or a changed blob, does not say the other as well."""
    message = str(error)
    said = message.replace(str(sessions.parent), "")
    for name in quoted:
        said = said.replace(repr(name), "").replace(str(name), "") if name else said
    assert re.search(REASONS[met], said, re.IGNORECASE), (
        f"the refusal should say what it met, {met}, so that the user knows what to "
        f"look at (a file to restore, a line edited by hand, a disk to check); it "
        f"says: {message}")
    if met in OTHER_CLAIMS:
        other, pattern = OTHER_CLAIMS[met]
        claim = re.search(pattern, said, re.IGNORECASE)
        assert claim is None, (
            f"the refusal met {met}, and should say so alone: it also says {other} "
            f"({claim.group()!r}), so the user cannot tell whether to restore a blob "
            f"that is gone or to find what changed one that is there; it says: "
            f"{message}")


def store(lesson, sessions, data, session_id="quest-1", **options):
    """Store `data` with the log's own store_blob (task 06.1 alone: no line is written),
    check the name it returns, and give the blob's path."""
    with lesson.SessionLog(sessions, session_id, **options) as log:
        name = log.store_blob(data)
    assert name == sha256(data), (
        f"store_blob should return the sha256 of the bytes it was given, in lowercase "
        f"hex ({sha256(data)}); it returned {name!r}")
    return sessions / "blobs" / name


class Library:
    """Tools for the tests: the town's library lends one very long scroll."""

    scroll = "The chronicle of the cave, page after page.\n" * 20_000
    schemas = [
        {
            "type": "function",
            "function": {
                "name": "read_scroll",
                "description": "Read the chronicle of the cave, all of it.",
                "parameters": {"type": "object", "properties": {}},
            },
        }
    ]

    def __init__(self):
        self.functions = {"read_scroll": lambda: self.scroll}


@pytest.mark.key
@pytest.mark.task("06.1")
def test_a_large_paste_leaves_a_short_line_that_points_to_its_blob(lesson, sessions):
    """A 1 MB paste goes to blobs/<sha256>, and its line keeps a short reference with
    the hash and the size in bytes."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": PASTE})

    raw = (sessions / "quest-1.jsonl").read_bytes()
    assert len(raw) < 1024, (
        "a 1 MB paste should leave a line of a few hundred bytes; the log has "
        f"{len(raw)} bytes"
    )
    reference = reference_in(lines_of(sessions / "quest-1.jsonl")[0])
    data = PASTE.encode("utf-8")
    assert sorted(reference) == ["$blob", "preview", "size"], (
        "the reference is an object with exactly three keys, $blob, size and preview; "
        f"it has {sorted(reference)}")
    assert reference["$blob"] == sha256(data), (
        "the reference should be the sha256 of the content's UTF-8 bytes "
        f"({sha256(data)}), got {reference['$blob']!r}"
    )
    assert reference.get("size") == len(data), (
        f"size is the content's length in bytes ({len(data)}), got "
        f"{reference.get('size')!r}"
    )
    preview = reference.get("preview")
    expected = PASTE[:lesson.PREVIEW_CHARS]
    assert preview == expected, (
        f"preview should be the content's first {lesson.PREVIEW_CHARS} characters, "
        f"{expected!r}; got {preview!r}"
    )
    blob = sessions / "blobs" / reference["$blob"]
    assert blob.is_file() and blob.read_bytes() == data, (
        f"the content's bytes should be stored whole in {blob}"
    )


@pytest.mark.task("06.1")
def test_append_leaves_the_callers_message_as_it_was(lesson, sessions):
    """The message given to append is the caller's (the agent's memory, the next
    request): once its large content is stored out of line, that message still holds
    the text, and only the line holds the reference."""
    message = {"role": "user", "content": PASTE}
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append(message)

    content = message.get("content")
    assert content == PASTE, (
        "the caller's message was changed by append: its content became "
        f"{str(content)[:120]!r}, not the 1 MB paste it held. The agent keeps that "
        "message and sends it to the model next, which would get a blob reference "
        "instead of the user's words")
    assert sorted(message) == ["content", "role"], (
        f"the caller's message was changed by append: it now has the keys "
        f"{sorted(message)}")
    reference_in(lines_of(sessions / "quest-1.jsonl")[0])


@pytest.mark.key
@pytest.mark.task("06.2")
@pytest.mark.parametrize(
    "content",
    [PASTE, PASTE * 3, NON_ASCII, NON_ASCII * 40, BINARY_LOOKING,
     "\ufeffDay 1 of the quest\r\n" * 300,
     "Cafe\u0301 de\u0301ja\u0300 vu, \u212b, \ufb01n: the map. " * 200],
    ids=["1 MB paste", "3 MB paste", "non-ASCII", "1 MB of non-ASCII", "binary-looking",
         "a BOM first, Windows line ends", "accents as combining marks (NFD)"],
)
@pytest.mark.task("06.1")
def test_load_puts_large_content_back_byte_for_byte(lesson, sessions, content):
    """Loading puts the blob's content back in place of the reference, byte for byte,
    around unchanged small messages: a paste of several MB too, read to its end, a
    megabyte of letters of several bytes, some of which straddle any block a reader
    might cut the blob into (64 KiB, say), and accents written as combining marks, as
    macOS writes them (no Unicode normalization on the way, in or out)."""
    messages = [
        SMALL,
        {"role": "user", "content": content},
        {"role": "assistant", "content": "Noted."},
    ]
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in messages:
            log.append(message)

    with lesson.SessionLog(sessions, "quest-1") as log:
        loaded = log.load()

    assert loaded[0] == SMALL and loaded[2] == messages[2], (
        "the small messages around the large one should load unchanged"
    )
    got = loaded[1].get("content")
    assert isinstance(got, str), (
        "load should put the blob's content back in place of the reference, got "
        f"{str(got)[:120]!r}"
    )
    if got != content:
        pairs = enumerate(zip(got, content))
        differ = next((i for i, (a, b) in pairs if a != b),
                      min(len(got), len(content)))
        pytest.fail(
            f"the content should come back exactly ({len(content)} characters); got "
            f"{len(got)} characters that differ from character {differ}: expected "
            f"{content[differ:differ + 12]!r} there, got {got[differ:differ + 12]!r}",
            pytrace=False)


@pytest.mark.task("06.1")
def test_the_threshold_is_configurable_and_measures_what_a_blob_would_hold(lesson,
                                                                          sessions):
    """blob_threshold is configurable, and a content leaves exactly when its blob would
    hold more: ten letters stay, eleven leave, and so do six accented letters, four
    letters of 3 bytes and three emoji; with a threshold of 0, every content but an
    empty one leaves."""
    with lesson.SessionLog(sessions, "quest-1", blob_threshold=10) as log:
        # 10 bytes: stays in the line
        log.append({"role": "user", "content": "x" * 10})
        # 11 bytes: goes to a blob
        log.append({"role": "user", "content": "x" * 11})
        # 6 characters, 12 bytes: a blob
        log.append({"role": "user", "content": "é" * 6})
        # 4 letters of 3 bytes and 3 emoji of 4: 12 bytes each, a blob too
        log.append({"role": "user", "content": "語" * 4})
        log.append({"role": "user", "content": "🗺" * 3})

    stored = [m["content"] for m in lines_of(sessions / "quest-1.jsonl")]
    assert stored[0] == "x" * 10, (
        f"content of exactly the threshold stays in the line, got {stored[0]!r}"
    )
    assert isinstance(stored[1], dict) and "$blob" in stored[1], (
        "with blob_threshold=10, an 11-byte content should go to a blob, got "
        f"{stored[1]!r}"
    )
    assert isinstance(stored[2], dict) and stored[2].get("size") == 12, (
        "with blob_threshold=10, 'é' * 6 should go to a blob of size 12: six "
        "characters, but its blob holds their 12 bytes of UTF-8, and the threshold and "
        f"the size both count what the blob holds; the line holds {stored[2]!r}")
    for text, content in zip(["語" * 4, "🗺" * 3], stored[3:]):
        assert isinstance(content, dict) and content.get("size") == 12, (
            f"with blob_threshold=10, {text!r} should go to a blob of size 12: "
            f"{len(text)} characters of {12 // len(text)} bytes each in UTF-8, more "
            f"than the threshold; the line holds {content!r}")

    # 0 is a threshold like any other (no "use the default"): every byte leaves
    with lesson.SessionLog(sessions, "quest-2", blob_threshold=0) as log:
        log.append({"role": "user", "content": ""})
        log.append({"role": "user", "content": "x"})
    stored = [m["content"] for m in lines_of(sessions / "quest-2.jsonl")]
    assert stored[0] == "" and isinstance(stored[1], dict) and (
        stored[1].get("size") == 1), (
        "with blob_threshold=0, an empty content stays in the line and a content of "
        "one byte goes to a blob of size 1 (0 is a number like any other, not 'the "
        f"default'); the lines hold {stored!r}")


@pytest.mark.task("06.1")
@pytest.mark.parametrize(
    "content",
    ['"\\\n\t' * 25, "\x01\x1f" * 50,
     'She said: "the map is \\\\cave\\\\".\n' * 4, "é" * 50, " \t\r\n" * 25],
    ids=["quotes, backslashes, line ends", "control characters", "a quoted path",
         "accented letters", "white space only"],
)
def test_a_content_at_the_threshold_stays_however_the_line_spells_it(
        lesson, sessions, content):
    """A content whose blob would hold exactly the threshold stays in the line, and one
    byte more leaves, however JSON spells it in the line: quotes, backslashes, line
    ends, control characters, accented letters, white space alone."""
    size = len(content.encode("utf-8"))
    with lesson.SessionLog(sessions, "quest-1", blob_threshold=size) as log:
        log.append({"role": "user", "content": content})            # exactly the limit
        # One byte over, of the same kind: white space alone stays white space
        log.append({"role": "user", "content": content + ("x" if content.strip()
                                                           else " ")})

    stored = [m["content"] for m in lines_of(sessions / "quest-1.jsonl")]
    escaped = len(json.dumps(content, ensure_ascii=False).encode("utf-8")) - 2
    assert stored[0] == content, (
        f"with blob_threshold={size}, a content of {size} bytes of UTF-8 should stay "
        f"in the line; it went out of line ({str(stored[0])[:80]!r}): JSON spells it "
        f"with {escaped} bytes in the line, but the threshold counts the content's own "
        "bytes, the ones a blob of it would hold")
    assert isinstance(stored[1], dict) and stored[1].get("size") == size + 1, (
        f"with blob_threshold={size}, a content of {size + 1} bytes should go to a "
        f"blob whose size is {size + 1}; the line holds {str(stored[1])[:120]!r}")


@pytest.mark.task("06.1")
def test_only_the_content_leaves_the_line_not_the_tool_calls(lesson, sessions):
    """The model's message that calls a tool with long arguments: only a large content
    leaves the line, measured alone; the tool calls, and a key of the provider's own
    (its model's reasoning, as long as the paste), stay as they were, whatever their
    size, and load gives back the message exactly."""
    arguments = json.dumps({"text": "The elder's map, copied out. " * 300})
    calls = [{"id": "call_1_0", "type": "function",
              "function": {"name": "write_note", "arguments": arguments}}]
    short = {"role": "assistant", "content": "Let me write it down.",
             "tool_calls": calls}
    # A key of the provider's own (its model's reasoning) rides along, as it came: a
    # text over the threshold too, which is no content and stays in the line
    reasoning = "The map is long: better keep it in a note. " * 200
    long = {"role": "assistant", "content": PASTE, "tool_calls": calls,
            "reasoning_content": reasoning}
    given_messages = json.loads(json.dumps([short, long]))
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append(short)
        log.append(long)
    assert [short, long] == given_messages, (
        "append changed the caller's messages: the agent keeps them and sends them "
        "next, so the model would get a reference where the paste was; the long one "
        f"now holds {str(long)[:200]!r}")

    stored = lines_of(sessions / "quest-1.jsonl")
    assert stored[0] == short, (
        f"a short content ({len(short['content'])} characters) next to tool calls "
        f"whose arguments take {len(arguments)} bytes should stay in the line, as the "
        f"whole message was given; the line holds {str(stored[0])[:200]!r}")
    reference_in(stored[1])
    assert stored[1].get("tool_calls") == calls, (
        "the tool calls of a message whose content went to a blob should stay in the "
        f"line as they were given; the line holds "
        f"{str(stored[1].get('tool_calls'))[:200]!r}")
    kept = {key: value for key, value in stored[1].items() if key != "content"}
    given = {key: value for key, value in long.items() if key != "content"}
    assert kept == given, (
        "only the content leaves the line: everything else the message holds (here a "
        f"key of the provider's own, reasoning_content, a text of {len(reasoning)} "
        "bytes, over the threshold but no content) stays as it was given, whatever "
        f"its size, {sorted(given)}; the line holds "
        f"{str({key: str(value)[:80] for key, value in kept.items()})[:400]} beside "
        "the reference")
    with lesson.SessionLog(sessions, "quest-1") as log:
        loaded = log.load()
    if loaded != [short, long]:
        # The lines were right (checked above): what load made of them is 06.2's
        fail_in("06.2", "the lines hold the tool calls and the reference as they "
                "should, but load did not give back both messages exactly as they "
                "were appended, the long content put back from its blob and the tool "
                "calls (and every other key) as they were: it gave "
                f"{str(loaded)[:300]}")


@pytest.mark.task("06.1")
def test_the_default_threshold_keeps_ordinary_messages_in_the_line(lesson, sessions):
    """With the default threshold, a message of a few KB stays in its line: only large
    content moves out."""
    ordinary = {
        "role": "tool",
        "tool_call_id": "call_1_0",
        "content": "The elder says: bring a torch. " * 100,
    }
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append(ordinary)                                      # about 3 KB
        log.append({"role": "user", "content": "y" * 5000})       # about 5 KB

    stored = lines_of(sessions / "quest-1.jsonl")
    assert stored[0] == ordinary, (
        "a 3 KB message is under the default threshold (a few KB) and stays in the line"
    )
    reference_in(stored[1])


@pytest.mark.task("06.1")
def test_a_session_that_stores_no_blob_makes_no_blobs_folder(lesson, sessions):
    """blobs/ is made by the first store that needs it: a session whose every content
    stays in its line, a durable one too, leaves no empty blobs/ beside the logs."""
    with lesson.SessionLog(sessions, "quest-1", durable=True) as log:
        log.append(SMALL)
        log.append({"role": "assistant", "content": None,
                    "tool_calls": [{"id": "call_1_0", "type": "function",
                                    "function": {"name": "talk_to",
                                                 "arguments": '{"npc": "elder"}'}}]})
        log.append({"role": "tool", "tool_call_id": "call_1_0",
                    "content": "The elder says: bring a torch."})
    assert not (sessions / "blobs").exists(), (
        "a session wrote three short messages, each kept in its line, and left a "
        "blobs/ folder beside the logs: only a store makes blobs/, when it has a blob "
        "to put there")


@pytest.mark.task("06.1")
def test_messages_without_string_content_are_stored_as_they_are(lesson, sessions):
    """A message whose content is not a string (None, tool calls only, or no content
    key at all; or a list of parts) is stored as it is, with nothing out of line, and
    loads as it was."""
    call_message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1_0",
                "type": "function",
                "function": {"name": "buy", "arguments": '{"item": "rope"}'},
            }
        ],
    }
    # The model's message that only calls a tool may have no content key at all
    bare_call = {key: value for key, value in call_message.items() if key != "content"}
    parts_message = {"role": "user",
                     "content": [{"type": "text", "text": "The elder's map: " * 400}]}
    messages = [call_message, bare_call, parts_message]
    with lesson.SessionLog(sessions, "quest-1", blob_threshold=0) as log:
        for message in messages:
            try:
                log.append(message)
            except (AttributeError, TypeError, KeyError) as error:
                kind = (type(message["content"]).__name__ if "content" in message
                        else "not there (no content key)")
                pytest.fail(f"appending a message whose content is {kind} raised "
                            f"{error!r}: only a text content goes out of line, any "
                            "other is stored as it is", pytrace=False)

    assert lines_of(sessions / "quest-1.jsonl") == messages, (
        "a message whose content is None, or missing, or a list of parts, has nothing "
        "to store out of line: each line should hold the message as it was given"
    )
    with lesson.SessionLog(sessions, "quest-1") as log:
        try:
            loaded = log.load()
        except (AttributeError, TypeError, KeyError) as error:
            fail_in("06.2", f"the lines hold the messages as they were given, but "
                    f"load raised {error!r}: a message whose content is None, missing "
                    "or a list of parts holds no blob reference, and loads as it is")
    if loaded != messages:
        fail_in("06.2", "a message whose content is None, missing or a list of parts "
                "holds no blob reference, and should load as it was appended; load "
                f"gave {str(loaded)[:300]}")


def run_sending_no_reference(agent, model, text):
    """agent.run(text), with a server's refusal of a request that carried a blob
    reference in place of a content told as task 06.1's fault: the agent's own message
    was changed when its line was stored (outline changed what it was given)."""
    try:
        agent.run(text)
    except openai.BadRequestError as error:
        sent = model.requests[-1].get("messages", []) if model.requests else []
        if not any(isinstance(m.get("content"), dict) for m in sent):
            raise
        fail_in("06.1", "the model's server refused the request "
                f"({error.status_code}): a message in it had a blob reference for its "
                "content, not the text. The agent's own message held the reference "
                "once its line was stored: the message given to outline() was changed")


@pytest.mark.key
@pytest.mark.task("06.1")
def test_the_model_receives_the_full_content(lesson, sessions):
    """The reference is for the disk only: the model and the agent's memory always get
    the full content."""
    library = Library()
    model = ScriptedModel([use(call("read_scroll")), say("A long chronicle.")])
    with lesson.SessionLog(sessions, "quest-1") as log:
        agent = lesson.Agent(
            model.client(), model=model.model, tools=library, session=log
        )
        run_sending_no_reference(agent, model, PASTE)

    first, second = model.requests[0]["messages"], model.requests[1]["messages"]
    assert first[0]["content"] == PASTE, (
        "the first request should carry the whole paste; it carried "
        f"{str(first[0]['content'])[:120]!r}: the agent's own message was changed "
        "when its line was stored"
    )
    assert second[2]["content"] == library.scroll, (
        "the tool's whole result should go back to the model; it got "
        f"{str(second[2]['content'])[:120]!r}"
    )
    assert (
        agent.messages[0]["content"] == PASTE
        and agent.messages[2]["content"] == library.scroll
    ), (
        "the agent's memory should keep the full content; only the line on disk holds "
        "a reference"
    )
    stored = lines_of(sessions / "quest-1.jsonl")
    reference_in(stored[0])
    reference_in(stored[2])


@pytest.mark.key
@pytest.mark.task("06.2")
def test_day_two_sends_the_full_content_again(lesson, sessions, town):
    """After a resume, day 2's first request carries day 1's large content in full, read
    back from its blob."""
    day_one = ScriptedModel([say("What a map.")])
    with lesson.SessionLog(sessions, "quest-1") as log:
        run_sending_no_reference(lesson.Agent(
            day_one.client(), model=day_one.model, tools=town, session=log,
        ), day_one, PASTE)

    model = ScriptedModel([say("It shows the cave.")])
    with lesson.SessionLog(sessions, "quest-1") as log:
        agent = lesson.Agent(model.client(), model=model.model, tools=town, session=log)
        agent.run("What did the map show?")

    sent = model.requests[0]["messages"][0]["content"]
    assert sent == PASTE, (
        "day 2's first request should carry day 1's paste in full, read back from its "
        f"blob; got {str(sent)[:120]!r}"
    )


@pytest.mark.key
@pytest.mark.task("06.1")
def test_the_same_content_is_stored_once(lesson, sessions):
    """The same content stored three times makes one blob named by its hash: content
    addressing deduplicates for free."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": PASTE})
        log.append({"role": "user", "content": PASTE})
    with lesson.SessionLog(sessions, "quest-2") as log:
        log.append({"role": "tool", "tool_call_id": "call_1_0", "content": PASTE})

    digest = sha256(PASTE.encode("utf-8"))
    assert blob_names(sessions) == [digest], (
        "three copies of one content should make one blob, named by its hash; blobs/ "
        f"holds {blob_names(sessions)}"
    )
    lines = lines_of(sessions / "quest-1.jsonl") + lines_of(sessions / "quest-2.jsonl")
    named = [reference_in(line).get("$blob") for line in lines]
    assert named == [digest] * 3, (
        f"each of the three lines should point to the one blob {digest}; they point to "
        f"{named}")
    assert (sessions / "blobs" / digest).read_bytes() == PASTE.encode("utf-8"), (
        "the one blob should hold the content, whole")


@pytest.mark.task("06.1")
@pytest.mark.parametrize("content", [PASTE, BINARY_LOOKING],
                         ids=["1 MB paste", "binary-looking, with CR LF"])
def test_an_intact_stored_blob_is_left_as_it_is(lesson, sessions, content):
    """Storing content that is already stored, intact, writes nothing: the blob stays
    the very file it was (a reader, or a fork's log, may be using it), and the store
    succeeds on a disk too full for a copy of it (a real file size limit). Content
    with Windows line ends too."""
    data = content.encode("utf-8")
    blob = store(lesson, sessions, data)
    assert blob.is_file(), f"the content should be stored as blobs/{blob.name}"
    before = blob.stat()

    def store_again():
        try:
            store(lesson, sessions, data, "quest-2")
        except OSError as error:
            return f"OSError: {error}"
        return "stored"

    kind, message, outcome = with_file_size_limit(len(data) // 2, store_again)
    if kind != "ok" or outcome != "stored":
        fail_in("06.1", f"blobs/{blob.name} already held the content, intact, and the "
                "disk had no room for another copy of it; storing the same content "
                "again should write nothing, and so succeed, but it "
                f"{'raised ' + kind + ': ' + message if kind != 'ok' else outcome}: a "
                "store that writes a copy before it looks (a temporary file to link or "
                "rename) fails a paste whose blob is already there")

    after = blob.stat() if blob.is_file() else None
    assert after is not None and after.st_ino == before.st_ino, (
        f"blobs/{blob.name} was already stored, intact, yet storing the same content "
        "again replaced it with a new file (another inode): a reader, or a fork's log, "
        "using the stored blob was using a file that is no longer there")


@pytest.mark.task("06.1")
@pytest.mark.task("06.2")
@pytest.mark.parametrize("durable", [False, True], ids=["not durable", "durable"])
@pytest.mark.parametrize("linked", ["the sessions folder", "blobs/"])
def test_a_sessions_folder_reached_through_a_link_keeps_and_loads_its_blobs(
        lesson, sessions, linked, durable):
    """The sessions folder, or its blobs/, is reached through a symbolic link (a home
    folder, or the blobs alone, moved to another disk): only a link at a blob's own
    name is one to refuse. A content stored, by a durable writer too (which syncs
    blobs/ through that link), and stored again is found stored, the very file left
    as it was, and load puts it back."""
    real = sessions.parent / "on another disk"
    real.mkdir()
    if linked == "blobs/":
        (sessions / "blobs").symlink_to(real, target_is_directory=True)
        blob = real / sha256(PASTE.encode("utf-8"))
    else:
        sessions.rmdir()
        sessions.symlink_to(real, target_is_directory=True)
        blob = real / "blobs" / sha256(PASTE.encode("utf-8"))
    message = {"role": "user", "content": PASTE}
    writer = "a durable writer" if durable else "a writer"
    for session, what in (("quest-1", "a new paste"), ("quest-2", "the same paste")):
        try:
            with lesson.SessionLog(sessions, session, durable=durable) as log:
                log.append(message)
        except OSError as error:
            fail_in("06.1", f"with {linked} reached through a symbolic link, {writer} "
                    f"failed to append {what} ({type(error).__name__}: {error}): the "
                    "folder's link is not a link at the blob's name, and a sync of "
                    "blobs/ reaches the folder through it, as any open of a folder "
                    "does (one that refuses links is for a blob's own name)")
        if session == "quest-1":
            assert blob.is_file(), (
                f"the paste should be stored as blobs/{blob.name} of the sessions "
                f"folder, {linked} reached through its link")
            before = blob.stat()
    after = blob.stat() if blob.is_file() else None
    if after is None or after.st_ino != before.st_ino:
        fail_in("06.1", f"blobs/{blob.name} was stored, intact, with {linked} "
                "reached through a symbolic link, yet storing the same content again "
                "replaced it with a new file: the folder's link is not a link at the "
                "blob's name, and a reader, or another session's log, was using that "
                "very file")
    with lesson.SessionLog(sessions, "quest-1") as log:
        try:
            loaded = log.load()
        except ValueError as error:
            fail_in("06.2", f"a blob was refused with {linked} reached through a "
                    f"symbolic link ({type(error).__name__}: {error}): the blob "
                    "itself is a plain file, and the folder's link is not one at its "
                    "name, so no session of that folder could be loaded")
    if loaded != [message]:
        fail_in("06.2", f"with {linked} reached through a symbolic link, load "
                "should put the paste back from its blob; it gave "
                f"{str(loaded)[:200]}")


@pytest.mark.task("06.1")
@pytest.mark.parametrize("who, damage", [
    ("another writer", "cut short"),
    ("another writer", "same size, one word changed"),
    # A check that reads only the ends (or the size, or a sample) takes it for stored
    ("another writer", "same size, one word in its middle changed"),
    ("another writer", "grown by bytes appended"),
    ("the same writer", "cut short"),
    ("the same durable writer", "same size, one word changed"),
])
def test_storing_the_same_content_again_replaces_a_damaged_blob(lesson, sessions,
                                                                  who, damage):
    """A blob whose bytes were damaged (cut short by a disk error, a word changed by a
    bad copy, its size unchanged, at its start or in the middle of the megabyte, bytes
    appended) holds the whole content again, and
    nothing more, once that content is stored again: by another writer, or appended
    again by the very writer that stored it (what it remembers storing is no proof of
    what the name holds now)."""
    data = PASTE.encode("utf-8")
    blob = sessions / "blobs" / sha256(data)

    def damage_it():
        assert blob.is_file(), f"the paste should be stored as blobs/{blob.name}"
        middle = len(data) // 2
        blob.write_bytes(data[:1000] if damage == "cut short"
                         else data + b"\n" if damage.startswith("grown")
                         else data[:middle] + data[middle:].replace(b"cave", b"lake", 1)
                         if "middle" in damage
                         else PASTE.replace("cave", "lake", 1).encode("utf-8"))

    if who == "another writer":
        store(lesson, sessions, data)
        damage_it()
        store(lesson, sessions, data, "quest-2")
    else:
        with lesson.SessionLog(sessions, "quest-1",
                               durable=who.endswith("durable writer")) as log:
            log.append({"role": "user", "content": PASTE})
            damage_it()
            log.append({"role": "user", "content": PASTE})

    stored = blob.read_bytes() if blob.is_file() else b""
    assert stored == data, (
        f"blobs/{blob.name} was damaged ({damage}) and the same content was stored "
        f"again, by {who}; it now holds {len(stored)} bytes that are not the content: "
        "the damaged file was taken for the stored content"
        + ("" if who == "another writer" else
           " (the writer remembered storing it, and did not look at what the name "
           "holds now)")
        + ", and the session can no longer load its paste")


def damage_keeping_size_and_times(blob, data):
    """Change one word of the blob in place (the same file, the same size), then put
    its times back as they were, as a copy that keeps times (cp -p, rsync -t) does."""
    assert blob.is_file(), (
        f"the paste should be stored as blobs/{blob.name}, in the blobs/ folder every "
        f"session of the folder shares; it holds {blob_names(blob.parent.parent)}")
    before = blob.stat()
    with open(blob, "r+b") as file:
        file.write(data.replace(b"cave", b"lake", 1)[:64])
    os.utime(blob, ns=(before.st_atime_ns, before.st_mtime_ns))


@pytest.mark.task("06.1")
@pytest.mark.parametrize("who", ["the same writer", "the same durable writer",
                                 "another writer of the program"])
def test_a_blob_damaged_in_place_with_its_size_and_times_kept_is_stored_again(
        lesson, sessions, who):
    """A blob stored, and found intact by a later store, is then damaged in place by a
    copy that keeps its size and its times. The same content stored again, by the same
    writer or by another of the program, leaves the whole content at the name: only
    bytes that hash to the name count as stored, whatever the file's size and times
    say, and whatever a writer found there before."""
    data = PASTE.encode("utf-8")
    blob = sessions / "blobs" / sha256(data)
    paste = {"role": "user", "content": PASTE}
    with lesson.SessionLog(sessions, "quest-1", durable=who.endswith("durable writer")
                           ) as log, lesson.SessionLog(sessions, "quest-2") as other:
        log.append(paste)
        log.append(paste)       # found intact this time
        other.append(paste)
        assert blob.is_file(), f"the paste should be stored as blobs/{blob.name}"
        damage_keeping_size_and_times(blob, data)
        (other if who.startswith("another") else log).append(paste)
    stored = blob.read_bytes() if blob.is_file() else b""
    if stored != data:
        fail_in("06.1", f"blobs/{blob.name} was damaged in place (one word changed, "
                f"its size and times kept) and the same content was stored again, by "
                f"{who}; it still holds {len(stored)} bytes that are not the content: "
                "the name was taken for stored because the file looked as it did when "
                "it was found intact. Only bytes that hash to the name count as "
                "stored, and the session can no longer load its paste")


@pytest.mark.task("06.1")
def test_two_writers_storing_the_same_content_at_once_both_succeed(lesson, sessions):
    """Two sessions of the folder store the same content at the same moment: the
    second stores it whole while the first is putting its blob in place. Both stores
    succeed, each returning once the name holds the whole content, and blobs/ then
    holds the one blob, whole, and nothing else."""
    global _renaming
    data = PASTE.encode("utf-8")
    blobs = str(sessions / "blobs")
    second: list = []
    held_then: list = []
    with lesson.SessionLog(sessions, "quest-1") as log_1, \
            lesson.SessionLog(sessions, "quest-2") as log_2:

        def meanwhile(target):
            global _renaming
            if os.path.dirname(target) == blobs:
                _renaming = None        # once: the second store runs to its end here
                try:
                    second.append(log_2.store_blob(data))
                except Exception as error:
                    second.append(error)
                blob = sessions / "blobs" / sha256(data)
                held_then.append(blob.is_file() and blob.read_bytes() == data)

        _renaming = meanwhile
        try:
            log_1.store_blob(data)
        except OSError as error:
            pytest.fail(
                f"while one writer put the paste's blob in place, a writer of another "
                f"session stored the same paste; the first store then failed "
                f"({type(error).__name__}: {error}). Two sessions of a folder may "
                "store the same content at any moment: each must write under a name "
                "of its own until its blob is whole, and the blob's name is the only "
                "one they share", pytrace=False)
        finally:
            _renaming = None
    if second and isinstance(second[0], Exception):
        pytest.fail(
            f"a writer stored the paste while another session's writer was putting the "
            f"same blob in place, and failed "
            f"({type(second[0]).__name__}: {second[0]}): "
            "each store must write under a name of its own until its blob is whole",
            pytrace=False)
    if held_then and not held_then[0]:
        fail_in("06.1", "a writer stored the paste while another session's writer was "
                "putting the same blob in place, and its store returned before the "
                "blob's name held the whole paste: the line it writes next would point "
                "to a blob that is not there, and never will be if the other store "
                "fails. A store returns once the name holds the whole content, "
                "whatever another store is doing")
    names = sorted(os.listdir(blobs))
    digest = sha256(data)
    assert names == [digest], (
        f"two writers stored the same paste at once, and blobs/ holds {names}: it "
        f"should hold the one blob, {digest}, and nothing else")
    held = (sessions / "blobs" / digest).read_bytes()
    assert held == data, (
        f"two writers stored the same paste at once, and blobs/{digest} holds "
        f"{len(held)} bytes that are not the paste: one writer's bytes were put in "
        "place while the other was still writing them")


@pytest.mark.task("06.1")
def test_a_durable_store_syncs_the_blob_another_writer_put_in_place_meanwhile(
    lesson, sessions, monkeypatch
):
    """While a durable writer puts its blob in place, a writer that is not durable
    stores the same paste. Whichever file then holds the blob's name, the durable
    writer's store returns with it and blobs/ synced: its line will point to it."""
    global _renaming
    data = PASTE.encode("utf-8")
    blobs = str(sessions / "blobs")
    with lesson.SessionLog(sessions, "careful", durable=True) as careful, \
            lesson.SessionLog(sessions, "quick") as quick:

        def meanwhile(target):
            global _renaming
            if os.path.dirname(target) == blobs:
                _renaming = None        # once: the quick store runs to its end here
                quick.store_blob(data)

        synced = count_syncs(monkeypatch)
        _renaming = meanwhile
        try:
            careful.store_blob(data)
        finally:
            _renaming = None
            monkeypatch.undo()
    blob = sessions / "blobs" / sha256(data)
    assert blob.is_file(), (
        f"the paste should be stored in the folder's blobs/, named {blob.name}; "
        f"blobs/ holds {blob_names(sessions)}")
    assert blob.stat().st_ino in synced, (
        "a durable writer stored a paste while a writer that is not durable stored the "
        "same one, and returned without syncing the file that holds the blob's name "
        "now: a power cut could keep the durable writer's line and lose the blob")
    assert (sessions / "blobs").stat().st_ino in synced, (
        "a durable writer's store returned without syncing blobs/, where the blob's "
        "name lives: a power cut could lose the name")


@pytest.mark.key
@pytest.mark.task("06.1")
def test_a_fork_shares_blobs_and_copies_none(lesson, sessions):
    """A fork adds its log and meta file but no blob: blobs are shared by the folder,
    never copied or hard-linked."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": PASTE})
        log.append({"role": "assistant", "content": "What a map."})
    before = {p.relative_to(sessions): p.stat().st_ino for p in sessions.rglob("*")}

    lesson.fork(sessions, "quest-1", "what-if")

    after = {p.relative_to(sessions): p.stat().st_ino for p in sessions.rglob("*")}
    new = sorted(str(p) for p in after.keys() - before.keys())
    assert new == ["what-if.jsonl", "what-if.meta.json"], (
        "a fork adds its log and its meta file, and no blob (blobs are shared by the "
        f"whole folder); it added {new}"
    )
    assert all(after[p] == ino for p, ino in before.items()), (
        "the fork changed or replaced files of the original"
    )
    blob = sessions / "blobs" / sha256(PASTE.encode("utf-8"))
    assert blob.exists(), f"the paste should be stored as blobs/{blob.name}"
    assert blob.stat().st_nlink == 1, (
        "the fork hard-linked the blob; it should only point to it from its log"
    )
    assert len((sessions / "what-if.jsonl").read_bytes()) < 1024, (
        "the fork's log should hold the short reference, not the content"
    )
    forked = reference_in(lines_of(sessions / "what-if.jsonl")[0])
    assert forked.get("$blob") == blob.name and blob.read_bytes() == PASTE.encode(), (
        f"the fork's line should point to the shared blob {blob.name}, which holds the "
        f"paste; it points to {forked.get('$blob')!r}")


class LineWatch:
    """Wraps os.write: when the line holding a blob reference is written, notes whether
    its blob is already complete on disk, and can make the process "die" right there."""

    def __init__(self, blobs, digest, crash=False):
        self.blobs, self.digest, self.crash = blobs, digest, crash
        self.real = os.write
        self.blob_was_complete = None

    def __call__(self, fd, data):
        if b'"$blob"' in bytes(data):
            blob = self.blobs / self.digest
            self.blob_was_complete = (
                blob.is_file() and sha256(blob.read_bytes()) == self.digest
            )
            if self.crash:
                raise SimulatedCrash("the process dies just before the line is written")
        return self.real(fd, data)


@pytest.mark.key
@pytest.mark.task("06.1")
def test_the_blob_is_complete_on_disk_before_the_line_that_points_to_it(
    lesson, sessions, monkeypatch
):
    """The blob is complete on disk before the line pointing to it is written, so no
    crash leaves a reference to missing bytes."""
    digest = sha256(PASTE.encode("utf-8"))
    watch = LineWatch(sessions / "blobs", digest)
    monkeypatch.setattr(lesson.os, "write", watch)

    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": PASTE})

    assert watch.blob_was_complete is not None, (
        "the line with the reference should be written with os.write, as every line is"
    )
    assert watch.blob_was_complete, (
        "when the line pointing to the blob was written, the blob was not yet complete "
        "on disk: a crash at that moment would leave a reference to missing bytes"
    )


@pytest.mark.task("06.1")
def test_a_crash_between_blob_and_line_leaves_at_worst_an_unused_blob(
    lesson, sessions, monkeypatch
):
    """A crash after the blob and before the line leaves an unused blob and a log that
    loads as before: harmless, and reused next time."""
    digest = sha256(PASTE.encode("utf-8"))
    monkeypatch.setattr(
        lesson.os, "write", LineWatch(sessions / "blobs", digest, crash=True)
    )

    with pytest.raises(SimulatedCrash):
        with lesson.SessionLog(sessions, "quest-1") as log:
            log.append(SMALL)
            log.append({"role": "user", "content": PASTE})
    monkeypatch.undo()

    assert b"$blob" not in (sessions / "quest-1.jsonl").read_bytes(), (
        "the line was never written, so no reference can be on disk"
    )
    with lesson.SessionLog(sessions, "quest-1") as log:
        assert log.load() == [SMALL], "the log should load as it was before the crash"
    assert blob_names(sessions) == [digest], (
        "the blob written before the crash stays, unused: harmless, and reused next "
        "time"
    )


@pytest.mark.key
@pytest.mark.task("06.1")
def test_a_crash_while_the_blob_is_written_leaves_no_reference(
    lesson, sessions, monkeypatch
):
    """A crash while the blob is put in place leaves no file under the blob's name and
    no reference: the name never holds half a blob."""
    blobs = str(sessions / "blobs")
    renames = []

    def crash_on_blob(real):
        def wrapper(source, target, *args, **kwargs):
            if os.fspath(target).startswith(blobs + os.sep):   # a blob's name
                renames.append(os.fspath(target))
                raise SimulatedCrash(
                    "the process dies while the blob is being put in place"
                )
            return real(source, target, *args, **kwargs)
        return wrapper

    for name in ("replace", "rename", "link"):
        monkeypatch.setattr(lesson.os, name, crash_on_blob(getattr(os, name)))

    crashed = False
    try:
        with lesson.SessionLog(sessions, "quest-1") as log:
            log.append(SMALL)
            log.append({"role": "user", "content": PASTE})
    except SimulatedCrash:
        crashed = True
    monkeypatch.undo()

    assert crashed, (
        "the blob reached its name in blobs/ without a rename: while it was being "
        "written, the name <sha256> held only part of the content, and a crash then "
        "would leave half a blob that every later store and load takes for the paste")
    with lesson.SessionLog(sessions, "quest-1") as log:
        try:
            loaded = log.load()
        except lesson.BlobError as error:
            pytest.fail(
                "the crash left a line pointing to a blob that was never stored "
                f"({error})"
            )
    assert loaded == [SMALL], (
        f"only the message before the crash should be in the log, found {len(loaded)} "
        "messages"
    )


def dies_while_storing(lesson, sessions, content):
    """Append `content` in a forked process that is killed (no except, no finally runs)
    the moment it puts anything in place in blobs/. Its exit code: 9 when it died there,
    0 when it appended without putting anything there."""
    blobs = os.fspath(sessions / "blobs")
    pid = os.fork()
    if pid == 0:    # the child: never returns into pytest
        code = 1
        try:
            for name in ("replace", "rename", "link"):
                def dying(source, target, *args, _real=getattr(os, name), **kwargs):
                    if os.path.dirname(os.fspath(target)) == blobs:
                        os._exit(9)
                    return _real(source, target, *args, **kwargs)
                setattr(os, name, dying)
            with lesson.SessionLog(sessions, "quest-1") as log:
                log.append({"role": "user", "content": content})
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.task("06.1")
@pytest.mark.parametrize("before", ["nothing", "a damaged copy"])
def test_a_process_killed_while_storing_a_blob_leaves_the_next_store_whole(
    lesson, sessions, before
):
    """A process killed while it puts a blob in place cleans nothing up. Whatever it
    left, the blob's name holds what it held before (nothing, or a damaged copy), and
    the next writer stores the same content whole."""
    with lesson.SessionLog(sessions, "warm-up") as log:
        log.append({"role": "user", "content": "x" * 5000})    # 06.1 is written
    data = PASTE.encode("utf-8")
    blob = sessions / "blobs" / sha256(data)
    if before != "nothing":
        blob.parent.mkdir(exist_ok=True)
        blob.write_bytes(data[:1000])
    code = dies_while_storing(lesson, sessions, PASTE)
    if code == 0:
        pytest.fail("appending the paste put nothing in place in blobs/ with a rename "
                    "or a link: either it stored no blob, or the blob's name held part "
                    "of it while it was written (a crash then leaves half a blob)",
                    pytrace=False)
    assert code == 9, (
        f"the process storing the paste failed before it died (exit {code})")
    held = blob.read_bytes() if blob.is_file() else None
    was = None if before == "nothing" else data[:1000]
    assert held in (was, data), (
        f"with {before} at the blob's name, a process was killed while it put the "
        "paste in place: the name must then hold what it held before or the whole "
        "paste; it "
        + ("holds nothing: the damaged copy was removed before the new one was in "
           "place, and a log pointing to the blob finds it missing" if held is None
           else f"holds {len(held)} bytes that are neither"))
    try:
        with lesson.SessionLog(sessions, "quest-2") as log:
            log.append({"role": "user", "content": PASTE})
    except OSError as error:
        pytest.fail(f"a process was killed while storing the paste; storing it again "
                    f"then failed ({type(error).__name__}: {error}). A crash can leave "
                    "anything a store had begun: the next store must not trip over it",
                    pytrace=False)
    held = blob.read_bytes() if blob.is_file() else None
    assert held == data, (
        f"after the second store, blobs/{blob.name} (the paste's sha256) should hold "
        "the whole paste; it holds "
        + ("nothing" if held is None else f"{len(held)} bytes that are not the paste"))


def watch_syncs(monkeypatch, events, path):
    """Record ("fsync", inode, whether `path` has its name by then) for every os.fsync
    (or os.fdatasync) and ("line", None, None) when the line holding a blob reference
    is written."""
    real_write = os.write

    def syncing(real):
        def sync(fd):
            events.append(("fsync", os.fstat(fd).st_ino, path.exists()))
            real(fd)
        return sync

    def write(fd, data):
        if b'"$blob"' in bytes(data):
            events.append(("line", None, None))
        return real_write(fd, data)

    for name in ("fsync", "fdatasync"):
        monkeypatch.setattr(os, name, syncing(getattr(os, name)))
    monkeypatch.setattr(os, "write", write)


def count_syncs(monkeypatch):
    """The inodes os.fsync (or os.fdatasync) is called on from now, in a list."""
    synced = []

    def syncing(real):
        def sync(fd):
            synced.append(os.fstat(fd).st_ino)
            real(fd)
        return sync

    for name in ("fsync", "fdatasync"):
        monkeypatch.setattr(os, name, syncing(getattr(os, name)))
    return synced


@pytest.mark.task("06.1")
@pytest.mark.parametrize("size", ["a megabyte", "a few words"])
def test_durable_mode_syncs_the_blob_and_its_folder_before_the_line(
    lesson, sessions, monkeypatch, size
):
    """In durable mode the blob's bytes and the blobs/ folder are fsynced before
    store_blob returns, so before append writes the line that points to the blob: the
    bytes before they get the blob's name, once the file holds every one of them (a
    file object keeps a short blob in its buffer until it is flushed), the folder once
    it holds that name."""
    events = []
    data = (PASTE if size == "a megabyte" else "Day 1: the elder's map, by hand."
            ).encode("utf-8")
    blob = sessions / "blobs" / sha256(data)
    held = []       # (inode, bytes in the file) at each sync

    def sized(real):
        def sync(fd):
            found = os.fstat(fd)
            held.append((found.st_ino, found.st_size))
            real(fd)
        return sync

    with lesson.SessionLog(sessions, "quest-1", durable=True) as log:
        watch_syncs(monkeypatch, events, blob)
        for name in ("fsync", "fdatasync"):
            monkeypatch.setattr(os, name, sized(getattr(os, name)))
        log.store_blob(data)
        monkeypatch.undo()

    assert blob.exists(), f"the paste should be stored as blobs/{blob.name}"
    synced = [ino for kind, ino, _ in events]
    assert blob.stat().st_ino in synced, (
        "in durable mode, store_blob returned without syncing the blob's bytes: the "
        "line append writes next could survive a power cut that loses the bytes"
    )
    folder = (sessions / "blobs").stat().st_ino
    assert folder in synced, (
        "in durable mode, store_blob returned without syncing blobs/: the blob's name "
        "lives in that folder, and a power cut could lose it while the line that "
        "append writes next survives")
    assert any(ino == folder and named for _, ino, named in events), (
        "blobs/ was synced only while the blob had no name in it yet: a folder's sync "
        "saves the names it holds at that moment, so the blob's name was never saved")
    assert any(ino == blob.stat().st_ino and not named for _, ino, named in events), (
        "in durable mode the blob's bytes were synced only once they stood under its "
        "name: a power cut between the rename and that sync can leave part of the "
        "blob under its name, and a store is all or nothing; sync the bytes before "
        "the rename that names them")
    seen = [found for ino, found in held if ino == blob.stat().st_ino]
    if len(data) not in seen:
        fail_in("06.1", f"in durable mode the blob of {size} ({len(data)} bytes) was "
                f"synced while its file held {seen} bytes, never all of them: the "
                "bytes written after the sync (a file object's buffer, flushed as it "
                "closes) are not on the disk, and a power cut can leave the blob's "
                "name on a file that is not whole. Sync once every byte is written")


DAMAGES = {
    "same size, one word changed":
        lambda data: data.replace(b"cave", b"lake", 1),
    "its line ends turned into CR LF by a copy":
        lambda data: data.replace(b"\n", b"\r\n"),
    # A failing disk flips a bit: the letter becomes a byte no UTF-8 text holds there.
    # The hash says what happened (the bytes changed), not the decoder.
    "one bit flipped by a failing disk":
        lambda data: data[:1000] + bytes([data[1000] ^ 0x80]) + data[1001:],
}


@pytest.mark.key
@pytest.mark.task("06.2")
@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_blob_whose_bytes_changed_is_refused_naming_it_and_the_line(lesson, sessions,
                                                                      monkeypatch,
                                                                      damage):
    """A blob whose bytes no longer match its hash (one word changed, its line ends
    turned into CR LF by a copy, a bit flipped so that it is no UTF-8 any more) is
    refused with a BlobError naming the blob, the log (by its full path, whatever
    folder the program runs from) and the line, and saying that its bytes changed."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append(SMALL)
        log.append({"role": "user", "content": PASTE})
    digest = sha256(PASTE.encode("utf-8"))
    blob = sessions / "blobs" / digest
    assert blob.is_file(), (
        f"the paste should be stored in the folder's blobs/, named {digest}; blobs/ "
        f"holds {blob_names(sessions)}")
    blob.write_bytes(DAMAGES[damage](PASTE.encode("utf-8")))
    before = snapshot(sessions)
    monkeypatch.chdir(sessions.parent)      # the program runs from another folder

    with lesson.SessionLog(sessions, "quest-1") as log:
        with raises(lesson.BlobError,
                    f"a blob whose bytes no longer match its hash ({damage}) was "
                    "loaded as if it were the paste") as refused:
            log.load()

    unchanged(sessions, before,
              "a refused load must change nothing, not a byte, a mode or a time: the "
              "damaged blob is evidence, and the user decides what to do with it")

    message = str(refused.value)
    assert isinstance(refused.value, ValueError), "BlobError should be a ValueError"
    assert (
        digest in message
        and str(sessions / "quest-1.jsonl") in message
        and re.search(r"\bline 2\b", message)
    ), (
        f"the error should name the blob ({digest}), the log by its path "
        f"({sessions / 'quest-1.jsonl'}) and the line (line 2); it says: {message}"
    )
    says_what_it_met(refused.value, "bytes that changed", sessions)


@pytest.mark.task("06.2")
@pytest.mark.parametrize("who", ["the same writer", "a new log of the session"])
def test_a_blob_changed_after_this_writer_stored_and_loaded_it_is_refused(lesson,
                                                                        sessions, who):
    """A durable writer stores the paste and loads it back; then a bad copy changes the
    blob in place, keeping its size and its times. The next load, by the same writer or
    by a new log of the session in the same program, is refused: each load reads blobs/
    as it is now and checks the hash again, whatever this writer, or any other of the
    program, stored, synced or read before."""
    data = PASTE.encode("utf-8")
    blob = sessions / "blobs" / sha256(data)
    with lesson.SessionLog(sessions, "quest-1", durable=True) as log:
        log.append(SMALL)
        log.append({"role": "user", "content": PASTE})
        assert log.load() == [SMALL, {"role": "user", "content": PASTE}], (
            "the paste should load back byte for byte from its blob")
        damage_keeping_size_and_times(blob, data)
        if who == "the same writer":
            try:
                loaded = log.load()
            except lesson.BlobError as error:
                says_what_it_met(error, "bytes that changed", sessions)
                return
    if who != "the same writer":
        with lesson.SessionLog(sessions, "quest-1") as log:
            try:
                loaded = log.load()
            except lesson.BlobError as error:
                says_what_it_met(error, "bytes that changed", sessions)
                return
    sent = loaded[1].get("content") if len(loaded) > 1 else None
    pytest.fail(
        "the blob changed after this writer stored and loaded it, and the writer's "
        "next load was not refused: it gave "
        + ("the changed bytes, unchecked (this writer stored the blob, so it trusted "
           "it)" if sent == data.replace(b"cave", b"lake", 1).decode() else
           "the content it remembered, not what blobs/ holds now (another process "
           "loading this session is refused)" if sent == PASTE else
           f"{str(sent)[:120]!r}")
        + ". A load checks what blobs/ holds now, every time", pytrace=False)


@pytest.mark.key
@pytest.mark.task("06.2")
@pytest.mark.parametrize("gone", ["the blob", "blobs/"])
def test_a_missing_blob_is_refused_naming_it_and_the_line(lesson, sessions, gone,
                                                           monkeypatch):
    """A reference to a blob that is missing (removed by hand, or the whole of blobs/
    left behind when the folder was copied) is refused at once, without a pause to see
    whether it comes, with an error naming the blob, the log and the line: the log by
    its full path, whatever folder the program runs from (a path relative to it
    reaches no file from where the user reads the error)."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": PASTE})
    digest = sha256(PASTE.encode("utf-8"))
    assert (sessions / "blobs" / digest).exists(), (
        f"the paste should be stored in the folder's blobs/, named {digest}")
    (sessions / "blobs" / digest).unlink()
    if gone == "blobs/":
        shutil.rmtree(sessions / "blobs")

    import time
    before = snapshot(sessions)
    waits = []
    monkeypatch.setattr(time, "sleep", waits.append)    # noted, never waited for
    monkeypatch.chdir(sessions.parent)      # the program runs from another folder
    with lesson.SessionLog(sessions, "quest-1") as log:
        with raises(lesson.BlobError,
                    f"a reference to a missing blob ({gone} removed) was loaded "
                    "without a BlobError") as refused:
            log.load()
    monkeypatch.undo()
    made = sorted(str(path.relative_to(sessions)) for path in sessions.rglob("*")
                  if path.is_dir())
    assert snapshot(sessions) == before and made == ([] if gone == "blobs/"
                                                       else ["blobs"]), (
        f"a load refused for a missing blob ({gone} removed) changed the sessions "
        f"folder (its folders are now {made}): a refused load changes nothing, and a "
        "load makes nothing, blobs/ included, so that what the user finds is what was "
        "there when the blob went missing")
    assert not waits, (
        f"a blob was missing ({gone} removed), and load paused ({waits[0]} s) before "
        "it refused: a load never waits. A blob is stored whole before any line points "
        "to it, so no store in progress can make a missing blob appear: the pause only "
        "holds up every program loading a session that lost a blob")

    message = str(refused.value)
    assert (
        digest in message
        and str(sessions / "quest-1.jsonl") in message
        and re.search(r"\bline 1\b", message)
    ), (
        f"the error should name the missing blob ({digest}), the log by its path "
        f"and the line (line 1); it says: {message}"
    )
    says_what_it_met(refused.value, "a missing blob", sessions)


@pytest.mark.task("06.2")
@pytest.mark.parametrize("happened", ["missing", "changed"])
def test_a_blob_restored_after_a_refused_load_loads(lesson, sessions, happened):
    """A load refused for a missing blob, or for one whose bytes changed, tells the
    user to restore it; once it is back, the next load reads it, by the same log object
    too: a refusal is what blobs/ held then, not a verdict kept on the name."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": PASTE})
    blob = sessions / "blobs" / sha256(PASTE.encode("utf-8"))
    assert blob.is_file(), (
        f"the paste should be stored in the folder's blobs/, named {blob.name}; "
        f"blobs/ holds {blob_names(sessions)}")
    backup = blob.read_bytes()
    if happened == "missing":
        blob.unlink()
    else:
        blob.write_bytes(backup.replace(b"cave", b"lake", 1))
    log = lesson.SessionLog(sessions, "quest-1")
    with raises(lesson.BlobError,
                f"a reference to a {happened} blob was loaded without a BlobError"):
        log.load()
    blob.write_bytes(backup)        # the user restores it from a backup
    try:
        loaded = log.load()
    except lesson.BlobError as error:
        pytest.fail(
            f"a load was refused because a blob was {happened}; the user restored the "
            "blob, whole, and loaded again with the same log, which refused it again "
            f"({error}): a refusal must look at blobs/ as it is now, not remember the "
            "name it refused", pytrace=False)
    content = loaded[0].get("content") if loaded else None
    assert content == PASTE, (
        "once the missing blob was restored, the load should give the paste back; it "
        f"gave {str(content)[:120]!r}")


@pytest.mark.task("06.2")
@pytest.mark.parametrize(
    "name",
    [
        "../quest-2.jsonl",
        "/etc/hostname",
        "..",
        "",
        "blobs/" + "a" * 64,
        "A" * 64,
        "a" * 63,
        "sha256:" + "a" * 64,
        42,
        int("1" * 64),
        None,
        sha256(PASTE.encode()) + "/../../quest-2.jsonl",
        sha256(PASTE.encode()) + "\n",
        # Its last digit one of another script (ARABIC-INDIC DIGIT THREE): a digit to
        # Unicode, never one of a sha256 name
        sha256(PASTE.encode())[:-1] + "\u0663",
    ],
)
def test_a_reference_that_is_not_a_plain_hash_is_refused(lesson, sessions, name):
    """A reference that is not a plain sha256 hex name (a path, say, or digits of
    another script) is refused naming the log and line and quoting the name as the
    line holds it (or as Python spells it: an empty name, or a line end after a hash,
    shows), opens nothing at all, and the load changes nothing."""
    # Another session, with a real blob
    with lesson.SessionLog(sessions, "quest-2") as log:
        log.append({"role": "user", "content": PASTE})
    line = {"role": "user", "content": {"$blob": name, "size": 10, "preview": "a path"}}
    log_path = sessions / "quest-1.jsonl"
    log_path.write_text(
        json.dumps(SMALL) + "\n" + json.dumps(line) + "\n", encoding="utf-8"
    )
    before = snapshot(sessions)

    def used_as_a_path(opened):
        """What the load opened besides its own log: in the sessions folder, or the
        system file a reference names."""
        return [path for path in opened if path != str(log_path) and (
            path.startswith(str(sessions)) or path == "/etc/hostname")]

    with lesson.SessionLog(sessions, "quest-1") as log, paths_opened() as opened:
        try:
            with raises(lesson.BlobError,
                        f"the reference {name!r}, which is not a sha256 hash, was "
                        "loaded without a BlobError") as refused:
                log.load()
        except pytest.fail.Exception:
            if not used_as_a_path(opened):
                raise
    if used := used_as_a_path(opened):
        pytest.fail(f"load opened {used[0]} for the reference {name!r}, which is not a "
                    "plain hash: it was used as a path (whatever error came of it). "
                    "A name that is not exactly 64 lowercase hex digits must open "
                    "nothing", pytrace=False)

    message = str(refused.value)
    assert (
        str(sessions / "quest-1.jsonl") in message
        and re.search(r"\bline 2\b", message)
    ), (
        f"the error should name the log by its path and the line (line 2); it says: "
        f"{message}"
    )
    # Quoted as Python or as the line (JSON) spells it: either shows where it starts
    # and ends, an empty name, spaces and a line end included
    quoted = [repr(name), json.dumps(name), json.dumps(name, ensure_ascii=False)]
    assert any(form in message for form in quoted), (
        f"the error should quote the reference as the line holds it, {quoted[1]} (or "
        f"as Python spells it, {quoted[0]}), so that the user sees what stands there, "
        f"where it begins and ends (an empty name, a line end after a hash); it says: "
        f"{message}")
    says_what_it_met(refused.value, "a name that is no hash", sessions, name)
    unchanged(sessions, before, "a refused load must change nothing")


@pytest.mark.task("06.2")
def test_a_text_that_quotes_a_reference_loads_as_it_is(lesson, sessions):
    """A user pastes a line of a log: their text holds a reference's words, but it is
    text, not a reference, and loads as it was written."""
    with lesson.SessionLog(sessions, "quest-2") as log:
        log.append({"role": "user", "content": PASTE})
    line = (sessions / "quest-2.jsonl").read_text(encoding="utf-8").strip()
    reference = json.dumps(json.loads(line)["content"])
    asked = f"What does this line of my log mean? {line}"
    quoting = [{"role": "user", "content": asked},
               {"role": "user", "content": reference}]     # the reference alone
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in quoting:
            log.append(message)
    with lesson.SessionLog(sessions, "quest-1") as log:
        try:
            loaded = log.load()
        except (TypeError, ValueError, KeyError) as error:
            pytest.fail(f"loading a text that quotes a blob reference raised "
                        f"{error!r}: it is a text, and only an object is a reference",
                        pytrace=False)
    assert loaded == quoting, (
        "a text that quotes a reference, a line of a log or the reference alone, "
        "should load as it was written: it is text, the user's words, and only an "
        f"object in the line is a reference; it loaded as {str(loaded)[:300]}")


@pytest.mark.task("06.1")
def test_durable_mode_syncs_a_stored_blob_it_reuses(lesson, sessions, monkeypatch):
    """The blob was stored by a writer that did not sync it: a durable writer pointing
    to it must sync it and blobs/ first, or a power cut could keep its line and lose the
    blob; once synced, it is not synced again at every append. The durable writer has
    written and synced a blob of its own before: what it synced of one blob says
    nothing of another."""
    data = PASTE.encode("utf-8")
    blob = store(lesson, sessions, data, "quick")                # not durable
    assert blob.is_file(), (
        f"the paste should be stored in the folder's blobs/, named {blob.name}; "
        f"blobs/ holds {blob_names(sessions)}")
    found = blob.stat().st_ino
    with lesson.SessionLog(sessions, "careful", durable=True) as log:
        log.store_blob(NON_ASCII.encode("utf-8"))   # its own: written and synced
        synced = count_syncs(monkeypatch)
        log.store_blob(data)
        first = list(synced)
        log.store_blob(data)
        log.store_blob(data)
        monkeypatch.undo()
    assert blob.stat().st_ino == found, (
        "a durable writer found the blob stored, intact, by a writer that never "
        "synced it, and replaced it with a file of its own (another inode) instead of "
        "syncing the one it found: a stored blob stays the very file it is (a reader, "
        "or another session, may be using it)")
    assert blob.stat().st_ino in first, (
        "a durable writer that had written and synced a blob of its own found another "
        "stored by a writer that never synced it, and returned without syncing it: a "
        "power cut could keep the line that points to it and lose the blob. Having "
        "synced one blob says nothing of another")
    assert (sessions / "blobs").stat().st_ino in first, (
        "a durable writer synced the blob it found stored but not blobs/, where its "
        "name lives, before returning: a power cut could lose the name")
    times = synced.count(blob.stat().st_ino)
    assert times == 1, (
        f"three stores of the same content by one durable writer synced its blob "
        f"{times} times; once per writer was expected")


@pytest.mark.task("06.1")
def test_a_durable_writer_syncs_a_blob_it_wrote_once(lesson, sessions, monkeypatch):
    """A durable writer that wrote a blob (and synced it) does not sync it again when
    the same content comes back, another blob stored in between or not."""
    data = PASTE.encode("utf-8")
    with lesson.SessionLog(sessions, "careful", durable=True) as log:
        synced = count_syncs(monkeypatch)
        log.store_blob(data)
        log.store_blob(data)
        log.store_blob(NON_ASCII.encode("utf-8"))
        log.store_blob(data)
        monkeypatch.undo()
    blob = sessions / "blobs" / sha256(data)
    assert blob.is_file(), (
        f"the paste should be stored as blobs/{blob.name}; blobs/ holds "
        f"{blob_names(sessions)}")
    times = synced.count(blob.stat().st_ino)
    assert times == 1, (
        f"the writer wrote and synced the blob, then stored the same content again, "
        f"then another, then the first once more, and synced the first blob {times} "
        "times in all; once per writer was expected, whatever it stored in between")


@pytest.mark.task("06.1")
def test_a_durable_writer_syncs_again_a_blob_it_writes_again(lesson, sessions,
                                                               monkeypatch):
    """A durable writer stored and synced a blob; then it was removed (a clean-up by
    hand), or damaged, behind the writer's back. Storing the content again writes a new
    file: its bytes and its name are synced again, as for any new blob, or a power cut
    could keep the line that points to it and lose the blob."""
    data = PASTE.encode("utf-8")
    blob = sessions / "blobs" / sha256(data)
    damages = {"removed": lambda: blob.unlink(),
               "damaged": lambda: blob.write_bytes(data.replace(b"cave", b"lake", 1))}
    with lesson.SessionLog(sessions, "careful", durable=True) as log:
        log.store_blob(data)
        assert blob.is_file(), (
            f"the paste should be stored in the folder's blobs/, named {blob.name}; "
            f"blobs/ holds {blob_names(sessions)}")
        for damage, do in damages.items():
            do()
            events = []
            watch_syncs(monkeypatch, events, blob)
            log.store_blob(data)
            monkeypatch.undo()
            assert blob.is_file() and sha256(blob.read_bytes()) == blob.name, (
                f"the blob was {damage}, and storing its content again should leave "
                f"the whole content under its name")
            synced = [ino for _, ino, _ in events]
            assert blob.stat().st_ino in synced, (
                f"a durable writer's blob was {damage} behind its back; storing the "
                "content again wrote a new file under the blob's name, and returned "
                "without syncing its bytes. Remembering which blobs were synced must "
                "not skip a blob written anew")
            folder = (sessions / "blobs").stat().st_ino
            assert any(ino == folder and named for _, ino, named in events), (
                f"a durable writer's blob was {damage} behind its back; storing the "
                "content again wrote a new file under the blob's name, and returned "
                "without syncing blobs/ once it held that name: a power cut could lose "
                "the name while the line that points to it survives. Remembering "
                "which blobs were synced must not skip a blob written anew")


@pytest.mark.task("06.1")
def test_a_durable_writer_syncs_each_of_many_blobs_once(lesson, sessions, monkeypatch):
    """A durable writer that stored over 512 blobs still knows the first was synced:
    its content coming back syncs nothing, however many blobs came in between."""
    contents = [f"page {n} of the chronicle".encode("utf-8") for n in range(520)]
    monkeypatch.setattr(os, "fsync", lambda fd: None)   # counted below, not waited for
    monkeypatch.setattr(os, "fdatasync", lambda fd: None)
    with lesson.SessionLog(sessions, "careful", durable=True) as log:
        for data in contents:
            log.store_blob(data)
        synced = count_syncs(monkeypatch)
        log.store_blob(contents[0])
        log.store_blob(contents[len(contents) // 2])
    monkeypatch.undo()
    assert synced == [], (
        f"a durable writer stored {len(contents)} blobs, each synced as it was "
        f"written, then the first and the middle one again, and synced {len(synced)} "
        "times: it should remember every blob it synced, not only the last few "
        "hundred, and sync none again")


@pytest.mark.task("06.1")
def test_each_durable_writer_syncs_a_blob_written_anew_since_another_synced_it(
    lesson, sessions, monkeypatch
):
    """A durable writer synced a blob it found stored; the blob was then removed and
    stored again by a writer that is not durable. A second durable writer, in the same
    program, finds a file no one synced: it syncs it, as the first one did."""
    data = PASTE.encode("utf-8")
    blob = store(lesson, sessions, data, "quick")               # not durable
    assert blob.is_file(), (
        f"the paste should be stored in the folder's blobs/, named {blob.name}; "
        f"blobs/ holds {blob_names(sessions)}")
    with lesson.SessionLog(sessions, "careful", durable=True) as log:
        log.store_blob(data)                    # syncs the blob it found
    blob.unlink()                               # a clean-up by hand
    store(lesson, sessions, data, "quick")      # not durable: the new file not synced
    assert blob.is_file(), (
        "a blob was removed by hand, and storing its content again should put it back "
        f"under its name; blobs/ holds {blob_names(sessions)}")
    with lesson.SessionLog(sessions, "careful-2", durable=True) as log:
        synced = count_syncs(monkeypatch)
        log.store_blob(data)
        monkeypatch.undo()
    assert blob.stat().st_ino in synced, (
        "a blob was stored anew by a writer that is not durable, after another durable "
        "writer had synced the file then at its name; a second durable writer found it "
        "and returned without syncing it: a power cut could keep that writer's line "
        "and lose the blob. What a writer synced is known to it alone, and says "
        "nothing of the file at the name now")


@pytest.mark.task("06.1")
def test_a_writer_that_is_not_durable_never_syncs(lesson, sessions, monkeypatch):
    """Without durable=True nothing is fsynced, the blobs/ folder it makes, a new blob
    or a reused one: that speed is what a writer that is not durable chose."""
    synced = count_syncs(monkeypatch)
    store(lesson, sessions, PASTE.encode("utf-8"), "quick")      # makes blobs/
    first = len(synced)
    with lesson.SessionLog(sessions, "quick-2") as log:
        log.store_blob(PASTE.encode("utf-8"))          # reused
        log.store_blob(NON_ASCII.encode("utf-8"))      # new
    monkeypatch.undo()
    assert synced == [], (
        f"a writer that is not durable synced {first} times while it made blobs/ and "
        f"stored its first blob, and {len(synced) - first} times while it stored a "
        "blob stored before and a new one; it should never sync")


@pytest.mark.task("06.1")
@pytest.mark.parametrize("holding", ["a folder", "nothing"], ids=["full", "empty"])
def test_a_folder_at_the_blobs_name_fails_every_store_and_leaves_nothing(lesson,
                                                                         sessions,
                                                                         holding):
    """The blob's name is taken by a folder, holding something or nothing: every try
    fails with OSError and leaves no copy of the content behind, and no file
    descriptor open, and the folder stays as it was (a folder may hold anything)."""
    digest = sha256(PASTE.encode("utf-8"))
    folder = sessions / "blobs" / digest
    folder.mkdir(parents=True)
    if holding == "a folder":
        (folder / "in-the-way").mkdir()
    with lesson.SessionLog(sessions, "quest-1") as log:
        before = open_descriptors()
        for _ in range(2):
            with raises(OSError,
                        f"blobs/{digest} is a folder holding {holding}, so the blob "
                        "cannot be put under that name; store_blob returned anyway: "
                        "the blob went under another name, or the folder was taken "
                        "away (a folder at a blob's name is never replaced), or it was "
                        "taken for the stored blob without reading it as a file"):
                log.store_blob(PASTE.encode("utf-8"))
        leaked = open_descriptors() - before
        with raises(OSError,
                    "a large content whose blob could not be stored (a folder at its "
                    "name) was appended anyway: the error of the store should reach "
                    "the caller of append, and nothing be written"):
            log.append({"role": "user", "content": PASTE})
    logged = (sessions / "quest-1.jsonl").read_bytes() if (
        sessions / "quest-1.jsonl").exists() else b""
    assert logged == b"", (
        f"the append whose blob could not be stored failed, yet the log holds "
        f"{len(logged)} bytes: a content that large leaves the line or is not written")
    left = [p.name for p in (sessions / "blobs").iterdir() if p.name != digest]
    assert left == [], (f"failed stores left files in blobs/: {left}; every try "
                        "leaves one more copy of the content behind")
    assert leaked == 0, (
        f"two stores that failed (a folder at the blob's name) left {leaked} file "
        "descriptor(s) open: every failed try holds one more, until the process can "
        "open no file at all")
    inside = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else None
    assert inside == ([] if holding == "nothing" else ["in-the-way"]), (
        f"blobs/{digest} was a folder holding {holding}, and after the failed stores "
        + ("it is no folder" if inside is None else f"it holds {inside}")
        + ": a folder at a blob's name is never replaced, nor changed")


@pytest.mark.task("06.1")
@pytest.mark.parametrize("durable", [False, True], ids=["not durable", "durable"])
def test_a_store_that_succeeds_leaves_no_descriptor_open(lesson, sessions, durable):
    """Storing a new blob, the same content again, a content over its damaged blob and
    a blob another writer stored leave no file descriptor open: a writer stores a blob
    at every large append, and one descriptor lost a time runs a long session out of
    them."""
    data = PASTE.encode("utf-8")
    theirs = NON_ASCII.encode("utf-8")
    store(lesson, sessions, theirs, "quest-2")
    blob = sessions / "blobs" / sha256(data)
    with lesson.SessionLog(sessions, "quest-1", durable=durable) as log:
        before = open_descriptors()
        steps = []
        log.store_blob(data)
        steps.append(("a new blob", open_descriptors() - before))
        log.store_blob(data)
        steps.append(("the same content again", open_descriptors() - before))
        blob.write_bytes(data[:1000])
        log.store_blob(data)
        steps.append(("the content over its damaged blob", open_descriptors() - before))
        log.store_blob(theirs)
        steps.append(("a blob another writer stored", open_descriptors() - before))
    leaked = next(((what, count) for what, count in steps if count), None)
    assert leaked is None, (
        f"storing {leaked and leaked[0]} left {leaked and leaked[1]} file "
        "descriptor(s) open that were not open before: a writer stores a blob at every "
        "large append, and one lost a time runs a long session out of descriptors")


@pytest.mark.task("06.1")
def test_a_failed_folder_sync_leaves_at_most_the_whole_blob_and_is_synced_again(
        lesson, sessions, monkeypatch):
    """A durable store whose last step fails (syncing blobs/ after the blob got its
    name): the disk's OSError (EIO) reaches the caller as it was, never another error
    that a clean-up after it raised, and blobs/ holds no copy under another name;
    under its own name, nothing or the whole content (harmless: the right bytes under
    their hash). It was not made durable, so the next store syncs it and blobs/."""
    data = PASTE.encode("utf-8")
    digest = sha256(data)
    (sessions / "blobs").mkdir(mode=0o700)
    folder = (sessions / "blobs").stat().st_ino
    real_fsync = os.fsync

    def failing(fd):
        if os.fstat(fd).st_ino == folder and (sessions / "blobs" / digest).exists():
            raise OSError(errno.EIO, "Input/output error")
        real_fsync(fd)

    with lesson.SessionLog(sessions, "quest-1", durable=True) as log:
        before = open_descriptors()
        monkeypatch.setattr(os, "fsync", failing)
        monkeypatch.setattr(os, "fdatasync", failing)
        with raises(OSError, "syncing blobs/ failed after the blob got its name, yet "
                             "store_blob returned: the blob's name may not survive a "
                             "power cut, and the line append writes next would"
                    ) as failed:
            log.store_blob(data)
        monkeypatch.undo()
        if failed.value.errno != errno.EIO:
            fail_in("06.1", "syncing blobs/ failed with the disk's EIO after the blob "
                    "got its name; the store should raise that error, errno EIO, so "
                    "that the user learns the disk failed, but it raised "
                    f"{type(failed.value).__name__} (errno {failed.value.errno}): "
                    f"{failed.value}")
        leaked = open_descriptors() - before
        names = sorted(p.name for p in (sessions / "blobs").iterdir())
        assert names in ([], [digest]), (
            f"a failed store left {names} in blobs/: only the blob itself, whole, "
            "may stay, never a copy under another name")
        if names:
            stored = (sessions / "blobs" / digest).read_bytes()
            assert stored == data, (
                f"blobs/{digest} holds {len(stored)} bytes that are not the content "
                "after a store that failed at its last step")
        assert leaked == 0, (
            f"the failed store left {leaked} file descriptor(s) open")

        synced = count_syncs(monkeypatch)
        log.store_blob(data)
        monkeypatch.undo()
    blob = sessions / "blobs" / digest
    assert blob.is_file() and blob.stat().st_ino in synced and folder in synced, (
        "the first store failed while syncing blobs/, so nothing it wrote is known to "
        "be on disk; storing the same content again should sync the blob and blobs/ "
        f"before returning, and it synced {len(synced)} file(s), not both: this "
        "writer took the failed store's blob for one it had synced")


@pytest.mark.task("06.1")
def test_a_durable_store_whose_sync_of_the_new_blob_fails_says_so_and_stores_it_later(
        lesson, sessions, monkeypatch):
    """A durable writer appends a large paste, and the sync of the new blob's bytes
    fails (EIO, a failing disk): the OSError reaches the caller, no line points to the
    blob, and blobs/ holds no copy of the content under another name. Appended again
    once the disk is well, the paste is stored, its blob and blobs/ synced, and the
    session loads it."""
    data = PASTE.encode("utf-8")
    digest = sha256(data)
    paste = {"role": "user", "content": PASTE}

    def failing(real):
        def sync(fd):
            info = os.fstat(fd)
            if stat.S_ISREG(info.st_mode) and info.st_size == len(data):
                raise OSError(errno.EIO, "Input/output error")
            real(fd)
        return sync

    with lesson.SessionLog(sessions, "quest-1", durable=True) as log:
        log.append(SMALL)
        for name in ("fsync", "fdatasync"):
            monkeypatch.setattr(os, name, failing(getattr(os, name)))
        try:
            log.append(paste)
            raised = None
        except OSError as error:
            raised = error
        finally:
            monkeypatch.undo()
        folder = sessions / "blobs"
        names = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
        lines = lines_of(sessions / "quest-1.jsonl")
        assert raised is not None and raised.errno == errno.EIO, (
            "a durable writer's sync of a new blob's bytes failed (EIO), and append "
            + ("returned: a sync is no best effort in durable mode, and the line now "
               "points to a blob a power cut may lose; the disk's error should reach "
               "the caller" if raised is None else
               f"raised {type(raised).__name__}: {raised}, not the disk's EIO"))
        assert len(lines) == 1, (
            "the sync of the new blob failed, and the log holds "
            f"{len(lines)} lines: no line may point to a blob that was not stored")
        assert names in ([], [digest]), (
            f"a store whose sync of the blob's bytes failed left {names} in blobs/: "
            "only the blob itself, whole, may stay, never a copy under another name "
            "(every retry on a failing disk would leave one more)")

        synced = count_syncs(monkeypatch)
        log.append(paste)
        monkeypatch.undo()
    blob = sessions / "blobs" / digest
    assert blob.is_file() and blob.stat().st_ino in synced and (
        (sessions / "blobs").stat().st_ino in synced), (
        "the first store failed while syncing the blob's bytes, so nothing of it is "
        "known to be on disk; appending the paste again should store it and sync the "
        f"blob and blobs/ before its line, and it synced {len(synced)} file(s), not "
        "both")
    with lesson.SessionLog(sessions, "quest-1") as log:
        assert log.load() == [SMALL, paste], (
            "the paste was appended again once the disk was well: the session should "
            "load the message before it and the paste, whole")


def fail_syncs_of(monkeypatch, inode, interrupt=False):
    """From now on every fsync or fdatasync of the file `inode` fails (EIO), or is
    interrupted by a Ctrl-C when `interrupt`, until monkeypatch.undo()."""
    def failing(real):
        def sync(fd):
            if os.fstat(fd).st_ino == inode:
                if interrupt:
                    raise KeyboardInterrupt
                raise OSError(5, "Input/output error")
            real(fd)
        return sync

    for name in ("fsync", "fdatasync"):
        monkeypatch.setattr(os, name, failing(getattr(os, name)))


@pytest.mark.task("06.1")
@pytest.mark.parametrize("failure", ["EIO", "Ctrl-C"])
@pytest.mark.parametrize("failing", ["blobs/", "the blob"])
def test_a_reused_blob_whose_sync_failed_is_synced_at_the_next_store(lesson, sessions,
                                                                     monkeypatch,
                                                                     failing, failure):
    """A durable writer finds the blob stored by a writer that never synced it, and the
    sync of blobs/, or of the blob's bytes, fails (EIO) or is interrupted by a Ctrl-C,
    twice: the error reaches the caller as it was (EIO with its errno), the blob stays
    as it was, no descriptor stays open, and the next store of the same content syncs
    the blob and blobs/, for nothing was made durable the first time."""
    data = PASTE.encode("utf-8")
    blob = store(lesson, sessions, data, "quick")                # not durable
    assert blob.is_file(), (
        f"the paste should be stored in the folder's blobs/, named {blob.name}; "
        f"blobs/ holds {blob_names(sessions)}")
    folder = (sessions / "blobs").stat().st_ino

    with lesson.SessionLog(sessions, "careful", durable=True) as log:
        before = open_descriptors()
        fail_syncs_of(monkeypatch,
                      folder if failing == "blobs/" else blob.stat().st_ino,
                      interrupt=failure == "Ctrl-C")
        for _ in range(2):
            expected = KeyboardInterrupt if failure == "Ctrl-C" else OSError
            with raises(expected, f"syncing {failing} failed for a blob another writer "
                                 "had stored, yet store_blob returned: the line append "
                                 "writes next could survive a power cut that loses "
                                 "the blob") as failed:
                log.store_blob(data)
            if failure == "EIO" and failed.value.errno != errno.EIO:
                monkeypatch.undo()
                fail_in("06.1", f"syncing {failing} failed with the disk's EIO for "
                        "a blob another writer had stored; the store should raise "
                        "that error, errno EIO, so that the user learns the disk "
                        f"failed, but it raised {type(failed.value).__name__} (errno "
                        f"{failed.value.errno}): {failed.value}")
        monkeypatch.undo()
        leaked = open_descriptors() - before
        assert leaked == 0, (
            f"two stores of a blob another writer had stored failed while syncing "
            f"{failing} ({failure}), and left {leaked} file descriptor(s) open: every "
            "failed try holds one more, until the process can open no file at all")
        if not blob.is_file() or blob.read_bytes() != data:
            fail_in("06.1", f"the sync of {failing} failed for the blob {blob.name}, "
                    "which another writer had stored whole; the store then "
                    + ("removed it" if not blob.is_file() else "changed its bytes")
                    + ". A failed store never takes away a name that holds the whole "
                    "content: the other session's line points to it")
        synced = count_syncs(monkeypatch)
        log.store_blob(data)
        monkeypatch.undo()
    assert blob.stat().st_ino in synced and folder in synced, (
        f"the first stores failed while syncing {failing}, so the blob another writer "
        "stored is not known to be on disk; storing it again should sync the blob and "
        f"blobs/ before returning, and it synced {len(synced)} file(s), not both: "
        f"this writer took the blob whose sync failed ({failure}) for one it had "
        "synced")


@pytest.mark.task("06.1")
def test_a_store_whose_sync_fails_after_the_name_holds_the_blob_keeps_it(
        lesson, sessions, monkeypatch):
    """A durable writer puts a new blob in place, then the sync of blobs/ fails (EIO):
    the OSError reaches the caller, and the name keeps the whole content. Another
    session may have stored the same content meanwhile and point to it already: a
    failed store never takes away a name that holds the whole content."""
    store(lesson, sessions, b"x" * 5000, "quick")    # blobs/ is there, not synced
    data = PASTE.encode("utf-8")
    folder = (sessions / "blobs").stat().st_ino

    with lesson.SessionLog(sessions, "careful", durable=True) as log:
        fail_syncs_of(monkeypatch, folder)
        with raises(OSError, "syncing blobs/ failed after the new blob got its name, "
                             "yet store_blob returned: the line append writes next "
                             "could survive a power cut that loses the blob"):
            log.store_blob(data)
        monkeypatch.undo()
    blob = sessions / "blobs" / sha256(data)
    kept = blob.read_bytes() if blob.is_file() else None
    if kept != data:
        fail_in("06.1", f"the sync of blobs/ failed once the blob {blob.name} held the "
                "whole content; the store then "
                + ("removed it" if kept is None else "left other bytes there")
                + ". A name that holds the whole content is never taken away: another "
                "session may have stored the same paste meanwhile, and its line points "
                "to that name")


@pytest.mark.task("06.1")
@pytest.mark.parametrize("moment", ["its bytes are synced", "it is put in place"])
def test_a_ctrl_c_while_a_blob_is_stored_leaves_no_copy_behind(lesson, sessions,
                                                                monkeypatch, moment):
    """Ctrl-C arrives while a durable writer syncs the blob's bytes, or while a writer
    puts the blob in place (a rename or a link into blobs/): the KeyboardInterrupt
    reaches the caller, and blobs/ holds no copy of the content under another name
    (each Ctrl-C would leave one more); under its own name, nothing or the whole
    content."""
    data = PASTE.encode("utf-8")
    digest = sha256(data)
    blobs = os.fspath(sessions / "blobs")
    interrupted = []

    def interrupting(real):
        def sync(fd):
            info = os.fstat(fd)
            if stat.S_ISREG(info.st_mode) and info.st_size == len(data):
                interrupted.append(fd)
                raise KeyboardInterrupt
            real(fd)
        return sync

    def interrupting_rename(real):
        def rename(source, target, *args, **kwargs):
            if os.fspath(target).startswith(blobs + os.sep):   # a blob's name
                interrupted.append(target)
                raise KeyboardInterrupt
            return real(source, target, *args, **kwargs)
        return rename

    durable = moment == "its bytes are synced"
    before = open_descriptors()
    with lesson.SessionLog(sessions, "quest-1", durable=durable) as log:
        if durable:
            for name in ("fsync", "fdatasync"):
                monkeypatch.setattr(os, name, interrupting(getattr(os, name)))
        else:
            for name in ("replace", "rename", "link"):
                monkeypatch.setattr(os, name, interrupting_rename(getattr(os, name)))
        try:
            log.store_blob(data)
        except KeyboardInterrupt:
            pass
        finally:
            monkeypatch.undo()
    assert interrupted, (
        "a durable store_blob returned without syncing the blob's bytes: the line "
        "append writes next could survive a power cut that loses them" if durable else
        "store_blob returned without a rename or a link into blobs/: while the blob "
        "was written, its name held part of it, and a crash then leaves half a blob")
    folder = sessions / "blobs"
    names = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    assert names in ([], [digest]), (
        f"a Ctrl-C while {moment} left {names} in blobs/: only the blob "
        "itself, whole, may stay, never a copy under another name (the clean-up of a "
        "failed store must run for a KeyboardInterrupt too)")
    if names:
        assert (folder / digest).read_bytes() == data, (
            f"after a Ctrl-C, blobs/{digest} holds bytes that are not the content")
    leaked = open_descriptors() - before
    assert leaked == 0, (
        f"a Ctrl-C while {moment} left {leaked} file descriptor(s) open once the log "
        "was closed: the temporary file's descriptor is closed on every way out, a "
        "KeyboardInterrupt too (in a finally, not in an except OSError)")


@pytest.mark.task("06.1")
def test_a_full_disk_while_a_blob_is_written_leaves_no_file_and_no_reference(lesson,
                                                                           sessions):
    """The disk fills up half-way through a blob (a real file size limit): the append
    fails with the system's OSError, saying so, and leaves no temporary file, no blob,
    no reference and no open descriptor behind."""
    small = "The elder's note. " * 500            # about 9 KB: a blob that fits

    def append_both():
        before = open_descriptors()
        outcome, code = "appended", None
        with lesson.SessionLog(sessions, "quest-1") as log:
            log.append({"role": "user", "content": small})
            try:
                log.append({"role": "user", "content": PASTE})
            except OSError as error:
                outcome = f"OSError: {error}"
                code = error.errno
        return {"outcome": outcome, "errno": code,
                "leaked": open_descriptors() - before}

    kind, message, result = with_file_size_limit(256 * 1024, append_both)
    assert kind == "ok", f"the appends raised {kind}: {message}"
    assert result["outcome"].startswith("OSError"), (
        "no file may grow past 256 KB here, so storing the 1 MB paste must fail with "
        f"OSError; the append returned normally ({result['outcome']})")
    too_large = os.strerror(errno.EFBIG)
    assert result["errno"] == errno.EFBIG and too_large in result["outcome"], (
        f"the disk refused the blob's bytes ({too_large}), and the append failed with "
        f"{result['outcome']!r}, which no longer says so: the user should learn from "
        "the error what the system said (its errno, its words), to know that the disk "
        "is full rather than that something is wrong with the session")
    left = sorted(p.name for p in (sessions / "blobs").iterdir()
                  if p.name != sha256(small.encode("utf-8")))
    assert left == [], (
        f"the failed blob write left {left} in blobs/: on a full disk, every retry "
        "would leave one more")
    assert b"$blob" not in (sessions / "quest-1.jsonl").read_bytes().split(b"\n")[1], (
        "the paste's blob was never stored, yet a line points to it")
    assert result["leaked"] == 0, (
        f"storing two blobs (one stored, one failed) left {result['leaked']} file "
        "descriptor(s) open after the log was closed")


@pytest.mark.task("06.1")
def test_a_blob_written_a_few_bytes_at_a_time_is_stored_whole(lesson, sessions,
                                                               monkeypatch):
    """A write may take fewer bytes than it was given, with no error (a signal, a file
    system that takes less at once): the blob is stored whole however few bytes each
    write takes, and loads. A store that writes each piece once, without looking at
    how much went in, puts under the hash a file with bytes missing, which every load
    then refuses as changed: the user's paste is gone."""
    data = PASTE.encode("utf-8")
    real_write = os.write
    # Each write takes at most the next of these, in turn, and says so
    most = itertools.cycle([1 << 16, 4093, 1, 1 << 15])
    monkeypatch.setattr(os, "write", lambda fd, piece: real_write(
        fd, memoryview(piece)[:next(most)]))
    with lesson.SessionLog(sessions, "quest-1") as log:
        try:
            log.store_blob(data)
        except OSError as error:
            refused = f"OSError: {error}"
        else:
            refused = None
        finally:
            monkeypatch.undo()
    blob = sessions / "blobs" / sha256(data)
    if refused is not None:
        pytest.fail("each write took fewer bytes than it was given, and said so, as "
                    "a write may; storing the paste (a megabyte) failed with "
                    f"{refused}: a store writes on until every byte is in",
                    pytrace=False)
    stored = blob.read_bytes() if blob.is_file() else None
    assert stored == data, (
        "each write took fewer bytes than it was given, and said so, as a write may; "
        f"blobs/{blob.name} should hold the paste's {len(data):,} bytes, whole, and "
        + ("there is no such file" if stored is None else
           f"it holds {len(stored):,} bytes that are not the paste")
        + ": a store writes on until every byte is in, or every load refuses the "
        "blob as changed")


@pytest.mark.task("06.1")
def test_a_full_disk_while_a_damaged_blob_is_written_again_takes_nothing_away(
        lesson, sessions):
    """A bad copy changed a stored blob; storing the content again writes it afresh,
    and the disk fills up half-way (a real file size limit). The OSError reaches the
    caller, and the blob's name holds what was there before or the whole content: a
    failed store never empties a name (another session may point to it)."""
    data = PASTE.encode("utf-8")
    blob = store(lesson, sessions, data)
    damaged = data.replace(b"cave", b"lake", 1)
    blob.write_bytes(damaged)

    def store_again():
        with lesson.SessionLog(sessions, "quest-2") as log:
            try:
                log.store_blob(data)
            except OSError as error:
                return f"OSError: {error}"
        return "stored"

    kind, message, outcome = with_file_size_limit(256 * 1024, store_again)
    assert kind == "ok", f"the store raised {kind}: {message}"
    assert outcome.startswith("OSError"), (
        "no file may grow past 256 KB here, so writing the 1 MB paste again must fail "
        f"with OSError; store_blob returned normally ({outcome})")
    kept = blob.read_bytes() if blob.is_file() else None
    assert kept in (damaged, data), (
        "the disk filled up while store_blob wrote the paste again over a damaged "
        f"blob; the store failed, as it should, but then blobs/{blob.name} "
        + ("was gone" if kept is None else "held other bytes")
        + ": a failed store leaves at the blob's name what was there before, or the "
        "whole content, never less")


@pytest.mark.task("06.1")
def test_a_store_killed_before_its_rename_leaves_only_a_hidden_file(lesson, sessions):
    """A writer killed the moment its blob's bytes are written, before they get the
    blob's name (here: at its first rename or link into blobs/), leaves in blobs/ only
    hidden files: a name that starts with a dot, which no listing shows and which
    lesson 09's clean-up knows for what a crashed store left."""
    warm_up = "x" * 5000
    with lesson.SessionLog(sessions, "warm-up") as log:
        log.append({"role": "user", "content": warm_up})    # 06.1 is written
    dies_while_storing(lesson, sessions, PASTE)
    blobs = sessions / "blobs"
    left = sorted(path.name for path in blobs.iterdir()) if blobs.is_dir() else []
    whole = {sha256(text.encode("utf-8")) for text in (warm_up, PASTE)}
    shown = [name for name in left if not name.startswith(".") and name not in whole]
    assert not shown, (
        f"a writer killed before its blob got its name left {shown} in blobs/: what a "
        "crashed store leaves there should be hidden, its name starting with a dot "
        "(the format page gives it), so that no listing shows it and a clean-up knows "
        "it for a crashed store's")


@pytest.mark.task("06.1")
def test_storing_makes_no_file_outside_the_blobs_folder(lesson, sessions, monkeypatch):
    """Nothing of a blob is made outside blobs/, not even in the system's temporary
    folder (often another file system than blobs/)."""
    # The system's temp folder is unusable here: only a file made elsewhere notices.
    monkeypatch.setattr(tempfile, "tempdir", str(sessions.parent / "gone-tmp"))
    try:
        with files_created() as created:
            store(lesson, sessions, PASTE.encode("utf-8"))
    except OSError as error:
        if "gone-tmp" not in str(error):
            raise
        pytest.fail(
            "storing the blob used the system's temporary folder (tempfile's "
            f"default), which is unusable here: {error}. That folder is often on "
            "another file system than blobs/, where no rename into blobs/ is one "
            "step", pytrace=False)
    outside = [path for path in created
               if os.path.dirname(path) != str(sessions / "blobs")]
    assert outside == [], (
        f"storing the blob made {outside[0] if outside else ''}, outside blobs/: a "
        "crash there would leave a copy of the content where no one looks for blobs "
        "(the sessions folder holds sessions' files), and nothing ever removes it")


@pytest.mark.task("06.1")
def test_the_preview_is_the_start_of_the_content_in_whole_characters(lesson, sessions):
    """The preview is the content's first PREVIEW_CHARS characters, whole: never cut
    inside a character's UTF-8 bytes or an emoji's UTF-16 pair."""
    # Byte 100 and UTF-16 unit 100 both fall inside a 🗺 (4 bytes, 2 units).
    content = "é" * 49 + "x" + "🗺" * 24 + "x" + "🗺" + "the rest of the map. " * 400
    with lesson.SessionLog(sessions, "quest-1") as log:
        try:
            log.append({"role": "user", "content": content})
        except ValueError as error:
            pytest.fail(f"appending a valid text whose 100th character is an emoji "
                        f"failed ({error}): only the preview can hold a broken "
                        "character there", pytrace=False)

    reference = reference_in(lines_of(sessions / "quest-1.jsonl")[0])
    preview = reference.get("preview")
    assert isinstance(preview, str) and preview and content.startswith(preview), (
        "the preview should be the first characters of the content, whole; got "
        f"{preview!r}")
    assert len(preview) == lesson.PREVIEW_CHARS, (
        f"the preview should show the content's first {lesson.PREVIEW_CHARS} "
        f"characters; it shows {len(preview)} (counted in bytes or in UTF-16 halves, a "
        f"character of several costs several): {preview!r}")

    # Starts with line ends and spaces, and its first PREVIEW_CHARS characters end
    # with a space and a line end
    head = "\n\n   Day 1, the elder's map:\r\n"
    head += "x" * (lesson.PREVIEW_CHARS - len(head) - 3) + " \r\n"
    spaced = head + "the rest of the map. " * 400
    with lesson.SessionLog(sessions, "quest-2") as log:
        log.append({"role": "user", "content": spaced})
    preview = reference_in(lines_of(sessions / "quest-2.jsonl")[0]).get("preview")
    assert preview == spaced[:lesson.PREVIEW_CHARS], (
        "the preview should be the content's first characters as they are, the line "
        f"ends and spaces it starts and ends with included: {head!r}; it is "
        f"{preview!r}")


@pytest.mark.task("06.1")
@pytest.mark.parametrize("chars", [20, 300])
def test_the_preview_is_as_long_as_preview_chars_says(lesson, sessions, monkeypatch,
                                                      chars):
    """PREVIEW_CHARS is the program's to set: set shorter (20, to keep lines short) or
    longer (300), a large paste's preview is then the content's first PREVIEW_CHARS
    characters, that many and no other number."""
    monkeypatch.setattr(lesson, "PREVIEW_CHARS", chars)
    content = "".join(f"Day {day}: the elder's map, page {day}. " for day in range(900))
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": content})
    preview = reference_in(lines_of(sessions / "quest-1.jsonl")[0]).get("preview")
    assert preview == content[:chars], (
        f"PREVIEW_CHARS was set to {chars}, and a large paste's preview holds "
        f"{len(preview) if isinstance(preview, str) else preview!r} characters: "
        f"{preview!r:.400}. The preview is the content's first PREVIEW_CHARS "
        "characters, whatever the program sets it to (a number of its own in its "
        "place ignores the setting)")


@pytest.mark.task("06.2")
@pytest.mark.parametrize("edit", ["preview edited", "preview removed", "size removed",
                                  "size counted otherwise", "size made 0",
                                  "size written as text", "preview made null",
                                  "a key added", "its keys in another order"])
def test_a_reference_whose_preview_was_edited_by_hand_still_loads(lesson, sessions,
                                                                  edit):
    """The preview is for a person reading the log, and a person may edit it (to hide
    a name in it, say, or set it to null); another program may drop the size, count it
    otherwise (in characters, or UTF-16 units), write 0 there or a text ("1.0 MB"), add
    a key of its own, or write the keys in another order. The key "$blob" makes an
    object a reference, and the hash alone says what the content is: it still loads,
    and its content is read from the blob (a size of 0 says nothing of it, nor does a
    size or a preview of another type)."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": PASTE})
    path = sessions / "quest-1.jsonl"
    line = lines_of(path)[0]
    reference = reference_in(line)
    if edit == "preview edited":
        reference["preview"] = "[removed by the operator]"
    elif edit == "preview removed":
        del reference["preview"]
    elif edit == "size removed":
        del reference["size"]
    elif edit == "size counted otherwise":
        reference["size"] = reference["size"] // 2 + 1
    elif edit == "size made 0":
        reference["size"] = 0
    elif edit == "size written as text":
        reference["size"] = "1.0 MB"        # as a program that shows sizes writes it
    elif edit == "preview made null":
        reference["preview"] = None         # a redaction tool's way to hide it
    elif edit == "a key added":
        reference["media_type"] = "text/plain"
    else:       # a program that sorts keys, or writes its own first
        line["content"] = dict(reversed(list(reference.items())))
    path.write_text(json.dumps(line) + "\n", encoding="utf-8")

    with lesson.SessionLog(sessions, "quest-1") as log:
        try:
            loaded = log.load()
        except (ValueError, KeyError, TypeError) as error:
            pytest.fail(f"a reference with {edit} by hand was "
                        f"refused ({type(error).__name__}: {error}): the blob is "
                        "there, its bytes match its hash, and the hash alone says what "
                        "the content is", pytrace=False)
    content = loaded[0].get("content") if loaded else None
    assert content == PASTE, (
        f"a reference with {edit} by hand is still a reference (it has the key "
        f"\"$blob\"), and should still load the paste from its blob; the content came "
        f"back as {str(content)[:120]!r}, which the model would be sent")


@pytest.mark.task("06.2")
@pytest.mark.parametrize("happened", ["removed", "changed"])
def test_a_blob_whose_preview_holds_all_its_content_is_still_read_and_checked(
        lesson, sessions, happened):
    """Under a low threshold a short content goes to a blob too, and its preview then
    holds every character of it, as many bytes as its size says. The preview is still
    for people: a load reads the blob and checks it against its hash, so a blob
    removed, or changed, since is refused, never loaded from the line's preview."""
    content = "Day 1: the elder's map."
    data = content.encode("utf-8")
    blob = sessions / "blobs" / sha256(data)
    with lesson.SessionLog(sessions, "quest-1", blob_threshold=4) as log:
        log.append({"role": "user", "content": content})
    line = lines_of(sessions / "quest-1.jsonl")[0]
    if not blob.is_file():
        fail_in("06.1", f"with blob_threshold=4, a content of {len(data)} bytes should "
                f"go to blobs/{sha256(data)}; blobs/ holds {blob_names(sessions)} and "
                f"the line holds {str(line)[:200]!r}")
    if happened == "removed":
        blob.unlink()
    else:
        blob.write_bytes(data.replace(b"map", b"mop"))

    with lesson.SessionLog(sessions, "quest-1") as log:
        try:
            loaded = log.load()
        except lesson.BlobError:
            return
    pytest.fail(
        f"the blob of a short content, whose reference's preview holds all of it "
        f"({str(line.get('content'))[:200]}), was {happened} after it was stored, and "
        f"load gave {str(loaded)[:200]} without a BlobError: the preview is for "
        "people, and only the blob, checked against its hash, says what the content "
        "is, however much of it the preview holds", pytrace=False)


@pytest.mark.task("06.2")
@pytest.mark.parametrize("target", ["the same bytes", "nothing",
                                    "the same bytes in blobs/"])
def test_a_blob_that_is_a_symbolic_link_is_refused(lesson, sessions, monkeypatch,
                                                   target):
    """A blob planted as a symbolic link, to the same bytes or to nothing, is refused
    with a BlobError naming the blob, the log (by its full path, whatever folder the
    program runs from) and the line and saying it is a link, never followed: a link
    could point anywhere (another user's file, a device that never ends). A link that
    stays in blobs/ (to a copy under another name there, as a tool that dedupes files
    with links leaves) is a link at the blob's name all the same."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": PASTE})
    blob = sessions / "blobs" / sha256(PASTE.encode("utf-8"))
    assert blob.is_file(), f"the paste should be stored as blobs/{blob.name}"
    if target == "the same bytes in blobs/":
        inside = blob.parent / f".{blob.name}.copy"
        blob.rename(inside)
        blob.symlink_to(inside.name)        # a relative link, to a file in blobs/
    else:
        outside = sessions.parent / "outside"
        blob.rename(outside)
        blob.symlink_to(outside)            # the same bytes, through a link
    if target == "nothing":
        outside.unlink()                    # a link to nothing: not a missing blob

    before = snapshot(sessions)
    monkeypatch.chdir(sessions.parent)      # the program runs from another folder

    with lesson.SessionLog(sessions, "quest-1") as log:
        with raises(lesson.BlobError,
                    f"blobs/{blob.name} is a symbolic link to {target}, and load "
                    "did not refuse it with a BlobError") as refused:
            log.load()
    message = str(refused.value)
    named = (re.search(r"\bline 1\b", message)
             and str(sessions / "quest-1.jsonl") in message)
    assert blob.name in message and named, (
        f"the error should name the blob ({blob.name}), the log by its path and the "
        f"line (line 1); it says: {message}")
    says_what_it_met(refused.value, "a symbolic link", sessions)
    unchanged(sessions, before, "a refused load must change nothing: what stands at "
              "the blob's name is what the user goes to look at")


@pytest.mark.task("06.2")
def test_a_blob_with_a_second_name_a_backup_gave_it_loads(lesson, sessions):
    """A backup tool that hard-links the files it finds unchanged (cp -al, rsnapshot)
    gives a blob a second name outside blobs/: the blob is still the plain file at its
    own name, its bytes still hash to that name, and it loads. Only a symbolic link
    at a blob's name is refused; a hard link is no link to follow, the very file."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": PASTE})
    blob = sessions / "blobs" / sha256(PASTE.encode("utf-8"))
    assert blob.is_file(), f"the paste should be stored as blobs/{blob.name}"
    os.link(blob, sessions.parent / "snapshot-of-the-blob")    # the backup's name
    with lesson.SessionLog(sessions, "quest-1") as log:
        try:
            loaded = log.load()
        except ValueError as error:
            pytest.fail(f"blobs/{blob.name} has a second name, given by a backup tool "
                        f"that hard-links files, and load refused it "
                        f"({type(error).__name__}: {error}): it is the plain file the "
                        "store wrote, its bytes hash to its name, and a hard link is "
                        "nothing to follow", pytrace=False)
    content = loaded[0].get("content") if loaded else None
    assert content == PASTE, (
        f"blobs/{blob.name}, hard-linked by a backup tool, should load the paste; the "
        f"content came back as {str(content)[:120]!r}")


@pytest.mark.task("06.2")
def test_a_link_put_at_a_blobs_name_as_it_is_opened_is_not_followed(lesson,
                                                                     sessions):
    """Another process swaps a blob for a symbolic link (to a file outside blobs/ with
    the same bytes) after the load looked at the name and just as it opens it. The load
    never follows that link, whatever it looked at a moment before: a reference opens
    nothing outside blobs/, and the opening itself must refuse a link."""
    global _opened
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": PASTE})
    blob = sessions / "blobs" / sha256(PASTE.encode("utf-8"))
    assert blob.is_file(), f"the paste should be stored as blobs/{blob.name}"
    outside = sessions.parent / "outside"
    swapped: list[str] = []

    class SwapOnOpen(list):
        def append(self, path):
            if path == str(blob) and not swapped:
                swapped.append(path)
                blob.rename(outside)
                blob.symlink_to(outside)
            super().append(path)

    with lesson.SessionLog(sessions, "quest-1") as log:
        _opened = SwapOnOpen()
        try:
            loaded = log.load()
        except lesson.BlobError as error:
            says_what_it_met(error, "a symbolic link", sessions)
            return
        except OSError:
            return      # the opening itself refused the link (ELOOP): not followed
        except Exception as error:
            fail_in("06.2", f"blobs/{blob.name} became a symbolic link just as the "
                    f"load opened it, and the load raised {type(error).__name__}: "
                    f"{error}; it should refuse to follow it, as for any link at a "
                    "blob's name")
        finally:
            _opened = None
    if not swapped:
        return      # the blob was read without opening it by its name: nothing to swap
    fail_in("06.2", f"blobs/{blob.name} was a plain file when the load looked at it, "
            "and became a symbolic link to a file outside blobs/ just as the load "
            "opened it; the load followed the link and gave "
            f"{str(loaded[0].get('content') if loaded else loaded)[:80]!r}... from "
            "outside blobs/. Open the blob so that the opening itself refuses a link "
            "(the helper read_file does), rather than looking first and opening after")


@pytest.mark.task("06.2")
def test_a_blob_changed_while_it_is_loaded_never_reaches_the_model_unchecked(lesson,
                                                                            sessions):
    """Another process changes a blob (one word, its size kept) while a load reads it:
    after the load opened it once. The load gives the content its hash was checked on,
    or refuses: the bytes it hands over are the bytes it checked, never others read
    after the check."""
    global _opened
    data = PASTE.encode("utf-8")
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": PASTE})
    blob = sessions / "blobs" / sha256(data)
    assert blob.is_file(), f"the paste should be stored as blobs/{blob.name}"
    changed = data.replace(b"cave", b"lake", 1)
    seen: list[str] = []

    class ChangeOnSecondOpen(list):
        def append(self, path):
            if path == str(blob):
                seen.append(path)
                if len(seen) == 2:
                    with open(blob, "r+b") as file:
                        file.write(changed[:64])
            super().append(path)

    with lesson.SessionLog(sessions, "quest-1") as log:
        _opened = ChangeOnSecondOpen()
        try:
            loaded = log.load()
        except lesson.BlobError:
            return      # refused: the model is sent nothing, which is allowed
        except Exception as error:
            fail_in("06.2", f"a blob was changed (one word) while a load read it, and "
                    f"the load raised {type(error).__name__}: {error}; it should give "
                    "the content whose hash it checked, or refuse with a BlobError")
        finally:
            _opened = None
    sent = loaded[0].get("content") if loaded else None
    if sent == changed.decode("utf-8"):
        fail_in("06.2", "a blob was changed (one word) between the load's first "
                "opening of it and its second, and the load gave the changed bytes: it "
                "checked the hash of one read and handed over another, so the model is "
                "sent a content no hash vouches for. Hand over the very bytes whose "
                "hash was checked")


WHAT = {"folder": "folder", "fifo": "FIFO"}


class WaitedOnTheBlob(BaseException):
    """Raised by the test's timer: load was still waiting to open the blob."""


@pytest.mark.task("06.2")
@pytest.mark.parametrize("planted", ["folder", "fifo"],
                         ids=["a folder", "a FIFO"])
def test_a_blob_that_is_no_regular_file_is_refused_naming_it_and_the_line(
        lesson, sessions, monkeypatch, planted):
    """A folder, or a FIFO (a named pipe), planted at a blob's name is no blob: load
    refuses it with a BlobError naming the blob, the log (by its full path, whatever
    folder the program runs from) and the line, like every other refusal, never with
    the bare OSError of the read. A FIFO must not make it wait: an
    open of a FIFO for reading waits for a writer that never comes."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": PASTE})
    blob = sessions / "blobs" / sha256(PASTE.encode("utf-8"))
    assert blob.is_file(), f"the paste should be stored as blobs/{blob.name}"
    blob.unlink()
    if planted == "folder":
        blob.mkdir()
    else:
        os.mkfifo(blob)
    before = snapshot(sessions)
    monkeypatch.chdir(sessions.parent)      # the program runs from another folder

    def waited(signum, frame):
        raise WaitedOnTheBlob

    previous = signal.signal(signal.SIGALRM, waited)
    signal.setitimer(signal.ITIMER_REAL, 5)
    try:
        with lesson.SessionLog(sessions, "quest-1") as log:
            with raises(lesson.BlobError,
                        f"blobs/{blob.name} is a {WHAT[planted]}, no blob, and load "
                        "took it for the blob's content") as refused:
                log.load()
    except WaitedOnTheBlob:
        pytest.fail(f"blobs/{blob.name} is a FIFO, and load was still waiting to open "
                    "it 5 seconds later: an open of a FIFO for reading waits for a "
                    "writer, and none will come (read_file opens without waiting)",
                    pytrace=False)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    message = str(refused.value)
    named = (re.search(r"\bline 1\b", message)
             and str(sessions / "quest-1.jsonl") in message)
    assert blob.name in message and named, (
        f"the error should name the blob ({blob.name}), the log by its path and the "
        f"line (line 1); it says: {message}")
    says_what_it_met(refused.value, "something that is no file", sessions)
    unchanged(sessions, before, "a refused load must change nothing: what stands at "
              "the blob's name is what the user goes to look at")


# Words that would send the user to the wrong fix when the disk failed to read a blob:
# gone, changed or damaged (a backup to restore, a hand edit to undo), or the advice
# to restore one
CLAIMS = (r"missing|not found|no such|(not|n't) exist|absent|gone|removed|deleted"
          r"|chang|tamper|modif|alter|match|damag|corrupt|broken|symbolic|link|utf"
          r"|decod|not a (plain|regular)|folder|fifo|backup|restor")


def a_stored_paste(lesson, sessions):
    """Store the paste in quest-1's log, and give its blob's path."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": PASTE})
    blob = sessions / "blobs" / sha256(PASTE.encode("utf-8"))
    assert blob.is_file(), f"the paste should be stored as blobs/{blob.name}"
    return blob


class Returned:
    """What a load gave when it returned (its messages), and whether it had tried to
    open the blob (and met the failure) on the way."""

    def __init__(self, loaded, tried):
        self.loaded, self.tried = loaded, tried


def load_failing_to_open(lesson, sessions, monkeypatch, blob, failure):
    """Load quest-1 while every open of `blob` (by os.open, open() or io.open) raises
    `failure`; give what the load raised, or a Returned when it returned."""
    import builtins
    import io

    tried = []

    def failing(real):
        def opening(path, *args, **kwargs):
            if isinstance(path, (str, bytes, os.PathLike)) and (
                    os.fsdecode(path) == str(blob)):
                tried.append(path)
                raise failure
            return real(path, *args, **kwargs)
        return opening

    with lesson.SessionLog(sessions, "quest-1") as log:
        for module, name in ((os, "open"), (builtins, "open"), (io, "open")):
            monkeypatch.setattr(module, name, failing(getattr(module, name)))
        try:
            loaded = log.load()
        except BaseException as error:  # a KeyboardInterrupt too: the test judges it
            return error
        finally:
            monkeypatch.undo()
    return Returned(loaded, bool(tried))


# What a refusal must not claim when the system failed to read a blob, besides CLAIMS,
# by failure: a failing disk is no matter of the file's mode (the user would change who
# may read a sound file), and a mode that forbids the read is no failing disk (the user
# would test a sound disk). The system's own words, which the refusal may quote, are
# taken out first.
WRONG_FIX = {
    "EIO": ("who may read the file", r"denied|permission|\bmode\b|owner|chmod|forbid"
                                     r"|not allowed"),
    # "read from disk" is where, not what failed: only words that blame the disk
    "EACCES": ("the disk", r"input/output|\bI/?O\b|hardware"
                          r"|(disk|drive) (error|fail|fault)"
                          r"|(failing|faulty|bad|broken) (disk|drive)"),
}


@pytest.mark.task("06.2")
@pytest.mark.parametrize("failure", ["EIO", "EACCES"])
def test_a_blob_the_disk_fails_to_read_is_not_called_missing_or_changed(
        lesson, sessions, monkeypatch, failure):
    """The disk fails to read a blob (EIO), or the system refuses to let this user
    open it (EACCES: a restore that got its mode wrong): the blob is there, and nothing
    says it changed. The load fails (it never returns as if the blob were read), with
    the system's OSError, its errno kept, or with a BlobError naming the blob, the log
    and the line and giving the system's words, but never saying in words of its own
    that the blob is missing, changed, damaged, a link or no text (the user would
    restore a backup or undo a hand edit), nor, for a failing disk, that the read was
    denied (the user would change a sound file's mode), nor, for a read denied, that
    the disk failed (the user would test a sound disk). The blob was restored by a
    copy that kept no modes (0o644): the refused load leaves that mode too as it is,
    for a load that repairs a mode it was only asked to read writes where it may only
    read, and hides from the user what the restore did."""
    import errno
    blob = a_stored_paste(lesson, sessions)
    blob.chmod(0o644)       # as a restore that kept no modes left it
    before = snapshot(sessions)
    number = getattr(errno, failure)
    words = os.strerror(number)
    if failure == "EACCES":
        # The system says the same to whoever asks whether this user may read it
        real_access = os.access
        monkeypatch.setattr(os, "access", lambda path, mode, *args, **kwargs: (
            False if os.fspath(path) == str(blob) else
            real_access(path, mode, *args, **kwargs)))
    failed = load_failing_to_open(lesson, sessions, monkeypatch, blob, OSError(
        number, words, str(blob)))
    if isinstance(failed, Returned):
        if not failed.tried:
            return      # the blob was read some other way: no failure to judge
        sent = failed.loaded[0].get("content") if failed.loaded else None
        pytest.fail(
            f"the system failed to open blobs/{blob.name} ({failure}: {words}), and "
            f"load returned as if nothing had happened, giving the model "
            f"{str(sent)[:120]!r} where the paste was: a load gives the content that "
            "was stored, checked against its hash, or nothing at all (it fails, with "
            "the system's error or a BlobError)", pytrace=False)
    if not isinstance(failed, (OSError, ValueError)):
        raise failed
    if isinstance(failed, lesson.BlobError):
        message = str(failed)
        named = (re.search(r"\bline 1\b", message)
                 and str(sessions / "quest-1.jsonl") in message)
        assert blob.name in message and named, (
            f"the error should name the blob ({blob.name}), the log by its path and "
            f"the line (line 1); it says: {message}")
        assert words.lower() in message.lower(), (
            f"the system failed to open blobs/{blob.name} with {failure}, in its words "
            f"{words!r}, and the refusal does not give them: it says only {message!r}. "
            "The user learns what happened from those words alone (a failing disk to "
            "check, or a mode to correct): a refusal for a failed read says that the "
            "read failed, in the system's words")
        said = re.sub(re.escape(words), "", message, flags=re.IGNORECASE)
        said = said.replace(str(sessions.parent), "").replace(blob.name, "")
        claim = re.search(CLAIMS, said, re.IGNORECASE)
        assert not claim, (
            f"the system failed to open blobs/{blob.name} ({failure}), and the refusal "
            f"says {claim.group(0)!r}: the blob is there, and nothing shows it "
            "changed, so the user goes to the wrong fix (a backup, a hand edit) "
            f"instead of the disk, or who may read the file. It says: {message}")
        other, pattern = WRONG_FIX[failure]
        claim = re.search(pattern, said, re.IGNORECASE)
        assert not claim, (
            f"the system failed to open blobs/{blob.name} with {failure} ({words}), "
            f"and the refusal says, in words of its own, {claim.group(0)!r}: that "
            f"sends the user to {other}, which is not what failed. A refusal for a "
            f"failed read says only that the read failed, in the system's words. It "
            f"says: {message}")
    else:
        assert isinstance(failed, OSError), (
            f"the system failed to open a blob ({failure}), and load raised "
            f"{failed!r}: the system's OSError, or a BlobError saying the blob could "
            "not be read, was expected")
        assert failed.errno == number, (
            f"the system failed to open blobs/{blob.name} with {failure} ({words}), "
            f"and load raised {type(failed).__name__} with errno {failed.errno}: "
            f"{failed}. An OSError out of load is the system's own error, its errno "
            f"({number}) and its words kept, so that the user (or a program that "
            "looks at the errno) learns what failed")
    unchanged(sessions, before, "a refused load must change nothing: what stands at "
              "the blob's name is what the user goes to look at")


@pytest.mark.task("06.2")
def test_a_blob_read_a_few_bytes_at_a_time_loads_whole(lesson, sessions, monkeypatch):
    """A read may return fewer bytes than asked (a network file system, a signal):
    the blob is read whole however few bytes each read returns (here 64 KiB at most,
    and often far less, a single byte at times), and the model gets the megabyte that
    was stored. A read that returns less than it asked is no end of the file: a load
    that takes it for one, or takes one read for the whole blob, finds part of it, and
    would refuse an intact blob as changed."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": PASTE})
    real_read, real_pread = os.read, os.pread
    # Each read returns at most the next of these, in turn: short reads long before
    # the end of the blob, whatever size a loop asks for
    most = itertools.cycle([1 << 16, 4093, 1, 1 << 15])
    monkeypatch.setattr(os, "read", lambda fd, n: real_read(fd, min(n, next(most))))
    monkeypatch.setattr(os, "pread", lambda fd, n, offset: real_pread(
        fd, min(n, next(most)), offset))
    with lesson.SessionLog(sessions, "quest-1") as log:
        try:
            loaded = log.load()
        except lesson.BlobError as error:
            refused = str(error)
        else:
            refused = None
    monkeypatch.undo()
    if refused is not None:     # outside the except: the words come first, alone
        fail_in("06.2", "each read returned at most 64 KiB, often far less, as a "
                "network file system may, and the intact blob of the paste (a "
                f"megabyte) was refused: {refused}. A blob is read whole, however few "
                "bytes each read returns, before its hash is checked")
    content = loaded[0].get("content") if loaded else None
    if content != PASTE:
        fail_in("06.2", "each read returned at most 64 KiB, often far less, as a "
                "network file system may: the load should give the paste's megabyte "
                f"whole; it gave {str(content)[:80]!r}, "
                f"{len(content) if isinstance(content, str) else 'no'} characters")


@pytest.mark.task("06.2")
def test_a_ctrl_c_while_a_blob_is_read_stays_a_ctrl_c(lesson, sessions, monkeypatch):
    """The user presses Ctrl-C while a load reads a large blob: the KeyboardInterrupt
    reaches the caller as it is. Told instead that the blob cannot be trusted, the
    user goes looking for a broken session, and a program that stops cleanly on Ctrl-C
    does not stop."""
    blob = a_stored_paste(lesson, sessions)
    before = snapshot(sessions)
    failed = load_failing_to_open(lesson, sessions, monkeypatch, blob,
                                  KeyboardInterrupt())
    if isinstance(failed, Returned):
        if not failed.tried:
            return      # the blob was read some other way: no Ctrl-C to judge
        sent = failed.loaded[0].get("content") if failed.loaded else None
        pytest.fail(
            f"Ctrl-C was pressed while load opened blobs/{blob.name}, and load "
            f"returned as if nothing had happened, giving {str(sent)[:120]!r} where "
            "the paste was: the Ctrl-C was swallowed, and the program the user stopped "
            "runs on with a content no hash vouches for", pytrace=False)
    assert isinstance(failed, KeyboardInterrupt), (
        f"Ctrl-C was pressed while load opened blobs/{blob.name}, and load raised "
        f"{type(failed).__name__}: {failed}. A Ctrl-C is the user stopping the "
        "program, not something wrong with the blob: it should reach the caller as "
        "the KeyboardInterrupt it is")
    unchanged(sessions, before, "an interrupted load must change nothing")


@pytest.mark.task("06.1")
def test_a_ctrl_c_while_a_stored_blob_is_read_again_stays_a_ctrl_c(lesson, sessions,
                                                                   monkeypatch):
    """The paste is stored already, and the user presses Ctrl-C while the next append
    of it reads the stored blob to check it: the KeyboardInterrupt reaches the caller,
    no line is written, and the blob stays as it was. A store that takes the Ctrl-C
    for a blob not stored yet writes it again and lets the program run on."""
    import builtins
    import io

    blob = a_stored_paste(lesson, sessions)
    log_path = sessions / "quest-1.jsonl"
    lines_before = log_path.read_bytes()
    stored = blob.read_bytes()
    opened = []

    def interrupting(real):
        def opening(path, *args, **kwargs):
            if isinstance(path, (str, bytes, os.PathLike)) and (
                    os.fsdecode(path) == str(blob)):
                opened.append(path)
                raise KeyboardInterrupt
            return real(path, *args, **kwargs)
        return opening

    outcome = "returned"
    with lesson.SessionLog(sessions, "quest-1") as log:
        for module, name in ((os, "open"), (builtins, "open"), (io, "open")):
            monkeypatch.setattr(module, name, interrupting(getattr(module, name)))
        try:
            log.append({"role": "user", "content": PASTE})
        except BaseException as error:  # a KeyboardInterrupt too: the test judges it
            outcome = f"raised {type(error).__name__}: {error}"
            if isinstance(error, KeyboardInterrupt):
                outcome = "interrupted"
        finally:
            monkeypatch.undo()
    if not opened:
        return      # the stored blob was checked some other way: no Ctrl-C to judge
    assert outcome == "interrupted", (
        f"Ctrl-C was pressed while the append read the stored blobs/{blob.name} to "
        f"check it, and the append {outcome}: a Ctrl-C is the user stopping the "
        "program, not a blob missing or damaged; it should reach the caller as the "
        "KeyboardInterrupt it is (an except that catches everything swallows it)")
    assert log_path.read_bytes() == lines_before, (
        "the append was interrupted by a Ctrl-C, yet the log has a new line")
    assert blob.read_bytes() == stored, (
        f"the interrupted append changed blobs/{blob.name}, which held the content")


@pytest.mark.task("06.2")
@pytest.mark.parametrize("data", [
    b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 20,
    # An emoji written as its two UTF-16 halves, each encoded alone (CESU-8, as some
    # Java and database tools write text): UTF-8 forbids those bytes, and a text
    # holding a lone half can be sent nowhere (no JSON encoder of a request takes it)
    "Day 1: the map ".encode("utf-8") + b"\xed\xa0\xbd\xed\xb7\xba" * 10,
], ids=["an image", "halves of an emoji encoded alone (CESU-8)"])
def test_a_blob_that_is_not_utf8_text_is_refused_naming_it(lesson, sessions,
                                                           monkeypatch, data):
    """A blob whose bytes match its hash but are not UTF-8 (a file someone put there,
    an image or text another tool encoded its own way) is no message's content:
    BlobError naming the blob, the log (by its full path, whatever folder the program
    runs from) and the line."""
    digest = sha256(data)
    (sessions / "blobs").mkdir(parents=True)
    (sessions / "blobs" / digest).write_bytes(data)
    reference = {"$blob": digest, "size": len(data), "preview": ""}
    line = {"role": "user", "content": reference}
    (sessions / "quest-1.jsonl").write_text(
        json.dumps(SMALL) + "\n" + json.dumps(line) + "\n", encoding="utf-8")

    before = snapshot(sessions)
    monkeypatch.chdir(sessions.parent)      # the program runs from another folder
    with lesson.SessionLog(sessions, "quest-1") as log:
        with raises(lesson.BlobError,
                    "a blob that is not UTF-8 text was loaded as a message's "
                    "content (with replacement characters?)") as refused:
            log.load()
    unchanged(sessions, before,
              "a refused load must change nothing, not a byte, a mode or a time: the "
              "user goes to look at that very blob, the one that is no text")
    message = str(refused.value)
    named = (re.search(r"\bline 2\b", message)
             and str(sessions / "quest-1.jsonl") in message)
    assert digest in message and named, (
        f"the error should name the blob ({digest}), the log by its path and the line "
        f"(line 2); it says: {message}")
    says_what_it_met(refused.value, "bytes that are no text", sessions)


@pytest.mark.task("06.2")
@pytest.mark.parametrize("blob", ["intact", "changed", "no text", "missing",
                                  "a symbolic link", "a folder"])
def test_loading_a_hundred_times_leaves_no_descriptor_open(lesson, sessions, blob):
    """A session whose blob is intact, or changed, no UTF-8 text, missing, a symbolic
    link or a folder is loaded a hundred times, as a program that retries, or serves
    many requests, does: each load returns or is refused, and the process then holds
    exactly the descriptors it held before. One left open at each load, refused or
    not, runs such a program out of them."""
    paste = PASTE[:20_000]     # over the threshold: a blob, and quick to hash
    data = paste.encode("utf-8")
    path = store(lesson, sessions, data)
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": paste})
    if not path.is_file():
        fail_in("06.1", f"the paste should be stored in the folder's blobs/, named "
                f"{path.name}; blobs/ holds {blob_names(sessions)}")
    if blob == "changed":
        path.write_bytes(data.replace(b"cave", b"CAVE", 1))
    elif blob == "no text":
        path.write_bytes(b"\xff\xfe" + data)
    elif blob != "intact":
        path.unlink()
        if blob == "a symbolic link":
            (sessions / "elsewhere").write_bytes(data)
            path.symlink_to(sessions / "elsewhere")
        elif blob == "a folder":
            path.mkdir()
    log = lesson.SessionLog(sessions, "quest-1")
    before = open_descriptors()
    for _ in range(100):
        try:
            log.load()
        except lesson.BlobError:
            pass
    left = open_descriptors() - before
    assert left == 0, (
        f"a session whose blob is {blob} was loaded a hundred times, and the process "
        f"then held {left} more descriptor(s) than before: "
        + ("each load" if blob == "intact" else "each refused load")
        + " left the blob's file open. A load opens the blob, reads it and closes it "
        "on every way out, its refusals included")


@pytest.mark.task("06.2")
def test_a_reference_to_a_blob_of_no_bytes_loads_an_empty_content(lesson, sessions):
    """Another program stored an empty content as a blob: 0 bytes, whose sha256 is its
    name. It is the content that was stored, intact, and loads as an empty text."""
    digest = sha256(b"")
    (sessions / "blobs").mkdir(parents=True)
    (sessions / "blobs" / digest).write_bytes(b"")
    line = {"role": "user", "content": {"$blob": digest, "size": 0, "preview": ""}}
    (sessions / "quest-1.jsonl").write_text(
        json.dumps(SMALL) + "\n" + json.dumps(line) + "\n", encoding="utf-8")

    with lesson.SessionLog(sessions, "quest-1") as log:
        try:
            loaded = log.load()
        except ValueError as error:
            pytest.fail(f"a reference to blobs/{digest}, a file of 0 bytes, was "
                        f"refused ({type(error).__name__}: {error}): 0 bytes are the "
                        "empty content, and their sha256 is the blob's name, so it is "
                        "the content that was stored, intact", pytrace=False)
    content = loaded[1].get("content") if len(loaded) > 1 else None
    assert content == "", (
        "a reference to the blob of 0 bytes should load as an empty content; the "
        f"second message came back with {content!r}")


@pytest.mark.task("06.1")
def test_store_blob_stores_bytes_of_any_number_zero_too(lesson, sessions):
    """store_blob stores the bytes it is given, however many: 0 bytes too (a caller
    that stores what another program hands it, or a text that ends up empty). Their
    sha256 is the name it returns, and a file of 0 bytes must then stand there: a
    name returned for bytes never stored is a line pointing to nothing. Stored again,
    they are found intact, as any blob is."""
    blob = store(lesson, sessions, b"")
    held = blob.read_bytes() if blob.is_file() else None
    assert held == b"", (
        f"store_blob was given 0 bytes and returned their sha256, {blob.name}, but "
        + ("no file stands at that name in blobs/" if held is None else
           f"blobs/{blob.name} holds {len(held)} bytes")
        + ": a store puts the bytes it is given under their name, however few, and "
        "a line pointing to that name would be refused as missing")
    found = blob.stat().st_ino
    try:
        store(lesson, sessions, b"", "quest-2")
    except (OSError, ValueError) as error:
        pytest.fail(f"0 bytes were stored, and storing them again, which finds their "
                    f"blob of 0 bytes intact at its name, failed "
                    f"({type(error).__name__}: {error}): an empty file is a blob like "
                    "any other, and its hash is its name", pytrace=False)
    assert blob.is_file() and blob.stat().st_ino == found, (
        "0 bytes stored a second time should find their blob intact and leave it as "
        "it is, the very file it was")


@pytest.mark.task("06.1")
def test_a_new_blobs_folder_is_private_even_under_umask_000(lesson, sessions):
    """blobs/ holds what people pasted: made by the writer, it is its owner's only
    (0700), whatever the umask says (a bare mkdir leaves 0777 under umask 000), and
    the program's umask is left as it was."""
    old_umask = os.umask(0)
    try:
        store(lesson, sessions, PASTE.encode("utf-8"))
        umask_after = os.umask(0)
    finally:
        os.umask(old_umask)

    assert umask_after == 0, (
        f"storing a blob left the program's umask at {oct(umask_after)}, where it was "
        "000: every file and folder the program makes from then on, none of them the "
        "store's, gets the store's idea of a mode. The blob and blobs/ are made "
        "private by the modes they are made with, and the umask is left as it was")
    blobs = sessions / "blobs"
    assert blobs.is_dir(), f"the paste should be stored in {blobs}"
    mode = blobs.stat().st_mode & 0o777
    assert mode == 0o700, (
        f"blobs/ was made with mode {oct(mode)} under umask 000; it should be 0o700, "
        "readable by its owner only, like the sessions folder")
    blob = blobs / sha256(PASTE.encode("utf-8"))
    mode = blob.stat().st_mode & 0o777 if blob.is_file() else None
    assert mode is not None and not mode & 0o077, (
        f"the blob was stored with mode {mode and oct(mode)} under umask 000: it holds "
        "what a person pasted, and should be readable by its owner only (0o600), like "
        "the log")


@pytest.mark.task("06.1")
def test_a_blob_is_its_owners_only_from_the_moment_it_has_its_name(lesson, sessions):
    """Under umask 000, the file that comes to stand at a blob's name is already its
    owner's only when it gets that name: a crash right after that step leaves the paste
    there as it is then, and a later store finds it intact and leaves it as it is."""
    global _placing
    data = PASTE.encode("utf-8")
    blob = str(sessions / "blobs" / sha256(data))
    modes: list[int] = []

    def placing(source, target):
        if target == blob:
            with contextlib.suppress(OSError):
                modes.append(os.stat(source, follow_symlinks=False).st_mode & 0o777)

    old_umask = os.umask(0)
    _placing = placing
    try:
        store(lesson, sessions, data)
    finally:
        _placing = None
        os.umask(old_umask)
    shown = [oct(mode) for mode in modes if mode & 0o077]
    if shown:
        fail_in("06.1", f"under umask 000, the file given the blob's name had mode "
                f"{shown[0]} when it got the name, so other users of the machine could "
                "read the paste there: a crash before the mode was narrowed leaves it "
                "so for good. The file should be its owner's only (0o600) before it is "
                "given the blob's name")


@pytest.mark.task("06.1")
@pytest.mark.parametrize("durable", [False, True], ids=["not durable", "durable"])
def test_a_blobs_folder_removed_while_the_writer_is_open_is_made_again(
        lesson, sessions, monkeypatch, durable):
    """blobs/ is removed by hand (a clean-up) while a writer is open: its next store
    makes blobs/ again, its owner's only, and stores the content whole; a durable
    writer syncs the sessions folder once blobs/ is back, as for the first one."""
    data = PASTE.encode("utf-8")
    with lesson.SessionLog(sessions, "quest-1", durable=durable) as log:
        log.store_blob(NON_ASCII.encode("utf-8"))
        blobs = sessions / "blobs"
        assert blobs.is_dir(), f"the first store should have made {blobs}"
        shutil.rmtree(blobs)                        # a clean-up by hand
        events = []
        watch_syncs(monkeypatch, events, blobs)     # "named": blobs/ is back by then
        try:
            log.store_blob(data)
        except OSError as error:
            pytest.fail(
                f"blobs/ was removed while the writer was open, and its next store "
                f"failed ({type(error).__name__}: {error}): when blobs/ is missing, "
                "a store makes it, at every store, not once per writer",
                pytrace=False)
        finally:
            monkeypatch.undo()
    blob = blobs / sha256(data)
    assert blob.is_file() and blob.read_bytes() == data, (
        f"blobs/ was removed and made again; blobs/{blob.name} should hold the "
        "content, whole")
    mode = blobs.stat().st_mode & 0o777
    assert mode == 0o700, (
        f"blobs/ was made again with mode {oct(mode)}; it should be 0o700, readable "
        "by its owner only, like the first time")
    parent = sessions.stat().st_ino
    assert not durable or any(ino == parent and named for _, ino, named in events), (
        "a durable writer made blobs/ again but did not sync the sessions folder "
        "after it: a power cut could lose blobs/ and the blob in it while the line "
        "that points there survives")


@pytest.mark.task("06.1")
def test_a_durable_writer_syncs_the_new_blobs_folder_in_the_sessions_folder(
        lesson, sessions, monkeypatch):
    """A new folder's name lives in its parent: when a durable writer makes blobs/, the
    sessions folder is synced after it, before store_blob returns (so before the line),
    or a power cut can lose blobs/ and every blob in it while the line that points there
    survives."""
    with lesson.SessionLog(sessions, "quest-1", durable=True) as log:
        events = []
        made = sessions / "blobs"
        watch_syncs(monkeypatch, events, made)  # "named": blobs/ exists by then
        log.store_blob(PASTE.encode("utf-8"))
        monkeypatch.undo()

    parent = sessions.stat().st_ino
    assert any(ino == parent and named for _, ino, named in events), (
        "a durable writer made blobs/ but did not sync the sessions folder after it, "
        "before store_blob returned: a power cut could lose blobs/ and every blob in "
        "it while the line that append writes next survives")


@pytest.mark.task("06.1")
@pytest.mark.parametrize("target", ["the right bytes", "nothing", "a folder",
                                    "the right bytes in blobs/"])
def test_a_link_planted_at_a_blobs_name_is_replaced_not_trusted(lesson, sessions,
                                                                tmp_path, target):
    """A symbolic link under the blob's name, to the right bytes, to nothing or to a
    folder, is no stored blob (load refuses links), nor the folder a store never
    replaces: storing the content puts a real file there, holding the content, and the
    link's target is left alone (not written, not made, not emptied). A link to the
    right bytes that stays in blobs/ (a copy there under another name) is no stored
    blob either: load refuses a link at a blob's name wherever it points."""
    data = PASTE.encode("utf-8")
    (sessions / "blobs").mkdir(mode=0o700)
    outside = (sessions / "blobs" / ".a-copy" if target.endswith("in blobs/")
               else tmp_path / "outside")
    if target.startswith("the right bytes"):
        outside.write_bytes(data)
    elif target == "a folder":
        outside.mkdir()
        (outside / "notes.txt").write_text("the elder's notes", encoding="utf-8")
    blob = sessions / "blobs" / sha256(data)
    blob.symlink_to(outside)

    try:
        store(lesson, sessions, data)
    except OSError as error:
        pytest.fail(f"blobs/{blob.name} is a symbolic link to {target}, and storing "
                    f"the content failed ({type(error).__name__}: {error}): a link "
                    "at the name is no blob, and the store puts the blob there in its "
                    "place", pytrace=False)

    assert not blob.is_symlink() and blob.is_file(), (
        f"blobs/{blob.name} is still a symbolic link after the content was stored: "
        "a load refuses links, so the session cannot load its paste")
    if target == "nothing":
        assert not outside.exists(), (
            "the link at the blob's name pointed to nothing, and storing the content "
            "made the file it points to: a store writes nothing through a link")
    elif target == "a folder":
        held = sorted(path.name for path in outside.iterdir())
        assert held == ["notes.txt"], (
            "the link at the blob's name pointed to a folder, and storing the content "
            f"changed that folder, which now holds {held}: a store writes nothing "
            "through a link")
    else:
        assert outside.read_bytes() == data, "the link's target must not be written to"
    assert blob.read_bytes() == data, (
        f"blobs/{blob.name} should hold the content, whole, once it is stored")


@pytest.mark.task("06.1")
def test_a_named_pipe_at_a_blobs_name_is_replaced_without_waiting(lesson, sessions):
    """A named pipe (a FIFO) sits at the blob's name, made there by someone or left by
    a tool: it is no stored blob, nor the folder a store never replaces. Storing the
    content puts the blob in its place, and never waits on it: an open of a FIFO for
    reading waits for a writer that never comes, and the append would hang for ever
    with the user's paste."""
    data = PASTE.encode("utf-8")
    (sessions / "blobs").mkdir(mode=0o700)
    blob = sessions / "blobs" / sha256(data)
    os.mkfifo(blob, 0o600)

    def waited(signum, frame):
        raise WaitedOnTheBlob

    previous = signal.signal(signal.SIGALRM, waited)
    signal.setitimer(signal.ITIMER_REAL, 5)
    try:
        store(lesson, sessions, data)
    except WaitedOnTheBlob:
        pytest.fail(f"blobs/{blob.name} is a named pipe, and storing the content was "
                    "still waiting on it 5 seconds later: an open of a FIFO for "
                    "reading waits for a writer, and none will come (read_file opens "
                    "without waiting, and refuses what is no regular file)",
                    pytrace=False)
    except OSError as error:
        pytest.fail(f"blobs/{blob.name} is a named pipe, and storing the content "
                    f"failed ({type(error).__name__}: {error}): a named pipe is no "
                    "stored blob, and the store puts the blob there in its place",
                    pytrace=False)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    info = blob.lstat()
    assert stat.S_ISREG(info.st_mode) and blob.read_bytes() == data, (
        f"blobs/{blob.name} was a named pipe; once the content is stored it should be "
        "a plain file holding the content, whole, and it is "
        + ("a plain file holding other bytes" if stat.S_ISREG(info.st_mode)
           else "still no plain file"))


@pytest.mark.task("06.1")
@pytest.mark.parametrize("role", ["user", "assistant", "tool", "system", "developer"])
def test_a_large_content_goes_to_a_blob_whoever_wrote_it(lesson, sessions, role):
    """The threshold is the only rule: the model's long answer, a tool's long result
    and a long system prompt (in a "developer" message too, as newer models take it)
    leave the line as a user's paste does, and load puts each back."""
    message = {"role": role, "content": PASTE}
    if role == "tool":
        message["tool_call_id"] = "call_1_0"
    given = dict(message)
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append(message)
    assert message == given, (
        f"append changed the {role}'s message it was given: the agent keeps it and "
        f"sends it next, so the model would get {str(message.get('content'))[:120]!r} "
        "where the content was")

    stored = lines_of(sessions / "quest-1.jsonl")[0]
    assert isinstance(stored.get("content"), dict), (
        f"a 1 MB content from the {role} stayed in the line: every string content "
        "over the threshold goes to a blob, whatever the role")
    reference = reference_in(stored)
    assert {**stored, "content": message["content"]} == message, (
        f"the line should keep the rest of the {role}'s message as it was; it holds "
        f"{sorted(stored)}")
    blob = sessions / "blobs" / str(reference.get("$blob"))
    assert blob.is_file() and blob.read_bytes() == PASTE.encode("utf-8"), (
        f"the {role}'s content should be stored whole in {blob}")
    with lesson.SessionLog(sessions, "quest-1") as log:
        loaded = log.load()
    if loaded != [message]:
        fail_in("06.2", f"the {role}'s 1 MB content is stored as a blob, and load "
                "should put it back, whoever wrote it: the model is sent what load "
                f"gives, and it gave {str(loaded)[:200]}")


@pytest.mark.task("06.2")
def test_inline_gives_a_copy_and_leaves_the_message_it_was_given(lesson, sessions):
    """inline hands back a copy holding the stored content: the message it was given
    still holds its reference. Its caller may go on using that message (lesson 09's
    erase keeps the entries it read and writes them back), and a message that held the
    whole content where the line holds a reference would be written back whole."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": PASTE})
    entry = lines_of(sessions / "quest-1.jsonl")[0]
    before = json.loads(json.dumps(entry))

    with lesson.SessionLog(sessions, "quest-1") as log:
        got = log.inline(entry, 1)

    assert isinstance(got, dict) and got.get("content") == PASTE, (
        "inline should give back the message with the blob's content in place of the "
        f"reference; its content was {str(got)[:120]!r}")
    assert entry == before, (
        "inline changed the message it was given: its content is now "
        f"{str(entry.get('content'))[:80]!r}, not the reference {before['content']!r}. "
        "The content comes back in a copy; whoever holds the message read from the "
        "line must still find the reference there")


@pytest.mark.task("06.2")
def test_a_load_leaves_every_file_as_it_found_it_modes_and_times_too(lesson,
                                                                     sessions):
    """A load only reads: the blob it puts back, blobs/ and the log keep their bytes,
    their modes and their times. A blob restored from a backup by a copy that kept
    no modes (readable by others, 0o644) and old times is still loaded as it is: a
    load that changes a file's mode or times (to mark it used, or to make it private)
    writes to a folder it was only asked to read, fails where it may only read (a
    backup mounted read-only), and makes every backup tool copy the blob again."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": PASTE})
    blob = sessions / "blobs" / sha256(PASTE.encode("utf-8"))
    assert blob.is_file(), f"the paste should be stored as blobs/{blob.name}"
    blob.chmod(0o644)                       # as a copy that kept no modes left it
    an_hour_ago = blob.stat().st_mtime_ns - 3600 * 10**9
    for path in (blob, blob.parent, sessions / "quest-1.jsonl"):
        os.utime(path, ns=(an_hour_ago, an_hour_ago))

    def state():
        return {str(path.relative_to(sessions)): (
            oct(path.lstat().st_mode), path.lstat().st_mtime_ns)
            for path in sorted(sessions.rglob("*"))}

    before, held = state(), snapshot(sessions)
    with lesson.SessionLog(sessions, "quest-1") as log:
        loaded = log.load()
    content = loaded[0].get("content") if loaded else None
    assert content == PASTE, (
        f"the paste's blob, intact but readable by others (0o644), should load as it "
        f"is; the content came back as {str(content)[:120]!r}")
    after = state()
    changed = {name: (before.get(name), found) for name, found in after.items()
               if before.get(name) != found}
    assert not changed and snapshot(sessions) == held, (
        f"a load changed files it only had to read, (mode, mtime in ns) before and "
        f"after: {changed}: a load reads, and leaves every file's bytes, mode and "
        "times as it found them")


@pytest.mark.task("06.1")
@pytest.mark.task("06.2")
def test_a_durable_writer_syncs_a_blob_it_only_loaded_before_pointing_to_it(
        lesson, sessions, monkeypatch):
    """A writer that is not durable stores the paste, and nothing syncs it. A durable
    writer then resumes the session: its load reads the blob whole and checks its hash,
    which says nothing of the disk (the read may come from memory, where the unsynced
    bytes still are). When it appends the same paste, it syncs the blob and blobs/
    before its line points to it: a blob read is no blob synced."""
    paste = {"role": "user", "content": PASTE}
    with lesson.SessionLog(sessions, "quest-1") as log:     # not durable
        log.append(paste)
    blob = sessions / "blobs" / sha256(PASTE.encode("utf-8"))
    assert blob.is_file(), (
        f"the paste should be stored in the folder's blobs/, named {blob.name}; "
        f"blobs/ holds {blob_names(sessions)}")
    with lesson.SessionLog(sessions, "quest-1", durable=True) as log:
        history = log.open_for_append()
        assert history == [paste], (
            "a durable writer resuming the session should load the paste back, whole")
        synced = count_syncs(monkeypatch)
        log.append(paste)
        monkeypatch.undo()
    folder = (sessions / "blobs").stat().st_ino
    assert blob.stat().st_ino in synced and folder in synced, (
        "a durable writer loaded the session, reading the paste's blob whole, then "
        "appended the same paste and returned without syncing the blob and blobs/: "
        "no writer ever synced that blob (the one that stored it was not durable), "
        "and reading a file says nothing of whether it is on the disk. A power cut "
        "could keep the durable writer's line and lose the blob")
