"""Embedded-default exporters: spans and metrics as OTLP/JSON Lines files.

With no OTLP endpoint configured, telemetry still has to land somewhere useful. These exporters
write it to local files in exactly the format the OpenTelemetry Collector's ``file`` exporter
writes and its ``otlpjsonfile`` receiver reads: **one OTLP export request per line** (JSON Lines),
each line one ``ExportTraceServiceRequest`` / ``ExportMetricsServiceRequest`` in the OTLP/JSON
encoding (``otlp_json``; ``offline.report.otlp_files`` reads the files back). A run's file
can later be replayed into Jaeger (or any OTLP backend) by pointing a collector's
``otlpjsonfile`` receiver at it. How the file is written (appends, locking, forked children,
rotation at ``max_bytes``, failures logged once) is ``json_lines``'.

Upstream: open-telemetry/opentelemetry-python#3515 (file exporters, open; #3525, a JSON file
exporter, closed as its duplicate). PR #5207 since added ``opentelemetry-exporter-otlp-json-file``
(0.66b1, not a dependency here): it appends to one stream under a thread lock, with no size
bound and no lock across forked processes. ``tests/unit/test_upstream_gaps.py`` fails once it
takes more than a path and a stream.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from google.protobuf.message import Message
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.metrics import (
    Counter,
    Histogram,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    MetricExporter,
    MetricExportResult,
    MetricsData,
)
from opentelemetry.sdk.metrics.view import Aggregation
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from .json_lines import JsonLinesFile
from .otlp_json import dumps_line, to_otlp_json

__all__ = ["DEFAULT_MAX_BYTES", "OtlpJsonFileMetricExporter", "OtlpJsonFileSpanExporter"]

DEFAULT_MAX_BYTES = 256 * 1024 * 1024
"""Default rotation threshold: large enough for hours of sampled spans, small enough for a disk."""


class _OtlpJsonFileMixin:
    """Shared plumbing of the two exporters: the file, its counters and the export step."""

    _writer: JsonLinesFile

    @property
    def path(self) -> Path:
        """The file being written."""
        return self._writer.path

    @property
    def backup_path(self) -> Path:
        """Where the file is rotated to once it reaches ``max_bytes``."""
        return self._writer.backup_path

    @property
    def max_bytes(self) -> int | None:
        """Rotation threshold in bytes (``None``: never rotate)."""
        return self._writer.max_bytes

    @property
    def failed_exports(self) -> int:
        """Exports that could not be encoded or written (refusals after shutdown not included)."""
        return self._writer.failed_exports

    @property
    def lines_written(self) -> int:
        """Export requests successfully written (one line each)."""
        return self._writer.lines_written

    @property
    def rotations(self) -> int:
        """How many times the file has been rotated to ``backup_path``."""
        return self._writer.rotations

    def _export_message(self, encode: Callable[[Any], Message], data: Any) -> bool:
        if self._writer.closed:
            return False
        try:
            request = encode(data)
            tree = to_otlp_json(request)
            line = dumps_line(tree) if tree else None
        except Exception as exc:  # telemetry must never raise into the instrumented code
            self._writer.record_failure("encoding", exc)
            return False
        if line is None:
            return True  # an empty request carries nothing; a "{}" line would only be noise
        return self._writer.write_line(line)


class OtlpJsonFileSpanExporter(_OtlpJsonFileMixin, SpanExporter):
    """Span exporter writing one OTLP/JSON ``ExportTraceServiceRequest`` per line to ``path``.

    Plug it into a ``BatchSpanProcessor`` (one line per batch) or ``SimpleSpanProcessor`` (one line
    per span). See the module docstrings for the format (``otlp_json``), the rotation guard and
    failure handling (``json_lines``).

    Args:
        path: File to append to; parent directories are created on the first export.
        max_bytes: Rotate to ``<path>.1`` before the file would exceed this size; ``None`` never
            rotates.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, max_bytes: int | None = DEFAULT_MAX_BYTES
    ) -> None:
        self._writer = JsonLinesFile(path, max_bytes)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Append the spans as one line; ``FAILURE`` (never an exception) if that fails."""
        if not spans:
            return (
                SpanExportResult.FAILURE if self._writer.closed else SpanExportResult.SUCCESS
            )
        ok = self._export_message(encode_spans, spans)
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Flush written lines to disk (lines are already flushed to the OS on every export)."""
        return self._writer.flush()

    def shutdown(self) -> None:
        """Flush and close the file; later exports return ``FAILURE`` without writing."""
        self._writer.flush()
        self._writer.close()


def _cumulative_everywhere() -> dict[type, AggregationTemporality]:
    # Cumulative is the SDK default too; spelling it out keeps the files self-describing and
    # independent of any exporter-specific environment preference. Replaying cumulative data is
    # also safe: a lost line loses resolution, not totals.
    instruments = (
        Counter,
        UpDownCounter,
        Histogram,
        ObservableCounter,
        ObservableUpDownCounter,
        ObservableGauge,
    )
    return dict.fromkeys(instruments, AggregationTemporality.CUMULATIVE)


class OtlpJsonFileMetricExporter(_OtlpJsonFileMixin, MetricExporter):
    """Metric exporter writing one OTLP/JSON ``ExportMetricsServiceRequest`` per line to ``path``.

    Use it with a ``PeriodicExportingMetricReader`` (one line per collection). Temporality is
    cumulative for every instrument and aggregations are the SDK defaults unless overridden. See
    the module docstrings for the format (``otlp_json``), the rotation guard and failure
    handling (``json_lines``).

    Args:
        path: File to append to; parent directories are created on the first export.
        max_bytes: Rotate to ``<path>.1`` before the file would exceed this size; ``None`` never
            rotates.
        preferred_temporality: Per-instrument-class override (default: cumulative for all).
        preferred_aggregation: Per-instrument-class override (default: SDK defaults).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_bytes: int | None = DEFAULT_MAX_BYTES,
        preferred_temporality: dict[type, AggregationTemporality] | None = None,
        preferred_aggregation: dict[type, Aggregation] | None = None,
    ) -> None:
        super().__init__(
            preferred_temporality=(
                _cumulative_everywhere()
                if preferred_temporality is None
                else preferred_temporality
            ),
            preferred_aggregation=preferred_aggregation,
        )
        self._writer = JsonLinesFile(path, max_bytes)

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        """Append the collected metrics as one line; ``FAILURE`` (never an exception) on error."""
        ok = self._export_message(encode_metrics, metrics_data)
        return MetricExportResult.SUCCESS if ok else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        """Flush written lines to disk (lines are already flushed to the OS on every export)."""
        return self._writer.flush()

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        """Flush and close the file; later exports return ``FAILURE`` without writing."""
        self._writer.flush()
        self._writer.close()
