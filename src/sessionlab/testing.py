"""Small helpers that lesson tests share (the kit's side, not the student's)."""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn


def keep_lines_large(lesson: ModuleType, size: int) -> dict[str, int]:
    """SessionLog options that keep content of `size` bytes inside the log's line.

    From lesson 06 on, large content moves to blobs/. Tests about large *lines* (one write
    per line, no interleaving between writers) pass this so that they still write them
    when run against a later lesson's solution.
    """
    parameters = inspect.signature(lesson.SessionLog).parameters
    return {"blob_threshold": 2 * size} if "blob_threshold" in parameters else {}


def append_interrupted_after_the_write(log: Any, message: dict, *, tries: int = 5) -> bool:
    """Append `message` to `log` and raise KeyboardInterrupt just after its line landed.

    A real SIGALRM fires every 0.2 ms while the append runs; its handler does nothing until
    the log file has grown, then raises: the Ctrl-C that arrives right after write()
    returned. Returns True when that happened (the append raised, the line is in the file),
    False when no signal came in time (the caller may try again with a new log).
    """
    path = Path(log.path)
    before = path.stat().st_size if path.exists() else 0

    def handler(signum: int, frame: Any) -> None:
        if path.exists() and path.stat().st_size > before:
            signal.setitimer(signal.ITIMER_REAL, 0)
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)
    try:
        log.append(message)
    except KeyboardInterrupt:
        return True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return False


def in_child(work: Callable[[], Any]) -> Any:
    """Run `work()` in a forked copy of this process and return what it returned.

    The child starts with everything this process has imported, and whatever it changes
    about itself (umask, rlimits, uid, a patched module) dies with it. `work` returns
    something JSON can carry. If it raises, the result is {"raised": class name,
    "message": str(error), "errno": ..., "traceback": ...}, so that the test can tell a
    named error from a raw traceback.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:    # the child: never return into pytest
        status = 0
        try:
            os.close(read_end)
            try:
                result = {"returned": work()}
            except BaseException as error:      # noqa: BLE001 - reported to the parent as data
                result = {"raised": type(error).__name__, "message": str(error),
                          "errno": getattr(error, "errno", None),
                          "traceback": traceback.format_exc()}
            data = json.dumps(result, default=repr).encode("utf-8")
            while data:
                data = data[os.write(write_end, data):]
        except BaseException:                  # noqa: BLE001
            status = 1
        finally:
            os._exit(status)
    os.close(write_end)
    chunks = []
    try:
        while chunk := os.read(read_end, 1 << 16):
            chunks.append(chunk)
    except BaseException:
        # The test gave up waiting (its timeout, a Ctrl-C): the child, perhaps looping
        # for ever in the code under test, must not outlive it and take a core
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    finally:
        os.close(read_end)
    _, status = os.waitpid(pid, 0)
    if not chunks:
        raise AssertionError(f"the child process ended without a result (wait status {status})")
    result = json.loads(b"".join(chunks))
    return result["returned"] if "returned" in result else result


@contextlib.contextmanager
def local_clock_ahead_of_utc() -> Iterator[None]:
    """The process's local time 5 h 45 min ahead of UTC while the block runs (Nepal's):
    a time a lesson writes must be right wherever its writer runs, and a local time is
    right only with its own offset, never labelled as UTC."""
    clock = os.environ.get("TZ")
    os.environ["TZ"] = "NPT-5:45"
    time.tzset()
    try:
        yield
    finally:
        if clock is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = clock
        time.tzset()


def unless_unfinished(result: Any) -> Any:
    """`result` of in_child, except that a task not written yet (NotImplementedError in
    the child) is raised here too: the test then fails for that reason, as a starter's
    tests must, rather than on an assertion about the child's outcome."""
    if isinstance(result, dict) and result.get("raised") == "NotImplementedError":
        raise NotImplementedError(result["message"])
    return result


def with_file_size_limit(limit: int, action: Callable[[], Any]) -> tuple[str, str, Any]:
    """Run `action` in a child process (in_child) whose files may not grow past `limit`
    bytes.

    The operating system then refuses or cuts short any write beyond the limit
    (RLIMIT_FSIZE, with SIGXFSZ ignored so the write fails with EFBIG instead of killing
    the child): a real full disk, without filling one. Returns ("ok", "", what `action`
    returned, as JSON), or (exception type name, message, None) if it raised.
    The child's files stay behind for the test to inspect.
    """
    import resource

    def limited() -> Any:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
        return [action()]     # in a list: a returned dict never looks like a raise

    result = in_child(limited)
    if isinstance(result, dict):
        return result["raised"], result["message"][:500], None
    return "ok", "", result[0]


def wait_past(moment: datetime) -> datetime:
    """Sleep until the UTC clock, cut to whole seconds, is past `moment` (a second at
    most), and return that whole second: two acts whose times are written to the second
    then fall in different seconds, so a time taken once and written again shows."""
    while (now := datetime.now(timezone.utc).replace(microsecond=0)) <= moment:
        time.sleep(0.01)
    return now


def check_time(value: object, before: datetime, after: datetime, field: str,
               should_be: str, note: str = "") -> None:
    """Fail in words unless `value` is a time as the course writes one (ISO 8601, with
    its zone) from `before` to `after`: the window in which the act it dates was made.
    `field` names it ('"at" of undo 2'), `should_be` says what it stands for ('the time
    of that undo'), `note` what a wrong one is likely to be."""
    try:
        when = datetime.fromisoformat(value)     # type: ignore[arg-type]
    except (TypeError, ValueError):
        when = None
    if when is None or when.tzinfo is None or not before <= when <= after:
        raise AssertionError(
            f"{field} should be {should_be}: an ISO 8601 time with its time zone, "
            f"between {before} and {after}; it is {value!r}" + (f" ({note})" if note
                                                                 else ""))


@contextlib.contextmanager
def sleeps_of(lesson: ModuleType) -> Iterator[list[float]]:
    """The seconds of every sleep the code takes in the block, in order, however it
    reached `time.sleep` (`time.sleep`, `from time import sleep`, inside a function or
    not), and every wait with a timeout on a `threading.Condition` (an `Event` waits on
    one). The sleeps still happen: they are only recorded. A sleep called by a name
    this cannot replace (imported inside a function) is seen by a profile hook, which
    can only time it: its seconds are the time it took."""
    slept: list[float] = []
    real_sleep, real_wait = time.sleep, threading.Condition.wait
    asked = threading.local()   # inside sleep() below: its real sleep is counted

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        asked.now = True
        try:
            real_sleep(seconds)
        finally:
            asked.now = False

    def wait(condition: threading.Condition, timeout: float | None = None) -> bool:
        if timeout is not None:
            slept.append(timeout)
        return real_wait(condition, timeout)

    began: list[float] = []
    previous = sys.getprofile()     # the call recorder's, when one runs: kept going

    def profile(frame: Any, event: str, arg: Any) -> None:
        if arg is real_sleep and not getattr(asked, "now", False):
            if event == "c_call":
                began.append(time.monotonic())
            elif began:     # c_return or c_exception
                slept.append(time.monotonic() - began.pop())
        if previous is not None:
            previous(frame, event, arg)

    # A lesson module that took the function itself under a name of its own
    aliases = [(module, name) for module in getattr(lesson, "_modules", [lesson])
               for name, value in vars(module).items() if value is real_sleep]
    time.sleep, threading.Condition.wait = sleep, wait
    for module, name in aliases:
        setattr(module, name, sleep)
    sys.setprofile(profile)
    try:
        yield slept
    finally:
        sys.setprofile(previous)
        time.sleep, threading.Condition.wait = real_sleep, real_wait
        for module, name in aliases:
            setattr(module, name, real_sleep)


def another_writer_takes(lesson: ModuleType, folder: Path, session_id: str) -> bool:
    """Whether another writer could take the session now: it becomes the writer (which
    writes nothing to a whole log) and lets go at once."""
    other = lesson.SessionLog(folder, session_id)
    try:
        other.open_for_append()
        return True
    except lesson.SessionBusy:
        return False
    finally:
        other.close()


def open_descriptors() -> int:
    """How many file descriptors this process holds open right now."""
    import os

    folder = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"
    return len(os.listdir(folder))


class Raised:
    """What `raises` caught: `.value` is the exception (as with pytest.raises)."""

    value: BaseException | None = None


@contextlib.contextmanager
def raises(expected: type[BaseException] | tuple[type[BaseException], ...], why: str,
           match: str | None = None, *, unmatched: str | None = None
           ) -> Iterator[Raised]:
    """Like pytest.raises, but a block that raises nothing fails with `why`, the words
    that explain the likely cause, instead of a bare "DID NOT RAISE". An error raised
    whose message does not match `match` fails saying so, followed by `unmatched` (why
    the message needs those words) when given, else by `why`."""
    # Imported here, not at the top: lesson 05's writer processes import this module,
    # and pytest would cost each of them a few tenths of a second at start.
    import pytest
    raised = Raised()
    try:
        yield raised
    except expected as error:
        raised.value = error
        if match is not None and not re.search(match, str(error)):
            if unmatched is not None:
                pytest.fail(f"the {type(error).__name__} was raised, as it should be, "
                            f"but its message should mention {match!r}: it says: "
                            f"{error}. {unmatched}", pytrace=False)
            pytest.fail(f"the {type(error).__name__} should mention {match!r}, it "
                        f"says: {error}. {why}", pytrace=False)
        return
    except NotImplementedError:
        raise       # a task not written yet: the plugin says which, in its own words
    except Exception as other:
        # Another error than the one expected: say so in words first, and where it came
        # from, rather than leave a traceback ending in, say, FileNotFoundError.
        pytest.fail(f"expected {_names(expected)}, got {type(other).__name__}: {other} "
                    f"(raised at {_where(other)})", pytrace=False)
    pytest.fail(f"expected {_names(expected)}, but nothing was raised: {why}", pytrace=False)


def names_path(message: str, path: Path) -> bool:
    """Whether an error's text names the file at `path` by its whole path, as written
    or resolved: not a path relative to some working directory ('../../srv/...'), which
    leads nowhere once the error is read in another process's log. (A file:// URL of
    the path names it too.)"""
    message = message.replace("file://", " ")
    return any(re.search(rf"(?<![\w./~-]){re.escape(str(where))}", message)
               for where in (path, path.resolve()))


def names_line(message: str, number: int) -> bool:
    """Whether an error's text names line `number`: 'line 2' (any case) or
    'file.jsonl:2'."""
    return re.search(rf"\bline {number}\b|\.jsonl:{number}\b", message,
                     re.IGNORECASE) is not None


def described(error: BaseException) -> str:
    """An exception as a test's failure names it: its type, its text, and where it came
    from in the course's files (a test's words then say what was expected instead)."""
    return f"{type(error).__name__}: {error} (raised at {_where(error)})"


def fail_in(task: str, message: str) -> NoReturn:
    """Fail the test with `message`, saying whose code is wrong: task `task`. For a test of
    several tasks that can tell which one failed it; the failure then names that task
    alone, its hints and its place on the page, instead of every task the test checks."""
    import pytest
    failure = pytest.fail.Exception(message, pytrace=False)
    failure.task = task
    raise failure


def until_written(monkeypatch, owner: Any, name: str, task: str,
                  stand_in: Callable[..., Any]) -> None:
    """While `owner.name` still raises the starter's NotImplementedError of `task`, call
    `stand_in` in its place, so that the tests of an earlier task of the lesson run as
    soon as that task is written; once `task` is written, the student's own code runs.
    (A method stays a method: `stand_in` then takes the instance first.)"""
    written = getattr(owner, name, None)
    if written is None:
        return

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return written(*args, **kwargs)
        except NotImplementedError as error:
            if not str(error).startswith(f"task {task} "):
                raise
            return stand_in(*args, **kwargs)

    monkeypatch.setattr(owner, name, call)


def _where(error: BaseException) -> str:
    """Where `error` came from, in the course's own files: the line that raised it and,
    when that is a given helper, the line of the caller (the student's, most often)."""
    import sys
    library = (sys.prefix, sys.base_prefix, str(Path(__file__).parent))
    frames = [frame for frame in traceback.extract_tb(error.__traceback__)
              if not frame.filename.startswith(library)]
    shown = [f"{Path(frame.filename).name}:{frame.lineno}" for frame in frames[-2:]]
    return ", called from ".join(reversed(shown)) if shown else "outside the course's files"


def _names(expected: type[BaseException] | tuple[type[BaseException], ...]) -> str:
    return expected.__name__ if isinstance(expected, type) else \
        " or ".join(e.__name__ for e in expected)


class Peer:
    """Another process a test drives line by line: it says a word on its stdout at each
    step (`expect`), and waits for "go" on its stdin where the test must act first
    (`go`). Its stderr is kept, to be shown when it says something else, or nothing."""

    def __init__(self, argv: list[str], *, hang: float) -> None:
        self.hang = hang
        self.errors = tempfile.TemporaryFile()
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self.errors, text=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def expect(self, word: str, wait: float | None = None) -> str:
        """The next line it says, which must start with `word`: else it is stopped and
        an AssertionError shows what it said and the end of its errors."""
        wait = self.hang if wait is None else wait
        try:
            line = self.lines.get(timeout=wait)
        except queue.Empty:
            line = f"nothing for {wait} s"
        if line is None or not line.startswith(word):
            self.stop()
            self.errors.seek(0)
            errors = self.errors.read().decode(errors="replace")[-3000:]
            raise AssertionError(f"the other process should have said {word!r}; it "
                                 f"said {line!r}. Its errors:\n{errors}")
        return line

    def go(self) -> None:
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
