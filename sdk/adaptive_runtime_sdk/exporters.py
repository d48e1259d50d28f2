"""What ``configure()`` puts around the SDK's exporters: what they do not do for an outage.

- One warning per outage: the OTLP exporters log every failed batch while a collector is
  down; their loggers get a filter (:func:`quiet_repeated_exporter_logs`) that lets the first
  warning through, drops the rest (the spans they lose are counted by the span processor,
  ``ar.telemetry.stats().dropped["export_failed"]``) and says "works again" once an export
  succeeds.
- A traces-only backend: an endpoint with no OTLP metrics service at all (Jaeger: gRPC
  ``UNIMPLEMENTED``, HTTP 404/405) is not an outage that will end. The metric exporter says
  so once, in one line, and stops metric export instead of failing every interval.
- A forked child: the inherited OTLP span exporter's connections are the parent's, so the
  child's is made afresh (``lifecycle`` replaces the target); a child exports no metrics.
- Shutdown waits a moment for an export in progress before closing its exporter (closing a
  gRPC channel under an export made it fail and log "Channel closed!" at the end of a healthy
  run).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from adaptive_runtime._concurrency.counters import counter, issued
from adaptive_runtime._concurrency.forks import renew_after_fork
from adaptive_runtime._concurrency.thread_faults import survive
from adaptive_runtime._imported import imported
from adaptive_runtime.telemetry.stats import stats

__all__ = ["GuardedMetricExporter", "GuardedSpanExporter", "note_http_status",
           "quiet_repeated_exporter_logs"]

_log = logging.getLogger(__name__)
# The line saying metric export is off goes through a logger without the one-per-outage
# filter: it must always appear, and must not use up the warning of a later span outage.
_backend_log = logging.getLogger("adaptive_runtime.telemetry")


class _Guarded:
    """The exporter it forwards to (``target``); ``None`` drops what is exported (shut down,
    or a forked child's metrics)."""

    def __init__(self, target: Any) -> None:
        self.target = target
        self.exporting = 0  # exports in progress, waited for a moment before shutdown
        self._lock = threading.Lock()
        # (the metric reader's thread takes it when an endpoint refuses metrics: a forked
        # child gets its own, see adaptive_runtime._concurrency.forks)
        renew_after_fork(self, _Guarded._renew_lock)

    def _renew_lock(self) -> None:
        self._lock = threading.Lock()

    def replace(self, target: Any) -> Any:
        """Forward to ``target`` from now on (a forked child's own exporter, or ``None``);
        return the previous target, neither shut down nor closed."""
        with self._lock:
            previous, self.target = self.target, target
        return previous

    def force_flush(self, timeout_millis: float = 30_000) -> bool:
        target = self.target
        return target.force_flush(timeout_millis) if target is not None else True

    def shutdown(self, *args: Any, grace_s: float = 0.0, **kwargs: Any) -> None:
        """Drop what is exported from now on, and close the target after the export in
        progress ended, waiting ``grace_s`` at most."""
        previous = self.replace(None)
        deadline = time.monotonic() + grace_s
        while self.exporting and time.monotonic() < deadline:
            time.sleep(0.005)
        if previous is not None:
            previous.shutdown(*args, **kwargs)


# ---------------------------------------------------------------------------- outages


class _OnePerOutage(logging.Filter):
    """Lets the first warning of an export outage through; later ones are dropped until an
    export succeeds again."""

    def __init__(self) -> None:
        super().__init__()
        self.logged = False

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        if self.logged:
            return False
        self.logged = True
        return True


_outage = _OnePerOutage()
_log.addFilter(_outage)


def quiet_repeated_exporter_logs() -> None:
    """Apply the one-warning-per-outage rule to the OTLP exporters' own loggers, and drop
    what they log about a metric export refused as not implemented
    (:class:`GuardedMetricExporter` says it)."""
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("opentelemetry.exporter.otlp"):
            logger = logging.getLogger(name)
            if _refused_metrics not in logger.filters:
                # first: a filter that drops a record stops the chain, so the refusal never
                # counts as the one warning of an outage
                logger.filters.insert(0, _refused_metrics)
            if _outage not in logger.filters:
                logger.addFilter(_outage)


class GuardedSpanExporter(_Guarded, SpanExporter):
    """Forwards to a span exporter; a success after an outage says so once (see the module
    docstring). ``remake`` makes the exporter afresh (a forked child's own; ``None``: the
    inherited one serves there, as the file and console exporters do)."""

    def __init__(self, target: SpanExporter,
                 remake: Callable[[], SpanExporter] | None = None) -> None:
        super().__init__(target)
        self.remake = remake

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        target = self.target
        if target is None:
            return SpanExportResult.SUCCESS
        self.exporting += 1
        try:
            result = target.export(spans)
        finally:
            self.exporting -= 1
        if result is SpanExportResult.SUCCESS and _outage.logged:
            _outage.logged = False
            _log.info("adaptive_runtime: span export works again (%d spans lost so far)",
                      stats().dropped["export_failed"])
        return result


# ---------------------------------------------------------------------------- no metrics service

# HTTP answers meaning the endpoint has no route for OTLP metrics (a Collector or Jaeger
# without a metrics pipeline: 404; a route that takes no POST: 405), as opposed to an outage.
_HTTP_NOT_ACCEPTED = frozenset({404, 405})


class _ExportScope(threading.local):
    """What the metric export running on this thread has learnt about its answer.

    The OTLP exporters return only SUCCESS or FAILURE; why an export failed is seen on the
    way: the HTTP status through a ``requests`` response hook (:func:`note_http_status`), the
    gRPC status code as an argument of the record the exporter logs. Both happen on the
    thread that called ``export``, so a thread-local ties them to the call.
    """

    def __init__(self) -> None:
        self.active = False
        self.http_status: int | None = None
        self.unimplemented = False


_scope = _ExportScope()


def note_http_status(response: Any, *args: Any, **kwargs: Any) -> None:
    """``requests`` response hook for the OTLP/HTTP metric exporter's session: remember the
    status the endpoint answered the current metric export with."""
    if _scope.active:
        _scope.http_status = response.status_code


def _names_unimplemented(record: logging.LogRecord) -> bool:
    # The code itself, not the message's wording: the gRPC exporter logs a failed export with
    # the grpc.StatusCode among its arguments (and an RpcError as exc_info for some codes).
    # No gRPC exporter is in use unless grpc was imported.
    grpc = imported("grpc")
    if grpc is None:
        return False
    code = grpc.StatusCode.UNIMPLEMENTED
    if isinstance(record.args, tuple) and any(arg is code for arg in record.args):
        return True
    error = record.exc_info[1] if record.exc_info else None
    return isinstance(error, grpc.RpcError) and getattr(error, "code", lambda: None)() is code


class _RefusedMetrics(logging.Filter):
    """On the OTLP exporters' loggers: drops the warnings and errors of a metric export that
    the endpoint refused as not implemented, and notes the refusal for the exporter."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not _scope.active or record.levelno < logging.WARNING:
            return True
        if _scope.http_status in _HTTP_NOT_ACCEPTED or _names_unimplemented(record):
            _scope.unimplemented = True
            return False
        return True


_refused_metrics = _RefusedMetrics()


class GuardedMetricExporter(_Guarded, MetricExporter):
    """Forwards to a metric exporter, counting its exports (:meth:`export_counts`). An
    endpoint (``endpoint``, named in the warning) with no OTLP metrics service (gRPC
    ``UNIMPLEMENTED``, HTTP 404/405) is given up after its first export, with one warning;
    the exporters' own error lines about it are dropped."""

    def __init__(self, target: MetricExporter, endpoint: str | None = None) -> None:
        _Guarded.__init__(self, target)
        MetricExporter.__init__(self, preferred_temporality=target._preferred_temporality,
                                preferred_aggregation=target._preferred_aggregation)
        self.endpoint = endpoint
        self._attempted = counter()
        self._failed = counter()

    def export_counts(self) -> tuple[int, int]:
        """``(attempted, failed)``: the metric exports made (to a target) in this process."""
        return issued(self._attempted), issued(self._failed)

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000,
               **kwargs: Any) -> MetricExportResult:
        target = self.target
        if target is None:
            return MetricExportResult.SUCCESS
        _scope.active, _scope.http_status, _scope.unimplemented = True, None, False
        next(self._attempted)
        result = MetricExportResult.FAILURE
        try:  # (counters are cumulative: the next export catches up)
            with survive("metrics", "exporter"):
                self.exporting += 1
                try:
                    result = target.export(metrics_data, timeout_millis=timeout_millis,
                                           **kwargs)
                finally:
                    self.exporting -= 1
        finally:
            _scope.active = False
        status = _scope.http_status
        if result is not MetricExportResult.SUCCESS and (
                _scope.unimplemented or status in _HTTP_NOT_ACCEPTED):
            # (not a failure to count: there is no metrics service, and the warning says so)
            self._turn_off(target, f"HTTP {status}" if status in _HTTP_NOT_ACCEPTED
                           else "UNIMPLEMENTED")
        elif result is not MetricExportResult.SUCCESS:
            next(self._failed)
        return result

    def _turn_off(self, target: MetricExporter, reason: str) -> None:
        """Stop exporting metrics to ``target``, whose endpoint has no metrics service: it
        never will have one, so every interval would fail again."""
        with self._lock:
            if self.target is not target:  # shut down meanwhile
                return
            self.target = None
        _backend_log.warning(
            "adaptive_runtime: %s does not accept OTLP metrics (%s: a traces-only backend "
            "such as Jaeger); metrics export is off. Send metrics to an OpenTelemetry "
            "Collector, or set OTEL_METRICS_EXPORTER=none", self.endpoint or "the endpoint",
            reason)
        try:
            target.shutdown()  # its channel or connection pool is of no further use
        except Exception as exc:
            _log.debug("adaptive_runtime: closing the refused metric exporter: %r", exc)
