"""``make gpu-check`` on a machine without a CUDA GPU: it says so and succeeds (an ordinary
machine is not a failure); on one with a GPU it prints the table of docs/gpu.md."""

from __future__ import annotations

import os
import subprocess
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_gpu_check_without_a_gpu_says_so_and_exits_0(monkeypatch, capsys) -> None:
    # (torch's answer made "no CUDA device" whatever this machine has: the check's other
    # branch needs a GPU and minutes, and runs as `make gpu-check` there)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.syspath_prepend(os.path.join(ROOT, "benchmarks"))
    import gpu_check

    assert gpu_check.main() == 0
    out = capsys.readouterr().out
    assert "no GPU check on this machine (torch sees no CUDA device)" in out
    assert "docs/gpu.md" in out


def test_the_gpu_check_runs_as_a_script_and_exits_0_with_no_gpu_visible() -> None:
    """As `make gpu-check` runs it: a script of its own, with benchmarks/_table beside it
    (no CUDA device visible to it, whatever this machine has)."""
    proc = subprocess.run([sys.executable, "benchmarks/gpu_check.py"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 0, proc.stderr
    assert "gpu-check: no GPU check on this machine" in proc.stdout


def test_the_correctness_rows_compare_the_adapted_mlp_with_plain_torch_on_the_cpu(
        monkeypatch) -> None:
    """The comparison behind ``make gpu-check``'s correctness rows, run here on the CPU (the
    rows themselves need CUDA): the adapted and plain MLP trained side by side agree within
    the dtype's rounding, float32 and under autocast, and a gradient that differs is
    found."""
    monkeypatch.syspath_prepend(os.path.join(ROOT, "benchmarks"))
    import _gpu_correctness

    for autocast in (None, "bfloat16"):
        found, ok = _gpu_correctness.training_agrees("cpu", steps=20, autocast=autocast)
        assert ok, found
        assert "gradients missing 0" in found
    mine, theirs = torch.ones(3), torch.ones(3)
    assert _gpu_correctness._excess(mine, theirs, 1e-4, 1e-5) == 0.0
    assert _gpu_correctness._excess(mine * 1.01, theirs, 1e-4, 1e-5) > 1.0
