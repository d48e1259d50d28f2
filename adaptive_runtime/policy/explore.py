"""Exploration: the arms one evaluation considers (``evaluation_round``: floors and the
exploration budget rule arms out), the prior's plan after a drift alarm (``_prior_plan``),
rounds of timings of the arms still owed them (``_owed_round``, in the order ``_schedule``
gives, planned through where looking again cannot pay: ``_checkpoints_pay``), the two fastest
timed again while they are not told apart (``_unsure_plan``), and the key's exploration
allowance (``explore_budget``, ``_affordable``, what an arm never timed is expected to take)."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence

from ..backend import Choice
from ..decision import Decision, Reason
from ..history import ArmStats, KeyHistory
from ..knobs import PolicyConfig
from .compare import p_faster, two_fastest
from .explain import explore_decision, heuristic_decision
from .state import KeyState, Round

__all__ = ["plan_steps"]

# An arm this many times slower than another in one epoch is clearly behind, and a prior
# beaten by this much is wrong here: a shared machine's timings of one call vary by 20-40%,
# but noise only ever adds time.
_CLEAR_MARGIN = 1.25
# What one full evaluation of the policy adds to a timed call (4-9 us measured on the
# development machine): a look between timings that cannot save more is not taken.
EVALUATION_US = 5.0
# An arm never timed on a key whose neighbouring sizes measured it this many times slower than
# their fastest waits for the key's exploration allowance before its trial (_affordable).
_BEHIND = 2.0
# The longest plan one decision carries (min_samples may be up to 1,000).
_MAX_PLAN = 16
# An arm timed fewer times than this on a key is priced, for a trial again, at its fastest
# timing (noise only ever adds time), and one timed once at most _OUTLIER_LAG x the best: its
# one timing may be an outlier (a first ATen call after the warm-up read 10 ms where the
# kernel takes 60-90 us, and kept the arm out of its key for good). So at most this many
# timings are spent proving such an arm slow.
FEW_TIMINGS = 3
_OUTLIER_LAG = 4.0


def priced_again_us(stats: ArmStats, best_us: float) -> float:
    """What timing an arm timed before is expected to take: its estimate, but while it rests
    on fewer than ``FEW_TIMINGS`` timings their fastest, and after one timing at most
    ``_OUTLIER_LAG`` x ``best_us``."""
    if stats.samples >= FEW_TIMINGS:
        return stats.mean_us
    fastest = min(stats.window) if stats.window else stats.mean_us
    if stats.samples == 1 and fastest > _OUTLIER_LAG * best_us:
        return _OUTLIER_LAG * best_us
    return fastest


def evaluation_round(cfg: PolicyConfig, state: KeyState, key: KeyHistory,
                     usable: Sequence[Choice]) -> Round:
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
    floored: dict[Choice, float] | None = None
    if floors is not None and best_seen < math.inf:
        # An arm not timed here in this epoch whose floor (the GPU arm's copies of a host
        # call, what it took on a smaller bucket) is well over what another arm was measured
        # to take is not tried yet. It is not ruled out for good: a floor can be one cold
        # timing on a smaller bucket, and an arm never timed on a key cannot be shown wrong
        # there. It waits for the key's exploration allowance, priced at its floor
        # (_affordable): tried once the key's calls have taken ~1/explore_share of that.
        limit = best_seen * cfg.floor_ratio
        for b in usable:  # (a dict only when a floor holds an arm back: seldom)
            floor = floors.get(b, 0.0)
            if floor > limit and not (b in arms and arms[b].epoch_samples):
                if floored is None:
                    floored = {}
                floored[b] = floor
    waiting = False
    if best_seen < math.inf:
        affordable = _affordable(cfg, state, key, usable, best_seen, floored)
        # (an arm a floor holds back waits long: rounds are planned through as before)
        held = 0 if floored is None else sum(1 for b in floored if b not in affordable)
        waiting = len(affordable) + held < len(usable)
        usable = affordable
    elif (state.neighbours_best is not None and state.neighbours_best in usable
          and usable[0] is not state.neighbours_best and not key.samples):
        # The key's first call: the arm the neighbouring sizes measured fastest goes first
        # (the heuristic's order is a guess; theirs was measured). It rules no arm out.
        first = state.neighbours_best
        usable = [first, *(b for b in usable if b is not first)]
    # Once committed, an arm timed at all in this epoch is left to re-checks (a prior's
    # plan commits with the others timed once); only an arm never timed is still owed.
    min_samples = cfg.min_samples_per_arm if state.incumbent is None else 1
    return Round(state, key, usable, best_seen, waiting, min_samples)


def exploration_decision(cfg: PolicyConfig, r: Round, explain: bool) -> Decision | None:
    """Explore: the prior's plan, else the arms still owed timings in this epoch, else
    (nothing committed yet) the two fastest while they are not told apart."""
    state, key = r.state, r.key
    prior = state.prior
    if prior is not None and prior in r.usable and not key.failures:
        plan = _prior_plan(key, r.usable, prior, cfg.min_samples_per_arm)
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


def _owed_round(cfg: PolicyConfig, r: Round, explain: bool) -> Decision | None:
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


def _checkpoints_pay(cfg: PolicyConfig, r: Round, round_: list[tuple[int, Choice]]) -> bool:
    """Whether looking again between a round's timings can pay for itself: a look is a full
    evaluation (``EVALUATION_US``), and it can save at most what the rest of the round
    costs (an arm never timed here counted at what ``_affordable`` expects of it). Where
    that is under one evaluation (calls of a few microseconds), the round is planned
    through to ``min_samples_per_arm`` instead."""
    best_seen = r.best_seen
    if best_seen == math.inf:
        return True  # (nothing measured here yet)
    arms, floors, min_samples = r.key.arms, r.state.floors, r.min_samples
    rest_us = 0.0
    for n, b in round_:
        expected = arms[b].mean_us if n else _untried_us(cfg, floors, b, best_seen)
        rest_us += expected * (min_samples - n)
    return rest_us > EVALUATION_US


def _affordable(cfg: PolicyConfig, state: KeyState, key: KeyHistory, usable: Sequence[Choice],
                best_seen: float, floored: Mapping[Choice, float] | None = None,
                ) -> Sequence[Choice]:
    """``usable`` without the arms whose trial does not fit the key's exploration allowance
    yet (see :class:`PolicyConfig`): those timed before a drift alarm, each expected to take
    what it took before it — a plain loop timed again on a million-element call costs as
    much as dozens of the vectorised calls it would not beat — those never timed here
    whose first trial is priced (``_first_trial_us``), and those a floor holds back
    (``floored``: each at its floor at least). Any other arm never timed on the key is
    kept: tried at once."""
    arms = key.arms
    previous = state.previous_us
    behind = state.behind
    budget = -1.0
    kept = []
    for b in usable:
        stats = arms.get(b)
        never = stats is None or not (stats.samples or stats.failures)  # (tried on the key)
        if stats is None or never:
            guess = _first_trial_us(cfg, behind, b, best_seen)
        elif stats.epoch_samples or stats.failures or not previous:
            guess = None  # measured in this epoch, or failed: its own estimate decides
        else:  # timed before the drift alarm: what it took then
            guess = previous.get(b)
            if guess is not None and stats.samples < FEW_TIMINGS:
                guess = min(guess, priced_again_us(stats, best_seen))
        if floored is not None and b in floored:
            # (held back by its floor: tried once the key's own share affords the whole
            # floor — its calls have taken 1/explore_share times it — with no free
            # allowance, which would try a costly arm at once on every small key)
            need = max(floored[b], guess or 0.0)
            if ((never and _owed(cfg, state, need))  # (never timed here: see _owed below)
                    or cfg.explore_share * _spent_us(arms, best_seen) - state.explored_us
                    >= need):
                kept.append(b)
            continue
        if guess is None:
            # (an arm never timed here whose trial is not priced is tried at once: the
            # cold-start order is a guess, which orders the arms but rules none out; an arm
            # the heuristic put last that was 3x faster waited tens of calls for the budget)
            kept.append(b)
            continue
        if budget < 0.0:
            budget = explore_budget(cfg, state, arms, best_seen)
        if guess - best_seen <= budget or (never and _owed(cfg, state, guess)):
            kept.append(b)
    return kept


def _owed(cfg: PolicyConfig, state: KeyState, trial_us: float) -> bool:
    """Whether an arm never timed on the key is owed its first trial of ``trial_us`` now:
    the key's calls — the untimed ones too — have taken 1/``explore_share`` times it. (The
    allowance counts timed calls only, 1 in dozens once converged: an arm held back by a
    slow timing on a smaller bucket, compiled late, or never timed by a saved history would
    wait for good.) Exploring's cost is not subtracted: on a key of microseconds the
    re-checks' evaluations alone use the share up. Owed once: at most ``explore_share`` of
    the key's time per arm."""
    return cfg.explore_share * state.calls_us >= trial_us


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


def explore_budget(cfg: PolicyConfig, state: KeyState, arms: Mapping[Choice, ArmStats],
                   best_us: float) -> float:
    """What a timing of another arm may still cost over ``best_us`` on a key: its
    exploration allowance — ``explore_free_us``, or ``explore_share`` of the time the key's
    calls have taken so far (an arm's timings before this epoch counted at ``best_us``) —
    less what timing other arms than the committed one has cost already
    (``KeyState.explored_us``). Cumulative, so re-checks of an arm far behind come ever
    more rarely as they use it up, and the key's exploring stays within its share."""
    allowance = cfg.explore_share * _spent_us(arms, best_us)
    if allowance < cfg.explore_free_us:
        allowance = cfg.explore_free_us
    return allowance - state.explored_us


def _spent_us(arms: Mapping[Choice, ArmStats], best_us: float) -> float:
    """The time the key's calls have taken so far (an arm's timings before this epoch
    counted at ``best_us``)."""
    spent = 0.0
    for s in arms.values():
        if s.samples:
            spent += s.samples * (s.mean_us if s.epoch_samples else best_us)
    return spent


def _unsure_plan(cfg: PolicyConfig, key: KeyHistory,
                 usable: Sequence[Choice]) -> tuple[Choice, ...]:
    """Exploration done and nothing committed yet: when the two fastest arms are not told
    apart (under ``clear_confidence``), both are timed again, alternately, up to
    ``2 * min_samples_per_arm`` times each (empty when they are told apart, or that is spent).
    A near-tie costs little to time again; a wrong commitment costs every later call.
    (With ``min_samples_per_arm`` 1, the default, the key commits at once and an unsure
    commitment has its runner-up re-checked on the next decision: replayed over three
    recordings of ``benchmarks/decision_quality.py``, timing both again first read +6.4 %
    regret against +4.7 %.)"""
    best, runner = two_fastest(key.arms, usable)
    if best is None or runner is None:
        return ()
    arms = key.arms
    if cfg.min_samples_per_arm < 2:
        return ()  # (committed to at once, unsure: the runner-up is re-checked soon instead)
    limit = 2 * cfg.min_samples_per_arm
    runner_owed = limit - arms[runner].epoch_samples
    best_owed = limit - arms[best].epoch_samples
    if runner_owed <= 0 and best_owed <= 0:
        return ()
    if p_faster(arms[best], arms[runner], cfg.noise_floor) >= cfg.clear_confidence:
        return ()
    return _alternate(runner, runner_owed, best, best_owed)


def prior_contradicted(key: KeyHistory, prior: Choice, backends: Sequence[Choice]) -> bool:
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
    slowed): ``min_samples_per_arm`` timings of it, one of each other arm. ``None`` when an
    other arm beat it clearly (the prior is wrong here: the key is explored in full, and
    :meth:`Policy.apply` drops the prior). A closer result is within what one timing's noise
    does (a shared machine's timings of one call vary by 20-40%): the prior is committed to,
    unsure, and so re-checked soon."""
    if prior_contradicted(key, prior, usable):
        return None
    arms = key.arms
    timed = arms[prior].epoch_samples if prior in arms else 0
    plan = [prior] * max(min_samples - timed, 0)
    plan += [b for b in usable if b is not prior
             and (arms.get(b) is None or not arms[b].epoch_samples)]
    return tuple(plan[:_MAX_PLAN])


@functools.lru_cache(maxsize=1024)  # few distinct rounds exist; this is per exploring call
def _schedule(round_: tuple[tuple[int, Choice], ...], min_samples: int,
              checkpoints: bool = True) -> tuple[Choice, ...]:
    """The order in which to time the arms owed timings (``(timings so far, arm)`` in
    heuristic order): round-robin, fewest timings first, up to one timing each — where one
    timing far behind rules an arm out, and the smaller buckets, exploring alongside, may
    have floors to go by — then up to two — where pruning may rule an arm out — then up to
    ``min_samples_per_arm``; the policy looks again at each of these points (``checkpoints``; else
    the round goes through to ``min_samples_per_arm``). No timing in a schedule depends on another's
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


