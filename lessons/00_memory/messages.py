# Lesson 00_memory, yours to edit: generated from
# solutions/00_memory/messages.py; `sessionlab reset 00` makes it again.
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
    # TODO(00.1): Read a tool call's arguments and run it, whatever the model sent.
    # What it asks: `sessionlab task 00.1`. Hints: `sessionlab hint --task 00.1`.
    raise NotImplementedError(
        "task 00.1 is not written yet: Read a tool call's arguments and run it, "
        "whatever the model sent"
    )


def normalize_reply(reply: Message, history: list[Message]) -> Message:
    """The model's reply as a message that can be stored, and sent back to any server.

    `reply` is what ask_model() got, with whatever quirks the server put in it;
    `history` is the conversation so far. Every tool call gets an id no other call in
    the conversation has, and arguments that are a string holding a JSON object ("{}"
    when the model's could not be read). The content is text: the text of its text
    parts when it came in parts, "" when the server sent null; a reply without calls
    has no "tool_calls".
    """
    # TODO(00.3): Turn the model's reply into a message you can store and send back.
    # What it asks: `sessionlab task 00.3`. Hints: `sessionlab hint --task 00.3`.
    raise NotImplementedError(
        "task 00.3 is not written yet: Turn the model's reply into a message you can "
        "store and send back"
    )
