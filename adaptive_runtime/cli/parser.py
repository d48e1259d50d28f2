"""The ``adaptive-runtime`` command's arguments: the options, help and handler of each
subcommand (``demo``, ``report``, ``replay``, ``doctor``)."""

from __future__ import annotations

import argparse
from typing import Any

from .. import __version__
from ..telemetry.defaults import DEFAULT_DIRECTORY
from .demo import MIN_SIZE, demo_command
from .doctor import doctor_command
from .replay import replay_command
from .report import report_command

__all__ = ["build_parser"]


def build_parser() -> argparse.ArgumentParser:
    """The ``adaptive-runtime`` command's parser; each subcommand's ``handler`` default is
    the function that runs it."""
    parser = argparse.ArgumentParser(
        prog="adaptive-runtime",
        description="Adaptive GPU / SIMD / SCALAR dispatch that learns from every call.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")
    commands.required = True
    _add_demo(commands)
    _add_report(commands)
    _add_replay(commands)
    _add_doctor(commands)
    return parser


def _add_demo(commands: Any) -> None:
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
                      help="do not export spans and metrics, and so run without the otlp "
                           "extra (by default they go to OTLP when "
                           "OTEL_EXPORTER_OTLP_ENDPOINT is set, else to OTLP/JSON lines files "
                           "under ./adaptive-runtime-telemetry)")
    demo.set_defaults(handler=demo_command)


def _add_report(commands: Any) -> None:
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
    report.set_defaults(handler=report_command)


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
                             "'switch_margin=0.1,min_samples_per_arm=5' (repeatable; knobs: the "
                             "fields of adaptive_runtime.policy.PolicyConfig)")
    replay.add_argument("--pick", choices=("nearest", "cycle"), default="nearest",
                        help="which recorded timing answers an arm the policy picks "
                             "(default: %(default)s)")
    replay.add_argument("--keys", type=int, default=10, metavar="N",
                        help="show the N keys losing most time against the oracle under the "
                             "default configuration (0: none; default: %(default)s)")
    replay.add_argument("--json", action="store_true",
                        help="print the results as one JSON document")
    replay.set_defaults(handler=replay_command)


def _add_doctor(commands: Any) -> None:
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
    doctor.set_defaults(handler=doctor_command)


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
