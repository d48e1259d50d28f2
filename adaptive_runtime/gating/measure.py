"""The measurement gate: how many calls of a converged key share one timing (1-in-N), and
the cost constants it weighs.
"""

from __future__ import annotations

import math

__all__ = ["SLOW_CALL_MAX_PERIOD", "SUSPECT_SPAN_US", "TIMED_CALL_COST_US", "TIMING_SHARE",
           "measure_period"]


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
