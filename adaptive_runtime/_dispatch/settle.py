"""After a timed call, under the lock: count it, feed the hot-path rate, learn the timing
(through the policy's :class:`~adaptive_runtime.policy.Learner`, the one learning loop),
decide the key's next timed call and point the fast path at the committed arm
(:class:`~adaptive_runtime._dispatch.period.Periods`)."""

from __future__ import annotations

import logging
from typing import Any

from .._concurrency.thread_faults import revive_threads, survive
from .._imported import loaded_frameworks
from .._load import latest as latest_load
from .._load import poll as poll_load
from ..backend import Choice
from ..decision import Decision, Reason
from ..gating import KEY_TIMING_SHARE, OperationRate
from ..history import KeyHistory
from ..operations import DeviceTiming, Operation
from ..policy import KeyState, Step
from ..records import TraceVerdict
from ..telemetry.instrumentation import notice_providers
from ..threads import ThreadWatch
from .candidates import Candidates, floors
from .core import Core
from .emission import Emission
from .entry import TALLY_REASON, Entry, Route
from .period import SUSPECT_DRIFT_SLOW, Periods, suspect
from .pool_phase import TorchPool

_log = logging.getLogger(__name__)

# module globals: one dict lookup instead of two on the slow path
_EXPLOIT = Reason.EXPLOIT
_DECIDED = Step.DECIDED
_REPEATED = Step.REPEATED

# Timings made on a device and not ready yet are kept at most this many (the oldest dropped).
MAX_PENDING_TIMINGS = 256

# A timed call's span: the trace gate's verdict, the decision explained, and the duration
# histogram's sample of the call (see Settler._learn), where its timing was learned.
Span = tuple[TraceVerdict, Decision, list[Any] | None]


class Settler:
    """Settles timed calls: counts, learning, the next decision, the fast path. Every method
    but :meth:`first_decision` needs the lock held."""

    def __init__(self, core: Core, periods: Periods, emission: Emission,
                 candidates: Candidates, rates: dict[str, OperationRate],
                 routes: dict[str, Route]) -> None:
        self._core = core
        # (never replaced: read here once, not through the core on every timed call)
        self._clock = core.clock
        self._learner = core.learner
        self._history = core.history
        self._periods = periods
        self._refresh = periods.refresh
        self._emission = emission
        self._candidates = candidates
        self._spend = candidates.preparer.spend
        self._rates = rates  # registered operations' call-rate state (see Router)
        self._routes = routes  # the route table (see Router): every key's implementations
        self._threads = ThreadWatch()  # the pools' sizes, read ~1/s (_threads_changed)
        # torch's pool: the count it runs at, and (phase; None: thread counts are not
        # chosen) the count held per phase by trials
        self.torch = TorchPool(self._threads, core.config.choose_threads, latest_load)
        self._pool_phase = self.torch.phase
        # the frameworks imported at the last look (same schedule), and those imported
        # since, for the caller to act on after the lock (their operations' routes made anew)
        self._frameworks = loaded_frameworks()
        self.frameworks_imported: frozenset[str] = frozenset()
        # a key is timed at least this often while spans are recorded (its interval span
        # needs a timed call: a share of the trace gate's key interval); inf: no bound
        self._visible_s = KEY_TIMING_SHARE * core.config.trace_key_interval_s
        self._longest_period = core.config.max_measure_period
        # timings made on a device, not ready yet: (entry, decision, timing, size, calls,
        # the call's span to emit once it is ready, as Emission.emit's arguments, or None)
        self.pending: list[tuple[Entry, Decision, DeviceTiming, int, int,
                                 tuple[Any, ...] | None]] = []

    def first_decision(self, op: Operation, entries: dict[int, Entry], n: int,
                       bucket: int, args: tuple[Any, ...]) -> tuple[Entry, Decision]:
        """Entry and decision for a call with nothing decided in advance (a new key, or the
        previous decision was invalidated). Takes the lock."""
        core = self._core
        learner = self._learner
        with core.lock:
            entry = entries.get(bucket)
            if entry is None:
                key = core.history.key(op.name, bucket)
                self._candidates.prepare_cold(op, n, args)
                entry = entries[bucket] = Entry(key, learner.state_of(key),
                                                self._candidates.arms_of(op, n),
                                                self._rates[op.name], op.size_of,
                                                op.capturing)
                for backend in entry.candidates:  # now, rather than on an exploring call
                    key.arm(backend)
                # (the decision below raises them to the smaller buckets': Policy.step)
                learner.start(key, floors(op.name, entry.impls, args))
            decision = entry.next
            if decision is None:
                decision = learner.decide(entry.key, entry.state, entry.candidates,
                                          core.clock())
            return entry, decision

    def settle(self, op: Operation, entry: Entry, decision: Decision, ticket: int,
               duration_us: float | None, failed: bool, n: int,
               device_timing: DeviceTiming | None = None,
               times: tuple[int, int, int] = (0, 0, 0)) -> Span | None:
        """After a timed call: count it, learn from it, decide the key's next timed call and
        point the fast path at the committed arm. Returns the call's span — the trace gate's
        verdict and the decision explained as it was made — or ``None`` (not exported).
        ``device_timing``: the call was timed on its device; it is learned once ready
        (:meth:`learn_ready`), its span (``times``) held until then for the device time."""
        now = self._clock()
        if now >= self._threads.due_s:
            self._look_around(now)
        calls, since = self._calls_since(entry, ticket, now) if ticket >= 0 else (1, None)
        reason, backend = decision.reason, decision.choice
        if reason is _EXPLOIT and backend is entry.backend:
            entry.timed_exploits += 1  # (see Entry)
        else:  # (folded into the counters when they are read: Counts.flush)
            entry.tally[entry.slots[backend] + TALLY_REASON[reason]] += 1
        emission = self._emission
        transition = entry.rate.add(calls, now, since)
        if transition is not None:
            emission.pending.append(transition)
        key, state = entry.key, entry.state
        span = None
        if emission.tracing:  # (before learning: the span shows what the decision knew)
            verdict = emission.verdict(key, decision, duration_us, entry.rate.hot, failed,
                                       calls, now)
            if verdict is not None:
                span = verdict, self.explained(entry, decision), None
        if not state.decisions & 15:
            self._history.touch(key)  # LRU recency, refreshed every 16th decision
        if duration_us is not None:
            self._spend(duration_us * calls)  # (what compiling left-out candidates may take)
            phase = self._pool_phase
            if phase is not None and (impl := entry.impls.get(backend)) is not None \
                    and impl.threads == "torch":
                trial = phase.observe(key.id, duration_us, now)  # (torch's count judged)
                if trial is not None:  # (a trial ended: its span is handed over after the lock)
                    emission.pending.append(trial)
            sample = self._learn(key, state, decision, duration_us, n, now, calls,
                                 span is not None)
            if sample is not None:
                span = span[0], span[1], sample  # type: ignore[index]
        elif device_timing is not None:
            self._hold(op, entry, decision, device_timing, n, calls, span, times)
            span = None
        self._next(entry, key, state, now)
        return span

    def _calls_since(self, entry: Entry, ticket: int, now: float) -> tuple[int, float | None]:
        """This call and the fast ones since the key's previous timed call, for the rate, and
        when that call was (``None``: none since); keeps the key visible to the trace gate."""
        gap = ticket - entry.last_ticket
        if gap <= 0:
            return 1, None
        entry.last_ticket = ticket
        since = entry.last_timed_s
        entry.last_timed_s = now
        # (every timed call, exploring ones too: the period a key commits with must already
        # hold the bound, or its first spans come late; the bound is recomputed only when the
        # calls of one visibility window, at the rate since the last timed call, have left
        # [max_period, 2 * max_period), and a bound at the configured period is not raised)
        if since is not None and now > since and self._emission.tracing:
            window_calls = gap * self._visible_s
            elapsed = now - since
            bound = entry.max_period
            if (bound * elapsed > window_calls
                    or (2 * bound * elapsed <= window_calls and bound < self._longest_period)):
                self._periods.keep_visible(entry, window_calls / elapsed)
        return gap, since

    def _hold(self, op: Operation, entry: Entry, decision: Decision, timing: DeviceTiming,
              n: int, calls: int, span: Span | None, times: tuple[int, int, int]) -> None:
        """Keep a timing made on a device until it is ready (:meth:`learn_ready`), with the
        call's span, if it is to be exported."""
        pending = self.pending
        if len(pending) >= MAX_PENDING_TIMINGS:
            # (the oldest never became ready: a device that stopped answering is never
            # waited for, and what it holds stays bounded)
            del pending[0]
        held = None
        if span is not None:
            held = (op.name, n, entry.bucket, span[1], decision.choice, times, None, None,
                    span[0])
        pending.append((entry, decision, timing, n, calls, held))

    def _look_around(self, now: float) -> None:
        """About once a second, on a timed call: the thread pools' sizes, the frameworks
        imported, the machine's load (``_load``), OpenTelemetry providers the application
        set since (``telemetry.instrumentation``), the package's threads (one that ended
        abnormally is started again). A failure here is counted (``thread_watch``) and never
        fails the call."""
        with survive("thread_watch", "thread pools"):
            self._threads_changed(self._threads.poll(now))
        with survive("thread_watch", "frameworks"):
            self._look_for_frameworks()
        with survive("thread_watch", "machine load"):  # (what a drift span is explained by)
            poll_load(now)
        with survive("thread_watch", "providers"):
            notice_providers()
        revive_threads()

    def _look_for_frameworks(self) -> None:
        """Note the frameworks the program imported since the last look (torch in the middle
        of a numpy loop, say): the implementations that need one become candidates once the
        caller has the routes of their operations made again (``frameworks_imported``)."""
        loaded = loaded_frameworks()
        if loaded != self._frameworks:
            self.frameworks_imported |= loaded - self._frameworks
            self._frameworks = loaded

    def _threads_changed(self, changed: dict[str, tuple[int, int]]) -> None:
        """Thread pools whose size changed (``torch.set_num_threads``, say): what was learned
        of the implementations that run on them dates from the old size, and is measured
        afresh on every key (``KeyHistory.restart``), the policy committing again; the other
        implementations keep their estimates."""
        if not changed:
            return
        keys = implementations = 0
        for _size_of, entries, _op, _families in self._routes.values():
            for entry in entries.values():
                choices = [c for c, impl in entry.impls.items() if impl.threads in changed]
                restarted = entry.key.restart(choices) if choices else 0
                if restarted:
                    keys += 1
                    implementations += restarted
                    self.reset_entry(entry, entry.key)
        _log.info("thread pool size changed (%s): %d estimates on %d keys measured afresh",
                  ", ".join(f"{pool} {old} -> {new}" for pool, (old, new) in changed.items()),
                  implementations, keys)

    def _learn(self, key: KeyHistory, state: KeyState, decision: Decision, duration_us: float,
               n: int, now: float, calls: int, traced: bool = False) -> list[Any] | None:
        """Learn one timing of ``decision``'s arm (the learner: history, then policy) and hand
        it to the call recorder and the duration histogram. Returns the call's sample queued
        for the histogram where ``traced`` (its span is to be made), else ``None``."""
        backend = decision.choice
        self._learner.learn(key, state, backend, duration_us, n, decision, calls)
        emission = self._emission
        if emission.recording_calls:
            emission.calls((key.operation, n, backend, duration_us, now, calls))
        if not emission.timings:
            return None
        if traced:
            # A list, not a tuple: the span worker adds the context of the call's span, and
            # the histogram records the sample with it (an exemplar linking to the trace).
            sample = [key.operation, backend, duration_us, None]
            emission.duration(sample)
            return sample
        emission.duration((key.operation, backend, duration_us))
        return None

    def learn_ready(self) -> list[tuple[tuple[Any, ...], float]]:
        """Learn the timings made on a device that are ready now (CUDA events: asked, never
        waited for), and have their keys decide their next timed call afresh from them: the
        decision made when the call was launched did not have its timing. A timing whose
        device raised is dropped. Returns the held spans of those calls, with their device
        times, for the caller to emit after the lock. Lock held; called on timed calls while
        any is pending."""
        still = []
        spans = []
        now = self._clock()
        for item in self.pending:
            entry, decision, timing, n, calls, held = item
            try:
                if not timing.ready():
                    still.append(item)
                    continue
                duration_us = timing.elapsed_us()
            except Exception:  # (a device error: the timing is lost, the call is not)
                continue
            key = entry.key
            if not self._learner.holds(key):
                continue  # (the key was dropped or made anew meanwhile)
            self._learn(key, entry.state, decision, duration_us, n, now, calls)
            self.reset_entry(entry, key)
            if held is not None:
                spans.append((held, duration_us))
        self.pending = still
        return spans

    def _next(self, entry: Entry, key: KeyHistory, state: KeyState, now: float) -> None:
        """Decide the key's next timed call and, where that changed it, its fast path."""
        # (unexplained, whoever listens: explained() fills in what a span or rt.decide() shows)
        committed = state.incumbent
        entry.next, how = self._learner.next(key, state, entry.candidates, now)
        if self._learner.forced is not None:
            self._refresh(entry, key)  # (a forced arm is never committed: a fast path too)
            return
        if entry.commit_pending or entry.watch_tripped:
            # (the commitment's call was this one, see below; or a watched call was slow,
            # and this one was timed for it: the period is set afresh from what it showed)
            entry.commit_pending = False
            self._refresh(entry, key)
        if how is _DECIDED:
            if state.incumbent is not None or entry.mask:
                self._refresh(entry, key)
            if entry.next.reason is Reason.EXPLORE and state.incumbent is not None:
                # (an arm owed its first trial: at the next call, not a period later; a short
                # key timed 1 in dozens ended first: 5 timed calls in 250, decision_quality)
                entry.mask = 0
            if (state.incumbent is not committed and state.incumbent is not None
                    and self._emission.tracing):
                # A commitment: its first call is timed, whatever the key's period, so the
                # trace gate sees the exploit that shows it (exported: adaptive.commit).
                entry.mask = 0
                entry.commit_pending = True
        elif how is _REPEATED and entry.mask and state.drift_score > SUSPECT_DRIFT_SLOW \
                and suspect(state, key.arms[state.incumbent].mean_us):  # type: ignore[index]
            # Committed and nothing due (most timed calls of a converged key): the fast
            # path already points at the committed arm, timed at the period set with the
            # memo — more often while the arm looks slower than it was (period.suspect).
            self._refresh(entry, key)

    def explained(self, entry: Entry, decision: Decision) -> Decision:
        """``decision`` with what it was based on — estimates, samples, confidence — from the
        key's history as it is now, for its span. Decisions are made unexplained whether or
        not anyone listens (explaining one costs a timed call microseconds); only those that
        become spans are explained. Lock held. A choice on torch's pool names the threads it
        ran at (``Decision.threads``)."""
        explained = self._learner.explained(decision, entry.key, entry.state, entry.candidates)
        impl = entry.impls.get(decision.choice)
        if impl is not None and impl.threads == "torch":
            return explained._replace(threads=self.torch.threads())
        return explained

    def failed(self, entry: Entry, backend: Choice) -> None:
        """``backend`` failed on ``entry``'s key: its failure recorded (quarantine with
        back-off), the decision made before it dropped. (The caller moves the fast path.)"""
        self._learner.fail(entry.key, entry.state, backend, self._clock())
        entry.next = None  # decided before this failure: decide again

    def reset_entry(self, entry: Entry, key: KeyHistory) -> None:
        """Decide ``entry``'s next call afresh from what was just learned or selected (a
        ``select()``, a recorded timing)."""
        entry.next = None
        self._learner.policy.drop_plan(entry.state)
        self._refresh(entry, key)
