"""Candidates whose numba code is not compiled yet: left out of their keys, compiled off the
caller's path once the runtime's calls have paid for it, then explored (issue 40,
``_dispatch/prepare.py``). Real runtimes, real numba kernels; a fake timer only where the test
says how long calls took."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

import adaptive_runtime as ar
from adaptive_runtime import Backend
from adaptive_runtime.kernels._specimen import specimen

N = 1 << 16  # (2^16 float64: SIMD first; the one-thread variant is a candidate from 2^15)


def _timed_arms(rt: ar.AdaptiveRuntime, operation: str) -> set[object]:
    return {r.choice for r in rt.history_snapshot() if r.operation == operation}


def _fresh(program: str) -> list[str]:
    """Run ``program`` in a fresh interpreter (no kernel compiled yet: what is cold is a
    process's state); its printed words."""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.split()


_TIMED = """
def timed(rt, operation):
    return {str(r.choice) for r in rt.history_snapshot() if r.operation == operation}
"""


def test_the_first_arm_runs_and_other_uncompiled_candidates_wait_on_a_default_runtime() -> None:
    # SIMD (numba) is the cold-start order's first at 2^16 elements: it runs, compiled in its
    # call, and so does its one-thread variant (the same kernels). An arm never timed on a
    # key is otherwise tried at once; SCALAR is numba code not compiled yet, and 1,000 calls
    # of ~0.1 ms do not pay for compiling it (3 % of their time against ~30 ms)
    words = _fresh(_TIMED + """
import numpy as np
import adaptive_runtime as ar
rt = ar.AdaptiveRuntime()
x = np.random.default_rng(0).random(1 << 16)
for _ in range(1000):
    np.testing.assert_allclose(rt.run("relu", x), np.maximum(x, 0.0))
print(*sorted(timed(rt, "relu")))
""")
    assert "simd" in words and "simd:numba@1" in words
    assert "scalar" not in words


def test_wait_compiled_makes_the_left_out_candidates_explored() -> None:
    rt = ar.AdaptiveRuntime()
    x = np.random.default_rng(1).random(N)
    rt.run("sum", x)
    assert rt.wait_compiled(timeout_s=120)
    for _ in range(300):
        assert rt.run("sum", x) == pytest.approx(x.sum())
    timed = _timed_arms(rt, "sum")
    assert Backend.SCALAR in timed


def test_compiling_starts_once_the_calls_time_pays_for_it() -> None:
    """With numba loaded (a numpy program whose SIMD kernels ran) a compile is expected to
    take ~30 ms; at the default explore_share (3 %) the runtime's calls must have taken ~1 s
    first: with calls that seem to take ~0.5-1 ms (a timer that says so), after a thousand
    calls or more, not after a hundred."""
    words = _fresh(_TIMED + """
import itertools
import numpy as np
import adaptive_runtime as ar
ticks = itertools.count(0, 500_000)  # (ns: each read 0.5 ms after the one before)
rt = ar.AdaptiveRuntime(ar.RuntimeConfig(max_measure_period=1), timer=lambda: next(ticks))
x = np.random.default_rng(2).random(1 << 16)
for _ in range(100):
    rt.run("relu", x)
print("scalar" in timed(rt, "relu"))
for calls in range(6000):  # (cold numba caches: a compile takes ~0.15 s, not 30 ms)
    rt.run("relu", x)
    if "scalar" in timed(rt, "relu"):
        break
print("scalar" in timed(rt, "relu"), calls > 500)
""")
    assert words == ["False", "True", "True"]


def test_a_short_quiet_torch_loop_never_loads_numba() -> None:
    """The adapted loop's SIMD arm is ATen; numba's arms would cost its import (~0.8 s) in
    the loop: a short run does not pay for it, so numba is never imported."""
    program = """
import sys, torch
import adaptive_runtime as ar
import adaptive_runtime.torch as art
torch.manual_seed(0)
model = art.adapt(torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(),
                                      torch.nn.LayerNorm(128), torch.nn.Linear(128, 10)),
                  runtime=ar.AdaptiveRuntime())
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = torch.randn(64, 64), torch.randint(10, (64,))
for _ in range(200):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
print("numba" in sys.modules, "adaptive-runtime-prepare" in
      [t.name for t in __import__("threading").enumerate()])
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"], done.stdout + done.stderr


def test_a_specimen_keeps_dtype_layout_and_library_at_one_element_per_dimension() -> None:
    c = np.ones((5, 7), dtype=np.float32)
    f = np.asfortranarray(np.ones((5, 7)))
    t = torch.ones(4, 3, requires_grad=True)
    small = specimen((c, f, 2.0, t, -1))
    assert small is not None
    sc, sf, alpha, st, axis = small
    assert sc.shape == (1, 1) and sc.dtype == np.float32 and sc.flags.c_contiguous
    assert sf.shape == (1, 1) and sf.dtype == np.float64 and sf.flags.f_contiguous
    assert sc.base is None and sf.base is None  # (copies: the call's inputs are not held)
    assert alpha == 2.0 and axis == -1
    assert isinstance(st, torch.Tensor) and st.shape == (1, 1) and not st.requires_grad


def test_no_specimen_for_a_layout_numba_would_type_apart() -> None:
    strided = np.ones((8, 8))[::2, ::2]
    assert specimen((strided,)) is None
    assert specimen((torch.ones(4, 4).t()[::2],)) is None
