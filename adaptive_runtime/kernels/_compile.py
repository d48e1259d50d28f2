"""numba when it is installed, plain Python when it is not."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

try:
    import numba

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - numba is a dependency; this keeps the package usable
    numba = None
    HAVE_NUMBA = False

__all__ = ["HAVE_NUMBA", "scalar_jit"]


def scalar_jit(fn: F) -> F:
    """Compile ``fn`` as a SCALAR kernel: ``@njit(cache=True)`` — no fastmath, no parallel,
    so floating-point reductions keep their sequential order. Without numba, ``fn`` itself."""
    if numba is None:
        return fn
    return numba.njit(cache=True)(fn)  # type: ignore[no-any-return]
