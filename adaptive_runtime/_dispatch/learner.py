"""The learner: the policy's state of each key, and what happens under the lock after a timed
call — count it, feed the hot-path rate, learn the timing, decide the key's next timed call,
and set the key's measurement period (the fast path's arm, timed 1-in-N)."""

from __future__ import annotations

import logging
from typing import Any

from ..backend import Choice
from ..decision import Decision, Reason
from ..gating import (
    KEY_TIMING_SHARE,
    SLOW_CALL_MAX_PERIOD,
    TIMED_CALL_COST_US,
    OperationRate,
    TraceVerdict,
    measure_period,
)
from ..history import KeyHistory
from ..operations import DeviceTiming, Operation
from ..policy import KeyState, Step
from ..threads import ThreadWatch
from .candidates import Candidates, floors
from .core import Core
from .counts import Counts
from .emission import Emission
from .entry import TALLY_REASON, Entry, Route
from .watch import WATCH_ABOVE_US, WATCHED_MAX_PERIOD, watch, watched_call

_log = logging.getLogger(__name__)

# module globals: one dict lookup instead of two on the slow path
_EXPLOIT = Reason.EXPLOIT
_DRIFT = Reason.DRIFT
_DECIDED = Step.DECIDED
_REPEATED = Step.REPEATED
# A committed arm whose Page-Hinkley statistic is above this (one timing ~2x its baseline, or a
# few at 1.5x) looks slower than it was: it is timed more often (gating.SUSPECT_SPAN_US) until
# the statistic falls back or alarms, so a slowdown raises the alarm within a few calls. An
# arm whose calls take _SUSPECT_SLOW_CALL_US or more is suspect from _SUSPECT_DRIFT_SLOW
# (one timing over ~1.7x): with the statistic's ratio capped at 2, one timing of a 20x
# slowdown adds only 0.8, and from 1.0 a 3x slowdown of 100 us calls took 13 calls to switch
# (the target is 10). Calls under it keep 1.0: timings of a few microseconds are noisy (in
# benchmarks/steady_state.py the worst small key read 1.12x a forced run of its arm with 0.5
# for every call, 1.04-1.09x with this split).
_SUSPECT_DRIFT = 1.0
_SUSPECT_DRIFT_SLOW = 0.5
_SUSPECT_SLOW_CALL_US = 20.0


def _suspect(state: KeyState, mean_us: float) -> bool:
    """Whether the committed arm looks slower than it was (see _SUSPECT_DRIFT)."""
    score = state.drift_score
    return score > _SUSPECT_DRIFT or (score > _SUSPECT_DRIFT_SLOW
                                      and mean_us >= _SUSPECT_SLOW_CALL_US)


# Timings made on a device and not ready yet are kept at most this many (the oldest dropped).
MAX_PENDING_TIMINGS = 256

# A timed call's span: the trace gate's verdict, the decision explained, and the duration
# histogram's sample of the call (see Learner._learn), where its timing was learned.
Span = tuple[TraceVerdict, Decision, list[Any] | None]


class Learner:
    """Owns the policy's per-key state and carries out its transitions. Every method but
    :meth:`first_decision` needs the lock held."""

    def __init__(self, core: Core, counts: Counts, emission: Emission,
                 candidates: Candidates, rates: dict[str, OperationRate],
                 routes: dict[str, Route]) -> None:
        self._core = core
        # (never replaced: read here once, not through the core on every timed call)
        self._clock = core.clock
        self._policy = core.policy
        self._history = core.history
        self._forced = core.forced
        self._counts = counts
        self._emission = emission
        self._candidates = candidates
        self._rates = rates  # registered operations' call-rate state (see Router)
        self._routes = routes  # the route table (see Router): every key's implementations
        # the thread pools' sizes, read every second or so from timed calls (see
        # _threads_changed)
        self._threads = ThreadWatch()
        # the policy's state of each key: key id -> (the key's history, its state), dropped
        # with the key (forget); a key made anew gets a new state
        self._states: dict[tuple[str, int], tuple[KeyHistory, KeyState]] = {}
        # a key is timed at least this often while spans are recorded (a share of the trace
        # gate's key interval: its interval span needs a timed call); inf: no such bound
        self._visible_s = KEY_TIMING_SHARE * core.config.trace_key_interval_s
        # (a bound at or above the configured period changes nothing: a key that many calls
        # bring within _visible_s is never looked at again)
        self._longest_period = core.config.max_measure_period
        # timings made on a device, not ready yet: (entry, decision, timing, size, calls,
        # the call's span to emit once it is ready, as Emission.emit's arguments, or None)
        self.pending: list[tuple[Entry, Decision, DeviceTiming, int, int,
                                 tuple[Any, ...] | None]] = []

    def state_of(self, key: KeyHistory) -> KeyState:
        """The policy's state of ``key`` (new for a key made anew)."""
        found = self._states.get(key.id)
        if found is None or found[0] is not key:
            found = self._states[key.id] = (key, KeyState())
        return found[1]

    def drop(self, operation: str, bucket: int) -> None:
        """History dropped this key: drop the policy's state of it."""
        self._states.pop((operation, bucket), None)

    def decide(self, key: KeyHistory, state: KeyState, candidates: tuple[Choice, ...],
               now: float) -> Decision:
        """A full decision for ``key``, applied."""
        core = self._core
        if core.forced is not None:  # (its one candidate: the forced choice, resolved)
            return core.policy.forced(state, key, candidates[0])
        decision = core.policy.step(state, key, candidates, now, core.history, explain=False)
        self._after_step(key, decision)
        return decision

    @staticmethod
    def _after_step(key: KeyHistory, decision: Decision) -> None:
        """What a full decision asks of the measured history: after a drift alarm, every
        arm is measured afresh (see Policy.step)."""
        if decision.reason is Reason.DRIFT:
            key.start_epoch()

    def first_decision(self, op: Operation, entries: dict[int, Entry], n: int,
                       bucket: int, args: tuple[Any, ...]) -> tuple[Entry, Decision]:
        """Entry and decision for a call with nothing decided in advance (a new key, or the
        previous decision was invalidated). Takes the lock."""
        core = self._core
        with core.lock:
            entry = entries.get(bucket)
            if entry is None:
                key = core.history.key(op.name, bucket)
                state = self.state_of(key)
                entry = entries[bucket] = Entry(key, state, self._candidates.arms_of(op, n),
                                                self._rates[op.name], op.size_of)
                for backend in entry.candidates:  # now, rather than on an exploring call
                    key.arm(backend)
                # (the decision below raises them to the smaller buckets': Policy.step)
                core.policy.set_floors(state, floors(op.name, entry.impls, args))
            decision = entry.next
            if decision is None:
                decision = self.decide(entry.key, entry.state, entry.candidates, core.clock())
            return entry, decision

    def settle(self, op: Operation, entry: Entry, decision: Decision, ticket: int,
               duration_us: float | None, failed: bool, n: int,
               device_timing: DeviceTiming | None = None,
               times: tuple[int, int, int] = (0, 0, 0)) -> Span | None:
        """After a timed call: count it, learn from it, decide the key's next timed call and
        point the fast path at the committed arm. Returns the call's span — the trace gate's
        verdict and the decision explained as it was made — or ``None`` (not exported).
        ``device_timing``: the call was timed on its device; it is learned once ready
        (:meth:`learn_ready`), and its span (``times``: select start, kernel start and end)
        is held until then, to carry the device time."""
        # (one function, not four: every exploring call comes through here)
        now = self._clock()
        if now >= self._threads.due_s:
            self._threads_changed(self._threads.poll(now))
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
                # (every timed call, exploring ones too: the period a key commits with
                # must already hold the bound, or its first spans come late; the bound is
                # recomputed only when the calls of one visibility window, at the rate
                # since the last timed call, have left [max_period, 2 * max_period), and
                # a bound at the configured period is not raised)
                if since is not None and now > since and self._emission.tracing:
                    window_calls = gap * self._visible_s
                    elapsed = now - since
                    bound = entry.max_period
                    if (bound * elapsed > window_calls
                            or (2 * bound * elapsed <= window_calls
                                and bound < self._longest_period)):
                        self._keep_visible(entry, window_calls / elapsed)
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
            sample = self._learn(key, state, decision, duration_us, n, now, calls,
                                 span is not None)
            if sample is not None:
                span = span[0], span[1], sample  # type: ignore[index]
        elif device_timing is not None:
            pending = self.pending
            if len(pending) >= MAX_PENDING_TIMINGS:
                # (the oldest never became ready: a device that stopped answering is never
                # waited for, and what it holds stays bounded)
                del pending[0]
            held = None
            if span is not None:
                held = (op.name, n, entry.bucket, span[1], backend, times, None, None, span[0])
                span = None
            pending.append((entry, decision, device_timing, n, calls, held))
        self._next(entry, key, state, now)
        return span

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
        """Learn one timing of ``decision``'s arm into the key's history (replacing the
        arm's estimate where the policy re-measures it), then into the policy's state.
        Returns the call's sample queued for the duration histogram where ``traced`` (its
        span is to be made), else ``None``."""
        backend = decision.choice
        if self._policy.remeasures(key, decision):
            key.arms[backend].start_epoch()
        learned = self._history.record(key, backend, duration_us, n)
        self._policy.observe(state, backend, learned, key.arms[backend])
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
            if self._states.get(key.id, (None,))[0] is not key:
                continue  # (the key was dropped or made anew meanwhile)
            self._learn(key, entry.state, decision, duration_us, n, now, calls)
            self.reset_entry(entry, key)
            if held is not None:
                spans.append((held, duration_us))
        self.pending = still
        return spans

    def _keep_visible(self, entry: Entry, window_calls: float) -> None:
        """Bound the key's timing period so a call is timed every ``_visible_s`` at its call
        rate (the trace gate's interval span of a converged key needs a timed call): the
        largest power of two of ``window_calls``, the calls that many seconds bring, at
        least 1 and at most the configured period."""
        wanted = int(min(window_calls, self._longest_period))
        period = 1 << (wanted.bit_length() - 1) if wanted > 1 else 1
        previous, entry.max_period = entry.max_period, period
        if entry.mask >= period:
            entry.mask = period - 1
        elif period > previous and entry.mask + 1 == previous and not entry.commit_pending:
            # (the bound held the key's period down and rises with its call rate: the
            # period its timing cost asks for may be longer)
            self.refresh(entry, entry.key)

    def _next(self, entry: Entry, key: KeyHistory, state: KeyState, now: float) -> None:
        """Decide the key's next timed call and, where that changed it, its fast path."""
        if self._forced is not None:
            entry.next = self._policy.forced(state, key, entry.candidates[0])
            self.refresh(entry, key)  # (a forced arm is never committed: a fast path too)
            return
        # (unexplained, whoever listens: explained() fills in what a span or rt.decide() shows)
        committed = state.incumbent
        entry.next, how = self._policy.next(state, key, entry.candidates, now, self._history,
                                            explain=False)
        if entry.commit_pending or entry.watch_tripped:
            # (the commitment's call was this one, see below; or a watched call was slow,
            # and this one was timed for it: the period is set afresh from what it showed)
            entry.commit_pending = False
            self.refresh(entry, key)
        if how is _DECIDED:
            if entry.next.reason is _DRIFT:  # (_after_step, inlined: every full evaluation)
                key.start_epoch()
            if state.incumbent is not None or entry.mask:
                self.refresh(entry, key)
            if (state.incumbent is not committed and state.incumbent is not None
                    and self._emission.tracing):
                # A commitment: its first call is timed, whatever the key's period, so the
                # trace gate sees the exploit that shows it (exported: adaptive.commit).
                entry.mask = 0
                entry.commit_pending = True
        elif how is _REPEATED and entry.mask and state.drift_score > _SUSPECT_DRIFT_SLOW \
                and _suspect(state, key.arms[state.incumbent].mean_us):  # type: ignore[index]
            # Committed and nothing due (most timed calls of a converged key): the fast
            # path already points at the committed arm, timed at the period set with the
            # memo — more often while the arm looks slower than it was (_SUSPECT_DRIFT).
            self.refresh(entry, key)

    def explained(self, entry: Entry, decision: Decision) -> Decision:
        """``decision`` with what it was based on — estimates, samples, confidence — from the
        key's history as it is now, for its span. Decisions are made unexplained whether or
        not anyone listens (explaining one costs a timed call microseconds); only those that
        become spans are explained. Lock held."""
        return self._core.policy.explained(decision, entry.state, entry.key, entry.candidates)

    def failed(self, entry: Entry, backend: Choice) -> None:
        """``backend`` failed on ``entry``'s key: its failure recorded (quarantine with
        back-off), the decision made before it dropped. (The caller moves the fast path.)"""
        self._core.history.record_failure(entry.key, backend, self._core.clock())
        self._core.policy.observe_failure(entry.state, backend)
        entry.next = None  # decided before this failure: decide again

    def refresh(self, entry: Entry, key: KeyHistory) -> None:
        """Point the key's fast path at its committed arm, timed 1-in-N."""
        entry.watch_tripped = False
        state = entry.state
        core = self._core
        target = entry.candidates[0] if core.forced is not None else state.incumbent
        stats = key.arms.get(target) if target is not None else None
        if stats is None or not stats.epoch_samples or stats.consecutive_failures:
            entry.mask = 0
            return
        impl = entry.impls.get(target)  # type: ignore[arg-type]
        if impl is None:
            entry.mask = 0
            return
        if entry.backend is not target and entry.backend is not None:
            self._counts.flush(key.operation, entry)  # its fast calls ran the previous arm
        mean_us = stats.mean_us
        config = core.config
        fn = impl.fn
        slow_max_period = SLOW_CALL_MAX_PERIOD
        if mean_us >= WATCH_ABOVE_US and impl.sync is None:
            # Watched (see watch.py): a slowdown shows at the next call, so the key is timed
            # as its timing cost allows up to 1-in-WATCHED_MAX_PERIOD, not at least
            # 1-in-SLOW_CALL_MAX_PERIOD. (Not an asynchronous arm: its untimed calls return
            # before their work is done.)
            watched = entry.watched
            if watched is None or watched[0] is not fn:
                watched = entry.watched = (fn, watched_call(fn, entry.size_of, entry,
                                                            core.timer))
            watch(entry, key, mean_us)
            fn = watched[1]
            slow_max_period = WATCHED_MAX_PERIOD
        # impl before mask: a racing reader never sees a mask > 0 with no kernel
        entry.impl = fn
        entry.backend = target
        # (never below the warm cost of a timed call: the measurement leaves out its clock
        # reads and the steps before the kernel)
        cost_us = entry.timing_cost_us
        max_period = config.max_measure_period
        if entry.max_period < max_period:  # (see _keep_visible)
            max_period = entry.max_period
        mask = measure_period(
            mean_us, cost_us if cost_us > TIMED_CALL_COST_US else TIMED_CALL_COST_US,
            max_period, slow_call_us=config.sampling_threshold_us,
            suspect=target is state.incumbent and _suspect(state, mean_us),
            slow_max_period=slow_max_period) - 1
        if mask > core.validate_mask >= 0:  # validation mode: sampled calls take this path
            mask = core.validate_mask
        entry.mask = mask

    def reset_entry(self, entry: Entry, key: KeyHistory) -> None:
        """Decide ``entry``'s next call afresh from what was just learned or selected (a
        ``select()``, a recorded timing)."""
        entry.next = None
        self._core.policy.drop_plan(entry.state)
        self.refresh(entry, key)
