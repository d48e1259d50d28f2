"""Result checks: signatures for every timed call, values for validation mode."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from adaptive_runtime._dispatch.results import (
    compare_values,
    describe_signature,
    input_signature,
    result_signature,
    signatures_agree,
)


def test_signatures_of_arrays_tensors_and_scalars() -> None:
    a = np.zeros((3, 4), np.float32)
    assert result_signature(a) == ((3, 4), np.dtype(np.float32))
    assert result_signature(1.5) == (None, None)
    assert input_signature((a, 2.0)) == ((3, 4), np.dtype(np.float32).num, float)
    assert input_signature((a, 2)) == ((3, 4), np.dtype(np.float32).num, int, 2)
    assert input_signature((a,)) != input_signature((a.astype(np.float64),))
    assert input_signature((torch.zeros(2),)) == (torch.Size([2]), torch.float32)
    assert describe_signature(result_signature(a)) == "shape (3, 4) float32"
    t = torch.zeros(3, 4)
    assert signatures_agree(result_signature(t), result_signature(torch.ones(3, 4)))


def test_integer_and_string_arguments_sign_by_value_floats_by_type() -> None:
    # a length, an axis or a mode name can shape a result; a scale or a learning rate does not
    a = np.zeros(4)
    assert input_signature((5,)) != input_signature((6,))
    assert input_signature((a, "same")) != input_signature((a, "valid"))
    assert input_signature((a, True)) != input_signature((a, 1))
    assert input_signature((np.int64(5),)) != input_signature((np.int64(6),))
    assert input_signature((a, 0.5)) == input_signature((a, 0.25))
    # a short sequence (a shape, a few arrays) item by item; a long one by its length
    assert input_signature(((2, 6),)) != input_signature(((3, 4),))
    assert input_signature(([a, a],)) != input_signature(([a, np.zeros(5)],))
    assert input_signature(([1.0] * 100,)) == input_signature(([2.0] * 100,))
    assert input_signature(([1.0] * 100,)) != input_signature(([1.0] * 101,))


def test_a_plain_float_and_a_numpy_scalar_agree_but_shapes_and_dtypes_do_not() -> None:
    assert signatures_agree(result_signature(1.5), result_signature(np.float64(1.5)))
    assert not signatures_agree(result_signature(np.zeros(3)), result_signature(np.zeros(2)))
    assert not signatures_agree(result_signature(np.zeros(3)),
                                result_signature(np.zeros(3, np.float32)))


def test_float32_sums_in_another_order_agree() -> None:
    x = np.random.default_rng(0).random(1_000_000).astype(np.float32)
    pairwise = np.sum(x)  # numpy's pairwise sum
    sequential = np.cumsum(x, dtype=np.float32)[-1]  # a plain loop's order
    assert pairwise != sequential  # (they differ: neither is wrong)
    assert compare_values(sequential, pairwise) is None
    assert compare_values(x * 1.0001, x) is None  # within float32's tolerance


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nan_where_the_reference_has_none_blames_the_result(dtype) -> None:
    ref = np.arange(10, dtype=dtype)
    bad = ref.copy()
    bad[3] = np.nan
    mismatch = compare_values(bad, ref)
    assert mismatch is not None and mismatch.suspect == "result" and "1 NaN" in mismatch.detail
    reverse = compare_values(ref, bad)
    assert reverse is not None and reverse.suspect == "reference"
    assert compare_values(bad, bad.copy()) is None  # NaN in both: no fault shown


def test_values_off_by_more_than_the_tolerance_are_a_mismatch_of_unclear_side() -> None:
    ref = np.ones(100)
    mismatch = compare_values(ref * 1.01, ref)
    assert mismatch is not None and mismatch.suspect == "" and "differ" in mismatch.detail
    assert compare_values(np.arange(5), np.arange(5)) is None
    assert compare_values(np.arange(5), np.arange(1, 6)).detail == "5 of 5 values differ"


def test_results_that_cannot_be_compared_show_no_fault() -> None:
    class Odd:
        @property
        def shape(self) -> tuple[int, ...]:
            raise RuntimeError("no shape today")

    assert result_signature(Odd()) == (None, None)
    assert compare_values(Odd(), Odd()) is None
    assert compare_values("a string", "another") is None
    weird = (np.array([1, 2]), None)  # a "shape" that cannot be compared as a tuple
    assert signatures_agree(weird, (np.array([1, 3]), None))
