"""Adapted models and the functional ops under ``torch.autocast`` on the CPU: the dtypes and
(within the dtype's tolerance) the values plain torch gives, forward and backward, keys
learned at the dtype autocast runs each op in, and a ``GradScaler`` training loop."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import nn

import adaptive_runtime as ar
import adaptive_runtime.torch as art

LOW = [torch.bfloat16, torch.float16]
# one rounding of the low-precision dtype, a few times over (bfloat16 keeps 8 bits)
TOLERANCE = {torch.bfloat16: {"rtol": 3e-2, "atol": 3e-2},
             torch.float16: {"rtol": 3e-3, "atol": 3e-3}}


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.LayerNorm(128), nn.GELU(), nn.Linear(128, 64),
                         nn.ReLU(), nn.Linear(64, 10), nn.Softmax(dim=-1))


def _x(batch: int = 32) -> torch.Tensor:
    return torch.randn(batch, 64, generator=torch.Generator().manual_seed(1))


@pytest.fixture
def rt(monkeypatch) -> ar.AdaptiveRuntime:
    runtime = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    monkeypatch.setattr("adaptive_runtime.torch.get_runtime", lambda: runtime)
    return runtime


def _layer_dtypes(model: nn.Module, x: torch.Tensor, dtype: torch.dtype) -> list[Any]:
    """Each layer's output dtype, ``model(x)`` run under CPU autocast at ``dtype``."""
    seen: list[Any] = []
    hooks = [m.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
             for m in model]
    with torch.autocast("cpu", dtype=dtype):
        model(x)
    for h in hooks:
        h.remove()
    return seen


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_an_adapted_model_under_autocast_gives_plain_torchs_dtypes_and_values(rt, dtype):
    plain = _model()
    adapted = art.adapt(copy.deepcopy(plain))
    x = _x()
    assert _layer_dtypes(adapted, x, dtype) == _layer_dtypes(plain, x, dtype)
    weights = torch.randn(32, 10, generator=torch.Generator().manual_seed(2))
    outs = []
    for model in (plain, adapted):
        with torch.autocast("cpu", dtype=dtype):
            out = model(x)
        (out.float() * weights).sum().backward()
        outs.append(out)
    assert outs[1].dtype == outs[0].dtype == dtype
    torch.testing.assert_close(outs[1], outs[0], **TOLERANCE[dtype])
    for p, q in zip(plain.parameters(), adapted.parameters(), strict=True):
        assert q.grad.dtype == p.grad.dtype == torch.float32  # (the parameters' own dtype)
        torch.testing.assert_close(q.grad, p.grad, **TOLERANCE[dtype])


def test_autocast_keys_are_learned_at_the_dtype_autocast_runs_them_in(rt):
    model = art.adapt(_model())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(_x()).float().sum().backward()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=False):  # (switched off inside)
        model(_x())
    operations = {k.operation for k in rt.selection_counts()}
    assert {"linear@torch:bfloat16+grad", "layer_norm@torch:bfloat16+grad",
            "gelu@torch:bfloat16+grad", "softmax@torch:bfloat16+grad"} <= operations
    assert {"linear@torch+grad", "softmax@torch+grad"} <= operations  # autocast off: float32


def test_the_functional_ops_cast_as_the_adapted_modules_do(rt):
    x, weight = torch.randn(10, 100), torch.randn(3, 100)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = nn.functional.linear(x, weight)
        got = art.linear(x, weight)
        soft = art.softmax(got, dim=0)  # (another axis: moved to the last and back)
    assert got.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(got, expected, **TOLERANCE[torch.bfloat16])
    assert soft.dtype == torch.softmax(expected, 0).dtype
    assert rt.stats().calls("linear@torch:bfloat16") == 1


@pytest.mark.parametrize("arm", [ar.Backend.SIMD, ar.Backend.SCALAR], ids=lambda a: a.value)
def test_an_op_autocast_promotes_runs_at_the_promoted_dtype_on_every_arm(monkeypatch, arm):
    """``add`` of a bfloat16 and a float32 tensor: torch promotes to float32 under autocast,
    where the numba arm competes too; each arm gives plain torch's dtype and values."""
    runtime = ar.AdaptiveRuntime(ar.RuntimeConfig(force_backend=arm, tracing=False))
    monkeypatch.setattr("adaptive_runtime.torch.get_runtime", lambda: runtime)
    a = torch.randn(1000).to(torch.bfloat16)
    b = torch.randn(1000)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = torch.add(a, b)
        got = art.add(a, b)
    assert got.dtype == expected.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert runtime.stats().calls("add@torch", arm) == 1


def test_a_gradscaler_training_loop_under_float16_autocast_trains_like_plain_torch(rt):
    plain = _model()
    adapted = art.adapt(copy.deepcopy(plain))
    runs = []
    for model in (plain, adapted):
        opt = torch.optim.SGD(model.parameters(), lr=0.2)
        scaler = torch.amp.GradScaler("cpu")
        losses = []
        for step in range(5):
            x = _x(16 + step)
            target = torch.arange(x.shape[0]) % 10
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.float16):
                loss = nn.functional.nll_loss(torch.log(model(x).float()), target)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            losses.append(loss.item())
        runs.append(losses)
    assert runs[1] == pytest.approx(runs[0], rel=1e-2)
    assert runs[1][-1] < runs[1][0]  # it trained
    for p, q in zip(plain.parameters(), adapted.parameters(), strict=True):
        # (five steps of float16 rounding, LayerNorm's weights cast to float16 where plain
        # torch keeps them float32 inside the kernel)
        torch.testing.assert_close(q, p, rtol=1e-2, atol=1e-2)


def test_under_torch_compile_and_autocast_the_compiled_model_gives_plain_torchs_dtype():
    plain = _model()
    adapted = art.adapt(copy.deepcopy(plain))
    compiled = torch.compile(adapted, backend="aot_eager", fullgraph=True)  # no C compiler
    x = _x()
    outs = []
    for model in (plain, compiled):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(x)
        out.float()[:, 0].sum().backward()
        outs.append(out)
    assert outs[1].dtype == outs[0].dtype == torch.bfloat16
    torch.testing.assert_close(outs[1], outs[0], **TOLERANCE[torch.bfloat16])
    for p, q in zip(plain.parameters(), adapted.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, **TOLERANCE[torch.bfloat16])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_on_a_real_cuda_device_an_adapted_model_under_autocast_matches_plain_torch(rt, dtype):
    plain = _model().cuda()
    adapted = art.adapt(copy.deepcopy(plain))
    x = _x().cuda()
    outs = []
    for model in (plain, adapted):
        with torch.autocast("cuda", dtype=dtype):
            out = model(x)
        out.float().sum().backward()
        outs.append(out)
    assert outs[1].dtype == outs[0].dtype
    torch.testing.assert_close(outs[1], outs[0], **TOLERANCE[dtype])
    for p, q in zip(plain.parameters(), adapted.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, **TOLERANCE[dtype])
