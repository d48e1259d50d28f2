"""The adaptive runtime against the call a user would write anyway.

For each input type (numpy arrays, torch tensors, JAX arrays where the runtime has JAX arms) and
dtype (float32, float64), a workload of every built-in operation runs through a fresh adaptive
runtime and as the plain library call (numpy / ``torch`` / jitted ``jax.numpy``; numpy's gelu is
scipy's ``erf``), and the plain call again (the A/A column: the noise floor), the three side by
side in one process in a random order per call — taking turns call by call meets the machine's
drift more finely than a process per side could, and the inputs stay shared. This is done in
``ROUNDS`` rounds (``PLAIN_CALLS_ROUNDS``, 5), each with a fresh runtime learning from nothing.
Target: adaptive <= 1.02x the plain call per input type and dtype, exploration included (goal:
under 1x, from the arms that beat it), judged by the rounds: per round the ratio of the two
sides' totals, the median of the rounds' ratios with a 95 % bootstrap interval — "meets" when
the interval is within the target, "MISSES" when beyond it, else "inconclusive" with about how
many rounds would decide (``_verdicts``). Per size bucket with at least 100 calls over the
rounds, adaptive <= 1.10x the plain call or at most the dispatch overhead's target (0.35 us)
above it a call (their totals over the rounds), and the buckets that miss (no bucket with
enough calls: "not judged"); then the operations and sizes where an adaptive arm beats the
plain call, and by how much.

What a competent user's baseline looks like, and so what this compares:

- Shapes come from a fixed set, as in a training loop: ``SHAPES_PER_OP`` sizes per operation,
  log-spaced from 8 elements to the operation's largest, each call drawing one of them. (A new
  random size per call would make nearly every jitted call a compilation: the comparison would
  be of XLA's compiler, not of the calls.)
- Both sides are warmed on every shape they will see before anything is timed: the plain call
  and every adaptive arm's kernel (numba compiles, XLA compiles each shape, torch initialises
  lazily). That warm-up is reported as its own table, with the XLA compilations counted during
  the timed calls (expected: none on either side).
- Both sides are synced alike: a JAX result is blocked on (``jax.block_until_ready``) inside
  the timed region on the plain side and on the adaptive side, and JAX inputs before it,
  untimed. (JAX dispatches asynchronously: timing one side's launch against the other side's
  finished work would compare different things.)
- numpy and torch inputs are read once, untimed, before each call, so whichever side runs
  first does not pay for bringing them into cache for the other.

``PLAIN_CALLS_PER_OP`` (environment variable of the same name; calls per operation in each
round) and ``PLAIN_CALLS_ROUNDS`` shrink the run while developing. The default, 120 calls per
operation a round, replaced one run of 600 with two sides: five rounds of three sides cost about
1.5x that run, and the per-bucket counts over the rounds stay as they were; a round's fresh
runtime meets each shape ~20 times, so exploration weighs more in a round than it did in the
one run.
"""

from __future__ import annotations

import gc
import math
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
from _table import print_table, verdict
from _verdicts import judge, paired_ratio

import adaptive_runtime as ar
from adaptive_runtime._imported import imported
from adaptive_runtime.keys import size_bucket
from adaptive_runtime.operations import DeviceProbe, Implementation

SEED = 0
GC_EVERY = 50  # calls between garbage collections (which are not timed)
# calls per operation in each round (a fresh runtime each round: exploration included)
PLAIN_CALLS_PER_OP = int(os.environ.get("PLAIN_CALLS_PER_OP", "120"))
ROUNDS = int(os.environ.get("PLAIN_CALLS_ROUNDS", "5"))
# the sides of every call, in a random order per call: the plain call again is the A/A
PLAIN, ADAPTIVE, PLAIN_AGAIN = 0, 1, 2
SIDES = (PLAIN, ADAPTIVE, PLAIN_AGAIN)
PLAIN_MAX_ELEMENTS = 1_000_000
PLAIN_TARGET = 1.02
# per (operation, size bucket) with at least PER_BUCKET_MIN_CALLS calls: adaptive <= 1.10x the
# plain call, or at most the converged dispatch overhead's target above it a call (the
# smallest sizes, where a call of a microsecond cannot absorb the runtime's own cost)
PER_BUCKET_MIN_CALLS = 100
PER_BUCKET_TARGET = 1.10
PER_BUCKET_OVERHEAD_US = 0.35
BEATEN_ROWS = 6
PLAIN_LINEAR_MAX = 512 * 64 * 64  # multiply-adds (rows of 64 inputs, 64 outputs)
# the fixed shapes each operation is called with (log-spaced sizes): a training loop's few
SHAPES_PER_OP = 6
# distinct inputs per shape, used in turn (fresh data without a new array per call)
INPUTS_PER_SHAPE = 2
# untimed calls of each side per shape before the timed ones (the first one compiles)
WARM_CALLS = 2

Make = Callable[[np.random.Generator, int], tuple[Any, ...]]


def _vector(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.standard_normal(n)


def _rows(rng: np.random.Generator, n: int) -> np.ndarray:
    """Rows of 64 (fewer elements: one row), as a model's activations."""
    width = 64 if n >= 64 else n
    return rng.standard_normal((max(n // width, 1), width))


def _square(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    side = max(int(math.sqrt(n)), 1)
    return rng.standard_normal((side, side)), rng.standard_normal((side, side))


def _linear_args(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    rows = max(n // (64 * 64), 1)
    return (rng.standard_normal((rows, 64)), rng.standard_normal((64, 64)),
            rng.standard_normal(64))


# operation -> (inputs for a size of n elements, the smallest n, the largest n)
PLAIN_WORKLOAD: dict[str, tuple[Make, int, int]] = {
    "dot": (lambda rng, n: (_vector(rng, n), _vector(rng, n)), 8, PLAIN_MAX_ELEMENTS),
    "add": (lambda rng, n: (_vector(rng, n), _vector(rng, n)), 8, PLAIN_MAX_ELEMENTS),
    "scale": (lambda rng, n: (1.5, _vector(rng, n), _vector(rng, n)), 8, PLAIN_MAX_ELEMENTS),
    "sum": (lambda rng, n: (_vector(rng, n),), 8, PLAIN_MAX_ELEMENTS),
    "relu": (lambda rng, n: (_vector(rng, n),), 8, PLAIN_MAX_ELEMENTS),
    "gelu": (lambda rng, n: (_vector(rng, n),), 8, PLAIN_MAX_ELEMENTS),
    "softmax": (lambda rng, n: (_rows(rng, n),), 8, PLAIN_MAX_ELEMENTS),
    "layer_norm": (lambda rng, n: (_rows(rng, n),), 8, PLAIN_MAX_ELEMENTS),
    "matmul": (_square, 8, 256 * 256),  # (n: the elements of each square matrix)
    # (below one row of 64 x 64 multiply-adds every size is the same shape)
    "linear": (_linear_args, 64 * 64, PLAIN_LINEAR_MAX),
    "conv1d": (lambda rng, n: (_vector(rng, n), _vector(rng, 31)), 31, PLAIN_MAX_ELEMENTS),
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
    """What a torch user writes for each operation (ATen's own functions)."""
    import torch
    import torch.nn.functional as F

    return {"dot": torch.dot, "add": torch.add,
            "scale": lambda alpha, x, y: torch.add(y, x, alpha=alpha), "sum": torch.sum,
            "relu": torch.relu, "gelu": F.gelu, "softmax": lambda x: torch.softmax(x, -1),
            "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]), "matmul": torch.mm,
            "linear": F.linear,
            "conv1d": lambda x, w: F.conv1d(x.view(1, 1, -1), w.view(1, 1, -1)).view(-1)}


def jax_calls() -> dict[str, Callable[..., Any]]:
    """Jitted ``jax.numpy``, one ``jax.jit`` per operation (what a JAX user writes). Not
    blocked on here: the caller syncs both sides' results alike."""
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
    return {name: jax.jit(fn) for name, fn in plain.items()}


def convert(library: str, args: tuple[Any, ...], dtype: Any) -> tuple[Any, ...]:
    """``args`` (numpy float64) as ``library``'s arrays of ``dtype``; scalars unchanged."""
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


def syncer(library: str) -> Callable[[Any], Any]:
    """What waits for a call's result to be computed: ``jax.block_until_ready`` for JAX
    (asynchronous dispatch), nothing for numpy and torch on the CPU (their calls return done)."""
    if library == "jax":
        import jax

        return jax.block_until_ready
    return lambda result: result


class CompileCounter:
    """XLA compilations (and jaxpr traces) JAX reports through ``jax.monitoring``: the timed
    calls must show none, or they time a compiler."""

    EVENTS = frozenset({"/jax/core/compile/jaxpr_trace_duration",
                        "/jax/core/compile/backend_compile_duration"})

    def __init__(self) -> None:
        self.count = 0
        self._listening = False

    def listen(self) -> None:
        """Start counting (once; JAX has no way to remove a listener, so it stays)."""
        if self._listening:
            return
        from jax import monitoring

        def counted(event: str, _duration_s: float, **_kwargs: Any) -> None:
            if event in self.EVENTS:
                self.count += 1

        monitoring.register_event_duration_secs_listener(counted)
        self._listening = True


COMPILES = CompileCounter()


def shape_sizes(smallest: int, largest: int) -> list[int]:
    """``SHAPES_PER_OP`` log-spaced sizes from ``smallest`` to ``largest`` (distinct)."""
    sizes = np.geomspace(smallest, largest, SHAPES_PER_OP)
    return sorted({round(float(n)) for n in sizes})


Call = tuple[str, tuple[Any, ...]]


def build_calls(library: str, names: list[str], dtype: Any
                ) -> tuple[list[Call], dict[tuple[str, int], list[tuple[Any, ...]]]]:
    """The shuffled timed calls, and the inputs of every (operation, size) shape."""
    rng = np.random.default_rng(SEED)
    inputs: dict[tuple[str, int], list[tuple[Any, ...]]] = {}
    calls: list[Call] = []
    for name in names:
        make, smallest, largest = PLAIN_WORKLOAD[name]
        sizes = shape_sizes(smallest, largest)
        for n in sizes:
            inputs[(name, n)] = [convert(library, make(rng, n), dtype)
                                 for _ in range(INPUTS_PER_SHAPE)]
        used: dict[int, int] = defaultdict(int)
        for _ in range(PLAIN_CALLS_PER_OP):
            n = sizes[int(rng.integers(len(sizes)))]
            pool = inputs[(name, n)]
            calls.append((name, pool[used[n] % len(pool)]))
            used[n] += 1
    return [calls[i] for i in rng.permutation(len(calls))], inputs


def runs_here(impl: Implementation) -> bool:
    """Whether the runtime may run ``impl`` in this program now: not an arm calling a framework
    the program has not imported yet (ATen on numpy inputs before torch is imported: the
    runtime never imports torch itself, so it offers no such arm, and calling one raises)."""
    return not impl.needs or imported(impl.needs) is not None


def warm_up(rt: ar.AdaptiveRuntime, plain_calls: dict[str, Callable[..., Any]],
            inputs: dict[tuple[str, int], list[tuple[Any, ...]]],
            sync: Callable[[Any], Any]) -> tuple[float, float]:
    """Every shape, ``WARM_CALLS`` times, through the plain call and every available adaptive
    arm's kernel (called directly: the runtime learns nothing from it, so its exploration is
    still in the timed calls). Returns (plain, adaptive arms) seconds: the compile and lazy
    set-up costs a process pays once per shape."""
    probe = DeviceProbe()
    plain_s = adaptive_s = 0.0
    for (name, _n), pool in inputs.items():
        args = pool[0]
        sync(args)
        start = time.perf_counter()
        for _ in range(WARM_CALLS):
            sync(plain_calls[name](*args))
        plain_s += time.perf_counter() - start
        family_op, _entries, _size = rt._dispatcher.route(name, args)
        start = time.perf_counter()
        for impl in family_op.implementations():  # (every arm's, and every variant)
            if probe.available(impl.backend) and runs_here(impl):
                for _ in range(WARM_CALLS):
                    sync(impl.fn(*args))
        adaptive_s += time.perf_counter() - start
    return plain_s, adaptive_s


def versus_plain_calls() -> None:
    """Run every input type and dtype; print the comparison, the warm-up and the wins."""
    libraries: dict[str, Callable[[], dict[str, Callable[..., Any]]]] = {
        "numpy": numpy_calls, "torch": torch_calls}
    probe = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    if "jax" in probe.operation("gelu").families:  # (JAX arms registered)
        libraries["jax"] = jax_calls
    rows, warm_rows, wins = [], [], []
    bucket_summary: list[list[str]] = []
    bucket_misses: list[list[str]] = []
    for library, make_calls in libraries.items():
        plain_calls = make_calls()
        for dtype in (np.float32, np.float64):
            if library == "jax":
                import jax

                # (float64 JAX arrays need x64 on; float32 ones are the same either way)
                jax.config.update("jax_enable_x64", dtype is np.float64)
                COMPILES.listen()
            label = f"{library} {np.dtype(dtype).name}"
            run = _plain_run(library, plain_calls, dtype)
            rows.append(verdict_row(label, run["rounds"]))
            plain_warm, adaptive_warm = run["warm"]
            compiles = (f"{run['compiles'][0]} / {run['compiles'][1]}" if library == "jax"
                        else "-")
            warm_rows.append([label, run["shapes"], f"{plain_warm:.3f} s",
                              f"{adaptive_warm:.3f} s", compiles])
            wins += [[label, *row] for row in run["beaten"]]
            summary, worst = bucket_rows(label, run["buckets"])
            bucket_summary.append(summary)
            bucket_misses += worst
    print_table(f"adaptive vs the plain library call: {ROUNDS} rounds of "
                f"{PLAIN_CALLS_PER_OP} calls per operation over {SHAPES_PER_OP} fixed shapes "
                f"each (8..{PLAIN_MAX_ELEMENTS:,} elements), shuffled, both sides warmed on "
                "every shape and synced alike, a fresh runtime each round (exploration "
                "included); times: median of the rounds; ratios per round: median [95 % "
                "bootstrap interval]",
                ["inputs", "plain call", "adaptive", "adaptive / plain", "target", "verdict",
                 "A/A: plain again / plain"], rows)
    print_table("compile / warm-up before the timed calls (untimed, not in the ratios above: "
                f"{WARM_CALLS} calls per shape, the plain call and every adaptive arm's kernel)",
                ["inputs", "shapes", "plain call", "adaptive arms",
                 "XLA compiles in timed calls (plain / adaptive)"], warm_rows)
    print_table(f"per size bucket with >= {PER_BUCKET_MIN_CALLS} calls over the rounds "
                f"(totals of the {ROUNDS} rounds): adaptive <= "
                f"{PER_BUCKET_TARGET:.2f}x the plain call, or at most "
                f"{PER_BUCKET_OVERHEAD_US} us above it a call (the dispatch overhead's target)",
                ["inputs", "buckets meeting", "median ratio", "verdict"], bucket_summary)
    print_table(f"buckets that miss (the {BEATEN_ROWS} worst per input type; per call)",
                ["inputs", "operation", "calls", "plain", "adaptive", "ratio", "over plain"],
                bucket_misses or [["(none)", "", "", "", "", "", ""]])
    print_table("where an adaptive arm beats the plain call (per operation and size bucket, "
                "totals of the same calls; at least 10% faster; the "
                f"{BEATEN_ROWS} largest savings per input type)",
                ["inputs", "operation", "sizes", "arm", "plain", "adaptive", "gain"],
                wins or [["(none)", "", "", "", "", "", ""]])


def verdict_row(label: str, rounds: dict[int, list[float]]) -> list[object]:
    """One input type's row of the verdict table: the sides' median totals, the per-round
    ratio of adaptive to the plain call judged by its interval, and the A/A beside it."""
    plain, adaptive = rounds[PLAIN], rounds[ADAPTIVE]
    ratio = paired_ratio(adaptive, plain)
    return [label, f"{statistics.median(plain):.3f} s", f"{statistics.median(adaptive):.3f} s",
            str(ratio), f"<= {PLAIN_TARGET}", judge(ratio, PLAIN_TARGET),
            str(paired_ratio(rounds[PLAIN_AGAIN], plain))]


Key = tuple[str, int]  # (operation, size bucket)


def _plain_run(library: str, plain_calls: dict[str, Callable[..., Any]],
               dtype: Any) -> dict[str, Any]:
    """One input type and dtype: each side's timed total per round, the warm-up seconds, the
    compilations during the timed calls (plain, adaptive), the shape count, the keys where
    the adaptive side wins and the per-bucket totals over the rounds."""
    warm_rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    names = [name for name in PLAIN_WORKLOAD if name in plain_calls]
    calls, inputs = build_calls(library, names, dtype)
    sync = syncer(library)
    warm = warm_up(warm_rt, plain_calls, inputs, sync)
    rounds: dict[int, list[float]] = {side: [] for side in SIDES}
    compiles = [0, 0, 0]  # XLA compilations during the timed calls, per side
    per_key: dict[Key, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    order = np.random.default_rng(SEED + 2)
    for _ in range(ROUNDS):
        # (a fresh runtime each round: every round learns from nothing, as the one run did)
        rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
        totals = timed_round(rt, calls, plain_calls, sync, order, per_key, compiles)
        for side in SIDES:
            rounds[side].append(totals[side])
    losses = sorted(((adaptive - plain, key) for key, (plain, adaptive, _n) in per_key.items()),
                    reverse=True)[:5]
    print(f"  {library} {np.dtype(dtype).name}: largest losses vs the plain call: " + "; ".join(
        f"{name} bucket {bucket} {loss * 1e3:+.1f} ms" for loss, (name, bucket) in losses),
        flush=True)
    return {"rounds": rounds, "warm": warm,
            "compiles": (compiles[PLAIN] + compiles[PLAIN_AGAIN], compiles[ADAPTIVE]),
            "shapes": len(inputs), "beaten": beaten_rows(rt, calls, per_key),
            "buckets": {key: tuple(v) for key, v in per_key.items()}}


def timed_round(rt: ar.AdaptiveRuntime, calls: list[Call],
                plain_calls: dict[str, Callable[..., Any]], sync: Callable[[Any], Any],
                order: np.random.Generator, per_key: dict[Key, list[float]],
                compiles: list[int]) -> list[float]:
    """Every call once on each side, the sides in a random order per call (so the side that
    runs first, on a cache the previous call left, is no side in particular); each side's
    total. ``per_key`` gathers (plain, adaptive, calls) per key, ``compiles`` the XLA
    compilations per side."""
    totals = [0.0] * len(SIDES)
    clock = time.perf_counter
    run = rt.run
    gc.disable()
    try:
        for i, (name, args) in enumerate(calls):
            touch_any(args)
            sync(args)  # (JAX inputs computed before either side's timer starts)
            stats = per_key[(name, size_bucket(rt.operation(name).size_of(*args)))]
            stats[2] += 1
            plain, adaptive_args = plain_calls[name], (name, *args)
            for side in order.permutation(len(SIDES)):
                fn, fn_args = (run, adaptive_args) if side == ADAPTIVE else (plain, args)
                before = COMPILES.count
                start = clock()
                sync(fn(*fn_args))
                took = clock() - start
                compiles[side] += COMPILES.count - before
                totals[side] += took
                if side != PLAIN_AGAIN:  # (per key: adaptive against the plain call)
                    stats[side] += took
            if (i + 1) % GC_EVERY == 0:
                gc.collect()
    finally:
        gc.enable()
    return totals


def beaten_rows(rt: ar.AdaptiveRuntime, calls: list[Call], per_key: dict[Key, list[float]]
                ) -> list[list[str]]:
    """The keys where the adaptive side beat the plain call by at least 10 % over the
    rounds, the largest savings first (at most ``BEATEN_ROWS``), with the arm ``rt`` (the
    last round's runtime) runs there."""
    beaten = []
    by_saving = sorted(per_key.items(), key=lambda item: item[1][1] - item[1][0])
    for (name, bucket), (plain, adaptive, _n) in by_saving[:BEATEN_ROWS]:
        if adaptive < 0.9 * plain:
            lo, hi = 1 << (bucket - 1), (1 << bucket) - 1
            args = next(a for n, a in calls if n == name
                        and size_bucket(rt.operation(name).size_of(*a)) == bucket)
            family = rt._dispatcher.route(name, args)[0].name
            arm = rt.decide(family, lo).backend.value
            beaten.append([name, f"{lo:,}-{hi:,}", arm, f"{plain * 1e3:.2f} ms",
                           f"{adaptive * 1e3:.2f} ms", f"{plain / adaptive:.2f}x"])
    return beaten


def bucket_rows(label: str, buckets: dict[tuple[str, int], tuple[float, float, int]]
                ) -> tuple[list[str], list[list[str]]]:
    """The per-bucket verdict of one input type and dtype — buckets with at least
    ``PER_BUCKET_MIN_CALLS`` calls: adaptive <= ``PER_BUCKET_TARGET``x the plain call, or at
    most ``PER_BUCKET_OVERHEAD_US`` above it a call — and its worst buckets."""
    judged = {key: v for key, v in buckets.items() if v[2] >= PER_BUCKET_MIN_CALLS}

    def ok(v: tuple[float, float, int]) -> bool:
        plain, adaptive, n = v
        return adaptive <= PER_BUCKET_TARGET * plain or (
            (adaptive - plain) / n * 1e6 <= PER_BUCKET_OVERHEAD_US)

    met = [key for key, v in judged.items() if ok(v)]
    ratios = sorted(v[1] / v[0] for v in judged.values())
    # (no bucket with enough calls: nothing judged, never a "meets")
    summary = [label, f"{len(met)} of {len(judged)}",
               f"{ratios[len(ratios) // 2]:.3f}x" if ratios else "-",
               verdict(len(met) == len(judged)) if judged else "not judged"]
    worst = []
    for key, (plain, adaptive, n) in sorted(judged.items(), key=lambda kv: -kv[1][1] / kv[1][0]):
        if ok((plain, adaptive, n)):
            continue
        lo = 1 << (key[1] - 1) if key[1] else 0
        worst.append([label, f"{key[0]} from {lo:,}", f"{n}", f"{plain / n * 1e6:.2f} us",
                      f"{adaptive / n * 1e6:.2f} us", f"{adaptive / plain:.2f}x",
                      f"{(adaptive - plain) / n * 1e6:+.2f} us"])
    return summary, worst[:BEATEN_ROWS]


def touch_any(args: tuple[Any, ...]) -> None:
    """Read every numpy array and tensor once, untimed (single-threaded, no pool woken): the
    side that runs first would otherwise bring large inputs into cache for the other. (JAX
    arrays live on their device: they are synced instead.)"""
    for a in args:
        if isinstance(a, np.ndarray) or hasattr(a, "numel"):
            a.sum()


if __name__ == "__main__":
    versus_plain_calls()
