"""Resident memory of a process making 10^6 traced calls (run by ``test_load.py``).

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
_PAGE_MIB = os.sysconf("SC_PAGE_SIZE") / 2**20


def rss_mib() -> float:
    """Resident set size now (``/proc/self/statm``'s second field, in pages)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE_MIB


def main(directory: str, calls: int) -> None:
    telemetry = ar.telemetry.configure(service_name="rss-probe", directory=directory,
                                       metrics_interval_s=1.0)
    # Never hot (a hot operation exports no spans) and a span budget well above the
    # defaults: the span path runs all along, not only in the warm-up.
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(hot_path_calls_per_sec=1e12, spans_per_sec=2_000,
                                             trace_cpu_share=float("inf")),
                            builtin_ops=False, devices=DeviceProbe(gpu=False))
    for name in OPERATIONS:
        op = rt.register(name, size=lambda a, b: a.size, kind="vector")
        fn = np.add if name.startswith("add") else np.multiply
        op.add_implementation(ar.Backend.SIMD, fn)
        op.add_implementation(ar.Backend.SCALAR, fn)
    inputs = [(name, np.ones(n), np.ones(n)) for name in OPERATIONS for n in SIZES]
    k = len(inputs)
    run = rt.run

    for i in range(WARM_UP_CALLS):
        name, a, b = inputs[i % k]
        run(name, a, b)
    rt.flush_telemetry()
    gc.collect()
    warm = rss_mib()
    for i in range(calls):
        name, a, b = inputs[i % k]
        run(name, a, b)
    rt.flush_telemetry()
    gc.collect()
    end = rss_mib()

    traced = sum(rt.trace_counts()["exported"].values())  # calls whose spans were admitted
    counted = sum(rt.selection_counts().values())
    telemetry.shutdown()
    print(json.dumps({"calls_made": WARM_UP_CALLS + calls, "calls_counted": counted,
                      "warm_up": WARM_UP_CALLS, "calls_traced": traced,
                      "rss_warm_mib": round(warm, 1), "rss_end_mib": round(end, 1),
                      "rss_growth_mib": round(end - warm, 2)}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
