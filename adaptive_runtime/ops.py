"""Built-in operations on the process default runtime: ``ar.ops.dot(a, b)`` and friends.

Each takes float32/float64 numpy arrays or torch tensors and returns the same type and dtype.
"""

from __future__ import annotations

from typing import Any

from .runtime import get_runtime

__all__ = ["add", "conv1d", "dot", "gelu", "layer_norm", "matmul", "relu", "scale",
           "softmax", "sum"]


def dot(a: Any, b: Any) -> Any:
    """Inner product of two equal-length 1-D arrays, on the arm the default runtime picks."""
    return get_runtime().run("dot", a, b)


def add(a: Any, b: Any) -> Any:
    """Elementwise sum of two equal-shape arrays, on the arm the default runtime picks."""
    return get_runtime().run("add", a, b)


def scale(alpha: Any, x: Any, y: Any) -> Any:
    """``alpha * x + y`` (axpy: a real scalar, equal-shape arrays), on the default runtime."""
    return get_runtime().run("scale", alpha, x, y)


def sum(x: Any) -> Any:  # (shadows the builtin in this module, which does not use it)
    """Sum of all elements (a scalar of x's dtype), on the arm the default runtime picks."""
    return get_runtime().run("sum", x)


def relu(x: Any) -> Any:
    """Elementwise ``max(x, 0)``, on the arm the default runtime picks."""
    return get_runtime().run("relu", x)


def gelu(x: Any) -> Any:
    """Elementwise exact (erf) GELU, like torch's default, on the default runtime."""
    return get_runtime().run("gelu", x)


def softmax(x: Any) -> Any:
    """Softmax over the last axis (max subtracted first), on the arm the default runtime picks."""
    return get_runtime().run("softmax", x)


def layer_norm(x: Any) -> Any:
    """Normalise over the last axis (biased variance, eps 1e-5), on the default runtime."""
    return get_runtime().run("layer_norm", x)


def matmul(a: Any, b: Any) -> Any:
    """Matrix product ``(m, k) @ (k, n) -> (m, n)``, on the arm the default runtime picks."""
    return get_runtime().run("matmul", a, b)


def conv1d(x: Any, w: Any) -> Any:
    """Valid-mode cross-correlation of 1-D ``x`` with kernel ``w`` (n - k + 1 outputs)."""
    return get_runtime().run("conv1d", x, w)
