"""Pickling an AdaptiveRuntime (a spawned DataLoader worker's Dataset holds one): a fresh
runtime with the same config, a copy of the history and the user's operations."""

from __future__ import annotations

import json
import pickle
from typing import Any

import numba
import numpy as np
import pytest

import adaptive_runtime as ar
from adaptive_runtime.history import record_to_json
from adaptive_runtime.operations import DeviceProbe

Backend = ar.Backend


# Module level, so that they pickle (by reference) as a user's operations must.
def triple_size(x: np.ndarray) -> int:
    return int(x.size)


def triple_simd(x: np.ndarray) -> np.ndarray:
    return x * 3.0


@numba.njit(cache=False)
def triple_scalar(x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] + x[i] + x[i]
    return out


def triple_floor_us(x: np.ndarray) -> float:
    return 1.0


def rows(rt: ar.AdaptiveRuntime) -> list[str]:
    """The history as JSON rows (NaN means compare equal as text)."""
    return [json.dumps(record_to_json(r), sort_keys=True) for r in rt.history_snapshot()]


def learned(config: ar.RuntimeConfig | None = None, **kwargs: Any) -> ar.AdaptiveRuntime:
    rt = ar.AdaptiveRuntime(config or ar.RuntimeConfig(tracing=False), **kwargs)
    for i in range(8):
        rt.record_performance("dot", 1000, "simd", 10.0 + i % 3)
        rt.record_performance("dot", 1000, "scalar", 40.0 + i)
        rt.record_performance("my_kernel", 50_000, "scalar", 400.0)
    return rt


def test_a_pickled_runtime_has_the_same_config_and_a_copy_of_the_history() -> None:
    config = ar.RuntimeConfig(tracing=False, sampling_threshold_us=250.0,
                              hot_path_calls_per_sec=5_000, min_samples_per_arm=4,
                              disabled_backends=frozenset({Backend.GPU}))
    rt = learned(config)
    copy = pickle.loads(pickle.dumps(rt))
    assert isinstance(copy, ar.AdaptiveRuntime) and copy is not rt
    assert copy.config == config
    assert rows(copy) == rows(rt) != []
    assert copy.operations == rt.operations  # the built-in ones, registered afresh
    assert copy.get_best_backend("dot", 1000) == rt.get_best_backend("dot", 1000)
    # a fresh runtime: what it learns is its own
    copy.record_performance("dot", 1000, "scalar", 1.0)
    assert rows(copy) != rows(rt)
    x = np.linspace(-1.0, 1.0, 64)
    assert np.array_equal(copy.run("relu", x), np.maximum(x, 0.0))


def test_a_runtime_without_builtin_operations_stays_without_them() -> None:
    rt = learned(builtin_ops=False, devices=DeviceProbe(gpu=True))
    copy = pickle.loads(pickle.dumps(rt))
    assert copy.operations == ()
    assert rows(copy) == rows(rt)
    # the stand-in given to the constructor went along: a GPU to choose (none is here)
    assert rt.decide("big_matmul", 1 << 20).backend is Backend.GPU
    assert copy.decide("big_matmul", 1 << 20).backend is Backend.GPU


def test_a_registered_operation_comes_along_with_its_arms() -> None:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False))
    op = rt.register("triple", size=triple_size, kind="elementwise")
    op.add_implementation(Backend.SIMD, triple_simd, floor_us=triple_floor_us)
    op.add_implementation(Backend.SCALAR, triple_scalar)
    x = np.arange(16.0)
    for _ in range(12):
        assert np.array_equal(rt.run("triple", x), 3.0 * x)

    copy = pickle.loads(pickle.dumps(rt))
    assert "triple" in copy.operations
    twin = copy.operation("triple")
    assert twin.kind is ar.Kind.ELEMENTWISE and twin.size_of is triple_size
    assert set(twin.backends) == {Backend.SIMD, Backend.SCALAR}
    simd = twin.implementation_for(Backend.SIMD)
    scalar = twin.implementation_for(Backend.SCALAR)
    assert simd is not None and simd.fn is triple_simd and simd.floor_us is triple_floor_us
    # (the numba kernel's compile counter is made again from the unpickled kernel)
    assert scalar is not None and scalar.compile_count is not None
    assert rows(copy) == rows(rt)
    assert np.array_equal(copy.run("triple", x), 3.0 * x)


def test_an_operation_that_does_not_pickle_is_named_in_a_type_error() -> None:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False), builtin_ops=False)
    rt.register("softmax_mine", size=lambda x: x.size, kind="vector").add_implementation(
        Backend.SIMD, triple_simd)
    with pytest.raises(TypeError, match=r"size function of operation 'softmax_mine'"):
        pickle.dumps(rt)


def test_an_implementation_that_does_not_pickle_is_named_with_its_arm() -> None:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False), builtin_ops=False)

    def local_kernel(x: np.ndarray) -> np.ndarray:
        return x

    op = rt.register("mine", size=triple_size)
    op.add_implementation(Backend.SIMD, triple_simd)
    op.add_implementation(Backend.SCALAR, local_kernel)
    with pytest.raises(TypeError, match=r"scalar implementation of operation 'mine'"):
        pickle.dumps(rt)
