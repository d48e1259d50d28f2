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

The three key gauges are read when a reader collects, never on the call path: one history
snapshot and one side-effect-free ``rt.decide()`` per reported key (the decision the key's
next call runs with, so a committed key's arm; during a re-check the arm committed before it).
They report the ``MAX_REPORTED_KEYS`` keys learned from most recently; the rest are folded
into the operation ``_other`` of ``adaptive.learned.latency`` (the mean over the folded keys,
per bucket and arm) and left out of the other two.

Every attribute is bounded: operation names are registry names (``select()`` names are capped
by the runtime), arms are three, reasons a handful, size buckets at most 65 per operation and
keys at most ``MAX_REPORTED_KEYS``.

Durations: the runtime appends ``(operation, backend, duration_us)`` for each timed call to
:attr:`RuntimeMetrics.pending` (a bounded ``deque``; ``append`` is one atomic C call). At
collection time a callback drains the queue into the histogram. Recording from inside a
callback is sound in the SDK (1.45): ``SynchronousMeasurementConsumer.collect`` runs every
asynchronous callback under its lock *before* it collects the reader's storage, and a
synchronous ``record`` goes straight to every reader's storage without that lock. So the
durations drained by a reader's collection are in that same export; a second reader on the
same provider sees them in its next collection.

Exemplars: a traced call's sample is a list, ``[operation, backend, duration_us, None]``; the
span worker puts the span context of the call's kernel span (``adaptive.execute``) in its
last place once it made the span, and the drain records the sample in that context. The SDK's
default exemplar filter (``trace_based``) keeps it as an exemplar of its bucket: the trace
behind a latency, in OTLP and (see :mod:`.prometheus`) on the scrape endpoint. A sample
drained before its span was made waits one collection for it, then is recorded with or
without one; it is counted once either way.

Forked children (DataLoader workers) report nothing: their counters start as a copy of the
parent's, and reporting them under the parent's resource would duplicate its series. Every hub
a child inherits is silent there (its callbacks observe nothing, queued durations are dropped).
"""

from __future__ import annotations

import logging
import math
import threading
import time
import weakref
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from opentelemetry import metrics, trace
from opentelemetry.metrics import CallbackOptions, Observation

from .._forks import after_fork_in_child, renew_after_fork
from .._version import __version__
from ..backend import VARIANT_SEPARATOR, choice_of
from ..keys import reference_size
from .instrumentation import records_metrics
from .stats import export_losses

if TYPE_CHECKING:
    from ..backend import Backend
    from ..decision import Decision
    from ..history import HistoryRecord
    from ..records import SelectionKey

__all__ = ["DURATION_BUCKETS_S", "MAX_REPORTED_KEYS", "METER_NAME", "OTHER_OPERATION",
           "KeySource", "MetricsSource", "RuntimeMetrics"]

_log = logging.getLogger(__name__)

METER_NAME = "adaptive_runtime"

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

# Attribute keys of each counter, in the order of the label tuples the readers below build.
_SELECTION = ("adaptive.operation", "adaptive.backend", "adaptive.decision")
_FALLBACK = ("adaptive.operation", "adaptive.backend", "adaptive.fallback_to")
_REASON = ("adaptive.sampling.reason",)
_KEY_LABELS = ("adaptive.operation", "adaptive.size_bucket", "adaptive.backend")
_DURATION_LABELS = ("adaptive.operation", "adaptive.backend")

# Marks the end of what a drain took from ``pending``; see RuntimeMetrics._drain.
_MARK: Any = object()
# In a traced call's sample: it waited one collection for its span (see _Hub._drain).
_WAITED: Any = object()

# Attribute dicts of the duration histogram are cached per (operation, backend); the cache is
# cleared past this size (operation names are bounded, so this is only a safety net).
_MAX_DURATION_ATTRS = 4096

#: Keys (operation, size bucket) reported by the learned-latency, committed and quarantined
#: gauges: the most recently learned from. With three arms that is at most 768 series per
#: gauge, and 256 ``rt.decide()`` calls per collection (~30 us each, on the collecting thread).
MAX_REPORTED_KEYS = 256
#: The operation label of the keys past ``MAX_REPORTED_KEYS`` (as the runtime's selection
#: counter names the ``select()`` names past its own cap).
OTHER_OPERATION = "_other"
# The three key gauges share one reading per collection: the first callback of a collection
# (the SDK runs callbacks in the order the instruments were created) reads, the other two reuse
# it. A reading older than this is never reused (another SDK, or a collection that skipped one).
_VIEW_MAX_AGE_S = 1.0
_COMMITTED_REASONS = frozenset({"exploit", "forced"})
_RECHECK = "recheck"


class MetricsSource(Protocol):
    """What :class:`RuntimeMetrics` reads (``AdaptiveRuntime`` provides it). Counts are
    cumulative since the source was created and cover every call, traced or not."""

    def selection_counts(self) -> Mapping[SelectionKey, int]: ...

    def fallback_counts(self) -> Mapping[tuple[str, Backend, Backend], int]: ...

    def trace_counts(self) -> Mapping[str, Mapping[str, int]]: ...

    def hot_operations(self) -> list[str]: ...

    @property
    def operations(self) -> tuple[str, ...]: ...


class KeySource(Protocol):
    """What the key gauges read, where a :class:`MetricsSource` also has it
    (``AdaptiveRuntime`` does; a source without these methods reports no keys)."""

    def history_snapshot(self) -> list[HistoryRecord]: ...

    def decide(self, operation: str, input_size: int) -> Decision: ...


def _label(value: object) -> str:
    # Backend, Variant and Reason have a ``value``: the bounded label ("simd:numpy" for a
    # variant, split into two attributes by _attributes).
    return str(getattr(value, "value", value))


def _attributes(keys: tuple[str, ...], labels: tuple[Any, ...]) -> dict[str, Any]:
    """The attributes of one series: ``keys`` and ``labels`` paired, an arm's variant
    ("<arm>:<variant>") split into ``adaptive.backend`` and ``adaptive.variant``."""
    attrs = dict(zip(keys, labels, strict=True))
    arm = attrs.get("adaptive.backend")
    if isinstance(arm, str) and VARIANT_SEPARATOR in arm:
        attrs["adaptive.backend"], _, attrs["adaptive.variant"] = arm.partition(
            VARIANT_SEPARATOR)
    return attrs


def _selections(source: MetricsSource) -> _Counts:
    return {(key.operation, _label(choice_of(key.backend, key.variant)), _label(key.reason)): n
            for key, n in source.selection_counts().items()}


def _fallbacks(source: MetricsSource) -> _Counts:
    return {(op, _label(failed), _label(to)): n
            for (op, failed, to), n in source.fallback_counts().items()}


def _exported(source: MetricsSource) -> _Counts:
    return {(reason,): n for reason, n in source.trace_counts().get("exported", {}).items()}


def _suppressed(source: MetricsSource) -> _Counts:
    return {(reason,): n for reason, n in source.trace_counts().get("suppressed", {}).items()}


_Counts = dict[tuple[str, ...], int]  # label values (in attribute-key order) -> count
_Read = Callable[[MetricsSource], _Counts]
_COUNTERS: Mapping[str, tuple[tuple[str, ...], _Read]] = {
    "selection": (_SELECTION, _selections),
    "fallback": (_FALLBACK, _fallbacks),
    "exported": (_REASON, _exported),
    "suppressed": (_REASON, _suppressed),
}
_OVERFLOWS = "overflows"  # counted by the hub itself, not read from the source


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
        self.pending: deque[Any] = deque((_MARK,), maxlen=max_pending + 1)
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
        return self._slot.counts[_OVERFLOWS].get((), 0)

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


class _Slot:
    """One runtime's place in a hub: its live RuntimeMetrics (if any) and its last totals."""

    __slots__ = ("counts", "member", "ref")

    def __init__(self, ref: weakref.ref[MetricsSource] | None) -> None:
        self.ref = ref  # None: the hub's totals of garbage-collected runtimes
        self.member: RuntimeMetrics | None = None
        self.counts: dict[str, _Counts] = {
            name: {} for name in (*_COUNTERS, _OVERFLOWS)}

    def update(self, name: str, fresh: Mapping[tuple[str, ...], int]) -> None:
        # Clamp to the previous reading: the runtime may briefly take back a call it counted
        # twice while racing (see _dispatch.counts.Counts.flush), and a counter must never go down.
        counts = self.counts[name]
        for labels, n in fresh.items():
            if n > counts.get(labels, 0):
                counts[labels] = n


class _Hub:
    """The instruments of one meter provider and the runtimes they observe.

    Silent in a forked child (a DataLoader worker): the child's counters start as a copy of
    the parent's, and reporting them under the parent's resource would duplicate the parent's
    series (and count its calls twice). Metrics stay the parent's; the child's callbacks
    report nothing and its queued durations are dropped, never recorded.
    """

    def __init__(self, meter: metrics.Meter) -> None:
        self._lock = threading.Lock()
        self._silent = False
        renew_after_fork(self, _Hub._after_fork)
        self._slots: list[_Slot] = []
        self._retired = _Slot(None)
        self._logged: set[str] = set()
        self._duration_attrs: dict[tuple[str, object], dict[str, str]] = {}
        counter = meter.create_observable_counter
        counter("adaptive.selection", [self._observer("selection")], "{call}",
                "Calls by operation, chosen arm and decision reason (every call, traced or not)")
        counter("adaptive.fallback", [self._observer("fallback")], "{call}",
                "Calls re-routed to another arm after the chosen arm (adaptive.backend) raised")
        counter("adaptive.span.exported", [self._observer("exported")], "{span}",
                "Timed calls whose spans the trace gate exported, by sampling reason")
        counter("adaptive.span.suppressed", [self._observer("suppressed")], "{span}",
                "Timed calls whose spans were not exported, by reason")
        meter.create_observable_gauge(
            "adaptive.hot_path.active", [self._observe_hot], "",
            "1 while the operation is on the hot path (its spans suppressed), else 0")
        # The key gauges share one reading per collection (see _key_view): the learned latency
        # is created first so that its callback, which runs first, makes it.
        self._view_lock = threading.Lock()
        self._view: _KeyView | None = None
        self._committed_before: dict[tuple[str, int], str] = {}
        gauge = meter.create_observable_gauge
        gauge("adaptive.learned.latency", [self._key_observer("latency")], "s",
              "Learned latency of an arm at a size bucket's reference size, by operation, "
              "size bucket and arm")
        gauge("adaptive.committed", [self._key_observer("committed")], "",
              "1 for the arm a key (operation, size bucket) is committed to, else 0")
        gauge("adaptive.quarantined", [self._key_observer("quarantined")], "",
              "1 while the arm's last attempt on the key raised (quarantined), else 0")
        self._duration = _create_histogram(meter)
        # Also the drain: its callback records the queued durations before reporting.
        counter("adaptive.op.duration.overflows", [self._observe_overflows], "{collection}",
                "Collections that found timed-call durations lost to a full queue")

    def _after_fork(self) -> None:
        # The parent's metric reader or Prometheus scrape may have held these at the fork.
        self._lock = threading.Lock()
        self._view_lock = threading.Lock()
        self._silent = True

    # ---------------------------------------------------------------- membership

    def attach(self, member: RuntimeMetrics) -> _Slot:
        source = member._source_ref()
        with self._lock:
            slot = next((s for s in self._slots if s.ref is not None and s.ref() is source),
                        None)
            if slot is None:
                slot = _Slot(member._source_ref)
                self._slots.append(slot)
            elif slot.member is not None:  # a second RuntimeMetrics for one runtime: replace
                self._retire_member(slot)
            slot.member = member
            return slot

    def detach(self, member: RuntimeMetrics) -> None:
        with self._lock:
            slot = member._slot
            if slot.member is member:
                self._retire_member(slot)

    def _retire_member(self, slot: _Slot) -> None:
        """Final drain and reading of the slot's member, then freeze it. Lock held."""
        member = slot.member
        assert member is not None
        self._drain(slot, member, wait=False)
        source = member.source()
        if source is not None:
            for name, (_keys, read) in _COUNTERS.items():
                self._read(slot, name, read, source)
        member._closed = True
        slot.member = None

    # ---------------------------------------------------------------- callbacks

    def _observer(self, name: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        keys, read = _COUNTERS[name]

        def observe(_options: CallbackOptions) -> Iterable[Observation]:
            if self._silent:
                return []
            try:
                with self._lock:
                    totals = self._totals(name, read)
                if name == "suppressed":  # process-wide, not per runtime
                    for reason, lost in export_losses().items():
                        if lost:
                            totals[(reason,)] += lost
                return [Observation(n, _attributes(keys, labels))
                        for labels, n in totals.items()]
            except Exception:  # never let observability break a collection
                self._log_once(name, "adaptive_runtime metrics: %s callback failed", name)
                return []

        observe.__qualname__ = f"_Hub.observe_{name}"
        return observe

    def _totals(self, name: str, read: _Read) -> Counter[tuple[str, ...]]:
        """Sum of every slot's (fresh or frozen) counts, retired ones included. Lock held."""
        totals: Counter[tuple[str, ...]] = Counter(self._retired.counts[name])
        dead = []
        for slot in self._slots:
            member = slot.member
            if member is not None:
                source = member.source()
            else:
                source = slot.ref() if slot.ref is not None else None
            if source is None:
                dead.append(slot)
                continue
            if member is not None:
                self._read(slot, name, read, source)
            totals.update(slot.counts[name])
        for slot in dead:
            self._bury(slot)
            totals.update(slot.counts[name])
        return totals

    def _read(self, slot: _Slot, name: str, read: _Read, source: MetricsSource) -> None:
        try:
            fresh = read(source)
        except Exception:  # the runtime's counters failed: report what we had
            self._log_once(f"read {name}", "adaptive_runtime metrics: reading %s failed", name)
            return
        slot.update(name, fresh)

    def _bury(self, slot: _Slot) -> None:
        """The slot's runtime was garbage-collected: fold its totals into the retired ones
        (bounded by the attribute sets, unlike a slot per dead runtime). Lock held."""
        if slot.member is not None:
            self._drain(slot, slot.member, wait=False)  # its last durations are real calls
            slot.member._closed = True
            slot.member = None
        self._slots.remove(slot)
        for name, counts in slot.counts.items():
            retired = self._retired.counts[name]
            for labels, n in counts.items():
                retired[labels] = retired.get(labels, 0) + n

    def _observe_hot(self, _options: CallbackOptions) -> Iterable[Observation]:
        if self._silent:
            return []
        try:
            with self._lock:
                active: dict[str, int] = {}
                for slot in self._slots:
                    source = slot.member.source() if slot.member is not None else None
                    if source is None:
                        continue
                    hot = set(source.hot_operations())
                    for op in source.operations:
                        active[op] = max(active.get(op, 0), int(op in hot))
            return [Observation(v, {"adaptive.operation": op}) for op, v in active.items()]
        except Exception:
            self._log_once("hot", "adaptive_runtime metrics: hot-path callback failed")
            return []

    # ---------------------------------------------------------------- keys

    def _key_observer(self, name: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        fresh = name == "latency"  # the first key gauge of a collection reads afresh

        def observe(_options: CallbackOptions) -> Iterable[Observation]:
            if self._silent:
                return []
            try:
                values: dict[tuple[str, int, str], float] = getattr(self._key_view(fresh), name)
                return [Observation(v, _attributes(_KEY_LABELS, key))
                        for key, v in values.items()]
            except Exception:
                self._log_once(f"keys {name}", "adaptive_runtime metrics: %s callback failed",
                               name)
                return []

        observe.__qualname__ = f"_Hub.observe_{name}"
        return observe

    def _key_view(self, fresh: bool) -> _KeyView:
        """This collection's reading of the runtimes' keys: made afresh when ``fresh`` (or when
        the last one is too old to be this collection's), else the last one."""
        with self._view_lock:
            view = self._view
            now = time.monotonic()
            if fresh or view is None or now - view.made_s > _VIEW_MAX_AGE_S:
                view = self._view = self._read_keys(now)
            return view

    def _read_keys(self, now: float) -> _KeyView:
        """Read every live runtime's history and its keys' decisions. View lock held (not the
        hub's: ``decide()`` takes each runtime's lock once per key, and attaching or another
        gauge need not wait for that)."""
        with self._lock:
            sources = [source for slot in self._slots if slot.member is not None
                       and (source := slot.member.source()) is not None]
        # (operation, bucket) -> (latest update, its runtime, {arm: learned mean_us})
        keys: dict[tuple[str, int], tuple[float, KeySource, dict[str, float]]] = {}
        for source in sources:
            if not (hasattr(source, "history_snapshot") and hasattr(source, "decide")):
                continue  # a source that learns nothing (a test double): no keys
            try:
                records = source.history_snapshot()
            except Exception:
                self._log_once("read keys", "adaptive_runtime metrics: reading history failed")
                continue
            mine: dict[tuple[str, int], list[Any]] = {}
            for r in records:
                row = mine.get((r.operation, r.size_bucket))
                if row is None:
                    row = mine[(r.operation, r.size_bucket)] = [r.last_update, {}]
                elif r.last_update > row[0]:
                    row[0] = r.last_update
                row[1][_label(r.choice)] = r.mean_us
            for key, (stamp, arms) in mine.items():
                held = keys.get(key)
                # a key two runtimes share: the one that learned on it last speaks for it
                if held is None or stamp > held[0]:
                    keys[key] = (stamp, source, arms)
        ranked = sorted(keys.items(), key=lambda item: item[1][0], reverse=True)
        cap = MAX_REPORTED_KEYS
        latency: dict[tuple[str, int, str], float] = {}
        committed: dict[tuple[str, int, str], float] = {}
        quarantined: dict[tuple[str, int, str], float] = {}
        before, self._committed_before = self._committed_before, {}
        for (op, bucket), (_stamp, source, arms) in ranked[:cap]:
            for arm, mean_us in arms.items():
                if not math.isnan(mean_us):  # (NaN: not timed since the key's last drift)
                    latency[(op, bucket, arm)] = mean_us / 1e6
            try:
                decision = source.decide(op, reference_size(bucket))
            except Exception:
                self._log_once("decide", "adaptive_runtime metrics: decide(%r, ...) failed", op)
                continue
            reason = _label(decision.reason)
            if reason in _COMMITTED_REASONS:
                chosen: str | None = _label(decision.choice)
            elif reason == _RECHECK:
                # A re-check times another arm while the commitment holds; which arm is
                # committed, the decision does not say: the one reported before, if any.
                chosen = before.get((op, bucket))
            else:
                chosen = None  # exploring (or re-measuring after a drift alarm)
            if chosen is not None:
                self._committed_before[(op, bucket)] = chosen
            estimates = {_label(b): us for b, us in decision.estimates_us.items()}
            for arm in arms.keys() | estimates.keys() | ({chosen} if chosen else set()):
                committed[(op, bucket, arm)] = int(arm == chosen)
                # (an infinite estimate: the arm's last attempt here raised)
                quarantined[(op, bucket, arm)] = int(math.isinf(estimates.get(arm, 0.0)))
        folded: dict[tuple[int, str], list[float]] = {}
        for (_op, bucket), (_stamp, _source, arms) in ranked[cap:]:
            for arm, mean_us in arms.items():
                if not math.isnan(mean_us):
                    acc = folded.setdefault((bucket, arm), [0.0, 0.0])
                    acc[0] += mean_us
                    acc[1] += 1.0
        for (bucket, arm), (total_us, n) in folded.items():
            latency[(OTHER_OPERATION, bucket, arm)] = total_us / n / 1e6
        return _KeyView(now, latency, committed, quarantined)

    def _observe_overflows(self, _options: CallbackOptions) -> Iterable[Observation]:
        if self._silent:
            return []
        try:
            with self._lock:
                for slot in list(self._slots):
                    if slot.member is not None:
                        self._drain(slot, slot.member)
                totals = self._totals(_OVERFLOWS, lambda _source: {})
            # reported even at 0, so an alert on it has a series from the start
            return [Observation(totals.get((), 0))]
        except Exception:
            self._log_once("drain", "adaptive_runtime metrics: recording durations failed")
            return []

    # ---------------------------------------------------------------- durations

    def _drain(self, slot: _Slot, member: RuntimeMetrics, wait: bool = True) -> None:
        """Record the member's queued durations into the histogram. Lock held.

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
        pending = member.pending
        if self._silent:
            # (a forked child: recording would take SDK locks the parent's reader may have
            # held at the fork, and nothing in the child exports them)
            pending.clear()
            pending.append(_MARK)
            return
        record = self._duration.record
        attrs = self._duration_attrs
        saw_mark = False
        waiting = []
        for _ in range(len(pending)):
            try:
                item = pending.popleft()
            except IndexError:
                break
            if item is _MARK:
                saw_mark = True
                continue
            try:
                operation, backend, duration_us = item[0], item[1], item[2]
                key = (operation, backend)
                labels = attrs.get(key)
                if labels is None:
                    if len(attrs) >= _MAX_DURATION_ATTRS:
                        attrs.clear()
                    labels = attrs[key] = _attributes(_DURATION_LABELS,
                                                      (str(operation), _label(backend)))
                span_context = item[3] if len(item) == 4 else None
                if span_context is None and len(item) == 4 and wait:
                    # a traced call whose span is not made yet (the span worker batches
                    # every second): left for the next collection, once
                    item[3] = _WAITED
                    waiting.append(item)
                elif span_context is not None and span_context is not _WAITED:
                    # recorded in the context of the call's span: the SDK keeps it as an
                    # exemplar, the trace behind a latency
                    record(duration_us / 1e6, labels, context=trace.set_span_in_context(
                        trace.NonRecordingSpan(span_context)))
                else:
                    record(duration_us / 1e6, labels)
            except Exception:  # a malformed item, or the SDK refused it: skip it
                self._log_once("record", "adaptive_runtime metrics: could not record a "
                               "duration (%r)", item)
        pending.extend(waiting)
        pending.append(_MARK)
        if not saw_mark:
            overflows = slot.counts[_OVERFLOWS]
            overflows[()] = overflows.get((), 0) + 1
            self._log_once("overflow", "adaptive_runtime metrics: more than %d timed-call "
                           "durations queued between two collections; the oldest were "
                           "dropped (counted in adaptive.op.duration.overflows). Raise "
                           "max_pending or collect more often.", member.max_pending, error=False)

    def _log_once(self, kind: str, message: str, *args: object, error: bool = True) -> None:
        """Log the first problem of each kind (with its traceback when ``error``); later ones
        are silent, so a broken exporter setup cannot flood the application's log."""
        if kind not in self._logged:
            self._logged.add(kind)
            _log.warning(message, *args, exc_info=error)


class _KeyView:
    """One reading of the key gauges: ``(operation, size bucket, arm) -> value`` each."""

    __slots__ = ("committed", "latency", "made_s", "quarantined")

    def __init__(self, made_s: float, latency: dict[tuple[str, int, str], float],
                 committed: dict[tuple[str, int, str], float],
                 quarantined: dict[tuple[str, int, str], float]) -> None:
        self.made_s = made_s
        self.latency = latency
        self.committed = committed
        self.quarantined = quarantined


def _create_histogram(meter: metrics.Meter) -> metrics.Histogram:
    # ``explicit_bucket_boundaries_advisory`` is in the API since 1.23; an SDK view configured
    # by the application still overrides it, as it should.
    return meter.create_histogram(
        "adaptive.op.duration", "s",
        "Kernel time of timed calls (1-in-N per converged key), by operation and arm",
        explicit_bucket_boundaries_advisory=DURATION_BUCKETS_S)


# One hub per meter provider (weakly keyed, so a dropped provider takes its hub along), and
# one for the global provider, whatever it is when the first runtime asks.
_hubs_lock = threading.Lock()
_hubs: weakref.WeakKeyDictionary[Any, _Hub] = weakref.WeakKeyDictionary()
_global: tuple[metrics.MeterProvider, _Hub] | None = None  # (provider it was built on, hub)


def _renew_hubs_lock() -> None:
    global _hubs_lock
    _hubs_lock = threading.Lock()  # (a forked child: see adaptive_runtime._forks)


after_fork_in_child(_renew_hubs_lock)


def _hub_for(meter_provider: metrics.MeterProvider | None) -> _Hub:
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
                _global = (current, _Hub(current.get_meter(METER_NAME, __version__)))
            return _global[1]
        try:
            hub = _hubs.get(meter_provider)
        except TypeError:  # not weak-referenceable or hashable: a hub of its own
            return _Hub(meter_provider.get_meter(METER_NAME, __version__))
        if hub is None:
            hub = _hubs[meter_provider] = _Hub(meter_provider.get_meter(METER_NAME, __version__))
        return hub
