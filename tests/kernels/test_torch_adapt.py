"""``adaptive_runtime.torch``: adapted models compute what the plain ones do, train the same,
keep their parameters, and work under ``torch.compile`` and without grad."""

from __future__ import annotations

import copy
import logging

import pytest
import torch
from torch import nn

import adaptive_runtime as ar
import adaptive_runtime.torch as art


def _model(dtype: torch.dtype = torch.float64) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv1d(2, 3, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(24, 16),
        nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 5), nn.Softmax(dim=-1)).to(dtype)


def _x(batch: int = 4, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(batch, 2, 8, dtype=dtype, generator=torch.Generator().manual_seed(1))


def test_adapt_swaps_supported_modules_in_place_and_keeps_parameters() -> None:
    model = _model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    params = [id(p) for p in model.parameters()]
    assert art.adapt(model) is model
    kinds = [type(m).__name__ for m in model]
    assert kinds == ["AdaptiveConv1d", "AdaptiveReLU", "Flatten", "AdaptiveLinear",
                     "AdaptiveLayerNorm", "AdaptiveGELU", "AdaptiveLinear", "AdaptiveSoftmax"]
    assert [id(p) for p in model.parameters()] == params
    after = model.state_dict()
    assert list(after) == list(before)
    for key, value in before.items():
        assert torch.equal(after[key], value)
    assert isinstance(model[3], nn.Linear)  # still a Linear for any isinstance check


def test_unsupported_configurations_are_left_alone_and_logged_once(caplog) -> None:
    model = nn.Sequential(nn.GELU(approximate="tanh"), nn.Conv1d(1, 1, 3, stride=2),
                          nn.LayerNorm((2, 3)), nn.Softmax(), nn.Conv1d(1, 1, 3, padding="valid"),
                          nn.Dropout(), nn.Dropout())
    with caplog.at_level(logging.INFO, logger="adaptive_runtime.torch"):
        art.adapt(model)
    assert [type(m).__name__ for m in model] == ["GELU", "Conv1d", "LayerNorm", "Softmax",
                                                 "AdaptiveConv1d", "Dropout", "Dropout"]
    [line] = [r.getMessage() for r in caplog.records]  # one line for the whole model
    assert "swapped Conv1d 1;" in line
    for left in ("GELU 1 (approximate='tanh')", "Conv1d 1 (stride=(2,)",
                 "LayerNorm 1 (normalized_shape=(2, 3)", "Softmax 1 (dim=None",
                 "Dropout 2 (no adaptive operation)"):
        assert left in line, line
    assert "Sequential" not in line  # (a container is not left out: its children are)


def test_an_adapted_model_computes_and_trains_like_the_plain_one() -> None:
    plain = _model()
    adapted = art.adapt(copy.deepcopy(plain))
    optimisers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (plain, adapted)]
    for step in range(30):  # long enough for every key to explore both CPU arms
        x = _x(4 + step % 3)
        target = torch.arange(x.shape[0]) % 5
        losses = []
        for model, opt in zip((plain, adapted), optimisers, strict=True):
            opt.zero_grad()
            loss = nn.functional.nll_loss(torch.log(model(x)), target)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[1] == pytest.approx(losses[0], rel=1e-9), step
    for p, q in zip(plain.parameters(), adapted.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("arm", [ar.Backend.SIMD, ar.Backend.SCALAR], ids=lambda a: a.value)
def test_gradients_of_an_adapted_model_on_each_arm_equal_the_plain_ones(monkeypatch,
                                                                        arm) -> None:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(force_backend=arm, tracing=False))
    monkeypatch.setattr("adaptive_runtime.torch.get_runtime", lambda: rt)
    plain = _model()
    adapted = art.adapt(copy.deepcopy(plain))
    for model in (plain, adapted):
        model(_x()).pow(2).sum().backward()
    for p, q in zip(plain.parameters(), adapted.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-9, atol=1e-12)


def test_under_torch_compile_the_ops_are_opaque_and_gradients_match() -> None:
    plain = _model()
    adapted = art.adapt(copy.deepcopy(plain))
    compiled = torch.compile(adapted, backend="aot_eager", fullgraph=True)  # no C compiler
    x = _x()
    torch.testing.assert_close(compiled(x), plain(x))
    compiled(x)[:, 0].sum().backward()
    plain(x)[:, 0].sum().backward()
    for p, q in zip(plain.parameters(), adapted.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-9, atol=1e-12)


def test_no_grad_and_inference_mode_record_nothing() -> None:
    model = art.adapt(_model(torch.float32))
    x = _x(dtype=torch.float32)
    with torch.no_grad():
        assert model(x).grad_fn is None
    with torch.inference_mode():
        assert model(x).grad_fn is None


def test_softmax_over_another_dim_and_the_functional_ops() -> None:
    x = torch.randn(2, 3, 4, dtype=torch.float64)
    torch.testing.assert_close(art.softmax(x, 1), torch.softmax(x, 1))
    torch.testing.assert_close(art.relu(x), torch.relu(x))
    torch.testing.assert_close(art.add(x, x), 2 * x)
    torch.testing.assert_close(art.matmul(x[0], x[1].T), x[0] @ x[1].T)


def test_adapt_wants_a_module() -> None:
    with pytest.raises(TypeError, match=r"torch\.nn\.Module"):
        art.adapt("model")  # type: ignore[arg-type]


def test_a_parametrized_weight_is_read_through_its_parametrization() -> None:
    class Doubled(nn.Module):
        def forward(self, weight: torch.Tensor) -> torch.Tensor:
            return 2 * weight

    plain = nn.Linear(4, 3).double()
    adapted = art.adapt(copy.deepcopy(plain))
    torch.nn.utils.parametrize.register_parametrization(adapted, "weight", Doubled())
    x = torch.randn(5, 4, dtype=torch.float64)
    expected = x @ (2 * plain.weight).T + plain.bias
    torch.testing.assert_close(adapted(x), expected)
    adapted(x).sum().backward()
    assert adapted.parametrizations.weight.original.grad is not None


def test_a_backward_pass_that_outlives_its_runtime_runs_on_the_default_one() -> None:
    """The backward arms hold their runtime weakly; once it is gone, the runtime handed to the
    kernels at registration (the process default) runs the backward, with the same gradient."""
    import gc
    import weakref

    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    x = torch.randn(64, dtype=torch.float64, requires_grad=True)
    y = rt.run("relu", x)
    gone = weakref.ref(rt)
    del rt
    gc.collect()
    assert gone() is None
    before = sum(n for key, n in ar.get_runtime().selection_counts().items()
                 if key.operation.startswith("relu.backward"))
    y.sum().backward()
    assert torch.equal(x.grad, (x > 0).double())
    after = sum(n for key, n in ar.get_runtime().selection_counts().items()
                if key.operation.startswith("relu.backward"))
    assert after == before + 1


def test_an_adapted_model_that_has_run_pickles_and_deep_copies() -> None:
    """``torch.save(model)`` and ``copy.deepcopy`` (an EMA copy) after training steps: the
    call site each adapted module keeps (a cache of this process's runtime) is left behind and
    made again on the copy's first call."""
    import io
    import pickle

    model = art.adapt(_model())
    x = _x()
    expected = model(x)
    expected.sum().backward()
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    for copied in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model),
                   torch.load(buffer, weights_only=False)):
        assert [type(m).__name__ for m in copied] == [type(m).__name__ for m in model]
        assert copied[3]._adaptive_site is None
        torch.testing.assert_close(copied(x), expected)
        assert copied[3]._adaptive_site is not None


def test_each_record_that_names_a_torch_module_gets_its_adaptive_class() -> None:
    """The adaptive classes are made from the records (``CustomOp.module``): one per record
    naming a ``torch.nn`` class, a subclass of it that ``adapt`` swaps in."""
    from adaptive_runtime.kernels import RECORDS

    named = {r.custom_op.module.name: r.name for r in RECORDS
             if r.custom_op is not None and r.custom_op.module is not None}
    assert {"Linear", "GELU", "ReLU", "Softmax", "LayerNorm", "Conv1d"} <= set(named)
    for torch_name in named:
        adaptive = getattr(art, "Adaptive" + torch_name)
        assert adaptive.__bases__[-1] is getattr(nn, torch_name)
        assert adaptive.__module__ == "adaptive_runtime.torch"
        assert "Adaptive" + torch_name in art.__all__
        assert f"``nn.{torch_name}``" in art.adapt.__doc__
