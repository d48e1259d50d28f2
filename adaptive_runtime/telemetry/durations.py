"""The ``adaptive.op.duration`` histogram, fed at collection time from the runtimes' queues.

The runtime appends ``(operation, backend, duration_us)`` for each timed call to
:attr:`~.metrics.RuntimeMetrics.pending` (a bounded ``deque``; ``append`` is one atomic C
call). At collection time a callback drains the queue into the histogram. Recording from
inside a callback is sound in the SDK (1.45): ``SynchronousMeasurementConsumer.collect`` runs
every asynchronous callback under its lock *before* it collects the reader's storage, and a
synchronous ``record`` goes straight to every reader's storage without that lock. So the
durations drained by a reader's collection are in that same export; a second reader on the
same provider sees them in its next collection.

Exemplars: a traced call's sample is a list, ``[operation, backend, duration_us, None]``; the
span worker puts the span context of the call's kernel span (``adaptive.execute``) in its
last place once it made the span, and the drain records the sample in that context. The SDK's
default exemplar filter (``trace_based``) keeps it as an exemplar of its bucket: the trace
behind a latency, in OTLP and (see :mod:`.prometheus`) on the scrape endpoint. A sample
drained before its span was made waits one collection for it (marked ``_WAITED``), then is
recorded with or without one; it is counted once either way.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from opentelemetry import metrics, trace

from .metric_sources import label_of, series_attributes

__all__ = ["DURATION_BUCKETS_S", "MARK", "DurationHistogram"]

# Kernel times span from sub-microsecond vector ops to multi-second GPU batches: 1-2.5-5 steps
# per decade from 1 µs to 10 s (23 buckets). In seconds, as OpenTelemetry and Prometheus
# conventions ask; the runtime measures in microseconds and converts when recording.
DURATION_BUCKETS_S: tuple[float, ...] = (
    1e-6, 2.5e-6, 5e-6,
    1e-5, 2.5e-5, 5e-5,
    1e-4, 2.5e-4, 5e-4,
    1e-3, 2.5e-3, 5e-3,
    0.01, 0.025, 0.05,
    0.1, 0.25, 0.5,
    1.0, 2.5, 5.0,
    10.0,
)

_DURATION_LABELS = ("adaptive.operation", "adaptive.backend")

# Marks the end of what a drain took from ``pending``; see DurationHistogram.drain.
MARK: Any = object()
# In a traced call's sample: it waited one collection for its span (see DurationHistogram.drain).
_WAITED: Any = object()

# Attribute dicts of the duration histogram are cached per (operation, backend); the cache is
# cleared past this size (operation names are bounded, so this is only a safety net).
_MAX_DURATION_ATTRS = 4096


def _create_histogram(meter: metrics.Meter) -> metrics.Histogram:
    # ``explicit_bucket_boundaries_advisory`` is in the API since 1.23; an SDK view configured
    # by the application still overrides it, as it should.
    return meter.create_histogram(
        "adaptive.op.duration", "s",
        "Kernel time of timed calls (1-in-N per converged key), by operation and arm",
        explicit_bucket_boundaries_advisory=DURATION_BUCKETS_S)


class DurationHistogram:
    """The duration histogram of one meter's instruments (a metrics hub's), and the drain of
    queued durations into it. ``log_once``: the hub's log of the first problem of each kind."""

    def __init__(self, meter: metrics.Meter, log_once: Callable[..., None]) -> None:
        self._duration = _create_histogram(meter)
        self._duration_attrs: dict[tuple[str, object], dict[str, str]] = {}
        self._log_once = log_once

    def drain(self, pending: deque[Any], wait: bool = True) -> bool:
        """Record ``pending``'s queued durations into the histogram; whether it met the marker
        its previous drain left (if not, durations were lost: see below). Hub lock held.

        A traced call's sample whose span is not made yet waits for the next collection
        (once) where ``wait``: recorded then, it has its exemplar.

        Only as many items as were queued when it starts are taken, so a runtime appending
        fast cannot keep a collection here forever. Overflow detection: a marker is appended
        after each drain (and at construction); the deque drops its *oldest* items when full,
        so if this drain does not meet the marker, it was pushed out: more than max_pending
        durations came since the previous drain, and any beyond max_pending + 1 were lost.
        (Durations appended while the previous drain ran sit before its marker, so they could
        be dropped unnoticed; a handful at most.) Exact counting of the lost ones would need a
        Python-level append on the caller's thread (~0.2 µs more per timed call).
        """
        saw_mark = False
        waiting: list[Any] = []
        for _ in range(len(pending)):
            try:
                item = pending.popleft()
            except IndexError:
                break
            if item is MARK:
                saw_mark = True
                continue
            try:
                self._record(item, wait, waiting)
            except Exception:  # a malformed item, or the SDK refused it: skip it
                self._log_once("record", "adaptive_runtime metrics: could not record a "
                               "duration (%r)", item)
        pending.extend(waiting)
        pending.append(MARK)
        return saw_mark

    def _record(self, item: Any, wait: bool, waiting: list[Any]) -> None:
        """Record one sample, in its span's context if it has one; or leave a traced call's
        sample in ``waiting`` for its span (once, where ``wait``)."""
        operation, backend, duration_us = item[0], item[1], item[2]
        key = (operation, backend)
        attrs = self._duration_attrs
        labels = attrs.get(key)
        if labels is None:
            if len(attrs) >= _MAX_DURATION_ATTRS:
                attrs.clear()
            labels = attrs[key] = series_attributes(_DURATION_LABELS,
                                                    (str(operation), label_of(backend)))
        span_context = item[3] if len(item) == 4 else None
        if span_context is None and len(item) == 4 and wait:
            # a traced call whose span is not made yet (the span worker batches
            # every second): left for the next collection, once
            item[3] = _WAITED
            waiting.append(item)
        elif span_context is not None and span_context is not _WAITED:
            # recorded in the context of the call's span: the SDK keeps it as an
            # exemplar, the trace behind a latency
            self._duration.record(duration_us / 1e6, labels, context=trace.set_span_in_context(
                trace.NonRecordingSpan(span_context)))
        else:
            self._duration.record(duration_us / 1e6, labels)
