"""Built-in operations on the process default runtime: ``ar.ops.dot(a, b)`` and friends."""

from __future__ import annotations

from typing import Any

from .runtime import get_runtime

__all__ = ["add", "dot"]


def dot(a: Any, b: Any) -> Any:
    """Inner product of two equal-length 1-D arrays, on the arm the default runtime picks."""
    return get_runtime().run("dot", a, b)


def add(a: Any, b: Any) -> Any:
    """Elementwise sum of two equal-shape arrays, on the arm the default runtime picks."""
    return get_runtime().run("add", a, b)
