"""History files: :func:`write_history_file`, :func:`read_history_file` (and the document
they hold, :func:`history_document`, :func:`parse_history_document`), :func:`move_aside` for
an unreadable one, and a record's JSON form (:func:`record_to_json`,
:func:`record_from_json`).

A history file is JSON: a format name, the writing process's fingerprint
(:mod:`.fingerprint`) and one record per (operation, size bucket, arm).
Written atomically and durably; read bounded (at most ``MAX_HISTORY_FILE_BYTES``) and
validated field by field — no pickle, no eval (the guarded reading: :mod:`._guarded_json`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import socket
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..backend import VARIANT_NAME, Backend, Choice
from ._guarded_json import brief, parse_json, read_bounded
from .record import HistoryRecord

__all__ = ["HISTORY_FORMAT", "LEGACY_HISTORY_FORMAT", "MAX_HISTORY_FILE_BYTES", "HistoryFile",
           "HistoryWarning", "history_document", "move_aside", "parse_history_document",
           "read_history_file", "record_from_json", "record_to_json", "write_history_file"]

# /2: a "fingerprint" object beside the records. /1 files (no fingerprint) are still read.
HISTORY_FORMAT = "adaptive_runtime.history/2"
LEGACY_HISTORY_FORMAT = "adaptive_runtime.history/1"
# A history file larger than this is refused unread (as a corrupt one is): 16,384 keys of three
# arms take about 7 MiB.
MAX_HISTORY_FILE_BYTES = 64 * 1024 * 1024
_MAX_COUNT = 2**63 - 1
# Latencies above this (about 31 years) are not measurements; the bound keeps the arithmetic
# of a merge (squared differences, products with counts) finite.
_MAX_LATENCY_US = 1e15


class HistoryWarning(UserWarning):
    """A history file was not applied: written on other hardware or library versions, or
    unreadable (then moved aside). Filter it with ``warnings.simplefilter(...,
    ar.HistoryWarning)``."""


@dataclass(frozen=True, slots=True)
class HistoryFile:
    """A history file as read: its path, format, the fingerprint of the process that wrote it
    (``None`` in a ``/1`` file, written before fingerprints existed) and its records."""

    path: str
    format: str
    fingerprint: Mapping[str, object] | None
    records: tuple[HistoryRecord, ...]


def write_history_file(path: str | os.PathLike[str], records: Iterable[HistoryRecord],
                       fingerprint: Mapping[str, object] | None = None) -> None:
    """Write ``records`` to ``path`` with ``fingerprint`` (default: this process's), atomically
    and durably.

    A temporary file in the same directory (``.<name>.<host>.<pid>.<random>.tmp``) is
    written, flushed and fsync'ed, then renamed over ``path`` (``os.replace``), and the
    directory is fsync'ed (where the platform allows it), so a crash or a failure at any step
    leaves either the previous file or the new one, whole. A failure removes its temporary
    file; one left by a process killed mid-save is removed by the next save on the same host
    (once that process is gone), and is never read. An existing file's permissions are kept.
    ``ValueError`` if the file would be over ``MAX_HISTORY_FILE_BYTES`` (it could not be read
    back).
    """
    path = os.fspath(path)
    data = history_document(records, fingerprint, what=f"history for {path!r}")
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    _remove_stale_temporaries(directory, os.path.basename(path))
    fd, tmp = tempfile.mkstemp(prefix=_temporary_prefix(os.path.basename(path)),
                               suffix=".tmp", dir=directory)
    try:
        fchmod = getattr(os, "fchmod", None)
        if fchmod is not None:
            # (mkstemp makes it 0600: keep an existing file's mode, else what open() gives)
            with contextlib.suppress(OSError):
                try:
                    mode = os.stat(path).st_mode & 0o7777
                except FileNotFoundError:
                    mode = 0o666 & ~_umask()
                fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_directory(directory)


def history_document(records: Iterable[HistoryRecord],
                     fingerprint: Mapping[str, object] | None = None, *,
                     what: str = "the history") -> bytes:
    """What a history file holds (UTF-8 JSON, format ``/2``): ``records`` with ``fingerprint``
    (default: this process's). Also kept inside checkpoints (``training.lightning``).
    ``ValueError`` if it would be over ``MAX_HISTORY_FILE_BYTES`` (it could not be read back).
    """
    if fingerprint is None:
        from .fingerprint import hardware_fingerprint

        fingerprint = hardware_fingerprint()
    head = json.dumps({"format": HISTORY_FORMAT, "fingerprint": dict(fingerprint)})
    rows = [json.dumps(record_to_json(r)) for r in records]
    # one record a line: compact, yet readable and diffable
    data = (head[:-1] + ', "records": [\n' + ",\n".join(rows) + "\n]}\n").encode("utf-8")
    if len(data) > MAX_HISTORY_FILE_BYTES:
        raise ValueError(f"{what} would take {len(data)} bytes, over the "
                         f"{MAX_HISTORY_FILE_BYTES} a history file may hold (lower "
                         "max_history_keys)")
    return data


def _host() -> str:
    """This host's name as it goes into a temporary file's name (letters, digits, '-')."""
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:64] or "host"


def _temporary_prefix(name: str) -> str:
    # The writer's host and pid in the name let a later save tell a temporary file left by a
    # killed process (removable) from one another process is writing right now (left alone).
    return f".{name}.{_host()}.{os.getpid()}."


def _remove_stale_temporaries(directory: str, name: str) -> None:
    """Remove the temporary files of saves to ``name`` that a process on this host started
    and never finished (it was killed mid-save): their writer no longer runs. Files of live
    processes, of other hosts (a shared file system) or not named as :func:`write_history_file`
    names them are left. Best effort: a failure here never stops the save."""
    prefix = f".{name}.{_host()}."
    try:
        entries = [e.name for e in os.scandir(directory)
                   if e.name.startswith(prefix) and e.name.endswith(".tmp")]
    except OSError:
        return
    for entry in entries:
        pid_text = entry[len(prefix):].partition(".")[0]
        if not pid_text.isdigit() or int(pid_text) == os.getpid() or _alive(int(pid_text)):
            continue  # (this process's own: a save in another thread may be writing it)
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(directory, entry))


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this host (``True`` when that cannot be told)."""
    if pid <= 0 or not hasattr(os, "kill") or sys.platform == "win32":
        return True  # (os.kill on Windows terminates: never probe there; keep the file)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # (another user's process, or a pid this platform cannot name)
    return True


def _umask() -> int:
    """This process's umask, read without changing it (Linux), else the usual 022."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def _fsync_directory(directory: str) -> None:
    """Make a rename in ``directory`` durable; skipped where directories cannot be opened or
    synced (Windows, some network file systems)."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_history_file(path: str | os.PathLike[str]) -> HistoryFile:
    """Read and validate a history file (format ``/2``, or ``/1`` with no fingerprint).

    ``ValueError`` with one message naming the file and what is wrong when it is over
    ``MAX_HISTORY_FILE_BYTES`` (refused from its size, unread), not a regular file, empty,
    not UTF-8, not JSON (truncated or corrupt), nested too deeply, holds a number of more than
    20 digits, repeats a key in an object, is in another format, or holds a malformed
    fingerprint or record (a field missing, of the wrong type or out of range; a record
    repeated). ``OSError`` (e.g. ``FileNotFoundError``, ``IsADirectoryError``) when it cannot
    be read. Nothing in the file is executed: it is parsed as JSON and every field is checked.
    """
    path = os.fspath(path)
    return parse_history_document(path, read_bounded(path, MAX_HISTORY_FILE_BYTES))


def parse_history_document(path: str, raw: bytes) -> HistoryFile:
    """A history document (what :func:`history_document` made) read from ``raw``, validated
    as :func:`read_history_file` validates a file; ``path`` names where it came from in errors
    and in the result."""
    if len(raw) > MAX_HISTORY_FILE_BYTES:
        raise ValueError(f"history file {path!r} is {len(raw)} bytes, over the "
                         f"{MAX_HISTORY_FILE_BYTES} a history file may hold")
    doc = parse_json(path, raw)
    if not isinstance(doc, dict):
        raise ValueError(f"history file {path!r} is not a history file (a JSON object with a "
                         f"'format'): it holds {brief(doc)}")
    if "format" not in doc:
        raise ValueError(f"history file {path!r} is not a history file: its JSON object has "
                         "no 'format'")
    fmt = doc["format"]
    if not isinstance(fmt, str) or fmt not in (HISTORY_FORMAT, LEGACY_HISTORY_FORMAT):
        raise ValueError(f"history file {path!r} is in format {brief(fmt)}, not "
                         f"{HISTORY_FORMAT!r} (or {LEGACY_HISTORY_FORMAT!r})")
    fingerprint = None
    if fmt == HISTORY_FORMAT:
        fingerprint = doc.get("fingerprint")
        fault = _fingerprint_fault(fingerprint)
        if fault:
            raise ValueError(f"history file {path!r} has no valid fingerprint (an object of "
                             f"strings and integers): {fault}")
    rows = doc.get("records")
    if not isinstance(rows, list):
        raise ValueError(f"history file {path!r} has no list of records: 'records' is "
                         f"{brief(rows) if 'records' in doc else 'missing'}")
    records = []
    seen: set[tuple[str, int, Choice]] = set()
    for i, row in enumerate(rows):
        try:
            record = record_from_json(row)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"history file {path!r} has a malformed record (#{i}): "
                             f"{exc!s:.300}") from None
        key = (record.operation, record.size_bucket, record.choice)
        if key in seen:
            raise ValueError(f"history file {path!r} has a malformed record (#{i}): it repeats "
                             f"{brief(record.operation)} bucket {record.size_bucket} "
                             f"{record.choice.value}")
        seen.add(key)
        records.append(record)
    return HistoryFile(path, fmt, fingerprint, tuple(records))


def _fingerprint_fault(fingerprint: object) -> str:
    """What is wrong with a file's fingerprint, or ``""``."""
    if not isinstance(fingerprint, dict):
        return f"got {brief(fingerprint)}"
    for name, value in fingerprint.items():
        if not (value is None or isinstance(value, str) or type(value) is int):
            return f"{brief(name)} is {brief(value)}"
    return ""


def move_aside(path: str | os.PathLike[str]) -> str:
    """Rename the file at ``path`` to ``<path>.corrupt-<UTC time>`` in the same directory
    (``-1``, ``-2``, ... appended if taken) and return the new path. Never overwrites a file:
    the new name is claimed with a hard link where the file system has them. ``OSError`` if the
    file cannot be moved (``FileNotFoundError``: it is gone, moved by another process)."""
    path = os.fspath(path)
    base = f"{path}.corrupt-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    for attempt in range(1000):
        target = base if attempt == 0 else f"{base}-{attempt}"
        try:
            os.link(path, target)
        except FileExistsError:
            continue
        except FileNotFoundError:
            raise
        except OSError:
            # no hard links on this file system: take a free name, then rename
            if os.path.lexists(target):
                continue
            os.rename(path, target)
            return target
        os.unlink(path)
        return target
    raise FileExistsError(f"no free name to move {path!r} aside to ({base}-N)")


def record_to_json(r: HistoryRecord) -> dict[str, object]:
    """A record as a JSON object (what a history file holds per row)."""
    # (field by field: dataclasses.asdict deep-copies, and cost most of a large save)
    row: dict[str, object] = {
        "operation": r.operation, "size_bucket": r.size_bucket, "backend": r.backend.value,
        "samples": r.samples, "mean_us": r.mean_us, "failures": r.failures,
        "last_update": r.last_update, "variance_us2": r.variance_us2}
    if r.variant:  # (an arm's primary implementation: no field, as files before variants)
        row["variant"] = r.variant
    return row


def _field(row: Mapping[str, object], name: str) -> object:
    if name not in row:
        raise ValueError(f"{name} is missing")
    return row[name]


def _number(row: Mapping[str, object], name: str, *, default: float | None = None,
            nan: bool = False, most: float = _MAX_LATENCY_US) -> float:
    """Field ``name`` as a float from 0 to ``most`` (NaN too where ``nan``)."""
    value = row.get(name, default) if default is not None else _field(row, name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number, got {brief(value)}")
    number = float(value)  # (ints are at most 20 digits in a file; OverflowError in code)
    if math.isnan(number) and nan:
        return number
    if not (0.0 <= number <= most):
        raise ValueError(f"{name} {brief(value)} is out of range (0 to {most:g})")
    return number


def _count(row: Mapping[str, object], name: str) -> int:
    value = _field(row, name)
    if type(value) is not int or not 0 <= value <= _MAX_COUNT:
        raise ValueError(f"{name} must be a count (an integer from 0 to 2**63-1), got "
                         f"{brief(value)}")
    return value


def record_from_json(row: object) -> HistoryRecord:
    """A record from a JSON object; ``ValueError`` / ``TypeError`` naming the field (missing,
    of the wrong type or out of range) if it is malformed."""
    if not isinstance(row, dict):
        raise TypeError(f"a record must be a JSON object, got {brief(row)}")
    operation = _field(row, "operation")
    if not isinstance(operation, str) or not operation:
        raise ValueError(f"operation must be a non-empty string, got {brief(operation)}")
    try:
        # (a JSON escape can spell a lone surrogate: such a name fails every OTLP export)
        operation.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"operation must be valid Unicode text (encodable as UTF-8), got "
                         f"{brief(operation)}") from None
    bucket = _field(row, "size_bucket")
    if type(bucket) is not int or bucket < 0 or bucket > 128:
        raise ValueError(f"size_bucket {brief(bucket)} is not a bucket number (0 to 128)")
    backend = _field(row, "backend")
    if not isinstance(backend, str) or len(backend) > 20:
        raise ValueError(f"backend must be one of gpu, simd, scalar; got {brief(backend)}")
    variant = row.get("variant", "")
    if not isinstance(variant, str) or (variant and not VARIANT_NAME.fullmatch(variant)):
        raise ValueError(f"variant must be 1-64 letters, digits and _ . + - @, got "
                         f"{brief(variant)}")
    samples = _count(row, "samples")
    failures = _count(row, "failures")
    try:
        # (NaN: no estimate in the arm's current epoch)
        mean = _number(row, "mean_us", nan=True)
        last_update = _number(row, "last_update")
        variance = _number(row, "variance_us2", default=0.0, nan=True,
                           most=_MAX_LATENCY_US**2)
    except OverflowError:  # (an int too large for a float: only from code, not from a file)
        raise ValueError("a number is out of range") from None
    if math.isnan(variance):
        variance = 0.0
    return HistoryRecord(
        operation=operation, size_bucket=bucket, backend=Backend.parse(backend),
        samples=samples, mean_us=mean, failures=failures, last_update=last_update,
        variance_us2=variance, variant=variant)
