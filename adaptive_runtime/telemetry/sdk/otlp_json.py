"""Embedded-default exporters: spans and metrics as OTLP/JSON Lines files.

With no OTLP endpoint configured, telemetry still has to land somewhere useful. These exporters
write it to local files in exactly the format the OpenTelemetry Collector's ``file`` exporter
writes and its ``otlpjsonfile`` receiver reads: **one OTLP export request per line** (JSON Lines),
each line one ``ExportTraceServiceRequest`` / ``ExportMetricsServiceRequest`` in the OTLP/JSON
encoding. A run's file can later be replayed into Jaeger (or any OTLP backend) by pointing a
collector's ``otlpjsonfile`` receiver at it.

OTLP/JSON is *not* the default protobuf JSON mapping
(https://opentelemetry.io/docs/specs/otlp/#json-protobuf-encoding). The differences handled here:

- ``traceId`` / ``spanId`` / ``parentSpanId`` (on spans, span links, exemplars and log records)
  are **hex** strings (lowercase written, any case read), not base64 as proto3 JSON would give.
  Every other ``bytes`` field (e.g. an attribute's ``bytesValue``) stays base64.
- Keys are lowerCamelCase field names (``resourceSpans``, ``startTimeUnixNano``).
- Enum values are integers (``"kind": 2``), not their names.
- 64-bit integers are written as decimal strings (``"startTimeUnixNano": "17..."``), which proto3
  JSON and the collector both accept — and which is what the collector's own file exporter writes.
- Fields at their default value (empty ids, zero counts, empty lists) are omitted.

Files are opened lazily (on the first export), appended to, flushed after every line (so a crash
loses at most the line being written), and guarded by one lock per exporter so lines from
concurrent exports never interleave. Use one exporter per path (and a separate path per signal,
e.g. ``traces.jsonl`` / ``metrics.jsonl``): the lock and the size accounting are per instance.

Forked children (DataLoader workers) append to the same file as their parent: one file keeps
the whole run where the Collector's ``otlpjsonfile`` receiver and ``adaptive-runtime report``
look for it. Every line is written with a single ``write()`` on a descriptor opened with
``O_APPEND`` (unbuffered, in the parent too), and a local file system appends each such write
whole at the end of the file, so lines of the parent and its children never interleave (not
guaranteed on NFS). A child renews the lock (the parent's export thread may have held it at the
fork), never rotates (that would move the file away under its parent: rotation is the parent's
job) and opens the path for each line, so it follows the parent's rotations.

Size guard: once appending the next line would take the file past ``max_bytes`` (default
256 MiB), the file is rotated to ``<path>.1`` (replacing any previous backup — one backup only)
and a fresh file is started, so a long run keeps at most about ``2 * max_bytes`` on disk. A single
line larger than ``max_bytes`` is still written whole, alone in a fresh file. ``max_bytes=None``
disables rotation.

Failures never reach the caller (a telemetry problem must not break a training loop): I/O and
encoding errors make ``export`` return ``FAILURE``, are counted in ``failed_exports`` and are
logged once per exporter through ``logging.getLogger(__name__)``.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

from google.protobuf import json_format
from google.protobuf.message import Message
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
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

from ..._forks import renew_after_fork

__all__ = [
    "DEFAULT_MAX_BYTES",
    "OtlpJsonFileMetricExporter",
    "OtlpJsonFileSpanExporter",
    "decode_metrics_requests",
    "decode_trace_requests",
    "from_otlp_json",
    "read_otlp_json_lines",
    "to_otlp_json",
]

_logger = logging.getLogger(__name__)
_M = TypeVar("_M", bound=Message)

DEFAULT_MAX_BYTES = 256 * 1024 * 1024
"""Default rotation threshold: large enough for hours of sampled spans, small enough for a disk."""

# The OTLP/JSON fields that carry trace/span ids. They only ever occur as real message fields:
# attribute keys are *values* (``{"key": "traceId", ...}``), never dict keys, so rewriting these
# keys wherever they appear in the JSON tree cannot touch user data. Walking the whole tree (rather
# than listing paths) also covers span links, exemplars and log records without special cases.
_ID_KEYS = frozenset({"traceId", "spanId", "parentSpanId"})


# --------------------------------------------------------------------------- encoding


def to_otlp_json(message: Message) -> dict[str, Any]:
    """Convert an OTLP protobuf message to its OTLP/JSON form (a dict ready for ``json.dumps``).

    Uses protobuf's JSON mapping with lowerCamelCase keys and integer enums, then rewrites the
    trace/span id fields from base64 (the proto3 default for ``bytes``) to lowercase hex, as the
    OTLP spec requires.
    """
    # Only keyword arguments that exist across protobuf 4.x-7.x are passed: the option controlling
    # default-valued fields was renamed between versions, and its default (omit them) is wanted.
    tree = json_format.MessageToDict(
        message, preserving_proto_field_name=False, use_integers_for_enums=True
    )
    _rewrite_ids(tree, _b64_to_hex)
    return tree


def from_otlp_json(data: dict[str, Any], message: _M) -> _M:
    """Parse an OTLP/JSON dict into ``message`` (an empty request instance) and return it.

    The inverse of :func:`to_otlp_json`: hex ids (any case) become bytes again. Unknown fields are
    ignored, as the OTLP spec requires of OTLP/JSON receivers. ``data`` is not modified.
    """
    tree = json.loads(json.dumps(data))  # deep copy: the id rewrite below works in place
    _rewrite_ids(tree, _hex_to_b64)
    json_format.ParseDict(tree, message, ignore_unknown_fields=True)
    return message


def _b64_to_hex(value: str) -> str:
    return base64.b64decode(value).hex()


def _hex_to_b64(value: str) -> str:
    try:
        raw = bytes.fromhex(value)
    except ValueError as exc:
        raise ValueError(f"trace/span id is not hex: {value!r}") from exc
    return base64.b64encode(raw).decode("ascii")


def _rewrite_ids(node: Any, convert: Callable[[str], str]) -> None:
    """Apply ``convert`` in place to every id field (see ``_ID_KEYS``) in a JSON tree."""
    # Iterative, not recursive: request depth is small, but an explicit stack keeps a deeply
    # nested kvlist attribute from ever hitting the recursion limit.
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                if key in _ID_KEYS and isinstance(value, str):
                    item[key] = convert(value)
                elif isinstance(value, (dict, list)):
                    stack.append(value)
        elif isinstance(item, list):
            stack.extend(v for v in item if isinstance(v, (dict, list)))


def _dumps_line(tree: dict[str, Any]) -> bytes:
    # Compact separators: the files are for machines, and size is what triggers rotation.
    # ensure_ascii=False keeps non-ASCII span names readable; the bytes are UTF-8 either way.
    return (json.dumps(tree, separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8")


# --------------------------------------------------------------------------- file writer


class _JsonLinesFile:
    """Append-only JSON Lines file with rotation, one lock, and logged-once failure handling.

    In a forked child it becomes a *shared* appender (see the module docstring): each line is
    one ``O_APPEND`` write through a descriptor opened for it; no rotation.
    """

    def __init__(self, path: str | os.PathLike[str], max_bytes: int | None) -> None:
        if max_bytes is not None and max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive or None, got {max_bytes}")
        self.path = Path(path)
        self.backup_path = self.path.with_name(self.path.name + ".1")
        self.max_bytes = max_bytes
        self.failed_exports = 0
        self.lines_written = 0
        self.rotations = 0
        self._lock = threading.Lock()
        self._file: IO[bytes] | None = None
        self._size = 0
        self._closed = False
        self._warned = False
        self._shared = False  # a forked child's: appends beside its parent, never rotates
        renew_after_fork(self, _JsonLinesFile._after_fork)

    def _after_fork(self) -> None:
        # The parent's export thread may have held the lock at the fork. The inherited handle
        # is unbuffered (nothing of the parent's half-written line sits in it): closing it
        # closes only this process's descriptor.
        self._lock = threading.Lock()
        self._close_locked()
        self._shared = True

    @property
    def closed(self) -> bool:
        return self._closed

    def record_failure(self, what: str, exc: BaseException) -> None:
        """Count a failed export and log the first one (later ones would only flood the log)."""
        with self._lock:
            self._record_failure_locked(what, exc)

    def _record_failure_locked(self, what: str, exc: BaseException) -> None:
        self.failed_exports += 1
        if not self._warned:
            self._warned = True
            _logger.warning(
                "OTLP/JSON file export to %s failed while %s: %r; further failures of this "
                "exporter are counted in failed_exports but not logged",
                self.path,
                what,
                exc,
            )

    def write_line(self, line: bytes) -> bool:
        """Append one line; returns False (never raises) if it could not be written."""
        with self._lock:
            if self._closed:
                return False
            try:
                self._write_locked(line)
            except OSError as exc:
                # Drop the handle so the next export reopens the file: that recovers from e.g. a
                # deleted directory or a disk that had filled up and was cleaned.
                self._close_locked()
                self._record_failure_locked("writing", exc)
                return False
            self.lines_written += 1
            return True

    def _write_locked(self, line: bytes) -> None:
        if self._shared:
            self._append_shared(line)
            return
        if self._file is None:
            self._open_locked()
        if (
            self.max_bytes is not None
            and self._size > 0
            and self._size + len(line) > self.max_bytes
        ):
            self._rotate_locked()
        assert self._file is not None
        # One unbuffered write per line: a crash (or a reader tailing the file) then sees whole
        # requests only, at the cost of one write() syscall per export — exports are batched,
        # so that is cheap — and a forked child's lines land between ours, never inside them.
        _write_all(self._file.write, line)
        self._size += len(line)

    def _append_shared(self, line: bytes) -> None:
        """A forked child's line: opened per line, so the parent's rotations are followed."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(self.path, flags, 0o666)
        try:
            _write_all(lambda data: os.write(fd, data), line)
        finally:
            os.close(fd)

    def _open_locked(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # "a+b": appends always go to the end (O_APPEND) whatever the read position, and the read
        # side lets us check how an existing file ends. Unbuffered: each line is one write().
        handle = open(self.path, "a+b", buffering=0)  # noqa: SIM115 - outlives this method
        try:
            size = os.fstat(handle.fileno()).st_size
            if size > 0:
                handle.seek(size - 1)
                if handle.read(1) != b"\n":
                    # A previous writer died mid-line (crash, full disk). Terminate that torn
                    # line so it stays one bad line instead of corrupting our first good one.
                    _write_all(handle.write, b"\n")
                    size += 1
        except OSError:
            handle.close()
            raise
        self._file = handle
        self._size = size

    def _rotate_locked(self) -> None:
        self._close_locked()
        os.replace(self.path, self.backup_path)  # atomic; replaces the previous backup
        self.rotations += 1
        self._open_locked()

    def _close_locked(self) -> None:
        handle, self._file = self._file, None
        if handle is not None:
            # Closing after a failed write can fail again (the buffered tail cannot be flushed);
            # that failure has already been counted, and the handle must go either way.
            with contextlib.suppress(OSError):
                handle.close()

    def flush(self) -> bool:
        """Flush and fsync the current file; False if that failed."""
        with self._lock:
            if self._file is None:
                return True
            try:
                self._file.flush()
                # fsync only here (not per line): force_flush is rare (shutdown, explicit calls)
                # and is where a caller asks for durability.
                os.fsync(self._file.fileno())
            except OSError as exc:
                self._close_locked()
                self._record_failure_locked("flushing", exc)
                return False
            return True

    def close(self) -> None:
        """Close the file; later writes are refused. Idempotent."""
        with self._lock:
            self._closed = True
            self._close_locked()


def _write_all(write: Callable[[memoryview], int | None], line: bytes) -> None:
    """Write ``line`` whole: one call does it on a regular file (a short write happens only
    when the disk fills up or a signal interrupts; the rest then follows)."""
    view = memoryview(line)
    while view:
        written = write(view)
        if not written:
            raise OSError(f"could not write {len(view)} bytes (no progress)")
        view = view[written:]


# --------------------------------------------------------------------------- exporters


class _OtlpJsonFileMixin:
    """Shared plumbing of the two exporters: the file, its counters and the export step."""

    _writer: _JsonLinesFile

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
            line = _dumps_line(tree) if tree else None
        except Exception as exc:  # telemetry must never raise into the instrumented code
            self._writer.record_failure("encoding", exc)
            return False
        if line is None:
            return True  # an empty request carries nothing; a "{}" line would only be noise
        return self._writer.write_line(line)


class OtlpJsonFileSpanExporter(_OtlpJsonFileMixin, SpanExporter):
    """Span exporter writing one OTLP/JSON ``ExportTraceServiceRequest`` per line to ``path``.

    Plug it into a ``BatchSpanProcessor`` (one line per batch) or ``SimpleSpanProcessor`` (one line
    per span). See the module docstring for the format, the rotation guard and failure handling.

    Args:
        path: File to append to; parent directories are created on the first export.
        max_bytes: Rotate to ``<path>.1`` before the file would exceed this size; ``None`` never
            rotates.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, max_bytes: int | None = DEFAULT_MAX_BYTES
    ) -> None:
        self._writer = _JsonLinesFile(path, max_bytes)

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
    the module docstring for the format, the rotation guard and failure handling.

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
        self._writer = _JsonLinesFile(path, max_bytes)

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


# --------------------------------------------------------------------------- reading back


def read_otlp_json_lines(
    path: str | os.PathLike[str], *, include_rotated: bool = False
) -> list[dict[str, Any]]:
    """Parse an OTLP/JSON Lines file: one dict (one export request) per non-blank line.

    A final line without its newline is a write still in progress (or torn by a crash) and is
    skipped if it does not parse; any other malformed line raises ``ValueError`` naming the line.
    With ``include_rotated``, the backup ``<path>.1`` (older data) is read first, if it exists.
    """
    path = Path(path)
    files = [path]
    if include_rotated:
        backup = path.with_name(path.name + ".1")
        if backup.exists():
            files.insert(0, backup)
    requests: list[dict[str, Any]] = []
    for file in files:
        with open(file, "rb") as handle:
            raw_lines = handle.read().split(b"\n")
        # split() leaves the text after the last "\n" as the final element: "" for a complete
        # file, otherwise an unterminated tail.
        last = len(raw_lines) - 1
        for index, raw in enumerate(raw_lines):
            if not raw.strip():
                continue
            try:
                parsed = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                if index == last:
                    continue  # unterminated tail: still being written, or torn
                raise ValueError(f"{file}:{index + 1}: not a JSON line: {exc}") from exc
            if not isinstance(parsed, dict):
                raise ValueError(f"{file}:{index + 1}: expected a JSON object per line")
            requests.append(parsed)
    return requests


def decode_trace_requests(
    path: str | os.PathLike[str], *, include_rotated: bool = False
) -> list[ExportTraceServiceRequest]:
    """Read a span file back as ``ExportTraceServiceRequest`` protobufs (hex ids → bytes)."""
    return [
        _parse(tree, ExportTraceServiceRequest())
        for tree in read_otlp_json_lines(path, include_rotated=include_rotated)
    ]


def decode_metrics_requests(
    path: str | os.PathLike[str], *, include_rotated: bool = False
) -> list[ExportMetricsServiceRequest]:
    """Read a metrics file back as ``ExportMetricsServiceRequest`` protobufs."""
    return [
        _parse(tree, ExportMetricsServiceRequest())
        for tree in read_otlp_json_lines(path, include_rotated=include_rotated)
    ]


def _parse(tree: dict[str, Any], message: _M) -> _M:
    try:
        return from_otlp_json(tree, message)
    except (json_format.ParseError, binascii.Error) as exc:
        raise ValueError(f"not a valid OTLP/JSON request: {exc}") from exc
