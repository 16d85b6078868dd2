"""A failure raised at an instruction that belongs to no line (where a signal such as
pytest-timeout's lands) is reported as a failure, never as pytest's INTERNALERROR that
ends the run (sessionlab.tracebacks)."""

import os
import subprocess
import sys
import textwrap
import types

from sessionlab import tracebacks

# A frame stopped at an instruction without a line: the clean-up of a `with` block.
SPOT = '''
import contextlib, sys, types

def spot():
    with contextlib.nullcontext():
        pass
    return sys._getframe()

def lineless(error):
    """`error` raised as if from spot's frame at an instruction of no line."""
    frame = spot()
    offset = next(start for start, _end, line in frame.f_code.co_lines()
                  if line is None)
    return error.with_traceback(types.TracebackType(None, frame, offset, -1))
'''


def lines_of(error: BaseException) -> list[int | None]:
    found, tb = [], error.__traceback__
    while tb is not None:
        found.append(tb.tb_lineno)
        tb = tb.tb_next
    return found


def test_an_entry_without_a_line_gets_the_line_of_the_statement_it_was_in():
    spot: dict = {}
    exec(compile(SPOT, "spot.py", "exec"), spot)
    cause = spot["lineless"](OSError("the first"))
    error = spot["lineless"](RuntimeError("the second"))
    error.__context__ = cause
    assert lines_of(error) == [None] and lines_of(cause) == [None]

    assert tracebacks.give_every_entry_a_line(error)

    # the `with` statement's line: the clean-up belongs to it
    assert lines_of(error) == [5] and lines_of(cause) == [5]
    assert not tracebacks.give_every_entry_a_line(error), "nothing left to mend"


def test_pytest_reports_such_a_failure_and_runs_the_tests_after_it(tmp_path):
    (tmp_path / "spot.py").write_text(SPOT, encoding="utf-8")
    (tmp_path / "conftest.py").write_text(
        'pytest_plugins = ["sessionlab.pytest_plugin"]\n', encoding="utf-8")
    (tmp_path / "test_lineless.py").write_text(textwrap.dedent('''
        from spot import lineless

        def test_fails_where_no_line_is():
            raise lineless(RuntimeError("raised where no line is"))

        def test_after_it():
            pass
        '''), encoding="utf-8")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SESSIONLAB_", "PYTEST_"))}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-p", "no:randomly", "test_lineless.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

    out = done.stdout + done.stderr
    assert "INTERNALERROR" not in out, out
    assert done.returncode == 1, out
    assert "1 failed, 1 passed" in out, out
    assert "raised where no line is" in out and "spot.py:5" in out, out
