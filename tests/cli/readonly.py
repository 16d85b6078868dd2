"""Running the command where a folder cannot be written, as root too.

Root writes through any permission bits, so as root the folder is bound read-only with
bubblewrap (the kernel then answers EROFS, as for a read-only mount); as anyone else, its
write bits are taken away for the run.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import Run


def run_read_only(folders: list[Path], *argv, cwd: Path, env: dict | None = None,
                  input: str = "") -> Run:
    """`python -m sessionlab ARGV` in `cwd`, with every folder in `folders` read-only."""
    command = [sys.executable, "-m", "sessionlab", *map(str, argv)]
    environment = {**os.environ, **(env or {})}
    environment.pop("FORCE_COLOR", None)
    if os.geteuid() == 0:
        if shutil.which("bwrap") is None:
            pytest.skip("as root a folder is read-only only in a read-only bind (bubblewrap is missing)")
        binds = [arg for folder in folders for arg in ("--ro-bind", str(folder), str(folder))]
        command = ["bwrap", "--dev-bind", "/", "/", *binds, "--", *command]
        restore = []
    else:
        restore = [(folder, folder.stat().st_mode) for folder in folders]
        for folder in folders:
            folder.chmod(stat.S_IMODE(folder.stat().st_mode) & ~0o222)
    try:
        done = subprocess.run(command, cwd=cwd, env=environment, input=input, capture_output=True,
                              text=True, timeout=120)
    finally:
        for folder, mode in restore:
            folder.chmod(mode)
    return Run(done.returncode, done.stdout, done.stderr)
