"""Reliability tests: faults, load and bad input, each recording what it measured.

Every test here asserts its bound and records the figures it measured through the
``reliability`` fixture (``reliability.record(load=..., **figures)``). The figures are printed
at the end of the run, so `make test` shows every line of ``RELIABILITY.md`` measured afresh;
``make reliability`` runs only these tests and rewrites the measured table in
``RELIABILITY.md`` from that run (between its ``measured:begin`` / ``measured:end`` markers).
"""

from __future__ import annotations

import re
import sys
from typing import Any

import pytest
from measured_table import (
    BEGIN,
    END,
    RELIABILITY_MD,
    ROOT,
    Measurement,
    source_digest,
    table,
)

# The real OTLP receiver and Prometheus helpers live with the integration tests.
sys.path.insert(0, str(ROOT / "tests" / "integration"))

_MEASURED: dict[str, Measurement] = {}


class Recorder:
    """Handed to a test as ``reliability``; one ``record`` per test (the last one wins)."""

    def __init__(self, test: str, digest: str) -> None:
        self._test = test
        self._digest = digest

    def record(self, load: str, **figures: Any) -> None:
        _MEASURED[self._test] = Measurement(self._test, load, dict(figures), self._digest)


@pytest.fixture
def reliability(request: pytest.FixtureRequest) -> Recorder:
    return Recorder(request.node.name,
                    source_digest(request.node.path, request.function.__name__))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--write-reliability", action="store_true", default=False,
                     help="rewrite RELIABILITY.md's measured table from this run's figures")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Rewriting the table: the check that it is up to date runs on the next run, not this one.
    if config.getoption("--write-reliability", default=False):
        items[:] = [i for i in items if "test_reliability_doc" not in i.nodeid]


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not _MEASURED:
        return
    measurements = sorted(_MEASURED.values(), key=lambda m: m.test)
    terminalreporter.section("reliability: measured in this run")
    for m in measurements:
        terminalreporter.write_line(f"{m.test}: {m.load} -> {m.result()}")
    if config.getoption("--write-reliability", default=False):
        if exitstatus != 0:
            terminalreporter.write_line("RELIABILITY.md not rewritten: the run failed")
            return
        text = RELIABILITY_MD.read_text()
        pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
        RELIABILITY_MD.write_text(pattern.sub(f"{BEGIN}\n{table(measurements)}\n{END}", text))
        terminalreporter.write_line(f"rewrote the measured table in {RELIABILITY_MD.name}")
