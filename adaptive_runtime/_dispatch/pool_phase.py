"""torch's thread count, chosen per pool for a phase by trials against the current count.

torch's count is process-wide: autograd's backward and the optimizer run at whatever count is
set, and they are most of a training step. Setting it per call did not work here (ATen at one
thread read 120-190 us a call with the switch there and back, against 90 us held at one
thread), and per-call timings hide what contention does to a pool: beside a busy process the
median of a 64x256x256 linear at 2 threads was 50 us, like 1 thread's, but its mean 104-123 us
against 88-99 us — one call in a few waits for the thread whose core was taken, and the
backward's mean was 4-6x one thread's. So the count is held for a phase and judged by the mean
of the timed calls that ran at it:

- the timed calls of keys whose implementation runs on torch's pool are summed per key at the
  count held now (a *reference* window);
- then torch is held at the other count for a *trial* window of as many timed calls
  (``TRIAL_CALLS``), summed the same way;
- the keys seen in both are compared: what the reference window's calls cost against what
  they would have cost at the trial's per-key means. The trial count is kept where that is
  under ``1 / SWITCH_GAIN`` of the reference, else torch goes back;
- a trial that loses doubles the wait before the next (``FIRST_WAIT_S`` up to
  ``LONGEST_WAIT_S``): on a quiet machine trials cost little; a change in the machine's load
  (``_load``: involuntary context switches, the run queue) brings the next trial forward.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from .._load import LoadReading
from ..threads import set_torch_phase, torch_phase

__all__ = ["FIRST_WAIT_S", "LONGEST_WAIT_S", "SWITCH_GAIN", "TRIAL_CALLS", "PoolPhase"]

TRIAL_CALLS = 48  # timed calls in a reference window and in a trial
SWITCH_GAIN = 1.15  # a trial count must be this much faster to be kept
FIRST_WAIT_S = 1.0
LONGEST_WAIT_S = 64.0
# a change in involuntary context switches per second, or in the run queue per CPU, of this
# much since the last trial makes the next trial come at once
_SWITCHES_CHANGE = 200.0
_QUEUE_CHANGE = 0.5

Window = dict[object, list[float]]  # key id -> [summed us, calls]


class PoolPhase:
    """Holds torch at the count its timed calls measure fastest (see the module docstring).
    Not thread-safe: the caller holds the runtime's lock. ``load`` gives the latest machine
    load reading (injectable)."""

    def __init__(self, pool_size: int, load: Callable[[], LoadReading | None]) -> None:
        # the counts tried: the pool's size (0) and one thread
        self._other = 1 if pool_size > 1 else 0
        self._load = load
        self._window: Window = {}
        self._calls = 0
        self._reference: Window | None = None  # while a trial runs: the window before it
        self._wait_s = FIRST_WAIT_S
        self._next_s = -math.inf  # when the next reference window may start
        self._load_at_trial: LoadReading | None = None
        self.trials = self.switches = 0

    def observe(self, key: object, duration_us: float, now_s: float) -> None:
        """One timed call of a key on torch's pool, at the count held now."""
        if not self._other:
            return
        if self._reference is None and now_s < self._next_s and not self._load_moved():
            return
        window = self._window
        sums = window.get(key)
        if sums is None:
            window[key] = [duration_us, 1.0]
        else:
            sums[0] += duration_us
            sums[1] += 1.0
        self._calls += 1
        if self._calls >= TRIAL_CALLS:
            self._window_done(now_s)

    def _window_done(self, now_s: float) -> None:
        window, self._window, self._calls = self._window, {}, 0
        held = torch_phase()
        if self._reference is None:  # the reference is measured: try the other count
            self._reference = window
            self.trials += 1
            self._load_at_trial = self._load()
            set_torch_phase(self._other if held == 0 else 0)
            return
        reference, self._reference = self._reference, None
        if _trial_gain(reference, window) >= SWITCH_GAIN:
            self.switches += 1
            self._wait_s = FIRST_WAIT_S  # (kept: the count held now; look again soon)
        else:
            set_torch_phase(0 if held else self._other)  # back
            self._wait_s = min(self._wait_s * 2.0, LONGEST_WAIT_S)
        self._next_s = now_s + self._wait_s

    def _load_moved(self) -> bool:
        before, now = self._load_at_trial, self._load()
        if before is None or now is None:
            return False
        switches, queue, cpus = now
        return (abs(switches - before[0]) >= _SWITCHES_CHANGE
                or abs(queue - before[1]) / cpus >= _QUEUE_CHANGE)


def _trial_gain(reference: Window, trial: Window) -> float:
    """How much faster the trial ran the reference window's calls: their cost at each key's
    reference mean over their cost at its trial mean (keys seen in both); 1.0 where none."""
    before = after = 0.0
    for key, (summed, calls) in reference.items():
        tried = trial.get(key)
        if tried is None:
            continue
        before += summed
        after += calls * tried[0] / tried[1]
    return before / after if after > 0.0 else 1.0
