"""How far each learned latency can be trusted, wherever one is shown: ``rt.decide()`` gives
each estimate's number of timings and their standard deviation (``Decision.timings``,
``Decision.stdevs_us``), and the report and demo tables print them beside each latency
(``110±8.94(n=7)``), from a live runtime and from a history file."""

from __future__ import annotations

import io
import statistics
from pathlib import Path

import pytest

import adaptive_runtime as ar
from adaptive_runtime.cli.output import report_json
from adaptive_runtime.keys import reference_size
from adaptive_runtime.offline.report import (
    KeyRow,
    decision_table,
    from_history_file,
    from_runtime,
    make_console,
    print_decisions,
)
from adaptive_runtime.offline.report.table import latency_cell

SIMD, SCALAR, GPU = ar.Backend.SIMD, ar.Backend.SCALAR, ar.Backend.GPU
BUCKET = 12
N = reference_size(BUCKET)  # (timings at the reference size are learned as they are)
SIMD_US = [100.0, 110.0, 120.0, 100.0, 110.0, 120.0]
STALL_US = 1_000.0  # over twice every other timing: left out of the estimate and its spread
SCALAR_US = [390.0, 400.0, 410.0]


def taught(rt: ar.AdaptiveRuntime, operation: str = "my_kernel") -> ar.AdaptiveRuntime:
    for us in [*SIMD_US, STALL_US]:
        rt.record_performance(operation, N, SIMD, us)
    for us in SCALAR_US:
        rt.record_performance(operation, N, SCALAR, us)
    rt.record_performance(operation, 2 * N, SCALAR, 900.0)  # (the next bucket: one timing)
    return rt


def test_decide_gives_each_estimates_timings_and_standard_deviation() -> None:
    rt = taught(ar.AdaptiveRuntime())
    d = rt.decide("my_kernel", N)
    assert (d.backend, d.reason) == (SIMD, ar.Reason.EXPLOIT)
    assert dict(d.estimates_us) == {SIMD: pytest.approx(110.0), SCALAR: pytest.approx(400.0)}
    # every timing counts; the stall is left out of the estimate and of its spread alike
    assert dict(d.timings) == {SIMD: 7, SCALAR: 3}
    assert dict(d.stdevs_us) == {SIMD: pytest.approx(statistics.stdev(SIMD_US)),
                                 SCALAR: pytest.approx(statistics.stdev(SCALAR_US))}
    assert d.stdevs_us[SIMD] == pytest.approx(8.944, abs=1e-3)
    # (read-only, as the estimates are)
    with pytest.raises(TypeError):
        d.timings[SIMD] = 1  # type: ignore[index]

    # one timing has no spread: counted, with no standard deviation
    one = rt.decide("my_kernel", 2 * N)
    assert dict(one.timings) == {SCALAR: 1} and dict(one.stdevs_us) == {}

    # a key with no history: nothing to count
    cold = rt.decide("never_timed", N)
    assert dict(cold.timings) == {} and dict(cold.stdevs_us) == {}


def test_a_decision_nobody_explained_has_neither() -> None:
    # (the runtime's own decisions are made unexplained: their construction stays as cheap)
    bare = ar.Decision(SIMD, ar.Reason.EXPLOIT)
    assert bare.timings == {} and bare.stdevs_us == {} and bare.estimates_us == {}


def test_a_forced_decision_counts_the_forced_arms_timings() -> None:
    rt = taught(ar.AdaptiveRuntime(ar.RuntimeConfig(force_backend="scalar")))
    d = rt.decide("my_kernel", N)
    assert (d.backend, d.reason) == (SCALAR, ar.Reason.FORCED)
    assert dict(d.timings) == {SCALAR: 3}
    assert dict(d.stdevs_us) == {SCALAR: pytest.approx(10.0)}


def test_timings_are_those_the_estimate_stands_on_now() -> None:
    # an arm that got faster (two timings in a row under half its estimate) is estimated
    # again from those two: the timings before no longer count, though history keeps them
    rt = ar.AdaptiveRuntime()
    for us in SIMD_US:
        rt.record_performance("k", N, SIMD, us)
    rt.record_performance("k", N, SIMD, 40.0)
    rt.record_performance("k", N, SIMD, 44.0)
    d = rt.decide("k", N)
    assert d.estimates_us[SIMD] == pytest.approx(40.0)
    assert dict(d.timings) == {SIMD: 2}
    assert [r.samples for r in rt.history_snapshot()] == [8]
    rt.reset_history()
    assert rt.decide("k", N).timings == {}


# ------------------------------------------------------------------------------ tables


def table_text(rows: list[KeyRow]) -> str:
    out = io.StringIO()
    make_console(out).print(decision_table(rows))
    return out.getvalue()


def arm_cells(text: str, operation: str) -> dict[int, dict[str, str]]:
    """Each row's arm cells by bucket (``simd_µs`` ...): the table splits on spaces."""
    lines = text.splitlines()
    header = next(ln for ln in lines if ln.startswith("operation ")).replace(" µs", "_µs")
    names = header.split()
    rows = {}
    for line in lines:
        cells = line.split()
        if cells and cells[0] == operation:
            assert len(cells) == len(names), line
            rows[int(cells[1])] = dict(zip(names, cells, strict=True))
    return rows


def test_the_demo_table_shows_each_latency_with_its_spread_and_timings() -> None:
    rt = taught(ar.AdaptiveRuntime())
    out = io.StringIO()
    print_decisions(rt, out)
    rows = arm_cells(out.getvalue(), "my_kernel")
    assert rows[BUCKET]["simd_µs"] == "110±8.94(n=7)"
    assert rows[BUCKET]["scalar_µs"] == "400±10.0(n=3)"
    assert rows[BUCKET]["speed-up"] == "3.64x"  # (both arms on three timings or more)
    assert rows[BUCKET + 1]["scalar_µs"] == "900(n=1)"  # (one timing: no spread)
    assert rows[BUCKET + 1]["simd_µs"] == "-"
    # the report of a live runtime holds the same numbers
    (row, _next) = from_runtime(rt).rows
    assert row.timings == {SIMD: 7, SCALAR: 3}
    assert row.stdev_us == {SIMD: pytest.approx(8.944, abs=1e-3), SCALAR: pytest.approx(10.0)}


def test_the_report_of_a_history_file_shows_the_same_spread_and_timings(
        tmp_path: Path) -> None:
    rt = taught(ar.AdaptiveRuntime())
    path = tmp_path / "history.json"
    rt.save_history(path)
    report = from_history_file(path)
    rows = arm_cells(table_text(list(report.rows)), "my_kernel")
    assert rows[BUCKET]["simd_µs"] == "110±8.94(n=7)"
    assert rows[BUCKET]["scalar_µs"] == "400±10.0(n=3)"
    assert rows[BUCKET + 1]["scalar_µs"] == "900(n=1)"
    # and --json carries them for scripts
    doc = report_json(report, [])
    first = doc["rows"][0]
    assert first["timings"] == {"simd": 7, "scalar": 3}
    assert first["stdev_us"] == {"simd": pytest.approx(8.944, abs=1e-3),
                                 "scalar": pytest.approx(10.0)}


def test_a_latency_cell_shows_what_its_source_knows() -> None:
    bare = KeyRow("op", 4, {SIMD: 2.5, SCALAR: float("inf")}, 5, SIMD)
    assert latency_cell(bare, SIMD) == "2.50"  # (a trace written before timings were carried)
    assert latency_cell(bare, SCALAR) == "failing"
    assert latency_cell(bare, GPU) == "-"
    full = KeyRow("op", 4, {SIMD: 1234.5}, 2000, SIMD, timings={SIMD: 1500},
                  stdev_us={SIMD: 56.78})
    assert latency_cell(full, SIMD) == "1,234±56.8(n=1,500)"
