"""What a test's code changes for the whole process is set back before the next test:
lesson code that leaves the recursion limit raised or the umask changed fails its own
test, and never every test after it (in the maintainers' runs, every wrong
implementation after it in the same process: a raised recursion limit lets deeply
nested JSON overflow the C stack, and the process dies with all of its results)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LEAVES = '''
import os
import sys

def test_one_that_changes_the_process(tmp_path):
    sys.setrecursionlimit(54_321)
    os.umask(0o000)
    os.chdir(tmp_path)

def test_the_next_finds_it_as_before():
    assert sys.getrecursionlimit() != 54_321, "the recursion limit was left raised"
    mask = os.umask(0o022)
    os.umask(mask)
    assert mask != 0, "the umask was left at 000"
    assert os.getcwd() == os.environ["STARTED_IN"], os.getcwd()
'''


def test_a_tests_changes_to_the_process_do_not_reach_the_next_test(tmp_path: Path):
    for name in ("conftest.py", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "lessons" / "01_append", tmp_path / "lessons" / "01_append",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "lessons" / "01_append" / "test_leaves.py").write_text(LEAVES)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         "lessons/01_append/test_leaves.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PY_COLORS": "0", "STARTED_IN": str(tmp_path)})
    assert done.returncode == 0 and "2 passed" in done.stdout, done.stdout + done.stderr
