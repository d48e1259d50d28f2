"""The registry is strict; a missing arm is never a candidate; cold-start heuristics."""

from __future__ import annotations

import pytest

import adaptive_runtime as ar
from adaptive_runtime.operations import DeviceProbe

Backend = ar.Backend


def _rt(clock, timer, *, gpu: bool, **cfg) -> ar.AdaptiveRuntime:
    return ar.AdaptiveRuntime(ar.RuntimeConfig(**cfg), builtin_ops=False,
                              devices=DeviceProbe(gpu=gpu), clock=clock, timer=timer)


def test_duplicate_operation_name_is_rejected(clock, timer) -> None:
    rt = _rt(clock, timer, gpu=False)
    rt.register("softmax")
    with pytest.raises(ar.RegistrationError, match="'softmax' is already registered"):
        rt.register("softmax")


def test_duplicate_arm_is_rejected_naming_operation_and_arm(clock, timer) -> None:
    rt = _rt(clock, timer, gpu=False)
    op = rt.register("softmax")

    @op.implementation(Backend.SIMD)
    def first(x):
        return x

    with pytest.raises(ar.RegistrationError, match=r"'softmax' already has a simd"):
        op.add_implementation("simd", lambda x: x)


def test_implementation_for_unknown_arm_is_rejected(clock, timer) -> None:
    rt = _rt(clock, timer, gpu=False)
    op = rt.register("softmax")
    with pytest.raises(ar.RegistrationError) as info:
        op.implementation("tpu")
    message = str(info.value)
    assert "tpu" in message and "softmax" in message
    assert all(b.value in message for b in Backend)
    with pytest.raises(ar.RegistrationError, match="tpu"):
        op.add_implementation("tpu", lambda x: x)


def test_non_callable_implementation_is_rejected(clock, timer) -> None:
    rt = _rt(clock, timer, gpu=False)
    op = rt.register("softmax")
    with pytest.raises(ar.RegistrationError, match="must be callable"):
        op.add_implementation(Backend.SIMD, 42)  # type: ignore[arg-type]
    with pytest.raises(ar.RegistrationError, match="must be callable"):
        op.implementation(Backend.SIMD)("not a function")  # type: ignore[arg-type]
    assert op.backends == ()


@pytest.mark.parametrize("bad", ["", "  ", " padded", None, 3])
def test_bad_operation_names_are_rejected(clock, timer, bad: object) -> None:
    rt = _rt(clock, timer, gpu=False)
    with pytest.raises(ar.RegistrationError, match="operation name"):
        rt.register(bad)  # type: ignore[arg-type]


def test_bad_placement_and_floor_hooks_are_rejected(clock, timer) -> None:
    rt = _rt(clock, timer, gpu=False)
    with pytest.raises(ar.RegistrationError, match="on_device"):
        rt.register("x", on_device=True)  # type: ignore[arg-type]
    with pytest.raises(ar.RegistrationError, match="@device"):
        rt.register("x@device")
    op = rt.register("x")
    with pytest.raises(ar.RegistrationError, match="floor_us of 'x' on gpu must be callable"):
        op.add_implementation(Backend.GPU, lambda n: n, floor_us=12.5)  # type: ignore[arg-type]
    assert op.backends == ()


def test_bad_kind_is_rejected(clock, timer) -> None:
    rt = _rt(clock, timer, gpu=False)
    with pytest.raises(ar.RegistrationError, match="kind"):
        rt.register("x", kind="tensorish")


def test_running_an_operation_with_no_implementation_names_it(clock, timer) -> None:
    rt = _rt(clock, timer, gpu=False)
    rt.register("lonely", size=lambda n: n)
    with pytest.raises(ar.RegistrationError, match="'lonely' has no implementation"):
        rt.run("lonely", 10)


def test_running_an_unknown_operation_lists_registered_names(clock, timer) -> None:
    rt = _rt(clock, timer, gpu=False)
    for name in ("alpha", "beta"):
        rt.register(name).add_implementation(Backend.SIMD, lambda x: x)
    with pytest.raises(ar.UnknownOperationError) as info:
        rt.run("gamma", 1)
    message = str(info.value)
    assert "'gamma'" in message and "alpha" in message and "beta" in message
    assert isinstance(info.value, KeyError)


def test_gpu_only_operation_without_gpu_is_backend_unavailable(clock, timer) -> None:
    rt = _rt(clock, timer, gpu=False)
    op = rt.register("cuda_only", size=lambda n: n, kind="matrix")
    op.add_implementation(Backend.GPU, lambda n: n)
    with pytest.raises(ar.BackendUnavailableError, match="cuda_only"):
        rt.run("cuda_only", 100_000)


def test_gpu_only_operation_runs_with_fake_gpu_arm(clock, timer) -> None:
    rt = _rt(clock, timer, gpu=True)
    op = rt.register("cuda_only", size=lambda n: n, kind="matrix")
    op.add_implementation(Backend.GPU, lambda n: ("gpu", n))
    assert rt.run("cuda_only", 100_000) == ("gpu", 100_000)


def test_operation_called_directly_runs_through_its_runtime(clock, timer) -> None:
    rt = _rt(clock, timer, gpu=False)
    op = rt.register("twice", size=lambda n: n)
    op.add_implementation(Backend.SCALAR, lambda n: 2 * n)
    assert op(21) == 42
    assert rt.operation("twice") is op
    assert "twice" in rt.operations


def test_missing_gpu_arm_is_never_selected_on_any_call(clock, timer, make_runtime) -> None:
    # GPU implementation registered and fastest, but the machine has no GPU.
    h = make_runtime({Backend.GPU: 1.0, Backend.SIMD: 300.0, Backend.SCALAR: 200.0},
                     kind="matrix", size=1_000_000, gpu=False)
    for i in range(300):
        h.call(size=1_000_000 if i % 2 else 500)
        clock.advance(0.01)
    assert h.arms.calls[Backend.GPU] == 0
    assert h.arms.calls[Backend.SIMD] + h.arms.calls[Backend.SCALAR] == 300
    assert all(r.backend is not Backend.GPU for r in h.rt.history_snapshot())
    assert all(k.backend is not Backend.GPU for k in h.rt.selection_counts())
    assert h.rt.decide("fakeop", 1_000_000).backend is not Backend.GPU


def test_select_for_unregistered_matrix_name_never_returns_gpu_without_gpu(clock, timer) -> None:
    rt = _rt(clock, timer, gpu=False)
    for name in ("matmul", "conv2d", "gemm", "matrix_mul"):
        for _ in range(20):
            backend = rt.select(name, 10**6)
            assert backend is not Backend.GPU
            rt.record_performance(name, 10**6, backend, 100.0)


@pytest.mark.parametrize("name", ["matmul", "matrix", "conv", "gemm", "bmm"])
def test_select_matrix_like_name_above_10000_is_gpu_on_cold_start_with_fake_gpu(
        clock, timer, name: str) -> None:
    rt = _rt(clock, timer, gpu=True)
    decision = rt.decide(name, 10_001)
    assert (decision.backend, decision.reason) == (Backend.GPU, ar.Reason.HEURISTIC)
    assert rt.select(name, 10**6) is Backend.GPU


@pytest.mark.parametrize(("name", "size", "expected"), [
    ("matmul", 10_000, Backend.SIMD),     # not above 10,000: not worth the GPU yet
    ("matmul", 999, Backend.SCALAR),      # under 1,000: scalar
    ("dot", 10**6, Backend.SIMD),         # vector work: SIMD even when huge
    ("add", 5_000, Backend.SIMD),
    ("scale", 50_000, Backend.SIMD),
    ("dot", 999, Backend.SCALAR),
    ("dot", 1_000, Backend.SIMD),
    ("mystery_op", 0, Backend.SCALAR),
])
def test_cold_start_heuristics_match_trueno_with_fake_gpu(clock, timer, name: str, size: int,
                                                          expected: ar.Backend) -> None:
    rt = _rt(clock, timer, gpu=True)
    decision = rt.decide(name, size)
    assert decision.reason is ar.Reason.HEURISTIC
    assert decision.backend is expected
    assert rt.select(name, size) is expected


def test_registered_kind_drives_cold_start_with_fake_gpu_arm(clock, timer) -> None:
    rt = _rt(clock, timer, gpu=True)
    op = rt.register("my_gemm_like", size=lambda n: n, kind="matrix")
    ran = []
    for arm in Backend:
        op.add_implementation(arm, lambda n, arm=arm: ran.append(arm))
    rt.run("my_gemm_like", 50_000)
    assert ran == [Backend.GPU]


def test_disabled_arm_is_never_selected_with_fake_gpu_arm(clock, timer, make_runtime) -> None:
    h = make_runtime({Backend.GPU: 1.0, Backend.SIMD: 300.0, Backend.SCALAR: 200.0},
                     kind="matrix", size=1_000_000, disabled_backends={"gpu"})
    for _ in range(100):
        h.call()
    assert h.arms.calls[Backend.GPU] == 0
    assert h.rt.select("matmul", 10**6) is not Backend.GPU


def test_forced_backend_runs_every_call_on_it_with_reason_forced(clock, timer,
                                                                 make_runtime) -> None:
    h = make_runtime({Backend.SIMD: 10.0, Backend.SCALAR: 500.0}, force_backend="scalar")
    for _ in range(50):
        h.call()
    assert h.arms.calls == {Backend.SCALAR: 50}
    stats = h.rt.stats()
    assert stats.calls() == stats.calls("fakeop", "scalar", "forced") == 50
    assert [(k.operation, k.backend, k.reason) for k in stats.selections] == [
        ("fakeop", Backend.SCALAR, ar.Reason.FORCED)]
    assert h.rt.decide("fakeop", 4096).reason is ar.Reason.FORCED


def test_forced_backend_times_fast_calls_one_in_n_and_counts_them_all(clock, timer,
                                                                       make_runtime) -> None:
    # a 10 us kernel is far below the sampling threshold: once measured, a forced runtime
    # runs it on the fast path like a committed arm, timing only 1 call in N
    h = make_runtime({Backend.SIMD: 1.0, Backend.SCALAR: 10.0}, force_backend="scalar")
    for _ in range(2000):
        h.call()
    assert h.arms.calls == {Backend.SCALAR: 2000}
    [scalar] = [r for r in h.rt.history_snapshot() if r.backend is Backend.SCALAR]
    assert scalar.samples < 2000 // 4
    stats = h.rt.stats()
    assert stats.calls() == stats.calls("fakeop", Backend.SCALAR, ar.Reason.FORCED) == 2000


def test_forced_backend_missing_from_operation_is_unavailable(clock, timer) -> None:
    rt = _rt(clock, timer, gpu=False, force_backend="scalar")
    op = rt.register("simd_only", size=lambda n: n)
    op.add_implementation(Backend.SIMD, lambda n: n)
    with pytest.raises(ar.BackendUnavailableError, match="simd_only"):
        rt.run("simd_only", 10)
