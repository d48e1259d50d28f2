"""``add(a, b)``: elementwise sum of two arrays of one shape.

SCALAR: a numba loop over the flattened arrays. SIMD: ``numpy.add``. Torch tensors: ATen's
``torch.add``; JAX arrays: ``jax.numpy.add`` jitted. Its gradients are ``g`` for both inputs.

On JAX arrays (``jax_arms``, which says how these were measured; float32, microseconds;
"jit": the SIMD arm, "numba": the SCALAR arm, "numpy": the numpy family's SIMD arm):

    operation            shape                   jit  jit sync    numba    numpy
    add                  1,000                  13.6      13.6     17.1      1.0
    add                  1,000,000               234       239      265      207
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import Backend
from ._arrays import host_arm
from ._checks import same_shape_size
from ._compile import scalar_jit
from ._gpu import gpu_arm, nbytes
from ._jax_numpy import jax_libraries
from .record import CustomOp, HostArm, OperationRecord, Run
from .torch_arms import torch_modules

__all__ = ["ADD"]

NAME = "add"


@scalar_jit
def _add_loop(a: Any, b: Any, out: Any) -> None:
    for i in range(a.shape[0]):
        out[i] = a[i] + b[i]


def _add_scalar(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.empty(a.shape, dtype=a.dtype)
    _add_loop(np.ascontiguousarray(a).reshape(-1), np.ascontiguousarray(b).reshape(-1),
              out.reshape(-1))
    return out


add_scalar = host_arm(_add_scalar)
add_simd = host_arm(np.add)

def _add_gpu(a: Any, b: Any) -> Any:
    return a + b


def _add_numba(a: Any, b: Any) -> Any:
    from ._cuda_kernels import launch_add

    return launch_add(a.reshape(-1), b.reshape(-1)).reshape(a.shape)


add_gpu = gpu_arm(NAME, _add_gpu, result_bytes=lambda a, b: nbytes(a), numba_kernel=_add_numba)


def aten_add(a: Any, b: Any) -> Any:
    return torch_modules()[0].add(a, b)


def jnp_add(a: Any, b: Any) -> Any:
    return jax_libraries()[1].add(a, b)


def _gradients(_run: Run) -> Any:
    def add(_inputs: tuple[Any, ...], _out: Any, g: Any) -> tuple[Any, ...]:
        return g, g

    return add


ADD = OperationRecord(
    name=NAME, kind="elementwise", size=same_shape_size(NAME),
    host=(HostArm(Backend.SCALAR, add_scalar, kernel=_add_loop),
          HostArm(Backend.SIMD, add_simd)),
    gpu=add_gpu, aten=aten_add, aten_builtin=lambda torch: torch.add, jnp=jnp_add,
    gradients=_gradients,
    custom_op=CustomOp("(Tensor a, Tensor b) -> Tensor",
                       doc="``a + b`` of two tensors of one shape."),
    autocast=True, arity=2,
    doc="Elementwise sum of two equal-shape arrays, on the arm the default runtime picks.")
