"""The spans a span recorder's worker makes of queued records, with their explicit times.

- ``adaptive.select {operation}`` and ``adaptive.execute {operation}`` of a timed call;
- a training step's span (``steps``), made with the ids its children were recorded under
  (the :class:`StandInSpan` current while it ran, and the preset-id generator);
- ``adaptive.hot_path {operation}`` of an operation entering or leaving the hot path;
- ``adaptive.threads {pool}`` of a trial of torch's thread count ended (``_dispatch/pool_phase``).

A select span that weighs measured arms links to its evidence: the latest traced execute span
of each arm at its (operation, size bucket), remembered here, on the worker's thread only.
Counting what is made, and the buffer the records come from, are the worker's
(``span_worker``).
"""

from __future__ import annotations

import random
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from .._load import latest as latest_load
from .._version import __version__
from ..backend import Choice
from ..records import PoolTrial
from .thread_spans import trial_attributes

if TYPE_CHECKING:
    from ..records import CallRecord, HotPathTransition

__all__ = ["EVIDENCE_KEYS", "INSTRUMENTATION_NAME", "STEPS_INSTRUMENTATION_NAME", "SpanBuilder",
           "StandInSpan", "StepRecord", "is_runtime_span", "take"]

INSTRUMENTATION_NAME = "adaptive_runtime"
STEPS_INSTRUMENTATION_NAME = "adaptive_runtime.steps"
_OUR_SCOPES = frozenset({INSTRUMENTATION_NAME, STEPS_INSTRUMENTATION_NAME})
# Keys whose latest execute spans the worker remembers as evidence for later decisions' links.
EVIDENCE_KEYS = 4096
# Decisions (Reason values) that weigh measured arms against each other: their select spans
# link the evidence.
_LINKED = frozenset({"exploit", "drift", "fallback"})
# the trace gate's sampling reason of a commitment's span (records.SamplingReason.COMMIT, a
# str enum: compared by value, as telemetry does not import the gate)
_COMMIT = "commit"
_DRIFT = "drift"


def _explain_by_load(attrs: dict[str, Any]) -> None:
    """What the machine's load was when a key drifted or switched arms (``_load``): a
    neighbour taking the cores shows as involuntary context switches and a load average over
    the CPU count."""
    reading = latest_load()
    if reading is not None:
        switches, average, cpus = reading
        attrs["adaptive.load.involuntary_switches_per_s"] = float(switches)
        attrs["adaptive.load.average_1m"] = float(average)
        attrs["adaptive.load.cpus"] = cpus


class SpanBuilder:
    """Makes the spans of one recorder's records (on its worker thread).

    ``tracer_provider``: where the spans go (``None``: the global one, read when spans are
    made). ``wall_offset_ns``: added to the records' times (the runtime timer's ns) to make
    them wall-clock times. ``ended`` is told of every span made (whether the SDK recorded
    it); ``on_materialized`` of every call record made into spans. ``rank_attrs``: the
    attributes every span carries, set by the worker per batch.
    """

    def __init__(self, tracer_provider: trace.TracerProvider | None, *, wall_offset_ns: int,
                 ended: Callable[[bool], None],
                 on_materialized: Callable[[CallRecord], None] | None) -> None:
        self._provider = tracer_provider
        self._wall_offset_ns = wall_offset_ns
        self._ended = ended
        self._on_materialized = on_materialized
        self.rank_attrs: dict[str, int] = {}
        # (operation, size bucket) -> arm -> the latest execute span made for it (worker only)
        self._evidence: OrderedDict[tuple[str, int], dict[Choice, trace.SpanContext]] = (
            OrderedDict())

    @property
    def tracer_provider(self) -> trace.TracerProvider:
        """Where the spans go: the provider given, else the global one (read now)."""
        return self._provider or trace.get_tracer_provider()

    def tracer(self) -> trace.Tracer:
        provider = self._provider or trace.get_tracer_provider()
        return provider.get_tracer(INSTRUMENTATION_NAME, __version__)

    def call_spans(self, tracer: trace.Tracer, record: CallRecord,
                   ctx: otel_context.Context) -> None:
        """Make a timed call's select span, then its execute span."""
        key = (record.operation, record.size_bucket)
        select = self._select_span(tracer, record, ctx, key)
        self._execute_span(tracer, record, ctx, select, key)

    def _select_attributes(self, record: CallRecord) -> dict[str, Any]:
        decision = record.decision
        select_attrs: dict[str, Any] = {
            "adaptive.operation": record.operation,
            "adaptive.input_size": record.input_size,
            "adaptive.size_bucket": record.size_bucket,
            "adaptive.backend": decision.backend.value,
            "adaptive.decision": decision.reason.value,
            "adaptive.has_history": bool(decision.estimates_us),
            "adaptive.confidence": float(decision.confidence),
            "adaptive.samples": decision.samples,
            "adaptive.sampling.reason": record.verdict.reason.value,
            "adaptive.sampling.weight": float(record.verdict.weight),
            **self.rank_attrs,
        }
        variant = decision.choice.variant
        if variant:  # (an arm's primary implementation has none)
            select_attrs["adaptive.variant"] = variant
        if decision.threads:  # (a choice on torch's pool: the threads it ran at)
            select_attrs["adaptive.threads"] = decision.threads
        verdict = record.verdict
        switched = False
        if verdict.reason == _COMMIT:
            # (searchable in Jaeger: adaptive.commit=true; a switch also names the arm left)
            select_attrs["adaptive.commit"] = True
            if verdict.replaced is not None:
                select_attrs["adaptive.replaced_backend"] = verdict.replaced.value
                switched = True
        if switched or decision.reason.value == _DRIFT:
            _explain_by_load(select_attrs)
        for arm, estimate in decision.estimates_us.items():
            select_attrs[f"adaptive.estimate_us.{arm.value}"] = float(estimate)
        # (how far each estimate can be trusted: filled in with the estimates when the call's
        # decision was explained for its span, Policy.explained)
        for arm, count in decision.timings.items():
            select_attrs[f"adaptive.timings.{arm.value}"] = int(count)
        for arm, stdev in decision.stdevs_us.items():
            select_attrs[f"adaptive.stdev_us.{arm.value}"] = float(stdev)
        for arm, floor in decision.floors_us.items():
            select_attrs[f"adaptive.floor_us.{arm.value}"] = float(floor)
        return select_attrs

    def _select_span(self, tracer: trace.Tracer, record: CallRecord,
                     ctx: otel_context.Context, key: tuple[str, int]) -> trace.Span:
        offset = self._wall_offset_ns
        decision = record.decision
        select_attrs = self._select_attributes(record)
        select_start = record.select_start_ns + offset
        select_end = max(record.start_ns + offset, select_start)
        evidence = self._evidence.get(key)
        links = None
        if evidence and decision.reason.value in _LINKED:
            links = [trace.Link(evidence[arm], {"adaptive.backend": arm.value,
                                                "adaptive.estimate_us": float(estimate)})
                     for arm, estimate in decision.estimates_us.items() if arm in evidence]
            # (a variant is named "<arm>:<variant>" here, as in the estimate attributes)
        select = tracer.start_span(f"adaptive.select {record.operation}", context=ctx,
                                   attributes=select_attrs, start_time=select_start,
                                   links=links)
        recording = select.is_recording()
        select.end(end_time=select_end)
        self._ended(recording)
        return select

    def _execute_span(self, tracer: trace.Tracer, record: CallRecord,
                      ctx: otel_context.Context, select: trace.Span,
                      key: tuple[str, int]) -> None:
        offset = self._wall_offset_ns
        operation = record.operation
        parent = trace.get_current_span(ctx).get_span_context()
        exec_ctx = ctx if parent.is_valid else trace.set_span_in_context(select, ctx)
        launch_us = (record.end_ns - record.start_ns) / 1000.0
        device_us = record.device_us
        exec_attrs: dict[str, Any] = {
            "adaptive.operation": operation,
            "adaptive.backend": record.backend.arm.value,
            "adaptive.duration_us": launch_us if device_us is None else device_us,
            **self.rank_attrs,
        }
        if record.backend.variant:
            exec_attrs["adaptive.variant"] = record.backend.variant
        if record.decision.threads:
            exec_attrs["adaptive.threads"] = record.decision.threads
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

    def step_span(self, step: StepRecord) -> None:
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
                                                           **self.rank_attrs})
        finally:
            preset_ids.preset(None)
        if step.error is not None:
            span.record_exception(step.error, timestamp=step.end_ns + offset)
            span.set_status(Status(StatusCode.ERROR, f"{type(step.error).__name__}: "
                                                     f"{step.error}"))
        recording = span.is_recording()
        span.end(end_time=max(step.end_ns, step.start_ns) + offset)
        self._ended(recording)

    def transition_span(self, tracer: trace.Tracer,
                        transition: HotPathTransition | PoolTrial,
                        ctx: otel_context.Context, at_ns: int) -> None:
        """The span of a hot-path transition or of a trial of a pool's thread count."""
        if isinstance(transition, PoolTrial):
            self.pool_trial_span(tracer, transition, ctx, at_ns)
        else:
            self.hot_path_span(tracer, transition, ctx, at_ns)

    def pool_trial_span(self, tracer: trace.Tracer, trial: PoolTrial,
                        ctx: otel_context.Context, at_ns: int) -> None:
        """``adaptive.threads {pool}``: a trial of the pool's thread count ended, and what
        explained its verdict (``thread_spans``), with the machine's load."""
        attrs = {**trial_attributes(trial), **self.rank_attrs}
        _explain_by_load(attrs)
        self._point_span(tracer, f"adaptive.threads {trial.pool}", ctx, at_ns, attrs)

    def hot_path_span(self, tracer: trace.Tracer, transition: HotPathTransition,
                      ctx: otel_context.Context, at_ns: int) -> None:
        self._point_span(tracer, f"adaptive.hot_path {transition.operation}", ctx, at_ns, {
            "adaptive.operation": transition.operation,
            "adaptive.hot_path.entered": transition.entered,
            "adaptive.hot_path.calls_per_sec": float(transition.calls_per_sec),
            "adaptive.hot_path.suppressed_selections": transition.suppressed,
            **self.rank_attrs,
        })

    def _point_span(self, tracer: trace.Tracer, name: str, ctx: otel_context.Context,
                    at_ns: int, attributes: dict[str, Any]) -> None:
        """A span of no duration at ``at_ns`` (the runtime timer's ns)."""
        when = at_ns + self._wall_offset_ns
        span = tracer.start_span(name, context=ctx, start_time=when, attributes=attributes)
        recording = span.is_recording()
        span.end(end_time=when)
        self._ended(recording)


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


def take(context: otel_context.Context) -> None:
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


def is_runtime_span(span: Any) -> bool:
    """Whether a runtime's recorder made ``span`` (its instrumentation scope is ours)."""
    scope = getattr(span, "instrumentation_scope", None)
    return scope is not None and scope.name in _OUR_SCOPES
