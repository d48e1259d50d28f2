"""A real OTLP receiver for integration tests: gRPC and HTTP, traces and metrics, on loopback.

Built only from the official protocol definitions (``opentelemetry-proto``) plus ``grpcio`` and
the standard library's HTTP server, so what the OpenTelemetry SDK exporters send is decoded
exactly as a collector would decode it; nothing here is a mock.

* gRPC: ``opentelemetry.proto.collector.{trace,metrics}.v1`` ``TraceService/Export`` and
  ``MetricsService/Export`` (gzip-compressed messages are handled by grpc itself).
* HTTP: ``POST /v1/traces`` and ``POST /v1/metrics`` with ``Content-Type`` either
  ``application/x-protobuf`` (binary OTLP) or ``application/json`` (OTLP/JSON), a
  ``Content-Encoding`` of ``gzip``, ``deflate`` or none; the answer is the protobuf (or JSON)
  ``Export*ServiceResponse``, and failures carry a ``google.rpc.Status`` body, as the OTLP
  specification asks. HTTP/1.1 keep-alive connections are tracked and cut on :meth:`stop`.

Knobs, settable at any time (also as constructor keywords):

* ``fail_with``: a :class:`grpc.StatusCode` (``UNAVAILABLE``, ``INVALID_ARGUMENT`` …) that every
  export answers with — mapped to the matching HTTP status (``UNAVAILABLE`` → 503, …) — or
  ``None`` to accept. ``fail_times`` limits it to the next N exports (``None``: until reset).
  Rejected exports are counted in ``request_count`` but their data is not stored.
* ``retry_after_s``: sent with failures as a throttling hint: ``google.rpc.RetryInfo`` in the gRPC
  trailers (both in ``grpc-status-details-bin`` and in the ``google.rpc.retryinfo-bin`` trailer,
  the one the Python SDK reads) and an HTTP ``Retry-After`` header. The SDK exporters use it as
  their backoff, so a test can make retries fast and deterministic.
* ``delay_s``: each export is answered only after this delay (a slow collector). A delay is cut
  short by :meth:`stop`. A delayed export is still stored when the delay ends, even if the
  client gave up waiting — as a real slow collector would have processed it.

Constructor only: ``tls``, a :class:`TlsFiles` (server certificate and key, PEM) that makes both
servers speak TLS only — gRPC through ``grpc.ssl_server_credentials``, HTTP through an
``ssl.SSLContext`` whose handshake runs on the connection's own handler thread (a client that
rejects the certificate, or never finishes its handshake, holds up no one else). The endpoints
then start ``https://``; every request records whether it came over TLS (``ReceivedRequest.tls``,
as the connection itself reports it). Without ``tls`` nothing changes: plaintext, ``http://``.

Constructor only: ``signals``, the services the receiver implements (default both). A receiver
built with ``signals=("traces",)`` behaves as a traces-only backend such as Jaeger does: gRPC
has no ``MetricsService`` (calls to it end ``UNIMPLEMENTED``, from grpc itself) and HTTP answers
``POST /v1/metrics`` with 404. Those refused calls are still logged as requests, with status
``UNIMPLEMENTED``, so a test can count how often a client tried.

Received data comes back flattened into small frozen dataclasses: :meth:`OtlpReceiver.spans`
(:class:`ReceivedSpan`) and :meth:`OtlpReceiver.metrics` (:class:`ReceivedDataPoint`), and the raw
protobuf requests through :meth:`OtlpReceiver.trace_requests` /
:meth:`OtlpReceiver.metrics_requests`. Every export request, accepted or not, is logged as a
:class:`ReceivedRequest`.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import logging
import math
import os
import socket
import ssl
import threading
import time
import zlib
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

import grpc
from google.protobuf import json_format
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import DecodeError, Message
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.metrics.v1 import metrics_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

__all__ = [
    "HTTP_STATUS_FOR_GRPC_CODE",
    "OtlpReceiver",
    "ReceivedDataPoint",
    "ReceivedEvent",
    "ReceivedRequest",
    "ReceivedSpan",
    "TlsFiles",
]

_logger = logging.getLogger(__name__)

Signal = Literal["traces", "metrics"]
Transport = Literal["grpc", "http"]
Encoding = Literal["protobuf", "json"]
MetricKind = Literal["sum", "gauge", "histogram", "exponential_histogram", "summary"]

_LOOPBACK = "127.0.0.1"
_HTTP_PATHS: Mapping[str, Signal] = {"/v1/traces": "traces", "/v1/metrics": "metrics"}
_GRPC_METHODS: Mapping[str, Signal] = {
    "/opentelemetry.proto.collector.trace.v1.TraceService/Export": "traces",
    "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export": "metrics",
}
_REQUEST_TYPES: Mapping[Signal, type[Message]] = {
    "traces": trace_service_pb2.ExportTraceServiceRequest,
    "metrics": metrics_service_pb2.ExportMetricsServiceRequest,
}
_RESPONSE_TYPES: Mapping[Signal, type[Message]] = {
    "traces": trace_service_pb2.ExportTraceServiceResponse,
    "metrics": metrics_service_pb2.ExportMetricsServiceResponse,
}

# The HTTP status a collector answers for each gRPC code (the gRPC ↔ HTTP mapping the
# OpenTelemetry Collector uses). Note that the two transports retry different sets: the SDK's
# gRPC exporters retry CANCELLED, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED, OUT_OF_RANGE,
# UNAVAILABLE and DATA_LOSS; its HTTP exporters retry only 429, 502, 503 and 504.
HTTP_STATUS_FOR_GRPC_CODE: Mapping[grpc.StatusCode, int] = {
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNKNOWN: HTTPStatus.INTERNAL_SERVER_ERROR,
    grpc.StatusCode.INVALID_ARGUMENT: HTTPStatus.BAD_REQUEST,
    grpc.StatusCode.DEADLINE_EXCEEDED: HTTPStatus.GATEWAY_TIMEOUT,
    grpc.StatusCode.NOT_FOUND: HTTPStatus.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS: HTTPStatus.CONFLICT,
    grpc.StatusCode.PERMISSION_DENIED: HTTPStatus.FORBIDDEN,
    grpc.StatusCode.RESOURCE_EXHAUSTED: HTTPStatus.TOO_MANY_REQUESTS,
    grpc.StatusCode.FAILED_PRECONDITION: HTTPStatus.BAD_REQUEST,
    grpc.StatusCode.ABORTED: HTTPStatus.CONFLICT,
    grpc.StatusCode.OUT_OF_RANGE: HTTPStatus.BAD_REQUEST,
    grpc.StatusCode.UNIMPLEMENTED: HTTPStatus.NOT_IMPLEMENTED,
    grpc.StatusCode.INTERNAL: HTTPStatus.INTERNAL_SERVER_ERROR,
    grpc.StatusCode.UNAVAILABLE: HTTPStatus.SERVICE_UNAVAILABLE,
    grpc.StatusCode.DATA_LOSS: HTTPStatus.INTERNAL_SERVER_ERROR,
    grpc.StatusCode.UNAUTHENTICATED: HTTPStatus.UNAUTHORIZED,
}

# OTLP/JSON differs from the canonical protobuf JSON mapping in one way that matters here: trace
# and span ids are hex strings, not base64. (Enums as integers, int64 as strings or numbers and
# lowerCamelCase keys are all accepted by json_format already.)
_HEX_ID_KEYS = frozenset(
    {"traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id"}
)


# --------------------------------------------------------------------------------------------
# What comes back to tests
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReceivedRequest:
    """One export request as it arrived, accepted or not."""

    signal: Signal
    transport: Transport
    encoding: Encoding
    compression: str | None  # HTTP Content-Encoding ("gzip", "deflate"); None if plain/unknown
    headers: Mapping[str, str]  # lower-case names; gRPC metadata or HTTP headers
    status: str  # "OK" or the gRPC status code name it was answered with ("UNAVAILABLE", …)
    items: int  # spans or data points it carried (0 if rejected before decoding)
    tls: bool = False  # whether the connection it came over was TLS

    @property
    def accepted(self) -> bool:
        return self.status == "OK"


@dataclass(frozen=True)
class TlsFiles:
    """PEM files that make an :class:`OtlpReceiver` serve TLS: its certificate (chain) and its
    unencrypted private key."""

    certificate: str | os.PathLike[str]
    private_key: str | os.PathLike[str]


@dataclass(frozen=True)
class ReceivedEvent:
    name: str
    time_unix_nano: int
    attributes: Mapping[str, Any]


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits
    parent_span_id: str  # 16 hex digits, or "" for a root span
    kind: str  # "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER", "UNSPECIFIED"
    start_time_unix_nano: int
    end_time_unix_nano: int
    attributes: Mapping[str, Any]
    events: tuple[ReceivedEvent, ...]
    status_code: str  # "UNSET", "OK" or "ERROR"
    status_message: str
    resource_attributes: Mapping[str, Any]
    scope_name: str
    links: tuple[tuple[str, str], ...] = ()  # (trace_id, span_id) of each link
    scope_version: str = ""

    def __hash__(self) -> int:  # the attribute dicts are unhashable; ids identify a span
        return hash((self.trace_id, self.span_id, self.name))

    @property
    def is_root(self) -> bool:
        return self.parent_span_id == ""

    @property
    def duration_ns(self) -> int:
        return self.end_time_unix_nano - self.start_time_unix_nano


@dataclass(frozen=True)
class ReceivedDataPoint:
    """One metric data point, with its metric's identity repeated on it.

    ``value`` is set for sums and gauges; ``count``/``sum`` for histograms (all kinds) and
    summaries; ``bucket_counts``/``explicit_bounds``/``min``/``max`` for explicit histograms.
    """

    metric_name: str
    kind: MetricKind
    attributes: Mapping[str, Any]
    resource_attributes: Mapping[str, Any]
    scope_name: str
    unit: str = ""
    description: str = ""
    temporality: str | None = None  # "CUMULATIVE" / "DELTA"; None for gauges and summaries
    is_monotonic: bool | None = None  # sums only
    start_time_unix_nano: int = 0
    time_unix_nano: int = 0
    value: int | float | None = None
    count: int | None = None
    sum: float | None = None
    bucket_counts: tuple[int, ...] = ()
    explicit_bounds: tuple[float, ...] = ()
    min: float | None = None
    max: float | None = None
    # (trace_id, span_id, value) of each exemplar: ids in hex, "" where it has none
    exemplars: tuple[tuple[str, str, float], ...] = ()

    def __hash__(self) -> int:  # the attribute dicts are unhashable
        return hash((self.metric_name, self.kind, self.time_unix_nano, self.count, self.value))


# --------------------------------------------------------------------------------------------
# Protobuf → Python
# --------------------------------------------------------------------------------------------


def any_value_to_python(value: common_pb2.AnyValue) -> Any:
    """An OTLP ``AnyValue`` as a Python value; arrays become tuples, kvlists dicts."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return tuple(any_value_to_python(v) for v in value.array_value.values)
    if which == "kvlist_value":
        return attributes_to_dict(value.kvlist_value.values)
    return getattr(value, which)


def attributes_to_dict(attributes: Iterable[common_pb2.KeyValue]) -> dict[str, Any]:
    return {kv.key: any_value_to_python(kv.value) for kv in attributes}


def _enum_suffix(full_name: str, prefix: str) -> str:
    return full_name[len(prefix):] if full_name.startswith(prefix) else full_name


def flatten_spans(request: trace_service_pb2.ExportTraceServiceRequest) -> list[ReceivedSpan]:
    out: list[ReceivedSpan] = []
    for resource_spans in request.resource_spans:
        resource_attributes = attributes_to_dict(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                out.append(
                    ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        kind=_enum_suffix(trace_pb2.Span.SpanKind.Name(span.kind), "SPAN_KIND_"),
                        start_time_unix_nano=span.start_time_unix_nano,
                        end_time_unix_nano=span.end_time_unix_nano,
                        attributes=attributes_to_dict(span.attributes),
                        events=tuple(
                            ReceivedEvent(e.name, e.time_unix_nano,
                                          attributes_to_dict(e.attributes))
                            for e in span.events
                        ),
                        status_code=_enum_suffix(
                            trace_pb2.Status.StatusCode.Name(span.status.code), "STATUS_CODE_"
                        ),
                        status_message=span.status.message,
                        resource_attributes=resource_attributes,
                        scope_name=scope_spans.scope.name,
                        scope_version=scope_spans.scope.version,
                        links=tuple((ln.trace_id.hex(), ln.span_id.hex()) for ln in span.links),
                    )
                )
    return out


def _temporality(value: int) -> str:
    return _enum_suffix(metrics_pb2.AggregationTemporality.Name(value), "AGGREGATION_TEMPORALITY_")


def _number(point: metrics_pb2.NumberDataPoint) -> int | float | None:
    which = point.WhichOneof("value")
    return None if which is None else getattr(point, which)


def flatten_metrics(
    request: metrics_service_pb2.ExportMetricsServiceRequest,
) -> list[ReceivedDataPoint]:
    out: list[ReceivedDataPoint] = []
    for resource_metrics in request.resource_metrics:
        resource_attributes = attributes_to_dict(resource_metrics.resource.attributes)
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                common: dict[str, Any] = {
                    "metric_name": metric.name,
                    "resource_attributes": resource_attributes,
                    "scope_name": scope_metrics.scope.name,
                    "unit": metric.unit,
                    "description": metric.description,
                }
                kind = metric.WhichOneof("data")
                if kind in ("sum", "gauge"):
                    data = getattr(metric, kind)
                    extra: dict[str, Any] = {}
                    if kind == "sum":
                        extra = {
                            "temporality": _temporality(data.aggregation_temporality),
                            "is_monotonic": data.is_monotonic,
                        }
                    for p in data.data_points:
                        out.append(
                            ReceivedDataPoint(
                                kind=kind, attributes=attributes_to_dict(p.attributes),
                                start_time_unix_nano=p.start_time_unix_nano,
                                time_unix_nano=p.time_unix_nano, value=_number(p),
                                **common, **extra,
                            )
                        )
                elif kind in ("histogram", "exponential_histogram"):
                    data = getattr(metric, kind)
                    for p in data.data_points:
                        explicit = kind == "histogram"
                        out.append(
                            ReceivedDataPoint(
                                kind=kind, attributes=attributes_to_dict(p.attributes),
                                temporality=_temporality(data.aggregation_temporality),
                                start_time_unix_nano=p.start_time_unix_nano,
                                time_unix_nano=p.time_unix_nano, count=p.count,
                                sum=p.sum if p.HasField("sum") else None,
                                bucket_counts=tuple(p.bucket_counts) if explicit else (),
                                explicit_bounds=tuple(p.explicit_bounds) if explicit else (),
                                min=p.min if p.HasField("min") else None,
                                max=p.max if p.HasField("max") else None,
                                exemplars=tuple(
                                    (e.trace_id.hex(), e.span_id.hex(),
                                     e.as_double if e.HasField("as_double") else e.as_int)
                                    for e in p.exemplars),
                                **common,
                            )
                        )
                elif kind == "summary":
                    for p in metric.summary.data_points:
                        out.append(
                            ReceivedDataPoint(
                                kind="summary", attributes=attributes_to_dict(p.attributes),
                                start_time_unix_nano=p.start_time_unix_nano,
                                time_unix_nano=p.time_unix_nano, count=p.count, sum=p.sum,
                                **common,
                            )
                        )
    return out


class _BadRequest(Exception):
    """The body could not be decoded; answered with INVALID_ARGUMENT / HTTP 400."""


def _hex_ids_to_base64(node: Any) -> Any:
    if isinstance(node, dict):
        fixed = {}
        for key, value in node.items():
            if key in _HEX_ID_KEYS and isinstance(value, str):
                try:
                    value = base64.b64encode(bytes.fromhex(value)).decode("ascii")
                except ValueError as exc:
                    raise _BadRequest(f"{key} {value!r} is not a hex id") from exc
                fixed[key] = value
            else:
                fixed[key] = _hex_ids_to_base64(value)
        return fixed
    if isinstance(node, list):
        return [_hex_ids_to_base64(v) for v in node]
    return node


def parse_otlp_json(body: bytes, message: Message) -> None:
    """Decode an OTLP/JSON body into ``message`` (hex ids, unknown fields ignored)."""
    try:
        document = json.loads(body)
    except ValueError as exc:
        raise _BadRequest(f"body is not JSON: {exc}") from exc
    try:
        json_format.ParseDict(_hex_ids_to_base64(document), message, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise _BadRequest(f"body is not OTLP/JSON: {exc}") from exc


# --------------------------------------------------------------------------------------------
# Transports
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Outcome:
    code: grpc.StatusCode  # OK when accepted
    message: str = ""
    retry_after_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.code is grpc.StatusCode.OK


def _grpc_tls(context: grpc.ServicerContext) -> bool:
    # (what the connection negotiated, as grpc reports it: b"ssl" over TLS, b"insecure" not)
    return b"ssl" in context.auth_context().get("transport_security_type", ())


def _grpc_metadata(context: grpc.ServicerContext) -> dict[str, str]:
    return {
        key.lower(): value
        for key, value in (context.invocation_metadata() or ())
        if isinstance(value, str)
    }


def _abort(context: grpc.ServicerContext, outcome: _Outcome) -> None:
    status = status_pb2.Status(code=outcome.code.value[0], message=outcome.message)
    trailers: list[tuple[str, bytes]] = []
    if outcome.retry_after_s is not None:
        seconds = math.floor(outcome.retry_after_s)
        retry_info = error_details_pb2.RetryInfo(
            retry_delay=Duration(
                seconds=seconds, nanos=round((outcome.retry_after_s - seconds) * 1e9)
            )
        )
        status.details.add().Pack(retry_info)
        trailers.append(("google.rpc.retryinfo-bin", retry_info.SerializeToString()))
    trailers.append(("grpc-status-details-bin", status.SerializeToString()))
    context.set_trailing_metadata(tuple(trailers))
    context.abort(outcome.code, outcome.message)


class _TraceServicer(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver

    def Export(self, request, context):
        outcome = self._receiver._receive(
            "traces", "grpc", "protobuf", None, _grpc_metadata(context), lambda: request,
            tls=_grpc_tls(context),
        )
        if not outcome.ok:
            _abort(context, outcome)
        return trace_service_pb2.ExportTraceServiceResponse()


class _MetricsServicer(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver

    def Export(self, request, context):
        outcome = self._receiver._receive(
            "metrics", "grpc", "protobuf", None, _grpc_metadata(context), lambda: request,
            tls=_grpc_tls(context),
        )
        if not outcome.ok:
            _abort(context, outcome)
        return metrics_service_pb2.ExportMetricsServiceResponse()


class _Unimplemented(grpc.GenericRpcHandler):
    """Registered after the servicers, so grpc consults it only for a method no servicer
    serves: it logs an OTLP export the receiver does not implement and declines it (returns
    no handler), which grpc answers with UNIMPLEMENTED, as a traces-only backend does."""

    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> None:
        signal = _GRPC_METHODS.get(handler_call_details.method)
        if signal is not None:
            metadata = {key.lower(): value
                        for key, value in (handler_call_details.invocation_metadata or ())
                        if isinstance(value, str)}
            # (no servicer context here: on a TLS receiver every connection is TLS)
            self._receiver._refused(signal, "grpc", metadata,
                                    tls=self._receiver.tls is not None)
        return None


class _HttpServer(ThreadingHTTPServer):
    """Threading HTTP server that joins its handler threads on close and can cut open
    keep-alive connections, so nothing is served (or left running) after :meth:`stop`."""

    daemon_threads = False
    block_on_close = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], receiver: OtlpReceiver,
                 tls: ssl.SSLContext | None = None) -> None:
        self.receiver = receiver
        self._tls = tls
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _OtlpHttpHandler)

    def get_request(self) -> tuple[socket.socket, Any]:
        connection, address = super().get_request()
        if self._tls is not None:
            # The handshake is left to the handler's thread (see _OtlpHttpHandler.setup): in
            # accept() it would stall every other client behind a slow or refusing one.
            connection = self._tls.wrap_socket(connection, server_side=True,
                                               do_handshake_on_connect=False)
        return connection, address

    def process_request(self, request, client_address):
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request, client_address):
        # A client that hangs up, or a connection cut by stop(), is not a test failure.
        _logger.debug("otlp http: error serving %s", client_address, exc_info=True)

    def cut_connections(self) -> None:
        with self._connections_lock:
            for connection in self._connections:
                with contextlib.suppress(OSError):  # already closed by its handler
                    connection.shutdown(socket.SHUT_RDWR)


class _OtlpHttpHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like a real collector
    timeout = 30  # an idle keep-alive connection is dropped after this
    server: _HttpServer

    def setup(self) -> None:
        super().setup()  # (sets the connection's timeout, which bounds the handshake too)
        if isinstance(self.connection, ssl.SSLSocket):
            # A client that rejects the certificate fails here; handle_error logs it (debug).
            self.connection.do_handshake()

    def log_message(self, format: str, *args: Any) -> None:
        _logger.debug("otlp http %s: " + format, self.address_string(), *args)

    def _send(self, status: int, body: bytes, content_type: str,
              extra_headers: Mapping[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (extra_headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _send_status(self, http_status: int, code: grpc.StatusCode, message: str,
                     encoding: Encoding = "protobuf",
                     extra_headers: Mapping[str, str] | None = None) -> None:
        status = status_pb2.Status(code=code.value[0], message=message)
        if encoding == "json":
            self._send(http_status, json_format.MessageToJson(status).encode(),
                       "application/json", extra_headers)
        else:
            self._send(http_status, status.SerializeToString(), "application/x-protobuf",
                       extra_headers)

    def do_GET(self) -> None:
        self._send_status(HTTPStatus.METHOD_NOT_ALLOWED, grpc.StatusCode.UNIMPLEMENTED,
                          "OTLP/HTTP accepts POST only", extra_headers={"Allow": "POST"})

    def do_POST(self) -> None:
        signal = _HTTP_PATHS.get(urlsplit(self.path).path)
        length = self.headers.get("Content-Length")
        if length is None or not length.strip().isdigit():
            self.close_connection = True  # the body cannot be skipped without its length
            self._send_status(HTTPStatus.LENGTH_REQUIRED, grpc.StatusCode.INVALID_ARGUMENT,
                              "Content-Length is required")
            return
        raw = self.rfile.read(int(length))
        if signal is None:
            self._send_status(HTTPStatus.NOT_FOUND, grpc.StatusCode.NOT_FOUND,
                              f"no OTLP endpoint at {self.path}; use /v1/traces or /v1/metrics")
            return
        if signal not in self.server.receiver.signals:
            # (a collector without a pipeline for this signal has no route for it: 404)
            self.server.receiver._refused(
                signal, "http", {name.lower(): value for name, value in self.headers.items()},
                tls=isinstance(self.connection, ssl.SSLSocket))
            self._send_status(HTTPStatus.NOT_FOUND, grpc.StatusCode.UNIMPLEMENTED,
                              f"this receiver does not implement OTLP {signal}")
            return
        content_type = self.headers.get_content_type()
        if content_type == "application/x-protobuf":
            encoding: Encoding = "protobuf"
        elif content_type == "application/json":
            encoding = "json"
        else:
            self._send_status(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, grpc.StatusCode.INVALID_ARGUMENT,
                              f"unsupported Content-Type {content_type!r}")
            return
        content_encoding = (self.headers.get("Content-Encoding") or "").strip().lower() or None
        headers = {name.lower(): value for name, value in self.headers.items()}

        def parse() -> Message:
            if content_encoding == "gzip":
                try:
                    body = gzip.decompress(raw)
                except (OSError, EOFError, zlib.error) as exc:
                    raise _BadRequest(f"body is not valid gzip: {exc}") from exc
            elif content_encoding == "deflate":
                try:
                    body = zlib.decompress(raw)
                except zlib.error as exc:
                    raise _BadRequest(f"body is not valid deflate: {exc}") from exc
            elif content_encoding in (None, "identity"):
                body = raw
            else:
                raise _BadRequest(f"unsupported Content-Encoding {content_encoding!r}")
            message = _REQUEST_TYPES[signal]()
            if encoding == "json":
                parse_otlp_json(body, message)
            else:
                try:
                    message.ParseFromString(body)
                except DecodeError as exc:
                    raise _BadRequest(f"body is not a protobuf {type(message).__name__}") from exc
            return message

        outcome = self.server.receiver._receive(
            signal, "http", encoding, content_encoding, headers, parse,
            tls=isinstance(self.connection, ssl.SSLSocket),
        )
        if not outcome.ok:
            extra = {}
            if outcome.retry_after_s is not None:
                # RFC 9110 wants whole seconds; the Python SDK also takes fractions, which
                # keeps retry tests fast. Other SDKs may round a fraction down to 0 or ignore it.
                extra["Retry-After"] = f"{outcome.retry_after_s:g}"
            self._send_status(HTTP_STATUS_FOR_GRPC_CODE.get(outcome.code, 500), outcome.code,
                              outcome.message, encoding, extra)
            return
        response = _RESPONSE_TYPES[signal]()
        if encoding == "json":
            self._send(HTTPStatus.OK, json_format.MessageToJson(response).encode(),
                       "application/json")
        else:
            self._send(HTTPStatus.OK, response.SerializeToString(), "application/x-protobuf")


# --------------------------------------------------------------------------------------------
# The receiver
# --------------------------------------------------------------------------------------------

T = TypeVar("T")


class OtlpReceiver:
    """A real OTLP/gRPC + OTLP/HTTP receiver on 127.0.0.1 with OS-chosen ports.

    ``start()`` binds both servers; ``stop()`` (idempotent) closes them and cuts every open
    connection, so afterwards the ports refuse connections; ``start()`` after ``stop()`` binds the
    same ports again (a collector restart). Usable as a context manager.
    """

    def __init__(
        self,
        *,
        fail_with: grpc.StatusCode | None = None,
        fail_times: int | None = None,
        retry_after_s: float | None = None,
        delay_s: float = 0.0,
        grpc_workers: int = 4,
        signals: Collection[Signal] = ("traces", "metrics"),
        tls: TlsFiles | None = None,
    ) -> None:
        if not isinstance(grpc_workers, int) or grpc_workers < 1:
            raise ValueError(f"grpc_workers must be an int >= 1, got {grpc_workers!r}")
        if isinstance(signals, str) or not signals or not set(signals) <= set(_REQUEST_TYPES):
            raise ValueError(f"signals must be a non-empty collection of 'traces' and "
                             f"'metrics', got {signals!r}")
        self.signals: frozenset[Signal] = frozenset(signals)
        if tls is not None and not isinstance(tls, TlsFiles):
            raise ValueError(f"tls must be a TlsFiles or None, got {tls!r}")
        self.tls = tls
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._lifecycle_lock = threading.Lock()  # serialises start()/stop()
        self._grpc_workers = grpc_workers
        self._fail_with: grpc.StatusCode | None = None
        self._fail_times: int | None = None
        self._retry_after_s: float | None = None
        self._delay_s = 0.0
        self.fail_with = fail_with
        self.fail_times = fail_times
        self.retry_after_s = retry_after_s
        self.delay_s = delay_s

        self._running = False
        self._stopping = threading.Event()
        self._grpc_server: grpc.Server | None = None
        self._grpc_executor: futures.ThreadPoolExecutor | None = None
        self._http_server: _HttpServer | None = None
        self._http_thread: threading.Thread | None = None
        self._grpc_port = 0
        self._http_port = 0

        self._generation = 0  # bumped on every stored export; waiters wake on change
        self._requests: list[ReceivedRequest] = []
        self._trace_requests: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self._metrics_requests: list[metrics_service_pb2.ExportMetricsServiceRequest] = []
        self._spans: list[ReceivedSpan] = []
        self._points: list[ReceivedDataPoint] = []

    # ---- knobs -----------------------------------------------------------------------------

    @property
    def fail_with(self) -> grpc.StatusCode | None:
        return self._fail_with

    @fail_with.setter
    def fail_with(self, code: grpc.StatusCode | None) -> None:
        if code is not None and (not isinstance(code, grpc.StatusCode)
                                 or code is grpc.StatusCode.OK):
            raise ValueError(f"fail_with must be a grpc.StatusCode other than OK, or None; "
                             f"got {code!r}")
        with self._lock:
            self._fail_with = code

    @property
    def fail_times(self) -> int | None:
        return self._fail_times

    @fail_times.setter
    def fail_times(self, times: int | None) -> None:
        if times is not None and (not isinstance(times, int) or times < 1):
            raise ValueError(f"fail_times must be an int >= 1, or None; got {times!r}")
        with self._lock:
            self._fail_times = times

    @property
    def retry_after_s(self) -> float | None:
        return self._retry_after_s

    @retry_after_s.setter
    def retry_after_s(self, seconds: float | None) -> None:
        if seconds is not None and not (isinstance(seconds, (int, float))
                                        and 0 <= seconds < math.inf):
            raise ValueError(f"retry_after_s must be a finite number >= 0, or None; "
                             f"got {seconds!r}")
        with self._lock:
            self._retry_after_s = None if seconds is None else float(seconds)

    @property
    def delay_s(self) -> float:
        return self._delay_s

    @delay_s.setter
    def delay_s(self, seconds: float) -> None:
        if not (isinstance(seconds, (int, float)) and 0 <= seconds < math.inf):
            raise ValueError(f"delay_s must be a finite number >= 0; got {seconds!r}")
        with self._lock:
            self._delay_s = float(seconds)

    # ---- lifecycle -------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._running

    @property
    def _scheme(self) -> str:
        return "http" if self.tls is None else "https"

    @property
    def grpc_endpoint(self) -> str:
        """``http://127.0.0.1:PORT`` for the SDK's gRPC exporters (with ``insecure=True``);
        ``https://`` with ``tls`` (the exporters then trust ``OTEL_EXPORTER_OTLP_CERTIFICATE``)."""
        self._require_bound()
        return f"{self._scheme}://{_LOOPBACK}:{self._grpc_port}"

    @property
    def http_endpoint(self) -> str:
        """``http://127.0.0.1:PORT`` (``https://`` with ``tls``); the signal paths are
        ``/v1/traces`` and ``/v1/metrics``."""
        self._require_bound()
        return f"{self._scheme}://{_LOOPBACK}:{self._http_port}"

    @property
    def http_traces_url(self) -> str:
        return self.http_endpoint + "/v1/traces"

    @property
    def http_metrics_url(self) -> str:
        return self.http_endpoint + "/v1/metrics"

    def _require_bound(self) -> None:
        if not self._grpc_port:
            raise RuntimeError("the receiver has never been started; call start() first")

    def start(self) -> OtlpReceiver:
        """Bind and serve; after a ``stop()`` the same ports are bound again."""
        with self._lifecycle_lock:
            if self._running:
                raise RuntimeError("the receiver is already running")
            self._stopping.clear()
            executor = futures.ThreadPoolExecutor(
                max_workers=self._grpc_workers, thread_name_prefix="otlp-grpc"
            )
            # so_reuseport off: no other server may share the port while this one holds it.
            server = grpc.server(executor, options=(("grpc.so_reuseport", 0),))
            if "traces" in self.signals:
                trace_service_pb2_grpc.add_TraceServiceServicer_to_server(
                    _TraceServicer(self), server
                )
            if "metrics" in self.signals:
                metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(
                    _MetricsServicer(self), server
                )
            server.add_generic_rpc_handlers((_Unimplemented(self),))  # after the servicers
            try:
                address = f"{_LOOPBACK}:{self._grpc_port}"
                if self.tls is None:
                    grpc_port = server.add_insecure_port(address)
                    http_tls = None
                else:
                    grpc_port = server.add_secure_port(address, self._grpc_credentials())
                    http_tls = self._http_tls_context()
                if not grpc_port:
                    raise OSError(f"could not bind gRPC to {_LOOPBACK}:{self._grpc_port}")
                http_server = _HttpServer((_LOOPBACK, self._http_port), self, http_tls)
            except BaseException:
                server.stop(None).wait()
                executor.shutdown(wait=True)
                raise
            server.start()
            http_thread = threading.Thread(
                target=http_server.serve_forever, kwargs={"poll_interval": 0.05},
                name="otlp-http", daemon=True,
            )
            http_thread.start()
            self._grpc_server, self._grpc_executor = server, executor
            self._http_server, self._http_thread = http_server, http_thread
            self._grpc_port, self._http_port = grpc_port, http_server.server_address[1]
            with self._lock:
                self._running = True
            _logger.debug("OTLP receiver up: grpc %s, http %s",
                          self.grpc_endpoint, self.http_endpoint)
            return self

    def _grpc_credentials(self) -> grpc.ServerCredentials:
        assert self.tls is not None
        with open(self.tls.private_key, "rb") as key, open(self.tls.certificate, "rb") as cert:
            return grpc.ssl_server_credentials([(key.read(), cert.read())])

    def _http_tls_context(self) -> ssl.SSLContext:
        assert self.tls is not None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # TLS 1.2+, no client certificate
        context.load_cert_chain(self.tls.certificate, self.tls.private_key)
        return context

    def stop(self) -> None:
        """Stop both servers and close every connection; idempotent."""
        with self._lifecycle_lock:
            with self._cond:
                if not self._running:
                    return
                self._running = False  # in-flight exports are now answered UNAVAILABLE
                self._cond.notify_all()
            self._stopping.set()  # cut delays short
            if self._grpc_server is not None:
                self._grpc_server.stop(grace=None).wait()
            if self._grpc_executor is not None:
                self._grpc_executor.shutdown(wait=True)
            if self._http_server is not None:
                self._http_server.shutdown()  # stop accepting; serve_forever returns
                self._http_server.cut_connections()  # wake keep-alive handlers
                self._http_server.server_close()  # close the port, join handler threads
            if self._http_thread is not None:
                self._http_thread.join()
            self._grpc_server = self._grpc_executor = None
            self._http_server = self._http_thread = None

    def __enter__(self) -> OtlpReceiver:
        if not self._running:
            self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ---- the request path ------------------------------------------------------------------

    def _receive(self, signal: Signal, transport: Transport, encoding: Encoding,
                 compression: str | None, headers: Mapping[str, str],
                 parse: Callable[[], Message], *, tls: bool = False) -> _Outcome:
        with self._lock:
            failure: _Outcome | None = None
            if not self._running:
                failure = _Outcome(grpc.StatusCode.UNAVAILABLE, "receiver is stopping")
            elif self._fail_with is not None:
                failure = _Outcome(self._fail_with, f"injected failure ({self._fail_with.name})",
                                   self._retry_after_s)
                if self._fail_times is not None:
                    self._fail_times -= 1
                    if self._fail_times == 0:
                        self._fail_with = self._fail_times = None
            delay = self._delay_s
        if delay:
            self._stopping.wait(delay)

        items = 0
        if failure is None:
            try:
                message = parse()
            except _BadRequest as exc:
                failure = _Outcome(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            else:
                flat: list[Any] = (flatten_spans(message) if signal == "traces"
                                   else flatten_metrics(message))
                items = len(flat)
        with self._cond:
            if failure is None and not self._running:
                failure, items = _Outcome(grpc.StatusCode.UNAVAILABLE, "receiver stopped"), 0
            if failure is None:
                if signal == "traces":
                    self._trace_requests.append(message)
                    self._spans.extend(flat)
                else:
                    self._metrics_requests.append(message)
                    self._points.extend(flat)
            self._requests.append(ReceivedRequest(
                signal, transport, encoding, compression, dict(headers),
                "OK" if failure is None else failure.code.name, items, tls,
            ))
            self._generation += 1
            self._cond.notify_all()
        return failure or _Outcome(grpc.StatusCode.OK)

    def _refused(self, signal: Signal, transport: Transport, headers: Mapping[str, str], *,
                 tls: bool = False) -> None:
        """Log an export of a signal this receiver does not implement (see ``signals``)."""
        with self._cond:
            self._requests.append(ReceivedRequest(
                signal, transport, "protobuf", None, dict(headers), "UNIMPLEMENTED", 0, tls))
            self._generation += 1
            self._cond.notify_all()

    # ---- what was received -----------------------------------------------------------------

    @property
    def request_count(self) -> int:
        """Export requests that reached the receiver, accepted or rejected."""
        with self._lock:
            return len(self._requests)

    def requests(self, signal: Signal | None = None) -> list[ReceivedRequest]:
        with self._lock:
            return [r for r in self._requests if signal is None or r.signal == signal]

    def trace_requests(self) -> list[trace_service_pb2.ExportTraceServiceRequest]:
        """The accepted trace export requests, as decoded protobuf messages."""
        with self._lock:
            return list(self._trace_requests)

    def metrics_requests(self) -> list[metrics_service_pb2.ExportMetricsServiceRequest]:
        with self._lock:
            return list(self._metrics_requests)

    def spans(self, name: str | None = None) -> list[ReceivedSpan]:
        """Every received span in arrival order, optionally only those called ``name``."""
        with self._lock:
            return [s for s in self._spans if name is None or s.name == name]

    def span(self, name: str) -> ReceivedSpan:
        """The one span called ``name``; AssertionError if there are none or several."""
        found = self.spans(name)
        if len(found) != 1:
            raise AssertionError(f"expected exactly one span named {name!r}, found "
                                 f"{len(found)}; received: {self._describe_spans(self.spans())}")
        return found[0]

    def metrics(self, name: str | None = None) -> list[ReceivedDataPoint]:
        """Every received data point in arrival order, optionally of the metric ``name``."""
        with self._lock:
            return [p for p in self._points if name is None or p.metric_name == name]

    def clear(self) -> None:
        """Forget everything received, including ``request_count``; knobs stay as they are."""
        with self._cond:
            self._requests.clear()
            self._trace_requests.clear()
            self._metrics_requests.clear()
            self._spans.clear()
            self._points.clear()
            self._generation += 1
            self._cond.notify_all()

    def wait_for_spans(self, predicate_or_count: int | Callable[[list[ReceivedSpan]], bool] = 1,
                       timeout_s: float = 5.0) -> list[ReceivedSpan]:
        """Block until ``count`` spans arrived, or ``predicate(all spans)`` is true; return the
        spans. On timeout: AssertionError listing what did arrive."""
        return self._wait_for("spans", self.spans, predicate_or_count, timeout_s,
                              self._describe_spans)

    def wait_for_metrics(
        self, predicate_or_count: int | Callable[[list[ReceivedDataPoint]], bool] = 1,
        timeout_s: float = 5.0,
    ) -> list[ReceivedDataPoint]:
        """Like :meth:`wait_for_spans`, for metric data points."""
        return self._wait_for("metric data points", self.metrics, predicate_or_count, timeout_s,
                              self._describe_points)

    def _wait_for(self, what: str, get: Callable[[], list[T]],
                  predicate_or_count: int | Callable[[list[T]], bool], timeout_s: float,
                  describe: Callable[[Sequence[T]], str]) -> list[T]:
        if isinstance(predicate_or_count, bool) or not (
            callable(predicate_or_count)
            or (isinstance(predicate_or_count, int) and predicate_or_count >= 0)
        ):
            raise ValueError(f"predicate_or_count must be a callable or an int >= 0, "
                             f"got {predicate_or_count!r}")
        if isinstance(predicate_or_count, int):
            count = predicate_or_count

            def satisfied(items: list[T]) -> bool:
                return len(items) >= count

            wanted = f"at least {count} {what}"
        else:
            satisfied = predicate_or_count
            wanted = f"{what} satisfying {getattr(satisfied, '__name__', satisfied)!r}"
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                generation = self._generation
            items = get()
            if satisfied(items):
                return items
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            with self._cond:
                self._cond.wait_for(lambda seen=generation: self._generation != seen,
                                    timeout=remaining)
        raise AssertionError(
            f"timed out after {timeout_s:g} s waiting for {wanted}; received {len(items)} "
            f"{what}: {describe(items)}; requests: {self._describe_requests()}"
        )

    @staticmethod
    def _describe_spans(spans: Sequence[ReceivedSpan]) -> str:
        return "[" + ", ".join(
            f"{s.name!r}(trace={s.trace_id[:8]}, span={s.span_id[:8]}, "
            f"parent={s.parent_span_id[:8] or '-'}, attrs={dict(s.attributes)})"
            for s in spans
        ) + "]"

    @staticmethod
    def _describe_points(points: Sequence[ReceivedDataPoint]) -> str:
        return "[" + ", ".join(
            f"{p.metric_name!r}({p.kind}, attrs={dict(p.attributes)}, "
            + (f"value={p.value})" if p.value is not None else f"count={p.count}, sum={p.sum})")
            for p in points
        ) + "]"

    def _describe_requests(self) -> str:
        requests = self.requests()
        if not requests:
            return "none"
        return ", ".join(f"{r.signal}/{r.transport}/{r.encoding}:{r.status}" for r in requests)

    def __repr__(self) -> str:
        where = (f"grpc={self.grpc_endpoint}, http={self.http_endpoint}"
                 if self._grpc_port else "never started")
        return (f"OtlpReceiver({'running' if self._running else 'stopped'}, {where}, "
                f"requests={self.request_count})")

