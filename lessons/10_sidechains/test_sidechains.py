"""Lesson 10: a sub-agent keeps its own log.

Run: pytest lessons/10_sidechains            (your code)
     pytest lessons/10_sidechains --solution (the reference)

One scripted model plays both the parent and its helper: their requests come in turn,
the parent's first, then the helper's, then the parent's again. One test starts a real
process (helper_process.py, next to this file) and kills it with SIGKILL while its
helper is waiting for the model.
"""

import builtins
import contextlib
import errno
import fcntl
import hashlib
import io
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import openai
import pytest

from sessionlab.scripted import (
    ANSWER_AFTER_THOUGHT, Crash, Disconnect, Fail, NO_ANSWER_TEXT, ODD_REPLIES,
    ScriptedModel,
    SimulatedCrash, call, raw, raw_call, say, use)
from sessionlab.testing import (another_writer_takes, check_time, described,
                                fail_in, open_descriptors, raises, wait_past)
from sessionlab.town import HELPER_SCHEMA, HelperTown, TOOL_SCHEMAS, Town

QUESTION = "Ask the elder what they know about the cave."
HELPER_ANSWER = "The elder wants us to bring a torch and a rope."
FINAL = "My helper says: a torch and a rope."
# The parent asks its helper; the helper talks to the elder and answers; the parent
# answers the user. Four requests to the one scripted model, in that order.
HELPER_TURN = (
    "Ask a helper to find out what the elder knows.",
    [
        use(call("ask_helper", question=QUESTION)),    # parent, request 1: call_1_0
        use(call("talk_to", npc="elder")),             # helper, request 1
        say(HELPER_ANSWER),                            # helper, request 2
        say(FINAL),                                    # parent, request 2
    ],
)
PLAIN_TURN = ("Thank the elder.", [say("The elder nods.")])
CALL_ID = "call_1_0"      # the scripted model's id for the parent's first call
PROCESS = Path(__file__).with_name("helper_process.py")
HANG = 30   # seconds: only a guard against a test that would otherwise wait for ever


def lines_of(path):
    """The lines of a log as JSON values, or a failure saying which line is none."""
    if not path.is_file():
        there = sorted(p.name for p in path.parent.iterdir()) if path.parent.is_dir() \
            else "no such folder"
        pytest.fail(f"there is no log {path.parent.name}/{path.name}; its folder holds "
                    f"{there or 'nothing'}", pytrace=False)
    found = []
    for number, line in enumerate(path.read_bytes().split(b"\n"), 1):
        if not line:
            continue
        try:
            found.append(json.loads(line))
        except ValueError:
            text = shown(line.decode(errors="replace"), 120)
            pytest.fail(f"line {number} of {path.parent.name}/{path.name} is no JSON "
                        f"value: {text}. Every line of a log is one JSON object "
                        "ending in a newline; was one written without its newline?",
                        pytrace=False)
    return found


def sidechain_bytes(sessions, name=CALL_ID, session_id="quest-1"):
    """The bytes of a side-chain's log, or a failure saying where it should be."""
    path = sessions / f"{session_id}.sidechains" / f"{name}.jsonl"
    assert path.is_file(), (
        f"the helper's log should be {session_id}.sidechains/{name}.jsonl, named after "
        "the call that started it; the side-chain folder holds "
        f"{sidechain_files(sessions, session_id) or 'nothing'}")
    return path.read_bytes()


def pointers_in(path):
    return [line for line in lines_of(path) if line.get("$marker") == "sidechain"]


def open_agent(lesson, sessions, script=(), session_id="quest-1", town=None,
               max_turns=8, system=None):
    """A new agent on the session, as a new process would make it, with the helper
    tool offered and its own scripted model (and the system prompt `system`)."""
    model = ScriptedModel(list(script))
    log = lesson.SessionLog(sessions, session_id)
    try:
        agent = lesson.Agent(model.client(), model=model.model,
                             tools=town or HelperTown(), session=log,
                             max_turns=max_turns, system=system)
    except BaseException:
        log.close()
        raise
    return agent, model, log


def told(lesson, model):
    """What the scripted model was asked, request by request, in words."""
    said = []
    for number, request in enumerate(model.requests, 1):
        messages = request.get("messages") or [{}]
        first = messages[0] if isinstance(messages[0], dict) else {}
        who = ("a helper" if first.get("content") == lesson.HELPER_SYSTEM
               else "the parent")
        last = json.dumps(messages[-1], ensure_ascii=False)
        said.append(f"request {number} was {who}'s, ending with {shown(last, 60)}")
    return "; ".join(said) or "no request at all"


@contextlib.contextmanager
def in_words(lesson, model, expected):
    """Within the block, the scripted model running out of replies, or a request the
    server refuses, fails in words: what was expected, and what the model was asked."""
    try:
        yield
    except openai.APIStatusError as error:
        message = str((error.body or {}).get("message") if isinstance(error.body, dict)
                      else error)
        if "no reply left" in message:
            what = ("the agent asked the model more often than the test scripted "
                    f"({len(model.script)} replies)")
        else:
            what = (f"the model's server refused request {len(model.requests)} with "
                    f"HTTP {error.status_code}: {message}")
        pytest.fail(f"{expected}; instead {what}. What the model was asked: "
                    f"{told(lesson, model)}", pytrace=False)


def turn(lesson, agent, model, text, expected="the turn should end as scripted"):
    """agent.run(text), failing in words if the model is asked more than scripted."""
    with in_words(lesson, model, expected):
        return agent.run(text)


def play(lesson, sessions, *turns, session_id="quest-1", town=None,
         expected="each turn should end as scripted", system=None):
    """Play whole turns in one agent; return the agent's messages and its model."""
    script = [step for _, steps in turns for step in steps]
    agent, model, log = open_agent(lesson, sessions, script, session_id, town,
                                   system=system)
    with log:
        for text, _ in turns:
            turn(lesson, agent, model, text, expected)
    return agent.messages, model


def asked_a_helper(lesson, sessions, where, script):
    """One turn, "Ask a helper.", played on `script` by an agent with a session
    (`where` "side-chain") or without one ("memory"): its messages and the model."""
    if where == "memory":
        model = ScriptedModel(script)
        agent = lesson.Agent(model.client(), model=model.model, tools=HelperTown())
        turn(lesson, agent, model, "Ask a helper.")
        return agent.messages, model
    return play(lesson, sessions, ("Ask a helper.", script))


def left_locked(lesson, sessions, session_id="quest-1"):
    """Fail, in words, if a side-chain of the session is still locked once its helpers
    are done: a lock file left (a lock let go takes its file with it), or a writer
    refused. A name looked at or passed over is not this process's to keep."""
    folder = sessions / f"{session_id}.sidechains"
    kept = sorted(p.name for p in folder.glob("*.lock"))
    assert not kept, (
        f"every helper is done, and the side-chains folder still holds the lock files "
        f"{kept}: a side-chain's lock, taken on a name looked at or passed over, was "
        "never let go, and no other writer can take that side-chain")
    for log in sorted(folder.glob("*.jsonl")):
        if not log.is_file():
            continue
        try:
            with lesson.SessionLog(folder, log.name[:-len(".jsonl")]) as other:
                other.open_for_append()
        except lesson.SessionBusy as error:
            pytest.fail(f"the side-chain {log.name} is still locked once every helper "
                        f"is done: another writer was refused it ({error})",
                        pytrace=False)


def nothing_else_left(sessions, expected, story):
    """Fail, in words, if the side-chains folder holds anything but `expected` once its
    helpers are done: a name passed over leaves no file of this helper's behind (a
    temporary meta file, a lock), and the folder holds only logs and meta files."""
    left = sidechain_files(sessions)
    extra = sorted(set(left) - set(expected))
    assert not extra, (
        f"{story}; once the helper was done, quest-1.sidechains/ should hold "
        f"{sorted(expected)}, and it also holds {extra}: a name passed over (another "
        "helper's) should leave nothing of this helper's behind, a temporary file "
        "made for its meta file neither")


def sidechain_files(sessions, session_id="quest-1"):
    folder = sessions / f"{session_id}.sidechains"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


_ACTING = []    # (folder, act) while another_process_acts() waits for its moment


def _audit(event, args):
    """Python's audit hook: the first open for writing, rename or link of a file in
    the folder another_process_acts() watches lets the other process act, just before
    it happens."""
    if not _ACTING:
        return
    if event == "open":
        path, _, flags = args
        if isinstance(path, int) or not flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            return
    elif event in ("os.rename", "os.link"):
        path = args[1]
    else:
        return
    folder, act = _ACTING[-1]
    if os.path.dirname(os.path.abspath(os.fsdecode(path))) == folder:
        _ACTING.clear()     # once, and the other process's own writes go unwatched
        act(path)


sys.addaudithook(_audit)


@contextlib.contextmanager
def another_process_acts(folder, act):
    """Within the block, another process acts (act(path)) at the moment this one first
    creates, renames or links a file into `folder`: after anything this one looked at,
    before its first write there."""
    _ACTING.append((os.path.abspath(folder), act))
    try:
        yield
    finally:
        _ACTING.clear()


def is_a_time(value):
    """Is `value` a time as now() writes it: ISO 8601, with its zone, about now?"""
    try:
        when = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        return False
    return when.tzinfo is not None and abs(when.timestamp() - time.time()) < 600


def shown(text, room=40):
    """`text` as a failure shows it: whole when short, else its start and its length,
    never cut off without saying so."""
    if len(text) <= room:
        return repr(text)
    return f"{text[:room]!r}... ({len(text)} characters)"


# --- 10.1: a side-chain's name --------------------------------------------------------


@pytest.mark.key
@pytest.mark.task("10.1")
def test_a_call_id_that_is_a_plain_name_names_its_side_chain_as_it_is(lesson):
    """A call id that is a valid session id of at most 64 characters, as servers send
    them (call_3_0, toolu_01..., chatcmpl-tool-...), names its side-chain unchanged, so
    a person can match the log to the call; one that starts with call- too, and one that
    looks like another call's suffixed name (call_1_0.2)."""
    digest = hashlib.sha256(b"functions.buy:0").hexdigest()
    for call_id in ("call_3_0", "call_Xy9", "toolu_01A09q90qw90lq917835lq9",
                    "chatcmpl-tool-" + "7" * 32, "call-7", "call-" + digest[:59],
                    digest, "c" * 64, "call_1_0.2", "toolu_01.3"):
        name = lesson.sidechain_id(call_id)
        assert name == call_id, (
            f"the call id {call_id!r} is a valid session id of at most 64 characters, "
            "so a person looking for its side-chain should find it under that very "
            f"name; it was named {name!r}")


def named(lesson, call_id):
    """sidechain_id(call_id), or a failure in words when it raises."""
    try:
        return lesson.sidechain_id(call_id)
    except NotImplementedError:
        raise       # the task not written yet: the plugin says which
    except Exception as error:
        pytest.fail(f"sidechain_id({shown(call_id)}) raised {type(error).__name__} "
                    f"({error}): a server may send that call id, and its helper "
                    "needs a side-chain all the same", pytrace=False)


# Call ids a server may send that no session id can be, or that look like the name
# another call id might be given: each must get a name of its own.
DIGEST = hashlib.sha256(b"functions.buy:0").hexdigest()
ODD_CALL_IDS = [
    "functions.buy:0", "functions.buy_0", "functions/buy:0", "functions buy 0",
    "../quest-1", "", ".", "a\x00b", "\ud800", "\udfff", "\ud800x", "x\ud800", "?",
    "\ufffd", "\\ud800", "\\udfff", "x" * 300, "c" * 65, "c" * 128, "c" * 129,
    # A lone surrogate's number as XML writes it: what one encoder gives in its place
    "&#55296;", "&#57343;",
    DIGEST, DIGEST.upper(), "call_" + DIGEST,
    "call_1_0", "call_1_0.2", "Sp\xe4t", "Spa\u0308t", "CALL_1_0",
    "x" * 300 + "y", "functions.buy:0 ", " functions.buy:0",
    "functions." + "a" * 50 + ":1", "call_1_0\n", "NUL", "con.2", "Lpt1",
    "функции.купить_фонарь_и_веревку_у_старосты:0",
    # Past 64 KiB, a buffer's size: two call ids that differ only after it
    "z" * 70000, "z" * 70000 + "!"]
# A character beyond U+FFFF and the two lone surrogates UTF-16 writes it with: two call
# ids (JSON and UTF-16 spell them alike). Kept out of what another process is sent as
# JSON, which reads the two surrogates back as the one character.
PAIRED = ["\U0001f600", "\ud83d\ude00", "call_\U0001f600", "call_\ud83d\ude00"]


@pytest.mark.key
@pytest.mark.task("10.1")
def test_call_ids_a_session_id_cannot_hold_get_distinct_safe_names(lesson):
    """Call ids with ':', '/' or a space, empty, too long, with a NUL or a lone
    surrogate (or two that UTF-16 would pair into one character beyond U+FFFF, which
    is another call id), or shaped like a digest or another call's name: each gets a
    name that passes the session-id check, and no two calls share one (their helpers
    would write one log), not even when a server sends as a call id the name another
    call id got."""
    names = {}
    odd = ODD_CALL_IDS + PAIRED
    given = [named(lesson, call_id) for call_id in odd]
    # A server may send, as a call id, the very name another call id was given, or one
    # shaped like it: in capitals, with its signs swapped, one character short
    again_sent = [name for call_id, name in zip(odd, given)
                  if isinstance(name, str) and name != call_id]
    shaped = [like for name in again_sent
              for like in (name.upper(), name.lower(), name.replace("-", "_"),
                           name.replace("_", "-"), name[:-1], name[1:])]
    for call_id in dict.fromkeys(odd + again_sent + shaped):
        name = named(lesson, call_id)
        assert isinstance(name, str), (
            f"sidechain_id({shown(call_id)}) should return the side-chain's name, a "
            f"str; it returned {name!r}")
        try:
            lesson.check_session_id(name)
        except lesson.InvalidSessionId:
            pytest.fail(f"the call id {shown(call_id)} gave the side-chain name "
                        f"{shown(name, 80)}, which is no valid session id: a "
                        "side-chain is a session and its name must pass "
                        "check_session_id",
                        pytrace=False)
        try:
            lesson.check_session_id(f"{name}.99")
        except lesson.InvalidSessionId:
            pytest.fail(f"the call id {shown(call_id)} gave the side-chain name "
                        f"{shown(name, 80)}, and its 99th side-chain's name, with the "
                        "suffix .99 task 10.2 gives it, is no valid session id: a "
                        "made name must leave room for a call id that comes back",
                        pytrace=False)
        if name in names:
            pytest.fail(f"the call ids {shown(names[name])} and {shown(call_id)} both "
                        f"gave the side-chain name {shown(name, 80)}: their two "
                        "helpers would write one log", pytrace=False)
        names[name] = call_id
        again = named(lesson, call_id)
        assert again == name, (
            f"the call id {shown(call_id)} was named {shown(name, 80)}, then "
            f"{shown(again, 80)}: the same call id should always give the same name, "
            "or no reader can tell which side-chain belongs to which call")


NAME_IN_ANOTHER_PROCESS = """
import json, sys
from pathlib import Path
from sessionlab.course import load_module
lesson = load_module(Path(sys.argv[1]), "sessionlab_impl.names")
print(json.dumps([lesson.sidechain_id(c) for c in json.load(sys.stdin)]))
"""


@pytest.mark.task("10.1")
def test_a_side_chains_name_is_the_same_in_every_process(lesson):
    """The name of a call id's side-chain is the same in another process, whatever
    that process's hash seed and whatever call ids it named before: a program that
    reads the logs later, or the same agent resumed tomorrow, must get the name a
    helper got today."""
    ids = ODD_CALL_IDS + ["call_3_0"]
    here = [named(lesson, call_id) for call_id in ids]
    # The second process meets the same call ids the other way round
    for seed, order in (("1", 1), ("2", -1)):
        done = subprocess.run(
            [sys.executable, "-c", NAME_IN_ANOTHER_PROCESS, lesson.__file__],
            input=json.dumps(ids[::order]), capture_output=True, text=True,
            timeout=HANG, env={**os.environ, "PYTHONHASHSEED": seed})
        if done.returncode != 0:
            said = (done.stderr.strip().splitlines() or ["nothing"])[-1]
            if "NotImplementedError: task " in said:
                raise NotImplementedError(said.split("NotImplementedError: ")[-1])
            pytest.fail(f"sidechain_id failed in another process (hash seed {seed}): "
                        f"{said}", pytrace=False)
        there = json.loads(done.stdout)[::order]
        asked = "in turn" if order == 1 else "the other way round"
        for call_id, mine, theirs in zip(ids, here, there):
            assert mine == theirs, (
                f"the call id {shown(call_id)} is named {shown(mine, 80)} in this "
                f"process and {shown(theirs, 80)} in another (hash seed {seed}, the "
                f"call ids asked {asked}): "
                "a side-chain's name must be the same in every process (is it made "
                "from Python's hash(), a random number, the time, or a count of the "
                "call ids named so far?)")


@pytest.mark.task("10.1")
@pytest.mark.task("10.2")
def test_a_long_call_id_that_comes_back_gets_a_second_side_chain(lesson, sessions):
    """A call id of 128 characters, a valid session id, comes back (a turn that asked a
    helper was undone, and the server numbers its calls again): its second side-chain,
    named with the suffix .2, is a valid session id too, and is started."""
    call_id = "call_" + "7" * 123
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": HELPER_TURN[0]})
        names = []
        for time in ("first", "second"):
            log.append({"role": "assistant", "content": "", "tool_calls": [
                {"id": call_id, "type": "function",
                 "function": {"name": "ask_helper",
                              "arguments": json.dumps({"question": QUESTION})}}]})
            try:
                side = start(lesson, log, call_id)
            except lesson.InvalidSessionId as error:
                said = str(error).replace(
                    call_id, f"{call_id[:12]}[...{len(call_id) - 12} more]")
                pytest.fail(f"the call id {call_id[:12]}... (128 characters) came "
                            f"back, and its {time} side-chain could not be started: "
                            f"its name is no valid session id ({said})", pytrace=False)
            side.close()
            names.append(side.id)
            log.append({"role": "tool", "tool_call_id": call_id, "content": "ok"})
    assert len(set(names)) == 2, (
        f"the call id came back, and its two side-chains should have two names; they "
        f"were named {names}")
    base = lesson.sidechain_id(call_id)
    assert names == [base, f"{base}.2"], (
        "the call id came back: its first side-chain is named after it, "
        f"{shown(base)}, and its second, with the suffix .2, {shown(base + '.2')} (the "
        "first free one of base.2, base.3 ..., so that a person sees the two belong "
        f"to one call); they were named {[shown(n) for n in names]}")
    calls = []
    for line in (sessions / "quest-1.jsonl").read_bytes().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue    # not a pointer: other tests say what is wrong with it
        if isinstance(entry, dict) and entry.get("$marker") == "sidechain":
            calls.append(entry.get("call"))
    assert calls == [call_id, call_id], (
        "each pointer's \"call\" is the call id, as the model sent it, whatever name "
        "its side-chain got: the pointers say "
        f"{[shown(c) if isinstance(c, str) else repr(c) for c in calls]}")
    led = [p.get("sidechain") for p in pointers_in(sessions / "quest-1.jsonl")]
    assert led == names, (
        "each pointer's \"sidechain\" is the name its side-chain got, as it is: the "
        f"side-chains are {[shown(n) for n in names]}, and the pointers lead to "
        f"{[shown(n) if isinstance(n, str) else repr(n) for n in led]}, where no "
        "helper wrote")
    folder = sessions / "quest-1.sidechains"
    metas = [json.loads((folder / f"{name}.meta.json").read_text(encoding="utf-8"))
             for name in names]
    ids = [meta.get("id") for meta in metas]
    assert ids == names, (
        "each meta file's \"id\" is the name its side-chain got, as it is: the "
        f"side-chains are {[shown(n) for n in names]}, and their meta files say "
        f"{[shown(n) if isinstance(n, str) else repr(n) for n in ids]}")
    said = [meta.get("call") for meta in metas]
    assert said == [call_id, call_id], (
        "each meta file's \"call\" is the call id, as the model sent it, whatever "
        "name its side-chain got: the meta files say "
        f"{[shown(c) if isinstance(c, str) else repr(c) for c in said]}")


@pytest.mark.task("10.1")
def test_a_call_id_that_is_no_text_names_no_side_chain(lesson):
    """A call id that is not a string (None, a number, bytes, a tuple, a Path) is
    refused with TypeError showing what was given as Python writes it: made into text,
    the call id 7 would take the name of the call id "7", and two calls would share one
    log; and a Path written as its text, call_1_0, would read as a call id that is
    text, hiding what came."""
    for call_id in (None, 7, 2.5, b"call_1_0", ("call", 1), Path("call_1_0")):
        try:
            name = lesson.sidechain_id(call_id)
        except TypeError as error:
            assert repr(call_id) in str(error), (
                f"sidechain_id({call_id!r}) raised TypeError, as it should, but its "
                f"message does not show what it was given as Python writes it "
                f"({call_id!r}), so its caller cannot see what came: {error}")
            continue
        except NotImplementedError:
            raise       # the task not written yet: the plugin says which
        except Exception as error:
            pytest.fail(f"sidechain_id({call_id!r}) should raise TypeError (a call id "
                        f"is text); it raised {type(error).__name__}: {error}",
                        pytrace=False)
        text = str(call_id)
        same = lesson.sidechain_id(text) if isinstance(text, str) else None
        pytest.fail(f"sidechain_id({call_id!r}) returned the name {name!r} for a call "
                    "id that is not text; it should be refused with TypeError"
                    + (f" (the call id {text!r} has that name too)" if same == name
                       else ""), pytrace=False)


class CallIdText(str):
    """A str subclass, as a client library may hand out: text all the same."""


@pytest.mark.task("10.1")
def test_a_call_id_that_is_text_of_a_subclass_is_named_as_its_text(lesson):
    """Only a call id that is not text is refused: one that is text of a str
    subclass (a client library's own string type) is a call id like any other, and
    gets the very name its plain text gets."""
    for text in (CALL_ID, "functions.buy:0"):
        call_id = CallIdText(text)
        try:
            name = lesson.sidechain_id(call_id)
        except NotImplementedError:
            raise       # the task not written yet: the plugin says which
        except Exception as error:
            pytest.fail(f"the call id {text!r}, given as text of a str subclass, was "
                        f"refused with {type(error).__name__} ({error}): it is text, "
                        f"and should get the name {lesson.sidechain_id(text)!r}",
                        pytrace=False)
        expected = lesson.sidechain_id(text)
        assert name == expected, (
            f"the call id {text!r}, given as text of a str subclass, should get the "
            f"name its plain text gets, {expected!r}; it got {name!r}")


# --- 10.2 by itself: a name of its own, a meta file, a pointer -----------------------
# These call start_sidechain() as ask_helper (task 10.3) will, without a helper: they
# need only tasks 10.1 and 10.2.


def begin(log):
    """The parent's log as ask_helper finds it: the user's question, then the model's
    ask_helper call, both written."""
    log.append({"role": "user", "content": HELPER_TURN[0]})
    log.append({"role": "assistant", "content": "", "tool_calls": [
        {"id": CALL_ID, "type": "function",
         "function": {"name": "ask_helper",
                      "arguments": json.dumps({"question": QUESTION})}}]})


def start(lesson, log, call_id=CALL_ID):
    """log.start_sidechain(call_id), which must give the side-chain's own log."""
    side = log.start_sidechain(call_id)
    assert isinstance(side, lesson.SessionLog), (
        "start_sidechain should return the side-chain's own SessionLog, for the helper "
        f"to write; it returned {side!r}")
    return side


def writes_to(side, sessions):
    """Which file of the side-chains folder a message appended to `side` lands in."""
    folder = sessions / "quest-1.sidechains"
    before = {p.name: p.read_bytes() for p in folder.glob("*.jsonl")}
    with side:
        side.append({"role": "user", "content": QUESTION})
    grown = [p.name for p in sorted(folder.glob("*.jsonl"))
             if p.read_bytes() != before.get(p.name)]
    return grown


@pytest.mark.task("10.2")
def test_a_side_chain_gets_a_meta_file_a_pointer_and_a_log_of_its_own(lesson,
                                                                      sessions):
    """start_sidechain, by itself: the side-chain's meta file names it, the parent and
    the call; the parent's log ends with a pointer to it; the log it returns writes to
    `<parent>.sidechains/<name>.jsonl`; the parent keeps its lock. The same call id a
    second time gets a name of its own, and the first side-chain stays as it was."""
    folder = sessions / "quest-1.sidechains"
    with lesson.SessionLog(sessions, "quest-1") as log:
        begin(log)
        side = start(lesson, log)
        grown = writes_to(side, sessions)
        assert grown == [f"{CALL_ID}.jsonl"], (
            f"the log start_sidechain returned should write to quest-1.sidechains/"
            f"{CALL_ID}.jsonl; a message appended to it changed {grown or 'no file'} "
            f"(the folder holds {sidechain_files(sessions) or 'nothing'})")
        with raises(lesson.SessionBusy, "the parent's writer still has its session "
                    "open after start_sidechain: another writer must be refused"):
            with lesson.SessionLog(sessions, "quest-1") as other:
                other.open_for_append()
        first = (folder / f"{CALL_ID}.jsonl").read_bytes()
        again = start(lesson, log)
        assert writes_to(again, sessions) == [f"{CALL_ID}.2.jsonl"], (
            f"the same call id a second time should get {CALL_ID}.2 (its first "
            "side-chain stays as it was); the folder holds "
            f"{sidechain_files(sessions)}")
    assert (folder / f"{CALL_ID}.jsonl").read_bytes() == first, (
        "the second side-chain of the call wrote into the first one's log")
    for name in (CALL_ID, f"{CALL_ID}.2"):
        path = folder / f"{name}.meta.json"
        assert path.is_file(), (
            f"side-chain {name} has no meta file ({name}.meta.json); the folder holds "
            f"{sidechain_files(sessions)}")
        meta = json.loads(path.read_text(encoding="utf-8"))
        expected = {"format": 1, "id": name, "sidechain_of": "quest-1", "call": CALL_ID}
        assert {k: meta.get(k) for k in expected} == expected, (
            f"{name}.meta.json should say {expected} (and when it was created); it "
            f"says {meta}")
        assert "parent" not in meta, (
            f"{name}.meta.json says \"parent\": {meta.get('parent')!r}, the key a "
            "fork's meta file has: read as a meta file, the side-chain is then a fork "
            "of its parent. A side-chain's meta file names its parent session as "
            f"\"sidechain_of\" alone; it says {meta}")
        assert is_a_time(meta.get("created")), (
            f"{name}.meta.json should say when it was created ('created', as now() "
            f"writes it); it says {meta}")
        extra = sorted(set(meta) - {*expected, "created"})
        assert not extra, (
            f"{name}.meta.json holds {extra} besides what a side-chain's meta file "
            "holds (format, id, sidechain_of, call, created): the format says no more, "
            "and a path or any other key there is one more thing every reader must "
            f"learn, or read wrong; it says {meta}")
    parent = lines_of(sessions / "quest-1.jsonl")
    kinds = [line.get("role") or line.get("$marker") for line in parent]
    assert kinds == ["user", "assistant", "sidechain", "sidechain"], (
        "after two side-chains started, the parent's log should hold the question, the "
        f"call and one pointer for each; it holds {kinds}")
    for pointer, name in zip(parent[2:], (CALL_ID, f"{CALL_ID}.2")):
        expected = {"$marker": "sidechain", "call": CALL_ID, "session": "quest-1",
                    "sidechain": name}
        assert {k: pointer.get(k) for k in expected} == expected, (
            f"the pointer to {name} should be {expected} (and when); it is {pointer}")
        assert is_a_time(pointer.get("at")), (
            f"the pointer should say when it was written ('at', as now() writes it); "
            f"it is {pointer}")
        extra = sorted(set(pointer) - {*expected, "at"})
        assert not extra, (
            f"the pointer to {name} holds {extra} besides what a pointer holds "
            "($marker, call, session, sidechain, at): a fork copies its pointers and a "
            "sessions folder moves, so a pointer names the side-chain by the session "
            "and the name alone, and a path (the user's home folder, as it was) never "
            f"goes in it; it is {pointer}")


WRITING = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
# While a test watches: the meta files opened for writing under their own names. An
# audit hook sees every open (os.open, open, io.open) without standing in for any, so
# whatever an open raises comes from the code that called it. A hook stays for the
# life of the process: it is added once, and watches only while the list exists.
META_OPENED: list[str] | None = None
HOOKED = []


def note_meta_opens(event, arguments):
    if event == "open" and META_OPENED is not None:
        path, _, flags = arguments
        if (isinstance(path, (str, bytes, os.PathLike)) and flags & WRITING
                and os.fsdecode(path).endswith(".meta.json")):
            META_OPENED.append(os.path.basename(os.fsdecode(path)))


@pytest.mark.task("10.2")
def test_a_meta_file_gets_its_name_only_once_it_is_whole(lesson, sessions):
    """A side-chain's meta file gets its name whole, as every meta file does: it is
    written elsewhere and given its name once it holds everything. Opened for writing
    under its own name, it would be there empty, then half-written, for a reader to
    find and for a crash to leave. The test watches every file opened for writing
    while side-chains start, a durable parent's too."""
    global META_OPENED
    if not HOOKED:
        sys.addaudithook(note_meta_opens)
        HOOKED.append(True)
    opened = []
    for durable in (False, True):
        with lesson.SessionLog(sessions, f"quest-{int(durable)}",
                               durable=durable) as log:
            begin(log)
            META_OPENED = opened
            try:
                start(lesson, log).close()
            finally:
                META_OPENED = None
    assert not opened, (
        f"start_sidechain opened {', '.join(sorted(set(opened)))} for writing under "
        "its own name: until its last byte is written, a reader finds it empty or "
        "half-written there, and a crash leaves it so. Write it whole under another "
        "name and give it its own at once, as lesson 03 publishes a fork's meta file")


@pytest.mark.task("10.2")
def test_a_call_id_no_utf8_can_hold_starts_no_side_chain(lesson, sessions):
    """A call id holding a lone surrogate (half of a UTF-16 pair) can be in no line and
    no meta file: start_sidechain refuses it with a ValueError naming it, before it
    writes anything, and the parent can still start a side-chain for a real call."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        begin(log)
        before = (sessions / "quest-1.jsonl").read_bytes()
        with raises(ValueError, "start_sidechain was given the call id 'call_\\ud800' "
                    "(a lone surrogate, which no UTF-8 can encode)", "ud800",
                    unmatched="The refusal should name the call id it refused."):
            log.start_sidechain("call_\ud800")
        assert (sessions / "quest-1.jsonl").read_bytes() == before, (
            "a refused side-chain should leave the parent's log as it was")
        assert not sidechain_files(sessions), (
            "a refused side-chain should leave nothing in the side-chains folder; it "
            f"holds {sidechain_files(sessions)}")
        start(lesson, log).close()


@pytest.mark.task("10.2")
def test_each_side_chain_says_when_it_was_started(lesson, sessions):
    """A meta file's "created" and a pointer's "at" are the time that side-chain was
    started: each side-chain's own, the second one a parent's writer starts too."""
    times = []
    with lesson.SessionLog(sessions, "quest-1") as log:
        begin(log)
        for _ in range(2):
            if times:   # the second side-chain in a later second of the clock
                wait_past(times[-1][1])
            before = datetime.now(timezone.utc).replace(microsecond=0)
            start(lesson, log).close()
            times.append((before, datetime.now(timezone.utc)))
    names = [CALL_ID, f"{CALL_ID}.2"]
    pointers = pointers_in(sessions / "quest-1.jsonl")
    assert [pointer.get("sidechain") for pointer in pointers] == names, (
        f"two side-chains of {CALL_ID} should leave two pointers, to {names}; the log "
        f"holds {pointers}")
    folder = sessions / "quest-1.sidechains"
    for name, pointer, (before, after) in zip(names, pointers, times):
        try:
            meta = json.loads((folder / f"{name}.meta.json").read_bytes())
        except (OSError, ValueError) as error:
            pytest.fail(f"side-chain {name} should have its meta file, "
                        f"{name}.meta.json, a JSON object saying when it was created; "
                        f"reading it failed: {error}", pytrace=False)
        if not isinstance(meta, dict):
            pytest.fail(f"{name}.meta.json should be a JSON object; it holds {meta!r}",
                        pytrace=False)
        for what, value in (
                (f"{name}.meta.json's \"created\"", meta.get("created")),
                (f"the \"at\" of the pointer to {name}", pointer.get("at"))):
            check_time(value, before, after, what,
                       f"the time side-chain {name} was started", "a time taken once, "
                       "and written again for a later side-chain, is the wrong one")


@pytest.mark.task("10.2")
def test_a_call_id_that_comes_back_eleven_times_gets_eleven_side_chains(lesson,
                                                                       sessions):
    """The same call id comes back again and again (each time its turn was undone and
    asked again), past nine and ten: every helper gets a log of its own, however many
    came before it, and every earlier side-chain stays as it was."""
    folder = sessions / "quest-1.sidechains"
    wrote = []      # the logs a line appended by each helper changed
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": HELPER_TURN[0]})
        for time in range(1, 12):
            log.append({"role": "assistant", "content": "", "tool_calls": [
                {"id": CALL_ID, "type": "function",
                 "function": {"name": "ask_helper",
                              "arguments": json.dumps({"question": QUESTION})}}]})
            before = {p.name: p.read_bytes() for p in folder.glob("*.jsonl")}
            try:
                side = start(lesson, log)
            except NotImplementedError:
                raise       # a task not written yet: the plugin says which
            except Exception as error:
                pytest.fail(f"side-chain number {time} of the call id {CALL_ID} "
                            "could not be started: "
                            f"{type(error).__name__}: {error} (the folder holds "
                            f"{sidechain_files(sessions)}). A call id can come back "
                            "any number of times, and each helper needs a log of its "
                            "own", pytrace=False)
            wrote.append(writes_to(side, sessions))
            changed = [name for name, data in before.items()
                       if (folder / name).read_bytes() != data]
            assert not changed, (
                f"helper number {time} of {CALL_ID} wrote into {changed}, an "
                "earlier helper's log, which should stay as it was")
            log.append({"role": "tool", "tool_call_id": CALL_ID, "content": "ok"})
    logs = [name for grown in wrote for name in grown]
    assert len(logs) == 11 and len(set(logs)) == 11, (
        f"eleven helpers of the call id {CALL_ID} should have written eleven logs, "
        f"one each; a line appended by each changed, in turn, {wrote}")
    pointers = [p.get("sidechain") for p in pointers_in(sessions / "quest-1.jsonl")]
    assert [f"{name}.jsonl" for name in pointers] == logs, (
        f"each pointer should name the side-chain its helper wrote ({logs}); they "
        f"name {pointers}")


@pytest.mark.task("10.2")
@pytest.mark.parametrize("order", [(CALL_ID, CALL_ID, f"{CALL_ID}.2"),
                                   (f"{CALL_ID}.2", CALL_ID, CALL_ID)],
                         ids=["suffixed-name-last", "suffixed-name-first"])
def test_a_call_id_that_is_another_calls_suffixed_name_gets_a_log_of_its_own(
        lesson, sessions, order):
    """call_1_0.2 is a call id a server may send, and its own name; it is also the name
    the suffix gives call_1_0's second side-chain. In either order, each of the three
    helpers writes a log of its own, and each pointer and meta file names its own
    call, and each name is the first free one: call_1_0 while it is free (a suffixed
    name taken first does not move it), then call_1_0.2, call_1_0.3 (passing over
    what is taken)."""
    folder = sessions / "quest-1.sidechains"
    wrote = []      # (call id, the logs a line appended by its helper changed)
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": HELPER_TURN[0]})
        for call_id in order:
            log.append({"role": "assistant", "content": "", "tool_calls": [
                {"id": call_id, "type": "function",
                 "function": {"name": "ask_helper",
                              "arguments": json.dumps({"question": QUESTION})}}]})
            wrote.append((call_id, writes_to(start(lesson, log, call_id), sessions)))
            log.append({"role": "tool", "tool_call_id": call_id, "content": "ok"})
    story = "; ".join(f"{call_id}'s helper wrote to {', '.join(grown) or 'no log'}"
                      for call_id, grown in wrote)
    logs = [name for _, grown in wrote for name in grown]
    if len(logs) != len(order) or len(set(logs)) != len(order):
        pytest.fail(f"the call ids came in the order {', '.join(order)}, and each "
                    f"helper should have written a log of its own; instead {story}: "
                    "two helpers that share a log mix their transcripts, and a reader "
                    "cannot tell which call's work is which", pytrace=False)
    first_free = {(CALL_ID, CALL_ID, f"{CALL_ID}.2"): [
                      CALL_ID, f"{CALL_ID}.2", f"{CALL_ID}.2.2"],
                  (f"{CALL_ID}.2", CALL_ID, CALL_ID): [
                      f"{CALL_ID}.2", CALL_ID, f"{CALL_ID}.3"]}[order]
    assert logs == [f"{name}.jsonl" for name in first_free], (
        f"the call ids came in the order {', '.join(order)}; each helper's name is its "
        "call's own base name when that is free, else the first free one of base.2, "
        f"base.3 and so on, which gives {', '.join(first_free)}; instead {story}")
    pointers = pointers_in(sessions / "quest-1.jsonl")
    led = [(p.get("call"), f"{p.get('sidechain')}.jsonl") for p in pointers]
    assert led == [(call_id, grown[0]) for call_id, grown in wrote], (
        f"each pointer should name its call and the side-chain its helper wrote "
        f"({story}); the pointers lead (call, log) {led}")
    for call_id, grown in wrote:
        meta_path = folder / grown[0].replace(".jsonl", ".meta.json")
        meta = (json.loads(meta_path.read_text(encoding="utf-8"))
                if meta_path.is_file() else None)
        assert meta and meta.get("call") == call_id, (
            f"{call_id}'s helper wrote to {grown[0]}, whose meta file should name its "
            f"call, {call_id!r}; it says {meta if meta else 'nothing (there is none)'}")


@pytest.mark.task("10.2")
def test_the_side_chain_is_its_helpers_from_the_moment_it_is_claimed(lesson, sessions):
    """The log start_sidechain returns is already the side-chain's writer: before the
    helper writes its first line, another writer is refused the side-chain and its lock
    file names this process; once that log is closed, the side-chain is free."""
    side_folder = sessions / "quest-1.sidechains"
    with lesson.SessionLog(sessions, "quest-1") as log:
        begin(log)
        with start(lesson, log):
            pointer = pointers_in(sessions / "quest-1.jsonl")[-1:]
            name = pointer[0].get("sidechain") if pointer else CALL_ID
            try:
                with lesson.SessionLog(side_folder, name) as other:
                    other.append({"role": "user", "content": "Someone else's words."})
                taken = None
            except lesson.SessionBusy as error:
                taken = str(error)
            assert taken is not None, (
                f"start_sidechain returned the side-chain {name}, and before its "
                "helper wrote a line another writer took it and wrote in it: the log "
                "it returns should already hold the side-chain's lock, so that no "
                "other process writes there between the claim and the helper's first "
                "line")
            holder = holder_pid(side_folder / f"{name}.lock")
            assert holder == os.getpid(), (
                f"the side-chain's lock file ({name}.lock) should name this process, "
                f"{os.getpid()}, from the moment start_sidechain returns; it names "
                f"{holder}")
        with lesson.SessionLog(side_folder, name) as other:
            try:
                other.open_for_append()
            except lesson.SessionBusy as error:
                pytest.fail(f"the side-chain's log was closed, and its lock was kept: "
                            f"{error}", pytrace=False)


@pytest.mark.task("10.2")
def test_a_side_chain_whose_pointer_cannot_be_written_is_left_free(lesson, sessions):
    """The parent's writer has stopped (an earlier write left its log in doubt): the
    pointer cannot be written, start_sidechain raises, and it claims no name: no meta
    file, no log is left in the side-chains folder, and no lock is kept."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        begin(log)
        log.in_doubt = True     # as after a write whose outcome is unknown
        with raises(lesson.WriterStopped, "the parent's writer had stopped, yet "
                    "start_sidechain wrote its pointer") as raised:
            log.start_sidechain(CALL_ID)
        assert not another_writer_takes(lesson, sessions, "quest-1"), (
            "start_sidechain refused a side-chain because the parent's writer had "
            "stopped, and then another writer took the parent session quest-1: a "
            "refused start lets go of nothing of the parent's, whose writer holds its "
            "lock until it is closed")
        side_folder = sessions / "quest-1.sidechains"
        left = sorted(path.name for path in side_folder.glob("*")
                      if path.name.endswith((".meta.json", ".jsonl")))
        assert left == [], (
            "the parent's writer had stopped, so start_sidechain could write no "
            f"pointer and was refused, yet it left {left} in quest-1.sidechains/: a "
            "name no pointer leads to, claimed for a helper that never runs")
        assert not side_folder.exists(), (
            "the parent's writer had stopped, so start_sidechain was refused, yet it "
            "made the folder quest-1.sidechains/: a refused start leaves nothing, not "
            "even an empty folder")
        # The call's own name too: nothing was to be claimed, a lock no more than a
        # file (the method made for resuming would take no lock on a log not there)
        names = sorted({CALL_ID, *(path.name[:-len(".meta.json")]
                                   for path in side_folder.glob("*.meta.json"))})
        for name in names:
            try:
                with lesson.SessionLog(side_folder, name) as other:
                    other.append({"role": "user", "content": "Someone else's words."})
            except lesson.SessionBusy as error:
                pytest.fail(f"the parent's writer had stopped, so start_sidechain "
                            f"could start no side-chain, yet it left {name} locked: "
                            f"{error}. A refused start keeps no lock", pytrace=False)
        said = str(raised.value)
        assert str(log.path) in said, (
            "the parent's writer had stopped, and start_sidechain was refused with "
            "WriterStopped, as it should be; but the refusal should name the parent's "
            f"log by its path, {log.path} (a service writes many sessions, and the "
            f"user must know which one to open again); it says: {said}")


@pytest.mark.task("10.2")
@pytest.mark.parametrize("failure", ["full disk", "full disk once", "Ctrl-C",
                                     "SIGTERM"])
def test_a_side_chain_whose_pointer_meets_a_full_disk_is_left_free(
    lesson, sessions, monkeypatch, failure
):
    """The disk is full just as the pointer is written to the parent's log: start_
    sidechain raises the OSError, no helper will write the side-chain it claimed, no log
    of it is left (nothing points to one), and that side-chain's lock is not kept. The
    same when the user presses Ctrl-C there (a KeyboardInterrupt, which is no OSError,
    and which a chat catches to go on), or when a service's SIGTERM handler raises
    SystemExit there (no OSError, no KeyboardInterrupt either, and a server that
    catches it to stop cleanly goes on closing what it holds); either leaves the
    parent's log in doubt (did the pointer land?), so its writer has stopped: a second
    start raises WriterStopped. A disk full for that one write only is full all the
    same: the caller hears it, and no second try writes the pointer. What the caller
    hears is that very error, the disk's ENOSPC, the Ctrl-C or the SystemExit, never
    one a clean-up met after it. A write the disk refused whole left nothing in doubt:
    with room again, the parent starts its side-chain."""
    side_folder = sessions / "quest-1.sidechains"
    real = os.write
    refused = []
    with lesson.SessionLog(sessions, "quest-1") as log:
        begin(log)
        parent = os.fstat(log._fd).st_ino

        def write(fd, data):
            if os.fstat(fd).st_ino == parent and not (
                    failure == "full disk once" and refused):
                refused.append(fd)
                if failure == "Ctrl-C":
                    raise KeyboardInterrupt
                if failure == "SIGTERM":
                    raise SystemExit(143)   # a SIGTERM handler's sys.exit()
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(fd, data)

        monkeypatch.setattr(os, "write", write)
        ended = None
        try:
            log.start_sidechain(CALL_ID).close()
        except NotImplementedError:
            raise       # a task not written yet: the plugin says which
        except (Exception, KeyboardInterrupt, SystemExit) as error:
            ended = error
        monkeypatch.undo()
        # The caller hears what happened at the pointer: that very error, not one a
        # clean-up met afterwards (a file it removed that was never made, say)
        if failure == "Ctrl-C":
            heard = isinstance(ended, KeyboardInterrupt)
            meant = "the KeyboardInterrupt itself, as a Ctrl-C raises"
        elif failure == "SIGTERM":
            heard = isinstance(ended, SystemExit)
            meant = "the SystemExit itself, as the SIGTERM handler raised it"
        else:
            heard = isinstance(ended, OSError) and ended.errno == errno.ENOSPC
            meant = "the disk's OSError (ENOSPC, no space left on device)"
        if not heard:
            pytest.fail(f"the {failure} met the pointer as it was written; "
                        f"start_sidechain should raise {meant}, for the caller to "
                        "know what happened; "
                        + (f"it raised {described(ended)}" if ended is not None
                           else "it returned"), pytrace=False)
        assert not another_writer_takes(lesson, sessions, "quest-1"), (
            f"the {failure} met the pointer as it was written, and once "
            "start_sidechain had raised, another writer took the parent session "
            "quest-1: a failed start lets go of the side-chain it claimed, never of "
            "the parent's own lock, which its writer holds until it is closed (its "
            "agent still runs, and goes on writing there)")
        logs = sorted(path.name for path in side_folder.glob("*.jsonl"))
        assert logs == [], (
            f"the pointer could not be written, yet start_sidechain left {logs} in "
            "quest-1.sidechains/: a side-chain's log that no pointer in the parent's "
            "log leads to (the helper's words a crash leaves there could not be found "
            "from the parent)")
        # The call's own name, the one claimed, whether its meta file stayed or went
        names = sorted({CALL_ID, *(path.name[:-len(".meta.json")]
                                   for path in side_folder.glob("*.meta.json"))})
        for name in names:
            try:
                with lesson.SessionLog(side_folder, name) as other:
                    other.append({"role": "user", "content": "Someone else's words."})
            except lesson.SessionBusy as error:
                pytest.fail(f"start_sidechain failed writing the pointer ({failure}), "
                            f"and the side-chain {name} it claimed is still locked: "
                            f"{error}", pytrace=False)
        if failure in ("Ctrl-C", "SIGTERM"):
            with raises(lesson.WriterStopped, f"a {failure} came while the pointer was "
                        "written, which leaves the parent's log in doubt (did the "
                        "pointer land?), yet a second start_sidechain went on as if "
                        "the parent's writer had not stopped"):
                log.start_sidechain(CALL_ID)
        else:
            # The disk refused the pointer's write whole: nothing of it is in the log,
            # so nothing is in doubt, and with room again the parent goes on
            try:
                start(lesson, log).close()
            except lesson.WriterStopped as error:
                pytest.fail(f"the disk refused the pointer's write whole ({failure}), "
                            "which leaves nothing of it in the parent's log: with room "
                            "again, a second start_sidechain should start a "
                            "side-chain; it was refused as if the log were in doubt: "
                            f"{error}",
                            pytrace=False)


@pytest.mark.task("10.2")
def test_a_name_whose_pointer_landed_before_a_ctrl_c_stays_taken(lesson, sessions,
                                                                 monkeypatch):
    """The user presses Ctrl-C just after the pointer's bytes reached the parent's log:
    start_sidechain raises the KeyboardInterrupt, and the pointer is in the log, leading
    to the name claimed. That name stays taken (a helper that died before its first
    line still owns its name): the parent opened again, the same call id's next helper
    takes the next name, and the pointer that landed never leads to its log."""
    real = os.write
    landed = []
    with lesson.SessionLog(sessions, "quest-1") as log:
        begin(log)
        parent = os.fstat(log._fd).st_ino

        def write(fd, data):
            written = real(fd, data)
            if (not landed and os.fstat(fd).st_ino == parent
                    and b"sidechain" in bytes(data)):
                landed.append(written)
                raise KeyboardInterrupt     # after the bytes reached the file
            return written

        monkeypatch.setattr(os, "write", write)
        try:
            log.start_sidechain(CALL_ID).close()
        except KeyboardInterrupt:
            pass
        finally:
            monkeypatch.undo()
    pointers = pointers_in(sessions / "quest-1.jsonl")
    assert landed and [p.get("sidechain") for p in pointers] == [CALL_ID], (
        "the test's own set-up: the pointer to call_1_0 should have landed in the "
        f"parent's log before the Ctrl-C; the log's pointers are {pointers}")
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.open_for_append()
        with start(lesson, log) as side:
            name = side.id
    assert name != CALL_ID, (
        "a Ctrl-C came once the pointer to call_1_0 had landed in the parent's log; "
        "that name is the pointer's, and stays taken. The parent opened again, the "
        f"next helper of {CALL_ID} should take the next name, {CALL_ID}.2; it took "
        f"{name!r}, and the pointer that landed now leads to another helper's log. "
        "Was the claim (the meta file) taken back when the start failed?")


@pytest.mark.task("10.2")
def test_a_meta_file_the_disk_has_no_room_for_is_an_error_not_a_taken_name(
    lesson, sessions, monkeypatch
):
    """The disk is full as the side-chain's meta file is made (its first openings
    fail, no space left). That name is not taken by another helper: it is free, and
    start_sidechain raises the OSError rather than pass it over for a name a person
    would not look for; no side-chain's log is left. With room again, the call's
    side-chain gets its own name."""
    side_folder = sessions / "quest-1.sidechains"
    failed = []

    def refusing(real):
        def open_(file, *args, **kwargs):
            path = Path(os.fspath(file)) if not isinstance(file, int) else None
            if (path is not None and path.parent.name == side_folder.name
                    and "meta.json" in path.name and len(failed) < 3):
                failed.append(path.name)
                raise OSError(errno.ENOSPC, "No space left on device", str(path))
            return real(file, *args, **kwargs)
        return open_

    with lesson.SessionLog(sessions, "quest-1") as log:
        begin(log)
        for module, name in ((os, "open"), (io, "open"), (builtins, "open")):
            monkeypatch.setattr(module, name, refusing(getattr(module, name)))
        try:
            side = log.start_sidechain(CALL_ID)
        except OSError:
            side = None     # the caller heard it
        finally:
            monkeypatch.undo()
        if side is not None:
            side.close()
            pytest.fail(
                f"the disk was full as the meta file of {CALL_ID} was made ({failed}), "
                f"and start_sidechain went on to the side-chain {side.id}: a full disk "
                "is no name another helper took. The caller should hear the error, "
                "and the call's side-chain keep its own name", pytrace=False)
        assert not another_writer_takes(lesson, sessions, "quest-1"), (
            "the disk was full as the side-chain's meta file was made, and once "
            "start_sidechain had raised, another writer took the parent session "
            "quest-1: a failed start lets go of nothing of the parent's, whose writer "
            "holds its lock until it is closed")
        logs = sorted(p.name for p in side_folder.glob("*.jsonl"))
        assert failed and logs == [], (
            f"the meta file could not be made, yet quest-1.sidechains/ holds {logs}"
            if failed else "the test's own set-up: no meta file was ever made")
        with start(lesson, log) as side:
            assert side.id == CALL_ID, (
                f"with room on the disk again, the side-chain of {CALL_ID} should be "
                f"named {CALL_ID}; it is named {side.id}")


@pytest.mark.task("10.2")
def test_the_side_chain_is_locked_while_its_pointer_is_written(lesson, sessions,
                                                               monkeypatch):
    """Another writer tries the side-chain just as the pointer is being written to the
    parent's log: it is refused (SessionBusy), so that no one but the helper writes
    there between the claim and the helper's first line."""
    side_folder = sessions / "quest-1.sidechains"
    real = os.write
    tried = []
    with lesson.SessionLog(sessions, "quest-1") as log:
        begin(log)
        parent = os.fstat(log._fd).st_ino

        def write(fd, data):
            if os.fstat(fd).st_ino == parent and not tried:
                try:
                    with lesson.SessionLog(side_folder, CALL_ID) as other:
                        other.append({"role": "user", "content": "Someone else's."})
                    tried.append(None)
                except lesson.SessionBusy as error:
                    tried.append(error)
            return real(fd, data)

        monkeypatch.setattr(os, "write", write)
        with start(lesson, log):
            monkeypatch.undo()
    assert tried, "start_sidechain wrote no pointer to the parent's log"
    assert tried[0] is not None, (
        "as the pointer was written, another writer took the side-chain call_1_0 and "
        "wrote in it: the side-chain's lock should be held from the claim on, the "
        "pointer's write included")


@pytest.mark.task("10.2")
def test_a_name_another_helper_claims_in_the_meantime_is_not_shared(lesson, sessions):
    """Another helper claims call_1_0 (its meta file appears) after this one looked at
    the folder and before it wrote anything there: this one takes call_1_0.2, and the
    other's meta file stays as it was."""
    folder = sessions / "quest-1.sidechains"
    other_meta = folder / f"{CALL_ID}.meta.json"
    theirs = json.dumps({"format": 1, "id": CALL_ID, "sidechain_of": "quest-1",
                         "call": CALL_ID, "created": "the other helper's"}).encode()
    claimed = []

    def claim(path):
        # The other helper's meta file appears, just before this one's first write in
        # the folder: nothing of this one's is there yet (the other makes the folder
        # if this one has not yet, as any writer does)
        claimed.append(path)
        folder.mkdir(parents=True, exist_ok=True)
        other_meta.write_bytes(theirs)

    with lesson.SessionLog(sessions, "quest-1") as log:
        begin(log)
        with another_process_acts(folder, claim):
            side = start(lesson, log)
        assert claimed, (
            "the test's own set-up: start_sidechain created no file in quest-1."
            "sidechains/, where the side-chain's meta file belongs")
        grown = writes_to(side, sessions)
    assert other_meta.read_bytes() == theirs, (
        f"another helper claimed {CALL_ID} (its meta file appeared) while this one was "
        f"starting, after it looked: its meta file was written over, and the name "
        f"{CALL_ID} taken twice. It held {theirs!r}, it holds "
        f"{other_meta.read_bytes()!r}")
    assert grown == [f"{CALL_ID}.2.jsonl"], (
        f"another helper claimed {CALL_ID} while this one was starting: this one "
        f"should write to {CALL_ID}.2.jsonl, the next name; a message appended to its "
        f"log changed {grown or 'no file'}")
    pointer = pointers_in(sessions / "quest-1.jsonl")[-1:]
    assert [p.get("sidechain") for p in pointer] == [f"{CALL_ID}.2"], (
        f"the parent's pointer should name {CALL_ID}.2, the name this helper got; it "
        f"is {pointer}")
    nothing_else_left(sessions, [other_meta.name, f"{CALL_ID}.2.jsonl",
                                 f"{CALL_ID}.2.meta.json"],
                      f"another helper claimed {CALL_ID} while this one was starting")


@pytest.mark.task("10.2")
def test_a_name_claimed_by_a_meta_file_alone_is_not_taken_again(lesson, sessions):
    """A meta file without its log (a helper that died before its first line) keeps its
    name: the next helper takes the next name and leaves that file as it is."""
    folder = sessions / "quest-1.sidechains"
    folder.mkdir(mode=0o700)
    orphan = folder / f"{CALL_ID}.meta.json"
    orphan.write_text('{"format": 1, "id": "call_1_0", "sidechain_of": "quest-0"}')
    before = orphan.read_bytes()

    with lesson.SessionLog(sessions, "quest-1") as log:
        begin(log)
        grown = writes_to(start(lesson, log), sessions)

    assert orphan.read_bytes() == before, (
        "the meta file already in the folder (a helper that died before its first "
        "line) was written over, and its name taken a second time: it held "
        f"{before!r}, it holds {orphan.read_bytes()!r}")
    assert grown == [f"{CALL_ID}.2.jsonl"], (
        f"the helper should have taken {CALL_ID}.2, the name after the one claimed; "
        f"a message appended to its log changed {grown or 'no file'} (the folder "
        f"holds {sidechain_files(sessions)})")
    left_locked(lesson, sessions)
    nothing_else_left(sessions, [orphan.name, f"{CALL_ID}.2.jsonl",
                                 f"{CALL_ID}.2.meta.json"],
                      f"the name {CALL_ID} was claimed by a meta file alone")


@pytest.mark.task("10.2")
def test_a_call_id_that_came_back_hundreds_of_times_still_gets_a_name(lesson,
                                                                     sessions):
    """A long-lived session whose call id came back 300 times (each an earlier
    helper's meta file, left in the folder): the next helper still gets a name, the
    first free one, call_1_0.301, however many were taken before it."""
    folder = sessions / "quest-1.sidechains"
    folder.mkdir(mode=0o700)
    base = lesson.sidechain_id(CALL_ID)
    for number in range(1, 301):
        name = base if number == 1 else f"{base}.{number}"
        (folder / f"{name}.meta.json").write_text(
            json.dumps({"format": 1, "id": name, "sidechain_of": "quest-1",
                        "call": CALL_ID}), encoding="utf-8")

    with lesson.SessionLog(sessions, "quest-1") as log:
        begin(log)
        try:
            side = start(lesson, log)
        except NotImplementedError:
            raise       # a task not written yet: the plugin says which
        except Exception as error:
            pytest.fail("the call id call_1_0 came back for the 301st time (300 "
                        "side-chains' meta files are in the folder) and its helper "
                        f"got no side-chain: {type(error).__name__}: {error}. The "
                        "name is the first free one of base.2, base.3 and so on, "
                        "with no limit", pytrace=False)
        grown = writes_to(side, sessions)
    assert grown == [f"{base}.301.jsonl"], (
        f"300 names of call_1_0 are taken: the helper should get {base}.301; a "
        f"message appended to its log changed {grown or 'no file'}")


@pytest.mark.task("10.2")
@pytest.mark.parametrize("opened", ["a new SessionLog", "the same SessionLog"])
def test_a_session_deleted_and_started_again_names_its_side_chain_afresh(lesson,
                                                                         sessions,
                                                                         opened):
    """A session whose call started a side-chain is deleted (lesson 09's delete takes
    its side-chains with it), then started again under the same id, in the same
    process, by a new SessionLog or by the same one, closed and opened again: its
    call's side-chain is named as a fresh process names it, the call's own name, the
    first free one. A name is judged by what the folder holds when the side-chain
    starts, never by what was given before (nothing kept in memory counts)."""
    same = lesson.SessionLog(sessions, "quest-1")
    for time in ("first", "again"):
        log = same if opened == "the same SessionLog" else lesson.SessionLog(
            sessions, "quest-1")
        with log:
            log.open_for_append()
            begin(log)
            with start(lesson, log) as side:
                name = side.id
        if time == "first":
            deleted = lesson.delete_session(sessions, "quest-1")
            assert deleted is True and not (sessions / "quest-1.sidechains").exists(), (
                "the test's own set-up: deleting quest-1 should take its side-chains "
                f"(delete_session returned {deleted!r}; the side-chains folder holds "
                f"{sidechain_files(sessions) or 'nothing'})")
    assert name == CALL_ID, (
        f"quest-1 was deleted with its side-chains and started again ({opened}, "
        f"opened again); its call "
        f"{CALL_ID} should get the first free name, {CALL_ID}, as in a fresh process "
        f"(the folder held nothing); it got {name!r}, as if a name given before the "
        "delete were still taken")


@pytest.mark.task("10.2")
def test_a_forks_first_side_chain_of_a_call_takes_the_calls_own_name(lesson, sessions):
    """A fork copies its source's lines, the pointer to the side-chain of call_1_0
    among them, and no side-chain. When a call of the fork with that same id starts a
    helper (the model numbers its calls, and the fork's history is as long), the
    fork's own side-chains folder holds nothing: the side-chain takes the call's own
    name there. A name is taken by what is in the folder it goes into, never by a
    pointer in the log, which may lead to another session's folder."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.open_for_append()
        begin(log)
        with start(lesson, log):
            pass
    lesson.fork(sessions, "quest-1", "quest-2")
    with lesson.SessionLog(sessions, "quest-2") as log:
        log.open_for_append()
        with start(lesson, log) as side:
            name = side.id
    assert name == CALL_ID, (
        f"quest-2 is a fork of quest-1, and its copied pointer names the side-chain "
        f"{CALL_ID} in quest-1.sidechains/; a call {CALL_ID} of the fork should get "
        f"the name {CALL_ID} in quest-2.sidechains/, which held nothing, as any first "
        f"side-chain of a call does; it got {name!r}, and quest-2.sidechains/ holds "
        f"{sidechain_files(sessions, 'quest-2')}")


@pytest.mark.task("10.2")
def test_a_side_chain_log_left_without_its_meta_file_keeps_its_name(lesson, sessions):
    """A side-chain's log whose meta file is gone still owns its name: the next helper
    of that call id takes the next name, and the old log stays as it was."""
    folder = sessions / "quest-1.sidechains"
    folder.mkdir(mode=0o700)
    old = folder / f"{CALL_ID}.jsonl"
    old.write_text(json.dumps({"role": "user", "content": "An earlier question."})
                   + "\n", encoding="utf-8")
    before = old.read_bytes()

    with lesson.SessionLog(sessions, "quest-1") as log:
        begin(log)
        grown = writes_to(start(lesson, log), sessions)

    assert old.read_bytes() == before, (
        "a side-chain log already there was written into: a name is taken when its "
        "log exists, even with no meta file beside it")
    assert grown == [f"{CALL_ID}.2.jsonl"], (
        f"the helper should have taken {CALL_ID}.2; a message appended to its log "
        f"changed {grown or 'no file'} (the folder holds {sidechain_files(sessions)})")
    left_locked(lesson, sessions)


@pytest.mark.task("10.2")
@pytest.mark.parametrize("planted", ["an empty log", "an empty folder",
                                     "a symbolic link to nothing"])
def test_something_at_a_side_chains_log_name_keeps_that_name(lesson, sessions,
                                                             planted):
    """Whatever is at a side-chain's log name (an empty log, whose helper died before
    its first line; a folder named like a log; a symbolic link, even one that leads
    nowhere), that name is taken: the next helper of that call id takes the next name,
    and what was there stays as it was."""
    folder = sessions / "quest-1.sidechains"
    folder.mkdir(mode=0o700)
    there = folder / f"{CALL_ID}.jsonl"
    if planted == "an empty log":
        there.write_bytes(b"")
    elif planted == "an empty folder":
        there.mkdir()
    else:
        there.symlink_to(sessions / "nowhere.jsonl")
    with lesson.SessionLog(sessions, "quest-1") as log:
        begin(log)
        try:
            side = start(lesson, log)
        except OSError as error:
            pytest.fail(f"{planted} at {CALL_ID}.jsonl already owns that name, and the "
                        f"helper should have taken {CALL_ID}.2; start_sidechain raised "
                        f"{type(error).__name__}: {error}", pytrace=False)
        with side:
            side.append({"role": "user", "content": QUESTION})
    assert side.id == f"{CALL_ID}.2", (
        f"{planted} at {CALL_ID}.jsonl already owns that name (a name is taken when "
        f"its log exists): the helper should have taken {CALL_ID}.2; it took "
        f"{side.id!r} (the folder holds {sidechain_files(sessions)})")
    still = {"an empty log": lambda: there.is_file() and there.read_bytes() == b"",
             "an empty folder": lambda: there.is_dir() and not any(there.iterdir()),
             "a symbolic link to nothing": lambda: there.is_symlink()
             and not there.exists() and not (sessions / "nowhere.jsonl").exists()}
    assert still[planted](), (
        f"{planted} at {CALL_ID}.jsonl should be left as it was; it changed")
    claimed = folder / f"{CALL_ID}.meta.json"
    assert not claimed.exists(), (
        f"{planted} at {CALL_ID}.jsonl owns that name, yet {claimed.name} was written "
        "beside it: a meta file claims a name for a helper, and this name was no one's "
        "to claim")
    left_locked(lesson, sessions)


@pytest.mark.task("10.2")
def test_a_lock_file_left_alone_takes_no_name(lesson, sessions):
    """A lock file is no claim. A helper killed with SIGKILL leaves its lock file
    behind (the kernel lets go of the lock, the file stays), and a person may then
    remove that side-chain's log and meta file by hand. The lock file left alone takes
    no name: a name is taken when its log or its meta file is there, so the call's
    helper gets the call's own name, as a stale lock file has blocked no one since
    lesson 05."""
    folder = sessions / "quest-1.sidechains"
    folder.mkdir(mode=0o700)
    stale = folder / f"{CALL_ID}.lock"
    stale.write_text(json.dumps({"pid": 999999, "host": "gone",
                                 "since": "2026-01-01T00:00:00+00:00"}))
    os.chmod(stale, 0o600)
    with lesson.SessionLog(sessions, "quest-1") as log:
        begin(log)
        grown = writes_to(start(lesson, log), sessions)
    assert grown == [f"{CALL_ID}.jsonl"], (
        f"only a stale lock file, {CALL_ID}.lock, was in the side-chains folder (no "
        f"log, no meta file): the name {CALL_ID} is free, and the helper should have "
        f"taken it; a message appended to its log changed {grown or 'no file'} (the "
        f"folder holds {sidechain_files(sessions)}). A lock file left by a killed "
        "writer blocks no one, and claims nothing")
    left_locked(lesson, sessions)


FILE_AT_THE_FOLDER = """
import sys
from pathlib import Path
from sessionlab.course import load_module
lesson = load_module(Path(sys.argv[1]), "sessionlab_impl.filed")
with lesson.SessionLog(Path(sys.argv[2]), "quest-1") as log:
    try:
        log.start_sidechain("call_1_0").close()
        print("returned")
    except OSError as error:
        print("OSError", type(error).__name__, error)
"""


@pytest.mark.task("10.2")
def test_a_file_at_the_side_chains_folders_name_is_an_error_not_a_search(lesson,
                                                                         sessions):
    """Another program left a file where the side-chains folder should be, so no
    folder can be made there. That is no name taken by a helper: start_sidechain
    raises the OSError that making the folder meets, at once, rather than trying
    name after name for ever, and leaves the file as it was. (The test runs it in a
    process of its own, stopped if it has not returned within 30 seconds.)"""
    with lesson.SessionLog(sessions, "quest-1") as log:
        begin(log)
    planted = sessions / "quest-1.sidechains"
    planted.write_bytes(b"another program's notes\n")
    try:
        done = subprocess.run(
            [sys.executable, "-c", FILE_AT_THE_FOLDER, lesson.__file__, str(sessions)],
            capture_output=True, text=True, timeout=HANG)
    except subprocess.TimeoutExpired:
        pytest.fail("a file is where quest-1.sidechains/ should be, and "
                    f"start_sidechain had not returned after {HANG} seconds: making "
                    "the folder fails for every name, and that is no name taken. It "
                    "should raise that OSError at once (was FileExistsError caught in "
                    "place of SessionExists, the word for a name that is taken?)",
                    pytrace=False)
    said = (done.stdout.strip().splitlines() or [""])[-1]
    if done.returncode != 0:
        error = (done.stderr.strip().splitlines() or ["nothing"])[-1]
        if "NotImplementedError: task " in error:
            raise NotImplementedError(error.split("NotImplementedError: ")[-1])
        pytest.fail("a file is where quest-1.sidechains/ should be, and "
                    "start_sidechain should raise the OSError that making the folder "
                    f"meets; it raised {error}", pytrace=False)
    assert said.startswith("OSError"), (
        "a file is where quest-1.sidechains/ should be, and start_sidechain should "
        "raise the OSError that making the folder meets; it returned a side-chain")
    assert planted.read_bytes() == b"another program's notes\n", (
        "the file another program left at quest-1.sidechains was changed")


@pytest.mark.task("10.2")
def test_a_durable_parents_side_chain_is_durable_too(lesson, sessions, monkeypatch):
    """The side-chain is as durable as its parent: with a durable parent, its meta file
    and every line of the helper's log are fsynced. The meta file, its name and the new
    folder's name are on the disk when start_sidechain returns, as the parent's pointer
    is: a helper that dies before its first line still owns its name after a power
    cut."""
    synced = []
    real = os.fsync

    def fsync(fd):
        synced.append(os.fstat(fd).st_ino)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "fdatasync", fsync)     # as durable for a file's bytes
    with lesson.SessionLog(sessions, "quest-1", durable=True) as log:
        begin(log)
        synced.clear()      # from here on, only what starting a side-chain synced
        with start(lesson, log) as side:
            started = list(synced)      # what was synced when start_sidechain returned
            side.append({"role": "user", "content": QUESTION})
            side.append({"role": "assistant", "content": HELPER_ANSWER})
    monkeypatch.undo()
    folder = sessions / "quest-1.sidechains"
    for where, what in (
            (folder / f"{CALL_ID}.meta.json", "the side-chain's meta file"),
            (folder, "quest-1.sidechains/, which holds the meta file's name"),
            (sessions, "the sessions folder, which holds the new quest-1.sidechains/ "
             "folder's name")):
        assert not where.exists() or os.stat(where).st_ino in started, (
            f"the parent is durable, but {what} was not fsynced by the time "
            "start_sidechain returned, when the parent's pointer is on the disk: a "
            "power cut before the helper's first line could lose the meta file, and "
            "with it the name's claim, while the pointer to it survives")
    for name, what in ((f"{CALL_ID}.meta.json", "meta file"),
                       (f"{CALL_ID}.jsonl", "log")):
        assert (folder / name).is_file(), (
            f"the side-chain's {what} should be quest-1.sidechains/{name}: the folder "
            f"holds {sidechain_files(sessions) or 'nothing'}")
        assert os.stat(folder / name).st_ino in synced, (
            f"the parent is durable, but the side-chain's {what} was never fsynced: a "
            "power cut could lose it while the parent's log, and its pointer, survive")
    for where, what in ((sessions, "the sessions folder, which holds the new "
                         "quest-1.sidechains/ folder's name"),
                        (folder, "quest-1.sidechains/, which holds the names of the "
                         "side-chain's meta file and log")):
        assert os.stat(where).st_ino in synced, (
            f"the parent is durable, but {what}, was never fsynced: a power cut could "
            "lose the side-chain while the parent's pointer to it survives")
    side = os.stat(folder / f"{CALL_ID}.jsonl").st_ino
    assert synced.count(side) >= 2, (
        "a durable log fsyncs every line: the side-chain's 2 lines were synced "
        f"{synced.count(side)} time(s)")


@pytest.mark.task("10.2")
def test_a_durable_side_chains_claim_reaches_the_disk_before_its_pointer(
        lesson, sessions, monkeypatch):
    """With a durable parent, the pointer is on the disk the moment it is written: the
    claim it leads to must be there first. By the time the pointer is written to the
    parent's log, the side-chain's meta file, quest-1.sidechains/ (which holds its
    name) and the sessions folder (which holds the new folder's name) are fsynced. A
    claim synced only after the pointer can be lost to a power cut that keeps the
    pointer, and the next helper of that call id then takes the name it leads to."""
    synced = []
    at_pointer = []
    real_fsync, real_write = os.fsync, os.write
    with lesson.SessionLog(sessions, "quest-1", durable=True) as log:
        begin(log)
        parent = os.fstat(log._fd).st_ino

        def fsync(fd):
            synced.append(os.fstat(fd).st_ino)
            real_fsync(fd)

        def write(fd, data):
            if (not at_pointer and os.fstat(fd).st_ino == parent
                    and b"sidechain" in bytes(data)):
                at_pointer.append(list(synced))
            return real_write(fd, data)

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "fdatasync", fsync)     # as durable for a file's bytes
        monkeypatch.setattr(os, "write", write)
        try:
            start(lesson, log).close()
        finally:
            monkeypatch.undo()
    assert at_pointer, "the test's own set-up: no pointer was written to the parent"
    folder = sessions / "quest-1.sidechains"
    late = [what for where, what in (
        (folder / f"{CALL_ID}.meta.json", f"the meta file {CALL_ID}.meta.json"),
        (folder, "quest-1.sidechains/, which holds the meta file's name"),
        (sessions, "the sessions folder, which holds quest-1.sidechains/'s name"))
        if where.exists() and os.stat(where).st_ino not in at_pointer[0]]
    assert not late, (
        "the parent is durable, and its pointer was written to the disk before "
        f"{' and '.join(late)} had been fsynced: a power cut between the two keeps a "
        "pointer to a name whose claim is lost, and the next helper of that call id "
        "takes it. Sync the claim before the pointer that leads to it")


@pytest.mark.task("10.2")
def test_the_side_chains_folder_is_its_owners_alone_whatever_the_umask(lesson,
                                                                       sessions):
    """A helper's transcript holds what the user said, as the parent's log does: the
    side-chains folder start_sidechain makes, and the files in it, are readable by
    their owner alone (a folder 0700, as every folder the course makes; files 0600),
    whatever the umask leaves. Under umask 000 a folder made with the umask's mode is
    0777: any user lists the helpers' logs, and plants a link at a side-chain's
    name."""
    old = os.umask(0)
    try:
        with lesson.SessionLog(sessions, "quest-1") as log:
            begin(log)
            with start(lesson, log) as side:
                side.append({"role": "user", "content": QUESTION})
    finally:
        os.umask(old)
    folder = sessions / "quest-1.sidechains"
    open_to_others = sorted(
        f"{path.name} {oct(os.stat(path).st_mode & 0o777)}"
        for path in [folder, *folder.iterdir()] if os.stat(path).st_mode & 0o077)
    assert not open_to_others, (
        "under umask 000 a side-chain started: quest-1.sidechains/ and the files in "
        "it should be their owner's alone (the folder 0o700, as every folder the "
        "course makes, the files 0o600), whatever the umask; other users may reach "
        f"{', '.join(open_to_others)}")


@pytest.mark.task("10.2")
def test_a_side_chains_large_contents_are_read_back_from_its_own_folder(lesson,
                                                                      sessions):
    """A side-chain is a session like any other, in its own folder: its large contents
    (a tool result of many KiB, stored apart since lesson 06) go to that folder's own
    blobs/, as the on-disk format says, where a reader of the side-chain, opened as
    the session it is, finds them. Stored anywhere else, the helper's log points to
    contents its readers cannot find (and deleting the session would leave them)."""
    big = "The elder's long story. " * 400      # past the 4 KiB a line keeps itself
    with lesson.SessionLog(sessions, "quest-1") as log:
        begin(log)
        with start(lesson, log) as side:
            name = side.id
            side.append({"role": "user", "content": big})
    folder = sessions / "quest-1.sidechains"
    try:
        read = lesson.SessionLog(folder, name).load()
    except NotImplementedError:
        raise       # a task not written yet: the plugin says which
    except Exception as error:
        pytest.fail(f"the helper wrote a content of {len(big)} characters to its "
                    f"side-chain {name}; read back as a session of "
                    f"quest-1.sidechains/, the side-chain could not be loaded: "
                    f"{type(error).__name__}: {error}. Its large contents belong in "
                    "quest-1.sidechains/blobs/, beside its log; the sessions folder "
                    f"holds {sorted(p.name for p in sessions.iterdir())}",
                    pytrace=False)
    contents = [message.get("content") for message in read]
    assert contents == [big], (
        f"the helper wrote a content of {len(big)} characters to its side-chain "
        f"{name}; read back as a session of quest-1.sidechains/ it shows "
        f"{[shown(str(c)) for c in contents]}")


@pytest.mark.task("10.2")
def test_a_pointer_is_no_message_of_the_parent(lesson, sessions):
    """A pointer is a marker, never a message: the parent's messages written after it
    keep the indices every reader gives them (a message's index counts the messages
    before it, markers left out). So an undo (lesson 07) made by the same writer after
    a side-chain started takes back the very messages it means, as the log is read
    again."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        begin(log)
        start(lesson, log).close()
        log.append({"role": "tool", "tool_call_id": CALL_ID, "content": HELPER_ANSWER})
        log.append({"role": "assistant", "content": FINAL})
        log.append({"role": "user", "content": PLAIN_TURN[0]})
        log.append({"role": "assistant", "content": "The elder nods."})
        log.undo(2)
    read_again = lesson.SessionLog(sessions, "quest-1").load()
    shown_now = [message.get("content") for message in read_again]
    expected = [HELPER_TURN[0], "", HELPER_ANSWER, FINAL]
    assert shown_now == expected, (
        "after a side-chain started, the parent's writer wrote four more messages and "
        "took back the last two (undo(2)): read again, the log should show "
        f"{expected}; it shows {shown_now}. Was the pointer counted as a message, so "
        "that the undo marker names the messages after it by indices one too high?")


# --- 10.2 and 10.3: the helper's own log, the parent's pointer ------------------------


@pytest.mark.key
@pytest.mark.task("10.2")
@pytest.mark.task("10.3")
def test_the_helpers_transcript_goes_to_its_own_log_under_the_parents_folder(
    lesson, sessions
):
    """The helper's messages go to `<parent>.sidechains/<call id>.jsonl`, with a meta
    file naming the parent session and the call; none of them is in the parent's log."""
    play(lesson, sessions, HELPER_TURN)

    side = sessions / "quest-1.sidechains" / f"{CALL_ID}.jsonl"
    assert side.is_file(), (
        f"the helper's log should be quest-1.sidechains/{CALL_ID}.jsonl, named after "
        "the call that started it; the side-chain folder holds "
        f"{sidechain_files(sessions) or 'nothing'} and the sessions folder "
        f"{sorted(p.name for p in sessions.iterdir())}")
    helper = lines_of(side)
    roles = [m.get("role") for m in helper]
    assert roles == ["user", "assistant", "tool", "assistant"], (
        "the side-chain should hold the helper's whole conversation: the question, its "
        f"call to talk_to, the result, its answer; it holds {roles}")
    first, last = helper[0].get("content"), helper[-1].get("content")
    assert first == QUESTION and last == HELPER_ANSWER, (
        f"the side-chain should start with the helper's question ({QUESTION!r}) and "
        f"end with its answer ({HELPER_ANSWER!r}); it starts with "
        f"{first!r} and ends with {last!r}")
    parent = lines_of(sessions / "quest-1.jsonl")
    leaked = [m for m in helper if m in parent]
    assert not leaked, (
        "the helper's messages belong in its side-chain only; the parent's log holds "
        f"{len(leaked)} of them (the helper must not write to the parent's session)")
    meta_path = sessions / "quest-1.sidechains" / f"{CALL_ID}.meta.json"
    assert meta_path.is_file(), "the side-chain needs its meta file, <name>.meta.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    expected = {"format": 1, "id": CALL_ID, "sidechain_of": "quest-1", "call": CALL_ID}
    assert {k: meta.get(k) for k in expected} == expected, (
        f"the side-chain's meta should say {expected} (and when it was created); it "
        f"says {meta}")
    assert is_a_time(meta.get("created")), (
        "the side-chain's meta should say when it was created ('created', as now() "
        f"writes it); it says {meta}")


@pytest.mark.key
@pytest.mark.task("10.2")
@pytest.mark.task("10.3")
def test_the_parent_records_a_pointer_and_only_the_helpers_answer(lesson, sessions):
    """The parent's log holds the call, a sidechain marker pointing to the helper's log,
    then the helper's answer as a plain tool result: what the model gets back."""
    messages, model = play(lesson, sessions, HELPER_TURN)

    parent = lines_of(sessions / "quest-1.jsonl")
    kinds = [line.get("role") or line.get("$marker") for line in parent]
    assert kinds == ["user", "assistant", "sidechain", "tool", "assistant"], (
        "the parent's log should hold the question, the ask_helper call, one pointer "
        "marker, the helper's answer as the call's result, the final answer; it holds "
        f"{kinds}")
    pointer = parent[2]
    expected = {"$marker": "sidechain", "call": CALL_ID, "session": "quest-1",
                "sidechain": CALL_ID}
    assert {k: pointer.get(k) for k in expected} == expected, (
        f"the pointer should be {expected} (and when); it is {pointer}")
    assert is_a_time(pointer.get("at")), (
        f"the pointer should say when it was written ('at', as now() writes it); it is "
        f"{pointer}")
    result = {"role": "tool", "tool_call_id": CALL_ID, "content": HELPER_ANSWER}
    assert parent[3] == result, (
        "the call's result should be the helper's answer, as an ordinary tool "
        f"message {result}; it is {parent[3]}")
    sent = model.requests[-1]["messages"]
    assert result in sent and not any("$marker" in m for m in sent), (
        "the parent's next request should carry the helper's answer as a tool result, "
        "and never the pointer: markers are not messages")
    assert messages == [m for m in parent if "role" in m], (
        "the agent's history should be the messages of its log, in order (the pointer "
        "is no message); they differ: a resumed parent would read another story than "
        "the one it told")


@pytest.mark.task("10.2")
@pytest.mark.task("10.3")
def test_the_helpers_work_can_be_found_from_the_parent_at_any_moment(lesson, sessions):
    """Whenever the helper is waiting for its model (a moment a process can die in),
    the parent's log already leads to the side-chain, and the side-chain holds what the
    helper has done so far, its question first."""
    agent, model, log = open_agent(lesson, sessions, HELPER_TURN[1])
    parent = sessions / "quest-1.jsonl"
    side = sessions / "quest-1.sidechains" / f"{CALL_ID}.jsonl"
    model.on_request(lambda request: (
        pointers_in(parent) if parent.exists() else [],
        lines_of(side) if side.exists() else []))
    with log:
        turn(lesson, agent, model, HELPER_TURN[0])
    done = (["user"], ["user", "assistant", "tool"])     # what the helper wrote by then
    for moment, (pointers, helper_lines), so_far in zip(
            ("first", "second"), model.observations[1:3], done):
        assert [p.get("sidechain") for p in pointers] == [CALL_ID], (
            f"when the helper asked its model for the {moment} time, nothing in the "
            f"parent's log led to its side-chain (the pointers were {pointers}): had "
            "the process died at that moment, the helper's work could not be found "
            "from the parent")
        roles = [m.get("role") for m in helper_lines]
        assert roles == so_far and helper_lines[0].get("content") == QUESTION, (
            f"when the helper asked its model for the {moment} time, its side-chain "
            f"should hold what it had done so far ({so_far}), its question first "
            f"(lesson 01's rule, in the helper's own log); it held {helper_lines}")


@pytest.mark.task("10.2")
@pytest.mark.task("10.3")
def test_a_call_id_that_comes_back_gets_a_side_chain_of_its_own(lesson, sessions):
    """A turn that asked a helper is undone and asked again: the model sends the same
    call id, and the new helper gets a new side-chain; the old one is left as it was."""
    agent, model, log = open_agent(lesson, sessions, HELPER_TURN[1] * 2)
    folder = sessions / "quest-1.sidechains"
    with log:
        turn(lesson, agent, model, HELPER_TURN[0])
        first = sidechain_bytes(sessions)
        agent.undo()
        turn(lesson, agent, model, HELPER_TURN[0])
    again = model.requests[4]["messages"][-1]
    assert again["content"] == HELPER_TURN[0], (
        "the test's own set-up: the fifth request should be the question asked again "
        f"after the undo; it ends with {again}")
    assert (folder / f"{CALL_ID}.jsonl").read_bytes() == first, (
        "the first helper's side-chain changed when the same call id came back: the "
        "second helper must never write into another helper's log")
    logs = [name for name in sidechain_files(sessions) if name.endswith(".jsonl")]
    assert logs == [f"{CALL_ID}.2.jsonl", f"{CALL_ID}.jsonl"], (
        f"the second helper should get {CALL_ID}.2.jsonl; the side-chain folder holds "
        f"{sidechain_files(sessions)}")
    pointers = pointers_in(sessions / "quest-1.jsonl")
    assert [p.get("sidechain") for p in pointers] == [CALL_ID, f"{CALL_ID}.2"], (
        f"each helper's pointer should name its own side-chain; they name {pointers}")
    assert [p.get("call") for p in pointers] == [CALL_ID, CALL_ID], (
        "both pointers answer the same call id, and should say so in 'call' (the name "
        f"claimed goes in 'sidechain'); they say {pointers}")
    meta = json.loads((folder / f"{CALL_ID}.2.meta.json").read_text(encoding="utf-8"))
    assert (meta.get("id"), meta.get("call")) == (f"{CALL_ID}.2", CALL_ID), (
        f"the second side-chain's meta file should name it {CALL_ID}.2 ('id') and its "
        f"call {CALL_ID} ('call'); it says {meta}")


@pytest.mark.key
@pytest.mark.task("10.3")
def test_the_helper_takes_its_own_lock_while_the_parent_keeps_its_own(lesson, sessions):
    """While the helper works, the parent's lock stays held (no other writer gets the
    parent session) and the helper holds the side-chain's own lock; both go at the
    end."""
    agent, model, log = open_agent(lesson, sessions, HELPER_TURN[1])
    side_id = CALL_ID
    side_folder = sessions / "quest-1.sidechains"

    def try_to_write(folder, session_id):
        return "got it" if another_writer_takes(lesson, folder, session_id) else "busy"

    def locks(request):
        return {"parent lock file": (sessions / "quest-1.lock").exists(),
                "side-chain lock file": (side_folder / f"{side_id}.lock").exists(),
                "parent": try_to_write(sessions, "quest-1"),
                "side-chain": try_to_write(side_folder, side_id)
                if (side_folder / f"{side_id}.jsonl").exists() else "no log"}

    model.on_request(locks)
    with log:
        turn(lesson, agent, model, HELPER_TURN[0])
    seen = model.observations[1]        # while the helper waited for its first answer
    assert seen["parent"] == "busy" and seen["parent lock file"], (
        "while the helper worked, another writer should have been refused the parent "
        f"session: the parent keeps its lock all along. It saw {seen}")
    assert seen["side-chain"] == "busy" and seen["side-chain lock file"], (
        "while the helper worked, it should have held its side-chain's own lock "
        f"(quest-1.sidechains/{side_id}.lock), so that another writer is refused it; "
        f"another writer saw {seen}")
    assert not (side_folder / f"{side_id}.lock").exists(), (
        "the helper's lock should be let go once it has answered")
    assert not (sessions / "quest-1.lock").exists(), (
        "the parent's lock file should be gone once its session was closed: the next "
        "process to resume it would find quest-1.lock and believe it still written")


@pytest.mark.task("10.3")
def test_helpers_leave_no_descriptor_open_once_they_are_done(lesson, sessions):
    """A helper's side-chain is closed when it is done, not only let go: five turns
    that each ask a helper leave this process with as many open files as before, and
    every side-chain free."""
    before = open_descriptors()
    play(lesson, sessions, *[HELPER_TURN] * 5)
    left = open_descriptors() - before
    assert left == 0, (
        f"five helpers ran, each in a side-chain of its own, and the parent's log was "
        f"closed; this process now holds {left} more file descriptor(s) than before: "
        "each side-chain's writer must be closed when its helper is done, or a "
        "parent that runs for months runs out of them")
    left_locked(lesson, sessions)


PARENT_SYSTEM = "You are an adventurer in a small town."


@pytest.mark.task("10.3")
@pytest.mark.parametrize("where", ["side-chain", "memory"])
def test_the_helper_is_asked_the_question_exactly_as_the_model_sent_it(lesson,
                                                                       sessions,
                                                                       where):
    """The question is handed on as the model wrote it, not tidied: its indented first
    line, its blank line and the newline it ends with are the model's words too. The
    helper's first request holds it as it came, with a session or in memory, and so
    does its side-chain."""
    question = "  Which door?\n\n    door_a | door_b\n"
    script = [use(call("ask_helper", question=question)), say(HELPER_ANSWER),
              say(FINAL)]
    _, model = asked_a_helper(lesson, sessions, where, script)
    users = [m.get("content") for m in model.requests[1]["messages"]
             if m.get("role") == "user"]
    assert users == [question], (
        f"the model asked the helper ({where}) {question!r}: the helper's first "
        "request should carry that question as it is; it carried the user messages "
        f"{users}")
    if where == "memory":
        return
    first = json.loads(sidechain_bytes(sessions).split(b"\n")[0])
    assert first.get("content") == question, (
        f"the helper's side-chain should start with the question {question!r} as the "
        f"model sent it; its first line is {first}")


@pytest.mark.task("10.3")
def test_the_helper_has_its_own_history_and_the_same_world(lesson, sessions):
    """The helper's first request carries its own system prompt and its question
    alone (not the parent's prompt, history or summary: the parent's log was compacted
    before, as lesson 08 does), offers no ask_helper, and what it buys is bought in the
    parent's town."""
    town = HelperTown()
    # An earlier exchange the parent's log holds summarised: the parent's requests
    # carry the summary, and a helper carries nothing of it
    earlier = [{"role": "user", "content": "Greet the elder."},
               {"role": "assistant", "content": "The elder greets you back."},
               {"$marker": "compaction", "summary": "The elder was greeted.",
                "upto": 2, "at": "2026-01-01T00:00:00+00:00"}]
    (sessions / "quest-1.jsonl").write_text(
        "".join(json.dumps(line) + "\n" for line in earlier), encoding="utf-8")
    turn = ("Ask a helper to buy a torch.",
            [use(call("ask_helper", question="Buy a torch.")),
             use(call("buy", item="torch")), say("Bought a torch."), say("Done.")])
    _, model = play(lesson, sessions, PLAIN_TURN, turn, town=town,
                    system=PARENT_SYSTEM)

    helper_request = model.requests[2]
    users = [m.get("content") for m in helper_request["messages"]
             if m.get("role") == "user"]
    assert users == ["Buy a torch."], (
        "the helper starts with a history of its own: its first request should carry "
        "its question only, nothing of the parent's (whose log holds an earlier "
        f"exchange, summarised); it carried the user messages {users}")
    offered = [t["function"]["name"] for t in helper_request.get("tools") or []]
    assert sorted(offered) == ["buy", "talk_to"], (
        "the helper should be offered the parent's tools but ask_helper (a helper "
        f"starts no helper); it was offered {offered}")
    systems = [m for m in helper_request["messages"] if m.get("role") == "system"]
    assert systems == [{"role": "system", "content": lesson.HELPER_SYSTEM}], (
        "the helper's requests should start with its own system prompt, HELPER_SYSTEM, "
        f"and hold no other (the parent's is {PARENT_SYSTEM!r}); its system messages "
        f"are {systems}")
    assert helper_request.get("model") == model.requests[0].get("model"), (
        "the helper should ask the parent's model; it asked "
        f"{helper_request.get('model')!r}")
    after = [t["function"]["name"] for t in model.requests[-1].get("tools") or []]
    assert sorted(after) == ["ask_helper", "buy", "talk_to"], (
        "the parent's own tools stay as they were: its request after the helper "
        f"answered should offer ask_helper, buy and talk_to again; it offered {after}")
    assert town.inventory == ["torch"] and town.gold == 7, (
        "the helper works in the parent's world: the torch it bought should be in the "
        f"town's inventory; the town is {town}")


@pytest.mark.task("10.3")
def test_an_agent_without_a_session_runs_its_helper_in_memory(lesson, tmp_path,
                                                               monkeypatch):
    """An agent without a session log still gets its helper's answer, and nothing is
    written anywhere."""
    monkeypatch.chdir(tmp_path)
    model = ScriptedModel(HELPER_TURN[1])
    agent = lesson.Agent(model.client(), model=model.model, tools=HelperTown(),
                         system=PARENT_SYSTEM)
    answer = turn(lesson, agent, model, HELPER_TURN[0])
    assert answer == FINAL, (
        f"the parent's run should end with its model's last answer, {FINAL!r}; it "
        f"returned {answer!r}")
    results = [m.get("content") for m in agent.messages if m.get("role") == "tool"]
    assert results == [HELPER_ANSWER], (
        "without a session the helper runs in memory, and its answer is the call's "
        f"result; the results were {results}")
    helper_request = model.requests[1]["messages"]
    offered = [t["function"]["name"] for t in model.requests[1].get("tools") or []]
    assert helper_request == [{"role": "system", "content": lesson.HELPER_SYSTEM},
                              {"role": "user", "content": QUESTION}], (
        "the helper in memory is the same helper: its first request carries "
        "HELPER_SYSTEM and its question alone, not the parent's system prompt; it "
        f"carried {helper_request}")
    assert "ask_helper" not in offered, (
        f"a helper starts no helper, in memory too; it was offered {offered}")
    asked = model.requests[1].get("model")
    assert asked == model.model, (
        f"the helper in memory should ask the parent's model, {model.model!r}; it "
        f"asked {asked!r}")
    assert list(tmp_path.iterdir()) == [], "an agent without a session writes no file"


@pytest.mark.task("10.3")
def test_a_side_chain_another_writer_holds_is_never_told_to_the_model(lesson,
                                                                     sessions):
    """Another program holds the lock of the name the helper's side-chain would get
    (it opened that name as a session, with no log or meta file there yet). That is no
    verdict on the question, and the parent's model can do nothing with a lock: the
    helper starts in a side-chain of its own, or the run ends with SessionBusy, as
    any failure of what runs the helper ends it. Never is the call answered with an
    error about a busy side-chain."""
    folder = sessions / "quest-1.sidechains"
    folder.mkdir(mode=0o700)
    held = os.open(folder / f"{CALL_ID}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            messages, _ = play(lesson, sessions, HELPER_TURN)
        except lesson.SessionBusy:
            return      # the run ended with the failure, as a crash does
    finally:
        os.close(held)
    results = [m.get("content") for m in messages if m.get("role") == "tool"]
    assert results[:1] == [HELPER_ANSWER], (
        f"another program held {CALL_ID}.lock, the lock of the name the helper's "
        "side-chain would get: the helper should have started in a side-chain of its "
        "own, or the run ended with SessionBusy; instead the call's result was "
        f"{shown(str(results[:1]), 120)}, which tells the parent's model of a lock it "
        "can do nothing with, as if the question had failed")


@pytest.mark.task("10.3")
@pytest.mark.parametrize("where", ["side-chain", "memory"])
def test_a_helper_is_an_agent_of_its_parents_own_kind(lesson, sessions, where):
    """The helper is the parent lent out for one question. A program that runs its own
    subclass of Agent (one that counts every request it sends, say, to know what a
    session costs) has helpers of that very kind: every request, the helper's too,
    goes the way the program set up, with a session or in memory."""
    sent = []

    class Counting(lesson.Agent):
        """An agent that notes every request it sends to the model."""

        def ask_model(self):
            sent.append(type(self).__name__)
            return super().ask_model()

    model = ScriptedModel(list(HELPER_TURN[1]))
    log = lesson.SessionLog(sessions, "quest-1") if where == "side-chain" else None
    try:
        agent = Counting(model.client(), model=model.model, tools=HelperTown(),
                         session=log)
        turn(lesson, agent, model, HELPER_TURN[0])
    finally:
        if log is not None:
            log.close()
    assert len(sent) == len(model.requests) == 4, (
        f"a program ran its own subclass of Agent ({where}), which notes every "
        "request it sends: the parent's two requests and its helper's two should all "
        f"have gone through it; {len(sent)} of {len(model.requests)} did. The helper "
        "is an agent of its parent's own class (type(self)), not the course's Agent")


@pytest.mark.task("10.3")
def test_a_helper_in_memory_works_in_its_parents_world(lesson):
    """Without a session the helper is the same helper: it uses the parent's tools in
    the parent's world, and what it buys is bought in the parent's town."""
    town = HelperTown()
    model = ScriptedModel([use(call("ask_helper", question="Buy a torch.")),
                           use(call("buy", item="torch")), say("Bought a torch."),
                           say("Done.")])
    agent = lesson.Agent(model.client(), model=model.model, tools=town)
    turn(lesson, agent, model, "Ask a helper to buy a torch.")
    assert town.inventory == ["torch"] and town.gold == 7, (
        "a helper in memory works in its parent's world: the torch it bought should be "
        f"in the parent's town's inventory, its price paid; the town is {town}")


@pytest.mark.task("10.3")
def test_two_helpers_in_memory_each_start_with_their_own_question_alone(lesson):
    """Without a session, two ask_helper calls in one reply are two helpers too: each
    one's first request carries HELPER_SYSTEM and its own question alone, nothing of
    the helper before it, and each call's result is its own helper's answer."""
    questions = ["Ask the elder about the cave.", "Ask the guard about the gate."]
    answers = ["The elder says: bring a rope.", "The guard says: it opens at dawn."]
    model = ScriptedModel([use(*(call("ask_helper", question=q) for q in questions)),
                           *(say(a) for a in answers), say(FINAL)])
    agent = lesson.Agent(model.client(), model=model.model, tools=HelperTown())
    turn(lesson, agent, model, "Ask two helpers.", "two ask_helper calls in one "
         "reply: two helpers in memory, then the parent's answer")
    for number, question in enumerate(questions, 2):
        sent = model.requests[number - 1]["messages"]
        assert sent == [{"role": "system", "content": lesson.HELPER_SYSTEM},
                        {"role": "user", "content": question}], (
            f"request {number} is helper {number - 1}'s first: it should carry "
            f"HELPER_SYSTEM and its question, {question!r}, alone; it carried "
            f"{[shown(json.dumps(m, ensure_ascii=False), 60) for m in sent]}. Was "
            "one helper kept in memory and asked again?")
    results = [m.get("content") for m in agent.messages if m.get("role") == "tool"]
    assert results == answers, (
        f"each call's result should be its own helper's answer, {answers}; the "
        f"results were {results}")


def tells_of_no_file(said, verdict):
    """Fail, in words, if a result the parent's model reads names the helper's files:
    the result is for the model, which can do nothing with a file (and would read its
    name in every request from then on); the pointer is for people and programs."""
    named = [word for word in (".jsonl", "sidechain", "side-chain", ".meta.json")
             if word in said.lower()]
    assert not named, (
        f"the helper {verdict}, and the parent's model read {said!r}, which speaks of "
        f"the helper's files ({', '.join(named)}): a result is an ordinary tool "
        "result, saying what the model can act on and nothing about files; where the "
        "helper's work is kept is the pointer's to say, in the log")


@pytest.mark.task("10.3")
@pytest.mark.parametrize("odd", NO_ANSWER_TEXT)
def test_a_helper_reply_that_gives_no_answer_is_an_error_the_model_can_read(
        lesson, sessions, odd):
    """A helper whose last reply gives no answer (no text, only thinking, a tool call
    written as text) hands its parent an error result saying so, never the raw reply;
    the helper's own log keeps the reply as it came."""
    turn = ("Ask a helper.", [use(call("ask_helper", question=QUESTION)),
                              ODD_REPLIES[odd], say(FINAL)])
    messages, model = play(lesson, sessions, turn)
    result = messages[2]
    raw = ODD_REPLIES[odd].message["content"]
    said = str(result.get("content"))
    assert result.get("role") == "tool" and said.startswith("error:") and all(
        word in said.lower() for word in ("helper", "answer")), (
        f"the helper's last reply ({odd}: {raw!r}) gives no answer: the parent's model "
        "should read an error result (starting 'error:', as every tool's) saying that "
        "the helper gave no answer, not the reply as it came; the result was "
        f"{result}")
    tells_of_no_file(said, f"gave no answer ({odd})")
    assert not (raw or "").strip() or raw.strip() not in said, (
        f"the helper's last reply ({odd}: {raw!r}) gives no answer: the error should "
        "say so, never hand the reply on inside it (its thinking, or a call written as "
        f"text, is no answer to read); the result was {said!r}")
    assert result in model.requests[-1]["messages"], (
        "the parent's next request should carry the error result")
    helper = [json.loads(line) for line in sidechain_bytes(sessions).split(b"\n")
              if line]
    last = helper[-1] if helper else None
    assert last and last.get("content") == (raw or ""), (
        "the helper's own log keeps its last reply as the model sent it; its last "
        f"line is {last}")


@pytest.mark.task("10.3")
def test_two_helper_calls_in_one_reply_get_a_helper_each(lesson, sessions):
    """The model asks two helpers in one reply (two ask_helper calls, as models call
    tools in parallel): each call gets a helper of its own, with its own question, in
    a side-chain named after that call, and its own answer, all of it (a line or
    several), as that call's result."""
    questions = ["Ask the elder about the cave.", "Ask the guard about the gate."]
    answers = ["The elder says: bring a rope.",
               "The guard says:\n- it opens at dawn;\n- bring a lantern."]
    script = [use(*(call("ask_helper", question=q) for q in questions)),
              *(say(a) for a in answers), say(FINAL)]
    messages, model = play(lesson, sessions, ("Ask two helpers.", script),
                           expected="two ask_helper calls in one reply: two helpers, "
                           "then the parent's answer")
    ids = [c["id"] for c in messages[1].get("tool_calls") or []]
    results = {m.get("tool_call_id"): m.get("content") for m in messages
               if m.get("role") == "tool"}
    assert len(ids) == 2 and results == dict(zip(ids, answers)), (
        f"the reply called ask_helper twice ({ids}): each call's result should be "
        f"its own helper's answer, {dict(zip(ids, answers))}; the results were "
        f"{results}")
    pointers = [(p.get("call"), p.get("sidechain"))
                for p in pointers_in(sessions / "quest-1.jsonl")]
    assert pointers == [(i, i) for i in ids], (
        "each call should have its pointer, naming that call and the side-chain named "
        f"after it, in the order of the calls: {[(i, i) for i in ids]}; the pointers "
        f"are {pointers}")
    for call_id, question in zip(ids, questions):
        first = lines_of(sessions / "quest-1.sidechains" / f"{call_id}.jsonl")[:1]
        assert first == [{"role": "user", "content": question}], (
            f"the side-chain of {call_id} should begin with that call's question, "
            f"{question!r}; it begins with {first}")


@pytest.mark.task("10.3")
def test_a_helper_in_memory_reads_its_last_reply_as_one_with_a_log_does(lesson):
    """Without a session, the helper's last reply is read as a side-chain's helper's
    is: the parent's model gets the answer without the thinking, or an error saying
    that the helper gave no answer, never the reply as it came."""
    for odd in (*NO_ANSWER_TEXT, "think_then_text"):
        model = ScriptedModel([use(call("ask_helper", question=QUESTION)),
                               ODD_REPLIES[odd], say(FINAL)])
        agent = lesson.Agent(model.client(), model=model.model, tools=HelperTown())
        turn(lesson, agent, model, "Ask a helper.")
        said = str(agent.messages[2].get("content"))
        raw = ODD_REPLIES[odd].message["content"]
        if odd == "think_then_text":
            assert said == ANSWER_AFTER_THOUGHT, (
                "a helper in memory thought, then answered: the parent's model should "
                f"read the answer alone, {ANSWER_AFTER_THOUGHT!r}; it read {said!r}")
        else:
            assert said.startswith("error:") and all(
                word in said.lower() for word in ("helper", "answer")), (
                f"a helper in memory whose last reply ({odd}: {raw!r}) gives no "
                "answer: the parent's model should read an error result (starting "
                "'error:') saying that the helper gave no answer, as with a session; "
                f"it read {said!r}")


# A helper's last reply, stopped by the server at its length limit mid-sentence
CUT_ANSWER = "The elder says to bring a torch, and that the cave's"


def cut_off(text):
    return raw({"role": "assistant", "content": text}, finish_reason="length")


@pytest.mark.task("10.3")
@pytest.mark.parametrize("where", ["side-chain", "memory"])
@pytest.mark.parametrize("text", [CUT_ANSWER, "<think>The elder said the cave", ""],
                         ids=["text", "thinking", "nothing"])
def test_a_helper_answer_the_server_cut_off_is_an_error_saying_so(
        lesson, sessions, where, text):
    """A helper whose last reply the server stopped at its length limit
    (finish_reason "length") gave no whole answer: the parent's model reads an error
    saying it was cut off, with the text the helper had given without its thinking,
    never that text as if it were whole; the side-chain keeps the reply as it came. A
    reply cut off before it said anything was cut off all the same, and its error
    says so rather than quote an empty text."""
    script = [use(call("ask_helper", question=QUESTION)), cut_off(text), say(FINAL)]
    messages, model = asked_a_helper(lesson, sessions, where, script)
    said = str(messages[2].get("content"))
    partial = text if text == CUT_ANSWER else None
    assert said.startswith("error:") and "cut off" in said.lower() and (
        partial is None or partial in said), (
        f"the server stopped the helper's last reply at its length limit "
        f"(finish_reason 'length'): {text!r} reads as whole, and its end is lost. The "
        "parent's model should read an error (starting 'error:') saying the answer was "
        "cut off" + (f", followed by what the helper had said, {partial!r}"
                     if partial else " (the helper had said nothing, or nothing but "
                     "thinking)")
        + f"; it read {said!r}")
    if partial is None:
        assert "<think>" not in said, (
            f"the helper's thinking is never passed on, cut off or not; the result "
            f"was {said!r}")
        assert not said.rstrip().endswith(":"), (
            "the helper had said nothing but thinking, or nothing at all, before the "
            "server cut its reply off: the error should say so, not quote an empty "
            f"text as what it had said; the result was {said!r}")
    tells_of_no_file(said, "was cut off at the server's length limit")
    if where == "side-chain":
        helper = [json.loads(line) for line in sidechain_bytes(sessions).split(b"\n")
                  if line]
        last = helper[-1] if helper else {}
        assert last.get("content") == text, (
            "the helper's own log keeps its last reply as the model sent it; its last "
            f"line is {last}")
        left_locked(lesson, sessions)


@pytest.mark.task("10.3")
@pytest.mark.parametrize("ending", ["whole", "cut off"])
def test_answer_of_gives_what_the_helpers_run_returned(lesson, ending):
    """answer_of(helper, question) runs the helper on the question and gives what its
    run returned, as it returned it (its thinking, its spaces, a reply with no text:
    reading the answer out of it is use_tool's); when the server cut the helper's last
    reply off at its length limit it raises AnswerCutOff, whose answer is that very
    text. A chat, or any program, that calls answer_of gets the helper's reply as the
    helper's own log keeps it."""
    for content in ("<think>The elder spoke of the cave.</think>\n  A torch, a rope.\n",
                    None):
        reply = raw({"role": "assistant", "content": content},
                    finish_reason="length" if ending == "cut off" else "stop")
        twin = ScriptedModel([reply])
        returned = lesson.Agent(twin.client(), model=twin.model,
                                tools=lesson.Toolbox([], {})).run(QUESTION)
        model = ScriptedModel([reply])
        helper = lesson.Agent(model.client(), model=model.model,
                              tools=lesson.Toolbox([], {}), system=lesson.HELPER_SYSTEM)
        try:
            given, raised = lesson.answer_of(helper, QUESTION), None
        except lesson.AnswerCutOff as error:
            given, raised = None, error
        asked = [m.get("content") for m in model.requests[0]["messages"]
                 if m.get("role") == "user"] if model.requests else []
        assert asked == [QUESTION], (
            f"answer_of should run the helper on the question {QUESTION!r}, as it is; "
            f"the helper's model was asked {asked or 'nothing'}")
        if ending == "whole":
            assert raised is None and given == returned, (
                f"the helper's run returned {returned!r} (its reply {content!r}, "
                f"whole): answer_of should give that, as it is; it "
                + (f"gave {given!r}" if raised is None else f"raised {raised!r}"))
        else:
            assert raised is not None and raised.answer == returned, (
                f"the server cut the helper's reply {content!r} off at its length "
                "limit: answer_of should raise AnswerCutOff holding the text the "
                f"helper's run returned, {returned!r}; it "
                + (f"raised it holding {raised.answer!r}" if raised is not None
                   else f"gave {given!r}"))


@pytest.mark.task("10.3")
@pytest.mark.parametrize("ending", ["whole", "cut off"])
def test_a_long_helper_answer_reaches_the_parent_whole(lesson, sessions, ending):
    """A helper's answer of many lines, longer than 64 KiB (a buffer's size), is the
    call's result as it came, not its start; cut off, the error quotes all the helper
    had said."""
    answer = "".join(f"{n}. The elder remembers the cave's passage number {n}.\n"
                     for n in range(1, 1501)).strip()     # past 64 KiB
    last = say(answer) if ending == "whole" else cut_off(answer)
    script = [use(call("ask_helper", question=QUESTION)), last, say(FINAL)]
    messages, _ = play(lesson, sessions, ("Ask a helper.", script))
    said = str(messages[2].get("content"))
    whole = said == answer if ending == "whole" else answer in said
    lines = answer.count("\n") + 1
    assert whole, (
        f"the helper's last reply was {len(answer)} characters on {lines} lines"
        + (": the call's result should be all of it"
                   if ending == "whole" else ", cut off at the server's length limit: "
                   "the error should be followed by all the helper had said")
        + f"; the result was {shown(said, 60)}: {where_it_differs(said, answer)}")


def where_it_differs(said, answer):
    """Where a result first stops holding a helper's answer, in words."""
    start = said.find(answer[:40])
    if start < 0:
        return f"the helper's first words ({answer[:40]!r}) are not in it"
    held = said[start:]
    k = next((k for k, (a, b) in enumerate(zip(held, answer)) if a != b),
             min(len(held), len(answer)))
    return (f"{k} characters of the answer are in it as the helper said them, then it "
            f"holds {held[k:k + 30]!r} where the helper said {answer[k:k + 30]!r}")


@pytest.mark.task("10.3")
def test_only_the_helpers_last_reply_counts_as_cut_off(lesson, sessions):
    """A reply the server cut off on the way (one that called a tool) is not the
    helper's answer: the helper's answer after it, whole, is the call's result."""
    script = [use(call("ask_helper", question=QUESTION)),
              use(call("talk_to", npc="elder"), finish_reason="length"),
              say(HELPER_ANSWER), say(FINAL)]
    messages, _ = play(lesson, sessions, ("Ask a helper.", script))
    assert messages[2].get("content") == HELPER_ANSWER, (
        "the helper's first reply, a tool call, was stopped at the length limit; its "
        "last reply came whole, and is its answer: the result should be "
        f"{HELPER_ANSWER!r}; it was {messages[2].get('content')!r}")


@pytest.mark.task("10.3")
@pytest.mark.parametrize("where", ["side-chain", "memory"])
def test_words_the_helper_said_with_a_tool_call_are_not_its_answer(lesson, sessions,
                                                                    where):
    """A helper that says something as it calls a tool ("Let me ask the elder.") has
    not answered yet: its answer is its last reply, the one after its tools ran."""
    early = "Let me ask the elder first."
    script = [use(call("ask_helper", question=QUESTION)),
              use(call("talk_to", npc="elder"), content=early),
              say(HELPER_ANSWER), say(FINAL)]
    messages, _ = asked_a_helper(lesson, sessions, where, script)
    said = messages[2].get("content")
    assert said == HELPER_ANSWER, (
        f"the helper said {early!r} as it called talk_to, then answered "
        f"{HELPER_ANSWER!r}: its answer is its last reply, and the call's result "
        f"should be that; it was {said!r}")


@pytest.mark.task("10.3")
def test_a_helpers_thinking_is_left_out_of_its_answer(lesson, sessions):
    """A helper that thinks before it answers hands its parent the answer alone: the
    parent's model never reads the helper's thinking."""
    turn = ("Ask a helper.", [use(call("ask_helper", question=QUESTION)),
                              ODD_REPLIES["think_then_text"], say(FINAL)])
    messages, _ = play(lesson, sessions, turn)
    assert messages[2] == {"role": "tool", "tool_call_id": CALL_ID,
                           "content": ANSWER_AFTER_THOUGHT}, (
        "the call's result should be the helper's answer without its <think> block, "
        f"{ANSWER_AFTER_THOUGHT!r}; it was {messages[2]}")


@pytest.mark.task("10.3")
@pytest.mark.parametrize("where", ["side-chain", "memory"])
def test_a_helper_that_gives_up_is_an_error_the_model_can_read(lesson, sessions, where):
    """A helper still calling tools after max_turns requests (the parent's) ends its
    call with an error result saying so, and after how many; the parent goes on. With a
    session or in memory; with a session, the side-chain's lock goes with the helper
    that gave up."""
    busy = [use(call("talk_to", npc="guard"))] * 2
    script = [use(call("ask_helper", question="Ask the guard.")), *busy,
              say("The helper gave up.")]
    if where == "memory":
        model = ScriptedModel(script)
        agent = lesson.Agent(model.client(), model=model.model, tools=HelperTown(),
                             max_turns=2)
        turn(lesson, agent, model, "Ask a helper.")
    else:
        agent, model, log = open_agent(lesson, sessions, script, max_turns=2)
        with log:
            turn(lesson, agent, model, "Ask a helper.")
    result = agent.messages[2]
    said = str(result.get("content"))
    assert result.get("role") == "tool" and said.startswith("error:") and (
        "helper" in said.lower() and "2 requests" in said), (
        "the helper gave up after 2 requests (the parent's max_turns): the parent's "
        "model should read an error result (starting 'error:', as every tool's) saying "
        "that the helper gave up, and after how many requests; the result was "
        f"{result}")
    tells_of_no_file(said, "gave up")
    if where == "side-chain":
        side_folder = sessions / "quest-1.sidechains"
        try:
            with lesson.SessionLog(side_folder, CALL_ID) as other:
                other.open_for_append()
        except lesson.SessionBusy as error:
            pytest.fail("the helper gave up (it raised MaxTurnsExceeded), and its "
                        "side-chain is still locked: another writer was refused it "
                        f"({error}). A helper that ends with an error never let go "
                        "of its log", pytrace=False)


@pytest.mark.task("10.3")
@pytest.mark.parametrize("arguments", ['{"npc": "elder', '["elder"]', '{"npc": NaN}'])
def test_other_calls_beside_a_helper_are_answered_as_before(lesson, sessions,
                                                           arguments):
    """With ask_helper offered, a call to another tool is answered as lesson 00 answered
    it: arguments the model sent broken are reported as broken (the stored call holds
    "{}" in their place, which would run the tool with no arguments at all)."""
    town = HelperTown()
    asked = {"id": CALL_ID, "type": "function",
             "function": {"name": "talk_to", "arguments": arguments}}
    expected = lesson.run_tool(HelperTown(), asked)
    script = [use(raw_call("talk_to", arguments)), say("Let me ask properly.")]
    messages, _ = play(lesson, sessions, ("Talk to the elder.", script), town=town,
                       expected="a call to talk_to should be answered by the tool, "
                       "as before, and start no helper")
    result = messages[2] if len(messages) > 2 else {}
    assert result.get("content") == expected, (
        f"the model called talk_to with the arguments {arguments!r}, which hold no "
        "JSON object: its result should say so, as lesson 00's run_tool says it of the "
        f"call as the model sent it ({expected!r}); it was {result.get('content')!r}. "
        "The stored call holds '{}' in their place, and running that one tells the "
        "model something else than what it sent")


def a_full_disk_in_the_side_chains(monkeypatch, every_file=False):
    """From now on, every write to a log in a side-chains folder meets a full disk (to
    any file there, its meta files too, with `every_file`)."""
    real = os.write

    def write(fd, data):
        try:
            where = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            where = ""
        if ".sidechains/" in where and (every_file or where.endswith(".jsonl")):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)


def a_client_that_cuts_a_reply(model, number):
    """A client of `model` that gets the body of its reply to request `number` (from 0)
    cut short, as a proxy that drops the connection half-way through a body leaves it:
    the status is 200 and the JSON stops in the middle, so the openai client raises
    json's JSONDecodeError (a ValueError) out of the request."""
    import httpx
    handler = model.router().handler
    count = []

    def cut(request):
        response = handler(request)
        count.append(request)
        if len(count) - 1 != number:
            return response
        return httpx.Response(200, headers={"content-type": "application/json"},
                              content=response.read()[:40])
    return openai.OpenAI(base_url=model.base_url, api_key="scripted", max_retries=0,
                         http_client=httpx.Client(transport=httpx.MockTransport(cut)))


@pytest.mark.task("10.3")
@pytest.mark.parametrize("where, failure", [
    ("side-chain", "server error"), ("memory", "server error"),
    ("side-chain", "dropped connection"), ("memory", "dropped connection"),
    ("side-chain", "full disk"), ("side-chain", "full disk at its start"),
    ("side-chain", "server error after a tool ran"),
    ("memory", "dropped connection after a tool ran"),
    ("side-chain", "refused request"), ("memory", "refused request"),
    ("side-chain", "rate limit"), ("memory", "rate limit"),
    ("side-chain", "reply cut short"), ("memory", "reply cut short")])
def test_a_helper_that_fails_otherwise_ends_the_run_as_a_crash_does(
        lesson, sessions, monkeypatch, where, failure):
    """The helper did not give up: its request met a server error (HTTP 500) or a
    dropped connection, at once or after it had said a few words and a tool had run,
    a refusal (HTTP 400: too long for the model's window) or a rate limit (HTTP 429),
    a reply whose body a proxy cut short (the client raises json's JSONDecodeError, a
    ValueError like those a helper's own verdicts are read from), or its log a full
    disk, from its first line or from its meta file, as its side-chain is started.
    That is no answer the model can use (its words on the way are none), and "the
    helper gave up" would be untrue: the run ends with the error, as a crash does, no
    result answers the call (lesson 04's repair will), and the side-chain is free
    again, holding what the helper wrote and nothing more. A parent resumed later
    finds its call answered by the repair."""
    on_the_way = [use(call("talk_to", npc="elder"), content="Let me ask the elder.")]
    helper_steps = {
        "server error": [Fail(500)], "dropped connection": [Disconnect()],
        "full disk": [say(HELPER_ANSWER)],
        "full disk at its start": [say(HELPER_ANSWER)],
        "server error after a tool ran": [*on_the_way, Fail(500)],
        "dropped connection after a tool ran": [*on_the_way, Disconnect()],
        "refused request": [Fail(400, "This model's maximum context length is 4096 "
                                 "tokens; your messages resulted in 5000 tokens.")],
        "rate limit": [Fail(429, "Rate limit reached; try again in 20s.")],
        "reply cut short": [say(HELPER_ANSWER)]}[failure]
    # What the helper wrote before it failed: its question, and its words on the way
    wrote = {"full disk": [], "full disk at its start": [],
             "server error after a tool ran": ["user", "assistant", "tool"]}.get(
        failure, ["user"])
    script = [use(call("ask_helper", question=QUESTION)), *helper_steps,
              say("The helper could not answer."), say(FINAL)]
    model = ScriptedModel(script)
    log = lesson.SessionLog(sessions, "quest-1") if where == "side-chain" else None
    # The helper's first request is the second the model gets
    client = (a_client_that_cuts_a_reply(model, 1) if failure == "reply cut short"
              else model.client())
    agent = lesson.Agent(client, model=model.model, tools=HelperTown(), session=log)
    ended = None
    parent_taken = False
    try:
        if failure.startswith("full disk"):
            a_full_disk_in_the_side_chains(monkeypatch,
                                           every_file=failure != "full disk")
        agent.run(HELPER_TURN[0])
    except NotImplementedError:
        raise
    except Exception as error:
        ended = error
        # The run ended; the parent's log is still open, and still the parent's
        parent_taken = log is not None and another_writer_takes(lesson, sessions,
                                                                "quest-1")
    finally:
        monkeypatch.undo()
        if log is not None:
            log.close()
    results = [m for m in agent.messages if m.get("role") == "tool"]
    assert ended is not None and not results, (
        f"the helper's work met a {failure}: no answer, and no giving up either. The "
        "run should end with that error, as a crash does, leaving the call unanswered "
        "for lesson 04's repair; instead "
        + (f"the parent's model read the result {results[0].get('content')!r}"
           if results else "the run ended without an error")
        + (f", and the run ended with {type(ended).__name__}" if ended else ""))
    # That very error, as the parent's own request or write would raise it: the caller
    # tells a server's failure from a full disk by its type
    if failure.startswith("full disk"):
        met, meant = OSError, "the disk's OSError"
    elif failure.startswith("dropped connection"):
        met, meant = openai.APIConnectionError, "openai's APIConnectionError"
    elif failure == "reply cut short":
        met, meant = json.JSONDecodeError, "the client's json.JSONDecodeError"
    else:
        met, meant = openai.APIStatusError, "openai's APIStatusError"
    assert isinstance(ended, met), (
        f"the helper's work ({where}) met a {failure}, and the run should end with "
        f"that very error, {meant}, as a crash of the parent's own request or write "
        "would, so that the caller can tell what failed; it ended with "
        f"{described(ended)}")
    assert not parent_taken, (
        f"the helper's work met a {failure}, and the run ended with it; the parent's "
        "log was still open, yet another writer took the parent session: however the "
        "helper ends, the parent still holds its own lock")
    if where == "side-chain":
        folder = sessions / "quest-1.sidechains"
        for name in sorted(p.name[:-len(".meta.json")]
                           for p in folder.glob("*.meta.json")):
            try:
                with lesson.SessionLog(folder, name) as other:
                    other.open_for_append()
            except lesson.SessionBusy as error:
                pytest.fail(f"the helper's run ended with {type(ended).__name__}, and "
                            f"its side-chain {name} is still locked: {error}",
                            pytrace=False)
        side = folder / f"{CALL_ID}.jsonl"
        kept = [m.get("role") for m in lines_of(side)] if side.exists() else []
        assert kept == wrote, (
            f"the helper's work met a {failure}: its side-chain should hold what the "
            f"helper wrote before it, {wrote or 'nothing'}, and nothing its model "
            f"never said; it holds {kept or 'nothing'}")
        day_two, model, log = open_agent(lesson, sessions, PLAIN_TURN[1])
        with log:
            turn(lesson, day_two, model, PLAIN_TURN[0], "the parent should resume "
                 f"after its helper met a {failure}, the call answered by the repair")
        parent = lines_of(sessions / "quest-1.jsonl")
        kinds = [line.get("role") or line.get("$marker") for line in parent]
        # No meta file, no side-chain: no pointer either
        expected = ["user", "assistant", "sidechain", "repair", "tool"]
        if failure == "full disk at its start":
            expected.remove("sidechain")
        result = len(expected) - 1
        assert kinds[:len(expected)] == expected and (
            "interrupted" in str(parent[result].get("content"))), (
            f"the helper's work met a {failure} and the run ended with it: resumed, "
            "the parent's log should hold the call, "
            + ("the pointer, " if "sidechain" in expected else "")
            + "then lesson 04's repair (its marker and a result saying the call was "
            f"interrupted), since no result was written for the call; it holds {kinds}"
            + (f", the result {parent[result].get('content')!r}"
               if len(parent) > result else ""))


@pytest.mark.task("10.3")
@pytest.mark.parametrize("where", ["side-chain", "memory"])
@pytest.mark.parametrize("limit", ["budget", "reply_room"])
def test_the_helper_asks_within_its_parents_limits(lesson, sessions, where, limit):
    """The helper asks the parent's model, whose window the parent's budget and room
    for the reply describe (lesson 08): a helper request those would not let out is not
    sent either, and the run ends with ContextOverflow, as the parent's own would."""
    town = HelperTown()
    question = "What does the elder know about the cave, and who else knows? " * 40
    room = lesson.REPLY_ROOM + (1000 if limit == "reply_room" else 0)
    helper_view = [{"role": "system", "content": lesson.HELPER_SYSTEM},
                   {"role": "user", "content": question}]
    helper_tools = [s for s in town.schemas if s["function"]["name"] != "ask_helper"]
    needed = (lesson.estimate_tokens(helper_view) + lesson.estimate_tokens(helper_tools)
              + room)
    budget = needed - 1         # the parent's first request fits, the helper's does not
    script = [use(call("ask_helper", question=question)), say(HELPER_ANSWER),
              say(FINAL)]
    model = ScriptedModel(script)
    log = lesson.SessionLog(sessions, "quest-1") if where == "side-chain" else None
    agent = lesson.Agent(model.client(), model=model.model, tools=town, session=log,
                         budget=budget, reply_room=room)
    try:
        turn(lesson, agent, model, "Ask a helper.")
        ended = None
    except lesson.ContextOverflow as error:
        ended = error
    finally:
        if log is not None:
            log.close()
    assert len(model.requests) == 1 and ended is not None, (
        f"the parent's budget is {budget} tokens with {room} kept for the reply; the "
        f"helper's first request needs about {needed} with that room. It should never "
        "be sent (the helper asks the parent's model, whose window those limits "
        "describe), and the run should end with ContextOverflow, as the parent's own "
        f"would; the model received {len(model.requests)} request(s), and the run "
        f"{'raised ' + repr(ended) if ended else 'ended without an error'}")
    results = [m for m in agent.messages if m.get("role") == "tool"]
    assert not results, (
        "the helper's request did not fit the parent's window: that is no giving up "
        "and no answer, and the run should end with ContextOverflow before any result "
        "answers the call (lesson 04's repair will); the parent recorded the result "
        f"{results[0].get('content')!r}" if results else "")


@pytest.mark.task("10.3")
@pytest.mark.parametrize("where", ["side-chain", "memory"])
def test_a_ctrl_c_while_the_helper_works_stops_the_parents_run(lesson, sessions,
                                                               where):
    """The user presses Ctrl-C while the helper works (here: inside the tool it runs).
    That is no answer and no giving up: the parent's run stops with the
    KeyboardInterrupt, and the parent's model is asked nothing more. However the
    helper ended, a Ctrl-C too, its side-chain is free and its writer closed: once
    the parent is closed, the process holds no more open files than before (a chat
    catches Ctrl-C to go on, and a side-chain kept open stays locked)."""
    before = open_descriptors()
    town = HelperTown()

    def interrupted(npc):
        raise KeyboardInterrupt

    town.functions = {**town.functions, "talk_to": interrupted}
    script = HELPER_TURN[1]
    model = ScriptedModel(list(script))
    log = lesson.SessionLog(sessions, "quest-1") if where == "side-chain" else None
    agent = lesson.Agent(model.client(), model=model.model, tools=town, session=log)
    try:
        with in_words(lesson, model, "the Ctrl-C should stop the run"):
            agent.run(HELPER_TURN[0])
        stopped = False
    except KeyboardInterrupt:
        stopped = True
    finally:
        if log is not None:
            log.close()
    assert stopped and len(model.requests) == 2, (
        f"the user pressed Ctrl-C while the helper ({where}) ran a tool; the parent's "
        "run should stop with it, the parent's model asked nothing more. "
        + ("Instead the run went on" if not stopped else "The run stopped")
        + f": {told(lesson, model)}")
    if where == "side-chain":
        left = open_descriptors() - before
        assert left <= 0, (
            "the user pressed Ctrl-C while the helper worked, and the parent's log was "
            f"then closed; this process still holds {left} more file descriptor(s) "
            "than before: the side-chain's writer must be closed however its helper "
            "ends, a Ctrl-C (a KeyboardInterrupt, which is no Exception) included")
        left_locked(lesson, sessions)


@pytest.mark.task("10.3")
@pytest.mark.parametrize("where", ["side-chain", "memory"])
def test_a_parent_that_keeps_no_room_for_the_reply_has_a_helper_that_keeps_none(
    lesson, sessions, where
):
    """A parent may keep no room for the reply (its budget is all the window): its
    helper, within the same limits, sends a request that fits that budget, as the
    parent would, rather than refuse it for a room the parent never asked for."""
    town = HelperTown()
    question = "What does the elder know about the cave, and who else knows? " * 40
    helper_view = [{"role": "system", "content": lesson.HELPER_SYSTEM},
                   {"role": "user", "content": question}]
    helper_tools = [s for s in town.schemas if s["function"]["name"] != "ask_helper"]
    needed = (lesson.estimate_tokens(helper_view)
              + lesson.estimate_tokens(helper_tools))
    # Room enough for the parent's requests (the question is in its call), not
    # enough for the helper's with the default room for the reply
    budget = needed + lesson.REPLY_ROOM // 2
    script = [use(call("ask_helper", question=question)), say(HELPER_ANSWER),
              say(FINAL)]
    model = ScriptedModel(script)
    log = lesson.SessionLog(sessions, "quest-1") if where == "side-chain" else None
    agent = lesson.Agent(model.client(), model=model.model, tools=town, session=log,
                         budget=budget, reply_room=0)
    try:
        with in_words(lesson, model, "the parent should answer as scripted"):
            answer = agent.run("Ask a helper.")
        ended = None
    except lesson.ContextOverflow as error:
        answer, ended = None, error
    finally:
        if log is not None:
            log.close()
    assert ended is None and answer == FINAL, (
        f"the parent keeps no room for the reply, its budget {budget} tokens; the "
        f"helper's ({where}) first request needs about {needed}, which fits. The "
        "helper should send it, within its parent's limits, not others; the run "
        + (f"raised {ended!r}" if ended else f"answered {answer!r}")
        + f". What the model was asked: {told(lesson, model)}")


@pytest.mark.task("10.3")
@pytest.mark.parametrize("where", ["side-chain", "memory"])
def test_a_helper_request_that_just_fits_its_parents_limits_is_sent(lesson, sessions,
                                                                    where):
    """The helper's first request needs exactly the parent's budget, the room for the
    reply counted once, as the parent counts it: a request that needs no more than the
    budget fits, and the helper sends it. Its limits are its parent's, neither
    tightened (the room for the reply taken off the budget a second time) nor shared
    out. (The parent's own next request carries the question and the answer, and
    need not fit: the test asks only whether the helper's was sent.)"""
    town = HelperTown()
    question = "What does the elder know about the cave, and who else knows? " * 40
    helper_view = [{"role": "system", "content": lesson.HELPER_SYSTEM},
                   {"role": "user", "content": question}]
    helper_tools = [s for s in town.schemas if s["function"]["name"] != "ask_helper"]
    budget = (lesson.estimate_tokens(helper_view)
              + lesson.estimate_tokens(helper_tools) + lesson.REPLY_ROOM)
    script = [use(call("ask_helper", question=question)), say(HELPER_ANSWER),
              say(FINAL)]
    model = ScriptedModel(script)
    log = lesson.SessionLog(sessions, "quest-1") if where == "side-chain" else None
    agent = lesson.Agent(model.client(), model=model.model, tools=town, session=log,
                         budget=budget)
    ended = None
    try:
        with in_words(lesson, model, "the helper should send its first request"):
            agent.run("Ask a helper.")
    except lesson.ContextOverflow as error:
        ended = error
    finally:
        if log is not None:
            log.close()
    firsts = [request["messages"][0].get("content") for request in model.requests[1:2]]
    assert firsts == [lesson.HELPER_SYSTEM], (
        f"the parent's budget is {budget} tokens, with the default room for the "
        f"reply ({lesson.REPLY_ROOM}); the helper's ({where}) first request needs "
        "about as much, that room counted once, and fits. It should have been sent, "
        f"as the model's second request; {told(lesson, model)}"
        + (f", and the run raised {ended!r}" if ended else ""))


@pytest.mark.task("10.3")
@pytest.mark.parametrize("arguments", ['{"question": "Ask the elder', "{}",
                                       '{"question": "  "}', '{"question": ""}',
                                       '{"question": "\\n\\t"}',
                                       '{"question": 7}', '["Ask the elder."]'])
@pytest.mark.parametrize("tools", ["town", "schema only"])
def test_a_call_that_asks_no_question_is_an_error_the_model_can_read(lesson, sessions,
                                                                     arguments, tools):
    """An ask_helper call whose arguments are no JSON object, or hold no question as
    text (nothing, or blanks of any kind: spaces, a line end, a tab), is answered
    with an error result the model can read, saying what was wrong; no helper starts
    and the parent goes on. The same whether the tools hold a function named
    ask_helper (the town's) or only offer its schema: a call the helper answers never
    reads as a call to a tool that does not exist."""
    town = None
    if tools == "schema only":
        functions = {k: f for k, f in HelperTown().functions.items()
                     if k != "ask_helper"}
        town = lesson.Toolbox([*TOOL_SCHEMAS, HELPER_SCHEMA], functions)
    turn = ("Ask a helper.", [use(raw_call("ask_helper", arguments)),
                              say("Sorry, let me ask properly.")])
    messages, model = play(
        lesson, sessions, turn, town=town,
        expected=f"the model called ask_helper with the arguments {arguments!r}, which "
        "ask no question: the call's result should be an error the model can read "
        "(starting 'error:'), no helper should start, and the parent's model should be "
        "asked again at once")
    result = messages[2] if len(messages) > 2 else None
    assert result and result.get("role") == "tool" and str(
        result.get("content")).startswith("error:"), (
        f"the model called ask_helper with the arguments {arguments!r}, which give no "
        "question: the call's result should be an error the model can read (starting "
        f"'error:'), as for any tool; it was {result}")
    said = str(result.get("content"))
    wrong = ("JSON" if arguments.startswith(('{"question": "Ask', "[")) else
             "question")
    assert wrong in said, (
        f"the error should say what was wrong with the arguments {arguments!r} as the "
        + ("model sent them: they are no JSON object (the stored call holds '{}' in "
           "their place, and says nothing of what was sent)" if wrong == "JSON" else
           "model sent them: they hold no 'question' as text")
        + f"; it says {said!r}")
    assert wrong != "JSON" or "arguments" in said.lower(), (
        f"the model sent ask_helper the arguments {arguments!r}, which are no JSON "
        "object: the error should say that it is the call's arguments that are "
        "wrong, a sentence the model can act on (send them again as a JSON object), "
        f"not the reader's words alone; it says {said!r}")
    assert len(model.requests) == 2 and not sidechain_files(sessions), (
        "no helper should start for a call that asks nothing: the parent's model "
        f"should be asked again at once; it was asked {len(model.requests)} times, and "
        f"the side-chains folder holds {sidechain_files(sessions) or 'nothing'}")


@pytest.mark.task("10.3")
@pytest.mark.parametrize("sent_as", ["a JSON object", "text with a key of its own"])
def test_a_question_sent_in_arguments_that_are_an_object_starts_the_helper(lesson,
                                                                         sessions,
                                                                         sent_as):
    """A server that sends a call's arguments as a JSON object, not as the text of one
    (llama.cpp's has), asks a question all the same; so does a model that adds a key
    of its own beside the question (a hint, a priority): the helper starts on the
    question, and its answer is the call's result. Only a call that asks no question
    is refused."""
    arguments = ({"question": QUESTION} if sent_as == "a JSON object" else
                 json.dumps({"question": QUESTION, "priority": "high"}))
    sent = raw({"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_obj", "type": "function",
         "function": {"name": "ask_helper", "arguments": arguments}}]},
        finish_reason="tool_calls")
    try:
        messages, model = play(lesson, sessions, ("Ask a helper.", [
            sent, say(HELPER_ANSWER), say(FINAL)]), expected="the model called "
            f"ask_helper with its arguments as {sent_as}: a helper should answer")
    except NotImplementedError:
        raise    # a task not written yet: the starter's own failure
    except Exception as error:
        pytest.fail(f"the model called ask_helper with its arguments as {sent_as} "
                    f"holding the question, and the run failed with "
                    f"{type(error).__name__}: {error}. The object asks a question: "
                    "the helper should start on it", pytrace=False)
    results = [m.get("content") for m in messages if m.get("role") == "tool"]
    first = model.requests[1]["messages"] if len(model.requests) > 1 else None
    assert results == [HELPER_ANSWER] and first == [
        {"role": "system", "content": lesson.HELPER_SYSTEM},
        {"role": "user", "content": QUESTION}], (
        f"the model called ask_helper with its arguments as {sent_as} ({arguments!r}), "
        f"which asks the question {QUESTION!r}: a helper should start on it and its "
        f"answer be the call's result; the results were {results}, and the second "
        f"request carried {first}")


@pytest.mark.task("10.3")
def test_the_side_chain_is_named_after_the_call_its_result_answers(lesson, sessions):
    """A server sends an ask_helper call with an id the conversation already used: the
    stored call gets a fresh id, and the pointer, the side-chain's meta file and the
    result all name that one, the id the parent's history carries."""
    used = "call_same"
    first = ("Talk to the elder.", [use(raw_call("talk_to", '{"npc": "elder"}', used)),
                                    say("The elder waves.")])
    second = ("Ask a helper.", [
        use(raw_call("ask_helper", json.dumps({"question": QUESTION}), used)),
        say(HELPER_ANSWER), say(FINAL)])
    messages, _ = play(lesson, sessions, first, second)
    stored = messages[5]["tool_calls"][0]["id"]
    assert stored != used, "the test's own set-up: the stored call kept a used id"
    result = messages[6]
    assert result.get("tool_call_id") == stored and result.get("content") == \
        HELPER_ANSWER, (
        f"the helper's answer should answer the call as stored ({stored!r}); the "
        f"result is {result}")
    pointers = pointers_in(sessions / "quest-1.jsonl")
    assert [p.get("call") for p in pointers] == [stored], (
        f"the server sent the call id {used!r} a second time, and the call was stored "
        f"as {stored!r}, the id its result answers: the pointer should name that call; "
        f"the pointers are {pointers}")
    name = pointers[0].get("sidechain")
    meta = sessions / "quest-1.sidechains" / f"{name}.meta.json"
    said = json.loads(meta.read_text(encoding="utf-8")) if meta.is_file() else None
    named = lesson.sidechain_id(stored)
    assert name == named and said and said.get("call") == stored, (
        f"the side-chain should be named after the stored call ({stored!r}), and its "
        f"meta file say so; the pointer names {name!r}, the meta file says {said}")


@pytest.mark.task("10.3")
def test_a_call_id_no_session_id_can_be_is_the_pointers_call_as_it_came(lesson,
                                                                        sessions):
    """A server sends the call id functions.ask_helper:0 (as Kimi's do), which no
    session id can be: its side-chain gets a made name (task 10.1's, once), and the
    pointer and the meta file name the call by its id as the parent's history carries
    it, so that a reader matches the helper's log to the call it answered."""
    call_id = "functions.ask_helper:0"
    script = [use(raw_call("ask_helper", json.dumps({"question": QUESTION}), call_id)),
              say(HELPER_ANSWER), say(FINAL)]
    messages, _ = play(lesson, sessions, ("Ask a helper.", script))
    stored = messages[1]["tool_calls"][0]["id"]
    assert stored == call_id, (
        f"the test's own set-up: the call should be stored as {call_id!r}; it is "
        f"{stored!r}")
    pointers = pointers_in(sessions / "quest-1.jsonl")
    expected = (call_id, lesson.sidechain_id(call_id))
    led = [(p.get("call"), p.get("sidechain")) for p in pointers]
    assert led == [expected], (
        f"the call id {call_id!r} is no session id: its side-chain is named "
        f"{expected[1]!r} (sidechain_id of the call id), and the pointer should name "
        f"the call as it came, (call, sidechain) {expected}; the pointers say {led}. "
        "Was the side-chain started under the made name instead of the call id?")
    meta = sessions / "quest-1.sidechains" / f"{expected[1]}.meta.json"
    said = json.loads(meta.read_text(encoding="utf-8")) if meta.is_file() else None
    assert said and said.get("call") == call_id, (
        f"the side-chain's meta file, {meta.name}, should name its call as it came, "
        f"{call_id!r}; it says {said if said else 'nothing (there is none)'}")


@pytest.mark.task("10.3")
def test_a_tool_of_another_kind_among_the_schemas_leaves_the_helper_offered(lesson,
                                                                            sessions):
    """The tools offered may hold a schema of another kind than a function (a
    server's built-in tool, {"type": "web_search"}, with no "function" in it). It is
    offered to the model all the same, and does not stand in the way: a call to
    ask_helper, offered beside it, is answered by a helper."""
    town = HelperTown()
    functions = {k: f for k, f in town.functions.items() if k != "ask_helper"}
    tools = lesson.Toolbox([{"type": "web_search"}, *TOOL_SCHEMAS, HELPER_SCHEMA],
                           functions)
    try:
        messages, _ = play(lesson, sessions, HELPER_TURN, town=tools)
    except NotImplementedError:
        raise       # a task not written yet: the plugin says which
    except Exception as error:
        pytest.fail("the tools offered hold a schema of another kind, "
                    "{'type': 'web_search'}, with no 'function' in it, beside "
                    f"ask_helper's; the run failed with {type(error).__name__}: "
                    f"{error}. Whether ask_helper was offered is read from the "
                    "function schemas, and a schema of another kind is none of them",
                    pytrace=False)
    results = [m.get("content") for m in messages if m.get("role") == "tool"]
    assert results == [HELPER_ANSWER], (
        "ask_helper was offered beside a tool of another kind: its call should be "
        f"answered by a helper, {HELPER_ANSWER!r}; the results were {results}")


@pytest.mark.task("10.3")
def test_the_chat_sees_each_helper_through_ask_helper(lesson, sessions, monkeypatch):
    """The chat wraps Agent.ask_helper and, when it returns, prints the side-chain of
    the call it was given: the helper runs within the ask_helper of its call, given the
    call id the parent's history carries and the question, and by the time ask_helper
    returns, the side-chain its newest pointer leads to holds the helper's whole
    work."""
    real = lesson.Agent.ask_helper
    seen = []       # (call id, question, the roles in its side-chain at the return)

    def ask_and_show(self, call_id, question):
        try:
            return real(self, call_id, question)
        finally:
            mine = [p for p in pointers_in(self.session.path)
                    if p.get("call") == call_id]
            path = (sessions / "quest-1.sidechains"
                    / f"{mine[-1].get('sidechain')}.jsonl") if mine else None
            roles = ([m.get("role") for m in lines_of(path)]
                     if path is not None and path.is_file() else None)
            seen.append((call_id, question, roles))

    monkeypatch.setattr(lesson.Agent, "ask_helper", ask_and_show)
    play(lesson, sessions, HELPER_TURN)
    monkeypatch.undo()
    whole = ["user", "assistant", "tool", "assistant"]
    assert seen == [(CALL_ID, QUESTION, whole)], (
        "the chat wraps Agent.ask_helper to print a helper's side-chain when it "
        f"returns; it should see one call, ask_helper({CALL_ID!r}, {QUESTION!r}), and "
        f"at its return a side-chain holding the helper's whole work {whole}. It saw "
        + ("; ".join(f"ask_helper({c!r}, {shown(q, 30)}) with a side-chain holding "
                     f"{roles or 'nothing'}" for c, q, roles in seen) if seen else
           "no call at all: the helper ran elsewhere, and a chat would show nothing "
           "of its work"))


@pytest.mark.task("10.3")
@pytest.mark.parametrize("offered", [True, False])
def test_a_helper_answers_ask_helper_when_the_model_was_offered_it(lesson, sessions,
                                                                   offered):
    """Offered is what the model was told it may call, the schemas it is sent: with
    ask_helper among them and no function of that name, a helper answers the call;
    with a function of that name the model was never offered, the call runs that
    function as any tool's would, and no helper starts."""
    town = HelperTown()
    if offered:
        functions = {k: f for k, f in town.functions.items() if k != "ask_helper"}
        tools = lesson.Toolbox([*TOOL_SCHEMAS, HELPER_SCHEMA], functions)
        play(lesson, sessions, HELPER_TURN, town=tools)
    else:
        tools = lesson.Toolbox(list(TOOL_SCHEMAS), dict(town.functions))
        play(lesson, sessions, ("Ask a helper.", [HELPER_TURN[1][0], say("Oh.")]),
             town=tools, expected="the model was never offered ask_helper (its schema "
             "is not among those sent): its call should run the function of that name, "
             "as any tool's call does, and start no helper")
    result = lines_of(sessions / "quest-1.jsonl")[2:]
    result = next((line for line in result if line.get("role") == "tool"), None)
    said = str((result or {}).get("content"))
    if offered:
        assert said == HELPER_ANSWER, (
            "the tool schemas the model is sent offer ask_helper (the functions hold "
            "none of that name): its call should be answered by a helper; the result "
            f"was {result}")
    else:
        assert said == town.ask_helper(QUESTION) and not sidechain_files(sessions), (
            "the model was never offered ask_helper (its schema is not among those "
            "sent), and the tools hold a function of that name: the call should run "
            "that function, as any tool's call does, and start no helper; the result "
            f"was {result}, and the side-chains folder holds "
            f"{sidechain_files(sessions) or 'nothing'}")


@pytest.mark.task("10.3")
@pytest.mark.parametrize("case", ["a longer name offered", "other letters called"])
def test_only_a_call_and_a_schema_named_ask_helper_exactly_start_a_helper(lesson,
                                                                          sessions,
                                                                          case):
    """A helper answers a call named ask_helper, exactly, when a function schema of that
    name, exactly, was offered. A schema of a longer name that holds it
    (ask_helper_twice, its description naming ask_helper) offers no helper, so a call
    to ask_helper runs the function of that name; and a call to Ask_Helper is a call to
    a tool that does not exist. Both are answered as lesson 00's run_tool answers the
    call as the model sent it, and neither starts a helper."""
    town = HelperTown()
    if case == "a longer name offered":
        twice = json.loads(json.dumps(HELPER_SCHEMA))
        twice["function"]["name"] = "ask_helper_twice"
        twice["function"]["description"] = "Like ask_helper, but asks two helpers."
        tools = lesson.Toolbox([*TOOL_SCHEMAS, twice], dict(town.functions))
        name = "ask_helper"
        story = ("the model was offered ask_helper_twice (whose description names "
                 "ask_helper), not ask_helper, and called ask_helper")
    else:
        functions = {k: f for k, f in town.functions.items() if k != "ask_helper"}
        tools = lesson.Toolbox([*TOOL_SCHEMAS, HELPER_SCHEMA], functions)
        name = "Ask_Helper"
        story = ("the model was offered ask_helper and called Ask_Helper, a tool of "
                 "another name that does not exist")
    arguments = json.dumps({"question": QUESTION})
    asked = {"id": CALL_ID, "type": "function",
             "function": {"name": name, "arguments": arguments}}
    expected = lesson.run_tool(tools, asked)
    play(lesson, sessions, ("Ask a helper.", [use(raw_call(name, arguments)),
                                              say("Oh.")]),
         town=tools, expected=f"{story}: its call should run as any tool's call does, "
         "and start no helper")
    result = next((line for line in lines_of(sessions / "quest-1.jsonl")
                   if line.get("role") == "tool"), {})
    assert result.get("content") == expected and not sidechain_files(sessions), (
        f"{story}: names are compared whole and in their own letters, so the call "
        f"should be answered as run_tool answers it ({expected!r}), and no helper "
        f"start; the result was {result.get('content')!r}, and the side-chains folder "
        f"holds {sidechain_files(sessions) or 'nothing'}")


@pytest.mark.task("10.3")
def test_whether_ask_helper_is_offered_is_judged_at_every_call(lesson, sessions):
    """An agent's tools may change between turns (a program gives it ask_helper, then
    takes it away): each call is judged by the schemas the model was sent with the
    request that made it, never by what an earlier call found. Not offered, the call
    runs the function of that name; offered, a helper answers; taken away again, the
    function runs again."""
    town = HelperTown()
    plain = lesson.Toolbox(list(TOOL_SCHEMAS), dict(town.functions))
    helped = lesson.Toolbox(
        [*TOOL_SCHEMAS, HELPER_SCHEMA],
        {k: f for k, f in town.functions.items() if k != "ask_helper"})
    itself = ("Ask a helper.", [use(call("ask_helper", question=QUESTION)),
                                say("Oh.")])
    turns = [(plain, itself), (helped, HELPER_TURN), (plain, itself)]
    agent, model, log = open_agent(lesson, sessions,
                                   [step for _, (_, steps) in turns for step in steps],
                                   town=plain)
    results = []
    with log:
        for tools, (text, _) in turns:
            agent.tools = tools
            before = len(agent.messages)
            turn(lesson, agent, model, text, "each turn's call to ask_helper should be "
                 "judged by the tools the agent holds in that turn: run as the "
                 "function of that name when the model is not offered ask_helper, "
                 "answered by a helper when it is")
            results.append(next((m.get("content") for m in agent.messages[before:]
                                 if m.get("role") == "tool"), None))
    expected = [town.ask_helper(QUESTION), HELPER_ANSWER, town.ask_helper(QUESTION)]
    assert results == expected, (
        "the agent was given the tools without ask_helper's schema, then with it, "
        "then without it again, and the model called ask_helper in each turn: the "
        f"results should be {expected} (the function, a helper, the function); they "
        f"were {results}. Whether the model was offered ask_helper is what it was "
        "sent with the request that made the call, not what an earlier call found")


@pytest.mark.task("10.3")
def test_each_helper_works_in_the_world_its_parent_holds_then(lesson, sessions):
    """A parent whose tools change between turns (a town for each day): each turn's
    helper works with the tools the parent holds in that turn, so what the second
    day's helper buys is bought in the second day's town, and the first day's town
    keeps only what was bought in it."""
    days = [HelperTown(), HelperTown()]
    steps = [[use(call("ask_helper", question=f"Buy a {item}.")),
              use(call("buy", item=item)), say(f"Bought a {item}."), say("Done.")]
             for item in ("torch", "rope")]
    agent, model, log = open_agent(lesson, sessions, [*steps[0], *steps[1]],
                                   town=days[0])
    with log:
        for town, item in zip(days, ("torch", "rope")):
            agent.tools = town
            turn(lesson, agent, model, f"Ask a helper to buy a {item}.",
                 "each day's helper should buy its item and answer")
    bought = [list(town.inventory) for town in days]
    assert bought == [["torch"], ["rope"]], (
        "the parent held the first day's town while its helper bought a torch, then "
        "the second day's town while its helper bought a rope: each helper works "
        "with the tools its parent holds then, so the towns should hold [torch] and "
        f"[rope]; they hold {bought[0]} and {bought[1]}")


@pytest.mark.task("10.3")
@pytest.mark.parametrize("where", ["side-chain", "memory"])
def test_a_helper_leaves_its_parents_tools_as_they_were(lesson, sessions, where):
    """A helper is the parent lent out for one question, and lending takes nothing
    away: once the helper is done, the parent's tools (a town offering ask_helper,
    with a function of that name for agents of earlier lessons) hold the same schemas
    and the same functions as before. A helper's tools are a set of their own, never
    the parent's with ask_helper taken out of them."""
    town = HelperTown()
    schemas, functions = list(town.schemas), dict(town.functions)
    model = ScriptedModel(list(HELPER_TURN[1]))
    log = lesson.SessionLog(sessions, "quest-1") if where == "side-chain" else None
    try:
        agent = lesson.Agent(model.client(), model=model.model, tools=town,
                             session=log)
        turn(lesson, agent, model, HELPER_TURN[0])
    finally:
        if log is not None:
            log.close()
    lost = [name for name in functions if town.functions.get(name) != functions[name]]
    offered = [schema.get("function", {}).get("name") for schema in town.schemas]
    assert town.schemas == schemas and not lost and (
            set(town.functions) == set(functions)), (
        f"a helper ({where}) answered the parent's call; the parent's tools should be "
        "as they were before it, offering "
        f"{[schema['function']['name'] for schema in schemas]} with the functions "
        f"{sorted(functions)}; they now offer {offered} with the functions "
        f"{sorted(town.functions)}"
        + (f" (changed: {lost})" if lost else "")
        + ". The helper's tools were made by changing the parent's own schemas or "
        "functions in place (a shallow copy shares them)")


@pytest.mark.task("10.3")
@pytest.mark.parametrize("where", ["side-chain", "memory"])
def test_each_helper_asks_through_what_its_parent_holds_then(lesson, sessions, where):
    """Between two turns the parent is given another server (a client of its own, a
    model of another name) and a tighter max_turns: the second turn's helper asks that
    server, under that model's name, and gives up where the parent now would, after 2
    requests. A helper is the parent as it is when the question is asked, not as it
    was at its first question."""
    first = ScriptedModel([use(call("ask_helper", question=QUESTION)),
                           say(HELPER_ANSWER), say(FINAL)])
    busy = [use(call("talk_to", npc="guard"))] * 2
    second = ScriptedModel([use(call("ask_helper", question="Ask the guard.")), *busy,
                            say("The helper gave up.")], model="scripted-other")
    log = lesson.SessionLog(sessions, "quest-1") if where == "side-chain" else None
    agent = lesson.Agent(first.client(), model=first.model, tools=HelperTown(),
                         session=log)
    ended = None
    try:
        turn(lesson, agent, first, "Ask a helper.", "the first day's turn should end "
             "as scripted")
        agent.client, agent.model, agent.max_turns = second.client(), second.model, 2
        try:
            agent.run("Ask a helper about the guard.")
        except Exception as error:
            ended = error
    finally:
        if log is not None:
            log.close()
    assert len(first.requests) == 3, (
        f"after the first turn the parent was given another client, for another "
        f"server; the second turn's helper ({where}) should ask that server, yet the "
        f"first server received {len(first.requests) - 3} more request(s): "
        f"{told(lesson, first)}")
    names = [request.get("model") for request in second.requests]
    assert names and set(names) == {second.model}, (
        f"after the first turn the parent's model became {second.model!r}; every "
        f"request of the second turn, its helper's ({where}) too, should name it; they "
        f"named {names}")
    results = [m for m in agent.messages if m.get("role") == "tool"]
    said = str(results[-1].get("content")) if len(results) == 2 else None
    assert said is not None and said.startswith("error:") and "2 requests" in said, (
        f"after the first turn the parent's max_turns became 2; the second turn's "
        f"helper ({where}) still called tools after 2 requests and should have given "
        "up there, as the parent now would, its call answered by an error saying "
        "after how many requests; "
        + (f"the call was answered by {said!r}" if said is not None
           else f"the call got no result")
        + (f", and the run raised {ended!r}" if ended else "")
        + f". What the second server was asked: {told(lesson, second)}")


@pytest.mark.task("10.3")
@pytest.mark.parametrize("arguments", ['{"question": "Ask the elder', '["elder"]'])
def test_an_ask_helper_call_never_offered_is_run_as_the_model_sent_it(lesson, sessions,
                                                                      arguments):
    """With no ask_helper offered, a call to it is any tool's call, answered as lesson
    00 answered it: arguments the model sent broken are reported as broken, not run as
    the "{}" the stored call holds in their place."""
    tools = lesson.Toolbox(list(TOOL_SCHEMAS), dict(HelperTown().functions))
    asked = {"id": CALL_ID, "type": "function",
             "function": {"name": "ask_helper", "arguments": arguments}}
    expected = lesson.run_tool(tools, asked)
    script = [use(raw_call("ask_helper", arguments)), say("Oh.")]
    messages, _ = play(lesson, sessions, ("Ask a helper.", script), town=tools,
                       expected="the model was never offered ask_helper: its call "
                       "should run as any tool's call does, and start no helper")
    result = messages[2] if len(messages) > 2 else {}
    assert result.get("content") == expected, (
        f"the model, never offered ask_helper, called it with the arguments "
        f"{arguments!r}, which hold no JSON object: its result should say so, as "
        f"lesson 00's run_tool says it of the call as the model sent it "
        f"({expected!r}); it was {result.get('content')!r}. The stored call holds "
        "'{}' in their place, and running that one tells the model something else")


@pytest.mark.key
@pytest.mark.task("10.3")
def test_the_town_of_earlier_lessons_starts_no_helper(lesson, sessions):
    """With the town of lessons 00-07 (no ask_helper offered), a call to ask_helper is
    an unknown tool, as before: no helper, no side-chain."""
    play(lesson, sessions, HELPER_TURN[:1] + ([HELPER_TURN[1][0], say("Oh.")],),
         town=Town(), expected="the town of earlier lessons offers no ask_helper: its "
         "call should be answered as any unknown tool's, and no helper start")
    result = lines_of(sessions / "quest-1.jsonl")[2]
    assert "no tool called 'ask_helper'" in result.get("content", ""), (
        "ask_helper is lesson 10's tool: an agent whose tools do not offer it should "
        f"answer its call as any unknown tool; the result was {result}")
    assert not (sessions / "quest-1.sidechains").exists(), (
        "no helper should start for a tool that was never offered, yet the agent made "
        f"quest-1.sidechains/, holding {sidechain_files(sessions) or 'nothing'}")


# --- crashes, resumes and forks -------------------------------------------------------


@pytest.mark.key
@pytest.mark.task("10.2")
@pytest.mark.task("10.3")
def test_a_crash_inside_the_helper_leaves_the_call_to_the_repair_and_a_pointer(
    lesson, sessions
):
    """The process dies while the helper waits for the model: on resume, lesson 04's
    repair answers the parent's call, and the pointer to the partial side-chain
    stays."""
    crash = HELPER_TURN[1][:2] + [Crash()]
    agent, model, log = open_agent(lesson, sessions, crash)
    with log:
        with raises(SimulatedCrash, "the scripted crash should end the run"):
            turn(lesson, agent, model, HELPER_TURN[0])

    day_two, model, log = open_agent(lesson, sessions, PLAIN_TURN[1])
    with log:
        turn(lesson, day_two, model, PLAIN_TURN[0])
    assert model.requests and "error" not in model.requests[0], (
        "the resumed parent's request should be accepted")
    parent = lines_of(sessions / "quest-1.jsonl")
    kinds = [line.get("role") or line.get("$marker") for line in parent]
    assert kinds[:5] == ["user", "assistant", "sidechain", "repair", "tool"], (
        "after a crash inside the helper, the parent's log should hold the call, the "
        "pointer to the side-chain, then the repair's marker and result; it holds "
        f"{kinds}")
    assert "interrupted" in str(parent[4].get("content")), (
        "the repair's result should say the call was interrupted (lesson 04's words); "
        f"it is {parent[4]}")
    side = sessions / "quest-1.sidechains" / f"{CALL_ID}.jsonl"
    partial = [m.get("role") for m in lines_of(side)] if side.exists() else None
    assert partial == ["user", "assistant", "tool"], (
        "the side-chain should keep what the helper did before the crash (its "
        f"question, its call, the result); it holds {partial}")


@pytest.mark.key
@pytest.mark.task("10.3")
def test_a_resumed_parent_does_not_run_a_finished_helper_again(lesson, sessions):
    """Day 2 resumes a parent whose helper answered on day 1: the answer is in its
    history, the helper is not asked again, and its side-chain is left as it is."""
    day_one, _ = play(lesson, sessions, HELPER_TURN)
    side = sessions / "quest-1.sidechains" / f"{CALL_ID}.jsonl"
    before = sidechain_bytes(sessions)

    agent, model, log = open_agent(lesson, sessions, PLAIN_TURN[1])
    with log:
        turn(lesson, agent, model, PLAIN_TURN[0])
    assert len(model.requests) == 1, (
        f"day 2 should make one request; it made {len(model.requests)}: resuming must "
        "not start the helper again")
    assert model.requests[0]["messages"][:len(day_one)] == day_one, (
        "day 2's request should carry day 1, the helper's answer included")
    assert side.read_bytes() == before and len(sidechain_files(sessions)) == 2, (
        "day 2 should leave the helper's side-chain as day 1 left it, and start none")


@pytest.mark.task("10.3")
@pytest.mark.task("10.2")
def test_deleting_a_session_deletes_its_side_chains_too(lesson, sessions):
    """A helper's transcript holds the parent's words (the question it was handed):
    lesson 09's delete_session() takes the side-chains folder with the session."""
    play(lesson, sessions, HELPER_TURN)
    assert sidechain_files(sessions), "the helper's turn should leave a side-chain"
    deleted = lesson.delete_session(sessions, "quest-1")
    assert deleted is True, (
        "delete_session should say True when it deleted the session (lesson 09); it "
        f"returned {deleted!r}")
    left = sorted(p.relative_to(sessions).as_posix() for p in sessions.rglob("*")
                  if p.is_file())
    assert not (sessions / "quest-1.sidechains").exists(), (
        "deleting quest-1 should delete quest-1.sidechains/ too; the folder still "
        f"holds {left}")


@pytest.mark.key
@pytest.mark.task("10.4")
def test_a_fork_copies_the_pointers_never_the_side_chains(lesson, sessions):
    """A fork of the parent gets no side-chain folder of its own; its copied pointers
    lead to its source's side-chains, and its own helpers write in its own folder."""
    play(lesson, sessions, HELPER_TURN)
    side = sessions / "quest-1.sidechains" / f"{CALL_ID}.jsonl"
    before = sidechain_bytes(sessions)
    lesson.fork(sessions, "quest-1", "quest-2")
    assert not (sessions / "quest-2.sidechains").exists(), (
        "a fork copies the parent's lines, never its side-chains")

    found = lesson.sidechains(sessions, "quest-2")
    if found != [(CALL_ID, side)]:
        where = ", ".join(f"{call_id} -> {path.relative_to(sessions).as_posix()}"
                          if isinstance(path, Path) and path.is_relative_to(sessions)
                          else f"{call_id} -> {path!r}"
                          for call_id, path in found) or "nothing"
        into_fork = any(Path(path).parent.name == "quest-2.sidechains"
                        for _, path in found if isinstance(path, (str, Path)))
        pytest.fail(
            "quest-2 is a fork of quest-1, and sidechains(quest-2) should lead to the "
            "log of the helper that answered its copied call, which holds that "
            f"helper's work; it gave {where}"
            + (": the pointer copied into the fork was followed into the fork's own "
               "folder, where nothing is (a fork copies no side-chain)"
               if into_fork else ""), pytrace=False)
    source = lesson.sidechains(sessions, "quest-1")
    assert source == found, (
        "quest-1 and its fork quest-2 hold the same pointer, so sidechains should give "
        f"both the same side-chain; quest-1 gave {source}, quest-2 gave {found}")

    play(lesson, sessions, HELPER_TURN, session_id="quest-2")
    assert side.read_bytes() == before, (
        "the fork's helper changed its source's side-chain")
    forked = lesson.sidechains(sessions, "quest-2")
    assert [path.parent.name for _, path in forked] == ["quest-1.sidechains",
                                                       "quest-2.sidechains"], (
        "the fork's own helper should write in quest-2.sidechains/; its pointers lead "
        f"to {[str(path.relative_to(sessions)) for _, path in forked]}")


@pytest.mark.task("10.4")
def test_a_pointer_that_names_no_valid_side_chain_is_refused_with_its_line(lesson,
                                                                           sessions):
    """A pointer whose session or side-chain is no valid id (`../..`, or `call:1_0`,
    which stays in the folder but is no session id), or whose call is no call id,
    raises ValueError naming the log and the line; it is never followed. (A marker that
    is a message too the log's reader refuses already, with its line.)"""
    ask = {"role": "user", "content": "Ask a helper."}
    good = {"$marker": "sidechain", "call": CALL_ID, "session": "quest-1",
            "sidechain": CALL_ID}
    for bad in ({"sidechain": "../../etc/passwd"}, {"session": "../quest-2"},
                {"sidechain": "call:1_0"}, {"sidechain": None}, {"session": 7},
                {"call": 5}, {"call": None}, {"call": ["call_1_0"]},
                {"call": {"id": "call_1_0"}}, {"call": True},
                {"role": "user", "content": "Ask a helper."},
                {"call": ...}, {"session": ...}, {"sidechain": ...}):
        # ... leaves the key out
        pointer = {k: v for k, v in {**good, **bad}.items() if v is not ...}
        (sessions / "quest-1.jsonl").write_text(
            json.dumps(ask) + "\n" + json.dumps(pointer) + "\n", encoding="utf-8")
        with raises(ValueError, f"the pointer {pointer} is no pointer to follow, "
                    "yet sidechains returned without refusing it") as raised:
            lesson.sidechains(sessions, "quest-1")
        said = str(raised.value)
        log = str(sessions / "quest-1.jsonl")
        assert log in said and "line 2" in said, (
            f"the error should name the log by its path, {log} (many folders may hold "
            f"a quest-1.jsonl), and the pointer's line (line 2); it says: {said}")


@pytest.mark.task("10.4")
def test_sidechains_gives_every_pointer_in_the_order_of_the_log(lesson, sessions):
    """Every pointer, in the order the log holds them: a call id that came back has
    two side-chains, and a reader wants both, the first one first. A side-chain's log
    is its name and ".jsonl", whatever the name ends with (call_b.2, or call_c.jsonl,
    a call id kept as it is). A pointer line the log holds twice (written again by
    another program) is given twice: the answer follows the log, line by line. The
    empty call id, which a server may send, is a call id like any other: its pointer
    is given with it. The order is the log's whatever time each pointer says (a
    clock set back between two helpers, pointers another program wrote)."""
    ask = {"role": "user", "content": "Ask a helper."}
    empty = lesson.sidechain_id("")     # task 10.1's name for the empty call id
    order = [("call_b", "call_b"), ("call_a", "call_a"), ("call_b", "call_b.2"),
             ("call_c.jsonl", "call_c.jsonl"), ("", empty), ("call_a", "call_a")]
    # Each pointer's own time, the clock set back between helpers: the log's order is
    # the answer's, never the order of their times
    seconds = [5, 3, 9, 1, 7, 2]
    lines = [ask] + [{"$marker": "sidechain", "call": call_id, "session": "quest-1",
                      "sidechain": name, "at": f"2026-01-01T00:00:0{second}+00:00"}
                     for (call_id, name), second in zip(order, seconds)]
    (sessions / "quest-1.jsonl").write_text(
        "".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    folder = sessions / "quest-1.sidechains"
    try:
        found = lesson.sidechains(sessions, "quest-1")
    except ValueError as error:
        fail_in("10.4", "the log holds six pointers, each naming its call id, its "
                "session and a valid side-chain name, one of them for the empty call "
                "id (a server may send one, and task 10.1 names its side-chain); "
                f"sidechains refused the log: {error}")
    odd = [path for _, path in found if not isinstance(path, Path)]
    if odd:
        pytest.fail("sidechains should give each side-chain's log as a pathlib.Path, "
                    f"for a reader to open; it gave {odd[0]!r}, a "
                    f"{type(odd[0]).__name__}", pytrace=False)
    expected = [(call_id, folder / f"{name}.jsonl") for call_id, name in order]
    assert found == expected, (
        "the log holds six pointers, to call_b, call_a, call_b.2 (call_b came back), "
        "call_c.jsonl, the empty call id's side-chain and call_a again (the same line "
        "twice), their times out of order: sidechains should give all six in the "
        "log's order, each side-chain's log "
        "its name and '.jsonl', "
        f"{[(c, p.name) for c, p in expected]}; it gave "
        f"{[(c, getattr(p, 'name', p)) for c, p in found]}")


@pytest.mark.task("10.4")
def test_sidechains_reads_the_log_as_any_reader_does(lesson, sessions):
    """A log with a line separator (U+2028) inside a text, a blank line, and a torn
    tail cut in the middle of a two-byte letter, as a crash may cut it: the pointer is
    found, the log is left as it was (a reader repairs nothing), and a bad pointer is
    named by its line in the file."""
    said = {"role": "user", "content": "Line one\u2028line two"}
    pointer = {"$marker": "sidechain", "call": CALL_ID, "session": "quest-1",
               "sidechain": CALL_ID}
    path = sessions / "quest-1.jsonl"
    for bad in (False, True):
        if bad:
            pointer = {**pointer, "sidechain": "../elsewhere"}
        path.write_bytes(json.dumps(said, ensure_ascii=False).encode("utf-8") + b"\n\n"
                         + json.dumps(pointer).encode()
                         + '\n{"role": "assistant", "content": "Café'.encode()[:-1])
        before = path.read_bytes()
        try:
            found = lesson.sidechains(sessions, "quest-1")
            refused = None
        except ValueError as error:
            found, refused = None, str(error)
        assert path.read_bytes() == before, (
            "sidechains changed the log it read: a reader never repairs or rewrites")
        if not bad:
            assert refused is None and found == [
                (CALL_ID, sessions / "quest-1.sidechains" / f"{CALL_ID}.jsonl")], (
                "the log holds one valid pointer (line 3, after a blank line, with a "
                "torn tail after it that a crash cut in the middle of a two-byte "
                "letter: the bytes of a line that was never finished, not text): "
                f"sidechains should find it; it gave {found}, error {refused}")
        else:
            assert refused is not None and "line 3" in refused, (
                "the bad pointer is on line 3 of the file (line 2 is blank): the error "
                f"should say 'line 3'; it says {refused}")


@pytest.mark.task("10.4")
def test_a_pointer_another_program_wrote_in_its_own_spacing_is_found(lesson, sessions):
    """A pointer is a JSON value, whatever text holds it: one that another program
    wrote compact, one with its keys in another order, one with spaces of its own, one
    whose texts are written with escapes (the same texts to a JSON reader), also in a
    log where no line holds the word "sidechain" spelled out. Each is found, in the
    order of the log."""
    at = "2026-01-01T00:00:00+00:00"
    names = ["call_a", "call_b", "call_c", "call_d"]
    pointers = [{"$marker": "sidechain", "call": name, "session": "quest-1",
                 "sidechain": name, "at": at} for name in names]
    texts = [json.dumps(pointers[0], separators=(",", ":")),
             json.dumps(dict(reversed(list(pointers[1].items())))),
             json.dumps(pointers[2], indent=None).replace(": ", " :  "),
             json.dumps(pointers[3]).replace("sidechain", "sid\\u0065chain")]
    (sessions / "quest-1.jsonl").write_text(
        json.dumps({"role": "user", "content": "Ask a helper."}) + "\n"
        + "".join(text + "\n" for text in texts), encoding="utf-8")
    folder = sessions / "quest-1.sidechains"
    found = lesson.sidechains(sessions, "quest-1")
    expected = [(name, folder / f"{name}.jsonl") for name in names]
    assert found == expected, (
        "the log holds four pointers, one written compact, one with its keys in "
        "another order, one with spaces of its own, one whose texts hold escapes "
        "(sid\\u0065chain for sidechain): the same JSON values as the "
        f"store's, so sidechains should give {[(c, p.name) for c, p in expected]}; "
        f"it gave {[(c, getattr(p, 'name', p)) for c, p in found]}")
    # A log whose only pointer is written with escapes
    escaped = json.dumps({"$marker": "sidechain", "call": "call_e",
                          "session": "quest-2", "sidechain": "call_e", "at": at})
    (sessions / "quest-2.jsonl").write_text(
        escaped.replace("sidechain", "sid\\u0065chain") + "\n", encoding="utf-8")
    found = lesson.sidechains(sessions, "quest-2")
    expected = [("call_e", sessions / "quest-2.sidechains" / "call_e.jsonl")]
    assert found == expected, (
        "quest-2's log holds one pointer, to call_e, its texts written with escapes "
        "(sid\\u0065chain for sidechain, the same JSON value as the store's): "
        f"sidechains should give it; it gave {found}")
    # A pointer with a key of its own beside the five (a later program's note): the
    # same pointer to a reader, which takes what it needs and leaves the rest
    noted = {"$marker": "sidechain", "call": "call_f", "session": "quest-3",
             "sidechain": "call_f", "at": at, "note": "the elder's cave"}
    (sessions / "quest-3.jsonl").write_text(json.dumps(noted) + "\n",
                                            encoding="utf-8")
    try:
        found = lesson.sidechains(sessions, "quest-3")
    except ValueError as error:
        found = f"a ValueError ({error})"
    expected = [("call_f", sessions / "quest-3.sidechains" / "call_f.jsonl")]
    assert found == expected, (
        "quest-3's log holds one pointer, to call_f, with a key of its own beside the "
        "five a pointer holds (\"note\", as a later program may add): it leads to "
        f"call_f all the same, and sidechains should give {expected}; it gave {found}")


@pytest.mark.task("10.4")
def test_sidechains_passes_over_markers_of_other_kinds(lesson, sessions):
    """A log holds other markers beside its pointers: a repair, an undo, a compaction,
    kinds this code does not know (a bookmark, another program's sidechain-summary and
    sidechains, whose names hold the word, and Sidechain and SIDECHAIN, the word in
    other letters). Only the pointers, of the kind "sidechain" itself, lead to
    side-chains: the others are neither followed nor refused."""
    at = "2026-01-01T00:00:00+00:00"
    lines = [
        {"role": "user", "content": "Ask a helper."},
        {"$marker": "repair", "at": at, "cut_bytes": 0, "cut_preview": "",
         "interrupted": []},
        {"$marker": "sidechain", "call": CALL_ID, "session": "quest-1",
         "sidechain": CALL_ID, "at": at},
        {"$marker": "undo", "skip": [0], "at": at},
        {"$marker": "compaction", "summary": "A helper was asked.", "upto": 1,
         "at": at},
        {"$marker": "bookmark", "at": at},
        # Another program's kind, named like a pointer's but not one: no pointer
        {"$marker": "sidechain-summary", "at": at, "text": "The helper found a rope."},
        {"$marker": "sidechains", "at": at},
        # The kind spelled in other letters: another program's, no pointer either
        {"$marker": "Sidechain", "at": at, "text": "A note of another program."},
        {"$marker": "SIDECHAIN", "at": at},
        {"$marker": "sidechain", "call": "call_2_0", "session": "quest-1",
         "sidechain": "call_2_0", "at": at}]
    path = sessions / "quest-1.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines),
                    encoding="utf-8")
    folder = sessions / "quest-1.sidechains"
    expected = [(CALL_ID, folder / f"{CALL_ID}.jsonl"),
                ("call_2_0", folder / "call_2_0.jsonl")]
    try:
        found = lesson.sidechains(sessions, "quest-1")
    except ValueError as error:
        pytest.fail("the log holds two pointers, to call_1_0 and call_2_0, among a "
                    "repair, an undo, a compaction and markers of kinds it does not "
                    "know (bookmark, sidechain-summary, sidechains, Sidechain, "
                    "SIDECHAIN: a kind is compared as it is spelled), which are "
                    f"no pointers; sidechains refused the log: {error}", pytrace=False)
    assert found == expected, (
        "the log holds two pointers, to call_1_0 (line 3) and call_2_0 (line 11), "
        "among markers of other kinds: sidechains should give those two, "
        f"{[(c, p.name) for c, p in expected]}; it gave "
        f"{[(c, getattr(p, 'name', p)) for c, p in found]}")


@pytest.mark.task("10.4")
def test_a_pointer_on_a_last_line_without_its_newline_is_found(lesson, sessions):
    """The log's last line is a whole pointer, only its newline was never written (a
    crash cut the write just there): it is an entry, as every reader of lesson 04
    reads it, so its side-chain is found, and the log is left as it was."""
    ask = {"role": "user", "content": "Ask a helper."}
    pointer = {"$marker": "sidechain", "call": CALL_ID, "session": "quest-1",
               "sidechain": CALL_ID, "at": "2026-01-01T00:00:00+00:00"}
    path = sessions / "quest-1.jsonl"
    path.write_bytes((json.dumps(ask) + "\n" + json.dumps(pointer)).encode())
    before = path.read_bytes()
    found = lesson.sidechains(sessions, "quest-1")
    assert path.read_bytes() == before, (
        "sidechains changed the log it read: a reader never repairs or rewrites")
    expected = [(CALL_ID, sessions / "quest-1.sidechains" / f"{CALL_ID}.jsonl")]
    assert found == expected, (
        "the log's last line is a whole pointer whose newline was never written, an "
        f"entry as lesson 04 reads it: sidechains should find it, {expected}; it gave "
        f"{found}")


@pytest.mark.task("10.4")
def test_a_session_with_no_log_has_started_no_helper(lesson, sessions):
    """A reader asks about a session that has no log (an id not written yet, or a
    typo): its calls started no helper, so the answer is empty, and asking leaves the
    sessions folder as it was, no log made."""
    before = sorted(p.name for p in sessions.iterdir())
    try:
        found = lesson.sidechains(sessions, "quest-9")
    except NotImplementedError:
        raise       # a task not written yet: the plugin says which
    except Exception as error:
        pytest.fail("quest-9 has no log: sidechains should answer that its calls "
                    "started no helper (an empty list); it raised "
                    f"{type(error).__name__}: {error}", pytrace=False)
    assert found == [], (
        "quest-9 has no log, so no pointer: sidechains should give []; it gave "
        f"{found}")
    after = sorted(p.name for p in sessions.iterdir())
    assert after == before, (
        "asking which helpers an unwritten session started should create nothing; the "
        f"sessions folder held {before or 'nothing'} and now holds {after}")


@pytest.mark.task("10.4")
def test_a_session_id_that_leads_out_of_the_sessions_folder_is_refused(lesson,
                                                                       sessions):
    """The session asked about is named by a session id, which often comes from a user
    or a URL: one that is no session id (`../elsewhere/quest-1`, which leads out of the
    sessions folder) is refused with ValueError before any file is read, as every
    function of the course refuses it. Followed, it would read a log outside the
    sessions folder, and hand its pointers on as this folder's."""
    elsewhere = sessions.parent / "elsewhere"
    elsewhere.mkdir()
    pointer = {"$marker": "sidechain", "call": CALL_ID, "session": "quest-1",
               "sidechain": CALL_ID, "at": "2026-01-01T00:00:00+00:00"}
    (elsewhere / "quest-1.jsonl").write_text(
        json.dumps({"role": "user", "content": "Ask a helper."}) + "\n"
        + json.dumps(pointer) + "\n", encoding="utf-8")
    for session_id in ("../elsewhere/quest-1", str(elsewhere / "quest-1")):
        try:
            found = lesson.sidechains(sessions, session_id)
        except NotImplementedError:
            raise       # a task not written yet: the plugin says which
        except ValueError:
            continue
        pytest.fail(f"sidechains was asked about the session {session_id!r}, which is "
                    "no session id (it leads out of the sessions folder): it should "
                    "refuse it with ValueError (the session-id check's "
                    "InvalidSessionId) before reading anything; it read the log "
                    f"there and gave {[(c, str(p)) for c, p in found]}", pytrace=False)


@pytest.mark.task("10.4")
def test_sidechains_finds_the_pointers_written_since_it_last_read(lesson, sessions):
    """A reader asks again after the session went on: the pointer written since (a
    helper started after the first look) is found too, after the first one. Each
    answer is the log as it is when asked, not as it was the first time."""
    at = "2026-01-01T00:00:00+00:00"
    ask = {"role": "user", "content": "Ask a helper."}
    path = sessions / "quest-1.jsonl"
    folder = sessions / "quest-1.sidechains"
    lines = [ask]
    for call_id in (CALL_ID, "call_2_0"):
        lines.append({"$marker": "sidechain", "call": call_id, "session": "quest-1",
                      "sidechain": call_id, "at": at})
        path.write_text("".join(json.dumps(line) + "\n" for line in lines),
                        encoding="utf-8")
        found = lesson.sidechains(sessions, "quest-1")
    expected = [(CALL_ID, folder / f"{CALL_ID}.jsonl"),
                ("call_2_0", folder / "call_2_0.jsonl")]
    assert found == expected, (
        "sidechains was asked once when the log held a pointer to call_1_0, then "
        "again after a pointer to call_2_0 was written: the second answer should give "
        f"both, {[(c, p.name) for c, p in expected]}; it gave "
        f"{[(c, getattr(p, 'name', p)) for c, p in found]}")


@pytest.mark.task("10.4")
def test_sidechains_finds_a_pointer_as_a_person_mended_it(lesson, sessions):
    """A person mends a pointer after a reader asked: the same number of bytes, another
    side-chain named, in the file itself or in a copy an editor puts in its place. The
    next answer follows the pointer as the log holds it then, not as it was."""
    path = sessions / "quest-1.jsonl"
    folder = sessions / "quest-1.sidechains"

    def pointer_to(name):
        return json.dumps({"$marker": "sidechain", "call": CALL_ID,
                           "session": "quest-1", "sidechain": name,
                           "at": "2026-01-01T00:00:00+00:00"}) + "\n"

    path.write_text(pointer_to(CALL_ID), encoding="utf-8")
    lesson.sidechains(sessions, "quest-1")
    for name, how in (("call_9_0", "in the file itself"),
                      ("call_8_0", "in a copy put in its place")):
        before = path.stat()
        if how == "in the file itself":
            with open(path, "r+b") as file:
                file.write(pointer_to(name).encode())
        else:
            copy = sessions / "quest-1.jsonl.edited"
            copy.write_text(pointer_to(name), encoding="utf-8")
            os.replace(copy, path)
        # A clock that moved on: the mended file is newer than the one first read
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))
        found = lesson.sidechains(sessions, "quest-1")
        expected = [(CALL_ID, folder / f"{name}.jsonl")]
        assert found == expected, (
            "sidechains was asked about a log whose pointer named the side-chain "
            f"{CALL_ID}; a person then mended it {how} to name {name} (the same number "
            f"of bytes): the next answer should follow the log as it is then, "
            f"{[(c, p.name) for c, p in expected]}; it gave "
            f"{[(c, getattr(p, 'name', p)) for c, p in found]}")


@pytest.mark.task("10.4")
def test_sidechains_takes_the_sessions_folder_as_text_or_a_path(lesson, sessions):
    """The sessions folder may be given as text or as a Path: the same pointers are
    found either way, each side-chain's log given as a Path."""
    pointer = {"$marker": "sidechain", "call": CALL_ID, "session": "quest-1",
               "sidechain": CALL_ID, "at": "2026-01-01T00:00:00+00:00"}
    (sessions / "quest-1.jsonl").write_text(json.dumps(pointer) + "\n",
                                            encoding="utf-8")
    expected = [(CALL_ID, sessions / "quest-1.sidechains" / f"{CALL_ID}.jsonl")]
    try:
        found = lesson.sidechains(str(sessions), "quest-1")
    except NotImplementedError:
        raise       # the task not written yet: the plugin says which
    except Exception as error:
        pytest.fail("sidechains was given the sessions folder as text (it takes a str "
                    f"or a Path) and raised {type(error).__name__}: {error}",
                    pytrace=False)
    assert found == expected and all(isinstance(p, Path) for _, p in found), (
        "given the sessions folder as text, sidechains should find the pointer to "
        f"call_1_0 as it does given a Path, {expected}; it gave {found}")


@pytest.mark.task("10.4")
def test_sidechains_reads_the_log_of_a_session_whose_id_holds_a_dot(lesson, sessions):
    """A session id may hold a dot (quest.day-2, or call_1_0.2, a call's second
    side-chain, read as the session it is): its log is its whole id and ".jsonl",
    never the log of the session whose id stops at the dot (quest.jsonl), whose
    pointers lead to another session's helpers."""
    at = "2026-01-01T00:00:00+00:00"
    for session_id, call_id in (("quest", "call_a"), ("quest.day-2", "call_b")):
        pointer = {"$marker": "sidechain", "call": call_id, "session": session_id,
                   "sidechain": call_id, "at": at}
        (sessions / f"{session_id}.jsonl").write_text(json.dumps(pointer) + "\n",
                                                      encoding="utf-8")
    try:
        found = lesson.sidechains(sessions, "quest.day-2")
    except NotImplementedError:
        raise       # the task not written yet: the plugin says which
    except Exception as error:
        pytest.fail("sidechains was asked about the session quest.day-2, whose log "
                    "quest.day-2.jsonl holds one pointer, to call_b; it raised "
                    f"{type(error).__name__}: {error}", pytrace=False)
    expected = [("call_b", sessions / "quest.day-2.sidechains" / "call_b.jsonl")]
    assert found == expected, (
        "sidechains was asked about the session quest.day-2, whose log is "
        "quest.day-2.jsonl (its whole id and .jsonl), holding one pointer, to call_b; "
        f"it should give {[(c, str(p.relative_to(sessions))) for c, p in expected]}; "
        f"it gave {[(c, getattr(p, 'name', p)) for c, p in found]}"
        + (": the pointers of quest.jsonl, another session's log (was the log's "
           "name made with with_suffix, which replaces what follows the last dot?)"
           if [c for c, _ in found] == ["call_a"] else ""))


@pytest.mark.task("10.4")
def test_sidechains_reads_a_log_however_short_each_read_is(lesson, sessions,
                                                          monkeypatch):
    """os.read may give fewer bytes than asked (a signal, a file system's own limit):
    a reader that takes one read for the whole file misses what came after it. The
    log here holds a long message and 40 pointers, and each os.read gives at most
    1000 bytes: every pointer is found, in order."""
    at = "2026-01-01T00:00:00+00:00"
    lines = [{"role": "user", "content": "Ask helpers. " + "The quest goes on. " * 300}]
    calls = [f"call_{number}_0" for number in range(1, 41)]
    for call_id in calls:
        lines.append({"$marker": "sidechain", "call": call_id, "session": "quest-1",
                      "sidechain": call_id, "at": at})
    (sessions / "quest-1.jsonl").write_text(
        "".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    real = os.read
    monkeypatch.setattr(os, "read", lambda fd, size: real(fd, min(size, 1000)))
    try:
        found = lesson.sidechains(sessions, "quest-1")
    except NotImplementedError:
        raise       # the task not written yet: the plugin says which
    except Exception as error:
        pytest.fail(f"each os.read gave at most 1000 bytes of the log (fewer than "
                    f"asked, as a read may), and sidechains raised "
                    f"{type(error).__name__}: {error}", pytrace=False)
    finally:
        monkeypatch.undo()
    got = [call_id for call_id, _ in found]
    assert got == calls, (
        f"the log holds a long message, then 40 pointers (call_1_0 to call_40_0), and "
        "each os.read gave at most 1000 bytes: a read may give fewer bytes than asked, "
        "so the file is read until its end. Every pointer should be found, in order; "
        f"sidechains found {len(got)}: {shown(repr(got), 120)}")


@pytest.mark.task("10.4")
@pytest.mark.parametrize("reached", ["through a symbolic link", "relative"])
def test_sidechains_follows_a_sessions_folder_however_it_is_reached(
    lesson, sessions, monkeypatch, reached
):
    """The sessions folder is reached through a symbolic link (a home folder moved to
    another disk), or given relative to the working folder: it is the same folder,
    and the pointer leads to the same side-chain, inside it. Each path given leads to
    that side-chain's log."""
    play(lesson, sessions, HELPER_TURN)
    logs = sorted((sessions / "quest-1.sidechains").glob("*.jsonl"))
    assert len(logs) == 1, (
        "the test's own set-up: one helper ran, so quest-1.sidechains/ should hold one "
        f"side-chain's log; it holds {[p.name for p in logs]}")
    log = logs[0]
    if reached == "relative":
        monkeypatch.chdir(sessions.parent)
        folder = Path(sessions.name)
    else:
        folder = sessions.parent / "linked-sessions"
        folder.symlink_to(sessions, target_is_directory=True)
    try:
        found = lesson.sidechains(folder, "quest-1")
    except ValueError as error:
        pytest.fail(f"the sessions folder given {reached} ({folder}) is the sessions "
                    "folder, and its pointer leads to a side-chain inside it; "
                    f"sidechains refused it: {error}", pytrace=False)
    assert [c for c, _ in found] == [CALL_ID] and all(
        Path(p).exists() and os.path.samefile(p, log) for _, p in found), (
        f"given the sessions folder {reached} ({folder}), sidechains should lead to "
        f"{log.name}, the side-chain's log; it gave {found}")


@pytest.mark.task("10.4")
def test_a_damaged_line_in_the_middle_of_the_log_is_an_error_naming_it(lesson,
                                                                       sessions):
    """Only the last line of a log can be torn by a crash. A line in the middle that is
    no JSON (a pointer a person mended and left without its closing brace), or JSON
    that is neither a message nor a marker, is damage: it may be the very pointer the
    reader asks about, so it is not passed over. sidechains raises ValueError naming
    the log by its path and the line, as every reader of the course does, and the log
    is left as it was."""
    ask = {"role": "user", "content": "Ask a helper."}
    pointer = {"$marker": "sidechain", "call": "call_2_0", "session": "quest-1",
               "sidechain": "call_2_0", "at": "2026-01-01T00:00:00+00:00"}
    path = sessions / "quest-1.jsonl"
    for damaged in ('{"$marker": "sidechain", "call": "call_1_0", "session": '
                    '"quest-1", "sidechain": "call_1_0"', '["call_1_0"]'):
        path.write_text(json.dumps(ask) + "\n" + damaged + "\n" + json.dumps(pointer)
                        + "\n", encoding="utf-8")
        before = path.read_bytes()
        try:
            found = lesson.sidechains(sessions, "quest-1")
        except ValueError as error:
            said = str(error)
            assert str(path) in said and "line 2" in said, (
                f"line 2 of the log is damaged ({damaged}), and sidechains refused the "
                "log, as it should; its error should name the log by its path, "
                f"{path}, and the line, 'line 2', for a person to mend it; it says: "
                f"{said}")
        else:
            pytest.fail(f"line 2 of the log is damaged ({damaged}): it is in the "
                        "middle, so no crash tore it, and it may be the pointer the "
                        "reader asks about. sidechains should raise ValueError naming "
                        f"the log and the line; it passed over it and gave "
                        f"{[(c, getattr(p, 'name', p)) for c, p in found]}",
                        pytrace=False)
        assert path.read_bytes() == before, (
            "sidechains changed the damaged log it read: a reader never repairs or "
            "rewrites")


@pytest.mark.task("10.4")
@pytest.mark.parametrize("planted", ["a folder", "a symbolic link",
                                     "a symbolic link to nothing"])
def test_a_log_sidechains_cannot_read_is_an_error_not_an_empty_answer(lesson,
                                                                      sessions,
                                                                      planted):
    """Only a log that is not there yet means a session that started no helper. A log
    that is there and cannot be read (a folder at its name, which another program
    made) raises its OSError: answered with an empty list, the reader would believe
    the session's calls started no helper, and their transcripts would be lost to it.
    A symbolic link at the log's name is refused the same way, as every reader of the
    course refuses one (OSError, ELOOP): followed, it would hand on the pointers of
    whatever log it leads to (another user's session) as this session's helpers. A
    link that leads nowhere is something at the log's name all the same, no log not
    written yet (asked with exists(), which follows the link, it would pass for
    one)."""
    there = sessions / "quest-1.jsonl"
    if planted == "a folder":
        there.mkdir()
    elif planted == "a symbolic link to nothing":
        there.symlink_to(sessions.parent / "nowhere.jsonl")
    else:
        elsewhere = sessions.parent / "elsewhere"
        elsewhere.mkdir()
        (elsewhere / "other.jsonl").write_text(json.dumps(
            {"$marker": "sidechain", "call": "call_9", "session": "quest-1",
             "sidechain": "call_9", "at": "2026-01-01T00:00:00+00:00"}) + "\n",
            encoding="utf-8")
        there.symlink_to(elsewhere / "other.jsonl")
    try:
        found = lesson.sidechains(sessions, "quest-1")
    except NotImplementedError:
        raise       # the task not written yet: the plugin says which
    except OSError:
        return      # the reader hears it
    pytest.fail(f"quest-1's log cannot be read ({planted} is at its name, "
                "quest-1.jsonl): sidechains should raise its OSError, for the reader "
                f"to know; it answered {found}"
                + (", as if the session had started no helper" if not found else
                   ", the pointers of the log the link leads to, handed on as "
                   "quest-1's own"), pytrace=False)


# --- a real process, killed inside its helper -----------------------------------------


def wait_for(lines, word, process, errors):
    try:
        line = lines.get(timeout=HANG)
    except queue.Empty:
        line = None
    if line is None or not line.startswith(word):
        process.kill()
        process.wait()
        errors.seek(0)
        said = errors.read().decode(errors="replace")
        if "NotImplementedError: task " in said:
            raise NotImplementedError(
                said.rsplit("NotImplementedError: ", 1)[1].strip())
        raise AssertionError(f"the process should have said {word!r}, it said "
                             f"{line!r}; its error output:\n{said[-3000:]}")
    return line


def holder_pid(path):
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("pid")
    except (OSError, ValueError):
        return None


@pytest.mark.task("10.3")
def test_a_process_killed_inside_its_helper_leaves_both_logs_to_resume(lesson,
                                                                       sessions):
    """A real process is killed with SIGKILL while its helper waits for the model: until
    then it held both locks, each in its own file; afterwards the parent resumes with
    the call repaired and the pointer to the partial side-chain."""
    errors = tempfile.TemporaryFile()
    process = subprocess.Popen(
        [sys.executable, str(PROCESS), lesson.__file__, str(sessions), QUESTION],
        stdout=subprocess.PIPE, stderr=errors, text=True)
    lines = queue.Queue()

    def read():
        for line in process.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    try:
        wait_for(lines, "helping", process, errors)
        side_folder = sessions / "quest-1.sidechains"
        pids = {"parent": holder_pid(sessions / "quest-1.lock"),
                "side-chain": holder_pid(side_folder / f"{CALL_ID}.lock")}
        assert pids == {"parent": process.pid, "side-chain": process.pid}, (
            f"while its helper works, process {process.pid} should hold the parent's "
            f"lock and the side-chain's own lock; the lock files name {pids}")
        for folder, session_id in ((sessions, "quest-1"), (side_folder, CALL_ID)):
            with raises(lesson.SessionBusy, f"{session_id} was free while the process "
                        "that writes it was alive"):
                with lesson.SessionLog(folder, session_id) as other:
                    other.open_for_append()
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()

    agent, model, log = open_agent(lesson, sessions, PLAIN_TURN[1])
    with log:
        turn(lesson, agent, model, PLAIN_TURN[0])
    parent = lines_of(sessions / "quest-1.jsonl")
    kinds = [line.get("role") or line.get("$marker") for line in parent]
    assert kinds[:5] == ["user", "assistant", "sidechain", "repair", "tool"], (
        "after the kill, the resumed parent's log should hold the call, the pointer, "
        f"then the repair's marker and result; it holds {kinds}")
    side = lines_of(sessions / "quest-1.sidechains" / f"{CALL_ID}.jsonl")
    assert [m.get("role") for m in side] == ["user", "assistant", "tool"], (
        "the partial side-chain should keep what the helper wrote before the kill")
