"""Spans built after the fact: the loop hands over a record, a worker thread makes the spans.

The caller's thread pays for capturing the active OpenTelemetry context and appending one tuple
to a bounded buffer; the SDK work (span objects, attributes, processors, export) happens on the
recorder's worker thread with the explicit start and end times taken in the loop. When the
buffer is full, records are dropped and counted, never waited for.

Spans (DESIGN.md, "Telemetry contract"):

- ``adaptive.select {operation}`` — the selection, with the decision and why;
- ``adaptive.execute {operation}`` — the kernel on the chosen arm, with its real start and end;
- ``adaptive.hot_path {operation}`` — an operation entered or left the hot path.

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
"""

from __future__ import annotations

import atexit
import logging
import os
import random
import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from .._counter import counter, issued
from .._version import __version__
from ..backend import Choice
from ..distributed import rank_attributes
from .deadline import exit_deadline, remaining

if TYPE_CHECKING:
    from ..records import CallRecord, HotPathTransition

__all__ = ["DEFAULT_CAPACITY", "SpanRecorder", "flush_all", "is_runtime_span",
           "recorder_counts"]

_log = logging.getLogger(__name__)

DEFAULT_CAPACITY = 8192
INSTRUMENTATION_NAME = "adaptive_runtime"
# Keys whose latest execute spans the worker remembers as evidence for later decisions' links.
EVIDENCE_KEYS = 4096
# Decisions (Reason values) that weigh measured arms against each other: their select spans
# link the evidence.
_LINKED = frozenset({"exploit", "drift", "fallback"})
# the trace gate's sampling reason of a commitment's span (gating.SamplingReason.COMMIT, a
# str enum: compared by value, as telemetry does not import the gate)
_COMMIT = "commit"
# Spans a queued record becomes: a call's select and execute; a step's or a hot-path change's one.
_SPANS_PER_ITEM = {"call": 2, "step": 1, "hot": 1}


class _ProcessCounts:
    """Every recorder's spans, process-wide, counted where they are admitted, made or lost
    (``_counter``: ``next()`` is atomic, no lock on the loop's side)."""

    def __init__(self) -> None:
        self.calls = counter()  # call records queued or dropped at the buffer
        self.singles = counter()  # step and hot-path records, likewise
        self.made = counter()  # spans made that the SDK records (sent on to export)
        # spans lost before export: buffer full, telemetry shut down first, the SDK raised
        # making them, or the SDK did not record them (an unsampled parent, no SDK provider)
        self.lost = {reason: counter()
                     for reason in ("buffer_full", "shutdown", "error", "not_recorded")}

    def lose(self, reason: str, spans: int) -> None:
        counter = self.lost[reason]
        for _ in range(spans):
            next(counter)


_counts = _ProcessCounts()


def recorder_counts() -> dict[str, int]:
    """The runtimes' spans in this process: ``admitted`` (by the trace gates; every one
    queued or dropped as the buffer was full), ``made`` (handed to the tracer provider),
    ``pending`` (queued, not made yet) and the losses before export by reason."""
    pending = 0
    for recorder in list(_recorders):
        if recorder._pid == os.getpid():
            pending += sum(_SPANS_PER_ITEM[item[0]] for item in list(recorder._buffer))
    return {"admitted": 2 * issued(_counts.calls) + issued(_counts.singles),
            "made": issued(_counts.made), "pending": pending,
            **{reason: issued(counter) for reason, counter in _counts.lost.items()}}


class SpanRecorder:
    """Buffers what timed calls did and turns it into spans on a worker thread.

    ``timer`` is the clock the records' timestamps come from (the runtime's, in ns); spans get
    wall-clock times through an offset measured once. ``tracer_provider`` defaults to the
    global one, read when spans are made, so an application that sets its provider later is
    still served. Never raises into the caller: an SDK or exporter error is logged once and
    counted in ``errors``. ``on_cost`` receives, after each batch, the background CPU (µs)
    one call's spans cost: measured making them, plus the exporter's share (see
    :func:`~adaptive_runtime.telemetry.switching.export_cost_us_per_span`).
    """

    recording = True  # (a SpanSink, see sinks: the no-op one says False)

    def __init__(self, *, timer: Callable[[], int] = time.perf_counter_ns,
                 tracer_provider: trace.TracerProvider | None = None,
                 capacity: int = DEFAULT_CAPACITY, flush_interval_s: float = 1.0,
                 on_materialized: Callable[[CallRecord], None] | None = None,
                 on_cost: Callable[[float], None] | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        if flush_interval_s <= 0:
            raise ValueError(f"flush_interval_s must be > 0, got {flush_interval_s}")
        self.timer = timer  # the clock of the records' times (the runtime's, in ns)
        self._provider = tracer_provider
        self.capacity = capacity
        self._flush_interval_s = flush_interval_s
        self._on_materialized = on_materialized
        self._on_cost = on_cost
        self.make_cost_us: float | None = None  # CPU to make one call's spans (EWMA)
        self._wall_offset_ns = time.time_ns() - timer()
        self._buffer: deque[tuple[Any, ...]] = deque()
        # counters bumped from any thread (see _counter)
        self._dropped = counter()
        self._spans = counter()
        self._errors = counter()
        self._logged_error = False
        self._item_spans = 0  # spans made of the record being turned into spans (worker)
        self._wake = threading.Event()
        self._parked = False  # the worker sleeps until woken (see _park)
        self._idle = threading.Event()
        self._idle.set()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._start_lock = threading.Lock()
        self._append_lock = threading.Lock()
        self._rank_attrs: dict[str, int] = {}
        # the span attributes saying a forked child made the spans (none in the first process)
        self._process_attrs: dict[str, int] = {}
        # (operation, size bucket) -> arm -> the latest execute span made for it (worker only)
        self._evidence: OrderedDict[tuple[str, int], dict[Choice, trace.SpanContext]] = (
            OrderedDict())
        _track(self)

    # ------------------------------------------------------------------ loop side

    def submit(self, record: CallRecord) -> None:
        """Queue one timed call's spans (called right after the call, in its thread)."""
        next(_counts.calls)
        context = otel_context.get_current()
        _take(context)
        self._enqueue(("call", record, context))

    def submit_step(self, step: StepRecord) -> None:
        """Queue a training step's span (see ``steps``): made later with the span id its
        children were recorded under."""
        next(_counts.singles)
        _take(step.parent)  # (a step in a step: the outer one's span is its parent)
        self._enqueue(("step", step))

    def submit_transition(self, transition: HotPathTransition) -> None:
        """Queue an ``adaptive.hot_path`` span for an operation entering or leaving it."""
        next(_counts.singles)
        context = otel_context.get_current()
        _take(context)
        self._enqueue(("hot", transition, context, self.timer()))

    def _enqueue(self, item: tuple[Any, ...]) -> None:
        if self._stop:
            next(self._dropped)
            _counts.lose("shutdown", _SPANS_PER_ITEM[item[0]])
            return
        buffer = self._buffer
        if len(buffer) >= self.capacity:
            next(self._dropped)  # full: drop and count, never block the loop
            _counts.lose("buffer_full", _SPANS_PER_ITEM[item[0]])
            return
        # Look again under a lock: look-then-append is not atomic, and producers on other
        # threads overtaking each other between the two took the buffer past its bound (by
        # up to one record per thread). Only the worker's pops run outside it, and they only
        # shorten the buffer. (Taken per admitted record, not per call: the trace gate
        # admits a few hundred a second; a full buffer is refused above without it.)
        with self._append_lock:
            if len(buffer) >= self.capacity:
                next(self._dropped)
                _counts.lose("buffer_full", _SPANS_PER_ITEM[item[0]])
                return
            buffer.append(item)
        if self._thread is None:  # first use, or a forked child (see _after_fork)
            self._start_worker()
        elif self._parked:  # the first record after a quiet spell wakes the worker, once
            self._parked = False
            self._wake.set()
        elif len(buffer) >= self.capacity // 2:
            self._wake.set()  # drain early rather than drop

    @property
    def tracer_provider(self) -> trace.TracerProvider:
        """Where the spans go: the provider given, else the global one (read now)."""
        return self._provider or trace.get_tracer_provider()

    # ------------------------------------------------------------------ counters

    @property
    def dropped(self) -> int:
        """Records dropped because the buffer was full (or the recorder shut down)."""
        return issued(self._dropped)

    @property
    def spans_made(self) -> int:
        return issued(self._spans)

    @property
    def errors(self) -> int:
        return issued(self._errors)

    @property
    def pending(self) -> int:
        return len(self._buffer)

    # ------------------------------------------------------------------ worker

    def _start_worker(self) -> None:
        with self._start_lock:
            if self._pid != os.getpid():
                self._after_fork()
            if self._thread is not None or self._stop:
                return
            self._thread = threading.Thread(target=self._run, name="adaptive-runtime-spans",
                                            daemon=True)
            self._thread.start()

    def _after_fork(self) -> None:
        # In a forked child (a DataLoader worker) the parent's worker thread does not exist:
        # start afresh with an empty buffer (the parent exports what it had queued).
        parent, self._pid = self._pid, os.getpid()
        if parent != self._pid:
            self._process_attrs = {"process.pid": self._pid, "process.parent_pid": parent}
        self._buffer = deque()
        self._thread = None
        self._wake = threading.Event()
        self._parked = False
        self._idle = threading.Event()
        self._idle.set()
        self._start_lock = threading.Lock()
        self._append_lock = threading.Lock()

    def _run(self) -> None:
        # The worker's whole CPU time is charged to the spans it makes, waking up included:
        # that is what it takes from the loop.
        cpu_mark = time.thread_time_ns()
        while True:
            if not self._buffer and not self._stop:
                self._park()
            if not self._stop:
                # let a batch gather (a flush, a half-full buffer or shutdown cut this short;
                # not after shutdown woke the parked worker: it would wait the whole interval)
                self._wake.wait(self._flush_interval_s)
                self._wake.clear()
            calls = self._drain()
            if calls:
                now = time.thread_time_ns()
                self._measured(now - cpu_mark, calls)
                cpu_mark = now
            if self._stop and not self._buffer:
                return

    def _park(self) -> None:
        # Sleep until there is work: a thread waking on a timer costs the loop GIL hand-offs
        # and CPU even when it finds nothing to do. Announce first, then look again, so a
        # record appended meanwhile is either seen here or sees _parked and wakes us.
        self._parked = True
        if not self._buffer and not self._stop:
            self._wake.wait()
        self._parked = False
        self._wake.clear()

    def _drain(self) -> float:
        """Make the spans of everything queued; return how many calls' worth of spans were
        made (a step's one span counts half a call's two, the budget's unit)."""
        buffer = self._buffer
        calls = 0.0
        if not buffer:
            self._idle.set()
            return calls
        self._idle.clear()
        tracer = self._tracer()
        # (a distributed job's rank, read per batch: the process group may come up later)
        self._rank_attrs = {**rank_attributes(), **self._process_attrs}
        try:
            while buffer:
                try:
                    item = buffer.popleft()
                except IndexError:  # (shutdown() gave up on the rest meanwhile)
                    break
                self._item_spans = 0
                try:
                    if item[0] == "call":
                        calls += 1
                        self._make_call_spans(tracer, item[1], item[2])
                    elif item[0] == "step":
                        calls += 0.5
                        self._make_step_span(*item[1:])
                    else:
                        self._make_hot_path_span(tracer, item[1], item[2], item[3])
                except Exception as exc:  # observability never breaks the caller
                    _counts.lose("error", _SPANS_PER_ITEM[item[0]] - self._item_spans)
                    self._error(exc)
        finally:
            self._idle.set()
        return calls

    def _measured(self, cpu_ns: int, calls: float) -> None:
        cost = cpu_ns / calls / 1000.0
        previous = self.make_cost_us
        self.make_cost_us = cost if previous is None else previous + 0.25 * (cost - previous)
        if self._on_cost is not None:
            try:
                # (imported here: the exporter side of the SDK loads only once spans are made)
                from .switching import export_cost_us_per_span

                self._on_cost(self.make_cost_us + 2.0 * export_cost_us_per_span())
            except Exception as exc:
                self._error(exc)

    def _tracer(self) -> trace.Tracer:
        provider = self._provider or trace.get_tracer_provider()
        return provider.get_tracer(INSTRUMENTATION_NAME, __version__)

    def _error(self, exc: Exception) -> None:
        next(self._errors)
        if not self._logged_error:
            self._logged_error = True
            _log.warning("adaptive_runtime could not record spans (counted, logged once): %r",
                         exc)

    def _make_call_spans(self, tracer: trace.Tracer, record: CallRecord,
                         ctx: otel_context.Context) -> None:
        offset = self._wall_offset_ns
        decision = record.decision
        operation = record.operation
        select_attrs: dict[str, Any] = {
            "adaptive.operation": operation,
            "adaptive.input_size": record.input_size,
            "adaptive.size_bucket": record.size_bucket,
            "adaptive.backend": decision.backend.value,
            "adaptive.decision": decision.reason.value,
            "adaptive.has_history": bool(decision.estimates_us),
            "adaptive.confidence": float(decision.confidence),
            "adaptive.samples": decision.samples,
            "adaptive.sampling.reason": record.verdict.reason.value,
            "adaptive.sampling.weight": float(record.verdict.weight),
            **self._rank_attrs,
        }
        variant = decision.choice.variant
        if variant:  # (an arm's primary implementation has none)
            select_attrs["adaptive.variant"] = variant
        verdict = record.verdict
        if verdict.reason == _COMMIT:
            # (searchable in Jaeger: adaptive.commit=true; a switch also names the arm left)
            select_attrs["adaptive.commit"] = True
            if verdict.replaced is not None:
                select_attrs["adaptive.replaced_backend"] = verdict.replaced.value
        for arm, estimate in decision.estimates_us.items():
            select_attrs[f"adaptive.estimate_us.{arm.value}"] = float(estimate)
        for arm, floor in decision.floors_us.items():
            select_attrs[f"adaptive.floor_us.{arm.value}"] = float(floor)
        select_start = record.select_start_ns + offset
        select_end = max(record.start_ns + offset, select_start)
        key = (operation, record.size_bucket)
        evidence = self._evidence.get(key)
        links = None
        if evidence and decision.reason.value in _LINKED:
            links = [trace.Link(evidence[arm], {"adaptive.backend": arm.value,
                                                "adaptive.estimate_us": float(estimate)})
                     for arm, estimate in decision.estimates_us.items() if arm in evidence]
            # (a variant is named "<arm>:<variant>" here, as in the estimate attributes)
        select = tracer.start_span(f"adaptive.select {operation}", context=ctx,
                                   attributes=select_attrs, start_time=select_start,
                                   links=links)
        recording = select.is_recording()
        select.end(end_time=select_end)
        self._ended(recording)

        parent = trace.get_current_span(ctx).get_span_context()
        exec_ctx = ctx if parent.is_valid else trace.set_span_in_context(select, ctx)
        launch_us = (record.end_ns - record.start_ns) / 1000.0
        device_us = record.device_us
        exec_attrs: dict[str, Any] = {
            "adaptive.operation": operation,
            "adaptive.backend": record.backend.arm.value,
            "adaptive.duration_us": launch_us if device_us is None else device_us,
            **self._rank_attrs,
        }
        if record.backend.variant:
            exec_attrs["adaptive.variant"] = record.backend.variant
        end_ns = record.end_ns
        if device_us is not None:
            # Timed on the device (CUDA events): the kernel's time is the device's; the host
            # only launched it. The span runs from the launch for the device time.
            exec_attrs["adaptive.device_time_us"] = device_us
            exec_attrs["adaptive.launch_us"] = launch_us
            end_ns = record.start_ns + round(device_us * 1000.0)
        if record.error is not None:
            exec_attrs["error.type"] = type(record.error).__qualname__
            if record.fallback_to is not None:
                exec_attrs["adaptive.fallback_to"] = record.fallback_to.value
        execute = tracer.start_span(f"adaptive.execute {operation}", context=exec_ctx,
                                    attributes=exec_attrs, start_time=record.start_ns + offset)
        if record.error is not None:
            execute.set_status(Status(StatusCode.ERROR, f"{type(record.error).__name__}: "
                                                        f"{record.error}"))
        recording = execute.is_recording()
        execute.end(end_time=max(end_ns + offset, record.start_ns + offset))
        self._ended(recording)
        if record.error is None:
            span_context = execute.get_span_context()
            self._remember(key, record.backend, span_context)
            sample = record.duration_sample
            if sample is not None and recording:
                # (the duration histogram records the call with this span's context: an
                # exemplar linking the latency to this trace; recorded before this, it has none)
                sample[3] = span_context
        if self._on_materialized is not None:
            self._on_materialized(record)

    def _remember(self, key: tuple[str, int], arm: Choice,
                  span_context: trace.SpanContext) -> None:
        """Keep ``span_context`` as the latest evidence for ``arm`` at ``key``."""
        evidence = self._evidence
        arms = evidence.get(key)
        if arms is None:
            arms = evidence[key] = {}
            if len(evidence) > EVIDENCE_KEYS:
                evidence.popitem(last=False)
        else:
            evidence.move_to_end(key)
        arms[arm] = span_context

    def _make_step_span(self, step: StepRecord) -> None:
        # A tracer of its own whose id generator hands out the ids allocated in the loop:
        # the step's select/execute spans were recorded as children of exactly that span.
        tracer = self.tracer_provider.get_tracer(STEPS_INSTRUMENTATION_NAME, __version__)
        generator = getattr(tracer, "id_generator", None)
        preset_ids = _preset_ids()
        if generator is not None and generator is not preset_ids:
            tracer.id_generator = preset_ids  # type: ignore[attr-defined]
        offset = self._wall_offset_ns
        preset_ids.preset(step.span.get_span_context())
        try:
            span = tracer.start_span(step.name, context=step.parent, start_time=step.start_ns
                                     + offset, attributes={**step.attributes,
                                                           **self._rank_attrs})
        finally:
            preset_ids.preset(None)
        if step.error is not None:
            span.record_exception(step.error, timestamp=step.end_ns + offset)
            span.set_status(Status(StatusCode.ERROR, f"{type(step.error).__name__}: "
                                                     f"{step.error}"))
        recording = span.is_recording()
        span.end(end_time=max(step.end_ns, step.start_ns) + offset)
        self._ended(recording)

    def _make_hot_path_span(self, tracer: trace.Tracer, transition: HotPathTransition,
                            ctx: otel_context.Context, at_ns: int) -> None:
        when = at_ns + self._wall_offset_ns
        span = tracer.start_span(
            f"adaptive.hot_path {transition.operation}", context=ctx, start_time=when,
            attributes={
                "adaptive.operation": transition.operation,
                "adaptive.hot_path.entered": transition.entered,
                "adaptive.hot_path.calls_per_sec": float(transition.calls_per_sec),
                "adaptive.hot_path.suppressed_selections": transition.suppressed,
                **self._rank_attrs,
            })
        recording = span.is_recording()
        span.end(end_time=when)
        self._ended(recording)

    def _ended(self, recording: bool) -> None:
        """Count one span made (``recording``: the SDK recorded it and passed it on)."""
        self._item_spans += 1
        next(self._spans)
        if recording:
            next(_counts.made)
        else:
            _counts.lose("not_recorded", 1)

    # ------------------------------------------------------------------ lifecycle

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Make spans of everything queued so far; ``False`` if ``timeout_s`` ran out."""
        deadline = time.monotonic() + timeout_s
        if self._thread is None or self._pid != os.getpid():
            self._drain()  # no worker (yet): do it here
            return not self._buffer
        while self._buffer or not self._idle.is_set():
            self._wake.set()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._idle.wait(min(remaining, 0.05))
            if self._buffer:
                time.sleep(0.001)
        return True

    def shutdown(self, timeout_s: float = 5.0) -> bool:
        """Flush, stop the worker; later submissions are dropped (and counted). Returns
        within about ``timeout_s``: what is still queued then is given up on, counted as
        dropped (``shutdown``), and ``False`` is returned."""
        deadline = time.monotonic() + timeout_s
        flushed = self.flush(timeout_s)
        self._stop = True
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(max(deadline - time.monotonic(), 0.0))
        if self._pid == os.getpid():
            # (the worker may still be draining: each record is popped by one thread only)
            buffer = self._buffer
            while True:
                try:
                    item = buffer.popleft()
                except IndexError:
                    break
                flushed = False
                next(self._dropped)
                _counts.lose("shutdown", _SPANS_PER_ITEM[item[0]])
        return flushed


STEPS_INSTRUMENTATION_NAME = "adaptive_runtime.steps"
_OUR_SCOPES = frozenset({INSTRUMENTATION_NAME, STEPS_INSTRUMENTATION_NAME})


class StandInSpan(trace.NonRecordingSpan):
    """The current span while a training step runs (``steps``), until its span is made on a
    recorder's worker thread: non-recording, with ids drawn when first asked for — by the
    worker, making the spans of a traced call under it or the step's own span, or by user
    code; never by the runtime in the loop (a SpanContext costs ~1.5 us to build, several
    times that amid a training step's memory traffic). ``context``: ``parent_context`` with
    it current.

    ``taken``: something outside the step holds it — a record queued under it (the worker
    will draw its ids later and name it as a parent) or whoever read its ids. Its step's
    span is then always exported, and it stands for no other step; until then one object
    may stand for one thread's steps in turn (``steps`` reuses it)."""

    def __init__(self, parent: otel_context.Context) -> None:
        self.parent_context = parent
        self._context = None  # type: ignore[assignment]
        self.taken = False
        self.context = trace.set_span_in_context(self, parent)

    def get_span_context(self) -> trace.SpanContext:
        self.taken = True
        context = self._context
        if context is None:
            outer = trace.get_current_span(self.parent_context).get_span_context()
            drawn = trace.SpanContext(
                outer.trace_id if outer.is_valid else _random_id(128), _random_id(64),
                is_remote=False, trace_flags=_SAMPLED)
            # (the worker and user code may both ask first: setdefault, atomic, keeps one)
            context = self._context = self.__dict__.setdefault("_drawn", drawn)
        return context


def _take(context: otel_context.Context) -> None:
    """Mark the stand-in current in ``context``, if one is, as taken: a record holds it."""
    span = trace.get_current_span(context)
    if type(span) is StandInSpan:
        span.taken = True


_SAMPLED = trace.TraceFlags(trace.TraceFlags.SAMPLED)
_random_id = random.getrandbits  # (ids of 64 and 128 random bits, as the SDK draws them)


class StepRecord(NamedTuple):
    """A training step, as the loop hands it over: the stand-in span that was current while
    it ran (the step's runtime spans were recorded under its ids, which it draws when first
    asked), its parent context, attributes, times (the runtime timer's ns) and the exception
    that ended it, if any."""

    name: str
    span: trace.Span
    parent: otel_context.Context
    attributes: dict[str, Any]
    start_ns: int
    end_ns: int
    error: BaseException | None


def _make_preset_ids() -> Any:
    """The id generator of the step spans' tracer: ids set per thread before a span is started
    (the step spans' worker), else random. A subclass of the SDK's ``IdGenerator``, defined
    here, on first use: a step span is made only where an SDK tracer exists, and importing
    this module must load no SDK."""
    from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator

    class PresetIds(IdGenerator):
        def __init__(self) -> None:
            self._local = threading.local()
            self._random = RandomIdGenerator()

        def preset(self, span_context: trace.SpanContext | None) -> None:
            self._local.span_context = span_context

        def generate_span_id(self) -> int:
            preset = getattr(self._local, "span_context", None)
            return preset.span_id if preset is not None else self._random.generate_span_id()

        def generate_trace_id(self) -> int:
            preset = getattr(self._local, "span_context", None)
            return (preset.trace_id if preset is not None
                    else self._random.generate_trace_id())

    return PresetIds()


_preset: list[Any] = []  # the one PresetIds, made on first use
_preset_lock = threading.Lock()


def _preset_ids() -> Any:
    if not _preset:
        with _preset_lock:
            if not _preset:
                _preset.append(_make_preset_ids())
    return _preset[0]


_recorders: weakref.WeakSet[SpanRecorder] = weakref.WeakSet()


def _track(recorder: SpanRecorder) -> None:
    _recorders.add(recorder)
    # Flush at exit. Registered per recorder, when it is made: atexit runs handlers last-in
    # first-out, so this runs before the shutdown of a tracer provider made earlier (the SDK
    # registers one per provider) — the spans reach the provider while it still exports.
    ref = weakref.ref(recorder)

    def flush_at_exit() -> None:
        live = ref()
        if live is not None:
            # (within the exit's one telemetry deadline, shared with the providers' shutdown)
            live.flush(timeout_s=remaining(exit_deadline()))

    atexit.register(flush_at_exit)


def is_runtime_span(span: Any) -> bool:
    """Whether a runtime's recorder made ``span`` (its instrumentation scope is ours)."""
    scope = getattr(span, "instrumentation_scope", None)
    return scope is not None and scope.name in _OUR_SCOPES


def flush_all(timeout_s: float) -> bool:
    """Make the spans of every live recorder's queued records (``False``: ``timeout_s`` ran
    out first). What the SDK then does with them is the tracer provider's business."""
    deadline = time.monotonic() + timeout_s
    flushed = True
    for recorder in list(_recorders):
        flushed = recorder.flush(max(deadline - time.monotonic(), 0.0)) and flushed
    return flushed


def _reinit_after_fork() -> None:
    for recorder in list(_recorders):
        recorder._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_after_fork)
