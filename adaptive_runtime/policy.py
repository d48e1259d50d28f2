"""The selection policy: pure. Given a key's history, return a :class:`Decision`.

It reads history and never writes it, so recorded history can be replayed against another
policy offline. The runtime applies what a decision implies (commit, re-check schedule, new
epoch after drift).

Phases of one key:

1. *heuristic* — no data yet: Trueno's cold-start rules (matrix-like work above 10,000
   elements → GPU if available; under 1,000 elements → SCALAR; otherwise SIMD).
2. *explore* — each candidate arm is timed ``min_samples`` times, round by round; an arm
   whose estimate after two timings is over ``prune_ratio`` x the best so far needs no more
   (it is clearly not the answer), and an arm never timed whose floor (what it takes at least,
   e.g. the GPU arm's copies of a host call) is over ``floor_ratio`` x the best is not tried.
   When the neighbouring size buckets have a clear winner (the key's prior), that arm is timed
   ``min_samples`` times and the others once, and it is committed to unless one of them beat
   it clearly. While the two fastest are not told apart (under ``clear_confidence`` that the
   faster is faster), they are timed again, up to ``2 * min_samples`` times each.
3. *exploit* — commit to the fastest; a challenger takes over only when faster by
   ``switch_margin`` (hysteresis), or faster beyond doubt (``sure_z``), and timed
   ``min_samples`` times in the epoch (a challenger timed less is re-timed first). Sparse
   *recheck* calls measure plausible other arms afresh, at intervals that double while the
   choice holds — starting after ``min_samples`` decisions when the commitment was not clear
   (under ``clear_confidence`` that the chosen arm is faster than the runner-up: few noisy
   timings), after the runtime's ``recheck_interval`` when it was.
4. *drift* — when the committed arm's Page-Hinkley statistic passes ``drift_threshold`` (it got
   slower than when it was chosen), or when a challenger beats it in an epoch older than
   ``stale_after_decisions`` (estimates formed at different times), the key is re-explored:
   that arm in full, the others once (fully when one of them beats it clearly).

A failing arm has an infinite estimate and sits out a quarantine; ``fallback`` is the reason of
a call re-routed after an arm raised.
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

from .backend import Backend
from .history import PRIOR_MARGIN, ArmStats, KeyHistory
from .operations import Kind

__all__ = [
    "Decision",
    "Policy",
    "PolicyConfig",
    "Reason",
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


class Reason(str, enum.Enum):
    """Why an arm was chosen."""

    HEURISTIC = "heuristic"
    EXPLORE = "explore"
    EXPLOIT = "exploit"
    RECHECK = "recheck"
    DRIFT = "drift"
    FORCED = "forced"
    FALLBACK = "fallback"

    def __str__(self) -> str:
        return self.value

    @property
    def is_routine(self) -> bool:
        """A plain exploit: the one decision that is not interesting enough to trace by itself."""
        return self is Reason.EXPLOIT


_EMPTY: Mapping[Backend, float] = MappingProxyType({})


class Decision(NamedTuple):
    """One selection: the arm, why, how sure, and the latency estimates it was based on.

    Immutable. A ``NamedTuple`` rather than a frozen dataclass because one is built on every
    exploring call, and a frozen dataclass costs ~4x as much to construct.

    ``confidence`` is in [0, 1]: 0 while guessing or exploring, 1 when forced; for exploit the
    probability (normal approximation) that the chosen arm really is faster than the runner-up.
    ``estimates_us`` holds the expected latency of each arm with history (``inf`` for an arm
    whose last attempt failed). ``plan``, on an exploring decision, lists the arms this round
    of exploration times next, in order (the runtime follows it without asking again).
    ``floors_us`` holds what arms with a known floor take at least here (the GPU arm of a
    host call: its copies at the measured bandwidth); an arm never timed whose floor is over
    ``floor_ratio`` x the best measured estimate is not tried.
    """

    backend: Backend
    reason: Reason
    confidence: float = 0.0
    estimates_us: Mapping[Backend, float] = _EMPTY
    samples: int = 0
    plan: tuple[Backend, ...] = ()
    floors_us: Mapping[Backend, float] = _EMPTY

    @property
    def has_history(self) -> bool:
        return bool(self.estimates_us)


# Decisions nobody will look at, built once: with no span sink, the runtime needs only the arm
# and the reason (``Policy.explained`` fills in the rest when someone asks).
_UNEXPLAINED_EXPLORE: dict[tuple[Backend, tuple[Backend, ...]], Decision] = {}
_UNEXPLAINED_EXPLOIT = {b: Decision(b, Reason.EXPLOIT) for b in Backend}
_HEURISTIC: dict[tuple[Backend, tuple[Backend, ...]], Decision] = {}  # no data: nothing to explain


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """Tuning of :class:`Policy` (the runtime fills it from :class:`RuntimeConfig`)."""

    min_samples: int = 3
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
    # a challenger timed in full whose lead is this many standard errors takes over even
    # within switch_margin: noisy timings never get there, precise ones of a near-tie do
    # (3.1: one-sided 99.9%)
    sure_z: float = 3.1
    # Exploring within a budget: an arm never timed on a key is tried when what its trial is
    # expected to cost over the best arm measured there fits in explore_free_us, or in
    # explore_share of the time the key's calls have taken so far (so a trial on a key of
    # large calls waits until the key has run long enough to pay for it). Its expected time:
    # twice its floor from the next smaller size bucket (sizes double per bucket), else
    # unknown_arm_ratio x the best measured (a plain loop against vectorised code).
    explore_free_us: float = 1000.0
    explore_share: float = 0.1
    unknown_arm_ratio: float = 3.0


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
                    candidates: Sequence[Backend]) -> tuple[Backend, ...]:
    """``candidates`` in Trueno's cold-start preference order for this kind and size."""
    return tuple(b for b in heuristic_preference(kind, input_size) if b in candidates)


class Policy:
    """Pure decision function over a key's history (see the module docstring)."""

    def __init__(self, config: PolicyConfig | None = None) -> None:
        self.config = config or PolicyConfig()

    def decide(self, key: KeyHistory | None, candidates: Sequence[Backend], now_s: float,
               explain: bool = True) -> Decision:
        """Choose among ``candidates`` (available arms in heuristic order; never empty).

        ``explain=False`` leaves ``estimates_us`` empty on exploring decisions, for callers
        that will not show them (building them is a large share of an exploring call).
        """
        if key is None:
            return heuristic_decision(candidates[0], ())
        arms = key.arms
        cfg = self.config
        incumbent = key.incumbent
        if incumbent is not None:
            # Committed and nothing due: the memo of the last full exploit decision stands.
            # The runtime drops the memo whenever another arm learns something.
            memo = key.reusable_memo(cfg.drift_threshold)
            if memo is not None:
                return memo  # type: ignore[return-value]

        if key.failures:
            usable: Sequence[Backend] = [b for b in candidates
                                         if b not in arms or arms[b].quarantined_until_s <= now_s]
        else:
            usable = candidates  # nothing ever failed here: nothing is quarantined
        if not usable:
            # Every arm is quarantined: something must run; take the one released soonest.
            soonest = min(candidates, key=lambda b: arms[b].quarantined_until_s)
            return _explained(soonest, Reason.FALLBACK, key)

        if (incumbent is not None and incumbent in usable
                and arms[incumbent].drift_score > cfg.drift_threshold):
            others = [b for b in usable if b is not incumbent] or usable
            return _explained(best_arm(others, arms) or others[0], Reason.DRIFT, key)

        # Exploration: arms still owed timings in this epoch, fewest timings first (ties keep
        # the heuristic order). An arm whose estimate is over prune_ratio x the best so far
        # after two timings is owed nothing more: it is clearly not the answer.
        best_seen = math.inf
        for b in usable:
            stats = arms.get(b)
            if (stats is not None and stats.epoch_samples and not stats.consecutive_failures
                    and stats.mean_us < best_seen):
                best_seen = stats.mean_us
        floors = key.floors
        if floors is not None and best_seen < math.inf:
            # An arm never timed here whose floor (the GPU arm's copies of a host call, say)
            # is well over what another arm was measured to take cannot win: not tried.
            limit = best_seen * cfg.floor_ratio
            usable = [b for b in usable if floors.get(b, 0.0) <= limit
                      or (b in arms and arms[b].epoch_samples)]
        waiting = False  # an arm waits for the exploration budget (see _affordable)
        if best_seen < math.inf:
            affordable = self._affordable(key, usable, best_seen)
            waiting = len(affordable) < len(usable)
            usable = affordable
        owed = False
        # Once committed, an arm timed at all in this epoch is left to re-checks (a prior's
        # plan commits with the others timed once); only an arm never timed is still owed.
        min_samples = cfg.min_samples if incumbent is None else 1
        for b in usable:
            stats = arms.get(b)
            if stats is None or stats.consecutive_failures or stats.epoch_samples < min_samples:
                owed = True
        prior = key.prior
        confirmed = False
        if prior is not None and prior in usable and not key.failures:
            plan = self._prior_plan(key, usable, prior, cfg.min_samples)
            if plan:
                # (one step at a time: each timing may show the prior wrong here)
                if not key.samples:
                    return heuristic_decision(plan[0], ())
                return explore_decision(plan[0], (), key, explain)
            if plan is not None:
                owed = False  # the prior's plan is done: commit below
                confirmed = True  # (nothing here contradicted the neighbours' winner)
        if owed:
            prune_above = best_seen * cfg.prune_ratio
            round_: list[tuple[int, Backend]] = []
            for b in usable:
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
                            and stats.mean_us > best_seen * PRIOR_MARGIN):
                        # One costly timing that lost clearly is enough: timing it again to
                        # make sure would cost more than the exploration allowance.
                        continue
                round_.append((n, b))
            if round_:
                schedule = _schedule(tuple(round_), min_samples)
                pick, plan = schedule[0], schedule[1:]
                if waiting or best_seen == math.inf:
                    # An arm waits for the exploration budget, or nothing is measured here yet
                    # (the budget and the floors rule arms out only against a measured time):
                    # one timing at a time, then look again — a planned round would not look.
                    plan = ()
                if not key.samples and not key.failures:
                    return heuristic_decision(pick, plan)
                return explore_decision(pick, plan, key, explain)

        if incumbent is None and not confirmed:
            unsure = self._unsure_plan(key, usable)
            if unsure:
                return explore_decision(unsure[0], () if waiting else unsure[1:], key,
                                        explain)
        # A confirmed prior is committed to even when one timing of another arm came out a
        # little faster: the neighbours' evidence outweighs one noisy timing, and the
        # commitment, unsure, is re-checked after min_samples decisions.
        best = prior if confirmed else best_arm(usable, arms)
        if best is None or math.isinf(arms[best].estimate_us):
            # every usable arm failed last time and is out of quarantine: try one again
            return _explained(usable[0], Reason.EXPLORE, key)
        chosen = best
        if (incumbent is not None and incumbent is not best and incumbent in usable
                and arms[incumbent].epoch_samples
                and arms[best].estimate_us
                >= arms[incumbent].estimate_us * (1.0 - cfg.switch_margin)
                and not (arms[best].epoch_samples >= cfg.min_samples
                         and _sure_faster(arms[best], arms[incumbent], cfg.sure_z))):
            # The challenger is not clearly better — neither by switch_margin nor, timed in
            # full, beyond doubt (a near-tie measured precisely): keep the committed arm.
            chosen = incumbent
        elif incumbent is not chosen and incumbent in usable:
            if arms[chosen].epoch_samples < cfg.min_samples:
                # A challenger timed fewer than min_samples times in this epoch (once, after
                # a prior's plan or a drift alarm) is re-timed before it takes over: one lucky
                # timing is not enough to leave the committed arm.
                return _explained(chosen, Reason.RECHECK, key)
            if key.decisions - key.epoch_start > cfg.stale_after_decisions:
                # The challenger's estimate dates from this epoch's exploration, the committed
                # arm's from its latest timings: a burst of load on the machine makes the
                # committed arm look slower than the stale estimate of an arm timed in calmer
                # times. Both are measured afresh (a new epoch, as after a drift alarm) before
                # the committed arm is left.
                return _explained(chosen, Reason.DRIFT, key)
        if incumbent is chosen and key.decisions >= key.next_recheck:
            target = self._recheck_target(key, usable)
            if target is not None:
                return _explained(target, Reason.RECHECK, key)
        if not explain:
            return _UNEXPLAINED_EXPLOIT[chosen]
        return _explained_exploit(chosen, usable, key)

    def _affordable(self, key: KeyHistory, usable: Sequence[Backend],
                    best_seen: float) -> Sequence[Backend]:
        """``usable`` without the arms never timed on this key whose trial does not fit the
        exploration budget yet (see :class:`PolicyConfig`): a plain loop tried once on a
        million-element call costs as much as dozens of the vectorised calls it would not
        beat. They are tried when the key has run long enough (the policy looks again at
        its checkpoints), or at once where a smaller size found them competitive."""
        cfg = self.config
        arms = key.arms
        budget = -1.0
        kept = []
        for b in usable:
            stats = arms.get(b)
            if stats is not None and (stats.samples or stats.failures):
                kept.append(b)  # (timed here before: a new epoch re-measures it as it is)
                continue
            if budget < 0.0:
                # (an arm's timings before this epoch counted at the best time measured now)
                spent = sum(s.samples * (s.mean_us if s.epoch_samples else best_seen)
                            for s in arms.values() if s.samples)
                budget = max(cfg.explore_free_us, cfg.explore_share * spent)
            floor = key.floors.get(b) if key.floors else None
            # (a floor of 0: the GPU arm of inputs already on the device, with nothing to copy)
            guess = 2.0 * floor if floor is not None else cfg.unknown_arm_ratio * best_seen
            if guess - best_seen <= budget:
                kept.append(b)
        return kept

    def explained(self, decision: Decision, key: KeyHistory,
                  candidates: Sequence[Backend]) -> Decision:
        """``decision`` with its estimates (and an exploit's confidence) filled in from
        ``key``, if it was made with ``explain=False``."""
        if decision.estimates_us or not key.arms:
            return decision
        if decision.reason is Reason.EXPLOIT:
            return _explained_exploit(decision.backend, candidates, key)
        return decision._replace(estimates_us=_estimates(key), samples=key.samples,
                                 floors_us=_floors_of(key))

    @staticmethod
    def _prior_plan(key: KeyHistory, usable: Sequence[Backend], prior: Backend,
                    min_samples: int) -> tuple[Backend, ...] | None:
        """Exploration when the neighbouring buckets' clear winner is known: ``min_samples``
        timings of it, one of each other arm. ``None`` when an other arm beat it clearly — by
        the margin the neighbours' winner needed (the prior is wrong here: the key is explored
        in full, and the prior dropped). A closer result is within what one timing's noise
        does (a shared machine's timings of one call vary by 20-40%): the prior is committed
        to, unsure, and so re-checked soon."""
        arms = key.arms
        prior_stats = arms[prior]
        for b in usable:
            stats = arms.get(b)
            if (b is not prior and stats is not None and stats.epoch_samples
                    and prior_stats.epoch_samples
                    and stats.mean_us * PRIOR_MARGIN < prior_stats.mean_us):
                key.prior = None
                key.prior_rejected = True
                return None
        plan = [prior] * max(min_samples - prior_stats.epoch_samples, 0)
        plan += [b for b in usable if b is not prior
                 and (arms.get(b) is None or not arms[b].epoch_samples)]
        return tuple(plan[:_MAX_PLAN])

    def _unsure_plan(self, key: KeyHistory, usable: Sequence[Backend]) -> tuple[Backend, ...]:
        """Exploration done and nothing committed yet: when the two fastest arms are not told
        apart (under ``clear_confidence``), both are timed again, alternately, up to
        ``2 * min_samples`` times each (empty when they are told apart, or that is spent).
        A near-tie costs little to time again; a wrong commitment costs every later call."""
        best, runner = _two_fastest(key.arms, usable)
        if best is None or runner is None:
            return ()
        arms = key.arms
        limit = 2 * self.config.min_samples
        runner_owed = limit - arms[runner].epoch_samples
        best_owed = limit - arms[best].epoch_samples
        if runner_owed <= 0 and best_owed <= 0:
            return ()
        if _p_faster(arms[best], arms[runner]) >= self.config.clear_confidence:
            return ()
        return _alternate(runner, runner_owed, best, best_owed)

    def first_recheck(self, key: KeyHistory, chosen: Backend, candidates: Sequence[Backend],
                      recheck_interval: int) -> int:
        """Decisions until the first re-check after committing ``key`` to ``chosen``:
        ``recheck_interval`` when the choice is clear, ``min_samples`` when it is not."""
        arms = key.arms
        rival, _third = _two_fastest(arms, [b for b in candidates if b is not chosen])
        if rival is None or _p_faster(arms[chosen], arms[rival]) >= self.config.clear_confidence:
            return recheck_interval
        return min(self.config.min_samples, recheck_interval)

    def _recheck_target(self, key: KeyHistory, usable: Sequence[Backend]) -> Backend | None:
        arms = key.arms
        incumbent_us = arms[key.incumbent].estimate_us if key.incumbent else math.inf
        full = (key.rechecks + 1) % self.config.full_recheck_every == 0
        others = [b for b in usable if b is not key.incumbent and b in arms and
                  (full or arms[b].estimate_us <= incumbent_us * self.config.plausible_ratio)]
        if not others:
            return None
        # the arm we have heard from least recently
        return min(others, key=lambda b: arms[b].last_update)


def best_arm(backends: Sequence[Backend], arms: Mapping[Backend, ArmStats]) -> Backend | None:
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


def _two_fastest(arms: Mapping[Backend, ArmStats],
                 backends: Sequence[Backend]) -> tuple[Backend | None, Backend | None]:
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


def _estimates(key: KeyHistory) -> Mapping[Backend, float]:
    return MappingProxyType({b: s.estimate_us for b, s in key.arms.items()
                             if s.epoch_samples or s.consecutive_failures})


def _floors_of(key: KeyHistory) -> Mapping[Backend, float]:
    return MappingProxyType(key.floors) if key.floors else _EMPTY


def _explained(backend: Backend, reason: Reason, key: KeyHistory,
               plan: tuple[Backend, ...] = ()) -> Decision:
    """A decision with what it was based on: the key's estimates, samples and floors."""
    return Decision(backend, reason, 0.0, _estimates(key), key.samples, plan, _floors_of(key))


def heuristic_decision(backend: Backend, plan: tuple[Backend, ...]) -> Decision:
    """The cold-start decision for ``backend`` (nothing measured yet, nothing to explain)."""
    decision = _HEURISTIC.get((backend, plan))
    if decision is None:
        decision = _HEURISTIC[(backend, plan)] = Decision(backend, Reason.HEURISTIC, plan=plan)
    return decision


_MAX_PLAN = 16


@functools.lru_cache(maxsize=1024)  # few distinct rounds exist; this is per exploring call
def _schedule(round_: tuple[tuple[int, Backend], ...], min_samples: int) -> tuple[Backend, ...]:
    """The order in which to time the arms owed timings (``(timings so far, arm)`` in
    heuristic order): round-robin, fewest timings first, up to one timing each — the point
    where the neighbouring buckets, exploring alongside, may have a clear winner to go by —
    then up to two — where pruning may rule an arm out — then up to ``min_samples``; the
    policy looks again at each of these points. No timing in a schedule depends on another's
    result."""
    counts = [n for n, _b in round_]
    least = min(counts)
    target = min_samples if least >= 2 else min(least + 1, min_samples)
    schedule = [b for level in range(least, target) for n, b in round_ if n <= level]
    return tuple(schedule[:_MAX_PLAN])


@functools.lru_cache(maxsize=64)
def _alternate(first: Backend, first_times: int, second: Backend,
               second_times: int) -> tuple[Backend, ...]:
    """``first`` and ``second`` taking turns, ``first_times`` and ``second_times`` times."""
    plan: list[Backend] = []
    for i in range(max(first_times, second_times)):
        plan += [b for b, times in ((first, first_times), (second, second_times)) if i < times]
    return tuple(plan)


@functools.lru_cache(maxsize=1024)
def plan_steps(plan: tuple[Backend, ...]) -> tuple[Decision, ...]:
    """The exploring decisions that carry out ``plan``, one per call, built once per plan."""
    return tuple(Decision(b, Reason.EXPLORE, plan=plan[i + 1:]) for i, b in enumerate(plan))


def explore_decision(backend: Backend, plan: tuple[Backend, ...], key: KeyHistory,
                     explain: bool) -> Decision:
    """An exploring decision for ``backend``, with the rest of its round in ``plan``."""
    if explain:
        return _explained(backend, Reason.EXPLORE, key, plan=plan)
    decision = _UNEXPLAINED_EXPLORE.get((backend, plan))
    if decision is None:  # a handful of combinations of three arms: built once each
        decision = _UNEXPLAINED_EXPLORE[(backend, plan)] = Decision(
            backend, Reason.EXPLORE, plan=plan)
    return decision


def _explained_exploit(chosen: Backend, usable: Sequence[Backend], key: KeyHistory) -> Decision:
    arms = key.arms
    estimates = _estimates(key)
    measured = [b for b in usable if b in estimates and arms[b].epoch_samples]
    return Decision(chosen, Reason.EXPLOIT, _confidence(chosen, measured, arms, estimates),
                    estimates, key.samples, floors_us=_floors_of(key))


def _confidence(chosen: Backend, measured: Sequence[Backend], arms: Mapping[Backend, ArmStats],
                estimates: Mapping[Backend, float]) -> float:
    """P(chosen is faster than the runner-up), normal approximation of the two estimates."""
    runner = min((b for b in measured if b is not chosen), key=estimates.__getitem__,
                 default=None)
    if runner is None:
        return 1.0
    return _p_faster(arms[chosen], arms[runner])


# Samples the incumbent's EWMA variance stands for at most (alpha 0.1: ~20 samples' worth).
_EWMA_EFFECTIVE_SAMPLES = 20


def _sure_faster(challenger: ArmStats, incumbent: ArmStats, z: float) -> bool:
    """Whether ``challenger`` (timed afresh) is faster than ``incumbent`` by ``z`` standard
    errors. The noise is the incumbent's, relative to its mean, applied to both: a few fresh
    timings say little about their own spread (three can agree by chance), while the
    incumbent's many timings give the machine's."""
    inc_us, ch_us = incumbent.estimate_us, challenger.estimate_us
    if not inc_us > ch_us:  # (also NaN and inf)
        return False
    cv2 = incumbent.var_us2 / (inc_us * inc_us)
    se2 = cv2 * (ch_us * ch_us / challenger.epoch_samples
                 + inc_us * inc_us / min(incumbent.epoch_samples, _EWMA_EFFECTIVE_SAMPLES))
    return (inc_us - ch_us) ** 2 >= z * z * se2


def _p_faster(mine: ArmStats, theirs: ArmStats) -> float:
    """P(``mine`` is faster than ``theirs``), normal approximation of the two estimates."""
    theirs_us = theirs.estimate_us
    if math.isinf(theirs_us):
        return 1.0
    se = math.sqrt(mine.var_us2 / mine.epoch_samples + theirs.var_us2 / theirs.epoch_samples)
    gap = theirs_us - mine.estimate_us
    if se == 0.0:
        return 1.0 if gap > 0 else 0.5
    return 0.5 * (1.0 + math.erf(gap / (se * _SQRT2)))


_SQRT2 = math.sqrt(2.0)

