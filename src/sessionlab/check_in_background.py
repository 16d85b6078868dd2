"""The maintainers' check in a child process, started as the quick `pytest` starts.

The README's test command runs the kit's own tests, one after another in one process, and
the maintainers' check of every lesson: each solution on its lesson's tests, two pytest runs
at a time (the campaign's heavier checks run the same way). Run one after the other they took well over three minutes on two
cores, and for most of that one core sat idle. Started in a child process as soon as pytest
has collected, the check's runs fill that core while the kit's tests go on, and the tests
that report the check (tests/test_course.py, run last) wait for what is left of it.

The child prints one line of JSON as each check ends and the findings, in the order of
`maintainers.all_checks`, as its last line: the tests that report the check show the same
progress lines as when it ran in their own process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path

from .maintainers import Finding, run_all

# What the README's quick run checks: the static checks and every solution on its lesson.
# No corpus of wrong implementations (CI's own step); no starters, key tests of earlier
# lessons or strict docs build (the campaign's: the starters alone doubled the check).
QUICK = dict(corpus=False, key=False, docs=False, starters=False)
# What the campaign adds: the starters, the key tests, and the strict docs build
HEAVY = dict(corpus=False, static=False, lessons=False)


class BackgroundCheck:
    """`run_all(root, strict=strict, **options)` in a child process of its own session,
    so that stopping it stops the pytest runs it started too."""

    def __init__(self, root: Path, options: dict, strict: bool) -> None:
        self._errors = tempfile.TemporaryFile()
        self._child = subprocess.Popen(
            [sys.executable, "-m", __name__, str(root), json.dumps(options),
             "strict" if strict else "lenient"],
            stdout=subprocess.PIPE, stderr=self._errors, cwd=root, text=True,
            encoding="utf-8", start_new_session=True)

    def findings(self, progress: Callable[[Finding, int, int], None] | None = None
                 ) -> list[Finding]:
        """Wait for the check, calling `progress` as each check ends (at once for the
        ones already ended), and return every finding in the order of all_checks."""
        findings = None
        for message in self._messages():
            if "findings" in message:
                findings = [Finding(**each) for each in message["findings"]]
            elif progress:
                progress(Finding(**message["finding"]), message["done"], message["total"])
        if self._child.wait() != 0 or findings is None:
            self._errors.seek(0)
            said = self._errors.read().decode("utf-8", "replace").strip()
            raise RuntimeError(f"the maintainers' check stopped with exit status "
                               f"{self._child.returncode}:\n{said or '(it said nothing)'}")
        return findings

    def stop(self) -> None:
        """End the check and every pytest run it started, if it still runs (a quick run
        stopped early, by -x or Ctrl-C, does not wait for it)."""
        if self._child.poll() is None:
            try:
                os.killpg(self._child.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            self._child.wait()
        self._errors.close()

    def _messages(self) -> Iterator[dict]:
        assert self._child.stdout is not None
        for line in self._child.stdout:
            yield json.loads(line)


def _stop_when_orphaned(parent: int) -> None:
    """A pytest killed outright (SIGKILL, or a SIGTERM, which skips its own ending) cannot
    stop its check: the check stops itself, and its pytest runs, once its parent is gone."""
    while os.getppid() == parent:
        time.sleep(1)
    os.killpg(0, signal.SIGTERM)


def _child(root: str, options: str, strictness: str) -> None:
    # SIGTERM from stop() ends the run by an exception, so that the copy of the course
    # in a temporary folder is removed on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    threading.Thread(target=_stop_when_orphaned, args=(os.getppid(),), daemon=True).start()

    def say(message: dict) -> None:
        print(json.dumps(message), flush=True)

    def progress(finding: Finding, done: int, total: int) -> None:
        say({"finding": asdict(finding), "done": done, "total": total})

    findings = run_all(Path(root), strict=strictness == "strict", progress=progress,
                       **json.loads(options))
    say({"findings": [asdict(finding) for finding in findings]})


if __name__ == "__main__":
    _child(*sys.argv[1:])
