"""Another process for lesson 11's tests: a writer of one session, with its own
connection.

    python writer_process.py MODULE URL SESSION ACTION [NAME [COUNT]]

MODULE is the agent.py under test, URL the database. The process reports each step as
one line on stdout and waits for the test's go-ahead as one line on stdin, so that the
test and the process take turns without any sleep:

  lock    take the session's lock and nothing more (task 11.1's _lock alone), print
          "holding", wait for a line, close, print "released"
  hold    become the writer (append one message), print "holding", wait for a line,
          close, print "released"
  race    open the session with no lock (lock=False), print "ready", wait for a line,
          append COUNT messages whose content is NAME and a number; print "done", or
          "refused " and the error's class and message
  open    connect with no lock (lock=False), print "ready", wait for a line, open the
          session as its writer and print "opened " and the JSON list of the
          tool_call_ids its history answers, then "repair " and the JSON of the
          calls its repair marker (`repaired`) names, or null; then, unless NAME is
          "-", append one message whose content is NAME and print "appended". A
          refusal prints "refused " and the error's class and message instead
  stuck   become the writer, append one message, then start appending a large one: its
          blob is stored inside the transaction, and the process prints "inside" and
          waits there (the test kills it) before the row is inserted
  pause   as stuck, but the process stops right after the first statement of the
          large append that inserts into the table NAME has returned, whatever the
          code's shape (it watches every statement sent), prints "inside" and waits
          there (the test kills it)
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from sessionlab.course import load_module

FIRST = {"role": "user", "content": "Ask the elder about the cave."}
LARGE = {"role": "user", "content": "The elder's map, copied out. " * 1000}


def say(text: str) -> None:
    print(text, flush=True)


def wait_for_the_test() -> None:
    sys.stdin.readline()


def main(argv: list[str]) -> None:
    module_path, url, session_id, action, *rest = argv
    lesson = load_module(Path(module_path), "sessionlab_impl.writer_process")

    if action == "lock":
        with lesson.PostgresSessionLog(url, session_id) as log:
            log._lock()
            say("holding")
            wait_for_the_test()
        say("released")
    elif action == "hold":
        with lesson.PostgresSessionLog(url, session_id) as log:
            log.append(FIRST)
            say("holding")
            wait_for_the_test()
        say("released")
    elif action == "race":
        name, count = rest[0], int(rest[1])
        with lesson.PostgresSessionLog(url, session_id, lock=False) as log:
            log.open_for_append()
            say("ready")
            wait_for_the_test()
            try:
                for number in range(count):
                    log.append({"role": "user", "content": f"{name} {number}"})
            except Exception as error:  # noqa: BLE001 - reported to the test as words
                say(f"refused {type(error).__name__}: {error}")
                return
        say("done")
    elif action == "open":
        name = rest[0]
        with lesson.PostgresSessionLog(url, session_id, lock=False) as log:
            log._connection()
            say("ready")
            wait_for_the_test()
            try:
                history = log.open_for_append()
                say("opened " + json.dumps([m.get("tool_call_id") for m in history
                                            if m.get("role") == "tool"]))
                say("repair " + json.dumps(log.repaired and log.repaired.get(
                    "interrupted")))
                if name != "-":
                    log.append({"role": "user", "content": name})
                    say("appended")
            except NotImplementedError:
                raise       # a task not written yet: the test says which
            except Exception as error:  # noqa: BLE001 - reported to the test as words
                say(f"refused {type(error).__name__}: {error}")
    elif action == "stuck":
        log = lesson.PostgresSessionLog(url, session_id)
        log.append(FIRST)
        insert = log._insert

        def hang_before_the_row(entries: list) -> None:
            say("inside")
            wait_for_the_test()     # the test kills this process here
            insert(entries)

        log._insert = hang_before_the_row
        log.append(LARGE)
    elif action == "pause":
        import psycopg
        table = rest[0]
        log = lesson.PostgresSessionLog(url, session_id)
        log.append(FIRST)
        def pausing_after(send):
            def pause_after(cursor, query, *args, **kwargs):
                result = send(cursor, query, *args, **kwargs)
                text = query.as_string(cursor) if hasattr(query, "as_string") else query
                if isinstance(text, bytes):
                    text = text.decode()
                if re.search(rf'(?i)insert\s+into\s+[\w."]*\b{table}\b', str(text)):
                    say("inside")
                    wait_for_the_test()     # the test kills this process here
                return result
            return pause_after

        # However the lesson's code sends its statements: execute or executemany
        psycopg.Cursor.execute = pausing_after(psycopg.Cursor.execute)
        psycopg.Cursor.executemany = pausing_after(psycopg.Cursor.executemany)
        log.append(LARGE)
    else:
        raise SystemExit(f"unknown action {action!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
