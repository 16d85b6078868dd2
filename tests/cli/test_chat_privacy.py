"""`sessionlab chat` on lesson 09: `/erase N` and `/delete`, each confirmed, each saying
what it cannot reach. The sessions are real files written by the reference solution."""

from __future__ import annotations

import json

import pytest

from .conftest import REPO, STARTER

pytestmark = pytest.mark.skipif(
    not (REPO / "solutions" / "09_privacy" / "agent.py").exists(),
    reason="lesson 09 is not in the course yet")

QUEST = "ask the elder about the cave\n"
SECRET = "My sister Ilse lives at 12 Elm Street"


@pytest.fixture
def privacy_course(course_copy):
    return course_copy({"09_privacy": STARTER})


def chat(cli, course, sessions, text):
    return cli("--course", course, "chat", "quest", "--lesson", "09", "--solution",
               "--sessions", sessions, input=text)


def holding(folder, text):
    return [path.name for path in folder.rglob("*")
            if path.is_file() and text.encode() in path.read_bytes()]


def test_erase_asks_first_then_leaves_no_byte_of_the_message(cli, privacy_course, tmp_path):
    sessions = tmp_path / "sessions"
    run = chat(cli, privacy_course, sessions,
               QUEST + SECRET + "\n/erase 4\nn\n/erase 4\ny\n/history\n")
    assert run.status == 0, run.text
    assert "nothing was erased" in run.out, "a 'no' must erase nothing"
    assert "erased message 4" in run.out
    assert "Not reached: the model provider" in run.out, "say what erasure cannot reach"
    assert "[4] you     [erased at the user's request]" in run.out
    assert holding(sessions, "Ilse") == []
    markers = [json.loads(line) for line in (sessions / "quest.jsonl").read_text().splitlines()
               if '"$marker"' in line]
    assert [m["index"] for m in markers if m["$marker"] == "erase"] == [4]
    shown = cli("show", "quest", "--sessions", sessions)
    assert "message 4 was erased" in shown.out


def test_erase_of_a_message_that_is_not_there_is_one_line_and_erases_nothing(
        cli, privacy_course, tmp_path):
    sessions = tmp_path / "sessions"
    run = chat(cli, privacy_course, sessions, QUEST + "/erase\n/erase 12\n/erase two\n")
    assert run.status == 0, run.text
    assert run.err.count("/erase takes the number of a message, 0 to 3") == 3, run.err
    assert '"erase"' not in (sessions / "quest.jsonl").read_text()


def test_delete_asks_first_then_removes_the_session_and_ends_the_chat(
        cli, privacy_course, tmp_path):
    sessions = tmp_path / "sessions"
    run = chat(cli, privacy_course, sessions,
               QUEST + "buy a torch\n/delete\nno\n/delete\ny\nnever read\n")
    assert run.status == 0, run.text
    assert "nothing was deleted" in run.out
    assert "deleted session 'quest'" in run.out
    assert "Not reached: the model provider" in run.out
    assert "saved in" not in run.out and "never read" not in run.out
    assert sorted(p.name for p in sessions.iterdir()) == [], (
        "the log, the lock and the town kept beside the session must all be gone")


def test_an_earlier_lessons_chat_says_where_erase_arrives(cli, course_copy, tmp_path):
    course = course_copy({"07_undo": STARTER})
    run = cli("--course", course, "chat", "quest", "--lesson", "07", "--solution",
              "--sessions", tmp_path / "s", input=QUEST + "/erase 0\n/delete\n/help\n")
    assert run.status == 0, run.text
    assert "erase arrives in lesson 09" in run.err
    assert "delete arrives in lesson 09" in run.err
    assert "/erase" not in run.out, "/help lists only what this lesson's agent can do"
