"""Benchmark the course's session store against a floor, a naive log, sqlite3 and real peers.

    python -m bench.store --quick          # a minute or so: small N, to see that it all runs
    python -m bench.store                  # the full run: sessions of 100,000 messages
    python -m bench.store --json results.json --svg append-cost.svg --markdown table.md

The store under test is the reference solution of the highest-numbered lesson in solutions/
(or any agent.py given with --impl). Every workload runs, in the same process and on the same
synthetic messages, for every store; each figure is the median over --repeat runs and is also
given as a ratio to the floor measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.messages import mean_bytes, one_more, quest
from bench.stores import Store, Subject, all_stores

WORKLOADS = ("append", "append_first", "append_last", "growth", "append_one", "append_small", "load",
             "fork", "durable", "items")

TITLES = {
    "append": "append N, one at a time (per append)",
    "append_first": "typical append, first 1% of the session",
    "append_last": "typical append, last 1% of the session",
    "growth": "per-append growth (last 1% / first 1%)",
    "append_one": "one append into a session of N (open, append, close)",
    "append_small": "one append into a small session of N (open, append, close)",
    "load": "load a session of N",
    "fork": "fork a session of N (floor: file copy)",
    "durable": "durable append, fsync each (per append)",
    "items": "Agents SDK get_items(limit=20) on 10,000 items (ratio: to SQLiteSession)",
}

UNITS = {"append": "µs", "append_first": "µs", "append_last": "µs", "growth": "x",
         "append_one": "µs", "append_small": "µs", "load": "ms", "fork": "ms", "durable": "µs", "items": "µs"}

# (workload, limit, wording) — the reference store's targets, all as ratios.
TARGETS = (
    ("append", 1.3, "append within 1.3x the floor"),
    ("durable", 1.1, "durable append within 1.1x the floor plus fsync"),
    ("load", 1.2, "load within 1.2x the floor"),
    ("fork", 1.5, "fork within 1.5x a file copy"),
    ("growth", 1.3, "per-append cost at N within 1.3x that at zero"),
    ("append_one", 2.0, "one append by a new writer within 2x the floor"),
    ("items", 2.0, "get_items(limit=20) within 2x SQLiteSession's"),
)

ITEMS_N = 10_000        # items in the session the "items" workload reads from
# The one workload whose ratio is to a peer, not to the floor: the floor has no sessions
RATIO_TO = {"items": "agents"}

ONE_APPEND_BUDGET_NS = 2_000_000_000     # repeats of "append one" stop after this much time
SMALL_SESSION = 20      # messages (at most) in the session of "append_small"


class BenchError(Exception):
    """Something the person running the benchmark must fix; printed without a traceback."""


# --- finding the store under test -----------------------------------------------------------


def find_subject(root: Path, impl: str | None = None) -> tuple[Any, str, Path]:
    """The lesson module to measure: `impl`, or the highest-numbered solutions/NN_*/agent.py."""
    from sessionlab.course import MODULE, latest_solution, load_module

    if impl:
        path = Path(impl).resolve()
        if path.is_dir():
            path = path / MODULE
    else:
        path = latest_solution(root).module_path("solution")
    lesson = path.parent.name
    module = load_module(path)
    if not hasattr(module, "SessionLog"):
        raise BenchError(
            f"{lesson} ({path.name}) has no SessionLog yet: the benchmark measures the session store "
            "that lesson 01_append introduces (SessionLog(folder, id, durable=...) with append/close, "
            "load from 02, fork from 03). Measure a later lesson, or point --impl at one.")
    return module, lesson, path


# --- measuring ------------------------------------------------------------------------------


@dataclass
class Config:
    n: int
    durable_n: int
    repeat: int
    cap: float                 # seconds one store may spend on one append workload
    quick: bool
    seed: int = 2024
    small: int = SMALL_SESSION      # the small session's messages: whole turns only

    @property
    def edge(self) -> int:     # the "first/last 1%" windows
        return max(1, self.n // 100)


@dataclass
class Run:
    """What one store did in one repeat."""
    append_times: list[int] = field(default_factory=list)     # ns per measured append
    durable_times: list[int] = field(default_factory=list)
    samples: dict[str, list[float]] = field(default_factory=dict)   # workload -> seconds, each try
    errors: list[str] = field(default_factory=list)


def clock() -> int:
    return time.perf_counter_ns()


def one_append(store: Store, folder: Path, session_id: str, message: Any, reps: int) -> float:
    """Median seconds for a new writer to open an existing session, append one message and
    close: what a process resuming the session pays for its first message. Opening is timed
    too, because stores differ in when they open the file and in what they check first."""
    took: list[int] = []
    budget_end = clock() + ONE_APPEND_BUDGET_NS
    for _ in range(reps):
        gc.collect()
        t0 = clock()
        writer = store.writer(folder, session_id)
        writer.append(message)
        writer.close()
        t1 = clock()
        took.append(t1 - t0)
        if t1 > budget_end:
            break
    return statistics.median(took) / 1e9


def timed(action, reps: int = 1, after=None) -> float:
    """Median seconds of `action` over `reps` tries (`after` cleans up, untimed)."""
    took = []
    for _ in range(reps):
        gc.collect()
        t0 = clock()
        action()
        took.append(clock() - t0)
        if after:
            after()
    return statistics.median(took) / 1e9


def warm_up(store: Store, messages: list[Any], extra: Any, folder: Path) -> None:
    """Touch every code path once, untimed: imports, caches and the first file of a folder."""
    folder.mkdir(parents=True)
    try:
        store.build(folder, "warm", messages[:200])
        writer = store.writer(folder, "warm")
        for message in messages[200:1000]:
            writer.append(message)
        writer.close()
        if "load" not in store.unsupported:
            store.load(folder, "warm")
        if "fork" not in store.unsupported:
            store.fork(folder, "warm", "warm-fork")
        one_append(store, folder, "warm", extra, 2)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def phase_load(store: Store, messages: list[Any], extra: Any, folder: Path, cfg: Config,
               run: Run, log) -> None:
    if "load" in store.unsupported:
        return
    counts: list[int] = []
    run.samples.setdefault("load", []).append(timed(lambda: counts.append(len(store.load(folder, "quest")))))
    if any(c != len(messages) for c in counts):
        run.errors.append(f"load returned {counts[0]:,} messages, expected {len(messages):,}")


def phase_fork(store: Store, messages: list[Any], extra: Any, folder: Path, cfg: Config,
               run: Run, log) -> None:
    if "fork" not in store.unsupported:
        def remove_fork() -> None:
            for leftover in folder.glob("quest-fork*"):
                leftover.unlink()
            store.forget(folder, "quest-fork")
        run.samples.setdefault("fork", []).append(
            timed(lambda: store.fork(folder, "quest", "quest-fork"), 1, remove_fork))
    if store.role == "floor":
        # Context for the fork target: the copy made durable, as a fork that fsyncs does.
        def copy_and_sync() -> None:
            shutil.copyfile(folder / "quest.jsonl", folder / "quest-copy.jsonl")
            fd = os.open(folder / "quest-copy.jsonl", os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        run.samples.setdefault("copy_fsync", []).append(
            timed(copy_and_sync, 1, lambda: (folder / "quest-copy.jsonl").unlink()))


def phase_one(store: Store, messages: list[Any], extra: Any, folder: Path, cfg: Config,
              run: Run, log) -> None:
    run.samples["append_one"] = [one_append(store, folder, "quest", extra, 5 if cfg.quick else 21)]


def whole_turns(messages: list[Any], most: int) -> int:
    """How many of the first `most` messages end on a plain answer (no tool call left
    open), so that a writer opening that session has nothing to repair."""
    for count in range(min(most, len(messages)), 0, -1):
        last = messages[count - 1]
        if last.get("role") == "assistant" and not last.get("tool_calls"):
            return count
    return min(most, len(messages))


def phase_small(store: Store, messages: list[Any], extra: Any, folder: Path, cfg: Config,
                run: Run, log) -> None:
    """One append by a new writer to a session of a few turns: what a short-lived process
    (a hook, a command, a web request) pays each time, where nothing but the fixed costs of
    opening, locking and closing is left to measure."""
    store.build(folder, "small", messages[:cfg.small])
    run.samples["append_small"] = [one_append(store, folder, "small", extra, 7 if cfg.quick else 51)]
    if store.role == "subject" and hasattr(store, "module"):
        costs = lock_costs(store.module, folder, 7 if cfg.quick else 51)
        if costs:
            run.samples["lock"], run.samples["lock_truncating"] = [costs[0]], [costs[1]]


def lock_costs(module: Any, folder: Path, reps: int) -> tuple[float, float] | None:
    """Median seconds to take and let go of a session's lock, twice over in the same folder:
    the store's own (`SessionLog._lock`, then closing), and a lock whose holder's record is
    written as lessons 05-08 write it, the file truncated to nothing and then rewritten (on
    ext4, closing a file truncated to nothing flushes it: milliseconds). None for a lesson
    without a lock."""
    if not hasattr(module.SessionLog, "_lock"):
        return None
    import fcntl
    import socket

    def the_stores() -> None:
        with module.SessionLog(folder, "lock-bench") as claim:
            claim._lock()

    path = folder / "lock-bench-truncating.lock"

    def truncating() -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.ftruncate(fd, 0)
            os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                     "since": datetime.now(timezone.utc).isoformat()}).encode())
            os.unlink(path)     # let go as the store does: the name first, then the lock
        finally:
            os.close(fd)
    return timed(the_stores, reps), timed(truncating, reps)


def sdk_items(count: int) -> list[dict[str, Any]]:
    """`count` Agents SDK items in turns: the user's input, a function call, its output, the
    model's text (Responses API items, as the SDK's Runner saves them)."""
    items: list[dict[str, Any]] = []
    turn = 0
    while len(items) < count:
        call = f"call_{turn}"
        items += [{"role": "user", "content": f"Day {turn}: buy a rope for the cave."},
                  {"type": "function_call", "call_id": call, "name": "buy",
                   "arguments": '{"item": "rope"}', "id": f"fc_{turn}"},
                  {"type": "function_call_output", "call_id": call,
                   "output": "You bought a rope. Gold left: 12."},
                  {"type": "message", "role": "assistant", "id": f"msg_{turn}",
                   "status": "completed", "content": [
                       {"type": "output_text", "annotations": [],
                        "text": "Bought a rope; the ledge in the cave is steep."}]}]
        turn += 1
    return items[:count]


def phase_items(store: Store, messages: list[Any], extra: Any, folder: Path, cfg: Config,
                run: Run, log) -> None:
    """get_items(limit=20) on a session of ITEMS_N items (fewer with --quick), in one
    running event loop, as an agent framework calls it before each run."""
    if store.key not in ("subject", *RATIO_TO.values()):
        return
    reader = store.items_reader(folder, "items", sdk_items(min(ITEMS_N, cfg.n)))
    if reader is None:
        return
    read, close = reader

    async def measure() -> float:
        took = []
        for _ in range(7 if cfg.quick else 51):
            t0 = clock()
            got = await read()
            took.append(clock() - t0)
            if len(got) != 20:
                run.errors.append(f"get_items(limit=20) gave {len(got)} items")
        return statistics.median(took) / 1e9
    try:
        run.samples["items"] = [asyncio.run(measure())]
    finally:
        close()


def take_turns(stores: list[Store], prepared: dict[str, Any], workdir: Path, run_no: int,
               cfg: Config, broken: dict[str, str], session_id: str, count: int, chunk: int,
               durable: bool) -> dict[str, list[int]]:
    """Append `count` messages to `session_id` in every store, the stores taking turns
    `chunk` appends at a time. Returns each store's per-append times (ns), cut short for a
    store that spent more than the cap.

    A machine's speed drifts from second to second (other processes, the disk's own
    writeback); taking turns in small chunks puts every store, and the floor it is compared
    with, under the same weather.
    """
    writers: dict[str, Any] = {}
    by_key = {s.key: s for s in stores}

    def fail(key: str, error: Exception) -> None:
        if by_key[key].role in ("subject", "floor"):
            raise error
        broken[key] = f"failed in run {run_no + 1}: {type(error).__name__}: {error}"

    for store in stores:
        if store.key in broken or (durable and "durable" in store.unsupported):
            continue
        folder = workdir / f"run{run_no}-{store.key}"
        folder.mkdir(parents=True, exist_ok=True)
        try:
            writers[store.key] = store.writer(folder, session_id, durable=durable)
        except Exception as error:
            fail(store.key, error)
    active = dict(writers)
    times = {key: [0] * count for key in active}
    done = dict.fromkeys(active, 0)
    spent = dict.fromkeys(active, 0)
    budget = int(cfg.cap * 1e9)
    gc.collect()
    try:
        while active:
            for key in list(active):
                messages = prepared[key][0]
                begin = clock()
                try:
                    done[key] = active[key].append_each(
                        messages[done[key]:min(done[key] + chunk, count)], times[key], done[key],
                        begin + budget - spent[key])
                except Exception as error:
                    del active[key]
                    fail(key, error)
                    continue
                spent[key] += clock() - begin
                if done[key] >= count or spent[key] >= budget:
                    del active[key]
    finally:
        for writer in writers.values():
            writer.close()
    return {key: times[key][:done[key]] for key in writers if key not in broken}


def phase_append(stores: list[Store], prepared: dict[str, Any], workdir: Path, run_no: int,
                 cfg: Config, runs: dict[str, Run], broken: dict[str, str], log) -> None:
    """Append N one at a time; also leaves the session of N that the later phases use."""
    chunk = max(1, min(1000, cfg.n // 100))
    measured = take_turns(stores, prepared, workdir, run_no, cfg, broken, "quest", cfg.n, chunk, False)
    for key, times in measured.items():
        runs[key].append_times = times
        if len(times) < cfg.n:
            store = next(s for s in stores if s.key == key)
            log(f"    {key}: capped after {len(times):,} of {cfg.n:,} appends ({cfg.cap:g} s); "
                "building the rest untimed")
            store.build(workdir / f"run{run_no}-{key}", "quest", prepared[key][0][len(times):])


def phase_durable(stores: list[Store], prepared: dict[str, Any], workdir: Path, run_no: int,
                  cfg: Config, runs: dict[str, Run], broken: dict[str, str], log) -> None:
    """Durable appends, every store in turn, ten at a time: an fsync costs whatever the disk
    is doing at that moment, and on a shared machine that changes tenfold within seconds."""
    measured = take_turns(stores, prepared, workdir, run_no, cfg, broken, "durable", cfg.durable_n, 10, True)
    for key, times in measured.items():
        runs[key].durable_times = times


phase_append.together = phase_durable.together = True     # type: ignore[attr-defined]


# Load and fork take turns three times over, so that each store's median of three tries is
# taken across the same stretch of time as the floor's.
PHASES = (phase_append, phase_load, phase_fork, phase_load, phase_fork, phase_load, phase_fork,
          phase_one, phase_small, phase_items, phase_durable)


# --- from runs to figures -------------------------------------------------------------------


def fit(times: list[int]) -> tuple[float, float]:
    """Least squares per-append cost (ns) = a + b * size over binned measurements, b >= 0."""
    k = len(times)
    if k == 0:
        return 0.0, 0.0
    bins = min(20, k)
    xs, ys = [], []
    for j in range(bins):
        lo, hi = j * k // bins, (j + 1) * k // bins
        if hi > lo:
            xs.append((lo + hi - 1) / 2)
            ys.append(sum(times[lo:hi]) / (hi - lo))
    if len(xs) < 2:
        return ys[0], 0.0
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = max(0.0, sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx) if sxx else 0.0
    return my - b * mx, b


def predicted(times: list[int], n: int) -> tuple[list[float], bool]:
    """Per-append ns for positions 0..n-1: measured where measured, extrapolated after."""
    k = len(times)
    if k >= n:
        return [float(t) for t in times[:n]], False
    a, b = fit(times)
    return [float(t) for t in times] + [a + b * i for i in range(k, n)], True


def window_edges(n: int, per_decade: int = 8) -> list[int]:
    """Window edges for the plot: the first 10 appends, then windows growing geometrically,
    per_decade of them in each power of ten, so a log-scaled size axis shows them evenly."""
    edges = [0]
    k = per_decade
    while True:
        edge = round(10 ** (k / per_decade))
        if edge >= n:
            break
        if edge > edges[-1]:
            edges.append(edge)
        k += 1
    return edges + [n]


def window_means(series: list[float]) -> list[tuple[float, float]]:
    """(geometric middle of the window, mean append in it) for each plot window."""
    edges = window_edges(len(series))
    out = []
    for lo, hi in zip(edges, edges[1:]):
        out.append((math.sqrt(max(lo, 1) * hi), sum(series[lo:hi]) / (hi - lo)))
    return out


def per_run_figures(run: Run, cfg: Config) -> tuple[dict[str, float], dict[str, Any]]:
    """Figures in display units (us, ms, x) for one store in one repeat, plus notes."""
    figs: dict[str, float] = {}
    info: dict[str, Any] = {}
    n, edge = cfg.n, cfg.edge
    if run.append_times:
        series, extrapolated = predicted(run.append_times, n)
        figs["append"] = sum(series) / n / 1e3
        # The median append in each window: how much one append costs at that size, without
        # the odd one that waited for the CPU on a shared machine.
        figs["append_first"] = statistics.median(series[:edge]) / 1e3
        figs["append_last"] = statistics.median(series[-edge:]) / 1e3
        figs["growth"] = figs["append_last"] / figs["append_first"] if figs["append_first"] else float("nan")
        info["append_measured"] = len(run.append_times)
        info["append_extrapolated"] = extrapolated
        info["curve"] = [(x, y / 1e3) for x, y in window_means(series)]
    if run.durable_times:
        series, extrapolated = predicted(run.durable_times, cfg.durable_n)
        figs["durable"] = sum(series) / cfg.durable_n / 1e3
        info["durable_measured"] = len(run.durable_times)
        info["durable_extrapolated"] = extrapolated
    for key, tries in run.samples.items():
        unit = UNITS.get(key, "µs" if key.startswith("lock") else "ms")
        figs[key] = statistics.median(tries) * (1e3 if unit == "ms" else 1e6)
    return figs, info


def summarise(stores: list[Store], runs: dict[str, list[Run]], cfg: Config) -> dict[str, Any]:
    per_run: dict[str, list[tuple[dict[str, float], dict[str, Any]]]] = {
        key: [per_run_figures(r, cfg) for r in rs] for key, rs in runs.items()}
    workloads: dict[str, Any] = {}
    for w in WORKLOADS:
        results: dict[str, Any] = {}
        for store in stores:
            if store.key not in per_run:
                continue
            values = [f[w] for f, _ in per_run[store.key] if w in f]
            if not values:
                why = store.unsupported.get(w) or store.unsupported.get(
                    "append" if w.startswith("append") or w == "growth" else w, "not measured")
                results[store.key] = {"value": None, "why": why}
                continue
            entry: dict[str, Any] = {"value": statistics.median(values), "runs": values}
            if w != "growth":
                base = RATIO_TO.get(w, "floor")
                ratios = [f[w] / floor_f[w]
                          for (f, _), (floor_f, _) in zip(per_run[store.key], per_run.get(base, []))
                          if w in f and floor_f.get(w)]
                if ratios:
                    entry["ratio"] = statistics.median(ratios)
            infos = [i for _, i in per_run[store.key]]
            if w in ("append", "append_first", "append_last", "growth") and any(
                    i.get("append_extrapolated") for i in infos):
                entry["extrapolated"] = True
                entry["measured"] = int(statistics.median(i["append_measured"] for i in infos))
            if w == "durable" and any(i.get("durable_extrapolated") for i in infos):
                entry["extrapolated"] = True
                entry["measured"] = int(statistics.median(i["durable_measured"] for i in infos))
            results[store.key] = entry
        n = {"durable": cfg.durable_n, "append_small": cfg.small}.get(w, cfg.n)
        workloads[w] = {"title": TITLES[w], "unit": UNITS[w], "n": n, "results": results}
    floor_runs = [f for f, _ in per_run.get("floor", [])]
    if any("copy_fsync" in f for f in floor_runs):
        ref: dict[str, Any] = {"copy_fsync_ms": statistics.median(f["copy_fsync"] for f in floor_runs
                                                                  if "copy_fsync" in f)}
        ratios = [f["fork"] / fl["copy_fsync"] for (f, _), fl in zip(per_run.get("subject", []), floor_runs)
                  if "fork" in f and fl.get("copy_fsync")]
        if ratios:
            ref["subject_ratio"] = statistics.median(ratios)
        workloads["fork"]["reference"] = ref
    subject_runs = [f for f, _ in per_run.get("subject", [])]
    locked = [f for f in subject_runs if "lock" in f and "lock_truncating" in f]
    if locked:
        # What taking the lock costs, beside the same lock with its record truncated and
        # rewritten (lessons 05-08), measured in the same run on the same folder
        workloads["append_small"]["reference"] = {
            "lock_us": statistics.median(f["lock"] for f in locked),
            "truncating_lock_us": statistics.median(f["lock_truncating"] for f in locked),
            "ratio": statistics.median(f["lock_truncating"] / f["lock"] for f in locked)}
    curves: dict[str, Any] = {}
    for key, items in per_run.items():
        runs_curves = [i["curve"] for _, i in items if "curve" in i]
        if not runs_curves:
            continue
        xs = [x for x, _ in runs_curves[0]]
        ys = [statistics.median(c[j][1] for c in runs_curves) for j in range(len(xs))]
        measured = int(statistics.median(i.get("append_measured", cfg.n) for _, i in items))
        curves[key] = {"size": xs, "us": ys, "measured_up_to": measured,
                       "extrapolated": measured < cfg.n}
    targets = []
    subject = workloads
    for w, limit, text in TARGETS:
        entry = subject[w]["results"].get("subject", {})
        value = entry.get("value") if w == "growth" else entry.get("ratio")
        targets.append({"workload": w, "target": text, "limit": limit, "value": value,
                        "met": None if value is None else value <= limit})
    errors = {key: sorted({e for r in rs for e in r.errors}) for key, rs in runs.items()}
    return {"workloads": workloads, "curves": curves, "targets": targets,
            "errors": {k: v for k, v in errors.items() if v}}


def benchmark(cfg: Config, subject: Subject, workdir: Path, log, only: list[str] | None = None) -> dict[str, Any]:
    stores = [s for s in all_stores(subject) if not only or s.key in only or s.key in ("floor", "subject")]
    available = [s for s in stores if s.available() is None]
    log(f"generating {cfg.n:,} messages (seed {cfg.seed})")
    messages = quest(cfg.n, cfg.seed)
    cfg.small = whole_turns(messages, SMALL_SESSION)
    # The session ends with every tool call answered and "one more" is a plain user message,
    # so a store that checks its tail on resume has nothing to repair.
    extra = one_more(cfg.seed)
    prepared = {s.key: (s.prepare(messages), s.prepare([extra])[0]) for s in available}
    runs: dict[str, list[Run]] = {s.key: [] for s in available}
    # The workload stays alive for the whole run; keep the collector from walking it again
    # and again, which would charge every store for the benchmark's own memory.
    gc.collect()
    gc.freeze()
    started = time.monotonic()
    for store in available:
        log(f"  warming up: {store.label}")
        msgs, one = prepared[store.key]
        warm_up(store, msgs, one, workdir / f"warm-{store.key}")
    broken: dict[str, str] = {}
    for r in range(cfg.repeat):
        # Workload by workload, every store in turn (in an order that rotates from run to run),
        # so that a store and the floor it is compared with are measured minutes apart at most
        # on a machine whose load changes.
        order = available[r % len(available):] + available[:r % len(available)]
        this_run = {s.key: Run() for s in order}
        try:
            for phase in PHASES:
                log(f"  run {r + 1}/{cfg.repeat}: {phase.__name__.removeprefix('phase_')}")
                # Write back what earlier phases left in the page cache (untimed), so that no
                # store's fsync pays for another store's hundred megabytes.
                os.sync()
                if getattr(phase, "together", False):
                    phase(order, prepared, workdir, r, cfg, this_run, broken, log)
                    continue
                for store in order:
                    if store.key in broken:
                        continue
                    msgs, one = prepared[store.key]
                    try:
                        phase(store, msgs, one, workdir / f"run{r}-{store.key}", cfg,
                              this_run[store.key], log)
                    except Exception as error:
                        if store.role in ("subject", "floor"):
                            raise
                        broken[store.key] = f"failed in run {r + 1}: {type(error).__name__}: {error}"
                        log(f"    {store.label} {broken[store.key]}")
        finally:
            for store in order:
                shutil.rmtree(workdir / f"run{r}-{store.key}", ignore_errors=True)
        for store in order:
            if store.key not in broken:
                runs[store.key].append(this_run[store.key])
    for key in broken:
        runs.pop(key, None)
    available = [s for s in available if s.key not in broken]
    elapsed = time.monotonic() - started
    result = summarise(available, runs, cfg)
    result["stores"] = {}
    for s in stores:
        why = s.available() or broken.get(s.key)
        result["stores"][s.key] = {**s.describe(), "status": "skipped" if why else "measured",
                                   **({"why": why} if why else {})}
    result["meta"] = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.system(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "lesson": subject.lesson,
        "n": cfg.n, "durable_n": cfg.durable_n, "repeat": cfg.repeat, "cap_seconds": cfg.cap,
        "quick": cfg.quick, "seed": cfg.seed,
        "message_bytes": round(mean_bytes(messages), 1),
        "edge_window": cfg.edge,
        "seconds": round(elapsed, 1),
    }
    return result


# --- presenting -----------------------------------------------------------------------------


def fmt_value(value: float, unit: str) -> str:
    if unit == "x":
        return fmt_ratio(value)
    if value >= 100_000:
        return f"{value:,.0f} {unit}"
    if value >= 100:
        return f"{value:,.0f} {unit}"
    if value >= 10:
        return f"{value:.1f} {unit}"
    return f"{value:.2f} {unit}"


def cell(entry: dict[str, Any], unit: str) -> tuple[str, str]:
    """(value text, ratio text) for one table cell."""
    if entry.get("value") is None:
        return "n/a", ""
    star = "*" if entry.get("extrapolated") else ""
    ratio = fmt_ratio(entry["ratio"]) if "ratio" in entry else ""
    return fmt_value(entry["value"], unit) + star, ratio


def fmt_ratio(ratio: float) -> str:
    if ratio >= 100:
        return f"{ratio:,.0f}x"
    if ratio >= 10:
        return f"{ratio:.1f}x"
    return f"{ratio:.2f}x"


def target_text(result: dict[str, Any], workload: str) -> str:
    for t in result["targets"]:
        if t["workload"] == workload:
            if t["met"] is None:
                return f"<= {t['limit']}x: n/a"
            return f"<= {t['limit']}x: {'met' if t['met'] else 'missed'} ({t['value']:.2f}x)"
    return ""


def columns(result: dict[str, Any]) -> list[str]:
    return [k for k, s in result["stores"].items() if s["status"] == "measured"]


def footnotes(result: dict[str, Any]) -> list[str]:
    notes = []
    meta = result["meta"]
    measured = {}
    for w in result["workloads"].values():
        for key, e in w["results"].items():
            if e.get("extrapolated"):
                measured.setdefault(key, set()).add(f"{e['measured']:,} of {w['n']:,}")
    for key, spans in measured.items():
        notes.append(f"* {result['stores'][key]['label']}: extrapolated. Capped at {meta['cap_seconds']:g} s "
                     f"per workload, it measured {' / '.join(sorted(spans))} appends; the rest is a "
                     "least-squares line of per-append cost against session size.")
    for key, s in result["stores"].items():
        if s["status"] == "skipped":
            notes.append(f"{s['label']}: skipped, {s['why']}.")
        for w, why in s.get("unsupported", {}).items():
            if s["status"] == "measured":
                notes.append(f"{s['label']}, {w}: n/a, {why}.")
    ref = result["workloads"]["fork"].get("reference")
    if ref:
        text = f"A file copy followed by fsync of the copy takes {fmt_value(ref['copy_fsync_ms'], 'ms')}"
        if "subject_ratio" in ref:
            text += f"; the reference store's fork is {ref['subject_ratio']:.2f}x that"
        notes.append(text + ".")
    lock = result["workloads"].get("append_small", {}).get("reference")
    if lock:
        notes.append(f"Taking and letting go of the measured store's lock takes "
                     f"{fmt_value(lock['lock_us'], 'µs')}; a lock whose holder's record is "
                     f"truncated, then rewritten (as lessons 05-08 write it) takes "
                     f"{fmt_value(lock['truncating_lock_us'], 'µs')} in the same run, "
                     f"{fmt_ratio(lock['ratio'])} that.")
    for key, errs in result.get("errors", {}).items():
        for e in errs:
            notes.append(f"{result['stores'][key]['label']}: {e}")
    return notes


def print_table(result: dict[str, Any], console) -> None:
    from rich.table import Table

    meta = result["meta"]
    keys = columns(result)
    table = Table(title=f"Session stores, N = {meta['n']:,} ({meta['message_bytes']:.0f}-byte messages), "
                        f"median of {meta['repeat']}", title_justify="left")
    table.add_column("workload")
    for key in keys:
        table.add_column(result["stores"][key]["label"], justify="right")
    table.add_column("target (reference store)")
    for w, data in result["workloads"].items():
        row = [data["title"].replace(" N", f" {data['n']:,}").replace("of N", f"of {data['n']:,}")]
        for key in keys:
            value, ratio = cell(data["results"].get(key, {}), data["unit"])
            row.append(value + (f"\n[dim]{ratio}[/dim]" if ratio else ""))
        text = target_text(result, w)
        row.append(text.replace("met", "[green]met[/green]").replace("missed", "[red]missed[/red]"))
        table.add_row(*row)
    console.print(table)
    from rich.markup import escape

    for note in footnotes(result):
        console.print(f"[dim]{escape(note)}[/dim]")


SHORT_TITLES = {
    "append": "append, per message",
    "append_first": "typical append, first 1%",
    "append_last": "typical append, last 1%",
    "growth": "growth, last 1% / first 1%",
    "append_one": "one append to a session of N (open, append, close)",
    "append_small": "one append to a small session of N (open, append, close)",
    "load": "load N",
    "fork": "fork N (floor: file copy)",
    "durable": "durable append (fsync), per message",
    "items": "SDK get_items(limit=20), 10,000 items (× SQLiteSession)",
}


def markdown_table(result: dict[str, Any]) -> str:
    """The table for a web page: narrow cells (value above ratio), the verdict beside the
    store it judges."""
    from bench.plot import _short

    keys = columns(result)
    ordered = [k for k in keys if k in ("floor", "subject")] + [k for k in keys if k not in ("floor", "subject")]
    head = ["workload"] + [_short(result["stores"][k]["label"]) for k in ordered[:2]] + ["target"] + \
        [_short(result["stores"][k]["label"]) for k in ordered[2:]]
    align = ["---"] + ["---:"] * 2 + [":---:"] + ["---:"] * (len(ordered) - 2)
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    for w, data in result["workloads"].items():
        cells = [SHORT_TITLES[w].replace(" N", f" {data['n']:,}")]
        for i, key in enumerate(ordered):
            if i == 2:
                text = target_text(result, w)
                if text:
                    limit, verdict = text.split(": ", 1)
                    word, _, value = verdict.partition(" ")
                    text = f"{limit.replace('<=', '≤')}<br>**{word}**" + (f" {value}" if value else "")
                cells.append(text)
            value, ratio = cell(data["results"].get(key, {}), data["unit"])
            cells.append(value.replace("*", "\\*") + (f"<br>{ratio}" if ratio else ""))
        lines.append("| " + re.sub(r"(\d)x", "\\1×", " | ".join(cells)) + " |")
    lines.append("")
    lines.extend(f"{note.replace('*', chr(92) + '*', 1) if note.startswith('*') else note}  " for note in footnotes(result))
    return "\n".join(lines) + "\n"


# --- command line ---------------------------------------------------------------------------


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.store", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sessions and short caps: a quick look")
    p.add_argument("--n", type=int, help="messages in the big session (default 100,000; 2,000 with --quick)")
    p.add_argument("--durable-n", type=int, help="appends for the durable workload (default 2,000; 100 quick)")
    p.add_argument("--repeat", type=int, help="runs to take the median of (default 5; 3 with --quick)")
    p.add_argument("--cap", type=float, help="seconds a store may spend on one append workload "
                                             "before the rest is extrapolated (default 20; 2 quick)")
    p.add_argument("--json", metavar="FILE", help="write every figure, run and note as JSON")
    p.add_argument("--svg", metavar="FILE", help="write the per-append cost plot as SVG")
    p.add_argument("--markdown", metavar="FILE", help="write the table as Markdown")
    p.add_argument("--impl", metavar="PATH", help="measure this agent.py instead of the latest solution")
    p.add_argument("--only", metavar="STORE", action="append",
                   help="measure only this store besides the floor and the subject (repeatable): "
                        "naive, sqlite3, postgres, langchain, agents")
    p.add_argument("--dir", metavar="FOLDER", help="where to write the sessions (default: a temp folder)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    args = parse(argv)
    # A pipe or a CI log gets a table wide enough to keep one row a line.
    console = Console() if sys.stdout.isatty() else Console(width=170)
    err = Console(stderr=True)
    cfg = Config(
        n=args.n or (2_000 if args.quick else 100_000),
        durable_n=args.durable_n or (100 if args.quick else 2_000),
        repeat=args.repeat or (3 if args.quick else 5),
        cap=args.cap if args.cap is not None else (2.0 if args.quick else 20.0),
        quick=args.quick,
    )
    if cfg.n < 2 or cfg.durable_n < 1 or cfg.repeat < 1:
        err.print("--n must be at least 2, --durable-n and --repeat at least 1")
        return 2
    cfg.durable_n = min(cfg.durable_n, cfg.n)
    try:
        from sessionlab.course import CourseError, find_root
        try:
            root = find_root()
            module, lesson, path = find_subject(root, args.impl)
        except CourseError as error:
            raise BenchError(str(error)) from None
    except BenchError as error:
        err.print(f"[red]cannot benchmark:[/red] {error}")
        return 2
    shown = os.path.relpath(path, root) if path.is_relative_to(root) else str(path)
    console.print(f"Measuring the session store of lesson [bold]{lesson}[/bold] ({shown}): "
                  f"N = {cfg.n:,}, durable N = {cfg.durable_n:,}, {cfg.repeat} run{'s' if cfg.repeat != 1 else ''}, cap {cfg.cap:g} s")
    workdir = Path(tempfile.mkdtemp(prefix="sessionlab-bench-", dir=args.dir))
    try:
        result = benchmark(cfg, Subject(module, lesson), workdir,
                           lambda text: err.print(text, style="dim", markup=False), args.only)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result["meta"]["module"] = shown
    print_table(result, console)
    console.print(f"[dim]{result['meta']['seconds']:.0f} s of measuring, "
                  f"Python {result['meta']['python']} on {result['meta']['cpus']} cpus[/dim]")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    if args.markdown:
        Path(args.markdown).write_text(markdown_table(result), encoding="utf-8")
    if args.svg:
        from bench.plot import write_svg
        write_svg(result, Path(args.svg))
    return 0


if __name__ == "__main__":
    sys.exit(main())
