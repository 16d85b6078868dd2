"""`-p sessionlab.grading.channel`: the report goes to the grader through a pipe it owns.

The grader opens a pipe, keeps the read end, and passes the write end as
`--sessionlab-grade-fd N`. At the end of the session this plugin writes the kit's report
(every outcome the kit's plugin recorded) to it as one JSON line, every text cut to a
bound, and closes it. Nothing is written to a file a detached process could rewrite later,
and a second report on the pipe (someone else writing to it) shows as such to the grader.

Code in the same process as the tests can still forge what this writes; the grader's other
checks (a failing test of its own, the exit status, the course's list of tests) are there
for that, and docs/instructors.md says what they cannot see.
"""

from __future__ import annotations

import json
import os

import pytest

TEXT_LIMIT = 1000      # characters of any one message, name or node id in the report


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("sessionlab").addoption(
        "--sessionlab-grade-fd", type=int, default=None, metavar="FD",
        help="write the report as one JSON line to this file descriptor (the grader's pipe)")


def cut(value):
    if isinstance(value, str) and len(value) > TEXT_LIMIT:
        return value[:TEXT_LIMIT] + f"... [cut: {len(value)} characters]"
    return value


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    fd = session.config.getoption("--sessionlab-grade-fd")
    if fd is None:
        return
    from sessionlab.pytest_plugin import REPORT_KEY

    results = [{key: cut(value) for key, value in entry.items()}
               for entry in session.config.stash.get(REPORT_KEY, [])]
    data = json.dumps({"exitstatus": int(exitstatus), "results": results}).encode() + b"\n"
    try:
        while data:
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)
