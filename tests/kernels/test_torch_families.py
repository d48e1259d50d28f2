"""torch tensors: learned apart from numpy arrays, ATen always a candidate, autograd intact.

Gradients are checked with ``torch.autograd.gradcheck`` in float64 on every CPU arm of every
operation: forcing SIMD runs ATen (autograd records its own backward), forcing SCALAR runs
the numba loops inside an autograd function whose backward is itself adaptive (the backward
operations, forced onto SCALAR too, or matmuls and convolutions)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from harness import FAMILY_CPU_ARMS, forced_pairs

import adaptive_runtime as ar
from adaptive_runtime.kernels import RECORDS, torch_arms

Backend = ar.Backend


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _away_from_zero(x: torch.Tensor) -> torch.Tensor:
    # relu's derivative jumps at 0: finite differences there say nothing
    return torch.where(x.abs() < 0.1, x + 0.3 * torch.sign(x + 1e-12), x)


def _r(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float64, generator=_gen(seed))


# operation -> inputs (float64; tensors get requires_grad where gradcheck needs them)
CASES: dict[str, Callable[[], tuple[Any, ...]]] = {
    "dot": lambda: (_r(7), _r(7, seed=1)),
    "add": lambda: (_r(3, 4), _r(3, 4, seed=1)),
    "scale": lambda: (2.5, _r(5), _r(5, seed=1)),
    "sum": lambda: (_r(3, 4),),
    "relu": lambda: (_away_from_zero(_r(4, 5)),),
    "gelu": lambda: (_r(4, 5) * 2,),
    "softmax": lambda: (_r(3, 6) * 2,),
    "layer_norm": lambda: (_r(3, 6) * 3 + 1,),
    "layer_norm/affine": lambda: (_r(2, 3, 6), _r(6, seed=1), _r(6, seed=2)),
    "layer_norm/weight-eps": lambda: (_r(4, 6), _r(6, seed=1), None, 1e-3),
    "layer_norm/bias": lambda: (_r(4, 6), None, _r(6, seed=2)),
    "matmul": lambda: (_r(3, 4), _r(4, 5, seed=1)),
    "linear": lambda: (_r(2, 3, 4), _r(5, 4, seed=1), _r(5, seed=2)),
    "linear/no-bias": lambda: (_r(6, 4), _r(3, 4, seed=1)),
    "conv1d": lambda: (_r(9), _r(3, seed=1)),
    "conv1d/batched": lambda: (_r(2, 3, 8), _r(4, 3, 3, seed=1), _r(4, seed=2), 1),
    "conv1d/batched-valid": lambda: (_r(2, 2, 6), _r(3, 2, 4, seed=1)),
}


def _grad_inputs(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(a.detach().requires_grad_() if isinstance(a, torch.Tensor) else a
                 for a in args)


@pytest.fixture(scope="module")
def forced() -> dict[Backend, ar.AdaptiveRuntime]:
    return {arm: ar.AdaptiveRuntime(ar.RuntimeConfig(force_backend=arm, tracing=False))
            for arm in FAMILY_CPU_ARMS}  # type: ignore[misc]


@pytest.mark.parametrize(("case", "arm"), forced_pairs(sorted(CASES), "torch+grad"))
def test_gradcheck_in_float64_on_every_arm(forced, case, arm) -> None:
    rt = forced[arm]
    op = case.split("/")[0]
    args = _grad_inputs(CASES[case]())
    out = rt.run(op, *args)
    assert out.grad_fn is not None, "the graph was cut"
    assert torch.autograd.gradcheck(lambda *a: rt.run(op, *a), args, eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("arm", FAMILY_CPU_ARMS, ids=str)
def test_the_scalar_arm_under_autograd_runs_an_adaptive_backward(forced, arm) -> None:
    rt = forced[arm]
    x = _grad_inputs((_r(4, 5),))[0]
    before = _calls(rt, "gelu.backward@torch")
    rt.run("gelu", x).sum().backward()
    ran_backward_op = _calls(rt, "gelu.backward@torch") - before
    # ATen records its own backward; numba's autograd function calls the adaptive op
    assert ran_backward_op == (0 if arm is Backend.SIMD else 1)
    torch.testing.assert_close(x.grad, torch.ops.aten.gelu_backward(torch.ones(4, 5,
                                                                               dtype=x.dtype),
                                                                    x.detach()))


def _calls(rt: ar.AdaptiveRuntime, operation: str) -> int:
    return sum(n for k, n in rt.selection_counts().items() if k.operation == operation)


# ATen's call of every backward operation, from the records
_ATEN_BACKWARD = {r.backward.name: r.backward.aten for r in RECORDS if r.backward is not None}
# (forward, output): the backward operations that take the forward's output
_OF_OUTPUT = {r.backward.name: r.aten for r in RECORDS
              if r.backward is not None and r.backward_needs == "output"}


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize(("name", "arm"), forced_pairs(list(_ATEN_BACKWARD), "torch"))
def test_every_backward_operation_equals_atens_on_every_arm(forced, name, kind, arm) -> None:
    g, x = _r(3, 7, seed=3), _r(3, 7, seed=4) * 2
    if name in _OF_OUTPUT:
        x = _OF_OUTPUT[name](x)  # its backward takes the forward's output
    args: tuple[Any, ...] = (g, x)
    weighted = name == "layer_norm.backward"
    if weighted:
        args = (g, x, _r(7, seed=5), 1e-5)
    expected = _ATEN_BACKWARD[name](*args)
    inputs = tuple(a.numpy() if kind == "numpy" and isinstance(a, torch.Tensor) else a
                   for a in args)
    got = forced[arm].run(name, *inputs)
    for e, r in zip(expected if weighted else (expected,), got if weighted else (got,),
                    strict=True):
        assert isinstance(r, np.ndarray if kind == "numpy" else torch.Tensor)
        np.testing.assert_allclose(np.asarray(r), e.numpy(), rtol=1e-9, atol=1e-9)


def test_torch_tensors_are_learned_apart_from_numpy_arrays() -> None:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    x = np.random.default_rng(0).standard_normal((16, 64))
    for _ in range(10):
        rt.run("gelu", x)
        rt.run("gelu", torch.from_numpy(x))
        with torch.no_grad():
            rt.run("gelu", torch.from_numpy(x).requires_grad_())
    ops = {r.operation for r in rt.history_snapshot()}
    assert {"gelu", "gelu@torch"} <= ops and "gelu@torch+grad" not in ops


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_runs_only_on_arms_that_compute_in_it(dtype) -> None:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    x = torch.randn(8, 32, generator=_gen(1)).to(dtype)
    w = torch.randn(16, 32, generator=_gen(2)).to(dtype).requires_grad_()
    for _ in range(8):
        y = rt.run("linear", x, w)
        assert y.dtype == dtype and y.grad_fn is not None
        y.float().sum().backward()
        assert rt.run("gelu", x).dtype == dtype
    family = str(dtype)[6:]
    rows = {(r.operation, r.backend) for r in rt.history_snapshot() if r.samples}
    assert rows == {(f"linear@torch:{family}+grad", Backend.SIMD),
                    (f"gelu@torch:{family}", Backend.SIMD)}
    torch.testing.assert_close(rt.run("gelu", x), torch.nn.functional.gelu(x))
    with pytest.raises(ar.BackendUnavailableError, match=f"gelu@torch:{family}"):
        ar.AdaptiveRuntime(ar.RuntimeConfig(force_backend="scalar")).run("gelu", x)


def test_add_through_ar_ops_keeps_the_graph_so_the_weight_learns() -> None:
    """The bug that opened the issue: ``ar.ops.add(x, w)`` cut the graph."""
    x = torch.randn(64, generator=_gen(3))
    w = torch.zeros(64, requires_grad=True)
    for _ in range(40):  # exploration included: every arm keeps the graph
        w.grad = None
        out = ar.ops.add(x, w)
        assert out.grad_fn is not None
        (out * out).sum().backward()
        torch.testing.assert_close(w.grad, 2 * (x + w.detach()))


def test_inference_mode_gets_no_graph() -> None:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    x = torch.randn(4, 8, generator=_gen(4), requires_grad=True)
    with torch.inference_mode():
        for _ in range(5):
            assert rt.run("relu", x).grad_fn is None
    assert {r.operation for r in rt.history_snapshot()} == {"relu@torch"}


def test_the_first_aten_arm_call_primes_float64_gelu_once(monkeypatch) -> None:
    """ATen's float64 gelu runs ~6x slower until it has once seen a value near zero (see
    ``torch_arms._prime_gelu``): the arms' first call runs it on float64 zeros, once."""
    from adaptive_runtime.kernels.gelu import gelu_through_torch

    seen: list[torch.Tensor] = []
    real_gelu = torch.nn.functional.gelu

    def recording_gelu(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        seen.append(x.clone())
        return real_gelu(x, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "gelu", recording_gelu)
    monkeypatch.setattr(torch_arms, "_modules", [])  # as in a process whose arms never ran
    x = np.random.default_rng(0).standard_normal(100)
    for _ in range(3):
        np.testing.assert_array_equal(gelu_through_torch(x), real_gelu(torch.from_numpy(x)))
    primer, *calls = seen
    assert primer.dtype == torch.float64 and primer.numel() >= 16
    assert not primer.any()
    assert len(calls) == 3 and all(torch.equal(c, torch.from_numpy(x)) for c in calls)


def test_a_failing_primer_leaves_the_arms_working(monkeypatch) -> None:
    from adaptive_runtime.kernels.gelu import gelu_through_torch

    real_gelu = torch.nn.functional.gelu

    def gelu_refusing_zeros(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if not x.any():
            raise RuntimeError("no kernel for this build")
        return real_gelu(x, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "gelu", gelu_refusing_zeros)
    monkeypatch.setattr(torch_arms, "_modules", [])
    x = np.random.default_rng(1).standard_normal(50)
    np.testing.assert_array_equal(gelu_through_torch(x), real_gelu(torch.from_numpy(x)))
