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

On JAX arrays (``jax_arms``, which says how these were measured; float32, microseconds;
"jit": the SIMD arm, "numba": the SCALAR arm, "numpy": the numpy family's SIMD arm):

    operation            shape                   jit  jit sync    numba    numpy
    matmul               64²                    47.0      20.0     34.8      8.3
    matmul               256²                    489       380    1,509      369
    matmul               512²                  2,315     1,891   10,673    3,653
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import Backend
from ._arrays import host_arm
from ._checks import matmul_size
from ._compile import scalar_jit
from ._gpu import gpu_arm, itemsize
from ._jax_numpy import jax_libraries
from .record import CustomOp, HostArm, OperationRecord, Run
from .torch_arms import torch_modules

__all__ = ["MATMUL"]

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


def aten_matmul(a: Any, b: Any) -> Any:
    return torch_modules()[0].mm(a, b)


def jnp_matmul(a: Any, b: Any) -> Any:
    _j, jnp, _lax, highest, _t = jax_libraries()
    return jnp.matmul(a, b, precision=highest)


def _gradients(run: Run) -> Any:
    """A matmul's gradients are matmuls (adaptive: ``run``)."""

    def matmul(inputs: tuple[Any, ...], _out: Any, g: Any) -> tuple[Any, ...]:
        a, b = inputs
        return run(NAME, g, b.t()), run(NAME, a.t(), g)

    return matmul


def _compiled_gradients(run: Run) -> Any:
    """The same under ``torch.compile``: the transposes made contiguous for the operator."""

    def matmul(inputs: tuple[Any, ...], _out: Any, g: Any) -> tuple[Any, ...]:
        a, b = inputs
        return run(NAME, g, b.t().contiguous()), run(NAME, a.t().contiguous(), g)

    return matmul


def _fake(a: Any, b: Any) -> Any:
    return a.new_empty((a.shape[0], b.shape[1]))


MATMUL = OperationRecord(
    name=NAME, kind="matrix", size=matmul_size(NAME),
    host=(HostArm(Backend.SCALAR, matmul_scalar, kernel=_matmul_loop),
          HostArm(Backend.SIMD, matmul_simd, threads="blas")),
    gpu=matmul_gpu, aten=aten_matmul, aten_builtin=lambda torch: torch.mm, jnp=jnp_matmul,
    gradients=_gradients,
    custom_op=CustomOp("(Tensor a, Tensor b) -> Tensor", fake=_fake,
                       gradients=_compiled_gradients, doc="``a @ b`` of 2-D tensors."),
    autocast=True, arity=2,
    doc="Matrix product ``(m, k) @ (k, n) -> (m, n)``, on the arm the default runtime picks.")
