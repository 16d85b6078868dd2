"""sessionlab see: each lesson page's "Predict, then see" shows what the command prints today."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest

from sessionlab import course, failures, pgserver
from sessionlab.cli import main
from sessionlab.site import expand

ROOT = Path(__file__).resolve().parents[2]
REMAKE = ("remake them with `python -m sessionlab.site examples` (or `python -m "
          "sessionlab.failures` for these alone)")
LESSONS = list(failures.SCENARIOS)
HEADING = "## Predict, then see"


def page_of(number: str) -> Path:
    return next((ROOT / "docs" / "lessons").glob(f"{number}_*.md"))


def transcript(number: str, request: pytest.FixtureRequest) -> str:
    if number != "11":
        return failures.run(number, ROOT)
    if (reason := pgserver.why_not_available()) is not None:
        pytest.skip(f"lesson 11's scenario needs PostgreSQL. {reason}")
    return failures.run(number, ROOT, postgres=request.getfixturevalue("postgres_server"))


@pytest.fixture(scope="module")
def printed() -> dict[str, str]:
    """What each scenario printed, once per module (11's on first use)."""
    return {}


def printed_today(number: str, printed: dict[str, str], request) -> str:
    if number not in printed:
        printed[number] = transcript(number, request)
    return printed[number]


def test_every_lesson_has_a_scenario():
    assert LESSONS == [lesson.number for lesson in course.lessons(ROOT)], (
        "sessionlab see needs one scenario a lesson, in order")


@pytest.mark.parametrize("number", LESSONS)
def test_the_transcript_on_the_page_is_what_the_scenario_prints_today(number, printed, request):
    shown = failures.example_path(ROOT, number).read_text(encoding="utf-8")
    assert printed_today(number, printed, request) == shown, (
        f"docs/reference/examples/see/{number}.txt is not what `sessionlab see {number}` "
        f"prints today: {REMAKE}")


@pytest.mark.parametrize("number", LESSONS)
def test_a_transcript_holds_nothing_that_changes_between_runs(number, printed, request):
    text = printed_today(number, printed, request)
    temporary = tempfile.gettempdir()
    assert temporary not in text and "sessionlab-see-" not in text, (
        f"scenario {number} prints a temporary path")
    assert not re.search(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d", text), f"scenario {number} prints a time"
    assert not re.search(r"\b[0-9a-f]{16,}\b", text), f"scenario {number} prints a hash"
    assert not re.search(r"\bpid\b|\bprocess \d+", text), f"scenario {number} prints a pid"
    assert all(len(line) <= failures.WIDTH for line in text.splitlines()[:-1]), (
        f"scenario {number} prints a line wider than {failures.WIDTH} columns (only the "
        "last, the task's, may be)")


@pytest.mark.parametrize("number", LESSONS)
def test_the_transcript_ends_with_the_task_that_prevents_it(number):
    text = failures.example_path(ROOT, number).read_text(encoding="utf-8")
    last = text.splitlines()[-1]
    if number == "00":
        assert "01.3" in last and "02.1" in last, (
            f"lesson 00's scenario should end naming the tasks that fix it: {last!r}")
        return
    assert last.startswith("Prevented by ") and last.endswith("."), (
        f"scenario {number} should end with a line naming the tasks that prevent it: {last!r}")
    for named in last[len("Prevented by "):-1].split("; and "):
        match = re.fullmatch(r"task (\d\d)\.(\d): (.+)", named)
        assert match, f"scenario {number}: {named!r} should be 'task NN.K: its title'"
        assert match[1] == number, f"scenario {number} names a task of another lesson"
        task = course.lesson(number, ROOT).task(f"{number}.{match[2]}")
        assert match[3] == " ".join(task.title.split()), "the task's title, as lesson.toml has it"


@pytest.mark.parametrize("number", LESSONS)
def test_the_page_asks_to_predict_before_the_tasks_and_names_the_same_task(number):
    page = page_of(number)
    text = page.read_text(encoding="utf-8")
    where = f"docs/lessons/{page.name}"
    assert text.count(HEADING) == 1, f"{where} should have one '{HEADING}' section"
    assert text.index(HEADING) < text.index("## Your tasks"), (
        f"{where}: the prediction comes before the tasks")
    section = re.search(rf"^{HEADING}\n(.*?)(?=^## )", text, flags=re.M | re.S)[1]
    assert "**Predict first:**" in section and "?" in section, (
        f"{where}: the section asks the student to predict first")
    assert f"$ sessionlab see {number}\n" in section, f"{where}: the section shows the command"
    assert f'{{{{ code("docs/reference/examples/see/{number}.txt"' in section, (
        f"{where}: the section includes the command's real output")
    shown = failures.example_path(ROOT, number).read_text(encoding="utf-8")
    named = set(re.findall(r"\b\d\d\.\d\b", shown.splitlines()[-1]))
    # The sentence is a folded answer, kept in solutions/NN_topic/answers.toml: read
    # the section as the site shows it.
    linked = set(re.findall(r"\[[Tt]ask\s+(\d\d\.\d)\]", expand(section, ROOT)))
    assert named and named == linked, (
        f"{where}: the sentence after the output should point at the task the transcript "
        f"names ({sorted(named)}), it links {sorted(linked)}")
    # What the student is asked to predict stays folded until they open the output: the
    # outcome and the task that prevents it sit inside the admonition, and the problem
    # that follows does not open by telling it.
    after_fold = section.split('??? example "What it prints', 1)[1].split("\n", 1)[1]
    unfolded = [line for line in after_fold.splitlines() if line and not line.startswith("    ")]
    assert not unfolded, f"{where}: after the folded output, outside the fold: {unfolded[:2]}"
    problem = re.search(r"^## The problem\n\n(.*?)\n\n", text, flags=re.M | re.S)[1]
    assert not problem.startswith("What you saw"), (
        f"{where}: 'The problem' opens by telling what the predict step shows")


def test_the_command_prints_the_transcript(capsys):
    assert main(["see", "4"]) == 0
    said = capsys.readouterr()
    assert said.out == failures.example_path(ROOT, "04").read_text(encoding="utf-8")
    assert "`sessionlab answer 04 saw`" in said.err, "the page's explanation, in a terminal"


def test_the_command_without_a_lesson_lists_every_scenario(capsys):
    assert main(["see"]) == 0
    listed = re.findall(r"^  (\d\d)  \S", capsys.readouterr().out, flags=re.M)
    assert listed == LESSONS


def test_an_unknown_lesson_is_one_line_naming_the_lessons(capsys):
    assert main(["see", "12"]) == 2
    err = capsys.readouterr().err
    assert "no lesson '12'" in err and "00_memory" in err and "Traceback" not in err


def test_broken_reference_code_is_one_line_naming_its_folder(capsys, monkeypatch):
    def broken(scene):
        raise ImportError("cannot import name 'fork'")

    monkeypatch.setitem(failures.SCENARIOS, "03", broken)
    assert main(["see", "03"]) == 1
    err = capsys.readouterr().err
    assert "solutions/02_load" in err and "cannot import name 'fork'" in err, err


def test_lesson_11_without_postgresql_says_how_to_get_it(capsys, monkeypatch):
    monkeypatch.setattr(pgserver, "why_not_available", lambda: "PostgreSQL is not installed here")
    assert main(["see", "11"]) == 1
    err = capsys.readouterr().err
    assert "needs PostgreSQL" in err and "not installed" in err, err


def test_a_scenario_process_that_fails_says_why():
    def work(pause):
        raise ValueError("the shop burned down")

    with failures.process(work) as child:
        with pytest.raises(RuntimeError, match="failed .expected: paused.: ValueError: the shop burned down"):
            child.wait("paused")
