"""The records the layers hand each other: what a timed call did (:class:`CallRecord`,
:data:`CallTiming`), a selection counter's labels (:class:`SelectionKey`), an operation
entering or leaving the hot path (:class:`HotPathTransition`) and the trace gate's verdict on a
call's spans (:class:`TraceVerdict`, :class:`SamplingReason`).

The bottom layer: they are made by the dispatcher and the gates, and read by telemetry, the
call recorder and the replay, which import them from here rather than from their makers.
A trial of torch's thread count ended (:class:`PoolTrial`) is handed over like a hot-path
transition.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, NamedTuple

from .backend import Backend, Choice
from .decision import Decision, Reason

__all__ = ["CallRecord", "CallTiming", "HotPathTransition", "PoolTrial", "SamplingReason",
           "SelectionKey", "TraceVerdict"]


@dataclass(frozen=True, slots=True)
class HotPathTransition:
    """An operation entered or left the hot path. ``suppressed`` counts the selections not
    traced while it was hot (0 when entering)."""

    operation: str
    entered: bool
    calls_per_sec: float
    suppressed: int


class PoolTrial(NamedTuple):
    """A trial of a thread pool's count ended (``_dispatch/pool_phase``): the pool was held
    at ``before`` threads, ran ``trial`` threads for as many timed calls (``window_calls``)
    over ``trial_s`` seconds, and is held at ``after`` now (``trial`` where it was kept).

    What explained it: ``gain``, what the reference window's calls cost at each key's mean
    there over what they would have cost at its mean in the trial (kept at
    ``pool_phase.SWITCH_GAIN`` or more); the windows' mean timed call, ``reference_mean_us``
    and ``trial_mean_us``; ``trigger``, what started the trial: ``"first"``, ``"wait"`` (the
    wait since the previous one passed) or ``"load"`` (a change in the machine's load brought
    it forward: by ``switches_change`` involuntary context switches per second and
    ``load_change`` in the 1-minute load average, else both 0)."""

    pool: str
    before: int
    trial: int
    after: int
    gain: float
    reference_mean_us: float
    trial_mean_us: float
    window_calls: int
    trial_s: float
    trigger: str
    switches_change: float = 0.0
    load_change: float = 0.0

    @property
    def kept(self) -> bool:
        """Whether the trial's count was kept."""
        return self.after == self.trial


class SamplingReason(str, enum.Enum):
    """Why a call's spans were exported, or why not."""

    TRACING_OFF = "tracing_off"
    HOT_PATH = "hot_path"
    DECISION = "decision"  # not a plain exploit: explore, recheck, drift, forced, ...
    # the first exploit of an arm after the key explored, re-measured after a drift alarm,
    # failed, or re-checked another arm that took over: the key committed to it
    COMMIT = "commit"
    FIRST_CALL = "first_call"
    # a routine call of a key with no span for key_interval_s: the key stays visible
    INTERVAL = "interval"
    ERROR = "error"
    SLOW = "slow"
    SAMPLED = "sampled"
    NOT_SAMPLED = "not_sampled"
    BUDGET = "budget"

    def __str__(self) -> str:
        return self.value


class TraceVerdict(NamedTuple):
    """Whether to export one call's spans; ``weight`` = calls the exported span stands for;
    ``replaced``, on a commitment that switched arms, the arm the key left."""

    export: bool
    reason: SamplingReason
    weight: float = 1.0
    replaced: Choice | None = None


@dataclass(frozen=True, slots=True)
class SelectionKey:
    """Labels of one selection counter: bounded (registered names, three arms and the
    registered variants, seven reasons). ``variant``: ``""`` for an arm's primary
    implementation."""

    operation: str
    backend: Backend
    reason: Reason
    variant: str = ""


# (operation, size, arm, duration_us, time_s, calls) of every timing learned
CallTiming = tuple[str, int, Choice, float, float, int]


class CallRecord(NamedTuple):
    """What one timed call did, handed to the span sink right after the call. Times are the
    runtime timer's nanoseconds. (A NamedTuple: built in the loop, so it must be cheap.)"""

    operation: str
    input_size: int
    size_bucket: int
    decision: Decision
    backend: Choice
    select_start_ns: int
    start_ns: int
    end_ns: int
    error: BaseException | None
    fallback_to: Choice | None
    verdict: TraceVerdict
    # the kernel's time measured on its device (CUDA events), where it was timed there: the
    # record is handed over once the events have completed
    device_us: float | None = None
    # the call's sample queued for the duration histogram, ``[operation, arm, duration_us,
    # None]``: the span worker puts the span context of the call's kernel span in its last
    # place, and the histogram records it as an exemplar of that trace
    duration_sample: list[Any] | None = None
