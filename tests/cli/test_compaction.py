"""`sessionlab chat` and `show` with lesson 08's compaction: a budget, `/compact`, the
boundary drawn in the log. The chats run the reference solution against the built-in town
model (no network)."""

from __future__ import annotations

import json

import pytest

from .conftest import REPO, STARTER

pytestmark = pytest.mark.skipif(not (REPO / "solutions" / "08_compact").is_dir(),
                                reason="lesson 08 is not in the course yet")

# A long day in town: more than a budget of 1300 tokens holds.
QUEST = "ask the elder about the cave\n"
LONG_DAY = ("ask the elder about the cave\nbuy a torch\nask the guard\nwhat did the elder say?\n"
            "buy a rope\nask the daughter\nwhat did the elder say?\nwhat do we have?\n")


@pytest.fixture
def compact_course(course_copy):
    return course_copy({"07_undo": STARTER, "08_compact": STARTER})


@pytest.fixture
def sessions(tmp_path):
    return tmp_path / "sessions"


def chat(cli, course, sessions, *options, input, lesson="08"):
    return cli("--course", course, "chat", "quest", "--lesson", lesson, "--solution",
               "--sessions", sessions, *options, input=input)


def messages(path):
    return [line for line in map(json.loads, path.read_text(encoding="utf-8").splitlines())
            if "$marker" not in line]


def test_a_long_chat_compacts_visibly_and_the_log_keeps_every_message(cli, compact_course, sessions):
    """A chat longer than its budget compacts, says so in one line, still recalls what the
    elder said through the summary, and keeps every message in the log; show draws the
    boundary, the fork tree counts the compaction, and a resumed chat says where requests start."""
    run = chat(cli, compact_course, sessions, "--budget", "1300", input=LONG_DAY)
    assert run.status == 0, run.text
    assert "requests within 1300 estimated tokens" in run.out
    assert "── compacted: messages [0] to [" in run.out, run.out
    # The town model still knows what the elder said: the summary quotes it.
    last_recall = run.out.rsplit("what did the elder say?", 1)[1]
    assert "The elder says" in last_recall, run.out
    log = sessions / "quest.jsonl"
    said = [m["content"] for m in messages(log) if m["role"] == "user"]
    assert said == LONG_DAY.splitlines(), "the log keeps every message of the chat"

    shown = cli("show", "quest", "--sessions", sessions)
    assert "┄┄ compaction boundary (marker on line" in shown.out, shown.out
    assert "── compaction ── the summary of messages [0] to [" in shown.out
    tree = cli("show", sessions)
    assert "1 compaction" in tree.out, tree.out

    again = chat(cli, compact_course, sessions, "--budget", "1300", input="")
    assert "compacted: requests start with a summary, then message [" in again.out, again.out


def test_compact_by_hand_and_with_nothing_to_compact(cli, compact_course, sessions):
    """`/compact` summarises all but the newest turn (one marker, upto 4 after two turns), and
    says "nothing to compact" when the newest turn already starts the request."""
    run = chat(cli, compact_course, sessions, input="/compact\n" + QUEST + "/compact\nbuy a torch\n/compact\n/help\n")
    assert run.status == 0, run.text
    assert "requests within 4096 estimated tokens" in run.out, "the default budget"
    assert run.out.count("nothing to compact") == 2, run.out
    assert "── compacted: messages [0] to [3] are summarised" in run.out, run.out
    assert "/compact  summarise all but the newest turn" in run.out
    markers = [line for line in map(json.loads, (sessions / "quest.jsonl").read_text().splitlines())
               if line.get("$marker") == "compaction"]
    assert [m["upto"] for m in markers] == [4]



def test_a_turn_over_the_budget_is_one_line_and_the_chat_goes_on(cli, compact_course, sessions):
    """A message too large for the budget by itself is refused in one line with what to do,
    no traceback, and the chat goes on: /undo takes it back and the quest continues."""
    run = chat(cli, compact_course, sessions, "--budget", "1000",
               input="tell me about " + "the long road north and " * 60 + "\n" + "/undo\n" + QUEST)
    assert run.status == 0, run.text
    assert "ContextOverflow" not in run.err and "Traceback" not in run.text
    assert "more than the budget of 1000" in run.err and "/undo" in run.err, run.err
    assert "took back 1 turn(s)" in run.out and "The elder says" in run.out, run.out


def test_budget_is_refused_for_a_lesson_that_cannot_compact(cli, compact_course, sessions):
    """`--budget` with lesson 07's code is refused before anything is written, and `/compact`
    there says the agent cannot compact."""
    run = chat(cli, compact_course, sessions, "--budget", "100", input=QUEST, lesson="07")
    assert run.status == 1
    assert "compaction arrives in lesson 08" in run.err and "Traceback" not in run.text
    assert not sessions.exists() or not list(sessions.glob("*.jsonl")), "nothing was written"
    on_07 = chat(cli, compact_course, sessions, input="/compact\n", lesson="07")
    assert "this lesson's agent cannot compact" in on_07.err


def test_a_negative_budget_is_refused_in_one_line(cli, compact_course, sessions):
    """`--budget -5` is refused in one line; `--budget 0` means no budget, and says so."""
    run = chat(cli, compact_course, sessions, "--budget", "-5", input=QUEST)
    assert run.status == 1 and "a budget is a number of tokens, 0 or more" in run.err, run.text
    off = chat(cli, compact_course, sessions, "--budget", "0", input=QUEST)
    assert off.status == 0 and "no budget: every request carries the whole history" in off.out
