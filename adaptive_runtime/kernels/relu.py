"""``relu(x)``: elementwise ``max(x, 0)`` of an array of any shape; a new array of its shape and
dtype. NaN stays NaN on the SCALAR arm, as in torch; the SIMD arm's fastmath assumes finite
input — it keeps NaN on the development machine too. Its gradient, ``relu.backward(g, x)``:
``g`` where ``x > 0``, else 0 — an adaptive operation of its own. Both are declared here, one
record each (see ``record``).

SCALAR: a numba loop over the flattened array. SIMD: the same loop compiled by ``simd_jit``
(fastmath, ``prange``: threaded, vectorised), and numpy's ``maximum`` as the variant
``numpy``. Measured on the development machine (2 cores, AVX-512, shared and noisy;
microseconds, min of repeats after the warm-up compile; a second run moved figures by up to
~40% and picked the same winners):

    dtype    n           numpy (np.maximum)   numba simd_jit
    float64  1,000          1.3                  3.5
    float64  100,000       64.9                 13.8
    float64  1,000,000    650                  114
    float32  1,000          2.2                  3.4
    float32  100,000       52.8                  8.2
    float32  1,000,000    477                   59.6

numba is the SIMD arm: 4-8x faster from 1e5 up (numpy wins at ~1e3, where starting the threads
costs more than the work). Torch tensors run ATen's relu and ``threshold_backward``, JAX arrays
``jax.nn.relu`` jitted; GPU: ``clamp_min`` (a numba CUDA kernel where torch has no CUDA).

On JAX arrays (``jax_arms``, which says how these were measured; float32, microseconds;
"jit": the SIMD arm, "numba": the SCALAR arm, "numpy": the numpy family's SIMD arm):

    operation            shape                   jit  jit sync    numba    numpy
    relu                 1,000,000               157       220      221      131
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import Backend
from ._arrays import host_arm
from ._checks import array_size, same_shape_size
from ._compile import prange, scalar_jit, simd_jit
from ._gpu import gpu_arm, nbytes
from ._jax_numpy import jax_libraries
from ._loops import apply_flat, flat_pair
from .record import CustomOp, HostArm, OperationRecord, Run, TorchModule
from .torch_arms import torch_modules

__all__ = ["RELU", "RELU_BACKWARD"]

NAME = "relu"
BACKWARD = NAME + ".backward"


@scalar_jit
def _relu_loop(x: Any, out: Any) -> None:
    for i in range(x.shape[0]):
        v = x[i]
        out[i] = 0.0 if v < 0.0 else v


@simd_jit
def _relu_parallel(x: Any, out: Any) -> None:
    for i in prange(x.shape[0]):
        v = x[i]
        out[i] = 0.0 if v < 0.0 else v


def _relu_scalar(x: np.ndarray) -> np.ndarray:
    return apply_flat(_relu_loop, x)


def _relu_simd(x: np.ndarray) -> np.ndarray:
    return apply_flat(_relu_parallel, x)


def _relu_numpy(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, x.dtype.type(0))  # (NaN stays NaN, as on the SCALAR arm)


def _relu_gpu(x: Any) -> Any:
    return x.clamp_min(0)


def _relu_numba(x: Any) -> Any:
    from ._cuda_kernels import launch_relu

    return launch_relu(x.reshape(-1)).reshape(x.shape)


def aten_relu(x: Any) -> Any:
    return torch_modules()[0].relu(x)


def jnp_relu(x: Any) -> Any:
    return jax_libraries()[0].nn.relu(x)


def _gradients(run: Run) -> Any:
    def relu(inputs: tuple[Any, ...], _out: Any, g: Any) -> tuple[Any, ...]:
        return (run(BACKWARD, g, inputs[0]),)

    return relu


@scalar_jit
def _backward_loop(g: Any, x: Any, out: Any) -> None:
    for i in range(x.shape[0]):
        out[i] = g[i] if x[i] > 0.0 else 0.0


def _backward_simd(g: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, g, np.zeros((), dtype=g.dtype))


def aten_relu_backward(g: Any, x: Any) -> Any:
    return torch_modules()[0].ops.aten.threshold_backward(g, x, 0)


def jnp_relu_backward(g: Any, x: Any) -> Any:
    jnp = jax_libraries()[1]
    return jnp.where(x > 0, g, jnp.zeros((), dtype=g.dtype))


RELU_BACKWARD = OperationRecord(
    name=BACKWARD, kind="elementwise", size=same_shape_size(BACKWARD), is_backward=True,
    host=(HostArm(Backend.SCALAR, host_arm(flat_pair(_backward_loop)), kernel=_backward_loop),
          HostArm(Backend.SIMD, host_arm(_backward_simd))),
    aten=aten_relu_backward, jnp=jnp_relu_backward,
    custom_op=CustomOp("(Tensor g, Tensor x) -> Tensor"))

RELU = OperationRecord(
    name=NAME, kind="elementwise", size=array_size(NAME),
    host=(HostArm(Backend.SCALAR, host_arm(_relu_scalar), kernel=_relu_loop),
          HostArm(Backend.SIMD, host_arm(_relu_simd), threads="numba", kernel=_relu_parallel),
          # numpy's own: no threads to start, it wins at ~1e3 (see the table above); the
          # threaded loop is 4-8x faster from 1e5 up
          HostArm(Backend.SIMD, host_arm(_relu_numpy), name="numpy", warm_up=True)),
    gpu=gpu_arm(NAME, _relu_gpu, result_bytes=nbytes, numba_kernel=_relu_numba),
    aten=aten_relu, aten_builtin=lambda torch: torch.relu, jnp=jnp_relu, jax_one_array=True,
    gradients=_gradients, backward=RELU_BACKWARD,
    custom_op=CustomOp("(Tensor x) -> Tensor",
                       doc="``max(x, 0)`` elementwise (never in place).",
                       module=TorchModule("ReLU", doc=(
                           "``nn.ReLU`` whose forward runs the adaptive :func:`relu` (out of "
                           "place, even when the module says ``inplace``: the result is the "
                           "same tensor values)."))),
    autocast=True, arity=1,
    doc="Elementwise ``max(x, 0)``, on the arm the default runtime picks.")
