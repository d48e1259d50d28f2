"""The one reader of the OTLP/JSON Lines files the runtime writes without a collector.

``ar.telemetry.configure()`` with no endpoint appends spans to ``<folder>/traces.jsonl`` and
metrics to ``metrics.jsonl`` (rotated to ``<file>.1``): one OTLP export request per line, in
the OTLP/JSON encoding (the writer, ``adaptive_runtime_sdk.otlp_json``, describes it). The
report, the replay and the tests read them here: line by line as dicts (:func:`request_lines`,
what the report and the replay stream), whole (:func:`read_requests`), or as the OTLP protobuf
requests (:func:`decode_requests`, hex ids turned back into bytes; needs the ``otlp`` extra). A
last line without its newline is a write in progress (or torn by a crash) and is skipped when it
does not parse, as the collector's ``otlpjsonfile`` receiver does; any other bad line is a
:class:`ReportInputError` naming it.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from .model import ReportInputError

if TYPE_CHECKING:
    from google.protobuf.message import Message

__all__ = ["TRACES_FILE", "decode_requests", "from_otlp_json", "key_values", "read_requests",
           "request_lines", "trace_files"]

TRACES_FILE = "traces.jsonl"
# No export request the runtime writes comes near this (a batch of 512 spans is ~1 MiB): a
# longer line is not from one of its files, and is not read into memory whole.
_MAX_LINE_BYTES = 64 * 1024 * 1024
# The fields holding trace/span ids, hex in OTLP/JSON (base64 in protobuf's JSON mapping).
# Attribute keys are values (``{"key": "traceId"}``), never dict keys, so no user data matches.
_ID_KEYS = frozenset({"traceId", "spanId", "parentSpanId"})
_M = TypeVar("_M", bound="Message")


def trace_files(directory: str | os.PathLike[str]) -> list[Path]:
    """The span files of a telemetry folder, oldest first (the rotated backup, then the
    current file); :class:`ReportInputError` when there is none."""
    folder = Path(directory)
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise ReportInputError(
            f"telemetry folder {os.fspath(folder)!r} {what}: run a program that calls "
            "ar.telemetry.configure() (e.g. `adaptive-runtime demo`) first, or pass "
            "--telemetry DIR or --history PATH")
    current = folder / TRACES_FILE
    files = [p for p in (folder / (TRACES_FILE + ".1"), current) if p.is_file()]
    if not files:
        raise ReportInputError(f"no {TRACES_FILE} in telemetry folder {os.fspath(folder)!r}: "
                               "spans went elsewhere (an OTLP endpoint?) or none were "
                               "exported yet")
    return files


def request_lines(path: str | os.PathLike[str]
                  ) -> Iterator[tuple[int, dict[str, Any] | None, str]]:
    """``(bytes, request or None, "file:line")`` per line of a telemetry file (``None`` for
    a blank line or a torn last one)."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below, after the loop
    except OSError as exc:
        raise ReportInputError(f"{os.fspath(path)} cannot be read: "
                               f"{exc.strerror or exc}") from None
    with handle:
        number = 0
        limit = _MAX_LINE_BYTES
        while raw := handle.readline(limit + 1):
            number += 1
            where = f"{os.fspath(path)}:{number}"
            if len(raw) > limit and not raw.endswith(b"\n"):
                raise ReportInputError(f"{where}: a line of over {limit:,} bytes: not an "
                                       "export request the runtime writes (corrupt file?)")
            if not raw.strip():
                yield len(raw), None, where
                continue
            try:
                tree = json.loads(raw)
            except (ValueError, RecursionError) as exc:  # (UnicodeDecodeError too)
                if not raw.endswith(b"\n"):
                    yield len(raw), None, where
                    continue
                raise ReportInputError(f"{where}: not a JSON line (corrupt file?): "
                                       f"{' '.join(str(exc).split())[:200]}") from None
            if not isinstance(tree, dict):
                raise ReportInputError(f"{where}: not an OTLP/JSON request (a JSON object), "
                                       f"a {type(tree).__name__}")
            yield len(raw), tree, where


def read_requests(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every export request in a telemetry file, as OTLP/JSON dicts, in file order."""
    return [tree for _size, tree, _where in request_lines(path) if tree is not None]


def decode_requests(path: str | os.PathLike[str], message_type: type[_M]) -> list[_M]:
    """Every export request in a telemetry file as a ``message_type`` protobuf
    (``ExportTraceServiceRequest`` for spans, ``ExportMetricsServiceRequest`` for metrics)."""
    out = []
    for _size, tree, where in request_lines(path):
        if tree is not None:
            try:
                out.append(from_otlp_json(tree, message_type()))
            except ValueError as exc:  # (json_format.ParseError is one)
                raise ReportInputError(f"{where}: not an OTLP/JSON {message_type.__name__}: "
                                       f"{exc}") from None
    return out


def from_otlp_json(tree: dict[str, Any], message: _M) -> _M:
    """Parse an OTLP/JSON request into ``message`` (an empty one) and return it: hex ids (any
    case) become bytes; unknown fields are ignored, as OTLP/JSON receivers must."""
    from google.protobuf import json_format

    json_format.ParseDict(_ids_to_base64(tree), message, ignore_unknown_fields=True)
    return message


def _ids_to_base64(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: base64.b64encode(bytes.fromhex(v)).decode("ascii")
                if k in _ID_KEYS and isinstance(v, str) else _ids_to_base64(v)
                for k, v in node.items()}
    if isinstance(node, list):
        return [_ids_to_base64(v) for v in node]
    return node


def key_values(items: Any) -> dict[str, Any]:
    """OTLP/JSON key-values as a dict (``intValue`` comes as a decimal string)."""
    out: dict[str, Any] = {}
    for item in items:
        value = item.get("value", {})
        for kind in ("stringValue", "intValue", "doubleValue", "boolValue"):
            if kind in value:
                out[item["key"]] = int(value[kind]) if kind == "intValue" else value[kind]
                break
    return out
