"""The chat's helpers for real servers: OLLAMA_HOST, error bodies, think blocks, calls written as text."""

from __future__ import annotations

import pytest

from sessionlab.cli import connect, replies
from sessionlab.cli.doctor import ollama_url


# What Ollama's envconfig.Host() makes of each value, with the listening-only addresses
# (empty host, 0.0.0.0, ::) turned into this machine's, as a client dialling them reaches it.
@pytest.mark.parametrize("value, url", [
    (None, "http://127.0.0.1:11434"),
    ("", "http://127.0.0.1:11434"),
    ("  '127.0.0.1:11434'  ", "http://127.0.0.1:11434"),
    (":1234", "http://127.0.0.1:1234"),
    ("0.0.0.0", "http://127.0.0.1:11434"),
    ("0.0.0.0:8080", "http://127.0.0.1:8080"),
    ("gpu-box", "http://gpu-box:11434"),
    ("gpu-box:9000", "http://gpu-box:9000"),
    ("http://gpu-box", "http://gpu-box:80"),
    ("https://gpu-box", "https://gpu-box:443"),
    ("https://gpu-box:8443/ollama/", "https://gpu-box:8443/ollama"),
    ("::1", "http://[::1]:11434"),
    ("[::1]:5000", "http://[::1]:5000"),
    ("[::]:5000", "http://[::1]:5000"),
    ("gpu-box:99999", "http://gpu-box:11434"),
    ("gpu-box:port", "http://gpu-box:11434"),
    ("http://gpu-box:", "http://gpu-box:80"),
])
def test_ollama_host_is_read_as_ollama_reads_it(value, url):
    assert connect.ollama_url(value) == url


def test_doctor_and_chat_read_ollama_host_the_same_way(monkeypatch):
    monkeypatch.setenv("OLLAMA_HOST", ":7777")
    assert ollama_url() == "http://127.0.0.1:7777"
    assert ollama_url("http://other") == "http://other:80", "--ollama-url wins over OLLAMA_HOST"


@pytest.mark.parametrize("body, message", [
    ({"error": {"message": "model \"x\" not found, try pulling it first"}}, 'model "x" not found, try pulling it first'),
    ({"object": "error", "message": "The model `x` does not exist.", "code": 404}, "The model `x` does not exist."),
    ({"error": "Unexpected endpoint or method. (POST /chat/completions)"}, "Unexpected endpoint or method. (POST /chat/completions)"),
    ({"detail": "Not Found"}, "Not Found"),
    ("404 page not found\n", "404 page not found"),
    (None, "fallback"),
])
def test_an_error_body_of_any_server_gives_its_message(body, message):
    assert connect.server_message(body, "fallback") == message


def test_the_no_tools_hint_never_suggests_the_model_that_failed():
    assert "llama3.2" not in connect.suggest_tool_models("llama3.2:1b")
    assert "qwen2.5" not in connect.suggest_tool_models("qwen2.5")
    assert len(connect.suggest_tool_models("gemma:2b")) == 2


def test_tool_choice_auto_is_added_whenever_tools_are_offered():
    sent = []

    class Inner:
        class chat:
            class completions:
                @staticmethod
                def create(**request):
                    sent.append(request)
                    return type("Response", (), {"choices": [object()]})()

    client = connect.KitClient(Inner())
    client.chat.completions.create(model="m", messages=[], tools=[{"type": "function"}])
    client.chat.completions.create(model="m", messages=[])
    client.chat.completions.create(model="m", messages=[], tools=[{"type": "function"}], tool_choice="required")
    assert [r.get("tool_choice") for r in sent] == ["auto", None, "required"]


@pytest.mark.parametrize("content, thinking, answer", [
    ("<think>hmm</think>The elder.", "hmm", "The elder."),
    ("hmm\n</think>\n\nThe elder.", "hmm", "The elder."),          # the template opened the tag
    ("<think>\n\n</think>\n\nThe elder.", "", "The elder."),
    ("<think>still going", "still going", ""),                      # cut off while thinking
    ("The elder.", "", "The elder."),
])
def test_thinking_is_split_from_the_answer(content, thinking, answer):
    assert replies.split_thinking(content) == (thinking, answer)


@pytest.mark.parametrize("content, names", [
    ('{"name": "buy", "parameters": {"item": "rope"}}', ["buy"]),
    ('```json\n{"name": "buy", "arguments": {"item": "rope"}}\n```', ["buy"]),
    ('<tool_call>\n{"name": "talk_to", "arguments": {"npc": "elder"}}\n</tool_call>', ["talk_to"]),
    ('[{"name": "buy", "arguments": {}}, {"name": "talk_to", "arguments": {}}]', ["buy", "talk_to"]),
    ('{"type": "function", "function": {"name": "buy", "arguments": "{}"}}', ["buy"]),
    ('Here is JSON: {"name": "buy", "parameters": {}}', []),
    ('{"name": "fly", "parameters": {}}', []),                       # not one of the tools
    ('{"name": "buy"}', []),
    ("The elder says hello.", []),
])
def test_a_tool_call_written_as_text_is_recognised(content, names):
    assert replies.tool_calls_in_text(content, {"buy", "talk_to"}) == names
