"""The report's figure (matplotlib): per operation, learned latency against input size per arm
on log-log axes with the chosen arm ringed and the crossovers marked, and beside it — when
spans were read — the traced decisions over time, coloured by reason.

matplotlib (the ``report`` extra) is imported when a figure is made, not with this module,
and only its object API is used: no ``pyplot``, so no global figure state and no display
backend — the figure is drawn by Agg into the PNG.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...backend import Backend, Choice, choice_order
from .model import CLEAR_MARGIN, Crossover, DecisionEvent, KeyRow, Report, compact_size, crossovers

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

__all__ = ["ARM_COLORS", "COMMIT_MARK", "REASON_MARKS", "render_figure", "save_png"]

ARM_COLORS = {Backend.GPU: "#8e44ad", Backend.SIMD: "#1f77b4", Backend.SCALAR: "#e67e22"}
# every reason the policy gives (decision.Reason), in the order a key usually meets them;
# colour and marker both differ, so the timeline reads without colour vision too
REASON_MARKS = {"heuristic": ("#9e9e9e", "s"), "explore": ("#f1c40f", "o"),
                "exploit": ("#2ca02c", "."), "recheck": ("#17becf", "D"),
                "drift": ("#d62728", "X"), "fallback": ("#e377c2", "v"),
                "forced": ("#000000", "P")}
# a commitment (an exploit span with adaptive.commit): drawn apart, over its reason's marks
COMMIT_MARK = ("#000000", "*")
_PANEL_HEIGHT_IN = 3.4
# headroom added above the curves for crossover labels, as a share of the y range (log)
_LABEL_BAND = 0.3
# the width of one character of a crossover label, as a share of a panel's width (8 pt text
# on a panel about 6 inches wide), to put labels that would overlap on separate lines
_CHAR_WIDTH = 0.0095
_WIDTH_IN = 14.0
_DPI = 100


def render_figure(report: Report) -> Figure:
    """The figure of ``report``: one row of panels per operation (see the module docstring).
    ``ImportError`` when matplotlib is not installed."""
    from matplotlib.figure import Figure

    operations = report.operations
    timeline = bool(report.events)
    columns = 2 if timeline else 1
    fig = Figure(figsize=(_WIDTH_IN if timeline else _WIDTH_IN / 2 + 1,
                          1.0 + _PANEL_HEIGHT_IN * max(len(operations), 1)),
                 dpi=_DPI, layout="constrained")
    fig.suptitle(f"adaptive-runtime report\n{report.source}", fontsize=10)
    axes = fig.subplots(max(len(operations), 1), columns, squeeze=False)
    cross = crossovers(report.rows)
    for i, operation in enumerate(operations):
        rows = [r for r in report.rows if r.operation == operation]
        mine = [c for c in cross if c.operation == operation]
        _latency_panel(axes[i][0], operation, rows, mine)
        if timeline:
            _timeline_panel(axes[i][1], operation,
                            [e for e in report.events if e.operation == operation], mine)
    if not operations:
        axes[0][0].text(0.5, 0.5, "nothing to show", ha="center", va="center",
                        transform=axes[0][0].transAxes)
    _legend(fig, report.rows, cross)
    return fig


def _legend(fig: Figure, rows: Sequence[KeyRow], cross: Sequence[Crossover]) -> None:
    """One legend for every latency panel, below them: the arms keep their colours across
    operations, so a legend per panel would repeat itself and hide curves."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=ARM_COLORS[arm.arm], marker="o", markersize=4,
                      linewidth=1.6, linestyle=_line_style(arm), label=arm.value)
               for arm in _choices(rows)]
    if any(r.chosen is not None for r in rows):
        handles.append(Line2D([], [], linestyle="none", marker="o", markersize=10,
                              markerfacecolor="none", markeredgecolor="black",
                              label="chosen arm"))
    if any(c.clear for c in cross):
        handles.append(Line2D([], [], color="0.25", linestyle=":", linewidth=1.2,
                              label="crossover: the fastest arm changes"))
    if any(not c.clear for c in cross):
        handles.append(Line2D([], [], color="0.55", linestyle=":", linewidth=0.8,
                              label=f"crossover of near-ties (neither arm {CLEAR_MARGIN:.0%} "
                                    "ahead)"))
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncols=len(handles),
                   fontsize=9, frameon=False)


def _choices(rows: Sequence[KeyRow]) -> list[Choice]:
    """The arms and variants measured in ``rows``, in ``choice_order``."""
    return sorted({b for r in rows for b in r.latency_us}, key=choice_order)


def _line_style(choice: Choice) -> str:
    """An arm's primary implementation solid, its variants dashed (in the arm's colour)."""
    return "--" if choice.variant else "-"


def save_png(fig: Figure, path: str | os.PathLike[str]) -> None:
    """Write ``fig`` to ``path`` as a PNG (``OSError`` if it cannot be written)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)  # (attaches itself to the figure: savefig draws with Agg)
    fig.savefig(os.fspath(path), format="png", dpi=_DPI)


def _latency_panel(ax: Axes, operation: str, rows: Sequence[KeyRow],
                   cross: Sequence[Crossover]) -> None:
    ax.set_title(f"{operation}: learned latency per arm", fontsize=10, loc="left",
                 fontweight="bold")
    plotted = False
    for arm in _choices(rows):
        points = sorted((r.size_bucket, r.reference_size, r.latency_us[arm]) for r in rows
                        if arm in r.latency_us and _positive(r.latency_us[arm])
                        and r.reference_size > 0)
        if not points:
            continue
        xs: list[float] = []
        ys: list[float] = []
        for k, (bucket, x, y) in enumerate(points):
            if k and bucket > points[k - 1][0] + 1:
                # a bucket where this arm was not measured: no line drawn across it
                xs.append(math.nan)
                ys.append(math.nan)
            xs.append(x)
            ys.append(y)
        ax.plot(xs, ys, marker="o", markersize=4, linewidth=1.6, color=ARM_COLORS[arm.arm],
                linestyle=_line_style(arm))
        plotted = True
    chosen = [(r.reference_size, r.latency_us[r.chosen]) for r in rows
              if r.chosen is not None and r.chosen in r.latency_us
              and _positive(r.latency_us[r.chosen]) and r.reference_size > 0]
    if chosen:
        xs, ys = zip(*chosen, strict=True)
        ax.scatter(xs, ys, s=130, facecolors="none", edgecolors="black", linewidths=1.3,
                   zorder=5)
    if not plotted:
        ax.text(0.5, 0.5, "no learned latency traced yet", ha="center", va="center",
                transform=ax.transAxes, color="0.4")
        return
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(_size_formatter())
    ax.set_xlabel("input size (elements; each point: a size bucket's reference size)")
    ax.set_ylabel("learned latency (µs)")
    ax.grid(True, which="major", alpha=0.3)
    ax.grid(True, which="minor", axis="y", alpha=0.12)
    _mark_crossovers(ax, cross)


def _mark_crossovers(ax: Axes, cross: Sequence[Crossover]) -> None:
    """A dotted line where the fastest arm changes. A clear crossover is labelled
    "before→after ≈size" in a band added above the curves (latency grows with size, so
    nothing else is drawn there), labels that would touch staggered; a near-tie gets a
    faint line only: labels on every flip of two tied arms would bury the clear ones."""
    if any(c.clear for c in cross):
        bottom, top = ax.get_ylim()
        ax.set_ylim(bottom, top * (top / bottom) ** _LABEL_BAND)
    lo, hi = (math.log(v) for v in ax.get_xlim())
    ends: list[float] = []  # per line of labels: where its rightmost label ends (x share)
    for c in cross:
        if not c.clear:
            ax.axvline(c.size, color="0.55", linestyle=":", linewidth=0.8, alpha=0.6, zorder=1)
            continue
        ax.axvline(c.size, color="0.25", linestyle=":", linewidth=1.2, zorder=1)
        x = (math.log(c.size) - lo) / (hi - lo)
        right_half = x > 0.7
        # (a label runs right of its line, or left of it near the right edge)
        start, end = (x - len(c.label) * _CHAR_WIDTH, x) if right_half else \
            (x, x + len(c.label) * _CHAR_WIDTH)
        row = next((i for i, taken in enumerate(ends) if start > taken), len(ends))
        if row == len(ends):
            ends.append(end)
        ends[row] = end
        ax.annotate(c.label, xy=(c.size, 0.98 - 0.085 * (row % 3)),
                    xycoords=ax.get_xaxis_transform(), xytext=(-3 if right_half else 3, 0),
                    textcoords="offset points", ha="right" if right_half else "left",
                    va="top", fontsize=8, color="0.1",
                    bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "alpha": 0.9,
                          "edgecolor": "0.6"})


def _timeline_panel(ax: Axes, operation: str, events: Sequence[DecisionEvent],
                    cross: Sequence[Crossover]) -> None:
    ax.set_title(f"{operation}: traced decisions by reason", fontsize=10, loc="left",
                 fontweight="bold")
    events = [e for e in events if e.input_size > 0]
    if not events:
        ax.text(0.5, 0.5, "no traced decision", ha="center", va="center",
                transform=ax.transAxes, color="0.4")
        return
    counts = Counter(e.reason for e in events if not e.commit)
    known = [r for r in REASON_MARKS if r in counts]
    for reason in known + sorted(set(counts) - set(REASON_MARKS)):
        color, marker = REASON_MARKS.get(reason, ("#7f7f7f", "h"))
        picked = [e for e in events if e.reason == reason and not e.commit]
        ax.scatter([e.time_s for e in picked], [e.input_size for e in picked],
                   s=30 if marker == "." else 16, marker=marker, color=color, alpha=0.8,
                   linewidths=0, label=f"{reason} ({counts[reason]:,})")
    commits = [e for e in events if e.commit]
    if commits:  # the moments each key committed to an arm, on top
        color, marker = COMMIT_MARK
        ax.scatter([e.time_s for e in commits], [e.input_size for e in commits], s=60,
                   marker=marker, color=color, linewidths=0, zorder=3,
                   label=f"commitment ({len(commits):,})")
    for c in cross:  # the sizes where the arms cross: rechecks and drift cluster there
        ax.axhline(c.size, color="0.25" if c.clear else "0.55", linestyle=":",
                   linewidth=1.0 if c.clear else 0.7, zorder=0)
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(_size_formatter())
    # (plain seconds: with --all-runs they reach thousands, which matplotlib would otherwise
    # write as an offset, "+1.579e4", in the corner)
    ax.ticklabel_format(axis="x", style="plain", useOffset=False)
    ax.set_xlabel("seconds since the first traced decision")
    ax.set_ylabel("input size (elements)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8,
              title="reason (spans)", title_fontsize=8, frameon=False)


def _size_formatter() -> FuncFormatter:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda value, _pos: compact_size(round(value)) if value >= 1 else "")


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0
