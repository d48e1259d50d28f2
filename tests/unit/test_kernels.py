"""Built-in kernels dot/add: every arm matches numpy; bad inputs are clear errors."""

from __future__ import annotations

import numpy as np
import pytest

import adaptive_runtime as ar
from adaptive_runtime import runtime as runtime_module

Backend = ar.Backend


@pytest.fixture(scope="module")
def default_rt() -> ar.AdaptiveRuntime:
    return ar.AdaptiveRuntime(ar.RuntimeConfig(), builtin_ops=True)


@pytest.fixture(scope="module", params=["scalar", "simd"])
def forced_rt(request) -> ar.AdaptiveRuntime:
    return ar.AdaptiveRuntime(ar.RuntimeConfig(force_backend=request.param), builtin_ops=True)


def _vectors(n: int, dtype, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.integer):
        return (rng.integers(-100, 100, n).astype(dtype), rng.integers(-100, 100, n).astype(dtype))
    return rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype)


def test_builtin_operations_are_registered(default_rt) -> None:
    assert {"dot", "add"} <= set(default_rt.operations)
    assert set(default_rt.operation("dot").backends) >= {Backend.SCALAR, Backend.SIMD}


@pytest.mark.parametrize("n", [1, 7, 999, 1_000, 4_097])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_dot_on_forced_arm_matches_numpy(forced_rt, n, dtype) -> None:
    a, b = _vectors(n, dtype, seed=n)
    got = forced_rt.run("dot", a, b)
    expected = np.dot(a, b)
    if np.issubdtype(dtype, np.integer):
        assert got == expected
    else:
        rtol = 1e-4 if dtype == np.float32 else 1e-10
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=rtol * n)
    (key,) = [k for k in forced_rt.selection_counts() if k.operation == "dot"][:1]
    assert key.reason is ar.Reason.FORCED
    assert key.backend is forced_rt.config.force_backend


@pytest.mark.parametrize("shape", [(1,), (1_000,), (3, 5), (2, 3, 4)])
@pytest.mark.parametrize("dtype", [np.float64, np.int32])
def test_add_on_forced_arm_matches_numpy(forced_rt, shape, dtype) -> None:
    n = int(np.prod(shape))
    a, b = (x.reshape(shape) for x in _vectors(n, dtype, seed=n))
    got = forced_rt.run("add", a, b)
    assert got.shape == shape
    np.testing.assert_array_equal(got, np.add(a, b))


def test_adaptive_dot_and_add_match_numpy_on_every_call(default_rt) -> None:
    # the default runtime explores both arms; every answer must be right whichever ran
    for i in range(40):
        a, b = _vectors(500 + 300 * (i % 5), np.float64, seed=i)
        np.testing.assert_allclose(default_rt.run("dot", a, b), np.dot(a, b), rtol=1e-10,
                                   atol=1e-9)
        np.testing.assert_array_equal(default_rt.run("add", a, b), a + b)
    ran = {k.backend for k in default_rt.selection_counts() if k.operation == "dot"}
    assert ran == {Backend.SCALAR, Backend.SIMD}


@pytest.mark.parametrize(("op", "a", "b", "shapes"), [
    ("dot", np.ones(3), np.ones(4), ("(3,)", "(4,)")),
    ("dot", np.ones((2, 2)), np.ones((2, 2)), ("(2, 2)", "(2, 2)")),
    ("dot", np.ones(0), np.ones(0), ("(0,)", "(0,)")),
    ("add", np.ones((2, 3)), np.ones((3, 2)), ("(2, 3)", "(3, 2)")),
    ("add", np.ones(3), np.ones(4), ("(3,)", "(4,)")),
])
def test_mismatched_shapes_raise_value_error_naming_op_and_shapes(default_rt, op, a, b,
                                                                   shapes) -> None:
    with pytest.raises(ValueError) as info:
        default_rt.run(op, a, b)
    message = str(info.value)
    assert message.startswith(f"{op}:")
    assert all(s in message for s in shapes)


@pytest.mark.parametrize("op", ["dot", "add"])
def test_non_array_inputs_raise_type_error_naming_op(default_rt, op) -> None:
    with pytest.raises(TypeError, match=rf"^{op}: expected two numpy arrays, got list and"):
        default_rt.run(op, [1.0, 2.0], np.ones(2))


def test_ops_dot_works_on_the_default_runtime(monkeypatch) -> None:
    for var in [v for v in __import__("os").environ if v.startswith("ADAPTIVE_RUNTIME_")]:
        monkeypatch.delenv(var)
    monkeypatch.setattr(runtime_module, "_default", None)  # a fresh default, restored after
    a, b = _vectors(2_000, np.float64, seed=7)
    np.testing.assert_allclose(ar.ops.dot(a, b), np.dot(a, b), rtol=1e-10)
    np.testing.assert_array_equal(ar.ops.add(a, b), a + b)
    rt = ar.get_runtime()
    assert rt is ar.get_runtime()
    assert sum(n for k, n in rt.selection_counts().items() if k.operation == "dot") == 1
