"""The scripted model over real HTTP, on loopback.

`ScriptedModel.client()` reaches the model through respx, without sockets. This module serves
the same `respond(body)` with the standard library's `http.server`, in a background thread,
so that any OpenAI-compatible client (curl, the openai package in another process,
`sessionlab chat --base-url`) can talk to it:

    with ModelServer(town_model()) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="none")

It answers like the servers people really run, which is what the command line's error
messages are tested against:

* `POST /v1/chat/completions`: the model's answer, its 400s, its scripted failures; a
  `Disconnect` or `Crash` step closes the connection without an answer;
* a model name it does not serve: 404 with Ollama's "not found, try pulling it first";
* `GET /v1/models`, and Ollama's own `GET /api/tags`, list the models it serves.

`sessionlab serve` runs the built-in town model this way for people.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from .scripted import InvalidRequest, ScriptedModel, SimulatedCrash


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the stdlib's name)
        if self.server.owner.log is not None:
            self.server.owner.log(f"{self.command} {self.path} -> {args[1] if len(args) > 1 else ''}")

    def do_GET(self) -> None:
        owner = self.server.owner
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            self._send(200, {"object": "list", "data": [
                {"id": name, "object": "model", "created": 0, "owned_by": "sessionlab"} for name in owner.models]})
        elif self.path.rstrip("/") == "/api/tags":
            self._send(200, {"models": [{"name": name, "model": name, "size": 0} for name in owner.models]})
        else:
            self._send(404, _error(f"no route for GET {self.path}", "not_found_error"))

    def do_POST(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._send(404, _error(f"no route for POST {self.path}", "not_found_error"))
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._send(400, InvalidRequest("The request body is not valid JSON.").body())
            return
        name = body.get("model") if isinstance(body, dict) else None
        if name and name not in owner.models:
            # What Ollama answers for a model that has not been pulled.
            self._send(404, _error(f'model "{name}" not found, try pulling it first', "not_found_error"))
            return
        try:
            with owner.lock:
                status, payload = owner.model.respond(body)
        except (httpx.TransportError, SimulatedCrash):
            # Disconnect / Crash: the server goes away mid-request, the client sees a dropped line.
            self.close_connection = True
            self.connection.close()
            return
        except Exception as error:  # a bug in a policy: still answer like a server would
            self._send(500, _error(f"the scripted model failed: {type(error).__name__}: {error}", "server_error"))
            return
        self._send(status, payload)

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass   # the client went away (Ctrl-C in a chat): nothing to answer


def _error(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: "ModelServer"


class ModelServer:
    """A ScriptedModel served on `http://host:port/v1`, in a daemon thread.

    `models` are the model names it answers to (default: the model's own name); any other
    name gets Ollama's 404. `log`, if given, is called with one line per request.
    """

    def __init__(self, model: ScriptedModel, host: str = "127.0.0.1", port: int = 0, *,
                 models: list[str] | None = None, log=None) -> None:
        self.model = model
        self.models = list(models) if models is not None else [model.model]
        self.log = log
        self.lock = threading.Lock()
        self._server = _Server((host, port), _Handler)
        self._server.owner = self
        self._thread: threading.Thread | None = None

    @property
    def host(self) -> str:
        return self._server.server_address[0]

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """What to give an OpenAI client as base_url."""
        return f"{self.url}/v1"

    def start(self) -> "ModelServer":
        self._thread = threading.Thread(target=self._server.serve_forever, name="sessionlab-model-server",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "ModelServer":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def serve_forever(ui, host: str = "127.0.0.1", port: int = 8800) -> int:
    """`sessionlab serve`: the town model on loopback until Ctrl-C (exit status 130, as
    for every command that Ctrl-C stops)."""
    from .town_model import town_model

    if not 0 <= port <= 65535:
        # Checked here: the socket module says it with an OverflowError traceback.
        ui.error(f"--port {port}: a port is a number from 0 to 65535 (0 picks a free one)")
        return 2
    model = town_model()
    try:
        server = ModelServer(model, host, port, log=lambda line: ui.err.print(line, markup=False, highlight=False))
    except (OSError, OverflowError, UnicodeError, ValueError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        ui.error(f"cannot listen on {host}:{port}: {reason}",
                 "pick another port with --port (0 picks a free one), or check --host")
        return 1
    with server:
        ui.out.print(f"The built-in town model answers at {server.base_url} (model name: {model.model}).")
        ui.out.print(f"  sessionlab chat --base-url {server.base_url} --model {model.model}")
        ui.out.print(f"  curl {server.base_url}/models")
        ui.out.print("Ctrl-C stops it.")
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            ui.note("stopped (Ctrl-C)")
            return 130
    return 0
