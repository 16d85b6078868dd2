# Lesson 01_append, yours to edit: generated from
# solutions/01_append/files.py; `sessionlab reset 01` makes it again.
"""Careful file operations the store is built on.

Here, the one a new session needs: `make_folder`, which makes the sessions folder (and
any parents it lacks) private to its owner, and in durable mode makes the name of each
folder it creates survive a power cut. The lessons that follow add more, each because a
plainer call loses data in some crash they show.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path


def make_folder(folder: Path, durable: bool = False) -> None:
    """Create `folder` and any parents it lacks, each readable by its owner only (0700).

    A session holds what a person said, and its name may say about what: other users
    should not even list them. (Path.mkdir(parents=True) would leave the parents to the
    umask: 0777 under umask 000.) With durable=True each new folder's name is synced in
    its parent.
    """
    if folder.is_dir():
        # Every writer calls this as it opens a session, and the folder is nearly
        # always there already: one stat, rather than one for each of its parents.
        return
    for path in [*reversed(folder.parents), folder]:
        if not path.is_dir():
            path.mkdir(mode=0o700, exist_ok=True)
            if durable:
                # A folder's name lives in its parent: until the parent is synced, a
                # power cut can lose the new folder, and every file in it with it.
                parent = os.open(path.parent, os.O_RDONLY)
                try:
                    os.fsync(parent)
                finally:
                    os.close(parent)


def check_still_linked(fd: int, path: Path) -> None:
    """Raise OSError (ESTALE) when the file open as `fd` has no name left.

    A writer keeps its log open. If a person removes the log, or saves another file
    over its name (as an editor does), the file the writer holds is unlinked: what it
    adds there no reader would ever find. (A log renamed, kept under another name, is
    still a file someone can read: its writer goes on writing to it.)
    """
    if os.fstat(fd).st_nlink == 0:
        raise OSError(errno.ESTALE, "the log was removed, or another file saved over "
                      "it, since this writer opened it: no name reaches the file it "
                      "holds, so nothing was written there. Close the writer and open "
                      "the session again", str(path))
