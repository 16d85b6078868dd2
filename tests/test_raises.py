"""The lessons' `raises`: every way a block can end says in words what happened."""

import pytest

from sessionlab.testing import raises


class BlobError(Exception):
    pass


def test_the_expected_error_is_kept_for_the_test_to_read():
    with raises(BlobError, "a missing blob was loaded") as raised:
        raise BlobError("blobs/ab12 is missing")
    assert "ab12" in str(raised.value)


def test_nothing_raised_fails_with_the_likely_cause():
    with pytest.raises(pytest.fail.Exception) as failure:
        with raises(BlobError, "a missing blob was loaded without an error"):
            pass
    assert str(failure.value) == ("expected BlobError, but nothing was raised: a missing "
                                  "blob was loaded without an error")


def test_another_error_names_both_and_where_it_was_raised():
    with pytest.raises(pytest.fail.Exception) as failure:
        with raises((BlobError, ValueError), "a missing blob was loaded"):
            open("/nonexistent/blobs/ab12", "rb")
    said = str(failure.value)
    assert said.startswith("expected BlobError or ValueError, got FileNotFoundError: "), said
    assert "ab12" in said and "(raised at test_raises.py:" in said, said


def test_an_error_from_a_helper_names_the_line_that_called_it_too():
    def helper():
        raise FileNotFoundError("blobs/ab12")

    with pytest.raises(pytest.fail.Exception) as failure:
        with raises(BlobError, "a missing blob was loaded"):
            helper()
    said = str(failure.value)
    assert said.count("test_raises.py:") == 2 and ", called from test_raises.py:" in said, said


def test_a_task_not_written_yet_goes_through_for_the_plugin_to_name():
    with pytest.raises(NotImplementedError):
        with raises(BlobError, "a missing blob was loaded"):
            raise NotImplementedError("task 06.3 is not written yet: ...")
