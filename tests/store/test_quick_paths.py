"""The store's quick paths give the answers of the slow ones, and nothing else.

Loading reads an ordinary log in one pass (read_lines_quickly) and falls back to reading
line by line (read_lines) at anything unusual; fork copies the bytes it knows the lines of
a log end at, when this process has read or written the log and it has not changed since
(KNOWN_LOGS); a writer's undo works from what the writer keeps, reading nothing. Each test
here compares a quick path with the slow one it stands for, or proves it was not taken.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from sessionlab.testing import raises

ASK = {"role": "user", "content": "Ask the elder about the cave, s'il vous plaît."}
CALL = {"role": "assistant", "content": "", "tool_calls": [
    {"id": "call_1", "type": "function",
     "function": {"name": "talk_to", "arguments": '{"npc": "elder"}'}}]}
RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "Bring a torch."}
ANSWER = {"role": "assistant", "content": "The elder wants a torch. Café?"}
TURN = [ASK, CALL, RESULT, ANSWER]


def line(entry) -> bytes:
    return json.dumps(entry, ensure_ascii=False).encode("utf-8") + b"\n"


GOOD = line(ASK)


@pytest.fixture(autouse=True)
def forget_known_logs(store):
    """Each test starts with a process that knows no log (the registry is per module)."""
    store.KNOWN_LOGS.clear()
    yield
    store.KNOWN_LOGS.clear()


def fork_both_ways(store, folder: Path, source: str, upto: int | None) -> tuple[bytes, bytes]:
    """The same fork twice: from what the process knows, then with that forgotten (the
    log read from disk). Returns both forks' bytes."""
    assert store.KNOWN_LOGS, "the process should know the log before the first fork"
    real, reads = store.read_open_log, []
    store.read_open_log = lambda *args: reads.append(args) or real(*args)
    try:
        known = store.fork(folder, source, f"known-{upto}", upto=upto).read_bytes()
    finally:
        store.read_open_log = real
    assert not reads, "the fork read the log again, although the process knew it"
    store.KNOWN_LOGS.clear()
    read = store.fork(folder, source, f"read-{upto}", upto=upto).read_bytes()
    return known, read


# --- fork: from what is known, the same bytes as from disk ------------------------------


def test_a_fork_from_what_the_writer_knows_equals_the_fork_read_from_disk(store, tmp_path):
    """A session written by this process (two turns, a large content in a blob, an undo,
    a repair after a crash): fork(upto=k), for every k, copies the very bytes a fork that
    reads the log from disk copies."""
    folder = tmp_path / "sessions"
    with store.SessionLog(folder, "quest") as log:
        for message in TURN + [{"role": "user", "content": "A map: " + "x" * 9000}]:
            log.append(message)
        log.append(CALL)            # a call left unanswered, as a crash leaves it
    with store.SessionLog(folder, "quest") as log:
        shown = log.open_for_append()       # the repair answers the call
        log.undo(2)
        log.append(ANSWER)
        shown = log.load()
        for upto in [None, *range(len(shown) + 1)]:
            store.KNOWN_LOGS.clear()
            log.close()
            log.open_for_append()           # the writer knows the log again
            known, read = fork_both_ways(store, folder, "quest", upto)
            assert known == read, (
                f"fork(upto={upto}) from what the writer knows copied {len(known)} bytes, "
                f"from the log read from disk {len(read)}: they should be the same bytes")
            expected = len(shown) if upto is None else upto
            assert store.SessionLog(folder, f"known-{upto}").load() == shown[:expected]


def test_a_fork_from_what_a_load_learned_equals_the_fork_read_from_disk(store, tmp_path):
    """A log written by hand, as older code or a crash leaves it (an empty line, a torn
    tail, a last line without its newline), then loaded: forks from what the load
    learned are the forks read from disk, and copy no torn byte."""
    folder = tmp_path / "sessions"
    folder.mkdir(mode=0o700)
    path = folder / "quest.jsonl"
    for tail in (b'{"role": "user", "con', line(ANSWER).rstrip(b"\n")):
        store.KNOWN_LOGS.clear()
        for leftover in folder.iterdir():
            leftover.unlink()
        path.write_bytes(line(ASK) + b"\n" + line(CALL) + line(RESULT) + tail)
        shown = store.SessionLog(folder, "quest").load()
        for upto in [None, *range(len(shown) + 1)]:
            store.SessionLog(folder, "quest").load()        # known again
            known, read = fork_both_ways(store, folder, "quest", upto)
            assert known == read, (
                f"with the tail {tail!r}, fork(upto={upto}) from what load learned copied "
                f"{known!r}, from the log read from disk {read!r}")
            assert b"con" not in known.split(b"\n")[-1], "a torn tail was copied"
            assert known.endswith(b"\n") or not known, (
                f"a fork should end on a whole line, newline included: {known[-40:]!r}")


def test_a_log_changed_behind_the_process_is_read_again(store, tmp_path):
    """The process knows a log, then it changes behind its back: lines appended by hand,
    the same bytes in another order (same size, another mtime), the name given to
    another file. Each fork copies what the file holds now, never from stale offsets."""
    folder = tmp_path / "sessions"
    path = folder / "quest.jsonl"
    short, long = line({"role": "user", "content": "hi"}), line(ANSWER)
    with store.SessionLog(folder, "quest") as log:
        log.append({"role": "user", "content": "hi"})
        log.append(ANSWER)

    with open(path, "ab") as file:              # appended by hand
        file.write(line(ASK))
    store.fork(folder, "quest", "appended")
    assert (folder / "appended.jsonl").read_bytes() == short + long + line(ASK), (
        "a fork after lines were appended behind the process's back should copy them too")

    store.SessionLog(folder, "quest").load()    # known again, then reordered in place
    known = os.stat(path)
    with open(path, "r+b") as file:
        file.write(long + short + line(ASK))
    os.utime(path, ns=(known.st_atime_ns, known.st_mtime_ns + 1_000_000_000))
    assert os.stat(path).st_size == known.st_size
    store.fork(folder, "quest", "reordered", upto=1)
    assert (folder / "reordered.jsonl").read_bytes() == long, (
        "the file was rewritten in place (same size, new mtime): fork(upto=1) should "
        "copy its new first line, not the bytes where the old first line ended")

    store.SessionLog(folder, "quest").load()    # known again, then replaced
    other = folder / "other.jsonl"
    other.write_bytes(line(ASK))
    os.replace(other, path)
    store.fork(folder, "quest", "replaced")
    assert (folder / "replaced.jsonl").read_bytes() == line(ASK), (
        "the name now points to another file: the fork should copy that file")


def test_a_fork_known_from_a_writer_that_undid_copies_what_the_source_shows(store, tmp_path):
    """A writer that is still open undoes, appends, undoes: a fork at each step, from
    what it knows, shows what the source shows."""
    folder = tmp_path / "sessions"
    with store.SessionLog(folder, "quest") as log:
        for message in TURN:
            log.append(message)
        log.undo(1)
        store.fork(folder, "quest", "after-undo")
        log.append(ANSWER)
        log.undo(3)
        store.fork(folder, "quest", "after-two")
        shown = log.load()
    assert store.SessionLog(folder, "after-undo").load() == TURN[:3]
    assert store.SessionLog(folder, "after-two").load() == shown == TURN[:1]


@pytest.mark.parametrize("refusal", ["missing", errno.ENOSYS, errno.EXDEV, errno.EINVAL])
def test_a_fork_copies_by_read_and_write_where_the_kernel_cannot(store, tmp_path,
                                                                 monkeypatch, refusal):
    """No os.copy_file_range (not Linux), or one that refuses the two files: the fork
    reads and writes instead, and copies the same bytes."""
    folder = tmp_path / "sessions"
    with store.SessionLog(folder, "quest") as log:
        for message in TURN:
            log.append(message)
    if refusal == "missing":
        monkeypatch.delattr(os, "copy_file_range", raising=False)
    else:
        def refuse(*args, **kwargs):
            raise OSError(refusal, os.strerror(refusal))
        monkeypatch.setattr(os, "copy_file_range", refuse)
    store.fork(folder, "quest", "copy", upto=2)
    assert (folder / "copy.jsonl").read_bytes() == line(ASK) + line(CALL)


# --- undo: nothing read ---------------------------------------------------------------


def test_a_writers_undo_reads_nothing(store, tmp_path, monkeypatch):
    """Once the writer has opened the log, its undos (and appends) call none of the
    module's readers: the writer keeps what they need."""
    folder = tmp_path / "sessions"
    with store.SessionLog(folder, "quest") as log:
        for message in TURN:
            log.append(message)
    with store.SessionLog(folder, "quest") as log:
        log.open_for_append()
        reads = []
        for name in ("read_all", "read_file", "parse_log", "read_open_log",
                     "read_whole_log", "read_log"):
            real = getattr(store, name)
            monkeypatch.setattr(store, name, lambda *a, _n=name, _r=real, **k:
                                reads.append(_n) or _r(*a, **k))
        first = log.undo(1)
        log.append(ANSWER)
        second = log.undo(2)
        monkeypatch.undo()
    assert reads == [], f"the undos read the log ({', '.join(reads)})"
    assert (first, second) == ([3], [2, 4])


# --- load: the quick reader never accepts what the line-by-line one refuses -------------


def both_readers(store, data: bytes):
    """(what read_lines_quickly gave, what read_lines gave or the error it raised)."""
    end = data.rfind(b"\n") + 1
    quick = store.read_lines_quickly(data, end)
    try:
        slow = store.read_lines(data, end, Path("quest.jsonl"))
    except store.CorruptLog as error:
        slow = error
    return quick, slow


ODD_LINES = [
    b"", b" ", b"\t", b"{}", b"{}{}", b"1, 2", b"[]", b"null", b'"text"', b"\xef\xbb\xbf" + GOOD[:-1],
    GOOD[:-1] + b",", GOOD[:-1] + b" ", b" " + GOOD[:-1], GOOD[:-1] + b"\r",
    GOOD[:-1] + b"}", b"{" + GOOD[:-1], GOOD[:-1] + GOOD[:-1], GOOD[:-1] + b", " + GOOD[:-1],
    b'{"role": "user", "content": NaN}', b'{"role": "user", "content": [Infinity]}',
    b'{"role": "user", "content": [1e999]}', b'{"role": "user", "content": "\\ud800"}',
    b'{"role": "user", "content": "\\ud83d\\ude00"}', b'{"role": "user", "content": "\xff"}',
    b'{"role": "user", "content": "\xc3"}', b'{"role": "user", "content": "a\xe2\x80\xa8b"}',
    b'{"role": "user", "content": "\x01"}', b'{"role": "robot", "content": "hi"}',
    b'{"role": "user", "content": {"text": "hi"}}', b'{"$marker": "undo", "skip": "all"}',
    b'{"$marker": "undo", "skip": [0]}', b'{"$marker": "repair"}',
    b'{"role": "user", "content": {"$blob": "../x", "size": 1, "preview": ""}}',
    b'{"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function", '
    b'"function": {"name": "buy", "arguments": "{bad"}}]}',
    b'{"role": "user", "content": "hi", "role": "robot"}',
    b"[" * 100_000, b'{"role": "user", "content": ' + b"[" * 3000 + b"]" * 3000 + b"}",
]
# Two lines that are no JSON each, but whose join would be: a string, or a list, running
# across the line break, made up for by a line holding two values.
SPLIT_PAIRS = [
    (b'{"role": "user", "content": "a', b'b"}, {"role": "user", "content": "c"}'),
    (b'{"role": "user", "content": "a", "x": [1', b'2]}, {"role": "user", "content": "c"}'),
    (b'[{"role": "user", "content": "a"}', b'{"role": "user", "content": "b"}]'),
]


@pytest.mark.parametrize("odd", ODD_LINES + [b"\n".join(pair) for pair in SPLIT_PAIRS],
                         ids=lambda odd: repr(odd[:40]))
def test_the_quick_load_accepts_nothing_the_line_by_line_load_refuses(store, odd):
    """An odd line between two good ones: the quick reader either gives up (None) or
    gives exactly what the line-by-line reader gives; never an answer where the other
    raises CorruptLog. And parse_log, which uses both, answers as the line-by-line
    reader does."""
    data = GOOD + odd + b"\n" + GOOD
    quick, slow = both_readers(store, data)
    if quick is not None:
        assert not isinstance(slow, Exception), (
            f"the quick reader accepted {odd[:60]!r}, which the line-by-line reader "
            f"refuses: {slow}")
        assert quick == slow, f"the two readers read {odd[:60]!r} differently"
    if isinstance(slow, Exception):
        with raises(store.CorruptLog, f"parse_log accepted {odd[:60]!r}") as caught:
            store.parse_log(data, Path("quest.jsonl"))
        assert str(caught.value) == str(slow), (
            f"parse_log should name the line as the line-by-line reader does: "
            f"{caught.value} / {slow}")
    else:
        state = store.parse_log(data, Path("quest.jsonl"))
        assert (state.entries, state.lines, state.ends, state.plain) == slow


FRAGMENTS = [b'{"role": "user", "content": "', b'"}', b'{"$marker": "undo", "skip": [',
             b"]}", b"0", b"1", b", ", b" ", b"{", b"}", b"[", b"]", b'"', b"\\", b"\\n",
             b"\\ud800", b"NaN", b"1e999", b"\xc3\xa9", b"\xff", b"\xef\xbb\xbf", b"\n", b"\r",
             b"null", b'"content": ', b'"role": "tool"', GOOD[:-1], line(CALL)[:-1]]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=24))
def test_the_quick_load_agrees_with_the_line_by_line_load_on_any_bytes(store, pieces):
    """Logs made of fragments of JSON and of trouble (hypothesis): whenever the quick
    reader answers, the line-by-line reader gives the same answer."""
    data = GOOD + b"".join(pieces) + b"\n"
    quick, slow = both_readers(store, data)
    if quick is not None:
        assert quick == slow, f"{data!r}: quick {quick!r}, line by line {slow!r}"


@pytest.mark.parametrize("piece", [1, 7, 64, 300])
@settings(max_examples=100, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(pieces=st.lists(st.sampled_from(FRAGMENTS + [b"\n"] * 4), max_size=40))
def test_the_quick_load_agrees_across_the_pieces_it_decodes(store, monkeypatch, piece,
                                                             pieces):
    """The quick reader decodes a log QUICK_CHUNK bytes of whole lines at a time. With
    pieces as small as one byte (every line then longer than a piece), lines of ASCII
    and not, and trouble anywhere, it answers as the line-by-line reader does."""
    monkeypatch.setattr(store, "QUICK_CHUNK", piece)
    data = GOOD + b"".join(pieces) + b"\n" + line(ANSWER) + GOOD
    quick, slow = both_readers(store, data)
    if quick is not None:
        assert quick == slow, f"{data!r} in pieces of {piece}: quick {quick!r}, " \
                              f"line by line {slow!r}"


@pytest.mark.parametrize("piece", [1, 300, 1 << 20])
def test_json_that_runs_across_a_newline_is_two_lines_to_the_quick_load(store, monkeypatch,
                                                                         piece):
    """JSON may hold a newline as whitespace; a log line may not. A marker whose list
    runs across a newline is two damaged lines, for the quick reader as for the line by
    line one (found by the test above, on a marker's list)."""
    monkeypatch.setattr(store, "QUICK_CHUNK", piece)
    data = GOOD + b'{"$marker": "undo", "skip": [\n]}\n' + line(ANSWER) + GOOD
    quick, slow = both_readers(store, data)
    assert quick is None or quick == slow, f"quick {quick!r}, line by line {slow!r}"
    assert isinstance(slow, Exception) and "line 2" in str(slow), slow


def test_the_quick_load_finds_line_ends_past_pieces_of_ascii_and_not(store, monkeypatch):
    """Byte offsets where lines end, over pieces that are ASCII and pieces that are not
    (where a character takes two to four bytes), are the line-by-line reader's."""
    entries = [{"role": "user", "content": text * size}
               for size in (1, 50, 400) for text in ("torch ", "café ", "洞窟 ", "🕯️ ")]
    data = b"".join(line(entry) for entry in entries)
    for piece in (16, 100, 1000, 1 << 20):
        monkeypatch.setattr(store, "QUICK_CHUNK", piece)
        quick, slow = both_readers(store, data)
        assert quick is not None, f"the quick reader gave up in pieces of {piece}"
        assert quick == slow, f"the readers disagree in pieces of {piece}"
        assert quick[2][-1] == len(data)


def test_a_log_without_markers_shows_every_entry_without_a_list_of_pairs(store):
    """For a log with no marker, what the read remembers as shown answers len(), [i],
    slices, negative indices and iteration as the list [(0, 0), (1, 1), ...] would."""
    data = b"".join(line(entry) for entry in TURN * 3)
    state = store.parse_log(data, Path("quest.jsonl"))
    shown, expected = state.shown_once(), state.shown()
    assert len(shown) == len(expected) == 12
    assert list(shown) == expected
    assert [shown[i] for i in range(-12, 12)] == [expected[i] for i in range(-12, 12)]
    assert shown[3:9:2] == expected[3:9:2]
    for outside in (12, -13):
        with raises(IndexError, f"shown[{outside}] of 12 should raise IndexError"):
            shown[outside]


def test_the_quick_load_reads_an_ordinary_log(store, tmp_path):
    """A log as the store writes it, blobs, markers and non-ASCII text included, is read
    by the quick reader (else the quick path would never be taken), with the line
    numbers and line ends the line-by-line reader gives."""
    folder = tmp_path / "sessions"
    with store.SessionLog(folder, "quest") as log:
        for message in TURN + [{"role": "user", "content": "洞窟 " * 3000}]:
            log.append(message)
        log.undo(1)
    data = (folder / "quest.jsonl").read_bytes()
    quick, slow = both_readers(store, data)
    assert quick is not None, "the quick reader gave up on an ordinary log"
    assert quick == slow


# --- a new writer: no read of a log the process knows, with nothing to repair ----------


def reads_during(store, monkeypatch, action) -> list[str]:
    """The module's readers called while `action` runs."""
    reads: list[str] = []
    for name in ("read_all", "parse_log", "read_open_log"):
        real = getattr(store, name)
        monkeypatch.setattr(store, name, lambda *a, _n=name, _r=real, **k:
                            reads.append(_n) or _r(*a, **k))
    try:
        action()
    finally:
        monkeypatch.undo()
    return reads


def test_a_new_writer_of_a_log_the_process_knows_reads_nothing(store, tmp_path, monkeypatch):
    """A log this process wrote (or loaded), unchanged since, ending with no call open:
    a new writer's append or undo starts from what is known, reads nothing, and writes
    what a writer that read the log would write."""
    folder = tmp_path / "sessions"
    with store.SessionLog(folder, "quest") as log:
        for message in TURN:
            log.append(message)

    def append_and_undo():
        with store.SessionLog(folder, "quest") as log:
            log.append({"role": "user", "content": "And the guard?"})
        with store.SessionLog(folder, "quest") as log:
            assert log.undo(1) == [4]
    assert reads_during(store, monkeypatch, append_and_undo) == []
    assert store.SessionLog(folder, "quest").load() == TURN
    store.KNOWN_LOGS.clear()
    with store.SessionLog(folder, "quest") as log:      # read this time: the same answer
        assert log.undo(1) == [3]


def test_a_new_writer_reads_a_log_left_with_a_call_open_and_repairs_it(store, tmp_path,
                                                                      monkeypatch):
    """The last message written is a call with no result: a new writer in the same
    process does not trust what it knows, reads the log and repairs it."""
    folder = tmp_path / "sessions"
    with store.SessionLog(folder, "quest") as log:
        for message in TURN[:2]:
            log.append(message)
    with store.SessionLog(folder, "quest") as log:
        log.append({"role": "user", "content": "Hello?"})
        assert log.repaired is not None, "the call left open should have been repaired"
    shown = store.SessionLog(folder, "quest").load()
    assert shown[2]["role"] == "tool" and shown[2]["tool_call_id"] == "call_1", shown


def test_a_new_writer_refuses_a_log_damaged_behind_the_process(store, tmp_path):
    """A log the process knows, then damaged in place (same size, a later mtime): a new
    writer reads it again, and refuses it with CorruptLog naming the line, writing
    nothing."""
    folder = tmp_path / "sessions"
    path = folder / "quest.jsonl"
    with store.SessionLog(folder, "quest") as log:
        for message in TURN:
            log.append(message)
    before = os.stat(path)
    data = path.read_bytes()
    damaged = data.replace(b'"role": "tool"', b'"role": "t00l"')
    assert len(damaged) == len(data)
    path.write_bytes(damaged)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    with raises(store.CorruptLog, "a log damaged behind the process's back was written "
                "to by a writer that trusted what it knew") as caught:
        with store.SessionLog(folder, "quest") as log:
            log.append({"role": "user", "content": "Hello?"})
    assert "line 3" in str(caught.value), caught.value
    assert path.read_bytes() == damaged


# A line longer than the page a new writer first reads from the end of a log, and a log
# of ordinary turns well past the window read whole (TAIL_CHUNK): its end alone decides.
LONG_ANSWER = {"role": "assistant",
               "content": "The elder tells the tale of the cave once more. " * 200}
LONG_CALL = {"role": "assistant", "content": LONG_ANSWER["content"], "tool_calls": [
    {"id": "call_9", "type": "function",
     "function": {"name": "buy", "arguments": '{"item": "rope"}'}}]}
HELLO = {"role": "user", "content": "Hello?"}


def long_log(store, folder: Path, end: bytes) -> bytes:
    """Write a log of 400 whole turns ending with `end`; return the turns' bytes."""
    folder.mkdir(mode=0o700)
    turns = b"".join(map(line, TURN)) * 400
    assert len(turns) > 2 * store.TAIL_CHUNK, "the log should be longer than the window"
    assert len(end) > store.LAST_LINE_WINDOW, "the last line should be longer than a page"
    (folder / "quest.jsonl").write_bytes(turns + end)
    return turns


def test_a_new_writer_of_a_long_log_reads_only_its_end_past_a_long_last_line(
        store, tmp_path, monkeypatch):
    """A log longer than the tail's window whose last line, longer than a page, ends
    whole with no call open: a new writer's append reads back to that line's start, not
    the whole log, and adds its line after it, repairing nothing."""
    folder = tmp_path / "sessions"
    end = line(LONG_ANSWER)
    turns = long_log(store, folder, end)

    def append() -> None:
        with store.SessionLog(folder, "quest") as log:
            log.append(HELLO)
            assert log.repaired is None, f"nothing needed a repair: {log.repaired}"
    assert reads_during(store, monkeypatch, append) == [], (
        "the writer read the whole log, although its end needed nothing")
    assert (folder / "quest.jsonl").read_bytes() == turns + end + line(HELLO)


@pytest.mark.parametrize("end", ["torn", "call open"])
def test_a_new_writer_of_a_long_log_repairs_an_end_longer_than_a_page(store, tmp_path,
                                                                      end):
    """The same long log, its last line longer than a page and torn by a crash, or a
    call left without a result: a new writer repairs it as the slow path would (the torn
    bytes cut, the call answered as interrupted) before its own line."""
    folder = tmp_path / "sessions"
    torn = line(LONG_ANSWER)[:-40]
    long_log(store, folder, torn if end == "torn" else line(LONG_CALL))
    with store.SessionLog(folder, "quest") as log:
        log.append(HELLO)
        repaired = log.repaired
    assert repaired is not None, f"a long log whose end is {end} was not repaired"
    shown = store.SessionLog(folder, "quest").load()
    assert shown[:len(TURN) * 400] == TURN * 400, "the whole turns before the end changed"
    if end == "torn":
        assert repaired["cut_bytes"] == len(torn), repaired
        assert shown[len(TURN) * 400:] == [HELLO], shown[len(TURN) * 400:]
    else:
        assert repaired["interrupted"] == ["call_9"], repaired
        after = shown[len(TURN) * 400:]
        assert [m["role"] for m in after] == ["assistant", "tool", "user"], after
        assert after[1]["tool_call_id"] == "call_9" and after[2] == HELLO, after
