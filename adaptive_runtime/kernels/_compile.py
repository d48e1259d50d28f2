"""numba when it is installed, plain Python when it is not — imported on first use.

Importing numba takes ~0.2 s and ~100 MiB (llvmlite), and a runtime that only selects, or
runs numpy arms, never needs it. So while numba is not imported yet, :func:`scalar_jit` and
:func:`simd_jit` return a :class:`LazyKernel`: the first call of any of them (or a look at a
dispatcher attribute such as ``signatures``) imports numba and makes every lazy kernel made so
far at once, then rebinds the module globals that named them (and the ``prange`` placeholder)
to the real dispatchers — so jitted code that calls another kernel compiles against the
dispatcher, and Python callers call it directly from then on. Once numba is imported (by
anyone), new kernels are compiled dispatchers straight away, as before.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import threading
import types
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from .._concurrency.forks import after_fork_in_child
from .._imported import imported

F = TypeVar("F", bound=Callable[..., Any])


def _numba_installed() -> bool:
    """Whether ``import numba`` would find it (found, not imported). A ``None`` in
    ``sys.modules`` is how a test (or an application) blocks an import: not installed."""
    if "numba" in sys.modules:
        return sys.modules["numba"] is not None
    try:
        return importlib.util.find_spec("numba") is not None
    except (ImportError, ValueError):
        return False


class _LazyPrange:
    """``numba.prange`` until numba is imported: rebound to it in the kernels' modules when
    they are made; called from plain Python (no numba after all), a ``range``."""

    def __call__(self, *args: int) -> range:
        return range(*args)

    def __repr__(self) -> str:
        return "prange (numba not imported yet)"


numba: Any = imported("numba")
HAVE_NUMBA = _numba_installed()
if numba is not None:
    from numba import prange
elif HAVE_NUMBA:
    prange = _LazyPrange()  # type: ignore[assignment]
else:  # pragma: no cover - numba is a dependency; this keeps the package usable
    prange = range  # (the parallel loops then run sequentially, in plain Python)

__all__ = ["HAVE_NUMBA", "PARALLEL_MIN_ELEMENTS", "KernelCompiles", "LazyKernel",
           "SizeSplitKernel", "compile_count", "every_build", "launch_parallel_threads",
           "one_thread", "prange", "scalar_jit", "simd_jit"]

# OpenMP's default wait policy lets a thread team spin for a while after each parallel region.
# Beside another spinning pool — numpy's OpenBLAS threads spin for ~0.1 s after a BLAS call —
# two pools fight over the cores: on the 2-core development machine a sequence of SIMD calls
# (BLAS dot/matmul among numba-parallel kernels) took 4.9 s with spinning OpenMP threads and
# 1.8 s with passive ones (scalar: 1.6 s), and millisecond stalls hit even tiny calls.
_WAIT_POLICY = "OMP_WAIT_POLICY"
_launch_lock = threading.Lock()
_launched = False


_make_lock = threading.Lock()
_pending: list[LazyKernel] = []  # lazy kernels not made yet, in the order they were defined


def _renew_lock() -> None:
    # (a runtime built on another thread may be launching the pool, or a first call making
    # the kernels, as the process forks: the child gets its own locks, see _concurrency.forks)
    global _launch_lock, _make_lock
    _launch_lock = threading.Lock()
    _make_lock = threading.Lock()


after_fork_in_child(_renew_lock)


class LazyKernel:
    """A numba kernel made on first use (see the module docstring): calling it, or reading
    an attribute only the dispatcher has (``signatures``, ``overloads``, ``py_func``,
    ``serial``, ...), imports numba and makes it. ``fn`` is the Python function."""

    def __init__(self, fn: Callable[..., Any], make: Callable[[Any, Callable[..., Any]], Any]
                 ) -> None:
        functools.update_wrapper(self, fn)
        self.fn = fn
        self._make = make  # (numba, fn) -> the dispatcher (numba None: fn itself)
        self.real: Any = None
        self._count: Callable[[], int] = _none_compiled

    def __call__(self, *args: Any) -> Any:
        real = self.real
        if real is None:
            real = self.materialize()
        return real(*args)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # (copy, pickle, inspect probing: never a reason to compile)
            raise AttributeError(name)
        return getattr(self.materialize(), name)

    def materialize(self) -> Any:
        """The dispatcher (numba imported and every pending kernel made, if not yet)."""
        if self.real is None:
            _make_pending()
        return self.real

    def compiled(self) -> int:
        """Specialisations compiled so far (0 before it was made): :func:`compile_count`."""
        return self._count() if self.real is not None else 0

    def __repr__(self) -> str:
        state = "made" if self.real is not None else "numba not imported yet"
        return f"<LazyKernel {self.fn.__qualname__} ({state})>"


def _none_compiled() -> int:
    return 0


def _make_pending() -> None:
    """Import numba and make every pending lazy kernel, then point the names that held them
    (and ``prange``) at the dispatchers: all at once, so a kernel that calls another compiles
    against a dispatcher, never a :class:`LazyKernel`."""
    global numba, prange, HAVE_NUMBA
    with _make_lock:
        if not _pending:
            return
        module: Any
        try:
            import numba as module
        except ImportError:  # installed but broken: the plain Python loops, as without it
            module = None
            HAVE_NUMBA = False
        numba = module
        new_prange = module.prange if module is not None else range
        made = [(lazy, lazy._make(module, lazy.fn)) for lazy in _pending]
        namespaces = {id(lazy.fn.__globals__): lazy.fn.__globals__ for lazy, _ in made}
        by_id = {id(lazy): real for lazy, real in made}
        for namespace in namespaces.values():
            _point_names(namespace, by_id, new_prange)
        prange = new_prange
        for lazy, real in made:
            lazy._count = _counter(real)
            lazy.real = real  # (last: another thread calls it only once the names point right)
        _pending.clear()


def _point_names(namespace: dict[str, Any], made: dict[int, Any], new_prange: Any) -> None:
    """Rebind, in a module's globals, each lazy kernel in ``made`` (by id) to what was made
    of it, and each ``prange`` placeholder to ``new_prange``."""
    for name, value in list(namespace.items()):
        if isinstance(value, LazyKernel) and id(value) in made:
            namespace[name] = made[id(value)]
        elif isinstance(value, _LazyPrange):
            namespace[name] = new_prange


def _counter(real: Any) -> Callable[[], int]:
    if isinstance(real, SizeSplitKernel):
        return real.compiled
    overloads = getattr(real, "overloads", None)
    if isinstance(overloads, dict):
        return lambda: len(overloads)
    return _none_compiled


def _lazy(fn: F, make: Callable[[Any, Callable[..., Any]], Any]) -> F:
    """``make(numba, fn)`` now if numba is imported already, else a :class:`LazyKernel`."""
    found = imported("numba")
    if found is not None:
        global numba, prange
        if _pending:  # numba came in meanwhile: make the earlier ones first (they may be called)
            _make_pending()
        numba, prange = found, found.prange
        # (a module that imported the placeholder before numba came: point it at numba's)
        _point_names(fn.__globals__, {}, found.prange)
        return make(found, fn)  # type: ignore[no-any-return]
    kernel = LazyKernel(fn, make)
    with _make_lock:
        _pending.append(kernel)
    return kernel  # type: ignore[return-value]


def _make_scalar(nb: Any, fn: Callable[..., Any]) -> Any:
    return fn if nb is None else nb.njit(cache=True)(fn)


def _make_simd(nb: Any, fn: Callable[..., Any]) -> Any:
    return fn if nb is None else SizeSplitKernel(fn)


def scalar_jit(fn: F) -> F:
    """Compile ``fn`` as a SCALAR kernel: ``@njit(cache=True)`` — no fastmath, no parallel,
    so floating-point reductions keep their sequential order (on first use: see the module
    docstring). Without numba, ``fn`` itself."""
    if not HAVE_NUMBA:
        return fn
    return _lazy(fn, _make_scalar)


# Below this many elements (in the largest array argument) a SIMD kernel runs its serial
# fastmath build: waking a thread team costs more than such a call's work (measured: a
# parallel layer_norm of 8 elements took ~1 ms, its serial build ~30 us, on a busy 2-core box).
PARALLEL_MIN_ELEMENTS = 1 << 15


class _BuildMode(threading.local):
    """How this thread's SIMD kernels pick a build now: ``one``, their serial build at every
    size (a one-thread variant's call: :func:`one_thread`); ``every``, the serial build run and
    the parallel one compiled too, without running it (a preparation off the caller's path:
    :func:`every_build`)."""

    one = False
    every = False


_mode = _BuildMode()


def one_thread(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (which calls :func:`simd_jit` kernels) with those kernels at one thread: their
    serial build at every size. No pool is resized — numba's ``set_num_threads`` there and
    back cost ~3 us a call here, the flag ~0.1 us — and other threads are not affected."""
    mode = _mode

    def at_one_thread(*args: Any) -> Any:
        mode.one = True
        try:
            return fn(*args)
        finally:
            mode.one = False

    return functools.update_wrapper(at_one_thread, fn)


def every_build(fn: Callable[..., Any], *args: Any) -> Any:
    """Call ``fn`` (which calls numba kernels) on ``args``, compiling — or loading from
    numba's cache — every build of every kernel it reaches for these argument types: the
    parallel build of a SIMD kernel too, which small ``args`` would not run. The parallel
    build is compiled, not run: a second thread launching numba's pool while the caller's
    thread uses it is safe only with some threading layers."""
    mode = _mode
    mode.every = True
    try:
        return fn(*args)
    finally:
        mode.every = False


class SizeSplitKernel:
    """A SIMD kernel compiled twice — serial ``fastmath`` and ``fastmath`` + ``parallel`` —
    that runs the serial build on small inputs (and inside :func:`one_thread`) and the
    parallel one on large inputs (inside :func:`every_build`, small inputs compile both)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        # before a parallel build can load from numba's cache (loading one launches the pool)
        import numba as nb  # (imported by now: made only where numba is)

        launch_parallel_threads()
        self.serial = nb.njit(cache=True, fastmath=True)(fn)
        self.parallel = nb.njit(cache=True, fastmath=True, parallel=True)(_cached_apart(fn))
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any) -> Any:
        largest = max((a.size for a in args if isinstance(a, np.ndarray)), default=0)
        if largest < PARALLEL_MIN_ELEMENTS or _mode.one:
            if _mode.every:
                self._compile_parallel(args)
            return self.serial(*args)
        return self.parallel(*args)

    def _compile_parallel(self, args: tuple[Any, ...]) -> None:
        """Compile (or load from the cache) the parallel build for ``args``' types."""
        typeof = self.parallel.typeof_pyval
        self.parallel.compile(tuple(typeof(a) for a in args))

    @property
    def signatures(self) -> list[Any]:
        return [*self.serial.signatures, *self.parallel.signatures]

    def compiled(self) -> int:
        """Specialisations compiled so far, both builds (what :func:`compile_count` reads)."""
        return len(self.serial.overloads) + len(self.parallel.overloads)


def _cached_apart(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` under another qualified name, for a second build of it. numba's on-disk cache
    names its files after the function and keys its index by signature and CPU, not by the
    build's options: two builds of one function shared one entry per signature, and a new
    process loaded whichever was saved last for both — the parallel build ran serially (a
    2^20-element sum measured at the serial build's 345 us against 190 us), or the serial
    one in parallel."""
    copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__,
                              fn.__closure__)
    copy.__qualname__ = f"{fn.__qualname__}__parallel"
    copy.__module__ = fn.__module__
    copy.__kwdefaults__ = fn.__kwdefaults__
    return copy


def launch_parallel_threads() -> None:
    """Start numba's thread pool now, its OpenMP threads waiting passively (sleeping, not
    spinning, between parallel regions) unless ``OMP_WAIT_POLICY`` is set by the user.

    The policy is read once, when numba's OpenMP library loads; it is set only around that
    load, so other OpenMP runtimes in the process (PyTorch bundles its own) keep their
    defaults. No effect when numba's pool is already running or uses another threading layer.
    """
    global _launched
    if _launched or imported("numba") is None:
        return
    with _launch_lock:
        if _launched:
            return
        _launched = True
        set_here = _WAIT_POLICY not in os.environ
        if set_here:
            os.environ[_WAIT_POLICY] = "PASSIVE"
        try:
            imported("numba").get_num_threads()  # (launches the threading layer)
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
    if not HAVE_NUMBA:
        return fn
    return _lazy(fn, _make_simd)


class KernelCompiles:
    """How many specialisations one or more numba kernels have compiled so far (called: an
    ``int``). An implementation's ``compile_count`` of this type says its code is numba's,
    which the dispatcher may compile before the implementation's first call, off the
    caller's path (:func:`every_build` on a small copy of a call's inputs)."""

    __slots__ = ("_count",)

    def __init__(self, count: Callable[[], int]) -> None:
        self._count = count

    def __call__(self) -> int:
        return self._count()

    def __add__(self, other: KernelCompiles) -> KernelCompiles:
        first, second = self._count, other._count
        return KernelCompiles(lambda: first() + second())


def compile_count(kernel: Any) -> KernelCompiles | None:
    """How many type signatures ``kernel`` has compiled so far (a call that raised it was
    spent compiling, and the runtime does not learn from it); ``None`` without numba."""
    if not HAVE_NUMBA:
        return None
    if isinstance(kernel, LazyKernel):
        return KernelCompiles(kernel.compiled)
    # ``len(overloads)``, not ``len(signatures)``: the property builds a list, which cost
    # 1.7 us a call warm and ~25 us cold, twice per timed call.
    if isinstance(kernel, SizeSplitKernel):
        return KernelCompiles(kernel.compiled)
    overloads = kernel.overloads
    return KernelCompiles(lambda: len(overloads))
