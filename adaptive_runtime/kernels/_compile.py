"""numba when it is installed, plain Python when it is not."""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from .._forks import after_fork_in_child

F = TypeVar("F", bound=Callable[..., Any])

try:
    import numba
    from numba import prange

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - numba is a dependency; this keeps the package usable
    numba = None
    prange = range  # (the parallel loops then run sequentially, in plain Python)
    HAVE_NUMBA = False

__all__ = ["HAVE_NUMBA", "PARALLEL_MIN_ELEMENTS", "SizeSplitKernel", "compile_count",
           "launch_parallel_threads", "prange", "scalar_jit", "simd_jit"]

# OpenMP's default wait policy lets a thread team spin for a while after each parallel region.
# Beside another spinning pool — numpy's OpenBLAS threads spin for ~0.1 s after a BLAS call —
# two pools fight over the cores: on the 2-core development machine a sequence of SIMD calls
# (BLAS dot/matmul among numba-parallel kernels) took 4.9 s with spinning OpenMP threads and
# 1.8 s with passive ones (scalar: 1.6 s), and millisecond stalls hit even tiny calls.
_WAIT_POLICY = "OMP_WAIT_POLICY"
_launch_lock = threading.Lock()
_launched = False


def _renew_lock() -> None:
    # (a runtime built on another thread may be launching the pool as the process forks:
    # the child gets its own lock, see adaptive_runtime._forks)
    global _launch_lock
    _launch_lock = threading.Lock()


after_fork_in_child(_renew_lock)


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
        # before a parallel build can load from numba's cache (loading one launches the pool)
        launch_parallel_threads()
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

    def compiled(self) -> int:
        """Specialisations compiled so far, both builds (what :func:`compile_count` reads)."""
        return len(self.serial.overloads) + len(self.parallel.overloads)


def launch_parallel_threads() -> None:
    """Start numba's thread pool now, its OpenMP threads waiting passively (sleeping, not
    spinning, between parallel regions) unless ``OMP_WAIT_POLICY`` is set by the user.

    The policy is read once, when numba's OpenMP library loads; it is set only around that
    load, so other OpenMP runtimes in the process (PyTorch bundles its own) keep their
    defaults. No effect when numba's pool is already running or uses another threading layer.
    """
    global _launched
    if numba is None or _launched:
        return
    with _launch_lock:
        if _launched:
            return
        _launched = True
        set_here = _WAIT_POLICY not in os.environ
        if set_here:
            os.environ[_WAIT_POLICY] = "PASSIVE"
        try:
            numba.get_num_threads()  # (launches the threading layer)
        except (ValueError, RuntimeError):
            # no threading layer loads here: a parallel build raises when called, and the
            # runtime falls back to another arm then; importing must not fail
            pass
        finally:
            if set_here:
                del os.environ[_WAIT_POLICY]


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
    # ``len(overloads)``, not ``len(signatures)``: the property builds a list, which cost
    # 1.7 us a call warm and ~25 us cold, twice per timed call.
    if isinstance(kernel, SizeSplitKernel):
        return kernel.compiled
    overloads = kernel.overloads
    return lambda: len(overloads)
