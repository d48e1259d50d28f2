"""Report rows and the decision timeline from the embedded telemetry files.

Without a collector the runtime appends its spans to ``<folder>/traces.jsonl`` (rotated to
``traces.jsonl.1``): OTLP/JSON, one export request per line, read by ``otlp_files``.
Every traced selection is an ``adaptive.select {operation}`` span carrying the key, the arm,
the reason, the confidence, the key's timings so far (``adaptive.samples``) and each arm's
latency estimate (``adaptive.estimate_us.<arm>``) when it was made, with the timings it stood
on (``adaptive.timings.<arm>``) and their standard deviation (``adaptive.stdev_us.<arm>``;
spans written before these were added have neither). Per key the report takes the estimates
of the latest span that has them; the chosen arm is that span's own arm when it was a
committed one (``exploit`` or ``forced``), else the fastest of those estimates (what the
runtime commits to next).

The files are streamed line by line (reduced to small tuples as they are read, with progress
reported in bytes) rather than loaded whole: a long run's file holds up to 256 MiB.

Several processes may have appended to one folder (``make demo`` twice, or the demo and an
example). Each process's spans carry its own ``service.instance.id``; by default only the
latest run is read — the process that wrote the newest selection, and those that ran
alongside it (the ranks of one distributed job) — so the timeline shows one run.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

from ...backend import Backend, Choice, choice_of, parse_choice
from .model import DecisionEvent, KeyRow, Report, ReportInputError, fastest_arm
from .otlp_files import key_values, request_lines, trace_files

__all__ = ["from_telemetry"]

_SELECT = "adaptive.select "
_ESTIMATE = "adaptive.estimate_us."
_TIMINGS = "adaptive.timings."
_STDEV = "adaptive.stdev_us."
_COMMITTED = ("exploit", "forced")


class _Select(NamedTuple):
    """What the report needs of one select span."""

    run: str
    service: str
    start_ns: int
    operation: str
    input_size: int
    size_bucket: int
    backend: Choice
    reason: str
    confidence: float
    samples: int
    weight: float
    estimates_us: Mapping[Choice, float]
    commit: bool  # the key committed to ``backend`` on this call (adaptive.commit)
    timings: Mapping[Choice, int]  # (adaptive.timings.<arm>; empty in older spans)
    stdevs_us: Mapping[Choice, float]
    threads: int  # (adaptive.threads: the count a choice on torch's pool ran at; else 0)


def from_telemetry(directory: str | os.PathLike[str], *, all_runs: bool = False,
                   on_progress: Callable[[int, int], None] | None = None) -> Report:
    """The report of the spans in telemetry folder ``directory`` (see the module docstring);
    ``on_progress(bytes_read, bytes_total)`` is called as the files are read.
    :class:`ReportInputError` (one line) for a missing folder or file, a corrupt line, or no
    select span at all."""
    files = trace_files(directory)
    total = sum(p.stat().st_size for p in files)
    selects: list[_Select] = []
    done = 0
    for path in files:
        for size, tree, where in request_lines(path):
            done += size
            if tree is not None:
                try:
                    selects.extend(_selects(tree))
                except (AttributeError, KeyError, TypeError, ValueError) as exc:
                    raise ReportInputError(f"{where}: not an OTLP/JSON trace request the "
                                           f"runtime writes ({type(exc).__name__}: "
                                           f"{' '.join(str(exc).split())})") from None
            if on_progress is not None:
                on_progress(done, total)
    names = ", ".join(os.fspath(p) for p in files)
    if not selects:
        raise ReportInputError(f"{names} holds no adaptive.select span: nothing was traced "
                               "(tracing off, or every call on a hot path?)")
    runs = {s.run for s in selects}
    if not all_runs:
        selects = _latest_run(selects)
    selects.sort(key=lambda s: s.start_ns)
    shown = {s.run for s in selects}
    services = sorted({s.service for s in selects if s.service})
    which = (f"{len(shown)} of {len(runs)} runs (the latest; --all-runs for all)"
             if len(shown) < len(runs) else f"{len(runs)} run{'s' * (len(runs) > 1)}")
    source = (f"{names}: {len(selects)} traced decisions of {which}"
              + (f", service {', '.join(services)}" if services else ""))
    return Report(tuple(_rows(selects)), tuple(_events(selects)), source,
                  "the arm of the key's latest traced decision when it was a committed one "
                  "(exploit, forced), else the fastest of its latest estimates")


def _selects(tree: Mapping[str, Any]) -> Iterator[_Select]:
    for resource_spans in tree.get("resourceSpans", ()):
        resource = key_values(resource_spans.get("resource", {}).get("attributes", ()))
        run = str(resource.get("service.instance.id", ""))
        service = str(resource.get("service.name", ""))
        for scope in resource_spans.get("scopeSpans", ()):
            for span in scope.get("spans", ()):
                if not str(span.get("name", "")).startswith(_SELECT):
                    continue
                a = key_values(span.get("attributes", ()))
                estimates = {parse_choice(k[len(_ESTIMATE):]): float(v)
                             for k, v in a.items() if k.startswith(_ESTIMATE)}
                timings = {parse_choice(k[len(_TIMINGS):]): int(v)
                           for k, v in a.items() if k.startswith(_TIMINGS)}
                stdevs = {parse_choice(k[len(_STDEV):]): float(v)
                          for k, v in a.items() if k.startswith(_STDEV)}
                yield _Select(
                    run, service, int(span["startTimeUnixNano"]),
                    str(a.get("adaptive.operation") or span["name"][len(_SELECT):]),
                    int(a["adaptive.input_size"]), int(a["adaptive.size_bucket"]),
                    choice_of(Backend.parse(a["adaptive.backend"]),
                              str(a.get("adaptive.variant", ""))), str(a["adaptive.decision"]),
                    float(a.get("adaptive.confidence", 0.0)), int(a.get("adaptive.samples", 0)),
                    float(a.get("adaptive.sampling.weight", 1.0)), estimates,
                    a.get("adaptive.commit") is True, timings, stdevs,
                    int(a.get("adaptive.threads", 0)))


def _latest_run(selects: list[_Select]) -> list[_Select]:
    spans: dict[str, tuple[int, int]] = {}
    for s in selects:
        first, last = spans.get(s.run, (s.start_ns, s.start_ns))
        spans[s.run] = (min(first, s.start_ns), max(last, s.start_ns))
    latest_first, latest_last = max(spans.values(), key=lambda span: span[1])
    keep = {run for run, (first, last) in spans.items()
            if first <= latest_last and last >= latest_first}
    return [s for s in selects if s.run in keep]


def _rows(selects: list[_Select]) -> list[KeyRow]:
    latest: dict[tuple[str, int], _Select] = {}
    estimated: dict[tuple[str, int], _Select] = {}
    samples: dict[tuple[str, int], int] = {}
    for s in selects:  # (in time order: later spans replace earlier ones)
        key = (s.operation, s.size_bucket)
        latest[key] = s
        if s.estimates_us:
            estimated[key] = s
        samples[key] = max(samples.get(key, 0), s.samples)
    rows = []
    for key in sorted(latest):
        last = latest[key]
        basis = estimated.get(key)
        if basis is None:  # only a first call was traced: no estimate yet
            chosen, latency, timings, stdevs = last.backend, {}, {}, {}
        else:
            latency = dict(basis.estimates_us)
            timings, stdevs = dict(basis.timings), dict(basis.stdevs_us)
            chosen = (basis.backend if basis.reason in _COMMITTED
                      else fastest_arm(latency) or basis.backend)
        rows.append(KeyRow(key[0], key[1], latency, samples[key], chosen, last.reason,
                           last.confidence if math.isfinite(last.confidence) else None,
                           timings, stdevs, last.threads if chosen == last.backend else 0))
    return rows


def _events(selects: list[_Select]) -> Iterator[DecisionEvent]:
    start = selects[0].start_ns if selects else 0
    for s in selects:
        yield DecisionEvent((s.start_ns - start) / 1e9, s.operation, s.input_size, s.backend,
                            s.reason, s.weight, s.commit)

