"""What `sessionlab chat` leaves on disk, and what it says about it: the log, its folder,
and the town kept beside it."""

from __future__ import annotations

import json
import os

import pytest

from .conftest import STARTER
from .readonly import run_read_only

LESSONS = ["01_append", "02_load", "03_fork", "07_undo"]


@pytest.fixture
def chat_course(course_copy):
    return course_copy({name: STARTER for name in LESSONS})


def chat(cli, root, sessions, *argv, lesson="02", input=""):
    return cli("--course", root, "chat", *argv, "--lesson", lesson, "--solution", "--sessions", sessions,
               input=input)


def test_a_chat_that_wrote_nothing_does_not_say_it_saved(cli, chat_course, tmp_path):
    sessions = tmp_path / "sessions"
    run = chat(cli, chat_course, sessions, "x")
    assert run.status == 0, run.text
    assert "saved in" not in run.out and "Continue with" not in run.out
    assert f"nothing was written to {sessions / 'x.jsonl'}" in run.out
    assert not (sessions / "x.jsonl").exists()

    chat(cli, chat_course, sessions, "x", input="ask the elder about the cave\n")
    again = chat(cli, chat_course, sessions, "x", input="/history\n")
    assert "saved in" not in again.out and "nothing was written" in again.out

    grew = chat(cli, chat_course, sessions, "x", input="what did the elder say?\n")
    assert f"saved in {sessions / 'x.jsonl'}. Continue with: sessionlab chat x --lesson 02" in grew.out


@pytest.mark.parametrize("lesson", ["01", "02", "07"])
def test_an_empty_or_missing_log_is_a_new_session(cli, chat_course, tmp_path, lesson):
    sessions = tmp_path / "sessions"
    sessions.mkdir(mode=0o700)
    (sessions / "x.jsonl").write_bytes(b"")
    empty = chat(cli, chat_course, sessions, "x", lesson=lesson)
    assert f"session x: {sessions / 'x.jsonl'} (new)" in empty.out, empty.out
    assert "exists" not in empty.out and "only appends" not in empty.err

    missing = chat(cli, chat_course, sessions, "y", lesson=lesson)
    assert f"session y: {sessions / 'y.jsonl'} (new)" in missing.out


def test_the_sessions_folder_and_its_parents_are_made_for_their_owner_only(cli, chat_course, tmp_path):
    sessions = tmp_path / "work" / "notes" / "sessions"
    old = os.umask(0o022)
    try:
        run = chat(cli, chat_course, sessions, "x", input="ask the elder about the cave\n")
    finally:
        os.umask(old)
    assert run.status == 0, run.text
    for folder in (tmp_path / "work", tmp_path / "work" / "notes", sessions):
        assert oct(folder.stat().st_mode & 0o777) == oct(0o700), folder


def town(run) -> str:
    return next(line for line in run.out.splitlines() if line.startswith("gold:"))


def test_gold_spent_stays_spent_when_the_chat_resumes(cli, chat_course, tmp_path):
    sessions = tmp_path / "sessions"
    first = chat(cli, chat_course, sessions, "q", input="buy a torch\n/town\n")
    assert town(first) == "gold: 7; items: torch"
    saved = json.loads((sessions / "q.town.json").read_text())
    assert saved["gold"] == 7 and saved["inventory"] == ["torch"]

    resumed = chat(cli, chat_course, sessions, "q", input="/town\nbuy a lantern\n/town\n")
    assert "the town: 7 gold, items: torch" in resumed.out
    assert "Not enough gold: a lantern costs 8, you have 7." in resumed.out
    assert town(resumed) == "gold: 7; items: torch"


def test_a_fork_keeps_the_gold_left_and_its_purchases_are_its_own(cli, chat_course, tmp_path):
    sessions = tmp_path / "sessions"
    chat(cli, chat_course, sessions, "q", input="buy a torch\n")

    fork = chat(cli, chat_course, sessions, "w", "--fork-from", "q", lesson="03",
                input="/town\nbuy a rope\n/town\n")
    assert fork.status == 0, fork.text
    first, then = [line for line in fork.out.splitlines() if line.startswith("gold:")]
    assert first == "gold: 7; items: torch", "history, not the world: no refund in the fork"
    assert then == "gold: 3; items: torch, rope"

    source = chat(cli, chat_course, sessions, "q", lesson="03", input="/town\n")
    assert town(source) == "gold: 7; items: torch", "the fork's purchase is the fork's"


@pytest.mark.parametrize("content", ["not json", '{"gold": "lots", "inventory": []}',
                                     '{"gold": 5, "inventory": ["dragon"]}', "[]"])
def test_a_town_file_that_cannot_be_read_stops_the_chat_in_one_line(cli, chat_course, tmp_path, content):
    sessions = tmp_path / "sessions"
    sessions.mkdir(mode=0o700)
    (sessions / "q.town.json").write_text(content)
    run = chat(cli, chat_course, sessions, "q", input="buy a torch\n")
    assert run.status == 1
    assert run.err.splitlines()[0].startswith(f"error: {sessions / 'q.town.json'} is not a town file")
    assert (sessions / "q.town.json").read_text() == content, "nothing is lost"
    assert not (sessions / "q.jsonl").exists()


def test_chat_in_a_read_only_folder_names_it_in_one_line(chat_course, tmp_path):
    here = tmp_path / "here"
    here.mkdir()
    run = run_read_only([here], "--course", chat_course, "chat", "x", "--lesson", "02", "--solution",
                        cwd=here, input="ask the elder about the cave\n")
    assert run.status == 1, run.text
    assert "Traceback" not in run.text
    assert run.err.splitlines()[0].startswith("error: cannot write in the sessions folder sessions: ")

    (here / "sessions").mkdir()
    run = run_read_only([here], "--course", chat_course, "chat", "x", "--lesson", "02", "--solution",
                        cwd=here, input="ask the elder about the cave\n")
    assert run.status == 1 and "Traceback" not in run.text
    assert run.err.splitlines()[0].startswith("error: cannot write in the sessions folder sessions: ")
