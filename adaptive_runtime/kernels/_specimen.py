"""A numba implementation compiled before its first call, off the caller's path.

The first call of a numba kernel in a process compiles it, or loads it from numba's cache, for
the call's argument types: measured here inside the first exploring calls of an adapted
training loop, ~0.8 s (numba's import, ``marshal.loads`` of the cached code, llvmlite) — a
quiet 1,500-step loop ran 1.55x plain torch, most of it that. numba compiles per argument
type (dtype, number of dimensions, memory layout), not per size, so a *specimen* of a call's
inputs — each array cut to one element per dimension, same dtype, layout and library —
compiles what the call itself would need, in microseconds of kernel time.

:func:`specimen` makes one from a call's arguments (on the caller's thread: it copies one
element an array); :func:`compile_on` runs an implementation on it with every build of its
kernels compiled (``_compile.every_build``), on whichever thread the dispatcher prepares on.
:func:`prepare_ahead` does what a cold implementation needs: that, or — for a BLAS variant at
fewer threads — finding BLAS's thread-count functions (``_thread_counts.BlasSetter``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._arrays import is_tensor
from ._compile import KernelCompiles, every_build
from ._thread_counts import BlasSetter

__all__ = ["compile_on", "compiled_by_numba", "prepare_ahead", "prepared_ahead", "specimen"]


def compiled_by_numba(compile_count: Callable[[], int] | None) -> bool:
    """Whether an implementation with this ``compile_count`` runs numba kernels (which
    :func:`compile_on` can compile ahead)."""
    return isinstance(compile_count, KernelCompiles)


def prepared_ahead(compile_count: Callable[[], int] | None) -> bool:
    """Whether an implementation with this ``compile_count`` needs something done before it
    can run well (``compile_count() == 0`` until then) that :func:`prepare_ahead` does."""
    return isinstance(compile_count, (KernelCompiles, BlasSetter))


def prepare_ahead(compile_count: Callable[[], int] | None, fn: Callable[..., Any],
                  small: tuple[Any, ...] | None) -> bool:
    """Do what implementation ``fn`` needs before its first call (see
    :func:`prepared_ahead`); whether it can run as it is meant to now."""
    if isinstance(compile_count, BlasSetter):
        return compile_count.prepare()
    if small is not None:
        compile_on(fn, small)
    return True


def specimen(args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """``args`` with each numpy array and CPU torch tensor cut to one element per dimension
    (a new array of the same dtype and memory layout, no autograd graph); other arguments as
    they are. ``None`` where an argument is an array this cannot stand in for (another
    library's, a device tensor, a layout neither C nor Fortran order)."""
    out = []
    for a in args:
        if isinstance(a, np.ndarray):
            small = _numpy_specimen(a)
        elif is_tensor(a):
            small = _tensor_specimen(a)
        elif hasattr(a, "shape") and hasattr(a, "dtype"):
            return None  # (a JAX array: its arms compile per shape, and copy to the host)
        else:
            small = a
        if small is None:
            return None
        out.append(small)
    return tuple(out)


def _corner(ndim: int) -> tuple[slice, ...]:
    return (slice(0, 1),) * ndim


def _numpy_specimen(a: np.ndarray) -> np.ndarray | None:
    if a.ndim == 0:
        return a.copy()
    # (copies: a view of one element would keep the caller's array alive)
    if a.flags.c_contiguous:
        return np.array(a[_corner(a.ndim)], order="C")
    if a.flags.f_contiguous:
        return np.array(a[_corner(a.ndim)], order="F")
    return None


def _tensor_specimen(t: Any) -> Any:
    if t.device.type != "cpu" or not t.is_contiguous():
        return None
    return t.detach()[_corner(t.dim())].clone()


def compile_on(fn: Callable[..., Any], small: tuple[Any, ...]) -> None:
    """Run implementation ``fn`` on ``small`` (a :func:`specimen`), every build of its numba
    kernels compiled for these argument types; its result is dropped."""
    every_build(fn, *small)
