"""Input checks of the built-in operations, which are also their ``size_of`` functions.

Every operation takes float32 or float64 numpy arrays, or torch tensors of those dtypes — all
inputs of one call of one kind and one dtype. Anything else is a clear error naming the
operation and what it got (:class:`TypeError` for types and dtypes, :class:`ValueError` for
shapes, empty inputs included). These run on every call, so the common case (numpy arrays of
a float dtype) is checked first and cheaply; the full explanation is built only to raise.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._arrays import FLOAT_DTYPES, describe, is_tensor, numpy_dtype

__all__ = ["array_size", "conv1d_size", "matmul_size", "same_shape_size", "scale_size",
           "vector_pair_size"]

_FLOAT_CHARS = "fd"  # numpy's type characters of float32 and float64


def _fast(*arrays: Any) -> bool:
    """All numpy arrays of one float dtype (the common case, checked cheaply)."""
    first = arrays[0]
    if type(first) is not np.ndarray or first.dtype.char not in _FLOAT_CHARS:
        return False
    char = first.dtype.char
    return all(type(x) is np.ndarray and x.dtype.char == char for x in arrays[1:])


def _inputs(arrays: tuple[Any, ...]) -> str:
    return ", ".join(describe(x) for x in arrays)


def check_types(operation: str, *arrays: Any) -> None:
    """Raise :class:`TypeError` unless ``arrays`` are float32/float64 numpy arrays or torch
    tensors, all of one kind and one dtype."""
    if _fast(*arrays):
        return
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


def array_size(operation: str, x: Any) -> int:
    """Element count of one non-empty array (any number of dimensions, at least one)."""
    check_types(operation, x)
    size = int(x.numel()) if is_tensor(x) else x.size
    if x.ndim == 0 or size == 0:
        raise _shape_error(operation, "a non-empty array of at least one dimension", (x,))
    return size


def vector_pair_size(operation: str, a: Any, b: Any) -> int:
    """Length of two equal-length, non-empty 1-D arrays."""
    check_types(operation, a, b)
    if a.ndim != 1 or b.ndim != 1 or a.shape[0] != b.shape[0] or a.shape[0] == 0:
        raise _shape_error(operation, "two non-empty 1-D arrays of equal length", (a, b))
    return int(a.shape[0])


def same_shape_size(operation: str, a: Any, b: Any) -> int:
    """Element count of two non-empty arrays of one shape."""
    check_types(operation, a, b)
    if tuple(a.shape) != tuple(b.shape) or a.ndim == 0 or 0 in tuple(a.shape):
        raise _shape_error(operation, "two non-empty arrays of the same shape", (a, b))
    return int(np.prod(a.shape))


def scale_size(operation: str, alpha: Any, x: Any, y: Any) -> int:
    """``alpha * x + y``: a real scalar ``alpha`` and two non-empty arrays of one shape."""
    if isinstance(alpha, bool) or not isinstance(alpha, int | float | np.floating | np.integer):
        raise TypeError(f"{operation}: alpha must be a real number, got "
                        f"{type(alpha).__name__}")
    return same_shape_size(operation, x, y)


def matmul_size(operation: str, a: Any, b: Any) -> int:
    """``(m, k) @ (k, n)``, all non-zero: the size is the multiply-adds, ``m * k * n``."""
    check_types(operation, a, b)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0] or 0 in (*a.shape, *b.shape):
        raise _shape_error(operation, "non-empty 2-D arrays (m, k) and (k, n)", (a, b))
    return int(a.shape[0]) * int(a.shape[1]) * int(b.shape[1])


def conv1d_size(operation: str, x: Any, w: Any) -> int:
    """A 1-D signal of length n and a 1-D kernel of length k, 1 <= k <= n ("valid"
    cross-correlation, n - k + 1 outputs): the size is the multiply-adds."""
    check_types(operation, x, w)
    if x.ndim != 1 or w.ndim != 1 or not 1 <= w.shape[0] <= x.shape[0]:
        raise _shape_error(operation, "1-D x of length n and 1-D w of length k, 1 <= k <= n",
                           (x, w))
    n, k = int(x.shape[0]), int(w.shape[0])
    return (n - k + 1) * k
