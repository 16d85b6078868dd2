"""The built-in town model: a scripted model that plays the cave quest without any real model.

It reads the conversation it is sent, so it behaves like a (very small) model with memory:
ask it on day 2 what the elder said and it can answer only if day 1's messages were sent
again. That makes the difference between lesson 00 and lesson 02 visible without a GPU.

It understands a handful of requests, in plain words:
  "ask a helper to find out what the elder knows"          -> an ask_helper call (lesson 10's town)
  "talk to the elder" / "ask the guard about the cave"     -> talk_to tool calls
  "buy a torch and a rope" / "buy what we need"            -> buy tool calls (several in one reply)
  "what did the elder say?" / "what do we have?"           -> an answer from the history
"""

from __future__ import annotations

import re
from typing import Any

from .scripted import Reply, ScriptedModel, call, say, use
from .town import NPCS, PRICES

HELP = ("I can talk to people in town (" + ", ".join(NPCS) + ") and buy things at the shop ("
        + ", ".join(PRICES) + "). Try: 'ask the elder about the cave', 'buy what we need', "
        "'what did the elder say?'")


def town_model() -> ScriptedModel:
    """A ScriptedModel whose every answer comes from `play` (it never runs out of script)."""
    return ScriptedModel(script=play)


def play(request: dict[str, Any]) -> Reply:
    messages = request["messages"]
    tools = {t["function"]["name"] for t in request.get("tools") or []}
    last = messages[-1]
    if last["role"] == "tool":
        return say(_summarise_results(messages))
    text = _text(last).lower()
    history = messages[:-1]

    if "ask_helper" in tools and re.search(r"\bhelpers?\b", text):     # lesson 10
        return _ask_helper(text)
    if "talk_to" in tools and re.search(r"\b(talk|ask|speak|visit)\b", text):
        people = [npc for npc in NPCS if _mentions(text, npc)]
        if people:
            return use(*(call("talk_to", npc=npc) for npc in people))
    if "buy" in tools and re.search(r"\b(buy|get|purchase)\b", text):
        items = [item for item in PRICES if re.search(rf"\b{item}s?\b", text)]
        if not items and re.search(r"\b(need|supplies|advice|said|told)\b", text):
            items = _advised_items(history)
            if not items:
                return say("I don't know what we need yet. Maybe someone in town can tell us?")
        if items:
            return use(*(call("buy", item=item) for item in items))
    if re.search(r"\b(what|who)\b.*\b(say|said|tell|told)\b", text):
        return say(_recall(history))
    if re.search(r"\b(have|own|carry|inventory|bought)\b", text):
        return say(_belongings(history))
    return say(HELP)


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # content parts
        return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


def _mentions(text: str, npc: str) -> bool:
    if npc == "mayor's daughter":
        return "daughter" in text
    return re.search(rf"\b{re.escape(npc)}\b", text) is not None


def _tool_results(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(tool name, result text) for every answered call in the conversation."""
    names = {}
    results = []
    for message in messages:
        for tool_call in message.get("tool_calls") or []:
            names[tool_call["id"]] = tool_call["function"]["name"]
        if message["role"] == "tool":
            results.append((names.get(message.get("tool_call_id"), "?"), _text(message)))
    return results


def _summarise_results(messages: list[dict[str, Any]]) -> str:
    # The results since the last assistant message are the ones this reply answers.
    start = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    fresh = [text for _, text in _tool_results(messages[start:])]
    return " ".join(fresh) if fresh else "Done."


def _advised_items(history: list[dict[str, Any]]) -> list[str]:
    said = " ".join(text for name, text in _tool_results(history) if name in HEARD_FROM).lower()
    return [item for item in PRICES if re.search(rf"\b{item}\b", said)]


def _recall(history: list[dict[str, Any]]) -> str:
    talks = [text for name, text in _tool_results(history) if name in HEARD_FROM]
    summarised = _summarised(history, SAID)    # lesson 08: after a compaction
    talks = _once_each(summarised + talks) if summarised else talks
    if not talks:
        return "I don't remember talking to anyone. (Is this a new conversation?)"
    return "Here is what we heard: " + " ".join(talks)


def _belongings(history: list[dict[str, Any]]) -> str:
    bought = [text for name, text in _tool_results(history) if name == "buy" and text.startswith("You bought")]
    bought = _summarised(history, BOUGHT) + bought   # lesson 08: after a compaction
    if not bought:
        return "As far as I remember, we have not bought anything yet."
    return "From what I remember: " + " ".join(bought)


# --- lesson 08: remembering through a summary ---------------------------------------------

SAID = re.compile(r"The (?:" + "|".join(re.escape(npc) for npc in NPCS) + r") says: [^\n]*")
BOUGHT = re.compile(r"You bought an? \w+ for \d+ gold\.")


def _summarised(history: list[dict[str, Any]], fact: re.Pattern) -> list[str]:
    """The facts a compaction's summary still tells (who said what, what was bought).

    After a compaction the older tool results are gone from the request; the summary (a
    user message) may quote them, and a model reads it like any other message.
    """
    found: list[str] = []
    for message in history:
        if message["role"] == "user":
            for said in fact.findall(_text(message)):
                if said not in found:
                    found.append(said)
    return found


def _once_each(talks: list[str]) -> list[str]:
    """Each person's words once (a summary quotes them again, or cut short)."""
    speakers: dict[str, str] = {}
    for said in talks:
        speaker = said.split(":", 1)[0]
        if len(said) > len(speakers.get(speaker, "")):
            speakers[speaker] = said
    return list(speakers.values())


# --- lesson 10: a helper agent ---------------------------------------------------------------

# The tools whose results say what someone in town said: a helper's answer is hearsay too.
HEARD_FROM = ("talk_to", "ask_helper")


def _ask_helper(text: str) -> Reply:
    """'ask a helper to find out what the elder knows' -> one ask_helper call.

    The question is one the model itself answers with talk_to when the helper's own loop
    sends it (a helper is offered no ask_helper), so the helper's side-chain holds a tool
    call and its result, and its answer comes back as the parent's tool result.
    """
    people = [npc for npc in NPCS if _mentions(text, npc)] or ["elder"]
    return use(*(call("ask_helper", question=f"Ask the {npc} what they know about the cave.")
                 for npc in people))
