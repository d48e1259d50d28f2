"""A small training loop whose kernels go through adaptive_runtime, traced per step.

A two-layer perceptron learns XOR-like data with plain numpy; its elementwise additions and
inner products run through ``ar.ops``, so the runtime picks SCALAR or SIMD per call and learns
as the loop runs. Each step is an OpenTelemetry span ``train_step``; the runtime's
``adaptive.select`` / ``adaptive.execute`` spans appear under it (sampled by the trace gate).

    python examples/training_loop.py --steps 200
    # spans + metrics: OTLP if OTEL_EXPORTER_OTLP_ENDPOINT is set, else
    # ./adaptive-runtime-telemetry/{traces,metrics}.jsonl
"""

from __future__ import annotations

import argparse

import numpy as np
from opentelemetry import trace

import adaptive_runtime as ar


def train(steps: int, hidden: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(256, 2))
    y = (np.sign(x[:, 0] * x[:, 1]) + 1) / 2  # 1 where both coordinates share a sign
    w1 = rng.normal(0, 1, size=(2, hidden))
    b1 = np.zeros(hidden)
    w2 = rng.normal(0, 1, size=hidden)
    tracer = trace.get_tracer("examples.training_loop")
    loss = float("nan")
    for step in range(steps):
        with tracer.start_as_current_span("train_step") as span:
            span.set_attribute("step", step)
            h_pre = x @ w1
            h = np.tanh(np.stack([ar.ops.add(row, b1) for row in h_pre]))
            logits = np.array([ar.ops.dot(row, w2) for row in h])
            p = 1 / (1 + np.exp(-logits))
            loss = float(-np.mean(y * np.log(p + 1e-9) + (1 - y) * np.log(1 - p + 1e-9)))
            grad_logits = (p - y) / len(y)
            grad_w2 = h.T @ grad_logits
            grad_h = np.outer(grad_logits, w2) * (1 - h ** 2)
            w2 -= 0.5 * grad_w2
            w1 -= 0.5 * (x.T @ grad_h)
            b1 -= 0.5 * grad_h.sum(axis=0)
            span.set_attribute("loss", loss)
    return loss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    telemetry = ar.telemetry.configure(service_name="training-loop-example")
    loss = train(args.steps, args.hidden, args.seed)
    ar.telemetry.shutdown()
    rt = ar.get_runtime()
    print(f"final loss {loss:.4f} after {args.steps} steps")
    for record in rt.history_snapshot():
        print(f"  {record.operation:4s} bucket {record.size_bucket:2d} {record.backend.value:6s} "
              f"{record.samples:6d} samples  mean {record.mean_us:8.2f} us")
    print(f"spans -> {telemetry.traces_destination or 'your tracer provider'}")


if __name__ == "__main__":
    main()
