"""Is the adaptive choice worth having? A mixed workload of the built-in operations.

The workload: every built-in operation at sizes from 8 to 4·10^6 elements (log-uniform; the
matrix-like ``matmul`` and ``conv1d`` at sizes a scalar loop finishes), float64, shuffled,
several thousand calls. Each call runs once untimed (caches and allocator warm), then, one
right after the other (so a shared machine's load hits all alike; the order rotates call by
call), on

- the adaptive runtime (default configuration, learning from nothing: exploration included);
- one runtime forced onto each available arm (the fixed arms).

From the fixed-arm timings of the very same calls: (b) the static size-threshold rule of
Trueno and hpfracc — under 1,000 elements SCALAR, else SIMD, matrix-like work over 10,000
elements GPU (where there is one) — costs, per call, what its arm took; (c) the oracle, the best
arm per (operation, size bucket) in hindsight (the one with the lower median call), costs per
key that arm's total. Targets:
adaptive <= 1.05x the oracle, <= 0.8x the best fixed arm, and faster than the static rule.
Then, per operation, the crossover sizes this machine shows (the best arm per size bucket).
"""

from __future__ import annotations

import math
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
from _table import print_table, verdict

import adaptive_runtime as ar
from adaptive_runtime.keys import size_bucket

Backend = ar.Backend
SEED = 0
CALLS_PER_OP = 600
MAX_ELEMENTS = 4_000_000
ORACLE_TARGET = 1.05
BEST_FIXED_TARGET = 0.8
STATIC_SCALAR_BELOW = 1_000
STATIC_GPU_ABOVE = 10_000
HEADER = ["strategy", "total", "vs oracle", "target", "verdict"]

Make = Callable[[np.random.Generator, int], tuple[Any, ...]]


def _vector(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.standard_normal(n)


def _rows(rng: np.random.Generator, n: int) -> np.ndarray:
    width = 64 if n >= 64 else n
    return rng.standard_normal((max(n // width, 1), width))


def _square(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    side = max(int(math.sqrt(n)), 1)
    return rng.standard_normal((side, side)), rng.standard_normal((side, side))


# operation -> (inputs for a size of n elements, the largest n a SCALAR loop finishes quickly)
WORKLOAD: dict[str, tuple[Make, int]] = {
    "dot": (lambda rng, n: (_vector(rng, n), _vector(rng, n)), MAX_ELEMENTS),
    "add": (lambda rng, n: (_vector(rng, n), _vector(rng, n)), MAX_ELEMENTS),
    "scale": (lambda rng, n: (1.5, _vector(rng, n), _vector(rng, n)), MAX_ELEMENTS),
    "sum": (lambda rng, n: (_vector(rng, n),), MAX_ELEMENTS),
    "relu": (lambda rng, n: (_vector(rng, n),), MAX_ELEMENTS),
    "gelu": (lambda rng, n: (_vector(rng, n),), MAX_ELEMENTS),
    "softmax": (lambda rng, n: (_rows(rng, n),), MAX_ELEMENTS),
    "layer_norm": (lambda rng, n: (_rows(rng, n),), MAX_ELEMENTS),
    "matmul": (_square, 256 * 256),
    "conv1d": (lambda rng, n: (_vector(rng, n), _vector(rng, 31)), 1_000_000),
}


def workload(operations: list[str]) -> list[tuple[str, tuple[Any, ...]]]:
    rng = np.random.default_rng(SEED)
    calls = []
    for name in operations:
        make, largest = WORKLOAD[name]
        low, high = math.log(8), math.log(largest)
        for _ in range(CALLS_PER_OP):
            n = max(8, int(math.exp(rng.uniform(low, high))))
            if name == "conv1d":
                n = max(n, 31)
            calls.append((name, make(rng, n)))
    order = rng.permutation(len(calls))
    return [calls[i] for i in order]


def timed(rt: ar.AdaptiveRuntime, name: str, args: tuple[Any, ...]) -> float:
    start = time.perf_counter()
    rt.run(name, *args)
    return time.perf_counter() - start


def static_arm(op: ar.Operation, n: int, arms: list[Backend]) -> Backend:
    """The Trueno/hpfracc-style rule: by size and kind only, never learning."""
    if op.kind.matrix_like and n > STATIC_GPU_ABOVE and Backend.GPU in arms:
        return Backend.GPU
    return Backend.SCALAR if n < STATIC_SCALAR_BELOW else Backend.SIMD


def main() -> None:
    began = time.perf_counter()
    adaptive = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    operations = [name for name in WORKLOAD if name in adaptive.operations]
    devices = ar.DeviceProbe()
    arms = [b for b in (Backend.GPU, Backend.SIMD, Backend.SCALAR) if devices.available(b)]
    fixed = {arm: ar.AdaptiveRuntime(ar.RuntimeConfig(force_backend=arm, tracing=False))
             for arm in arms}
    calls = workload(operations)
    # Compile every numba kernel first, on the fixed runtimes: the first call of a kernel
    # would otherwise time the compiler (the adaptive runtime does not learn from such a call,
    # but its total would include it). The adaptive runtime still starts knowing nothing.
    # Each operation's smallest and largest call: SIMD kernels have a serial and a parallel
    # build, chosen by size.
    extremes: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for name in operations:
        sized = sorted((adaptive.operation(name).size_of(*args), i)
                       for i, (op_name, args) in enumerate(calls) if op_name == name)
        extremes[name] = [calls[sized[0][1]][1], calls[sized[-1][1]][1]]
    for name, samples in extremes.items():
        for args in samples:
            for rt in fixed.values():
                rt.run(name, *args)

    adaptive_s = 0.0
    per_arm: dict[Backend, float] = dict.fromkeys(arms, 0.0)
    per_key: dict[tuple[str, int], dict[Backend, float]] = defaultdict(lambda: dict.fromkeys(
        arms, 0.0))
    static_s = 0.0
    adaptive_key: dict[tuple[str, int], float] = defaultdict(float)
    calls_key: dict[tuple[str, int], int] = defaultdict(int)
    samples_key: dict[tuple[str, int], dict[Backend, list[float]]] = defaultdict(
        lambda: defaultdict(list))
    progress_every = max(len(calls) // 10, 1)
    runners: list[tuple[Backend | None, ar.AdaptiveRuntime]] = [*fixed.items(),
                                                                (None, adaptive)]
    for i, (name, args) in enumerate(calls):
        op = adaptive.operation(name)
        n = op.size_of(*args)
        key = (name, size_bucket(n))
        calls_key[key] += 1
        # every strategy runs this call, in an order that rotates call by call, after one
        # untimed run: nobody meets the inputs cold in cache or a result buffer that first has
        # to be faulted in
        fixed[Backend.SIMD].run(name, *args)
        took: dict[Backend, float] = {}
        for j in range(len(runners)):
            strategy, rt = runners[(i + j) % len(runners)]
            seconds = timed(rt, name, args)
            if strategy is None:
                adaptive_s += seconds
                adaptive_key[key] += seconds
            else:
                took[strategy] = seconds
                samples_key[key][strategy].append(seconds)
        for arm, seconds in took.items():
            per_arm[arm] += seconds
            per_key[key][arm] += seconds
        static_s += took[static_arm(op, n, arms)]
        if (i + 1) % progress_every == 0:
            print(f"  {i + 1:,}/{len(calls):,} calls", flush=True)

    # The oracle's arm per key is the one with the lower median call: choosing by the lower
    # total would also pick whichever arm dodged the machine's hiccups (a shared box has
    # millisecond stalls), an optimistic bias that grows with the number of keys. Its cost is
    # that arm's total, stalls included. The min-of-totals figure is printed beside it.
    oracle_arm = {key: min(arms, key=lambda a, key=key: statistics.median(samples_key[key][a]))
                  for key in per_key}
    oracle_s = sum(per_key[key][arm] for key, arm in oracle_arm.items())
    luckiest_s = sum(min(times.values()) for times in per_key.values())
    best_arm = min(per_arm, key=per_arm.__getitem__)
    best_fixed_s = per_arm[best_arm]

    def row(strategy: str, seconds: float, target: str = "-", ok: bool | None = None) -> list:
        return [strategy, f"{seconds:.3f} s", f"{seconds / oracle_s:.3f}x", target,
                "-" if ok is None else verdict(ok)]

    rows = [
        row("adaptive runtime (exploration included)", adaptive_s,
            f"<= {ORACLE_TARGET:g}x oracle", adaptive_s <= ORACLE_TARGET * oracle_s),
        row(f"  vs best fixed arm ({best_arm.value}): {adaptive_s / best_fixed_s:.3f}x",
            adaptive_s, f"<= {BEST_FIXED_TARGET:g}x", adaptive_s <= BEST_FIXED_TARGET
            * best_fixed_s),
        row(f"  vs static rule: {adaptive_s / static_s:.3f}x", adaptive_s, "< 1x",
            adaptive_s < static_s),
        row("oracle (best arm per key in hindsight)", oracle_s),
        row("  (lower total per key, noise-favoured)", luckiest_s),
        row("static size-threshold rule", static_s),
        *[row(f"fixed arm: {arm.value}", per_arm[arm]) for arm in arms],
    ]
    print_table(f"decision quality: {len(calls):,} calls of {len(operations)} operations, "
                f"sizes 8..{MAX_ELEMENTS:,}, float64, shuffled; arms: "
                f"{', '.join(a.value for a in arms)}", HEADER, rows)

    print("\ncrossovers on this machine (the oracle's arm per size bucket):")
    for name in operations:
        buckets = sorted(b for (op_name, b) in per_key if op_name == name)
        runs: list[tuple[Backend, int]] = []
        for bucket in buckets:
            best = oracle_arm[(name, bucket)]
            if not runs or runs[-1][0] is not best:
                runs.append((best, bucket))
        text = ", ".join(f"{arm.value} from {1 << (bucket - 1) if bucket else 0:,}"
                         for arm, bucket in runs)
        print(f"  {name:<11} {text}")
    losses = sorted(((adaptive_key[k] - per_key[k][oracle_arm[k]], k) for k in per_key),
                    reverse=True)[:8]
    print("largest losses vs the oracle, by key (adaptive - the oracle arm's total; calls; "
          "arms' totals):")
    for loss, (name, bucket) in losses:
        totals = ", ".join(f"{arm.value} {s * 1e3:.1f} ms"
                           for arm, s in per_key[(name, bucket)].items())
        print(f"  {name:<11} bucket {bucket:>2}: +{loss * 1e3:7.1f} ms over "
              f"{calls_key[(name, bucket)]:>3} calls ({totals}; adaptive "
              f"{adaptive_key[(name, bucket)] * 1e3:.1f} ms)")
    chosen = defaultdict(int)
    for k, count in adaptive.selection_counts().items():
        chosen[k.reason.value] += count
    print("adaptive decisions: " + ", ".join(f"{r} {n:,}" for r, n in sorted(chosen.items())))
    print(f"total benchmark time {time.perf_counter() - began:.1f} s")


if __name__ == "__main__":
    main()
