#!/usr/bin/env python3
"""Run every lesson's reference solution and starter once, with whatever `openai` is
installed, and say whether each behaves: the solution passes its lesson, the starter fails
it for the right reason (NotImplementedError or an assertion, a failing test per task).

    python scripts/check_lessons.py

CI runs it in a second environment that has the newest openai 2.x, after the main run on
the newest 3.x: the kit allows both, and a student may have either. It is the part of
`sessionlab dev check` that depends on the client library, and nothing else (no static
checks, no wrong implementations, no docs). A lesson whose service is missing (PostgreSQL
for 11) is a problem in CI and a warning elsewhere, as in the whole check. Exits 0 when
every check passes, 1 otherwise (each problem is printed).
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

import openai

from sessionlab import course, maintainers


def checks(root) -> list:
    """(name, check) for the solution and the starter of every lesson."""
    found = []
    for lesson in course.lessons(root):
        if (missing := maintainers.missing_service(lesson)) is not None:
            found.append(lambda l=lesson, m=missing: maintainers.unchecked_lesson(l, m))
            continue
        found.append(lambda l=lesson: maintainers.check_solution(l))
        found.append(lambda l=lesson: maintainers.check_starter_fails_right(l))
    return found


def main() -> int:
    root = course.find_root()
    print(f"openai {openai.__version__}: every lesson's solution and starter", flush=True)
    with ThreadPoolExecutor(max_workers=2) as pool:
        findings = list(pool.map(lambda check: check(), checks(root)))
    for finding in findings:
        print(f"{'ok  ' if finding.ok else 'FAIL'} {finding.check}")
        for warning in finding.warnings:
            print(f"     warning: {warning}")
        for problem in finding.problems:
            print(f"     {problem}")
    failed = sum(not finding.ok for finding in findings)
    print(f"{len(findings) - failed} of {len(findings)} checks passed "
          f"with openai {openai.__version__}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
