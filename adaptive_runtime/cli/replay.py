"""``adaptive-runtime replay``: policy configurations run over a run's recorded timings,
each one's regret against the hindsight oracle, switches and exploration share (see
:mod:`adaptive_runtime.offline.replay`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich import box
from rich.table import Table

from ..offline.report import ReportInputError, make_console
from .defaults import telemetry_folder
from .output import print_json, replay_json
from .progress import status

if TYPE_CHECKING:
    from ..offline.replay import ReplayResult

__all__ = ["replay_command"]


def replay_command(args: argparse.Namespace) -> int:
    """Run ``adaptive-runtime replay``; returns the exit status."""
    from ..offline.replay import load_calls, parse_config, replay

    source = args.source or telemetry_folder()
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
