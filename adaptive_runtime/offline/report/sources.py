"""Report rows from a saved history file or from a live runtime.

A history file keeps each arm's learned latency and sample count but no decision, so its
"chosen" arm is the fastest learned one: what a runtime that loads the file commits to (a
runtime keeps a committed arm within its switch margin, so on a near-tie it may run the other).
A live runtime is asked (:meth:`AdaptiveRuntime.decide`), which also gives reason and confidence.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ...backend import Choice
from ...history import HistoryRecord, read_history_file
from ...keys import bucket_bounds
from .model import KeyRow, Report, ReportInputError, fastest_arm

if TYPE_CHECKING:
    from ...runtime import AdaptiveRuntime

__all__ = ["from_history_file", "from_runtime", "rows_from_records"]


def from_history_file(path: str | os.PathLike[str]) -> Report:
    """The report of the history file at ``path``; :class:`ReportInputError` (one line) when
    it is missing, unreadable, corrupt or holds no measurement."""
    name = os.fspath(path)
    try:
        loaded = read_history_file(name)
    except FileNotFoundError:
        raise ReportInputError(f"history file {name!r} not found") from None
    except IsADirectoryError:
        raise ReportInputError(f"history file {name!r} is a directory") from None
    except OSError as exc:
        raise ReportInputError(f"history file {name!r} cannot be read: "
                               f"{exc.strerror or exc}") from None
    except ValueError as exc:  # the reader's messages already name the file and the fault
        raise ReportInputError(_one_line(str(exc))) from None
    rows = rows_from_records(loaded.records)
    if not rows:
        raise ReportInputError(f"history file {name!r} holds no measurement (no arm of any "
                               "key was timed)")
    machine = ""
    if loaded.fingerprint:
        parts = [str(loaded.fingerprint[k]) for k in ("cpu", "gpu")
                 if loaded.fingerprint.get(k) not in (None, "none")]
        machine = f", measured on {' + '.join(parts)}" if parts else ""
    return Report(tuple(rows), (), f"history file {name} ({len(rows)} keys{machine})",
                  "the fastest learned arm, what a runtime loading this history commits to")


def rows_from_records(records: Iterable[HistoryRecord]) -> list[KeyRow]:
    """One row per (operation, size bucket) with a finite learned latency, sorted; the chosen
    arm is the fastest (see the module docstring)."""
    latency: dict[tuple[str, int], dict[Choice, float]] = {}
    timings: dict[tuple[str, int], dict[Choice, int]] = {}
    stdevs: dict[tuple[str, int], dict[Choice, float]] = {}
    samples: dict[tuple[str, int], int] = {}
    for r in records:
        key = (r.operation, r.size_bucket)
        samples[key] = samples.get(key, 0) + r.samples
        # (NaN: the arm is being measured afresh, e.g. after drift; it has no estimate now)
        if r.samples and math.isfinite(r.mean_us):
            latency.setdefault(key, {})[r.choice] = r.mean_us
            timings.setdefault(key, {})[r.choice] = r.samples
            if r.samples > 1 and math.isfinite(r.variance_us2):  # (one timing: no spread)
                stdevs.setdefault(key, {})[r.choice] = math.sqrt(max(r.variance_us2, 0.0))
    rows = []
    for (operation, bucket), arms in sorted(latency.items()):
        key = (operation, bucket)
        rows.append(KeyRow(operation, bucket, arms, samples[key], fastest_arm(arms),
                           timings=timings[key], stdev_us=stdevs.get(key, {})))
    return rows


def from_runtime(rt: AdaptiveRuntime, operations: Iterable[str] | None = None) -> Report:
    """The report of what ``rt`` learned, for every key with history (or only the keys of
    ``operations``, their input families — ``"gelu@torch"`` for ``"gelu"`` — included), each
    decided by ``rt.decide`` at the bucket's smallest size. Each arm's timings and standard
    deviation are the decision's (those its estimate stands on now: after a drift alarm,
    the timings since)."""
    wanted = None if operations is None else set(operations)
    records = [r for r in rt.history_snapshot()
               if wanted is None or r.operation in wanted
               or r.operation.split("@", 1)[0] in wanted]
    rows = []
    for row in rows_from_records(records):
        decision = rt.decide(row.operation, bucket_bounds(row.size_bucket)[0])
        timings, stdevs = dict(row.timings), dict(row.stdev_us)
        for choice in row.latency_us:  # (the decision's, where it has the arm)
            if choice in decision.timings:
                timings[choice] = decision.timings[choice]
                stdevs.pop(choice, None)
                if choice in decision.stdevs_us:
                    stdevs[choice] = decision.stdevs_us[choice]
        rows.append(KeyRow(row.operation, row.size_bucket, row.latency_us, row.samples,
                           decision.choice, decision.reason.value,
                           float(decision.confidence), timings, stdevs,
                           decision.threads))
    return Report(tuple(rows), (), "this runtime", "the arm the runtime runs now (rt.decide)")


def _one_line(text: str) -> str:
    return " ".join(text.split())
