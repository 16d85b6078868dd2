"""Sessions in PostgreSQL (lesson 11) for `sessionlab chat --store URL` and
`sessionlab show --store URL`.

chat runs the lesson's own PostgresSessionLog and fork_postgres, as it runs SessionLog and
fork on files. show reads the tables directly, never through lesson code, as it reads
files: each row's `line` is a line of the file format, so the file's drawing serves both.
psycopg is imported only here, and only when --store is given.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from rich.text import Text

from . import show, world
from .ui import Ui


def describe(url: str) -> str:
    """The database, named for a message: no user part, no password, no query string.
    The user part ends at the last "@" (a password may hold an unencoded "@", "/" or
    "?"); a key/value string keeps its keys, its password hidden."""
    from .ui import redact

    scheme, found, rest = url.partition("://")
    if not found:
        return redact(url)
    return redact(f"{scheme}://{rest.rsplit('@', 1)[-1].split('?')[0]}")


UNREACHABLE_HINT = "is the server running, and is the URL right (postgresql://user@host/db)?"


def first_line(error: BaseException) -> str:
    """What a driver's error says, in one line (its class name when it says nothing)."""
    said = str(error).strip()
    return said.splitlines()[0] if said else type(error).__name__


def _driver() -> Any:
    try:
        import psycopg
    except ImportError:
        raise StoreError("--store needs PostgreSQL's driver, psycopg 3",
                         "pip install -e '.[postgres]'") from None
    return psycopg


class StoreError(Exception):
    """Said to the user in one line (and a hint), like the chat's own errors."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


# --- chat ------------------------------------------------------------------------------


def open_session(args: argparse.Namespace, ui: Ui, module: ModuleType, lesson: Any,
                 agent_class: type, choice: Any, options: dict[str, Any],
                 folder: Path) -> Any:
    """The chat's agent on a session kept in the database at args.store (new, resumed or
    forked). The town, which is the world and not the session, stays in `folder`."""
    from .chat import ChatError, Opened, make_sessions_folder, new_session_id, saved_town

    if not hasattr(module, "PostgresSessionLog"):
        raise ChatError(f"--store keeps the session in PostgreSQL, and lesson "
                        f"{lesson.number}'s code keeps it in files",
                        "use --lesson 11 (or later), whose PostgresSessionLog does")
    where = describe(args.store)
    psycopg = _driver_for_chat(ChatError)
    log = None
    try:
        session_id = args.session or new_session_id()
        if args.fork_from:
            module.fork_postgres(args.store, args.fork_from, session_id, upto=args.at)
            at = f" at message {args.at}" if args.at is not None else ""
            ui.out.print(Text(f"forked {args.fork_from}{at} into {session_id}",
                              style="bold"))
        elif args.at is not None:
            raise ChatError("--at needs --fork-from: it says where to cut the session "
                            "you fork")
        make_sessions_folder(folder)
        if args.fork_from:
            # History is copied, the world is not refunded: the fork keeps the gold left
            world.copy_town(folder, args.fork_from, session_id)
        town, _ = saved_town(ui, folder, session_id)
        log = module.PostgresSessionLog(args.store, session_id)
        agent = agent_class(choice.client, session=log, tools=town, **options)
    except ChatError:
        _close(log)
        raise
    except world.TownFileError as error:
        _close(log)
        raise ChatError(str(error), "move that file away to start the fork's town "
                        "afresh") from None
    except psycopg.OperationalError as error:
        _close(log)
        raise ChatError(f"cannot reach the database {where}: {first_line(error)}",
                        UNREACHABLE_HINT) from None
    except psycopg.Error as error:    # a URL the driver cannot read, a query it refuses
        _close(log)
        raise ChatError(f"cannot use the database {where}: {first_line(error)}",
                        UNREACHABLE_HINT) from None
    except Exception as error:      # the lesson's own refusals: busy, exists, not found
        _close(log)
        raise ChatError(f"{type(error).__name__}: {error}") from None
    loaded = len(agent.messages)
    state = f"{loaded} message(s) read back" if loaded else "new"
    ui.out.print(Text(f"session {session_id}: in {where} ({state})", style="dim"))
    if getattr(log, "repaired", None):
        ui.out.print(Text("the session was repaired on resume: `sessionlab show "
                          f"{session_id} --store URL` marks what was added",
                          style="yellow"))
    return Opened(agent, log=log, session_id=session_id)


def _driver_for_chat(error_class: type) -> Any:
    try:
        return _driver()
    except StoreError as error:
        raise error_class(str(error), error.hint) from None


def _close(log: Any) -> None:
    if log is not None:
        log.close()


def say_where_saved(args: argparse.Namespace, ui: Ui, lesson: Any, side: str,
                    session_id: str) -> None:
    resume = (f"sessionlab chat {session_id} --lesson {lesson.number} --store URL"
              + (" --solution" if side == "solution" else ""))
    ui.out.print(Text(f"kept in {describe(args.store)}. Continue with: {resume}",
                      style="dim"))


# --- show ------------------------------------------------------------------------------


@dataclass
class DatabaseLog(show.Log):
    """A session read from the tables, drawn as show draws a file's log."""

    session_id: str = ""

    @property
    def id(self) -> str:
        return self.session_id

    @property
    def folder(self) -> Path | None:      # type: ignore[override]
        return None     # blobs live in session_blobs: no blobs/ folder to look in


def cmd_show_store(args: argparse.Namespace, ui: Ui) -> int:
    """`sessionlab show --store URL [SESSION]`: one session, or every session as a list."""
    try:
        psycopg = _driver()
        where = describe(args.store)
        try:
            with psycopg.connect(args.store) as connection:
                if args.target is None:
                    return _list(connection, where, ui)
                return _one(connection, args, where, ui)
        except psycopg.errors.UndefinedTable:
            ui.error(f"{where} holds no sessions yet (no sessions table)",
                     "`sessionlab chat --lesson 11 --store URL` makes them")
            return 1
        except psycopg.Error as error:
            ui.error(f"cannot read sessions from {where}: {first_line(error)}",
                     UNREACHABLE_HINT)
            return 1
    except StoreError as error:
        ui.error(str(error), error.hint)
        return 1


def _list(connection: Any, where: str, ui: Ui) -> int:
    found = connection.execute(
        "SELECT s.id, s.parent, s.forked_at, count(e.seq) FROM sessions s "
        "LEFT JOIN session_entries e ON e.session_id = s.id "
        "GROUP BY s.id, s.parent, s.forked_at ORDER BY s.id").fetchall()
    if not found:
        ui.out.print(Text(f"{where}: no sessions here yet."))
        return 0
    ui.out.print(Text(where, style="bold"))
    for session_id, parent, forked_at, rows in found:
        line = Text(f"  {show.visible(session_id, lines=False)}")
        line.append(f"   {rows} row(s)", style="dim")
        if parent:
            line.append(f" · forked from {show.visible(parent, lines=False)} at message "
                        f"{forked_at}", style="dim")
        ui.out.print(line)
    ui.out.print(Text("`sessionlab show ID --store URL` shows one session.", style="dim"))
    return 0


def _one(connection: Any, args: argparse.Namespace, where: str, ui: Ui) -> int:
    session = connection.execute(
        "SELECT parent, forked_at, created FROM sessions WHERE id = %s",
        (args.target,)).fetchone()
    if session is None:
        ui.error(f"no session {show.visible(args.target, lines=False)!r} in {where}",
                 "`sessionlab show --store URL` lists the sessions there")
        return 1
    rows = connection.execute(
        "SELECT seq, line FROM session_entries WHERE session_id = %s ORDER BY seq",
        (args.target,)).fetchall()
    # A row is a whole line, numbered as its seq (from 0) + 1: none is ever torn
    lines = [(seq + 1, line.encode("utf-8")) for seq, line in rows]
    log = DatabaseLog(path=Path(args.target), session_id=args.target,
                      size=sum(len(raw) + 1 for _, raw in lines))
    log.entries = show.parse_entries(lines, torn_last=False)
    parent, forked_at, created = session
    log.meta = {"parent": parent, "forked_at": forked_at,
                "created": created.isoformat(timespec="seconds")}
    ui.out.print(Text(f"in {where}", style="dim"))
    ui.out.print(show.render_log(log, ui, limit=None if args.full else show.PREVIEW))
    return 0
