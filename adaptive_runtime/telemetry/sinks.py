"""The seam between a runtime and its telemetry: two interfaces and their no-op
implementations (the OpenTelemetry API/SDK pattern; the factories that pick are the runtime's,
in ``adaptive_runtime.runtime._wiring``).

A runtime always holds a :class:`SpanSink` and a :class:`MetricsSink`. Until telemetry is
switched on (``ar.telemetry.configure()``, an application's own SDK provider, or
``ar.telemetry.instrument(rt)``) both are the no-ops below, which record nothing and import
nothing: this module loads neither the OpenTelemetry SDK nor even its API. The real ones —
:class:`~adaptive_runtime.telemetry.spans.SpanRecorder` and
:class:`~adaptive_runtime.telemetry.metrics.RuntimeMetrics` — are imported by those factories
only when they are made.

``recording`` tells the two apart without an ``isinstance`` or ``None`` check: the no-ops
say ``False``. (The dispatcher reads it once, when the sinks are attached: a timed call skips
the trace gate and its span record when no one records spans.)
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["NO_METRICS", "NO_SPANS", "MetricsSink", "SpanSink"]


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

