"""What adapting costs once it has decided: exploring's share of a long-lived key's time, and
a small key's call against a forced run of the arm it committed to.

(1) Exploring over a key's life. Built-in operations on numpy float64 at sizes from 8 to
131,072 elements, ``CALLS_PER_KEY`` calls of each key from a cold runtime (default
configuration, tracing off), the keys' calls shuffled together as a training loop's are.
Every call is timed from outside (``perf_counter`` around ``rt.run``) and classified by what
the runtime counted for it (``rt.selection_counts()``, read untimed): a call that explored,
re-checked or re-measured after a drift alarm is *exploring*. Per key: exploring calls' share
of the key's time, and of its calls after its first 30. Target: <= 1 % of the time of a key
of ``CALLS_PER_KEY`` calls (the median key, and the worst shown beside it).

(2) Small keys (8 to 4,096 elements), converged: ``rt.run`` of the adaptive runtime against
the same call on a runtime forced to the arm the adaptive one committed to
(``force_backend``), and the kernel called directly (the bare arm, no runtime). Per key,
``SMALL_ROUNDS`` rounds; in each, a batch of ``SMALL_BATCH`` calls of each, in a rotating
order, and the round's ratio adaptive / forced. A batch spans two of the longest timing
periods (``max_measure_period``), so every batch holds the timed calls a converged key makes
(a batch of 200 calls, best of 15, mostly held none: the timed path went unmeasured), and
the median of the rounds' ratios stands against a round the machine slowed; the spread
printed is the middle 80 % of the rounds. Target: adaptive <= 1.10x the forced run, per key
(the median key and the worst). Both runtimes pay a dispatch; what the adaptive one adds is
its timed calls (1-in-N), their result checks, the policy's looks and its re-checks of the
other arm (counted beside it, from ``rt.selection_counts()``).

Run ``python benchmarks/steady_state.py small`` for (2) alone.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
from _table import print_table, verdict

import adaptive_runtime as ar
from adaptive_runtime.keys import size_bucket
from adaptive_runtime.operations import DeviceProbe

OPERATIONS = ("dot", "add", "sum", "relu", "softmax", "scale")
LIFE_SIZES = (8, 64, 512, 4_096, 32_768, 131_072)
SMALL_SIZES = (8, 64, 512, 4_096)
CALLS_PER_KEY = 1_000
SMALL_BATCH = 2_048
SMALL_ROUNDS = 25
EXPLORING_TARGET = 0.01
SMALL_TARGET = 1.10
EXPLORING = frozenset({"explore", "recheck", "drift"})


def inputs(name: str, n: int, rng: np.random.Generator) -> tuple[Any, ...]:
    x = rng.standard_normal(n)
    if name in ("dot", "add"):
        return x, rng.standard_normal(n)
    if name == "scale":
        return 1.5, x, rng.standard_normal(n)
    if name == "softmax":
        return (x.reshape(-1, 8) if n >= 8 else x,)
    return (x,)


def reasons(rt: ar.AdaptiveRuntime) -> Counter[str]:
    counts: Counter[str] = Counter()
    for key, n in rt.selection_counts().items():
        counts[key.reason.value] += n
    return counts


def exploring_over_life() -> list[list[str]]:
    """(1): per key, exploring calls' share of its time over CALLS_PER_KEY calls."""
    rng = np.random.default_rng(0)
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    keys = [(name, n, inputs(name, n, rng)) for name in OPERATIONS for n in LIFE_SIZES]
    # every kernel compiled first, called directly: the runtime still starts knowing nothing
    devices = DeviceProbe()
    for name, _n, args in keys:
        for arm in rt.operation(name).backends:
            if devices.available(arm):
                rt.operation(name).implementation_for(arm).fn(*args)
    order = [i for i in range(len(keys)) for _ in range(CALLS_PER_KEY)]
    rng.shuffle(order)
    total = [0.0] * len(keys)
    explored = [0.0] * len(keys)
    calls_after_30 = [0] * len(keys)
    exploring_after_30 = [0] * len(keys)
    seen = [0] * len(keys)
    clock = time.perf_counter
    before = reasons(rt)
    gc.disable()
    try:
        for i in order:
            name, _n, args = keys[i]
            start = clock()
            rt.run(name, *args)
            took = clock() - start
            after = reasons(rt)
            exploring = any(after[r] > before[r] for r in EXPLORING)
            before = after
            total[i] += took
            seen[i] += 1
            if exploring:
                explored[i] += took
            if seen[i] > 30:
                calls_after_30[i] += 1
                exploring_after_30[i] += exploring
    finally:
        gc.enable()
    shares = [e / t for e, t in zip(explored, total, strict=True)]
    worst = max(range(len(keys)), key=shares.__getitem__)
    median_share = statistics.median(shares)
    after_30 = sum(exploring_after_30) / sum(calls_after_30)
    print(f"\n(1) per key: exploring share of its time over {CALLS_PER_KEY:,} calls; worst "
          f"{keys[worst][0]} at {keys[worst][1]:,} elements ({shares[worst]:.2%})")
    return [
        ["exploring share of a key's time (median key)", f"{median_share:.2%}",
         f"<= {EXPLORING_TARGET:.0%}", verdict(median_share <= EXPLORING_TARGET)],
        ["  worst key", f"{shares[worst]:.2%}", "-", "-"],
        ["  all keys together", f"{sum(explored) / sum(total):.2%}", "-", "-"],
        ["calls exploring after a key's first 30", f"{after_30:.2%}", "-", "-"],
    ]


def per_call_us(run: Callable[[], Any], calls: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        run()
    return (time.perf_counter_ns() - start) / calls / 1000.0


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[round(q * (len(ordered) - 1))]


def small_keys() -> list[list[str]]:
    """(2): per small key, the adaptive runtime against a forced run of its committed arm."""
    rng = np.random.default_rng(1)
    adaptive = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    forced = {arm: ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False, force_backend=arm))
              for arm in (ar.Backend.SIMD, ar.Backend.SCALAR)}
    rows, ratios, lows, highs = [], [], [], []
    for name in OPERATIONS:
        for n in SMALL_SIZES:
            args = inputs(name, n, rng)
            for _ in range(CALLS_PER_KEY):  # converge
                adaptive.run(name, *args)
            decision = adaptive.decide(name, n)
            arm = decision.backend
            kernel = adaptive.operation(name).implementation_for(arm).fn
            runs = {"adaptive": lambda name=name, args=args: adaptive.run(name, *args),
                    "forced": lambda name=name, args=args, arm=arm: forced[arm].run(name,
                                                                                   *args),
                    "kernel": lambda kernel=kernel, args=args: kernel(*args)}
            for run in runs.values():  # warm: the forced runtime's first calls set up its key
                per_call_us(run, SMALL_BATCH)
            before = reasons(adaptive)
            took: dict[str, list[float]] = {mode: [] for mode in runs}
            modes = list(runs)
            for r in range(SMALL_ROUNDS):  # (the collector left on: what a loop pays)
                shift = r % len(modes)
                for mode in modes[shift:] + modes[:shift]:
                    took[mode].append(per_call_us(runs[mode], SMALL_BATCH))
            timed_other = sum((reasons(adaptive) - before)[r] for r in EXPLORING)
            per_round = [a / f for a, f in zip(took["adaptive"], took["forced"], strict=True)]
            ratio = statistics.median(per_round)
            ratios.append(ratio)
            lows.append(quantile(per_round, 0.1))
            highs.append(quantile(per_round, 0.9))
            median = {mode: statistics.median(values) for mode, values in took.items()}
            rows.append([f"{name} {n:,} ({size_bucket(n)})", arm.value,
                         f"{median['kernel']:.2f} us", f"{median['forced']:.2f} us",
                         f"{median['adaptive']:.2f} us",
                         f"{ratio:.3f}x [{lows[-1]:.3f}-{highs[-1]:.3f}]", str(timed_other),
                         f"<= {SMALL_TARGET:.2f}x", verdict(ratio <= SMALL_TARGET)])
    calls = SMALL_ROUNDS * SMALL_BATCH
    print_table(f"(2) small keys, converged ({CALLS_PER_KEY:,} calls first): per call, median "
                f"of {SMALL_ROUNDS} rounds of {SMALL_BATCH:,} calls of each, rotating order; "
                "ratio: median of the rounds' ratios [middle 80 % of them]; numpy float64",
                ["key (bucket)", "committed", "kernel", "forced run", "adaptive",
                 "adaptive/forced", f"other arm timed (of {calls:,})", "target", "verdict"],
                rows)
    worst = max(range(len(ratios)), key=ratios.__getitem__)
    middle = sorted(range(len(ratios)), key=ratios.__getitem__)[len(ratios) // 2]
    return [["small keys: adaptive / forced run of its arm (median key)",
             f"{ratios[middle]:.3f}x [{lows[middle]:.3f}-{highs[middle]:.3f}]",
             f"<= {SMALL_TARGET:.2f}x", verdict(ratios[middle] <= SMALL_TARGET)],
            ["  worst key", f"{ratios[worst]:.3f}x [{lows[worst]:.3f}-{highs[worst]:.3f}]",
             f"<= {SMALL_TARGET:.2f}x", verdict(ratios[worst] <= SMALL_TARGET)]]


def main() -> None:
    began = time.perf_counter()
    only_small = sys.argv[1:] == ["small"]
    rows = [] if only_small else exploring_over_life()
    rows += small_keys()
    print_table(f"steady state: {len(OPERATIONS)} built-in operations, numpy float64",
                ["metric", "measured", "target", "verdict"], rows)
    print(f"total benchmark time {time.perf_counter() - began:.1f} s")


if __name__ == "__main__":
    main()
