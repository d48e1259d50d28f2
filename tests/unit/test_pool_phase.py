"""torch's thread count, held per pool for a phase and judged by trials (``_dispatch/pool_phase``),
with real torch: the count whose timed calls are faster is kept, a losing trial goes back and
waits longer, a change in the machine's load brings the next trial forward."""

from __future__ import annotations

import time

import numpy as np
import torch

import adaptive_runtime as ar
from adaptive_runtime._dispatch.pool_phase import FIRST_WAIT_S, TRIAL_CALLS, PoolPhase
from adaptive_runtime.threads import thread_counts, torch_phase


def _window(phase: PoolPhase, cost_us: dict[int, float], now_s: float) -> None:
    """One window of timed calls of two keys, each costing what ``cost_us`` says at the
    count torch is held at now."""
    for i in range(TRIAL_CALLS):
        phase.observe(("k", i % 2), cost_us[torch.get_num_threads()] * (1 + i % 2), now_s)


def test_a_trial_count_that_runs_the_calls_faster_is_kept_and_a_slower_one_is_not(
        pool_of_two) -> None:
    load = [(0.0, 0.5, 2)]
    phase = PoolPhase(2, lambda: load[-1])
    contended = {2: 400.0, 1: 100.0}  # (beside a busy neighbour: one thread wins)
    _window(phase, contended, 0.0)  # the reference, at the pool's size
    assert torch_phase() == 1 and torch.get_num_threads() == 1  # the trial
    _window(phase, contended, 0.1)
    assert (torch_phase(), phase.switches) == (1, 1)  # kept
    # the pool's size, as the runtime's watch reads it, is unchanged: nothing re-measured
    assert thread_counts(blas=False)["torch"] == 2
    # nothing is measured until the next trial is due
    _window(phase, contended, 0.2)
    assert phase.trials == 1
    quiet = {2: 95.0, 1: 100.0}  # (the pool's size wins by less than the switch gain)
    _window(phase, quiet, 0.1 + FIRST_WAIT_S)  # reference at one thread
    assert torch_phase() == 0  # the trial of the pool's size
    _window(phase, quiet, 0.2 + FIRST_WAIT_S)
    assert (torch_phase(), phase.trials, phase.switches) == (1, 2, 1)  # back to one thread
    # the next trial waits twice as long, unless the machine's load changes
    _window(phase, quiet, 0.3 + 2 * FIRST_WAIT_S)
    assert phase.trials == 2
    load.append((900.0, 0.5, 2))
    _window(phase, quiet, 0.4 + 2 * FIRST_WAIT_S)
    assert phase.trials == 3


def _runtime_with_torch_pool_op(*, choose_threads: bool = True) -> ar.AdaptiveRuntime:
    """An operation on torch's pool whose calls cost what contention makes them: 400 us at 2
    threads, 100 us at 1 (``contended`` False: 100 us and 400 us)."""
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(max_measure_period=4,
                                             choose_threads=choose_threads))
    op = rt.register("threaded", size=lambda x: x.size, kind="elementwise")

    def kernel(x: np.ndarray) -> np.ndarray:
        one = torch.get_num_threads() == 1
        cost_us = (100.0 if one else 400.0) if rt.contended else (400.0 if one else 100.0)
        end = time.perf_counter() + cost_us * 1e-6
        while time.perf_counter() < end:
            pass
        return x

    op.add_implementation("simd", kernel, threads="torch")
    rt.contended = True  # type: ignore[attr-defined]
    return rt


def _run_for(rt: ar.AdaptiveRuntime, seconds: float) -> None:
    x = np.ones(1000)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        rt.run("threaded", x)


def test_a_default_runtime_holds_torch_at_one_thread_while_that_is_faster_and_goes_back(
        pool_of_two) -> None:
    rt = _runtime_with_torch_pool_op()
    _run_for(rt, 1.5)
    assert torch_phase() == 1 and torch.get_num_threads() == 1
    rt.contended = False  # type: ignore[attr-defined]  # (the neighbour stopped)
    _run_for(rt, 4.0)
    assert torch_phase() == 0 and torch.get_num_threads() == 2


def test_no_count_is_chosen_or_held_where_thread_counts_are_not_chosen(pool_of_two) -> None:
    rt = _runtime_with_torch_pool_op(choose_threads=False)
    _run_for(rt, 1.5)
    big = np.random.default_rng(0).standard_normal(1 << 17)
    for _ in range(300):
        rt.run("sum", big)
    assert not {r.variant for r in rt.history_snapshot() if r.variant.endswith("@1")}
    assert torch_phase() == 0 and torch.get_num_threads() == 2
