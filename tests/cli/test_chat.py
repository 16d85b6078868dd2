"""`sessionlab chat`: against the scripted model through respx, and over real loopback HTTP.

The sessions here are real files written by the lessons' reference code; the models are the
built-in town model (or a script) behind the real openai client.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading

import pexpect
import pytest

from sessionlab.cli import chat
from sessionlab.scripted import Fail, ScriptedModel, call, say, use
from sessionlab.server import ModelServer
from sessionlab.town import Town
from sessionlab.town_model import play, town_model

from .conftest import REPO, STARTER
from .terminal import default_sigint

QUEST = "ask the elder about the cave\n"


ALL = ["00_memory", "01_append", "02_load", "03_fork", "04_repair", "05_lock", "06_blobs", "07_undo",
       "08_compact"]
LESSONS = [name for name in ALL if (REPO / "lessons" / name / "lesson.toml").exists()
           and (REPO / "solutions" / name / "agent.py").exists()]
RESUMING = [name for name in LESSONS if name >= "02"]


@pytest.fixture
def chat_course(course_copy):
    return course_copy({name: STARTER for name in LESSONS})


@pytest.fixture
def sessions(tmp_path):
    return tmp_path / "sessions"


def lines(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def reference(chat_course, sessions, lesson="02"):
    return ["--course", chat_course, "chat", "--lesson", lesson, "--solution", "--sessions", sessions]


# --- through respx: the built-in town model ---------------------------------------------------


def test_tool_calls_and_results_are_shown_as_they_happen_and_saved(cli, chat_course, sessions):
    run = cli(*reference(chat_course, sessions), "quest", input=QUEST + "buy what we need\n")

    assert run.status == 0, run.text
    assert 'talk_to(npc="elder")' in run.out
    assert "← The elder says" in run.out
    assert 'buy(item="torch")' in run.out and 'buy(item="rope")' in run.out
    assert run.out.index('talk_to(npc="elder")') < run.out.index("← The elder says") < run.out.index('buy(item="torch")')
    log = lines(sessions / "quest.jsonl")
    assert [m["role"] for m in log[:4]] == ["user", "assistant", "tool", "assistant"]
    assert "sessionlab chat quest --lesson 02 --solution" in run.out, "it says how to continue"


@pytest.mark.parametrize("lesson", RESUMING)
def test_a_session_continues_in_a_new_chat(cli, chat_course, sessions, lesson):
    cli(*reference(chat_course, sessions, lesson[:2]), "quest", input=QUEST)

    run = cli(*reference(chat_course, sessions, lesson[:2]), "quest", input="what did the elder say?\n")

    assert run.status == 0, run.text
    assert "4 message(s) read back" in run.out
    assert "Here is what we heard: The elder says" in run.out, "the model was sent day 1's messages"


def test_a_fork_at_a_point_starts_with_that_much_history(cli, chat_course, sessions):
    cli(*reference(chat_course, sessions), "quest", input=QUEST + "buy what we need\n")

    run = cli(*reference(chat_course, sessions, "03"), "what-if", "--fork-from", "quest", "--at", "4",
              input="what do we have?\n")

    assert run.status == 0, run.text
    assert "forked quest at message 4 into what-if" in run.out
    assert "4 message(s) read back" in run.out
    assert "not bought anything" in run.out, "the fork has the talk but not the shopping"
    meta = json.loads((sessions / "what-if.meta.json").read_text())
    assert meta["parent"] == "quest" and meta["forked_at"] == 4


def test_a_fork_that_cuts_a_tool_call_from_its_result_is_pointed_out(cli, chat_course, sessions):
    cli(*reference(chat_course, sessions), "quest", input=QUEST)
    run = cli(*reference(chat_course, sessions, "03"), "cut", "--fork-from", "quest", "--at", "2")
    assert "cuts a tool call from its result" in run.err


def test_lesson_00_chats_in_memory_and_says_so(cli, chat_course, sessions):
    run = cli(*reference(chat_course, sessions, "00"), "quest", input=QUEST)

    assert run.status == 0, run.text
    assert "in memory only" in run.out
    assert "The elder says" in run.out
    assert not sessions.exists(), "lesson 00 writes nothing"


def test_lesson_01_appends_to_an_existing_log_without_reading_it(cli, chat_course, sessions):
    cli(*reference(chat_course, sessions), "quest", input=QUEST)
    run = cli(*reference(chat_course, sessions, "01"), "quest", input="what did the elder say?\n")

    assert "only appends" in run.err
    assert "I don't remember talking to anyone" in run.out
    assert len(lines(sessions / "quest.jsonl")) == 6


def test_without_a_lesson_it_runs_your_latest_passing_lesson(cli, course, sessions):
    run = cli("--course", course, "chat", "--sessions", sessions, input=QUEST)
    assert run.status == 0, run.text
    assert "lesson 00 (yours: lessons/00_memory/)" in run.out


def test_your_unfinished_code_is_one_line_not_a_traceback(cli, chat_course, sessions):
    run = cli("--course", chat_course, "chat", "--lesson", "00", input=QUEST)
    assert run.status == 1
    assert "not written yet" in run.err and "--solution" in run.err
    assert "Traceback" not in run.text


def test_slash_commands(cli, chat_course, sessions):
    run = cli(*reference(chat_course, sessions), "quest",
              input=QUEST + "/history\n/town\n/help\n/dance\n/quit\nnever read\n")
    assert "[0] you" in run.out and "[2] result" in run.out
    assert "gold: 10; items: none" in run.out
    assert "/history" in run.out
    assert "unknown command /dance" in run.err
    assert len(lines(sessions / "quest.jsonl")) == 4, "/quit ends the chat"


def test_a_bad_session_id_is_refused_in_one_line(cli, chat_course, sessions):
    run = cli(*reference(chat_course, sessions), "../escape", input=QUEST)
    assert run.status == 2, "refused before anything runs (test_first_hour_3, item 10)"
    assert "invalid session id '../escape'" in run.err and "Traceback" not in run.text
    assert not (sessions.parent / "escape.jsonl").exists()


def test_forking_from_a_missing_session_is_one_line(cli, chat_course, sessions):
    run = cli(*reference(chat_course, sessions, "03"), "b", "--fork-from", "nobody")
    assert run.status == 1
    assert "SessionNotFound" in run.err and "Traceback" not in run.text


def test_a_server_error_is_reported_and_the_chat_goes_on(cli, chat_course, sessions, monkeypatch):
    monkeypatch.setattr(chat, "default_model", lambda: ScriptedModel([Fail(500, "overloaded"), say("Hello again.")]))

    run = cli(*reference(chat_course, sessions), "s", input="hello\nhello?\n")

    assert run.status == 0
    assert "HTTP 500: overloaded" in run.err
    assert "Hello again." in run.out


def test_a_refused_history_names_the_unanswered_tool_call(cli, chat_course, sessions):
    sessions.mkdir()
    broken = [{"role": "user", "content": "buy a rope"},
              {"role": "assistant", "content": None, "tool_calls": [
                  {"id": "call_1_0", "type": "function", "function": {"name": "buy", "arguments": '{"item": "rope"}'}}]}]
    (sessions / "crashed.jsonl").write_text("".join(json.dumps(m) + "\n" for m in broken))

    run = cli(*reference(chat_course, sessions), "crashed", input="hello\n")

    assert "HTTP 400" in run.err and "call_1_0" in run.err
    assert "lesson 04" in run.err


class TownThatIsInterrupted(Town):
    """Ctrl-C arrives while the shop is busy: in the middle of a tool call."""

    def buy(self, item):
        raise KeyboardInterrupt


@pytest.mark.parametrize("lesson", RESUMING)
def test_ctrl_c_during_a_tool_call_leaves_a_log_that_resumes(cli, chat_course, sessions, monkeypatch, lesson):
    monkeypatch.setattr(chat, "Town", TownThatIsInterrupted)
    run = cli(*reference(chat_course, sessions, lesson[:2]), "quest", input="buy a torch and a rope\nnever read\n")

    assert run.status == 130
    assert "interrupted" in run.out and "2 tool call(s) answered as interrupted" in run.out
    log = lines(sessions / "quest.jsonl")
    assert [m["role"] for m in log] == ["user", "assistant", "tool", "tool"]
    assert all(m["content"].startswith("interrupted") for m in log[2:])

    monkeypatch.setattr(chat, "Town", Town)
    resumed = cli(*reference(chat_course, sessions, lesson[:2]), "quest", input="what do we have?\n")
    assert resumed.status == 0, resumed.text
    assert resumed.err == "", "the resumed history is accepted by the (validating) model"
    assert "not bought anything" in resumed.out


def test_ctrl_c_while_a_message_is_written_waits_until_the_line_is_whole():
    written = []
    with pytest.raises(KeyboardInterrupt):
        with chat.interrupts_held():
            os.kill(os.getpid(), signal.SIGINT)
            written.append("the whole line")
    assert written == ["the whole line"]


# --- over real HTTP on loopback ---------------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_chat_over_real_http_finds_the_only_model(cli, chat_course, sessions):
    with ModelServer(town_model()) as server:
        run = cli(*reference(chat_course, sessions), "quest", "--base-url", server.base_url, input=QUEST)
        requests = list(server.model.requests)
    assert run.status == 0, run.text
    assert f"scripted-town at {server.base_url}" in run.out
    assert "The elder says" in run.out
    check, *turn = requests
    assert check["max_tokens"] == 1 and check["tools"], "the server and model are checked before the chat"
    assert len(turn) == 2 and turn[1]["messages"][-1]["role"] == "tool"
    assert all(r["tool_choice"] == "auto" for r in requests), "tool_choice is said, not left to the server"


def test_openai_environment_variables_are_honoured(cli, chat_course, sessions, monkeypatch):
    with ModelServer(town_model(), models=["town"]) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        run = cli(*reference(chat_course, sessions), "q", "--model", "town", input=QUEST)
    assert run.status == 0, run.text
    assert f"town at {server.base_url}" in run.out and "The elder says" in run.out


def test_no_server_names_the_url_and_suggests_starting_ollama(cli, chat_course, sessions, monkeypatch):
    port = free_port()
    monkeypatch.setenv("OLLAMA_HOST", f"127.0.0.1:{port}")

    run = cli(*reference(chat_course, sessions), "q", "--ollama", "llama3.2", input=QUEST)

    assert run.status == 1
    first = run.err.strip().splitlines()[0]
    assert f"http://127.0.0.1:{port}/v1" in first and "connection refused" in first
    assert "ollama serve" in run.err
    assert "Traceback" not in run.err
    assert not (sessions / "q.jsonl").exists(), "checked before the user typed: nothing is written"


def test_a_model_that_is_not_pulled_suggests_pulling_it(cli, chat_course, sessions, monkeypatch):
    with ModelServer(town_model(), models=["llama3.2"]) as server:
        monkeypatch.setenv("OLLAMA_HOST", server.url)
        run = cli(*reference(chat_course, sessions), "q", "--ollama", "mistral", input=QUEST)
    assert run.status == 1
    assert "'mistral' not found" in run.err
    assert "ollama pull mistral" in run.err


def test_a_model_without_tools_says_so(cli, chat_course, sessions, monkeypatch):
    refusing = ScriptedModel([Fail(400, "registry.ollama.ai/library/gemma:2b does not support tools")],
                             model="gemma:2b")
    with ModelServer(refusing) as server:
        monkeypatch.setenv("OLLAMA_HOST", server.url)
        run = cli(*reference(chat_course, sessions), "q", "--ollama", "gemma:2b", input=QUEST)
    assert run.status == 1
    assert "'gemma:2b' does not support tools" in run.err
    assert "--ollama llama3.2" in run.err


def test_a_server_without_tool_calling_switched_on_says_how(cli, chat_course, sessions):
    refusing = ScriptedModel([Fail(400, '"auto" tool choice requires --enable-auto-tool-choice and '
                                        '--tool-call-parser to be set')], model="Qwen/Qwen2.5-7B-Instruct")
    with ModelServer(refusing) as server:
        run = cli(*reference(chat_course, sessions), "q", "--base-url", server.base_url, input=QUEST)
    assert run.status == 1
    assert "not set up for tool calls" in run.err and "--enable-auto-tool-choice" in run.err


def test_a_dropped_connection_is_one_line(cli, chat_course, sessions):
    from sessionlab.scripted import Disconnect
    with ModelServer(ScriptedModel([Disconnect()])) as server:
        run = cli(*reference(chat_course, sessions), "q", "--base-url", server.base_url, "--model", "scripted-town",
                  input=QUEST)
    assert run.status == 1
    assert f"cannot reach the model server at {server.base_url}" in run.err


def test_interrupted_mid_turn_in_a_terminal_then_resumed(chat_course, sessions, cli):
    waiting, release = threading.Event(), threading.Event()

    def slow_after_the_tool(body):
        if body["messages"][-1]["role"] == "tool" and not release.is_set():
            waiting.set()            # the model is "thinking" about the tool result ...
            release.wait(60)
        return play(body)

    with ModelServer(ScriptedModel(script=slow_after_the_tool)) as server:
        child = pexpect.spawn(sys.executable, ["-m", "sessionlab", *map(str, reference(chat_course, sessions)),
                                               "quest", "--base-url", server.base_url],
                              encoding="utf-8", timeout=60, dimensions=(40, 120),
                              env={**os.environ, "TERM": "xterm"}, preexec_fn=default_sigint)
        try:
            child.expect("you>")
            child.sendline(QUEST.strip())
            child.expect("The elder says")          # the tool ran and its result was recorded
            assert waiting.wait(60), "the second model call never came"
            child.sendintr()                        # ... and the user presses Ctrl-C
            child.expect("interrupted")
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)
            release.set()
        assert child.exitstatus == 130
        log = lines(sessions / "quest.jsonl")
        assert [m["role"] for m in log] == ["user", "assistant", "tool"]

        resumed = cli(*reference(chat_course, sessions), "quest", "--base-url", server.base_url,
                      input="what did the elder say?\n")
        last = server.model.requests[-1]
    assert resumed.status == 0, resumed.text
    assert "3 message(s) read back" in resumed.out
    assert "Here is what we heard" in resumed.out
    assert [m["role"] for m in last["messages"][1:]] == ["user", "assistant", "tool", "user"]


@pytest.mark.skipif("05_lock" not in LESSONS, reason="lesson 05 is not in the course yet")
def test_a_session_busy_in_another_process_is_one_line(cli, course_copy, sessions, tmp_path):
    course = course_copy({"05_lock": STARTER})
    holder = pexpect.spawn(sys.executable, ["-c", (
        "import sys; from sessionlab.course import load_module\n"
        f"m = load_module({str(course / 'solutions' / '05_lock' / 'agent.py')!r})\n"
        f"log = m.SessionLog({str(sessions)!r}, 'quest')\n"
        "log.append({'role': 'user', 'content': 'hi'})\n"
        "print('holding', flush=True); sys.stdin.readline()")], encoding="utf-8", timeout=30)
    try:
        holder.expect("holding")
        run = cli("--course", course, "chat", "--lesson", "05", "--solution", "--sessions", sessions, "quest",
                  input=QUEST)
    finally:
        holder.sendline("")
        holder.close(force=True)
    assert run.status == 1
    assert "SessionBusy" in run.err and str(holder.pid) in run.err
    assert "--fork-from quest" in run.err
    assert "Traceback" not in run.text


@pytest.mark.skipif("04_repair" not in LESSONS, reason="lesson 04 is not in the course yet")
def test_a_crashed_log_is_repaired_on_resume_from_lesson_04(cli, chat_course, sessions):
    sessions.mkdir()
    crashed = [{"role": "user", "content": "buy a rope"},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "call_1_0", "type": "function", "function": {"name": "buy", "arguments": '{"item": "rope"}'}}]}]
    (sessions / "crashed.jsonl").write_text("".join(json.dumps(m) + "\n" for m in crashed) + '{"role": "to')

    run = cli(*reference(chat_course, sessions, "04"), "crashed", input="what do we have?\n")

    assert run.status == 0, run.text
    assert "repaired on resume" in run.out
    assert "HTTP 400" not in run.err
    shown = cli("show", "crashed", "--sessions", sessions)
    assert "── repair ──" in shown.out and "[written by the repair]" in shown.out


@pytest.mark.skipif("07_undo" not in LESSONS, reason="lesson 07 is not in the course yet")
def test_undo_in_a_chat_is_struck_through_in_show(cli, chat_course, sessions):
    run = cli(*reference(chat_course, sessions, "07"), "quest",
              input=QUEST + "ask the guard about the cave\n/undo\n/history\n")
    assert run.status == 0, run.text
    assert "took back 1 turn(s); 4 message(s) remain" in run.out
    shown = cli("show", "quest", "--sessions", sessions)
    guard = [line for line in shown.out.splitlines() if "guard" in line and line.lstrip().startswith("[")]
    assert guard and all("(undone)" in line for line in guard)
    elder = next(line for line in shown.out.splitlines() if "[0]" in line)
    assert "(undone)" not in elder


@pytest.mark.skipif("07_undo" not in LESSONS, reason="lesson 07 is not in the course yet")
def test_an_undo_count_that_is_not_a_whole_number_takes_nothing_back(cli, chat_course, sessions):
    """`/undo abc`, `/undo -1`, `/undo 1.5` and `/undo 0` are typos: each is refused in one
    line and no turn is taken back (a typo must never destroy a turn)."""
    typos = ["abc", "-1", "1.5", "0"]
    run = cli(*reference(chat_course, sessions, "07"), "quest",
              input=QUEST + "".join(f"/undo {typo}\n" for typo in typos))
    assert run.status == 0, run.text
    assert "took back" not in run.out, run.text
    for typo in typos:
        assert f"{typo!r} is not one, so nothing was taken back" in run.err, run.err
    shown = cli("show", "quest", "--sessions", sessions)
    assert "(undone)" not in shown.out, shown.out
    assert "undo" not in (sessions / "quest.jsonl").read_text(encoding="utf-8")


@pytest.mark.skipif("06_blobs" not in LESSONS, reason="lesson 06 is not in the course yet")
def test_a_large_paste_is_shown_as_a_blob_by_its_size(cli, chat_course, sessions):
    paste = "ask the elder about the cave. " + "The map of the cave, copied by hand. " * 400
    run = cli(*reference(chat_course, sessions, "06"), "quest", input=paste + "\n")
    assert run.status == 0, run.text
    assert len((sessions / "quest.jsonl").read_bytes()) < 2000, "the paste went to blobs/"

    shown = cli("show", "quest", "--sessions", sessions)
    first = next(line for line in shown.out.splitlines() if "[0]" in line)
    assert f"[blob {len(paste.encode()) / 1024:.1f} KB · sha256 " in first and "ask the elder" in first
    assert "MISSING" not in first
    assert "blobs/: 1 file(s)" in cli("show", sessions).out
