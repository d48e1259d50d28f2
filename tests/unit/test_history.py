"""HistoryStore / ArmStats / HistoryRecord: robust estimates, quarantine, LRU bound, files."""

from __future__ import annotations

import dataclasses
import json
import math
import tracemalloc

import pytest

import adaptive_runtime as ar
from adaptive_runtime.history import (
    FIXED_CALL_COST_US,
    ArmStats,
    HistoryRecord,
    HistoryStore,
)
from adaptive_runtime.keys import reference_size
from adaptive_runtime.operations import DeviceProbe

Backend = ar.Backend


def _mean(store: HistoryStore, op: str = "op", bucket: int = 5,
          backend: Backend = Backend.SIMD) -> float:
    rows = [r for r in store.snapshot()
            if (r.operation, r.size_bucket, r.backend) == (op, bucket, backend)]
    assert len(rows) == 1
    return rows[0].mean_us


def _feed(store: HistoryStore, values, backend: Backend = Backend.SIMD) -> None:
    key = store.key("op", 5)
    for v in values:
        store.record(key, backend, float(v), key.reference_size)


def test_constant_samples_give_exact_estimate() -> None:
    store = HistoryStore(10)
    _feed(store, [40.0] * 10)
    assert _mean(store) == 40.0


def test_one_100x_spike_after_convergence_moves_estimate_little() -> None:
    store = HistoryStore(10)
    _feed(store, [10.0] * 50)
    assert _mean(store) == pytest.approx(10.0)
    _feed(store, [1000.0])  # one preempted call
    after = _mean(store)
    assert 10.0 <= after <= 12.5, after  # unclipped EWMA (alpha 0.1) would give ~109
    _feed(store, [10.0] * 30)
    assert _mean(store) == pytest.approx(10.0, rel=0.05)


def test_a_bimodal_arm_is_estimated_at_what_it_costs_in_total() -> None:
    # 60 us, or 250 us one call in four: a slow mode, not a stall (an EWMA with timings
    # clipped at 1.5x its mean read 72 us)
    store = HistoryStore(10)
    _feed(store, [60.0, 60.0, 250.0, 60.0] * 8)
    assert _mean(store) == pytest.approx(107.5)
    # its variance is the window's: what P(faster) and the drift test weigh a timing by
    stats = store.key("op", 5).arms[Backend.SIMD]
    assert math.sqrt(stats.var_us2) == pytest.approx(84.8, rel=0.01)


def test_at_most_two_stalls_are_left_out_of_the_estimate() -> None:
    store = HistoryStore(10)
    _feed(store, [10.0] * 14 + [900.0, 400.0])  # two stalls, each far over the rest
    assert _mean(store) == pytest.approx(10.0)
    # a third slow one, near the second: slow timings that come often are what the arm
    # costs; only the one far over all the others is left out
    _feed(store, [300.0])
    assert _mean(store) == pytest.approx((13 * 10.0 + 300.0 + 400.0) / 15)


def test_warmup_outlier_does_not_seed_the_estimate() -> None:
    store = HistoryStore(10)
    _feed(store, [5000.0, 10.0, 10.0, 10.0])  # first call paid for a cold cache
    assert _mean(store) == pytest.approx(10.0, rel=0.05)


def test_ewma_follows_a_level_shift() -> None:
    store = HistoryStore(10)
    _feed(store, [10.0] * 50)
    _feed(store, [50.0] * 60)
    assert _mean(store) == pytest.approx(50.0, rel=0.05)
    _feed(store, [20.0] * 60)
    assert _mean(store) == pytest.approx(20.0, rel=0.05)


def test_a_warm_up_timing_far_under_the_estimate_starts_it_again() -> None:
    # the first timings carried one-off costs, or the arm got faster (an ATen kernel turned
    # 5x faster early in a process): the warm-up's median of three would keep the old level
    store = HistoryStore(10)
    key = store.key("op", 5)
    _feed(store, [50.0, 45.0])
    assert _mean(store) == 45.0 and key.restarts == 0
    _feed(store, [7.0])  # under half the estimate
    assert _mean(store) == 7.0 and key.restarts == 1
    assert key.arms[Backend.SIMD].epoch_samples == 1 and key.samples == 3
    _feed(store, [9.0, 8.0])  # then the warm-up goes on from that one: median of three
    assert _mean(store) == 8.0


def test_two_timings_in_a_row_far_under_a_settled_estimate_start_it_again() -> None:
    store = HistoryStore(10)
    key = store.key("op", 5)
    _feed(store, [50.0] * 20 + [7.0])
    # (the mean of the latest 16: 15 at 50 us and the 7)
    assert _mean(store) == pytest.approx(47.3, rel=0.01) and key.restarts == 0
    _feed(store, [4.0])  # the second in a row under half the estimate
    assert _mean(store) == 4.0 and key.restarts == 1
    assert key.arms[Backend.SIMD].epoch_samples == 2 and key.samples == 22
    _feed(store, [6.0])  # then the warm-up's median of three goes on as from two timings
    assert _mean(store) == 6.0


def test_one_timing_far_under_the_estimate_is_not_enough_to_start_it_again() -> None:
    store = HistoryStore(10)
    key = store.key("op", 5)
    _feed(store, [10.0] * 20 + [3.0, 10.0, 3.0, 10.0])
    assert _mean(store) == pytest.approx(9.0, rel=0.05) and key.restarts == 0


def test_timings_are_learned_at_the_buckets_reference_size() -> None:
    store = HistoryStore(10)
    key = store.key("op", 21)  # sizes 1,048,576 .. 2,097,151
    ref = key.reference_size
    assert ref == reference_size(21) == round(2**20 * 2**0.5)
    fixed = FIXED_CALL_COST_US
    # a call twice the reference size: its part above the fixed cost is halved
    store.record(key, Backend.SIMD, fixed + 2_000.0, 2 * ref)
    assert _mean(store, bucket=21) == pytest.approx(fixed + 1_000.0)
    # at the reference size, and under the fixed cost, a timing is learned as it is
    other = store.key("op", 22)
    store.record(other, Backend.SIMD, 1_234.5, other.reference_size)
    store.record(other, Backend.SCALAR, fixed / 2, 2 * other.reference_size)
    assert _mean(store, bucket=22) == 1_234.5
    assert _mean(store, bucket=22, backend=Backend.SCALAR) == fixed / 2


def test_snapshot_counts_samples_and_failures() -> None:
    store = HistoryStore(10)
    key = store.key("op", 5)
    for _ in range(7):
        store.record(key, Backend.SIMD, 3.0, 24)
    store.record_failure(key, Backend.GPU, now_s=0.0)
    store.record_failure(key, Backend.GPU, now_s=10.0)
    rows = {r.backend: r for r in store.snapshot()}
    assert rows[Backend.SIMD].samples == 7 and rows[Backend.SIMD].failures == 0
    assert rows[Backend.GPU].samples == 0 and rows[Backend.GPU].failures == 2
    assert math.isnan(rows[Backend.GPU].mean_us)


def test_failure_quarantine_backs_off_doubling_and_resets_on_success() -> None:
    stats = ArmStats()
    now = 100.0
    waits = []
    for _ in range(6):
        stats.add_failure(now, wall_time=0.0)
        assert math.isinf(stats.estimate_us)
        waits.append(stats.quarantined_until_s - now)
        now = stats.quarantined_until_s  # fails again as soon as it is let out
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
    assert stats.failures == 6
    stats.add_sample(25.0, wall_time=0.0)  # a success ends the streak
    assert stats.estimate_us == 25.0
    stats.add_failure(now, wall_time=0.0)
    assert stats.quarantined_until_s - now == 1.0


def test_quarantine_back_off_is_capped() -> None:
    stats = ArmStats()
    for _ in range(30):
        stats.add_failure(0.0, wall_time=0.0)
    assert stats.quarantined_until_s == pytest.approx(300.0)


def test_history_record_is_frozen() -> None:
    record = HistoryRecord("op", 3, Backend.SIMD, 1, 2.0, 0, 0.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.samples = 5  # type: ignore[misc]


def test_store_evicts_least_recently_used_keys() -> None:
    evicted = []
    store = HistoryStore(3, on_evict=lambda op, bucket: evicted.append((op, bucket)))
    for i in range(3):
        store.record(store.key(f"op{i}", 1), Backend.SIMD, 1.0, 1)
    store.key("op0", 1)  # touch: op1 is now the least recently used
    store.record(store.key("op3", 1), Backend.SIMD, 1.0, 1)
    assert evicted == [("op1", 1)]
    assert len(store) == 3
    assert {r.operation for r in store.snapshot()} == {"op0", "op2", "op3"}


@pytest.mark.slow
def test_lru_bound_holds_over_a_million_distinct_keys() -> None:
    # 10**6 distinct (operation, size) pairs through the public Trueno API; the cap is small so
    # this stays fast (~8 s on a laptop-class core).
    cap = 1000
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(max_history_keys=cap), builtin_ops=False,
                            devices=DeviceProbe(gpu=False))
    record = rt.record_performance
    for i in range(1_000_000):
        record(f"op{i}", 100, "simd", 1.0)
        if i % 250_000 == 0:
            assert len(rt.history_snapshot()) <= cap
    snapshot = rt.history_snapshot()
    assert len(snapshot) == cap
    # the survivors are the most recently used keys
    assert {r.operation for r in snapshot} == {f"op{i}" for i in range(1_000_000 - cap, 10**6)}


def _traced_growth(action, rt, start: int, stop: int) -> int:
    """Bytes still allocated after running ``action(rt, i)`` for i in [start, stop)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(start, stop):
            action(rt, i)
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return max(after, peak) - before


def _bounded_runtime() -> ar.AdaptiveRuntime:
    return ar.AdaptiveRuntime(ar.RuntimeConfig(max_history_keys=500), builtin_ops=False,
                              devices=DeviceProbe(gpu=False), clock=lambda: 0.0)


@pytest.mark.parametrize("api", ["record_performance", "select"])
def test_memory_does_not_grow_with_distinct_keys_beyond_the_cap(api: str) -> None:
    def record(rt, i):
        rt.record_performance(f"op{i}", i, "simd", 1.0)

    def select(rt, i):
        rt.select(f"op{i}", i)

    action = record if api == "record_performance" else select
    small, large = _bounded_runtime(), _bounded_runtime()
    for rt in (small, large):  # fill the cap first: growth up to it is expected
        for i in range(2_000):
            action(rt, i)
    grew_small = _traced_growth(action, small, 2_000, 7_000)      # 5,000 more keys
    grew_large = _traced_growth(action, large, 2_000, 42_000)     # 40,000 more keys
    # 8x the keys must not cost (anywhere near) 8x the memory: allow 64 KiB of slack
    assert grew_large <= grew_small + 64 * 1024, (grew_small, grew_large)


# --------------------------------------------------------------------------- files


def _rt() -> ar.AdaptiveRuntime:
    return ar.AdaptiveRuntime(ar.RuntimeConfig(), builtin_ops=False,
                              devices=DeviceProbe(gpu=True))


def _comparable(records):
    return [(r.operation, r.size_bucket, r.backend, r.samples,
             None if math.isnan(r.mean_us) else r.mean_us, r.failures, r.last_update)
            for r in records]


def test_save_and_load_history_round_trip_with_fake_gpu(tmp_path) -> None:
    rt = _rt()
    for i in range(20):
        rt.record_performance("dot", 1000, "simd", 10.0 + i % 3)
        rt.record_performance("dot", 1000, "scalar", 50.0)
        rt.record_performance("matmul", 10**6, "gpu", 500.0 + i)
    path = tmp_path / "sub" / "history.json"
    rt.save_history(path)
    loaded = _rt()
    loaded.load_history(path)
    assert _comparable(loaded.history_snapshot()) == _comparable(rt.history_snapshot())
    assert loaded.get_best_backend("dot", 1000) is Backend.SIMD
    doc = json.loads(path.read_text())
    assert doc["format"].startswith("adaptive_runtime.history/")


def test_loading_twice_adds_counts(tmp_path) -> None:
    rt = _rt()
    for _ in range(5):
        rt.record_performance("dot", 64, "simd", 7.0)
    path = tmp_path / "h.json"
    rt.save_history(path)
    other = _rt()
    other.load_history(path)
    other.load_history(path)
    (row,) = other.history_snapshot()
    assert (row.samples, row.mean_us) == (10, 7.0)


def test_loaded_history_with_few_samples_keeps_learning(tmp_path) -> None:
    # An arm saved after one or two timings is still warming up; learning must go on after a
    # load (or a merge of two such histories) instead of crashing.
    rt = _rt()
    rt.record_performance("dot", 64, "simd", 5.0)
    rt.record_performance("dot", 64, "scalar", 9.0)
    rt.record_performance("dot", 64, "scalar", 8.0)
    path = tmp_path / "h.json"
    rt.save_history(path)
    loaded = _rt()
    loaded.load_history(path)
    for d in (6.0, 6.0, 6.0):
        loaded.record_performance("dot", 64, "simd", d)
        loaded.record_performance("dot", 64, "scalar", d + 3.0)
    rows = {r.backend: r for r in loaded.history_snapshot()}
    assert rows[Backend.SIMD].samples == 4
    assert rows[Backend.SCALAR].samples == 5


def test_merging_two_single_sample_histories_keeps_learning(tmp_path) -> None:
    rt = _rt()
    rt.record_performance("dot", 64, "simd", 5.0)
    path = tmp_path / "h.json"
    rt.save_history(path)
    rt.load_history(path)  # this process's one timing plus the file's one timing
    rt.record_performance("dot", 64, "simd", 5.0)
    (row,) = rt.history_snapshot()
    assert row.samples == 3
    assert row.mean_us == pytest.approx(5.0)


@pytest.mark.parametrize("content", [
    b"{not json",
    b"",
    b"\xff\xfe\x00\x81 binary garbage",
    b'{"format": "something-else", "records": []}',
    b"[1, 2, 3]",
    b'{"format": "adaptive_runtime.history/1"}',
    b'{"format": "adaptive_runtime.history/1", "records": [{"operation": "x"}]}',
    b'{"format": "adaptive_runtime.history/1", "records": [{"operation": "x", '
    b'"size_bucket": 3, "backend": "tpu", "samples": 1, "mean_us": 1.0, "failures": 0, '
    b'"last_update": 0.0}]}',
    b'{"format": "adaptive_runtime.history/1", "records": [{"operation": "x", '
    b'"size_bucket": 3, "backend": "simd", "samples": -1, "mean_us": 1.0, "failures": 0, '
    b'"last_update": 0.0}]}',
    b'{"format": "adaptive_runtime.history/1", "records": [{"operation": "x", '
    b'"size_bucket": 3, "backend": "simd", "samples": 1, "mean_us": -1.0, "failures": 0, '
    b'"last_update": 0.0}]}',
], ids=["truncated", "empty", "binary", "wrong-format", "not-an-object", "no-records",
        "missing-fields", "unknown-backend", "negative-count", "negative-latency"])
def test_corrupt_history_file_raises_value_error_naming_the_path(tmp_path,
                                                                 content: bytes) -> None:
    path = tmp_path / "corrupt-history.json"
    path.write_bytes(content)
    rt = _rt()
    with pytest.raises(ValueError) as info:
        rt.load_history(path)
    assert str(path) in str(info.value)
    assert rt.history_snapshot() == []


def test_history_path_in_config_is_loaded_at_start_with_fake_gpu(tmp_path) -> None:
    source = _rt()
    for _ in range(4):
        source.record_performance("matmul", 10**6, "gpu", 80.0)
        source.record_performance("matmul", 10**6, "simd", 900.0)
    path = tmp_path / "history.json"
    source.save_history(path)
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(history_path=str(path)), builtin_ops=False,
                            devices=DeviceProbe(gpu=True))
    assert rt.get_best_backend("matmul", 10**6) is Backend.GPU
    assert _comparable(rt.history_snapshot()) == _comparable(source.history_snapshot())
