"""The store under fire, with helpers (lesson 10): a parent whose helper writes a side-chain.

SIGKILL at every write the store makes and inside every model request of a turn that asks a
helper, in a forked child, then, in this process: the parent's log loads; every side-chain
log that exists loads and has a pointer in the parent's log (the pointer is written before
the helper's first line); and a new writer resumes the parent, accepted by the validating
scripted model. Also: a side-chains folder planted as a symbolic link is never written
through.

Skipped for a store without side-chains (`--impl` of an earlier lesson).
"""

from __future__ import annotations

import errno
import json
import os
import signal
from pathlib import Path

import pytest

from sessionlab.town import HelperTown
from sessionlab.town_model import town_model

ASK_HELPER = "Ask a helper to find out what the elder knows."
THEN = "What did the elder say?"


@pytest.fixture
def helpers(store):
    if not hasattr(store, "sidechains"):
        pytest.skip("this store has no side-chains (lesson 10)")
    return store


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def run_child(store, folder: Path, kind: str, number: int) -> int:
    """Fork; the child asks a helper and dies at the `number`-th write or request. Returns
    how the child ended: -9 when it was killed, 0 when it never reached that point."""
    pid = os.fork()
    if pid == 0:            # the child: never returns
        try:
            counts = {"write": 0, "request": 0}
            real_write = os.write

            def write(fd, data):
                counts["write"] += 1
                if kind == "write" and counts["write"] == number:
                    real_write(fd, bytes(data)[:len(data) // 2])    # half a line, then death
                    die()
                return real_write(fd, data)

            os.write = write
            model = town_model()

            def request(body):
                counts["request"] += 1
                if kind == "request" and counts["request"] == number:
                    die()

            model.on_request(request)
            with store.SessionLog(folder, "quest") as log:
                agent = store.Agent(model.client(), model=model.model, tools=HelperTown(),
                                    session=log)
                agent.run(ASK_HELPER)
            os._exit(0)
        except BaseException:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def check_after(store, folder: Path, where: str) -> None:
    log = store.SessionLog(folder, "quest")
    log.load()                                      # 1. the parent loads
    pointed = {path for _, path in store.sidechains(folder, "quest")}
    side_folder = folder / "quest.sidechains"
    for path in sorted(side_folder.glob("*.jsonl")) if side_folder.is_dir() else []:
        store.SessionLog(side_folder, path.name.removesuffix(".jsonl")).load()   # 2. loads
        assert path in pointed, (
            f"{where}: the side-chain {path.name} exists and the parent's log has no "
            "pointer to it: the pointer must be written before the helper's first line")
    model = town_model()                            # 3. the parent resumes, accepted
    with store.SessionLog(folder, "quest") as log:
        agent = store.Agent(model.client(), model=model.model, tools=HelperTown(), session=log)
        agent.run(THEN)         # a refused request (HTTP 400) raises here
    lines = (folder / "quest.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(json.loads(line) for line in lines[:-1] if line), where


def test_sigkill_anywhere_in_a_helper_turn_leaves_every_log_loadable(helpers, tmp_path):
    """Killed at each write (half of it written) and inside each model request of a turn
    that asks a helper: every log loads, every side-chain has its pointer, the parent
    resumes."""
    points = 0
    for kind in ("write", "request"):
        for number in range(1, 40):
            folder = tmp_path / f"{kind}-{number}" / "sessions"
            folder.mkdir(parents=True)
            ended = run_child(helpers, folder, kind, number)
            if ended == 0:
                break               # the turn finished before that point: no more of this kind
            assert ended == -signal.SIGKILL, f"the child ended with {ended} at {kind} {number}"
            points += 1
            check_after(helpers, folder, f"killed at {kind} {number}")
    assert points >= 12, f"only {points} kill points: the turn should write and ask more"


def test_a_side_chains_folder_that_is_a_symbolic_link_is_never_written_through(helpers,
                                                                             tmp_path):
    """A `quest.sidechains` planted as a link to another folder: the helper is refused
    (OSError, ELOOP), nothing is written where it points, and the parent's call stays in
    its log for the repair."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (folder / "quest.sidechains").symlink_to(elsewhere)
    model = town_model()
    with helpers.SessionLog(folder, "quest") as log:
        agent = helpers.Agent(model.client(), model=model.model, tools=HelperTown(),
                              session=log)
        with pytest.raises(OSError) as raised:
            agent.run(ASK_HELPER)
    assert raised.value.errno == errno.ELOOP and "quest.sidechains" in str(raised.value)
    assert list(elsewhere.iterdir()) == [], "the helper wrote through the link"
    roles = [m["role"] for m in helpers.SessionLog(folder, "quest").load()]
    assert roles == ["user", "assistant"], roles
    check_after(helpers, folder, "after the refused helper")
