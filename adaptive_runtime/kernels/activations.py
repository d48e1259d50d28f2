"""``relu(x)`` and ``gelu(x)``: elementwise activations of an array of any shape; a new array
of its shape and dtype.

``relu``: ``max(x, 0)`` (NaN stays NaN on the SCALAR arm, as in torch; the SIMD arm's
fastmath assumes finite input — it keeps NaN on the development machine too). ``gelu``: the
exact (erf) form, torch's default, ``0.5 * x * (1 + erf(x / sqrt(2)))``, computed as
``0.5 * x * erfc(-x / sqrt(2))`` — the same function without the cancellation of ``1 + erf``
for negative ``x`` — in float64 (float32 input is rounded once, at the end).

SCALAR: numba loops over the flattened array. SIMD: the same loops compiled by ``simd_jit``
(fastmath, ``prange``: threaded; relu vectorises, gelu calls libm's ``erfc`` per element).

SIMD variants measured on the development machine (2 cores, AVX-512, shared and noisy;
microseconds, min of repeats after the warm-up compile; a second run moved figures by up to
~40% and picked the same winners):

    op    dtype    n           numpy                 numba simd_jit
    relu  float64  1,000          1.3 (np.maximum)      3.5
    relu  float64  100,000       64.9                  13.8
    relu  float64  1,000,000    650                   114
    relu  float32  1,000          2.2                   3.4
    relu  float32  100,000       52.8                   8.2
    relu  float32  1,000,000    477                    59.6
    gelu  float64  1,000         15.5 (scipy erfc)      6.3
    gelu  float64  100,000     1324                   541
    gelu  float64  1,000,000  15288                  5955
    gelu  float32  1,000         15.2                   5.8
    gelu  float32  100,000     1367                   573
    gelu  float32  1,000,000  14116                  6718

numba is the SIMD arm of relu: 4-8x faster from 1e5 up (numpy wins at ~1e3, where starting
the threads costs more than the work). numpy has no erf, so its gelu needs scipy, which is not a
dependency of this package (it was measured where installed); numba calls libm's ``erfc`` per
element. Where torch is installed, ATen's vectorised gelu runs on the array's memory instead
(``torch_arms.numpy_through_torch``), far faster from 1e4 up (float32, microseconds, same
machine, a later session):

    n           numba simd_jit   ATen through torch.from_numpy
    1,024             25.0          26.8
    16,384           240            36.7
    262,144        3,436           177
    1,048,576     13,847           698

(smaller calls go to the SCALAR loop, which the runtime learns is faster there).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from .._imported import imported
from ..backend import Backend
from ._arrays import host_arm
from ._checks import array_size
from ._compile import compile_count, prange, scalar_jit, simd_jit
from ._families import input_family
from ._gpu import add_gpu_arm, gpu_arm, inputs_on_device, nbytes
from .torch_arms import aten_gelu, numpy_through_torch, torch_installed

if TYPE_CHECKING:
    from ..operations import Registrar

RELU = "relu"
GELU = "gelu"
NAMES = (RELU, GELU)

_MINUS_SQRT1_2 = -1.0 / math.sqrt(2.0)


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


def _apply(kernel: Any, x: np.ndarray) -> np.ndarray:
    out = np.empty(x.shape, dtype=x.dtype)
    kernel(np.ascontiguousarray(x).reshape(-1), out.reshape(-1))
    return out


def _relu_scalar(x: np.ndarray) -> np.ndarray:
    return _apply(_relu_loop, x)


def _relu_simd(x: np.ndarray) -> np.ndarray:
    return _apply(_relu_parallel, x)


def _gelu_scalar(x: np.ndarray) -> np.ndarray:
    return _apply(_gelu_loop, x)


def _gelu_simd(x: np.ndarray) -> np.ndarray:
    return _apply(_gelu_parallel, x)


relu_scalar = host_arm(_relu_scalar)
relu_simd = host_arm(_relu_simd)
gelu_scalar = host_arm(_gelu_scalar)
gelu_simd = host_arm(_gelu_simd)


def _relu_gpu(x: Any) -> Any:
    return x.clamp_min(0)


def _relu_numba(x: Any) -> Any:
    from ._cuda_kernels import launch_relu

    return launch_relu(x.reshape(-1)).reshape(x.shape)


def _gelu_gpu(x: Any) -> Any:
    return imported("torch").nn.functional.gelu(x)


def _relu_numpy(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, x.dtype.type(0))  # (NaN stays NaN, as on the SCALAR arm)


relu_numpy = host_arm(_relu_numpy)
gelu_through_torch = host_arm(numpy_through_torch(aten_gelu))
relu_gpu = gpu_arm(RELU, _relu_gpu, result_bytes=nbytes, numba_kernel=_relu_numba)
gelu_gpu = gpu_arm(GELU, _gelu_gpu, result_bytes=nbytes)


def register(rt: Registrar) -> None:
    """Register ``relu`` and ``gelu``."""
    relu = rt.register(RELU, size=array_size(RELU), kind="elementwise",
                     on_device=inputs_on_device,
                     family=input_family)
    relu.add_implementation(Backend.SCALAR, relu_scalar, compile_count=compile_count(_relu_loop))
    relu.add_implementation(Backend.SIMD, relu_simd, threads="numba",
                            compile_count=compile_count(_relu_parallel))
    # numpy's own: no threads to start, it wins at ~1e3 (see the table above); the threaded
    # loop is 4-8x faster from 1e5 up
    relu.add_implementation(Backend.SIMD, relu_numpy, name="numpy", warm_up=True)
    gelu = rt.register(GELU, size=array_size(GELU), kind="elementwise",
                     on_device=inputs_on_device,
                     family=input_family)
    gelu.add_implementation(Backend.SCALAR, gelu_scalar, compile_count=compile_count(_gelu_loop))
    if torch_installed():  # ATen's vectorised erf on the array's memory (see the docstring)
        gelu.add_implementation(Backend.SIMD, gelu_through_torch, warm_up=True, threads="torch",
                                needs="torch")
        # (the threaded libm loop ties ATen at ~1e3 and loses 20x at 1e6: timed, not guessed)
        gelu.add_implementation(Backend.SIMD, gelu_simd, name="numba", threads="numba",
                                compile_count=compile_count(_gelu_parallel))
    else:
        gelu.add_implementation(Backend.SIMD, gelu_simd, threads="numba",
                                compile_count=compile_count(_gelu_parallel))
    add_gpu_arm(relu, relu_gpu)
    add_gpu_arm(gelu, gelu_gpu)
