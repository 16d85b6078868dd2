"""SIGKILL at hundreds of points of a live agent run: every log loads, every resume is accepted.

This process imports everything once; each kill point is a fork() of it that runs a real
agent run (the final lesson's Agent on a SessionLog, talking to the scripted town model
through the real openai client) and dies by SIGKILL at a chosen moment:

* in the k-th write the store makes: the write is cut to no bytes, one byte, half or all but
  one byte, or is whole and the process dies right after it;
* inside the k-th model request (an on_request observer of the scripted model kills it);
* inside the k-th tool call, after the tool changed the town and before its result exists;
* at a random moment chosen by this process (seeded), wherever the child happens to be.

The child keeps a journal, one JSON line per event, in a file beside the sessions folder: the
history each agent started from, every message it recorded, each undo and fork. So this
process knows what the agent had in memory when it died, and checks, for every session:

1. the log loads (SessionLog.load raises nothing);
2. it shows what the agent had, in order, missing at most the one message in flight, and
   nothing at all when the child died inside a model call or a tool (the agent flushes
   before both); stand-in results a repair would write again do not count;
3. a new writer resumes it, the validating scripted model accepts the request (no HTTP 400),
   and the new messages land on clean lines after it.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import openai
import pytest

from sessionlab.scripted import MODEL_NAME, ScriptedModel, say
from sessionlab.town import Town
from sessionlab.town_model import town_model

# The campaign (tests/conftest.py): writers killed with SIGKILL at every moment of a write.
pytestmark = pytest.mark.campaign

CUTS = ("none", "one byte", "half", "all but one", "whole")
TIMER_KILLS = 45            # random kills per scenario
SEED = 20240607

PASTE = ("Here is the elder's map; buy a map and a torch. "
         + "The path turns north at the mill, then down to the ledge. " * 250)   # ~14 KB: a blob


# --- the child: a real agent run, and the ways it dies ------------------------------------


class Killer:
    """Counts the store's writes, the model's requests and the tool calls, and kills the
    process (SIGKILL, no cleanup of any kind) at the point it was given."""

    def __init__(self, kind: str | None = None, number: int = 0, cut: str = "whole") -> None:
        self.kind, self.number, self.cut = kind, number, cut
        self.counts = {"write": 0, "request": 0, "tool": 0}

    def tick(self, kind: str) -> bool:
        self.counts[kind] += 1
        return kind == self.kind and self.counts[kind] == self.number

    def write(self, fd: int, data: bytes) -> int:
        if not self.tick("write"):
            return os.write(fd, data)
        keep = {"none": 0, "one byte": 1, "half": len(data) // 2,
                "all but one": len(data) - 1, "whole": len(data)}[self.cut]
        if keep:
            os.write(fd, bytes(data)[:keep])
        die()

    def request(self, body: dict[str, Any]) -> None:
        if self.tick("request"):
            die()

    def tool(self, function):
        def run(**arguments):
            result = function(**arguments)      # the town has changed: gold spent, words said
            if self.tick("tool"):
                die()
            return result
        return run


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class Journal:
    """What the child did, one JSON line per event, written straight to a file."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def note(self, **event: Any) -> None:
        os.write(self.fd, (json.dumps(event) + "\n").encode("utf-8"))


class OsWithWrite:
    """The os module as the store sees it in the child: every os.write goes through the killer."""

    def __init__(self, killer: Killer) -> None:
        self.write = killer.write

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)


def start(store, client, town, folder, session_id, journal):
    """An agent resuming (or starting) a session, with every recorded message journalled."""
    agent = store.Agent(client, model=MODEL_NAME, tools=town,
                        session=store.SessionLog(folder, session_id))
    journal.note(session=session_id, history=agent.messages)
    record = agent.record

    def record_and_note(message):
        # Noted first: whichever order the store writes and remembers in, the journal is
        # never behind the disk, and the message being recorded counts as in flight.
        journal.note(session=session_id, record=message)
        record(message)

    agent.record = record_and_note      # run() calls self.record: this one, from now on
    return agent


def quest(store, client, town, folder, journal) -> None:
    """Day 1 from nothing: talk, buy several things at once, recall."""
    agent = start(store, client, town, folder, "quest", journal)
    for text in ("Ask the elder about the cave.", "Buy what we need.", "What did the elder say?"):
        agent.run(text)
    agent.session.close()


def day_two(store, client, town, folder, journal) -> None:
    """Day 2 on a log that day 1 left torn with a call unanswered: repair, a pasted map (a
    blob), an undo, another turn, then a fork and a turn in the fork."""
    agent = start(store, client, town, folder, "quest", journal)
    agent.run(PASTE)
    journal.note(session="quest", undo=1)
    agent.undo(1)
    journal.note(session="quest", undone=1)
    agent.run("Ask the guard about the cave.")
    agent.session.close()
    journal.note(session="branch", fork_of="quest")
    store.fork(folder, "quest", "branch")
    branch = start(store, client, town, folder, "branch", journal)
    branch.run("What did the guard say?")
    branch.session.close()


SCENARIOS = {"quest": quest, "day two": day_two}


def tool_call(call_id, name, **arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


DAY_ONE = [
    {"role": "user", "content": "Ask the elder and the guard about the cave."},
    {"role": "assistant", "content": None, "tool_calls": [tool_call("call_1_0", "talk_to", npc="elder"),
                                                          tool_call("call_1_1", "talk_to", npc="guard")]},
    {"role": "tool", "tool_call_id": "call_1_0", "content": "The elder says: bring a torch and a rope."},
]


def prepare(scenario: str, folder: Path) -> None:
    """The sessions folder as the child finds it."""
    folder.mkdir(mode=0o700)
    if scenario == "day two":   # day 1 died writing the guard's answer: torn, a call unanswered
        torn = json.dumps({"role": "tool", "tool_call_id": "call_1_1", "content": "The guard says"})
        (folder / "quest.jsonl").write_bytes(
            b"".join((json.dumps(m) + "\n").encode() for m in DAY_ONE) + torn.encode()[:30])


def play(store, model, client, scenario, folder, journal_path, killer) -> None:
    """The child's whole life: the scenario, then a clean exit (if nothing killed it first)."""
    try:
        store.os = OsWithWrite(killer)
        model.on_request(killer.request)
        town = Town()
        town.functions = {name: killer.tool(function) for name, function in town.functions.items()}
        journal = Journal(journal_path)
        SCENARIOS[scenario](store, client, town, folder, journal)
        journal.note(done=killer.counts)
        os._exit(0)
    except BaseException as error:      # noqa: BLE001 - reported, then the child ends
        Journal(journal_path).note(failed=f"{type(error).__name__}: {error}")
        os._exit(1)


def run_child(store, model, client, scenario, folder, journal_path, killer, delay=None) -> int:
    """Fork, play, and (with a delay) SIGKILL the child from here after `delay` seconds."""
    pid = os.fork()
    if pid == 0:
        play(store, model, client, scenario, folder, journal_path, killer)
    if delay is not None:
        time.sleep(delay)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _, status = os.waitpid(pid, 0)
    return status


def read_journal(path: Path) -> list[dict[str, Any]]:
    events = []
    if not path.exists():
        return events       # killed before it opened its journal
    for raw in path.read_bytes().split(b"\n"):
        try:
            events.append(json.loads(raw))
        except ValueError:
            pass        # empty, or the one line the kill cut short
    return events


# --- the checks -------------------------------------------------------------------------


def is_stand_in(message: dict[str, Any]) -> bool:
    """A result a repair made up for an interrupted call: the next repair makes it again."""
    return message.get("role") == "tool" and "was interrupted" in str(message.get("content"))


def what_the_agents_had(events, baseline):
    """Per session: (messages in memory at the end, how many may be missing, other allowed views).

    Replays the journal: the history an agent started from, each message it recorded, undo
    and fork. An undo or a fork that was under way when the child died may or may not be on
    disk, so both outcomes are allowed. A child that died inside a model call or a tool had
    flushed everything before it: nothing may be missing then.
    """
    memory: dict[str, list] = {"quest": list(baseline)}
    allowed: dict[str, list[list]] = {"quest": []}
    for event in events:
        session = event.get("session")
        if "history" in event:
            memory[session] = event["history"]
            allowed[session] = []
        elif "record" in event:
            memory[session].append(event["record"])
            allowed[session] = []
        elif "undo" in event:
            before = list(memory[session])
            starts = [i for i, m in enumerate(before) if m["role"] == "user"]
            allowed[session] = [before, before[:starts[-1]]]    # the marker landed, or not
            memory[session] = before[:starts[-1]]
        elif "undone" in event:
            allowed[session] = []
        elif "fork_of" in event:
            memory[session] = list(memory[event["fork_of"]])
            allowed[session] = [[]]         # the fork is all or nothing
    return memory, allowed


def check_kill(store, folder, journal_path, baseline, died_in, resume_model, resume_client, point):
    """Everything a kill must leave true; returns a list of problems (empty: all is well)."""
    problems = []
    events = read_journal(journal_path)
    failed = [e["failed"] for e in events if "failed" in e]
    if failed:
        return [f"{point}: the child raised instead of dying: {failed[0]}"]
    memory, allowed = what_the_agents_had(events, baseline)
    for session, had in memory.items():
        log = store.SessionLog(folder, session)
        if not log.path.exists():
            if any(not is_stand_in(m) for m in had[1:]) and [] not in allowed[session]:
                problems.append(f"{point}: session {session!r} has no log, but its agent had {len(had)} messages")
            continue
        try:
            shown = log.load()
        except Exception as error:     # noqa: BLE001 - any exception is the finding
            problems.append(f"{point}: session {session!r} does not load: {type(error).__name__}: {error}")
            continue
        slack = 0 if died_in in ("request", "tool") else 1
        # Stand-ins past what the agent had: a repair that was under way when the child died.
        common, extra = shown[:len(had)], shown[len(had):]
        real_missing = [m for m in had[len(shown):] if not is_stand_in(m)]
        fits = (common == had[:len(common)] and all(is_stand_in(m) for m in extra)
                and len(real_missing) <= slack)
        if not fits and shown not in allowed[session]:
            problems.append(
                f"{point}: session {session!r} shows {len(shown)} messages; its agent had {len(had)} "
                f"and at most {slack} may be missing. Shown: {summary(shown)}; had: {summary(had)}")
            continue
        # A new writer takes it over: repair, then a request the validating model accepts.
        resume_model.requests.clear()
        try:
            with store.SessionLog(folder, session) as again:
                agent = store.Agent(resume_client, model=MODEL_NAME, tools=Town(), session=again)
                history = list(agent.messages)
                agent.run("Where were we?")
        except openai.BadRequestError as error:
            problems.append(f"{point}: the resume of {session!r} was refused by the model (HTTP 400): {error}")
            continue
        except Exception as error:     # noqa: BLE001
            problems.append(f"{point}: the resume of {session!r} failed: {type(error).__name__}: {error}")
            continue
        if history[:len(shown)] != shown or not all(is_stand_in(m) for m in history[len(shown):]):
            problems.append(f"{point}: the resume of {session!r} changed the history it loaded: "
                            f"{summary(shown)} became {summary(history)}")
        try:
            after = store.SessionLog(folder, session).load()
        except Exception as error:     # noqa: BLE001
            problems.append(f"{point}: after the resume, {session!r} does not load: {type(error).__name__}: {error}")
            continue
        if after != history + [{"role": "user", "content": "Where were we?"},
                               {"role": "assistant", "content": "We go on."}]:
            problems.append(f"{point}: after the resume, {session!r} shows {summary(after)}")
    return problems


def summary(messages) -> str:
    return "[" + ", ".join(m.get("role", "?")[0] + ("*" if m.get("tool_calls") else "")
                           for m in messages) + "]"


def initial_messages(store, scenario, folder) -> list:
    return store.SessionLog(folder, "quest").load() if scenario == "day two" else []


# --- the tests --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def models():
    """One town model and client for the children (each child has its own copy after fork),
    and one model that only says "We go on." for the resumes done here."""
    child_model = town_model()
    resume_model = ScriptedModel(lambda body: say("We go on."))
    clients = child_model.client(), resume_model.client()
    for client in clients:      # the first request builds the client's lazy parts: once, here
        client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Hello."}])
    resume_model.requests.clear()
    return child_model, clients[0], resume_model, clients[1]


def dry_run(store, models, scenario, tmp_path) -> dict[str, Any]:
    """The scenario once, without a kill: how many writes, requests and tool calls it makes."""
    child_model, client, _, _ = models
    folder, journal = tmp_path / "dry", tmp_path / "dry.journal"
    prepare(scenario, folder)
    began = time.perf_counter()
    run_child(store, child_model, client, scenario, folder, journal, Killer())
    took = time.perf_counter() - began
    events = read_journal(journal)
    shutil.rmtree(folder)
    journal.unlink()
    done = [e["done"] for e in events if "done" in e]
    assert done, f"the {scenario} scenario did not finish without a kill: {events[-1:]}"
    return {**done[0], "seconds": took}


def kill_points(counts: dict[str, Any], rng: random.Random) -> list[tuple]:
    points = [("write", k, cut) for k in range(1, counts["write"] + 1) for cut in CUTS]
    points += [("request", k, None) for k in range(1, counts["request"] + 1)]
    points += [("tool", k, None) for k in range(1, counts["tool"] + 1)]
    points += [("timer", rng.uniform(0, counts["seconds"] * 1.2), None) for _ in range(TIMER_KILLS)]
    return points


def kill_everywhere(store, models, scenario, tmp_path) -> tuple[int, list[str]]:
    child_model, client, resume_model, resume_client = models
    counts = dry_run(store, models, scenario, tmp_path)
    rng = random.Random(f"{SEED} {scenario}")
    problems: list[str] = []
    points = kill_points(counts, rng)
    for number, (kind, which, cut) in enumerate(points):
        folder, journal = tmp_path / f"kill{number}", tmp_path / f"kill{number}.journal"
        prepare(scenario, folder)
        baseline = initial_messages(store, scenario, folder)
        if kind == "timer":
            point = f"{scenario}: killed by a timer (random point {number})"
            run_child(store, child_model, client, scenario, folder, journal, Killer(), delay=which)
        else:
            point = f"{scenario}: killed in {kind} {which}" + (f", cut to {cut}" if cut else "")
            status = run_child(store, child_model, client, scenario, folder, journal, Killer(kind, which, cut))
            if not (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL):
                problems.append(f"{point}: the child was not killed there (wait status {status})")
        died_in = kind if kind in ("request", "tool") else None
        problems += check_kill(store, folder, journal, baseline, died_in, resume_model, resume_client, point)
        shutil.rmtree(folder)
        journal.unlink(missing_ok=True)
    return len(points), problems


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_sigkill_anywhere_leaves_a_log_that_loads_and_resumes(store, models, scenario, tmp_path):
    killed, problems = kill_everywhere(store, models, scenario, tmp_path)
    assert not problems, (f"{len(problems)} of {killed} kill points went wrong:\n" + "\n".join(problems[:15]))


def test_the_suite_kills_at_least_200_points(store, models, tmp_path):
    """The two scenarios together kill at 200 points or more (counted from dry runs)."""
    total = 0
    for scenario in SCENARIOS:
        counts = dry_run(store, models, scenario, tmp_path)
        total += len(kill_points(counts, random.Random(0)))
    assert total >= 200, f"only {total} kill points across the scenarios"
