"""The trace gate: whether a measured call's spans (and a training step's span) are exported,
within token buckets on the spans exported per second: one budget, ``spans_per_sec``, and its
shares (a key's, routine spans', steps').

Time is an argument (an injected clock upstream), so tests drive it with a fake clock and no
sleeping.
"""

from __future__ import annotations

import math
from collections import OrderedDict

from ..backend import Choice
from ..decision import Reason
from ..records import SamplingReason, TraceVerdict

__all__ = ["INTERVAL_SPAN_AFTER", "KEY_TIMING_SHARE", "TokenBucket", "TraceGate"]


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


# A key's interval span goes out once this share of the key interval has passed without a
# span of it, and a converged key is timed at least every KEY_TIMING_SHARE of the interval
# (its span needs a timed call; see _dispatch.learner): so its spans are at most 7/8 of a key
# interval apart at its measured call rate, leaving room for the rate to slow down. (With a
# quarter, spans came up to one whole interval apart, and a call rate that dipped left a
# 2 s window without a span about one run in ten of the 8 s loop test.)
INTERVAL_SPAN_AFTER = 0.75
KEY_TIMING_SHARE = 0.125


class TraceGate:
    """Decides per measured call whether its spans are exported, in this order:

    tracing off → no; operation hot → no; a decision that is not a plain exploit, the first
    call of a key, an error, or a commitment (the first exploit of an arm since the key last
    explored, was re-measured after a drift alarm or failed: ``commit``) → yes; a key with
    no span for ``INTERVAL_SPAN_AFTER`` of ``key_interval_s`` → yes (``interval``: its spans
    are at most ``key_interval_s`` apart); duration ≥ ``sampling_threshold_us`` → yes;
    otherwise a deterministic ``sample_rate`` share of calls (weighted by the calls each
    timing stands for) → yes. Every *yes* must also get a token from the per-key
    (``spans_per_sec_per_key``) and the per-process (``spans_per_sec``) buckets, and a
    routine one (slow or sampled) from the routine spans' bucket (``routine_spans_per_sec``)
    too, else it becomes a *no* for reason ``budget`` (a commitment refused so is tried again
    on the key's next exploit). Every *no* is counted by reason.

    A sampled or interval span stands for every fast routine call of its key since the
    previous sampled one, a slow span for every slow call since the previous slow span (its
    ``weight``), so a span held back by the budget is counted in the next one's weight.
    """

    def __init__(self, *, tracing: bool, sampling_threshold_us: float, sample_rate: float,
                 spans_per_sec: float, spans_per_sec_per_key: float, now_s: float = 0.0,
                 max_keys: int = 16_384, routine_spans_per_sec: float = math.inf,
                 step_spans_per_sec: float = math.inf,
                 key_interval_s: float = math.inf) -> None:
        self.tracing = tracing
        self.key_interval_s = key_interval_s
        # a key's interval span is due after this long without a span of it
        self._interval_due_s = INTERVAL_SPAN_AFTER * key_interval_s
        self.sampling_threshold_us = sampling_threshold_us
        self.sample_rate = sample_rate
        self.spans_per_sec_per_key = spans_per_sec_per_key
        self.routine_spans_per_sec = routine_spans_per_sec
        self.step_spans_per_sec = step_spans_per_sec
        self._process = TokenBucket(spans_per_sec, _burst(spans_per_sec), now_s)
        self._routine = TokenBucket(routine_spans_per_sec, _burst(routine_spans_per_sec),
                                    now_s)
        # (on the step timer's time, not the calls' clock: made at the first step, see
        # admit_step)
        self._steps: TokenBucket | None = None
        self._keys: OrderedDict[object, _KeySampling] = OrderedDict()
        self._max_keys = max_keys
        self.exported: dict[SamplingReason, int] = dict.fromkeys(SamplingReason, 0)
        self.suppressed: dict[SamplingReason, int] = dict.fromkeys(SamplingReason, 0)
        self.admitted = 0  # calls whose spans were admitted, ever (a step's children: below)
        self.pending_steps = 0  # steps since the last step span
        self.steps_exported = 0
        self.steps_suppressed = 0

    def admit(self, key: object, reason: Reason, duration_us: float, hot: bool,
              first_call: bool, failed: bool, calls: int, now_s: float,
              backend: Choice | None = None) -> TraceVerdict:
        """Verdict for one measured call that stands for ``calls`` calls of ``key``, run on
        ``backend`` (``None``: not known, no commitment is told)."""
        # The common case (a routine call not sampled) runs inline to its "no"; the rarer
        # branches, and every export, go through helpers.
        if not self.tracing:
            return self._no(SamplingReason.TRACING_OFF, calls)
        if hot:
            return self._no(SamplingReason.HOT_PATH, calls)
        sampling = self._keys.get(key) or self._sampling(key, now_s)
        # (reason is not EXPLOIT: Reason.is_routine, without the call)
        if failed or first_call or reason is not Reason.EXPLOIT:
            return self._decision(sampling, reason, failed, first_call, calls, now_s)
        if backend is not None and backend is not sampling.committed:
            return self._commit(sampling, backend, calls, now_s)
        if now_s - sampling.last_span_s >= self._interval_due_s:
            # (it stands for the routine calls since the key's last sampled span)
            sampling.pending_calls += calls
            return self._export(sampling, SamplingReason.INTERVAL,
                                float(sampling.pending_calls), calls, now_s)
        if duration_us >= self.sampling_threshold_us:
            sampling.pending_slow += calls
            return self._export(sampling, SamplingReason.SLOW, float(sampling.pending_slow),
                                calls, now_s)
        sampling.pending_calls += calls
        # Deterministic systematic sampling: credit accrues per call represented, a span goes
        # out each time it reaches 1. One span stands for all the pending calls (its weight),
        # so whole credits are spent at once: banking them would over-sample when the key is
        # timed more often.
        sampling.credit += calls * self.sample_rate
        if sampling.credit < 1.0:
            return self._no(SamplingReason.NOT_SAMPLED, calls)
        sampling.credit %= 1.0
        return self._export(sampling, SamplingReason.SAMPLED, float(sampling.pending_calls),
                            calls, now_s)

    def _decision(self, sampling: _KeySampling, reason: Reason, failed: bool,
                  first_call: bool, calls: int, now_s: float) -> TraceVerdict:
        """admit for an error, a key's first call or a decision that is not a plain exploit:
        exported within the key's and the process's buckets."""
        if failed:
            why = SamplingReason.ERROR
            sampling.committed = None  # (a failed arm is left: the next exploit commits)
        elif first_call:
            why = SamplingReason.FIRST_CALL
        else:
            why = SamplingReason.DECISION
            if reason is not Reason.RECHECK:
                # (exploring again: whatever the key exploits next is a commitment; a
                # re-check leaves the commitment standing unless another arm takes over)
                sampling.committed = None
        return self._export(sampling, why, 1.0, calls, now_s)

    def _export(self, sampling: _KeySampling, why: SamplingReason, weight: float, calls: int,
                now_s: float) -> TraceVerdict:
        """admit past its classification: every span needs a token from the key's and the
        process's buckets, a routine one (slow or sampled) from the routine spans' bucket
        first; then the span is counted and the calls it stands for start afresh."""
        routine = why is SamplingReason.SAMPLED or why is SamplingReason.SLOW
        if routine and not self._routine.take(now_s):
            return self._no(SamplingReason.BUDGET, calls)
        if not (sampling.bucket.take(now_s) and self._process.take(now_s)):
            return self._no(SamplingReason.BUDGET, calls)
        if why is SamplingReason.SAMPLED or why is SamplingReason.INTERVAL:
            sampling.pending_calls = 0
        elif routine:
            sampling.pending_slow = 0
        self._spent(sampling, why, now_s)
        return _YES[why] if weight == 1.0 else TraceVerdict(True, why, weight)

    def _commit(self, sampling: _KeySampling, backend: Choice, calls: int,
                now_s: float) -> TraceVerdict:
        """The verdict on a commitment's span: exported within the token buckets, like any
        decision; refused, the key's next exploit asks again."""
        if not (sampling.bucket.take(now_s) and self._process.take(now_s)):
            return self._no(SamplingReason.BUDGET, calls)
        replaced = sampling.last_arm if sampling.last_arm is not backend else None
        sampling.committed = sampling.last_arm = backend
        self._spent(sampling, SamplingReason.COMMIT, now_s)
        if replaced is None:
            return _YES[SamplingReason.COMMIT]
        return TraceVerdict(True, SamplingReason.COMMIT, 1.0, replaced)

    def _spent(self, sampling: _KeySampling, why: SamplingReason, now_s: float) -> None:
        """Count an exported span: the key's span time, the counts."""
        sampling.last_span_s = now_s
        self.exported[why] += 1
        self.admitted += 1

    def admit_step(self, failed: bool, parent_of_spans: bool, now_s: float) -> float:
        """Whether a training step that ended at ``now_s`` (on the step timer's time: the
        steps' bucket keeps time of its own) has its span exported: the steps it stands for
        (its ``weight``), 0.0 for no.

        A step whose calls' spans were admitted (``parent_of_spans``: they name it as their
        parent, so without it their trace would have a hole), the first step and a failed one
        always are; other steps take a token from the steps' bucket (``step_spans_per_sec``),
        so long steps get a span each and short ones one per several steps.
        """
        # Every step asks, amid its training step's cache traffic, where each line costs
        # several times what it does in a tight loop: a few lines for the common "no".
        self.pending_steps += 1
        steps = self._steps
        if steps is None:  # the first step: always exported
            rate = self.step_spans_per_sec
            steps = self._steps = TokenBucket(rate, _burst(rate), now_s)
            steps.take(now_s)
        elif not (failed or parent_of_spans or steps.take(now_s)):
            self.steps_suppressed += 1
            return 0.0
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
