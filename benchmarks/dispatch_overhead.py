"""Per-call overhead of ``rt.run`` against a bare Python call of the same kernel.

Measured side by side in one run (min over repeats, so the machine's noise inflates neither):
(a) cold keys — the exploring calls of fresh (operation, size bucket) keys;
(b) a converged key; (c) a hot operation (over ``hot_path_calls_per_sec``, tracing off).
Both arms of the benchmark operation run the same kernel, so the arm chosen does not matter.
Targets (2-core machine): (a) <= 3 us, (b) <= 1 us and <= 10x a bare call, (c) <= 0.5 us.
"""

from __future__ import annotations

import time

import numpy as np
from _table import print_table, verdict

import adaptive_runtime as ar

A = np.random.default_rng(0).random(64)
B = np.random.default_rng(1).random(64)


def kernel(n: int, a: np.ndarray, b: np.ndarray) -> float:
    return a.dot(b)


def make_runtime(ops: int = 1) -> ar.AdaptiveRuntime:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(), builtin_ops=False)
    for i in range(ops):
        op = rt.register(f"bench{i}", size=lambda n, a, b: n, kind="vector")
        op.add_implementation(ar.Backend.SIMD, kernel)
        op.add_implementation(ar.Backend.SCALAR, kernel)
    return rt


def per_call_ns(loop, calls: int, repeats: int = 7) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter_ns()
        loop()
        best = min(best, (time.perf_counter_ns() - start) / calls)
    return best


def steady(fn, *args, calls: int = 200_000) -> float:
    def loop() -> None:
        for _ in range(calls):
            fn(*args)
    return per_call_ns(loop, calls)


def cold_keys_ns() -> tuple[float, float, int]:
    """(runtime ns/call, bare ns/call, exploring calls per key) over fresh keys."""
    probe = make_runtime()
    calls_per_key = 0
    while probe.decide("bench0", 8).reason is not ar.Reason.EXPLOIT:
        probe.run("bench0", 8, A, B)
        calls_per_key += 1
    sizes = [1 << b for b in range(1, 40)]
    ops = 40
    work = [(f"bench{i}", n) for i in range(ops) for n in sizes]
    total = len(work) * calls_per_key

    runtime_best = float("inf")
    for _ in range(5):
        rt = make_runtime(ops)
        run = rt.run
        start = time.perf_counter_ns()
        for name, n in work:
            for _ in range(calls_per_key):
                run(name, n, A, B)
        runtime_best = min(runtime_best, (time.perf_counter_ns() - start) / total)

    def bare_loop() -> None:
        for _name, n in work:
            for _ in range(calls_per_key):
                kernel(n, A, B)
    return runtime_best, per_call_ns(bare_loop, total), calls_per_key


def main() -> None:
    bare_ns = steady(kernel, 8, A, B)
    bare_call_ns = steady(lambda: None, calls=500_000)

    rt = make_runtime()
    for _ in range(5_000):
        rt.run("bench0", 8, A, B)
    assert rt.decide("bench0", 8).reason is ar.Reason.EXPLOIT
    converged_ns = steady(rt.run, "bench0", 8, A, B)

    hot_rt = make_runtime()
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline and not hot_rt.is_hot_path("bench0"):
        for _ in range(10_000):
            hot_rt.run("bench0", 8, A, B)
    hot = hot_rt.is_hot_path("bench0")
    hot_ns = steady(hot_rt.run, "bench0", 8, A, B)

    cold_ns, cold_bare_ns, per_key = cold_keys_ns()

    def us(ns: float) -> str:
        return f"{ns / 1000:.3f}"

    b_over = converged_ns - bare_ns
    rows = [
        ["bare kernel call", us(bare_ns), "-", "-", "-"],
        ["(a) cold key (exploring)", us(cold_ns), us(cold_ns - cold_bare_ns),
         "<= 3 us", verdict(cold_ns - cold_bare_ns <= 3000)],
        ["(b) converged key", us(converged_ns), us(b_over),
         f"<= 1 us, <= 10x bare call ({us(10 * bare_call_ns)} us)",
         verdict(b_over <= 1000 and b_over <= 10 * bare_call_ns)],
        [f"(c) hot operation (hot={hot})", us(hot_ns), us(hot_ns - bare_ns), "<= 0.5 us",
         verdict(hot and hot_ns - bare_ns <= 500)],
    ]
    print_table("dispatch overhead (us per call, min of 7 runs; kernel: 64-element dot)",
                ["case", "per call", "overhead", "target", "verdict"], rows)
    print(f"bare Python call (no-op lambda): {us(bare_call_ns)} us; "
          f"converged overhead = {b_over / bare_call_ns:.1f}x a bare call; "
          f"cold keys explore for {per_key} calls each")


if __name__ == "__main__":
    main()
