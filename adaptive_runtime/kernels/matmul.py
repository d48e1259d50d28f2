"""``matmul(a, b)``: matrix product of 2-D arrays, ``(m, k) @ (k, n) -> (m, n)``.

SCALAR: a numba triple loop in ``i, p, j`` order (the innermost loop walks rows of ``b`` and
the output contiguously), accumulating in the input dtype. SIMD: ``numpy.matmul`` (BLAS).

SIMD candidates measured on the development machine (2 shared cores, AMD EPYC with AVX-512,
numba 0.68, OpenBLAS 0.3.31; square matrices; min of repeats after a warm-up compile, best of
two runs, microseconds):

=========  =====  ======  ===============================================
dtype      size   numpy   numba (``prange`` over rows, fastmath, i-p-j)
=========  =====  ======  ===============================================
float64    64²        11      29
float64    256²      357   1 094
float64    512²    2 699   9 383
float32    64²       5.6      12
float32    256²      188     445
float32    512²    1 334   3 598
=========  =====  ======  ===============================================

BLAS wins every size by 2-3.5x (it blocks for the caches and uses packed FMA micro-kernels), so
the SIMD arm is ``numpy.matmul`` and the numba variant was dropped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..backend import Backend
from ._arrays import host_arm
from ._checks import matmul_size
from ._compile import compile_count, scalar_jit
from ._families import input_family
from ._gpu import add_gpu_arm, gpu_arm, inputs_on_device, itemsize

if TYPE_CHECKING:
    from ..operations import Registrar

NAME = "matmul"


@scalar_jit
def _matmul_loop(a: Any, b: Any, out: Any) -> None:
    m, k = a.shape
    n = b.shape[1]
    for i in range(m):
        for p in range(k):
            aip = a[i, p]
            for j in range(n):
                out[i, j] += aip * b[p, j]


def _matmul_scalar(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.zeros((a.shape[0], b.shape[1]), dtype=a.dtype)
    _matmul_loop(np.ascontiguousarray(a), np.ascontiguousarray(b), out)
    return out


matmul_scalar = host_arm(_matmul_scalar)
matmul_simd = host_arm(np.matmul)


def _matmul_gpu(a: Any, b: Any) -> Any:
    return a @ b


matmul_gpu = gpu_arm(NAME, _matmul_gpu,
                     result_bytes=lambda a, b: a.shape[0] * b.shape[1] * itemsize(a))


def register(rt: Registrar) -> None:
    op = rt.register(NAME, size=matmul_size(NAME), kind="matrix",
                     on_device=inputs_on_device,
                     family=input_family)
    op.add_implementation(Backend.SCALAR, matmul_scalar,
                          compile_count=compile_count(_matmul_loop))
    op.add_implementation(Backend.SIMD, matmul_simd, threads="blas")
    add_gpu_arm(op, matmul_gpu)
