"""``doctor`` judges the history file as the runtime does: a file from before fingerprints is
not applied (the runtime refuses it), and ``ADAPTIVE_RUNTIME_HISTORY_FORCE`` applies a foreign
file, so doctor calls that no problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import adaptive_runtime as ar
from adaptive_runtime.cli.diagnosis import diagnose
from adaptive_runtime.history import LEGACY_HISTORY_FORMAT, record_to_json


def _legacy_file(tmp_path: Path) -> Path:
    source = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False), builtin_ops=False)
    for _ in range(3):
        source.record_performance("dot", 1000, "simd", 10.0)
    path = tmp_path / "old.json"
    rows = [record_to_json(r) for r in source.history_snapshot()]
    path.write_text(json.dumps({"format": LEGACY_HISTORY_FORMAT, "records": rows}))
    return path


def test_doctor_refuses_a_file_from_before_fingerprints_as_the_runtime_does(
        tmp_path: Path) -> None:
    path = _legacy_file(tmp_path)
    with pytest.warns(ar.HistoryWarning, match="no hardware fingerprint"):
        assert ar.AdaptiveRuntime(builtin_ops=False).load_history(path) is False
    found = diagnose({"ADAPTIVE_RUNTIME_HISTORY": str(path)}, timeout_s=0.2)
    assert found["history"]["status"] == "from other hardware or libraries: not applied"
    assert any(p.startswith(f"history: {path} is not applied here: it has no hardware "
                            "fingerprint") for p in found["problems"]), found["problems"]


def test_doctor_calls_a_forced_foreign_file_applied(tmp_path: Path) -> None:
    path = _legacy_file(tmp_path)
    env = {"ADAPTIVE_RUNTIME_HISTORY": str(path), "ADAPTIVE_RUNTIME_HISTORY_FORCE": "1"}
    forced = ar.RuntimeConfig.from_env({"ADAPTIVE_RUNTIME_HISTORY_FORCE": "1"})
    assert ar.AdaptiveRuntime(forced, builtin_ops=False).load_history(path) is True
    found = diagnose(env, timeout_s=0.2)
    assert found["history"]["status"] == ("from other hardware or libraries: applied anyway "
                                          "(ADAPTIVE_RUNTIME_HISTORY_FORCE)")
    assert not [p for p in found["problems"] if p.startswith("history:")]
