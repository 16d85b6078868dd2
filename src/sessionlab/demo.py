"""`sessionlab demo`: the cave quest told end to end with a reference solution.

Day 1 runs in one process, day 2 in a new one that continues from the log, and a fork asks
"what if we had talked to the guard instead?". No model and no network are needed: the
built-in town model answers. The log files are left on disk to look at.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from . import course

DEMO_SESSIONS = ("quest", "quest-guard")
console = Console(highlight=False)


def latest_solution_with(root: Path, name: str) -> course.Lesson:
    """The highest-numbered lesson whose reference solution defines `name` (e.g. 'fork')."""
    for lesson in reversed(course.lessons(root)):
        path = lesson.module_path("solution")
        if path.is_file() and f"def {name}(" in path.read_text(encoding="utf-8"):
            return lesson
    raise course.CourseError(f"no reference solution defines {name}() yet")


def show_message(message: dict[str, Any], tool: str | None = None) -> None:
    """One message, drawn as `sessionlab chat` and `sessionlab show` draw it (never read as markup)."""
    from .cli.show import message_rows

    for row in message_rows(message, tool=tool):
        console.print(row)


def run_day(module_path: Path, folder: Path, session_id: str, texts: list[str]) -> None:
    """One day of the quest in this process: resume the session and say each text."""
    # The model (and with it openai and respx) is needed only here, in the child process of a day.
    from .cli.show import result_names
    from .town import Town
    from .town_model import town_model

    module: ModuleType = course.load_module(module_path)
    model = town_model()
    with module.SessionLog(folder, session_id) as log:
        agent = module.Agent(model.client(), model=model.model, tools=Town(), session=log)
        console.print(f"[dim]process {os.getpid()} opened {log.path.name}: "
                      f"{len(agent.messages)} message(s) read back from disk[/]")
        for text in texts:
            start = len(agent.messages)
            agent.run(text)
            names = result_names(agent.messages)
            for message, tool in zip(agent.messages[start:], names[start:]):
                show_message(message, tool)
    first = model.requests[0]["messages"] if model.requests else []
    console.print(f"[dim]the first request of this process carried {len(first)} message(s)[/]")


def _in_new_process(module_path: Path, folder: Path, session_id: str, *texts: str) -> None:
    command = [sys.executable, "-m", "sessionlab.demo", "--one-day", "--module", str(module_path),
               "--dir", str(folder), "--session", session_id, *texts]
    subprocess.run(command, check=True)


def _count_lines(path: Path) -> int:
    return path.read_bytes().count(b"\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sessionlab demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=Path("demo-sessions"),
                        help="folder for the demo's session logs (default: ./demo-sessions)")
    parser.add_argument("--lesson", help="use this lesson's reference solution (default: the latest that can fork)")
    parser.add_argument("--one-day", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--module", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--session", help=argparse.SUPPRESS)
    parser.add_argument("texts", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.one_day:   # the child process of one day
        run_day(args.module, args.dir, args.session, args.texts)
        return 0

    try:
        root = course.find_root()
        lesson = course.lesson(args.lesson, root) if args.lesson else latest_solution_with(root, "fork")
    except course.CourseError as error:
        console.print(f"[red]error:[/] {error}")
        return 2
    module_path = lesson.module_path("solution")
    folder = args.dir.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    for session_id in DEMO_SESSIONS:   # start afresh, touching only the demo's own files
        for suffix in (".jsonl", ".meta.json", ".lock"):
            (folder / f"{session_id}{suffix}").unlink(missing_ok=True)

    console.print(Panel.fit(
        f"The cave quest, played by [bold]solutions/{lesson.name}/agent.py[/] with the built-in town model.\n"
        "Each day runs in its own process: only the session log carries the story across.",
        title="Session Lab demo"))

    console.rule("Day 1")
    _in_new_process(module_path, folder, "quest", "Ask the elder about the cave.")
    day_one = _count_lines(folder / "quest.jsonl")

    console.rule("Day 2: a new process continues the same session")
    _in_new_process(module_path, folder, "quest",
                    "What did the elder tell us?", "Buy what the elder said we need.")

    console.rule(f"A fork: back to the end of day 1 ({day_one} messages), then the guard instead")
    module = course.load_module(module_path)
    module.fork(folder, "quest", "quest-guard", upto=day_one)
    _in_new_process(module_path, folder, "quest-guard", "Ask the guard about the cave instead.")

    console.rule("What is left on disk")
    table = Table("file", "bytes", "lines", "what it is")
    for path in sorted(folder.iterdir()):
        if path.is_file() and path.name.split(".")[0] in DEMO_SESSIONS:
            kind = ("lineage of a fork" if path.name.endswith(".meta.json")
                    else "lock file" if path.suffix == ".lock" else "session log, one JSON message per line")
            table.add_row(str(path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path),
                          str(path.stat().st_size), str(_count_lines(path)) if path.suffix == ".jsonl" else "", kind)
    console.print(table)
    meta = folder / "quest-guard.meta.json"
    if meta.exists():
        console.print("quest-guard.meta.json:", json.loads(meta.read_text(encoding="utf-8")))
    console.print(f"\nLook inside: [bold]head -3 {args.dir / 'quest.jsonl'}[/]. "
                  "Start the course: [bold]pytest lessons/00_memory[/].")
    return 0


if __name__ == "__main__":
    sys.exit(main())
