"""``adapt()`` on a Hugging Face model built from a config (no download): its
``GELUActivation`` modules run as the runtime's exact ``gelu`` and the model computes what it
did; the tanh approximations, which the runtime has no operation for, are left and named."""

from __future__ import annotations

import copy
import logging
import pickle

import torch
import transformers
from transformers.activations import GELUActivation, NewGELUActivation

import adaptive_runtime as ar
import adaptive_runtime.torch as art


def _bert(hidden_act: str = "gelu") -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=48,
                                     max_position_embeddings=16, hidden_act=hidden_act)
    return transformers.BertModel(config).eval()


def _ids() -> torch.Tensor:
    return torch.randint(0, 64, (3, 12), generator=torch.Generator().manual_seed(1))


def test_bert_gelu_activations_are_adapted_and_compute_as_before(caplog) -> None:
    plain = _bert()
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    with caplog.at_level(logging.INFO, logger="adaptive_runtime.torch"):
        adapted = art.adapt(copy.deepcopy(plain), runtime=rt)
    gelus = [m for m in adapted.modules() if isinstance(m, GELUActivation)]
    assert len(gelus) == 2  # one per layer's intermediate
    assert all(type(m).__name__ == "AdaptiveGELUActivation" for m in gelus)
    with torch.no_grad():
        for _ in range(8):  # (the runtime explores its arms: every one computes the same)
            expected = plain(_ids()).last_hidden_state
            got = adapted(_ids()).last_hidden_state
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert rt.stats().calls("gelu@torch") > 0, rt.stats().selections
    # gradients through the adapted GELUs are the plain ones
    for model in (plain, adapted):
        model(_ids()).last_hidden_state.pow(2).mean().backward()
    for (name, p), q in zip(plain.named_parameters(), adapted.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-6, msg=name)
    [line] = [r.getMessage() for r in caplog.records]
    assert "GELUActivation 2" in line.split(";")[0], line  # swapped
    assert "Embedding 3 (no adaptive operation)" in line, line  # left, by class and count


def test_tanh_approximations_are_left_and_named_in_the_log(caplog) -> None:
    with caplog.at_level(logging.INFO, logger="adaptive_runtime.torch"):
        model = art.adapt(_bert("gelu_new"))
    assert all(type(m) is NewGELUActivation for m in model.modules()
               if isinstance(m, NewGELUActivation))
    [line] = [r.getMessage() for r in caplog.records]
    assert "NewGELUActivation 2 (the tanh approximation of GELU" in line, line


def test_an_adapted_hugging_face_model_pickles_and_unpickles_in_a_new_process(
        monkeypatch) -> None:
    model = art.adapt(_bert())
    pickled = pickle.dumps(model)
    # as a new process finds it: adapt() has not made the adapted class there
    monkeypatch.delattr(art, "AdaptiveGELUActivation")
    again = pickle.loads(pickled)
    assert type(again.encoder.layer[0].intermediate.intermediate_act_fn).__name__ == \
        "AdaptiveGELUActivation"
    with torch.no_grad():
        torch.testing.assert_close(again(_ids()).last_hidden_state,
                                   model(_ids()).last_hidden_state)
