"""Reaching a real model server: where it is, whether it answers, and what its errors mean.

Three jobs, kept apart from the chat loop so each can be tested on its own:

* `ollama_url` reads OLLAMA_HOST exactly as Ollama's own client does (its envconfig.Host()),
  so `sessionlab chat --ollama` goes where `ollama run` goes;
* `KitClient` wraps the openai client the lesson code calls: it adds `tool_choice: "auto"`
  whenever tools are offered, shows the user that the model is working, and turns a 200
  answer with no `choices` (LM Studio's answer to a wrong path) into a clear error before
  the lesson code trips over it;
* `preflight` checks the server and the model before the user types anything, and
  `diagnose_404` says which part of a failing request was wrong: the URL or the model name.
"""

from __future__ import annotations

import re
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Callable

OLLAMA_DEFAULT_PORT = "11434"
# The usual addresses, for hints. Each server documents its own default port.
USUAL_URLS = ("Ollama http://localhost:11434/v1, llama.cpp http://localhost:8080/v1, "
              "vLLM http://localhost:8000/v1, LM Studio http://localhost:1234/v1")
# Models with tool calling that Ollama serves; a hint never suggests the one that just failed.
TOOL_MODELS = ("llama3.2", "qwen2.5", "llama3.1", "mistral-nemo")


# --- OLLAMA_HOST, as Ollama reads it ---------------------------------------------------------


def _split_host_port(hostport: str) -> tuple[str, str] | None:
    """Go's net.SplitHostPort: (host, port), or None where Go returns an error."""
    if hostport.startswith("["):
        end = hostport.find("]")
        if end < 0 or not hostport[end + 1:].startswith(":"):
            return None
        return hostport[1:end], hostport[end + 2:]
    if hostport.count(":") != 1:
        return None          # no port at all, or a bare IPv6 address ("too many colons")
    host, _, port = hostport.partition(":")
    return host, port


def ollama_url(value: str | None) -> str:
    """The URL Ollama's client would use for this OLLAMA_HOST value (None or "" for the default).

    Ollama (envconfig.Host) trims spaces and quotes; takes "http" when no scheme is given;
    defaults the port to 11434, but to 80 or 443 when a scheme is given without a port; keeps
    a path; and falls back to the default port when the port is not a number in 0..65535.
    `:PORT` and 0.0.0.0 are addresses a server listens on; a client dialling them reaches this
    machine, so they become 127.0.0.1 here (and `::` becomes `::1`).
    """
    text = (value or "").strip().strip("\"'").strip()
    scheme, sep, hostport = text.partition("://")
    default_port = OLLAMA_DEFAULT_PORT
    if not sep:
        scheme, hostport = "http", text
    elif scheme == "http":
        default_port = "80"
    elif scheme == "https":
        default_port = "443"
    hostport, _, path = hostport.partition("/")
    split = _split_host_port(hostport)
    if split is None:
        host, port = "127.0.0.1", default_port
        if hostport:
            host = hostport.strip("[]") if _is_ip(hostport.strip("[]")) else hostport
    else:
        host, port = split
    if not re.fullmatch(r"[+-]?\d+", port) or not 0 <= int(port) <= 65535:
        port = default_port
    port = str(int(port))
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    shown = f"[{host}]" if ":" in host else host
    url = f"{scheme}://{shown}:{port}"
    return url + ("/" + path.rstrip("/") if path.rstrip("/") else "")


def _is_ip(text: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


# --- what went wrong, in words ---------------------------------------------------------------


class ServerProblem(Exception):
    """A server answered, but not with something an OpenAI client can use."""


def suggest_tool_models(failed: str, count: int = 2) -> list[str]:
    """Ollama models with tool calling, never the family of the model that just failed."""
    family = failed.split(":")[0].split("/")[-1].lower()
    return [name for name in TOOL_MODELS if name != family][:count]


def server_message(body: Any, fallback: str = "") -> str:
    """The human part of an error body: OpenAI's {"error": {"message"}}, vLLM's top-level
    {"message"}, LM Studio's {"error": "..."}, FastAPI's {"detail"}, or plain text."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            for key in ("message", "detail"):
                if inner.get(key):
                    return str(inner[key])
        if isinstance(inner, str) and inner:
            return inner
        if body.get("detail"):
            return str(body["detail"])
    if isinstance(body, str) and body.strip():
        return body.strip()
    return fallback


def says_model_is_missing(message: str) -> bool:
    """Does a 404's text blame the model (Ollama, vLLM, OpenAI) rather than the route?"""
    lower = message.lower()
    return "model" in lower and ("not found" in lower or "does not exist" in lower or "not exist" in lower)


@dataclass
class Probe:
    """What GET <base>/models said."""

    status: int | None             # None: no answer at all
    names: list[str] | None        # the model names, when it answered with an OpenAI model list
    detail: str = ""
    timed_out: bool = False        # connected (or trying to), and nothing came in time


PROBE_TIMEOUT = 10.0     # seconds: a model list is quick to answer, or nothing will be


def probe_models(base: str, api_key: str | None, timeout: float = PROBE_TIMEOUT) -> Probe:
    """GET <base>/models without the openai client, to see the raw status and body."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = httpx.get(base.rstrip("/") + "/models", headers=headers, timeout=timeout)
    except httpx.TimeoutException as error:
        return Probe(None, None, f"{type(error).__name__}: {error}", timed_out=True)
    except httpx.HTTPError as error:
        return Probe(None, None, f"{type(error).__name__}: {error}")
    try:
        body = response.json()
    except ValueError:
        body = response.text
    data = body.get("data") if isinstance(body, dict) else None
    if response.status_code == 200 and isinstance(data, list):
        names = [str(m.get("id")) for m in data if isinstance(m, dict) and m.get("id")]
        return Probe(200, names)
    return Probe(response.status_code, None, server_message(body, response.reason_phrase))


def _candidates(base: str) -> list[str]:
    """Base URLs the user may have meant: with /v1 added, or cut back to /v1."""
    base = base.rstrip("/")
    found = []
    if "/v1/" in base + "/":
        found.append(base[: (base + "/").index("/v1/") + 3])
    else:
        found.append(base + "/v1")
    return [url for url in found if url != base]


def diagnose_404(base: str, api_key: str | None, model: str, kind: str, message: str = "") -> tuple[str, str]:
    """(what is wrong, what to do) after a 404: the base URL or the model name?"""
    probe = probe_models(base, api_key)
    if probe.names is not None:
        have = ", ".join(probe.names[:12]) or "none"
        what = f"model {model!r} not found at {base} (the server has: {have})"
        if kind == "ollama":
            return what, f"pull it first: `ollama pull {model}` (or pick one from `ollama list`)"
        return what, "name one of them with --model"
    for candidate in _candidates(base):
        if probe_models(candidate, api_key).names is not None:
            return (f"the base URL {base} is not the API's address: {candidate} is "
                    f"(GET {base}/models answered {probe.status or 'nothing'}{': ' + probe.detail if probe.detail else ''})",
                    f"use --base-url {candidate}")
    if says_model_is_missing(message):
        return f"model {model!r} not found at {base} ({message})", "check --model"
    answered = f"HTTP {probe.status}" if probe.status else "no answer"
    return (f"nothing at {base} answers like an OpenAI-compatible API (GET {base}/models: {answered}"
            f"{': ' + probe.detail if probe.detail else ''})",
            f"check --base-url; it usually ends in /v1 ({USUAL_URLS})")


# --- the client the lesson code calls --------------------------------------------------------


class _Completions:
    def __init__(self, inner: Any, owner: "KitClient") -> None:
        self._inner, self._owner = inner, owner

    def create(self, **request: Any) -> Any:
        if request.get("tools") and "tool_choice" not in request:
            # llama-cpp-python's server reads a missing tool_choice as "none"; OpenAI, Ollama,
            # vLLM and llama.cpp read it as "auto". Saying it makes every server agree.
            request["tool_choice"] = "auto"
        with self._owner.waiting():
            response = self._inner.create(**request)
        if not getattr(response, "choices", None):
            # LM Studio answers an unknown path with HTTP 200 and {"error": "Unexpected endpoint
            # or method"}; the lesson code would fail on choices[0] with a TypeError.
            extra = getattr(response, "model_extra", None) or {}
            raise ServerProblem(server_message(extra, "an answer with no choices in it"))
        return response

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _Chat:
    def __init__(self, inner: Any, owner: "KitClient") -> None:
        self._inner = inner
        self.completions = _Completions(inner.completions, owner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class KitClient:
    """An openai client as the lesson code sees it, with the kit's defaults around each call.

    `waiting` is called around every request and returns a context manager (the chat passes
    one that shows a spinner with the seconds spent; the default shows nothing).
    """

    def __init__(self, inner: Any, waiting: Callable[[], AbstractContextManager[Any]] | None = None) -> None:
        self.inner = inner
        self.waiting = waiting or nullcontext
        self.chat = _Chat(inner.chat, self)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
