"""Input checks shared by the built-in kernels: clear errors naming the operation and shapes."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["same_shape_size", "vector_pair_size"]


def _shape(x: Any) -> tuple[int, ...] | None:
    shape = getattr(x, "shape", None)
    return tuple(shape) if shape is not None else None


def vector_pair_size(operation: str, a: Any, b: Any) -> int:
    """Element count of two equal-length, non-empty 1-D arrays; ``ValueError`` otherwise."""
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
        raise TypeError(f"{operation}: expected two numpy arrays, got "
                        f"{type(a).__name__} and {type(b).__name__}")
    if a.ndim != 1 or b.ndim != 1 or a.shape[0] != b.shape[0] or a.shape[0] == 0:
        raise ValueError(f"{operation}: expected two non-empty 1-D arrays of equal length, "
                         f"got shapes {_shape(a)} and {_shape(b)}")
    return a.shape[0]


def same_shape_size(operation: str, a: Any, b: Any) -> int:
    """Element count of two equal-shape, non-empty arrays; ``ValueError`` otherwise."""
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
        raise TypeError(f"{operation}: expected two numpy arrays, got "
                        f"{type(a).__name__} and {type(b).__name__}")
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"{operation}: expected two non-empty arrays of the same shape, "
                         f"got shapes {_shape(a)} and {_shape(b)}")
    return a.size
