"""``make gpu-check`` on a machine without a CUDA GPU: it says so and succeeds (an ordinary
machine is not a failure); on one with a GPU it prints the table of docs/gpu.md."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_the_gpu_check_without_a_gpu_says_so_and_exits_0() -> None:
    proc = subprocess.run([sys.executable, "benchmarks/gpu_check.py"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "no GPU check on this machine (torch sees no CUDA device)" in proc.stdout
    assert "docs/gpu.md" in proc.stdout
