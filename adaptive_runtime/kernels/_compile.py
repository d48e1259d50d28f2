"""numba when it is installed, plain Python when it is not."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

F = TypeVar("F", bound=Callable[..., Any])

try:
    import numba
    from numba import prange

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - numba is a dependency; this keeps the package usable
    numba = None
    prange = range  # (the parallel loops then run sequentially, in plain Python)
    HAVE_NUMBA = False

__all__ = ["HAVE_NUMBA", "PARALLEL_MIN_ELEMENTS", "SizeSplitKernel", "compile_count", "prange",
           "scalar_jit", "simd_jit"]


def scalar_jit(fn: F) -> F:
    """Compile ``fn`` as a SCALAR kernel: ``@njit(cache=True)`` — no fastmath, no parallel,
    so floating-point reductions keep their sequential order. Without numba, ``fn`` itself."""
    if numba is None:
        return fn
    return numba.njit(cache=True)(fn)  # type: ignore[no-any-return]


# Below this many elements (in the largest array argument) a SIMD kernel runs its serial
# fastmath build: waking a thread team costs more than such a call's work (measured: a
# parallel layer_norm of 8 elements took ~1 ms, its serial build ~30 us, on a busy 2-core box).
PARALLEL_MIN_ELEMENTS = 1 << 15


class SizeSplitKernel:
    """A SIMD kernel compiled twice — serial ``fastmath`` and ``fastmath`` + ``parallel`` —
    that runs the serial build on small inputs and the parallel one on large inputs."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.serial = numba.njit(cache=True, fastmath=True)(fn)
        self.parallel = numba.njit(cache=True, fastmath=True, parallel=True)(fn)
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any) -> Any:
        largest = max((a.size for a in args if isinstance(a, np.ndarray)), default=0)
        kernel = self.parallel if largest >= PARALLEL_MIN_ELEMENTS else self.serial
        return kernel(*args)

    @property
    def signatures(self) -> list[Any]:
        return [*self.serial.signatures, *self.parallel.signatures]


def simd_jit(fn: F) -> F:
    """Compile ``fn`` as a SIMD kernel: ``@njit(cache=True, fastmath=True)`` (reassociated,
    vectorised) and, for inputs of ``PARALLEL_MIN_ELEMENTS`` or more, also ``parallel=True``
    (use ``prange`` for the parallel loop; it is a plain ``range`` in the serial build).
    Without numba, ``fn`` itself."""
    if numba is None:
        return fn
    return SizeSplitKernel(fn)  # type: ignore[return-value]


def compile_count(kernel: Any) -> Callable[[], int] | None:
    """How many type signatures ``kernel`` has compiled so far (a call that raised it was
    spent compiling, and the runtime does not learn from it); ``None`` without numba."""
    if numba is None:
        return None
    return lambda: len(kernel.signatures)
