"""Watched fast-path calls: a slow key's untimed calls read the clock, and one far slower than
its arm's estimate has the key's next call timed.

Why: learning from a timed call of a large kernel costs 50-125 us on this machine (the
policy's Python runs on caches the kernel just swept), and a slow key used to be timed 1 call
in 4 so that a slowdown showed within a few calls: 1-3 % of a 1-4 ms call's time, more of a
shorter one's. A watched call adds two clock reads and a frame (~0.5 us here, 0.5 % of a
call of 100 us, less of a longer one), so a watched key is timed as often as its timing cost
allows (``gating.measure_period``), up to ``WATCHED_MAX_PERIOD``, and a slowdown still shows
at the next call. The slow call itself is not learned from: only the call timed because it
came next is, so a bimodal arm's slow mode is not sampled more often than its fast one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..history import FIXED_CALL_COST_US, KeyHistory
from ..keys import bucket_bounds
from .entry import Entry

# A key whose committed arm's calls take this long or longer is watched.
WATCH_ABOVE_US = 100.0
# A watched call over this many times what its arm's estimate expects at the call's size has
# the key's next call timed: under the 3x of a slowdown that must be seen within 10 calls, over
# the ~1.5x of most timing noise.
WATCH_FACTOR = 2.0
# A watched key is timed at least 1-in-this-many (an unwatched slow one 1-in-4,
# gating.SLOW_CALL_MAX_PERIOD): the policy's re-checks come after a number of timed calls.
WATCHED_MAX_PERIOD = 16


def watch(entry: Entry, key: KeyHistory, mean_us: float) -> None:
    """Set ``entry``'s watch limits from its committed arm's estimate ``mean_us``, learned at the
    key's reference size (see ``history.FIXED_CALL_COST_US``): a bucket holds sizes up to 2x
    apart, so the limit is the estimate scaled back to each call's size."""
    ref = key.reference_size
    if ref and mean_us > FIXED_CALL_COST_US:
        fixed_ns = WATCH_FACTOR * FIXED_CALL_COST_US * 1000.0
        per_element_ns = WATCH_FACTOR * (mean_us - FIXED_CALL_COST_US) * 1000.0 / ref
    else:
        fixed_ns, per_element_ns = WATCH_FACTOR * mean_us * 1000.0, 0.0
    entry.watch_fixed_ns = fixed_ns
    entry.watch_per_element_ns = per_element_ns
    # (the limit at the bucket's smallest size: a call under it is not slow at any size, and
    # its size is not read)
    entry.watch_limit_ns = fixed_ns + per_element_ns * bucket_bounds(key.bucket)[0]


def watched_call(fn: Callable[..., Any], size_of: Callable[..., int], entry: Entry,
                 timer: Callable[[], int]) -> Callable[..., Any]:
    """``fn`` as the fast path of ``entry`` runs it, watched against the limits :func:`watch`
    set (``size_of``: the operation's, for a call's size)."""

    def call(*args: Any) -> Any:
        start_ns = timer()
        result = fn(*args)
        elapsed_ns = timer() - start_ns
        if elapsed_ns > entry.watch_limit_ns and (
                elapsed_ns > entry.watch_fixed_ns
                + entry.watch_per_element_ns * size_of(*args)):
            # (flag before mask: the timed call that the zero mask sends sees the flag and
            # sets the key's period afresh; a racing refresh only delays that)
            entry.watch_tripped = True
            entry.mask = 0
        return result

    return call
