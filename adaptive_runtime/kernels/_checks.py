"""Input checks of the built-in operations, which are also their ``size_of`` functions.

Every operation takes float32 or float64 numpy arrays, or torch tensors of those dtypes — all
inputs of one call of one kind and one dtype. Anything else is a clear error naming the
operation and what it got (:class:`TypeError` for types and dtypes, :class:`ValueError` for
shapes, empty inputs included).

A ``size_of`` runs on every call, the fast path included, so each factory below returns one
function that checks the common case — numpy arrays of one native float dtype — inline, with
no further call (measured between large calls, whose memory traffic leaves the interpreter's
caches cold: the earlier generic checks, ``np.prod`` of the shape among them, cost 15-35 us a
call, more than the dispatch itself). Anything else goes to the full check, which explains
what is wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._arrays import FLOAT_DTYPES, describe, is_tensor, numpy_dtype

__all__ = ["array_size", "conv1d_size", "matmul_size", "same_shape_size", "scale_size",
           "vector_pair_size"]

_ndarray = np.ndarray
# numpy's native float32/float64 dtypes are singletons, so ``is`` tells them apart cheaply;
# any other dtype object (byte-swapped, say) takes the full check.
_F32, _F64 = FLOAT_DTYPES


def _inputs(arrays: tuple[Any, ...]) -> str:
    return ", ".join(describe(x) for x in arrays)


def check_types(operation: str, *arrays: Any) -> None:
    """Raise :class:`TypeError` unless ``arrays`` are float32/float64 numpy arrays or torch
    tensors, all of one kind and one dtype."""
    dtypes = [numpy_dtype(x) for x in arrays]
    if not all(d is not None and d in FLOAT_DTYPES for d in dtypes):  # (dtype == None!)
        raise TypeError(f"{operation}: expected float32 or float64 numpy arrays or torch "
                        f"tensors, got {_inputs(arrays)}")
    if len({is_tensor(x) for x in arrays}) > 1:
        raise TypeError(f"{operation}: inputs must be all numpy arrays or all torch tensors, "
                        f"got {_inputs(arrays)}")
    if len(set(dtypes)) > 1:
        raise TypeError(f"{operation}: inputs must share one dtype, got "
                        f"{_inputs(arrays)}")
    if len({str(x.device) for x in arrays if is_tensor(x)}) > 1:
        raise TypeError(f"{operation}: tensors must be on one device, got "
                        f"{_inputs(arrays)}")


def _shape_error(operation: str, wanted: str, arrays: tuple[Any, ...]) -> ValueError:
    shapes = " and ".join(str(tuple(x.shape)) for x in arrays)
    return ValueError(f"{operation}: expected {wanted}, got shapes {shapes}")


def _elements(x: Any) -> int:
    return int(x.numel()) if is_tensor(x) else int(x.size)


# --------------------------------------------------------------------------- full checks


def _array_size(operation: str, x: Any) -> int:
    check_types(operation, x)
    size = _elements(x)
    if x.ndim == 0 or size == 0:
        raise _shape_error(operation, "a non-empty array of at least one dimension", (x,))
    return size


def _vector_pair_size(operation: str, a: Any, b: Any) -> int:
    check_types(operation, a, b)
    if a.ndim != 1 or b.ndim != 1 or a.shape[0] != b.shape[0] or a.shape[0] == 0:
        raise _shape_error(operation, "two non-empty 1-D arrays of equal length", (a, b))
    return int(a.shape[0])


def _same_shape_size(operation: str, a: Any, b: Any) -> int:
    check_types(operation, a, b)
    if tuple(a.shape) != tuple(b.shape) or a.ndim == 0 or 0 in tuple(a.shape):
        raise _shape_error(operation, "two non-empty arrays of the same shape", (a, b))
    return _elements(a)


def _check_alpha(operation: str, alpha: Any) -> None:
    if isinstance(alpha, bool) or not isinstance(alpha, int | float | np.floating | np.integer):
        raise TypeError(f"{operation}: alpha must be a real number, got "
                        f"{type(alpha).__name__}")


def _matmul_size(operation: str, a: Any, b: Any) -> int:
    check_types(operation, a, b)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0] or 0 in (*a.shape, *b.shape):
        raise _shape_error(operation, "non-empty 2-D arrays (m, k) and (k, n)", (a, b))
    return int(a.shape[0]) * int(a.shape[1]) * int(b.shape[1])


def _conv1d_size(operation: str, x: Any, w: Any) -> int:
    check_types(operation, x, w)
    if x.ndim != 1 or w.ndim != 1 or not 1 <= w.shape[0] <= x.shape[0]:
        raise _shape_error(operation, "1-D x of length n and 1-D w of length k, 1 <= k <= n",
                           (x, w))
    n, k = int(x.shape[0]), int(w.shape[0])
    return (n - k + 1) * k


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
        return _array_size(operation, x)

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
        return _vector_pair_size(operation, a, b)

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
        return _same_shape_size(operation, a, b)

    return size_of


def scale_size(operation: str) -> Callable[[Any, Any, Any], int]:
    """``size_of`` for ``alpha * x + y``: a real scalar ``alpha`` and two non-empty arrays of
    one shape; their element count."""
    pair = same_shape_size(operation)

    def size_of(alpha: Any, x: Any, y: Any) -> int:
        if type(alpha) is not float:  # (the common case: a Python float)
            _check_alpha(operation, alpha)
        return pair(x, y)

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
        return _matmul_size(operation, a, b)

    return size_of


def conv1d_size(operation: str) -> Callable[[Any, Any], int]:
    """``size_of`` for a 1-D signal of length n and a 1-D kernel of length k, 1 <= k <= n
    ("valid" cross-correlation, n - k + 1 outputs): the multiply-adds."""

    def size_of(x: Any, w: Any) -> int:
        if type(x) is _ndarray and type(w) is _ndarray:
            dtype = x.dtype
            if (dtype is _F64 or dtype is _F32) and w.dtype is dtype and x.ndim == 1 == w.ndim:
                n = x.shape[0]
                k = w.shape[0]
                if 1 <= k <= n:
                    return (n - k + 1) * k
        return _conv1d_size(operation, x, w)

    return size_of
