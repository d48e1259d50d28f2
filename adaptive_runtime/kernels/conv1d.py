"""``conv1d(x, w)``: "valid" 1-D cross-correlation, ``y[i] = sum_j x[i + j] * w[j]``.

Like ``torch.nn.functional.conv1d`` with one channel and no padding (and
``numpy.correlate(x, w, "valid")``): a signal of length n and a kernel of length k,
1 <= k <= n, give n - k + 1 outputs.

SCALAR: a numba loop per output over the taps, accumulating in the input dtype. SIMD: numba,
``prange`` over chunks of outputs; within a chunk the taps are the outer loop and the outputs
the inner one (``out[t] += x[t + j] * w[j]``), which vectorises across outputs whatever k is.

SIMD candidates measured on the development machine (2 shared cores, AMD EPYC with AVX-512,
numba 0.68; min of repeats after a warm-up compile, microseconds). "per output" is the plain
numba kernel (``prange`` over outputs, a fastmath reduction over the taps); "chunks" is the one
kept:

=========  =========  ==  ===============  ==========  ======
dtype      n          k   np.correlate     per output  chunks
=========  =========  ==  ===============  ==========  ======
float64    10 000     3               5.5          11     8.2
float64    10 000     31              182         123      29
float64    100 000    3                76          66      29
float64    100 000    31            1 158       1 198     184
float64    1 000 000  3               492         584     247
float64    1 000 000  31           12 000      11 740   2 179
float32    10 000     3               8.7         6.2     3.5
float32    10 000     31              209         116      11
float32    100 000    3                82          56      17
float32    100 000    31            3 258       1 144     138
float32    1 000 000  3               819         563     132
float32    1 000 000  31           33 300      11 970     972
=========  =========  ==  ===============  ==========  ======

It depends on k for numpy: up to k = 11 ``numpy.correlate`` runs an unrolled single-threaded
loop and is competitive; from k = 12 it calls a BLAS dot per output and falls off a cliff
(float64, n = 10^6: 3.1 ms at k = 11, 12.6 ms at k = 12). The chunked numba kernel is the
fastest from n = 10^5 at both k (2-34x) and loses only the smallest call (float64, n = 10^4,
k = 3: thread start-up), so it is the SIMD arm; ``numpy.correlate`` was dropped. The per-output
kernel does not vectorise across outputs and barely beats SCALAR.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from ..backend import Backend
from ._arrays import host_arm
from ._checks import conv1d_size
from ._compile import compile_count, prange, scalar_jit, simd_jit
from ._gpu import gpu_arm, inputs_on_device, itemsize

if TYPE_CHECKING:
    from ..runtime import AdaptiveRuntime

NAME = "conv1d"
# Outputs per parallel task of the SIMD kernel: its slice of x and of the output stay in L1.
CHUNK = 1024


@scalar_jit
def _conv1d_loop(x: Any, w: Any, out: Any) -> None:
    k = w.shape[0]
    for i in range(out.shape[0]):
        acc = x[i] * w[0]
        for j in range(1, k):
            acc += x[i + j] * w[j]
        out[i] = acc


@simd_jit
def _conv1d_chunks(x: Any, w: Any, out: Any) -> None:
    m = out.shape[0]
    k = w.shape[0]
    for c in prange((m + CHUNK - 1) // CHUNK):
        lo = c * CHUNK
        size = min(CHUNK, m - lo)
        # Zero-based slices: numba then knows the indices are not negative and vectorises.
        o = out[lo:lo + size]
        xs = x[lo:lo + size + k - 1]
        w0 = w[0]
        for t in range(size):
            o[t] = xs[t] * w0
        for j in range(1, k):
            wj = w[j]
            xj = xs[j:j + size]
            for t in range(size):
                o[t] += xj[t] * wj


def _with(kernel: Any) -> Any:
    """A numpy function running ``kernel`` on contiguous ``x`` and ``w``."""

    def conv1d(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        out = np.empty(x.shape[0] - w.shape[0] + 1, dtype=x.dtype)
        kernel(np.ascontiguousarray(x), np.ascontiguousarray(w), out)
        return out

    return conv1d


conv1d_scalar = host_arm(_with(_conv1d_loop))
conv1d_simd = host_arm(_with(_conv1d_chunks))


def _conv1d_gpu(x: Any, w: Any) -> Any:
    functional = sys.modules["torch"].nn.functional
    return functional.conv1d(x.view(1, 1, -1), w.view(1, 1, -1)).view(-1)


conv1d_gpu = gpu_arm(NAME, _conv1d_gpu,
                     result_bytes=lambda x, w: (x.shape[0] - w.shape[0] + 1) * itemsize(x))


def register(rt: AdaptiveRuntime) -> None:
    op = rt.register(NAME, size=conv1d_size(NAME), kind="matrix",
                     on_device=inputs_on_device)
    op.add_implementation(Backend.SCALAR, conv1d_scalar,
                          compile_count=compile_count(_conv1d_loop))
    op.add_implementation(Backend.SIMD, conv1d_simd,
                          compile_count=compile_count(_conv1d_chunks))
    op.add_implementation(Backend.GPU, conv1d_gpu, floor_us=conv1d_gpu.floor_us)
