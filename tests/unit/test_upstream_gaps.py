"""The upstream gaps the SDK side works around, shown on the installed packages.

Each case runs a real upstream component (the OpenTelemetry SDK, its exporters,
``prometheus_client``) and asserts that it still lacks what our module adds. A case that fails
means upstream has closed the gap: its message names the issue, our module and what to remove.
(``app_providers``' processor order is watched by ``test_flush_first.py``'s last two cases.)
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from prometheus_client.core import REGISTRY
from prometheus_client.openmetrics.exposition import generate_latest

EXPORT_S = 0.3  # how long the slow exporter takes per batch


class _SlowExporter(SpanExporter):
    """An exporter that takes ``EXPORT_S`` per batch (as one to a slow collector does) and
    notes the thread each export ran on."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.threads.append(threading.current_thread())
        time.sleep(EXPORT_S)
        return SpanExportResult.SUCCESS


def test_the_sdks_batch_flush_ignores_its_timeout_and_exports_on_the_callers_thread() -> None:
    """adaptive_runtime_sdk/export.py: ``BoundedSpanProcessor`` flushes within its timeout,
    exporting on its own worker only. The SDK's ``BatchSpanProcessor.force_flush`` exports on
    the thread that calls it, for as long as the exporter takes."""
    exporter = _SlowExporter()
    processor = BatchSpanProcessor(exporter, schedule_delay_millis=60_000)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    with provider.get_tracer("upstream-gaps").start_as_current_span("one"):
        pass
    try:
        start = time.monotonic()
        processor.force_flush(timeout_millis=10)
        took_s = time.monotonic() - start
        on_caller = exporter.threads == [threading.current_thread()]
    finally:
        provider.shutdown()
    assert on_caller and took_s >= EXPORT_S * 0.9, (
        f"BatchSpanProcessor.force_flush(timeout_millis=10) took {took_s:.3f} s, exporting on "
        f"{'the caller' if on_caller else 'its worker'}: upstream has fixed "
        "open-telemetry/opentelemetry-python#4568. Check whether the SDK's processor now also "
        "bounds shutdown and accounts for dropped spans, then remove BoundedSpanProcessor "
        "(adaptive_runtime_sdk/export.py) in favour of it.")


def test_the_prometheus_exporter_still_drops_histogram_exemplars() -> None:
    """adaptive_runtime_sdk/prometheus.py: ``exemplar_reader`` writes the histograms' exemplars into
    the OpenMetrics exposition. The SDK records them; the exporter's reader leaves them out."""
    reader, recorded = PrometheusMetricReader(), InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader, recorded])
    name = "adaptive_upstream_gap"
    sampled = SpanContext(trace_id=0x1234, span_id=0x5678, is_remote=False,
                          trace_flags=TraceFlags(TraceFlags.SAMPLED))
    try:
        histogram = provider.get_meter("upstream-gaps").create_histogram(name, unit="s")
        with trace.use_span(NonRecordingSpan(sampled)):
            histogram.record(0.002)
        text = generate_latest(REGISTRY).decode()
        data = recorded.get_metrics_data()
    finally:
        provider.shutdown()
    assert data is not None
    points = [p for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics
              if m.name == name for p in m.data.data_points]
    assert [e.span_id for p in points for e in p.exemplars] == [0x5678]  # (the SDK has it)
    buckets = [line for line in text.splitlines()
               if line.startswith(name) and "_bucket{" in line]
    assert buckets, f"no {name} buckets in the exposition:\n{text}"
    with_exemplar = [line for line in buckets if " # {" in line]
    assert not with_exemplar, (
        "opentelemetry-exporter-prometheus now writes histogram exemplars itself "
        f"({with_exemplar[0]!r}): upstream has fixed open-telemetry/opentelemetry-python#2407. "
        "Remove exemplar_reader's collector wrapper (adaptive_runtime_sdk/prometheus.py) and use "
        "the exporter's PrometheusMetricReader as it is.")


def test_no_installed_otlp_json_file_exporter_bounds_its_file() -> None:
    """adaptive_runtime_sdk/otlp_json_file.py: the embedded default writes OTLP/JSON Lines files
    rotated at a size, whole lines under a lock shared with forked children. Upstream's
    ``opentelemetry-exporter-otlp-json-file`` (0.66b1, not a dependency here) appends to one
    stream with a thread lock: a path, a stream, a logger, and no size bound."""
    try:
        from opentelemetry.exporter.otlp.json.file import (  # type: ignore[import-not-found]
            FileSpanExporter,
        )
    except ImportError:  # the gap itself: no OTLP/JSON file exporter installed
        return
    params = set(inspect.signature(FileSpanExporter).parameters)
    assert params <= {"path", "stream", "logger"}, (
        f"opentelemetry-exporter-otlp-json-file's FileSpanExporter now takes {sorted(params)}: "
        "if it bounds its file (rotation) and keeps lines whole across forked processes, "
        "replace OtlpJsonFileSpanExporter / OtlpJsonFileMetricExporter and json_lines "
        "(adaptive_runtime_sdk/otlp_json_file.py, json_lines.py) with it "
        "(open-telemetry/opentelemetry-python#3515).")


def test_no_otlp_json_encoding_is_installed() -> None:
    """adaptive_runtime_sdk/otlp_json.py: ``to_otlp_json`` encodes export requests as OTLP/JSON (hex
    ids, camelCase keys, integer enums) over protobuf's JSON mapping, because no upstream
    package installed here does."""
    import importlib.util

    found = importlib.util.find_spec("opentelemetry.exporter.otlp.json") is not None and \
        importlib.util.find_spec("opentelemetry.exporter.otlp.json.common") is not None
    assert not found, (
        "opentelemetry-exporter-otlp-json-common is installed: upstream has an OTLP/JSON "
        "encoding (open-telemetry/opentelemetry-python#3283). Replace to_otlp_json "
        "(adaptive_runtime_sdk/otlp_json.py) with it once its output matches the collector's.")
