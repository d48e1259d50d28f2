"""The OTLP receiver fixture, proven against the real OpenTelemetry SDK exporters.

Every exporter here is the SDK's own (gRPC and HTTP/protobuf), talking over real sockets to the
receiver on loopback. Providers are local (never the global one) and shut down in the test.

Retry timing: on a retryable failure both SDK exporters back off 1 s, 2 s, 4 s … (±20 % jitter),
up to 6 attempts, but never past their ``timeout`` (the whole export's deadline): a backoff that
would end after the deadline ends the export with FAILURE instead. With ``timeout=2`` a failing
export therefore returns after about one backoff (~1 s). A server's throttling hint replaces the
backoff (gRPC ``RetryInfo`` trailer, HTTP ``Retry-After``), so ``retry_after_s=0.05`` makes all
6 attempts happen within a fraction of a second.
"""

from __future__ import annotations

import gzip
import json
import logging
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator

import grpc
import pytest
from google.rpc import status_pb2
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
    OTLPMetricExporter as GrpcMetricExporter,
)
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http import Compression as HttpCompression
from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
    OTLPMetricExporter as HttpMetricExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode
from otlp_receiver import HTTP_STATUS_FOR_GRPC_CODE, OtlpReceiver, TlsFiles
from tls_certs import make_ca

TRANSPORTS = ("grpc", "http")
RESOURCE = Resource.create({"service.name": "otlp-receiver-test", "deployment.environment": "ci"})
EXPORT_TIMEOUT_S = 2  # bounds every failing export: see the module docstring
FAST_FAIL_BUDGET_S = 5.0


def span_exporter(transport: str, receiver: OtlpReceiver, **kwargs) -> SpanExporter:
    kwargs.setdefault("timeout", EXPORT_TIMEOUT_S)
    if transport == "grpc":
        return GrpcSpanExporter(endpoint=receiver.grpc_endpoint, insecure=True, **kwargs)
    return HttpSpanExporter(endpoint=receiver.http_endpoint + "/v1/traces", **kwargs)


def metric_exporter(transport: str, receiver: OtlpReceiver, **kwargs):
    kwargs.setdefault("timeout", EXPORT_TIMEOUT_S)
    if transport == "grpc":
        return GrpcMetricExporter(endpoint=receiver.grpc_endpoint, insecure=True, **kwargs)
    return HttpMetricExporter(endpoint=receiver.http_endpoint + "/v1/metrics", **kwargs)


class Pipeline:
    """A local TracerProvider exporting to the receiver and, in parallel, to memory, so a test
    can replay the very same finished spans through the OTLP exporter by hand."""

    def __init__(self, exporter: SpanExporter, *, batch: bool = False) -> None:
        self.exporter = exporter
        self.memory = InMemorySpanExporter()
        self.provider = TracerProvider(resource=RESOURCE)
        self.provider.add_span_processor(
            BatchSpanProcessor(exporter, schedule_delay_millis=60_000) if batch
            else SimpleSpanProcessor(exporter)
        )
        self.provider.add_span_processor(SimpleSpanProcessor(self.memory))
        self.tracer = self.provider.get_tracer("receiver-test-scope", "1.2.3")

    def finished(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.memory.get_finished_spans() if s.name == name]

    def shutdown(self) -> None:
        self.provider.shutdown()


@pytest.fixture
def pipelines() -> Iterator[Callable[..., Pipeline]]:
    """Factory of :class:`Pipeline`; every one is shut down at teardown — before the receiver
    (this fixture is set up after it), so nothing is exported to a stopped receiver."""
    made: list[Pipeline] = []

    def make(exporter: SpanExporter, *, batch: bool = False) -> Pipeline:
        made.append(Pipeline(exporter, batch=batch))
        return made[-1]

    yield make
    for pipeline in made:
        pipeline.shutdown()


def emit_parent_child(tracer) -> None:
    with tracer.start_as_current_span("train_step", kind=SpanKind.SERVER) as parent:
        parent.set_attribute("adaptive.operation", "matmul")
        parent.set_attribute("adaptive.input_size", 4096)
        parent.set_attribute("adaptive.confidence", 0.75)
        parent.set_attribute("adaptive.has_history", True)
        parent.set_attribute("adaptive.arms", ["gpu", "simd"])
        with tracer.start_as_current_span("adaptive.execute matmul") as child:
            child.set_attribute("adaptive.backend", "simd")
            child.add_event("adaptive.hot_path.enter", {"adaptive.suppressed": 3})
            child.set_status(Status(StatusCode.ERROR, "kernel failed"))


def assert_parent_child(receiver: OtlpReceiver) -> None:
    receiver.wait_for_spans(2)
    parent = receiver.span("train_step")
    child = receiver.span("adaptive.execute matmul")
    assert parent.is_root and parent.kind == "SERVER"
    assert child.parent_span_id == parent.span_id
    assert child.trace_id == parent.trace_id and len(parent.trace_id) == 32
    assert len(child.span_id) == 16 and child.span_id != parent.span_id
    assert dict(parent.attributes) == {
        "adaptive.operation": "matmul",
        "adaptive.input_size": 4096,
        "adaptive.confidence": 0.75,
        "adaptive.has_history": True,
        "adaptive.arms": ("gpu", "simd"),
    }
    assert dict(child.attributes) == {"adaptive.backend": "simd"}
    assert [(e.name, dict(e.attributes)) for e in child.events] == [
        ("adaptive.hot_path.enter", {"adaptive.suppressed": 3})
    ]
    assert (child.status_code, child.status_message) == ("ERROR", "kernel failed")
    assert parent.status_code == "UNSET"
    assert parent.start_time_unix_nano <= child.start_time_unix_nano
    assert child.end_time_unix_nano <= parent.end_time_unix_nano
    for span in (parent, child):
        assert span.resource_attributes["service.name"] == "otlp-receiver-test"
        assert span.resource_attributes["deployment.environment"] == "ci"
        assert span.scope_name == "receiver-test-scope"


# ---- (a), (b): traces over gRPC and HTTP ----------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_simple_processor_spans_arrive_with_names_attributes_and_parent_links(
    otlp_receiver, pipelines, transport
):
    pipeline = pipelines(span_exporter(transport, otlp_receiver))
    emit_parent_child(pipeline.tracer)

    assert_parent_child(otlp_receiver)
    # SimpleSpanProcessor: one export request per span, all on the transport asked for.
    requests = otlp_receiver.requests("traces")
    assert [(r.transport, r.encoding, r.accepted, r.items) for r in requests] == [
        (transport, "protobuf", True, 1)
    ] * 2
    assert all(r.headers["user-agent"].startswith("OTel-OTLP-Exporter-Python") for r in requests)
    assert len(otlp_receiver.trace_requests()) == 2


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_batch_processor_force_flush_sends_one_gzip_request(otlp_receiver, pipelines, transport):
    compression = grpc.Compression.Gzip if transport == "grpc" else HttpCompression.Gzip
    pipeline = pipelines(span_exporter(transport, otlp_receiver, compression=compression),
                         batch=True)
    emit_parent_child(pipeline.tracer)
    assert otlp_receiver.spans() == []  # held in the batch until flushed

    assert pipeline.provider.force_flush(timeout_millis=5_000)

    assert_parent_child(otlp_receiver)
    [request] = otlp_receiver.requests("traces")
    assert request.items == 2
    if transport == "http":  # grpc decompresses before the servicer sees the message
        assert request.compression == "gzip"


def test_custom_headers_reach_the_receiver(otlp_receiver, pipelines):
    pipeline = pipelines(span_exporter("http", otlp_receiver, headers={"x-tenant": "team-a"}))
    with pipeline.tracer.start_as_current_span("one"):
        pass
    grpc_pipeline = pipelines(span_exporter("grpc", otlp_receiver,
                                            headers=(("x-tenant", "team-b"),)))
    with grpc_pipeline.tracer.start_as_current_span("two"):
        pass

    otlp_receiver.wait_for_spans(2)
    assert [r.headers["x-tenant"] for r in otlp_receiver.requests()] == ["team-a", "team-b"]


# ---- (c): metrics over gRPC and HTTP --------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_counter_and_histogram_arrive_with_values(otlp_receiver, transport):
    # math.inf interval: no background export thread; only force_flush/shutdown export.
    reader = PeriodicExportingMetricReader(metric_exporter(transport, otlp_receiver),
                                           export_interval_millis=float("inf"))
    provider = MeterProvider(metric_readers=[reader], resource=RESOURCE)
    try:
        meter = provider.get_meter("receiver-test-meter")
        selections = meter.create_counter("adaptive.selection", unit="1")
        durations = meter.create_histogram("adaptive.op.duration", unit="s")
        hot = meter.create_gauge("adaptive.hot_path.active")
        hot.set(1, {"operation": "matmul"})
        selections.add(3, {"backend": "gpu", "decision": "exploit"})
        selections.add(4, {"backend": "gpu", "decision": "exploit"})
        selections.add(1, {"backend": "simd", "decision": "explore"})
        for seconds in (0.5, 2.0, 7.5):
            durations.record(seconds, {"operation": "matmul"})

        assert provider.force_flush(timeout_millis=5_000)
        points = otlp_receiver.wait_for_metrics(
            lambda pts: {p.metric_name for p in pts} >= {"adaptive.selection",
                                                          "adaptive.op.duration"}
        )
    finally:
        provider.shutdown()

    counts = {
        (p.attributes["backend"], p.attributes["decision"]): p.value
        for p in points if p.metric_name == "adaptive.selection"
    }
    assert counts == {("gpu", "exploit"): 7, ("simd", "explore"): 1}
    counter = next(p for p in points if p.metric_name == "adaptive.selection")
    assert (counter.kind, counter.is_monotonic, counter.temporality) == ("sum", True, "CUMULATIVE")
    assert counter.resource_attributes["service.name"] == "otlp-receiver-test"
    assert counter.scope_name == "receiver-test-meter"

    [histogram] = [p for p in points if p.metric_name == "adaptive.op.duration"]
    assert histogram.kind == "histogram" and histogram.unit == "s"
    assert dict(histogram.attributes) == {"operation": "matmul"}
    assert (histogram.count, histogram.sum, histogram.min, histogram.max) == (3, 10.0, 0.5, 7.5)
    assert sum(histogram.bucket_counts) == 3
    assert len(histogram.bucket_counts) == len(histogram.explicit_bounds) + 1
    [gauge] = [p for p in points if p.metric_name == "adaptive.hot_path.active"]
    assert (gauge.kind, gauge.value, gauge.temporality) == ("gauge", 1, None)
    assert {r.transport for r in otlp_receiver.requests("metrics")} == {transport}


# ---- (d): the collector goes away mid-run ---------------------------------------------------


def refuses_connections(endpoint: str) -> bool:
    host, port = endpoint.removeprefix("http://").split(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return False
    except ConnectionRefusedError:
        return True


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_stop_mid_run_exports_fail_quietly_and_nothing_more_arrives(
    otlp_receiver, pipelines, transport, caplog
):
    pipeline = pipelines(span_exporter(transport, otlp_receiver))
    with pipeline.tracer.start_as_current_span("before-stop"):
        pass
    otlp_receiver.wait_for_spans(1)
    seen = otlp_receiver.request_count

    otlp_receiver.stop()
    otlp_receiver.stop()  # idempotent
    assert refuses_connections(otlp_receiver.grpc_endpoint)
    assert refuses_connections(otlp_receiver.http_endpoint)

    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="opentelemetry"):
        # Through the SDK: the span processor calls the exporter; nothing reaches the caller.
        with pipeline.tracer.start_as_current_span("after-stop"):
            pass
        # By hand, to see the result the exporter returned.
        result = pipeline.exporter.export(pipeline.finished("after-stop"))
    elapsed = time.monotonic() - started

    assert result is SpanExportResult.FAILURE
    assert elapsed < 2 * FAST_FAIL_BUDGET_S, f"two failing exports took {elapsed:.1f} s"
    assert otlp_receiver.request_count == seen
    assert [s.name for s in otlp_receiver.spans()] == ["before-stop"]
    assert any(r.levelno >= logging.ERROR and "export" in r.getMessage().lower()
               for r in caplog.records), [r.getMessage() for r in caplog.records]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_restart_binds_the_same_ports_and_exports_recover(otlp_receiver, pipelines, transport):
    endpoints = (otlp_receiver.grpc_endpoint, otlp_receiver.http_endpoint)
    pipeline = pipelines(span_exporter(transport, otlp_receiver))
    with pipeline.tracer.start_as_current_span("first"):
        pass
    otlp_receiver.stop()
    otlp_receiver.start()

    assert (otlp_receiver.grpc_endpoint, otlp_receiver.http_endpoint) == endpoints
    with pipeline.tracer.start_as_current_span("second"):
        pass
    assert [s.name for s in otlp_receiver.wait_for_spans(2)] == ["first", "second"]


# ---- (e): injected failures -----------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_fail_with_unavailable_makes_exports_fail_within_the_timeout(
    otlp_receiver, pipelines, transport
):
    pipeline = pipelines(span_exporter(transport, otlp_receiver))
    with pipeline.tracer.start_as_current_span("rejected"):
        pass
    otlp_receiver.clear()
    otlp_receiver.fail_with = grpc.StatusCode.UNAVAILABLE

    started = time.monotonic()
    result = pipeline.exporter.export(pipeline.finished("rejected"))
    elapsed = time.monotonic() - started

    assert result is SpanExportResult.FAILURE
    assert elapsed < FAST_FAIL_BUDGET_S
    requests = otlp_receiver.requests()
    # One try, a ~1 s backoff, one more try; the next backoff (~2 s) would pass the deadline.
    assert 1 <= len(requests) <= 3
    assert {r.status for r in requests} == {"UNAVAILABLE"}
    assert otlp_receiver.spans() == []


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_retry_after_hint_makes_retries_fast_then_failure(otlp_receiver, pipelines, transport):
    otlp_receiver.fail_with = grpc.StatusCode.UNAVAILABLE
    otlp_receiver.retry_after_s = 0.05
    pipeline = pipelines(span_exporter(transport, otlp_receiver))
    with pipeline.tracer.start_as_current_span("rejected"):
        pass
    otlp_receiver.clear()

    started = time.monotonic()
    result = pipeline.exporter.export(pipeline.finished("rejected"))
    elapsed = time.monotonic() - started

    assert result is SpanExportResult.FAILURE
    assert elapsed < 1.5, f"retries honoured no hint: {elapsed:.2f} s"
    assert otlp_receiver.request_count == 6  # both SDK exporters make at most 6 attempts
    assert otlp_receiver.spans() == []


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_non_retryable_failure_is_tried_once(otlp_receiver, pipelines, transport):
    otlp_receiver.fail_with = grpc.StatusCode.INVALID_ARGUMENT
    pipeline = pipelines(span_exporter(transport, otlp_receiver))
    with pipeline.tracer.start_as_current_span("bad"):  # the processor's export: no raise
        pass
    assert otlp_receiver.request_count == 1

    assert pipeline.exporter.export(pipeline.finished("bad")) is SpanExportResult.FAILURE
    assert [r.status for r in otlp_receiver.requests()] == ["INVALID_ARGUMENT"] * 2
    assert otlp_receiver.spans() == []


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_fail_times_rejects_once_and_the_retry_gets_through(otlp_receiver, pipelines, transport):
    otlp_receiver.fail_with = grpc.StatusCode.UNAVAILABLE
    otlp_receiver.fail_times = 1
    otlp_receiver.retry_after_s = 0.01
    pipeline = pipelines(span_exporter(transport, otlp_receiver))
    with pipeline.tracer.start_as_current_span("retried"):
        pass

    assert [s.name for s in otlp_receiver.wait_for_spans(1)] == ["retried"]
    assert [r.status for r in otlp_receiver.requests()] == ["UNAVAILABLE", "OK"]
    assert otlp_receiver.fail_with is None and otlp_receiver.fail_times is None


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_delay_slows_answers_and_past_the_timeout_the_export_fails(
    otlp_receiver, pipelines, transport
):
    pipeline = pipelines(span_exporter(transport, otlp_receiver, timeout=1))
    otlp_receiver.delay_s = 0.3
    started = time.monotonic()
    with pipeline.tracer.start_as_current_span("slow"):
        pass
    assert time.monotonic() - started >= 0.3
    assert [s.name for s in otlp_receiver.spans()] == ["slow"]

    otlp_receiver.delay_s = 30  # far past the exporter's 1 s timeout; stop() cuts it short
    started = time.monotonic()
    result = pipeline.exporter.export(pipeline.finished("slow"))
    elapsed = time.monotonic() - started
    assert result is SpanExportResult.FAILURE
    assert elapsed < FAST_FAIL_BUDGET_S


# ---- OTLP/HTTP details: JSON, errors --------------------------------------------------------

TRACE_ID = "5b8efff798038103d269b633813fc60c"
PARENT_ID = "eee19b7ec3c1b174"
SPAN_ID = "eee19b7ec3c1b173"

# Shaped like opentelemetry-proto's examples/trace.json: hex ids, integer enums, int64 strings.
OTLP_JSON_TRACE = {
    "resourceSpans": [{
        "resource": {"attributes": [
            {"key": "service.name", "value": {"stringValue": "json-client"}}]},
        "scopeSpans": [{
            "scope": {"name": "json-scope", "version": "1.0.0"},
            "spans": [{
                "traceId": TRACE_ID,
                "spanId": SPAN_ID,
                "parentSpanId": PARENT_ID,
                "name": "I'm a server span",
                "startTimeUnixNano": "1544712660000000000",
                "endTimeUnixNano": "1544712661000000000",
                "kind": 2,
                "attributes": [
                    {"key": "my.span.attr", "value": {"stringValue": "some value"}},
                    {"key": "my.int", "value": {"intValue": "42"}},
                    {"key": "my.list", "value": {"arrayValue": {"values": [
                        {"boolValue": True}, {"doubleValue": 1.5}]}}},
                ],
                "events": [{"timeUnixNano": "1544712660500000000", "name": "ev",
                            "attributes": []}],
                "links": [{"traceId": TRACE_ID, "spanId": PARENT_ID}],
                "status": {"code": 2, "message": "boom"},
                "someFutureField": {"ignored": True},
            }],
        }],
    }]
}


def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, dict(error.headers), error.read()


@pytest.mark.parametrize("gzipped", [False, True])
def test_otlp_json_with_hex_ids_is_decoded(otlp_receiver, gzipped):
    body = json.dumps(OTLP_JSON_TRACE).encode()
    headers = {"Content-Type": "application/json"}
    if gzipped:
        body, headers["Content-Encoding"] = gzip.compress(body), "gzip"

    status, response_headers, response = post(otlp_receiver.http_endpoint + "/v1/traces", body,
                                              headers)

    assert status == 200, response
    assert response_headers["Content-Type"] == "application/json"
    assert json.loads(response) == {}
    span = otlp_receiver.span("I'm a server span")
    assert (span.trace_id, span.span_id, span.parent_span_id) == (TRACE_ID, SPAN_ID, PARENT_ID)
    assert span.kind == "SERVER" and span.status_code == "ERROR" and span.status_message == "boom"
    assert dict(span.attributes) == {"my.span.attr": "some value", "my.int": 42,
                                     "my.list": (True, 1.5)}
    assert span.duration_ns == 1_000_000_000
    assert [e.name for e in span.events] == ["ev"]
    assert span.links == ((TRACE_ID, PARENT_ID),)
    assert span.resource_attributes == {"service.name": "json-client"}
    assert span.scope_name == "json-scope"
    [request] = otlp_receiver.requests()
    assert (request.encoding, request.compression) == ("json", "gzip" if gzipped else None)


def test_protobuf_posted_by_hand_gets_a_protobuf_response(otlp_receiver):
    body = json.dumps(OTLP_JSON_TRACE).encode()
    json_status, _, _ = post(otlp_receiver.http_endpoint + "/v1/traces", body,
                             {"Content-Type": "application/json"})
    proto = otlp_receiver.trace_requests()[0].SerializeToString()

    status, headers, response = post(otlp_receiver.http_endpoint + "/v1/traces", proto,
                                     {"Content-Type": "application/x-protobuf"})

    assert (json_status, status) == (200, 200)
    assert headers["Content-Type"] == "application/x-protobuf"
    trace_service_pb2.ExportTraceServiceResponse.FromString(response)  # decodes
    first, second = otlp_receiver.spans()
    assert first == second


@pytest.mark.parametrize(
    ("path", "headers", "body", "expected_status"),
    [
        ("/v1/logs", {"Content-Type": "application/x-protobuf"}, b"", 404),
        ("/v1/traces", {"Content-Type": "text/plain"}, b"hi", 415),
        ("/v1/traces", {"Content-Type": "application/x-protobuf"}, b"\xff\xff\xff", 400),
        ("/v1/traces", {"Content-Type": "application/json"}, b"{not json", 400),
        ("/v1/traces", {"Content-Type": "application/json"},
         b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}', 400),
        ("/v1/metrics", {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"},
         b"not gzip", 400),
        ("/v1/metrics", {"Content-Type": "application/x-protobuf", "Content-Encoding": "br"},
         b"", 400),
    ],
)
def test_bad_http_requests_get_a_status_body_and_store_nothing(
    otlp_receiver, path, headers, body, expected_status
):
    status, response_headers, response = post(otlp_receiver.http_endpoint + path, body, headers)

    assert status == expected_status
    if response_headers["Content-Type"] == "application/json":
        assert json.loads(response)["message"]
    else:
        assert status_pb2.Status.FromString(response).message
    assert otlp_receiver.spans() == [] and otlp_receiver.metrics() == []


def test_injected_http_failure_carries_status_and_retry_after(otlp_receiver):
    otlp_receiver.fail_with = grpc.StatusCode.RESOURCE_EXHAUSTED
    otlp_receiver.retry_after_s = 2

    status, headers, response = post(otlp_receiver.http_endpoint + "/v1/metrics", b"",
                                     {"Content-Type": "application/x-protobuf"})

    assert status == HTTP_STATUS_FOR_GRPC_CODE[grpc.StatusCode.RESOURCE_EXHAUSTED] == 429
    assert headers["Retry-After"] == "2"
    rpc_status = status_pb2.Status.FromString(response)
    assert rpc_status.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert otlp_receiver.requests()[0].status == "RESOURCE_EXHAUSTED"


# ---- the helper API itself ------------------------------------------------------------------


def test_wait_for_spans_times_out_with_what_arrived(otlp_receiver, pipelines):
    pipeline = pipelines(span_exporter("grpc", otlp_receiver))
    with pipeline.tracer.start_as_current_span("only-this"):
        pass

    assert otlp_receiver.wait_for_spans(lambda spans: any(s.name == "only-this" for s in spans))
    with pytest.raises(AssertionError, match=r"at least 2 spans.*'only-this'.*traces/grpc"):
        otlp_receiver.wait_for_spans(2, timeout_s=0.1)
    with pytest.raises(AssertionError, match="exactly one span named 'missing'"):
        otlp_receiver.span("missing")


def test_wait_for_spans_wakes_when_spans_arrive(otlp_receiver, pipelines):
    pipeline = pipelines(span_exporter("http", otlp_receiver), batch=True)
    with pipeline.tracer.start_as_current_span("late"):
        pass
    started = time.monotonic()
    flusher = threading.Timer(0.2, pipeline.provider.force_flush)
    flusher.start()
    try:
        assert [s.name for s in otlp_receiver.wait_for_spans(1, timeout_s=5)] == ["late"]
    finally:
        flusher.join()
    assert time.monotonic() - started < 4


def test_clear_forgets_everything(otlp_receiver, pipelines):
    pipeline = pipelines(span_exporter("grpc", otlp_receiver))
    with pipeline.tracer.start_as_current_span("x"):
        pass
    otlp_receiver.wait_for_spans(1)

    otlp_receiver.clear()

    assert otlp_receiver.request_count == 0
    assert otlp_receiver.spans() == [] and otlp_receiver.trace_requests() == []


def test_context_manager_and_knob_validation():
    with OtlpReceiver(delay_s=0.0) as receiver:
        assert receiver.running
        with pytest.raises(RuntimeError, match="already running"):
            receiver.start()
    assert not receiver.running
    assert refuses_connections(receiver.grpc_endpoint)
    assert refuses_connections(receiver.http_endpoint)

    with pytest.raises(RuntimeError, match="never been started"):
        _ = OtlpReceiver().grpc_endpoint
    with pytest.raises(ValueError, match="fail_with"):
        OtlpReceiver(fail_with=grpc.StatusCode.OK)
    with pytest.raises(ValueError, match="fail_times"):
        OtlpReceiver(fail_times=0)
    with pytest.raises(ValueError, match="delay_s"):
        OtlpReceiver(delay_s=-1)
    with pytest.raises(ValueError, match="retry_after_s"):
        OtlpReceiver(retry_after_s=float("nan"))


# ---- TLS mode -------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_tls_mode_serves_exporters_that_trust_its_ca_and_nothing_in_plaintext(
        tmp_path, monkeypatch, pipelines, transport):
    # (requests lets these override a session's own CA file: the exporter must use ours)
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    ca = make_ca(tmp_path / "ca")
    server = ca.issue_server()
    with OtlpReceiver(tls=TlsFiles(server.certificate, server.private_key)) as receiver:
        assert receiver.grpc_endpoint.startswith("https://")
        assert receiver.http_endpoint.startswith("https://")
        if transport == "grpc":
            credentials = grpc.ssl_channel_credentials(ca.certificate.read_bytes())
            exporter = GrpcSpanExporter(endpoint=receiver.grpc_endpoint,
                                        credentials=credentials, timeout=EXPORT_TIMEOUT_S)
        else:
            exporter = HttpSpanExporter(endpoint=receiver.http_traces_url,
                                        certificate_file=str(ca.certificate),
                                        timeout=EXPORT_TIMEOUT_S)
        emit_parent_child(pipelines(exporter).tracer)
        assert_parent_child(receiver)
        assert [(r.transport, r.tls, r.accepted) for r in receiver.requests()] == \
            [(transport, True, True)] * 2

        # a plaintext client gets no request in (HTTP: the TLS handshake fails on the
        # server's side and the connection is dropped)
        plain_url = receiver.http_traces_url.replace("https://", "http://")
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(urllib.request.Request(plain_url, data=b"", method="POST"),
                                   timeout=5).close()
        assert receiver.request_count == 2
