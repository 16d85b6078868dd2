"""A warm pytest for the watch loop: a fork server.

Most of a lesson's run is start-up: importing pytest, openai (and the part of it that the
first request imports), respx and the kit takes about a second; the tests themselves take a
few tenths. So `sessionlab watch` keeps one process, the server, that has made those imports
once, and for every run forks a fresh child from it. The child runs pytest in-process with
exactly the arguments a cold `python -m pytest` gets, writes the same report, prints the same
output, and exits. The server itself never imports a lesson's module or its tests, so every
child starts from the same clean state and sees the student's latest save; whatever a run
does (a module-level side effect, a crash, `os._exit`, a test that hangs until it is killed)
ends with its child.

The watch and the server talk over a Unix socket pair, one JSON line each way:

    watch -> server   {"args": [...], "cwd": ..., "env": {...}}   sent with the write end of a
                      pipe (SCM_RIGHTS) that becomes the child's stdout and stderr, so that
                      the watch reads the child's output itself, bounded as a cold run's is
    server -> watch   {"pid": N}          the child is running in its own process group N
                                          (a timeout or Ctrl-C kills the group)
    server -> watch   {"status": S}       how it ended: an exit code, or -signal

The watch falls back to a cold run (a new `python -m pytest` process) whenever the server
cannot be trusted: the kit's code, the course's conftest.py or pyproject.toml, or a library
it preloaded changed since it started (it would run the old code), it died, or the platform
cannot fork. Only the standard library is imported here at the top: the watch imports this
module too, and must stay light.
"""

from __future__ import annotations

import gc
import hashlib
import importlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

# What every lesson's run imports, made once in the server. The kit's pytest plugin and
# pytest-timeout are left to pytest: it marks plugins for assertion rewriting as it loads
# them, and warns about any that was imported before.
PRELOAD = ("pytest", "openai", "openai.resources.chat", "httpx", "respx",
           "sessionlab.course", "sessionlab.hangs", "sessionlab.scripted", "sessionlab.town")
# httpx2: openai 3's own HTTP stack (2.x has none; a name not installed is skipped).
LIBRARIES = ("pytest", "_pytest", "pluggy", "openai", "httpx", "httpx2", "respx",
             "pydantic", "pytest_timeout")
COURSE_FILES = ("conftest.py", "pyproject.toml")
SUPPORTED = hasattr(os, "fork") and hasattr(socket, "send_fds") and hasattr(socket, "AF_UNIX")


class WorkerGone(Exception):
    """The server could not run this request (it died, or never started): run cold."""


# --- what the server was started from -------------------------------------------------------


def kit_fingerprint() -> str:
    """The kit's own code (not its command line, which no test runs), by name, time and
    size: what a test run executes besides the lesson."""
    package = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        if "cli" in path.relative_to(package).parts:
            continue
        stat = path.stat()
        digest.update(f"{path.relative_to(package)}:{stat.st_mtime_ns}:{stat.st_size}\n".encode())
    return digest.hexdigest()


def fingerprint(root: Path) -> str:
    """Everything the server has loaded that a save could change: the kit, the course's
    conftest.py and pyproject.toml, and the installed libraries it preloaded (an upgrade
    replaces their files, which changes their folder)."""
    digest = hashlib.sha256(kit_fingerprint().encode())
    for name in COURSE_FILES:
        path = root / name
        digest.update(name.encode() + (path.read_bytes() if path.is_file() else b"-"))
    for name in LIBRARIES:
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        if origin:
            try:
                digest.update(f"{name}:{os.stat(Path(origin).parent).st_mtime_ns}\n".encode())
            except OSError:
                digest.update(f"{name}: gone\n".encode())
    return digest.hexdigest()


# --- the server -----------------------------------------------------------------------------


def warm_up() -> None:
    """Import what every run needs, and make one scripted request: the first
    `chat.completions.create` imports more of openai and builds its models' validators."""
    # The whole SDK, as it is: paid once here, it leaves a run nothing of it to import.
    # (A cold run imports only what it uses, through sessionlab.lazy_sdk; in a child of
    # this server the kit's plugin installs that finder too, but finds it all imported.)
    for name in PRELOAD:
        importlib.import_module(name)
    import _pytest.config
    for name in _pytest.config.default_plugins:
        try:
            importlib.import_module(f"_pytest.{name}")
        except ImportError:      # a plugin some pytest version does not have
            pass
    from .scripted import ScriptedModel, say
    model = ScriptedModel([say("ready")])
    model.client().chat.completions.create(
        model=model.model, messages=[{"role": "user", "content": "Are you ready?"}])


def serve(channel: socket.socket) -> None:
    """Answer requests until the watch closes its end: one forked child per request."""
    lines = Lines(channel)
    while True:
        try:
            request, fds = lines.receive()
        except (OSError, ValueError):
            return
        if request is None:
            return                   # the watch has gone
        if len(fds) != 1:
            for fd in fds:
                os.close(fd)
            send(channel, {"status": 1, "error": "a request needs one output descriptor"})
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request, fds[0], channel)        # never returns
        os.close(fds[0])
        try:
            os.setpgid(pid, pid)     # also done by the child: whichever runs first
        except OSError:
            pass                     # it already did, or has already exited
        try:
            send(channel, {"pid": pid})
        except OSError:
            _kill_group(pid)
        _, wait_status = os.waitpid(pid, 0)
        try:
            send(channel, {"status": os.waitstatus_to_exitcode(wait_status)})
        except OSError:
            return


def _child(request: dict, output: int, channel: socket.socket) -> None:
    """One run: pytest in this fresh copy of the server, then exit."""
    status = 1
    try:
        channel.close()
        os.setpgid(0, 0)             # its own group: a timeout kills what its tests started too
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.close(output)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        import pytest
        sys.argv = [str(Path(pytest.__file__).parent / "__main__.py"), *request["args"]]
        status = int(pytest.main(request["args"]))
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(status)


class Lines:
    """JSON lines read from a socket, with the descriptors sent alongside them."""

    def __init__(self, channel: socket.socket) -> None:
        self.channel = channel
        self.buffer = b""

    def receive(self, deadline: float | None = None) -> tuple[dict | None, list[int]]:
        """The next message and any descriptors that came with it; (None, []) at the end.
        Raises TimeoutError when `deadline` (a time.monotonic()) passes first."""
        fds: list[int] = []
        while b"\n" not in self.buffer:
            if deadline is not None:
                self.channel.settimeout(max(0.0, deadline - time.monotonic()))
            try:
                data, more, _, _ = socket.recv_fds(self.channel, 65536, 4)
            except socket.timeout:
                raise TimeoutError from None
            finally:
                self.channel.settimeout(None)
            fds += more
            if not data:
                for fd in fds:
                    os.close(fd)
                return None, []
            self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line), fds


def send(channel: socket.socket, message: dict, fds: tuple[int, ...] = ()) -> None:
    data = json.dumps(message).encode() + b"\n"
    if fds:
        socket.send_fds(channel, [data], list(fds))
    else:
        channel.sendall(data)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def main(argv: list[str]) -> int:
    channel = socket.socket(fileno=int(argv[0]))
    try:
        warm_up()
    except Exception:
        # A kit that does not import is reported by the run itself, in the child, with
        # the same words as a cold run: the server keeps going with what it has.
        traceback.print_exc()
    # What the imports made lives as long as the server: moved out of the collector's
    # sight, a child's collections do not walk it (nor copy its pages by touching them).
    gc.collect()
    gc.freeze()
    serve(channel)
    return 0


# --- the watch's side -----------------------------------------------------------------------


class Forked:
    """A running child of the server, as the watch sees it: killed with its group."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def kill(self) -> None:
        _kill_group(self.pid)


class WarmPytest:
    """The watch's handle on a server: start it, run pytest through it, close it.

    `run` raises WorkerGone when the server cannot take the run; `usable()` says whether
    it can be trusted at all, and stops a server that no longer can."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root = root
        self.env = env
        self.process: subprocess.Popen | None = None
        self.channel: socket.socket | None = None
        self.lines: Lines | None = None
        self.started_from = ""
        self.lock = threading.Lock()      # one run at a time; a second one runs cold
        self.closing = threading.Lock()   # starting and stopping, from any thread
        self.wanted = False               # start() was called, close() was not
        self.runs = 0

    def start(self) -> None:
        """Start a server, and keep one from now on (a no-op where fork is not
        available)."""
        self.wanted = True
        self.revive()

    def revive(self) -> None:
        """Start a new server if one is wanted and none runs (after a cold run that stood
        in for one that died or went stale)."""
        with self.closing:
            if not SUPPORTED or not self.wanted or self.process is not None:
                return
            # Taken before the server imports anything: a change during its start counts.
            self.started_from = fingerprint(self.root)
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                self.process = subprocess.Popen(
                    [sys.executable, "-m", "sessionlab.warm", str(theirs.fileno())],
                    pass_fds=[theirs.fileno()], cwd=self.root, env=self.env,
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL, start_new_session=True)
            except OSError:
                ours.close()
                return
            finally:
                theirs.close()
            self.channel, self.lines = ours, Lines(ours)

    def usable(self) -> bool:
        """A server is running, alive, and started from the files there are now."""
        process = self.process
        if process is None:
            return False
        if process.poll() is not None or fingerprint(self.root) != self.started_from:
            self.close()
            return False
        return True

    def run(self, args: list[str], *, cwd: Path, env: dict[str, str], timeout: float,
            children, output) -> int | None:
        """Run `pytest ARGS` in a fresh child; its exit status, or None on a timeout.

        `output` gets what the child prints (`add(bytes)`); `children` is the group that
        Ctrl-C stops (runner.Children)."""
        if not self.lock.acquire(blocking=False):
            raise WorkerGone("busy with another run")
        try:
            return self._run(args, cwd, env, timeout, children, output)
        finally:
            self.lock.release()

    def _run(self, args, cwd, env, timeout, children, output) -> int | None:
        channel, lines = self.channel, self.lines
        if channel is None or lines is None:
            raise WorkerGone("not started")
        deadline = time.monotonic() + timeout
        read_end, write_end = os.pipe()
        reader = threading.Thread(target=_drain, args=(read_end, output), daemon=True,
                                  name="sessionlab-warm-output")
        child: Forked | None = None
        try:
            try:
                send(channel, {"args": args, "cwd": str(cwd), "env": env}, (write_end,))
            finally:
                os.close(write_end)
            reader.start()
            child = Forked(_receive(lines, deadline, "pid"))
            children.track(child)
            try:
                status = _receive(lines, deadline, "status")
            except TimeoutError:
                child.kill()
                status = None
                _receive(lines, time.monotonic() + 5, "status")    # the server reaps it
            self.runs += 1
            reader.join(timeout=5)   # a grandchild that left the group may hold the pipe
            return status
        except (OSError, ValueError, TimeoutError, WorkerGone) as error:
            if child is not None:
                child.kill()
            self.close()
            raise WorkerGone(str(error) or type(error).__name__) from None
        except BaseException:
            # Ctrl-C: the child goes, and so does the server (it may hold a queued run).
            if child is not None:
                child.kill()
            self.close()
            raise
        finally:
            if child is not None:
                children.done(child)
            if not reader.is_alive():
                os.close(read_end)

    def close(self) -> None:
        """Stop the server (a run in progress ends with it); `revive` starts another.
        Ctrl-C may call this from the main thread while a run's thread does too."""
        with self.closing:
            channel, process = self.channel, self.process
            self.channel = self.lines = self.process = None
        if channel is not None:
            channel.close()
        if process is not None:
            _kill_group(process.pid)
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def __enter__(self) -> "WarmPytest":
        return self

    def shutdown(self) -> None:
        """Stop the server for good: no run starts another."""
        self.wanted = False
        self.close()

    def __exit__(self, *exc_info) -> None:
        self.shutdown()


def _receive(lines: Lines, deadline: float, key: str):
    """The value of `key` in the server's next message."""
    message, fds = lines.receive(deadline)
    for fd in fds:
        os.close(fd)
    if message is None:
        raise WorkerGone("the server has gone")
    if key not in message:
        raise WorkerGone(f"unexpected answer {message}")
    return message[key]


def _drain(fd: int, output) -> None:
    try:
        while chunk := os.read(fd, 65536):
            output.add(chunk)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
