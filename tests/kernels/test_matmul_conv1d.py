"""``matmul`` and ``conv1d``: every CPU arm equals numpy (float64 reference), for numpy and
torch inputs of both dtypes, contiguous or not; bad inputs are clear errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from harness import DTYPES, SIZES, OpCase, check_every_arm, check_result
from hypothesis import given
from hypothesis import strategies as st

import adaptive_runtime as ar
from adaptive_runtime.operations import DeviceProbe

CPU_ARMS = (ar.Backend.SCALAR, ar.Backend.SIMD)


def _normal(rng: np.random.Generator, shape: tuple[int, ...], dtype) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def _matmul_shapes(n: int) -> tuple[int, int, int]:
    """(m, k, n) from the harness size, small enough for the SCALAR triple loop."""
    return n % 17 + 1, (n * 7) % 29 + 1, (n * 13) % 19 + 1


def _matmul_args(rng, n, dtype):
    m, k, q = _matmul_shapes(n)
    return _normal(rng, (m, k), dtype), _normal(rng, (k, q), dtype)


def _fixed_matmul(m: int, k: int, n: int) -> OpCase:
    return OpCase("matmul",
                  lambda rng, _, dt: (_normal(rng, (m, k), dt), _normal(rng, (k, n), dt)),
                  np.matmul, terms=lambda args: args[0].shape[1])


def _conv1d_args(rng, n, dtype):
    # k = 1, k = n, k = n - 1 (two outputs), even and odd small k, numpy's k <= 11 / k >= 12
    # boundary, and a random k; all at most n.
    k = rng.choice([1, 2, 3, 8, 11, 12, 31, n, n - 1, rng.integers(1, min(n, 64) + 1)])
    return _normal(rng, (n,), dtype), _normal(rng, (int(min(max(k, 1), n)),), dtype)


def _fixed_conv1d(k_of_n) -> OpCase:
    return OpCase("conv1d", lambda rng, n, dt: (_normal(rng, (n,), dt),
                                                _normal(rng, (k_of_n(n),), dt)),
                  _correlate, terms=lambda args: args[1].size)


def _correlate(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return np.correlate(x, w, mode="valid")


MATMUL = OpCase("matmul", _matmul_args, np.matmul, terms=lambda args: args[0].shape[1])
CONV1D = OpCase("conv1d", _conv1d_args, _correlate, terms=lambda args: args[1].size)


@pytest.mark.parametrize("case", [MATMUL, CONV1D], ids=lambda c: c.name)
@given(n=SIZES, dtype=st.sampled_from(DTYPES), kind=st.sampled_from(["numpy", "torch"]),
       seed=st.integers(0, 2**16))
def test_every_cpu_arm_matches_numpy(choice_runtimes, case, n, dtype, kind, seed) -> None:
    check_every_arm(choice_runtimes, case, n, dtype, kind, seed)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1, 1), (1, 50, 1), (40, 1, 30), (64, 64, 64), (3, 100, 70),
                                   (65, 33, 1)])
def test_matmul_fixed_shapes(choice_runtimes, shape, dtype, kind) -> None:
    check_every_arm(choice_runtimes, _fixed_matmul(*shape), 0, dtype, kind, seed=sum(shape))


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 2, 7, 64, 1000, 5000])
@pytest.mark.parametrize("k_of_n", [lambda n: 1, lambda n: n, lambda n: min(n, 2),
                                    lambda n: min(n, 5), lambda n: min(n, 16),
                                    lambda n: (n + 1) // 2],
                         ids=["k=1", "k=n", "k=2", "k=5", "k=16", "k=n/2"])
def test_conv1d_kernel_lengths(choice_runtimes, k_of_n, n, dtype, kind) -> None:
    check_every_arm(choice_runtimes, _fixed_conv1d(k_of_n), n, dtype, kind, seed=n)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_non_contiguous_inputs(arm_runtimes, dtype, kind) -> None:
    rng = np.random.default_rng(3)
    a = _normal(rng, (30, 20), dtype)
    b = _normal(rng, (60, 50), dtype)
    x = _normal(rng, (3000,), dtype)
    w = _normal(rng, (14,), dtype)
    if kind == "numpy":
        views = (a.T, b[::2, 1::3], x[::3], w[::-2])  # transposed, strided, reversed
    else:  # torch has no negative strides
        ta, tb, tx, tw = (torch.from_numpy(v) for v in (a, b, x, w))
        views = (ta.T, tb[::2, 1::3], tx[::3], tw[1::2])
        assert not any(v.is_contiguous() for v in views)
    expected = tuple(np.asarray(v) for v in views)  # numpy views of the same elements
    for arm, rt in arm_runtimes.items():
        try:
            check_result(MATMUL, expected[:2], kind, rt.run("matmul", *views[:2]))
            check_result(CONV1D, expected[2:], kind, rt.run("conv1d", *views[2:]))
        except AssertionError as exc:
            raise AssertionError(f"{arm.value}: {exc}") from exc


def test_results_keep_float32(arm_runtimes) -> None:
    a = np.ones((3, 4), np.float32)
    x = np.ones(10, np.float32)
    for rt in arm_runtimes.values():
        assert rt.run("matmul", a, a.T).dtype == np.float32
        assert rt.run("conv1d", x, x[:3]).dtype == np.float32
        tx = torch.from_numpy(x)
        assert rt.run("conv1d", tx, tx[:3]).dtype == torch.float32


@pytest.mark.parametrize(("op", "args", "message"), [
    ("matmul", (np.ones((2, 3)), np.ones((4, 5))),
     r"^matmul: expected non-empty 2-D arrays \(m, k\) and \(k, n\), got shapes \(2, 3\) and "
     r"\(4, 5\)"),
    ("matmul", (np.ones((0, 3)), np.ones((3, 2))), r"^matmul: .* \(0, 3\) and \(3, 2\)"),
    ("matmul", (np.ones((2, 0)), np.ones((0, 2))), r"^matmul: .* \(2, 0\) and \(0, 2\)"),
    ("matmul", (np.ones(3), np.ones((3, 2))), r"^matmul: .* \(3,\) and \(3, 2\)"),
    ("matmul", (np.ones((2, 2, 2)), np.ones((2, 2))), r"^matmul: .* \(2, 2, 2\) and \(2, 2\)"),
    ("conv1d", (np.ones(3), np.ones(4)),
     r"^conv1d: expected 1-D x of length n and 1-D w of length k, 1 <= k <= n \(or the "
     r"batched form: 3-D x and w\), got shapes \(3,\) and \(4,\)"),
    ("conv1d", (np.ones(0), np.ones(0)), r"^conv1d: .* \(0,\) and \(0,\)"),
    ("conv1d", (np.ones(5), np.ones(0)), r"^conv1d: .* \(5,\) and \(0,\)"),
    ("conv1d", (np.ones((4, 4)), np.ones(2)), r"^conv1d: .* \(4, 4\) and \(2,\)"),
    ("conv1d", (np.ones(4), np.ones((1, 2))), r"^conv1d: .* \(4,\) and \(1, 2\)"),
])
def test_bad_shapes_are_value_errors_naming_the_op_and_shapes(arm_runtimes, op, args,
                                                               message) -> None:
    for rt in arm_runtimes.values():
        with pytest.raises(ValueError, match=message):
            rt.run(op, *args)
        with pytest.raises(ValueError, match=message):
            rt.run(op, *(torch.from_numpy(a) for a in args))


@pytest.mark.parametrize("op", ["matmul", "conv1d"])
@pytest.mark.parametrize(("make", "message"), [
    (lambda s: (np.ones(s, np.int64), np.ones(s, np.int64)),
     r"expected float32 or float64 .* int64 array"),
    (lambda s: (torch.ones(s, dtype=torch.uint8), torch.ones(s, dtype=torch.uint8)),
     r"expected float32 or float64 .* torch.uint8 tensor"),
    (lambda s: (np.ones(s, np.float32), np.ones(s)), r"inputs must share one dtype"),
    (lambda s: (np.ones(s), torch.ones(s, dtype=torch.float64)), r"inputs must be all numpy"),
    (lambda s: (torch.ones(s, dtype=torch.float64), np.ones(s)), r"inputs must be all numpy"),
    (lambda s: (np.ones(s).tolist(), np.ones(s)), r"expected .* got list, float64 array"),
])
def test_bad_types_are_type_errors_naming_the_op_and_inputs(arm_runtimes, op, make,
                                                             message) -> None:
    args = make((2, 2) if op == "matmul" else (2,))
    for rt in arm_runtimes.values():
        with pytest.raises(TypeError, match=f"^{op}: {message}"):
            rt.run(op, *args)


def test_registered_with_size_and_kind(arm_runtimes) -> None:
    rt = arm_runtimes[ar.Backend.SIMD]
    for name in ("matmul", "conv1d"):
        op = rt.operation(name)
        assert op.kind.value == "matrix"
        assert set(op.backends) >= set(CPU_ARMS)
    assert rt.operation("matmul").size_of(np.ones((2, 3)), np.ones((3, 5))) == 30
    assert rt.operation("conv1d").size_of(np.ones(10), np.ones(3)) == 24


def test_conv1d_with_two_paddings_on_one_key_answers_both() -> None:
    # One size bucket, two paddings: outputs of 254 and 256 columns. While the result check
    # took the padding by type alone, the second padding's answers looked like wrong shapes
    # and every arm was quarantined (AllBackendsFailedError).
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(), devices=DeviceProbe(gpu=False))
    rng = np.random.default_rng(0)
    x, w = _normal(rng, (2, 4, 256), np.float64), _normal(rng, (8, 4, 3), np.float64)
    for padding in (0, 1) * 20:
        y = rt.run("conv1d", x, w, None, padding)
        np.testing.assert_allclose(y, torch.nn.functional.conv1d(
            torch.from_numpy(x), torch.from_numpy(w), padding=padding).numpy(), rtol=1e-10)
    assert rt.fallback_counts() == {}
    assert sum(r.failures for r in rt.history_snapshot()) == 0
