"""Lesson 09's erase under fire: SIGKILL at every system call an erase makes.

An erase is the one operation that rewrites a log (temporary file, fsync, rename, under the
lock). Each kill point is a fork() of this process that erases a message and dies by SIGKILL at
its k-th call of os.write, os.fsync, os.replace, os.open, os.utime, os.rename or os.unlink. Then
this process checks that the log shows the old conversation or the erased one, never a mix; that
the session takes a new writer (the killed one's lock died with it); that erasing again finishes
the job; and that once the blobs are collected no file of the folder holds the erased words.
"""

from __future__ import annotations

import os
import signal

import pytest

from sessionlab.testing import in_child

SECRET = "My sister Ilse lives at 12 Elm Street. " * 120      # ~5 KB: stored as a blob
QUOTE = "You told me: " + SECRET     # a quote of the whole: scrubbed, a blob too
CALLS = ("write", "fsync", "replace", "open", "utime", "rename", "unlink")


@pytest.fixture
def erasing(store):
    if not hasattr(store, "delete_session"):
        pytest.skip("this store has no erase (lesson 09)")
    return store


def holding(folder, text):
    needle = text.encode()
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if p.is_file() and needle in p.read_bytes())


def killed_at(point):
    """Patch the os calls an erase makes so that the `point`-th of them kills the process."""
    count = [0]
    for name in CALLS:
        real = getattr(os, name)

        def counted(*args, _real=real, **kwargs):
            count[0] += 1
            if count[0] == point:
                os.kill(os.getpid(), signal.SIGKILL)
            return _real(*args, **kwargs)
        setattr(os, name, counted)


def test_a_kill_anywhere_in_an_erase_leaves_the_old_log_or_the_new_and_loses_nothing(
        erasing, tmp_path):
    store = erasing
    folder = tmp_path / "sessions"
    with store.SessionLog(folder, "quest") as log:
        for message in ({"role": "user", "content": SECRET},
                        {"role": "assistant", "content": QUOTE},
                        {"role": "user", "content": "Ask the elder about the cave."}):
            log.append(message)
    before = store.SessionLog(folder, "quest").load()
    pristine = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    outcomes = set()
    point = 0
    while True:
        point += 1
        assert point < 200, "the erase never finished: more than 200 system calls"
        for path in list(folder.rglob("*")):
            if path.is_file():
                path.unlink()
        for relative, data in pristine.items():
            (folder / relative).parent.mkdir(mode=0o700, exist_ok=True)
            (folder / relative).write_bytes(data)

        def erase(point=point):
            killed_at(point)
            with store.SessionLog(folder, "quest") as log:
                return log.erase(0)
        try:
            finished = in_child(erase) is True
        except AssertionError:          # killed: no result
            finished = False
        shown = store.SessionLog(folder, "quest").load()
        erased = shown[0].get("content") == store.ERASED
        assert shown == before or (erased and shown[1]["content"] == (
            "You told me: " + store.ERASED) and shown[2] == before[2]), (
            f"killed at system call {point} of an erase, the log shows neither the old "
            f"conversation nor the erased one: {[m['content'][:40] for m in shown]}")
        outcomes.add("new" if erased else "old")
        with store.SessionLog(folder, "quest") as log:    # a new writer takes the session
            assert log.erase(0) is (not erased), (
                f"killed at system call {point}: erasing again should finish the job once")
            log.append({"role": "user", "content": "Still here."})
        store.collect_blobs(folder, grace=0)
        assert holding(folder, "Ilse") == [], (
            f"killed at system call {point}, then erased again and the blobs collected: "
            f"these still hold the words: {holding(folder, 'Ilse')}")
        assert store.SessionLog(folder, "quest").load()[-1]["content"] == "Still here."
        if finished:
            break
    assert outcomes == {"old", "new"}, f"the kill points reached only {outcomes}"
