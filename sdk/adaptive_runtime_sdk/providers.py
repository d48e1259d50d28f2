"""The global providers ``configure()`` installs — made by its first call, kept until exit (the
OpenTelemetry API sets each once per process) — and the exporters it makes: OTLP over gRPC or
HTTP, the OTLP/JSON files, the console; the Prometheus scrape endpoint. Also how they are
stopped within a bound (:class:`Bounded`) and what a forked child does to the meter provider
(see ``lifecycle``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SpanExporter

from adaptive_runtime._concurrency.forks import after_fork_in_child
from adaptive_runtime.telemetry import instrumentation
from adaptive_runtime.telemetry.deadline import remaining
from adaptive_runtime.telemetry.spans import is_runtime_span
from adaptive_runtime.telemetry.stats import report_exports

from .credentials import otlp_http_session, quiet_grpc_handshake_logs, shown_url
from .export import BoundedSpanProcessor
from .exporters import GuardedMetricExporter, GuardedSpanExporter, note_http_status
from .otlp_json_file import OtlpJsonFileMetricExporter, OtlpJsonFileSpanExporter

__all__ = ["GRPC_RECONNECT", "Bounded", "ProcessProviders", "app_has_meter_provider",
           "app_has_tracer_provider", "inherited_from_parent", "install_meter_provider",
           "install_tracer_provider", "installed", "make_metric_exporter", "make_span_exporter",
           "serve_prometheus"]

_log = logging.getLogger(__name__)

# where `otlp` sends when no endpoint is configured (the OTLP exporter specification's defaults)
_DEFAULT_OTLP_ENDPOINTS = {"grpc": "http://localhost:4317", "http/protobuf": "http://localhost:4318"}
# A forked child waits this long for the metric reader thread the SDK restarted in it to stop
# (its last collection reads nothing of ours there, and exports into a dropping exporter).
_CHILD_READER_STOP_MS = 500.0


class Bounded:
    """``call(timeout_millis)`` on a daemon thread of its own, waited for until ``deadline``
    at most (the SDK's flushes take a timeout they do not always keep)."""

    def __init__(self, call: Callable[[int], Any], deadline: float) -> None:
        self._ok = False
        millis = int(remaining(deadline) * 1000)

        def run() -> None:
            try:
                self._ok = call(millis) is not False
            except Exception as exc:  # observability never breaks the caller
                _log.debug("adaptive_runtime: telemetry flush: %r", exc)

        self._thread: threading.Thread | None = threading.Thread(
            target=run, name="adaptive-runtime-flush", daemon=True)
        try:
            self._thread.start()
        except RuntimeError:
            # Python 3.12 refuses new threads once interpreter shutdown has begun, and atexit
            # handlers run after that: the call runs here, bounded by its own timeout only.
            self._thread = None
            run()

    def finished(self, deadline: float) -> bool:
        """Wait until ``deadline`` at most; whether the call returned and succeeded."""
        if self._thread is None:
            return self._ok
        self._thread.join(remaining(deadline))
        return not self._thread.is_alive() and self._ok


@dataclass
class ProcessProviders:
    """The global providers configure() installed: made once, kept until exit."""

    tracer_provider: TracerProvider | None = None
    span_exporter: GuardedSpanExporter | None = None
    span_processor: BoundedSpanProcessor | None = None
    meter_provider: MeterProvider | None = None
    metric_exporter: GuardedMetricExporter | None = None  # None: no periodic metric export
    prometheus: bool = False  # whether the meter provider has a Prometheus reader
    periodic_reader: PeriodicExportingMetricReader | None = None
    metrics_stopped: bool = False  # a forked child: the meter provider exports nothing

    def shutdown(self, timeout_s: float) -> None:
        """Stop the providers' threads, within ``timeout_s`` (their exporters were stopped
        first: nothing is left to send)."""
        deadline = time.monotonic() + timeout_s
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()  # (our processor: stops its worker, no wait)
        if self.meter_provider is not None and not self.metrics_stopped:
            # (the reader joins its thread, which may still be in an export that ends only
            # with the exporter's own timeout: waited for until the deadline, no longer)
            Bounded(lambda millis: self.meter_provider.shutdown(timeout_millis=millis),
                     deadline).finished(deadline)


installed = ProcessProviders()
# what a forked child inherited and must never close or finalise: its connections, threads and
# files are the parent's
inherited_from_parent: list[Any] = []


def _stop_metric_export_in_child() -> None:
    """A forked child exports no metrics (see ``lifecycle``); registered once the periodic
    reader exists."""
    installed.metrics_stopped = True
    exporter = installed.metric_exporter
    if exporter is not None:
        # (the inherited exporter's connection or file is the parent's: dropped, not closed)
        inherited_from_parent.append(exporter.replace(None))
    reader = installed.periodic_reader
    if reader is not None:
        try:
            # Public API only: the SDK restarted the reader's thread in this child; this
            # stops it (its last collection exports into the dropping exporter).
            reader.shutdown(timeout_millis=_CHILD_READER_STOP_MS)
        except Exception as exc:  # observability never breaks the caller
            _log.debug("adaptive_runtime: stopping the metric reader in a child: %r", exc)


# ---------------------------------------------------------------------------- providers


def install_tracer_provider(resource: Resource, exporter: GuardedSpanExporter,
                            batch: tuple[int, int, float]) -> TracerProvider:
    """The global tracer provider, exporting through our span processor to ``exporter``."""
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    queue_size, batch_size, delay_s = batch
    processor = BoundedSpanProcessor(exporter, max_queue_size=queue_size,
                                     max_export_batch_size=batch_size,
                                     schedule_delay_s=delay_s, is_runtime_span=is_runtime_span)
    provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    installed.tracer_provider, installed.span_exporter = provider, exporter
    installed.span_processor = processor
    report_exports(processor, installed.metric_exporter)
    return provider


def install_meter_provider(resource: Resource, exporter: GuardedMetricExporter | None,
                           interval_s: float, prometheus: bool) -> MeterProvider | None:
    """The global meter provider exporting to ``exporter`` (``None``: no periodic export,
    ``OTEL_METRICS_EXPORTER=none``); ``None`` when there is nothing to read metrics for."""
    readers: list[MetricReader] = []
    periodic = None
    if exporter is not None:
        periodic = PeriodicExportingMetricReader(exporter,
                                                 export_interval_millis=interval_s * 1000.0)
        readers.append(periodic)
    if prometheus:
        from .prometheus import exemplar_reader

        readers.append(exemplar_reader())
    if not readers:  # (the runtimes' instruments stay no-ops of the API's proxy provider)
        return None
    provider = MeterProvider(resource=resource, metric_readers=readers, shutdown_on_exit=False)
    metrics.set_meter_provider(provider)
    installed.meter_provider, installed.metric_exporter = provider, exporter
    installed.periodic_reader, installed.prometheus = periodic, prometheus
    report_exports(installed.span_processor, exporter)
    # Registered after the SDK's own fork hooks of the reader and the provider (made just
    # now), so it runs after them: the reader's thread the SDK restarts in a child is there
    # to be stopped.
    after_fork_in_child(_stop_metric_export_in_child)
    return provider


def serve_prometheus(port: int, host: str) -> Any:
    """The scrape endpoint's HTTP server on ``host:port``, or ``None`` (one warning line)
    where it cannot listen there: the port taken (several ranks on one machine, each asking
    for the same port), the host not this machine's. Training goes on either way."""
    from prometheus_client import start_http_server

    try:
        server, _thread = start_http_server(port, addr=host)
    except OSError as exc:
        _log.warning("adaptive_runtime: no Prometheus endpoint: cannot listen on %s:%d (%s); "
                     "metrics are not scraped from this process (give each process its own "
                     "port: ADAPTIVE_RUNTIME_PROMETHEUS_PORT / OTEL_EXPORTER_PROMETHEUS_PORT)",
                     host, port, exc.strerror or exc)
        return None
    return server


def app_has_tracer_provider() -> bool:
    return instrumentation.app_has_sdk_provider()


def app_has_meter_provider() -> bool:
    return instrumentation.records_metrics(metrics.get_meter_provider())


# ---------------------------------------------------------------------------- exporters


def _endpoint(signal: str, endpoint: str | None, env: Any) -> str | None:
    return (endpoint or env.get(f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT")
            or env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None)

def _http_url(endpoint: str, path: str, signal: str, env: Any, explicit: str | None) -> str:
    # The generic endpoint is a base URL the signal path is appended to; a signal-specific
    # one (or an explicit argument ending in the path) is used as it is.
    if env.get(f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT") and not explicit:
        return endpoint
    base = endpoint.rstrip("/")
    return base if base.endswith(path) else base + path


# gRPC waits up to 120 s (growing with each failure) before it dials a collector that went
# away again: a collector back after a restart would see nothing for minutes, every export
# in between failing unsent. Dial again within 2 s instead.
GRPC_RECONNECT: Any = (("grpc.initial_reconnect_backoff_ms", 250),
                       ("grpc.min_reconnect_backoff_ms", 250),
                       ("grpc.max_reconnect_backoff_ms", 2000))


def make_span_exporter(choice: str | None, endpoint: str | None, protocol: str,
                   headers: dict[str, str] | None, folder: str,
                   env: Any) -> tuple[SpanExporter, str]:
    if choice == "console":
        return ConsoleSpanExporter(), "stdout"
    url = _endpoint("TRACES", endpoint, env)
    if url is None and choice == "otlp":
        url = _DEFAULT_OTLP_ENDPOINTS[protocol]
    if url is None:
        path = os.path.join(folder, "traces.jsonl")
        return OtlpJsonFileSpanExporter(path), path
    if protocol == "grpc":
        quiet_grpc_handshake_logs()
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcSpanExporter,
        )

        return GrpcSpanExporter(endpoint=url, insecure=url.startswith("http://"),
                                headers=headers, channel_options=GRPC_RECONNECT), shown_url(url)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpSpanExporter,
    )

    full = _http_url(url, "/v1/traces", "TRACES", env, endpoint)
    # (our session lets OTEL_EXPORTER_OTLP_CERTIFICATE win over REQUESTS_CA_BUNDLE; not when
    # a credential provider supplies the session: the SDK reads that variable and it must win)
    session = None if _credential_provider_set("TRACES") else otlp_http_session()
    return HttpSpanExporter(endpoint=full, headers=headers, session=session), shown_url(full)


def make_metric_exporter(choice: str | None, endpoint: str | None, protocol: str,
                     headers: dict[str, str] | None, folder: str,
                     env: Any) -> tuple[MetricExporter, str]:
    if choice == "console":
        return ConsoleMetricExporter(), "stdout"
    url = _endpoint("METRICS", endpoint, env)
    if url is None and choice == "otlp":
        url = _DEFAULT_OTLP_ENDPOINTS[protocol]
    if url is None:
        path = os.path.join(folder, "metrics.jsonl")
        return OtlpJsonFileMetricExporter(path), path
    if protocol == "grpc":
        quiet_grpc_handshake_logs()
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
            OTLPMetricExporter as GrpcMetricExporter,
        )

        return GrpcMetricExporter(endpoint=url, insecure=url.startswith("http://"),
                                  headers=headers, channel_options=GRPC_RECONNECT), shown_url(url)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter as HttpMetricExporter,
    )

    full = _http_url(url, "/v1/metrics", "METRICS", env, endpoint)
    session = None
    # Our own requests session, whose response hook tells the metric exporter the HTTP status
    # of a failed export (404: no metrics service there), and which lets the configured CA
    # win over REQUESTS_CA_BUNDLE. Not when a credential provider supplies the session: the SDK
    # reads that variable and it must win.
    if not _credential_provider_set("METRICS"):
        session = otlp_http_session()
        session.hooks["response"].append(note_http_status)
    return HttpMetricExporter(endpoint=full, headers=headers, session=session), shown_url(full)


def _credential_provider_set(signal: str) -> bool:
    return any(os.environ.get(f"OTEL_PYTHON_EXPORTER_OTLP_HTTP{kind}_CREDENTIAL_PROVIDER")
               for kind in ("", f"_{signal}"))
