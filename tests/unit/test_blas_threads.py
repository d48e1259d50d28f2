"""BLAS's thread count as a choice (issue 40): numpy's ``dot``, ``matmul`` and ``linear`` are
learned at 1 thread too (``simd:blas@1``), through OpenBLAS's own setter, found off the
caller's path. Real OpenBLAS (numpy's wheel), real runtimes; fresh interpreters where what is
tested is a process's first state."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import adaptive_runtime as ar
from adaptive_runtime import threads
from adaptive_runtime.backend import Variant

BLAS_AT_1 = Variant("simd", "blas@1")


def _fresh(program: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.split()


def _blas_count() -> int:
    assert threads.find_blas_setter()
    get, _ = threads._blas_calls[0]  # type: ignore[misc]
    return int(get())


def test_the_blas_products_have_a_one_thread_variant_from_the_parallel_sizes() -> None:
    rt = ar.AdaptiveRuntime()
    for name in ("dot", "matmul", "linear"):
        op = rt.operation(name)
        variant = op.implementation_for(BLAS_AT_1)
        assert variant is not None, name
        assert variant.threads == "blas" and variant.thread_count == 1
        assert variant.min_size > 1


def test_a_call_at_one_thread_runs_with_blas_at_one_and_puts_it_back() -> None:
    if threads.pool_size("blas") < 2:
        pytest.skip("one CPU here: BLAS has no fewer threads to run at")
    before = _blas_count()
    seen: list[int] = []
    probe = threads.at_blas_threads(1, lambda: seen.append(_blas_count()))
    probe()
    assert seen == [1]
    assert _blas_count() == before


def test_a_call_finding_blas_already_at_one_leaves_the_count_alone() -> None:
    # (two overlapping calls: the inner one must not restore the outer one's setting)
    if threads.pool_size("blas") < 2:
        pytest.skip("one CPU here: BLAS has no fewer threads to run at")
    before = _blas_count()
    inner = threads.at_blas_threads(1, _blas_count)
    outer = threads.at_blas_threads(1, lambda: (inner(), _blas_count()))
    assert outer() == (1, 1)
    assert _blas_count() == before


def test_the_variant_gives_the_same_result_as_numpys_dot() -> None:
    rt = ar.AdaptiveRuntime()
    rng = np.random.default_rng(0)
    a, b = rng.random(1 << 16), rng.random(1 << 16)
    impl = rt.operation("dot").implementation_for(BLAS_AT_1)
    assert threads.find_blas_setter()
    assert impl.fn(a, b) == pytest.approx(np.dot(a, b))


def test_a_default_runtime_finds_blas_off_the_callers_path_then_explores_the_variant() -> None:
    # a short numpy program never imports threadpoolctl in its calls (finding the library
    # takes milliseconds): the variant waits, cold; wait_compiled() finds it, and the key
    # then times it like any arm it has not timed
    words = _fresh("""
import sys
import numpy as np
import adaptive_runtime as ar
rt = ar.AdaptiveRuntime()
rng = np.random.default_rng(0)
a, b = rng.random(1 << 18), rng.random(1 << 18)
for _ in range(20):
    assert abs(rt.run("dot", a, b) - np.dot(a, b)) < 1e-6 * abs(np.dot(a, b))
print("before:", "threadpoolctl" in sys.modules,
      sorted({str(r.choice) for r in rt.history_snapshot() if r.operation == "dot"}))
assert rt.wait_compiled(timeout_s=60)
for _ in range(3000):
    rt.run("dot", a, b)
print("after:", sorted({str(r.choice) for r in rt.history_snapshot() if r.operation == "dot"}))
""")
    after = words.index("after:")
    before = words[:after]
    assert before[1] == "False"
    assert not any("blas@1" in w for w in before)
    assert any("simd:blas@1" in w for w in words[after:])
