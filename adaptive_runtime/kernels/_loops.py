"""numba loops over flattened arrays, as numpy-family arms: shared by the elementwise
operations' records (``relu``, ``gelu`` and their backward operations)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["apply_flat", "flat_pair"]


def apply_flat(kernel: Any, x: np.ndarray) -> np.ndarray:
    """``kernel(x, out)`` on ``x`` flattened (contiguous), into a new array of its shape."""
    out = np.empty(x.shape, dtype=x.dtype)
    kernel(np.ascontiguousarray(x).reshape(-1), out.reshape(-1))
    return out


def flat_pair(kernel: Any) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """A backward arm ``(g, x) -> out`` running ``kernel(g, x, out)`` on the flattened
    arrays (``x``'s shape and dtype out)."""

    def backward(g: np.ndarray, x: np.ndarray) -> np.ndarray:
        out = np.empty(x.shape, dtype=x.dtype)
        kernel(np.ascontiguousarray(g).reshape(-1), np.ascontiguousarray(x).reshape(-1),
               out.reshape(-1))
        return out

    return backward
