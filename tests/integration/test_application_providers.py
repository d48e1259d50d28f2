"""The application's own OpenTelemetry providers, in every order a program sets them up.

OpenTelemetry asks an instrumentation library to use whatever providers the application has
set, whenever it sets them. Each case is a fresh interpreter (the API sets a global provider
once per process) running the default path a user takes — ``import adaptive_runtime``,
``ar.ops`` on numpy arrays, the default runtime — with the SDK's in-memory span exporter and
metric reader as the application's own, set before the import, after the first call, tracer
only, meter only, or both; then the application's ``force_flush()``/``shutdown()`` of its own
provider, and ``ar.telemetry.shutdown()``, must deliver the runtime's queued spans.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import child_run
import pytest

TIMEOUT_S = 90

PRELUDE = textwrap.dedent('''
    import json, time
    import numpy as np
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    reader = InMemoryMetricReader()

    def set_tracer_provider():
        # (a batch processor that would wait 30 s: only a flush delivers in time)
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=30_000))
        trace.set_tracer_provider(provider)
        return provider

    def set_meter_provider():
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))

    def metric_names():
        data = reader.get_metrics_data()
        if data is None:
            return set()
        return {m.name for rm in data.resource_metrics for sm in rm.scope_metrics
                for m in sm.metrics}

    def our_spans():
        return [s for s in exporter.get_finished_spans() if s.name.startswith("adaptive.")]

    X = np.linspace(-1.0, 1.0, 4096)

    def calls_until(done, limit_s=15.0):
        """relu calls (under the hot-path rate) until done(), or for limit_s at most."""
        import adaptive_runtime as ar
        start = time.monotonic()
        while not done() and time.monotonic() - start < limit_s:
            ar.ops.relu(X)
            time.sleep(0.0005)

    LAST = 3001  # the size of the last call: a new key of another operation, always exported

    def last_call():
        import adaptive_runtime as ar
        ar.ops.add(np.ones(LAST), np.ones(LAST))

    def last_call_spans():
        return [s for s in our_spans() if s.attributes.get("adaptive.operation") == "add"]

    def result(**values):
        print("RESULT " + json.dumps(values), flush=True)
''')


class Ran(child_run.Ran):
    def ok(self) -> Ran:
        assert self.returncode == 0, self
        assert "Traceback" not in self.stderr, self
        assert "Exception in thread" not in self.stderr, self
        assert self.result, self
        return self


def run_program(body: str, cwd: Path) -> Ran:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OTEL_", "ADAPTIVE_RUNTIME_"))}
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=TIMEOUT_S,
                          check=False)
    return Ran(proc)


@pytest.mark.parametrize("which", ["tracer", "meter", "both"])
def test_providers_set_before_the_import_are_used(tmp_path: Path, which: str) -> None:
    ran = run_program(f'''
        which = {which!r}
        tp = set_tracer_provider() if which in ("tracer", "both") else None
        if which in ("meter", "both"):
            set_meter_provider()
        import adaptive_runtime as ar
        calls_until(lambda: False, limit_s=0.3)
        last_call()
        if tp is not None:
            tp.force_flush()
        result(spans=len(last_call_spans()), metrics=sorted(metric_names()),
               recording_spans=ar.get_runtime().stats().recording_spans)
    ''', tmp_path).ok()
    spans_expected = which in ("tracer", "both")
    assert ran.result["recording_spans"] is spans_expected
    assert (ran.result["spans"] > 0) is spans_expected, ran
    assert ("adaptive.selection" in ran.result["metrics"]) is (which != "tracer"), ran


@pytest.mark.parametrize("which", ["tracer", "meter", "both"])
def test_providers_set_after_the_first_call_are_picked_up(tmp_path: Path, which: str) -> None:
    """An import-time warm-up, then OpenTelemetry set up in ``main()``: the runtime made
    before the providers exports into them from a timed call about a second later."""
    ran = run_program(f'''
        which = {which!r}
        import adaptive_runtime as ar
        ar.ops.relu(X)  # (the first call: the default runtime is made, nothing to export to)
        rt = ar.get_runtime()
        before = rt.stats().recording_spans
        tp = set_tracer_provider() if which in ("tracer", "both") else None
        if which in ("meter", "both"):
            set_meter_provider()
        if tp is not None:
            calls_until(lambda: rt.stats().recording_spans)
        else:
            calls_until(lambda: "adaptive.selection" in metric_names())
        last_call()
        if tp is not None:
            tp.force_flush()
        result(before=before, spans=len(last_call_spans()),
               metrics=sorted(metric_names()), recording_spans=rt.stats().recording_spans)
    ''', tmp_path).ok()
    spans_expected = which in ("tracer", "both")
    assert ran.result["before"] is False
    assert ran.result["recording_spans"] is spans_expected
    assert (ran.result["spans"] > 0) is spans_expected, ran
    assert ("adaptive.selection" in ran.result["metrics"]) is (which != "tracer"), ran
    if which != "tracer":
        # every instrument with a value, the learned-state gauges included
        assert {"adaptive.committed", "adaptive.learned.latency",
                "adaptive.hot_path.active"} <= set(ran.result["metrics"]), ran


@pytest.mark.parametrize("flush", ["force_flush", "shutdown", "ar.telemetry.shutdown"])
def test_the_applications_flush_delivers_the_runtimes_queued_spans(tmp_path: Path,
                                                                    flush: str) -> None:
    """The runtime makes its spans on a worker thread, batch by batch: right after a call
    its spans are still records. The application's own flush or shutdown of its provider
    (or ``ar.telemetry.shutdown()``) delivers them, the training step's span included."""
    ran = run_program(f'''
        tp = set_tracer_provider()
        import adaptive_runtime as ar
        calls_until(lambda: False, limit_s=0.3)
        with ar.train_step(7):
            last_call()
        flush = {flush!r}
        if flush == "force_flush":
            tp.force_flush()
        elif flush == "shutdown":
            tp.shutdown()
        else:
            ar.telemetry.shutdown()
        steps = [s for s in exporter.get_finished_spans() if s.name == "train_step"]
        result(spans=len(last_call_spans()), steps=len(steps))
    ''', tmp_path).ok()
    assert ran.result == {"spans": 2, "steps": 1}, ran


def test_a_runtime_switched_off_stays_off_when_the_application_sets_a_provider(
        tmp_path: Path) -> None:
    ran = run_program('''
        import adaptive_runtime as ar
        ar.ops.relu(X)
        rt = ar.get_runtime()
        ar.telemetry.uninstrument(rt)
        set_tracer_provider()
        calls_until(lambda: False, limit_s=2.5)
        result(recording_spans=rt.stats().recording_spans)
    ''', tmp_path).ok()
    assert ran.result == {"recording_spans": False}
