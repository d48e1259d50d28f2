"""The runtime's decisions inside torch's profiler: while it records, each timed call's kernel
runs in a range named by operation, arm and reason, holding the ATen ops the arm launched;
while it does not, no range is made. The real torch profiler, on the CPU."""

from __future__ import annotations

import torch

import adaptive_runtime as ar
from adaptive_runtime._dispatch.profiling import profiler_range


def test_timed_calls_are_ranges_named_by_operation_arm_and_reason() -> None:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    x = torch.randn(4096)
    with torch.profiler.profile() as prof:
        for _ in range(40):
            rt.run("relu", x)
    ranges = [e for e in prof.events() if e.name.startswith("adaptive relu@torch: ")]
    assert ranges, [e.name for e in prof.events()][:20]
    reasons = {e.name.rsplit("(", 1)[1].rstrip(")") for e in ranges}
    assert reasons <= {r.value for r in ar.Reason} and "heuristic" in reasons
    arms = {e.name.split(": ", 1)[1].split(" ")[0] for e in ranges}
    assert "simd" in arms  # ATen's relu, the torch family's SIMD arm
    aten = [e for e in ranges if e.name.startswith("adaptive relu@torch: simd (")]
    assert any(child.name == "aten::relu" for e in aten for child in e.cpu_children), \
        "the arm's ATen op is not inside its range"
    # converged calls take the fast path: only timed ones are ranges
    calls = rt.selection_counts()
    timed = sum(n for k, n in calls.items() if k.operation == "relu@torch"
                and k.reason is not ar.Reason.EXPLOIT)
    assert len(ranges) < 40 and len(ranges) >= timed


def test_no_range_is_made_while_no_profiler_records() -> None:
    assert profiler_range("relu", ar.Backend.SIMD, ar.Reason.EXPLORE) is None
    with torch.profiler.profile():
        assert profiler_range("relu", ar.Backend.SIMD, ar.Reason.EXPLORE) is not None
