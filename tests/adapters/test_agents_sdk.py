"""sessionlab.adapters.agents_sdk: the Agents SDK's session protocol on the file store.

The protocol's documented behaviour (agents.memory.session.Session: get_items with a
limit gives the newest items in order, add_items, pop_item returns the newest or None,
clear_session) is checked here without the SDK; what the store adds (items as item lines,
the repair of a call left without its output, all-or-nothing adds, reading from the end)
too. The last tests run the SDK's own Runner on the scripted model, a day per process:
they need `pip install -e '.[agents]'` and are skipped, saying so, without it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any
from pathlib import Path

import pytest

from sessionlab.adapters.agents_sdk import FileSession, file_name, reference_store

HERE = Path(__file__).parent
USER = {"role": "user", "content": "Buy a rope."}
CALL = {"type": "function_call", "call_id": "call_1", "name": "buy",
        "arguments": '{"item": "rope"}', "id": "fc_1"}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "You bought a rope."}
REASONING = {"type": "reasoning", "id": "rs_1", "summary": []}
ANSWER = {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
          "content": [{"type": "output_text", "text": "Bought a rope.", "annotations": []}]}
TURN = [USER, REASONING, CALL, OUTPUT, ANSWER]


def run(coroutine):
    return asyncio.run(coroutine)


def numbered(count: int) -> list[dict]:
    return [{"role": "user", "content": f"message {n}"} for n in range(count)]


@pytest.fixture
def session(tmp_path: Path):
    session = FileSession("quest-1", tmp_path)
    yield session
    session.close()


# --- the protocol ----------------------------------------------------------------------


def test_items_come_back_in_order_and_as_they_were_given(session):
    """add_items then get_items: every kind of item, equal to what was added, in order."""
    run(session.add_items(TURN))
    assert run(session.get_items()) == TURN


def test_a_limit_gives_the_newest_items_oldest_first(session):
    """get_items(limit=n): the latest n items in chronological order (the protocol's
    words); more than there are gives them all, 0 gives none."""
    run(session.add_items(numbered(30)))
    assert run(session.get_items(limit=3)) == numbered(30)[-3:]
    assert run(session.get_items(limit=100)) == numbered(30)
    assert run(session.get_items(limit=0)) == []


def test_the_settings_limit_applies_unless_a_limit_is_given(tmp_path):
    """session_settings.limit is what get_items() uses when given no limit; an explicit
    limit wins (the SDK's resolve_session_limit)."""
    session = FileSession("quest-1", tmp_path, session_settings={"limit": 2})
    run(session.add_items(numbered(5)))
    assert run(session.get_items()) == numbered(5)[-2:]
    assert run(session.get_items(limit=4)) == numbered(5)[-4:]


def test_pop_item_returns_the_newest_and_takes_it_back(session):
    """pop_item(): the most recent item, gone from the history; None once empty."""
    run(session.add_items(numbered(2)))
    assert run(session.pop_item()) == numbered(2)[1]
    assert run(session.get_items()) == numbered(2)[:1]
    assert run(session.pop_item()) == numbered(2)[0]
    assert run(session.pop_item()) is None
    assert run(session.get_items()) == []


def test_pop_item_never_changes_bytes_already_written(session, tmp_path):
    """The store's undo: a marker hides the item; the log is only ever appended to."""
    run(session.add_items(numbered(3)))
    before = (tmp_path / "quest-1.jsonl").read_bytes()
    run(session.pop_item())
    after = (tmp_path / "quest-1.jsonl").read_bytes()
    assert after.startswith(before) and len(after) > len(before)


def test_clear_session_forgets_every_item_and_the_session_goes_on(session, tmp_path):
    """clear_session(): no item left (the files deleted); adding starts a new history."""
    run(session.add_items(numbered(3)))
    run(session.clear_session())
    assert run(session.get_items()) == []
    assert not (tmp_path / "quest-1.jsonl").exists()
    run(session.add_items(numbered(1)))
    assert run(session.get_items()) == numbered(1)


def test_sessions_of_one_folder_keep_apart(tmp_path):
    """Two session ids, two histories; a third object on the first id sees its items."""
    first, second = FileSession("cats", tmp_path), FileSession("dogs", tmp_path)
    run(first.add_items([{"role": "user", "content": "I like cats"}]))
    run(second.add_items([{"role": "user", "content": "I like dogs"}]))
    again = FileSession("cats", tmp_path)
    assert run(again.get_items()) == [{"role": "user", "content": "I like cats"}]


def test_any_session_id_is_stored_inside_the_folder(tmp_path):
    """The SDK's ids may be anything; one that is no plain file name is stored under its
    hash, never as a path (no `..`, no `/`)."""
    session = FileSession("../../etc/passwd; DROP TABLE", tmp_path / "sessions")
    run(session.add_items(numbered(1)))
    files = [path.name for path in (tmp_path / "sessions").iterdir()]
    assert files == [f"{file_name(session.session_id)}.jsonl"]
    assert files[0].startswith("sdk-") and "/" not in files[0]
    assert run(FileSession(session.session_id, tmp_path / "sessions").get_items()) == numbered(1)


def test_adds_from_several_threads_lose_nothing(session):
    """Each thread with its own event loop, one session object: every item is stored."""
    def add(n: int) -> None:
        run(session.add_items([{"role": "user", "content": f"message {n}"}]))
    threads = [threading.Thread(target=add, args=(n,)) for n in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    contents = {item["content"] for item in run(session.get_items())}
    assert contents == {f"message {n}" for n in range(10)}


def test_settings_with_a_key_that_is_no_setting_are_refused(tmp_path):
    """A misspelt setting would silently read the whole history: the constructor
    refuses it with a TypeError naming the key, as the SDK's own sessions do."""
    with pytest.raises(TypeError, match="Unknown session settings: limitt"):
        FileSession("quest-1", tmp_path, session_settings={"limitt": 2})


def test_a_closed_session_refuses_every_call_and_keeps_its_items(tmp_path):
    """After close() the object answers every protocol call with an error naming the
    session, even an add of nothing; the log stays, and a new object goes on with it."""
    session = FileSession("quest-1", tmp_path)
    run(session.add_items(numbered(2)))
    session.close()
    session.close()     # a second close is harmless
    calls = [session.get_items(), session.add_items([]), session.add_items(numbered(1)),
             session.pop_item(), session.clear_session()]
    for call in calls:
        with pytest.raises(RuntimeError, match="FileSession is closed: session 'quest-1'"):
            run(call)
    again = FileSession("quest-1", tmp_path)
    assert run(again.get_items()) == numbered(2)
    again.close()


def test_a_refused_item_leaves_the_session_usable(session):
    """An item holding something that is not JSON is refused before anything is
    written, and the next add of good items is stored as if nothing had happened."""
    with pytest.raises(ValueError, match="not JSON"):
        run(session.add_items([{"role": "user", "content": object()}]))
    assert run(session.get_items()) == []
    run(session.add_items(numbered(1)))
    assert run(session.get_items()) == numbered(1)


def pause_in(monkeypatch, owner: object, name: str
             ) -> tuple[threading.Event, threading.Event]:
    """Make owner.name stop in its thread until released, after it has done its work."""
    reached, release = threading.Event(), threading.Event()
    real = getattr(owner, name)

    def paused(*args, **kwargs):
        result = real(*args, **kwargs)
        reached.set()
        assert release.wait(10), "the test never released the paused change"
        return result
    monkeypatch.setattr(owner, name, paused)
    return reached, release


CHANGES: dict[str, Callable] = {
    "add": lambda session: session.add_items([{"role": "user", "content": "once"}]),
    "pop": lambda session: session.pop_item(),
    "clear": lambda session: session.clear_session(),
}


@pytest.mark.parametrize("change", CHANGES)
def test_a_cancelled_change_reports_its_cancellation_only_once_it_has_landed(
        session, tmp_path, monkeypatch, change):
    """A caller cancelled while its change is being written learns of it only when the
    write is over, so that what it then reads is what the log holds (a retry cannot
    overtake the write it retries); the change is made exactly once."""
    store = session.store
    where = {"add": (store.SessionLog, "extend"), "pop": (store.SessionLog, "undo"),
             "clear": (store, "delete_session")}[change]
    run(session.add_items(numbered(2)))
    reached, release = pause_in(monkeypatch, *where)

    async def cancel_it() -> list:
        task = asyncio.create_task(CHANGES[change](session))
        assert await asyncio.to_thread(reached.wait, 10), "the change never started"
        task.cancel()
        await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.sleep(0.05)
        assert not task.done(), "the cancellation arrived while the change was writing"
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        return await session.get_items()
    seen = run(cancel_it())
    expected = {"add": numbered(2) + [{"role": "user", "content": "once"}],
                "pop": numbered(1), "clear": []}[change]
    assert seen == expected


# --- items as what they are ------------------------------------------------------------


def test_each_item_is_a_line_of_its_own_kind_never_a_chat_message(session, tmp_path):
    """On disk an item is {"$item": item}: the store's validator knows the kind, and no
    item poses as a chat message the course's agent would send to a model."""
    run(session.add_items(TURN))
    lines = [json.loads(line) for line in (tmp_path / "quest-1.jsonl").read_text().splitlines()]
    assert lines == [{"$item": item} for item in TURN]
    store = reference_store()
    for line in (tmp_path / "quest-1.jsonl").read_bytes().splitlines():
        assert store.parse_line(line) == {"$item": json.loads(line)["$item"]}


def test_an_add_with_one_bad_item_writes_nothing(session, tmp_path):
    """All or nothing: an item the validator refuses (an output that names no call)
    stops the whole add before a byte is written, and says why."""
    run(session.add_items(numbered(1)))
    before = (tmp_path / "quest-1.jsonl").read_bytes()
    with pytest.raises(ValueError, match="without a 'call_id'"):
        run(session.add_items([USER, {"type": "function_call_output", "output": "6"}]))
    assert (tmp_path / "quest-1.jsonl").read_bytes() == before


def test_an_add_is_one_write(session, tmp_path, monkeypatch):
    """The turn's items go to the log in a single write(): a crash cannot split them."""
    run(session.add_items(numbered(1)))
    writes: list[int] = []
    real_write = os.write

    def counting(fd: int, data: bytes) -> int:
        writes.append(len(data))
        return real_write(fd, data)
    monkeypatch.setattr(os, "write", counting)
    run(session.add_items(TURN))
    log_bytes = sum(len(json.dumps({"$item": item}, ensure_ascii=False)) + 1 for item in TURN)
    assert log_bytes in writes, f"the turn's {log_bytes} bytes were written as {writes}"


def test_a_call_left_without_its_output_is_answered_when_the_session_resumes(tmp_path):
    """A crash between a function call and its output: the next writer answers the call
    with an output saying it was interrupted and may or may not have run, so that what
    get_items() gives can be sent again; the repair is written once."""
    log = tmp_path / "quest-1.jsonl"
    log.write_text("".join(json.dumps({"$item": item}) + "\n" for item in [USER, CALL]))
    session = FileSession("quest-1", tmp_path)
    assert run(session.get_items()) == [USER, CALL], "reading alone never repairs"
    run(session.add_items([{"role": "user", "content": "Where was I?"}]))
    items = run(session.get_items())
    assert items[:2] == [USER, CALL]
    output = items[2]
    assert output["type"] == "function_call_output" and output["call_id"] == "call_1"
    assert "interrupted" in output["output"] and "may or may not have run" in output["output"]
    assert items[3] == {"role": "user", "content": "Where was I?"}
    session.close()
    run(FileSession("quest-1", tmp_path).add_items(numbered(1)))
    assert sum("interrupted" in line for line in log.read_text().splitlines()) == 2, (
        "one repair marker and one output: a second resume adds nothing")


def test_a_call_waiting_for_its_output_in_this_process_is_not_repaired(session):
    """The SDK may save a call before its output: the writer is kept while a call is
    open, so its output follows it, with nothing made up between them."""
    run(session.add_items([USER, CALL]))
    run(session.add_items([OUTPUT, ANSWER]))
    assert run(session.get_items()) == [USER, CALL, OUTPUT, ANSWER]


# --- reading from the end --------------------------------------------------------------


def test_a_torn_last_line_is_not_an_item(session, tmp_path):
    """A crash in the middle of a write leaves half a line: get_items(limit) skips it, as
    a whole read does."""
    run(session.add_items(numbered(5)))
    with open(tmp_path / "quest-1.jsonl", "ab") as file:
        file.write(b'{"$item": {"role": "user", "cont')
    assert run(session.get_items(limit=2)) == numbered(5)[-2:]
    assert run(session.get_items()) == numbered(5)


def test_a_limit_after_a_pop_still_counts_only_the_items_shown(session):
    """An undo marker near the end changes which items are shown: the newest n are the
    newest n still shown."""
    run(session.add_items(numbered(6)))
    run(session.pop_item())
    run(session.pop_item())
    assert run(session.get_items(limit=3)) == numbered(6)[1:4]


def test_a_limit_reads_the_end_of_the_log_not_all_of_it(session, tmp_path, monkeypatch):
    """get_items(limit=20) on a long session reads a window at the end: a damaged line
    far before it is never read (load() would name it)."""
    run(session.add_items(numbered(2000)))
    path = tmp_path / "quest-1.jsonl"
    data = path.read_bytes()
    path.write_bytes(b"this line is damaged\n" + data)
    assert run(session.get_items(limit=20)) == numbered(2000)[-20:]
    with pytest.raises(ValueError, match="line 1"):
        run(session.get_items())


# --- the SDK itself --------------------------------------------------------------------


def day(folder: Path, *texts: str) -> dict:
    """One day of the quest, run by the SDK's Runner in a process of its own."""
    agents = pytest.importorskip(
        "agents", reason="the Agents SDK is not installed: pip install -e '.[agents]'")
    del agents
    done = subprocess.run([sys.executable, str(HERE / "quest_day.py"), str(folder), *texts],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_an_sdk_runner_resumes_the_quest_in_a_new_process(tmp_path):
    """Day 1: the Runner buys a rope through the tool, with FileSession as its session.
    Day 2, another process: its first request carries all of day 1, call and output
    included, and the log holds items as item lines, every call answered."""
    first = day(tmp_path, "Buy a rope.")
    assert first["outputs"] == ["So far: You bought a rope."]
    second = day(tmp_path, "What did we buy?")
    request = second["requests"][0]
    texts = [message.get("content") for message in request]
    assert "Buy a rope." in texts and "You bought a rope." in texts, request
    assert texts[-1] == "What did we buy?", request
    assert second["outputs"] == ["So far: You bought a rope."]
    lines = [json.loads(line) for line in (tmp_path / "quest-1.jsonl").read_text().splitlines()]
    assert all(set(line) == {"$item"} for line in lines), lines
    kinds = [line["$item"].get("type", "message") for line in lines]
    assert kinds.count("function_call") == kinds.count("function_call_output") == 1


def sdk_agent(reply: str):
    """An SDK Agent on the scripted model (in this process), and the model."""
    agents = pytest.importorskip(
        "agents", reason="the Agents SDK is not installed: pip install -e '.[agents]'")
    import httpx
    import openai

    from sessionlab.scripted import ScriptedModel, say

    agents.set_tracing_disabled(True)
    model = ScriptedModel(lambda request: say(reply))
    client = openai.AsyncOpenAI(
        base_url=model.base_url, api_key="scripted", max_retries=0,
        http_client=httpx.AsyncClient(
            transport=httpx.MockTransport(model.router().handler)))
    agent = agents.Agent(name="adventurer", instructions="You are an adventurer.",
                         model=agents.OpenAIChatCompletionsModel(model.model, client))
    return agents, agent, model


def test_a_runs_settings_are_laid_over_the_sessions(tmp_path):
    """Settings given as a dict become the SDK's SessionSettings, so that a run's
    RunConfig(session_settings=...) can override them: the run's limit decides how
    much history the model is sent."""
    agents, agent, model = sdk_agent("Noted.")
    session = FileSession("quest-1", tmp_path, session_settings={"limit": 4})
    assert isinstance(session.session_settings, agents.SessionSettings)
    assert FileSession("quest-2", tmp_path).session_settings == agents.SessionSettings()
    run(session.add_items(numbered(6)))
    config = agents.RunConfig(session_settings=agents.SessionSettings(limit=2))
    run(agents.Runner.run(agent, "And now?", session=session, run_config=config))
    sent = [message["content"] for message in model.messages_sent[0]
            if message["role"] == "user"]
    assert sent == ["message 4", "message 5", "And now?"], sent
    session.close()


def test_the_session_satisfies_the_sdks_protocol_check(tmp_path):
    """The SDK's own runtime check of its Session protocol accepts FileSession."""
    memory = pytest.importorskip(
        "agents.memory", reason="the Agents SDK is not installed: pip install -e '.[agents]'")
    assert isinstance(FileSession("quest-1", tmp_path), memory.Session)


def test_an_item_of_a_kind_the_store_does_not_know_is_kept_as_it_is(session, tmp_path):
    """A framework's own record (the SDK's EncryptedSession stores envelopes with no
    type and no role) is stored and read back unchanged, in its place."""
    envelope = {"__enc__": 1, "v": 1, "kid": "hkdf-sha256", "payload": "c2VjcmV0"}
    run(session.add_items([USER, envelope]))
    assert run(session.get_items()) == [USER, envelope]
    assert run(session.get_items(limit=1)) == [envelope]
    assert run(session.pop_item()) == envelope


def test_the_sdks_encrypted_session_wraps_a_file_session(tmp_path):
    """EncryptedSession over FileSession: the log holds only envelopes (no word of the
    conversation), and a new object with the key reads the items back."""
    memory = pytest.importorskip(
        "agents.extensions.memory", reason="the Agents SDK is not installed: pip install "
        "-e '.[agents]'")
    key = "a-key-of-the-quest-kept-elsewhere"

    def encrypted() -> Any:
        return memory.EncryptedSession("quest-1", FileSession("quest-1", tmp_path), key)

    run(encrypted().add_items(TURN))

    log = (tmp_path / "quest-1.jsonl").read_text(encoding="utf-8")
    assert "rope" not in log and all(
        "__enc__" in json.loads(line)["$item"] for line in log.splitlines()), log
    assert run(encrypted().get_items()) == TURN
