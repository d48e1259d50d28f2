"""Telemetry emission: what a dispatcher hands its span and metrics sinks, and the trace-gate
calls that decide which timed calls become spans.

The sinks are always objects (``telemetry.sinks``: the no-ops until telemetry is switched on),
so no call path checks for ``None``. ``tracing`` (the span sink's ``recording``, read once
when the sinks are attached) is checked where it saves a timed call real work: the trace gate
and the span record are skipped when no one records spans.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ..backend import Choice
from ..decision import Decision
from ..history import KeyHistory
from ..records import CallRecord, CallTiming, HotPathTransition, PoolTrial, TraceVerdict
from ..telemetry.sinks import NO_METRICS, NO_SPANS, MetricsSink, SpanSink
from .core import Core
from .counts import Counts


def relabelled(transition: HotPathTransition, label: str) -> HotPathTransition:
    """``transition`` under the counter label of its operation: a ``select()`` name past the
    label cap becomes ``OTHER_LABEL`` in the hot-path span too (bounded span names)."""
    return HotPathTransition(label, transition.entered, transition.calls_per_sec,
                             transition.suppressed)


class Emission:
    """A dispatcher's telemetry: its sinks, the hot-path transitions waiting for them, the
    trace gate's verdicts, and the call recorder (``rt.record_calls``)."""

    def __init__(self, core: Core, counts: Counts) -> None:
        self._core = core
        self._counts = counts
        # hot-path transitions (and trials of torch's thread count ended) seen under the
        # lock, handed to the span sink outside it
        self.pending: list[HotPathTransition | PoolTrial] = []
        # every timing learned, for a call recorder; called with the lock held
        self.calls: Callable[[CallTiming], None] = Emission.no_calls
        self.recording_calls = False
        self.attach(NO_SPANS, NO_METRICS)

    @staticmethod
    def no_calls(_timing: CallTiming) -> None:
        """The call recorder's hook while no recorder listens."""

    def attach(self, spans: SpanSink, metrics: MetricsSink) -> None:
        """Hand calls to these sinks from now on (the no-ops: telemetry off)."""
        self.spans = spans
        # (read once here: a timed call checks a flag, not a sink)
        self.tracing = spans.recording
        self.timings = metrics.recording
        self.submit = spans.submit
        # (operation, backend, duration_us) of every timed call, for the duration histogram
        self.duration: Callable[[tuple[str, Choice, float]], Any] = metrics.pending.append

    def emit(self, operation: str, n: int, bucket: int, decision: Decision, backend: Choice,
             times: tuple[int, int, int], error: BaseException | None,
             fallback_to: Choice | None, verdict: TraceVerdict,
             device_us: float | None = None, sample: list[Any] | None = None) -> None:
        """Hand an admitted call's record to the span sink; ``times``: select start, kernel
        start and end (timer nanoseconds); ``device_us``: the kernel's device time;
        ``sample``: the call's sample queued for the duration histogram."""
        self.submit(CallRecord(operation, n, bucket, decision, backend, times[0], times[1],
                               times[2], error, fallback_to, verdict, device_us, sample))

    def verdict(self, key: KeyHistory, decision: Decision, duration_us: float | None,
                hot: bool, failed: bool, calls: int, now: float) -> TraceVerdict | None:
        """The trace gate's verdict on a timed call's spans (``None``: not exported), asked
        before the call's timing (``duration_us``, if not ``None``) is learned. Lock held."""
        learned = duration_us is not None  # (a key's first call: nothing learned before it)
        verdict = self._core.gate.admit(
            key.id, decision.reason, duration_us if learned else math.inf,  # type: ignore[arg-type]
            hot, key.samples + key.failures + learned <= 1, failed, calls, now,
            decision.choice)
        return verdict if verdict.export else None

    def failure_verdict(self, key: KeyHistory, decision: Decision) -> TraceVerdict | None:
        """Trace verdict for an arm that raised (the call goes on). Lock held."""
        if not self.tracing:
            return None
        now = self._core.clock()
        verdict = self._core.gate.admit(key.id, decision.reason, math.inf,
                                        self.hot_now(key.operation, now), False, True, 1, now)
        return verdict if verdict.export else None

    def hot_now(self, operation: str, now: float) -> bool:
        """Whether ``operation`` is hot, queueing the leave transition that closing its stale
        window may produce (delivered after the lock). Lock held."""
        hot, transition = self._core.hot.check(operation, now)
        if transition is not None:
            label = self._counts.label(operation)
            self.pending.append(
                transition if label is operation else relabelled(transition, label))
        return hot

    def deliver_transitions(self) -> None:
        """Hand the hot-path transitions and ended trials queued under the lock to the span
        sink."""
        with self._core.lock:
            transitions, self.pending = self.pending, []
        submit = self.spans.submit_transition
        for transition in transitions:
            submit(transition)

    def spans_admitted(self) -> int:
        """Calls whose spans the trace gate admitted so far (read without the lock)."""
        return self._core.gate.admitted
