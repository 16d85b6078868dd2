"""`sessionlab grade`: a class of student copies, each lesson in its own process with a timeout."""

from __future__ import annotations

import csv
import json
import re
import sys

import pytest

from sessionlab.course import load_lesson

from .conftest import SOLUTION, STARTER, make_course


@pytest.fixture
def classroom(tmp_path):
    """Two students on lesson 00: one finished, one untouched who added a test of his own."""
    room = tmp_path / "class"
    make_course(room / "alice", {"00_memory": SOLUTION})
    bob = make_course(room / "bob", {"00_memory": STARTER})
    with (bob / "lessons" / "00_memory" / "test_memory.py").open("a") as handle:
        handle.write("\n\ndef test_i_always_pass():\n    pass\n")
    (room / "notes.txt").write_text("not a student")
    return room


def test_grade_prints_a_table_and_writes_csv_and_json(cli, classroom, tmp_path, monkeypatch):
    course = make_course(tmp_path / "teacher", {"00_memory": STARTER})
    monkeypatch.chdir(course)
    sys.modules.pop("sessionlab_impl.impl_00_memory", None)

    run = cli("grade", classroom, tmp_path / "nobody",
              "--csv", tmp_path / "grades.csv", "--json", tmp_path / "grades.json")

    assert run.status == 0, run.text
    rows = {line.split()[0]: line for line in run.out.splitlines() if line.split()}
    passed, total = re.search(r"(\d+)/(\d+)", rows["alice"]).groups()     # however many
    assert passed == total and int(total) >= 10 and "1/1" in rows["alice"]
    assert f"0/{total}*" in rows["bob"], "bob's own extra test does not count, and his edit is flagged"
    assert "no such folder" in run.out
    assert "differs from the course's" in run.out

    with open(tmp_path / "grades.csv", newline="") as handle:
        table = {(r["student"], r["lesson"]): r for r in csv.DictReader(handle)}
    assert table[("alice", "00_memory")]["passed"] == total and table[("alice", "00_memory")]["state"] == "done"
    assert table[("bob", "00_memory")]["tests_edited"] == "yes"

    report = json.loads((tmp_path / "grades.json").read_text())
    students = {s["name"]: s for s in report["students"]}
    assert report["tests"] == "course"
    tasks = [task.id for task in load_lesson(course, "00_memory").tasks]
    assert students["alice"]["lessons"]["00_memory"]["tasks"] == {task: "passed" for task in tasks}
    failures = students["bob"]["lessons"]["00_memory"]["failures"]
    assert failures and all("not written yet" in f["message"] for f in failures)

    assert not [name for name in sys.modules if name.startswith("sessionlab_impl.")], (
        "the grader must never import a student's code into its own process")


def test_a_student_whose_code_never_returns_is_stopped_by_the_timeout(cli, tmp_path):
    carol = make_course(tmp_path / "class" / "carol", {"00_memory": SOLUTION})
    module = carol / "lessons" / "00_memory" / "agent.py"
    module.write_text(module.read_text().replace("    def run(self, user_text: str) -> str:\n",
                                                 "    def run(self, user_text: str) -> str:\n        while True: pass\n", 1))

    run = cli("grade", carol, "--own-tests", "--timeout", "2", "--csv", tmp_path / "g.csv")

    assert run.status == 1, run.text
    assert "every run timed out" in run.err, "a class that all timed out is no grading"
    assert "timeout" in next(line for line in run.out.splitlines() if line.startswith("carol"))
    with open(tmp_path / "g.csv", newline="") as handle:
        assert next(csv.DictReader(handle))["state"] == "timeout"


def test_own_tests_runs_each_students_copy_of_the_tests(cli, tmp_path):
    room = tmp_path / "class"
    bob = make_course(room / "bob", {"00_memory": STARTER})
    with (bob / "lessons" / "00_memory" / "test_memory.py").open("a") as handle:
        handle.write("\n\ndef test_i_always_pass():\n    pass\n")

    run = cli("grade", room, "--own-tests", "--json", tmp_path / "g.json")

    assert run.status == 0, run.text
    bob_row = next(line for line in run.out.splitlines() if line.startswith("bob"))
    passed, total = re.search(r"(\d+)/(\d+)", bob_row).groups()
    assert passed == "1" and int(total) >= 11, f"only bob's own extra test passes: {bob_row}"
    assert json.loads((tmp_path / "g.json").read_text())["tests"] == "own"


def test_grade_needs_at_least_one_student(cli, tmp_path):
    run = cli("grade", tmp_path / "nobody")
    assert run.status == 2
    assert "no such folder" in run.err
