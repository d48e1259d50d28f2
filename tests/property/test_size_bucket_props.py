"""Hypothesis properties of size_bucket / bucket_bounds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import adaptive_runtime as ar
from adaptive_runtime.keys import MAX_SIZE, bucket_bounds, reference_size

sizes = st.integers(min_value=0, max_value=MAX_SIZE - 1)


@given(sizes, sizes)
def test_two_sizes_share_a_bucket_iff_same_bit_length(n: int, m: int) -> None:
    same_bucket = ar.size_bucket(n) == ar.size_bucket(m)
    assert same_bucket == (n.bit_length() == m.bit_length())


@given(sizes)
def test_size_lies_within_its_bucket_bounds(n: int) -> None:
    low, high = bucket_bounds(ar.size_bucket(n))
    assert low <= n <= high


@given(st.integers(min_value=0, max_value=MAX_SIZE.bit_length() - 1))
def test_bucket_bounds_round_trip_and_tile_the_integers(bucket: int) -> None:
    low, high = bucket_bounds(bucket)
    assert ar.size_bucket(low) == bucket
    assert ar.size_bucket(high) == bucket
    # the next bucket starts right after this one ends: no gaps, no overlaps
    assert bucket_bounds(bucket + 1)[0] == high + 1


@given(st.integers(min_value=0, max_value=MAX_SIZE.bit_length() - 1))
def test_reference_size_is_in_its_bucket_at_its_geometric_middle(bucket: int) -> None:
    ref = reference_size(bucket)
    low, high = bucket_bounds(bucket)
    assert ar.size_bucket(ref) == bucket and low <= ref <= high
    if bucket:  # sqrt(2) x its smallest size, rounded: the middle of [low, 2 low) on a log scale
        assert abs(ref - low * 2**0.5) <= 0.5


@given(st.integers(min_value=0, max_value=MAX_SIZE - 2))
def test_size_bucket_is_monotone(n: int) -> None:
    assert ar.size_bucket(n) <= ar.size_bucket(n + 1)


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_numpy_int64_sizes_bucket_like_python_ints(n: int) -> None:
    assert ar.size_bucket(np.int64(n)) == ar.size_bucket(n)


@given(st.integers(max_value=-1))
def test_negative_sizes_are_value_errors(n: int) -> None:
    with pytest.raises(ValueError):
        ar.size_bucket(n)


@given(st.integers(min_value=MAX_SIZE, max_value=2**5000))
def test_sizes_of_2_to_the_64_or_more_are_value_errors(n: int) -> None:
    # (each would be a bucket of its own, and its reference size would overflow a float)
    with pytest.raises(ValueError, match="2\\*\\*64"):
        ar.size_bucket(n)


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_float_sizes_are_type_errors(x: float) -> None:
    with pytest.raises(TypeError):
        ar.size_bucket(x)  # type: ignore[arg-type]
