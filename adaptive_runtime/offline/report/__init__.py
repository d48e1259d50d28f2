"""``adaptive-runtime report``: what a runtime learned and decided, without Jaeger or Grafana.

Read a saved history file (:func:`from_history_file`), the embedded telemetry files
(:func:`from_telemetry`) or a live runtime (:func:`from_runtime`) into a :class:`Report`;
render it as a terminal table (:func:`decision_table`) or a figure (:func:`render_figure`,
:func:`save_png`; needs matplotlib, the ``report`` extra). :func:`print_decisions` prints a
live runtime's table in one call (``from adaptive_runtime.offline.report import print_decisions``).
"""

from .figure import render_figure, save_png
from .model import (
    SPEEDUP_MIN_TIMINGS,
    Crossover,
    DecisionEvent,
    KeyRow,
    Report,
    ReportInputError,
    crossovers,
    fastest_arm,
)
from .otlp_files import trace_files
from .printing import print_decisions
from .sources import from_history_file, from_runtime
from .spans import from_telemetry
from .table import decision_table, make_console

__all__ = ["SPEEDUP_MIN_TIMINGS", "Crossover", "DecisionEvent", "KeyRow", "Report",
           "ReportInputError", "crossovers", "decision_table", "fastest_arm",
           "from_history_file", "from_runtime",
           "from_telemetry", "make_console", "print_decisions", "render_figure", "save_png",
           "trace_files"]
