"""`sessionlab doctor`, `sessionlab serve`, and the scripted model served over loopback HTTP."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys

import openai
import pytest

from sessionlab.scripted import Disconnect, ScriptedModel, call, say, use
from sessionlab.server import ModelServer
from sessionlab.town_model import town_model

from .terminal import default_sigint


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the server -------------------------------------------------------------------------------


def client_for(server):
    return openai.OpenAI(base_url=server.base_url, api_key="none", max_retries=0)


def test_the_real_client_talks_to_the_scripted_model_over_loopback():
    model = ScriptedModel([use(call("talk_to", npc="elder"), call("buy", item="rope")), say("Done.")])
    with ModelServer(model) as server:
        client = client_for(server)
        first = client.chat.completions.create(model=model.model, messages=[{"role": "user", "content": "go"}])
        calls = first.choices[0].message.tool_calls
        assert [c.function.name for c in calls] == ["talk_to", "buy"]
        second = client.chat.completions.create(model=model.model, messages=[
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [c.model_dump() for c in calls]},
            *({"role": "tool", "tool_call_id": c.id, "content": "ok"} for c in calls)])
        assert second.choices[0].message.content == "Done."
        assert [m.id for m in client.models.list()] == [model.model]
    assert len(model.requests) == 2


def test_the_server_validates_like_a_provider_and_drops_the_line_on_demand():
    model = ScriptedModel([Disconnect()])
    with ModelServer(model, models=["scripted-town", "other"]) as server:
        client = client_for(server)
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="other", messages=[
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "buy", "arguments": "{}"}}]},
                {"role": "user", "content": "and?"}])
        assert "c1" in str(refused.value)
        with pytest.raises(openai.NotFoundError) as missing:
            client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "hi"}])
        assert "not found, try pulling it first" in str(missing.value)
        with pytest.raises(openai.APIConnectionError):
            client.chat.completions.create(model="scripted-town", messages=[{"role": "user", "content": "hi"}])


def test_sessionlab_serve_runs_the_town_model_until_stopped():
    process = subprocess.Popen([sys.executable, "-m", "sessionlab", "serve", "--port", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=default_sigint)
    try:
        first = process.stdout.readline()
        url = re.search(r"answers at (http://\S+/v1)", first).group(1)
        client = openai.OpenAI(base_url=url, api_key="none", max_retries=0)
        reply = client.chat.completions.create(model="scripted-town", tools=town_tools(),
                                               messages=[{"role": "user", "content": "ask the guard about the cave"}])
        assert reply.choices[0].message.tool_calls[0].function.name == "talk_to"
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 130, "Ctrl-C exits 130, as the reference page says"
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "stopped (Ctrl-C)"


@pytest.mark.parametrize("port", ["99999", "-1", "65536"])
def test_serve_refuses_a_port_out_of_range_in_one_line(cli, port):
    run = cli("serve", "--port", port)
    assert run.status == 2
    assert "Traceback" not in run.text
    assert run.err.strip().splitlines() == [
        f"error: --port {port}: a port is a number from 0 to 65535 (0 picks a free one)"]


def town_tools():
    from sessionlab.town import TOOL_SCHEMAS
    return TOOL_SCHEMAS


# --- doctor -----------------------------------------------------------------------------------


def test_doctor_lists_python_the_dependencies_and_ollamas_models(cli):
    with ModelServer(town_model(), models=["llama3.2:latest", "qwen2.5:3b"]) as server:
        run = cli("doctor", "--ollama-url", server.url)
    assert run.status == 0, run.text
    assert re.search(r"Python\s+3\.\d+", run.out)
    for package in ("openai", "httpx", "respx", "rich", "pytest"):
        assert re.search(rf"\b{package}\s+\d", run.out), package
    assert f"answering at {server.url}" in run.out
    assert "llama3.2:latest, qwen2.5:3b" in run.out


def test_doctor_says_how_to_start_ollama_when_it_does_not_answer(cli, monkeypatch):
    port = free_port()
    monkeypatch.setenv("OLLAMA_HOST", f"127.0.0.1:{port}")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value")
    run = cli("doctor")
    assert run.status == 0, "Ollama is optional"
    assert f"not answering at http://127.0.0.1:{port}" in run.out
    assert "ollama serve" in run.out
    assert "sk-secret-value" not in run.out, "a key is reported as set, never printed"


@pytest.mark.parametrize("url, why", [
    ("http://256.1.1.1:99999", "Invalid IPv4 address"),
    ("http://127.0.0.1:99999", "port 99999 is not in 1-65535"),
    ("localhost:0", "port 0 is not in 1-65535"),
    ("ftp://127.0.0.1:11434", "the scheme must be http or https"),
    ("http://:11434", "no host"),
])
def test_doctor_refuses_a_bad_ollama_url_in_one_line(cli, url, why):
    run = cli("doctor", "--ollama-url", url)
    assert run.status == 2
    assert "Traceback" not in run.text
    lines = run.err.strip().splitlines()
    assert len(lines) == 1 and f"--ollama-url {url}" in lines[0] and why in lines[0], lines
    assert run.out == "", "nothing is checked before the argument is"


def test_doctor_reports_an_ollama_host_that_is_no_address_in_its_row(cli, monkeypatch):
    monkeypatch.setenv("OLLAMA_HOST", "256.1.1.1")
    run = cli("doctor")
    assert run.status == 0, "Ollama is optional"
    assert "Traceback" not in run.text
    row = next(line for line in run.out.splitlines() if "Ollama" in line)
    assert "not answering at http://256.1.1.1:11434" in row and "Invalid IPv4" in row, row
