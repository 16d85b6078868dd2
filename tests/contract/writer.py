"""Another process for the contract suite's privacy tests: a writer of one session, on
either store of the last lesson, with its own file descriptors or connection.

    python writer.py KIND LOCATION SESSION ACTION

KIND is `jsonl` (LOCATION a sessions folder) or `postgres` (LOCATION a database URL).
The process reports each step as one line on stdout and waits for the test's go-ahead
as one line on stdin:

  hold    become the writer (append one message), print "holding", wait for a line,
          close, print "released"
  blob    become the writer, append one message, then append a large one: with its
          blob stored and its line (or row) not yet, print "inside" and wait for a
          line; then print "stored"
"""

from __future__ import annotations

import sys
from pathlib import Path

from sessionlab.course import load_module

ROOT = Path(__file__).resolve().parents[2]
FIRST = {"role": "user", "content": "Ask the elder about the cave."}
LARGE = {"role": "user", "content": "The elder's map, copied out. " * 1000}


def say(text: str) -> None:
    print(text, flush=True)


def main(argv: list[str]) -> None:
    kind, location, session_id, action = argv
    store = load_module(ROOT / "solutions" / "11_postgres" / "agent.py",
                        "sessionlab_impl.contract_writer")
    log = (store.SessionLog(Path(location), session_id) if kind == "jsonl"
           else store.PostgresSessionLog(location, session_id))
    log.append(FIRST)
    if action == "hold":
        say("holding")
        sys.stdin.readline()
        log.close()
        say("released")
    elif action == "blob":
        # The file store writes the line with _write, after its blob; the database
        # store inserts the row with _insert, in the blob's transaction
        name = "_write" if kind == "jsonl" else "_insert"
        write = getattr(log, name)

        def wait_before_the_line(*args):
            say("inside")
            sys.stdin.readline()
            return write(*args)

        setattr(log, name, wait_before_the_line)
        log.append(LARGE)
        log.close()
        say("stored")
    else:
        raise SystemExit(f"unknown action {action!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
