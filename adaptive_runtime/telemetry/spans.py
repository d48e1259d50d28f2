"""Spans built after the fact: the loop hands over a record, a worker thread makes the spans.

The caller's thread pays for capturing the active OpenTelemetry context and appending one tuple
to a bounded buffer; the SDK work (span objects, attributes, processors, export) happens on the
recorder's worker thread with the explicit start and end times taken in the loop. When the
buffer is full, records are dropped and counted, never waited for.

Spans (DESIGN.md, "Telemetry contract"):

- ``adaptive.select {operation}`` — the selection, with the decision and why;
- ``adaptive.execute {operation}`` — the kernel on the chosen arm, with its real start and end;
- ``adaptive.hot_path {operation}`` — an operation entered or left the hot path;
- ``adaptive.threads {pool}`` — a trial of torch's thread count ended (what explained it).

``select`` and ``execute`` are siblings under the caller's active span (a training step); with
no active span, ``execute`` is the child of ``select`` so the pair stays in one trace.

In a forked child (a DataLoader worker) a recorder starts afresh: an empty buffer (what the
parent had queued is the parent's to export) and, at its first record, one worker thread of its
own. The child shares its parent's resource, so its spans also carry ``process.pid`` and
``process.parent_pid``: which worker made them.

A select span that commits to an arm (exploit), switches away from one (drift) or falls back
links to its evidence: the latest traced execute span of each arm whose estimate it weighed, so
in Jaeger a decision leads to the measurements behind it. The worker remembers those spans per
(operation, size bucket) — bounded, least recently used first out — nothing in the loop.

This module is the public face: :class:`SpanRecorder`'s submissions. Its buffer, worker
thread, flush, shutdown and fork handling (and :func:`flush_all`) are in ``span_worker``; the
spans made of records, the evidence links, the training step's stand-in span and the preset
span ids in ``span_builders``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from opentelemetry import context as otel_context
from opentelemetry import trace

from .app_providers import flush_first
from .span_builders import SpanBuilder, StepRecord, is_runtime_span, take
from .span_worker import (
    DEFAULT_CAPACITY,
    SpanWorker,
    flush_all,
    process_counts,
    recorder_counts,
    track,
)

if TYPE_CHECKING:
    from ..records import CallRecord, HotPathTransition, PoolTrial

__all__ = ["DEFAULT_CAPACITY", "SpanRecorder", "flush_all", "is_runtime_span",
           "recorder_counts"]


class SpanRecorder(SpanWorker):
    """Buffers what timed calls did and turns it into spans on a worker thread.

    ``timer`` is the clock the records' timestamps come from (the runtime's, in ns); spans get
    wall-clock times through an offset measured once. ``tracer_provider`` defaults to the
    global one, read when spans are made, so an application that sets its provider later is
    still served. Never raises into the caller: an SDK or exporter error is logged once and
    counted in ``errors``.

    The buffer, the worker thread, flush, shutdown and fork handling are
    :class:`~.span_worker.SpanWorker`'s; the spans are made by a
    :class:`~.span_builders.SpanBuilder`.
    """

    recording = True  # (a SpanSink, see sinks: the no-op one says False)

    def __init__(self, *, timer: Callable[[], int] = time.perf_counter_ns,
                 tracer_provider: trace.TracerProvider | None = None,
                 capacity: int = DEFAULT_CAPACITY, flush_interval_s: float = 1.0,
                 on_materialized: Callable[[CallRecord], None] | None = None) -> None:
        super().__init__(capacity=capacity, flush_interval_s=flush_interval_s)
        self.timer = timer  # the clock of the records' times (the runtime's, in ns)
        self._builder = SpanBuilder(tracer_provider, wall_offset_ns=time.time_ns() - timer(),
                                    ended=self._ended, on_materialized=on_materialized)
        track(self)
        # (the provider's own flush and shutdown make the queued records' spans first, from
        # the start; a global provider the application replaces later is hooked by the
        # worker, as it makes spans into it: see app_providers)
        flush_first(self._builder.tracer_provider, flush_all)

    # ------------------------------------------------------------------ loop side

    def submit(self, record: CallRecord) -> None:
        """Queue one timed call's spans (called right after the call, in its thread)."""
        next(process_counts.calls)
        context = otel_context.get_current()
        take(context)
        self._enqueue(("call", record, context))

    def submit_step(self, step: StepRecord) -> None:
        """Queue a training step's span (see ``steps``): made later with the span id its
        children were recorded under."""
        next(process_counts.singles)
        take(step.parent)  # (a step in a step: the outer one's span is its parent)
        self._enqueue(("step", step))

    def submit_transition(self, transition: HotPathTransition | PoolTrial) -> None:
        """Queue an ``adaptive.hot_path`` span for an operation entering or leaving it, or an
        ``adaptive.threads`` span for a trial of a pool's thread count that ended."""
        next(process_counts.singles)
        context = otel_context.get_current()
        take(context)
        self._enqueue(("hot", transition, context, self.timer()))

    @property
    def tracer_provider(self) -> trace.TracerProvider:
        """Where the spans go: the provider given, else the global one (read now)."""
        return self._builder.tracer_provider
