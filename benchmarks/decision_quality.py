"""Is the adaptive choice worth having? A mixed workload of the built-in operations.

The workload: every built-in operation at sizes from 8 to 4·10^6 elements (log-uniform; the
matrix-like ``matmul`` and ``conv1d`` at sizes a scalar loop finishes), float64, shuffled,
``CALLS_PER_OP`` calls of each (about 120 per (operation, size bucket): ~30, then 90 more, as
a training loop meets its shapes again). Each mode runs the whole
workload in a process of its own, so nothing one mode leaves behind (a thread team awake or
asleep, caches, the allocator's state) meets another; the processes of a round run together
and take turns, ``CHUNK_CALLS`` calls each, so the machine's drift over seconds meets every
mode alike:

- the adaptive runtime (default configuration, learning from nothing: exploration included),
  run twice: once timed with nothing between its calls but the benchmark's own (judged), and
  once with its counters read after every call to tell what each call decided (exploring,
  re-checking, which arm), whose share of calls and of time is printed from that twin. Reading
  the counters between calls slows the next call: on keys of 8 to 512 elements ~5 us a call
  in the mean (median call 1.7x a direct kernel call against 1.4x unread), ~0.6 % of the
  workload, a cost no user's loop pays; the twin's total is printed beside it;
- each fixed implementation: each arm's primary kernel, and each variant a built-in operation
  registers (an arm's other implementations: numpy's own call, a numba loop beside ATen;
  an operation without that variant runs its arm's primary kernel), called directly (no
  runtime, no dispatch cost);
- the static size-threshold rule of Trueno and hpfracc — under 1,000 elements SCALAR, else
  SIMD, matrix-like work over 10,000 elements GPU (where there is one) — its size rule and then
  the kernel called directly;
- without a target, what the figures are read against: an adaptive runtime trained on the same
  calls first, in the same process (what exploration costs is the gap between the two).

The oracle, the best implementation per (operation, size bucket) in hindsight — of the arms'
primary kernels and the operation's own variants, the one with the lower median call over
every round — costs per key that implementation's total in the round. Identical code
runs a few % apart from one process to the next on a shared machine, more than the margins
judged here, so the modes run in ``ROUNDS`` rounds, taking turns within each (above), and
every ratio is taken within a round and printed as the median over the rounds with its
spread (lowest-highest). Every process compiles (or loads from numba's disk cache)
each kernel first, calling the kernels directly at each operation's smallest and largest size
(the adaptive runtime still starts knowing nothing); each call's inputs are read once, untimed,
before the call; the cyclic garbage collector runs every ``GC_EVERY`` calls, outside the
timings. Two tables judge the same runs: the learning phase (the workload's first quarter,
about 30 calls per key) and the whole workload. Targets: adaptive <= 1.05x the oracle and
<= 1.05x the static rule, each judged by the rounds' ratios (their median and 95 % bootstrap
interval: ``_verdicts``; an A/A row, the static rule run twice, shows the noise floor; the
best fixed implementation is shown without a target); at most 5 % of its calls exploring
or re-checking in the learning phase (an explore, re-check or drift
decision, or a key's first call on an arm other than the one the key commits to: a first call
must run some arm, and costs learning only when its arm loses; the share with every first call
counted is printed beside it). The whole workload's time is dominated by its large calls, so
a third table weighs every call alike: each call's time over the median call of its key's
oracle implementation, averaged over the calls. Then per key (with at least
``PER_KEY_MIN_CALLS`` calls): adaptive <= 1.10x the fastest implementation forced on that key
(its lower total), the keys that miss; per operation, the crossover sizes this machine shows
(the best implementation per size bucket), and the keys where the adaptive runtime lost
most. Last, at the end of each run of the adaptive runtime (and of the trained one, which ran
the calls twice), its keys with at least 200 calls (``_learned.MIN_CALLS``) and, on each, the
available candidates never timed (issue 40's target: none), with the candidates still left out
of a key until their code is compiled listed apart. At about 120 calls a key, few keys of the
adaptive runtime reach 200 calls: the table says how many were judged.

The adaptive runtime against the plain library call (numpy, torch, JAX) is
``plain_calls.py``.

With ``DECISION_QUALITY_RECORD=path`` set, the fixed arms' timings of the first round are also
written there as a recorded-calls file (one arm per call, in turn), which ``adaptive-runtime
replay`` runs any policy configuration over: policy changes compared on this workload without
the machine's noise. ``DECISION_QUALITY_ROUNDS`` and ``DECISION_QUALITY_CALLS_PER_OP`` shrink a
run for a quick look; ``DECISION_QUALITY_SEED`` draws another workload (0 by default).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
from _learned import untimed, untimed_table
from _table import print_table, verdict
from _verdicts import judge as judge_interval
from _verdicts import paired_ratio

import adaptive_runtime as ar
from adaptive_runtime._imported import imported
from adaptive_runtime.backend import Choice, choice_of, choice_order, parse_choice
from adaptive_runtime.keys import size_bucket
from adaptive_runtime.offline.replay import CALLS_FORMAT
from adaptive_runtime.operations import DeviceProbe, Implementation

Backend = ar.Backend
SEED = int(os.environ.get("DECISION_QUALITY_SEED", "0"))
CALLS_PER_OP = int(os.environ.get("DECISION_QUALITY_CALLS_PER_OP", "2400"))
# the learning phase judged apart: the workload's first 1/LEARNING_PHASE of the calls
LEARNING_PHASE = 4
# the modes' processes take turns: each runs this many calls, then the next one (measure)
CHUNK_CALLS = 500
TURN_DONE = "decision_quality: turn done"
FINISHED = "decision_quality: finished"
ROUNDS = int(os.environ.get("DECISION_QUALITY_ROUNDS", "3"))
GC_EVERY = 50  # calls between garbage collections (which are not timed)
MAX_ELEMENTS = 4_000_000
ORACLE_TARGET = 1.05
# (issue 40: a 1.00x target cannot be decided on a machine where identical code runs +-5 %
# apart; the best fixed implementation is shown without one)
STATIC_TARGET = 1.05
EXPLORING_SHARE_TARGET = 0.05
PER_KEY_TARGET = 1.10
PER_KEY_MIN_CALLS = 100
STATIC_SCALAR_BELOW = 1_000
STATIC_GPU_ABOVE = 10_000
# a file to write the fixed arms' timings to, for adaptive_runtime.offline.replay (unset: none)
RECORD_ENV = "DECISION_QUALITY_RECORD"
ADAPTIVE, TRAINED, STATIC = "adaptive", "trained", "static"
# the static rule run again, in a process of its own: the A/A row (the noise floor)
STATIC_AGAIN = "static_again"
# the adaptive runtime's twin whose counters are read after every call (see the docstring)
OBSERVED = "observed"
# decisions that time an arm to learn: exploring, re-checking, re-measuring after a drift
# alarm (a key's first call, the cold start, is counted apart: see run_mode)
EXPLORING = frozenset({"explore", "recheck", "drift"})
COLD_START = "heuristic"

Make = Callable[[Any, int], tuple[Any, ...]]


class Pool:
    """Inputs cut from one large block of standard normals (views, not copies): drawing the
    ~1.8·10^9 normals of the workload afresh in every process would take longer than the
    timed calls. Offsets are drawn from a seeded generator, so every process sees the same
    inputs, and aligned to 64 bytes, as a fresh array is."""

    def __init__(self, seed: int, size: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.block = self.rng.standard_normal(size)

    def standard_normal(self, shape: int | tuple[int, ...]) -> np.ndarray:
        count = math.prod(shape) if isinstance(shape, tuple) else shape
        offset = int(self.rng.integers(0, (self.block.size - count) // 8 + 1)) * 8
        return self.block[offset:offset + count].reshape(shape)


def _vector(rng: Any, n: int) -> np.ndarray:
    return rng.standard_normal(n)


def _rows(rng: Any, n: int) -> np.ndarray:
    width = 64 if n >= 64 else n
    return rng.standard_normal((max(n // width, 1), width))


def _square(rng: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
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
    """The shuffled calls, the same in every process (a fixed seed)."""
    rng = np.random.default_rng(SEED)
    pool = Pool(SEED + 3, 2 * MAX_ELEMENTS)
    calls = []
    for name in operations:
        make, largest = WORKLOAD[name]
        low, high = math.log(8), math.log(largest)
        for _ in range(CALLS_PER_OP):
            n = max(8, int(math.exp(rng.uniform(low, high))))
            if name == "conv1d":
                n = max(n, 31)
            calls.append((name, make(pool, n)))
    order = rng.permutation(len(calls))
    return [calls[i] for i in order]


def static_arm(op: ar.Operation, n: int, arms: list[Choice]) -> Backend:
    """The Trueno/hpfracc-style rule: by size and kind only, never learning."""
    if op.kind.matrix_like and n > STATIC_GPU_ABOVE and Backend.GPU in arms:
        return Backend.GPU
    return Backend.SCALAR if n < STATIC_SCALAR_BELOW else Backend.SIMD


Strategy = Callable[[str, tuple[Any, ...]], Any]


def fixed_kernel(op: ar.Operation, choice: Choice) -> Callable[..., Any]:
    """What the fixed implementation ``choice`` runs for ``op``: the operation's own
    ``choice``, else (a variant it lacks) its arm's primary kernel — and where that calls a
    framework this numpy program never imported, the arm's first implementation that runs
    here (as the runtime's forced arm does)."""
    impl = op.implementation_for(choice) if choice in op.choices else None
    impl = impl or op.implementation_for(choice.arm)
    if not runs_here(impl):
        impl = next(i for i in op.implementations() if i.backend is choice.arm and runs_here(i))
    return impl.fn  # type: ignore[union-attr]


def strategy(mode: str, rt: ar.AdaptiveRuntime, choices: list[Choice]) -> Strategy:
    """A function running one call ``mode``'s way."""
    kernels = {name: {c: fixed_kernel(rt.operation(name), c) for c in choices}
               for name in rt.operations}
    if mode in (ADAPTIVE, OBSERVED, TRAINED):
        return lambda name, args: rt.run(name, *args)
    if mode in (STATIC, STATIC_AGAIN):
        def static(name: str, args: tuple[Any, ...]) -> Any:
            op = rt.operation(name)
            return kernels[name][static_arm(op, op.size_of(*args), choices)](*args)
        return static
    choice = parse_choice(mode)
    return lambda name, args: kernels[name][choice](*args)


def touch(args: tuple[Any, ...]) -> None:
    """Read every input array once (single-threaded numpy, no thread pool woken), so every
    mode finds a call's inputs in the cache as far as they fit (measured: a call over a
    megabyte read from memory takes about 2x the time)."""
    for a in args:
        if isinstance(a, np.ndarray):
            a.sum()


def compiled_signatures(rt: ar.AdaptiveRuntime) -> int:
    """Kernel specialisations compiled so far, over every numba kernel."""
    total = 0
    for name in rt.operations:
        for impl in rt.operation(name).implementations():
            total += impl.compile_count() if impl.compile_count is not None else 0
    return total


def runs_here(impl: Implementation | None) -> bool:
    """Whether an implementation can run in this numpy program: not one that calls a
    framework the program never imported (ATen on numpy memory: the runtime never imports
    torch itself, so a numpy user's runtime never offers it either)."""
    return impl is not None and (not impl.needs or imported(impl.needs) is not None)


def available_choices(rt: ar.AdaptiveRuntime, operations: list[str]) -> list[Choice]:
    """The arms that run here, and every variant of them the operations register."""
    devices = DeviceProbe()
    found = {c for name in operations for c in rt.operation(name).choices
             if runs_here(rt.operation(name).implementation_for(c))}
    found |= {b for b in Backend if b is not Backend.GPU}
    return sorted((c for c in found if devices.available(c)), key=choice_order)


def offered(rt: ar.AdaptiveRuntime, operations: list[str]) -> dict[str, list[str]]:
    """Each operation's own implementations (by mode name): the fixed modes the oracle
    chooses among for its keys (a mode running an arm's primary kernel in place of a
    variant the operation lacks would only time that kernel twice)."""
    devices = DeviceProbe()
    return {name: [c.value for c in rt.operation(name).choices if devices.available(c)
                   and runs_here(rt.operation(name).implementation_for(c))]
            for name in operations}


def _reasons(rt: ar.AdaptiveRuntime) -> Counter[tuple[str, str]]:
    """The runtime's decisions so far, by (reason, implementation: an arm or a variant)."""
    counts: Counter[tuple[str, str]] = Counter()
    for k, n in rt.selection_counts().items():
        counts[(k.reason.value, choice_of(k.backend, k.variant).value)] += n
    return counts


def _committed_arms(keys: list[tuple[str, int]], decided: list[list[list[str]]]
                    ) -> dict[tuple[str, int], str]:
    """Each key's committed arm: the one its exploit decisions ran most often."""
    exploits: dict[tuple[str, int], Counter[str]] = defaultdict(Counter)
    for key, made in zip(keys, decided, strict=True):
        for reason, arm in made:
            if reason == "exploit":
                exploits[key][arm] += 1
    return {key: counts.most_common(1)[0][0] for key, counts in exploits.items()}


def exploring_calls(keys: list[tuple[str, int]], decided: list[list[list[str]]]
                    ) -> tuple[list[bool], list[bool]]:
    """Per call, whether it explored: (a) an explore, re-check or drift decision, or a key's
    first call (the cold start) on an arm other than the one the key committed to — a first
    call must run some arm, and costs learning only when its arm loses; (b) the same with
    every first call counted, whatever its arm."""
    committed = _committed_arms(keys, decided)
    losing, every = [], []
    for key, made in zip(keys, decided, strict=True):
        learns = any(reason in EXPLORING for reason, _arm in made)
        cold = [arm for reason, arm in made if reason == COLD_START]
        losing.append(learns or any(arm != committed.get(key) for arm in cold))
        every.append(learns or bool(cold))
    return losing, every


def run_mode(mode: str, turn: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """One process's measurement: every call of the workload run ``mode``'s way, in chunks
    of ``CHUNK_CALLS``; ``turn()`` is called before each chunk: it returns when this
    process's turn comes (see :func:`measure`)."""
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    operations = [name for name in WORKLOAD if name in rt.operations]
    choices = available_choices(rt, operations)
    calls = workload(operations)
    # Compile every numba kernel first, calling the kernels directly: the first call of a
    # kernel would otherwise time the compiler. SIMD kernels have a serial and a parallel
    # build, chosen by size: each operation's smallest and largest call.
    for name in operations:
        sized = sorted((rt.operation(name).size_of(*args), i)
                       for i, (op_name, args) in enumerate(calls) if op_name == name)
        for _size, i in (sized[0], sized[-1]):
            for impl in rt.operation(name).implementations():
                if impl.backend in choices and runs_here(impl):
                    impl.fn(*calls[i][1])
    run = strategy(mode, rt, choices)
    if mode == TRAINED:
        for name, args in calls:
            run(name, args)
    learning = mode in (ADAPTIVE, OBSERVED, TRAINED)
    observed = mode == OBSERVED
    compiled_before = compiled_signatures(rt)
    seconds = [0.0] * len(calls)
    decided: list[list[list[str]]] = [[] for _ in calls]  # per call: [reason, arm] decisions
    clock = time.perf_counter
    before = _reasons(rt) if observed else Counter()
    gc.disable()  # collected every GC_EVERY calls: a collection lands on whoever allocated
    # (everything made so far — the modules, the workload — moved out of the collector's
    # sight: full collections over them took ~0.15 s each, three quarters of a process's run)
    gc.freeze()
    try:
        for i, (name, args) in enumerate(calls):
            if i % CHUNK_CALLS == 0:
                turn()
            touch(args)
            start = clock()
            run(name, args)
            seconds[i] = clock() - start
            if observed:  # (what the call was: read untimed, from the runtime's counters)
                after = _reasons(rt)
                decided[i] = [list(k) for k in after if after[k] > before[k]]
                before = after
            if (i + 1) % GC_EVERY == 0:
                gc.collect()
    finally:
        gc.enable()
        gc.unfreeze()
    reasons: Counter[str] = Counter()
    learned = None
    if learning:
        for (reason, _arm), n in _reasons(rt).items():
            reasons[reason] += n
        # (each key's calls through the runtime: the trained runtime ran the calls twice)
        through = Counter((name, size_bucket(rt.operation(name).size_of(*args)))
                          for name, args in calls)
        learned = untimed(rt, {key: n * (2 if mode == TRAINED else 1)
                               for key, n in through.items()})
    return {"mode": mode, "seconds": seconds, "decided": decided, "untimed": learned,
            "keys": [[name, size_bucket(rt.operation(name).size_of(*args))]
                     for name, args in calls],
            "sizes": [rt.operation(name).size_of(*args) for name, args in calls],
            "reasons": dict(reasons),
            "compiled": compiled_signatures(rt) - compiled_before,
            "offered": offered(rt, operations)}


def spread(values: list[float], fmt: str) -> str:
    """The median and, in brackets, the lowest and highest of ``values``."""
    return (f"{format(statistics.median(values), fmt)} "
            f"[{format(min(values), fmt)}-{format(max(values), fmt)}]")


def record_fixed_arms(path: str, first_round: dict[str, dict[str, Any]]) -> None:
    """Write the fixed implementations' timings as a recorded-calls file for
    ``adaptive-runtime replay``: call i with the i-th of its operation's own implementations
    in turn, at time i. Every implementation was timed on every call, so unlike a runtime's
    own recording this log answers any one a replayed policy picks, with a timing of the same
    size bucket from a nearby call."""
    some = first_round[ADAPTIVE]
    own = some["offered"]
    with open(path, "w", encoding="utf-8") as out:
        out.write(json.dumps({"format": CALLS_FORMAT}) + "\n")
        for i, ((name, _bucket), size) in enumerate(zip(some["keys"], some["sizes"],
                                                       strict=True)):
            choice = own[name][i % len(own[name])]
            out.write(json.dumps({"operation": name, "size": size, "arm": choice,
                                  "duration_us": first_round[choice]["seconds"][i] * 1e6,
                                  "time_s": float(i), "calls": 1}) + "\n")


def measure(modes: list[str]) -> list[dict[str, dict[str, Any]]]:
    """``ROUNDS`` rounds; in each, one process per mode, all started together, that take
    turns: each runs the next ``CHUNK_CALLS`` calls while the others wait, in an order
    rotated from chunk to chunk. A shared machine's speed drifts over seconds (identical
    processes run one after the other read up to 10 % apart); a chunk of each mode within
    a second or two meets the same drift, so the modes' totals compare what they do."""
    rounds = []
    with tempfile.TemporaryDirectory(prefix="decision_quality-") as folder:
        for r in range(ROUNDS):
            began = time.perf_counter()
            outs = {mode: os.path.join(folder, f"{r}-{mode}.json") for mode in modes}
            procs = {mode: subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--mode", mode, "--out",
                 outs[mode]], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                for mode in modes}
            try:
                for mode, proc in procs.items():  # (each sets up, untimed, meanwhile)
                    _await(proc, mode)
                running, k = list(modes), 0
                while running:
                    shift = (r + k) % len(running)
                    for mode in running[shift:] + running[:shift]:
                        procs[mode].stdin.write("go\n")  # type: ignore[union-attr]
                        procs[mode].stdin.flush()  # type: ignore[union-attr]
                        if _await(procs[mode], mode):
                            running.remove(mode)  # (its last chunk ran: result written)
                    k += 1
                results = {}
                for mode, proc in procs.items():
                    if proc.wait(timeout=600) != 0:
                        raise RuntimeError(f"decision_quality: the {mode} process failed")
                    with open(outs[mode], encoding="utf-8") as f:
                        results[mode] = json.load(f)
            finally:
                for proc in procs.values():
                    if proc.poll() is None:
                        proc.kill()
            print(f"  round {r + 1}/{ROUNDS} ({time.perf_counter() - began:.0f} s): " + ", ".join(
                f"{mode} {sum(results[mode]['seconds']):.3f} s" for mode in modes), flush=True)
            rounds.append(results)
    return rounds


def _await(proc: subprocess.Popen[str], mode: str) -> bool:
    """Wait for a mode's process to finish its turn: ``True`` when it ran its last chunk
    (and wrote its result), ``False`` when it waits for another turn."""
    while True:
        line = proc.stdout.readline() if proc.stdout is not None else ""
        if not line:
            raise RuntimeError(f"decision_quality: the {mode} process ended early")
        if line.strip() in (TURN_DONE, FINISHED):
            return line.strip() == FINISHED
        sys.stderr.write(line)  # (something else the process printed)


def _take_turns() -> None:
    """A mode's process: say the previous chunk is done, then wait for the next turn."""
    print(TURN_DONE, flush=True)
    if not sys.stdin.readline():
        sys.exit("decision_quality: the coordinator went away")


def judge(rounds: list[dict[str, dict[str, Any]]], fixed: list[str], upto: int,
          title: str) -> None:
    """Print the strategies' table over the workload's first ``upto`` calls (the oracle's
    implementations are chosen on the whole run's calls)."""
    keys = [tuple(k) for k in rounds[0][ADAPTIVE]["keys"]]
    modes = [*fixed, STATIC, ADAPTIVE, OBSERVED, TRAINED, STATIC_AGAIN]
    oracle_arm = oracle_arms(rounds, fixed)
    own = rounds[0][ADAPTIVE]["offered"]

    def key_totals(result: dict[str, Any]) -> dict[tuple[str, int], float]:
        totals: dict[tuple[str, int], float] = defaultdict(float)
        for key, took in zip(keys[:upto], result["seconds"][:upto], strict=True):
            totals[key] += took
        return totals

    total = {mode: [sum(r[mode]["seconds"][:upto]) for r in rounds] for mode in modes}
    oracle = []
    luckiest = []
    for results in rounds:
        by_arm = {arm: key_totals(results[arm]) for arm in fixed}
        ran = by_arm[fixed[0]]
        oracle.append(sum(by_arm[oracle_arm[key]][key] for key in ran))
        luckiest.append(sum(min(by_arm[arm][key] for arm in own[key[0]]) for key in ran))
    best = min(fixed, key=lambda arm: statistics.median(total[arm]))
    # What trying every arm once per key costs at least: each losing arm's median call over
    # the winner's, once per key that ran in these calls (a policy that never times a losing
    # arm is the oracle itself).
    calls_of: dict[tuple[str, int], dict[str, list[float]]] = defaultdict(
        lambda: defaultdict(list))
    for results in rounds:
        for arm in fixed:
            for key, took in zip(keys[:upto], results[arm]["seconds"][:upto], strict=True):
                calls_of[key][arm].append(took)
    floor = sum(max(0.0, statistics.median(times[arm])
                    - statistics.median(times[oracle_arm[key]]))
                for key, times in calls_of.items() for arm in own[key[0]]
                if arm != oracle_arm[key])

    def ratios(mode: str, against: list[float]) -> list[float]:
        return ratios_of(total[mode], against)

    vs_best = ratios(ADAPTIVE, total[best])
    # (what each call decided, from the twin whose counters were read after every call)
    exploring = [exploring_calls(keys[:upto], r[OBSERVED]["decided"][:upto]) for r in rounds]
    share = [sum(losing) / upto for losing, _every in exploring]
    share_every_first = [sum(every) / upto for _losing, every in exploring]
    time_share = [sum(t for t, e in zip(r[OBSERVED]["seconds"][:upto], losing, strict=True)
                      if e) / sum(r[OBSERVED]["seconds"][:upto])
                  for r, (losing, _every) in zip(rounds, exploring, strict=True)]

    def row(name: str, mode_total: list[float], ratio: list[float] | None = None,
            target: str = "-", ok: bool | None = None) -> list[str]:
        ratio = ratio if ratio is not None else [t / o for t, o in zip(mode_total, oracle,
                                                                        strict=True)]
        return [name, spread(mode_total, ".3f") + " s", spread(ratio, ".3f") + "x", target,
                "-" if ok is None else verdict(ok)]

    def interval_row(name: str, against: list[float], target: float) -> list[str]:
        """The adaptive runtime against ``against``: per-round ratios, their median with a
        bootstrap interval, judged by the interval (``_verdicts``)."""
        ratio = paired_ratio(total[ADAPTIVE], against)
        return [name, spread(total[ADAPTIVE], ".3f") + " s", str(ratio) + "x",
                f"<= {target:.2f}x", judge_interval(ratio, target)]

    aa = paired_ratio(total[STATIC_AGAIN], total[STATIC])
    rows = [
        interval_row("adaptive runtime (exploration included) vs oracle", oracle,
                     ORACLE_TARGET),
        row(f"  vs best fixed implementation ({best})", total[ADAPTIVE], vs_best),
        interval_row("  vs static rule", total[STATIC], STATIC_TARGET),
        ["  A/A: the static rule again vs the static rule", "-", str(aa) + "x",
         "(noise floor)", "-"],
        ["  calls exploring or re-checking", spread(share, ".1%"), "-",
         f"<= {EXPLORING_SHARE_TARGET:.0%}", verdict(statistics.median(share)
                                                     <= EXPLORING_SHARE_TARGET)],
        ["    (every key's first call counted too)", spread(share_every_first, ".1%"), "-",
         "-", "-"],
        ["  their share of its time", spread(time_share, ".1%"), "-", "-", "-"],
        row("  (its twin, counters read after every call)", total[OBSERVED]),
        row("oracle (best implementation per key in hindsight)", oracle),
        row(f"  vs best fixed implementation ({best}): the headroom", oracle,
            ratios_of(oracle, total[best])),
        row("  (lower total per key, noise-favoured)", luckiest),
        row("  + one timing of each losing arm per key", [o + floor for o in oracle]),
        row("adaptive runtime trained on these calls first", total[TRAINED]),
        row("static size-threshold rule", total[STATIC]),
        *[row(f"fixed: {arm}", total[arm]) for arm in fixed],
    ]
    print_table(f"{title}: {upto:,} calls, about {upto / len(oracle_arm):.0f} per key",
                ["strategy", "total", "vs oracle", "target", "verdict"], rows)


def ratios_of(totals: list[float], against: list[float]) -> list[float]:
    """Round by round, ``totals`` over ``against``."""
    return [m / a for m, a in zip(totals, against, strict=True)]


def oracle_arms(rounds: list[dict[str, dict[str, Any]]], fixed: list[str]
                ) -> dict[tuple[str, int], str]:
    """The oracle's implementation per key, of its operation's own: the one with the lower
    median call over every round. (Choosing by the lower total would also pick whichever
    dodged the machine's hiccups, an optimistic bias that grows with the number of keys; the
    oracle's cost is that implementation's total, stalls included.)"""
    own = rounds[0][ADAPTIVE]["offered"]
    keys = [tuple(k) for k in rounds[0][ADAPTIVE]["keys"]]
    per_key: dict[tuple[str, int], dict[str, list[float]]] = defaultdict(
        lambda: defaultdict(list))
    for results in rounds:
        for arm in fixed:
            for key, took in zip(keys, results[arm]["seconds"], strict=True):
                per_key[key][arm].append(took)
    return {key: min(own[key[0]], key=lambda a, times=times: statistics.median(times[a]))
            for key, times in per_key.items()}


def judge_per_call(rounds: list[dict[str, dict[str, Any]]], fixed: list[str]) -> None:
    """The whole workload with every call weighed alike: each call's time over the median
    call of its key's oracle implementation (over every round), averaged over the calls — so
    a call of 8 elements counts as much as one of 4·10^6, and what the choice at small sizes
    gains or loses shows."""
    keys = [tuple(k) for k in rounds[0][ADAPTIVE]["keys"]]
    oracle_arm = oracle_arms(rounds, fixed)
    times: dict[tuple[str, int], list[float]] = defaultdict(list)
    for results in rounds:
        for i, key in enumerate(keys):
            times[key].append(results[oracle_arm[key]]["seconds"][i])
    unit = [statistics.median(times[key]) for key in keys]

    def weighted(seconds: list[float]) -> float:
        return sum(t / u for t, u in zip(seconds, unit, strict=True)) / len(keys)

    modes = [*fixed, STATIC, ADAPTIVE, TRAINED]
    mean = {mode: [weighted(r[mode]["seconds"]) for r in rounds] for mode in modes}
    oracle = [weighted([r[oracle_arm[key]]["seconds"][i] for i, key in enumerate(keys)])
              for r in rounds]
    best = min(fixed, key=lambda mode: statistics.median(mean[mode]))

    def row(name: str, values: list[float], against: list[float]) -> list[str]:
        return [name, spread(values, ".3f"), spread(ratios_of(values, against), ".3f") + "x"]

    print_table(f"every call weighed alike: {len(keys):,} calls, each as its time over its "
                "key's oracle median call (1.0: the oracle's typical call)",
                ["strategy", "mean per call", "vs oracle"],
                [row("adaptive runtime (exploration included)", mean[ADAPTIVE], oracle),
                 [f"  vs best fixed implementation ({best})", "-",
                  spread(ratios_of(mean[ADAPTIVE], mean[best]), ".3f") + "x"],
                 ["  vs static rule", "-",
                  spread(ratios_of(mean[ADAPTIVE], mean[STATIC]), ".3f") + "x"],
                 row("oracle (best implementation per key in hindsight)", oracle, oracle),
                 [f"  vs best fixed implementation ({best}): the headroom", "-",
                  spread(ratios_of(oracle, mean[best]), ".3f") + "x"],
                 row("adaptive runtime trained on these calls first", mean[TRAINED], oracle),
                 row("static size-threshold rule", mean[STATIC], oracle),
                 *[row(f"fixed: {mode}", mean[mode], oracle) for mode in fixed]])


def judge_per_key(rounds: list[dict[str, dict[str, Any]]], fixed: list[str]) -> None:
    """Per key with at least ``PER_KEY_MIN_CALLS`` calls: the adaptive runtime's total over
    the total of the key's oracle implementation (the fastest one, its kernel called
    directly), per round; the median over the rounds against ``PER_KEY_TARGET``, and the keys
    that miss it. Beside it, the same over the trained runtime's total: what learning costs on
    the key, with the runtime's own cost a call on both sides (a key of 1-3 us kernels cannot
    come within 1.10x of its kernel called directly while a dispatch costs 0.3-1 us)."""
    keys = [tuple(k) for k in rounds[0][ADAPTIVE]["keys"]]
    oracle_arm = oracle_arms(rounds, fixed)
    count = Counter(keys)
    judged = [key for key in count if count[key] >= PER_KEY_MIN_CALLS]
    def key_total(result: dict[str, Any], key: tuple[str, int]) -> float:
        return sum(t for k, t in zip(keys, result["seconds"], strict=True) if k == key)

    ratio: dict[tuple[str, int], float] = {}
    learning: dict[tuple[str, int], float] = {}
    for key in judged:
        mine = [key_total(results[ADAPTIVE], key) for results in rounds]
        ratio[key] = statistics.median(ratios_of(mine, [key_total(results[oracle_arm[key]], key)
                                                        for results in rounds]))
        learning[key] = statistics.median(ratios_of(mine, [key_total(results[TRAINED], key)
                                                           for results in rounds]))
    met = [key for key in judged if ratio[key] <= PER_KEY_TARGET]
    learned = [key for key in judged if learning[key] <= PER_KEY_TARGET]
    rows = [[f"keys with >= {PER_KEY_MIN_CALLS} calls", f"{len(judged)}", "-", "-"],
            [f"  adaptive <= {PER_KEY_TARGET:.2f}x the key's fastest implementation",
             f"{len(met)} of {len(judged)}",
             f"median {statistics.median(ratio.values()):.3f}x" if ratio else "-",
             verdict(len(met) == len(judged)) if judged else "not judged"],
            [f"  adaptive <= {PER_KEY_TARGET:.2f}x the trained runtime (learning's cost)",
             f"{len(learned)} of {len(judged)}",
             f"median {statistics.median(learning.values()):.3f}x" if learning else "-", "-"]]
    for key in sorted(judged, key=lambda k: -ratio[k])[:8]:
        if ratio[key] > PER_KEY_TARGET:
            rows.append([f"    misses: {key[0]} bucket {key[1]} ({count[key]} calls)",
                         f"{ratio[key]:.3f}x", f"fastest: {oracle_arm[key]}", "-"])
    print_table(f"per key: adaptive over the fastest implementation forced on the key "
                f"(totals within a round, median of {len(rounds)} rounds; target "
                f"<= {PER_KEY_TARGET:.2f}x)", ["", "keys", "ratio", "verdict"], rows)


def report(rounds: list[dict[str, dict[str, Any]]], fixed: list[str]) -> None:
    """The tables: the learning phase (the first quarter of the calls, about
    ``CALLS_PER_OP / 4 / 20`` per key) and the whole run; then crossovers and losses."""
    keys = [tuple(k) for k in rounds[0][ADAPTIVE]["keys"]]
    calls = len(keys)
    header = (f"{len({k[0] for k in keys})} operations, sizes 8..{MAX_ELEMENTS:,}, float64, "
              f"shuffled; arms: {', '.join(fixed)}; each mode in its own process, "
              f"{len(rounds)} rounds: median [lowest-highest]; ratios within a round")
    print(f"decision quality: {header}")
    judge(rounds, fixed, calls // LEARNING_PHASE, "the learning phase, the workload's "
          f"first 1/{LEARNING_PHASE}")
    judge(rounds, fixed, calls, "the whole workload")
    judge_per_call(rounds, fixed)
    judge_per_key(rounds, fixed)
    oracle_arm = oracle_arms(rounds, fixed)

    print("\ncrossovers on this machine (the oracle's arm per size bucket):")
    for name in dict.fromkeys(k[0] for k in keys):
        found: list[tuple[str, int]] = []
        for bucket in sorted(b for (op_name, b) in oracle_arm if op_name == name):
            arm = oracle_arm[(name, bucket)]
            if not found or found[-1][0] != arm:
                found.append((arm, bucket))
        print(f"  {name:<11} " + ", ".join(
            f"{arm} from {1 << (bucket - 1) if bucket else 0:,}" for arm, bucket in found))

    per_key: dict[tuple[str, int], dict[str, list[float]]] = defaultdict(
        lambda: defaultdict(list))
    for results in rounds:
        for mode, result in results.items():
            for key, took in zip(keys, result["seconds"], strict=True):
                per_key[key][mode].append(took)

    def mean_key_total(key: tuple[str, int], mode: str) -> float:
        return sum(per_key[key][mode]) / len(rounds)

    losses = sorted(((mean_key_total(k, ADAPTIVE) - mean_key_total(k, oracle_arm[k]), k)
                     for k in per_key), reverse=True)[:8]
    print("largest losses vs the oracle, by key (adaptive - the oracle arm's total, mean of "
          "the rounds; calls; arms' totals):")
    for loss, key in losses:
        totals = ", ".join(f"{arm} {mean_key_total(key, arm) * 1e3:.1f} ms" for arm in fixed)
        print(f"  {key[0]:<11} bucket {key[1]:>2}: +{loss * 1e3:7.1f} ms over "
              f"{len(per_key[key][ADAPTIVE]) // len(rounds):>3} calls ({totals}; adaptive "
              f"{mean_key_total(key, ADAPTIVE) * 1e3:.1f} ms)")
    untimed_table("arms never timed (decision quality)",
                  [(mode, [r[mode]["untimed"] for r in rounds])
                   for mode in (ADAPTIVE, TRAINED)])
    for r, results in enumerate(rounds):
        decisions = results[ADAPTIVE]["reasons"]
        print(f"round {r + 1}: adaptive decisions: " + ", ".join(
            f"{reason} {n:,}" for reason, n in sorted(decisions.items()))
            + f"; kernel specialisations compiled during the timed run: "
            f"{results[ADAPTIVE]['compiled']}")


def main() -> None:
    began = time.perf_counter()
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    fixed = [c.value for c in available_choices(
        rt, [name for name in WORKLOAD if name in rt.operations])]
    modes = [*fixed, STATIC, ADAPTIVE, OBSERVED, TRAINED, STATIC_AGAIN]
    print(f"decision quality: {ROUNDS} rounds of {len(modes)} processes "
          f"({', '.join(modes)})", flush=True)
    rounds = measure(modes)
    if os.environ.get(RECORD_ENV):
        record_fixed_arms(os.environ[RECORD_ENV], rounds[0])
    report(rounds, fixed)
    print(f"total benchmark time {time.perf_counter() - began:.1f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--mode", help="measure one mode in this process (internal)")
    parser.add_argument("--out", help="where --mode writes its result (internal)")
    options = parser.parse_args()
    if options.mode:
        result = run_mode(options.mode, _take_turns)
        with open(options.out, "w", encoding="utf-8") as f:
            json.dump(result, f)
        print(FINISHED, flush=True)
    else:
        main()
