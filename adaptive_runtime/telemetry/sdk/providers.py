"""``configure()``: an OpenTelemetry SDK for applications that have none, from OTEL_* settings.

- An OTLP endpoint (argument, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` /
  ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``) → OTLP exporters,
  over gRPC or HTTP/protobuf (``protocol`` / ``OTEL_EXPORTER_OTLP_PROTOCOL``; default
  ``http/protobuf`` as the specification says). Headers and certificate come from the
  argument or the standard ``OTEL_EXPORTER_OTLP_HEADERS`` / ``_CERTIFICATE`` variables; a
  malformed header setting is a ``ConfigError`` that never shows a value (see
  :mod:`~adaptive_runtime.telemetry.sdk.credentials`), and the CA file wins over
  ``REQUESTS_CA_BUNDLE`` for OTLP/HTTP.
- No endpoint → the embedded default: OTLP/JSON lines files ``traces.jsonl`` and
  ``metrics.jsonl`` under ``directory`` (argument, ``ADAPTIVE_RUNTIME_TELEMETRY_DIR``, else
  ``./adaptive-runtime-telemetry``) — what the Collector's ``otlpjsonfile`` receiver reads, so
  a run can be replayed into Jaeger later.
- A Prometheus port (argument or ``ADAPTIVE_RUNTIME_PROMETHEUS_PORT``; ``True`` / ``on``
  for the default, 9464) → also a scrape endpoint, on ``prometheus_host`` /
  ``OTEL_EXPORTER_PROMETHEUS_HOST`` (default ``127.0.0.1``: this machine only). A port already
  taken (another rank's, say) is one warning line and no endpoint; nothing else changes.
- ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER`` (or ``traces_exporter`` /
  ``metrics_exporter``), one value each: ``otlp`` (to the endpoint; none configured → the
  specification's default, ``http://localhost:4318``, or ``:4317`` over gRPC), ``console``
  (the SDK's console exporters, on stdout) or ``none`` (that signal is not exported: no spans
  are even recorded; no periodic metric export); for metrics also ``prometheus`` (no push
  export; the scrape endpoint on ``OTEL_EXPORTER_PROMETHEUS_HOST`` /
  ``OTEL_EXPORTER_PROMETHEUS_PORT``, default ``127.0.0.1:9464``). Unset: an endpoint → OTLP,
  else the files.
- The resource: ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_SERVICE_NAME`` and the arguments, by the
  specification's precedence, with a ``service.instance.id`` per process (see
  :mod:`~adaptive_runtime.telemetry.sdk.resource`).
- An endpoint without an OTLP metrics service (gRPC ``UNIMPLEMENTED``, HTTP 404/405: a
  traces-only backend such as Jaeger) gets one warning saying metrics export is off and why,
  then metric export stops; traces go on.
- ``OTEL_SDK_DISABLED=true`` → nothing is set up and nothing is exported.

An application that already set its own tracer or meter provider keeps it: ``configure()``
then only switches the runtimes' instrumentation on. Shutdown (also at interpreter exit)
flushes the runtimes' span buffers first, then the providers, so every span the trace gate
admitted reaches the exporter.

The OpenTelemetry API accepts one global provider of each kind per process, so the providers
are made by the first ``configure()`` and live until exit; a later call (after a
``shutdown()`` or not) changes where they export — endpoint, protocol, headers, directory,
Prometheus port. The resource (service name) and the metric interval stay those of the first
call; a different value is logged as a warning.

Forked children (``DataLoader(num_workers=..., multiprocessing_context="fork")`` workers, a
``multiprocessing`` fork pool) use the runtime as their parent set it up, and:

- export their spans, through their own span worker and the SDK's batch processor (which the
  SDK restarts, empty, in the child): what the parent had queued is exported by the parent
  only. An OTLP exporter is made afresh in the child on its first export (the inherited one's
  connections are the parent's); the OTLP/JSON file is appended to beside the parent (see
  :mod:`~adaptive_runtime.telemetry.sdk.otlp_json`). Their spans carry ``process.pid``.
- export no metrics: the child's counters start as a copy of the parent's, and exporting them
  under the parent's resource would duplicate its series. The SDK restarts the periodic metric
  reader in every child; here its exporter is switched to dropping and the reader shut down.
  Metrics stay the parent's. (The SDK renews none of its metric locks in a child: should the
  fork land while the parent's reader collects, that restarted thread waits forever on one.
  It exports nothing, and nothing the child's calls do takes that lock.)
- flush their spans when a ``multiprocessing`` worker ends (it leaves through ``os._exit``,
  which runs no ``atexit`` handler): at most ``WORKER_EXIT_FLUSH_S`` seconds.

A spawned worker starts a fresh interpreter: nothing is set up there unless it calls
``configure()`` itself (then it exports as any process does, at exit included).
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
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
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    ConsoleSpanExporter,
    SpanExporter,
    SpanExportResult,
)

from ..._forks import after_fork_in_child
from ...errors import ConfigError
from .. import instrumentation
from ..deadline import (
    DEFAULT_SHUTDOWN_TIMEOUT_S,
    exit_deadline,
    flush_deadline,
    remaining,
    resolve_shutdown_timeout,
    set_shutdown_timeout_s,
)
from ..deadline import shutdown_timeout_s as configured_shutdown_timeout_s
from ..defaults import DEFAULT_DIRECTORY, DEFAULT_PROMETHEUS_HOST, DEFAULT_PROMETHEUS_PORT
from ..spans import flush_all, is_runtime_span
from ..stats import TelemetryStats, stats, use_processor
from .credentials import (
    check_header_settings,
    otlp_http_session,
    quiet_grpc_handshake_logs,
    shown_url,
)
from .export import BoundedSpanProcessor, batch_settings
from .otlp_json import OtlpJsonFileMetricExporter, OtlpJsonFileSpanExporter
from .resource import make_resource
from .switching import (
    SwitchableMetricExporter,
    SwitchableSpanExporter,
    note_http_status,
    quiet_repeated_exporter_logs,
    spans_lost_in_export,
)

__all__ = ["DEFAULT_DIRECTORY", "WORKER_EXIT_FLUSH_S", "Telemetry", "configure", "shutdown"]

_log = logging.getLogger(__name__)
# the one line saying what a shutdown could not send (not the exporters' outage filter's)
_shutdown_log = logging.getLogger("adaptive_runtime.telemetry")

_PROTOCOLS = ("grpc", "http/protobuf")
_MAX_METRICS_INTERVAL_S = 365 * 24 * 3600.0
# the values of OTEL_{TRACES,METRICS}_EXPORTER we take
_EXPORTERS = {"TRACES": ("otlp", "console", "none"),
              "METRICS": ("otlp", "console", "prometheus", "none")}
# where `otlp` sends when no endpoint is configured (the OTLP exporter specification's defaults)
_DEFAULT_OTLP_ENDPOINTS = {"grpc": "http://localhost:4317", "http/protobuf": "http://localhost:4318"}
#: At most this long, a ``multiprocessing`` worker (a DataLoader's) flushes its spans as it ends:
#: a DataLoader waits 5 s for a finished worker before it terminates it.
WORKER_EXIT_FLUSH_S = 2.0
# A forked child waits this long for the metric reader thread the SDK restarted in it to stop
# (its last collection reads nothing of ours there, and exports into a dropping exporter).
_CHILD_READER_STOP_MS = 500.0


@dataclass
class Telemetry:
    """What :func:`configure` set up (``None`` where the application's own provider stays)."""

    enabled: bool
    tracer_provider: TracerProvider | None = None
    meter_provider: MeterProvider | None = None
    traces_destination: str | None = None
    metrics_destination: str | None = None
    prometheus_port: int | None = None
    _shut_down: bool = field(default=False, repr=False)
    _baseline: TelemetryStats | None = field(default=None, repr=False)
    _prometheus_server: Any = field(default=None, repr=False)

    @property
    def spans_lost(self) -> int:
        """Spans our exporter failed to deliver in this process (collector down, refusing,
        an exporter error); also ``adaptive.span.suppressed{reason="export_failed"}``."""
        return spans_lost_in_export()

    def shutdown(self, timeout_s: float | None = None) -> None:
        """Flush the runtimes' buffered spans, then our providers' exporters; stop them.

        Returns within ``timeout_s`` (default: ``shutdown_timeout_s``, see :func:`configure`)
        whatever the collector does — down, slow, or never answering: what is not sent by
        then is given up on and counted (:func:`~adaptive_runtime.telemetry.stats`), and
        one warning line says what was lost.
        """
        if self._shut_down:
            return
        self._shut_down = True
        bound = configured_shutdown_timeout_s() if timeout_s is None else timeout_s
        started = time.monotonic()
        deadline = flush_deadline(started, bound)
        instrumentation.deactivate(bound)  # the runtimes' buffered spans, into the provider
        # Metrics and spans flush side by side, each on a thread of its own (the SDK's metric
        # flush exports on the calling thread and may retry for the exporter's whole timeout)
        metric_flush = None
        if self.meter_provider is not None and _process.metric_switch is not None and not (
                self.meter_provider is _process.meter_provider and _process.metrics_stopped):
            # (a forked child's metric export is off, and collecting could wait on SDK locks
            # the parent's reader held at the fork)
            metric_flush = _Bounded(self.meter_provider.force_flush, deadline)
        spans_unsent = 0
        processor = _process.span_processor
        if self.tracer_provider is not None and processor is not None:
            processor.close()  # (spans the application ends from now on: dropped, counted)
            if not processor.flush(remaining(deadline)):
                spans_unsent = processor.abandon()
        metrics_unsent = metric_flush is not None and not metric_flush.finished(deadline)
        # Stopping the exporters cuts short an export still retrying (its back-off wait, a
        # gRPC call); later exports (the application's own spans) are dropped.
        for provider, switch in ((self.tracer_provider, _process.span_switch),
                                 (self.meter_provider, _process.metric_switch)):
            if provider is not None and switch is not None:
                try:
                    switch.shutdown()
                except Exception as exc:  # observability never breaks the caller, even at exit
                    _log.warning("adaptive_runtime telemetry shutdown: %r", exc)
        if self._prometheus_server is not None:
            self._prometheus_server.shutdown()
            self._prometheus_server.server_close()
        self._report_losses(time.monotonic() - started, spans_unsent, metrics_unsent)

    def _report_losses(self, took_s: float, spans_unsent: int, metrics_unsent: bool) -> None:
        """One warning line if anything admitted since :func:`configure` was not sent."""
        now, before = stats(), self._baseline
        if before is None:
            return
        spans = now.spans_dropped - before.spans_dropped
        metric_exports = (now.metric_exports_failed - before.metric_exports_failed
                          + int(metrics_unsent))
        if not spans and not metric_exports:
            return
        lost = [f"{spans:,} span{'s' * (spans != 1)}"] if spans else []
        if metric_exports:
            lost.append(f"{metric_exports} metric export{'s' * (metric_exports != 1)}")
        where = self.traces_destination or self.metrics_destination or "the exporter"
        why = ("unreachable or too slow" if spans_unsent or metrics_unsent or spans > (
            now.dropped["queue_full"] - before.dropped["queue_full"]) else "export queue full")
        _shutdown_log.warning(
            "adaptive_runtime: telemetry shutdown after %.1f s: %s not sent (collector at %s "
            "%s); counts: ar.telemetry.stats()", took_s, " and ".join(lost), where, why)


class _Bounded:
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
class _ProcessProviders:
    """The global providers configure() installed: made once, kept until exit."""

    resource: Resource | None = None
    tracer_provider: TracerProvider | None = None
    span_switch: SwitchableSpanExporter | None = None
    meter_provider: MeterProvider | None = None
    metric_switch: SwitchableMetricExporter | None = None
    metrics_interval_s: float | None = None
    prometheus: bool = False  # whether the meter provider has a Prometheus reader
    periodic_reader: PeriodicExportingMetricReader | None = None
    # makes the span exporter afresh in a forked child (None: the inherited one serves there);
    # not in repr: it holds the headers (credentials) and the environment
    span_exporter_remake: Callable[[], SpanExporter] | None = field(default=None, repr=False)
    metrics_stopped: bool = False  # a forked child: the meter provider exports nothing
    span_processor: BoundedSpanProcessor | None = None

    def shutdown(self, timeout_s: float) -> None:
        """Stop the providers' threads, within ``timeout_s`` (their exporters were stopped
        first: nothing is left to send)."""
        deadline = time.monotonic() + timeout_s
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()  # (our processor: stops its worker, no wait)
        if self.meter_provider is not None and not self.metrics_stopped:
            # (the reader joins its thread, which may still be in an export that ends only
            # with the exporter's own timeout: waited for until the deadline, no longer)
            _Bounded(lambda millis: self.meter_provider.shutdown(timeout_millis=millis),
                     deadline).finished(deadline)


_lock = threading.Lock()
_current: Telemetry | None = None
_process = _ProcessProviders()
# what a forked child inherited and must never close or finalise: its connections, threads and
# files are the parent's
_inherited: list[Any] = []


def configure(service_name: str | None = None, endpoint: str | None = None,
              prometheus_port: int | bool | None = None, *, protocol: str | None = None,
              headers: dict[str, str] | None = None, directory: str | None = None,
              metrics_interval_s: float = 10.0, prometheus_host: str | None = None,
              traces_exporter: str | None = None, metrics_exporter: str | None = None,
              environ: dict[str, str] | None = None,
              shutdown_timeout_s: float | None = None,
              default_service_name: str | None = None) -> Telemetry:
    """Set up tracing and metrics export for adaptive_runtime (see the module docstring).

    ``service_name`` names the service whatever the environment says;
    ``default_service_name`` only where ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``
    name none (a script's own name for itself).

    Calling it again sends what follows to the new destination (after flushing the earlier
    one). Every setting is checked before anything is installed: :class:`ConfigError` for a
    bad protocol, exporter, port, interval or resource attribute names the argument or
    variable it came from.
    """
    global _current
    env = os.environ if environ is None else environ
    _check_arguments(service_name=service_name, endpoint=endpoint, headers=headers,
                     directory=directory, prometheus_host=prometheus_host,
                     default_service_name=default_service_name,
                     metrics_interval_s=metrics_interval_s)
    disabled = env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
    if not disabled:  # validate everything first: a bad setting installs nothing
        trace_protocol = _protocol("TRACES", protocol, env)
        metric_protocol = _protocol("METRICS", protocol, env)
        traces_choice = _exporter_choice("TRACES", traces_exporter, env)
        metrics_choice = _exporter_choice("METRICS", metrics_exporter, env)
        port = _prometheus_port(prometheus_port, env)
        if port is None and metrics_choice == "prometheus":
            port = _otel_prometheus_port(env)
        host = prometheus_host or env.get("OTEL_EXPORTER_PROMETHEUS_HOST", "").strip() \
            or DEFAULT_PROMETHEUS_HOST
        check_header_settings(headers, env)  # (its errors never show a header's value)
        resource = make_resource(service_name, default_service_name, env)
    with _lock:
        if not disabled:
            batch = batch_settings(env)
            bound = resolve_shutdown_timeout(shutdown_timeout_s, env)
        if _current is not None:
            _current.shutdown()  # (within the bound it was configured with)
            _current = None
        set_shutdown_timeout_s(DEFAULT_SHUTDOWN_TIMEOUT_S if disabled else bound)
        if disabled:
            _current = Telemetry(enabled=False)
            return _current

        # The scrape endpoint first: a port already taken (another rank's) is a warning and
        # no endpoint, decided before any provider is installed.
        server = None
        if port is not None and not _app_has_meter_provider() and (
                _process.meter_provider is None or _process.prometheus):
            server = _serve_prometheus(port, host)
            if server is None:
                port = None
        folder = directory or env.get("ADAPTIVE_RUNTIME_TELEMETRY_DIR") or DEFAULT_DIRECTORY
        telemetry = Telemetry(enabled=True)
        record_spans = True

        if _app_has_tracer_provider():
            _log.info("adaptive_runtime: keeping the application's tracer provider")
        elif traces_choice == "none":
            # No provider installed (our earlier one, if any, was switched to dropping by
            # the shutdown above), and runtimes make no spans only to have them dropped.
            record_spans = False
        else:
            exporter, telemetry.traces_destination = _span_exporter(
                traces_choice, endpoint, trace_protocol, headers, folder, env)
            telemetry.tracer_provider = _install_tracer_provider(resource, exporter, batch)
            # (the file and console exporters serve a forked child as they are; a network
            # exporter's connections would be shared with the parent)
            _process.span_exporter_remake = (
                None if isinstance(exporter, OtlpJsonFileSpanExporter | ConsoleSpanExporter)
                else functools.partial(_remake_span_exporter, traces_choice, endpoint,
                                       trace_protocol, headers, folder, env))

        if _app_has_meter_provider():
            _log.info("adaptive_runtime: keeping the application's meter provider")
        else:
            metric_exporter: MetricExporter | None = None
            if metrics_choice not in ("none", "prometheus"):
                metric_exporter, telemetry.metrics_destination = _metric_exporter(
                    metrics_choice, endpoint, metric_protocol, headers, folder, env)
            telemetry.meter_provider = _install_meter_provider(
                resource, metric_exporter, telemetry.metrics_destination, metrics_interval_s,
                port is not None)
            if _process.metric_switch is None:  # no periodic export in this process
                telemetry.metrics_destination = None
            if server is not None and _process.prometheus:
                telemetry._prometheus_server = server
                telemetry.prometheus_port = server.server_address[1]
                server = None
        if server is not None:  # (not used after all: the application's meter provider)
            server.shutdown()
            server.server_close()

        telemetry._baseline = stats()
        _current = telemetry
    quiet_repeated_exporter_logs()
    instrumentation.activate(spans=record_spans)
    return telemetry


def shutdown(timeout_s: float | None = None) -> None:
    """Flush and stop what :func:`configure` set up (also runs at interpreter exit), within
    ``timeout_s`` (default: ``shutdown_timeout_s``; see :meth:`Telemetry.shutdown`)."""
    global _current
    with _lock:
        current, _current = _current, None
    if current is not None:
        current.shutdown(timeout_s)


def _at_exit() -> None:
    # (one deadline for the whole exit, the runtimes' own at-exit flushes included)
    deadline = exit_deadline()
    try:
        shutdown(remaining(deadline))
        with _lock:
            _process.shutdown(remaining(deadline))
    except Exception as exc:  # never turn a clean exit into a traceback
        _log.warning("adaptive_runtime telemetry shutdown at exit: %r", exc)


# Registered at import, before any span recorder exists: atexit runs handlers last-in
# first-out, so the recorders' own flushes come first and this one shuts the providers last
# (they are made with shutdown_on_exit=False; the SDK's handler would run too early, twice).
atexit.register(_at_exit)


# ---------------------------------------------------------------------------- forked children


def _after_fork_in_child() -> None:
    """Right after a fork, in the child (registered at import, see ``_forks``)."""
    global _lock
    _lock = threading.Lock()  # (another thread may have been configuring at the fork)
    switch, remake = _process.span_switch, _process.span_exporter_remake
    if switch is not None and remake is not None and switch.target is not None:
        # The inherited OTLP exporter's pooled connection (or gRPC channel) is the parent's:
        # two processes writing requests into one connection read each other's answers.
        # Kept referenced, never closed or finalised here; the child's own is made on its
        # first export, on the SDK's export thread rather than inside the fork.
        _inherited.append(switch.switch(_MadeOnFirstUse(remake)))
    current = _current
    if current is not None and current._prometheus_server is not None:
        # No thread serves it here: shutdown() would wait for one forever. Close this
        # process's copy of the listening socket (the parent's keeps serving).
        server, current._prometheus_server = current._prometheus_server, None
        try:
            server.server_close()
        except OSError as exc:
            _log.debug("adaptive_runtime: closing the inherited Prometheus socket: %r", exc)
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is not None:
        # A multiprocessing child (a DataLoader worker) clears its finalizers as it starts,
        # then runs the after-fork hooks registered for it: ours registers the exit flush.
        mp_util.register_after_fork(_process, _at_worker_start)


after_fork_in_child(_after_fork_in_child)


def _stop_metric_export_in_child() -> None:
    """A forked child exports no metrics (see the module docstring); registered once the
    periodic reader exists."""
    _process.metrics_stopped = True
    switch = _process.metric_switch
    if switch is not None:
        # (the inherited exporter's connection or file is the parent's: dropped, not closed)
        _inherited.append(switch.switch(None))
    reader = _process.periodic_reader
    if reader is not None:
        try:
            # Public API only: the SDK restarted the reader's thread in this child; this
            # stops it (its last collection exports into the dropping switch).
            reader.shutdown(timeout_millis=_CHILD_READER_STOP_MS)
        except Exception as exc:  # observability never breaks the caller
            _log.debug("adaptive_runtime: stopping the metric reader in a child: %r", exc)


def _at_worker_start(_process_providers: _ProcessProviders) -> None:
    from multiprocessing.util import Finalize

    # exitpriority >= 0: run by the worker's exit, before its queues are closed (10)
    Finalize(None, _flush_at_worker_exit, exitpriority=20)


def _flush_at_worker_exit(timeout_s: float = WORKER_EXIT_FLUSH_S) -> None:
    """A multiprocessing worker ends: hand its queued spans to the SDK and export them,
    waiting at most ``timeout_s``."""
    if not instrumentation.is_active():
        return

    def flush() -> None:
        deadline = time.monotonic() + timeout_s
        try:
            flush_all(timeout_s)
            provider = _process.tracer_provider or trace.get_tracer_provider()
            force_flush = getattr(provider, "force_flush", None)
            if force_flush is not None:
                force_flush(max(int((deadline - time.monotonic()) * 1000), 0))
        except Exception as exc:  # never break the worker's exit
            _log.debug("adaptive_runtime: flushing spans as a worker ends: %r", exc)

    # (on a thread of its own: an exporter's own timeout may be longer than ours, and the
    # process ends right after, daemon threads and all)
    thread = threading.Thread(target=flush, name="adaptive-runtime-exit-flush", daemon=True)
    thread.start()
    thread.join(timeout_s)


class _MadeOnFirstUse(SpanExporter):
    """A span exporter made by ``make()`` on the first export (a forked child's own)."""

    def __init__(self, make: Callable[[], SpanExporter]) -> None:
        self._make = make
        self._exporter: SpanExporter | None = None

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._exporter is None:
            self._exporter = self._make()
        return self._exporter.export(spans)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._exporter.force_flush(timeout_millis) if self._exporter else True

    def shutdown(self) -> None:
        if self._exporter is not None:
            self._exporter.shutdown()


# ---------------------------------------------------------------------------- providers


def _install_tracer_provider(resource: Resource, exporter: SpanExporter,
                             batch: tuple[int, int, float]) -> TracerProvider:
    if _process.tracer_provider is None:
        switch = SwitchableSpanExporter()
        provider = TracerProvider(resource=resource, shutdown_on_exit=False)
        queue_size, batch_size, delay_s = batch
        processor = BoundedSpanProcessor(switch, max_queue_size=queue_size,
                                         max_export_batch_size=batch_size,
                                         schedule_delay_s=delay_s,
                                         is_runtime_span=is_runtime_span)
        provider.add_span_processor(processor)
        trace.set_tracer_provider(provider)
        _process.tracer_provider, _process.span_switch = provider, switch
        _process.span_processor = processor
        _process.resource = resource
        use_processor(processor)
    else:
        _warn_if_changed("the resource (service name)", _process.resource, resource)
    assert _process.span_switch is not None and _process.span_processor is not None
    _process.span_switch.switch(exporter)
    _process.span_processor.reopen()
    return _process.tracer_provider


def _install_meter_provider(resource: Resource, exporter: MetricExporter | None,
                            destination: str | None, interval_s: float,
                            prometheus: bool) -> MeterProvider | None:
    """The global meter provider exporting to ``exporter`` (``None``: no periodic export,
    ``OTEL_METRICS_EXPORTER=none``); ``None`` when there is nothing to read metrics for."""
    if _process.meter_provider is None:
        switch = None
        readers: list[MetricReader] = []
        periodic = None
        if exporter is not None:
            switch = SwitchableMetricExporter(exporter, destination)
            periodic = PeriodicExportingMetricReader(
                switch, export_interval_millis=interval_s * 1000.0)
            readers.append(periodic)
        if prometheus:
            from .prometheus import exemplar_reader

            readers.append(exemplar_reader())
        if not readers:
            # (the runtimes' instruments stay no-ops of the API's proxy provider; a later
            # configure() that exports metrics installs the provider and they follow)
            return None
        provider = MeterProvider(resource=resource, metric_readers=readers,
                                 shutdown_on_exit=False)
        metrics.set_meter_provider(provider)
        _process.meter_provider, _process.metric_switch = provider, switch
        _process.periodic_reader = periodic
        # Registered after the SDK's own fork hooks of the reader and the provider (made just
        # now), so it runs after them: the reader's thread the SDK restarts in a child is
        # there to be stopped. (Once per process: the provider is made once.)
        after_fork_in_child(_stop_metric_export_in_child)
        _process.metrics_interval_s, _process.prometheus = interval_s, prometheus
        if _process.resource is None:
            _process.resource = resource
        return provider
    _warn_if_changed("the resource (service name)", _process.resource, resource)
    _warn_if_changed("metrics_interval_s", _process.metrics_interval_s, interval_s)
    if prometheus and not _process.prometheus:
        _log.warning("adaptive_runtime: no Prometheus endpoint — only the first configure() "
                     "in a process can add one (its meter provider is global and fixed)")
    if _process.metric_switch is not None:
        _process.metric_switch.switch(exporter, destination)
    elif exporter is not None:
        _log.warning("adaptive_runtime: metrics are not exported — the first configure() in "
                     "a process decides whether they are (OTEL_METRICS_EXPORTER=none there; "
                     "its meter provider is global and fixed)")
        exporter.shutdown()  # never used: close its connection pool or file now
    return _process.meter_provider


def _warn_if_changed(what: str, first: Any, now: Any) -> None:
    if first is not None and first != now:
        _log.warning("adaptive_runtime: %s stays as the first configure() set it (the "
                     "OpenTelemetry API accepts one global provider per process)", what)


def _serve_prometheus(port: int, host: str) -> Any:
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


# ---------------------------------------------------------------------------- exporters


def _endpoint(signal: str, endpoint: str | None, env: Any) -> str | None:
    return (endpoint or env.get(f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT")
            or env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None)


def _check_arguments(*, metrics_interval_s: object, headers: object,
                     **texts: object) -> None:
    """:class:`ConfigError` naming the first argument of ``configure()`` of the wrong type or
    out of range (checked before anything is set up)."""
    for name, value in texts.items():
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{name} must be a str (or None), got {value!r}", field=name)
    if headers is not None and not (
            isinstance(headers, Mapping)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items())):
        # (the values are secrets: never shown)
        raise ConfigError("headers must be a dict of str names to str values",
                          field="headers")
    interval = metrics_interval_s
    # (at most a year: the SDK's reader thread waits this long, and a wait past what the
    # platform's clock can hold raises on that thread)
    if (isinstance(interval, bool) or not isinstance(interval, int | float)
            or not 0 < interval <= _MAX_METRICS_INTERVAL_S):
        shown = f"an int of {interval.bit_length()} bits" if isinstance(interval, int) \
            and interval.bit_length() > 1000 else repr(interval)
        raise ConfigError(f"metrics_interval_s must be a number > 0 and <= "
                          f"{_MAX_METRICS_INTERVAL_S:g} (a year), got {shown}",
                          field="metrics_interval_s")


def _exporter_choice(signal: str, argument: str | None, env: Any) -> str | None:
    """``otlp``, ``console``, ``none`` (metrics: also ``prometheus``) from the argument, else
    ``OTEL_{signal}_EXPORTER``; ``None`` when neither is set (the default: an endpoint →
    OTLP, else the files)."""
    exporters = _EXPORTERS[signal]
    accepted = ", ".join(exporters)
    for source, raw in ((f"{signal.lower()}_exporter={argument!r}", argument),
                        (f"OTEL_{signal}_EXPORTER", env.get(f"OTEL_{signal}_EXPORTER"))):
        if raw is not None and not isinstance(raw, str):
            raise ConfigError(f"{source}: the exporter must be one of {accepted}, a str")
        if raw is None or not raw.strip():
            continue
        values = [value.strip().lower() for value in raw.split(",") if value.strip()]
        if len(values) != 1:
            raise ConfigError(f"{source}: one exporter per signal is supported, one of "
                              f"{accepted}; got the list {raw!r}")
        if values[0] not in exporters:
            hint = (" (Prometheus scrapes metrics: OTEL_METRICS_EXPORTER=prometheus)"
                    if values[0] == "prometheus" else "")
            raise ConfigError(f"{source}: the exporter must be one of {accepted} (a single "
                              f"value), got {raw!r}{hint}")
        return values[0]
    return None


def _protocol(signal: str, protocol: str | None, env: Any) -> str:
    for source, value in ((f"protocol={protocol!r}", protocol),
                          (f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL",
                           env.get(f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL")),
                          ("OTEL_EXPORTER_OTLP_PROTOCOL", env.get("OTEL_EXPORTER_OTLP_PROTOCOL"))):
        if value:
            value = value.strip().lower() if isinstance(value, str) else value
            if value not in _PROTOCOLS:
                raise ConfigError(f"{source}: the OTLP protocol must be one of "
                                  f"{', '.join(_PROTOCOLS)}, got {value!r}")
            return value
    return "http/protobuf"


def _http_url(endpoint: str, path: str, signal: str, env: Any, explicit: str | None) -> str:
    # The generic endpoint is a base URL the signal path is appended to; a signal-specific
    # one (or an explicit argument ending in the path) is used as it is.
    if env.get(f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT") and not explicit:
        return endpoint
    base = endpoint.rstrip("/")
    return base if base.endswith(path) else base + path


def _remake_span_exporter(choice: str | None, endpoint: str | None, protocol: str,
                          headers: dict[str, str] | None, folder: str,
                          env: Any) -> SpanExporter:
    return _span_exporter(choice, endpoint, protocol, headers, folder, env)[0]


# gRPC waits up to 120 s (growing with each failure) before it dials a collector that went
# away again: a collector back after a restart would see nothing for minutes, every export
# in between failing unsent. Dial again within 2 s instead.
GRPC_RECONNECT: Any = (("grpc.initial_reconnect_backoff_ms", 250),
                       ("grpc.min_reconnect_backoff_ms", 250),
                       ("grpc.max_reconnect_backoff_ms", 2000))


def _span_exporter(choice: str | None, endpoint: str | None, protocol: str,
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


def _metric_exporter(choice: str | None, endpoint: str | None, protocol: str,
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
    # Our own requests session, whose response hook tells the switch the HTTP status of a
    # failed export (404: no metrics service there), and which lets the configured CA win
    # over REQUESTS_CA_BUNDLE. Not when a credential provider supplies the session: the SDK
    # reads that variable and it must win.
    if not _credential_provider_set("METRICS"):
        session = otlp_http_session()
        session.hooks["response"].append(note_http_status)
    return HttpMetricExporter(endpoint=full, headers=headers, session=session), shown_url(full)


def _credential_provider_set(signal: str) -> bool:
    return any(os.environ.get(f"OTEL_PYTHON_EXPORTER_OTLP_HTTP{kind}_CREDENTIAL_PROVIDER")
               for kind in ("", f"_{signal}"))


def _app_has_tracer_provider() -> bool:
    return (instrumentation.app_has_sdk_provider()
            and trace.get_tracer_provider() is not _process.tracer_provider)


def _app_has_meter_provider() -> bool:
    provider = metrics.get_meter_provider()
    return (instrumentation.records_metrics(provider)
            and provider is not _process.meter_provider)


def _prometheus_port(port: int | bool | None, env: Any) -> int | None:
    source = "prometheus_port"
    if port is None:
        raw = env.get("ADAPTIVE_RUNTIME_PROMETHEUS_PORT", "").strip()
        if not raw:
            return None
        source = "ADAPTIVE_RUNTIME_PROMETHEUS_PORT"
        if raw.lower() in ("on", "true", "yes", "default"):
            return DEFAULT_PROMETHEUS_PORT
        try:
            port = int(raw)
        except ValueError:
            raise ConfigError(f"{source}={raw!r} is not a port number (0-65535) or "
                              f"'on' (port {DEFAULT_PROMETHEUS_PORT})") from None
    if port is True:
        return DEFAULT_PROMETHEUS_PORT
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigError(f"{source} must be a port number 0-65535 (or True for "
                          f"{DEFAULT_PROMETHEUS_PORT}), got {port!r}", field="prometheus_port")
    return port


def _otel_prometheus_port(env: Any) -> int:
    """``OTEL_EXPORTER_PROMETHEUS_PORT`` (``OTEL_METRICS_EXPORTER=prometheus``), default 9464."""
    raw = env.get("OTEL_EXPORTER_PROMETHEUS_PORT", "").strip()
    if not raw:
        return DEFAULT_PROMETHEUS_PORT
    try:
        port = int(raw)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ConfigError(f"OTEL_EXPORTER_PROMETHEUS_PORT={raw!r} is not a port number "
                          f"(0-65535)")
    return port
