"""Backward operations: the gradient of ``layer_norm`` (the other operations' are declared
beside their forward, in their records).

Each is an adaptive operation of its own (``"gelu.backward"``, ...), chosen, timed and learned
like any other: the backward pass of a numba forward arm under torch autograd runs through them
(``torch_arms``). Inputs are the upstream gradient ``g`` and what the forward saved:

- ``layer_norm.backward(g, x[, weight[, eps]])``: the gradient of x, and with a weight the
  gradients of weight and bias too, as a tuple ``(dx, dweight, dbias)``.

SCALAR: numba loops; SIMD (numpy arrays): numpy, or numba ``fastmath`` where numpy lacks the
function (``erfc``); torch tensors run ATen's own backward kernels (``torch_arms``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..backend import Backend
from ._arrays import host_arm
from ._checks import same_shape_size
from ._compile import compile_count, scalar_jit
from ._families import input_family
from .layer_norm import EPS, NO_ARRAY, row_moments

if TYPE_CHECKING:
    from ..operations import Registrar

LAYER_NORM = "layer_norm.backward"
NAMES = (LAYER_NORM,)

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
    """Register ``layer_norm.backward`` (numpy family; torch's in ``torch_arms``)."""
    op = rt.register(LAYER_NORM, size=_layer_norm_size, kind="elementwise",
                     family=input_family)
    op.add_implementation(Backend.SCALAR, layer_norm_scalar,
                          compile_count=compile_count(_layer_norm_rows))
    op.add_implementation(Backend.SIMD, layer_norm_simd, compile_count=None, threads="")
