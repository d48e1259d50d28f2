"""Drift: the committed arm's Page-Hinkley statistic (``observe_drift``, on each of its
timings; its parameters, ``_PH_SLACK`` and ``PH_RATIO_CAP``, are kept with the state it
moves), the drift test of a full evaluation (``drift_decision``), and the memoised exploit decision,
reused while the arm neither drifts nor fails (``reusable_memo``)."""

from __future__ import annotations

from collections.abc import Sequence

from ..backend import Choice
from ..decision import Decision, Reason
from ..history import ArmStats, KeyHistory
from ..knobs import PolicyConfig
from .compare import best_arm
from .explain import explained_decision
from .explore import explore_budget
from .state import PH_RATIO_CAP, KeyState, follow


def drift_decision(cfg: PolicyConfig, state: KeyState, key: KeyHistory,
                   usable: Sequence[Choice]) -> Decision | None:
    """Drift: the committed arm's Page-Hinkley statistic passed ``drift_threshold`` (it
    got slower than when it was chosen): re-explore, starting with the best other arm whose
    timing fits the exploration budget (its estimate over what the slowed arm takes now),
    else with the slowed arm itself; the new epoch times the others as the budget allows.

    Why the budget: a machine's load slows the committed arm and raises the alarm on a key
    of large calls too, and there the other arm can be ten times slower still (a scalar loop
    at 40 ms against 4 ms); timed at once on every alarm, it cost more than the alarm saved.
    Replayed over four recordings of ``benchmarks/decision_quality.py``: regret 17.5% mean
    with every alarm timing the best other arm at once and again in the new epoch, 14.6%
    within the budget."""
    incumbent = state.incumbent
    if (incumbent is None or incumbent not in usable
            or state.drift_score <= cfg.drift_threshold):
        return None
    arms = key.arms
    slowed_us = arms[incumbent].mean_us
    budget = explore_budget(cfg, state, arms, slowed_us)
    others = [b for b in usable if b is not incumbent and b in arms
              and arms[b].estimate_us - slowed_us <= budget]  # (NaN: not measured, left out)
    return explained_decision(best_arm(others, arms) or incumbent, Reason.DRIFT, key, state)


def observe_drift(state: KeyState, duration_us: float, stats: ArmStats | None) -> None:
    """A timing of the committed arm was learned (:meth:`Policy.observe`; ``stats``, the arm's
    statistics after it): its Page-Hinkley statistic moves, and its baseline follows."""
    baseline = state.drift_baseline_us
    if baseline > 0.0:
        # Each timing adds (ratio - 1 - slack), the ratio to the arm's estimate before it
        # capped at PH_RATIO_CAP, so a stall or a slow mode cannot raise an alarm alone:
        # with the default alarm level 4 a sustained 3x slowdown alarms on its 6th timing,
        # and an isolated spike decays away at 0.2 or more per normal timing.
        ratio = duration_us / baseline
        if ratio > PH_RATIO_CAP:
            ratio = PH_RATIO_CAP
        state.drift_sum += ratio - 1.0 - state.drift_slack
        at_zero = state.drift_sum <= state.drift_min
        if at_zero:
            state.drift_min = state.drift_sum
        if stats is not None:
            follow(state, stats, at_zero)


def reusable_memo(state: KeyState, key: KeyHistory, drift_threshold: float) -> Decision | None:
    """The memoised exploit decision while it still stands — fewer than ``memo_until``
    decisions made (never past the next re-check), the committed arm neither drifting past
    ``drift_threshold`` nor failing — else ``None``."""
    memo = state.memo
    if memo is None or state.decisions >= state.memo_until or state.incumbent is None:
        return None
    if state.drift_sum - state.drift_min > drift_threshold:
        return None
    if key.arms[state.incumbent].consecutive_failures or state.merges != key.merges:
        return None
    return memo
