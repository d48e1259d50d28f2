"""How busy the machine is around this process: the signals that explain a drift or a switch.

An arm that slows down because another process took its cores looks, in the runtime's
timings, like any other slowdown. What tells the two apart is cheap to read: how often the
kernel took the CPU from this process's threads against their will (involuntary context
switches, ``getrusage``), and the machine's run-queue length (the 1-minute load average) against
its CPU count. :func:`poll` reads them about once a second (the dispatcher's look around, on a
timed call: a few microseconds); :func:`latest` gives the latest reading, which a drift or
switch span carries (``adaptive.load.*``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

__all__ = ["LoadReading", "MachineLoad", "latest", "poll"]

# (involuntary context switches per second, the 1-minute load average, CPUs)
LoadReading = tuple[float, float, int]


def _involuntary_switches() -> int:
    import resource  # (POSIX: absent on Windows, where the reading is left out)

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw)


def _load_average() -> float:
    return float(os.getloadavg()[0])


class MachineLoad:
    """The latest reading of the signals, as rates over the time between two polls.
    ``switches`` and ``average`` are injectable (tests)."""

    def __init__(self, switches: Callable[[], int] = _involuntary_switches,
                 average: Callable[[], float] = _load_average,
                 cpus: int | None = None) -> None:
        self._switches = switches
        self._average = average
        self._cpus = cpus or os.cpu_count() or 1
        self._last: tuple[float, int] | None = None  # (when, the switch count then)
        self._lock = threading.Lock()
        self.reading: LoadReading | None = None

    def poll(self, now_s: float) -> LoadReading | None:
        """Read the signals; the rate is over the time since the previous poll (``None`` on
        the first, and where the platform has neither signal)."""
        try:
            count = self._switches()
        except (ImportError, OSError):
            return None
        try:
            average = self._average()
        except OSError:
            average = float("nan")
        with self._lock:
            last, self._last = self._last, (now_s, count)
            if last is not None and now_s > last[0]:
                rate = max(0, count - last[1]) / (now_s - last[0])
                self.reading = (rate, average, self._cpus)
            return self.reading


_machine = MachineLoad()


def poll(now_s: float) -> LoadReading | None:
    """Read this process's machine load now (see :class:`MachineLoad`)."""
    return _machine.poll(now_s)


def latest() -> LoadReading | None:
    """The latest reading, ``None`` before the second poll."""
    return _machine.reading
