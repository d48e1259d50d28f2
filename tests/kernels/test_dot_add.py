"""``dot`` and ``add``: every CPU arm equals numpy, for numpy and torch inputs of both dtypes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from harness import DTYPES, SIZES, OpCase, check_every_arm
from hypothesis import given
from hypothesis import strategies as st

import adaptive_runtime as ar

DOT = OpCase("dot", lambda rng, n, dt: (rng.standard_normal(n).astype(dt),
                                        rng.standard_normal(n).astype(dt)),
             np.dot, terms=lambda args: args[0].size)
ADD = OpCase("add", lambda rng, n, dt: (rng.standard_normal((n, 3)).astype(dt),
                                        rng.standard_normal((n, 3)).astype(dt)),
             np.add)


@pytest.mark.parametrize("case", [DOT, ADD], ids=lambda c: c.name)
@given(n=SIZES, dtype=st.sampled_from(DTYPES), kind=st.sampled_from(["numpy", "torch"]),
       seed=st.integers(0, 2**16))
def test_every_cpu_arm_matches_numpy(choice_runtimes, case, n, dtype, kind, seed) -> None:
    check_every_arm(choice_runtimes, case, n, dtype, kind, seed)


@pytest.mark.parametrize(("op", "args", "message"), [
    ("dot", (np.ones(3), np.ones(4)), r"^dot: expected two non-empty 1-D .* \(3,\) and \(4,\)"),
    ("dot", (np.ones(0), np.ones(0)), r"^dot: .* \(0,\) and \(0,\)"),
    ("add", (np.ones((2, 3)), np.ones((3, 2))), r"^add: .* \(2, 3\) and \(3, 2\)"),
    ("add", (np.ones((0, 2)), np.ones((0, 2))), r"^add: .* \(0, 2\) and \(0, 2\)"),
])
def test_bad_shapes_are_value_errors_naming_the_op_and_shapes(arm_runtimes, op, args,
                                                               message) -> None:
    for rt in arm_runtimes.values():
        with pytest.raises(ValueError, match=message):
            rt.run(op, *args)


@pytest.mark.parametrize(("args", "message"), [
    ((np.arange(3), np.arange(3)), r"^dot: expected float32 or float64 .* int64 array \(3,\)"),
    ((torch.ones(3, dtype=torch.int32), torch.ones(3, dtype=torch.int32)),
     r"^dot: expected float32 or float64 .* torch.int32 tensor \(3,\)"),
    (([1.0, 2.0], np.ones(2)), r"^dot: expected .* got list, float64 array \(2,\)"),
    ((np.ones(2), torch.ones(2, dtype=torch.float64)), r"^dot: inputs must be all numpy"),
    ((np.ones(2, np.float32), np.ones(2)), r"^dot: inputs must share one dtype"),
])
def test_bad_types_are_type_errors_naming_the_op_and_inputs(arm_runtimes, args,
                                                             message) -> None:
    for rt in arm_runtimes.values():
        with pytest.raises(TypeError, match=message):
            rt.run("dot", *args)


def test_a_tensor_that_requires_grad_is_read_without_error(arm_runtimes) -> None:
    a = torch.ones(4, dtype=torch.float64, requires_grad=True)
    for rt in arm_runtimes.values():
        assert rt.run("dot", a, a).item() == 4.0


def test_adaptive_runtime_answers_right_while_exploring() -> None:
    rt = ar.AdaptiveRuntime()
    rng = np.random.default_rng(0)
    for i in range(40):
        a, b = rng.standard_normal((2, 500 + 300 * (i % 5)))
        np.testing.assert_allclose(rt.run("dot", a, b), np.dot(a, b), rtol=1e-10, atol=1e-9)
        np.testing.assert_array_equal(rt.run("add", a, b), a + b)
    ran = {k.backend for k in rt.selection_counts() if k.operation == "dot"}
    assert ran == {ar.Backend.SCALAR, ar.Backend.SIMD}


def test_builtin_operations_are_registered() -> None:
    rt = ar.AdaptiveRuntime()
    assert {"dot", "add"} <= set(rt.operations)
    assert set(rt.operation("dot").backends) >= {ar.Backend.SCALAR, ar.Backend.SIMD}


def test_ops_functions_run_on_the_default_runtime(monkeypatch) -> None:
    from adaptive_runtime.runtime import facade as runtime_module

    for var in [v for v in __import__("os").environ if v.startswith("ADAPTIVE_RUNTIME_")]:
        monkeypatch.delenv(var)
    monkeypatch.setattr(runtime_module, "_default", None)  # a fresh default, restored after
    a, b = np.random.default_rng(7).standard_normal((2, 2_000))
    np.testing.assert_allclose(ar.ops.dot(a, b), np.dot(a, b), rtol=1e-10)
    np.testing.assert_array_equal(ar.ops.add(a, b), a + b)
    rt = ar.get_runtime()
    assert rt is ar.get_runtime()
    assert sum(n for k, n in rt.selection_counts().items() if k.operation == "dot") == 1
