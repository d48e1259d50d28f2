"""Fail when a module of the package grows past one concern or reaches into another's privates:
more than MAX_MODULE_LINES lines, a function over MAX_FUNCTION_LINES or a class over
MAX_CLASS_LINES (issue 27: the limits at which a reader can still hold the unit in mind), or a
private name imported from another module of the package (issue 42: ``from .state import
_Round``). Importing a private *module* is fine (``from . import _wiring``, ``from ._wiring
import Parts``): a package split by phase keeps its phases in private modules with public names,
pluggy's way. Run by ``make lint``; prints each offender as ``path:line: what`` and exits 1, or
prints nothing and exits 0.

Usage: ``python tools/check_sizes.py [PACKAGE_DIR ...]`` (default: ``adaptive_runtime``).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 50
MAX_CLASS_LINES = 300


def offences(path: Path, root: Path | None = None) -> list[str]:
    """What in the module at ``path`` is over its limit, or imports another module's private
    name (when ``root``, the package directory ``path`` lies in, is given), one line each."""
    text = path.read_text(encoding="utf-8")
    found = []
    lines = text.count("\n")
    if lines > MAX_MODULE_LINES:
        found.append(f"{path}:1: module of {lines} lines (limit {MAX_MODULE_LINES})")
    tree = ast.parse(text, filename=str(path))
    for node in ast.walk(tree):
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
    if root is not None:
        found += private_imports(path, root, tree)
    return found


def private_imports(path: Path, root: Path, tree: ast.Module) -> list[str]:
    """Each ``from <module> import _name`` in ``tree`` (the module at ``path``) where
    ``<module>`` is a module of the package at ``root`` and ``_name`` is not a submodule."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        module = _imported_module(path, root, node)
        if module is None:
            continue
        where = root.parent.joinpath(*module)
        for alias in node.names:
            name = alias.name
            if not name.startswith("_") or name.startswith("__"):
                continue
            if (where / f"{name}.py").is_file() or (where / name).is_dir():
                continue  # a private module: fine
            found.append(f"{path}:{node.lineno}: private name {name} imported from "
                         f"{'.'.join(module)}")
    return found


def _imported_module(path: Path, root: Path, node: ast.ImportFrom) -> list[str] | None:
    """The dotted parts of the module ``node`` imports from, or None when it is not in the
    package at ``root``."""
    if node.level == 0:
        parts = (node.module or "").split(".")
        return parts if parts[0] == root.name else None
    package = list(path.relative_to(root.parent).parent.parts)
    if node.level > 1:
        package = package[:-(node.level - 1)]
    return package + (node.module.split(".") if node.module else [])


def main(argv: list[str]) -> int:
    roots = [Path(arg) for arg in argv[1:]] or [Path("adaptive_runtime")]
    found = [line for root in roots for path in sorted(root.rglob("*.py"))
             for line in offences(path, root)]
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
