"""Input checks of the built-in operations, which are also their ``size_of`` functions.

Every operation takes float32 or float64 numpy arrays, or torch tensors or JAX arrays of those
dtypes or of float16/bfloat16 — all inputs of one call of one kind, one dtype (and one
device). Anything else is a clear error naming the operation and what it got
(:class:`TypeError` for types and dtypes, :class:`ValueError` for shapes, empty inputs
included).

A ``size_of`` runs on every call, the fast path included, so each factory below returns one
function that checks the common case — numpy arrays of one native float dtype — inline, with
no further call (measured between large calls, whose memory traffic leaves the interpreter's
caches cold: the earlier generic checks, ``np.prod`` of the shape among them, cost 15-35 us a
call, more than the dispatch itself) — and then torch tensors, in a training loop's common case
(CPU, one float dtype), through :func:`_tensors_ok`, and JAX arrays of one float dtype (tracers
included) through :func:`_jax_ok`. Anything else goes to the full check (``_full_checks``),
which explains what is wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .._imported import imported
from ._arrays import FLOAT_DTYPES, TENSOR_FLOATS
from ._full_checks import (
    check_alpha,
    full_array_size,
    full_conv1d_size,
    full_layer_norm_size,
    full_linear_size,
    full_matmul_size,
    full_same_shape_size,
    full_vector_pair_size,
)

__all__ = ["array_size", "conv1d_size", "layer_norm_size", "linear_size", "matmul_size",
           "same_shape_size", "scale_size", "vector_pair_size"]

_ndarray = np.ndarray
# numpy's native float32/float64 dtypes are singletons, so ``is`` tells them apart cheaply;
# any other dtype object (byte-swapped, say) takes the full check.
_F32, _F64 = FLOAT_DTYPES


def _tensors_ok(*tensors: Any) -> bool:
    """Whether ``tensors`` are torch tensors of one float dtype on one device: the common case
    of a training loop, checked without building any list (the full check explains the rest).
    """
    torch = imported("torch")
    if torch is None:
        return False
    first = tensors[0]
    if not isinstance(first, torch.Tensor) or not first.is_floating_point():
        return False
    dtype = first.dtype
    device = first.device
    for t in tensors[1:]:
        if not isinstance(t, torch.Tensor) or t.dtype is not dtype or t.device != device:
            return False
    return True


# JAX dtypes (numpy dtype objects, ml_dtypes' bfloat16 among them) -> whether an arm computes in
# them
_JAX_FLOAT_TYPES: dict[Any, bool] = {}


def _jax_ok(*arrays: Any) -> bool:
    """Whether ``arrays`` are JAX arrays (or tracers) of one float dtype an arm computes in:
    the common case of a JAX program, checked without building any list (devices are left to
    JAX, which refuses to mix them)."""
    jax = imported("jax")
    if jax is None:
        return False
    array = jax.Array
    first = arrays[0]
    if not isinstance(first, array):
        return False
    dtype = first.dtype
    known = _JAX_FLOAT_TYPES.get(dtype)
    if known is None:
        known = _JAX_FLOAT_TYPES[dtype] = getattr(dtype, "name", None) in TENSOR_FLOATS
    if not known:
        return False
    for a in arrays[1:]:  # noqa: SIM110 (a loop: no generator object on the hot path)
        if not isinstance(a, array) or a.dtype != dtype:
            return False
    return True



# torch's floating-point dtypes include float8 variants no arm computes in
_TENSOR_FLOAT_TYPES: dict[Any, bool] = {}


def _tensor_float(t: Any) -> bool:
    known = _TENSOR_FLOAT_TYPES.get(t.dtype)
    if known is None:
        known = _TENSOR_FLOAT_TYPES[t.dtype] = str(t.dtype)[6:] in TENSOR_FLOATS
    return known


# --------------------------------------------------------------------------- size_of factories


def array_size(operation: str) -> Callable[[Any], int]:
    """``size_of`` for one non-empty array (any number of dimensions, at least one): its
    element count."""

    def size_of(x: Any) -> int:
        if type(x) is _ndarray:
            dtype = x.dtype
            if (dtype is _F64 or dtype is _F32) and x.ndim:
                size = x.size
                if size:
                    return size
        elif _tensors_ok(x) and _tensor_float(x) and x.ndim:
            size = x.numel()
            if size:
                return size
        elif _jax_ok(x) and x.ndim:
            size = x.size
            if size:
                return size
        return full_array_size(operation, x)

    return size_of


def vector_pair_size(operation: str) -> Callable[[Any, Any], int]:
    """``size_of`` for two equal-length, non-empty 1-D arrays: their length."""

    def size_of(a: Any, b: Any) -> int:
        if type(a) is _ndarray and type(b) is _ndarray:
            dtype = a.dtype
            if (dtype is _F64 or dtype is _F32) and b.dtype is dtype and a.ndim == 1:
                shape = a.shape
                if shape == b.shape and shape[0]:
                    return shape[0]
        elif ((_tensors_ok(a, b) and _tensor_float(a)) or _jax_ok(a, b)) and a.ndim == 1:
            shape = a.shape
            if shape == b.shape and shape[0]:
                return shape[0]
        return full_vector_pair_size(operation, a, b)

    return size_of


def same_shape_size(operation: str) -> Callable[[Any, Any], int]:
    """``size_of`` for two non-empty arrays of one shape: their element count."""

    def size_of(a: Any, b: Any) -> int:
        if type(a) is _ndarray and type(b) is _ndarray:
            dtype = a.dtype
            if ((dtype is _F64 or dtype is _F32) and b.dtype is dtype and a.ndim
                    and a.shape == b.shape):
                size = a.size
                if size:
                    return size
        elif _tensors_ok(a, b) and _tensor_float(a) and a.ndim and a.shape == b.shape:
            size = a.numel()
            if size:
                return size
        elif _jax_ok(a, b) and a.ndim and a.shape == b.shape:
            size = a.size
            if size:
                return size
        return full_same_shape_size(operation, a, b)

    return size_of


def scale_size(operation: str) -> Callable[[Any, Any, Any], int]:
    """``size_of`` for ``alpha * x + y``: a real scalar ``alpha`` and two non-empty arrays of
    one shape; their element count."""
    pair = same_shape_size(operation)

    def size_of(alpha: Any, x: Any, y: Any) -> int:
        if type(alpha) is not float:  # (the common case: a Python float)
            check_alpha(operation, alpha)
        return pair(x, y)

    return size_of


def layer_norm_size(operation: str) -> Callable[..., int]:
    """``size_of`` for ``layer_norm(x[, weight, bias[, eps]])``: x's element count; weight
    and bias (``None`` or 1-D of the last axis' length) and eps (> 0) are checked."""
    plain = array_size(operation)

    def size_of(x: Any, weight: Any = None, bias: Any = None, eps: Any = 1e-5) -> int:
        if type(eps) is float and eps > 0:
            if weight is None and bias is None:
                return plain(x)
            if (weight is not None and bias is not None and _tensors_ok(x, weight, bias)
                    and _tensor_float(x) and x.ndim and weight.ndim == 1 == bias.ndim):
                n = x.shape[-1]
                if weight.shape[0] == n == bias.shape[0]:
                    size = x.numel()
                    if size:
                        return size
            elif (weight is not None and bias is not None and _jax_ok(x, weight, bias)
                  and x.ndim and weight.ndim == 1 == bias.ndim):
                n = x.shape[-1]
                if weight.shape[0] == n == bias.shape[0]:
                    size = x.size
                    if size:
                        return size
        return full_layer_norm_size(operation, x, weight, bias, eps)

    return size_of


def linear_size(operation: str) -> Callable[..., int]:
    """``size_of`` for ``linear(x, weight[, bias])``, ``x @ weight.T + bias`` with x
    ``(..., in)``, weight ``(out, in)``, bias ``(out,)`` or ``None``: the multiply-adds."""

    def size_of(x: Any, weight: Any, bias: Any = None) -> int:
        if bias is None:
            if _tensors_ok(x, weight) and _tensor_float(x) and weight.ndim == 2 and x.ndim:
                out_features, in_features = weight.shape
                if x.shape[-1] == in_features and out_features:
                    size = x.numel()
                    if size:
                        return size * out_features
            elif _jax_ok(x, weight) and weight.ndim == 2 and x.ndim:
                out_features, in_features = weight.shape
                if x.shape[-1] == in_features and out_features:
                    size = x.size
                    if size:
                        return size * out_features
        elif (_tensors_ok(x, weight, bias) and _tensor_float(x) and weight.ndim == 2 and x.ndim
              and bias.ndim == 1):
            out_features, in_features = weight.shape
            if x.shape[-1] == in_features and bias.shape[0] == out_features and out_features:
                size = x.numel()
                if size:
                    return size * out_features
        elif _jax_ok(x, weight, bias) and weight.ndim == 2 and x.ndim and bias.ndim == 1:
            out_features, in_features = weight.shape
            if x.shape[-1] == in_features and bias.shape[0] == out_features and out_features:
                size = x.size
                if size:
                    return size * out_features
        return full_linear_size(operation, x, weight, bias)

    return size_of


def matmul_size(operation: str) -> Callable[[Any, Any], int]:
    """``size_of`` for ``(m, k) @ (k, n)``, all non-zero: the multiply-adds, ``m * k * n``."""

    def size_of(a: Any, b: Any) -> int:
        if type(a) is _ndarray and type(b) is _ndarray:
            dtype = a.dtype
            if (dtype is _F64 or dtype is _F32) and b.dtype is dtype and a.ndim == 2 == b.ndim:
                m, k = a.shape
                k2, n = b.shape
                if k == k2 and m and k and n:
                    return m * k * n
        elif (((_tensors_ok(a, b) and _tensor_float(a)) or _jax_ok(a, b))
              and a.ndim == 2 == b.ndim):
            m, k = a.shape
            k2, n = b.shape
            if k == k2 and m and k and n:
                return m * k * n
        return full_matmul_size(operation, a, b)

    return size_of


def conv1d_size(operation: str) -> Callable[..., int]:
    """``size_of`` for a 1-D signal of length n and a 1-D kernel of length k, 1 <= k <= n
    ("valid" cross-correlation, n - k + 1 outputs), or the batched form of
    ``torch.nn.Conv1d`` — x ``(batch, channels, n)``, w ``(out, channels, k)``, optional bias
    ``(out,)`` and zero padding: the multiply-adds."""

    def size_of(x: Any, w: Any, bias: Any = None, padding: Any = 0) -> int:
        if type(x) is not _ndarray:
            arrays = (x, w) if bias is None else (x, w, bias)
            if (type(padding) is int and padding >= 0
                    and ((_tensors_ok(*arrays) and _tensor_float(x)) or _jax_ok(*arrays))
                    and x.ndim == 3 == w.ndim):
                batch, channels, length = x.shape
                out_channels, w_channels, k = w.shape
                length += 2 * padding
                if (w_channels == channels and 1 <= k <= length and batch and channels
                        and out_channels
                        and (bias is None or (bias.ndim == 1 and bias.shape[0] == out_channels))):
                    return batch * out_channels * (length - k + 1) * channels * k
            return full_conv1d_size(operation, x, w, bias, padding)
        if bias is not None or padding != 0:
            return full_conv1d_size(operation, x, w, bias, padding)
        if type(w) is _ndarray:
            dtype = x.dtype
            if (dtype is _F64 or dtype is _F32) and w.dtype is dtype and x.ndim == 1 == w.ndim:
                n = x.shape[0]
                k = w.shape[0]
                if 1 <= k <= n:
                    return (n - k + 1) * k
        return full_conv1d_size(operation, x, w)

    return size_of
