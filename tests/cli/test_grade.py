"""`sessionlab grade`: a class of student copies, each lesson in its own process with a timeout."""

from __future__ import annotations

import csv
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time

import pytest

from sessionlab.course import load_lesson

from .conftest import SOLUTION, STARTER, alive, make_course

# The campaign (tests/conftest.py): classes graded: a pytest run per student and lesson.
pytestmark = pytest.mark.campaign


@pytest.fixture
def classroom(tmp_path):
    """Two students on lesson 00: one finished, one untouched who added a test of his own."""
    room = tmp_path / "class"
    alice = make_course(room / "alice", {"00_memory": SOLUTION})
    (alice / ".sessionlab").mkdir(exist_ok=True)
    (alice / ".sessionlab" / "hints.json").write_text('{"seen": {"00.1": 2, "00.3": 1}}')
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
    # Into a pipe, no progress bar: a line as each student's lesson is graded
    said = sorted(line.split(" (")[0] for line in run.err.splitlines()
                  if line.startswith("graded "))
    assert said == ["graded 1/2: " + said[0].split(": ")[1],
                    "graded 2/2: " + said[1].split(": ")[1]], run.err
    assert {line.split(": ")[1] for line in said} == {"alice 00_memory", "bob 00_memory"}
    rows: dict[str, str] = {}
    for line in run.out.splitlines():       # the tests' table first, then the hints'
        if line.split():
            rows.setdefault(line.split()[0], line)
    passed, total = re.search(r"(\d+)/(\d+)", rows["alice"]).groups()     # however many
    assert passed == total and int(total) >= 10 and "1/1" in rows["alice"]
    assert f"0/{total}*" in rows["bob"], "bob's own extra test does not count, and his edit is flagged"
    assert "no such folder" in run.out
    assert "differs from the course's" in run.out

    with open(tmp_path / "grades.csv", newline="") as handle:
        table = {(r["student"], r["lesson"]): r for r in csv.DictReader(handle)}
    assert table[("alice", "00_memory")]["passed"] == total and table[("alice", "00_memory")]["state"] == "done"
    assert table[("bob", "00_memory")]["tests_edited"] == "yes"
    lesson = load_lesson(course, "00_memory")
    there = sum(len(task.hints) for task in lesson.tasks)
    assert (table[("alice", "00_memory")]["hints_used"],
            table[("alice", "00_memory")]["hints_available"]) == ("3", str(there)), \
        "alice asked for two hints of 00.1 and one of 00.3"
    assert table[("bob", "00_memory")]["hints_used"] == "0"
    assert "Hint levels asked for" in run.out

    report = json.loads((tmp_path / "grades.json").read_text())
    students = {s["name"]: s for s in report["students"]}
    assert report["tests"] == "course"
    tasks = [task.id for task in load_lesson(course, "00_memory").tasks]
    assert students["alice"]["lessons"]["00_memory"]["tasks"] == {task: "passed" for task in tasks}
    assert students["alice"]["lessons"]["00_memory"]["hints"]["levels"] == {
        "00.1": 2, "00.2": 0, "00.3": 1}
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


# Run once per grading run (the module is imported once): a process detached from
# the run (a new session, a cleared environment, its parent gone), then a wait for the
# test's go-ahead, so that the test starts its own detached process as the run goes on.
LEAVES_A_PROCESS = """

import os as _os, subprocess as _subprocess, sys as _sys, time as _time

if not _os.path.exists({ready!r}):
    _subprocess.Popen([_sys.executable, "-c", {daemon!r}, {marker!r}], env={{}},
                      start_new_session=True)
    open({ready!r}, "w").close()
    _until = _time.monotonic() + 60
    while not _os.path.exists({go!r}) and _time.monotonic() < _until:
        _time.sleep(0.02)
    if {hangs!r}:
        _time.sleep(600)
"""
# A daemon as PostgreSQL's pg_ctl starts one: forked, and its parent gone at once
DAEMON = "import os, time\nif os.fork():\n    os._exit(0)\ntime.sleep(120)\n"


@pytest.mark.parametrize("hangs", [False, True], ids=["run ends", "run times out"])
def test_a_run_leaves_no_process_behind_and_ends_no_other(cli, tmp_path, hangs):
    """What a student's run detached is killed when the run ends or times out; a process
    that other work of the grading process detached meanwhile (the kit's own tests grade
    beside a check whose PostgreSQL servers detach so) is none of the grader's."""
    token = secrets.token_hex(4)
    ready, go = tmp_path / "ready", tmp_path / "go"
    dave = make_course(tmp_path / "class" / "dave", {"00_memory": SOLUTION})
    with (dave / "lessons" / "00_memory" / "agent.py").open("a") as module:
        module.write(LEAVES_A_PROCESS.format(
            ready=str(ready), go=str(go), daemon=DAEMON, marker=f"student-{token}",
            hangs=hangs))

    def start_a_daemon_of_our_own():
        until = time.monotonic() + 120
        while not ready.exists() and time.monotonic() < until:
            time.sleep(0.02)
        # Its child is an orphan once it returns, as a postmaster is once pg_ctl does
        subprocess.run([sys.executable, "-c", DAEMON, f"ours-{token}"], check=True,
                       start_new_session=True)
        go.touch()

    helper = threading.Thread(target=start_a_daemon_of_our_own, daemon=True)
    helper.start()
    try:
        run = cli("grade", dave, "--own-tests", "--no-sandbox",
                  "--timeout", "15" if hangs else "120", "--csv", tmp_path / "g.csv")
        helper.join(5)
        assert go.exists(), f"the student's run never said it was ready: {run.text}"
        with open(tmp_path / "g.csv", newline="") as handle:
            state = next(csv.DictReader(handle))["state"]
        assert state == ("timeout" if hangs else "done"), run.text
        assert alive(f"student-{token}") == [], (
            "the process the student's run detached outlived the run")
        assert alive(f"ours-{token}"), (
            "grading killed a process it did not start: one that other work of the "
            "grading process detached while the run went on")
    finally:
        for pid in alive(f"student-{token}") + alive(f"ours-{token}"):
            os.kill(pid, signal.SIGKILL)


def test_a_grader_killed_outright_leaves_no_run_behind(tmp_path):
    """SIGKILL to the grading process, mid-run: each run's keeper is told as the grader
    goes, and stops its run and what the run detached."""
    token = secrets.token_hex(4)
    ready = tmp_path / "ready"
    run_code = (f"import subprocess, sys, time\n"
                f"subprocess.Popen([sys.executable, '-c', {DAEMON!r}, 'student-{token}'], "
                f"env={{}}, start_new_session=True)\n"
                f"open({str(ready)!r}, 'w').close()\ntime.sleep(600)\n")
    grader_code = ("import sys\nfrom pathlib import Path\n"
                   "from sessionlab.grading import run, sandbox\n"
                   "command = [sys.executable, '-c', sys.argv[1], sys.argv[2]]\n"
                   "run.execute(sandbox.limited(command, 600), cwd=Path.cwd(), env={}, "
                   "timeout=600, token='t')\n")
    grader = subprocess.Popen([sys.executable, "-c", grader_code, run_code,
                               f"run-{token}"], cwd=tmp_path)
    try:
        until = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < until:
            time.sleep(0.02)
        assert ready.exists(), "the run never started"
        grader.kill()
        grader.wait()
        until = time.monotonic() + 30
        while alive(f"-{token}") and time.monotonic() < until:
            time.sleep(0.05)
        assert alive(f"run-{token}") == [], "the run outlived the grader killed outright"
        assert alive(f"student-{token}") == [], (
            "what the run detached outlived the grader killed outright")
    finally:
        for pid in alive(f"-{token}"):
            os.kill(pid, signal.SIGKILL)


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


# --- options refused before anything runs --------------------------------------------


@pytest.mark.parametrize("option, value", [
    ("--jobs", "-3"), ("--jobs", "0"),
    ("--timeout", "0"), ("--timeout", "-5"), ("--timeout", "nan"), ("--timeout", "inf")])
def test_an_option_that_cannot_work_is_refused_in_one_line(cli, tmp_path, option, value):
    student = make_course(tmp_path / "class" / "alice", {})
    run = cli("grade", student, option, value, "--json", tmp_path / "g.json")
    assert run.status == 2, run.text
    assert run.err.count("\n") == 1 and option in run.err and value in run.err, run.err
    assert "Traceback" not in run.text and not (tmp_path / "g.json").exists()


@pytest.mark.parametrize("where", ["missing-folder/x.csv", "a-folder", "same"])
def test_an_output_that_cannot_be_written_is_refused_before_grading(cli, tmp_path, where):
    student = make_course(tmp_path / "class" / "alice", {"00_memory": SOLUTION})
    (tmp_path / "a-folder").mkdir()
    target = tmp_path / "g.json" if where == "same" else tmp_path / where
    run = cli("grade", student, "--csv", target, "--json", tmp_path / "g.json")
    assert run.status == 2, run.text
    assert run.err.count("\n") == 1 and "Traceback" not in run.text, run.err
    assert str(target.name) in run.err
    assert "alice" not in run.out, "refused before any grading"


def test_an_output_that_fails_at_the_end_loses_nothing_else(cli, tmp_path, monkeypatch):
    """The folder of the CSV goes away during grading: one line, and the JSON is written."""
    from sessionlab.grading import outputs

    student = make_course(tmp_path / "class" / "alice", {})       # missing: no run needed
    monkeypatch.setattr(outputs, "output_problem", lambda given: None)
    run = cli("grade", student, "--csv", tmp_path / "gone" / "g.csv",
              "--json", tmp_path / "g.json")
    assert run.status == 1, run.text
    assert "g.csv: not written" in run.err and "Traceback" not in run.text
    assert json.loads((tmp_path / "g.json").read_text())["students"][0]["name"] == "alice"


def test_grading_outside_a_course_needs_own_tests_said_out_loud(cli, tmp_path, monkeypatch):
    student = make_course(tmp_path / "class" / "alice", {"00_memory": SOLUTION})
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SESSIONLAB_ROOT", raising=False)
    run = cli("grade", student)
    assert run.status == 2, run.text
    assert "--own-tests" in run.err and "alice" not in run.out


def test_every_folder_and_every_test_counts_in_the_totals(cli, tmp_path):
    """A missing lesson scores 0 of the lesson's tests; a folder that is no course is a
    problem in the table, the CSV and the JSON, with the whole course as its total."""
    course = make_course(tmp_path / "teacher", {"00_memory": STARTER})
    room = tmp_path / "class"
    make_course(room / "alice", {})
    (room / "stray").mkdir(parents=True)
    run = cli("--course", course, "grade", room, "--csv", tmp_path / "g.csv",
              "--json", tmp_path / "g.json")
    assert run.status == 0, run.text
    report = {s["name"]: s for s in json.loads((tmp_path / "g.json").read_text())["students"]}
    total = report["alice"]["total"]
    assert total >= 10 and report["alice"]["lessons"]["00_memory"]["state"] == "missing"
    assert report["stray"]["problem"] and report["stray"]["total"] == total
    with open(tmp_path / "g.csv", newline="") as handle:
        rows = {r["student"]: r for r in csv.DictReader(handle)}
    assert rows["stray"]["state"] == "problem" and rows["stray"]["total"] == str(total)
    assert rows["alice"]["state"] == "missing" and rows["alice"]["total"] == str(total)
    assert re.search(rf"alice\s+missing\s+0/{total}", run.out), run.out
    assert re.search(rf"stray\s+-\s+0/{total}", run.out) and "stray: not a copy" in run.out


# --- the verdict on a run's report ---------------------------------------------------


def _report(ids, *, exitstatus=1, canary="failed", outcome="passed", extra=b"") -> bytes:
    results = [{"nodeid": n, "when": "call", "outcome": outcome} for n in ids]
    results.append({"nodeid": "lessons/00/test_c.py::test_c", "when": "call",
                    "outcome": canary})
    return json.dumps({"exitstatus": exitstatus, "results": results}).encode() + b"\n" + extra


IDS = [f"lessons/00/test_a.py::test_{i}" for i in range(3)]


@pytest.mark.parametrize("returncode, report, reason", [
    (0, _report(IDS, exitstatus=0, canary="passed"), "failing test was reported passed"),
    (1, _report(IDS, exitstatus=0), "the report says exit status 0, pytest ended with 1"),
    (1, _report(IDS, extra=_report(IDS)), "2 reports"),
    (1, _report(IDS[:2]), "1 of the course's 3 tests are missing"),
    (1, _report(IDS + ["lessons/00/test_x.py::test_x"]), "the course does not have"),
    (1, b"not json\n", "not the kit's JSON"),
])
def test_a_report_that_fails_a_check_is_suspect_and_scores_zero(returncode, report, reason):
    from sessionlab.grading.run import Raw, judge

    grade = judge(Raw(returncode, False, "", report, False), "00", IDS,
                  "lessons/00/test_c.py::test_c", 60)
    assert (grade.state, grade.passed, grade.total) == ("suspect", 0, 3), grade
    assert reason in grade.error


def test_an_honest_report_counts_and_a_run_that_did_not_finish_scores_zero_of_all():
    from sessionlab.grading.run import Raw, judge

    canary = "lessons/00/test_c.py::test_c"
    honest = judge(Raw(1, False, "", _report(IDS), False), "00", IDS, canary, 60)
    assert (honest.state, honest.passed, honest.total) == ("done", 3, 3)
    early = judge(Raw(0, False, "some output\n", b"", False), "00", IDS, canary, 60)
    assert (early.state, early.passed, early.total) == ("error", 0, 3)
    assert "exited early" in early.error and "some output" in early.error
    late = judge(Raw(None, True, "", _report(IDS), False), "00", IDS, canary, 60)
    assert (late.state, late.passed, late.total) == ("timeout", 0, 3)


def test_what_a_run_prints_or_reports_is_bounded(tmp_path):
    """Megabytes on stdout and on the report pipe: the grader keeps a bounded part."""
    from sessionlab.grading import run as grading

    code = ("import os, sys\nsys.stdout.write('x' * 10_000_000)\n"
            "os.write(int(sys.argv[1]), b'y' * 10_000_000)\n")
    raw = grading.execute([sys.executable, "-c", code, "{fd}"], cwd=tmp_path, env={},
                          timeout=60, token="t")
    assert raw.returncode == 0 and not raw.timed_out
    assert len(raw.output) == grading.OUTPUT_LIMIT
    assert raw.report_overflow and len(raw.report) == grading.REPORT_LIMIT


def test_doctor_says_whether_grading_can_use_a_sandbox(cli, monkeypatch):
    monkeypatch.setenv("OLLAMA_HOST", "http://127.0.0.1:9")       # refused at once
    monkeypatch.setenv("SESSIONLAB_NO_SANDBOX", "1")
    run = cli("doctor")
    line = next(line for line in run.out.splitlines() if "bubblewrap" in line)
    assert "not usable" in line and "SESSIONLAB_NO_SANDBOX" in line, line


def test_an_agent_that_is_a_link_is_not_followed(cli, tmp_path):
    """A link to another student's agent.py (or to a device) is no agent.py: the grader
    never reads through it."""
    course = make_course(tmp_path / "teacher", {"00_memory": STARTER})
    room = tmp_path / "class"
    alice = make_course(room / "alice", {})
    (alice / "lessons" / "00_memory").mkdir()
    (alice / "lessons" / "00_memory" / "agent.py").write_text("x = 1\n")
    mallory = make_course(room / "mallory", {})
    (mallory / "lessons" / "00_memory").mkdir()
    (mallory / "lessons" / "00_memory" / "agent.py").symlink_to(
        alice / "lessons" / "00_memory" / "agent.py")
    (mallory / "lessons" / "00_memory" / "test_memory.py").symlink_to("/dev/zero")
    run = cli("--course", course, "grade", mallory, "--json", tmp_path / "g.json")
    assert run.status == 0, run.text
    lesson = json.loads((tmp_path / "g.json").read_text())["students"][0]["lessons"]["00_memory"]
    assert (lesson["state"], lesson["passed"]) == ("error", 0), lesson
    assert "not a plain file" in lesson["error"] and lesson["tests_edited"]
