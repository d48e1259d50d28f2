"""The trace gate: whether a measured call's spans (and a training step's span) are exported,
within per-key and per-process token buckets and a CPU budget.

Time is an argument (an injected clock upstream), so tests drive it with a fake clock and no
sleeping.
"""

from __future__ import annotations

import math
from collections import OrderedDict

from ..backend import Choice
from ..decision import Reason
from ..records import SamplingReason, TraceVerdict

__all__ = ["DEFAULT_SPAN_COST_US", "INTERVAL_SPAN_AFTER", "KEY_TIMING_SHARE", "MAX_BANKED_CALLS",
           "STEP_BUDGET_SHARE", "TokenBucket", "TraceGate"]


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
        # The common case (a routine call not sampled) runs inline to its "no"; the rarer
        # branches, and every export, go through helpers.
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
        exported within the token buckets (not the CPU credit)."""
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
        """admit past its classification: a routine span (slow or sampled) needs the CPU
        credit, every span a token from the key's and the process's buckets; then the span
        is counted and the calls it stands for start afresh."""
        routine = why is SamplingReason.SAMPLED or why is SamplingReason.SLOW
        if routine and self.cpu_share is not None and self.cpu_credit_us < self.span_cost_us:
            return self._no(SamplingReason.BUDGET, calls)
        if not (sampling.bucket.take(now_s) and self._process.take(now_s)):
            return self._no(SamplingReason.BUDGET, calls)
        if why is SamplingReason.SAMPLED or why is SamplingReason.INTERVAL:
            sampling.pending_calls = 0
        elif routine:
            sampling.pending_slow = 0
        # (_spent, inlined: every exported call comes through here)
        if self.cpu_share is not None:
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
