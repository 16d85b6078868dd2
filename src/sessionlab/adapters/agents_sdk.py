"""The OpenAI Agents SDK's session protocol on the course's file store.

    from agents import Agent, Runner
    from sessionlab.adapters.agents_sdk import FileSession

    session = FileSession("quest-1", "sessions")
    result = await Runner.run(agent, "Ask the elder about the cave.", session=session)

`FileSession` has what `agents.memory.session.Session` asks for: `session_id`,
`session_settings`, and the async `get_items(limit)`, `add_items(items)`, `pop_item()` and
`clear_session()`. (The SDK asks libraries outside it to implement that protocol rather
than subclass its `SessionABC`; nothing here imports the SDK.) Underneath is the store the
course builds, the reference of its last lesson: one append-only JSON-lines log a session,
`<folder>/<id>.jsonl`, with its lock, its repair after a crash and its undo.

The SDK's items are Responses API items (messages, function calls and their outputs,
reasoning ...), and each is stored as what it is, one item line `{"$item": {...}}` a
line: never disguised as a chat message. The store's validator knows the line kind, and
its repair answers a function call a crash left without its output (with an output that
says the call may or may not have run), exactly as it answers a tool call.

- `add_items` writes all the items in one write(): all of them are in the log, or none.
- `get_items(limit)` reads the end of the log only, not all of it.
- `pop_item` is the store's undo: a marker that hides the item; the bytes stay.
- `clear_session` deletes the session's files (the store's delete_session).
- A change whose caller is cancelled is waited for: the cancellation reaches the caller
  once the change has landed or failed, never while it may still be writing.
- `session_settings` are the SDK's `SessionSettings` when the SDK is installed (a dict is
  checked and turned into them), so that a run's settings can be laid over them.
- After `close()` the object refuses every call, naming the session, as the SDK's own
  sessions do; the session's files stay, and a new object opens them again.

Each change is made by the session's writer, which holds its lock. The writer is opened
for the change and closed after it, unless the log then ends with a call whose output may
still come (a function call, or an output that may answer only some of the turn's calls):
it is kept, lock and all, until the turn ends in anything else, or until close(). So any
number of `FileSession` objects, in any number of processes, share a session one change
at a time (a busy session is waited for up to `timeout` seconds), and a call is repaired
only when its writer is gone: after a crash, never between a call and its output. Opening
a writer reads only the end of the log.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

# The store's session ids are plain file names; the SDK's may be anything (an email, a
# URL ...). Those that are not are stored under the hash of the id.
PLAIN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")

# Where the kit keeps the reference it ships (a copy of the last lesson's solution).
SHIPPED = Path(__file__).resolve().parents[1] / "reference"

Item = dict[str, Any]
T = TypeVar("T")


class StoreNotFound(RuntimeError):
    """No store to put the session in: the kit ships no reference, and none was given."""


def reference_store() -> ModuleType:
    """The store of the course's last lesson, as the kit ships it (loaded once)."""
    from .. import course

    found = sorted(SHIPPED.glob("[0-9][0-9]_*/" + course.MODULE)) if SHIPPED.is_dir() else []
    if not found:
        raise StoreNotFound(f"{SHIPPED}: the kit ships no reference store; pass "
                            "FileSession(..., store=<a lesson's folder>)")
    return load_store(found[-1].parent)


def load_store(folder: str | Path) -> ModuleType:
    """A lesson's store from its folder (a solution, or a student's own)."""
    from .. import course

    folder = Path(folder).resolve()
    module = course.load_module(folder, f"sessionlab_adapters.store_{folder.parent.name}_"
                                        f"{folder.name}")
    missing = [name for name in ("SessionLog", "item_line", "delete_session")
               if not hasattr(module, name)]
    if missing or not hasattr(module.SessionLog, "load_last"):
        raise StoreNotFound(f"{folder}: not a store the adapter can use (it lacks "
                            f"{', '.join(missing) or 'SessionLog.load_last'}); items "
                            "and reading from the end come with lesson 11")
    return module


def file_name(session_id: str) -> str:
    """The store's id for an SDK session id: the id itself when it is a plain file name
    of at most 64 characters, else `sdk-` and its sha256 (68 characters, so the two kinds
    never meet)."""
    if not isinstance(session_id, str) or not session_id:
        raise ValueError(f"a session id is a non-empty string, not {session_id!r}")
    if PLAIN_ID.fullmatch(session_id):
        return session_id
    return "sdk-" + hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()


def session_settings_of(value: Any) -> Any:
    """The settings a session holds, as the SDK's own sessions hold them: its
    SessionSettings (the defaults for None, a dict checked and turned into one), which
    the Runner lays a run's settings over. Without the SDK: the dict or None, with the
    same refusal of a key that is no setting."""
    try:
        from agents.memory.session_settings import SessionSettings, coerce_session_settings
    except ImportError:
        unknown = sorted(set(value) - {"limit"}) if isinstance(value, dict) else []
        if unknown:
            raise TypeError(f"Unknown session settings: {', '.join(unknown)}") from None
        return value
    return SessionSettings() if value is None else coerce_session_settings(value)


async def settled(change: Callable[[], T]) -> T:
    """`change()` run in a worker thread, its outcome waited for even when the caller is
    cancelled meanwhile: the cancellation is raised once the change has landed or failed,
    never while the thread may still be writing, so that the caller that catches it finds
    in the log what happened (and a retry cannot overtake the write it retries)."""
    task = asyncio.ensure_future(asyncio.to_thread(change))
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as error:
            cancelled = cancelled or error
    if cancelled is not None:
        if not task.cancelled():
            task.exception()    # seen, so a failure behind it is logged as no loop error
        raise cancelled
    return task.result()


def resolve_limit(limit: int | None, settings: Any) -> int | None:
    """The SDK's rule: an explicit limit wins, else the settings' (None: everything)."""
    if limit is not None:
        return limit
    if isinstance(settings, dict):
        return settings.get("limit")
    return getattr(settings, "limit", None)


class FileSession:
    """An Agents SDK session stored in `<folder>/<session id>.jsonl` by the course's store.

    `session_settings` is the SDK's SessionSettings (or a dict, turned into one): its
    `limit` is how many of the newest items get_items() gives when asked for no limit.
    `durable=True` fsyncs every write. `timeout`: seconds to wait for a session another
    writer holds before the store's SessionBusy (None: as long as it takes). `store`: a
    lesson's folder (or the module) to use instead of the reference the kit ships.
    """

    def __init__(self, session_id: str, folder: str | Path = "sessions", *,
                 session_settings: Any = None, durable: bool = False,
                 timeout: float | None = 10.0, store: str | Path | ModuleType | None = None
                 ) -> None:
        self.session_id = session_id
        self.session_settings = session_settings_of(session_settings)
        self.folder = Path(folder)
        self.durable = durable
        self.timeout = timeout
        if isinstance(store, ModuleType):
            self.store = store
        else:
            self.store = load_store(store) if store is not None else reference_store()
        self.file_id = file_name(session_id)
        self.path = self.folder / f"{self.file_id}.jsonl"
        # One change at a time from this object, whatever thread or event loop asks
        self._mutex = threading.Lock()
        # The writer, kept while the log ends with a call whose output may still come
        self._writer: Any = None
        self._closed = False

    def __repr__(self) -> str:
        return f"FileSession({self.session_id!r}, {str(self.folder)!r})"

    # --- the protocol -----------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[Item]:
        """The session's items, oldest first; the newest `limit` of them with a limit.

        Read from the end of the log, without the lock and without reading the rest: a
        writer only adds whole lines after those read."""
        self._check_open()
        return self.items(resolve_limit(limit, self.session_settings))

    async def add_items(self, items: list[Item]) -> None:
        """Add `items` after the others, all in one write: every one of them is stored,
        or (an item the store refuses, a full disk) none is."""
        self._check_open()
        if not items:
            return
        lines = [self.store.item_line(item) for item in items]  # refused before writing
        await settled(lambda: self._change(lambda log: log.extend(lines)))

    async def pop_item(self) -> Item | None:
        """Take back the newest item and return it; None when there is none. The store's
        undo: a marker hides it, and the bytes already written never change."""
        self._check_open()

        def pop(log: Any) -> Item | None:
            last = log.load_last(1)
            if not last:
                return None
            log.undo(1)
            return unwrap(last[0])
        return await settled(lambda: self._change(pop))

    async def clear_session(self) -> None:
        """Forget every item: the session's files are deleted (its log, meta file, lock,
        and the blobs only it used), under its lock."""
        self._check_open()

        def clear() -> None:
            with self._mutex:
                self._release()     # the kept writer, if any: delete takes the lock itself
                self.store.delete_session(self.folder, self.file_id)
        await settled(clear)

    # --- underneath -------------------------------------------------------------------

    def items(self, limit: int | None) -> list[Item]:
        """get_items(), without the event loop."""
        log = self.store.SessionLog(self.folder, self.file_id)
        if limit is None or limit < 0:
            entries = log.load()
        else:
            entries = log.load_last(limit)
        return [unwrap(entry) for entry in entries]

    def _change(self, change: Any) -> Any:
        """Run `change(log)` as the session's writer: the one kept from the last change,
        or one opened for it, closed after unless a call may still get its output."""
        with self._mutex:
            self._check_open()  # closed while this change waited for the mutex
            log, self._writer = self._writer, None
            if log is None:
                log = self.store.SessionLog(self.folder, self.file_id,
                                            durable=self.durable, timeout=self.timeout)
            try:
                result = change(log)
                last = log.load_last(1)
                if last and not self.store.leaves_no_call_open(last[-1]):
                    self._writer, log = log, None   # the turn goes on: keep its writer
                return result
            finally:
                if log is not None:
                    log.close()

    def close(self) -> None:
        """Let go of the writer (and the session's lock) if one is kept, and end this
        object: every later call is refused. Safe to call again. The session's files
        stay; a new FileSession on the same id goes on with them."""
        with self._mutex:
            self._closed = True
            self._release()

    def _release(self) -> None:
        """Close the kept writer, if any (the caller holds the mutex)."""
        log, self._writer = self._writer, None
        if log is not None:
            log.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed: session "
                               f"{self.session_id!r} in {self.folder}; open a new one "
                               "to go on with it")

    def __del__(self) -> None:
        # A session object dropped without close() must not keep the session locked
        writer = getattr(self, "_writer", None)
        if writer is not None:
            writer.close()

    def __enter__(self) -> "FileSession":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def unwrap(entry: dict[str, Any]) -> Item:
    """The item an item line holds. A chat message in the log (a session the course's
    own agent wrote) is given as it is: the SDK takes chat-style messages as input."""
    item = entry.get("$item")
    return item if isinstance(item, dict) and len(entry) == 1 else entry
