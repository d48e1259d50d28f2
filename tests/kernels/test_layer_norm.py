"""``layer_norm``: every CPU arm equals a float64 numpy reference and torch's own layer_norm,
for numpy and torch inputs of both dtypes and any number of dimensions; bad inputs are clear
errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from harness import DTYPES, SIZES, OpCase, check_every_arm, check_result
from hypothesis import given
from hypothesis import strategies as st

import adaptive_runtime as ar

CPU_ARMS = (ar.Backend.SCALAR, ar.Backend.SIMD)


def _reference(x: np.ndarray) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)  # biased
    return (x - mean) / np.sqrt(var + 1e-5)


def _shape(rng: np.random.Generator, n: int) -> tuple[int, ...]:
    """1-D (n,), 2-D (rows, n) or 3-D with the last axis n; at most a few times n elements."""
    ndim = int(rng.integers(1, 4))
    lead = [int(d) for d in rng.integers(1, 4, size=ndim - 1)]
    return (*lead, n)


def _args(rng, n, dtype):
    # An offset and a scale per call, so the mean and variance are not 0 and 1.
    x = rng.standard_normal(_shape(rng, n)) * rng.uniform(0.1, 10) + rng.uniform(-5, 5)
    return (x.astype(dtype),)


LAYER_NORM = OpCase("layer_norm", _args, _reference)


@given(n=SIZES, dtype=st.sampled_from(DTYPES), kind=st.sampled_from(["numpy", "torch"]),
       seed=st.integers(0, 2**16))
def test_every_cpu_arm_matches_numpy(choice_runtimes, n, dtype, kind, seed) -> None:
    check_every_arm(choice_runtimes, LAYER_NORM, n, dtype, kind, seed)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(7,), (1, 1), (5, 1), (4, 64), (2, 3, 33), (2, 2, 2, 130)])
def test_matches_torch_layer_norm(arm_runtimes, shape, dtype) -> None:
    x = torch.randn(shape, dtype=dtype, generator=torch.Generator().manual_seed(len(shape))) * 3
    expected = torch.nn.functional.layer_norm(x, shape[-1:], eps=1e-5)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    for arm, rt in arm_runtimes.items():
        got = rt.run("layer_norm", x)
        assert got.dtype == dtype and got.shape == x.shape, arm
        torch.testing.assert_close(got, expected, rtol=tol, atol=tol, msg=arm.value)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_non_contiguous_inputs(arm_runtimes, dtype, kind) -> None:
    base = np.random.default_rng(5).standard_normal((6, 40, 9)).astype(dtype)
    if kind == "numpy":
        views = [base.transpose(2, 0, 1), base[::2, :, ::-1], base[:, 3]]
    else:
        views = [torch.from_numpy(base).permute(2, 0, 1), torch.from_numpy(base)[::2, :, 1::2],
                 torch.from_numpy(base)[:, 3]]
        assert not any(v.is_contiguous() for v in views)
    for arm, rt in arm_runtimes.items():
        for view in views:
            try:
                check_result(LAYER_NORM, (np.asarray(view),), kind, rt.run("layer_norm", view))
            except AssertionError as exc:
                raise AssertionError(f"{arm.value}, shape {tuple(view.shape)}: {exc}") from exc


def test_constant_rows_normalise_to_zero(arm_runtimes) -> None:
    x = np.full((3, 16), 2.5, np.float32)
    for rt in arm_runtimes.values():
        got = rt.run("layer_norm", x)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, np.zeros_like(x))


@pytest.mark.parametrize(("x", "message"), [
    (np.ones(0), r"^layer_norm: expected a non-empty array of at least one dimension, got "
                 r"shapes \(0,\)"),
    (np.ones((3, 0)), r"^layer_norm: .* \(3, 0\)"),
    (np.ones((0, 4)), r"^layer_norm: .* \(0, 4\)"),
    (np.array(1.0), r"^layer_norm: .* \(\)"),
    (torch.ones((2, 0), dtype=torch.float64), r"^layer_norm: .* \(2, 0\)"),
])
def test_bad_shapes_are_value_errors_naming_the_op_and_shape(arm_runtimes, x, message) -> None:
    for rt in arm_runtimes.values():
        with pytest.raises(ValueError, match=message):
            rt.run("layer_norm", x)


@pytest.mark.parametrize(("x", "message"), [
    (np.ones((2, 3), np.int32), r"^layer_norm: expected float32 or float64 .* int32 array "
                                r"\(2, 3\)"),
    (np.ones(3, np.float16), r"^layer_norm: expected float32 or float64 .* float16 array"),
    (torch.ones(3, dtype=torch.int16), r"^layer_norm: expected .* torch.int16 tensor"),
    ([1.0, 2.0], r"^layer_norm: expected .* got list"),
])
def test_bad_types_are_type_errors_naming_the_op_and_input(arm_runtimes, x, message) -> None:
    for rt in arm_runtimes.values():
        with pytest.raises(TypeError, match=message):
            rt.run("layer_norm", x)


def test_registered_with_size_and_kind(arm_runtimes) -> None:
    op = arm_runtimes[ar.Backend.SIMD].operation("layer_norm")
    assert op.kind.value == "vector"
    assert set(op.backends) >= set(CPU_ARMS)
    assert op.size_of(np.ones((3, 4, 5))) == 60
