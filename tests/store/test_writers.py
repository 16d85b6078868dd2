"""Eight writers on one session at once, in real processes, with the lock: nothing damaged.

Each writer is a fork() of this process (so nothing is imported again) that waits for the
others at a starting line (a pipe this process closes: every child's read returns at once),
then appends its lines through the final store's SessionLog. The blob threshold is set above
the line size, so the lines really are 64 KiB in the log, not references to blobs.

What the same writers do to a log without the lock, through print() and json.dump(), is shown
on the "store under fire" page with figures from tests/store/show_damage.py (a script, not a
test: damage is likely, not certain, and a test must not depend on luck).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

import pytest

# The campaign (tests/conftest.py): eight real writers of large lines at once.
pytestmark = pytest.mark.campaign

WRITERS = "abcdefgh"
LINE = 64 * 1024        # bytes per line, newline included


def content(name: str, number: int, size: int) -> dict:
    """Writer `name`'s message `number`, padded so that its line is exactly `size` bytes."""
    bare = {"role": "user", "content": f"{name} {number:03d} "}
    pad = size - len(json.dumps(bare, ensure_ascii=False)) - 1
    return {"role": "user", "content": f"{name} {number:03d} " + name * pad}


def start_together(names: str, work: Callable[[str], None]) -> list[int]:
    """Fork one writer per name; all wait at the starting line, then run `work(name)` and exit
    (status 0 unless it raised). Returns their wait statuses, in the order of `names`."""
    go_read, go_write = os.pipe()
    pids = []
    for name in names:
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                os.close(go_write)
                os.read(go_read, 1)             # returns b"" when this process closes its end: go
                work(name)
                status = 0
            finally:
                os._exit(status)
        pids.append(pid)
    os.close(go_read)
    os.close(go_write)                          # the starting shot
    return [os.waitpid(pid, 0)[1] for pid in pids]


def run_writers(store, folder: Path, count: int, size: int, lock_per_line: bool) -> list[int]:
    """Start the eight writers together; return their exit statuses."""
    options = dict(timeout=120, blob_threshold=2 * size)

    def write(name: str) -> None:
        if lock_per_line:       # take and let go of the session for every line
            for number in range(count):
                with store.SessionLog(folder, "crowd", **options) as log:
                    log.append(content(name, number, size))
        else:                   # one writer for its whole life, as an agent is
            with store.SessionLog(folder, "crowd", **options) as log:
                for number in range(count):
                    log.append(content(name, number, size))

    return start_together(WRITERS, write)


def check_log(store, path: Path, count: int, size: int) -> list[tuple[str, int]]:
    """Every line whole and one of the expected ones; returns (writer, number) in file order."""
    data = path.read_bytes()
    assert data.endswith(b"\n"), f"the log ends in a line cut short: ...{data[-80:]!r}"
    lines = data.split(b"\n")[:-1]
    damaged, order = [], []
    for number, line in enumerate(lines, start=1):
        try:
            name, index, pad = json.loads(line)["content"].split(" ")
            assert name in WRITERS and pad.count(name) == len(pad) and len(line) + 1 == size
        except (ValueError, KeyError, AssertionError):
            damaged.append(number)
            continue
        order.append((name, int(index)))
    assert not damaged, (f"{len(damaged)} of {len(lines)} lines are damaged (interleaved or cut), "
                         f"the first at line {damaged[0]}")
    expected = {(name, n) for name in WRITERS for n in range(count)}
    assert len(order) == len(expected) and set(order) == expected, (
        f"the log holds {len(order)} lines; expected each of the {len(expected)} exactly once "
        f"(missing: {sorted(expected - set(order))[:5]}, extra or twice: {len(order) - len(set(order))})")
    for name in WRITERS:
        mine = [n for who, n in order if who == name]
        assert mine == list(range(count)), f"writer {name}'s lines are out of order: {mine[:10]}..."
    assert len(store.SessionLog(path.parent, "crowd").load()) == len(expected)
    return order


def test_eight_locked_writers_of_500_lines_of_64_kib_damage_nothing(store, tmp_path):
    statuses = run_writers(store, tmp_path, count=500, size=LINE, lock_per_line=False)
    assert statuses == [0] * len(WRITERS), f"a writer failed (wait statuses {statuses})"
    order = check_log(store, tmp_path / "crowd.jsonl", count=500, size=LINE)
    # Each writer held the session for its whole life: its 500 lines are one block.
    blocks = [order[i][0] for i in range(0, len(order), 500)]
    assert all(order[i][0] == order[i - i % 500][0] for i in range(len(order))), \
        "a writer's lines are interleaved with another's, though it held the lock throughout"
    assert sorted(blocks) == sorted(WRITERS)
    assert not (tmp_path / "crowd.lock").exists(), "the last writer left its lock file behind"


def test_eight_writers_taking_the_lock_for_every_line_damage_nothing(store, tmp_path):
    """The lock changes hands hundreds of times (its file removed and made again each time)."""
    statuses = run_writers(store, tmp_path, count=40, size=4096, lock_per_line=True)
    assert statuses == [0] * len(WRITERS), f"a writer failed (wait statuses {statuses})"
    check_log(store, tmp_path / "crowd.jsonl", count=40, size=4096)
    assert not (tmp_path / "crowd.lock").exists(), "the last writer left its lock file behind"
