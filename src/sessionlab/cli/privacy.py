"""Lesson 09's chat commands: `/erase N` and `/delete`, each confirmed before it acts.

They call the lesson's own code (Agent.erase, delete_session), so a student's lesson 09
runs them as written. Each says in one line what it cannot reach: the model provider
saw every request, and forks and backups are copies of their own.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rich.text import Text

from . import world
from .ui import Ui

COMMANDS = ("erase", "delete")
def not_reached(verb: str) -> str:
    """What /erase or /delete cannot reach; `verb` is what to do to the forks too."""
    return ("Not reached: the model provider's copy of what was sent, this session's "
            f"forks ({verb} them too), and backups.")


NOT_REACHED = not_reached("erase")


def help_lines(agent: Any) -> str:
    """The /help lines for the commands this lesson's agent can run."""
    text = ""
    if not in_files(agent):
        return text
    if hasattr(agent, "erase"):
        text += "/erase N  erase message N (as /history numbers it) for good\n"
    if lesson_function(agent, "delete_session") is not None:
        text += "/delete   delete this session (log, meta file, blobs only it used) and end\n"
    return text


def lesson_function(agent: Any, name: str) -> Any:
    """A function of the lesson the agent's class comes from, or None: a name of its
    modules, or of the lesson package that holds them all (course.load_module)."""
    for klass in type(agent).__mro__:
        module_name = klass.__module__
        for name_of in (module_name, module_name.rpartition(".")[0]):
            found = getattr(sys.modules.get(name_of), name, None)
            if callable(found):
                return found
    return None


def confirm(ui: Ui, question: str) -> bool:
    """Ask a yes/no question; only "y" or "yes" is a yes (end of input is a no)."""
    if sys.stdin.isatty():
        try:
            answer = ui.out.input(Text(f"{question} [y/N] ", style="bold yellow"))
        except (EOFError, KeyboardInterrupt):
            answer = ""
    else:
        ui.out.print(f"{question} [y/N]", markup=False)
        answer = sys.stdin.readline()
    return answer.strip().lower() in ("y", "yes")


def in_files(agent: Any) -> bool:
    """Whether the agent's session is a log in the sessions folder (lessons 01 to 10),
    the only kind /erase and /delete know: not one in PostgreSQL (lesson 11's --store)."""
    return getattr(getattr(agent, "session", None), "path", None) is not None


def command(word: str, rest: str, agent: Any, ui: Ui, session_id: str | None,
            folder: Path) -> str | None:
    """Run /erase or /delete; "quit" when the chat must end (its session is gone)."""
    if not in_files(agent):
        # Never the file of the same name in the sessions folder: that is another session
        ui.error(f"/{word} works on sessions kept in files; this chat's session is not "
                 "one, so nothing was changed",
                 "for a session in PostgreSQL, delete its rows with SQL (lesson 11's page)")
        return None
    if word == "erase":
        erase(rest, agent, ui)
        return None
    return delete(agent, ui, session_id, folder)


def erase(rest: str, agent: Any, ui: Ui) -> None:
    if not hasattr(agent, "erase"):
        ui.error("this lesson's agent cannot erase a message",
                 "erase arrives in lesson 09: --lesson 09")
        return
    text = rest.strip()
    if not (text.isascii() and text.isdigit()) or int(text) >= len(agent.messages):
        ui.error(f"/erase takes the number of a message, 0 to {len(agent.messages) - 1}, "
                 f"as /history shows it; {text!r} is not one, so nothing was erased",
                 "/history, then /erase 2")
        return
    position = int(text)
    message = agent.messages[position]
    preview = str(message.get("content") or "")[:60].replace("\n", " ")
    if not confirm(ui, f"erase message {position} ({message.get('role')}: {preview!r}) "
                       "from the log for good?"):
        ui.out.print("nothing was erased")
        return
    try:
        agent.erase(position)
    except Exception as error:
        # EraseIncomplete: the log is erased, and the error names each place that
        # still holds the words (a busy side-chain, a file that could not be read)
        ui.error(f"{type(error).__name__}: {error}",
                 "the message is gone from memory; deal with each place named above "
                 "(close its other writer and erase again, or delete the session)"
                 if getattr(error, "unreached", None) else None)
        return
    ui.out.print(f"erased message {position}: its line now holds a tombstone, and the "
                 "lines and blobs that quoted it were rewritten.", markup=False)
    ui.out.print(Text(NOT_REACHED, style="yellow"))


def delete(agent: Any, ui: Ui, session_id: str | None, folder: Path) -> str | None:
    delete_session = lesson_function(agent, "delete_session")
    if delete_session is None or session_id is None:
        ui.error("this lesson's agent cannot delete a session",
                 "delete arrives in lesson 09: --lesson 09")
        return None
    if not confirm(ui, f"delete session {session_id!r} for good and end the chat?"):
        ui.out.print("nothing was deleted")
        return None
    # The chat is the session's writer: it lets go first, or the delete finds it busy.
    agent.flush()
    agent.session.close()
    try:
        deleted = delete_session(folder, session_id)
    except Exception as error:
        ui.error(f"{type(error).__name__}: {error}",
                 "what is left of the session stays where it was; run /delete again "
                 "(or `delete_session`) once its other writer is done: it finishes")
        return "quit"
    if not deleted:
        ui.out.print(f"nothing was deleted: session {session_id!r} has no files in "
                     f"{folder}", markup=False)
        return "quit"
    world.town_path(folder, session_id).unlink(missing_ok=True)
    agent.deleted = True    # so the chat does not end with "saved in ..."
    ui.out.print(f"deleted session {session_id!r}: its log, meta file, lock and the "
                 "blobs only it used.", markup=False)
    ui.out.print(Text(not_reached("delete"), style="yellow"))
    return "quit"
