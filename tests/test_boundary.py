"""No model server's reply can break a session, in any lesson from 02 on (issue 10).

For every quirk in sessionlab.scripted.QUIRKS, each lesson's reference agent (02-07) plays
it through the real openai client into a session log; then the log loads with every
lesson from 02 on, the session resumes, and the next request passes the scripted model's
validation. And a property test: whatever append() accepts, load() gives back unchanged.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from sessionlab import course
from sessionlab.scripted import QUIRKS, InvalidRequest, ScriptedModel, say, validate
from sessionlab.town import Town

ROOT = Path(__file__).resolve().parents[1]
NAMES = [name for name in course.lesson_folders(ROOT) if name >= "02"]
MODULES = {name: course.load_module(course.load_lesson(ROOT, name).module_path("solution"),
                                    f"boundary_solutions.lesson_{name}")
           for name in NAMES}


def play(module, sessions, session_id, script, text):
    model = ScriptedModel(list(script))
    with module.SessionLog(sessions, session_id) as log:
        agent = module.Agent(model.client(), model=model.model, tools=Town(), session=log)
        agent.run(text)
    return agent, model


@pytest.mark.parametrize("writer", NAMES)
@pytest.mark.parametrize("quirk", sorted(QUIRKS))
def test_a_quirky_reply_leaves_a_log_every_later_lesson_loads_and_resumes(
        tmp_path, writer, quirk):
    """The log a quirk leaves loads with lessons 02-07 and resumes into a valid request."""
    sessions = tmp_path / "sessions"
    agent, _ = play(MODULES[writer], sessions, "quest", [QUIRKS[quirk], say("Done.")],
                    "Buy a rope.")

    for reader in NAMES:
        if reader < writer:
            continue    # an older lesson need not read a newer lesson's log
        with MODULES[reader].SessionLog(sessions, "quest") as log:
            try:
                loaded = log.load()
            except ValueError as error:
                pytest.fail(f"after {quirk!r}, lesson {reader} cannot load the log lesson "
                            f"{writer} wrote: {error}")
        assert loaded == agent.messages, (
            f"lesson {reader} should load what lesson {writer}'s agent kept after {quirk!r}")
    try:
        validate({"model": "m", "messages": agent.messages})
    except InvalidRequest as error:
        pytest.fail(f"after {quirk!r}, lesson {writer}'s history is refused: {error.message}")

    _, model = play(MODULES[writer], sessions, "quest", [say("Good morning.")], "And now?")
    assert model.requests, "the resumed session should send a request"
    try:
        validate(model.requests[-1])
    except InvalidRequest as error:
        pytest.fail(f"the first request after resuming {quirk!r} is refused: {error.message}")


# --- whatever append accepts, load gives back unchanged ---------------------------------

TEXT = st.text(st.characters(blacklist_categories=()), max_size=40)   # surrogates included
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner)
    | st.dictionaries(TEXT | st.integers(), inner, max_size=4),
    max_leaves=12)
CALLS = st.lists(st.fixed_dictionaries({
    "id": TEXT, "type": st.sampled_from(["function", "tool"]),
    "function": st.fixed_dictionaries({"name": TEXT, "arguments": TEXT | st.sampled_from(
        ['{"item": "rope"}', "{}", "[]", ""]) | JSONISH})}), max_size=2)
PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8)
GOOD_CALL = st.fixed_dictionaries({
    "id": st.text(min_size=1), "type": st.just("function"),
    "function": st.fixed_dictionaries({"name": st.text(), "arguments": st.dictionaries(
        st.text(), PLAIN, max_size=3).map(json.dumps)})})
LIKELY = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "developer"]),
                           "content": TEXT | st.lists(st.dictionaries(st.text(), PLAIN))},
                          optional={"name": st.text(), "extra": JSONISH}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": st.none() | TEXT},
                          optional={"tool_calls": st.lists(GOOD_CALL, min_size=1, max_size=2)}),
    st.fixed_dictionaries({"role": st.just("tool"), "tool_call_id": st.text(min_size=1),
                           "content": TEXT}))
ANY_MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool", "system", "narrator"])},
    optional={"content": st.none() | TEXT | JSONISH, "tool_calls": CALLS | JSONISH,
              "tool_call_id": TEXT | JSONISH, "$marker": TEXT, "$blob": TEXT,
              "name": JSONISH, "extra": JSONISH})
MESSAGES = LIKELY | ANY_MESSAGE


def same(a, b) -> bool:
    """Equal, with types: 1 is not 1.0 or True, and a tuple is not a list."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


@pytest.mark.parametrize("name", NAMES)
def test_whatever_append_accepts_load_returns_unchanged(tmp_path_factory, name):
    """Every message append() takes comes back from load() equal, key for key and type for type."""
    module = MODULES[name]

    @settings(max_examples=150, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(MESSAGES)
    def check(message):
        folder = tmp_path_factory.mktemp("prop")
        with module.SessionLog(folder, "p") as log:
            try:
                log.append(message)
            except module.InvalidMessage:
                assert not (folder / "p.jsonl").exists() or (folder / "p.jsonl").stat().st_size == 0, (
                    "a refused message must write nothing")
                return
            loaded = log.load()
        assert len(loaded) == 1 and same(loaded[0], message), (
            f"lesson {name}: append() accepted {message!r} but load() gave back {loaded!r}")

    check()


@pytest.mark.parametrize("name", NAMES)
def test_accepted_messages_do_occur_in_the_property_test(name):
    """The property test is not vacuous: plain messages are accepted and load back."""
    module = MODULES[name]
    message = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "buy", "arguments": "{}"}}]}
    module.check_plain_json(message)
    module.check_message(message)
