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
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping

from ._imported import imported

__all__ = ["POOLS", "ThreadWatch", "thread_counts"]

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
    torch = imported("torch")
    if torch is None:
        return None
    try:
        return int(torch.get_num_threads())
    except Exception:
        return None


def _blas_threads() -> int | None:
    if not _controller:
        try:
            import threadpoolctl

            _controller.append(threadpoolctl.ThreadpoolController())
        except Exception as exc:  # (not installed, or it cannot inspect this process)
            _log.debug("threadpoolctl unavailable (%s): BLAS threads not read", exc)
            _controller.append(None)
    controller = _controller[0]
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
