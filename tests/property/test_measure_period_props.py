"""Hypothesis properties of the measurement gate's period."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from adaptive_runtime.gating import measure_period

means = st.floats(min_value=0.0, max_value=1e9, allow_nan=False)
thresholds = st.floats(min_value=1e-3, max_value=1e6)
caps = st.integers(0, 20).map(lambda k: 1 << k)


@given(means, thresholds, caps)
def test_period_is_a_power_of_two_within_the_cap(mean_us, threshold_us, cap) -> None:
    period = measure_period(mean_us, threshold_us, cap)
    assert 1 <= period <= cap
    assert period & (period - 1) == 0


@given(means, thresholds, caps)
def test_slow_calls_are_timed_every_time(mean_us, threshold_us, cap) -> None:
    if mean_us >= threshold_us:
        assert measure_period(mean_us, threshold_us, cap) == 1


@given(thresholds, caps)
def test_unknown_cost_is_timed_every_time(threshold_us, cap) -> None:
    assert measure_period(math.nan, threshold_us, cap) == 1


@given(means, means, thresholds, caps)
def test_period_does_not_grow_with_cost(a, b, threshold_us, cap) -> None:
    cheap, dear = min(a, b), max(a, b)
    assert measure_period(cheap, threshold_us, cap) >= measure_period(dear, threshold_us, cap)


@given(thresholds, caps)
def test_free_calls_get_the_longest_period(threshold_us, cap) -> None:
    assert measure_period(0.0, threshold_us, cap) == cap
