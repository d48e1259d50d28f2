"""JAX arrays: learned apart from numpy arrays, the jitted jax.numpy call always a candidate,
tracers (jit, grad, vmap) run untimed through the plain jax.numpy implementation.

Every operation is checked on every forced CPU arm against the numpy family (numba's SCALAR
loops on numpy arrays), in float32 and — with ``jax_enable_x64`` on, restored afterwards —
float64."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from harness import FAMILY_CPU_ARMS, forced_pairs

import adaptive_runtime as ar

Backend = ar.Backend

# jax is imported when this module's first test runs, not when pytest collects it: the tests
# collected before it run as they would in a program without JAX (importing it changes their
# timings: tests/kernels/test_gpu_arm.py's out-of-memory fallback test stopped trying the GPU)
jax: Any = None
jnp: Any = None


@pytest.fixture(autouse=True, scope="module")
def _import_jax() -> None:
    global jax, jnp
    import jax as jax_module
    import jax.numpy as jnp_module

    jax, jnp = jax_module, jnp_module


def _r(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# operation/case -> inputs (float64 numpy; cast to the test's dtype, then made JAX arrays)
CASES: dict[str, Callable[[], tuple[Any, ...]]] = {
    "dot": lambda: (_r(300), _r(300, seed=1)),
    "add": lambda: (_r(3, 40), _r(3, 40, seed=1)),
    "scale": lambda: (2.5, _r(5, 7), _r(5, 7, seed=1)),
    "scale/numpy-alpha": lambda: (np.float64(-0.75), _r(33), _r(33, seed=1)),
    "sum": lambda: (_r(3, 41),),
    "relu": lambda: (_r(4, 50),),
    "gelu": lambda: (_r(4, 50) * 2,),
    "softmax": lambda: (_r(3, 60) * 2,),
    "layer_norm": lambda: (_r(5, 64) * 3 + 1,),
    "layer_norm/affine": lambda: (_r(2, 3, 16), _r(16, seed=1), _r(16, seed=2)),
    "layer_norm/weight-eps": lambda: (_r(4, 16), _r(16, seed=1), None, 1e-3),
    "layer_norm/bias": lambda: (_r(4, 16), None, _r(16, seed=2)),
    "matmul": lambda: (_r(13, 24), _r(24, 9, seed=1)),
    "linear": lambda: (_r(2, 3, 24), _r(10, 24, seed=1), _r(10, seed=2)),
    "linear/no-bias": lambda: (_r(6, 24), _r(3, 24, seed=1)),
    "conv1d": lambda: (_r(90), _r(5, seed=1)),
    "conv1d/long-kernel": lambda: (_r(300), _r(70, seed=1)),
    "conv1d/batched": lambda: (_r(2, 3, 8), _r(4, 3, 3, seed=1), _r(4, seed=2), 1),
    "conv1d/batched-valid": lambda: (_r(2, 2, 6), _r(3, 2, 4, seed=1)),
    "relu.backward": lambda: (_r(3, 30, seed=3), _r(3, 30, seed=4)),
    "gelu.backward": lambda: (_r(3, 30, seed=3), _r(3, 30, seed=4) * 2),
    "softmax.backward": lambda: (_r(3, 30, seed=3), _softmax(_r(3, 30, seed=4))),
    "layer_norm.backward": lambda: (_r(3, 30, seed=3), _r(3, 30, seed=4)),
    "layer_norm.backward/weight": lambda: (_r(2, 3, 30, seed=3), _r(2, 3, 30, seed=4),
                                           _r(30, seed=5), 1e-5),
}


@pytest.fixture(params=["float32", "float64"])
def dtype(request: pytest.FixtureRequest) -> Iterator[np.dtype]:
    """float32 as JAX has it by default; float64 with ``jax_enable_x64`` (restored after)."""
    if request.param == "float32":
        yield np.dtype(np.float32)
        return
    previous = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", True)
    try:
        yield np.dtype(np.float64)
    finally:
        jax.config.update("jax_enable_x64", previous)


@pytest.fixture(scope="module")
def forced() -> dict[Backend, ar.AdaptiveRuntime]:
    return {arm: ar.AdaptiveRuntime(ar.RuntimeConfig(force_backend=arm, tracing=False))
            for arm in FAMILY_CPU_ARMS}  # type: ignore[misc]


def _cast(args: tuple[Any, ...], dtype: np.dtype) -> tuple[Any, ...]:
    return tuple(a.astype(dtype) if isinstance(a, np.ndarray) else a for a in args)


def _to_jax(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(jnp.asarray(a) if isinstance(a, np.ndarray) else a for a in args)


def _results(out: Any) -> tuple[Any, ...]:
    return out if isinstance(out, tuple) else (out,)


@pytest.mark.parametrize(("case", "arm"), forced_pairs(sorted(CASES), "jax"))
def test_every_operation_on_every_cpu_arm_equals_the_numpy_family(forced, case, arm,
                                                                  dtype) -> None:
    op = case.split("/")[0]
    args = _cast(CASES[case](), dtype)
    expected = forced[Backend.SCALAR].run(op, *args)  # numba's loops on numpy arrays
    inputs = _to_jax(args)
    model = next(a for a in inputs if isinstance(a, jax.Array))
    assert model.dtype == dtype
    got = forced[arm].run(op, *inputs)
    tolerance = 1e-5 if dtype == np.float32 else 1e-10
    for e, r in zip(_results(expected), _results(got), strict=True):
        assert isinstance(r, jax.Array) and not isinstance(r, np.ndarray)
        assert r.dtype == dtype and r.shape == np.shape(e)
        assert r.devices() == model.devices()
        np.testing.assert_allclose(np.asarray(r), e, rtol=tolerance,
                                   atol=tolerance * max(1.0, float(np.max(np.abs(e)))))


def _rows(rt: ar.AdaptiveRuntime) -> set[tuple[str, Backend]]:
    return {(r.operation, r.backend) for r in rt.history_snapshot() if r.samples}


def test_jax_arrays_are_learned_apart_from_numpy_arrays() -> None:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    x = _r(16, 64).astype(np.float32)
    for _ in range(12):
        rt.run("gelu", x)
        rt.run("gelu", jnp.asarray(x))
        rt.run("gelu.backward", jnp.asarray(x), jnp.asarray(x))
    ops = {op for op, _arm in _rows(rt)}
    assert {"gelu", "gelu@jax", "gelu.backward@jax"} <= ops
    assert {arm for op, arm in _rows(rt) if op == "gelu@jax"} <= {Backend.SIMD, Backend.SCALAR}


@pytest.mark.parametrize("low", ["float16", "bfloat16"])
def test_half_precision_runs_only_on_the_jitted_arm(low) -> None:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    half = getattr(jnp, low)
    x = jnp.asarray(_r(8, 32)).astype(half)
    w = jnp.asarray(_r(16, 32, seed=1)).astype(half)
    for _ in range(8):
        y = rt.run("linear", x, w)
        assert y.dtype == half
        assert rt.run("gelu", x).dtype == half
        assert rt.run("layer_norm", x).dtype == half
    assert _rows(rt) == {(f"linear@jax:{low}", Backend.SIMD), (f"gelu@jax:{low}", Backend.SIMD),
                         (f"layer_norm@jax:{low}", Backend.SIMD)}
    np.testing.assert_allclose(
        np.asarray(rt.run("gelu", x), dtype=np.float32),
        np.asarray(jax.nn.gelu(x.astype(jnp.float32), approximate=False)), rtol=2e-2,
        atol=2e-2)
    with pytest.raises(ar.BackendUnavailableError, match=f"gelu@jax:{low}"):
        ar.AdaptiveRuntime(ar.RuntimeConfig(force_backend="scalar", tracing=False)).run(
            "gelu", x)


def _samples(rt: ar.AdaptiveRuntime, operation: str, size: int) -> int:
    bucket = ar.size_bucket(size)
    return sum(r.samples for r in rt.history_snapshot()
               if r.operation == operation and r.size_bucket == bucket)


@pytest.mark.parametrize("arm", [Backend.SIMD, Backend.SCALAR], ids=str)
def test_an_arms_first_call_is_a_warm_up_and_not_learned(arm) -> None:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(force_backend=arm, tracing=False))
    x = jnp.asarray(_r(3, 5).astype(np.float32))
    rt.run("softmax", x)
    assert _samples(rt, "softmax@jax", x.size) == 0
    for _ in range(3):  # (a call that compiled does not count as the warm-up either)
        rt.run("softmax", x)
    assert _samples(rt, "softmax@jax", x.size) >= 1


def test_a_call_that_compiled_is_not_learned() -> None:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(force_backend="simd", tracing=False))
    warm = jnp.asarray(_r(3, 5).astype(np.float32))
    for _ in range(3):
        rt.run("softmax", warm)
    assert _samples(rt, "softmax@jax", warm.size) >= 1
    # a shape never seen before in this process: XLA compiles it, so its time is not learned
    fresh = jnp.asarray(_r(3, 1237).astype(np.float32))
    rt.run("softmax", fresh)
    assert _samples(rt, "softmax@jax", fresh.size) == 0
    rt.run("softmax", fresh)
    assert _samples(rt, "softmax@jax", fresh.size) == 1


def _calls(rt: ar.AdaptiveRuntime) -> dict[Any, int]:
    return dict(rt.selection_counts())


def test_traced_calls_run_the_jax_implementation_untimed() -> None:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    x = jnp.asarray(_r(6, 20).astype(np.float32))
    rt.run("gelu", x)  # (a concrete call first: the traced ones below must add nothing)
    before_rows, before_calls = rt.history_snapshot(), _calls(rt)

    def plain(x: Any) -> Any:
        return jnp.sum(jax.nn.softmax(jax.nn.gelu(x, approximate=False), axis=-1) * x)

    def adaptive(x: Any) -> Any:
        return rt.run("sum", rt.run("softmax", rt.run("gelu", x)) * x)

    np.testing.assert_allclose(jax.jit(adaptive)(x), plain(x), rtol=1e-6)
    np.testing.assert_allclose(jax.grad(adaptive)(x), jax.grad(plain)(x), rtol=1e-5,
                               atol=1e-7)
    np.testing.assert_allclose(jax.vmap(adaptive)(x), jax.vmap(plain)(x), rtol=1e-6)
    np.testing.assert_allclose(jax.jit(jax.vmap(jax.grad(adaptive)))(x),
                               jax.vmap(jax.grad(plain))(x), rtol=1e-5, atol=1e-7)
    assert rt.history_snapshot() == before_rows
    assert _calls(rt) == before_calls
    assert not any("traced" in r.operation for r in rt.history_snapshot())


def test_jax_grad_through_ar_ops_equals_jax_grad_of_plain_jax_numpy() -> None:
    """A model made of ``ar.ops`` (the default runtime) differentiates as its jax.numpy twin,
    for the inputs' and the weights' gradients alike — a weight may be a tracer while the
    first array of its call is not (``linear(x, w)`` under ``grad`` with respect to ``w``)."""
    x = jnp.asarray(_r(4, 2, 12).astype(np.float32))
    params = {"conv": jnp.asarray(_r(3, 2, 3, seed=1).astype(np.float32)) * 0.5,
              "conv_b": jnp.asarray(_r(3, seed=2).astype(np.float32)),
              "w1": jnp.asarray(_r(16, 36, seed=3).astype(np.float32)) * 0.2,
              "b1": jnp.asarray(_r(16, seed=4).astype(np.float32)),
              "ln_w": jnp.asarray(1 + 0.1 * _r(16, seed=5).astype(np.float32)),
              "ln_b": jnp.asarray(0.1 * _r(16, seed=6).astype(np.float32)),
              "w2": jnp.asarray(_r(16, 5, seed=7).astype(np.float32)) * 0.3}
    ops = {"conv1d": ar.ops.conv1d, "relu": ar.ops.relu, "linear": ar.ops.linear,
           "layer_norm": ar.ops.layer_norm, "gelu": ar.ops.gelu, "matmul": ar.ops.matmul,
           "softmax": ar.ops.softmax, "sum": ar.ops.sum}
    plain = {"conv1d": lambda x, w, b, p: jax.lax.conv_general_dilated(
                 x, w, (1,), [(p, p)], dimension_numbers=("NCH", "OIH", "NCH"),
                 precision="highest") + b[:, None],
             "relu": jax.nn.relu,
             "linear": lambda x, w, b: jnp.matmul(x, w.T, precision="highest") + b,
             "layer_norm": lambda x, w, b, eps: (x - x.mean(-1, keepdims=True)) / jnp.sqrt(
                 x.var(-1, keepdims=True) + eps) * w + b,
             "gelu": lambda x: jax.nn.gelu(x, approximate=False),
             "matmul": lambda a, b: jnp.matmul(a, b, precision="highest"),
             "softmax": lambda x: jax.nn.softmax(x, axis=-1), "sum": jnp.sum}

    def loss(f: dict[str, Callable[..., Any]], params: dict[str, Any], x: Any) -> Any:
        h = f["relu"](f["conv1d"](x, params["conv"], params["conv_b"], 1))
        h = f["linear"](h.reshape(h.shape[0], -1), params["w1"], params["b1"])
        h = f["gelu"](f["layer_norm"](h, params["ln_w"], params["ln_b"], 1e-5))
        p = f["softmax"](f["matmul"](h, params["w2"]))
        return -f["sum"](jnp.log(p[:, 0]))

    for _ in range(3):  # (the first calls explore; grads must not depend on the arm)
        grads = jax.grad(loss, argnums=(1, 2))(ops, params, x)
        expected = jax.grad(loss, argnums=(1, 2))(plain, params, x)
        for got, want in zip(jax.tree.leaves(grads), jax.tree.leaves(expected), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(loss(ops, params, x), loss(plain, params, x), rtol=1e-5)


def test_a_weight_traced_beside_a_concrete_input_is_not_learned() -> None:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(force_backend="simd", tracing=False))
    x = jnp.asarray(_r(8, 12).astype(np.float32))
    w = jnp.asarray(_r(4, 12, seed=1).astype(np.float32))
    for _ in range(4):
        grad = jax.grad(lambda w: jnp.sum(rt.run("linear", x, w) ** 2))(w)
    np.testing.assert_allclose(grad, 2 * (x @ w.T).T @ x, rtol=1e-4, atol=1e-5)
    assert not any(r.samples for r in rt.history_snapshot())


def test_bad_jax_inputs_are_refused_with_the_operation_named() -> None:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    f32 = jnp.ones((2, 3), dtype=jnp.float32)
    with pytest.raises(TypeError, match="add: inputs must share one dtype"):
        rt.run("add", f32, f32.astype(jnp.bfloat16))
    with pytest.raises(TypeError, match="add: inputs must be all numpy arrays"):
        rt.run("add", f32, np.ones((2, 3), dtype=np.float32))
    with pytest.raises(TypeError, match="relu: expected float32 or float64"):
        rt.run("relu", jnp.ones(3, dtype=jnp.int32))
    with pytest.raises(ValueError, match="matmul: expected non-empty 2-D arrays"):
        rt.run("matmul", f32, f32)


def test_registering_and_running_the_jax_arms_does_not_load_jax() -> None:
    # (forced onto SIMD: the runtime's GPU probe, which asks JAX for a GPU where torch has no
    # CUDA, is not what this checks)
    code = ("import sys, numpy as np, adaptive_runtime as ar\n"
            "rt = ar.AdaptiveRuntime(ar.RuntimeConfig(force_backend='simd'))\n"
            "rt.run('gelu', np.ones(8)); rt.run('linear', np.ones((2, 3)), np.ones((4, 3)))\n"
            "rt.run('layer_norm.backward', np.ones((2, 3)), np.ones((2, 3)))\n"
            "assert 'jax' not in sys.modules, 'jax was imported'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr


def _jax_gpu() -> Any:
    try:
        return jax.devices("gpu")[0]
    except RuntimeError:
        return None


@pytest.mark.gpu
def test_the_gpu_arm_runs_the_jitted_function_on_jaxs_gpu() -> None:
    gpu = _jax_gpu()
    if gpu is None:
        pytest.skip("JAX sees no GPU here")
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(force_backend="gpu", tracing=False))
    x = jnp.asarray(_r(64, 128).astype(np.float32))
    for placed in (x, jax.device_put(x, gpu)):
        y = rt.run("gelu", placed)
        assert y.devices() == placed.devices()
        np.testing.assert_allclose(np.asarray(y), np.asarray(jax.nn.gelu(x, approximate=False)),
                                   rtol=1e-5, atol=1e-6)
