"""Another process for lesson 09's tests: a writer caught between a blob and its line.

    python blob_writer.py MODULE FOLDER SESSION TEXT_FILE

MODULE is the agent.py under test. The process becomes the writer of SESSION and
appends one user message whose content is the text in TEXT_FILE (large: it goes to a
blob). Lesson 06's append stores the blob first and writes the line that points to it
after; this process stops in between: it prints "stored" once the blob is on disk and
waits for a line from the test before it writes the line, then prints "done". So the
test can collect the blobs at the one moment no log refers to the writer's blob yet.
"""

from __future__ import annotations

import sys
from pathlib import Path

from sessionlab.course import load_module


def main(module_path: str, folder: str, session_id: str, text_file: str) -> None:
    lesson = load_module(Path(module_path), "sessionlab_impl.blob_writer")
    text = Path(text_file).read_text(encoding="utf-8")
    with lesson.SessionLog(folder, session_id) as log:
        write_line = log._write

        def wait_then_write(data: bytes) -> None:
            print("stored", flush=True)     # the blob is stored, its line is not
            sys.stdin.readline()
            write_line(data)

        log._write = wait_then_write
        log.append({"role": "user", "content": text})
    print("done", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
