"""What one arm is estimated to cost: :class:`ArmStats` and the estimator's constants.

Per arm: a sample count, the mean and variance of its latest timings (at most ``_WINDOW``,
stalls left out: see ``_SPIKE_RATIO``), failures and a quarantine deadline, and the time of
the last update. ``FIXED_CALL_COST_US`` is how a timing is rescaled to its bucket's reference
size (by :meth:`adaptive_runtime.history.HistoryStore.record`).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field

__all__ = ["FIXED_CALL_COST_US", "ArmStats"]

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
