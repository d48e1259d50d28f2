"""``relu``, ``gelu`` and ``softmax``: every CPU arm equals a float64 reference (numpy, torch's
exact gelu and softmax) for numpy and torch inputs of both dtypes, any shape and layout; bad
inputs are clear errors; compiling is not learned."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from harness import DTYPES, SIZES, OpCase, check_every_arm
from hypothesis import given
from hypothesis import strategies as st


def _array(rng: np.random.Generator, shape: tuple[int, ...], dtype, spread: float = 1.0,
           offset: float = 0.0) -> np.ndarray:
    """``offset + spread * standard normal`` of ``shape``: C-ordered, every other element of a
    longer array, or a transposed array (by chance)."""
    layout = rng.integers(3)
    if layout == 0:
        values = rng.standard_normal(shape)
    elif layout == 1:
        values = rng.standard_normal((*shape[:-1], 2 * shape[-1]))[..., ::2]
    else:
        values = rng.standard_normal(shape[::-1]).T
    return (offset + spread * values).astype(dtype)


def _elementwise_args(spread: float):
    def make(rng: np.random.Generator, n: int, dtype) -> tuple:
        shape = [(n,), (n, 3), (2, n), (2, 3, n)][rng.integers(4)]
        return (_array(rng, shape, dtype, spread),)

    return make


def _softmax_args(rng: np.random.Generator, n: int, dtype) -> tuple:
    # rows of one element, of n, many short rows, several axes before the last; offsets of
    # +-1000 overflow exp unless each row's maximum is subtracted first
    shape = [(n,), (2, n), (n, 5), (n, 1), (2, 3, n)][rng.integers(5)]
    offset = [0.0, 1000.0, -1000.0][rng.integers(3)]
    return (_array(rng, shape, dtype, spread=4.0, offset=offset),)


def _torch64(fn):
    return lambda x: fn(torch.from_numpy(np.ascontiguousarray(x))).numpy()


RELU = OpCase("relu", _elementwise_args(1.0), lambda x: np.maximum(x, 0.0),
              rtol32=0.0, rtol64=0.0)  # exact
GELU = OpCase("gelu", _elementwise_args(3.0), _torch64(torch.nn.functional.gelu),
              rtol32=1e-6, rtol64=1e-12)
SOFTMAX = OpCase("softmax", _softmax_args, _torch64(lambda t: torch.softmax(t, dim=-1)),
                 rtol32=1e-5, rtol64=1e-12)


@pytest.mark.parametrize("case", [RELU, GELU, SOFTMAX], ids=lambda c: c.name)
@given(n=SIZES, dtype=st.sampled_from(DTYPES), kind=st.sampled_from(["numpy", "torch"]),
       seed=st.integers(0, 2**16))
def test_every_cpu_arm_matches_the_reference(choice_runtimes, case, n, dtype, kind, seed) -> None:
    check_every_arm(choice_runtimes, case, n, dtype, kind, seed)


def test_softmax_rows_sum_to_one_and_keep_their_order(arm_runtimes) -> None:
    x = np.array([[1.0, 2.0, 3.0], [1000.0, 1000.0, -1000.0]])
    for rt in arm_runtimes.values():
        got = rt.run("softmax", x)
        np.testing.assert_allclose(got.sum(axis=-1), [1.0, 1.0], rtol=1e-15)
        assert got[0, 0] < got[0, 1] < got[0, 2]
        np.testing.assert_array_equal(got[1], [0.5, 0.5, 0.0])


def test_relu_and_gelu_at_known_points(arm_runtimes) -> None:
    x = np.array([-2.0, -0.0, 0.0, 1.5])
    for rt in arm_runtimes.values():
        np.testing.assert_array_equal(rt.run("relu", x), [0.0, 0.0, 0.0, 1.5])
        # gelu(x) = x * Phi(x): Phi(-2) = 0.02275013194817921, Phi(1.5) = 0.9331927987311419
        np.testing.assert_allclose(rt.run("gelu", x),
                                   [-2 * 0.02275013194817921, 0, 0, 1.5 * 0.9331927987311419],
                                   rtol=1e-14)


def test_a_tensor_that_requires_grad_is_read_without_error(arm_runtimes) -> None:
    x = torch.zeros(4, dtype=torch.float32, requires_grad=True)
    for rt in arm_runtimes.values():
        assert rt.run("relu", x).tolist() == [0.0] * 4
        assert rt.run("gelu", x).tolist() == [0.0] * 4
        assert rt.run("softmax", x).tolist() == [0.25] * 4


@pytest.mark.parametrize("op", ["relu", "gelu", "softmax"])
@pytest.mark.parametrize(("x", "shapes"), [
    (np.ones(0), r"\(0,\)"), (np.ones((2, 0)), r"\(2, 0\)"), (np.ones(()), r"\(\)"),
    (torch.ones((0, 3), dtype=torch.float64), r"\(0, 3\)"),
], ids=["0", "2x0", "0-d", "torch-0x3"])
def test_bad_shapes_are_value_errors_naming_the_op_and_shape(arm_runtimes, op, x, shapes) -> None:
    for rt in arm_runtimes.values():
        with pytest.raises(ValueError, match=rf"^{op}: expected a non-empty array of at least "
                                             rf"one dimension, got shapes {shapes}$"):
            rt.run(op, x)


@pytest.mark.parametrize("op", ["relu", "gelu", "softmax"])
@pytest.mark.parametrize(("x", "described"), [
    (np.arange(3), r"int64 array \(3,\)"), (np.ones(2, np.float16), r"float16 array \(2,\)"),
    (torch.ones(3, dtype=torch.int32), r"torch.int32 tensor \(3,\)"),
    ([1.0, 2.0], "list"),
], ids=["int64", "float16", "torch-int32", "list"])
def test_bad_types_are_type_errors_naming_the_op_and_input(arm_runtimes, op, x, described) -> None:
    for rt in arm_runtimes.values():
        with pytest.raises(TypeError, match=rf"^{op}: expected float32 or float64 numpy arrays, "
                                            rf"or torch tensors or JAX arrays of float16, "
                                            rf"bfloat16, float32 or float64, got {described}$"):
            rt.run(op, x)


# A fresh process, where each kernel's first call compiles it (or loads it from numba's disk
# cache: either adds a signature). For each op and forced arm, two float64 calls: the change
# in the op module's compiled signatures and the op's history samples after each call.
FIRST_CALLS = """
import json
import numba
import numpy as np
import torch  # (ATen's arms on numpy arrays are candidates once the program imports torch)
import adaptive_runtime as ar
from adaptive_runtime.kernels._compile import SizeSplitKernel
from adaptive_runtime.kernels import gelu, relu, softmax
from adaptive_runtime.kernels.record import register_host

def signatures(module):
    return sum(len(v.signatures) for v in vars(module).values()
               if isinstance(v, numba.core.registry.CPUDispatcher | SizeSplitKernel))

x = np.ones((10, 100))
seen = {}
for arm in (ar.Backend.SCALAR, ar.Backend.SIMD):
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(force_backend=arm), builtin_ops=False)
    for record in (relu.RELU, gelu.GELU, softmax.SOFTMAX):
        register_host(rt, record)
    for module, name in ((relu, "relu"), (gelu, "gelu"), (softmax, "softmax")):
        calls = []
        for _ in range(2):
            before = signatures(module)
            rt.run(name, x)
            samples = sum(r.samples for r in rt.history_snapshot() if r.operation == name)
            calls.append([signatures(module) - before, samples])
        seen[name + "/" + arm.value] = calls
print(json.dumps(seen))
"""


def test_a_call_that_compiles_is_not_learned() -> None:
    done = subprocess.run([sys.executable, "-W", "error", "-c", FIRST_CALLS],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    for key, [(compiled, samples), (compiled_again, samples_again)] in seen.items():
        if key in ("gelu/simd", "softmax/simd"):  # ATen on the array (torch is imported):
            assert (compiled, samples) == (0, 0), f"{key}: {seen}"  # a warm-up, not learned
        else:
            assert compiled >= 1, f"{key}: the first call did not compile: {seen}"
            assert samples == 0, f"{key}: the compiling call was learned: {seen}"
        assert (compiled_again, samples_again) == (0, samples + 1), f"{key}: {seen}"
