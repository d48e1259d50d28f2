"""Train a small network on scikit-learn's bundled digits with ``ar.torch.adapt(model)``.

The 1,797 8x8 images of ``sklearn.datasets.load_digits`` ship inside scikit-learn: nothing is
downloaded. Each image is 8 rows of 8 pixels, read as 8 channels of a length-8 signal by a
``Conv1d``, then two ``Linear`` layers with ``LayerNorm``, ``GELU`` and ``ReLU``. Training runs
in phases whose batch size grows (8 -> 64 -> 512 by default), so the operations' sizes — and
the arms that win — change between phases. Every step is a ``train_step`` span, with the
runtime's ``adaptive.select`` / ``adaptive.execute`` spans under it (sampled by the trace gate).

    python examples/train_torch.py                      # adaptive, float32
    python examples/train_torch.py --plain              # the same model without the runtime
    python examples/train_torch.py --phases 8,64 --steps-per-phase 50 --dtype float64

Telemetry goes to OTLP when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set, else to OTLP/JSON lines
files under ./adaptive-runtime-telemetry (replayable into Jaeger).
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn

import adaptive_runtime as ar
import adaptive_runtime.torch as art
from adaptive_runtime.offline.report import print_decisions

TEST_IMAGES = 360  # held out (the last ones, after a seeded shuffle)


@dataclass
class Phase:
    batch_size: int
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    test_accuracy: float = float("nan")


def digits(seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """(train images, train labels, test images, test labels): images (n, 8, 8) in [0, 1]."""
    data = load_digits()
    order = np.random.default_rng(seed).permutation(len(data.target))
    images = torch.tensor(data.images[order] / 16.0, dtype=dtype)
    labels = torch.tensor(data.target[order])
    return (images[:-TEST_IMAGES], labels[:-TEST_IMAGES], images[-TEST_IMAGES:],
            labels[-TEST_IMAGES:])


def make_model(seed: int, dtype: torch.dtype) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv1d(8, 16, kernel_size=3, padding=1), nn.ReLU(), nn.Flatten(),
        nn.Linear(16 * 8, 128), nn.LayerNorm(128), nn.GELU(),
        nn.Linear(128, 10)).to(dtype)


def batches(n_train: int, batch_size: int, steps: int, seed: int) -> Iterator[torch.Tensor]:
    """``steps`` index batches, reshuffled each pass over the training set (seeded)."""
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(n_train, generator=generator)
    at = 0
    for _ in range(steps):
        if at + batch_size > n_train:
            order, at = torch.randperm(n_train, generator=generator), 0
        yield order[at:at + batch_size]
        at += batch_size


def accuracy(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> float:
    with torch.no_grad():
        return float((model(images).argmax(dim=1) == labels).float().mean())


_NO_SPAN = contextlib.nullcontext()


class Trainer:
    """One model, its optimiser and the data, trained one step at a time (so runs can be
    interleaved step by step, as the benchmark does). ``adapted=False``: the plain model (the
    same seed, data and order: its losses are the baseline the adapted ones must equal);
    ``runtime``: the adapted model's runtime (default: the process default); ``step_spans``:
    each step in an ``ar.train_step`` span."""

    def __init__(self, *, seed: int = 0, dtype: torch.dtype = torch.float32,
                 adapted: bool = True, lr: float = 1e-3,
                 runtime: ar.AdaptiveRuntime | None = None, step_spans: bool = True) -> None:
        self.seed = seed
        self.runtime = runtime
        self.step_spans = step_spans
        self.train_x, self.train_y, self.test_x, self.test_y = digits(seed, dtype)
        self.model = make_model(seed, dtype)
        if adapted:
            art.adapt(self.model, runtime=runtime)
        self.optimiser = torch.optim.Adam(self.model.parameters(), lr=lr)
        self.loss_fn = nn.CrossEntropyLoss()
        self.steps = 0

    def phase_batches(self, epoch: int, batch_size: int, steps: int) -> list[torch.Tensor]:
        """The index batches of phase ``epoch`` (the same for every trainer of one seed)."""
        return list(batches(len(self.train_y), batch_size, steps, self.seed + epoch))

    def step(self, index: torch.Tensor, epoch: int) -> float:
        """One training step on the images at ``index``; its loss."""
        span = (ar.train_step(step=self.steps, epoch=epoch, batch_size=len(index),
                              runtime=self.runtime) if self.step_spans else _NO_SPAN)
        with span:
            self.optimiser.zero_grad()
            loss = self.loss_fn(self.model(self.train_x[index]), self.train_y[index])
            loss.backward()
            self.optimiser.step()
        self.steps += 1
        return loss.item()

    def test_accuracy(self) -> float:
        return accuracy(self.model, self.test_x, self.test_y)


def train(*, phases: Sequence[int] = (8, 64, 512), steps_per_phase: int = 150, seed: int = 0,
          dtype: torch.dtype = torch.float32, adapted: bool = True,
          runtime: ar.AdaptiveRuntime | None = None,
          on_step: Any = None) -> tuple[nn.Module, list[Phase]]:
    """Train on the digits, phase by phase; return the model and each phase's losses (one
    per step), wall time and test accuracy (see :class:`Trainer`)."""
    trainer = Trainer(seed=seed, dtype=dtype, adapted=adapted, runtime=runtime)
    results = []
    for epoch, batch_size in enumerate(phases):
        phase = Phase(batch_size)
        start = time.perf_counter()
        for index in trainer.phase_batches(epoch, batch_size, steps_per_phase):
            phase.losses.append(trainer.step(index, epoch))
            if on_step is not None:
                on_step(trainer.steps - 1, phase)
        phase.seconds = time.perf_counter() - start
        phase.test_accuracy = trainer.test_accuracy()
        results.append(phase)
    return trainer.model, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phases", default="8,64,512",
                        help="batch sizes, one per phase (default: %(default)s)")
    parser.add_argument("--steps-per-phase", type=int, default=150)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--plain", action="store_true", help="train without the runtime")
    args = parser.parse_args()
    phases = [int(b) for b in args.phases.split(",")]
    dtype = getattr(torch, args.dtype)
    telemetry = ar.telemetry.configure(default_service_name="train-torch-example")

    def report(step: int, phase: Phase) -> None:
        if len(phase.losses) % 50 == 0:
            recent = phase.losses[-50:]
            print(f"step {step + 1:5d}  batch {phase.batch_size:4d}  "
                  f"loss {sum(recent) / len(recent):.4f}", flush=True)

    _model, results = train(phases=phases, steps_per_phase=args.steps_per_phase, seed=args.seed,
                            dtype=dtype, adapted=not args.plain, on_step=report)
    print()
    for epoch, phase in enumerate(results):
        print(f"phase {epoch}: batch {phase.batch_size:4d}  {len(phase.losses)} steps in "
              f"{phase.seconds:.2f} s  final loss {phase.losses[-1]:.4f}  "
              f"test accuracy {phase.test_accuracy:.3f}")
    ar.telemetry.shutdown()
    if not args.plain:
        print("\nwhat the runtime decided (operation@family, size bucket):")
        print_decisions(ar.get_runtime())
    print(f"\nspans -> {telemetry.traces_destination or 'your tracer provider'}")


if __name__ == "__main__":
    main()
