"""The maintainers' check catches what it claims to: each check run on a broken copy of the course."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from sessionlab import course, maintainers, mutate, starters
from sessionlab import calls as call_records

ROOT = Path(__file__).resolve().parent.parent

# The tests that run a lesson's tests on a broken copy, about a second each: the
# campaign's (`pytest -m campaign`), so that the README's quick command stays quick.
CHECKS_A_PYTEST_RUN = pytest.mark.campaign


@pytest.fixture
def copy(tmp_path):
    """A copy of the course with lessons 00 and 01 only (enough to break things in)."""
    for name in ("conftest.py", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "course", tmp_path / "course",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for lesson in ("00_memory", "01_append"):
        shutil.copytree(ROOT / "solutions" / lesson, tmp_path / "solutions" / lesson,
                        ignore=shutil.ignore_patterns("__pycache__"))
        # As it ships: in a student's copy, lessons/ holds their work.
        maintainers.lay_out_lesson(ROOT, tmp_path, lesson)
    # Lesson 01's own corpus runs every test on each of its dozens of mutants: the
    # tests below add the entries they are about to an empty list, so that the check
    # runs only those.
    (tmp_path / "solutions/01_append/wrong.toml").write_text(
        "# Only the entries a test adds.\n", encoding="utf-8")
    return tmp_path


def lesson_of(root, name="01_append"):
    return course.lesson(name, root)


def git(folder, *args):
    """Run git in `folder` with an identity of its own (none is configured here)."""
    subprocess.run(["git", "-c", "user.name=Course", "-c", "user.email=course@example.org",
                    "-c", "init.defaultBranch=main", *args], cwd=folder, check=True,
                   capture_output=True)


def commit(folder, message="course"):
    git(folder, "add", "-A")
    git(folder, "commit", "-q", "-m", message)


@pytest.fixture(params=["at the top", "in a subfolder"])
def checkout(request, copy, tmp_path):
    """The copy as a git checkout, everything committed: the course at the top of its
    repository, or in a subfolder of it (git paths are then prefixed)."""
    top = copy if request.param == "at the top" else tmp_path
    git(top, "init", "-q")
    commit(top)
    return copy


def edit_every_starter(root):
    """What a student does: each lessons/NN/agent.py half written, one that does not
    even parse, one that fails at import."""
    for number, lesson in enumerate(course.lessons(root)):
        starter = lesson.module_path()
        text = starter.read_text()
        starter.write_text(text + "\ndef half_written(:\n" if number % 2 == 0
                           else "import not_a_module_of_the_course\n" + text)


def test_an_edited_starter_is_a_students_work_not_drift(checkout):
    """In a git checkout the check compares the committed starters: edits in the
    working tree are a student's work, left out in one line, never a failure."""
    edit_every_starter(checkout)

    finding = maintainers.check_starters(checkout)

    assert finding.ok, finding.problems
    assert len(finding.warnings) == 1, finding.warnings
    assert finding.warnings[0].startswith("lessons/ holds a student's work "
                                          "(lessons/00_memory/agent.py, "
                                          "lessons/01_append/agent.py: changed"),\
        finding.warnings
    assert "\n" not in finding.warnings[0]


def test_a_starter_committed_alone_is_a_students_work_except_in_ci(checkout):
    """A commit that changes only lessons/NN/agent.py is a student's (the course's
    commits touch the solution too): a warning on their machine. In CI, on a clean
    clone, any starter that differs from the generator fails, with a diff."""
    starter = checkout / "lessons/01_append/agent.py"
    starter.write_text(starter.read_text() + "\n# an edit\n")
    commit(checkout)

    at_home = maintainers.check_starters(checkout)
    in_ci = maintainers.check_starters(checkout, strict=True)

    assert at_home.ok and len(at_home.warnings) == 1, at_home.problems
    assert [p.split(" differs")[0] for p in in_ci.problems] == [
        "lessons/01_append/agent.py"], in_ci.problems
    assert "+# an edit" not in in_ci.problems[0] and "-# an edit" in in_ci.problems[0]


def test_a_solution_committed_without_its_starter_is_drift(checkout):
    """The course's commit changed the solution but not the starter: drift, with a
    diff of the committed file against the generated one; a student's edits on top
    do not hide it."""
    solution = checkout / "solutions/01_append/agent.py"
    solution.write_text(solution.read_text() + "\n# an edit\n")
    commit(checkout)
    starter = checkout / "lessons/01_append/agent.py"
    starter.write_text(starter.read_text() + "\n# a student's edit\n")

    finding = maintainers.check_starters(checkout)

    assert len(finding.problems) == 1, finding.problems
    problem = finding.problems[0]
    assert problem.startswith("lessons/01_append/agent.py differs from what "
                              "`sessionlab dev starters` generates:"), problem
    assert "lessons/01_append/agent.py (committed)" in problem
    assert "+# an edit" in problem and "student" not in problem, problem


def test_a_students_committed_answers_are_their_work_not_drift(checkout):
    """Students commit their progress: a committed starter with a task written (its
    NotImplementedError replaced) is their work, left out in one line, never drift."""
    lessons = course.lessons(checkout)
    for lesson in lessons:
        answer = starters.strip_markers(lesson.module_path("solution").read_text())
        lesson.module_path().write_text(answer)
    commit(checkout, "my answers")

    finding = maintainers.check_starters(checkout)

    assert finding.ok, finding.problems
    assert len(finding.warnings) == 1, finding.warnings
    assert all(f"lessons/{lesson.name}/agent.py" in finding.warnings[0]
               for lesson in lessons), finding.warnings


def test_a_stale_task_title_in_a_committed_starter_is_still_drift(checkout):
    """Drift keeps every task's raise (the generator wrote it), whatever its words: a
    task renamed in lesson.toml without regenerating is drift, not a student's work."""
    toml = checkout / "lessons/01_append/lesson.toml"
    first = course.lesson("01_append", checkout).tasks[0]
    toml.write_text(toml.read_text().replace(f'"{first.title}"', '"A new title"', 1))
    commit(checkout)

    finding = maintainers.check_starters(checkout)

    assert [p.split(" differs")[0] for p in finding.problems] == [
        "lessons/01_append/messages.py"], finding.problems


def test_a_solution_changed_without_regenerating_is_drift_until_regenerated(checkout):
    """Editing a solution and not regenerating its starter is drift; regenerated, the
    check passes before the commit too (the working tree then matches)."""
    solution = checkout / "solutions/01_append/messages.py"
    solution.write_text(solution.read_text().replace(
        "# The roles a chat request may carry.", "# The roles any chat request may carry."))

    stale = maintainers.check_starters(checkout)
    starters.write_starters(checkout)
    regenerated = maintainers.check_starters(checkout)
    (checkout / "lessons/01_append/messages.py").write_text("# a student's start\n")
    edited = maintainers.check_starters(checkout)

    assert [p.split(" differs")[0] for p in stale.problems] == [
        "lessons/01_append/messages.py"], stale.problems
    assert "+# The roles any chat request" in stale.problems[0], stale.problems
    assert regenerated.ok and not regenerated.warnings, regenerated.problems
    assert [p.split(" differs")[0] for p in edited.problems] == [
        "lessons/01_append/messages.py"], "a student's edit must not hide real drift"


def test_a_starter_not_committed_yet_is_compared_as_it_is(checkout):
    """A lesson added but not committed: its starter is compared as it is."""
    shutil.copytree(ROOT / "lessons/02_load", checkout / "lessons/02_load",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "solutions/02_load", checkout / "solutions/02_load",
                    ignore=shutil.ignore_patterns("__pycache__"))
    starter = checkout / "lessons/02_load/agent.py"
    starters.write_starters(checkout)
    fine = maintainers.check_starters(checkout)
    starter.write_text(starter.read_text() + "\n# by hand\n")

    finding = maintainers.check_starters(checkout)

    assert fine.ok, fine.problems
    assert len(finding.problems) == 1 and finding.problems[0].startswith(
        "lessons/02_load/agent.py differs from what `sessionlab dev starters` generates "
        "(not committed yet)"), finding.problems
    assert "lessons/02_load/agent.py (in lessons/)" in finding.problems[0]


def test_a_line_of_course_code_wider_than_88_columns_is_reported_with_file_and_line(copy):
    solution = copy / "solutions/01_append/agent.py"
    lines = solution.read_text(encoding="utf-8").splitlines(keepends=True)
    lines.insert(2, "# " + "x" * 86 + "\n")         # 88 columns: fits
    lines.insert(3, "# " + "x" * 87 + "\n")         # 89 columns
    solution.write_text("".join(lines), encoding="utf-8")
    test = copy / "lessons/00_memory/test_memory.py"
    # 84 characters, but each of the five CJK ones takes two columns in a terminal.
    test.write_text(test.read_text(encoding="utf-8") + "# " + "洞窟の番人" + "x" * 77 + "\n",
                    encoding="utf-8")
    last = len(test.read_text(encoding="utf-8").splitlines())

    finding = maintainers.check_width(copy)

    assert [p.split(": ")[0] for p in finding.problems] == [
        f"lessons/00_memory/test_memory.py:{last}", "solutions/01_append/agent.py:4"], \
        finding.problems
    assert "89 columns" in finding.problems[1], finding.problems


def test_course_code_within_88_columns_passes_the_width_check(copy):
    finding = maintainers.check_width(copy)

    assert finding.ok, finding.problems


def test_outside_git_an_edited_starter_is_a_warning_that_says_what_was_compared(copy):
    """A course unpacked from an archive has nothing committed: an edited starter
    may be a student's work, so it is a warning there, naming the files."""
    starter = copy / "lessons/01_append/agent.py"
    starter.write_text(starter.read_text() + "\n# an edit\n")

    finding = maintainers.check_starters(copy)

    assert finding.ok, finding.problems
    assert finding.warnings == [
        "not a git checkout, so nothing committed to compare with: "
        "lessons/01_append/agent.py differ from the generator (a student's work, or "
        "drift that the check in a git checkout fails); the check ran on starters "
        "generated from solutions/"]


def test_the_pristine_copy_generates_starters_and_restores_a_students_tests(checkout,
                                                                             tmp_path):
    """The copy the check runs in: every starter generated; a lesson whose starter a
    student edited is taken as committed, tests included; a lesson whose starter is
    untouched keeps uncommitted test edits (a maintainer's work in progress)."""
    edit_every_starter(checkout)
    del_00 = checkout / "lessons/00_memory/test_memory.py"
    committed = del_00.read_text()
    del_00.write_text(committed.replace('"""', "# ", 2))
    (checkout / "lessons/00_memory/test_mine.py").write_text("def test_mine():\n    pass\n")
    starters.write_starters(checkout)       # 01's starter is back: not a student's
    (checkout / "lessons/00_memory/agent.py").write_text("broken(\n")
    new_test = checkout / "lessons/01_append/test_new.py"
    new_test.write_text("# a maintainer's new test\n")
    shipped = tmp_path / "shipped"
    shipped.mkdir()

    maintainers.lay_out_pristine(checkout, shipped)

    for lesson in course.lessons(checkout):
        assert (shipped / "lessons" / lesson.name / "agent.py").read_text() == \
            starters.expected_starter(lesson)
    assert (shipped / "lessons/00_memory/test_memory.py").read_text() == committed
    assert not (shipped / "lessons/00_memory/test_mine.py").exists()
    assert (shipped / "lessons/01_append/test_new.py").read_text() == \
        "# a maintainer's new test\n"
    assert (shipped / "solutions/01_append/wrong.toml").is_file()


@CHECKS_A_PYTEST_RUN
def test_a_students_work_in_every_lesson_leaves_the_whole_check_passing(copy):
    """A student edits every starter (one that does not parse, one that does not
    import) and a test file beside it: every check still holds, run on what ships.
    (Lesson 00 alone, with one wrong implementation: a pytest process a check.)"""
    shutil.rmtree(copy / "lessons/01_append")
    shutil.rmtree(copy / "solutions/01_append")
    (copy / "solutions/00_memory/wrong.toml").write_text(HARMLESS.replace(
        "# Disk first: if the write fails, memory does not claim a message the log "
        "lacks.", "# No id, or one already used: a result could not say which call it "
        "answers.") + 'equivalent = "only a comment changes"\n', encoding="utf-8")
    git(copy, "init", "-q")
    commit(copy)
    edit_every_starter(copy)
    tests = copy / "lessons/00_memory/test_memory.py"
    tests.write_text(tests.read_text().replace('"""', "# ", 2)
                     + "\ndef test_my_own_idea():\n    assert False\n")

    said = []
    findings = maintainers.run_all(
        copy, docs=False, progress=lambda f, done, total: said.append(
            maintainers.progress_line(f, done, total)))

    assert [(f.check, f.problems) for f in findings if not f.ok] == []
    assert len(findings) == 12, [f.check for f in findings]
    # A line as each check ends, numbered, naming the check and its result
    assert [line.split("]")[0] for line in said] == [f"[{n:>2}/12" for n in range(1, 13)]
    assert sorted(line.split("] ")[1].split(":")[0] for line in said) == sorted(
        f.check for f in findings)
    assert all(": ok (" in line for line in said), said
    warned = [w for f in findings for w in f.warnings]
    assert len(warned) == 1 and warned[0].startswith("lessons/ holds a student's work")


@CHECKS_A_PYTEST_RUN
def test_a_starter_that_does_not_import_is_the_wrong_reason_to_fail(copy):
    starter = copy / "lessons/01_append/messages.py"
    starter.write_text(starter.read_text().replace("import json", "import jsonn"))

    finding = maintainers.check_starter_fails_right(lesson_of(copy))

    assert not finding.ok
    assert any("ModuleNotFoundError" in p for p in finding.problems), finding.problems


@CHECKS_A_PYTEST_RUN
def test_a_task_whose_tests_pass_on_the_empty_starter_is_reported(copy):
    # Make the starter's 01.1 region already done: its tests can no longer fail on the starter.
    solution = (copy / "solutions/01_append/messages.py").read_text()
    starter = copy / "lessons/01_append/messages.py"
    body = solution.split("# BEGIN 01.1\n")[1].split("    # END 01.1")[0]
    text = starter.read_text()
    start = text.index("    # TODO(01.1)")
    # The raise ends at the first ")" that closes a line: its own line, or the line of
    # its own after a message too long for one.
    end = text.index(")\n", text.index("raise NotImplementedError", start)) + 2
    starter.write_text(text[:start] + body + text[end:])

    finding = maintainers.check_starter_fails_right(lesson_of(copy))

    assert any("task 01.1" in p for p in finding.problems), finding.problems


@CHECKS_A_PYTEST_RUN
def test_a_starter_whose_first_failure_is_a_later_task_is_reported(copy):
    """A student who stops at the first failure of a fresh starter is sent to the task
    whose NotImplementedError it met: the lesson's first test must meet the first
    task's. Here a test that needs 01.2 alone is put before every other."""
    tests = copy / "lessons/01_append/test_append.py"
    text = tests.read_text(encoding="utf-8")
    first = text.index("\n@pytest.mark")
    tests.write_text(text[:first] + """
@pytest.mark.task("01.2")
def test_an_append_alone(lesson):
    log = lesson.SessionLog.__new__(lesson.SessionLog)    # no id checked (01.1)
    log.append({"role": "user", "content": "Ask the elder."})

""" + text[first:], encoding="utf-8")

    finding = maintainers.check_starter_fails_right(lesson_of(copy))

    assert finding.problems == [
        "test_an_append_alone, the first test to fail on the starter, stops on task "
        "01.2, not yet written, and so sends a student who stops at the first failure "
        "to 01.2 before 01.1: put a test of 01.1 that needs no later task first"
    ], finding.problems


@CHECKS_A_PYTEST_RUN
def test_a_broken_solution_is_reported(copy):
    solution = copy / "solutions/01_append/log.py"
    solution.write_text(solution.read_text().replace("ensure_ascii=False", "ensure_ascii=True"))

    finding = maintainers.check_solution(lesson_of(copy))

    assert not finding.ok and "non_ascii" in finding.problems[0]


@CHECKS_A_PYTEST_RUN
def test_a_later_solution_that_breaks_an_earlier_key_test_is_reported(copy):
    solution = copy / "solutions/01_append/agent.py"
    solution.write_text(solution.read_text().replace(
        'return message["content"]', 'return message["content"].upper()'))

    finding = maintainers.check_key_tests(lesson_of(copy), [lesson_of(copy, "00_memory")])

    assert not finding.ok and "00_memory" in finding.problems[0]


def test_missing_hints_and_untested_tasks_are_reported(copy):
    toml = copy / "solutions/01_append/hints.toml"
    text = toml.read_text()
    start = text.index('"01.4" = [')
    end = text.index("\n]\n", start) + 3
    toml.write_text(text[:start] + '"01.4" = ["Only one hint."]\n' + text[end:])
    tests = copy / "lessons/01_append/test_append.py"
    tests.write_text(tests.read_text().replace('@pytest.mark.task("01.4")\n', ""))

    problems = maintainers.check_metadata(lesson_of(copy)).problems

    assert any("01.4 has 1 hint" in p for p in problems), problems
    assert any("01.4 has no test" in p for p in problems), problems


@CHECKS_A_PYTEST_RUN
def test_a_wrong_implementation_that_no_test_catches_is_reported(copy):
    wrong = copy / "solutions/01_append/wrong.toml"
    wrong.write_text(wrong.read_text() + '''
[[wrong]]
what = "a harmless edit"
find = "# Disk first: if the write fails, memory does not claim a message the log lacks."
replace = "# (edited)"
caught_by = "test_non_ascii_text_stays_readable_in_the_file"
''')

    finding = maintainers.check_wrong_implementations(lesson_of(copy))

    assert finding.problems == ["'a harmless edit' is not caught: "
                                "test_non_ascii_text_stays_readable_in_the_file "
                                "passes on it (and so does every other test)"]


def add_wrong(copy, entry: str) -> None:
    wrong = copy / "solutions/01_append/wrong.toml"
    wrong.write_text(wrong.read_text() + entry)


HARMLESS = """
[[wrong]]
what = "a harmless edit"
find = "# Disk first: if the write fails, memory does not claim a message the log lacks."
replace = "# (edited)"
"""


@CHECKS_A_PYTEST_RUN
def test_a_mutant_that_kills_its_run_takes_no_other_mutant_with_it(copy):
    # Both mutants run in one pytest process; the first ends it at its first message.
    add_wrong(copy, """
[[wrong]]
what = "kills the interpreter"
find = "# Disk first: if the write fails, memory does not claim a message the log lacks."
replace = "__import__('os')._exit(3)"
caught_by = "test_non_ascii_text_stays_readable_in_the_file"

[[wrong]]
what = "refuses every message"
find = "# Disk first: if the write fails, memory does not claim a message the log lacks."
replace = "raise OSError('the disk is full')"
caught_by = "test_non_ascii_text_stays_readable_in_the_file"
""")

    problems = maintainers.check_wrong_implementations(lesson_of(copy)).problems

    assert len(problems) == 1, problems
    assert problems[0].startswith("'kills the interpreter': no test ran on it, even "
                                  "alone"), problems


@CHECKS_A_PYTEST_RUN
def test_an_equivalent_entry_must_survive_every_test(copy):
    add_wrong(copy, HARMLESS + 'equivalent = "only a comment changes"\n')
    add_wrong(copy, """
[[wrong]]
what = "claimed harmless, but escapes non-ASCII"
find = "ensure_ascii=False, allow_nan=False"
replace = "ensure_ascii=True, allow_nan=False"
equivalent = "wrongly argued"
""")

    finding = maintainers.check_wrong_implementations(lesson_of(copy))

    assert len(finding.problems) == 1, finding.problems
    assert finding.problems[0].startswith(
        "'claimed harmless, but escapes non-ASCII' is recorded as equivalent, but "
        "test_non_ascii_text_stays_readable_in_the_file")
    assert "caught_by = 'test_non_ascii_text_stays_readable_in_the_file'" in finding.problems[0]


def runs_of_a_busy_machine(monkeypatch, fault):
    """The lesson's corpus runs as they are, but `fault(found)` spoils the first one's
    results, as a machine busy with other runs can; returns the number of mutants of
    each run, in order."""
    real, runs = mutate.run_mutants, []

    def busy_machine(*args, **options):
        found, output = real(*args, **options)
        runs.append(len(args[2]))
        if len(runs) == 1:
            fault(found)
        return found, output

    monkeypatch.setattr(mutate, "run_mutants", busy_machine)
    return runs


@CHECKS_A_PYTEST_RUN
def test_an_equivalent_entry_failed_beside_others_is_judged_alone(copy, monkeypatch):
    """A test that times a wait can miss its mark while the group's other runs load the
    machine: an equivalent entry that fails in its group runs again alone, and is a
    problem only if it fails there too (as the other test here shows it is)."""
    add_wrong(copy, HARMLESS + 'equivalent = "only a comment changes"\n')

    def late(found):        # a timed test missed its mark
        name = found[0][0]["name"]
        found[0].append({"nodeid": name, "name": name, "when": "call",
                         "outcome": "failed", "tasks": ["01.2"],
                         "message": "the writer got the session 0.31 s late"})

    runs = runs_of_a_busy_machine(monkeypatch, late)
    finding = maintainers.check_wrong_implementations(lesson_of(copy), every_test=True)

    assert len(runs) == 2, f"the entry should run once more, alone: runs {runs}"
    assert finding.ok, finding.problems


@CHECKS_A_PYTEST_RUN
def test_an_entry_whose_first_failure_misnames_its_task_beside_others_is_judged_alone(
        copy, monkeypatch):
    """So is a mistake whose first failing test, beside other runs, names another task
    (a timed test of an earlier task missing its mark): alone, its own task's test
    fails first, and nothing is wrong."""
    add_wrong(copy, """
[[wrong]]
what = "escapes non-ASCII"
find = "ensure_ascii=False, allow_nan=False"
replace = "ensure_ascii=True, allow_nan=False"
caught_by = "test_non_ascii_text_stays_readable_in_the_file"
""")

    def another_task_first(found):
        found[0].insert(0, {"nodeid": "test_timed", "name": "test_timed",
                            "when": "call", "outcome": "failed", "tasks": ["01.5"],
                            "message": "the write took 0.4 s"})

    runs = runs_of_a_busy_machine(monkeypatch, another_task_first)
    finding = maintainers.check_wrong_implementations(lesson_of(copy))

    assert len(runs) == 2, f"the entry should run once more, alone: runs {runs}"
    assert finding.ok, finding.problems


@CHECKS_A_PYTEST_RUN
def test_an_entry_caught_by_another_test_than_the_named_one_passes_and_says_which(copy):
    add_wrong(copy, """
[[wrong]]
what = "escapes non-ASCII"
find = "ensure_ascii=False, allow_nan=False"
replace = "ensure_ascii=True, allow_nan=False"
caught_by = "test_a_newline_inside_content_stays_one_line"
""")

    finding = maintainers.check_wrong_implementations(lesson_of(copy))

    assert finding.ok, finding.problems
    note = next(n for n in finding.notes if n.startswith("'escapes non-ASCII'"))
    assert "caught by test_non_ascii_text_stays_readable_in_the_file" in note
    assert "not by test_a_newline_inside_content_stays_one_line" in note


# Another design of 01.2, the whole fence: the checks in a loop, the line made where it
# is written.
ANOTHER_APPEND = r"""
[[wrong]]
what = "01.2 as one expression"
design = "one expression"
find = '''
        # The rule first: a message that reading would refuse is never written, and no
        # file is created for it.
        check_plain_json(message)
        check_message(message)
        # ensure_ascii=False keeps "café" readable in the file; json escapes "\n" inside
        # strings, so a message is always exactly one line. allow_nan=False: NaN and
        # Infinity are not JSON (Python writes them, other readers refuse them), so they
        # are refused here.
        line = json.dumps(message, ensure_ascii=False, allow_nan=False) + "\n"
        data = line.encode("utf-8")
        if self._fd is None:
            self._open()
        self._write(data)'''
replace = '''
        for check in (check_plain_json, check_message):
            check(message)
        if self._fd is None:
            self._open()
        self._write((json.dumps(message, ensure_ascii=False, allow_nan=False)
                     + "\n").encode("utf-8"))'''
equivalent = "another correct design"
"""


@CHECKS_A_PYTEST_RUN
def test_a_mistake_can_be_made_in_another_design_than_the_reference(copy):
    add_wrong(copy, ANOTHER_APPEND + r"""
[[wrong]]
what = "escapes non-ASCII, in the design of one expression"
in_design = "one expression"
find = "ensure_ascii=False, allow_nan=False)\n                     +"
replace = "ensure_ascii=True, allow_nan=False)\n                     +"
caught_by = "test_non_ascii_text_stays_readable_in_the_file"
""")

    finding = maintainers.check_wrong_implementations(lesson_of(copy))

    assert finding.ok, finding.problems
    wrongs = maintainers.wrong_implementations(lesson_of(copy))
    mistake = next(w for w in wrongs if w.in_design)
    assert "for check in (check_plain_json" in mistake.replace
    assert "ensure_ascii=True" in mistake.replace, mistake.replace


@CHECKS_A_PYTEST_RUN
def test_a_mistake_in_a_design_that_cannot_take_it_is_reported(copy):
    add_wrong(copy, ANOTHER_APPEND + """
[[wrong]]
what = "a mistake in a design nobody wrote"
in_design = "no such design"
find = "check(message)"
replace = "pass"
caught_by = "test_non_ascii_text_stays_readable_in_the_file"

[[wrong]]
what = "a mistake whose find is not in its design"
in_design = "one expression"
find = "line = json.dumps"
replace = "line = str"
caught_by = "test_non_ascii_text_stays_readable_in_the_file"
""")

    problems = maintainers.check_wrong_implementations(lesson_of(copy)).problems

    assert ("'a mistake in a design nobody wrote': in_design names 'no such design', "
            "which no entry recorded as equivalent declares as its design") in problems
    assert ("'a mistake whose find is not in its design': its `find` occurs 0 times in "
            "design 'one expression' (it must occur exactly once)") in problems, problems


def test_an_entry_with_neither_caught_by_nor_equivalent_is_reported(copy):
    add_wrong(copy, HARMLESS)

    finding = maintainers.check_wrong_implementations(lesson_of(copy))

    assert any("give exactly one of `caught_by`" in p for p in finding.problems), (
        finding.problems)


@CHECKS_A_PYTEST_RUN
def test_a_bare_did_not_raise_on_a_mutant_is_reported_naming_test_and_mutant(copy):
    tests = copy / "lessons/01_append/test_append.py"
    tests.write_text(tests.read_text() + '''

@pytest.mark.task("01.1")
def test_an_empty_id_is_refused_bare(lesson, sessions):
    """An empty id is refused (a bare pytest.raises, for the check to find)."""
    with pytest.raises(lesson.InvalidSessionId):
        lesson.SessionLog(sessions, "")
''')
    solution = (copy / "solutions/01_append/messages.py").read_text()
    assert solution.count("re.fullmatch(plain, session_id)") == 1
    add_wrong(copy, """
[[wrong]]
what = "accepts every id"
find = "re.fullmatch(plain, session_id)"
replace = "True"
caught_by = "test_an_empty_id_is_refused_bare"
""")

    finding = maintainers.check_wrong_implementations(lesson_of(copy), every_test=True)

    assert any(p.startswith("test_an_empty_id_is_refused_bare on the mutant 'accepts "
                            "every id' "
                            "ends in a bare 'DID NOT "
                            "RAISE") for p in finding.problems), finding.problems


def test_a_test_without_a_docstring_is_reported(copy):
    tests = copy / "lessons/01_append/test_append.py"
    text = tests.read_text()
    start = text.index("def test_plain_session_ids_are_accepted")
    doc_start = text.index('"""', start)
    doc_end = text.index('"""', doc_start + 3) + 3
    tests.write_text(text[:doc_start] + "pass" + text[doc_end:])

    problems = maintainers.check_metadata(lesson_of(copy)).problems

    assert any(p.startswith("test_plain_session_ids_are_accepted has no "
                            "docstring") for p in problems), problems


def only_wrong(copy, entries: str) -> None:
    """Make lesson 01's wrong.toml hold only these entries (a quick check to run)."""
    (copy / "solutions/01_append/wrong.toml").write_text(entries, encoding="utf-8")


@CHECKS_A_PYTEST_RUN
def test_a_mutant_that_does_not_compile_or_import_is_a_corpus_problem_not_a_catch(copy):
    """An edit that leaves no program (a SyntaxError, a module that fails to import)
    makes every test fail, which proves nothing: the check reports the entry as broken,
    never as caught."""
    only_wrong(copy, '''
[[wrong]]
what = "an edit that breaks the indentation"
find = "        # Disk first: if the write fails, memory does not claim a message the log lacks."
replace = "  x = 1\\n        # Disk first"
caught_by = "test_non_ascii_text_stays_readable_in_the_file"

[[wrong]]
what = "an edit that fails at import"
find = 'ROLES = ("system"'
replace = 'ROLES = tuple.nope("system"'
caught_by = "test_non_ascii_text_stays_readable_in_the_file"

[[wrong]]
what = "escapes non-ASCII"
find = "ensure_ascii=False, allow_nan=False"
replace = "ensure_ascii=True, allow_nan=False"
caught_by = "test_non_ascii_text_stays_readable_in_the_file"
''')

    finding = maintainers.check_wrong_implementations(lesson_of(copy))

    assert len(finding.problems) == 2, finding.problems
    compiles, imports = finding.problems
    assert compiles.startswith("'an edit that breaks the indentation': the mutant does "
                               "not compile (IndentationError"), compiles
    assert compiles.endswith("fix its find/replace"), compiles
    assert imports.startswith("'an edit that fails at import': the mutant does not "
                              "import (AttributeError"), imports
    assert [n for n in finding.notes if "caught by" in n] == [
        "'escapes non-ASCII': caught by test_non_ascii_text_stays_readable_in_the_file"
    ], finding.notes


@CHECKS_A_PYTEST_RUN
def test_a_campaign_entry_outside_the_task_fences_is_a_warning(copy):
    """The independent campaign's mistakes are a student's, inside a task fence: an
    entry under its heading whose edit is outside every fence is a warning (the check
    still passes); the same kind of entry above the heading is not."""
    harmless = '''
[[wrong]]
what = "{what}"
find = "{find}"
replace = "# (edited)"
equivalent = "only a comment changes"
'''
    only_wrong(copy, harmless.format(what="outside, the maintainers' own",
                                     find="# --- what a message may be")
               + "\n# --- Independent campaign (issue 9): ... ---\n"
               + harmless.format(what="outside, in the campaign",
                                 find="# The roles a chat request may carry.")
               + harmless.format(what="inside, in the campaign",
                                 find="# Disk first: if the write fails"))

    finding = maintainers.check_wrong_implementations(lesson_of(copy))

    assert finding.ok, finding.problems
    assert len(finding.warnings) == 1, finding.warnings
    assert finding.warnings[0].startswith("'outside, in the campaign': its `find` is "
                                          "not inside a task fence"), finding.warnings


def _lesson_eleven_checks(monkeypatch, reason):
    from sessionlab import pgserver
    monkeypatch.setattr(pgserver, "why_not_available", lambda: reason)
    return {name: check for name, check in
            maintainers.pytest_checks(course.find_root(Path(__file__)), docs=False)
            if "11_postgres" in name}


def test_a_test_the_record_of_calls_left_out_runs_on_every_mutant(copy, monkeypatch):
    """The run that records what each test calls stopped half-way (a test let a
    KeyboardInterrupt out): the tests it never reached are not dropped from the
    mutants, they see every edit."""
    lesson = lesson_of(copy, "00_memory")
    tests = sorted(maintainers.test_marks(lesson))
    recorded = {"calls": {tests[0]: [["agent.py", 1]]},
                "lines": {tests[0]: [["agent.py", 2]]}}

    def stopped_run(root, targets, *extra):
        Path(extra[extra.index("--sessionlab-calls") + 1]).write_text(
            json.dumps(recorded), encoding="utf-8")
        return 2, {}, "KeyboardInterrupt"

    monkeypatch.setattr(maintainers, "run_pytest", stopped_run)
    calls, lines = maintainers.recorded_calls(lesson)
    assert calls[tests[0]] == {("agent.py", 1)} and lines[tests[0]] == {("agent.py", 2)}
    assert all(calls[name] == lines[name] == "all" for name in tests[1:]), calls
    seeing = call_records.tests_that_see(calls, "agent.py", {("", 99)})
    assert seeing == set(tests[1:]), seeing


def test_a_lesson_whose_server_is_missing_is_one_warning_outside_ci(monkeypatch):
    """On a machine without PostgreSQL the check does not fail for lesson 11, whose
    tests all skip: it says, once, that the lesson was not checked and how to fix it."""
    monkeypatch.delenv("CI", raising=False)
    checks = _lesson_eleven_checks(monkeypatch, "PostgreSQL is not installed here")
    assert list(checks) == ["lesson 11_postgres"], list(checks)
    finding = checks["lesson 11_postgres"]()
    assert finding.ok and finding.warnings == [
        "lesson 11_postgres was not checked: PostgreSQL is not installed here"]


def test_a_lesson_whose_server_is_missing_fails_the_check_in_ci(monkeypatch):
    """CI installs every service a lesson needs: a lesson left unchecked there fails."""
    monkeypatch.setenv("CI", "true")
    checks = _lesson_eleven_checks(monkeypatch, "PostgreSQL is not installed here")
    assert not checks["lesson 11_postgres"]().ok


def test_with_its_server_a_lesson_gets_every_check(monkeypatch):
    checks = _lesson_eleven_checks(monkeypatch, None)
    assert "solution 11_postgres" in checks and "starter 11_postgres" in checks


def test_the_root_pytest_leaves_the_corpus_to_dev_check_and_ci():
    """The root `pytest` runs the maintainers' check without the corpus of wrong
    implementations; `sessionlab dev check` runs it, and so do `--mutate` (CI's step) and
    `--every-test`."""
    def count(start: str, **options) -> int:
        return sum(name.startswith(start)
                   for name, _ in maintainers.pytest_checks(ROOT, docs=False, **options))

    checked = count("solution ")    # the lessons whose services are here
    assert count("wrong implementations of ", corpus=False) == 0
    assert count("wrong implementations of ") == checked
    assert count("wrong implementations of ", corpus=False, mutate=True) == checked
    assert count("wrong implementations of ", corpus=False, every_test=True) == checked


def test_a_task_whose_where_misses_its_code_is_reported(copy):
    """The page shows the student the functions `where` names: one that exists but
    holds none of the task's code, or one no module defines, is a problem."""
    toml = copy / "lessons/01_append/lesson.toml"
    toml.write_text(toml.read_text().replace('where = "check_session_id"',
                                             'where = "make_folder"', 1))
    wrong_place = maintainers.check_metadata(lesson_of(copy)).problems
    toml.write_text(toml.read_text().replace('where = "make_folder"',
                                             'where = "no_such_function"', 1))
    nowhere = maintainers.check_metadata(lesson_of(copy)).problems

    assert any("task 01.1: none of `where` (make_folder) holds its fence" in p
               for p in wrong_place), wrong_place
    assert any("task 01.1: `where` names 'no_such_function', which no module" in p
               for p in nowhere), nowhere


def test_a_recipe_in_a_task_or_code_in_an_early_hint_is_reported(copy):
    """A task says what must hold, not the expression; only its last hint gives code."""
    toml = copy / "lessons/01_append/lesson.toml"
    recipe = "`os.open(path)`, `data = read_all(fd, path)`, `lines[0]` " * 6
    toml.write_text(toml.read_text().replace('description = """\n',
                                             'description = """\n' + recipe + "\n", 1))
    hints = copy / "solutions/01_append/hints.toml"
    text = hints.read_text()
    first_hint = text.index('"', text.index('"01.1" = [') + len('"01.1" = ['))
    hints.write_text(text[:first_hint + 1] + "Call `os.open(p)`, then `x = y`. "
                     + text[first_hint + 1:])

    problems = maintainers.check_contracts(copy).problems

    assert any(p.startswith("task 01.1: hint 1 of") and "os.open(p)" in p
               for p in problems), problems
    assert any(p.startswith("the task descriptions spell code in ") for p in problems), \
        problems


@CHECKS_A_PYTEST_RUN
def test_a_first_failure_that_names_another_task_is_said(copy):
    """A mistake in task 01.5's code that a test of task 01.2 catches first sends the
    student to the wrong task: the check says which, and where the mistake is."""
    tests = copy / "lessons/01_append/test_append.py"
    text = tests.read_text()
    test = text.index("def test_without_durable_mode_nothing_is_fsynced")
    marks = text.rindex("\n\n", 0, test)
    tests.write_text(text[:marks] + text[marks:test].replace(
        '@pytest.mark.task("01.5")\n', "") + text[test:])       # marked 01.2 alone
    add_wrong(copy, '''
[[wrong]]
what = "fsyncs every line even when not asked to"
find = "        if self.durable:\\n            os.fsync(self._fd)"
replace = "        os.fsync(self._fd)"
caught_by = "test_without_durable_mode_nothing_is_fsynced"
''')

    problems = maintainers.check_wrong_implementations(lesson_of(copy)).problems

    assert any(p.startswith("'fsyncs every line even when not asked to' is a mistake in "
                            "task 01.5, but the first test that fails on it, "
                            "test_without_durable_mode_nothing_is_fsynced, names 01.2")
               for p in problems), problems


def test_generating_links_the_shipped_reference_to_every_module_of_its_lesson(tmp_path):
    """The reference the kit ships is links to one lesson's solution: generating adds a
    link for a module the lesson gained (lesson 11 gained pgprivacy.py) and drops one
    for a module it lost, so the demo outside a copy never runs half a store."""
    from sessionlab.snapshots import link_shipped_reference
    solution = tmp_path / "solutions/11_postgres"
    shipped = tmp_path / "src/sessionlab/reference/11_postgres"
    solution.mkdir(parents=True)
    shipped.mkdir(parents=True)
    for name in ("agent.py", "pgprivacy.py"):
        (solution / name).write_text(f"# {name}\n")
    (shipped / "agent.py").symlink_to("../../../../solutions/11_postgres/agent.py")
    (shipped / "gone.py").symlink_to("../../../../solutions/11_postgres/gone.py")

    changed = link_shipped_reference(tmp_path)

    assert sorted(p.name for p in changed) == ["gone.py", "pgprivacy.py"]
    assert sorted(p.name for p in shipped.iterdir()) == ["agent.py", "pgprivacy.py"]
    assert (shipped / "pgprivacy.py").read_text() == "# pgprivacy.py\n"
    assert link_shipped_reference(tmp_path) == [], "a second run changes nothing"


def test_hints_in_lesson_toml_or_for_a_task_not_listed_are_refused_naming_the_file(copy):
    hints = copy / "solutions/01_append/hints.toml"
    kept = hints.read_text()
    hints.write_text(kept + '"01.9" = ["A task renumbered away."]\n')
    with pytest.raises(course.CourseError, match=r"hints\.toml: hints for 01\.9, which"):
        lesson_of(copy)

    hints.write_text(kept)
    toml = copy / "lessons/01_append/lesson.toml"
    text = toml.read_text()
    at = text.index('id = "01.2"')
    toml.write_text(text[:at] + 'hints = ["Kept here too."]\n' + text[at:])
    with pytest.raises(course.CourseError, match=r"lesson\.toml: task 01\.2: hints belong "
                                                  r"in solutions/01_append/hints\.toml"):
        lesson_of(copy)


WAITS_FOR_00_3 = '''

@pytest.mark.task("00.1")
def test_a_tool_runs_once_replies_are_normalized(lesson):
    """(Added by the kit's test) A test of 00.1 that needs 00.3's code."""
    from pathlib import Path
    source = Path(lesson.__file__).with_name("messages.py").read_text()
    if "task 00.3 is not written yet" in source:
        ON_NOT_WRITTEN
'''


NOT_WRITTEN_00_3 = "raise NotImplementedError('task 00.3 is not written yet: its title')"


@CHECKS_A_PYTEST_RUN
@pytest.mark.parametrize("on_not_written, page_says, expected", [
    # 00.3's own NotImplementedError, which the plugin names: the way to wait for it,
    # once the page of 00.1 says that some of its tests need 00.3
    (NOT_WRITTEN_00_3, True, []),
    (NOT_WRITTEN_00_3, False, ["some tests of task 00.1 wait for 00.3"]),
    # Any other failure: once with 00.1 written, once with 00.1 and 00.2
    ("pytest.fail('the tool ran wrong', pytrace=False)", True,
     ["test_a_tool_runs_once_replies_are_normalized, a test of 00.1, fails with 00.1 "
      "written and 00.2, 00.3 not yet: Failed: the tool ran wrong",
      "test_a_tool_runs_once_replies_are_normalized, a test of 00.1, fails with 00.1 "
      "to 00.2 written and 00.3 not yet: Failed: the tool ran wrong"]),
])
def test_a_test_of_a_written_task_may_only_wait_for_a_later_one(copy, on_not_written,
                                                                page_says, expected):
    """With 00.1 written and 00.3 not yet, a test of 00.1 that needs 00.3 may fail only
    with 00.3's not-written error, and the page of 00.1 says that some of its tests
    need 00.3: a failure in other words, or one the page does not announce, tells a
    student whose 00.1 is right that it is wrong (a test's stand-in for a later task
    that does not do what the test checks, say)."""
    tests = copy / "lessons/00_memory/test_memory.py"
    tests.write_text(tests.read_text(encoding="utf-8")
                     + WAITS_FOR_00_3.replace("ON_NOT_WRITTEN", on_not_written))
    page = copy / "lessons/00_memory/lesson.toml"
    first, rest = page.read_text(encoding="utf-8").split('id = "00.2"', 1)
    if not page_says:   # 00.1's text names 00.3 nowhere
        first = first.replace("00.3", "the third task")
    page.write_text(first + 'id = "00.2"' + rest, encoding="utf-8")
    found = maintainers.check_tasks_in_order(lesson_of(copy, "00_memory")).problems
    assert len(found) == len(expected), found
    for problem, start in zip(found, expected):
        assert problem.startswith(start), found


SOURCE = """\
def record(pending, message):
    # BEGIN 07.2
    pending.append(message)
    # END 07.2


def flush(pending, write):
    # BEGIN 07.2
    while pending:
        write(pending[0])
    # END 07.2
"""


def test_an_edit_of_two_places_changes_those_lines_not_the_lines_between():
    # A mistake made in two fences of one task, given with the lines between them for
    # context, is still a mistake made in the student's code: only the two edited
    # lines count, not the unchanged `# END`, `def` and `# BEGIN` between them.
    find = "    pending.append(message)\n    # END 07.2\n\n\ndef flush(pending, write):\n" \
           "    # BEGIN 07.2\n    while pending:\n        write(pending[0])\n"
    wrong = maintainers.Wrong(what="newest first", find=find,
                              replace=find.replace("append(message)", "insert(0, message)")
                              .replace("[0]", "[-1]"))

    assert maintainers.edited_lines(SOURCE, wrong) == [3, 10]


def test_an_insertion_is_placed_on_the_line_before_it():
    find = "    while pending:\n        write(pending[0])\n"
    wrong = maintainers.Wrong(what="sleeps", find=find,
                              replace=find.replace("\n    ", "\n    time.sleep(1)\n    ", 1))

    assert maintainers.edited_lines(SOURCE, wrong) == [9]


@CHECKS_A_PYTEST_RUN
def test_a_mutant_that_survives_in_its_group_is_tried_alone_before_it_is_reported(
        copy, monkeypatch):
    # A group's run can stop before the test that catches a mutant (its time limit),
    # or a neighbour's test can leave the process changed: a survivor is tried alone.
    from sessionlab import mutate
    add_wrong(copy, HARMLESS + 'caught_by = "test_non_ascii_text_stays_readable_in_the_file"\n')
    add_wrong(copy, HARMLESS.replace("a harmless edit", "another edit").replace(
        "# (edited)", "# (changed)") + 'equivalent = "only a comment changes"\n')
    passed = {"name": "test_non_ascii_text_stays_readable_in_the_file",
              "nodeid": "x::test_non_ascii_text_stays_readable_in_the_file",
              "outcome": "passed"}
    failed = {**passed, "outcome": "failed", "exception": "AssertionError",
              "message": "the line should hold the text as it is", "tasks": ["01.3"]}
    runs = []

    def run_mutants(root, lesson, sources, **options):
        runs.append(len(sources))
        alone = options.get("group") == 1
        return {i: [failed if alone and "# (edited)" in text else passed]
                for i, (_, text) in enumerate(sources)}, ""

    monkeypatch.setattr(mutate, "run_mutants", run_mutants)
    lesson = lesson_of(copy)
    finding = maintainers.check_wrong_implementations(lesson)

    assert finding.problems == [], finding.problems
    assert runs == [2, 1], runs     # both in one run, then the survivor alone


@CHECKS_A_PYTEST_RUN
def test_two_entries_that_make_the_same_program_run_it_once_and_are_each_judged(
        copy, monkeypatch):
    # One mistake told two ways (two `what`s, one edit): one program, one run of it,
    # and each entry gets what the tests said of it
    from sessionlab import mutate
    add_wrong(copy, HARMLESS + 'caught_by = "test_non_ascii_text_stays_readable_in_the_file"\n')
    add_wrong(copy, HARMLESS.replace("a harmless edit", "the same edit, told again")
              + 'equivalent = "only a comment changes"\n')
    passed = {"name": "test_non_ascii_text_stays_readable_in_the_file",
              "nodeid": "x::test_non_ascii_text_stays_readable_in_the_file",
              "outcome": "passed"}
    runs = []

    def run_mutants(root, lesson, sources, **options):
        runs.append(len(sources))
        return {i: [passed] for i in range(len(sources))}, ""

    monkeypatch.setattr(mutate, "run_mutants", run_mutants)
    finding = maintainers.check_wrong_implementations(lesson_of(copy))

    assert runs == [1], runs        # one program: one run, alone already
    assert finding.problems == ["'a harmless edit' is not caught: "
                                "test_non_ascii_text_stays_readable_in_the_file "
                                "passes on it (and so does every other test)"], \
        finding.problems
