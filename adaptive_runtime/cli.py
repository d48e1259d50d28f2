"""The ``adaptive-runtime`` command (also ``python -m adaptive_runtime``).

``adaptive-runtime demo`` runs a mixed ``dot``/``add`` workload over sizes from 8 to 10^6
elements on a fresh :class:`AdaptiveRuntime`, then prints, per (operation, size bucket), the arm
the runtime settled on, why, the latency it learned on each arm, and the speed-up of its choice
over the slowest arm it measured.

``adaptive-runtime report`` shows the same for any run, from a saved history file or the
telemetry files the runtime writes without a collector: a table in the terminal and a PNG
(latency against size per arm with the crossovers, and the traced decisions over time).

``adaptive-runtime replay`` runs policy configurations over a run's recorded timings
(``rt.record_calls(path)``, or the telemetry files) and prints each one's regret against the
hindsight oracle, switches and exploration share (see :mod:`adaptive_runtime.replay`).
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib.util
import os
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np
from rich import box
from rich.console import Console
from rich.table import Table

from . import __version__
from ._progress import progress, status
from .backend import choice_order
from .cli_views import doctor_text, print_json, replay_json, report_json
from .errors import BackendUnavailableError, ConfigError, MissingExtraError
from .keys import size_bucket
from .operations import DeviceProbe
from .report import (
    Report,
    ReportInputError,
    crossovers,
    decision_table,
    from_history_file,
    from_runtime,
    from_telemetry,
    make_console,
    render_figure,
    save_png,
    trace_files,
)
from .runtime import AdaptiveRuntime
from .telemetry import telemetry_setup
from .telemetry.defaults import DEFAULT_DIRECTORY

if TYPE_CHECKING:
    from .replay import ReplayResult

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
    except MissingExtraError as exc:  # (the demo's telemetry without the otlp extra)
        print(f"{parser.prog} {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except ReportInputError as exc:  # a missing, empty or corrupt input: one line, no trace
        print(f"{parser.prog} {args.command}: error: {exc}", file=sys.stderr)
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

    report = commands.add_parser(
        "report", help="show what a run learned and decided: a table and a PNG, without "
                       "Jaeger or Grafana",
        description="Read a saved history file (--history) or the telemetry files the "
                    "runtime writes without a collector (--telemetry: traces.jsonl), print "
                    "per (operation, size bucket) each arm's learned latency, the chosen arm "
                    "and the timings behind it, and draw a PNG: per operation, latency "
                    "against input size per arm (log-log) with the chosen arm ringed and the "
                    "crossovers marked, and the traced decisions over time by reason. "
                    "Exit status 2 when an input is missing, empty or corrupt.")
    report.add_argument("--history", metavar="PATH",
                        help="a history file (rt.save_history / ADAPTIVE_RUNTIME_HISTORY); "
                             "its chosen arm is the fastest learned, what a runtime loading "
                             "it commits to. With --telemetry too, the decision timeline "
                             "comes from the spans")
    report.add_argument("--telemetry", metavar="DIR",
                        help="a telemetry folder holding traces.jsonl (default, unless "
                             "--history is given: $ADAPTIVE_RUNTIME_TELEMETRY_DIR or "
                             f"./{DEFAULT_DIRECTORY})")
    report.add_argument("--png", metavar="PATH", default="report.png",
                        help="where to write the figure (default: %(default)s)")
    report.add_argument("--no-png", action="store_true",
                        help="print the table only (no matplotlib needed)")
    report.add_argument("--operation", metavar="PATTERN", action="append",
                        help="only operations matching this shell pattern, e.g. 'linear*' "
                             "(repeatable)")
    report.add_argument("--all-runs", action="store_true",
                        help="read the spans of every run appended to the folder, not only "
                             "the latest run's")
    report.add_argument("--json", action="store_true",
                        help="print the rows and crossovers as one JSON document (no PNG)")
    report.set_defaults(handler=_report)
    _add_replay(commands)
    doctor = commands.add_parser(
        "doctor", help="what this machine gives the runtime, and what is wrong with its "
                       "settings",
        description="Report the arms available here (numba, numpy, torch and its CUDA, JAX; "
                    "GPU names and memory), the thread pools' sizes, where telemetry would "
                    "go from this environment's OTEL_* settings and whether it answers, the "
                    "Prometheus port, and the history file's status. Exit status 1 when a "
                    "problem is found (listed last).")
    doctor.add_argument("--json", action="store_true",
                        help="print the findings as one JSON document")
    doctor.add_argument("--timeout", type=float, default=1.0, metavar="S",
                        help="seconds to wait for the telemetry endpoint (default: "
                             "%(default)s)")
    doctor.set_defaults(handler=_doctor)
    return parser


def _add_replay(commands: Any) -> None:
    replay = commands.add_parser(
        "replay", help="replay policy configurations over a run's recorded timings",
        description="Run the selection policy offline over recorded per-call timings — a "
                    "file from rt.record_calls(path), or a telemetry folder's traces.jsonl — "
                    "once per configuration (the default one first), and print each one's "
                    "regret against the hindsight oracle (per key the arm with the lowest "
                    "mean timing), its switches of the committed arm and its exploration "
                    "share, beside the recorded run's own regret. An arm the policy picks is "
                    "answered with that arm's timing recorded nearest before the call on the "
                    "same key (--pick cycle: its timings in turn); an arm the log never timed "
                    "on a key is not a candidate there (counted as unevaluable). Exit status "
                    "2 when the input is missing, empty or corrupt, or a knob is unknown.")
    replay.add_argument("source", nargs="?", metavar="SOURCE",
                        help="a recorded-calls file (JSON lines) or a telemetry folder "
                             "(default: $ADAPTIVE_RUNTIME_TELEMETRY_DIR or "
                             f"./{DEFAULT_DIRECTORY})")
    replay.add_argument("--config", metavar="KNOB=VALUE[,...]", action="append", default=[],
                        help="a policy configuration to replay besides the default one, e.g. "
                             "'switch_margin=0.1,min_samples=5' (repeatable; knobs: the "
                             "fields of adaptive_runtime.policy.PolicyConfig)")
    replay.add_argument("--pick", choices=("nearest", "cycle"), default="nearest",
                        help="which recorded timing answers an arm the policy picks "
                             "(default: %(default)s)")
    replay.add_argument("--keys", type=int, default=10, metavar="N",
                        help="show the N keys losing most time against the oracle under the "
                             "default configuration (0: none; default: %(default)s)")
    replay.add_argument("--json", action="store_true",
                        help="print the results as one JSON document")
    replay.set_defaults(handler=_replay)


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
    # (the SDK is loaded here, not when the CLI starts: report, replay and doctor run without)
    setup = None if args.no_telemetry else telemetry_setup("configure")
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
            folder = os.path.dirname(spans_file)
            where = "" if os.path.abspath(folder) == os.path.abspath(_telemetry_folder()) \
                else f" --telemetry {folder}"
            print(f"see them: adaptive-runtime report{where} (this table from the spans, and "
                  "report.png: latency against size per arm, decisions over time)", file=out)
    out.flush()
    return 0


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
    console.print("latencies: learned at each bucket's reference size (its geometric middle); "
                  "speed-up: the slowest arm measured / the chosen arm; '-' when only one arm "
                  "was measured", markup=False)


def print_decisions(rt: AdaptiveRuntime, out: TextIO | None = None,
                    operations: Iterable[str] | None = None) -> None:
    """Print what ``rt`` decided for every key it has history for (or only ``operations``'
    keys, their input families included): per (operation key, size bucket), the arm it runs
    now, why, how sure, the latency learned on each arm, the timings behind them and the
    speed-up over the slowest arm (``out``: standard output by default)."""
    report = from_runtime(rt, operations)
    make_console(sys.stdout if out is None else out).print(decision_table(report.rows))


# -------------------------------------------------------------------------------- report


def _telemetry_folder() -> str:
    """Where ``ar.telemetry.configure()`` writes the embedded files by default."""
    return os.environ.get("ADAPTIVE_RUNTIME_TELEMETRY_DIR") or DEFAULT_DIRECTORY


def _report(args: argparse.Namespace) -> int:
    out = sys.stdout
    err = make_console(sys.stderr)
    if args.json:
        args.no_png = True
    if not args.no_png and importlib.util.find_spec("matplotlib") is None:
        # (checked first: a long read should not end in this)
        raise ReportInputError("the PNG needs matplotlib: pip install "
                               "'adaptive_runtime[report]', or pass --no-png")
    report = _read_report(args, err)
    if args.operation:
        report = report.only([op for op in report.operations
                              if any(fnmatch.fnmatchcase(op, p) for p in args.operation)])
        if not report.operations:
            raise ReportInputError(f"no operation matches {' or '.join(args.operation)} in "
                                   f"{report.source}")
    if args.json:
        print_json(report_json(report, crossovers(report.rows)), out)
        return 0
    console = make_console(out)
    console.print(f"adaptive-runtime report: {report.source}", markup=False)
    console.print(decision_table(report.rows))
    console.print(_legend(report), markup=False)
    if args.no_png:
        return 0
    with status(err, f"drawing {args.png}...", log=False):
        figure = render_figure(report)
        try:
            save_png(figure, args.png)
        except OSError as exc:
            raise ReportInputError(f"cannot write the PNG {args.png!r}: "
                                   f"{exc.strerror or exc}") from None
    cross = crossovers(report.rows)
    where = ", ".join(f"{c.operation} {c.label}{'' if c.clear else ' (near-tie)'}"
                      for c in cross)
    where = f": {where}" if where else ""
    console.print(f"wrote {args.png}: {_count(len(report.operations), 'operation')}, "
                  f"{_count(len(cross), 'crossover')}{where}", markup=False)
    return 0


def _read_report(args: argparse.Namespace, err: Console) -> Report:
    """The report the arguments ask for: the history file's rows, with the decisions of the
    telemetry folder when one is given too; else the telemetry folder's rows and decisions."""
    if args.history is not None:
        report = from_history_file(args.history)
        if args.telemetry is None:
            return report
        spans = _read_telemetry(args.telemetry, args.all_runs, err)
        return replace(report, events=spans.events,
                       source=f"{report.source}; decisions from {spans.source}")
    return _read_telemetry(args.telemetry or _telemetry_folder(), args.all_runs, err)


def _read_telemetry(folder: str, all_runs: bool, err: Console) -> Report:
    total = sum(p.stat().st_size for p in trace_files(folder))
    with progress(total, f"reading {folder}", err, in_bytes=True, log=False) as update:
        return from_telemetry(folder, all_runs=all_runs,
                              on_progress=lambda done, _total: update(done))


def _replay(args: argparse.Namespace) -> int:
    from .replay import load_calls, parse_config, replay

    source = args.source or _telemetry_folder()
    try:
        configs = [("default", parse_config(""))]
        configs += [(text, parse_config(text)) for text in args.config]
    except ValueError as exc:
        raise ReportInputError(str(exc)) from None
    try:
        with status(make_console(sys.stderr), f"reading {source}...", log=False):
            calls = load_calls(source)
    except OSError as exc:
        raise ReportInputError(f"{source} cannot be read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ReportInputError(str(exc)) from None
    if not calls:
        raise ReportInputError(f"{source} holds no recorded call")
    results = [(name, replay(calls, config, pick=args.pick)) for name, config in configs]
    if args.json:
        print_json(replay_json(source, len(calls), results, args.keys), sys.stdout)
        return 0
    console = make_console(sys.stdout)
    first = results[0][1]
    console.print(f"adaptive-runtime replay: {source}: {len(calls):,} timed calls standing "
                  f"for {first.calls:,} calls, {len(first.keys)} keys; recorded run's "
                  f"regret {first.recorded_regret:+.2%}", markup=False)
    console.print(_replay_table(results))
    if args.keys > 0:
        console.print(_replay_keys(first, args.keys))
    return 0


def _replay_table(results: Sequence[tuple[str, ReplayResult]]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    for name, justify in (("policy", "left"), ("calls", "right"),
                          ("regret vs oracle", "right"), ("switches", "right"),
                          ("exploration", "right"), ("unevaluable arms", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for name, r in results:
        table.add_row(name, f"{r.calls:,}", f"{r.regret:+.2%}", str(r.switches),
                      f"{r.exploration_share:.2%}", str(r.unevaluable_arms))
    return table


def _replay_keys(result: ReplayResult, limit: int) -> Table:
    table = Table(title="keys losing most time against the oracle (default configuration)",
                  title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  header_style="bold")
    for name in ("operation", "bucket", "calls", "oracle", "regret", "recorded", "switches",
                 "explored", "unevaluable"):
        table.add_column(name, justify="left" if name in ("operation", "oracle") else "right")
    worst = sorted(result.keys, key=lambda k: k.cost_us - k.oracle_us, reverse=True)[:limit]
    for k in worst:
        recorded = k.recorded_us / k.oracle_us - 1.0 if k.oracle_us > 0 else 0.0
        table.add_row(k.operation, str(k.size_bucket), f"{k.calls:,}", k.oracle.value,
                      f"{k.regret:+.2%}", f"{recorded:+.2%}", str(k.switches),
                      str(k.exploring_calls),
                      ",".join(b.value for b in k.unevaluable_arms) or "-")
    return table


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' * (n != 1)}"


def _legend(report: Report) -> str:
    return ("latencies (µs): learned at each size bucket's reference size (its geometric "
            f"middle); chosen: {report.chosen_means}; samples: timings learned on the key; "
            "speed-up: the slowest arm measured / the chosen arm")


def _doctor(args: argparse.Namespace) -> int:
    from .doctor import diagnose

    with status(make_console(sys.stderr), "looking at this machine...", log=False):
        found = diagnose(timeout_s=args.timeout)
    if args.json:
        print_json(found, sys.stdout)
    else:
        doctor_text(found, make_console(sys.stdout))
    return 1 if found["problems"] else 0
