"""``sum(x)``: the sum of all elements of an array (any number of dimensions), a scalar of
``x``'s dtype (a numpy scalar for numpy input, a 0-d tensor for torch).

SCALAR: a sequential numba loop (exact left-to-right order, accumulated in the input dtype).
SIMD: a ``simd_jit`` reduction (``prange``: one partial sum per thread, vectorised by
fastmath), accumulated in float64 for float32 input as well.

SIMD variants measured on the development machine (2 cores, AVX-512, shared and noisy;
microseconds, min of repeats after the warm-up compile; a second run moved figures by up to
~40% and picked the same winners):

    dtype    n           numpy.sum   numba simd_jit
    float64  1,000          3.2           2.4
    float64  100,000       26.0           6.2
    float64  1,000,000    202            48.5
    float32  1,000          3.2           2.0
    float32  100,000       24.8           6.0
    float32  1,000,000    153            38.7

numba is the SIMD arm at every size. (A float32 accumulator would take it to 26 µs at 1e6
float32 elements; the float64 one keeps float32 sums accurate, and still beats numpy 4x.)

On JAX arrays (``jax_arms``, which says how these were measured; float32, microseconds;
"jit": the SIMD arm, "numba": the SCALAR arm, "numpy": the numpy family's SIMD arm):

    operation            shape                   jit  jit sync    numba    numpy
    sum                  1,000                  15.7      12.1     16.8      2.6
    sum                  1,000,000               177      88.0    1,000     99.5
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import Backend
from ._arrays import host_arm
from ._checks import array_size
from ._compile import prange, scalar_jit, simd_jit
from ._gpu import gpu_arm
from ._jax_numpy import jax_libraries
from .record import HostArm, OperationRecord, Run

__all__ = ["SUM"]

NAME = "sum"


@scalar_jit
def _sum_loop(x: Any) -> Any:
    acc = x[0]
    for i in range(1, x.shape[0]):
        acc += x[i]
    return acc


@simd_jit
def _sum_parallel(x: Any) -> Any:
    acc = 0.0
    for i in prange(x.shape[0]):
        acc += x[i]
    return acc


def _sum_scalar(x: np.ndarray) -> Any:
    return _sum_loop(np.ascontiguousarray(x).reshape(-1))


def _sum_simd(x: np.ndarray) -> Any:
    return _sum_parallel(np.ascontiguousarray(x).reshape(-1))


sum_scalar = host_arm(_sum_scalar)
sum_simd = host_arm(_sum_simd)
sum_numpy = host_arm(np.sum)  # (pairwise, in the input's dtype)


def _sum_gpu(x: Any) -> Any:
    return x.sum()


sum_gpu = gpu_arm(NAME, _sum_gpu, result_bytes=lambda x: 8)


def aten_sum(x: Any) -> Any:
    return x.sum()


def jnp_sum(x: Any) -> Any:
    return jax_libraries()[1].sum(x)


def _gradients(_run: Run) -> Any:
    def sum_(inputs: tuple[Any, ...], _out: Any, g: Any) -> tuple[Any, ...]:
        return (g.expand_as(inputs[0]),)

    return sum_


SUM = OperationRecord(
    name=NAME, kind="reduction", size=array_size(NAME),
    host=(HostArm(Backend.SCALAR, sum_scalar, kernel=_sum_loop),
          HostArm(Backend.SIMD, sum_simd, kernel=_sum_parallel, threads="numba"),
          HostArm(Backend.SIMD, sum_numpy, name="numpy", warm_up=True)),
    gpu=sum_gpu, aten=aten_sum, jnp=jnp_sum, jax_one_array=True, gradients=_gradients,
    arity=1, doc="Sum of all elements (a scalar of x's dtype), on the arm the default runtime "
                 "picks.")
