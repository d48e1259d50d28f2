"""Backward operations: the gradients of ``relu``, ``gelu`` and ``layer_norm`` (the other
operations' are declared beside their forward, in their records).

Each is an adaptive operation of its own (``"gelu.backward"``, ...), chosen, timed and learned
like any other: the backward pass of a numba forward arm under torch autograd runs through them
(``torch_arms``). Inputs are the upstream gradient ``g`` and what the forward saved:

- ``relu.backward(g, x)``: ``g`` where ``x > 0``, else 0;
- ``gelu.backward(g, x)``: ``g * (Phi(x) + x * phi(x))`` (exact GELU's derivative);
- ``layer_norm.backward(g, x[, weight[, eps]])``: the gradient of x, and with a weight the
  gradients of weight and bias too, as a tuple ``(dx, dweight, dbias)``.

SCALAR: numba loops; SIMD (numpy arrays): numpy, or numba ``fastmath`` where numpy lacks the
function (``erfc``); torch tensors run ATen's own backward kernels (``torch_arms``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ..backend import Backend
from ._arrays import host_arm
from ._checks import same_shape_size
from ._compile import compile_count, prange, scalar_jit, simd_jit
from ._families import input_family
from .layer_norm import EPS, NO_ARRAY, row_moments

if TYPE_CHECKING:
    from ..operations import Registrar

RELU = "relu.backward"
GELU = "gelu.backward"
LAYER_NORM = "layer_norm.backward"
NAMES = (RELU, GELU, LAYER_NORM)

_MINUS_SQRT1_2 = -1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


@scalar_jit
def _relu_loop(g: Any, x: Any, out: Any) -> None:
    for i in range(x.shape[0]):
        out[i] = g[i] if x[i] > 0.0 else 0.0


def _gelu_grad(g: Any, x: Any, out: Any) -> None:
    for i in prange(x.shape[0]):
        v = x[i]
        out[i] = g[i] * (0.5 * math.erfc(v * _MINUS_SQRT1_2)
                         + v * _INV_SQRT_2PI * math.exp(-0.5 * v * v))


_gelu_loop = scalar_jit(_gelu_grad)
_gelu_parallel = simd_jit(_gelu_grad)


@scalar_jit
def _layer_norm_rows(g: Any, x: Any, weight: Any, eps: float, dx: Any, dweight: Any,
                     dbias: Any) -> None:
    rows, n = x.shape
    scaled = weight.shape[0] > 0
    for r in range(rows):
        mean, inv = row_moments(x, r, eps)
        # dx = inv * (gw - mean(gw) - xhat * mean(gw * xhat)), gw = g * weight
        sum_gw = 0.0
        sum_gw_xhat = 0.0
        for j in range(n):
            xhat = (x[r, j] - mean) * inv
            gw = g[r, j] * weight[j] if scaled else g[r, j]
            sum_gw += gw
            sum_gw_xhat += gw * xhat
            if scaled:
                dweight[j] += g[r, j] * xhat
                dbias[j] += g[r, j]
        mean_gw = sum_gw / n
        mean_gw_xhat = sum_gw_xhat / n
        for j in range(n):
            xhat = (x[r, j] - mean) * inv
            gw = g[r, j] * weight[j] if scaled else g[r, j]
            dx[r, j] = inv * (gw - mean_gw - xhat * mean_gw_xhat)


def _flat(kernel: Any) -> Any:
    def backward(g: np.ndarray, x: np.ndarray) -> np.ndarray:
        out = np.empty(x.shape, dtype=x.dtype)
        kernel(np.ascontiguousarray(g).reshape(-1), np.ascontiguousarray(x).reshape(-1),
               out.reshape(-1))
        return out

    return backward


def _relu_simd(g: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, g, np.zeros((), dtype=g.dtype))


def _layer_norm_scalar(g: np.ndarray, x: np.ndarray, weight: np.ndarray | None = None,
                       eps: float = EPS) -> Any:
    rows = np.ascontiguousarray(x).reshape(-1, x.shape[-1])
    n = rows.shape[1]
    dx = np.empty(rows.shape, dtype=x.dtype)
    # weight and bias gradients summed over rows in float64, rounded once
    dweight = np.zeros(n if weight is not None else 0)
    dbias = np.zeros(n if weight is not None else 0)
    _layer_norm_rows(np.ascontiguousarray(g).reshape(rows.shape), rows,
                     NO_ARRAY[x.dtype.char] if weight is None else np.ascontiguousarray(weight),
                     float(eps), dx, dweight, dbias)
    if weight is None:
        return dx.reshape(x.shape)
    return dx.reshape(x.shape), dweight.astype(x.dtype), dbias.astype(x.dtype)


def _layer_norm_simd(g: np.ndarray, x: np.ndarray, weight: np.ndarray | None = None,
                     eps: float = EPS) -> Any:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    inv = 1.0 / np.sqrt((centred * centred).mean(axis=-1, keepdims=True) + eps)
    xhat = centred * inv
    gw = g if weight is None else g * weight
    dx = inv * (gw - gw.mean(axis=-1, keepdims=True)
                - xhat * (gw * xhat).mean(axis=-1, keepdims=True))
    dx = dx.astype(x.dtype, copy=False)
    if weight is None:
        return dx
    lead = tuple(range(x.ndim - 1))
    return dx, (g * xhat).sum(axis=lead).astype(x.dtype), g.sum(axis=lead).astype(x.dtype)


relu_scalar = host_arm(_flat(_relu_loop))
relu_simd = host_arm(_relu_simd)
gelu_scalar = host_arm(_flat(_gelu_loop))
gelu_simd = host_arm(_flat(_gelu_parallel))
layer_norm_scalar = host_arm(_layer_norm_scalar, template=1)
layer_norm_simd = host_arm(_layer_norm_simd, template=1)


def _layer_norm_size(g: Any, x: Any, weight: Any = None, eps: Any = EPS) -> int:
    size = _pair_size(g, x)
    if weight is not None and tuple(weight.shape) != (x.shape[-1],):
        raise ValueError(f"{LAYER_NORM}: weight must be 1-D of the last axis' length "
                         f"{x.shape[-1]}, got shape {tuple(weight.shape)}")
    return size


_pair_size = same_shape_size(LAYER_NORM)


def register(rt: Registrar) -> None:
    """Register the backward operations (numpy families; torch's in ``torch_arms``)."""
    for name, scalar, simd, kernels in (
            (RELU, relu_scalar, relu_simd, (_relu_loop, None)),
            (GELU, gelu_scalar, gelu_simd, (_gelu_loop, _gelu_parallel)),
            (LAYER_NORM, layer_norm_scalar, layer_norm_simd, (_layer_norm_rows, None))):
        size = _layer_norm_size if name == LAYER_NORM else same_shape_size(name)
        op = rt.register(name, size=size, kind="elementwise",
                         family=input_family)
        scalar_kernel, simd_kernel = kernels
        op.add_implementation(Backend.SCALAR, scalar, compile_count=compile_count(scalar_kernel))
        op.add_implementation(Backend.SIMD, simd, compile_count=compile_count(simd_kernel)
                              if simd_kernel is not None else None,
                              threads="numba" if simd_kernel is not None else "")
