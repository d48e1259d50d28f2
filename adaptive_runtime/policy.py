"""The selection policy: a state machine per (operation, size bucket).

The policy owns a :class:`KeyState` per key (the committed arm, the re-check schedule, the
memo, the prior, the floors, the exploration plan, the drift statistic) and reads the measured
:class:`~adaptive_runtime.history.ArmStats` of the key's arms, which it never writes: so
recorded timings can be replayed against another policy configuration offline
(:mod:`adaptive_runtime.replay`), and tests drive it with fake statistics and a fake clock.
:meth:`Policy.decide` is pure; the transitions (:meth:`Policy.step`, :meth:`Policy.next`,
:meth:`Policy.apply`, :meth:`Policy.observe`, :meth:`Policy.observe_failure`) change only the
state. What touches the measured history is the caller's: after a ``drift`` decision it starts
a new epoch of the key's estimates (``KeyHistory.start_epoch``), and where
:meth:`Policy.remeasures` says so, a re-check timing replaces its arm's estimate.

Phases of one key:

1. *heuristic* — no data yet: Trueno's cold-start rules (matrix-like work above 10,000
   elements → GPU if available; under 1,000 elements → SCALAR; otherwise SIMD).
2. *explore* — each candidate arm is timed ``min_samples`` times (by default once), round by
   round, whatever the cold-start order guessed it costs; an arm never timed whose floor
   (what it takes at least, e.g. the GPU arm's copies of a host call, or what it took on a
   smaller size bucket) is over ``floor_ratio`` x the best is not tried. With ``min_samples``
   above one: an arm whose estimate after two timings is over ``prune_ratio`` x the best so
   far needs no more (one costly timing that lost clearly is enough too, unless it was the
   key's first call); while the two fastest are not told apart (under ``clear_confidence``
   that the faster is faster), they are timed again, up to ``2 * min_samples`` times each;
   a round whose calls cost less than one look of the policy is planned through.
3. *exploit* — commit to the fastest; a challenger takes over only when faster by
   ``switch_margin`` (hysteresis), and timed at least three times in the epoch (a challenger timed
   less is re-timed first). Sparse *recheck* calls measure plausible other arms afresh, at
   intervals that double while the choice holds — starting after ``min_samples`` decisions
   when the commitment was not clear (under ``clear_confidence`` that the chosen arm is
   faster than the runner-up, each timing taken to vary by ``noise_floor`` at least, or a
   runner-up left behind on one costly timing), after the runtime's ``recheck_interval``
   when it was; each within the key's exploration allowance (``explore_share`` of its time,
   spent by every timing of another arm once committed: ``KeyState.explored_us``), an arm
   timed once priced at twice its smaller bucket's time at most; a turn with no arm to look
   at passes, and the next comes an interval later.
4. *drift* — when the committed arm's Page-Hinkley statistic passes ``drift_threshold`` (its
   timings ran over its estimate by more than its own spread), or when a challenger beats it
   in an epoch older than ``stale_after_decisions`` (estimates formed at different times),
   the key is re-explored: that arm in full, the others once (fully when one of them beats
   it clearly) — each when its estimate from before the alarm fits the allowance.

A failing arm has an infinite estimate and sits out a quarantine; ``fallback`` is the reason of
a call re-routed after an arm raised (:meth:`Policy.fallback`), or of one that runs while every
arm is quarantined.

One short function per phase, each given the configuration and what it reads: cold start
(:func:`heuristic_decision`), explore (``_explore``, ``_owed_round``, ``_checkpoints_pay``,
``_unsure_plan``, ``_prior_plan``), commit (``_commit``, ``_clearly_better``, ``_commit_to``),
exploit (``_explained_exploit``, the memo), re-check (``_recheck_target``,
``_left_on_first_timings``, ``_before_switch``), drift
(``_drift``, :meth:`Policy.observe`, ``_start_epoch``) and fallback (``_all_quarantined``,
:meth:`Policy.fallback`).
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Protocol

from .backend import Backend, Choice, Kind
from .decision import EMPTY_ESTIMATES, Decision, Reason
from .errors import ConfigError
from .history import ArmStats, KeyHistory

__all__ = [
    "Decision",
    "KeyState",
    "Neighbours",
    "Policy",
    "PolicyConfig",
    "Reason",
    "Step",
    "best_arm",
    "explore_decision",
    "heuristic_decision",
    "heuristic_order",
    "heuristic_preference",
    "plan_steps",
]

# Trueno's cold-start thresholds (elements).
MATRIX_GPU_MIN_ELEMENTS = 10_000
SCALAR_MAX_ELEMENTS = 1_000


# Decisions nobody will look at, built once: with no span sink, the runtime needs only the arm
# and the reason (``Policy.explained`` fills in the rest when someone asks).
_UNEXPLAINED_EXPLORE: dict[tuple[Choice, tuple[Choice, ...]], Decision] = {}
_UNEXPLAINED_EXPLOIT: dict[Choice, Decision] = {
    b: Decision(b, Reason.EXPLOIT) for b in Backend}
_EXPLOIT = Reason.EXPLOIT
_RECHECK = Reason.RECHECK
_HEURISTIC: dict[tuple[Choice, tuple[Choice, ...]], Decision] = {}  # no data: nothing to explain


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """Tuning of :class:`Policy` (the runtime fills it from :class:`RuntimeConfig`). Every knob
    is checked when made: :class:`~adaptive_runtime.errors.ConfigError` naming the knob and
    its range for a value of the wrong type or out of range."""

    min_samples: int = 1
    switch_margin: float = 0.05
    drift_threshold: float = 4.0
    prune_ratio: float = 3.0
    plausible_ratio: float = 4.0
    # every Nth re-check considers every arm, not only plausible ones, so an arm that was
    # slow for a while (contention, throttling) is eventually seen again
    full_recheck_every: int = 4
    # a commitment at least this sure (P(chosen faster than the runner-up)) is re-checked at
    # the regular interval; a less sure one soon
    clear_confidence: float = 0.95
    # an arm never timed on a key whose floor (KeyHistory.floors) is over this many times the
    # best measured estimate is not tried there (slack for the floor being an estimate)
    floor_ratio: float = 1.5
    # an epoch older than this many decisions holds stale estimates of the arms not committed
    # to: a switch they call for is re-measured first
    stale_after_decisions: int = 16
    # Exploring within an allowance: a re-check, or a re-trial after a drift alarm, is made
    # when what it is expected to cost over the best arm fits in what is left of the key's
    # allowance — explore_free_us, or explore_share of the time the key's calls have taken
    # so far, less what timings of other arms have cost since the key committed (so a
    # re-check on a key of large calls waits until the key has run long enough to pay for
    # it, and an arm far behind is re-timed ever more rarely). An arm never timed on the key
    # is tried at once. An untried arm's expected time: twice its floor from the next
    # smaller size bucket (sizes double per bucket), else unknown_arm_ratio x the best
    # measured (a plain loop against vectorised code).
    explore_free_us: float = 1000.0
    explore_share: float = 0.03
    unknown_arm_ratio: float = 3.0
    # decisions between re-checks of a clear commitment at first (doubling while it holds, up
    # to 64x); RuntimeConfig.recheck_interval
    recheck_interval: int = 64
    # What one timing is taken to vary at least, relative to its arm's estimate, when telling
    # two arms apart (P(faster)): a few timings show no spread of their own, and a shared
    # machine's timings of one call vary by 20-40%
    noise_floor: float = 0.1

    def __post_init__(self) -> None:
        for name, (least, most) in _KNOB_RANGES.items():
            value = getattr(self, name)
            integer = name in _INTEGER_KNOBS
            if integer and (isinstance(value, bool) or not isinstance(value, int)):
                raise ConfigError(f"policy knob {name} must be an int, got {value!r}",
                                  field=name)
            if not integer and (isinstance(value, bool)
                                or not isinstance(value, (int, float))):
                raise ConfigError(f"policy knob {name} must be a number, got {value!r}",
                                  field=name)
            if not least <= value <= most:  # (NaN fails both)
                bound = f">= {least:g}" if most == math.inf else f"in [{least:g}, {most:g}]"
                raise ConfigError(f"policy knob {name} must be {bound}, got {value!r}",
                                  field=name)


# Each knob's accepted range (both ends included; inf: no upper bound). drift_threshold inf
# turns drift detection off.
_KNOB_RANGES: dict[str, tuple[float, float]] = {
    "min_samples": (1, math.inf), "switch_margin": (0.0, math.inf),
    "drift_threshold": (0.0, math.inf), "prune_ratio": (1.0, math.inf),
    "plausible_ratio": (1.0, math.inf), "full_recheck_every": (1, math.inf),
    "clear_confidence": (0.0, 1.0), "floor_ratio": (1.0, math.inf),
    "stale_after_decisions": (1, math.inf), "explore_free_us": (0.0, math.inf),
    "explore_share": (0.0, 1.0), "unknown_arm_ratio": (1.0, math.inf),
    "recheck_interval": (1, math.inf), "noise_floor": (0.0, math.inf),
}
_INTEGER_KNOBS = frozenset({"min_samples", "full_recheck_every", "stale_after_decisions",
                            "recheck_interval"})


_GPU_FIRST = (Backend.GPU, Backend.SIMD, Backend.SCALAR)
_SCALAR_FIRST = (Backend.SCALAR, Backend.SIMD, Backend.GPU)
_SIMD_FIRST = (Backend.SIMD, Backend.SCALAR, Backend.GPU)


def heuristic_preference(kind: Kind, input_size: int) -> tuple[Backend, ...]:
    """All arms in Trueno's cold-start preference order for this kind and size: matrix-like
    work above 10,000 elements → GPU first; under 1,000 elements → SCALAR first; else SIMD."""
    if kind is Kind.MATRIX and input_size > MATRIX_GPU_MIN_ELEMENTS:
        return _GPU_FIRST
    if input_size < SCALAR_MAX_ELEMENTS:
        return _SCALAR_FIRST
    return _SIMD_FIRST


def heuristic_order(kind: Kind, input_size: int,
                    candidates: Sequence[Choice]) -> tuple[Choice, ...]:
    """``candidates`` with their arms in Trueno's cold-start preference order for this kind
    and size (an arm's variants after it, in the order given)."""
    return tuple(c for b in heuristic_preference(kind, input_size)
                 for c in candidates if c.arm is b)


class Neighbours(Protocol):
    """What the policy reads of other keys (a :class:`~adaptive_runtime.history.HistoryStore`
    is one): a smaller size bucket's history, for the floors."""

    def find(self, operation: str, bucket: int) -> KeyHistory | None: ...


class Step(enum.Enum):
    """How :meth:`Policy.next` came to its decision."""

    PLANNED = "planned"  # the next step of the exploration plan of an earlier decision
    REPEATED = "repeated"  # the memoised exploit decision, still standing
    DECIDED = "decided"  # a full evaluation (:meth:`Policy.step`)


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
    # well over another arm's measured time is not tried
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

    @property
    def drift_score(self) -> float:
        """Page-Hinkley statistic of the committed arm; 0 unless one is watched."""
        return self.drift_sum - self.drift_min

    @property
    def phase(self) -> str:
        """``"explore"`` (nothing committed yet) or ``"exploit"`` (an arm committed to)."""
        return "explore" if self.incumbent is None else "exploit"


class _Round:
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


class Policy:
    """The selection policy as a state machine over a key's :class:`KeyState` (see the module
    docstring): :meth:`decide` reads, the transitions write only the state."""

    def __init__(self, config: PolicyConfig | None = None) -> None:
        self.config = config or PolicyConfig()

    # ------------------------------------------------------------------ transitions

    def next(self, state: KeyState, key: KeyHistory, candidates: Sequence[Choice],
             now_s: float, neighbours: Neighbours | None = None,
             explain: bool = True) -> tuple[Decision, Step]:
        """The decision for the key's next timed call, applied: the exploration plan's next
        step, else the memoised exploit while it stands, else a full :meth:`step` (whose plan
        the following calls carry out)."""
        steps = state.plan
        # (exploration goes on by plan, without re-deciding, unless an arm's estimate
        # started again since: it got faster, and the plan was made without knowing)
        if steps and not key.failures and state.restarts == key.restarts:
            state.plan = steps[1:]
            state.decisions += 1
            return (self.explained(steps[0], state, key, candidates) if explain
                    else steps[0]), Step.PLANNED
        memo = _reusable_memo(state, key, self.config.drift_threshold)
        if memo is not None:
            state.decisions += 1
            return memo, Step.REPEATED
        decision = self.step(state, key, candidates, now_s, neighbours, explain)
        state.plan = plan_steps(decision.plan) if decision.plan else ()
        return decision, Step.DECIDED

    def step(self, state: KeyState, key: KeyHistory, candidates: Sequence[Choice],
             now_s: float, neighbours: Neighbours | None = None,
             explain: bool = True) -> Decision:
        """One full evaluation, applied: look at the smaller buckets (the floors),
        :meth:`decide`, then :meth:`apply`. Where it returns a ``drift`` decision
        the caller starts a new epoch of the key's estimates (``key.start_epoch()``)."""
        if state.merges != key.merges:  # estimates merged in: commit again from them
            _uncommit(state, key.merges)
        state.restarts = key.restarts
        if neighbours is not None:
            self._look_around(state, key, candidates, neighbours)
        decision = self.decide(state, key, candidates, now_s, explain)
        self.apply(state, key, decision, candidates)
        return decision

    def apply(self, state: KeyState, key: KeyHistory, decision: Decision,
              candidates: Sequence[Choice]) -> None:
        """What ``decision`` (from :meth:`decide` on the same data) implies for the state:
        count it; an exploit commits (and is memoised); a re-check pushes the next one back;
        a drift alarm starts a new epoch with the arm that slowed as the prior."""
        cfg = self.config
        memoised = decision is state.memo and state.decisions < state.memo_until
        prior = state.prior
        if (prior is not None and not key.failures and prior in candidates
                and _prior_contradicted(key, prior, candidates)):
            # decide() saw this and explored in full: the prior is wrong here
            state.prior = None
        recheck_due = state.decisions >= state.next_recheck
        state.decisions += 1
        reason = decision.reason
        if reason is _EXPLOIT:
            if state.incumbent is not decision.choice:
                _commit_to(state, key, decision.choice,
                           self.first_recheck(key, decision.choice, candidates))
            elif recheck_due:
                # A re-check came due and decide() found no arm to look at (none plausible,
                # or none within the exploration budget yet): the turn passes as if it had
                # held. Left due, the memo would end at once (it never outlives the next
                # re-check), so every timed call evaluated the policy in full, and with the
                # turns not counted the full re-check of every arm never came: an arm whose
                # only timing was a cold first call's was never timed again.
                _next_recheck_turn(cfg, state)
            if not memoised:
                # (an unexplained exploit is one shared object per arm: the memo is renewed by
                # every full evaluation, not only when the object changes)
                state.memo = decision
                state.memo_until = min(state.decisions + _MEMO_DECISIONS, state.next_recheck)
        elif reason is Reason.RECHECK:
            _next_recheck_turn(cfg, state)
        elif reason is Reason.DRIFT:
            # re-measure the arm that slowed in full and the others once: a full exploration
            # only if one of them now beats it (a machine's stall alarms too, and must not
            # cost min_samples calls of every slow arm)
            slowed = state.incumbent
            state.previous_us = {b: s.mean_us for b, s in key.arms.items()
                                 if s.epoch_samples and not s.consecutive_failures}
            _start_epoch(state)
            state.prior = slowed

    def forced(self, state: KeyState, key: KeyHistory | None, backend: Choice) -> Decision:
        """The decision when the runtime forces ``backend`` (counted; nothing learned)."""
        state.decisions += 1
        stats = key.arms.get(backend) if key is not None else None
        return Decision(backend, Reason.FORCED, 1.0,
                        {backend: stats.estimate_us} if stats else {},
                        stats.samples if stats else 0)

    def observe(self, state: KeyState, backend: Choice, duration_us: float,
                stats: ArmStats | None = None) -> None:
        """A timing of ``backend`` was learned (as the history learned it: at the key's
        reference size; ``stats``, the arm's statistics after it): the committed arm's drift
        statistic moves; any other arm's timing ends the memo (the next decision is a full
        one) and, once the key has committed, is spent from its exploration allowance."""
        if backend is not state.incumbent:
            state.memo = None
            if state.incumbent is not None:
                state.explored_us += duration_us + _EVALUATION_US
            return
        baseline = state.drift_baseline_us
        if baseline > 0.0:
            # Each timing adds (ratio - 1 - slack), the ratio to the arm's estimate before it
            # capped at _PH_RATIO_CAP, so a stall or a slow mode cannot raise an alarm alone:
            # with the default alarm level 4 a sustained 3x slowdown alarms on its 6th timing,
            # and an isolated spike decays away at 0.2 or more per normal timing.
            ratio = duration_us / baseline
            if ratio > _PH_RATIO_CAP:
                ratio = _PH_RATIO_CAP
            state.drift_sum += ratio - 1.0 - state.drift_slack
            at_zero = state.drift_sum <= state.drift_min
            if at_zero:
                state.drift_min = state.drift_sum
            if stats is not None:
                _follow(state, stats, at_zero)

    def observe_failure(self, state: KeyState, backend: Choice) -> None:
        """``backend`` raised (or answered wrongly): the memo and plan end; a committed arm
        is committed to no more (the key is re-decided from the remaining arms)."""
        state.memo = None
        state.plan = ()  # the failure changes what is worth exploring
        if state.incumbent is backend:
            state.incumbent = None
            _disarm(state)

    def set_floors(self, state: KeyState, floors: dict[Choice, float] | None) -> None:
        """Take ``floors``: what arms take at least on the key's first call, e.g. the GPU arm's
        copies of a host call. (:meth:`step` raises them to what the smaller size buckets
        measured, from the key's first decision on.)"""
        state.own_floors = floors
        state.floors = dict(floors) if floors else None

    def drop_plan(self, state: KeyState) -> None:
        """Forget the exploration plan (a selection or a reported timing came in between:
        the next call decides afresh)."""
        state.plan = ()

    def remeasures(self, key: KeyHistory, decision: Decision) -> bool:
        """Whether the timing of ``decision``'s arm replaces that arm's estimate rather than
        joining it (the caller starts the arm's epoch: ``ArmStats.start_epoch()``): a regular
        re-check. Why: the estimate dates from when the arm was explored, and a burst of load
        then can leave it far too high for the odd re-check timing to bring down. (An arm
        timed fewer than ``_confirm_samples`` times keeps its timings: the re-check's joins
        them, and it is re-timed before it may take over.)"""
        if decision.reason is not _RECHECK:
            return False
        stats = key.arms.get(decision.choice)
        return stats is not None and stats.epoch_samples >= _confirm_samples(self.config)

    def _look_around(self, state: KeyState, key: KeyHistory, candidates: Sequence[Choice],
                     neighbours: Neighbours) -> None:
        """Raise the floors to what the smaller buckets measured: at the checkpoints after
        the first and second round of timings, not only when the key is created (a workload
        creates its keys together, long before any of them has converged), and at every full
        evaluation while an arm has been timed here fewer than twice — never, or once, maybe
        cold — as its floor may be what keeps it out or prices its re-check. (Replayed over
        twelve recordings of ``benchmarks/decision_quality.py``, with the floors made afresh
        each time: mean regret +5.99 % -> +5.84 %; +6.71 -> +6.70 % over the nine of ~30
        calls a key, +3.83 -> +3.27 % over the three of ~120. Either change alone: +6.00 %,
        +5.99 %.)

        On a key's first call, also the arm the neighbouring buckets measured fastest
        (``_neighbours_measured``), which goes first. It is no prior and rules no arm out:
        every arm is still timed — one far behind there only later, as the key's exploration
        allowance affords it (``_affordable``). (Replayed over seven recordings of
        ``benchmarks/decision_quality.py``: first calls on an arm the key did not commit to,
        538 -> 456; regret +6.48 / +6.51 %, the same. A prior timed in full and the others
        once cost regret in an earlier replay, 17.5% without against 19.0% with it, as
        crossovers between adjacent buckets are common on a shared machine.)"""
        if ((state.incumbent is None and state.decisions - state.epoch_start
             <= 2 * len(candidates))
                or any(b not in key.arms or key.arms[b].epoch_samples < 2
                       for b in candidates)):
            _raise_floors(state, key, candidates, neighbours)
            best, state.behind = _neighbours_measured(key, candidates, neighbours)
            if not key.samples:
                state.neighbours_best = best

    # ------------------------------------------------------------------ the decision

    def decide(self, state: KeyState, key: KeyHistory | None, candidates: Sequence[Choice],
               now_s: float, explain: bool = True) -> Decision:
        """Choose among ``candidates`` (available arms in heuristic order; never empty) from
        ``state`` and ``key``; changes nothing (:meth:`apply` carries the decision out).

        ``explain=False`` leaves ``estimates_us`` empty on exploring decisions, for callers
        that will not show them (building them is a large share of an exploring call).
        """
        if key is None:
            return heuristic_decision(candidates[0], ())  # cold start: nothing measured
        if state.merges != key.merges:
            state = replace(state)
            _uncommit(state, key.merges)
        memo = _reusable_memo(state, key, self.config.drift_threshold)
        if memo is not None:
            return memo  # committed and nothing due
        usable = _out_of_quarantine(key, candidates, now_s)
        if not usable:
            return _all_quarantined(state, key, candidates)
        cfg = self.config
        drift = _drift(cfg, state, key, usable)
        if drift is not None:
            return drift
        round_ = _round(cfg, state, key, usable)
        explored = _explore(cfg, round_, explain)
        if explored is not None:
            return explored
        return _commit(cfg, round_, explain)

    def explained(self, decision: Decision, state: KeyState, key: KeyHistory,
                  candidates: Sequence[Choice]) -> Decision:
        """``decision`` with its estimates (and an exploit's confidence) filled in from
        ``key``, if it was made with ``explain=False``."""
        if decision.estimates_us or not key.arms:
            return decision
        if decision.reason is Reason.EXPLOIT:
            return _explained_exploit(decision.choice, candidates, key, state,
                                      self.config.noise_floor)
        return decision._replace(estimates_us=_estimates(key), samples=key.samples,
                                 floors_us=_floors_of(state))

    def first_recheck(self, key: KeyHistory, chosen: Choice,
                      candidates: Sequence[Choice]) -> int:
        """Decisions until the first re-check after committing ``key`` to ``chosen``:
        ``recheck_interval`` when the choice is clear, ``min_samples`` when it is not."""
        arms = key.arms
        cfg = self.config
        interval = cfg.recheck_interval
        rival, _third = _two_fastest(arms, [b for b in candidates if b is not chosen])
        if rival is None:
            return interval
        if _left_on_first_timings(cfg, arms[rival], arms[chosen]):
            return min(cfg.min_samples, interval)
        if _p_faster(arms[chosen], arms[rival], cfg.noise_floor) >= cfg.clear_confidence:
            return interval
        return min(cfg.min_samples, interval)

    def fallback(self, key: KeyHistory, candidates: Sequence[Choice],
                 tried: Container[Choice]) -> Choice | None:
        """Fallback: the next arm for a call whose arms in ``tried`` raised — the fastest
        known first, then in heuristic order; ``None`` when none is left."""
        left = [b for b in candidates if b not in tried]
        if not left:
            return None

        def rank(b: Choice) -> tuple[float, int]:
            stats = key.arms.get(b)
            est = stats.estimate_us if stats is not None and stats.epoch_samples else math.nan
            return (est if not math.isnan(est) else math.inf, candidates.index(b))

        return min(left, key=rank)


# ------------------------------------------------------------------ the phases


def _drift(cfg: PolicyConfig, state: KeyState, key: KeyHistory,
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
    budget = _explore_budget(cfg, state, arms, slowed_us)
    others = [b for b in usable if b is not incumbent and b in arms
              and arms[b].estimate_us - slowed_us <= budget]  # (NaN: not measured, left out)
    return _explained(best_arm(others, arms) or incumbent, Reason.DRIFT, key, state)


def _round(cfg: PolicyConfig, state: KeyState, key: KeyHistory,
           usable: Sequence[Choice]) -> _Round:
    """The arms this evaluation considers: ``usable`` without those a floor or the
    exploration budget rules out, against the best estimate measured so far."""
    arms = key.arms
    best_seen = math.inf
    for b in usable:
        stats = arms.get(b)
        if (stats is not None and stats.epoch_samples and not stats.consecutive_failures
                and stats.mean_us < best_seen):
            best_seen = stats.mean_us
    floors = state.floors
    if floors is not None and best_seen < math.inf:
        # An arm never timed here whose floor (the GPU arm's copies of a host call, say)
        # is well over what another arm was measured to take cannot win: not tried.
        limit = best_seen * cfg.floor_ratio
        for b in usable:  # (a new list only when a floor rules an arm out: seldom)
            if floors.get(b, 0.0) > limit:
                usable = [b for b in usable if floors.get(b, 0.0) <= limit
                          or (b in arms and arms[b].epoch_samples)]
                break
    waiting = False
    if best_seen < math.inf:
        affordable = _affordable(cfg, state, key, usable, best_seen)
        waiting = len(affordable) < len(usable)
        usable = affordable
    elif (state.neighbours_best is not None and state.neighbours_best in usable
          and usable[0] is not state.neighbours_best and not key.samples):
        # The key's first call: the arm the neighbouring sizes measured fastest goes first
        # (the heuristic's order is a guess; theirs was measured). It rules no arm out.
        first = state.neighbours_best
        usable = [first, *(b for b in usable if b is not first)]
    # Once committed, an arm timed at all in this epoch is left to re-checks (a prior's
    # plan commits with the others timed once); only an arm never timed is still owed.
    min_samples = cfg.min_samples if state.incumbent is None else 1
    return _Round(state, key, usable, best_seen, waiting, min_samples)


def _explore(cfg: PolicyConfig, r: _Round, explain: bool) -> Decision | None:
    """Explore: the prior's plan, else the arms still owed timings in this epoch, else
    (nothing committed yet) the two fastest while they are not told apart."""
    state, key = r.state, r.key
    prior = state.prior
    if prior is not None and prior in r.usable and not key.failures:
        plan = _prior_plan(key, r.usable, prior, cfg.min_samples)
        if plan:
            # (one step at a time: each timing may show the prior wrong here)
            if not key.samples:
                return heuristic_decision(plan[0], ())
            return explore_decision(plan[0], (), key, explain, state)
        if plan is not None:
            r.confirmed = True  # the prior's plan is done: commit (nothing contradicted it)
            return None
    owed = _owed_round(cfg, r, explain)
    if owed is not None:
        return owed
    if state.incumbent is None:
        unsure = _unsure_plan(cfg, key, r.usable)
        if unsure:
            return explore_decision(unsure[0], () if r.waiting else unsure[1:], key,
                                    explain, state)
    return None


def _owed_round(cfg: PolicyConfig, r: _Round, explain: bool) -> Decision | None:
    """The next timing of a round over the arms still owed timings in this epoch, fewest
    timings first (ties keep the heuristic order). An arm whose estimate is over
    ``prune_ratio`` x the best so far after two timings is owed nothing more: it is
    clearly not the answer."""
    key, arms, min_samples = r.key, r.key.arms, r.min_samples
    for b in r.usable:  # (a loop, not any(): no generator on every exploring evaluation)
        stats = arms.get(b)
        if stats is None or stats.consecutive_failures or stats.epoch_samples < min_samples:
            break
    else:
        return None
    best_seen = r.best_seen
    prune_above = best_seen * cfg.prune_ratio
    round_: list[tuple[int, Choice]] = []
    for b in r.usable:
        stats = arms.get(b)
        if stats is None or stats.consecutive_failures:
            n = 0  # never tried in this epoch, or failed and out of quarantine
        else:
            n = stats.epoch_samples
            if n >= min_samples or (n >= 2 and stats.mean_us > prune_above):
                continue
            if n and stats.mean_us > 2.0 * prune_above:
                continue  # (one timing this far behind is enough: 6x the best)
            if (n and stats.mean_us - best_seen >= cfg.explore_free_us
                    and stats.mean_us > best_seen * _CLEAR_MARGIN
                    and not (n == 1 and b is r.usable[0] and not r.state.epoch)):
                # One costly timing that lost clearly is enough: timing it again to make
                # sure would cost more than the exploration allowance. (Not the cold-start
                # arm's one timing, the key's first call: a new size's one-off costs.)
                continue
        round_.append((n, b))
    if not round_:
        return None
    schedule = _schedule(tuple(round_), min_samples, _checkpoints_pay(cfg, r, round_))
    pick, plan = schedule[0], schedule[1:]
    if r.waiting or best_seen == math.inf:
        # An arm waits for the exploration budget, or nothing is measured here yet (the
        # budget and the floors rule arms out only against a measured time): one timing
        # at a time, then look again — a planned round would not look.
        plan = ()
    if not key.samples and not key.failures:
        return heuristic_decision(pick, plan)
    return explore_decision(pick, plan, key, explain, r.state)


def _checkpoints_pay(cfg: PolicyConfig, r: _Round, round_: list[tuple[int, Choice]]) -> bool:
    """Whether looking again between a round's timings can pay for itself: a look is a full
    evaluation (``_EVALUATION_US``), and it can save at most what the rest of the round
    costs (an arm never timed here counted at what ``_affordable`` expects of it). Where
    that is under one evaluation (calls of a few microseconds), the round is planned
    through to ``min_samples`` instead."""
    best_seen = r.best_seen
    if best_seen == math.inf:
        return True  # (nothing measured here yet)
    arms, floors, min_samples = r.key.arms, r.state.floors, r.min_samples
    rest_us = 0.0
    for n, b in round_:
        expected = arms[b].mean_us if n else _untried_us(cfg, floors, b, best_seen)
        rest_us += expected * (min_samples - n)
    return rest_us > _EVALUATION_US


def _commit(cfg: PolicyConfig, r: _Round, explain: bool) -> Decision:
    """Commit to the fastest (or keep the committed arm: hysteresis), re-time or
    re-measure a challenger before it takes over, re-check when due, else exploit."""
    state, key, usable = r.state, r.key, r.usable
    arms = key.arms
    incumbent = state.incumbent
    # A confirmed prior (the arm that raised a drift alarm, re-measured in full) is
    # committed to even when one timing of another arm came out a little faster: its
    # min_samples fresh timings outweigh one noisy timing, and the commitment, unsure, is
    # re-checked after min_samples decisions.
    best = state.prior if r.confirmed else best_arm(usable, arms)
    if best is None or math.isinf(arms[best].estimate_us):
        # every usable arm failed last time and is out of quarantine: try one again
        return _explained(usable[0], Reason.EXPLORE, key, state)
    chosen = best
    if (incumbent is not None and incumbent is not best and incumbent in usable
            and arms[incumbent].epoch_samples
            and not _clearly_better(cfg, arms[best], arms[incumbent])):
        chosen = incumbent  # hysteresis: the challenger is not clearly better
    elif incumbent is not chosen and incumbent in usable:
        switch = _before_switch(cfg, r, chosen)
        if switch is not None:
            return switch
    if incumbent is chosen and state.decisions >= state.next_recheck:
        target = _recheck_target(cfg, state, key, usable)
        if target is not None:
            return _explained(target, Reason.RECHECK, key, state)
    if not explain:
        decision = _UNEXPLAINED_EXPLOIT.get(chosen)
        if decision is None:  # (a variant's: built once)
            decision = _UNEXPLAINED_EXPLOIT[chosen] = Decision(chosen, _EXPLOIT)
        return decision
    return _explained_exploit(chosen, usable, key, state, cfg.noise_floor)


def _clearly_better(cfg: PolicyConfig, challenger: ArmStats, incumbent: ArmStats) -> bool:
    """Whether ``challenger`` beats the committed arm by ``switch_margin``. (No rule for a
    near-tie measured precisely: replayed with and without one, regret and switches were the
    same, and a wrong pick within the margin costs at most the margin.)"""
    # (an estimate that is NaN is not held back either)
    return not challenger.estimate_us >= incumbent.estimate_us * (1.0 - cfg.switch_margin)


def _left_on_first_timings(cfg: PolicyConfig, rival: ArmStats, chosen: ArmStats) -> bool:
    """Whether ``rival`` lost on one costly timing (over ``explore_free_us`` behind) by more
    than arms differ when none stalls (``_IMPLAUSIBLE_LAG``): such a commitment is not clear
    — P(faster) reads 1.0 from a timing with no spread measured, and one timing can be far
    off (timings of one call on the development machine: one in ten over 1.7x the median of
    the others, the worst 88x; a library's state can also change early in a process: an
    ATen kernel measured 5x faster from one call on) — so the rival is re-checked soon, as
    the budget allows (priced at what it is expected to take: ``_expected_us``). A rival
    closer behind is judged like any other, on P(faster) with the noise floor."""
    return (rival.epoch_samples == 1
            and rival.mean_us - chosen.mean_us >= cfg.explore_free_us
            and rival.mean_us > _IMPLAUSIBLE_LAG * chosen.mean_us)


def _before_switch(cfg: PolicyConfig, r: _Round, chosen: Choice) -> Decision | None:
    """What comes before ``chosen`` takes over from the committed arm: a re-check of a
    challenger timed fewer than ``min_samples`` (at least three) times in this epoch (one
    lucky timing is not enough to leave the committed arm), or a re-measurement of both
    when the challenger's estimate is stale."""
    state, key = r.state, r.key
    if key.arms[chosen].epoch_samples < _confirm_samples(cfg):
        return _explained(chosen, Reason.RECHECK, key, state)
    if state.decisions - state.epoch_start > cfg.stale_after_decisions:
        # The challenger's estimate dates from this epoch's exploration, the committed
        # arm's from its latest timings: a burst of load on the machine makes the
        # committed arm look slower than the stale estimate of an arm timed in calmer
        # times. Both are measured afresh (a new epoch, as after a drift alarm) before
        # the committed arm is left. (Kept on its numbers, replayed with and without it:
        # 40 synthetic near-tie logs with load bursts, 200/205/300 us, switches 1.10 mean
        # and 4 at most with it, 7.97 and 13 without, regret +0.89 % / +0.96 %; eight
        # decision_quality recordings, switches 327 / 407, regret +16.03 % / +16.11 %.)
        return _explained(chosen, Reason.DRIFT, key, state)
    return None


def _affordable(cfg: PolicyConfig, state: KeyState, key: KeyHistory, usable: Sequence[Choice],
                best_seen: float) -> Sequence[Choice]:
    """``usable`` without the arms whose trial does not fit the key's exploration allowance
    yet (see :class:`PolicyConfig`): those timed before a drift alarm, each expected to take
    what it took before it — a plain loop timed again on a million-element call costs as
    much as dozens of the vectorised calls it would not beat — and those never timed here
    whose first trial is priced (``_first_trial_us``). Any other arm never timed on the key
    is kept: tried at once."""
    arms = key.arms
    previous = state.previous_us
    behind = state.behind
    budget = -1.0
    kept = []
    for b in usable:
        stats = arms.get(b)
        if stats is None or not (stats.samples or stats.failures):  # never tried on the key
            guess = _first_trial_us(cfg, behind, b, best_seen)
        elif stats.epoch_samples or stats.failures or not previous:
            guess = None  # measured in this epoch, or failed: its own estimate decides
        else:
            guess = previous.get(b)  # timed before the drift alarm
        if guess is None:
            # (an arm never timed here whose trial is not priced is tried at once: the
            # cold-start order is a guess, which orders the arms but rules none out; an arm
            # the heuristic put last that was 3x faster waited tens of calls for the budget)
            kept.append(b)
            continue
        if budget < 0.0:
            budget = _explore_budget(cfg, state, arms, best_seen)
        if guess - best_seen <= budget:  # (what it took before the alarm)
            kept.append(b)
    return kept


def _first_trial_us(cfg: PolicyConfig, behind: Mapping[Choice, float] | None, choice: Choice,
                    best_us: float) -> float | None:
    """What the first trial of ``choice`` on a key is expected to take, where it waits for
    the key's exploration allowance; ``None`` where it is tried at once. An arm the
    neighbouring sizes measured at least ``_BEHIND`` x behind their fastest: that far behind
    ``best_us`` (a variant 3x slower at the sizes around: on a key of 10 ms calls its trial
    waits until the key has run 1 s); measured closer there, tried at once. A variant not
    measured around: ``unknown_arm_ratio`` x ``best_us`` — an alternative to its arm's primary
    kernel is tried at once where a trial costs little (calls under ~0.5 ms: the free
    allowance), later on a key of costly calls. Any other arm: at once (the cold-start order
    is a guess; an arm it put last can be the fastest)."""
    ratio = behind.get(choice) if behind else None
    if ratio is not None:
        return best_us * ratio if ratio >= _BEHIND else None
    if choice.variant:
        return best_us * cfg.unknown_arm_ratio
    return None


def _untried_us(cfg: PolicyConfig, floors: Mapping[Choice, float] | None, backend: Choice,
                best_us: float) -> float:
    """What a timing of ``backend``, never timed on the key, is expected to take: twice its
    floor (sizes double per bucket), else ``unknown_arm_ratio`` x the best measured."""
    floor = floors.get(backend) if floors else None
    # (a floor of 0: the GPU arm of inputs already on the device, nothing to copy)
    return 2.0 * floor if floor is not None else cfg.unknown_arm_ratio * best_us


def _explore_budget(cfg: PolicyConfig, state: KeyState, arms: Mapping[Choice, ArmStats],
                    best_us: float) -> float:
    """What a timing of another arm may still cost over ``best_us`` on a key: its
    exploration allowance — ``explore_free_us``, or ``explore_share`` of the time the key's
    calls have taken so far (an arm's timings before this epoch counted at ``best_us``) —
    less what timing other arms than the committed one has cost already
    (``KeyState.explored_us``). Cumulative, so re-checks of an arm far behind come ever
    more rarely as they use it up, and the key's exploring stays within its share."""
    spent = 0.0
    for s in arms.values():
        if s.samples:
            spent += s.samples * (s.mean_us if s.epoch_samples else best_us)
    allowance = cfg.explore_share * spent
    if allowance < cfg.explore_free_us:
        allowance = cfg.explore_free_us
    return allowance - state.explored_us


def _unsure_plan(cfg: PolicyConfig, key: KeyHistory,
                 usable: Sequence[Choice]) -> tuple[Choice, ...]:
    """Exploration done and nothing committed yet: when the two fastest arms are not told
    apart (under ``clear_confidence``), both are timed again, alternately, up to
    ``2 * min_samples`` times each (empty when they are told apart, or that is spent).
    A near-tie costs little to time again; a wrong commitment costs every later call.
    (With ``min_samples`` 1, the default, the key commits at once and an unsure
    commitment has its runner-up re-checked on the next decision: replayed over three
    recordings of ``benchmarks/decision_quality.py``, timing both again first read +6.4 %
    regret against +4.7 %.)"""
    best, runner = _two_fastest(key.arms, usable)
    if best is None or runner is None:
        return ()
    arms = key.arms
    if cfg.min_samples < 2:
        return ()  # (committed to at once, unsure: the runner-up is re-checked soon instead)
    limit = 2 * cfg.min_samples
    runner_owed = limit - arms[runner].epoch_samples
    best_owed = limit - arms[best].epoch_samples
    if runner_owed <= 0 and best_owed <= 0:
        return ()
    if _p_faster(arms[best], arms[runner], cfg.noise_floor) >= cfg.clear_confidence:
        return ()
    return _alternate(runner, runner_owed, best, best_owed)


def _recheck_target(cfg: PolicyConfig, state: KeyState, key: KeyHistory,
                    usable: Sequence[Choice]) -> Choice | None:
    """Re-check: the plausible other arm heard from least recently (every
    ``full_recheck_every``-th re-check, any other arm), each at what it is expected to take
    (``_expected_us``)."""
    arms = key.arms
    incumbent = state.incumbent
    incumbent_us = arms[incumbent].estimate_us if incumbent else math.inf
    full = (state.rechecks + 1) % cfg.full_recheck_every == 0
    # (within the exploration budget: a re-check of an arm far slower on a key of large
    # calls waits until the key has run long enough to pay for it)
    budget = _explore_budget(cfg, state, arms, incumbent_us)
    floors = state.floors
    others = []
    for b in usable:
        stats = arms.get(b)
        if b is incumbent or stats is None:
            continue
        expected = _expected_us(stats, floors, b)
        if ((full or expected <= incumbent_us * cfg.plausible_ratio)
                and expected - incumbent_us <= budget):
            others.append(b)
    if not others:
        return None
    return min(others, key=lambda b: arms[b].last_update)


def _expected_us(stats: ArmStats, floors: Mapping[Choice, float] | None,
                 backend: Choice) -> float:
    """What a timing of ``backend`` is expected to take: its estimate, but where that rests
    on one timing, at most twice what it took on the next smaller size bucket (its floor:
    sizes double per bucket). One timing far over that is more likely a stall than the
    arm's cost, and a re-check priced at it would never fit the budget."""
    estimate = stats.estimate_us
    if stats.epoch_samples == 1 and floors:
        floor = floors.get(backend)
        if floor is not None and 2.0 * floor < estimate:
            return 2.0 * floor
    return estimate


def _confirm_samples(cfg: PolicyConfig) -> int:
    """Timings of a challenger in the epoch before it may replace the committed arm."""
    return cfg.min_samples if cfg.min_samples > _CONFIRM_SAMPLES else _CONFIRM_SAMPLES


# A challenger is timed at least this often in the epoch before it replaces the committed arm
# (see _before_switch), however few timings committing asked for. Two were not enough: the
# lower of two timings (noise only adds time) read ~5 % under the mean of the committed arm's
# many, and in policy_quality's near-tie (200 against 205 us) the committed arm switched 3-4
# times in two trials of five; with three (a median), 0-2.
_CONFIRM_SAMPLES = 3
# Full evaluations of a committed key happen at least every this many decisions; in between
# the memoised exploit decision is reused (drift, re-checks and failures still act at once, and
# a timing of any other arm ends the memo).
_MEMO_DECISIONS = 16
# An arm this many times slower than another in one epoch is clearly behind, and a prior
# beaten by this much is wrong here: a shared machine's timings of one call vary by 20-40%,
# but noise only ever adds time.
_CLEAR_MARGIN = 1.25
# A rival one timing this many times slower than the committed arm may have stalled: it is
# re-checked soon (_left_on_first_timings). Replayed over seven recordings of
# benchmarks/decision_quality.py: every costly loser re-checked soon, regret +7.73 % mean;
# only those over 2.5x / 3x / 4x / 6x / 10x behind, +6.67 / +6.55 / +6.54 / +6.58 / +6.46 %;
# none, +7.99 % (a stall then keeps its arm out). The re-checks of rivals 1.5-4x behind were
# what cost: two arms 2-3x apart at large sizes are the common case, not a stall.
_IMPLAUSIBLE_LAG = 4.0
# What one full evaluation of the policy adds to a timed call (4-9 us measured on the
# development machine): a look between timings that cannot save more is not taken.
_EVALUATION_US = 5.0
# Page-Hinkley on the ratio timing/baseline (see Policy.observe). The baseline is the
# committed arm's estimate before each timing, so a slow mode the arm has always had is in
# it; the slack is the arm's relative spread, taken while the statistic is at zero (no sign of
# a change), so a change cannot widen it as it comes in. (Against the estimate at commitment,
# made from one timing or a few, the arm's ordinary spread read as a slowdown: replayed,
# 126-142 alarms per 6,000 calls.) The ratio is capped at 2: capped at 3, a slow mode of one
# call in four (250 against 60 us) raised the statistic faster than the fast calls lowered
# it, and alarmed.
_PH_SLACK = 0.2
_PH_RATIO_CAP = 2.0


def _reusable_memo(state: KeyState, key: KeyHistory, drift_threshold: float) -> Decision | None:
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


def _out_of_quarantine(key: KeyHistory, candidates: Sequence[Choice],
                       now_s: float) -> Sequence[Choice]:
    if not key.failures:
        return candidates  # nothing ever failed here: nothing is quarantined
    arms = key.arms
    return [b for b in candidates if b not in arms or arms[b].quarantined_until_s <= now_s]


def _all_quarantined(state: KeyState, key: KeyHistory,
                     candidates: Sequence[Choice]) -> Decision:
    """Fallback: every arm is quarantined, yet something must run — the one released
    soonest."""
    soonest = min(candidates, key=lambda b: key.arms[b].quarantined_until_s)
    return _explained(soonest, Reason.FALLBACK, key, state)


def _commit_to(state: KeyState, key: KeyHistory, backend: Choice, first_recheck: int) -> None:
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
        _follow(state, stats)
    state.recheck_interval = first_recheck
    state.next_recheck = state.decisions + first_recheck


def _next_recheck_turn(cfg: PolicyConfig, state: KeyState) -> None:
    """A re-check turn is over (taken, or passed with no arm to look at): the choice held
    until now, so look again later, then later still."""
    state.rechecks += 1
    state.recheck_interval = min(state.recheck_interval * 2, cfg.recheck_interval * 64)
    state.next_recheck = state.decisions + state.recheck_interval


def _follow(state: KeyState, stats: ArmStats, spread: bool = True) -> None:
    """The drift test's baseline from the committed arm's estimate now and, where
    ``spread``, its slack from the arm's relative spread."""
    mean = stats.mean_us
    state.drift_baseline_us = mean
    if spread:
        slack = _PH_SLACK
        if stats.var_us2 > (slack * mean) ** 2:
            slack = math.sqrt(stats.var_us2) / mean
        state.drift_slack = slack


def _disarm(state: KeyState) -> None:
    state.drift_baseline_us = state.drift_sum = state.drift_min = 0.0


def _start_epoch(state: KeyState) -> None:
    """Re-explore from scratch (after drift): the caller measures every arm afresh too."""
    state.epoch += 1
    state.epoch_start = state.decisions
    state.incumbent = None
    state.memo = None
    _disarm(state)


def _uncommit(state: KeyState, merges: int) -> None:
    """Estimates were merged in from elsewhere: commit again from the merged numbers."""
    state.merges = merges
    state.incumbent = None
    state.memo = None
    _disarm(state)


def _raise_floors(state: KeyState, key: KeyHistory, candidates: Sequence[Choice],
                  neighbours: Neighbours) -> None:
    """Raise the key's own floors (``set_floors``) to what each arm is estimated to take on
    the nearest smaller size bucket of the same operation where it was timed. A kernel does
    not get faster on more elements, so that is what it takes here at least: an arm 50 times
    slower than ATen on batches of 64 is not tried on batches of 512. (One timing there is
    enough: noise only ever adds time, the floor ratio leaves slack, and every few re-checks
    look at every arm.) Made afresh each time, not raised from the last: a smaller bucket's
    estimate comes down when its first, cold timing is re-checked (a threaded dot's first
    call at ~5·10^5 elements took 5,962 us, its re-check 175), and a floor kept from it ruled
    the arm out on every larger key, where it was 1.6-2x faster."""
    floors = state.floors = dict(state.own_floors) if state.own_floors else None
    find, operation = neighbours.find, key.operation
    # (each smaller bucket looked up once for all arms, nearest first: this runs on a key's
    # first calls, where an arm measured nowhere yet would cost a lookup per bucket per arm)
    missing = list(candidates)
    for bucket in range(key.bucket - 1, max(key.bucket - _FLOOR_LOOKBACK, 0), -1):
        smaller = find(operation, bucket)
        if smaller is None:
            continue
        arms = smaller.arms
        still_missing = []
        for backend in missing:
            stats = arms.get(backend)
            if stats is None or not stats.epoch_samples or stats.consecutive_failures:
                still_missing.append(backend)
                continue
            if floors is None:
                floors = state.floors = {}
            if stats.mean_us > floors.get(backend, 0.0):
                floors[backend] = stats.mean_us
        if not still_missing:
            return
        missing = still_missing


# Smaller size buckets looked at for an arm's floor on a key (see _raise_floors).
_FLOOR_LOOKBACK = 8


def _neighbours_measured(key: KeyHistory, candidates: Sequence[Choice],
                         neighbours: Neighbours) -> tuple[Choice | None, dict[Choice, float]]:
    """What the nearest size bucket below and the nearest above the key (within
    ``_NEIGHBOUR_REACH``) where two of ``candidates`` or more were measured say: the fastest
    of them, where the two sides agree (or one side only measured; ``None`` otherwise: a
    crossover lies between them, or nothing was measured), and how far each was behind the
    fastest there (its estimate over the fastest's; of two sides, the lesser)."""
    find, operation, bucket = neighbours.find, key.operation, key.bucket
    found: Choice | None = None
    agree = True
    behind: dict[Choice, float] = {}
    for direction in (-1, 1):
        for distance in range(1, _NEIGHBOUR_REACH + 1):
            other = find(operation, bucket + direction * distance)
            if other is None:
                continue
            arms = other.arms
            measured = [b for b in candidates if b in arms
                        and arms[b].epoch_samples and not arms[b].consecutive_failures]
            if len(measured) < 2:
                continue
            fastest = best_arm(measured, arms)
            fastest_us = arms[fastest].estimate_us  # type: ignore[index]
            for b in measured:
                ratio = arms[b].estimate_us / fastest_us if fastest_us > 0.0 else 1.0
                if ratio < behind.get(b, math.inf):
                    behind[b] = ratio
            if found is not None and fastest is not found:
                agree = False
            found = fastest
            break  # (the nearest measured bucket on this side only)
    return (found if agree else None), behind


# Size buckets on either side of a key looked at for its first call's arm and for how far
# behind each arm starts (_neighbours_measured).
_NEIGHBOUR_REACH = 2
# An arm never timed on a key whose neighbouring sizes measured it this many times slower than
# their fastest waits for the key's exploration allowance before its trial (_affordable).
_BEHIND = 2.0


def _prior_contradicted(key: KeyHistory, prior: Choice, backends: Sequence[Choice]) -> bool:
    """Whether another of ``backends`` beat ``prior`` clearly in this epoch — by
    ``_CLEAR_MARGIN`` (the prior is wrong here)."""
    arms = key.arms
    prior_stats = arms.get(prior)
    if prior_stats is None or not prior_stats.epoch_samples:
        return False
    for b in backends:
        stats = arms.get(b)
        if (b is not prior and stats is not None and stats.epoch_samples
                and stats.mean_us * _CLEAR_MARGIN < prior_stats.mean_us):
            return True
    return False


def _prior_plan(key: KeyHistory, usable: Sequence[Choice], prior: Choice,
                min_samples: int) -> tuple[Choice, ...] | None:
    """Exploration when an arm is expected to win (after a drift alarm, the arm that
    slowed): ``min_samples`` timings of it, one of each other arm. ``None`` when an other arm
    beat it clearly (the prior is wrong here: the key is explored in full, and
    :meth:`Policy.apply` drops the prior). A closer result is within what one timing's noise
    does (a shared machine's timings of one call vary by 20-40%): the prior is committed to,
    unsure, and so re-checked soon."""
    if _prior_contradicted(key, prior, usable):
        return None
    arms = key.arms
    timed = arms[prior].epoch_samples if prior in arms else 0
    plan = [prior] * max(min_samples - timed, 0)
    plan += [b for b in usable if b is not prior
             and (arms.get(b) is None or not arms[b].epoch_samples)]
    return tuple(plan[:_MAX_PLAN])


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


def _two_fastest(arms: Mapping[Choice, ArmStats],
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


def _estimates(key: KeyHistory) -> Mapping[Choice, float]:
    # (ArmStats.estimate_us of each arm measured in this epoch or failing, without the
    # property's calls: this is built for every span of a traced runtime)
    return MappingProxyType({b: math.inf if s.consecutive_failures else s.mean_us
                             for b, s in key.arms.items()
                             if s.epoch_samples or s.consecutive_failures})


def _floors_of(state: KeyState) -> Mapping[Choice, float]:
    return MappingProxyType(state.floors) if state.floors else EMPTY_ESTIMATES


def _explained(backend: Choice, reason: Reason, key: KeyHistory, state: KeyState,
               plan: tuple[Choice, ...] = ()) -> Decision:
    """A decision with what it was based on: the key's estimates, samples and floors."""
    return Decision(backend, reason, 0.0, _estimates(key), key.samples, plan,
                    _floors_of(state))


def heuristic_decision(backend: Choice, plan: tuple[Choice, ...]) -> Decision:
    """The cold-start decision for ``backend`` (nothing measured yet, nothing to explain)."""
    decision = _HEURISTIC.get((backend, plan))
    if decision is None:
        decision = _HEURISTIC[(backend, plan)] = Decision(backend, Reason.HEURISTIC, plan=plan)
    return decision


_MAX_PLAN = 16


@functools.lru_cache(maxsize=1024)  # few distinct rounds exist; this is per exploring call
def _schedule(round_: tuple[tuple[int, Choice], ...], min_samples: int,
              checkpoints: bool = True) -> tuple[Choice, ...]:
    """The order in which to time the arms owed timings (``(timings so far, arm)`` in
    heuristic order): round-robin, fewest timings first, up to one timing each — where one
    timing far behind rules an arm out, and the smaller buckets, exploring alongside, may
    have floors to go by — then up to two — where pruning may rule an arm out — then up to
    ``min_samples``; the policy looks again at each of these points (``checkpoints``; else
    the round goes through to ``min_samples``). No timing in a schedule depends on another's
    result."""
    counts = [n for n, _b in round_]
    least = min(counts)
    target = min_samples if least >= 2 or not checkpoints else min(least + 1, min_samples)
    schedule: list[Choice] = []
    for level in range(least, target):
        schedule += [b for n, b in round_ if n <= level]
        if len(schedule) >= _MAX_PLAN:  # (min_samples may be up to 1,000)
            break
    return tuple(schedule[:_MAX_PLAN])


@functools.lru_cache(maxsize=64)
def _alternate(first: Choice, first_times: int, second: Choice,
               second_times: int) -> tuple[Choice, ...]:
    """``first`` and ``second`` taking turns, ``first_times`` and ``second_times`` times."""
    plan: list[Choice] = []
    for i in range(max(first_times, second_times)):
        plan += [b for b, times in ((first, first_times), (second, second_times)) if i < times]
    return tuple(plan)


@functools.lru_cache(maxsize=1024)
def plan_steps(plan: tuple[Choice, ...]) -> tuple[Decision, ...]:
    """The exploring decisions that carry out ``plan``, one per call, built once per plan."""
    return tuple(Decision(b, Reason.EXPLORE, plan=plan[i + 1:]) for i, b in enumerate(plan))


def explore_decision(backend: Choice, plan: tuple[Choice, ...], key: KeyHistory,
                     explain: bool, state: KeyState) -> Decision:
    """An exploring decision for ``backend``, with the rest of its round in ``plan``."""
    if explain:
        return _explained(backend, Reason.EXPLORE, key, state, plan=plan)
    decision = _UNEXPLAINED_EXPLORE.get((backend, plan))
    if decision is None:  # a handful of combinations of three arms: built once each
        decision = _UNEXPLAINED_EXPLORE[(backend, plan)] = Decision(
            backend, Reason.EXPLORE, plan=plan)
    return decision


def _explained_exploit(chosen: Choice, usable: Sequence[Choice], key: KeyHistory,
                       state: KeyState, noise_floor: float) -> Decision:
    # (built for every exploit span: one pass, no generator, positional fields)
    return Decision(chosen, _EXPLOIT, _confidence(chosen, usable, key.arms, noise_floor),
                    _estimates(key), key.samples, (), _floors_of(state))


def _confidence(chosen: Choice, usable: Sequence[Choice],
                arms: Mapping[Choice, ArmStats], noise_floor: float) -> float:
    """P(chosen is faster than the runner-up: the fastest other of ``usable`` measured in
    this epoch, the first one on a tie), as ``_p_faster`` reads it."""
    runner = None
    runner_us = math.inf
    for b in usable:
        stats = arms.get(b)
        if b is chosen or stats is None or not stats.epoch_samples:
            continue
        us = stats.estimate_us
        if runner is None or us < runner_us:
            runner, runner_us = stats, us
    return 1.0 if runner is None else _p_faster(arms[chosen], runner, noise_floor)


def _p_faster(mine: ArmStats, theirs: ArmStats, noise_floor: float) -> float:
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

