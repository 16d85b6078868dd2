"""Lesson 04: what no message may be is damage, named like any other (task 04.1).

A line written by another program can be valid JSON and still no message: a number too
large for a float, an escaped lone surrogate, a message that also claims to be a marker.
Before the tail, each is a CorruptLog that names the file and the line, and nothing
changes.

Run: pytest lessons/04_repair            (your code)
     pytest lessons/04_repair --solution (the reference)
"""

import pytest

from sessionlab.scripted import ScriptedModel, say
from sessionlab.town import Town

ASK = b'{"role": "user", "content": "Ask the elder."}\n'
ANSWER = b'{"role": "assistant", "content": "Bring a torch."}\n'
DAMAGE = {
    "an escaped lone surrogate": b'{"role": "user", "content": "half: \\udc00"}',
    "a number too large for a float": b'{"role": "user", "content": "x", "n": -1e999}',
    "a message that also has a $marker key": (
        b'{"role": "user", "content": "x", "$marker": "undo"}'
    ),
    "a message whose content is an object": b'{"role": "user", "content": {"a": 1}}',
}


@pytest.mark.task("04.1")
@pytest.mark.parametrize("what", sorted(DAMAGE))
def test_a_line_that_is_no_message_is_a_corrupt_log_on_resume(lesson, sessions, what):
    """Resuming a log with such a line in the middle
    raises CorruptLog naming file and line."""
    sessions.mkdir(exist_ok=True)
    path = sessions / "quest-1.jsonl"
    data = ASK + DAMAGE[what] + b"\n" + ANSWER
    path.write_bytes(data)
    model = ScriptedModel([say("unused")])
    with lesson.SessionLog(sessions, "quest-1") as log:
        try:
            lesson.Agent(model.client(), model=model.model, tools=Town(), session=log)
        except lesson.CorruptLog as error:
            message = str(error)
        except NotImplementedError:
            raise                       # a task not written yet says so itself
        except Exception as error:      # noqa: BLE001 - reported in words below
            pytest.fail(f"a line with {what} should give CorruptLog, not "
                        f"{type(error).__name__}: {error}")
        else:
            pytest.fail(
                f"the agent resumed a log with {what} in line 2; that line is no "
                "message, and the model would refuse it with every request"
            )
    assert "quest-1.jsonl" in message and "line 2" in message, (
        f"CorruptLog should name the file and line 2; it says: {message}")
    assert path.read_bytes() == data, "a corrupt log must be left exactly as it is"
    assert model.requests == [], (
        "nothing should be sent to the model from a corrupt log"
    )
