"""``RuntimeStats``: one frozen reading of a runtime's per-call counters; what its trace gate
did with the calls it saw."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from ..backend import Backend
from ..decision import Reason
from ..gating import TraceGate
from ..records import SelectionKey
from ..telemetry.sinks import SpanSink

if TYPE_CHECKING:
    from .._dispatch import Dispatcher
    from ..telemetry.metric_sources import MetricsSource

__all__ = ["RuntimeStats", "read_stats", "trace_counts"]


@dataclass(frozen=True)
class RuntimeStats:
    """A runtime's per-call counters at one moment (:meth:`AdaptiveRuntime.stats`).

    - ``selections``: calls by ``(operation, backend, reason)`` (a key with those three
      fields), traced or not; :meth:`calls` sums them;
    - ``fallbacks``: calls re-routed after an arm raised, by ``(operation, failed arm,
      fallback arm)``;
    - ``hot_operations``: operations on the hot path now (their spans off, learning on);
    - ``spans_admitted``: timed calls whose spans the trace gate admitted;
    - ``spans_exported`` / ``spans_suppressed``: those calls by the trace gate's reason
      (``decision``, ``slow``, ``sampled``, ... / ``hot_path``, ``not_sampled``, ``budget``,
      ``buffer_full``, ...);
    - ``recording_spans``: whether the runtime's calls can become spans now: telemetry is on
      for it (``ar.telemetry.configure()``, an application's SDK tracer provider — one set
      after the runtime was made counts from the timed call that notices it, about a second
      later — or ``ar.telemetry.instrument(rt)``), exports traces, and ``config.tracing`` is
      on;
    - ``torch_threads``: where the runtime chooses thread counts
      (``RuntimeConfig.choose_threads``), torch's: ``threads`` its intra-op pool runs at now,
      ``held`` the count the runtime holds it at for a phase (0: none, the pool's size),
      ``trials`` the trials of another count so far and ``kept`` those whose count was kept
      (docs/policy.md, "Thread counts are choices"); empty where counts are not chosen.
    """

    selections: Mapping[SelectionKey, int]
    fallbacks: Mapping[tuple[str, Backend, Backend], int]
    hot_operations: tuple[str, ...]
    spans_admitted: int
    spans_exported: Mapping[str, int]
    spans_suppressed: Mapping[str, int]
    recording_spans: bool
    torch_threads: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    def calls(self, operation: str | None = None, backend: Backend | str | None = None,
              reason: Reason | str | None = None) -> int:
        """Calls counted in :attr:`selections`, all of them or those matching every filter
        given (``backend`` and ``reason`` as enums or their string values)."""
        arm = None if backend is None else Backend.parse(backend)
        why = None if reason is None else Reason(reason)
        return sum(n for key, n in self.selections.items()
                   if (operation is None or key.operation == operation)
                   and (arm is None or key.backend is arm)
                   and (why is None or key.reason is why))


def read_stats(source: MetricsSource, dispatcher: Dispatcher) -> RuntimeStats:
    """:meth:`AdaptiveRuntime.stats <adaptive_runtime.AdaptiveRuntime.stats>`: the counters
    ``source`` (the runtime) reports and what its ``dispatcher`` knows besides."""
    traces, frozen = source.trace_counts(), MappingProxyType
    return RuntimeStats(
        frozen(source.selection_counts()), frozen(source.fallback_counts()),
        tuple(source.hot_operations()), dispatcher.spans_admitted(),
        frozen(dict(traces["exported"])), frozen(dict(traces["suppressed"])),
        dispatcher.tracing, frozen(dispatcher.torch_trials()))


def trace_counts(gate: TraceGate, lock: threading.Lock,
                 spans: SpanSink) -> dict[str, dict[str, int]]:
    """:meth:`AdaptiveRuntime.trace_counts <adaptive_runtime.AdaptiveRuntime.trace_counts>`
    of ``gate`` (read under the dispatcher's ``lock``) and the span sink ``spans``."""
    with lock:
        counts = {"exported": {r.value: n for r, n in gate.exported.items() if n},
                  "suppressed": {r.value: n for r, n in gate.suppressed.items() if n}}
        if gate.steps_exported or gate.steps_suppressed:
            counts["steps"] = {"exported": gate.steps_exported,
                               "suppressed": gate.steps_suppressed}
    dropped = spans.dropped
    if dropped:
        counts["suppressed"]["buffer_full"] = dropped
    return counts
