"""The stores the benchmark compares, each behind the same small adapter.

An adapter opens a writer (append one message at a time, close), loads a whole session,
forks one, and can build a large session quickly for the workloads that need one already
there (setup, never timed). A store that cannot do something says so in words
(`unsupported`), and the benchmark prints that instead of a number.

- subject   the final lesson's SessionLog and fork(), loaded from solutions/
- floor     the least a JSON-lines log can do: one open file, one write and flush a message
- naive     open, append, close for every message
- sqlite3   stdlib sqlite3, one row and one commit per message
- langchain LangChain's FileChatMessageHistory (optional, `pip install -e '.[bench]'`)
- agents    the OpenAI Agents SDK's SQLiteSession (optional, same extra)
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import time
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

Message = dict[str, Any]


def line(message: Message) -> str:
    return json.dumps(message, ensure_ascii=False) + "\n"


class Writer:
    """Appends messages to one session, one at a time."""

    def append(self, message: Message) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def append_each(self, messages: list[Message], times: list[int], start: int,
                    deadline: int | None) -> int:
        """Append `messages` one by one, storing each append's duration (ns) in
        times[start + k]. Stops early once the clock passes `deadline` (perf_counter_ns).
        Returns the index after the last message appended."""
        clock = time.perf_counter_ns
        append = self.append
        index = start
        for message in messages:
            begin = clock()
            append(message)
            end = clock()
            times[index] = end - begin
            index += 1
            if deadline is not None and end > deadline:
                break
        return index


ITEMS_LIMIT = 20       # get_items(limit=ITEMS_LIMIT): what an agent framework reads


class Store:
    key = ""
    label = ""
    role = "baseline"           # subject | floor | baseline | peer
    unsupported: dict[str, str] = {}   # workload -> why this store cannot run it
    notes: list[str] = []

    def available(self) -> str | None:
        """None when the store can run here, else why not."""
        return None

    def prepare(self, messages: list[Message]) -> Any:
        """Turn the workload into this store's own message type (untimed)."""
        return messages

    def writer(self, folder: Path, session_id: str, *, durable: bool = False) -> Writer:
        raise NotImplementedError

    def load(self, folder: Path, session_id: str) -> list[Any]:
        raise NotImplementedError

    def fork(self, folder: Path, source_id: str, new_id: str) -> None:
        raise NotImplementedError

    def build(self, folder: Path, session_id: str, messages: list[Any]) -> None:
        """Add `messages` to a session as fast as this store allows (setup, untimed)."""
        writer = self.writer(folder, session_id)
        try:
            for message in messages:
                writer.append(message)
        finally:
            writer.close()

    def forget(self, folder: Path, session_id: str) -> None:
        """Remove a session kept somewhere other than `<folder>/<session_id>.*` (untimed)."""

    def items_reader(self, folder: Path, session_id: str, items: list[Any]) -> Any:
        """For the "items" workload: store `items` (Agents SDK items) as the SDK's session
        `session_id` (untimed), and return an async function that calls its
        get_items(limit=ITEMS_LIMIT), and one that closes it. None: not a session store."""
        return None

    def describe(self) -> dict[str, Any]:
        return {"label": self.label, "role": self.role, "unsupported": dict(self.unsupported),
                "notes": list(self.notes)}


# --- the store under test ------------------------------------------------------------------


class Subject(Store):
    key = "subject"
    role = "subject"

    def __init__(self, module: ModuleType, lesson: str) -> None:
        self.module = module
        self.lesson = lesson
        self.label = f"SessionLog ({lesson})"
        self.unsupported = {}
        if not hasattr(module.SessionLog, "load"):
            self.unsupported["load"] = f"{lesson}'s SessionLog has no load() yet (lesson 02 adds it)"
        if not hasattr(module, "fork"):
            self.unsupported["fork"] = f"{lesson} has no fork() yet (lesson 03 adds it)"
        self.notes = [f"solutions/{lesson}/agent.py: SessionLog(folder, id, durable=...).append/.load/.close, fork()"]

    def writer(self, folder: Path, session_id: str, *, durable: bool = False) -> Writer:
        log = self.module.SessionLog(folder, session_id, durable=durable)
        writer = Writer()
        writer.append = log.append          # no wrapper call in the timed loop
        writer.close = log.close
        return writer

    def load(self, folder: Path, session_id: str) -> list[Any]:
        log = self.module.SessionLog(folder, session_id)
        try:
            return log.load()
        finally:
            log.close()

    def fork(self, folder: Path, source_id: str, new_id: str) -> None:
        self.module.fork(folder, source_id, new_id)

    def items_reader(self, folder: Path, session_id: str, items: list[Any]) -> Any:
        # The kit's adapter of the Agents SDK's session protocol, on this lesson's store
        if not (hasattr(self.module, "item_line") and hasattr(self.module.SessionLog, "load_last")):
            return None
        from sessionlab.adapters.agents_sdk import FileSession
        session = FileSession(session_id, folder, store=self.module)
        asyncio.run(session.add_items(items))
        return lambda: session.get_items(limit=ITEMS_LIMIT), session.close


# --- the floor and the naive version ------------------------------------------------------


class _FloorWriter(Writer):
    def __init__(self, path: Path, durable: bool) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(path, "a", encoding="utf-8")
        write, flush = self.file.write, self.file.flush
        # Two closures, so that the timed loop never tests `durable`.
        if durable:
            fileno, fsync = self.file.fileno(), os.fsync

            def append(message: Message) -> None:
                write(line(message))
                flush()
                fsync(fileno)
        else:
            def append(message: Message) -> None:
                write(line(message))
                flush()
        self.append = append   # type: ignore[method-assign]

    def close(self) -> None:
        self.file.close()


class Floor(Store):
    """The least a JSON-lines log can do; every other figure is a ratio to this one."""

    key = "floor"
    label = "floor"
    role = "floor"
    notes = ["one open file; per message: json.dumps, one write, flush (+ os.fsync when durable)",
             "load: json.loads per line; fork: shutil.copyfile"]

    def writer(self, folder: Path, session_id: str, *, durable: bool = False) -> Writer:
        return _FloorWriter(folder / f"{session_id}.jsonl", durable)

    def load(self, folder: Path, session_id: str) -> list[Any]:
        with open(folder / f"{session_id}.jsonl", encoding="utf-8") as file:
            return [json.loads(text) for text in file]

    def fork(self, folder: Path, source_id: str, new_id: str) -> None:
        shutil.copyfile(folder / f"{source_id}.jsonl", folder / f"{new_id}.jsonl")


class _NaiveWriter(Writer):
    def __init__(self, path: Path, durable: bool) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.durable = durable

    def append(self, message: Message) -> None:
        with open(self.path, "a", encoding="utf-8") as file:
            file.write(line(message))
            if self.durable:
                file.flush()
                os.fsync(file.fileno())


class Naive(Store):
    key = "naive"
    label = "naive"
    notes = ["per message: open, write one line, close (+ fsync when durable); load and fork as the floor"]

    def writer(self, folder: Path, session_id: str, *, durable: bool = False) -> Writer:
        return _NaiveWriter(folder / f"{session_id}.jsonl", durable)

    load = Floor.load
    fork = Floor.fork


# --- stdlib sqlite3 -------------------------------------------------------------------------

SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    session TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_session ON messages (session, id);
"""


def _connect(folder: Path, durable: bool) -> sqlite3.Connection:
    folder.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(folder / "sessions.sqlite3")
    db.execute("PRAGMA journal_mode=WAL")
    # NORMAL in WAL mode: a commit reaches the OS but is not fsynced, like the floor's flush.
    # FULL: every commit fsyncs the write-ahead log, like the floor plus fsync.
    db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
    db.executescript(SCHEMA)
    return db


class _SqliteWriter(Writer):
    def __init__(self, folder: Path, session_id: str, durable: bool) -> None:
        self.db = _connect(folder, durable)
        execute, commit = self.db.execute, self.db.commit
        sql = "INSERT INTO messages (session, body) VALUES (?, ?)"
        dumps = json.dumps

        def append(message: Message) -> None:
            execute(sql, (session_id, dumps(message, ensure_ascii=False)))
            commit()
        self.append = append   # type: ignore[method-assign]

    def close(self) -> None:
        self.db.close()


class Sqlite(Store):
    key = "sqlite3"
    label = "sqlite3"
    notes = ["one row and one commit per message, WAL; synchronous=NORMAL (no fsync), FULL when durable",
             "fork: INSERT ... SELECT the rows under the new id"]

    def writer(self, folder: Path, session_id: str, *, durable: bool = False) -> Writer:
        return _SqliteWriter(folder, session_id, durable)

    def load(self, folder: Path, session_id: str) -> list[Any]:
        db = _connect(folder, False)
        try:
            rows = db.execute("SELECT body FROM messages WHERE session = ? ORDER BY id", (session_id,))
            return [json.loads(body) for (body,) in rows]
        finally:
            db.close()

    def fork(self, folder: Path, source_id: str, new_id: str) -> None:
        db = _connect(folder, False)
        try:
            db.execute("INSERT INTO messages (session, body) "
                       "SELECT ?, body FROM messages WHERE session = ? ORDER BY id", (new_id, source_id))
            db.commit()
        finally:
            db.close()

    def forget(self, folder: Path, session_id: str) -> None:
        db = _connect(folder, False)
        try:
            db.execute("DELETE FROM messages WHERE session = ?", (session_id,))
            db.commit()
        finally:
            db.close()

    def build(self, folder: Path, session_id: str, messages: list[Any]) -> None:
        db = _connect(folder, False)
        try:
            db.executemany("INSERT INTO messages (session, body) VALUES (?, ?)",
                           ((session_id, json.dumps(m, ensure_ascii=False)) for m in messages))
            db.commit()
        finally:
            db.close()


# --- PostgreSQL: lesson 11's store ----------------------------------------------------------


class Postgres(Store):
    """Lesson 11's PostgresSessionLog on a throwaway server started for the run (fsync on,
    so that a durable commit costs what it costs in production), or SESSIONLAB_POSTGRES_URL.
    Each benchmark folder gets a schema of its own."""

    key = "postgres"
    label = "PostgresSessionLog (11_postgres)"
    notes = ["one row and one autocommit INSERT per message over a Unix socket; "
             "synchronous_commit off, on when durable (the commit waits for the WAL fsync)",
             "fork: one INSERT ... SELECT in a transaction; load reads `line` and replays"]

    def __init__(self) -> None:
        from sessionlab import course, pgserver
        self._pgserver = pgserver
        self._why = pgserver.why_not_available()
        self._server: Any = None
        self._url: str | None = None
        self._schemas: set[str] = set()
        root = Path(__file__).resolve().parents[1]
        path = root / "solutions" / "11_postgres" / "agent.py"
        self.module = course.load_module(path, "sessionlab_impl.bench_postgres") \
            if self._why is None else None

    def available(self) -> str | None:
        if self._why is None and self._url is None:
            try:
                self._url = os.environ.get(self._pgserver.URL_VARIABLE) or self._start()
            except self._pgserver.NoServer as error:
                self._why = str(error)
        return self._why

    def _start(self) -> str:
        import atexit
        self._server = self._pgserver.throwaway_cluster(fsync=True)
        url = self._server.__enter__()
        atexit.register(self._server.__exit__, None, None, None)
        return url

    def url(self, folder: Path) -> str:
        """The database URL for this folder's sessions: a schema per folder."""
        import hashlib
        import psycopg
        schema = "bench_" + hashlib.sha256(str(folder).encode()).hexdigest()[:12]
        if schema not in self._schemas:
            with psycopg.connect(self._url, autocommit=True) as connection:
                connection.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
            self._schemas.add(schema)
        return self._pgserver.with_schema(self._url, schema)

    def writer(self, folder: Path, session_id: str, *, durable: bool = False) -> Writer:
        log = self.module.PostgresSessionLog(self.url(folder), session_id, durable=durable)
        writer = Writer()
        writer.append = log.append          # no wrapper call in the timed loop
        writer.close = log.close
        return writer

    def load(self, folder: Path, session_id: str) -> list[Any]:
        with self.module.PostgresSessionLog(self.url(folder), session_id) as log:
            return log.load()

    def fork(self, folder: Path, source_id: str, new_id: str) -> None:
        self.module.fork_postgres(self.url(folder), source_id, new_id)

    def build(self, folder: Path, session_id: str, messages: list[Any]) -> None:
        # COPY the rows straight in: what the writer would have stored, in one go.
        module = self.module
        with module.connect(self.url(folder)) as connection:
            with connection.transaction():
                connection.execute("INSERT INTO sessions (id) VALUES (%s) "
                                   "ON CONFLICT (id) DO NOTHING", (session_id,))
                first = connection.execute(     # after the rows already there
                    "SELECT coalesce(max(seq) + 1, 0) FROM session_entries "
                    "WHERE session_id = %s", (session_id,)).fetchone()[0]
                with connection.cursor().copy(
                        "COPY session_entries (session_id, seq, line, body) "
                        "FROM STDIN") as copy:
                    for seq, message in enumerate(messages, start=first):
                        text = module.encode_line(message).decode("utf-8")[:-1]
                        copy.write_row((session_id, seq, text, module.jsonb_body(text)))

    def forget(self, folder: Path, session_id: str) -> None:
        with self.module.connect(self.url(folder)) as connection:
            connection.execute("DELETE FROM session_entries WHERE session_id = %s",
                               (session_id,))
            connection.execute("DELETE FROM sessions WHERE id = %s", (session_id,))


# --- optional peers -------------------------------------------------------------------------

EXTRA = "pip install -e '.[bench]'"


class LangChainFile(Store):
    """LangChain's FileChatMessageHistory: the whole history as one JSON array in one file."""

    key = "langchain"
    label = "LangChain FileChatMessageHistory"
    role = "peer"
    unsupported = {
        "fork": "no fork in its API",
        "durable": "no durable mode: each add_message rewrites the file, never fsyncs",
    }
    notes = ["each add_message reads, parses and rewrites the whole file",
             "messages converted to LangChain message objects before timing"]

    def __init__(self) -> None:
        self._cls = None
        self._why: str | None = None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")   # langchain-community warns that it is being sunset
                from langchain_community.chat_message_histories import FileChatMessageHistory
                from langchain_core import messages as lc
            self._cls, self._lc = FileChatMessageHistory, lc
        except Exception as error:  # ImportError, or a broken install
            self._why = f"not installed ({type(error).__name__}); {EXTRA}"

    def available(self) -> str | None:
        return self._why

    def prepare(self, messages: list[Message]) -> list[Any]:
        lc = self._lc
        out: list[Any] = []
        for m in messages:
            if m["role"] == "user":
                out.append(lc.HumanMessage(content=m["content"]))
            elif m["role"] == "tool":
                out.append(lc.ToolMessage(content=m["content"], tool_call_id=m["tool_call_id"]))
            else:
                calls = [{"name": c["function"]["name"], "args": json.loads(c["function"]["arguments"]),
                          "id": c["id"], "type": "tool_call"} for c in m.get("tool_calls") or ()]
                out.append(lc.AIMessage(content=m.get("content") or "", tool_calls=calls))
        return out

    def _history(self, folder: Path, session_id: str) -> Any:
        folder.mkdir(parents=True, exist_ok=True)
        return self._cls(str(folder / f"{session_id}.json"), encoding="utf-8")

    def writer(self, folder: Path, session_id: str, *, durable: bool = False) -> Writer:
        writer = Writer()
        writer.append = self._history(folder, session_id).add_message
        return writer

    def load(self, folder: Path, session_id: str) -> list[Any]:
        return self._history(folder, session_id).messages

    def build(self, folder: Path, session_id: str, messages: list[Any]) -> None:
        # Exactly the file add_message would leave, written once.
        history = self._history(folder, session_id)
        existing = self._lc.messages_to_dict(history.messages)
        existing.extend(self._lc.messages_to_dict(messages))
        history.file_path.write_text(json.dumps(existing), encoding="utf-8")


class _AgentsWriter(Writer):
    def __init__(self, session: Any, runner: asyncio.Runner) -> None:
        self.session = session
        self.runner = runner

    def append(self, message: Message) -> None:
        self.runner.run(self.session.add_items([message]))

    def append_each(self, messages: list[Message], times: list[int], start: int,
                    deadline: int | None) -> int:
        # The SDK is async: time each awaited add_items inside one running event loop,
        # as an agent would call it, rather than paying for a loop round trip per message.
        async def run() -> int:
            clock = time.perf_counter_ns
            add = self.session.add_items
            index = start
            for message in messages:
                begin = clock()
                await add([message])
                end = clock()
                times[index] = end - begin
                index += 1
                if deadline is not None and end > deadline:
                    break
            return index
        return self.runner.run(run())

    def close(self) -> None:
        self.session.close()
        self.runner.close()


class AgentsSQLite(Store):
    key = "agents"
    label = "Agents SDK SQLiteSession"
    role = "peer"
    unsupported = {}
    notes = ["async add_items([message]) per message, run in a worker thread; WAL with SQLite's "
             "default synchronous=FULL, so every commit fsyncs (its append is always durable)",
             "fork: no fork in its API; measured as get_items() then add_items() under the new id",
             "stores the OpenAI chat dicts as is (the SDK's own items are Responses API dicts)"]

    def __init__(self) -> None:
        self._cls = None
        self._why: str | None = None
        try:
            from agents import SQLiteSession
            self._cls = SQLiteSession
        except Exception as error:
            self._why = f"not installed ({type(error).__name__}); {EXTRA}"

    def available(self) -> str | None:
        return self._why

    def _open(self, folder: Path, session_id: str) -> tuple[Any, asyncio.Runner]:
        folder.mkdir(parents=True, exist_ok=True)
        return self._cls(session_id, folder / "agents.sqlite3"), asyncio.Runner()

    def writer(self, folder: Path, session_id: str, *, durable: bool = False) -> Writer:
        return _AgentsWriter(*self._open(folder, session_id))

    def load(self, folder: Path, session_id: str) -> list[Any]:
        session, runner = self._open(folder, session_id)
        try:
            return runner.run(session.get_items())
        finally:
            session.close()
            runner.close()

    def fork(self, folder: Path, source_id: str, new_id: str) -> None:
        source, runner = self._open(folder, source_id)
        target = self._cls(new_id, folder / "agents.sqlite3")
        try:
            items = runner.run(source.get_items())
            runner.run(target.add_items(items))
        finally:
            source.close()
            target.close()
            runner.close()

    def forget(self, folder: Path, session_id: str) -> None:
        session, runner = self._open(folder, session_id)
        try:
            runner.run(session.clear_session())
        finally:
            session.close()
            runner.close()

    def build(self, folder: Path, session_id: str, messages: list[Any]) -> None:
        session, runner = self._open(folder, session_id)
        try:
            runner.run(session.add_items(list(messages)))
        finally:
            session.close()
            runner.close()

    def items_reader(self, folder: Path, session_id: str, items: list[Any]) -> Any:
        session, runner = self._open(folder, session_id)
        runner.run(session.add_items(items))
        runner.close()
        return lambda: session.get_items(limit=ITEMS_LIMIT), session.close


def all_stores(subject: Store) -> list[Store]:
    return [Floor(), subject, Naive(), Sqlite(), Postgres(), LangChainFile(), AgentsSQLite()]
