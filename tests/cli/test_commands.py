"""The command as a whole: its help, `python -m sessionlab`, the demo and the maintainers' tools."""

from __future__ import annotations

import pytest

from sessionlab.cli import build_parser

from .conftest import STARTER, run_module

COMMANDS = ["watch", "list", "check", "hint", "answer", "reset", "solution", "diff", "demo", "chat",
            "show", "serve", "grade", "dev", "doctor"]


def test_help_lists_every_command_with_what_it_does():
    run = run_module("--help")
    assert run.status == 0
    for command in COMMANDS:
        assert any(line.strip().startswith(command) for line in run.out.splitlines()), command
    assert "With no command, `sessionlab` is `sessionlab watch`" in run.out.replace("\n", " ")


@pytest.mark.parametrize("command", [c for c in COMMANDS if c not in ("demo",)])
def test_every_command_has_its_own_help(command, capsys):
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args([command, "--help"])
    assert done.value.code == 0
    assert f"usage: sessionlab {command}" in capsys.readouterr().out


def test_demo_and_dev_check_take_their_own_options():
    demo = run_module("demo", "--help")
    assert demo.status == 0 and "usage: sessionlab demo" in demo.out and "--dir" in demo.out
    check = run_module("dev", "check", "--help")
    assert check.status == 0 and "usage: sessionlab dev check" in check.out


# The demo itself: test_demo.py.


def test_dev_starters_check_finds_a_drifted_starter_and_regenerates_it(cli, course_copy):
    course = course_copy({"00_memory": STARTER, "01_append": STARTER})
    assert cli("--course", course, "dev", "starters", "--check").status == 0

    starter = course / "lessons" / "01_append" / "messages.py"
    generated = starter.read_text()
    starter.write_text(generated.replace("TODO(01.1)", "TODO(01.1) edited by hand"))
    drifted = cli("--course", course, "dev", "starters", "--check")
    assert drifted.status == 1
    assert "lessons/01_append/messages.py differs" in drifted.out and "edited by hand" in drifted.out

    fixed = cli("--course", course, "dev", "starters")
    assert fixed.status == 0 and "lessons/01_append/messages.py" in fixed.out
    assert starter.read_text() == generated


def test_an_abbreviated_option_is_refused_not_taken_for_a_longer_one(cli):
    # argparse would otherwise read `--session x` as `--sessions x` and put the log elsewhere.
    with pytest.raises(SystemExit) as refused:
        cli("chat", "--session", "quest-1")
    assert refused.value.code == 2
