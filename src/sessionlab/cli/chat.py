"""`sessionlab chat`: talk to your own lesson code through a model.

The agent is the chosen lesson's `Agent` (your `lessons/NN/agent.py`, or the reference with
`--solution`), with the town's two tools, on a named session in a sessions folder: new,
continued, or forked from another at a point (`--fork-from ID --at K`, with the lesson's own
`fork()`). Lesson 00 has no session log: the chat then lives in memory, and says so.

The model is the built-in scripted town model unless you name another: `--ollama MODEL`
(a local Ollama at http://localhost:11434/v1, or OLLAMA_HOST), or any OpenAI-compatible server
with `--base-url URL --model NAME` (OPENAI_BASE_URL and OPENAI_API_KEY are honoured).

Tool calls and their results are printed as the agent records them. Ctrl-C or Ctrl-D ends
the chat and leaves a log that resumes cleanly: a message being written is finished first,
and a tool call left without a result by Ctrl-C gets one saying it was interrupted.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from rich.text import Text

from .. import course
from ..course import Lesson
from ..town import Town
from . import show
from .doctor import TOOL_MODEL_SUGGESTION, ollama_url
from .runner import Runner
from .ui import Ui

SYSTEM = ("You are an adventurer in a small town, on a quest to get into the cave north of the mill. "
          "Use your tools: talk_to(npc) to hear what people know, buy(item) to spend your gold at the shop. "
          "Keep answers short.")
INTERRUPTED = ("interrupted: the user stopped the turn (Ctrl-C) before this tool call finished; "
               "it may or may not have run")
FATAL = "fatal"


def default_model():
    """The built-in town model (a ScriptedModel playing the quest)."""
    from ..town_model import town_model
    return town_model()


# --- which model -----------------------------------------------------------------------------


@dataclass
class ModelChoice:
    client: Any
    name: str
    base_url: str
    kind: str            # scripted / ollama / openai

    def describe(self) -> str:
        if self.kind == "scripted":
            return f"{self.name} (the built-in scripted town model, no network)"
        return f"{self.name} at {self.base_url}"


class ChatError(Exception):
    """Something the user can fix: one line saying what, one saying how."""

    def __init__(self, message: str, hint: str | None = None, fatal: bool = True) -> None:
        super().__init__(message)
        self.message, self.hint, self.fatal = message, hint, fatal


def choose_model(args: argparse.Namespace) -> ModelChoice:
    import httpx
    import openai

    timeout = httpx.Timeout(args.timeout, connect=5.0)
    if args.ollama:
        base = ollama_url() + "/v1"
        client = openai.OpenAI(base_url=base, api_key=args.api_key or "ollama", max_retries=0, timeout=timeout)
        return ModelChoice(client, args.ollama, base, "ollama")
    if args.base_url or args.model:
        base = args.base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        key = args.api_key or os.environ.get("OPENAI_API_KEY")
        if not key:
            if not args.base_url and not os.environ.get("OPENAI_BASE_URL"):
                raise ChatError("no API key for the OpenAI API: OPENAI_API_KEY is not set",
                                "set OPENAI_API_KEY, or use a local server: --ollama MODEL or --base-url URL")
            key = "none"     # local servers want no key, but the client wants a string
        client = openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=timeout)
        name = args.model or discover_model(client, base)
        return ModelChoice(client, name, base.rstrip("/"), "openai")
    model = default_model()
    return ModelChoice(model.client(), model.model, model.base_url, "scripted")


def discover_model(client: Any, base: str) -> str:
    """With --base-url and no --model: the server's only model, if it has exactly one."""
    import openai

    try:
        names = [m.id for m in client.models.list()]
    except openai.APIError as error:
        raise explain(error, ModelChoice(client, "?", base, "openai")) from None
    if len(names) == 1:
        return names[0]
    raise ChatError(f"which model? the server at {base} has {len(names)}: {', '.join(names[:12]) or 'none'}",
                    "name one with --model NAME")


def _server_message(error: Any) -> str:
    body = error.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
    return str(error.message)


def explain(error: Exception, choice: ModelChoice) -> ChatError:
    """A model error as one line and what to do about it."""
    import openai

    where = choice.base_url
    ollama = choice.kind == "ollama"
    if isinstance(error, openai.APITimeoutError):
        return ChatError(f"the model server at {where} did not answer in time",
                         "a big model on a small machine is slow: try a smaller one, or a longer --timeout", fatal=False)
    if isinstance(error, openai.APIConnectionError):
        cause = repr(error.__cause__ or error)
        refused = "refused" in cause.lower() or "ConnectError" in cause
        what = "connection refused" if refused else "the connection failed"
        if choice.kind == "scripted":
            return ChatError(f"the scripted model dropped the connection ({what})", "try again", fatal=False)
        hint = ("start Ollama with `ollama serve` (in another terminal), then try again"
                if ollama else "is the server running? check --base-url (or OPENAI_BASE_URL)")
        return ChatError(f"cannot reach the model server at {where} ({what})", hint)
    if isinstance(error, openai.APIStatusError):
        message = _server_message(error)
        status = error.status_code
        if status == 404:
            hint = (f"pull it first: `ollama pull {choice.name}` (or pick one from `ollama list`)" if ollama
                    else f"check --model; `curl {where}/models` lists the models this server has")
            return ChatError(f"model {choice.name!r} not found at {where} (HTTP 404: {message})", hint)
        lower = message.lower()
        if status == 400 and "auto-tool-choice" in lower:
            # vLLM started without tool calling switched on.
            return ChatError(f"the server at {where} is not set up for tool calls ({message})",
                             "start vLLM with --enable-auto-tool-choice and the --tool-call-parser of your model")
        if status == 400 and "tool" in lower and "support" in lower and "tool_call" not in lower:
            return ChatError(f"model {choice.name!r} does not support tools ({message})",
                             "the agent needs tool calls: pick a model that has them, "
                             f"e.g. `--ollama {TOOL_MODEL_SUGGESTION}` or `--ollama qwen2.5`")
        if status in (401, 403):
            return ChatError(f"the server at {where} refused the API key (HTTP {status}: {message})",
                             "set OPENAI_API_KEY or pass --api-key")
        if status == 400:
            hint = None
            if "tool_call" in message or "tool message" in message or "'tool'" in message:
                hint = ("the conversation holds a tool call without a result, as after a crash mid-turn: "
                        "lesson 04's repair answers it on resume; `sessionlab show` the log to see it")
            return ChatError(f"the model server refused the conversation (HTTP 400: {message})", hint, fatal=False)
        return ChatError(f"the model server failed (HTTP {status}: {message})", "try again", fatal=False)
    return ChatError(f"{type(error).__name__}: {error}")


# --- which lesson ----------------------------------------------------------------------------


def choose_lesson(args: argparse.Namespace, ui: Ui, root: Path) -> tuple[Lesson, str]:
    """(lesson, side): --lesson, else the latest lesson of yours that passes, else the reference."""
    lessons = course.lessons(root)
    side = "solution" if args.solution else "lesson"
    if args.lesson:
        return course.lesson(args.lesson, root), side
    if args.solution:
        return lessons[-1], side
    from .progress import run_lessons
    results = run_lessons(ui, Runner(root), lessons)
    passing = [lesson for lesson in lessons if results[lesson.name].passed]
    if passing:
        return passing[-1], "lesson"
    ui.note(f"None of your lessons passes yet, so this chat runs the reference solutions/{lessons[-1].name}. "
            "`--lesson NN` runs your own code, passing or not.")
    return lessons[-1], "solution"


def load_lesson_module(lesson: Lesson, side: str) -> ModuleType:
    path = lesson.module_path(side)
    try:
        tag = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:10]   # one name per file
        return course.load_module(path, f"sessionlab_chat.{side}_{lesson.name}_{tag}")
    except course.CourseError:
        raise
    except Exception as error:
        raise ChatError(f"{path} does not import: {type(error).__name__}: {error}",
                        f"`sessionlab check {lesson.number}` shows the details") from None


def lesson_error(error: BaseException, module: ModuleType, session_id: str | None, folder: Path) -> ChatError | None:
    """One line for the errors lesson code raises on purpose (busy, corrupt, bad id, ...)."""
    name = type(error).__name__
    if isinstance(error, NotImplementedError):
        return ChatError(f"your code is not finished: {error}",
                         "finish that task (`sessionlab check`), or chat with the reference: --solution")
    if getattr(module, name, None) is not type(error):
        return None          # not one of the lesson's own errors: a real bug, let it show
    hints = {
        "SessionBusy": "another chat or program is writing this session: close it first, or continue in a "
                       f"fork: `sessionlab chat NEW --fork-from {session_id}`",
        "CorruptLog": f"look at the log with `sessionlab show {session_id} --sessions {folder}`; "
                      "the message names the line",
        "InvalidSessionId": "use 1 to 128 letters, digits, '.', '_' or '-'",
        "SessionNotFound": f"`sessionlab show {folder}` lists the sessions there",
        "SessionExists": "pick another name for the new session",
        "WriterStopped": f"run `sessionlab chat {session_id}` again: it resumes from what the log "
                         "really holds, and nothing is written twice",
    }
    return ChatError(f"{name}: {error}", hints.get(name, f"`sessionlab show {session_id} --sessions {folder}`"))


# --- showing the conversation as it is recorded ----------------------------------------------


@contextmanager
def interrupts_held():
    """Hold Ctrl-C while a message is written, so that Ctrl-C can never tear a line in two."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pressed = []
    previous = signal.signal(signal.SIGINT, lambda *_: pressed.append(True))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if pressed:
            raise KeyboardInterrupt


class Printer:
    def __init__(self, ui: Ui, echo_user: bool) -> None:
        self.ui = ui
        self.echo_user = echo_user
        self.names: dict[str, str] = {}

    def __call__(self, message: dict[str, Any]) -> None:
        role = message.get("role")
        self.names.update(show.call_names([message]))
        if role == "user" and not self.echo_user:
            return
        for row in show.message_rows(message, names=self.names, limit=600):
            self.ui.out.print(show.hanging(row, 8, self.ui))


def showing(agent_class: type, printer: Printer) -> type:
    """The lesson's Agent, printing each message once it is recorded (the lesson code unchanged)."""

    class ShownAgent(agent_class):  # type: ignore[misc, valid-type]
        _printer = None

        def record(self, message):
            with interrupts_held():
                super().record(message)
            if self._printer is not None:
                self._printer(message)

    if hasattr(agent_class, "flush"):
        # Lesson 07 writes in flush(): hold Ctrl-C there too, so a message is never written
        # and still left pending (it would be written twice).
        def flush(self):
            with interrupts_held():
                agent_class.flush(self)

        ShownAgent.flush = flush

    ShownAgent.__name__ = agent_class.__name__
    ShownAgent.__qualname__ = agent_class.__qualname__
    return ShownAgent


def unanswered_calls(messages: list[dict[str, Any]]) -> list[str]:
    """Ids of tool calls in the last assistant message that have no result after it."""
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if message.get("role") == "assistant":
            calls = [c.get("id") for c in message.get("tool_calls") or []]
            answered = {m.get("tool_call_id") for m in messages[i + 1:] if m.get("role") == "tool"}
            return [c for c in calls if c not in answered]
        if message.get("role") == "user":
            return []
    return []


def settle(agent: Any, ui: Ui) -> int:
    """After an interrupted turn: give every call left open a result, so the log resumes cleanly."""
    missing = unanswered_calls(list(getattr(agent, "messages", [])))
    try:
        for call_id in missing:
            agent.record({"role": "tool", "tool_call_id": call_id, "content": INTERRUPTED})
        if callable(getattr(agent, "flush", None)) and getattr(agent, "session", None) is not None:
            agent.flush()       # lesson 07 keeps recorded messages pending until a flush
    except Exception as error:
        # A writer that stopped after a write whose outcome is unknown (lesson 01) refuses
        # every write: the next open of the session repairs what is really in the log.
        if type(error).__name__ != "WriterStopped":
            raise
        return 0
    return len(missing)


# --- the command -----------------------------------------------------------------------------


def new_session_id() -> str:
    return time.strftime("chat-%Y%m%d-%H%M%S")


def fork_name(folder: Path, source: str) -> str:
    n = 1
    while (folder / f"{source}-fork{n}.jsonl").exists() or (folder / f"{source}-fork{n}.meta.json").exists():
        n += 1
    return f"{source}-fork{n}"


def cmd_chat(args: argparse.Namespace, ui: Ui, root: Path) -> int:
    try:
        return _chat(args, ui, root)
    except ChatError as error:
        ui.error(error.message, error.hint)
        return 1


def _chat(args: argparse.Namespace, ui: Ui, root: Path) -> int:
    interactive = sys.stdin.isatty()
    if interactive:
        try:
            import readline  # noqa: F401  (line editing and history for input())
        except ImportError:
            pass
    lesson, side = choose_lesson(args, ui, root)
    module = load_lesson_module(lesson, side)
    choice = choose_model(args)
    folder = Path(args.sessions)
    has_log = hasattr(module, "SessionLog")
    printer = Printer(ui, echo_user=not interactive)
    agent_class = showing(module.Agent, printer)
    options: dict[str, Any] = {"model": choice.name, "tools": Town(), "system": args.system,
                               "max_turns": args.max_turns}
    session_id = None
    log = None
    where = "yours" if side == "lesson" else "the reference"
    ui.out.print(Text.assemble(("Session Lab chat", "bold magenta"), "  lesson ", (lesson.number, "bold"),
                               f" ({where}: {'lessons' if side == 'lesson' else 'solutions'}/{lesson.name}/agent.py)"))
    ui.out.print(Text(f"model: {choice.describe()}", style="dim"))
    try:
        if has_log:
            folder.mkdir(parents=True, exist_ok=True)
            session_id = args.session
            if args.fork_from:
                if not hasattr(module, "fork"):
                    raise ChatError(f"lesson {lesson.number}'s code cannot fork (lesson 03 adds fork())",
                                    "use --lesson 03 or later")
                session_id = session_id or fork_name(folder, args.fork_from)
                module.fork(folder, args.fork_from, session_id, upto=args.at)
                at = f" at message {args.at}" if args.at is not None else ""
                ui.out.print(Text(f"forked {args.fork_from}{at} into {session_id}", style="bold"))
                forked = [e.data for e in show.read_log(folder / f"{session_id}.jsonl").messages]
                if unanswered_calls(forked):
                    ui.note(f"message {args.at} cuts a tool call from its result: a provider refuses such a "
                            "history unless the lesson's code repairs it on resume (lesson 04)")
            elif args.at is not None:
                raise ChatError("--at needs --fork-from: it says where to cut the session you fork")
            session_id = session_id or new_session_id()
            path = folder / f"{session_id}.jsonl"
            size_before = path.stat().st_size if path.exists() else None
            log = module.SessionLog(folder, session_id)
            agent = agent_class(choice.client, session=log, **options)
            loaded = len(agent.messages)
            state = (f"{loaded} message(s) read back" if loaded else
                     ("new" if size_before is None else "exists, but this lesson's code does not read logs back"))
            ui.out.print(Text(f"session {session_id}: {path} ({state})", style="dim"))
            if size_before is not None and path.exists() and path.stat().st_size > size_before:
                ui.out.print(Text("the log was repaired on resume: `sessionlab show` marks what was added",
                                  style="yellow"))
            if size_before is not None and not loaded and not hasattr(module.SessionLog, "load"):
                ui.note(f"lesson {lesson.number} only appends (lesson 02 loads): the agent starts with an empty "
                        "memory and adds to the existing log")
        else:
            if args.session or args.fork_from:
                ui.note(f"lesson {lesson.number} has no session log (lesson 01 adds it): "
                        "the session name is ignored")
            agent = agent_class(choice.client, **options)
            ui.out.print(Text(f"lesson {lesson.number} keeps the conversation in memory only: nothing is saved, "
                              "and it is gone when the chat ends (lesson 01 adds the session log)", style="yellow"))
    except ChatError:
        _close(log)
        raise
    except Exception as error:
        _close(log)
        explained = lesson_error(error, module, session_id, folder)
        if explained is None and isinstance(error, (ValueError, OSError)):
            explained = ChatError(f"{type(error).__name__}: {error}")
        if explained is None:
            raise
        raise explained from None
    agent._printer = printer
    ui.out.print(Text("Type a message. /help lists commands; Ctrl-D or /quit ends the chat.", style="dim"))
    status = 0
    try:
        status = _loop(agent, ui, module, choice, interactive, session_id, folder)
    finally:
        if log is not None and callable(getattr(agent, "flush", None)):
            agent.flush()       # lesson 07: nothing recorded stays behind in the pending buffer
        _close(log)
    if log is not None:
        resume = f"sessionlab chat {session_id} --lesson {lesson.number}" + (" --solution" if side == "solution" else "")
        if args.sessions != "sessions":
            resume += f" --sessions {args.sessions}"
        ui.out.print(Text(f"saved in {folder / (session_id + '.jsonl')}. Continue with: {resume}", style="dim"))
    return status


def _close(log: Any) -> None:
    if log is not None and hasattr(log, "close"):
        log.close()


def _read(ui: Ui, interactive: bool) -> str:
    if interactive:
        return ui.out.input(Text("you> ", style="bold cyan"))
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    return line.rstrip("\n")


def _loop(agent: Any, ui: Ui, module: ModuleType, choice: ModelChoice, interactive: bool,
          session_id: str | None, folder: Path) -> int:
    import openai

    while True:
        try:
            text = _read(ui, interactive)
        except EOFError:
            ui.out.print()
            return 0
        except KeyboardInterrupt:
            ui.out.print()
            return 0
        if not text.strip():
            continue
        if text.startswith("/"):
            if _command(text, agent, ui, session_id, folder) == "quit":
                return 0
            continue
        try:
            agent.run(text)
        except KeyboardInterrupt:
            closed = settle(agent, ui)
            ui.out.print()
            note = f" ({closed} tool call(s) answered as interrupted)" if closed else ""
            ui.out.print(Text(f"interrupted: everything recorded so far is in the log{note}; "
                              "it resumes cleanly.", style="yellow"))
            return 130
        except openai.APIError as error:
            settle(agent, ui)
            problem = explain(error, choice)
            ui.error(problem.message, problem.hint)
            if problem.fatal:
                return 1
        except Exception as error:
            settle(agent, ui)
            if type(error).__name__ == "MaxTurnsExceeded":
                ui.error(f"{error}", "ask for something simpler, or raise --max-turns")
                continue
            explained = lesson_error(error, module, session_id, folder)
            if explained is None:
                raise
            ui.error(explained.message, explained.hint)
            return 1


def _command(text: str, agent: Any, ui: Ui, session_id: str | None, folder: Path) -> str | None:
    word, _, rest = text[1:].strip().partition(" ")
    if word in ("quit", "exit", "q"):
        return "quit"
    if word == "help":
        ui.out.print("/history  the conversation so far\n/town     the town's state in this process "
                     "(gold and items: the world, not the history)\n"
                     + ("/undo [N] take back the last N turns\n" if hasattr(agent, "undo") else "")
                     + "/quit     end the chat (Ctrl-D too)", markup=False)
    elif word == "history":
        names = show.call_names(agent.messages)
        for k, message in enumerate(agent.messages):
            for row in show.message_rows(message, names=names, folder=folder, prefix=f"[{k}] ".rjust(6)):
                ui.out.print(show.hanging(row, 14, ui))
        if not agent.messages:
            ui.out.print("(nothing yet)")
    elif word == "town":
        town = agent.tools
        ui.out.print(f"gold: {town.gold}; items: {', '.join(town.inventory) or 'none'}")
    elif word == "undo" and not hasattr(agent, "undo"):
        ui.error("this lesson's agent cannot undo", "undo arrives in lesson 07: --lesson 07")
    elif word == "undo":
        turns = int(rest) if rest.strip().isdigit() else 1
        try:
            agent.undo(turns)
        except Exception as error:
            ui.error(f"{type(error).__name__}: {error}")
        else:
            ui.out.print(f"took back {turns} turn(s); {len(agent.messages)} message(s) remain")
    else:
        ui.error(f"unknown command /{word}", "/help lists them")
    return None


def register(commands, common: argparse.ArgumentParser) -> None:
    p = commands.add("chat", cmd_chat, "chat",
                     "talk to a lesson's agent (yours or the reference) on a named session",
                     parents=[common], description=__doc__.split("\n\n", 1)[1])
    p.add_argument("session", nargs="?", metavar="SESSION",
                   help="the session to start or continue (default: a new one named chat-<date>-<time>)")
    p.add_argument("--lesson", metavar="NN", help="whose code runs (default: your latest lesson that passes)")
    p.add_argument("--solution", action="store_true", help="run the reference solution instead of your code")
    p.add_argument("--sessions", default="sessions", metavar="DIR", help="the sessions folder (default ./sessions)")
    p.add_argument("--fork-from", metavar="ID", help="start SESSION as a fork of this session")
    p.add_argument("--at", type=int, metavar="K", help="with --fork-from: keep only the first K messages")
    model = p.add_argument_group("the model (default: the built-in scripted town model)")
    model.add_argument("--ollama", metavar="MODEL", help="a local Ollama model, e.g. llama3.2 (uses OLLAMA_HOST if set)")
    model.add_argument("--base-url", metavar="URL", help="any OpenAI-compatible server (default OPENAI_BASE_URL)")
    model.add_argument("--model", metavar="NAME", help="the model's name on that server")
    model.add_argument("--api-key", metavar="KEY", help="API key (default OPENAI_API_KEY; local servers need none)")
    model.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                       help="how long to wait for one answer (default 300)")
    p.add_argument("--system", default=SYSTEM, metavar="TEXT", help="the system prompt")
    p.add_argument("--max-turns", type=int, default=8, metavar="N", help="model calls allowed per message (default 8)")
