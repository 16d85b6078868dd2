"""Lesson 01: save as you go.

Run: pytest lessons/01_append            (your code)
     pytest lessons/01_append --solution (the reference)
"""

import json
import os
import stat

import pytest

from sessionlab.scripted import Crash, SimulatedCrash, call, say, use
from sessionlab.testing import raises

BAD_IDS = ["../x", "/etc/passwd", "a/b", "", "a\x00b", "x" * 129, "..", ".hidden", "quest 1", "a\\b", "~root"]


def lines_of(path):
    """The log's lines as parsed JSON, or [] if the file does not exist yet."""
    if not path.exists():
        return []
    found = []
    for number, line in enumerate(path.read_bytes().split(b"\n"), start=1):
        try:
            found.append(json.loads(line)) if line else None
        except ValueError:
            pytest.fail(f"line {number} of {path.name} is not a JSON object on its "
                        f"own: {line[:80]!r}. Each message is one line: json.dumps "
                        "without indent, then a newline", pytrace=False)
    return found


def agent_on(lesson, model, town, sessions, session_id="quest-1", **options):
    log = lesson.SessionLog(sessions, session_id, **options)
    return lesson.Agent(model.client(), model=model.model, tools=town, session=log), log


@pytest.mark.key
@pytest.mark.task("01.3")
@pytest.mark.task("01.2")
def test_each_message_is_on_disk_before_the_next_model_call(lesson, model, town, sessions):
    """Every message is in the log before the model is called again (checked from inside
    the scripted model), so a crash never loses what was already said."""
    log_path = sessions / "quest-1.jsonl"
    model.on_request(lambda request: lines_of(log_path))   # runs inside the model call
    model.add(use(call("talk_to", npc="elder")), say("The elder wants a torch and a rope."))
    agent, log = agent_on(lesson, model, town, sessions)

    with log:
        agent.run("Ask the elder about the cave.")

    on_disk_at_first_call, on_disk_at_second_call = model.observations
    assert on_disk_at_first_call == model.requests[0]["messages"], (
        "when the model is called the first time, the user's message must already be in the log; "
        f"the log held {on_disk_at_first_call}")
    assert on_disk_at_second_call == model.requests[1]["messages"], (
        "at the second model call, the log must hold everything sent so far (user, tool call, "
        f"tool result); it held {len(on_disk_at_second_call)} of {len(model.requests[1]['messages'])} messages")


@pytest.mark.key
@pytest.mark.task("01.2")
def test_the_log_holds_exactly_the_conversation_one_json_object_per_line(lesson, model, town, sessions):
    """The log holds the agent's messages in order, one JSON object per
    newline-terminated line, and nothing else."""
    model.add(use(call("talk_to", npc="guard"), call("buy", item="torch")), say("Ready."))
    agent, log = agent_on(lesson, model, town, sessions)

    with log:
        agent.run("Get ready for the cave.")

    assert (sessions / "quest-1.jsonl").exists(), "after a turn, the log should exist"
    raw = (sessions / "quest-1.jsonl").read_bytes()
    assert raw.endswith(b"\n"), "every line, the last one included, ends with a newline"
    assert lines_of(sessions / "quest-1.jsonl") == agent.messages, (
        "the log should hold every message of agent.messages, in order, one per line")


@pytest.mark.task("01.3")
def test_a_crash_mid_run_leaves_every_earlier_message_on_disk(lesson, model, town, sessions):
    """A crash in the middle of a turn leaves every message said before it on disk:
    saving as you go is the point of this lesson."""
    model.add(use(call("buy", item="rope")), Crash())
    agent, log = agent_on(lesson, model, town, sessions)

    with pytest.raises(SimulatedCrash):
        agent.run("Buy a rope.")   # the process "dies" during the second model call
    log.close()

    roles = [m["role"] for m in lines_of(sessions / "quest-1.jsonl")]
    assert roles == ["user", "assistant", "tool"], (
        "the crash happened during the second model call: the user's message, the model's tool "
        f"call and the tool's result were all said before it and must be on disk; found {roles}")


@pytest.mark.task("01.2")
def test_non_ascii_text_stays_readable_in_the_file(lesson, sessions):
    """Non-ASCII text is written as UTF-8 (ensure_ascii=False), so the log stays
    readable and greppable by a person."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": "Café au lait, Ελληνικά, 洞窟へ"})

    text = (sessions / "quest-1.jsonl").read_text(encoding="utf-8")
    assert "Café au lait, Ελληνικά, 洞窟へ" in text, (
        "non-ASCII text should be written as UTF-8, readable in the file, not as \\u escapes: "
        f"use json.dumps(..., ensure_ascii=False). The file holds: {text!r}")


@pytest.mark.task("01.2")
def test_a_newline_inside_content_stays_one_line(lesson, sessions):
    """A newline inside a message's content is escaped by JSON, so one message is always
    exactly one line."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": "line one\nline two\r\nline three"})
        log.append({"role": "assistant", "content": "ok"})

    raw = (sessions / "quest-1.jsonl").read_bytes()
    lines = raw.count(b"\n")
    assert lines == 2, f"two messages must be exactly two lines, the file has {lines}: {raw!r}"
    assert json.loads(raw.split(b"\n")[0])["content"] == "line one\nline two\r\nline three"


@pytest.mark.key
@pytest.mark.task("01.2")
def test_a_second_log_object_appends_and_never_truncates(lesson, sessions):
    """Opening the log of an existing session appends to it; a log that started over
    would lose the earlier conversation."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": "day one"})
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": "day two"})

    contents = [m["content"] for m in lines_of(sessions / "quest-1.jsonl")]
    assert contents == ["day one", "day two"], (
        f"a log is append-only: opening it again must add to the end, never start over; found {contents}")


@pytest.mark.key
@pytest.mark.task("01.1")
@pytest.mark.parametrize("bad_id", BAD_IDS, ids=lambda v: repr(v) if len(v) < 20 else f"{len(v)} characters")
def test_a_session_id_that_is_not_a_plain_name_is_refused(lesson, tmp_path, bad_id):
    """A session id that could name a path (../x, /etc/x, empty, NUL) is refused before
    any file or folder is created."""
    sessions = tmp_path / "sessions"
    before = sorted(p.name for p in tmp_path.rglob("*"))

    with raises(lesson.InvalidSessionId,
                f"check_session_id({bad_id!r}) accepted the id: a session id must "
                "be a plain name, the whole of it (re.fullmatch)"):
        lesson.check_session_id(bad_id)
    with raises(lesson.InvalidSessionId,
                f"SessionLog accepted the id {bad_id!r}: check it before the id "
                "becomes a path"):
        lesson.SessionLog(sessions, bad_id)

    assert sorted(p.name for p in tmp_path.rglob("*")) == before, "a refused id must not create any file or folder"


@pytest.mark.task("01.1")
def test_the_refusal_says_what_a_valid_id_looks_like(lesson):
    """The refusal quotes the id it refused and says what a valid one looks like, so the
    caller can fix it."""
    with raises(ValueError, "check_session_id('../x') accepted a path") as refused:
        lesson.check_session_id("../x")
    assert "../x" in str(refused.value), f"the error should quote the id it refused: {refused.value}"


@pytest.mark.task("01.1")
@pytest.mark.parametrize("good_id", ["quest-1", "Day_2.branch", "x" * 128, "7"],
                         ids=lambda v: v if len(v) < 20 else f"{len(v)} characters")
def test_plain_session_ids_are_accepted(lesson, good_id):
    """Ordinary ids (letters, digits, dashes, underscores, dots inside) are accepted:
    the check refuses paths, not names."""
    assert lesson.check_session_id(good_id) == good_id


class FsyncRecorder:
    """Wraps os.fsync, remembering for each call whether it synced a folder or a file."""

    def __init__(self):
        self.kinds = []
        self.real = os.fsync

    def __call__(self, fd):
        self.kinds.append("folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        self.real(fd)


@pytest.mark.task("01.4")
@pytest.mark.task("01.2")
def test_durable_mode_fsyncs_every_line_and_the_folder_of_a_new_log(lesson, sessions, monkeypatch):
    """In durable mode every line is fsynced, and the folder once when the log is new,
    so an acknowledged message survives a power cut."""
    fsync = FsyncRecorder()
    monkeypatch.setattr(lesson.os, "fsync", fsync)

    with lesson.SessionLog(sessions, "quest-1", durable=True) as log:
        for n in range(3):
            log.append({"role": "user", "content": f"message {n}"})
    assert fsync.kinds.count("file") == 3, f"durable mode: one file fsync per line, got {fsync.kinds}"
    assert fsync.kinds.count("folder") == 1, (
        f"a new log's name lives in its folder: fsync the folder once when the file is created; got {fsync.kinds}")

    fsync.kinds.clear()
    with lesson.SessionLog(sessions, "quest-1", durable=True) as log:
        log.append({"role": "user", "content": "again"})
    assert fsync.kinds == ["file"], f"the log already existed: only the line needs syncing, got {fsync.kinds}"


@pytest.mark.task("01.2")
def test_without_durable_mode_nothing_is_fsynced(lesson, sessions, monkeypatch):
    """Without durable mode nothing is fsynced: fsync costs milliseconds per line and is
    an opt-in."""
    fsync = FsyncRecorder()
    monkeypatch.setattr(lesson.os, "fsync", fsync)

    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": "quick"})

    assert fsync.kinds == [], f"fsync costs milliseconds: only durable mode should call it, got {fsync.kinds}"
