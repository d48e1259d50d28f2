"""The report's model on hand-made rows and spans: crossovers (clear or between near-ties),
compact sizes, and which arm a key's spans say was chosen."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from adaptive_runtime.backend import Backend
from adaptive_runtime.cli.output import report_json
from adaptive_runtime.offline.report import KeyRow, crossovers, fastest_arm, from_telemetry
from adaptive_runtime.offline.report.model import compact_size
from adaptive_runtime.offline.report.table import chosen_cell

SIMD, SCALAR, GPU = Backend.SIMD, Backend.SCALAR, Backend.GPU


def rows(*latencies: dict[Backend, float], first_bucket: int = 4) -> list[KeyRow]:
    return [KeyRow("op", first_bucket + i, lat, 10, fastest_arm(lat))
            for i, lat in enumerate(latencies)]


def test_a_crossover_between_clear_winners_sits_at_the_upper_buckets_first_size() -> None:
    found = crossovers(rows({SIMD: 1.0, SCALAR: 2.0}, {SIMD: 1.0, SCALAR: 1.1},
                            {SIMD: 1.1, SCALAR: 1.0}, {SIMD: 3.0, SCALAR: 1.0}))
    assert len(found) == 1
    (c,) = found
    assert (c.before, c.after, c.lower_bucket, c.upper_bucket) == (SIMD, SCALAR, 5, 6)
    # each arm wins its side by 100 % somewhere, though only by 10 % next to the crossing
    assert c.margin == pytest.approx(1.0) and c.clear
    assert c.size == 32 and c.label == "simd→scalar ≈32"


def test_one_bucket_where_a_near_tie_flipped_gives_two_unclear_crossovers() -> None:
    found = crossovers(rows({SIMD: 1.0, SCALAR: 2.0}, {SIMD: 1.05, SCALAR: 1.0},
                            {SIMD: 1.0, SCALAR: 2.0}))
    assert [(c.before, c.after) for c in found] == [(SIMD, SCALAR), (SCALAR, SIMD)]
    assert all(not c.clear and c.margin == pytest.approx(0.05) for c in found)


def test_buckets_apart_cross_at_the_geometric_mean_and_one_arm_counts_as_clear() -> None:
    (c,) = crossovers([*rows({SCALAR: 5.0}), *rows({GPU: 5.0, SIMD: 9.0}, first_bucket=8)])
    assert (c.lower_bucket, c.upper_bucket) == (4, 8)
    assert c.size == round(math.sqrt(11 * 181))  # (reference sizes of buckets 4 and 8)
    assert c.clear


def test_failing_arms_and_unmeasured_keys_are_not_winners() -> None:
    assert fastest_arm({SIMD: math.inf, SCALAR: 3.0}) is SCALAR
    assert fastest_arm({SIMD: 2.0, SCALAR: 2.0}) is SIMD  # (a tie: Backend order)
    assert fastest_arm({}) is None
    assert crossovers(rows({}, {SIMD: 1.0})) == []


@pytest.mark.parametrize(("n", "text"), [(724, "724"), (1024, "1k"), (1536, "1.5k"),
                                         (92_682, "91k"), (1 << 20, "1M"), (3 << 30, "3G")])
def test_compact_size(n: int, text: str) -> None:
    assert compact_size(n) == text


# ------------------------------------------------------------------------------ spans


def _select(start_s: float, reason: str, backend: str, estimates: dict[str, float],
            samples: int, timings: dict[str, int] | None = None,
            stdevs: dict[str, float] | None = None) -> dict[str, object]:
    attributes = [
        {"key": "adaptive.operation", "value": {"stringValue": "op"}},
        {"key": "adaptive.input_size", "value": {"intValue": "1000"}},
        {"key": "adaptive.size_bucket", "value": {"intValue": "10"}},
        {"key": "adaptive.backend", "value": {"stringValue": backend}},
        {"key": "adaptive.decision", "value": {"stringValue": reason}},
        {"key": "adaptive.confidence", "value": {"doubleValue": 0.9}},
        {"key": "adaptive.samples", "value": {"intValue": str(samples)}},
        *({"key": f"adaptive.estimate_us.{arm}", "value": {"doubleValue": us}}
          for arm, us in estimates.items()),
        *({"key": f"adaptive.timings.{arm}", "value": {"intValue": str(n)}}
          for arm, n in (timings or {}).items()),
        *({"key": f"adaptive.stdev_us.{arm}", "value": {"doubleValue": us}}
          for arm, us in (stdevs or {}).items())]
    return {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "adaptive.select op",
            "startTimeUnixNano": str(int(1.7e18 + start_s * 1e9)), "attributes": attributes}


def _write_spans(folder: Path, *spans: dict[str, object]) -> None:
    request = {"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.instance.id", "value": {"stringValue": "run-1"}}]},
        "scopeSpans": [{"scope": {"name": "adaptive_runtime"}, "spans": list(spans)}]}]}
    (folder / "traces.jsonl").write_text(json.dumps(request) + "\n")


def test_a_committed_decision_names_its_arm_even_within_the_switch_margin(
        tmp_path: Path) -> None:
    # the runtime keeps its arm until another is 5 % faster: the span says which it runs
    _write_spans(tmp_path, _select(0.0, "explore", "scalar", {"simd": 10.0}, 3),
                 _select(1.0, "exploit", "simd", {"simd": 10.0, "scalar": 9.8}, 8))
    (row,) = from_telemetry(tmp_path).rows
    assert (row.chosen, row.reason, row.confidence, row.samples) == (SIMD, "exploit", 0.9, 8)
    assert row.latency_us == {SIMD: 10.0, SCALAR: 9.8}


def test_while_exploring_the_chosen_arm_is_the_fastest_estimate_so_far(
        tmp_path: Path) -> None:
    _write_spans(tmp_path, _select(0.0, "exploit", "simd", {"simd": 10.0, "scalar": 12.0}, 8),
                 _select(1.0, "recheck", "simd", {"simd": 10.0, "scalar": 6.0}, 9))
    (row,) = from_telemetry(tmp_path).rows
    assert (row.chosen, row.reason) == (SCALAR, "recheck")
    events = from_telemetry(tmp_path).events
    assert [(e.time_s, e.reason, e.backend) for e in events] == [
        (0.0, "exploit", SIMD), (1.0, "recheck", SIMD)]


def test_spans_timings_and_spreads_come_with_the_estimates_they_were_read_beside(
        tmp_path: Path) -> None:
    # the latest span with estimates gives the row its latencies, timings and spreads; the
    # speed-up then needs three timings of each arm (not the key's timings per arm)
    _write_spans(tmp_path,
                 _select(0.0, "explore", "scalar", {"simd": 10.0}, 1, {"simd": 1}),
                 _select(1.0, "exploit", "simd", {"simd": 10.0, "scalar": 30.0}, 9,
                         {"simd": 8, "scalar": 1}, {"simd": 1.5}),
                 _select(2.0, "exploit", "simd", {}, 10))
    (row,) = from_telemetry(tmp_path).rows
    assert row.timings == {SIMD: 8, SCALAR: 1}
    assert row.stdev_us == {SIMD: 1.5}
    # (the scalar arm stands on one timing; counted per key, 9 timings of 2 arms would do)
    assert row.speedup is None
    _write_spans(tmp_path, _select(1.0, "exploit", "simd", {"simd": 10.0, "scalar": 30.0}, 9,
                                   {"simd": 6, "scalar": 3}, {"simd": 1.5, "scalar": 2.0}))
    (row,) = from_telemetry(tmp_path).rows
    assert row.speedup == pytest.approx(3.0)
    # spans written before the timings were carried: latencies alone
    _write_spans(tmp_path, _select(1.0, "exploit", "simd", {"simd": 10.0, "scalar": 30.0}, 9))
    (row,) = from_telemetry(tmp_path).rows
    assert (row.timings, row.stdev_us) == ({}, {})
    assert row.speedup == pytest.approx(3.0)


def test_the_chosen_arm_names_the_thread_count_its_span_ran_at(tmp_path: Path) -> None:
    # a choice on torch's pool: its spans carry adaptive.threads, the count it ran at; the
    # table names it beside the arm, in one word (``$4`` is still the arm's cell)
    held = _select(1.0, "exploit", "simd", {"simd": 10.0, "scalar": 30.0}, 9)
    held["attributes"].append(  # type: ignore[union-attr]
        {"key": "adaptive.threads", "value": {"intValue": "1"}})
    _write_spans(tmp_path, held)
    report = from_telemetry(tmp_path)
    (row,) = report.rows
    assert row.threads == 1
    assert chosen_cell(row) == "simd(torch@1)"
    assert report_json(report, [])["rows"][0]["threads"] == 1
    _write_spans(tmp_path, _select(1.0, "exploit", "simd", {"simd": 10.0}, 9))
    (row,) = from_telemetry(tmp_path).rows
    assert (row.threads, chosen_cell(row)) == (0, "simd")


def test_variants_of_an_arm_are_columns_and_winners_of_their_own() -> None:
    from adaptive_runtime.backend import Variant
    from adaptive_runtime.history import HistoryRecord
    from adaptive_runtime.offline.report.sources import rows_from_records
    from adaptive_runtime.offline.report.table import decision_table

    numpy = Variant(SIMD, "numpy")
    found = rows_from_records([HistoryRecord("op", 4, SIMD, 5, 9.0, 0, 1.0),
                               HistoryRecord("op", 4, SIMD, 5, 2.0, 0, 1.0, variant="numpy"),
                               HistoryRecord("op", 6, SIMD, 5, 3.0, 0, 1.0),
                               HistoryRecord("op", 6, SIMD, 5, 8.0, 0, 1.0, variant="numpy")])
    assert [r.latency_us for r in found] == [{SIMD: 9.0, numpy: 2.0}, {SIMD: 3.0, numpy: 8.0}]
    assert [r.chosen for r in found] == [numpy, SIMD]
    assert [c.label for c in crossovers(found)] == ["simd:numpy→simd ≈22"]
    table = decision_table(found)
    assert [c.header for c in table.columns][4:6] == ["simd µs", "simd:numpy µs"]


def test_a_speed_up_is_shown_only_where_both_arms_stand_on_three_timings() -> None:
    """One timing of a small key measures a cold cache and the timing itself (the demo once
    showed "13.46x" between two ~1 us kernels): the speed-up over the slowest arm needs
    SPEEDUP_MIN_TIMINGS timings of the chosen arm and of the slowest."""
    latency = {Backend.SIMD: 2.5, Backend.SCALAR: 34.3}
    one_timing = KeyRow("add", 6, latency, 5, Backend.SIMD,
                        timings={Backend.SIMD: 4, Backend.SCALAR: 1})
    assert one_timing.speedup is None
    enough = KeyRow("add", 6, latency, 7, Backend.SIMD,
                    timings={Backend.SIMD: 4, Backend.SCALAR: 3})
    assert enough.speedup == pytest.approx(34.3 / 2.5)
    # (traces count a key's timings, not each arm's: that many per arm measured)
    assert KeyRow("add", 6, latency, 5, Backend.SIMD).speedup is None
    assert KeyRow("add", 6, latency, 6, Backend.SIMD).speedup == pytest.approx(34.3 / 2.5)


def test_history_rows_carry_each_arms_timings() -> None:
    from adaptive_runtime.history import HistoryRecord
    from adaptive_runtime.offline.report.sources import rows_from_records

    rows = rows_from_records([HistoryRecord("add", 6, Backend.SIMD, 4, 2.5, 0, 0.0, 0.25),
                              HistoryRecord("add", 6, Backend.SCALAR, 1, 34.3, 0, 0.0)])
    assert rows[0].timings == {Backend.SIMD: 4, Backend.SCALAR: 1}
    assert rows[0].stdev_us == {Backend.SIMD: 0.5}  # (the variance's root; one timing: none)
    assert rows[0].speedup is None
