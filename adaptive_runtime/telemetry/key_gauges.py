"""The readings behind the three key gauges of the runtime metrics.

``adaptive.learned.latency``, ``adaptive.committed`` and ``adaptive.quarantined`` are read
when a reader collects, never on the call path: one history snapshot and one side-effect-free
``rt.decide()`` per reported key (the decision the key's next call runs with, so a committed
key's arm; during a re-check the arm committed before it). They report the
``MAX_REPORTED_KEYS`` keys learned from most recently; the rest are folded into the operation
``_other`` of ``adaptive.learned.latency`` (the mean over the folded keys, per bucket and arm)
and left out of the other two.

The three gauges share one reading per collection (:meth:`KeyReader.view`): the first
callback of a collection reads, the other two reuse it.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

from .._concurrency.forks import renew_after_fork
from ..keys import reference_size
from .metric_sources import KeySource, MetricsSource, label_of

__all__ = ["KEY_LABELS", "MAX_REPORTED_KEYS", "OTHER_OPERATION", "KeyReader", "KeyView"]

#: Keys (operation, size bucket) reported by the learned-latency, committed and quarantined
#: gauges: the most recently learned from. With three arms that is at most 768 series per
#: gauge, and 256 ``rt.decide()`` calls per collection (~30 us each, on the collecting thread).
#: (A hub reads ``metrics.MAX_REPORTED_KEYS``, re-exported there, at each collection.)
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
# Attribute keys of the key gauges, in the order of their (operation, bucket, arm) labels.
KEY_LABELS = ("adaptive.operation", "adaptive.size_bucket", "adaptive.backend")

# (operation, bucket) -> (latest update, its runtime, {arm: learned mean_us})
_Keys = dict[tuple[str, int], tuple[float, KeySource, dict[str, float]]]
_Values = dict[tuple[str, int, str], float]


class KeyView:
    """One reading of the key gauges: ``(operation, size bucket, arm) -> value`` each."""

    __slots__ = ("committed", "latency", "made_s", "quarantined")

    def __init__(self, made_s: float, latency: dict[tuple[str, int, str], float],
                 committed: dict[tuple[str, int, str], float],
                 quarantined: dict[tuple[str, int, str], float]) -> None:
        self.made_s = made_s
        self.latency = latency
        self.committed = committed
        self.quarantined = quarantined


class KeyReader:
    """Reads a hub's runtimes' keys for the key gauges.

    ``sources``: the hub's live runtimes (taken under the hub's lock); ``log_once``: the hub's
    log of the first problem of each kind; ``reported_keys``: how many keys to report, read
    per collection. Remembers the arm each key was last reported committed to (a re-check
    does not say it).
    """

    def __init__(self, sources: Callable[[], list[MetricsSource]],
                 log_once: Callable[..., None], reported_keys: Callable[[], int]) -> None:
        self._sources = sources
        self._log_once = log_once
        self._reported_keys = reported_keys
        self._view_lock = threading.Lock()
        self._view: KeyView | None = None
        self._committed_before: dict[tuple[str, int], str] = {}
        renew_after_fork(self, KeyReader._after_fork)

    def _after_fork(self) -> None:
        # The parent's metric reader or Prometheus scrape may have held it at the fork.
        self._view_lock = threading.Lock()

    def view(self, fresh: bool) -> KeyView:
        """This collection's reading of the runtimes' keys: made afresh when ``fresh`` (or when
        the last one is too old to be this collection's), else the last one."""
        with self._view_lock:
            view = self._view
            now = time.monotonic()
            if fresh or view is None or now - view.made_s > _VIEW_MAX_AGE_S:
                after: dict[tuple[str, int], str] = {}
                view = self._view = self._read_keys(now, self._sources(),
                                                    self._committed_before, after)
                self._committed_before = after
            return view

    def last_reading(self, source: MetricsSource) -> KeyView:
        """A reading of ``source``'s keys alone: its last, taken as its metrics close, which
        the hub reports from then on (the final export at exit included)."""
        with self._view_lock:
            return self._read_keys(time.monotonic(), [source], self._committed_before, {})

    def _read_keys(self, now: float, sources: list[MetricsSource],
                   before: dict[tuple[str, int], str],
                   after: dict[tuple[str, int], str]) -> KeyView:
        """Read the runtimes' histories and their keys' decisions (``before``: the arm each
        key was reported committed to last; ``after`` gets this reading's). View lock held
        (not the hub's: ``decide()`` takes each runtime's lock once per key, and attaching
        or another gauge need not wait for that)."""
        keys = self._latest_keys(sources)
        cap = self._reported_keys()
        ranked = sorted(keys.items(), key=lambda item: item[1][0], reverse=True)
        latency: _Values = {}
        committed: _Values = {}
        quarantined: _Values = {}
        for (op, bucket), (_stamp, source, arms) in ranked[:cap]:
            for arm, mean_us in arms.items():
                if not math.isnan(mean_us):  # (NaN: not timed since the key's last drift)
                    latency[(op, bucket, arm)] = mean_us / 1e6
            self._decided(op, bucket, source, arms, before, after, committed, quarantined)
        _fold(ranked[cap:], latency)
        return KeyView(now, latency, committed, quarantined)

    def _latest_keys(self, sources: list[Any]) -> _Keys:
        """Every key the sources learned on, with the source that learned on it last."""
        keys: _Keys = {}
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
                row[1][label_of(r.choice)] = r.mean_us
            for key, (stamp, arms) in mine.items():
                held = keys.get(key)
                # a key two runtimes share: the one that learned on it last speaks for it
                if held is None or stamp > held[0]:
                    keys[key] = (stamp, source, arms)
        return keys

    def _decided(self, op: str, bucket: int, source: KeySource, arms: dict[str, float],
                 before: dict[tuple[str, int], str], after: dict[tuple[str, int], str],
                 committed: _Values, quarantined: _Values) -> None:
        """Add the key's committed and quarantined arms, from its next call's decision."""
        try:
            decision = source.decide(op, reference_size(bucket))
        except Exception:
            self._log_once("decide", "adaptive_runtime metrics: decide(%r, ...) failed", op)
            return
        reason = label_of(decision.reason)
        if reason in _COMMITTED_REASONS:
            chosen: str | None = label_of(decision.choice)
        elif reason == _RECHECK:
            # A re-check times another arm while the commitment holds; which arm is
            # committed, the decision does not say: the one reported before, if any.
            chosen = before.get((op, bucket))
        else:
            chosen = None  # exploring (or re-measuring after a drift alarm)
        if chosen is not None:
            after[(op, bucket)] = chosen
        estimates = {label_of(b): us for b, us in decision.estimates_us.items()}
        for arm in arms.keys() | estimates.keys() | ({chosen} if chosen else set()):
            committed[(op, bucket, arm)] = int(arm == chosen)
            # (an infinite estimate: the arm's last attempt here raised)
            quarantined[(op, bucket, arm)] = int(math.isinf(estimates.get(arm, 0.0)))


def _fold(rest: list[tuple[tuple[str, int], tuple[float, KeySource, dict[str, float]]]],
          latency: _Values) -> None:
    """Fold the keys past the cap into ``OTHER_OPERATION``'s latency: the mean per bucket
    and arm."""
    folded: dict[tuple[int, str], list[float]] = {}
    for (_op, bucket), (_stamp, _source, arms) in rest:
        for arm, mean_us in arms.items():
            if not math.isnan(mean_us):
                acc = folded.setdefault((bucket, arm), [0.0, 0.0])
                acc[0] += mean_us
                acc[1] += 1.0
    for (bucket, arm), (total_us, n) in folded.items():
        latency[(OTHER_OPERATION, bucket, arm)] = total_us / n / 1e6
