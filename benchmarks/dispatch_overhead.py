"""Per-call overhead of ``rt.run`` against a bare Python call of the same kernel.

Measured side by side in one run (min over repeats, so the machine's noise inflates neither):
(a) cold keys — calls of fresh (operation, size bucket) keys that are still exploring (each is
timed), in the rounds where the runtime's own decision counts say that nine calls in ten
explored; the first call (which creates the key) and the first round in which most keys run
committed are shown beside it;
(b) a converged key; (c) a hot operation (over ``hot_path_calls_per_sec``, tracing off).
Both arms of the benchmark operation run the same kernel, so the arm chosen does not matter.
Targets (2-core machine): (a) <= 3 us, (b) <= 1 us and <= 10x a bare call, (c) <= 0.5 us.
(d) the CUDA-graph capture check (where torch is installed): what one check costs, paid only by
calls of device-input keys committed to a CPU arm (``host_arms_on_device``); counted over the
converged host-input loop of (b), which must never ask.
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


# calls of each fresh key measured in (a): past the commit of keys that explore longest (two
# arms that tie are timed up to 2 x min_samples_per_arm times each)
COLD_CALLS = 16
# a round of calls counts as exploring when this share of its decisions explores
EXPLORING_SHARE = 0.9


def decisions_by_reason(rt: ar.AdaptiveRuntime) -> dict[ar.Reason, int]:
    counts: dict[ar.Reason, int] = dict.fromkeys(ar.Reason, 0)
    for key, n in rt.selection_counts().items():
        counts[key.reason] += n
    return counts


def cold_key_calls_ns() -> tuple[dict[str, float], float]:
    """Per-call time on fresh keys by phase, and the bare kernel's, over 1,560 keys.

    Every call of a key that has not converged is timed (the measurement gate's rule for
    cold keys). Call k of every key runs as one round, then call k+1, and so on; each round's
    phase is what the runtime decided for its calls (its decision counts before and after):
    the keys' first calls (which create them), the rounds of exploring calls, and the first
    round in which most keys run committed. (Phases are read from the runtime, not from a
    separate probe: with two arms that tie, how long a key explores varies from run to
    run.)
    """
    ops = 40
    work = [(f"bench{i}", 1 << b) for i in range(ops) for b in range(1, 40)]
    best = [float("inf")] * COLD_CALLS
    exploring = [True] * COLD_CALLS
    committing = [True] * COLD_CALLS
    for _ in range(5):
        rt = make_runtime(ops)
        run = rt.run
        before = decisions_by_reason(rt)
        for call in range(COLD_CALLS):  # call k of every key, then call k+1, ...
            start = time.perf_counter_ns()
            for name, n in work:
                run(name, n, A, B)
            best[call] = min(best[call], (time.perf_counter_ns() - start) / len(work))
            after = decisions_by_reason(rt)
            share = {r: (after[r] - before[r]) / len(work) for r in after}
            before = after
            exploring[call] &= share[ar.Reason.EXPLORE] >= EXPLORING_SHARE
            committing[call] &= share[ar.Reason.EXPLOIT] >= 0.5

    def bare_loop() -> None:
        for _name, n in work:
            kernel(n, A, B)
    explored = [best[k] for k in range(1, COLD_CALLS) if exploring[k]]
    commit = next((k for k in range(1, COLD_CALLS) if committing[k]), COLD_CALLS - 1)
    phases = {"first": best[0],
              "exploring": sum(explored) / len(explored) if explored else float("nan"),
              "rounds": len(explored), "commit": best[commit],
              "all": sum(best[:commit + 1]) / (commit + 1)}
    return phases, per_call_ns(bare_loop, len(work))


def capture_check() -> tuple[float, int] | None:
    """(d): the capture guard's cost per call (ns), and how many checks 200,000 converged
    calls of a host-input key made (the check counted where torch answers it); ``None``
    without torch."""
    try:
        import torch
    except ImportError:
        return None
    from types import SimpleNamespace

    from adaptive_runtime._dispatch.period import _device_code_while_captured
    from adaptive_runtime.operations import Implementation, cuda_graph_capturing

    def no_op() -> None:
        return None

    # the guard a device key committed to a CPU arm runs (the GPU arm while captured), around
    # a kernel that does nothing, against that kernel called bare
    entry = SimpleNamespace(guarded=None, capturing=cuda_graph_capturing,
                            impls={ar.Backend.GPU: Implementation(ar.Backend.GPU, no_op)})
    guarded = _device_code_while_captured(entry, no_op)  # type: ignore[arg-type]
    check_ns = steady(guarded) - steady(no_op)
    asked = [0]
    real = torch.cuda.is_current_stream_capturing

    def counted() -> bool:
        asked[0] += 1
        return real()

    rt = make_runtime()
    for _ in range(5_000):
        rt.run("bench0", 8, A, B)
    torch.cuda.is_current_stream_capturing = counted
    try:
        for _ in range(200_000):
            rt.run("bench0", 8, A, B)
    finally:
        torch.cuda.is_current_stream_capturing = real
    return check_ns, asked[0]


def torch_has_cuda() -> bool:
    import torch

    return torch.version.cuda is not None


def main() -> None:
    bare_ns = steady(kernel, 8, A, B)
    bare_call_ns = steady(lambda: None, calls=500_000)

    rt = make_runtime()
    for _ in range(5_000):
        rt.run("bench0", 8, A, B)
    # converged: committed (its next timed call may be a re-check of the other arm)
    assert rt.decide("bench0", 8).reason in (ar.Reason.EXPLOIT, ar.Reason.RECHECK)
    converged_ns = steady(rt.run, "bench0", 8, A, B)

    hot_rt = make_runtime()
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline and not hot_rt.is_hot_path("bench0"):
        for _ in range(10_000):
            hot_rt.run("bench0", 8, A, B)
    hot = hot_rt.is_hot_path("bench0")
    hot_ns = steady(hot_rt.run, "bench0", 8, A, B)

    cold, cold_bare_ns = cold_key_calls_ns()

    def us(ns: float) -> str:
        return f"{ns / 1000:.3f}"

    b_over = converged_ns - bare_ns
    rows = [
        ["bare kernel call", us(bare_ns), "-", "-", "-"],
        [f"(a) cold key: exploring call ({cold['rounds']:.0f} rounds)", us(cold["exploring"]),
         us(cold["exploring"] - cold_bare_ns), "<= 3 us",
         verdict(cold["exploring"] - cold_bare_ns <= 3000)],
        ["    new key: first call", us(cold["first"]), us(cold["first"] - cold_bare_ns),
         "(no target)", "-"],
        ["    first round mostly committed", us(cold["commit"]), us(cold["commit"] - cold_bare_ns),
         "(no target)", "-"],
        ["    mean, first call to that one", us(cold["all"]), us(cold["all"] - cold_bare_ns),
         "(no target)", "-"],
        ["(b) converged key", us(converged_ns), us(b_over),
         f"<= 1 us, <= 10x bare call ({us(10 * bare_call_ns)} us)",
         verdict(b_over <= 1000 and b_over <= 10 * bare_call_ns)],
        [f"(c) hot operation (hot={hot})", us(hot_ns), us(hot_ns - bare_ns), "<= 0.5 us",
         verdict(hot and hot_ns - bare_ns <= 500)],
    ]
    capture = capture_check()  # (last: it imports torch)
    if capture is not None:
        check_ns, asked = capture
        build = "CUDA" if torch_has_cuda() else "CPU-only torch: the query raises, caught"
        rows.append(["(d) capture guard, per fast call of a device key on a CPU arm", us(check_ns),
                     us(check_ns), f"(measured; {build})", "-"])
        rows.append([f"    checks in 200,000 converged host-input calls: {asked}", "-", "-",
                     "0", verdict(asked == 0)])
    print_table("dispatch overhead (us per call, min of 7 runs; kernel: 64-element dot)",
                ["case", "per call", "overhead", "target", "verdict"], rows)
    print(f"bare Python call (no-op lambda): {us(bare_call_ns)} us; "
          f"converged overhead = {b_over / bare_call_ns:.1f}x a bare call")


if __name__ == "__main__":
    main()
