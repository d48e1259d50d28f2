"""Fail when a module of the package grows past one concern: more than MAX_MODULE_LINES lines,
a function over MAX_FUNCTION_LINES, or a class over MAX_CLASS_LINES (issue 27: the limits at
which a reader can still hold the unit in mind). Run by ``make lint``; prints each offender as
``path:line: what`` and exits 1, or prints nothing and exits 0.

Usage: ``python tools/check_sizes.py [PACKAGE_DIR]`` (default: ``adaptive_runtime``).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 50
MAX_CLASS_LINES = 300


def offences(path: Path) -> list[str]:
    """What in the module at ``path`` is over its limit, one line each."""
    text = path.read_text(encoding="utf-8")
    found = []
    lines = text.count("\n")
    if lines > MAX_MODULE_LINES:
        found.append(f"{path}:1: module of {lines} lines (limit {MAX_MODULE_LINES})")
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            kind, limit = "function", MAX_FUNCTION_LINES
        elif isinstance(node, ast.ClassDef):
            kind, limit = "class", MAX_CLASS_LINES
        else:
            continue
        size = (node.end_lineno or node.lineno) - node.lineno + 1
        if size > limit:
            found.append(f"{path}:{node.lineno}: {kind} {node.name} of {size} lines "
                         f"(limit {limit})")
    return found


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else "adaptive_runtime")
    found = [line for path in sorted(root.rglob("*.py")) for line in offences(path)]
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
