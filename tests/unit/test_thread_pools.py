"""Threads are a resource: the pools' sizes are read (numba, torch, BLAS through threadpoolctl)
and recorded with the history fingerprint, and when a pool is resized while the program runs,
the implementations registered on it are measured afresh — and only those. Fake kernels on
the fake timer of tests/conftest.py; the pool resized is torch's real one."""

from __future__ import annotations

import logging
import sys
from typing import Any

import numba
import numpy as np
import pytest
import torch

import adaptive_runtime as ar
from adaptive_runtime.history.fingerprint import hardware_fingerprint
from adaptive_runtime.keys import reference_size, size_bucket
from adaptive_runtime.threads import ThreadWatch, thread_counts

Backend = ar.Backend
Reason = ar.Reason
THREADED = ar.Variant(Backend.SIMD, "threaded")
# (a bucket's reference size: timings are learned as they are, not rescaled to it)
SIZE = reference_size(size_bucket(1_000))


def test_the_watch_reports_resized_pools_once_per_interval() -> None:
    readings = iter([{"numba": None, "torch": 2, "blas": 4},
                     {"numba": 2, "torch": 2, "blas": 4},  # numba's pool came up: no change
                     {"numba": 2, "torch": 1, "blas": 4},
                     {"numba": 1, "torch": 1, "blas": 2}])
    watch = ThreadWatch(lambda: next(readings), interval_s=1.0)
    assert watch.poll(10.0) == {}  # the first poll reads nothing (a program's first call)
    assert watch.poll(10.5) == {}  # not due: nothing read
    assert watch.poll(11.0) == {}  # the first reading: nothing to compare with
    assert watch.poll(12.0) == {}
    assert watch.poll(13.0) == {"torch": (2, 1)}
    assert watch.poll(14.0) == {"numba": (2, 1), "blas": (4, 2)}
    assert watch.due_s == 15.0


def test_thread_counts_read_torch_and_blas_and_the_fingerprint_records_them() -> None:
    counts = thread_counts()
    assert counts["torch"] == torch.get_num_threads()
    assert isinstance(counts["blas"], int) and counts["blas"] >= 1  # (numpy's own BLAS)
    fingerprint = hardware_fingerprint()
    assert fingerprint["torch_threads"] == torch.get_num_threads()
    assert fingerprint["blas_threads"] == counts["blas"]
    # (numba's configured count while its threading layer is down: reading the live one
    # would start it)
    assert fingerprint["numba_threads"] in (numba.config.NUMBA_NUM_THREADS,
                                            counts["numba"])


def test_registration_refuses_an_unknown_thread_pool(make_runtime) -> None:
    op = make_runtime({}, gpu=False).rt.operation("fakeop")
    with pytest.raises(ar.RegistrationError, match=r"thread pool .*'numba', 'torch', 'blas'"):
        op.add_implementation("simd", lambda n: n, threads="openmp")
    op.add_implementation("simd", lambda n: n, threads="torch")
    assert op.implementation_for(Backend.SIMD).threads == "torch"


def _runtime_with_a_torch_threaded_variant(make_runtime) -> Any:
    h = make_runtime({THREADED: 10.0, Backend.SIMD: 30.0, Backend.SCALAR: 50.0}, gpu=False,
                     size=SIZE, arms=())
    op = h.rt.operation(h.op)
    op.add_implementation("simd", h.arms.kernel(THREADED), name="threaded", threads="torch")
    op.add_implementation("simd", h.arms.kernel(Backend.SIMD))
    op.add_implementation("scalar", h.arms.kernel(Backend.SCALAR))
    return h


def _calls(h: Any, times: int) -> None:
    for _ in range(times):
        h.call()
        h.clock.advance(0.001)


@pytest.mark.parametrize("resize", [True, False], ids=["pool-resized", "control-same-pool"])
def test_a_resized_pool_has_only_its_implementations_measured_afresh(
        make_runtime, caplog, resize) -> None:
    h = _runtime_with_a_torch_threaded_variant(make_runtime)
    _calls(h, 400)
    h.clock.advance(1.5)
    _calls(h, 400)  # (a timed call among them reads the pools' sizes: the baseline)
    assert h.rt.decide(h.op, SIZE).choice is THREADED
    threads = torch.get_num_threads()
    # what the threaded variant costs from now on (the pool's new size, in the real case)
    h.arms.latency_us[THREADED] = 40.0
    scalar_runs = h.arms.calls[Backend.SCALAR]
    try:
        if resize:
            torch.set_num_threads(threads + 1)
        h.clock.advance(2.0)
        with caplog.at_level(logging.INFO, logger="adaptive_runtime._dispatch.settle"):
            _calls(h, 400)
    finally:
        torch.set_num_threads(threads)
    reasons = {key.reason for key in h.rt.selection_counts()}
    if not resize:
        # without a resize only the drift alarm notices, and every arm is measured afresh
        assert "thread pool size changed" not in caplog.text
        assert Reason.DRIFT in reasons
        return
    assert f"thread pool size changed (torch {threads} -> {threads + 1}): 1 estimates on " \
           "1 keys measured afresh" in caplog.text
    decision = h.rt.decide(h.op, SIZE)
    assert decision.choice is Backend.SIMD
    assert decision.estimates_us[THREADED] == pytest.approx(40.0)  # not a blend with 10
    # the serial implementations kept their estimates: SCALAR was not timed again
    assert h.arms.calls[Backend.SCALAR] == scalar_runs
    assert Reason.DRIFT not in reasons


def test_built_in_threaded_implementations_name_their_pool() -> None:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig())
    pools = {(name, impl.choice.value): impl.threads for name in rt.operations
             for impl in rt.operation(name).implementations()}
    assert pools[("relu", "simd")] == "numba"
    assert pools[("relu", "simd:numpy")] == ""
    assert pools[("relu", "scalar")] == ""
    assert pools[("gelu", "simd")] == "torch"  # ATen through torch.from_numpy
    assert pools[("dot", "simd")] == pools[("matmul", "simd")] == "blas"
    assert pools[("softmax", "simd:numpy")] == ""
    torch_relu = rt.operation("relu").family_twin("torch").implementation_for(Backend.SIMD)
    assert torch_relu.threads == "torch"
    assert np.all(rt.run("relu", np.array([-1.0, 2.0])) == [0.0, 2.0])


def test_while_running_blas_is_read_only_where_the_program_imported_threadpoolctl(
        monkeypatch) -> None:
    import threadpoolctl  # noqa: F401  (what a program resizing its BLAS pool imports)

    assert isinstance(thread_counts(blas=False)["blas"], int)
    monkeypatch.delitem(sys.modules, "threadpoolctl")
    assert thread_counts(blas=False)["blas"] is None
    assert isinstance(thread_counts()["blas"], int)  # (the fingerprint reads it anyway)
