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


# --- what the model says when asked for a summary (lesson 08's summary contract) ------------

from sessionlab.cli import chat as chat_command  # noqa: E402
from sessionlab.scripted import (  # noqa: E402
    ANSWER_AFTER_THOUGHT, NO_ANSWER, NO_ANSWER_TEXT, ODD_REPLIES, THOUGHT, ScriptedModel, long_reply,
    summaries)
from sessionlab.town_model import play  # noqa: E402

ODD_SUMMARIES = {**{key: ODD_REPLIES[key] for key in NO_ANSWER}, "too_long": long_reply(9000)}


def model_summarising(monkeypatch, *replies):
    """The chat's town model, answering its first summary requests with `replies` (then
    as it always does)."""
    monkeypatch.setattr(chat_command, "default_model",
                        lambda: ScriptedModel(script=play, summarise=summaries(*replies)))


def compaction_markers(path):
    return [line for line in map(json.loads, path.read_text(encoding="utf-8").splitlines())
            if line.get("$marker") == "compaction"]


@pytest.mark.parametrize("odd", list(ODD_SUMMARIES))
def test_a_summary_reply_that_is_no_summary_is_one_line_and_the_chat_and_its_resume_go_on(
        cli, compact_course, sessions, monkeypatch, odd):
    """Twice no summary (a tool call, no text, only thinking, a call as JSON text, far over
    the budget): one error line saying what the model sent and what to do, no traceback, no
    exit; the next message compacts with a real summary; nothing unchecked is recorded, and
    the chat resumed later is healthy."""
    model_summarising(monkeypatch, ODD_SUMMARIES[odd], ODD_SUMMARIES[odd])
    run = chat(cli, compact_course, sessions, "--budget", "1300", input=LONG_DAY)
    assert run.status == 0, run.text
    assert "Traceback" not in run.text and "the agent failed" not in run.text, run.text
    errors = [line for line in run.err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "the model answered the summary request with" in errors[0], run.err
    assert "turn alone" not in run.err, "the summary failed, not the turn"
    assert "/compact asks for a summary again" in run.err, run.err
    assert "── compacted: messages [0] to [" in run.out, "the next message compacts: " + run.out
    log = sessions / "quest.jsonl"
    said = [m["content"] for m in messages(log) if m["role"] == "user"]
    assert said == LONG_DAY.splitlines(), "the log keeps every message, the stopped turn's too"
    for marker in compaction_markers(log):
        assert marker["summary"].startswith("Summary of "), marker["summary"][:200]

    again = chat(cli, compact_course, sessions, "--budget", "1300", input="what did the elder say?\n")
    assert again.status == 0 and "error:" not in again.err, again.text
    assert "The elder says" in again.out, again.out
    shown = cli("show", "quest", "--sessions", sessions)
    assert shown.status == 0 and "no summary:" not in shown.out, shown.out


def test_a_think_block_before_the_summary_is_not_recorded_and_show_draws_the_summary(
        cli, compact_course, sessions, monkeypatch):
    """A summary after a <think> block is recorded without it, at the first asking."""
    model_summarising(monkeypatch, ODD_REPLIES["think_then_text"])
    run = chat(cli, compact_course, sessions, "--budget", "1300", input=LONG_DAY)
    assert run.status == 0 and "error:" not in run.err, run.text
    first = compaction_markers(sessions / "quest.jsonl")[0]
    assert first["summary"] == ANSWER_AFTER_THOUGHT, first


def test_compact_by_hand_with_a_reply_that_is_no_summary_changes_nothing(
        cli, compact_course, sessions, monkeypatch):
    """`/compact` with two replies that are no summary says so in one line; the chat goes on
    uncompacted, and the next /compact, with a real summary, works."""
    model_summarising(monkeypatch, ODD_REPLIES["call_as_json"], ODD_REPLIES["unfinished_think"])
    run = chat(cli, compact_course, sessions, input=QUEST + "buy a torch\n/compact\n/compact\n")
    assert run.status == 0, run.text
    assert "nothing was compacted: BadSummary: the model answered the summary request with a call "\
           "to talk_to written as JSON text" in run.err, run.err
    assert run.out.count("── compacted:") == 1, run.out
    assert len(compaction_markers(sessions / "quest.jsonl")) == 1


def test_show_warns_of_a_summary_recorded_unchecked(cli, sessions):
    """A log written before the check (or by other code) may hold a tool call as its
    summary: show says so beside the marker."""
    sessions.mkdir()
    lines = [{"role": "user", "content": "ask the elder"}, {"role": "assistant", "content": "Done."},
             {"role": "user", "content": "buy a torch"},
             {"$marker": "compaction", "summary": ODD_REPLIES["call_as_json"].message["content"], "upto": 2},
             {"role": "assistant", "content": "Bought."}]
    (sessions / "quest.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    shown = cli("show", "quest", "--sessions", sessions)
    assert "no summary: it is a call to talk_to written as JSON text" in shown.out, shown.out


@pytest.mark.skipif(not (REPO / "solutions" / "10_sidechains").is_dir(), reason="no lesson 10")
@pytest.mark.parametrize("odd", [*NO_ANSWER_TEXT, "think_then_text"])
def test_a_helper_reply_that_gives_no_answer_reaches_the_parent_as_an_error(
        cli, course_copy, sessions, monkeypatch, odd):
    """Lesson 10: a helper whose last reply is no answer hands the parent an error result
    saying so (its thinking never reaches the parent); the chat goes on, and resumes."""
    def policy(body):
        first = body["messages"][0].get("content") or ""
        if first.startswith("You are a helper") and body["messages"][-1]["role"] == "user":
            return ODD_REPLIES[odd]
        return play(body)
    monkeypatch.setattr(chat_command, "default_model", lambda: ScriptedModel(script=policy))
    course = course_copy({"10_sidechains": STARTER})
    ask = "ask a helper to find out what the elder knows\n"
    run = chat(cli, course, sessions, input=ask, lesson="10")
    assert run.status == 0 and "Traceback" not in run.text, run.text
    results = [m for m in messages(sessions / "quest.jsonl") if m["role"] == "tool"]
    expected = (ANSWER_AFTER_THOUGHT if odd == "think_then_text"
                else "error: the helper gave no answer")
    assert results and results[0]["content"].startswith(expected), results
    assert THOUGHT not in results[0]["content"], "the helper's thinking reached the parent"
    again = chat(cli, course, sessions, input="what did the elder say?\n", lesson="10")
    assert again.status == 0 and "error:" not in again.err, again.text


def test_the_show_command_a_hint_names_works_for_files_and_for_the_database(tmp_path):
    """The commands the chat's hints name say where the session is: --sessions DIR, or
    --store with the URL as given (its query may name the socket), never a password."""
    folder = tmp_path / "sessions"
    assert chat_command.show_command("quest", folder) == f"sessionlab show quest --sessions {folder}"
    url = "postgresql://me@/db?host=/run/pg&options=-csearch_path%3Dt"
    assert chat_command.show_command("quest", folder, url) == f"sessionlab show quest --store {url}"
    assert "secret" not in chat_command.show_command("quest", folder, "postgresql://me:secret@h/db")
    assert "secret" not in chat_command.where_option(folder, "postgresql:///db?password=secret")


def test_a_chat_kept_in_the_database_meets_a_reply_that_is_no_summary_and_goes_on(
        cli, course_copy, tmp_path, monkeypatch, request):
    """Lesson 11's store compacts through the same checks: with --store, two replies that
    are no summary are one error line, no marker row, and the chat and its resume go on."""
    from sessionlab.pgserver import why_not_available
    if (reason := why_not_available()) is not None:
        pytest.skip(f"--store needs PostgreSQL. {reason}")
    database = request.getfixturevalue("database")
    model_summarising(monkeypatch, ODD_REPLIES["tool_call"], ODD_REPLIES["call_as_json"])
    course = course_copy({"11_postgres": STARTER})
    store = ("--store", database, "--sessions", tmp_path / "town")
    run = cli("--course", course, "chat", "quest", "--lesson", "11", "--solution", *store,
              "--budget", "1300", input=LONG_DAY)
    assert run.status == 0 and "Traceback" not in run.text, run.text
    assert "the model answered the summary request with a call to talk_to" in run.err, run.err
    assert "── compacted: messages [0] to [" in run.out, run.out
    again = cli("--course", course, "chat", "quest", "--lesson", "11", "--solution", *store,
                "--budget", "1300", input="what did the elder say?\n")
    assert again.status == 0 and "error:" not in again.err, again.text
    hinted = chat_command.show_command("quest", tmp_path / "town", database).split()
    assert hinted[:2] == ["sessionlab", "show"], hinted
    shown = cli(*hinted[1:])     # the command a hint names works as printed
    assert shown.status == 0 and "talk_to" in shown.out, shown.text
    assert "no summary:" not in shown.out, shown.out
