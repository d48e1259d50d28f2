"""The policy's own state of one key (:class:`KeyState`), what one full evaluation works from
(``Round``), and the transitions of the state that more than one phase makes: commit to an
arm (``commit_to``, which arms the drift watch: ``follow``), pass a re-check turn
(``next_recheck_turn``), start an epoch after a drift alarm (``start_epoch``), commit no
more after a merge (``uncommit``) or a failure (``disarm``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..backend import Choice
from ..decision import Decision
from ..history import ArmStats, KeyHistory
from ..knobs import PolicyConfig

__all__ = ["KeyState"]


@dataclass(slots=True, eq=False)
class KeyState:
    """The policy's own state of one (operation, size bucket), apart from the measured
    :class:`~adaptive_runtime.history.ArmStats` it reads: the committed arm, the decision
    count and re-check schedule, the memoised exploit, the prior, the floors, the rest of an
    exploration plan and the Page-Hinkley drift statistic of the committed arm.

    Only :class:`Policy` changes it (its transitions: :meth:`Policy.step`,
    :meth:`Policy.next`, :meth:`Policy.observe`, :meth:`Policy.observe_failure`, ...).
    """

    incumbent: Choice | None = None  # the committed arm
    decisions: int = 0  # decisions made for the key (timed calls, selections)
    epoch: int = 0  # estimates measured afresh this many times (after drift alarms)
    epoch_start: int = 0  # decisions made when the current epoch began
    next_recheck: int = 0  # the decision count at which the next re-check is due
    recheck_interval: int = 0  # decisions between re-checks, doubling while the choice holds
    # re-check turns over (a turn with no arm to look at counts: every full_recheck_every-th
    # turn looks at every arm)
    rechecks: int = 0
    switches: int = 0  # commitments that replaced another committed arm
    # the last full exploit decision, reused (Policy.next) until memo_until decisions
    memo: Decision | None = None
    memo_until: int = 0
    # the arm expected to win: the committed arm after a drift alarm; exploration times it
    # fully and the others once
    prior: Choice | None = None
    # what each arm takes here at least (an implementation's floor_us for the key's first
    # call, raised to what the arm takes on a smaller size bucket now): an arm whose floor is
    # well over another arm's measured time is not tried yet
    floors: dict[Choice, float] | None = None
    # the implementations' floors alone (set_floors), which the smaller buckets' raise
    own_floors: dict[Choice, float] | None = None
    # the arm the nearest size buckets measured around the key found fastest (None: none
    # measured, or they disagree): tried first on the key's first call
    neighbours_best: Choice | None = None
    # how far each arm was behind the fastest there (its estimate over the fastest's, the
    # lesser of the two sides): one far behind starts behind here (see _affordable)
    behind: dict[Choice, float] | None = None
    # each arm's estimate when the current epoch began (at a drift alarm): what a timing of
    # it is expected to take until it is timed again, for the exploration budget
    previous_us: dict[Choice, float] | None = None
    # the exploring decisions still to come from the latest full evaluation's plan
    plan: tuple[Decision, ...] = ()
    # Page-Hinkley on the committed arm's timings relative to its estimate before each one
    # (baseline 0: not watching), less its relative spread (the slack)
    drift_baseline_us: float = 0.0
    drift_slack: float = 0.2
    drift_sum: float = 0.0
    drift_min: float = 0.0
    # the key's merge count (KeyHistory.merges) this state has seen: estimates merged in from
    # elsewhere end the commitment (the policy commits again from the merged numbers)
    merges: int = 0
    # the key's count of restarted estimates (KeyHistory.restarts: an arm got faster) when
    # the plan was made: a plan made before a restart is not followed
    restarts: int = 0
    # what timings of other arms than the committed one (re-checks, re-measurements) have
    # cost since the key first committed: spent from its exploration allowance
    explored_us: float = 0.0
    # what the key's calls took in all, as its timings tell: each timed call's duration for
    # the calls it stands for (the untimed ones since the key's previous timed call too);
    # an arm never timed here is owed its first trial from it (explore._affordable)
    calls_us: float = 0.0

    @property
    def drift_score(self) -> float:
        """Page-Hinkley statistic of the committed arm; 0 unless one is watched."""
        return self.drift_sum - self.drift_min

    @property
    def phase(self) -> str:
        """``"explore"`` (nothing committed yet) or ``"exploit"`` (an arm committed to)."""
        return "explore" if self.incumbent is None else "exploit"


class Round:
    """What one full evaluation of a key works from (built once per evaluation)."""

    __slots__ = ("best_seen", "confirmed", "key", "min_samples", "state", "usable", "waiting")

    def __init__(self, state: KeyState, key: KeyHistory, usable: Sequence[Choice],
                 best_seen: float, waiting: bool, min_samples: int) -> None:
        self.state = state
        self.key = key
        self.usable = usable
        self.best_seen = best_seen
        self.waiting = waiting  # an arm waits for the exploration budget
        self.min_samples = min_samples  # timings an arm is owed in this epoch
        self.confirmed = False  # a prior's plan is done and nothing contradicted it


def commit_to(state: KeyState, key: KeyHistory, backend: Choice, first_recheck: int) -> None:
    """Make ``backend`` the committed arm and watch it for drift (a prior has served)."""
    state.prior = None
    if state.incumbent is not None and state.incumbent is not backend:
        state.switches += 1
    state.incumbent = backend
    state.memo = None
    stats = key.arms.get(backend)
    state.drift_baseline_us = 0.0
    state.drift_sum = state.drift_min = 0.0
    if stats is not None and stats.epoch_samples:
        follow(state, stats)
    state.recheck_interval = first_recheck
    state.next_recheck = state.decisions + first_recheck


def next_recheck_turn(cfg: PolicyConfig, state: KeyState) -> None:
    """A re-check turn is over (taken, or passed with no arm to look at): the choice held
    until now, so look again later, then later still."""
    state.rechecks += 1
    state.recheck_interval = min(state.recheck_interval * 2, cfg.recheck_interval * 64)
    state.next_recheck = state.decisions + state.recheck_interval


def follow(state: KeyState, stats: ArmStats, spread: bool = True) -> None:
    """The drift test's baseline from the committed arm's estimate now and, where
    ``spread``, its slack from the arm's relative spread."""
    mean = stats.mean_us
    state.drift_baseline_us = mean
    if spread:
        slack = _PH_SLACK
        if stats.var_us2 > (slack * mean) ** 2:
            slack = math.sqrt(stats.var_us2) / mean
        state.drift_slack = slack


def disarm(state: KeyState) -> None:
    state.drift_baseline_us = state.drift_sum = state.drift_min = 0.0


def start_epoch(state: KeyState) -> None:
    """Re-explore from scratch (after drift): the caller measures every arm afresh too."""
    state.epoch += 1
    state.epoch_start = state.decisions
    state.incumbent = None
    state.memo = None
    disarm(state)


def uncommit(state: KeyState, merges: int) -> None:
    """Estimates were merged in from elsewhere: commit again from the merged numbers."""
    state.merges = merges
    state.incumbent = None
    state.memo = None
    disarm(state)


# Page-Hinkley on the ratio timing/baseline (see drift.observe_drift). The baseline is the
# committed arm's estimate before each timing, so a slow mode the arm has always had is in
# it; the slack is the arm's relative spread, taken while the statistic is at zero (no sign of
# a change), so a change cannot widen it as it comes in. (Against the estimate at commitment,
# made from one timing or a few, the arm's ordinary spread read as a slowdown: replayed,
# 126-142 alarms per 6,000 calls.) The ratio is capped at 2: capped at 3, a slow mode of one
# call in four (250 against 60 us) raised the statistic faster than the fast calls lowered
# it, and alarmed.
_PH_SLACK = 0.2
PH_RATIO_CAP = 2.0
