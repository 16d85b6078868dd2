"""One day of the quest as an Agents SDK program: `python quest_day.py FOLDER TEXT...`.

An SDK `Runner` runs an agent with the town's `buy` tool on the scripted model (through
the SDK's chat-completions model, no network), with the course's file store as its
session (`FileSession("quest-1", FOLDER)`). Each TEXT is one run. It prints one JSON
line: every request's messages, and each run's final output. The tests start it once
per day, each day a process of its own, as a real program resumes a conversation.
"""

from __future__ import annotations

import asyncio
import json
import sys

import httpx
import openai
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
from agents import set_tracing_disabled

from sessionlab.adapters.agents_sdk import FileSession
from sessionlab.scripted import ScriptedModel, call, say, use


@function_tool
def buy(item: str) -> str:
    """Buy an item at the town's shop."""
    return f"You bought a {item}."


def script(request: dict) -> object:
    """Buy a rope when told "Buy ...", else answer from what the conversation holds."""
    last = request["messages"][-1]
    if last["role"] == "user" and last["content"].startswith("Buy"):
        return use(call("buy", item="rope"))
    said = [m for m in request["messages"] if m["role"] == "tool"]
    return say(f"So far: {said[-1]['content']}" if said else "Nothing yet.")


async def main(folder: str, texts: list[str]) -> None:
    set_tracing_disabled(True)      # no traces sent anywhere
    model = ScriptedModel(script)
    client = openai.AsyncOpenAI(
        base_url=model.base_url, api_key="scripted", max_retries=0,
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(model.router().handler)))
    agent = Agent(name="adventurer", instructions="You are an adventurer in a small town.",
                  tools=[buy], model=OpenAIChatCompletionsModel(model.model, client))
    session = FileSession("quest-1", folder)
    outputs = []
    try:
        for text in texts:
            result = await Runner.run(agent, text, session=session)
            outputs.append(result.final_output)
    finally:
        session.close()
    print(json.dumps({"requests": model.messages_sent, "outputs": outputs}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2:]))
