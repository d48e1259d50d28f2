"""``dot(a, b)``: inner product of two equal-length 1-D arrays.

SCALAR: a sequential numba loop (exact left-to-right summation order). SIMD: ``numpy.dot``
(BLAS, vectorised and unrolled).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..backend import Backend
from ._arrays import host_arm
from ._checks import vector_pair_size
from ._compile import compile_count, scalar_jit
from ._families import input_family
from ._gpu import add_gpu_arm, gpu_arm, inputs_on_device

if TYPE_CHECKING:
    from ..operations import Registrar

NAME = "dot"


@scalar_jit
def _dot_loop(a: Any, b: Any) -> Any:
    acc = a[0] * b[0]
    for i in range(1, a.shape[0]):
        acc += a[i] * b[i]
    return acc


dot_scalar = host_arm(_dot_loop)
dot_simd = host_arm(np.dot)

def _dot_gpu(a: Any, b: Any) -> Any:
    return a.dot(b)


def _dot_numba(a: Any, b: Any) -> Any:
    from ._cuda_kernels import launch_dot

    return launch_dot(a, b)


dot_gpu = gpu_arm(NAME, _dot_gpu, result_bytes=lambda a, b: 8, numba_kernel=_dot_numba)


def register(rt: Registrar) -> None:
    op = rt.register(NAME, size=vector_pair_size(NAME), kind="vector",
                     on_device=inputs_on_device,
                     family=input_family)
    op.add_implementation(Backend.SCALAR, dot_scalar, compile_count=compile_count(_dot_loop))
    op.add_implementation(Backend.SIMD, dot_simd, threads="blas")
    add_gpu_arm(op, dot_gpu)
