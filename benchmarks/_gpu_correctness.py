"""``make gpu-check``'s correctness rows: the adapted digits MLP against plain torch.

- :func:`training_agrees`: the MLP, adapted and plain, from the same seed and batches, trained
  side by side: every step's loss within the dtype's rounding of plain torch's, and every
  parameter's gradient present and close, in float32 and under ``torch.autocast``. On CUDA the
  adapted steps run under ``torch.cuda.set_sync_debug_mode("error")``: any call that
  synchronises with the device fails the row.
- :func:`capture_agrees`: the adapted MLP's forward captured in a CUDA graph (with nothing
  learned yet, and after the keys committed), replayed on new inputs, against plain torch.

Each also with ``host_arms``: the runtime's ``host_arms_on_device`` on, CPU arms competing for
the device's tensors as round trips through the host (those synchronise by design: the
training row then runs without the sync debug mode).

Both take the device, so the comparison itself runs on the CPU in the tests
(``tests/integration/test_gpu_check.py``); the rows need a CUDA device.
"""

from __future__ import annotations

import copy
from typing import Any

# Tolerances per compute dtype (relative, absolute): float32 differs only in summation order;
# half precision keeps ~3 significant digits.
TOLERANCE = {"float32": (1e-4, 1e-5), "bfloat16": (3e-2, 3e-2), "float16": (1e-2, 1e-2)}


def mlp(torch: Any, device: str) -> Any:
    """The digits MLP of ``gpu_check`` (the same layers: Linear, GELU, LayerNorm, ReLU)."""
    nn = torch.nn
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.LayerNorm(256), nn.Linear(256, 256),
                         nn.ReLU(), nn.Linear(256, 10)).to(device)


def digits(torch: Any, device: str) -> tuple[Any, Any]:
    """scikit-learn's bundled digits (no download) on ``device``: images in [0, 1], labels."""
    from sklearn.datasets import load_digits

    data = load_digits()
    images = torch.tensor(data.data / 16.0, dtype=torch.float32, device=device)
    return images, torch.tensor(data.target, device=device)


def training_agrees(device: str = "cuda", *, steps: int = 200, batch: int = 64,
                    autocast: str | None = None, host_arms: bool = False) -> tuple[str, bool]:
    """Train the MLP adapted and plain side by side for ``steps`` SGD steps (``autocast``: a
    dtype name, the forward under ``torch.autocast``); returns (what was found, whether the
    losses and gradients agree and, on CUDA without ``host_arms``, nothing synchronised)."""
    import torch

    import adaptive_runtime as ar
    import adaptive_runtime.torch as art

    images, labels = digits(torch, device)
    plain = mlp(torch, device)
    runtime = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False, host_arms_on_device=host_arms))
    adapted = art.adapt(copy.deepcopy(plain), runtime=runtime)
    optimisers = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (adapted, plain)]
    rtol, atol = TOLERANCE[autocast or "float32"]
    batches = torch.Generator().manual_seed(1)
    worst_loss = worst_grad = 0.0
    missing = 0
    try:
        for _ in range(steps):
            pick = torch.randint(len(labels), (batch,), generator=batches).to(device)
            x, y = images[pick], labels[pick]
            for optimiser in optimisers:
                optimiser.zero_grad()
            with _no_sync(torch, device if not host_arms else "cpu"):
                loss = _loss(torch, adapted, x, y, device, autocast)
                loss.backward()
            reference = _loss(torch, plain, x, y, device, autocast)
            reference.backward()
            worst_loss = max(worst_loss, _excess(loss, reference, rtol, atol))
            for mine, theirs in zip(adapted.parameters(), plain.parameters(), strict=True):
                if mine.grad is None:
                    missing += 1
                else:
                    worst_grad = max(worst_grad, _excess(mine.grad, theirs.grad, rtol, atol))
            for optimiser in optimisers:
                optimiser.step()
    except RuntimeError as exc:  # (a synchronising call under the debug mode, say)
        return f"raised: {str(exc).splitlines()[0][:120]}", False
    ok = missing == 0 and worst_loss <= 1.0 and worst_grad <= 1.0
    return (f"{steps} steps: worst loss {worst_loss:.2f}, worst gradient {worst_grad:.2f} of "
            f"the tolerance (rtol {rtol:g}, atol {atol:g}); gradients missing {missing}"), ok


def _loss(torch: Any, model: Any, x: Any, y: Any, device: str, autocast: str | None) -> Any:
    if autocast is None:
        return torch.nn.functional.cross_entropy(model(x), y)
    with torch.autocast(device_type=device, dtype=getattr(torch, autocast)):
        out = model(x)
    return torch.nn.functional.cross_entropy(out.float(), y)


def _excess(mine: Any, theirs: Any, rtol: float, atol: float) -> float:
    """How far ``mine`` is from ``theirs``, as a share of the tolerance (<= 1: within)."""
    allowed = atol + rtol * theirs.detach().float().abs()
    return float(((mine.detach().float() - theirs.detach().float()).abs() / allowed).max())


class _no_sync:
    """On CUDA: any synchronising call inside raises (``set_sync_debug_mode("error")``)."""

    def __init__(self, torch: Any, device: str) -> None:
        self.cuda = torch.cuda if device == "cuda" else None

    def __enter__(self) -> None:
        if self.cuda is not None:
            self.cuda.set_sync_debug_mode("error")

    def __exit__(self, *_exc: object) -> None:
        if self.cuda is not None:
            self.cuda.set_sync_debug_mode("default")


def capture_agrees(committed: bool, *, host_arms: bool = False) -> tuple[str, bool]:
    """The adapted MLP's forward captured in a CUDA graph — with nothing learned yet, or
    after 200 eager steps (``committed``) — and replayed on new inputs: (what was found,
    whether the replay equals plain torch's forward)."""
    import torch

    import adaptive_runtime as ar
    import adaptive_runtime.torch as art

    plain = mlp(torch, "cuda").eval()
    runtime = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False, host_arms_on_device=host_arms))
    adapted = art.adapt(copy.deepcopy(plain), runtime=runtime).eval()
    static = torch.rand(64, 64, device="cuda")
    try:
        with torch.no_grad():
            for _ in range(200 if committed else 3):  # (eager calls: explored, committed)
                adapted(static)
            side = torch.cuda.Stream()  # (warm-up on a side stream, as torch's docs do)
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                adapted(static)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = adapted(static)
            fresh = torch.rand(64, 64, device="cuda")
            static.copy_(fresh)
            graph.replay()
            expected = plain(fresh)
        torch.cuda.synchronize()
        worst = _excess(out, expected, *TOLERANCE["float32"])
    except RuntimeError as exc:
        return f"raised: {str(exc).splitlines()[0][:120]}", False
    return f"replay vs plain: worst {worst:.2f} of the tolerance", worst <= 1.0
