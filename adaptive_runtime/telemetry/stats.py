"""``ar.telemetry.stats()``: where every admitted span went, and the metric exports.

Counted where each thing happens (the trace gates' admissions as records are queued, the
export queue's drops as spans arrive, exports as they answer), never derived by subtraction,
so the identity

    spans_admitted == spans_exported + spans_dropped + spans_pending + spans_elsewhere

is a check, exact whenever nothing is in motion (after a flush or shutdown; while spans are
being made or exported, a reading can catch one between two counters).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from .._concurrency.thread_faults import fault_counts, restart_counts
from .spans import recorder_counts

__all__ = ["TelemetryStats", "export_losses", "report_exports", "stats"]


class ExportCounts(Protocol):
    """What is read of configure()'s span processor
    (``adaptive_runtime_sdk.export.BoundedSpanProcessor``; typed by this Protocol so that this
    module imports nothing of the SDK side)."""

    def counts(self) -> dict[str, int]:
        """``received`` (of which ``received_runtime``), ``exported``, ``pending`` and the
        drops by reason."""


class MetricExportCounts(Protocol):
    """What is read of configure()'s metric exporter
    (``adaptive_runtime_sdk.exporters.GuardedMetricExporter``)."""

    def export_counts(self) -> tuple[int, int]:
        """``(attempted, failed)`` metric exports."""


_processor: ExportCounts | None = None
_metric_exporter: MetricExportCounts | None = None


def report_exports(processor: ExportCounts | None = None,
                   metric_exporter: MetricExportCounts | None = None) -> None:
    """The span processor and the metric exporter ``configure()`` installed (set once per
    process): their counts are reported from now on. Until then no export was attempted and
    every count is 0; this is how the counts reach here without this module importing the
    SDK side."""
    global _processor, _metric_exporter
    _processor, _metric_exporter = processor, metric_exporter


@dataclass(frozen=True)
class TelemetryStats:
    """Spans and metric exports of this process since it started.

    - ``spans_admitted``: spans the runtimes' trace gates admitted, plus the application's own
      spans ended on the tracer provider ``configure()`` installed;
    - ``spans_exported``: acknowledged by the collector (or written, for the files);
    - ``spans_dropped``: lost, by reason in ``dropped``: ``buffer_full`` (a runtime's span
      buffer), ``queue_full`` (the export queue, while the collector was slow or down),
      ``export_failed`` (the exporter gave up after its retries), ``shutdown`` (not sent when
      the shutdown deadline passed, or admitted after shutdown), ``error`` (the SDK raised
      making it), ``not_recorded`` (the SDK did not record it: an unsampled parent span);
    - ``spans_pending``: in a buffer, in the export queue, or in an export now;
    - ``spans_elsewhere``: handed to a tracer provider ``configure()`` did not install (the
      application's own): what happens to them there is that provider's business;
    - ``metric_exports`` / ``metric_exports_failed``: periodic and final metric exports;
    - ``thread_faults``: exceptions caught in the package's threads, by thread (``spans``,
      ``export``, ``metrics``, ``history``, ``thread_watch``): each was logged once per kind,
      and the thread went on; what it cost shows in the span counts above (``error``);
    - ``threads_restarted``: threads started again after ending abnormally, by thread.
    """

    spans_admitted: int
    spans_exported: int
    spans_dropped: int
    spans_pending: int
    spans_elsewhere: int
    dropped: Mapping[str, int] = field(default_factory=dict)
    metric_exports: int = 0
    metric_exports_failed: int = 0
    thread_faults: Mapping[str, int] = field(default_factory=dict)
    threads_restarted: Mapping[str, int] = field(default_factory=dict)

    @property
    def balanced(self) -> bool:
        """Whether every admitted span is accounted for (see the module docstring)."""
        return self.spans_admitted == (self.spans_exported + self.spans_dropped
                                       + self.spans_pending + self.spans_elsewhere)


def stats() -> TelemetryStats:
    """Count of every span admitted in this process, where it went, metric exports, and the
    faults the package's threads survived."""
    recorded = recorder_counts()
    processor = _processor
    exported = {"received": 0, "received_runtime": 0, "exported": 0, "pending": 0,
                "queue_full": 0, "export_failed": 0, "shutdown": 0}
    if processor is not None:
        exported = processor.counts()
    dropped = {
        "buffer_full": recorded["buffer_full"],
        "queue_full": exported["queue_full"],
        "export_failed": exported["export_failed"],
        "shutdown": recorded["shutdown"] + exported["shutdown"],
        "error": recorded["error"],
        "not_recorded": recorded["not_recorded"],
    }
    application = exported["received"] - exported["received_runtime"]
    metric_exporter = _metric_exporter
    attempted, failed = metric_exporter.export_counts() if metric_exporter else (0, 0)
    return TelemetryStats(
        spans_admitted=recorded["admitted"] + application,
        spans_exported=exported["exported"],
        spans_dropped=sum(dropped.values()),
        spans_pending=recorded["pending"] + exported["pending"],
        spans_elsewhere=max(recorded["made"] - exported["received_runtime"], 0),
        dropped=dropped, metric_exports=attempted, metric_exports_failed=failed,
        thread_faults=fault_counts(), threads_restarted=restart_counts())


def export_losses() -> dict[str, int]:
    """Spans lost past the runtimes' buffers, process-wide, by reason, for the
    ``adaptive.span.suppressed`` metric: ``export_failed`` (configure()'s exporter gave up),
    ``queue_full`` and ``shutdown`` (its export queue)."""
    processor = _processor
    counts = processor.counts() if processor is not None else {}
    return {reason: counts.get(reason, 0) for reason in ("export_failed", "queue_full",
                                                         "shutdown")}
