"""Printing helpers shared by the benchmarks: one aligned table, targets beside measurements."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["print_table", "verdict"]


def verdict(ok: bool) -> str:
    return "meets" if ok else "MISSES"


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [[str(c) for c in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    line = "+".join("-" * (w + 2) for w in widths)
    print(f"\n{title}")
    print(line)
    for i, row in enumerate(cells):
        print(" | ".join(c.ljust(w) if j == 0 else c.rjust(w)
                         for j, (c, w) in enumerate(zip(row, widths, strict=False))))
        if i == 0:
            print(line)
    print(line)
