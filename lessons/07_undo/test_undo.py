"""Lesson 07: undo on an append-only log.

Run: pytest lessons/07_undo            (your code)
     pytest lessons/07_undo --solution (the reference)
"""

import errno
import hashlib
import json
import os
import re
import sys
from datetime import datetime, timezone

import pytest

from sessionlab.scripted import ScriptedModel, call, say, use
from sessionlab.town import Town
from sessionlab.testing import (another_writer_takes, check_time, fail_in,
                                local_clock_ahead_of_utc, open_descriptors, raises,
                                wait_past, with_file_size_limit)

# Turn A:
# the user, one reply calling two tools, their two results, the answer (5 messages).
TURN_A = (
    "Ask the elder about the cave and buy a rope.",
    [
        use(call("talk_to", npc="elder"), call("buy", item="rope")),
        say("Rope bought; the elder wants a torch."),
    ],
)
# Turn B: the user, two rounds of one tool call and its result, the answer (6 messages).
TURN_B = (
    "Buy a torch, then ask the guard.",
    [
        use(call("buy", item="torch")),
        use(call("talk_to", npc="guard")),
        say("The guard opens at dawn."),
    ],
)
TURN_C = ("Thank the elder.", [say("The elder nods.")])
TURN_D = ("Wait for dawn.", [say("Dawn comes.")])


def lines_of(path):
    return (
        [json.loads(line) for line in path.read_bytes().split(b"\n") if line]
        if path.exists()
        else []
    )


def markers_in(path):
    return [line for line in lines_of(path) if "$marker" in line]


def open_agent(lesson, sessions, script=(), session_id="quest-1", town=None):
    """A new agent on the session, as a new process would make it,
    with its own scripted model."""
    model = ScriptedModel(list(script))
    log = lesson.SessionLog(sessions, session_id)
    try:
        agent = lesson.Agent(
            model.client(), model=model.model, tools=town or Town(), session=log
        )
    except BaseException:
        log.close()     # let go of the session even when the agent could not start
        raise
    # An agent that resumed a history holds what task 07.1's replay made of the log
    run, undo, undone = agent.run, agent.undo, [True] if agent.messages else []

    def run_then_check_the_log(user_text):
        path = sessions / f"{session_id}.jsonl"
        waiting, start = list(agent.pending), len(agent.messages)
        size = path.stat().st_size if path.exists() else 0
        try:
            answer = run(user_text)
        except Exception as error:
            check_no_call_of_the_run_repaired(agent, path, size, start)
            # A disk's failure, or a task not written yet, is no mistake of 07.2's
            if not undone and not isinstance(error, (OSError, NotImplementedError)):
                blame_the_buffer(agent, error, path)
            raise
        check_no_call_of_the_run_repaired(agent, path, size, start)
        if not undone:
            check_written(agent, path)
        else:
            check_run_appended(agent, path, size, waiting + agent.messages[start:])
        return answer

    def undo_then_stop_checking(*arguments, **options):
        undone.append(True)     # what the log holds is then task 07.3's to say
        return undo(*arguments, **options)

    agent.run, agent.undo = run_then_check_the_log, undo_then_stop_checking
    return agent, model, log


def blame_the_buffer(agent, error, path):
    """run() failed with `error`, which is no disk's: when it came out of record() or
    flush() (task 07.2's code), or the conversation and the log disagree (run() flushes
    when it fails too), the failure is task 07.2's, whichever task the test is about."""
    frames, traceback = [], error.__traceback__
    while traceback is not None:
        frames.append(traceback.tb_frame.f_code)
        traceback = traceback.tb_next
    module = os.path.basename(frames[-1].co_filename) if frames else ""
    if module == "agent.py" and frames[-1].co_name in ("record", "flush"):
        fail_in("07.2", (
            f"run() failed with {type(error).__name__} ({error}), raised inside "
            f"{frames[-1].co_name}(): recording an ordinary message, or writing what "
            "waits in the pending buffer, should not fail"))
    check_written(agent, path)


def check_no_call_of_the_run_repaired(agent, path, size, start):
    """A run never lets go of its log half-way (task 07.2): the agent's log stays the
    session's writer from the flush that writes a tool call until the call's result is
    written. A writer that takes the log over repairs it (lesson 04), answering every
    call it finds open as interrupted: a repair during the run that answers a call the
    model asked for in this very run means the log was closed, and taken over again,
    between the call's write and its result's."""
    try:
        added = path.read_bytes()[size:].split(b"\n") if path.exists() else []
    except OSError:
        return
    asked = {call["id"] for message in agent.messages[start:]
             for call in message.get("tool_calls") or ()
             if isinstance(call, dict) and isinstance(call.get("id"), str)}
    for line in added:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict) or entry.get("$marker") != "repair":
            continue
        named = entry.get("interrupted")
        cut = ([i for i in named if isinstance(i, str) and i in asked]
               if isinstance(named, list) else [])
        if cut:
            fail_in("07.2", (
                f"during run(), a repair marker answered the call(s) {cut} as "
                "interrupted, calls the model asked for in this very run: the log was "
                "closed after a flush and taken over again by the next write, whose "
                "repair found them open. The agent's log should stay the session's "
                "writer through the run (a flush writes, it does not let go), so "
                "that a call's own result answers it, once"))


def check_written(agent, path):
    """When run() has returned, the log holds every message the agent recorded, once
    each, in order (task 07.2): checked for an agent that began with no history, until
    its first undo, while the log holds no marker and no blob, so that its lines are
    the messages themselves, whatever tasks 07.1 and 07.3 do."""
    entries = lines_of(path)
    if any("$marker" in entry or isinstance(entry.get("content"), dict)
           for entry in entries):
        return
    if entries != agent.messages:
        fail_in("07.2", (
            "run() has returned, so every message the agent recorded should be in the "
            f"log, once each, in the order it was recorded: "
            f"{[m.get('role') for m in agent.messages]}; the log holds "
            f"{[m.get('role') for m in entries]}"))
    known = getattr(agent.session, "shown", None)
    if isinstance(known, list) and len(known) != len(entries):
        fail_in("07.2", (
            f"run() has returned and the log holds its {len(entries)} messages, but "
            f"the writer's own record of what the log shows counts {len(known)}: a "
            "message reaches the log through the log's append, which keeps that record "
            "(an undo goes by it), never past it"))


def check_run_appended(agent, path, size, recorded):
    """When run() has returned, after an undo or a resume too, the lines it added to the
    log are the messages that waited in the buffer when it began, then those it
    recorded, once each, in order (task 07.2): the flush writes what waits in the
    buffer, whatever the conversation held before. Checked while those lines hold no
    marker and no blob reference, so that they are the messages themselves."""
    try:
        added = [json.loads(line) for line in path.read_bytes()[size:].split(b"\n")
                 if line.strip()] if path.exists() else []
    except ValueError:
        return      # no whole lines of messages: what they hold is other tests' to say
    if any(not isinstance(entry, dict) or "$marker" in entry
           or isinstance(entry.get("content"), dict) for entry in added):
        return
    if added != recorded or agent.pending:
        fail_in("07.2", (
            "run() has returned, so the messages that waited in the buffer when it "
            "began, then every message it recorded, should have been added to the log, "
            f"once each, in order: {[m.get('role') for m in recorded]}; the log gained "
            f"{[m.get('role') for m in added]}, and {len(agent.pending)} message(s) "
            "still wait in the buffer. The flush writes what waits there, not a part "
            "of the conversation worked out from what it wrote before (an undo may "
            "have made the conversation shorter since)"))


def play(lesson, sessions, *turns, session_id="quest-1"):
    """Play whole turns in one agent; return the messages each turn added."""
    script = [step for _, steps in turns for step in steps]
    agent, model, log = open_agent(lesson, sessions, script, session_id)
    added = []
    with log:
        for text, _ in turns:
            before = len(agent.messages)
            agent.run(text)
            added.append(agent.messages[before:])
    return added


def resume(lesson, sessions, session_id="quest-1"):
    """What a new process sees when it opens the session."""
    agent, _, log = open_agent(lesson, sessions, session_id=session_id)
    log.close()
    return agent.messages


def write_log(sessions, entries, session_id="quest-1"):
    """Write a log by hand, one JSON line per entry."""
    (sessions / f"{session_id}.jsonl").write_bytes(b"".join(
        (json.dumps(entry) + "\n").encode() for entry in entries))


# The keys of an undo marker, as the format reference gives them
MARKER_KEYS = {"$marker", "skip", "at"}


def undo_marker(*skip):
    return {"$marker": "undo", "skip": list(skip), "at": "2026-01-01T00:00:00+00:00"}


def on_a_full_disk(limit, action, what):
    """`action()` in a child process whose files may not grow past `limit` bytes (see
    with_file_size_limit): what it returned. A task not written yet is raised here, so
    that the plugin names it; any other error fails the test in words."""
    kind, message, result = with_file_size_limit(limit, action)
    if kind == "NotImplementedError":
        raise NotImplementedError(message)
    if kind != "ok":
        pytest.fail(f"{what} raised {kind} where the test expected it to return (a "
                    f"failure of the full disk is caught inside it): {message}",
                    pytrace=False)
    return result


@pytest.mark.task("07.1")
def test_a_log_with_undo_markers_loads_without_the_messages_they_take_back(lesson,
                                                                           sessions):
    """A log written by hand with two undo markers loads without the messages they take
    back. Indices count messages, not lines: below the first marker, every message sits
    a line further down than its index. (Task 07.1 alone: nothing here undoes.)"""
    said = [{"role": "user", "content": f"message {n}"} for n in range(6)]
    write_log(sessions, [*said[:3], undo_marker(2), said[3], said[4], undo_marker(4),
                         said[5]])

    shown = lesson.SessionLog(sessions, "quest-1").load()

    expected = [said[0], said[1], said[3], said[5]]
    got = [m.get("content", m) for m in shown]
    assert shown == expected, (
        "the markers take back message 2 and message 4 (indices count the messages "
        "written, from 0; markers are not messages), so the log should show messages "
        f"0, 1, 3 and 5; it shows {got}")


@pytest.mark.key
@pytest.mark.task("07.3")
@pytest.mark.task("07.1")
def test_undo_takes_back_the_whole_last_turn_tool_calls_and_results_together(
    lesson, sessions
):
    """undo() takes back the whole last turn, the user's message with its tool calls,
    results and answer, never half a tool exchange."""
    agent, model, log = open_agent(lesson, sessions, TURN_A[1] + TURN_B[1] + TURN_C[1])
    with log:
        agent.run(TURN_A[0])
        turn_a = list(agent.messages)
        agent.run(TURN_B[0])
        turn_b = agent.messages[len(turn_a):]

        taken = agent.undo()

        assert agent.messages == turn_a, (
            "undo() takes back the last turn: the user's message and everything after "
            "it (tool calls, their "
            f"results, the answer). Expected the {len(turn_a)} messages of the first "
            "turn to remain, "
            f"found {[m.get('role') for m in agent.messages]}")
        assert taken == turn_b, (
            "undo() returns the messages it took back, oldest first; got "
            f"{[m.get('role') for m in taken]}"
        )
        agent.run(TURN_C[0])

    next_request = model.requests[-1]["messages"]
    assert next_request == turn_a + [{"role": "user", "content": TURN_C[0]}], (
        "the request after the undo should carry the first turn and the new message, "
        "nothing of the undone turn"
    )


@pytest.mark.task("07.1")
@pytest.mark.task("07.3")
def test_undo_of_several_turns(lesson, sessions):
    """undo(turns=n) takes back the last n turns, in memory and for a new process alike.
    """
    agent, _, log = open_agent(lesson, sessions, TURN_C[1] + TURN_A[1] + TURN_B[1])
    with log:
        agent.run(TURN_C[0])
        first = list(agent.messages)
        agent.run(TURN_A[0])
        agent.run(TURN_B[0])

        agent.undo(turns=2)

        assert agent.messages == first, (
            "undo(turns=2) leaves the first of three turns, found "
            f"{len(agent.messages)} messages"
        )
    assert resume(lesson, sessions) == first, (
        "a new process should see only the first turn too"
    )

    agent, _, log = open_agent(lesson, sessions)
    with log:
        try:
            agent.undo(turns=1)
        except lesson.UndoError as error:
            pytest.fail(f"undoing the only turn left was refused ({error}): a "
                        "conversation of one turn can be undone whole", pytrace=False)
        assert agent.messages == [], "undoing the only turn should leave nothing"
    assert resume(lesson, sessions) == [], (
        "after every turn was undone, a new process should see an empty conversation")


@pytest.mark.key
@pytest.mark.task("07.3")
def test_undoing_more_turns_than_exist_is_refused_and_changes_nothing(lesson, sessions):
    """Undoing more turns than exist is refused and changes neither the conversation nor
    the log, nor the agent's hold on its session."""
    play(lesson, sessions, TURN_A, TURN_C)
    path = sessions / "quest-1.jsonl"
    before = path.read_bytes()
    agent, _, log = open_agent(lesson, sessions)
    with log:
        messages = list(agent.messages)
        for turns in (3, 0, -1):
            with raises(lesson.UndoError,
                        f"undo(turns={turns}) was allowed on a conversation of two "
                        "turns: refuse a count that is not between 1 and the turns "
                        "there are") as raised:
                agent.undo(turns=turns)
            said = str(raised.value).replace(str(sessions), "")
            assert re.search(r"(?<![\d.])2(?!\d|\.\d)", said), (
                f"the refusal of undo(turns={turns}) should say how many turns there "
                "are (2), so the user knows what can be undone; it says "
                f"{str(raised.value)!r}")

            assert agent.messages == messages, (
                f"a refused undo({turns}) must leave the conversation as it was"
            )
            assert path.read_bytes() == before, (
                f"a refused undo({turns}) must not write anything to the log"
            )
        intruder = another_writer_tries(lesson, sessions)
        assert intruder == "SessionBusy", (
            "the agent's undos of 3, 0 and -1 turns were refused, as they should be; "
            "its log was open, the session's writer, and was not closed since, so "
            "another writer's append should be refused with SessionBusy; it got: "
            f"{intruder}. A refused undo changes nothing, the agent's hold on its "
            "session included")
    assert issubclass(lesson.UndoError, ValueError)


@pytest.mark.task("07.3")
def test_a_new_conversation_has_nothing_to_undo(lesson, sessions):
    """A conversation with no turns has nothing to undo: the undo is refused, saying
    how many turns there are (none), and creates no log."""
    agent, _, log = open_agent(lesson, sessions)
    with log:
        with raises(lesson.UndoError,
                    "undo() on a conversation with no turn was allowed") as raised:
            agent.undo()
    assert list(sessions.iterdir()) == [], "a refused undo must not create the log"
    said = str(raised.value).replace(str(sessions), "")
    none = (r"(?<![\d.])0(?!\d|\.\d)",                  # "the conversation has 0"
            r"\b(no|zero)\W+(\w+\W+)?turns?\b",       # "no turn yet", "zero turns"
            r"\bturns?\W+(\w+\W+)?(none|zero)\b")     # "turns: none"
    assert any(re.search(words, said, re.IGNORECASE) for words in none), (
        "the refusal of undo() on a new conversation should say how many turns there "
        f"are (none, 0), so the user knows what can be undone; it says {said!r}")


@pytest.mark.key
@pytest.mark.task("07.1")
def test_undo_only_appends_earlier_bytes_never_change(lesson, sessions):
    """Undo keeps the log append-only: every byte written before it stays where it was,
    and the undo is recorded at the end."""
    play(lesson, sessions, TURN_A, TURN_B)
    path = sessions / "quest-1.jsonl"
    before, inode = path.read_bytes(), path.stat().st_ino

    agent, _, log = open_agent(lesson, sessions, TURN_C[1])
    with log:
        agent.undo()
        agent.run(TURN_C[0])

    after = path.read_bytes()
    assert after.startswith(before), (
        "undo must not rewrite, truncate or edit the log: every byte written before it "
        f"must stay where it was. The log had {len(before)} bytes and now "
        f"{'is shorter' if len(after) < len(before) else 'differs inside them'}"
    )
    assert path.stat().st_ino == inode, (
        "undo replaced the log with a new file (another inode): a reader or a writer "
        "holding the log open no longer sees the session"
    )
    assert len(after) > len(before), "the undo itself must be recorded in the log"


@pytest.mark.key
@pytest.mark.task("07.1")
def test_the_undo_is_a_marker_line_naming_the_undone_messages_by_index(
    lesson, sessions
):
    """An undo is one marker line ({'$marker': 'undo'}, no role) listing the undone
    messages by their index, so it can never pass for a message, and holding the keys
    the format reference gives it, no other."""
    turn_a, turn_b = play(lesson, sessions, TURN_A, TURN_B)
    path = sessions / "quest-1.jsonl"
    before = path.read_bytes()
    agent, _, log = open_agent(lesson, sessions)
    with log:
        agent.undo()

    lines = lines_of(path)
    assert lines, (
        "after the undo the log is empty: undo appends a marker, it never rewrites")
    added = path.read_bytes()[len(before):]
    assert added.count(b"\n") == 1 and added.endswith(b"\n"), (
        "an undo adds one line to the log, its marker, ending in its newline, and "
        "nothing else: no empty line either (a line of the log is a message or a "
        "marker, and an empty one is neither; other readers of the format may refuse "
        f"it). The undo added {added!r}")
    last = lines[-1]
    expected = list(range(len(turn_a), len(turn_a) + len(turn_b)))
    assert last.get("$marker") == "undo", (
        f"the undo should append one marker line {{'$marker': 'undo', ...}}, the last "
        f"line is {last}"
    )
    assert "role" not in last, "a marker must never look like a message: no 'role'"
    assert sorted(last.get("skip", [])) == expected, (
        "the marker's 'skip' lists the indices of the undone messages (messages "
        "counted from 0): expected "
        f"{expected}, got {last.get('skip')}")
    assert set(last) == MARKER_KEYS, (
        "an undo marker holds the keys the format reference gives it, '$marker', "
        "'skip' and 'at', and no other: every reader of the format, another "
        "program's too, knows what those mean, and a key of its own would be a new "
        f"format. The marker holds {sorted(last)}")


@pytest.mark.key
@pytest.mark.task("07.1")
def test_resume_replays_without_the_undone_turn(lesson, sessions):
    """Resuming replays the log without the undone turn: the next request does not carry
    it."""
    turn_a, _ = play(lesson, sessions, TURN_A, TURN_B)
    agent, _, log = open_agent(lesson, sessions)
    with log:
        agent.undo()

    agent, model, log = open_agent(lesson, sessions, TURN_C[1])
    with log:
        assert agent.messages == turn_a, (
            f"a new process should see the first turn only ({len(turn_a)} messages), "
            "the undone one left out; "
            f"it sees {[m.get('role') for m in agent.messages]}")
        agent.run(TURN_C[0])
    assert model.requests[0]["messages"][:-1] == turn_a, (
        "the first request after resuming should not carry the undone turn"
    )


@pytest.mark.key
@pytest.mark.task("07.1")
def test_undo_then_new_messages_then_resume_keeps_the_order(lesson, sessions):
    """Undo, then new messages, then a resume gives the first turn and then the new one,
    in that order."""
    agent, _, log = open_agent(lesson, sessions, TURN_A[1] + TURN_B[1] + TURN_C[1])
    with log:
        agent.run(TURN_A[0])
        turn_a = list(agent.messages)
        agent.run(TURN_B[0])
        agent.undo()
        agent.run(TURN_C[0])
        expected = list(agent.messages)

    if expected[: len(turn_a)] != turn_a or [
        m.get("role") for m in expected[len(turn_a) :]
    ] != ["user", "assistant"]:
        fail_in("07.3", (
            "the agent played turns A and B, undid one turn, then played C: its "
            "conversation should be turn A then turn C, the undo taking back turn B "
            "whole; its user messages are "
            f"{[m.get('content') for m in expected if m.get('role') == 'user']}"))
    day_two, model, log = open_agent(lesson, sessions, TURN_D[1])
    with log:
        users = [m.get("content") for m in day_two.messages if m.get("role") == "user"]
        assert day_two.messages == expected, (
            "resuming should give the first turn, then the turn played after the undo, "
            f"in that order; got {users} as the user's messages"
        )
        day_two.run(TURN_D[0])
    assert model.requests[0]["messages"] == expected + [
        {"role": "user", "content": TURN_D[0]}
    ]


@pytest.mark.key
@pytest.mark.task("07.1")
def test_indices_count_messages_not_lines_across_several_undos(lesson, sessions):
    """Marker indices count messages, not lines, so several undos in a row each skip the
    right messages."""
    agent, _, log = open_agent(
        lesson, sessions, TURN_A[1] + TURN_B[1] + TURN_C[1] + TURN_D[1]
    )
    with log:
        agent.run(TURN_A[0])
        turn_a = list(agent.messages)
        agent.run(TURN_B[0])
        agent.undo()                 # marker line 1
        agent.run(TURN_C[0])
        # Marker line 2: C's messages sit one line further down than their index
        agent.undo()
        agent.run(TURN_D[0])
        expected = list(agent.messages)

    if expected != turn_a + [
        {"role": "user", "content": TURN_D[0]},
        {"role": "assistant", "content": "Dawn comes."},
    ]:
        fail_in("07.3", (
            "the agent played turns A and B, undid one turn, played C, undid one turn, "
            "played D: its conversation should be turn A then turn D, each undo taking "
            "back the last turn as the conversation holds it then; its user messages "
            f"are {[m.get('content') for m in expected if m.get('role') == 'user']}"))
    markers = markers_in(sessions / "quest-1.jsonl")
    assert len(markers) == 2, (
        f"two undos should have appended two markers; the log holds {len(markers)}. "
        "Undo appends a marker and never rewrites the lines already written")
    second = markers[1]
    c_index = len(turn_a) + 6     # A's messages, then B's six, then C's user message
    assert sorted(second.get("skip", [])) == [c_index, c_index + 1], (
        "message indices count message lines only (markers are not messages): turn "
        "C's messages are "
        f"{[c_index, c_index + 1]}, the second marker says {second.get('skip')}")
    resumed = resume(lesson, sessions)
    users = [m.get("content") for m in resumed if m.get("role") == "user"]
    assert resumed == expected, (
        "after two undos, resuming should show turn A then turn D; the user's messages "
        f"it shows are {users}")


@pytest.mark.task("07.1")
def test_undo_in_a_later_process(lesson, sessions):
    """An undo made in one process still holds when a later process resumes the session.
    """
    turn_a, _ = play(lesson, sessions, TURN_A, TURN_B)

    agent, _, log = open_agent(lesson, sessions)
    with log:
        agent.undo()
        assert agent.messages == turn_a

    assert resume(lesson, sessions) == turn_a, (
        "an undo made on day 2 should hold on day 3"
    )


def fork_twice(lesson, sessions, source_id, new_id, upto):
    """Fork `source_id` twice, both of its first `upto` messages: first as this process
    knows it (a fork reads nothing of a log this process knows as it is now), then, its
    time changed so that no process knows it as it is, from its file alone. Returns what
    each fork loads, the second first."""
    lesson.fork(sessions, source_id, f"{new_id}-known", upto=upto)
    os.utime(sessions / f"{source_id}.jsonl", ns=(10**9, 10**9))
    lesson.fork(sessions, source_id, f"{new_id}-read", upto=upto)
    return [lesson.SessionLog(sessions, f"{new_id}-{how}").load()
            for how in ("read", "known")]


@pytest.mark.task("07.4")
def test_a_fork_of_a_long_log_holds_every_line(lesson, sessions):
    """A source log far longer than any read buffer (some 200 KB, each content kept in
    its line): a whole fork, and a fork of its first 60 messages, show exactly what they
    should, every line whole."""
    page = "the chronicle of the cave " * 120
    said = [{"role": "user", "content": f"{n:03d} {page}"} for n in range(70)]
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in said:
            log.append(message)
    assert len((sessions / "quest-1.jsonl").read_bytes()) > 128 * 1024, (
        "the test means a log of over 128 KiB")
    lesson.fork(sessions, "quest-1", "whole")
    lesson.fork(sessions, "quest-1", "first-60", upto=60)
    for fork_id, expected in (("whole", said), ("first-60", said[:60])):
        shown = lesson.SessionLog(sessions, fork_id).load()
        assert shown == expected, (
            f"the fork {fork_id!r} of a log of some 200 KB should show its first "
            f"{len(expected)} messages; it shows {len(shown)}, the last starting "
            f"{str(shown[-1].get('content'))[:10] if shown else None!r}")


@pytest.mark.task("07.1")
@pytest.mark.task("07.4")
def test_a_fork_made_by_this_process_right_after_an_undo_leaves_the_undone_out(
    lesson, sessions
):
    """A fork made by the writer's own process, right after the writer's undo and after
    its next append, shows what the log shows, as a fork read from the file does."""
    said = [{"role": "user", "content": f"message {n}"} for n in range(5)]
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in said[:4]:
            log.append(message)
    with lesson.SessionLog(sessions, "quest-1") as log:
        try:
            taken = log.undo(1)
        except lesson.UndoError as error:
            fail_in("07.1", (
                "a new writer that has written nothing yet was asked to undo(1) of a "
                "log showing 4 messages, and refused: an undo makes it the writer, as "
                "an append does, and it then knows the log it opened (UndoError: "
                f"{error})"))
        log.append(said[4])
        assert taken == [3], f"undo(1) should take back message 3; it took back {taken}"
        from_file, known = fork_twice(lesson, sessions, "quest-1", "what-if", 4)
    expected = [m["content"] for m in said[:3] + said[4:]]
    from_file = [m.get("content") for m in from_file]
    known = [m.get("content") for m in known]
    assert from_file == expected, (
        "the writer undid message 3 and then appended message 4, so the log shows "
        f"{expected}, and so should a fork of its first 4 made from the file (task "
        f"07.4's copy); that fork shows {from_file}")
    assert known == expected, (
        f"a fork of the first 4 made from the file shows {expected}, as it should; the "
        f"same fork made by the writer's process right after the undo shows {known}. "
        "That fork read nothing: it went by what this process knew of the log after "
        "the undo (task 07.1), which still counted message 3")


@pytest.mark.task("07.1")
def test_a_new_writer_in_this_process_answers_a_call_an_undo_left_open(lesson,
                                                                       sessions):
    """The log's undo takes back the last messages the log shows, whatever they are:
    here a tool result alone, which leaves its call open. The next writer of the
    session answers that call before its first line, as lesson 04's repair answers
    every call a log leaves open, also when it is made in this process, which
    remembers the log as its last writer left it: after an undo, that memory must not
    say there is nothing to repair."""
    question = {"role": "user", "content": "Buy a rope."}
    asked = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "buy", "arguments": '{"item": "rope"}'}}]}
    result = {"role": "tool", "tool_call_id": "call_1", "content": "Rope bought."}
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in (question, asked, result):
            log.append(message)
        log.undo(1)
    later = {"role": "user", "content": "Thank the elder."}
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append(later)
    shown = lesson.SessionLog(sessions, "quest-1").load()
    roles = [(m.get("role"), m.get("tool_call_id")) for m in shown]
    assert roles == [("user", None), ("assistant", None), ("tool", "call_1"),
                     ("user", None)] and result not in shown, (
        "the log showed a question and a call to buy, whose result an undo took back, "
        "leaving the call open; a new writer of the session, made in the same "
        "process, then appended a question. The writer should first have answered "
        "the open call (lesson 04's repair: a call left open gets a result saying it "
        "was interrupted), so the log shows the question, the call, that result and "
        f"the new question; it shows {roles}, the result taken back "
        f"{'shown again' if result in shown else 'gone'}. After an undo, what this "
        "process remembers of the log must not say the log ends with no call open")


@pytest.mark.key
@pytest.mark.task("07.2")
@pytest.mark.parametrize("said", ["(a note pasted before asking)", ""],
                         ids=["a note", "an empty note"])
def test_a_message_recorded_between_turns_waits_until_the_next_model_call(
    lesson, sessions, said
):
    """A message recorded between turns, an empty one too, waits in the pending buffer
    and is on disk before the next model call, as lesson 01 requires."""
    turn_c, = play(lesson, sessions, TURN_C)
    path = sessions / "quest-1.jsonl"
    before = path.read_bytes()
    note = {"role": "user", "content": said}

    agent, model, log = open_agent(lesson, sessions, TURN_D[1])
    model.on_request(lambda request: lines_of(path))
    with log:
        agent.record(note)
        assert agent.pending == [note] and agent.messages[-1] == note, (
            "record() keeps the message in memory and in agent.pending until the next "
            f"flush, whatever it holds (its content here: {said!r}); memory ends with "
            f"{agent.messages[-1:]} and pending holds {agent.pending}"
        )
        assert path.read_bytes() == before, (
            "a recorded message is written at the next flush, not at once"
        )
        agent.run(TURN_D[0])

    expected = turn_c + [note, {"role": "user", "content": TURN_D[0]}]
    seen = model.observations[0]
    in_order = sorted(map(json.dumps, seen)) == sorted(map(json.dumps, expected))
    assert seen == expected, (
        "every message was on disk before the model was called, but not in the order "
        "they were recorded" if in_order else
        "lesson 01's rule still holds: every message, the pending note included, is on "
        f"disk before the model is called; the log held {len(seen)} lines then, "
        f"{len(expected)} expected")
    assert agent.pending == [], "after run() returns, nothing is left pending"


@pytest.mark.key
@pytest.mark.task("07.2")
@pytest.mark.task("07.3")
def test_undoing_pending_messages_writes_nothing(lesson, sessions):
    """A note recorded between turns, still pending, is undone: the log never held it,
    so the log stays as it was, and the conversation is the one before the note."""
    turn_c, = play(lesson, sessions, TURN_C)
    path = sessions / "quest-1.jsonl"
    before = path.read_bytes()
    note = {"role": "user", "content": "Actually, never mind."}

    agent, _, log = open_agent(lesson, sessions)
    with log:
        agent.record(note)
        try:
            agent.undo()
        except lesson.UndoError as error:
            pytest.fail(f"undoing a turn that is only pending raised UndoError "
                        f"({error}): none of it was written, so the log has nothing to "
                        "undo, and the undo should have succeeded", pytrace=False)
        after = path.read_bytes()
        if after != before:
            added = (lines_of(path)[len(turn_c):] if after.startswith(before)
                     else None)
            found = ("its earlier bytes changed" if added is None else " and ".join(
                "the note itself" if line == note else
                f"a {line['$marker']} marker" if "$marker" in line else
                f"a {line.get('role')} message" for line in added))
            pytest.fail("the note was still pending, never written, so its undo has "
                        f"nothing to record; yet the log changed: {found}. The log "
                        "should hold the turn before the note, as it did",
                        pytrace=False)
        contents = [m.get("content") for m in agent.messages]
        assert agent.messages == turn_c, (
            "after the undo the conversation should be the turn before the note, "
            f"{[m.get('content') for m in turn_c]}; it is {contents}")
        assert agent.pending == [], (
            "the note was taken back, so nothing should wait to be written; pending "
            f"still holds {[m.get('content') for m in agent.pending]}")


@pytest.mark.task("07.2")
@pytest.mark.task("07.3")
@pytest.mark.task("07.1")
@pytest.mark.parametrize("notes", [
    ["Actually, never mind."], [TURN_C[0]], [None],
    ["First note.", "Second.", "Third."]],
    ids=["a new note", "the last question said again",
         "the last question's own object recorded again", "three notes"])
def test_an_undo_can_drop_pending_messages_and_mark_written_ones(lesson, sessions,
                                                                 notes):
    """An undo spanning pending and written messages drops the pending ones and marks
    only the written ones: the newest messages are the pending ones, even when a
    pending note says what a written message said, or is the very object the
    conversation holds for it (a program may record one message object again), and
    every one of them goes, even when more notes wait than the written turn has
    messages."""
    turn_a, turn_c = play(lesson, sessions, TURN_A, TURN_C)

    agent, _, log = open_agent(lesson, sessions)
    with log:
        for note in notes:
            if note is None:    # the written question, the very dict held for it
                agent.record(agent.messages[len(turn_a)])
            else:
                agent.record({"role": "user", "content": note})
        agent.undo(turns=1 + len(notes))
        agent.flush()
        assert agent.messages == turn_a, (
            f"undo(turns={1 + len(notes)}) took back the written turn and the "
            f"{len(notes)} pending note(s): the conversation should be turn A alone; "
            f"it holds {[m.get('content') for m in agent.messages[len(turn_a):]]} "
            "after it")

    skips = [sorted(m.get("skip", [])) for m in markers_in(sessions / "quest-1.jsonl")]
    assert skips == [list(range(len(turn_a), len(turn_a) + 2))], (
        "only the written turn needs a marker (skip "
        f"{list(range(len(turn_a), len(turn_a) + 2))}); "
        f"the pending message is just dropped. Markers found: {skips}")
    resumed = resume(lesson, sessions)
    assert resumed == turn_a, (
        "after the undo and a flush, a new process should see turn A alone: the undo "
        "left no message of the turns it took back pending, to be written later; it "
        f"sees {[m.get('content') for m in resumed[len(turn_a):]]} after turn A")


@pytest.mark.task("07.3")
def test_a_refused_undo_leaves_what_is_pending_pending(lesson, sessions):
    """A note waits in the pending buffer when an undo of more turns than there are is
    refused: the refusal counts the note's turn among the turns there are, and changes
    nothing, the buffer included, so the note still reaches the log and the model."""
    turn_c, = play(lesson, sessions, TURN_C)
    path = sessions / "quest-1.jsonl"
    before = path.read_bytes()
    note = {"role": "user", "content": "(a note pasted before asking)"}
    agent, model, log = open_agent(lesson, sessions, TURN_D[1])
    with log:
        agent.record(note)
        with raises(lesson.UndoError,
                    "undo(turns=3) was allowed on a conversation of two turns (one "
                    "written, then a note still pending)") as raised:
            agent.undo(turns=3)
        said = str(raised.value).replace(str(sessions), "")
        assert re.search(r"(?<![\d.])2(?!\d|\.\d)", said), (
            "the conversation has two turns, one written and a note still pending: the "
            "refusal of undo(turns=3) should say so (2), the note's turn counted; it "
            f"says {str(raised.value)!r}")
        contents = ([m.get("content") for m in agent.messages],
                    [m.get("content") for m in agent.pending])
        assert agent.messages == turn_c + [note] and agent.pending == [note], (
            "a refused undo changes nothing: the conversation should still end with "
            "the note, and the note should still wait to be written; (messages, "
            f"pending) are {contents}")
        assert path.read_bytes() == before, "a refused undo must write nothing"
        agent.run(TURN_D[0])
    expected = turn_c + [note, {"role": "user", "content": TURN_D[0]}]
    logged = lines_of(path)
    assert logged[:-1] == expected and model.requests[0]["messages"] == expected, (
        "after the refused undo, the next run should write the note, then the "
        "question, and send them both; the log holds "
        f"{[m.get('content') for m in logged[len(turn_c):]]} after the first turn")


class WatchfulTown(Town):
    """A town whose tools look at the log the moment they run."""

    def __init__(self, path):
        super().__init__()
        self.seen = []
        inner = dict(self.functions)
        for name, function in inner.items():
            self.functions[name] = lambda _f=function, **kw: (
                self.seen.append(lines_of(path)),
                _f(**kw),
            )[1]


@pytest.mark.key
@pytest.mark.task("07.2")
def test_each_tool_call_is_on_disk_before_the_tool_runs(lesson, sessions):
    """Each tool call (and every earlier result) is flushed before the tool runs, so a
    crash inside a tool leaves a trace of the call."""
    town = WatchfulTown(sessions / "quest-1.jsonl")
    agent, _, log = open_agent(lesson, sessions, TURN_A[1], town=town)
    with log:
        agent.run(TURN_A[0])

    at_first_tool, at_second_tool = town.seen
    assert at_first_tool == agent.messages[:2], (
        "when a tool starts, the reply that called it must be on disk, so that a crash "
        "inside the tool leaves a trace of the call. "
        f"The log held {[m.get('role') for m in at_first_tool]}"
    )
    assert at_second_tool == agent.messages[:3], (
        "when the second tool starts, the first tool's result must be on disk too; the "
        "log held "
        f"{[m.get('role') for m in at_second_tool]}")


class CtrlCTown(Town):
    """A town where the user presses Ctrl-C while the shop is serving:
    the purchase never returns."""

    def __init__(self):
        super().__init__()
        self.functions["buy"] = self.interrupted

    def interrupted(self, item):
        raise KeyboardInterrupt


@pytest.mark.key
@pytest.mark.task("07.1")
def test_an_interrupted_turn_can_be_undone_and_the_session_resumes_without_a_repair(
    lesson, sessions
):
    """An interrupted turn can be undone, and the session then resumes without a repair:
    the tail is judged by the messages the log shows."""
    agent, _, log = open_agent(
        lesson,
        sessions,
        TURN_C[1] + [use(call("buy", item="lantern"))],
        town=CtrlCTown(),
    )
    with log:
        agent.run(TURN_C[0])
        turn_c = list(agent.messages)
        with pytest.raises(KeyboardInterrupt):
            # Ctrl-C while the tool runs: its call has no result
            agent.run("Buy the lantern.")
        agent.undo()                            # "forget it"
    path = sessions / "quest-1.jsonl"
    before = path.read_bytes()

    day_two, model, log = open_agent(lesson, sessions, TURN_D[1])
    with log:
        assert day_two.messages == turn_c, (
            "after undoing the interrupted turn, a new process should see only the "
            "turn before it; it sees "
            f"{[m.get('role') for m in day_two.messages]}")
        assert path.read_bytes() == before, (
            "the unanswered call was undone, so resuming has nothing to repair; yet "
            "resuming wrote to the log (a repair of the undone call adds a result for "
            "a call the model will never see again)"
        )
        day_two.run(TURN_D[0])
    assert model.requests[0]["messages"] == turn_c + [
        {"role": "user", "content": TURN_D[0]}
    ]


@pytest.mark.task("07.3")
def test_an_interrupted_turn_can_be_undone_once_its_log_was_closed(lesson, sessions):
    """A run stopped by Ctrl-C in a tool, and the program's with block ended: the log
    is closed, its call open. The user undoes that turn. The undo takes the log over,
    and that takeover's repair answers the open call (lesson 04) before the count is
    judged: the agent must hold what the repair wrote, as run does, or the log shows
    one message more than the agent saw, and the undo is refused as if another writer
    had added it. The whole turn goes, the repair's answer with it."""
    agent, _, log = open_agent(lesson, sessions,
                               TURN_C[1] + [use(call("buy", item="lantern"))],
                               town=CtrlCTown())
    with log:
        agent.run(TURN_C[0])
        turn_c = list(agent.messages)
        with pytest.raises(KeyboardInterrupt):
            agent.run("Buy the lantern.")   # Ctrl-C while the tool runs
    with log:       # the same program, later: its next with block on the session
        try:
            taken = agent.undo()
        except lesson.UndoError as error:
            fail_in("07.3", "a run stopped by Ctrl-C in a tool left its call open, and "
                    "the log was closed; undoing that turn raised UndoError: "
                    f"{error}. Taking the log over repaired the call (lesson 04's "
                    "answer to it is in the log now), and the agent did not take in "
                    "what that repair wrote, as run does: the log shows one message "
                    "more than the agent, and the user cannot undo the turn that went "
                    "wrong")
    roles = [message.get("role") for message in taken]
    assert roles[:2] == ["user", "assistant"] and agent.messages == turn_c, (
        "undoing the interrupted turn should take back the user's request, the call "
        "and the answer the repair gave it, and leave the turn before; it took back "
        f"{roles}, and the agent holds {[m.get('role') for m in agent.messages]}")
    day_two, _, log = open_agent(lesson, sessions)
    with log:
        assert day_two.messages == turn_c, (
            "after undoing the interrupted turn, a new process should see only the "
            "turn before it; it sees "
            f"{[m.get('role') for m in day_two.messages]}")


@pytest.mark.task("07.3")
@pytest.mark.task("07.2")
def test_undo_works_without_a_session(lesson):
    """Without a session, undo only changes the agent's memory (and nothing was ever
    pending: there is nowhere to write it). Such an agent takes any message it is
    given, one without a role too (a note pasted by hand, or one whose role is None):
    it is no user message, so it starts no turn, and goes with the turn before it."""
    model = ScriptedModel(TURN_C[1] + TURN_D[1])
    agent = lesson.Agent(model.client(), model=model.model, tools=Town())
    agent.run(TURN_C[0])
    first = list(agent.messages)
    agent.run(TURN_D[0])
    agent.record({"content": "A note pasted without a role."})
    agent.record({"role": None, "content": "Another, its role left empty."})

    try:
        agent.undo()
    except (AttributeError, KeyError) as error:
        pytest.fail(f"undo() of an agent without a session, whose last messages are "
                    f"notes without a role (none given, then None), failed with "
                    f"{type(error).__name__} "
                    f"({error}): such an agent has no log to take messages back from, "
                    "takes any message it is given, and its undo changes its memory "
                    "only; a message without a role is no user message, and starts "
                    "no turn", pytrace=False)

    assert agent.messages == first and agent.pending == [], (
        "without a session, undo only changes memory"
    )
    for turns in (2, 0):
        with raises(lesson.UndoError,
                    f"undo(turns={turns}) of an agent without a session, whose "
                    "conversation has one turn left, was allowed") as raised:
            agent.undo(turns=turns)
        assert re.search(r"(?<![\d.])1(?!\d|\.\d)", str(raised.value)), (
            f"the refusal of undo(turns={turns}) should say how many turns there are "
            f"(1), with a session or without; it says {str(raised.value)!r}")
        assert agent.messages == first, (
            f"a refused undo(turns={turns}) must leave the conversation as it was")


@pytest.mark.key
@pytest.mark.task("07.4")
def test_a_fork_of_an_undone_session_inherits_the_undo(lesson, sessions):
    """A fork of an undone session shows what the original shows: a whole fork copies
    the lines, undo markers included."""
    turn_a, _ = play(lesson, sessions, TURN_A, TURN_B)
    agent, _, log = open_agent(lesson, sessions)
    with log:
        agent.undo()

    lesson.fork(sessions, "quest-1", "what-if")

    assert resume(lesson, sessions, "what-if") == turn_a, (
        "the fork should show what the original shows: the undone turn left out"
    )
    assert markers_in(sessions / "what-if.jsonl") == markers_in(
        sessions / "quest-1.jsonl"
    ), "a whole fork copies the lines, undo markers included"


@pytest.mark.task("07.1")
@pytest.mark.key
@pytest.mark.task("07.4")
def test_fork_upto_counts_the_messages_the_session_shows(lesson, sessions):
    """fork(upto=k) counts the messages the session shows, not the lines of the file,
    and forked_at says the same."""
    agent, _, log = open_agent(lesson, sessions, TURN_A[1] + TURN_B[1] + TURN_C[1])
    with log:
        agent.run(TURN_A[0])
        turn_a = list(agent.messages)
        agent.run(TURN_B[0])
        agent.undo()
        agent.run(TURN_C[0])
        # Turn A, then turn C: the undone turn B is not counted
        shown = list(agent.messages)

    kept = len(turn_a) + 1
    from_file, known = fork_twice(lesson, sessions, "quest-1", "ask-again", kept)
    users = [[m.get("content") for m in forked if m.get("role") == "user"]
             for forked in (from_file, known)]
    assert from_file == shown[:kept], (
        f"upto={kept} keeps the first {kept} messages the session shows (turn A and "
        "turn C's question), not the first lines of the file (which hold the undone "
        f"turn); a fork made from the file shows {users[0]} as the user's messages")
    assert known == shown[:kept], (
        f"a fork of the first {kept} made from the file shows what the session shows; "
        f"the same fork made by the process that undid turn B shows {users[1]} as the "
        "user's messages. That fork read nothing: it went by what this process knew "
        "of the log after the undo (task 07.1), which still counted turn B")
    meta = json.loads((sessions / "ask-again-read.meta.json").read_text(
        encoding="utf-8"))
    assert meta.get("forked_at") == len(turn_a) + 1, (
        f"forked_at counts the messages kept, as upto does: {meta}"
    )
    with raises(ValueError,
                f"upto={len(shown) + 1} is more than the {len(shown)} messages the "
                "session shows, and the fork was allowed"):
        lesson.fork(sessions, "quest-1", "too-far", upto=len(shown) + 1)

    lesson.fork(sessions, "quest-1", "from-scratch", upto=0)
    copied = (sessions / "from-scratch.jsonl").read_bytes()
    assert copied == b"", (
        f"fork(upto=0) keeps no message, so it copies no line; it copied {len(copied)} "
        "bytes (0 is a count, not 'no limit': only upto=None copies everything)")


# Logs in the formats of lessons 01-06, written by hand, byte for byte.
# Lessons 01-03: plain messages, one per line (this one a fork, with its meta file).
PLAIN_MESSAGES = [
    {"role": "user", "content": "Ask the elder about the cave, s'il vous plaît."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1_0",
                "type": "function",
                "function": {"name": "talk_to", "arguments": '{"npc": "elder"}'},
            }
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "call_1_0",
        "content": "The elder says: \"Bring a torch\u2028and a rope.\"",
    },
    {"role": "assistant", "content": "Bring a torch and a rope."},
    {"role": "user", "content": "Buy them."},
    {"role": "assistant", "content": "Done: 3 gold left."},
]
PLAIN_LOG = "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in PLAIN_MESSAGES)
PLAIN_META = json.dumps(
    {
        "format": 1,
        "id": "quest-1",
        "parent": "quest-0",
        "forked_at": 6,
        "created": "2025-06-01T09:00:00+00:00",
    },
    indent=1,
)
# Lessons 04-06:
# a repair marker and the result it stands in for (04), a content stored as a blob (06).
# 7000 bytes: a blob from lesson 06 on
BIG = "The elder's map, line after line.\n" * 200
BIG_HASH = hashlib.sha256(BIG.encode("utf-8")).hexdigest()
REPAIRED_LOG = "".join(
    json.dumps(line, ensure_ascii=False) + "\n"
    for line in [
        {"role": "user", "content": "Ask the elder about the cave, s'il vous plaît."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1_0",
                    "type": "function",
                    "function": {"name": "talk_to", "arguments": '{"npc": "elder"}'},
                }
            ],
        },
        {
            "$marker": "repair",
            "at": "2025-06-01T09:00:00+00:00",
            "cut_bytes": 0,
            "cut_preview": "",
            "interrupted": ["call_1_0"],
        },
        {
            "role": "tool",
            "tool_call_id": "call_1_0",
            "content": (
                'error: the call talk_to({"npc": "elder"}) was interrupted: the session'
                ' stopped before its result was saved, so it may or may not have run.'
                ' Check before calling it again.'
            ),
        },
        {"role": "assistant", "content": "The elder was interrupted."},
        {
            "role": "user",
            "content": {"$blob": BIG_HASH, "size": len(BIG), "preview": BIG[:100]},
        },
        {"role": "assistant", "content": "What a map."},
    ]
)
REPAIRED_MESSAGES = [
    m for m in map(json.loads, REPAIRED_LOG.splitlines()) if "role" in m
]
REPAIRED_MESSAGES[4] = {"role": "user", "content": BIG}


@pytest.mark.key
@pytest.mark.task("07.1")
@pytest.mark.parametrize(
    "old_log, expected",
    [(PLAIN_LOG, PLAIN_MESSAGES), (REPAIRED_LOG, REPAIRED_MESSAGES)],
    ids=["lessons 01-03", "lessons 04-06"],
)
def test_logs_written_by_earlier_lessons_still_load(
    lesson, sessions, old_log, expected
):
    """A log written by an earlier lesson's code still loads, resumes unchanged, and can
    be undone: the format only grows."""
    (sessions / "quest-1.jsonl").write_text(old_log, encoding="utf-8")
    (sessions / "quest-1.meta.json").write_text(PLAIN_META, encoding="utf-8")
    (sessions / "blobs").mkdir()
    (sessions / "blobs" / BIG_HASH).write_bytes(BIG.encode("utf-8"))

    loaded = resume(lesson, sessions)

    assert loaded == expected, (
        "a log written by an earlier lesson should load exactly as it did then "
        "(markers left out, blobs read back); got roles "
        f"{[m.get('role') for m in loaded]}, expected {[m['role'] for m in expected]}"
    )
    assert (sessions / "quest-1.jsonl").read_text(encoding="utf-8") == old_log, (
        "resuming a whole old log must not change it"
    )

    agent, model, log = open_agent(lesson, sessions, TURN_C[1])
    with log:
        agent.undo()
        agent.run(TURN_C[0])
    assert model.requests[0]["messages"] == expected[:4] + [
        {"role": "user", "content": TURN_C[0]}
    ], (
        "undo should work on an old log too: its last turn taken back, the earlier "
        "ones kept"
    )
    assert (sessions / "quest-1.jsonl").read_text(encoding="utf-8").startswith(old_log)


@pytest.mark.task("07.1")
def test_an_undo_marker_never_hides_messages_written_after_it(lesson, sessions):
    """A marker written after two messages can take back only those two: an index that
    names no message written before it (a damaged or foreign marker's: at or after its
    own place, or negative) takes back nothing, least of all a message written, and
    shown to the user, after it. Its place counts the messages before it, not the lines
    (a marker above it is no message), and each index is judged alone, wherever it
    stands in the list. A message named twice, in one marker's list or
    again by a later marker, is taken back once, and the log still loads."""
    ask = {"role": "user", "content": "Ask the elder."}
    answer = {"role": "assistant", "content": "The elder wants a torch."}
    later = [{"role": "user", "content": "Buy a torch."},
             {"role": "assistant", "content": "Bought."}]
    write_log(sessions, [ask, answer, undo_marker(1, 2, 3, -1), *later])
    shown = lesson.SessionLog(sessions, "quest-1").load()
    assert shown == [ask, *later], (
        "the marker may take back index 1 only (two messages came before it); the "
        f"messages after it must stay shown. Got {[m.get('content') for m in shown]}")

    # A second undo, damaged: three messages came before it, on four lines
    retry = {"role": "user", "content": "Ask the elder again."}
    write_log(sessions, [ask, answer, undo_marker(1), retry, undo_marker(2, 3),
                         later[0]], "quest-2")
    shown = lesson.SessionLog(sessions, "quest-2").load()
    assert shown == [ask, later[0]], (
        "the second marker may take back indices 0 to 2 only: three messages came "
        "before it (on four lines, the first marker being no message), so index 3, "
        "the message written after it, must stay shown. Got "
        f"{[m.get('content') for m in shown]}")

    # Negative indices name no message: counted from the end, they would name one
    write_log(sessions, [ask, answer, undo_marker(-2), *later], "quest-3")
    shown = lesson.SessionLog(sessions, "quest-3").load()
    assert shown == [ask, answer, *later], (
        "the marker lists only -2, and messages are counted from 0, so it takes back "
        "nothing: the log should show all four messages. Got "
        f"{[m.get('content') for m in shown]}")

    # One message named twice by a marker, and again by a later marker
    write_log(sessions, [ask, answer, undo_marker(1, 1), retry, undo_marker(1, 2),
                         later[0]], "quest-4")
    try:
        shown = lesson.SessionLog(sessions, "quest-4").load()
    except NotImplementedError:
        raise
    except Exception as error:
        fail_in("07.1", "a log whose first undo marker names message 1 twice, and "
                "whose second names it again with message 2, should load showing "
                f"messages 0 and 3; loading it raised {type(error).__name__}: {error}. "
                "A message an earlier marker (or the same list) took back already is "
                "simply taken back, once")
    assert shown == [ask, later[0]], (
        "the first marker names message 1 twice, the second names it again with "
        "message 2: messages 1 and 2 are taken back, once each, and the log should "
        f"show messages 0 and 3. Got {[m.get('content') for m in shown]}")

    # Damaged indices before a good one: each index is judged alone, wherever it
    # stands in the list (the format gives a marker's list no order)
    write_log(sessions, [ask, answer, undo_marker(-1, 5, 1), *later], "quest-6")
    shown = lesson.SessionLog(sessions, "quest-6").load()
    assert shown == [ask, *later], (
        "the marker lists -1, 5 and 1 after two messages: -1 and 5 name no message "
        "written before it and take back nothing, and 1 takes back message 1, wherever "
        "it stands in the list (the list has no order: the same marker written [1, "
        "-1, 5] means the same); the log should show messages 0, 2 and 3. Got "
        f"{[m.get('content') for m in shown]}")

    # An index named before its message was written, then again once it was: the
    # first naming took nothing back, so the second takes it back
    write_log(sessions, [ask, answer, undo_marker(2), retry, undo_marker(2)], "quest-5")
    shown = lesson.SessionLog(sessions, "quest-5").load()
    assert shown == [ask, answer], (
        "the first marker names message 2 before it was written (two messages came "
        "before it), and takes back nothing; the second names it once it was written, "
        "and takes it back: the log should show messages 0 and 1. Got "
        f"{[m.get('content') for m in shown]}")


@pytest.mark.task("07.1")
def test_another_programs_undo_markers_are_read_as_the_format_gives_them(lesson,
                                                                          sessions):
    """An undo marker is told by its kind, and what it takes back by its list. Its
    time under "at" is informative only (the format reference): another program's
    undo marker that gives none still takes back what it names. And a marker that
    stands before any message (another program's, its list damaged) names no message
    written before it: it takes back nothing, and the log loads."""
    said = [{"role": "user", "content": f"message {n}"} for n in range(3)]
    untimed = {"$marker": "undo", "skip": [1]}
    write_log(sessions, [said[0], said[1], untimed, said[2]])
    shown = lesson.SessionLog(sessions, "quest-1").load()
    assert shown == [said[0], said[2]], (
        "the log holds messages 0 and 1, an undo marker taking back message 1 that "
        "gives no time (the time is informative only: the kind and the list say what "
        "a marker takes back), then message 2: it should show messages 0 and 2; it "
        f"shows {[m.get('content') for m in shown]}")

    write_log(sessions, [undo_marker(0), *said], "quest-2")
    try:
        shown = lesson.SessionLog(sessions, "quest-2").load()
    except NotImplementedError:
        raise
    except Exception as error:
        fail_in("07.1", "a log whose first line is an undo marker naming message 0, "
                "before any message was written, should load showing its three "
                f"messages; loading it raised {type(error).__name__}: {error}. A "
                "marker takes back only messages written before it, and here there "
                "are none")
    assert shown == said, (
        "the log's first line is an undo marker naming message 0, written before any "
        "message: it takes back nothing, and the log should show its three messages; "
        f"it shows {[m.get('content') for m in shown]}")


@pytest.mark.task("07.1")
def test_undos_in_a_row_each_take_back_the_next_messages(lesson, sessions):
    """Undo; then a new writer: undo, undo again, append, undo. Each undo takes back
    the newest message still shown, whether the writer knew it from reading the log
    (markers included) or from its own appends."""
    said = [{"role": "user", "content": f"message {n}"} for n in range(4)]
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in said:
            log.append(message)
    with lesson.SessionLog(sessions, "quest-1") as log:
        first = log.undo(1)
    # A new writer: the log now holds a marker, which is no message.
    with lesson.SessionLog(sessions, "quest-1") as log:
        second, third = log.undo(1), log.undo(1)
        log.append({"role": "user", "content": "message 4"})
        fourth = log.undo(1)
    assert [first, second, third, fourth] == [[3], [2], [1], [4]], (
        "each undo should name the newest index still shown (3, then 2, then 1, then "
        "the new message's 4: five messages were written, and neither undone ones nor "
        "the markers change an index); they named "
        f"{first}, {second}, {third}, {fourth}")
    shown = lesson.SessionLog(sessions, "quest-1").load()
    assert shown == said[:1], f"one of the four messages should be left: {shown}"


def closed_then_written_by_another(lesson, sessions, said):
    """A writer that appended all of `said` but the last and was closed, after which
    another writer appended the last: the first writer, closed."""
    log = lesson.SessionLog(sessions, "quest-1")
    try:
        for message in said[:-1]:
            log.append(message)
    finally:
        log.close()
    with lesson.SessionLog(sessions, "quest-1") as other:
        other.append(said[-1])
    return log


@pytest.mark.task("07.1")
def test_an_undo_after_close_takes_back_the_last_message_the_log_shows_now(lesson,
                                                                           sessions):
    """A writer appended, then closed; another writer added a message since. The first
    object's undo becomes the writer again, as its append would, and takes back the
    newest message the log shows now, not the newest it wrote."""
    said = [{"role": "user", "content": f"message {n}"} for n in range(4)]
    log = closed_then_written_by_another(lesson, sessions, said)
    try:
        try:
            taken = log.undo(1)
        except NotImplementedError:
            raise
        except Exception as error:
            pytest.fail(
                "a writer that appended three messages was closed; another writer "
                "appended a fourth; the first object's undo(1) then raised "
                f"{type(error).__name__} ({error}) where it should have become the "
                "writer again, as an append does, and taken back the fourth",
                pytrace=False)
    finally:
        log.close()
    shown = lesson.SessionLog(sessions, "quest-1").load()
    assert taken == [3] and shown == said[:3], (
        "after close, an undo should become the writer again and go by the log as it "
        "is now: the newest message is the fourth (index 3), written by another writer "
        f"since; the undo named {taken}, and the log shows "
        f"{[message.get('content') for message in shown]}")


@pytest.mark.task("07.1")
def test_an_undo_told_what_its_caller_saw_refuses_a_log_written_since(lesson, sessions):
    """An undo may be told how many messages its caller last saw the log show. A writer
    appended three messages and closed; another writer added a fourth. Told that its
    caller saw three, or none (0 is a number like any other), the undo refuses with
    `UndoError`, saying how many the log shows, and writes nothing: the newest message
    is not the caller's to take back. A refusal lets go of nothing the writer holds: the
    undo made the object the writer again, and it holds the session until it is closed.
    Told four, it takes the fourth back."""
    said = [{"role": "user", "content": f"message {n}"} for n in range(4)]
    path = sessions / "quest-1.jsonl"
    log = closed_then_written_by_another(lesson, sessions, said)
    try:
        before = path.read_bytes()
        for saw, words in ((3, "three"), (0, "none: 0 is a number it saw, not None")):
            with raises(lesson.UndoError, (
                    "a writer that appended three messages was closed, and another "
                    f"writer appended a fourth; undo(1, seen={saw}) (its caller saw "
                    f"{words}) should raise UndoError: the log shows four, and the "
                    "newest message is another writer's"),
                    r"\b4\b",
                    unmatched="The refusal should say how many messages the log "
                    "shows.") as raised:
                log.undo(1, seen=saw)
            assert "quest-1" in str(raised.value).replace(str(sessions), ""), (
                f"the refusal of undo(1, seen={saw}) should name the log that changed "
                "(quest-1.jsonl, or session 'quest-1'), so that the user knows which "
                f"session to resume before undoing; it says {str(raised.value)!r}")
            assert path.read_bytes() == before, (
                f"a refused undo (seen={saw}) should write nothing; the log changed:\n"
                f"{path.read_bytes()[len(before):]!r}")
            intruder = another_writer_tries(lesson, sessions)
            assert intruder == "SessionBusy", (
                f"undo(1, seen={saw}) was refused, as it should be; to judge it, the "
                "closed object became the session's writer again, as an append does, "
                "and it was not closed since, so another writer's append should be "
                f"refused with SessionBusy; it got: {intruder}. A refusal lets go of "
                "nothing the writer holds: let go, another writer's line could come in "
                "before the caller resumes and undoes")
        taken = log.undo(1, seen=4)
    finally:
        log.close()
    shown = lesson.SessionLog(sessions, "quest-1").load()
    assert taken == [3] and shown == said[:3], (
        "told that its caller saw the four messages the log shows, undo(1) should take "
        f"back the fourth (index 3); it named {taken}, and the log shows "
        f"{[message.get('content') for message in shown]}")


@pytest.mark.task("07.1")
def test_an_undo_told_it_saw_more_than_the_log_shows_refuses(lesson, sessions):
    """`seen` guards both ways. A writer appended four messages and closed; another
    writer then took the last two back, so the log shows two. Told that its caller saw
    four, the first object's undo refuses with `UndoError`, naming the session and
    saying how many messages the log shows, and writes nothing: the messages the
    caller meant are already gone, and the two the log shows now are not the ones it
    saw last. Told two, it takes the second back."""
    said = [{"role": "user", "content": f"message {n}"} for n in range(4)]
    path = sessions / "quest-1.jsonl"
    log = lesson.SessionLog(sessions, "quest-1")
    try:
        for message in said:
            log.append(message)
    finally:
        log.close()
    with lesson.SessionLog(sessions, "quest-1") as other:
        other.undo(2)
    try:
        before = path.read_bytes()
        with raises(lesson.UndoError, (
                "a writer appended four messages and was closed; another writer then "
                "took the last two back, so the log shows two; undo(1, seen=4) (its "
                "caller saw four) should raise UndoError: the log shows fewer than its "
                "caller saw, so another writer changed it since, and its last message "
                "is not the one the caller meant to take back")) as raised:
            log.undo(1, seen=4)
        words = str(raised.value).replace(str(sessions), "")
        assert "quest-1" in words and re.search(r"\b2\b", words), (
            "the refusal of undo(1, seen=4) should name the log that changed "
            "(quest-1.jsonl, or session 'quest-1') and say how many messages it shows "
            "(2), so that the user knows what to resume before undoing; it says "
            f"{str(raised.value)!r}")
        assert path.read_bytes() == before, (
            "a refused undo (seen=4, the log showing 2) should write nothing; the log "
            f"changed:\n{path.read_bytes()[len(before):]!r}")
        taken = log.undo(1, seen=2)
    finally:
        log.close()
    shown = lesson.SessionLog(sessions, "quest-1").load()
    assert taken == [1] and shown == said[:1], (
        "told that its caller saw the two messages the log shows, undo(1) should take "
        f"back the second (index 1); it named {taken}, and the log shows "
        f"{[message.get('content') for message in shown]}")


@pytest.mark.task("07.1")
def test_an_undo_of_a_thousand_messages_is_one_marker(lesson, sessions):
    """However many messages an undo takes back, it adds one marker line (a line much
    longer than 4 KiB, written whole), naming them all, and returns them all. Its
    caller saw the 1,200 messages the log shows (`seen`), a count far past the small
    numbers Python keeps a single object of: counts are equal by value, whatever
    object holds them, so the undo goes ahead."""
    said = [{"role": "user", "content": f"message {n}"} for n in range(1200)]
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in said:
            log.append(message)
        try:
            taken = log.undo(1000, seen=int("1200"))
        except lesson.UndoError as error:
            pytest.fail("a writer appended 1,200 messages and was told that its caller "
                        "saw 1,200, as many as the log shows; undo(1000, seen=1200) "
                        f"should take back the last 1,000, and it refused: {error}. "
                        "Two counts are the same when their values are (==), not "
                        "when they are the same object (`is`, which holds only for "
                        "small numbers)", pytrace=False)
    markers = markers_in(sessions / "quest-1.jsonl")
    assert len(markers) == 1, (
        f"one undo of 1000 messages should add one undo marker; the log holds "
        f"{len(markers)} markers")
    named = markers[0].get("skip")
    assert sorted(named or []) == list(range(200, 1200)) == taken, (
        "the undo of the last 1000 of 1200 messages should name, in its marker and in "
        "what it returns, the indices 200 to 1199, oldest first; the marker names "
        f"{len(named or [])} of them and the undo returned "
        f"{len(taken)}")
    shown = lesson.SessionLog(sessions, "quest-1").load()
    assert shown == said[:200], (
        f"the log should show the first 200 messages; it shows {len(shown)}")


@pytest.mark.task("07.1")
def test_a_message_keeps_the_index_it_was_written_with_after_an_undone_one(lesson,
                                                                           sessions):
    """A message undone in the middle leaves a gap in the indices, never a shift: the
    messages written after it keep theirs, so a later writer's undo names the newest
    message still shown by the index it was written with, and takes back that one; an
    undo across the gap names the messages it takes back, and none other."""
    said = [{"role": "user", "content": f"message {n}"} for n in range(5)]
    write_log(sessions, [*said[:3], undo_marker(1), *said[3:]])
    with lesson.SessionLog(sessions, "quest-1") as log:
        first, second = log.undo(1), log.undo(1)
    shown = lesson.SessionLog(sessions, "quest-1").load()
    contents = [message.get("content") for message in shown]
    assert [first, second] == [[4], [3]] and shown == [said[0], said[2]], (
        "messages 0 to 4 were written and message 1 was undone: the messages shown "
        "keep the indices they were written with, 0, 2, 3 and 4 (an undo leaves a "
        "gap, it does not renumber what follows). Two undos should take back 4, then "
        f"3, leaving messages 0 and 2; they named {first} and {second}, and the log "
        f"shows {contents}")
    with lesson.SessionLog(sessions, "quest-1") as log:
        last = log.undo(2)
    assert last == [0, 2], (
        "the log shows messages 0 and 2 (1 was undone long before): undo(2) takes back "
        "those two and returns their indices, [0, 2], naming no message between them "
        f"that was undone already; it returned {last}")


@pytest.mark.task("07.1")
@pytest.mark.task("07.4")
def test_a_fork_keeps_a_message_said_twice_at_its_own_line(lesson, sessions):
    """The user says the same thing twice: two equal messages on two lines. Each
    message's position is its own line, not the first line equal to it, so a fork of
    the first k messages holds all k, whether an undo marker sits above them or not."""
    yes = {"role": "user", "content": "Yes."}
    which = {"role": "assistant", "content": "Which one?"}
    logs = {"no marker": [yes, which, yes, which, yes],
            "an undo marker above them": [yes, which, undo_marker(1), yes, which,
                                          yes]}
    for case, entries in logs.items():
        source = f"said-twice-{len(entries)}"
        write_log(sessions, entries, session_id=source)
        messages = [entry for entry in entries if "$marker" not in entry]
        data = (sessions / f"{source}.jsonl").read_bytes()
        pairs = lesson.parse_log(data, sessions / f"{source}.jsonl").shown()
        wanted = [(index, position) for index, position in enumerate(
            [i for i, entry in enumerate(entries) if "$marker" not in entry])]
        if case == "an undo marker above them":
            wanted = [pair for pair in wanted if pair[0] != 1]
        if list(pairs) != wanted:
            fail_in("07.1", (
                f"a log whose user said the same thing several times ({case}): "
                f"shown() should pair each message's index with its own line's place "
                f"in entries, {wanted}; it gave {list(pairs)}"))
        upto = len(wanted) - 1
        lesson.fork(sessions, source, f"{source}-fork", upto=upto)
        shown = lesson.SessionLog(sessions, f"{source}-fork").load()
        expected = [messages[index] for index, _ in wanted][:upto]
        assert shown == expected, (
            f"a fork of the first {upto} messages of a log that says the same thing "
            f"several times ({case}) should show {len(expected)} messages; it shows "
            f"{[m.get('content') for m in shown]}")


def line_length(message):
    """How many bytes `message` takes in the log, its newline included."""
    return len(json.dumps(message, ensure_ascii=False).encode("utf-8")) + 1


@pytest.mark.task("07.1")
def test_the_writer_refuses_a_count_below_one_and_can_undo_every_message(lesson,
                                                                          sessions):
    """SessionLog.undo(count) refuses 0, a negative count or more than the log shows
    (undone messages are not shown), writing nothing and saying how many it shows;
    undo of every message shown is allowed, and the same writer then shows none."""
    said = [{"role": "user", "content": f"message {n}"} for n in range(3)]
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in said:
            log.append(message)
    path = sessions / "quest-1.jsonl"
    before = path.read_bytes()
    with lesson.SessionLog(sessions, "quest-1") as log:
        for count in (0, -1, 4):
            with raises(lesson.UndoError,
                        f"undo({count}) was allowed on a log showing 3 messages: "
                        "refuse a count that is not between 1 and how many are "
                        "shown") as raised:
                log.undo(count)
            said = str(raised.value).replace(str(path), "").replace(str(sessions), "")
            assert re.search(r"(?<![\d.])3(?!\d|\.\d)", said), (
                f"the log's refusal of undo({count}) should say how many messages it "
                "shows (3), so the caller knows what can be undone; it says "
                f"{str(raised.value)!r}")
            assert "quest-1" in str(raised.value).replace(str(sessions), ""), (
                f"the log's refusal of undo({count}) should name the log that refused "
                "(quest-1.jsonl, or session 'quest-1'), so that a program undoing in "
                "several sessions knows which one; it says "
                f"{str(raised.value)!r}")
            assert path.read_bytes() == before, (
                f"a refused undo({count}) must write nothing")
        try:
            taken = log.undo(3)
        except lesson.UndoError as error:
            pytest.fail(f"undo(3) of a log showing 3 messages was refused ({error}): "
                        "every message shown may be undone", pytrace=False)
        # The same writer, its log now showing none: refused like any count too high
        with raises(lesson.UndoError,
                    "undo(1) was allowed on a log whose every message this writer "
                    "had just undone: it shows none, so there is nothing to take "
                    "back") as raised:
            log.undo(1)
        said = str(raised.value).replace(str(path), "").replace(str(sessions), "")
        assert re.search(r"(?<![\d.])0(?!\d|\.\d)", said), (
            "the writer has undone every message, so its refusal of undo(1) should "
            f"say the log shows 0; it says {str(raised.value)!r}")
    assert taken == [0, 1, 2], (
        f"undo(3) should return the indices it took back, oldest first, [0, 1, 2], "
        f"not {taken}")
    shown = lesson.SessionLog(sessions, "quest-1").load()
    assert shown == [], (
        f"after every message was undone the log should show none; it shows {shown} "
        "(index 0 is a message like any other)")
    # Four messages written, three of them undone: the count is judged, and named, by
    # the one the log shows
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": "message 3"})
        before = path.read_bytes()
        with raises(lesson.UndoError,
                    "undo(2) was allowed on a log that shows 1 message (3 of the 4 it "
                    "holds are undone): refuse a count above how many are shown"
                    ) as raised:
            log.undo(2)
    said = str(raised.value).replace(str(path), "").replace(str(sessions), "")
    assert re.search(r"(?<![\d.])1(?!\d|\.\d)", said), (
        "the log holds 4 messages and shows 1 (3 are undone): its refusal of undo(2) "
        "should say how many it shows (1), the most that can be undone; it says "
        f"{str(raised.value)!r}")
    assert path.read_bytes() == before, "a refused undo(2) must write nothing"


@pytest.mark.task("07.1")
def test_an_undo_of_a_session_with_no_log_creates_nothing(lesson, sessions):
    """SessionLog.undo on a session that has no log yet refuses with UndoError naming
    the session, and leaves the folder as it was: no log file, no lock file. The logs
    of sessions whose ids begin with its own, or that its own begins, are not its."""
    for count in (1, 0):
        log = lesson.SessionLog(sessions, "quest-1")
        try:
            log.undo(count)
        except lesson.UndoError as error:
            assert "quest-1" in str(error), (
                f"undo({count}) of session quest-1, which has no log, was refused, but "
                f"the message does not name the session: {error}")
        except NotImplementedError:
            raise       # the task not written yet: the plugin says which
        except Exception as error:
            pytest.fail(f"undo({count}) of a session with no log should raise "
                        f"UndoError (it shows no message); it raised "
                        f"{type(error).__name__}: {error}", pytrace=False)
        else:
            pytest.fail(f"undo({count}) of a session with no log returned: it shows no "
                        "message to take back, so it should be refused with UndoError",
                        pytrace=False)
        finally:
            log.close()
        left = sorted(path.name for path in sessions.iterdir())
        assert left == [], (
            f"undo({count}) of a session with no log was refused, as it should be, "
            f"but it left {left} in the sessions folder, which was empty: a refused "
            "undo creates nothing, not an empty log, not a lock file")
    # Beside a session whose id begins with its own, and one whose id its own begins
    # (an id with a dot): only its own log is the session's
    for beside, session_id in (("quest-1", "quest"), ("quest", "quest.2")):
        write_log(sessions, [{"role": "user", "content": "Hello."}], beside)
        there = sorted(path.name for path in sessions.iterdir())
        log = lesson.SessionLog(sessions, session_id)
        try:
            with raises(lesson.UndoError,
                        f"undo(1) of session {session_id!r}, which has no log, "
                        f"returned: the log beside it is session {beside!r}'s, and "
                        f"{session_id!r} shows no message to take back"):
                log.undo(1)
        finally:
            log.close()
        left = sorted(path.name for path in sessions.iterdir())
        assert left == there, (
            f"undo(1) of session {session_id!r}, which has no log, was refused, but "
            f"the sessions folder, which held {there}, now holds {left}: the log "
            f"beside it is session {beside!r}'s, not {session_id!r}'s, and a refused "
            "undo creates nothing")
    folder = sessions / "not-made-yet"
    log = lesson.SessionLog(folder, "quest-1")
    try:
        with raises(lesson.UndoError,
                    "undo(1) of a session with no log, in a folder not made yet, "
                    "returned: it shows no message to take back"):
            log.undo(1)
    finally:
        log.close()
    assert not folder.exists(), (
        "undo(1) of a session with no log, in a sessions folder not made yet, was "
        "refused, as it should be, but the folder now exists: a refused undo creates "
        "nothing, not even the folder its log would be in")


@pytest.mark.task("07.1")
def test_a_log_object_refused_an_undo_for_want_of_a_log_undoes_once_it_has_one(
        lesson, sessions):
    """An undo of a session with no log is refused; the same log object then starts
    the session (it appends two messages) and is closed. Its next undo goes by the log
    as it is then, which shows two messages: it takes back the second. Nothing learnt
    at the refusal still holds: the session has a log now."""
    said = [{"role": "user", "content": f"message {n}"} for n in range(2)]
    log = lesson.SessionLog(sessions, "quest-1")
    try:
        with raises(lesson.UndoError, "undo(1) of a session with no log returned: it "
                    "shows no message to take back"):
            log.undo(1)
        for message in said:
            log.append(message)
        log.close()
        try:
            taken = log.undo(1)
        except NotImplementedError:
            raise
        except Exception as error:
            pytest.fail(
                "a log object's undo(1) was refused while the session had no log; the "
                "same object then appended two messages and was closed, and its next "
                f"undo(1) raised {type(error).__name__} ({error}): the session has a "
                "log now, which shows two messages, so the undo should become the "
                "writer again and take back the second. What the refusal found is no "
                "longer true", pytrace=False)
    finally:
        log.close()
    shown = lesson.SessionLog(sessions, "quest-1").load()
    assert taken == [1] and shown == said[:1], (
        "the second undo(1) should take back message 1, and the log then show message "
        f"0 alone; the undo named {taken}, and the log shows "
        f"{[message.get('content') for message in shown]}")


@pytest.mark.task("07.1")
def test_an_undo_that_makes_the_writer_repair_the_log_counts_the_repaired_result(
        lesson, sessions):
    """The log's last tool call has no result (a crash between the call and its
    result), and an object that is not its writer yet is asked to undo. Becoming the
    writer repairs the log, as every writer's first act does (lesson 04), whatever the
    count asked; the result the repair writes is a message shown like any other. A
    count above what the repaired log shows is refused, with no undo marker; a count of
    every message it shows, the repair's result included, is allowed."""
    path, before = a_log_with_a_call_left_open(sessions)
    with lesson.SessionLog(sessions, "quest-1") as log:
        with raises(lesson.UndoError,
                    "undo(4) was allowed on a log that shows 3 messages once repaired "
                    "(the 2 written, and the result the repair writes for the call "
                    "left open)"):
            log.undo(4)
    after = path.read_bytes()
    assert after.startswith(before), (
        "a refused undo changed the bytes already in the log")
    added = lines_of(path)[2:]
    kinds = [line.get("$marker", line.get("role")) for line in added]
    assert "undo" not in kinds, (
        f"undo(4) was refused, as it should be, but it wrote an undo marker: the log "
        f"gained {kinds}. A refused undo takes nothing back, and writes no marker")
    assert all(line.get("$marker") == "repair" or line.get("tool_call_id") == "call_1"
               for line in added), (
        "beyond the log's own bytes, a refused undo may leave only lesson 04's repair "
        f"(its marker and the open call's result); it left {kinds}")
    with lesson.SessionLog(sessions, "quest-1") as log:
        try:
            taken = log.undo(3)
        except lesson.UndoError as error:
            pytest.fail(f"undo(3) was refused ({error}): once repaired, the log shows "
                        "3 messages, the 2 written and the result the repair writes "
                        "for the call left open, and every message shown may be "
                        "undone", pytrace=False)
    assert taken == [0, 1, 2], (
        "the repaired log shows messages 0 and 1 and the repair's result, 2; undo(3) "
        f"should take back all three, [0, 1, 2]; it took back {taken}")
    shown = lesson.SessionLog(sessions, "quest-1").load()
    assert shown == [], f"after undo(3) the log should show nothing; it shows {shown}"


def a_log_with_a_call_left_open(sessions):
    """quest-1's log: a question, then a tool call with no result (a crash between the
    call and its result). Returns its path and its bytes."""
    ask = {"role": "user", "content": "Ask the elder."}
    called = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "talk_to", "arguments": '{"npc": "elder"}'}}]}
    write_log(sessions, [ask, called])
    path = sessions / "quest-1.jsonl"
    return path, path.read_bytes()


@pytest.mark.task("07.1")
@pytest.mark.parametrize("count", [0, -2])
def test_an_undo_of_a_count_below_one_still_repairs_the_log(lesson, sessions, count):
    """The log's last tool call has no result, and an object that is not its writer yet
    is asked to undo 0 messages, or a negative count. The count is refused (UndoError),
    yet the log is repaired all the same: becoming the writer repairs it, whatever the
    count asked, and an undo that refuses before it opens the log leaves the call open
    for the next reader to find."""
    path, before = a_log_with_a_call_left_open(sessions)
    with lesson.SessionLog(sessions, "quest-1") as log:
        with raises(lesson.UndoError,
                    f"undo({count}) was allowed: a count below 1 takes nothing back "
                    "and should be refused"):
            log.undo(count)
    after = path.read_bytes()
    assert after.startswith(before), (
        f"a refused undo({count}) changed the bytes already in the log")
    added = lines_of(path)[2:]
    kinds = [line.get("$marker", line.get("role")) for line in added]
    assert "undo" not in kinds, (
        f"undo({count}) was refused, as it should be, but it wrote an undo marker: the "
        f"log gained {kinds}")
    assert any(line.get("tool_call_id") == "call_1" for line in added), (
        f"undo({count}) was refused, as it should be, but the log it was asked about "
        "still ends on a tool call with no result: an undo repairs the log, as every "
        "writer's first act does (lesson 04), even one whose count is then refused. "
        "Check the count once the log is open, not before")


@pytest.mark.task("07.1")
def test_an_undo_of_a_log_that_shows_nothing_still_repairs_its_torn_tail(lesson,
                                                                          sessions):
    """Every message of the log was undone, and a crash then left half a line at its
    end. The log exists, so an undo makes its object the writer, which repairs the tail
    first; only then is the count refused, since the log shows no message."""
    said = {"role": "user", "content": "Forget it."}
    write_log(sessions, [said, undo_marker(0)])
    path = sessions / "quest-1.jsonl"
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"role": "user", "content": "hal')
    with lesson.SessionLog(sessions, "quest-1") as log:
        with raises(lesson.UndoError,
                    "undo(1) of a log that shows no message was allowed"):
            log.undo(1)
    after = path.read_bytes()
    assert after.startswith(whole) and after.endswith(b"\n"), (
        "the log shows no message and ends in half a line: an undo becomes its writer, "
        "which cuts the torn bytes first, and only then refuses the count. After the "
        "refused undo(1) the log should hold its two whole lines and end in a newline; "
        f"it ends {after[-60:]!r}")
    kinds = [entry.get("$marker", entry.get("role")) for entry in lines_of(path)[2:]]
    assert kinds == ["repair"], (
        "the log shows no message and ends in half a line: an undo becomes its writer, "
        "which cuts the torn bytes and writes its repair marker, and only then "
        "refuses the count. After the refused undo(1) the log should hold its two "
        f"whole lines, then a repair marker; after them it holds {kinds}, and ends "
        f"{after[-60:]!r}")


@pytest.mark.task("07.2")
@pytest.mark.task("07.3")
@pytest.mark.parametrize("same", [False, True],
                         ids=["two notes", "the same note pasted twice"])
def test_undoing_the_last_of_two_pending_messages_keeps_the_first(lesson, sessions,
                                                                   same):
    """Two messages recorded between turns, the last one undone: the first stays pending
    and reaches the log, in its place, at the next flush. The same, when the user
    pasted the same note twice and takes back the second."""
    turn_c, = play(lesson, sessions, TURN_C)
    keep = {"role": "user", "content": "(the map, pasted)"}
    drop = dict(keep) if same else {"role": "user", "content": "(the wrong map)"}
    agent, _, log = open_agent(lesson, sessions, TURN_D[1])
    with log:
        agent.record(keep)
        agent.record(drop)
        try:
            agent.undo()
        except lesson.UndoError as error:
            pytest.fail(f"undoing the last of two pending messages raised UndoError "
                        f"({error}): it takes back one message, a pending one, which "
                        "the log never held", pytrace=False)
        assert agent.pending == [keep], (
            "undo took back the newest pending message only, so the one before it "
            f"should still be pending; pending holds {agent.pending}")
        agent.run(TURN_D[0])
    expected = turn_c + [keep, {"role": "user", "content": TURN_D[0]}]
    assert lines_of(sessions / "quest-1.jsonl")[:len(expected)] == expected, (
        "the log should hold the first turn, the message kept, then the next question, "
        "in that order")


def another_writer_tries(lesson, sessions, session_id="quest-1"):
    """Another writer's append to the session, while the first one should hold it:
    "SessionBusy" when it is refused, as it should be, else what happened."""
    other = lesson.SessionLog(sessions, session_id)
    try:
        other.append({"role": "user", "content": "Another writer's word."})
        return "appended"
    except lesson.SessionBusy:
        return "SessionBusy"
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    finally:
        other.close()


def two_notes_and_room_for(path, room=1):
    """Two pasted notes, and a file size limit that lets the log grow by `room` of them
    (1, or 0: not at all)."""
    notes = [{"role": "user", "content": f"(note {n}, pasted) " + "x" * 200}
             for n in (1, 2)]
    return notes, path.stat().st_size + (line_length(notes[0]) + 20 if room else 0)


def flush_cut_short(agent, notes, raised=None):
    """Record the notes and flush them while the disk has little room (the size limit
    set by with_file_size_limit), then give the disk room again. Returns what the flush
    raised, described; the OSError itself is added to the list `raised`, if given."""
    import resource
    for note in notes:
        agent.record(note)
    try:
        agent.flush()
        failed = "nothing"
    except OSError as error:
        failed = f"OSError: {error}"
        if raised is not None:
            raised.append(error)
    resource.setrlimit(resource.RLIMIT_FSIZE,
                       (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    return failed


@pytest.mark.task("07.2")
@pytest.mark.parametrize("room", [1, 0], ids=["room for one note", "no room at all"])
def test_a_flush_the_disk_cut_short_writes_each_message_once_later(lesson, sessions,
                                                                   room):
    """The disk fills up during a flush (a real file size limit), on the second message
    or on the first, then has room again: the next flush leaves each message in the log
    once, in the order recorded. The flush's failure reaches the caller as it is: the
    very OSError the log's append raised, its errno and words kept. In between, the
    agent is still the session's writer (its log was not closed): another writer is
    refused with SessionBusy, so that no line of another story lands between the
    agent's messages."""
    turn_c, = play(lesson, sessions, TURN_C)
    path = sessions / "quest-1.jsonl"
    notes, limit = two_notes_and_room_for(path, room)

    def flush_twice():
        agent, _, log = open_agent(lesson, sessions)
        with log:
            by_log, raised, append = [], [], log.append

            def append_and_keep_its_error(*arguments, **options):
                try:
                    return append(*arguments, **options)
                except BaseException as error:
                    by_log.append(error)
                    raise

            log.append = append_and_keep_its_error
            try:
                failed = flush_cut_short(agent, notes, raised)
            finally:
                log.append = append
            # True, or what the log's append raised (if anything) instead
            as_it_is = bool(raised and by_log) and raised[-1] is by_log[-1] or [
                f"{type(seen).__name__}: {seen}" for seen in by_log]
            intruder = another_writer_tries(lesson, sessions)
            agent.flush()
        return {"failed": failed, "as it is": as_it_is, "intruder": intruder}

    result = on_a_full_disk(limit, flush_twice, "the flushes")
    assert result["failed"].startswith("OSError"), (
        f"the log could grow by {'one note only' if room else 'nothing'}, so the first "
        f"flush should fail with OSError on the {'second' if room else 'first'}; it "
        f"raised {result['failed']}")
    assert result["as it is"] is True, (
        "an error of the disk reaches the caller as it is: the flush should raise the "
        "very OSError the log's append raised, its errno and words kept, so that the "
        "caller can tell a full disk from another failure; it raised "
        f"{result['failed']}, where the log's append raised "
        f"{result['as it is'] or 'nothing'}")
    assert result["intruder"] == "SessionBusy", (
        "after the flush the full disk cut short, another writer tried to append to "
        f"the session, and got: {result['intruder']}. The agent's log was not closed, "
        "so the agent is still the session's writer and holds its lock: another "
        "writer should be refused with SessionBusy (one writer at a time, lesson 05). "
        "A failed flush keeps what it has, the session included: letting go of the "
        "lock lets another story in between the agent's messages")
    logged = lines_of(path)
    assert logged == turn_c + notes, (
        "after the second flush the log should hold each note once, in order; it holds "
        f"{[m.get('content', '')[:8] for m in logged[len(turn_c):]]} after the turn")


@pytest.mark.task("07.2")
def test_a_ctrl_c_during_a_flush_writes_each_message_once_later(lesson, sessions):
    """Two notes wait in the buffer, and the user presses Ctrl-C during the flush, once
    the first is written and before the second is: the KeyboardInterrupt reaches the
    caller, and the next flush writes what is still unwritten, so the log holds each
    note once, in order."""
    turn_c, = play(lesson, sessions, TURN_C)
    notes = [{"role": "user", "content": "A note."},
             {"role": "user", "content": "Another note."}]
    agent, _, log = open_agent(lesson, sessions)
    with log:
        for note in notes:
            agent.record(note)
        append, appended = log.append, []

        def append_then_interrupt(message, *arguments, **options):
            if appended:
                raise KeyboardInterrupt     # before the second note is written
            appended.append(message)
            return append(message, *arguments, **options)

        log.append = append_then_interrupt
        try:
            agent.flush()
            outcome = "returned"
        except KeyboardInterrupt:
            outcome = "raised KeyboardInterrupt"
        finally:
            log.append = append
        if appended:
            assert outcome == "raised KeyboardInterrupt", (
                "Ctrl-C was pressed during the flush, and flush "
                f"{outcome}: the interrupt should reach the caller")
        agent.flush()
    written = lines_of(sessions / "quest-1.jsonl")[len(turn_c):]
    assert written == notes, (
        "a flush stopped by Ctrl-C after the first note, then the next flush: the log "
        f"should hold each note once, in order, {[n['content'] for n in notes]}; it "
        f"holds {[m.get('content') for m in written]} after the turn before them")


@pytest.mark.task("07.2")
def test_a_note_never_flushed_leaves_no_log(lesson, sessions):
    """An agent on a new session records a note, then an exchange the user pasted (a
    tool call and its result), and the program ends before anything flushes them: they
    are lost, as the page says, and with them any trace of them. Recording waits for
    the flush whatever a message holds, a tool call too (the loop flushes before each
    tool runs): the session has no log and no lock file, as if it had never been
    opened."""
    agent, _, log = open_agent(lesson, sessions)
    call = {"id": "call_1", "type": "function",
            "function": {"name": "buy", "arguments": '{"item": "rope"}'}}
    with log:
        agent.record({"role": "user", "content": "A note, never sent."})
        agent.record({"role": "assistant", "content": None, "tool_calls": [call]})
        agent.record({"role": "tool", "tool_call_id": "call_1", "content": "Bought."})
    left = sorted(path.name for path in sessions.iterdir()) if sessions.exists() else []
    assert left == [], (
        "a note, then a tool call and its result, were recorded on a new session and "
        "never flushed: recording should touch no file, whatever a message holds (the "
        "log is made by the flush that writes its first line), yet the sessions "
        f"folder holds {left}")


@pytest.mark.task("07.2")
def test_each_agent_flushes_only_what_it_recorded(lesson, sessions):
    """Two agents in one program, each on its own session: what one records waits in
    its own buffer, and the other's flush never writes it."""
    note = {"role": "user", "content": "A note for the first quest."}
    first, _, first_log = open_agent(lesson, sessions, session_id="quest-1")
    second, _, second_log = open_agent(lesson, sessions, [say("The elder nods.")],
                                       session_id="quest-2")
    with first_log, second_log:
        first.record(note)
        second.run("Thank the elder.")
        first.flush()
    second_lines = lines_of(sessions / "quest-2.jsonl")
    assert note not in second_lines, (
        "an agent on quest-2 ran a turn while an agent on quest-1 had a note pending; "
        "the note was written to quest-2's log: each agent's pending buffer is its own")
    assert lines_of(sessions / "quest-1.jsonl") == [note], (
        "the agent on quest-1 recorded a note and flushed it: its log should hold that "
        f"note alone; it holds {lines_of(sessions / 'quest-1.jsonl')}")


@pytest.mark.task("07.2")
def test_a_new_agent_on_a_session_never_writes_what_an_earlier_one_left_pending(
        lesson, sessions):
    """An agent of the program records a note, and is let go before anything flushes
    it: the note is lost, as a crash loses it, and no model or user of a later agent
    has seen it. A new agent of the same program on the same session then runs a turn:
    the log holds that turn, never the earlier agent's note."""
    note = {"role": "user", "content": "A note the first agent never sent."}
    first, _, first_log = open_agent(lesson, sessions)
    with first_log:
        first.record(note)
    second, model, second_log = open_agent(lesson, sessions, [say("The elder nods.")])
    with second_log:
        second.run("Thank the elder.")
    written = lines_of(sessions / "quest-1.jsonl")
    if note in written:
        fail_in("07.2", "an agent recorded a note and was let go before it flushed it; "
                "a new agent of the same program on the same session then ran a turn, "
                f"and the log holds the first agent's note: {written}. The pending "
                "buffer is the agent's own: another agent, on the same session too, "
                "never writes what it holds (its user never saw that note)")


@pytest.mark.task("07.1")
@pytest.mark.task("07.3")
@pytest.mark.task("07.2")
def test_an_undo_after_a_flush_the_disk_cut_short_takes_back_both_notes(lesson,
                                                                         sessions):
    """The disk fills up during a flush of two notes, after the first one; with room
    again, the user undoes both. The log must then show the turn before them only,
    whatever part of the flush reached it."""
    turn_c, = play(lesson, sessions, TURN_C)
    path = sessions / "quest-1.jsonl"
    notes, limit = two_notes_and_room_for(path)

    def flush_then_undo():
        agent, _, log = open_agent(lesson, sessions)
        with log:
            failed = flush_cut_short(agent, notes)
            taken = [m.get("content", "")[:8] for m in agent.undo(turns=2)]
            agent.flush()
            left = [m.get("content") for m in agent.messages]
        return {"failed": failed, "taken": taken, "left": left}

    result = on_a_full_disk(limit, flush_then_undo, "the flush and the undo")
    assert result["failed"].startswith("OSError"), (
        "the log could grow by one note only, so the flush should fail with OSError on "
        f"the second; it raised {result['failed']}")
    assert result["taken"] == ["(note 1,", "(note 2,"], (
        f"undo(turns=2) should take back the two notes; it took back {result['taken']}")
    shown = [m.get("content") for m in resume(lesson, sessions)]
    expected = [m.get("content") for m in turn_c]
    assert shown == expected and result["left"] == expected, (
        "the first note reached the log before the disk filled up, the second did not; "
        "after the undo of both, the agent and a resume should show the turn before "
        f"them, {expected}. The agent shows {result['left']}, a resume {shown}")


@pytest.mark.task("07.2")
@pytest.mark.parametrize("refused", [
    {"role": "user", "content": 5},
    {"role": "user", "content": float("nan")},
    {"role": "user", "content": "Buy a torch.", "name": float("inf")},
    {"role": "user", "content": "Buy a torch.\ud800"},
    {"role": "narrator", "content": "The guard yawns."},
    {"role": "user", "content": "Buy a torch.", "$marker": "undo"},
    {"role": "narrator", "content": "The guard tells a long tale. " * 200},
], ids=["a number for content", "NaN for content, which is no JSON",
        "Infinity, which is no JSON", "a lone surrogate, which UTF-8 cannot hold",
        "a role no model takes", "a key of the log's own",
        "a role no model takes, its content long enough for a blob"])
def test_a_message_the_log_would_refuse_is_refused_when_it_is_recorded(lesson,
                                                                       sessions,
                                                                       refused):
    """Lesson 06's agent refused at once a message its log would refuse, with the log's
    error, changing nothing. Writing later must not make that later: the session goes
    on as if the message had never been recorded. The same on a new session, whose log
    has no line yet: the rule is the log's, not its file's."""
    turn_c, = play(lesson, sessions, TURN_C)
    path = sessions / "quest-1.jsonl"
    before = path.read_bytes()
    blobs = sessions / "blobs"
    stored = sorted(p.name for p in blobs.iterdir()) if blobs.is_dir() else []
    with lesson.SessionLog(sessions, "the-log-alone") as alone:
        with raises(lesson.InvalidMessage,
                    f"the log's append accepted {refused!r}") as by_log:
            alone.append(refused)
    agent, model, log = open_agent(lesson, sessions, TURN_D[1])
    with log:
        with raises(lesson.InvalidMessage,
                    f"record() accepted {refused!r}, which the log's append refuses"
                    ) as raised:
            agent.record(refused)
        assert str(by_log.value) in str(raised.value), (
            f"record() refused {refused!r}, as it should, but not with the log's "
            f"error, which says what is wrong with it ({by_log.value}); it said "
            f"{raised.value}")
        assert agent.messages == turn_c and path.read_bytes() == before, (
            "a refused message must change nothing: not the conversation, not the log")
        now = sorted(p.name for p in blobs.iterdir()) if blobs.is_dir() else []
        assert now == stored, (
            "a refused message must change nothing, and the log's append, which checks "
            "a message before it stores its content apart, leaves no blob for one it "
            f"refuses; record() refused it, but blobs/ went from {stored} to {now}")
        try:
            agent.run(TURN_D[0])
        except Exception as error:
            pytest.fail(f"after record() refused a message, the next run() failed "
                        f"({type(error).__name__}: {error}): the refused message is "
                        "still waiting to be written", pytrace=False)
    assert model.requests[0]["messages"] == turn_c + [
        {"role": "user", "content": TURN_D[0]}], (
        "the next request should carry the conversation without the refused message")

    # On a new session too: the log's rule holds before the log has its first line
    agent, _, log = open_agent(lesson, sessions, session_id="quest-new")
    with log:
        with raises(lesson.InvalidMessage,
                    f"record() accepted {refused!r} on a new session, whose log has no "
                    "line yet: the log's append refuses it there too, and the first "
                    "flush would fail on it"):
            agent.record(refused)
        assert agent.messages == [] and agent.pending == [], (
            "a refused message must change nothing, on a new session too: the agent "
            f"holds {len(agent.messages)} message(s), {len(agent.pending)} pending")


@pytest.mark.task("07.2")
@pytest.mark.parametrize("taken", [
    {"role": "system", "content": "The town crier speaks in rhyme from now on."},
    {"role": "developer", "content": "Answer the adventurer in one sentence."},
    {"role": "user", "content": [{"type": "text", "text": "The map I found:"}]},
    {"role": "tool", "tool_call_id": "call_from_the_shop",
     "content": "A lantern costs 8 gold."},
], ids=["a system note", "a developer's instruction", "a user message of parts",
        "a tool result whose call the conversation does not hold"])
def test_a_message_the_log_takes_is_taken_when_it_is_recorded(lesson, sessions,
                                                               taken):
    """The other half of the rule: a message the log's append takes, record takes, in
    memory at once and in the log at the next flush: a system note or a developer's
    instruction between turns, a user message of parts, a tool result whose call this
    conversation does not hold (a caller's own). The log is the judge of what a line
    may hold; checking now must not refuse more than the log would later."""
    with lesson.SessionLog(sessions, "the-log-alone") as alone:
        alone.append(taken)     # the log's append takes it
    turn_c, = play(lesson, sessions, TURN_C)
    agent, _, log = open_agent(lesson, sessions)
    with log:
        try:
            agent.record(taken)
        except NotImplementedError:
            raise
        except Exception as error:
            fail_in("07.2", f"record() refused {taken!r} ({type(error).__name__}: "
                    f"{error}), a message the log's append takes: record checks a "
                    "message as the log would, so that it refuses what the log "
                    "refuses, and takes what the log takes")
        agent.flush()
    assert agent.messages == turn_c + [taken], (
        f"record() took {taken!r}: the conversation should end with it; it ends with "
        f"{agent.messages[-1:]}")
    resumed = resume(lesson, sessions)
    assert resumed == turn_c + [taken], (
        f"record() took {taken!r}, and the flush wrote it: a new process should see "
        f"the first turn, then that message; it sees {resumed[len(turn_c):]} after "
        "the first turn")


@pytest.mark.task("07.2")
def test_a_message_too_long_for_one_write_is_refused_when_it_is_recorded(lesson,
                                                                         sessions,
                                                                         monkeypatch):
    """The log's append refuses a line longer than one write() can take (MAX_WRITE,
    made small here), and lesson 06's agent refused such a message at once. Writing
    later must not make that later. A large content the log stores apart, as a blob,
    leaves a short line: that message is accepted, as it always was, even when its
    line is exactly as long as one write() can take, and so is one of fewer letters
    than the blob threshold whose UTF-8 bytes pass it (the threshold counts bytes); one
    whose other keys keep its line too long, the blob's reference in it, is refused as
    append refuses it, as is one with no text content at all, an assistant's long tool
    call, whatever its role."""
    turn_c, = play(lesson, sessions, TURN_C)
    # A blob's reference, with a preview that is not ASCII
    stored_apart = {"role": "user", "content": "é" * 5000}
    with lesson.SessionLog(sessions, "measure") as other:
        other.append(stored_apart)
    limit = len((sessions / "measure.jsonl").read_bytes())      # its line, exactly
    for name, module in list(sys.modules.items()):
        if name.startswith(f"{lesson.__name__}.") and hasattr(module, "MAX_WRITE"):
            monkeypatch.setattr(module, "MAX_WRITE", limit)
    # The line of an empty content: one letter more adds one byte
    with lesson.SessionLog(sessions, "measure-empty") as other:
        other.append({"role": "user", "content": ""})
    empty = len((sessions / "measure-empty.jsonl").read_bytes())
    # Under the blob threshold, all three; the second is shorter than the limit in
    # characters, and longer in the bytes of UTF-8 that append writes; the third's
    # line is one byte too long, its newline counted, as append counts it
    over = limit + 1 - empty
    too_long = {
        "3000 letters a": {"role": "user", "content": "a" * 3000},
        f"{limit - 40} accented letters": {"role": "user",
                                           "content": "é" * (limit - 40)},
        f"{over} letters a (a line of {limit + 1} bytes, its newline counted)":
            {"role": "user", "content": "a" * over},
        # Its content goes to a blob, yet its line, the reference in its place, is
        # still too long: append measures the line it writes, every key of it
        f"5000 accented letters stored apart, beside a name of {limit} letters":
            {"role": "user", "content": "é" * 5000, "name": "n" * limit},
        # No text to store apart, so its line stands as it is: too long, from whoever
        # records it (a caller may record the model's messages too)
        f"an assistant's call with {limit} letters of arguments, its content null":
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_long", "type": "function", "function": {
                    "name": "write_note",
                    "arguments": json.dumps({"text": "a" * limit})}}]},
    }
    # What the log's own append raises for each: record refuses with that error
    by_log = {}
    with lesson.SessionLog(sessions, "the-log-alone") as alone:
        for what, message in too_long.items():
            try:
                alone.append(message)
            except ValueError as error:
                by_log[what] = error
    path = sessions / "quest-1.jsonl"
    before = path.read_bytes()
    agent, model, log = open_agent(lesson, sessions, TURN_D[1])
    with log:
        for what, message in too_long.items():
            with raises(ValueError,
                        f"record() accepted a message of {what}, whose line, in the "
                        f"bytes append writes, is longer than the {limit} bytes one "
                        "write() can take here: the log's append refuses that line"
                        ) as raised:
                agent.record(message)
            own = by_log.get(what)
            assert own is None or type(raised.value) is type(own), (
                f"record() refused a message of {what}, as it should, but with "
                f"{type(raised.value).__name__}, where the log's append refuses that "
                f"line with {type(own).__name__}: the log's own error, so that a "
                "caller that catches what the log raises for a line too long catches "
                f"what record raises for it. It said: {raised.value}")
            said = str(raised.value).replace(str(sessions), "")
            assert re.search(rf"(?<![\d.]){limit}(?!\d|\.\d)", said), (
                f"record() refused a message of {what}, as it should, but not as the "
                f"log's error does, saying the most one write() can take ({limit} "
                f"bytes here), so the caller knows how long a line may be; it said "
                f"{raised.value}")
            assert "quest-1" in said, (
                f"record() refused a message of {what}, as it should, but not as the "
                "log's error does, naming the log it was meant for (quest-1.jsonl), "
                "so that a program with several sessions knows which one refused; it "
                f"said {raised.value}")
            assert agent.messages == turn_c and path.read_bytes() == before, (
                "a refused message must change nothing: not the conversation, not the "
                "log")
        try:
            agent.record(stored_apart)
        except Exception as error:
            pytest.fail(f"a message of 5,000 accented letters was refused or could not "
                        f"be written ({type(error).__name__}: {error}); its content is "
                        f"stored as a blob, so its line, as the log's append writes it "
                        f"(UTF-8), is {limit} bytes, as many as one write() can take "
                        "here, and the log's append takes it", pytrace=False)
        # 3,000 letters, fewer than the 4,096 of the blob threshold, yet 6,000 bytes
        fewer = {"role": "user", "content": "é" * 3000}
        try:
            agent.record(fewer)
            agent.run(TURN_D[0])
        except Exception as error:
            pytest.fail(f"a message of 3,000 accented letters was refused or could not "
                        f"be written ({type(error).__name__}: {error}); its content is "
                        "6,000 bytes of UTF-8, over the blob threshold of 4,096 bytes "
                        "(which counts bytes, not letters), so the log stores it as a "
                        f"blob and its line is shorter than the {limit} bytes one "
                        "write() can take here: the log's append takes it",
                        pytrace=False)
    assert model.requests[0]["messages"] == turn_c + [
        stored_apart, fewer, {"role": "user", "content": TURN_D[0]}], (
        "the next request should carry the long message whose content became a blob, "
        "and not the one refused")


@pytest.mark.task("07.2")
def test_an_agent_without_a_session_records_what_it_is_given(lesson):
    """Without a session there is no log, so no rule of the log to keep: as in lessons
    00 to 06, an agent in memory only takes any message it is given, even one a log
    would refuse (whatever the log would refuse in it), and has nothing to keep
    pending."""
    odd_ones = [{"role": "user", "content": 5},
                {"role": "user", "content": "Buy a torch.", "name": float("nan")},
                {"role": "user", "content": "Buy a torch.\ud800"},
                {"role": "narrator", "content": "The guard yawns."}]
    for odd in odd_ones:
        model = ScriptedModel([])
        agent = lesson.Agent(model.client(), model=model.model, tools=Town())
        try:
            agent.record(odd)
        except NotImplementedError:
            raise       # task 07.2 not written yet: said as such, not as a refusal
        except Exception as error:
            pytest.fail(f"an agent without a session refused {odd!r} "
                        f"({type(error).__name__}: {error}); it has no log whose rules "
                        "the message must keep, and lesson 06's agent without a "
                        "session took it", pytrace=False)
        assert agent.messages == [odd] and agent.pending == [], (
            f"an agent without a session keeps the message in memory, nothing pending; "
            f"it has {agent.messages} in memory and {agent.pending} pending")


@pytest.mark.task("07.1")
@pytest.mark.parametrize("short", [None, 1],
                         ids=["no room", "room for all but the marker's last byte"])
def test_an_undo_whose_marker_cannot_be_written_undoes_nothing(lesson, sessions, short):
    """The disk is full when the undo marker is written, with no room at all, or with
    room for all of the marker's line but its last byte: the undo fails with the
    disk's OSError (as the write raised it, when nothing could be written) and took
    nothing back, so the next undo takes back the same message. The marker lands whole
    or not at all: the log holds no part of the first one, and reads back whole."""
    said = [{"role": "user", "content": f"message {n}"} for n in range(4)]
    for session_id in ("quest-1", "measure"):
        with lesson.SessionLog(sessions, session_id) as log:
            for message in said:
                log.append(message)
    size = (sessions / "quest-1.jsonl").stat().st_size
    # The marker's line, as long as the one the undo below writes (same index, a time
    # of the same length)
    with lesson.SessionLog(sessions, "measure") as log:
        log.undo(1)
    room = 0 if short is None else (
        (sessions / "measure.jsonl").stat().st_size - size - short)
    before = (sessions / "quest-1.jsonl").read_bytes()

    def undo_twice():
        import resource
        with lesson.SessionLog(sessions, "quest-1") as log:
            log.open_for_append()
            number = None
            try:
                first = log.undo(1)
            except OSError as error:
                first, number = f"OSError: {error}", error.errno
            held = (sessions / "quest-1.jsonl").read_bytes().decode("utf-8", "replace")
            resource.setrlimit(resource.RLIMIT_FSIZE,
                               (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
            intruder = another_writer_tries(lesson, sessions)
            return {"first": first, "errno": number, "held": held,
                    "intruder": intruder, "second": log.undo(1)}

    result = on_a_full_disk(size + room, undo_twice, "the undos")
    where = ("could not grow at all" if short is None else
             f"had room for all of the marker's line but its last {short} byte")
    assert str(result["first"]).startswith("OSError"), (
        f"the log {where}, so the undo should fail with OSError; it returned "
        f"{result['first']}")
    assert result["intruder"] == "SessionBusy", (
        f"the log {where}, and the undo failed with OSError; the writer was not closed "
        "since, so it still holds the session's lock, and another writer's append "
        f"should be refused with SessionBusy; it got: {result['intruder']}. A failed "
        "undo lets go of nothing the writer holds: had it let go of the lock, another "
        "writer's line could come between the writer's own")
    if short is None:
        assert result["errno"] == errno.EFBIG, (
            "the undo should raise the OSError its marker's write raised, as it is: "
            f"errno {errno.EFBIG} (EFBIG, the file may not grow), which tells the "
            f"caller what went wrong; it raised {result['first']} (errno "
            f"{result['errno']})")
    assert result["held"] == before.decode("utf-8"), (
        f"the log {where}, and the undo failed: it should hold no part of its marker, "
        "which lands whole or not at all, in one write of its whole line; it holds, "
        f"after its four messages: {result['held'][len(before):]!r}")
    assert result["second"] == [3], (
        "the first undo's marker was never written, so nothing was undone and the next "
        f"undo should take back message 3 again; it took back {result['second']}")
    try:
        shown = lesson.SessionLog(sessions, "quest-1").load()
    except ValueError as error:
        pytest.fail(f"after the failed undo and the next one, the log no longer reads "
                    f"back ({error}): a part of the failed marker was left in it, and "
                    "the next line was glued to it", pytrace=False)
    assert shown == said[:3], (
        "after the failed undo and the next one, the log should show messages 0 to 2; "
        f"it shows {[message.get('content') for message in shown]}")


@pytest.mark.task("07.3")
@pytest.mark.parametrize("note", [False, True],
                         ids=["nothing pending", "a note pending"])
def test_an_agent_undo_the_log_refuses_changes_nothing_in_memory(lesson, sessions,
                                                                 note):
    """The disk is full when the agent's undo asks the log for its marker: the log's
    OSError reaches the caller as it is, and the agent still remembers the turn the log
    still shows (and still holds the note it had pending), so the next request and the
    next undo agree with the log."""
    play(lesson, sessions, TURN_A, TURN_C)
    size = (sessions / "quest-1.jsonl").stat().st_size
    turns = 2 if note else 1

    def undo_twice():
        import resource
        agent, _, log = open_agent(lesson, sessions)
        with log:
            if note:
                agent.record({"role": "user", "content": "A note for later."})
            before = ([m.get("content") for m in agent.messages],
                      [m.get("content") for m in agent.pending])
            by_log, undo = [], log.undo

            def undo_and_keep_its_error(*arguments, **options):
                try:
                    return undo(*arguments, **options)
                except BaseException as error:
                    by_log.append(error)
                    raise

            log.undo = undo_and_keep_its_error
            as_it_is = None
            try:
                agent.undo(turns)
                first = "nothing"
            except OSError as error:
                first = f"OSError: {error}"
                # True, or what the log's undo raised (if anything) instead
                as_it_is = bool(by_log) and error is by_log[-1] or [
                    f"{type(seen).__name__}: {seen}" for seen in by_log]
            after = ([m.get("content") for m in agent.messages],
                     [m.get("content") for m in agent.pending])
            resource.setrlimit(resource.RLIMIT_FSIZE,
                               (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
            intruder = another_writer_tries(lesson, sessions)
            taken = [m.get("content") for m in agent.undo(turns)]
        return {"first": first, "as it is": as_it_is, "same": before == after,
                "intruder": intruder, "taken": taken, "after": after}

    result = on_a_full_disk(size, undo_twice, "the undos")
    assert result["first"].startswith("OSError"), (
        "the log could not grow at all, so the agent's undo should fail with the "
        f"OSError of its marker; it raised {result['first']}")
    assert result["as it is"] is True, (
        "an error of the disk reaches the caller as it is: the agent's undo should "
        "raise the very OSError the log's undo raised, its errno and words kept; it "
        f"raised {result['first']}, where the log's undo raised "
        f"{result['as it is'] or 'nothing'}")
    assert result["intruder"] == "SessionBusy", (
        "the agent's undo failed with the disk's OSError; its log was not closed "
        "since, so the agent is still the session's writer, and another writer's "
        f"append should be refused with SessionBusy; it got: {result['intruder']}. A "
        "failed undo keeps what the agent has, the session's lock included: let go, "
        "another writer's turn could come in, and the agent's next undo, or its next "
        "flush, would meet it")
    assert result["same"], (
        "the marker was never written, so the log still shows the turn: the agent's "
        "memory must still hold it too, and the pending note must still be pending "
        f"(after the failed undo: messages, pending = {result['after']})")
    expected = ["Thank the elder.", "The elder nods."] + (
        ["A note for later."] if note else [])
    assert result["taken"] == expected, (
        "with room on the disk again, the next undo should take back the same "
        f"messages, {expected}; it took back {result['taken']}")


@pytest.mark.task("07.3")
def test_a_ctrl_c_as_the_log_records_an_undo_changes_nothing_in_memory(lesson,
                                                                       sessions):
    """The user presses Ctrl-C just as the log is to record the agent's undo: the
    KeyboardInterrupt reaches the caller, the log recorded nothing, and the agent still
    remembers the turn the log still shows, so the next request and the next undo agree
    with the log."""
    play(lesson, sessions, TURN_A, TURN_C)
    agent, _, log = open_agent(lesson, sessions)
    with log:
        before = [m.get("content") for m in agent.messages]
        undo, asked = log.undo, []

        def interrupted(*arguments, **options):
            asked.append(arguments)
            raise KeyboardInterrupt

        log.undo = interrupted
        try:
            agent.undo(1)
            outcome = "returned"
        except KeyboardInterrupt:
            outcome = "raised KeyboardInterrupt"
        finally:
            log.undo = undo
        after = [m.get("content") for m in agent.messages]
        if not asked:
            return      # the log was not asked: no Ctrl-C to judge
        assert outcome == "raised KeyboardInterrupt", (
            "Ctrl-C was pressed as the log was to record the undo, and the agent's "
            f"undo {outcome}: the interrupt should reach the caller")
        assert after == before, (
            "Ctrl-C stopped the log before it recorded the undo, so the log still "
            "shows the last turn: the agent's memory must still hold it too, or its "
            "next request and the log disagree. Before the undo it held "
            f"{before}; after, {after}")
        taken = [m.get("content") for m in agent.undo(1)]
    assert taken == ["Thank the elder.", "The elder nods."], (
        "the next undo should take back the same turn, which nothing took back yet; it "
        f"took back {taken}")


@pytest.mark.task("07.1")
def test_a_ctrl_c_as_the_writer_records_an_undo_undoes_nothing(lesson, sessions):
    """Ctrl-C arrives just as the writer makes its undo marker (as it reads the time
    for "at"): the KeyboardInterrupt reaches the caller, the log is as it was, and the
    writer's own record still shows every message, so its next undo takes back the
    same message, and the log then shows all the others."""
    said = [{"role": "user", "content": f"message {n}"} for n in range(4)]
    path = sessions / "quest-1.jsonl"
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in said:
            log.append(message)
        before = path.read_bytes()
        asked = []

        def interrupted(*arguments, **options):
            asked.append(arguments)
            raise KeyboardInterrupt     # as the marker's time is read: before a byte

        # Every module of the lesson that holds the kit's clock (files.py's now)
        modules = [module for name, module in list(sys.modules.items())
                   if name.startswith(f"{lesson.__name__}.")
                   and callable(getattr(module, "now", None))]
        clocks = [(module, module.now) for module in modules]
        for module, _ in clocks:
            module.now = interrupted
        try:
            log.undo(1)
            outcome = "returned"
        except KeyboardInterrupt:
            outcome = "raised KeyboardInterrupt"
        finally:
            for module, clock in clocks:
                module.now = clock
        if not asked:
            return      # the marker's time was read some other way: nothing to judge
        assert outcome == "raised KeyboardInterrupt", (
            "Ctrl-C was pressed as the writer was to write its undo marker, and the "
            f"undo {outcome}: the interrupt should reach the caller")
        assert path.read_bytes() == before, (
            "the undo was interrupted before its marker was written, yet the log "
            "changed")
        taken = log.undo(1)
    assert taken == [3], (
        "the interrupted undo wrote no marker, so it took nothing back: the writer's "
        "next undo should take back the same message, [3]; it took back "
        f"{taken}. The writer's record of what the log shows changes only once the "
        "marker is written, whatever stops the write (a KeyboardInterrupt is no "
        "OSError: clean-up in an except OSError does not run for it)")
    with lesson.SessionLog(sessions, "quest-1") as log:
        shown = [m.get("content") for m in log.load()]
    assert shown == ["message 0", "message 1", "message 2"], (
        f"after the undo of message 3, the log should show messages 0 to 2; it shows "
        f"{shown}")


@pytest.mark.task("07.1")
def test_undo_reads_the_log_it_writes_not_whatever_its_name_points_to(lesson, sessions):
    """The writer's undo works from what the writer keeps (self.shown, built from the
    log it opened): if the name now points to another file, the undo still takes back
    the writer's own messages."""
    said = [{"role": "user", "content": f"message {n}"} for n in range(4)]
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in said:
            log.append(message)
    decoy = sessions / "decoy.jsonl"
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.open_for_append()
        decoy.write_text("".join(json.dumps(m) + "\n" for m in said[:2]),
                         encoding="utf-8")
        # The writer's log, kept under another name; the name: 2 messages now
        os.link(sessions / "quest-1.jsonl", sessions / "kept-aside")
        os.replace(decoy, sessions / "quest-1.jsonl")
        taken = log.undo(1)
    why = (", the last of the 2 messages in the file its name now points to, not of "
           "the log this writer opened" if taken == [1] else "")
    assert taken == [3], (
        "the writer's log holds 4 messages, so its undo should take back index 3; it "
        f"took back {taken}{why}")


@pytest.mark.task("07.1")
def test_undo_reads_nothing_it_takes_back_what_the_writer_keeps(lesson, sessions):
    """An undo reads no part of the log: the writer built self.shown when it opened the
    log, and append keeps it current. Emptied behind its back (no writer would do
    that), the log no longer says anything, and the undo still takes back the newest
    message the writer knows, written before or after it opened. Removed behind its
    back, the log is not a session with no log: the undo raises the `OSError` every
    write of that writer raises, naming the log, and writes nothing."""
    said = [{"role": "user", "content": f"message {n}"} for n in range(3)]
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in said:
            log.append(message)
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.open_for_append()
        log.append({"role": "user", "content": "message 3"})
        os.truncate(sessions / "quest-1.jsonl", 0)     # the writer's own file, emptied
        try:
            taken = log.undo(2)
        except lesson.UndoError as error:
            pytest.fail(f"undo(2) was refused ({error}): the log was emptied behind "
                        "the writer's back, and the undo went by what the file holds "
                        "now, not by the four messages the writer knows",
                        pytrace=False)
    assert taken == [2, 3], (
        "the writer knows four messages (three it found, one it wrote), so undo(2) "
        f"should take back indices 2 and 3; it took back {taken}")

    path = sessions / "quest-2.jsonl"
    with lesson.SessionLog(sessions, "quest-2") as log:
        for message in said:
            log.append(message)
        os.remove(path)     # the writer's own file, removed
        with raises(OSError, (
                "the writer's log was removed behind its back; its undo(1) should "
                "raise the OSError every write of that writer raises, naming the log, "
                "where it returned"), re.escape(path.name), unmatched=(
                "The error should name the log, as the writer's own error does.")):
            log.undo(1)
    assert not path.exists(), (
        "the undo of a writer whose log was removed should write nothing, and leave "
        f"no file at its name; {path.name} now holds {path.read_bytes()!r}")


@pytest.mark.task("07.1")
def test_a_marker_of_a_kind_this_code_does_not_know_is_no_message(lesson, sessions):
    """A marker of an unknown kind (a later version's, or another program's that gives
    no kind at all) is skipped and not counted, so the undo markers after it still take
    back the messages they name; and what its own fields mean is not this code's to
    guess, even a list named like an undo's, a kind that differs from "undo" only
    in its capitals, or a "redo"."""
    said = [{"role": "user", "content": f"message {n}"} for n in range(3)]
    unknown = {"$marker": "bookmark", "name": "before the cave",
               "at": "2026-01-01T00:00:00+00:00"}
    # Any entry with the key is a marker, whatever its value
    no_kind = {"$marker": None, "by": "another program"}
    undo = {"$marker": "undo", "skip": [2], "at": "2026-01-01T00:01:00+00:00"}
    # A later version's: leave message 0 out of the summaries it writes, not out of the
    # conversation
    later = {"$marker": "unsummarised", "skip": [0],
             "at": "2026-01-01T00:02:00+00:00"}
    # Another program's, in capitals: the kind is its exact text, and this is not "undo"
    shouted = {"$marker": "Undo", "skip": [1], "at": "2026-01-01T00:03:00+00:00"}
    (sessions / "quest-1.jsonl").write_bytes(b"".join(
        (json.dumps(entry) + "\n").encode() for entry in
        [said[0], unknown, said[1], no_kind, said[2], undo, later, shouted]))

    shown = lesson.SessionLog(sessions, "quest-1").load()

    contents = [m.get('content', m) for m in shown]
    assert said[1] in shown, (
        "the last line is a marker of kind 'Undo', another program's: a kind is its "
        "exact text, and this code knows 'undo' only, so what that marker's list "
        "means is not its to guess and message 1 should still be shown; the log "
        f"shows {contents}")
    assert said[0] in shown, (
        "the last line is a marker of a kind this code does not know, "
        "'unsummarised', with a list it calls \"skip\": only an undo marker takes "
        "messages back, so message 0 should still be shown; the log shows "
        f"{contents}")
    assert shown == said[:2], (
        "the bookmark marker, and the marker whose kind is null, are no messages and "
        "get no index (any entry with a \"$marker\" key is a marker), so the undo "
        "marker's index 2 is the third message, 'message 2'; the log should show "
        f"messages 0 and 1, and shows {contents}")

    # A redo (this lesson's first challenge, or another program's) is no undo: this
    # code does not know what it does, so it takes nothing back
    redo = {"$marker": "redo", "skip": [0], "at": "2026-01-01T00:04:00+00:00"}
    write_log(sessions, [said[0], said[1], redo], "quest-2")
    shown = lesson.SessionLog(sessions, "quest-2").load()
    assert shown == said[:2], (
        "the log holds messages 0 and 1, then a marker of kind 'redo' whose list "
        "names message 0: only an undo marker takes messages back, and this code "
        "knows no other kind that does, so both messages should be shown; the log "
        f"shows {[m.get('content', m) for m in shown]}")


@pytest.mark.task("07.1")
def test_the_undo_marker_says_when_it_was_written(lesson, sessions):
    """The marker's "at" is the time of the undo, an ISO 8601 time with its zone: each
    undo's own, the second of one writer's undos too, on a machine whose local clock
    is not UTC's."""
    times = []
    with lesson.SessionLog(sessions, "quest-1") as log, local_clock_ahead_of_utc():
        for text in ("Ask the guard.", "Ask the elder."):
            if times:   # the second undo in a later second of the clock
                wait_past(times[-1][1])
            log.append({"role": "user", "content": text})
            before = datetime.now(timezone.utc).replace(microsecond=0)
            log.undo(1)
            times.append((before, datetime.now(timezone.utc)))

    found = markers_in(sessions / "quest-1.jsonl")
    assert len(found) == 2, f"two undos should leave two markers; the log has {found}"
    for number, (marker, (before, after)) in enumerate(zip(found, times), start=1):
        check_time(marker.get("at"), before, after, f"\"at\" of undo {number} of one "
                   "writer", "the time of that undo", "a time taken once, and written "
                   "again by a later undo, is the wrong one; so is the local time, 5 h "
                   "45 min ahead here, labelled as UTC")


@pytest.mark.task("07.1")
def test_a_durable_writer_syncs_its_undo_marker(lesson, sessions, monkeypatch):
    """With durable=True an undo, like every write, is on the disk when it returns: a
    power cut right after must not bring the undone messages back."""
    path = sessions / "quest-1.jsonl"
    with lesson.SessionLog(sessions, "quest-1", durable=True) as log:
        log.append({"role": "user", "content": "Ask the guard."})
        target = path.stat()
        events = []
        real_write, real_fsync = os.write, os.fsync

        def on_log(fd):
            found = os.fstat(fd)
            return (found.st_dev, found.st_ino) == (target.st_dev, target.st_ino)

        def write(fd, data):
            if on_log(fd):
                events.append("write")
            return real_write(fd, data)

        def fsync(fd):
            if on_log(fd):
                events.append("fsync")
            return real_fsync(fd)

        monkeypatch.setattr(os, "write", write)
        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "fdatasync", fsync)     # as durable for a file's bytes
        log.undo(1)
        monkeypatch.undo()

    assert "write" in events and "fsync" in events[events.index("write"):], (
        "a durable writer's undo marker should be synced to the disk after it is "
        f"written, before the undo returns; the log saw {events}")


@pytest.mark.task("07.4")
def test_a_fork_of_the_first_messages_leaves_an_undone_last_turn_behind(lesson,
                                                                        sessions):
    """The source's last turn was undone: a fork of its first k messages shows exactly
    those k, none of the undone turn (its marker, past the cut, is not copied), even
    when k is every message the source shows."""
    turn_a, _ = play(lesson, sessions, TURN_A, TURN_B)
    agent, _, log = open_agent(lesson, sessions)
    with log:
        agent.undo()

    for upto in (1, len(turn_a) - 1, len(turn_a)):
        lesson.fork(sessions, "quest-1", f"first-{upto}", upto=upto)
        forked = resume(lesson, sessions, f"first-{upto}")
        assert forked == turn_a[:upto], (
            f"fork(upto={upto}) should show the first {upto} messages the source "
            f"shows; it shows {len(forked)}: {[m.get('role') for m in forked]}")
        held = (sessions / f"first-{upto}.jsonl").read_text(encoding="utf-8")
        if TURN_B[0] in held or "$marker" in held:
            fail_in("07.4", (
                f"fork(upto={upto}) of a session showing {len(turn_a)} messages, its "
                "last turn undone after them, should hold nothing the source wrote "
                "after its last message; its file holds "
                + ("the undone turn's words" if TURN_B[0] in held else "a marker")
                + ". A fork of the first k messages ends at the k-th, even when k is "
                "every message shown: only a whole fork (upto None) keeps the undone "
                f"turn and its marker. The fork's file:\n{held}"))


@pytest.mark.task("07.4")
def test_a_fork_holds_nothing_said_after_its_cut(lesson, sessions):
    """A turn said after the fork's last message, then undone, then another turn: the
    fork of the first messages shows them, and its file holds no word of the undone
    turn and no marker of it. What was said after the point a fork branches from is
    not its history, even taken back: a user who forks from before a turn they undid
    does not find it in the copy, struck through or not."""
    said = [{"role": "user", "content": "Ask the elder about the cave."},
            {"role": "assistant", "content": "The elder says: bring a torch."}]
    regretted = [{"role": "user", "content": "Tell the guard my password, swordfish."},
                 {"role": "assistant", "content": "Told."}]
    later = [{"role": "user", "content": "Thank the elder."},
             {"role": "assistant", "content": "The elder nods."}]
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in said + regretted:
            log.append(message)
        log.undo(2)
        for message in later:
            log.append(message)

    lesson.fork(sessions, "quest-1", "before", upto=2)
    forked = resume(lesson, sessions, "before")
    held = (sessions / "before.jsonl").read_text(encoding="utf-8")
    if forked == said and ("swordfish" in held or "$marker" in held):
        fail_in("07.4", "the source said two messages, then a turn it undid, then two "
                "more; its fork of the first two shows them, as it should, but its "
                "file also holds what the source wrote after them: "
                + ("the undone turn's words" if "swordfish" in held else "a marker")
                + ". A fork's history ends where it branches: nothing written after "
                f"its last message belongs in it. The fork's file:\n{held}")
    assert forked == said, (
        f"fork(upto=2) should show the first two messages the source shows; it shows "
        f"{forked}")


@pytest.mark.task("07.4")
def test_each_fork_of_a_session_shows_it_as_it_is_when_that_fork_is_made(lesson,
                                                                         sessions):
    """A fork of a session; then the session goes on (a turn undone, another said);
    then a second fork of it, whole and of its first three, in the same process. Each
    fork is cut from the source as it is when that fork is made: what a first fork
    read of the source is out of date by the second."""
    said = [{"role": "user", "content": f"message {n}"} for n in range(4)]
    more = [{"role": "user", "content": f"message {n}"} for n in range(4, 6)]
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in said:
            log.append(message)
    lesson.fork(sessions, "quest-1", "first")
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.undo(2)
        for message in more:
            log.append(message)
    shown = said[:2] + more
    for new_id, upto in (("second", None), ("second-3", 3)):
        lesson.fork(sessions, "quest-1", new_id, upto=upto)
        forked = lesson.SessionLog(sessions, new_id).load()
        expected = shown if upto is None else shown[:upto]
        assert forked == expected, (
            "a first fork was made of a session showing messages 0 to 3; the session "
            "then undid messages 2 and 3 and said 4 and 5. A fork made now"
            f"{'' if upto is None else f' of its first {upto}'} should show "
            f"{[m['content'] for m in expected]}, the session as it is now; it shows "
            f"{[m.get('content') for m in forked]}: it was cut from the session as an "
            "earlier fork found it")
    first = lesson.SessionLog(sessions, "first").load()
    assert first == said, (
        "the first fork should still show messages 0 to 3, as the session did when it "
        f"was made; it shows {[m.get('content') for m in first]}")


@pytest.mark.task("07.4")
def test_a_fork_shows_no_message_a_marker_past_its_cut_took_back(lesson, sessions):
    """Another program wrote this log: it begins with a marker of a kind this code does
    not know, so a message's index is not its line's place; its undo markers take back
    an older message, not the newest (the format lets a marker take back any message
    written before it), and each stands after a message still shown. A fork of the
    first k messages
    shows exactly the first k the source shows, never one taken back by a marker past
    the cut, and holds no word the source wrote after its k-th message. An undo
    marker the fork adds to take such a message back is a marker like any other,
    with the time it was written under "at", on a whole line of its own; a fork whose
    copied lines show exactly
    the first k adds none, and holds the source's lines alone. A fork of 0 messages is
    empty, also of such a log that shows none."""
    said = [{"role": "user" if n % 2 == 0 else "assistant", "content": f"message {n}"}
            for n in range(5)]
    bookmark = {"$marker": "bookmark", "name": "the town gate"}
    write_log(sessions, [bookmark, *said[:4], undo_marker(1), said[4], undo_marker(3)])
    shown = [said[0], said[2], said[4]]
    source_lines = (sessions / "quest-1.jsonl").read_bytes().splitlines(keepends=True)
    # The line of the last message each fork keeps: message 2's, then message 4's
    last_kept = {2: 3, 3: 6}
    for upto, after in ((2, ["message 3", "message 4"]), (3, [])):
        new_id = f"first-{upto}"
        before = datetime.now(timezone.utc).replace(microsecond=0)
        lesson.fork(sessions, "quest-1", new_id, upto=upto)
        # As fork() left it, before a writer of the fork mends anything
        copied = (sessions / f"{new_id}.jsonl").read_bytes()
        *lines, tail = copied.split(b"\n")
        broken = [piece for piece in lines if not is_entry(piece)]
        assert not tail and not broken, (
            f"fork(upto={upto}) should hold whole lines only, each a whole entry "
            "ending in its newline, the undo marker it adds too, so that the fork's "
            "first append starts on a line of its own; "
            + (f"it ends in {tail!r}" if tail else f"it holds the line(s) {broken}"))
        forked = resume(lesson, sessions, new_id)
        assert forked == shown[:upto], (
            "the source holds a bookmark marker, then messages 0 to 4, its marker "
            "after message 3 taking back message 1 and its marker after message 4 "
            "taking back message 3 (indices, which the bookmark does not count): it "
            f"shows messages 0, 2 and 4. fork(upto={upto}) should show the first "
            f"{upto} of those, {[m['content'] for m in shown[:upto]]}; it shows "
            f"{[m.get('content') for m in forked]}. Copying the lines up to the "
            "last message kept leaves behind the marker that takes back a message "
            "among them: the fork must take it back itself")
        held = (sessions / f"{new_id}.jsonl").read_text(encoding="utf-8")
        assert not [words for words in after if words in held], (
            f"fork(upto={upto}) should hold nothing the source wrote after its last "
            f"message kept, message 2; its file holds {after}:\n{held}")
        written_after = [line for line in source_lines[last_kept[upto] + 1:]
                         if line in copied.splitlines(keepends=True)]
        assert not written_after, (
            f"fork(upto={upto}) should hold nothing the source wrote after its last "
            f"message kept, message {2 * upto - 2}: its history ends where it "
            "branches. It holds the source's line(s) written after that message, "
            f"{written_after}: a message the source took back with a marker past the "
            "cut is taken back in the fork by a marker of the fork's own, written "
            "when the fork is made, not by the source's later line")
        source = markers_in(sessions / "quest-1.jsonl")
        for marker in markers_in(sessions / f"{new_id}.jsonl"):
            if marker not in source:    # the fork's own marker: a marker like any
                check_time(marker.get("at"), before, datetime.now(timezone.utc),
                           f"\"at\" of the undo marker fork(upto={upto}) wrote",
                           "the time of the fork, as every marker has the time it "
                           "was written", "a marker the fork adds is a line of its "
                           "own, not one of the source's")
                assert set(marker) == MARKER_KEYS, (
                    f"the undo marker fork(upto={upto}) added should be a marker like "
                    "any other, with the keys the format reference gives an undo "
                    f"marker, {sorted(MARKER_KEYS)}, and no other; it holds "
                    f"{sorted(marker)}")

    # Every message taken back, the first by a marker that reaches back past the
    # second: the source shows none, and a fork of none is an empty fork
    write_log(sessions, [said[0], said[1], undo_marker(0), undo_marker(1)], "quest-3")
    try:
        lesson.fork(sessions, "quest-3", "none-of-3", upto=0)
    except NotImplementedError:
        raise
    except Exception as error:
        fail_in("07.4", "the source holds messages 0 and 1, a marker taking back "
                "message 0 (not the newest), then one taking back message 1: it shows "
                f"none. fork(upto=0) should make an empty fork; it raised "
                f"{type(error).__name__}: {error}")
    held = (sessions / "none-of-3.jsonl").read_bytes()
    assert held == b"", (
        "fork(upto=0) of a source that shows no message should make an empty fork "
        f"(0 is a count: no line of the source); its file holds {held!r}")

    # The message before the cut is taken back by a marker before it: nothing to add
    write_log(sessions, [*said[:3], undo_marker(1), *said[3:]], "quest-2")
    lines = (sessions / "quest-2.jsonl").read_bytes().splitlines(keepends=True)
    lesson.fork(sessions, "quest-2", "first-of-2", upto=3)
    copied = (sessions / "first-of-2.jsonl").read_bytes()

    def takes_back(line):
        try:
            entry = json.loads(line)
        except ValueError:
            return False
        return (isinstance(entry, dict) and entry.get("$marker") == "undo"
                and bool(entry.get("skip")))

    added = [line for line in copied.splitlines(keepends=True)
             if line not in lines and not takes_back(line)]
    if added:
        fail_in("07.4", "the source holds messages 0 to 2, a marker taking back "
                "message 1 (not the newest), then messages 3 and 4: fork(upto=3) shows "
                "messages 0, 2 and 3 with the source's first five lines alone. A fork "
                "keeps the source's lines as they are, and adds an undo marker only to "
                f"take back a message its copied lines still show; it added {added}")
    # A fork may leave the source's markers behind and take back with its own; but
    # when the source's lines it copied already show exactly the first 3, a marker of
    # its own takes back nothing they show
    copied_lines = copied.splitlines(keepends=True)
    kept = [line for line in copied_lines if line in lines]
    own = [line for line in copied_lines if line not in lines]
    # The source's first five lines (messages 0 to 3 and the marker) show 0, 2 and 3
    if own and kept == lines[:5]:
        fail_in("07.4", "the source holds messages 0 to 2, a marker taking back "
                "message 1 (not the newest), then messages 3 and 4: fork(upto=3) "
                "copies the source's first five lines, which show messages 0, 2 and 3, "
                "exactly the first three, and adds an undo marker of its own as well: "
                "a fork adds one only to take back a message its copied lines still "
                f"show, and these show none past the first three. It added {own}")


@pytest.mark.task("07.4")
def test_a_fork_takes_back_every_message_markers_past_its_cut_took_back(lesson,
                                                                        sessions):
    """Another program's log: five messages, then two undo markers, each taking back
    an older message, not the newest (1, then 2). It shows messages 0, 3 and 4. A fork
    of its first two cuts after message 3's line, leaving both markers behind, so the
    lines it copies still show messages 1 and 2: the fork must take back every one of
    them, not only the first it finds, and show exactly messages 0 and 3."""
    said = [{"role": "user" if n % 2 == 0 else "assistant", "content": f"message {n}"}
            for n in range(5)]
    write_log(sessions, [*said, undo_marker(1), undo_marker(2)])
    lesson.fork(sessions, "quest-1", "first-2", upto=2)
    forked = resume(lesson, sessions, "first-2")
    assert forked == [said[0], said[3]], (
        "the source holds messages 0 to 4, then a marker taking back message 1 and one "
        "taking back message 2: it shows messages 0, 3 and 4. fork(upto=2) should show "
        "the first two of those, ['message 0', 'message 3']; it shows "
        f"{[m.get('content') for m in forked]}. The lines copied up to message 3 "
        "still show messages 1 and 2, and the fork must take back each of them")


@pytest.mark.task("07.4")
@pytest.mark.parametrize("end", [b'{"role": "assistant", "con', b""],
                         ids=["a torn last line", "a last newline missing"])
def test_a_fork_copies_whole_lines_only(lesson, sessions, end):
    """A log whose writer was cut short ends in a torn line, or in a whole line whose
    newline never got written. A whole fork holds the source's whole lines, undo marker
    included, as every earlier lesson's fork did; a fork of every message or of the
    first holds whole lines too: nothing torn, every line a whole entry ending in its
    newline, no empty line added. A second whole fork, made once this process knows
    the source, is as whole as the first."""
    said = [{"role": "user", "content": f"message {n}"} for n in range(3)]
    write_log(sessions, [said[0], said[1], undo_marker(1), said[2]])
    path = sessions / "quest-1.jsonl"
    whole = path.read_bytes()
    path.write_bytes(whole + end if end else whole[:-1])
    ending = "a torn line" if end else "a line without its newline"
    for number, upto in enumerate((None, 2, 1, None)):
        new_id = f"fork-{number}"
        lesson.fork(sessions, "quest-1", new_id, upto=upto)
        copied = (sessions / f"{new_id}.jsonl").read_bytes()
        if upto is None:
            assert copied == whole, (
                f"a whole fork of a log ending in {ending}"
                f"{', made again once three forks had read it,' if number else ''} "
                f"should hold the source's "
                f"{len(whole.splitlines())} whole lines, each with its newline, and "
                f"nothing more ({len(whole)} bytes); it holds {copied[-60:]!r} at its "
                f"end ({len(copied)} bytes)")
            continue
        *lines, tail = copied.split(b"\n")
        broken = [piece for piece in lines if not is_entry(piece)]
        assert not tail and not broken, (
            f"fork(upto={upto}) of a log ending in {ending} should hold whole lines "
            "only, each a whole entry ending in its newline, and no empty line; "
            + (f"it ends in {tail!r}" if tail else f"it holds the line(s) {broken}"))
        shown = lesson.SessionLog(sessions, new_id).load()
        assert shown == [said[0], said[2]][:upto], (
            f"fork(upto={upto}) should show the first {upto} message(s) its source "
            f"shows; it shows {shown}")


@pytest.mark.task("07.4")
@pytest.mark.parametrize("count", [3, 300], ids=["three messages", "300 messages"])
def test_every_fork_of_a_log_whose_last_newline_is_missing_ends_whole(lesson,
                                                                      sessions, count):
    """Nothing undone this time: a log of three messages (or of 300, lines counted past
    the small numbers Python keeps a single object of: counts are compared by value)
    whose last newline never got written. A fork of them all, then two whole forks, in
    one process that knows the source after the first: each fork gets the newline the
    source lacks, whatever the forks before it did, so that its first append starts on
    a line of its own. And a whole fork of a log whose last line, the one without its
    newline, is an undo marker keeps that marker too, while a fork of every message it
    shows, cut before that marker, holds their lines alone, with no newline added after
    them."""
    said = [{"role": "user", "content": f"message {n}"} for n in range(count)]
    write_log(sessions, said)
    path = sessions / "quest-1.jsonl"
    whole = path.read_bytes()
    path.write_bytes(whole[:-1])
    for number, upto in enumerate((count, None, None)):
        new_id = f"fork-{number}"
        lesson.fork(sessions, "quest-1", new_id, upto=upto)
        copied = (sessions / f"{new_id}.jsonl").read_bytes()
        assert copied == whole, (
            f"fork number {number + 1} (upto={upto}) of a log of {count} messages "
            f"whose last newline is missing should hold the {count} lines, each ending "
            f"in its newline ({len(whole)} bytes), whatever the forks before it did; "
            f"it ends in {copied[-40:]!r} ({len(copied)} bytes)")

    # The last line an undo marker, taking back message 1, whose newline never got
    # written: a whole fork keeps the source's history, that marker and the message it
    # took back included, each line ending in its newline
    write_log(sessions, [said[0], said[1], undo_marker(1)], "quest-2")
    path = sessions / "quest-2.jsonl"
    whole = path.read_bytes()
    path.write_bytes(whole[:-1])
    lesson.fork(sessions, "quest-2", "fork-of-2")
    copied = (sessions / "fork-of-2.jsonl").read_bytes()
    assert copied == whole, (
        "a whole fork of a log of messages 0 and 1 and an undo marker taking back "
        "message 1, the marker's newline missing, should hold the three lines, each "
        f"ending in its newline ({len(whole)} bytes): a whole fork keeps the undone "
        "message and its marker, the source's history, whatever line lacks its "
        f"newline; it holds {copied!r}")
    # A fork of its first message, every message it shows: cut before the marker,
    # whose line lacks the newline, so the fork's lines all have theirs already
    lesson.fork(sessions, "quest-2", "first-of-2", upto=1)
    copied = (sessions / "first-of-2.jsonl").read_bytes()
    first = whole.splitlines(keepends=True)[0]
    assert copied == first, (
        "fork(upto=1) of a log of messages 0 and 1 and an undo marker taking back "
        "message 1, the marker's newline missing, keeps every message the source "
        "shows, message 0, and ends after its line: it should hold that one line, "
        f"its newline included, and nothing more ({first!r}); it holds {copied!r}. "
        "The newline the source lacks belongs to its last line, the marker, which "
        "this fork leaves behind: a fork that keeps every message shown need not "
        "keep the last line")


@pytest.mark.task("07.4")
def test_a_whole_fork_of_a_log_with_no_whole_line_is_empty(lesson, sessions):
    """The source's writer died in the middle of its first line: its log holds no
    whole line, so it shows no message. A whole fork of it shows none either, and
    holds nothing: no torn line."""
    path = sessions / "quest-1.jsonl"
    path.write_bytes(b'{"role": "user", "content": "Ask the gu')
    try:
        lesson.fork(sessions, "quest-1", "what-if")
    except IndexError as error:
        pytest.fail(f"a whole fork of a log whose only line is torn raised "
                    f"IndexError ({error}): such a log has no whole line to copy, and "
                    "its fork is empty, as a fork of 0 messages is", pytrace=False)
    copied = (sessions / "what-if.jsonl").read_bytes()
    assert copied == b"", (
        "a whole fork of a log whose only line is torn should hold nothing (no whole "
        f"line to copy); it holds {copied!r}")


def is_entry(line):
    """Whether `line` (without its newline) is one whole JSON object."""
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


@pytest.mark.task("07.3")
@pytest.mark.parametrize("content", [
    "", [{"type": "text", "text": "The map I found:"},
         {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}],
], ids=["an empty content", "a list of parts"])
def test_a_user_message_starts_a_turn_whatever_its_content(lesson, sessions, content):
    """A user who sends an empty message (Enter pressed too soon), or a message of parts
    (a picture with a caption, as chat clients send it), starts a turn like any other
    user message: undo() takes back that turn alone, not the one before it."""
    agent, model, log = open_agent(lesson, sessions, TURN_C[1] + TURN_D[1])
    with log:
        agent.run(TURN_C[0])
        turn_c = list(agent.messages)
        agent.run(content)
        last_turn = agent.messages[len(turn_c):]
        taken = agent.undo()
        kept = list(agent.messages)
    said = "an empty message" if content == "" else "a message of parts"
    assert taken == last_turn and kept == turn_c, (
        f"the last turn starts at the user's {said}, so undo() should take back its "
        f"{len(last_turn)} messages and keep the {len(turn_c)} of the turn before it; "
        f"it took back {[m.get('content') for m in taken]} and kept "
        f"{[m.get('content') for m in kept]}")
    assert resume(lesson, sessions) == turn_c, (
        f"a new process should see the turn before the user's {said}, and nothing of "
        "the turn undone")


def log_undo_lets_go(lesson, sessions):
    """Whether the log's own undo (task 07.1) lets go of a session it took over: a
    writer appends, is closed, undoes, and another writer's append is then taken."""
    probe = lesson.SessionLog(sessions, "probe")
    try:
        probe.append({"role": "user", "content": "A probe."})
        probe.close()
        probe.undo(1)
        other = lesson.SessionLog(sessions, "probe")
        try:
            other.append({"role": "user", "content": "Another probe."})
        except lesson.SessionBusy:
            return False
        finally:
            other.close()
        return True
    finally:
        probe.close()


def log_refusal_lets_go(lesson, sessions):
    """Whether the log's own undo (task 07.1) lets go of the session when it refuses a
    caller that saw another number: a writer appends and is closed, another writer
    appends, the first undoes told it saw one message, and a third writer's append is
    then taken."""
    probe = lesson.SessionLog(sessions, "probe-seen")
    try:
        probe.append({"role": "user", "content": "A probe."})
        probe.close()
        with lesson.SessionLog(sessions, "probe-seen") as other:
            other.append({"role": "user", "content": "Another probe."})
        try:
            probe.undo(1, seen=1)
        except lesson.UndoError:
            pass
        return another_writer_tries(lesson, sessions, "probe-seen") != "SessionBusy"
    finally:
        probe.close()


@pytest.mark.task("07.3")
def test_an_agent_whose_log_was_closed_undoes_in_the_log(lesson, sessions):
    """Day 2 resumed the session and played a turn, then its log was closed (its with
    block ended); the agent's undo still takes that turn back in the log, which becomes
    the writer again, so a new process resuming the session does not get it back. And
    it stays the writer, as it would after an append, holding the session until it is
    closed: another writer meanwhile is refused (one writer at a time, lesson 05)."""
    [turn_c] = play(lesson, sessions, TURN_C)
    agent, _, log = open_agent(lesson, sessions, TURN_D[1])
    with log:
        agent.run(TURN_D[0])
    try:
        agent.undo(1)
        other = lesson.SessionLog(sessions, "quest-1")
        try:
            other.append({"role": "user", "content": "Another writer's note."})
        except lesson.SessionBusy:
            pass
        else:
            fail_in("07.1" if log_undo_lets_go(lesson, sessions) else "07.3", (
                "the agent's undo took its turn back in its closed log, which became "
                "the session's writer again to write the marker, as an append would; "
                "it was not closed since, so another writer's append should be "
                "refused with SessionBusy. It was taken: the undo let go of the "
                "session it had taken over"))
        finally:
            other.close()
    finally:
        log.close()
    resumed = resume(lesson, sessions)
    assert resumed == turn_c, (
        "an agent whose log had been closed undid its last turn; a new process "
        "resuming the session should then show the first turn alone, as the agent "
        f"does, and it shows {[message.get('content') for message in resumed]}: the "
        "undo changed the agent's memory but not the log")


@pytest.mark.task("07.3")
def test_a_refused_undo_of_an_agent_whose_log_was_closed_takes_no_session(lesson,
                                                                          sessions):
    """Day 2 played a turn and its log was closed (its with block ended); the user then
    asks to undo more turns than there are. The refusal changes nothing: the agent's
    log, closed, is not made the session's writer by it, so another writer may take
    the session as before; and the next undo, of the one turn, still takes it back."""
    [turn_c] = play(lesson, sessions, TURN_C)
    agent, _, log = open_agent(lesson, sessions, TURN_D[1])
    with log:
        agent.run(TURN_D[0])
    try:
        with raises(lesson.UndoError,
                    "undo(turns=3) was allowed on a conversation of two turns"):
            agent.undo(turns=3)
        free = another_writer_takes(lesson, sessions, "quest-1")
        agent.undo(1)
    finally:
        log.close()
    assert free, (
        "the agent's log was closed, and its undo(turns=3) was refused (the "
        "conversation has two turns), as it should be; yet another writer could not "
        "take the session after it (SessionBusy): the refusal made the agent's log "
        "the session's writer again. A refused undo changes nothing: the count is "
        "judged on the agent's own conversation before the log is asked anything")
    resumed = resume(lesson, sessions)
    assert resumed == turn_c, (
        "after the refusal, the undo of the one turn should take it back in the log: "
        "a new process should show the first turn alone; it shows "
        f"{[message.get('content') for message in resumed]}")


@pytest.mark.task("07.3")
def test_an_agent_does_not_undo_a_turn_another_writer_added_since(lesson, sessions):
    """Day 2 played a turn and its log was closed, an instruction for the next turn
    still pending (a developer message, which goes with the turn before it); then day
    3, another agent on the same session, played a turn of its own. Day 2's undo must
    not take day 3's turn back (the log's last turn), nor drop its own from memory
    alone: it raises `UndoError`, naming the session, and the log, the agent's
    conversation and what it holds pending stay as they were."""
    agent, _, log = open_agent(lesson, sessions, TURN_C[1])
    with log:
        agent.run(TURN_C[0])
    note = {"role": "developer", "content": "Answer the next question in one line."}
    agent.record(note)
    [turn_c] = [list(agent.messages)]
    path = sessions / "quest-1.jsonl"
    try:
        [turn_d] = play(lesson, sessions, TURN_D)
        before = path.read_bytes()
        with raises(lesson.UndoError, (
                "an agent played a turn and its log was closed, then recorded an "
                "instruction, still pending; another agent then played a turn on the "
                "same session; the first agent's undo(1) should raise UndoError, since "
                "the log's last turn is not its own (the agent says what it wrote, "
                "whatever it holds pending)")) as raised:
            agent.undo(1)
    finally:
        log.close()
    said = str(raised.value).replace(str(sessions), "")
    assert "quest-1" in said, (
        "the undo was refused, as it should be, but its words do not name the session "
        "whose log another writer added to (quest-1): the user must resume that "
        "session to see it as it is before undoing, and a program with several "
        f"sessions cannot tell which one from: {raised.value}")
    assert path.read_bytes() == before, (
        "a refused undo should write nothing; the log changed:\n"
        f"{path.read_bytes()[len(before):]!r}")
    assert agent.messages == turn_c, (
        "a refused undo should leave the agent's conversation as it was, its turn "
        "and its pending instruction included; it holds "
        f"{[message.get('content') for message in agent.messages]}")
    assert agent.pending == [note], (
        "a refused undo should leave what is pending as it was, the instruction; it "
        f"holds {agent.pending}")
    resumed = resume(lesson, sessions)
    assert resumed == turn_c[:-1] + turn_d, (
        "a new process should still see both turns, the first agent's and the "
        f"other's; it sees {[message.get('content') for message in resumed]}")


@pytest.mark.task("07.3")
def test_an_agent_does_not_undo_a_turn_before_the_one_another_writer_undid(lesson,
                                                                           sessions):
    """Day 2 played two turns and its log was closed; then another agent on the same
    session took day 2's last turn back. Day 2's undo must not take the turn before it
    back (the log's last turn now, but not the one day 2 meant) while dropping from
    memory the turn already gone: the log shows fewer messages than the agent saw, so
    it raises `UndoError`, and the log and the agent's conversation stay as they
    were."""
    agent, _, log = open_agent(lesson, sessions, TURN_C[1] + TURN_D[1])
    with log:
        agent.run(TURN_C[0])
        turn_c = list(agent.messages)
        agent.run(TURN_D[0])
    both = list(agent.messages)
    path = sessions / "quest-1.jsonl"
    try:
        other, _, other_log = open_agent(lesson, sessions)
        with other_log:
            other.undo(1)
        before = path.read_bytes()
        with raises(lesson.UndoError, (
                "an agent played two turns and its log was closed; another agent on "
                "the same session then undid the last of them; the first agent's "
                "undo(1) should raise UndoError: the log shows fewer messages than the "
                "agent saw, so its last turn is gone already and the one the log shows "
                "last is not the one it meant to take back")):
            agent.undo(1)
    finally:
        log.close()
    assert path.read_bytes() == before, (
        "a refused undo should write nothing; the log changed:\n"
        f"{path.read_bytes()[len(before):]!r}")
    assert agent.messages == both, (
        "a refused undo should leave the agent's conversation as it was, both turns; "
        f"it holds {[message.get('content') for message in agent.messages]}")
    resumed = resume(lesson, sessions)
    assert resumed == turn_c, (
        "a new process should still see the first turn, which no one meant to take "
        f"back; it sees {[message.get('content') for message in resumed]}")


@pytest.mark.task("07.3")
def test_an_agent_does_not_undo_a_turn_another_agent_played_on_its_log_object(
        lesson, sessions):
    """A program keeps one log object open and starts a new agent on it for each task:
    the first agent plays a turn, then the second, on the same log object, plays one.
    The first agent's undo must not take the second's turn back (the log's last turn
    is not its own, though its log object wrote it): it raises `UndoError`, and the
    log, the agent's conversation and the log object stay as they were: still the
    session's writer, which the second agent goes on writing with."""
    path = sessions / "quest-1.jsonl"
    first_model = ScriptedModel(list(TURN_C[1]))
    second_model = ScriptedModel(list(TURN_D[1]))
    with lesson.SessionLog(sessions, "quest-1") as log:
        first = lesson.Agent(first_model.client(), model=first_model.model,
                             tools=Town(), session=log)
        first.run(TURN_C[0])
        turn_c = list(first.messages)
        second = lesson.Agent(second_model.client(), model=second_model.model,
                              tools=Town(), session=log)
        second.run(TURN_D[0])
        before = path.read_bytes()
        with raises(lesson.UndoError, (
                "one log object served two agents in turn: the first played a turn, "
                "then the second played one on the same log object; the first "
                "agent's undo(1) should raise UndoError, since the log's last turn is "
                "the second agent's, not its own (the agent says how many messages it "
                "wrote, not how many its log object shows)")):
            first.undo(1)
        intruder = another_writer_tries(lesson, sessions)
    if intruder != "SessionBusy":
        fail_in("07.1" if log_refusal_lets_go(lesson, sessions) else "07.3", (
            "the first agent's undo was refused, as it should be; the log object it "
            "shares with the second agent was open, the session's writer, and was not "
            "closed since, so another writer's append should be refused with "
            f"SessionBusy; it got: {intruder}. A refused undo changes nothing: it "
            "leaves the log object open, the second agent's too"))
    assert path.read_bytes() == before, (
        "a refused undo should write nothing; the log changed:\n"
        f"{path.read_bytes()[len(before):]!r}")
    assert first.messages == turn_c, (
        "a refused undo should leave the agent's conversation as it was; it holds "
        f"{[message.get('content') for message in first.messages]}")


@pytest.mark.task("07.3")
def test_a_conversation_held_before_an_undo_shows_the_undo(lesson, sessions):
    """The agent's conversation is one list, changed in place by record and by undo
    alike: a window that shows agent.messages, holding it since before the undo, shows
    the turn gone."""
    agent, _, log = open_agent(lesson, sessions, [*TURN_C[1], *TURN_D[1]])
    with log:
        agent.run(TURN_C[0])
        agent.run(TURN_D[0])
        held = agent.messages
        agent.undo(1)
        kept = list(agent.messages)
    assert held == kept, (
        "a caller held the agent's conversation (agent.messages) before an undo of one "
        f"turn; after it, the list it holds has {len(held)} messages while the agent's "
        f"has {len(kept)}: the undo made a new list instead of taking the turn out of "
        "the one the agent keeps, so whoever shows the conversation still shows the "
        "turn taken back")


@pytest.mark.task("07.3")
def test_a_developer_note_between_turns_goes_with_the_turn_before_it(lesson, sessions):
    """An instruction given between turns, in a "developer" message (newer models'
    system prompt) or a system message, starts no turn: it goes with the turn before
    it, and undo() takes back that whole turn, the instruction with it."""
    agent, model, log = open_agent(lesson, sessions, TURN_C[1] + TURN_D[1])
    with log:
        agent.run(TURN_C[0])
        turn_c = list(agent.messages)
        agent.run(TURN_D[0])
        for role in ("developer", "system"):
            agent.record({"role": role, "content": "Speak like a town crier."})
        last_turn = agent.messages[len(turn_c):]
        taken = agent.undo()
        kept = list(agent.messages)
    assert taken == last_turn and kept == turn_c, (
        "the last turn starts at the user's 'Wait for dawn.'; a developer's or a "
        "system message given after it starts none, so undo() should take back "
        f"{[m.get('content') for m in last_turn]} and keep the turn before; it took "
        f"back {[m.get('content') for m in taken]} and kept "
        f"{[m.get('content') for m in kept]}")
    assert resume(lesson, sessions) == turn_c, (
        "a new process should see the turn before the one undone, and nothing of the "
        "turn undone or of the instruction given after it")


@pytest.mark.task("07.1")
def test_every_undo_lists_its_indices_oldest_first(lesson, sessions):
    """Undos of 1 to 8 messages in a row, from a log of 40: each returns the indices it
    took back, oldest first, and its marker lists them. (The order of a set of indices
    is not that order: a set of 7 and 8 gives 8 first.)"""
    said = [{"role": "user", "content": f"message {n}"} for n in range(40)]
    write_log(sessions, said)
    left = len(said)
    with lesson.SessionLog(sessions, "quest-1") as log:
        for count in range(1, 9):
            taken = log.undo(count)
            expected = list(range(left - count, left))
            left -= count
            markers = markers_in(sessions / "quest-1.jsonl")
            skip = markers[-1].get("skip") if markers else None
            assert taken == expected and sorted(skip or []) == expected, (
                f"undo({count}) of a log showing messages 0 to {left + count - 1} "
                f"should take back {expected} with a marker that lists them, and "
                f"return them oldest first; it returned {taken}, and the log's last "
                f"marker lists {skip}")


@pytest.mark.task("07.1")
def test_an_undo_of_a_closed_writer_holds_the_session_until_it_closes(lesson,
                                                                       sessions):
    """A writer that was closed is no writer: its undo becomes the writer again, as an
    append does, and stays the writer, holding the session's lock, until it is closed,
    whether the undo is then refused (a count above what the log shows) or not.
    Another writer that comes meanwhile is refused with SessionBusy (one writer at a
    time, lesson 05), and gets in once the first one closes."""
    said = [{"role": "user", "content": f"message {n}"} for n in range(4)]
    log = lesson.SessionLog(sessions, "quest-1")
    try:
        for message in said[:3]:
            log.append(message)
        log.close()
        with raises(lesson.UndoError,
                    "a closed writer's undo(5) of a log showing three messages "
                    "returned: it should be refused with UndoError"):
            log.undo(5)
        other = lesson.SessionLog(sessions, "quest-1")
        try:
            with raises(lesson.SessionBusy,
                        "a closed writer's undo(5) became the writer again and was "
                        "refused (the log shows three messages); it was not closed "
                        "since, so it still holds the session's lock, refused or not, "
                        "and another writer's append should be refused; it was taken, "
                        "so the refusal let go of the session"):
                other.append(said[3])
        finally:
            other.close()
        log.close()
        log.undo(1)
        other = lesson.SessionLog(sessions, "quest-1")
        try:
            with raises(lesson.SessionBusy,
                        "a closed writer's undo(1) has just become the writer again, "
                        "and it was not closed since: it still holds the session's "
                        "lock, so another writer's append should be refused; it was "
                        "taken, so the undo let go of the session it had become the "
                        "writer of"):
                other.append(said[3])
        finally:
            other.close()
    finally:
        log.close()
    with lesson.SessionLog(sessions, "quest-1") as other:
        other.append(said[3])
    shown = lesson.SessionLog(sessions, "quest-1").load()
    assert shown == [said[0], said[1], said[3]], (
        "once the first writer closed, another writer should get in and append: the "
        f"log should show messages 0, 1 and 3; it shows "
        f"{[message.get('content') for message in shown]}")
    # An empty log (a writer that crashed before its first line left it) is a log:
    # the undo becomes its writer, and is refused, holding the session all the same
    (sessions / "empty.jsonl").write_bytes(b"")
    log = lesson.SessionLog(sessions, "empty")
    try:
        with raises(lesson.UndoError,
                    "undo(1) of a session whose log is empty returned: it shows no "
                    "message to take back, so it should be refused with UndoError"):
            log.undo(1)
        other = lesson.SessionLog(sessions, "empty")
        try:
            with raises(lesson.SessionBusy,
                        "undo(1) of a session whose log exists, empty, was refused; "
                        "the log exists, so the undo became its writer, as an append "
                        "does, and holds the session until it is closed: another "
                        "writer's append should be refused with SessionBusy. It was "
                        "taken, so the undo took the empty log for no log at all"):
                other.append(said[0])
        finally:
            other.close()
    finally:
        log.close()


@pytest.mark.task("07.1")
def test_undos_of_a_closed_writer_leave_no_descriptor_open(lesson, sessions):
    """An undo of a closed writer becomes the writer, and close() lets go of it: two
    hundred undos, each closed after, leave the process holding no more file
    descriptors than before. (Each one left open would, in a long-lived program, end
    with no descriptor left to open a file.)"""
    said = [{"role": "user", "content": f"message {n}"} for n in range(250)]
    write_log(sessions, said)
    log = lesson.SessionLog(sessions, "quest-1")
    log.undo(1)     # anything opened once, for good, is opened now
    log.close()
    before = open_descriptors()
    for _ in range(200):
        try:
            log.undo(1)
        finally:
            log.close()
    after = open_descriptors()
    assert after <= before, (
        f"after 200 undos of a closed writer, each closed after it, the process holds "
        f"{after - before} more file descriptors than before ({before} then {after}): "
        "something each undo opened is never closed")


@pytest.mark.task("07.1")
def test_an_undo_takes_back_a_message_whose_blob_is_lost(lesson, sessions):
    """A pasted text went to a blob, and the blob was lost since (or damaged). The user
    takes that turn back: the undo goes by the log's lines and the writer's own record,
    and reads no blob, so it takes the turn back, and the log then loads again. (Only
    the content of a message shown is read back from its blob, by load.)"""
    said = [{"role": "user", "content": "Ask the guard."},
            {"role": "assistant", "content": "The guard opens at dawn."},
            {"role": "user", "content": "Read this letter: " + "Dear elder. " * 1000},
            {"role": "assistant", "content": "A long letter."}]
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in said:
            log.append(message)
    for blob in (sessions / "blobs").iterdir():
        blob.write_bytes(b"not the letter")
    log = lesson.SessionLog(sessions, "quest-1")
    try:
        taken = log.undo(2)
    except NotImplementedError:
        raise
    except Exception as error:
        pytest.fail(f"undo(2) of a log whose last two messages are a pasted letter "
                    f"(its blob damaged since) and its answer raised "
                    f"{type(error).__name__} ({error}): an undo reads no blob, it "
                    "takes the messages back by their lines", pytrace=False)
    finally:
        log.close()
    shown = lesson.SessionLog(sessions, "quest-1").load()
    assert taken == [2, 3] and shown == said[:2], (
        "undo(2) should take back messages 2 and 3 (the letter and its answer), and "
        f"the log should then show the first two; it took back {taken}, and the log "
        f"shows {[str(message.get('content'))[:40] for message in shown]}")


@pytest.mark.task("07.2")
@pytest.mark.parametrize("threshold", [100, 100_000],
                         ids=["a smaller blob threshold", "a larger blob threshold"])
def test_record_measures_a_line_by_the_sessions_own_blob_threshold(lesson, sessions,
                                                                   monkeypatch,
                                                                   threshold):
    """A session may be made with a blob threshold of its own (`blob_threshold`), and
    its append stores apart the contents over that one, not over the course's default
    of 4,096 bytes. So whether record refuses a message too long for one write (made
    3,000 bytes here) goes by that threshold too: with a threshold of 100, a content of
    3,500 letters goes to a blob, its line is short, and the message is taken; with a
    threshold of 100,000, a content of 5,000 letters stays in its line, too long for
    one write, and is refused at once."""
    limit = 3000
    for name, module in list(sys.modules.items()):
        if name.startswith(f"{lesson.__name__}.") and hasattr(module, "MAX_WRITE"):
            monkeypatch.setattr(module, "MAX_WRITE", limit)
    path = sessions / "quest-1.jsonl"
    model = ScriptedModel([])
    log = lesson.SessionLog(sessions, "quest-1", blob_threshold=threshold)
    with log:
        agent = lesson.Agent(model.client(), model=model.model, tools=Town(),
                             session=log)
        if threshold < 4096:
            message = {"role": "user", "content": "a" * 3500}
            try:
                agent.record(message)
                agent.flush()
            except NotImplementedError:
                raise
            except Exception as error:
                pytest.fail(f"a session whose blob threshold is {threshold} bytes "
                            f"stores a content of 3,500 letters as a blob, so its "
                            f"line is short; record() or flush() raised "
                            f"{type(error).__name__} ({error}) as if the content "
                            "stayed in its line, too long for one write", pytrace=False)
            written = lines_of(path)
            assert (len(written) == 1
                    and isinstance(written[0].get("content"), dict)), (
                "the message should be written, its content stored as a blob; the "
                f"log holds {[str(entry)[:80] for entry in written]}")
        else:
            message = {"role": "user", "content": "a" * 5000}
            with raises(ValueError,
                        f"record() accepted a content of 5,000 letters in a session "
                        f"whose blob threshold is {threshold} bytes: the log keeps "
                        f"that content in its line, longer than the {limit} bytes one "
                        "write can take here, and its append refuses that line"):
                agent.record(message)
            assert agent.messages == [] and agent.pending == [], (
                "a refused message must change nothing: the agent holds "
                f"{len(agent.messages)} message(s), {len(agent.pending)} pending")
            agent.flush()
            assert not path.exists(), "a refused message leaves no log behind"


@pytest.mark.task("07.4")
def test_forks_leave_no_descriptor_open(lesson, sessions):
    """A fork opens its source and closes it, whatever it has to read: two hundred
    forks, of a log another program wrote (a marker past the cut takes back a message
    before it, so a fork of the first k replays what it copies) and of one this
    lesson's writer made, leave the process holding no more file descriptors than
    before."""
    said = [{"role": "user" if n % 2 == 0 else "assistant", "content": f"message {n}"}
            for n in range(5)]
    write_log(sessions, [*said[:4], undo_marker(1), said[4], undo_marker(3)])
    with lesson.SessionLog(sessions, "plain") as log:
        for message in said:
            log.append(message)
        log.undo(1)
    lesson.fork(sessions, "quest-1", "first", upto=2)
    before = open_descriptors()
    for n in range(200):
        source, upto = [("quest-1", 2), ("quest-1", 3), ("quest-1", None),
                        ("plain", 2), ("plain", None)][n % 5]
        lesson.fork(sessions, source, f"fork-{n}", upto=upto)
    after = open_descriptors()
    assert after <= before, (
        f"after 200 forks the process holds {after - before} more file descriptors "
        f"than before ({before} then {after}): something a fork opened is never "
        "closed")


# Called with the path of every file opened in this process while it is set (an audit
# hook sees os.open, open() and Path.read_bytes alike, before the file is opened).
_on_open = None


def _audit(event, args):
    if event == "open" and _on_open is not None and args and isinstance(
            args[0], (str, bytes, os.PathLike)):
        _on_open(os.path.abspath(os.fsdecode(args[0])))


sys.addaudithook(_audit)


@pytest.mark.task("07.4")
def test_a_fork_is_made_from_the_source_file_it_opened(lesson, sessions):
    """Another process replaces the source's log under its name (an erasure that
    rewrites it, a restore) while a fork of it is being made, after the fork opened it.
    The fork is made from the file it opened, as that file shows: its lines, and the
    messages it shows, are those of the source the fork began with. The log of another
    program is used, whose marker past the cut takes back a message before it."""
    global _on_open
    said = [{"role": "user" if n % 2 == 0 else "assistant", "content": f"message {n}"}
            for n in range(5)]
    write_log(sessions, [*said[:4], undo_marker(1), said[4], undo_marker(3)])
    source = sessions / "quest-1.jsonl"
    original = source.read_bytes()
    rewritten = sessions / "rewritten.tmp"
    rewritten.write_bytes(original.split(b"\n")[0] + b"\n")   # message 0 alone
    opened = []

    def on_open(path):
        if path == str(source):
            opened.append(path)
            if len(opened) == 2:     # the fork opened it once already
                os.replace(rewritten, source)

    _on_open = on_open
    try:
        lesson.fork(sessions, "quest-1", "fork-1", upto=2)
    finally:
        _on_open = None
    copied = (sessions / "fork-1.jsonl").read_bytes()
    def a_marker(line):
        try:
            return "$marker" in json.loads(line)
        except ValueError:
            return False

    # Every message line the fork holds is a line of the file it opened, as it is
    foreign = [line for line in copied.split(b"\n")
               if line and line not in original.split(b"\n") and not a_marker(line)]
    loaded = lesson.SessionLog(sessions, "fork-1").load()
    if foreign or loaded != [said[0], said[2]]:
        fail_in("07.4", "the source's log was replaced under its name by another file "
                "while a fork of its first 2 messages was made, after the fork opened "
                f"it; the fork holds {copied!r} and shows "
                f"{[m.get('content') for m in loaded]}, where the file it opened shows "
                "['message 0', 'message 2'] (message 1 taken back by a marker past the "
                "cut). Read the source through the file the fork opened, never again "
                "by its name: the name may reach another file by then")


# Lines another program wrote: its own spacing, key order and escapes, numbers as it
# wrote them, keys and a marker kind this code does not use. Message 2 is undone.
FOREIGN_LINES = [
    b'{"content": "caf\\u00e9 \\u2028 near the well", "role": "user", '
    b'"weight": 1.0, "id": 123456789012345678901234567890}\n',
    '{ "role" : "assistant","content":"Hi \u2028 there.", "reasoning": '
    '{"steps": [1.0, 2E3]}, "refusal": null }\n'.encode(),
    b'{"$marker": "bookmark", "name": "before the cave"}\n',
    b'{"role":"user","content":"Thank the elder.","name":"Ana"}\n',
    b'{"$marker":"undo","skip":[2],"at":"2026-01-01T00:00:00+00:00"}\n',
    b'{"role": "assistant", "content": "The elder nods.", "x-trace": "a\\"b\\\\c"}\n',
]


@pytest.mark.task("07.4")
@pytest.mark.parametrize("upto", [None, 3, 2, 1])
def test_a_fork_copies_each_line_it_keeps_byte_for_byte(lesson, sessions, upto):
    """A fork reads its source, it never mends it (lesson 03): each message line it
    keeps is the source's line as it is, byte for byte, whoever wrote it, with its
    spacing, its key order, its escapes (\\u00e9, \\u2028), its numbers (1.0 stays
    1.0, a big integer whole), and keys this code does not use; a whole fork holds
    every line, markers of kinds this code does not know included. Written anew, a
    line would say the same thing in other bytes."""
    path = sessions / "quest-1.jsonl"
    path.write_bytes(b"".join(FOREIGN_LINES))
    try:
        lesson.fork(sessions, "quest-1", "fork-1", upto=upto)
    except NotImplementedError:
        raise       # a task not written yet: said as such
    except Exception as error:
        pytest.fail(f"fork(upto={upto}) of a log another program wrote raised "
                    f"{type(error).__name__}: {error}; the log loads, so its fork "
                    "should be made", pytrace=False)
    copied = (sessions / "fork-1.jsonl").read_bytes()
    if upto is None:
        expected = b"".join(FOREIGN_LINES)
        assert copied == expected, (
            f"a whole fork should hold the source's {len(FOREIGN_LINES)} lines as "
            f"they are, byte for byte ({len(expected)} bytes); it holds "
            f"{copied!r}")
    # The lines of the messages shown: 0, 1 and 3 (message 2 is undone)
    for line in [FOREIGN_LINES[n] for n in (0, 1, 5)][:upto or 3]:
        assert line in copied, (
            f"fork(upto={upto}) should hold the line {line!r} of a message it keeps "
            f"as it is in the source, byte for byte; the fork holds {copied!r}")


@pytest.mark.task("07.3")
@pytest.mark.parametrize("first", ["developer", "system", "assistant"])
def test_undoing_every_turn_keeps_what_came_before_the_first(lesson, sessions, first):
    """A turn starts at a user message, so a message before the first user message (a
    developer's instruction, a system note or a greeting another program wrote) is no
    part of any turn: undoing every turn there is, written or pending, takes back the
    turns and keeps it, in memory and in the log; one turn more is refused, as there is
    no such turn, and changes nothing."""
    before = {"role": first, "content": "Speak like a town crier."}
    write_log(sessions, [before, {"role": "user", "content": TURN_C[0]},
                         {"role": "assistant", "content": "The elder nods."}])
    agent, model, log = open_agent(lesson, sessions, TURN_D[1])
    with log:
        agent.run(TURN_D[0])
        agent.record({"role": "user", "content": "And a note."})
        held = list(agent.messages)
        with raises(lesson.UndoError,
                    f"undo(4) was allowed on a conversation of three turns after a "
                    f"{first} message: that message starts no turn, so there is no "
                    "fourth turn to take back, and the undo should be refused"):
            agent.undo(4)
        assert agent.messages == held, (
            f"a refused undo(4) should leave the conversation as it was; it holds "
            f"{[m.get('content') for m in agent.messages]}")
        taken = agent.undo(3)
        kept = list(agent.messages)
    assert kept == [before] and len(taken) == 5, (
        f"undo(3) of a conversation whose three turns follow a {first} message should "
        f"take back the five messages of the turns and keep that {first} message; it "
        f"took back {[m.get('content') for m in taken]} and kept "
        f"{[m.get('content') for m in kept]}")
    resumed = resume(lesson, sessions)
    assert resumed == [before], (
        f"a new process should see the {first} message written before the first turn, "
        f"and nothing of the turns undone; it sees "
        f"{[m.get('content') for m in resumed]}")


@pytest.mark.task("07.2")
def test_a_recorded_message_keeps_every_key_it_was_given(lesson, sessions):
    """record keeps a message as it was given, every key of it: a provider's
    "reasoning" or "refusal", a user's "name", a field this code does not use. In
    memory at once, in the log once flushed, and in what a new process resumes."""
    note = {"role": "user", "content": "A note.", "name": "Ana",
            "x-origin": {"app": "map", "v": 1.0}}
    said = {"role": "assistant", "content": "Noted.", "reasoning": "It is a note.",
            "refusal": None}
    agent, model, log = open_agent(lesson, sessions)
    with log:
        for message in (note, said):
            agent.record(dict(message))
        in_memory = list(agent.messages)
        agent.flush()
    written = [line for line in lines_of(sessions / "quest-1.jsonl")
               if "$marker" not in line]
    for where, got in (("in memory", in_memory), ("in the log", written),
                       ("after a resume", resume(lesson, sessions))):
        assert got == [note, said], (
            f"the messages recorded should be kept {where} with every key they were "
            f"given, {[note, said]}; {where} they are {got}")


@pytest.mark.task("07.2")
def test_a_message_recorded_twice_is_kept_twice(lesson, sessions):
    """record() keeps every message it is given, the very same dict given twice too (a
    note pasted twice, a program that reuses its message): the conversation and the
    buffer hold it twice, and the log then does too, in order. Recording is no place
    to judge a repeat: the user said it twice, and the model is told so."""
    turn_c, = play(lesson, sessions, TURN_C)
    note = {"role": "user", "content": "(note, pasted) A lantern costs 8 gold."}
    agent, _, log = open_agent(lesson, sessions, TURN_D[1])
    with log:
        agent.record(note)
        agent.record(note)
        recorded = agent.messages[len(turn_c):]
        waiting = list(agent.pending)
        agent.run(TURN_D[0])
    assert recorded == [note, note] and waiting == [note, note], (
        "the same note was recorded twice: the conversation should end with it twice, "
        "and the buffer hold it twice, as given; the conversation gained "
        f"{len(recorded)} message(s) and the buffer holds {len(waiting)}. A second "
        "call of record() with the same message is a message said again, not a "
        "mistake to skip")
    logged = lines_of(sessions / "quest-1.jsonl")[len(turn_c):len(turn_c) + 3]
    assert logged == [note, note, {"role": "user", "content": TURN_D[0]}], (
        "after the next turn the log should hold the note twice, then the next "
        f"question; it holds {[m.get('content') for m in logged]}")


@pytest.mark.task("07.3")
@pytest.mark.parametrize("closed", [False, True],
                         ids=["its log open", "its log closed"])
def test_an_agent_undo_reads_no_blob_of_the_turns_it_keeps(lesson, sessions, closed):
    """A letter the user pasted went to a blob, and the blob was damaged since (a disk
    error, a clean-up). The user takes back the turn after it: the agent's undo goes by
    its own conversation and the log's writer, reading no blob, so it succeeds, and
    the conversation keeps the letter's turn as the agent holds it. (Rebuilding the
    conversation from the log would read the damaged blob, and fail after the marker
    was written: the log and the agent would then disagree.) The same when the agent's
    log was closed before the undo: becoming the writer again reads the log's lines,
    as the log's own undo does, not the history with its blobs, which the agent
    holds already."""
    letter = "Read this letter: " + "Dear elder. " * 1000
    agent, _, log = open_agent(
        lesson, sessions, [say("A long letter."), *TURN_C[1]])
    path = sessions / "quest-1.jsonl"
    with log:
        agent.run(letter)
        agent.run(TURN_C[0])
        kept = list(agent.messages[:2])
        if closed:
            log.close()     # day 2's with block ended: the undo takes the log over
        for blob in (sessions / "blobs").iterdir():
            blob.write_bytes(b"not the letter")
        try:
            taken = agent.undo(1)
        except NotImplementedError:
            raise
        except Exception as error:
            pytest.fail(
                f"undo(1) of the turn after a pasted letter, whose blob was damaged "
                f"since, raised {type(error).__name__} ({error}): the undo takes the "
                "last turn back by the agent's conversation and the log's writer, and "
                "needs no blob of a turn it keeps", pytrace=False)
        after = list(agent.messages)
    # In any order: a marker names a set of messages
    skip = [sorted(m.get("skip")) for m in markers_in(path)
            if m.get("$marker") == "undo"]
    taken = [m.get("content") for m in taken]
    assert after == kept and taken == [TURN_C[0], "The elder nods."] and skip == [
            [2, 3]], (
        "undo(1) should take back the last turn (messages 2 and 3, one marker "
        "naming them) and leave the letter and its answer in the conversation as "
        f"they were; the conversation holds {len(after)} message(s), the undo "
        f"returned {taken}, and the undo markers name {skip}")


@pytest.mark.task("07.2")
def test_a_flush_after_the_log_was_closed_reads_no_blob(lesson, sessions):
    """A letter the user pasted went to a blob; then day 2's with block ended, closing
    the agent's log, and the blob was damaged since (a disk error, a clean-up). The
    user pastes a note, and the agent flushes it: the flush makes the log the
    session's writer again, as an append does, which reads the log's lines (lesson
    04's repair needs them), not the history with its blobs, which the agent holds
    already. The note is written, once, after the letter's turn."""
    letter = "Read this letter: " + "Dear elder. " * 1000
    note = {"role": "user", "content": "(a note, pasted)"}
    agent, _, log = open_agent(lesson, sessions, [say("A long letter.")])
    path = sessions / "quest-1.jsonl"
    with log:
        agent.run(letter)
    try:
        for blob in (sessions / "blobs").iterdir():
            blob.write_bytes(b"not the letter")
        agent.record(note)
        try:
            agent.flush()
        except NotImplementedError:
            raise
        except Exception as error:
            pytest.fail(
                f"the flush of a note, after the agent's log was closed and the blob "
                f"of a pasted letter damaged, raised {type(error).__name__} "
                f"({error}): the flush writes the note with the log's append, which "
                "becomes the writer again reading the log's lines, not the blobs of a "
                "history the agent holds already", pytrace=False)
    finally:
        log.close()
    written = lines_of(path)[2:]
    assert written == [note], (
        "after the flush, the log should hold the letter's turn, then the note, once; "
        f"after the letter's turn it holds {[m.get('content') for m in written]}")


@pytest.mark.task("07.1")
def test_an_undo_of_a_closed_writer_waits_its_turn_on_a_busy_session(lesson, sessions):
    """A writer that was closed must become the writer again to undo, and another
    writer holds the session meanwhile: the undo is refused with the lock's own
    SessionBusy (lesson 05: one writer at a time), as an append would be, writing
    nothing. It is no UndoError: there is something to undo, only not yet, and a caller
    that waits and tries again on SessionBusy does; once the other writer closes, the
    same undo takes back the last message."""
    said = [{"role": "user", "content": f"message {n}"} for n in range(3)]
    path = sessions / "quest-1.jsonl"
    log = lesson.SessionLog(sessions, "quest-1")
    try:
        for message in said:
            log.append(message)
        log.close()
        before = path.read_bytes()
        holder = lesson.SessionLog(sessions, "quest-1")
        try:
            holder.open_for_append()
            with raises(lesson.SessionBusy,
                        "undo(1) of a closed writer, while another writer holds the "
                        "session, did not raise SessionBusy: it must become the writer "
                        "to undo, and the session is busy; the lock's refusal reaches "
                        "the caller as it is (an UndoError would say there is nothing "
                        "to undo, when there is, once the other writer is done)"):
                log.undo(1)
        finally:
            holder.close()
        assert path.read_bytes() == before, (
            "the undo was refused (the session was busy), so it should have written "
            "nothing to the log")
        taken = log.undo(1)
    finally:
        log.close()
    shown = lesson.SessionLog(sessions, "quest-1").load()
    assert taken == [2] and shown == said[:2], (
        "once the other writer closed, the same undo(1) should take back message 2, "
        f"and the log then show messages 0 and 1; it took back {taken}, and the log "
        f"shows {[message.get('content') for message in shown]}")


def damaged_by_another_program(path):
    """Another program adds a whole line that is no JSON to the log, after the last
    writer closed it (damage, not a crash: lesson 04 refuses to guess). Returns the
    log's bytes as they were, to mend it with."""
    before = path.read_bytes()
    path.write_bytes(before + b"not a message, written by another program\n")
    return before


@pytest.mark.task("07.1")
def test_an_undo_of_a_closed_writer_whose_log_was_damaged_raises_the_logs_error(
        lesson, sessions):
    """A writer appended three messages and was closed; another program then added a
    line that is no JSON. The undo must become the writer again, which reads the log
    (lesson 04), and that read refuses the damaged log with `CorruptLog`, naming the
    line: the undo raises that very error, writing nothing. It is no `UndoError`:
    there is something to take back, once the line is mended, and the caller must learn
    what is wrong and where. Once the log is mended, the same undo takes back the
    last message."""
    said = [{"role": "user", "content": f"message {n}"} for n in range(3)]
    path = sessions / "quest-1.jsonl"
    log = lesson.SessionLog(sessions, "quest-1")
    try:
        for message in said:
            log.append(message)
        log.close()
        mended = damaged_by_another_program(path)
        damaged = path.read_bytes()
        try:
            log.undo(1)
            raised = None
        except NotImplementedError:
            raise
        except Exception as error:
            raised = error
        assert isinstance(raised, lesson.CorruptLog), (
            "undo(1) of a closed writer whose log another program damaged since (a "
            "whole fourth line that is no JSON) should raise the CorruptLog the "
            "writer's read of the log raises, naming that line, so that the user "
            "knows what to mend; it "
            + ("returned" if raised is None else
               f"raised {type(raised).__name__} ({raised})")
            + ". An UndoError would say there is nothing to take back, when there is")
        assert path.read_bytes() == damaged, (
            "the undo of a damaged log failed, and should have written nothing; the "
            f"log gained {path.read_bytes()[len(damaged):]!r}")
        path.write_bytes(mended)
        taken = log.undo(1)
    finally:
        log.close()
    shown = lesson.SessionLog(sessions, "quest-1").load()
    assert taken == [2] and shown == said[:2], (
        "once the damaged line was removed, the same undo(1) should take back message "
        f"2, and the log then show messages 0 and 1; it took back {taken}, and the "
        f"log shows {[message.get('content') for message in shown]}")


def agent_undo_refused(agent, before, error, where, why_not, not_this):
    """The agent's undo of its last turn, `where` (the log cannot record it then):
    it must raise `error`, the log's own, and leave the conversation as `before`.
    `why_not` says why the log could not, `not_this` what a wrong error hides."""
    try:
        agent.undo(1)
        raised = None
    except NotImplementedError:
        raise
    except Exception as caught:     # noqa: BLE001 - judged below
        raised = caught
    after = list(agent.messages)
    assert raised is not None and after == before, (
        f"the agent's undo of its last turn, {where}, "
        + ("returned" if raised is None else
           f"raised {type(raised).__name__} ({raised})")
        + f", and the conversation went from {len(before)} to {len(after)} messages: "
        f"the log could not record the undo{why_not}, so the undo should fail and the "
        "agent remember the turn the log still shows")
    assert isinstance(raised, error), (
        "the agent's undo failed, as it should, but with "
        f"{type(raised).__name__} ({raised}), {not_this}")


def first_turn_left(lesson, sessions, agent, before, once):
    """After the undo that was refused goes through (`once` what stood in its way was
    gone): the last turn is taken back in memory and in the log alike."""
    shown = resume(lesson, sessions)
    assert agent.messages == before[:2] and shown == before[:2], (
        f"{once}, the undo should take back the last turn in memory and in the log: "
        f"the agent holds {len(agent.messages)} messages and a resume shows "
        f"{len(shown)}, where both should hold the first turn's 2")


@pytest.mark.task("07.3")
def test_an_agent_undo_on_a_busy_session_changes_nothing(lesson, sessions):
    """The agent's log was closed, and another writer holds the session when the user
    takes back the last turn: the log cannot record the undo now, so the agent's undo
    fails with the log's error and forgets nothing (its next request, and a new
    process resuming the session, would otherwise disagree). Once the other writer
    closes, the same undo takes the turn back, in memory and in the log alike."""
    agent, _, log = open_agent(lesson, sessions, [*TURN_C[1], *TURN_D[1]])
    with log:
        agent.run(TURN_C[0])
        agent.run(TURN_D[0])
    before = list(agent.messages)
    holder = lesson.SessionLog(sessions, "quest-1")
    try:
        holder.open_for_append()
        agent_undo_refused(
            agent, before, lesson.SessionBusy,
            "while another writer held the session", " (the session was busy)",
            "not the log's error, the lock's SessionBusy: the turn can be undone once "
            "the other writer is done, and a caller that waits and tries again on "
            "SessionBusy (lesson 05) should be told so, not that the count or the log "
            "was wrong")
    finally:
        holder.close()
    try:
        agent.undo(1)
    finally:
        log.close()
    first_turn_left(lesson, sessions, agent, before, "once the other writer closed")


@pytest.mark.task("07.2")
def test_a_flush_the_busy_session_refuses_stops_the_run_before_the_model(lesson,
                                                                         sessions):
    """The agent's log was closed, and another writer holds the session when the user
    asks the next question: the flush before the model call cannot write it (the
    lock's SessionBusy), so run() fails with that error and the model is sent nothing
    (lesson 01's rule: a message is on disk before the model sees it). The question
    waits in the buffer, and the next flush, once the session is free, writes it."""
    agent, model, log = open_agent(lesson, sessions, [*TURN_C[1], *TURN_D[1]])
    path = sessions / "quest-1.jsonl"
    with log:
        agent.run(TURN_C[0])
    turn_c = lines_of(path)
    holder = lesson.SessionLog(sessions, "quest-1")
    try:
        holder.open_for_append()
        try:
            lesson.Agent.run(agent, TURN_D[0])
            raised = None
        except NotImplementedError:
            raise
        except Exception as error:
            raised = error
        asked = len(model.requests)
    finally:
        holder.close()
    assert raised is not None and asked == 1, (
        "the next question could not be written (another writer held the session), "
        "so run() should fail before the model call, and the model be sent nothing "
        f"more; run() {'returned' if raised is None else 'raised ' + repr(raised)}, "
        f"and the model was asked {asked - 1} more time(s). A flush that cannot write "
        "must say so: a model call after it sends a message that is on no disk")
    assert isinstance(raised, lesson.SessionBusy), (
        "run() failed before the model call, as it should, but with "
        f"{type(raised).__name__} ({raised}), not the lock's SessionBusy that the "
        "flush met: a caller that waits and tries again on SessionBusy (lesson 05) "
        "should learn that the session was busy, and nothing else went wrong")
    try:
        agent.flush()
    finally:
        log.close()
    logged = lines_of(path)
    assert logged == turn_c + [{"role": "user", "content": TURN_D[0]}], (
        "once the session was free, the next flush should write the question that "
        "waited in the buffer, once, after the first turn; the log holds "
        f"{[m.get('content') for m in logged[len(turn_c):]]} after it")


@pytest.mark.task("07.3")
def test_an_agent_undo_of_a_damaged_log_raises_its_error_and_changes_nothing(lesson,
                                                                          sessions):
    """The agent's log was closed, and another program then added a line that is no
    JSON to it. The user takes back the last turn: the log must record the undo, so it
    becomes the writer again and reads the log, which it refuses with `CorruptLog`.
    The agent's undo raises that very error, as it is (no `UndoError`: the count was
    right, the log is what is wrong), and forgets nothing. Once the log is mended, the
    same undo takes the turn back, in memory and in the log alike."""
    agent, _, log = open_agent(lesson, sessions, [*TURN_C[1], *TURN_D[1]])
    path = sessions / "quest-1.jsonl"
    with log:
        agent.run(TURN_C[0])
        agent.run(TURN_D[0])
    before = list(agent.messages)
    mended = damaged_by_another_program(path)
    try:
        agent_undo_refused(
            agent, before, lesson.CorruptLog,
            "on a log another program damaged since", "",
            "not the log's own CorruptLog, which names the damaged line: the user must "
            "learn that the log needs mending, not that the count of turns was wrong")
        path.write_bytes(mended)
        agent.undo(1)
    finally:
        log.close()
    first_turn_left(lesson, sessions, agent, before, "once the log was mended")


@pytest.mark.task("07.2")
def test_a_flush_that_meets_a_damaged_log_raises_its_error_and_loses_nothing(
        lesson, sessions):
    """The agent's log was closed, and another program then added a line that is no
    JSON to it. The user pastes two notes, and the agent flushes them: the flush must
    make the log the writer again, which reads it and refuses it with `CorruptLog`.
    That error reaches the caller as it is, and nothing is lost: the notes are no
    message the log would refuse, so they still wait in the buffer, and once the log
    is mended the next flush writes each of them once, in order."""
    agent, _, log = open_agent(lesson, sessions, [*TURN_C[1]])
    path = sessions / "quest-1.jsonl"
    with log:
        agent.run(TURN_C[0])
    turn_c = lines_of(path)
    notes = [{"role": "user", "content": "(note 1, pasted)"},
             {"role": "user", "content": "(note 2, pasted)"}]
    mended = damaged_by_another_program(path)
    try:
        for note in notes:
            agent.record(note)
        try:
            agent.flush()
            raised = None
        except NotImplementedError:
            raise
        except Exception as error:
            raised = error
        assert isinstance(raised, lesson.CorruptLog), (
            "the flush of two notes, on a log another program damaged since the "
            "agent closed it, should raise the CorruptLog the log's read raises, "
            "naming the damaged line; it "
            + ("returned" if raised is None else
               f"raised {type(raised).__name__} ({raised})")
            + ". A flush that fails reaches the caller, and drops nothing: the notes "
            "are fine, the log is what needs mending")
        path.write_bytes(mended)
        agent.flush()
    finally:
        log.close()
    written = lines_of(path)[len(turn_c):]
    assert written == notes, (
        "once the log was mended, the next flush should write the two notes that "
        f"waited in the buffer, once each, in order: {[n['content'] for n in notes]}; "
        f"after the turn the log holds {[m.get('content') for m in written]}")
