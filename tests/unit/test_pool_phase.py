"""torch's thread count between the runtime's calls follows its keys' committed counts
(``_dispatch/pool_phase``), with real torch: an operation whose one-thread variant is the
faster holds torch at one thread; when the pool's size wins again, torch goes back."""

from __future__ import annotations

import time

import numpy as np
import pytest

import adaptive_runtime as ar
from adaptive_runtime.threads import set_torch_phase, thread_counts, torch_phase

torch = pytest.importorskip("torch")

AT_ONE = ar.Variant("simd", "torch@1")


def _busy(us: float) -> None:
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


def _runtime_with_threaded_op(cost_us: dict[str, float], *, choose_threads: bool = True
                              ) -> ar.AdaptiveRuntime:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(max_measure_period=4,
                                             choose_threads=choose_threads))
    op = rt.register("threaded", size=lambda x: x.size, kind="elementwise")

    def at_pool_size(x: np.ndarray) -> np.ndarray:
        _busy(cost_us["pool"])
        return x

    def at_one(x: np.ndarray) -> np.ndarray:
        _busy(cost_us["one"])
        return x

    op.add_implementation("simd", at_pool_size, threads="torch")
    op.add_implementation("simd", at_one, name="torch@1", threads="torch", thread_count=1)
    return rt


def _run_for(rt: ar.AdaptiveRuntime, seconds: float) -> None:
    x = np.ones(1000)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        rt.run("threaded", x)


@pytest.fixture
def pool_of_two():
    set_torch_phase(0)  # (an earlier test's runtime may hold torch at one thread)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    set_torch_phase(0)
    torch.set_num_threads(before)


def test_torch_is_held_at_the_count_its_keys_chose_and_back_when_they_change(pool_of_two) -> None:
    cost_us = {"pool": 400.0, "one": 100.0}
    rt = _runtime_with_threaded_op(cost_us)
    _run_for(rt, 2.5)
    assert rt.decide("threaded", 1000).choice is AT_ONE
    assert torch_phase() == 1 and torch.get_num_threads() == 1
    # the pool's size, as the runtime's watch reads it, is unchanged: nothing re-measured
    assert thread_counts(blas=False)["torch"] == 2
    cost_us.update(pool=100.0, one=400.0)  # (the load is gone: the pool's size wins again)
    _run_for(rt, 4.0)
    assert rt.decide("threaded", 1000).choice is ar.Backend.SIMD
    assert torch_phase() == 0 and torch.get_num_threads() == 2


def test_no_count_is_chosen_or_held_where_thread_counts_are_not_chosen(pool_of_two) -> None:
    cost_us = {"pool": 400.0, "one": 100.0}
    rt = _runtime_with_threaded_op(cost_us, choose_threads=False)
    _run_for(rt, 1.5)
    x, w = torch.randn(64, 256), torch.randn(256, 256)
    for _ in range(300):
        rt.run("linear", x, w)
    timed = {(r.operation, r.variant) for r in rt.history_snapshot()}
    assert ("threaded", "") in timed and ("linear@torch", "") in timed
    assert not {v for _op, v in timed if v.endswith("@1")}
    assert torch_phase() == 0 and torch.get_num_threads() == 2
