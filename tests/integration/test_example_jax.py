"""examples/train_jax.py: an eager JAX training loop whose every operation (forward, backward
and update) is adaptive learns the digits, reproduces the plain jax.numpy run step by step,
and agrees with ``jax.grad`` through the same operations."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from statistics import mean

import numpy as np

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_jax.py"


# Runs in a child process, as the script does: JAX started in the test process would stay
# started (its threads, and a warning on every later os.fork) for the tests after this one.
_COMPARE = """
import importlib.util, json, sys
import adaptive_runtime as ar
spec = importlib.util.spec_from_file_location("train_jax", sys.argv[1])
example = importlib.util.module_from_spec(spec)
sys.modules["train_jax"] = example  # (its dataclasses look their module up there)
spec.loader.exec_module(example)
run = {"phases": (8, 64, 512), "steps_per_phase": 30, "seed": 0}
rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
out = {}
for name, kwargs in (("plain", {"plain": True}), ("adapted", {"runtime": rt})):
    result = example.train(**run, **kwargs)
    out[name] = {"losses": result.losses, "accuracy": result.test_accuracy,
                 "grad_checks": [phase.grad_check for phase in result.phases]}
out["learned"] = sorted({r.operation for r in rt.history_snapshot() if r.samples})
print(json.dumps(out))
"""


def test_train_jax_learns_the_digits_and_equals_plain_jax_step_by_step() -> None:
    done = subprocess.run([sys.executable, "-c", _COMPARE, str(EXAMPLE)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    plain, adapted = out["plain"], out["adapted"]
    assert len(adapted["losses"]) == len(plain["losses"]) == 90
    np.testing.assert_allclose(adapted["losses"], plain["losses"], rtol=1e-4)
    assert mean(adapted["losses"][-5:]) < 0.5 * mean(adapted["losses"][:5])
    assert adapted["accuracy"] > 0.8  # (10 classes: 0.1 is luck)
    assert abs(adapted["accuracy"] - plain["accuracy"]) <= 1 / 360  # (one image at most)
    assert all(check <= 1e-5 for check in adapted["grad_checks"] + plain["grad_checks"])
    learned = set(out["learned"])
    assert {"linear@jax", "matmul@jax", "layer_norm@jax", "gelu@jax", "softmax@jax",
            "scale@jax", "gelu.backward@jax", "layer_norm.backward@jax"} <= learned
    assert not any("traced" in op for op in learned)  # (jax.grad's calls are not learned)


def test_train_jax_script_prints_its_progress_and_decisions_with_steps_traced(
        tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["ADAPTIVE_RUNTIME_TELEMETRY_DIR"] = str(tmp_path)
    done = subprocess.run([sys.executable, str(EXAMPLE), "--phases", "8,64",
                           "--steps-per-phase", "20"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    phases = re.findall(r"phase (\d): batch +(\d+) +20 steps .* test accuracy ([\d.]+)",
                        done.stdout)
    assert [(p[0], p[1]) for p in phases] == [("0", "8"), ("1", "64")], done.stdout
    assert "gelu.backward@jax" in done.stdout  # the decision table
    spans = [span for line in (tmp_path / "traces.jsonl").read_text().splitlines()
             for resource in json.loads(line)["resourceSpans"]
             for scope in resource["scopeSpans"] for span in scope["spans"]]
    step_spans = [s for s in spans if s["name"] == "train_step"]
    steps = {s["spanId"] for s in step_spans}
    # step spans are sampled within the trace budget, each standing for the steps since the
    # previous one: 40 at most (the last few may be pending)
    weights = [next((a["value"]["doubleValue"] for a in s["attributes"]
                     if a["key"] == "adaptive.sampling.weight"), 1.0) for s in step_spans]
    assert 0 < len(steps) <= sum(weights) <= 40
    # (the test-accuracy passes run forward operations outside any step; the backward and
    # the updates run only in steps)
    selects = [s for s in spans if s["name"].startswith("adaptive.select")
               and (".backward@jax" in s["name"] or "scale@jax" in s["name"])]
    assert selects and all(s.get("parentSpanId") in steps for s in selects)
