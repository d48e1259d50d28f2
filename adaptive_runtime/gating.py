"""The gates of one call: is the operation hot, is this call timed, is it traced.

All three take the time as an argument (an injected clock upstream), so tests drive them with
a fake clock and no sleeping.
"""

from __future__ import annotations

import math
from collections import OrderedDict

from .backend import Choice
from .decision import Reason
from .records import HotPathTransition, SamplingReason, TraceVerdict

__all__ = [
    "HotPathDetector",
    "HotPathTransition",
    "OperationRate",
    "SamplingReason",
    "TokenBucket",
    "TraceGate",
    "TraceVerdict",
    "measure_period",
]


# ---------------------------------------------------------------------------- hot path


class OperationRate:
    """Call-rate window and hot state of one operation (see :class:`HotPathDetector`)."""

    __slots__ = ("detector", "hot", "last_call_s", "operation", "rate", "suppressed",
                 "window_calls", "window_start")

    def __init__(self, detector: HotPathDetector, operation: str, now_s: float) -> None:
        self.detector = detector
        self.operation = operation
        self.window_start = now_s
        self.window_calls = 0
        self.last_call_s = now_s
        self.rate = 0.0
        self.hot = False
        self.suppressed = 0

    def add(self, calls: int, now_s: float, since_s: float | None = None
            ) -> HotPathTransition | None:
        """Count ``calls`` calls made up to ``now_s`` (spread since ``since_s``, when they are
        a batch: the fast calls of one key since its previous timed call); return a
        transition if one happened."""
        if self.hot:
            self.suppressed += calls  # nothing of a hot operation is traced
        gap = now_s - self.last_call_s
        self.last_call_s = now_s
        window_s = self.detector.window_s
        if gap > window_s:
            # Nothing was counted for a whole window: what the window holds is older than one
            # window, and these calls (a batch: the fast calls since the key's previous timed
            # call) were spread over the gap; their rate over it is the most recent rate.
            self.window_calls = 0
            return self._close(now_s, calls / gap)
        if since_s is not None and since_s < self.window_start < now_s:
            # A batch that began before this window: only its share inside the window counts
            # here (calls spread evenly over the batch). Counted whole, the batches of several
            # keys of one operation, reported in one window after minutes of slow calls (keys
            # called in lockstep are timed together), would read as a burst that never was.
            calls = round(calls * (now_s - self.window_start) / (now_s - since_s))
        self.window_calls += calls
        # (close_window() inlined, on every timed call; its silence test is false here: the
        # last call is this one)
        elapsed = now_s - self.window_start
        if elapsed < window_s:
            return None
        return self._close(now_s, self.window_calls / elapsed)

    def close_window(self, now_s: float) -> HotPathTransition | None:
        """Close the window if it is over: its rate decides whether the operation is hot.

        The rate that counts is that of the most recent ``window_s``: after a whole window
        without a call it is zero, however busy the window before the silence was (its calls
        averaged over the silence would keep a quiet operation hot for several windows).
        """
        window_s = self.detector.window_s
        if now_s - self.last_call_s > window_s:
            return self._close(now_s, 0.0)
        elapsed = now_s - self.window_start
        if elapsed < window_s:
            return None
        return self._close(now_s, self.window_calls / elapsed)

    def _close(self, now_s: float, rate: float) -> HotPathTransition | None:
        self.rate = rate
        self.window_start = now_s
        self.window_calls = 0
        if not self.hot and rate > self.detector.enter_calls_per_sec:
            self.hot = True
            self.suppressed = 0
            return HotPathTransition(self.operation, True, rate, 0)
        if self.hot and rate < self.detector.leave_calls_per_sec:
            self.hot = False
            return HotPathTransition(self.operation, False, rate, self.suppressed)
        return None


class HotPathDetector:
    """Calls per second per operation over windows of ``window_s`` (1 s).

    An operation becomes hot when a window's rate is above ``enter_calls_per_sec`` and stops
    being hot when a window's rate is below half of it. A rate, not a lifetime total: 15,000
    calls spread over 3 s are 5,000 calls/s and never hot. Bounded: at most ``max_operations``
    unpinned operations are tracked, least recently seen dropped first; registered operations
    are pinned (there are few, and their state is looked up once per route).
    """

    def __init__(self, enter_calls_per_sec: float, *, window_s: float = 1.0,
                 max_operations: int = 16_384) -> None:
        if enter_calls_per_sec <= 0:
            raise ValueError(f"enter_calls_per_sec must be > 0, got {enter_calls_per_sec}")
        if window_s <= 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        self.enter_calls_per_sec = float(enter_calls_per_sec)
        self.leave_calls_per_sec = self.enter_calls_per_sec / 2.0
        self.window_s = float(window_s)
        self.max_operations = max_operations
        self._pinned: dict[str, OperationRate] = {}
        self._ops: OrderedDict[str, OperationRate] = OrderedDict()

    def state(self, operation: str, now_s: float, *, pin: bool = False) -> OperationRate:
        """The rate state of ``operation``, created if new (``pin``: never evicted)."""
        state = self._pinned.get(operation)
        if state is not None:
            return state
        state = self._ops.get(operation)
        if state is None:
            state = OperationRate(self, operation, now_s)
        if pin:
            self._ops.pop(operation, None)
            self._pinned[operation] = state
        elif operation in self._ops:
            self._ops.move_to_end(operation)
        else:
            self._ops[operation] = state
            if len(self._ops) > self.max_operations:
                self._ops.popitem(last=False)
        return state

    def observe(self, operation: str, calls: int, now_s: float, since_s: float | None = None
                ) -> HotPathTransition | None:
        """Count ``calls`` calls of ``operation`` made up to ``now_s`` (since ``since_s``, for
        a batch); return a transition if any."""
        return self.state(operation, now_s).add(calls, now_s, since_s)

    def _find(self, operation: str) -> OperationRate | None:
        state = self._pinned.get(operation)
        return state if state is not None else self._ops.get(operation)

    def check(self, operation: str, now_s: float) -> tuple[bool, HotPathTransition | None]:
        """Whether ``operation`` is hot now, and the transition if closing its stale window
        (a hot operation that went quiet) just ended the hot path."""
        state = self._find(operation)
        if state is None or not state.hot:
            return False, None
        transition = state.close_window(now_s)
        return state.hot, transition

    def is_hot(self, operation: str, now_s: float) -> bool:
        """Whether ``operation`` is hot now (a stale window is closed first)."""
        return self.check(operation, now_s)[0]

    def rate(self, operation: str) -> float:
        """Calls/s measured over the last closed window (0 before the first one closes)."""
        state = self._find(operation)
        return state.rate if state is not None else 0.0

    def hot_operations(self) -> list[str]:
        return [s.operation for s in (*self._pinned.values(), *self._ops.values()) if s.hot]

    def clear(self) -> None:
        """Forget every window (pinned states are reset in place, since routes hold them)."""
        self._ops.clear()
        for state in self._pinned.values():
            state.window_calls = 0
            state.rate = 0.0
            state.hot = False
            state.suppressed = 0


# ---------------------------------------------------------------------------- measurement


# The share of a key's time that timing its calls may take, and what a timed call is taken to
# cost over a plain one until the runtime has measured it (two clock reads, the lock, learning,
# the next decision; warm caches). Measured between large array calls, whose memory traffic
# leaves the interpreter's caches cold, a timed call costs 10-60 us more: the dispatcher
# measures each key's own cost and passes it here.
TIMED_CALL_COST_US = 4.0
TIMING_SHARE = 0.005
# A slow call (at least the sampling threshold) is timed at least 1-in-this-many, whatever
# timing costs: a slowdown of a slow key costs the most, so it must be seen within a few calls.
SLOW_CALL_MAX_PERIOD = 4
# While the committed arm looks slower than it was (its drift statistic is up, no alarm yet),
# it is timed at least once per this much of its calls' time: the alarm, or the all-clear,
# comes within a few calls (a slow call: every call) without timing a tiny call every time.
SUSPECT_SPAN_US = 100.0


def measure_period(mean_us: float, timed_cost_us: float, max_period: int, *,
                   slow_call_us: float = math.inf, suspect: bool = False,
                   slow_max_period: int = SLOW_CALL_MAX_PERIOD) -> int:
    """How many calls of a converged key share one timing: a power of two in [1, max_period].

    N is the smallest power of two that keeps timing under ``TIMING_SHARE`` of the key's time
    (``timed_cost_us`` per timed call, ``mean_us`` per call): a call slow enough that timing
    it is noise is timed every time; cheaper calls are timed 1-in-N. A call of at least
    ``slow_call_us`` is timed at least 1-in-``slow_max_period`` (a watched key's is longer:
    see ``_dispatch.watch``), and while ``suspect``
    (the arm looks slower) at least once per ``SUSPECT_SPAN_US`` of calls: drift on a slow
    key is seen within a few calls.
    """
    if not mean_us * TIMING_SHARE < timed_cost_us:  # also NaN: unknown cost is timed every call
        return 1
    if TIMING_SHARE * mean_us * max_period <= timed_cost_us:  # also 0 and subnormal
        period = max_period
    else:
        wanted = timed_cost_us / (TIMING_SHARE * mean_us)
        period = 1
        while period < wanted:
            period <<= 1
    if mean_us >= slow_call_us and period > slow_max_period:
        period = slow_max_period
    if suspect:
        while period > 1 and period * mean_us > SUSPECT_SPAN_US:
            period >>= 1
    return period


# ---------------------------------------------------------------------------- tracing


# Every timed call of a traced runtime gets a verdict, almost always a "no": those are shared,
# as are the yeses that stand for one call.
_NO = {why: TraceVerdict(False, why, 0.0) for why in SamplingReason}
_YES = {why: TraceVerdict(True, why, 1.0) for why in SamplingReason}


class TokenBucket:
    """``rate_per_s`` tokens a second, at most ``burst`` saved up."""

    __slots__ = ("burst", "rate_per_s", "tokens", "updated_s")

    def __init__(self, rate_per_s: float, burst: float, now_s: float) -> None:
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.tokens = burst
        self.updated_s = now_s

    def take(self, now_s: float) -> bool:
        """Refill for the time since the last take, then take a token if there is one."""
        elapsed = now_s - self.updated_s
        if elapsed > 0:  # (no min(), no helper call: two takes per admitted span)
            tokens = self.tokens + elapsed * self.rate_per_s
            self.tokens = tokens if tokens < self.burst else self.burst
            self.updated_s = now_s
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


def _burst(rate_per_s: float) -> float:
    """A second's worth of tokens (at least one), none at all for a zero budget."""
    return max(1.0, rate_per_s) if rate_per_s > 0 else 0.0


class _KeySampling:
    __slots__ = ("bucket", "committed", "credit", "last_arm", "last_span_s", "pending_calls",
                 "pending_slow")

    def __init__(self, bucket: TokenBucket, now_s: float) -> None:
        self.bucket = bucket
        self.credit = 0.0
        self.pending_calls = 0  # fast routine calls since the key's last sampled span
        self.pending_slow = 0  # slow calls since its last slow span (> 1: budget held some)
        # the arm whose commitment span went out, until the key explores (or fails) again;
        # the arm the key last committed to, across explorations (for switches)
        self.committed: Choice | None = None
        self.last_arm: Choice | None = None
        self.last_span_s = now_s  # when the key's latest span went out (or it was first seen)


# What making and exporting one call's two spans costs in background CPU before the span
# recorder has measured it (OTel Python SDK: ~40 us to make a span, ~65 us to OTLP-encode it,
# on the project's CI machine).
DEFAULT_SPAN_COST_US = 200.0
# CPU credit for span work is capped at this many calls' spans: a quiet spell cannot bank a
# burst, and a burst of decision spans cannot silence sampling for long.
MAX_BANKED_CALLS = 8

# A key's interval span goes out once this share of the key interval has passed without a
# span of it, and a converged key is timed at least every KEY_TIMING_SHARE of the interval
# (its span needs a timed call; see _dispatch.learner): so its spans are at most 7/8 of a key
# interval apart at its measured call rate, leaving room for the rate to slow down. (With a
# quarter, spans came up to one whole interval apart, and a call rate that dipped left a
# 2 s window without a span about one run in ten of the 8 s loop test.)
INTERVAL_SPAN_AFTER = 0.75
KEY_TIMING_SHARE = 0.125

# Training-step spans earn this share of ``cpu_share`` of the steps' time: every step already
# pays its span's stand-in in the loop (~1 % of a 1 ms torch step, measured amid the step's
# cache traffic), so what exported step spans may cost on top is half what call spans may.
# (With the whole share, benchmarks/training_loop.py read 1.010-1.047x on against off;
# its target is 1.02x.)
STEP_BUDGET_SHARE = 0.5


class TraceGate:
    """Decides per measured call whether its spans are exported, in this order:

    tracing off → no; operation hot → no; a decision that is not a plain exploit, the first
    call of a key, an error, or a commitment (the first exploit of an arm since the key last
    explored, was re-measured after a drift alarm or failed: ``commit``) → yes; a key with
    no span for ``INTERVAL_SPAN_AFTER`` of ``key_interval_s`` → yes (``interval``: its spans
    are at most ``key_interval_s`` apart); duration ≥ ``sampling_threshold_us`` → yes;
    otherwise a deterministic ``sample_rate`` share of calls (weighted by the calls each
    timing stands for) → yes. Every *yes* must also get a token
    from the per-key and the per-process budgets, else it becomes a *no* for reason
    ``budget`` (a commitment refused so is tried again on the key's next exploit). Every *no*
    is counted by reason.

    ``cpu_share`` (``None``: no such limit) bounds the background CPU spent on spans to that
    share of the time the runtime's calls take: each measured call earns ``cpu_share`` of its
    duration (times the calls it stands for) as credit, each exported call spends
    ``span_cost_us`` (measured by the span recorder). Routine spans (slow or sampled) need the
    credit; decision, commitment, interval, first-call and error spans always go out (within
    the token buckets) and may leave it in debt — the budget reserves room for them, as an
    interval span per key per ``key_interval_s`` is few. A sampled or interval span stands
    for every fast routine call of its key since the previous sampled one, a slow span for
    every slow call since the previous slow span (its ``weight``).
    """

    def __init__(self, *, tracing: bool, sampling_threshold_us: float, sample_rate: float,
                 spans_per_sec: float, spans_per_sec_per_key: float, now_s: float = 0.0,
                 max_keys: int = 16_384, cpu_share: float | None = None,
                 span_cost_us: float = DEFAULT_SPAN_COST_US,
                 key_interval_s: float = math.inf) -> None:
        self.tracing = tracing
        self.key_interval_s = key_interval_s
        # a key's interval span is due after this long without a span of it
        self._interval_due_s = INTERVAL_SPAN_AFTER * key_interval_s
        self.sampling_threshold_us = sampling_threshold_us
        self.sample_rate = sample_rate
        self.spans_per_sec_per_key = spans_per_sec_per_key
        self.cpu_share = cpu_share
        self.span_cost_us = span_cost_us  # updated by the span recorder as it measures
        self.cpu_credit_us = 0.0
        self._process = TokenBucket(spans_per_sec, _burst(spans_per_sec), now_s)
        self._keys: OrderedDict[object, _KeySampling] = OrderedDict()
        self._max_keys = max_keys
        self.exported: dict[SamplingReason, int] = dict.fromkeys(SamplingReason, 0)
        self.suppressed: dict[SamplingReason, int] = dict.fromkeys(SamplingReason, 0)
        self.admitted = 0  # calls whose spans were admitted, ever (a step's children: below)
        self.step_credit_us = 0.0
        self.pending_steps = 0  # steps since the last step span
        self.steps_exported = 0
        self.steps_suppressed = 0

    def admit(self, key: object, reason: Reason, duration_us: float, hot: bool,
              first_call: bool, failed: bool, calls: int, now_s: float,
              backend: Choice | None = None) -> TraceVerdict:
        """Verdict for one measured call that stands for ``calls`` calls of ``key``, run on
        ``backend`` (``None``: not known, no commitment is told)."""
        if not self.tracing:
            return self._no(SamplingReason.TRACING_OFF, calls)
        share = self.cpu_share
        if share is not None and duration_us < math.inf:
            credit = self.cpu_credit_us + share * duration_us * calls
            cap = MAX_BANKED_CALLS * self.span_cost_us
            self.cpu_credit_us = credit if credit < cap else cap
        if hot:
            return self._no(SamplingReason.HOT_PATH, calls)
        sampling = self._keys.get(key) or self._sampling(key, now_s)
        if failed:
            why = SamplingReason.ERROR
            sampling.committed = None  # (a failed arm is left: the next exploit commits)
        elif first_call:
            why = SamplingReason.FIRST_CALL
        elif reason is not Reason.EXPLOIT:  # (Reason.is_routine, without the call)
            why = SamplingReason.DECISION
            if reason is not Reason.RECHECK:
                # (exploring again: whatever the key exploits next is a commitment; a
                # re-check leaves the commitment standing unless another arm takes over)
                sampling.committed = None
        elif backend is not None and backend is not sampling.committed:
            return self._commit(sampling, backend, calls, now_s)
        elif now_s - sampling.last_span_s >= self._interval_due_s:
            why = SamplingReason.INTERVAL
        elif duration_us >= self.sampling_threshold_us:
            why = SamplingReason.SLOW
        else:
            why = SamplingReason.SAMPLED
        weight = 1.0
        sampled = why is SamplingReason.SAMPLED
        routine = sampled or why is SamplingReason.SLOW
        if why is SamplingReason.INTERVAL:
            # (it stands for the routine calls since the key's last sampled span)
            sampling.pending_calls += calls
            weight = float(sampling.pending_calls)
        elif sampled:
            sampling.pending_calls += calls
            # Deterministic systematic sampling: credit accrues per call represented, a span
            # goes out each time it reaches 1. One span stands for all the pending calls (its
            # weight), so whole credits are spent at once: banking them would over-sample
            # when the key is timed more often.
            sampling.credit += calls * self.sample_rate
            if sampling.credit < 1.0:
                return self._no(SamplingReason.NOT_SAMPLED, calls)
            sampling.credit %= 1.0
            weight = float(sampling.pending_calls)
        elif routine:
            sampling.pending_slow += calls
            weight = float(sampling.pending_slow)
        if routine and share is not None and self.cpu_credit_us < self.span_cost_us:
            return self._no(SamplingReason.BUDGET, calls)
        if not (sampling.bucket.take(now_s) and self._process.take(now_s)):
            return self._no(SamplingReason.BUDGET, calls)
        if sampled or why is SamplingReason.INTERVAL:
            sampling.pending_calls = 0
        elif routine:
            sampling.pending_slow = 0
        # (_spent, inlined: every exported call comes through here)
        if share is not None:
            cost = self.span_cost_us
            self.cpu_credit_us = max(self.cpu_credit_us - cost, -MAX_BANKED_CALLS * cost)
        sampling.last_span_s = now_s
        self.exported[why] += 1
        self.admitted += 1
        return _YES[why] if weight == 1.0 else TraceVerdict(True, why, weight)

    def _commit(self, sampling: _KeySampling, backend: Choice, calls: int,
                now_s: float) -> TraceVerdict:
        """The verdict on a commitment's span: exported within the token buckets (not the CPU
        credit, like any decision); refused, the key's next exploit asks again."""
        if not (sampling.bucket.take(now_s) and self._process.take(now_s)):
            return self._no(SamplingReason.BUDGET, calls)
        replaced = sampling.last_arm if sampling.last_arm is not backend else None
        sampling.committed = sampling.last_arm = backend
        self._spent(sampling, SamplingReason.COMMIT, now_s)
        if replaced is None:
            return _YES[SamplingReason.COMMIT]
        return TraceVerdict(True, SamplingReason.COMMIT, 1.0, replaced)

    def _spent(self, sampling: _KeySampling, why: SamplingReason, now_s: float) -> None:
        """Count an exported span: the CPU credit spent, the key's span time."""
        if self.cpu_share is not None:
            cost = self.span_cost_us
            self.cpu_credit_us = max(self.cpu_credit_us - cost, -MAX_BANKED_CALLS * cost)
        sampling.last_span_s = now_s
        self.exported[why] += 1
        self.admitted += 1

    def admit_step(self, duration_us: float, failed: bool, parent_of_spans: bool) -> float:
        """Whether a training step's span is exported: the steps it stands for (its
        ``weight``), 0.0 for no.

        A step whose calls' spans were admitted (``parent_of_spans``: they name it as their
        parent, so without it their trace would have a hole), the first step and a failed one
        always are. Other steps share a CPU budget of their own, like routine call spans: each
        step earns ``STEP_BUDGET_SHARE * cpu_share`` of its duration, a step span costs half
        of ``span_cost_us`` (one span where a call has two). A step span per step costs a
        loop of 2 ms steps ~3 % (making and exporting a span takes ~70 us of background CPU
        in the OpenTelemetry Python SDK); sampled, long steps still get one each, short ones
        one per ``span cost / (STEP_BUDGET_SHARE * cpu_share)`` of training time.
        """
        # Every step asks, amid its training step's cache traffic, where each line costs
        # several times what it does in a tight loop: a step held back (most are) takes the
        # few lines below, the rest of the accounting is in _step_verdict.
        self.pending_steps += 1
        share = self.cpu_share
        if share is not None and not (failed or parent_of_spans):
            credit = self.step_credit_us + STEP_BUDGET_SHARE * share * duration_us
            if credit < 0.5 * self.span_cost_us and self.steps_exported:
                self.step_credit_us = credit  # (under the cap: below one span's cost)
                self.steps_suppressed += 1
                return 0.0
        return self._step_verdict(duration_us, failed or parent_of_spans)

    def _step_verdict(self, duration_us: float, forced: bool) -> float:
        """admit_step past its common case: the credit capped, the verdict, the spending."""
        share = self.cpu_share
        cost = 0.5 * self.span_cost_us
        if share is not None and 0.0 < duration_us < math.inf:
            credit = self.step_credit_us + STEP_BUDGET_SHARE * share * duration_us
            self.step_credit_us = min(credit, MAX_BANKED_CALLS * cost)
        forced = forced or self.steps_exported == 0
        if not forced and share is not None and self.step_credit_us < cost:
            self.steps_suppressed += 1
            return 0.0
        if share is not None:
            self.step_credit_us = max(self.step_credit_us - cost, -MAX_BANKED_CALLS * cost)
        weight, self.pending_steps = float(self.pending_steps), 0
        self.steps_exported += 1
        return weight

    def _no(self, why: SamplingReason, calls: int) -> TraceVerdict:
        self.suppressed[why] += calls
        return _NO[why]

    def _sampling(self, key: object, now_s: float) -> _KeySampling:
        state = self._keys.get(key)
        if state is None:
            rate = self.spans_per_sec_per_key
            state = self._keys[key] = _KeySampling(TokenBucket(rate, _burst(rate), now_s),
                                                   now_s)
            if len(self._keys) > self._max_keys:
                self._keys.popitem(last=False)
        return state
