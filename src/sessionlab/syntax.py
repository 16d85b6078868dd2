"""Parsing Python source while other threads may parse too.

CPython 3.11 keeps the depth counter it uses while it builds `ast` nodes in the
interpreter's state, shared by every thread (CPython issue 106905). When a collection
runs a finalizer in the middle of a parse, another thread can take the interpreter and
parse at the same time; both then fail with "SystemError: AST constructor recursion
depth mismatch". The maintainers' checks and the mutation pass run in threads, so each
parse of ours takes one lock. Parsing a lesson file takes milliseconds: nothing waits
long on it.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

# Reentrant: a finalizer that parses, run by a collection in the middle of a parse,
# goes on in the thread that holds the lock instead of waiting on itself.
_ONE_AT_A_TIME = threading.RLock()


def parse(source: str | bytes, filename: str = "<unknown>", mode: str = "exec") -> Any:
    """`ast.parse`, one thread at a time."""
    with _ONE_AT_A_TIME:
        return ast.parse(source, filename=filename, mode=mode)

