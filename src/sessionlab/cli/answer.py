"""sessionlab answer: the answers a lesson's page folds away, read in a terminal.

A lesson's page asks questions and folds their answers away: what `sessionlab see NN`
showed, and questions a task answers ("task 08.2's question: open once it passes"). The
site opens a fold with a click; the page's source, read in a terminal, holds only the
directive that fills it. `sessionlab answer 08` lists the page's questions and whether
each is open; `sessionlab answer 08 role` prints one. A question that names its task opens
once that task's tests pass, as the page asks (`--force` opens it anyway); the others are
open, and a question is worth a guess of your own before you read its answer.
"""

from __future__ import annotations

import argparse
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from rich.markdown import Markdown
from rich.text import Text

from .. import course
from ..course import Lesson
from . import files
from .progress import add_run_options, run_lessons, runner_for
from .study import Refused, refusing
from .ui import Ui

FOLD = re.compile(r'^\?\?\?\+? \w+ "(?P<title>[^"]*)"')
ANSWER = re.compile(r'\{\{\s*answer\(\s*"(?P<lesson>[^"]+)"\s*,\s*"(?P<key>[^"]+)"\s*\)\s*\}\}')
SITE_LINK = re.compile(r"\[([^\]]+)\]\((?![a-z]+:)[^)]*\)")     # [words](#place)
TASK = re.compile(r"\s*\(task (?P<task>\d\d\.\d+)'s question[^)]*\)")


@dataclass(frozen=True)
class Question:
    key: str            # its key in answers.toml, as the page names it
    title: str          # the fold's title on the page
    task: str | None    # the task whose tests must pass before it opens, if it names one
    answer: str         # Markdown


def questions(lesson: Lesson, root: Path) -> list[Question]:
    """The questions lesson's page folds an answer under, in the page's order."""
    page = root / "docs" / "lessons" / f"{lesson.name}.md"
    source = Path("solutions") / lesson.name / course.ANSWERS
    try:
        text = files.read_bytes(page).decode("utf-8")
        answers = tomllib.loads(files.read_bytes(root / source).decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise Refused(f"lesson {lesson.number}'s questions cannot be read: {error}",
                      "the page is docs/lessons/NN_topic.md, the answers "
                      f"{source}: a copy of the course should hold both",
                      status=1) from None
    found: list[Question] = []
    title = ""
    for line in text.splitlines():
        if fold := FOLD.match(line):
            title = fold["title"]
        directive = ANSWER.search(line)
        if directive is None or directive["lesson"] != lesson.name:
            continue
        key = directive["key"]
        shown = (f"What `sessionlab see {lesson.number}` showed (run it, and predict "
                 "first)" if key == "saw" else title)
        task = TASK.search(shown)     # "(task 08.2's question: open once it passes)"
        found.append(Question(key, TASK.sub("", shown), task["task"] if task else None,
                              str(answers.get(key, "")).strip()))
    return found


@refusing
def cmd_answer(args: argparse.Namespace, ui: Ui, root: Path) -> int:
    lesson = course.lesson(args.lesson, root)
    asked = questions(lesson, root)
    if not asked:
        raise Refused(f"lesson {lesson.number}'s page folds no answer away", status=1)
    states = task_states(ui, args, root, lesson, asked) if not args.force else {}
    if args.key is None:
        ui.out.print(Text(f"Lesson {lesson.number}'s questions, as its page asks them:",
                          style="bold"))
        for question in asked:
            line = Text(f"  {question.key:<20} ", style="bold")
            line.append(question.title)
            if question.task:
                opens = ("" if args.force or states.get(question.task) == "passed"
                         else ": opens once it passes")
                line.append(f"  (task {question.task}'s question{opens})", style="dim")
            ui.out.print(line, soft_wrap=True)
        ui.note(f"`sessionlab answer {lesson.number} KEY` prints one. A question the page "
                "asks with no answer folded under it is answered by its task's tests, "
                f"and by its hints (`sessionlab hint --task {lesson.number}.K`).")
        return 0
    question = next((q for q in asked if q.key == args.key), None)
    if question is None:
        keys = ", ".join(q.key for q in asked)
        raise Refused(f"lesson {lesson.number}'s page asks no question {args.key!r}",
                      f"its questions: {keys}")
    if question.task and not args.force and states.get(question.task) != "passed":
        raise Refused(
            f"task {question.task} does not pass yet: this answer stays folded until "
            "you have one of your own, as the page asks",
            f"`sessionlab task {question.task}` restates the task; `sessionlab answer "
            f"{lesson.number} {question.key} --force` shows it anyway", status=1)
    ui.out.print(Text(question.title, style="bold"), soft_wrap=True)
    if ui.plain:
        # A link to a place on the site leads nowhere here: its words are kept
        ui.out.print(SITE_LINK.sub(r"\1", question.answer), markup=False,
                     highlight=False, soft_wrap=True)
    else:
        ui.out.print(Markdown(question.answer))
    return 0


def task_states(ui: Ui, args: argparse.Namespace, root: Path, lesson: Lesson,
                asked: list[Question]) -> dict[str, str]:
    """The state of each task the questions shown wait for (the one asked for, with a
    KEY), from the lesson's tests: run only when a question shown waits for one."""
    shown = [question for question in asked if args.key in (None, question.key)]
    tasks = {question.task for question in shown if question.task}
    if not tasks:
        return {}
    result = run_lessons(ui, runner_for(args, root), [lesson])[lesson.name]
    return {task: result.task_state(task) for task in tasks}


def register(commands, common: argparse.ArgumentParser) -> None:
    p = commands.add("answer", cmd_answer, "student",
                     "the answers a lesson's page folds away (a task's once it passes)",
                     parents=[common], description=__doc__.split("\n\n", 1)[1])
    p.add_argument("lesson", metavar="NN",
                   help="the lesson, by number (8, 08) or folder (08_compact)")
    p.add_argument("key", nargs="?", metavar="KEY",
                   help="the question, by the key the list shows (none lists them)")
    p.add_argument("--force", action="store_true",
                   help="open an answer whose task does not pass yet")
    add_run_options(p, solution=False)
