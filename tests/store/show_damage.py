"""What eight writers do to one log without a lock: figures for the "store under fire" page.

    python tests/store/show_damage.py [--writers 8] [--lines 500] [--size 65536] [--json FILE]

Eight processes append LINES lines of SIZE bytes each (newline included) to one file at the
same moment, four ways:

  print        open(path, "a") and print(json.dumps(message), file=f): how most scripts log
  json.dump    open(path, "a"), json.dump(message, f), f.write("\\n")
  os.write     one os.write of the whole line on an O_APPEND descriptor, and no lock
  store        the final lesson's SessionLog: the lock, one os.write per line

and counts, in the file that results: lines that are not one whole message (damaged), messages
that are not there whole (lost), and how often the file switches from one writer to another
(interleaving). A script, not a test: the damage depends on the machine and on timing. It is
likely, not certain, and a test must not depend on luck.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from test_writers import content as message, start_together    # this script's folder is on sys.path

ROOT = Path(__file__).resolve().parents[2]
NAMES = "abcdefghijklmnopqrstuvwxyz"


def write_lines(way: str, folder: Path, name: str, lines: int, size: int, store) -> None:
    path = folder / "crowd.jsonl"
    if way == "print":
        with open(path, "a", encoding="utf-8") as f:
            for number in range(lines):
                print(json.dumps(message(name, number, size)), file=f)
    elif way == "json.dump":
        with open(path, "a", encoding="utf-8") as f:
            for number in range(lines):
                json.dump(message(name, number, size), f)
                f.write("\n")
    elif way == "os.write":
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        for number in range(lines):
            os.write(fd, (json.dumps(message(name, number, size)) + "\n").encode())
        os.close(fd)
    elif way == "store":
        with store.SessionLog(folder, "crowd", timeout=600, blob_threshold=2 * size) as log:
            for number in range(lines):
                log.append(message(name, number, size))


def run(way: str, writers: int, lines: int, size: int, store) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        began = time.perf_counter()     # includes forking the writers: a few ms in seconds
        statuses = start_together(NAMES[:writers], lambda name: write_lines(way, folder, name, lines, size, store))
        seconds = time.perf_counter() - began
        failed = sum(status != 0 for status in statuses)
        return {"way": way, "seconds": round(seconds, 2), "failed writers": failed,
                **count((folder / "crowd.jsonl").read_bytes(), writers, lines, size)}


def count(data: bytes, writers: int, lines: int, size: int) -> dict:
    """Damaged lines, lost messages and writer switches in the log's bytes."""
    damaged, whole, previous, switches = 0, set(), None, 0
    for line in data.split(b"\n")[:-1] + ([data.rsplit(b"\n", 1)[-1]] if not data.endswith(b"\n") else []):
        try:
            name, number, pad = json.loads(line)["content"].split(" ")
            assert pad.count(name) == len(pad) and len(line) + 1 == size
        except (ValueError, KeyError, AssertionError):
            damaged += 1
            continue
        whole.add((name, number))
        switches += previous is not None and name != previous
        previous = name
    expected = writers * lines
    return {"lines in the file": data.count(b"\n"), "damaged lines": damaged,
            "messages lost": expected - len(whole), "of": expected, "writer switches": switches}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--lines", type=int, default=500)
    parser.add_argument("--size", type=int, default=64 * 1024)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(ROOT / "src"))
    from sessionlab import course
    store = course.load_module(course.latest_solution(ROOT).module_path("solution"), "sessionlab_impl.final_store")

    results = [run(way, args.writers, args.lines, args.size, store)
               for way in ("print", "json.dump", "os.write", "store")]
    head = ["way", "damaged lines", "messages lost", "writer switches", "seconds"]
    print(f"{args.writers} writers x {args.lines} lines of {args.size:,} bytes, at once, "
          f"on {sys.platform} (Python {sys.version.split()[0]})")
    print(" | ".join(head))
    for r in results:
        print(" | ".join(str(r[h]) for h in head))
    if args.json:
        args.json.write_text(json.dumps({"writers": args.writers, "lines": args.lines,
                                         "size": args.size, "results": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
