"""Policy behaviour through the runtime, with fake arms and an injected clock and timer.

(The policy on its own, with fake statistics and a fake clock: test_policy.py.)"""

from __future__ import annotations

import itertools
import math

import pytest

import adaptive_runtime as ar
from adaptive_runtime.keys import reference_size
from adaptive_runtime.operations import DeviceProbe

Backend = ar.Backend
Reason = ar.Reason

# Slow arms: timed every call or every other (a timed call's assumed cost, 4 us, is 1-2% of
# theirs), so drift is seen within a few calls.
SLOW_ARMS = {Backend.GPU: 300.0, Backend.SIMD: 200.0, Backend.SCALAR: 2000.0}


def _converge(h, calls: int = 200) -> None:
    h.call_tracked(calls)
    d = h.rt.decide(h.op, h.size)
    assert d.reason in (Reason.EXPLOIT, Reason.RECHECK)


def test_converges_to_the_fastest_arm_with_fake_gpu_arm(make_runtime) -> None:
    h = make_runtime({Backend.GPU: 30.0, Backend.SIMD: 90.0, Backend.SCALAR: 700.0})
    runs = h.call_tracked(400)
    assert runs[0][1] is Reason.HEURISTIC
    assert {b for b, r in runs if r is Reason.EXPLOIT} == {Backend.GPU}
    assert [b for b, _ in runs[-100:]].count(Backend.GPU) >= 95
    assert h.rt.get_best_backend(h.op, h.size) is Backend.GPU
    # each arm got timed before commitment; the slow one no more than needed
    assert h.arms.calls[Backend.SCALAR] <= 5


def test_converges_per_size_bucket(make_runtime) -> None:
    # a different winner per size: buckets learn separately
    h = make_runtime({Backend.SIMD: 100.0, Backend.SCALAR: 100.0})
    small, large = 64, 1 << 20

    def latency(backend):
        return lambda: (10.0 if backend is Backend.SCALAR else 50.0) if h.last_size == small \
            else (500.0 if backend is Backend.SCALAR else 120.0)

    h.last_size = small
    h.arms.latency_us = {b: latency(b) for b in (Backend.SIMD, Backend.SCALAR)}
    for _ in range(100):
        h.last_size = small
        h.call(small)
        h.last_size = large
        h.call(large)
    assert h.rt.get_best_backend(h.op, small) is Backend.SCALAR
    assert h.rt.get_best_backend(h.op, large) is Backend.SIMD
    assert h.rt.decide(h.op, small).backend is Backend.SCALAR
    assert h.rt.decide(h.op, large).backend is Backend.SIMD


def test_decide_reports_reason_confidence_and_estimates_with_fake_gpu_arm(make_runtime) -> None:
    h = make_runtime(dict(SLOW_ARMS))
    cold = h.rt.decide(h.op, h.size)
    assert cold.reason is Reason.HEURISTIC
    assert cold.confidence == 0.0
    assert dict(cold.estimates_us) == {} and not cold.has_history
    _converge(h)
    d = h.rt.decide(h.op, h.size)
    assert d.backend is Backend.SIMD and d.reason is Reason.EXPLOIT
    assert 0.5 < d.confidence <= 1.0
    assert d.has_history
    assert d.estimates_us[Backend.SIMD] == pytest.approx(200.0)
    assert d.estimates_us[Backend.GPU] == pytest.approx(300.0)
    assert set(d.estimates_us) == set(Backend)


def test_decide_estimates_and_samples_match_current_history_with_fake_gpu_arm(make_runtime) -> None:
    # The explained decision (what spans carry) must describe the history as it is now, not
    # as it was at the last full evaluation.
    h = make_runtime(dict(SLOW_ARMS))
    _converge(h, 300)
    h.arms.latency_us[Backend.SIMD] = 260.0  # slower, not enough to count as drift
    for calls in range(1, 12):
        h.call_tracked(1)
        d = h.rt.decide(h.op, h.size)
        rows = {r.backend: r for r in h.rt.history_snapshot()}
        assert d.samples == sum(r.samples for r in rows.values()), calls
        for backend, estimate in d.estimates_us.items():
            assert estimate == pytest.approx(rows[backend].mean_us), (calls, backend)


def test_decide_has_no_side_effects_with_fake_gpu_arm(make_runtime) -> None:
    h = make_runtime(dict(SLOW_ARMS))
    for calls in (0, 2, 5, 200):  # cold, exploring, just committed, converged
        h.call_tracked(calls)
        snapshot = h.rt.history_snapshot()
        counts = h.rt.selection_counts()
        first = h.rt.decide(h.op, h.size)
        for _ in range(500):
            assert h.rt.decide(h.op, h.size) == first
        assert h.rt.history_snapshot() == snapshot or _nan_equal(h.rt.history_snapshot(),
                                                                 snapshot)
        assert h.rt.selection_counts() == counts
        # what decide() said is what the next call does
        (ran, reason) = h.call_tracked(1)[0]
        assert (ran, reason) == (first.backend, first.reason)


def test_decide_for_unknown_name_creates_no_history(clock, timer) -> None:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(), builtin_ops=False,
                            devices=DeviceProbe(gpu=True), clock=clock, timer=timer)
    rt.decide("never_seen", 123)
    assert rt.history_snapshot() == []
    assert rt.selection_counts() == {}


def _nan_equal(xs, ys) -> bool:
    def norm(r):
        return (r.operation, r.size_bucket, r.backend, r.samples,
                None if math.isnan(r.mean_us) else r.mean_us, r.failures, r.last_update)
    return [norm(x) for x in xs] == [norm(y) for y in ys]


def test_drift_committed_arm_slows_5x_then_new_best_within_20_calls_with_fake_gpu_arm(
        make_runtime) -> None:
    h = make_runtime(dict(SLOW_ARMS))
    _converge(h, 300)
    assert h.rt.decide(h.op, h.size).backend is Backend.SIMD
    h.arms.latency_us[Backend.SIMD] = 1000.0  # thermal throttling: 5x slower
    runs = h.call_tracked(20)
    assert Reason.DRIFT in [r for _, r in runs]
    exploit_gpu = [i for i, (b, r) in enumerate(runs)
                   if (b, r) == (Backend.GPU, Reason.EXPLOIT)]
    assert exploit_gpu, runs
    # ...and it stays there
    later = h.call_tracked(200)
    assert {b for b, r in later if r is Reason.EXPLOIT} == {Backend.GPU}


def test_sizes_across_a_bucket_do_not_blur_a_close_choice(make_runtime, rng) -> None:
    """Calls of one bucket range over 2x in size, and a large call's time with them: learned
    at the bucket's reference size, a 15% gap between arms is found whatever sizes each arm
    happened to be timed on."""
    size = [0]
    per_element_us = {Backend.SIMD: 0.0100, Backend.SCALAR: 0.0115}
    h = make_runtime({b: (lambda b=b: 10.0 + per_element_us[b] * size[0])
                      for b in per_element_us}, gpu=False)
    low, high = 1 << 20, (1 << 21) - 1  # bucket 21: calls of 10-24 ms
    runs = []
    for _ in range(400):
        size[0] = rng.randint(low, high)
        runs += h.call_tracked(size=size[0])
    assert [b for b, r in runs if r is Reason.EXPLOIT][-50:] == [Backend.SIMD] * 50
    estimates = h.rt.decide(h.op, low).estimates_us
    ref = reference_size(21)
    for backend, rate in per_element_us.items():
        assert estimates[backend] == pytest.approx(10.0 + rate * ref, rel=1e-6)


def test_isolated_spikes_on_committed_arm_do_not_trigger_drift_with_fake_gpu_arm(
        make_runtime) -> None:
    h = make_runtime(dict(SLOW_ARMS))
    _converge(h, 300)
    spikes = iter([20_000.0] + [200.0] * 49)
    h.arms.latency_us[Backend.SIMD] = lambda: next(spikes, 200.0)
    for _ in range(10):  # ten isolated 100x spikes, 50 calls apart
        spikes = iter([20_000.0] + [200.0] * 49)
        runs = h.call_tracked(50)
        assert Reason.DRIFT not in [r for _, r in runs]
    assert h.rt.decide(h.op, h.size).backend is Backend.SIMD


def test_near_tie_switches_at_most_a_few_times_over_2000_calls(make_runtime, rng) -> None:
    # Two arms 2% apart with 3% noise: hysteresis must keep the choice from flip-flopping.
    h = make_runtime({Backend.SIMD: lambda: 200.0 * rng.gauss(1.0, 0.03),
                      Backend.SCALAR: lambda: 204.0 * rng.gauss(1.0, 0.03)})
    runs = h.call_tracked(2000)
    exploited = [b for b, r in runs if r is Reason.EXPLOIT]
    switches = sum(1 for x, y in itertools.pairwise(exploited) if x is not y)
    assert switches <= 3, switches
    assert len(exploited) >= 1800


def test_rechecks_happen_but_rarely_with_fake_gpu_arm(make_runtime) -> None:
    h = make_runtime(dict(SLOW_ARMS))
    h.call_tracked(3000)
    counts = h.rt.selection_counts()
    rechecks = sum(n for k, n in counts.items() if k.reason is Reason.RECHECK)
    total = sum(counts.values())
    assert total == 3000
    assert rechecks >= 1
    assert rechecks < 0.05 * total


def test_rechecks_still_happen_for_a_cheap_converged_key(make_runtime) -> None:
    # cheap calls are timed 1-in-N; the other arms are still looked at now and then
    h = make_runtime({Backend.SIMD: 2.0, Backend.SCALAR: 5.0})
    for _ in range(60_000):
        h.call()
    counts = h.rt.selection_counts()
    rechecks = sum(n for k, n in counts.items() if k.reason is Reason.RECHECK)
    assert sum(counts.values()) == 60_000
    assert 1 <= rechecks < 0.05 * 60_000


def test_hysteresis_keeps_incumbent_within_margin_and_switches_beyond(make_runtime,
                                                                    rng) -> None:
    # switch_margin 5%: a challenger must be more than 5% faster to take over
    latency = {Backend.SIMD: 200.0, Backend.SCALAR: 206.0}
    h = make_runtime({b: (lambda b=b: latency[b] * rng.gauss(1.0, 0.03)) for b in latency},
                     switch_margin=0.05)
    _converge(h, 100)
    assert h.rt.decide(h.op, h.size).backend is Backend.SIMD
    # the incumbent slows a little: the challenger is now ~2.9% faster (inside the margin)
    latency[Backend.SIMD] = 212.0
    runs = h.call_tracked(1500)
    assert {b for b, r in runs if r is Reason.EXPLOIT} == {Backend.SIMD}
    assert any(r is Reason.RECHECK for _, r in runs)  # it did look at the challenger
    # now the challenger is ~14% faster: beyond the margin, it takes over
    latency[Backend.SIMD] = 240.0
    runs = h.call_tracked(1500)
    exploited = [b for b, r in runs if r is Reason.EXPLOIT]
    assert exploited[-1] is Backend.SCALAR
    assert exploited[-500:].count(Backend.SCALAR) == 500


def test_a_burst_of_load_does_not_hand_a_near_tie_to_a_stale_estimate(make_runtime) -> None:
    """SIMD (200 us) and SCALAR (205 us) are a near-tie. A burst of load on the machine
    slows every call by 45% for a while — too little, too briefly for a drift alarm — and
    SIMD's estimate, fed by its timings, rises past SCALAR's, which dates from exploration.
    Both are measured afresh before a switch: under the same load SIMD is still the faster,
    and keeps the key."""
    h = make_runtime({Backend.SIMD: 200.0, Backend.SCALAR: 205.0}, gpu=False)
    _converge(h, 400)
    assert h.rt.decide(h.op, h.size).backend is Backend.SIMD
    h.arms.latency_us = {Backend.SIMD: 290.0, Backend.SCALAR: 297.0}
    burst = h.call_tracked(60)
    h.arms.latency_us = {Backend.SIMD: 200.0, Backend.SCALAR: 205.0}
    after = h.call_tracked(600)
    exploits = [b for b, r in burst + after if r is Reason.EXPLOIT]
    assert exploits.count(Backend.SCALAR) == 0
    assert Reason.DRIFT in [r for _b, r in burst]  # (the re-measurement before a switch)


def test_an_arm_explored_under_load_is_measured_afresh_at_its_recheck(make_runtime) -> None:
    """GPU (100 us) was explored while the machine was busy — its three timings came out at
    400 us — so SIMD (150 us) was committed to. The first re-check of GPU replaces that
    estimate with fresh timings, and GPU takes over: the odd re-check timing folded into the
    old estimate would have taken a dozen re-checks, at doubling intervals."""
    gpu = _sequence(400.0, 400.0, 400.0, then=100.0)
    h = make_runtime({Backend.GPU: gpu, Backend.SIMD: 150.0, Backend.SCALAR: 900.0},
                     max_measure_period=1, min_samples_per_arm=3)
    runs = h.call_tracked(400)
    exploits = [b for b, r in runs if r is Reason.EXPLOIT]
    assert exploits[0] is Backend.SIMD  # the exploration was fooled
    assert exploits[-100:] == [Backend.GPU] * 100
    first_gpu = exploits.index(Backend.GPU)
    assert first_gpu < 120  # after the first re-checks (64 decisions), not the tenth


def test_zero_switch_margin_takes_any_faster_arm(make_runtime) -> None:
    h = make_runtime({Backend.SIMD: 200.0, Backend.SCALAR: 206.0}, switch_margin=0.0)
    _converge(h, 100)
    h.arms.latency_us[Backend.SIMD] = 212.0
    runs = h.call_tracked(1500)
    assert [b for b, r in runs if r is Reason.EXPLOIT][-1] is Backend.SCALAR


# --------------------------------------------------------------------------- floors and pruning


def test_an_arm_far_behind_on_its_first_timing_is_timed_once(make_runtime) -> None:
    h = make_runtime({Backend.SIMD: 20.0, Backend.SCALAR: 200.0}, gpu=False)
    runs = h.call_tracked(40, size=1 << 11)  # SCALAR 10x slower: over 2 x prune_ratio
    assert h.arms.calls[Backend.SCALAR] == 1  # instead of min_samples_per_arm (3)
    assert runs[0] == (Backend.SIMD, Reason.HEURISTIC)
    assert h.rt.decide(h.op, 1 << 11).reason is Reason.EXPLOIT


def test_an_arm_far_slower_on_smaller_sizes_is_not_tried_on_larger_ones(make_runtime) -> None:
    """A kernel does not get faster on more elements: what an arm took on the nearest smaller
    bucket is a floor here, and an arm whose floor is over 1.5x the best measured here cannot
    win (its floor shows in the decision)."""
    h = make_runtime({Backend.SIMD: 20.0, Backend.SCALAR: 200.0}, gpu=False)
    h.call_tracked(40, size=1 << 10)  # bucket 11: SIMD wins by 10x
    before = h.arms.calls[Backend.SCALAR]
    runs = h.call_tracked(40, size=1 << 11)  # bucket 12
    assert h.arms.calls[Backend.SCALAR] == before  # never tried here
    assert runs[-1] == (Backend.SIMD, Reason.EXPLOIT)
    smaller = h.rt.decide(h.op, 1 << 10).estimates_us[Backend.SCALAR]
    assert h.rt.decide(h.op, 1 << 11).floors_us[Backend.SCALAR] == pytest.approx(smaller)


def test_a_floor_is_applied_before_a_round_is_planned(make_runtime) -> None:
    """SCALAR's time on the smaller bucket (close to SIMD's there) is a floor over 1.5x what
    SIMD takes here. SIMD's first call here is not learned from (it compiled): with nothing
    measured, the next round is not planned ahead past the floors — SIMD is timed alone, and
    then SCALAR is ruled out."""
    h = make_runtime({Backend.SIMD: 190.0, Backend.SCALAR: 200.0}, op="unused", arms=(),
                     gpu=False)
    compiled = [0]

    def simd(n: int) -> Backend:
        if n == 1 << 11 and not compiled[0]:
            compiled[0] = 1  # (a kernel compiled for this size: the timing is the compiler)
        return h.arms.kernel(Backend.SIMD)(n)[0]

    op = h.rt.register("floored", size=lambda n: n, kind="vector")
    op.add_implementation(Backend.SIMD, simd, compile_count=lambda: compiled[0])
    op.add_implementation(Backend.SCALAR, h.arms.kernel(Backend.SCALAR))
    for _ in range(40):
        h.rt.run("floored", 1 << 10)  # bucket 11: close, no clear winner
    h.arms.latency_us = {Backend.SIMD: 60.0, Backend.SCALAR: 200.0}
    before = h.arms.calls[Backend.SCALAR]
    for _ in range(40):
        h.rt.run("floored", 1 << 11)  # bucket 12
    assert h.arms.calls[Backend.SCALAR] == before


def test_an_arm_close_on_smaller_sizes_is_still_tried_on_larger_ones(make_runtime) -> None:
    h = make_runtime({Backend.SIMD: 100.0, Backend.SCALAR: 110.0}, gpu=False)
    h.call_tracked(40, size=1 << 10)  # bucket 11: SIMD ahead by 10%
    h.arms.latency_us = {Backend.SIMD: 100.0, Backend.SCALAR: 60.0}  # bucket 12: SCALAR wins
    h.call_tracked(40, size=1 << 11)
    assert h.rt.decide(h.op, 1 << 11).backend is Backend.SCALAR


# ------------------------------------------------------------------ confidence and re-checks


def _sequence(*timings: float, then: float):
    """Latencies: ``timings`` in order, then ``then`` for ever."""
    it = iter(timings)
    return lambda: next(it, then)


def _until_exploit(runs) -> list:
    return list(itertools.takewhile(lambda run: run[1] is not Reason.EXPLOIT, runs))


@pytest.mark.parametrize("min_samples", [1, 3])
def test_clear_winner_commits_after_min_samples_each(make_runtime, min_samples: int) -> None:
    # (every call timed, so decisions and calls are counted alike)
    h = make_runtime({Backend.SIMD: 200.0, Backend.SCALAR: 300.0}, gpu=False,
                     max_measure_period=1, min_samples_per_arm=min_samples)
    runs = h.call_tracked(200)
    # min_samples timings of each arm, no more (one each by default: 1.5x is clear)
    assert len(_until_exploit(runs)) == 2 * min_samples
    # a clear choice is looked at again only after recheck_interval (64) decisions
    first_recheck = next(i for i, (_b, r) in enumerate(runs) if r is Reason.RECHECK)
    assert first_recheck >= 2 * min_samples + 64


def test_arms_not_told_apart_are_timed_again_before_committing(make_runtime) -> None:
    # SIMD is the faster arm (200 vs 240) but its first timings are noisy (one of them 400):
    # after 3 timings each the policy cannot tell them apart with 95 % confidence
    h = make_runtime({Backend.SIMD: _sequence(200, 400, 180, then=200.0),
                      Backend.SCALAR: _sequence(240, 245, 235, then=240.0)}, gpu=False,
                     min_samples_per_arm=3)
    runs = h.call_tracked(200)
    exploring = _until_exploit(runs)
    assert 6 < len(exploring) <= 12  # more than min_samples each, at most twice that
    assert {b for b, r in runs[len(exploring):] if r is Reason.EXPLOIT} == {Backend.SIMD}


def test_an_unsure_commitment_is_rechecked_soon(make_runtime) -> None:
    # the noisy arm stays noisy: even 6 timings each leave the choice unsure, so it is
    # committed to, and the runner-up timed again a few decisions later
    noise = itertools.cycle([150.0, 260.0, 200.0])
    # (every call timed, so decisions and calls are counted alike)
    h = make_runtime({Backend.SIMD: lambda: next(noise),
                      Backend.SCALAR: _sequence(230, 220, 240, 225, 235, 230, then=230.0)},
                     gpu=False, max_measure_period=1, min_samples_per_arm=3)
    runs = h.call_tracked(100)
    committed = len(_until_exploit(runs))
    first_recheck = next(i for i, (_b, r) in enumerate(runs) if r is Reason.RECHECK)
    assert first_recheck - committed <= 4  # min_samples decisions, not recheck_interval


def test_after_drift_the_slower_arms_are_timed_once_not_min_samples_times(make_runtime) -> None:
    h = make_runtime({Backend.SIMD: 200.0, Backend.SCALAR: 2000.0}, gpu=False)
    _converge(h, 100)
    before = h.arms.calls[Backend.SCALAR]
    h.arms.latency_us[Backend.SIMD] = 600.0  # 3x slower: drift, but still far the fastest
    runs = h.call_tracked(40)
    assert Reason.DRIFT in [r for _, r in runs]
    # once at most, never min_samples times; here not even once: its 1.4 ms over SIMD's
    # slowed time does not fit the key's exploration allowance (3% of ~30 ms run)
    assert h.arms.calls[Backend.SCALAR] - before == 0
    assert h.rt.decide(h.op, h.size).backend is Backend.SIMD


def test_an_untried_arm_is_tried_on_the_second_call_whatever_the_heuristic_says(
        make_runtime) -> None:
    """Large calls: SIMD, first in the cold-start order, takes 2 ms, and SCALAR, never timed,
    might take 3x that (the guess for an unknown arm): it is tried on the key's second call
    all the same — the cold-start order is a guess — and kept, being faster."""
    h = make_runtime({Backend.SIMD: 2000.0, Backend.SCALAR: 1500.0}, gpu=False,
                     max_measure_period=1)
    runs = h.call_tracked(60)
    assert runs[:3] == [(Backend.SIMD, Reason.HEURISTIC), (Backend.SCALAR, Reason.EXPLORE),
                        (Backend.SCALAR, Reason.EXPLOIT)]
    assert runs[-1] == (Backend.SCALAR, Reason.EXPLOIT)


def test_a_cheap_untried_arm_is_tried_at_once(make_runtime) -> None:
    h = make_runtime({Backend.SIMD: 100.0, Backend.SCALAR: 300.0}, gpu=False)
    runs = h.call_tracked(4)
    assert Backend.SCALAR in [arm for arm, _r in runs[:2]]
