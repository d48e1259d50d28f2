"""The machine's load, read about once a second (``adaptive_runtime._load``)."""

from __future__ import annotations

import math

from adaptive_runtime._load import MachineLoad


def test_the_switch_rate_is_over_the_time_between_two_readings() -> None:
    counts = iter([100, 400, 400])
    load = MachineLoad(switches=lambda: next(counts), average=lambda: 1.25, cpus=4)
    assert load.poll(10.0) is None  # (one reading: no rate yet)
    assert load.poll(12.0) == (150.0, 1.25, 4)  # 300 switches over 2 s
    assert load.poll(13.0) == (0.0, 1.25, 4)
    assert load.reading == (0.0, 1.25, 4)


def test_a_platform_without_the_signals_reads_nothing_and_never_raises() -> None:
    def missing() -> int:
        raise ImportError("no resource module here")

    load = MachineLoad(switches=missing)
    assert load.poll(1.0) is None and load.poll(2.0) is None


def test_a_load_average_that_cannot_be_read_is_nan_not_an_error() -> None:
    counts = iter([0, 10])

    def unreadable() -> float:
        raise OSError("no /proc/loadavg")

    load = MachineLoad(switches=lambda: next(counts), average=unreadable, cpus=1)
    load.poll(0.0)
    rate, average, cpus = load.poll(1.0)
    assert rate == 10.0 and cpus == 1
    assert math.isnan(average)


def test_the_real_signals_read_on_this_machine() -> None:
    load = MachineLoad()
    load.poll(0.0)
    rate, average, cpus = load.poll(1.0)
    assert rate >= 0.0 and average >= 0.0 and cpus >= 1
