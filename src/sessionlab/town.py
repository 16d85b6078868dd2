"""The town the adventurer lives in: two tools and a world state outside the conversation.

The town's state (gold, inventory) is deliberately *not* part of the chat history.
That is what lets lesson 03 show that forking a session copies history, not the world:
the rope bought on day 1 stays bought in every branch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

PRICES: dict[str, int] = {"bread": 1, "torch": 3, "rope": 4, "map": 6, "lantern": 8}

NPCS: dict[str, str] = {
    "elder": (
        "The cave north of the mill is dark and the ledge inside is steep. "
        "Nobody comes back from it without a torch and a rope."
    ),
    "guard": "The cave? The gate to the north road opens at dawn. Bring light, it is pitch black in there.",
    "mayor's daughter": "My father lost a map of the cave years ago. The shop may still have a copy.",
    "shopkeeper": "Torches, rope, bread, a map, a lantern. Gold first, adventure after.",
}

STARTING_GOLD = 10


def _function(name: str, description: str, param: str, param_description: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {param: {"type": "string", "description": param_description}},
                "required": [param],
                "additionalProperties": False,
            },
        },
    }


TOOL_SCHEMAS: list[dict[str, Any]] = [
    _function("talk_to", "Talk to someone in town and hear what they say.", "npc",
              "Who to talk to: " + ", ".join(NPCS) + "."),
    _function("buy", "Buy one item at the shop with the adventurer's gold.", "item",
              "What to buy: " + ", ".join(PRICES) + "."),
]


class Town:
    """The world: deterministic, with state that survives only as long as this object.

    `schemas` is what the model is told about the tools; `functions` maps each tool
    name to the Python function that runs it. Lesson code only ever uses these two.
    """

    def __init__(self, gold: int = STARTING_GOLD) -> None:
        self.gold = gold
        self.inventory: list[str] = []
        self.conversations: list[str] = []
        self.schemas: list[dict[str, Any]] = TOOL_SCHEMAS
        self.functions: dict[str, Callable[..., str]] = {"talk_to": self.talk_to, "buy": self.buy}

    def talk_to(self, npc: str) -> str:
        who = npc.strip().lower()
        if who not in NPCS:
            return f"There is no one called {npc!r} in town. You could talk to: {', '.join(NPCS)}."
        self.conversations.append(who)
        return f"The {who} says: {NPCS[who]}"

    def buy(self, item: str) -> str:
        what = item.strip().lower()
        if what not in PRICES:
            return f"The shop has no {item!r}. It sells: {', '.join(PRICES)}."
        price = PRICES[what]
        if price > self.gold:
            return f"Not enough gold: a {what} costs {price}, you have {self.gold}."
        self.gold -= price
        self.inventory.append(what)
        return f"You bought a {what} for {price} gold. {self.gold} gold left."

    def __repr__(self) -> str:
        return f"Town(gold={self.gold}, inventory={self.inventory})"


# --- lesson 10: ask_helper, a question handed to a helper agent ---------------------------

HELPER_SCHEMA: dict[str, Any] = _function(
    "ask_helper",
    "Hand a question to a helper agent: it works on it with the same tools and its own "
    "conversation, and answers in a few words.",
    "question", "What the helper should find out, e.g. 'Ask the elder what they know about the cave.'")


class HelperTown(Town):
    """The town with a third tool, `ask_helper(question)` (lesson 10).

    The town only offers the tool: a helper needs a model and a session, which the agent
    has and the town does not, so lesson 10's agent runs the helper itself when the model
    calls it (as Claude Code runs its Task tool). An agent of an earlier lesson calls the
    function below, and the model hears that no helper can start.
    """

    def __init__(self, gold: int = STARTING_GOLD) -> None:
        super().__init__(gold)
        self.schemas = [*TOOL_SCHEMAS, HELPER_SCHEMA]
        self.functions = {**self.functions, "ask_helper": self.ask_helper}

    def ask_helper(self, question: str) -> str:
        return ("error: no helper can start here: this agent does not run helpers "
                "(lesson 10 teaches it to). Do it yourself with talk_to and buy.")
