"""Lesson 02: loading refuses a line that holds no message (task 02.1, with parse_line).

Another program (an editor, a script, another harness) may write a log. A line that is
not a message the rule allows is refused with an error that names the file and the line,
rather than loaded and sent to a model that then refuses every request.

Run: pytest lessons/02_load            (your code)
     pytest lessons/02_load --solution (the reference)
"""

import re

import pytest

GOOD = b'{"role": "user", "content": "Hello."}\n'
BAD_LINES = {
    "no role": b'{"content": "hello"}',
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
    "bytes that are not UTF-8": b'{"role": "user", "content": "caf\xe9"}',
}


@pytest.mark.task("02.1")
@pytest.mark.parametrize("what", sorted(BAD_LINES))
def test_load_refuses_a_line_with_no_message_naming_file_and_line(
    lesson, sessions, what
):
    """A line holding no allowed message raises
    a ValueError naming the file and line 2, and saying why (parse_line's reason)."""
    sessions.mkdir(exist_ok=True)
    path = sessions / "quest-1.jsonl"
    data = GOOD + BAD_LINES[what] + b"\n" + GOOD
    path.write_bytes(data)
    with lesson.SessionLog(sessions, "quest-1") as log:
        try:
            loaded = log.load()
        except ValueError as error:
            message = str(error)
        else:
            pytest.fail(
                f"load() accepted line 2, a line with {what}, and returned "
                f"{loaded!r}; a model would refuse that history with every request. "
                "The load should fail, naming the file and the line."
            )
    assert "quest-1.jsonl" in message and names_line(message, 2), (
        "the error should name the file and its line 2 (as 'line 2' or "
        f"'quest-1.jsonl:2') so that it can be mended; it says: {message}")
    try:
        lesson.parse_line(BAD_LINES[what])
    except ValueError as refused:
        reason = str(refused)
    else:
        pytest.fail(f"parse_line should refuse a line with {what}", pytrace=False)
    assert reason in message, (
        f"the error should also say why the line is no message ({reason!r}), so that "
        f"whoever mends it knows what to look for; it says: {message}")
    assert path.read_bytes() == data, (
        "loading must never change the log, even to refuse it"
    )


def names_line(message, number):
    """Whether an error's text names line `number`: 'line 2', or 'file.jsonl:2'."""
    return re.search(rf"\bline {number}\b|\.jsonl:{number}\b", message) is not None


@pytest.mark.task("02.1")
def test_a_refused_line_is_numbered_as_in_the_file_blank_lines_counted(
        lesson, sessions):
    """An empty line (two newlines in a row: an editor may leave one) holds nothing and
    is passed over, but it is still a line of the file: the refused line after it is
    named by its place in the file."""
    path = sessions / "quest-1.jsonl"
    path.write_bytes(GOOD + b"\n" + BAD_LINES["no role"] + b"\n" + GOOD)
    with lesson.SessionLog(sessions, "quest-1") as log:
        try:
            loaded = log.load()
        except ValueError as error:
            message = str(error)
        else:
            pytest.fail(f"load() accepted a line with no role and returned {loaded!r}; "
                        "it should fail naming the file and the line", pytrace=False)
    assert names_line(message, 3), (
        "the log's line 2 is empty and its line 3 holds no role; the error should "
        "name line 3, where an editor finds it (empty lines count, as they do in an "
        f"editor), and it says: {message}")


@pytest.mark.task("02.1")
@pytest.mark.parametrize("spaces", [b"   ", b" \t ", b"\r"], ids=repr)
def test_a_line_of_spaces_is_refused_not_passed_over(lesson, sessions, spaces):
    """A line of spaces is not an empty line: it holds text that is no message, and
    the load refuses it, naming its line, as lesson 04's reader will."""
    path = sessions / "quest-1.jsonl"
    data = GOOD + spaces + b"\n" + GOOD
    path.write_bytes(data)
    with lesson.SessionLog(sessions, "quest-1") as log:
        try:
            loaded = log.load()
        except ValueError as error:
            message = str(error)
        else:
            pytest.fail(f"line 2 of the log holds {spaces!r} and nothing else, and "
                        f"load() passed over it, returning {loaded!r}: only an empty "
                        "line (two newlines in a row) holds nothing; a line of "
                        "spaces is text that is no message", pytrace=False)
    assert "quest-1.jsonl" in message and names_line(message, 2), (
        f"line 2 of the log holds {spaces!r}; the error should name the file and "
        f"line 2, and it says: {message}")
    assert path.read_bytes() == data, "loading must never change the log"


@pytest.mark.task("02.1")
def test_a_surrogate_pair_written_as_escapes_loads_as_its_character(lesson, sessions):
    """An emoji escaped as a pair of surrogates
    by another program loads as the emoji."""
    sessions.mkdir(exist_ok=True)
    (sessions / "quest-1.jsonl").write_bytes(
        b'{"role": "user", "content": "a dragon \\ud83d\\udc09"}\n')
    with lesson.SessionLog(sessions, "quest-1") as log:
        loaded = log.load()
    assert loaded == [{"role": "user", "content": "a dragon \U0001F409"}], (
        f"a pair of escaped surrogates is one character and must load; got {loaded!r}")
