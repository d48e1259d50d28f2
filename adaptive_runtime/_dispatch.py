"""The hot path of one call: select → execute → measure → learn → (trace).

Fast path (a converged key, a call not chosen for timing): two dict lookups, the operation's
``size_of``, ``int.bit_length`` and one ``next()`` on the key's ``itertools.count``, then the
kernel. No lock, no clock read, no allocation. ``next()`` on an ``itertools.count`` is a single
C call, so concurrent threads each get a distinct ticket and no call goes uncounted.

A ticket ``t`` with ``t & mask == 0`` (always, for a key still being explored) takes the slow
path: under the runtime lock it counts the calls since the key's previous slow call, updates the
hot-path rate, asks the policy, runs the kernel timed, learns from the timing and refreshes the
key's fast-path entry (which kernel, and how often to time it).
"""

from __future__ import annotations

import itertools
import math
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .backend import Backend
from .config import RuntimeConfig
from .errors import AllBackendsFailedError, BackendUnavailableError, RegistrationError
from .gating import HotPathDetector, HotPathTransition, TraceGate, TraceVerdict, measure_period
from .history import ArmStats, HistoryStore, KeyHistory
from .keys import size_bucket
from .operations import DeviceProbe, Kind, Operation, OperationRegistry, infer_kind
from .policy import Decision, Policy, Reason, best_arm, heuristic_order

__all__ = ["CallRecord", "Dispatcher", "SelectionKey"]

_EXPLOIT = Reason.EXPLOIT  # a module global: one dict lookup instead of two on the slow path
# Full policy evaluations of a committed key happen at least every this many decisions; in
# between the memoised exploit decision is reused (drift, re-checks and failures still act
# immediately, and a timing of any other arm clears the memo).
_MEMO_DECISIONS = 16


@dataclass(frozen=True, slots=True)
class SelectionKey:
    """Labels of one selection counter: bounded (registered names, three arms, seven reasons)."""

    operation: str
    backend: Backend
    reason: Reason


@dataclass(frozen=True, slots=True)
class CallRecord:
    """What one measured call did, handed to the span sink after the call (off the loop)."""

    operation: str
    input_size: int
    size_bucket: int
    decision: Decision
    backend: Backend
    start_ns: int
    end_ns: int
    error: BaseException | None
    fallback_to: Backend | None
    verdict: TraceVerdict


class _Entry:
    """Fast-path state of one (operation, size bucket). Mutated in place, never replaced, so
    tickets taken by racing threads are never lost."""

    __slots__ = ("backend", "bucket", "candidates", "counted", "impl", "mask", "ticks")

    def __init__(self, bucket: int, candidates: tuple[Backend, ...]) -> None:
        self.bucket = bucket
        self.candidates = candidates
        self.ticks = itertools.count()
        self.mask = 0  # 0: every call takes the slow path
        self.impl: Callable[..., Any] | None = None
        self.backend: Backend | None = None
        self.counted = 0  # tickets already reflected in the selection counters

    def issued(self) -> int:
        """Tickets handed out so far, read without taking one (``repr`` is ``count(N)``)."""
        return int(repr(self.ticks)[6:-1])


class Dispatcher:
    """Routes calls of registered operations and Trueno-style selections for any name."""

    def __init__(self, *, config: RuntimeConfig, registry: OperationRegistry,
                 history: HistoryStore, policy: Policy, hot: HotPathDetector, gate: TraceGate,
                 devices: DeviceProbe, clock: Callable[[], float],
                 timer: Callable[[], int],
                 span_sink: Callable[[CallRecord], None] | None = None,
                 hot_sink: Callable[[HotPathTransition], None] | None = None) -> None:
        self._config = config
        self._registry = registry
        self._history = history
        self._policy = policy
        self._hot = hot
        self._gate = gate
        self._devices = devices
        self._clock = clock
        self._timer = timer
        self.span_sink = span_sink
        self.hot_sink = hot_sink
        self._lock = threading.Lock()
        # operation name -> (size_of, {bucket: entry}, operation); read lock-free by run()
        self._routes: dict[str, tuple[Callable[..., int], dict[int, _Entry], Operation]] = {}
        # (operation, backend, reason) -> calls; plain tuples because this is counted per call
        self._selections: Counter[tuple[str, Backend, Reason]] = Counter()
        self._fallbacks: Counter[tuple[str, Backend, Backend]] = Counter()
        self._forced = config.force_backend
        self._enabled = tuple(b for b in Backend if b not in config.disabled_backends)

    # ------------------------------------------------------------------ the call

    def run(self, operation: str, /, *args: Any) -> Any:
        # Positional arguments only: ``**kwargs`` would cost a dict per call on this path.
        try:
            size_of, entries, op = self._routes[operation]
        except KeyError:
            self._registry.get(operation)  # raises UnknownOperationError naming the known ones
            raise
        n = size_of(*args)
        try:
            entry = entries.get(n.bit_length())
        except AttributeError:  # a size that is not a Python int (numpy integer, float, ...)
            entry = entries.get(size_bucket(n))
        if entry is not None:
            ticket = next(entry.ticks)
            if ticket & entry.mask:
                return entry.impl(*args)  # type: ignore[misc]
            return self._slow(op, entries, n, args, entry, ticket)
        return self._slow(op, entries, n, args, None, -1)

    def _slow(self, op: Operation, entries: dict[int, _Entry], n: int, args: tuple[Any, ...],
              entry: _Entry | None, ticket: int) -> Any:
        bucket = size_bucket(n)  # validates what size_of returned
        operation = op.name
        with self._lock:
            now = self._clock()
            if entry is None:
                entry = entries.get(bucket)
                if entry is None:
                    entry = entries[bucket] = _Entry(bucket, self._candidates_of(op, n))
                calls = 1
            else:
                # tickets counted..ticket-1 ran on the fast path since this key's last visit
                fast = ticket - entry.counted
                if fast > 0 and entry.backend is not None:
                    self._selections[(operation, entry.backend, _EXPLOIT)] += fast
                calls = fast + 1 if fast > 0 else 1
                if ticket + 1 > entry.counted:
                    entry.counted = ticket + 1
            key = self._history.key(operation, bucket)
            transition = self._hot.observe(operation, calls, now)
            decision = self._decide(key, entry.candidates, now)
            self._selections[(operation, decision.backend, decision.reason)] += 1
        if transition is not None and self.hot_sink is not None:
            self.hot_sink(transition)
        return self._execute(op, key, entry, n, decision, args, calls)

    def _execute(self, op: Operation, key: KeyHistory, entry: _Entry, n: int, decision: Decision,
                 args: tuple[Any, ...], calls: int) -> Any:
        backend = decision.backend
        errors: dict[Backend, BaseException] = {}
        undo: list[tuple[ArmStats, int, float]] = []
        timer = self._timer
        while True:
            impl = op.implementation_for(backend)
            if impl is None:
                raise BackendUnavailableError(
                    f"operation {op.name!r} has no {backend.value} implementation "
                    f"(it has: {', '.join(b.value for b in op.backends) or 'none'})")
            compile_count = impl.compile_count
            compiled_before = compile_count() if compile_count is not None else 0
            start_ns = timer()
            try:
                result = impl.fn(*args)
            except Exception as exc:
                end_ns = timer()
                errors[backend] = exc
                with self._lock:
                    stats = key.arm(backend)
                    undo.append((stats, stats.consecutive_failures, stats.quarantined_until_s))
                    self._history.record_failure(key, backend, self._clock())
                    if key.incumbent is backend:
                        key.incumbent = None  # re-decide from the remaining arms
                        stats.disarm_drift_detection()
                    nxt = self._fallback_after(key, entry.candidates, errors)
                    if nxt is not None:
                        self._fallbacks[(op.name, backend, nxt)] += 1
                    else:
                        # Every arm failed on this input: that says nothing about which arm
                        # is bad (usually the input is), so lift this call's quarantines.
                        for arm_stats, consecutive, until in undo:
                            arm_stats.consecutive_failures = consecutive
                            arm_stats.quarantined_until_s = until
                    self._refresh(entry, key, op)
                    verdict = self._verdict(key, decision, math.inf, calls, True)
                if verdict is not None:
                    self._emit(op.name, n, entry.bucket, decision, backend, start_ns, end_ns,
                               exc, nxt, verdict)
                if nxt is None:
                    raise AllBackendsFailedError(op.name, errors) from exc
                decision = Decision(nxt, Reason.FALLBACK, 0.0, decision.estimates_us,
                                    decision.samples)
                backend = nxt
                continue
            end_ns = timer()
            duration_us = (end_ns - start_ns) / 1000.0
            # A call that compiled a kernel measured the compiler, not the kernel.
            warm_up = compile_count is not None and compile_count() != compiled_before
            with self._lock:
                if not warm_up:
                    self._history.record(key, backend, duration_us)
                self._refresh(entry, key, op)
                verdict = self._verdict(key, decision, duration_us, calls, False)
            if verdict is not None:
                self._emit(op.name, n, entry.bucket, decision, backend, start_ns, end_ns, None,
                           None, verdict)
            return result

    # ------------------------------------------------------------------ decisions

    def _decide(self, key: KeyHistory, candidates: tuple[Backend, ...], now: float) -> Decision:
        """Ask the policy and apply what its answer implies to the key. Caller holds the lock."""
        if self._forced is not None:
            key.decisions += 1
            stats = key.arms.get(self._forced)
            return Decision(self._forced, Reason.FORCED, 1.0,
                            {self._forced: stats.estimate_us} if stats else {},
                            stats.samples if stats else 0)
        decision = self._policy.decide(key, candidates, now)
        key.decisions += 1
        reason = decision.reason
        if reason is _EXPLOIT:
            if key.incumbent is not decision.backend:
                key.commit(decision.backend, self._config.recheck_interval)
            if key.memo is not decision:
                key.memo = decision
                key.memo_until = key.decisions + _MEMO_DECISIONS
        elif reason is Reason.RECHECK:
            key.rechecks += 1
            # the choice held until now: look again later, then later still
            key.recheck_interval = min(key.recheck_interval * 2,
                                       self._config.recheck_interval * 64)
            key.next_recheck = key.decisions + key.recheck_interval
        elif reason is Reason.DRIFT:
            key.start_epoch()
        return decision

    def _fallback_after(self, key: KeyHistory, candidates: Sequence[Backend],
                        tried: Mapping[Backend, BaseException]) -> Backend | None:
        """Next arm for a call whose arms in ``tried`` raised: fastest known first."""
        left = [b for b in candidates if b not in tried]
        if not left:
            return None

        def rank(b: Backend) -> tuple[float, int]:
            stats = key.arms.get(b)
            est = stats.estimate_us if stats is not None and stats.epoch_samples else math.nan
            return (est if not math.isnan(est) else math.inf, candidates.index(b))

        return min(left, key=rank)

    def _refresh(self, entry: _Entry, key: KeyHistory, op: Operation) -> None:
        """Point the key's fast path at its committed arm, timed 1-in-N. Caller holds the lock."""
        target = self._forced if self._forced is not None else key.incumbent
        stats = key.arms.get(target) if target is not None else None
        if stats is None or not stats.epoch_samples or stats.consecutive_failures:
            entry.mask = 0
            return
        impl = op.implementation_for(target)  # type: ignore[arg-type]
        if impl is None:
            entry.mask = 0
            return
        # impl before mask: a racing reader never sees a mask > 0 with no kernel
        entry.impl = impl.fn
        entry.backend = target
        entry.mask = measure_period(stats.mean_us, self._config.sampling_threshold_us,
                                    self._config.max_measure_period) - 1

    def _verdict(self, key: KeyHistory, decision: Decision, duration_us: float, calls: int,
                 failed: bool) -> TraceVerdict | None:
        """The trace gate's verdict when it is exported; ``None`` when not (or no sink).

        With no span sink attached nothing could be exported, so the gate is not consulted:
        a runtime without telemetry pays nothing for tracing. Caller holds the lock.
        """
        if self.span_sink is None:
            return None
        now = self._clock()
        verdict = self._gate.admit((key.operation, key.bucket), decision.reason, duration_us,
                                   self._hot.is_hot(key.operation, now), key.decisions == 1,
                                   failed, calls, now)
        return verdict if verdict.export else None

    def _emit(self, operation: str, n: int, bucket: int, decision: Decision, backend: Backend,
              start_ns: int, end_ns: int, error: BaseException | None,
              fallback_to: Backend | None, verdict: TraceVerdict) -> None:
        sink = self.span_sink
        if sink is not None:
            sink(CallRecord(operation, n, bucket, decision, backend, start_ns, end_ns, error,
                            fallback_to, verdict))

    # ------------------------------------------------------------------ candidates

    def _candidates_of(self, op: Operation, n: int) -> tuple[Backend, ...]:
        backends = op.backends
        if not backends:
            raise RegistrationError(
                f"operation {op.name!r} has no implementation; add one with "
                f"@op.implementation(Backend.SIMD) (or GPU / SCALAR)")
        if self._forced is not None:
            if self._forced not in backends:
                raise BackendUnavailableError(
                    f"backend {self._forced.value!r} is forced but operation {op.name!r} has "
                    f"no {self._forced.value} implementation "
                    f"(it has: {', '.join(b.value for b in backends)})")
            return (self._forced,)
        usable = [b for b in backends if b in self._enabled and self._devices.available(b)]
        if not usable:
            raise BackendUnavailableError(
                f"operation {op.name!r} has implementations for "
                f"{', '.join(b.value for b in backends)}, none of which can run here "
                f"(enabled and available: {', '.join(self._available_arms()) or 'none'})")
        return heuristic_order(op.kind, n, usable)

    def _available_arms(self) -> list[str]:
        return [b.value for b in self._enabled if self._devices.available(b)]

    def candidates_for_name(self, operation: str, n: int) -> tuple[Backend, ...]:
        """Candidate arms for any operation name (registered or not), in heuristic order."""
        op = self._registry.find(operation)
        if op is not None and op.backends:
            return self._candidates_of(op, n)
        if self._forced is not None:
            return (self._forced,)
        usable = [b for b in self._enabled if self._devices.available(b)]
        kind = op.kind if op is not None and op.kind is not Kind.OTHER else infer_kind(operation)
        return heuristic_order(kind, n, usable)

    # ------------------------------------------------------------------ Trueno-style API

    def select(self, operation: str, n: int) -> Decision:
        bucket = size_bucket(n)
        candidates = self.candidates_for_name(operation, n)
        with self._lock:
            now = self._clock()
            key = self._history.key(operation, bucket)
            transition = self._hot.observe(operation, 1, now)
            decision = self._decide(key, candidates, now)
            self._selections[(operation, decision.backend, decision.reason)] += 1
            self._refresh_route(operation, bucket, key)
        if transition is not None and self.hot_sink is not None:
            self.hot_sink(transition)
        return decision

    def explain(self, operation: str, n: int) -> Decision:
        bucket = size_bucket(n)
        candidates = self.candidates_for_name(operation, n)
        with self._lock:
            key = self._history.find(operation, bucket)
            if self._forced is not None:
                stats = key.arms.get(self._forced) if key is not None else None
                return Decision(self._forced, Reason.FORCED, 1.0,
                                {self._forced: stats.estimate_us} if stats else {},
                                stats.samples if stats else 0)
            return self._policy.decide(key, candidates, self._clock())

    def record(self, operation: str, n: int, backend: Backend, duration_us: float) -> None:
        bucket = size_bucket(n)
        with self._lock:
            key = self._history.key(operation, bucket)
            self._history.record(key, backend, duration_us)
            self._refresh_route(operation, bucket, key)

    def best(self, operation: str, n: int) -> Backend | None:
        bucket = size_bucket(n)
        candidates = self.candidates_for_name(operation, n)
        with self._lock:
            key = self._history.find(operation, bucket)
            if key is None:
                return None
            return best_arm(candidates, key.arms)

    def is_hot(self, operation: str) -> bool:
        with self._lock:
            return self._hot.is_hot(operation, self._clock())

    def _refresh_route(self, operation: str, bucket: int, key: KeyHistory) -> None:
        route = self._routes.get(operation)
        if route is not None and bucket in route[1]:
            self._refresh(route[1][bucket], key, route[2])

    # ------------------------------------------------------------------ routes and counts

    def add_route(self, op: Operation) -> None:
        with self._lock:
            self._routes[op.name] = (op.size_of, {}, op)

    def reset_route(self, operation: str) -> None:
        """Forget fast-path entries of ``operation`` (its arms changed); counts are kept."""
        with self._lock:
            route = self._routes.get(operation)
            if route is not None:
                for entry in list(route[1].values()):
                    self._flush(operation, entry)
                route[1].clear()

    def forget(self, operation: str, bucket: int) -> None:
        """History dropped this key (LRU or reset): drop its fast-path entry. Lock held."""
        route = self._routes.get(operation)
        if route is not None:
            entry = route[1].pop(bucket, None)
            if entry is not None:
                self._flush(operation, entry)
                entry.mask = 0  # threads still holding it go to the slow path

    def _flush(self, operation: str, entry: _Entry) -> None:
        issued = entry.issued()
        fast = issued - entry.counted
        if fast > 0 and entry.backend is not None:
            self._selections[(operation, entry.backend, _EXPLOIT)] += fast
        entry.counted = max(entry.counted, issued)

    def selection_counts(self) -> dict[SelectionKey, int]:
        """Every call counted by (operation, arm, reason), fast-path calls included."""
        with self._lock:
            for operation, (_size_of, entries, _op) in self._routes.items():
                for entry in entries.values():
                    self._flush(operation, entry)
            return {SelectionKey(*k): n for k, n in self._selections.items() if n}

    def fallback_counts(self) -> dict[tuple[str, Backend, Backend], int]:
        with self._lock:
            return dict(self._fallbacks)

    @property
    def lock(self) -> threading.Lock:
        return self._lock
