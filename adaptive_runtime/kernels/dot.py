"""``dot(a, b)``: inner product of two equal-length 1-D arrays.

SCALAR: a sequential numba loop (exact left-to-right summation order). SIMD: ``numpy.dot``
(BLAS, vectorised and unrolled).

On JAX arrays (``jax_arms``, which says how these were measured; float32, microseconds;
"jit": the SIMD arm, "numba": the SCALAR arm, "numpy": the numpy family's SIMD arm):

    operation            shape                   jit  jit sync    numba    numpy
    dot                  1,000                  25.5      18.6     17.5      1.5
    dot                  1,000,000               235       247    1,039      121
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import Backend
from ._arrays import host_arm
from ._checks import vector_pair_size
from ._compile import scalar_jit
from ._gpu import gpu_arm
from ._jax_numpy import jax_libraries
from .record import HostArm, OperationRecord, Run
from .torch_arms import torch_modules

__all__ = ["DOT"]

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


def aten_dot(a: Any, b: Any) -> Any:
    return torch_modules()[0].dot(a, b)


def jnp_dot(a: Any, b: Any) -> Any:
    _j, jnp, _lax, highest, _t = jax_libraries()
    return jnp.dot(a, b, precision=highest)


def _gradients(_run: Run) -> Any:
    def dot(inputs: tuple[Any, ...], _out: Any, g: Any) -> tuple[Any, ...]:
        a, b = inputs
        return g * b, g * a

    return dot


DOT = OperationRecord(
    name=NAME, kind="vector", size=vector_pair_size(NAME),
    host=(HostArm(Backend.SCALAR, dot_scalar, kernel=_dot_loop),
          HostArm(Backend.SIMD, dot_simd, threads="blas")),
    gpu=dot_gpu, aten=aten_dot, aten_builtin=lambda torch: torch.dot, jnp=jnp_dot,
    gradients=_gradients, arity=2,
    doc="Inner product of two equal-length 1-D arrays, on the arm the default runtime picks.")
