"""``add(a, b)``: elementwise sum of two arrays of one shape.

SCALAR: a numba loop over the flattened arrays. SIMD: ``numpy.add``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..backend import Backend
from ._arrays import host_arm
from ._checks import same_shape_size
from ._compile import compile_count, scalar_jit
from ._families import input_family
from ._gpu import add_gpu_arm, gpu_arm, inputs_on_device, nbytes

if TYPE_CHECKING:
    from ..operations import Registrar

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


def register(rt: Registrar) -> None:
    op = rt.register(NAME, size=same_shape_size(NAME), kind="elementwise",
                     on_device=inputs_on_device,
                     family=input_family)
    op.add_implementation(Backend.SCALAR, add_scalar, compile_count=compile_count(_add_loop))
    op.add_implementation(Backend.SIMD, add_simd)
    add_gpu_arm(op, add_gpu)
