"""The policy's facade: :class:`Policy`, a state machine over a key's
:class:`~adaptive_runtime.policy.state.KeyState` — :meth:`Policy.decide` reads, the
transitions write only the state — over the phases in the package's other modules (see the
package docstring), and :class:`Step`, how :meth:`Policy.next` came to its decision."""

from __future__ import annotations

import enum
import math
from collections.abc import Container, Sequence
from dataclasses import replace

from ..backend import Choice
from ..decision import Decision, Reason
from ..history import ArmStats, KeyHistory
from ..knobs import PolicyConfig
from .commit import commit_decision, confirm_samples, first_recheck_turn
from .drift import drift_decision, observe_drift, reusable_memo
from .explain import explained_decision, fill_in, heuristic_decision
from .explore import (
    EVALUATION_US,
    evaluation_round,
    exploration_decision,
    plan_steps,
    prior_contradicted,
)
from .floors import Neighbours, look_around
from .state import (
    KeyState,
    commit_to,
    disarm,
    next_recheck_turn,
    start_epoch,
    uncommit,
)

__all__ = ["Policy", "Step"]

_EXPLOIT = Reason.EXPLOIT
_RECHECK = Reason.RECHECK
# Full evaluations of a committed key happen at least every this many decisions; in between
# the memoised exploit decision is reused (drift, re-checks and failures still act at once, and
# a timing of any other arm ends the memo).
_MEMO_DECISIONS = 16
# ... and every this many while a candidate was never timed on the key: that arm is owed its
# first trial once the key's calls afford it (explore._owed), which only a full evaluation
# sees. A short key (~250 calls, timed 1 in dozens once committed) made fewer than 16
# decisions after its commitment: its untimed arm waited for good (95 of 546 keys in
# decision_quality's trained runs).
_MEMO_DECISIONS_OWING = 2


class Step(enum.Enum):
    """How :meth:`Policy.next` came to its decision."""

    PLANNED = "planned"  # the next step of the exploration plan of an earlier decision
    REPEATED = "repeated"  # the memoised exploit decision, still standing
    DECIDED = "decided"  # a full evaluation (:meth:`Policy.step`)


class Policy:
    """The selection policy as a state machine over a key's :class:`KeyState` (see the
    package docstring): :meth:`decide` reads, the transitions write only the state."""

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
        memo = reusable_memo(state, key, self.config.drift_threshold)
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
            uncommit(state, key.merges)
        state.restarts = key.restarts
        if neighbours is not None:
            look_around(state, key, candidates, neighbours)
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
                and prior_contradicted(key, prior, candidates)):
            # decide() saw this and explored in full: the prior is wrong here
            state.prior = None
        recheck_due = state.decisions >= state.next_recheck
        state.decisions += 1
        reason = decision.reason
        if reason is _EXPLOIT:
            if state.incumbent is not decision.choice:
                commit_to(state, key, decision.choice,
                          self.first_recheck(key, decision.choice, candidates))
            elif recheck_due:
                # A re-check came due and decide() found no arm to look at (none plausible,
                # or none within the exploration budget yet): the turn passes as if it had
                # held. Left due, the memo would end at once (it never outlives the next
                # re-check), so every timed call evaluated the policy in full, and with the
                # turns not counted the full re-check of every arm never came: an arm whose
                # only timing was a cold first call's was never timed again.
                next_recheck_turn(cfg, state)
            if not memoised:
                # (an unexplained exploit is one shared object per arm: the memo is renewed by
                # every full evaluation, not only when the object changes)
                state.memo = decision
                horizon = (_MEMO_DECISIONS_OWING if _never_timed(key, candidates)
                           else _MEMO_DECISIONS)
                state.memo_until = min(state.decisions + horizon, state.next_recheck)
        elif reason is Reason.RECHECK:
            next_recheck_turn(cfg, state)
        elif reason is Reason.DRIFT:
            # re-measure the arm that slowed in full and the others once: a full exploration
            # only if one of them now beats it (a machine's stall alarms too, and must not
            # cost min_samples_per_arm calls of every slow arm)
            slowed = state.incumbent
            state.previous_us = {b: s.mean_us for b, s in key.arms.items()
                                 if s.epoch_samples and not s.consecutive_failures}
            start_epoch(state)
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
                state.explored_us += duration_us + EVALUATION_US
            return
        observe_drift(state, duration_us, stats)

    def observe_failure(self, state: KeyState, backend: Choice) -> None:
        """``backend`` raised (or answered wrongly): the memo and plan end; a committed arm
        is committed to no more (the key is re-decided from the remaining arms)."""
        state.memo = None
        state.plan = ()  # the failure changes what is worth exploring
        if state.incumbent is backend:
            state.incumbent = None
            disarm(state)

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
        timed fewer than ``confirm_samples`` times keeps its timings: the re-check's joins
        them, and it is re-timed before it may take over.)"""
        if decision.reason is not _RECHECK:
            return False
        stats = key.arms.get(decision.choice)
        return stats is not None and stats.epoch_samples >= confirm_samples(self.config)

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
            uncommit(state, key.merges)
        memo = reusable_memo(state, key, self.config.drift_threshold)
        if memo is not None:
            return memo  # committed and nothing due
        usable = _out_of_quarantine(key, candidates, now_s)
        if not usable:
            return _all_quarantined(state, key, candidates)
        cfg = self.config
        drift = drift_decision(cfg, state, key, usable)
        if drift is not None:
            return drift
        round_ = evaluation_round(cfg, state, key, usable)
        explored = exploration_decision(cfg, round_, explain)
        if explored is not None:
            return explored
        return commit_decision(cfg, round_, explain)

    def explained(self, decision: Decision, state: KeyState, key: KeyHistory,
                  candidates: Sequence[Choice]) -> Decision:
        """``decision`` with its estimates (and an exploit's confidence) filled in from
        ``key``, if it was made with ``explain=False``."""
        return fill_in(decision, state, key, candidates, self.config.noise_floor)

    def first_recheck(self, key: KeyHistory, chosen: Choice,
                      candidates: Sequence[Choice]) -> int:
        """Decisions until the first re-check after committing ``key`` to ``chosen``:
        ``recheck_interval`` when the choice is clear, ``min_samples_per_arm`` when it is not."""
        return first_recheck_turn(self.config, key, chosen, candidates)

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
    return explained_decision(soonest, Reason.FALLBACK, key, state)


def _never_timed(key: KeyHistory, candidates: Sequence[Choice]) -> bool:
    """Whether a candidate was never timed (nor failed) on the key."""
    arms = key.arms
    for choice in candidates:
        stats = arms.get(choice)
        if stats is None or not (stats.samples or stats.failures):
            return True
    return False
