"""numba when it is installed, plain Python when it is not."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

try:
    import numba
    from numba import prange

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - numba is a dependency; this keeps the package usable
    numba = None
    prange = range  # (the parallel loops then run sequentially, in plain Python)
    HAVE_NUMBA = False

__all__ = ["HAVE_NUMBA", "compile_count", "prange", "scalar_jit", "simd_jit"]


def scalar_jit(fn: F) -> F:
    """Compile ``fn`` as a SCALAR kernel: ``@njit(cache=True)`` — no fastmath, no parallel,
    so floating-point reductions keep their sequential order. Without numba, ``fn`` itself."""
    if numba is None:
        return fn
    return numba.njit(cache=True)(fn)  # type: ignore[no-any-return]


def simd_jit(fn: F) -> F:
    """Compile ``fn`` as a SIMD kernel: ``@njit(cache=True, fastmath=True, parallel=True)``
    (reassociated, vectorised, threaded; use ``numba.prange`` for the parallel loop). Without
    numba, ``fn`` itself."""
    if numba is None:
        return fn
    return numba.njit(cache=True, fastmath=True, parallel=True)(fn)  # type: ignore[no-any-return]


def compile_count(kernel: Any) -> Callable[[], int] | None:
    """How many type signatures ``kernel`` has compiled so far (a call that raised it was
    spent compiling, and the runtime does not learn from it); ``None`` without numba."""
    if numba is None:
        return None
    return lambda: len(kernel.signatures)
