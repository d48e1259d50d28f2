"""``adaptive-runtime demo``: a mixed ``dot``/``add`` workload over sizes from 8 to
``--max-size`` elements on a fresh runtime, and the table of what it learned (the same table
for any runtime: :func:`adaptive_runtime.offline.report.print_decisions`)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

import numpy as np

from ..backend import choice_order
from ..errors import MissingExtraError
from ..keys import size_bucket
from ..offline.report import SPEEDUP_MIN_TIMINGS, decision_table, from_runtime, make_console
from ..operations import DeviceProbe
from ..runtime import AdaptiveRuntime
from ..telemetry import telemetry_setup
from ..telemetry.defaults import INSTALL_SDK_SIDE
from .defaults import telemetry_folder
from .progress import progress, status

__all__ = ["DEMO_OPERATIONS", "MIN_SIZE", "demo_command", "demo_sizes", "demo_workload",
           "print_report", "report_hint", "warm_up"]

DEMO_OPERATIONS = ("dot", "add")
MIN_SIZE = 8


def demo_sizes(max_size: int) -> list[int]:
    """Log-spaced sizes from 8 to ``max_size``, about two per size bucket."""
    buckets = size_bucket(max_size) - size_bucket(MIN_SIZE) + 1
    points = np.geomspace(MIN_SIZE, max_size, num=max(2, 2 * buckets))
    return sorted(set(np.rint(points).astype(np.int64).tolist()) | {MIN_SIZE, max_size})


def demo_workload(calls: int, sizes: Sequence[int], seed: int) -> list[tuple[str, int]]:
    """``calls`` (operation, size) pairs, every pair equally often, in a shuffled order."""
    pairs = [(op, n) for op in DEMO_OPERATIONS for n in sizes]
    rng = np.random.default_rng(seed)
    if calls >= len(pairs):
        work = (pairs * -(-calls // len(pairs)))[:calls]
    else:  # fewer calls than pairs: a random subset
        work = [pairs[i] for i in rng.choice(len(pairs), size=calls, replace=False)]
    order = rng.permutation(len(work))
    return [work[i] for i in order]


def demo_command(args: argparse.Namespace) -> int:
    """Run ``adaptive-runtime demo``; returns the exit status."""
    setup = None if args.no_telemetry else _telemetry_setup()
    telemetry = (None if setup is None
                 else setup.configure(default_service_name="adaptive-runtime-demo"))
    rt = AdaptiveRuntime()
    sizes = demo_sizes(args.max_size)
    work = demo_workload(args.calls, sizes, args.seed)
    # Allocated once: every call uses a prefix view of the same two buffers, so the loop
    # measures the kernels, not allocation.
    rng = np.random.default_rng(args.seed)
    a_buf, b_buf = rng.random(args.max_size), rng.random(args.max_size)
    inputs = {n: (a_buf[:n], b_buf[:n]) for n in sizes}

    out = sys.stdout
    err = make_console(sys.stderr)
    warming = ("warming up: one untimed call per arm and size (numba compiles the SCALAR "
               "loops on first use)...")
    with status(err, warming):
        warm_up(rt, inputs.values())
    print(f"adaptive-runtime demo: {len(work)} calls of {', '.join(DEMO_OPERATIONS)} over "
          f"{len(sizes)} sizes from {sizes[0]:,} to {sizes[-1]:,} elements (seed {args.seed})",
          file=out, flush=True)
    run = rt.run
    with progress(len(work), "demo", err) as update:
        start = time.perf_counter()
        for i, (op, n) in enumerate(work, 1):
            a, b = inputs[n]
            run(op, a, b)
            update(i)
        elapsed_s = time.perf_counter() - start

    print_report(rt, sizes, len(work), elapsed_s, out)
    if setup is not None and telemetry is not None and telemetry.enabled:
        setup.shutdown()  # flush: every span the trace gate admitted reaches the exporter
        exported = sum(rt.trace_counts()["exported"].values())
        print(f"telemetry: {exported} traced calls (select + execute spans) -> "
              f"{telemetry.traces_destination or 'the application tracer provider'}; "
              f"metrics -> {telemetry.metrics_destination or 'the application meter provider'}",
              file=out)
        spans_file = telemetry.traces_destination
        if spans_file and os.path.isfile(spans_file):  # (the embedded files, not OTLP)
            print(report_hint(os.path.dirname(spans_file)), file=out)
    out.flush()
    return 0


def _telemetry_setup() -> Any:
    """The telemetry SDK side (``telemetry_setup``); without the ``otlp`` extra, the error says
    both ways on: install the extra, or run the demo without telemetry."""
    # (the SDK is loaded here, not when the CLI starts: report, replay and doctor run without)
    try:
        return telemetry_setup("configure")
    except MissingExtraError as exc:
        raise MissingExtraError(
            f"the demo exports its spans and metrics through the OpenTelemetry SDK, not "
            f"installed here ({exc.name} is missing): {INSTALL_SDK_SIDE}, "
            "or run it without telemetry: adaptive-runtime demo --no-telemetry",
            name=exc.name) from exc


def report_hint(folder: str) -> str:
    """The demo's last line: the ``report`` command that shows the spans just written to
    ``folder``, as it runs here (``--no-png`` and the extra that draws the PNG where
    matplotlib is missing)."""
    where = "" if os.path.abspath(folder) == os.path.abspath(telemetry_folder()) \
        else f" --telemetry {shlex.quote(folder)}"
    if importlib.util.find_spec("matplotlib") is None:
        return (f"see them: adaptive-runtime report{where} --no-png (this table from the "
                "spans; report.png, latency against size per arm and decisions over time, "
                "needs matplotlib: pip install 'adaptive_runtime[report]')")
    return (f"see them: adaptive-runtime report{where} (this table from the spans, and "
            "report.png: latency against size per arm, decisions over time)")


def warm_up(rt: AdaptiveRuntime, inputs: Iterable[tuple[np.ndarray, np.ndarray]]) -> None:
    """Call every available implementation of the demo operations once per input, outside
    the runtime.

    One-off costs (numba compilation, the allocator's first page faults on large outputs,
    BLAS thread start-up) would otherwise land in the first timings of whichever keys happen
    to come first in the shuffled workload and make the demo's table depend on call order.
    """
    devices = DeviceProbe()
    inputs = list(inputs)
    for name in DEMO_OPERATIONS:
        op = rt.operation(name)
        for impl in op.implementations():
            if not devices.available(impl.backend):
                continue
            for a, b in inputs:
                try:
                    impl.fn(a, b)
                except Exception:  # the runtime meets this arm's failure itself, and falls back
                    break


def print_report(rt: AdaptiveRuntime, sizes: Sequence[int], calls: int, elapsed_s: float,
                 out: TextIO) -> None:
    """Print the per-(operation, size bucket) table of the demo and a summary of the choices
    (``sizes``: the sizes the workload ran, for the number of keys it touched)."""
    report = from_runtime(rt, DEMO_OPERATIONS)
    console = make_console(out)
    console.print()
    console.print(decision_table(report.rows))
    chosen = Counter(row.chosen for row in report.rows if row.chosen is not None)
    by_arm = ", ".join(f"{choice.value} {chosen[choice]}"
                       for choice in sorted(chosen, key=choice_order))
    keys = len({(op, size_bucket(n)) for op in DEMO_OPERATIONS for n in sizes})
    console.print(f"\n{calls} calls in {elapsed_s:.2f} s; {len(report.rows)} of {keys} keys "
                  f"(operation x size bucket) measured; chosen arm: {by_arm or 'none'}",
                  markup=False)
    console.print("latencies: learned at each bucket's reference size (its geometric middle), "
                  "±the standard deviation of the timings behind it (n: how many); "
                  "speed-up: the slowest arm measured / the chosen arm; '-' when only one arm "
                  f"was measured or either stands on under {SPEEDUP_MIN_TIMINGS} timings",
                  markup=False)
