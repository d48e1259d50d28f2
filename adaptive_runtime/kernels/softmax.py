"""``softmax(x)``: softmax over the last axis of an array of any number of dimensions (at
least one); a new array of its shape and dtype.

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

so it is the SIMD arm there (numpy's where torch is not installed).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ..backend import Backend
from ._arrays import host_arm
from ._checks import array_size
from ._compile import compile_count, scalar_jit
from ._families import input_family
from ._gpu import add_gpu_arm, gpu_arm, inputs_on_device, nbytes
from .torch_arms import aten_softmax, numpy_through_torch, torch_installed

if TYPE_CHECKING:
    from ..operations import Registrar

NAME = "softmax"


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


softmax_scalar = host_arm(_softmax_scalar)
softmax_simd = host_arm(_softmax_simd)
softmax_through_torch = host_arm(numpy_through_torch(aten_softmax))


def _softmax_gpu(x: Any) -> Any:
    return x.softmax(dim=-1)


softmax_gpu = gpu_arm(NAME, _softmax_gpu, result_bytes=nbytes, workspace=1.0)


def register(rt: Registrar) -> None:
    op = rt.register(NAME, size=array_size(NAME), kind="vector",
                     on_device=inputs_on_device,
                     family=input_family)
    op.add_implementation(Backend.SCALAR, softmax_scalar,
                          compile_count=compile_count(_softmax_rows))
    if torch_installed():  # ATen's one-pass softmax on the array's memory (see the docstring)
        op.add_implementation(Backend.SIMD, softmax_through_torch, warm_up=True,
                              threads="torch", needs="torch")
        # (numpy's four passes: ahead of ATen on small rows, where ATen's call costs more)
        op.add_implementation(Backend.SIMD, softmax_simd, name="numpy")
    else:
        op.add_implementation(Backend.SIMD, softmax_simd)
    add_gpu_arm(op, softmax_gpu)
