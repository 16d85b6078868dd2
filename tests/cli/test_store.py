"""`sessionlab chat --store URL` and `sessionlab show --store URL`: lesson 11's sessions in
PostgreSQL, through the same commands as the files (a throwaway server, see
sessionlab.pgserver; skipped in one line without PostgreSQL)."""

from __future__ import annotations

import pytest

from sessionlab.pgserver import why_not_available

if (reason := why_not_available()) is not None:
    pytest.skip(f"chat --store needs PostgreSQL. {reason}", allow_module_level=True)

REFERENCE = ("--lesson", "11", "--solution")


def test_a_chat_kept_in_the_database_resumes_forks_and_shows(cli, database, tmp_path):
    """Day 1 and day 2 in two chats on one session kept in PostgreSQL, then a fork;
    show lists the sessions with their lineage and draws one as a chat."""
    town = ("--sessions", tmp_path / "town")
    first = cli("chat", "quest-1", *REFERENCE, "--store", database, *town,
                input="Ask the elder about the cave.\n")
    assert first.status == 0, first.out + first.err
    assert "(new)" in first.out and "Continue with" in first.out
    second = cli("chat", "quest-1", *REFERENCE, "--store", database, *town,
                 input="Buy a torch.\n")
    assert "4 message(s) read back" in second.out, second.out
    fork = cli("chat", "quest-2", "--fork-from", "quest-1", "--at", "4", *REFERENCE,
               "--store", database, *town, input="Hello.\n")
    assert "forked quest-1 at message 4 into quest-2" in fork.out, fork.out + fork.err

    listed = cli("show", "--store", database)
    assert "quest-1" in listed.out and "forked from quest-1 at message 4" in listed.out
    drawn = cli("show", "quest-1", "--store", database)
    assert "Buy a torch." in drawn.out and "talk_to" in drawn.out, drawn.out


def test_store_errors_are_one_line_naming_the_database(cli, database, tmp_path):
    """A lesson whose code keeps files, a session that does not exist, a server that
    cannot be reached: each is one error line, with what to do."""
    files_only = cli("chat", "quest-1", "--lesson", "07", "--solution", "--store",
                     database, "--sessions", tmp_path / "town", input="x\n")
    assert files_only.status == 1 and "use --lesson 11" in files_only.out + files_only.err
    missing = cli("show", "nobody-1", "--store", database)
    # A database no chat has used yet has not even the tables: said so, not a traceback
    assert missing.status == 1 and "no session" in missing.out + missing.err
    unreachable = cli("show", "--store",
                      f"postgresql://nobody@/x?host={tmp_path / 'no-server'}")
    said = unreachable.out + unreachable.err
    assert unreachable.status == 1 and "cannot read sessions from" in said, said


def test_erase_and_delete_never_touch_a_file_session_of_the_same_name(cli, database,
                                                                     tmp_path):
    """/delete in a chat kept in PostgreSQL must not delete the file session that has
    the same id in the sessions folder: the commands say they work on files only."""
    files = tmp_path / "town"
    kept = cli("chat", "quest-1", *REFERENCE, "--sessions", files,
               input="Ask the elder about the cave.\n")
    assert kept.status == 0, kept.out + kept.err
    log = files / "quest-1.jsonl"
    before = log.read_bytes()
    chat = cli("chat", "quest-1", *REFERENCE, "--store", database, "--sessions", files,
               input="Hello.\n/delete\ny\n/erase 0\ny\n")
    said = chat.out + chat.err
    assert said.count("works on sessions kept in files") == 2, said
    assert log.read_bytes() == before, "the file session of the same name was changed"
