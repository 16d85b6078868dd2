"""The scripted model: a stand-in for OpenAI, Ollama or vLLM behind the *real* `openai` client.

Lesson code calls `client.chat.completions.create(...)` exactly as it would against a real
server. Underneath, `respx` routes the HTTP request to `ScriptedModel.respond`, which:

* validates the request the way real providers do (HTTP 400, OpenAI-style error body),
* records it in `requests`, runs any `on_request` observers (which may look at the disk),
* and answers with the next step of its script: text, tool calls, or a failure.

Nothing here opens a socket. `sessionlab.server` serves the same `respond` over loopback HTTP
for the command line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Union

import httpx
import openai
import respx

BASE_URL = "http://scripted-model.invalid/v1"
MODEL_NAME = "scripted-town"
ROLES = ("system", "developer", "user", "assistant", "tool", "function")


# --- the script -------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    """One tool call the model makes. `arguments` is the raw JSON text, as on the wire."""

    name: str
    arguments: str
    id: str | None = None


def call(name: str, /, **arguments: Any) -> ToolCall:
    """A well-formed tool call: `call("buy", item="rope")`."""
    return ToolCall(name, json.dumps(arguments))


def raw_call(name: str, arguments: str, id: str | None = None) -> ToolCall:
    """A tool call with arguments exactly as given, e.g. text that is not JSON at all."""
    return ToolCall(name, arguments, id)


@dataclass(frozen=True)
class Reply:
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    # Real servers disagree on finish_reason when they call tools (some say "stop");
    # a script can reproduce that to prove the agent looks at tool_calls instead.
    finish_reason: str | None = None


def say(text: str) -> Reply:
    """A plain text answer: the end of a turn."""
    return Reply(content=text)


def use(*calls: ToolCall, content: str | None = None, finish_reason: str | None = None) -> Reply:
    """One reply that asks for one or several tool calls."""
    return Reply(content=content, tool_calls=tuple(calls), finish_reason=finish_reason)


@dataclass(frozen=True)
class Fail:
    """Answer with an HTTP error, such as a 500 from an overloaded server."""

    status: int = 500
    message: str = "The scripted model failed on purpose (a server error)."


@dataclass(frozen=True)
class Disconnect:
    """Drop the connection without an answer."""


class SimulatedCrash(BaseException):
    """The process 'dies' in the middle of a model call.

    A BaseException, like KeyboardInterrupt, so that neither the openai client's retry
    logic nor an agent's `except Exception` can swallow it: the code after the call
    never runs, exactly as if the process had been killed there.
    """


@dataclass(frozen=True)
class Crash:
    """Raise `SimulatedCrash` inside the request: the process dies while waiting for the model."""

    message: str = "simulated crash while waiting for the model"


@dataclass(frozen=True)
class Raw:
    """Answer with this assistant `message` exactly as given, however odd it is.

    Real servers do not always send what OpenAI documents: a tool call without an id,
    arguments as an object, `content: null` and no tool calls. A Raw step puts such a
    message on the wire untouched, so a test can show what an agent does with it.
    """

    message: dict[str, Any]
    finish_reason: str | None = "stop"


def raw(message: dict[str, Any], finish_reason: str | None = "stop") -> Raw:
    """A reply whose message goes out exactly as given: `raw({"role": "assistant", ...})`."""
    return Raw(message, finish_reason)


def _quirk(calls: list[dict[str, Any]] | None, content: str | None = None,
           finish_reason: str = "stop") -> Raw:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls is not None:
        message["tool_calls"] = calls
    return Raw(message, finish_reason)


def _buy(arguments: Any, **call: Any) -> dict[str, Any]:
    return {"type": "function", **call, "function": {"name": "buy", "arguments": arguments}}


# Replies that real OpenAI-compatible servers have sent, each the answer to "buy a rope".
# Where each was seen is in docs/reference/scripted-model.md. A test plays one with
# `ScriptedModel([QUIRKS["no_id"], say("Done.")])`.
QUIRKS: dict[str, Raw] = {
    # Ollama before 0.12.10 sent tool calls without an id.
    "no_id": _quirk([_buy('{"item": "rope"}')], finish_reason="tool_calls"),
    # An id that is there but empty.
    "empty_id": _quirk([_buy('{"item": "rope"}', id="")], finish_reason="tool_calls"),
    # Two calls sharing one id (seen from Kimi and MiMo behind some proxies).
    "same_id_twice": _quirk([_buy('{"item": "rope"}', id="call_0"),
                             _buy('{"item": "torch"}', id="call_0")], finish_reason="tool_calls"),
    # llama.cpp's server sent the arguments as a JSON object, not a string of JSON.
    "arguments_as_object": _quirk([_buy({"item": "rope"}, id="call_obj")],
                                  finish_reason="tool_calls"),
    # "" for "no arguments", from several small models.
    "arguments_empty": _quirk([_buy("", id="call_empty")], finish_reason="tool_calls"),
    # null for an empty object (a vLLM tool parser in streaming mode).
    "arguments_null": _quirk([_buy(None, id="call_null")], finish_reason="tool_calls"),
    # Arguments cut short or garbled by a tool parser: not JSON at all.
    "arguments_not_json": _quirk([_buy("{item: rope", id="call_bad")],
                                 finish_reason="tool_calls"),
    # JSON, but a string holding the JSON (a vLLM parser encoded it twice).
    "arguments_encoded_twice": _quirk([_buy('"{\\"item\\": \\"rope\\"}"', id="call_twice")],
                                      finish_reason="tool_calls"),
    # A tool call with no "type" (Ollama's own format has none).
    "no_type": _quirk([{"id": "call_untyped",
                        "function": {"name": "buy", "arguments": '{"item": "rope"}'}}],
                      finish_reason="tool_calls"),
    # content null and no tool calls: sent back as it is, OpenAI answers 400.
    "content_null": _quirk(None),
    # The content as a list of parts, a thinking part before the text (Mistral's
    # reasoning models): the text parts are the answer.
    "content_parts": _quirk(None, content=[
        {"type": "thinking", "thinking": [{"type": "text", "text": "A rope is cheap."}]},
        {"type": "text", "text": "A rope "}, {"type": "text", "text": "it is."}]),
    # "tool_calls": [] beside the text: sent back as it is, OpenAI answers 400.
    "empty_tool_calls": _quirk([], content="Nothing to do."),
    # Text and tool calls in one reply: the tools must still run.
    "text_and_tools": _quirk([_buy('{"item": "rope"}', id="call_text")],
                             content="Let me buy a rope.", finish_reason="tool_calls"),
    # finish_reason "stop" although the reply calls a tool.
    "stop_with_tools": _quirk([_buy('{"item": "rope"}', id="call_stop")]),
}


# Replies that give no answer to pass on, each seen from real servers and small models:
# what a compaction must not record as its summary (lesson 08) and what a helper must not
# hand its parent as its answer (lesson 10). Summaries play them through
# `ScriptedModel(summarise=summaries(ODD_REPLIES["call_as_json"], ...))`, helpers as
# steps of the script.
THOUGHT = "The user wants the gist. The elder spoke of the ledge; keep that."
ANSWER_AFTER_THOUGHT = "The elder warned us of a steep ledge by the cave."
CALL_TEXT = '{"name": "talk_to", "arguments": {"npc": "elder"}}'
ODD_REPLIES: dict[str, Raw] = {
    # "" as the whole reply (a model that stopped at once).
    "empty": _quirk(None, content=""),
    # content null and no tool calls.
    "null": _quirk(None),
    # A tool call instead of text, although the request offered no tools.
    "tool_call": _quirk([{"id": "call_odd", "type": "function",
                          "function": {"name": "talk_to", "arguments": '{"npc": "elder"}'}}],
                        finish_reason="tool_calls"),
    # The same with a sentence beside it: still a call, not what was asked for.
    "call_with_text": _quirk([{"id": "call_odd", "type": "function",
                               "function": {"name": "talk_to", "arguments": '{"npc": "elder"}'}}],
                             content="Let me ask the elder first.", finish_reason="tool_calls"),
    # A tool call written as JSON text: the server did not read it as a call.
    "call_as_json": _quirk(None, content=CALL_TEXT),
    # The same in a ```json fence, and in a <tool_call> tag (Hermes-style templates).
    "call_in_fence": _quirk(None, content=f"```json\n{CALL_TEXT}\n```"),
    "call_in_tag": _quirk(None, content=f"<tool_call>\n{CALL_TEXT}\n</tool_call>"),
    # Thinking cut off by max tokens: a <think> block that never ends, and nothing else.
    "unfinished_think": _quirk(None, content=f"<think>\n{THOUGHT} Now the rope, and"),
    # Only thinking, finished, and nothing after it.
    "only_think": _quirk(None, content=f"<think>\n{THOUGHT}\n</think>\n"),
    # A usable one: thinking first, then the answer (ANSWER_AFTER_THOUGHT) after it.
    "think_then_text": _quirk(None, content=f"<think>\n{THOUGHT}\n</think>\n\n"
                                            f"{ANSWER_AFTER_THOUGHT}"),
}
# The keys of ODD_REPLIES that give no answer at all (every one but "think_then_text").
NO_ANSWER = tuple(key for key in ODD_REPLIES if key != "think_then_text")
# Those that end a turn of an agent's loop (no tool calls): a helper's last reply can be one.
NO_ANSWER_TEXT = tuple(key for key in NO_ANSWER
                       if not ODD_REPLIES[key].message.get("tool_calls"))


def long_reply(tokens: int) -> Reply:
    """A plain text answer of about `tokens` estimated tokens (4 bytes each): a summary far
    over any budget, as a model that ignores "no more than a page" sends."""
    sentence = "On day 3 the elder spoke at length of the cave, the ledge and the rope. "
    return say((sentence * (tokens * 4 // len(sentence) + 1)).strip())


Step = Union[Reply, Raw, Fail, Disconnect, Crash, Callable[[dict[str, Any]], "Step"]]


# --- validation: what a real provider refuses ---------------------------------------------


class InvalidRequest(Exception):
    """A request a real provider would answer with HTTP 400."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code: str | None = None

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": "invalid_request_error",
                          "param": self.param, "code": self.code}}


def validate(body: Any) -> None:
    """Raise InvalidRequest for what OpenAI-compatible servers reject. Returns None if fine."""
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    if not body.get("model"):
        raise InvalidRequest("Missing required parameter: 'model'.", "model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("Missing required parameter: 'messages' (a non-empty list).", "messages")

    pending: dict[str, int] = {}  # tool_call_id -> index of the assistant message that made it
    pending_from: int | None = None
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidRequest(f"Invalid type for 'messages[{i}]': expected an object.", f"messages[{i}]")
        role = message.get("role")
        if role not in ROLES:
            raise InvalidRequest(
                f"Invalid value: {role!r}. Supported values are: "
                + ", ".join(repr(r) for r in ROLES) + ".",
                f"messages[{i}].role",
            )
        _check_content(message, role, i)
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not call_id or call_id not in pending:
                raise InvalidRequest(
                    "Invalid parameter: messages with role 'tool' must be a response to a preceding "
                    f"message with 'tool_calls' (messages[{i}] answers {call_id!r}, which no "
                    "earlier assistant message is waiting for).",
                    f"messages[{i}].tool_call_id",
                )
            del pending[call_id]
            continue
        if pending:
            # Anything but a tool message after tool calls: the calls went unanswered.
            raise _unanswered(pending, pending_from)
        if role == "assistant":
            calls = message.get("tool_calls")
            if calls is not None and (not isinstance(calls, list) or not calls):
                raise InvalidRequest(
                    f"Invalid 'messages[{i}].tool_calls': expected an array with minimum length "
                    f"1, got {calls!r}. Leave 'tool_calls' out of a message that calls no tool.",
                    f"messages[{i}].tool_calls")
            for j, tool_call in enumerate(calls or []):
                _check_tool_call(tool_call, f"messages[{i}].tool_calls[{j}]")
                if tool_call["id"] in pending:
                    raise InvalidRequest(
                        f"Duplicate value for 'tool_call_id' of {tool_call['id']!r} in "
                        f"'messages[{i}].tool_calls'.", f"messages[{i}].tool_calls[{j}].id")
                pending[tool_call["id"]] = i
            pending_from = i
    if pending:
        raise _unanswered(pending, pending_from)


def _unanswered(pending: dict[str, int], index: int | None) -> InvalidRequest:
    return InvalidRequest(
        "An assistant message with 'tool_calls' must be followed by tool messages responding to "
        "each 'tool_call_id'. The following tool_call_ids did not have response messages: "
        + ", ".join(pending),
        f"messages[{index}].tool_calls",
    )


def _check_content(message: dict[str, Any], role: str, i: int) -> None:
    """OpenAI's rule for `content`: text or a list of parts; only an assistant message that
    calls tools may leave it null (or out)."""
    content = message.get("content")
    if content is None and role == "assistant" and message.get("tool_calls"):
        return
    if content is None and "content" not in message:
        raise InvalidRequest(f"Missing required parameter: 'messages[{i}].content'.",
                             f"messages[{i}].content")
    if not isinstance(content, (str, list)):
        raise InvalidRequest(
            f"Invalid value for 'messages[{i}].content': expected a string or an array of "
            f"content parts, got {type(content).__name__ if content is not None else 'null'}.",
            f"messages[{i}].content")


def _check_tool_call(tool_call: Any, where: str) -> None:
    if not isinstance(tool_call, dict) or not isinstance(tool_call.get("id"), str) \
            or not tool_call["id"]:
        raise InvalidRequest(f"Missing required parameter: '{where}.id'.", f"{where}.id")
    if tool_call.get("type") != "function":
        raise InvalidRequest(
            f"Invalid value for '{where}.type': expected 'function', got {tool_call.get('type')!r}.",
            f"{where}.type")
    function = tool_call.get("function")
    if not isinstance(function, dict) or not function.get("name"):
        raise InvalidRequest(f"Missing required parameter: '{where}.function.name'.", f"{where}.function")
    arguments = function.get("arguments")
    try:
        parsed = (json.loads(arguments, parse_constant=_not_json)
                  if isinstance(arguments, str) else None)
    except (ValueError, RecursionError):    # not JSON, NaN or Infinity, or nested too deep
        parsed = None
    if not isinstance(parsed, dict):
        raise InvalidRequest(
            f"Invalid '{where}.function.arguments': expected a string holding a JSON object, "
            f"got {arguments!r}.",
            f"{where}.function.arguments",
        )


def _not_json(name: str) -> Any:
    """NaN, Infinity and -Infinity: Python's json reads and writes them, strict providers
    refuse them, and so does this model."""
    raise ValueError(f"{name} is not JSON")


def request_tokens(body: dict[str, Any]) -> int:
    """About how many tokens a request costs: the bytes of its messages' and tools' JSON,
    / 4 (the rule of thumb lesson 08's estimate_tokens uses too)."""
    sent = {"messages": body.get("messages"), "tools": body.get("tools") or []}
    return (len(json.dumps(sent, ensure_ascii=False).encode("utf-8", "surrogatepass")) + 3) // 4


def check_window(body: dict[str, Any], window: int) -> None:
    """Refuse a request larger than the model's window, in OpenAI's words."""
    tokens = request_tokens(body)
    if tokens > window:
        error = InvalidRequest(
            f"This model's maximum context length is {window} tokens. However, your "
            f"messages resulted in {tokens} tokens. Please reduce the length of the "
            "messages.", "messages")
        error.code = "context_length_exceeded"
        raise error


# --- summaries (lesson 08) ----------------------------------------------------------------
# A compaction asks the model for a summary: a request with no tools whose system message
# asks to summarise the conversation (lesson 08's SUMMARY_PROMPT does). The scripted model
# answers it itself, without taking a step of the script, so a test's script holds only
# the quest's turns; `ScriptedModel(summarise=...)` answers it another way.

SUMMARY_REQUEST = re.compile(r"\bsummari[sz]e the conversation\b", re.IGNORECASE)
# A retried summary request says why the last reply could not be used (lesson 08's FIRMER)
RETRIED_SUMMARY = re.compile(r"\bcould not be used\b", re.IGNORECASE)
SUMMARY_LINES = 12          # the scripted summary keeps at most this many lines ...
SUMMARY_LINE_CHARS = 160    # ... each at most this long: summaries of summaries stay small


def is_summary_request(body: dict[str, Any]) -> bool:
    """Is this request a compaction's call for a summary (no tools, the instruction)?"""
    if body.get("tools"):
        return False
    return any(message.get("role") == "system" and isinstance(message.get("content"), str)
               and SUMMARY_REQUEST.search(message["content"])
               for message in body["messages"] if isinstance(message, dict))


def is_retried_summary(body: dict[str, Any]) -> bool:
    """Is this a summary request made again, after a reply that could not be used?"""
    return is_summary_request(body) and any(
        message.get("role") == "system" and isinstance(message.get("content"), str)
        and RETRIED_SUMMARY.search(message["content"])
        for message in body["messages"] if isinstance(message, dict))


def summaries(*replies: "str | Step", then: Callable[[dict[str, Any]], "str | Step"] | None = None
              ) -> Callable[[dict[str, Any]], "str | Step"]:
    """A summariser that answers the summary requests with `replies` in order (text, or a
    step such as ODD_REPLIES["tool_call"] or long_reply(9000)), then with `then`
    (scripted_summary unless given)."""
    queue = list(replies)
    after = then or scripted_summary

    def summarise(body: dict[str, Any]) -> "str | Step":
        return queue.pop(0) if queue else after(body)
    return summarise


def scripted_summary(body: dict[str, Any]) -> str:
    """A deterministic summary: what the tools said (the facts), then the newest lines.

    The same request always gets the same summary. What tools returned (who said what,
    what was bought) is kept before anything else, as a real summary would keep it; a
    summary never grows past SUMMARY_LINES lines, each cut short, however many times it
    is summarised again.
    """
    text = "\n".join(message["content"] for message in body["messages"]
                     if message.get("role") == "user" and isinstance(message.get("content"), str))
    lines: list[str] = []
    for line in text.splitlines():
        line = line.strip().removeprefix("- ")
        if line and not line.startswith("Summary of ") and line not in lines:
            lines.append(line if len(line) <= SUMMARY_LINE_CHARS
                         else line[:SUMMARY_LINE_CHARS - 3] + "...")
    facts = [line for line in lines if line.startswith("[tool]")][-(SUMMARY_LINES // 2):]
    rest = [line for line in lines if line not in facts][-(SUMMARY_LINES - len(facts)):]
    kept = [line for line in lines if line in facts or line in rest]
    head = f"Summary of {len(lines)} line(s) of conversation" + (
        f" ({len(lines) - len(kept)} left out)" if len(kept) < len(lines) else "") + ":"
    return "\n".join([head, *(f"- {line}" for line in kept)])


# --- the model -------------------------------------------------------------------------


@dataclass
class ScriptedModel:
    """A model that answers from a script and remembers everything it was sent.

    >>> model = ScriptedModel([use(call("talk_to", npc="elder")), say("The elder warned us.")])
    >>> client = model.client()          # a real openai.OpenAI, routed here by respx
    """

    script: list[Step] | Callable[[dict[str, Any]], Step] = field(default_factory=list)
    model: str = MODEL_NAME
    base_url: str = BASE_URL
    requests: list[dict[str, Any]] = field(default_factory=list)
    observations: list[Any] = field(default_factory=list)
    _observers: list[Callable[[dict[str, Any]], Any]] = field(default_factory=list, repr=False)
    # Answers a compaction's summary request (lesson 08) with text, or with a step (an odd
    # reply, a failure); None sends it to the script.
    summarise: Callable[[dict[str, Any]], "str | Step"] | None = scripted_summary
    # The model's window in tokens (estimated as request_tokens does); a request larger
    # than it is refused with HTTP 400, as a real server refuses one. None: no limit.
    context_window: int | None = None
    _replies: int = 0

    def __post_init__(self) -> None:
        if not callable(self.script):
            self.script = list(self.script)

    # scripting ----------------------------------------------------------------------

    def add(self, *steps: Step) -> "ScriptedModel":
        """Append steps to a list script."""
        if callable(self.script):
            raise TypeError("this model plays a policy function; it has no list to add to")
        self.script.extend(steps)
        return self

    def on_request(self, observer: Callable[[dict[str, Any]], Any]) -> None:
        """Call `observer(request_body)` on every valid request, before replying.

        Whatever it returns is kept in `observations`, one per request, so that a test can
        check afterwards what was on disk at the moment of each model call.
        """
        self._observers.append(observer)

    @property
    def summary_requests(self) -> list[dict[str, Any]]:
        """The requests that asked for a summary (lesson 08), in order."""
        return [request for request in self.requests
                if isinstance(request.get("messages"), list) and is_summary_request(request)]

    @property
    def messages_sent(self) -> list[list[dict[str, Any]]]:
        """The `messages` list of every request, in order."""
        return [request["messages"] for request in self.requests]

    # answering ----------------------------------------------------------------------

    def respond(self, body: Any) -> tuple[int, dict[str, Any]]:
        """Answer one request body: (HTTP status, JSON body). May raise for Disconnect/Crash."""
        try:
            validate(body)
            if self.context_window is not None:
                check_window(body, self.context_window)
        except InvalidRequest as error:
            self.requests.append(body if isinstance(body, dict) else {"body": body})
            return 400, error.body()
        self.requests.append(body)
        for observer in self._observers:
            self.observations.append(observer(body))
        if self.summarise is not None and is_summary_request(body):   # lesson 08
            answer = self.summarise(body)
            step = say(answer) if isinstance(answer, str) else answer
        else:
            step = self._next_step(body)
        while callable(step):
            step = step(body)
        if isinstance(step, Fail):
            return step.status, {"error": {"message": step.message, "type": "server_error",
                                           "param": None, "code": None}}
        if isinstance(step, Disconnect):
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        if isinstance(step, Crash):
            raise SimulatedCrash(step.message)
        if isinstance(step, Reply):
            return 200, self._completion(step, body)
        if isinstance(step, Raw):
            return 200, self._wrap(step.message, step.finish_reason, body)
        raise TypeError(f"not a script step: {step!r}")

    def _next_step(self, body: dict[str, Any]) -> Step:
        if callable(self.script):
            return self.script(body)
        if self._replies >= len(self.script):
            return Fail(500, f"The scripted model has no reply left: its script had {len(self.script)} "
                             f"step(s) and this is request {self._replies + 1}. The agent called the "
                             "model more often than the test expected.")
        step = self.script[self._replies]
        self._replies += 1
        return step

    def _completion(self, reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
        tool_calls = [
            {
                # Unique within a conversation, and the same in every process: the id is
                # derived from how long the conversation already is.
                "id": tool_call.id or f"call_{len(body['messages'])}_{k}",
                "type": "function",
                "function": {"name": tool_call.name, "arguments": tool_call.arguments},
            }
            for k, tool_call in enumerate(reply.tool_calls)
        ]
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if tool_calls:
            message["tool_calls"] = tool_calls
        elif message["content"] is None:
            message["content"] = ""
        finish = reply.finish_reason or ("tool_calls" if tool_calls else "stop")
        return self._wrap(message, finish, body)

    def _wrap(self, message: dict[str, Any], finish: str | None,
              body: dict[str, Any]) -> dict[str, Any]:
        """A chat.completion body around one assistant message."""
        number = len(self.requests)
        return {
            "id": f"chatcmpl-scripted-{number}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", self.model),
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }

    # the client side ------------------------------------------------------------------

    def router(self) -> respx.Router:
        """A respx router that sends chat completions to `respond`; anything else is a 404."""
        router = respx.Router(base_url=self.base_url, assert_all_called=False, assert_all_mocked=True)
        router.post("/chat/completions").mock(side_effect=self._handle)
        router.get("/models").mock(return_value=httpx.Response(
            200, json={"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "sessionlab"}]}))
        return router

    def _handle(self, request: httpx.Request) -> httpx.Response:
        try:
            body = json.loads(request.content)
        except json.JSONDecodeError:
            return httpx.Response(400, json=InvalidRequest("The request body is not valid JSON.").body())
        status, payload = self.respond(body)
        return httpx.Response(status, json=payload)

    def client(self, **options: Any) -> openai.OpenAI:
        """A real `openai.OpenAI` client whose HTTP transport is this model (no sockets).

        Retries are off so that a scripted failure reaches the agent exactly once. The
        client is always given an `httpx.Client`: openai 2 sends through one anyway, and
        openai 3, whose own HTTP stack (httpx2) no mock transport reaches, still accepts
        one as `http_client` and sends through it, so the same model serves both.
        """
        transport = httpx.MockTransport(self.router().handler)
        options.setdefault("max_retries", 0)
        return openai.OpenAI(base_url=self.base_url, api_key="scripted",
                             http_client=httpx.Client(transport=transport), **options)
