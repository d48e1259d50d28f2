"""What the GPU paths do on a machine with a CUDA GPU, in one table (``make gpu-check``).

Made for a lent GPU machine with no network: it runs on that machine's own ``python3`` (torch
with CUDA, JAX, numba preinstalled), the package from the working tree, and OpenTelemetry
from wheels carried in ``.whl/`` (``make gpu-wheels`` fetches them, on a machine with a
network). Within a few minutes it prints:

- the tests marked ``gpu`` (a real CUDA device), passed / failed;
- a digits MLP training loop on CUDA (scikit-learn's bundled digits, repeated to fill the
  batch), adapted against plain torch at batch 64 and 4,096: steps/s of each, median of
  ``ROUNDS`` rounds that alternate the two, and their ratio (target: the adapted loop at most
  2 % slower);
- per operation, the size from which the runtime learned the GPU arm fastest for host numpy
  float32 inputs (the GPU/CPU crossover, copies included);
- device synchronisations per 1,000 adapted calls on device-resident tensors, beside the
  timed calls among them (target: no more than the timed calls);
- correctness (``_gpu_correctness``): the digits MLP adapted and plain from the same seed,
  trained side by side: losses and every parameter's gradient within the dtype's rounding,
  in float32 and under autocast (bfloat16, float16), the adapted steps under
  ``torch.cuda.set_sync_debug_mode("error")`` (a synchronising call fails the row); and the
  adapted forward captured in a CUDA graph, nothing learned yet and keys committed, replayed
  against plain torch.

Where there is no CUDA device (or no torch), it says so and exits 0: an ordinary machine is
not a failure. ``docs/gpu.md`` says how to run it and holds what it printed.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from _gpu_correctness import capture_agrees, mlp, training_agrees
from _table import print_table, verdict

ROUNDS = int(os.environ.get("GPU_CHECK_ROUNDS", "3"))
STEPS = int(os.environ.get("GPU_CHECK_STEPS", "200"))
BATCHES = (64, 4096)
TRAINING_TARGET = 1.02  # adapted step time / plain step time
ADAPTED_CALLS = 1000
CROSSOVER_SIZES = [1 << k for k in range(8, 23, 2)]
CALLS_PER_SIZE = 12
GPU_TEST_FILES = ["tests/kernels/test_gpu_arm.py", "tests/kernels/test_jax_families.py",
                  "tests/kernels/test_torch_autocast.py"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def why_no_gpu() -> str | None:
    """Why this machine cannot run the check, or ``None`` when it can."""
    try:
        import torch
    except ImportError:
        return "torch is not installed for this python"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    return None


def gpu_tests() -> tuple[str, bool]:
    """The tests marked ``gpu``, run in a child pytest: its summary line, and whether none
    failed."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu",
         *GPU_TEST_FILES], cwd=ROOT, capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    summary = lines[-1].strip("= ") if lines else f"pytest exited {proc.returncode}"
    if proc.returncode not in (0, 5):
        print(proc.stdout[-3000:], proc.stderr[-2000:], sep="\n")
    return summary, proc.returncode == 0


def training_loop(batch: int) -> tuple[float, float]:
    """Median steps/s of (plain torch, adapted) on the digits MLP at ``batch``."""
    import copy

    import torch
    from sklearn.datasets import load_digits

    import adaptive_runtime.torch as art

    data = load_digits()
    gen = torch.Generator().manual_seed(1)
    pick = torch.randint(len(data.target), (batch * 8,), generator=gen)
    images = torch.tensor(data.data, dtype=torch.float32)[pick].cuda() / 16.0
    labels = torch.tensor(data.target)[pick].cuda()
    plain = mlp(torch, "cuda")
    models = {"plain": plain, "adapted": art.adapt(copy.deepcopy(plain))}
    optimisers = {k: torch.optim.SGD(m.parameters(), lr=0.05) for k, m in models.items()}

    def steps(name: str, n: int) -> float:
        model, opt = models[name], optimisers[name]
        torch.cuda.synchronize()
        start = time.perf_counter()
        for i in range(n):
            at = (i % 8) * batch
            opt.zero_grad(set_to_none=True)
            out = model(images[at:at + batch])
            torch.nn.functional.cross_entropy(out, labels[at:at + batch]).backward()
            opt.step()
        torch.cuda.synchronize()
        return n / (time.perf_counter() - start)

    for name in models:  # (warm-up: kernels loaded, the runtime's keys explored)
        steps(name, max(STEPS // 2, 20))
    rates: dict[str, list[float]] = {name: [] for name in models}
    for r in range(ROUNDS):
        order = list(models) if r % 2 == 0 else list(reversed(models))
        for name in order:
            rates[name].append(steps(name, STEPS))
    return statistics.median(rates["plain"]), statistics.median(rates["adapted"])


def crossovers() -> list[tuple[str, str, str]]:
    """Per operation: the smallest size from which the runtime learned the GPU arm fastest
    (and kept it at every larger size tried), for host numpy inputs."""
    import numpy as np

    import adaptive_runtime as ar

    f32 = np.float32
    # operation -> inputs of about n elements (host numpy float32)
    inputs: dict[str, Callable[[Any, int], tuple[Any, ...]]] = {
        "add": lambda rng, n: (rng.random(n, f32), rng.random(n, f32)),
        "relu": lambda rng, n: (rng.random(n, f32),),
        "softmax": lambda rng, n: (rng.random((max(n // 256, 1), 256), f32),),
        "dot": lambda rng, n: (rng.random(n, f32), rng.random(n, f32)),
        "matmul": lambda rng, n: (rng.random((int(n ** 0.5),) * 2, f32),) * 2,
    }
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    rng = np.random.default_rng(0)
    rows = []
    for name, make in inputs.items():
        best = {}
        for size in CROSSOVER_SIZES:
            args = make(rng, size)
            for _ in range(CALLS_PER_SIZE):
                rt.run(name, *args)
            n = rt.operation(name).size_of(*args)
            best[n] = rt.get_best_backend(name, n)
        gpu_from = None
        for n in sorted(best, reverse=True):
            if best[n] is not ar.Backend.GPU:
                break
            gpu_from = n
        learned = ", ".join(f"{n:,}: {b.value if b else '-'}" for n, b in sorted(best.items()))
        rows.append((f"  {name}", "never" if gpu_from is None else f"from {gpu_from:,}",
                     learned))
    return rows


def syncs_per_thousand() -> tuple[int, int]:
    """(device synchronisations, timed calls) over ``ADAPTED_CALLS`` adapted calls of relu
    and add on CUDA tensors, after a warm-up."""
    import torch

    import adaptive_runtime as ar
    from adaptive_runtime.offline.replay import read_calls

    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    xs = [torch.rand(n, device="cuda") for n in (256, 4096, 65536)]
    for i in range(600):
        rt.run("relu", xs[i % 3])
        rt.run("add", xs[i % 3], xs[i % 3])
    real = torch.cuda.synchronize
    count = [0]

    def counting(*args: Any, **kwargs: Any) -> None:
        count[0] += 1
        real(*args, **kwargs)

    torch.cuda.synchronize = counting
    try:
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "timed.jsonl")
            with rt.record_calls(path):
                for i in range(ADAPTED_CALLS // 2):
                    rt.run("relu", xs[i % 3])
                    rt.run("add", xs[i % 3], xs[i % 3])
            timed = len(read_calls(path))
    finally:
        torch.cuda.synchronize = real
    return count[0], timed


def correctness_rows() -> list[list[str]]:
    """The adapted MLP against plain torch: training (float32, autocast) and graph capture."""
    rows = []
    for autocast in (None, "bfloat16", "float16"):
        found, ok = training_agrees("cuda", autocast=autocast)
        rows.append([f"digits MLP adapted vs plain, {autocast or 'float32'}: losses, "
                     "gradients, syncs", found, "within rounding, no sync", verdict(ok)])
    found, ok = training_agrees("cuda", host_arms=True)
    rows.append(["digits MLP adapted vs plain, float32, CPU arms allowed on device inputs "
                 "(host_arms_on_device): losses, gradients", found, "within rounding",
                 verdict(ok)])
    for committed, host_arms in ((False, False), (True, False), (True, True)):
        found, ok = capture_agrees(committed, host_arms=host_arms)
        when = "keys committed" if committed else "nothing learned yet"
        allowed = ", CPU arms allowed" if host_arms else ""
        rows.append([f"CUDA graph capture of the adapted MLP, {when}{allowed}", found,
                     "replay = plain", verdict(ok)])
    return rows


def main() -> int:
    why = why_no_gpu()
    if why is not None:
        print(f"gpu-check: no GPU check on this machine ({why}); run `make gpu-check` on a "
              "machine with a CUDA GPU (docs/gpu.md)")
        return 0
    import torch

    began = time.perf_counter()
    print(f"gpu-check: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"python {sys.version.split()[0]}", flush=True)
    summary, passed = gpu_tests()
    rows: list[list[str]] = [["tests marked gpu", summary, "all pass", verdict(passed)]]
    for batch in BATCHES:
        plain, adapted = training_loop(batch)
        ratio = plain / adapted  # (step time adapted / plain)
        rows.append([f"digits MLP, batch {batch:,}: plain / adapted steps/s",
                     f"{plain:,.0f} / {adapted:,.0f} ({ratio:.3f}x the step time)",
                     f"<= {TRAINING_TARGET:.2f}x", verdict(ratio <= TRAINING_TARGET)])
    syncs, timed = syncs_per_thousand()
    rows.append([f"syncs per {ADAPTED_CALLS:,} adapted calls on CUDA tensors",
                 f"{syncs} ({timed} timed calls)", "<= timed calls", verdict(syncs <= timed)])
    rows += correctness_rows()
    learned = crossovers()
    rows.append(["GPU arm learned fastest, host float32 inputs", "", "-", "-"])
    rows += [[name, found, "-", "-"] for name, found, _sizes in learned]
    print_table(f"gpu-check ({time.perf_counter() - began:.0f} s)",
                ["check", "measured", "target", "verdict"], rows)
    print("\nthe arm learned fastest per size (elements: arm):")
    for name, _found, sizes in learned:
        print(f"{name}: {sizes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
