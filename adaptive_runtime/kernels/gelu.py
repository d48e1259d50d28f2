"""``gelu(x)``: the exact (erf) GELU of an array of any shape, torch's default, ``0.5 * x * (1 +
erf(x / sqrt(2)))``; a new array of its shape and dtype. Computed as ``0.5 * x * erfc(-x /
sqrt(2))`` — the same function without the cancellation of ``1 + erf`` for negative ``x`` — in
float64 (float32 input is rounded once, at the end). Its gradient, ``gelu.backward(g, x)``:
``g * (Phi(x) + x * phi(x))``, an adaptive operation of its own. Both are declared here, one
record each (see ``record``).

SCALAR: a numba loop over the flattened array. SIMD: the same loop compiled by ``simd_jit``
(fastmath, ``prange``: threaded; it calls libm's ``erfc`` per element). Measured on the
development machine (2 cores, AVX-512, shared and noisy; microseconds, min of repeats after
the warm-up compile):

    dtype    n           numpy (scipy erfc)   numba simd_jit
    float64  1,000         15.5                  6.3
    float64  100,000     1324                  541
    float64  1,000,000  15288                 5955
    float32  1,000         15.2                  5.8
    float32  100,000     1367                  573
    float32  1,000,000  14116                 6718

numpy has no erf, so its gelu needs scipy, which is not a dependency of this package (it was
measured where installed). Where torch is installed, ATen's vectorised gelu runs on the array's
memory instead (``torch_arms.numpy_through_torch``), far faster from 1e4 up (float32,
microseconds, same machine, a later session):

    n           numba simd_jit   ATen through torch.from_numpy
    1,024             25.0          26.8
    16,384           240            36.7
    262,144        3,436           177
    1,048,576     13,847           698

(smaller calls go to the SCALAR loop, which the runtime learns is faster there). Its backward:
numba loops (numpy lacks ``erfc``). Torch tensors run ATen's gelu and ``gelu_backward``, JAX
arrays ``jax.nn.gelu`` jitted.

On JAX arrays (``jax_arms``, which says how these were measured; float32, microseconds;
"jit": the SIMD arm, "numba": the SCALAR arm, "numpy": the numpy family's SIMD arm):

    operation            shape                   jit  jit sync    numba    numpy
    gelu                 1,000                  14.7      19.1     32.8      180
    gelu                 100,000                 202       122    1,552      226
    gelu                 1,000,000               925     1,001   15,173      840
    gelu.backward        1,000,000             1,520     1,442   24,079   25,991
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._imported import imported
from ..backend import Backend
from ._arrays import host_arm
from ._checks import array_size, same_shape_size
from ._compile import prange, scalar_jit, simd_jit
from ._gpu import gpu_arm, nbytes
from ._jax_numpy import jax_libraries, upcast
from ._loops import apply_flat, flat_pair
from .record import CustomOp, HostArm, OperationRecord, Run, TorchModule
from .torch_arms import numpy_through_torch, torch_modules

__all__ = ["GELU", "GELU_BACKWARD"]

NAME = "gelu"
BACKWARD = NAME + ".backward"

_MINUS_SQRT1_2 = -1.0 / math.sqrt(2.0)
_SQRT1_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


@scalar_jit
def _gelu_loop(x: Any, out: Any) -> None:
    for i in range(x.shape[0]):
        v = x[i]
        out[i] = 0.5 * v * math.erfc(v * _MINUS_SQRT1_2)


@simd_jit
def _gelu_parallel(x: Any, out: Any) -> None:
    for i in prange(x.shape[0]):
        v = x[i]
        out[i] = 0.5 * v * math.erfc(v * _MINUS_SQRT1_2)


def _gelu_scalar(x: np.ndarray) -> np.ndarray:
    return apply_flat(_gelu_loop, x)


def _gelu_simd(x: np.ndarray) -> np.ndarray:
    return apply_flat(_gelu_parallel, x)


def _gelu_gpu(x: Any) -> Any:
    return imported("torch").nn.functional.gelu(x)


def aten_gelu(x: Any) -> Any:
    return torch_modules()[1].gelu(x)


def jnp_gelu(x: Any) -> Any:
    return jax_libraries()[0].nn.gelu(x, approximate=False)


gelu_simd = host_arm(_gelu_simd)
gelu_through_torch = host_arm(numpy_through_torch(aten_gelu))


def _gradients(run: Run) -> Any:
    def gelu(inputs: tuple[Any, ...], _out: Any, g: Any) -> tuple[Any, ...]:
        return (run(BACKWARD, g, inputs[0]),)

    return gelu


def _gelu_grad(g: Any, x: Any, out: Any) -> None:
    for i in prange(x.shape[0]):
        v = x[i]
        out[i] = g[i] * (0.5 * math.erfc(v * _MINUS_SQRT1_2)
                         + v * _INV_SQRT_2PI * math.exp(-0.5 * v * v))


_backward_loop = scalar_jit(_gelu_grad)
_backward_parallel = simd_jit(_gelu_grad)


def aten_gelu_backward(g: Any, x: Any) -> Any:
    return torch_modules()[0].ops.aten.gelu_backward(g, x)


def jnp_gelu_backward(g: Any, x: Any) -> Any:
    _j, jnp, lax, _h, _t = jax_libraries()
    xf = upcast(x)
    slope = 0.5 * lax.erfc(xf * -_SQRT1_2) + xf * _INV_SQRT_2PI * jnp.exp(-0.5 * xf * xf)
    return (upcast(g) * slope).astype(x.dtype)


GELU_BACKWARD = OperationRecord(
    name=BACKWARD, kind="elementwise", size=same_shape_size(BACKWARD), is_backward=True,
    host=(HostArm(Backend.SCALAR, host_arm(flat_pair(_backward_loop)), kernel=_backward_loop),
          HostArm(Backend.SIMD, host_arm(flat_pair(_backward_parallel)), threads="numba",
                  kernel=_backward_parallel)),
    aten=aten_gelu_backward, jnp=jnp_gelu_backward,
    custom_op=CustomOp("(Tensor g, Tensor x) -> Tensor"))

def _why_not_module(m: Any) -> str | None:
    return None if m.approximate == "none" else f"approximate={m.approximate!r}"


GELU = OperationRecord(
    name=NAME, kind="elementwise", size=array_size(NAME),
    host=(HostArm(Backend.SCALAR, host_arm(_gelu_scalar), kernel=_gelu_loop),
          # ATen's vectorised erf on the array's memory (see the docstring) ...
          HostArm(Backend.SIMD, gelu_through_torch, warm_up=True, threads="torch",
                  needs="torch", when="torch"),
          # ... (the threaded libm loop ties ATen at ~1e3 and loses 20x at 1e6: timed)
          HostArm(Backend.SIMD, gelu_simd, name="numba", threads="numba",
                  kernel=_gelu_parallel, when="torch"),
          HostArm(Backend.SIMD, gelu_simd, threads="numba", kernel=_gelu_parallel,
                  when="no torch")),
    gpu=gpu_arm(NAME, _gelu_gpu, result_bytes=nbytes),
    aten=aten_gelu, aten_builtin=lambda torch: torch.nn.functional.gelu, jnp=jnp_gelu,
    jax_one_array=True, gradients=_gradients, backward=GELU_BACKWARD,
    custom_op=CustomOp("(Tensor x) -> Tensor",
                       doc="Exact (erf) GELU, as ``torch.nn.functional.gelu(x)``.",
                       module=TorchModule("GELU", why_not=_why_not_module, doc=(
                           "``nn.GELU()`` (exact) whose forward runs the adaptive "
                           ":func:`gelu`."))),
    autocast=True, arity=1,
    doc="Elementwise exact (erf) GELU, like torch's default, on the default runtime.")
