"""The lessons' `sleeps_of`: a sleep is seen however the lesson's code reached it."""

import sys
import threading
import time
import types

from sessionlab.testing import sleeps_of


def lesson_module(source: str) -> types.ModuleType:
    """A module standing in for a lesson's, made from `source`."""
    module = types.ModuleType("a_lesson")
    exec(source, module.__dict__)
    return module


def test_each_way_to_sleep_is_recorded_with_its_seconds():
    lesson = lesson_module(
        "import threading, time\n"
        "from time import sleep\n"
        "def by_module(): time.sleep(0.01)\n"
        "def by_name(): sleep(0.02)\n"
        "def by_event(): threading.Event().wait(0.03)\n")
    with sleeps_of(lesson) as slept:
        lesson.by_module()
        lesson.by_name()
        lesson.by_event()
    assert slept == [0.01, 0.02, 0.03]


def test_a_sleep_imported_inside_a_function_is_timed():
    lesson = lesson_module(
        "def pause():\n"
        "    from time import sleep as wait\n"
        "    wait(0.05)\n")
    with sleeps_of(lesson) as slept:
        lesson.pause()
    assert len(slept) == 1 and 0.04 <= slept[0] < 5, slept


def test_everything_is_put_back_and_a_profile_kept_going():
    seen = []

    def recorder(frame, event, arg):
        if event == "call":
            seen.append(frame.f_code.co_name)

    lesson = lesson_module("from time import sleep\n")
    real_sleep, real_wait = time.sleep, threading.Condition.wait
    sys.setprofile(recorder)
    try:
        with sleeps_of(lesson):
            def inside():
                pass
            inside()
        assert sys.getprofile() is recorder
    finally:
        sys.setprofile(None)
    assert "inside" in seen, "the profile in place before kept seeing calls"
    assert time.sleep is real_sleep and threading.Condition.wait is real_wait
    assert lesson.sleep is real_sleep
