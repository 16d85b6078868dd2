"""The starter generator: fenced solution regions become TODOs, the rest is kept byte for byte."""

from pathlib import Path

import pytest

from sessionlab.course import CourseError, Lesson, Task
from sessionlab.starters import make_starter, marked_tasks, strip_markers

LESSON = Lesson(number="03", name="03_fork", title="Fork", summary="", root=Path("."),
                tasks=(Task("03.1", "Copy the history", "fork", "", ("a", "b")),
                       Task("03.2", 'Write the "meta" file', "fork", "", ("a", "b"))))

SOLUTION = '''def fork():
    """Docstring stays."""
    kept = 1
    # BEGIN 03.1
    copied = kept + 1
    # END 03.1
    if copied:
        # BEGIN 03.2
        write()
        # END 03.2
    return copied
'''


def test_each_fenced_region_becomes_a_todo_and_a_raise_at_its_indentation():
    starter = make_starter(SOLUTION, LESSON)

    assert starter.splitlines() == [
        "def fork():",
        '    """Docstring stays."""',
        "    kept = 1",
        "    # TODO(03.1): Copy the history.",
        "    # Hints: `sessionlab hint 03`; the docs page of lesson 03_fork.",
        '    raise NotImplementedError("task 03.1 is not written yet: Copy the history")',
        "    if copied:",
        '        # TODO(03.2): Write the "meta" file.',
        "        # Hints: `sessionlab hint 03`; the docs page of lesson 03_fork.",
        # 89 columns on one line: the message goes on lines of its own.
        "        raise NotImplementedError(",
        '            "task 03.2 is not written yet: Write the \\"meta\\" file"',
        "        )",
        "    return copied",
    ]
    compile(starter, "starter", "exec")


def test_strip_markers_keeps_the_code_and_drops_the_fences():
    stripped = strip_markers(SOLUTION)
    assert "BEGIN" not in stripped and "END" not in stripped
    assert "copied = kept + 1" in stripped and "write()" in stripped


def test_marked_tasks_lists_each_task_once_in_order():
    assert marked_tasks(SOLUTION + "# BEGIN 03.1\n# END 03.1\n") == ["03.1", "03.2"]


@pytest.mark.parametrize("broken, complaint", [
    ("# BEGIN 03.1\nx = 1\n", "never closed"),
    ("# BEGIN 03.1\n# BEGIN 03.2\n# END 03.2\n# END 03.1\n", "inside"),
    ("# END 03.1\n", "without BEGIN"),
    ("# BEGIN 03.9\n# END 03.9\n", "not listed"),
    ("# BEGIN 02.1\n# END 02.1\n", "another lesson"),
])
def test_malformed_fences_are_refused_with_the_line(broken, complaint):
    with pytest.raises(CourseError, match=complaint):
        make_starter(broken, LESSON, source="solutions/03_fork/agent.py")


def test_a_long_task_title_is_wrapped_to_88_columns_and_says_the_same():
    # Course code is read on the site and in a terminal, about 88 columns wide; a task
    # title long enough to overflow must wrap, and the exception must keep every word.
    title = ('Put the content back on load, trusting no "blob" without checking its hash, '
             "and name the blob, the log and the line in every refusal")
    lesson = Lesson(number="03", name="03_fork", title="Fork", summary="", root=Path("."),
                    tasks=(Task("03.1", title, "fork", "", ("a", "b")),))
    solution = "class Log:\n    def load(self):\n        if True:\n            # BEGIN 03.1\n" \
               "            pass\n            # END 03.1\n"

    starter = make_starter(solution, lesson)

    wide = [line for line in starter.splitlines() if len(line) > 88]
    assert not wide, f"lines wider than 88 columns in the starter: {wide}"
    assert f"TODO(03.1): {title}." in " ".join(
        line.strip().removeprefix("# ") for line in starter.splitlines()), starter
    namespace: dict = {}
    exec(compile(starter, "starter", "exec"), namespace)
    with pytest.raises(NotImplementedError) as raised:
        namespace["Log"]().load()
    assert str(raised.value) == f"task 03.1 is not written yet: {title}"
