"""The contract suite: the behaviour every session store of the course must have, run on
each of them, so that the two cannot drift apart.

`store` is parametrised: `jsonl` is lesson 07's reference (a folder of JSONL logs, flock,
blobs/ beside them), `postgres` lesson 11's (rows in PostgreSQL, an advisory lock, a
blob table). Each gives the same few verbs to the tests; the tests use only those and
what both modules define alike (Agent, the exceptions).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from sessionlab import course
from sessionlab.pgserver import why_not_available

ROOT = Path(__file__).resolve().parents[2]


def reference(name: str) -> ModuleType:
    """A lesson's reference solution, imported under a name of its own."""
    return course.load_module(ROOT / "solutions" / name / course.MODULE,
                              f"sessionlab_impl.contract_{name}")


class FileStore:
    """Lesson 07's store: `<folder>/<id>.jsonl`, its meta file and blobs/ (or a later
    lesson's file store, `lesson`)."""

    def __init__(self, folder: Path, lesson: str = "07_undo") -> None:
        self.module = reference(lesson)
        self.folder = folder

    def log(self, session_id: str, **options: Any) -> Any:
        return self.module.SessionLog(self.folder, session_id, **options)

    def fork(self, source_id: str, new_id: str, upto: int | None = None) -> None:
        self.module.fork(self.folder, source_id, new_id, upto=upto)

    def parent(self, session_id: str) -> str | None:
        meta = self.folder / f"{session_id}.meta.json"
        return json.loads(meta.read_text())["parent"] if meta.exists() else None

    def exists(self, session_id: str) -> bool:
        return (self.folder / f"{session_id}.jsonl").exists()

    # lesson 09's privacy operations (the final lesson's file store)

    def location(self) -> str:
        return str(self.folder)

    def delete(self, session_id: str) -> bool:
        return self.module.delete_session(self.folder, session_id)

    def expire(self, **options: Any) -> tuple[list[str], list[str]]:
        return self.module.expire(self.folder, **options)

    def collect(self) -> list[str]:
        return self.module.collect_blobs(self.folder, grace=0)

    def blobs(self) -> set[str]:
        blobs = self.folder / "blobs"
        return {path.name for path in blobs.iterdir()} if blobs.is_dir() else set()

    def holding(self, text: str) -> list[str]:
        """Every file of the folder whose bytes hold `text`."""
        return sorted(str(path.relative_to(self.folder))
                      for path in self.folder.rglob("*")
                      if path.is_file() and text.encode() in path.read_bytes())

    def age(self, session_id: str, days: float) -> None:
        """Make the session's last write `days` older than it is."""
        log = self.folder / f"{session_id}.jsonl"
        then = log.stat().st_mtime - days * 86400
        os.utime(log, (then, then))


class PostgresStore:
    """Lesson 11's store: rows of session_entries, sessions and session_blobs."""

    def __init__(self, url: str) -> None:
        self.module = reference("11_postgres")
        self.url = url

    def log(self, session_id: str, **options: Any) -> Any:
        return self.module.PostgresSessionLog(self.url, session_id, **options)

    def fork(self, source_id: str, new_id: str, upto: int | None = None) -> None:
        self.module.fork_postgres(self.url, source_id, new_id, upto=upto)

    def parent(self, session_id: str) -> str | None:
        found = self.module.lineage(self.url, session_id)
        return found["parent"] if found else None

    def exists(self, session_id: str) -> bool:
        return self.module.lineage(self.url, session_id) is not None

    # lesson 09's privacy operations, on rows (pgprivacy.py)

    def location(self) -> str:
        return self.url

    def delete(self, session_id: str) -> bool:
        return self.module.delete_postgres(self.url, session_id)

    def expire(self, **options: Any) -> tuple[list[str], list[str]]:
        return self.module.expire_postgres(self.url, **options)

    def collect(self) -> list[str]:
        return self.module.collect_postgres_blobs(self.url)

    def sql(self, statement: str, parameters: tuple = ()) -> list[tuple]:
        import psycopg
        with psycopg.connect(self.url, autocommit=True) as connection:
            cursor = connection.execute(statement, parameters)
            return cursor.fetchall() if cursor.description else []

    def blobs(self) -> set[str]:
        return {row[0] for row in self.sql("SELECT sha256 FROM session_blobs")}

    def holding(self, text: str) -> list[str]:
        """Every row (session, seq) and blob whose stored bytes hold `text`."""
        rows = self.sql("SELECT session_id, seq FROM session_entries WHERE "
                        "strpos(line, %s) > 0 OR strpos(body::text, %s) > 0 "
                        "ORDER BY 1, 2", (text, text))
        blobs = self.sql("SELECT sha256 FROM session_blobs WHERE "
                         "position(%s::bytea IN data) > 0", (text.encode(),))
        return [f"{session}:{seq}" for session, seq in rows] + [
            f"blob {name}" for name, in blobs]

    def age(self, session_id: str, days: float) -> None:
        self.sql("UPDATE session_entries SET written = written - %s * interval "
                 "'1 day' WHERE session_id = %s", (days, session_id))


@pytest.fixture(params=["jsonl", "postgres"])
def store(request: pytest.FixtureRequest, sessions: Path) -> Any:
    """Each store in turn; `postgres` is skipped, saying how to install it, when the
    server or its driver is missing."""
    if request.param == "jsonl":
        return FileStore(sessions)
    if (reason := why_not_available()) is not None:
        pytest.skip(f"the postgres store needs PostgreSQL. {reason}")
    return PostgresStore(request.getfixturevalue("database"))


@pytest.fixture(params=["jsonl", "postgres"])
def final_store(request: pytest.FixtureRequest, sessions: Path) -> Any:
    """The two stores of the last lesson (11), side by side in one module: its file
    store (lessons 01 to 10 grown whole: privacy included) and its PostgreSQL store.
    For what lesson 07's store has not learnt yet: the same refusals and the privacy
    operations."""
    if request.param == "jsonl":
        return FileStore(sessions, "11_postgres")
    if (reason := why_not_available()) is not None:
        pytest.skip(f"the postgres store needs PostgreSQL. {reason}")
    return PostgresStore(request.getfixturevalue("database"))
