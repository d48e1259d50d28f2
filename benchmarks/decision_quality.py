"""Is the adaptive choice worth having? A mixed workload of the built-in operations.

The workload: every built-in operation at sizes from 8 to 4·10^6 elements (log-uniform; the
matrix-like ``matmul`` and ``conv1d`` at sizes a scalar loop finishes), float64, shuffled,
several thousand calls. Every call's inputs are read once, untimed, then the call runs under each
strategy, one right after the other, in a random order drawn per call (so a shared machine's
load, and what the previous call left behind, meets all strategies alike):

- the adaptive runtime (default configuration, learning from nothing: exploration included);
- each fixed arm: its kernel called directly (no runtime, no dispatch cost);
- (b) the static size-threshold rule of Trueno and hpfracc — under 1,000 elements SCALAR,
  else SIMD, matrix-like work over 10,000 elements GPU (where there is one) — its size rule and
  then the kernel called directly.

(c) The oracle, the best arm per (operation, size bucket) in hindsight (the one with the lower
median call), costs per key that arm's total from the fixed-arm timings of the same calls. The
cyclic garbage collector runs every ``GC_EVERY`` calls, outside the timings. Targets:
adaptive <= 1.05x the oracle, <= 0.8x the best fixed arm, and faster than the static rule.
Beside them, in the same random order and without targets, what the figures are read against:
a second adaptive runtime trained on the same calls first (what exploration costs is the gap
between the two), and the static rule run a second time (how far apart this machine puts two
runs of the very same code). Then, per operation, the crossover sizes this machine shows (the
best arm per size bucket).

The adaptive runtime against the plain library call (numpy, torch, JAX) is
``plain_calls.py``.

With ``DECISION_QUALITY_RECORD=path`` set, the fixed arms' timings of (a) are also written
there as a recorded-calls file (one arm per call, in turn), which ``adaptive-runtime replay``
runs any policy configuration over: policy changes compared on this workload without the
machine's noise.
"""

from __future__ import annotations

import gc
import json
import math
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
from _table import print_table, verdict

import adaptive_runtime as ar
from adaptive_runtime.keys import size_bucket
from adaptive_runtime.operations import DeviceProbe
from adaptive_runtime.replay import CALLS_FORMAT

Backend = ar.Backend
SEED = 0
CALLS_PER_OP = 600
GC_EVERY = 50  # calls between garbage collections (which are not timed)
MAX_ELEMENTS = 4_000_000
ORACLE_TARGET = 1.05
BEST_FIXED_TARGET = 0.8
STATIC_SCALAR_BELOW = 1_000
STATIC_GPU_ABOVE = 10_000
# a file to write the fixed arms' timings to, for adaptive_runtime.replay (unset: none)
RECORD_ENV = "DECISION_QUALITY_RECORD"
# the strategies measured beside the others, without targets (see the module docstring)
TRAINED = "trained"
STATIC_AGAIN = "static again"
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


def static_arm(op: ar.Operation, n: int, arms: list[Backend]) -> Backend:
    """The Trueno/hpfracc-style rule: by size and kind only, never learning."""
    if op.kind.matrix_like and n > STATIC_GPU_ABOVE and Backend.GPU in arms:
        return Backend.GPU
    return Backend.SCALAR if n < STATIC_SCALAR_BELOW else Backend.SIMD


Strategy = Callable[[str, tuple[Any, ...]], Any]


def strategies(adaptive: ar.AdaptiveRuntime, arms: list[Backend]) -> dict[str, Strategy]:
    """name -> a function running one call the strategy's way."""
    kernels = {name: {arm: adaptive.operation(name).implementation_for(arm).fn for arm in arms}
               for name in adaptive.operations}

    def fixed(arm: Backend) -> Strategy:
        return lambda name, args: kernels[name][arm](*args)

    def static(name: str, args: tuple[Any, ...]) -> Any:
        op = adaptive.operation(name)
        return kernels[name][static_arm(op, op.size_of(*args), arms)](*args)

    def learning(name: str, args: tuple[Any, ...]) -> Any:
        return adaptive.run(name, *args)

    return {"adaptive": learning, "static": static,
            **{arm.value: fixed(arm) for arm in arms}}


def touch(args: tuple[Any, ...]) -> None:
    """Read every input array once (single-threaded numpy, no thread pool woken): the first
    strategy to run a call would otherwise read large inputs from memory and the others from
    cache (measured: about 2x the time on calls over a megabyte)."""
    for a in args:
        if isinstance(a, np.ndarray):
            a.sum()


def compiled_signatures(adaptive: ar.AdaptiveRuntime, arms: list[Backend]) -> int:
    """Kernel specialisations compiled so far, over every numba arm."""
    total = 0
    for name in adaptive.operations:
        for arm in arms:
            count = adaptive.operation(name).implementation_for(arm).compile_count
            total += count() if count is not None else 0
    return total


def record_fixed_arms(path: str, adaptive: ar.AdaptiveRuntime,
                      calls: list[tuple[str, tuple[Any, ...]]], arms: list[Backend],
                      seconds: dict[str, list[float]]) -> None:
    """Write the fixed arms' timings as a recorded-calls file for ``adaptive-runtime replay``:
    call i with arm ``arms[i % len(arms)]`` at time i. Every arm was timed on every call, so
    unlike a runtime's own recording this log answers any arm a replayed policy picks, with a
    timing of the same size bucket from a nearby call (policy changes are judged offline on
    it, free of this machine's noise)."""
    with open(path, "w", encoding="utf-8") as out:
        out.write(json.dumps({"format": CALLS_FORMAT}) + "\n")
        for i, (name, args) in enumerate(calls):
            arm = arms[i % len(arms)]
            out.write(json.dumps({"operation": name,
                                  "size": adaptive.operation(name).size_of(*args),
                                  "arm": arm.value,
                                  "duration_us": seconds[arm.value][i] * 1e6,
                                  "time_s": float(i), "calls": 1}) + "\n")


def main() -> None:
    began = time.perf_counter()
    adaptive = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    operations = [name for name in WORKLOAD if name in adaptive.operations]
    devices = DeviceProbe()
    arms = [b for b in (Backend.GPU, Backend.SIMD, Backend.SCALAR) if devices.available(b)]
    runs = strategies(adaptive, arms)
    calls = workload(operations)
    keys = [(name, size_bucket(adaptive.operation(name).size_of(*args))) for name, args in calls]
    # Compile every numba kernel first, calling the kernels directly: the first call of a
    # kernel would otherwise time the compiler (the adaptive runtime does not learn from such
    # a call, but its total would include it). The adaptive runtime still starts knowing
    # nothing. Each operation's smallest and largest call: SIMD kernels have a serial and a
    # parallel build, chosen by size.
    for name in operations:
        sized = sorted((adaptive.operation(name).size_of(*args), i)
                       for i, (op_name, args) in enumerate(calls) if op_name == name)
        for _size, i in (sized[0], sized[-1]):
            for arm in arms:
                runs[arm.value](name, calls[i][1])
    # Beside the measured strategies: a runtime that has learned these calls already (its
    # exploration done), and the static rule again (the noise between two identical runs).
    trained = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    for name, args in calls:
        trained.run(name, *args)
    runs[TRAINED] = lambda name, args: trained.run(name, *args)
    runs[STATIC_AGAIN] = runs["static"]
    compiled_before = compiled_signatures(adaptive, arms)

    # seconds[strategy][i]: call i's time under that strategy
    seconds: dict[str, list[float]] = {s: [0.0] * len(calls) for s in runs}
    order = list(runs)
    # A fresh random order per call: with a fixed rotation each strategy would always follow
    # the same one (a SIMD call right after a scalar one finds the thread team asleep).
    shuffled = np.random.default_rng(SEED + 1)
    progress_every = max(len(calls) // 10, 1)
    clock = time.perf_counter
    gc.disable()  # collected every GC_EVERY calls: a collection lands on whoever allocated
    try:
        for i, (name, args) in enumerate(calls):
            touch(args)
            for strategy in shuffled.permutation(order):
                run = runs[strategy]
                start = clock()
                run(name, args)
                seconds[strategy][i] = clock() - start
            if (i + 1) % GC_EVERY == 0:
                gc.collect()
            if (i + 1) % progress_every == 0:
                print(f"  {i + 1:,}/{len(calls):,} calls", flush=True)
    finally:
        gc.enable()
    compiled_during = compiled_signatures(adaptive, arms) - compiled_before
    if os.environ.get(RECORD_ENV):
        record_fixed_arms(os.environ[RECORD_ENV], adaptive, calls, arms, seconds)

    per_key: dict[tuple[str, int], dict[str, list[float]]] = defaultdict(
        lambda: defaultdict(list))
    for i, key in enumerate(keys):
        for strategy, took in seconds.items():
            per_key[key][strategy].append(took[i])
    total = {strategy: sum(took) for strategy, took in seconds.items()}
    per_arm = {arm: total[arm.value] for arm in arms}
    adaptive_s, static_s = total["adaptive"], total["static"]

    # The oracle's arm per key is the one with the lower median call: choosing by the lower
    # total would also pick whichever arm dodged the machine's hiccups (a shared box has
    # millisecond stalls), an optimistic bias that grows with the number of keys. Its cost is
    # that arm's total, stalls included. The min-of-totals figure is printed beside it.
    oracle_arm = {key: min(arms, key=lambda a, key=key: statistics.median(times[a.value]))
                  for key, times in per_key.items()}
    oracle_s = sum(sum(per_key[key][arm.value]) for key, arm in oracle_arm.items())
    luckiest_s = sum(min(sum(times[a.value]) for a in arms) for times in per_key.values())
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
        row("adaptive runtime trained on these calls first", total[TRAINED]),
        row("static size-threshold rule", static_s),
        row(f"  run again: {abs(total[STATIC_AGAIN] / static_s - 1):.1%} apart (noise)",
            total[STATIC_AGAIN]),
        *[row(f"fixed arm: {arm.value}", per_arm[arm]) for arm in arms],
    ]
    print_table(f"decision quality: {len(calls):,} calls of {len(operations)} operations, "
                f"sizes 8..{MAX_ELEMENTS:,}, float64, shuffled; arms: "
                f"{', '.join(a.value for a in arms)}", HEADER, rows)

    print("\ncrossovers on this machine (the oracle's arm per size bucket):")
    for name in operations:
        buckets = sorted(b for (op_name, b) in per_key if op_name == name)
        found: list[tuple[Backend, int]] = []
        for bucket in buckets:
            best = oracle_arm[(name, bucket)]
            if not found or found[-1][0] is not best:
                found.append((best, bucket))
        text = ", ".join(f"{arm.value} from {1 << (bucket - 1) if bucket else 0:,}"
                         for arm, bucket in found)
        print(f"  {name:<11} {text}")
    def key_total(key: tuple[str, int], strategy: str) -> float:
        return sum(per_key[key][strategy])

    losses = sorted(((key_total(k, "adaptive") - key_total(k, oracle_arm[k].value), k)
                     for k in per_key), reverse=True)[:8]
    print("largest losses vs the oracle, by key (adaptive - the oracle arm's total; calls; "
          "arms' totals):")
    for loss, key in losses:
        totals = ", ".join(f"{arm.value} {key_total(key, arm.value) * 1e3:.1f} ms"
                           for arm in arms)
        print(f"  {key[0]:<11} bucket {key[1]:>2}: +{loss * 1e3:7.1f} ms over "
              f"{len(per_key[key]['adaptive']):>3} calls ({totals}; adaptive "
              f"{key_total(key, 'adaptive') * 1e3:.1f} ms)")
    chosen = defaultdict(int)
    for k, count in adaptive.selection_counts().items():
        chosen[k.reason.value] += count
    print("adaptive decisions: " + ", ".join(f"{r} {n:,}" for r, n in sorted(chosen.items())))
    print(f"kernel specialisations compiled during the timed run: {compiled_during}")
    print(f"total benchmark time {time.perf_counter() - began:.1f} s")


if __name__ == "__main__":
    main()
