"""The hot path of one call: select → execute → measure → learn → (trace).

Fast path (a converged key, a call not chosen for timing): two dict lookups, the operation's
``size_of`` (and its input-family classifier, where it has one: calls of another family — torch
tensors, JAX arrays, inputs already on the GPU — go to the operation's twin for that family),
``int.bit_length`` and one ``next()`` on the key's ``itertools.count``, then the kernel. No
lock, no clock read, no allocation. ``next()`` on an ``itertools.count`` is a single C call, so
concurrent threads each get a distinct ticket and no call goes uncounted.

A ticket ``t`` with ``t & mask == 0`` (every call, for a key still being explored) is a timed
call: it runs the arm decided for it in advance, between two timer reads, then takes the lock
once to count itself, feed the hot-path rate, learn from the timing, decide the key's next
timed call (following the exploration plan when there is one, else asking the policy) and
point the fast path at the committed arm, timed 1-in-N — N set by what learning from a timing
was measured to cost (a third timer read, after the lock).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import threading
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from ._forks import renew_after_fork
from ._results import (
    compare_values,
    describe_signature,
    input_signature,
    result_signature,
    signatures_agree,
)
from .backend import Backend
from .config import RuntimeConfig
from .errors import (
    AllBackendsFailedError,
    BackendUnavailableError,
    RegistrationError,
    ResultMismatchError,
)
from .gating import (
    TIMED_CALL_COST_US,
    HotPathDetector,
    HotPathTransition,
    OperationRate,
    TraceGate,
    TraceVerdict,
    measure_period,
)
from .history import ArmStats, HistoryStore, KeyHistory
from .keys import size_bucket
from .operations import (
    DEVICE_FAMILY,
    DeviceProbe,
    Implementation,
    Kind,
    Operation,
    OperationRegistry,
    infer_kind,
)
from .policy import (
    Decision,
    KeyState,
    Policy,
    Reason,
    Step,
    best_arm,
    heuristic_order,
    heuristic_preference,
)

__all__ = ["CallRecord", "Dispatcher", "SelectionKey"]

_log = logging.getLogger(__name__)

MAX_SELECT_LABELS = 256
RETIRED_ENTRIES = 1024
OTHER_LABEL = "_other"

_EXPLOIT = Reason.EXPLOIT  # a module global: one dict lookup instead of two on the slow path
_RECHECK = Reason.RECHECK
# EWMA weight of one timed call's measured cost (see _Entry.timing_cost_us).
_COST_ALPHA = 0.125
# A committed arm whose Page-Hinkley statistic is above this (one timing ~2x its baseline, or a
# few at 1.5x) looks slower than it was: it is timed more often (gating.SUSPECT_SPAN_US) until
# the statistic falls back or alarms, so a slowdown raises the alarm within a few calls.
_SUSPECT_DRIFT = 1.0
# Input signatures (argument shapes and dtypes) per key whose expected result signature is
# kept for the wrong-shape check (see Dispatcher._check_result); calls of further signatures
# on the key are not checked.
_MAX_SIGNATURES = 16


@dataclass(frozen=True, slots=True)
class SelectionKey:
    """Labels of one selection counter: bounded (registered names, three arms, seven reasons)."""

    operation: str
    backend: Backend
    reason: Reason


class CallRecord(NamedTuple):
    """What one timed call did, handed to the span sink right after the call. Times are the
    runtime timer's nanoseconds. (A NamedTuple: built in the loop, so it must be cheap.)"""

    operation: str
    input_size: int
    size_bucket: int
    decision: Decision
    backend: Backend
    select_start_ns: int
    start_ns: int
    end_ns: int
    error: BaseException | None
    fallback_to: Backend | None
    verdict: TraceVerdict


# An operation's candidate arms for one cold-start preference, and their implementations.
_Arms = tuple[tuple[Backend, ...], dict[Backend, Implementation]]


class _Entry:
    """Fast-path state of one (operation, size bucket). Mutated in place, never replaced, so
    tickets taken by racing threads are never lost.

    Counting without a per-call lock: every call that finds the entry takes a ticket from
    ``ticks``; a timed call also takes one from ``timed`` before anything else, and counts
    itself under the lock. So fast calls = tickets - timed tickets, exactly, whenever no call
    is between its two ``next()``; :meth:`Dispatcher._flush` adds them to the counters.
    """

    __slots__ = ("backend", "bucket", "candidates", "expected", "fast_flushed", "fast_label",
                 "impl", "impls", "key", "last_ticket", "last_timed_s", "mask", "next", "rate",
                 "state", "ticks", "timed", "timed_exploits", "timing_cost_us")

    def __init__(self, key: KeyHistory, state: KeyState, arms: _Arms,
                 rate: OperationRate) -> None:
        self.key = key
        self.state = state  # the policy's state of the key
        self.rate = rate
        self.bucket = key.bucket
        self.candidates, self.impls = arms
        self.ticks = itertools.count()
        self.timed = itertools.count()
        self.mask = 0  # 0: every call takes the slow path
        self.impl: Callable[..., Any] | None = None
        self.backend: Backend | None = None
        self.last_ticket = -1  # ticket of the latest timed call (for the call rate)
        self.last_timed_s: float | None = None  # ...and when it was learned from
        self.fast_flushed = 0  # fast calls already added to the counters
        # timed calls that ran the fast path's arm as a plain exploit: counted with the fast
        # calls, not in the dispatcher's counter (one int here, not a dict update of a tuple
        # key: a timed call's bookkeeping is dominated by the memory it touches)
        self.timed_exploits = 0
        self.fast_label: tuple[str, Backend, Reason] | None = None  # ...and where
        # the decision for the key's next timed call, made when the previous one was learned
        # from (so a timed call takes the lock once); None: decide when the call comes
        self.next: Decision | None = None
        # what learning from a timed exploit call of this key costs (EWMA of the time from
        # the kernel's end to the lock's release): sets the fast path's timing period.
        # Updated outside the lock: a lost update only delays the estimate.
        self.timing_cost_us = TIMED_CALL_COST_US
        # input signature -> (result signature, the arm that answered first): what every
        # arm must return for such inputs (see Dispatcher._check_result)
        self.expected: dict[Any, tuple[tuple[Any, Any], Backend]] = {}

    def fast_calls(self) -> int:
        """Calls that took the fast path so far, and timed plain exploits of its arm."""
        return _issued(self.ticks) - _issued(self.timed) + self.timed_exploits


def _issued(counter: itertools.count) -> int:
    """Numbers handed out by an ``itertools.count()``, read without taking one (its ``repr``
    is ``count(N)``)."""
    return int(repr(counter)[6:-1])


# How run() finds a registered operation's entries: (size_of, {bucket: entry}, operation,
# family route). The family route, where the operation has input families (a ``family`` hook,
# or an ``on_device`` hook where the GPU arm can run), is (classifier, {family: ({bucket:
# entry}, twin)}): the classifier names a call's family ("" for the default one), and calls of
# another family go to the operation's twin for it (see Operation.family_twin).
# (An untimed family's twin is (None, the function that runs its calls).)
_Twins = dict[str, tuple[dict[int, _Entry], Operation]]
_FamilyRoute = tuple[Callable[..., str], _Twins]
_Route = tuple[Callable[..., int], dict[int, _Entry], Operation, _FamilyRoute | None]


def _warmed(op: Operation, backend: Backend) -> bool:
    """Mark ``backend`` warm on ``op`` after its first call (of an implementation registered
    with ``warm_up``), whose timing is not learned: it paid for what a library sets up on
    first use — dispatch caches, thread pools, allocator arenas, the first touch of its code
    (a first ATen call here took 3.8 ms, the fifth 22 us). Returns ``False``: nothing to learn
    from this call."""
    op.warmed.add(backend)
    return False


def _relabelled(transition: HotPathTransition, label: str) -> HotPathTransition:
    """``transition`` under the counter label of its operation: a ``select()`` name past the
    label cap becomes ``OTHER_LABEL`` in the hot-path span too (bounded span names)."""
    return HotPathTransition(label, transition.entered, transition.calls_per_sec,
                             transition.suppressed)


def _default_family(*_args: Any) -> str:
    return ""


def _floors(operation: str, impls: Mapping[Backend, Implementation],
            args: tuple[Any, ...]) -> dict[Backend, float] | None:
    """Each arm's ``floor_us`` for a key's first call (``None``: no arm has one). A floor
    that cannot be worked out is left out: it only ever spares an arm a trial."""
    floors: dict[Backend, float] = {}
    for backend, impl in impls.items():
        if impl.floor_us is not None:
            try:
                floors[backend] = float(impl.floor_us(*args))
            except Exception as exc:  # e.g. a broken device: the arm is simply tried
                _log.debug("no floor for %s on %s: %s", operation, backend.value, exc)
    return floors or None


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
        if policy.config.recheck_interval != config.recheck_interval:
            # (the re-check interval is set on RuntimeConfig; the policy carries it out)
            policy = Policy(dataclasses.replace(policy.config,
                                                recheck_interval=config.recheck_interval))
        self._policy = policy
        # the policy's state of each key: key id -> (the key's history, its state), dropped
        # with the key (forget); a key made anew gets a new state
        self._states: dict[tuple[str, int], tuple[KeyHistory, KeyState]] = {}
        self._hot = hot
        self._gate = gate
        self._devices = devices
        self._clock = clock
        self._timer = timer
        self.span_sink = span_sink
        self.hot_sink = hot_sink
        # (operation, backend, duration_us) of every timed call, for the duration histogram
        self.duration_sink: Callable[[tuple[str, Backend, float]], None] | None = None
        # (operation, size, arm, duration_us, time_s, calls) of every timing learned, for a
        # call recorder (replay.record_calls); called with the lock held
        self.call_sink: Callable[[tuple[str, int, Backend, float, float, int]], None] | None \
            = None
        self._lock = threading.Lock()
        # (the history saver and the metric reader's callbacks take it on their threads: a
        # forked child gets a fresh one, see _forks)
        renew_after_fork(self, Dispatcher._renew_lock)
        # operation name -> (size_of, {bucket: entry}, operation, family route or None); read
        # lock-free by run(). Family twins have routes of their own (no family route).
        self._routes: dict[str, _Route] = {}
        # bumped whenever routes are reset: routes kept by call sites (see route()) are stale
        self.generation = 0
        # (operation, backend, reason) -> calls; plain tuples because this is counted per call
        self._selections: Counter[tuple[str, Backend, Reason]] = Counter()
        self._fallbacks: Counter[tuple[str, Backend, Backend]] = Counter()
        self._select_labels: set[str] = set()
        self._retired: deque[tuple[str, _Entry]] = deque(maxlen=RETIRED_ENTRIES)
        # registered operations' call-rate state, pinned in the detector
        self._rates: dict[str, OperationRate] = {}
        self._arms_cache: dict[tuple[str, tuple[Backend, ...]], _Arms] = {}
        # hot-path transitions seen under the lock, handed to hot_sink outside it
        self._pending_transitions: list[HotPathTransition] = []
        self._forced = config.force_backend
        self._min_samples = policy.config.min_samples
        self._enabled = tuple(b for b in Backend if b not in config.disabled_backends)
        # validation mode: calls whose ticket is a multiple of 2**k are re-run on another arm
        # and compared (-1: off). Such calls are always timed, so the fast path is unchanged.
        rate = config.validate_sample_rate
        self._validate_mask = (1 << max(0, round(-math.log2(rate)))) - 1 if rate > 0 else -1
        self._reported: set[tuple[str, Backend]] = set()  # wrong results logged (once each)

    # ------------------------------------------------------------------ the call

    def run(self, operation: str, /, *args: Any) -> Any:
        # Positional arguments only: ``**kwargs`` would cost a dict per call on this path.
        op, entries, n = self.route(operation, args)
        return self.run_routed(op, entries, n, args)

    def route(self, operation: str, args: tuple[Any, ...]) -> tuple[Any, Any, int]:
        """Where a call of ``operation`` with ``args`` goes: ``(operation or its family twin,
        that one's entries, the call's size)`` — checked (``size_of`` raises for bad inputs).
        For an untimed family the entries are ``None`` and the first item is the function
        that runs its calls.

        A call site that sees the same input signature again and again (an adapted torch
        module) may keep a route per signature and call :meth:`run_routed` with it, skipping
        the checks: a kept route holds while :attr:`generation` is unchanged.
        """
        try:
            size_of, entries, op, families = self._routes[operation]
        except KeyError:
            self._registry.get(operation)  # raises UnknownOperationError naming the known ones
            raise
        n = size_of(*args)
        if families is not None:
            family = families[0](*args)
            if family:  # not the default family: the operation's twin for it
                try:
                    entries, op = families[1][family]
                except KeyError:
                    entries, op = self._add_family(op, family)
        return op, entries, n

    def run_routed(self, op: Any, entries: dict[int, _Entry] | None, n: int,
                   args: tuple[Any, ...]) -> Any:
        """Run a call routed by :meth:`route`: its arm picked, timed or not, and learned."""
        if entries is None:  # a family run untimed (Operation.add_untimed): ``op`` is the
            return op(*args)  # function that runs it
        try:
            entry = entries.get(n.bit_length())
        except AttributeError:  # a size that is not a Python int (numpy integer, float, ...)
            entry = entries.get(size_bucket(n))
        if entry is not None:
            ticket = next(entry.ticks)
            if ticket & entry.mask:
                try:  # (free in CPython 3.11+ while nothing is raised)
                    return entry.impl(*args)  # type: ignore[misc]
                except Exception as exc:
                    return self._fast_failure(op, entry, n, args, ticket, exc)
            return self._slow(op, entries, n, args, entry, ticket)
        return self._slow(op, entries, n, args, None, -1)

    def _fast_failure(self, op: Operation, entry: _Entry, n: int, args: tuple[Any, ...],
                      ticket: int, exc: Exception) -> Any:
        """The committed arm raised on an untimed call: fall back as a timed call would."""
        next(entry.timed)  # counted with the fallback, not as a fast call (see _Entry)
        now_ns = self._timer()
        decision = Decision(entry.backend, _EXPLOIT)  # type: ignore[arg-type]
        return self._recover(op, entry, n, decision, args, ticket, exc, now_ns, now_ns, now_ns)

    def _slow(self, op: Operation, entries: dict[int, _Entry], n: int, args: tuple[Any, ...],
              entry: _Entry | None, ticket: int) -> Any:
        """A call that is timed: run the arm decided for it, then (one lock) learn and decide
        the key's next timed call."""
        timer = self._timer
        select_ns = timer() if self.span_sink is not None else 0  # the select span's start
        if ticket >= 0:
            next(entry.timed)  # type: ignore[union-attr]  # see _Entry: keeps counts exact
        decision = entry.next if entry is not None else None
        if decision is None:
            # validate what size_of returned (size_bucket raises a clear error)
            entry, decision = self._first_decision(op, entries, n, size_bucket(n), args)
        elif n < 0:
            size_bucket(n)  # raises: a negative size found the bucket of its bit length
        backend = decision.backend
        impl = entry.impls[backend]
        compile_count = impl.compile_count
        compiled_before = compile_count() if compile_count is not None else 0
        sync = impl.sync
        if sync is not None:  # (asynchronous inputs: their own work is not this call's)
            sync(args)
        start_ns = timer()
        try:
            result = impl.fn(*args)
            if sync is not None:
                sync(result)
        except Exception as exc:
            return self._recover(op, entry, n, decision, args, ticket, exc, select_ns, start_ns,
                                 timer())
        end_ns = timer()
        wrong = self._check_result(op, entry, backend, args, result, ticket)
        if wrong is not None:  # a wrong result is the arm's failure
            return self._recover(op, entry, n, decision, args, ticket, wrong, select_ns,
                                 start_ns, end_ns)
        duration_us = (end_ns - start_ns) / 1000.0
        if impl.surcharge_us is not None:  # what the arm costs later (its backward pass)
            duration_us += impl.surcharge_us(*args)
        # A call that compiled a kernel measured the compiler, not the kernel; the first call
        # of a library arm of an operation (each family apart) measured its lazy set-up.
        learn = compile_count is None or compile_count() == compiled_before
        if learn and impl.warm_up and backend not in op.warmed:
            learn = _warmed(op, backend)
        with self._lock:
            verdict = self._settle(op, entry, decision, ticket, duration_us if learn else None,
                                   False, n)
        if decision.reason is _EXPLOIT:
            # What learning from a committed key's call cost, for the period of its fast path:
            # far more between large calls (cold caches) than in a tight loop, so it is
            # measured, not assumed. (Exploring calls, which ask the policy, are not typical.)
            cost_us = (timer() - end_ns) / 1000.0
            entry.timing_cost_us += (cost_us - entry.timing_cost_us) * _COST_ALPHA
        if self._pending_transitions:
            self._deliver_transitions()
        if verdict is not None:
            self._emit(op.name, n, entry.bucket, decision, backend, select_ns, start_ns, end_ns,
                       None, None, verdict)
        return result

    def _add_family(self, op: Operation, family: str) -> tuple[dict[int, _Entry], Operation]:
        """The route of ``op``'s twin for input family ``family``, made on its first call."""
        untimed = op.untimed(family)
        with self._lock:
            route = self._routes.get(op.name)
            if route is None or route[3] is None:  # (reset meanwhile: route this call anyway)
                return (None, untimed) if untimed else ({}, op.family_twin(family))  # type: ignore[return-value]
            twins = route[3][1]
            found = twins.get(family)
            if found is not None:
                return found
            if untimed is not None:
                found = twins[family] = (None, untimed)  # type: ignore[assignment]
                return found
            twin = op.family_twin(family)
            twin_route = self._routes.get(twin.name)
            if twin_route is None:
                if twin.name not in self._rates:
                    self._rates[twin.name] = self._hot.state(twin.name, self._clock(), pin=True)
                twin_route = self._routes[twin.name] = (op.size_of, {}, twin, None)
            found = twins[family] = (twin_route[1], twin_route[2])
            return found

    def _family_route(self, op: Operation) -> _FamilyRoute | None:
        """The family route of a newly registered (or reset) operation: ``None`` without
        input families; else one whose classifier, on the first call, decides whether calls
        with inputs on the GPU get a route of their own (only where the GPU arm can run: the
        probe is left until a call needs it), then classifies from then on."""
        if op.on_device is None:
            return (op.family, {}) if op.family is not None else None
        twins: _Twins = {}

        def classify_first(*args: Any) -> str:
            return self._place(op, twins)(*args)

        return (classify_first, twins)

    def _place(self, op: Operation, twins: _Twins) -> Callable[..., str]:
        """Decide ``op``'s classifier on its first call: its ``on_device`` hook sends calls
        with inputs already on the GPU to the family ``"device"`` where its GPU arm can run
        here; its ``family`` hook names the other families."""
        family, on_device = op.family, op.on_device
        if not (Backend.GPU in op.backends and Backend.GPU in self._enabled
                and self._forced in (None, Backend.GPU)
                and self._devices.available(Backend.GPU)):
            on_device = None
        if on_device is None:
            classify = family if family is not None else _default_family
        elif family is None:
            def classify(*args: Any) -> str:
                return DEVICE_FAMILY if on_device(*args) else ""
        else:
            def classify(*args: Any) -> str:
                return DEVICE_FAMILY if on_device(*args) else family(*args)
        with self._lock:
            route = self._routes.get(op.name)
            if route is not None and route[3] is not None and route[3][1] is twins:
                self._routes[op.name] = (*route[:3], (classify, twins))
        return classify

    def _first_decision(self, op: Operation, entries: dict[int, _Entry], n: int,
                        bucket: int, args: tuple[Any, ...]) -> tuple[_Entry, Decision]:
        """Entry and decision for a call with nothing decided in advance (a new key, or the
        previous decision was invalidated)."""
        with self._lock:
            entry = entries.get(bucket)
            if entry is None:
                key = self._history.key(op.name, bucket)
                state = self._state_of(key)
                entry = entries[bucket] = _Entry(key, state, self._arms_of(op, n),
                                                 self._rates[op.name])
                for backend in entry.candidates:  # now, rather than on an exploring call
                    key.arm(backend)
                self._policy.set_floors(state, key, entry.candidates,
                                        _floors(op.name, entry.impls, args), self._history)
            decision = entry.next
            if decision is None:
                decision = self._decide(entry.key, entry.state, entry.candidates,
                                        self._clock())
            return entry, decision

    def _settle(self, op: Operation, entry: _Entry, decision: Decision, ticket: int,
                duration_us: float | None, failed: bool, n: int) -> TraceVerdict | None:
        """After a timed call: count it, learn from it, decide the key's next timed call and
        point the fast path at the committed arm. Caller holds the lock."""
        now = self._clock()
        calls = 1
        since = None
        if ticket >= 0:
            # this call and the fast ones since the key's previous timed call, for the rate
            gap = ticket - entry.last_ticket
            if gap > 0:
                calls = gap
                entry.last_ticket = ticket
                since = entry.last_timed_s
                entry.last_timed_s = now
        if decision.reason is _EXPLOIT and decision.backend is entry.backend:
            entry.timed_exploits += 1  # (see _Entry)
        else:
            self._selections[(op.name, decision.backend, decision.reason)] += 1
        transition = entry.rate.add(calls, now, since)
        if transition is not None and self.hot_sink is not None:
            self._pending_transitions.append(transition)
        key, state = entry.key, entry.state
        if not state.decisions & 15:
            self._history.touch(key)  # LRU recency, refreshed every 16th decision is enough
        if duration_us is not None:
            self._learn(key, state, decision, duration_us, n)
            if self.duration_sink is not None:
                self.duration_sink((op.name, decision.backend, duration_us))
            if self.call_sink is not None:
                self.call_sink((op.name, n, decision.backend, duration_us, now, calls))
        if self._forced is not None:
            entry.next = self._policy.forced(state, key, self._forced)
            self._refresh(entry, key)  # (a forced arm is never committed: a fast path too)
        else:
            entry.next, how = self._policy.next(state, key, entry.candidates, now,
                                                self._history, self.span_sink is not None)
            if how is Step.DECIDED:
                self._after_step(key, entry.next)
                if state.incumbent is not None or entry.mask:
                    self._refresh(entry, key)
            elif how is Step.REPEATED and entry.mask and state.drift_score > _SUSPECT_DRIFT:
                # Committed and nothing due (most timed calls of a converged key): the fast
                # path already points at the committed arm, timed at the period set with the
                # memo — more often while the arm looks slower than it was (_SUSPECT_DRIFT).
                self._refresh(entry, key)
        if self.span_sink is None:
            return None
        verdict = self._gate.admit(
            key.id, decision.reason, math.inf if duration_us is None else duration_us,
            entry.rate.hot, key.samples + key.failures <= 1, failed, calls, now)
        return verdict if verdict.export else None

    def _recover(self, op: Operation, entry: _Entry, n: int, decision: Decision,
                 args: tuple[Any, ...], ticket: int, exc: Exception, select_ns: int,
                 start_ns: int, end_ns: int) -> Any:
        """The chosen arm raised: record, quarantine, and run the next-best arm (repeatedly)."""
        errors: dict[Backend, BaseException] = {}
        undo: list[tuple[ArmStats, int, float]] = []
        key = entry.key
        timer = self._timer
        while True:
            backend = decision.backend
            errors[backend] = exc
            with self._lock:
                stats = key.arm(backend)
                undo.append((stats, stats.consecutive_failures, stats.quarantined_until_s))
                self._history.record_failure(key, backend, self._clock())
                self._policy.observe_failure(entry.state, backend)
                entry.next = None  # decided before this failure: decide again
                nxt = self._policy.fallback(key, entry.candidates, errors)
                if nxt is not None:
                    self._fallbacks[(op.name, backend, nxt)] += 1
                    self._refresh(entry, key)
                    verdict = self._verdict_for_failure(key, decision)
                else:
                    # Every arm failed on this input: that says nothing about which arm is
                    # bad (usually the input is), so lift this call's quarantines.
                    for arm_stats, consecutive, until in undo:
                        arm_stats.consecutive_failures = consecutive
                        arm_stats.quarantined_until_s = until
                    verdict = self._settle(op, entry, decision, ticket, None, True, n)
            if verdict is not None:
                self._emit(op.name, n, entry.bucket, decision, backend, select_ns, start_ns,
                           end_ns, exc, nxt, verdict)
            if self._pending_transitions:
                self._deliver_transitions()
            if nxt is None:
                raise AllBackendsFailedError(op.name, errors) from exc
            decision = Decision(nxt, Reason.FALLBACK, 0.0, decision.estimates_us,
                                decision.samples)
            impl = entry.impls[nxt]
            select_ns = timer()
            compile_count = impl.compile_count
            compiled_before = compile_count() if compile_count is not None else 0
            if impl.sync is not None:
                impl.sync(args)
            start_ns = timer()
            try:
                result = impl.fn(*args)
                if impl.sync is not None:
                    impl.sync(result)
            except Exception as next_exc:
                end_ns = timer()
                exc = next_exc
                continue
            end_ns = timer()
            wrong = self._check_result(op, entry, nxt, args, result, -1)
            if wrong is not None:
                exc = wrong
                continue
            duration_us = (end_ns - start_ns) / 1000.0
            if impl.surcharge_us is not None:
                duration_us += impl.surcharge_us(*args)
            learn = compile_count is None or compile_count() == compiled_before
            if learn and impl.warm_up and nxt not in op.warmed:
                learn = _warmed(op, nxt)
            with self._lock:
                verdict = self._settle(op, entry, decision, ticket,
                                       duration_us if learn else None, False, n)
            if verdict is not None:
                self._emit(op.name, n, entry.bucket, decision, nxt, select_ns, start_ns, end_ns,
                           None, None, verdict)
            return result

    # ------------------------------------------------------------------ wrong results

    def _check_result(self, op: Operation, entry: _Entry, backend: Backend,
                      args: tuple[Any, ...], result: Any,
                      ticket: int) -> ResultMismatchError | None:
        """The error of a wrong result of ``backend`` on a timed call, else ``None``.

        Every timed call (never a fast-path one) compares its result's shape and dtype with
        what the first arm to answer inputs of the same shapes and dtypes on this key
        returned: a few attribute reads and a dict lookup, inside the measured cost of a
        timed call that sets the fast path's timing period. In validation mode a sample of
        calls is also re-run on another arm and the values compared (:meth:`_validate`).
        """
        try:
            in_sig = input_signature(args)
            seen = entry.expected.get(in_sig)
        except Exception:  # a shape or dtype that cannot be read or hashed: not checked
            in_sig = seen = None
        if in_sig is not None:
            out_sig = result_signature(result)
            if seen is None:
                if len(entry.expected) < _MAX_SIGNATURES:
                    entry.expected[in_sig] = (out_sig, backend)
            elif not signatures_agree(seen[0], out_sig):
                wrong = self._settle_signatures(op, entry, backend, args, in_sig, out_sig,
                                                seen)
                if wrong is not None:
                    return wrong
        if self._validate_mask >= 0 and ((ticket >= 0 and not ticket & self._validate_mask)
                                         or self._on_trial(entry.key, backend)):
            return self._validate(op, entry, backend, args, result)
        return None

    def _on_trial(self, key: KeyHistory, backend: Backend) -> bool:
        """Whether ``backend`` is still being tried on ``key`` (its first timings in this
        epoch, or its first call back from a quarantine): validation mode checks each such
        call, so an arm that comes back wrong is not committed to on its word."""
        stats = key.arms.get(backend)
        return (stats is None or stats.epoch_samples < self._min_samples
                or stats.consecutive_failures > 0)

    def _settle_signatures(self, op: Operation, entry: _Entry, ran: Backend,
                           args: tuple[Any, ...], in_sig: Any, out_sig: tuple[Any, Any],
                           seen: tuple[tuple[Any, Any], Backend]) -> ResultMismatchError | None:
        """``ran`` answered with another signature than ``seen`` (the first answer to such
        inputs): a third arm, where one can run, says which is wrong; else the first answer
        stands (two arms alone cannot tell)."""
        ref_sig, ref_arm = seen
        third = self._witness(entry, (ran, ref_arm))
        if third is not None:
            ok, other = self._run_aside(entry, third, args)
            other_sig = result_signature(other)
            if ok and signatures_agree(other_sig, out_sig) and not signatures_agree(other_sig,
                                                                                   ref_sig):
                # the first answer was the wrong one: what ``ran`` returned is expected now
                # (list() copies in one step: another thread may add to the dict meanwhile)
                kept = [(k, v) for k, v in list(entry.expected.items()) if v[1] is not ref_arm]
                entry.expected = dict(kept)
                entry.expected[in_sig] = (out_sig, ran)
                if ref_arm is not ran:
                    self._quarantine(op, entry, ResultMismatchError(
                        op.name, ref_arm, ran,
                        f"{describe_signature(ref_sig)} where the {ran.value} and "
                        f"{third.value} arms return {describe_signature(out_sig)}"))
                return None
        return self._reported_error(ResultMismatchError(
            op.name, ran, ref_arm, f"{describe_signature(out_sig)} where the {ref_arm.value} "
            f"arm returned {describe_signature(ref_sig)} for inputs of the same shapes"))

    def _validate(self, op: Operation, entry: _Entry, ran: Backend, args: tuple[Any, ...],
                  result: Any) -> ResultMismatchError | None:
        """Validation mode: re-run this call on another arm and compare the values. On a
        mismatch, the side with NaN the other has none of is wrong; otherwise a third arm
        decides where one can run, else the arm being validated is taken to be wrong."""
        ref = self._witness(entry, (ran,))
        if ref is None:
            return None
        ok, expected = self._run_aside(entry, ref, args)
        if not ok:
            return None  # (the reference's own failures are found when it is chosen)
        mismatch = compare_values(result, expected)
        if mismatch is None:
            return None
        suspect = mismatch.suspect
        if not suspect:
            third = self._witness(entry, (ran, ref))
            ok, other = self._run_aside(entry, third, args) if third else (False, None)
            suspect = ("reference" if ok and compare_values(result, other) is None
                       and compare_values(expected, other) is not None else "result")
        if suspect == "reference":
            reverse = compare_values(expected, result)
            self._quarantine(op, entry, ResultMismatchError(
                op.name, ref, ran, reverse.detail if reverse else mismatch.detail))
            return None
        return self._reported_error(ResultMismatchError(op.name, ran, ref, mismatch.detail))

    def _witness(self, entry: _Entry, exclude: tuple[Backend, ...]) -> Backend | None:
        """The arm to compare a result with: the fastest known candidate not in ``exclude``
        and not quarantined, or ``None``."""
        key = entry.key
        with self._lock:
            now = self._clock()
            barred = {b: None for b in entry.candidates
                      if b in exclude or b not in entry.impls
                      or (b in key.arms and key.arms[b].quarantined_until_s > now)}
            return self._policy.fallback(key, entry.candidates, barred)

    @staticmethod
    def _run_aside(entry: _Entry, backend: Backend, args: tuple[Any, ...]) -> tuple[bool, Any]:
        """Run ``backend`` on a call's arguments to compare results: untimed, not learned from,
        its failure only means there is nothing to compare with."""
        impl = entry.impls[backend]
        try:
            if impl.sync is not None:
                impl.sync(args)
            result = impl.fn(*args)
            if impl.sync is not None:
                impl.sync(result)
        except Exception as exc:
            _log.debug("no result from %s to compare with: %r", backend.value, exc)
            return False, None
        return True, result

    def _quarantine(self, op: Operation, entry: _Entry, error: ResultMismatchError) -> None:
        """An arm other than the one that ran this call was found wrong: count its failure
        (quarantine with back-off) as if it had raised."""
        backend: Backend = error.backend  # type: ignore[assignment]
        key = entry.key
        with self._lock:
            self._history.record_failure(key, backend, self._clock())
            self._policy.observe_failure(entry.state, backend)
            entry.next = None
            self._refresh(entry, key)
        self._reported_error(error)

    def _reported_error(self, error: ResultMismatchError) -> ResultMismatchError:
        """Log a wrong result, once per operation and arm (its failures are counted, its
        fallbacks counted and traced as any failure's)."""
        tag = (error.operation, error.backend)
        if tag not in self._reported:
            self._reported.add(tag)  # (bounded: registered operations x three arms)
            _log.warning("%s; the arm is quarantined with back-off (logged once per operation "
                         "and arm)", error)
        return error

    def _deliver_transitions(self) -> None:
        with self._lock:
            transitions, self._pending_transitions = self._pending_transitions, []
        sink = self.hot_sink
        if sink is not None:
            for transition in transitions:
                sink(transition)

    def _verdict_for_failure(self, key: KeyHistory, decision: Decision) -> TraceVerdict | None:
        """Trace verdict for an arm that raised (the call goes on). Caller holds the lock."""
        if self.span_sink is None:
            return None
        now = self._clock()
        verdict = self._gate.admit(key.id, decision.reason, math.inf,
                                   self._hot_now(key.operation, now), False, True, 1, now)
        return verdict if verdict.export else None

    def _hot_now(self, operation: str, now: float) -> bool:
        """Whether ``operation`` is hot, queueing the leave transition that closing its stale
        window may produce (delivered after the lock). Caller holds the lock."""
        hot, transition = self._hot.check(operation, now)
        if transition is not None and self.hot_sink is not None:
            label = self._label(operation)
            self._pending_transitions.append(
                transition if label is operation else _relabelled(transition, label))
        return hot

    # ------------------------------------------------------------------ decisions

    def _state_of(self, key: KeyHistory) -> KeyState:
        """The policy's state of ``key`` (new for a key made anew). Lock held."""
        found = self._states.get(key.id)
        if found is None or found[0] is not key:
            found = self._states[key.id] = (key, KeyState())
        return found[1]

    def _decide(self, key: KeyHistory, state: KeyState, candidates: tuple[Backend, ...],
                now: float) -> Decision:
        """A full decision for ``key``, applied. Caller holds the lock."""
        if self._forced is not None:
            return self._policy.forced(state, key, self._forced)
        decision = self._policy.step(state, key, candidates, now, self._history,
                                     self.span_sink is not None)
        self._after_step(key, decision)
        return decision

    @staticmethod
    def _after_step(key: KeyHistory, decision: Decision) -> None:
        """What a full decision asks of the measured history: after a drift alarm, every
        arm is measured afresh (see Policy.step). Caller holds the lock."""
        if decision.reason is Reason.DRIFT:
            key.start_epoch()

    def _learn(self, key: KeyHistory, state: KeyState, decision: Decision,
               duration_us: float, n: int) -> None:
        """Learn one timing of a call of ``n`` elements run by ``decision``: into the key's
        history (replacing the arm's estimate where the policy re-measures it), then into the
        policy's state. Caller holds the lock."""
        backend = decision.backend
        if self._policy.remeasures(key, decision):
            key.arms[backend].start_epoch()
        learned_us = self._history.record(key, backend, duration_us, n)
        self._policy.observe(state, backend, learned_us)

    def _refresh(self, entry: _Entry, key: KeyHistory) -> None:
        """Point the key's fast path at its committed arm, timed 1-in-N. Caller holds the lock."""
        state = entry.state
        target = self._forced if self._forced is not None else state.incumbent
        stats = key.arms.get(target) if target is not None else None
        if stats is None or not stats.epoch_samples or stats.consecutive_failures:
            entry.mask = 0
            return
        impl = entry.impls.get(target)  # type: ignore[arg-type]
        if impl is None:
            entry.mask = 0
            return
        if entry.backend is not target and entry.backend is not None:
            self._flush(key.operation, entry)  # its fast calls so far ran the previous arm
        # impl before mask: a racing reader never sees a mask > 0 with no kernel
        entry.impl = impl.fn
        entry.backend = target
        # (never below the warm cost of a timed call: the measurement leaves out its clock
        # reads and the steps before the kernel)
        cost_us = entry.timing_cost_us
        mask = measure_period(
            stats.mean_us, cost_us if cost_us > TIMED_CALL_COST_US else TIMED_CALL_COST_US,
            self._config.max_measure_period, slow_call_us=self._config.sampling_threshold_us,
            suspect=target is state.incumbent and state.drift_score > _SUSPECT_DRIFT) - 1
        if mask > self._validate_mask >= 0:  # validation mode: sampled calls take this path
            mask = self._validate_mask
        entry.mask = mask

    def _emit(self, operation: str, n: int, bucket: int, decision: Decision, backend: Backend,
              select_ns: int, start_ns: int, end_ns: int, error: BaseException | None,
              fallback_to: Backend | None, verdict: TraceVerdict) -> None:
        sink = self.span_sink
        if sink is not None:
            sink(CallRecord(operation, n, bucket, decision, backend, select_ns, start_ns, end_ns,
                            error, fallback_to, verdict))

    # ------------------------------------------------------------------ candidates

    def _arms_of(self, op: Operation, n: int) -> _Arms:
        """Candidates of ``op`` at size ``n`` and their kernels, cached per preference order
        (there are three) until the operation's implementations change. Lock held."""
        cache_key = (op.name, heuristic_preference(op.kind, n))
        arms = self._arms_cache.get(cache_key)
        if arms is None:
            candidates = self._candidates_of(op, n)
            arms = self._arms_cache[cache_key] = (candidates, {
                b: impl for b in candidates if (impl := op.implementation_for(b)) is not None})
        return arms

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
        route = self._routes.get(operation)  # (a device twin is routed, not registered)
        op = route[2] if route is not None else self._registry.find(operation)
        if op is not None and op.backends:
            return self._candidates_of(op, n)
        if self._forced is not None:
            return (self._forced,)
        usable = [b for b in self._enabled if self._devices.available(b)]
        if not usable:  # (checked before anything is touched: a rejected call changes nothing)
            raise BackendUnavailableError(
                f"no arm can run operation {operation!r} here: every enabled arm "
                f"({', '.join(b.value for b in self._enabled)}) is unavailable on this machine")
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
            decision = self._decide(key, self._state_of(key), candidates, now)
            label = self._label(operation)
            self._selections[(label, decision.backend, decision.reason)] += 1
            self._refresh_route(operation, bucket, key)
            if transition is not None and label is not operation:
                transition = _relabelled(transition, label)
        if transition is not None and self.hot_sink is not None:
            self.hot_sink(transition)
        return decision

    def explain(self, operation: str, n: int) -> Decision:
        """The decision the next call of this key will run with, explained; changes nothing.

        For a registered operation that is the decision ``run()`` already holds for the key:
        the committed arm when the next call takes the fast path, else the decision made for
        the next timed call. Otherwise the policy's answer now (what ``select()`` returns).
        """
        bucket = size_bucket(n)
        candidates = self.candidates_for_name(operation, n)
        with self._lock:
            key = self._history.find(operation, bucket)
            if self._forced is not None:
                stats = key.arms.get(self._forced) if key is not None else None
                return Decision(self._forced, Reason.FORCED, 1.0,
                                {self._forced: stats.estimate_us} if stats else {},
                                stats.samples if stats else 0)
            route = self._routes.get(operation)
            entry = route[1].get(bucket) if route is not None else None
            state = self._state_of(key) if key is not None else KeyState()
            if entry is not None and key is not None and entry.key is key:
                fast_next = entry.mask and _issued(entry.ticks) & entry.mask
                pending = None if fast_next else entry.next
                if pending is not None:
                    return self._policy.explained(pending, state, key, entry.candidates)
            decision = self._policy.decide(state, key, candidates, self._clock())
            # (the key's memoised exploit may have been made without explanation)
            if key is None:
                return decision
            return self._policy.explained(decision, state, key, candidates)

    def record(self, operation: str, n: int, backend: Backend, duration_us: float) -> None:
        bucket = size_bucket(n)
        with self._lock:
            key = self._history.key(operation, bucket)
            learned = self._history.record(key, backend, duration_us, n)
            self._policy.observe(self._state_of(key), backend, learned)
            if self.call_sink is not None:
                self.call_sink((operation, n, backend, duration_us, self._clock(), 1))
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
            hot = self._hot_now(operation, self._clock())
        if self._pending_transitions:
            self._deliver_transitions()
        return hot

    def _refresh_route(self, operation: str, bucket: int, key: KeyHistory) -> None:
        route = self._routes.get(operation)
        if route is not None and bucket in route[1]:
            entry = route[1][bucket]
            entry.next = None  # decide afresh from what was just learned or selected
            self._policy.drop_plan(entry.state)
            self._refresh(entry, key)

    # ------------------------------------------------------------------ routes and counts

    def add_route(self, op: Operation) -> None:
        with self._lock:
            self._rates[op.name] = self._hot.state(op.name, self._clock(), pin=True)
            self._routes[op.name] = (op.size_of, {}, op, self._family_route(op))

    def reset_route(self, operation: str) -> None:
        """Forget fast-path entries of ``operation`` and of its family twins (its arms
        changed); counts are kept. Its twins (and its device route) are made again as calls
        of their families come."""
        with self._lock:
            route = self._routes.get(operation)
            if route is None:
                return
            self.generation += 1
            names = [operation]
            if route[3] is not None:
                for entries, twin in route[3][1].values():
                    if entries is not None:
                        names.append(twin.name)
                        self._routes.pop(twin.name, None)
                self._routes[operation] = (*route[:3], self._family_route(route[2]))
            for name in names:
                for cache_key in [k for k in self._arms_cache if k[0] == name]:
                    del self._arms_cache[cache_key]
            routed = [(operation, route[1])]
            if route[3] is not None:
                routed += [(twin.name, entries) for entries, twin in route[3][1].values()
                           if entries is not None]
            for name, entries in routed:
                for entry in entries.values():
                    self._retire(name, entry)
                entries.clear()

    def forget(self, operation: str, bucket: int) -> None:
        """History dropped this key (LRU or reset): drop its fast-path entry and the
        policy's state of it. Lock held."""
        self._states.pop((operation, bucket), None)
        route = self._routes.get(operation)
        if route is not None:
            entry = route[1].pop(bucket, None)
            if entry is not None:
                self._retire(operation, entry)

    def _retire(self, operation: str, entry: _Entry) -> None:
        # Threads may still hold the entry (a call in flight): its calls keep being counted
        # from the retired list, so none is lost or counted twice. Bounded: only calls that
        # stay on an entry through RETIRED_ENTRIES later retirements could go uncounted.
        entry.mask = 0  # new calls on it take the slow path
        self._flush(operation, entry)
        self._retired.append((operation, entry))

    def _label(self, operation: str) -> str:
        """The counter label of ``operation``: its name if registered or among the first
        ``MAX_SELECT_LABELS`` names given to ``select()``, else ``OTHER_LABEL`` — counters
        (and metric attributes) stay bounded whatever names callers invent. Lock held."""
        if operation in self._routes or operation in self._select_labels:
            return operation
        if len(self._select_labels) < MAX_SELECT_LABELS:
            self._select_labels.add(operation)
            return operation
        return OTHER_LABEL

    def _flush(self, operation: str, entry: _Entry) -> None:
        """Add the entry's fast-path calls since the last flush to the counters. Lock held."""
        fast = entry.fast_calls()
        delta = fast - entry.fast_flushed
        if delta > 0 and entry.backend is not None:
            entry.fast_label = (operation, entry.backend,
                                _EXPLOIT if self._forced is None else Reason.FORCED)
        label = entry.fast_label
        if delta and label is not None:
            # (a negative delta undoes a call counted fast while it was between its two
            # tickets; it is taken back from where it was added)
            self._selections[label] += delta
            entry.fast_flushed = fast

    def selection_counts(self) -> dict[SelectionKey, int]:
        """Every call counted by (operation, arm, reason), fast-path calls included."""
        with self._lock:
            for operation, (_size_of, entries, _op, _device) in self._routes.items():
                for entry in entries.values():
                    self._flush(operation, entry)
            for operation, entry in self._retired:
                self._flush(operation, entry)
            return {SelectionKey(*k): n for k, n in self._selections.items() if n}

    def hot_operations(self) -> list[str]:
        with self._lock:
            return self._hot.hot_operations()

    def fallback_counts(self) -> dict[tuple[str, Backend, Backend], int]:
        with self._lock:
            return dict(self._fallbacks)

    @property
    def lock(self) -> threading.Lock:
        return self._lock

    def _renew_lock(self) -> None:
        self._lock = threading.Lock()

    def spans_admitted(self) -> int:
        """Calls whose spans the trace gate admitted so far (read without the lock)."""
        return self._gate.admitted

    def admit_step(self, duration_us: float, failed: bool, admitted_before: int) -> float:
        """The trace gate's verdict on a training step's span (its weight; 0.0: not
        exported); ``admitted_before`` = :meth:`spans_admitted` when the step began.

        Without the lock: only step ends touch the step budget, and steps on two threads at
        once can at worst lose an update to it (a span more or less), never a call's data."""
        gate = self._gate
        return gate.admit_step(duration_us, failed=failed,
                               parent_of_spans=gate.admitted != admitted_before)
