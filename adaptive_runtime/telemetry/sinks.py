"""The seam between a runtime and its telemetry: two interfaces, their no-op implementations,
and the factories that pick (the OpenTelemetry API/SDK pattern).

A runtime always holds a :class:`SpanSink` and a :class:`MetricsSink`. Until telemetry is
switched on (``ar.telemetry.configure()``, an application's own SDK provider, or
``ar.telemetry.instrument(rt)``) both are the no-ops below, which record nothing and import
nothing: this module loads neither the OpenTelemetry SDK nor even its API. The real ones —
:class:`~adaptive_runtime.telemetry.spans.SpanRecorder` and
:class:`~adaptive_runtime.telemetry.metrics.RuntimeMetrics` — are imported by the factories
only when they are made.

``recording`` tells the two apart without an ``isinstance`` or ``None`` check: the no-ops
say ``False``. (The dispatcher reads it once, when the sinks are attached: a timed call skips
the trace gate and its span record when no one records spans.)
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

    from .metrics import MetricsSource

__all__ = ["NO_METRICS", "NO_SPANS", "MetricsSink", "SpanSink", "metrics_sink", "span_sink"]


class SpanSink(Protocol):
    """Where a runtime hands what its timed calls, hot-path transitions and training steps
    did, to be made into spans later (off the caller's thread)."""

    @property
    def recording(self) -> bool:
        """Whether anything handed over becomes a span (``False``: the no-op)."""
        ...

    @property
    def dropped(self) -> int:
        """Records dropped because the buffer was full (``buffer_full``)."""
        ...

    def submit(self, record: Any) -> None: ...

    def submit_transition(self, transition: Any) -> None: ...

    def submit_step(self, step: Any) -> None: ...

    #: the runtime timer, in ns: the clock of the records' timestamps
    timer: Callable[[], int]

    def flush(self, timeout_s: float) -> bool:
        """Make the spans of everything handed over so far (``False``: timed out)."""
        ...

    def shutdown(self, timeout_s: float) -> object:
        """Flush within ``timeout_s``, then stop (what is left is dropped, counted)."""
        ...


class MetricsSink(Protocol):
    """Where a runtime's counters are read from at collection time, and its timed-call
    durations queued for the duration histogram."""

    @property
    def recording(self) -> bool: ...

    #: ``(operation, backend, duration_us)`` of timed calls; ``append`` is all the call path
    #: does (a bounded deque: one atomic C call)
    pending: deque[Any]

    def close(self) -> None:
        """Stop reading the runtime (a last reading first, so a final export has it all)."""
        ...


class _NoSpans:
    """The span sink of a runtime whose telemetry is off: records nothing, costs nothing."""

    recording = False
    dropped = 0

    def submit(self, record: Any) -> None:
        pass

    def submit_transition(self, transition: Any) -> None:
        pass

    def submit_step(self, step: Any) -> None:
        pass

    timer = staticmethod(time.perf_counter_ns)

    def flush(self, timeout_s: float) -> bool:
        return True

    def shutdown(self, timeout_s: float) -> bool:
        return True

    def __repr__(self) -> str:
        return "<no span sink: telemetry off>"


class _NoMetrics:
    """The metrics sink of a runtime whose telemetry is off: queued durations vanish."""

    recording = False

    def __init__(self) -> None:
        self.pending: deque[Any] = deque(maxlen=0)  # (an append keeps nothing)

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return "<no metrics sink: telemetry off>"


NO_SPANS: SpanSink = _NoSpans()
NO_METRICS: MetricsSink = _NoMetrics()


def span_sink(*, enabled: bool, timer: Callable[[], int],
              tracer_provider: TracerProvider | None = None,
              on_cost: Callable[[float], None] | None = None) -> SpanSink:
    """A :class:`~adaptive_runtime.telemetry.spans.SpanRecorder` into ``tracer_provider``
    (default: the global one) when ``enabled``, else :data:`NO_SPANS`."""
    if not enabled:
        return NO_SPANS
    from .spans import SpanRecorder

    return SpanRecorder(timer=timer, tracer_provider=tracer_provider, on_cost=on_cost)


def metrics_sink(source: MetricsSource, *,
                 meter_provider: MeterProvider | None = None) -> MetricsSink:
    """A :class:`~adaptive_runtime.telemetry.metrics.RuntimeMetrics` reading ``source``
    into ``meter_provider`` (default: the global one)."""
    from .metrics import RuntimeMetrics

    return RuntimeMetrics(source, meter_provider=meter_provider)
