"""How fast does `pytest lessons/NN_topic --solution` feel? Median wall time per lesson.

    python -m bench.lesson_speed            # every lesson, 5 runs each, plus the root pytest once
    python -m bench.lesson_speed --repeat 3 --no-root

Each figure is also shown against two baselines measured in the same run: a Python process
that only imports `openai` (the floor every lesson pays), and a pytest run that collects
nothing. The aim is about a second a lesson, so the watch loop feels instant.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from sessionlab import course

ROOT = Path(__file__).resolve().parent.parent


def wall_time(command: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-root", action="store_true", help="skip timing the root pytest")
    args = parser.parse_args(argv)

    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    floor = wall_time([sys.executable, "-c", "import openai"], args.repeat)
    empty = wall_time([*pytest, "--collect-only", "bench"], args.repeat)
    rows = [("python -c 'import openai'", floor), ("pytest collecting nothing", empty)]
    for lesson in course.lessons(ROOT):
        rows.append((f"pytest lessons/{lesson.name} --solution",
                     wall_time([*pytest, f"lessons/{lesson.name}", "--solution"], args.repeat)))
    if not args.no_root:
        rows.append(("pytest (root: kit tests + maintainers' check)", wall_time(pytest, 1)))

    table = Table("command", "median s", "x import openai", "x empty pytest",
                  title=f"median of {args.repeat} runs (root pytest: 1 run)")
    for name, seconds in rows:
        table.add_row(name, f"{seconds:.2f}", f"{seconds / floor:.1f}", f"{seconds / empty:.1f}")
    Console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
