"""The instruments of one meter provider, shared by every runtime measured through it.

All runtimes on one meter provider share one set of instruments (the SDK returns an already
registered instrument *without* the new callbacks, so a second set would be silently dead).
A hub keeps one slot per runtime: its live :class:`~.metrics.RuntimeMetrics`, if any, and its
last totals, so counters stay monotonic when a runtime closes or is collected. Its callbacks
read the runtimes' counters when a reader collects (see ``metric_sources``), the key gauges
through a :class:`~.key_gauges.KeyReader`, and drain the queued durations into a
:class:`~.durations.DurationHistogram`.
"""

from __future__ import annotations

import logging
import sys
import threading
import weakref
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from .._concurrency.forks import renew_after_fork
from .._concurrency.thread_faults import record_fault
from ..threads import torch_threads
from .durations import MARK, DurationHistogram
from .key_gauges import KEY_LABELS, KeyReader, KeyView
from .metric_sources import COUNTERS, LabelCounts, MetricsSource, ReadCounts, series_attributes
from .stats import export_losses

__all__: list[str] = ["OVERFLOWS", "Hub"]

# (the metrics' logger is named for the module users know them by)
_log = logging.getLogger(__package__ + ".metrics")

OVERFLOWS = "overflows"  # counted by the hub itself, not read from the source


class _Member(Protocol):
    """What a hub uses of a :class:`~.metrics.RuntimeMetrics`."""

    pending: deque[Any]
    _source_ref: weakref.ref[MetricsSource]
    _slot: _Slot
    _closed: bool

    @property
    def max_pending(self) -> int: ...

    def source(self) -> MetricsSource | None: ...


class _Slot:
    """One runtime's place in a hub: its live RuntimeMetrics (if any), its last totals and,
    once its metrics closed, its gauges' last values."""

    __slots__ = ("counts", "gauges", "member", "ref")

    def __init__(self, ref: weakref.ref[MetricsSource] | None) -> None:
        self.ref = ref  # None: the hub's totals of garbage-collected runtimes
        self.member: _Member | None = None
        self.counts: dict[str, LabelCounts] = {
            name: {} for name in (*COUNTERS, OVERFLOWS)}
        # (hot path by operation, the key gauges' reading) as the metrics closed: reported
        # from then on, as the counters' last totals are — a closed runtime's gauges are in
        # every later export, the final one at exit included
        self.gauges: tuple[dict[str, int], KeyView] | None = None

    def update(self, name: str, fresh: Mapping[tuple[str, ...], int]) -> None:
        # Clamp to the previous reading: the runtime may briefly take back a call it counted
        # twice while racing (see _dispatch.counts.Counts.flush), and a counter must never go down.
        counts = self.counts[name]
        for labels, n in fresh.items():
            if n > counts.get(labels, 0):
                counts[labels] = n


class Hub:
    """The instruments of one meter provider and the runtimes they observe.

    Silent in a forked child (a DataLoader worker): the child's counters start as a copy of
    the parent's, and reporting them under the parent's resource would duplicate the parent's
    series (and count its calls twice). Metrics stay the parent's; the child's callbacks
    report nothing and its queued durations are dropped, never recorded.
    """

    def __init__(self, meter: metrics.Meter, reported_keys: Callable[[], int]) -> None:
        self._lock = threading.Lock()
        self._silent = False
        renew_after_fork(self, Hub._after_fork)
        self._slots: list[_Slot] = []
        self._retired = _Slot(None)
        self._logged: set[str] = set()
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
        meter.create_observable_gauge(
            "adaptive.threads.held", [self._observe_threads], "{thread}",
            "Threads torch's intra-op pool runs at: the count the runtime holds it at for a "
            "phase (1 where one thread measured faster), else the pool's size")
        # The key gauges share one reading per collection (see KeyReader.view): the learned
        # latency is created first so that its callback, which runs first, makes it.
        self._keys = KeyReader(self._sources, self._log_once, reported_keys)
        gauge = meter.create_observable_gauge
        gauge("adaptive.learned.latency", [self._key_observer("latency")], "s",
              "Learned latency of an arm at a size bucket's reference size, by operation, "
              "size bucket and arm")
        gauge("adaptive.committed", [self._key_observer("committed")], "",
              "1 for the arm a key (operation, size bucket) is committed to, else 0")
        gauge("adaptive.quarantined", [self._key_observer("quarantined")], "",
              "1 while the arm's last attempt on the key raised (quarantined), else 0")
        self._durations = DurationHistogram(meter, self._log_once)
        # Also the drain: its callback records the queued durations before reporting.
        counter("adaptive.op.duration.overflows", [self._observe_overflows], "{collection}",
                "Collections that found timed-call durations lost to a full queue")

    def _after_fork(self) -> None:
        # The parent's metric reader or Prometheus scrape may have held these at the fork.
        # (the key gauges' own lock is renewed by their KeyReader)
        self._lock = threading.Lock()
        self._silent = True

    # ---------------------------------------------------------------- membership

    def attach(self, member: _Member) -> _Slot:
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
            slot.gauges = None  # (live again)
            return slot

    def detach(self, member: _Member) -> None:
        # (the gauges' last reading first, outside the hub's lock: it asks the runtime's
        # decisions, which take the runtime's own lock)
        source = member.source()
        gauges = self._last_gauges(source) if source is not None and not self._silent else None
        with self._lock:
            slot = member._slot
            if slot.member is member:
                self._retire_member(slot)
                slot.gauges = gauges

    def _last_gauges(self, source: MetricsSource) -> tuple[dict[str, int], KeyView] | None:
        try:
            hot = set(source.hot_operations())
            return ({op: int(op in hot) for op in source.operations},
                    self._keys.last_reading(source))
        except Exception as exc:  # (closing never fails: without them, the gauges end here)
            record_fault("metrics", "last gauge reading", exc)
            return None

    def _retire_member(self, slot: _Slot) -> None:
        """Final drain and reading of the slot's member, then freeze it. Lock held."""
        member = slot.member
        assert member is not None
        self._drain(slot, member, wait=False)
        source = member.source()
        if source is not None:
            for name, (_keys, read) in COUNTERS.items():
                self._read(slot, name, read, source)
        member._closed = True
        slot.member = None

    # ---------------------------------------------------------------- callbacks

    def _observer(self, name: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        keys, read = COUNTERS[name]

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
                return [Observation(n, series_attributes(keys, labels))
                        for labels, n in totals.items()]
            except Exception as exc:  # never let observability break a collection
                record_fault("metrics", f"{name} callback", exc)
                return []

        observe.__qualname__ = f"Hub.observe_{name}"
        return observe

    def _totals(self, name: str, read: ReadCounts) -> Counter[tuple[str, ...]]:
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

    def _read(self, slot: _Slot, name: str, read: ReadCounts, source: MetricsSource) -> None:
        try:
            fresh = read(source)
        except Exception as exc:  # the runtime's counters failed: report what we had
            record_fault("metrics", f"reading {name}", exc)
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
                        last = slot.gauges[0] if slot.gauges is not None else {}
                        for op, v in last.items():
                            active[op] = max(active.get(op, 0), v)
                        continue
                    hot = set(source.hot_operations())
                    for op in source.operations:
                        active[op] = max(active.get(op, 0), int(op in hot))
            return [Observation(v, {"adaptive.operation": op}) for op, v in active.items()]
        except Exception as exc:
            record_fault("metrics", "hot-path callback", exc)
            return []

    def _observe_threads(self, _options: CallbackOptions) -> Iterable[Observation]:
        if self._silent:
            return []
        try:
            count = torch_threads()  # (process-wide; None: torch is not imported)
            return [] if count is None else [Observation(count, {"adaptive.pool": "torch"})]
        except Exception as exc:
            record_fault("metrics", "threads callback", exc)
            return []

    # ---------------------------------------------------------------- keys

    def _key_observer(self, name: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        fresh = name == "latency"  # the first key gauge of a collection reads afresh

        def observe(_options: CallbackOptions) -> Iterable[Observation]:
            if self._silent:
                return []
            try:
                values: dict[tuple[str, int, str], float] = getattr(self._keys.view(fresh), name)
                with self._lock:  # (closed runtimes' last readings: the live ones speak first)
                    last = [slot.gauges[1] for slot in self._slots
                            if slot.member is None and slot.gauges is not None]
                if last:
                    values = dict(values)
                    for view in last:
                        for key, v in getattr(view, name).items():
                            values.setdefault(key, v)
                return [Observation(v, series_attributes(KEY_LABELS, key))
                        for key, v in values.items()]
            except Exception as exc:
                record_fault("metrics", f"{name} callback", exc)
                return []

        observe.__qualname__ = f"Hub.observe_{name}"
        return observe

    def _sources(self) -> list[MetricsSource]:
        """The live runtimes, for the key gauges."""
        with self._lock:
            return [source for slot in self._slots if slot.member is not None
                    and (source := slot.member.source()) is not None]

    def _observe_overflows(self, _options: CallbackOptions) -> Iterable[Observation]:
        if self._silent:
            return []
        try:
            with self._lock:
                for slot in list(self._slots):
                    if slot.member is not None:
                        self._drain(slot, slot.member)
                totals = self._totals(OVERFLOWS, lambda _source: {})
            # reported even at 0, so an alert on it has a series from the start
            return [Observation(totals.get((), 0))]
        except Exception as exc:
            record_fault("metrics", "recording durations", exc)
            return []

    # ---------------------------------------------------------------- durations

    def _drain(self, slot: _Slot, member: _Member, wait: bool = True) -> None:
        """Record the member's queued durations into the histogram (see
        :meth:`DurationHistogram.drain`); count an overflow if some were lost. Lock held."""
        pending = member.pending
        if self._silent:
            # (a forked child: recording would take SDK locks the parent's reader may have
            # held at the fork, and nothing in the child exports them)
            pending.clear()
            pending.append(MARK)
            return
        if not self._durations.drain(pending, wait):
            overflows = slot.counts[OVERFLOWS]
            overflows[()] = overflows.get((), 0) + 1
            self._log_once("overflow", "adaptive_runtime metrics: more than %d timed-call "
                           "durations queued between two collections; the oldest were "
                           "dropped (counted in adaptive.op.duration.overflows). Raise "
                           "max_pending or collect more often.", member.max_pending, error=False)

    def _log_once(self, kind: str, message: str, *args: object, error: bool = True) -> None:
        """Log the first problem of each kind; later ones are silent, so a broken exporter
        setup cannot flood the application's log. ``error``: called while handling an
        exception, which is counted as a fault of the metric reader's thread (and logged
        with its traceback, once per kind: ``_concurrency.thread_faults``)."""
        exc = sys.exc_info()[1] if error else None
        if exc is not None:
            record_fault("metrics", kind, exc)
        elif kind not in self._logged:
            self._logged.add(kind)
            _log.warning(message, *args)
