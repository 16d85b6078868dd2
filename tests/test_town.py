"""The town and the built-in town model that plays the quest offline."""

import subprocess
import sys

import pytest

from sessionlab.scripted import ScriptedModel
from sessionlab.town import PRICES, TOOL_SCHEMAS, Town
from sessionlab.town_model import play


def request(*messages, tools=TOOL_SCHEMAS):
    return {"model": "scripted-town", "messages": list(messages), "tools": tools}


def user(text):
    return {"role": "user", "content": text}


def test_buying_spends_gold_until_it_runs_out():
    town = Town(gold=5)
    assert "You bought a torch" in town.buy("torch") and town.gold == 2
    assert "Not enough gold" in town.buy("rope") and town.gold == 2
    assert town.inventory == ["torch"]


def test_unknown_people_and_items_are_answers_not_exceptions():
    town = Town()
    assert "no one called" in town.talk_to("dragon")
    assert "no 'sword'" in town.buy("sword")


def test_the_tool_schemas_describe_exactly_the_town_functions():
    town = Town()
    assert [s["function"]["name"] for s in town.schemas] == list(town.functions)
    for schema in town.schemas:
        assert schema["function"]["parameters"]["required"]


def test_the_town_model_calls_tools_for_requests_in_plain_words():
    reply = play(request(user("Ask the elder and the guard about the cave.")))
    assert [c.name for c in reply.tool_calls] == ["talk_to", "talk_to"]
    reply = play(request(user("Buy a torch and a rope.")))
    assert sorted(c.arguments for c in reply.tool_calls) == ['{"item": "rope"}', '{"item": "torch"}']


def test_the_town_model_remembers_only_what_it_is_sent():
    heard = [user("Ask the elder."),
             {"role": "assistant", "content": None, "tool_calls": [
                 {"id": "c1", "type": "function", "function": {"name": "talk_to", "arguments": '{"npc": "elder"}'}}]},
             {"role": "tool", "tool_call_id": "c1", "content": Town().talk_to("elder")},
             {"role": "assistant", "content": "ok"}]
    assert "torch" in play(request(*heard, user("What did the elder say?"))).content
    assert "don't remember" in play(request(user("What did the elder say?"))).content
    advised = play(request(*heard, user("Buy what the elder said we need.")))
    assert {c.arguments for c in advised.tool_calls} == {'{"item": "torch"}', '{"item": "rope"}'}
    assert all(item in PRICES for item in ("torch", "rope"))


@pytest.mark.campaign
def test_the_demo_tells_the_quest_across_processes_and_leaves_the_logs(tmp_path):
    done = subprocess.run([sys.executable, "-m", "sessionlab.demo", "--dir", str(tmp_path / "demo")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 message(s) read back from disk" in done.stdout, done.stdout
    files = {p.name for p in (tmp_path / "demo").iterdir()}
    assert {"quest.jsonl", "quest-guard.jsonl", "quest-guard.meta.json"} <= files, files
    assert b"You bought a rope" in (tmp_path / "demo" / "quest.jsonl").read_bytes()
    assert b"guard says" in (tmp_path / "demo" / "quest-guard.jsonl").read_bytes()
    assert b"guard says" not in (tmp_path / "demo" / "quest.jsonl").read_bytes()
