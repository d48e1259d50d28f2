"""Hypothesis properties of the measurement gate's period."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from adaptive_runtime.gating import (
    SLOW_CALL_MAX_PERIOD,
    SUSPECT_SPAN_US,
    TIMING_SHARE,
    measure_period,
)

means = st.floats(min_value=0.0, max_value=1e9, allow_nan=False)
costs = st.floats(min_value=1e-3, max_value=1e6)
caps = st.integers(0, 20).map(lambda k: 1 << k)


@given(means, costs, caps)
def test_period_is_a_power_of_two_within_the_cap(mean_us, cost_us, cap) -> None:
    period = measure_period(mean_us, cost_us, cap)
    assert 1 <= period <= cap
    assert period & (period - 1) == 0


@given(means, costs, caps)
def test_calls_whose_timing_is_noise_are_timed_every_time(mean_us, cost_us, cap) -> None:
    if mean_us * TIMING_SHARE >= cost_us:
        assert measure_period(mean_us, cost_us, cap) == 1


@given(costs, caps)
def test_unknown_cost_is_timed_every_time(cost_us, cap) -> None:
    assert measure_period(math.nan, cost_us, cap) == 1


@given(means, means, costs, caps)
def test_period_does_not_grow_with_cost(a, b, cost_us, cap) -> None:
    cheap, dear = min(a, b), max(a, b)
    assert measure_period(cheap, cost_us, cap) >= measure_period(dear, cost_us, cap)


@given(costs, caps)
def test_free_calls_get_the_longest_period(cost_us, cap) -> None:
    assert measure_period(0.0, cost_us, cap) == cap


@given(st.floats(min_value=1e-3, max_value=1e9), costs, caps)
def test_timing_stays_within_its_share_unless_capped(mean_us, cost_us, cap) -> None:
    period = measure_period(mean_us, cost_us, cap)
    assert period == cap or cost_us <= TIMING_SHARE * mean_us * period
    if period > 1:  # and the period is the shortest that does
        assert cost_us > TIMING_SHARE * mean_us * (period // 2)


@given(means, costs, caps, st.floats(min_value=0.0, max_value=1e6))
def test_slow_calls_and_suspect_arms_are_timed_at_least_as_often(mean_us, cost_us, cap,
                                                                   slow_us) -> None:
    plain = measure_period(mean_us, cost_us, cap)
    slow = measure_period(mean_us, cost_us, cap, slow_call_us=slow_us)
    suspect = measure_period(mean_us, cost_us, cap, slow_call_us=slow_us, suspect=True)
    assert suspect <= slow <= plain
    if mean_us >= slow_us:
        assert slow <= SLOW_CALL_MAX_PERIOD
    assert suspect == 1 or suspect * mean_us <= SUSPECT_SPAN_US
