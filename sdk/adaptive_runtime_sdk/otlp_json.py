"""The OTLP/JSON encoding of an export request: one line of the files ``otlp_json_file``
writes (``adaptive_runtime.offline.report.otlp_files`` reads them back).

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

Upstream: open-telemetry/opentelemetry-python#3283 (an OTLP/JSON encoding package, open);
``opentelemetry-exporter-otlp-json-common`` (0.66b1) is not a dependency here.
``tests/unit/test_upstream_gaps.py`` fails once it is installed.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

__all__ = ["dumps_line", "to_otlp_json"]

# The OTLP/JSON fields that carry trace/span ids. They only ever occur as real message fields:
# attribute keys are *values* (``{"key": "traceId", ...}``), never dict keys, so rewriting these
# keys wherever they appear in the JSON tree cannot touch user data. Walking the whole tree (rather
# than listing paths) also covers span links, exemplars and log records without special cases.
_ID_KEYS = frozenset({"traceId", "spanId", "parentSpanId"})


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
    _ids_to_hex(tree)
    return tree


def _ids_to_hex(node: Any) -> None:
    """Rewrite every id field (see ``_ID_KEYS``) in a JSON tree from base64 to hex, in place."""
    # Iterative, not recursive: request depth is small, but an explicit stack keeps a deeply
    # nested kvlist attribute from ever hitting the recursion limit.
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                if key in _ID_KEYS and isinstance(value, str):
                    item[key] = base64.b64decode(value).hex()
                elif isinstance(value, (dict, list)):
                    stack.append(value)
        elif isinstance(item, list):
            stack.extend(v for v in item if isinstance(v, (dict, list)))


def dumps_line(tree: dict[str, Any]) -> bytes:
    # Compact separators: the files are for machines, and size is what triggers rotation.
    # ensure_ascii=False keeps non-ASCII span names readable; the bytes are UTF-8 either way.
    return (json.dumps(tree, separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8")
