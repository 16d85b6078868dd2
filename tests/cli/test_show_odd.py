"""`sessionlab show` on logs that are valid JSON but not what any lesson writes.

Whatever a log holds, show draws what it can, says what it cannot, and never ends in a
traceback; what the log holds never reaches the terminal as control characters.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from sessionlab.cli import show

from .conftest import run_module


def write(path, *lines: str | bytes):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join((line if isinstance(line, bytes) else line.encode()) + b"\n"
                              for line in lines))
    return path


USER = json.dumps({"role": "user", "content": "hello"})


def message(**fields) -> str:
    return json.dumps({"role": "assistant", "content": None, **fields})


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


# One odd line each, between two plain messages; the name says what is odd.
ODD_LINES = {
    "tool_calls a string": message(tool_calls="talk_to(elder)"),
    "tool_calls an object": message(tool_calls={"id": "c1", "function": {"name": "buy"}}),
    "tool_calls holding null, a number, a list": message(tool_calls=[None, 3, ["a"]]),
    "a call whose function is a string": message(tool_calls=[{"id": "c", "function": "buy"}]),
    "a call whose name is a list, arguments an object": message(
        tool_calls=[{"id": "c", "function": {"name": ["buy"], "arguments": {"item": "rope"}}}]),
    "a call whose arguments are a number": message(
        tool_calls=[{"id": "c", "function": {"name": "buy", "arguments": 12}}]),
    "a call whose id is a list": message(
        tool_calls=[{"id": ["c"], "function": {"name": "buy", "arguments": "{}"}}]),
    "a result whose tool_call_id is an object": json.dumps(
        {"role": "tool", "tool_call_id": {"id": "c"}, "content": "ok"}),
    "role a list": json.dumps({"role": ["user"], "content": "hi"}),
    "role an object": json.dumps({"role": {"name": "user"}, "content": "hi"}),
    "role null": json.dumps({"role": None, "content": "hi"}),
    "role a number": json.dumps({"role": 7, "content": "hi"}),
    "content a number": json.dumps({"role": "user", "content": 42}),
    "content true": json.dumps({"role": "user", "content": True}),
    "content an object": json.dumps({"role": "user", "content": {"text": "hi"}}),
    "content parts of every kind": json.dumps(
        {"role": "user", "content": [{"type": "text", "text": 5}, None, "x", {"type": "image"}]}),
    "content NaN and Infinity": '{"role": "user", "content": [NaN, Infinity, -Infinity]}',
    "a blob whose hash is a list": json.dumps({"role": "user", "content": {"$blob": ["a"], "size": 3}}),
    "a blob whose hash is a path": json.dumps(
        {"role": "user", "content": {"$blob": "../../etc/passwd", "size": 3}}),
    "a blob whose hash is 5000 characters": json.dumps(
        {"role": "user", "content": {"$blob": "a" * 5000, "size": 3}}),
    "a blob whose size is text": json.dumps(
        {"role": "user", "content": {"$blob": "0" * 64, "size": "big", "preview": 5}}),
    "a blob whose size is huge": '{"role": "user", "content": {"$blob": "%s", "size": %s}}' % (
        "0" * 64, "9" * 400),
    "a blob whose size is infinite": '{"role": "user", "content": {"$blob": "%s", "size": 1e400}}' % (
        "0" * 64),
    "undo skip [['a','b']]": json.dumps({"$marker": "undo", "skip": [["a", "b"]]}),
    "undo skip a string": json.dumps({"$marker": "undo", "skip": "0-3"}),
    "undo skip an object": json.dumps({"$marker": "undo", "skip": {"0": True}}),
    "undo skip of bools, floats, negatives": json.dumps({"$marker": "undo", "skip": [True, 0.5, -1]}),
    "undo skip a range of three": json.dumps({"$marker": "undo", "skip": [[0, 1, 2]]}),
    "undo skip [[0, 10**12]]": json.dumps({"$marker": "undo", "skip": [[0, 10**12]]}),
    "undo skip [[-10**12, 10**12]]": json.dumps({"$marker": "undo", "skip": [[-10**12, 10**12]]}),
    "a marker whose kind is a list": json.dumps({"$marker": ["undo"], "skip": [0]}),
    "a marker whose kind is null": json.dumps({"$marker": None}),
    "a line nested 100000 deep": deep(100_000),
    "a message nested 150 deep": json.dumps({"role": "user", "content": json.loads(deep(150))}),
    "a message nested 900 deep": '{"role": "user", "content": %s}' % deep(900),
    "an integer of 5000 digits": '{"role": "user", "content": %s}' % ("9" * 5000),
    "a lone surrogate": '{"role": "user", "content": "\\ud800 half a character"}',
    "bytes that are not UTF-8": b'{"role": "user", "content": "\xff\xfe"}',
    "a line that is a list": json.dumps([{"role": "user", "content": "hi"}]),
    "a line that is a string": json.dumps("hello"),
    "a line that is null": "null",
    "an empty object": "{}",
}


@pytest.mark.parametrize("odd", ODD_LINES.values(), ids=ODD_LINES.keys())
def test_an_odd_line_is_drawn_or_shown_as_written_never_a_traceback(cli, tmp_path, odd):
    sessions = tmp_path / "sessions"
    write(sessions / "odd.jsonl", USER, odd, json.dumps({"role": "user", "content": "after it"}))

    one = cli("show", "odd", "--sessions", sessions)
    assert one.status == 0, one.text
    assert "hello" in one.out and "after it" in one.out, "the lines around it are still shown"
    assert "Traceback" not in one.text

    tree = cli("show", sessions)
    assert tree.status == 0, tree.text
    assert "odd" in tree.out


ODD_FILES = {
    "a lock whose pid is 2**70": ("odd.lock", {"pid": 2**70, "host": os.uname().nodename}),
    "a lock whose pid is -1": ("odd.lock", {"pid": -1, "host": os.uname().nodename}),
    "a lock whose pid is 0": ("odd.lock", {"pid": 0}),
    "a lock whose pid is text, host a list": ("odd.lock", {"pid": "12", "host": ["a"]}),
    "a lock whose pid is true": ("odd.lock", {"pid": True}),
    "a lock since 1e20": ("odd.lock", {"pid": os.getpid(), "since": 1e20}),
    "meta created 1e20": ("odd.meta.json", {"created": 1e20}),
    "meta created -1e20": ("odd.meta.json", {"created": -1e20}),
    "meta created NaN": ("odd.meta.json", {"created": float("nan")}),
    "meta created an object": ("odd.meta.json", {"created": {"day": 1}}),
    "meta parent a list": ("odd.meta.json", {"parent": ["quest"], "forked_at": {"k": 1}}),
    "meta parent an object": ("odd.meta.json", {"parent": {"id": "quest"}}),
    "meta parent itself": ("odd.meta.json", {"parent": "odd"}),
    "meta a list": ("odd.meta.json", ["odd"]),
}


@pytest.mark.parametrize("name, value", ODD_FILES.values(), ids=ODD_FILES.keys())
def test_odd_meta_and_lock_files_are_shown_never_a_traceback(cli, tmp_path, name, value):
    sessions = tmp_path / "sessions"
    write(sessions / "odd.jsonl", USER)
    (sessions / name).write_text(json.dumps(value))
    write(sessions / "quest.jsonl", USER)

    for run in (cli("show", "odd", "--sessions", sessions), cli("show", sessions)):
        assert run.status == 0, run.text
        assert "Traceback" not in run.text


def test_a_lock_whose_pid_is_not_a_process_says_so(cli, tmp_path):
    sessions = tmp_path / "sessions"
    write(sessions / "odd.jsonl", USER)
    (sessions / "odd.lock").write_text(json.dumps({"pid": 2**70, "host": os.uname().nodename}))
    run = cli("show", "odd", "--sessions", sessions)
    assert f"locked by pid {2**70} on {os.uname().nodename} (not a process id)" in run.out


def test_a_folder_named_like_a_log_is_not_read_as_one(cli, tmp_path):
    sessions = tmp_path / "sessions"
    (sessions / "x.jsonl").mkdir(parents=True)
    write(sessions / "quest.jsonl", USER)

    tree = cli("show", sessions)
    assert tree.status == 0, tree.text
    assert "quest" in tree.out and "x.jsonl is not a file" in tree.out

    for target in (["x", "--sessions", sessions], [sessions / "x.jsonl"]):
        one = cli("show", *target)
        assert one.status == 1
        assert one.err.splitlines()[0] == f"error: {sessions / 'x.jsonl'} is a folder, not a session log"


def test_a_pipe_named_like_a_log_is_refused_in_one_line_not_waited_on(cli, tmp_path):
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    os.mkfifo(sessions / "p.jsonl")
    run = cli("show", sessions / "p.jsonl")
    assert run.status == 1 and "not a regular file" in run.err
    assert cli("show", sessions).status == 0


def test_an_unreadable_log_is_named_in_one_line(cli, tmp_path, monkeypatch):
    path = write(tmp_path / "s" / "secret.jsonl", USER)
    real = Path.read_bytes

    def refused(self):   # root reads through any mode bits: the refusal is made here
        if self.name == "secret.jsonl":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", refused)
    from sessionlab.cli import files
    real_read = files.read_bytes

    def refused_here(where, *args, **kwargs):     # show opens files without waiting
        if Path(where).name == "secret.jsonl":
            raise PermissionError(13, "Permission denied", str(where))
        return real_read(where, *args, **kwargs)

    monkeypatch.setattr(files, "read_bytes", refused_here)
    run = cli("show", path)
    assert run.status == 1
    assert run.err.splitlines()[0] == f"error: cannot read {path}: Permission denied"
    tree = cli("show", path.parent)
    assert tree.status == 0 and "secret  (cannot be read: Permission denied)" in tree.out


def test_a_range_of_a_trillion_undone_messages_costs_no_more_than_the_log(tmp_path):
    # Before: the marker's [0, 10**12) was expanded into a set of a trillion numbers.
    # Under a 1 GB address-space limit that ran out of memory; now the range is clipped
    # to the messages before the marker.
    path = write(tmp_path / "big.jsonl", USER, USER,
                 json.dumps({"$marker": "undo", "skip": [[0, 10**12]]}), USER)

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    done = subprocess.run([sys.executable, "-m", "sessionlab", "show", str(path)], capture_output=True,
                          text=True, preexec_fn=limit, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "2 message(s) undone" in done.stdout
    assert show.read_log(path).skipped() == {0, 1}


def test_an_undo_marker_takes_back_only_messages_written_before_it(tmp_path):
    path = write(tmp_path / "s.jsonl", USER, json.dumps({"$marker": "undo", "skip": [0, 1, 5]}),
                 USER, USER)
    assert show.read_log(path).skipped() == {0}, "as lesson 07 reads it: later messages stay"


ESCAPES = "\x1b[2J\x1b]0;owned\x07 \x9b31m red \r over \x08 \u202e gnp.exe \x7f"


@pytest.mark.campaign
@pytest.mark.parametrize("terminal", [False, True], ids=["pipe", "terminal"])
def test_control_characters_in_a_log_reach_the_terminal_escaped(tmp_path, terminal):
    sessions = tmp_path / "sessions"
    write(sessions / "esc.jsonl",
          json.dumps({"role": "user", "content": "hi " + ESCAPES}),
          json.dumps({"role": "assistant", "content": None, "tool_calls": [
              {"id": "c\x1b[5m", "function": {"name": "buy\x1b[8m", "arguments": json.dumps({"item": ESCAPES})}}]}),
          json.dumps({"role": "tool", "tool_call_id": "c\x1b[5m", "content": ESCAPES}),
          json.dumps({"$marker": "undo\x1b[1m", "why\x1b[3m": ESCAPES}),
          json.dumps({"role": ESCAPES, "content": "x"}),
          b'{"role": "user", "cont\x1b[2J',
          b"not json \x1b[2J",
          b"[1, 2]\x1b")
    (sessions / "esc.meta.json").write_text(json.dumps({"parent": ESCAPES, "created": ESCAPES}))
    (sessions / "esc.lock").write_text(json.dumps({"pid": 1, "host": ESCAPES, "since": ESCAPES}))
    write(sessions / "e\x1b[2Jvil.jsonl", USER)
    env = {"FORCE_COLOR": "1", "COLUMNS": "200"} if terminal else {}

    for target in (["esc", "--sessions", sessions], [sessions]):
        run = run_module("show", *target, env=env)
        assert run.status == 0, run.text
        out = run.out
        if terminal:        # rich's own colours are the only escapes: "\x1b[" and digits, "m"
            out = re.sub(r"\x1b\[[0-9;]*m", "", out)
        for bad in "\x1b\x07\x9b\r\x08\u202e\x7f":
            assert bad not in out, f"{bad!r} from the log reached the terminal"
    one = run_module("show", "esc", "--sessions", sessions).out
    assert "\\x1b[2J\\x1b]0;owned\\x07" in one and "\\u202e" in one, "shown escaped, not dropped"


def test_a_log_show_cannot_draw_is_shown_line_by_line_with_a_note(cli, tmp_path, monkeypatch):
    path = write(tmp_path / "s.jsonl", USER, json.dumps({"role": "user", "content": "second"}))

    def broken(*args, **kwargs):
        raise RuntimeError("a case nobody foresaw")

    monkeypatch.setattr(show, "message_rows", broken)
    run = cli("show", path)
    assert run.status == 0
    assert "line 1, shown as written (RuntimeError)" in run.out and '"content": "second"' in run.out

    monkeypatch.setattr(show, "heading", broken)
    run = cli("show", path)
    assert run.status == 0
    assert "show cannot draw this log (RuntimeError); its lines as written:" in run.out
    assert '"content": "hello"' in run.out and '"content": "second"' in run.out


def test_show_with_no_sessions_folder_says_so_in_one_line(tmp_path):
    run = run_module("show", cwd=tmp_path)
    assert run.status == 1
    assert run.err.strip().splitlines()[0] == "error: no sessions folder sessions/ here yet"
    assert "Traceback" not in run.text


# `show` right after `demo`: test_demo.py (one demo run serves both).


def test_the_point_of_a_fork_is_shown_as_the_message_number_it_is(cli, tmp_path):
    sessions = tmp_path / "sessions"
    write(sessions / "quest.jsonl", USER, USER)
    write(sessions / "guard.jsonl", USER)
    (sessions / "guard.meta.json").write_text(json.dumps({"parent": "quest", "forked_at": 1}))
    tree = cli("show", sessions).out
    assert re.search(r"forked from quest at 1(?![\d-])", tree), tree
    assert "1970" not in tree
    assert "forked from quest at message 1" in cli("show", "guard", "--sessions", sessions).out


def test_a_windows_line_end_in_content_is_a_line_end_and_a_lone_carriage_return_is_escaped(cli, tmp_path):
    path = write(tmp_path / "crlf.jsonl", json.dumps({"role": "user", "content": "one\r\ntwo\rthree"}))
    out = cli("show", path).out
    assert "one\n" in out and "\\x0d" in out and "two\\x0dthree" in out
    assert "\r" not in out
