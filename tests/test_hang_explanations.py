"""What a test that ran out of time is told (sessionlab.hangs.explain): the call it was
waiting in when that call waits, and the loop around it when the call does not."""

import pytest

from sessionlab import hangs

BLOBS = '''\
import json
import time


def store(text):
    return json.loads(text)


def wait(text):
    time.sleep(-1)
'''


def stopped_in(tmp_path, function: str) -> pytest.ExceptionInfo:
    """An error out of a function of a lesson module (blobs.py), standing in for the
    timeout that stopped a test there: what explain reads is where it was raised."""
    path = tmp_path / "blobs.py"
    path.write_text(BLOBS, encoding="utf-8")
    namespace: dict = {}
    exec(compile(BLOBS, str(path), "exec"), namespace)
    with pytest.raises(ValueError) as excinfo:
        namespace[function]("{")
    return excinfo


def test_a_call_that_returns_by_itself_points_at_the_loop_around_it(tmp_path):
    words = hangs.explain(stopped_in(tmp_path, "store"), "test_store", 30)

    assert "waiting" not in words, words
    assert "it was in json.loads at " in words and "blobs.py:6" in words, words
    assert "loop around this line that never ends" in words, words


def test_a_call_that_waits_is_named_with_what_it_waits_for(tmp_path):
    words = hangs.explain(stopped_in(tmp_path, "wait"), "test_wait", 30)

    assert "it was waiting in time.sleep at " in words and "blobs.py:10" in words, words
    assert hangs.BLOCKING_CALLS["sleep"] in words, words
