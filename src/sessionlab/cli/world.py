"""The town of a chat session, kept beside its log: `<folder>/<id>.town.json`.

The log holds the conversation; the town (gold, items) is the world the tools change, and is
deliberately not in it (lesson 03: a fork copies history, not the world). A chat that
resumes a session must still find the gold spent: so the chat keeps the town in a file of its
own, written whole (temp file + rename) after every purchase, read back on resume, and
copied to a fork when the fork is made, gold spent staying spent.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..town import PRICES, Town
from . import files

FORMAT = 1
TOWN_LIMIT = 1 << 20     # bytes: a town file holds gold and a few items


class TownFileError(Exception):
    """A town file that cannot be read back: the chat stops rather than start over."""


def town_path(folder: Path, session_id: str) -> Path:
    return folder / f"{session_id}.town.json"


def read_town(path: Path) -> tuple[int, list[str]] | None:
    """(gold, items) from a town file; None when there is none."""
    try:
        # Never a pipe or a folder in its place: reading a pipe would wait for ever.
        text = files.read_text(path, TOWN_LIMIT)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise TownFileError(f"cannot read {path}: {getattr(error, 'strerror', None) or error}") from None
    try:
        data = json.loads(text)
    except ValueError as error:
        raise TownFileError(f"{path} is not a town file (not JSON: {error})") from None
    gold = data.get("gold") if isinstance(data, dict) else None
    items = data.get("inventory") if isinstance(data, dict) else None
    if not (type(gold) is int and gold >= 0 and isinstance(items, list)
            and all(isinstance(item, str) and item in PRICES for item in items)):
        raise TownFileError(f"{path} is not a town file (it needs gold, a whole number, and inventory, "
                            "a list of the shop's items)")
    return gold, items


def write_town(path: Path, town: Town) -> None:
    """Write the town whole: a temp file in the same folder, then a rename over the old one."""
    data = json.dumps({"format": FORMAT, "gold": town.gold, "inventory": town.inventory}, indent=1) + "\n"
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(data)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def keep(town: Town, path: Path, failed: Callable[[OSError], Any]) -> bool:
    """Put the town saved at `path` (if any) into `town`, and save it there after every purchase.

    Returns whether a saved town was found. Lesson code reaches the town only through
    `town.functions`, so the saving wraps `functions["buy"]`. `failed` is told when the file
    cannot be written (a full disk): the purchase stands, and the chat says the file is behind.
    """
    saved = read_town(path)
    if saved is not None:
        town.gold, town.inventory = saved[0], list(saved[1])
    buy = town.functions["buy"]

    def buy_and_save(*args: Any, **kwargs: Any) -> str:
        before = (town.gold, list(town.inventory))
        result = buy(*args, **kwargs)
        if (town.gold, town.inventory) != before:
            try:
                write_town(path, town)
            except OSError as error:
                failed(error)
        return result

    town.functions["buy"] = buy_and_save
    return saved is not None


def copy_town(folder: Path, source_id: str, new_id: str) -> bool:
    """Give a new fork the town of its source as it is now; False if the source has none."""
    saved = read_town(town_path(folder, source_id))
    if saved is None:
        return False
    town = Town(saved[0])
    town.inventory = list(saved[1])
    write_town(town_path(folder, new_id), town)
    return True
