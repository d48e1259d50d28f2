"""What a reliability test measured, and the RELIABILITY.md table made from it."""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RELIABILITY_MD = ROOT / "RELIABILITY.md"
BEGIN, END = "<!-- measured:begin -->", "<!-- measured:end -->"
# A row: the test's name (parameters included), the digest of its function's source, the load
# and the figures. The digest, in an HTML comment (not shown), says which version of the test
# measured the row: edit the test, and the row is stale until `make reliability` runs it.
ROW = re.compile(r"\|\s*`(?P<test>test_\w+)(?P<params>\[[^\]]*\])?`\s*"
                 r"<!-- source (?P<digest>[0-9a-f]+) -->\s*\|(?P<cells>.*)\|\s*$")


def source_digest(path: Path, function: str) -> str:
    """The first 12 hex digits of the SHA-256 of ``function``'s source in ``path``."""
    text = path.read_text()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            source = ast.get_source_segment(text, node) or ""
            return hashlib.sha256(source.encode()).hexdigest()[:12]
    raise LookupError(f"no function {function} in {path}")


@dataclass
class Measurement:
    """What one test did to the runtime (``load``) and what came out (``figures``)."""

    test: str
    load: str
    figures: dict[str, Any] = field(default_factory=dict)
    digest: str = ""  # of the test function's source (source_digest)

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
    rows += [f"| `{m.test}` <!-- source {m.digest} --> | {m.load} | {m.result()} |"
             for m in measurements]
    return "\n".join(rows)
