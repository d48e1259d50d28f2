"""``linear(x, weight[, bias])``: ``x @ weight.T + bias``, what ``torch.nn.Linear`` computes.

``x`` is ``(..., in)``, ``weight`` ``(out, in)``, ``bias`` ``(out,)`` or ``None``; the result is
``(..., out)`` in x's dtype. Its size is the multiply-adds, ``x.size * out``.

SCALAR: a numba loop per output element over ``in``, accumulating in the input dtype, weight
rows read contiguously. SIMD: ``x @ weight.T`` (BLAS) plus the bias — for numpy arrays; torch
tensors and JAX arrays run their own library's call (``torch.nn.functional.linear``, one
``addmm``), see ``torch_arms``.

On JAX arrays (``jax_arms``, which says how these were measured; float32, microseconds;
"jit": the SIMD arm, "numba": the SCALAR arm, "numpy": the numpy family's SIMD arm):

    operation            shape                   jit  jit sync    numba    numpy
    linear               (8, 64) x (128, 64)    65.6      32.4     79.2      9.4
    linear               (512, 64) x (128, 64)   289       200    2,964      118
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._imported import imported
from ..backend import Backend
from ._arrays import host_arm
from ._checks import linear_size
from ._compile import scalar_jit
from ._gpu import gpu_arm, itemsize
from ._jax_numpy import jax_libraries
from .layer_norm import NO_ARRAY
from .record import CustomOp, HostArm, OperationRecord, Run, TorchModule
from .torch_arms import torch_modules

__all__ = ["LINEAR"]

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


def aten_linear(x: Any, weight: Any, bias: Any = None) -> Any:
    return torch_modules()[1].linear(x, weight, bias)


def jnp_linear(x: Any, weight: Any, bias: Any = None) -> Any:
    _j, jnp, _lax, highest, _t = jax_libraries()
    y = jnp.matmul(x, weight.T, precision=highest)
    return y if bias is None else y + bias


def _jax_call(jit: Any, tracer_in: Any, traced: Any) -> Any:
    plain = jit.plain

    def call(x: Any, weight: Any, bias: Any = None) -> Any:
        if tracer_in((x, weight, bias)):
            return traced(plain, (x, weight, bias))
        return (jit.fn or jit.get())(x, weight, bias)

    return call


def _gradients_with(contiguous: bool) -> Any:
    def gradients(run: Run) -> Any:
        """Two matmuls (adaptive: ``run``) and a sum; under ``torch.compile`` the transposed
        gradient made contiguous for the operator."""

        def linear(inputs: tuple[Any, ...], _out: Any, g: Any) -> tuple[Any, ...]:
            x, weight = inputs[0], inputs[1]
            bias = inputs[2] if len(inputs) > 2 else None
            rows = x.reshape(-1, x.shape[-1])
            g_rows = g.reshape(-1, weight.shape[0])
            dx = run("matmul", g_rows, weight).reshape(x.shape)
            g_t = g_rows.t().contiguous() if contiguous else g_rows.t()
            dweight = run("matmul", g_t, rows)
            dbias = g_rows.sum(0) if bias is not None else None
            return (dx, dweight, dbias)[:len(inputs)]

        return linear

    return gradients


def _fake(x: Any, weight: Any, bias: Any) -> Any:
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def _functional(call: Run) -> Any:
    def linear(x: Any, weight: Any, bias: Any = None, *, runtime: Any = None) -> Any:
        """``x @ weight.T + bias``, as ``torch.nn.functional.linear``."""
        return call(runtime, NAME, (x, weight, bias))

    return linear


def _public(runtime: Any) -> Any:
    def linear(x: Any, weight: Any, bias: Any = None) -> Any:
        """``x @ weight.T + bias`` (x ``(..., in)``, weight ``(out, in)``), as ``nn.Linear``."""
        return runtime().run(NAME, x, weight, bias)

    return linear


LINEAR = OperationRecord(
    name=NAME, kind="matrix", size=linear_size(NAME),
    host=(HostArm(Backend.SCALAR, linear_scalar, kernel=_linear_rows),
          HostArm(Backend.SIMD, linear_simd, threads="blas")),
    gpu=linear_gpu, aten=aten_linear, aten_builtin=lambda torch: torch.nn.functional.linear,
    jnp=jnp_linear, jax_call=_jax_call, gradients=_gradients_with(False),
    custom_op=CustomOp("(Tensor x, Tensor weight, Tensor? bias) -> Tensor", fake=_fake,
                       gradients=_gradients_with(True), functional=_functional,
                       module=TorchModule("Linear", weights=True, doc=(
                           "``nn.Linear`` whose forward runs the adaptive :func:`linear`."))),
    autocast=True, public=_public)
