"""size_bucket: the one definition of a size bucket (examples; properties in tests/property)."""

from __future__ import annotations

import numpy as np
import pytest

import adaptive_runtime as ar
from adaptive_runtime.keys import bucket_bounds


@pytest.mark.parametrize(("n", "bucket"), [(0, 0), (1, 1), (2, 2), (3, 2), (4, 3), (7, 3),
                                           (8, 4), (1023, 10), (1024, 11), (2**63, 64)])
def test_size_bucket_is_bit_length(n: int, bucket: int) -> None:
    assert ar.size_bucket(n) == bucket


@pytest.mark.parametrize(("bucket", "bounds"), [(0, (0, 0)), (1, (1, 1)), (2, (2, 3)),
                                                (3, (4, 7)), (11, (1024, 2047))])
def test_bucket_bounds_are_inclusive_power_of_two_ranges(bucket: int,
                                                         bounds: tuple[int, int]) -> None:
    assert bucket_bounds(bucket) == bounds


@pytest.mark.parametrize("bad", [1.0, 8.5, float("nan"), True, False, "8", b"8", None, [8]])
def test_size_bucket_rejects_non_integers_with_type_error(bad: object) -> None:
    with pytest.raises(TypeError, match="input_size"):
        ar.size_bucket(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1, -2**70, np.int64(-3)])
def test_size_bucket_rejects_negative_sizes_with_value_error(bad: int) -> None:
    with pytest.raises(ValueError, match=">= 0"):
        ar.size_bucket(bad)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                                   np.uint32, np.uint64, np.intp])
def test_size_bucket_accepts_numpy_integers_like_python_ints(dtype: type) -> None:
    for n in (0, 1, 5, 100):
        assert ar.size_bucket(dtype(n)) == ar.size_bucket(n)


def test_size_bucket_rejects_numpy_bool_and_float() -> None:
    with pytest.raises(TypeError):
        ar.size_bucket(np.True_)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ar.size_bucket(np.float64(4.0))  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1, 1.0, True, "3"])
def test_bucket_bounds_rejects_non_buckets(bad: object) -> None:
    with pytest.raises(ValueError, match="bucket"):
        bucket_bounds(bad)  # type: ignore[arg-type]
