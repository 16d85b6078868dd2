"""Lesson 02: continue tomorrow.

Run: pytest lessons/02_load            (your code)
     pytest lessons/02_load --solution (the reference)
"""

import json
import os
import resource

import pytest

from sessionlab.scripted import ScriptedModel, call, say, use
from sessionlab.testing import open_descriptors
from sessionlab.town import Town

DAY_ONE = [
    use(call("talk_to", npc="elder")),
    say("The elder says: bring a torch and a rope."),
]


def play_day(lesson, sessions, script, text, session_id="quest-1", town=None):
    """One day of the quest:
    a fresh model, client and agent, as a new process would have."""
    model = ScriptedModel(list(script))
    with lesson.SessionLog(sessions, session_id) as log:
        agent = lesson.Agent(
            model.client(), model=model.model, tools=town or Town(), session=log
        )
        agent.run(text)
    return agent, model


def fingerprint(path):
    info = os.stat(path)
    return path.read_bytes(), info.st_ino, info.st_mtime_ns, info.st_size


@pytest.mark.key
@pytest.mark.task("02.1")
def test_day_two_first_request_carries_all_of_day_one(lesson, sessions):
    """A new agent with day 1's session id reads the log back before its first request,
    so day 2's model sees all of day 1."""
    day_one, _ = play_day(lesson, sessions, DAY_ONE, "Ask the elder about the cave.")

    day_two, model = play_day(
        lesson, sessions, [say("A torch and a rope.")], "What did the elder say?"
    )

    first_request = model.requests[0]["messages"]
    assert first_request[:-1] == day_one.messages, (
        f"day 1 left {len(day_one.messages)} messages in the log (user, tool call, "
        f"tool result, answer); day 2's first request carried {len(first_request) - 1} "
        f"before the new question: {first_request[:-1]}"
    )
    question = {"role": "user", "content": "What did the elder say?"}
    assert first_request[-1] == question, (
        "day 2's first request should end with the new question, after day 1; it "
        f"ends with {first_request[-1]}")


@pytest.mark.key
@pytest.mark.task("02.1")
def test_day_two_is_appended_after_day_one(lesson, sessions):
    """Day 2 appends only its own messages after day 1's; writing the loaded history
    again would double the log."""
    day_one, _ = play_day(lesson, sessions, DAY_ONE, "Ask the elder about the cave.")
    day_two, _ = play_day(
        lesson, sessions, [say("A torch and a rope.")], "What did the elder say?"
    )

    with lesson.SessionLog(sessions, "quest-1") as log:
        loaded = log.load()
    assert loaded == day_two.messages, (
        "the log should hold day 1 then day 2, exactly what the agent holds"
    )
    assert len(loaded) == len(day_one.messages) + 2, (
        f"day 2 adds two messages to day 1's {len(day_one.messages)}; the log has "
        f"{len(loaded)} "
        "(did day 2 write day 1's messages a second time?)")


@pytest.mark.key
@pytest.mark.task("02.1")
def test_an_unknown_session_starts_empty_and_creates_nothing(lesson, sessions):
    """An id with no log yet loads as an empty history, and loading it creates no
    file."""
    with lesson.SessionLog(sessions, "never-played") as log:
        loaded = log.load()

    assert loaded == [], (
        f"a session with no log has no history; load() returned {loaded}")
    assert list(sessions.iterdir()) == [], (
        "loading a session that has no log created "
        f"{sorted(p.name for p in sessions.iterdir())}: loading only ever reads")


@pytest.mark.task("02.1")
def test_a_new_agent_on_an_unknown_session_starts_empty(
        lesson, sessions, model, town):
    """A new agent on an id with no log yet starts with an empty history."""
    with lesson.SessionLog(sessions, "never-played") as log:
        agent = lesson.Agent(model.client(), model=model.model, tools=town, session=log)

    assert agent.messages == [], (
        "a session with no log has no history; the new agent starts with "
        f"{agent.messages}")
    made = sorted(p.name for p in sessions.iterdir())
    assert made == [], (
        f"making an agent on a session with no log created {made}: resuming only "
        "reads, and the log is made by the first message appended to it")


@pytest.mark.task("02.1")
def test_a_new_agent_on_a_damaged_log_raises_rather_than_starting_over(
        lesson, sessions, model, town):
    """A log holding a line that is no message is no new session: the new agent
    refuses it with the error load gives, and the log stays as it was, rather than
    starting empty and appending after a history the model never saw."""
    path = sessions / "quest-1.jsonl"
    data = (b'{"role": "user", "content": "Remember the rope."}\n'
            b'{"content": "a line with no role"}\n')
    path.write_bytes(data)
    with lesson.SessionLog(sessions, "quest-1") as log:
        try:
            agent = lesson.Agent(model.client(), model=model.model, tools=town,
                                 session=log)
        except ValueError:
            pass
        else:
            pytest.fail(
                "line 2 of the session's log is no message (it has no role), and a "
                f"new agent on the session started with {agent.messages!r} instead of "
                "raising the error load gives (InvalidMessage, naming the file and the "
                "line). Started over, the session's next messages land after a "
                "history the model never saw, and the damage is never mended",
                pytrace=False)
    assert path.read_bytes() == data, "resuming a damaged log must leave it as it was"


@pytest.mark.task("02.1")
def test_an_agent_without_a_session_starts_empty(lesson, model, town):
    """An agent given no session works in memory as in lesson 00 and starts empty."""
    try:
        agent = lesson.Agent(model.client(), model=model.model, tools=town)
    except (AttributeError, TypeError) as error:
        pytest.fail("an agent given no session (session=None, as in lesson 00) could "
                    f"not be made: resuming it raised {type(error).__name__}: {error}. "
                    "Such an agent has no log to read and starts empty", pytrace=False)
    assert agent.messages == [], (
        "an agent given no session should start empty; it starts with "
        f"{agent.messages}")


@pytest.mark.key
@pytest.mark.task("02.1")
def test_loading_never_rewrites_or_truncates_the_log(lesson, sessions):
    """Loading only reads: the log's bytes, inode and modification time stay as they
    were, so a reader can never damage a session."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in [{"role": "user", "content": "Ask the elder about the cave."},
                        {"role": "assistant", "content": "Bring a torch and a rope."}]:
            log.append(message)
    path = sessions / "quest-1.jsonl"
    before = fingerprint(path)

    for _ in range(2):
        with lesson.SessionLog(sessions, "quest-1") as log:
            log.load()

    after = fingerprint(path)
    assert after[0] == before[0], "loading changed the log's bytes"
    assert after[1] == before[1], (
        "loading replaced the log with a new file (its inode changed)"
    )
    assert after[2] == before[2], (
        "loading wrote to the log: its bytes are the same, but its modification time "
        "changed, so a load opened it to write"
    )


@pytest.mark.task("02.1")
def test_unicode_line_separators_inside_content_load_back_exactly(lesson, sessions):
    """Content holding U+2028, U+2029 or U+0085 loads back exactly: they are text inside
    a line, not the end of one."""
    tricky = "one\u2028two\u2029three\x85four\x1cfive\rsix\nseven"
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": tricky})
        log.append({"role": "assistant", "content": "noted"})
        try:
            loaded = log.load()
        except ValueError as error:
            pytest.fail("append wrote two messages, the first with U+2028, U+2029 "
                        "and U+0085 unescaped in its text, and loading them failed "
                        f"({type(error).__name__}: {error}): the load cut the first "
                        "message's line where one of those characters stands in its "
                        "text, and the pieces it made of that line are no JSON",
                        pytrace=False)

    assert [m["content"] for m in loaded] == [tricky, "noted"], (
        f"wrote two messages, the first with the text {tricky!r} (U+2028, U+2029 and "
        "U+0085 unescaped inside its line); load() returned the texts "
        f"{[m['content'] for m in loaded]!r}")


@pytest.mark.task("02.1")
def test_tool_calls_and_empty_content_survive_the_round_trip(lesson, sessions):
    """Tool calls, tool results and a null content load back exactly as they were
    written, so the resumed request is valid."""
    messages = [
        {"role": "user", "content": "Buy a rope."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1_0",
                    "type": "function",
                    "function": {"name": "buy", "arguments": '{"item": "rope"}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_1_0",
            "content": "You bought a rope for 4 gold. 6 gold left.",
        },
        {"role": "assistant", "content": ""},
    ]
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in messages:
            log.append(message)
    with lesson.SessionLog(sessions, "quest-1") as log:
        loaded = log.load()

    lost = [f"message {n} lost {sorted(set(wrote) - set(got))}"
            for n, (wrote, got) in enumerate(zip(messages, loaded), start=1)
            if isinstance(got, dict) and set(wrote) - set(got)]
    assert loaded == messages, (
        "a tool call, its result, content null and content \"\" should load back "
        "exactly "
        f"as written{' (' + '; '.join(lost) + ')' if lost else ''}; wrote "
        f"{messages!r}, "
        f"loaded {loaded!r}")


@pytest.mark.task("02.1")
def test_a_log_larger_than_one_read_loads_whole(lesson, sessions):
    """A log of hundreds of KiB of CJK text loads back exactly, whatever the reads."""
    # 3-byte characters after a 1-byte one: every power-of-two read size ends, somewhere
    # in the file, in the middle of a character.
    messages = [{"role": "user", "content": "x" + "洞窟の地図" * 8_000 + f" part {n}"}
                for n in range(3)]
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in messages:
            log.append(message)
    size = (sessions / "quest-1.jsonl").stat().st_size

    with lesson.SessionLog(sessions, "quest-1") as log:
        loaded = log.load()

    lengths = [len(m.get("content") or "") for m in loaded if isinstance(m, dict)]
    assert len(loaded) == 3, (
        f"the log holds 3 messages in {size // 1024} KiB and load() returned "
        f"{len(loaded)} (of {lengths} characters): the end of the log was never "
        "read")
    assert loaded == messages, (
        f"the {size // 1024} KiB log came back changed ({lengths} characters, "
        f"expected {[len(m['content']) for m in messages]}, or different text). All "
        "but one of each message's characters are 3 bytes long in UTF-8, and some "
        "came back lost or replaced")


@pytest.mark.task("02.1")
def test_a_long_history_is_resumed_whole(lesson, sessions, model, town):
    """A new agent starts from every message of a long log, not from its last few."""
    history = []
    for n in range(30):
        history += [{"role": "user", "content": f"question {n}"},
                    {"role": "assistant", "content": f"answer {n}"}]
    with lesson.SessionLog(sessions, "quest-1") as log:
        for message in history:
            log.append(message)
    model.add(say("All of it."))

    with lesson.SessionLog(sessions, "quest-1") as log:
        agent = lesson.Agent(model.client(), model=model.model, tools=town, session=log)
        agent.run("What did we talk about?")

    sent = model.requests[0]["messages"] if model.requests else []
    assert sent[:-1] == history, (
        f"the log holds {len(history)} messages; the first request of the new agent "
        f"carried {max(len(sent) - 1, 0)} of them. Resume returns the whole history: "
        "trimming it to fit a context window is a later decision, made on the "
        "request, never on what is loaded")


@pytest.mark.task("02.1")
def test_a_log_that_cannot_be_read_is_an_error_not_an_empty_session(lesson, sessions):
    """Only a missing log is a new session; a log that cannot be read raises."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": "Remember the rope."})
    log = lesson.SessionLog(sessions, "quest-1")

    # A real "too many open files": lower this process's descriptor limit to the lowest
    # free descriptor, so that opening the log fails with EMFILE, then restore it.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowest = os.open(os.devnull, os.O_RDONLY)
    os.close(lowest)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest, hard))
    try:
        loaded = log.load()
    except OSError:
        return
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        log.close()
    if loaded == [{"role": "user", "content": "Remember the rope."}]:
        return      # it read the log without a new descriptor: that is a load too
    pytest.fail(
        "the log exists but could not be opened (too many open files) and load() "
        f"returned {loaded!r}, as if the session were new. The caller must learn that "
        "the log could not be read: an empty history starts the session over, and its "
        "next append lands in the old log")


@pytest.mark.task("02.1")
def test_loading_many_times_leaks_no_descriptors(lesson, sessions):
    """load() closes the file it reads, however often it is called."""
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append({"role": "user", "content": "hello"})
    before = open_descriptors()
    with lesson.SessionLog(sessions, "quest-1") as log:
        for _ in range(20):
            log.load()
    leaked = open_descriptors() - before

    assert leaked == 0, (
        f"after 20 loads, {leaked} more descriptors are open than before them: each "
        "load left the log open, and a server resuming many sessions runs out of "
        "descriptors")


@pytest.mark.task("02.1")
def test_a_session_id_with_dots_resumes_its_own_history(lesson, sessions):
    """An id such as 'quest.day-2' loads `<id>.jsonl`, not a name cut at a dot."""
    with lesson.SessionLog(sessions, "quest.day-2") as log:
        log.append({"role": "user", "content": "Day two begins."})

    with lesson.SessionLog(sessions, "quest.day-2") as log:
        loaded = log.load()

    assert loaded == [{"role": "user", "content": "Day two begins."}], (
        "session 'quest.day-2' has one message in "
        f"{sorted(p.name for p in sessions.iterdir())}, load() returned {loaded!r}: "
        "it did not read quest.day-2.jsonl")


@pytest.mark.task("02.1")
def test_a_second_load_sees_what_was_appended_since(lesson, sessions):
    """Each load reads the log as it is now, with the lines appended since the last."""
    first = {"role": "user", "content": "first"}
    second = {"role": "user", "content": "second"}
    with lesson.SessionLog(sessions, "quest-1") as log:
        log.append(first)
        log.load()
        log.append(second)
        loaded = log.load()

    assert loaded == [first, second], (
        f"after appending a second message, load() returned {loaded!r}: the message "
        "appended since the first load is not among them")


@pytest.mark.task("02.1")
def test_non_ascii_text_loads_back_exactly(lesson, sessions):
    """Accented letters, CJK and emoji, written as UTF-8 by append, load back as the
    same text."""
    texts = ["café au lait", "洞窟の地図", "a torch 🔥"]
    with lesson.SessionLog(sessions, "quest-1") as log:
        for text in texts:
            log.append({"role": "user", "content": text})
    with lesson.SessionLog(sessions, "quest-1") as log:
        loaded = [m.get("content") if isinstance(m, dict) else m for m in log.load()]

    if loaded == texts:
        return
    # Name a wrong encoding only when the text shows it: UTF-8 bytes read as another.
    misread = [
        enc
        for enc in ("latin-1", "cp1252")
        if loaded == [t.encode("utf-8").decode(enc, errors="replace") for t in texts]
    ]
    why = (f"these are the UTF-8 bytes decoded as {misread[0]}, but the log is UTF-8 "
           "(append writes it so), whatever the machine's locale") if misread else (
           "the text changed on its way through the log")
    pytest.fail(f"wrote the contents {texts!r}, load() returned {loaded!r}; {why}")


@pytest.mark.task("02.1")
def test_a_system_prompt_is_sent_once_on_day_two_and_never_stored(lesson, sessions):
    """The system prompt is the agent's, sent first with every request and never part
    of the history: day 2 sends it once, before day 1's messages, and the log never
    holds it."""
    guide = "You are a guide in a small town."

    def day(script, text):
        model = ScriptedModel(list(script))
        with lesson.SessionLog(sessions, "quest-1") as log:
            agent = lesson.Agent(model.client(), model=model.model, tools=Town(),
                                 session=log, system=guide)
            agent.run(text)
        return agent, model

    day_one, _ = day(DAY_ONE, "Ask the elder about the cave.")
    day_two, model = day([say("A torch and a rope.")], "What did the elder say?")

    sent = model.requests[0]["messages"]
    systems = [m for m in sent if m.get("role") == "system"]
    assert sent[0] == {"role": "system", "content": guide} and len(systems) == 1, (
        "day 2's first request should carry the system prompt once, first; it carries "
        f"{len(systems)} system message(s): {[m.get('role') for m in sent]}")
    assert sent[1:-1] == day_one.messages, (
        "after the system prompt come day 1's messages as the log holds them")
    stored = [json.loads(line) for line in (sessions / "quest-1.jsonl").read_bytes()
              .split(b"\n") if line]
    assert not any(m.get("role") == "system" for m in stored), (
        "the system prompt is the agent's setting, not a message of the session: the "
        "log should never hold it")
