"""The synthetic workload: a long, deterministic quest in OpenAI chat format.

Messages come in turns shaped the way an agent writes them: a user message, an assistant
message with one or two tool calls, one tool result per call, and a plain assistant answer.
Every message serialises to about 1 KB of JSON (a little non-ASCII included, since the store
writes UTF-8 as is). The same seed always gives the same messages, so two runs, or two
machines, measure the same bytes.
"""

from __future__ import annotations

import json
import random
from typing import Any

Message = dict[str, Any]

TARGET_BYTES = 1024

WORDS = (
    "the elder said the cave north of the mill is dark and the ledge inside is steep "
    "bring a torch and a rope the guard opens the gate at dawn gold is short the shop "
    "sells bread torches rope a map and a lantern the mayor's daughter lost her father's "
    "map years ago nobody comes back without light café crème déjà vu naïve Ünterberg "
    "rainy road lantern oil three coins two coins quest day night mill river bridge"
).split()
NPCS = ("elder", "guard", "mayor's daughter", "shopkeeper")
ITEMS = ("bread", "torch", "rope", "map", "lantern")


def _text(rng: random.Random, size: int) -> str:
    """Prose of about `size` characters."""
    out: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(WORDS)
        out.append(word)
        length += len(word) + 1
    return " ".join(out)


def quest(count: int, seed: int = 2024) -> list[Message]:
    """`count` messages of a quest, in order, about TARGET_BYTES of JSON each.

    Every tool call is answered: the conversation is one a provider would accept as is."""
    rng = random.Random(seed)
    # A pool of prose to draw from keeps generation fast for 100,000 messages while
    # still varying every message's bytes.
    pool = [_text(rng, 1200) for _ in range(257)]

    def prose(size: int) -> str:
        text = rng.choice(pool)
        start = rng.randrange(0, len(text) - size) if len(text) > size else 0
        return text[start:start + size]

    messages: list[Message] = []
    call = 0
    turn = 0
    while len(messages) < count:
        turn += 1
        ncalls = rng.choice((1, 1, 2))
        if len(messages) + 3 + ncalls > count:
            # No room for a whole tool exchange: end on plain talk, so the session never
            # stops between a tool call and its result (nothing for a resume to repair).
            while len(messages) < count:
                role = "assistant" if messages and messages[-1]["role"] == "user" else "user"
                messages.append({"role": role, "content": prose(990)})
            break
        messages.append({"role": "user", "content": f"Day {turn}: " + prose(960)})
        calls = []
        for _ in range(ncalls):
            call += 1
            if rng.random() < 0.5:
                name, args = "talk_to", {"npc": rng.choice(NPCS)}
            else:
                name, args = "buy", {"item": rng.choice(ITEMS)}
            calls.append({"id": f"call_{call:08d}", "type": "function",
                          "function": {"name": name, "arguments": json.dumps(args)}})
        # The assistant's thinking out loud carries the bulk of a tool-calling message.
        think = 1000 - 120 * len(calls) - 40
        messages.append({"role": "assistant", "content": prose(think), "tool_calls": calls})
        for c in calls:
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": prose(950)})
        messages.append({"role": "assistant", "content": prose(990)})
    return messages


def one_more(seed: int = 2024) -> Message:
    """A plain user message of the same size, for appending to a finished session."""
    rng = random.Random(seed + 1)
    return {"role": "user", "content": "One more thing: " + _text(rng, 1000)[:950]}


def mean_bytes(messages: list[Message]) -> float:
    """Mean size of one message as a JSON line (UTF-8, non-ASCII kept)."""
    sample = messages[:2000]
    total = sum(len(json.dumps(m, ensure_ascii=False).encode("utf-8")) + 1 for m in sample)
    return total / max(1, len(sample))
