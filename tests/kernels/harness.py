"""What every built-in operation must do, checked the same way for each.

An :class:`OpCase` says how to build valid numpy inputs of a given size and dtype and how to
compute the reference result (numpy, in float64). :func:`check_every_arm` runs the operation
on each forced CPU arm with numpy arrays or torch tensors and asserts the result has the
input's array type, dtype and expected shape, and equals the reference within the dtype's
tolerance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from hypothesis import strategies as st

import adaptive_runtime as ar

DTYPES = (np.float32, np.float64)
# Sizes worth trying: the smallest, odd ones, a power of two and its neighbours, some large.
SIZES = st.one_of(st.integers(1, 40), st.sampled_from([63, 64, 65, 1000, 1023, 4097, 20_000]))


@dataclass(frozen=True)
class OpCase:
    name: str
    make: Callable[[np.random.Generator, int, Any], tuple[Any, ...]]  # (rng, n, dtype) -> args
    reference: Callable[..., Any]  # on float64 copies of the args
    rtol32: float = 1e-4
    rtol64: float = 1e-10
    # absolute tolerance, per unit of the reference's magnitude and of sqrt(terms summed)
    terms: Callable[[tuple[Any, ...]], int] = lambda args: 1


def as_kind(args: tuple[Any, ...], kind: str) -> tuple[Any, ...]:
    """The same arguments as numpy arrays or as torch CPU tensors (scalars unchanged)."""
    if kind == "numpy":
        return args
    return tuple(torch.from_numpy(a.copy()) if isinstance(a, np.ndarray) else a for a in args)


def _float64(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(a.astype(np.float64) if isinstance(a, np.ndarray) else a for a in args)


def check_result(case: OpCase, args: tuple[Any, ...], kind: str, got: Any) -> None:
    """``got`` (from ``args`` as ``kind``) has the right type, dtype, shape and values."""
    dtype = next(a.dtype for a in args if isinstance(a, np.ndarray))
    expected = np.asarray(case.reference(*_float64(args)))
    if kind == "torch":
        assert isinstance(got, torch.Tensor), type(got)
        assert got.dtype == torch.from_numpy(np.zeros(1, dtype)).dtype, got.dtype
        value = got.numpy()
    else:
        assert isinstance(got, np.ndarray | np.floating), type(got)
        assert got.dtype == dtype, got.dtype
        value = np.asarray(got)
    assert value.shape == expected.shape, (value.shape, expected.shape)
    rtol = case.rtol32 if dtype == np.float32 else case.rtol64
    scale = float(np.max(np.abs(expected))) if expected.size else 0.0
    atol = rtol * max(scale, 1.0) * np.sqrt(case.terms(args))
    np.testing.assert_allclose(value, expected, rtol=rtol, atol=atol)


def check_every_arm(runtimes: dict[Any, ar.AdaptiveRuntime], case: OpCase, n: int,
                    dtype: Any, kind: str, seed: int) -> None:
    args = case.make(np.random.default_rng(seed), n, dtype)
    for arm, rt in runtimes.items():
        try:
            got = rt.run(case.name, *as_kind(args, kind))
        except ar.BackendUnavailableError:
            if arm.variant:  # (a variant this operation, or this input family, lacks)
                continue
            raise
        try:
            check_result(case, args, kind, got)
        except AssertionError as exc:
            raise AssertionError(f"{case.name} on {arm.value}, {kind} {np.dtype(dtype)}, "
                                 f"n={n}: {exc}") from exc


# The CPU arms of the torch and JAX families, and the numba threaded loop beside the library's
# own call (an operation without it runs its SIMD arm's primary implementation when forced).
NUMBA = ar.Variant(ar.Backend.SIMD, "numba")
FAMILY_CPU_ARMS = (ar.Backend.SIMD, ar.Backend.SCALAR, NUMBA)


def forced_pairs(names: list[str], family: str) -> list[Any]:
    """pytest parameters (case or operation, choice) for every CPU choice the operation has
    in ``family`` (the numba variant only where the operation has a threaded numba loop)."""
    import pytest

    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    return [pytest.param(name, arm, id=f"{name}-{arm}") for name in names
            for arm in FAMILY_CPU_ARMS
            if arm in rt.operation(name.split("/")[0]).family_twin(family).choices]
