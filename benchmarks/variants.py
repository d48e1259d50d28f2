"""Each built-in operation's implementations, side by side: what every arm's primary kernel
and every variant takes at a few sizes, called directly (no runtime), beside the plain library
call a user would write — the table docs/operations.md lists, and why an arm holds more than
one implementation (no single one is fastest at every size).

numpy float64 inputs (a softmax or layer_norm of n elements: rows of 64), each implementation
warmed first (numba compiles, ATen initialises), then the implementations of one size taken
in turns, ``REPEATS`` rounds of a batch of calls each: the best batch's time per call, in
microseconds (the machine's noise only ever adds time). No target: it measures what the
runtime chooses among; ``decision_quality.py`` judges the choosing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from _table import print_table

import adaptive_runtime as ar
from adaptive_runtime.backend import choice_order, parse_choice
from adaptive_runtime.operations import DeviceProbe

SIZES = (8, 1_000, 10_000, 100_000, 1_000_000)
REPEATS = 7
BATCH_SECONDS = 0.002  # each batch runs about this long (at least one call)
PLAIN_COLUMN = "plain numpy"


def _rows(rng: np.random.Generator, n: int) -> np.ndarray:
    width = 64 if n >= 64 else n
    return rng.standard_normal((max(n // width, 1), width))


MAKE: dict[str, Callable[[np.random.Generator, int], tuple[Any, ...]]] = {
    "add": lambda rng, n: (rng.standard_normal(n), rng.standard_normal(n)),
    "dot": lambda rng, n: (rng.standard_normal(n), rng.standard_normal(n)),
    "scale": lambda rng, n: (1.5, rng.standard_normal(n), rng.standard_normal(n)),
    "sum": lambda rng, n: (rng.standard_normal(n),),
    "relu": lambda rng, n: (rng.standard_normal(n),),
    "gelu": lambda rng, n: (rng.standard_normal(n),),
    "softmax": lambda rng, n: (_rows(rng, n),),
    "layer_norm": lambda rng, n: (_rows(rng, n),),
}
PLAIN: dict[str, Callable[..., Any]] = {
    "add": np.add, "dot": np.dot, "scale": lambda alpha, x, y: alpha * x + y, "sum": np.sum,
    "relu": lambda x: np.maximum(x, 0.0),
    "softmax": lambda x: (lambda e: e / e.sum(axis=-1, keepdims=True))(
        np.exp(x - x.max(axis=-1, keepdims=True))),
    "layer_norm": lambda x: (x - x.mean(axis=-1, keepdims=True)) / np.sqrt(
        x.var(axis=-1, keepdims=True) + 1e-5),
}


def per_call_us(fn: Callable[..., Any], args: tuple[Any, ...], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    return (time.perf_counter() - start) / calls * 1e6


def measure(kernels: dict[str, Callable[..., Any]], args: tuple[Any, ...]) -> dict[str, float]:
    """Each kernel's best per-call time, the kernels taking turns batch by batch."""
    for fn in kernels.values():  # (warm: compile, initialise, fault the pages in)
        fn(*args)
        fn(*args)
    batch = {name: max(1, int(BATCH_SECONDS / max(per_call_us(fn, args, 1), 0.1) * 1e6))
             for name, fn in kernels.items()}
    best = dict.fromkeys(kernels, math.inf)
    for _ in range(REPEATS):
        for name, fn in kernels.items():
            best[name] = min(best[name], per_call_us(fn, args, batch[name]))
    return best


def main() -> None:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    devices = DeviceProbe()
    rng = np.random.default_rng(0)
    measured: list[tuple[str, int, dict[str, float], str]] = []
    columns: dict[str, None] = {}
    for name, make in MAKE.items():
        op = rt.operation(name)
        choices = sorted((c for c in op.choices if devices.available(c)), key=choice_order)
        kernels = {c.value: op.implementation_for(c).fn for c in choices}  # type: ignore[union-attr]
        columns.update(dict.fromkeys(kernels))
        if name in PLAIN:
            kernels[PLAIN_COLUMN] = PLAIN[name]
        for n in SIZES:
            best = measure(kernels, make(rng, n))
            fastest = min((k for k in best if k != PLAIN_COLUMN), key=best.__getitem__)
            measured.append((name, n, best, fastest))
    header = [*sorted(columns, key=lambda v: choice_order(parse_choice(v))), PLAIN_COLUMN]
    rows = [[name, f"{n:,}", *(f"{best[k]:,.1f}{'*' if k == fastest else ''}" if k in best
                               else "-" for k in header)]
            for name, n, best, fastest in measured]
    print_table("each implementation called directly, numpy float64, best batch of "
                f"{REPEATS} (us per call; * the fastest of the runtime's; - not registered)",
                ["operation", "n", *header], rows)


if __name__ == "__main__":
    main()
