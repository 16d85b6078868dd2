"""Fixtures for the command line's tests: throwaway copies of the course, and ways to run it.

A copy holds only the lessons a test needs (each lesson's tests cost a pytest process), with
the course's conftest.py and pyproject.toml so that pytest inside it behaves as in the real one.
"""

from __future__ import annotations

import atexit
import io
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from sessionlab.course import lesson_modules
from sessionlab.maintainers import lay_out_lesson
from sessionlab.cli import main

REPO = Path(__file__).resolve().parents[2]
SOLUTION = "solution"
STARTER = "starter"


_SHIPPED: dict[str, Path] = {}     # lesson name -> that lesson as it ships, laid out once


def shipped_lesson(name: str) -> Path:
    """lessons/`name` as it ships (its starter generated: lessons/ may hold a student's
    work), laid out once per test run: laying out asks git for every module, ~35 ms a
    lesson, and the command line's tests make hundreds of copies."""
    if name not in _SHIPPED:
        store = Path(tempfile.mkdtemp(prefix="sessionlab-shipped-"))
        atexit.register(shutil.rmtree, store, ignore_errors=True)
        lay_out_lesson(REPO, store, name)
        _SHIPPED[name] = store / "lessons" / name
    return _SHIPPED[name]


def make_course(target: Path, lessons: dict[str, str]) -> Path:
    """A course at `target` with these lessons; each lesson's modules are the starter or the
    solution."""
    (target / "lessons").mkdir(parents=True)
    (target / "solutions").mkdir()
    for name in ("conftest.py", "pyproject.toml"):
        shutil.copy2(REPO / name, target / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name, state in lessons.items():
        shutil.copytree(shipped_lesson(name), target / "lessons" / name, ignore=ignore)
        shutil.copytree(REPO / "solutions" / name, target / "solutions" / name, ignore=ignore)
        if state == SOLUTION:
            for path in lesson_modules(REPO / "solutions" / name):
                shutil.copy2(path, target / "lessons" / name / path.name)
    return target


@pytest.fixture(scope="session")
def prepared(tmp_path_factory):
    """A course whose lesson results are already cached: lesson 00 done, lesson 01 untouched.

    Built once per test run (one pytest process for both lessons, through `sessionlab list`);
    tests copy it, cache included, so that only what a test changes runs again.
    """
    course = make_course(tmp_path_factory.mktemp("prepared") / "course",
                         {"00_memory": SOLUTION, "01_append": STARTER})
    status = main(["--course", str(course), "list"])
    assert status == 0
    return course


@pytest.fixture
def course(prepared, tmp_path):
    """A private copy of the prepared course (lesson 00 done, 01 untouched; results cached)."""
    target = tmp_path / "course"
    shutil.copytree(prepared, target)
    (target / ".sessionlab" / "hints.json").unlink(missing_ok=True)
    return target


@pytest.fixture
def course_copy(tmp_path):
    """make_course under this test's tmp_path: course_copy({"00_memory": SOLUTION, ...})."""
    def make(lessons: dict[str, str], name: str = "course") -> Path:
        return make_course(tmp_path / name, lessons)
    return make


@dataclass
class Run:
    status: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


@pytest.fixture
def cli(capsys, monkeypatch):
    """Run `sessionlab ARGS...` in this process (stdin from `input`), capturing what it prints."""
    def run(*argv: str, input: str = "") -> Run:
        capsys.readouterr()
        monkeypatch.setattr(sys, "stdin", io.StringIO(input))
        status = main([str(a) for a in argv])
        captured = capsys.readouterr()
        return Run(status, captured.out, captured.err)
    return run


def run_module(*argv: str, cwd: Path | None = None, env: dict | None = None, input: str = "",
               timeout: float = 120) -> Run:
    """`python -m sessionlab ARGS...` in a subprocess, as a user in a pipe would run it."""
    environment = {**os.environ, **(env or {})}
    environment.pop("FORCE_COLOR", None)
    process = subprocess.run([sys.executable, "-m", "sessionlab", *map(str, argv)], cwd=cwd, env=environment,
                             input=input, capture_output=True, text=True, timeout=timeout)
    return Run(process.returncode, process.stdout, process.stderr)


def alive(marker: str) -> list[int]:
    """Processes whose command line holds `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline:
                found.append(int(entry))
    return found
