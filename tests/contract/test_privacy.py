"""Lesson 09's privacy operations, the same on both stores of the last lesson: delete,
expire, erase (a tombstone, the quotes gone) and blob collection, on its file store and
on its PostgreSQL store (pgprivacy.py), as test_...[jsonl] and test_...[postgres].

Where another writer matters, it is a real other process (writer.py, next to this
file), holding the session, or stopped between its blob and its line.
"""

import sys
import threading
import time
from pathlib import Path

import pytest

from sessionlab.scripted import ScriptedModel, call, say, use
from sessionlab.testing import Peer, raises
from sessionlab.town import Town

# The campaign (tests/conftest.py): both stores' privacy, with real processes and PostgreSQL.
pytestmark = pytest.mark.campaign

WRITER = Path(__file__).with_name("writer.py")
HANG = 30
SECRET = "My sister Ilse lives at 12 Elm Street, by the mill."
DIARY = "Ilse's diary: " + "the cave is cold and the mill is near. " * 150    # a blob
DAY_1 = [use(call("talk_to", npc="elder"), call("buy", item="rope")),
         say("The elder wants a torch; you have a rope.")]


class Other(Peer):
    """writer.py in another process, on the store under test."""

    def __init__(self, store, session_id, action):
        kind = "jsonl" if hasattr(store, "folder") else "postgres"
        super().__init__([sys.executable, str(WRITER), kind, store.location(),
                          session_id, action], hang=HANG)


def play(store, session_id, text, script):
    model = ScriptedModel(list(script))
    with store.log(session_id) as log:
        agent = store.module.Agent(model.client(), model=model.model, tools=Town(),
                                   session=log)
        agent.run(text)
        return agent.messages


def load(store, session_id):
    with store.log(session_id) as log:
        return log.load()


def blob_name(text):
    import hashlib
    return hashlib.sha256(text.encode()).hexdigest()


def test_delete_removes_the_session_and_only_the_blobs_no_one_else_uses(final_store):
    """delete takes the session's messages and the blobs only it used; a fork made
    before stays whole, with the blob it shares; deleting again deletes nothing."""
    store = final_store
    play(store, "quest-1", DIARY, [say("Noted.")])
    play(store, "quest-1", SECRET * 100, [say("Noted again.")])    # a blob of its own
    store.fork("quest-1", "quest-2", upto=2)                        # shares DIARY's
    assert store.delete("quest-1") is True, "deleting a session says it deleted"
    assert load(store, "quest-1") == [] and not store.exists("quest-1"), (
        "the deleted session should be gone")
    assert store.blobs() == {blob_name(DIARY)}, (
        "the blob only quest-1 used should be gone, the one its fork uses kept; "
        f"blobs left: {store.blobs()}")
    assert [m["content"] for m in load(store, "quest-2")] == [DIARY, "Noted."], (
        "the fork is a session of its own: it stays whole")
    assert store.delete("quest-1") is False, "deleting twice deletes nothing"


def test_delete_and_expire_leave_a_session_another_process_is_writing(final_store):
    """A writer in another process holds quest-1: delete raises SessionBusy and
    deletes nothing; expire deletes the idle sessions and names quest-1 as busy; once
    the writer is gone, expire deletes it too."""
    store = final_store
    play(store, "quest-2", "Hello.", [say("Hello.")])
    holder = Other(store, "quest-1", "hold")
    try:
        holder.expect("holding")
        with raises(store.module.SessionBusy, "another process writes quest-1"):
            store.delete("quest-1")
        assert len(load(store, "quest-1")) == 1, "a refused delete deletes nothing"
        later = time.time() + 40 * 86400
        assert store.expire(now=later) == (["quest-2"], ["quest-1"]), (
            "expire should delete the idle session and skip the one being written")
        holder.go()
        holder.expect("released")
    finally:
        holder.stop()
    assert store.expire(now=later) == (["quest-1"], []), (
        "with its writer gone, the session expires like any other")
    assert not store.exists("quest-1") and not store.exists("quest-2")


def test_erase_leaves_a_tombstone_and_no_stored_byte_holds_the_words(final_store):
    """The agent erases the user's message: its place holds a tombstone with the same
    role, the model's reply quoting it has the quote replaced, the large content the
    user pasted next is erased too with its blob, nothing stored (rows, lines, jsonb,
    blobs) holds the words, a new agent sends none of them, and erasing twice changes
    nothing."""
    store = final_store
    play(store, "quest-1", SECRET, [say(f"You said: {SECRET} I will remember.")])
    model = ScriptedModel([say("A long diary."), say("Forgotten.")])
    with store.log("quest-1") as log:
        agent = store.module.Agent(model.client(), model=model.model, tools=Town(),
                                   session=log)
        agent.run(DIARY)
        tombstone = agent.erase(0)
        agent.erase(2)
        assert log.erase(log.index_of(0)) is False, "erasing twice changes nothing"
        agent.run("What did I say?")
    erased = store.module.ERASED
    assert tombstone == {"role": "user", "content": erased}, tombstone
    assert store.holding(SECRET) == [] and store.holding("the cave is cold") == [], (
        f"no stored byte should hold the erased words: {store.holding(SECRET)} "
        f"{store.holding('the cave is cold')}")
    assert blob_name(DIARY) not in store.blobs(), "the erased content's blob goes"
    shown = [m["content"] for m in load(store, "quest-1")]
    assert shown[:4] == [erased, f"You said: {erased} I will remember.", erased,
                         "A long diary."], shown
    assert SECRET not in str(model.requests[-1]["messages"]), (
        "the request after the erase should not carry the words")


def test_an_erase_is_no_use_of_the_session(final_store):
    """expire goes by the last time a message was written: an erase since does not
    keep a session nobody has used for longer than the retention."""
    store = final_store
    play(store, "quest-1", SECRET, [say("Noted.")])
    store.age("quest-1", 40)
    with store.log("quest-1") as log:
        assert log.erase(0) is True
    assert store.expire() == (["quest-1"], []), (
        "the session was last used 40 days ago: the erase should not count as a use")


def test_collect_removes_what_nothing_refers_to_never_what_a_writer_is_storing(
        final_store):
    """The map's blob is stored already, and nothing refers to it (a session that
    pasted it was deleted). A writer in another process pastes the map again: it finds
    the blob there, and has not written its line (or row) yet when blobs are collected.
    The collection leaves that blob (the file store: the writer pinned it; the
    database: it waits for the writer's transaction), and the session loads whole
    afterwards. A blob nothing refers to goes."""
    store = final_store
    with store.log("quest-9") as log:
        orphan = log.store_blob(("left over " * 1000).encode())
        log.store_blob(("The elder's map, copied out. " * 1000).encode())
    writer = Other(store, "quest-1", "blob")
    outcome = {}
    try:
        writer.expect("inside")
        collecting = threading.Thread(
            target=lambda: outcome.setdefault("removed", store.collect()), daemon=True)
        collecting.start()
        collecting.join(1)      # the file store's returns; the database's waits
        writer.go()
        writer.expect("stored")
        collecting.join(HANG)
    finally:
        writer.stop()
    assert not collecting.is_alive(), "the collection should have ended"
    assert outcome["removed"] == [orphan], (
        f"only the blob nothing refers to should go; removed: {outcome['removed']}")
    contents = [m["content"] for m in load(store, "quest-1")]
    assert contents[1] == "The elder's map, copied out. " * 1000, (
        "the writer's large message should load whole: its blob was not collected")
    assert store.collect() == [], "a second collection finds nothing more to remove"
