"""Thread counts as choices: each threaded implementation is learned at fewer threads.

Which thread count wins depends on what else runs on the machine. Measured here (2 cores):
beside one busy process (a DataLoader worker preparing batches) the numpy built-ins at 2^16-2^20
elements ran 2x faster with every pool at one thread; on a quiet machine slower. So each
implementation on numba's pool (``threads="numba"``) or on BLAS's (``threads="blas"``: numpy's
``dot``, ``matmul``, ``linear``) gets variants at fewer threads — at 1 and, where the pool has
more than 2 threads, at half of them — named after the count: ``simd:numba@1``,
``simd:blas@1``. The runtime learns and chooses them per key as it does any variant;
exploring them is priced in time like any other (``policy.explore``).

Per call, because switching costs little against the calls that have threads to lose:

- numba: at 1 thread no pool is resized at all — the kernel's serial ``fastmath`` build runs
  (``_compile.one_thread``, ~0.1 us); at another count numba's per-thread
  ``set_num_threads`` there and back (~3 us);
- BLAS: OpenBLAS's own setter there and back, called directly (0.5 us; threadpoolctl's
  setter took ~4 us each way). Measured beside a busy process: a 2^20-element ``dot`` took
  1,260 us at 2 threads, 730 us switched to 1 for the call, 890 us held at 1. The functions
  are found through threadpoolctl (milliseconds), so a BLAS variant is *cold* until the
  runtime's preparing thread has found them (``_dispatch/prepare``, :class:`BlasSetter`).

Below ``PARALLEL_MIN_ELEMENTS`` (elements, or multiply-adds for the BLAS products) the kernels
run serially anyway, so the variants are not candidates there (``min_size``).

torch's pool is chosen per pool for a phase instead (``_dispatch/pool_phase``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..backend import Backend
from ..operations import DEVICE_FAMILY
from ..threads import at_blas_threads, at_threads, blas_setter_found, find_blas_setter, pool_size
from ._compile import HAVE_NUMBA, PARALLEL_MIN_ELEMENTS, one_thread

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from ..operations import Operation

__all__ = ["BlasSetter", "add_thread_variants", "fewer_counts"]

COUNT_SEPARATOR = "@"


def fewer_counts(size: int) -> tuple[int, ...]:
    """The counts below a pool of ``size`` threads that are worth learning: 1, and half the
    pool where it has more than 2 threads."""
    if size <= 1:
        return ()
    return (1,) if size <= 2 else (1, size // 2)


class BlasSetter:
    """The ``compile_count`` of a BLAS variant at fewer threads: 1 once BLAS's thread-count
    functions are found, else 0 (called). Until then the variant is cold: left out of its
    keys, and :meth:`prepare` (on the runtime's preparing thread) looks for them."""

    __slots__ = ()

    def __call__(self) -> int:
        return 1 if blas_setter_found() else 0

    @staticmethod
    def prepare() -> bool:
        """Look for the functions (milliseconds, once); whether the variant can run now."""
        return find_blas_setter()


_BLAS_SETTER = BlasSetter()


def add_thread_variants(op: Operation) -> None:
    """Add to ``op``, in each input family (the device family aside: its CPU arms are round
    trips), a variant at each of :func:`fewer_counts` for every numba- or BLAS-threaded SIMD
    implementation."""
    for family in ("", *op.families):
        if family == DEVICE_FAMILY:
            continue
        for impl in op.implementations(family):
            if impl.backend is not Backend.SIMD or impl.thread_count:
                continue
            if impl.threads == "numba" and HAVE_NUMBA:
                at, compiles = _numba_at, impl.compile_count
            elif impl.threads == "blas":
                at, compiles = at_blas_threads, _BLAS_SETTER
            else:
                continue
            base = impl.name or impl.threads
            for count in fewer_counts(pool_size(impl.threads)):
                op.add_implementation(
                    impl.backend, at(count, impl.fn),
                    name=f"{base}{COUNT_SEPARATOR}{count}", family=family,
                    threads=impl.threads, needs=impl.needs, min_size=PARALLEL_MIN_ELEMENTS,
                    thread_count=count, compile_count=compiles,
                    floor_us=impl.floor_us, warm_up=impl.warm_up,
                    surcharge_us=impl.surcharge_us, sync=impl.sync)


def _numba_at(count: int, fn: Callable[..., Any]) -> Callable[..., Any]:
    return one_thread(fn) if count == 1 else at_threads(count, fn)
