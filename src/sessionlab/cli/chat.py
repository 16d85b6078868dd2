"""`sessionlab chat`: talk to your own lesson code through a model.

The agent is the chosen lesson's `Agent` (your `lessons/NN/`, or the reference with
`--solution`), with the town's two tools, on a named session in a sessions folder: new,
continued, or forked from another at a point (`--fork-from ID --at K`, with the lesson's own
`fork()`). Lesson 00 has no session log: the chat then lives in memory, and says so.

The model is the built-in scripted town model unless you name another: `--ollama MODEL`
(a local Ollama at http://127.0.0.1:11434/v1, or OLLAMA_HOST read as Ollama reads it), or any
OpenAI-compatible server with `--base-url URL --model NAME` (OPENAI_BASE_URL and OPENAI_API_KEY
are honoured). Before you type, the chat checks that the server answers and takes the model
with tools (`--no-check` skips this), so a model that cannot work never leaves a message behind.

Tool calls and their results are printed as the agent records them. Ctrl-C or Ctrl-D ends
the chat and leaves a log that resumes cleanly: a message being written is finished first,
and a tool call left without a result by Ctrl-C gets one saying it was interrupted.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import signal
import sys
import tempfile
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
from . import compaction, connect, database, replies, show, sidechains, world
from . import privacy     # lesson 09: /erase and /delete
from .doctor import ollama_url
from .progress import count, seconds
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
    client: Any          # a connect.KitClient around an openai.OpenAI
    name: str | None     # None until the server says which model it has (--base-url without --model)
    base_url: str
    kind: str            # scripted / ollama / openai
    api_key: str | None = None
    timeout: float = connect.PROBE_TIMEOUT     # --timeout: every wait on the server

    def describe(self) -> str:
        if self.kind == "scripted":
            return f"{self.name} (the built-in scripted town model, no network)"
        return f"{self.name} at {self.base_url}"


class ChatError(Exception):
    """Something the user can fix: one line saying what, one saying how."""

    def __init__(self, message: str, hint: str | None = None, fatal: bool = True, status: int = 1) -> None:
        super().__init__(message)
        self.message, self.hint, self.fatal, self.status = message, hint, fatal, status


def choose_model(args: argparse.Namespace) -> ModelChoice:
    import openai

    # --timeout bounds every wait, the connection's too: a server that never answers is
    # said to be so after that long, not after some other clock of the kit's. The SDK's own
    # Timeout, because openai 3 sends through httpx2, which refuses an httpx.Timeout.
    timeout = openai.Timeout(args.timeout, connect=min(5.0, args.timeout))
    if args.ollama:
        base = ollama_url() + "/v1"
        key = args.api_key or "ollama"
        client = openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=timeout)
        return ModelChoice(connect.KitClient(client), args.ollama, base, "ollama", key,
                           args.timeout)
    if args.base_url or args.model:
        base = (args.base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1").rstrip("/")
        key = args.api_key or os.environ.get("OPENAI_API_KEY")
        if not key:
            if not args.base_url and not os.environ.get("OPENAI_BASE_URL"):
                raise ChatError("no API key for the OpenAI API: OPENAI_API_KEY is not set",
                                "set OPENAI_API_KEY, or use a local server: --ollama MODEL or --base-url URL")
            key = "none"     # local servers want no key, but the client wants a string
        client = openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=timeout)
        return ModelChoice(connect.KitClient(client), args.model, base, "openai", key,
                           args.timeout)
    model = default_model()
    return ModelChoice(connect.KitClient(model.client()), model.model, model.base_url, "scripted")


def unreachable(choice: ModelChoice, what: str) -> ChatError:
    """Nothing answers at the URL: say where, and how to start the server."""
    if choice.kind == "scripted":
        return ChatError(f"the scripted model dropped the connection ({what})", "try again", fatal=False)
    hint = ("start Ollama with `ollama serve` (in another terminal), then try again" if choice.kind == "ollama"
            else "is the server running? check --base-url (or OPENAI_BASE_URL), then try again")
    return ChatError(f"cannot reach the model server at {choice.base_url} ({what})", hint)


def silent(choice: ModelChoice, waited: float) -> ChatError:
    """The server took the connection and said nothing for as long as we waited."""
    return ChatError(f"the model server at {choice.base_url} did not answer within {waited:g} s",
                     "a big model on a small machine is slow: try again, try a smaller model, "
                     "or give it longer with --timeout SECONDS", fatal=False)


def preflight(choice: ModelChoice, ui: Ui, check: bool) -> None:
    """Before the user types: is there a server, does it have the model, does it take tools?

    Anything wrong here stops the chat before a message is written, so a refused model never
    leaves a question in the log to be sent again on every resume. The tiny request (one token
    of answer) also loads the model, which the first real message would wait for anyway.
    """
    if choice.kind == "scripted" or (not check and choice.name):
        return
    try:
        _check(choice, ui, check)
    except KeyboardInterrupt:
        raise ChatError(f"stopped while checking the model server at {choice.base_url} (Ctrl-C): nothing was written",
                        "`--no-check` skips the check", status=130) from None


def _check(choice: ModelChoice, ui: Ui, check: bool) -> None:
    import openai

    probe = connect.probe_models(choice.base_url, choice.api_key,
                                 min(choice.timeout, connect.PROBE_TIMEOUT))
    if probe.timed_out:
        raise silent(choice, min(choice.timeout, connect.PROBE_TIMEOUT))
    if probe.status is None:
        refused = "refused" in probe.detail.lower() or "ConnectError" in probe.detail
        raise unreachable(choice, "connection refused" if refused else "the connection failed")
    if probe.status in (401, 403):
        raise ChatError(f"the server at {choice.base_url} refused the API key (HTTP {probe.status}: {probe.detail})",
                        "set OPENAI_API_KEY or pass --api-key")
    if probe.names is None and (probe.status == 404 or probe.status == 200):
        what, hint = connect.diagnose_404(choice.base_url, choice.api_key, choice.name or "?", choice.kind)
        raise ChatError(what, hint)
    if choice.name is None:
        if probe.names is None:
            raise ChatError(f"cannot list the models at {choice.base_url} (HTTP {probe.status}: {probe.detail})",
                            "name the model with --model NAME")
        names = probe.names
        if len(names) != 1:
            raise ChatError(f"which model? the server at {choice.base_url} has {len(names)}: "
                            f"{', '.join(names[:12]) or 'none'}", "name one with --model NAME")
        choice.name = names[0]
    if not check:
        return
    with working(ui, f"checking {choice.name} at {choice.base_url} (loading a model can take a minute)"):
        try:
            choice.client.inner.chat.completions.create(
                model=choice.name, messages=[{"role": "user", "content": "Say OK."}],
                tools=Town().schemas, tool_choice="auto", max_tokens=1)
        except openai.BadRequestError as error:
            if "max_tokens" in connect.server_message(error.body, str(error.message)):
                return       # a server that wants max_completion_tokens instead: the check proves nothing
            raise explain(error, choice) from None
        except openai.APIError as error:
            problem = explain(error, choice)
            problem.fatal = True     # nothing is written yet: stop here rather than fail on each message
            raise problem from None
    ui.out.print(Text(f"checked: the server answers, and {choice.name} takes requests with tools", style="dim"))


def explain(error: Exception, choice: ModelChoice) -> ChatError:
    """A model error as one line and what to do about it.

    "Try again" is said only where trying again can help: a timeout, a dropped connection, a
    5xx or a rate limit. A 400, 401 or 404 will be answered the same way every time.
    """
    import openai

    where = choice.base_url
    if isinstance(error, connect.ServerProblem):
        return ChatError(f"the server at {where} answered with no reply in it ({error})",
                         f"check --base-url; it usually ends in /v1 ({connect.USUAL_URLS})")
    if isinstance(error, openai.APITimeoutError) or _timed_out(error):
        return silent(choice, choice.timeout)
    if isinstance(error, openai.APIConnectionError):
        cause = repr(error.__cause__ or error)
        refused = "refused" in cause.lower() or "ConnectError" in cause
        return unreachable(choice, "connection refused" if refused else "the connection failed")
    if not isinstance(error, openai.APIStatusError):
        return ChatError(f"{type(error).__name__}: {error}")
    message = connect.server_message(error.body, str(error.message))
    status = error.status_code
    lower = message.lower()
    if status == 404:
        if choice.kind == "scripted":
            return ChatError(f"model {choice.name!r} not found (HTTP 404: {message})")
        what, hint = connect.diagnose_404(where, choice.api_key, choice.name or "?", choice.kind, message)
        return ChatError(f"{what} (HTTP 404: {message})" if message not in what else what, hint)
    if status == 400 and "auto-tool-choice" in lower:
        # vLLM started without tool calling switched on.
        return ChatError(f"the server at {where} is not set up for tool calls ({message})",
                         "start vLLM with --enable-auto-tool-choice and the --tool-call-parser of your model")
    if "--jinja" in lower:
        # llama.cpp's server started without its template engine (an HTTP 500, but not a passing one).
        return ChatError(f"the server at {where} is not set up for tool calls ({message})",
                         "start llama-server with --jinja")
    if status == 400 and "tool" in lower and "support" in lower and "tool_call" not in lower:
        others = connect.suggest_tool_models(choice.name or "")
        hint = "the agent needs tool calls: pick a model that has them"
        if choice.kind == "ollama":
            hint += ", e.g. " + " or ".join(f"`--ollama {name}`" for name in others)
        return ChatError(f"model {choice.name!r} does not support tools ({message})", hint)
    if status in (401, 403):
        return ChatError(f"the server at {where} refused the API key (HTTP {status}: {message})",
                         "set OPENAI_API_KEY or pass --api-key")
    if status == 429:
        return ChatError(f"the model server at {where} is busy or rate-limited (HTTP 429: {message})",
                         "wait a moment and try again", fatal=False)
    if status >= 500:
        return ChatError(f"the model server failed (HTTP {status}: {message})", "try again", fatal=False)
    hint = ("the same history will be refused again: take the last turn back with /undo (lesson 07), "
            "or continue in a fork that stops before it (--fork-from ID --at K)")
    if "respon" in lower and "tool" in lower:     # "... must be followed by tool messages responding to ..."
        hint = ("the conversation holds a tool call without a result, as after a crash mid-turn: "
                "lesson 04's repair answers it on resume; `sessionlab show` the log to see it")
    return ChatError(f"the model server refused the conversation (HTTP {status}: {message})", hint, fatal=False)


def _timed_out(error: BaseException) -> bool:
    """A connection error that is a timeout underneath (the SDK wraps some as such)."""
    kinds = _timeout_exceptions()
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, kinds):
            return True
        error = error.__cause__ or error.__context__
    return False


def _timeout_exceptions() -> tuple[type[BaseException], ...]:
    """The timeout errors of both HTTP stacks: openai 2 sends through httpx, openai 3
    through httpx2 (or through an httpx.Client it is given, as the scripted model does)."""
    import httpx

    kinds: list[type[BaseException]] = [httpx.TimeoutException]
    try:
        import httpx2
    except ImportError:     # openai 2: there is only httpx
        pass
    else:
        kinds.append(httpx2.TimeoutException)
    return tuple(kinds)


@contextmanager
def working(ui: Ui, label: str, enabled: bool | None = None):
    """A spinner with the seconds spent, while a request is out (in a terminal only).

    `enabled` defaults to "stdout is a terminal": in a pipe nothing is drawn, so the output
    stays the plain conversation.
    """
    if not (ui.out.is_terminal if enabled is None else enabled):
        yield
        return
    from rich.live import Live
    from rich.spinner import Spinner

    start = time.monotonic()
    spinner = Spinner("dots", style="cyan")

    class Elapsed:
        # Rendered again on every refresh, so the seconds count up by themselves.
        def __rich_console__(self, console, options):
            spinner.update(text=Text(f" {label} {time.monotonic() - start:.0f}s", style="dim"))
            yield spinner

    with Live(Elapsed(), console=ui.out, refresh_per_second=4, transient=True):
        yield


# --- which lesson ----------------------------------------------------------------------------


def choose_lesson(args: argparse.Namespace, ui: Ui, root: Path) -> tuple[Lesson, str]:
    """(lesson, side): --lesson, else the latest lesson of yours that passes, else the reference."""
    lessons = course.lessons(root)
    side = "solution" if args.solution else "lesson"
    if args.lesson is not None:      # `--lesson ""` is a lesson that does not exist
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


def where_option(folder: Path, store: str | None = None) -> str:
    """The option that names where the session is kept, for a command the user can paste:
    `--sessions DIR`, or `--store URL` with the URL as given (its query may hold the socket
    folder), unless it holds a password, which is never printed."""
    if not store:
        return f"--sessions {folder}"
    secret = re.search(r"//[^@/]*:[^@/]*@", store) or re.search(r"[?&]password=", store)
    return "--store URL" if secret else f"--store {store}"


def show_command(session_id: str | None, folder: Path, store: str | None = None) -> str:
    """`sessionlab show ID --sessions DIR` (or `--store URL`): the command that draws it."""
    return f"sessionlab show {session_id} {where_option(folder, store)}"


def lesson_error(error: BaseException, module: ModuleType, session_id: str | None, folder: Path,
                 store: str | None = None) -> ChatError | None:
    """One line for the errors lesson code raises on purpose (busy, corrupt, bad id, ...)."""
    name = type(error).__name__
    where = where_option(folder, store)
    if isinstance(error, NotImplementedError):
        return ChatError(f"your code is not finished: {error}",
                         "finish that task (`sessionlab check`), or chat with the reference: --solution")
    if getattr(module, name, None) is not type(error):
        return None          # not one of the lesson's own errors: a real bug, let it show
    hints = {
        "SessionBusy": "another chat or program is writing this session: close it first, or continue in a "
                       f"fork: `sessionlab chat NEW --fork-from {session_id} {where}`",
        "CorruptLog": f"look at the log with `{show_command(session_id, folder, store)}`; "
                      "the message names the line",
        "InvalidSessionId": "use 1 to 128 letters, digits, '.', '_' or '-'",
        "SessionNotFound": (f"`sessionlab show {where}` lists the sessions there" if store
                            else f"`sessionlab show {folder}` lists the sessions there"),
        "SessionExists": "pick another name for the new session",
        "WriterStopped": f"run `sessionlab chat {session_id} {where}` again: it resumes from what the "
                         "log really holds, and nothing is written twice",
        "ContextOverflow": compaction.OVERFLOW_HINT,
        "BadSummary": compaction.BAD_SUMMARY_HINT,
    }
    return ChatError(f"{name}: {error}", hints.get(name, f"`{show_command(session_id, folder, store)}`"))


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
    """Shows each message as it is recorded; the log keeps it unchanged, whatever is shown."""

    def __init__(self, ui: Ui, echo_user: bool, tool_names: set[str] | None = None) -> None:
        self.ui = ui
        self.echo_user = echo_user
        self.tool_names = tool_names
        self.names = show.ResultNames()     # which call each result answers, in order

    def __call__(self, message: dict[str, Any]) -> None:
        role = message.get("role")
        tool = self.names.name(message)
        if role == "user" and not self.echo_user:
            return
        thinking, shown = replies.assistant_view(message)
        if thinking:
            self.ui.out.print(show.hanging(Text("        (thinking) " + replies.fold(thinking), style="dim italic"),
                                           8, self.ui))
        if role != "assistant" or shown.get("content") or shown.get("tool_calls") or not thinking:
            for row in show.message_rows(shown, tool=tool, limit=600):
                self.ui.out.print(show.hanging(row, 8, self.ui))
        if role == "assistant" and not shown.get("tool_calls"):
            self.point_out(shown.get("content"), bool(thinking))

    def point_out(self, content: Any, thought: bool) -> None:
        """Say what is odd about a final answer, so the user is not left wondering."""
        note = None
        calls = replies.tool_calls_in_text(content, self.tool_names) if isinstance(content, str) else []
        if calls:
            note = (f"the model wrote a call to {', '.join(calls)} as text instead of calling the tool, so it "
                    "did not run: the server did not read it as a tool call. Small models do this often; "
                    "try a bigger one, or one made for tools (`ollama show MODEL` lists its capabilities).")
        elif content is None or (isinstance(content, str) and not content.strip()):
            note = ("the model only thought, and gave no answer" if thought
                    else "the model sent an empty reply: no text and no tool call")
        if note:
            self.ui.out.print(show.hanging(Text("        note: " + note, style="yellow"), 8, self.ui))


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

    sidechains.show_helpers(ShownAgent, printer)    # lesson 10: a helper's side-chain
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


def settle(agent: Any, ui: Ui, reason: str = INTERRUPTED) -> int:
    """After a turn that stopped early: give every call left open a result, so the log resumes.

    `reason` is the result's text: what stopped the turn (Ctrl-C, or an error in the agent),
    never a guess, since the model reads it on the next request.
    """
    missing = unanswered_calls(list(getattr(agent, "messages", [])))
    try:
        for call_id in missing:
            agent.record({"role": "tool", "tool_call_id": call_id, "content": reason})
        if callable(getattr(agent, "flush", None)) and getattr(agent, "session", None) is not None:
            agent.flush()       # lesson 07 keeps recorded messages pending until a flush
    except Exception as error:
        # A writer that stopped after a write whose outcome is unknown (lesson 01) refuses
        # every write: the next open of the session repairs what is really in the log.
        if type(error).__name__ != "WriterStopped":
            raise
        return 0
    return len(missing)


def failed_result(error: BaseException) -> str:
    return (f"error: the agent stopped with {type(error).__name__} before this tool call had a result "
            "(it may or may not have run)")


def where_in(error: BaseException, path: str | None) -> str | None:
    """`agent.py line 123, in run_tool` for the innermost frame of the lesson's file, if any."""
    import traceback

    if not path:
        return None
    found = None
    for frame in traceback.extract_tb(error.__traceback__):
        if os.path.abspath(frame.filename) == os.path.abspath(path):
            found = frame
    if found is None:
        return None
    return f"{path} line {found.lineno}, in {found.name}"


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
        return error.status


def make_sessions_folder(folder: Path) -> None:
    """Create the sessions folder, and any parent it lacks, readable by its owner only (0700),
    as the lessons do; then make sure a file can be written in it, before anything is said."""
    try:
        for path in [*reversed(folder.parents), folder]:
            if not path.is_dir():
                path.mkdir(mode=0o700, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise ChatError(f"cannot write in the sessions folder {folder}: {error.strerror or error}",
                        "chat in a folder you can write to, or name another with --sessions DIR") from None


def file_size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


@dataclass
class Opened:
    """What starting the chat's session gave: the agent, and where its files are."""
    agent: Any
    log: Any = None
    session_id: str | None = None
    path: Path | None = None
    size_before: int | None = None


# The lessons' rule for a session id (task 01.1), checked before anything runs: an id that
# is no plain file name would otherwise reach the file system first (a 300-character id
# is "File name too long" from the town's file, beside the log).
SESSION_ID = re.compile(r"(?!(?i:CON|PRN|AUX|NUL|COM[1-9]|LPT[1-9])(?:\.|$))"
                        r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_session_id(session_id: str, option: str = "") -> None:
    if SESSION_ID.fullmatch(session_id):
        return
    shown = repr(session_id) if len(session_id) <= 40 else repr(session_id[:40]) + "..."
    raise ChatError(f"invalid session id {shown}{' (' + option + ')' if option else ''}: "
                    f"{len(session_id)} characters; use 1 to 128 letters, digits, '.', '_' "
                    "or '-', starting with a letter or digit (no '/', no spaces), and not a "
                    "name Windows keeps for a device (CON, NUL, COM1 ...)", status=2)


def _chat(args: argparse.Namespace, ui: Ui, root: Path) -> int:
    if args.session is not None:
        check_session_id(args.session)
    if args.fork_from is not None:
        check_session_id(args.fork_from, "--fork-from")
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
    printer = Printer(ui, echo_user=not interactive, tool_names=set(Town().functions))
    agent_class = compaction.announcing(showing(module.Agent, printer), ui)   # lesson 08
    where = "yours" if side == "lesson" else "the reference"
    ui.out.print(Text.assemble(("Session Lab chat", "bold magenta"), "  lesson ", (lesson.number, "bold"),
                               f" ({where}: {'lessons' if side == 'lesson' else 'solutions'}/{lesson.name}/)"))
    # Before anything is written: a server or model that cannot work stops the chat here.
    preflight(choice, ui, check=not args.no_check)
    ui.out.print(Text(f"model: {choice.describe()}", style="dim"))
    if interactive:
        choice.client.waiting = lambda: working(ui, "the model is working (Ctrl-C stops it)")
    options: dict[str, Any] = {"model": choice.name, "system": args.system, "max_turns": args.max_turns}
    try:
        options.update(compaction.agent_options(args, module.Agent, lesson.number))  # lesson 08
    except ValueError as error:
        raise ChatError(str(error)) from None
    opened = open_session(args, ui, module, lesson, agent_class, choice, options, folder)
    agent, log, session_id = opened.agent, opened.log, opened.session_id
    for message in agent.messages:      # the calls a resumed session made before this chat
        printer.names.name(message)
    agent._printer = printer
    ui.out.print(Text("Type a message. /help lists commands; Ctrl-D or /quit ends the chat.", style="dim"))
    status = 0
    try:
        status = _loop(agent, ui, module, choice, interactive, session_id, folder, args.store)
    finally:
        if log is not None and callable(getattr(agent, "flush", None)):
            agent.flush()       # lesson 07: nothing recorded stays behind in the pending buffer
        _close(log)
    if opened.path is not None and not getattr(agent, "deleted", False):   # lesson 09: /delete
        say_where_saved(args, ui, lesson, side, opened)
    elif args.store:
        database.say_where_saved(args, ui, lesson, side, opened.session_id)
    return status


def say_where_saved(args: argparse.Namespace, ui: Ui, lesson: Lesson, side: str, opened: Opened) -> None:
    """Say the log was saved only when it was: the file is there and grew during the chat."""
    size = file_size(opened.path)
    if size is None or size <= (opened.size_before or 0):
        ui.out.print(Text(f"nothing was written to {opened.path} in this chat", style="dim"))
        return
    resume = f"sessionlab chat {opened.session_id} --lesson {lesson.number}" + (" --solution" if side == "solution" else "")
    if args.sessions != "sessions":
        resume += f" --sessions {args.sessions}"
    ui.out.print(Text(f"saved in {opened.path}. Continue with: {resume}", style="dim"))


def open_session(args: argparse.Namespace, ui: Ui, module: ModuleType, lesson: Lesson, agent_class: type,
                 choice: ModelChoice, options: dict[str, Any], folder: Path) -> Opened:
    """The agent, on its session (new, resumed or forked) with its town, or in memory (lesson 00)."""
    if args.store:      # lesson 11: the session in PostgreSQL
        return database.open_session(args, ui, module, lesson, agent_class, choice, options, folder)
    if not hasattr(module, "SessionLog"):
        if args.session or args.fork_from:
            ui.note(f"lesson {lesson.number} has no session log (lesson 01 adds it): "
                    "the session name is ignored")
        agent = agent_class(choice.client, tools=Town(), **options)
        ui.out.print(Text(f"lesson {lesson.number} keeps the conversation in memory only: nothing is saved, "
                          "and it is gone when the chat ends (lesson 01 adds the session log)", style="yellow"))
        return Opened(agent)
    opened = Opened(None)
    try:
        make_sessions_folder(folder)
        opened.session_id = fork_if_asked(args, ui, module, lesson, folder) or args.session or new_session_id()
        opened.path = folder / f"{opened.session_id}.jsonl"
        opened.size_before = file_size(opened.path)
        town, resumed = saved_town(ui, folder, opened.session_id, sidechains.town_class(module))
        opened.log = module.SessionLog(folder, opened.session_id)
        opened.agent = agent_class(choice.client, session=opened.log, tools=town, **options)
    except ChatError:
        _close(opened.log)
        raise
    except Exception as error:
        _close(opened.log)
        explained = lesson_error(error, module, opened.session_id, folder)
        if explained is None and isinstance(error, (ValueError, OSError)):
            explained = ChatError(f"{type(error).__name__}: {error}")
        if explained is None:
            raise
        raise explained from None
    describe_session(ui, module, lesson, opened)
    compaction.describe(opened.agent, ui)      # lesson 08: the budget, a compaction found
    if resumed:
        ui.out.print(Text(f"the town: {town.gold} gold, items: {', '.join(town.inventory) or 'none'} "
                          f"(kept in {world.town_path(folder, opened.session_id)})", style="dim"))
    return opened


def fork_if_asked(args: argparse.Namespace, ui: Ui, module: ModuleType, lesson: Lesson, folder: Path) -> str | None:
    """With --fork-from: fork with the lesson's own fork(), give the fork its source's town."""
    if not args.fork_from:
        if args.at is not None:
            raise ChatError("--at needs --fork-from: it says where to cut the session you fork")
        return None
    if not hasattr(module, "fork"):
        raise ChatError(f"lesson {lesson.number}'s code cannot fork (lesson 03 adds fork())",
                        "use --lesson 03 or later")
    session_id = args.session or fork_name(folder, args.fork_from)
    module.fork(folder, args.fork_from, session_id, upto=args.at)
    at = f" at message {args.at}" if args.at is not None else ""
    ui.out.print(Text(f"forked {args.fork_from}{at} into {session_id}", style="bold"))
    try:
        # History is copied, the world is not refunded: the fork starts with the gold left.
        world.copy_town(folder, args.fork_from, session_id)
    except world.TownFileError as error:
        raise ChatError(str(error), "move that file away to start the fork's town afresh") from None
    forked = [e.data for e in show.read_log(folder / f"{session_id}.jsonl").messages]
    if unanswered_calls(forked):
        ui.note(f"message {args.at} cuts a tool call from its result: a provider refuses such a "
                "history unless the lesson's code repairs it on resume (lesson 04)")
    return session_id


def saved_town(ui: Ui, folder: Path, session_id: str, town_class: type[Town] | None = None) -> tuple[Town, bool]:
    """The session's town, as the last chat on it left it; whether there was one."""
    path = world.town_path(folder, session_id)

    def failed(error: OSError) -> None:
        ui.error(f"cannot save the town in {path}: {error.strerror or error}",
                 "the purchase stands in this chat; a resumed chat will not know of it")
    town = (town_class or Town)()
    try:
        return town, world.keep(town, path, failed)
    except world.TownFileError as error:
        raise ChatError(str(error), "move that file away to start the town afresh") from None


def describe_session(ui: Ui, module: ModuleType, lesson: Lesson, opened: Opened) -> None:
    loaded = len(opened.agent.messages)
    reads_back = hasattr(module.SessionLog, "load")
    if loaded:
        state = f"{loaded} message(s) read back"
    elif not opened.size_before:
        state = "new"                   # no log, or an empty one: nothing to resume
    elif reads_back:
        state = "exists, with no message to resume"
    else:
        state = "exists, but this lesson's code does not read logs back"
    ui.out.print(Text(f"session {opened.session_id}: {opened.path} ({state})", style="dim"))
    size = file_size(opened.path)
    if opened.size_before and size is not None and size > opened.size_before:
        ui.out.print(Text("the log was repaired on resume: `sessionlab show` marks what was added",
                          style="yellow"))
    if opened.size_before and not loaded and not reads_back:
        ui.note(f"lesson {lesson.number} only appends (lesson 02 loads): the agent starts with an empty "
                "memory and adds to the existing log")


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
          session_id: str | None, folder: Path, store: str | None = None) -> int:
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
        except (openai.APIError, connect.ServerProblem) as error:
            settle(agent, ui, failed_result(error))
            problem = explain(error, choice)
            ui.error(problem.message, problem.hint)
            if problem.fatal:
                return 1
        except Exception as error:
            settle(agent, ui, failed_result(error))
            if type(error).__name__ == "MaxTurnsExceeded":
                ui.error(f"{error}", "ask for something simpler, or raise --max-turns")
                continue
            if type(error).__name__ == "ContextOverflow":    # lesson 08: the chat goes on
                ui.error(f"{error}", compaction.OVERFLOW_HINT)
                continue
            if compaction.is_bad_summary(error, module):    # lesson 08: the chat goes on
                ui.error(f"{error}", compaction.BAD_SUMMARY_HINT)
                continue
            explained = lesson_error(error, module, session_id, folder, store)
            if explained is None:
                place = where_in(error, getattr(module, "__file__", None))
                if place is None:
                    raise        # not from the lesson's code: a bug in the kit, let it show
                # A bug in the lesson's code (or a reply it does not handle yet): one line
                # that says where, and a log that still resumes.
                explained = ChatError(f"the agent failed: {type(error).__name__}: {error} ({place})",
                                      "everything recorded so far is in the log; "
                                      + (f"`{show_command(session_id, folder, store)}` shows it"
                                         if session_id else "fix the code, then chat again"))
            ui.error(explained.message, explained.hint)
            return 1


def undo_count(text: str) -> int | None:
    """The number of turns `/undo N` asks for: 1 when no number is given, None when what
    follows is not a whole number of 1 or more (`abc`, `-1`, `1.5`, `0`, `²`)."""
    text = text.strip()
    if not text:
        return 1
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        return None
    return int(text)


def _command(text: str, agent: Any, ui: Ui, session_id: str | None, folder: Path) -> str | None:
    word, _, rest = text[1:].strip().partition(" ")
    if word in ("quit", "exit", "q"):
        return "quit"
    if word == "help":
        ui.out.print("/history  the conversation so far\n/town     the town's gold and items, kept beside the session "
                     "(the world, not the history)\n"
                     + ("/undo [N] take back the last N turns\n" if hasattr(agent, "undo") else "")
                     + compaction.help_line(agent)
                     + privacy.help_lines(agent)
                     + "/quit     end the chat (Ctrl-D too)", markup=False)
    elif word == "history":
        names = show.result_names(agent.messages)
        for k, message in enumerate(agent.messages):
            for row in show.message_rows(message, tool=names[k], folder=folder, prefix=f"[{k}] ".rjust(6)):
                ui.out.print(show.hanging(row, 14, ui))
        if not agent.messages:
            ui.out.print("(nothing yet)")
    elif word == "town":
        town = agent.tools
        ui.out.print(f"gold: {town.gold}; items: {', '.join(town.inventory) or 'none'}")
    elif word == "undo" and not hasattr(agent, "undo"):
        ui.error("this lesson's agent cannot undo", "undo arrives in lesson 07: --lesson 07")
    elif word == "undo":
        turns = undo_count(rest)
        if turns is None:
            # A typo must never take back a turn: refuse it, change nothing.
            ui.error(f"/undo takes a whole number of turns, 1 or more; {rest.strip()!r} "
                     "is not one, so nothing was taken back", "/undo or /undo 2")
            return None
        try:
            agent.undo(turns)
        except Exception as error:
            ui.error(f"{type(error).__name__}: {error}")
        else:
            ui.out.print(f"took back {turns} turn(s); {len(agent.messages)} message(s) remain")
    elif compaction.command(word, agent, ui):      # lesson 08: /compact
        pass
    elif word in privacy.COMMANDS:     # lesson 09
        return privacy.command(word, rest, agent, ui, session_id, folder)
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
    p.add_argument("--store", metavar="URL",
                   help="keep the session in PostgreSQL (postgresql://user@host/db) instead of --sessions "
                        "(lesson 11 on)")
    model = p.add_argument_group("the model (default: the built-in scripted town model)")
    model.add_argument("--ollama", metavar="MODEL", help="a local Ollama model, e.g. llama3.2 (uses OLLAMA_HOST if set)")
    model.add_argument("--base-url", metavar="URL", help="any OpenAI-compatible server (default OPENAI_BASE_URL)")
    model.add_argument("--model", metavar="NAME", help="the model's name on that server")
    model.add_argument("--api-key", metavar="KEY", help="API key (default OPENAI_API_KEY; local servers need none)")
    model.add_argument("--timeout", type=seconds, default=300.0, metavar="SECONDS",
                       help="how long to wait for one answer (default 300)")
    model.add_argument("--no-check", action="store_true",
                       help="skip the check before the chat (list the models, one tiny request with tools)")
    p.add_argument("--system", default=SYSTEM, metavar="TEXT", help="the system prompt")
    p.add_argument("--max-turns", type=count, default=8, metavar="N", help="model calls allowed per message (default 8)")
    compaction.add_options(p)       # lesson 08: --budget
