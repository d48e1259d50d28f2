"""The thread pools CPU kernels run on, and how many threads each has now.

A threaded kernel's cost is what it costs with the threads it gets: numba's ``prange`` loops
run on numba's pool (``numba.set_num_threads``, ``NUMBA_NUM_THREADS``), ATen's kernels on
torch's intra-op pool (``torch.set_num_threads``), numpy's ``dot`` / ``matmul`` on its BLAS
library's (``OPENBLAS_NUM_THREADS``, ``threadpoolctl.threadpool_limits``). An implementation
names its pool when it is registered (``threads="numba"``); when that pool's thread count
changes while the program runs, what was learned of the implementation no longer holds, and
the runtime measures it afresh (see ``_dispatch.learner``).

Counts are read without importing anything or starting a pool: numba's only once its
threading layer is up (before that no threaded numba kernel has run, so nothing learned
depends on it), torch's where torch is imported, BLAS's through ``threadpoolctl`` where it is
installed. ``None``: not known here. While a program runs, BLAS's is read only once the
program has imported threadpoolctl itself: a BLAS pool is resized through it (or fixed by
``OPENBLAS_NUM_THREADS`` before the program starts), and finding the library costs ~6.5 ms
and importing threadpoolctl more, which no training loop should pay for nothing.

The runtime also sets counts (``RuntimeConfig.choose_threads``): a numba kernel at fewer
threads for one call (:func:`at_threads`, numba's count being per thread), BLAS at fewer for
one call (:func:`at_blas_threads`, through OpenBLAS's own setter), and torch's
process-wide count held for a phase (:func:`set_torch_phase`, ``_dispatch/pool_phase``). Its
own setting is not a change of the pool's size: the pool's size reads as before.
"""

from __future__ import annotations

import functools
import logging
import math
import os
from collections.abc import Callable, Mapping
from typing import Any

from ._imported import imported

__all__ = ["POOLS", "ThreadWatch", "at_blas_threads", "at_threads", "blas_setter_found",
           "find_blas_setter", "pool_size", "set_torch_phase", "thread_counts", "torch_phase",
           "torch_threads"]

_log = logging.getLogger(__name__)

# The pools an implementation may name (Implementation.threads); "" is a serial one.
POOLS = ("numba", "torch", "blas")

Counts = dict[str, "int | None"]

# threadpoolctl's controller, made on the first BLAS reading (finding the loaded libraries
# took ~6.5 ms on the development machine; a reading through it afterwards ~15-35 us).
# [] until then; [None] where threadpoolctl is missing or fails.
_controller: list[object | None] = []


def thread_counts(*, blas: bool = True) -> Counts:
    """Each pool's thread count now (``None`` where unknown: see the module docstring);
    ``blas=False``: BLAS's only where the program imported threadpoolctl."""
    if not blas and imported("threadpoolctl") is None:
        return {"numba": _numba_threads(), "torch": _torch_threads(), "blas": None}
    return {"numba": _numba_threads(), "torch": _torch_threads(), "blas": _blas_threads()}


def _live_counts() -> Counts:
    return thread_counts(blas=False)


def _numba_threads() -> int | None:
    parallel = imported("numba.np.ufunc.parallel")
    numba = imported("numba")
    if parallel is None or numba is None or not getattr(parallel, "_is_initialized", False):
        return None  # (reading it would launch the threading layer: ~6 ms)
    try:
        return int(numba.get_num_threads())
    except Exception:  # (an odd build)
        return None


def _torch_threads() -> int | None:
    """torch's pool size: its count now, or — where the runtime holds torch at a count of
    its choosing (:func:`set_torch_phase`) — the size it had before, so the runtime's own
    setting never looks like the program resizing the pool."""
    torch = imported("torch")
    if torch is None:
        return None
    try:
        now = int(torch.get_num_threads())
    except Exception:
        return None
    if _phase:
        base, phase = _phase
        if now == phase:
            return base
        _phase.clear()  # (the program set a count of its own: it wins, the phase is over)
    return now


# [pool size, count set] while the runtime holds torch at a count of its choosing
_phase: list[int] = []


def torch_phase() -> int:
    """The count the runtime holds torch at (0: it does not; the pool runs at its own
    size)."""
    return _phase[1] if _phase else 0


def torch_threads() -> int | None:
    """The threads torch's pool runs at now: the count the runtime holds it at, else its
    size; ``None`` where torch is not imported. (Reads torch: not for a call's path, where
    :func:`torch_phase` and a pool size read earlier do.)"""
    size = _torch_threads()  # (first: a count the program set ends the phase)
    return None if size is None else torch_phase() or size


def set_torch_phase(count: int) -> None:
    """Hold torch at ``count`` threads (0: back to the pool's own size), see
    ``_dispatch/pool_phase``. No effect where torch is not imported or it is held so."""
    torch = imported("torch")
    if torch is None:
        return
    base = _phase[0] if _phase else int(torch.get_num_threads())
    if count >= base:  # (as many threads as the pool has, or more: the pool's own size)
        count = 0
    if count == torch_phase():
        return
    if count:
        _phase[:] = [base, count]
        torch.set_num_threads(count)
    else:
        _phase.clear()
        torch.set_num_threads(base)


def pool_size(pool: str) -> int:
    """How many threads ``pool`` has by default here, read without starting it: numba's
    ``NUMBA_NUM_THREADS`` or the CPU count, torch's count where torch is imported (its own
    size where the runtime holds it at fewer), else the CPU count; BLAS's the CPU count."""
    cpus = os.cpu_count() or 1
    if pool == "numba":
        try:
            return max(1, int(os.environ.get("NUMBA_NUM_THREADS", "") or cpus))
        except ValueError:
            return cpus
    if pool == "torch":
        return _torch_threads() or cpus
    return cpus


def at_threads(count: int, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with numba's pool at ``count`` threads for the calling thread (numba's count is
    per thread: others keep theirs), set for the call and back after it."""

    def at_count(*args: Any) -> Any:
        numba: Any = imported("numba")
        now = _numba_threads() if numba is not None else None
        if now is None or now <= count:  # (pool not up yet: the call launches it at full size)
            return fn(*args)
        numba.set_num_threads(count)
        try:
            return fn(*args)
        finally:
            numba.set_num_threads(now)

    return functools.update_wrapper(at_count, fn)


# BLAS's own getter and setter of its thread count, found once through threadpoolctl
# (:func:`find_blas_setter`): [] until looked for; [None] where there is none to use.
_blas_calls: list[tuple[Callable[[], int], Callable[[int], None]] | None] = []


def blas_setter_found() -> bool:
    """Whether :func:`at_blas_threads` can set BLAS's thread count (found, not looked for)."""
    return bool(_blas_calls) and _blas_calls[0] is not None


def find_blas_setter() -> bool:
    """Find BLAS's own thread-count functions (importing threadpoolctl and reading the loaded
    libraries: milliseconds, so never on a caller's path — the runtime looks from its
    preparing thread) and say whether there are some to use.

    OpenBLAS only, through its own C functions (``openblas_set_num_threads``, or OpenMP's
    where OpenBLAS runs on OpenMP), called directly: 0.5 us for a switch there and back,
    where threadpoolctl's setter takes ~4 us each way. Other BLAS libraries (MKL, BLIS) get
    no variant at fewer threads."""
    if not _blas_calls:
        _blas_calls.append(_openblas_calls())
    return _blas_calls[0] is not None


def _openblas_calls() -> tuple[Callable[[], int], Callable[[int], None]] | None:
    controller = _blas_controller()
    if controller is None:
        return None
    try:
        lib = _numpys_blas([lib for lib in controller.lib_controllers  # type: ignore[attr-defined]
                            if lib.user_api == "blas"])
        if lib is None or lib.internal_api != "openblas":
            return None
        prefix = "omp" if lib.threading_layer == "openmp" else "openblas"
        get = lib._get_symbol("omp_get_max_threads" if prefix == "omp"
                              else "openblas_get_num_threads")
        set_ = lib._get_symbol(f"{prefix}_set_num_threads")
    except Exception as exc:  # (a threadpoolctl without these internals)
        _log.debug("BLAS thread-count functions not found (%r)", exc)
        return None
    if get is None or set_ is None:
        return None
    return get, set_


def _numpys_blas(libs: list[Any]) -> Any:
    """Of the BLAS libraries loaded, the one numpy calls: the only one, or the one numpy's
    wheel ships (scipy's wheel ships its own OpenBLAS too); ``None`` where it is not known."""
    if len(libs) == 1:
        return libs[0]
    numpy = imported("numpy")
    where = getattr(numpy, "__file__", None)
    if not where:
        return None
    # (real paths: the loader reports a symlinked virtualenv's files by their targets)
    home = os.path.dirname(os.path.dirname(os.path.realpath(where)))
    mine = [lib for lib in libs if os.path.relpath(os.path.realpath(lib.filepath), home)
            .startswith(("numpy.libs", "numpy" + os.sep))]
    return mine[0] if len(mine) == 1 else None


def at_blas_threads(count: int, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with BLAS at ``count`` threads for the call, set back after it; as ``fn``
    until :func:`find_blas_setter` found the functions (the runtime leaves such a variant
    out of its candidates until then).

    OpenBLAS's count is process-wide (on its own threads; OpenMP's is per thread): a BLAS
    call on another Python thread during this one runs at ``count`` too. A call that finds
    the count already at or under ``count`` leaves it alone, so two such calls overlapping
    never leave the pool at the lower count."""

    def at_count(*args: Any) -> Any:
        calls = _blas_calls[0] if _blas_calls else None
        if calls is None:
            return fn(*args)
        get, set_ = calls
        now = get()
        if now <= count:
            return fn(*args)
        set_(count)
        try:
            return fn(*args)
        finally:
            set_(now)

    return functools.update_wrapper(at_count, fn)


def _blas_controller() -> object | None:
    if not _controller:
        try:
            import threadpoolctl

            _controller.append(threadpoolctl.ThreadpoolController())
        except Exception as exc:  # (not installed, or it cannot inspect this process)
            _log.debug("threadpoolctl unavailable (%s): BLAS threads not read", exc)
            _controller.append(None)
    return _controller[0]


def _blas_threads() -> int | None:
    controller = _blas_controller()
    if controller is None:
        return None
    try:
        counts = [lib.num_threads for lib in controller.lib_controllers  # type: ignore[attr-defined]
                  if lib.user_api == "blas"]
    except Exception:
        return None
    return max(counts) if counts else None


class ThreadWatch:
    """Reads the pools' thread counts at most every ``interval_s`` seconds and says which
    pools changed since the last reading. Not thread-safe: the caller holds its lock."""

    def __init__(self, read: Callable[[], Mapping[str, int | None]] = _live_counts,
                 interval_s: float = 1.0) -> None:
        self._read = read
        self._interval_s = interval_s
        self._last: Mapping[str, int | None] | None = None
        self.due_s = -math.inf  # the clock reading from which the next poll reads

    def size(self, pool: str) -> int | None:
        """``pool``'s size at the latest reading (``None``: none yet, or not known)."""
        last = self._last
        return last.get(pool) if last is not None else None

    def poll(self, now_s: float) -> dict[str, tuple[int, int]]:
        """The pools whose count changed since the last reading, as pool -> (before, now);
        empty before ``due_s`` and on the first reading. A pool whose count was unknown
        (numba's before its first threaded kernel) is not a change.

        The first poll reads nothing: the first reading is an interval later (pools are sized
        when a program starts, before its first call; its first calls are slow enough)."""
        if now_s < self.due_s:
            return {}
        first = self.due_s == -math.inf
        self.due_s = now_s + self._interval_s
        if first:
            return {}
        counts = self._read()
        last, self._last = self._last, counts
        if last is None:
            return {}
        changed = {}
        for pool, now in counts.items():
            before = last.get(pool)
            if before is not None and now is not None and now != before:
                changed[pool] = (before, now)
        return changed
