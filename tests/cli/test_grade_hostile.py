"""`sessionlab grade` on a hostile class: every attack is stopped or flagged.

The class is built here, on lesson 00 only (each student costs one pytest process):
an honest student, a forger who makes pytest report every test passed and writes a fake
report into every pipe it finds, a starter beside a solution's unchecked-hash .pyc and a
`pytest.py` in the folder's root, a rogue who reads and writes another student's folder,
appends a test to the course copy, drops a file into the kit, reads the grader's
environment, connects to a local port, leaves a `sleep` behind and detaches a process
that keeps rewriting the CSV and the JSON, a student whose code does not compile, one
missing the lesson, a folder that is not a course, and one whose failures are megabytes
long. Run under bubblewrap, and without it.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import py_compile
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sessionlab.grading import sandbox

from .conftest import REPO, SOLUTION, STARTER, alive, make_course

# The campaign (tests/conftest.py): a hostile class graded, in the sandbox and without it.
pytestmark = pytest.mark.campaign

LESSON = "00_memory"
AGENT = Path("lessons") / LESSON / "agent.py"

FORGER = '''
import json as _json, os as _os, stat as _stat
import _pytest.reports as _reports

_made = _reports.TestReport.from_item_and_call.__func__


def _passed(cls, item, call):
    report = _made(cls, item, call)
    report.outcome, report.longrepr = "passed", None
    return report


_reports.TestReport.from_item_and_call = classmethod(_passed)
for _fd in range(3, 64):      # a fake report into every pipe: the grader's is one of them
    try:
        if _stat.S_ISFIFO(_os.fstat(_fd).st_mode):
            _os.write(_fd, _json.dumps({"exitstatus": 0, "results": []}).encode() + b"\\n")
    except OSError:
        pass
'''

DETACHED = '''
import os, sys, time
if os.fork():
    os._exit(0)
end = time.time() + 60
while time.time() < end:
    for path in sys.argv[2:]:
        try:
            with open(path, "w") as handle:
                handle.write("forged by a process the student left behind\\n")
        except OSError:
            pass
    time.sleep(0.05)
'''

ROGUE = '''
import os as _os, socket as _socket, subprocess as _subprocess, sys as _sys
import tempfile as _tempfile


def _attacks():
    found = []

    def attempt(name, action):
        try:
            found.append(f"{{name}}:OK:{{action()}}")
        except Exception as error:
            found.append(f"{{name}}:{{type(error).__name__}}")

    attempt("read-alice", lambda: open({alice!r}).read(30).replace("\\n", " "))
    attempt("write-alice", lambda: open({alice!r}, "a").write("\\n# rogue was here\\n"))
    attempt("course", lambda: open({course_test!r}, "a").write(
        "\\n\\ndef test_rogue_bonus():\\n    pass\\n"))
    attempt("kit", lambda: open({kit_file!r}, "w").write("def test_rogue():\\n    pass\\n"))
    attempt("env", lambda: _os.environ.get("SESSIONLAB_HOSTILE_SECRET"))
    attempt("net", lambda: _socket.create_connection(("127.0.0.1", {port}), 2).close())
    attempt("sleep", lambda: _subprocess.Popen(["sleep", {sleep!r}]).pid)
    attempt("detached", lambda: _subprocess.Popen(
        [_sys.executable, "-c", {detached!r}, {marker!r}, *{outputs!r}], env={{}},
        start_new_session=True, stdout=_subprocess.DEVNULL,
        stderr=_subprocess.DEVNULL).pid)
    return "; ".join(found)


_done = _os.path.join(_tempfile.gettempdir(), "rogue-done")
if not _os.path.exists(_done):           # once per run, not once per test
    with open(_done, "w") as _handle:
        _handle.write(_attacks())
with open(_done) as _handle:
    raise RuntimeError("ROGUE " + _handle.read())
'''

LOUD = '''
print("noise " * 500_000)
raise RuntimeError("loud " * 700_000)
'''


def sha(path: Path) -> str:
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]:
        digest.update(str(file).encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()


def append(path: Path, code: str) -> None:
    path.write_text(path.read_text() + "\n" + code)


@pytest.fixture
def listener():
    server = socket.create_server(("127.0.0.1", 0))
    server.setblocking(False)
    yield server
    server.close()


def build_class(tmp_path: Path, listener: socket.socket, *, full: bool) -> dict:
    """The hostile class (`full`: every student; else those the sandbox changes things
    for) and what the attacks aim at."""
    course = make_course(tmp_path / "teacher", {LESSON: STARTER})
    room = tmp_path / "class"
    alice = make_course(room / "alice", {LESSON: SOLUTION})
    token = secrets.token_hex(4)
    kit_file = sandbox.kit_folder() / f"_rogue_{token}.py"
    outputs = [str(tmp_path / "grades.csv"), str(tmp_path / "grades.json")]
    rogue = make_course(room / "rogue", {LESSON: SOLUTION})
    append(rogue / AGENT, ROGUE.format(
        alice=str(alice / AGENT), course_test=str(course / "lessons" / LESSON / "test_memory.py"),
        kit_file=str(kit_file), port=listener.getsockname()[1], sleep=f"1234.{token}",
        detached=DETACHED, marker=f"detached-{token}", outputs=outputs))
    forger = make_course(room / "forger", {LESSON: STARTER})
    append(forger / AGENT, FORGER)
    if full:
        # One student for both (each student costs a run): a pytest.py in the root, and
        # the solution's bytecode beside a starter.
        pyc = make_course(room / "pyc", {LESSON: STARTER})
        (pyc / "pytest.py").write_text("raise SystemExit('a student pytest.py ran')\n")
        cache = pyc / "lessons" / LESSON / "__pycache__"
        cache.mkdir()
        py_compile.compile(str(REPO / "solutions" / LESSON / "agent.py"),
                           cfile=str(cache / "agent.cpython-311.pyc"),
                           invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
        broken = make_course(room / "broken", {LESSON: SOLUTION})
        append(broken / AGENT, "def broken(:\n    pass\n")
        make_course(room / "missing", {})
        (room / "stray").mkdir()
        (room / "stray" / "notes.txt").write_text("not a copy of the course")
        loud = make_course(room / "loud", {LESSON: SOLUTION})
        append(loud / AGENT, LOUD)
    return {"course": course, "room": room, "alice": alice, "kit_file": kit_file,
            "outputs": [Path(p) for p in outputs], "sleep": f"1234.{token}",
            "detached": f"detached-{token}"}


def grade_class(cli, tmp_path, monkeypatch, listener, *, sandboxed: bool, full: bool):
    c = build_class(tmp_path, listener, full=full)
    secret = f"hunter2-{secrets.token_hex(4)}"
    monkeypatch.setenv("SESSIONLAB_HOSTILE_SECRET", secret)
    before = {"course": sha(c["course"]), "alice": sha(c["alice"]), "kit": sha(sandbox.kit_folder())}
    try:
        run = cli("--course", c["course"], "grade", c["room"], "--jobs", "4", "--timeout", "90",
                  *([] if sandboxed else ["--no-sandbox"]),
                  "--csv", c["outputs"][0], "--json", c["outputs"][1])
        leftovers = alive(c["sleep"]) + alive(c["detached"])
        written = {p: p.read_bytes() for p in c["outputs"]}
        time.sleep(1)      # long enough for a surviving rewriter (it writes every 0.05 s)
        kit_touched = c["kit_file"].exists()
    finally:
        c["kit_file"].unlink(missing_ok=True)
    assert not leftovers, f"processes of a student outlived grading: {leftovers}"
    assert {p: p.read_bytes() for p in c["outputs"]} == written, "the outputs were rewritten"
    grades = {(r["student"], r["lesson"]): r for r in csv.DictReader(
        io.StringIO(written[c["outputs"][0]].decode()))}
    report = json.loads(written[c["outputs"][1]])
    students = {s["name"]: s for s in report["students"]}
    everything = run.text + b"".join(written.values()).decode()
    assert secret not in everything, "student code saw the grader's environment"
    try:
        connections = [listener.accept()]
    except BlockingIOError:
        connections = []
    after = {"course": sha(c["course"]), "alice": sha(c["alice"]), "kit": sha(sandbox.kit_folder())}
    return run, grades, students, report, before, after, kit_touched, connections


def common_checks(run, grades, students):
    alice = students["alice"]["lessons"][LESSON]
    total = alice["total"]
    assert alice["state"] == "done" and alice["passed"] == total >= 10, alice
    assert total == students["alice"]["total"], "alice's total is the course's, no more"
    forger = students["forger"]["lessons"][LESSON]
    assert forger["state"] == "suspect" and forger["passed"] == 0, forger
    assert "grader's own failing test" in forger["error"], forger["error"]
    assert grades[("forger", LESSON)]["state"] == "suspect"
    assert "forger" in run.out and "suspect" in run.out
    rogue = students["rogue"]["lessons"][LESSON]
    assert rogue["passed"] == 0 and rogue["total"] == total, rogue
    message = rogue["failures"][0]["message"]
    assert "env:OK:None" in message, message
    return total, message


def test_a_hostile_class_under_bubblewrap_is_stopped_or_flagged(cli, tmp_path, monkeypatch,
                                                               listener):
    if not sandbox.probe().usable:
        pytest.skip(f"bubblewrap is not usable here: {sandbox.probe().why}")
    run, grades, students, report, before, after, kit_touched, connections = grade_class(
        cli, tmp_path, monkeypatch, listener, sandboxed=True, full=True)
    assert run.status == 0, run.text
    assert report["sandbox"]["used"] is True
    assert "without a sandbox" not in run.err
    total, message = common_checks(run, grades, students)
    for attack in ("read-alice", "write-alice", "course", "kit", "net"):
        assert f"{attack}:OK" not in message, f"{attack} got through the sandbox: {message}"
    assert "sleep:OK" in message and "detached:OK" in message, message
    assert before == after, "the course copy, the kit or another student changed"
    assert not kit_touched and not connections
    assert not report["alarms"]

    assert any("pytest.py" in flag for flag in students["pyc"]["flags"])
    pyc = students["pyc"]["lessons"][LESSON]
    assert pyc["state"] == "not started" and pyc["passed"] == 0, pyc
    assert any("hash-based bytecode" in flag for flag in pyc["flags"]), pyc
    assert "hash-based bytecode" in grades[("pyc", LESSON)]["flags"]
    for name, state in (("broken", "syntax error"), ("missing", "missing")):
        entry = students[name]["lessons"][LESSON]
        assert (entry["state"], entry["passed"], entry["total"]) == (state, 0, total), entry
        assert grades[(name, LESSON)]["state"] == state
    assert "line" in students["broken"]["lessons"][LESSON]["error"]
    stray = students["stray"]
    assert stray["problem"] and stray["total"] == total, "a folder that is no course"
    assert grades[("stray", "")]["state"] == "problem" and "stray" in run.out

    loud = students["loud"]["lessons"][LESSON]
    assert loud["total"] == total and all(len(f["message"]) < 1100 for f in loud["failures"])
    sizes = [len(Path(p).read_bytes()) for p in (tmp_path / "grades.csv", tmp_path / "grades.json")]
    assert sizes[0] < 50_000 and sizes[1] < 1_000_000, sizes
    assert max(len(line) for line in run.out.splitlines()) < 400


def test_a_hostile_class_without_a_sandbox_is_flagged(cli, tmp_path, monkeypatch, listener):
    run, grades, students, report, before, after, kit_touched, connections = grade_class(
        cli, tmp_path, monkeypatch, listener, sandboxed=False, full=False)
    assert "grading without a sandbox" in run.err
    assert report["sandbox"]["used"] is False
    total, message = common_checks(run, grades, students)
    rows = list(csv.DictReader(io.StringIO(Path(tmp_path / "grades.csv").read_text())))
    # Without a sandbox the rogue's writes land; each one is named, and the exit says so.
    assert "write-alice:OK" in message and "course:OK" in message and kit_touched
    assert run.status == 1, run.text
    for label in ("student alice", "the course copy", "the kit"):
        assert any(label in alarm for alarm in report["alarms"]), report["alarms"]
        assert label in run.err
        assert any(label in r["error"] for r in rows if r["state"] == "alarm")
    # ... but the course's tests were taken before anyone ran: nobody got the rogue's test.
    assert students["alice"]["lessons"][LESSON]["total"] == total


def _sandboxed(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    (tmp_path / "lessons" / LESSON).mkdir(parents=True)
    command = sandbox.bwrap_args(tmp_path, LESSON, []) + [sys.executable, "-c", code]
    return subprocess.run(sandbox.limited(command, 30), capture_output=True, text=True,
                          env=sandbox.clean_environment({}), timeout=120)


def test_code_in_the_sandbox_is_nobody_and_may_lower_and_raise_its_file_size_limit(tmp_path):
    """The lessons' own tests drop to `nobody` when they run as root, and set a file size
    limit of their own (raising the hard one): both must work in the sandbox."""
    if not sandbox.probe().usable:
        pytest.skip(f"bubblewrap is not usable here: {sandbox.probe().why}")
    done = _sandboxed(
        "import os, resource\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1000, resource.RLIM_INFINITY))\n"
        "print(os.geteuid(), os.access('/grade', os.W_OK))\n", tmp_path)
    assert done.returncode == 0, done.stderr
    uid, writable = done.stdout.split()
    assert uid != "0" and writable == "False", done.stdout


@pytest.mark.skipif(not os.environ.get("SESSIONLAB_GRADE_WHOLE_COURSE"),
                    reason="grades every lesson (minutes): a step of its own in .ci/run")
def test_the_reference_solutions_score_every_test_of_every_lesson_in_the_sandbox(cli,
                                                                                 tmp_path):
    lessons = sorted(p.parent.name for p in (REPO / "lessons").glob("*/lesson.toml"))
    student = make_course(tmp_path / "class" / "reference", {n: SOLUTION for n in lessons})
    run = cli("--course", REPO, "grade", student, "--json", tmp_path / "g.json")
    assert run.status == 0, run.text
    report = json.loads((tmp_path / "g.json").read_text())
    assert report["sandbox"]["used"] is bool(sandbox.probe().usable)
    entry = report["students"][0]
    assert entry["passed"] == entry["total"] > 0, {
        name: (lesson["state"], lesson["error"], lesson["failures"][:1])
        for name, lesson in entry["lessons"].items() if lesson["state"] != "done"}


def test_the_private_tmp_never_hides_python_or_the_kit(monkeypatch, tmp_path):
    """A clone of the course under /tmp (as CI may make one): the sandbox's own /tmp
    is mounted before Python, the venv and the kit are bound, or it would hide them
    and grading would fall back to no sandbox at all."""
    under_tmp = Path("/tmp") / "a-course-clone" / ".venv"
    monkeypatch.setattr(sandbox, "python_folders", lambda: [under_tmp])

    args = sandbox.bwrap_args(tmp_path, "00_memory", [])

    tmpfs = args.index("/tmp", args.index("--tmpfs"))
    bound = args.index(str(under_tmp))
    assert tmpfs < bound, "the private /tmp is mounted over the venv bound before it"


def test_without_the_sandbox_a_run_folder_is_searchable_by_nobody(tmp_path):
    """Lesson tests run as root drop to `nobody` in a child that must reach its own
    files below the run folder (lesson 05 does): searchable, not listable."""
    from sessionlab.grading import run

    folder = run._fresh_folder(tmp_path)

    assert folder.stat().st_mode & 0o777 == 0o711
