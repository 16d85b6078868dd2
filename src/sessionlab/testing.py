"""Small helpers that lesson tests share (the kit's side, not the student's)."""

from __future__ import annotations

import contextlib
import inspect
import re
from collections.abc import Iterator
from types import ModuleType


def keep_lines_large(lesson: ModuleType, size: int) -> dict[str, int]:
    """SessionLog options that keep content of `size` bytes inside the log's line.

    From lesson 06 on, large content moves to blobs/. Tests about large *lines* (one write
    per line, no interleaving between writers) pass this so that they still write them
    when run against a later lesson's solution.
    """
    parameters = inspect.signature(lesson.SessionLog).parameters
    return {"blob_threshold": 2 * size} if "blob_threshold" in parameters else {}


class Raised:
    """What `raises` caught: `.value` is the exception (as with pytest.raises)."""

    value: BaseException | None = None


@contextlib.contextmanager
def raises(expected: type[BaseException] | tuple[type[BaseException], ...], why: str,
           match: str | None = None) -> Iterator[Raised]:
    """Like pytest.raises, but a block that raises nothing fails with `why`, the words
    that explain the likely cause, instead of a bare "DID NOT RAISE"."""
    # Imported here, not at the top: lesson 05's writer processes import this module,
    # and pytest would cost each of them a few tenths of a second at start.
    import pytest
    raised = Raised()
    try:
        yield raised
    except expected as error:
        raised.value = error
        if match is not None and not re.search(match, str(error)):
            pytest.fail(f"the {type(error).__name__} should mention {match!r}, it "
                        f"says: {error}. {why}", pytrace=False)
        return
    names = expected.__name__ if isinstance(expected, type) else \
        " or ".join(e.__name__ for e in expected)
    pytest.fail(f"expected {names}, but nothing was raised: {why}", pytrace=False)
