"""Resident memory of a process making 10^6 calls, traced all along (run by ``test_load.py``).

``python rss_probe.py DIRECTORY CALLS`` configures telemetry as an application would with no
collector (``ar.telemetry.configure``: the embedded OTLP/JSON files, in DIRECTORY), warms a
runtime up, reads the resident set size, makes CALLS calls and reads it again. The calls cycle
over a bounded set of keys (six operations x six size buckets) so that history, trace-gate and
metric state reach their final size in the warm-up; what grows after that is a leak. Prints
one JSON line of figures.
"""

from __future__ import annotations

import gc
import json
import os
import sys

import numpy as np

import adaptive_runtime as ar
from adaptive_runtime.operations import DeviceProbe

OPERATIONS = ("add_a", "add_b", "add_c", "mul_a", "mul_b", "mul_c")
SIZES = (8, 64, 300, 1_000, 2_000, 5_000)
WARM_UP_CALLS = 100_000
SPANS_PER_SEC = 500  # the span budget: spans admitted a second, every reason together
MEASURE_PERIOD = 8
_PAGE_MIB = os.sysconf("SC_PAGE_SIZE") / 2**20


def rss_mib() -> float:
    """Resident set size now (``/proc/self/statm``'s second field, in pages)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE_MIB


def main(directory: str, calls: int) -> None:
    telemetry = ar.telemetry.configure(service_name="rss-probe", directory=directory,
                                       metrics_interval_s=1.0)
    # Never hot (a hot operation exports no spans), every timed call a candidate for a span
    # (a "slow" one) and 1-in-8 calls timed: the trace gate admits spans all along, not only
    # in the warm-up — slow ones within their share of the budget, the re-checks' decision
    # spans of 36 keys filling the rest — up to SPANS_PER_SEC, 2.5 times the default. (A
    # budget lifted to give slow spans alone that rate admitted twice as many spans, past what
    # the span worker's bounded buffer holds on this machine: spans lost.)
    config = ar.RuntimeConfig(hot_path_calls_per_sec=1e12, spans_per_sec=SPANS_PER_SEC,
                              sampling_threshold_us=0.0, max_measure_period=MEASURE_PERIOD)
    rt = ar.AdaptiveRuntime(config, builtin_ops=False, devices=DeviceProbe(gpu=False))
    for name in OPERATIONS:
        op = rt.register(name, size=lambda a, b: a.size, kind="vector")
        fn = np.add if name.startswith("add") else np.multiply
        op.add_implementation(ar.Backend.SIMD, fn)
        op.add_implementation(ar.Backend.SCALAR, fn)
    inputs = [(name, np.ones(n), np.ones(n)) for name in OPERATIONS for n in SIZES]

    def traced() -> int:  # calls whose spans were admitted, so far
        return sum(rt.trace_counts()["exported"].values())

    k = len(inputs)
    run = rt.run

    for i in range(WARM_UP_CALLS):
        name, a, b = inputs[i % k]
        run(name, a, b)
    rt.flush_telemetry()
    gc.collect()
    warm = rss_mib()
    traced_per_tenth = []
    before = traced()
    for tenth in range(10):
        for i in range(tenth * calls // 10, (tenth + 1) * calls // 10):
            name, a, b = inputs[i % k]
            run(name, a, b)
        now = traced()
        traced_per_tenth.append(now - before)
        before = now
    rt.flush_telemetry()
    gc.collect()
    end = rss_mib()

    counted = sum(rt.selection_counts().values())
    telemetry.shutdown()
    stats = ar.telemetry.stats()
    print(json.dumps({"calls_made": WARM_UP_CALLS + calls, "calls_counted": counted,
                      "warm_up": WARM_UP_CALLS, "calls_traced": sum(traced_per_tenth),
                      "traced_per_tenth": traced_per_tenth,
                      "spans_exported": stats.spans_exported,
                      "spans_lost": sum(stats.dropped.values()),
                      "rss_warm_mib": round(warm, 1), "rss_end_mib": round(end, 1),
                      "rss_growth_mib": round(end - warm, 2)}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
