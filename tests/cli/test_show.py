"""`sessionlab show`: logs of every lesson's format read as a chat, and a folder's fork tree."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from .conftest import STARTER, run_module


def write_log(path, *entries, tail: bytes = b""):
    path.parent.mkdir(parents=True, exist_ok=True)
    data = b"".join(json.dumps(e, ensure_ascii=False).encode() + b"\n" for e in entries) + tail
    path.write_bytes(data)


def call(call_id, name, **arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


@pytest.fixture
def folder(tmp_path):
    folder = tmp_path / "sessions"
    big = ("The cave's map, drawn by hand. " * 4000).encode()
    digest = hashlib.sha256(big).hexdigest()
    (folder / "blobs").mkdir(parents=True)
    (folder / "blobs" / digest).write_bytes(big)
    write_log(
        folder / "quest.jsonl",
        {"role": "user", "content": "Ask the elder, then buy a rope."},
        {"role": "assistant", "content": None, "tool_calls": [call("call_1_0", "talk_to", npc="elder")]},
        {"role": "tool", "tool_call_id": "call_1_0", "content": "The elder says: bring a torch and a rope."},
        {"role": "assistant", "content": "Here is the map.",
         "tool_calls": [call("call_3_0", "buy", item="rope"), call("call_3_1", "buy", item="torch")]},
        {"$marker": "repair", "reason": "unanswered tool calls"},
        {"role": "tool", "tool_call_id": "call_3_0", "content": "interrupted: may or may not have run"},
        {"role": "tool", "tool_call_id": "call_3_1", "content": "interrupted: may or may not have run"},
        {"role": "user", "content": {"$blob": digest, "size": len(big), "preview": big[:40].decode()}},
        {"role": "assistant", "content": "Café au lait, and a map."},
        {"$marker": "undo", "skip": [6, 7]},
        {"role": "user", "content": "Never mind that."},
        {"role": "assistant", "content": {"$blob": "0" * 64, "size": 2048, "preview": "lost"}},
    )
    (folder / "quest.meta.json").write_text(json.dumps({"format": 1, "id": "quest", "parent": None,
                                                        "forked_at": None, "created": "2026-11-30T10:00:00+00:00"}))
    write_log(folder / "guard.jsonl", {"role": "user", "content": "Ask the guard instead."})
    (folder / "guard.meta.json").write_text(json.dumps({"format": 1, "id": "guard", "parent": "quest",
                                                        "forked_at": 1, "created": "2026-11-30T11:00:00+00:00"}))
    write_log(folder / "guard-night.jsonl", {"role": "user", "content": "At night."})
    (folder / "guard-night.meta.json").write_text(json.dumps({"format": 1, "id": "guard-night", "parent": "guard",
                                                              "forked_at": 1, "created": "2026-11-30T12:00:00+00:00"}))
    (folder / "guard.lock").write_text(json.dumps({"pid": os.getpid(), "host": os.uname().nodename,
                                                   "since": "2026-11-30T11:00:00+00:00"}))
    return folder


def test_a_log_reads_as_a_chat_with_tool_calls_and_their_results(cli, folder):
    run = cli("show", "quest", "--sessions", folder)

    assert run.status == 0, run.text
    out = run.out
    assert "[0] you" in out and "Ask the elder, then buy a rope." in out
    assert '→ talk_to(npc="elder")' in out and "(call_1_0)" in out
    assert "← The elder says: bring a torch and a rope." in out and "(talk_to, call_1_0)" in out
    assert 'buy(item="rope")' in out and 'buy(item="torch")' in out
    assert "Café au lait" in out, "non-ASCII text as written"


def test_blobs_are_shown_by_size_and_preview_and_a_missing_one_is_named(cli, folder):
    out = cli("show", "quest", "--sessions", folder).out
    blob_line = next(line for line in out.splitlines() if "[6]" in line)
    assert "[blob 121.1 KB · sha256 " in blob_line and "The cave's map, drawn by hand." in blob_line
    missing = next(line for line in out.splitlines() if "[9]" in line)
    assert "MISSING" in missing and "0000000000" in missing


def test_undone_turns_are_struck_through_and_repairs_are_marked(cli, folder):
    out = cli("show", "quest", "--sessions", folder).out
    lines = out.splitlines()
    assert "(undone)" in next(l for l in lines if "[6]" in l) and "(undone)" in next(l for l in lines if "[7]" in l)
    assert "(undone)" not in next(l for l in lines if "[8]" in l)
    assert any("── repair ──" in l for l in lines)
    repaired = [l for l in lines if "[written by the repair]" in l]
    assert len(repaired) == 2 and all("interrupted" in l for l in repaired)
    assert "[written by the repair]" not in next(l for l in lines if "[2]" in l)

    env = {**os.environ, "FORCE_COLOR": "1", "COLUMNS": "120"}
    coloured = subprocess.run([sys.executable, "-m", "sessionlab", "show", "quest", "--sessions", str(folder)],
                              env=env, capture_output=True, text=True).stdout
    struck = next(l for l in coloured.splitlines() if "[7]" in l)
    assert "\x1b[9" in struck or ";9m" in struck or ";9;" in struck, "struck through in a terminal"


def test_a_torn_tail_and_a_corrupt_middle_line_are_shown_not_fatal(cli, tmp_path):
    path = tmp_path / "s" / "crashed.jsonl"
    write_log(path, {"role": "user", "content": "one"}, tail=b'not json at all\n{"role": "assistant", "cont')
    run = cli("show", path)
    assert run.status == 0
    assert "line 2 is not a message or a marker" in run.out
    assert "torn last line" in run.out
    assert "[0] you" in run.out


def test_a_folder_shows_its_fork_tree(cli, folder):
    run = cli("show", folder)

    assert run.status == 0
    lines = run.out.splitlines()
    quest = next(i for i, l in enumerate(lines) if "quest" in l and "messages" in l)
    guard = next(i for i, l in enumerate(lines) if "guard " in l and "forked from quest at 1" in l)
    night = next(i for i, l in enumerate(lines) if "guard-night" in l)
    assert quest < guard < night
    indent = lambda line: len(line) - len(line.lstrip(" │├└─"))
    assert indent(lines[quest]) < indent(lines[guard]) < indent(lines[night]), "children nest under parents"
    assert "10 messages" in lines[quest] and "2 undone" in lines[quest] and "repaired" in lines[quest]
    assert f"locked by pid {os.getpid()}" in lines[guard] and "(running)" in lines[guard]
    assert "blobs/: 1 file(s)" in run.out


def test_show_with_no_argument_is_the_sessions_folder(folder):
    run = run_module("show", cwd=folder.parent)
    assert run.status == 0, run.text
    assert "guard-night" in run.out


def test_an_unknown_session_lists_the_ones_there_are(cli, folder):
    run = cli("show", "nobody", "--sessions", folder)
    assert run.status == 1
    assert "no session 'nobody'" in run.err and "guard-night" in run.err and "quest" in run.err


def test_long_contents_are_shortened_unless_full(cli, tmp_path):
    path = tmp_path / "long.jsonl"
    write_log(path, {"role": "user", "content": "word " * 200})
    assert "more characters" in cli("show", path).out
    assert "more characters" not in cli("show", path, "--full").out


def test_after_an_undo_each_result_is_labelled_with_the_call_it_answers(cli, course_copy, tmp_path):
    # The scripted model numbers its call ids by the length of the conversation, so the
    # call made after an undo has the id of the call taken back: call_2_0 twice.
    course = course_copy({"07_undo": STARTER})
    sessions = tmp_path / "sessions"
    chat = cli("--course", course, "chat", "q", "--lesson", "07", "--solution", "--sessions", sessions,
               input="ask the elder about the cave\n/undo\nbuy a torch\n")
    assert chat.status == 0, chat.text

    out = cli("show", "q", "--sessions", sessions).out
    elder = next(line for line in out.splitlines() if "← The elder says" in line)
    torch = next(line for line in out.splitlines() if "← You bought a torch" in line)
    assert "(talk_to, call_2_0)" in elder, elder
    assert "(buy, call_2_0)" in torch, torch


def test_a_result_answers_the_nearest_earlier_call_with_its_id_not_yet_answered(cli, tmp_path):
    path = tmp_path / "ids.jsonl"
    write_log(path,
              {"role": "assistant", "content": None, "tool_calls": [call("c", "talk_to", npc="elder")]},
              {"role": "tool", "tool_call_id": "c", "content": "first"},
              {"role": "assistant", "content": None,
               "tool_calls": [call("c", "buy", item="rope"), call("d", "buy", item="map")]},
              {"role": "tool", "tool_call_id": "c", "content": "second"},
              {"role": "tool", "tool_call_id": "c", "content": "third"},
              {"role": "tool", "tool_call_id": "d", "content": "fourth"})
    lines = cli("show", path).out.splitlines()
    shown = {word: next(line for line in lines if f"← {word}" in line) for word in
             ("first", "second", "third", "fourth")}
    assert "(talk_to, c)" in shown["first"] and "(buy, c)" in shown["second"]
    assert "(c)" in shown["third"] and "buy" not in shown["third"], "no call is left for it to answer"
    assert "(buy, d)" in shown["fourth"]
