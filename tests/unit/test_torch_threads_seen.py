"""Where a user sees the thread count the runtime holds torch at (``_dispatch/pool_phase``),
with real torch: the spans of calls on torch's pool carry it (``adaptive.threads``), as do
``rt.decide()`` (``Decision.threads``) and ``rt.stats().torch_threads``; the gauge
``adaptive.threads.held`` reads it; a trial's end is an ``adaptive.threads torch`` span saying
what explained it."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import pytest
import torch
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import adaptive_runtime as ar
from adaptive_runtime._dispatch.pool_phase import SWITCH_GAIN, TRIAL_CALLS, PoolPhase
from adaptive_runtime.offline.report import from_runtime
from adaptive_runtime.offline.report.table import chosen_cell
from adaptive_runtime.records import PoolTrial
from adaptive_runtime.telemetry.thread_spans import trial_attributes
from adaptive_runtime.threads import torch_phase


def _runtime(*, choose_threads: bool = True) -> ar.AdaptiveRuntime:
    """An operation on torch's pool whose calls cost what a busy neighbour makes them: 400 us
    at 2 threads, 100 us at 1 (one thread wins: a trial of it is kept). Every timed call is
    traced (each is slow, and no budget holds spans back)."""
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(max_measure_period=4,
                                             choose_threads=choose_threads,
                                             spans_per_sec=math.inf))
    op = rt.register("threaded", size=lambda x: x.size, kind="elementwise")

    def kernel(x: np.ndarray) -> np.ndarray:
        end = time.perf_counter() + (100e-6 if torch.get_num_threads() == 1 else 400e-6)
        while time.perf_counter() < end:
            pass
        return x

    op.add_implementation("simd", kernel, threads="torch")
    return rt


def _run_until_kept(rt: ar.AdaptiveRuntime, limit_s: float = 10.0) -> None:
    """Run until a trial of one thread was kept."""
    x = np.ones(1000)
    end = time.monotonic() + limit_s
    while not rt.stats().torch_threads["kept"] and time.monotonic() < end:
        for _ in range(20):
            rt.run("threaded", x)
    assert torch_phase() == 1, "the runtime never held torch at one thread"


def _gauge(reader: InMemoryMetricReader) -> dict[tuple[Any, ...], float]:
    data = reader.get_metrics_data()
    return {tuple(sorted(p.attributes.items())): p.value
            for rm in (data.resource_metrics if data else ()) for sm in rm.scope_metrics
            for m in sm.metrics if m.name == "adaptive.threads.held"
            for p in m.data.data_points}


def test_spans_decide_stats_and_the_gauge_name_the_count_torch_is_held_at(pool_of_two) -> None:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    rt = _runtime()
    ar.telemetry.instrument(rt, tracer_provider=tracer_provider, meter_provider=meter_provider)
    try:
        torch_key = (("adaptive.pool", "torch"),)
        assert _gauge(reader) == {torch_key: 2}  # (the pool's size: nothing held yet)
        _run_until_kept(rt)
        assert rt.flush_telemetry()
        assert _gauge(reader) == {torch_key: 1}
        assert rt.decide("threaded", 1000).threads == 1
        assert rt.decide("sum", 1 << 10).threads == 0  # (numpy's arms: not on torch's pool)
        assert dict(rt.stats().torch_threads) == {"threads": 1, "held": 1, "trials": 1,
                                                  "kept": 1}
        (row,) = [r for r in from_runtime(rt).rows if r.operation == "threaded"]
        assert chosen_cell(row) == "simd(torch@1)"  # (the report of a live runtime)
    finally:
        ar.telemetry.uninstrument(rt, timeout_s=5.0)
    spans = exporter.get_finished_spans()
    selects = [s for s in spans if s.name == "adaptive.select threaded"]
    counts = [s.attributes["adaptive.threads"] for s in selects]
    # every call's span names the count it ran at: the pool's 2 before the trial, 1 after
    assert counts[0] == 2 and counts[-1] == 1 and set(counts) == {1, 2}, counts
    executes = [s for s in spans if s.name == "adaptive.execute threaded"]
    assert {s.attributes["adaptive.threads"] for s in executes} == {1, 2}
    (trial,) = [s for s in spans if s.name == "adaptive.threads torch"]
    attrs = trial.attributes
    assert (attrs["adaptive.pool"], attrs["adaptive.threads.before"],
            attrs["adaptive.threads.trial"], attrs["adaptive.threads"],
            attrs["adaptive.threads.kept"], attrs["adaptive.threads.trigger"]) == (
        "torch", 2, 1, 1, True, "first")
    assert attrs["adaptive.threads.gain"] >= SWITCH_GAIN
    assert attrs["adaptive.threads.trial_mean_us"] < attrs["adaptive.threads.reference_mean_us"]
    assert attrs["adaptive.threads.window_calls"] == TRIAL_CALLS
    assert "adaptive.load.involuntary_switches_per_s_change" not in attrs


def test_where_counts_are_not_chosen_a_decision_names_the_pools_size(pool_of_two) -> None:
    rt = _runtime(choose_threads=False)
    x = np.ones(1000)
    for _ in range(20):
        rt.run("threaded", x)
    assert rt.decide("threaded", 1000).threads == 2
    assert dict(rt.stats().torch_threads) == {}


def test_a_trial_brought_forward_by_the_load_names_the_change(pool_of_two) -> None:
    load = [(0.0, 0.5, 2)]
    phase = PoolPhase(2, lambda: load[-1])
    cost_us = {2: 400.0, 1: 100.0}

    def window(now_s: float) -> list[PoolTrial]:
        ended = [phase.observe(("k", i % 2), cost_us[torch.get_num_threads()], now_s)
                 for i in range(TRIAL_CALLS)]
        return [t for t in ended if t is not None]

    assert window(0.0) == []  # the reference
    (kept,) = window(0.1)  # the trial of one thread: kept
    assert (kept.before, kept.trial, kept.after, kept.kept, kept.trigger) == (2, 1, 1, True,
                                                                            "first")
    assert kept.gain == pytest.approx(4.0)
    assert (kept.reference_mean_us, kept.trial_mean_us) == (400.0, 100.0)
    cost_us = {2: 95.0, 1: 100.0}  # (quiet now: the pool's size wins by less than the gain)
    assert window(0.2) == []  # not due yet: nothing measured
    load.append((900.0, 1.5, 2))  # a neighbour starts: the next trial comes at once
    assert window(0.3) == []  # the reference, at one thread
    (back,) = window(0.4)
    assert (back.before, back.trial, back.after, back.kept, back.trigger) == (1, 2, 1, False,
                                                                            "load")
    assert (back.switches_change, back.load_change) == (900.0, 1.0)
    attrs = trial_attributes(back)
    assert attrs["adaptive.load.involuntary_switches_per_s_change"] == 900.0
    assert attrs["adaptive.load.average_1m_change"] == 1.0
    assert attrs["adaptive.threads.trigger"] == "load" and not attrs["adaptive.threads.kept"]
