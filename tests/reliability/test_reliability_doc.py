"""RELIABILITY.md lists exactly the reliability tests there are, each with what it measured,
measured by the test as it is now."""

from __future__ import annotations

import ast
from pathlib import Path

from measured_table import BEGIN, END, RELIABILITY_MD, ROW, source_digest
from test_telemetry_shutdown import SLACK_S

from adaptive_runtime.telemetry.deadline import DEFAULT_SHUTDOWN_TIMEOUT_S

HERE = Path(__file__).resolve().parent


def _recording_tests() -> dict[str, Path]:
    """Test functions in tests/reliability that take the ``reliability`` fixture, and their
    files."""
    names = {}
    for path in HERE.glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
                    and any(arg.arg == "reliability" for arg in node.args.args)):
                names[node.name] = path
    return names


def _documented_rows() -> list[dict[str, str]]:
    text = RELIABILITY_MD.read_text()
    assert BEGIN in text and END in text, f"{RELIABILITY_MD.name} lost its table markers"
    block = text[text.index(BEGIN):text.index(END)]
    rows = [match.groupdict() for line in block.splitlines() if (match := ROW.match(line))]
    table_lines = [line for line in block.splitlines() if line.startswith("| `")]
    assert len(rows) == len(table_lines), "a row without its test's source digest (run " \
                                          "`make reliability`)"
    return rows


def test_every_recording_test_has_a_measured_row_and_no_row_is_stale() -> None:
    recording, rows = _recording_tests(), _documented_rows()
    documented = {row["test"] for row in rows}
    assert recording, "no reliability test records its figures"
    assert not recording.keys() - documented, (
        f"tests without a row in {RELIABILITY_MD.name} (run `make reliability`): "
        f"{sorted(recording.keys() - documented)}")
    assert not documented - recording.keys(), (
        f"rows for tests that no longer exist: {sorted(documented - recording.keys())}")
    empty = [row["test"] for row in rows if not row["cells"].split("|")[-1].strip()]
    assert not empty, f"rows without a measured result: {empty}"


def test_every_row_was_measured_by_its_test_as_it_is_now() -> None:
    """A row records the digest of its test's source when measured: a test edited since
    (its load, its figures, what it asserts) has a stale row until `make reliability`."""
    recording = _recording_tests()
    stale = sorted({row["test"] for row in _documented_rows()
                    if row["test"] in recording
                    and row["digest"] != source_digest(recording[row["test"]], row["test"])})
    assert not stale, (f"rows in {RELIABILITY_MD.name} older than their tests (run `make "
                       f"reliability` and commit the table): {stale}")


def test_the_exit_bound_stated_is_the_one_the_shutdown_tests_assert() -> None:
    text = " ".join(RELIABILITY_MD.read_text().split())
    assert f"`shutdown_timeout_s` (default {DEFAULT_SHUTDOWN_TIMEOUT_S:g} s;" in text
    assert f"plus {SLACK_S:g} s for a loaded machine" in text
