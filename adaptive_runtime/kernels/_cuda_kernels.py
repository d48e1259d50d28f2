"""numba CUDA kernels: the GPU arm where torch is absent but numba sees a CUDA device.

Each ``launch_*`` function takes device arrays (``numba.cuda`` arrays), launches its kernel and
returns the result as a device array (a reduction: a host scalar); the GPU arm (``_gpu.py``)
copies inputs in and the result out, checks free memory first and synchronises. Kernels compile
on first launch; the arm imports this module only when it takes the numba path. numba's CUDA
simulator (``NUMBA_ENABLE_CUDASIM=1``) runs them on the CPU: that is how the tests check them
on machines without a GPU.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from numba import cuda

__all__ = ["launch_add", "launch_dot", "launch_relu", "launch_scale"]

THREADS = 256  # threads per block: a multiple of the warp size, fine on every CUDA GPU
_DOT_BLOCKS_MAX = 1024


def _blocks(n: int) -> int:
    return (n + THREADS - 1) // THREADS


@cuda.jit
def _add(a: Any, b: Any, out: Any) -> None:
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = a[i] + b[i]


@cuda.jit
def _scale(alpha: Any, x: Any, y: Any, out: Any) -> None:
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = alpha * x[i] + y[i]


@cuda.jit
def _relu(x: Any, out: Any) -> None:
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = x[i] if x[i] > 0 else 0


@cuda.jit
def _dot_partial(a: Any, b: Any, partial: Any) -> None:
    # grid-stride products, then a tree reduction in shared memory: one sum per block
    cache = cuda.shared.array(THREADS, dtype=numba.float64)
    tid = cuda.threadIdx.x
    acc = 0.0
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < a.shape[0]:
        acc += a[i] * b[i]
        i += stride
    cache[tid] = acc
    cuda.syncthreads()
    half = THREADS // 2
    while half > 0:
        if tid < half:
            cache[tid] += cache[tid + half]
        cuda.syncthreads()
        half //= 2
    if tid == 0:
        partial[cuda.blockIdx.x] = cache[0]


def _empty_like(x: Any, n: int | None = None) -> Any:
    return cuda.device_array(x.shape[0] if n is None else n, dtype=x.dtype)


def launch_add(a: Any, b: Any) -> Any:
    out = _empty_like(a)
    _add[_blocks(out.shape[0]), THREADS](a, b, out)
    return out


def launch_scale(alpha: float, x: Any, y: Any) -> Any:
    out = _empty_like(x)
    _scale[_blocks(out.shape[0]), THREADS](x.dtype.type(alpha), x, y, out)
    return out


def launch_relu(x: Any) -> Any:
    out = _empty_like(x)
    _relu[_blocks(out.shape[0]), THREADS](x, out)
    return out


def launch_dot(a: Any, b: Any) -> Any:
    """Per-block partial sums on the device (at most 1,024), added up on the host: a numpy
    scalar of the inputs' dtype."""
    blocks = min(_blocks(a.shape[0]), _DOT_BLOCKS_MAX)
    partial = cuda.device_array(blocks, dtype=np.float64)  # float64 partial sums
    _dot_partial[blocks, THREADS](a, b, partial)
    return a.dtype.type(partial.copy_to_host().sum())
