"""Fallback and quarantine: an arm that raised (or answered wrong) has its failure recorded and
is quarantined with back-off, and the call goes on to the next-best arm until one answers."""

from __future__ import annotations

from typing import Any

from ..backend import Choice
from ..decision import Decision, Reason
from ..errors import AllBackendsFailedError
from ..history import ArmStats
from ..operations import Operation
from .attempt import Attempt
from .core import Core
from .counts import Counts
from .emission import Emission
from .entry import Entry
from .period import Periods
from .settle import Settler, Span

_EXPLOIT = Reason.EXPLOIT

# (arm statistics, consecutive failures and quarantine end before this call's failure)
_Undo = list[tuple[ArmStats, int, float]]


class Fallback:
    """Carries a failed call over to the arms left, recording each failure."""

    def __init__(self, core: Core, settler: Settler, periods: Periods, counts: Counts,
                 emission: Emission, attempt: Attempt) -> None:
        self._core = core
        self._settler = settler
        self._periods = periods
        self._counts = counts
        self._emission = emission
        self._attempt = attempt.run

    def fast_failure(self, op: Operation, entry: Entry, n: int, args: tuple[Any, ...],
                     ticket: int, exc: Exception) -> Any:
        """The committed arm raised on an untimed call: fall back as a timed call would."""
        next(entry.timed)  # counted with the fallback, not as a fast call (see Entry)
        now_ns = self._core.timer()
        decision = Decision(entry.backend, _EXPLOIT)  # type: ignore[arg-type]
        return self.recover(op, entry, n, decision, args, ticket, exc, (now_ns,) * 3)

    def recover(self, op: Operation, entry: Entry, n: int, decision: Decision,
                args: tuple[Any, ...], ticket: int, exc: Exception,
                times: tuple[int, int, int]) -> Any:
        """The chosen arm failed: record, quarantine, and run the next-best arm (repeatedly);
        ``times``: the failed run's select start, kernel start and end."""
        errors: dict[Choice, BaseException] = {}
        undo: _Undo = []
        emission = self._emission
        while True:
            backend = decision.choice
            errors[backend] = exc
            with self._core.lock:
                nxt, span = self._failed(op, entry, n, decision, ticket, errors, undo)
            if span is not None:
                emission.emit(op.name, n, entry.bucket, span[1], backend, times, exc, nxt,
                              span[0])
            if emission.pending:
                emission.deliver_transitions()
            if nxt is None:
                raise AllBackendsFailedError(op.name, errors) from exc
            decision = Decision(nxt, Reason.FALLBACK, 0.0, decision.estimates_us,
                                decision.samples)
            select_ns = self._core.timer()
            result, start_ns, end_ns, learn_us, error, device_timing = self._attempt(
                op, entry, nxt, args, -1)
            times = (select_ns, start_ns, end_ns)
            if error is not None:
                exc = error
                continue
            with self._core.lock:
                span = self._settler.settle(op, entry, decision, ticket, learn_us, False, n,
                                            device_timing, times)
            if span is not None:
                emission.emit(op.name, n, entry.bucket, span[1], nxt, times, None, None,
                              span[0], sample=span[2])
            return result

    def _failed(self, op: Operation, entry: Entry, n: int, decision: Decision, ticket: int,
                errors: dict[Choice, BaseException],
                undo: _Undo) -> tuple[Choice | None, Span | None]:
        """Record ``decision``'s arm's failure; the arm to fall back to (``None``: every arm
        failed) and the failure's span, if exported. Lock held."""
        key = entry.key
        backend = decision.choice
        stats = key.arm(backend)
        undo.append((stats, stats.consecutive_failures, stats.quarantined_until_s))
        self._settler.failed(entry, backend)
        nxt = self._core.policy.fallback(key, entry.candidates, errors)
        if nxt is not None:
            self._counts.fallbacks[(op.name, backend, nxt)] += 1
            self._periods.refresh(entry, key)
            verdict = self._emission.failure_verdict(key, decision)
            return nxt, (verdict, self._settler.explained(entry, decision), None) if verdict \
                else None
        # Every arm failed on this input: that says nothing about which arm is bad (usually
        # the input is), so lift this call's quarantines.
        for arm_stats, consecutive, until in undo:
            arm_stats.consecutive_failures = consecutive
            arm_stats.quarantined_until_s = until
        return None, self._settler.settle(op, entry, decision, ticket, None, True, n)
