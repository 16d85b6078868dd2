"""What no student may change, checked; and no process of a student left behind.

Fingerprints are taken before grading and compared after it: the course copy and the kit by
content, each student's folder by size and time (it may be large). In a sandbox none of
them is even visible to student code, so a difference means something outside the grader
changed them; without a sandbox it is how a student who wrote there is caught.

No process of a run is left behind: the run's keeper (keeper.py) kills what the run
detached, and `kill_leftovers` then kills any process still carrying the run's token in
its environment (one that outlived its keeper).
"""

from __future__ import annotations

import hashlib
import os
import signal
from pathlib import Path
from stat import S_ISREG

from ..cli import files as regular_files

FILE_LIMIT = 20000          # files fingerprinted per folder; a student's copy may be huge
SKIPPED = ("__pycache__", ".pytest_cache")   # the grader's own imports write bytecode
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


def kill_leftovers(token: str) -> int:
    """SIGKILL every process that carries the run `token` in its environment, wherever
    it is in the process tree; return how many. The keeper takes what stays below it;
    this takes what got away from it (a run that killed its keeper) and kept its
    environment.
    Only a process of this user can be read, and only a run's carries its token: nothing
    else is touched, whatever else the grading process runs."""
    killed = 0
    for pid in _process_ids():
        if pid != os.getpid() and _carries(pid, token):
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
    return killed


def _process_ids() -> list[int]:
    try:
        return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return []       # no /proc (not Linux): the keeper alone stands


def _carries(pid: int, token: str) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"{TOKEN_VARIABLE}={token}".encode() in environ.split(b"\0")
