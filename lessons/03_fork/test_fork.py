"""Lesson 03: fork a session.

Run: pytest lessons/03_fork            (your code)
     pytest lessons/03_fork --solution (the reference)
"""

import errno
import json
import os
import re
import resource
import signal
import stat
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from sessionlab.scripted import ScriptedModel, call, say, use
from sessionlab.testing import (described, fail_in, in_child,
                                local_clock_ahead_of_utc, raises, unless_unfinished,
                                until_written, wait_past, with_file_size_limit)
from sessionlab.town import Town


def play(lesson, sessions, session_id, script, text, town):
    model = ScriptedModel(list(script))
    with lesson.SessionLog(sessions, session_id) as log:
        agent = lesson.Agent(model.client(), model=model.model, tools=town, session=log)
        agent.run(text)
    return agent, model


@pytest.fixture
def day_one(lesson, sessions, town):
    """Day 1: the elder is asked about the cave and a rope is bought (10 gold -> 6)."""
    agent, _ = play(
        lesson,
        sessions,
        "quest-1",
        [
            use(call("talk_to", npc="elder"), call("buy", item="rope")),
            say("Rope bought."),
        ],
        "Ask the elder about the cave and buy a rope.",
        town,
    )
    return agent.messages


def plain_publish_fork(folder, source_id, new_id, count, copy, durable):
    """A stand-in for `publish_fork` (task 03.2) while it is not written yet: each file
    written under a temporary name, synced when `durable` says so, then given its own
    (the log's by a link, SessionExists if its name is taken; the meta file's by a
    rename), and their folder synced last. It has none of 03.2's care for what an
    error, an interrupt or a kill leaves, and no test of 03.2 alone uses it."""
    folder = Path(folder)
    lineage = {"format": 1, "id": new_id, "parent": source_id, "forked_at": count,
               "created": datetime.now(timezone.utc).isoformat()}
    for name, data in ((f"{new_id}.jsonl", copy),
                       (f"{new_id}.meta.json", json.dumps(lineage).encode())):
        temporary = folder / f".{name}.stand-in.tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                     0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
            os.close(fd)
            fd = None
            if name.endswith(".jsonl"):
                try:
                    os.link(temporary, folder / name)
                except FileExistsError:
                    raise PLAIN["refusal"](f"cannot create {name}: it exists") from None
            else:
                os.replace(temporary, folder / name)
        finally:
            if fd is not None:
                os.close(fd)
            temporary.unlink(missing_ok=True)
    if durable:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


PLAIN = {"refusal": FileExistsError}     # the lesson's SessionExists, once known


@pytest.fixture(autouse=True)
def until_task_03_2_is_written(request, monkeypatch):
    """fork (task 03.1) ends by handing its copy to publish_fork (task 03.2). So that
    03.1 can be finished, and seen to pass, first, every test of 03.1 publishes through
    `plain_publish_fork` for as long as publish_fork says it is not written; once it is,
    the student's own publish_fork runs. The tests of 03.2 alone never use the
    stand-in: they fail until 03.2 is written."""
    tasks = {mark.args[0] for mark in request.node.iter_markers("task")}
    if "03.1" not in tasks or "lesson" not in request.fixturenames:
        return
    lesson = request.getfixturevalue("lesson")
    monkeypatch.setitem(PLAIN, "refusal", lesson.SessionExists)
    until_written(monkeypatch, lesson, "publish_fork", "03.2", plain_publish_fork)


def handed_to_publishing(lesson, monkeypatch):
    """A list that records each fork publish_fork is handed (its new id and count),
    publish_fork still doing its work."""
    handed, publish = [], getattr(lesson, "publish_fork", None)
    if publish is None:     # a later lesson's store that publishes otherwise
        return handed

    def publish_fork(folder, source_id, new_id, count, copy, durable):
        handed.append((new_id, count))
        return publish(folder, source_id, new_id, count, copy, durable)
    monkeypatch.setattr(lesson, "publish_fork", publish_fork)
    return handed


def snapshot(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def expect_whole_fork(lesson, sessions, new_id, parent, messages, when, task=None):
    """Fail, saying `when`, unless session `new_id` is the whole fork of `parent`'s
    `messages`: its log loads them, and its meta file names `parent` and their count.
    With `task`, the failure names that task alone (testing.fail_in)."""
    def fail_within(message, pytrace=False):
        if task:
            fail_in(task, message)
        pytest.fail(message, pytrace=pytrace)
    meta_path = sessions / f"{new_id}.meta.json"
    try:
        meta = json.loads(meta_path.read_bytes())
    except (OSError, ValueError) as error:
        fail_within(f"{when}, the fork returned, but {meta_path.name} holds no lineage "
                    f"({type(error).__name__}: {error})", pytrace=False)
    lineage = {"parent": parent, "forked_at": len(messages)}
    found = {key: meta.get(key) if isinstance(meta, dict) else None for key in lineage}
    if found != lineage:
        fail_within(f"{when}, the fork of {len(messages)} message(s) of {parent!r} "
                    f"returned, but {meta_path.name} says {found}, where {lineage} was "
                    "expected: the session's lineage is not the fork's", pytrace=False)
    mode = meta_path.stat().st_mode & 0o777
    if mode != 0o600:
        fail_within(f"{when}, the fork returned, and {meta_path.name} has mode "
                    f"{oct(mode)}, where 0o600 (its owner only) was expected",
                    pytrace=False)
    loaded = lesson.SessionLog(sessions, new_id).load()
    if loaded != messages:
        fail_within(f"{when}, the fork of {len(messages)} message(s) returned, and its "
                    f"log loads {len(loaded)} that differ", pytrace=False)


def which(held, source, name="quest-1"):
    """In words, which of `source`'s messages the list `held` is: how many, and the
    place of each in `source` (or that it is none of them)."""
    if not held:
        return "no message"
    places = [f"#{source.index(message) + 1}" if message in source
              else f"one {name} does not hold" for message in held]
    return f"{len(held)} message(s): {name}'s " + ", ".join(places)


def expect_unchanged(folder, before, message):
    """Fail with `message` unless `folder` holds what `snapshot` saw: the words say what
    changed, never pytest's dump of every file's bytes."""
    if snapshot(folder) != before:
        pytest.fail(message, pytrace=False)


@pytest.mark.task("03.1")
@pytest.mark.parametrize("upto, durable", [(None, False), (0, True), (1, False),
                                           (2, True), (3, False), (4, True)])
def test_fork_hands_publish_fork_the_first_messages_and_their_count(
        lesson, sessions, monkeypatch, upto, durable):
    """Without task 03.2: fork hands publish_fork the first `upto` lines of the source,
    byte for byte (a line holding U+2028 is one line), how many messages they are, and
    `durable` as it was given. The folder may come as text or as a Path (fork's
    signature takes both): publish_fork is handed it as the Path its signature says.
    A message is a message, whatever its role: the first 2 of a log whose second
    calls a tool are those 2, the call's result left out with the rest."""
    messages = [{"role": "user", "content": "north\u2028south\u2029east\x85west"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function",
                     "function": {"name": "look", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "A fork ahead."},
                {"role": "user", "content": "North."}]
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in messages:
            log.append(message)
    lines = (sessions / "quest-1.jsonl").read_bytes().splitlines(keepends=True)
    handed = []

    def publish_fork(folder, source_id, new_id, count, copy, durable):
        handed.append({"folder": folder, "source_id": source_id, "new_id": new_id,
                       "count": count, "copy": copy, "durable": durable})
    monkeypatch.setattr(lesson, "publish_fork", publish_fork)
    # Odd cases name the folder as text, as a caller may: fork takes str | Path
    given = str(sessions) if upto in (1, 3) else sessions

    error = fork_or_fail(lesson, given, "quest-1", "what-if", upto=upto,
                         durable=durable)

    kept = len(messages) if upto is None else upto
    if error is not None:
        pytest.fail(f"the source holds {len(messages)} messages, the first with "
                    "U+2028, U+2029 and U+0085 inside its line (characters some ways "
                    "of cutting text take for line ends; only the newline byte ends a "
                    f"line of the log); fork({given!r}, ..., upto={upto}) "
                    f"(the folder given as {type(given).__name__}, which fork's "
                    f"signature takes) should hand publish_fork the first {kept}, and "
                    f"it raised {described(error)}", pytrace=False)
    expected = {"folder": sessions, "source_id": "quest-1", "new_id": "what-if",
                "count": kept, "copy": b"".join(lines[:kept]), "durable": durable}
    assert len(handed) == 1, (
        f"fork(..., upto={upto}) should hand the copy to publish_fork once; it did "
        f"{len(handed)} time(s)")
    wrong = {key: value for key, value in handed[0].items() if value != expected[key]}
    if wrong:
        pytest.fail(
            f"the source holds {len(messages)} messages, the first with U+2028, "
            "U+2029 and U+0085 inside its line, the second a call of a tool whose "
            f"result is the third; fork(..., upto={upto}, durable={durable}) should "
            f"hand publish_fork the folder as a Path, {kept} message(s), the first "
            f"{kept} line(s) as they are in the source (a message is a message, "
            "whatever its role), and durable as given. It handed "
            + "; ".join(f"{key}={value!r} where {expected[key]!r} was expected"
                        for key, value in wrong.items()), pytrace=False)


NEWLINE = b"\n"
M1 = b'{"role": "user", "content": "Ask the elder."}'
M2 = b'{"role": "assistant", "content": "A torch and a rope."}'
TORN = b'{"role": "user", "content": "Buy a to'
CALL = (b'{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", '
        b'"type": "function", "function": {"name": "look", "arguments": "{}"}}]}')
WORDS = b'{"role": "user", "content": "NaN gold? Infinity -Infinity!"}'


@pytest.mark.task("03.1")
@pytest.mark.parametrize("what, source, kept", [
    ("blank lines between and after its messages", M1 + b"\n\n" + M2 + b"\n\n",
     (M1, M2)),
    ("a blank first line", b"\n" + M1 + b"\n" + M2 + b"\n", (M1, M2)),
    ("a last line a killed writer tore", M1 + b"\n" + M2 + b"\n" + TORN, (M1, M2)),
    ("a last message whose newline is missing", M1 + b"\n" + M2, (M1, M2)),
    ("a last message whose newline is missing, a call of a tool (its content null, "
     "as a message that calls a tool may have it)", M1 + b"\n" + CALL, (M1, CALL)),
    ("a last line, without its newline, that is a message followed by a form feed "
     "(Python strips it as a blank, JSON does not take it for one: no message)",
     M1 + b"\n" + M2 + b"\n" + M2 + b"\x0c", (M1, M2)),
    ("a last message whose newline is missing, ending in a carriage return (another "
     "system's line end, cut before its newline)", M1 + b"\n" + M2 + b"\r",
     (M1, M2 + b"\r")),
    ("a last message whose newline is missing, ending in spaces", M1 + b"\n" + M2
     + b"  ", (M1, M2 + b"  ")),
    ("a message line ending in a space before its newline",
     M1 + b" \n" + M2 + b"\n", (M1 + b" ", M2)),
    ("nothing but a torn line", TORN, ()),
    ("a last line of blanks alone, without its newline (spaces and a tab: no message, "
     "and no line its writer finished)", M1 + b"\n" + M2 + b"\n" + b" \t ", (M1, M2)),
    ("a last line torn inside a two-byte letter (its bytes are no UTF-8 text)",
     M1 + b"\n" + M2 + b"\n" + b'{"role": "user", "content": "caf\xc3', (M1, M2)),
    ("a last line torn right after a closing brace",
     M1 + b"\n" + M2 + b"\n" + b'{"role": "assistant", "tool_calls": [{"id": "c1"}',
     (M1, M2)),
    ("nothing at all (an empty log, as a fork of none leaves)", b"", ()),
    ("a last line, without its newline, that is JSON but no message (it has no role)",
     M1 + b"\n" + M2 + b"\n" + b'{"content": "no role"}', (M1, M2)),
    ("a last line, without its newline, that is JSON with a role no message has",
     M1 + b"\n" + M2 + b"\n" + b'{"role": "wizard", "content": "Abracadabra."}',
     (M1, M2)),
    ("messages whose text says NaN and Infinity, as words (JSON allows those)",
     WORDS + b"\n" + M2 + b"\n", (WORDS, M2)),
    ("the same message twice, byte for byte (a user who asks the same thing twice), "
     "then another", M1 + b"\n" + M1 + b"\n" + M2 + b"\n", (M1, M1, M2)),
])
def test_a_fork_holds_the_messages_a_reader_finds_and_nothing_else(
        lesson, sessions, monkeypatch, what, source, kept):
    """Without task 03.2: a source with blank lines, a torn last line (or one of blanks
    alone, no more damage than a torn one), a last message without its newline (a call
    of a tool too, its content null), a last line that is a message and a form feed
    (which JSON takes for no blank), lines with blanks or a carriage return at their
    end, one message twice, or nothing at all. A whole fork
    hands publish_fork the message lines a reader finds, each as the source holds it
    and ending in its newline, and nothing else; their count; a fork of one message
    more than those is refused, handing nothing; and a fork of its first k messages,
    for every k up to that, hands the first k of them."""
    (sessions / "quest-1.jsonl").write_bytes(source)
    handed = []
    monkeypatch.setattr(lesson, "publish_fork",
                        lambda folder, source_id, new_id, count, copy, durable:
                        handed.append((count, copy)))
    messages = len(kept)
    expected = (messages, b"".join(line + b"\n" for line in kept))

    error = fork_or_fail(lesson, sessions, "quest-1", "what-if")

    if handed != [expected]:
        got = ("nothing, and raised " + described(error)) if error is not None and \
            not handed else "nothing" if not handed else "; ".join(
            f"{count!r} message(s) and {copy!r}" for count, copy in handed)
        pytest.fail(f"the source holds {what}, {messages} message(s) a reader "
                    f"finds; a whole fork should hand publish_fork {messages} and "
                    f"{expected[1]!r} (the message lines, byte for byte, each with its "
                    f"newline, nothing else), once. It handed {got}", pytrace=False)
    held = (sessions / "quest-1.jsonl").read_bytes()
    if held != source:
        pytest.fail(f"the source holds {what}; a fork of it should leave it as it "
                    f"was, {len(source)} bytes, and left {len(held)} bytes that "
                    "differ: a fork only reads its source (a torn line is not its to "
                    "cut, a missing newline not its to write)", pytrace=False)
    handed.clear()
    error = fork_or_fail(lesson, sessions, "quest-1", "too-far", upto=messages + 1)
    assert isinstance(error, ValueError) and not handed, (
        f"the source holds {what}, {messages} message(s); a fork of {messages + 1} "
        "should be refused with ValueError, handing publish_fork nothing; it "
        + (f"handed {handed}" if handed else "returned" if error is None
           else f"raised {type(error).__name__}: {error}"))
    expect_upto_named(lesson, sessions, error, messages + 1,
                      f"more messages than quest-1 holds ({messages})")
    expect_holds_named(sessions, error, messages + 1, messages, what)
    for upto in range(messages + 1):
        handed.clear()
        error = fork_or_fail(lesson, sessions, "quest-1", f"first-{upto}", upto=upto)
        wanted = (upto, b"".join(line + b"\n" for line in kept[:upto]))
        if handed != [wanted]:
            got = "nothing, and raised " + described(error) if not handed else \
                "; ".join(f"{count!r} message(s) and {copy!r}"
                          for count, copy in handed)
            pytest.fail(f"the source holds {what}; a fork of its first {upto} "
                        f"message(s) should hand publish_fork {upto} and "
                        f"{wanted[1]!r} (the first {upto} message lines a reader "
                        "finds, byte for byte, each with its newline, whatever lies "
                        f"between them), once. It handed {got}", pytrace=False)


@pytest.mark.task("03.1")
def test_a_fork_copies_a_source_larger_than_any_one_read(
        lesson, sessions, monkeypatch):
    """Without task 03.2: a source of 17 MiB, its first message a map pasted whole
    and 3,000 short ones after it. A whole fork hands publish_fork every line, byte
    for byte, and their count: a source is read to its end, however large, never by
    one read of a fixed size (64 KiB, 1 MiB, 16 MiB), which returns its start only,
    nor by one read of the file's whole size: a read may return less than asked (a
    network file system, a signal, past 2 GiB on Linux), here 1 MiB at most."""
    big = (b'{"role": "user", "content": "Copy the map: '
           + b"north, east. " * ((17 << 20) // 13) + b'"}')
    short = [b'{"role": "assistant", "content": "Step %d."}' % step
             for step in range(3000)]
    source = b"".join(line + NEWLINE for line in [big, *short])
    (sessions / "quest-1.jsonl").write_bytes(source)
    handed = []
    monkeypatch.setattr(lesson, "publish_fork",
                        lambda folder, source_id, new_id, count, copy, durable:
                        handed.append((count, copy)))
    read = os.read
    monkeypatch.setattr(os, "read", lambda fd, size: read(fd, min(size, 1 << 20)))

    error = fork_or_fail(lesson, sessions, "quest-1", "what-if")

    if handed != [(3001, source)]:
        got = (f"raised {described(error)}" if error is not None and not handed
               else "handed it nothing" if not handed else "handed it " + "; ".join(
                   f"{count!r} message(s) in {len(copy):,} bytes"
                   + (", the source's first bytes" if copy and source.startswith(copy)
                      else "")
                   for count, copy in handed))
        pytest.fail(f"quest-1 holds 3,001 messages in {len(source):,} bytes, the "
                    f"first line alone {len(big):,}; a whole fork should hand "
                    "publish_fork all of them, byte for byte, and the count 3001, "
                    f"once. It {got}: a source read only in part makes a fork "
                    "shorter than asked that looks whole", pytrace=False)


# Lines another writer wrote: JSON as valid as append's, spelled otherwise (no spaces,
# wider ones, a carriage return and a tab between values, escapes for é, "/" and a
# candle's surrogate pair, the keys in another order, a space and a carriage return
# before the newline, as an editor of another system leaves them).
ELSEWHERE = [b'{"content":"caf\\u00e9 au lait","role":"user"}',
             b'{ "role" : "assistant",\r "content" : "\\u00e0 l\'auberge\\/ici." }',
             b'{"role":"user",\t"content":"\xc3\xa9t\xc3\xa9 \\ud83d\\udd6f"}',
             b'{"role": "assistant", "content": "Bien."} \r']


@pytest.mark.task("03.1")
@pytest.mark.task("03.2")
@pytest.mark.parametrize("upto", [None, 2])
def test_a_fork_copies_lines_another_writer_spelled_otherwise_byte_for_byte(
        lesson, sessions, monkeypatch, upto):
    """A log need not come from this lesson's append: another writer may space its
    JSON otherwise, escape é as \\u00e9, order the keys its own way. A fork copies each
    message's line as the source holds it, byte for byte, never the message written
    anew: a fork is a copy of the history, and whoever compares the two logs (or a
    hash of them) must find the same bytes."""
    source = b"".join(line + NEWLINE for line in ELSEWHERE)
    (sessions / "quest-1.jsonl").write_bytes(source)
    kept = len(ELSEWHERE) if upto is None else upto
    expected = b"".join(line + NEWLINE for line in ELSEWHERE[:kept])
    copies, counts, publish = [], [], lesson.publish_fork

    def publish_fork(folder, source_id, new_id, count, copy, durable):
        copies.append(copy)
        counts.append(count)
        return publish(folder, source_id, new_id, count, copy, durable)
    monkeypatch.setattr(lesson, "publish_fork", publish_fork)
    spelled = ("written by another writer (other spacing, a carriage return and a tab "
               "between values, \\u00e9 escapes, another key order, a space and a "
               "carriage return before the newline)")

    error = fork_or_fail(lesson, sessions, "quest-1", "what-if", upto=upto)

    if not copies:
        fail_in("03.1", f"quest-1 holds {len(ELSEWHERE)} valid lines {spelled}; "
                f"fork(..., upto={upto}) should hand publish_fork its first {kept}, "
                "and it " + ("returned" if error is None
                             else f"raised {type(error).__name__}: {error}"))
    if copies[0] != expected:
        fail_in("03.1", f"quest-1's lines were {spelled}; fork(..., upto={upto}) "
                f"should hand publish_fork its first {kept} line(s) as they are, "
                f"byte for byte: {expected!r}. It handed {copies[0]!r}: each message "
                "written anew, not copied as the source holds it")
    held = (sessions / "what-if.jsonl").read_bytes() if error is None else None
    if held != expected:
        fail_in("03.2", f"fork handed publish_fork the first {kept} line(s) of quest-1 "
                f"as they are, {len(expected)} bytes; publish_fork "
                + (f"raised {type(error).__name__}: {error}" if error is not None
                   else f"left a log of {len(held)} bytes that differ")
                + ": the fork's log holds exactly the copy it is handed")
    if counts[0] != kept:
        fail_in("03.1", f"fork(..., upto={upto}) copied {kept} message(s) of quest-1; "
                f"it should hand publish_fork that count, {kept}, and handed "
                f"{counts[0]!r}")
    meta = sessions / "what-if.meta.json"
    if not meta.is_file():
        fail_in("03.2", f"fork(..., upto={upto}) made the log what-if.jsonl, and no "
                "what-if.meta.json beside it (the fork's lineage, named after the new "
                "session); the folder holds "
                f"{sorted(path.name for path in sessions.iterdir())}")
    forked_at = json.loads(meta.read_bytes()).get("forked_at")
    if forked_at != kept:
        fail_in("03.2", f"fork handed publish_fork {kept} message(s) of quest-1, "
                f"{spelled}, and their count, {kept}; the meta file publish_fork wrote "
                f"says forked_at {forked_at!r}: the lineage records the count it is "
                "handed, not one counted again from the copy's bytes (a carriage "
                "return between a line's values is no line break)")


@pytest.mark.task("03.1")
@pytest.mark.parametrize("where, line, source", [
    ("in the middle", 2, M1 + b"\n" + TORN + b"\n" + M2 + b"\n"),
    ("last, ending in its newline", 3, M1 + b"\n" + M2 + b"\n" + TORN + b"\n"),
    ("after a blank line", 3, M1 + b"\n\n" + TORN + b"\n" + M2 + b"\n"),
    ("that holds spaces alone", 2, M1 + b"\n   \n" + M2 + b"\n"),
    ("that is a message followed by a form feed, which Python strips as a blank and "
     "JSON does not take for one", 2, M1 + b"\n" + M2 + b"\x0c\n" + M2 + b"\n"),
    ("that holds spaces alone, the source's only line", 1, b"   \n"),
    ("that holds a carriage return alone, which load() refuses too", 2,
     M1 + b"\n\r\n" + M2 + b"\n"),
    ("that is JSON but no message (it has no role)", 2,
     M1 + b"\n" + b'{"content": "no role"}' + b"\n" + M2 + b"\n"),
    ("that holds a marker, the log's own key, as later lessons write", 2,
     M1 + b"\n" + b'{"$marker": "undo", "skip": [0]}' + b"\n" + M2 + b"\n"),
    ("whose bytes are no UTF-8 (an e-acute in Latin-1)", 2,
     M1 + b"\n" + b'{"role": "user", "content": "caf\xe9"}' + b"\n" + M2 + b"\n"),
    ("first, after a byte-order mark, which the format does not allow", 1,
     b"\xef\xbb\xbf" + M1 + b"\n" + M2 + b"\n"),
    ("the first of two (the second holds spaces alone)", 2,
     M1 + b"\n" + TORN + b"\n" + M2 + b"\n   \n"),
    ("that holds NaN, which Python's json reads and JSON does not allow", 2,
     M1 + b"\n" + b'{"role": "user", "content": "x", "score": NaN}' + b"\n" + M2
     + b"\n"),
])
@pytest.mark.parametrize("upto", [None, 0, 1])
def test_a_fork_of_a_damaged_source_is_refused(
        lesson, sessions, monkeypatch, where, line, source, upto):
    """A line of the source that its writer finished (it ends in its newline) is no
    message: the log is damaged, not torn by a crash. A fork of it, of any length,
    is refused with InvalidMessage naming that line (counted from 1) and the source's
    file by its path, as load() refuses that log, and hands publish_fork nothing. A
    marker line, which later lessons write with the log's own key, is no message here
    either: passed over, it would leave the fork without what it says."""
    (sessions / "quest-1.jsonl").write_bytes(source)
    handed = []
    monkeypatch.setattr(lesson, "publish_fork",
                        lambda folder, source_id, new_id, count, copy, durable:
                        handed.append(count))

    error = fork_or_fail(lesson, sessions, "quest-1", "what-if", upto=upto)

    if not isinstance(error, lesson.InvalidMessage) or handed:
        did = (f"handed publish_fork {handed[0]} message(s)" if handed
               else "returned" if error is None
               else f"raised {type(error).__name__}: {error}")
        pytest.fail(f"quest-1 holds a line that is no message {where} (it ends in its "
                    f"newline: no crash tore it, the log is damaged); fork(..., "
                    f"upto={upto}) should be refused with InvalidMessage, handing "
                    f"publish_fork nothing, as load() refuses that log. It {did}",
                    pytrace=False)
    said = str(error).replace(str(sessions), "")    # the folder's name holds digits
    if not re.search(rf"(?<!\d){line}(?!\d)", said.replace("quest-1", "")):
        pytest.fail(f"the damaged line of quest-1 is line {line}; the InvalidMessage "
                    "refusing the fork should name it, so that whoever reads it knows "
                    f"where to look. It says: {error}", pytrace=False)
    damaged = source.split(b"\n")[line - 1]
    try:
        lesson.parse_line(damaged)
        reason = None
    except ValueError as refused:
        reason = str(refused)
    missing = [what for what, found in (
        ("the file the line is in, the source's quest-1.jsonl (not the fork's "
         "what-if.jsonl, which holds no line), as load() names it: a sessions folder "
         "holds many files", "quest-1.jsonl" in said),
        (f"the source's whole path ({sessions / 'quest-1.jsonl'}), as load() names "
         "it, not its file name alone: every sessions folder a server keeps may hold a "
         "quest-1.jsonl", "quest-1.jsonl" not in said or any(
             str(path) in str(error) for path in (
                 sessions / "quest-1.jsonl", (sessions / "quest-1.jsonl").resolve()))),
        (f"why the line is no message ({reason!r}, as parse_line says)",
         reason is None or reason in str(error)))
        if not found]
    if missing:
        pytest.fail(f"the damaged line of quest-1 is line {line}; the InvalidMessage "
                    "refusing the fork should also name "
                    + " and ".join(missing) + ", so that whoever reads it can find the "
                    f"line and mend it. It says: {error}", pytrace=False)


@pytest.mark.task("03.1")
def test_the_refusal_of_a_long_damaged_line_stays_short(lesson, sessions, monkeypatch):
    """A damaged line may be long: a map of a megabyte pasted whole, its line torn by
    a crash and another message appended after it. The InvalidMessage refusing a fork
    of that log names the file, the line and why in words a screen holds, never the
    line itself nor a few words of it: its bytes may be megabytes, and they are what
    the user said, which an error carries into every log that records it."""
    torn = b'{"role": "user", "content": "Copy the map: ' + b"north, east. " * 80_000
    (sessions / "quest-1.jsonl").write_bytes(M1 + NEWLINE + torn + NEWLINE + M2
                                             + NEWLINE)
    monkeypatch.setattr(lesson, "publish_fork",
                        lambda folder, source_id, new_id, count, copy, durable: None)

    error = fork_or_fail(lesson, sessions, "quest-1", "what-if")

    if not isinstance(error, lesson.InvalidMessage):
        pytest.fail("line 2 of quest-1 is a torn message of a megabyte, another "
                    "message after it; a fork of it should be refused with "
                    "InvalidMessage, and it " + ("returned" if error is None
                                                 else f"raised {described(error)}"),
                    pytrace=False)
    said = str(error).replace(str(sessions), "")
    if len(said) > 1000:
        pytest.fail(f"line 2 of quest-1 is a torn message of {len(torn):,} bytes; the "
                    "InvalidMessage refusing a fork of it should name the file, the "
                    f"line and why, in words a screen holds, and its text runs to "
                    f"{len(said):,} characters, beginning {said[:160]!r}: the line "
                    "itself is quoted. A refusal names where the damage is; what the "
                    "line holds, what the user said, stays in the log", pytrace=False)
    quoted = [words for words in ("Copy the map", "north, east") if words in said]
    if quoted:
        pytest.fail("line 2 of quest-1 is a torn message whose text begins 'Copy the "
                    "map: north, east.'; the InvalidMessage refusing a fork of it "
                    f"quotes {quoted} of it: {said[:300]!r}. A refusal names the "
                    "file, the line and why, and quotes no part of the line: even a "
                    "few words of it are what the user said, carried into every log "
                    "that records the error", pytrace=False)


@pytest.mark.task("03.1")
@pytest.mark.parametrize("upto", [1.5, 2.0, "2", True, False])
def test_an_upto_that_is_no_whole_number_is_refused(
        lesson, sessions, monkeypatch, upto):
    """upto is a number of messages, an int: 1.5, 2.0 (a float, even one that holds a
    whole number, as a list's slice refuses it), "2", True or False (which Python
    counts as 1 and 0) is refused, handing publish_fork nothing, rather than rounded,
    read or guessed; the refusal names it as it was given ('2' is text, and words
    that show it as 2 read as if a whole number were refused). A float or a text is
    of the wrong type, and Python's error of that kind is TypeError (a list's slice,
    range() and operator.index raise it for 1.5, 2.0 and '2' alike): a caller that
    catches TypeError for an argument of the wrong type must catch this one. A truth
    value is an int to Python, so refusing it is a judgement of its value: TypeError
    or ValueError."""
    (sessions / "quest-1.jsonl").write_bytes(M1 + b"\n" + M2 + b"\n")
    handed = []
    monkeypatch.setattr(lesson, "publish_fork",
                        lambda folder, source_id, new_id, count, copy, durable:
                        handed.append(count))

    error = fork_or_fail(lesson, sessions, "quest-1", "what-if", upto=upto)

    kinds = (TypeError, ValueError) if isinstance(upto, bool) else TypeError
    if not isinstance(error, kinds) or handed:
        did = (f"handed publish_fork {handed[0]!r} message(s)" if handed
               else "returned" if error is None
               else f"raised {type(error).__name__}: {error}")
        should = ("TypeError or ValueError (a truth value is an int to Python, "
                  "refused for what it means)" if isinstance(upto, bool)
                  else f"TypeError, Python's error for an argument of the wrong type "
                  f"(a {type(upto).__name__} where an int is due: a list's slice, "
                  "range() and operator.index raise TypeError for it too), so that "
                  "a caller catching TypeError for a bad argument catches it")
        pytest.fail(f"fork(..., upto={upto!r}) asks for a number of messages that is "
                    "no whole number (no int: a list's slice refuses it too); it "
                    f"should be refused with {should}, handing publish_fork nothing. "
                    f"It {did}", pytrace=False)
    expect_upto_named(lesson, sessions, error, upto,
                      "a number of messages that is no whole number (no int)")


@pytest.mark.task("03.1")
def test_an_upto_that_is_an_int_of_a_class_of_its_own_is_a_whole_number(
        lesson, sessions, monkeypatch):
    """Without task 03.2: upto may be an int of a class derived from int, such as a
    member of an IntEnum (a program's named steps, Step.ASKED = 1): it is a whole
    number, which a list's slice, range() and operator.index take as the int it is.
    fork hands publish_fork that many messages, as for a plain int. Only a truth value,
    Python's other int, is refused, for what it means."""
    from enum import IntEnum

    class Step(IntEnum):
        ASKED = 1
        ANSWERED = 2

    (sessions / "quest-1.jsonl").write_bytes(M1 + b"\n" + M2 + b"\n")
    handed = []
    monkeypatch.setattr(lesson, "publish_fork",
                        lambda folder, source_id, new_id, count, copy, durable:
                        handed.append((count, copy)))
    for upto, lines in ((Step.ASKED, M1 + b"\n"),
                        (Step.ANSWERED, M1 + b"\n" + M2 + b"\n")):
        handed.clear()
        error = fork_or_fail(lesson, sessions, "quest-1", f"step-{upto.value}",
                             upto=upto)
        if handed != [(upto.value, lines)]:
            did = (f"raised {described(error)}" if error is not None and not handed
                   else f"handed {handed}")
            pytest.fail(f"quest-1 holds 2 messages; fork(..., upto={upto!r}), a member "
                        f"of an IntEnum whose value is {upto.value} (an int, as "
                        "isinstance says, and a whole number a list's slice takes), "
                        f"should hand publish_fork {upto.value} message(s) and "
                        f"{lines!r}, once, as for upto={upto.value}. It {did}: an int "
                        "of a class of its own is still a whole number", pytrace=False)


@pytest.mark.task("03.2")
@pytest.mark.key
@pytest.mark.task("03.1")
def test_a_fork_starts_with_the_same_history(lesson, sessions, town, day_one):
    """A fork starts with the whole history of its parent: its first request carries
    every message of the original. fork returns the path of the new log, as a Path
    (its signature says so), which the caller can read or open at once."""
    path = lesson.fork(sessions, "quest-1", "what-if")
    assert isinstance(path, Path) and path == sessions / "what-if.jsonl", (
        "fork(sessions, 'quest-1', 'what-if') should return the new log's path, as a "
        f"Path, {sessions / 'what-if.jsonl'!r}; it returned {path!r}, which a caller "
        "that reads the fork it got back (its read_bytes, its open) cannot use")

    agent, model = play(lesson, sessions, "what-if", [say("The guard opens at dawn.")],
                        "What about the guard?", town)

    sent = model.requests[0]["messages"][:-1]
    if sent != day_one:
        pytest.fail(f"quest-1 holds {len(day_one)} messages; the first request of an "
                    "agent on its fork should carry all of them, in order, before the "
                    f"new question. It carried {which(sent, day_one)}", pytrace=False)
    start = agent.messages[:len(day_one)]
    if start != day_one:
        pytest.fail(f"the agent on the fork should start from quest-1's {len(day_one)} "
                    f"messages, in order; its first are {which(start, day_one)}",
                    pytrace=False)


@pytest.mark.task("03.1")
def test_a_fork_can_keep_only_the_first_k_messages(lesson, sessions, town, day_one):
    """fork(upto=k) keeps only the first k messages, for a 'what if' that branches
    earlier in the conversation."""
    lesson.fork(sessions, "quest-1", "ask-again", upto=1)

    with lesson.SessionLog(sessions, "ask-again") as log:
        history = log.load()
    if history != day_one[:1]:
        pytest.fail(f"quest-1 holds {len(day_one)} messages; its fork with upto=1 "
                    "should hold the first one only, #1 (the question to the elder). "
                    f"It holds {which(history, day_one)}", pytrace=False)


@pytest.mark.key
@pytest.mark.task("03.1")
def test_appending_to_either_session_leaves_the_other_byte_identical(
    lesson, sessions, day_one
):
    """After a fork, appending to either session leaves the other byte for byte as it
    was: the fork is a copy, never a link."""
    lesson.fork(sessions, "quest-1", "what-if")
    original = (sessions / "quest-1.jsonl").read_bytes()
    forked = (sessions / "what-if.jsonl").read_bytes()
    if forked != original:
        pytest.fail(f"right after a whole fork, the fork's log should hold the "
                    f"original's {len(original)} bytes, the same ones; it holds "
                    f"{len(forked)} bytes that differ", pytrace=False)

    with lesson.SessionLog(sessions, "what-if") as log:
        log.append({"role": "user", "content": "Only in the fork."})
    now = (sessions / "quest-1.jsonl").read_bytes()
    had, has = original.count(b"\n"), now.count(b"\n")
    if now != original:
        pytest.fail(f"after appending to the fork, the original's log changed (it had "
                    f"{had} lines, now {has}): the two sessions share their bytes, "
                    "so every turn of either lands in both", pytrace=False)

    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": "Only in the original."})
    if b"Only in the original" in (sessions / "what-if.jsonl").read_bytes():
        pytest.fail("after appending to the original, the fork's log holds that "
                    "message too: the two sessions share their bytes", pytrace=False)


@pytest.mark.task("03.1")
def test_a_later_fork_copies_the_history_as_it_is_then(lesson, sessions, day_one):
    """A fork copies its source as it is when the fork is made: after a turn appended
    to quest-1, a second fork of it holds that turn too, not the history the first
    fork saw."""
    lesson.fork(sessions, "quest-1", "what-if")
    turn = {"role": "user", "content": "And the guard?"}
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append(turn)

    lesson.fork(sessions, "quest-1", "what-if-2")

    held, grown = lesson.SessionLog(sessions, "what-if-2").load(), day_one + [turn]
    if held != grown:
        pytest.fail(f"quest-1 held {len(day_one)} messages at a first fork, then one "
                    f"more was appended; a second fork of it should hold all "
                    f"{len(grown)}, in order. It holds {which(held, grown)}: a fork "
                    "reads its source as it is now", pytrace=False)

    # Another program mends a line in place: the same size, other words, and it gives
    # the file its old modification time back (as cp -p, rsync or a restore do).
    path = sessions / "quest-1.jsonl"
    kept = path.stat()
    path.write_bytes(path.read_bytes().replace(b"And the guard?", b"And the smith?"))
    os.utime(path, ns=(kept.st_atime_ns, kept.st_mtime_ns))
    lesson.fork(sessions, "quest-1", "what-if-3")

    held = lesson.SessionLog(sessions, "what-if-3").load()
    mended = day_one + [{"role": "user", "content": "And the smith?"}]
    if held != mended:
        pytest.fail("after a second fork of quest-1, another program rewrote its last "
                    "message in place, 'And the guard?' to 'And the smith?' (the file "
                    "keeps its size and its modification time); a third fork should "
                    "hold the log as it is then, "
                    f"'And the smith?' last. It holds {which(held, mended)}: a fork "
                    "reads its source as it is now, never what an earlier fork read",
                    pytrace=False)


def outcome_of(lesson, *args, **options):
    """In words, what a call of fork did: 'returned', or the error it raised."""
    error = fork_or_fail(lesson, *args, **options)
    return "returned" if error is None else f"raised {described(error)}"


@pytest.mark.task("03.1")
def test_a_refusal_is_no_verdict_kept_once_its_reason_is_gone(lesson, sessions,
                                                               day_one, monkeypatch):
    """In one process, a fork refused for a reason that is then taken away goes ahead
    when asked again: the new id's log erased by hand (and its lineage with it), the
    source's log created, the source grown to the messages asked for. A fork reads the
    folder as it is now, never what an earlier fork found there."""
    publishing, handed = [], []     # what publish_fork raised; what it was handed
    publish = getattr(lesson, "publish_fork", None)
    if publish is not None:     # a later lesson's store may publish otherwise
        def publish_fork(*args):
            handed.append((args[2], args[3], bytes(args[4])))  # id, count, copy
            try:
                return publish(*args)
            except BaseException as error:
                publishing.append(described(error))
                raise
        monkeypatch.setattr(lesson, "publish_fork", publish_fork)

    def asked(*args, **options):
        publishing.clear()
        done = outcome_of(lesson, *args, **options)
        if publishing:
            fail_in("03.2", f"a fork of {args[1]!r} onto {args[2]!r} was handed to "
                    f"publish_fork, which raised {publishing[0]}, where the fork "
                    "should be made: a fork that returned, or failed, earlier in the "
                    "same process leaves nothing behind that stops the next one")
        return done
    done = asked(sessions, "quest-1", "what-if")
    if done != "returned":
        pytest.fail(f"a fork of quest-1 onto what-if, a free id, {done}",
                    pytrace=False)
    refused = fork_or_fail(lesson, sessions, "quest-1", "what-if")
    if not isinstance(refused, FileExistsError):
        pytest.fail("a second fork onto what-if, a session by then, should be refused "
                    "with SessionExists; it "
                    + ("returned" if refused is None
                       else f"raised {described(refused)}"), pytrace=False)
    del refused
    for name in ("what-if.jsonl", "what-if.meta.json"):
        (sessions / name).unlink(missing_ok=True)   # a person erases the session
    done = asked(sessions, "quest-1", "what-if")
    if done == "returned" and not (sessions / "what-if.jsonl").exists() and handed:
        fail_in("03.2", "a fork onto what-if, erased by hand after an earlier fork "
                "made it, was handed to publish_fork, which returned, but left no "
                "what-if.jsonl: a fork that returns exists")
    if done != "returned" or not (sessions / "what-if.jsonl").exists():
        pytest.fail("a fork onto what-if was refused, as it should be, while what-if "
                    "had a log; then a person erased what-if's log and meta file, and "
                    f"the same fork, asked again in the same process, {done}"
                    + ("" if done != "returned" else ", leaving no log") + ": only a "
                    "log makes a session, and that id is free again", pytrace=False)

    missing = fork_or_fail(lesson, sessions, "later", "later-fork")
    if not isinstance(missing, FileNotFoundError):
        pytest.fail("a fork of 'later', a session with no log, should be refused with "
                    "SessionNotFound; it " + ("returned" if missing is None
                                              else f"raised {described(missing)}"),
                    pytrace=False)
    del missing
    (sessions / "later.jsonl").write_bytes((sessions / "quest-1.jsonl").read_bytes())
    done = asked(sessions, "later", "later-fork")
    if done != "returned":
        pytest.fail("a fork of 'later' was refused, as it should be, while 'later' had "
                    "no log; then its log was written, and the same fork, asked again "
                    f"in the same process, {done}: the source is there now",
                    pytrace=False)

    more = len(day_one) + 1
    too_many = fork_or_fail(lesson, sessions, "quest-1", "longer", upto=more)
    if not isinstance(too_many, ValueError):
        pytest.fail(f"a fork of the first {more} messages of quest-1, which holds "
                    f"{len(day_one)}, should be refused with a ValueError; it "
                    + ("returned" if too_many is None
                       else f"raised {described(too_many)}"), pytrace=False)
    del too_many
    turn = {"role": "user", "content": "And the guard?"}
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append(turn)
    done = asked(sessions, "quest-1", "longer", upto=more)
    try:
        held = (lesson.SessionLog(sessions, "longer").load() if done == "returned"
                else [])
    except Exception as error:  # noqa: BLE001 - said in words below
        done, held = f"returned, but its log does not load ({described(error)})", []
    whole = ("longer", more, (sessions / "quest-1.jsonl").read_bytes())
    if held != day_one + [turn] and handed and handed[-1] == whole:
        fail_in("03.2", f"a fork of the first {more} messages of quest-1 was handed to "
                "publish_fork with its count and copy, which returned, but the "
                f"fork's log holds {which(held, day_one + [turn])}: the fork's log "
                "holds what publishing was handed")
    if held != day_one + [turn]:
        pytest.fail(f"a fork of the first {more} messages of quest-1 was refused, as "
                    f"it should be, while quest-1 held {len(day_one)}; then one more "
                    "was appended, and the same fork, asked again in the same process, "
                    f"{done}" + (f", holding {which(held, day_one + [turn])}"
                                 if done == "returned" else "")
                    + f": quest-1 holds {more} messages now", pytrace=False)


@pytest.mark.task("03.1")
@pytest.mark.parametrize("appended", ["a whole message", "half a message"])
def test_a_fork_holds_what_its_lineage_counts_while_another_writer_appends(
        lesson, sessions, day_one, monkeypatch, appended):
    """Another process appends to the source while the fork reads it (here, just as
    the fork judges the source's last message): a whole message, or the first half of
    one, its writer still at work. The fork may hold the source as it was before that
    append or, for a whole message, after it; either way it holds whole lines only,
    each as the source holds it, and exactly as many messages as its lineage counts."""
    import sys
    source = sessions / "quest-1.jsonl"
    original = source.read_bytes()
    last = original.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    extra = b'{"role": "user", "content": "And the guard?"}'
    extra = extra + b"\n" if appended == "a whole message" else extra[:25]
    forks = sys.modules[lesson.fork.__module__]
    real_parse = getattr(forks, "parse_line", None)
    if real_parse is None:
        pytest.skip("this fork judges its source's lines without parse_line")
    came, handed, publishing = [], [], []

    def parse_line(line, *args, **kwargs):
        raw = line.encode("utf-8") if isinstance(line, str) else bytes(line)
        if raw.rstrip(b"\r\n") == last and not came:
            came.append(line)
            with open(source, "ab") as other_writer:
                other_writer.write(extra)
        return real_parse(line, *args, **kwargs)
    monkeypatch.setattr(forks, "parse_line", parse_line)
    publish = getattr(lesson, "publish_fork", None)
    if publish is not None:     # a later lesson's store may publish otherwise
        def publish_fork(folder, source_id, new_id, count, copy, durable):
            handed.append((count, bytes(copy)))
            try:
                return publish(folder, source_id, new_id, count, copy, durable)
            except BaseException as error:
                publishing.append(described(error))
                raise
        monkeypatch.setattr(lesson, "publish_fork", publish_fork)
    done = outcome_of(lesson, sessions, "quest-1", "what-if")
    monkeypatch.undo()
    if not came:
        pytest.skip("this fork never judged the source's last message with parse_line")
    when = (f"another writer appended {appended} to quest-1 while the fork judged its "
            "last message")
    if publishing:
        fail_in("03.2", f"{when}; fork handed publish_fork a copy of the source, and "
                f"publish_fork raised {publishing[0]}, where the fork should be made")
    if done != "returned":
        pytest.fail(f"{when}, and the fork {done}: the source was whole as it read it, "
                    "and the fork should be made", pytrace=False)
    now = [line + b"\n" for line in source.read_bytes().split(b"\n")[:-1]]
    counts = (len(day_one), len(day_one) + (appended == "a whole message"))

    def wrong(counted, held):
        """What is wrong with a fork that counts `counted` and holds `held`, if
        anything: in words."""
        if not isinstance(counted, int) or held != b"".join(now[:counted]):
            lines = held.count(b"\n") + (not held.endswith(b"\n") and bool(held))
            return (f"the fork's lineage counts {counted!r} messages, and its log "
                    f"holds {lines} line(s), "
                    + ("the last of them torn" if not held.endswith(b"\n") and held
                       else "not the source's first lines as counted"))
        if counted not in counts:
            return (f"the fork's lineage counts {counted} messages, where the source "
                    f"held {len(day_one)} before that append")
        return None
    if handed:
        said = wrong(*handed[0])
        if said:
            pytest.fail(f"{when}; what fork handed publish_fork is wrong: "
                        f"{said.replace('the fork', 'the copy')}: a fork holds "
                        "exactly the messages it counts, whole, as its source held "
                        "them when it read them; read the source once and copy from "
                        "what you read", pytrace=False)
    try:
        counted = json.loads((sessions / "what-if.meta.json").read_bytes())["forked_at"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        counted = f"none ({described(error)})"
    held = (sessions / "what-if.jsonl").read_bytes() if (
        sessions / "what-if.jsonl").exists() else b""
    said = wrong(counted, held)
    if said and handed:
        fail_in("03.2", f"{when}; fork handed publish_fork a right copy and count, "
                f"but once it returned, {said}: the fork's files hold what publishing "
                "was handed")
    if said:
        pytest.fail(f"{when}; {said}: a fork holds exactly the messages its lineage "
                    "counts, whole, as its source held them when it read them; read "
                    "the source once and copy from what you read", pytrace=False)


@pytest.mark.task("03.2")
@pytest.mark.task("03.1")
def test_the_fork_is_a_file_of_its_own(lesson, sessions, day_one):
    """The fork's log is a file of its own, neither a symbolic nor a hard link to the
    original."""
    lesson.fork(sessions, "quest-1", "what-if")

    fork_path = sessions / "what-if.jsonl"
    assert not fork_path.is_symlink(), (
        f"what-if.jsonl is a symbolic link (to {os.readlink(fork_path)}), not a file "
        "of its own")
    names = (os.stat(fork_path).st_nlink, os.stat(sessions / "quest-1.jsonl").st_nlink)
    assert names == (1, 1), (
        f"the fork's log has {names[0]} name(s) and the original's {names[1]}: a hard "
        "link, one file under two names, where two files of their own were expected")


@pytest.mark.key
@pytest.mark.task("03.1")
def test_forking_onto_an_existing_session_is_refused_and_overwrites_nothing(
    lesson, sessions, town, day_one, monkeypatch
):
    """Forking onto an id that already has a log is refused and leaves every file as it
    was: a fork never overwrites a session."""
    play(lesson, sessions, "other", [say("Hello.")], "Hi.", town)
    before = snapshot(sessions)
    handed = handed_to_publishing(lesson, monkeypatch)

    with raises(lesson.SessionExists, "forking onto 'other', which already has a log, "
                "was allowed: its session would be overwritten") as refused:
        lesson.fork(sessions, "quest-1", "other")
    said = str(refused.value).replace(str(sessions), "")
    if "other" not in said:
        fail_in("03.1", "a whole fork of quest-1 onto 'other', a session with a log, "
                "was refused with SessionExists, as it should be, but its text does "
                f"not name the id it refused, 'other': {refused.value}. An error says "
                "what is wrong, so that whoever reads it knows which session is taken")
    if handed:
        fail_in("03.1", "a whole fork of quest-1 onto 'other', a session with a log, "
                "was handed to publish_fork before it was refused: a taken id must be "
                "refused before anything is handed to publishing")

    expect_unchanged(sessions, before,
                     "a refused fork must leave every file as it was, and create none")

    with raises(lesson.SessionExists, "forking quest-1 onto its own id, a session with "
                "a log, was allowed: its session would be overwritten"):
        lesson.fork(sessions, "quest-1", "quest-1")
    expect_unchanged(sessions, before, "a fork of quest-1 onto its own id was refused, "
                     "and it changed or created files: a refused fork leaves every "
                     "file as it was")


@pytest.mark.task("03.1")
@pytest.mark.parametrize("kept", [2, 0])
@pytest.mark.parametrize("upto", [None, 0, 1, 4, 99, -1])
def test_forking_onto_an_existing_fork_leaves_its_lineage_as_it_was(
    lesson, sessions, day_one, monkeypatch, upto, kept
):
    """what-if is a fork of quest-1 already, with its meta file: of its first 2
    messages, or of none (an empty log, a session all the same). A second fork onto
    what-if, of any length (a whole one too), is refused before anything is handed to
    publish_fork, and what-if's log and lineage stay as they were, byte for byte: a
    refused fork takes nothing away either. With an upto quest-1 cannot give as well,
    either refusal may be reported: nothing is written either way."""
    lines = (sessions / "quest-1.jsonl").read_bytes().splitlines(keepends=True)
    (sessions / "what-if.jsonl").write_bytes(b"".join(lines[:kept]))
    (sessions / "what-if.meta.json").write_text(json.dumps(
        {"format": 1, "id": "what-if", "parent": "quest-1", "forked_at": kept,
         "created": "2026-01-01T00:00:00+00:00"}, indent=1), encoding="utf-8")
    for name in ("what-if.jsonl", "what-if.meta.json"):
        (sessions / name).chmod(0o600)
    before = snapshot(sessions)
    handed = handed_to_publishing(lesson, monkeypatch)

    error = fork_or_fail(lesson, sessions, "quest-1", "what-if", upto=upto)
    asked = "a whole fork" if upto is None else f"a fork of {upto} message(s)"
    valid = upto is None or 0 <= upto <= len(day_one)
    refusals = (lesson.SessionExists,) if valid else (lesson.SessionExists,
                                                      ValueError)
    taken = (f"a fork of {kept} message(s) of quest-1 that already has its log "
             f"({'empty' if not kept else f'{kept} lines'}) and its lineage")
    if handed:
        fail_in("03.1", f"{asked} of quest-1 onto 'what-if', {taken}, was handed to "
                "publish_fork: a taken id must be refused before anything is handed to "
                "publishing, which may replace a file of that session before it finds "
                "the log there (a log with no message makes a session all the same)")
    if not isinstance(error, refusals):
        fail_in("03.1", f"{asked} of quest-1 onto 'what-if', {taken}, should be "
                "refused with "
                + " or ".join(kind.__name__ for kind in refusals) + "; it "
                + ("returned" if error is None
                   else f"raised {type(error).__name__}: {error}"))

    after = snapshot(sessions)
    changed = sorted(name for name in before.keys() | after.keys()
                     if before.get(name) != after.get(name))
    if changed:
        fail_in("03.1", f"what-if is {taken}; "
                f"{asked} onto it was refused, as it should be, but left these files "
                f"changed, created or gone: {changed}; a refused fork must leave every "
                "file as it was, what-if.meta.json byte for byte")


@pytest.mark.task("03.1")
@pytest.mark.parametrize("case", ["an upto past the end", "an upto of 1.5",
                                  "a source with no log", "a damaged source"])
def test_a_refused_fork_leaves_a_meta_file_with_no_log_as_it_was(
        lesson, sessions, day_one, monkeypatch, case):
    """what-if holds a meta file and no log: no session. A fork onto what-if that fork
    itself refuses (an upto the source cannot give, a source with no log, a damaged
    source) leaves the folder exactly as it was, that meta file too: only a fork that
    goes ahead replaces it."""
    stale = sessions / "what-if.meta.json"
    stale.write_text(json.dumps(
        {"format": 1, "id": "what-if", "parent": "other", "forked_at": 1,
         "created": "2026-01-01T00:00:00+00:00"}, indent=1), encoding="utf-8")
    stale.chmod(0o600)
    source = "quest-1"
    if case == "a source with no log":
        source = "no-such-quest"
    elif case == "a damaged source":
        source = "damaged"
        (sessions / "damaged.jsonl").write_bytes(M1 + b"\n" + TORN + b"\n" + M2 + b"\n")
    upto = {"an upto past the end": len(day_one) + 1, "an upto of 1.5": 1.5}.get(case)
    before = snapshot(sessions)
    handed = handed_to_publishing(lesson, monkeypatch)

    error = fork_or_fail(lesson, sessions, source, "what-if", upto=upto)

    if error is None or handed:
        fail_in("03.1", f"a fork of {case} onto what-if should be refused, handing "
                "publish_fork nothing; it " + ("was handed to publish_fork" if handed
                                               else "returned"))
    after = snapshot(sessions)
    changed = sorted(name for name in before.keys() | after.keys()
                     if before.get(name) != after.get(name))
    if changed:
        fail_in("03.1", f"what-if held only a meta file (no log, no session); a "
                f"fork of {case} onto it was refused "
                f"({type(error).__name__}), but left these files changed, created or "
                "gone: "
                f"{changed}. A refused fork leaves the folder exactly as it was: only "
                "a fork that goes ahead may replace that meta file")


@pytest.mark.task("03.2")
@pytest.mark.task("03.1")
@pytest.mark.parametrize(("parent", "upto"), [("other", 2), ("quest-1", 2),
                                              ("quest-1", 0)])
def test_a_fork_onto_an_id_with_a_meta_file_and_no_log_records_its_own_lineage(
        lesson, sessions, town, day_one, monkeypatch, parent, upto):
    """what-if holds a meta file and no log, as a killed fork leaves: what-if is no
    session (an id without a log loads as no messages). The meta file names another
    parent, or quest-1 itself (a whole fork of it, killed before its log got its
    name). A fork of quest-1's first 2 messages onto what-if succeeds, and so does a
    fork of none of them (an empty fork is a session too), and its meta file records
    its own lineage: quest-1, the messages it copied and when it was made, not the
    lineage that was there, nor that one brought up to date. The old lineage is gone,
    not kept aside: the folder holds the fork's two files and what it held before,
    nothing else."""
    play(lesson, sessions, "other", [say("Hello.")], "Hi.", town)
    left = {"format": 1, "id": "what-if", "parent": parent, "forked_at": 4,
            "created": "2026-01-01T00:00:00+00:00"}
    meta = sessions / "what-if.meta.json"
    meta.write_text(json.dumps(left, indent=1), encoding="utf-8")
    meta.chmod(0o600)

    handed = handed_to_publishing(lesson, monkeypatch)
    began = datetime.now(timezone.utc).replace(microsecond=0)
    error = fork_or_fail(lesson, sessions, "quest-1", "what-if", upto=upto)
    ended = datetime.now(timezone.utc)

    said = (f"what-if held only a meta file naming {parent!r} (no log: no session), "
            "and a "
            f"fork of quest-1's first {upto} messages onto what-if raised "
            f"{type(error).__name__}: {error}; a meta file alone must not take the id "
            "for good")
    if error is not None and getattr(lesson, "publish_fork", None) is not None:
        fail_in("03.2" if handed else "03.1", said)
    assert error is None, said
    whose = "03.2" if handed == [("what-if", upto)] else None
    expect_whole_fork(lesson, sessions, "what-if", "quest-1", day_one[:upto],
                      f"onto what-if, which held only a meta file naming {parent!r} "
                      "and 4 messages", task=whose)
    lineage = json.loads(meta.read_bytes())
    try:
        created = datetime.fromisoformat(lineage.get("created"))
    except (TypeError, ValueError):     # not text, or not an ISO 8601 time
        created = None
    # What is wrong, said as itself: a lineage kept from before, or a time without its
    # zone, are different mistakes in different places of the code
    if lineage.get("created") == left["created"]:
        wrong = ("what a killed fork left is replaced, never brought up to date nor "
                 "kept")
    elif lineage.get("id") != "what-if":
        wrong = ("its 'id' should be the fork's own, 'what-if'"
                 + (", and it has none" if "id" not in lineage else ""))
    elif created is None:
        wrong = "'created' should be ISO 8601 text, as 2025-01-31T12:00:00+00:00"
    elif created.tzinfo is None:
        wrong = ("its 'created' has no time zone, and a time without one means "
                 "another moment on every machine that reads it: ISO 8601 text with "
                 "its time zone, as 2025-01-31T12:00:00+00:00")
    elif not began <= created <= ended:
        wrong = "its 'created' is not the time this fork was made"
    else:
        wrong = ""
    if wrong:
        said = (f"what-if held only a meta file naming {parent!r}, created "
                f"{left['created']}; the fork of quest-1 onto it, made between "
                f"{began.isoformat()} and {ended.isoformat()}, should record a lineage "
                f"of its own, its id 'what-if' and when it was made, and it holds "
                f"{lineage}: {wrong}")
        fail_in(whose, said) if whose else pytest.fail(said, pytrace=False)
    left = sorted(p.name for p in sessions.iterdir())
    wanted = sorted(["other.jsonl", "quest-1.jsonl", "what-if.jsonl", meta.name])
    if left != wanted:
        said = (f"what-if held only a meta file naming {parent!r}; the fork of quest-1 "
                f"onto it returned, and the folder holds {left}, where {wanted} was "
                "expected: a fork that returns leaves its two files and nothing else, "
                "the lineage that was there replaced, not kept under another name")
        fail_in(whose, said) if whose else pytest.fail(said, pytrace=False)


@pytest.mark.key
@pytest.mark.task("03.1")
def test_forking_from_a_missing_session_is_refused_and_creates_nothing(
    lesson, sessions
):
    """Forking from an id that has no log is refused and creates no file, whatever
    number of messages it asks for, onto whatever id (its own too), and from a
    sessions folder that does not exist as well; the refusal names the session it
    could not find."""
    nowhere = sessions / "nowhere"
    for folder, options, new_id, why in (
            (sessions, {}, "what-if", "forking a session that has no log was allowed: "
             "a fork of nothing is a mistake to report, not an empty session"),
            (sessions, {"upto": 0}, "what-if", "a fork of the first 0 messages of "
             "'no-such-quest', which has no log, was allowed: a fork of nothing is a "
             "mistake to report, whatever number of messages it asks for, 0 too"),
            (nowhere, {}, "what-if", "forking from a folder that does not exist was "
             "allowed: a fork of nothing is a mistake to report"),
            (sessions, {}, "no-such-quest", "a fork of 'no-such-quest', which has no "
             "log, onto its own id returned as if made: a fork of nothing is a "
             "mistake to report, onto whatever id it asks for")):
        with raises(lesson.SessionNotFound, why) as refused:
            lesson.fork(folder, "no-such-quest", new_id, **options)
        said = str(refused.value).replace(str(sessions), "")
        if "no-such-quest" not in said:
            where = "in" if folder == sessions else "from a missing folder,"
            fail_in("03.1", f"a fork of 'no-such-quest' {where} "
                    f"{folder.name}, with {options or 'no upto'}, was refused with "
                    "SessionNotFound, as it should be, but its text does not name the "
                    f"session it could not find, 'no-such-quest': {refused.value}")

    made = sorted(p.name for p in sessions.iterdir())
    assert made == [], (f"a refused fork must not create any file or folder; the "
                        f"sessions folder now holds {made}")


@pytest.mark.task("03.1")
@pytest.mark.parametrize("failure", ["ENOENT", "ENOSPC", "EACCES"])
def test_an_error_while_the_fork_is_published_reaches_the_caller_as_it_came(
        lesson, sessions, day_one, monkeypatch, failure):
    """Without task 03.2: publishing fails with an error of the disk's (ENOENT: the
    sessions folder removed meanwhile by a cleaner; ENOSPC: the disk full; EACCES: the
    folder made read-only). fork did not decide that error: it reaches the caller as
    it came, the very exception, never a refusal in fork's words (a FileNotFoundError
    told as SessionNotFound says the source is missing, and its user believes it
    gone)."""
    came = OSError(getattr(errno, failure), os.strerror(getattr(errno, failure)),
                   str(sessions / "what-if.jsonl"))
    if failure == "ENOENT":
        came = FileNotFoundError(*came.args)
    elif failure == "EACCES":
        came = PermissionError(*came.args)

    def publish_fork(folder, source_id, new_id, count, copy, durable):
        raise came
    monkeypatch.setattr(lesson, "publish_fork", publish_fork)

    error = fork_or_fail(lesson, sessions, "quest-1", "what-if")

    if error is not came:
        pytest.fail(f"publish_fork failed with {described(came)} (the sessions "
                    "folder removed, the disk full or made read-only meanwhile); fork "
                    "should let that error reach its caller as it came, and it "
                    + ("returned" if error is None else f"raised {described(error)}")
                    + ": an error fork did not decide is no refusal of its own (a "
                    "SessionNotFound tells its user the source is gone, where quest-1 "
                    "is there)", pytrace=False)


@pytest.mark.task("03.1")
def test_forking_more_messages_than_exist_is_refused(lesson, sessions, day_one):
    """Asking for more messages than the parent holds is refused rather than silently
    copying fewer."""
    before = snapshot(sessions)

    with raises(ValueError,
                f"upto={len(day_one) + 1} asks for more messages than quest-1 holds "
                f"({len(day_one)}), and the fork went ahead, copying fewer than "
                "asked") as refused:
        lesson.fork(sessions, "quest-1", "what-if", upto=len(day_one) + 1)

    expect_unchanged(sessions, before, "a refused fork must not create any file")
    expect_upto_named(lesson, sessions, refused.value, len(day_one) + 1,
                      f"more messages than quest-1 holds ({len(day_one)})")
    expect_holds_named(sessions, refused.value, len(day_one) + 1, len(day_one))


@pytest.mark.task("03.1")
@pytest.mark.parametrize("upto", [1, 3])
def test_more_messages_than_an_empty_session_holds_are_refused(lesson, sessions, upto):
    """An empty log is a session of no messages (a fork of none leaves one): a fork
    of its first `upto` messages asks for more than it holds, and is refused as any
    such fork is, with nothing written, not made empty."""
    (sessions / "quest-1.jsonl").write_bytes(b"")
    before = snapshot(sessions)

    with raises(ValueError,
                f"quest-1's log is empty, a session of no messages; fork(..., "
                f"upto={upto}) asks for more than it holds, and the fork went ahead, "
                "an empty fork where none was asked for") as refused:
        lesson.fork(sessions, "quest-1", "what-if", upto=upto)

    expect_unchanged(sessions, before, "a refused fork must not create any file")
    expect_holds_named(sessions, refused.value, upto, 0, "no byte")


def expect_holds_named(sessions, error, upto, held, what=""):
    """Fail in 03.1 unless the text of `error`, refusing an `upto` past the end of
    quest-1, names how many messages quest-1 holds, `held` (its log holding `what`),
    and the session it was asked of."""
    if "quest-1" not in str(error).replace(str(sessions), ""):
        fail_in("03.1", f"quest-1 holds {held} message(s); fork(..., upto={upto}) was "
                "refused, as it should be, but its text does not name the session it "
                f"was asked of, quest-1: {error}. A refusal says what it refused: a "
                "server forking many sessions logs it, and whoever reads it must see "
                "which session holds fewer messages than asked")
    said = str(error).replace(str(sessions), "").replace("quest-1", "")
    if upto != held and re.search(
            rf"\b(?:holds?|has|have|contains?)\s+(?:only\s+|just\s+)?{upto}(?!\d)",
            said):
        fail_in("03.1", f"quest-1 holds {held} message(s); fork(..., upto={upto}) was "
                "refused, as it should be, but its text says the source holds "
                f"{upto}, the number asked for: {error}. The two numbers are the "
                f"other way round: {upto} was asked, {held} is what quest-1 holds, "
                "and whoever reads it would ask again for as many as it says")
    if not re.search(rf"(?<![\d-]){held}(?!\d)", said):
        fail_in("03.1", f"quest-1 holds {held} message(s)"
                + (f" (its log holds {what})" if what else "")
                + f"; fork(..., upto={upto}) was refused, as it should be, but its "
                "text does not say how many messages quest-1 holds, the most a fork "
                f"of it can keep ({held}; its lines may be more: blank, torn or "
                f"unfinished): {error}")


def expect_upto_named(lesson, sessions, error, upto, what):
    """Fail in 03.1 unless `error`, refusing `upto`, is of no kind that says something
    else (a damaged log, an id no session may have), and its text names that number as
    it was given (text as text: '2', never 2)."""
    others = tuple(getattr(lesson, name) for name in ("InvalidMessage",
                                                       "InvalidSessionId")
                   if isinstance(getattr(lesson, name, None), type))
    if isinstance(error, others):
        fail_in("03.1", f"fork(..., upto={upto!r}) asks for {what}, and was refused "
                f"with {type(error).__name__}: {error}. That error's kind says "
                "something else (InvalidMessage: a line of the log is no message; "
                "InvalidSessionId: an id no session may have), and a caller that "
                "catches it to tell its user so would say it of a number of messages "
                "asked for. Refuse the number as what it is: a TypeError or a "
                "ValueError of its own")
    said = str(error).replace(str(sessions), "")    # the folder's name holds digits
    if not re.search(rf"(?<![\d-]){re.escape(str(upto))}(?!\d)", said):
        fail_in("03.1", f"fork(..., upto={upto!r}) asks for {what}, and was refused "
                f"with {type(error).__name__}, as it should be, but its text does not "
                f"name the number it refused, {upto}: {error}. An error says what is "
                "wrong: whoever reads it must see which number could not be forked")
    if isinstance(upto, str) and not any(
            shown in said for shown in (repr(upto), f'"{upto}"', "str")):
        fail_in("03.1", f"fork(..., upto={upto!r}) asks for {what}: text, not a "
                f"number. It was refused with {type(error).__name__}, as it should "
                f"be, but its words show it as {upto}, as if the whole number {upto} "
                f"had been refused: {error}. Show what was given as it was given "
                f"({upto!r}), or say it is text (a str), so that whoever reads it sees "
                "what is wrong with it")


@pytest.mark.task("03.1")
def test_fork_checks_both_session_ids(lesson, sessions, day_one):
    """Both the parent's and the new session's ids are checked like any session id, so a
    fork cannot reach outside the sessions folder. An id is taken as it was given: one
    with a blank before or after it is refused, never trimmed into another session's
    id (quest-1), which the caller did not name. Each refusal names the id it refused
    as it was given (quoted, as check_session_id shows it): a fork is handed two ids,
    and whoever reads the error must see which one is wrong, and how."""
    with raises(lesson.InvalidSessionId, "fork accepted the new id '../escaped'"):
        lesson.fork(sessions, "quest-1", "../escaped")
    with raises(lesson.InvalidSessionId, "fork accepted the parent id '../quest-1'"):
        lesson.fork(sessions, "../quest-1", "what-if")
    assert not (sessions.parent / "escaped.jsonl").exists(), (
        "a fork onto '../escaped' was refused, yet escaped.jsonl was written outside "
        "the sessions folder")
    # Ids no session may have though they hold no '/': every one is refused, either
    # side, as check_session_id refuses it, and nothing is written.
    (sessions / "quest 1.jsonl").write_bytes((sessions / "quest-1.jsonl").read_bytes())
    before = snapshot(sessions)
    for bad in ["", "quest 1", "quest-1 ", " quest-1", ".hidden", "-quest", "CON",
                "what\nif", "x" * 129]:
        for source_id, new_id, side in [("quest-1", bad, "new"),
                                        (bad, "what-if", "parent")]:
            error = fork_or_fail(lesson, sessions, source_id, new_id)
            if not isinstance(error, lesson.InvalidSessionId):
                did = ("returned" if error is None
                       else f"raised {type(error).__name__}: {error}")
                pytest.fail(f"fork(sessions, {source_id!r}, {new_id!r}) should refuse "
                            f"the {side} id {bad!r} with InvalidSessionId, as "
                            "check_session_id refuses it (an id is a file name: no "
                            "empty one, no space, not even before or after it, for an "
                            "id is never trimmed into another, no dot or dash first, "
                            "no name Windows keeps for a device, 128 characters at "
                            f"most); it {did}", pytrace=False)
            said = str(error)
            if not any(shown in said for shown in (
                    repr(bad), json.dumps(bad), f"'{bad}'", f'"{bad}"')):
                pytest.fail(f"fork(sessions, {source_id!r}, {new_id!r}) was refused "
                            "with InvalidSessionId, as it should be, but its words do "
                            f"not name the {side} id it refused, {bad!r}, as it was "
                            f"given: {said}. A fork is handed two ids; whoever reads "
                            "the refusal must see which one is wrong, and how it was "
                            "written (a blank at its end, a dot first)", pytrace=False)
    expect_unchanged(sessions, before, "a fork refused for an id no session may have "
                     "must leave every file as it was, and create none")


@pytest.mark.task("03.1")
@pytest.mark.key
@pytest.mark.task("03.2")
def test_the_meta_file_records_where_the_fork_came_from(lesson, sessions, day_one,
                                                       monkeypatch):
    """<id>.meta.json records the parent session and how many messages were copied
    (forked_at), the fork's lineage."""
    handed = handed_to_publishing(lesson, monkeypatch)
    os.utime(sessions / "quest-1.jsonl", (86_400, 86_400))   # the source: long ago
    with local_clock_ahead_of_utc():
        began = datetime.now(timezone.utc).replace(microsecond=0)
        lesson.fork(sessions, "quest-1", "what-if", upto=3)
        ended = datetime.now(timezone.utc)
    if handed and handed[0] != ("what-if", 3):
        fail_in("03.1", "fork(sessions, 'quest-1', 'what-if', upto=3) should hand "
                "publish_fork the new id 'what-if' and the count 3; it handed "
                f"{handed[0][0]!r} and {handed[0][1]!r}")

    meta = json.loads((sessions / "what-if.meta.json").read_text(encoding="utf-8"))
    created = meta.get("created")
    try:
        zone = datetime.fromisoformat(created).tzinfo
    except (TypeError, ValueError):     # not text, or not an ISO 8601 time
        zone = None
    if zone is not None and not re.fullmatch(
            r"\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:\d\d)", created):
        # Python reads more than ISO 8601's extended format: a space for the T, say,
        # or an offset without its colon (+0545) after a date and time with theirs,
        # which RFC 3339 readers refuse
        zone = None
    wrong = [said for said, right in (
        ("the meta file should record format 1 and the fork's own id, 'what-if'",
         meta.get("format") == 1 and meta.get("id") == "what-if"),
        ("the meta file should name the parent session, 'quest-1'",
         meta.get("parent") == "quest-1"),
        ("forked_at is the number of messages copied (3)", meta.get("forked_at") == 3),
        (f"created should be an ISO 8601 time, as text, with its time zone (date, "
         f"T, time, offset, each with its separators, as 2025-01-31T12:00:00+00:00 "
         f"or +05:45): {created!r}",
         zone is not None),
        (f"created should be when the fork was made, between {began.isoformat()} and "
         f"{ended.isoformat()} (the source was last written in 1970, and the local "
         f"clock runs 5 h 45 min ahead of UTC): {created!r}",
         zone is None or began <= datetime.fromisoformat(created) <= ended))
        if not right]
    if wrong and handed:
        fail_in("03.2", f"fork handed publish_fork the fork 'what-if' of 3 messages of "
                f"'quest-1', as it should; the meta file publish_fork wrote is wrong: "
                f"{'; '.join(wrong)}. It holds {meta}")
    assert not wrong, f"{'; '.join(wrong)}. The meta file holds {meta}"


@pytest.mark.task("03.2")
def test_each_fork_records_the_time_it_was_made(lesson, sessions):
    """created is when this fork was made: two forks a second apart record two times,
    each within its own fork's second, not a time taken once and used again."""
    def publish(new_id):
        began = datetime.now(timezone.utc).replace(microsecond=0)
        lesson.publish_fork(sessions, "quest-1", new_id, 1, M1 + b"\n", False)
        ended = datetime.now(timezone.utc)
        try:
            meta = json.loads((sessions / f"{new_id}.meta.json").read_bytes())
            created = datetime.fromisoformat(meta["created"])
        except (OSError, ValueError, TypeError, KeyError) as error:
            fail_in("03.2", f"publish_fork returned, so fork {new_id!r} should have "
                    "a meta file recording, as created, when it was made (ISO 8601 "
                    f"text); reading it: {type(error).__name__}: {error}")
        return began, meta["created"], created, ended

    first = publish("what-if")
    wait_past(first[-1])    # the next fork in a later second of the clock
    began, said, created, ended = publish("what-else")
    if created.tzinfo is None or not began <= created <= ended:
        fail_in("03.2", "publish_fork made fork 'what-else' between "
                f"{began.isoformat()} and {ended.isoformat()}, but its meta file says "
                f"it was created {said!r}; the fork published a second earlier, "
                f"'what-if', says {first[1]!r}. Each fork records the time it is made: "
                "a time taken once (when the module was loaded, say, or by an earlier "
                "fork) and written again is the wrong one")


@pytest.mark.task("03.1")
@pytest.mark.task("03.2")
def test_a_fork_touches_no_file_but_its_own(lesson, sessions, day_one):
    """Files whose names begin as the fork's do: another session, what-if-2, and its
    lineage; the temporary file of another fork, onto what-if-2, still being written;
    a copy a user keeps, what-if.jsonl.bak. A fork onto what-if leaves every one of
    them as it was: its two names are its own, and nothing else in the folder is."""
    log = (sessions / "quest-1.jsonl").read_bytes()
    for name, data in (("what-if-2.jsonl", log), ("what-if.jsonl.bak", log),
                       ("what-if-2.meta.json", b'{"format": 1, "id": "what-if-2"}'),
                       (".what-if-2.jsonl.k3j2h1.tmp", log[:40])):
        (sessions / name).write_bytes(data)
        (sessions / name).chmod(0o600)
    before = snapshot(sessions)

    error = fork_or_fail(lesson, sessions, "quest-1", "what-if")

    assert error is None, (f"a fork of quest-1 onto what-if, a free id, raised "
                           f"{described(error)}")
    after = snapshot(sessions)
    changed = sorted(name for name in before.keys() | after.keys()
                     if before.get(name) != after.get(name)
                     and name not in ("what-if.jsonl", "what-if.meta.json"))
    if changed:
        pytest.fail(f"the folder held {sorted(before)}; a fork onto what-if should "
                    "add what-if.jsonl and what-if.meta.json and leave every other "
                    "file as it was, but these were changed, created or gone: "
                    f"{changed}. A name that begins as the fork's is someone else's "
                    "file: another "
                    "session, another fork being written, a user's copy",
                    pytrace=False)


def leads_to(path, target):
    """Whether `path` (whatever a caller passed to open) reaches the file `target`."""
    try:
        return os.path.realpath(path) == os.path.realpath(target)
    except (TypeError, ValueError, OSError):
        return False


def another_file_system(folder):
    """A folder this test may write in, on another file system than `folder` (a tmpfs
    such as /dev/shm), or None if there is none."""
    for place in ("/dev/shm", "/run/shm", "/var/tmp", "/tmp"):
        try:
            if os.stat(place).st_dev != os.stat(folder).st_dev and os.access(
                    place, os.W_OK | os.X_OK):
                return place
        except OSError:
            continue
    return None


@pytest.mark.task("03.2")
@pytest.mark.parametrize("where", ["on another file system", "gone"])
def test_a_fork_makes_its_files_in_its_own_folder_whatever_tmpdir_says(
        lesson, sessions, day_one, tmp_path, monkeypatch, where):
    """The system's temporary folder (TMPDIR) is on another file system than the
    sessions folder (a tmpfs /tmp, as many systems have), or names a folder that is
    gone. A fork is made all the same, whole: its files are written where they will
    be named, in the sessions folder, for only there can a rename or a link give a
    file its name whole (from another file system it fails, EXDEV, and a copy across
    is written in place, where a reader or a kill finds half of it)."""
    import shutil
    import tempfile
    if where == "gone":
        elsewhere = str(tmp_path / "gone")
    else:
        place = another_file_system(sessions)
        if place is None:   # none here (a sandbox): never skipped, played on this one
            place, where = str(tmp_path), "outside the sessions folder"
        elsewhere = tempfile.mkdtemp(dir=place)
    monkeypatch.setenv("TMPDIR", elsewhere)
    monkeypatch.setattr(tempfile, "tempdir", elsewhere)
    try:
        error = fork_or_fail(lesson, sessions, "quest-1", "what-if")
        left = sorted(os.listdir(elsewhere)) if os.path.isdir(elsewhere) else []
    finally:
        if where != "gone":
            shutil.rmtree(elsewhere, ignore_errors=True)
    said = (f"TMPDIR named a folder {where} ({elsewhere}); a fork of quest-1 onto "
            "what-if ")
    if error is not None:
        fail_in("03.2", said + f"raised {described(error)}: a fork writes its files "
                "in the sessions folder, where they are named (a rename or a link "
                "reaches no other file system), never where TMPDIR says")
    if left:
        fail_in("03.2", said + f"was made, but left {left} there: a fork's files, "
                "temporary ones too, are written in the sessions folder, never "
                "where TMPDIR says")
    expect_whole_fork(lesson, sessions, "what-if", "quest-1", day_one,
                      f"with TMPDIR naming a folder {where}", task="03.2")


@pytest.mark.task("03.2")
def test_a_fork_leaves_no_temporary_file(lesson, sessions, day_one):
    """A fork that returns leaves its two files and nothing else: no temporary file,
    no second name of the log."""
    lesson.fork(sessions, "quest-1", "what-if")

    left = sorted(p.name for p in sessions.iterdir())
    assert left == ["quest-1.jsonl", "what-if.jsonl", "what-if.meta.json"], (
        f"after a fork that returned, the folder holds {left}: a fork leaves its log "
        "and its meta file, and nothing else behind")


def open_in(folder):
    """The files this process holds open inside `folder`, by the path each was opened
    at (a name since removed shows as "... (deleted)")."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue    # the descriptor of the listing itself, closed by now
        if path.startswith(f"{folder}{os.sep}") or path == str(folder):
            found.append(path.removeprefix(f"{folder}{os.sep}"))
    return sorted(found)


@pytest.mark.task("03.1")
@pytest.mark.task("03.2")
def test_a_fork_leaves_no_file_open(lesson, sessions, day_one, monkeypatch):
    """A fork closes every file it opens, whether it is made (plain or durable) or
    refused, for whatever reason (an upto past the end, below zero or no whole
    number, a taken id, an id no session may have, a source with no log, a damaged
    source): an agent that forks all day must not run out of descriptors, one more
    left at each fork, the folder's own among them.
    A refusal is looked at while its error is still held, as a caller that reports
    it holds it: a file left for the garbage collector to close is still open then."""
    left_by_publishing = []
    publish = getattr(lesson, "publish_fork", None)
    if publish is not None:     # a later lesson's store may publish otherwise
        def publish_fork(*args):
            before = open_in(sessions)
            try:
                return publish(*args)
            finally:
                after = open_in(sessions)
                left_by_publishing.extend(p for p in after if p not in before)
        monkeypatch.setattr(lesson, "publish_fork", publish_fork)

    (sessions / "damaged.jsonl").write_bytes(M1 + b"\n" + TORN + b"\n" + M2 + b"\n")
    for source, new_id, options, what in (
            ("quest-1", "what-if", {}, "a fork that was made"),
            ("quest-1", "safe", {"durable": True}, "a durable fork that was made"),
            ("quest-1", "too-far", {"upto": len(day_one) + 1}, "a fork refused for "
             "an upto past the end"),
            ("quest-1", "below", {"upto": -1}, "a fork refused for a negative upto"),
            ("quest-1", "half", {"upto": 1.5}, "a fork refused for an upto that is no "
             "whole number"),
            ("quest-1", "what-if", {"upto": 1}, "a fork refused for a taken id"),
            ("quest-1", "-what-if", {}, "a fork refused for a new id no session may "
             "have"),
            ("no-such-quest", "what-else", {}, "a fork refused for a source with no "
             "log"),
            ("damaged", "what-else", {}, "a fork refused for a damaged line in its "
             "source")):
        before = open_in(sessions)
        refused = fork_or_fail(lesson, sessions, source, new_id, **options)
        left = [p for p in open_in(sessions) if p not in before]
        del refused     # held until now, as a caller that reports the error holds it
        if left_by_publishing:
            fail_in("03.2", f"{what} (onto {new_id}) returned with "
                    f"{left_by_publishing} still open, left so by publish_fork: "
                    "each fork leaves one more descriptor, and a process that forks "
                    "all day runs out of them")
        if left:
            fail_in("03.1", f"{what} (onto {new_id}) returned with {left} still "
                    "open: each fork leaves one more descriptor, and a process that "
                    "forks all day runs out of them. Close what you open, refused or "
                    "not")


class FailingReads:
    """The source's file as open() hands it over while its reads fail: every read
    raises `error()`, and closing it closes the real file."""

    def __init__(self, real, error):
        self._real, self._error = real, error

    def __getattr__(self, name):
        return getattr(self._real, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self._real.close()

    def __iter__(self):
        raise self._error()

    def _fail(self, *args, **kwargs):
        raise self._error()

    read = readall = readinto = readline = readlines = _fail


@pytest.mark.task("03.1")
@pytest.mark.parametrize("step, failure", [
    ("reading the source", "EIO"), ("reading the source", "Ctrl-C"),
    ("judging a line of the source", "Ctrl-C"),
    ("judging a line of the source", "MemoryError"),
    ("judging the source's last line, which lacks its newline", "Ctrl-C"),
    ("judging the source's last line, which lacks its newline", "MemoryError")])
def test_a_fork_interrupted_or_failing_while_it_reads_its_source_leaves_nothing(
        lesson, sessions, monkeypatch, step, failure):
    """A fork whose read of its source fails (EIO, a failing disk), or that Ctrl-C
    (KeyboardInterrupt) interrupts while it reads the source or judges one of its
    lines, or that runs out of memory (MemoryError, an Exception that says nothing
    of the line) while it judges one: the error that happened reaches the caller as
    itself (never a refusal of the fork's own words, never taken for a damaged or a
    torn line, never swallowed), no fork is made, not even a shorter one, the folder
    is as it was, and no file is left open, even while the error is held."""
    import builtins
    import io
    import sys
    source = sessions / "quest-1.jsonl"
    last = b'{"role": "user", "content": "And the guard?"}'
    source.write_bytes(M1 + b"\n" + M2 + b"\n" + last)    # the last lacks its newline
    target = M2 if step.startswith("judging a line") else last
    before = snapshot(sessions)
    came = []

    def error():
        came.append(step)
        if failure == "EIO":
            return OSError(errno.EIO, os.strerror(errno.EIO))
        if failure == "MemoryError":
            return MemoryError()
        return KeyboardInterrupt()

    def is_source(path):
        return leads_to(path, source)

    if step == "reading the source":
        real_open, real_read = builtins.open, os.read

        def failing_open(file, *args, **kwargs):
            opened = real_open(file, *args, **kwargs)
            return FailingReads(opened, error) if is_source(file) else opened

        def failing_read(fd, *args):
            if is_source(f"/proc/self/fd/{fd}"):
                raise error()
            return real_read(fd, *args)
        monkeypatch.setattr(builtins, "open", failing_open)
        monkeypatch.setattr(io, "open", failing_open)
        monkeypatch.setattr(os, "read", failing_read)
    else:
        forks = sys.modules[lesson.fork.__module__]
        real_parse = getattr(forks, "parse_line", None)
        if real_parse is None:
            pytest.skip("this fork judges its source's lines without parse_line")

        def parse_line(line, *args, **kwargs):
            raw = line.encode("utf-8") if isinstance(line, str) else bytes(line)
            if raw.rstrip(b"\n") == target and not came:
                raise error()
            return real_parse(line, *args, **kwargs)
        monkeypatch.setattr(forks, "parse_line", parse_line)

    outcome = None
    try:
        lesson.fork(sessions, "quest-1", "what-if")
        found = "returned, the fork made"
    except NotImplementedError:
        raise
    except BaseException as raised:     # noqa: BLE001 - what came back is the point
        outcome = raised
        found = f"raised {described(raised)}"
    left = open_in(sessions)
    monkeypatch.undo()
    if not came:
        del outcome
        pytest.skip(f"not a failure: this test fails the fork while {step}, and "
                    "this fork never got there by a way the test can break (nothing "
                    "to check)")
    expected = {"EIO": "OSError (EIO)", "Ctrl-C": "KeyboardInterrupt"}.get(
        failure, failure)
    if failure == "EIO":
        reached = isinstance(outcome, OSError) and outcome.errno == errno.EIO
    else:
        reached = isinstance(outcome, {"Ctrl-C": KeyboardInterrupt,
                                       "MemoryError": MemoryError}[failure])
    del outcome
    if not reached:
        pytest.fail(f"{failure} came while the fork was {step}; that error should "
                    f"reach the caller as itself ({expected}), the fork not made. "
                    f"The fork {found}", pytrace=False)
    if left:
        pytest.fail(f"{failure} came while the fork was {step}; the fork raised it, "
                    f"rightly, but left {left} open while its error was held: a "
                    "file is closed on every way out of the code that opened it "
                    "(with, or finally), not only on the errors an except names",
                    pytrace=False)
    expect_unchanged(sessions, before,
                     f"{failure} came while the fork was {step}; the fork raised it "
                     "but changed the folder: a fork that raises leaves every file as "
                     "it was, and makes no fork")


@pytest.mark.task("03.2")
def test_a_fork_killed_while_writing_its_meta_file_leaves_no_half_of_it(
        lesson, sessions, day_one):
    """The process dies at the 41st byte it writes to any file (a file size limit with
    SIGXFSZ left to kill it, as a crash would): no reader ever finds half a meta file
    under the fork's name, and the same fork, run again, works whatever the kill
    left."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))    # no core file
            signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
            resource.setrlimit(resource.RLIMIT_FSIZE, (40, resource.RLIM_INFINITY))
            lesson.fork(sessions, "quest-1", "what-if")
        except NotImplementedError:
            code = 3
        except BaseException:       # noqa: BLE001 - only the files left matter
            code = 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 3:
        raise NotImplementedError("fork() is not written yet (tasks 03.1 and 03.2)")
    meta = sessions / "what-if.meta.json"
    held = meta.read_bytes() if meta.exists() else b"{}"
    try:
        json.loads(held)
    except ValueError:
        pytest.fail(f"the fork died at the 41st byte it wrote to a file (killed, or "
                    f"the disk full), and left what-if.meta.json holding {len(held)} "
                    f"bytes that are not a whole JSON object ({held[:40]!r}...): a "
                    "reader of the lineage finds half a file", pytrace=False)
    expect_no_session_no_one_made(sessions, {"quest-1.jsonl", "what-if.jsonl"},
                                  "killed at the 41st byte it wrote to a file")
    if (sessions / "what-if.jsonl").exists():
        return      # the fork got as far as its log: the other tests judge that
    left = sorted(p.name for p in sessions.iterdir())
    error = fork_or_fail(lesson, sessions, "quest-1", "what-if")
    if error is not None:
        fail_in("03.2", f"the fork died at the 41st byte it wrote to a file (killed), "
                f"and left {left}, no session under what-if; the same fork, run "
                f"again, should work whatever the kill left, and it raised "
                f"{described(error)}: what a killed fork leaves must never stop the "
                "next one")
    expect_whole_fork(lesson, sessions, "what-if", "quest-1", day_one,
                      f"killed at its 41st byte, the fork left {left}; run again",
                      task="03.2")


@pytest.mark.task("03.2")
def test_a_fork_killed_while_writing_its_log_leaves_no_half_of_it(lesson, sessions):
    """The process dies once 20 KiB of the fork's 40 KiB log are written (a file size
    limit with SIGXFSZ left to kill it, as a crash would; the meta file is far
    smaller): what-if holds the whole fork or no session, never a log cut short, and
    the same fork, run again, makes it whole."""
    messages = [{"role": "user", "content": "Copy the map: " + "north, east. " * 3200},
                {"role": "assistant", "content": "Copied."}]
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in messages:
            log.append(message)
    source = (sessions / "quest-1.jsonl").read_bytes()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))    # no core file
            signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
            resource.setrlimit(resource.RLIMIT_FSIZE,
                               (20 << 10, resource.RLIM_INFINITY))
            lesson.fork(sessions, "quest-1", "what-if")
        except NotImplementedError:
            code = 3
        except BaseException:       # noqa: BLE001 - only the files left matter
            code = 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 3:
        raise NotImplementedError("fork() is not written yet (tasks 03.1 and 03.2)")
    expect_no_session_no_one_made(sessions, {"quest-1.jsonl", "what-if.jsonl"},
                                  "killed once 20 KiB of its log were written")
    log_path = sessions / "what-if.jsonl"
    if log_path.exists() and log_path.read_bytes() != source:
        held = log_path.read_bytes()
        fail_in("03.2", f"the fork died once 20 KiB of its {len(source) // 1024} KiB "
                f"log were written (killed, as a crash kills), and left what-if.jsonl "
                f"holding {len(held)} bytes, the start of the log cut short: a "
                "session under the fork's name that is no whole fork (its last line "
                "torn, its last messages missing). The log gets its name only once "
                "it is whole")
    if not log_path.exists():
        error = fork_or_fail(lesson, sessions, "quest-1", "what-if")
        assert error is None, (
            "the fork died writing its log and left no session under what-if; the "
            f"same fork, run again, should work, and it raised {described(error)}")
    expect_whole_fork(lesson, sessions, "what-if", "quest-1", messages,
                      "killed while writing its log" + (
                          ", and run again" if os.WIFSIGNALED(status) else ""))


@pytest.mark.task("03.1")
def test_a_fork_copies_history_not_the_world(lesson, sessions, town, day_one):
    """A fork copies the conversation, not the world: gold spent on day 1 stays spent in
    the fork, and the fork's purchases stay in the fork's log."""
    assert town.gold == 6 and town.inventory == ["rope"], (
        "day 1 bought a rope for 4 of the 10 gold"
    )

    lesson.fork(sessions, "quest-1", "what-if")
    agent, _ = play(
        lesson,
        sessions,
        "what-if",
        [use(call("buy", item="torch")), say("Torch bought.")],
        "Buy a torch too.",
        town,
    )

    assert town.gold == 3, (
        "in the fork the rope is still paid for: the town is the world, not the "
        "history, so loading a fork must not replay or undo its tool calls. Gold is "
        f"{town.gold}, expected 6 - 3 = 3"
    )
    assert town.inventory == ["rope", "torch"], (
        "day 1 bought a rope and the fork a torch: the town owns both, once each; it "
        f"owns {town.inventory}")
    if b"bought a torch" in (sessions / "quest-1.jsonl").read_bytes():
        pytest.fail("the torch was bought in the fork, yet quest-1's log holds that "
                    "purchase too: the two session names lead to one file, so every "
                    "turn of either lands in both", pytrace=False)


@pytest.mark.task("03.1")
@pytest.mark.task("03.2")
def test_a_durable_fork_is_synced_and_a_plain_one_is_not(
    lesson, sessions, day_one, monkeypatch
):
    """fork(durable=True) syncs the new log, its meta file and their folder before
    returning, a fork of no message (its log empty) as much as a whole one; a plain
    fork syncs nothing, like a plain append, a fork of no message neither. Each
    file's bytes are synced before it gets its name, and the folder once both names
    are in it: a power cut in between must find no name without its bytes, and no
    name lost."""
    synced, handed, named_first = [], [], []
    real_fsync = os.fsync
    source = (sessions / "quest-1.jsonl").read_bytes()
    copied = [source]   # what the new log holds: the whole source, then nothing
    names = {"the new log": sessions / "safe.jsonl",
             "the meta file": sessions / "safe.meta.json"}

    def fsync(fd):      # what was synced, known by what it holds, whatever its name
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            named = all(path.exists() for path in names.values())
            synced.append("their folder with both names in it" if named else
                          "their folder before both names were in it")
        else:
            with open(f"/proc/self/fd/{fd}", "rb") as file:
                held = file.read()
            what = ("the new log" if held == copied[0] else
                    "the meta file" if holds_the_lineage(fd) else "another file")
            if what in names and what not in synced and names[what].exists():
                named_first.append(f"{what} ({names[what].name})")
            synced.append(what)
        return real_fsync(fd)
    for name in ("fsync", "fdatasync"):     # either makes a file's bytes durable
        monkeypatch.setattr(lesson.os, name, fsync)
    publish = getattr(lesson, "publish_fork", None)
    if publish is not None:     # a later lesson's store may publish otherwise
        def publish_fork(folder, source_id, new_id, count, copy, durable):
            handed.append(durable)
            return publish(folder, source_id, new_id, count, copy, durable)
        monkeypatch.setattr(lesson, "publish_fork", publish_fork)
    whose = "03.2" if publish is not None else None

    for new_id, upto in (("quick", None), ("quick-blank", 0)):
        synced.clear()
        lesson.fork(sessions, "quest-1", new_id, upto=upto)
        call = ("a plain fork (durable=False)" if upto is None
                else "a plain fork of no message (upto=0, durable=False)")
        if handed and handed[-1] is not False:
            fail_in("03.1", f"{call} handed publish_fork durable={handed[-1]!r}: fork "
                    "hands durable on as it came, whatever it copies")
        if synced:
            said = (f"{call} synced {len(synced)} time(s); a fork is as "
                    "durable as an append, and a plain one syncs nothing, an empty "
                    "one neither")
            fail_in(whose, said) if whose else pytest.fail(said, pytrace=False)

    for new_id, upto in (("safe", None), ("blank", 0)):
        names.update({"the new log": sessions / f"{new_id}.jsonl",
                      "the meta file": sessions / f"{new_id}.meta.json"})
        copied[0] = source if upto is None else b""
        synced.clear()
        lesson.fork(sessions, "quest-1", new_id, upto=upto, durable=True)
        call = ("fork(..., durable=True)" if upto is None
                else "fork(..., upto=0, durable=True), a fork of no message,")
        if handed and handed[-1] is not True:
            fail_in("03.1", f"{call} handed publish_fork durable={handed[-1]!r}: "
                    "fork hands durable on as it came")
        missing = [what for what in ("the new log", "the meta file",
                                     "their folder with both names in it")
                   if what not in synced]
        if missing:
            said = (f"{call} should sync the new log, the meta file and their "
                    "folder before returning; it synced "
                    + (", ".join(synced) if synced else "nothing") + ", never "
                    + " nor ".join(missing) + ": a power cut can take away what was "
                    "not synced, and durable promised it would not")
            fail_in(whose, said) if whose else pytest.fail(said, pytrace=False)
        if named_first:
            said = (f"{call} gave " + " and ".join(named_first)
                    + " its name before its bytes were synced: a power cut in "
                    "between can leave that name with none of its bytes, a fork that "
                    "is no whole fork. Sync a file's bytes, then give it its name, "
                    "then sync the folder")
            fail_in(whose, said) if whose else pytest.fail(said, pytrace=False)


def expect_no_session_no_one_made(sessions, kept, when):
    """Fail in 03.2 unless every name in `sessions` that reads as a session's log (an
    id and .jsonl, as SessionLog names one) is one of `kept`: a temporary file that a
    killed fork leaves under such a name is a session no one made."""
    stray = sorted(path.name for path in sessions.iterdir()
                   if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\.jsonl",
                                   path.name) and path.name not in kept)
    if stray:
        fail_in("03.2", f"{when}, the fork left {stray}: a file whose name reads as "
                "a session's log (an id and .jsonl), which no one made, holding part "
                "of the fork. Whatever a killed fork leaves, no temporary file of its "
                "own may be named as a session is: begin its name with a dot, or end "
                "it otherwise")


@pytest.mark.task("03.2")
def test_a_fork_killed_half_way_leaves_no_session_and_can_be_done_again(
        lesson, sessions, day_one):
    """A real SIGKILL right after the first of the fork's two files gets its name (by
    a rename or a link): the new id holds no session, or a whole one, and when it holds
    none the same fork, run again, works."""
    names = {"what-if.jsonl", "what-if.meta.json"}
    pid = os.fork()
    if pid == 0:
        try:
            def killed_after(real):
                def step(src, dst, *args, **kwargs):
                    real(src, dst, *args, **kwargs)
                    if os.path.basename(os.fspath(dst)) in names:
                        os.kill(os.getpid(), signal.SIGKILL)
                return step
            for call_name in ("link", "rename", "replace"):
                setattr(os, call_name, killed_after(getattr(os, call_name)))
            lesson.fork(sessions, "quest-1", "what-if")
        except NotImplementedError:
            os._exit(3)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 3:
        raise NotImplementedError("fork() is not written yet (tasks 03.1 and 03.2)")
    left = sorted(p.name for p in sessions.iterdir())
    if os.WIFSIGNALED(status):
        expect_no_session_no_one_made(sessions, {"quest-1.jsonl", "what-if.jsonl"},
                                      "killed right after the first of its two files "
                                      "got its name")
    if not os.WIFSIGNALED(status) or names <= set(left):
        return      # no file got its name by a rename or a link, or the fork was whole
    assert "what-if.jsonl" not in left, (
        f"killed right after one of its two files got its name, the fork left {left}: "
        "a log under what-if without its meta file, a session without its lineage, "
        "and the same fork, run again, is refused because the id is taken")
    try:
        lesson.fork(sessions, "quest-1", "what-if")
    except Exception as error:      # noqa: BLE001 - the failure is the point
        pytest.fail(f"the kill left {left}, no session under what-if; the same fork, "
                    f"run again, should work, and it failed: {error!r}", pytrace=False)
    expect_whole_fork(lesson, sessions, "what-if", "quest-1", day_one,
                      f"killed, the fork left {left}; run again")


@pytest.mark.task("03.2")
@pytest.mark.parametrize("left", [False, True])
def test_a_fork_that_fails_writing_its_meta_file_leaves_nothing(
        lesson, sessions, day_one, left):
    """A full disk (a file size limit of 20 bytes, in a child process) stops the fork
    at its first write, its meta file's: the fork raises OSError and leaves the folder
    as it was, no temporary file either, and, when what-if held a meta file with no
    log (no session), not even that one. With room again, the same fork works."""
    stale = sessions / "what-if.meta.json"
    if left:
        stale.write_text(json.dumps(
            {"format": 1, "id": "what-if", "parent": "other", "forked_at": 1,
             "created": "2026-01-01T00:00:00+00:00"}, indent=1), encoding="utf-8")
        stale.chmod(0o600)
    before = snapshot(sessions)

    kind, message, _ = with_file_size_limit(
        20, lambda: lesson.fork(sessions, "quest-1", "what-if"))
    if kind == "NotImplementedError":
        raise NotImplementedError(message)

    expected = {name: data for name, data in before.items() if name != stale.name}
    after = snapshot(sessions)
    if kind == "ok" or after != expected:
        changed = sorted(name for name in expected.keys() | after.keys()
                         if expected.get(name) != after.get(name))
        fail_in("03.2", (f"what-if held a meta file with no log before the fork (an "
                         "earlier fork, killed part-way, left it); " if left else "")
                + "the disk took 20 bytes of any file, less than the fork's first "
                "file, and the fork "
                + ("returned" if kind == "ok" else f"raised {kind}")
                + "; it should raise OSError and leave every other file as it was"
                + (", except that meta file, which should be gone after the failed "
                   "fork: a lineage with no log is no session's" if left else "")
                + f". The files that differ from that: {changed or 'none'}")
    retry = fork_or_fail(lesson, sessions, "quest-1", "what-if")
    if retry is not None:
        fail_in("03.2", "the fork failed with the disk full at its first file; the "
                "same fork, run again with room, should work, and it raised "
                f"{described(retry)}")
    expect_whole_fork(lesson, sessions, "what-if", "quest-1", day_one,
                      "failed with the disk full at its first file, and run again "
                      "with room", task="03.2")


@pytest.mark.task("03.2")
def test_a_fork_that_fails_to_publish_its_log_leaves_nothing(lesson, sessions, day_one):
    """A full disk (a file size limit in a child process) stops the fork at its log: no
    log, no meta file, no temporary file; with room again, the same fork works."""
    before = snapshot(sessions)

    def work():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (300, resource.RLIM_INFINITY))
        try:
            lesson.fork(sessions, "quest-1", "what-if")
        except OSError as error:
            return f"OSError: {error}"
        return "the fork did not fail"

    outcome = unless_unfinished(in_child(work))
    assert isinstance(outcome, str) and outcome.startswith("OSError"), (
        f"with the disk full, the fork should fail with OSError; it gave {outcome}")
    expect_unchanged(sessions, before,
                     "a fork that failed must leave every file as it was: the folder "
                     f"held {sorted(before)}, and after the failed fork it holds "
                     f"{sorted(snapshot(sessions))}")
    retry = fork_or_fail(lesson, sessions, "quest-1", "what-if")
    assert retry is None, (
        "the fork failed with the disk full; the same fork, run again with room, "
        f"should work, and it raised {type(retry).__name__}: {retry}")
    expect_whole_fork(lesson, sessions, "what-if", "quest-1", day_one,
                      "failed with the disk full, and run again with room")


def holds_the_lineage(fd):
    """Whether the file open as `fd` holds what-if's lineage: a JSON object naming its
    parent. The meta file is known by what it holds, whatever its name when synced (a
    temporary file of any name, or its own)."""
    with open(f"/proc/self/fd/{fd}", "rb") as file:     # fd itself may be write-only
        held = file.read()
    try:
        lineage = json.loads(held)
    except ValueError:
        return False
    return isinstance(lineage, dict) and lineage.get("parent") == "quest-1"


@pytest.mark.task("03.2")
@pytest.mark.parametrize("where", ["meta file", "folder holding the meta file",
                                   "folder holding the log"])
def test_a_durable_fork_whose_sync_fails_leaves_nothing_and_can_be_done_again(
        lesson, sessions, day_one, monkeypatch, where):
    """EIO from fsync (a failing disk) at a durable fork's sync, the last one too, when
    the log has its name already: the fork raises that error and leaves the folder as
    it was, no file open either, and the same fork, run again, works. An error says
    "no fork", so whoever gets one tries again, and must not be told the session
    exists."""
    before = snapshot(sessions)
    log, meta = sessions / "what-if.jsonl", sessions / "what-if.meta.json"
    real_fsync = os.fsync
    failed = []

    def fsync(fd):
        folder = stat.S_ISDIR(os.fstat(fd).st_mode)
        name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        hit = {"meta file": not folder and holds_the_lineage(fd),
               "folder holding the meta file": (folder and meta.exists()
                                                and not log.exists()),
               "folder holding the log": folder and log.exists()}[where]
        if hit and not failed:      # once: the retry finds the disk well again
            failed.append(name)
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real_fsync(fd)
    for name in ("fsync", "fdatasync"):     # either makes a file's bytes durable
        monkeypatch.setattr(lesson.os, name, fsync)

    opened = open_in(sessions)
    error = fork_or_fail(lesson, sessions, "quest-1", "what-if", durable=True)
    left_open = [path for path in open_in(sessions) if path not in opened]
    if where != "folder holding the meta file":    # a design may sync the folder once
        assert failed, (
            f"fork(..., durable=True) returned without syncing the {where} (no fsync "
            + ("of a file holding its lineage" if where == "meta file"
               else "of the folder once the log was in it")
            + "): it must be on disk before the fork returns")
    if not failed:
        return
    assert isinstance(error, OSError) and error.errno == errno.EIO, (
        f"the disk failed (EIO) syncing the {where}: fork should raise that error; it "
        + ("returned" if error is None else f"raised {type(error).__name__}: {error}"))
    if left_open:
        fail_in("03.2", f"the fork failed syncing the {where} (EIO), and raised, but "
                f"left {left_open} open: a fork that fails closes what it opened too, "
                "or each retry on a failing disk leaves one more descriptor")
    left = sorted(set(snapshot(sessions)) - set(before))
    expect_unchanged(sessions, before,
                     f"the fork failed syncing the {where} and left {left}. An error "
                     "means no fork, so the folder should be as it was; whoever "
                     "retries must not find part of one")
    retry = fork_or_fail(lesson, sessions, "quest-1", "what-if", durable=True)
    assert retry is None, (
        f"the fork failed syncing the {where}; the same fork, run again with the disk "
        f"well, should work, and it raised {type(retry).__name__}: {retry}")
    expect_whole_fork(lesson, sessions, "what-if", "quest-1", day_one,
                      f"failed syncing the {where}, and run again with the disk well")


@pytest.mark.task("03.2")
def test_a_durable_fork_leaves_nothing_whichever_of_its_syncs_fails(
        lesson, sessions, day_one, monkeypatch):
    """A durable fork is tried again and again on a failing disk: the first time its
    first fsync fails (EIO), the next time its second, and so on, until a fork makes
    no more syncs than the one that failed, and is made. Whichever sync fails, the
    last one too (whatever a design syncs there, once more or otherwise), the fork
    raises that error and leaves the folder as it was: an error says "no fork", and
    a session left under the new id would be one its caller was told was not made."""
    before = snapshot(sessions)
    real_fsync = os.fsync
    for failing in range(1, 21):
        calls = []

        def fsync(fd):
            calls.append(fd)
            if len(calls) == failing:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            return real_fsync(fd)
        with monkeypatch.context() as patch:
            patch.setattr(lesson.os, "fsync", fsync)
            patch.setattr(lesson.os, "fdatasync", fsync)
            error = fork_or_fail(lesson, sessions, "quest-1", "what-if",
                                 durable=True)
        if len(calls) < failing:
            break       # no sync left to fail: this fork ran on a well disk
        said = (f"a durable fork's sync number {failing} (of its os.fsync and "
                "os.fdatasync calls, in order) failed with EIO, and the fork ")
        if not (isinstance(error, OSError) and error.errno == errno.EIO):
            fail_in("03.2", said + ("returned" if error is None else
                                    f"raised {described(error)}")
                    + ": it should raise that error, the fork not made")
        if snapshot(sessions) != before:
            left = sorted(set(snapshot(sessions)) - set(before))
            fail_in("03.2", said + f"raised it, as it should, but left {left}: a "
                    "fork that raises leaves the folder as it was, whichever of its "
                    "syncs failed, the last too; a log left there is a session its "
                    "caller was told was not made, and the same fork, run again, is "
                    "refused")
    else:
        pytest.fail("a durable fork made 20 syncs or more, and every one was failed "
                    "in turn: a fork syncs each file and their folder, a few calls",
                    pytrace=False)
    if error is not None:
        fail_in("03.2", f"a durable fork failed at each of its {failing - 1} syncs in "
                "turn, leaving the folder as it was each time; run again on a well "
                f"disk, it raised {described(error)}, where it should be made")
    expect_whole_fork(lesson, sessions, "what-if", "quest-1", day_one,
                      f"after {failing - 1} durable forks each failed at one of its "
                      "syncs, run again on a well disk", task="03.2")


@pytest.mark.task("03.2")
@pytest.mark.parametrize("name", ["what-if.meta.json", "what-if.jsonl"])
@pytest.mark.parametrize("failure", ["EIO", "Ctrl-C", "SystemExit", "MemoryError"])
def test_a_fork_that_fails_as_either_file_gets_its_name_leaves_nothing(
        lesson, sessions, day_one, monkeypatch, name, failure):
    """The step that would give one of the fork's two files its name (a rename or a
    link) fails: with EIO (a failing disk), with Ctrl-C (KeyboardInterrupt), with
    SystemExit (a handler of SIGTERM that exits), or with MemoryError (a process out
    of memory: an error that is neither the disk's nor an interrupt, as any step may
    raise). The error reaches the caller, the folder is as it was, whichever file's
    naming failed and whatever the error, and the same fork, run again, works."""
    before = snapshot(sessions)
    failed, outcome = fork_failing_as(lesson, sessions, monkeypatch, name, failure)
    if not failed:
        return      # that file got its name by no rename or link: nothing to fail
    left = sorted(set(snapshot(sessions)) - set(before))
    assert outcome == failure, (
        f"{failure} came as {name} was about to get its name; the error should reach "
        f"the caller, and the fork {outcome}")
    expect_unchanged(sessions, before,
                     f"the fork failed ({failure}) as {name} was about to get its "
                     f"name, and left {left}: a fork that raises is no fork, and "
                     "leaves the folder as it was, whichever of its two files failed "
                     "to get its name")
    retry = fork_or_fail(lesson, sessions, "quest-1", "what-if")
    assert retry is None, (
        f"the fork failed ({failure}) as {name} was about to get its name; the same "
        f"fork, run again, should work, and it raised {type(retry).__name__}: {retry}")
    expect_whole_fork(lesson, sessions, "what-if", "quest-1", day_one,
                      f"failed ({failure}) as {name} was about to get its name, and "
                      "run again")


@pytest.mark.task("03.2")
@pytest.mark.parametrize("name", ["what-if.jsonl", "what-if.meta.json"])
@pytest.mark.parametrize("failure", ["EIO", "Ctrl-C"])
def test_a_fork_that_fails_onto_a_meta_file_with_no_log_leaves_neither_file(
        lesson, sessions, day_one, monkeypatch, failure, name):
    """what-if holds a meta file naming 'other' and no log: no session. A fork of
    quest-1 onto what-if fails as its log, or its own meta file, is about to get its
    name. The error reaches the caller, and neither of the fork's files is under
    what-if, not even the meta file that was there (with no log, none is any
    session's lineage), whichever step failed; every other file is as it was, and the
    same fork, run again, records its own lineage."""
    stale = sessions / "what-if.meta.json"
    stale.write_text(json.dumps(
        {"format": 1, "id": "what-if", "parent": "other", "forked_at": 1,
         "created": "2026-01-01T00:00:00+00:00"}, indent=1), encoding="utf-8")
    stale.chmod(0o600)
    before = snapshot(sessions)
    failed, outcome = fork_failing_as(lesson, sessions, monkeypatch, name, failure)
    if not failed:
        return      # that file got its name by no rename or link: nothing to fail
    assert outcome == failure, (
        f"{failure} came as {name} was about to get its name; the error should "
        f"reach the caller, and the fork {outcome}")
    after = snapshot(sessions)
    left = sorted(file for file in after if file.startswith("what-if"))
    changed = sorted(file for file in before.keys() | after.keys()
                     if before.get(file) != after.get(file)
                     and not file.startswith("what-if"))
    if left or changed:
        fail_in("03.2", f"what-if held only a meta file (no log, no session); a fork "
                f"onto it failed ({failure}) as {name} was about to "
                f"get its name, and left {left or 'no file of what-if'}"
                + (f", and changed {changed}" if changed else "") + ". A fork that "
                "raises leaves neither of its files under the new id, whichever step "
                "failed, not even the meta file that was there: one left there is a "
                "lineage without a session")
    retry = fork_or_fail(lesson, sessions, "quest-1", "what-if")
    assert retry is None, (
        f"the fork failed ({failure}); the same fork, run again, should work, and it "
        f"raised {type(retry).__name__}: {retry}")
    expect_whole_fork(lesson, sessions, "what-if", "quest-1", day_one,
                      f"failed ({failure}) onto a meta file with no log, and run again")


def fork_failing_as(lesson, sessions, monkeypatch, name, failure):
    """Fork quest-1 onto what-if while the first rename or link that would give `name`
    its name fails, with EIO, Ctrl-C, SystemExit or MemoryError (`failure`). Returns
    whether that step came, and how the fork ended: "returned", "Ctrl-C", "SystemExit",
    "MemoryError", "EIO" or the other error it raised."""
    failed = []

    def failing(real):
        def step(src, dst, *args, **kwargs):
            if os.path.basename(os.fspath(dst)) == name and not failed:
                failed.append(name)
                if failure == "EIO":
                    raise OSError(errno.EIO, os.strerror(errno.EIO))
                if failure == "SystemExit":
                    raise SystemExit(1)
                if failure == "MemoryError":
                    raise MemoryError
                raise KeyboardInterrupt
            return real(src, dst, *args, **kwargs)
        return step
    for call_name in ("link", "rename", "replace"):
        monkeypatch.setattr(os, call_name, failing(getattr(os, call_name)))
    try:
        lesson.fork(sessions, "quest-1", "what-if")
        outcome = "returned"
    except KeyboardInterrupt:
        outcome = "Ctrl-C"
    except SystemExit:
        outcome = "SystemExit"
    except MemoryError:
        outcome = "MemoryError"
    except NotImplementedError:
        raise
    except Exception as error:      # noqa: BLE001 - the failure is the point
        is_eio = isinstance(error, OSError) and error.errno == errno.EIO
        outcome = "EIO" if is_eio else f"raised {type(error).__name__}: {error}"
    finally:
        monkeypatch.undo()
    return bool(failed), outcome


def fork_or_fail(lesson, *args, **options):
    """Call fork and return its exception, or None if it returned."""
    try:
        lesson.fork(*args, **options)
    except NotImplementedError:
        raise
    except Exception as error:
        return error
    return None


def fail_naming_the_task_at_fault(lesson, said, handed, new_id):
    """Fail in `said`'s words, naming 03.1 or 03.2 by what fork handed publish_fork."""
    if not handed:
        fail_in("03.1", said) if getattr(lesson, "publish_fork", None) else \
            pytest.fail(said, pytrace=False)
    if handed != [(new_id, 1)]:
        fail_in("03.1", f"{said}. fork handed publish_fork {handed}")
    fail_in("03.2", f"{said}. fork handed publish_fork the new id {new_id!r} and its "
            "copy, as it should")


@pytest.mark.task("03.1")
def test_a_fork_keeps_unicode_line_separators_inside_content(lesson, sessions):
    """A message holding U+2028, U+2029 or U+0085 is copied whole."""
    tricky = [{"role": "user", "content": "north\u2028south\u2029east\x85west"},
              {"role": "assistant", "content": "Which way?"}]
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in tricky:
            log.append(message)
    source = (sessions / "quest-1.jsonl").read_bytes()

    lesson.fork(sessions, "quest-1", "whole")
    lesson.fork(sessions, "quest-1", "first", upto=1)

    whole = (sessions / "whole.jsonl").read_bytes()
    if whole != source:
        pytest.fail("a whole fork of a log whose first message holds U+2028, U+2029 "
                    "and U+0085 (unescaped, inside its line) should hold the source's "
                    f"{len(source)} bytes, its 2 lines, unchanged; it holds "
                    f"{len(whole)} bytes in {whole.count(NEWLINE)} line(s) that differ",
                    pytrace=False)
    first = (sessions / "first.jsonl").read_bytes()
    expected = source.split(NEWLINE)[0] + NEWLINE
    if first != expected:
        pytest.fail("upto=1 should copy the first line, the whole first message "
                    f"({len(expected)} bytes, 1 line); the fork holds {len(first)} "
                    f"bytes in {first.count(NEWLINE)} line(s)", pytrace=False)


@pytest.mark.task("03.1")
@pytest.mark.task("03.2")
def test_a_fork_of_zero_messages_is_empty(lesson, sessions, day_one, monkeypatch):
    """upto=0 makes an empty fork, a fresh start with a lineage, not a full copy: its
    log is there, empty (the id is taken), and its meta file says it copied 0
    messages of quest-1."""
    handed = handed_to_publishing(lesson, monkeypatch)
    lesson.fork(sessions, "quest-1", "fresh", upto=0)

    with lesson.SessionLog(sessions, "fresh") as log:
        history = log.load()
    if history != []:
        fail_in("03.1", f"upto=0 keeps no message; the fork holds {len(history)}. 0 is "
                "a number of messages, not 'no limit'")
    if handed and handed != [("fresh", 0)]:
        fail_in("03.1", "fork(sessions, 'quest-1', 'fresh', upto=0) should hand "
                f"publish_fork the new id 'fresh' and the count 0; it handed {handed}")
    whose = "03.2" if handed else None
    log_path = sessions / "fresh.jsonl"
    if not log_path.exists() or log_path.read_bytes():
        said = ("a fork of 0 messages returned, and " + (
            f"fresh.jsonl holds {len(log_path.read_bytes())} bytes" if log_path.exists()
            else "there is no fresh.jsonl") + ": an empty fork is a session all the "
            "same, its log there and empty, so that its id is taken and no other fork "
            "lands on it")
        fail_in(whose, said) if whose else pytest.fail(said, pytrace=False)
    expect_whole_fork(lesson, sessions, "fresh", "quest-1", [],
                      "upto=0, a fork of no message", task=whose)


@pytest.mark.task("03.1")
@pytest.mark.task("03.2")
def test_ids_with_dots_name_files_of_their_own(lesson, sessions, monkeypatch):
    """An id may hold dots (quest.day-1, quest.day-2), even what looks like a suffix
    (quest.day-3.jsonl): its files are the whole id and their suffix, never the id cut
    at a dot, nor a suffix taken off or replaced where its letters stand. quest.jsonl,
    another session, stays as it was, and gets no meta file. The lineage names both
    ids whole too: its id is the fork's, its parent quest.day-1, never 'quest' (the
    id cut at a dot, as Path.stem cuts a file's name), which is another session."""
    with lesson.SessionLog(sessions, "quest.day-1") as log:
        log.append({"role": "user", "content": "Day 1: ask the elder."})
    other = b'{"role": "user", "content": "Another quest."}\n'
    (sessions / "quest.jsonl").write_bytes(other)
    (sessions / "quest.jsonl").chmod(0o600)
    source = (sessions / "quest.day-1.jsonl").read_bytes()
    handed = handed_to_publishing(lesson, monkeypatch)
    parents = parents_handed_to_publishing(lesson, monkeypatch)
    for new_id in ("quest.day-2", "quest.day-3.jsonl"):
        before = snapshot(sessions)
        handed.clear()
        parents.clear()

        error = fork_or_fail(lesson, sessions, "quest.day-1", new_id)

        after = snapshot(sessions)
        made = sorted(set(after) - set(before))
        changed = sorted(name for name in before if after.get(name) != before[name])
        right = after.get(f"{new_id}.jsonl") == source and made == [
            f"{new_id}.jsonl", f"{new_id}.meta.json"] and not changed
        if error is None and right:
            expect_lineage_names(lesson, after[f"{new_id}.meta.json"], new_id,
                                 "quest.day-1", parents, "(ids with a dot, as a "
                                 "quest's days are named)")
            continue
        said = (f"a fork of quest.day-1 onto {new_id} (ids with a dot, as a quest's "
                "days are named) should read quest.day-1.jsonl and make "
                f"{new_id}.jsonl and {new_id}.meta.json, leaving quest.jsonl, another "
                "session, as it was; it " + ("returned" if error is None else
                                             f"raised {described(error)}")
                + f", made {made or 'no file'}"
                + (f" and changed {changed}" if changed else "")
                + ": an id is the whole name before the suffix, never cut at a dot, "
                "and each file's name is the whole id with its suffix added, whatever "
                "letters the id ends in or holds")
        fail_naming_the_task_at_fault(lesson, said, handed, new_id)


def parents_handed_to_publishing(lesson, monkeypatch):
    """A list that records the parent's id each fork hands publish_fork, publish_fork
    still doing its work."""
    parents, publish = [], getattr(lesson, "publish_fork", None)
    if publish is not None:     # a later lesson's store may publish otherwise
        def publish_fork(folder, source_id, new_id, count, copy, durable):
            parents.append(source_id)
            return publish(folder, source_id, new_id, count, copy, durable)
        monkeypatch.setattr(lesson, "publish_fork", publish_fork)
    return parents


def expect_lineage_names(lesson, held, new_id, parent, handed, ids):
    """Fail unless the meta file's bytes `held` name the fork's id, `new_id`, and its
    parent, `parent`, each whole, as given. `handed` lists the parents fork handed
    publish_fork: the failure names 03.1 when that one was not `parent`, else 03.2."""
    try:
        lineage = json.loads(held)
    except ValueError:
        lineage = None
    found = ({key: lineage.get(key) for key in ("id", "parent")}
             if isinstance(lineage, dict) else lineage)
    wanted = {"id": new_id, "parent": parent}
    if found == wanted:
        return
    said = (f"a fork of {parent} onto {new_id} {ids} made both files, but its "
            f"lineage names {found}, where {wanted} was expected: an id is a name, "
            "kept whole in the lineage as in the files' names, never cut at a dot "
            "or shortened, or the lineage names another session")
    if getattr(lesson, "publish_fork", None) is None:
        pytest.fail(said, pytrace=False)
    if handed and handed[-1] != parent:
        fail_in("03.1", f"{said}. fork handed publish_fork the parent "
                f"{handed[-1]!r}")
    fail_in("03.2", f"{said}. fork handed publish_fork the ids whole, as it should")


@pytest.mark.task("03.1")
@pytest.mark.task("03.2")
def test_ids_at_the_length_limit_fork_and_are_named_whole(lesson, sessions,
                                                           monkeypatch):
    """Ids may be as long as check_session_id allows, 128 characters, on both sides:
    the fork is made all the same (every name it makes, a temporary one too, fits a
    file system's 255 bytes), its lineage names both ids whole, and each refusal
    names what it refused whole, however
    long the ids make its words: the damaged line's file, its line and why; the number
    asked for, how many messages the source holds, and the source; the source with no
    log; the new id that is a session already."""
    source_id = "quest-of-the-mayors-daughter-" + "x" * 99           # 128 characters
    new_id = "what-if-we-had-asked-the-guard-" + "y" * 97           # 128 characters
    with lesson.SessionLog(sessions, source_id) as log:
        log.append({"role": "user", "content": "Ask the elder."})
    source = (sessions / f"{source_id}.jsonl").read_bytes()
    handed = handed_to_publishing(lesson, monkeypatch)
    parents = parents_handed_to_publishing(lesson, monkeypatch)
    before = snapshot(sessions)

    error = fork_or_fail(lesson, sessions, source_id, new_id)

    after = snapshot(sessions)
    made = sorted(set(after) - set(before))
    if error is not None or after.get(f"{new_id}.jsonl") != source or made != sorted(
            [f"{new_id}.jsonl", f"{new_id}.meta.json"]):
        said = ("a fork of a session whose id has 128 characters onto a new id of 128 "
                "characters (the most check_session_id allows) should make the new "
                "id's log, a copy of the source's, and its meta file, and nothing "
                "else; it " + ("returned" if error is None else
                               f"raised {described(error)}")
                + f", and made {[name[:40] + '...' for name in made] or 'no file'}: "
                "every name a fork makes, a temporary one too, must fit a file "
                "system's 255 bytes with ids of any allowed length")
        fail_naming_the_task_at_fault(lesson, said, handed, new_id)
    expect_lineage_names(lesson, after[f"{new_id}.meta.json"], new_id, source_id,
                         parents, "(ids of 128 characters, the most check_session_id "
                         "allows)")

    # Refusals: the source's line 2 is damaged, then the source asks too much
    damaged = b'{"role": "assistant", "content": "", "tool_calls": [{"type": "x"}]}'
    path = sessions / f"{source_id}.jsonl"
    path.write_bytes(source + damaged + b"\n")
    try:
        lesson.parse_line(damaged)
        reason = ""
    except ValueError as refused:
        reason = str(refused)
    other_id = "z" * 128
    error = fork_or_fail(lesson, sessions, source_id, other_id)
    text = str(error)
    missing = [what for what, named in [
        (f"the source's file ({path})", str(path) in text
         or f"{source_id}.jsonl" in text),
        ("its line 2", re.search(r"(?<!\d)2(?!\d)",
                                 text.replace(str(sessions), "")) is not None),
        (f"why, in parse_line's words ({reason!r})", reason in text)] if not named]
    if not isinstance(error, lesson.InvalidMessage) or missing:
        fail_in("03.1", f"line 2 of the log of a session whose id has 128 characters "
                f"holds a tool call that is no call; a fork of it raised "
                f"{described(error) if error else 'nothing'}, which should be an "
                "InvalidMessage naming " + " and ".join(
                    missing or ["what it refused"]) + ": its words stay short by "
                "quoting no line, never by cutting off the path or the reason")
    path.write_bytes(source)
    error = fork_or_fail(lesson, sessions, source_id, other_id, upto=7)
    text = str(error).replace(str(sessions), "")
    missing = [what for what, named in [
        ("the number asked for, 7", re.search(r"(?<!\d)7(?!\d)", text)),
        ("how many messages the source holds, 1",
         re.search(r"(?<!\d)1(?!\d)", text.replace(source_id, ""))),
        (f"the source ({source_id[:29]}...)", source_id in text)] if not named]
    if not isinstance(error, ValueError) or missing:
        fail_in("03.1", f"a session whose id has 128 characters holds 1 message; "
                f"fork(..., upto=7) of it raised "
                f"{described(error) if error else 'nothing'}, which should be a "
                "ValueError naming " + " and ".join(missing or ["what it refused"])
                + ", whole, however long the id makes the words")
    missing_id = "no-such-quest-" + "q" * 114                      # 128 characters
    for args, kind, named, what in (
            ((missing_id, other_id), lesson.SessionNotFound, missing_id,
             "a fork of a session with no log"),
            ((source_id, new_id), lesson.SessionExists, new_id,
             "a fork onto an id that is a session already (the fork made above)")):
        error = fork_or_fail(lesson, sessions, *args)
        if not isinstance(error, kind) or named not in str(error):
            fail_in("03.1", f"{what}, its id of 128 characters ({named[:29]}...), "
                    f"raised {described(error) if error else 'nothing'}, which should "
                    f"be a {kind.__name__} naming that id whole, however long it makes "
                    "the words: cut short, it may name another session, or none")
    if snapshot(sessions) != {**after, path.name: source}:
        fail_in("03.1", "four forks with ids of 128 characters were refused (a "
                "damaged line, an upto past the end, a source with no log, an id "
                "taken), and the sessions folder changed: a refused fork leaves every "
                "file as it was")


@pytest.mark.task("03.1")
@pytest.mark.task("03.2")
def test_ids_keep_their_capitals_byte_for_byte(lesson, sessions, monkeypatch):
    """An id is a name, kept byte for byte, capitals too: a fork of Quest-1 onto
    What-If reads Quest-1.jsonl and makes What-If.jsonl and What-If.meta.json, whose
    lineage names 'What-If' and its parent 'Quest-1', as they were given."""
    with lesson.SessionLog(sessions, "Quest-1") as log:
        log.append({"role": "user", "content": "Ask the Elder."})
    source = (sessions / "Quest-1.jsonl").read_bytes()
    before = snapshot(sessions)
    handed = handed_to_publishing(lesson, monkeypatch)

    error = fork_or_fail(lesson, sessions, "Quest-1", "What-If")

    after = snapshot(sessions)
    made = sorted(set(after) - set(before))
    try:
        lineage = json.loads(after.get("What-If.meta.json", b""))
    except ValueError:
        lineage = None
    found = ({key: lineage.get(key) for key in ("id", "parent")}
             if isinstance(lineage, dict) else lineage)
    if error is None and made == ["What-If.jsonl", "What-If.meta.json"] and after[
            "What-If.jsonl"] == source and found == {"id": "What-If",
                                                      "parent": "Quest-1"}:
        return
    said = ("a fork of Quest-1 onto What-If (ids with capitals) should read "
            "Quest-1.jsonl and make What-If.jsonl, holding its bytes, and "
            "What-If.meta.json, naming id 'What-If' and parent 'Quest-1'; it "
            + ("returned" if error is None else f"raised {described(error)}")
            + f", made {made or 'no file'}, the lineage saying {found}: an id is "
            "kept as it was given, never lower-cased")
    fail_naming_the_task_at_fault(lesson, said, handed, "What-If")


def expect_fork_made(lesson, folder, new_id, monkeypatch, situation, why):
    """Fork quest-1 (one message) onto `new_id`, a free id, in `folder`; fail in words
    unless the fork made `new_id`'s two files, its log holding quest-1's bytes, and
    changed nothing else. `situation` says what the folder holds; `why`, what must
    hold. The failure names 03.1 or 03.2 by what fork handed publish_fork."""
    (folder / "quest-1.jsonl").write_bytes(M1 + b"\n")
    (folder / "quest-1.jsonl").chmod(0o600)
    before = snapshot(folder)
    handed = handed_to_publishing(lesson, monkeypatch)

    error = fork_or_fail(lesson, folder, "quest-1", new_id)

    after = snapshot(folder)
    made = sorted(set(after) - set(before))
    changed = sorted(name for name in before if after.get(name) != before[name])
    if error is None and not changed and made == [
            f"{new_id}.jsonl", f"{new_id}.meta.json"] and after[
            f"{new_id}.jsonl"] == before["quest-1.jsonl"]:
        return
    said = (f"{situation}, a fork of quest-1 onto {new_id}, a free id, should make "
            f"{new_id}.jsonl, holding quest-1's message, and {new_id}.meta.json, and "
            "change nothing else; it "
            + ("returned" if error is None else f"raised {described(error)}")
            + f", made {made or 'no file'}"
            + (f" and changed {changed}" if changed else "") + f": {why}")
    fail_naming_the_task_at_fault(lesson, said, handed, new_id)


@pytest.mark.task("03.1")
@pytest.mark.task("03.2")
def test_a_fork_onto_an_id_that_begins_another_sessions_id_is_made(
        lesson, sessions, monkeypatch):
    """quest.day-1 is a session; quest, the start of its id, is free. A fork onto quest
    is made: a session is its own log, never the logs whose names begin as its id."""
    (sessions / "quest.day-1.jsonl").write_bytes(M2 + b"\n")
    expect_fork_made(lesson, sessions, "quest", monkeypatch,
                     "with quest.day-1, another session, in the folder",
                     "an id is taken by its own log only, not by another session "
                     "whose id begins with it")


@pytest.mark.task("03.1")
@pytest.mark.task("03.2")
def test_a_fork_onto_an_id_that_differs_from_a_session_only_in_case_is_made(
        lesson, sessions, monkeypatch):
    """what-if is a session; What-If, on a disk that keeps case (Linux's), is another
    id, and free: a fork onto it is made, and what-if is left as it was."""
    (sessions / "what-if.jsonl").write_bytes(M2 + b"\n")
    if (sessions / "WHAT-IF.jsonl").exists():
        pytest.skip("this disk folds case: what-if and What-If name one file here")
    expect_fork_made(lesson, sessions, "What-If", monkeypatch,
                     "with what-if, another session, in the folder",
                     "ids are kept as they were given, capitals included, and on a "
                     "disk that keeps case, What-If is not what-if")


@pytest.mark.task("03.1")
@pytest.mark.task("03.2")
def test_a_fork_in_a_sessions_folder_reached_through_a_link_is_made(
        lesson, sessions, monkeypatch):
    """The sessions folder is reached through a symbolic link (a home folder moved to
    another disk, a link left at its old place): a fork there is made like anywhere
    else. Only a link at the fork's own name is refused, never a link on the way."""
    disk = sessions / "disk"
    disk.mkdir(mode=0o700)
    (sessions / "home").symlink_to(disk)
    expect_fork_made(lesson, sessions / "home", "what-if", monkeypatch,
                     "in a sessions folder reached through a symbolic link",
                     "a link on the way to the folder is no link at the fork's name")


@pytest.mark.task("03.1")
def test_a_source_log_that_is_a_symbolic_link_is_forked_as_load_reads_it(
        lesson, sessions, monkeypatch):
    """quest-1's log is a symbolic link to a file on another disk (a user who keeps a
    long session elsewhere and links it into the folder): load() reads it through the
    link, so its messages are quest-1's, and a fork of quest-1 copies them into a
    file of its own, never refused as a link, nor reported missing. The link and the
    file it points to stay as they were."""
    disk = sessions.parent / "other-disk"
    disk.mkdir(mode=0o700, exist_ok=True)
    real = disk / "quest-1.jsonl"
    real.write_bytes(M1 + b"\n" + M2 + b"\n")
    (sessions / "quest-1.jsonl").symlink_to(real)
    loaded = lesson.SessionLog(sessions, "quest-1").load()
    handed = handed_to_publishing(lesson, monkeypatch)

    error = fork_or_fail(lesson, sessions, "quest-1", "what-if")

    said = ("quest-1.jsonl is a symbolic link to a log on another disk, which load() "
            f"reads through the link ({len(loaded)} messages); a fork of quest-1 onto "
            "what-if should copy them")
    if error is not None:
        pytest.fail(f"{said}, and it raised {described(error)}: the source's messages "
                    "are those load() finds, whatever name reaches its file, and only "
                    "a link at the fork's own name is refused", pytrace=False)
    fork_path = sessions / "what-if.jsonl"
    held = fork_path.read_bytes() if fork_path.exists() else None
    if held != real.read_bytes() or fork_path.is_symlink():
        said = (f"{said}, and the fork returned, its log "
                + ("missing" if held is None else "a symbolic link"
                   if fork_path.is_symlink() else f"holding {held!r}")
                + f", where a file of its own holding {real.read_bytes()!r} was "
                "expected")
        fail_in("03.2" if handed == [("what-if", 2)] else "03.1", said)
    link = sessions / "quest-1.jsonl"
    if not link.is_symlink() or real.read_bytes() != M1 + b"\n" + M2 + b"\n":
        pytest.fail(f"{said}; it did, but left the link or the file it points to "
                    "changed: a fork only reads its source", pytrace=False)


@pytest.mark.task("03.1")
def test_a_relative_folder_names_the_one_under_the_working_folder_of_each_call(
        lesson, sessions, monkeypatch):
    """A sessions folder given as a relative path names the folder of that name under
    the working folder as the fork is asked: a program that moves to another working
    folder (a server that serves each user from their home) and forks in 'sessions'
    again reads that folder's source and makes the fork there, as its caller will
    look for it, never in the folder an earlier fork found."""
    homes = {}
    for user, said in (("ann", M1), ("bob", M2)):
        homes[user] = sessions / user
        (homes[user] / "sessions").mkdir(parents=True, mode=0o700)
        (homes[user] / "sessions" / "quest-1.jsonl").write_bytes(said + b"\n")
    for user in ("ann", "bob"):
        monkeypatch.chdir(homes[user])
        error = fork_or_fail(lesson, "sessions", "quest-1", "what-if")
        if error is not None:
            pytest.fail(f"in {user}'s home, a fork of quest-1 onto what-if in the "
                        f"relative folder 'sessions' raised {described(error)}, where "
                        f"{user}'s sessions/quest-1 should be forked", pytrace=False)
    held = {user: (home / "sessions" / "what-if.jsonl").read_bytes()
            if (home / "sessions" / "what-if.jsonl").exists() else None
            for user, home in homes.items()}
    assert held == {"ann": M1 + b"\n", "bob": M2 + b"\n"}, (
        "a fork of quest-1 onto what-if was asked in the relative folder 'sessions', "
        "first from ann's home, then from bob's (each holds its own "
        f"sessions/quest-1.jsonl); the forks' logs hold {held}: each fork reads and "
        "makes the files of the folder its relative path names as it is asked, under "
        "the working folder of that call, not under one an earlier fork saw")


@pytest.mark.task("03.1")
@pytest.mark.parametrize("folder", ["~/sessions", "$HOME/sessions"])
def test_a_folder_is_named_as_sessionlog_names_it_never_expanded(
        lesson, sessions, monkeypatch, folder):
    """Without task 03.2: a sessions folder named '~/sessions' or '$HOME/sessions' is
    the folder of that very name under the working folder, as SessionLog takes it (a
    shell expands ~ and $HOME, Python's paths do not). The fork reads the source
    SessionLog wrote there, whose messages load() finds, and hands publish_fork that
    folder, never the home folder, whose sessions are another user's, or another
    program's."""
    home, work = sessions / "home", sessions / "work"
    (home / "sessions").mkdir(parents=True, mode=0o700)
    (home / "sessions" / "quest-1.jsonl").write_bytes(M2 + NEWLINE)
    work.mkdir(mode=0o700)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    with lesson.SessionLog(folder, "quest-1") as log:
        log.append(json.loads(M1))
    written = [path.parent for path in work.rglob("quest-1.jsonl")]
    handed = []
    monkeypatch.setattr(lesson, "publish_fork",
                        lambda folder, source_id, new_id, count, copy, durable:
                        handed.append((os.path.realpath(folder), copy)))

    error = fork_or_fail(lesson, folder, "quest-1", "what-if")

    expected = [(os.path.realpath(written[0]), M1 + NEWLINE)]
    if handed != expected:
        got = ("nothing, and raised " + described(error) if error is not None
               and not handed else "nothing" if not handed else
               f"the folder {handed[0][0]} and {handed[0][1]!r}")
        pytest.fail(f"SessionLog({folder!r}, 'quest-1') wrote its log in "
                    f"{written[0]}, under the working folder; a fork of quest-1 in "
                    f"the folder {folder!r} should hand publish_fork that folder and "
                    f"a copy of that log ({M1 + NEWLINE!r}). It handed {got}: the "
                    f"folder is named as SessionLog names it, {folder!r} word for "
                    "word, never expanded to the home folder", pytrace=False)


@pytest.mark.task("03.1")
def test_a_source_that_cannot_be_read_is_not_reported_missing(
        lesson, sessions, day_one):
    """A process that has run out of file descriptors (a busy server) cannot open
    quest-1's log. The fork fails, with the error that happened, never as a source
    with no log (SessionNotFound): its user would believe quest-1 gone, and start it
    afresh. Nothing is made."""
    before = snapshot(sessions)

    def work():
        # Every descriptor below the limit is taken: the next one opened is refused
        # (EMFILE), as in a server that holds too many files.
        lowest = os.open(os.devnull, os.O_RDONLY)
        os.close(lowest)
        resource.setrlimit(resource.RLIMIT_NOFILE,
                           (lowest, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        lesson.fork(sessions, "quest-1", "what-if")
        return "the fork was made"

    outcome = unless_unfinished(in_child(work))
    if isinstance(outcome, dict) and "raised" in outcome and outcome.get(
            "raised") not in ("SessionNotFound", "FileNotFoundError") and (
            "quest-1" not in outcome.get("message", "")):
        pytest.fail("quest-1's log is there, but this process could open no file "
                    "(EMFILE, too many open files): the fork failed, as it should, "
                    f"but with {outcome['raised']}: {outcome['message']}, whose words "
                    "name neither quest-1 nor its log: the error that happened "
                    "reaches the caller as it came, naming the file it could not "
                    "read, so that whoever reads it knows which log to look at",
                    pytrace=False)
    if not isinstance(outcome, dict) or outcome.get("raised") in (
            "SessionNotFound", "FileNotFoundError"):
        said = (f"{outcome['raised']}: {outcome['message']}"
                if isinstance(outcome, dict) else outcome)
        pytest.fail("quest-1's log is there, but this process could open no file "
                    "(EMFILE, too many open files): the fork should fail with the "
                    f"error that happened, and it gave {said}. A log that cannot be "
                    "read is no missing session: told so, its user believes quest-1 "
                    "gone", pytrace=False)
    expect_unchanged(sessions, before,
                     "a fork that could not read its source must leave every file as "
                     f"it was: the folder held {sorted(before)}, and now holds "
                     f"{sorted(snapshot(sessions))}")


@pytest.mark.task("03.1")
def test_a_source_its_user_may_not_read_is_not_reported_missing(
        lesson, sessions, day_one, monkeypatch):
    """quest-1's log is there, but opening it is refused (EACCES: its mode changed by
    another tool, or an access rule): the fork fails with that PermissionError, as it
    came, never as a source with no log (SessionNotFound), which would tell its user
    that quest-1 is gone. Nothing is made. (The refusal is played by failing each way
    of opening the source, as tests run as root may read any file.)"""
    import builtins
    import io
    source = sessions / "quest-1.jsonl"
    before = snapshot(sessions)
    came = []

    def is_source(path):
        return leads_to(path, source)

    def refusing(real):
        def opening(file, *args, **kwargs):
            if not isinstance(file, int) and is_source(file):
                came.append(file)
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES),
                                      str(file))
            return real(file, *args, **kwargs)
        return opening
    with monkeypatch.context() as patch:
        for owner in (builtins, io, os):
            patch.setattr(owner, "open", refusing(owner.open))
        error = fork_or_fail(lesson, sessions, "quest-1", "what-if")
    if not came:
        pytest.skip("this fork opened its source by no open() the test can refuse "
                    "(nothing to check)")
    if not isinstance(error, PermissionError):
        pytest.fail("quest-1's log is there, but opening it was refused (EACCES, "
                    "permission denied); the fork should fail with that "
                    "PermissionError, as it came, and it "
                    + ("returned" if error is None else f"raised {described(error)}")
                    + ": a log that cannot be read is no missing session, and told "
                    "so, its user believes quest-1 gone", pytrace=False)
    expect_unchanged(sessions, before,
                     "a fork whose source could not be opened (EACCES) must leave "
                     f"every file as it was: the folder held {sorted(before)}, and now "
                     f"holds {sorted(snapshot(sessions))}")


@pytest.mark.task("03.1")
def test_a_source_its_user_may_only_read_is_forked(lesson, sessions, day_one,
                                                    monkeypatch):
    """Without task 03.2: quest-1's log may be read but not written (mode 0400, a log
    restored read-only, a disk mounted read-only). A fork only reads its source: it is
    made all the same, its copy whole. (Opening the source for writing is refused as
    the system refuses it to a user who is not root: tests run as root may write any
    file.)"""
    import builtins
    import io
    source = sessions / "quest-1.jsonl"
    source.chmod(0o400)
    came = []

    def is_source(path):
        return leads_to(path, source)

    def refusing(real, writes):
        def opening(file, *args, **kwargs):
            how = args[0] if args else kwargs.get("mode", kwargs.get("flags", "r"))
            if not isinstance(file, int) and is_source(file) and writes(how):
                came.append(how)
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES),
                                      str(file))
            return real(file, *args, **kwargs)
        return opening
    write_flags = (os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC)
    handed = []
    with monkeypatch.context() as patch:
        for owner in (builtins, io):
            patch.setattr(owner, "open", refusing(
                owner.open, lambda mode: any(c in str(mode) for c in "wax+")))
        patch.setattr(os, "open", refusing(
            os.open, lambda flags: isinstance(flags, int) and flags & write_flags))
        patch.setattr(lesson, "publish_fork",
                      lambda folder, source_id, new_id, count, copy, durable:
                      handed.append((count, copy)))
        error = fork_or_fail(lesson, sessions, "quest-1", "what-if")
    whole = (len(day_one), source.read_bytes())
    if error is not None or handed != [whole]:
        pytest.fail("quest-1's log may be read but not written (mode 0400); a fork of "
                    "it should be made, its copy the whole log, and it "
                    + (f"raised {described(error)}" if error is not None
                       else f"handed publish_fork {handed}")
                    + (f", having opened the source for writing ({came[0]!r})"
                       if came else "")
                    + ": a fork only reads its source, and needs no right to write "
                    "it", pytrace=False)


@pytest.mark.task("03.1")
@pytest.mark.task("03.2")
def test_a_fork_of_a_fork_names_its_own_source_as_parent(
        lesson, sessions, day_one, monkeypatch):
    """A fork can be forked in turn: what-if, a fork of quest-1's first 3 messages,
    forked onto what-if-2 with upto=2. what-if-2's lineage names its own source,
    what-if, and the 2 messages it copied, not the session the history began in:
    each meta file is one step of the chain, which a reader follows parent by
    parent."""
    lesson.fork(sessions, "quest-1", "what-if", upto=3)
    publish = getattr(lesson, "publish_fork", None)
    parents = parents_handed_to_publishing(lesson, monkeypatch)

    error = fork_or_fail(lesson, sessions, "what-if", "what-if-2", upto=2)

    if parents and parents != ["what-if"]:
        fail_in("03.1", "fork(sessions, 'what-if', 'what-if-2', upto=2), what-if being "
                "a fork of quest-1, should hand publish_fork its source, 'what-if', "
                f"as the parent; it handed {parents[0]!r}: the lineage names the "
                "session the fork was made from, not the one its history began in")
    if error is not None:
        said = (f"a fork of what-if (itself a fork of quest-1) onto what-if-2 raised "
                f"{described(error)}: a fork is a session like any other, and can be "
                "forked")
        fail_in("03.2" if parents else "03.1", said) if publish else pytest.fail(
            said, pytrace=False)
    expect_whole_fork(lesson, sessions, "what-if-2", "what-if", day_one[:2],
                      "a fork of 2 messages of what-if (a fork of quest-1)",
                      task="03.2" if parents else None)


@pytest.mark.task("03.1")
@pytest.mark.parametrize("upto", [-1, -5])
def test_a_negative_upto_is_refused(lesson, sessions, day_one, upto):
    """A negative upto raises ValueError and creates nothing."""
    before = snapshot(sessions)

    error = fork_or_fail(lesson, sessions, "quest-1", "what-if", upto=upto)

    assert isinstance(error, ValueError), (
        f"fork(..., upto={upto}) should raise ValueError: a number of messages cannot "
        "be negative, and counted from the end it would quietly drop the last ones; "
        "it "
        + ("returned" if error is None else f"raised {type(error).__name__}: {error}"))
    expect_unchanged(sessions, before, "a refused fork must not create any file")
    expect_upto_named(lesson, sessions, error, upto, "a negative number of messages")


@pytest.mark.task("03.1")
def test_upto_equal_to_the_length_copies_everything(lesson, sessions, day_one):
    """upto equal to the number of messages is allowed and copies them all."""
    error = fork_or_fail(lesson, sessions, "quest-1", "all-of-it", upto=len(day_one))

    assert error is None, (
        f"the source holds {len(day_one)} messages, so upto={len(day_one)} asks for "
        f"all of them and is allowed; fork raised {type(error).__name__}: {error}")
    copied = (sessions / "all-of-it.jsonl").read_bytes()
    assert copied == (sessions / "quest-1.jsonl").read_bytes(), (
        f"upto={len(day_one)}, the number of messages quest-1 holds, should copy all "
        f"of its {len((sessions / 'quest-1.jsonl').read_bytes())} bytes; the fork "
        f"holds {len(copied)} bytes that differ")


@pytest.mark.task("03.1")
@pytest.mark.task("03.2")
def test_a_whole_fork_records_how_many_messages_it_copied(lesson, sessions, day_one):
    """A fork without upto records forked_at as the number of messages copied."""
    lesson.fork(sessions, "quest-1", "what-if")

    meta = json.loads((sessions / "what-if.meta.json").read_text(encoding="utf-8"))
    assert meta.get("forked_at") == len(day_one), (
        f"a whole fork copied {len(day_one)} messages, so forked_at is "
        f"{len(day_one)}; the meta file says {meta.get('forked_at')!r}")


@pytest.mark.task("03.2")
def test_a_fork_that_fails_half_way_leaves_no_session(lesson, sessions, day_one):
    """A fork that cannot write all its log (disk full) raises and leaves no session."""
    source = (sessions / "quest-1.jsonl").read_bytes()

    kind, message, _ = with_file_size_limit(
        len(source) // 2, lambda: lesson.fork(sessions, "quest-1", "what-if"))
    if kind == "NotImplementedError":
        raise NotImplementedError(message)

    left = sorted(p.name for p in sessions.iterdir())
    fork_path = sessions / "what-if.jsonl"
    if kind == "ok":
        held = len(fork_path.read_bytes()) if fork_path.exists() else 0
        pytest.fail(f"the disk took only {len(source) // 2} of the fork's "
                    f"{len(source)} bytes and fork returned as if it had worked; its "
                    f"log holds {held} bytes, a session cut short that looks whole")
    assert left == ["quest-1.jsonl"], (
        f"the fork failed ({kind}) half way through, and left {left}: a half-written "
        "session (or a temporary file) that looks real")


@pytest.mark.task("03.2")
@pytest.mark.task("03.1")
def test_a_fork_is_readable_by_its_owner_only(lesson, sessions, day_one):
    """The fork's log and meta file are mode 0600, like the log it copies, whatever
    the umask, and whatever mode another tool left on the source (0644 here)."""
    (sessions / "quest-1.jsonl").chmod(0o644)
    old_umask = os.umask(0o022)
    try:
        lesson.fork(sessions, "quest-1", "what-if")
    finally:
        os.umask(old_umask)

    modes = {name: oct((sessions / name).stat().st_mode & 0o777)
             for name in ("what-if.jsonl", "what-if.meta.json")}
    assert set(modes.values()) == {"0o600"}, (
        "a session holds what a person said; its copy must be as private: modes "
        f"{modes} under a umask of 022 (the source's mode 0o644), expected 0o600 for "
        "both, whatever the source's")


@pytest.mark.task("03.2")
@pytest.mark.task("03.1")
def test_a_fork_never_writes_through_a_link_planted_at_its_name(
        lesson, sessions, day_one, tmp_path):
    """A symbolic link at the new log's name is refused, not followed, and left
    where it is, as it was: a refused fork changes no file, a link neither."""
    outside = tmp_path / "outside.jsonl"
    link = sessions / "what-if.jsonl"
    link.symlink_to(outside)
    before = sorted(p.name for p in sessions.iterdir())

    error = fork_or_fail(lesson, sessions, "quest-1", "what-if")

    assert not outside.exists(), (
        "a symbolic link at what-if.jsonl pointed outside the sessions folder, and "
        f"the fork wrote through it to {outside.name}, a file no session owns")
    assert isinstance(error, FileExistsError), (
        "the name what-if.jsonl was taken (by a link to nowhere); fork should refuse "
        "with SessionExists, it "
        f"{'returned' if error is None else 'raised ' + type(error).__name__}")
    after = sorted(p.name for p in sessions.iterdir())
    kept = link.is_symlink() and os.readlink(link) == str(outside)
    assert kept and after == before, (
        f"the folder held {before}, what-if.jsonl a link to {outside.name}; the fork "
        f"onto what-if was refused, as it should be, and left {after}"
        + ("" if kept else ", the link gone or changed")
        + ": a refused fork leaves every name as it was, a link it did not make too")


@pytest.mark.task("03.2")
@pytest.mark.parametrize("points_to", ["another session's meta file",
                                       "a name outside the folder, no file yet"])
def test_a_link_planted_at_the_meta_files_name_is_replaced_not_written_through(
        lesson, sessions, day_one, tmp_path, points_to):
    """A symbolic link at the new meta file's name, with no log beside it, is what
    the fork replaces, as it replaces any meta file left there: the lineage is written
    under the fork's own name, never through the link to the file it points to, which
    stays as it was (or is never created)."""
    if points_to.startswith("another"):
        target = sessions / "other.meta.json"
        target.write_bytes(b'{"format": 1, "id": "other", "parent": "quest-0"}')
    else:
        target = tmp_path / "outside.meta.json"
    before = target.read_bytes() if target.exists() else None
    link = sessions / "what-if.meta.json"
    link.symlink_to(target)

    error = fork_or_fail(lesson, sessions, "quest-1", "what-if")

    after = target.read_bytes() if target.exists() else None
    said = (f"what-if.meta.json was a symbolic link to {points_to} ({target.name}), "
            "with no log beside it; the fork of quest-1 onto what-if ")
    if error is not None:
        fail_in("03.2", said + f"raised {type(error).__name__}: {error}: a meta file "
                "with no log takes no id, a link there neither, and the fork replaces "
                "it")
    if after != before:
        fail_in("03.2", said + f"changed {target.name}: "
                + (f"it held {before!r} and holds {after!r}" if before is not None
                   else f"it was not there and holds {after!r}")
                + ": the lineage went through the link, to a file no fork of what-if "
                "owns; it belongs under the fork's own name, the link replaced")
    if link.is_symlink():
        fail_in("03.2", said + f"left the link to {target.name} at the meta file's "
                "name: the lineage belongs in a file of the fork's own there")
    lineage = json.loads(link.read_bytes())
    if lineage.get("id") != "what-if" or lineage.get("parent") != "quest-1":
        fail_in("03.2", said + f"left what-if.meta.json holding {lineage}: the fork's "
                "own lineage, id 'what-if', parent 'quest-1', was expected")


@pytest.mark.task("03.2")
def test_a_fork_never_replaces_a_session_created_meanwhile(lesson, sessions, day_one):
    """If the new id is taken during the fork's read, it refuses, replacing none."""
    # The source is a FIFO, so the fork's read waits for this thread: while it waits,
    # another "process" creates session what-if; only then does the source's content
    # arrive.
    os.mkfifo(sessions / "dream.jsonl")
    other = b'{"role": "user", "content": "another writer was here first"}\n'

    fed = threading.Event()
    fork_returned = threading.Event()

    def feed_the_source():
        while not fork_returned.is_set():
            try:   # with no reader yet, a non-blocking open fails: wait for the fork
                fd = os.open(sessions / "dream.jsonl", os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError:
                time.sleep(0.002)
        else:
            return
        (sessions / "what-if.jsonl").write_bytes(other)
        fed.set()
        os.set_blocking(fd, True)
        os.write(fd, (sessions / "quest-1.jsonl").read_bytes())
        os.close(fd)
        while not fork_returned.is_set():   # a second read gets nothing, never a hang
            try:
                os.close(os.open(sessions / "dream.jsonl", os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
            time.sleep(0.002)

    feeder = threading.Thread(target=feed_the_source)
    feeder.start()
    try:
        error = fork_or_fail(lesson, sessions, "dream", "what-if")
    finally:
        fork_returned.set()
        feeder.join()
    if not fed.is_set():    # the fork never read this source (it may refuse a FIFO)
        assert error is not None, "the fork returned without reading its source"
        return

    path = sessions / "what-if.jsonl"
    now = path.read_bytes() if path.exists() else None
    assert now == other, (
        "session what-if was created by someone else while the fork read its source, "
        "and the fork replaced it: what the other writer wrote there is gone")
    assert isinstance(error, FileExistsError), (
        "the fork should refuse with SessionExists when its name is taken at the "
        "last moment; it "
        + ("returned" if error is None else f"raised {type(error).__name__}: {error}"))
    left = sorted(p.name for p in sessions.iterdir())
    if left != ["dream.jsonl", "quest-1.jsonl", "what-if.jsonl"]:
        fail_in("03.2", "session what-if was created by another writer while the fork "
                "read its source, and the fork was refused, as it should be; but the "
                f"folder now holds {left}, where it held dream.jsonl, quest-1.jsonl "
                "and the other writer's what-if.jsonl. A fork that raises leaves "
                "neither of its files: a what-if.meta.json left there gives the other "
                "writer's session a lineage it never had")


@pytest.mark.task("03.2")
def test_a_fork_never_replaces_a_log_created_just_before_its_own_is_named(
        lesson, sessions, day_one, monkeypatch):
    """Another writer creates session what-if's log at the last instant: after the
    fork's checks, just before the fork's log gets its name (by a rename or a link).
    A check made earlier is no promise: the fork refuses with SessionExists, the other
    writer's log keeps its bytes, and no file of the fork is left beside it."""
    before = snapshot(sessions)
    other = b'{"role": "user", "content": "another writer was here first"}\n'
    target = sessions / "what-if.jsonl"
    created = []

    def first_another_writer(real):
        def step(src, dst, *args, **kwargs):
            if os.path.basename(os.fspath(dst)) == target.name and not created:
                created.append(os.path.basename(os.fspath(src)))
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                try:
                    os.write(fd, other)
                finally:
                    os.close(fd)
            return real(src, dst, *args, **kwargs)
        return step
    with monkeypatch.context() as patch:
        for call_name in ("link", "rename", "replace"):
            patch.setattr(os, call_name, first_another_writer(getattr(os, call_name)))
        error = fork_or_fail(lesson, sessions, "quest-1", "what-if")
    if not created:
        return      # the log got its name by no rename or link: nothing to race
    now = target.read_bytes() if target.exists() else None
    if now != other:
        fail_in("03.2", "another writer created session what-if's log just before the "
                "fork's own log got its name, and the fork "
                + ("took it away" if now is None else "replaced it")
                + ": what the other writer wrote there is gone. The log never lands "
                "over a name that exists, whatever was checked before: the step that "
                "names it must be the one that refuses a name taken")
    if not isinstance(error, lesson.SessionExists):
        fail_in("03.2", "another writer created session what-if's log just before the "
                "fork's own log got its name; the fork should refuse with "
                "SessionExists, and it "
                + ("returned" if error is None
                   else f"raised {type(error).__name__}: {error}"))
    if "what-if" not in str(error).replace(str(sessions), ""):
        fail_in("03.2", "another writer created session what-if's log just before the "
                "fork's own log got its name, and the fork was refused with "
                "SessionExists, as it should be; but its words do not name what-if, "
                f"the id taken: {error}. Whoever reads it must know which session is "
                "there already, and it is not the source")
    left = sorted(set(snapshot(sessions)) - set(before) - {target.name})
    if left:
        fail_in("03.2", "another writer created session what-if's log just before the "
                "fork's own log got its name, and the fork was refused, as it should "
                f"be, but left {left} beside it: a fork that raises leaves none of its "
                "files, and a meta file there gives the other writer's session a "
                "lineage it never had")


@pytest.mark.task("03.2")
def test_two_forks_onto_two_ids_at_once_in_one_process_each_hold_their_own(
        lesson, sessions, day_one, monkeypatch):
    """A server forks for many users at once, in threads of one process: while a fork
    of quest-1 onto what-if is about to give its log its name, another fork, of
    quest-1's first message onto 'other', runs in another thread. Both are made, each
    whole and its own, and the other does not wait for the first: nothing one fork
    writes or holds on its way (a temporary file, a name, a lock) is shared."""
    target = sessions / "what-if.jsonl"
    other, handed = {}, {}
    source = (sessions / "quest-1.jsonl").read_bytes()
    publish = getattr(lesson, "publish_fork", None)
    if publish is not None:     # a later lesson's store may publish otherwise
        def publish_fork(folder, source_id, new_id, count, copy, durable):
            handed[new_id] = (count, bytes(copy))
            return publish(folder, source_id, new_id, count, copy, durable)
        monkeypatch.setattr(lesson, "publish_fork", publish_fork)

    def fork_the_other():
        other["error"] = fork_or_fail(lesson, sessions, "quest-1", "other", upto=1)

    def meanwhile(real):
        def step(src, dst, *args, **kwargs):
            if os.path.basename(os.fspath(dst)) == target.name and not other:
                other["error"] = "did not finish"
                thread = threading.Thread(target=fork_the_other)
                thread.start()
                thread.join(5)  # a fork that waits for this one goes on after it
                other["thread"], other["waited"] = thread, thread.is_alive()
            return real(src, dst, *args, **kwargs)
        return step
    with monkeypatch.context() as patch:
        for call_name in ("link", "rename", "replace"):
            patch.setattr(os, call_name, meanwhile(getattr(os, call_name)))
        error = fork_or_fail(lesson, sessions, "quest-1", "what-if")
    if "thread" in other:
        other["thread"].join()
    if not other:
        return      # the log got its name by no rename or link: nothing met
    when = ("while a fork of quest-1 onto what-if was giving its log its name, another "
            "fork, of quest-1's first message onto 'other', ran in another thread of "
            "the same process")
    for new_id, failed, messages in (("what-if", error, day_one),
                                     ("other", other["error"], day_one[:1])):
        right = (len(messages), b"".join(source.splitlines(True)[:len(messages)]))
        if new_id in handed and handed[new_id] != right:
            fail_in("03.1", f"{when}; the fork onto {new_id} handed publish_fork "
                    f"{handed[new_id][0]!r} messages, and a copy of "
                    f"{len(handed[new_id][1])} bytes, where the first "
                    f"{len(messages)} message(s) of quest-1 ({len(right[1])} bytes) "
                    "were asked for")
        if failed is not None:
            fail_in("03.2", f"{when}; the fork onto {new_id} raised {described(failed)}"
                    ", where both should be made: two forks onto two ids share "
                    "nothing, not even a temporary file's name")
        expect_whole_fork(lesson, sessions, new_id, "quest-1", messages, when,
                          task="03.2")
    if other.get("waited"):
        fail_in("03.2", f"{when}; held just before its log got its name, the fork "
                "onto what-if kept the other from finishing: after 5 s the fork onto "
                "'other' was still waiting, and went on only once what-if was "
                "published. Two forks onto two ids share nothing, not a lock: on a "
                "server, one slow fork (a large durable copy, a slow disk) would hold "
                "up every user's fork")
