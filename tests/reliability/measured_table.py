"""What a reliability test measured, and the RELIABILITY.md table made from it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RELIABILITY_MD = ROOT / "RELIABILITY.md"
BEGIN, END = "<!-- measured:begin -->", "<!-- measured:end -->"


@dataclass
class Measurement:
    """What one test did to the runtime (``load``) and what came out (``figures``)."""

    test: str
    load: str
    figures: dict[str, Any] = field(default_factory=dict)

    def result(self) -> str:
        return "; ".join(f"{name.replace('_', ' ')} {_format(value)}"
                         for name, value in self.figures.items())


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)




def table(measurements: list[Measurement]) -> str:
    rows = ["| test | load or fault | measured |", "|---|---|---|"]
    rows += [f"| `{m.test}` | {m.load} | {m.result()} |" for m in measurements]
    return "\n".join(rows)
