"""What a key's measured estimates say about its arms: the fastest (:func:`best_arm`), the
two fastest, and how sure it is that one arm is faster than another (``p_faster``,
``confidence_in``). Pure functions of :class:`~adaptive_runtime.history.ArmStats`: exploration,
the commit rule, the drift test, the floors and the explained decisions all read them."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from ..backend import Choice
from ..history import ArmStats

__all__ = ["best_arm"]


def best_arm(backends: Sequence[Choice], arms: Mapping[Choice, ArmStats]) -> Choice | None:
    """The arm of ``backends`` with the lowest estimate in the current epoch, or ``None``."""
    best, best_us = None, math.inf
    for b in backends:
        stats = arms.get(b)
        if stats is None or not stats.epoch_samples:
            continue
        est = stats.estimate_us
        if est < best_us:
            best, best_us = b, est
    return best


def two_fastest(arms: Mapping[Choice, ArmStats],
                backends: Sequence[Choice]) -> tuple[Choice | None, Choice | None]:
    """The fastest and second-fastest of ``backends`` timed in this epoch and not failing."""
    best = runner = None
    best_us = runner_us = math.inf
    for b in backends:
        stats = arms.get(b)
        if stats is None or not stats.epoch_samples or stats.consecutive_failures:
            continue
        us = stats.mean_us
        if us < best_us:
            best, best_us, runner, runner_us = b, us, best, best_us
        elif us < runner_us:
            runner, runner_us = b, us
    return best, runner

def confidence_in(chosen: Choice, usable: Sequence[Choice],
                  arms: Mapping[Choice, ArmStats], noise_floor: float) -> float:
    """P(chosen is faster than the runner-up: the fastest other of ``usable`` measured in
    this epoch, the first one on a tie), as ``p_faster`` reads it."""
    runner = None
    runner_us = math.inf
    for b in usable:
        stats = arms.get(b)
        if b is chosen or stats is None or not stats.epoch_samples:
            continue
        us = stats.estimate_us
        if runner is None or us < runner_us:
            runner, runner_us = stats, us
    return 1.0 if runner is None else p_faster(arms[chosen], runner, noise_floor)


def p_faster(mine: ArmStats, theirs: ArmStats, noise_floor: float) -> float:
    """P(``mine`` is faster than ``theirs``), normal approximation of the two estimates,
    each timing's variance at least ``(noise_floor x estimate)^2``."""
    theirs_us = theirs.estimate_us
    if math.isinf(theirs_us):
        return 1.0
    mine_us = mine.estimate_us
    floor = noise_floor * noise_floor
    se = math.sqrt(max(mine.var_us2, floor * mine_us * mine_us) / mine.epoch_samples
                   + max(theirs.var_us2, floor * theirs_us * theirs_us) / theirs.epoch_samples)
    gap = theirs_us - mine_us
    if se == 0.0:
        return 1.0 if gap > 0 else 0.5
    return 0.5 * (1.0 + math.erf(gap / (se * _SQRT2)))


_SQRT2 = math.sqrt(2.0)

