"""Tracebacks pytest can always format, whatever instruction an exception came from.

An exception raised from a signal handler (pytest-timeout's SIGALRM, which is how a test
that hangs ends) enters the interrupted frame at whatever instruction the signal landed
on. Since Python 3.11 some instructions belong to no line (the clean-up of a `with` or
an `except` block), and the traceback entry made there has `tb_lineno` None. pytest
(9.2) takes every entry's line for a number and stops the whole run with an
INTERNALERROR when it formats one that is not: the tests after it never run, and a
mutants' run of the maintainers' check loses its results. `give_every_entry_a_line`
gives such an entry the line of the nearest instruction before it that has one, which is
the statement the frame was running.
"""

from __future__ import annotations

from types import CodeType, TracebackType


def line_at(code: CodeType, offset: int) -> int:
    """The line of the instruction at byte `offset`, or of the last one before it that
    has a line; the function's first line if none does."""
    found = code.co_firstlineno
    for start, _end, line in code.co_lines():
        if start > offset:
            break
        if line is not None:
            found = line
    return found


def _mended(tb: TracebackType | None) -> TracebackType | None:
    entries = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    if all(entry.tb_lineno is not None for entry in entries):
        return entries[0] if entries else None
    mended = None
    for entry in reversed(entries):
        line = entry.tb_lineno
        if line is None:
            line = line_at(entry.tb_frame.f_code, entry.tb_lasti)
        mended = TracebackType(mended, entry.tb_frame, entry.tb_lasti, line)
    return mended


def give_every_entry_a_line(error: BaseException) -> bool:
    """Mend `error`'s traceback, and those of the exceptions it was raised from or
    during, in place; True if any entry had no line."""
    changed, seen = False, set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        tb = current.__traceback__
        mended = _mended(tb)
        if mended is not tb:
            current.__traceback__ = mended
            changed = True
        pending += [current.__cause__, current.__context__]
    return changed
