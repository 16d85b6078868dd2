# Generated from course/messages.py for lesson 06_blobs:
# edit that source, then run `sessionlab dev generate`.
"""What a message may be, and how one becomes one line of a log.

One validator decides what may be recorded, and append and load both use it: a message
the log takes can always be read back and sent to a model again. What a model server
sends is normalized first (tool calls without ids, arguments as objects or broken JSON,
a null content), so that no server's quirk can make a session unresumable.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any


Message = dict[str, Any]


class InvalidSessionId(ValueError):
    """A session id that could escape the sessions folder, or no usable file name."""


class InvalidMessage(ValueError):
    """Not a message the log can hold (see check_message). append() refuses it and
    writes nothing; a line holding one is refused when the log is read."""


# Letters, digits, '.', '_' and '-', starting with a letter or digit (so never '.' or
# '..'): no '/', no NUL, nothing hidden, and short enough for any file system once
# '.meta.json' is added. Not a name Windows keeps for a device, whatever follows a dot
# (CON.jsonl is the console there, NUL.meta.json the bin).
SESSION_ID = re.compile(r"(?!(?i:CON|PRN|AUX|NUL|COM[1-9]|LPT[1-9])(?:\.|$))"
                        r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_session_id(session_id: str) -> str:
    """Return the id unchanged if it is a safe file name, else raise InvalidSessionId.

    A session id often comes from a user or a URL. Used as a path, `../../etc/passwd` or
    `/tmp/x` would read or write outside the sessions folder, so refuse anything that is
    not a plain name, before any file is touched.
    """
    if not isinstance(session_id, str) or not SESSION_ID.fullmatch(session_id):
        shown = (
            repr(session_id)
            if len(str(session_id)) <= 140
            else repr(str(session_id)[:40]) + "..."
        )
        raise InvalidSessionId(
            f"invalid session id {shown}: use 1 to 128 letters, digits, '.', '_' or "
            "'-', starting with a letter or digit (no '/', no spaces), and "
            "not a name Windows keeps for a device (CON, PRN, AUX, NUL, COM1 to COM9 "
            "or LPT1 to LPT9, in any case, alone or before a '.')"
        )
    return session_id


# --- what a message may be ------------------------------------------------------------

# The roles a chat request may carry. A message with another role (or none) would be
# refused by the provider with every later request, so the log refuses it first.
ROLES = ("system", "developer", "user", "assistant", "tool")


MAX_DEPTH = 64      # how deep a message may nest: none needs more, json reads deeper


RESERVED = ("$marker", "$blob")     # the log's own keys: a marker, a stored content


def check_message(message: Any) -> None:
    """Raise InvalidMessage, saying why, unless `message` has the shape of a message.

    One rule, kept at both ends: append() checks it before it writes anything, and
    reading checks every line against it, so a line that reading would refuse is never
    written. The keys in RESERVED belong to the log itself (markers and blob
    references, lessons 04 and 06): a message may not have them, and its content is
    text, a list of parts or null, never an object, so nothing can pose as one.
    """
    if not isinstance(message, dict):
        raise InvalidMessage(f"it is a {type(message).__name__}, not a JSON object")
    role = message.get("role")
    if role not in ROLES:
        raise InvalidMessage("it has no 'role'" if role is None else
                             f"its role {role!r} is none of {', '.join(ROLES)}")
    for key in RESERVED:
        if key in message:
            raise InvalidMessage(f"it has the key {key!r}, which belongs to the log "
                                 "itself (a marker, a blob reference), not to messages")
    content = message.get("content")
    text_or_parts = isinstance(content, (str, list))
    if not (text_or_parts or content is None and role == "assistant"):
        raise InvalidMessage(f"its content is a {type(content).__name__}: a message's "
                             "content is text or a list of parts (null only for the "
                             "assistant)")
    calls = message.get("tool_calls")
    if calls is not None and not (isinstance(calls, list) and calls
                                  and all(map(is_tool_call, calls))):
        raise InvalidMessage("its 'tool_calls' is not a non-empty list of calls, "
                             "each with a string 'id', \"type\": \"function\" and a "
                             "'function' with a string 'name' and 'arguments' "
                             "holding a JSON object")
    call_id = message.get("tool_call_id", "")
    if not isinstance(call_id, str) or role == "tool" and not call_id:
        raise InvalidMessage("its 'tool_call_id' is not a non-empty string")


def is_tool_call(call: Any) -> bool:
    """Is `call` a call a provider takes back: an id, a name, a JSON object's text?"""
    function = call.get("function") if isinstance(call, dict) else None
    if not (isinstance(function, dict) and isinstance(call.get("id"), str)
            and call["id"] and call.get("type") == "function"
            and isinstance(function.get("name"), str)
            and isinstance(function.get("arguments"), str)):
        return False
    try:
        return isinstance(json.loads(function["arguments"]), dict)
    except (ValueError, RecursionError):
        return False


def check_plain_json(value: Any, depth: int = 0) -> None:
    """Raise InvalidMessage unless `value` is JSON that reads back exactly as it is.

    json.dumps takes more than JSON holds: a tuple comes back a list, the key 1 comes
    back "1", NaN and Infinity are not JSON, and a lone surrogate ("\\ud800", half of a
    UTF-16 pair) is no text at all: UTF-8 cannot encode it.
    """
    if depth > MAX_DEPTH:
        raise InvalidMessage(f"it is nested more than {MAX_DEPTH} levels deep, deeper "
                             "than a line of JSON in a log may be")
    if isinstance(value, str):
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidMessage("it holds a lone surrogate (half of a UTF-16 "
                                     "pair): no text, and no UTF-8 JSON can hold it"
                                     ) from None
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidMessage(f"it has the key {key!r}; JSON keys are strings")
            check_plain_json(key, depth + 1)
            check_plain_json(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            check_plain_json(item, depth + 1)
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise InvalidMessage(f"it holds {value}, which is not JSON (Python writes "
                                 "it; other readers refuse it)")
    elif not (value is None or isinstance(value, int)):     # bool is an int
        raise InvalidMessage(f"it holds a {type(value).__name__}, which is not JSON")


# --- reading a log: lines, markers and the tail ---------------------------------------

# A line with this key is a marker, a note about the log itself, never a message: it is
# not sent to the model. Lesson 04 writes {"$marker": "repair", ...} before the results
# it makes up.
MARKER = "$marker"



def encode_line(entry: Message) -> bytes:
    """One message or marker as one line of UTF-8 JSON, newline included.

    Raises ValueError, before anything is written, for what JSON cannot hold: NaN, a
    set, bytes, a lone surrogate, nesting deeper than Python can encode.
    """
    # ensure_ascii=False keeps "café" readable in the file; json escapes "\n" inside
    # strings, so an entry is always exactly one line. allow_nan=False: NaN is not JSON.
    try:
        line = json.dumps(entry, ensure_ascii=False, allow_nan=False) + "\n"
        return line.encode("utf-8")
    except (TypeError, ValueError, RecursionError) as error:
        raise ValueError(
            f"cannot write this entry as a line of JSON: {error}"
        ) from None



def refuse_constant(name: str) -> Any:
    """Called by the decoder for NaN, Infinity and -Infinity: refuse them."""
    raise InvalidMessage(f"{name} is not JSON (Python's json writes it; other readers "
                         "refuse it)")


def read_float(text: str) -> float:
    """Called by the decoder for every number with a fraction or an exponent."""
    number = float(text)
    if number in (float("inf"), float("-inf")):    # 1e999: too large, read as infinity
        raise InvalidMessage(f"the number {text[:20]} is too large for a float")
    return number


# Made once: json.loads(text, parse_constant=...) would build a decoder for every line.
# (A regular expression finds an escape such as \ud800 faster than `in` does.)
STRICT_JSON = json.JSONDecoder(parse_constant=refuse_constant, parse_float=read_float)


SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def decode_json(text: str) -> Any:
    """STRICT_JSON.decode(text), with a fast path for a line as this module writes it.

    decode() looks for whitespace before and after the value with two regular
    expressions; a line written by this module has none, and for it raw_decode() alone
    gives the same answer. Anything else (spaces, garbage after the value, no JSON at
    all) takes decode(), which accepts or refuses it, with its reason, as before.
    """
    try:
        entry, end = STRICT_JSON.raw_decode(text)
        if end == len(text):
            return entry
    except json.JSONDecodeError:
        pass
    return STRICT_JSON.decode(text)


def parse_line(line: bytes) -> Message:
    """One line of a log as a message. Raises InvalidMessage, saying why, if it is none.

    The reader's side of the rule append() keeps: UTF-8 without a byte-order mark
    (json.loads would also take UTF-16, or a BOM), strict JSON (no NaN, no Infinity, no
    number too large for a float), then check_message(). The decoder makes only plain
    JSON, but for an escaped lone surrogate: check_plain_json() runs on the rare line
    with a surrogate's escape, so that loading stays fast. (Nesting deeper than
    MAX_DEPTH, which append refuses, is read: no line append wrote is refused.)
    """
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidMessage("its bytes are not UTF-8") from None
    if text.startswith("\ufeff"):
        raise InvalidMessage("it starts with a byte-order mark (U+FEFF), which the "
                             "format does not allow (an editor may have added it)")
    try:
        entry = decode_json(text)
    except json.JSONDecodeError as error:
        # Some of json's words end in "at" already ("Unterminated string starting at")
        at = "" if error.msg.endswith(" at") else " at"
        reason = f"not JSON ({error.msg}{at} column {error.colno})"
        raise InvalidMessage(reason) from None
    except RecursionError:
        raise InvalidMessage("it is nested too deep to read") from None
    except ValueError as error:
        # An integer of more than 4,300 digits: Python's reader refuses to convert it
        # (sys.set_int_max_str_digits), with a ValueError that is no decode error
        raise InvalidMessage(f"it holds a number Python cannot read ({error})"
                             ) from None
    if b"\\" in line and SURROGATE_ESCAPE.search(line):  # rare: we write no such escape
        check_plain_json(entry)     # half a UTF-16 pair, a lone surrogate, is no text
    if not isinstance(entry, dict) or not ("role" in entry or MARKER in entry):
        raise InvalidMessage("JSON, but neither a message (no 'role') nor a marker "
                             "(no '$marker')")
    if MARKER in entry and "role" not in entry:
        return entry        # a marker: a note about the log, never a message
    content = entry.get("content")
    if isinstance(content, dict) and "$blob" in content:
        # A content stored as a blob (lesson 06): inline() checks the reference itself.
        check_message({**entry, "content": ""})
        return entry
    check_message(entry)
    return entry


def read_arguments(arguments: Any) -> dict[str, Any]:
    """A tool call's arguments as a dict; ValueError if they hold none.

    The one judge of arguments: run_tool runs what it reads, and normalize_reply stores
    what it reads, so a call is never stored as one thing and run as another.
    """
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


def normalize_reply(reply: Message, history: list[Message]) -> Message:
    """The model's reply as a message that can be stored, and sent back to any server.

    `reply` is what ask_model() got, with whatever quirks the server put in it;
    `history` is the conversation so far. Every tool call gets an id no other call in
    the conversation has, and arguments that are a string holding a JSON object ("{}"
    when the model's could not be read). The content is text: the text of its text
    parts when it came in parts, "" when the server sent null; a reply without calls
    has no "tool_calls".
    """
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


FORMAT_VERSION = 1
