"""Train an MLP on scikit-learn's bundled digits in JAX, each operation chosen by the runtime.

The 1,797 8x8 images of ``sklearn.datasets.load_digits`` ship inside scikit-learn: nothing is
downloaded. The model: ``linear(64 -> 128)``, ``layer_norm``, ``gelu``, ``linear(128 -> 10)``,
``softmax``, cross-entropy; SGD with momentum. Training runs in phases whose batch size grows
(8 -> 64 -> 512 by default), so the operations' sizes — and the arms that win — change.

What makes a JAX loop adaptive: under ``jax.jit`` or ``jax.grad`` an operation only ever sees
tracers, and a traced call runs the plain ``jax.numpy`` implementation untimed (there is
nothing to time: it records a computation). So the training step here runs EAGERLY, on
concrete arrays, with its backward pass written out of adaptive operations too — the
``linear`` / ``matmul`` products, ``gelu.backward``, ``layer_norm.backward`` and the
momentum updates as ``scale`` (``alpha * x + y``) — each timed, learned and chosen per size
between XLA's jitted kernel (SIMD) and numba's loop (SCALAR). ``jax.grad`` works through the
same model as well: once per phase the example checks that ``jax.grad`` of the loss through
the adaptive operations equals the hand-written gradients.

``--plain`` runs the same math, in the same order from the same seed, with plain ``jax.numpy``
functions (each ``jax.jit``-compiled, as a JAX user writes them): the baseline whose losses the
adaptive run must reproduce step by step.

    python examples/train_jax.py                          # adaptive
    python examples/train_jax.py --plain                  # plain jax.numpy
    python examples/train_jax.py --phases 8,64 --steps-per-phase 50 --seed 1

Every step is an ``ar.train_step`` span with the runtime's ``adaptive.select`` /
``adaptive.execute`` spans under it (sampled by the trace gate). Telemetry goes to OTLP when
``OTEL_EXPORTER_OTLP_ENDPOINT`` is set, else to OTLP/JSON lines files under
./adaptive-runtime-telemetry (replayable into Jaeger).
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from sklearn.datasets import load_digits

import adaptive_runtime as ar
from adaptive_runtime.offline.report import print_decisions

TEST_IMAGES = 360  # held out (the last ones, after a seeded shuffle)
HIDDEN = 128
CLASSES = 10
EPS = 1e-5
LEARNING_RATE = 0.05
MOMENTUM = 0.9
Params = dict[str, Any]


@dataclass
class Phase:
    batch_size: int
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    test_accuracy: float = float("nan")
    # largest difference between jax.grad through the operations and the manual gradients,
    # relative to the gradient's largest element (the worst parameter), at the phase's start
    grad_check: float = float("nan")


@dataclass
class Result:
    phases: list[Phase]
    params: Params

    @property
    def losses(self) -> list[float]:
        """Every step's loss, in order."""
        return [loss for phase in self.phases for loss in phase.losses]

    @property
    def test_accuracy(self) -> float:
        return self.phases[-1].test_accuracy


# --------------------------------------------------------------------------- operations


class AdaptiveOps:
    """The model's operations on an adaptive runtime: ``rt.run("linear", ...)`` is
    ``ar.ops.linear(...)`` on the process default runtime (``ar.get_runtime()``); the backward
    operations are run by name."""

    def __init__(self, rt: ar.AdaptiveRuntime) -> None:
        self.run = rt.run

    def linear(self, x: Any, w: Any, b: Any) -> Any:
        return self.run("linear", x, w, b)

    def matmul(self, a: Any, b: Any) -> Any:
        return self.run("matmul", a, b)

    def layer_norm(self, x: Any, w: Any, b: Any) -> Any:
        return self.run("layer_norm", x, w, b, EPS)

    def gelu(self, x: Any) -> Any:
        return self.run("gelu", x)

    def softmax(self, x: Any) -> Any:
        return self.run("softmax", x)

    def scale(self, alpha: float, x: Any, y: Any) -> Any:
        return self.run("scale", alpha, x, y)

    def gelu_backward(self, g: Any, x: Any) -> Any:
        return self.run("gelu.backward", g, x)

    def layer_norm_backward(self, g: Any, x: Any, w: Any) -> tuple[Any, Any, Any]:
        return self.run("layer_norm.backward", g, x, w, EPS)  # (dx, dweight, dbias)


@jax.jit
def _plain_gelu_backward(g: Any, x: Any) -> Any:
    cdf = 0.5 * jax.lax.erfc(-x / math.sqrt(2.0))
    return g * (cdf + x * jnp.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi))


@jax.jit
def _plain_layer_norm(x: Any, w: Any, b: Any) -> Any:
    centred = x - x.mean(axis=-1, keepdims=True)
    return centred / jnp.sqrt((centred * centred).mean(axis=-1, keepdims=True) + EPS) * w + b


@jax.jit
def _plain_layer_norm_backward(g: Any, x: Any, w: Any) -> tuple[Any, Any, Any]:
    centred = x - x.mean(axis=-1, keepdims=True)
    inv = 1.0 / jnp.sqrt((centred * centred).mean(axis=-1, keepdims=True) + EPS)
    xhat = centred * inv
    gw = g * w
    dx = inv * (gw - gw.mean(axis=-1, keepdims=True)
                - xhat * (gw * xhat).mean(axis=-1, keepdims=True))
    return dx, (g * xhat).sum(axis=0), g.sum(axis=0)


class PlainOps:
    """The same operations in plain ``jax.numpy``, each ``jax.jit``-compiled: the baseline."""

    linear = staticmethod(jax.jit(lambda x, w, b: x @ w.T + b))
    matmul = staticmethod(jax.jit(jnp.matmul))
    layer_norm = staticmethod(_plain_layer_norm)
    gelu = staticmethod(jax.jit(lambda x: jax.nn.gelu(x, approximate=False)))
    softmax = staticmethod(jax.jit(lambda x: jax.nn.softmax(x, axis=-1)))
    scale = staticmethod(jax.jit(lambda alpha, x, y: alpha * x + y))
    gelu_backward = staticmethod(_plain_gelu_backward)
    layer_norm_backward = staticmethod(_plain_layer_norm_backward)


# --------------------------------------------------------------------------- the model


def digits(seed: int) -> tuple[Any, ...]:
    """(train images, train labels, test images, test labels): images flattened to 64
    float32 values in [0, 1], as JAX arrays; labels as numpy ints."""
    data = load_digits()
    order = np.random.default_rng(seed).permutation(len(data.target))
    images = (data.images[order] / 16.0).reshape(len(order), -1).astype(np.float32)
    labels = data.target[order]
    return (jnp.asarray(images[:-TEST_IMAGES]), labels[:-TEST_IMAGES],
            jnp.asarray(images[-TEST_IMAGES:]), labels[-TEST_IMAGES:])


def init_params(seed: int) -> Params:
    """Uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) weights and biases, as torch's ``nn.Linear``;
    layer norm's weight 1 and bias 0."""
    rng = np.random.default_rng(seed)

    def uniform(fan_in: int, *shape: int) -> Any:
        bound = 1.0 / math.sqrt(fan_in)
        return jnp.asarray(rng.uniform(-bound, bound, shape).astype(np.float32))

    return {"w1": uniform(64, HIDDEN, 64), "b1": uniform(64, HIDDEN),
            "g1": jnp.ones(HIDDEN, dtype=jnp.float32), "be1": jnp.zeros(HIDDEN, jnp.float32),
            "w2": uniform(HIDDEN, CLASSES, HIDDEN), "b2": uniform(HIDDEN, CLASSES)}


def forward(ops: Any, params: Params, x: Any) -> tuple[Any, ...]:
    """The forward pass: (pre-norm activations, normalised, gelu'd, class probabilities)."""
    h = ops.linear(x, params["w1"], params["b1"])
    n = ops.layer_norm(h, params["g1"], params["be1"])
    a = ops.gelu(n)
    p = ops.softmax(ops.linear(a, params["w2"], params["b2"]))
    return h, n, a, p


def cross_entropy(p: Any, onehot: Any) -> Any:
    return -jnp.mean(jnp.log(jnp.sum(p * onehot, axis=1)))


@jax.jit
def loss_and_dlogits(p: Any, onehot: Any) -> tuple[Any, Any]:
    """The loss and its gradient with respect to the logits, ``(p - onehot) / batch`` (plain
    arithmetic, one compiled function: both runs share it)."""
    return cross_entropy(p, onehot), (p - onehot) / p.shape[0]


def loss_of(ops: Any, params: Params, x: Any, onehot: Any) -> Any:
    """The loss as one function of the parameters: what ``jax.grad`` differentiates."""
    return cross_entropy(forward(ops, params, x)[3], onehot)


def gradients(ops: Any, params: Params, x: Any, dlogits: Any,
              cache: tuple[Any, ...]) -> Params:
    """The backward pass, by hand, from the logits' gradient: every product and every
    activation's gradient is an operation of ``ops`` (only the bias sums and transposes are
    plain array arithmetic)."""
    h, n, a, _p = cache
    da = ops.matmul(dlogits, params["w2"])
    dn = ops.gelu_backward(da, n)
    dh, dg1, dbe1 = ops.layer_norm_backward(dn, h, params["g1"])
    return {"w1": ops.matmul(dh.T, x), "b1": dh.sum(axis=0), "g1": dg1, "be1": dbe1,
            "w2": ops.matmul(dlogits.T, a), "b2": dlogits.sum(axis=0)}


# jax.grad of the loss through the operations, compiled (the operations see tracers: they run
# their jax.numpy implementation, untimed). One compilation per batch size.
auto_gradients = jax.jit(jax.grad(loss_of, argnums=1), static_argnums=0)


def grad_difference(ops: Any, params: Params, x: Any, onehot: Any, manual: Params) -> float:
    """How far ``jax.grad`` of the loss through ``ops`` is from the manual gradients: the
    largest element difference relative to the gradient's largest element, worst parameter."""
    auto = auto_gradients(ops, params, x, onehot)
    return max(float(jnp.max(jnp.abs(auto[k] - manual[k])) / jnp.max(jnp.abs(manual[k])))
               for k in params)


def batches(n_train: int, batch_size: int, steps: int, seed: int) -> Iterator[np.ndarray]:
    """``steps`` index batches, reshuffled each pass over the training set (seeded)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(n_train)
    at = 0
    for _ in range(steps):
        if at + batch_size > n_train:
            order, at = rng.permutation(n_train), 0
        yield order[at:at + batch_size]
        at += batch_size


def accuracy(ops: Any, params: Params, images: Any, labels: np.ndarray) -> float:
    predicted = np.asarray(jnp.argmax(forward(ops, params, images)[3], axis=1))
    return float(np.mean(predicted == labels))


def train(*, phases: Sequence[int] = (8, 64, 512), steps_per_phase: int = 150, seed: int = 0,
          plain: bool = False, runtime: ar.AdaptiveRuntime | None = None,
          check_grad: bool = True,
          on_step: Callable[[int, Phase], None] | None = None) -> Result:
    """Train on the digits, phase by phase (one batch size each); return each phase's losses
    (one per step), wall time, test accuracy and ``jax.grad`` check, and the parameters.

    ``plain``: plain ``jax.numpy`` operations instead of the runtime's (the same data, order
    and initial parameters). ``runtime``: the adaptive operations' runtime (default: the
    process default, the one ``ar.ops`` uses). ``check_grad``: compare ``jax.grad`` with the
    manual gradients at each phase's first step (:attr:`Phase.grad_check`).
    """
    rt = runtime if runtime is not None else ar.get_runtime()
    ops: Any = PlainOps() if plain else AdaptiveOps(rt)
    train_x, train_y, test_x, test_y = digits(seed)
    params = init_params(seed)
    velocity = {k: jnp.zeros_like(v) for k, v in params.items()}
    eye = np.eye(CLASSES, dtype=np.float32)
    results = []
    steps = 0
    for epoch, batch_size in enumerate(phases):
        phase = Phase(batch_size)
        start = time.perf_counter()
        for index in batches(len(train_y), batch_size, steps_per_phase, seed + epoch):
            x, onehot = train_x[jnp.asarray(index)], jnp.asarray(eye[train_y[index]])
            with ar.train_step(step=steps, epoch=epoch, batch_size=batch_size, runtime=rt):
                cache = forward(ops, params, x)
                loss, dlogits = loss_and_dlogits(cache[3], onehot)
                grads = gradients(ops, params, x, dlogits, cache)
                if check_grad and not phase.losses:  # (not counted in the phase's time)
                    checked = time.perf_counter()
                    phase.grad_check = grad_difference(ops, params, x, onehot, grads)
                    start += time.perf_counter() - checked
                for k in params:  # SGD with momentum: two axpys per parameter
                    velocity[k] = ops.scale(MOMENTUM, velocity[k], grads[k])
                    params[k] = ops.scale(-LEARNING_RATE, velocity[k], params[k])
            phase.losses.append(float(loss))
            steps += 1
            if on_step is not None:
                on_step(steps - 1, phase)
        phase.seconds = time.perf_counter() - start
        phase.test_accuracy = accuracy(ops, params, test_x, test_y)
        results.append(phase)
    return Result(results, params)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phases", default="8,64,512",
                        help="batch sizes, one per phase (default: %(default)s)")
    parser.add_argument("--steps-per-phase", type=int, default=150)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plain", action="store_true",
                        help="plain jax.numpy operations, without the runtime")
    args = parser.parse_args()
    phases = [int(b) for b in args.phases.split(",")]
    telemetry = ar.telemetry.configure(default_service_name="train-jax-example")

    def report(step: int, phase: Phase) -> None:
        if len(phase.losses) % 50 == 0:
            recent = phase.losses[-50:]
            print(f"step {step + 1:5d}  batch {phase.batch_size:4d}  "
                  f"loss {sum(recent) / len(recent):.4f}", flush=True)

    result = train(phases=phases, steps_per_phase=args.steps_per_phase, seed=args.seed,
                   plain=args.plain, on_step=report)
    print()
    for epoch, phase in enumerate(result.phases):
        print(f"phase {epoch}: batch {phase.batch_size:4d}  {len(phase.losses)} steps in "
              f"{phase.seconds:.2f} s  final loss {phase.losses[-1]:.4f}  "
              f"test accuracy {phase.test_accuracy:.3f}  "
              f"jax.grad vs manual gradients {phase.grad_check:.1e}")
    ar.telemetry.shutdown()
    if not args.plain:
        print("\nwhat the runtime decided (operation@family, size bucket):")
        print_decisions(ar.get_runtime())
    print(f"\nspans -> {telemetry.traces_destination or 'your tracer provider'}")


if __name__ == "__main__":
    main()
