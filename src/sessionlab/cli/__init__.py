"""The `sessionlab` command: the student's loop, the self-learner's chat, the instructor's grading.

Each group of commands lives in its own module and registers itself here; `main(argv)` parses
the arguments, finds the course when the command needs one, and returns the exit status.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

from .. import course, lazy_sdk
from .ui import Ui, make_ui, one_line_errors

GROUPS = [
    ("student", "Work through the lessons"),
    ("chat", "Talk to your agent, read its logs"),
    ("teacher", "Teach and maintain the course"),
    ("setup", "Check the machine"),
]

DESCRIPTION = """\
Session Lab: grow an in-memory agent loop, lesson by lesson, into one whose conversation
outlives its process: an append-only session log, resumed, forked, repaired, locked, with
large content beside it and undo on top.

With no command, `sessionlab` is `sessionlab watch`: it finds the current lesson (the first
one whose tests do not pass), runs its tests and shows what to do next, and runs them again
every time you save the lesson's agent.py."""


class Commands:
    """The subcommands, each with its group and one-line summary for the overview."""

    def __init__(self, subparsers) -> None:
        self.subparsers = subparsers
        self.listing: list[tuple[str, str, str]] = []

    def add(self, name: str, func: Callable[..., int], group: str, summary: str, *,
            needs_root: bool = True, parents=(), description: str | None = None,
            listed_as: str | None = None) -> argparse.ArgumentParser:
        parser = self.subparsers.add_parser(
            # No abbreviations: `--session x` must not quietly mean `--sessions x`.
            name, parents=list(parents), allow_abbrev=False,
            description=description or summary[:1].upper() + summary[1:] + ".",
            formatter_class=argparse.RawDescriptionHelpFormatter)
        parser.set_defaults(func=func, needs_root=needs_root)
        one_line_errors(parser)     # argparse's usage block would bury what was wrong
        self.listing.append((group, listed_as or name, summary))
        return parser

    def overview(self) -> str:
        lines = []
        width = max(len(name) for _, name, _ in self.listing) + 2
        for group, title in GROUPS:
            entries = [(name, summary) for g, name, summary in self.listing if g == group]
            if not entries:
                continue
            lines.append(f"{title}:")
            lines += [f"  {name.ljust(width)}{summary}" for name, summary in entries]
            lines.append("")
        lines.append("`sessionlab COMMAND --help` shows a command's options.")
        return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    from . import answer, chat, dev, doctor, grade, progress, see, show, study, watch

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--course", metavar="DIR", default=argparse.SUPPRESS,
                        help="the course folder (default: found from the current folder, or SESSIONLAB_ROOT)")
    parser = argparse.ArgumentParser(
        prog="sessionlab", description=DESCRIPTION, parents=[common], allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    one_line_errors(parser)
    from .. import __version__
    parser.add_argument("--version", action="version", version=f"sessionlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", help=argparse.SUPPRESS)
    commands = Commands(sub)
    watch.register(commands, common)
    progress.register(commands, common)
    study.register(commands, common)
    see.register(commands, common)
    answer.register(commands, common)
    chat.register(commands, common)
    show.register(commands, common)
    dev.register(commands, common)
    grade.register(commands, common)
    doctor.register(commands, common)
    parser.epilog = commands.overview()
    parser.set_defaults(func=watch.cmd_default, needs_root=True)
    return parser


class NoCourse(course.CourseError):
    """No course folder where the command looked: say how to get one."""


def course_source() -> str:
    """Where the course comes from, if the installed package says (its Project-URL)."""
    from importlib import metadata

    try:
        urls = metadata.metadata("sessionlab").get_all("Project-URL") or []
    except metadata.PackageNotFoundError:
        urls = []
    for entry in urls:
        label, _, url = entry.partition(",")
        if label.strip().lower() in ("repository", "source", "source code", "homepage"):
            return url.strip()
    return "the course's repository"


def course_hint(error: Exception) -> str | None:
    """The way forward for a course error: for a missing course, how to get a copy."""
    if not isinstance(error, NoCourse):
        return None
    return (f"to get a copy: `git clone` {course_source()}, then `pip install -e .` inside it and run "
            "sessionlab there (a plain `pip install .` installs the kit without the lessons)")


def find_course(args: argparse.Namespace) -> Path:
    given = getattr(args, "course", None)
    if given:
        root = Path(given).resolve()
        if not ((root / "lessons").is_dir() and (root / "solutions").is_dir()):
            raise NoCourse(f"{given}: not a course folder (it needs lessons/ and solutions/)")
        return root
    try:
        return course.find_root()
    except course.CourseError as error:
        raise NoCourse(str(error)) from None


def _passthrough(argv: list[str]) -> int | None:
    """`demo`, `dev check` and `dev mutate` parse their own options: hand them
    everything after their name."""
    rest = list(argv)
    course_dir = None
    if rest[:1] == ["--course"] and len(rest) > 1:
        course_dir, rest = rest[1], rest[2:]
    elif rest and rest[0].startswith("--course="):
        course_dir, rest = rest[0].split("=", 1)[1], rest[1:]
    if rest[:1] == ["demo"]:
        from .. import demo as target
        # The demo takes --course itself, and checks that it is a course, as every command does.
        rest = rest[1:] + (["--course", course_dir] if course_dir else [])
        course_dir = None
    elif rest[:2] == ["dev", "check"]:
        from .. import maintainers as target
        rest = rest[2:]
    elif rest[:2] == ["dev", "mutate"]:
        from .. import mutate as target
        rest = rest[2:]
    else:
        return None
    saved = os.environ.get("SESSIONLAB_ROOT")
    if course_dir:
        os.environ["SESSIONLAB_ROOT"] = str(Path(course_dir).resolve())
    try:
        return int(target.main(rest) or 0)
    except course.CourseError as error:
        make_ui().error(str(error), course_hint(error))
        return 2
    except KeyboardInterrupt:
        return 130
    finally:
        if course_dir:
            if saved is None:
                os.environ.pop("SESSIONLAB_ROOT", None)
            else:
                os.environ["SESSIONLAB_ROOT"] = saved


def closed_streams() -> list[int]:
    """The standard streams the command was started without (`<&-`, `>&-`), each given
    /dev/null in its place.

    Python leaves sys.stdin None then, and the first file the kit opens would take the
    number 0 and be read as the keyboard. On /dev/null, a closed input reads as its end
    (the chat ends, the watch takes no keys) and a closed error stream swallows what is
    said, as it would have anyway."""
    closed = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            closed.append(fd)
    for fd in closed:
        null = os.open(os.devnull, os.O_RDWR)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
    if 0 in closed:
        sys.stdin = open(0, encoding="utf-8", closefd=False)
    if 2 in closed:
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False)
    return closed


def hide_secrets(args: argparse.Namespace) -> None:
    """Passwords the command was given (in --store, --base-url, the environment's URLs)
    and API keys are never shown, whatever message quotes them (ui.redact)."""
    from . import ui as output

    for text in (getattr(args, "store", None), getattr(args, "base_url", None),
                 getattr(args, "ollama_url", None), os.environ.get("OPENAI_BASE_URL"),
                 os.environ.get("OLLAMA_HOST"), os.environ.get("DATABASE_URL")):
        output.keep_secret(text)
    for key in (getattr(args, "api_key", None), os.environ.get("OPENAI_API_KEY")):
        output.keep_key(key)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 success, 1 failure, 2 usage error)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if 1 in closed_streams():
        # Everything a command says goes there: exiting 0 having shown nothing would pass
        # for success in a script.
        make_ui().error("standard output is closed (>&-): nothing could be shown, so nothing "
                        "was run", "send the output somewhere: > FILE, or > /dev/null to drop it")
        return 2
    # chat, demo and show talk through the openai SDK: only its chat-completions parts
    # are imported (sessionlab.lazy_sdk), as in a lesson's run
    lazy_sdk.install()
    delegated = _passthrough(argv)
    if delegated is not None:
        return delegated
    parser = build_parser()
    args = parser.parse_args(argv)
    hide_secrets(args)
    ui = make_ui()
    try:
        root = find_course(args) if args.needs_root else None
        return int(args.func(args, ui, root) or 0)
    except course.CourseError as error:
        ui.error(str(error), course_hint(error))
        return 2
    except KeyboardInterrupt:
        ui.err.print()
        ui.note("interrupted")
        return 130


__all__ = ["main", "build_parser", "find_course", "course_hint", "course_source", "Ui"]
