"""The keeper of one grading run: its resource limits, and no process of it left behind.

    python -I keeper.py CPU_SECONDS ADDRESS_BYTES FILE_BYTES OPEN_FILES COMMAND...

sets the limits (they are inherited), makes itself a "child subreaper" (Linux) and runs
COMMAND as its child. A process that the student's code detaches (a new session, a
double fork, a cleared environment) is then re-parented to the keeper, not to init, and
the keeper kills it: once COMMAND has ended, or at once when the grader stops the run
with SIGTERM (its time is up, or the grader itself is stopped or killed). It ends as
COMMAND ended, so that the grader reads COMMAND's own exit status.

Why a process of its own per run, rather than the grader as the subreaper: a subreaper
adopts the orphans of everything below it, and the process that grades may have other
work below it. The kit's own tests grade in-process while a check below the same process
starts PostgreSQL servers, whose postmaster is detached by design; a grader that took
every adopted orphan for a student's killed those servers. The keeper adopts only what
its own run started.

Run by path with `python -I`, and stdlib only: it imports nothing of the kit, and
nothing of the student's folder or environment can change what it does.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
# How long the keeper goes on killing what its run left (a run that forks as fast as it
# is killed): then it gives up, rather than hold the grader for ever
SWEEP_SECONDS = 10.0


class Stopped(Exception):
    """The grader sent SIGTERM: the run is to end now."""


def _stopped(signum: int, frame: object) -> None:
    raise Stopped


def set_limits(cpu: int, memory: int, size: int, files: int) -> None:
    for name, soft, hard in (("RLIMIT_CPU", cpu, cpu + 5),
                             ("RLIMIT_AS", memory, memory),
                             ("RLIMIT_FSIZE", size, resource.RLIM_INFINITY),
                             ("RLIMIT_NOFILE", files, files)):
        try:
            resource.setrlimit(getattr(resource, name), (soft, hard))
        except (AttributeError, ValueError, OSError):
            pass        # a limit this system lacks, or may not lower: the others hold


def prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def children() -> list[int]:
    """The keeper's child processes, adopted ones included, read from /proc (Linux)."""
    me, found = str(os.getpid()), []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", errors="replace") as stat:
                fields = stat.read().rsplit(")", 1)[-1].split()
        except OSError:
            continue        # ended as we looked
        if len(fields) > 1 and fields[1] == me:     # the field after the state
            found.append(int(entry))
    return found


def sweep() -> None:
    """Kill and reap every child left, until the keeper has none: killing one re-parents
    its own children to the keeper, and the next round takes them."""
    deadline = time.monotonic() + SWEEP_SECONDS
    while time.monotonic() < deadline:
        for pid in children():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            reaped, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return          # no child at all: nothing can be re-parented here any more
        if reaped == 0:
            time.sleep(0.01)


def run(command: list[str]) -> int:
    """Start COMMAND and wait for it, reaping adopted orphans as they end; return
    COMMAND's wait status."""
    child = os.fork()
    if child == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        try:
            os.execv(command[0], command)
        except OSError as error:
            os.write(2, f"cannot run {command[0]}: {error.strerror}\n".encode())
        os._exit(127)
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == child:
            return status


def end_as(status: int | None) -> None:
    """Exit as COMMAND did: with its code, or killed by the same signal."""
    code = os.waitstatus_to_exitcode(status) if status is not None else -signal.SIGTERM
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        code = 128 - code        # a signal whose default is not to end the process
    sys.exit(code)


def main(argv: list[str]) -> None:
    set_limits(*map(int, argv[:4]))
    status = None
    signal.signal(signal.SIGTERM, _stopped)
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    # A grader killed outright (SIGKILL, a crash) stops its runs the same way: the
    # keeper is told by SIGTERM as the grader's thread that started it goes
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    try:
        status = run(argv[4:])
    except Stopped:
        pass
    finally:
        # The sweep runs to its end; it takes COMMAND too, if that still runs
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        sweep()
    end_as(status)


if __name__ == "__main__":
    main(sys.argv[1:])
