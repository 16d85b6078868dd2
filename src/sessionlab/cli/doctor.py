"""`sessionlab doctor`: is this machine ready for the course?

Python's version, the kit's dependencies and their versions, the course folder, the
OpenAI-style environment variables, and whether a local Ollama answers and with which models.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from importlib import metadata
from pathlib import Path

from rich.text import Text

from .. import course
from . import connect, find_course
from .ui import Ui

OLLAMA_DEFAULT = "http://127.0.0.1:11434"
TOOL_MODEL_SUGGESTION = "llama3.2"   # small, and it supports tool calls

# (distribution, why it is needed, required?)
PACKAGES = [
    ("openai", "the client lesson code calls models with", True),
    ("httpx", "HTTP of the scripted model and of this command", True),
    ("respx", "routes the client to the scripted model in tests", True),
    ("rich", "this command's output", True),
    ("pytest", "runs the lessons' tests", True),
    ("mkdocs", "builds the course site (optional)", False),
    ("mkdocs-material", "the site's theme (optional)", False),
    ("pexpect", "the kit's own terminal tests (optional)", False),
]


def ollama_url(given: str | None = None) -> str:
    """Where Ollama listens: --ollama-url, else OLLAMA_HOST, read as Ollama's own client reads it."""
    return connect.ollama_url(given if given else os.environ.get("OLLAMA_HOST"))


def url_problem(text: str) -> str | None:
    """Why `text` cannot be where a server listens, or None when it can.

    Checked before anything is asked of it, so that a typo is named as a typo and never
    reaches the HTTP client as a traceback. A bare `host:port` is read as Ollama reads it
    (http is implied)."""
    import httpx

    given = text.strip()
    if "://" not in given:
        given = "http://" + given
    try:
        url = httpx.URL(given)
    except (httpx.InvalidURL, ValueError) as error:
        return str(error)
    if url.scheme not in ("http", "https"):
        return f"the scheme must be http or https, not {url.scheme or 'empty'}"
    if not url.host:
        return "it names no host"
    if any(c in url.host for c in " %/\\"):
        return f"{url.host!r} is not a host name"
    if url.port is not None and not 1 <= url.port <= 65535:
        return f"port {url.port} is not in 1-65535"
    return None


def ollama_models(url: str, timeout: float = 1.5) -> list[str]:
    """The models a running Ollama has; raises httpx.HTTPError when it does not answer."""
    import httpx

    response = httpx.get(f"{url}/api/tags", timeout=timeout)
    response.raise_for_status()
    return sorted(model.get("name", "?") for model in response.json().get("models", []))


def _requirements() -> dict[str, str]:
    try:
        requires = metadata.requires("sessionlab") or []
    except metadata.PackageNotFoundError:
        return {}
    found = {}
    for line in requires:
        spec = line.split(";")[0].strip()
        name = spec
        for sep in "<>=!~ [":
            name = name.split(sep)[0]
        found.setdefault(name.lower(), spec)
    return found


def _satisfies(spec: str, version: str) -> bool | None:
    try:
        from packaging.requirements import Requirement
        return Requirement(spec).specifier.contains(version, prereleases=True)
    except Exception:   # packaging missing or an odd spec: do not guess
        return None


def bubblewrap_row() -> tuple[bool | None, str, str, str]:
    """Whether `sessionlab grade` can sandbox students' code here. Optional: a student
    never needs it, and grading without it still works (with less isolation)."""
    from ..grading import sandbox

    found = sandbox.probe()
    if found.usable:
        return True, "bubblewrap", "usable", "`sessionlab grade` sandboxes each student's code"
    return None, "bubblewrap", "not usable", (
        f"{found.why}; only for grading a class: `apt-get install bubblewrap`")


def cmd_doctor(args: argparse.Namespace, ui: Ui, root: Path | None) -> int:
    if args.ollama_url is not None and (why := url_problem(args.ollama_url)):
        ui.error(f"--ollama-url {args.ollama_url}: not a server address ({why})")
        return 2
    problems = 0
    table = ui.table()
    table.add_column("")
    table.add_column("What")
    table.add_column("Found")
    table.add_column("Notes")

    def row(ok: bool | None, what: str, found: str, notes: str = "") -> None:
        mark = ui.mark("passed" if ok else ("info" if ok is None else "failing"))
        # Text, not str: a path or a note holding [brackets] is not rich markup.
        table.add_row(mark, Text(what), Text(found), Text(notes))

    version = platform.python_version()
    python_ok = sys.version_info >= (3, 11)
    problems += not python_ok
    row(python_ok, "Python", version, sys.executable if python_ok else "Session Lab needs Python 3.11 or newer")

    specs = _requirements()
    for name, why, required in PACKAGES:
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            if required:
                problems += 1
            row(False if required else None, name, "missing",
                (why + ": `pip install -e .`" if required else why))
            continue
        spec = specs.get(name)
        fits = _satisfies(spec, installed) if spec else True
        if fits is False and required:
            problems += 1
        row(fits is not False, name, installed, why if fits is not False else f"the kit wants {spec}")

    try:
        root = find_course(args)
    except course.CourseError:
        row(None, "course", "not found here", "run commands from inside your copy of the course")
    else:
        try:
            count = len(course.lessons(root))
        except course.CourseError as error:    # found, but a lesson.toml is broken
            problems += 1
            row(False, "course", str(root), str(error))
        else:
            row(True, "course", str(root), f"{count} lessons")

    row(*bubblewrap_row())

    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        value = os.environ.get(name)
        shown = ("set" if name.endswith("KEY") else value) if value else "not set"
        row(None if not value else True, name, shown, "used by `sessionlab chat --model`" if value else "optional")

    import httpx

    url = ollama_url(args.ollama_url)
    try:
        models = ollama_models(url)
    except (httpx.HTTPError, httpx.InvalidURL, ValueError, OSError) as error:
        # OLLAMA_HOST can hold anything; whatever it holds is a row here, never a traceback.
        reason = ("connection refused" if isinstance(error, httpx.ConnectError)
                  else f"{type(error).__name__}: {error}" if str(error) else type(error).__name__)
        row(None, "Ollama", f"not answering at {url}",
            f"{reason}; optional: install Ollama, run `ollama serve`, then `ollama pull {TOOL_MODEL_SUGGESTION}`")
    else:
        if models:
            row(True, "Ollama", f"answering at {url}",
                f"{len(models)} model(s): {', '.join(models)}. Try `sessionlab chat --ollama {models[0]}`")
        else:
            row(None, "Ollama", f"answering at {url}",
                f"no models yet: `ollama pull {TOOL_MODEL_SUGGESTION}` (it supports tools)")
    ui.out.print(table)     # in plain text one unbroken line per check (ui.FitTable)
    if problems:
        ui.out.print(Text(f"{problems} problem(s) above must be fixed before the course works.", style="bold red"))
        return 1
    ui.out.print(Text("Ready. Without any model, `sessionlab chat` uses the built-in scripted town model.",
                      style="green"))
    return 0


def register(commands, common: argparse.ArgumentParser) -> None:

    p = commands.add(
        "doctor", cmd_doctor, "setup",
        "Python, the kit's dependencies, and whether a local Ollama answers (and with which models)",
        needs_root=False, parents=[common], description=__doc__.split("\n\n", 1)[1])
    p.add_argument("--ollama-url", metavar="URL", default=None,
                   help=f"where Ollama listens (default: OLLAMA_HOST, else {OLLAMA_DEFAULT})")
