"""Another process for the PostgreSQL store's fault tests: a writer with its own
connection, which the test can freeze, cut off from the server, or let go on.

    python pg_writer.py MODULE URL SESSION ACTION NETWORK_TIMEOUT

MODULE is the store's module (the final lesson's agent.py), URL the database, and
NETWORK_TIMEOUT the writer's network_timeout in seconds. The process reports each step
as one line on stdout and waits for the test's go-ahead as one line on stdin:

  frozen  become the writer, append one message, then append a large one: inside its
          transaction, with the blob stored and the row not yet, print "inside" and stop
          itself with SIGSTOP (a writer frozen in the middle: the test sends SIGCONT);
          then print "stored", or "refused " and the error's class and message
  hold    become the writer (append one message), print "holding", wait for a line,
          then append another and print "appended" or "refused " and the error, with
          the seconds the append took
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from sessionlab.course import load_module

FIRST = {"role": "user", "content": "Ask the elder about the cave."}
LARGE = {"role": "user", "content": "The elder's map, copied out. " * 1000}
LATER = {"role": "user", "content": "And the guard?"}


def say(text: str) -> None:
    print(text, flush=True)


def main(argv: list[str]) -> None:
    module_path, url, session_id, action, network_timeout = argv
    store = load_module(Path(module_path), "sessionlab_impl.pg_writer")
    log = store.PostgresSessionLog(url, session_id,
                                   network_timeout=float(network_timeout))
    log.append(FIRST)
    if action == "frozen":
        insert = log._insert

        def freeze_before_the_row(entries: list) -> None:
            say("inside")
            os.kill(os.getpid(), signal.SIGSTOP)
            insert(entries)

        log._insert = freeze_before_the_row
        message = LARGE
    elif action == "hold":
        say("holding")
        sys.stdin.readline()
        message = LATER
    else:
        raise SystemExit(f"unknown action {action!r}")
    started = time.monotonic()
    try:
        log.append(message)
    except Exception as error:  # noqa: BLE001 - reported to the test as words
        took = time.monotonic() - started
        say(f"refused after {took:.1f} s: {type(error).__name__}: {error}")
        return
    say(f"{'stored' if action == 'frozen' else 'appended'} after "
        f"{time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
