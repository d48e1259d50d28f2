"""Input families: calls of another family are learned apart, with that family's arms."""

from __future__ import annotations

import pytest

import adaptive_runtime as ar

Backend = ar.Backend


def _family_op(make_runtime, latencies):
    """Operation ``fam`` called as ``run("fam", n, family)``; its default family's arms have
    the latencies of ``make_runtime``, family "lib" has arms of its own (``latencies``)."""
    h = make_runtime({Backend.SIMD: 100.0, Backend.SCALAR: 300.0}, op="unused", arms=())
    op = h.rt.register("fam", size=lambda n, _family: n, kind="vector",
                       family=lambda _n, family: family)
    for backend in (Backend.SIMD, Backend.SCALAR):
        op.add_implementation(backend, h.arms.kernel(backend))
    lib_arms = type(h.arms)(h.timer, latencies)
    for backend in latencies:
        op.add_implementation(backend, lib_arms.kernel(backend), family="lib")
    return h, lib_arms


def _samples(h, operation: str) -> dict[Backend, int]:
    return {r.backend: r.samples for r in h.rt.history_snapshot() if r.operation == operation}


def test_calls_of_a_family_are_learned_apart_on_its_own_arms(make_runtime) -> None:
    h, lib = _family_op(make_runtime, {Backend.SIMD: 500.0, Backend.SCALAR: 50.0})
    for _ in range(40):
        h.rt.run("fam", 4096, "")
        h.rt.run("fam", 4096, "lib")
    assert h.rt.decide("fam", 4096).backend is Backend.SIMD
    assert h.rt.decide("fam@lib", 4096).backend is Backend.SCALAR
    assert set(_samples(h, "fam")) == set(_samples(h, "fam@lib")) == {Backend.SIMD,
                                                                      Backend.SCALAR}
    assert sum(lib.calls.values()) == 40  # the family's calls ran its own kernels only
    counts: dict[str, int] = {}
    for key, n in h.rt.selection_counts().items():
        counts[key.operation] = counts.get(key.operation, 0) + n
    assert counts == {"fam": 40, "fam@lib": 40}


def test_a_family_has_only_the_arms_registered_for_it(make_runtime) -> None:
    h, _lib = _family_op(make_runtime, {Backend.SIMD: 500.0})
    for _ in range(20):
        assert h.rt.run("fam", 4096, "lib")[0] is Backend.SIMD
    assert set(_samples(h, "fam@lib")) == {Backend.SIMD}


def test_a_family_with_no_arms_of_its_own_runs_the_default_ones(make_runtime) -> None:
    h, _lib = _family_op(make_runtime, {Backend.SIMD: 500.0})
    for _ in range(30):
        h.rt.run("fam", 4096, "other")
    assert set(_samples(h, "fam@other")) == {Backend.SIMD, Backend.SCALAR}
    assert h.rt.decide("fam@other", 4096).backend is Backend.SIMD  # 100 us against 300


def test_an_untimed_family_runs_as_is_and_is_never_learned(make_runtime) -> None:
    h, _lib = _family_op(make_runtime, {Backend.SIMD: 500.0})
    ran = []
    h.rt.operation("fam").add_untimed("traced", lambda n, family: ran.append(n) or "as is")
    reads = h.timer.reads
    assert [h.rt.run("fam", 4096, "traced") for _ in range(3)] == ["as is"] * 3
    assert ran == [4096] * 3 and h.timer.reads == reads
    assert not any(r.operation.startswith("fam@traced") for r in h.rt.history_snapshot())
    assert sum(h.rt.selection_counts().values()) == 0


def test_an_arm_registered_for_a_family_later_takes_part(make_runtime) -> None:
    h, lib = _family_op(make_runtime, {Backend.SIMD: 500.0})
    for _ in range(10):
        h.rt.run("fam", 4096, "lib")
    h.rt.operation("fam").add_implementation(Backend.SCALAR, lib.kernel(Backend.SIMD),
                                             family="lib")
    lib.latency_us[Backend.SIMD] = 40.0
    runs = [h.rt.run("fam", 4096, "lib") for _ in range(40)]
    assert set(_samples(h, "fam@lib")) == {Backend.SIMD, Backend.SCALAR}
    assert runs[-1][0] is Backend.SIMD  # (the new SCALAR arm is the fake SIMD kernel)


def test_a_warm_up_arm_is_not_learned_from_its_first_call(make_runtime) -> None:
    h = make_runtime({Backend.SIMD: 100.0}, op="unused", arms=())
    op = h.rt.register("warm", size=lambda n: n)
    op.add_implementation(Backend.SIMD, h.arms.kernel(Backend.SIMD), warm_up=True)
    h.rt.run("warm", 4096)
    assert _samples(h, "warm") in ({}, {Backend.SIMD: 0})
    h.rt.run("warm", 4096)
    assert _samples(h, "warm") == {Backend.SIMD: 1}


@pytest.mark.parametrize("family", ["", "with space", "a@b", 3])
def test_a_bad_family_name_is_a_registration_error(make_runtime, family) -> None:
    h = make_runtime({Backend.SIMD: 100.0})
    op = h.rt.operation(h.op)
    if family == "":
        op.add_implementation(Backend.GPU, h.arms.kernel(Backend.SIMD), family=family)
        return  # the default family: fine
    with pytest.raises(ar.RegistrationError, match="family"):
        op.add_implementation(Backend.GPU, h.arms.kernel(Backend.SIMD), family=family)


def test_a_family_hook_must_be_callable(make_runtime) -> None:
    h = make_runtime({Backend.SIMD: 100.0})
    with pytest.raises(ar.RegistrationError, match="family="):
        h.rt.register("x", family="torch")  # type: ignore[arg-type]


def test_a_sync_hook_keeps_earlier_work_out_of_a_timing_and_its_own_in(make_runtime) -> None:
    """An asynchronous arm's ``sync``: on a timed call, the wait for its inputs (earlier
    calls' work) comes before the timer starts, the wait for its result before it stops: a
    100 us launch whose result takes 50 us more is learned as a 150 us call is."""
    h = make_runtime({Backend.SIMD: 100.0, Backend.SCALAR: 150.0}, op="unused", arms=())
    seen: list[str] = []

    def sync(value):
        if value == (4096,):  # the arguments: 1 ms of someone else's pending work
            seen.append("args")
            h.timer.advance_us(1_000.0)
        else:  # the result ((arm, args) from the fake kernel): its own work, still running
            seen.append("result")
            h.timer.advance_us(50.0)

    h.rt.register("async", size=lambda n: n).add_implementation(
        Backend.SIMD, h.arms.kernel(Backend.SIMD), sync=sync)
    h.rt.register("same_work", size=lambda n: n).add_implementation(
        Backend.SIMD, h.arms.kernel(Backend.SCALAR))  # (150 us, synchronous)
    for _ in range(3):
        h.rt.run("async", 4096)
        h.rt.run("same_work", 4096)
    means = {r.operation: (r.samples, r.mean_us) for r in h.rt.history_snapshot()}
    assert seen[:2] == ["args", "result"] and len(seen) == 2 * means["async"][0]
    assert means["async"] == means["same_work"]


def test_a_sync_hook_must_be_callable(make_runtime) -> None:
    h = make_runtime({Backend.SIMD: 100.0})
    op = h.rt.register("x", size=lambda n: n)
    with pytest.raises(ar.RegistrationError, match="sync"):
        op.add_implementation(Backend.SIMD, h.arms.kernel(Backend.SIMD), sync=3)
