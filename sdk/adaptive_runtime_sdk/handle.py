"""The handle ``configure()`` returns — :class:`Telemetry`: what it set up, its shutdown within
a bound, and the one warning line saying what was not sent — and the process's one handle
(set once), which :func:`shutdown` shuts down.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider

from adaptive_runtime.telemetry import instrumentation
from adaptive_runtime.telemetry.deadline import flush_deadline, remaining
from adaptive_runtime.telemetry.deadline import shutdown_timeout_s as configured_shutdown_timeout_s
from adaptive_runtime.telemetry.spans import flush_all
from adaptive_runtime.telemetry.stats import TelemetryStats, stats

from .providers import Bounded, installed

__all__ = ["Telemetry", "shutdown"]

_log = logging.getLogger(__name__)
# At most this long, shutdown() lets an export in progress end before closing its exporter.
_EXPORT_GRACE_S = 0.5
# the one line saying what a shutdown could not send (not the exporters' outage filter's)
_shutdown_log = logging.getLogger("adaptive_runtime.telemetry")


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
        an exporter error): ``ar.telemetry.stats().dropped["export_failed"]``, also
        ``adaptive.span.suppressed{reason="export_failed"}``."""
        return stats().dropped["export_failed"]

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
        if self.meter_provider is not None and installed.metric_exporter is not None and not (
                self.meter_provider is installed.meter_provider and installed.metrics_stopped):
            # (a forked child's metric export is off, and collecting could wait on SDK locks
            # the parent's reader held at the fork)
            metric_flush = Bounded(self.meter_provider.force_flush, deadline)
        spans_unsent = 0
        processor = installed.span_processor
        if self.tracer_provider is not None and processor is not None:
            processor.close()  # (spans the application ends from now on: dropped, counted)
            if not processor.flush(remaining(deadline)):
                spans_unsent = processor.abandon()
        metrics_unsent = metric_flush is not None and not metric_flush.finished(deadline)
        # Stopping the exporters cuts short an export still retrying (its back-off wait, a
        # gRPC call); later exports (the application's own spans) are dropped.
        for provider, exporter in ((self.tracer_provider, installed.span_exporter),
                                   (self.meter_provider, installed.metric_exporter)):
            if provider is not None and exporter is not None:
                try:
                    # (an export in progress, to a live collector, ends first: a moment)
                    exporter.shutdown(grace_s=min(_EXPORT_GRACE_S, remaining(deadline)))
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


# What the first configure() set up (set once, under the lock), and the same while it is not
# shut down; a forked child renews the lock (``lifecycle``). All are read through this module
# (``handle._lock``), never imported by name: the child's lock is a new object.
_lock = threading.Lock()
_first: Telemetry | None = None
_current: Telemetry | None = None


def shutdown(timeout_s: float | None = None) -> None:
    """Flush and stop what :func:`configure` set up (also runs at interpreter exit), within
    ``timeout_s`` (default: ``shutdown_timeout_s``; see :meth:`Telemetry.shutdown`). Where
    the application set up its own tracer provider instead, the runtimes' queued spans are
    made into it and it is flushed; stopping it is the application's."""
    global _current
    with _lock:
        current, _current = _current, None
    if current is not None:
        current.shutdown(timeout_s)
    elif instrumentation.app_has_sdk_provider():
        _flush_into_app_provider(
            configured_shutdown_timeout_s() if timeout_s is None else timeout_s)


def _flush_into_app_provider(timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    try:
        flush_all(timeout_s)
        provider: Any = trace.get_tracer_provider()
        provider.force_flush(int(remaining(deadline) * 1000))
    except Exception as exc:  # (the application's provider: never break its shutdown)
        _log.warning("adaptive_runtime: flushing spans into the application's tracer "
                     "provider: %r", exc)
