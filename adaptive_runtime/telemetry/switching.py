"""Exporters that forward to a replaceable target.

The OpenTelemetry API accepts one global tracer provider and one meter provider per process.
``configure()`` therefore installs its providers once and, when called again, changes where
they send by switching the exporter inside them — the application's own tracers and meters,
obtained from the global API, follow along instead of writing into a shut-down provider.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

__all__ = ["SwitchableMetricExporter", "SwitchableSpanExporter", "export_cost_us_per_span",
           "quiet_repeated_exporter_logs", "spans_lost_in_export"]

_log = logging.getLogger(__name__)

# CPU one span costs the exporter until ours has measured it (or when the application's own
# exporter does the work, which we cannot see): the OTel Python OTLP encoder takes ~65 us per
# span of ours on the project's CI machine.
ASSUMED_EXPORT_COST_US = 65.0
_measured_export_cost_us: float | None = None


def export_cost_us_per_span() -> float:
    """Exporter CPU per span: measured by configure()'s exporter, else assumed."""
    measured = _measured_export_cost_us
    return ASSUMED_EXPORT_COST_US if measured is None else measured


def _record_export_cost(cpu_ns: int, spans: int) -> None:
    global _measured_export_cost_us
    if spans <= 0:
        return
    cost = cpu_ns / spans / 1000.0
    previous = _measured_export_cost_us
    _measured_export_cost_us = cost if previous is None else previous + 0.25 * (cost - previous)


class _Switch:
    """The current target; ``None`` drops what is exported (telemetry shut down)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.target: Any = None

    def switch(self, target: Any) -> Any:
        """Send to ``target`` from now on; return the previous target (not shut down)."""
        with self._lock:
            previous, self.target = self.target, target
        return previous

    def force_flush(self, timeout_millis: float = 30_000) -> bool:
        target = self.target
        return target.force_flush(timeout_millis) if target is not None else True

    def shutdown(self, *args: Any, **kwargs: Any) -> None:
        previous = self.switch(None)
        if previous is not None:
            previous.shutdown(*args, **kwargs)


# ---------------------------------------------------------------------------- outages


class _OnePerOutage(logging.Filter):
    """Lets the first warning of an export outage through; later ones are dropped (the spans
    they lose are counted) until an export succeeds again."""

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
_lost = itertools.count()  # spans an export failed to deliver


def spans_lost_in_export() -> int:
    """Spans that configure()'s exporter failed to deliver (collector down, refusing, ...)."""
    return int(repr(_lost)[6:-1])


def quiet_repeated_exporter_logs() -> None:
    """Apply the one-warning-per-outage rule to the OTLP exporters' own loggers (which would
    otherwise log every failed batch while a collector is down)."""
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("opentelemetry.exporter.otlp"):
            logger = logging.getLogger(name)
            if _outage not in logger.filters:
                logger.addFilter(_outage)


def _delivered(result: Any, spans: int) -> None:
    if result is SpanExportResult.SUCCESS:
        if _outage.logged:
            _outage.logged = False
            _log.info("adaptive_runtime: span export works again (%d spans lost so far)",
                      spans_lost_in_export())
        return
    for _ in range(spans):
        next(_lost)


class SwitchableSpanExporter(_Switch, SpanExporter):
    """A span exporter forwarding to the span exporter set by :meth:`switch`. Never raises:
    a failed export counts its spans (:func:`spans_lost_in_export`) and warns once per
    outage."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        target = self.target
        if target is None:
            return SpanExportResult.SUCCESS
        # CPU time of this thread (not the wait for the network): what exporting takes from
        # the loop through the GIL, fed back into the trace gate's CPU budget
        started = time.thread_time_ns()
        try:
            result = target.export(spans)
        except Exception as exc:  # an exporter bug must not kill the SDK's export thread
            _log.warning("adaptive_runtime: span export failed: %r (spans lost are counted)",
                         exc)
            result = SpanExportResult.FAILURE
        _record_export_cost(time.thread_time_ns() - started, len(spans))
        _delivered(result, len(spans))
        return result


class SwitchableMetricExporter(_Switch, MetricExporter):
    """A metric exporter forwarding to the metric exporter set by :meth:`switch`.

    Temporality and aggregation preferences are those of the first target (the reader around
    it reads them once, when it is made).
    """

    def __init__(self, first: MetricExporter) -> None:
        _Switch.__init__(self)
        MetricExporter.__init__(self, preferred_temporality=first._preferred_temporality,
                                preferred_aggregation=first._preferred_aggregation)
        self.target = first

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000,
               **kwargs: Any) -> MetricExportResult:
        target = self.target
        if target is None:
            return MetricExportResult.SUCCESS
        try:
            return target.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
        except Exception as exc:  # (counters are cumulative: the next export catches up)
            _log.warning("adaptive_runtime: metric export failed: %r", exc)
            return MetricExportResult.FAILURE
