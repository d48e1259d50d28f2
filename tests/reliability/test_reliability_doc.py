"""RELIABILITY.md lists exactly the reliability tests there are, each with what it measured."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from measured_table import BEGIN, END, RELIABILITY_MD

HERE = Path(__file__).resolve().parent


def _recording_tests() -> set[str]:
    """Test functions in tests/reliability that take the ``reliability`` fixture."""
    names = set()
    for path in HERE.glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
                    and any(arg.arg == "reliability" for arg in node.args.args)):
                names.add(node.name)
    return names


def _documented_tests() -> dict[str, str]:
    text = RELIABILITY_MD.read_text()
    assert BEGIN in text and END in text, f"{RELIABILITY_MD.name} lost its table markers"
    block = text[text.index(BEGIN):text.index(END)]
    rows = {}
    for line in block.splitlines():
        match = re.match(r"\|\s*`(test_\w+)(\[[^\]]*\])?`\s*\|(.*)\|\s*$", line)
        if match:
            rows[match.group(1)] = match.group(3)
    return rows


def test_every_recording_test_has_a_measured_row_and_no_row_is_stale() -> None:
    recording, documented = _recording_tests(), _documented_tests()
    assert recording, "no reliability test records its figures"
    assert not recording - documented.keys(), (
        f"tests without a row in {RELIABILITY_MD.name} (run `make reliability`): "
        f"{sorted(recording - documented.keys())}")
    assert not documented.keys() - recording, (
        f"rows for tests that no longer exist: {sorted(documented.keys() - recording)}")
    empty = [name for name, cells in documented.items() if not cells.split("|")[-1].strip()]
    assert not empty, f"rows without a measured result: {empty}"
