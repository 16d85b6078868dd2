"""sessionlab see: the failure a lesson prevents, shown on the code of the lesson before.

`sessionlab see 05` runs two processes of lesson 04's agent on one session and shows the
history that comes out of it, then the task of lesson 05 that prevents it. Each lesson page
asks you to predict what happens first. The scenarios run in a throwaway folder on the
scripted model; lesson 11's needs PostgreSQL, as the lesson does.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.text import Text

from .. import course, failures
from .ui import Ui


def cmd_see(args: argparse.Namespace, ui: Ui, root: Path) -> int:
    if args.lesson is None:
        for number, shows in failures.SHOWS.items():
            ui.out.print(Text(f"  {number}  {shows}"), soft_wrap=True)
        ui.note("`sessionlab see NN` runs one: predict what happens, then see.")
        return 0
    lesson = course.lesson(args.lesson, root)
    try:
        transcript = failures.run(lesson.number, root)
    except failures.NeedsPostgres as error:
        ui.error(str(error))
        return 1
    except Exception as error:      # noqa: BLE001 - the reference code itself is broken
        before = course.lessons(root)[max(int(lesson.number) - 1, 0)]
        ui.error(f"the scenario of lesson {lesson.number} failed on "
                 f"solutions/{before.name}: {type(error).__name__}: {error}",
                 f"the scenario runs the reference code as the course ships it: `git diff "
                 f"solutions/{before.name}` shows what changed there")
        return 1
    ui.out.print(Text(transcript.rstrip("\n")), soft_wrap=True)
    ui.note(f"What it shows, as the page explains it: `sessionlab answer {lesson.number} "
            "saw`.")
    return 0


def register(commands, common: argparse.ArgumentParser) -> None:
    p = commands.add("see", cmd_see, "student",
                     "predict, then see: the failure a lesson prevents, on the code before it",
                     parents=[common], description=__doc__.split("\n\n", 1)[1])
    p.add_argument("lesson", nargs="?", metavar="NN",
                   help="the lesson, by number (5, 05) or folder (05_lock); none lists them")
