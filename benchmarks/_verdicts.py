"""Verdicts that statistics decide, for benchmarks that compare modes run side by side.

A shared machine runs identical code a few % apart from one process to the next, so one run
cannot decide a target of 1.00x or 0.70x. Modes run in rounds (each in its own process, taking
turns); a ratio is taken within each round (the mode against its baseline of that round), and
the verdict reads the rounds' ratios:

- the median ratio, with a 95 % bootstrap interval of the median (rounds resampled);
- "meets" when the whole interval is within the target, "MISSES" when the whole interval is
  beyond it, else "inconclusive", with about how many rounds would decide at the spread the
  rounds showed;
- never "meets" over nothing: a verdict over zero judged keys or rounds is "not judged".

Each table also prints an A/A row (one mode against itself, run as two modes), whose interval
is the noise floor the other rows are read against.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Ratio", "judge", "paired_ratio"]

RESAMPLES = 4000
# Beyond this many rounds to decide, a verdict says "> MANY_ROUNDS": the median sits on the
# target, and the estimate is only a sign of that.
MANY_ROUNDS = 100
_Z95 = 1.96


@dataclass(frozen=True)
class Ratio:
    """Per-round ratios of one mode against its baseline: their median, its 95 % bootstrap
    interval, how many rounds, and the standard deviation of their logarithms."""

    median: float
    low: float
    high: float
    rounds: int
    log_sd: float

    def __str__(self) -> str:
        if not self.rounds:
            return "-"
        return f"{self.median:.3f} [{self.low:.3f}, {self.high:.3f}]"


def paired_ratio(values: Sequence[float], baseline: Sequence[float], *,
                 seed: int = 40) -> Ratio:
    """``values[i] / baseline[i]`` for every round ``i`` (both measured in round ``i``), as a
    :class:`Ratio`. Rounds where either is missing or not positive are left out."""
    logs = [math.log(v / b) for v, b in zip(values, baseline, strict=True)
            if v > 0 and b > 0 and math.isfinite(v) and math.isfinite(b)]
    if not logs:
        return Ratio(math.nan, math.nan, math.nan, 0, math.nan)
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(logs, k=len(logs)))
                     for _ in range(RESAMPLES))
    low, high = medians[int(0.025 * RESAMPLES)], medians[int(0.975 * RESAMPLES) - 1]
    sd = statistics.stdev(logs) if len(logs) > 1 else math.nan
    return Ratio(math.exp(statistics.median(logs)), math.exp(low), math.exp(high), len(logs),
                 sd)


def judge(ratio: Ratio, target: float, *, judged: int | None = None) -> str:
    """The verdict of ``ratio`` against "at most ``target``": meets / MISSES / inconclusive
    (with the rounds that would decide at the spread seen); ``judged``: how many keys or
    buckets the ratio stands for, where that can be zero."""
    if not ratio.rounds or judged == 0:
        return "not judged"
    if ratio.high <= target:
        return "meets"
    if ratio.low > target:
        return "MISSES"
    needed = rounds_to_decide(ratio, target)
    if needed > MANY_ROUNDS:  # (the median sits on the target: no run here would decide)
        return f"inconclusive (> {MANY_ROUNDS} rounds)"
    return f"inconclusive (~{needed} rounds)"


def rounds_to_decide(ratio: Ratio, target: float) -> int:
    """About how many rounds put the interval on one side of ``target``, if the median and
    the spread stayed as measured (a normal approximation of the median's interval)."""
    distance = abs(math.log(ratio.median / target))
    if not math.isfinite(ratio.log_sd) or distance == 0:
        return 10 * max(ratio.rounds, 1)
    # (the median's standard error is ~1.25 sd / sqrt(n) for a normal sample)
    return max(ratio.rounds + 1, math.ceil((_Z95 * 1.25 * ratio.log_sd / distance) ** 2))
