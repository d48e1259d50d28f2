"""A real training loop: plain torch against ``ar.torch.adapt(model)``, tracing off and on.

The model, data and phases of ``examples/train_torch.py`` (scikit-learn's digits; batch size
8 -> 64 -> 512; Adam; a fixed seed and step count), trained from scratch in each run:

- plain: the model as written (the baseline a torch user has), and plain again beside it
  (the A/A column: the noise floor of the adapted table);
- adapted, tracing off: ``adapt(model)`` on a fresh runtime (``tracing=False``), so every key
  explores from nothing — exploration included;
- adapted, tracing on: the same, with the runtime's spans and every step's ``train_step`` span
  (as the example makes them) exported through a local SDK pipeline (BatchSpanProcessor,
  OTLP/gRPC) to the project's loopback OTLP receiver, in a child process as a collector would
  be.

The kinds compared train side by side in one process, step by step — step i of each, in a
rotating order, then step i + 1 — so the machine's load drifts across them alike (one process,
not one per kind: the steps take turns far more finely than processes could); the whole is
done ``ROUNDS`` times (fresh models and runtimes each time), and a phase's time in a round is
the sum of its steps'. Every verdict reads the rounds: per round the ratio of a kind's phase
time to its baseline's in the same round, the median of the rounds' ratios with a 95 %
bootstrap interval — "meets" when the interval is within the target, "MISSES" when beyond it,
else "inconclusive" with about how many rounds would decide (``_verdicts``) — beside the A/A
column, the baseline against itself. One short untimed run first: numba compiles its kernels
on a machine's first use (then loads them from its disk cache) and torch initialises lazily —
one-off costs of a process, not of a policy, reported as the warm-up.

Then the JAX loop of ``examples/train_jax.py`` (the same data; an eager step with a
hand-written backward, every operation adaptive), against two baselines of the same math in
plain ``jax.numpy``: the example's own (each operation ``jax.jit``-compiled, run eagerly step
by step) and what a JAX user writes for a training loop — the whole step (forward, backward,
momentum update) under one ``jax.jit``, which XLA compiles and fuses as one program per batch
size. ``ROUNDS`` runs of each, one after another in a rotating order, and of the
per-operation loop again (the A/A column); per phase the median time and the ratios per round
(no target: no verdict); every step's loss of each against the per-operation loop's. Each
compiles in an untimed warm-up first; the whole step's compile time is printed.

Targets (issue 10): adapted <= 1.05x plain in every phase; tracing on <= 1.02x tracing off;
in float64, the loss after every step equal to plain torch's within 1e-4 relative.

What tracing costs is measured with both runtimes starting from one learned history (that
of the adapted run above), so both make the same choices and the difference is tracing's —
two cold runtimes explore apart, and one committing a slower arm than the other would read as
a tracing cost or a gain. It is measured apart from the machine's noise where it can be, which
swings whole-loop times by several % between runs here: its in-loop cost is the difference of
the median step times, on against off (the loop's own thread: capturing contexts and
timestamps, the step span's ids); its background cost, the CPU the span workers and the
exporter used during the phase (what they take from the loop, through the GIL and the cores).
Per round, the off run's phase time plus both, over the off run's phase time, is the ratio
judged; the wall-time ratio is printed beside it, and so is the same measure for the baseline a
user would otherwise write: plain torch with a span per step made by the OpenTelemetry SDK,
exported through the same pipeline. A second tracing-off runtime steps beside the two, and its
in-loop difference from the first, measured the same way, is the A/A column: two identical
runtimes' models read 1-2 % apart here, as much as the target allows.

``TRAINING_LOOP_STEPS`` (250 steps per phase) and ``TRAINING_LOOP_ROUNDS`` (5) shrink a run.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
from _otlp import Pipeline, Receiver, background_cpu_s
from _table import print_table, verdict
from _verdicts import judge, paired_ratio

import adaptive_runtime as ar
from adaptive_runtime.keys import bucket_bounds

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                "examples"))
import train_jax
import train_torch

# one side-by-side run: kind -> per phase, each step's seconds
Round = dict[str, list[list[float]]]

PHASES = (8, 64, 512)
# steps per phase: a real run's phases last thousands of steps; 250 keeps five rounds within
# about 1.5x the three rounds of 300 this benchmark ran before, while the first phase's
# one-time exploration (~4 ms here: the numba arms and the backward operations they bring,
# tried once) still weighs about 1 %
STEPS = int(os.environ.get("TRAINING_LOOP_STEPS", "250"))  # (smaller while developing)
ROUNDS = int(os.environ.get("TRAINING_LOOP_ROUNDS", "5"))
SEED = 0
ADAPTED_TARGET = 1.05
TRACING_TARGET = 1.02
LOSS_RTOL = 1e-4


class SdkSpanTrainer:
    """Plain torch, each step in a span made directly with the OpenTelemetry SDK: what a user
    would otherwise write for step spans (the baseline of the tracing table)."""

    def __init__(self, pipeline: Pipeline, dtype: torch.dtype) -> None:
        self.trainer = train_torch.Trainer(seed=SEED, dtype=dtype, adapted=False,
                                           step_spans=False)
        self.tracer = pipeline.provider.get_tracer("training-loop-benchmark")

    def phase_batches(self, epoch: int, batch_size: int, steps: int) -> list[torch.Tensor]:
        return self.trainer.phase_batches(epoch, batch_size, steps)

    def step(self, index: torch.Tensor, epoch: int) -> float:
        attributes = {"train.step": self.trainer.steps, "train.epoch": epoch,
                      "train.batch_size": len(index)}
        with self.tracer.start_as_current_span("train_step", attributes=attributes):
            return self.trainer.step(index, epoch)


def trainer(kind: str, pipeline: Pipeline | None, dtype: torch.dtype = torch.float32,
            learned: list[Any] | None = None) -> tuple[Any, Any]:
    """A fresh trainer and its runtime: ``kind`` is "plain" (or "plain2"), "sdk" (plain, SDK
    step spans), "off" (or "off2") or "on" (adapted, tracing off / on: the runtime's spans and
    its step spans); an adapted runtime starts from the ``learned`` history records, if
    given."""
    if kind in ("plain", "plain2"):  # ("plain2": plain again, the A/A column's control)
        return train_torch.Trainer(seed=SEED, dtype=dtype, adapted=False), None
    if kind == "sdk":
        assert pipeline is not None
        return SdkSpanTrainer(pipeline, dtype), None
    # ("off2": a second tracing-off runtime, the control that shows the noise floor)
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=kind == "on"))
    if learned:
        rt.merge_history(learned)
    if kind == "on":
        assert pipeline is not None
        pipeline.attach(rt)
    return train_torch.Trainer(seed=SEED, dtype=dtype, adapted=True, runtime=rt), rt


def side_by_side(pipeline: Pipeline | None, kinds: tuple[str, ...], steps: int,
                 dtype: torch.dtype = torch.float32,
                 background_s: list[float] | None = None, learned: list[Any] | None = None,
                 ) -> tuple[dict[str, list[list[float]]], dict[str, list[float]], dict[str, Any]]:
    """Train one trainer per kind step by step; per kind, each phase's step times (s) and
    every step's loss, and the runtimes. ``background_s`` receives, per phase, the CPU the
    process's other Python threads (the span workers, the exporter) used meanwhile."""
    made = {kind: trainer(kind, pipeline, dtype, learned) for kind in kinds}
    times: dict[str, list[list[float]]] = {kind: [] for kind in kinds}
    losses: dict[str, list[float]] = {kind: [] for kind in kinds}
    turn = 0
    for epoch, batch in enumerate(PHASES):
        cpu_start = background_cpu_s()
        indices = made[kinds[0]][0].phase_batches(epoch, batch, steps)
        for kind in kinds:
            times[kind].append([])
        for index in indices:
            turn += 1
            order = kinds[turn % len(kinds):] + kinds[:turn % len(kinds)]
            for kind in order:
                start = time.perf_counter()
                loss = made[kind][0].step(index, epoch)
                times[kind][-1].append(time.perf_counter() - start)
                losses[kind].append(loss)
        if background_s is not None:
            background_s.append(background_cpu_s() - cpu_start)
    return times, losses, {kind: rt for kind, (_t, rt) in made.items()}


def passes(pipeline: Pipeline, kinds: tuple[str, ...], learned: list[Any] | None = None
           ) -> tuple[list[Round], list[list[float]], dict[str, Any]]:
    """``ROUNDS`` side-by-side runs of ``kinds`` (fresh trainers and runtimes each; adapted
    ones starting from ``learned``): each run's step times, its background CPU per phase, and
    the last run's runtimes."""
    rounds: list[Round] = []
    background: list[list[float]] = []
    runtimes: dict[str, Any] = {}
    for _ in range(ROUNDS):
        spent: list[float] = []
        times, _losses, runtimes = side_by_side(pipeline, kinds, STEPS, background_s=spent,
                                                learned=learned)
        pipeline.flush()  # (between runs, untimed: the exporter's queue is bounded)
        rounds.append(times)
        background.append(spent)
    return rounds, background, runtimes


def phase_s(rounds: list[Round], kind: str, phase: int) -> list[float]:
    """Per round, ``kind``'s time in ``phase`` (the sum of its steps')."""
    return [sum(times[kind][phase]) for times in rounds]


def in_loop_s(times: Round, kind: str, base: str, phase: int) -> float:
    """What ``kind`` cost beyond ``base`` in the loop's own thread, in one run's phase: the
    median step's difference times the steps (a median: a shared machine's bursts land on a
    few steps of either kind, not on the typical one)."""
    steps = times[base][phase]
    return (statistics.median(times[kind][phase]) - statistics.median(steps)) * len(steps)


def accounted_s(rounds: list[Round], kind: str, base: str, phase: int,
                background: list[list[float]] | None = None) -> list[float]:
    """Per round, ``base``'s phase time plus what ``kind`` cost beyond it: in the loop
    (:func:`in_loop_s`) and, where given, the span threads' CPU in the phase (what they can
    take from the loop at most)."""
    return [sum(times[base][phase]) + in_loop_s(times, kind, base, phase)
            + (background[r][phase] if background is not None else 0.0)
            for r, times in enumerate(rounds)]


def ms(values: list[float]) -> str:
    """The median of ``values`` (seconds) in ms."""
    return f"{statistics.median(values) * 1e3:.0f} ms"


def winners(rt: ar.AdaptiveRuntime) -> list[list[object]]:
    """Keys committed to an arm other than ATen's call, with the measured gain."""
    means: dict[tuple[str, int], dict[ar.Backend, float]] = {}
    for r in rt.history_snapshot():
        if r.samples and math.isfinite(r.mean_us):
            means.setdefault((r.operation, r.size_bucket), {})[r.backend] = r.mean_us
    rows: list[list[object]] = []
    for (op, bucket), measured in sorted(means.items()):
        lo, hi = bucket_bounds(bucket)
        decision = rt.decide(op, lo)
        chosen = decision.backend
        aten = measured.get(ar.Backend.SIMD)
        mine = measured.get(chosen)
        if (decision.reason is ar.Reason.EXPLOIT and chosen is not ar.Backend.SIMD
                and aten is not None and mine is not None):
            rows.append([op, f"{lo:,}-{hi:,}", chosen.value, f"{mine:.1f}", f"{aten:.1f}",
                         f"{aten / mine:.2f}x"])
    return rows


def main() -> None:
    torch.manual_seed(SEED)
    receiver = Receiver()
    pipeline = Pipeline(receiver.grpc_endpoint, service_name="training-loop-benchmark")
    try:
        start = time.perf_counter()
        side_by_side(pipeline, ("plain", "sdk", "off", "on"), 5)
        pipeline.flush()
        warm_s = time.perf_counter() - start
        # Three passes, one traced kind at most in each: background threads (span workers,
        # the exporter) belong to that kind, so the CPU they use is its.
        adapted, _background, runtimes = passes(pipeline, ("plain", "off", "plain2"))
        # Tracing's cost, apart from what two runtimes' own explorations happen to choose:
        # both start from one learned history (that of the last cold tracing-off run)
        learned = runtimes["off"].history_snapshot()
        # A second tracing-off runtime steps beside them: how far two identical runtimes
        # read apart, measured the same way, is the noise floor of the tracing verdict.
        traced, ours, _runtimes = passes(pipeline, ("off", "on", "off2"), learned)
        sdk, theirs, _runtimes = passes(pipeline, ("plain", "sdk"))
        spans = receiver.count()
        adapted_table(adapted, warm_s)
        tracing_table(traced, ours, sdk, theirs)
        print(f"spans received by the loopback OTLP receiver: {spans}")

        won = winners(runtimes["off"])
        print_table("where an arm other than ATen runs (the last tracing-off runtime)",
                    ["operation", "sizes", "arm", "its us", "ATen us", "gain"],
                    won or [["(none: ATen kept every key)", "", "", "", "", ""]])

        count, worst = compare_losses()
        print_table("float64: loss after every step, adapted vs plain torch",
                    ["steps", "max relative difference", "target", "verdict"],
                    [[count, f"{worst:.2e}", f"<= {LOSS_RTOL:g}", verdict(worst <= LOSS_RTOL)]])
        jax_loop()
    finally:
        pipeline.shutdown()
        receiver.stop()


def adapted_table(rounds: list[Round], warm_s: float) -> None:
    """Adapted (tracing off) against plain torch per phase: per round the ratio of their
    phase times, judged by the rounds (``_verdicts``); plain again against plain, the A/A."""
    rows: list[list[object]] = []
    for i, batch in enumerate(PHASES):
        plain, off = phase_s(rounds, "plain", i), phase_s(rounds, "off", i)
        ratio = paired_ratio(off, plain)
        rows.append([f"batch {batch}", ms(plain), ms(off), str(ratio), f"<= {ADAPTED_TARGET}",
                     judge(ratio, ADAPTED_TARGET),
                     str(paired_ratio(phase_s(rounds, "plain2", i), plain))])
    total = {kind: [sum(phase_s(rounds, kind, i)[r] for i in range(len(PHASES)))
                    for r in range(len(rounds))] for kind in ("plain", "off", "plain2")}
    rows.append(["all phases", ms(total["plain"]), ms(total["off"]),
                 str(paired_ratio(total["off"], total["plain"])), "(goal < 1)", "-",
                 str(paired_ratio(total["plain2"], total["plain"]))])
    print_table(
        f"training loop: digits, {STEPS} steps per phase, {len(rounds)} side-by-side rounds "
        f"(float32; warm-up {warm_s:.1f} s, untimed); times: median of the rounds; ratios per "
        "round: median [95 % bootstrap interval]",
        ["phase", "plain torch", "adapted (tracing off)", "adapted / plain", "target",
         "verdict", "A/A: plain again / plain"], rows)


def tracing_table(traced: list[Round], ours: list[list[float]], sdk: list[Round],
                  theirs: list[list[float]]) -> None:
    """Tracing on against off per phase, both from one learned history: per round, the off
    run's phase time plus tracing's cost (in the loop and in the span threads) over the off
    run's; off again the same way (the A/A); the SDK's step spans over plain torch beside."""
    rows: list[list[object]] = []
    for i, batch in enumerate(PHASES):
        off = phase_s(traced, "off", i)
        ratio = paired_ratio(accounted_s(traced, "on", "off", i, ours), off)
        rows.append([
            f"batch {batch}",
            f"{statistics.median(in_loop_s(t, 'on', 'off', i) for t in traced) * 1e3:+.1f} ms",
            f"{statistics.median(run[i] for run in ours) * 1e3:.1f} ms", str(ratio),
            f"<= {TRACING_TARGET}", judge(ratio, TRACING_TARGET),
            str(paired_ratio(accounted_s(traced, "off2", "off", i), off)),
            str(paired_ratio(phase_s(traced, "on", i), off)),
            str(paired_ratio(accounted_s(sdk, "sdk", "plain", i, theirs),
                             phase_s(sdk, "plain", i)))])
    print_table(
        "tracing on vs off, both from the same learned history: the runtime's spans and "
        "its train_step spans (sampled within the trace budget), to the loopback OTLP "
        "receiver (in loop: the median step's difference; background: the span threads' "
        f"CPU; medians of {len(traced)} rounds); ratios per round: median [95 % bootstrap "
        "interval]; the baseline: a span per step from the SDK",
        ["phase", "in loop", "background", "on/off", "target", "verdict",
         "A/A: off again/off (noise floor)", "on/off wall", "plain torch + SDK step spans"],
        rows)


def jit_step_train(phases: tuple[int, ...], steps_per_phase: int) -> list[Any]:
    """The example's training run with its whole step under one ``jax.jit`` (see the module):
    the same data, batches, initial parameters and math as ``train_jax.train(plain=True)``.
    Returns one ``train_jax.Phase`` per phase (seconds, every step's loss)."""
    train_x, train_y, _test_x, _test_y = train_jax.digits(SEED)
    params = train_jax.init_params(SEED)
    velocity = {k: jnp.zeros_like(v) for k, v in params.items()}
    eye = np.eye(train_jax.CLASSES, dtype=np.float32)
    results = []
    for epoch, batch_size in enumerate(phases):
        phase = train_jax.Phase(batch_size)
        start = time.perf_counter()
        for index in train_jax.batches(len(train_y), batch_size, steps_per_phase,
                                       SEED + epoch):
            x, onehot = train_x[jnp.asarray(index)], jnp.asarray(eye[train_y[index]])
            params, velocity, loss = _whole_step(params, velocity, x, onehot)
            # (float(): the loss of every step read on the host, as the eager loops read it,
            # which also waits for the step: no step overlaps the next one's timing)
            phase.losses.append(float(loss))
        phase.seconds = time.perf_counter() - start
        results.append(phase)
    jax.block_until_ready(params)
    return results


def _make_whole_step() -> Any:
    """One training step — forward, loss, the hand-written backward, two momentum axpys per
    parameter — as one jitted function of (params, velocity, x, onehot): XLA sees the whole
    step, so it fuses across operations and runs it as one program (one dispatch per step
    instead of ~20)."""
    ops = train_jax.PlainOps()

    def step(params: dict[str, Any], velocity: dict[str, Any], x: Any, onehot: Any
             ) -> tuple[dict[str, Any], dict[str, Any], Any]:
        cache = train_jax.forward(ops, params, x)
        loss, dlogits = train_jax.loss_and_dlogits(cache[3], onehot)
        grads = train_jax.gradients(ops, params, x, dlogits, cache)
        velocity = {k: ops.scale(train_jax.MOMENTUM, velocity[k], grads[k]) for k in params}
        params = {k: ops.scale(-train_jax.LEARNING_RATE, velocity[k], params[k])
                  for k in params}
        return params, velocity, loss

    return jax.jit(step)


_whole_step = _make_whole_step()


# the JAX loop's kinds; "plain again": the per-operation loop run twice, the A/A column
JAX_KINDS = ("plain", "jit step", "adapted", "plain again")


def jax_run(kind: str) -> tuple[list[float], list[float]]:
    """One JAX training run of ``kind``: each phase's seconds and every step's loss."""
    if kind == "jit step":
        phases = jit_step_train(PHASES, STEPS)
        return [p.seconds for p in phases], [loss for p in phases for loss in p.losses]
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    result = train_jax.train(phases=PHASES, steps_per_phase=STEPS, check_grad=False,
                             plain=kind != "adapted", runtime=rt)
    return [p.seconds for p in result.phases], result.losses


def jax_loop() -> None:
    """The JAX example, adaptive against plain jitted jax.numpy, per operation and the whole
    step under one jit (see the module)."""
    # Warm-up, untimed: XLA compiles every shape (one whole-step program per batch size),
    # numba its kernels.
    train_jax.train(phases=PHASES, steps_per_phase=5, check_grad=False)
    train_jax.train(phases=PHASES, steps_per_phase=5, check_grad=False, plain=True)
    start = time.perf_counter()
    jit_step_train(PHASES, 5)
    compile_s = time.perf_counter() - start
    seconds: dict[str, list[list[float]]] = {kind: [] for kind in JAX_KINDS}  # per round
    losses: dict[str, list[float]] = {}
    for r in range(ROUNDS):
        shift = r % len(JAX_KINDS)
        for kind in JAX_KINDS[shift:] + JAX_KINDS[:shift]:  # (a rotating order)
            phase_seconds, losses[kind] = jax_run(kind)
            seconds[kind].append(phase_seconds)
    jax_table(seconds)

    def worst(kind: str) -> float:
        return max(abs(a - p) / abs(p) for p, a in zip(losses["plain"], losses[kind],
                                                        strict=True))

    print(f"largest relative loss difference from the per-op loop over every step: adapted "
          f"{worst('adapted'):.1e}, whole step jitted {worst('jit step'):.1e}; the whole "
          f"step's warm-up (XLA compiles one program per batch size): {compile_s:.2f} s")


def jax_table(seconds: dict[str, list[list[float]]]) -> None:
    """Per phase and over all phases: each kind's median time, and per round the ratios of
    adapted to both plain loops, of the two plain loops, and of plain again to plain."""
    rows: list[list[object]] = []
    for i, label in [*enumerate(f"batch {b}" for b in PHASES), (None, "all phases")]:
        t = {kind: [sum(run) if i is None else run[i] for run in runs]
             for kind, runs in seconds.items()}
        rows.append([label, ms(t["plain"]), ms(t["jit step"]), ms(t["adapted"]),
                     str(paired_ratio(t["adapted"], t["plain"])),
                     str(paired_ratio(t["adapted"], t["jit step"])),
                     str(paired_ratio(t["plain"], t["jit step"])),
                     str(paired_ratio(t["plain again"], t["plain"]))])
    print_table(f"JAX loop (examples/train_jax.py, float32, {STEPS} steps per phase, "
                f"{len(seconds['plain'])} rounds, rotating order; times: median of the "
                "rounds; ratios per round: median [95 % bootstrap interval]): adapted vs plain "
                "jax.numpy, one jit per operation (eager loop) and the whole step under one "
                "jax.jit — no target in the issue",
                ["phase", "plain JAX, jit per op", "plain JAX, jit per step", "adapted",
                 "adapted / per op", "adapted / per step", "per op / per step",
                 "A/A: per op again / per op"], rows)


def compare_losses(steps: int = 60) -> tuple[int, float]:
    _times, losses, _runtimes = side_by_side(None, ("plain", "off"), steps, torch.float64)
    worst = max(abs(a - p) / abs(p) for p, a in zip(losses["plain"], losses["off"],
                                                    strict=True))
    return len(losses["plain"]), worst


if __name__ == "__main__":
    main()
