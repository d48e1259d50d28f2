"""What the CLI's commands print for scripts (``--json``: one JSON document on stdout, the same
findings as the tables people read) and ``doctor``'s report for people."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..offline.report import Crossover, Report

if TYPE_CHECKING:
    from ..offline.replay import KeyReplay, ReplayResult

__all__ = ["doctor_text", "print_json", "replay_json", "report_json"]


def print_json(value: Any, out: TextIO) -> None:
    """``value`` as one indented JSON document (arms and variants by their names)."""
    out.write(json.dumps(value, indent=2, default=str, allow_nan=False) + "\n")


def _number(value: float | None) -> float | None:
    """A finite float, or ``None`` (JSON has no infinity: "unknown" reads as null)."""
    return value if value is not None and value == value and abs(value) != float("inf") \
        else None


def report_json(report: Report, found: Sequence[Crossover]) -> dict[str, Any]:
    """``adaptive-runtime report --json``: the table's rows and the crossovers."""
    return {
        "source": report.source,
        "chosen_means": report.chosen_means,
        "rows": [{"operation": r.operation, "size_bucket": r.size_bucket,
                  "sizes": list(r.sizes), "reference_size": r.reference_size,
                  "latency_us": {str(c): _number(us) for c, us in r.latency_us.items()},
                  "timings": {str(c): n for c, n in r.timings.items()},
                  "stdev_us": {str(c): _number(us) for c, us in r.stdev_us.items()},
                  "samples": r.samples, "chosen": str(r.chosen) if r.chosen else None,
                  "threads": r.threads or None,
                  "fastest": str(r.fastest) if r.fastest else None,
                  "speedup": _number(r.speedup), "reason": r.reason,
                  "confidence": _number(r.confidence)} for r in report.rows],
        "crossovers": [{"operation": c.operation, "lower_bucket": c.lower_bucket,
                        "upper_bucket": c.upper_bucket, "before": str(c.before),
                        "after": str(c.after), "at": c.label, "clear": c.clear}
                       for c in found],
        "decisions": len(report.events),
    }


def _key_json(k: KeyReplay) -> dict[str, Any]:
    return {"operation": k.operation, "size_bucket": k.size_bucket, "calls": k.calls,
            "oracle": str(k.oracle), "regret": _number(k.regret),
            "recorded_regret": _number(k.recorded_us / k.oracle_us - 1.0
                                       if k.oracle_us > 0 else 0.0),
            "switches": k.switches, "exploring_calls": k.exploring_calls,
            "unevaluable_arms": [str(c) for c in k.unevaluable_arms]}


def replay_json(source: str, timed_calls: int, results: Sequence[tuple[str, ReplayResult]],
                worst_keys: int) -> dict[str, Any]:
    """``adaptive-runtime replay --json``: each configuration's totals and, for the default
    one, the keys losing most against the oracle."""
    first = results[0][1]
    worst = sorted(first.keys, key=lambda k: k.cost_us - k.oracle_us, reverse=True)
    return {
        "source": source, "timed_calls": timed_calls, "calls": first.calls,
        "keys": len(first.keys), "recorded_regret": _number(first.recorded_regret),
        "configurations": [{"name": name, "calls": r.calls, "regret": _number(r.regret),
                            "switches": r.switches,
                            "exploration_share": _number(r.exploration_share),
                            "unevaluable_arms": r.unevaluable_arms}
                           for name, r in results],
        "worst_keys": [_key_json(k) for k in worst[:max(worst_keys, 0)]],
    }


def doctor_text(found: Mapping[str, Any], console: Console) -> None:
    """``adaptive-runtime doctor``'s report for people (``found``: ``diagnosis.diagnose()``)."""
    console.print(f"adaptive_runtime {found['adaptive_runtime']} on Python {found['python']}, "
                  f"{found['platform']}, {found['cpu']['model']} ({found['cpu']['count']} "
                  f"CPUs)", markup=False)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    table.add_column("", justify="left")
    table.add_column("here", justify="left")
    for label, text in _doctor_rows(found):
        # (the values are text, not markup: "pip install 'adaptive_runtime[otlp]'" would lose
        # its "[otlp]" as a style tag)
        table.add_row(escape(label), escape(text))
    console.print(table)
    problems = found["problems"]
    console.print("no problems found" if not problems else
                  "problems:\n" + "\n".join(f"  - {p}" for p in problems), markup=False)
    if found.get("warnings"):
        console.print("warnings:\n" + "\n".join(f"  - {w}" for w in found["warnings"]),
                      markup=False)


def _doctor_rows(found: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The rows of doctor's table, as plain text."""
    rows = [(f"arm {arm}", ("yes: " if state["available"] else "no: ") + state["via"])
            for arm, state in found["arms"].items()]
    for gpu in found["gpus"]:
        memory = f", {gpu['memory_gib']} GiB" if gpu["memory_gib"] is not None else ""
        rows.append(("gpu", f"{gpu['name']}{memory} ({gpu['library']})"))
    rows.append(("libraries", ", ".join(f"{name} {version}" for name, version
                                        in found["libraries"].items() if version)))
    rows.append(("threads", ", ".join(f"{pool} {count if count is not None else '-'}"
                                      for pool, count in found["threads"].items())))
    telemetry = found["telemetry"]
    reachable = {True: "ok", False: "NOT REACHABLE", None: "-"}[telemetry.get("reachable")]
    rows.append(("telemetry", f"{telemetry['destination']}: {reachable}"
                 + (f" ({telemetry['detail']})" if telemetry.get("detail") else "")))
    prometheus = telemetry.get("prometheus")
    if prometheus is not None:
        rows.append(("prometheus", f"{prometheus['host']}:{prometheus['port']} "
                     + ("free" if prometheus["free"] else "TAKEN")))
    history = found["history"]
    where = f"{history['path']}: " if history["path"] else ""
    records = f" ({history['records']:,} records)" if "records" in history else ""
    rows.append(("history", f"{where}{history['status']}{records}"))
    settings = found.get("settings") or []
    rows.append(("settings", ", ".join(
        f"{s['variable'] or 'together'} " + ("ok" if s["status"] == "ok" else s["status"].upper())
        for s in settings) or "no ADAPTIVE_RUNTIME_* variable set: the defaults"))
    return rows
