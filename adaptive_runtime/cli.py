"""The ``adaptive-runtime`` command (also ``python -m adaptive_runtime``).

``adaptive-runtime demo`` runs a mixed ``dot``/``add`` workload over sizes from 8 to 10^6
elements on a fresh :class:`AdaptiveRuntime`, then prints, per (operation, size bucket), the arm
the runtime settled on, why, the mean latency it measured on each arm, and the speed-up of its
choice over the slowest arm it measured.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TextIO

import numpy as np

from . import __version__
from .backend import Backend
from .errors import BackendUnavailableError, ConfigError
from .keys import bucket_bounds, size_bucket
from .operations import DeviceProbe
from .runtime import AdaptiveRuntime
from .telemetry import configure, shutdown

__all__ = ["main", "print_decisions"]

DEMO_OPERATIONS = ("dot", "add")
MIN_SIZE = 8


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``adaptive-runtime`` console script; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except (ConfigError, BackendUnavailableError) as exc:  # bad ADAPTIVE_RUNTIME_* setting
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `adaptive-runtime demo | head`: not an error worth a traceback
        sys.stderr.close()
        return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="adaptive-runtime",
        description="Adaptive GPU / SIMD / SCALAR dispatch that learns from every call.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")
    commands.required = True

    demo = commands.add_parser(
        "demo", help="run a mixed dot/add workload and show what the runtime learned",
        description="Run a mixed workload of the built-in operations dot and add over sizes "
                    "from 8 elements to --max-size (log-spaced, shuffled), then print per "
                    "(operation, size bucket) the chosen arm, the reason, the mean latency "
                    "measured on each arm and the speed-up over the slowest arm.")
    demo.add_argument("--calls", type=_positive_int, default=4000,
                      help="number of operation calls to run (default: %(default)s)")
    demo.add_argument("--seed", type=int, default=0,
                      help="seed for the data and the call order (default: %(default)s)")
    demo.add_argument("--max-size", type=_max_size, default=1_000_000,
                      help="largest input size in elements, >= 8 (default: %(default)s)")
    demo.add_argument("--no-telemetry", action="store_true",
                      help="do not export spans and metrics (by default they go to OTLP when "
                           "OTEL_EXPORTER_OTLP_ENDPOINT is set, else to OTLP/JSON lines files "
                           "under ./adaptive-runtime-telemetry)")
    demo.set_defaults(handler=_demo)
    return parser


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {value}")
    return value


def _max_size(text: str) -> int:
    value = int(float(text)) if "e" in text.lower() else int(text.replace("_", ""))
    if value < MIN_SIZE:
        raise argparse.ArgumentTypeError(f"must be an integer >= {MIN_SIZE}, got {value}")
    return value


# ---------------------------------------------------------------------------------- demo


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


def _demo(args: argparse.Namespace) -> int:
    telemetry = None if args.no_telemetry else configure(service_name="adaptive-runtime-demo")
    rt = AdaptiveRuntime()
    sizes = demo_sizes(args.max_size)
    work = demo_workload(args.calls, sizes, args.seed)
    # Allocated once: every call uses a prefix view of the same two buffers, so the loop
    # measures the kernels, not allocation.
    rng = np.random.default_rng(args.seed)
    a_buf, b_buf = rng.random(args.max_size), rng.random(args.max_size)
    inputs = {n: (a_buf[:n], b_buf[:n]) for n in sizes}

    out = sys.stdout
    print("warming up: one untimed call per arm and size (numba compiles the SCALAR loops "
          "on first use)...", file=sys.stderr, flush=True)
    warm_up(rt, inputs.values())
    print(f"adaptive-runtime demo: {len(work)} calls of {', '.join(DEMO_OPERATIONS)} over "
          f"{len(sizes)} sizes from {sizes[0]:,} to {sizes[-1]:,} elements (seed {args.seed})",
          file=out, flush=True)
    progress = Progress(len(work), sys.stderr)
    run = rt.run
    start = time.perf_counter()
    for i, (op, n) in enumerate(work, 1):
        a, b = inputs[n]
        run(op, a, b)
        progress.update(i)
    progress.close()
    elapsed_s = time.perf_counter() - start

    print_report(rt, sizes, len(work), elapsed_s, out)
    if telemetry is not None and telemetry.enabled:
        shutdown()  # flush: every span the trace gate admitted reaches the exporter
        exported = sum(rt.trace_counts()["exported"].values())
        print(f"telemetry: {exported} traced calls (select + execute spans) -> "
              f"{telemetry.traces_destination or 'the application tracer provider'}; "
              f"metrics -> {telemetry.metrics_destination or 'the application meter provider'}",
              file=out)
    return 0


def warm_up(rt: AdaptiveRuntime, inputs: Iterable[tuple[np.ndarray, np.ndarray]]) -> None:
    """Call every available arm of the demo operations once per input, outside the runtime.

    One-off costs (numba compilation, the allocator's first page faults on large outputs,
    BLAS thread start-up) would otherwise land in the first timings of whichever keys happen
    to come first in the shuffled workload and make the demo's table depend on call order.
    """
    devices = DeviceProbe()
    inputs = list(inputs)
    for name in DEMO_OPERATIONS:
        op = rt.operation(name)
        for backend in op.backends:
            impl = op.implementation_for(backend)
            if impl is None or not devices.available(backend):
                continue
            for a, b in inputs:
                try:
                    impl.fn(a, b)
                except Exception:  # the runtime meets this arm's failure itself, and falls back
                    break


class Progress:
    """A one-line progress bar: redrawn in place (at most ~20 times a second) on a terminal,
    one line per 10% otherwise, so CI logs show progress without thousands of lines."""

    WIDTH = 30
    MIN_INTERVAL_S = 0.05
    LOG_STEP_PERCENT = 10

    def __init__(self, total: int, stream: TextIO) -> None:
        self.total = max(total, 1)
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self._last_draw_s = -math.inf
        self._next_percent = 0
        self._shown = -1

    def update(self, done: int) -> None:
        if self.tty:
            now = time.monotonic()
            if now - self._last_draw_s < self.MIN_INTERVAL_S and done < self.total:
                return
            self._last_draw_s = now
            self._write("\r" + self._line(done))
        else:
            percent = done * 100 // self.total
            if percent >= self._next_percent:
                self._next_percent = (percent // self.LOG_STEP_PERCENT + 1) * self.LOG_STEP_PERCENT
                self._write(self._line(done) + "\n")
        self._shown = done

    def close(self) -> None:
        if self._shown < self.total:
            self.update(self.total)
        if self.tty:
            self._write("\n")

    def _line(self, done: int) -> str:
        filled = done * self.WIDTH // self.total
        bar = "#" * filled + "." * (self.WIDTH - filled)
        return f"[{bar}] {done * 100 // self.total:3d}% {done}/{self.total} calls"

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


def print_report(rt: AdaptiveRuntime, sizes: Sequence[int], calls: int, elapsed_s: float,
                 out: TextIO) -> None:
    """Print the per-(operation, size bucket) table and a summary of what was chosen."""
    records = rt.history_snapshot()
    means: dict[tuple[str, int], dict[Backend, float]] = {}
    for rec in records:
        if rec.operation in DEMO_OPERATIONS and rec.samples and math.isfinite(rec.mean_us):
            means.setdefault((rec.operation, rec.size_bucket), {})[rec.backend] = rec.mean_us
    arms = [b for b in Backend if any(b in m for m in means.values())]

    header = ["operation", "bucket", "sizes", "chosen", "reason", "conf",
              *(f"{b.value} us" for b in arms), "speed-up"]
    rows: list[list[str]] = []
    chosen_count: Counter[str] = Counter()
    buckets = sorted({size_bucket(n) for n in sizes})
    for op in DEMO_OPERATIONS:
        for bucket in buckets:
            lo, hi = bucket_bounds(bucket)
            decision = rt.decide(op, lo)
            chosen = Backend(decision.backend)
            chosen_count[chosen.value] += 1
            measured = means.get((op, bucket), {})
            mine = measured.get(chosen)
            if mine is not None and len(measured) > 1 and mine > 0:
                speedup = f"{max(measured.values()) / mine:.2f}x"
            else:
                speedup = "-"
            rows.append([op, str(bucket), f"{lo:,}-{hi:,}", chosen.value,
                         str(decision.reason.value), f"{decision.confidence:.2f}",
                         *(_us(measured.get(b)) for b in arms), speedup])

    print(file=out)
    _table(header, rows, out)
    keys = len(rows)
    by_arm = ", ".join(f"{arm} {chosen_count[arm.value]}" for arm in Backend
                       if chosen_count[arm.value])
    print(f"\n{calls} calls in {elapsed_s:.2f} s; {keys} keys (operation x size bucket); "
          f"chosen arm: {by_arm}", file=out)
    print("latencies: learned at each bucket's reference size (its geometric middle); "
          "speed-up: mean latency of the slowest arm measured / the chosen arm's; "
          "'-' when only one arm was measured", file=out, flush=True)


def print_decisions(rt: AdaptiveRuntime, out: TextIO = sys.stdout,
                    operations: Iterable[str] | None = None) -> None:
    """Print what ``rt`` decided for every key it has history for (or only ``operations``'
    keys, their input families included): per (operation key, size bucket), the arm it runs
    now, why, how sure, and the mean latency measured on each arm."""
    wanted = None if operations is None else set(operations)
    means: dict[tuple[str, int], dict[Backend, float]] = {}
    for rec in rt.history_snapshot():
        base = rec.operation.split("@", 1)[0]
        if wanted is not None and base not in wanted and rec.operation not in wanted:
            continue
        if rec.samples and math.isfinite(rec.mean_us):
            means.setdefault((rec.operation, rec.size_bucket), {})[rec.backend] = rec.mean_us
    arms = [b for b in Backend if any(b in m for m in means.values())]
    header = ["operation", "bucket", "sizes", "chosen", "reason", "conf",
              *(f"{b.value} us" for b in arms)]
    rows = []
    for (op, bucket), measured in sorted(means.items()):
        lo, hi = bucket_bounds(bucket)
        decision = rt.decide(op, lo)
        rows.append([op, str(bucket), f"{lo:,}-{hi:,}", decision.backend.value,
                     decision.reason.value, f"{decision.confidence:.2f}",
                     *(_us(measured.get(b)) for b in arms)])
    _table(header, rows, out)


def _us(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], out: TextIO) -> None:
    cells = [list(header), *map(list, rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    left = {0, 3, 4}  # text columns; numbers are right-aligned

    def line(row: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if i in left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip()

    print(line(cells[0]), file=out)
    print("  ".join("-" * w for w in widths), file=out)
    previous_op = None
    for row in cells[1:]:
        if previous_op is not None and row[0] != previous_op:
            print(file=out)
        previous_op = row[0]
        print(line(row), file=out)
