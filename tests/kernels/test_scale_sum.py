"""``scale`` and ``sum``: every CPU arm equals numpy (float64) for numpy and torch inputs of
both dtypes, any shape and layout; bad inputs are clear errors; compiling is not learned."""

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

from adaptive_runtime.kernels import scale
from adaptive_runtime.kernels import sum as sum_op

MODULES = (scale, sum_op)


def _array(rng: np.random.Generator, shape: tuple[int, ...], dtype) -> np.ndarray:
    """Standard normal values of ``shape``: C-ordered, every other element of a longer array,
    or a transposed array (by chance)."""
    layout = rng.integers(3)
    if layout == 0:
        return rng.standard_normal(shape).astype(dtype)
    if layout == 1:
        return rng.standard_normal((*shape[:-1], 2 * shape[-1])).astype(dtype)[..., ::2]
    return rng.standard_normal(shape[::-1]).astype(dtype).T


def _shape(rng: np.random.Generator, n: int) -> tuple[int, ...]:
    return [(n,), (n, 3), (2, n), (2, 3, n)][rng.integers(4)]


def _scale_args(rng: np.random.Generator, n: int, dtype) -> tuple:
    alpha = [float(rng.standard_normal() * 3), np.float64(-2.5), 3, np.float32(0.75)][
        rng.integers(4)]
    shape = _shape(rng, n)
    return alpha, _array(rng, shape, dtype), _array(rng, shape, dtype)


SCALE = OpCase("scale", _scale_args, lambda alpha, x, y: alpha * x + y,
               rtol32=1e-5, rtol64=1e-12)
SUM = OpCase("sum", lambda rng, n, dt: (_array(rng, _shape(rng, n), dt),), np.sum,
             rtol32=1e-4, rtol64=1e-10, terms=lambda args: args[0].size)


@pytest.mark.parametrize("case", [SCALE, SUM], ids=lambda c: c.name)
@given(n=SIZES, dtype=st.sampled_from(DTYPES), kind=st.sampled_from(["numpy", "torch"]),
       seed=st.integers(0, 2**16))
def test_every_cpu_arm_matches_numpy(choice_runtimes, case, n, dtype, kind, seed) -> None:
    check_every_arm(choice_runtimes, case, n, dtype, kind, seed)


def test_sum_of_float32_is_a_float32_scalar_or_0d_tensor(arm_runtimes) -> None:
    x = np.full((10, 10), 0.5, np.float32)
    for rt in arm_runtimes.values():
        got = rt.run("sum", x)
        assert type(got) is np.float32 and got == 50.0
        tensor = rt.run("sum", torch.from_numpy(x))
        assert tensor.dtype == torch.float32 and tensor.shape == () and tensor.item() == 50.0


def test_scale_keeps_float32_for_a_float64_or_integer_alpha(arm_runtimes) -> None:
    x, y = np.ones(5, np.float32), np.arange(5, dtype=np.float32)
    for rt in arm_runtimes.values():
        for alpha in (np.float64(2.0), 2, np.int64(2)):
            got = rt.run("scale", alpha, x, y)
            assert got.dtype == np.float32
            np.testing.assert_array_equal(got, [2, 3, 4, 5, 6])


def test_a_tensor_that_requires_grad_is_read_without_error(arm_runtimes) -> None:
    x = torch.ones(4, dtype=torch.float64, requires_grad=True)
    for rt in arm_runtimes.values():
        assert rt.run("sum", x).item() == 4.0
        assert rt.run("scale", 2.0, x, x).tolist() == [3.0] * 4


@pytest.mark.parametrize(("op", "args", "message"), [
    ("scale", (2.0, np.ones((2, 3)), np.ones((3, 2))), r"^scale: expected two non-empty arrays "
     r"of the same shape, got shapes \(2, 3\) and \(3, 2\)"),
    ("scale", (2.0, np.ones(3), np.ones(4)), r"^scale: .* \(3,\) and \(4,\)"),
    ("scale", (2.0, np.ones((0, 2)), np.ones((0, 2))), r"^scale: .* \(0, 2\) and \(0, 2\)"),
    ("scale", (2.0, np.ones(()), np.ones(())), r"^scale: .* \(\) and \(\)"),
    ("sum", (np.ones(0),), r"^sum: expected a non-empty array .*, got shapes \(0,\)$"),
    ("sum", (np.ones((3, 0)),), r"^sum: .* \(3, 0\)$"),
    ("sum", (np.ones(()),), r"^sum: expected a non-empty array of at least one dimension, "
     r"got shapes \(\)$"),
    ("sum", (torch.ones(0, dtype=torch.float32),), r"^sum: .* \(0,\)$"),
])
def test_bad_shapes_are_value_errors_naming_the_op_and_shapes(arm_runtimes, op, args,
                                                               message) -> None:
    for rt in arm_runtimes.values():
        with pytest.raises(ValueError, match=message):
            rt.run(op, *args)


@pytest.mark.parametrize(("op", "args", "message"), [
    ("scale", (2.0, np.arange(3), np.arange(3)),
     r"^scale: expected float32 or float64 .* got int64 array \(3,\), int64 array \(3,\)"),
    ("scale", (2.0, np.ones(2), torch.ones(2, dtype=torch.float64)),
     r"^scale: inputs must be all numpy arrays, all torch tensors or all JAX arrays, got "
     r"float64 array \(2,\), "
     r"torch.float64 tensor \(2,\)"),
    ("scale", (2.0, np.ones(2, np.float32), np.ones(2)),
     r"^scale: inputs must share one dtype, got float32 array \(2,\), float64 array \(2,\)"),
    ("scale", (2.0, [1.0, 2.0], np.ones(2)), r"^scale: expected .* got list, float64 array"),
    ("scale", (np.ones(1), np.ones(2), np.ones(2)), r"^scale: alpha must be a real number, "
     r"got ndarray"),
    ("scale", (1j, np.ones(2), np.ones(2)), r"^scale: alpha must be a real number, got complex"),
    ("scale", (True, np.ones(2), np.ones(2)), r"^scale: alpha must be a real number, got bool"),
    ("sum", (np.ones(3, np.float16),), r"^sum: expected float32 or float64 .* float16 array"),
    ("sum", (torch.ones(3, dtype=torch.int32),), r"^sum: expected .* torch.int32 tensor \(3,\)"),
    ("sum", ([1.0, 2.0],), r"^sum: expected float32 or float64 .* got list$"),
])
def test_bad_types_are_type_errors_naming_the_op_and_inputs(arm_runtimes, op, args,
                                                             message) -> None:
    for rt in arm_runtimes.values():
        with pytest.raises(TypeError, match=message):
            rt.run(op, *args)


# A fresh process, where each kernel's first call compiles it (or loads it from numba's disk
# cache: either adds a signature). For each op and forced arm, two float64 calls: the change
# in the op module's compiled signatures and the op's history samples after each call.
FIRST_CALLS = """
import json
import numba
import numpy as np
import adaptive_runtime as ar
from adaptive_runtime.kernels._compile import SizeSplitKernel
from adaptive_runtime.kernels import scale, sum as sum_op
from adaptive_runtime.kernels.record import register_host

def signatures(module):
    return sum(len(v.signatures) for v in vars(module).values()
               if isinstance(v, numba.core.registry.CPUDispatcher | SizeSplitKernel))

x = np.ones(1000)
seen = {}
for arm in (ar.Backend.SCALAR, ar.Backend.SIMD):
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(force_backend=arm), builtin_ops=False)
    for module, record, args in ((scale, scale.SCALE, (2.0, x, x)), (sum_op, sum_op.SUM, (x,))):
        register_host(rt, record)
        calls = []
        for _ in range(2):
            before = signatures(module)
            rt.run(module.NAME, *args)
            samples = sum(r.samples for r in rt.history_snapshot()
                          if r.operation == module.NAME)
            calls.append([signatures(module) - before, samples])
        seen[module.NAME + "/" + arm.value] = calls
print(json.dumps(seen))
"""


def test_a_call_that_compiles_is_not_learned() -> None:
    done = subprocess.run([sys.executable, "-W", "error", "-c", FIRST_CALLS],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    for key, [(compiled, samples), (compiled_again, samples_again)] in seen.items():
        assert compiled >= 1, f"{key}: the first call did not compile: {seen}"
        assert samples == 0, f"{key}: the compiling call was learned: {seen}"
        assert (compiled_again, samples_again) == (0, 1), f"{key}: {seen}"
