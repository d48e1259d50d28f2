"""The OTLP/JSON encoding: export requests to and from OTLP/JSON, and reading OTLP/JSON Lines
files back (the files ``otlp_json_file``'s exporters write, one export request per line).

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
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.message import Message
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

__all__ = [
    "decode_metrics_requests",
    "decode_trace_requests",
    "from_otlp_json",
    "read_otlp_json_lines",
    "to_otlp_json",
]

_M = TypeVar("_M", bound=Message)

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
