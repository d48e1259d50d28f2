"""SIMD kernels run their serial fastmath build on small inputs, the parallel one on large."""

from __future__ import annotations

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
