"""The exporter's CPU per span: measured by ``configure()``'s span exporter (on the SDK side,
``sdk.switching``), read by the span worker, which feeds it into the trace gate's CPU budget.

Kept apart from the exporters so that reading it loads no SDK: until ``configure()``'s
exporter has measured it (or when the application's own exporter does the work, which we
cannot see), the assumed cost stands.
"""

from __future__ import annotations

__all__ = ["ASSUMED_EXPORT_COST_US", "export_cost_us_per_span", "record_export_cost"]

# CPU one span costs the exporter until ours has measured it (or when the application's own
# exporter does the work, which we cannot see): the OTel Python OTLP encoder takes ~65 us per
# span of ours on the project's CI machine.
ASSUMED_EXPORT_COST_US = 65.0
_measured_export_cost_us: float | None = None


def export_cost_us_per_span() -> float:
    """Exporter CPU per span: measured by configure()'s exporter, else assumed."""
    measured = _measured_export_cost_us
    return ASSUMED_EXPORT_COST_US if measured is None else measured


def record_export_cost(cpu_ns: int, spans: int) -> None:
    """One export's CPU time (of the exporting thread) for ``spans`` spans, into the
    running estimate."""
    global _measured_export_cost_us
    if spans <= 0:
        return
    cost = cpu_ns / spans / 1000.0
    previous = _measured_export_cost_us
    _measured_export_cost_us = cost if previous is None else previous + 0.25 * (cost - previous)
