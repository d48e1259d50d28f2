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

A trial's end is told (:class:`~adaptive_runtime.records.PoolTrial`: the counts, the windows'
means and gain, what started it), for the span that explains it (``adaptive.threads torch``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from .._load import LoadReading
from ..records import PoolTrial
from ..threads import ThreadWatch, pool_size, set_torch_phase, torch_phase

__all__ = ["FIRST_WAIT_S", "LONGEST_WAIT_S", "SWITCH_GAIN", "TRIAL_CALLS", "PoolPhase",
           "TorchPool"]

TRIAL_CALLS = 48  # timed calls in a reference window and in a trial
SWITCH_GAIN = 1.15  # a trial count must be this much faster to be kept
FIRST_WAIT_S = 1.0
LONGEST_WAIT_S = 64.0
# a change in involuntary context switches per second, or in the run queue per CPU, of this
# much since the last trial makes the next trial come at once
_SWITCHES_CHANGE = 200.0
_QUEUE_CHANGE = 0.5

Window = dict[object, list[float]]  # key id -> [summed us, calls]
# what started a reference window: "first", "wait" or "load", and where the load moved, the
# change (involuntary context switches per second, the 1-minute load average)
Trigger = tuple[str, "tuple[float, float] | None"]


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
        self._trigger: Trigger = ("first", None)
        self._trial_start_s = 0.0
        self.trials = self.switches = 0  # (switches: trials whose count was kept)

    def observe(self, key: object, duration_us: float, now_s: float) -> PoolTrial | None:
        """One timed call of a key on torch's pool, at the count held now; the trial it
        ended, if it ended one."""
        if not self._other:
            return None
        if self._reference is None:
            moved = None
            if now_s < self._next_s:
                moved = self._load_change()
                if moved is None:
                    return None
            if not self._calls:  # (a reference window starts: what started it)
                self._trigger = ("first" if self._next_s == -math.inf
                                 else "load" if moved is not None else "wait", moved)
        window = self._window
        sums = window.get(key)
        if sums is None:
            window[key] = [duration_us, 1.0]
        else:
            sums[0] += duration_us
            sums[1] += 1.0
        self._calls += 1
        if self._calls >= TRIAL_CALLS:
            return self._window_done(now_s)
        return None

    def _window_done(self, now_s: float) -> PoolTrial | None:
        window, self._window, self._calls = self._window, {}, 0
        held = torch_phase()
        if self._reference is None:  # the reference is measured: try the other count
            self._reference = window
            self.trials += 1
            self._load_at_trial = self._load()
            self._trial_start_s = now_s
            set_torch_phase(self._other if held == 0 else 0)
            return None
        reference, self._reference = self._reference, None
        gain = _trial_gain(reference, window)
        before = 0 if held else self._other
        if gain >= SWITCH_GAIN:
            self.switches += 1
            self._wait_s = FIRST_WAIT_S  # (kept: the count held now; look again soon)
            after = held
        else:
            set_torch_phase(before)  # back
            self._wait_s = min(self._wait_s * 2.0, LONGEST_WAIT_S)
            after = before
        self._next_s = now_s + self._wait_s
        return self._told(before, held, after, gain, reference, window, now_s)

    def _told(self, before: int, trial: int, after: int, gain: float, reference: Window,
              window: Window, now_s: float) -> PoolTrial:
        """The trial that ended, as a span tells it: counts in threads (0: the pool's size)."""
        size = pool_size("torch")
        how, moved = self._trigger
        switches, average = moved if moved is not None else (0.0, 0.0)
        return PoolTrial("torch", before or size, trial or size, after or size, gain,
                         _mean_us(reference), _mean_us(window), TRIAL_CALLS,
                         now_s - self._trial_start_s, how, switches, average)

    def _load_change(self) -> tuple[float, float] | None:
        """The change in the machine's load since the last trial began, where it is enough
        to bring the next trial forward: (involuntary context switches per second, the
        1-minute load average); else ``None``."""
        before, now = self._load_at_trial, self._load()
        if before is None or now is None:
            return None
        switches, queue, cpus = now
        change = (switches - before[0], queue - before[1])
        if abs(change[0]) >= _SWITCHES_CHANGE or abs(change[1]) / cpus >= _QUEUE_CHANGE:
            return change
        return None


def _mean_us(window: Window) -> float:
    """A window's mean timed call (us), whatever its key."""
    calls = sum(sums[1] for sums in window.values())
    return sum(sums[0] for sums in window.values()) / calls if calls else math.nan


class TorchPool:
    """torch's pool as a dispatcher sees it: the threads it runs at, read without calling
    torch, and where thread counts are chosen (``choose``) the :class:`PoolPhase` that holds
    its count (``phase``; ``None`` otherwise). ``watch``: the dispatcher's reading of the
    pools' sizes (about once a second)."""

    def __init__(self, watch: ThreadWatch, choose: bool,
                 load: Callable[[], LoadReading | None]) -> None:
        self._watch = watch
        self._size = pool_size("torch")  # (until the watch has read it)
        self.phase = PoolPhase(self._size, load) if choose else None

    def threads(self) -> int:
        """The threads torch runs at now: the count held for a phase, else the pool's size at
        the latest reading (a list lookup and a dict lookup: cheap enough for a span)."""
        return torch_phase() or self._watch.size("torch") or self._size

    def trials(self) -> dict[str, int]:
        """``threads`` torch runs at now, ``held`` the count held for a phase (0: none), the
        ``trials`` of another count so far and those ``kept``; empty where thread counts are
        not chosen. The caller holds the runtime's lock."""
        phase = self.phase
        if phase is None:
            return {}
        return {"threads": self.threads(), "held": torch_phase(), "trials": phase.trials,
                "kept": phase.switches}


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
