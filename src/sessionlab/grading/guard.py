"""What no student may change, checked; and no process of a student left behind.

Fingerprints are taken before grading and compared after it: the course copy and the kit by
content, each student's folder by size and time (it may be large). In a sandbox none of
them is even visible to student code, so a difference means something outside the grader
changed them; without a sandbox it is how a student who wrote there is caught.

The reaper makes the grader a "child subreaper" (Linux): a process a student detaches
(setsid, double fork) is re-parented to the grader instead of init, so the grader can still
find it and kill it, after each run (by the run's token in its environment) and, whatever
it did to its environment, before any output file is written.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import signal
import sys
import threading
from pathlib import Path
from stat import S_ISREG

from ..cli import files as regular_files

FILE_LIMIT = 20000          # files fingerprinted per folder; a student's copy may be huge
SKIPPED = ("__pycache__", ".pytest_cache")   # the grader's own imports write bytecode
PR_SET_CHILD_SUBREAPER = 36
TOKEN_VARIABLE = "SESSIONLAB_GRADE_RUN"


def fingerprint(folder: Path, *, content: bool) -> dict[str, str]:
    """Relative path -> content hash (or size and time) of every file under `folder`."""
    found: dict[str, str] = {}
    if not folder.is_dir():
        return found
    for current, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED)
        for name in sorted(files):
            path = Path(current) / name
            try:
                info = path.lstat()
                if content and S_ISREG(info.st_mode):
                    # Opened without following a link or waiting on a pipe swapped in.
                    value = hashlib.sha256(regular_files.read_bytes(path, follow=False)).hexdigest()
                else:
                    value = f"{info.st_size}:{info.st_mtime_ns}:{info.st_mode}"
            except OSError as error:
                value = f"unreadable: {error.strerror}"
            found[path.relative_to(folder).as_posix()] = value
            if len(found) >= FILE_LIMIT:
                return found
    return found


def changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Names added, removed or changed, sorted."""
    return sorted(name for name in before.keys() | after.keys()
                  if before.get(name) != after.get(name))


class Guard:
    """Fingerprints of named folders, taken now and compared by `check()`."""

    def __init__(self, folders: dict[str, tuple[Path, bool]]) -> None:
        self.folders = folders
        self.before = {label: fingerprint(path, content=content)
                       for label, (path, content) in folders.items()}

    def check(self) -> list[str]:
        """One line per folder that changed, naming a few of its files."""
        lines = []
        for label, (path, content) in self.folders.items():
            changed = changes(self.before[label], fingerprint(path, content=content))
            if changed:
                shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more"
                                                  if len(changed) > 3 else "")
                lines.append(f"{label} ({path}) changed during grading: {shown}")
        return lines


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _children() -> list[int]:
    """The grader's child processes, read from /proc (Linux)."""
    me, found = os.getpid(), []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and fields[1] == str(me):
            found.append(int(entry))
    return found


def _carries(pid: int, token: str) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"{TOKEN_VARIABLE}={token}".encode() in environ.split(b"\0")


class Reaper:
    """While active, orphans of the runs become the grader's children, and are killed."""

    def __init__(self) -> None:
        self.active = False
        self.before: set[int] = set()
        self.running: set[int] = set()      # the runs' own processes, waited on elsewhere
        self.lock = threading.Lock()

    def __enter__(self) -> "Reaper":
        self.active = _prctl(PR_SET_CHILD_SUBREAPER, 1)
        if self.active:
            self.before = set(_children())
        return self

    def __exit__(self, *exc) -> None:
        self.sweep()
        if self.active:
            _prctl(PR_SET_CHILD_SUBREAPER, 0)
            self.active = False

    def started(self, pid: int) -> None:
        with self.lock:
            self.running.add(pid)

    def finished(self, pid: int) -> None:
        with self.lock:
            self.running.discard(pid)

    def sweep(self, token: str | None = None) -> int:
        """Kill and reap adopted orphans (only those of the run `token`, when given)."""
        if not self.active:
            return 0
        killed = 0
        for pid in _children():
            with self.lock:
                if pid in self.before or pid in self.running:
                    continue
            if token is not None and not _carries(pid, token):
                continue
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                killed += 1
            except (ProcessLookupError, ChildProcessError, PermissionError):
                pass
        return killed
