"""Ctrl-C in a child process, as a terminal delivers it.

A shell starts a background job with SIGINT ignored, and a child inherits an ignored
signal: Python then never installs its KeyboardInterrupt handler, and every test that
presses Ctrl-C in a child would wait in vain whenever the suite itself runs in the
background. Children that are sent Ctrl-C start with this as their `preexec_fn`.
"""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """In the child, before it runs: SIGINT back to its default, as in a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
