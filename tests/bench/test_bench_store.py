"""The storage benchmark runs end to end and its JSON is complete (tiny N, no timed assertions).

These tests check the shape of what `python -m bench.store` produces, never how fast anything
was: every workload and every store is present, ratios to the floor are computed, a capped
store is labelled as extrapolated, and a lesson without a session store is refused in words.
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

# The campaign (tests/conftest.py): the benchmarks run for real, briefly.
pytestmark = pytest.mark.campaign

ROOT = Path(__file__).resolve().parents[2]
STORES = ("floor", "subject", "naive", "sqlite3", "postgres", "langchain", "agents")
WORKLOADS = ("append", "append_first", "append_last", "growth", "append_one", "append_small", "load",
             "fork", "durable", "items")
# The workload whose ratio is to a peer (the Agents SDK's SQLiteSession), not to the floor
RATIO_TO = {"items": "agents"}


def bench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bench.store", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("bench")
    done = bench(out, "--quick", "--n", "60", "--durable-n", "5", "--repeat", "2",
                 "--json", str(out / "r.json"), "--svg", str(out / "r.svg"),
                 "--markdown", str(out / "r.md"), "--dir", str(out))
    assert done.returncode == 0, f"the benchmark failed:\n{done.stdout}\n{done.stderr}"
    data = json.loads((out / "r.json").read_text(encoding="utf-8"))
    data["_stdout"] = done.stdout
    data["_svg"] = (out / "r.svg").read_text(encoding="utf-8")
    data["_md"] = (out / "r.md").read_text(encoding="utf-8")
    return data


def test_the_json_names_every_store_measured_or_skipped_with_a_reason(result: dict) -> None:
    assert set(result["stores"]) == set(STORES)
    for key, store in result["stores"].items():
        assert store["status"] in ("measured", "skipped"), key
        if store["status"] == "skipped":
            assert store["why"], f"{key} is skipped without saying why"
    assert result["stores"]["floor"]["status"] == "measured"
    assert result["stores"]["subject"]["status"] == "measured"


def test_every_workload_has_a_figure_or_a_reason_for_every_measured_store(result: dict) -> None:
    assert set(result["workloads"]) == set(WORKLOADS)
    measured = [k for k, s in result["stores"].items() if s["status"] == "measured"]
    for name, workload in result["workloads"].items():
        for key in measured:
            entry = workload["results"].get(key)
            assert entry is not None, f"{name}: no entry for {key}"
            if entry["value"] is None:
                assert entry["why"], f"{name}/{key}: no figure and no reason"
            else:
                assert len(entry["runs"]) == 2, f"{name}/{key}: expected one figure per run"


def test_every_figure_has_a_ratio_to_the_floor_of_the_same_run(result: dict) -> None:
    for name, workload in result["workloads"].items():
        if name == "growth":
            continue
        if name in RATIO_TO:
            base = workload["results"].get(RATIO_TO[name], {})
            assert workload["results"]["floor"]["value"] is None, f"{name}: the floor has no sessions"
            if base.get("value") is None:
                continue        # the peer is not installed here: no ratio to give
            assert base["ratio"] == pytest.approx(1.0), name
            assert workload["results"]["subject"]["ratio"] > 0, f"{name}: no ratio to {RATIO_TO[name]}"
            continue
        floor = workload["results"]["floor"]
        assert floor["ratio"] == pytest.approx(1.0), name
        for key, entry in workload["results"].items():
            if entry["value"] is not None:
                assert entry["ratio"] > 0, f"{name}/{key}: no ratio to the floor"


def test_the_targets_are_judged_met_or_missed(result: dict) -> None:
    targets = {t["workload"]: t for t in result["targets"]}
    assert set(targets) == {"append", "durable", "load", "fork", "growth", "append_one", "items"}
    for name, target in targets.items():
        if name in RATIO_TO and result["stores"][RATIO_TO[name]]["status"] != "measured":
            assert target["met"] is None, target    # n/a without the peer, never a guess
            continue
        assert isinstance(target["met"], bool), target
        assert target["met"] == (target["value"] <= target["limit"])
    assert "met" in result["_stdout"] or "missed" in result["_stdout"]


def test_a_small_sessions_append_is_shown_beside_the_locks_cost_and_a_truncating_lock(
        result: dict) -> None:
    """One append to a session of a few whole turns, for every store, as a ratio to the floor
    (a plain open, append, close); and, measured in the same run, the store's lock beside one
    whose record is truncated and rewritten, with the ratio printed (no time is judged)."""
    small = result["workloads"]["append_small"]
    assert 0 < small["n"] <= 20, small["n"]
    assert small["results"]["subject"]["ratio"] > 0
    lock = small["reference"]
    assert lock["lock_us"] > 0 and lock["truncating_lock_us"] > 0 and lock["ratio"] > 0
    for text in (" ".join(result["_stdout"].split()), result["_md"]):
        assert "Taking and letting go of the measured store's lock takes" in text
        assert "truncated, then rewritten" in text and "that." in text
    # The report names the row with its size (the terminal's table may wrap the label)
    assert f"one append to a small session of {small['n']}" in result["_md"]


def test_the_run_says_which_lesson_was_measured(result: dict) -> None:
    lesson = result["meta"]["lesson"]
    assert (ROOT / "solutions" / lesson / "agent.py").is_file()
    assert lesson == sorted(p.parent.name for p in (ROOT / "solutions").glob("[0-9][0-9]_*/agent.py"))[-1]
    assert f"lesson {lesson}" in result["_stdout"]


def test_the_plot_is_svg_with_a_line_per_measured_store(result: dict) -> None:
    svg = ET.fromstring(result["_svg"])
    assert svg.tag.endswith("svg")
    texts = " ".join(t.text or "" for t in svg.iter() if t.tag.endswith("text"))
    assert "messages in the session" in texts
    assert set(result["curves"]) == {k for k, s in result["stores"].items() if s["status"] == "measured"}
    lines = [e for e in svg.iter() if e.tag.endswith("polyline")]
    assert len(lines) >= len(result["curves"])


def test_the_markdown_table_has_a_row_per_workload(result: dict) -> None:
    rows = [line for line in result["_md"].splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + len(WORKLOADS)


def test_a_store_over_its_time_cap_is_extrapolated_and_labelled(tmp_path: Path) -> None:
    done = bench(tmp_path, "--quick", "--n", "40", "--durable-n", "4", "--repeat", "1", "--cap", "0",
                 "--only", "naive", "--json", str(tmp_path / "r.json"), "--dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    data = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    for key in ("floor", "subject", "naive"):
        entry = data["workloads"]["append"]["results"][key]
        assert entry["extrapolated"] is True and entry["measured"] < 40, (key, entry)
        assert data["curves"][key]["extrapolated"] is True
    assert "extrapolated" in done.stdout


def test_a_lesson_without_a_session_store_is_refused_in_words(tmp_path: Path) -> None:
    done = bench(tmp_path, "--quick", "--impl", str(ROOT / "solutions" / "00_memory" / "agent.py"))
    assert done.returncode == 2
    assert "00_memory" in done.stderr and "has no SessionLog yet" in done.stderr
    assert "Traceback" not in done.stderr


def test_extrapolation_follows_a_cost_that_grows_with_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from bench.store import predicted

    series, extrapolated = predicted([100 + 2 * i for i in range(50)], 200)
    assert extrapolated and len(series) == 200
    assert series[-1] == pytest.approx(100 + 2 * 199)
    flat, _ = predicted([100] * 10, 20)
    assert flat[-1] == pytest.approx(100)
