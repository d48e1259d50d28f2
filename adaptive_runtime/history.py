"""Measured history per (operation, size bucket, arm and variant), bounded, mergeable, serialisable.

Per arm: a sample count, the mean and variance of its latest timings (at most ``_WINDOW``,
stalls left out: see ``_SPIKE_RATIO``), failures and a quarantine deadline, and the time of
the last update. Per key: the arms, lifetime counts, and
how often estimates were merged in from elsewhere. What the policy makes of it (the committed
arm, the re-check schedule, the drift statistic) is the policy's own state
(:class:`adaptive_runtime.policy.KeyState`), kept apart.

The store is not thread-safe on its own: the runtime serialises access with its lock. The
policy reads it and never writes.

History files (:func:`write_history_file`, :func:`read_history_file`) are JSON: a format
name, the writing process's fingerprint (:mod:`adaptive_runtime.fingerprint`) and one record
per (operation, size bucket, arm). Written atomically and durably; read bounded (at most
``MAX_HISTORY_FILE_BYTES``) and validated field by field — no pickle, no eval.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import operator
import os
import re
import socket
import stat
import sys
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate

from .backend import VARIANT_NAME, Backend, Choice, choice_of
from .keys import reference_size

__all__ = ["HISTORY_FORMAT", "LEGACY_HISTORY_FORMAT", "MAX_HISTORY_FILE_BYTES", "ArmStats",
           "HistoryFile", "HistoryRecord", "HistoryStore", "HistoryWarning", "KeyHistory",
           "Origins", "combine_rank_rows", "move_aside", "read_history_file",
           "record_from_json", "record_to_json", "write_history_file"]

# /2: a "fingerprint" object beside the records. /1 files (no fingerprint) are still read.
HISTORY_FORMAT = "adaptive_runtime.history/2"
LEGACY_HISTORY_FORMAT = "adaptive_runtime.history/1"
# A history file larger than this is refused unread (as a corrupt one is): 16,384 keys of three
# arms take about 7 MiB.
MAX_HISTORY_FILE_BYTES = 64 * 1024 * 1024
# A number in a history file has at most this many characters: counts are int64 (19 digits
# and a sign). A longer one is corrupt or hostile, refused before it becomes an int.
_MAX_INT_CHARS = 20
# A history file nests three levels (document, records, record). One nested deeper than this is
# refused before ``json`` parses it: ``json`` recurses per level, and deep recursion in the
# caller's thread is what a hostile file must never cause.
_MAX_JSON_DEPTH = 64
# A string literal, or an unclosed one running to the end of the text. Unrolled, and unable to
# fail once it has seen a quote: one linear pass even over a hostile run of quotes and
# backslashes (a pattern that can fail is retried from every quote, which is quadratic).
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.DOTALL)
_NOT_A_BRACKET = re.compile(r"[^\[\]{}]+")
_BRACKET_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_MAX_COUNT = 2**63 - 1
# Latencies above this (about 31 years) are not measurements; the bound keeps the arithmetic
# of a merge (squared differences, products with counts) finite.
_MAX_LATENCY_US = 1e15


class HistoryWarning(UserWarning):
    """A history file was not applied: written on other hardware or library versions, or
    unreadable (then moved aside). Filter it with ``warnings.simplefilter(...,
    ar.HistoryWarning)``."""

# An arm's estimate is read from its latest timings in the epoch, at most this many: long
# enough to hold a bimodal arm's both modes in proportion, short enough to follow a change
# within a few dozen timings (as the EWMA it replaced, alpha 0.1, did).
_WINDOW = 16
# The estimate is the mean of the window: what the arm costs in total, a slow mode that comes
# now and then included (a bimodal or heavy-tailed arm is compared on its mean, not on its
# fast mode). Only a stall is left out: the largest timing where it is over this many times
# the next largest, up to two of them. (Measured on the development machine: one timing in
# ten of a call of over 65,536 elements is over 1.7x the median of the others, the worst 88x.
# The EWMA with timings clipped at 1.5x its mean that this replaces estimated an arm taking
# 60 us or, one call in four, 250 us at 72 us instead of its 107.5 us mean, and its drift
# test then alarmed on the slow mode.)
_SPIKE_RATIO = 2.0
_MAX_TRIMMED = 2
# A timing under 1/this of the estimate is not noise (noise only ever adds time): during the
# warm-up the timings before it carried one-off costs, after it two in a row mean the arm got
# faster; either way the estimate starts again from them (ArmStats._restart).
_FASTER_RATIO = 2.0
# A failing arm sits out 1 s, doubling with each consecutive failure, up to 5 minutes.
_QUARANTINE_BASE_S = 1.0
# Timings are learned at the bucket's reference size: a bucket spans sizes up to 2x apart, and a
# large call's time grows with its size, so raw timings of one arm would differ by up to 2x from
# the sizes alone — more than most gaps between arms, and enough to raise false drift alarms.
# A timing is taken as this fixed per-call cost plus a part proportional to the size (the
# affine model of a kernel call), and that part is rescaled; a timing under it is kept as it is.
FIXED_CALL_COST_US = 10.0
_QUARANTINE_MAX_S = 300.0


@dataclass(slots=True)
class ArmStats:
    """Live statistics of one arm on one key (mutable; read them through snapshots)."""

    samples: int = 0
    epoch_samples: int = 0
    mean_us: float = math.nan
    var_us2: float = 0.0
    failures: int = 0
    consecutive_failures: int = 0
    quarantined_until_s: float = -math.inf
    last_update: float = 0.0
    # the epoch's latest timings (at most _WINDOW; a ring once full, next write at window_at)
    window: list[float] = field(default_factory=list)
    window_at: int = 0
    # the first of a run of timings far under the estimate (see _FASTER_RATIO), NaN if none
    faster_us: float = math.nan
    # after a distributed sync: rank -> (samples, failures) first learned on that rank, as far
    # as this process knows (see HistoryStore.rank_rows); None if never synced
    origins: dict[int, tuple[int, int]] | None = None

    @property
    def estimate_us(self) -> float:
        """Expected latency: the window's mean, infinite while the arm's last attempt
        failed."""
        if self.consecutive_failures:
            return math.inf
        return self.mean_us if self.epoch_samples else math.nan

    def add_sample(self, duration_us: float, wall_time: float) -> bool:
        """Learn one timing; ``True`` when it started the estimate again (the arm got
        faster: see ``_restart``)."""
        n = self.epoch_samples
        if n and duration_us * _FASTER_RATIO < self.mean_us:
            first = self.faster_us
            if n < 3:  # the earlier timings carried one-off costs: drop them
                self._restart((duration_us,), wall_time)
                return True
            if first == first:  # (not NaN) the second timing in a row far under the estimate
                self._restart((first, duration_us), wall_time)
                return True
            self.faster_us = duration_us
        elif self.faster_us == self.faster_us:
            self.faster_us = math.nan
        window = self.window
        if n and not window:
            # a merged-in estimate has no raw timings: it stands in for them
            window.append(self.mean_us)
        if len(window) < _WINDOW:
            window.append(duration_us)
        else:
            at = self.window_at
            window[at] = duration_us
            self.window_at = (at + 1) % _WINDOW
        self._estimate()
        self.samples += 1
        self.epoch_samples = n + 1
        self.consecutive_failures = 0
        self.last_update = wall_time
        return False

    def _estimate(self) -> None:
        """The estimate and variance from the window: one timing as it is; the lower of two
        and the median of three (an arm's first timings often carry one-off costs: cold
        caches, lazy allocation); from four on the mean, stalls left out (``_SPIKE_RATIO``)."""
        window = self.window
        k = len(window)
        if k == 1:
            self.mean_us = window[0]
            self.var_us2 = 0.0
            return
        if k == 2:
            a, b = window
            self.mean_us = a if a < b else b
            self.var_us2 = (a - b) * (a - b) / 2.0
            return
        ordered = sorted(window)
        if k == 3:
            lo, mid, hi = ordered
            hi = min(hi, mid * 1.5)  # (the third timing's one-off cost: not spread)
            self.mean_us = mid
            self.var_us2 = ((lo - mid) ** 2 + (hi - mid) ** 2) / 2.0
            return
        m = k
        while m > k - _MAX_TRIMMED and ordered[m - 1] > _SPIKE_RATIO * ordered[m - 2]:
            m -= 1  # a stall far over every other timing: not what the arm costs
        kept = ordered[:m] if m < k else ordered
        mean = sum(kept) / m
        var = (sum(map(operator.mul, kept, kept)) - m * mean * mean) / (m - 1)
        self.mean_us = mean
        self.var_us2 = var if var > 0.0 else 0.0

    def _restart(self, timings: tuple[float, ...], wall_time: float) -> None:
        """The arm got faster (noise only ever adds time): its estimate starts again from
        ``timings``, as from an epoch's first ones — the one timing far under a warm-up's
        estimate (the earlier ones carried one-off costs), or the second of two in a row after
        it. (A window of older timings would take many timings to leave the old level: an
        ATen kernel that turned 5x faster early in a process was still estimated at its old
        time after six fast timings.)"""
        self.window = list(timings)
        self.window_at = 0
        self.mean_us = min(timings)
        self.var_us2 = 0.0
        self.faster_us = math.nan
        self.samples += 1
        self.epoch_samples = len(timings)
        self.consecutive_failures = 0
        self.last_update = wall_time

    def add_failure(self, now_s: float, wall_time: float) -> None:
        self.failures += 1
        self.consecutive_failures += 1
        backoff = _QUARANTINE_BASE_S * 2.0 ** (self.consecutive_failures - 1)
        self.quarantined_until_s = now_s + min(backoff, _QUARANTINE_MAX_S)
        self.last_update = wall_time

    def start_epoch(self) -> None:
        """Forget the current estimate (keep lifetime counts): the arm is measured afresh."""
        self.epoch_samples = 0
        self.mean_us = math.nan
        self.var_us2 = 0.0
        self.window = []
        self.window_at = 0
        self.faster_us = math.nan


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


@dataclass(frozen=True, slots=True)
class HistoryRecord:
    """A frozen row of history: one implementation — an arm's primary one, or a variant
    (``variant`` its name) — of one (operation, size bucket)."""

    operation: str
    size_bucket: int
    backend: Backend
    samples: int
    mean_us: float
    failures: int
    last_update: float
    variance_us2: float = 0.0
    variant: str = ""

    @property
    def choice(self) -> Choice:
        """What the runtime learns the row as: the arm, or ``Variant(arm, variant)``."""
        return choice_of(self.backend, self.variant)


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


# rank -> (samples, failures) first learned there (see HistoryStore.rank_rows)
Origins = dict[int, tuple[int, int]]


def combine_rank_rows(
        per_rank: Sequence[tuple[int, Sequence[tuple[HistoryRecord, Origins]]]],
) -> list[tuple[HistoryRecord, Origins]]:
    """Every rank's :meth:`HistoryStore.rank_rows` (``(rank, rows)``, in rank order) merged
    into one history — the same on every rank that combines the same input.

    Counts are a grow-only counter per rank: for each origin rank, the most any rank knows of
    it; the arm's count is their sum. So the first sync sums the ranks' counts, and syncing
    again (in the same group or in any other) counts nothing twice: repeated syncs are
    idempotent. An estimate is the ranks' estimates weighted by the samples each rank learned
    itself (equal weights where none did; exactly the common value where all agree), the
    variance pooled likewise; ``last_update`` is the latest. Keys and arms come in the order
    of first appearance, ranks in order.
    """
    groups: dict[tuple[str, int, Backend, str],
                 list[tuple[int, HistoryRecord, Origins]]] = {}
    for rank, rows in per_rank:
        for r, origins in rows:
            groups.setdefault((r.operation, r.size_bucket, r.backend, r.variant), []).append(
                (rank, r, origins))
    out = []
    for (operation, bucket, backend, variant), items in groups.items():
        known: dict[int, tuple[int, int]] = {}
        for _, _, origins in items:
            for o, (n, failed) in origins.items():
                seen = known.get(o, (0, 0))
                known[o] = (max(seen[0], n), max(seen[1], failed))
        known = dict(sorted(known.items()))
        measured = [(origins.get(rank, (0, 0))[0], r) for rank, r, origins in items
                    if not math.isnan(r.mean_us)]
        mean, var = math.nan, 0.0
        if measured:
            first = measured[0][1]
            if all(r.mean_us == first.mean_us and r.variance_us2 == first.variance_us2
                   for _, r in measured):
                mean, var = first.mean_us, first.variance_us2
            else:
                if not sum(w for w, _ in measured):
                    measured = [(1, r) for _, r in measured]
                total = sum(w for w, _ in measured)
                mean = sum(w * r.mean_us for w, r in measured) / total
                var = sum(w * (r.variance_us2 + (r.mean_us - mean) ** 2)
                          for w, r in measured) / total
        out.append((HistoryRecord(operation, bucket, backend,
                                  sum(n for n, _ in known.values()), mean,
                                  sum(f for _, f in known.values()),
                                  max(r.last_update for _, r, _ in items), var, variant),
                    known))
    return out


@dataclass(frozen=True, slots=True)
class HistoryFile:
    """A history file as read: its path, format, the fingerprint of the process that wrote it
    (``None`` in a ``/1`` file, written before fingerprints existed) and its records."""

    path: str
    format: str
    fingerprint: Mapping[str, object] | None
    records: tuple[HistoryRecord, ...]


def write_history_file(path: str | os.PathLike[str], records: Iterable[HistoryRecord],
                       fingerprint: Mapping[str, object] | None = None) -> None:
    """Write ``records`` to ``path`` with ``fingerprint`` (default: this process's), atomically
    and durably.

    A temporary file in the same directory (``.<name>.<host>.<pid>.<random>.tmp``) is
    written, flushed and fsync'ed, then renamed over ``path`` (``os.replace``), and the
    directory is fsync'ed (where the platform allows it), so a crash or a failure at any step
    leaves either the previous file or the new one, whole. A failure removes its temporary
    file; one left by a process killed mid-save is removed by the next save on the same host
    (once that process is gone), and is never read. An existing file's permissions are kept.
    ``ValueError`` if the file would be over ``MAX_HISTORY_FILE_BYTES`` (it could not be read
    back).
    """
    path = os.fspath(path)
    data = history_document(records, fingerprint, what=f"history for {path!r}")
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    _remove_stale_temporaries(directory, os.path.basename(path))
    fd, tmp = tempfile.mkstemp(prefix=_temporary_prefix(os.path.basename(path)),
                               suffix=".tmp", dir=directory)
    try:
        fchmod = getattr(os, "fchmod", None)
        if fchmod is not None:
            # (mkstemp makes it 0600: keep an existing file's mode, else what open() gives)
            with contextlib.suppress(OSError):
                try:
                    mode = os.stat(path).st_mode & 0o7777
                except FileNotFoundError:
                    mode = 0o666 & ~_umask()
                fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_directory(directory)


def history_document(records: Iterable[HistoryRecord],
                     fingerprint: Mapping[str, object] | None = None, *,
                     what: str = "the history") -> bytes:
    """What a history file holds (UTF-8 JSON, format ``/2``): ``records`` with ``fingerprint``
    (default: this process's). Also kept inside checkpoints (``adaptive_runtime.lightning``).
    ``ValueError`` if it would be over ``MAX_HISTORY_FILE_BYTES`` (it could not be read back).
    """
    if fingerprint is None:
        from .fingerprint import hardware_fingerprint

        fingerprint = hardware_fingerprint()
    head = json.dumps({"format": HISTORY_FORMAT, "fingerprint": dict(fingerprint)})
    rows = [json.dumps(record_to_json(r)) for r in records]
    # one record a line: compact, yet readable and diffable
    data = (head[:-1] + ', "records": [\n' + ",\n".join(rows) + "\n]}\n").encode("utf-8")
    if len(data) > MAX_HISTORY_FILE_BYTES:
        raise ValueError(f"{what} would take {len(data)} bytes, over the "
                         f"{MAX_HISTORY_FILE_BYTES} a history file may hold (lower "
                         "max_history_keys)")
    return data


def _host() -> str:
    """This host's name as it goes into a temporary file's name (letters, digits, '-')."""
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:64] or "host"


def _temporary_prefix(name: str) -> str:
    # The writer's host and pid in the name let a later save tell a temporary file left by a
    # killed process (removable) from one another process is writing right now (left alone).
    return f".{name}.{_host()}.{os.getpid()}."


def _remove_stale_temporaries(directory: str, name: str) -> None:
    """Remove the temporary files of saves to ``name`` that a process on this host started
    and never finished (it was killed mid-save): their writer no longer runs. Files of live
    processes, of other hosts (a shared file system) or not named as :func:`write_history_file`
    names them are left. Best effort: a failure here never stops the save."""
    prefix = f".{name}.{_host()}."
    try:
        entries = [e.name for e in os.scandir(directory)
                   if e.name.startswith(prefix) and e.name.endswith(".tmp")]
    except OSError:
        return
    for entry in entries:
        pid_text = entry[len(prefix):].partition(".")[0]
        if not pid_text.isdigit() or int(pid_text) == os.getpid() or _alive(int(pid_text)):
            continue  # (this process's own: a save in another thread may be writing it)
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(directory, entry))


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this host (``True`` when that cannot be told)."""
    if pid <= 0 or not hasattr(os, "kill") or sys.platform == "win32":
        return True  # (os.kill on Windows terminates: never probe there; keep the file)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # (another user's process, or a pid this platform cannot name)
    return True


def _umask() -> int:
    """This process's umask, read without changing it (Linux), else the usual 022."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def _fsync_directory(directory: str) -> None:
    """Make a rename in ``directory`` durable; skipped where directories cannot be opened or
    synced (Windows, some network file systems)."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_history_file(path: str | os.PathLike[str]) -> HistoryFile:
    """Read and validate a history file (format ``/2``, or ``/1`` with no fingerprint).

    ``ValueError`` with one message naming the file and what is wrong when it is over
    ``MAX_HISTORY_FILE_BYTES`` (refused from its size, unread), not a regular file, empty,
    not UTF-8, not JSON (truncated or corrupt), nested too deeply, holds a number of more than
    20 digits, repeats a key in an object, is in another format, or holds a malformed
    fingerprint or record (a field missing, of the wrong type or out of range; a record
    repeated). ``OSError`` (e.g. ``FileNotFoundError``, ``IsADirectoryError``) when it cannot
    be read. Nothing in the file is executed: it is parsed as JSON and every field is checked.
    """
    path = os.fspath(path)
    return parse_history_document(path, _read_bounded(path))


def parse_history_document(path: str, raw: bytes) -> HistoryFile:
    """A history document (what :func:`history_document` made) read from ``raw``, validated
    as :func:`read_history_file` validates a file; ``path`` names where it came from in errors
    and in the result."""
    if len(raw) > MAX_HISTORY_FILE_BYTES:
        raise ValueError(f"history file {path!r} is {len(raw)} bytes, over the "
                         f"{MAX_HISTORY_FILE_BYTES} a history file may hold")
    doc = _parse_json(path, raw)
    if not isinstance(doc, dict):
        raise ValueError(f"history file {path!r} is not a history file (a JSON object with a "
                         f"'format'): it holds {_brief(doc)}")
    if "format" not in doc:
        raise ValueError(f"history file {path!r} is not a history file: its JSON object has "
                         "no 'format'")
    fmt = doc["format"]
    if not isinstance(fmt, str) or fmt not in (HISTORY_FORMAT, LEGACY_HISTORY_FORMAT):
        raise ValueError(f"history file {path!r} is in format {_brief(fmt)}, not "
                         f"{HISTORY_FORMAT!r} (or {LEGACY_HISTORY_FORMAT!r})")
    fingerprint = None
    if fmt == HISTORY_FORMAT:
        fingerprint = doc.get("fingerprint")
        fault = _fingerprint_fault(fingerprint)
        if fault:
            raise ValueError(f"history file {path!r} has no valid fingerprint (an object of "
                             f"strings and integers): {fault}")
    rows = doc.get("records")
    if not isinstance(rows, list):
        raise ValueError(f"history file {path!r} has no list of records: 'records' is "
                         f"{_brief(rows) if 'records' in doc else 'missing'}")
    records = []
    seen: set[tuple[str, int, Choice]] = set()
    for i, row in enumerate(rows):
        try:
            record = record_from_json(row)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"history file {path!r} has a malformed record (#{i}): "
                             f"{exc!s:.300}") from None
        key = (record.operation, record.size_bucket, record.choice)
        if key in seen:
            raise ValueError(f"history file {path!r} has a malformed record (#{i}): it repeats "
                             f"{_brief(record.operation)} bucket {record.size_bucket} "
                             f"{record.choice.value}")
        seen.add(key)
        records.append(record)
    return HistoryFile(path, fmt, fingerprint, tuple(records))


def _read_bounded(path: str) -> bytes:
    """The bytes of the file at ``path``: refused unread when its size is over the bound, and
    never more than the bound plus one byte read (a file growing meanwhile)."""
    # O_NONBLOCK: opening a FIFO would otherwise wait for a writer, forever (no effect on a
    # regular file's reads).
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"history file {path!r} is not a regular file (it is "
                             f"{_file_kind(st.st_mode)})")
        if st.st_size > MAX_HISTORY_FILE_BYTES:
            raise ValueError(f"history file {path!r} is over {MAX_HISTORY_FILE_BYTES} bytes "
                             f"({st.st_size}), the most a history file may hold; not read")
        raw = f.read(MAX_HISTORY_FILE_BYTES + 1)
    if len(raw) > MAX_HISTORY_FILE_BYTES:
        raise ValueError(f"history file {path!r} is over {MAX_HISTORY_FILE_BYTES} bytes, "
                         "the most a history file may hold")
    if not raw.strip():
        raise ValueError(f"history file {path!r} is empty")
    return raw


def _file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a plain file"


class _Refused(ValueError):
    """What a JSON parsing hook refused (raised through ``json.loads``)."""


def _parse_int(text: str) -> int:
    # Refused before int() sees it: converting a long digit string costs time quadratic in
    # its length (why Python 3.11 refuses over 4,300 digits, with advice not meant for a
    # file's reader), and no count in a history file needs more than 20 characters.
    if len(text) > _MAX_INT_CHARS:
        raise _Refused(f"holds a number of {len(text.lstrip('-'))} digits "
                       f"({text[:12]}...), longer than any value of a history file")
    return int(text)


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    # A repeated key is read by parsers differently (first or last wins): refused, so the file
    # means one thing. (The writer never repeats one.)
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Refused(f"repeats the key {_brief(key)} in one JSON object")
            seen.add(key)
    return obj


def _nesting_depth(text: str) -> int:
    """The deepest nesting of JSON arrays and objects in ``text``, found without recursing:
    strings blanked, everything but brackets dropped, then a running sum (all in C loops)."""
    brackets = _NOT_A_BRACKET.sub("", _JSON_STRING.sub('""', text))
    return max(accumulate(map(_BRACKET_STEP.__getitem__, brackets)), default=0)


def _parse_json(path: str, raw: bytes) -> object:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"history file {path!r} is not UTF-8 text (byte "
                         f"{raw[exc.start]:#04x} at offset {exc.start}): corrupt, or not a "
                         "history file") from None
    if _nesting_depth(text) > _MAX_JSON_DEPTH:
        raise ValueError(f"history file {path!r} nests JSON arrays or objects too deeply "
                         f"(more than {_MAX_JSON_DEPTH} levels: corrupt, or not a history "
                         "file)")
    try:
        return json.loads(text, parse_int=_parse_int, object_pairs_hook=_unique_keys)
    except _Refused as exc:
        raise ValueError(f"history file {path!r} {exc}") from None
    except RecursionError:
        # (json recurses per nesting level; a history file nests three levels)
        raise ValueError(f"history file {path!r} nests JSON arrays or objects too deeply "
                         "(corrupt, or not a history file)") from None
    except ValueError as exc:  # json.JSONDecodeError: says where
        raise ValueError(f"history file {path!r} is not valid JSON (truncated or corrupt): "
                         f"{exc}") from None


def _fingerprint_fault(fingerprint: object) -> str:
    """What is wrong with a file's fingerprint, or ``""``."""
    if not isinstance(fingerprint, dict):
        return f"got {_brief(fingerprint)}"
    for name, value in fingerprint.items():
        if not (value is None or isinstance(value, str) or type(value) is int):
            return f"{_brief(name)} is {_brief(value)}"
    return ""


def _brief(value: object) -> str:
    """``value`` for a message: short, and never recursing into nested containers (a hostile
    file's nesting must not raise ``RecursionError`` while its error is being worded)."""
    if isinstance(value, str):
        return repr(value) if len(value) <= 60 else f"{value[:60]!r}... ({len(value)} characters)"
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        bits = value.bit_length()
        return repr(value) if bits <= 64 else f"an integer of {bits} bits"
    if isinstance(value, list):
        return f"a list of {len(value)} item{'s' if len(value) != 1 else ''}"
    if isinstance(value, dict):
        return f"an object of {len(value)} key{'s' if len(value) != 1 else ''}"
    return f"a {type(value).__name__}"


def move_aside(path: str | os.PathLike[str]) -> str:
    """Rename the file at ``path`` to ``<path>.corrupt-<UTC time>`` in the same directory
    (``-1``, ``-2``, ... appended if taken) and return the new path. Never overwrites a file:
    the new name is claimed with a hard link where the file system has them. ``OSError`` if the
    file cannot be moved (``FileNotFoundError``: it is gone, moved by another process)."""
    path = os.fspath(path)
    base = f"{path}.corrupt-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    for attempt in range(1000):
        target = base if attempt == 0 else f"{base}-{attempt}"
        try:
            os.link(path, target)
        except FileExistsError:
            continue
        except FileNotFoundError:
            raise
        except OSError:
            # no hard links on this file system: take a free name, then rename
            if os.path.lexists(target):
                continue
            os.rename(path, target)
            return target
        os.unlink(path)
        return target
    raise FileExistsError(f"no free name to move {path!r} aside to ({base}-N)")


def record_to_json(r: HistoryRecord) -> dict[str, object]:
    """A record as a JSON object (what a history file holds per row)."""
    # (field by field: dataclasses.asdict deep-copies, and cost most of a large save)
    row: dict[str, object] = {
        "operation": r.operation, "size_bucket": r.size_bucket, "backend": r.backend.value,
        "samples": r.samples, "mean_us": r.mean_us, "failures": r.failures,
        "last_update": r.last_update, "variance_us2": r.variance_us2}
    if r.variant:  # (an arm's primary implementation: no field, as files before variants)
        row["variant"] = r.variant
    return row


def _field(row: Mapping[str, object], name: str) -> object:
    if name not in row:
        raise ValueError(f"{name} is missing")
    return row[name]


def _number(row: Mapping[str, object], name: str, *, default: float | None = None,
            nan: bool = False, most: float = _MAX_LATENCY_US) -> float:
    """Field ``name`` as a float from 0 to ``most`` (NaN too where ``nan``)."""
    value = row.get(name, default) if default is not None else _field(row, name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number, got {_brief(value)}")
    number = float(value)  # (ints are at most 20 digits in a file; OverflowError in code)
    if math.isnan(number) and nan:
        return number
    if not (0.0 <= number <= most):
        raise ValueError(f"{name} {_brief(value)} is out of range (0 to {most:g})")
    return number


def _count(row: Mapping[str, object], name: str) -> int:
    value = _field(row, name)
    if type(value) is not int or not 0 <= value <= _MAX_COUNT:
        raise ValueError(f"{name} must be a count (an integer from 0 to 2**63-1), got "
                         f"{_brief(value)}")
    return value


def record_from_json(row: object) -> HistoryRecord:
    """A record from a JSON object; ``ValueError`` / ``TypeError`` naming the field (missing,
    of the wrong type or out of range) if it is malformed."""
    if not isinstance(row, dict):
        raise TypeError(f"a record must be a JSON object, got {_brief(row)}")
    operation = _field(row, "operation")
    if not isinstance(operation, str) or not operation:
        raise ValueError(f"operation must be a non-empty string, got {_brief(operation)}")
    try:
        # (a JSON escape can spell a lone surrogate: such a name fails every OTLP export)
        operation.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"operation must be valid Unicode text (encodable as UTF-8), got "
                         f"{_brief(operation)}") from None
    bucket = _field(row, "size_bucket")
    if type(bucket) is not int or bucket < 0 or bucket > 128:
        raise ValueError(f"size_bucket {_brief(bucket)} is not a bucket number (0 to 128)")
    backend = _field(row, "backend")
    if not isinstance(backend, str) or len(backend) > 20:
        raise ValueError(f"backend must be one of gpu, simd, scalar; got {_brief(backend)}")
    variant = row.get("variant", "")
    if not isinstance(variant, str) or (variant and not VARIANT_NAME.fullmatch(variant)):
        raise ValueError(f"variant must be 1-64 letters, digits and _ . + -, got "
                         f"{_brief(variant)}")
    samples = _count(row, "samples")
    failures = _count(row, "failures")
    try:
        # (NaN: no estimate in the arm's current epoch)
        mean = _number(row, "mean_us", nan=True)
        last_update = _number(row, "last_update")
        variance = _number(row, "variance_us2", default=0.0, nan=True,
                           most=_MAX_LATENCY_US**2)
    except OverflowError:  # (an int too large for a float: only from code, not from a file)
        raise ValueError("a number is out of range") from None
    if math.isnan(variance):
        variance = 0.0
    return HistoryRecord(
        operation=operation, size_bucket=bucket, backend=Backend.parse(backend),
        samples=samples, mean_us=mean, failures=failures, last_update=last_update,
        variance_us2=variance, variant=variant)
