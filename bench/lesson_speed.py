"""How fast does a lesson feel? The student's two loops, timed.

    python -m bench.lesson_speed            # every lesson, 5 runs each, plus the root pytest once
    python -m bench.lesson_speed --repeat 1 --no-watch --campaign   # the two test commands
    python -m bench.lesson_speed --repeat 3 --no-root --lessons 00,02

* `pytest lessons/NN_topic --solution`, a cold run: median wall time per lesson.
* `sessionlab watch`: from the moment agent.py is saved to the moment the result is on the
  screen, as a student feels it. The watch runs in a pseudo-terminal on a scratch copy of the
  lesson (its agent.py the reference solution); each save appends a new comment line, so
  every save is a new file that the watch must test (an old one would come from its cache).
  Measured twice, the two watches taking turns save by save: as it runs (children forked
  from a warm server) and with `--cold` (a new pytest process per save).

Each figure is also shown against baselines measured in the same run: a Python process that
only imports `openai` (the floor every cold run pays), and a pytest run that collects
nothing. The commands take turns, one run each per round, so that on a shared machine they
see the same load. The targets of issue 15 are checked at the end.
"""

from __future__ import annotations

import argparse
import os
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from sessionlab import course

ROOT = Path(__file__).resolve().parent.parent
WATCHED = ("00", "01", "02", "03", "04")     # the lessons with a save-to-result target
COLD_TARGET = 1.3        # s, median cold `pytest lessons/NN_topic` for 00-04 and 07
ROOT_TARGET = 180.0      # s, the README's test command (the bare root `pytest`), issue 25
WATCH_TARGET = 0.5       # s, median save to result in `sessionlab watch` for 00-04
# What the plain pytest of a lesson ran with before issue 15 (plugins autoloaded): lesson
# 05's real processes must be no slower than that.
BEFORE = ("addopts=--import-mode=importlib -ra -p no:hypothesispytest -p no:anyio "
          "-p no:respx -p no:platformdirs -p no:unraisableexception")


def wall_times(commands: dict[str, list[str]], repeat: int) -> dict[str, float]:
    """Median wall time of each command. The commands take turns, one run each per round,
    so that on a shared machine they all see the same load and their ratios hold."""
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(repeat):
        for name, command in commands.items():
            start = time.perf_counter()
            subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


# --- the watch, in a pseudo-terminal --------------------------------------------------------


class Terminal:
    """A command in a pseudo-terminal, and what it has printed so far."""

    def __init__(self, command: list[str], cwd: Path) -> None:
        self.master, slave = os.openpty()
        env = {**os.environ, "COLUMNS": "110", "LINES": "50", "TERM": "xterm"}
        self.process = subprocess.Popen(command, cwd=cwd, env=env, stdin=slave, stdout=slave,
                                        stderr=slave, start_new_session=True)
        os.close(slave)
        self.seen = b""

    def wait_for(self, text: str, after: int, timeout: float = 120) -> float:
        """Read until `text` appears past offset `after`; the time it arrived."""
        wanted = text.encode()
        deadline = time.monotonic() + timeout
        while wanted not in self.seen[after:]:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.master], [], [], left)[0]:
                raise TimeoutError(f"no {text!r} within {timeout:g} s; the screen ends with "
                                   f"{self.seen[-600:].decode(errors='replace')!r}")
            try:
                self.seen += os.read(self.master, 65536)
            except OSError:
                raise TimeoutError(f"the watch ended before printing {text!r}") from None
        return time.perf_counter()

    def close(self) -> None:
        try:
            os.write(self.master, b"q")
            self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        os.close(self.master)


def scratch_course(target: Path, lesson: course.Lesson) -> Path:
    """A course holding only `lesson`, its agent.py the reference solution."""
    for name in ("conftest.py", "pyproject.toml"):
        shutil.copy2(ROOT / name, target / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(lesson.folder, target / "lessons" / lesson.name, ignore=ignore)
    shutil.copytree(lesson.solution_folder, target / "solutions" / lesson.name, ignore=ignore)
    shutil.copy2(lesson.module_path("solution"), target / "lessons" / lesson.name / course.MODULE)
    return target


class Watching:
    """`sessionlab watch NN` on a scratch copy of a lesson, in a pseudo-terminal."""

    def __init__(self, lesson: course.Lesson, *, cold: bool) -> None:
        self.lesson = lesson
        self.scratch = tempfile.TemporaryDirectory(prefix="sessionlab-bench-")
        root = scratch_course(Path(self.scratch.name), lesson)
        self.module = root / "lessons" / lesson.name / course.MODULE
        self.text = self.module.read_text(encoding="utf-8")
        self.footer = f"watching lessons/{lesson.name}/{course.MODULE}"
        self.saves = 0
        self.terminal = Terminal([sys.executable, "-m", "sessionlab", "--course", str(root),
                                  "watch", lesson.number, *(["--cold"] if cold else [])],
                                 root)
        self.terminal.wait_for(self.footer, 0)

    def save(self) -> float:
        """Seconds from a save of agent.py to its result on the screen."""
        self.saves += 1
        mark = len(self.terminal.seen)
        start = time.perf_counter()
        self.module.write_text(f"{self.text}\n# save {self.saves}\n", encoding="utf-8")
        end = self.terminal.wait_for(self.footer, mark)
        if "tests pass" not in self.terminal.seen[mark:].decode(errors="replace"):
            raise RuntimeError(f"lesson {self.lesson.name}: the watch showed no result")
        return end - start

    def close(self) -> None:
        self.terminal.close()
        self.scratch.cleanup()


def save_to_result(lesson: course.Lesson, repeat: int) -> tuple[float, float]:
    """Median seconds from a save to its result: (the watch as it runs, with --cold).
    The two watches take turns, save by save, so that they see the same machine."""
    warm, cold = Watching(lesson, cold=False), Watching(lesson, cold=True)
    times: dict[bool, list[float]] = {False: [], True: []}
    try:
        # The first save of each is not counted: it may find the warm server still
        # starting, which a student's first save, seconds after the watch starts, does not.
        for save in range(repeat + 1):
            for is_cold, watching in ((False, warm), (True, cold)):
                time.sleep(0.5)              # the student reads the screen, then edits
                seconds = watching.save()
                if save:
                    times[is_cold].append(seconds)
    finally:
        warm.close()
        cold.close()
    return statistics.median(times[False]), statistics.median(times[True])


# --- the report -----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-root", action="store_true", help="skip timing the root pytest")
    parser.add_argument("--campaign", action="store_true",
                        help="also time `pytest -m campaign`, the heavier tests CI adds")
    parser.add_argument("--no-watch", action="store_true", help="skip timing the watch loop")
    parser.add_argument("--lessons", metavar="NN,NN", default=None,
                        help="only these lessons (default: all)")
    parser.add_argument("--markdown", metavar="FILE", type=Path, default=None,
                        help="also write both tables to FILE as Markdown (for the site)")
    args = parser.parse_args(argv)
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print("note: PYTHONDONTWRITEBYTECODE is set, so every run compiles the kit and "
              "rewrites the tests again; a student's shell does not set it", file=sys.stderr)

    lessons = course.lessons(ROOT)
    if args.lessons:
        wanted = {part.strip().zfill(2) for part in args.lessons.split(",")}
        lessons = [lesson for lesson in lessons if lesson.number in wanted]
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    commands = {"floor": [sys.executable, "-c", "import openai"],
                "lazy": [sys.executable, "-c", "from sessionlab import lazy_sdk; "
                         "lazy_sdk.install(); import openai"],
                "empty": [*pytest, "--collect-only", "bench"]}
    for lesson in lessons:
        commands[lesson.number] = [*pytest, f"lessons/{lesson.name}", "--solution"]
        if lesson.number == "05":
            commands["05 before"] = [*commands["05"], "-o", BEFORE]
    medians = wall_times(commands, args.repeat)
    floor, lazy, empty = medians.pop("floor"), medians.pop("lazy"), medians.pop("empty")
    before05 = medians.pop("05 before", None)
    cold = medians
    rows = [("python -c 'import openai'", floor),
            ("  the same, imported as the kit does (sessionlab.lazy_sdk)", lazy),
            ("pytest collecting nothing", empty)]
    for lesson in lessons:
        rows.append((f"pytest lessons/{lesson.name} --solution", cold[lesson.number]))
        if lesson.number == "05" and before05 is not None:
            rows.append(("  the same, plugins autoloaded (the old options)", before05))
    watch: dict[str, float] = {}
    watch_cold: dict[str, float] = {}
    if not args.no_watch:
        for lesson in lessons:
            if lesson.number in WATCHED:
                watch[lesson.number], watch_cold[lesson.number] = save_to_result(
                    lesson, args.repeat)
                rows.append((f"watch: save to result, lesson {lesson.number}",
                             watch[lesson.number]))
                rows.append(("  the same with --cold (a new process per run)",
                             watch_cold[lesson.number]))
    root = None
    if not args.no_root:
        root = wall_times({"root": pytest}, 1)["root"]
        rows.append(("pytest (root, the README's command: quick kit tests + maintainers' "
                     "check)", root))
    if args.campaign:
        rows.append(("pytest -m campaign (the heavier tests CI adds)",
                     wall_times({"campaign": [*pytest, "-m", "campaign"]}, 1)["campaign"]))

    figures = Table("command", "median s", "x import openai", "x empty pytest",
                    title=f"median of {args.repeat} runs (root pytest: 1 run)")
    for name, seconds in rows:
        figures.add_row(name, f"{seconds:.2f}", f"{seconds / floor:.1f}",
                        f"{seconds / empty:.1f}")

    targets = Table("target", "measured", "verdict", title="targets (issues 15 and 25)")
    for number, seconds in watch.items():
        targets.add_row(f"watch {number}: save to result <= {WATCH_TARGET:g} s",
                        f"{seconds:.2f} s ({seconds / watch_cold[number]:.2f}x --cold)",
                        verdict(seconds <= WATCH_TARGET))
    for number, seconds in cold.items():
        if number in (*WATCHED, "07"):
            targets.add_row(f"pytest lessons/{number}: cold <= {COLD_TARGET:g} s",
                            f"{seconds:.2f} s ({seconds / floor:.1f}x import openai)",
                            verdict(seconds <= COLD_TARGET))
    if root is not None:
        targets.add_row(f"pytest (root): <= {ROOT_TARGET:g} s on 2 quiet cores",
                        f"{root:.0f} s ({root / floor:.0f}x import openai)",
                        verdict(root <= ROOT_TARGET))
    if before05 is not None:
        # Within 5%: closer than that, two runs of the same code on a busy machine differ.
        seconds = cold["05"]
        targets.add_row("pytest lessons/05: no slower than before (within 5%)",
                        f"{seconds:.2f} s ({seconds / before05:.2f}x before)",
                        verdict(seconds <= before05 * 1.05))

    out = Console(width=max(120, Console().width))
    out.print(figures)
    if targets.row_count:
        out.print(targets)
    if args.markdown:
        tables = [figures, *([targets] if targets.row_count else [])]
        args.markdown.write_text("\n\n".join(map(markdown, tables)) + "\n", encoding="utf-8")
    return 0


def markdown(table: Table) -> str:
    """A rich Table as a Markdown one (the site's page shows the same figures)."""
    head = [str(column.header) for column in table.columns]
    cells = [list(map(str, column.cells)) for column in table.columns]
    lines = ["| " + " | ".join(head) + " |",
             "|" + "|".join("---:" if i else "---" for i in range(len(head))) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |"
              for row in zip(*cells)]
    return "\n".join(lines)


def verdict(met: bool) -> str:
    return "met" if met else "missed"


if __name__ == "__main__":
    sys.exit(main())
