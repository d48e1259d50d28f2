"""The full input checks of the built-in operations, which explain what is wrong.

What each ``size_of`` in ``_checks`` falls back to where its inline common case does not hold:
a check of the types (:func:`check_types`: numpy, torch or JAX, one float dtype, one device),
then of the shapes, which raises a clear error naming the operation and what it got
(:class:`TypeError` for types and dtypes, :class:`ValueError` for shapes, empty inputs
included) or returns the call's size.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._arrays import FLOAT_DTYPES, TENSOR_FLOATS, describe, dtype_name, is_jax, is_tensor

__all__ = ["check_alpha", "check_types", "full_array_size", "full_conv1d_size",
           "full_layer_norm_size", "full_linear_size", "full_matmul_size", "full_same_shape_size",
           "full_vector_pair_size"]


def _inputs(arrays: tuple[Any, ...]) -> str:
    return ", ".join(describe(x) for x in arrays)


def _library(x: Any) -> str | None:
    if isinstance(x, np.ndarray):
        return "numpy"
    if is_tensor(x):
        return "torch"
    if is_jax(x):
        return "jax"
    return None


def check_types(operation: str, *arrays: Any) -> None:
    """Raise :class:`TypeError` unless ``arrays`` are float32/float64 numpy arrays, or torch
    tensors or JAX arrays of float16, bfloat16, float32 or float64 — all of one kind, one
    dtype and (tensors) one device."""
    libraries = [_library(x) for x in arrays]
    dtypes = [dtype_name(x) for x in arrays]
    if not all(lib is not None and dtype in (TENSOR_FLOATS if lib != "numpy" else _NUMPY_FLOATS)
               for lib, dtype in zip(libraries, dtypes, strict=True)):
        raise TypeError(f"{operation}: expected float32 or float64 numpy arrays, or torch "
                        f"tensors or JAX arrays of float16, bfloat16, float32 or float64, got "
                        f"{_inputs(arrays)}")
    if len(set(libraries)) > 1:
        raise TypeError(f"{operation}: inputs must be all numpy arrays, all torch tensors or "
                        f"all JAX arrays, got {_inputs(arrays)}")
    if len(set(dtypes)) > 1:
        raise TypeError(f"{operation}: inputs must share one dtype, got "
                        f"{_inputs(arrays)}")
    if len({str(x.device) for x in arrays if is_tensor(x)}) > 1:
        raise TypeError(f"{operation}: tensors must be on one device, got "
                        f"{_inputs(arrays)}")


_NUMPY_FLOATS = frozenset(d.name for d in FLOAT_DTYPES)


def _shape_error(operation: str, wanted: str, arrays: tuple[Any, ...]) -> ValueError:
    shapes = " and ".join(str(tuple(x.shape)) for x in arrays)
    return ValueError(f"{operation}: expected {wanted}, got shapes {shapes}")


def _elements(x: Any) -> int:
    return int(x.numel()) if is_tensor(x) else int(x.size)


def full_array_size(operation: str, x: Any) -> int:
    check_types(operation, x)
    size = _elements(x)
    if x.ndim == 0 or size == 0:
        raise _shape_error(operation, "a non-empty array of at least one dimension", (x,))
    return size


def full_vector_pair_size(operation: str, a: Any, b: Any) -> int:
    check_types(operation, a, b)
    if a.ndim != 1 or b.ndim != 1 or a.shape[0] != b.shape[0] or a.shape[0] == 0:
        raise _shape_error(operation, "two non-empty 1-D arrays of equal length", (a, b))
    return int(a.shape[0])


def full_same_shape_size(operation: str, a: Any, b: Any) -> int:
    check_types(operation, a, b)
    if tuple(a.shape) != tuple(b.shape) or a.ndim == 0 or 0 in tuple(a.shape):
        raise _shape_error(operation, "two non-empty arrays of the same shape", (a, b))
    return _elements(a)


def check_alpha(operation: str, alpha: Any) -> None:
    if isinstance(alpha, bool) or not isinstance(alpha, int | float | np.floating | np.integer):
        raise TypeError(f"{operation}: alpha must be a real number, got "
                        f"{type(alpha).__name__}")


def full_layer_norm_size(operation: str, x: Any, weight: Any, bias: Any, eps: Any) -> int:
    params = tuple(p for p in (weight, bias) if p is not None)
    check_types(operation, x, *params)
    size = _elements(x)
    if x.ndim == 0 or size == 0:
        raise _shape_error(operation, "a non-empty array of at least one dimension", (x,))
    if any(tuple(p.shape) != (x.shape[-1],) for p in params):
        raise _shape_error(operation, "weight and bias of the last axis' length",
                           (x, *params))
    if isinstance(eps, bool) or not isinstance(eps, int | float | np.floating) or not eps > 0:
        raise ValueError(f"{operation}: eps must be a number > 0, got {eps!r}")
    return size


def full_linear_size(operation: str, x: Any, weight: Any, bias: Any) -> int:
    params = (weight,) if bias is None else (weight, bias)
    check_types(operation, x, *params)
    if (x.ndim == 0 or weight.ndim != 2 or x.shape[-1] != weight.shape[1]
            or 0 in (*x.shape, *weight.shape)
            or (bias is not None and tuple(bias.shape) != (weight.shape[0],))):
        raise _shape_error(operation, "non-empty x (..., in), weight (out, in) and bias (out,)",
                           (x, *params))
    return _elements(x) * int(weight.shape[0])


def full_matmul_size(operation: str, a: Any, b: Any) -> int:
    check_types(operation, a, b)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0] or 0 in (*a.shape, *b.shape):
        raise _shape_error(operation, "non-empty 2-D arrays (m, k) and (k, n)", (a, b))
    return int(a.shape[0]) * int(a.shape[1]) * int(b.shape[1])


def full_conv1d_size(operation: str, x: Any, w: Any, bias: Any = None, padding: Any = 0) -> int:
    check_types(operation, x, w, *(() if bias is None else (bias,)))
    if x.ndim == 3 and w.ndim == 3:
        if isinstance(padding, bool) or not isinstance(padding, int | np.integer) or padding < 0:
            raise ValueError(f"{operation}: padding must be an int >= 0, got {padding!r}")
        batch, channels, length = (int(d) for d in x.shape)
        out_channels, w_channels, k = (int(d) for d in w.shape)
        length += 2 * int(padding)
        if (w_channels != channels or not 1 <= k <= length or 0 in (batch, channels,
                                                                      out_channels)
                or (bias is not None and tuple(bias.shape) != (out_channels,))):
            raise _shape_error(operation, "x (batch, channels, n), w (out, channels, k) with "
                               "1 <= k <= n + 2 * padding, bias (out,)",
                               (x, w) if bias is None else (x, w, bias))
        return batch * out_channels * (length - k + 1) * channels * k
    if bias is not None or padding != 0:
        raise ValueError(f"{operation}: bias and padding are for the batched form (3-D x and "
                         f"w); got {describe(x)} and {describe(w)}")
    if x.ndim != 1 or w.ndim != 1 or not 1 <= w.shape[0] <= x.shape[0]:
        raise _shape_error(operation, "1-D x of length n and 1-D w of length k, 1 <= k <= n "
                           "(or the batched form: 3-D x and w)", (x, w))
    n, k = int(x.shape[0]), int(w.shape[0])
    return (n - k + 1) * k
