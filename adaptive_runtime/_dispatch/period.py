"""The fast path's arm and timing period of a key: the committed (or forced) arm, run untimed
but for one call in N, N set from what the arm's calls and their timing cost — shorter while
the arm looks slower than it was, or while spans need a timed call of the key every so often."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..backend import Backend
from ..gating import SLOW_CALL_MAX_PERIOD, TIMED_CALL_COST_US, measure_period
from ..history import KeyHistory
from ..policy import KeyState
from .core import Core
from .counts import Counts
from .entry import Entry
from .watch import WATCH_ABOVE_US, WATCHED_MAX_PERIOD, watch, watched_call

# A committed arm whose Page-Hinkley statistic is above this (one timing ~2x its baseline, or a
# few at 1.5x) looks slower than it was: it is timed more often (gating.SUSPECT_SPAN_US) until
# the statistic falls back or alarms, so a slowdown raises the alarm within a few calls. An
# arm whose calls take _SUSPECT_SLOW_CALL_US or more is suspect from SUSPECT_DRIFT_SLOW
# (one timing over ~1.7x): with the statistic's ratio capped at 2, one timing of a 20x
# slowdown adds only 0.8, and from 1.0 a 3x slowdown of 100 us calls took 13 calls to switch
# (the target is 10). Calls under it keep 1.0: timings of a few microseconds are noisy (in
# benchmarks/steady_state.py the worst small key read 1.12x a forced run of its arm with 0.5
# for every call, 1.04-1.09x with this split).
_SUSPECT_DRIFT = 1.0
SUSPECT_DRIFT_SLOW = 0.5
_SUSPECT_SLOW_CALL_US = 20.0


def suspect(state: KeyState, mean_us: float) -> bool:
    """Whether the committed arm looks slower than it was (see _SUSPECT_DRIFT)."""
    score = state.drift_score
    return score > _SUSPECT_DRIFT or (score > SUSPECT_DRIFT_SLOW
                                      and mean_us >= _SUSPECT_SLOW_CALL_US)


def _device_code_while_captured(entry: Entry, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, a CPU arm committed on inputs on the GPU (``host_arms_on_device``), guarded
    for the fast path: while a CUDA graph is captured, the key's GPU arm runs instead (a
    round trip through the host would break the capture). Only such keys pay for asking:
    host inputs' keys and keys on the GPU arm run their kernel bare."""
    guarded = entry.guarded
    if guarded is not None and guarded[0] is fn:
        return guarded[1]
    gpu = next((impl.fn for choice, impl in entry.impls.items()
                if choice.arm is Backend.GPU), None)
    capturing = entry.capturing
    if gpu is None or capturing is None:
        return fn

    def device_code_while_captured(*args: Any) -> Any:
        return gpu(*args) if capturing() else fn(*args)

    entry.guarded = (fn, device_code_while_captured)
    return device_code_while_captured


class Periods:
    """Points keys' fast paths at their committed arms, timed 1-in-N. Lock held."""

    def __init__(self, core: Core, counts: Counts) -> None:
        self._core = core
        self._counts = counts
        # (a bound at or above the configured period changes nothing: a key that many calls
        # bring within the visibility window is never looked at again)
        self._longest_period = core.config.max_measure_period

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
        fn = impl.fn
        if entry.capturing is not None and target.arm is not Backend.GPU:
            fn = _device_code_while_captured(entry, fn)
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
        entry.mask = self._mask(entry, state, mean_us, target is state.incumbent,
                                slow_max_period)

    def _mask(self, entry: Entry, state: KeyState, mean_us: float, committed: bool,
              slow_max_period: int) -> int:
        """The fast path's mask for an arm taking ``mean_us``: its timing period, minus one."""
        config = self._core.config
        # (never below the warm cost of a timed call: the measurement leaves out its clock
        # reads and the steps before the kernel)
        cost_us = entry.timing_cost_us
        max_period = config.max_measure_period
        if entry.max_period < max_period:  # (see keep_visible)
            max_period = entry.max_period
        mask = measure_period(
            mean_us, cost_us if cost_us > TIMED_CALL_COST_US else TIMED_CALL_COST_US,
            max_period, slow_call_us=config.sampling_threshold_us,
            suspect=committed and suspect(state, mean_us),
            slow_max_period=slow_max_period) - 1
        validate_mask = self._core.validate_mask
        if mask > validate_mask >= 0:  # validation mode: sampled calls take this path
            mask = validate_mask
        return mask

    def keep_visible(self, entry: Entry, window_calls: float) -> None:
        """Bound the key's timing period so a call is timed every visibility window at its
        call rate (the trace gate's interval span of a converged key needs a timed call): the
        largest power of two of ``window_calls``, the calls one window brings, at least 1 and
        at most the configured period."""
        wanted = int(min(window_calls, self._longest_period))
        period = 1 << (wanted.bit_length() - 1) if wanted > 1 else 1
        previous, entry.max_period = entry.max_period, period
        if entry.mask >= period:
            entry.mask = period - 1
        elif period > previous and entry.mask + 1 == previous and not entry.commit_pending:
            # (the bound held the key's period down and rises with its call rate: the
            # period its timing cost asks for may be longer)
            self.refresh(entry, entry.key)
