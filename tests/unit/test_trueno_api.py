"""Trueno-compatible core: record_performance validation, get_best_backend, reset_history,
select() + record_performance() learning exactly as run() does."""

from __future__ import annotations

import math

import numpy as np
import pytest

import adaptive_runtime as ar
from adaptive_runtime.operations import DeviceProbe

Backend = ar.Backend
Reason = ar.Reason


@pytest.fixture
def rt(clock, timer) -> ar.AdaptiveRuntime:
    return ar.AdaptiveRuntime(ar.RuntimeConfig(), builtin_ops=False,
                              devices=DeviceProbe(gpu=True), clock=clock, timer=timer)


@pytest.mark.parametrize("duration", [-1.0, -1e-9, math.nan, math.inf, -math.inf])
def test_record_performance_rejects_bad_durations_with_value_error(rt, duration) -> None:
    with pytest.raises(ValueError, match="duration_us"):
        rt.record_performance("dot", 100, "simd", duration)
    assert rt.history_snapshot() == []


@pytest.mark.parametrize("duration", [True, False, "10", None, [1.0]])
def test_record_performance_rejects_non_numeric_durations_with_type_error(rt, duration) -> None:
    with pytest.raises(TypeError, match="duration_us"):
        rt.record_performance("dot", 100, "simd", duration)
    assert rt.history_snapshot() == []


@pytest.mark.parametrize("backend", ["tpu", "", "cuda", 3])
def test_record_performance_rejects_unknown_backend_with_value_error(rt, backend) -> None:
    with pytest.raises(ValueError, match="gpu, simd, scalar"):
        rt.record_performance("dot", 100, backend, 1.0)
    assert rt.history_snapshot() == []


@pytest.mark.parametrize("size", [8.0, "8", None, True, 1.5])
def test_record_performance_rejects_non_int_size_with_type_error(rt, size) -> None:
    with pytest.raises(TypeError, match="input_size"):
        rt.record_performance("dot", size, "simd", 1.0)
    assert rt.history_snapshot() == []


def test_record_performance_rejects_negative_size_with_value_error(rt) -> None:
    with pytest.raises(ValueError, match="input_size"):
        rt.record_performance("dot", -8, "simd", 1.0)
    assert rt.history_snapshot() == []


def test_record_performance_accepts_ints_numpy_sizes_and_zero_duration(rt) -> None:
    rt.record_performance("dot", np.int64(100), Backend.SIMD, 0)
    rt.record_performance("dot", 100, "SCALAR", 3)
    assert {(r.backend, r.samples) for r in rt.history_snapshot()} == {
        (Backend.SIMD, 1), (Backend.SCALAR, 1)}


def test_record_performance_keeps_short_samples(rt) -> None:
    # Trueno dropped every sample under 100 us; here every sample counts.
    for _ in range(5):
        rt.record_performance("dot", 100, "simd", 0.5)
    (row,) = rt.history_snapshot()
    assert (row.samples, row.mean_us) == (5, 0.5)


def test_get_best_backend_is_none_before_any_history(rt) -> None:
    assert rt.get_best_backend("dot", 100) is None
    rt.select("dot", 100)  # a selection alone is not history
    assert rt.get_best_backend("dot", 100) is None


def test_get_best_backend_is_the_fastest_measured_arm_with_fake_gpu(rt) -> None:
    rt.record_performance("dot", 100, "scalar", 30.0)
    assert rt.get_best_backend("dot", 100) is Backend.SCALAR
    rt.record_performance("dot", 100, "simd", 10.0)
    rt.record_performance("dot", 100, "gpu", 20.0)
    assert rt.get_best_backend("dot", 100) is Backend.SIMD
    assert rt.get_best_backend("dot", 127) is Backend.SIMD   # same bucket
    assert rt.get_best_backend("dot", 128) is None           # next bucket: no history


def test_get_best_backend_ignores_an_arm_this_machine_lacks(clock, timer) -> None:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(), builtin_ops=False,
                            devices=DeviceProbe(gpu=False), clock=clock, timer=timer)
    rt.record_performance("matmul", 10**6, "gpu", 1.0)    # e.g. loaded from another machine
    rt.record_performance("matmul", 10**6, "simd", 100.0)
    assert rt.get_best_backend("matmul", 10**6) is Backend.SIMD


def test_reset_history_clears_everything_learned(rt) -> None:
    for backend, us in (("simd", 10.0), ("scalar", 30.0)):
        for _ in range(3):
            rt.record_performance("dot", 100, backend, us)
    assert rt.get_best_backend("dot", 100) is Backend.SIMD
    rt.reset_history()
    assert rt.history_snapshot() == []
    assert rt.get_best_backend("dot", 100) is None
    assert rt.decide("dot", 100).reason is Reason.HEURISTIC


def _select_loop(rt, latency_us, operation, size, calls):
    """Trueno usage: select, run your own kernel, report its time; returns reasons seen."""
    reasons = []
    picks = []
    for _ in range(calls):
        before = rt.selection_counts()
        backend = rt.select(operation, size)
        after = rt.selection_counts()
        (key,) = [k for k in after if after[k] != before.get(k, 0)]
        assert key.backend is backend and key.operation == operation
        reasons.append(key.reason)
        picks.append(backend)
        rt.record_performance(operation, size, backend, latency_us[backend])
    return reasons, picks


def test_select_with_record_performance_converges_with_fake_gpu_arm(rt) -> None:
    latency = {Backend.GPU: 40.0, Backend.SIMD: 120.0, Backend.SCALAR: 900.0}
    reasons, picks = _select_loop(rt, latency, "my_kernel", 5_000, 300)
    assert reasons[0] is Reason.HEURISTIC
    # heuristic -> explore -> exploit, in that order of first appearance
    first = {r: reasons.index(r) for r in (Reason.HEURISTIC, Reason.EXPLORE, Reason.EXPLOIT)}
    assert first[Reason.HEURISTIC] < first[Reason.EXPLORE] < first[Reason.EXPLOIT]
    assert Reason.HEURISTIC not in reasons[1:]
    # every arm was tried before the first commitment
    assert set(picks[:first[Reason.EXPLOIT]]) == set(Backend)
    # after it: exploit the fastest, bar the odd re-check
    exploits = [p for p, r in zip(picks, reasons, strict=True) if r is Reason.EXPLOIT]
    assert exploits and set(exploits) == {Backend.GPU}
    assert picks[-100:].count(Backend.GPU) >= 95
    assert rt.get_best_backend("my_kernel", 5_000) is Backend.GPU
    assert rt.decide("my_kernel", 5_000).backend is Backend.GPU


def test_select_learns_like_run_with_fake_gpu_arm(make_runtime) -> None:
    # Latencies long enough that timing is noise (a timed call's 4 us under 0.5% of one), so
    # run() times every call like the select loop reports every call (cheaper calls are timed
    # 1-in-N by run(), by design).
    latency = {Backend.GPU: 1000.0, Backend.SIMD: 3000.0, Backend.SCALAR: 9000.0}
    # run(): the runtime times fake kernels itself
    h = make_runtime(latency, op="learned_by_run", size=5_000)
    ran = h.call_tracked(300)
    # select(): the caller times its own kernels and reports them
    reasons, picks = _select_loop(h.rt, latency, "learned_by_select", 5_000, 300)
    assert [r for _, r in ran] == reasons
    assert [b for b, _ in ran] == picks
    by_run = {(r.backend, r.samples, r.mean_us) for r in h.rt.history_snapshot()
              if r.operation == "learned_by_run"}
    by_select = {(r.backend, r.samples, r.mean_us) for r in h.rt.history_snapshot()
                 if r.operation == "learned_by_select"}
    assert by_run == by_select


@pytest.mark.parametrize("tiny_us", [1e-310, 5e-324])
def test_tiny_positive_durations_are_accepted_on_a_registered_operation(rt, tiny_us) -> None:
    # A subnormal duration is finite and >= 0, so it is valid; it must not crash the runtime
    # when it becomes the committed arm's estimate (which sets the measurement period).
    op = rt.register("tiny", size=lambda n: n)
    op.add_implementation(Backend.SIMD, lambda n: n)
    rt.run("tiny", 64)
    for _ in range(10):
        backend = rt.select("tiny", 64)
        rt.record_performance("tiny", 64, backend, tiny_us)
    assert rt.run("tiny", 64) == 64
    assert rt.get_best_backend("tiny", 64) is Backend.SIMD
