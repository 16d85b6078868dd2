"""Side-chains on the command line (lesson 10): `chat` offers ask_helper and prints the
helper's own log under its call; `show` draws it there, and never lists it as a session."""

from __future__ import annotations

import json

import pytest

from sessionlab.town import HelperTown, Town
from sessionlab.town_model import play

from .conftest import REPO, STARTER

pytestmark = pytest.mark.skipif(not (REPO / "solutions" / "10_sidechains").is_dir(),
                                reason="lesson 10 is not in the course yet")

HELP = "ask a helper to find out what the elder knows\n"


def write_log(path, *entries):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")


def call(call_id, name, **arguments):
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}


ASK = {"role": "user", "content": "Ask a helper."}
CALLED = {"role": "assistant", "content": "",
          "tool_calls": [call("call_1_0", "ask_helper", question="Ask the elder.")]}
ANSWER = {"role": "tool", "tool_call_id": "call_1_0", "content": "A torch and a rope."}


def pointer(session="quest", sidechain="call_1_0"):
    return {"$marker": "sidechain", "call": "call_1_0", "session": session,
            "sidechain": sidechain, "at": "2026-12-01T09:00:00+00:00"}


HELPER_LOG = [{"role": "user", "content": "Ask the elder."},
              {"role": "assistant", "content": "", "tool_calls": [call("call_2_0", "talk_to", npc="elder")]},
              {"role": "tool", "tool_call_id": "call_2_0", "content": "The elder says: bring a torch."},
              {"role": "assistant", "content": "A torch and a rope."}]


@pytest.fixture
def folder(tmp_path):
    folder = tmp_path / "sessions"
    write_log(folder / "quest.jsonl", ASK, CALLED, pointer(), ANSWER)
    write_log(folder / "quest.sidechains" / "call_1_0.jsonl", *HELPER_LOG)
    (folder / "quest.sidechains" / "call_1_0.meta.json").write_text(json.dumps(
        {"format": 1, "id": "call_1_0", "sidechain_of": "quest", "call": "call_1_0",
         "created": "2026-12-01T09:00:00+00:00"}))
    return folder


def test_chat_on_lesson_10_prints_the_helpers_side_chain_under_its_call(cli, course_copy, tmp_path):
    """The built-in town model asks a helper; the chat prints the call, then the helper's
    own log, indented, then the helper's answer as the call's result."""
    course = course_copy({"10_sidechains": STARTER})
    sessions = tmp_path / "sessions"
    run = cli("--course", course, "chat", "--lesson", "10", "--solution", "--sessions", sessions,
              "quest", input=HELP + "what did the elder say?\n")
    assert run.status == 0, run.text
    out = run.out
    assert out.index('ask_helper(question="Ask the elder') < out.index("── side-chain quest.sidechains/") \
        < out.index('│ [1] agent   → talk_to(npc="elder")') < out.index("(ask_helper, call_"), out
    assert "Here is what we heard: The elder says" in out, "the helper's answer is remembered"
    logs = sorted(p.name for p in (sessions / "quest.sidechains").iterdir())
    assert [name for name in logs if name.endswith(".jsonl")] == ["call_2_0.jsonl"], logs


def test_show_draws_a_side_chain_under_the_call_that_made_it(cli, folder):
    """`show` puts the helper's messages, indented, between the call and its result."""
    out = cli("show", "quest", "--sessions", folder).out
    assert out.index("→ ask_helper") < out.index("── side-chain quest.sidechains/call_1_0.jsonl ── "
                                                  "helper of call call_1_0, 4 messages") \
        < out.index("│ [1] agent   → talk_to") < out.index("[2] result  ← A torch and a rope."), out


def test_show_lists_side_chains_as_the_sessions_helpers_never_as_sessions(cli, folder):
    """The folder's tree shows one session with one side-chain; the side-chain's own log
    says whose helper it was."""
    out = cli("show", "--sessions", folder).out
    assert "quest  3 messages  1 side-chain" in out, out
    assert "call_1_0" not in out, "a side-chain is no top-level session"
    side = cli("show", "quest.sidechains/call_1_0", "--sessions", folder).out
    assert "side-chain of quest, started by call call_1_0" in side, side


def test_a_forks_pointer_says_whose_side_chain_it_leads_to(cli, folder):
    """A fork's copied pointer leads to its source's side-chain, and show says so."""
    write_log(folder / "quest-2.jsonl", ASK, CALLED, pointer(), ANSWER)
    out = cli("show", "quest-2", "--sessions", folder).out
    assert "helper of call call_1_0, 4 messages" in out
    assert "written by quest's helper" in out, out


@pytest.mark.parametrize("bad, said", [
    (pointer(sidechain="../../etc/passwd"), "names no valid side-chain"),
    (pointer(sidechain="call_9_9"), "missing"),
])
def test_a_pointer_show_cannot_follow_is_one_line(cli, folder, bad, said):
    """A pointer to a missing side-chain, or with a name that is no session id, is one
    line in the log's place; show never follows it out of the folder."""
    write_log(folder / "quest.jsonl", ASK, CALLED, bad, ANSWER)
    run = cli("show", "quest", "--sessions", folder)
    assert run.status == 0
    assert said in run.out and "A torch and a rope." in run.out, run.out


def test_a_helper_stopped_half_way_is_pointed_out(cli, folder):
    """A side-chain that ends without an answer (a crash inside the helper) says so."""
    write_log(folder / "quest.sidechains" / "call_1_0.jsonl", *HELPER_LOG[:2])
    out = cli("show", "quest", "--sessions", folder).out
    assert "it ends without an answer" in out, out


def test_the_town_model_asks_a_helper_only_when_the_town_offers_one():
    """With lesson 10's town the quest's "ask a helper" is an ask_helper call; with the
    town of lessons 00-07 the model answers as it always did."""
    def request(town):
        return {"messages": [{"role": "user", "content": HELP.strip()}], "tools": town.schemas}
    helper = play(request(HelperTown()))
    assert [c.name for c in helper.tool_calls] == ["ask_helper"]
    plain = play(request(Town()))
    assert [c.name for c in plain.tool_calls] == ["talk_to"]
