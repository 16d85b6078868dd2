"""The lessons' `check_time`: a time an act wrote is its own, with its zone."""

from datetime import datetime, timedelta, timezone

import pytest

from sessionlab.testing import check_time

BEFORE = datetime(2026, 12, 3, 10, 0, 0, tzinfo=timezone.utc)
AFTER = BEFORE + timedelta(seconds=2)


def test_a_time_inside_the_window_with_its_zone_passes():
    check_time("2026-12-03T10:00:01+00:00", BEFORE, AFTER, "at", "the time of that undo")
    check_time("2026-12-03T11:00:02+01:00", BEFORE, AFTER, "at", "the time of that undo")


@pytest.mark.parametrize("value", [
    "2026-12-03T09:59:59+00:00",    # before the act: a time taken once, earlier
    "2026-12-03T10:00:03+00:00",    # after it
    "2026-12-03T10:00:01",          # no zone
    "yesterday", None, 1764756001,  # no ISO 8601 time at all
])
def test_any_other_value_fails_in_words_saying_what_it_should_be(value):
    with pytest.raises(AssertionError) as failure:
        check_time(value, BEFORE, AFTER, '"at" of undo 2', "the time of that undo",
                   "a time taken once is the wrong one")
    said = str(failure.value)
    assert said.startswith('"at" of undo 2 should be the time of that undo: an ISO '
                           "8601 time with its time zone, between 2026-12-03 10:00:00"), said
    assert repr(value) in said and said.endswith("(a time taken once is the wrong one)")
