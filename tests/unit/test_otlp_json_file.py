"""The embedded-default exporters write real SDK telemetry as OTLP/JSON Lines.

Everything here runs through the real OpenTelemetry SDK (locally created providers, shut down
after each test) so the files are exactly what a run would produce.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    MetricExportResult,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.trace import SpanKind

from adaptive_runtime.offline.report.otlp_files import (
    decode_requests,
    from_otlp_json,
    read_requests,
    trace_files,
)
from adaptive_runtime_sdk.otlp_json import to_otlp_json
from adaptive_runtime_sdk.otlp_json_file import (
    DEFAULT_MAX_BYTES,
    OtlpJsonFileMetricExporter,
    OtlpJsonFileSpanExporter,
)

RESOURCE = Resource.create({"service.name": "adaptive-runtime-test"})
LOGGER_NAME = "adaptive_runtime_sdk.json_lines"  # (the file writer logs failures)
_T = TypeVar("_T")


class _Recorder(OtlpJsonFileSpanExporter):
    """The file exporter, also keeping the exported span batches for comparison."""

    def __init__(self, path: Path, **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        self.batches: list[list[ReadableSpan]] = []

    def export(self, spans):  # type: ignore[no-untyped-def]
        self.batches.append(list(spans))
        return super().export(spans)


@pytest.fixture
def later() -> Iterator[Callable[[_T], _T]]:
    """Register exporters/providers to shut down at teardown, even when an assertion fails.

    (An exporter left open would leak its file handle, and ``filterwarnings = error`` turns the
    ResourceWarning into a confusing error in some later test.)
    """
    owned: list[Any] = []

    def register(thing: _T) -> _T:
        owned.append(thing)
        return thing

    yield register
    for thing in reversed(owned):
        thing.shutdown()  # idempotent for exporters and TracerProvider


@pytest.fixture
def traced(tmp_path: Path) -> Iterator[tuple[TracerProvider, _Recorder]]:
    exporter = _Recorder(tmp_path / "otel" / "traces.jsonl")
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def _make_spans(provider: TracerProvider) -> tuple[Any, Any]:
    tracer = provider.get_tracer("adaptive_runtime.test", "0.1.0")
    # The second span starts while the first is current, so it is its child.
    with tracer.start_as_current_span(
        "adaptive.select add", attributes={"adaptive.operation": "add", "adaptive.input_size": 4096}
    ) as parent, tracer.start_as_current_span(
        "adaptive.execute add",
        kind=SpanKind.CLIENT,
        attributes={"adaptive.backend": "simd", "adaptive.duration_us": 12.5},
    ) as child:
        child.add_event("fallback", {"error.type": "RuntimeError"})
    return parent, child


def _spans_of(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        span
        for resource_spans in request["resourceSpans"]
        for scope_spans in resource_spans["scopeSpans"]
        for span in scope_spans["spans"]
    ]


# --------------------------------------------------------------------------- spans


def test_spans_land_one_line_per_export_with_hex_ids(traced) -> None:
    provider, exporter = traced
    parent, child = _make_spans(provider)

    lines = exporter.path.read_text(encoding="utf-8").splitlines()
    # SimpleSpanProcessor exports each span as it ends: child first, then parent.
    assert len(lines) == 2 == exporter.lines_written
    assert all(line == json.dumps(json.loads(line), separators=(",", ":"), ensure_ascii=False)
               for line in lines), "each line is one compact JSON object"
    child_json, parent_json = (_spans_of(json.loads(line))[0] for line in lines)

    trace_hex = format(parent.get_span_context().trace_id, "032x")
    assert child_json["traceId"] == parent_json["traceId"] == trace_hex
    assert parent_json["spanId"] == format(parent.get_span_context().span_id, "016x")
    assert child_json["spanId"] == format(child.get_span_context().span_id, "016x")
    assert child_json["parentSpanId"] == parent_json["spanId"]
    assert "parentSpanId" not in parent_json, "empty fields are omitted, like the collector does"

    # Integer enums, lowerCamelCase keys, 64-bit ints as decimal strings.
    assert child_json["kind"] == SpanKind.CLIENT.value + 1 == 3  # OTLP: SPAN_KIND_CLIENT = 3
    assert parent_json["kind"] == 1  # SPAN_KIND_INTERNAL
    assert int(child_json["startTimeUnixNano"]) == child.start_time
    assert int(child_json["endTimeUnixNano"]) == child.end_time
    assert child_json["events"][0]["name"] == "fallback"
    attrs = {a["key"]: a["value"] for a in parent_json["attributes"]}
    assert attrs["adaptive.input_size"] == {"intValue": "4096"}
    assert attrs["adaptive.operation"] == {"stringValue": "add"}
    child_attrs = {a["key"]: a["value"] for a in child_json["attributes"]}
    assert child_attrs["adaptive.duration_us"] == {"doubleValue": 12.5}

    request = json.loads(lines[0])
    assert set(request) == {"resourceSpans"}
    resource_spans = request["resourceSpans"][0]
    assert set(resource_spans) >= {"resource", "scopeSpans"}
    assert resource_spans["scopeSpans"][0]["scope"] == {
        "name": "adaptive_runtime.test", "version": "0.1.0"
    }
    assert "resource_spans" not in lines[0] and "start_time_unix_nano" not in lines[0]


def test_ids_are_hex_not_base64_everywhere(traced) -> None:
    """Span links carry ids too; only id fields are hex, other bytes stay base64."""
    provider, exporter = traced
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("a") as first:
        pass
    with tracer.start_as_current_span("b") as second:
        second.add_link(first.get_span_context())
        second.set_attribute("blob", b"\x00\xff")  # type: ignore[arg-type]

    linked = _spans_of(read_requests(exporter.path)[-1])[0]
    link = linked["links"][0]
    assert link["traceId"] == format(first.get_span_context().trace_id, "032x")
    assert link["spanId"] == format(first.get_span_context().span_id, "016x")
    blob = next(a["value"] for a in linked.get("attributes", []) if a["key"] == "blob")
    assert blob == {"bytesValue": base64.b64encode(b"\x00\xff").decode()}


def test_round_trip_equals_the_official_encoder_output(traced) -> None:
    provider, exporter = traced
    _make_spans(provider)

    decoded = decode_requests(exporter.path, ExportTraceServiceRequest)
    expected = [encode_spans(batch) for batch in exporter.batches]
    assert decoded == expected
    assert all(isinstance(request, ExportTraceServiceRequest) for request in decoded)


def test_plain_protobuf_json_would_have_been_wrong(traced) -> None:
    """Guards the one real difference from json_format: the id encoding."""
    provider, exporter = traced
    _make_spans(provider)
    request = exporter.batches[0]
    plain = json_format.MessageToDict(encode_spans(request), use_integers_for_enums=True)
    ours = to_otlp_json(encode_spans(request))
    assert _spans_of(plain)[0]["traceId"] != _spans_of(ours)[0]["traceId"]
    assert len(_spans_of(ours)[0]["traceId"]) == 32
    # Receivers must accept any hex case.
    trace_hex = _spans_of(ours)[0]["traceId"]
    upper = json.loads(json.dumps(ours).replace(trace_hex, trace_hex.upper()))
    assert from_otlp_json(upper, ExportTraceServiceRequest()) == encode_spans(request)


# --------------------------------------------------------------------------- metrics


def test_metrics_land_as_resource_metrics(tmp_path: Path, later) -> None:
    exporter = later(OtlpJsonFileMetricExporter(tmp_path / "metrics.jsonl"))
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    provider = MeterProvider(resource=RESOURCE, metric_readers=[reader])
    try:
        meter = provider.get_meter("adaptive_runtime.test")
        selections = meter.create_counter("adaptive.selection")
        duration = meter.create_histogram("adaptive.op.duration", unit="s")
        selections.add(3, {"operation": "add", "backend": "simd", "decision": "exploit"})
        duration.record(0.000012, {"operation": "add"})
        duration.record(0.5, {"operation": "add"})
        assert provider.force_flush()
    finally:
        provider.shutdown()

    requests = read_requests(exporter.path)
    assert len(requests) >= 1
    assert set(requests[0]) == {"resourceMetrics"}
    metrics = {
        metric["name"]: metric
        for resource_metrics in requests[0]["resourceMetrics"]
        for scope_metrics in resource_metrics["scopeMetrics"]
        for metric in scope_metrics["metrics"]
    }
    counter = metrics["adaptive.selection"]["sum"]
    assert counter["isMonotonic"] is True
    assert counter["aggregationTemporality"] == 2  # AGGREGATION_TEMPORALITY_CUMULATIVE
    assert counter["dataPoints"][0]["asInt"] == "3"
    histogram = metrics["adaptive.op.duration"]["histogram"]
    assert metrics["adaptive.op.duration"]["unit"] == "s"
    assert histogram["aggregationTemporality"] == 2
    point = histogram["dataPoints"][0]
    assert point["count"] == "2"
    assert point["sum"] == pytest.approx(0.500012)
    assert "startTimeUnixNano" in point and "timeUnixNano" in point

    decoded = decode_requests(exporter.path, ExportMetricsServiceRequest)
    assert decoded[0].resource_metrics[0].scope_metrics[0].metrics
    assert exporter.failed_exports == 0


def test_metric_exporter_prefers_cumulative_everywhere(tmp_path: Path, later) -> None:
    exporter = later(OtlpJsonFileMetricExporter(tmp_path / "m.jsonl"))
    assert exporter._preferred_temporality
    assert set(exporter._preferred_temporality.values()) == {AggregationTemporality.CUMULATIVE}
    assert exporter._preferred_aggregation is None
    assert exporter.max_bytes == DEFAULT_MAX_BYTES
    exporter.shutdown()


# --------------------------------------------------------------------------- failures


def test_unwritable_path_fails_quietly_and_logs_once(
    tmp_path: Path, later, caplog: pytest.LogCaptureFixture
) -> None:
    target = tmp_path / "traces.jsonl"
    target.mkdir()  # a directory where the file should be: open() raises IsADirectoryError
    exporter = later(OtlpJsonFileSpanExporter(target))
    provider = later(TracerProvider(resource=RESOURCE))
    tracer = provider.get_tracer("t")
    spans = []
    for name in ("a", "b", "c"):
        with tracer.start_as_current_span(name) as span:
            pass
        spans.append(span)

    with caplog.at_level(logging.WARNING, logger=LOGGER_NAME):
        results = [exporter.export([span]) for span in spans]
    assert results == [SpanExportResult.FAILURE] * 3
    assert exporter.failed_exports == 3
    assert exporter.lines_written == 0
    ours = [r for r in caplog.records if r.name == LOGGER_NAME]
    assert len(ours) == 1, "logged once, not once per export"
    assert str(target) in ours[0].getMessage()


def test_parent_is_a_file_fails_quietly(
    tmp_path: Path, later, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    exporter = later(OtlpJsonFileMetricExporter(blocker / "metrics.jsonl"))
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    provider = MeterProvider(resource=RESOURCE, metric_readers=[reader])
    try:
        provider.get_meter("t").create_counter("c").add(1)
        with caplog.at_level(logging.WARNING, logger=LOGGER_NAME):
            provider.force_flush()
            provider.get_meter("t").create_counter("c").add(1)
            provider.force_flush()
    finally:
        provider.shutdown()
    assert exporter.failed_exports >= 2
    assert len([r for r in caplog.records if r.name == LOGGER_NAME]) == 1


def test_recovers_once_the_path_becomes_writable(tmp_path: Path, later) -> None:
    target = tmp_path / "traces.jsonl"
    target.mkdir()
    exporter = later(OtlpJsonFileSpanExporter(target))
    provider = later(TracerProvider(resource=RESOURCE))
    with provider.get_tracer("t").start_as_current_span("a") as span:
        pass
    assert exporter.export([span]) is SpanExportResult.FAILURE
    target.rmdir()
    assert exporter.export([span]) is SpanExportResult.SUCCESS
    assert len(read_requests(target)) == 1
    exporter.shutdown()
    provider.shutdown()


def test_export_after_shutdown_fails_without_writing(traced) -> None:
    provider, exporter = traced
    _make_spans(provider)
    size = exporter.path.stat().st_size
    exporter.shutdown()
    span = exporter.batches[0][0]
    assert exporter.export([span]) is SpanExportResult.FAILURE
    assert exporter.export([]) is SpanExportResult.FAILURE
    assert exporter.path.stat().st_size == size
    assert exporter.failed_exports == 0, "refusals after shutdown are not I/O failures"

    metrics = OtlpJsonFileMetricExporter(exporter.path.with_name("m.jsonl"))
    metrics.shutdown()
    assert metrics.export(None) is MetricExportResult.FAILURE  # type: ignore[arg-type]
    assert not metrics.path.exists()


def test_encoding_errors_are_contained(
    tmp_path: Path, later, caplog: pytest.LogCaptureFixture
) -> None:
    exporter = later(OtlpJsonFileSpanExporter(tmp_path / "t.jsonl"))
    with caplog.at_level(logging.WARNING, logger=LOGGER_NAME):
        result = exporter.export([object()])  # type: ignore[list-item]
    assert result is SpanExportResult.FAILURE
    assert exporter.failed_exports == 1
    assert len([r for r in caplog.records if r.name == LOGGER_NAME]) == 1


# --------------------------------------------------------------------------- rotation


def test_rotation_keeps_one_backup(tmp_path: Path, later) -> None:
    path = tmp_path / "traces.jsonl"
    exporter = later(OtlpJsonFileSpanExporter(path, max_bytes=2_000))
    provider = later(TracerProvider(resource=RESOURCE))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    names = [f"span-{i}" for i in range(30)]
    for name in names:
        with tracer.start_as_current_span(name):
            pass
    provider.shutdown()

    assert exporter.rotations >= 2
    assert exporter.backup_path == tmp_path / "traces.jsonl.1"
    assert not (tmp_path / "traces.jsonl.2").exists()
    for file in (path, exporter.backup_path):
        size = file.stat().st_size
        assert 0 < size <= 2_000
        assert file.read_bytes().endswith(b"\n")
    current = [_spans_of(r)[0]["name"] for r in read_requests(path)]
    both = [_spans_of(r)[0]["name"] for f in trace_files(tmp_path) for r in read_requests(f)]
    # The newest spans survive, in order, and the backup holds the ones right before them.
    assert both == names[-len(both):]
    assert current == names[-len(current):]
    assert len(both) > len(current)


def test_a_line_larger_than_max_bytes_is_written_whole(tmp_path: Path, later) -> None:
    exporter = later(OtlpJsonFileSpanExporter(tmp_path / "t.jsonl", max_bytes=10))
    provider = later(TracerProvider(resource=RESOURCE))
    with provider.get_tracer("t").start_as_current_span("a") as span:
        pass
    assert exporter.export([span]) is SpanExportResult.SUCCESS
    assert exporter.export([span]) is SpanExportResult.SUCCESS
    assert len(read_requests(exporter.path)) == 1
    assert len(read_requests(exporter.backup_path)) == 1
    with pytest.raises(ValueError):
        OtlpJsonFileSpanExporter(tmp_path / "x", max_bytes=0)


# --------------------------------------------------------------------------- concurrency, reader


def test_concurrent_exports_write_only_whole_lines(tmp_path: Path, later) -> None:
    exporter = later(OtlpJsonFileSpanExporter(tmp_path / "t.jsonl"))
    provider = later(TracerProvider(resource=RESOURCE))
    tracer = provider.get_tracer("t")
    threads_n, per_thread = 8, 25
    spans = []
    for i in range(threads_n):
        with tracer.start_as_current_span(f"s{i}", attributes={"pad": "x" * 5_000}) as span:
            pass
        spans.append(span)
    start = threading.Barrier(threads_n)
    results: list[SpanExportResult] = []

    def worker(span: ReadableSpan) -> None:
        start.wait()
        for _ in range(per_thread):
            results.append(exporter.export([span]))

    threads = [threading.Thread(target=worker, args=(span,)) for span in spans]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    exporter.shutdown()
    provider.shutdown()

    assert results.count(SpanExportResult.SUCCESS) == threads_n * per_thread
    raw_lines = exporter.path.read_bytes().split(b"\n")
    assert raw_lines[-1] == b""
    parsed = [json.loads(line) for line in raw_lines[:-1]]  # every line parses on its own
    assert len(parsed) == threads_n * per_thread
    names = [_spans_of(request)[0]["name"] for request in parsed]
    assert sorted(set(names)) == sorted(f"s{i}" for i in range(threads_n))


def test_reader_skips_torn_tail_but_rejects_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"resourceSpans":[]}\n\n{"resourceSp')
    assert read_requests(path) == [{"resourceSpans": []}]
    path.write_text('{"resourceSpans":[]}\nnot json\n{}\n')
    with pytest.raises(ValueError, match=":2:"):
        read_requests(path)


def test_writer_terminates_a_torn_line_before_appending(tmp_path: Path, later) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"resourceSp')  # left by a crashed writer
    exporter = later(OtlpJsonFileSpanExporter(path))
    provider = later(TracerProvider(resource=RESOURCE))
    with provider.get_tracer("t").start_as_current_span("a") as span:
        pass
    assert exporter.export([span]) is SpanExportResult.SUCCESS
    exporter.shutdown()
    provider.shutdown()
    lines = path.read_text().splitlines()
    assert lines[0] == '{"resourceSp'
    assert _spans_of(json.loads(lines[1]))[0]["name"] == "a"
