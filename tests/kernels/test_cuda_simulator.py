"""The numba CUDA path of the GPU arm (no torch CUDA), run in numba's CUDA simulator.

``NUMBA_ENABLE_CUDASIM=1`` must be set before numba's CUDA module is first imported, so the
checks run in a fresh interpreter; the simulator executes every GPU thread in Python, which is
why the sizes stay small.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent('''
    import numpy as np
    import torch
    from numba import cuda  # (the program's GPU library: the runtime imports none itself)
    import adaptive_runtime as ar
    from adaptive_runtime.operations import DeviceProbe
    from adaptive_runtime.kernels import _gpu

    assert _gpu.device().kind == "numba", _gpu.device()  # torch has no CUDA here
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(force_backend="gpu"),
                            devices=DeviceProbe(gpu=True))
    for n in (1, 7, 257):  # one element, odd, more than one block of 256 threads
        for dtype in (np.float32, np.float64):
            rng = np.random.default_rng(n)
            a, b = rng.standard_normal((2, n)).astype(dtype)
            total = rt.run("add", a, b)
            assert type(total) is np.ndarray and total.dtype == dtype, total
            np.testing.assert_allclose(total, a + b, rtol=1e-6)
            matrix = rt.run("add", a.reshape(1, n), b.reshape(1, n))
            assert matrix.shape == (1, n)
            inner = rt.run("dot", a, b)
            assert isinstance(inner, np.floating) and inner.dtype == dtype, repr(inner)
            np.testing.assert_allclose(inner, np.dot(a.astype(np.float64), b), rtol=1e-5,
                                       atol=1e-5)
            ta, tb = torch.from_numpy(a), torch.from_numpy(b)
            t_total = rt.run("add", ta, tb)
            assert isinstance(t_total, torch.Tensor) and t_total.dtype == ta.dtype
            np.testing.assert_allclose(t_total.numpy(), a + b, rtol=1e-6)
            assert rt.run("dot", ta, tb).shape == ()
            np.testing.assert_allclose(rt.run("scale", 2.0, a, b), 2 * a + b, rtol=1e-6)
            np.testing.assert_array_equal(rt.run("relu", a), np.maximum(a, 0))
    assert {k.backend for k in rt.selection_counts()} == {ar.Backend.GPU}
    assert not rt.fallback_counts()
    try:  # an operation without a numba kernel fails on this path, clearly
        rt.run("softmax", a)
    except ar.AllBackendsFailedError as exc:
        assert "no numba CUDA kernel" in str(exc), exc
    else:
        raise AssertionError("softmax ran on the numba path, which has no kernel for it")
    print("ok")
''')


def test_numba_cuda_kernels_match_numpy_in_the_simulator() -> None:
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("ok")
