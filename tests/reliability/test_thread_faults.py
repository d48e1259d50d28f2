"""Faults injected into each thread the package starts: the thread survives, later work gets
through, and the counts say what was lost.

The threads: a runtime's span worker (a raising span maker and rank lookup; a fault no
guard stops, after which the next record starts the worker again), ``configure()``'s
span export worker (a raising exporter; one that ends the worker), the metric reader (a
raising exporter and a raising read of a runtime's counters, on the SDK's reader thread), the
history saver (a raising read of the history; one that ends the saver, which a timed call's
look starts again) and the thread-pool watch timed calls poll (a raising read). Each fault is
counted in ``ar.telemetry.stats().thread_faults`` under its thread, and each restart in
``threads_restarted``; every span is accounted for (made, or counted lost as ``error``).

Also here: a program importing torch slowly on one thread while the span worker drains on
another (the fault issue 38 found: the worker read a half-imported ``torch`` and died).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import internals
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import adaptive_runtime as ar
from adaptive_runtime import Backend
from adaptive_runtime.operations import DeviceProbe
from adaptive_runtime.telemetry import span_worker
from adaptive_runtime_sdk.export import BoundedSpanProcessor
from adaptive_runtime_sdk.exporters import GuardedMetricExporter

# Every call timed and every timed call's spans admitted, with no span budget.
EXPORT_ALL = ar.RuntimeConfig(sampling_threshold_us=0.0, max_measure_period=1,
                              spans_per_sec=float("inf"))


class Injected(Exception):
    """What an injected fault raises."""


class Fatal(BaseException):
    """A fault no guard stops (not an ``Exception``): the thread that meets it ends."""


class Faults:
    """Raise ``error`` on the first ``times`` calls of whatever it wraps, counting them."""

    def __init__(self, times: int, error: type[BaseException] = Injected) -> None:
        self.left = times
        self.raised = 0
        self.error = error
        self._lock = threading.Lock()

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def faulty(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                fire = self.left > 0
                if fire:
                    self.left -= 1
                    self.raised += 1
            if fire:
                raise self.error("injected")
            return fn(*args, **kwargs)

        return faulty


def runtime(config: ar.RuntimeConfig = EXPORT_ALL, **kwargs: Any) -> ar.AdaptiveRuntime:
    rt = ar.AdaptiveRuntime(config, builtin_ops=False, devices=DeviceProbe(gpu=False), **kwargs)
    op = rt.register("scale", size=lambda n: n, kind="vector")
    op.add_implementation(Backend.SIMD, lambda n: ("simd", n))
    op.add_implementation(Backend.SCALAR, lambda n: ("scalar", n))
    return rt


def delta(after: dict[str, int], before: dict[str, int], thread: str) -> int:
    return after.get(thread, 0) - before.get(thread, 0)


def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture
def traced() -> Iterator[tuple[ar.AdaptiveRuntime, InMemorySpanExporter]]:
    """A runtime exporting every call's spans into an in-memory exporter."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    rt = runtime()
    ar.telemetry.instrument(rt, tracer_provider=provider)
    try:
        yield rt, exporter
    finally:
        ar.telemetry.uninstrument(rt, timeout_s=5.0)
        provider.shutdown()


def running_worker(rt: ar.AdaptiveRuntime) -> tuple[Any, threading.Thread, Any]:
    """The runtime's span recorder once its worker runs (one call traced), the worker, and
    what makes its spans."""
    rt.run("scale", 8)
    assert rt.flush_telemetry(10.0)
    recorder = rt.step_hooks()[0]
    worker = internals.span_worker_thread(recorder)
    assert worker is not None and worker.is_alive()
    return recorder, worker, internals.span_builder(recorder)


def made_calls(exporter: InMemorySpanExporter) -> int:
    """Calls whose select span reached the exporter."""
    return Counter(s.name for s in exporter.get_finished_spans())["adaptive.select scale"]


# ---------------------------------------------------------------------------- span worker


def test_span_worker_survives_a_raising_span_maker_and_rank_lookup(
        traced: tuple[ar.AdaptiveRuntime, InMemorySpanExporter],
        monkeypatch: pytest.MonkeyPatch, reliability: Any) -> None:
    rt, exporter = traced
    recorder, worker, builder = running_worker(rt)
    maker, ranks = Faults(5), Faults(3)
    monkeypatch.setattr(builder, "call_spans", maker.wrap(builder.call_spans))
    monkeypatch.setattr(span_worker, "rank_attributes", ranks.wrap(span_worker.rank_attributes))
    stats = ar.telemetry.stats()
    made = made_calls(exporter)
    calls = 0
    while maker.left or ranks.left:  # (a batch at a time: flush after each)
        for _ in range(3):
            rt.run("scale", 8)
            calls += 1
        assert rt.flush_telemetry(10.0)
        assert calls < 200, "the injected faults never all fired"
    for _ in range(50):  # after the faults: every call's spans arrive
        rt.run("scale", 8)
    assert rt.flush_telemetry(10.0)
    after = ar.telemetry.stats()
    injected = maker.raised + ranks.raised
    assert internals.span_worker_thread(recorder) is worker and worker.is_alive()
    assert delta(after.thread_faults, stats.thread_faults, "spans") == injected
    assert delta(after.threads_restarted, stats.threads_restarted, "spans") == 0
    lost = after.dropped["error"] - stats.dropped["error"]
    assert lost == 2 * maker.raised, "each record the span maker failed: its 2 spans lost"
    assert made_calls(exporter) - made == calls + 50 - maker.raised
    reliability.record(load=f"span worker: {injected} faults injected (span maker "
                            f"{maker.raised}, rank lookup {ranks.raised}), {calls + 50} calls",
                       faults_counted=injected, spans_lost=lost, threads_restarted=0,
                       thread_alive=True)


def test_span_worker_ended_by_a_fault_is_started_again_by_the_next_record(
        traced: tuple[ar.AdaptiveRuntime, InMemorySpanExporter],
        monkeypatch: pytest.MonkeyPatch, reliability: Any) -> None:
    rt, exporter = traced
    recorder, first, builder = running_worker(rt)
    fatal = Faults(1, Fatal)
    monkeypatch.setattr(builder, "call_spans", fatal.wrap(builder.call_spans))
    stats = ar.telemetry.stats()
    rt.run("scale", 8)
    assert wait_until(lambda: not first.is_alive()), \
        "the fault did not end the worker"
    made = made_calls(exporter)
    for _ in range(20):
        rt.run("scale", 8)
    assert rt.flush_telemetry(10.0)
    after = ar.telemetry.stats()
    second = internals.span_worker_thread(recorder)
    assert second is not first and second is not None and second.is_alive()
    assert delta(after.threads_restarted, stats.threads_restarted, "spans") == 1
    assert delta(after.thread_faults, stats.thread_faults, "spans") == 1
    assert after.dropped["error"] - stats.dropped["error"] == 2  # the record it met
    assert made_calls(exporter) - made == 20
    reliability.record(load="span worker ended by a fault (BaseException), 20 calls after",
                       faults_counted=1, spans_lost=2, threads_restarted=1, thread_alive=True)


# ---------------------------------------------------------------------------- export worker


class FlakyExporter(SpanExporter):
    """Exports into a list; its first exports raise what ``faults`` says."""

    def __init__(self, faults: Faults) -> None:
        self.spans: list[Any] = []
        self.export = faults.wrap(self._export)  # type: ignore[method-assign]

    def _export(self, spans: Any) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def export_pipeline(faults: Faults) -> tuple[TracerProvider, BoundedSpanProcessor,
                                            FlakyExporter]:
    exporter = FlakyExporter(faults)
    processor = BoundedSpanProcessor(exporter, max_export_batch_size=4, schedule_delay_s=0.05)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(processor)
    return provider, processor, exporter


def end_spans(provider: TracerProvider, n: int, processor: BoundedSpanProcessor) -> None:
    tracer = provider.get_tracer("test")
    for i in range(n):
        tracer.start_span(f"s{i}").end()
        processor.flush(10.0)  # (one batch each: each fault meets its own)


@pytest.mark.parametrize("fault", ["raising", "ending"])
def test_export_worker_survives_a_raising_exporter_or_is_started_again(
        fault: str, reliability: Any) -> None:
    faults = Faults(3) if fault == "raising" else Faults(1, Fatal)
    provider, processor, exporter = export_pipeline(faults)
    first = processor._thread
    stats = ar.telemetry.stats()
    try:
        end_spans(provider, faults.left, processor)
        end_spans(provider, 10, processor)  # after the faults: all exported
        assert processor.flush(10.0)
        counts = processor.counts()
        after = ar.telemetry.stats()
        worker = processor._thread
        assert worker is not None and worker.is_alive()
        assert counts["export_failed"] == faults.raised  # each fault: its batch of one
        assert counts["exported"] == 10 == len(exporter.spans)
        assert counts["received"] == counts["exported"] + counts["export_failed"]
        assert delta(after.thread_faults, stats.thread_faults, "export") == faults.raised
        restarted = delta(after.threads_restarted, stats.threads_restarted, "export")
        assert restarted == (1 if fault == "ending" else 0)
        assert (worker is first) == (fault == "raising")
    finally:
        processor.shutdown()
        provider.shutdown()
    reliability.record(load=f"export worker, exporter {fault} ({faults.raised} faults), "
                            "10 spans after",
                       faults_counted=faults.raised, spans_lost=counts["export_failed"],
                       threads_restarted=restarted, thread_alive=True)


# ---------------------------------------------------------------------------- metric reader


class ListMetricExporter(MetricExporter):
    """Keeps every export's metric names."""

    def __init__(self) -> None:
        super().__init__()
        self.exports: list[set[str]] = []

    def export(self, metrics_data: Any, timeout_millis: float = 10_000,
               **kwargs: Any) -> MetricExportResult:
        self.exports.append({m.name for rm in metrics_data.resource_metrics
                             for sm in rm.scope_metrics for m in sm.metrics})
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        pass


def test_metric_reader_survives_a_raising_exporter_and_counter_read(
        monkeypatch: pytest.MonkeyPatch, reliability: Any) -> None:
    target = ListMetricExporter()
    exporting = Faults(3)
    monkeypatch.setattr(target, "export", exporting.wrap(target.export))
    reader = PeriodicExportingMetricReader(GuardedMetricExporter(target),
                                           export_interval_millis=50)
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    rt = runtime(ar.RuntimeConfig())
    reading = Faults(3)
    monkeypatch.setattr(rt, "selection_counts", reading.wrap(rt.selection_counts))
    stats = ar.telemetry.stats()
    ar.telemetry.instrument(rt, meter_provider=provider)
    try:
        for _ in range(100):
            rt.run("scale", 8)
        assert wait_until(lambda: not (exporting.left or reading.left)
                          and any("adaptive.selection" in e for e in target.exports[-3:]))
        readers = [t for t in threading.enumerate() if "MetricReader" in t.name]
        assert readers and all(t.is_alive() for t in readers)
    finally:
        ar.telemetry.uninstrument(rt, timeout_s=5.0)
        provider.shutdown()
    after = ar.telemetry.stats()
    injected = exporting.raised + reading.raised
    assert delta(after.thread_faults, stats.thread_faults, "metrics") == injected
    reliability.record(load=f"metric reader: exporter raising {exporting.raised} times, "
                            f"counter read raising {reading.raised} times",
                       faults_counted=injected, spans_lost=0, threads_restarted=0,
                       thread_alive=True)


# ---------------------------------------------------------------------------- history saver


@pytest.mark.parametrize("fault", ["raising", "ending"])
def test_history_saver_survives_a_raising_history_read_or_is_started_again(
        fault: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reliability: Any) -> None:
    path = tmp_path / "history.json"
    rt = runtime(EXPORT_ALL.replace(history_path=str(path), history_save_interval_s=0.05))
    saver = internals.history_saver(rt)
    history = internals.history_store(rt)
    faults = Faults(3) if fault == "raising" else Faults(1, Fatal)
    stats = ar.telemetry.stats()
    monkeypatch.setattr(history, "change_count", faults.wrap(history.change_count))
    try:
        first = saver._thread
        assert wait_until(lambda: not faults.left)
        saves = saver.saves
        # timed calls: the history changes, and a look about once a second restarts a
        # saver that ended
        deadline = time.monotonic() + 10.0
        while saver.saves == saves and time.monotonic() < deadline:
            rt.run("scale", 8)
            time.sleep(0.005)
        assert saver.saves > saves, "no save after the faults"
        after = ar.telemetry.stats()
        assert saver._thread.is_alive()
        assert delta(after.thread_faults, stats.thread_faults, "history") == faults.raised
        restarted = delta(after.threads_restarted, stats.threads_restarted, "history")
        assert restarted == (1 if fault == "ending" else 0)
        assert (saver._thread is first) == (fault == "raising")
        assert json.loads(path.read_text())  # a whole file
    finally:
        saver.stop()
    reliability.record(load=f"history saver, history read {fault} ({faults.raised} faults)",
                       faults_counted=faults.raised, spans_lost=0,
                       threads_restarted=restarted, thread_alive=True)


# ---------------------------------------------------------------------------- thread watch


def test_a_raising_thread_pool_read_is_counted_and_the_calls_go_on(
        monkeypatch: pytest.MonkeyPatch, reliability: Any) -> None:
    rt = runtime()
    watch = internals.thread_watch(rt)
    faults = Faults(2)
    monkeypatch.setattr(watch, "_read", faults.wrap(watch._read))
    stats = ar.telemetry.stats()
    deadline = time.monotonic() + 10.0
    calls = 0
    while faults.left and time.monotonic() < deadline:  # (a look about once a second)
        assert rt.run("scale", 8)[1] == 8
        calls += 1
        time.sleep(0.002)
    after = ar.telemetry.stats()
    assert faults.raised == 2
    assert delta(after.thread_faults, stats.thread_faults, "thread_watch") == 2
    assert sum(rt.selection_counts().values()) == calls
    reliability.record(load=f"thread-pool watch raising twice, {calls} calls",
                       faults_counted=2, spans_lost=0, threads_restarted=0,
                       thread_alive=True)


# ---------------------------------------------------------------------------- half imports

# A stand-in "torch" whose import blocks until the test lets it finish: while it blocks,
# sys.modules holds it half made (no ``distributed`` yet), as a real torch's seconds-long
# import does.
FAKE_TORCH = '''
import os, time
gate = os.environ["FAKE_TORCH_GATE"]
open(gate + ".started", "w").close()
while not os.path.exists(gate):
    time.sleep(0.01)
from . import distributed
'''
FAKE_DISTRIBUTED = '''
def is_available():
    return True
def is_initialized():
    return False
'''
PROGRAM = textwrap.dedent('''
    import json, os, sys, threading, time
    import adaptive_runtime as ar
    from adaptive_runtime import Backend
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    died = []
    threading.excepthook = lambda args: died.append(repr(args.exc_value))
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(sampling_threshold_us=0.0, max_measure_period=1,
                                             spans_per_sec=float("inf")),
                            builtin_ops=False)
    op = rt.register("scale", size=lambda n: n, kind="vector")
    op.add_implementation(Backend.SIMD, lambda n: n)
    op.add_implementation(Backend.SCALAR, lambda n: n)
    ar.telemetry.instrument(rt, tracer_provider=provider)
    importer = threading.Thread(target=lambda: __import__("torch"))
    importer.start()
    gate = os.environ["FAKE_TORCH_GATE"]
    while not os.path.exists(gate + ".started"):
        time.sleep(0.01)
    for _ in range(200):  # the span worker drains while torch is half imported
        rt.run("scale", 8)
        rt.flush_telemetry(5.0)
    half = "torch" in sys.modules and not hasattr(sys.modules["torch"], "distributed")
    open(gate, "w").close()
    importer.join(10)
    for _ in range(50):
        rt.run("scale", 8)
    rt.flush_telemetry(5.0)
    stats = ar.telemetry.stats()
    print(json.dumps({"half_imported_meanwhile": half, "died": died,
                      "spans": len(exporter.get_finished_spans()),
                      "faults": stats.thread_faults, "lost": stats.dropped["error"],
                      "torch_done": hasattr(sys.modules.get("torch"), "distributed")}))
''')


def test_span_worker_drains_while_another_thread_imports_torch_slowly(
        tmp_path: Path, reliability: Any) -> None:
    package = tmp_path / "fake" / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(FAKE_TORCH)
    (package / "distributed.py").write_text(FAKE_DISTRIBUTED)
    env = {"PYTHONPATH": f"{tmp_path / 'fake'}:{Path(__file__).resolve().parents[2]}",
           "FAKE_TORCH_GATE": str(tmp_path / "gate"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["half_imported_meanwhile"], "the calls did not overlap the import"
    assert seen["died"] == [], "a thread died"
    assert seen["spans"] == 2 * 250  # every call's select and execute spans
    assert sum(seen["faults"].values()) == 0 and seen["lost"] == 0
    assert seen["torch_done"]
    reliability.record(load="torch imported slowly on one thread, 250 traced calls on "
                            "another", faults_counted=0, spans_lost=0, threads_restarted=0,
                       thread_alive=True)
