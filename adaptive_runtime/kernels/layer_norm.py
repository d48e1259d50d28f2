"""``layer_norm(x[, weight, bias[, eps]])``: normalise over the last axis,
``(x - mean) / sqrt(var + eps) * weight + bias``.

The variance is the biased one (divided by the row length), as
``torch.nn.functional.layer_norm(x, x.shape[-1:], weight, bias, eps)``; ``weight`` and
``bias`` (each optional: ``None``) are 1-D of the last axis' length, eps defaults to ``1e-5``.
Any array of at least one dimension: it is seen as rows of its last axis, and the result has
its shape and dtype.

SCALAR: a numba loop per row, two passes (mean, then variance of the centred row), sums in
float64. SIMD: the same in numba with ``prange`` over rows and fastmath (vectorised row sums).

SIMD candidates measured on the development machine (2 shared cores, AMD EPYC with AVX-512,
numba 0.68; min of repeats after a warm-up compile, best of three runs, microseconds):

=========  ============  ======  =====
dtype      shape         numpy   numba
=========  ============  ======  =====
float64    (1000, 64)       143     13
float64    (10000, 256)  12 800    513
float32    (1000, 64)       103     20
float32    (10000, 256)   3 812    506
=========  ============  ======  =====

numpy is ``mean``, ``x - mean``, ``mean(c * c)``, ``c / sqrt(var + eps)``: five passes over the
data and three temporaries, where the numba kernel reads each row three times from cache and
writes once, on both cores. numba wins at every size, so it is the SIMD arm. (Measured with
both cores free: while another process keeps one busy, the parallel kernel's OpenMP threads
wait for it and a (1000, 64) call took about 4 ms instead of 20 µs; the runtime learns that
like any other latency.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .._imported import imported
from ..backend import Backend
from ._arrays import host_arm
from ._checks import layer_norm_size
from ._compile import compile_count, prange, scalar_jit, simd_jit
from ._families import input_family
from ._gpu import add_gpu_arm, gpu_arm, inputs_on_device, nbytes

if TYPE_CHECKING:
    from ..operations import Registrar

NAME = "layer_norm"
EPS = 1e-5


@scalar_jit
def row_moments(x: Any, r: int, eps: float) -> tuple[float, float]:
    """Row ``r``'s mean and ``1 / sqrt(biased variance + eps)``: two passes, sums in float64
    (the forward and the backward kernels share it)."""
    n = x.shape[1]
    total = 0.0
    for j in range(n):
        total += x[r, j]
    mean = total / n
    squares = 0.0
    for j in range(n):
        d = x[r, j] - mean
        squares += d * d
    return mean, 1.0 / np.sqrt(squares / n + eps)


def _rows(x: Any, weight: Any, bias: Any, eps: float, out: Any) -> None:
    rows, n = x.shape
    scaled = weight.shape[0] > 0  # (empty: no weight / no bias)
    shifted = bias.shape[0] > 0
    for r in prange(rows):  # (a plain range in the SCALAR build)
        mean, inv = row_moments(x, r, eps)
        for j in range(n):
            v = (x[r, j] - mean) * inv
            if scaled:
                v = v * weight[j]
            if shifted:
                v = v + bias[j]
            out[r, j] = v


# One loop, two builds: SCALAR (sequential, exact order) and SIMD (fastmath, rows in parallel).
_layer_norm_rows = scalar_jit(_rows)
_layer_norm_rows_parallel = simd_jit(_rows)


def _on_rows(kernel: Any) -> Any:
    """A numpy function running ``kernel`` on ``x`` as contiguous rows of its last axis."""

    def layer_norm(x: np.ndarray, weight: np.ndarray | None = None,
                   bias: np.ndarray | None = None, eps: float = EPS) -> np.ndarray:
        rows = np.ascontiguousarray(x).reshape(-1, x.shape[-1])
        out = np.empty(rows.shape, dtype=x.dtype)
        none = NO_ARRAY[x.dtype.char]
        kernel(rows, none if weight is None else np.ascontiguousarray(weight),
               none if bias is None else np.ascontiguousarray(bias), float(eps), out)
        return out.reshape(x.shape)

    return layer_norm


# "no weight" / "no bias", as the kernels read it: an empty array of the input's dtype (one
# type signature for the affine and plain cases)
NO_ARRAY = {np.dtype(t).char: np.empty(0, dtype=t) for t in (np.float32, np.float64)}


layer_norm_scalar = host_arm(_on_rows(_layer_norm_rows))
layer_norm_simd = host_arm(_on_rows(_layer_norm_rows_parallel))


def _layer_norm_gpu(x: Any, weight: Any = None, bias: Any = None, eps: float = EPS) -> Any:
    functional = imported("torch").nn.functional
    return functional.layer_norm(x, x.shape[-1:], weight, bias, eps)


layer_norm_gpu = gpu_arm(NAME, _layer_norm_gpu, result_bytes=lambda x, *_: nbytes(x),
                         workspace=1.0)


def register(rt: Registrar) -> None:
    op = rt.register(NAME, size=layer_norm_size(NAME), kind="vector",
                     on_device=inputs_on_device,
                     family=input_family)
    op.add_implementation(Backend.SCALAR, layer_norm_scalar,
                          compile_count=compile_count(_layer_norm_rows))
    op.add_implementation(Backend.SIMD, layer_norm_simd, threads="numba",
                          compile_count=compile_count(_layer_norm_rows_parallel))
    add_gpu_arm(op, layer_norm_gpu)
