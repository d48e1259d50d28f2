"""The examples run as users would run them, and their spans land under their train steps."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _spans(path: Path) -> list[dict]:
    return [span for line in path.read_text().splitlines()
            for resource in json.loads(line)["resourceSpans"]
            for scope in resource["scopeSpans"] for span in scope["spans"]]


def _run(script: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["ADAPTIVE_RUNTIME_TELEMETRY_DIR"] = str(tmp_path)
    done = subprocess.run([sys.executable, str(EXAMPLES / script), *args], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done


def test_train_torch_example_learns_the_digits_and_nests_runtime_spans_under_train_steps(
        tmp_path: Path) -> None:
    done = _run("train_torch.py", tmp_path, "--phases", "8,64", "--steps-per-phase", "40")
    phases = re.findall(r"phase (\d): batch +(\d+) +40 steps .* final loss ([\d.]+) +test "
                        r"accuracy ([\d.]+)", done.stdout)
    assert [(p[0], p[1]) for p in phases] == [("0", "8"), ("1", "64")], done.stdout
    assert float(phases[1][2]) < 1.0 and float(phases[1][3]) > 0.8  # (10 classes: 0.1 is luck)
    assert "linear@torch+grad" in done.stdout  # the decision table
    spans = _spans(tmp_path / "traces.jsonl")
    step_spans = [s for s in spans if s["name"] == "train_step"]
    steps = {s["spanId"] for s in step_spans}
    # (the test-accuracy passes run under no_grad, outside any step: the "torch" family)
    training = [s for s in spans if s["name"].startswith("adaptive.select")
                and ("+grad" in s["name"] or ".backward" in s["name"])]
    # step spans are sampled within the trace budget, each standing for the steps since the
    # previous one: 80 at most (the last few may be pending)
    weights = [next((a["value"]["doubleValue"] for a in s["attributes"]
                     if a["key"] == "adaptive.sampling.weight"), 1.0) for s in step_spans]
    assert 0 < len(steps) <= sum(weights) <= 80
    assert training, "the runtime exported no span of a training step"
    assert all(s.get("parentSpanId") in steps for s in training)


def test_custom_op_example_registers_two_arms_and_reports_what_won(tmp_path: Path) -> None:
    done = _run("custom_op.py", tmp_path, "--calls", "600")
    assert "600 calls of huber" in done.stdout
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith("huber ")]
    assert len(rows) >= 10  # one per size bucket seen
    assert {row[3] for row in rows} <= {"simd", "scalar"}
    assert any(row[4] == "exploit" for row in rows)
    # both arms are real kernels: neither is quarantined for a wrong result
    assert "quarantined" not in done.stdout + done.stderr, done.stderr
