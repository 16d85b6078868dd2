"""Lesson 02: loading refuses a line that holds no message (task 02.1, with parse_line).

Another program (an editor, a script, another harness) may write a log. A line that is
not a message the rule allows is refused with an error that names the file and the line,
rather than loaded and sent to a model that then refuses every request.

Run: pytest lessons/02_load            (your code)
     pytest lessons/02_load --solution (the reference)
"""

import json

import pytest

from sessionlab.testing import described, names_line, names_path

GOOD = b'{"role": "user", "content": "Hello."}\n'
BAD_LINES = {
    "no role": b'{"content": "hello"}',
    "a marker, as later lessons write, where a message should be": (
        b'{"$marker": "undo", "skip": [0]}'
    ),
    "a $marker key on a message": (
        b'{"role": "user", "content": "x", "$marker": "undo"}'
    ),
    "a content that is an object": b'{"role": "user", "content": {"text": "x"}}',
    "NaN": b'{"role": "user", "content": "x", "score": NaN}',
    "a number too large for a float (1e999)": (
        b'{"role": "user", "content": "x", "n": 1e999}'
    ),
    "an escaped lone surrogate": b'{"role": "user", "content": "half: \\ud800"}',
    "a tool call without an id": (
        b'{"role": "assistant", "content": "", "tool_calls": '
        b'[{"type": "function", "function": {"name": "buy", '
        b'"arguments": "{}"}}]}'
    ),
    "not JSON at all": b'{"role": "user", "content": ',
    "two messages with no newline between them": (
        b'{"role": "user", "content": "a"}{"role": "user", "content": "b"}'
    ),
    "bytes that are not UTF-8": b'{"role": "user", "content": "caf\xe9"}',
    "a list of two messages": (
        b'[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]'
    ),
    "an empty object, which is no empty line": b"{}",
    "the JSON null, which holds nothing but is no empty line": b"null",
    "a JSON number": b"7",
    "a JSON string holding a message's text": (
        b'"{\\"role\\": \\"user\\", \\"content\\": \\"hi\\"}"'
    ),
    "the JSON true": b"true",
    "a comment, as some tools write above their lines": b"# Day 1 of the quest",
    "an empty list, which is no empty line": b"[]",
    "NUL bytes, as a power cut leaves where a line's bytes never reached the disk": (
        b"\x00" * 24
    ),
    "an integer of 5,000 digits, more than Python's reader converts": (
        b'{"role": "user", "content": "x", "n": ' + b"7" * 5000 + b"}"
    ),
    "a line of another harness's own, its session's metadata (a type, no role)": (
        b'{"type": "session_meta", "payload": {"id": "quest-1", "cwd": "/srv"}}'
    ),
    "a message inside another harness's envelope, as Codex writes its lines": (
        b'{"type": "response_item", "payload": {"type": "message", "role": "user", '
        b'"content": [{"type": "input_text", "text": "hi"}]}}'
    ),
    "a marker of lesson 04's repair, a note about the log that holds no message": (
        b'{"$marker": "repair", "at": "2026-05-01T09:00:00Z", "cut_bytes": 21, '
        b'"cut_preview": "{\\"role\\": \\"user\\", \\"con", "interrupted": []}'
    ),
    "a marker of a later lesson's compaction, a summary of earlier lines": (
        b'{"$marker": "compaction", "summary": "The elder spoke of a cave.", '
        b'"replaces": 12}'
    ),
    "a message inside another harness's envelope, as Claude Code writes its lines": (
        b'{"type": "user", "message": {"role": "user", "content": "hi"}, '
        b'"uuid": "5b0c", "sessionId": "quest-1"}'
    ),
}


@pytest.mark.task("02.1")
@pytest.mark.parametrize("what", sorted(BAD_LINES))
def test_load_refuses_a_line_with_no_message_naming_file_and_line(
    lesson, sessions, what
):
    """A line holding no allowed message (zeros a power cut left among them, another
    harness's line, a message inside its envelope, a marker of any kind a later lesson
    writes) raises an InvalidMessage naming the file by its whole path and line 2, and
    saying why (parse_line's reason)."""
    sessions.mkdir(exist_ok=True)
    path = sessions / "quest-1.jsonl"
    data = GOOD + BAD_LINES[what] + b"\n" + GOOD
    path.write_bytes(data)
    try:
        lesson.parse_line(BAD_LINES[what])
    except ValueError as refused:
        reason = str(refused)
    else:
        pytest.fail(f"parse_line should refuse a line with {what}", pytrace=False)
    expected = ("an InvalidMessage (the lesson's own ValueError: a plain one does not "
                f"say that the log is damaged) naming the file by its whole path "
                f"({path}, not one relative to the working directory: a server keeps "
                "many folders of sessions, each may hold a quest-1.jsonl), its line 2 "
                f"('line 2' or 'quest-1.jsonl:2') and why ({reason!r}), so that "
                "whoever mends the log finds the line and knows what to look for")
    setting = f"line 2 of the log, between two messages, holds {what}"
    with lesson.SessionLog(sessions, "quest-1") as log:
        error = outcome(log)
    if not isinstance(error, BaseException):
        pytest.fail(f"{setting}, and load() accepted it, returning {error!r}: what it "
                    "made of that line would reach the model with every request, and "
                    f"nobody would learn that the log is damaged. Expected {expected}",
                    pytrace=False)
    message = str(error)
    said = f"{setting}, and load() raised {described(error)}"
    if isinstance(error, UnicodeDecodeError):
        said += (f" (a decoder's error: it knows a position in the bytes it was given, "
                 f"{error.start}, not the log's file or line)")
    # What is missing comes first: pytest's one-line summary shows only the start.
    assert isinstance(error, lesson.InvalidMessage), (
        f"not an InvalidMessage: {said}. Expected {expected}")
    named = names_path(message, path)
    parts = (("the file's path", named), ("its line", names_line(message, 2)),
             ("why (parse_line's reason)", reason in message))
    missing = [part for part, there in parts if not there]
    assert not missing, (f"the error does not say {' nor '.join(missing)}: {said}. "
                         f"Expected {expected}")
    left_as_it_was(path, data, f"{setting}, and load() refused it")


def left_as_it_was(path, data, why):
    """Fail in words unless the log at `path` still holds `data`: `why` says what ran
    on it (a load, an agent made on it), which only ever reads."""
    if not path.is_file():
        there = sorted(p.name for p in path.parent.iterdir())
        pytest.fail(f"{why}, and {path.name} is no longer there (the sessions folder "
                    f"holds {there}): loading only ever reads, whatever it finds in "
                    "the log, and leaves it where it was", pytrace=False)
    assert path.read_bytes() == data, (
        f"{why}, and it changed the log: loading only ever reads")


def outcome(log):
    """What log.load() raised, or what it returned if it raised nothing."""
    try:
        return log.load()
    except NotImplementedError:
        raise           # a task not written yet: the plugin says which
    except Exception as error:
        return error


@pytest.mark.task("02.1")
@pytest.mark.parametrize("end", [b"\n", b""], ids=["with-newline", "without-newline"])
def test_a_log_of_one_refused_line_names_the_file_and_its_line(lesson, sessions, end):
    """A log of one line is a log like any other: when its only line holds no message,
    the refusal names the file and line 1, as it names any line, and says why."""
    sessions.mkdir(exist_ok=True)
    path = sessions / "quest-1.jsonl"
    line = b'{"role": "narrator", "content": "Once upon a time"}'
    path.write_bytes(line + end)
    setting = (f"the log's only line ({'with' if end else 'without'} its newline) "
               "holds a message of the role 'narrator', which no provider takes")
    with lesson.SessionLog(sessions, "quest-1") as log:
        error = outcome(log)
    if not isinstance(error, BaseException):
        pytest.fail(f"{setting}, and load() accepted it, returning {error!r}",
                    pytrace=False)
    message = str(error)
    named = names_path(message, path)
    assert isinstance(error, lesson.InvalidMessage) and named and names_line(
            message, 1) and "narrator" in message, (
        f"{setting}, and load() raised {described(error)}. Expected an InvalidMessage "
        f"naming the file by its path ({path}), its line 1 ('line 1' or "
        "'quest-1.jsonl:1') and why (the role 'narrator'): a log of one line is "
        "mended like any other, by whoever finds its line")
    left_as_it_was(path, line + end, f"{setting}, and load() refused it")


@pytest.mark.task("02.1")
def test_a_refused_line_is_numbered_as_in_the_file_blank_lines_counted(
        lesson, sessions):
    """An empty line (two newlines in a row: an editor may leave one) holds nothing and
    is passed over, but it is still a line of the file, the first one too; U+2028 and
    U+0085 inside a message end no line. The first line that is no message stops the
    load and is named by its place in the file."""
    path = sessions / "quest-1.jsonl"
    separated = '{"role": "user", "content": "one\u2028two\x85three"}'.encode()
    path.write_bytes(b"\n" + separated + b"\n\n" + BAD_LINES["no role"] + b"\n" + GOOD
                     + BAD_LINES["not JSON at all"] + b"\n" + GOOD)
    setting = ("the log's line 1 is empty, its line 2 a message whose text holds "
               "U+2028 and U+0085 (unescaped, as append writes them), its line 3 "
               "empty, its line 4 holds no role, its line 5 is a message, its line 6 "
               "no JSON and its line 7 a message")
    with lesson.SessionLog(sessions, "quest-1") as log:
        error = outcome(log)
    if not isinstance(error, BaseException):
        pytest.fail(f"{setting}; load() returned {error!r}, where it should refuse "
                    "line 4, naming the file and the line", pytrace=False)
    assert isinstance(error, lesson.InvalidMessage) and names_line(str(error), 4), (
        f"{setting}; load() raised {described(error)}. Expected an InvalidMessage "
        "naming line 4, where an editor shows it: the first line that is no message "
        "stops the load; an empty line holds nothing, but it is a line of the file all "
        "the same, and U+2028 and U+0085 end no line of this log (append leaves them "
        "unescaped inside a line)")


@pytest.mark.task("02.1")
@pytest.mark.parametrize("spaces", [b"   ", b" \t ", b"\r"], ids=repr)
@pytest.mark.parametrize("where", ["first", "between", "last", "alone"])
def test_a_line_of_spaces_is_refused_not_passed_over(lesson, sessions, spaces, where):
    """A line of spaces is not an empty line: it holds text that is no message, and
    the load refuses it, naming its line, as lesson 04's reader will: the first line
    of the log, one between two messages, the last one, the log's only line."""
    path = sessions / "quest-1.jsonl"
    number = {"first": 1, "between": 2, "last": 3, "alone": 1}[where]
    lines = [] if where == "alone" else [GOOD, GOOD]
    lines.insert(number - 1, spaces + b"\n")
    data = b"".join(lines)
    path.write_bytes(data)
    place = {"first": "the first line of the log", "between": "between two messages",
             "last": "the last line of the log, after two messages",
             "alone": "the only line of the log"}[where]
    setting = (f"the log's bytes are {data!r}: line {number}, {place}, holds "
               f"{spaces!r} and nothing else")
    # What the line is, in the writer's terms: it ends each line with b"\n" alone.
    what = ("a carriage return is no end of a line in this log (append ends each "
            "line with the newline byte alone, and escapes a carriage return inside a "
            f"string), so line {number} holds one byte of text" if b"\r" in spaces
            else "spaces are text")
    expected = (f"Expected an InvalidMessage naming the file and line {number}: only "
                "an empty line (two newlines in a row) holds nothing, and "
                f"{what} that is no message, wherever it stands in the log")
    with lesson.SessionLog(sessions, "quest-1") as log:
        error = outcome(log)
    if not isinstance(error, BaseException):
        pytest.fail(f"{setting}; load() returned {error!r} without refusing line "
                    f"{number}. {expected}", pytrace=False)
    named = "quest-1.jsonl" in str(error) and names_line(str(error), number)
    assert isinstance(error, lesson.InvalidMessage) and named, (
        f"{setting}; load() raised {described(error)}. {expected}")
    left_as_it_was(path, data, f"{setting}; load() ran on it")


@pytest.mark.task("02.1")
def test_a_surrogate_pair_written_as_escapes_loads_as_its_character(lesson, sessions):
    """An emoji escaped as a pair of surrogates
    by another program loads as the emoji."""
    sessions.mkdir(exist_ok=True)
    (sessions / "quest-1.jsonl").write_bytes(
        b'{"role": "user", "content": "a dragon \\ud83d\\udc09"}\n')
    with lesson.SessionLog(sessions, "quest-1") as log:
        loaded = outcome(log)
    setting = ("the log's one line holds a dragon (U+1F409) written as the escaped "
               "pair of surrogates \\ud83d\\udc09, which is JSON for one character")
    if isinstance(loaded, BaseException):
        pytest.fail(f"{setting}; load() raised {described(loaded)}, where it should "
                    "return the message with the dragon in its text", pytrace=False)
    assert loaded == [{"role": "user", "content": "a dragon \U0001F409"}], (
        f"{setting}; load() returned {loaded!r}, where it should return the message "
        "with the dragon in its text")


@pytest.mark.task("02.1")
@pytest.mark.parametrize("what, last, refused", [
    ("a whole message whose newline was never written", GOOD.rstrip(b"\n"), False),
    ("half a message (its writer was killed mid-line)", b'{"role": "user", "con', True),
    ("a message torn inside a two-byte letter", b'{"role": "user", "content": "caf\xc3',
     True),
    ("spaces alone, text that is no message", b"   ", True),
    ("zeros a power cut left where the line's bytes never reached the disk",
     b"\x00" * 8, True),
])
def test_a_last_line_without_its_newline_is_read_like_any_other(
        lesson, sessions, what, last, refused):
    """The last line of a log may lack its newline. It is a line all the same: a whole
    message there loads with the rest, and one that is no message (torn by a writer
    killed mid-line) is refused, naming the file and its line, like any other: this
    lesson's reader mends nothing, lesson 04's repairs a torn tail."""
    path = sessions / "quest-1.jsonl"
    data = GOOD + GOOD + last
    path.write_bytes(data)
    setting = (f"the log holds two messages, then, on line 3 with no newline after it, "
               f"{what}: {last!r}")
    with lesson.SessionLog(sessions, "quest-1") as log:
        error = outcome(log)
    if not refused:
        if isinstance(error, BaseException):
            pytest.fail(f"{setting}; load() raised {described(error)}, where it should "
                        "return the three messages", pytrace=False)
        assert error == [{"role": "user", "content": "Hello."}] * 3, (
            f"{setting}; load() returned {error!r}, where it should return the three "
            "messages: the last line is one of the log's, newline or not, and "
            "dropping it loses a message without a word")
    else:
        if not isinstance(error, BaseException):
            pytest.fail(f"{setting}; load() returned {error!r}, where it should refuse "
                        "line 3 with an InvalidMessage naming the file and the line: a "
                        "line that is no message stops the load, the last one too "
                        "(passed over, nobody learns the log lost its end)",
                        pytrace=False)
        named = "quest-1.jsonl" in str(error) and names_line(str(error), 3)
        assert isinstance(error, lesson.InvalidMessage) and named, (
            f"{setting}; load() raised {described(error)}. Expected an InvalidMessage "
            "naming the file and line 3")
    left_as_it_was(path, data, f"{setting}; load() ran on it")


@pytest.mark.task("02.1")
def test_a_byte_order_mark_at_the_start_of_the_log_is_refused(lesson, sessions):
    """A byte-order mark (an editor may add one) is no part of the format, on the first
    line as on any other: the load refuses line 1, naming it, rather than decoding the
    file in a way that drops the mark."""
    path = sessions / "quest-1.jsonl"
    data = b"\xef\xbb\xbf" + GOOD + GOOD
    path.write_bytes(data)
    setting = ("the log's line 1 starts with a byte-order mark (U+FEFF, the bytes "
               "EF BB BF) before its message; line 2 is a message")
    with lesson.SessionLog(sessions, "quest-1") as log:
        error = outcome(log)
    if not isinstance(error, BaseException):
        pytest.fail(f"{setting}; load() returned {error!r}, where it should refuse "
                    "line 1 with an InvalidMessage naming the file and the line, as it "
                    "refuses a mark on any other line: the mark was dropped by the "
                    "decoding, so the reader and the writer no longer agree on what a "
                    "log is", pytrace=False)
    named = "quest-1.jsonl" in str(error) and names_line(str(error), 1)
    assert isinstance(error, lesson.InvalidMessage) and named, (
        f"{setting}; load() raised {described(error)}. Expected an InvalidMessage "
        "naming the file and line 1")
    left_as_it_was(path, data, f"{setting}; load() ran on it")


@pytest.mark.task("02.1")
def test_a_refused_line_far_into_a_large_log_is_named_by_its_place(lesson, sessions):
    """Lines are counted from the start of the file to the end, however the file is
    read: a line refused after hundreds of KiB is named by its place in the file."""
    path = sessions / "quest-1.jsonl"
    count = 6_000       # about 230 KiB of short lines before the damaged one
    data = GOOD * count + BAD_LINES["no role"] + b"\n" + GOOD * 10
    path.write_bytes(data)
    line = count + 1
    setting = (f"the log's first {count:,} lines ({len(GOOD) * count // 1024} KiB) are "
               f"messages and its line {line:,} holds no role")
    with lesson.SessionLog(sessions, "quest-1") as log:
        error = outcome(log)
    if not isinstance(error, BaseException):
        returned = (f"{len(error)} messages" if isinstance(error, list) else
                    f"a {type(error).__name__}")
        pytest.fail(f"{setting}; load() returned {returned}, where it should refuse "
                    f"line {line}, naming the file and the line", pytrace=False)
    assert isinstance(error, lesson.InvalidMessage) and names_line(str(error), line), (
        f"{setting}; load() raised {described(error)}. Expected an InvalidMessage "
        f"naming line {line}, where an editor shows it: lines are counted through the "
        "whole file, across every read of it")
    left_as_it_was(path, data, f"{setting}; load() ran on it")


@pytest.mark.task("02.1")
def test_the_refusal_of_a_huge_torn_line_stays_short(lesson, sessions):
    """A line of megabytes that is no message (a pasted document that a crash cut) is
    refused in words a person can read: the file, the line and why, not the line. So
    is a log of thousands of lines that are no message: the first is named."""
    path = sessions / "quest-1.jsonl"
    pasted = json.dumps({"role": "user", "content": "The map: " + "ab" * 1_000_000})
    cases = [
        (GOOD + pasted[: len(pasted) // 2].encode(),
         f"the log's line 2 is the first half of a message of "
         f"{len(pasted) // 1000:,} KB, cut by a crash"),
        # Many lines that are no message (a file another program wrote, under the log's
        # name): the first is named, and the words stay as short.
        (GOOD + b"Day 1: the elder talked of the cave.\n" * 5_000 + GOOD,
         "the log's line 2 to line 5,001 are lines of plain text, as another program "
         "writes them, none a message"),
    ]
    for data, setting in cases:
        path.write_bytes(data)
        with lesson.SessionLog(sessions, "quest-1") as log:
            error = outcome(log)
        if not isinstance(error, BaseException):
            pytest.fail(f"{setting}; load() returned {str(error)[:200]}, where it "
                        "should refuse line 2, naming the file and the line",
                        pytrace=False)
        message = str(error)
        assert isinstance(error, lesson.InvalidMessage) and names_line(message, 2), (
            f"{setting}; load() raised {described(error)[:300]}. Expected an "
            "InvalidMessage naming line 2, the first line that is no message")
        assert len(message) < 2_000, (
            f"{setting}; load() refused it in a message of {len(message):,} "
            "characters, which goes onto a screen or into a log: the refusal names the "
            "file, the first line that is no message and why, and quotes no more of a "
            "line than its start, however many lines after it are no message either; "
            f"it begins {message[:300]!r}")


@pytest.mark.task("02.1")
def test_the_refusal_in_a_long_ids_log_names_its_whole_path_line_and_why(
        lesson, tmp_path):
    """A session id may be as long as check_session_id allows, 128 characters, and its
    sessions folder deep in a project's tree: the refusal of a line of its log names
    the whole path of the file, the line and why all the same. Its words stay short by
    quoting no more of a line than its start, never by cutting off what follows."""
    folder = (tmp_path / ("the-projects-of-the-town-" * 4)
              / ("the-quest-for-the-cave-beyond-the-river-" * 3) / "sessions")
    folder.mkdir(parents=True)
    session_id = "quest-of-the-mayors-daughter-" + "x" * 99    # 128 characters
    path = folder / f"{session_id}.jsonl"
    bad = BAD_LINES["a tool call without an id"]
    path.write_bytes(GOOD + bad + b"\n" + GOOD)
    reason = ""
    try:
        lesson.parse_line(bad)
    except ValueError as refused:
        reason = str(refused)
    setting = (f"session {session_id[:29]}... has an id of 128 characters, the most "
               f"check_session_id allows, its log's path is {len(str(path))} "
               "characters long, and its line 2 holds a tool call without an id")
    with lesson.SessionLog(folder, session_id) as log:
        error = outcome(log)
    if not isinstance(error, BaseException):
        pytest.fail(f"{setting}; load() returned {error!r}, where it should refuse "
                    "line 2", pytrace=False)
    message = str(error)
    missing = [what for what, named in [
        (f"the log's whole path ({path})",
         names_path(message, path)),
        ("line 2", names_line(message, 2)),
        (f"why, in parse_line's words ({reason!r})", reason in message)] if not named]
    assert isinstance(error, lesson.InvalidMessage) and not missing, (
        f"{setting}; load() raised {described(error)}, which does not name "
        + " and ".join(missing or ["(as an InvalidMessage) what it refused"])
        + ": a person mending the log needs the file, the line and why, however long "
        "the id and the folder make the path (keep the words short by quoting no "
        "line, not by cutting the text off)")


@pytest.mark.task("02.1")
def test_a_load_after_a_refusal_reads_the_mended_log(lesson, sessions):
    """A refusal is no verdict kept on the session: once a person mends the line it
    named, the next load, by the same SessionLog, reads the log as it is then, and
    that SessionLog appends as any writer does (loading, refused or not, only ever
    reads: it leaves the writer as it was)."""
    sessions.mkdir(exist_ok=True)
    path = sessions / "quest-1.jsonl"
    path.write_bytes(GOOD + BAD_LINES["not JSON at all"] + b"\n" + GOOD)
    mended = b'{"role": "assistant", "content": "Mended."}\n'
    expected = [{"role": "user", "content": "Hello."},
                {"role": "assistant", "content": "Mended."},
                {"role": "user", "content": "Hello."}]
    with lesson.SessionLog(sessions, "quest-1") as log:
        refused = outcome(log)
        if not isinstance(refused, BaseException):
            pytest.fail("line 2 of the log holds half a message, and load() accepted "
                        f"it, returning {refused!r}, where it should refuse it with "
                        "InvalidMessage naming the line", pytrace=False)
        path.write_bytes(GOOD + mended + GOOD)
        again = outcome(log)
        got = (f"raised {described(again)}" if isinstance(again, BaseException)
               else f"returned {again!r}")
        assert again == expected, (
            f"line 2 of the log held half a message, and load() refused it "
            f"({described(refused)}); a person then mended the line, and a second "
            f"load() of the same SessionLog {got}, where the log now holds "
            f"{expected!r}: each load reads the log as it is at that moment, not what "
            "an earlier load found")
        day_two = {"role": "user", "content": "Day 2."}
        try:
            log.append(day_two)
        except NotImplementedError:
            raise
        except Exception as error:
            pytest.fail(f"a load() of the log was refused (line 2 held half a "
                        f"message), a person mended the line, and the next load read "
                        f"it; then an append of {day_two!r} through the same "
                        f"SessionLog raised {described(error)}, where it should be "
                        "written as any append is: a load only ever reads, and leaves "
                        "the writer as it was, a refused load too", pytrace=False)
    assert path.read_bytes() == GOOD + mended + GOOD + json.dumps(
        day_two, ensure_ascii=False).encode() + b"\n", (
        "after a refused load and a mended line, an append through the same "
        f"SessionLog returned, but the log holds {path.read_bytes()!r}")


@pytest.mark.task("02.1")
def test_a_message_another_program_wrote_in_its_own_spacing_loads(lesson, sessions):
    """A line is a message by its JSON value, whoever wrote it: another program's
    spaces (before the value too, on the first line as on any), its keys in another
    order, a number written with an exponent, all load as the message they hold."""
    lines = [b' \t{"role":"user","content":"Ask the elder."}',
             b'{ "content" : "The elder sleeps." , "role" : "assistant" }',
             b'{"role": "user", "content": "Count the gold.", "gold": 1e2}']
    (sessions / "quest-1.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    expected = [json.loads(line) for line in lines]
    with lesson.SessionLog(sessions, "quest-1") as log:
        try:
            loaded = log.load()
        except NotImplementedError:
            raise
        except Exception as error:      # noqa: BLE001 - reported in words below
            pytest.fail(f"the log holds three messages another program wrote, "
                        f"{[line.decode() for line in lines]}, and load() raised "
                        f"{type(error).__name__}: {error}. Each line is a message: "
                        "its JSON value is what counts, not the spaces (blanks before "
                        "the value included), the order of its keys or how a number is "
                        "written", pytrace=False)
    assert loaded == expected, (
        f"the log holds three messages another program wrote; load() returned "
        f"{loaded!r}, where {expected!r} was expected")


@pytest.mark.task("02.1")
def test_a_message_nested_deeper_than_append_writes_loads(lesson, sessions):
    """parse_line is the one judge of a line, and the reader adds none of the writer's
    own checks: a message another program wrote nested deeper than append lets a
    message be (MAX_DEPTH: a tool's result kept as a deep tree, say) is a message by
    its JSON value, which parse_line reads, and loads back as it is."""
    tree = "the cave"
    for _ in range(100):
        tree = [tree]
    message = {"role": "user", "content": "The map, parsed.", "parsed": tree}
    path = sessions / "quest-1.jsonl"
    path.write_bytes(GOOD + json.dumps(message).encode() + b"\n")
    setting = ("the log's line 2, another program's, holds a message whose key "
               "'parsed' nests lists 100 deep, deeper than append writes (it refuses "
               "more than 64 levels) but a message by its JSON value, which "
               "parse_line reads")
    with lesson.SessionLog(sessions, "quest-1") as log:
        loaded = outcome(log)
    if isinstance(loaded, BaseException):
        pytest.fail(f"{setting}; load() raised {described(loaded)}, where it should "
                    "return both messages: a line is a message by its JSON value, "
                    "whoever wrote it, and parse_line is its one judge (append's own "
                    "checks are the writer's, not the reader's)", pytrace=False)
    assert loaded == [json.loads(GOOD), message], (
        f"{setting}; load() returned {len(loaded)} message(s), not the two as written")
