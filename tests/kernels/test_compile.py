"""SIMD kernels: a serial fastmath build on small inputs, the parallel one on large; numba's
OpenMP thread pool waits passively between parallel regions."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

from adaptive_runtime.kernels._compile import PARALLEL_MIN_ELEMENTS, prange, simd_jit


@simd_jit
def _double(x, out):
    for i in prange(x.shape[0]):
        out[i] = 2.0 * x[i]


def test_small_inputs_use_the_serial_build_and_large_ones_the_parallel_build() -> None:
    small = np.arange(8.0)
    out = np.empty_like(small)
    _double(small, out)
    assert out.tolist() == (2 * small).tolist()
    assert (len(_double.serial.signatures), len(_double.parallel.signatures)) == (1, 0)
    large = np.ones(PARALLEL_MIN_ELEMENTS)
    out = np.empty_like(large)
    _double(large, out)
    assert float(out.sum()) == 2.0 * PARALLEL_MIN_ELEMENTS
    assert (len(_double.serial.signatures), len(_double.parallel.signatures)) == (1, 1)
    assert len(_double.signatures) == 2  # what compile_count() reads


_SHOW_POOL = """
import ctypes, os
import numpy as np
import numba
import adaptive_runtime as ar
ar.AdaptiveRuntime(ar.RuntimeConfig(force_backend="simd")).run("relu", np.ones(1 << 16))
print("layer", numba.threading_layer())
print("env", os.environ.get("OMP_WAIT_POLICY"), flush=True)
ctypes.CDLL("libgomp.so.1").omp_display_env(0)  # numba's OpenMP runtime prints its settings
"""


def _numba_pool_settings(env_policy: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if env_policy is not None:
        env["OMP_WAIT_POLICY"] = env_policy
    done = subprocess.run([sys.executable, "-c", _SHOW_POOL], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    return done.stdout + done.stderr


def test_numba_openmp_threads_wait_passively_and_the_environment_is_left_as_it_was() -> None:
    shown = _numba_pool_settings(None)
    assert "layer omp" in shown
    assert "OMP_WAIT_POLICY = 'PASSIVE'" in shown
    assert "env None" in shown  # only numba's OpenMP runtime saw the setting


def test_a_wait_policy_the_user_set_is_kept() -> None:
    shown = _numba_pool_settings("ACTIVE")
    assert "OMP_WAIT_POLICY = 'ACTIVE'" in shown
    assert "env ACTIVE" in shown
