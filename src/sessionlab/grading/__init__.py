"""Grading a class of strangers' code: each (student, lesson) in a sandbox, honest totals.

* `sandbox`: whether bubblewrap is usable here, and the command line that runs pytest inside
  it (read-only kit and course tests, a private copy of the lesson, a private /tmp, no
  network, a fresh PID namespace, a clean environment, resource limits).
* `channel`: the pytest plugin that hands the report to the grader through a pipe it owns.
* `guard`: fingerprints of what no student may change, and the reaping of stray processes.
* `run`: one (student, lesson): the private copy, the run, and a verdict that checks the
  report against what the course's tests are.
* `outputs`: the table's rows, the CSV and the JSON, with every message cut to a bound.
"""
