"""One timed run of an arm: the one place a kernel runs between two timer reads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..backend import Choice
from ..operations import DeviceTiming, Implementation, Operation
from .checks import ResultChecks
from .entry import Entry

# (result, kernel start and end in timer nanoseconds, the duration to learn (None: not
# learned from now), the arm's failure (an exception it raised or its wrong result) or None,
# the call's timing on its device, learned once ready (None: none))
Outcome = tuple[Any, int, int, float | None, Exception | None, DeviceTiming | None]


def _warmed(op: Operation, backend: Choice) -> None:
    """Mark ``backend`` warm on ``op`` after its first call (of an implementation registered
    with ``warm_up``), whose timing is not learned: it paid for what a library sets up on
    first use — dispatch caches, thread pools, allocator arenas, the first touch of its code
    (a first ATen call here took 3.8 ms, the fifth 22 us)."""
    op.warmed.add(backend)


class Attempt:
    """Runs one arm of a timed call: timed, its result checked, its timing judged."""

    def __init__(self, timer: Callable[[], int], checks: ResultChecks) -> None:
        self._timer = timer
        self._check = checks.check

    def run(self, op: Operation, entry: Entry, backend: Choice, args: tuple[Any, ...],
            ticket: int) -> Outcome:
        """Run ``backend``'s kernel on ``args`` (``ticket``: the call's, -1 for a fallback)."""
        impl = entry.impls[backend]
        if not impl.plain:
            return self._run_hooked(op, entry, backend, impl, args, ticket)
        # (an implementation without hooks, the usual one: nothing but the kernel is timed)
        timer = self._timer
        start_ns = timer()
        try:
            result = impl.fn(*args)
        except Exception as exc:
            return None, start_ns, timer(), None, exc, None
        end_ns = timer()
        wrong = self._check(op, entry, backend, args, result, ticket)
        if wrong is not None:  # a wrong result is the arm's failure
            return result, start_ns, end_ns, None, wrong, None
        return result, start_ns, end_ns, (end_ns - start_ns) / 1000.0, None, None

    def _run_hooked(self, op: Operation, entry: Entry, backend: Choice, impl: Implementation,
                    args: tuple[Any, ...], ticket: int) -> Outcome:
        """:meth:`run` for an implementation with hooks (see ``Implementation``)."""
        timer = self._timer
        compile_count = impl.compile_count
        compiled_before = compile_count() if compile_count is not None else 0
        timing_of = impl.device_timing
        try:  # (the hook may find the call cannot run there: the arm's failure)
            timing = timing_of(args) if timing_of is not None else None
        except Exception as exc:
            return None, timer(), timer(), None, exc, None
        # (timed on its device: nothing waited for; else asynchronous inputs are waited for,
        # their own work not this call's, and the result too)
        sync = impl.sync if timing is None else None
        if sync is not None:
            sync(args)
        start_ns = timer()
        try:
            result = impl.fn(*args)
            if timing is not None:
                timing.stop()
            elif sync is not None:
                sync(result)
        except Exception as exc:
            return None, start_ns, timer(), None, exc, None
        end_ns = timer()
        wrong = self._check(op, entry, backend, args, result, ticket)
        if wrong is not None:  # a wrong result is the arm's failure
            return result, start_ns, end_ns, None, wrong, None
        # A call that compiled a kernel measured the compiler, not the kernel; the first call
        # of a library arm of an operation (each family apart) measured its lazy set-up.
        if compile_count is not None and compile_count() != compiled_before:
            return result, start_ns, end_ns, None, None, None
        if impl.warm_up and backend not in op.warmed:
            _warmed(op, backend)
            return result, start_ns, end_ns, None, None, None
        if timing is not None:  # (learned when the device has run it)
            return result, start_ns, end_ns, None, None, timing
        duration_us = (end_ns - start_ns) / 1000.0
        if impl.surcharge_us is not None:  # what the arm costs later (its backward pass)
            duration_us += impl.surcharge_us(*args)
        return result, start_ns, end_ns, duration_us, None, None
