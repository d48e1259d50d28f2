"""``scale(alpha, x, y)``: ``alpha * x + y`` (axpy) — a real scalar ``alpha`` and two arrays of
one shape (any number of dimensions); a new array like ``x``.

``alpha`` is cast to the arrays' dtype first (so float32 stays float32, also for a numpy
float64 or integer ``alpha``). SCALAR: a numba loop over the flattened arrays. SIMD: the same
loop compiled by ``simd_jit`` (fastmath: vectorised, may fuse into an FMA; ``prange``:
threaded).

SIMD variants measured on the development machine (2 cores, AVX-512, shared and noisy;
microseconds, min of repeats after the warm-up compile; a second run moved figures by up to
~40% and picked the same winners):

    dtype    n           numpy: x * alpha, += y   numba simd_jit
    float64  1,000               2.6                   3.9
    float64  100,000            38.1                  31.0
    float64  1,000,000         964                   492
    float32  1,000               2.3                   4.0
    float32  100,000            21.2                  18.4
    float32  1,000,000         200                   149

numba is the SIMD arm: faster from ~1e5 elements up (both cores); numpy wins at ~1e3, where
starting the threads costs more than the work (the runtime's SCALAR arm competes there too).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import Backend
from ._arrays import host_arm
from ._checks import scale_size
from ._compile import prange, scalar_jit, simd_jit
from ._gpu import gpu_arm, nbytes
from ._jax_numpy import jax_libraries
from .record import HostArm, OperationRecord, Run
from .torch_arms import torch_modules

__all__ = ["SCALE"]

NAME = "scale"


@scalar_jit
def _scale_loop(alpha: Any, x: Any, y: Any, out: Any) -> None:
    for i in range(x.shape[0]):
        out[i] = alpha * x[i] + y[i]


@simd_jit
def _scale_parallel(alpha: Any, x: Any, y: Any, out: Any) -> None:
    for i in prange(x.shape[0]):
        out[i] = alpha * x[i] + y[i]


def _apply(kernel: Any, alpha: Any, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    out = np.empty(x.shape, dtype=x.dtype)
    kernel(x.dtype.type(alpha), np.ascontiguousarray(x).reshape(-1),
           np.ascontiguousarray(y).reshape(-1), out.reshape(-1))
    return out


def _scale_scalar(alpha: Any, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return _apply(_scale_loop, alpha, x, y)


def _scale_simd(alpha: Any, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return _apply(_scale_parallel, alpha, x, y)


def _scale_numpy(alpha: Any, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    out = x * x.dtype.type(alpha)
    out += y
    return out


scale_scalar = host_arm(_scale_scalar, template=1)
scale_simd = host_arm(_scale_simd, template=1)
scale_numpy = host_arm(_scale_numpy, template=1)


def _scale_gpu(alpha: Any, x: Any, y: Any) -> Any:
    return x * alpha + y


def _scale_numba(alpha: Any, x: Any, y: Any) -> Any:
    from ._cuda_kernels import launch_scale

    return launch_scale(alpha, x.reshape(-1), y.reshape(-1)).reshape(x.shape)


scale_gpu = gpu_arm(NAME, _scale_gpu, result_bytes=lambda alpha, x, y: nbytes(x), template=1,
                    numba_kernel=_scale_numba)


def aten_scale(alpha: Any, x: Any, y: Any) -> Any:
    return torch_modules()[0].add(y, x, alpha=float(alpha))


def jnp_scale(alpha: Any, x: Any, y: Any) -> Any:
    jnp = jax_libraries()[1]
    return jnp.asarray(alpha, dtype=x.dtype) * x + y  # (alpha in the arrays' dtype first)


def _jax_call(jit: Any, tracer_in: Any, traced: Any) -> Any:
    """The jitted call: alpha as a Python float (weakly typed: the arrays' dtype wins)."""
    plain = jit.plain

    def call(alpha: Any, x: Any, y: Any) -> Any:
        if tracer_in((x, y)):
            return traced(plain, (alpha, x, y))
        return (jit.fn or jit.get())(float(alpha), x, y)

    return call


def _gradients(_run: Run) -> Any:
    def scale(inputs: tuple[Any, ...], _out: Any, g: Any) -> tuple[Any, ...]:
        return None, g * float(inputs[0]), g

    return scale


def _public(runtime: Any) -> Any:
    def scale(alpha: Any, x: Any, y: Any) -> Any:  # (its docstring: the record's doc)
        return runtime().run(NAME, alpha, x, y)

    return scale


SCALE = OperationRecord(
    name=NAME, kind="elementwise", size=scale_size(NAME),
    host=(HostArm(Backend.SCALAR, scale_scalar, kernel=_scale_loop),
          HostArm(Backend.SIMD, scale_simd, threads="numba", kernel=_scale_parallel),
          # numpy's own: no threads to start, it wins at ~1e3 (see the table above)
          HostArm(Backend.SIMD, scale_numpy, name="numpy", warm_up=True)),
    gpu=scale_gpu, aten=aten_scale, jnp=jnp_scale, jax_call=_jax_call, jax_template=1,
    gradients=_gradients, public=_public,
    doc="``alpha * x + y`` (axpy: a real scalar, equal-shape arrays), on the default runtime.")
