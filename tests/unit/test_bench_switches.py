"""The contention benchmark's phase-switch reading (``benchmarks/contention.py``) and the
never-timed verdict (``benchmarks/_learned.py``): a switch is timed from the phase change, a
key that keeps its choice is "no switch" (not a miss), and nothing "meets" over nothing."""

from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from _learned import untimed_table  # noqa: E402
from contention import POOL, phase_switches, switch_table  # noqa: E402


def _run(events: list[list[object]], pool: list[list[object]] | None = None) -> dict[str, object]:
    """A watched run: steps every 0.1 s from t=10 to t=20, the neighbour toggled just after
    12 (stopped) and 16 (started); a toggle before the loop began is no phase change."""
    return {"toggles": [[9.0, False], [12.01, False], [16.01, True]],
            "watch": {"stamps": [10.0 + 0.1 * i for i in range(100)], "events": events,
                      "pool": pool or [], "start": 9.5, "end": 20.0,
                      "per_step": {"sum b17": 1.0, "dot b21": 2.0}, "reads": 1000,
                      "read_us": 0.5}}


def test_a_switch_is_timed_from_the_change_in_seconds_and_the_keys_calls() -> None:
    found = phase_switches(_run([["sum b17", 10.05, 1, "simd"],
                                 ["sum b17", 12.55, 26, "simd:numba@1"],
                                 ["dot b21", 10.05, 1, "simd"],
                                 ["dot b21", 17.5, 76, "scalar"]]))
    by = {(r["key"], r["on"]): r for r in found}
    first = by[("sum b17", False)]
    assert first["status"] == "switch" and first["to"] == "simd:numba@1"
    assert first["delay_s"] == pytest.approx(0.54)
    assert first["calls"] == pytest.approx(5)  # steps 21..25 began after the change
    assert first["within"]
    late = by[("dot b21", True)]  # 1.49 s and 15 steps x 2 calls: over both
    assert late["status"] == "switch" and not late["within"]
    assert late["calls"] == pytest.approx(30)
    assert by[("dot b21", False)]["status"] == "none"  # the same choice: needs no switch
    assert by[("sum b17", True)]["status"] == "none"


def test_a_switch_and_back_within_a_phase_is_no_switch_and_the_pool_counts_steps() -> None:
    found = phase_switches(_run([["sum b17", 10.05, 1, "simd"],
                                 ["sum b17", 12.2, 23, "scalar"],
                                 ["sum b17", 13.0, 30, "simd"]],
                                pool=[[10.0, 0, 0], [13.05, 31, 1]]))
    by = {(r["key"], r["on"]): r for r in found}
    assert by[("sum b17", False)]["status"] == "none"
    assert by[("sum b17", False)]["flips"] == 2
    pool = by[(POOL, False)]
    assert pool["status"] == "switch" and pool["from"] == "pool size" and pool["to"] == "1"
    assert pool["calls"] == pytest.approx(10)  # steps 21..30


def test_no_choice_committed_at_the_change_is_not_judged() -> None:
    found = phase_switches(_run([["sum b17", 13.0, 30, "simd"]]))
    assert [r["status"] for r in found] == ["uncommitted", "none"]


def test_tables_never_meet_over_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    switch_table("numpy", {"adaptive": [_run([])], "history": []})
    untimed_table("t", [("numpy phases adaptive", [{"judged": [], "never_timed": [],
                                                   "left_out": []}])])
    out = capsys.readouterr().out
    assert "not judged (no switch measured)" in out
    assert "not judged (no key reached the calls)" in out
    assert "meets" not in out


def test_a_key_with_a_candidate_never_timed_misses(capsys: pytest.CaptureFixture[str]) -> None:
    untimed_table("t", [("mlp quiet adaptive", [
        {"judged": [["linear b21", 600], ["relu b15", 600]],
         "never_timed": [["linear b21", "scalar"]],
         "left_out": [["relu b15", "simd:numba", "cold"]]}])])
    out = capsys.readouterr().out
    assert "MISSES (1 of 2 judged keys)" in out
    assert "linear b21: scalar" in out and "relu b15: simd:numba (cold)" in out
