"""``adaptive-runtime report``: what a run learned and decided, from a history file or the
telemetry files: a table in the terminal (or ``--json``) and a PNG."""

from __future__ import annotations

import argparse
import fnmatch
import importlib.util
import sys
from dataclasses import replace

from rich.console import Console

from ..offline.report import (
    SPEEDUP_MIN_TIMINGS,
    Report,
    ReportInputError,
    crossovers,
    decision_table,
    from_history_file,
    from_telemetry,
    make_console,
    render_figure,
    save_png,
    trace_files,
)
from .defaults import telemetry_folder
from .output import print_json, report_json
from .progress import progress, status

__all__ = ["report_command"]


def report_command(args: argparse.Namespace) -> int:
    """Run ``adaptive-runtime report``; returns the exit status."""
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
    return _read_telemetry(args.telemetry or telemetry_folder(), args.all_runs, err)


def _read_telemetry(folder: str, all_runs: bool, err: Console) -> Report:
    total = sum(p.stat().st_size for p in trace_files(folder))
    with progress(total, f"reading {folder}", err, in_bytes=True, log=False) as update:
        return from_telemetry(folder, all_runs=all_runs,
                              on_progress=lambda done, _total: update(done))


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' * (n != 1)}"


def _legend(report: Report) -> str:
    return ("latencies (µs): learned at each size bucket's reference size (its geometric "
            "middle), ±the standard deviation of the timings behind it (n: how many), where "
            f"the source has them; chosen: {report.chosen_means}; samples: timings learned on "
            "the key; speed-up: the slowest arm measured / the chosen arm, where both stand "
            f"on {SPEEDUP_MIN_TIMINGS} timings or more")
