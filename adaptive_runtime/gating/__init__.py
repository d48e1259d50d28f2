"""The gates of one call: is the operation hot, is this call timed, is it traced.

- :mod:`.hot_path`: ``OperationRate`` and ``HotPathDetector``, calls per second per operation
  and whether it is hot;
- :mod:`.measure`: ``measure_period``, the 1-in-N timing of a converged key, and the cost
  constants it weighs;
- :mod:`.trace_gate`: ``TokenBucket`` and ``TraceGate``, whether a call's spans (or a training
  step's) are exported, within the spans-per-second budget.

All three take the time as an argument (an injected clock upstream), so tests drive them with
a fake clock and no sleeping.
"""

from .hot_path import HotPathDetector, OperationRate
from .measure import (
    SLOW_CALL_MAX_PERIOD,
    SUSPECT_SPAN_US,
    TIMED_CALL_COST_US,
    TIMING_SHARE,
    measure_period,
)
from .trace_gate import INTERVAL_SPAN_AFTER, KEY_TIMING_SHARE, TokenBucket, TraceGate

__all__ = [
    "INTERVAL_SPAN_AFTER",
    "KEY_TIMING_SHARE",
    "SLOW_CALL_MAX_PERIOD",
    "SUSPECT_SPAN_US",
    "TIMED_CALL_COST_US",
    "TIMING_SHARE",
    "HotPathDetector",
    "OperationRate",
    "TokenBucket",
    "TraceGate",
    "measure_period",
]
