"""OpenTelemetry metrics of a runtime, read from its own counters at collection time.

The runtime counts every call itself (selections, fallbacks, trace-gate verdicts), traced or
not; :class:`RuntimeMetrics` only *observes* those counters when a metric reader collects, so
the call path does no OpenTelemetry work at all. Instruments are created against the
OpenTelemetry **API** (the global meter provider unless one is given): without an SDK they
are no-ops, and the application's SDK decides readers, exporters, views and temporality.

Instruments (OTel names; the Prometheus exporter names are in parentheses):

- ``adaptive.selection`` counter — calls by ``adaptive.operation``, ``adaptive.backend`` and
  ``adaptive.decision`` (``adaptive_selection_total``).

Wherever a series names an arm (``adaptive.backend``), calls and estimates of a variant of
the arm carry ``adaptive.variant`` too (its registered name); an arm's primary implementation
carries none. Variants are registered names, a few per arm: the label stays bounded.

- ``adaptive.fallback`` counter — calls re-routed after an arm raised, by
  ``adaptive.operation``, ``adaptive.backend`` (the arm that failed) and
  ``adaptive.fallback_to`` (``adaptive_fallback_total``).
- ``adaptive.span.exported`` / ``adaptive.span.suppressed`` counters — timed calls whose spans
  the trace gate exported / did not, by ``adaptive.sampling.reason``
  (``adaptive_span_exported_total`` / ``adaptive_span_suppressed_total``); ``buffer_full``
  counts records the span recorder dropped; ``export_failed`` spans that configure()'s
  exporter could not deliver, ``queue_full`` and ``shutdown`` spans its export queue dropped
  (full, or not sent by the shutdown deadline): process-wide, see ``ar.telemetry.stats()``.
- ``adaptive.hot_path.active`` gauge — 1 for each registered operation on the hot path, else 0
  (``adaptive_hot_path_active``).
- ``adaptive.threads.held`` gauge — the threads torch's intra-op pool runs at, by
  ``adaptive.pool`` (``"torch"``): the count the runtime holds it at for a phase
  (``_dispatch/pool_phase``), else the pool's size; none while torch is not imported
  (``adaptive_threads_held``).
- ``adaptive.op.duration`` histogram, seconds, buckets from 1 µs to 10 s — the kernel time of
  every *timed* call (the runtime times 1-in-N calls of a converged key), by
  ``adaptive.operation`` and ``adaptive.backend`` (``adaptive_op_duration_seconds_bucket``,
  ``_sum``, ``_count``); traced calls are its exemplars (below).
- ``adaptive.op.duration.overflows`` counter — collection intervals in which the duration
  queue overflowed, so some durations were lost (``adaptive_op_duration_overflows_total``).
- ``adaptive.learned.latency`` gauge, seconds — what the runtime learned an arm takes at a size
  bucket's reference size (``rt.history_snapshot()``), by ``adaptive.operation``,
  ``adaptive.size_bucket`` and ``adaptive.backend`` (``adaptive_learned_latency_seconds``):
  plotted against the bucket, where the arms' curves cross is where the choice changes.
- ``adaptive.committed`` gauge — 1 for the arm a key (operation, size bucket) is committed to,
  0 for its other arms with history; all 0 while the key explores (``adaptive_committed``).
- ``adaptive.quarantined`` gauge — 1 for an arm whose last attempt on the key raised: it sits
  out a quarantine with back-off, and stays out until a retry succeeds; else 0
  (``adaptive_quarantined``).

The three key gauges are read when a reader collects, never on the call path, for the
``MAX_REPORTED_KEYS`` keys learned from most recently (see :mod:`.key_gauges`).

Every attribute is bounded: operation names are registry names (``select()`` names are capped
by the runtime), arms are three, reasons a handful, size buckets at most 65 per operation and
keys at most ``MAX_REPORTED_KEYS``.

Durations: the runtime appends ``(operation, backend, duration_us)`` for each timed call to
:attr:`RuntimeMetrics.pending` (a bounded ``deque``; ``append`` is one atomic C call); at
collection time a callback drains the queue into the histogram, traced calls in their spans'
context: exemplars (see :mod:`.durations`).

Forked children (DataLoader workers) report nothing: their counters start as a copy of the
parent's, and reporting them under the parent's resource would duplicate its series. Every hub
a child inherits is silent there (its callbacks observe nothing, queued durations are dropped).

This module is the public face (:class:`RuntimeMetrics`) and finds each meter provider's hub:
the shared instruments and their callbacks are in ``metrics_hub``; what they read from a
runtime in ``metric_sources``.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from typing import Any

from opentelemetry import metrics

from .._concurrency.forks import after_fork_in_child
from .._version import __version__
from .durations import DURATION_BUCKETS_S, MARK
from .instrumentation import records_metrics
from .key_gauges import MAX_REPORTED_KEYS, OTHER_OPERATION
from .metric_sources import KeySource, MetricsSource
from .metrics_hub import OVERFLOWS, Hub

__all__ = ["DURATION_BUCKETS_S", "MAX_REPORTED_KEYS", "METER_NAME", "OTHER_OPERATION",
           "KeySource", "MetricsSource", "RuntimeMetrics"]

METER_NAME = "adaptive_runtime"


class RuntimeMetrics:
    """Exports a runtime's counters and timed-call durations as OpenTelemetry metrics.

    ``source`` is the runtime (see :class:`MetricsSource`); only a weak reference to it is
    kept, so a runtime that is dropped is not kept alive by its metrics. ``meter_provider``
    defaults to the global one (``opentelemetry.metrics.get_meter_provider()``, a proxy until
    the application installs an SDK). ``max_pending`` bounds :attr:`pending`: that many
    durations between two collections are always kept (one more fits); past that the oldest
    are dropped and the next collection counts one overflow.

    The runtime appends ``(operation, backend, duration_us)`` of every timed call to
    :attr:`pending`; nothing else happens on its thread. Counters are read from the source
    when a reader collects.

    All runtimes on one meter provider share one set of instruments (the SDK returns an
    already registered instrument *without* the new callbacks, so a second set would be
    silently dead): counts of runtimes with the same attributes are summed. Counters stay
    monotonic: a closed runtime's last totals keep being reported (frozen), and a collected
    runtime's are kept too, so a process-wide total never drops (Prometheus would read a drop
    as a counter reset).

    Observability never breaks the caller: callbacks catch every exception, log it once per
    kind and carry on without that runtime's data.
    """

    recording = True  # (a MetricsSink, see sinks: the no-op one says False)

    def __init__(self, source: MetricsSource, *,
                 meter_provider: metrics.MeterProvider | None = None,
                 max_pending: int = 65536) -> None:
        if isinstance(max_pending, bool) or not isinstance(max_pending, int) or max_pending < 1:
            raise ValueError(f"max_pending must be an int >= 1, got {max_pending!r}")
        self._source_ref: weakref.ref[MetricsSource] = weakref.ref(source)
        self._max_pending = max_pending
        #: ``(operation, backend, duration_us)`` of timed calls, appended by the runtime and
        #: drained at collection. Also holds one private marker object (overflow detection),
        #: hence the one extra place.
        self.pending: deque[Any] = deque((MARK,), maxlen=max_pending + 1)
        self._closed = False
        self._hub = _hub_for(meter_provider)
        self._slot = self._hub.attach(self)

    def source(self) -> MetricsSource | None:
        """The runtime observed, or ``None`` once it is closed or was garbage-collected."""
        return None if self._closed else self._source_ref()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def max_pending(self) -> int:
        return self._max_pending

    @property
    def overflows(self) -> int:
        """Collections that found durations lost because :attr:`pending` was full."""
        return self._slot.counts[OVERFLOWS].get((), 0)

    def close(self) -> None:
        """Stop observing the runtime (idempotent).

        The durations queued so far are recorded and the counters read one last time, so the
        provider's final export still has every call up to now; after that the runtime is
        never read again (the OTel API cannot unregister callbacks, so they skip it) and its
        frozen totals keep the shared counters monotonic. A later ``RuntimeMetrics`` for the
        same runtime on the same provider continues from them.
        """
        self._hub.detach(self)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return (f"<RuntimeMetrics {state} pending~{len(self.pending)}"
                f"/{self._max_pending} overflows={self.overflows}>")


# One hub per meter provider (weakly keyed, so a dropped provider takes its hub along), and
# one for the global provider, whatever it is when the first runtime asks.
_hubs_lock = threading.Lock()
_hubs: weakref.WeakKeyDictionary[Any, Hub] = weakref.WeakKeyDictionary()
_global: tuple[metrics.MeterProvider, Hub] | None = None  # (provider it was built on, hub)


def _renew_hubs_lock() -> None:
    global _hubs_lock
    _hubs_lock = threading.Lock()  # (a forked child: see adaptive_runtime._concurrency.forks)


after_fork_in_child(_renew_hubs_lock)


def _hub_for(meter_provider: metrics.MeterProvider | None) -> Hub:
    global _global
    with _hubs_lock:
        current = metrics.get_meter_provider()
        if meter_provider is None or meter_provider is current:
            # A hub built on the API's proxy provider is kept: the proxy forwards its
            # instruments, callbacks included, to the SDK provider the application sets later
            # (a second hub on that provider would find its instruments taken). One built on a
            # real provider is rebuilt only if the global provider was replaced since.
            if _global is None or (records_metrics(_global[0])
                                   and _global[0] is not current):
                _global = (current, _new_hub(current))
            return _global[1]
        try:
            hub = _hubs.get(meter_provider)
        except TypeError:  # not weak-referenceable or hashable: a hub of its own
            return _new_hub(meter_provider)
        if hub is None:
            hub = _hubs[meter_provider] = _new_hub(meter_provider)
        return hub


def _new_hub(meter_provider: metrics.MeterProvider) -> Hub:
    return Hub(meter_provider.get_meter(METER_NAME, __version__), _reported_keys)


def _reported_keys() -> int:
    return MAX_REPORTED_KEYS  # (this module's, read at each collection)
