"""The sandbox one (student, lesson) runs in: bubblewrap when it works here, limits always.

bubblewrap (`bwrap`, the distribution's package) builds the sandbox from kept, audited code
instead of anything written here: every namespace unshared (no network, a fresh PID
namespace whose processes all die with the run), an unprivileged user (`nobody`) with every
capability dropped, only the system's libraries, the Python installation and the kit mounted
read-only, the run's copy of the course view read-only at /grade, its lesson folder a small
private in-memory folder holding the lesson's files (read-only) and the student's agent.py
(read-only), and a private /tmp, also in memory and bounded. Nothing a run writes reaches the
grader's disk. Resource limits (CPU time, address space, open files; a soft file size) are
set by the run's keeper (keeper.py), which runs the rest as its child and kills whatever
the run left behind: they hold with and without bubblewrap.
"""

from __future__ import annotations

import functools
import math
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

KEEPER = Path(__file__).with_name("keeper.py")
SANDBOX_ROOT = "/grade"            # where the run's course view appears inside the sandbox
MEMORY_BYTES = 2 * 1024 ** 3       # address space of each process of a run
FILE_BYTES = 64 * 1024 ** 2        # soft limit on a file's size (tests lower it, and raise
                                   # the hard one: only the sandbox's folders bound writes)
TMP_BYTES = 256 * 1024 ** 2        # the private /tmp lives in memory: bound it
LESSON_BYTES = 64 * 1024 ** 2      # so does the private lesson folder
OPEN_FILES = 1024

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64")
# Only what the dynamic loader and Python read: never /etc as a whole, nor /home or /root.
SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime",
                "/etc/alternatives",
                # Lesson 11's throwaway PostgreSQL server looks up the user it runs as
                # (`nobody` here) and refuses to start without it; these two hold names
                # and ids only, no password hashes (those are in /etc/shadow).
                "/etc/passwd", "/etc/group")


@dataclass(frozen=True)
class Availability:
    usable: bool
    why: str          # one line: what was found, or why grading runs without a sandbox


def kit_folder() -> Path:
    """The installed kit package (an editable install points into the repository's src/)."""
    return Path(__file__).resolve().parent.parent


def python_folders() -> list[Path]:
    """What the sandbox needs of Python, read-only: the installation, the venv, the kit.

    Never the folders on sys.path as a whole: the current folder or a repository root
    there would show the grader's own files (solutions, other students) to student code.
    """
    wanted = {Path(p).resolve() for p in (sys.base_prefix, sys.prefix, sys.exec_prefix,
                                          sys.base_exec_prefix)}
    wanted.add(Path(sys.executable).resolve().parent)
    wanted.add(kit_folder())
    for entry in sys.path:
        path = Path(entry or ".").resolve()
        if path.name in ("site-packages", "dist-packages") and path.is_dir():
            wanted.add(path)
    kept: list[Path] = []
    for path in sorted(wanted, key=lambda p: len(p.parts)):
        if str(path).startswith("/usr/") or any(path.is_relative_to(k) for k in kept):
            continue          # already inside a folder that is mounted
        kept.append(path)
    return kept


def bwrap_args(root: Path, lesson: str, files: list[str]) -> list[str]:
    """bwrap's options for one run: `root` read-only at /grade, its lesson folder a private
    in-memory folder holding the `files` of `root`'s copy, read-only."""
    args = [str(shutil.which("bwrap") or "bwrap"), "--unshare-all", "--unshare-user",
            "--uid", "65534", "--gid", "65534", "--cap-drop", "ALL",
            "--die-with-parent", "--new-session"]
    for folder in SYSTEM_DIRS:
        if os.path.islink(folder):
            args += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            args += ["--ro-bind", folder, folder]
    for name in SYSTEM_FILES:
        args += ["--ro-bind-try", name, name]
    # The private /tmp first: Python, the venv or the kit may live under /tmp (a CI
    # clone), and a tmpfs mounted after them would hide them.
    args += ["--proc", "/proc", "--dev", "/dev", "--size", str(TMP_BYTES), "--tmpfs", "/tmp"]
    for folder in python_folders():
        args += ["--ro-bind", str(folder), str(folder)]
    inside = f"{SANDBOX_ROOT}/lessons/{lesson}"
    args += ["--ro-bind", str(root), SANDBOX_ROOT,
             "--size", str(LESSON_BYTES), "--tmpfs", inside]
    for name in files:
        args += ["--ro-bind", str(root / "lessons" / lesson / name), f"{inside}/{name}"]
    return args + ["--chdir", SANDBOX_ROOT]


def limited(command: list[str], timeout: float) -> list[str]:
    """`command` under the run's keeper (keeper.py): the run's resource limits (CPU time
    a little above the timeout), and every process the run leaves killed when it ends.
    Stop such a run with SIGTERM to its first process, the keeper, which then kills the
    rest; a SIGKILL would leave what the run detached behind."""
    cpu = max(10, math.ceil(timeout) + 5)
    limits = [str(cpu), str(MEMORY_BYTES), str(FILE_BYTES), str(OPEN_FILES)]
    return [sys.executable, "-I", str(KEEPER), *limits, *command]


def probe() -> Availability:
    """Whether bubblewrap can build the grader's sandbox on this machine, tried for real
    (once per process: a machine does not change its mind between two gradings)."""
    if os.environ.get("SESSIONLAB_NO_SANDBOX"):
        return Availability(False, "SESSIONLAB_NO_SANDBOX is set")
    return _probe()


@functools.cache
def _probe() -> Availability:
    if not sys.platform.startswith("linux"):
        return Availability(False, f"bubblewrap needs Linux (this is {sys.platform})")
    if shutil.which("bwrap") is None:
        return Availability(False, "bubblewrap (bwrap) is not installed")
    import tempfile

    with tempfile.TemporaryDirectory(prefix="sessionlab-probe-") as scratch:
        root = Path(scratch)
        (root / "lessons" / "00_probe").mkdir(parents=True)
        command = bwrap_args(root, "00_probe", []) + [
            sys.executable, "-P", "-c", "import sessionlab"]
        try:
            done = subprocess.run(command, capture_output=True, timeout=60,
                                  stdin=subprocess.DEVNULL, env=clean_environment({}))
        except (OSError, subprocess.SubprocessError) as error:
            return Availability(False, f"bwrap could not be started: {error}")
    if done.returncode != 0:
        lines = done.stderr.decode("utf-8", "replace").strip().splitlines() or ["no message"]
        return Availability(False, f"bwrap cannot build a sandbox here: {lines[-1][:200]}")
    return Availability(True, f"bubblewrap works: {shutil.which('bwrap')}")


def clean_environment(extra: dict[str, str]) -> dict[str, str]:
    """A run's whole environment: nothing of the grader's (keys, tokens, paths) gets in."""
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
           "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PY_COLORS": "0",
           "PYTHONSAFEPATH": "1",              # no script's folder shadows a module, in
           "PYTHONDONTWRITEBYTECODE": "1"}     # the tests' own child processes too
    env.update(extra)
    return env
