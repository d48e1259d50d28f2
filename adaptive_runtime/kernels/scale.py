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

from typing import TYPE_CHECKING, Any

import numpy as np

from ..backend import Backend
from ._arrays import host_arm
from ._checks import scale_size
from ._compile import compile_count, prange, scalar_jit, simd_jit
from ._families import input_family
from ._gpu import add_gpu_arm, gpu_arm, inputs_on_device, nbytes

if TYPE_CHECKING:
    from ..operations import Registrar

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


def register(rt: Registrar) -> None:
    op = rt.register(NAME, size=scale_size(NAME), kind="elementwise", on_device=inputs_on_device,
                     family=input_family)
    op.add_implementation(Backend.SCALAR, scale_scalar, compile_count=compile_count(_scale_loop))
    op.add_implementation(Backend.SIMD, scale_simd, threads="numba",
                          compile_count=compile_count(_scale_parallel))
    # numpy's own: no threads to start, it wins at ~1e3 (see the table above)
    op.add_implementation(Backend.SIMD, scale_numpy, name="numpy", warm_up=True)
    add_gpu_arm(op, scale_gpu)
