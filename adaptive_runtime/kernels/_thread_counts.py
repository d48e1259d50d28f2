"""Thread counts as choices: each threaded implementation is learned at fewer threads too.

Which thread count wins depends on what else runs on the machine. Measured here (2 cores): a
training step of the digits MLP at batch 64 ran 1.31x faster on 2 threads than on 1 on a quiet
machine, and 2.6x slower beside one busy process (a DataLoader worker preparing batches). So a
threaded implementation (``threads="numba"`` or ``"torch"``) gets variants at fewer threads —
at 1 and, where its pool has more than 2 threads, at half of them — named after the count:
``simd:numba@1`` (numba's loop on one thread), ``simd:torch@1`` (ATen on one thread). The
runtime learns and chooses them per key as it does any variant; exploring them is priced in
time like any other (``policy.explore``).

Where the count is set, from what switching costs here:

- numba at 1 thread: no pool is resized at all — the kernel's serial ``fastmath`` build runs
  (``_compile.one_thread``, ~0.1 us); at another count numba's per-thread
  ``set_num_threads`` there and back (~3 us).
- torch: per pool, for a phase, with the keys' choices as the evidence. ``torch.set_num_threads``
  costs ~0.3 us, but the pool's threads must wake after it (a 64x256x256 matmul right after a
  switch took 222 us against 137 us), and the user's own torch code — autograd's backward,
  the optimizer — runs at whatever count is set between the runtime's calls. So while most of
  the time the torch keys take is spent in keys committed to one count, the runtime holds
  torch at that count between calls (``_dispatch/pool_phase``); a key committed to another
  count switches for its call and back (~0.5 us), and ATen at the pool's size is the primary
  implementation, ``simd``, whatever count torch is held at.
- BLAS (numpy's ``dot``/``matmul``): not yet. Its setter goes through threadpoolctl (~4 us
  each way, ~6.5 ms to find the library first).

Below the size where the kernel runs serially anyway — ``PARALLEL_MIN_ELEMENTS`` for numba,
ATen's grain of 32,768 elements for torch's element-wise and row-wise kernels — the variants
would be the same kernel twice: they are not candidates there (``min_size``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..backend import Backend, Kind
from ..operations import DEVICE_FAMILY
from ..threads import at_threads, pool_size
from ._compile import HAVE_NUMBA, PARALLEL_MIN_ELEMENTS, one_thread

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from ..operations import Implementation, Operation

__all__ = ["add_thread_variants", "fewer_counts"]

# ATen's at::internal::GRAIN_SIZE: its element-wise and reduction kernels split work into
# chunks of this many elements, so smaller calls run on one thread whatever the pool's size.
ATEN_GRAIN = 32_768
COUNT_SEPARATOR = "@"


def fewer_counts(size: int) -> tuple[int, ...]:
    """The counts below a pool of ``size`` threads that are worth learning: 1, and half the
    pool where it has more than 2 threads."""
    if size <= 1:
        return ()
    return (1,) if size <= 2 else (1, size // 2)


def add_thread_variants(op: Operation) -> None:
    """Add to ``op``, in each input family (the device family aside: its CPU arms are round
    trips), a variant at each of :func:`fewer_counts` for every threaded SIMD
    implementation."""
    for family in ("", *op.families):
        if family == DEVICE_FAMILY:
            continue
        for impl in op.implementations(family):
            made = _fewer_threads(op, impl)
            if made is None:
                continue
            wrap, min_size = made
            base = impl.name or impl.threads
            for count in fewer_counts(pool_size(impl.threads)):
                op.add_implementation(
                    impl.backend, wrap(count, impl.fn), name=f"{base}{COUNT_SEPARATOR}{count}",
                    family=family, threads=impl.threads, needs=impl.needs, min_size=min_size,
                    thread_count=count, compile_count=impl.compile_count,
                    floor_us=impl.floor_us, warm_up=impl.warm_up,
                    surcharge_us=impl.surcharge_us, sync=impl.sync)
            if impl.threads == "torch":  # (at the pool's size even while torch is held at fewer)
                op.wrap_implementation(impl.choice, _at_pool_size, family=family)


def _fewer_threads(op: Operation, impl: Implementation
                   ) -> tuple[Callable[[int, Callable[..., Any]], Callable[..., Any]], int] | None:
    """How to run ``impl`` at a count (and from what size that differs), or ``None`` where it
    has no thread count to choose (serial, not SIMD, a variant at a count already)."""
    if impl.backend is not Backend.SIMD or COUNT_SEPARATOR in impl.name:
        return None
    if impl.threads == "numba" and HAVE_NUMBA:
        return _numba_at, PARALLEL_MIN_ELEMENTS
    if impl.threads == "torch":
        return _torch_at, (0 if op.kind is Kind.MATRIX else ATEN_GRAIN)
    return None


def _numba_at(count: int, fn: Callable[..., Any]) -> Callable[..., Any]:
    return one_thread(fn) if count == 1 else at_threads("numba", count, fn)


def _torch_at(count: int, fn: Callable[..., Any]) -> Callable[..., Any]:
    return at_threads("torch", count, fn)


def _at_pool_size(fn: Callable[..., Any]) -> Callable[..., Any]:
    return at_threads("torch", 0, fn)
