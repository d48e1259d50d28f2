"""The policy on its own: ``Policy`` constructed directly, fed fake statistics (hand-made
``ArmStats``) and a fake clock (``now_s`` passed in), no runtime. One section per phase: cold
start, explore, commit, exploit, re-check, drift, fallback; then the state machine run over a
sequence of set latencies.

(The same behaviour through the runtime, with fake arms: test_policy_in_runtime.py.)"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence

import pytest

import adaptive_runtime as ar
from adaptive_runtime.backend import Backend, Kind
from adaptive_runtime.decision import Decision, Reason
from adaptive_runtime.history import ArmStats, HistoryStore, KeyHistory
from adaptive_runtime.keys import reference_size
from adaptive_runtime.operations import DeviceProbe
from adaptive_runtime.policy import (
    KeyState,
    Policy,
    PolicyConfig,
    Step,
    heuristic_order,
)

GPU, SIMD, SCALAR = Backend.GPU, Backend.SIMD, Backend.SCALAR
NOW_S = 1_000.0  # the fake clock's reading (quarantines are compared with it)
TWO = (SIMD, SCALAR)
# A policy told to time each arm three times before committing (min_samples_per_arm=3) and
# the two fastest up to six while they are not told apart: the explore phase's rounds,
# pruning and planning, which the default (one timing each) seldom needs.
ROUNDS = PolicyConfig(min_samples_per_arm=3)


def timed(mean_us: float, n: int = 3, var_us2: float = 1.0, last_update: float = 0.0,
          failures: int = 0, quarantined_until_s: float = -math.inf) -> ArmStats:
    """Fake statistics: an arm timed ``n`` times in this epoch at ``mean_us``."""
    return ArmStats(samples=n, epoch_samples=n, mean_us=mean_us if n else math.nan,
                    var_us2=var_us2, failures=failures, consecutive_failures=failures,
                    quarantined_until_s=quarantined_until_s, last_update=last_update)


def key_with(arms: Mapping[Backend, ArmStats], bucket: int = 10) -> KeyHistory:
    key = KeyHistory("op", bucket)
    key.arms.update(arms)
    key.samples = sum(s.samples for s in arms.values())
    key.failures = sum(s.failures for s in arms.values())
    return key


def committed(policy: Policy, key: KeyHistory, candidates: Sequence[Backend] = TWO) -> KeyState:
    """A state committed by the policy itself to the best arm of ``key``."""
    state = KeyState()
    decision = policy.step(state, key, candidates, NOW_S)
    assert decision.reason is Reason.EXPLOIT, decision
    return state


def due_for_recheck(policy: Policy, key: KeyHistory) -> KeyState:
    """A state committed by the policy to the best arm of ``key``, its first re-check due."""
    state = committed(policy, key)
    state.decisions = state.next_recheck
    state.memo = None
    return state


def fields(state: KeyState) -> dict[str, object]:
    return {name: copy.copy(getattr(state, name)) for name in KeyState.__slots__}


# ------------------------------------------------------------------ cold start


def test_cold_start_without_history_is_trueno_heuristic() -> None:
    policy = Policy()
    order = heuristic_order(Kind.MATRIX, 1 << 20, (SCALAR, SIMD, GPU))
    assert order == (GPU, SIMD, SCALAR)
    d = policy.decide(KeyState(), None, order, NOW_S)
    assert (d.backend, d.reason, d.confidence, d.has_history) == (GPU, Reason.HEURISTIC, 0.0,
                                                                 False)
    assert heuristic_order(Kind.VECTOR, 100, (SIMD, SCALAR)) == (SCALAR, SIMD)


def test_a_key_with_no_timing_yet_starts_with_the_heuristic_arm_one_at_a_time() -> None:
    d = Policy().decide(KeyState(), key_with({}), TWO, NOW_S)
    # (nothing measured: no plan ahead, the floors and budget need a measured time)
    assert (d.backend, d.reason, d.plan) == (SIMD, Reason.HEURISTIC, ())


# ------------------------------------------------------------------ explore


def test_explore_times_every_arm_min_samples_times_fewest_first() -> None:
    key = key_with({SIMD: timed(100.0, n=1), SCALAR: timed(0.0, n=0)})
    d = Policy(ROUNDS).decide(KeyState(), key, TWO, NOW_S)
    # up to one timing each: where the neighbouring buckets may have a winner to go by
    assert (d.backend, d.reason, d.plan) == (SCALAR, Reason.EXPLORE, ())
    key = key_with({SIMD: timed(100.0, n=1), SCALAR: timed(120.0, n=1)})
    d = Policy(ROUNDS).decide(KeyState(), key, TWO, NOW_S)
    # then up to two each: where pruning may rule an arm out
    assert (d.backend, d.reason, d.plan) == (SIMD, Reason.EXPLORE, (SCALAR,))


def test_an_arm_far_behind_after_two_timings_is_owed_nothing_more() -> None:
    # SCALAR: 2 timings at 4x the best (over prune_ratio 3) -> pruned; SIMD is owed one more
    key = key_with({SIMD: timed(100.0, n=2), SCALAR: timed(400.0, n=2)})
    d = Policy(ROUNDS).decide(KeyState(), key, TWO, NOW_S)
    assert (d.backend, d.reason, d.plan) == (SIMD, Reason.EXPLORE, ())


def test_an_arm_whose_floor_is_far_over_the_best_is_not_tried() -> None:
    key = key_with({SIMD: timed(100.0), SCALAR: ArmStats()})
    state = KeyState(floors={SCALAR: 200.0})  # over floor_ratio 1.5 x 100 us
    d = Policy().decide(state, key, TWO, NOW_S)
    assert (d.backend, d.reason) == (SIMD, Reason.EXPLOIT)
    assert d.floors_us == {SCALAR: 200.0}


def test_an_arm_a_floor_holds_back_is_tried_once_the_key_has_run_long_enough() -> None:
    """A floor postpones an arm, never rules it out for good (it may be one cold timing on a
    smaller bucket): once the key's calls have taken 1/explore_share times the floor, the
    arm is timed there. Before that it is not, however cheap the free allowance says a
    trial is."""
    floors = {SCALAR: 200.0}  # (explore_share 0.03: tried after ~6,700 us of the key's calls)
    early = key_with({SIMD: timed(100.0, n=60)})  # 6,000 us
    assert Policy().decide(KeyState(floors=floors), early, TWO, NOW_S).backend is SIMD
    later = key_with({SIMD: timed(100.0, n=70)})  # 7,000 us
    d = Policy().decide(KeyState(floors=floors), later, TWO, NOW_S)
    assert (d.backend, d.reason) == (SCALAR, Reason.EXPLORE)


def test_a_held_back_arm_is_owed_its_trial_by_the_keys_untimed_calls_too() -> None:
    """A converged key is timed 1 call in dozens: its timed calls alone (6,000 us here) do
    not afford the floor's 6,700 us, yet the key's calls in all — each timing standing for
    the untimed calls since the one before (``KeyState.calls_us``) — took 300 ms: the arm
    never timed there is owed its trial."""
    floors = {SCALAR: 200.0}
    key = key_with({SIMD: timed(100.0, n=60)})
    assert Policy().decide(KeyState(floors=floors), key, TWO, NOW_S).backend is SIMD
    d = Policy().decide(KeyState(floors=floors, calls_us=300_000.0), key, TWO, NOW_S)
    assert (d.backend, d.reason) == (SCALAR, Reason.EXPLORE)


def test_a_variant_that_came_after_the_key_converged_is_tried_once_its_calls_afford_it() -> None:
    # a variant never timed on the key (compiled, or its setter found, off the caller's path
    # after the key converged) is priced at unknown_arm_ratio x the best; the allowance of
    # the timed calls is spent, what the key's calls took in all pays for one trial
    variant = ar.Variant("simd", "numba@1")
    arms = (SIMD, variant, SCALAR)
    key = key_with({SIMD: timed(1000.0, n=40), SCALAR: timed(5000.0, n=1)})
    spent = KeyState(explored_us=5000.0)
    assert Policy().decide(spent, key, arms, NOW_S).choice is SIMD
    paid = KeyState(explored_us=5000.0, calls_us=1_000_000.0)
    d = Policy().decide(paid, key, arms, NOW_S)
    assert (d.choice, d.reason) == (variant, Reason.EXPLORE)


def test_an_untried_arm_is_tried_next_whatever_its_trial_is_guessed_to_cost() -> None:
    # SIMD: 2 ms a call, timed once; SCALAR's trial is guessed at 3x that, 4 ms over the
    # best: far over the exploration allowance, yet the cold-start order is a guess, which
    # orders the arms and rules none out
    key = key_with({SIMD: timed(2000.0, n=1), SCALAR: ArmStats()})
    d = Policy().decide(KeyState(), key, TWO, NOW_S)
    assert (d.backend, d.reason) == (SCALAR, Reason.EXPLORE)


def test_one_costly_timing_that_lost_is_enough_unless_it_was_the_keys_first_call() -> None:
    # SCALAR lost on one timing 20 ms over SIMD: timing it again would cost more than the
    # exploration allowance, so it is owed nothing more
    key = key_with({SIMD: timed(13_000.0), SCALAR: timed(33_000.0, n=1)})
    assert Policy(ROUNDS).decide(KeyState(), key, TWO, NOW_S).reason is Reason.EXPLOIT
    # the cold-start arm's one timing is the key's first call, with a new size's one-off
    # costs (and a library's first-use state): it is timed again
    key = key_with({SIMD: timed(33_000.0, n=1), SCALAR: timed(13_000.0)})
    d = Policy(ROUNDS).decide(KeyState(), key, TWO, NOW_S)
    assert (d.backend, d.reason) == (SIMD, Reason.EXPLORE)


def test_two_arms_not_told_apart_are_timed_again_before_committing() -> None:
    noisy = timed(200.0, var_us2=200.0**2)
    key = key_with({SIMD: noisy, SCALAR: timed(210.0, var_us2=200.0**2)})
    d = Policy(ROUNDS).decide(KeyState(), key, TWO, NOW_S)
    assert d.reason is Reason.EXPLORE
    assert d.backend is SCALAR and d.plan == (SIMD, SCALAR, SIMD, SCALAR, SIMD)


def test_a_prior_is_timed_in_full_and_the_others_once() -> None:
    # (the prior: the arm that raised a drift alarm, expected to win still)
    key = key_with({SIMD: ArmStats(), SCALAR: ArmStats()})
    state = KeyState(prior=SIMD)
    policy = Policy()
    d = policy.decide(state, key, TWO, NOW_S)
    assert (d.backend, d.reason) == (SIMD, Reason.HEURISTIC)
    key = key_with({SIMD: timed(100.0, n=3), SCALAR: timed(110.0, n=1)})
    # plan done, SCALAR within one timing's noise of the prior: the prior is committed to
    d = policy.decide(state, key, TWO, NOW_S)
    assert (d.backend, d.reason) == (SIMD, Reason.EXPLOIT)
    policy.apply(state, key, d, TWO)
    assert state.incumbent is SIMD and state.prior is None  # (a prior serves once)


def test_a_prior_beaten_clearly_here_gives_way_to_full_exploration() -> None:
    key = key_with({SIMD: timed(100.0, n=1), SCALAR: timed(50.0, n=1)})
    state = KeyState(prior=SIMD)
    policy = Policy(ROUNDS)
    before = fields(state)
    d = policy.decide(state, key, TWO, NOW_S)
    assert fields(state) == before  # decide() is pure: the rejection is apply()'s
    assert d.reason is Reason.EXPLORE and d.plan  # a full round, not the prior's one step
    policy.apply(state, key, d, TWO)
    assert state.prior is None


def _neighbours(below: dict[Backend, float] | None, above: dict[Backend, float] | None
                ) -> tuple[HistoryStore, KeyHistory]:
    """A store with bucket 10 new, and buckets 9 and 11 timed as given (twice each)."""
    store = HistoryStore(16)
    for bucket, means in ((9, below), (11, above)):
        if means:
            store.key("op", bucket).arms.update({b: timed(us, n=2) for b, us in means.items()})
    return store, store.key("op", 10)


def test_a_keys_first_call_runs_the_arm_its_neighbours_measured_fastest() -> None:
    # the cold-start order puts SIMD first; both neighbouring buckets measured SCALAR 3x faster
    store, key = _neighbours({SIMD: 300.0, SCALAR: 100.0}, {SIMD: 600.0, SCALAR: 200.0})
    d = Policy().step(KeyState(), key, TWO, NOW_S, neighbours=store)
    assert (d.backend, d.reason) == (SCALAR, Reason.HEURISTIC)
    # one side measured is enough
    store, key = _neighbours(None, {SIMD: 600.0, SCALAR: 200.0})
    assert Policy().step(KeyState(), key, TWO, NOW_S, neighbours=store).backend is SCALAR


def test_neighbours_that_disagree_leave_the_cold_start_order() -> None:
    # a crossover between buckets 9 and 11: no measured answer for bucket 10
    store, key = _neighbours({SIMD: 300.0, SCALAR: 100.0}, {SIMD: 200.0, SCALAR: 600.0})
    d = Policy().step(KeyState(), key, TWO, NOW_S, neighbours=store)
    assert (d.backend, d.reason) == (SIMD, Reason.HEURISTIC)


def test_the_neighbours_order_the_first_call_but_rule_no_arm_out() -> None:
    # SCALAR first (its neighbours' winner), then SIMD is still timed: SIMD is 2x faster here
    store, key = _neighbours({SIMD: 300.0, SCALAR: 100.0}, None)
    policy, state = Policy(), KeyState()
    d = policy.step(state, key, TWO, NOW_S, neighbours=store)
    assert d.backend is SCALAR
    store.record(key, SCALAR, 200.0, 1 << 9)
    policy.observe(state, SCALAR, 200.0, key.arms[SCALAR])
    d = policy.step(state, key, TWO, NOW_S, neighbours=store)
    assert (d.backend, d.reason) == (SIMD, Reason.EXPLORE)


def test_the_floors_come_from_the_smaller_bucket_and_no_prior_from_the_neighbours() -> None:
    store = HistoryStore(16)
    for bucket in (9, 11):
        near = store.key("op", bucket)
        near.arms.update({SIMD: timed(100.0, n=2), SCALAR: timed(200.0, n=2)})
    key = store.key("op", 10)
    state = KeyState()
    d = Policy().step(state, key, TWO, NOW_S, neighbours=store)
    # what each arm took on the smaller bucket is its floor here ...
    assert state.floors == {SIMD: 100.0, SCALAR: 200.0}
    # ... but a neighbour's clear winner is no prior: the cold-start order decides
    assert state.prior is None and (d.backend, d.reason) == (SIMD, Reason.HEURISTIC)


def test_a_floor_follows_the_smaller_buckets_estimate_down() -> None:
    """A smaller bucket's first, cold timing of SIMD (6 ms) kept SIMD out of a larger key
    committed to SCALAR (0.8 ms) for good, the floor raised only. Re-checked there at 175 us,
    the floor here comes down at the key's next full evaluation, and SIMD is tried."""
    store = HistoryStore(16)
    smaller = store.key("op", 9)
    smaller.arms.update({SIMD: timed(6_000.0, n=1), SCALAR: timed(400.0, n=3)})
    key = store.key("op", 10)
    key.arms.update({SCALAR: timed(800.0, n=20)})
    policy, state = Policy(), KeyState()
    policy.set_floors(state, {GPU: 50_000.0})  # an implementation's own floor stays
    d = policy.step(state, key, TWO, NOW_S, neighbours=store)
    assert (d.backend, d.reason) == (SCALAR, Reason.EXPLOIT)
    assert state.floors == {GPU: 50_000.0, SIMD: 6_000.0, SCALAR: 400.0}
    smaller.arms[SIMD] = timed(175.0, n=2)  # its re-check
    state.memo = None  # (as after the memo's 16 decisions; kept, it would be reused)
    d = policy.step(state, key, TWO, NOW_S, neighbours=store)
    assert state.floors == {GPU: 50_000.0, SIMD: 175.0, SCALAR: 400.0}
    assert d.backend is SIMD  # (its first timing here)


# ------------------------------------------------------------------ commit and exploit


def test_a_clear_winner_is_committed_and_rechecked_at_the_regular_interval() -> None:
    key = key_with({SIMD: timed(100.0), SCALAR: timed(300.0)})
    policy = Policy(PolicyConfig(recheck_interval=50))
    state = KeyState()
    d = policy.step(state, key, TWO, NOW_S)
    assert (d.backend, d.reason) == (SIMD, Reason.EXPLOIT)
    assert d.confidence > 0.99 and d.estimates_us == {SIMD: 100.0, SCALAR: 300.0}
    assert (state.incumbent, state.decisions, state.next_recheck) == (SIMD, 1, 51)
    assert state.drift_baseline_us == 100.0  # watched for drift from now on


def test_an_unsure_commitment_is_rechecked_after_min_samples_decisions() -> None:
    key = key_with({SIMD: timed(200.0, n=6, var_us2=100.0**2),
                    SCALAR: timed(210.0, n=6, var_us2=100.0**2)})
    state = committed(Policy(ROUNDS), key)
    assert state.next_recheck == state.decisions + 3


def test_one_timing_each_a_few_percent_apart_is_an_unsure_commitment() -> None:
    # no spread measured yet: each timing is taken to vary by noise_floor (10%) at least,
    # so 200 against 230 us is not a clear answer and the rival is re-checked next
    key = key_with({SIMD: timed(200.0, n=1, var_us2=0.0), SCALAR: timed(230.0, n=1, var_us2=0.0)})
    policy = Policy(PolicyConfig(recheck_interval=50))
    state = committed(policy, key)
    assert state.next_recheck == state.decisions + 1
    # twice as fast is clear on one timing each
    key = key_with({SIMD: timed(200.0, n=1, var_us2=0.0), SCALAR: timed(400.0, n=1, var_us2=0.0)})
    state = committed(policy, key)
    assert state.next_recheck == state.decisions + 50


def test_a_rival_left_far_behind_on_one_costly_timing_is_rechecked_soon() -> None:
    # SCALAR lost on one timing, 4.25x SIMD's time and 6.5 ms over it (over explore_free_us):
    # further behind than arms that do not stall differ, so the timing may be a stall: the
    # first re-check comes after min_samples_per_arm decisions, as the budget allows
    policy = Policy(PolicyConfig(recheck_interval=50))
    key = key_with({SIMD: timed(2000.0, n=3, var_us2=0.0), SCALAR: timed(8500.0, n=1)})
    assert committed(policy, key).next_recheck == 2
    # timed twice, clearly out: re-checked at the regular interval
    key = key_with({SIMD: timed(2000.0, n=3, var_us2=0.0), SCALAR: timed(8500.0, n=2)})
    assert committed(policy, key).next_recheck == 51


def test_a_rival_left_a_few_times_behind_on_one_timing_waits_for_the_regular_recheck() -> None:
    # 3.75x behind on one timing, 5.5 ms over: what a plain loop against vectorised code
    # commonly is, not a stall; P(faster) with the noise floor says clear
    policy = Policy(PolicyConfig(recheck_interval=50))
    key = key_with({SIMD: timed(2000.0, n=3, var_us2=0.0), SCALAR: timed(7500.0, n=1)})
    assert committed(policy, key).next_recheck == 51


def test_a_recheck_of_an_arm_timed_once_is_priced_at_twice_its_smaller_bucket_time() -> None:
    # SCALAR's one timing here, 900 ms, is a stall (it took 3 ms on the smaller bucket):
    # priced at twice its floor, its re-check fits the budget at once
    key = key_with({SIMD: timed(4_000.0, n=10, var_us2=0.0), SCALAR: timed(900_000.0, n=1)})
    policy = Policy()
    state = due_for_recheck(policy, key)
    state.floors = {SCALAR: 3_000.0}
    d = policy.decide(state, key, TWO, NOW_S)
    assert (d.backend, d.reason) == (SCALAR, Reason.RECHECK)


def test_an_arm_whose_few_timings_may_all_be_outliers_is_timed_again_within_the_budget() -> None:
    # SCALAR timed once at 900 ms, no floor: priced at 4x the committed arm (16 ms), not at
    # its one reading, so the key's allowance (3 % of the 940 ms its timings took) pays
    key = key_with({SIMD: timed(4_000.0, n=10, var_us2=0.0), SCALAR: timed(900_000.0, n=1)})
    policy = Policy()
    state = due_for_recheck(policy, key)
    d = policy.decide(state, key, TWO, NOW_S)
    assert (d.backend, d.reason) == (SCALAR, Reason.RECHECK)
    # three readings of 900 ms are the arm's cost: a re-check is priced at that, and waits
    key.arms[SCALAR] = timed(900_000.0, n=3, var_us2=0.0)
    state = due_for_recheck(policy, key)
    assert policy.decide(state, key, TWO, NOW_S).reason is Reason.EXPLOIT


def test_a_recheck_waits_for_the_exploration_budget() -> None:
    # SCALAR is 20 ms over SIMD: a re-check is due, but the key has run 130 ms (3%: 3.9 ms)
    key = key_with({SIMD: timed(10_000.0, n=10, var_us2=0.0), SCALAR: timed(30_000.0, n=1)})
    policy = Policy()
    state = due_for_recheck(policy, key)
    assert policy.decide(state, key, TWO, NOW_S).reason is Reason.EXPLOIT
    key.arms[SIMD] = timed(10_000.0, n=700, var_us2=0.0)  # 7 s run: 3% pays for it ...
    d = policy.decide(state, key, TWO, NOW_S)
    assert (d.backend, d.reason) == (SCALAR, Reason.RECHECK)
    # ... unless earlier re-checks spent the allowance: it is the key's, not the turn's
    state.explored_us = 200_000.0
    assert policy.decide(state, key, TWO, NOW_S).reason is Reason.EXPLOIT


def test_timings_of_other_arms_after_committing_are_spent_from_the_allowance() -> None:
    key = key_with({SIMD: timed(100.0), SCALAR: timed(300.0)})
    policy = Policy()
    state = KeyState()
    policy.observe(state, SCALAR, 300.0)  # exploring, before any commitment: not counted
    assert state.explored_us == 0.0
    state = committed(policy, key)
    policy.observe(state, SIMD, 100.0)  # the committed arm: not exploring
    policy.observe(state, SCALAR, 300.0)  # a re-check: its timing and the look it took
    assert 300.0 < state.explored_us < 320.0


def test_a_round_of_calls_cheaper_than_a_look_is_planned_through() -> None:
    # a few microseconds a call: looking again between timings would cost more than it saves
    key = key_with({SIMD: timed(0.4, n=1), SCALAR: timed(0.5, n=1)})
    d = Policy(ROUNDS).decide(KeyState(), key, TWO, NOW_S)
    assert (d.backend, d.reason, d.plan) == (SIMD, Reason.EXPLORE, (SCALAR, SIMD, SCALAR))
    # 100 us calls: the policy looks again after each arm's second timing
    key = key_with({SIMD: timed(100.0, n=1), SCALAR: timed(120.0, n=1)})
    assert Policy(ROUNDS).decide(KeyState(), key, TWO, NOW_S).plan == (SCALAR,)


def test_a_plan_made_before_an_arm_got_faster_is_not_followed() -> None:
    store = HistoryStore(4)
    key = store.key("op", 10)
    for arm, us in ((SIMD, 54_000.0), (SIMD, 47_000.0), (SCALAR, 39_000.0)):
        store.record(key, arm, us, key.reference_size)
    policy = Policy(ROUNDS)
    state = KeyState()
    policy.step(state, key, TWO, NOW_S)
    state.plan = (Decision(SCALAR, Reason.EXPLORE), Decision(SCALAR, Reason.EXPLORE))
    for us in (6_900.0, 3_600.0):  # SIMD: two timings far under its estimate
        store.record(key, SIMD, us, key.reference_size)
    assert key.restarts == 1
    d, how = policy.next(state, key, TWO, NOW_S)
    assert how is Step.DECIDED and d.backend is SIMD


def test_exploit_is_memoised_until_another_arm_learns_something() -> None:
    key = key_with({SIMD: timed(100.0), SCALAR: timed(300.0)})
    policy = Policy()
    state = committed(policy, key)
    first = policy.decide(state, key, TWO, NOW_S)
    assert policy.next(state, key, TWO, NOW_S) == (first, Step.REPEATED)
    policy.observe(state, SCALAR, 290.0)  # another arm's timing: the next one is full
    assert state.memo is None
    assert policy.next(state, key, TWO, NOW_S)[1] is Step.DECIDED


def test_hysteresis_keeps_the_committed_arm_within_the_switch_margin() -> None:
    key = key_with({SIMD: timed(100.0, var_us2=30.0**2), SCALAR: timed(300.0)})
    policy = Policy()
    state = committed(policy, key)
    key.arms[SCALAR] = timed(97.0, var_us2=30.0**2)  # 3% faster, noisy: not clearly
    state.memo = None
    assert policy.decide(state, key, TWO, NOW_S).backend is SIMD
    key.arms[SCALAR] = timed(90.0, var_us2=30.0**2)  # 10% faster: beyond the margin
    d = policy.step(state, key, TWO, NOW_S)
    assert (d.backend, d.reason, state.incumbent, state.switches) == (
        SCALAR, Reason.EXPLOIT, SCALAR, 1)


def test_a_challenger_timed_once_is_rechecked_before_it_takes_over() -> None:
    key = key_with({SIMD: timed(100.0), SCALAR: timed(300.0)})
    policy = Policy()
    state = committed(policy, key)
    key.arms[SCALAR] = timed(50.0, n=1)
    state.memo = None
    d = policy.decide(state, key, TWO, NOW_S)
    assert (d.backend, d.reason) == (SCALAR, Reason.RECHECK)


def test_a_switch_on_a_stale_estimate_is_remeasured_first() -> None:
    key = key_with({SIMD: timed(100.0), SCALAR: timed(300.0)})
    policy = Policy()
    state = committed(policy, key)
    state.decisions = state.next_recheck - 1  # long after the epoch began
    key.arms[SCALAR] = timed(80.0)
    state.memo = None
    d = policy.step(state, key, TWO, NOW_S)
    assert (d.backend, d.reason) == (SCALAR, Reason.DRIFT)
    assert state.incumbent is None and state.prior is SIMD and state.epoch == 1


# ------------------------------------------------------------------ re-check


def test_a_recheck_is_due_at_next_recheck_and_the_interval_then_doubles() -> None:
    key = key_with({SIMD: timed(100.0, last_update=5.0), SCALAR: timed(150.0, last_update=1.0),
                    GPU: timed(120.0, last_update=2.0)})
    policy = Policy(PolicyConfig(recheck_interval=4))
    arms = (SIMD, SCALAR, GPU)
    state = committed(policy, key, arms)
    while state.decisions < state.next_recheck:
        assert policy.next(state, key, arms, NOW_S)[0].reason is Reason.EXPLOIT
    d, _how = policy.next(state, key, arms, NOW_S)
    # the plausible other arm heard from least recently
    assert (d.backend, d.reason) == (SCALAR, Reason.RECHECK)
    assert (state.rechecks, state.recheck_interval) == (1, 8)
    assert policy.remeasures(key, d)  # its timing replaces its (old) estimate


def test_a_recheck_turn_with_no_arm_to_look_at_passes_and_the_fourth_looks_at_every_arm() -> None:
    # SCALAR's three timings are 45x SIMD's: not plausible, so the regular turns pass it
    # over. They still count: the memo holds between turns (a turn left due made every later
    # decision a full one) and the fourth turn looks at every arm.
    key = key_with({SIMD: timed(0.6, n=50, var_us2=0.01), SCALAR: timed(27.0, n=3)})
    policy = Policy(PolicyConfig(recheck_interval=4))
    state = committed(policy, key)
    steps = []
    while True:
        d, how = policy.next(state, key, TWO, NOW_S)
        steps.append(how)
        if d.reason is not Reason.EXPLOIT:
            break
        assert len(steps) < 500, "the re-check never came"
    assert (d.backend, d.reason, state.rechecks) == (SCALAR, Reason.RECHECK, 4)
    assert steps.count(Step.DECIDED) <= len(steps) // 4, steps


# ------------------------------------------------------------------ drift


def test_sustained_slow_timings_raise_the_drift_alarm_on_the_sixth() -> None:
    # each timing over 2x the estimate adds 2 - 1 - 0.2 (ratio capped at 2, slack 0.2): the
    # statistic passes 4 on the sixth
    key = key_with({SIMD: timed(100.0), SCALAR: timed(300.0)})
    policy = Policy()
    state = committed(policy, key)
    for _ in range(5):
        assert policy.decide(state, key, TWO, NOW_S).reason is Reason.EXPLOIT
        policy.observe(state, SIMD, 500.0)
    assert state.drift_score == pytest.approx(4.0)
    policy.observe(state, SIMD, 500.0)
    d = policy.step(state, key, TWO, NOW_S)
    assert (d.backend, d.reason) == (SCALAR, Reason.DRIFT)
    # a new epoch: the arm that slowed is re-measured in full, the others once
    assert (state.incumbent, state.prior, state.epoch, state.drift_score) == (None, SIMD, 1, 0.0)


def test_a_slow_mode_the_arm_has_always_had_raises_no_alarm() -> None:
    # 60 us, or 250 us one call in four: its estimate (107.5 us) and its spread are the
    # baseline and the slack, and the capped ratio of a slow call (2) adds less than the
    # three fast calls take away
    store = HistoryStore(4, wall_clock=iter(range(1, 10**6)).__next__)
    key = store.key("op", 10)
    for us in (60.0, 60.0, 250.0, 60.0) * 4:
        store.record(key, SIMD, us, key.reference_size)
    store.record(key, SCALAR, 150.0, key.reference_size)
    policy = Policy()
    state = committed(policy, key)
    assert state.incumbent is SIMD
    for us in (60.0, 60.0, 250.0, 60.0) * 250:
        learned = store.record(key, SIMD, us, key.reference_size)
        policy.observe(state, SIMD, learned, key.arms[SIMD])
        assert state.drift_score <= policy.config.drift_threshold


def test_a_drift_alarm_times_a_far_slower_arm_only_within_the_exploration_budget() -> None:
    # large calls: SIMD 4 ms, SCALAR 40 ms (132 ms spent: an allowance of 3%, 4 ms)
    key = key_with({SIMD: timed(4_000.0), SCALAR: timed(40_000.0)})
    policy = Policy()
    state = committed(policy, key)
    for _ in range(6):
        policy.observe(state, SIMD, 20_000.0)  # the machine's load: SIMD 5x slower
    d = policy.step(state, key, TWO, NOW_S)
    # SCALAR's 36 ms over SIMD's estimate is over the budget: the slowed arm is re-measured
    assert (d.backend, d.reason) == (SIMD, Reason.DRIFT)
    assert state.previous_us == {SIMD: 4_000.0, SCALAR: 40_000.0} and state.prior is SIMD
    key.start_epoch()  # (the caller's part of a drift decision)
    key.arms[SIMD] = timed(20_000.0, n=3)
    # re-measured at 20 ms: SCALAR's 40 ms then is 20 ms over it, still over the budget ...
    assert policy.decide(state, key, TWO, NOW_S).backend is SIMD
    # ... until the key has run long enough to pay for a trial (or SIMD slows further)
    key.arms[SIMD] = timed(20_000.0, n=40)
    d = policy.decide(state, key, TWO, NOW_S)
    assert (d.backend, d.reason) == (SCALAR, Reason.EXPLORE)


def test_isolated_spikes_do_not_raise_the_drift_alarm() -> None:
    key = key_with({SIMD: timed(100.0), SCALAR: timed(300.0)})
    policy = Policy()
    state = committed(policy, key)
    for _ in range(10):
        policy.observe(state, SIMD, 100_000.0)
        for _ in range(20):
            policy.observe(state, SIMD, 100.0)
        assert policy.decide(state, key, TWO, NOW_S).reason is Reason.EXPLOIT


# ------------------------------------------------------------------ fallback and failures


def test_every_arm_quarantined_runs_the_one_released_soonest() -> None:
    key = key_with({SIMD: timed(100.0, failures=1, quarantined_until_s=NOW_S + 5),
                    SCALAR: timed(300.0, failures=1, quarantined_until_s=NOW_S + 2)})
    d = Policy().decide(KeyState(), key, TWO, NOW_S)
    assert (d.backend, d.reason) == (SCALAR, Reason.FALLBACK)


def test_a_quarantined_arm_is_passed_over_until_released() -> None:
    key = key_with({SIMD: timed(100.0, failures=1, quarantined_until_s=NOW_S + 5),
                    SCALAR: timed(300.0)})
    policy = Policy()
    assert policy.decide(KeyState(), key, TWO, NOW_S).backend is SCALAR
    # released, its last attempt failed: tried again (explore), not committed to
    d = policy.decide(KeyState(), key, TWO, NOW_S + 6)
    assert (d.backend, d.reason) == (SIMD, Reason.EXPLORE)


def test_fallback_takes_the_fastest_arm_not_yet_tried() -> None:
    key = key_with({GPU: timed(50.0), SIMD: timed(100.0), SCALAR: timed(80.0)})
    policy = Policy()
    assert policy.fallback(key, (GPU, SIMD, SCALAR), {GPU}) is SCALAR
    assert policy.fallback(key, (GPU, SIMD, SCALAR), {GPU, SCALAR, SIMD}) is None


def test_a_failure_of_the_committed_arm_ends_the_commitment() -> None:
    key = key_with({SIMD: timed(100.0), SCALAR: timed(300.0)})
    policy = Policy()
    state = committed(policy, key)
    policy.observe_failure(state, SIMD)
    assert (state.incumbent, state.memo, state.drift_baseline_us) == (None, None, 0.0)


def test_merged_estimates_end_the_commitment() -> None:
    key = key_with({SIMD: timed(100.0), SCALAR: timed(300.0)})
    policy = Policy()
    state = committed(policy, key)
    key.merges += 1
    key.arms[SCALAR] = timed(50.0, n=40)  # what another process measured
    d = policy.decide(state, key, TWO, NOW_S)
    assert state.incumbent is SIMD  # (decide changes nothing)
    assert (d.backend, d.reason) == (SCALAR, Reason.EXPLOIT)
    policy.step(state, key, TWO, NOW_S)
    assert (state.incumbent, state.switches, state.merges) == (SCALAR, 0, 1)


# ------------------------------------------------------------------ purity and sequences


def test_decide_changes_neither_the_state_nor_the_statistics() -> None:
    key = key_with({SIMD: timed(100.0), SCALAR: timed(300.0)})
    policy = Policy()
    for state in (KeyState(), committed(policy, key), KeyState(prior=SCALAR)):
        before, arms = fields(state), copy.deepcopy(key.arms)
        first = policy.decide(state, key, TWO, NOW_S)
        assert all(policy.decide(state, key, TWO, NOW_S) == first for _ in range(10))
        assert fields(state) == before and key.arms == arms


def run(policy: Policy, latency_us: Mapping[Backend, float], calls: int,
        state: KeyState | None = None, store: HistoryStore | None = None,
        candidates: Sequence[Backend] = TWO) -> tuple[list[Decision], KeyState, HistoryStore]:
    """The policy's loop over one key, as the runtime runs it (every call timed): next
    decision, the arm's set latency learned, the policy told."""
    store = store or HistoryStore(16, wall_clock=iter(range(1, 10**9)).__next__)
    key = store.key("op", 10)
    state = state or KeyState()
    out = []
    for i in range(calls):
        decision, how = policy.next(state, key, candidates, NOW_S + i, store)
        if how is Step.DECIDED and decision.reason is Reason.DRIFT:
            key.start_epoch()
        if policy.remeasures(key, decision):
            key.arms[decision.backend].start_epoch()
        learned = store.record(key, decision.backend, latency_us[decision.backend], 0)
        policy.observe(state, decision.backend, learned)
        out.append(decision)
    return out, state, store


def test_the_state_machine_converges_then_follows_a_slowdown_within_20_calls() -> None:
    policy = Policy()
    latency = {SIMD: 100.0, SCALAR: 150.0}
    decisions, state, store = run(policy, latency, 200)
    # one timing each: 1.5x apart is a clear answer
    assert [(d.backend, d.reason) for d in decisions[:3]] == [
        (SIMD, Reason.HEURISTIC), (SCALAR, Reason.EXPLORE), (SIMD, Reason.EXPLOIT)]
    assert {d.backend for d in decisions[2:] if d.reason is Reason.EXPLOIT} == {SIMD}
    latency[SIMD] = 500.0  # the committed arm slows 5x
    after, state, _ = run(policy, latency, 100, state, store)
    exploits = [i for i, d in enumerate(after) if (d.backend, d.reason) == (SCALAR,
                                                                             Reason.EXPLOIT)]
    assert exploits and exploits[0] <= 20
    assert state.incumbent is SCALAR


@pytest.mark.parametrize("margin", [0.0, 0.05])
def test_config_knobs_are_the_policys_own(margin: float) -> None:
    policy = Policy(PolicyConfig(switch_margin=margin))
    key = key_with({SIMD: timed(100.0, var_us2=30.0**2), SCALAR: timed(300.0)})
    state = committed(policy, key)
    key.arms[SCALAR] = timed(97.0, var_us2=30.0**2)
    state.memo = None
    assert policy.decide(state, key, TWO, NOW_S).backend is (SCALAR if margin == 0 else SIMD)


def test_a_prior_arm_without_statistics_on_the_key_is_planned_not_looked_up() -> None:
    # (select() keys of unregistered names have no ArmStats until a timing is reported)
    state = KeyState(prior=GPU)
    d = Policy().decide(state, key_with({}), (GPU, SIMD, SCALAR), NOW_S)
    assert (d.backend, d.reason) == (GPU, Reason.HEURISTIC)


def test_select_on_an_unregistered_name_beside_measured_buckets_does_not_fail() -> None:
    # (select() keys of unregistered names have no ArmStats: the floors are looked up for
    # arms the key has never seen)
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False), builtin_ops=False,
                            devices=DeviceProbe(gpu=True))
    for size in (1 << 10, 1 << 12):  # buckets 11 and 13: GPU 10x faster
        for _ in range(3):
            for arm, us in ((GPU, 10.0), (SIMD, 100.0), (SCALAR, 100.0)):
                rt.record_performance("custom", size, arm, us)
    # bucket 12, new: a cold start, its first call on the arm both neighbours measured
    # fastest (the cold-start order, 2,048 elements, would put SIMD first)
    assert rt.decide("custom", 1 << 11).reason is Reason.HEURISTIC
    assert rt.select("custom", 1 << 11) is GPU


def _run_three(neighbours: HistoryStore | None, key: KeyHistory,
               here: Mapping[object, float], calls: int) -> tuple[list[object], KeyState]:
    """``calls`` full evaluations of ``key`` (SIMD, its numpy variant, SCALAR), each timing
    what it chose at ``here``; the choices made, in order, and the state."""
    numpy = ar.Variant(SIMD, "numpy")
    policy, state, ran = Policy(), KeyState(), []
    recorder = neighbours or HistoryStore(4)
    for _ in range(calls):
        d = policy.step(state, key, (SIMD, numpy, SCALAR), NOW_S, neighbours=neighbours)
        ran.append(d.choice)
        recorder.record(key, d.choice, here[d.choice], reference_size(key.bucket))
        policy.observe(state, d.choice, here[d.choice], key.arms[d.choice])
    return ran, state


def test_an_arm_far_behind_at_the_neighbouring_sizes_waits_for_the_allowance() -> None:
    """A variant 2.5x slower than the fastest on the smaller bucket (not so slow that its
    floor rules it out: 25 ms there, 20 ms the best here) is not tried on a key of 20 ms calls
    until 3 % of the key's time affords what its trial is expected to cost over the best (2.5x
    20 ms: 30 ms more), about 50 calls in; measured close there, it is tried at once."""
    numpy = ar.Variant(SIMD, "numpy")
    # (SCALAR, 1.5x behind around, is tried at once; 3x behind here, it is not re-checked
    # soon, which would spend the allowance first)
    here = {SIMD: 20_000.0, numpy: 40_000.0, SCALAR: 60_000.0}
    store, key = _neighbours({SIMD: 10_000.0, numpy: 25_000.0, SCALAR: 15_000.0}, None)
    ran, state = _run_three(store, key, here, 70)
    assert ran[:2] == [SIMD, SCALAR] and state.incumbent is SIMD
    assert state.behind == {SIMD: 1.0, numpy: 2.5, SCALAR: 1.5}
    assert 40 <= ran.index(numpy) <= 60, ran.index(numpy)
    store, key = _neighbours({SIMD: 10_000.0, numpy: 12_000.0, SCALAR: 15_000.0}, None)
    ran, _state = _run_three(store, key, here, 5)
    assert numpy in ran[:3]


def test_an_arm_behind_on_one_side_only_is_tried_at_once() -> None:
    # a crossover: 3x behind below, the fastest above: the lesser ratio, 1.0, decides
    numpy = ar.Variant(SIMD, "numpy")
    store, key = _neighbours({SIMD: 100.0, numpy: 300.0}, {SIMD: 600.0, numpy: 200.0})
    ran, state = _run_three(store, key, {SIMD: 400.0, numpy: 450.0, SCALAR: 900.0}, 3)
    assert numpy in ran and state.behind[numpy] == 1.0


def test_a_variant_measured_nowhere_waits_on_costly_calls_and_not_on_cheap_ones() -> None:
    """Nothing measured around: an arm's variant is an alternative to its primary kernel,
    priced at 3x the best here — tried at once where that fits the free allowance (calls of
    100 us), later on a key of 20 ms calls; another arm (SCALAR) is tried at once either way."""
    numpy = ar.Variant(SIMD, "numpy")
    costly = {SIMD: 20_000.0, numpy: 30_000.0, SCALAR: 60_000.0}
    ran, _state = _run_three(None, KeyHistory("op", 10), costly, 30)
    assert ran[:2] == [SIMD, SCALAR] and numpy not in ran[:20]
    cheap = {b: us / 200 for b, us in costly.items()}
    ran, _state = _run_three(None, KeyHistory("op", 10), cheap, 3)
    assert set(ran) == {SIMD, numpy, SCALAR}


@pytest.mark.parametrize(("knob", "bad"), [
    ("min_samples_per_arm", 0), ("min_samples_per_arm", 1.5), ("min_samples_per_arm", True),
    ("min_samples_per_arm", 1001), ("recheck_interval", 0), ("switch_margin", 0.95),
    ("switch_margin", -0.1), ("switch_margin", math.nan), ("switch_margin", "0.1"),
    ("explore_share", 1.5), ("clear_confidence", -0.5), ("prune_ratio", 0.5),
    ("noise_floor", -1.0), ("drift_threshold", -1.0)])
def test_policy_config_refuses_a_knob_out_of_range_naming_it(knob: str, bad: object) -> None:
    with pytest.raises(ar.ConfigError, match=rf"^policy knob {knob} must be ") as info:
        PolicyConfig(**{knob: bad})
    assert info.value.field == knob


def test_policy_config_takes_the_ends_of_each_range() -> None:
    edges = PolicyConfig(min_samples_per_arm=1, switch_margin=0.0, explore_share=1.0,
                         clear_confidence=0.0, prune_ratio=1.0, drift_threshold=math.inf)
    assert edges.drift_threshold == math.inf  # (drift detection off)


def test_an_arm_never_timed_on_a_microsecond_key_is_owed_even_after_its_rechecks() -> None:
    """On a key of ~2 us calls each re-check of the other arm costs more in evaluation than
    the call, so what exploring took outgrows the key's share of its time: the arm never
    timed there is owed its first trial by the key's calls all the same, once they have
    taken 1/explore_share times it."""
    variant = ar.Variant("simd", "numba@1")
    arms = (SIMD, variant, SCALAR)
    key = key_with({SIMD: timed(2.0, n=40), SCALAR: timed(6.0, n=8)})
    # (re-checks of SCALAR, each with its evaluation, used up the free allowance of 1 ms)
    rechecked = dict(explored_us=1500.0)
    early = KeyState(calls_us=150.0, **rechecked)  # 0.03 x 150 us: under a 6 us trial
    assert Policy().decide(early, key, arms, NOW_S).choice is SIMD
    later = KeyState(calls_us=400.0, **rechecked)  # 0.03 x 400 us = 12 us: pays for it
    d = Policy().decide(later, key, arms, NOW_S)
    assert (d.choice, d.reason) == (variant, Reason.EXPLORE)


def test_a_committed_key_owing_an_arm_its_trial_is_evaluated_in_full_every_few_decisions(
) -> None:
    """The memo of a commitment spares 15 full evaluations in 16; a key with a candidate
    never timed keeps its memo for 2 only, so the trial it owes (once the key's calls afford
    it) comes within a few timed calls, not after 16 — more than a short key ever makes."""
    variant = ar.Variant("simd", "numba@1")
    arms = (SIMD, variant, SCALAR)
    key = key_with({SIMD: timed(1000.0, n=40), SCALAR: timed(5000.0, n=1)})
    policy = Policy()
    state = KeyState(explored_us=5000.0)
    assert policy.next(state, key, arms, NOW_S)[0].choice is SIMD  # (committed: owes later)
    state.next_recheck, state.memo = 1000, None  # (re-checks far off: only the memo stands)
    assert policy.next(state, key, arms, NOW_S)[0].choice is SIMD
    state.calls_us = 1_000_000.0  # (the key's calls since: they pay for the variant's trial)
    explored = [policy.next(state, key, arms, NOW_S)[0] for _ in range(3)]
    assert (explored[-1].choice, explored[-1].reason) == (variant, Reason.EXPLORE)
