"""Hot-path state is true in time: a quiet operation stops being hot within a window.

The rate that counts is that of the most recent window, so a burst followed by a whole window
of silence reads as zero calls/s, however busy the burst was. Driven by the injected clock
(`tests/conftest.py`), so no test here depends on how fast the machine is.
"""

from __future__ import annotations

import pytest
from internals import hot_path_rate

import adaptive_runtime as ar

Backend = ar.Backend
BURST_CALLS_PER_S = 150_000
HOT_CALLS_PER_S = 10_000.0  # the default threshold; leaving takes a rate under half of it


def _burst(h, seconds: float) -> int:
    calls = int(seconds * BURST_CALLS_PER_S)
    for _ in range(calls):
        h.call()
        h.clock.advance(1 / BURST_CALLS_PER_S)
    return calls


@pytest.mark.parametrize("silence_windows", [1.0, 3.5])
def test_a_burst_then_a_window_of_silence_reads_as_not_hot(
        make_runtime, reliability, silence_windows: float) -> None:
    h = make_runtime({Backend.SIMD: 1.0, Backend.SCALAR: 3.0},
                     hot_path_calls_per_sec=HOT_CALLS_PER_S)
    calls = _burst(h, 1.5)
    assert h.rt.is_hot_path(h.op), "a 150k calls/s burst must make the operation hot"
    h.clock.advance(silence_windows)  # the detector's window is 1 s
    hot_after = h.rt.is_hot_path(h.op)
    rate_after = hot_path_rate(h.rt, h.op)
    assert not hot_after, (f"after {silence_windows} s of silence the operation still reads "
                           f"as hot ({rate_after:,.0f} calls/s)")
    assert rate_after == 0.0
    reliability.record(
        load=f"{BURST_CALLS_PER_S:,} calls/s for 1.5 s, then {silence_windows:g} s of silence "
             "(injected clock)",
        calls_made=calls, hot_after_burst=True, rate_after_silence=rate_after,
        hot_after_silence=hot_after)


def test_a_call_after_the_silence_does_not_carry_the_burst_rate(make_runtime) -> None:
    # The first call after the silence is counted at its own time; the burst before the
    # silence is older than a window and is not averaged into the new rate.
    h = make_runtime({Backend.SIMD: 1.0, Backend.SCALAR: 3.0},
                     hot_path_calls_per_sec=HOT_CALLS_PER_S)
    _burst(h, 1.5)
    assert h.rt.is_hot_path(h.op)
    h.clock.advance(3.5)
    for _ in range(100):  # a trickle: 100 calls/s
        h.call()
        h.clock.advance(0.01)
    assert not h.rt.is_hot_path(h.op)


def test_a_steady_hot_operation_stays_hot_between_windows(make_runtime) -> None:
    # The fix must not make a busy operation flicker: checked at many points of a steady
    # 20k calls/s stream, it stays hot once it entered.
    h = make_runtime({Backend.SIMD: 1.0, Backend.SCALAR: 3.0},
                     hot_path_calls_per_sec=HOT_CALLS_PER_S)
    readings = []
    for i in range(60_000):
        h.call()
        h.clock.advance(1 / 20_000)
        if i >= 30_000 and i % 997 == 0:
            readings.append(h.rt.is_hot_path(h.op))
    assert readings and all(readings)
