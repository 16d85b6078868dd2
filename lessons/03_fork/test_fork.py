"""Lesson 03: fork a session.

Run: pytest lessons/03_fork            (your code)
     pytest lessons/03_fork --solution (the reference)
"""

import json
import os
from datetime import datetime

import pytest

from sessionlab.scripted import ScriptedModel, call, say, use
from sessionlab.town import Town
from sessionlab.testing import raises


def play(lesson, sessions, session_id, script, text, town):
    model = ScriptedModel(list(script))
    with lesson.SessionLog(sessions, session_id) as log:
        agent = lesson.Agent(model.client(), model=model.model, tools=town, session=log)
        agent.run(text)
    return agent, model


@pytest.fixture
def day_one(lesson, sessions, town):
    """Day 1: the elder is asked about the cave and a rope is bought (10 gold -> 6)."""
    agent, _ = play(lesson, sessions, "quest-1",
                    [use(call("talk_to", npc="elder"), call("buy", item="rope")), say("Rope bought.")],
                    "Ask the elder about the cave and buy a rope.", town)
    return agent.messages


def snapshot(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.key
@pytest.mark.task("03.1")
def test_a_fork_starts_with_the_same_history(lesson, sessions, town, day_one):
    """A fork starts with the whole history of its parent: its first request carries
    every message of the original."""
    lesson.fork(sessions, "quest-1", "what-if")

    agent, model = play(lesson, sessions, "what-if", [say("The guard opens at dawn.")],
                        "What about the guard?", town)

    assert model.requests[0]["messages"][:-1] == day_one, (
        "the fork's first request should carry all of quest-1's history")
    assert agent.messages[:len(day_one)] == day_one


@pytest.mark.task("03.1")
def test_a_fork_can_keep_only_the_first_k_messages(lesson, sessions, town, day_one):
    """fork(upto=k) keeps only the first k messages, for a 'what if' that branches
    earlier in the conversation."""
    lesson.fork(sessions, "quest-1", "ask-again", upto=1)

    with lesson.SessionLog(sessions, "ask-again") as log:
        history = log.load()
    assert history == day_one[:1], f"upto=1 keeps only the first message; the fork holds {history}"


@pytest.mark.key
@pytest.mark.task("03.1")
def test_appending_to_either_session_leaves_the_other_byte_identical(lesson, sessions, day_one):
    """After a fork, appending to either session leaves the other byte for byte as it
    was: the fork is a copy, never a link."""
    lesson.fork(sessions, "quest-1", "what-if")
    original = (sessions / "quest-1.jsonl").read_bytes()
    forked = (sessions / "what-if.jsonl").read_bytes()
    assert forked == original, "right after a full fork, the two logs hold the same bytes"

    with lesson.SessionLog(sessions, "what-if") as log:
        log.append({"role": "user", "content": "Only in the fork."})
    assert (sessions / "quest-1.jsonl").read_bytes() == original, (
        "appending to the fork changed the original: the fork must be a copy, not a (hard or "
        "symbolic) link to the same file")

    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": "Only in the original."})
    assert b"Only in the original" not in (sessions / "what-if.jsonl").read_bytes(), (
        "appending to the original changed the fork")


@pytest.mark.task("03.1")
def test_the_fork_is_a_file_of_its_own(lesson, sessions, day_one):
    """The fork's log is a file of its own, neither a symbolic nor a hard link to the
    original."""
    lesson.fork(sessions, "quest-1", "what-if")

    fork_path = sessions / "what-if.jsonl"
    assert not fork_path.is_symlink(), "the fork is a symbolic link; it must be a file of its own"
    assert os.stat(fork_path).st_nlink == 1 and os.stat(sessions / "quest-1.jsonl").st_nlink == 1, (
        "the fork shares its inode with the original (a hard link); it must be a copy")


@pytest.mark.key
@pytest.mark.task("03.1")
def test_forking_onto_an_existing_session_is_refused_and_overwrites_nothing(lesson, sessions, town, day_one):
    """Forking onto an id that already has a log is refused and leaves every file as it
    was: a fork never overwrites a session."""
    play(lesson, sessions, "other", [say("Hello.")], "Hi.", town)
    before = snapshot(sessions)

    with raises(lesson.SessionExists, "forking onto 'other', which already has a log, "
                "was allowed: check that the new id is free before writing anything"):
        lesson.fork(sessions, "quest-1", "other")

    assert snapshot(sessions) == before, "a refused fork must leave every file as it was, and create none"


@pytest.mark.key
@pytest.mark.task("03.1")
def test_forking_from_a_missing_session_is_refused_and_creates_nothing(lesson, sessions):
    """Forking from an id that has no log is refused and creates no file."""
    with raises(lesson.SessionNotFound,
                "forking a session that has no log was allowed: a fork of nothing "
                "is a mistake to report, not an empty session"):
        lesson.fork(sessions, "no-such-quest", "what-if")

    assert list(sessions.iterdir()) == [], "a refused fork must not create any file"


@pytest.mark.task("03.1")
def test_forking_more_messages_than_exist_is_refused(lesson, sessions, day_one):
    """Asking for more messages than the parent holds is refused rather than silently
    copying fewer."""
    before = snapshot(sessions)

    with raises(ValueError,
                f"upto={len(day_one) + 1} asks for more messages than quest-1 holds "
                f"({len(day_one)}), and the fork was allowed: refuse it"):
        lesson.fork(sessions, "quest-1", "what-if", upto=len(day_one) + 1)

    assert snapshot(sessions) == before, "a refused fork must not create any file"


@pytest.mark.task("03.1")
def test_fork_checks_both_session_ids(lesson, sessions, day_one):
    """Both the parent's and the new session's ids are checked like any session id, so a
    fork cannot reach outside the sessions folder."""
    with raises(lesson.InvalidSessionId, "fork accepted the new id '../escaped'"):
        lesson.fork(sessions, "quest-1", "../escaped")
    with raises(lesson.InvalidSessionId, "fork accepted the parent id '../quest-1'"):
        lesson.fork(sessions, "../quest-1", "what-if")
    assert not (sessions.parent / "escaped.jsonl").exists()


@pytest.mark.key
@pytest.mark.task("03.2")
def test_the_meta_file_records_where_the_fork_came_from(lesson, sessions, day_one):
    """<id>.meta.json records the parent session and how many messages were copied
    (forked_at), the fork's lineage."""
    lesson.fork(sessions, "quest-1", "what-if", upto=3)

    meta = json.loads((sessions / "what-if.meta.json").read_text(encoding="utf-8"))
    assert meta.get("format") == 1 and meta.get("id") == "what-if", f"meta: {meta}"
    assert meta.get("parent") == "quest-1", f"the meta file should name the parent session: {meta}"
    assert meta.get("forked_at") == 3, f"forked_at is the number of messages copied (3): {meta}"
    assert datetime.fromisoformat(meta["created"]).tzinfo is not None, (
        f"created should be an ISO 8601 time with its time zone: {meta.get('created')!r}")


@pytest.mark.task("03.2")
def test_the_meta_file_is_written_whole_through_a_rename(lesson, sessions, day_one, monkeypatch):
    """The meta file is written to a temporary file and renamed into place, so a crash
    or a reader never sees half of it, and no temporary file is left."""
    renamed = []
    for name in ("replace", "rename"):
        real = getattr(os, name)
        monkeypatch.setattr(lesson.os, name, lambda src, dst, _real=real: (renamed.append(str(dst)), _real(src, dst))[1])

    lesson.fork(sessions, "quest-1", "what-if")

    assert str(sessions / "what-if.meta.json") in renamed, (
        "write the meta file to a temporary file and rename it into place (write_whole does), so "
        "that a crash or a reader never sees half of it")
    assert sorted(p.name for p in sessions.iterdir()) == ["quest-1.jsonl", "what-if.jsonl", "what-if.meta.json"], (
        f"no temporary files should be left behind: {sorted(p.name for p in sessions.iterdir())}")


@pytest.mark.task("03.1")
def test_a_fork_copies_history_not_the_world(lesson, sessions, town, day_one):
    """A fork copies the conversation, not the world: gold spent on day 1 stays spent in
    the fork, and the fork's purchases stay in the fork's log."""
    assert town.gold == 6 and town.inventory == ["rope"], "day 1 bought a rope for 4 of the 10 gold"

    lesson.fork(sessions, "quest-1", "what-if")
    agent, _ = play(lesson, sessions, "what-if", [use(call("buy", item="torch")), say("Torch bought.")],
                    "Buy a torch too.", town)

    assert town.gold == 3, (
        "in the fork the rope is still paid for: the town is the world, not the history, so "
        f"loading a fork must not replay or undo its tool calls. Gold is {town.gold}, expected 6 - 3 = 3")
    assert town.inventory == ["rope", "torch"]
    assert b"bought a torch" not in (sessions / "quest-1.jsonl").read_bytes(), "the fork's purchase belongs to the fork's log only"


@pytest.mark.task("03.1")
@pytest.mark.task("03.2")
def test_a_durable_fork_is_synced_and_a_plain_one_is_not(lesson, sessions, day_one, monkeypatch):
    """fork(durable=True) syncs the new log, its meta file and their folder before
    returning; a plain fork syncs nothing, like a plain append."""
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(lesson.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])

    lesson.fork(sessions, "quest-1", "quick")
    assert synced == [], (
        "a fork is as durable as an append: without durable=True it should not fsync (pass "
        "durable=durable on to publish_new and write_whole)")

    lesson.fork(sessions, "quest-1", "safe", durable=True)
    assert len(synced) >= 3, (
        "fork(..., durable=True) should sync the new log, the meta file and their folder before "
        f"returning; os.fsync was called {len(synced)} time(s)")
