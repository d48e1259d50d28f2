"""Register your own operation with two arms and let the runtime pick per size.

``huber`` — the elementwise Huber loss of a residual, ``0.5 r^2`` where ``|r| <= delta``, else
``delta (|r| - delta / 2)`` — gets a SIMD arm (numpy: whole-array operations, several passes
over the data and temporaries) and a SCALAR arm (a numba loop: one pass, no temporaries).
The workload calls it at sizes from 16 to 4 million elements in a shuffled order; the runtime
times both arms per size bucket and commits to the faster one, and the table at the end shows
where each won on this machine (the loop typically wins small and mid sizes, where numpy's
per-call overhead and temporaries dominate).

    python examples/custom_op.py [--calls 3000] [--seed 0]
"""

from __future__ import annotations

import argparse
import time

import numba
import numpy as np

import adaptive_runtime as ar
from adaptive_runtime.offline.report import print_decisions

DELTA = 1.0


def huber_simd(r: np.ndarray) -> np.ndarray:
    """numpy: vectorised, a few passes over the data."""
    a = np.abs(r)
    return np.where(a <= DELTA, 0.5 * r * r, DELTA * (a - 0.5 * DELTA))


@numba.njit(cache=True)
def _huber_loop(r: np.ndarray, out: np.ndarray) -> None:
    for i in range(r.shape[0]):
        v = r[i]
        a = abs(v)
        out[i] = 0.5 * v * v if a <= DELTA else DELTA * (a - 0.5 * DELTA)


def huber_scalar(r: np.ndarray) -> np.ndarray:
    """numba: one compiled loop, one pass."""
    out = np.empty_like(r)
    _huber_loop(r, out)
    return out


def build(rt: ar.AdaptiveRuntime) -> ar.Operation:
    op = rt.register("huber", size=lambda r: r.size, kind="elementwise")
    op.add_implementation(ar.Backend.SIMD, huber_simd)
    op.add_implementation(ar.Backend.SCALAR, huber_scalar)  # (numba: compiles are not learned)
    return op


def run(calls: int, seed: int) -> ar.AdaptiveRuntime:
    rng = np.random.default_rng(seed)
    rt = ar.AdaptiveRuntime()
    huber = build(rt)
    data = rng.standard_normal(4_000_000) * 2
    sizes = np.unique(np.geomspace(16, data.size, num=40).astype(int))
    for n in sizes[[0, -1]]:  # compile the loop before timing anything (not a must: see above)
        huber_scalar(data[:n])
    start = time.perf_counter()
    for n in rng.choice(sizes, size=calls):
        r = data[:n]
        out = huber(r)  # same as rt.run("huber", r)
        assert out.shape == r.shape
    elapsed = time.perf_counter() - start
    print(f"{calls} calls of huber at {len(sizes)} sizes from {sizes[0]:,} to {sizes[-1]:,} "
          f"elements in {elapsed:.2f} s")
    return rt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    telemetry = ar.telemetry.configure(default_service_name="custom-op-example")
    rt = run(args.calls, args.seed)
    ar.telemetry.shutdown()
    print()
    print_decisions(rt)
    print(f"\nspans -> {telemetry.traces_destination or 'your tracer provider'}")


if __name__ == "__main__":
    main()
