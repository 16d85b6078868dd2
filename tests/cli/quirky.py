"""A loopback HTTP server that answers like Ollama, llama.cpp's server, vLLM and LM Studio.

The scripted model (`sessionlab.server.ModelServer`) answers like a well-behaved provider.
Real local servers are less tidy, and the chat command has to survive what they really send.
This server plays their habits over real HTTP, so `sessionlab chat --base-url` meets them:

* each flavour's routes, and what it answers on a path it does not have (Ollama's plain-text
  "404 page not found", vLLM's FastAPI {"detail": "Not Found"}, LM Studio's HTTP 200 with
  {"error": "Unexpected endpoint or method. ..."}, llama.cpp serving the same API with or
  without /v1);
* each flavour's refusals: a model it does not have, a model or set-up without tool calls;
* replies with the quirks seen in their issue trackers (see docs/self-study.md): a tool call
  without an id, arguments as a JSON object, as "" or as broken JSON, content null with no
  tool call, text together with tool calls, finish_reason "stop" with tool calls, <think>
  blocks, a tool call written as JSON text, and replies that take their time.

Every chat request is first checked as a strict provider checks it (the scripted model's
`validate`, plus OpenAI's refusal of an assistant message with neither content nor tool
calls) and answered with HTTP 400 when it fails: that is how a test sees whether a session
left by a quirk can still be sent. A request with `max_tokens: 1` is the chat's check before
the user types; it is answered "OK" without using up a step of the script.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Union

from sessionlab.scripted import InvalidRequest, validate

FLAVOURS = ("ollama", "llamacpp", "vllm", "lmstudio")


# --- replies exactly as a server sends them ----------------------------------------------------


@dataclass(frozen=True)
class Raw:
    """One reply: the `message` object and `finish_reason`, sent as they are."""

    message: dict[str, Any]
    finish_reason: str = "stop"


@dataclass
class Slow:
    """Answer `step` only once `release` is set (the test sets it, or never does)."""

    step: "Step"
    release: threading.Event = field(default_factory=threading.Event)
    waiting: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class Answer:
    """Answer with this HTTP status and body instead of a reply (a 500, a 400 ...)."""

    status: int
    body: Any


Step = Union[Raw, Slow, Answer, Callable[[dict[str, Any]], Raw]]


def text(content: str | None) -> Raw:
    return Raw({"role": "assistant", "content": content})


def calls(*tool_calls: dict[str, Any], content: str | None = None, finish_reason: str = "tool_calls") -> Raw:
    return Raw({"role": "assistant", "content": content, "tool_calls": list(tool_calls)}, finish_reason)


def tool_call(name: str, arguments: Any, id: str | None = "call_q_1") -> dict[str, Any]:
    """A tool call; `id=None` leaves the id out, `arguments` goes on the wire as given."""
    call: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if id is not None:
        call["id"] = id
    return call


# --- the server ----------------------------------------------------------------------------


def _openai_error(message: str, kind: str, code: Any = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _vllm_error(message: str, kind: str, code: int) -> dict[str, Any]:
    # vLLM's ErrorResponse: the fields at the top level, not inside "error".
    return {"object": "error", "message": message, "type": kind, "param": None, "code": code}


def strict_check(body: Any) -> None:
    """The scripted model's provider checks, plus one more a strict provider makes."""
    validate(body)
    for i, message in enumerate(body["messages"]):
        if message.get("role") == "assistant" and message.get("content") is None and not message.get("tool_calls"):
            raise InvalidRequest(f"Invalid value for 'messages[{i}].content': expected a string, got null.",
                                 f"messages[{i}].content")


class QuirkyServer:
    """A server of one flavour on 127.0.0.1, in a daemon thread.

    `script` answers the chat's requests in order; `models` are the names it serves;
    `tools=False` plays a model or set-up without tool calls (each flavour refuses in its own
    words). `requests` holds every chat request body, `refused` the 400s it answered.
    """

    def __init__(self, flavour: str, script: list[Step] | None = None, *, models: tuple[str, ...] = ("town",),
                 tools: bool = True) -> None:
        assert flavour in FLAVOURS, flavour
        self.flavour = flavour
        self.script = list(script or [])
        self.models = list(models)
        self.tools = tools
        self.requests: list[dict[str, Any]] = []
        self.refused: list[str] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def __enter__(self) -> "QuirkyServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for step in self.script:
            if isinstance(step, Slow):
                step.release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # --- routes ---------------------------------------------------------------------------

    def route(self, method: str, path: str) -> str | None:
        """'models', 'chat', 'root', 'tags', or None for a path this flavour does not have."""
        path = path.split("?")[0].rstrip("/")
        prefixes = ("/v1", "") if self.flavour == "llamacpp" else ("/v1",)
        for prefix in prefixes:
            if method == "GET" and path == prefix + "/models":
                return "models"
            if method == "POST" and path == prefix + "/chat/completions":
                return "chat"
        if self.flavour == "ollama" and method == "GET" and path == "":
            return "root"
        if self.flavour == "ollama" and method == "GET" and path == "/api/tags":
            return "tags"
        return None

    def unknown_route(self, method: str, path: str) -> tuple[int, Any]:
        if self.flavour == "ollama":
            return 404, "404 page not found"          # Go's default, as plain text
        if self.flavour == "llamacpp":
            return 404, {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}
        if self.flavour == "vllm":
            return 404, {"detail": "Not Found"}
        return 200, {"error": f"Unexpected endpoint or method. ({method} {path})"}   # LM Studio

    def answer_chat(self, body: Any) -> tuple[int, Any]:
        name = body.get("model") if isinstance(body, dict) else None
        if self.flavour != "llamacpp" and name not in self.models:   # llama.cpp serves whatever it loaded
            if self.flavour == "ollama":
                return 404, _openai_error(f'model "{name}" not found, try pulling it first', "api_error")
            if self.flavour == "vllm":
                return 404, _vllm_error(f"The model `{name}` does not exist.", "NotFoundError", 404)
            return 404, _openai_error(f"The model `{name}` does not exist.", "invalid_request_error")
        if isinstance(body, dict) and body.get("tools") and not self.tools:
            if self.flavour == "ollama":
                return 400, _openai_error(f"registry.ollama.ai/library/{name} does not support tools", "api_error")
            if self.flavour == "llamacpp":
                return 500, {"error": {"code": 500, "message": "tools param requires --jinja flag",
                                       "type": "server_error"}}
            if self.flavour == "vllm":
                return 400, _vllm_error('"auto" tool choice requires --enable-auto-tool-choice and '
                                        "--tool-call-parser to be set", "BadRequestError", 400)
        try:
            strict_check(body)
        except InvalidRequest as error:
            self.refused.append(error.message)
            return 400, error.body()
        if body.get("max_tokens") == 1:
            return 200, self.completion(text("OK"), body)
        self.requests.append(body)
        if not self.script:
            return 500, _openai_error("the quirky server has no reply left in its script", "server_error")
        step = self.script.pop(0)
        if isinstance(step, Slow):
            step.waiting.set()
            step.release.wait(120)
            step = step.step
        if callable(step):
            step = step(body)
        if isinstance(step, Answer):
            return step.status, step.body
        return 200, self.completion(step, body)

    def completion(self, reply: Raw, body: dict[str, Any]) -> dict[str, Any]:
        return {"id": f"chatcmpl-{self.flavour}-{len(self.requests)}", "object": "chat.completion", "created": 0,
                "model": body.get("model"), "system_fingerprint": self.flavour,
                "choices": [{"index": 0, "message": reply.message, "finish_reason": reply.finish_reason}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


def _handler(owner: QuirkyServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            route = owner.route("GET", self.path)
            if route == "models":
                self.send(200, {"object": "list", "data": [
                    {"id": name, "object": "model", "created": 0, "owned_by": owner.flavour} for name in owner.models]})
            elif route == "root":
                self.send(200, "Ollama is running")
            elif route == "tags":
                self.send(200, {"models": [{"name": name, "model": name} for name in owner.models]})
            else:
                self.send(*owner.unknown_route("GET", self.path))

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if owner.route("POST", self.path) != "chat":
                self.send(*owner.unknown_route("POST", self.path))
                return
            try:
                body = json.loads(raw)
            except ValueError:
                self.send(400, _openai_error("invalid JSON", "invalid_request_error"))
                return
            self.send(*owner.answer_chat(body))

        def send(self, status: int, payload: Any) -> None:
            plain = isinstance(payload, str)
            data = (payload if plain else json.dumps(payload)).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; charset=utf-8" if plain else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass     # the client gave up (a timeout in a test): nothing to answer

    return Handler
