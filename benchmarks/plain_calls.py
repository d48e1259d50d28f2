"""The adaptive runtime against the call a user would write anyway.

For each input type (numpy arrays, torch tensors, JAX arrays where the runtime has JAX arms) and
dtype (float32, float64), a workload of every built-in operation (sizes 8 to
``PLAIN_MAX_ELEMENTS``) runs through a fresh adaptive runtime and as the plain library call
(numpy / ``torch`` / jitted ``jax.numpy``; numpy's gelu is scipy's ``erf``), side by side in a
random order per call. Target: adaptive <= 1.02x the plain call per input type and dtype,
exploration included (goal: under 1x, from the arms that beat it); then the operations and
sizes where an adaptive arm beats the plain call, and by how much. (Part (d) of
``decision_quality.py`` until it moved here.)
"""

from __future__ import annotations

import gc
import math
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
from _table import print_table, verdict
from decision_quality import GC_EVERY, SEED, WORKLOAD, Make, _square, _vector

import adaptive_runtime as ar
from adaptive_runtime.keys import size_bucket
from adaptive_runtime.operations import DeviceProbe

PLAIN_CALLS_PER_OP = 120
PLAIN_MAX_ELEMENTS = 1_000_000
PLAIN_TARGET = 1.02
BEATEN_ROWS = 6
PLAIN_LINEAR_MAX = 512 * 64 * 64  # multiply-adds (rows of 64 inputs, 64 outputs)


def _linear_args(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    rows = max(n // (64 * 64), 1)
    return (rng.standard_normal((rows, 64)), rng.standard_normal((64, 64)),
            rng.standard_normal(64))


# operation -> (inputs for a size of n elements, the largest n)
PLAIN_WORKLOAD: dict[str, tuple[Make, int]] = {
    **{name: (make, min(largest, PLAIN_MAX_ELEMENTS)) for name, (make, largest) in
       WORKLOAD.items() if name not in ("matmul", "conv1d")},
    "matmul": (_square, 256 * 256),  # (n: the elements of each square matrix)
    "linear": (_linear_args, PLAIN_LINEAR_MAX),
    "conv1d": (lambda rng, n: (_vector(rng, n), _vector(rng, 31)), PLAIN_MAX_ELEMENTS),
}


def numpy_calls() -> dict[str, Callable[..., Any]]:
    """What a numpy user writes for each operation (scipy's erf for gelu, where installed)."""
    calls: dict[str, Callable[..., Any]] = {
        "dot": np.dot, "add": np.add, "scale": lambda alpha, x, y: alpha * x + y,
        "sum": np.sum, "relu": lambda x: np.maximum(x, 0),
        "softmax": lambda x: (lambda e: e / e.sum(axis=-1, keepdims=True))(
            np.exp(x - x.max(axis=-1, keepdims=True))),
        "layer_norm": lambda x: (x - x.mean(axis=-1, keepdims=True)) / np.sqrt(
            x.var(axis=-1, keepdims=True) + 1e-5),
        "matmul": np.matmul, "linear": lambda x, w, b: x @ w.T + b,
        "conv1d": lambda x, w: np.correlate(x, w, "valid"),
    }
    try:
        from scipy.special import erf

        calls["gelu"] = lambda x: 0.5 * x * (1.0 + erf(x * 0.7071067811865476))
    except ImportError:  # (no plain numpy gelu: left out)
        pass
    return calls


def torch_calls() -> dict[str, Callable[..., Any]]:
    import torch
    import torch.nn.functional as F

    return {"dot": torch.dot, "add": torch.add,
            "scale": lambda alpha, x, y: torch.add(y, x, alpha=alpha), "sum": torch.sum,
            "relu": torch.relu, "gelu": F.gelu, "softmax": lambda x: torch.softmax(x, -1),
            "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]), "matmul": torch.mm,
            "linear": F.linear,
            "conv1d": lambda x, w: F.conv1d(x.view(1, 1, -1), w.view(1, 1, -1)).view(-1)}


def jax_calls() -> dict[str, Callable[..., Any]]:
    """Jitted ``jax.numpy`` (what a JAX user writes), blocking on the result."""
    import jax
    import jax.numpy as jnp

    plain = {
        "dot": jnp.dot, "add": jnp.add, "scale": lambda alpha, x, y: alpha * x + y,
        "sum": jnp.sum, "relu": lambda x: jnp.maximum(x, 0),
        "gelu": lambda x: jax.nn.gelu(x, approximate=False),
        "softmax": lambda x: jax.nn.softmax(x, axis=-1),
        "layer_norm": lambda x: (x - x.mean(-1, keepdims=True)) / jnp.sqrt(
            x.var(-1, keepdims=True) + 1e-5),
        "matmul": jnp.matmul, "linear": lambda x, w, b: x @ w.T + b,
        "conv1d": lambda x, w: jnp.correlate(x, w, "valid")}

    def blocking(fn: Callable[..., Any]) -> Callable[..., Any]:
        jitted = jax.jit(fn)
        return lambda *args: jitted(*args).block_until_ready()

    return {name: blocking(fn) for name, fn in plain.items()}


def convert(library: str, args: tuple[Any, ...], dtype: Any) -> tuple[Any, ...]:
    out = []
    for a in args:
        if not isinstance(a, np.ndarray):
            out.append(a)
            continue
        a = a.astype(dtype)
        if library == "torch":
            import torch

            out.append(torch.from_numpy(a))
        elif library == "jax":
            import jax.numpy as jnp

            out.append(jnp.asarray(a))
        else:
            out.append(a)
    return tuple(out)


def versus_plain_calls() -> None:
    libraries = {"numpy": numpy_calls, "torch": torch_calls}
    probe = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    if "jax" in probe.operation("gelu").families:  # (JAX arms registered)
        libraries["jax"] = jax_calls
    rows, wins = [], []
    for library, make_calls in libraries.items():
        plain_calls = make_calls()
        for dtype in (np.float32, np.float64):
            if library == "jax" and dtype is np.float64:
                import jax

                jax.config.update("jax_enable_x64", True)
            ratio, beaten = _plain_run(library, plain_calls, dtype)
            rows.append([f"{library} {np.dtype(dtype).name}", f"{ratio[0]:.3f} s",
                         f"{ratio[1]:.3f} s", f"{ratio[1] / ratio[0]:.3f}x",
                         f"<= {PLAIN_TARGET}x", verdict(ratio[1] <= PLAIN_TARGET * ratio[0])])
            wins += [[f"{library} {np.dtype(dtype).name}", *row] for row in beaten]
    print_table(f"adaptive vs the plain library call: {PLAIN_CALLS_PER_OP} calls per "
                f"operation, sizes 8..{PLAIN_MAX_ELEMENTS:,}, shuffled, exploration included",
                ["inputs", "plain call", "adaptive", "ratio", "target", "verdict"], rows)
    print_table("where an adaptive arm beats the plain call (per operation and size bucket, "
                f"totals of the same calls; at least 10% faster; the {BEATEN_ROWS} largest "
                "savings per input type)",
                ["inputs", "operation", "sizes", "arm", "plain", "adaptive", "gain"],
                wins or [["(none)", "", "", "", "", "", ""]])


def _plain_run(library: str, plain_calls: dict[str, Callable[..., Any]],
               dtype: Any) -> tuple[tuple[float, float], list[list[str]]]:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    rng = np.random.default_rng(SEED)
    calls = []
    for name, (make, largest) in PLAIN_WORKLOAD.items():
        if name not in plain_calls:
            continue
        low, high = math.log(8), math.log(largest)
        for _ in range(PLAIN_CALLS_PER_OP):
            n = max(8, int(math.exp(rng.uniform(low, high))))
            n = max(n, 31) if name == "conv1d" else n
            calls.append((name, convert(library, make(rng, n), dtype)))
    calls = [calls[i] for i in rng.permutation(len(calls))]
    # One untimed call of every arm and the plain call at each operation's smallest and
    # largest size: numba compiles its kernels, XLA its programs, torch sets up lazily.
    for name in {c[0] for c in calls}:
        sized = sorted(((rt.operation(name).size_of(*args), i) for i, (op, args)
                        in enumerate(calls) if op == name), key=lambda t: t[0])
        for _size, i in (sized[0], sized[-1]):
            args = calls[i][1]
            plain_calls[name](*args)
            family_op, _entries, _n = rt._dispatcher.route(name, args)
            for arm in family_op.backends:
                impl = family_op.implementation_for(arm)
                if impl is not None and DeviceProbe().available(arm):
                    impl.fn(*args)
    adaptive_s = plain_s = 0.0
    per_key: dict[tuple[str, int], list[float]] = defaultdict(lambda: [0.0, 0.0])
    order = np.random.default_rng(SEED + 2)
    clock = time.perf_counter
    gc.disable()
    try:
        for i, (name, args) in enumerate(calls):
            touch_any(args)
            key = (name, size_bucket(rt.operation(name).size_of(*args)))
            for first in order.permutation(2):
                start = clock()
                if first:
                    rt.run(name, *args)
                    took = clock() - start
                    adaptive_s += took
                    per_key[key][1] += took
                else:
                    plain_calls[name](*args)
                    took = clock() - start
                    plain_s += took
                    per_key[key][0] += took
            if (i + 1) % GC_EVERY == 0:
                gc.collect()
    finally:
        gc.enable()
    losses = sorted(((adaptive - plain, key) for key, (plain, adaptive) in per_key.items()),
                    reverse=True)[:5]
    print(f"  {library} {np.dtype(dtype).name}: largest losses vs the plain call: " + "; ".join(
        f"{name} bucket {bucket} +{loss * 1e3:.1f} ms" for loss, (name, bucket) in losses),
        flush=True)
    beaten = []
    # (the largest savings first, at most BEATEN_ROWS per input type)
    by_saving = sorted(per_key.items(), key=lambda item: item[1][1] - item[1][0])
    for (name, bucket), (plain, adaptive) in by_saving[:BEATEN_ROWS]:
        if adaptive < 0.9 * plain:
            lo, hi = 1 << (bucket - 1), (1 << bucket) - 1
            family = rt._dispatcher.route(name, next(a for n, a in calls if n == name
                                                      and size_bucket(
                                                          rt.operation(name).size_of(*a))
                                                      == bucket))[0].name
            arm = rt.decide(family, lo).backend.value
            beaten.append([name, f"{lo:,}-{hi:,}", arm, f"{plain * 1e3:.2f} ms",
                           f"{adaptive * 1e3:.2f} ms", f"{plain / adaptive:.2f}x"])
    return (plain_s, adaptive_s), beaten


def touch_any(args: tuple[Any, ...]) -> None:
    """As :func:`touch`, for numpy arrays and tensors (JAX arrays live on their device)."""
    for a in args:
        if isinstance(a, np.ndarray) or hasattr(a, "numel"):
            a.sum()



if __name__ == "__main__":
    versus_plain_calls()
