"""The log's laws, for any content hypothesis can think of (property-based)."""

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from sessionlab.town import Town

# The campaign (tests/conftest.py): the store's laws tried on many generated histories.
pytestmark = pytest.mark.campaign

# Any text JSON can carry, the awkward characters made likely: line and paragraph
# separators, NEL, CR, NUL, lone surrogates excluded (they cannot be UTF-8 encoded).
awkward = st.sampled_from(["\n", "\r", "\u2028", "\u2029", "\x85", "\x00", "\ufeff", '"', "\\", "é", "洞"])
text = st.lists(st.one_of(st.text(st.characters(exclude_categories=("Cs",)), max_size=40), awkward),
                max_size=12).map("".join)
message = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": text})
messages = st.lists(message, min_size=1, max_size=12)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(history=messages)
def test_load_after_appends_returns_exactly_what_was_appended(store, history):
    with tempfile.TemporaryDirectory() as folder:
        with store.SessionLog(folder, "law") as log:
            for item in history:
                log.append(item)
        with store.SessionLog(folder, "law") as log:
            assert log.load() == history


@SETTINGS
@given(history=messages, extra=messages, data=st.data())
def test_fork_then_append_never_changes_the_source(store, history, extra, data):
    upto = data.draw(st.integers(min_value=0, max_value=len(history)))
    with tempfile.TemporaryDirectory() as folder:
        with store.SessionLog(folder, "source") as log:
            for item in history:
                log.append(item)
        before = (Path(folder) / "source.jsonl").read_bytes()

        store.fork(folder, "source", "branch", upto=upto)
        with store.SessionLog(folder, "branch") as branch:
            for item in extra:
                branch.append(item)
            assert branch.load() == history[:upto] + extra

        assert (Path(folder) / "source.jsonl").read_bytes() == before


# A turn: the user's message, tool exchanges (a call and its result), then the answer. Undo
# takes back whole turns; `flush` writes what is pending, so that some undos drop pending
# messages and others mark written ones.
turn = st.tuples(st.just("turn"), text, st.lists(text, max_size=2), text)
operations = st.lists(st.one_of(turn, st.just(("flush",)), st.tuples(st.just("undo"), st.integers(0, 3))),
                      min_size=1, max_size=14)


def make_turn(number: int, question: str, results: list[str], answer: str) -> list[dict]:
    messages = [{"role": "user", "content": question}]
    for k, result in enumerate(results):
        call_id = f"call_{number}_{k}"
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "buy", "arguments": json.dumps({"item": result})}}]})
        messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
    messages.append({"role": "assistant", "content": answer})
    return messages


@SETTINGS
@given(script=operations)
def test_undo_then_resume_equals_the_history_without_the_undone_turns(store, script):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "law.jsonl"
        kept: list[list[dict]] = []         # the turns that should remain, in order
        written = b""
        with store.SessionLog(folder, "law") as log:
            agent = store.Agent(None, model="scripted", tools=Town(), session=log)
            for number, operation in enumerate(script):
                if operation[0] == "turn":
                    kept.append(make_turn(number, *operation[1:]))
                    for message in kept[-1]:
                        agent.record(message)
                elif operation[0] == "flush":
                    agent.flush()
                elif 0 < operation[1] <= len(kept):
                    agent.undo(operation[1])
                    del kept[len(kept) - operation[1]:]
                else:
                    with pytest.raises(store.UndoError):
                        agent.undo(operation[1])
                assert agent.messages == [m for t in kept for m in t]
                now = path.read_bytes() if path.exists() else b""
                assert now.startswith(written), "an earlier byte of the log changed"
                written = now
            agent.flush()
        with store.SessionLog(folder, "law") as log:
            resumed = store.Agent(None, model="scripted", tools=Town(), session=log).messages
        assert resumed == [m for t in kept for m in t]


# --- lesson 08: compaction is a view ------------------------------------------------------

@SETTINGS
@given(history=messages, later=messages, data=st.data())
def test_a_compaction_changes_no_message_and_a_resume_reads_the_same_boundary(store, history, later,
                                                                              data):
    """Whatever the log holds, a compaction marker changes no byte written before it and no
    message load() returns, and a new reader finds the boundary the writer recorded, with
    the messages appended after it kept after it."""
    if not hasattr(store.SessionLog, "compact"):
        pytest.skip("this store has no compaction (it arrives in lesson 08)")
    keep = data.draw(st.integers(min_value=0, max_value=len(history)))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "law.jsonl"
        with store.SessionLog(folder, "law") as log:
            for item in history:
                log.append(item)
            before = path.read_bytes()
            assert log.compact("the summary", keep) == len(history) - keep
            for item in later:
                log.append(item)
        assert path.read_bytes().startswith(before)
        with store.SessionLog(folder, "law") as log:
            assert log.load() == history + later
            assert log.compacted == store.Compaction("the summary", len(history) - keep)
