"""Predict, then see: the failure each lesson prevents, shown on the code of the lesson before.

`sessionlab see NN` runs lesson NN's scenario. It loads the reference code of lesson NN-1
(solutions/<NN-1>_topic; lesson 00's own for 00, whose problem is that a new agent remembers
nothing), plays a short quest against the scripted model in a throwaway folder, and prints
what goes wrong, ending with the task of lesson NN that prevents it.

A transcript holds nothing that changes from run to run (no temporary paths, process ids,
times or hashes), so that the lesson pages can show it as it is: each page includes
docs/reference/examples/see/NN.txt, tests/cli/test_see.py runs every scenario and compares,
and `python -m sessionlab.failures` writes the files again.
"""

from __future__ import annotations

import json
import os
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import openai

from . import course
from .scripted import Crash, Reply, ScriptedModel, SimulatedCrash, call, request_tokens, say, use
from .town import Town

EXAMPLES = "docs/reference/examples/see"
LABEL = 11          # width of the role column
WIDTH = 78          # a transcript line is cut to this many characters


class NeedsPostgres(course.CourseError):
    """Lesson 11's scenario needs a PostgreSQL server, and none can be had here."""


# --- a scene: where a scenario runs and what it prints ----------------------------------


@dataclass
class Scene:
    root: Path                  # the course
    work: Path                  # the throwaway folder
    lines: list[str] = field(default_factory=list)

    @property
    def sessions(self) -> Path:
        return self.work / "sessions"

    def code(self, number: int) -> ModuleType:
        """The reference code of lesson `number`, loaded under a name of its own."""
        lesson = course.lessons(self.root)[number]
        return course.load_module(lesson.solution_folder,
                                  f"sessionlab_see.{lesson.name}")

    def say(self, text: str = "", indent: str = "") -> None:
        """A paragraph, wrapped to the transcript's width (an empty one: a blank line)."""
        if not text:
            self.lines.append("")
            return
        self.lines += textwrap.wrap(text, WIDTH, initial_indent=indent,
                                    subsequent_indent=indent, break_on_hyphens=False)

    def show(self, message: dict[str, Any], prefix: str = "  ") -> None:
        self.lines.append(cut(prefix + describe(message)))

    def show_log(self, path: Path, prefix: str = "  ", *, numbered: bool = False) -> None:
        for number, message in enumerate(log_lines(path), start=1):
            self.show(message, f"{prefix}{number:>2} " if numbered else prefix)

    def prevented_by(self, *task_ids: str) -> None:
        """The last line: the tasks that prevent what the scenario showed, each with its
        title. One line, however long, so that it reads (and greps) as one."""
        named = []
        for task_id in task_ids:
            task = course.lesson(task_id.split(".")[0], self.root).task(task_id)
            named.append(f"task {task_id}: {' '.join(task.title.split())}")
        self.say()
        self.lines.append(f"Prevented by {'; and '.join(named)}.")

    def transcript(self) -> str:
        text = "\n".join(self.lines).rstrip() + "\n"
        # Error messages of the lesson code name files by their full path.
        for folder in {str(self.work.resolve()), str(self.work)}:
            text = text.replace(folder + os.sep, "")
        return text


def cut(text: str) -> str:
    return text if len(text) <= WIDTH else text[:WIDTH - 3] + "..."


def describe(message: dict[str, Any]) -> str:
    """One message (or marker line) as one transcript line."""
    if "$marker" in message:
        # What the marker says, without its time and its empty fields.
        rest = [f"{k}={json.dumps(v)}" for k, v in message.items()
                if k not in ("$marker", "at") and v not in ("", 0, [], None)]
        return f"{'marker':<{LABEL}}{message['$marker']}: {', '.join(rest)}"
    role = message.get("role", "?")
    calls = message.get("tool_calls") or []
    if calls:
        text = ", ".join(call_text(c) for c in calls)
    else:
        text = content_text(message.get("content"))
    return f"{role:<{LABEL}}{text}"


def call_text(tool_call: dict[str, Any]) -> str:
    function = tool_call["function"]
    try:
        arguments = json.loads(function["arguments"])
        shown = ", ".join(f"{k}={json.dumps(v)}" for k, v in arguments.items())
    except (TypeError, ValueError, AttributeError):
        shown = str(function["arguments"])
    return f"{function['name']}({shown})"


def content_text(content: Any) -> str:
    if isinstance(content, dict) and "$blob" in content:
        return f"(in blobs/, {content['size']:,} bytes) {content['preview']}"
    if not isinstance(content, str):
        return json.dumps(content)
    text = " ".join(content.split())
    return text if len(content) < 1000 else f"({len(content.encode()):,} bytes) {text}"


def log_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def refusal(error: openai.APIStatusError) -> str:
    """What the provider said, as its error body has it."""
    body = error.body if isinstance(error.body, dict) else {}
    body = body.get("error", body) if isinstance(body.get("error"), dict) else body
    return f"HTTP {error.status_code}: {body.get('message', error.message)}"


def agent(lesson: ModuleType, model: ScriptedModel, town: Town, **options: Any) -> Any:
    return lesson.Agent(model.client(), model=model.model, tools=town, **options)


def resume_and_ask(scene: Scene, lesson: ModuleType, session_id: str, question: str) -> None:
    """A new agent resumes the session and asks: show the provider's refusal."""
    model = ScriptedModel([say("(the model answered)")])
    with lesson.SessionLog(scene.sessions, session_id) as log:
        try:
            agent(lesson, model, Town(), session=log).run(question)
            scene.say("The model answered: this session was not broken after all.", "  ")
        except openai.BadRequestError as error:
            scene.say(refusal(error), "  ")


def count(number: int, noun: str) -> str:
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


def size(path: Path) -> str:
    return count(path.stat().st_size, "byte")


# --- 00: a new agent remembers nothing --------------------------------------------------


def see_00(scene: Scene) -> None:
    lesson = scene.code(0)
    town = Town()
    model = ScriptedModel([use(call("talk_to", npc="elder")),
                           say("A torch and a rope, the elder says."),
                           say("I have no record of any elder. Who is that?")])
    scene.say("Day 1: lesson 00's agent asks the elder about the cave.")
    day1 = agent(lesson, model, town)
    day1.run("Ask the elder about the cave.")
    for message in day1.messages:
        scene.show(message)
    scene.say()
    scene.say("Day 2: a new agent, as a new process starts one, is asked about day 1. "
              "What it sends, and what the model answers:")
    day2 = agent(lesson, model, town)
    day2.run("What did the elder tell us yesterday?")
    for message in [*model.requests[-1]["messages"], *day2.messages[-1:]]:
        scene.show(message)
    scene.say(f"Day 1's {count(len(day1.messages), 'message')} lived in the first agent's "
              "list, and ended with it.")
    scene.say()
    scene.say("Lesson 00 keeps this on purpose: its last test pins it down.")
    scene.lines.append("Fixed later by task 01.3 (save each message) and task 02.1 (load them "
                       "back).")


# --- 01: a crash mid-run leaves nothing on disk ------------------------------------------


def see_01(scene: Scene) -> None:
    lesson = scene.code(0)
    town = Town()
    model = ScriptedModel([use(call("talk_to", npc="elder")), use(call("buy", item="torch")),
                           Crash("the process died while waiting for the model")])
    scene.sessions.mkdir()
    scene.say("Lesson 00's agent, saved the obvious way: its whole list written to "
              "sessions/quest.json once run() returns.")
    quest = agent(lesson, model, town)
    try:
        quest.run("Ask the elder about the cave, then buy a torch.")
        (scene.sessions / "quest.json").write_text(json.dumps(quest.messages),
                                                   encoding="utf-8")
    except SimulatedCrash:
        pass
    for message in quest.messages:
        scene.show(message)
    scene.say("(the process dies while it waits for the model's next reply)", "  ")
    scene.say()
    found = sorted(p.name for p in scene.sessions.iterdir())
    scene.say(f"On disk: {', '.join(found) if found else 'nothing, sessions/ is empty'}. "
              f"In the town: a {', '.join(town.inventory)} bought, {town.gold} gold left, "
              "and no record says so.")
    scene.prevented_by("01.3")


# --- 02: day 2 starts empty ------------------------------------------------------------


def see_02(scene: Scene) -> None:
    lesson = scene.code(1)
    town = Town()
    model = ScriptedModel([use(call("talk_to", npc="elder")),
                           say("A torch and a rope, the elder says."),
                           say("Which elder? I do not know what we need.")])
    scene.say("Day 1: lesson 01's agent saves every message to sessions/quest.jsonl.")
    with lesson.SessionLog(scene.sessions, "quest") as log:
        agent(lesson, model, town, session=log).run("Ask the elder about the cave.")
    path = scene.sessions / "quest.jsonl"
    scene.show_log(path, numbered=True)
    scene.say()
    scene.say("Day 2: a new process, a new agent on the same session. What its first "
              "request sends, and what the model answers:")
    with lesson.SessionLog(scene.sessions, "quest") as log:
        day2 = agent(lesson, model, town, session=log)
        day2.run("Buy what the elder said we need.")
    for message in [*model.requests[-1]["messages"], *day2.messages[-1:]]:
        scene.show(message)
    scene.say(f"quest.jsonl now holds {count(len(log_lines(path)), 'line')}: day 2 wrote "
              "after day 1 and never read it.")
    scene.prevented_by("02.1")


# --- 03: a fork that shares the file -----------------------------------------------------


def see_03(scene: Scene) -> None:
    lesson = scene.code(2)
    town = Town()
    model = ScriptedModel([use(call("talk_to", npc="elder")),
                           say("A torch and a rope, the elder says."),
                           use(call("talk_to", npc="guard")),
                           say("The guard knows the cave too.")])
    with lesson.SessionLog(scene.sessions, "quest") as log:
        agent(lesson, model, town, session=log).run("Ask the elder about the cave.")
    original = scene.sessions / "quest.jsonl"
    before = len(log_lines(original))
    scene.say(f"Day 1 leaves quest.jsonl with {count(before, 'line')}: the elder's advice. "
              "What if we had asked the guard instead? The quick fork: quest-guard.jsonl, "
              "a hard link to the same file. Lesson 02's agent resumes it and asks the "
              "guard. Now quest.jsonl, the original, holds:")
    os.link(original, scene.sessions / "quest-guard.jsonl")
    with lesson.SessionLog(scene.sessions, "quest-guard") as log:
        agent(lesson, model, town, session=log).run("Ask the guard about the cave instead.")
    scene.show_log(original, numbered=True)
    scene.say(f"{count(len(log_lines(original)) - before, 'line')} the original never said: "
              "day 2 of quest will resume them as its own.")
    scene.prevented_by("03.1")


# --- 04: a crash between a call and its result --------------------------------------------


class CrashingShop(Town):
    """A town whose shop never answers: the process dies while the tool runs."""

    def buy(self, item: str) -> str:
        raise SimulatedCrash("the process died inside the tool")


def see_04(scene: Scene) -> None:
    lesson = scene.code(3)
    model = ScriptedModel([use(call("buy", item="bread"))])
    scene.say("Day 1: lesson 03's agent asks for bread, and the process dies in the shop: "
              "after the call was saved, before its result was.")
    with lesson.SessionLog(scene.sessions, "quest") as log:
        try:
            agent(lesson, model, CrashingShop(), session=log).run("Buy some bread.")
        except SimulatedCrash:
            pass
    scene.show_log(scene.sessions / "quest.jsonl", numbered=True)
    scene.say()
    scene.say("Day 2 resumes the session and asks a question:")
    resume_and_ask(scene, lesson, "quest", "Did we get the bread?")
    scene.say("Every later request carries the same history, and is refused the same way.")
    scene.prevented_by("04.3")


# --- 05: two writers, no lock ---------------------------------------------------------------


@contextmanager
def process(work: Callable[[Callable[[], None]], None]) -> Iterator["Child"]:
    """Run `work(pause)` in a forked child: a real second process. `pause()` tells the
    parent that the child stopped, and waits for its go-ahead."""
    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    pid = os.fork()
    if pid == 0:            # the child: never returns into the caller
        status = 1
        try:
            os.close(to_child_w)
            os.close(from_child_r)

            def pause() -> None:
                os.write(from_child_w, b"p")
                os.read(to_child_r, 1)

            try:
                work(pause)
            except BaseException as error:      # noqa: BLE001 - told to the parent
                os.write(from_child_w, b"e" + f"{type(error).__name__}: {error}".encode())
            else:
                os.write(from_child_w, b"d")
                status = 0
        finally:
            os._exit(status)        # whatever happened: the parent sees the pipe close
    os.close(to_child_r)
    os.close(from_child_w)
    child = Child(pid, to_child_w, from_child_r)
    try:
        yield child
    finally:
        os.close(to_child_w)
        os.close(from_child_r)
        os.waitpid(pid, 0)


@dataclass
class Child:
    pid: int
    to_child: int
    from_child: int

    def wait(self, expected: str) -> None:
        """Until the child pauses ('paused') or ends ('done'), as expected."""
        said = os.read(self.from_child, 1)
        state = {b"p": "paused", b"d": "done"}.get(said, "failed")
        if state != expected:
            why = os.read(self.from_child, 2000).decode(errors="replace") if said else ""
            raise RuntimeError(f"the scenario's other process {state} (expected: {expected})"
                               + (f": {why}" if why else ""))

    def go(self) -> None:
        os.write(self.to_child, b"g")


def see_05(scene: Scene) -> None:
    lesson = scene.code(4)
    path = scene.sessions / "quest.jsonl"
    seen = 0

    def new_lines(who: str) -> None:
        nonlocal seen
        lines = log_lines(path)
        for message in lines[seen:]:
            scene.show(message, f"  {who}  ")
        seen = len(lines)

    def writer(user_text: str, item: str, answer: str, *, slow: bool) -> Callable:
        def work(pause: Callable[[], None]) -> None:
            class Shop(Town):
                def buy(self, item: str) -> str:
                    if slow:
                        pause()     # in the shop: the call is saved, its result is not
                    return super().buy(item)

            model = ScriptedModel([use(call("buy", item=item)), say(answer)])
            with lesson.SessionLog(scene.sessions, "quest") as log:
                agent(lesson, model, Shop(), session=log).run(user_text)
        return work

    scene.sessions.mkdir()
    scene.say("Two processes run lesson 04's agent on one session, quest, at the same time. "
              "Process A starts a turn and waits in the shop:")
    with process(writer("Buy a torch.", "torch", "Torch bought.", slow=True)) as a:
        a.wait("paused")
        new_lines("A")
        scene.say("Process B opens quest meanwhile. It finds a call without a result, takes "
                  "it for a crash and repairs it, then plays its own turn:")
        with process(writer("Buy a rope.", "rope", "Rope bought.", slow=False)) as b:
            b.wait("done")
        new_lines("B")
        scene.say("Process A comes back from the shop and finishes its turn:")
        a.go()
        a.wait("done")
        new_lines("A")
    scene.say()
    scene.say("Neither process saw an error. The next day resumes quest:")
    resume_and_ask(scene, lesson, "quest", "What did we buy?")
    scene.prevented_by("05.1")


# --- 06: a large paste ----------------------------------------------------------------------


def letter() -> str:
    """A pasted letter of 1 MiB, the same on every run."""
    line = "Dear adventurer, the ledge inside the cave is steep; bring a rope and a torch.\n"
    return (line * ((1 << 20) // len(line) + 1))[:1 << 20]


def see_06(scene: Scene) -> None:
    lesson = scene.code(5)
    paste = letter()
    model = ScriptedModel([say("A long letter. The ledge is steep."),
                           say("The same letter again.")])
    scene.say(f"A user pastes a letter of {count(len(paste.encode()), 'byte')} into lesson "
              "05's agent, and later pastes it again.")
    with lesson.SessionLog(scene.sessions, "quest") as log:
        quest = agent(lesson, model, Town(), session=log)
        quest.run(paste)
        quest.run(paste)
    path = scene.sessions / "quest.jsonl"
    longest = max(len(line) for line in path.read_bytes().splitlines())
    scene.say(f"quest.jsonl    {size(path)} in {count(len(log_lines(path)), 'line')}; the "
              f"longest line: {count(longest, 'byte')}", "  ")
    lesson.fork(scene.sessions, "quest", "quest-guard")
    scene.say("A fork, to try another way from there:")
    scene.say(f"quest-guard.jsonl  {size(scene.sessions / 'quest-guard.jsonl')}: both copies, "
              "copied again", "  ")
    total = sum(p.stat().st_size for p in scene.sessions.rglob("*") if p.is_file())
    scene.say(f"The folder holds {count(total, 'byte')} for one letter, and every load, fork "
              "and look at either log reads all of it.")
    scene.prevented_by("06.1")


# --- 07: taking a turn back -----------------------------------------------------------------


def see_07(scene: Scene) -> None:
    lesson = scene.code(6)
    town = Town(gold=2)
    model = ScriptedModel([use(call("buy", item="lantern")),
                           say("Not enough gold. The miller pays for help at the mill."),
                           use(call("talk_to", npc="guard")), say("The gate opens at dawn."),
                           say("At dawn.")])
    scene.say("Day 4, evening. With 2 gold left, the user asks lesson 06's agent to buy a "
              "lantern, which costs 8, and the model spends the turn on ways to earn gold. "
              "The user takes that turn back the only way the agent allows, by cutting it "
              "from its list of messages, and asks the guard instead.")
    with lesson.SessionLog(scene.sessions, "quest") as log:
        quest = agent(lesson, model, town, session=log)
        quest.run("Buy the lantern.")
        del quest.messages[-4:]
        quest.run("Ask the guard about the gate instead.")
        in_memory = len(quest.messages)
    path = scene.sessions / "quest.jsonl"
    scene.say(f"In memory: {count(in_memory, 'message')}, no lantern. On disk: "
              f"{count(len(log_lines(path)), 'line')}.", "  ")
    scene.say("The next day, the session resumed sends:")
    with lesson.SessionLog(scene.sessions, "quest") as log:
        agent(lesson, model, town, session=log).run("When do we leave?")
    for message in model.requests[-1]["messages"]:
        scene.show(message)
    scene.say("The lantern turn is back. Cutting its lines from the file instead would "
              "rewrite bytes already written, which a crash can tear and a fork or a reader "
              "relies on. An undo needs two things: the log must say which messages were "
              "taken back (a marker line), and every resume must leave them out (the "
              "replay): both are task 07.1.")
    scene.prevented_by("07.1")


# --- 08: a session that outgrows the model's window ---------------------------------------


WINDOW = 1200       # tokens: small, so that a few turns fill it
NPCS = ["elder", "guard", "mayor's daughter", "shopkeeper"]


def town_talk(body: dict[str, Any]) -> Reply:
    """The model of scenario 08: each day it talks to the next person, then sums up."""
    last = body["messages"][-1]
    if last["role"] == "user":
        days = sum(1 for message in body["messages"] if message["role"] == "user")
        return use(call("talk_to", npc=NPCS[(days - 1) % len(NPCS)]))
    return say("Noted: " + last["content"][:60])


def see_08(scene: Scene) -> None:
    lesson = scene.code(7)
    model = ScriptedModel(town_talk, context_window=WINDOW)
    scene.say(f"Lesson 07's agent talks to the town day after day. The model's window is "
              f"{WINDOW:,} tokens; each day's last request measures:")
    with lesson.SessionLog(scene.sessions, "quest") as log:
        quest = agent(lesson, model, Town(), session=log)
        for day in range(1, 50):
            try:
                quest.run(f"Day {day}: who should we talk to next?")
            except openai.BadRequestError as error:
                scene.say(f"day {day:>2}: refused", "  ")
                scene.say(refusal(error), "    ")
                break
            scene.say(f"day {day:>2}: {request_tokens(model.requests[-1]):>5,} tokens", "  ")
    scene.say("The log keeps growing, and so does every request after this one: the "
              "session can go on only if what is sent becomes smaller than what is kept.")
    scene.prevented_by("08.3")


# --- 09: erasing a message --------------------------------------------------------------------


ADDRESS = "12 Mill Lane"


def see_09(scene: Scene) -> None:
    lesson = scene.code(8)
    paste = ("Her last letter: the mill is quiet, write to me at " + ADDRESS + ". "
             + "The river is high this spring. " * 200)
    model = ScriptedModel([say("Where does she live?"),
                           say(f"I will write to your sister at {ADDRESS}."),
                           say("A long letter."),
                           use(call("buy", item="lantern")), say("You have a lantern."),
                           use(call("buy", item="rope")), say("You have a rope.")])
    with lesson.SessionLog(scene.sessions, "quest") as log:
        quest = agent(lesson, model, Town(gold=20), session=log)
        quest.run("Tell my sister that we found the cave.")
        # The address is a message of its own: what 09.3's erase looks for in the other
        # lines is the erased message's whole text, so the reply and the letter that
        # repeat it are scrubbed (a part of a sentence is not looked for in a message)
        quest.run(ADDRESS)
        quest.run(paste)
        quest.run("Buy a lantern.")
        quest.undo(1)
        quest.run("Buy a rope.")
    path = scene.sessions / "quest.jsonl"
    scene.say("Lesson 08's log, after an address was said, a letter pasted and a turn "
              "undone:")
    scene.show_log(path, numbered=True)
    scene.say()
    scene.say("The user asks to erase message 3, the address. The obvious way: write "
              "quest.jsonl again without its line.")
    lines = path.read_bytes().splitlines(keepends=True)
    kept = lines[:2] + lines[3:]
    path.write_bytes(b"".join(kept))
    scene.say(f'"{ADDRESS}" is still in:')
    for number, line in enumerate(kept, start=1):
        if ADDRESS.encode() in line:
            what = ("the letter's preview" if b'"$blob"' in line
                    else "the reply that repeated it")
            scene.say(f"quest.jsonl, line {number}: {what}", "  ")
    blobs = [p for p in (scene.sessions / "blobs").iterdir() if ADDRESS.encode()
             in p.read_bytes()]
    scene.say(f"blobs/: {count(len(blobs), 'file')}, the letter itself", "  ")
    scene.say("And each message after the removed line moved up one place, so the undo "
              "marker now hides other messages. Resumed, the session shows:")
    with lesson.SessionLog(scene.sessions, "quest") as log:
        for message in log.load():
            scene.show(message)
    scene.say('The undone turn is half back: "Buy a lantern." returns, without its call '
              "and its answer.")
    scene.prevented_by("09.3")


# --- 10: a helper agent's work ----------------------------------------------------------------


HELPER_TOOL = {"type": "function", "function": {
    "name": "ask_helper", "description": "Hand a question to a helper agent.",
    "parameters": {"type": "object", "properties": {"question": {"type": "string"}},
                   "required": ["question"]}}}


def see_10(scene: Scene) -> None:
    lesson = scene.code(9)
    question = "Ask the elder what they know about the cave."

    def play(session_id: str, *, mixed: bool) -> Path:
        model = ScriptedModel([use(call("ask_helper", question=question)),
                               use(call("talk_to", npc="elder")),
                               say("A torch and a rope, the elder says."),
                               say("We need a torch and a rope.")])
        town = Town()
        with lesson.SessionLog(scene.sessions, session_id) as log:
            parent = agent(lesson, model, town, session=log)

            def ask_helper(question: str) -> str:
                helper = agent(lesson, model, town)
                if mixed:
                    helper.session = parent.session     # it writes where the parent does
                return helper.run(question)

            town.functions = {**town.functions, "ask_helper": ask_helper}
            town.schemas = [*town.schemas, HELPER_TOOL]
            parent.run("Ask a helper to find out what the elder knows.")
        return scene.sessions / f"{session_id}.jsonl"

    scene.say("Lesson 09's agent hands a question to a helper, a second agent with the same "
              "tools. Kept nowhere, the helper's work is gone once it answers; the parent's "
              "log holds:")
    scene.show_log(play("quest", mixed=False), numbered=True)
    scene.say("Nothing says the helper talked to the elder. Written into the parent's log "
              "instead:")
    scene.show_log(play("mixed", mixed=True), numbered=True)
    scene.say("Resumed, that history is refused:")
    resume_and_ask(scene, lesson, "mixed", "And the cave?")
    scene.prevented_by("10.2", "10.3")


# --- 11: two hosts, one session ----------------------------------------------------------------


def see_11(scene: Scene, url: str | None = None) -> None:
    lesson = scene.code(10)
    scene.say("Lesson 10's log is a file on one machine's disk: a second host sees none of "
              "it. The obvious move to a server: a table with a row for each line of the "
              "log, its place a plain column (no key on it), each new line at the place "
              "after the highest so far. Two hosts append to one session at the same "
              "moment:")
    with connected(url) as (a, b):
        a.execute("CREATE TABLE lines (session text, place int, line text)")
        first = {"role": "user", "content": "Ask the elder about the cave."}
        a.execute("INSERT INTO lines VALUES ('quest', 1, %s)",
                  [lesson.encode_line(first).decode()])
        a.commit()
        hosts = [("A", a, "Buy a torch."), ("B", b, "Buy a rope.")]
        place = {}
        for name, connection, _ in hosts:
            place[name] = connection.execute(
                "SELECT coalesce(max(place), 0) + 1 FROM lines WHERE session = 'quest'"
            ).fetchone()[0]
            scene.say(f"host {name} reads the next place: {place[name]}", "  ")
        for name, connection, text in hosts:
            line = lesson.encode_line({"role": "user", "content": text}).decode()
            connection.execute("INSERT INTO lines VALUES ('quest', %s, %s)",
                               [place[name], line])
            connection.commit()
            scene.say(f'host {name} inserts "{text}" at place {place[name]}, and commits',
                      "  ")
        rows = a.execute("SELECT place, count(*) FROM lines WHERE session = 'quest' "
                         "GROUP BY place ORDER BY place").fetchall()
    scene.say("The session now holds:")
    for number, lines in rows:
        scene.say(f"place {number}: {count(lines, 'line')}", "  ")
    scene.say("Both commits succeeded. Two messages share place 2 and nothing says which "
              "came first: a load may return them either way, and each host goes on "
              "believing its own.")
    scene.prevented_by("11.2")


@contextmanager
def connected(url: str | None) -> Iterator[tuple[Any, Any]]:
    """Two connections, as two hosts have, in a schema of their own on `url`, or on a
    throwaway server when `url` is None."""
    import uuid

    import psycopg
    from . import pgserver
    schema = f"sessionlab_see_{uuid.uuid4().hex[:12]}"    # nobody else's tables
    with ExitStack() as stack:
        server = url or stack.enter_context(pgserver.throwaway_cluster())
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f"CREATE SCHEMA {schema}")
            try:
                options = f"-c search_path={schema}"
                with psycopg.connect(server, options=options) as a, \
                        psycopg.connect(server, options=options) as b:
                    yield a, b
            finally:
                admin.execute(f"DROP SCHEMA {schema} CASCADE")


def postgres_url() -> str | None:
    """The server lesson 11's scenario uses: SESSIONLAB_POSTGRES_URL, or None for a
    throwaway one. Raises NeedsPostgres, saying how to get one, when neither can be."""
    from . import pgserver
    if (reason := pgserver.why_not_available()) is not None:
        raise NeedsPostgres(f"`sessionlab see 11` needs PostgreSQL. {reason}")
    return os.environ.get(pgserver.URL_VARIABLE)


# --- running them ----------------------------------------------------------------------------


# What each scenario shows, for `sessionlab see` without a lesson.
SHOWS = {
    "00": "a new agent remembers nothing of the last one",
    "01": "a crash in the middle of a turn leaves nothing on disk",
    "02": "day 2's first request carries nothing of day 1",
    "03": "a fork that shares the file changes the original",
    "04": "a crash between a call and its result: the provider refuses the session",
    "05": "two processes write one session: a history nobody can resume",
    "06": "a 1 MB paste in every line, every fork and every load",
    "07": "a turn taken back in memory comes back on resume",
    "08": "a long session outgrows the model's window",
    "09": "an erased message's words stay, and undo hides the wrong messages",
    "10": "a helper's work lost, or mixed into the parent's log",
    "11": "two hosts append at the same place of a database table",
}

SCENARIOS: dict[str, Callable[[Scene], None]] = {
    "00": see_00, "01": see_01, "02": see_02, "03": see_03, "04": see_04, "05": see_05,
    "06": see_06, "07": see_07, "08": see_08, "09": see_09, "10": see_10, "11": see_11,
}


def run(number: str, root: Path, *, postgres: str | None = None) -> str:
    """The transcript of lesson `number`'s scenario, run on the course at `root`.

    Lesson 11's runs on the server at `postgres`, else on SESSIONLAB_POSTGRES_URL's, else
    on a throwaway one; NeedsPostgres says how to get one when none can be had.
    """
    scenario = SCENARIOS[number]
    with tempfile.TemporaryDirectory(prefix="sessionlab-see-") as work:
        scene = Scene(root, Path(work))
        if number == "11":
            from . import pgserver
            try:
                see_11(scene, postgres or postgres_url())
            except pgserver.NoServer as error:
                raise NeedsPostgres(f"`sessionlab see 11` needs PostgreSQL: {error}") from None
        else:
            scenario(scene)
        return scene.transcript()


def example_path(root: Path, number: str) -> Path:
    return root / EXAMPLES / f"{number}.txt"


def refresh(root: Path) -> list[Path]:
    """Write every scenario's transcript where the lesson pages include it."""
    written = []
    for number in SCENARIOS:
        path = example_path(root, number)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(run(number, root), encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":      # python -m sessionlab.failures: these alone (quicker than
    for written in refresh(course.find_root()):     # `python -m sessionlab.site examples`)
        print(f"wrote {written}")
