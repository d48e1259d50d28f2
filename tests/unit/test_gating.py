"""Gates: hot-path rate detection, measurement period, trace gate (all with injected time)."""

from __future__ import annotations

import math

import pytest

import adaptive_runtime as ar
from adaptive_runtime.gating import (
    SLOW_CALL_MAX_PERIOD,
    TIMING_SHARE,
    HotPathDetector,
    TraceGate,
    measure_period,
)
from adaptive_runtime.operations import DeviceProbe
from adaptive_runtime.records import HotPathTransition, SamplingReason

Backend = ar.Backend
Reason = ar.Reason


def _feed(detector: HotPathDetector, op: str, start_s: int, seconds: int,
          calls_per_sec: int) -> list[HotPathTransition]:
    """``calls_per_sec`` calls in each of ``seconds`` whole seconds after ``start_s``, evenly
    spaced, the last of each second exactly on the second (which closes that window)."""
    # a zero-call observation at the start opens the first window exactly at start_s (and is a
    # no-op when the previous feed already closed a window there)
    assert detector.observe(op, 0, start_s) is None
    transitions = []
    for sec in range(start_s, start_s + seconds):
        for k in range(1, calls_per_sec + 1):
            t = detector.observe(op, 1, sec + k / calls_per_sec)
            if t is not None:
                transitions.append(t)
    return transitions


# --------------------------------------------------------------------------- hot path


def test_15000_calls_spread_over_3_seconds_are_never_hot() -> None:
    # Trueno counted lifetime calls (10,000 ever -> hot); this is a rate: 5,000/s.
    detector = HotPathDetector(10_000)
    detector.observe("dot", 1, 0.0)
    transitions = []
    for i in range(1, 15_000):
        t = detector.observe("dot", 1, 3.0 * i / 14_999)
        assert not detector.is_hot("dot", 3.0 * i / 14_999)
        if t is not None:
            transitions.append(t)
    assert transitions == []
    assert not detector.is_hot("dot", 3.0)
    assert detector.rate("dot") == pytest.approx(5_000, rel=0.01)


def test_20000_calls_in_one_second_are_hot() -> None:
    detector = HotPathDetector(10_000)
    transitions = _feed(detector, "dot", 0, 1, 20_000)
    assert detector.is_hot("dot", 1.0)
    assert transitions == [HotPathTransition("dot", True, pytest.approx(20_000), 0)]
    assert detector.hot_operations() == ["dot"]


def test_exactly_the_threshold_is_not_hot() -> None:
    detector = HotPathDetector(10_000)
    assert _feed(detector, "dot", 0, 3, 10_000) == []
    assert not detector.is_hot("dot", 3.0)
    assert detector.rate("dot") == pytest.approx(10_000)


def test_hot_path_hysteresis_stays_hot_at_7000_and_leaves_at_4000() -> None:
    detector = HotPathDetector(10_000)
    assert _feed(detector, "dot", 0, 1, 20_000)[0].entered
    # 7,000/s is below the entry rate but above half of it: still hot
    assert _feed(detector, "dot", 1, 3, 7_000) == []
    assert detector.is_hot("dot", 4.0)
    # 4,000/s is below half of it: leaves, reporting what was not traced meanwhile
    (left,) = _feed(detector, "dot", 4, 1, 4_000)
    assert not left.entered
    assert left.operation == "dot"
    assert left.calls_per_sec == pytest.approx(4_000)
    hot_calls = 3 * 7_000 + 4_000  # calls observed after entering, through the leaving one
    assert hot_calls - 1 <= left.suppressed <= hot_calls
    assert not detector.is_hot("dot", 5.0)


def test_hot_operation_that_stops_being_called_is_no_longer_hot() -> None:
    detector = HotPathDetector(10_000)
    _feed(detector, "dot", 0, 1, 20_000)
    assert detector.is_hot("dot", 1.5)
    assert not detector.is_hot("dot", 5.0)  # a stale window is closed by the query


def test_hot_path_is_per_operation() -> None:
    detector = HotPathDetector(10_000)
    _feed(detector, "dot", 0, 1, 20_000)
    _feed(detector, "add", 0, 1, 100)
    assert detector.is_hot("dot", 1.0)
    assert not detector.is_hot("add", 1.0)
    assert not detector.is_hot("never_called", 1.0)


def test_batched_observations_count_every_call() -> None:
    detector = HotPathDetector(10_000)
    detector.observe("dot", 1, 0.0)
    transition = detector.observe("dot", 20_000, 1.0)  # 20,000 calls reported at once
    assert transition is not None and transition.entered


def test_batches_that_began_before_the_window_count_only_their_share_in_it() -> None:
    # Eleven keys of one operation called in lockstep at 1,000 calls/s each (11,000/s would
    # be hot; 1,000/s in all is not): each key is timed once per 1,000 calls, all of them in
    # the same round, so eleven batches of 1,000 fast calls, each spread over the last second,
    # arrive within one window that opened 0.1 s before.
    detector = HotPathDetector(10_000)
    detector.observe("shift", 1, 0.0)
    assert detector.observe("shift", 1, 1.0) is None  # closes the first window at 1.0
    for _ in range(11):
        assert detector.observe("shift", 1_000, 1.1, since_s=0.1) is None
    # the batches' share in the window: 11 x 1,000 x 0.1 s / 1 s; counted whole they would
    # have been 11,000 calls in a window of 0.1 s
    transition = detector.observe("shift", 0, 2.0)
    assert transition is None and not detector.is_hot("shift", 2.0)
    assert detector.rate("shift") == pytest.approx(1_100, rel=0.01)


def test_a_batch_inside_the_window_counts_whole() -> None:
    detector = HotPathDetector(10_000)
    detector.observe("dot", 1, 0.0)
    transition = detector.observe("dot", 20_000, 1.0, since_s=0.0)
    assert transition is not None and transition.entered
    assert transition.calls_per_sec == pytest.approx(20_000, rel=0.01)


@pytest.mark.parametrize(("enter", "window"), [(0, 1.0), (-5, 1.0), (10, 0.0)])
def test_hot_path_detector_rejects_bad_parameters(enter: float, window: float) -> None:
    with pytest.raises(ValueError):
        HotPathDetector(enter, window_s=window)


def test_runtime_op_called_above_threshold_becomes_hot_and_keeps_learning(
        make_runtime) -> None:
    h = make_runtime({Backend.SIMD: 10.0, Backend.SCALAR: 30.0})
    assert not h.rt.is_hot_path(h.op)
    for _ in range(10_000):  # half a second at 20,000 calls/s: no window closed yet
        h.call()
        h.clock.advance(1 / 20_000)
    assert not h.rt.is_hot_path(h.op)
    for _ in range(20_000):  # a second more (the rate is seen at the next timed call)
        h.call()
        h.clock.advance(1 / 20_000)
    assert h.rt.is_hot_path(h.op)
    assert not h.rt.is_hot_path("some_other_op")
    samples_when_hot = h.samples()
    for _ in range(10_000):
        h.call()
        h.clock.advance(1 / 20_000)
    assert h.rt.is_hot_path(h.op)
    assert h.samples() > samples_when_hot  # learning goes on while hot
    assert sum(h.rt.selection_counts().values()) == 40_000


def test_runtime_op_called_slowly_many_times_is_not_hot(make_runtime) -> None:
    h = make_runtime({Backend.SIMD: 10.0, Backend.SCALAR: 30.0})
    for _ in range(30_000):  # 30,000 calls in total, but at 5,000/s
        h.call()
        h.clock.advance(1 / 5_000)
    assert not h.rt.is_hot_path(h.op)


def test_select_counts_toward_hot_path_for_unregistered_names(clock, timer) -> None:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(hot_path_calls_per_sec=100), builtin_ops=False,
                            devices=DeviceProbe(gpu=False), clock=clock, timer=timer)
    for _ in range(400):
        rt.select("user_kernel", 64)
        clock.advance(1 / 200)
    assert rt.is_hot_path("user_kernel")


def test_reset_history_forgets_hot_state(make_runtime) -> None:
    h = make_runtime({Backend.SIMD: 10.0}, hot_path_calls_per_sec=100)
    for _ in range(400):
        h.call()
        h.clock.advance(1 / 200)
    assert h.rt.is_hot_path(h.op)
    h.rt.reset_history()
    assert not h.rt.is_hot_path(h.op)


# --------------------------------------------------------------------------- measure period


def _is_power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


# A timed call costing 4 us over a plain one: timing is noise (<= 0.5%) from 800 us calls up.
COST_US = 4.0


@pytest.mark.parametrize("mean_us", [800.0, 800.5, 2_000.0, 1e9, math.inf])
def test_measure_period_times_calls_whose_timing_is_noise_every_call(mean_us: float) -> None:
    assert measure_period(mean_us, COST_US, 1024) == 1


@pytest.mark.parametrize(("mean_us", "cost_us", "period"),
                         [(799.0, 4.0, 2), (200.0, 4.0, 4), (1_000.0, 40.0, 8),
                          (1_000.0, 50.0, 16), (40.0, 50.0, 256)])
def test_measure_period_keeps_timing_under_its_share(mean_us: float, cost_us: float,
                                                    period: int) -> None:
    assert TIMING_SHARE == 0.005
    assert measure_period(mean_us, cost_us, 1024) == period
    assert cost_us / (period * mean_us) <= TIMING_SHARE < cost_us / (period / 2 * mean_us)


def test_measure_period_caps_slow_calls_at_one_in_four() -> None:
    assert measure_period(500.0, 50.0, 1024) == 32  # by cost alone
    assert measure_period(500.0, 50.0, 1024, slow_call_us=100.0) == SLOW_CALL_MAX_PERIOD == 4
    assert measure_period(50.0, 10.0, 1024, slow_call_us=100.0) == 64  # not a slow call
    # a watched key's cap is longer; under its cost's period it changes nothing
    assert measure_period(500.0, 50.0, 1024, slow_call_us=100.0, slow_max_period=16) == 16
    assert measure_period(500.0, 10.0, 1024, slow_call_us=100.0, slow_max_period=16) == 4


@pytest.mark.parametrize(("mean_us", "period"), [(0.5, 128), (5.0, 16), (50.0, 2), (150.0, 1)])
def test_a_suspect_arm_is_timed_once_per_100_us_of_calls(mean_us: float, period: int) -> None:
    assert measure_period(mean_us, 50.0, 1024, slow_call_us=100.0, suspect=True) == period


def test_measure_period_is_one_for_nan() -> None:
    assert measure_period(math.nan, COST_US, 1024) == 1


@pytest.mark.parametrize("mean_us", [0.0, 1e-9, 1e-300, 5e-324])
def test_measure_period_for_near_free_calls_is_the_cap(mean_us: float) -> None:
    assert measure_period(mean_us, COST_US, 1024) == 1024


def test_measure_period_respects_the_cap() -> None:
    assert measure_period(0.1, COST_US, 16) == 16
    assert measure_period(0.1, COST_US, 1) == 1


def test_measure_period_times_cheap_calls_less_often() -> None:
    periods = [measure_period(mean, COST_US, 1 << 20) for mean in (799.0, 50.0, 10.0, 1.0, 0.1)]
    assert all(p >= 1 and p & (p - 1) == 0 for p in periods)
    assert periods == sorted(periods)       # cheaper calls: timed no more often
    assert periods[-1] > 1                  # a 0.1 us call is not timed every time
    assert periods[-1] > periods[0]


# --------------------------------------------------------------------------- trace gate


def _gate(**overrides) -> TraceGate:
    params = {"tracing": True, "sampling_threshold_us": 100.0, "sample_rate": 0.01,
              "spans_per_sec": 1e9, "spans_per_sec_per_key": 1e9, "now_s": 0.0}
    params.update(overrides)
    return TraceGate(**params)


def _admit(gate: TraceGate, *, key=("dot", 3), reason=Reason.EXPLOIT, duration_us=1.0,
           hot=False, first_call=False, failed=False, calls=1, now_s=0.0, backend=None):
    return gate.admit(key, reason, duration_us, hot, first_call, failed, calls, now_s,
                      backend)


def test_tracing_off_exports_nothing_even_errors() -> None:
    gate = _gate(tracing=False)
    for kwargs in ({"failed": True}, {"first_call": True}, {"reason": Reason.EXPLORE},
                   {"duration_us": 1e6}):
        verdict = _admit(gate, **kwargs)
        assert not verdict.export
        assert verdict.reason is SamplingReason.TRACING_OFF
    assert sum(gate.exported.values()) == 0
    assert gate.suppressed[SamplingReason.TRACING_OFF] == 4


def test_hot_operation_exports_nothing_even_errors() -> None:
    gate = _gate()
    for kwargs in ({"failed": True}, {"first_call": True}, {"reason": Reason.DRIFT},
                   {"duration_us": 1e6}):
        verdict = _admit(gate, hot=True, **kwargs)
        assert (verdict.export, verdict.reason) == (False, SamplingReason.HOT_PATH)
    assert gate.suppressed[SamplingReason.HOT_PATH] == 4
    assert sum(gate.exported.values()) == 0


@pytest.mark.parametrize(("kwargs", "why"), [
    ({"failed": True}, SamplingReason.ERROR),
    ({"first_call": True}, SamplingReason.FIRST_CALL),
    ({"reason": Reason.EXPLORE}, SamplingReason.DECISION),
    ({"reason": Reason.RECHECK}, SamplingReason.DECISION),
    ({"reason": Reason.DRIFT}, SamplingReason.DECISION),
    ({"reason": Reason.FALLBACK}, SamplingReason.DECISION),
    ({"reason": Reason.HEURISTIC}, SamplingReason.DECISION),
    ({"duration_us": 100.0}, SamplingReason.SLOW),
    ({"duration_us": 5_000.0}, SamplingReason.SLOW),
])
def test_remarkable_calls_are_exported_with_their_reason(kwargs, why) -> None:
    gate = _gate()
    verdict = _admit(gate, **kwargs)
    assert verdict.export
    assert verdict.reason is why
    assert verdict.weight == 1.0
    assert gate.exported[why] == 1


def test_fast_routine_calls_are_sampled_about_1_percent_with_weights() -> None:
    gate = _gate()
    exported = []
    for i in range(10_000):
        verdict = _admit(gate, duration_us=5.0, now_s=i * 0.001)
        if verdict.export:
            assert verdict.reason is SamplingReason.SAMPLED
            exported.append(verdict.weight)
        else:
            assert verdict.reason is SamplingReason.NOT_SAMPLED
    assert 95 <= len(exported) <= 105
    # each exported span stands for the calls since the previous one: together, all of them
    assert 10_000 - 101 <= sum(exported) <= 10_000
    assert all(w == pytest.approx(100, abs=1) for w in exported)
    assert gate.exported[SamplingReason.SAMPLED] == len(exported)
    assert gate.suppressed[SamplingReason.NOT_SAMPLED] == 10_000 - len(exported)


def test_sampling_weights_count_calls_represented_by_one_timing() -> None:
    gate = _gate()
    weights = [v.weight for i in range(2_000)
               if (v := _admit(gate, duration_us=5.0, calls=8, now_s=i * 0.01)).export]
    # 2,000 timings standing for 8 calls each: 16,000 calls, 1% of them -> ~160 spans
    assert 155 <= len(weights) <= 161
    assert 16_000 - 8 * 13 <= sum(weights) <= 16_000


def test_sampled_spans_are_spread_across_keys() -> None:
    gate = _gate()
    exported = {"a": 0, "b": 0}
    for i in range(2_000):
        for key in exported:
            if _admit(gate, key=key, duration_us=5.0, now_s=i * 0.001).export:
                exported[key] += 1
    assert exported == {"a": pytest.approx(20, abs=1), "b": pytest.approx(20, abs=1)}


def test_per_key_budget_suppresses_with_reason_budget() -> None:
    gate = _gate(spans_per_sec_per_key=20.0)
    verdicts = [_admit(gate, duration_us=1e3, now_s=0.0) for _ in range(100)]
    assert sum(v.export for v in verdicts) == 20      # the burst
    assert all(v.reason is SamplingReason.BUDGET for v in verdicts if not v.export)
    assert gate.suppressed[SamplingReason.BUDGET] == 80
    # another key has its own budget
    assert _admit(gate, key=("add", 3), duration_us=1e3, now_s=0.0).export
    # the bucket refills with time: 0.5 s later, 10 more
    later = [_admit(gate, duration_us=1e3, now_s=0.5) for _ in range(50)]
    assert sum(v.export for v in later) == 10


def test_process_budget_caps_spans_across_keys() -> None:
    gate = _gate(spans_per_sec=200.0, spans_per_sec_per_key=1e9)
    verdicts = [_admit(gate, key=("op", i), failed=True, now_s=0.0) for i in range(1_000)]
    assert sum(v.export for v in verdicts) == 200
    assert gate.suppressed[SamplingReason.BUDGET] == 800
    assert gate.exported[SamplingReason.ERROR] == 200


def test_budget_holds_over_time() -> None:
    gate = _gate(spans_per_sec=200.0, spans_per_sec_per_key=1e9)
    exported = sum(_admit(gate, key=("op", i % 50), failed=True, now_s=i * 1e-4).export
                   for i in range(100_000))  # 10 s of errors at 10,000/s
    assert exported <= 200 + 10 * 200 + 1


def test_zero_span_budget_exports_nothing() -> None:
    gate = _gate(spans_per_sec=0.0)
    verdicts = [_admit(gate, failed=True, now_s=float(i)) for i in range(10)]
    assert not any(v.export for v in verdicts)
    assert gate.suppressed[SamplingReason.BUDGET] == 10


def test_trace_gate_counts_every_verdict_by_reason() -> None:
    gate = _gate()
    _admit(gate, hot=True)
    _admit(gate, failed=True)
    _admit(gate, first_call=True)
    _admit(gate, duration_us=500.0)
    _admit(gate, duration_us=1.0)
    assert gate.exported[SamplingReason.ERROR] == 1
    assert gate.exported[SamplingReason.FIRST_CALL] == 1
    assert gate.exported[SamplingReason.SLOW] == 1
    assert gate.suppressed[SamplingReason.HOT_PATH] == 1
    assert gate.suppressed[SamplingReason.NOT_SAMPLED] == 1
    assert sum(gate.exported.values()) + sum(gate.suppressed.values()) == 5


# --------------------------------------------------------------------------- routine spans' budget


def test_routine_spans_are_bounded_by_their_spans_per_second() -> None:
    # every fast call eligible (rate 1), 2 routine spans a second: 10 s of calls every 0.1 ms
    # export the burst's 2, then 2 a second, whatever the sample rate says
    gate = _gate(sample_rate=1.0, routine_spans_per_sec=2.0)
    verdicts = [_admit(gate, duration_us=10.0, now_s=i * 1e-4) for i in range(100_000)]
    exported = [v for v in verdicts if v.export]
    assert len(exported) == 2 + 2 * 10 - 1  # (the last token is due at 10 s: not reached)
    assert all(v.reason is SamplingReason.SAMPLED for v in exported)
    assert gate.suppressed[SamplingReason.BUDGET] == 100_000 - len(exported)
    # each span stands for the routine calls since the previous one
    assert sum(v.weight for v in exported) == 100_000 - gate._keys[("dot", 3)].pending_calls


def test_slow_spans_share_the_routine_budget() -> None:
    gate = _gate(routine_spans_per_sec=1.0)
    assert _admit(gate, duration_us=500.0, now_s=0.0).reason is SamplingReason.SLOW
    held = _admit(gate, duration_us=500.0, key=("add", 3), now_s=0.5)
    assert (held.export, held.reason) == (False, SamplingReason.BUDGET)
    assert _admit(gate, duration_us=500.0, key=("add", 3), now_s=1.0).weight == 2.0


def test_the_routine_budget_never_holds_back_decisions_first_calls_or_errors() -> None:
    gate = _gate(routine_spans_per_sec=0.0)  # no routine span ever
    for kwargs in ({"failed": True}, {"first_call": True}, {"reason": Reason.EXPLORE},
                   {"reason": Reason.DRIFT}) * 5:
        assert _admit(gate, **kwargs).export
    assert not _admit(gate, duration_us=150.0).export
    assert gate.suppressed[SamplingReason.BUDGET] == 1


def test_no_routine_budget_leaves_the_sample_rate_as_the_ceiling() -> None:
    gate = _gate(sample_rate=0.01)  # routine_spans_per_sec: inf by default
    exported = sum(_admit(gate, duration_us=5.0, now_s=i * 1e-4).export for i in range(10_000))
    assert exported == 100


def test_slow_and_sampled_spans_weigh_only_calls_of_their_own_kind() -> None:
    gate = _gate(spans_per_sec_per_key=1.0)  # one span a second for the key
    assert _admit(gate, duration_us=500.0, now_s=0.0).weight == 1.0  # slow, the burst token
    for _ in range(4):  # slow calls the budget holds back
        assert not _admit(gate, duration_us=500.0, now_s=0.1).export
    for _ in range(300):  # fast calls: their sampled spans are held back too
        _admit(gate, duration_us=5.0, now_s=0.2)
    slow = _admit(gate, duration_us=500.0, now_s=1.5)
    assert (slow.export, slow.reason, slow.weight) == (True, SamplingReason.SLOW, 5.0)
    sampled = next(v for _ in range(200)
                   if (v := _admit(gate, duration_us=5.0, now_s=3.0)).export)
    assert sampled.reason is SamplingReason.SAMPLED
    assert 300 < sampled.weight <= 500  # the fast calls since the first, none of the slow


# --------------------------------------------------------------------------- step spans


def test_step_spans_are_bounded_by_their_spans_per_second() -> None:
    # 2 ms steps for 10 s, 10 step spans a second: the burst's 10 (the first step's among
    # them), then one per 50 steps (the last token is due at 10 s: not reached), each
    # standing for the steps since
    gate = _gate(step_spans_per_sec=10.0)
    weights = [gate.admit_step(failed=False, parent_of_spans=False, now_s=i * 0.002)
               for i in range(5_000)]
    exported = [w for w in weights if w]
    assert weights[:10] == [1.0] * 10
    assert len(exported) == 10 + 10 * 10 - 1
    assert sum(exported) == 5_000 - gate.pending_steps
    assert gate.steps_exported == len(exported)
    assert gate.steps_suppressed == 5_000 - len(exported)


def test_long_steps_each_get_their_span() -> None:
    gate = _gate(step_spans_per_sec=10.0)
    assert all(gate.admit_step(failed=False, parent_of_spans=False, now_s=i * 0.1) == 1.0
               for i in range(100))


def test_a_step_whose_calls_were_traced_or_that_failed_always_gets_its_span() -> None:
    gate = _gate(step_spans_per_sec=0.0)  # no step budget at all
    assert gate.admit_step(failed=False, parent_of_spans=False, now_s=0.0) == 1.0  # the first
    assert gate.admit_step(failed=False, parent_of_spans=False, now_s=1.0) == 0.0
    assert gate.admit_step(failed=False, parent_of_spans=True, now_s=2.0) == 2.0
    assert gate.admit_step(failed=True, parent_of_spans=False, now_s=3.0) == 1.0


def test_no_step_budget_exports_every_step() -> None:
    gate = _gate(step_spans_per_sec=math.inf)
    assert all(gate.admit_step(failed=False, parent_of_spans=False, now_s=0.0) == 1.0
               for _ in range(1_000))


def test_admitted_counts_calls_whose_spans_went_out() -> None:
    gate = _gate()
    _admit(gate, first_call=True)
    _admit(gate, hot=True)
    _admit(gate, reason=Reason.EXPLORE)
    assert gate.admitted == 2


# --------------------------------------------------------------------------- commitments


SIMD, SCALAR = Backend.SIMD, Backend.SCALAR


def _explored(gate: TraceGate, now_s: float = 0.0) -> None:
    """A key's first call and one exploring call (both exported as decisions)."""
    _admit(gate, first_call=True, reason=Reason.HEURISTIC, backend=SIMD, now_s=now_s)
    _admit(gate, reason=Reason.EXPLORE, backend=SCALAR, now_s=now_s)


def test_the_first_exploit_after_exploring_is_a_commitment_exported_once() -> None:
    gate = _gate(sample_rate=0.0)
    _explored(gate)
    verdict = _admit(gate, backend=SIMD)
    assert (verdict.export, verdict.reason, verdict.replaced) == (
        True, SamplingReason.COMMIT, None)
    # the exploits after it are routine (not sampled at rate 0)
    assert [_admit(gate, backend=SIMD).reason for _ in range(3)] == [
        SamplingReason.NOT_SAMPLED] * 3
    assert gate.exported[SamplingReason.COMMIT] == 1


def test_a_commitment_needs_no_routine_token_as_no_decision_does() -> None:
    gate = _gate(sample_rate=1.0, routine_spans_per_sec=0.0)  # routine spans never go
    _explored(gate)
    assert _admit(gate, backend=SIMD).reason is SamplingReason.COMMIT
    assert _admit(gate, backend=SIMD).reason is SamplingReason.BUDGET


def test_a_recheck_that_keeps_the_arm_is_no_commitment_one_that_switches_is() -> None:
    gate = _gate(sample_rate=0.0)
    _explored(gate)
    assert _admit(gate, backend=SIMD).reason is SamplingReason.COMMIT
    _admit(gate, reason=Reason.RECHECK, backend=SCALAR)
    assert _admit(gate, backend=SIMD).reason is SamplingReason.NOT_SAMPLED
    _admit(gate, reason=Reason.RECHECK, backend=SCALAR)
    verdict = _admit(gate, backend=SCALAR)  # SCALAR took over: a switch, naming the arm left
    assert (verdict.reason, verdict.replaced) == (SamplingReason.COMMIT, SIMD)


@pytest.mark.parametrize("leave", [{"reason": Reason.DRIFT, "backend": SCALAR},
                                   {"failed": True, "backend": SIMD}])
def test_after_a_drift_alarm_or_a_failure_the_next_exploit_is_a_commitment(leave) -> None:
    gate = _gate(sample_rate=0.0)
    _explored(gate)
    assert _admit(gate, backend=SIMD).reason is SamplingReason.COMMIT
    assert _admit(gate, **leave).export
    # committed again, to the same arm: a commitment, not a switch
    verdict = _admit(gate, backend=SIMD)
    assert (verdict.reason, verdict.replaced) == (SamplingReason.COMMIT, None)


def test_a_commitment_the_token_buckets_refuse_is_told_on_the_next_exploit() -> None:
    gate = _gate(sample_rate=0.0, spans_per_sec_per_key=1.0)  # one span a second per key
    _admit(gate, reason=Reason.EXPLORE, backend=SCALAR, now_s=0.0)  # takes the token
    refused = _admit(gate, backend=SIMD, now_s=0.1)
    assert (refused.export, refused.reason) == (False, SamplingReason.BUDGET)
    assert _admit(gate, backend=SIMD, now_s=1.2).reason is SamplingReason.COMMIT


def test_without_an_arm_named_no_commitment_is_told() -> None:
    gate = _gate(sample_rate=0.0)
    _explored(gate)
    assert _admit(gate).reason is SamplingReason.NOT_SAMPLED


def test_a_hot_operation_exports_no_commitment() -> None:
    gate = _gate()
    _explored(gate)
    verdict = _admit(gate, backend=SIMD, hot=True)
    assert (verdict.export, verdict.reason) == (False, SamplingReason.HOT_PATH)


# --------------------------------------------------------------------------- every key visible


def test_a_key_without_a_span_for_the_interval_exports_one_standing_for_its_calls() -> None:
    gate = _gate(sample_rate=0.0, routine_spans_per_sec=0.0, key_interval_s=2.0)
    _explored(gate)
    assert _admit(gate, backend=SIMD).reason is SamplingReason.COMMIT
    spans = []
    for i in range(1, 101):  # 10 s of timed calls every 0.1 s, each standing for 10 calls
        verdict = _admit(gate, backend=SIMD, calls=10, now_s=i * 0.1)
        if verdict.export:
            spans.append((round(i * 0.1, 1), verdict.reason, verdict.weight))
    # after 3/4 of the interval without a span: at most one interval apart
    assert [t for t, _why, _w in spans] == [1.5, 3.0, 4.5, 6.0, 7.5, 9.0]
    assert {why for _t, why, _w in spans} == {SamplingReason.INTERVAL}
    # each stands for the calls since the span before it: 15 timings of 10 calls
    assert [w for _t, _why, w in spans] == [150.0] * 6
    assert gate.exported[SamplingReason.INTERVAL] == 6


def test_any_span_of_the_key_restarts_its_interval_and_other_keys_keep_their_own() -> None:
    gate = _gate(sample_rate=0.0, key_interval_s=2.0)
    _explored(gate, now_s=0.0)
    _admit(gate, backend=SIMD, now_s=0.0)  # commit
    _admit(gate, reason=Reason.RECHECK, backend=SCALAR, now_s=1.0)  # a span at 1.0 s
    assert _admit(gate, backend=SIMD, now_s=2.0).reason is SamplingReason.NOT_SAMPLED
    assert _admit(gate, backend=SIMD, now_s=2.5).reason is SamplingReason.INTERVAL
    other = ("softmax", 11)  # first seen at 2.5 s: its interval starts there
    _admit(gate, key=other, first_call=True, reason=Reason.HEURISTIC, now_s=2.5)
    assert _admit(gate, key=other, backend=SIMD, now_s=3.0).reason is SamplingReason.COMMIT
    assert _admit(gate, key=other, backend=SIMD, now_s=4.0).reason is \
        SamplingReason.NOT_SAMPLED
    assert _admit(gate, key=other, backend=SIMD, now_s=4.5).reason is SamplingReason.INTERVAL


def test_no_interval_spans_unless_an_interval_is_set() -> None:
    gate = _gate(sample_rate=0.0)
    _explored(gate)
    _admit(gate, backend=SIMD)
    assert not any(_admit(gate, backend=SIMD, now_s=t).export for t in range(1, 1000, 7))
