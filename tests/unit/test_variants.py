"""Several implementations per arm ("variants"): registered, learned and chosen among per
(operation, size bucket, arm, variant), forced, disabled with their arm, kept in history
files, counted and replayed. Fake kernels on the fake timer of tests/conftest.py."""

from __future__ import annotations

import json
import pickle

import pytest

import adaptive_runtime as ar
from adaptive_runtime.backend import parse_choice
from adaptive_runtime.history import read_history_file
from adaptive_runtime.offline.replay import read_calls, replay

Backend = ar.Backend
Reason = ar.Reason
Variant = ar.Variant
NUMPY = Variant(Backend.SIMD, "numpy")
THREADED = Variant(Backend.SIMD, "threaded")


def test_a_variant_is_one_object_per_arm_and_name_however_it_is_made() -> None:
    assert Variant("simd", "numpy") is NUMPY
    assert parse_choice("SIMD:numpy") is NUMPY
    assert pickle.loads(pickle.dumps(NUMPY)) is NUMPY
    assert (NUMPY.arm, NUMPY.variant, str(NUMPY)) == (Backend.SIMD, "numpy", "simd:numpy")
    assert (Backend.SIMD.arm, Backend.SIMD.variant) == (Backend.SIMD, "")
    assert parse_choice("scalar") is Backend.SCALAR
    for bad in ("simd:", "simd:a b", "simd:" + "x" * 65, "cpu:numpy"):
        with pytest.raises(ValueError):
            parse_choice(bad)


def test_named_implementations_are_variants_of_their_arm(clock, timer) -> None:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(), builtin_ops=False, clock=clock, timer=timer)
    op = rt.register("double", size=len)

    @op.implementation("simd", name="numpy")
    def plain(x):
        return x

    @op.implementation(Backend.SIMD)
    def primary(x):
        return x

    op.add_implementation("simd", lambda x: x, name="threaded")
    op.add_implementation("scalar", lambda x: x)
    assert op.choices == (NUMPY, Backend.SIMD, THREADED, Backend.SCALAR)
    assert op.backends == (Backend.SIMD, Backend.SCALAR)
    assert op.implementation_for(NUMPY).fn is plain
    assert op.implementation_for(Backend.SIMD).fn is primary
    assert [i.name for i in op.implementations()] == ["numpy", "", "threaded", ""]


def test_registration_refuses_a_second_primary_a_repeated_variant_and_a_bad_name(
        clock, timer) -> None:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(), builtin_ops=False, clock=clock, timer=timer)
    op = rt.register("double", size=len)
    op.add_implementation("simd", lambda x: x)
    op.add_implementation("simd", lambda x: x, name="numpy")
    with pytest.raises(ar.RegistrationError, match=r"already has a simd implementation .*"
                                                   r"give it a name="):
        op.add_implementation("simd", lambda x: x)
    with pytest.raises(ar.RegistrationError, match="already has a simd variant named 'numpy'"):
        op.add_implementation("simd", lambda x: x, name="numpy")
    for bad in ("a b", "simd:x", "x" * 65, 3):
        with pytest.raises(ar.RegistrationError, match="name of an implementation"):
            op.add_implementation("scalar", lambda x: x, name=bad)  # type: ignore[arg-type]
    op.add_implementation("scalar", lambda x: x, name="numpy")  # (names are per arm)
    assert op.choices == (Backend.SIMD, NUMPY, Variant("scalar", "numpy"))


def test_the_runtime_commits_to_the_fastest_variant_and_says_so(make_runtime) -> None:
    h = make_runtime({Backend.SIMD: 100.0, NUMPY: 20.0, Backend.SCALAR: 300.0}, gpu=False)
    runs = h.call_tracked(300)
    assert {arm for arm, reason in runs[-100:] if reason is Reason.EXPLOIT} == {NUMPY}
    decision = h.rt.decide(h.op, h.size)
    assert (decision.choice, decision.backend, decision.variant) == (NUMPY, Backend.SIMD,
                                                                     "numpy")
    assert set(decision.estimates_us) == {Backend.SIMD, NUMPY, Backend.SCALAR}
    assert decision.estimates_us[NUMPY] == pytest.approx(20.0)
    # the Trueno-compatible API answers with the arm
    assert h.rt.get_best_backend(h.op, h.size) is Backend.SIMD
    assert h.rt.select(h.op, h.size) is Backend.SIMD
    counts = h.rt.selection_counts()
    assert sum(n for k, n in counts.items() if k.variant == "numpy") >= 250
    assert all(k.backend is Backend.SIMD for k in counts if k.variant == "numpy")
    assert h.arms.calls[Backend.SCALAR] <= 3


def test_each_size_bucket_learns_its_own_variant(make_runtime) -> None:
    h = make_runtime({Backend.SIMD: 0.0, NUMPY: 0.0}, gpu=False)
    small, large = 64, 1 << 20
    h.arms.latency_us = {Backend.SIMD: lambda: 40.0 if h.last_size == small else 100.0,
                         NUMPY: lambda: 5.0 if h.last_size == small else 400.0}
    for _ in range(100):
        for n in (small, large):
            h.last_size = n
            h.call(n)
    assert h.rt.decide(h.op, small).choice is NUMPY
    assert h.rt.decide(h.op, large).choice is Backend.SIMD


def test_a_variant_far_slower_on_smaller_sizes_is_not_tried_on_larger_ones(make_runtime) -> None:
    h = make_runtime({Backend.SIMD: 0.0, THREADED: 0.0}, gpu=False)
    h.arms.latency_us = {Backend.SIMD: lambda: h.last_size / 100,
                         THREADED: lambda: 50 * h.last_size / 100}
    for n in (1 << 12, 1 << 13, 1 << 14, 1 << 15):
        for _ in range(20):
            h.last_size = n
            h.call(n)
        # timed once on the smallest size, where it lost 50x: its floor rules it out above
        assert h.arms.calls[THREADED] == 1, n


def test_forcing_an_arm_runs_its_primary_and_forcing_a_variant_runs_only_it(
        make_runtime) -> None:
    latencies = {Backend.SIMD: 100.0, NUMPY: 20.0, Backend.SCALAR: 300.0}
    h = make_runtime(latencies, gpu=False, force_backend="simd")
    h.call_tracked(20)
    assert set(h.arms.ran) == {Backend.SIMD}
    h = make_runtime(latencies, gpu=False, force_backend="simd:numpy")
    runs = h.call_tracked(20)
    assert set(h.arms.ran) == {NUMPY}
    assert {reason for _arm, reason in runs} == {Reason.FORCED}
    assert h.rt.decide(h.op, h.size).choice is NUMPY
    with pytest.raises(ar.ConfigError, match="force_backend"):
        ar.RuntimeConfig(force_backend="simd:not a name")


def test_a_forced_variant_the_operation_lacks_runs_its_arm_and_a_missing_arm_is_an_error(
        make_runtime) -> None:
    h = make_runtime({Backend.SIMD: 1.0, Backend.SCALAR: 5.0}, gpu=False,
                     force_backend="simd:numpy")
    runs = h.call_tracked(5)
    assert set(h.arms.ran) == {Backend.SIMD}
    assert {reason for _arm, reason in runs} == {Reason.FORCED}
    assert h.rt.decide(h.op, h.size).choice is Backend.SIMD
    h = make_runtime({Backend.SCALAR: 5.0}, gpu=False, force_backend="simd:numpy")
    with pytest.raises(ar.BackendUnavailableError,
                       match="'simd:numpy' is forced but operation 'fakeop' has no simd"):
        h.call()


def test_disabling_an_arm_disables_its_variants(make_runtime) -> None:
    h = make_runtime({Backend.SIMD: 100.0, NUMPY: 20.0, Backend.SCALAR: 300.0}, gpu=False,
                     disabled_backends=["simd"])
    h.call_tracked(30)
    assert set(h.arms.ran) == {Backend.SCALAR}


def test_history_files_keep_variants_and_a_reload_commits_at_once(make_runtime, tmp_path,
                                                                   clock, timer) -> None:
    h = make_runtime({Backend.SIMD: 100.0, NUMPY: 20.0}, gpu=False)
    h.call_tracked(50)
    path = tmp_path / "history.json"
    h.rt.save_history(path)
    rows = json.loads(path.read_text())["records"]
    assert {(r["backend"], r.get("variant")) for r in rows} == {("simd", None),
                                                                ("simd", "numpy")}
    records = read_history_file(path).records
    assert {r.choice for r in records} == {Backend.SIMD, NUMPY}
    fresh = make_runtime({Backend.SIMD: 100.0, NUMPY: 20.0}, gpu=False)
    fresh.rt.load_history(path, force=True)
    assert fresh.rt.decide(fresh.op, fresh.size).choice is NUMPY


def test_a_pickled_runtime_keeps_the_variants_of_its_operations() -> None:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(), builtin_ops=False)
    op = rt.register("double", size=len)
    op.add_implementation("simd", sorted)
    op.add_implementation("simd", list, name="plain")
    copy = pickle.loads(pickle.dumps(rt))
    assert copy.operation("double").choices == (Backend.SIMD, Variant("simd", "plain"))


def test_recorded_calls_of_variants_replay(make_runtime, tmp_path) -> None:
    h = make_runtime({Backend.SIMD: 100.0, NUMPY: 20.0}, gpu=False)
    path = tmp_path / "calls.jsonl"
    with h.rt.record_calls(path):
        h.call_tracked(200)
    calls = read_calls(path)
    assert {c.arm for c in calls} == {Backend.SIMD, NUMPY}
    result = replay(calls)
    (key,) = result.keys
    assert key.oracle is NUMPY
    assert key.cost_us <= 1.10 * key.oracle_us
