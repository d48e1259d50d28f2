"""The decision table in the terminal (rich): one line per (operation, size bucket).

Columns: the operation, the size bucket and its sizes, the arm chosen — with the thread count
it ran at where the runtime held its pool at a count (``simd(torch@1)``) — and, where the
source knows them, why and how sure; each arm's learned latency — with, where the source
knows them, the standard deviation of the timings behind it and how many there are
(``12.3±1.2(n=8)``) —, the timings learned on the key and the speed-up of the chosen arm over
the slowest one measured. Plain columns separated by spaces, no vertical rules and no space
inside a cell, so a saved log still reads with ``grep`` and ``awk`` (``$4`` is the arm).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TextIO

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ...backend import Backend, Choice, choice_order
from .model import KeyRow

__all__ = ["ARM_STYLES", "REASON_STYLES", "chosen_cell", "decision_table", "format_us",
           "latency_cell", "make_console"]

# the same hues as the figure's (report.figure), in the terminal's palette
ARM_STYLES = {Backend.GPU: "magenta", Backend.SIMD: "cyan", Backend.SCALAR: "yellow"}
REASON_STYLES = {"heuristic": "dim", "explore": "yellow", "exploit": "green",
                 "recheck": "blue", "drift": "bold red", "forced": "bold", "fallback": "red"}
# Off a terminal (a log, a pipe) the table is never wrapped or cut to fit a width.
_UNWRAPPED = 1 << 14


def make_console(out: TextIO) -> Console:
    """A console writing to ``out``: colours and the terminal's width on a terminal; plain
    text at any width elsewhere, so a piped table stays one line per key."""
    console = Console(file=out, highlight=False)
    if not console.is_terminal:
        console.width = _UNWRAPPED
    return console


def decision_table(rows: Sequence[KeyRow], *, title: str | None = None) -> Table:
    """The rows as a table, a blank line between operations. Reason and confidence columns
    appear only when some row has them; arm columns only for arms measured somewhere."""
    arms = sorted({b for r in rows for b in r.latency_us}, key=choice_order)
    explained = any(r.reason is not None for r in rows)
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  title_justify="left", header_style="bold")
    table.add_column("operation", no_wrap=True)
    table.add_column("bucket", justify="right")
    table.add_column("sizes", justify="right", no_wrap=True)
    table.add_column("chosen")
    if explained:
        table.add_column("reason")
        table.add_column("conf", justify="right")
    for arm in arms:
        table.add_column(f"{arm.value} µs", justify="right", style=ARM_STYLES[arm.arm])
    table.add_column("samples", justify="right")
    table.add_column("speed-up", justify="right")
    for i, row in enumerate(rows):
        lo, hi = row.sizes
        chosen = row.chosen
        cells: list[Text] = [
            Text(row.operation), Text(str(row.size_bucket)), Text(f"{lo:,}-{hi:,}"),
            Text(chosen_cell(row), style=ARM_STYLES[chosen.arm]) if chosen is not None
            else Text("-")]
        if explained:
            reason = row.reason or "-"
            cells += [Text(reason, style=REASON_STYLES.get(reason, "")),
                      Text("-" if row.confidence is None else f"{row.confidence:.2f}")]
        for arm in arms:
            cell = Text(latency_cell(row, arm))
            if arm is chosen and len(row.latency_us) > 1:
                cell.stylize("bold")
            cells.append(cell)
        speedup = row.speedup
        cells += [Text(f"{row.samples:,}"),
                  Text("-" if speedup is None else f"{speedup:.2f}x")]
        last_of_operation = i + 1 < len(rows) and rows[i + 1].operation != row.operation
        table.add_row(*cells, end_section=last_of_operation)
    return table


def chosen_cell(row: KeyRow) -> str:
    """The chosen arm's name, and the thread count it ran at where the row says
    (``simd(torch@1)``); one word."""
    name = row.chosen.value if row.chosen is not None else "-"
    return f"{name}(torch@{row.threads})" if row.threads else name


def latency_cell(row: KeyRow, arm: Choice) -> str:
    """``arm``'s learned latency in ``row`` (:func:`format_us`), then, where the row has
    them, the standard deviation of its timings (``±1.2``) and their number (``(n=8)``):
    ``"12.3±1.2(n=8)"``; one word, so the table still splits on spaces."""
    latency = row.latency_us.get(arm)
    text = format_us(latency)
    if latency is None or not math.isfinite(latency):
        return text
    stdev = row.stdev_us.get(arm)
    if stdev is not None and math.isfinite(stdev):
        text += f"±{format_us(stdev)}"
    timings = row.timings.get(arm)
    if timings is not None:
        text += f"(n={timings:,})"
    return text


def format_us(value: float | None) -> str:
    """A latency in µs with about three significant digits; ``-`` when not measured,
    ``failing`` for an arm whose last attempt failed (an infinite estimate)."""
    if value is None or math.isnan(value):
        return "-"
    if math.isinf(value):
        return "failing"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"
