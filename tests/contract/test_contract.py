"""What every session store must do, whatever holds the session: lesson 07's files and
lesson 11's PostgreSQL alike (see conftest.py). A test here states the contract once; a
store that breaks it fails under its own name: test_...[jsonl] or test_...[postgres].
"""

import json

import pytest

from sessionlab.scripted import ScriptedModel, call, say, use
from sessionlab.testing import raises
from sessionlab.town import Town

# The campaign (tests/conftest.py): both stores, with real processes and PostgreSQL.
pytestmark = pytest.mark.campaign

DAY_1 = [use(call("talk_to", npc="elder"), call("buy", item="rope")),
         say("The elder wants a torch; you have a rope.")]
ODD = [
    {"role": "user", "content": "Café at dawn?\nYes: 夜明け, line two \u2028 still one."},
    {"role": "assistant", "content": "",
     "tool_calls": [{"id": "call_1", "type": "function",
                     "function": {"name": "buy",
                                  "arguments": '{"item": "rope",  "item": "torch"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "bought \u0000 a torch"},
]


def agent_on(store, session_id="quest-1", script=()):
    """An agent on the session, as a new process (or request) would make it."""
    model = ScriptedModel(list(script))
    log = store.log(session_id)
    agent = store.module.Agent(model.client(), model=model.model, tools=Town(),
                               session=log)
    return agent, model, log


def play(store, text, script, session_id="quest-1"):
    agent, model, log = agent_on(store, session_id, script)
    with log:
        agent.run(text)
    return agent.messages


def load(store, session_id="quest-1"):
    with store.log(session_id) as log:
        return log.load()


def test_messages_come_back_exactly_as_appended(store):
    """Text beyond ASCII, newlines, U+2028, NUL, duplicate keys inside arguments and
    the messages' own key order: load() gives every message back as appended."""
    with store.log("quest-1") as log:
        for message in ODD:
            log.append(message)
    loaded = load(store)
    assert [json.dumps(m, ensure_ascii=False) for m in loaded] == \
        [json.dumps(m, ensure_ascii=False) for m in ODD], (
            f"load() should give back exactly what was appended; got {loaded}")


def test_an_unknown_session_loads_empty_and_is_not_created(store):
    """Loading a session nobody wrote gives [] and creates nothing."""
    assert load(store, "nobody-1") == [], "an unknown session should load as []"
    assert not store.exists("nobody-1"), "loading must not create the session"


def test_day_two_starts_from_day_one(store):
    """A new agent on the same session sends all of day 1 with its first request."""
    day_1 = play(store, "Ask the elder and buy a rope.", DAY_1)
    agent, model, log = agent_on(store, script=[say("Dawn comes.")])
    with log:
        agent.run("Wait for dawn.")
    sent = model.requests[0]["messages"]
    assert sent[:len(day_1)] == day_1, "day 2's first request should carry day 1"


def test_invalid_messages_and_ids_are_refused_and_nothing_is_stored(store):
    """One validator for every store: a message without a role, or a session id that
    is a path, is refused before anything is stored."""
    with raises(store.module.InvalidSessionId, "'../x' is a path, not a session id"):
        store.log("../x")
    with store.log("quest-1") as log:
        with raises(store.module.InvalidMessage, "a message needs a role"):
            log.append({"content": "no role"})
    assert not store.exists("quest-1"), "a refused first message must create nothing"


def test_a_second_writer_is_refused_while_the_first_holds(store):
    """One writer at a time: while one writer holds the session, another one's
    resume raises SessionBusy; once it closes, the next writer goes on."""
    with store.log("quest-1") as first:
        first.append({"role": "user", "content": "first"})
        second = store.log("quest-1")
        with raises(store.module.SessionBusy, "the first writer still holds it"):
            second.open_for_append()
        second.close()
    with store.log("quest-1") as third:
        assert len(third.open_for_append()) == 1, "the next writer goes on"


def test_a_writer_opened_right_after_another_closes_is_never_busy(store):
    """close() lets go of the session before it returns: a writer opened the next
    moment, as the next request of a service would, never finds it busy. (PostgreSQL
    lets go of a closed connection's advisory lock only once its server process has
    exited: on a loaded machine that moment is long enough to be seen.)"""
    for turn in range(30):
        with store.log("quest-1") as log:
            log.open_for_append()
            log.append({"role": "user", "content": f"turn {turn}"})
    assert len(load(store)) == 30, "every turn's writer should have appended its line"


def test_a_call_without_its_result_is_repaired_once(store):
    """A crash between a tool call and its result: resume answers the call with a
    result saying it was interrupted, once, and the model takes the request."""
    with store.log("quest-1") as log:
        log.append(ODD[0])
        log.append(ODD[1])
    messages = play(store, "Did it work?", [say("I will check first.")])
    results = [m for m in messages if m["role"] == "tool"]
    assert len(results) == 1 and "interrupted" in results[0]["content"], (
        f"call_1 should get one 'interrupted' result; tool messages: {results}")
    assert load(store) == messages, "a second resume repairs nothing more"


def test_large_content_comes_back_byte_for_byte(store):
    """Content past the blob threshold is stored beside the entries and comes back
    byte for byte, line ends and all."""
    pasted = "The charter, article by article.\r\n" * 3000
    with store.log("quest-1") as log:
        log.append({"role": "user", "content": pasted})
    assert load(store)[0]["content"] == pasted, "the pasted text should come back whole"


def test_undo_takes_back_a_whole_turn_for_every_later_reader(store):
    """undo() takes back the last turn, tool calls and results together; a new agent
    sees the session without it; undoing more turns than exist is refused."""
    day_1 = play(store, "Ask the elder and buy a rope.", DAY_1)
    agent, _, log = agent_on(store, script=[say("The guard is asleep.")])
    with log:
        agent.run("Ask the guard.")
        agent.undo()
        with raises(store.module.UndoError, "only one turn is left"):
            agent.undo(turns=2)
    assert load(store) == day_1, "a new reader should see day 1 without the undone turn"


def test_an_agent_never_undoes_a_turn_another_writer_added_since(store):
    """An agent played a turn and its log was closed; another agent then played a turn
    of its own. The first agent's undo is refused (UndoError), and both turns stay, in
    the store and in the first agent's memory: its last turn is no longer the log's."""
    first, _, log = agent_on(store, script=[say("The elder nods.")])
    with log:
        first.run("Thank the elder.")
    mine = list(first.messages)
    theirs = play(store, "Wait for dawn.", [say("Dawn comes.")])
    try:
        with raises(store.module.UndoError, "the log's last turn is another agent's"):
            first.undo()
    finally:
        log.close()
    assert first.messages == mine, "the refused undo should leave the agent as it was"
    assert theirs[:len(mine)] == mine and load(store) == theirs, "both turns should stay"


def test_a_fork_copies_history_records_lineage_and_stays_apart(store):
    """fork(upto=k) starts a session with the first k messages shown (undone ones not
    counted), records its parent, and the two sessions never share a later append."""
    day_1 = play(store, "Ask the elder and buy a rope.", DAY_1)
    agent, _, log = agent_on(store, script=[say("The guard is asleep.")])
    with log:
        agent.run("Ask the guard.")
        agent.undo()
    store.fork("quest-1", "quest-2", upto=3)
    assert load(store, "quest-2") == day_1[:3], "the fork holds the first 3 messages"
    assert store.parent("quest-2") == "quest-1", "the fork names its parent"
    store.fork("quest-1", "quest-3")
    assert load(store, "quest-3") == day_1, "a whole fork inherits the source's undo"
    with store.log("quest-2") as fork:
        fork.append({"role": "user", "content": "only in the fork"})
    assert load(store) == day_1, "appending to the fork must leave the source alone"


def test_forks_onto_a_taken_id_or_from_nowhere_are_refused(store):
    """A fork onto an existing session raises SessionExists; from a missing one,
    SessionNotFound; from more messages than shown, ValueError; none changes a thing."""
    play(store, "Ask the elder and buy a rope.", DAY_1)
    play(store, "Hello.", [say("Hello.")], session_id="quest-2")
    before = load(store, "quest-2")
    with raises(store.module.SessionExists, "quest-2 exists"):
        store.fork("quest-1", "quest-2")
    with raises(store.module.SessionNotFound, "nowhere-1 does not exist"):
        store.fork("nowhere-1", "quest-3")
    with raises(ValueError, "quest-1 shows 5 messages, not 50"):
        store.fork("quest-1", "quest-3", upto=50)
    assert load(store, "quest-2") == before and not store.exists("quest-3"), (
        "a refused fork must change nothing")


def test_an_entry_too_large_for_a_row_is_refused_alike_and_the_writer_goes_on(
        final_store):
    """A text part (not the message's content as one string, which goes to a blob) so
    large that the entry's line is over MAX_LINE_BYTES, more than PostgreSQL's jsonb
    holds: both stores refuse it with MessageTooLarge before anything is stored, and
    the writer is not stopped: its next append lands, and the session loads without
    the refused message."""
    store = final_store
    limit = store.module.MAX_LINE_BYTES
    huge = {"role": "user", "content": [{"type": "text", "text": "a" * limit}]}
    with store.log("quest-1") as log:
        log.append({"role": "user", "content": "first"})
        with raises(store.module.MessageTooLarge, "its line would be over the limit",
                    match=str(limit)):
            log.append(huge)
        del huge
        log.append({"role": "assistant", "content": "still writing"})
    assert [m["content"] for m in load(store)] == ["first", "still writing"], (
        "the refused message should not be stored, and the writer should go on")
