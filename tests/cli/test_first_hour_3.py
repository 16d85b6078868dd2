"""A newcomer's first hour, round 3: what new users typed (and what their editors and shells
did around them) that went wrong, run as they did it.

Every failure here is one line naming what was wrong, with no traceback and no hang, and
loses nothing.
"""

from __future__ import annotations

import os
import shutil

import pytest

from sessionlab.cli import main, runner

from .conftest import REPO, SOLUTION, STARTER, Run, make_course, run_module
from .test_first_hour import no_runs, one_line_error  # noqa: F401  (fixtures)
from .terminal import default_sigint

# The campaign (tests/conftest.py): odd inputs to every command, each in a process of its own.
pytestmark = pytest.mark.campaign

GUARD = 120        # seconds: a guard against a hang, not a measurement


def no_traceback(run: Run) -> None:
    assert "Traceback" not in run.text, run.text


# --- 1. an editor's files in a lesson folder ---------------------------------------------


def litter(folder) -> list[str]:
    """What editors leave beside agent.py while it is being edited."""
    os.symlink("student@laptop.4242:1700000000", folder / ".#agent.py")   # Emacs' lock
    (folder / "#agent.py#").write_text("half an auto-save")              # Emacs' auto-save
    (folder / "agent.py~").write_text("an older agent.py")               # a backup
    (folder / ".agent.py.swp").write_bytes(b"b0VIM 9.0\0\xff\xfe" * 40)  # vim's swap
    (folder / ".agent.py.swo").write_bytes(b"b0VIM 9.0\0\xff")
    (folder / "4913").write_text("")                                     # vim's write test
    return [".#agent.py", "#agent.py#", "agent.py~", ".agent.py.swp", ".agent.py.swo", "4913"]


def odd_files(folder) -> None:
    """Things no editor should leave, but that a folder can hold: none may hang or crash."""
    os.symlink("nowhere/at/all.py", folder / "notes.py")        # a link to nothing
    os.symlink("loop.py", folder / "loop.py")                    # a link to itself
    os.mkfifo(folder / "pipe")                                   # a FIFO
    os.mkfifo(folder / "scratch.py")                             # a FIFO named like a module
    (folder / "old.py").mkdir()                                  # a folder named x.py
    (folder / "old.py" / "inside.txt").write_text("kept")


LESSON_COMMANDS = [["check", "00"], ["check", "01"], ["list"], ["hint", "01"],
                   ["solution", "00"], ["reset", "01"], ["diff", "00", "01"],
                   ["diff", "00", "01", "--solutions", "--force"]]


@pytest.mark.timeout(GUARD)
@pytest.mark.parametrize("argv", LESSON_COMMANDS, ids=" ".join)
def test_an_editors_files_in_a_lesson_folder_change_nothing(cli, course, no_runs, argv):
    """Litter is not the student's work: every command works as before, from the cache (a
    lock file that comes and goes as the student types must not make the tests run)."""
    before = cli("--course", course, *argv)
    for name in ("00_memory", "01_append"):
        litter(course / "lessons" / name)
    (course / ".sessionlab" / "hints.json").unlink(missing_ok=True)   # hint: level 1 again

    run = cli("--course", course, *argv)

    no_traceback(run)
    assert run.status == before.status, run.text
    assert run.out == before.out
    assert no_runs == []


@pytest.mark.timeout(GUARD)
@pytest.mark.parametrize("argv", LESSON_COMMANDS, ids=" ".join)
def test_links_to_nothing_pipes_and_folders_in_a_lesson_folder_never_hang_or_crash(
        cli, course, argv):
    for name in ("00_memory", "01_append"):
        odd_files(course / "lessons" / name)
    expected = {"check 01": 1}.get(" ".join(argv), 0)

    run = cli("--course", course, *argv)

    no_traceback(run)
    assert run.status == expected, run.text
    assert (course / "lessons" / "00_memory" / "old.py" / "inside.txt").read_text() == "kept"


@pytest.mark.timeout(GUARD)
@pytest.mark.parametrize("odd", [litter, odd_files], ids=["litter", "odd files"])
def test_watch_and_its_r_key_bear_an_editors_files(course, capsys, odd):
    from sessionlab.cli.ui import make_ui
    from sessionlab.cli.watch import Watch, stamps

    folder = course / "lessons" / "01_append"
    watch = Watch(make_ui(), course, "01", warm=False)
    try:
        watch.start()
        seen = stamps(folder)
        odd(folder)
        if odd is litter:
            assert stamps(folder) == seen, "an editor's lock file is not a save"
        watch.on_key("r")            # run again, as the r key does
        shown = capsys.readouterr().out
    finally:
        watch.close()
    assert "Traceback" not in shown
    assert "Lesson 01" in shown and "tests pass" in shown, shown


@pytest.mark.timeout(GUARD)
def test_watch_reruns_on_a_save_but_not_on_an_editors_lock_appearing(course):
    from sessionlab.cli.watch import stamps

    folder = course / "lessons" / "01_append"
    seen = stamps(folder)
    litter(folder)                            # the student starts typing: Emacs locks
    assert stamps(folder) == seen
    (folder / ".#agent.py").unlink()          # the lock goes as the buffer is saved
    assert stamps(folder) == seen
    (folder / "agent.py").write_text((folder / "agent.py").read_text() + "\n# saved\n")
    assert stamps(folder) != seen


@pytest.mark.timeout(600)
def test_grade_bears_an_editors_files_in_a_students_lesson_folder(cli, tmp_path):
    course = make_course(tmp_path / "course", {"00_memory": SOLUTION})
    student = make_course(tmp_path / "class" / "ada", {"00_memory": SOLUTION})
    folder = student / "lessons" / "00_memory"
    litter(folder)
    odd_files(folder)

    run = cli("--course", course, "grade", tmp_path / "class", "--lessons", "00",
              "--no-sandbox")

    no_traceback(run)
    assert run.status == 0, run.text
    row = next(line for line in run.out.splitlines() if line.startswith("ada"))
    assert row.split()[-1] == "1/1", f"lesson 00 is done:\n{run.out}"


# --- 2. the demo never removes what it did not make ---------------------------------------


def demo(folder, *extra, cwd=None):
    return run_module("demo", "--course", REPO, "--dir", folder, *extra, cwd=cwd,
                      timeout=GUARD)


def snapshot(folder) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())
            if path.is_file()}


@pytest.mark.timeout(2 * GUARD)
@pytest.mark.parametrize("theirs", [
    {"quest.jsonl": b'{"role": "user", "content": "my own quest"}\n'},
    {"quest.jsonl": b'{"role": "user", "content": "my own quest"}\n',
     "quest.meta.json": b'{"format": 1, "id": "quest"}',
     "quest-guard.jsonl": b'{"role": "user", "content": "a fork of mine"}\n',
     "quest.lock": b'{"pid": 1, "host": "here"}'},
    {"notes.jsonl": b'{"role": "user", "content": "another session of mine"}\n'},
], ids=["a session named quest", "quest with its fork, meta and lock", "another session"])
def test_the_demo_refuses_a_folder_holding_sessions_it_did_not_write(tmp_path, theirs):
    folder = tmp_path / "sessions"
    folder.mkdir()
    for name, data in theirs.items():
        (folder / name).write_bytes(data)

    run = demo(folder, cwd=tmp_path)

    assert run.status == 2, run.text
    line = one_line_error(Run(run.status, "", run.err), str(folder), "--dir")
    assert any(name in line for name in theirs), line
    assert snapshot(folder) == theirs, "nothing of theirs is touched"
    assert run.out == ""


@pytest.mark.timeout(3 * GUARD)
def test_the_demo_runs_again_over_its_own_output_but_not_over_a_change_to_it(tmp_path):
    folder = tmp_path / "d"
    first = demo(folder, cwd=tmp_path)
    assert first.status == 0, first.text
    made = snapshot(folder)
    assert "quest.jsonl" in made and "quest-guard.jsonl" in made

    again = demo(folder, cwd=tmp_path)         # its own output: played afresh
    assert again.status == 0, again.text
    assert snapshot(folder).keys() == made.keys()

    with open(folder / "quest.jsonl", "ab") as log:    # a chat goes on with the quest
        log.write(b'{"role": "user", "content": "and then I went on"}\n')
    kept = snapshot(folder)
    refused = demo(folder, cwd=tmp_path)
    assert refused.status == 2, refused.text
    one_line_error(Run(2, "", refused.err), "quest.jsonl", str(folder))
    assert snapshot(folder) == kept


@pytest.mark.timeout(GUARD)
@pytest.mark.parametrize("empty", ["", "  "])
def test_the_demo_refuses_an_empty_dir(tmp_path, empty):
    before = sorted(p.name for p in tmp_path.iterdir())

    run = demo(empty, cwd=tmp_path)

    assert run.status == 2, run.text
    one_line_error(Run(2, "", run.err), "--dir")
    assert sorted(p.name for p in tmp_path.iterdir()) == before, "nothing written here"


# --- 3. standard input closed (`<&-`) or at its end --------------------------------------


def closed_stdin():
    os.close(0)


def run_closed(*argv, cwd=None, close=closed_stdin, timeout=GUARD) -> Run:
    """`sessionlab ARGS <&-`: the command started with no standard input at all."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("FORCE_COLOR", None)
    done = subprocess.run([sys.executable, "-m", "sessionlab", *map(str, argv)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, preexec_fn=close)
    return Run(done.returncode, done.stdout, done.stderr)


@pytest.mark.timeout(2 * GUARD)
@pytest.mark.parametrize("argv", [["chat"], ["chat", "quest", "--lesson", "07"],
                                  ["chat", "--lesson", "00", "--solution"]])
def test_chat_with_stdin_closed_ends_at_once_having_written_nothing(course_copy, tmp_path,
                                                                   argv):
    course = course_copy({"00_memory": SOLUTION, "07_undo": SOLUTION})

    run = run_closed("--course", course, *argv, "--sessions", tmp_path / "s", cwd=tmp_path)

    no_traceback(run)
    assert run.status == 0, run.text
    assert not any((tmp_path / "s").glob("*.jsonl")), "no message came in: nothing written"


@pytest.mark.timeout(2 * GUARD)
def test_sessionlab_alone_with_stdin_closed_shows_the_status_once(course):
    run = run_closed("--course", course)

    no_traceback(run)
    assert run.status == 0, run.text
    assert "Lesson 01" in run.out and "not a terminal" in run.err


@pytest.mark.timeout(2 * GUARD)
def test_watch_with_stdin_closed_says_it_takes_no_keys_and_stops_on_ctrl_c(course):
    import signal
    import subprocess
    import sys
    import threading
    import time

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("FORCE_COLOR", None)

    def close_and_default_sigint():
        os.close(0)
        default_sigint()

    process = subprocess.Popen(
        [sys.executable, "-m", "sessionlab", "--course", str(course), "watch", "00", "--cold"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env, preexec_fn=close_and_default_sigint)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + GUARD
        while not any("watching lessons/00_memory" in line for line in lines):
            assert process.poll() is None, "".join(lines) + process.stderr.read()
            assert time.monotonic() < deadline, "".join(lines)
            time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        err = process.stderr.read()
        process.wait(timeout=30)
        reader.join(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    shown = "".join(lines)
    assert process.returncode == 130, shown + err
    assert "Traceback" not in shown + err, err
    assert "no keys" in shown, "the keys line says that keys cannot work"


def test_a_terminal_that_hangs_up_ends_the_watch_instead_of_spinning():
    from sessionlab.cli.watch import Keys

    primary, secondary = os.openpty()
    with open(secondary, "rb", buffering=0, closefd=True) as stream:
        keys = Keys(stream)
        assert keys.tty
        os.close(primary)              # the terminal window is closed
        assert keys.read(0.5) == "\x04", "read as the end of input: the watch quits"


@pytest.mark.timeout(GUARD)
@pytest.mark.parametrize("argv", [["show"], ["list"], ["demo"]])
def test_a_command_with_stdout_closed_says_so_and_fails(course, tmp_path, argv):
    """`sessionlab show >&-`: exiting 0 having shown nothing would pass for success."""
    def close():
        os.close(1)

    run = run_closed("--course", course, *argv, cwd=tmp_path, close=close)

    assert run.status == 2
    one_line_error(Run(2, "", run.err.splitlines()[0] + "\n"), "standard output is closed")
    assert "Traceback" not in run.err
    assert not (tmp_path / "demo-sessions").exists(), "nothing was run"


# --- 4. a lesson named in other digits -----------------------------------------------------


# A digit of another script (superscript, Arabic-Indic, full-width) is a digit to Python's
# isdigit(), and int() reads some of them: `١` would quietly be lesson 01.
ODD_NUMBERS = ["³", "١", "１", "Ⅰ", "0x1", "+1", "1.0", "-1", "1e0", "", " ", "1\x00",
               "9" * 5000]
TAKES_A_LESSON = [["hint", "{}"], ["hint", "--task", "{}.1"], ["watch", "{}"],
                  ["answer", "{}"],
                  ["reset", "{}"], ["solution", "{}"], ["diff", "00", "{}"],
                  ["chat", "--lesson", "{}"], ["grade", ".", "--lessons", "{}"]]


def refused_lesson(run: Run) -> None:
    assert run.status == 2, run.text
    line = one_line_error(run, "the lessons are: 00_memory, 01_append")
    assert "no lesson" in line, line


@pytest.mark.timeout(GUARD)
@pytest.mark.parametrize("ref", ODD_NUMBERS, ids=repr)
def test_check_names_a_lesson_that_is_not_plain_digits_or_a_folder_in_one_line(
        cli, course, no_runs, ref):
    refused_lesson(cli("--course", course, "check", ref))
    assert no_runs == []


@pytest.mark.timeout(GUARD)
@pytest.mark.parametrize("ref", ["³", "١", "", "9" * 5000], ids=repr)
@pytest.mark.parametrize("argv", TAKES_A_LESSON, ids=" ".join)
def test_every_command_that_takes_a_lesson_names_an_odd_one_in_one_line(
        cli, course, no_runs, argv, ref):
    refused_lesson(cli("--course", course, *[part.format(ref) for part in argv]))
    assert no_runs == []


@pytest.mark.timeout(GUARD)
@pytest.mark.parametrize("ref", ["³", "١"])
def test_the_demo_names_a_lesson_in_other_digits_in_one_line(ref, tmp_path):
    run = run_module("demo", "--course", REPO, "--lesson", ref, "--dir", tmp_path / "d")

    assert run.status == 2, run.text
    one_line_error(Run(2, "", run.err.splitlines()[0] + "\n"), "no lesson")
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("ref, name", [("1", "01_append"), ("01", "01_append"),
                                       (" 01 ", "01_append"), ("001", "01_append"),
                                       ("01_append", "01_append"), ("lessons/01_append/", "01_append"),
                                       ("0", "00_memory")])
def test_plain_digits_and_folder_names_still_name_their_lesson(course, ref, name):
    from sessionlab import course as registry

    assert registry.lesson(ref, course).name == name


# --- 5. a state file of the wrong shape --------------------------------------------------


BAD_STATE = [
    ("hints.json", b"[]"),
    ("hints.json", b'{"seen": []}'),
    ("hints.json", b'{"seen": {"01.1": "two"}}'),
    ("hints.json", b"null"),
    ("hints.json", b"\xff\xfe not UTF-8"),
    ("hints.json", b'{"seen": {'),
    ("results.json", b"[]"),
    ("results.json", b'{"seen": []}'),
    ("results.json", b'{"version": 3, "entries": []}'),
    ("results.json", b'{"version": 3, "entries": {"lesson:01_append": []}}'),
    ("results.json", b"\xff\xfe not UTF-8"),
]


def warnings_in(run: Run) -> list[str]:
    return [line for line in run.err.splitlines() if line.startswith("warning:")]


@pytest.mark.timeout(GUARD)
@pytest.mark.parametrize("name, data", BAD_STATE, ids=lambda v: v if isinstance(v, str) else repr(v)[:30])
def test_a_state_file_of_the_wrong_shape_is_kept_aside_with_one_warning_and_started_afresh(
        cli, course, name, data):
    state = course / ".sessionlab"
    (state / name).write_bytes(data)

    first = cli("--course", course, "hint", "01")
    second = cli("--course", course, "hint", "01")

    for run in (first, second):
        no_traceback(run)
        assert run.status == 0, run.text
    assert "Hint 1 of" in first.out and "Hint 2 of" in second.out, "the new file works"
    [warning] = warnings_in(first)
    assert f".sessionlab/{name}" in warning, warning
    kept = [path for path in state.iterdir() if path.name.startswith(f"{name}.bad")]
    assert len(kept) == 1 and kept[0].name in warning, warning
    assert kept[0].read_bytes() == data, "the bad file is kept as it was"
    assert warnings_in(second) == [], "warned once"


@pytest.mark.timeout(GUARD)
@pytest.mark.parametrize("result", [[], {"tests": [5]}, {"lesson": "01_append", "tests": "all"},
                                    {"lesson": "01_append", "tests": [{"nodeid": 1}]},
                                    {"lesson": "01_append", "written": [1]}],
                         ids=repr)
def test_a_cached_result_of_the_wrong_shape_is_run_again_not_a_traceback(cli, course, result):
    import json

    path = course / ".sessionlab" / "results.json"
    data = json.loads(path.read_text())
    data["entries"]["lesson:01_append"]["result"] = result     # under its real key
    path.write_text(json.dumps(data))

    run = cli("--course", course, "check", "01")

    no_traceback(run)
    assert run.status == 1 and "tests pass" in run.out, run.text
    assert len(warnings_in(run)) == 1, run.err


# --- 6. a pipe where a file is expected is never opened ----------------------------------


QUEST_LOG = (b'{"role": "user", "content": "Ask the elder about the cave."}\n'
             b'{"role": "assistant", "content": "The elder says: bring a torch."}\n')


def pipe_or_folder(path, what: str) -> None:
    if what == "pipe":
        os.mkfifo(path)
    else:
        path.mkdir()


@pytest.mark.timeout(GUARD)
@pytest.mark.parametrize("what", ["pipe", "folder"])
@pytest.mark.parametrize("beside", ["quest.meta.json", "quest.lock"])
@pytest.mark.parametrize("argv", [["{d}"], ["quest", "--sessions", "{d}"], ["{d}/quest.jsonl"]],
                         ids=["folder", "id", "file"])
def test_show_never_opens_a_pipe_or_folder_beside_a_log(cli, tmp_path, argv, beside, what):
    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / "quest.jsonl").write_bytes(QUEST_LOG)
    pipe_or_folder(folder / beside, what)

    run = cli("show", *[part.format(d=folder) for part in argv])

    no_traceback(run)
    assert run.status == 0, run.text
    assert "quest" in run.out


@pytest.mark.timeout(GUARD)
@pytest.mark.parametrize("what", ["pipe", "folder"])
def test_chat_never_opens_a_pipe_or_folder_in_place_of_its_town_file(cli, course_copy, tmp_path,
                                                                     what):
    course = course_copy({"07_undo": SOLUTION})
    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / "quest.jsonl").write_bytes(QUEST_LOG)
    pipe_or_folder(folder / "quest.town.json", what)

    run = cli("--course", course, "chat", "quest", "--lesson", "07", "--solution",
              "--sessions", folder, input="hello\n")

    assert run.status == 1, run.text
    one_line = [line for line in run.err.splitlines() if line.startswith("error:")]
    assert len(one_line) == 1 and "quest.town.json" in one_line[0], run.err
    assert "Traceback" not in run.text
    assert (folder / "quest.jsonl").read_bytes() == QUEST_LOG, "nothing written"


@pytest.mark.timeout(GUARD)
@pytest.mark.parametrize("name", ["hints.json", "results.json"])
def test_a_pipe_in_place_of_a_state_file_is_set_aside_not_waited_on(cli, course, name):
    state = course / ".sessionlab"
    (state / name).unlink(missing_ok=True)
    os.mkfifo(state / name)

    run = cli("--course", course, "hint", "01")

    no_traceback(run)
    assert run.status == 0 and "Hint 1 of" in run.out, run.text
    [warning] = warnings_in(run)
    assert f".sessionlab/{name}" in warning and "pipe" in warning, warning


@pytest.mark.timeout(GUARD)
def test_a_pipe_in_place_of_a_lessons_bytecode_is_never_read(cli, course):
    import importlib.util

    module = course / "lessons" / "00_memory" / "agent.py"
    cached = importlib.util.cache_from_source(str(module))
    os.makedirs(os.path.dirname(cached), exist_ok=True)
    if os.path.exists(cached):
        os.unlink(cached)
    os.mkfifo(cached)

    run = cli("--course", course, "check", "00", "--fresh", "--timeout", "100")

    no_traceback(run)
    assert run.status == 0, run.text


# --- 7. solution and reset on a module that is not UTF-8, or not a file ----------------------


def spoil(path, how: str, elsewhere) -> bytes | None:
    """Make a lesson module `how`; the bytes that must survive (None: see the test)."""
    if how == "not UTF-8":
        data = path.read_bytes() + b"\n# caf\xe9 in Latin-1\n\xff\xfe"
        path.write_bytes(data)
        return data
    path.unlink()
    if how == "a folder":
        path.mkdir()
        (path / "inside.py").write_text("kept")
    elif how == "a pipe":
        os.mkfifo(path)
    elif how == "a link to nothing":
        os.symlink("gone/agent.py", path)
    elif how == "a link to a file":
        elsewhere.write_text("# my real file, elsewhere\n")
        os.symlink(elsewhere, path)
    return None


SPOILED = ["not UTF-8", "a folder", "a pipe", "a link to nothing", "a link to a file"]


@pytest.mark.timeout(GUARD)
@pytest.mark.parametrize("module", ["agent.py", "messages.py"])
@pytest.mark.parametrize("how", SPOILED)
def test_solution_force_shows_the_reference_beside_any_module(cli, course, tmp_path, how,
                                                                module):
    spoil(course / "lessons" / "01_append" / module, how, tmp_path / "elsewhere.py")

    run = cli("--course", course, "solution", "01", "--force")

    no_traceback(run)
    assert run.status == 0, run.text
    assert "solutions/01_append/messages.py" in run.out, run.out[:2000]
    if how == "not UTF-8":
        assert "not UTF-8" in run.text


@pytest.mark.timeout(GUARD)
@pytest.mark.parametrize("module", ["agent.py", "messages.py"])
@pytest.mark.parametrize("how", SPOILED)
def test_reset_recovers_any_module_and_keeps_what_was_there(cli, course, tmp_path, how, module):
    from sessionlab import course as registry, starters

    target = course / "lessons" / "01_append" / module
    elsewhere = tmp_path / "elsewhere.py"
    kept_bytes = spoil(target, how, elsewhere)
    link = os.readlink(target) if os.path.islink(target) else None

    run = cli("--course", course, "reset", "01")

    no_traceback(run)
    assert run.status == 0, run.text
    starter = starters.expected_starters(registry.lesson("01", course))[module]
    assert not target.is_symlink() and target.read_text() == starter
    backups = list((course / ".sessionlab" / "backups" / "01_append").iterdir())
    assert len(backups) == 1, backups
    [backup] = backups
    assert str(backup.relative_to(course)) in run.out, run.out
    if kept_bytes is not None:
        assert backup.read_bytes() == kept_bytes
    elif how == "a folder":
        assert (backup / "inside.py").read_text() == "kept"
    elif how == "a link to nothing":
        assert os.readlink(backup) == link
    elif how == "a link to a file":
        assert backup.read_text() == "# my real file, elsewhere\n"
        assert elsewhere.read_text() == "# my real file, elsewhere\n", "the file linked to is untouched"


# --- 8. diff --force without --solutions -------------------------------------------------


@pytest.mark.timeout(GUARD)
def test_diff_force_without_solutions_gives_nothing_away(cli, course, no_runs):
    run = cli("--course", course, "diff", "00", "01", "--force")

    assert run.status == 2, run.text
    one_line_error(run, "--force", "--solutions")
    assert run.out == "", "no reference shown"
    assert no_runs == []

    shown = cli("--course", course, "diff", "00", "01", "--solutions", "--force")
    assert shown.status == 0 and "solutions/01_append" in shown.out, "the way it is meant"


# --- 9. a connection string's password is never shown --------------------------------------


SECRET = "s3cr3t-Pw"
STORES = [
    f"postgresql://ada:{SECRET}@127.0.0.1:9/db",
    f"postgres://ada:{SECRET}@127.0.0.1:9/db?sslmode=disable",
    f"postgresql://ada:{SECRET}/x@y@127.0.0.1:9/db",               # / and @ left unencoded
    "postgresql://ada:s3cr3t%2DPw@127.0.0.1:9/db",                    # percent-encoded
    f"postgresql://127.0.0.1:9/db?user=ada&password={SECRET}",
    f"host=127.0.0.1 port=9 user=ada password={SECRET} dbname=db",
    f"host=127.0.0.1 port=9 user=ada password='{SECRET} x' dbname=db",
    f"postgresql://ada:{SECRET}@[::1/db",                           # the driver echoes it
]


def assert_hidden(run: Run) -> None:
    no_traceback(run)
    assert SECRET not in run.text, run.text
    assert "s3cr3t%2DPw" not in run.text, run.text


@pytest.mark.timeout(GUARD)
@pytest.mark.parametrize("store", STORES)
def test_show_store_never_shows_the_password(cli, store):
    pytest.importorskip("psycopg")

    run = cli("show", "--store", store)

    assert run.status == 1, run.text
    assert_hidden(run)
    assert run.err.startswith("error: ")


@pytest.fixture(scope="module")
def store_course(tmp_path_factory):
    return make_course(tmp_path_factory.mktemp("store") / "course", {"11_postgres": SOLUTION})


@pytest.mark.timeout(GUARD)
@pytest.mark.parametrize("store", STORES)
def test_chat_store_never_shows_the_password(cli, store_course, tmp_path, store):
    pytest.importorskip("psycopg")

    run = cli("--course", store_course, "chat", "quest", "--lesson", "11", "--store", store,
              "--sessions", tmp_path / "s", input="hello\n")

    assert run.status == 1, run.text
    assert_hidden(run)


@pytest.mark.timeout(GUARD)
def test_a_model_servers_url_with_a_password_is_never_shown(cli, course, tmp_path,
                                                             monkeypatch):
    url = f"http://ada:{SECRET}@127.0.0.1:9/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    monkeypatch.setenv("OLLAMA_HOST", f"http://ada:{SECRET}@127.0.0.1:9")

    doctor = cli("--course", course, "doctor")
    bad_url = cli("--course", course, "doctor", "--ollama-url", f"ftp://ada:{SECRET}@x")
    chat = cli("--course", course, "chat", "--solution", "--lesson", "00", "--model", "m",
               "--sessions", tmp_path / "s", input="hello\n")

    for run in (doctor, bad_url, chat):
        assert_hidden(run)
    assert "127.0.0.1:9" in doctor.out, "the server is still named"
    assert chat.status == 1 and "127.0.0.1:9" in chat.err, chat.text


# --- 10. a session id too long for a file name; a server that never answers ----------------


@pytest.mark.timeout(GUARD)
@pytest.mark.parametrize("argv", [["{id}"], ["new", "--fork-from", "{id}"], ["{id}", "--store",
                                  "postgresql://127.0.0.1:9/db", "--lesson", "11"]],
                         ids=["id", "fork-from", "store"])
@pytest.mark.parametrize("bad", ["a" * 300, "../escape", "two words", ".hidden", ""])
def test_chat_refuses_a_session_id_that_is_no_plain_name_before_anything(
        cli, course_copy, tmp_path, argv, bad):
    course = course_copy({"07_undo": SOLUTION, "11_postgres": SOLUTION})
    folder = tmp_path / "s"

    run = cli("--course", course, "chat", *[part.format(id=bad) for part in argv],
              "--solution", "--sessions", folder, input="hello\n")

    assert run.status == 2, run.text
    line = one_line_error(Run(2, "", run.err), "invalid session id", "letters, digits")
    assert "too long" not in line and "move that file away" not in run.err
    assert len(line) < 300, "the id is shortened where it is named"
    assert not folder.exists() or not any(folder.iterdir()), "nothing written"


class Silent:
    """A server that takes connections and never answers a byte."""

    def __enter__(self):
        import socket
        import threading

        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(16)
        self.held = []
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}/v1"

        def accept():
            try:
                while True:
                    self.held.append(self.socket.accept()[0])
            except OSError:
                pass
        threading.Thread(target=accept, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.socket.close()
        for connection in self.held:
            connection.close()


@pytest.mark.timeout(GUARD)
@pytest.mark.parametrize("extra", [[], ["--no-check"]], ids=["checked", "no check"])
def test_chat_timeout_bounds_the_wait_for_a_server_that_never_answers(cli, course_copy,
                                                                     tmp_path, extra):
    import time

    course = course_copy({"07_undo": SOLUTION})
    with Silent() as server:
        started = time.monotonic()
        run = cli("--course", course, "chat", "q", "--lesson", "07", "--solution",
                  "--base-url", server.url, "--model", "m", "--timeout", "2", *extra,
                  "--sessions", tmp_path / "s", input="hello\n")
        waited = time.monotonic() - started

    no_traceback(run)
    # Checked first, the chat stops before a word is written; unchecked, the message
    # fails, the chat goes on (one may try again), and the input ends.
    assert run.status == (0 if extra else 1), run.text
    assert "did not answer" in run.err and "cannot reach" not in run.err, run.err
    assert "2 s" in run.err, "the wait is named"
    # A guard against waiting on some other clock than --timeout (10 s and more before).
    assert waited < 2 + 6, f"waited {waited:.1f} s with --timeout 2"


# --- 11. the small things ------------------------------------------------------------------


@pytest.mark.timeout(2 * GUARD)
def test_after_delete_the_chat_says_to_delete_the_forks_too_not_erase(cli, course_copy, tmp_path):
    course = course_copy({"09_privacy": SOLUTION})
    folder = tmp_path / "s"
    cli("--course", course, "chat", "quest", "--lesson", "09", "--sessions", folder,
        input="Ask the elder about the cave.\n")
    erased = cli("--course", course, "chat", "quest", "--lesson", "09", "--sessions", folder,
                 input="/erase 0\ny\n")
    deleted = cli("--course", course, "chat", "quest", "--lesson", "09", "--sessions", folder,
                  input="/delete\ny\n")

    assert "deleted session 'quest'" in deleted.out, deleted.text
    assert "forks (delete them too)" in deleted.out, deleted.out
    assert "erase them too" not in deleted.out
    assert "forks (erase them too)" in erased.out, "after /erase, erase is the word"


@pytest.mark.parametrize("argv, said", [
    (["chat", "--max-turns", "0"], "--max-turns: 0 is not a whole number of 1 or more"),
    (["chat", "--max-turns", "-2"], "--max-turns: -2 is not a whole number of 1 or more"),
    (["chat", "--max-turns", "two"], "--max-turns: 'two' is not a whole number"),
    (["chat", "--timeout", "0"], "--timeout: 0 is not a number of seconds above 0"),
    (["chat", "--timeout", "nan"], "--timeout: nan is not a number of seconds above 0"),
    (["watch", "--interval", "1e-9"], "--interval: 1e-09 is below"),
    (["watch", "--interval", "0.001"], "--interval: 0.001 is below"),
])
def test_a_count_or_wait_that_cannot_work_is_refused_in_one_line(course, no_runs, capsys,
                                                                  argv, said):
    with pytest.raises(SystemExit) as stopped:
        main(["--course", str(course), *argv])
    assert stopped.value.code == 2
    captured = capsys.readouterr()
    one_line_error(Run(2, captured.out, captured.err), said)


@pytest.mark.timeout(600)
def test_grade_dot_names_the_student_by_the_folder(cli, tmp_path, monkeypatch):
    course = make_course(tmp_path / "course", {"00_memory": STARTER})
    student = make_course(tmp_path / "ada", {"00_memory": STARTER})
    monkeypatch.chdir(student)

    run = cli("--course", course, "grade", ".", "--lessons", "00", "--no-sandbox")

    assert run.status == 0, run.text
    rows = run.out.splitlines()
    header = next(k for k, line in enumerate(rows) if line.startswith("Student"))
    assert rows[header + 2].split()[0] == "ada", run.out


@pytest.mark.timeout(GUARD)
def test_on_a_fresh_copy_the_first_hint_is_the_first_tasks(cli, course_copy):
    """Every test of lesson 00's task 00.1 first reaches task 00.2's unwritten loop (the
    loop runs the tools); the student starts with task 00.1 all the same, as the lesson's
    page and getting-started say, and the first hint is its."""
    course = course_copy({"00_memory": STARTER})

    run = cli("--course", course, "hint", "00")

    assert run.status == 0, run.text
    assert run.out.startswith("Task 00.1 "), run.out.splitlines()[0]


def test_an_unwritten_earlier_task_comes_before_a_later_tasks_not_written_error():
    from pathlib import Path

    from sessionlab.cli.runner import LessonResult, Outcome
    from sessionlab.course import Lesson, Task

    lesson = Lesson("00", "00_memory", "Memory", "", root=Path("."), tasks=(
        Task("00.1", "Run a tool", "run_tool", "", ("a",)),
        Task("00.2", "Loop", "Agent.run", "", ("a",))))
    blocked = dict(outcome="failed", exception="NotImplementedError", raised_in="module",
                   message="task 00.2 is not written yet: Loop", in_function="run")
    result = LessonResult("00_memory", tests=[
        Outcome("t::test_loop", "test_loop", tasks=["00.2"], **blocked),
        Outcome("t::test_tool", "test_tool", tasks=["00.1", "00.2"], **blocked)],
        written={"00.1": False, "00.2": False})

    assert result.first_failing_task(lesson) == "00.1"
    assert result.first_failure(lesson).name == "test_tool"

    result.written = {"00.1": True, "00.2": False}        # 00.1 written: now the loop
    assert result.first_failing_task(lesson) == "00.2"


def test_a_bug_in_a_written_task_still_comes_before_a_later_unwritten_one():
    from pathlib import Path

    from sessionlab.cli.runner import LessonResult, Outcome
    from sessionlab.course import Lesson, Task

    lesson = Lesson("00", "00_memory", "Memory", "", root=Path("."), tasks=(
        Task("00.1", "Run a tool", "run_tool", "", ("a",)),
        Task("00.2", "Loop", "Agent.run", "", ("a",))))
    result = LessonResult("00_memory", tests=[
        Outcome("t::test_tool", "test_tool", "failed", tasks=["00.1", "00.2"],
                exception="KeyError", raised_in="module", in_function="run_tool",
                message="'name'")],
        written={"00.1": True, "00.2": False})

    assert result.first_failing_task(lesson) == "00.1"


# --- 11. a task written in part, and grade's state of an untouched lesson -----------------


def write_one_function(folder, module: str, function: str) -> None:
    """Put the reference's `function` into the student's `module`: one place of a task."""
    import ast

    def span(source: str) -> tuple[int, int]:
        node = next(n for n in ast.parse(source).body
                    if isinstance(n, ast.FunctionDef) and n.name == function)
        return node.lineno - 1, node.end_lineno

    mine = (folder / module).read_text(encoding="utf-8").splitlines(keepends=True)
    theirs = (REPO / "solutions" / folder.name / module).read_text(
        encoding="utf-8").splitlines(keepends=True)
    (start, end), (first, last) = span("".join(mine)), span("".join(theirs))
    (folder / module).write_text("".join(mine[:start] + theirs[first:last] + mine[end:]),
                                 encoding="utf-8")


@pytest.mark.timeout(GUARD)
def test_a_task_written_in_one_of_its_two_places_shows_as_started(cli, course_copy):
    """Task 00.1 has two places (read_arguments, run_tool). Writing the first, as
    getting-started says, moves the task from todo to started, though its tests still stop
    at the other place."""
    course = course_copy({"00_memory": STARTER})
    before = cli("--course", course, "check", "00")
    write_one_function(course / "lessons" / "00_memory", "messages.py", "read_arguments")

    after = cli("--course", course, "check", "00")

    row = next(line for line in before.out.splitlines() if " 00.1 " in f" {line} ")
    assert row.split()[0] == "todo", before.out
    row = next(line for line in after.out.splitlines() if " 00.1 " in f" {line} ")
    assert row.split()[0] == "started", after.out
    assert "in progress" in after.out, after.out


@pytest.mark.timeout(600)
def test_grade_calls_an_untouched_lesson_not_started_as_list_does(cli, tmp_path):
    """A starter passes a few of its tests for free; the grade report still says the
    lesson is not started and its tasks todo, and a task written in part is started."""
    import json

    course = make_course(tmp_path / "course", {"00_memory": STARTER})
    make_course(tmp_path / "class" / "ada", {"00_memory": STARTER})
    bob = make_course(tmp_path / "class" / "bob", {"00_memory": STARTER})
    write_one_function(bob / "lessons" / "00_memory", "messages.py", "read_arguments")
    report = tmp_path / "grades.json"

    run = cli("--course", course, "grade", tmp_path / "class", "--lessons", "00",
              "--no-sandbox", "--json", report)

    assert run.status == 0, run.text
    students = {s["name"]: s for s in json.loads(report.read_text())["students"]}
    ada = students["ada"]["lessons"]["00_memory"]
    assert ada["state"] == "not started", ada
    assert set(ada["tasks"].values()) == {"todo"}, ada["tasks"]
    bob = students["bob"]["lessons"]["00_memory"]
    assert bob["state"] == "in progress", bob
    assert bob["tasks"]["00.1"] == "started", bob["tasks"]


@pytest.mark.timeout(GUARD)
@pytest.mark.parametrize("columns", [30, 34, 40])
def test_list_in_a_narrow_terminal_keeps_every_column_whole(course, columns):
    """At 30 to 40 columns the states become glyphs with a legend, so that the counts
    (tasks and tests) keep their room: no column dropped, no count cut."""
    import re
    import subprocess
    import sys

    env = {**os.environ, "FORCE_COLOR": "1", "COLUMNS": str(columns)}
    process = subprocess.run([sys.executable, "-m", "sessionlab", "list", "--course",
                              str(course)], env=env, capture_output=True, text=True,
                             timeout=GUARD)

    assert process.returncode == 0, process.stderr
    lines = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", process.stdout).splitlines()
    assert all(len(line) <= columns for line in lines), "\n".join(lines)
    at = next(i for i, line in enumerate(lines) if "Lesson" in line)
    assert lines[at].split()[-2:] == ["Tasks", "Tests"], "\n".join(lines)
    # The table's rows, below its header: on a slow machine the spinner's lines above
    # it ("running the tests of lessons 00, 01 ...") name the lessons too.
    for number in ("00", "01"):
        row = next(line.split() for line in lines[at:] if f" {number} " in f" {line} ")
        assert all(re.fullmatch(r"\d+/\d+", count) for count in row[-2:]), \
            f"lesson {number}'s counts are cut:\n" + "\n".join(lines)
    assert any(line.startswith("✓ done · ◐ in progress") for line in lines), "\n".join(lines)


@pytest.mark.parametrize("columns", [30, 36, 40])
def test_grades_header_is_never_folded_inside_a_word_in_a_narrow_terminal(columns):
    import io
    from pathlib import Path

    from rich.console import Console

    from sessionlab import course as kit_course
    from sessionlab.cli import grade
    from sessionlab.cli.ui import Ui
    from sessionlab.grading.run import Grade

    lessons = kit_course.lessons(REPO)[:2]
    student = grade.Student("ada", Path("ada"), grades={
        lesson.name: Grade(lesson.name, "in progress", passed=3, total=50)
        for lesson in lessons})
    screen = io.StringIO()
    console = Console(file=screen, width=columns, force_terminal=True, color_system=None)

    grade._print_table(Ui(out=console, err=console), [student], lessons,
                       {lesson.name: 50 for lesson in lessons})

    text = screen.getvalue()
    assert "Lesson\n" not in text and "Lessons" not in text.replace("Lessons done", ""), text
    assert not any(line.rstrip().endswith(("Lesso", "Lesson")) for line in text.splitlines()), \
        text


@pytest.mark.timeout(GUARD)
def test_a_test_that_runs_into_a_task_not_written_names_every_task_still_to_write(
        course_copy):
    """With task 00.1 written and nothing else, a test of 00.1 that runs into the loop
    (00.2) says to write 00.2, and names 00.3 as unwritten too: the student does not learn
    of the tasks still to write one run at a time."""
    import subprocess
    import sys

    course = course_copy({"00_memory": STARTER})
    folder = course / "lessons" / "00_memory"
    write_one_function(folder, "messages.py", "read_arguments")
    write_one_function(folder, "tools.py", "run_tool")

    process = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                              "lessons/00_memory"], cwd=course, capture_output=True,
                             text=True, timeout=GUARD,
                             env={**os.environ, "SESSIONLAB_ROOT": str(course)})

    said = [line for line in process.stdout.splitlines() if "needs task 00.2 too" in line]
    assert said, process.stdout[-3000:]
    assert all("Also not written yet in this lesson: 00.3 (this test may need it too)."
               in line for line in said), said[0]
    # Under -x this is the first failure a student meets: it says how to see the task
    # they are writing on its own meanwhile
    assert all("`pytest lessons/00_memory --task 00.1` shows how the rest of task 00.1 "
               "stands" in line for line in said), said[0]
