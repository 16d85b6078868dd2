# Generated from course/messages.py for lesson 00_memory:
# edit that source, then run `sessionlab dev generate`.
"""What a message may be, and how one becomes one line of a log.

One validator decides what may be recorded, and append and load both use it: a message
the log takes can always be read back and sent to a model again. What a model server
sends is normalized first (tool calls without ids, arguments as objects or broken JSON,
a null content), so that no server's quirk can make a session unresumable.
"""

from __future__ import annotations

import json
import uuid
from typing import Any


Message = dict[str, Any]


def read_arguments(arguments: Any) -> dict[str, Any]:
    """A tool call's arguments as a dict; ValueError if they hold none.

    The one judge of arguments: run_tool runs what it reads, and normalize_reply stores
    what it reads, so a call is never stored as one thing and run as another.
    """
    # BEGIN 00.1
    def quoted(text: str) -> str:
        """`text` between quote marks, whole when it is short; else only its start,
        saying that it was cut and how long it was. The error goes back with every
        later request, so a huge broken text is not quoted whole; and a bare start
        would pass for all that the model sent (run_tool's words for its cuts)."""
        if len(text) <= 200:
            return repr(text)
        return f"{text[:200]!r}... (cut: {len(text):,} characters in all)"

    if arguments is None or arguments == "":
        return {}
    sent = arguments
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        # RecursionError: "[[[[..." nested deeper than the reader goes, as a small
        # model that repeats itself writes; the model's mistake like any other.
        except (ValueError, RecursionError) as error:
            # Quoted, for the model to see what it sent: the stored call holds "{}".
            raise ValueError(f"are not valid JSON ({error}): {quoted(arguments)}"
                             ) from None
    # A string, even one whose text is an object (a server that encoded the arguments
    # twice), is no object: guessing that it meant one would run what was not sent.
    if not isinstance(arguments, dict):
        raise ValueError(f"must be a JSON object, not {type(arguments).__name__}")
    try:
        # Python reads NaN and Infinity (and 1e999 as Infinity) and would write them
        # back into the stored call; no strict JSON reader takes them. (RecursionError:
        # only for an object nested deeper than any server's JSON reader goes.)
        json.dumps(arguments, allow_nan=False)
    except (ValueError, RecursionError):
        text = sent if isinstance(sent, str) else repr(sent)
        raise ValueError(f"are not valid JSON (it has no NaN or Infinity): "
                         f"{quoted(text)}") from None
    return arguments
    # END 00.1


def normalize_reply(reply: Message, history: list[Message]) -> Message:
    """The model's reply as a message that can be stored, and sent back to any server.

    `reply` is what ask_model() got, with whatever quirks the server put in it;
    `history` is the conversation so far. Every tool call gets an id no other call in
    the conversation has, and arguments that are a string holding a JSON object ("{}"
    when the model's could not be read). The content is text: the text of its text
    parts when it came in parts, "" when the server sent null; a reply without calls
    has no "tool_calls".
    """
    # BEGIN 00.3
    taken = {call["id"] for message in history
             for call in message.get("tool_calls") or []}
    calls = []
    for call in reply.get("tool_calls") or []:
        # No id, or one already used: a result could not say which call it answers.
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id or call_id in taken:
            call_id = f"call_{uuid.uuid4().hex[:24]}"
        taken.add(call_id)
        arguments = call["function"]["arguments"]
        try:
            parsed = read_arguments(arguments)
            if not (isinstance(arguments, str) and arguments):
                # An object, "" or null: store the JSON text of what they mean.
                arguments = json.dumps(parsed, ensure_ascii=False)
        except ValueError:
            arguments = "{}"    # what all servers read back; run_tool reports the error
        function = {"name": call["function"]["name"], "arguments": arguments}
        calls.append({"id": call_id, "type": "function", "function": function})
    # Sent back, a null content is refused: by OpenAI without tool calls, by Ollama (and
    # LM Studio) with them. "" is taken by all.
    content = reply.get("content")
    if isinstance(content, list):
        # Parts, as Mistral's reasoning models send them: the text parts are the answer
        # (a "thinking" part is not), joined in order; nothing of the answer is lost.
        content = "".join(part["text"] for part in content if isinstance(part, dict)
                          and part.get("type") == "text"
                          and isinstance(part.get("text"), str))
    text = content if isinstance(content, str) else ""
    message: Message = {"role": "assistant", "content": text}
    if calls:       # never "tool_calls": [], which OpenAI refuses
        message["tool_calls"] = calls
    return message
    # END 00.3
