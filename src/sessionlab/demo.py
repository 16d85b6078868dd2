"""`sessionlab demo`: the cave quest told end to end with a reference solution.

Day 1 runs in one process, day 2 in a new one that continues from the log, and a fork asks
"what if we had talked to the guard instead?". No model and no network are needed: the
built-in town model answers. The log files are left on disk to look at.

An earlier lesson plays what its code can: lesson 00 keeps no log (day 2 remembers nothing),
lesson 01 only appends (day 2 adds to the log but does not read it), lesson 02 cannot fork.
Outside a copy of the course, the demo plays the reference shipped with the kit.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from rich.panel import Panel
from rich.text import Text

from . import course, lazy_sdk
from .cli import files
from .cli.ui import Ui, make_ui

DEMO_SESSIONS = ("quest", "quest-guard")
# The reference a copy of the kit carries for the demo (package data: a link to the latest
# solution that can fork, followed when the package is built; a kit test keeps it current).
SHIPPED = Path(__file__).parent / "reference"

DAY_ONE = ("Ask the elder about the cave.",)
DAY_TWO = ("What did the elder tell us?", "Buy what the elder said we need.")
WHAT_IF = ("Ask the guard about the cave instead.",)


@dataclass
class Reference:
    """The reference solution the demo plays, and what its code can do."""
    path: Path
    name: str                 # its lesson folder, e.g. 07_undo
    module: ModuleType
    shipped: bool = False     # the kit's own copy: there is no course here

    @property
    def start(self) -> str:
        """How to start the course from here."""
        if self.shipped:
            from .cli import course_source
            return (f"To start the course, get a copy: git clone {course_source()}, then "
                    "pip install -e . inside it, and pytest lessons/00_memory there.")
        return "Start the course: pytest lessons/00_memory"

    @property
    def logs(self) -> bool:
        return hasattr(self.module, "SessionLog")

    @property
    def loads(self) -> bool:
        return self.logs and hasattr(self.module.SessionLog, "load")

    @property
    def forks(self) -> bool:
        return callable(getattr(self.module, "fork", None))


def latest_solution_with(root: Path, name: str) -> course.Lesson:
    """The highest-numbered lesson whose reference solution defines `name` (e.g. 'fork')."""
    for lesson in reversed(course.lessons(root)):
        if any(f"def {name}(" in path.read_text(encoding="utf-8")
               for path in course.lesson_modules(lesson.solution_folder)):
            return lesson
    raise course.CourseError(f"no reference solution defines {name}() yet")


def shipped_reference() -> Path | None:
    """The reference the installed kit carries, if it carries one."""
    found = sorted(SHIPPED.glob("[0-9][0-9]_*/" + course.MODULE)) if SHIPPED.is_dir() else []
    return found[-1] if found else None


def find_reference(args: argparse.Namespace, ui: Ui) -> Reference:
    """The lesson's reference from the course; outside a course, the one the kit ships."""
    from .cli import find_course

    try:
        root = find_course(args)
    except course.CourseError:
        shipped = shipped_reference()
        if shipped is None or args.lesson is not None or getattr(args, "course", None):
            raise
        name = shipped.parent.name
        ui.note(f"No course here: the demo plays the reference solutions/{name}/ shipped with the kit.")
        return Reference(shipped, name, course.load_module(shipped, f"sessionlab_demo.{name}"), shipped=True)
    lesson = course.lesson(args.lesson, root) if args.lesson is not None \
        else latest_solution_with(root, "fork")
    path = lesson.module_path("solution")
    try:
        module = course.load_module(path)
    except course.CourseError:
        raise
    except Exception as error:
        raise course.CourseError(f"{path} does not import: {type(error).__name__}: {error}") from None
    return Reference(path, lesson.name, module)


# --- one day, in its own process ---------------------------------------------------------------


def show_message(ui: Ui, message: dict[str, Any], tool: str | None = None) -> None:
    """One message, drawn as `sessionlab chat` and `sessionlab show` draw it (never read as markup)."""
    from .cli.show import hanging, message_rows

    for row in message_rows(message, tool=tool):
        ui.out.print(hanging(row, 8, ui))


def run_day(module_path: Path, folder: Path | None, session_id: str | None, texts: list[str]) -> int:
    """One day of the quest in this process: resume the session (if the lesson keeps one), say each text."""
    # The model (and with it openai and respx) is needed only here, in the child process of a day.
    from .cli.show import result_names
    from .town import Town
    from .town_model import town_model

    ui = make_ui()
    module: ModuleType = course.load_module(module_path)
    model = town_model()
    options = {"model": model.model, "tools": Town()}
    log = module.SessionLog(folder, session_id) if folder is not None and hasattr(module, "SessionLog") else None
    try:
        agent = module.Agent(model.client(), session=log, **options) if log else module.Agent(model.client(), **options)
        where = f"opened {log.path.name}: {len(agent.messages)} message(s) read back from disk" if log \
            else "keeps no log: it starts with an empty memory"
        ui.out.print(Text(f"process {os.getpid()} {where}", style="dim"))
        for text in texts:
            start = len(agent.messages)
            agent.run(text)
            names = result_names(agent.messages)
            for message, tool in zip(agent.messages[start:], names[start:]):
                show_message(ui, message, tool)
    except Exception as error:      # one line, then the parent says which day stopped
        ui.error(f"{module_path}: {type(error).__name__}: {error}")
        return 1
    finally:
        if log is not None and hasattr(log, "close"):
            log.close()
    first = model.requests[0]["messages"] if model.requests else []
    ui.out.print(Text(f"the first request of this process carried {len(first)} message(s)", style="dim"))
    return 0


class DayFailed(Exception):
    pass


def in_new_process(reference: Reference, folder: Path, session_id: str, texts: tuple[str, ...]) -> None:
    command = [sys.executable, "-m", "sessionlab.demo", "--one-day", "--module", str(reference.path),
               "--dir", str(folder), "--session", session_id]
    if not reference.logs:
        command.append("--in-memory")
    done = subprocess.run([*command, "--", *texts])
    if done.returncode != 0:
        raise DayFailed(f"the process of a day failed (exit status {done.returncode}); its error is above")


def step(reference: Reference, folder: Path, session_id: str, texts: tuple[str, ...]) -> None:
    """One day in its own process; then what it wrote is noted as the demo's own."""
    try:
        in_new_process(reference, folder, session_id, texts)
    finally:
        if reference.logs:
            record(folder)


def fork(reference: Reference, folder: Path, upto: int) -> None:
    """The what-if branch, with the lesson's own fork(), in this process."""
    try:
        reference.module.fork(folder, "quest", "quest-guard", upto=upto)
    except Exception as error:
        raise DayFailed(f"fork() raised {type(error).__name__}: {error}") from None


# --- the whole demo ----------------------------------------------------------------------------


# What the demo made in its folder, by name and hash, kept beside it: the demo removes a
# file of an earlier run only while it is still exactly what the demo wrote.
RECORD = ".sessionlab-demo.json"
SESSION_SUFFIXES = (".jsonl", ".meta.json", ".lock", ".town.json")


class NotOurs(Exception):
    """The demo's folder holds something the demo did not write: one line saying what."""


def _digest(path: Path) -> str | None:
    """sha256 of a regular file (never a link, a pipe or a folder); None for anything else."""
    try:
        return hashlib.sha256(files.read_bytes(path, follow=False)).hexdigest()
    except OSError:
        return None


def made_before(folder: Path) -> dict[str, str]:
    """The files an earlier run of the demo left here, name -> hash ({} when none)."""
    try:
        data = json.loads(files.read_bytes(folder / RECORD, 1 << 20, follow=False))
        made = data["files"]
        if isinstance(made, dict) and all(isinstance(v, str) for v in made.values()):
            return made
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return {}


def record(folder: Path) -> None:
    """Note what the demo has written in `folder` so far (temp file + rename)."""
    made = {path.name: digest for path in folder.iterdir()
            if path.name.split(".")[0] in DEMO_SESSIONS
            and (digest := _digest(path)) is not None}
    temp = folder / f".{RECORD}.{os.getpid()}.tmp"
    temp.write_text(json.dumps({"made_by": "sessionlab demo", "files": made}, indent=1),
                    encoding="utf-8")
    os.replace(temp, folder / RECORD)


def foreign(folder: Path) -> list[str]:
    """Sessions in `folder` that are not the demo's own output, unchanged: a session of
    the user's, a demo log a chat went on with, a lock a live chat holds."""
    made = made_before(folder)
    found = []
    for path in files.entries(folder):
        name = path.name
        ours = name in made and _digest(path) == made[name]
        session = name.endswith(SESSION_SUFFIXES) or name == "blobs" \
            or name.split(".")[0] in DEMO_SESSIONS
        if session and not ours:
            found.append(name)
    return found


def prepare(folder: Path, shown: str) -> None:
    """The demo's folder, writable, without the demo's own files of an earlier run.

    Nothing the demo did not write is removed or written over: a folder holding other
    sessions (the user's own `quest`, a demo log a chat went on with) is refused."""
    if folder.is_dir():
        theirs = foreign(folder)
        if theirs:
            listed = ", ".join(theirs[:4]) + (f" and {len(theirs) - 4} more" if len(theirs) > 4 else "")
            raise NotOurs(f"{shown} holds sessions the demo did not write ({listed}): the demo "
                          "removes nothing it did not make, so it stops here; pass --dir a new "
                          "folder (or move those files away)")
    for path in [*reversed(folder.parents), folder]:
        if not path.is_dir():
            path.mkdir(mode=0o700, exist_ok=True)     # session logs are their owner's only
    with tempfile.TemporaryFile(dir=folder):
        pass
    made = made_before(folder)
    for name, digest in made.items():   # start afresh, touching only the demo's own files
        path = folder / name
        if name.split(".")[0] in DEMO_SESSIONS and _digest(path) == digest:
            path.unlink()
    record(folder)


def heading(ui: Ui, title: str) -> None:
    if ui.plain:
        ui.out.print(f"\n== {title} ==", markup=False)
    else:
        ui.out.rule(title)


def tell(ui: Ui, reference: Reference, folder: Path, shown_dir: Path) -> int:
    intro = (f"The cave quest, played by solutions/{reference.name}/ with the built-in town model.\n"
             "Each day runs in its own process: only the session log carries the story across.")
    ui.out.print(intro if ui.plain else Panel.fit(intro, title="Session Lab demo"), markup=False)
    number = reference.name[:2]
    heading(ui, "Day 1")
    step(reference, folder, "quest", DAY_ONE)
    if not reference.logs:
        heading(ui, "Day 2: a new process, and nothing carried across")
        ui.note(f"lesson {number} keeps the conversation in memory only: day 2 starts with nothing "
                "(lesson 01 adds the log, lesson 02 reads it back)")
        step(reference, folder, "quest", DAY_TWO)
        ui.note(f"the fork is skipped: lesson {number} has no session to fork (lesson 03 adds fork())")
        ui.out.print("\n" + reference.start, markup=False)
        return 0
    day_one = count_lines(folder / "quest.jsonl")
    heading(ui, "Day 2: a new process continues the same session")
    if not reference.loads:
        ui.note(f"lesson {number} only appends: day 2 adds to the log but does not read it back (lesson 02 does)")
    step(reference, folder, "quest", DAY_TWO)
    if reference.forks:
        heading(ui, f"A fork: back to the end of day 1 ({day_one} messages), then the guard instead")
        try:
            fork(reference, folder, day_one)
        finally:
            record(folder)
        step(reference, folder, "quest-guard", WHAT_IF)
    else:
        ui.note(f"the fork is skipped: lesson {number}'s code cannot fork (lesson 03 adds fork())")
    left_on_disk(ui, folder)
    ui.out.print(f"\nLook inside: head -3 {shown_dir / 'quest.jsonl'}, or sessionlab show --sessions {shown_dir}. "
                 + reference.start, markup=False)
    return 0


def count_lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def left_on_disk(ui: Ui, folder: Path) -> None:
    heading(ui, "What is left on disk")
    table = ui.table()
    for column in ("file", "bytes", "lines", "what it is"):
        table.add_column(column)
    for path in sorted(folder.iterdir()):
        if path.is_file() and path.name.split(".")[0] in DEMO_SESSIONS:
            kind = ("lineage of a fork" if path.name.endswith(".meta.json")
                    else "lock file" if path.suffix == ".lock" else "session log, one JSON message per line")
            shown = path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path
            table.add_row(str(shown), str(path.stat().st_size),
                          str(count_lines(path)) if path.suffix == ".jsonl" else "", kind)
    ui.out.print(table)
    meta = folder / "quest-guard.meta.json"
    if meta.exists():
        ui.out.print(f"quest-guard.meta.json: {json.loads(meta.read_text(encoding='utf-8'))}", markup=False)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="sessionlab demo", description=__doc__, allow_abbrev=False,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default="demo-sessions",
                        help="folder for the demo's session logs (default: ./demo-sessions)")
    parser.add_argument("--lesson", help="use this lesson's reference solution (default: the latest that can fork)")
    parser.add_argument("--course", metavar="DIR", default=argparse.SUPPRESS,
                        help="the course folder (default: found from the current folder, or SESSIONLAB_ROOT)")
    parser.add_argument("--one-day", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--module", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--session", help=argparse.SUPPRESS)
    parser.add_argument("--in-memory", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("texts", nargs="*", help=argparse.SUPPRESS)
    from .cli.ui import one_line_errors
    return one_line_errors(parser).parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    lazy_sdk.install()      # a day's process, too, imports only what a chat completion needs
    args = parse(argv)
    if args.one_day:   # the child process of one day
        return run_day(args.module, None if args.in_memory else Path(args.dir), args.session,
                       args.texts)
    ui = make_ui()
    if not str(args.dir).strip():
        # Path("") is the current folder: the demo would write into the course itself.
        ui.error("--dir is empty: name a folder of its own for the demo's logs "
                 "(the default is demo-sessions)")
        return 2
    args.dir = Path(args.dir)
    try:
        reference = find_reference(args, ui)
    except course.CourseError as error:
        from .cli import course_hint
        ui.error(str(error), course_hint(error))
        return 2
    folder = args.dir.resolve()
    if reference.logs:
        try:
            prepare(folder, str(args.dir))
        except NotOurs as refused:
            ui.error(str(refused))
            return 2
        except OSError as error:
            ui.error(f"cannot write the demo's logs in {args.dir}: {error.strerror or error}",
                     "--dir DIR names a folder you can write to")
            return 1
    try:
        return tell(ui, reference, folder, args.dir)
    except DayFailed as failed:
        ui.error(f"the demo stopped: {failed}")
        return 1
    except OSError as error:
        ui.error(f"the demo stopped: {error.strerror or error} ({getattr(error, 'filename', '') or args.dir})")
        return 1


if __name__ == "__main__":
    sys.exit(main())
