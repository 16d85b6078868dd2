"""Every file the store creates is 0600 and every folder 0700, whatever the umask.

A session holds what a person said to a model, so only its owner may read it, or list the
sessions. Each test runs in a forked child with the umask under test (000: everything the
process creates would be world-writable; 022: the usual), so that the test process keeps its
own umask.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from sessionlab.scripted import MODEL_NAME
from sessionlab.town import Town

PASTE = "The elder's map of the cave, copied by hand. " * 200      # a blob


def modes(root: Path) -> dict[str, str]:
    """Every file and folder under `root` (root included) with its permission bits, in octal."""
    found = {".": oct(stat.S_IMODE(root.stat().st_mode))}
    for path in sorted(root.rglob("*")):
        found[str(path.relative_to(root))] = oct(stat.S_IMODE(path.lstat().st_mode))
    return found


def private(found: dict[str, str], root: Path) -> list[str]:
    """What is not private: files other than 0600, folders other than 0700."""
    wrong = []
    for name, mode in found.items():
        want = "0o700" if (root / name).is_dir() else "0o600"
        if mode != want:
            wrong.append(f"{name} is {mode}, should be {want}")
    return wrong


@pytest.mark.parametrize("umask", [0o000, 0o022], ids=["umask 000", "umask 022"])
def test_every_file_is_0600_and_every_folder_0700(store, tmp_path, child, umask):
    """A session started in a folder that does not exist yet (nor do its parents), with a blob,
    a lock held, an undo, a fork, and its meta file replaced through a temporary file."""
    root = tmp_path / "home"
    root.mkdir(mode=0o700)
    folder = root / "app" / "data" / "sessions"

    def work():
        os.umask(umask)
        seen = {}
        with store.SessionLog(folder, "quest") as log:
            agent = store.Agent(None, model=MODEL_NAME, tools=Town(), session=log)
            agent.record({"role": "user", "content": "Ask the elder about the cave."})
            agent.record({"role": "user", "content": PASTE})
            agent.flush()
            seen["lock, while held"] = oct(stat.S_IMODE((folder / "quest.lock").stat().st_mode))
            agent.undo()
        store.fork(folder, "quest", "branch")
        store.write_whole(folder / "branch.meta.json", b'{"format": 1, "id": "branch", "parent": "quest"}')
        return {"modes": modes(root), **seen}

    result = child(work)
    assert "raised" not in result, result
    found = result["modes"]
    blob = "app/data/sessions/blobs/" + hashlib.sha256(PASTE.encode()).hexdigest()
    for name in ("app", "app/data", "app/data/sessions", "app/data/sessions/blobs", blob,
                 "app/data/sessions/quest.jsonl", "app/data/sessions/branch.jsonl",
                 "app/data/sessions/branch.meta.json"):
        assert name in found, f"{name} was not created; found {sorted(found)}"
    assert result["lock, while held"] == "0o600", f"the lock file is {result['lock, while held']}"
    wrong = private(found, root)
    assert not wrong, f"with umask {umask:03o}: " + "; ".join(wrong)


def test_a_fork_is_0600_even_when_its_source_is_not(store, tmp_path, child):
    """A log written by another program with mode 0644: its fork is still the owner's only."""
    folder = tmp_path / "sessions"
    with store.SessionLog(folder, "quest") as log:
        log.append({"role": "user", "content": "Ask the elder about the cave."})
    (folder / "quest.jsonl").chmod(0o644)

    def work():
        os.umask(0)
        store.fork(folder, "quest", "branch")
        return modes(folder)

    found = child(work)
    assert found["branch.jsonl"] == "0o600" and found["branch.meta.json"] == "0o600", found


@pytest.mark.parametrize("umask", [0o000, 0o022], ids=["umask 000", "umask 022"])
def test_an_erase_and_a_collect_keep_every_file_0600(store, tmp_path, child, umask):
    """Lesson 09: the log an erase rewrites, the scrubbed blob it stores and what a delete or a
    collect leaves are private too."""
    if not hasattr(store, "delete_session"):
        pytest.skip("this store has no erase (lesson 09)")
    folder = tmp_path / "sessions"

    def work():
        os.umask(umask)
        with store.SessionLog(folder, "quest") as log:
            log.append({"role": "user", "content": "The elder's map of the cave."})
            log.append({"role": "assistant", "content": PASTE + "The elder's map of the cave."})
            log.erase(0)
        store.collect_blobs(folder, grace=0)
        return modes(folder)

    found = child(work)
    assert "raised" not in found, found
    assert any(name.startswith("blobs/") for name in found), f"no scrubbed blob: {found}"
    wrong = private(found, folder)
    assert not wrong, f"with umask {umask:03o}: " + "; ".join(wrong)
