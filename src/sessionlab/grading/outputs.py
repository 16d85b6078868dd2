"""The grades as CSV and JSON, and the checks on where they go.

Every text that came from a run (error, failure message) is cut to a bound and stripped of
control characters, so nothing a student prints can make a file grow without bound or
move the cursor of whoever reads it. Files are written whole (temp file, then rename).
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from pathlib import Path

CSV_LIMIT = 300          # characters of an error in a CSV cell
JSON_LIMIT = 1000        # characters of any message in the JSON
JSON_FAILURES = 100      # failures listed per lesson in the JSON (the count is always there)
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def cut(text: str | None, limit: int) -> str:
    """`text` without control characters, at most about `limit` characters long."""
    if not text:
        return ""
    text = CONTROL.sub("?", str(text))
    if len(text) <= limit:
        return text
    return text[:limit] + f"... [cut: {len(text)} characters]"


def output_problem(given: str) -> str | None:
    """Why a file cannot be written at `given`, checked before grading starts; else None."""
    path = Path(given)
    parent = path.parent
    if path.is_dir():
        return f"--csv/--json {given}: is a folder, not a file"
    if not parent.is_dir():
        return f"{given}: the folder {parent} does not exist"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{given}: the folder {parent} is not writable"
    if path.exists() and not os.access(path, os.W_OK):
        return f"{given}: the file exists and is not writable"
    return None


def write_whole(path: Path, text: str) -> None:
    """Write `text` to `path` through a temp file beside it: never a half-written file."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temp.write_text(text, encoding="utf-8", newline="")
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


CSV_COLUMNS = ["student", "lesson", "passed", "total", "state", "tests_edited",
               "hints_used", "hints_available", "flags", "error", "path"]


def csv_text(rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_COLUMNS)
    for row in rows:
        writer.writerow([cut(str(row[c]), CSV_LIMIT) if c in ("error", "flags")
                         else row[c] for c in CSV_COLUMNS])
    return buffer.getvalue()


def json_text(data: dict) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False)
