"""Thread counts as choices: every numba-threaded built-in implementation also runs, and is
learned, at fewer threads (``kernels/_thread_counts``), on real numba kernels."""

from __future__ import annotations

import numpy as np
import pytest

import adaptive_runtime as ar
from adaptive_runtime.kernels._compile import PARALLEL_MIN_ELEMENTS, one_thread, prange, simd_jit
from adaptive_runtime.kernels._thread_counts import fewer_counts

NUMBA_AT_ONE = ar.Variant("simd", "numba@1")


@simd_jit
def _doubled(x):  # type: ignore[no-untyped-def]
    out = np.empty_like(x)
    for i in prange(x.shape[0]):
        out[i] = 2.0 * x[i]
    return out


def _choice(record: ar.HistoryRecord) -> ar.Backend | ar.Variant:
    return ar.Variant(record.backend, record.variant) if record.variant else record.backend


def test_counts_worth_learning_are_one_and_half_a_pool_over_two_threads() -> None:
    assert fewer_counts(1) == ()
    assert fewer_counts(2) == (1,)
    assert fewer_counts(8) == (1, 4)


def test_threaded_builtins_get_a_one_thread_variant_in_every_host_family() -> None:
    rt = ar.AdaptiveRuntime()
    sum_op = rt.operation("sum")
    assert NUMBA_AT_ONE in sum_op.choices  # (its SIMD arm is numba's prange loop)
    torch_sum = {i.choice for i in sum_op.implementations("torch")}
    assert NUMBA_AT_ONE in torch_sum  # (beside ATen's, whose count is chosen per pool)
    assert not any("@" in i.name for i in sum_op.implementations("device"))
    # serial implementations get none: add's SIMD arm is numpy's own (single-threaded) call
    assert not any("@" in i.name for i in rt.operation("add").implementations())


def test_numba_at_one_thread_runs_the_serial_build_at_every_size() -> None:
    x = np.ones(PARALLEL_MIN_ELEMENTS * 4, np.float32)
    np.testing.assert_array_equal(one_thread(_doubled)(x), 2.0 * x)
    assert len(_doubled.serial.overloads) == 1
    assert len(_doubled.parallel.overloads) == 0  # (the same size outside: the parallel one)
    np.testing.assert_array_equal(_doubled(x), 2.0 * x)
    assert len(_doubled.parallel.overloads) == 1


def test_the_serial_and_parallel_builds_are_cached_apart() -> None:
    kernel = _doubled.materialize() if hasattr(_doubled, "materialize") else _doubled
    names = {build.py_func.__qualname__ for build in (kernel.serial, kernel.parallel)}
    assert len(names) == 2  # (numba names its cache files after them: see _cached_apart)


def test_a_one_thread_builtin_variant_computes_what_the_threaded_arm_does() -> None:
    rt = ar.AdaptiveRuntime()
    op = rt.operation("sum")
    x = np.random.default_rng(1).standard_normal(PARALLEL_MIN_ELEMENTS * 4)
    threaded = op.implementation_for(ar.Backend.SIMD).fn(x)
    one = op.implementation_for(NUMBA_AT_ONE).fn(x)
    assert one == pytest.approx(threaded, rel=1e-9)


def test_one_thread_variants_are_candidates_only_from_the_size_they_differ_at() -> None:
    rt = ar.AdaptiveRuntime()
    small = np.random.default_rng(2).standard_normal(1000)
    large = np.random.default_rng(3).standard_normal(PARALLEL_MIN_ELEMENTS * 2)
    rt.run("sum", small)
    rt.run("sum", large)
    assert rt.wait_compiled(timeout_s=120)  # (not left out until compiled: see prepare)
    for _ in range(300):
        rt.run("sum", small)
        rt.run("sum", large)
    timed = {(r.size_bucket, _choice(r)) for r in rt.history_snapshot()
             if r.operation == "sum"}
    assert (ar.size_bucket(large.size), NUMBA_AT_ONE) in timed
    assert (ar.size_bucket(small.size), ar.Backend.SIMD) in timed
    assert (ar.size_bucket(small.size), NUMBA_AT_ONE) not in timed
