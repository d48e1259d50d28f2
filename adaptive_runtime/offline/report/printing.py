""":func:`print_decisions`: the decision table of a live runtime, in one call (what the demo
and the examples print at the end of a run)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, TextIO

from .sources import from_runtime
from .table import decision_table, make_console

if TYPE_CHECKING:
    from ...runtime import AdaptiveRuntime

__all__ = ["print_decisions"]


def print_decisions(rt: AdaptiveRuntime, out: TextIO | None = None,
                    operations: Iterable[str] | None = None) -> None:
    """Print what ``rt`` decided for every key it has history for (or only ``operations``'
    keys, their input families included): per (operation key, size bucket), the arm it runs
    now, why, how sure, the latency learned on each arm with the standard deviation and number
    of the timings behind it, and the speed-up over the slowest arm (``out``: standard output
    by default).

    ``from adaptive_runtime.offline.report import print_decisions``; the same table as
    ``adaptive-runtime demo`` prints, read from the runtime rather than from files."""
    report = from_runtime(rt, operations)
    make_console(sys.stdout if out is None else out).print(decision_table(report.rows))
