"""The measured history in memory: :class:`KeyHistory` per (operation, size bucket) — its
arms and lifetime counts, and how often estimates were merged in from elsewhere — and
:class:`HistoryStore`, every key's, bounded (least recently used evicted) and mergeable.

What the policy makes of it (the committed arm, the re-check schedule, the drift statistic) is
the policy's own state (:class:`adaptive_runtime.policy.KeyState`), kept apart.

The store is not thread-safe on its own: the runtime serialises access with its lock. The
policy reads it and never writes.
"""

from __future__ import annotations

import math
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping

from ..backend import Choice
from ..keys import reference_size
from .estimate import FIXED_CALL_COST_US, ArmStats
from .file import read_history_file, write_history_file
from .record import HistoryRecord, Origins

__all__ = ["HistoryStore", "KeyHistory"]


class KeyHistory:
    """Measured history of one (operation, size bucket): its arms and lifetime counts."""

    __slots__ = ("arms", "bucket", "failures", "id", "merges", "operation", "reference_size",
                 "restarts", "samples")

    def __init__(self, operation: str, bucket: int) -> None:
        self.operation = operation
        self.bucket = bucket
        self.id = (operation, bucket)
        self.reference_size = reference_size(bucket)
        # by choice: each arm's primary implementation (the arm) and each variant
        self.arms: dict[Choice, ArmStats] = {}
        self.samples = 0  # timings of all arms, lifetime
        self.failures = 0
        # estimates replaced from outside the policy this many times — merged in from
        # elsewhere (HistoryStore.merge), or restarted (restart): the policy commits again
        # from the numbers as they are
        self.merges = 0
        # arm estimates that started again from faster timings (ArmStats.add_sample)
        self.restarts = 0

    def arm(self, backend: Choice) -> ArmStats:
        stats = self.arms.get(backend)
        if stats is None:
            stats = self.arms[backend] = ArmStats()
        return stats

    def start_epoch(self) -> None:
        """Measure every arm afresh (after the policy's drift alarm): current estimates are
        forgotten, lifetime counts kept."""
        for stats in self.arms.values():
            stats.start_epoch()

    def restart(self, choices: Iterable[Choice]) -> int:
        """Measure ``choices`` afresh, from outside the policy (what they cost changed: their
        thread pool's size, say): their estimates are forgotten, lifetime counts kept, and
        the policy commits again. Returns how many had an estimate to forget."""
        restarted = 0
        for choice in choices:
            stats = self.arms.get(choice)
            if stats is not None and stats.epoch_samples:
                stats.start_epoch()
                restarted += 1
        if restarted:
            self.merges += 1
        return restarted


class HistoryStore:
    """All keys' history, least recently used evicted beyond ``max_keys``.

    Memory is bounded by ``max_keys`` keys of at most one entry per registered implementation
    (an arm or a variant of one: a few hundred bytes a key), whatever the number of distinct
    operations and sizes seen.
    """

    def __init__(self, max_keys: int, *, wall_clock: Callable[[], float] = time.time,
                 on_evict: Callable[[str, int], None] | None = None) -> None:
        if max_keys < 1:
            raise ValueError(f"max_keys must be >= 1, got {max_keys}")
        self.max_keys = max_keys
        self._keys: OrderedDict[tuple[str, int], KeyHistory] = OrderedDict()
        self._wall_clock = wall_clock
        # the latest time stamped on an arm (see _stamp)
        self._last_stamp = -math.inf
        self._on_evict = on_evict
        self.evictions = 0
        self._clears = 0

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[KeyHistory]:
        return iter(list(self._keys.values()))

    def _stamp(self) -> float:
        """The wall time of a new timing or failure: the clock, but always later than every
        time stamped or merged before. Why: the policy re-checks the arm heard from least
        recently (by ``last_update``), so two ranks that synced and then learn the same
        timings in the same order must order their arms alike — whatever their clocks'
        resolution (ties) or skew (a merged time from another node's clock ahead of ours)."""
        now = self._wall_clock()
        if now <= self._last_stamp:
            now = math.nextafter(self._last_stamp, math.inf)
        self._last_stamp = now
        return now

    def change_count(self) -> int:
        """A number that changes whenever timings or failures are learned, merged or
        forgotten (what a periodic save watches). Safe without the runtime's lock: the key
        list is copied in one C call, and a racy read only delays a save."""
        total = self.evictions + self._clears
        for key in list(self._keys.values()):
            total += key.samples + key.failures
        return total + len(self._keys)

    def find(self, operation: str, bucket: int) -> KeyHistory | None:
        """The key's history, or ``None``; does not change recency."""
        return self._keys.get((operation, bucket))

    def key(self, operation: str, bucket: int) -> KeyHistory:
        """The key's history, created if new; marks it most recently used."""
        k = (operation, bucket)
        keys = self._keys
        hist = keys.get(k)
        if hist is not None:
            keys.move_to_end(k)
            return hist
        hist = keys[k] = KeyHistory(operation, bucket)
        if len(keys) > self.max_keys:
            (old_op, old_bucket), _ = keys.popitem(last=False)
            self.evictions += 1
            if self._on_evict is not None:
                self._on_evict(old_op, old_bucket)
        return hist

    def touch(self, key: KeyHistory) -> None:
        """Mark ``key`` most recently used (no-op if it was evicted meanwhile)."""
        keys = self._keys
        if key.id in keys:
            keys.move_to_end(key.id)

    def record(self, key: KeyHistory, backend: Choice, duration_us: float,
               size: int) -> float:
        """Learn one timing of ``backend`` on ``key`` (from :meth:`key`), of a call of
        ``size`` elements, rescaled to the key's reference size (see FIXED_CALL_COST_US);
        returns the timing as learned (rescaled)."""
        stats = key.arms.get(backend)
        if stats is None:
            stats = key.arms[backend] = ArmStats()
        if duration_us > FIXED_CALL_COST_US and size:
            ref = key.reference_size
            if size != ref:  # (see FIXED_CALL_COST_US)
                duration_us = (FIXED_CALL_COST_US
                               + (duration_us - FIXED_CALL_COST_US) * ref / size)
        now = self._wall_clock()  # (self._stamp() inlined: this runs on every timed call)
        if now <= self._last_stamp:
            now = math.nextafter(self._last_stamp, math.inf)
        self._last_stamp = now
        if stats.add_sample(duration_us, now):
            key.restarts += 1
        key.samples += 1
        return duration_us

    def record_failure(self, key: KeyHistory, backend: Choice, now_s: float) -> ArmStats:
        """Count one failure of ``backend`` on ``key``: quarantined with back-off."""
        stats = key.arm(backend)
        stats.add_failure(now_s, self._stamp())
        key.failures += 1
        return stats

    def clear(self) -> None:
        evicted = list(self._keys)
        self._keys.clear()
        self._last_stamp = -math.inf  # (nothing left to order new timings after)
        self._clears += 1
        if self._on_evict is not None:
            for op, bucket in evicted:
                self._on_evict(op, bucket)

    def snapshot(self) -> list[HistoryRecord]:
        """Frozen records of every arm with data, sorted by (operation, bucket, backend)."""
        rows = [_row(h, b, s) for h in self._keys.values() for b, s in h.arms.items()
                if s.samples or s.failures]
        rows.sort(key=lambda r: (r.operation, r.size_bucket, r.backend.value, r.variant))
        return rows

    def rank_rows(self, rank: int) -> list[tuple[HistoryRecord, Origins]]:
        """What this process sends in a distributed sync as rank ``rank``: each arm's record
        (as :meth:`snapshot`) with its origins — the samples and failures first learned on
        each rank, as far as this process knows: those the last sync reported for the other
        ranks, and the rest as this rank's own."""
        rows = []
        for h in self._keys.values():
            for b, s in h.arms.items():
                if not (s.samples or s.failures):
                    continue
                origins = {o: c for o, c in (s.origins or {}).items() if o != rank}
                others = sum(c[0] for c in origins.values())
                others_failed = sum(c[1] for c in origins.values())
                origins[rank] = (max(s.samples - others, 0), max(s.failures - others_failed, 0))
                rows.append((_row(h, b, s), origins))
        return rows

    def replace(self, rows: Iterable[tuple[HistoryRecord, Origins]]) -> None:
        """Forget everything and hold exactly ``rows`` (from :func:`combine_rank_rows`): keys
        in the order given, every arm's numbers as given (new keys: their policy state starts
        afresh), nothing quarantined, and later timings stamped after the latest
        ``last_update`` given."""
        self.clear()
        for r, origins in rows:
            hist = self.key(r.operation, r.size_bucket)
            stats = hist.arm(r.choice)
            stats.samples = r.samples
            stats.failures = r.failures
            stats.mean_us = r.mean_us
            stats.var_us2 = r.variance_us2 if not math.isnan(r.mean_us) else 0.0
            stats.epoch_samples = r.samples if not math.isnan(r.mean_us) else 0
            stats.last_update = r.last_update
            stats.origins = dict(origins)
            hist.samples += r.samples
            hist.failures += r.failures
            if r.last_update > self._last_stamp:
                self._last_stamp = r.last_update

    def merge(self, records: Iterable[HistoryRecord]) -> None:
        """Combine ``records`` (another process, rank or saved file) into this store.

        Sample counts and failures add; latency means combine weighted by sample count;
        ``last_update`` keeps the later one. Keys with a committed arm are re-decided from the
        merged numbers on their next call.
        """
        for r in records:
            hist = self.key(r.operation, r.size_bucket)
            stats = hist.arm(r.choice)
            if r.samples > 0 and not math.isnan(r.mean_us):
                mine = stats.epoch_samples if not math.isnan(stats.mean_us) else 0
                total = mine + r.samples
                if mine == 0:
                    stats.mean_us = r.mean_us
                    stats.var_us2 = r.variance_us2
                else:
                    mean = (stats.mean_us * mine + r.mean_us * r.samples) / total
                    # pooled variance: within-group plus between-group spread
                    stats.var_us2 = ((stats.var_us2 * mine + r.variance_us2 * r.samples) / total
                                     + mine * r.samples * (stats.mean_us - r.mean_us) ** 2
                                     / (total * total))
                    stats.mean_us = mean
                stats.epoch_samples = total
            stats.samples += r.samples
            stats.failures += r.failures
            hist.samples += r.samples
            hist.failures += r.failures
            stats.last_update = max(stats.last_update, r.last_update)
            if r.last_update > self._last_stamp:
                self._last_stamp = r.last_update  # (later timings stamp after it: _stamp)
            # the committed arm may no longer be the best: the policy commits again
            hist.merges += 1

    # persistence -------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str],
             fingerprint: Mapping[str, object] | None = None) -> None:
        """Write the history to ``path`` (see :func:`write_history_file`)."""
        write_history_file(path, self.snapshot(), fingerprint)

    @staticmethod
    def read(path: str | os.PathLike[str]) -> list[HistoryRecord]:
        """The records of a history file, its fingerprint unchecked (see
        :func:`read_history_file`); ``ValueError`` says what is wrong."""
        return list(read_history_file(path).records)


def _row(key: KeyHistory, choice: Choice, stats: ArmStats) -> HistoryRecord:
    """The record of ``choice`` on ``key``."""
    return HistoryRecord(key.operation, key.bucket, choice.arm, stats.samples,
                         stats.mean_us if stats.epoch_samples else math.nan, stats.failures,
                         stats.last_update, stats.var_us2, choice.variant)
