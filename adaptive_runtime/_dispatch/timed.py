"""A timed call: the arm decided for it in advance runs between two timer reads, then one lock
to learn from it and decide the key's next timed call; spans after the lock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..backend import Backend
from ..decision import Decision, Reason
from ..keys import size_bucket
from ..operations import DeviceTiming, Operation
from .attempt import Attempt
from .core import Core
from .emission import Emission
from .entry import TALLY_REASON, Entry
from .fallback import Fallback
from .prepare import Preparer
from .profiling import profiler_range
from .settle import Settler, Span

# module globals: one dict lookup instead of two on the slow path
_EXPLOIT = Reason.EXPLOIT
_FORCED = Reason.FORCED
# EWMA weight of one timed call's measured cost (see Entry.timing_cost_us).
_COST_ALPHA = 0.125


class TimedCalls:
    """Runs the calls the fast path does not: every call of a key still exploring, 1-in-N of
    a converged one, the first call of a key."""

    def __init__(self, core: Core, settler: Settler, emission: Emission, attempt: Attempt,
                 fallback: Fallback, preparer: Preparer) -> None:
        self._core = core
        self._timer = core.timer  # (never replaced: read here once, not through the core)
        self._settler = settler
        self._settle = settler.settle
        self._emission = emission
        self._attempt = attempt.run
        self._recover = fallback.recover
        # (set by the dispatcher) make the routes of operations that gain implementations
        # again, given the frameworks the program imported since the last look
        self.reroute: Callable[[frozenset[str]], None] | None = None
        # (set by the dispatcher) make the routes of operations again whose left-out
        # candidates were compiled off the callers' path (see prepare)
        self._preparer = preparer
        self.compiled: Callable[[], None] | None = None

    def slow(self, op: Operation, entries: dict[int, Entry], n: int, args: tuple[Any, ...],
             entry: Entry | None, ticket: int) -> Any:
        """A call that is timed: run the arm decided for it, then (one lock) learn and decide
        the key's next timed call."""
        timer = self._timer
        emission = self._emission
        select_ns = timer() if emission.tracing else 0  # the select span's start
        if entry is not None:  # (it took a ticket: see Router.run_routed)
            next(entry.timed)  # see Entry: keeps counts exact
            decision = entry.next
        else:
            decision = None
        if decision is None:
            # validate what size_of returned (size_bucket raises a clear error)
            entry, decision = self._settler.first_decision(op, entries, n, size_bucket(n), args)
        elif n < 0:
            size_bucket(n)  # raises: a negative size found the bucket of its bit length
        capturing = op.capturing
        if capturing is not None and capturing():
            return self._captured(entry, decision, args)
        backend = decision.choice
        scope = profiler_range(op.name, backend, decision.reason)
        if scope is None:
            result, start_ns, end_ns, learn_us, error, device_timing = self._attempt(
                op, entry, backend, args, ticket)
        else:
            with scope:  # (a profiler records: the decision is a range in its trace)
                result, start_ns, end_ns, learn_us, error, device_timing = self._attempt(
                    op, entry, backend, args, ticket)
        if error is not None:
            return self._recover(op, entry, n, decision, args, ticket, error,
                                 (select_ns, start_ns, end_ns))
        times = (select_ns, start_ns, end_ns)
        span = self._settled(op, entry, decision, ticket, learn_us, n, device_timing, times)
        if decision.reason is _EXPLOIT or decision.reason is _FORCED:
            # What learning from a committed (or forced) key's call cost, for the period of its
            # fast path: far more between large calls (cold caches) than in a tight loop, so it
            # is measured, not assumed. (Exploring calls, which ask the policy, are not
            # typical. A forced key's calls are all alike: unmeasured, its period stayed at
            # the 4 us guess, 1-in-128 to 1-in-512 for 2-8 us calls whose timing cost
            # 20-100 us.)
            cost_us = (timer() - end_ns) / 1000.0
            entry.timing_cost_us += (cost_us - entry.timing_cost_us) * _COST_ALPHA
        if emission.pending:
            emission.deliver_transitions()
        if span is not None:
            emission.emit(op.name, n, entry.bucket, span[1], backend, times, None, None,
                          span[0], sample=span[2])
        return result

    def _settled(self, op: Operation, entry: Entry, decision: Decision, ticket: int,
                 learn_us: float | None, n: int, device_timing: DeviceTiming | None,
                 times: tuple[int, int, int]) -> Span | None:
        """Settle the call under the lock (:meth:`Settler.settle`), learning first the device
        timings that became ready; emit those calls' held spans after it. Returns this call's
        span, if exported."""
        lock = self._core.lock
        settler = self._settler
        ready = None
        lock.acquire()  # (not ``with``: it costs a timed call twice as much, ~90 ns more)
        try:
            if settler.pending:  # (timings made on a device earlier, learned once ready)
                ready = settler.learn_ready()
            span = self._settle(op, entry, decision, ticket, learn_us, False, n, device_timing,
                                times)
        finally:
            lock.release()
        if settler.frameworks_imported and self.reroute is not None:
            imported, settler.frameworks_imported = settler.frameworks_imported, frozenset()
            self.reroute(imported)
        if self._preparer.finished and self.compiled is not None:
            self.compiled()
        if ready:
            for held, device_us in ready:
                self._emission.emit(*held, device_us=device_us)
        return span

    def _captured(self, entry: Entry, decision: Decision, args: tuple[Any, ...]) -> Any:
        """A call due to be timed while a CUDA graph is captured on its inputs' device: the
        kernels it launches are recorded, not run, and a synchronisation (or a read on the
        host) would break the capture. It runs device code only: the key's committed
        implementation where that is on the GPU arm, else the GPU arm's (a CPU arm, allowed
        on device inputs by ``host_arms_on_device``, would copy to the host), untimed, and
        nothing is learned: the decision waits for the key's next call outside the capture.
        Counted as an exploit of what ran."""
        impls = entry.impls
        choice = entry.state.incumbent
        if choice is None or choice not in impls or choice.arm is not Backend.GPU:
            choice = Backend.GPU if Backend.GPU in impls else next(
                (c for c in impls if c.arm is Backend.GPU), decision.choice)
        result = impls[choice].fn(*args)
        with self._core.lock:
            entry.tally[entry.slots[choice] + TALLY_REASON[_EXPLOIT]] += 1
        return result
