"""``linear(x, weight[, bias])``: ``x @ weight.T + bias``, what ``torch.nn.Linear`` computes.

``x`` is ``(..., in)``, ``weight`` ``(out, in)``, ``bias`` ``(out,)`` or ``None``; the result is
``(..., out)`` in x's dtype. Its size is the multiply-adds, ``x.size * out``.

SCALAR: a numba loop per output element over ``in``, accumulating in the input dtype, weight
rows read contiguously. SIMD: ``x @ weight.T`` (BLAS) plus the bias — for numpy arrays; torch
tensors and JAX arrays run their own library's call (``torch.nn.functional.linear``, one
``addmm``), see ``torch_arms``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .._imported import imported
from ..backend import Backend
from ._arrays import host_arm
from ._checks import linear_size
from ._compile import compile_count, scalar_jit
from ._families import input_family
from ._gpu import add_gpu_arm, gpu_arm, inputs_on_device, itemsize
from .layer_norm import NO_ARRAY

if TYPE_CHECKING:
    from ..operations import Registrar

NAME = "linear"


@scalar_jit
def _linear_rows(x: Any, weight: Any, bias: Any, out: Any) -> None:
    rows, n_in = x.shape
    n_out = weight.shape[0]
    shifted = bias.shape[0] > 0  # (empty: no bias)
    for r in range(rows):
        for o in range(n_out):
            acc = x[r, 0] * weight[o, 0]
            for i in range(1, n_in):
                acc += x[r, i] * weight[o, i]
            out[r, o] = acc + bias[o] if shifted else acc


def _linear_scalar(x: np.ndarray, weight: np.ndarray,
                   bias: np.ndarray | None = None) -> np.ndarray:
    rows = np.ascontiguousarray(x).reshape(-1, x.shape[-1])
    out = np.empty((rows.shape[0], weight.shape[0]), dtype=x.dtype)
    _linear_rows(rows, np.ascontiguousarray(weight),
                 NO_ARRAY[x.dtype.char] if bias is None else np.ascontiguousarray(bias), out)
    return out.reshape(*x.shape[:-1], weight.shape[0])


def _linear_simd(x: np.ndarray, weight: np.ndarray,
                 bias: np.ndarray | None = None) -> np.ndarray:
    out = x @ weight.T
    if bias is not None:
        out += bias
    return out


linear_scalar = host_arm(_linear_scalar)
linear_simd = host_arm(_linear_simd)


def _linear_gpu(x: Any, weight: Any, bias: Any = None) -> Any:
    return imported("torch").nn.functional.linear(x, weight, bias)


linear_gpu = gpu_arm(NAME, _linear_gpu, result_bytes=lambda x, weight, *_: (
    x.numel() if hasattr(x, "numel") else x.size) // x.shape[-1] * weight.shape[0] * itemsize(x))


def register(rt: Registrar) -> None:
    """Register ``linear``."""
    op = rt.register(NAME, size=linear_size(NAME), kind="matrix", on_device=inputs_on_device,
                     family=input_family)
    op.add_implementation(Backend.SCALAR, linear_scalar,
                          compile_count=compile_count(_linear_rows))
    op.add_implementation(Backend.SIMD, linear_simd, threads="blas")
    add_gpu_arm(op, linear_gpu)
