"""Without numba, every operation still works: SCALAR and SIMD run the same loops as plain
Python (slowly) and still equal the reference. Checked in a fresh interpreter where importing
numba fails, as on a machine without it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_CHECK = """
import sys
import types
sys.modules["numba"] = None  # "import numba" raises ImportError from here on
import adaptive_runtime as ar
from adaptive_runtime.kernels import _compile, layer_norm
from harness import DTYPES, check_every_arm
from test_activations_softmax import GELU, RELU, SOFTMAX
from test_dot_add import ADD, DOT
from test_layer_norm import LAYER_NORM
from test_matmul_conv1d import CONV1D, MATMUL
from test_scale_sum import SCALE, SUM

# the kernels are the plain Python loops, not compiled dispatchers
assert not _compile.HAVE_NUMBA
assert isinstance(layer_norm._layer_norm_rows_parallel, types.FunctionType)
runtimes = {arm: ar.AdaptiveRuntime(ar.RuntimeConfig(force_backend=arm, tracing=False))
            for arm in (ar.Backend.SCALAR, ar.Backend.SIMD)}
checked = 0
for case in (DOT, ADD, SCALE, SUM, RELU, GELU, SOFTMAX, LAYER_NORM, MATMUL, CONV1D):
    for n in (1, 7, 64):
        for dtype in DTYPES:
            for kind in ("numpy", "torch"):
                check_every_arm(runtimes, case, n, dtype, kind, seed=n)
                checked += 1
print("checked", checked)
"""


def test_every_operation_equals_the_reference_on_both_cpu_arms_without_numba() -> None:
    here = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(here), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", _CHECK], env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "checked 120" in done.stdout
