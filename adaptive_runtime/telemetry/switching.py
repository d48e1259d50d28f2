"""Exporters that forward to a replaceable target.

The OpenTelemetry API accepts one global tracer provider and one meter provider per process.
``configure()`` therefore installs its providers once and, when called again, changes where
they send by switching the exporter inside them — the application's own tracers and meters,
obtained from the global API, follow along instead of writing into a shut-down provider.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

__all__ = ["SwitchableMetricExporter", "SwitchableSpanExporter"]


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


class SwitchableSpanExporter(_Switch, SpanExporter):
    """A span exporter forwarding to the span exporter set by :meth:`switch`."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        target = self.target
        return target.export(spans) if target is not None else SpanExportResult.SUCCESS


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
        return target.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
