"""The examples run as users would run them, and their spans land under their train steps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _spans(path: Path) -> list[dict]:
    return [span for line in path.read_text().splitlines()
            for resource in json.loads(line)["resourceSpans"]
            for scope in resource["scopeSpans"] for span in scope["spans"]]


def test_training_loop_example_trains_and_nests_runtime_spans_under_train_steps(
        tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["ADAPTIVE_RUNTIME_TELEMETRY_DIR"] = str(tmp_path)
    done = subprocess.run([sys.executable, str(EXAMPLES / "training_loop.py"), "--steps", "5"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "final loss" in done.stdout
    spans = _spans(tmp_path / "traces.jsonl")
    steps = {s["spanId"] for s in spans if s["name"] == "train_step"}
    runtime_spans = [s for s in spans if s["name"].startswith("adaptive.")]
    assert len(steps) == 5
    assert runtime_spans, "the runtime exported no span"
    assert all(s.get("parentSpanId") in steps for s in runtime_spans
               if s["name"].startswith("adaptive.select"))
