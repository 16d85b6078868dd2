"""`sessionlab chat` against servers that answer like Ollama, llama.cpp, vLLM and LM Studio.

Everything goes over real HTTP on loopback (tests/cli/quirky.py). For each kind of reply a real
server has sent, a test shows: no traceback, a clear line to the user, and a session log that
the next chat can resume with a request a strict provider accepts.
"""

from __future__ import annotations

import json
import os
import sys

import pexpect
import pytest

from . import quirky
from .conftest import REPO, STARTER
from .quirky import Answer, QuirkyServer, Slow, calls, text, tool_call
from .terminal import default_sigint

# The campaign (tests/conftest.py): the chat against real HTTP servers that stall and drop.
pytestmark = pytest.mark.campaign

LESSONS = [name for name in ("02_load", "07_undo") if (REPO / "solutions" / name / "agent.py").exists()]
ASK = "ask the elder about the cave\n"
RESUME = "what did the elder say?\n"


@pytest.fixture(scope="module")
def chat_course(tmp_path_factory):
    from .conftest import make_course
    return make_course(tmp_path_factory.mktemp("servers") / "course", {name: STARTER for name in LESSONS})


@pytest.fixture
def sessions(tmp_path):
    return tmp_path / "sessions"


def chat(cli, chat_course, sessions, *more, lesson="02", input=ASK):
    return cli("--course", chat_course, "chat", "--lesson", lesson, "--solution", "--sessions", sessions, *more,
               input=input)


def log_of(sessions, name="quest"):
    path = sessions / f"{name}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []


ELDER = text("The elder says the cave is dark: bring a torch.")
HEARD = text("We heard that the cave is dark.")

# (id, the server that has sent it, the replies of the first turn, what the user must see).
# docs/self-study.md cites where each was seen.
QUIRKS = [
    ("tool call without an id", "llamacpp",
     [calls(tool_call("talk_to", '{"npc": "elder"}', id=None)), ELDER], "bring a torch"),
    ("arguments as a JSON object", "llamacpp",
     [calls(tool_call("talk_to", {"npc": "elder"})), ELDER], "bring a torch"),
    ("arguments as an empty string", "vllm",
     [calls(tool_call("talk_to", "")), ELDER], "bring a torch"),
    ("arguments that are not JSON", "llamacpp",
     [calls(tool_call("talk_to", "{npc: elder")), ELDER], "bring a torch"),
    ("content null without tool calls", "vllm",
     [text(None)], "the model sent an empty reply"),
    ("text together with tool calls", "ollama",
     [calls(tool_call("talk_to", '{"npc": "elder"}'), content="Let me ask the elder."), ELDER],
     "Let me ask the elder."),
    ('finish_reason "stop" with tool calls', "ollama",
     [calls(tool_call("talk_to", '{"npc": "elder"}'), finish_reason="stop"), ELDER], "bring a torch"),
    ("a think block before the answer", "ollama",
     [text("<think>The user wants the elder. I know the answer.</think>\n\nThe elder is by the mill.")],
     "(thinking) The user wants the elder"),
    ("only the closing think tag", "llamacpp",
     [text("The user wants the elder.\n</think>\n\nThe elder is by the mill.")],
     "(thinking) The user wants the elder"),
    ("a tool call written as JSON text", "ollama",
     [text('```json\n{"name": "talk_to", "parameters": {"npc": "elder"}}\n```')],
     "as text instead of calling the tool"),
]


@pytest.mark.parametrize("lesson", [name[:2] for name in LESSONS])
@pytest.mark.parametrize("quirk, flavour, replies, shown", [pytest.param(*q, id=q[0]) for q in QUIRKS])
def test_a_quirky_reply_leaves_a_session_that_resumes(cli, chat_course, sessions, quirk, flavour, replies, shown,
                                                      lesson):
    with QuirkyServer(flavour, list(replies) + [HEARD]) as server:
        first = chat(cli, chat_course, sessions, "quest", "--base-url", server.base_url, "--model", "town",
                     lesson=lesson)
        written = log_of(sessions)
        again = chat(cli, chat_course, sessions, "quest", "--base-url", server.base_url, "--model", "town",
                     lesson=lesson, input=RESUME)

    assert "Traceback" not in first.text + again.text
    assert shown in first.out, f"the user should see {shown!r}; the chat printed:\n{first.text}"
    assert first.status == 0 and first.err == "", first.text
    assert written and written[0] == {"role": "user", "content": ASK.strip()}
    assert again.status == 0 and again.err == "", f"the session should resume:\n{again.text}"
    assert "We heard that the cave is dark." in again.out
    assert server.refused == [], "every request, the resumed one too, passes a strict provider's checks"
    assert all(r["tool_choice"] == "auto" for r in server.requests), "tool_choice is sent whenever tools are"


def test_thinking_is_shown_folded_but_kept_whole_in_the_log(cli, chat_course, sessions):
    thought = "<think>" + "The elder lives by the mill. " * 20 + "</think>The elder is by the mill."
    with QuirkyServer("ollama", [text(thought)]) as server:
        run = chat(cli, chat_course, sessions, "quest", "--base-url", server.base_url, "--model", "town")
    shown = [line for line in run.out.splitlines() if "(thinking)" in line]
    assert len(shown) == 1 and "more characters" in shown[0], "long thinking is folded into one line"
    assert "agent   The elder is by the mill." in run.out, "the answer is shown as the answer"
    assert log_of(sessions)[-1]["content"] == thought, "the log keeps what the model said"


# --- the wrong URL, the wrong model, a model without tools: said before the user types ---------


@pytest.mark.parametrize("flavour", ["ollama", "vllm", "lmstudio"])
def test_a_base_url_without_v1_is_named_as_the_url_not_the_model(cli, chat_course, sessions, flavour):
    with QuirkyServer(flavour) as server:
        run = chat(cli, chat_course, sessions, "quest", "--base-url", server.url, "--model", "town")
    assert run.status == 1
    first = run.err.splitlines()[0]
    assert f"the base URL {server.url} is not the API's address" in first, run.err
    assert f"use --base-url {server.base_url}" in run.err
    assert "not found at" not in run.err, "the model is not blamed"
    assert "Traceback" not in run.text and "try again" not in run.err
    assert log_of(sessions) == [], "nothing is written before the check passes"


def test_llama_cpp_serves_the_api_with_or_without_v1(cli, chat_course, sessions):
    with QuirkyServer("llamacpp", [ELDER]) as server:
        run = chat(cli, chat_course, sessions, "quest", "--base-url", server.url, "--model", "whatever")
    assert run.status == 0, run.text
    assert "bring a torch" in run.out


def test_a_missing_model_is_named_with_the_ones_the_server_has(cli, chat_course, sessions):
    with QuirkyServer("vllm", models=("Qwen/Qwen2.5-7B-Instruct",)) as server:
        run = chat(cli, chat_course, sessions, "quest", "--base-url", server.base_url, "--model", "qwen")
    assert run.status == 1
    assert "model 'qwen' not found" in run.err and "the server has: Qwen/Qwen2.5-7B-Instruct" in run.err
    assert "--model" in run.err and "try again" not in run.err
    assert log_of(sessions) == []


def test_an_ollama_model_that_is_not_pulled(cli, chat_course, sessions, monkeypatch):
    with QuirkyServer("ollama", models=("llama3.2",)) as server:
        monkeypatch.setenv("OLLAMA_HOST", server.url.removeprefix("http://"))
        run = chat(cli, chat_course, sessions, "quest", "--ollama", "mistral")
    assert run.status == 1
    assert "model 'mistral' not found" in run.err and "ollama pull mistral" in run.err
    assert log_of(sessions) == []


def test_a_model_without_tools_is_refused_before_the_user_types_and_not_suggested_again(
        cli, chat_course, sessions, monkeypatch):
    with QuirkyServer("ollama", models=("llama3.2",), tools=False) as server:
        monkeypatch.setenv("OLLAMA_HOST", server.url)
        run = chat(cli, chat_course, sessions, "quest", "--ollama", "llama3.2")
    assert run.status == 1
    assert "model 'llama3.2' does not support tools" in run.err
    assert "--ollama llama3.2" not in run.err, "the hint does not suggest the model that just failed"
    assert "--ollama qwen2.5" in run.err
    assert "try again" not in run.err
    assert not (sessions / "quest.jsonl").exists(), "the refused model left no question in the log"


@pytest.mark.parametrize("flavour, hint", [("llamacpp", "start llama-server with --jinja"),
                                           ("vllm", "--enable-auto-tool-choice")])
def test_a_server_not_set_up_for_tools_says_how_to_start_it(cli, chat_course, sessions, flavour, hint):
    with QuirkyServer(flavour, tools=False) as server:
        run = chat(cli, chat_course, sessions, "quest", "--base-url", server.base_url, "--model", "town")
    assert run.status == 1
    assert "not set up for tool calls" in run.err and hint in run.err
    assert "try again" not in run.err
    assert log_of(sessions) == []


def test_lm_studio_answering_200_with_no_reply_is_one_line(cli, chat_course, sessions):
    # With the check skipped, the first request meets LM Studio's "Unexpected endpoint" answer.
    with QuirkyServer("lmstudio") as server:
        run = chat(cli, chat_course, sessions, "quest", "--base-url", server.url, "--model", "town", "--no-check")
    assert "Traceback" not in run.text
    assert "answered with no reply in it (Unexpected endpoint or method. (POST /chat/completions))" in run.err
    assert "/v1" in run.err
    assert [m["role"] for m in log_of(sessions)] == ["user"]


# --- "try again" only where it can help -------------------------------------------------------


def test_a_server_error_says_try_again_and_the_chat_goes_on(cli, chat_course, sessions):
    script = [Answer(500, {"error": {"message": "out of memory", "type": "server_error"}}), ELDER]
    with QuirkyServer("llamacpp", script) as server:
        run = chat(cli, chat_course, sessions, "quest", "--base-url", server.base_url, "--model", "town",
                   input=ASK + ASK)
    assert "HTTP 500: out of memory" in run.err and "try again" in run.err
    assert run.status == 0 and "bring a torch" in run.out


def test_a_refused_request_does_not_say_try_again(cli, chat_course, sessions):
    script = [Answer(400, {"error": {"message": "context length exceeded", "type": "invalid_request_error"}})]
    with QuirkyServer("vllm", script) as server:
        run = chat(cli, chat_course, sessions, "quest", "--base-url", server.base_url, "--model", "town")
    assert "HTTP 400: context length exceeded" in run.err
    assert "try again" not in run.err and "/undo" in run.err


def test_a_reply_that_takes_too_long_is_one_line_that_says_try_again(cli, chat_course, sessions):
    with QuirkyServer("ollama", [Slow(ELDER)]) as server:
        run = chat(cli, chat_course, sessions, "quest", "--base-url", server.base_url, "--model", "town",
                   "--timeout", "1")
    assert "did not answer within 1 s" in run.err and "try again" in run.err and "--timeout" in run.err
    assert "Traceback" not in run.text
    assert "the model is working" not in run.text, "no spinner outside a terminal"


def test_the_chat_shows_the_model_working_with_the_seconds_spent(chat_course, sessions):
    slow = Slow(ELDER)
    with QuirkyServer("ollama", [slow]) as server:
        child = pexpect.spawn(sys.executable, ["-m", "sessionlab", "--course", str(chat_course), "chat", "--lesson",
                                               "02", "--solution", "--sessions", str(sessions), "quest",
                                               "--base-url", server.base_url, "--model", "town"],
                              encoding="utf-8", timeout=60, dimensions=(40, 120), env={**os.environ, "TERM": "xterm"})
        try:
            child.expect("you>")
            child.sendline(ASK.strip())
            assert slow.waiting.wait(60), "the request never came"
            child.expect(r"the model is working \(Ctrl-C stops it\) 1s")   # the seconds count up
            slow.release.set()
            child.expect("bring a torch")
            child.expect("you>")
            # A Ctrl-D that arrives while readline is still setting up the terminal
            # (a loaded machine) is lost: press it again, as a user would.
            for _ in range(6):
                child.sendeof()
                if child.expect([pexpect.EOF, pexpect.TIMEOUT], timeout=10) == 0:
                    break
            else:
                raise AssertionError(f"Ctrl-D did not end the chat: {child.before!r}")
        finally:
            child.close(force=True)
            slow.release.set()
    assert child.exitstatus == 0
    assert [m["role"] for m in log_of(sessions)] == ["user", "assistant"]


def test_the_quirky_server_refuses_what_a_strict_provider_refuses():
    with pytest.raises(quirky.InvalidRequest):
        quirky.strict_check({"model": "m", "messages": [{"role": "user", "content": "hi"},
                                                        {"role": "assistant", "content": None}]})


def test_ctrl_c_while_the_model_is_checked_writes_nothing(chat_course, sessions):
    import threading

    from sessionlab.scripted import ScriptedModel
    from sessionlab.server import ModelServer
    from sessionlab.town_model import play

    checking, release = threading.Event(), threading.Event()

    def slow_to_load(body):
        if body.get("max_tokens") == 1:          # the check: the model takes its time to load
            checking.set()
            release.wait(60)
        return play(body)

    with ModelServer(ScriptedModel(script=slow_to_load)) as server:
        child = pexpect.spawn(sys.executable, ["-m", "sessionlab", "--course", str(chat_course), "chat", "--lesson",
                                               "02", "--solution", "--sessions", str(sessions), "quest",
                                               "--base-url", server.base_url],
                              encoding="utf-8", timeout=60, dimensions=(40, 120), env={**os.environ, "TERM": "xterm"},
                              preexec_fn=default_sigint)
        try:
            assert checking.wait(60), "the check never came"
            child.expect("checking scripted-town")
            child.sendintr()
            child.expect("stopped while checking")
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)
            release.set()
    assert child.exitstatus == 130
    assert "Traceback" not in child.before
    assert not sessions.exists() or not any(sessions.iterdir()), "nothing was written"


def test_without_model_the_chat_asks_which_one_when_the_server_has_several(cli, chat_course, sessions):
    with QuirkyServer("vllm", models=("small", "large")) as server:
        run = chat(cli, chat_course, sessions, "quest", "--base-url", server.base_url)
    assert run.status == 1
    assert "which model? the server at" in run.err and "has 2: small, large" in run.err
    assert "--model NAME" in run.err and log_of(sessions) == []
