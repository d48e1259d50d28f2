"""``softmax(x)``: softmax over the last axis of an array of any number of dimensions (at
least one); a new array of its shape and dtype. Its gradient, ``softmax.backward(g, y)`` (``y``
the softmax): ``y * (g - sum(g * y))`` per row, an adaptive operation of its own. Both are
declared here, in one record each (see ``record``): every family's implementations, the
gradients torch autograd runs, the ``torch.compile`` custom operators.

Numerically stable: each row's maximum is subtracted before ``exp``, so large inputs do not
overflow. SCALAR: a numba loop over the rows (``x`` as ``(-1, last)``): max, ``exp`` and sum
(the sum in float64), divide. SIMD: numpy (``max``, ``exp`` in place, ``sum``, ``/=``).

SIMD variants measured on the development machine (2 cores, AVX-512, shared and noisy;
microseconds, min of repeats after the warm-up compile; a second run moved figures by up to
~40% and picked the same winners):

    dtype    shape          numpy    numba simd_jit (prange over rows)
    float64  (1000,)          5.8        7.9
    float64  (100000,)      167        558
    float64  (100, 1000)    213        360
    float64  (1000000,)    2085       5390
    float64  (1000, 1000)  2526       3998
    float32  (1000,)          5.2        5.9
    float32  (100000,)       90       384
    float32  (100, 1000)    141       219
    float32  (1000000,)    1053       4103
    float32  (1000, 1000)  1330       2652

numpy beat numba at every size: its ``exp`` is vectorised (AVX-512/AVX2), while numba calls
libm's ``exp`` per element (no SVML here) — two threads do not make up for that, and a single
row gets no threads at all. Where torch is installed, ATen's softmax runs on the array's memory
(``torch_arms.numpy_through_torch``): one fused, threaded pass, where numpy makes four
(rows of 64, microseconds, same machine, a later session):

    dtype    n           numpy     ATen through torch.from_numpy
    float32  1,024          9.6         8.1
    float32  16,384        58.4        14.7
    float32  1,048,576  5,668         801
    float64  16,384       209          33.9
    float64  1,048,576 11,802       2,195

so it is the SIMD arm there (numpy's where torch is not installed). Torch tensors run ATen's
softmax (SIMD) and its backward kernel, JAX arrays ``jax.nn.softmax`` jitted (``jax_arms``),
and numba's loops compete on both (``_families``).

On JAX arrays (``jax_arms``, which says how these were measured; float32, microseconds;
"jit": the SIMD arm, "numba": the SCALAR arm, "numpy": the numpy family's SIMD arm):

    operation            shape                   jit  jit sync    numba    numpy
    softmax              (64, 16)               13.2      17.8     20.3      128
    softmax              (64, 1024)              195      80.7      447      157
    softmax              (1024, 1024)            734       749    5,495      866
    softmax.backward     (64, 1024)              231      63.6      119     55.9
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..backend import Backend
from ._arrays import host_arm
from ._checks import array_size, same_shape_size
from ._compile import scalar_jit
from ._gpu import gpu_arm, nbytes
from ._jax_numpy import jax_libraries, upcast
from .record import CustomOp, HostArm, OperationRecord, Run, TorchModule
from .torch_arms import numpy_through_torch, torch_modules

__all__ = ["SOFTMAX", "SOFTMAX_BACKWARD"]

NAME = "softmax"
BACKWARD = NAME + ".backward"


# --------------------------------------------------------------------------- forward


@scalar_jit
def _softmax_rows(x: Any, out: Any) -> None:
    for r in range(x.shape[0]):
        top = x[r, 0]
        for j in range(1, x.shape[1]):
            if x[r, j] > top:
                top = x[r, j]
        total = 0.0
        for j in range(x.shape[1]):
            e = math.exp(x[r, j] - top)
            out[r, j] = e
            total += e
        for j in range(x.shape[1]):
            out[r, j] = out[r, j] / total


def _softmax_scalar(x: np.ndarray) -> np.ndarray:
    rows = np.ascontiguousarray(x).reshape(-1, x.shape[-1])
    out = np.empty(rows.shape, dtype=x.dtype)
    _softmax_rows(rows, out)
    return out.reshape(x.shape)


def _softmax_simd(x: np.ndarray) -> np.ndarray:
    out = x - x.max(axis=-1, keepdims=True)
    np.exp(out, out=out)
    out /= out.sum(axis=-1, keepdims=True)
    return out


def aten_softmax(x: Any) -> Any:
    return torch_modules()[0].softmax(x, -1)


def jnp_softmax(x: Any) -> Any:
    return jax_libraries()[0].nn.softmax(x, axis=-1)


def _softmax_gpu(x: Any) -> Any:
    return x.softmax(dim=-1)


softmax_scalar = host_arm(_softmax_scalar)
softmax_simd = host_arm(_softmax_simd)
softmax_through_torch = host_arm(numpy_through_torch(aten_softmax))
softmax_gpu = gpu_arm(NAME, _softmax_gpu, result_bytes=nbytes, workspace=1.0)


def _gradients(run: Run) -> Any:
    """The input's gradient from the output's: the adaptive ``softmax.backward``."""

    def softmax(_inputs: tuple[Any, ...], out: Any, g: Any) -> tuple[Any, ...]:
        return (run(BACKWARD, g, out),)

    return softmax


def _functional(call: Run) -> Any:
    def softmax(x: Any, dim: int = -1, *, runtime: Any = None) -> Any:
        """Softmax over ``dim`` (computed over the last axis, ``dim`` moved there and back)."""
        last = dim in (-1, x.ndim - 1)
        if not last:
            x = x.movedim(dim, -1)
        out = call(runtime, NAME, (x,))
        return out if last else out.movedim(-1, dim)

    return softmax


# --------------------------------------------------------------------------- backward


@scalar_jit
def _backward_rows(g: Any, y: Any, out: Any) -> None:
    for r in range(y.shape[0]):
        dot = 0.0
        for j in range(y.shape[1]):
            dot += g[r, j] * y[r, j]
        for j in range(y.shape[1]):
            out[r, j] = y[r, j] * (g[r, j] - dot)


def _backward_scalar(g: np.ndarray, y: np.ndarray) -> np.ndarray:
    rows = np.ascontiguousarray(y).reshape(-1, y.shape[-1])
    out = np.empty(rows.shape, dtype=y.dtype)
    _backward_rows(np.ascontiguousarray(g).reshape(rows.shape), rows, out)
    return out.reshape(y.shape)


def _backward_simd(g: np.ndarray, y: np.ndarray) -> np.ndarray:
    return y * (g - (g * y).sum(axis=-1, keepdims=True))


def aten_softmax_backward(g: Any, y: Any) -> Any:
    return torch_modules()[0].ops.aten._softmax_backward_data(g, y, -1, y.dtype)


def jnp_softmax_backward(g: Any, y: Any) -> Any:
    gf, yf = upcast(g), upcast(y)
    return (yf * (gf - (gf * yf).sum(axis=-1, keepdims=True))).astype(y.dtype)


# --------------------------------------------------------------------------- records

SOFTMAX_BACKWARD = OperationRecord(
    name=BACKWARD, kind="vector", size=same_shape_size(BACKWARD), is_backward=True,
    host=(HostArm(Backend.SCALAR, host_arm(_backward_scalar), kernel=_backward_rows),
          HostArm(Backend.SIMD, host_arm(_backward_simd))),
    aten=aten_softmax_backward, jnp=jnp_softmax_backward,
    custom_op=CustomOp("(Tensor g, Tensor y) -> Tensor"))

SOFTMAX = OperationRecord(
    name=NAME, kind="vector", size=array_size(NAME),
    host=(HostArm(Backend.SCALAR, softmax_scalar, kernel=_softmax_rows),
          # ATen's one-pass softmax on the array's memory (see the docstring) ...
          HostArm(Backend.SIMD, softmax_through_torch, warm_up=True, threads="torch",
                  needs="torch", when="torch"),
          # ... and numpy's four passes: ahead of ATen on small rows, where ATen's call
          # costs more
          HostArm(Backend.SIMD, softmax_simd, name="numpy", when="torch"),
          HostArm(Backend.SIMD, softmax_simd, when="no torch")),
    gpu=softmax_gpu, aten=aten_softmax, jnp=jnp_softmax, jax_one_array=True,
    gradients=_gradients, backward_needs="output", backward=SOFTMAX_BACKWARD,
    custom_op=CustomOp("(Tensor x) -> Tensor", functional=_functional, module=TorchModule(
        "Softmax", why_not=lambda m: "dim=None (implicit)" if m.dim is None else None,
        reroute=lambda m, x: None if m.dim in (-1, x.ndim - 1) else (m.dim,),
        doc="``nn.Softmax(dim)`` whose forward runs the adaptive :func:`softmax`.")),
    autocast=True, arity=1,
    doc="Softmax over the last axis (max subtracted first), on the arm the default runtime "
        "picks.")
