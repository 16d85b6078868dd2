"""The log's laws, for any content hypothesis can think of (property-based)."""

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

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
