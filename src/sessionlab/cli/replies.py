"""Reading a model's reply the way a person would, for display only.

The log keeps what the model said, byte for byte; these helpers only decide how the chat
shows it:

* reasoning models (DeepSeek-R1, Qwen3, ...) put their thinking in `<think>...</think>` before
  the answer; some chat templates open the tag in the prompt, so the reply holds only the
  closing `</think>`. The thinking is shown dimmed and folded, the answer as the answer.
* small models often write a tool call as JSON text in `content` instead of calling the tool
  (`{"name": "buy", "parameters": {"item": "rope"}}`, sometimes in a ```json fence or a
  `<tool_call>` tag). The server did not recognise it, so the agent never ran it; the chat
  says so rather than leaving the user to wonder why nothing happened.
"""

from __future__ import annotations

import json
import re
from typing import Any

_OPEN, _CLOSE = "<think>", "</think>"
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)
_TAGGED = re.compile(r"^<tool_call>\s*(.*?)\s*</tool_call>$", re.DOTALL)


def split_thinking(content: str) -> tuple[str, str]:
    """(thinking, answer). Without think tags, thinking is ""."""
    close = content.rfind(_CLOSE)
    if close < 0:
        if content.lstrip().startswith(_OPEN):
            # Still thinking when the reply was cut off (max tokens): all of it is thinking.
            return content.lstrip()[len(_OPEN):].strip(), ""
        return "", content
    before, answer = content[:close], content[close + len(_CLOSE):]
    start = before.find(_OPEN)
    thinking = before[start + len(_OPEN):] if start >= 0 else before
    return thinking.replace(_OPEN, "").replace(_CLOSE, "").strip(), answer.strip()


def tool_calls_in_text(content: str, tool_names: set[str] | None = None) -> list[str]:
    """Names of the tool calls written as text in `content` (empty when it is plain prose).

    Only a reply that is nothing but the call(s) counts, so an answer that merely quotes JSON
    is left alone. With `tool_names`, only calls to those tools count.
    """
    text = content.strip()
    for pattern in (_FENCE, _TAGGED):
        match = pattern.match(text)
        if match:
            text = match.group(1).strip()
    if not text or text[0] not in "[{":
        return []
    try:
        parsed = json.loads(text)
    except ValueError:
        return []
    calls = parsed if isinstance(parsed, list) else [parsed]
    names = []
    for call in calls:
        if not isinstance(call, dict):
            return []
        inner = call.get("function") if isinstance(call.get("function"), dict) else call
        name = inner.get("name")
        if not isinstance(name, str) or not any(key in inner for key in ("arguments", "parameters")):
            return []
        if tool_names is not None and name not in tool_names:
            return []
        names.append(name)
    return names


def assistant_view(message: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(thinking, the message as shown): the same message with the thinking taken out."""
    content = message.get("content")
    if message.get("role") != "assistant" or not isinstance(content, str):
        return "", message
    thinking, answer = split_thinking(content)
    if not thinking and _CLOSE not in content:
        return "", message
    return thinking, {**message, "content": answer}


def fold(text: str, limit: int = 160) -> str:
    """One line: the start of the thinking and how much more there is."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    return flat[:limit].rstrip() + f" … ({len(flat) - limit} more characters)"
