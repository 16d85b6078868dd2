"""Another process for lesson 05's tests:
a writer, or a would-be writer, of one session.

    python writer_process.py MODULE FOLDER SESSION ACTION [NAME COUNT SIZE]

MODULE is the agent.py under test. The process reports each step as one line on stdout
and waits for the test's go-ahead as one line on stdin, so that the test and the process
take turns without any sleep. With SESSIONLAB_UNLOCK_STAND_IN=1 in its environment, it
lets go through `let_go` for as long as task 05.2 is not written. ACTION is one of:

  hold     become the writer (append one message), print "holding", wait for a line,
           close, print "released"
  tear     become the writer, append one message,
  then write the first half of a second one
           straight into the file, as a large write still in progress leaves it; print
           "torn", wait for a line, write the rest, close, print "done"
  append   print "ready", wait for a line,
  then append COUNT messages whose content is NAME
           followed by SIZE bytes (waiting up to 20 s for the lock), close, print "done"
  try      try once to become the writer:
  print "got", or "busy " and the error's message
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from sessionlab.course import load_module
from sessionlab.testing import keep_lines_large, until_written

FIRST = {"role": "user", "content": "Ask the elder about the cave."}
SECOND = {
    "role": "assistant",
    "content": "The elder says: bring a torch. " + "The path is long. " * 4000,
}


def let_go(log) -> None:
    """What `close` does in task 05.2's place while 05.2 is not written, so that the
    tests of 05.1 run as soon as 05.1 is written: the session is free again, and its
    lock file is left behind, as a holder killed with SIGKILL leaves it. It is not
    05.2: a lock file left behind is what 05.2's tests refuse. 05.2's own tests never
    use it; a test of 05.1 that needs a lock file gone as its holder lets go removes it
    itself."""
    if log._lock_fd is not None:
        os.close(log._lock_fd)
        log._lock_fd = None


class ForGood:
    """until_written's monkeypatch, in a process that never undoes it."""

    setattr = staticmethod(setattr)


def say(text: str) -> None:
    print(text, flush=True)


def wait_for_the_test() -> None:
    sys.stdin.readline()


def content(name: str, number: int, size: int) -> str:
    """What writer NAME appends as its message NUMBER: easy to check, and large."""
    return f"{name} {number} " + name[-1] * size


def main(argv: list[str]) -> None:
    module_path, folder, session_id, action, *rest = argv
    lesson = load_module(Path(module_path), "sessionlab_impl.writer_process")
    if os.environ.get("SESSIONLAB_UNLOCK_STAND_IN") == "1":
        until_written(ForGood, lesson.SessionLog, "_unlock", "05.2", let_go)

    if action == "hold":
        with lesson.SessionLog(folder, session_id) as log:
            log.append(FIRST)
            say("holding")
            wait_for_the_test()
        say("released")

    elif action == "tear":
        with lesson.SessionLog(folder, session_id) as log:
            log.append(FIRST)
            line = (json.dumps(SECOND, ensure_ascii=False) + "\n").encode("utf-8")
            half = len(line) // 2
            raw = os.open(log.path, os.O_WRONLY | os.O_APPEND)
            try:
                os.write(raw, line[:half])
                say("torn")
                wait_for_the_test()
                os.write(raw, line[half:])
            finally:
                os.close(raw)
        say("done")

    elif action == "append":
        name, count, size = rest[0], int(rest[1]), int(rest[2])
        say("ready")
        wait_for_the_test()
        with lesson.SessionLog(
            folder, session_id, timeout=20, **keep_lines_large(lesson, size)
        ) as log:
            for number in range(count):
                log.append({"role": "user", "content": content(name, number, size)})
        say("done")

    elif action == "try":
        try:
            with lesson.SessionLog(folder, session_id) as log:
                log.append({"role": "user", "content": "Me too."})
        except lesson.SessionBusy as busy:
            say(f"busy {busy}")
        else:
            say("got")

    else:
        raise SystemExit(f"unknown action {action!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
