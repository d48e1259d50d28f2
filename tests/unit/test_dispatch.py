"""Dispatch: fallback and quarantine, every arm failing, and the measurement gate."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from internals import attach_sinks

import adaptive_runtime as ar
from adaptive_runtime._dispatch.watch import WATCHED_MAX_PERIOD
from adaptive_runtime.operations import DeviceProbe
from adaptive_runtime.telemetry.sinks import NO_SPANS

Backend = ar.Backend
Reason = ar.Reason


def _failures(h, backend: Backend) -> int:
    return sum(r.failures for r in h.rt.history_snapshot()
               if r.operation == h.op and r.backend is backend)


def test_failing_arm_falls_back_and_caller_gets_the_result_with_fake_gpu_arm(
        make_runtime) -> None:
    h = make_runtime({Backend.GPU: 50.0, Backend.SIMD: 300.0, Backend.SCALAR: 900.0},
                     kind="matrix", size=100_000)
    h.arms.failing = {Backend.GPU}
    result = h.call()
    assert result == (Backend.SIMD, (100_000,))  # the heuristic's GPU raised; SIMD answered
    assert h.arms.ran == [Backend.GPU, Backend.SIMD]
    assert _failures(h, Backend.GPU) == 1
    assert h.rt.fallback_counts() == {("fakeop", Backend.GPU, Backend.SIMD): 1}
    assert sum(h.rt.selection_counts().values()) == 1  # one call, counted once


def test_failing_arm_is_quarantined_until_back_off_passes_with_fake_gpu_arm(
        make_runtime) -> None:
    h = make_runtime({Backend.GPU: 50.0, Backend.SIMD: 300.0, Backend.SCALAR: 900.0},
                     kind="matrix", size=100_000)
    h.arms.failing = {Backend.GPU}
    h.call()
    assert h.arms.calls[Backend.GPU] == 1
    # quarantined for 1 s: never chosen meanwhile, whatever else happens
    for _ in range(200):
        assert h.call()[0] is not Backend.GPU
        h.clock.advance(0.004)  # 0.8 s in all
    assert h.arms.calls[Backend.GPU] == 1
    assert h.rt.decide(h.op, h.size).backend is not Backend.GPU
    # after the back-off the arm gets another chance (and fails again)
    h.clock.advance(0.3)
    for _ in range(50):
        h.call()
        if h.arms.calls[Backend.GPU] == 2:
            break
    assert h.arms.calls[Backend.GPU] == 2
    assert _failures(h, Backend.GPU) == 2
    # second consecutive failure: 2 s of quarantine (doubled)
    for _ in range(150):
        h.call()
        h.clock.advance(0.01)  # 1.5 s in all
    assert h.arms.calls[Backend.GPU] == 2
    h.clock.advance(0.6)
    for _ in range(50):
        h.call()
        if h.arms.calls[Backend.GPU] == 3:
            break
    assert h.arms.calls[Backend.GPU] == 3
    assert _failures(h, Backend.GPU) == 3


def test_recovered_arm_is_learned_again_after_quarantine_with_fake_gpu_arm(
        make_runtime) -> None:
    h = make_runtime({Backend.GPU: 50.0, Backend.SIMD: 300.0, Backend.SCALAR: 900.0},
                     kind="matrix", size=100_000)
    h.arms.failing = {Backend.GPU}
    h.call_tracked(100)
    h.arms.failing = set()  # the device came back
    h.clock.advance(2.0)
    runs = h.call_tracked(100)
    assert runs[-1] == (Backend.GPU, Reason.EXPLOIT)


def test_failing_committed_arm_falls_back_with_fake_gpu_arm(make_runtime) -> None:
    h = make_runtime({Backend.GPU: 150.0, Backend.SIMD: 300.0, Backend.SCALAR: 900.0},
                     kind="matrix", size=100_000)
    h.call_tracked(100)
    assert h.rt.decide(h.op, h.size).backend is Backend.GPU
    h.arms.failing = {Backend.GPU}  # e.g. out of device memory from now on
    gpu_runs = h.arms.calls[Backend.GPU]
    results = [h.call() for _ in range(100)]  # the fake clock stands still: < 1 s
    assert all(r[0] is not Backend.GPU for r in results)  # every caller got a result
    assert h.arms.calls[Backend.GPU] == gpu_runs + 1  # failed once, then sat out quarantine
    assert _failures(h, Backend.GPU) == 1
    later = h.call_tracked(100)
    assert {b for b, r in later if r is Reason.EXPLOIT} == {Backend.SIMD}  # next best took over


def test_every_arm_failing_raises_all_backends_failed_with_fake_gpu_arm(make_runtime) -> None:
    h = make_runtime({Backend.GPU: 50.0, Backend.SIMD: 300.0, Backend.SCALAR: 900.0},
                     kind="matrix", size=100_000)
    h.arms.failing = set(Backend)
    with pytest.raises(ar.AllBackendsFailedError) as info:
        h.call()
    err = info.value
    assert set(err.errors) == set(Backend)
    assert list(err.errors) == h.arms.ran  # in the order tried
    assert all(type(e).__name__ == "ArmFailure" for e in err.errors.values())
    assert all(b.value in str(e) for b, e in err.errors.items())
    assert err.__cause__ is err.errors[h.arms.ran[-1]]
    assert err.operation == "fakeop" and "fakeop" in str(err)
    assert all(b.value in str(err) for b in Backend)
    assert isinstance(err, ar.AdaptiveRuntimeError)
    assert sum(r.failures for r in h.rt.history_snapshot()) == 3


def test_input_that_fails_everywhere_does_not_quarantine_good_arms(make_runtime) -> None:
    h = make_runtime({Backend.SIMD: 300.0, Backend.SCALAR: 900.0})
    h.call_tracked(20)
    h.arms.failing = {Backend.SIMD, Backend.SCALAR}
    with pytest.raises(ar.AllBackendsFailedError):
        h.call()
    h.arms.failing = set()
    assert h.call()[0] is Backend.SIMD  # the bad input said nothing about the arms


# --------------------------------------------------------------------------- measurement gate


# The runtime's timer is read right before and right after the kernel of a timed call, and,
# for a committed key's call, once more when the call has been learned from (what learning
# cost sets the timing period).
READS_PER_EXPLORING_CALL = 2
READS_PER_TIMED_CALL = 3


def test_cold_key_is_timed_every_call(make_runtime) -> None:
    # cheap arms, each timed three times before committing: six exploring calls
    h = make_runtime({Backend.SIMD: 1.0, Backend.SCALAR: 2.0}, min_samples_per_arm=3)
    for n in range(1, 7):
        h.call()
        assert h.timer.reads == READS_PER_EXPLORING_CALL * n
        assert h.samples() == n


def test_converged_cheap_key_is_timed_one_in_n(make_runtime) -> None:
    h = make_runtime({Backend.SIMD: 1.0, Backend.SCALAR: 4.0})
    h.call_tracked(200)
    assert h.rt.decide(h.op, h.size).reason is Reason.EXPLOIT
    reads, samples = h.timer.reads, h.samples()
    calls = 6_400
    for _ in range(calls):
        h.call()
    timed = (h.timer.reads - reads) // READS_PER_TIMED_CALL
    assert h.samples() - samples == timed  # every timing is learned from
    # timing a 1 us call costs more than 0.5% of it: a small share of calls is timed, but some are
    assert 1 <= timed <= calls / 8
    assert sum(h.rt.selection_counts().values()) == 200 + calls


def test_exploring_calls_are_counted_once_each_however_often_counts_are_read(
        make_runtime) -> None:
    # (a key's timed calls are tallied on its entry and folded into the counters when read)
    h = make_runtime({Backend.SIMD: 1.0, Backend.SCALAR: 4.0}, op="unused", arms=())
    op = h.rt.register("counted", size=lambda n: n)
    op.add_implementation(Backend.SIMD, h.arms.kernel(Backend.SIMD))
    op.add_implementation(Backend.SCALAR, h.arms.kernel(Backend.SCALAR))
    ran: dict[Backend, int] = {}
    for n in range(1, 9):
        arm = h.rt.run("counted", 4096)[0]
        ran[arm] = ran.get(arm, 0) + 1
        counts = h.rt.selection_counts()
        assert sum(counts.values()) == n
        assert {b: sum(c for k, c in counts.items() if k.backend is b) for b in ran} == ran
    op.add_implementation(Backend.GPU, h.arms.kernel(Backend.GPU))  # the entry is retired
    assert sum(h.rt.selection_counts().values()) == 8
    h.rt.run("counted", 4096)
    assert sum(h.rt.selection_counts().values()) == 9


def test_key_whose_timing_is_noise_is_timed_every_call(make_runtime) -> None:
    # 1 ms calls: a timed call's warm cost (4 us) is under 0.5% of one
    h = make_runtime({Backend.SIMD: 1_000.0, Backend.SCALAR: 2_800.0})
    h.call_tracked(200)
    samples = h.samples()
    for _ in range(1_000):
        h.call()
    assert h.samples() - samples == 1_000


def _learning_costs(h, cost_us: float) -> None:
    """Make learning from a timed call take ``cost_us`` on the fake timer: the duration sink
    runs while the call is learned from (it stands for costly bookkeeping)."""
    pending = SimpleNamespace(append=lambda _timing: h.timer.advance_us(cost_us))
    attach_sinks(h.rt, spans=NO_SPANS, metrics=SimpleNamespace(recording=True, pending=pending))


def _timings_learned(h, calls: int) -> int:
    samples = h.samples()
    for _ in range(calls):
        h.call()
    return h.samples() - samples


def test_costly_learning_lengthens_the_timing_period(make_runtime) -> None:
    """Learning from a timed call that takes 10 us (cold caches between large calls, say):
    timing every 50 us call would cost 20%, so the key is timed 1-in-64 (the smallest power
    of two that keeps timing under 0.5%: 10 / (0.5% of 50) = 40 calls)."""
    h = make_runtime({Backend.SIMD: 50.0, Backend.SCALAR: 150.0})
    _learning_costs(h, 10.0)
    h.call_tracked(400)
    # (1-in-32 for the first few, while the cost estimate, an EWMA from 4 us, converges)
    assert 6_400 // 64 <= _timings_learned(h, 6_400) <= 6_400 // 64 + 4


def test_a_watched_slow_key_is_timed_by_its_cost_and_a_slowdown_at_the_next_call(
        make_runtime) -> None:
    """A 500 us call whose timing costs 50 us would be timed 1-in-32 by cost (under 0.5 % of
    the key's time): watched, it is timed 1-in-16 (``WATCHED_MAX_PERIOD``), not 1-in-4 as an
    unwatched slow call. When the committed arm slows 4x the very next call is timed, and the
    drift alarm comes within a few calls, not a few periods."""
    h = make_runtime({Backend.SIMD: 500.0, Backend.SCALAR: 1400.0})
    _learning_costs(h, 50.0)
    h.call_tracked(200)
    assert _timings_learned(h, 1_600) == 1_600 // WATCHED_MAX_PERIOD
    samples = h.samples()
    while h.samples() == samples:  # up to a timed call: the next 15 are not
        h.call()
    h.arms.latency_us[Backend.SIMD] = 2_000.0  # sustained, now slower than SCALAR
    samples = h.samples()
    h.call()  # untimed: watched, 4x its estimate
    assert h.samples() == samples
    h.call()  # timed because the call before it was slow
    assert h.samples() == samples + 1
    later = [h.call()[0] for _ in range(10)]
    assert later[-3:] == [Backend.SCALAR] * 3  # drift alarmed and SCALAR took over


def test_one_slow_watched_call_costs_one_timing_and_no_switch(make_runtime) -> None:
    """A single spike of a watched key (20x, once) has the next call timed, which reads the
    arm as it was: the key's period comes back and nothing switches."""
    h = make_runtime({Backend.SIMD: 500.0, Backend.SCALAR: 1400.0})
    _learning_costs(h, 50.0)
    h.call_tracked(200)
    _timings_learned(h, 64)
    h.arms.latency_us[Backend.SIMD] = 10_000.0
    samples = h.samples()
    h.call()
    h.arms.latency_us[Backend.SIMD] = 500.0
    ran = h.call_tracked(320)
    assert {arm for arm, _reason in ran} == {Backend.SIMD}
    assert h.samples() - samples <= 1 + 320 // WATCHED_MAX_PERIOD + 1


def test_an_untimed_call_under_the_watch_threshold_is_not_watched(make_runtime) -> None:
    """A key of 50 us calls runs its arm's own function on the fast path (no clock reads):
    slower than twice its estimate, it is still not timed before its period comes."""
    h = make_runtime({Backend.SIMD: 50.0, Backend.SCALAR: 150.0})
    _learning_costs(h, 10.0)
    h.call_tracked(400)
    h.arms.latency_us[Backend.SIMD] = 200.0
    samples = h.samples()
    for _ in range(8):
        h.call()
    assert h.samples() == samples


def _spans_recorded(h) -> list[object]:
    """Tracing on, every span record kept (the trace gate decides which come here)."""
    records: list[object] = []
    sink = SimpleNamespace(recording=True, dropped=0, submit=records.append,
                           submit_transition=records.append, submit_step=records.append,
                           timer=h.timer, flush=lambda _timeout_s: True)
    attach_sinks(h.rt, spans=sink)
    return records


def _longest_untimed_s(h, calls: int, calls_per_s: float) -> tuple[float, int]:
    """``calls`` calls at ``calls_per_s``: the longest time between two timed calls, and how
    many were timed."""
    longest, last, samples, timed = 0.0, 0.0, h.samples(), 0
    for i in range(1, calls + 1):
        h.clock.advance(1 / calls_per_s)
        h.call()
        if h.samples() != samples:
            samples, timed = h.samples(), timed + 1
            longest, last = max(longest, i / calls_per_s - last), i / calls_per_s
    return longest, timed


def test_while_tracing_a_key_is_timed_often_enough_for_its_interval_span(make_runtime) -> None:
    """A 0.5 us call is timed 1-in-1,024 (``max_measure_period``) by cost; at 200 calls/s
    that is every 5 s, too rare for an interval span every 8 s (``trace_key_interval_s``). While
    tracing, the key is timed at least every 1/8 of the interval (1 s: 1-in-128 here); called
    faster, its period grows back to the cost's; with tracing off nothing bounds it."""
    h = make_runtime({Backend.SIMD: 0.5, Backend.SCALAR: 5.0}, trace_key_interval_s=8.0)
    records = _spans_recorded(h)
    h.call_tracked(300)  # (at no call rate: the fake clock stands still)
    _longest_untimed_s(h, 1_024, 200.0)  # the key's rate is seen at its next timed call
    longest, _timed = _longest_untimed_s(h, 4_000, 200.0)
    assert longest <= 1.0
    assert records  # (the gate saw the timed calls: first calls, commitment at least)
    _longest, timed = _longest_untimed_s(h, 40_960, 5_000.0)  # 1 s covers 5,000 calls
    assert timed <= 40_960 // 1_024 + 4

    untraced = make_runtime({Backend.SIMD: 0.5, Backend.SCALAR: 5.0}, trace_key_interval_s=8.0)
    untraced.call_tracked(300)
    _longest_untimed_s(untraced, 2_048, 200.0)
    assert _longest_untimed_s(untraced, 4_096, 200.0)[1] <= 4_096 // 1_024 + 1


def test_slowdown_seen_in_a_sampled_timing_times_every_call(make_runtime) -> None:
    """A key timed 1-in-N whose committed arm's timing comes back slow is timed every call
    until the slowdown is settled: the switch comes a few calls after the first slow timing,
    not a few N."""
    h = make_runtime({Backend.SIMD: 50.0, Backend.SCALAR: 400.0})
    # learning costs 20 us: 20 / (0.5% of 50 us) = 80 -> SIMD is timed 1-in-128 once the cost
    # estimate (an EWMA over timed calls, from 4 us) has converged; 1-in-64 on the way
    _learning_costs(h, 20.0)
    h.call_tracked(300)
    assert 1 <= _timings_learned(h, 256) <= 256 // 64
    h.arms.latency_us[Backend.SIMD] = 1_000.0  # the committed arm slows 20x
    samples = h.samples()
    ran = []
    while h.samples() == samples:  # untimed calls until the first slow timing
        ran.append(h.call()[0])
    assert len(ran) <= 128
    later = [h.call()[0] for _ in range(12)]
    assert later[-4:] == [Backend.SCALAR] * 4  # drift alarmed and SCALAR took over


def test_max_measure_period_caps_the_gate(make_runtime) -> None:
    h = make_runtime({Backend.SIMD: 0.01, Backend.SCALAR: 4.0}, max_measure_period=4)
    h.call_tracked(100)
    samples = h.samples()
    for _ in range(4_000):
        h.call()
    # (counted as timings learned, not timer reads: a re-check reads the timer once less)
    timed = h.samples() - samples
    assert 4_000 / 4 <= timed <= 4_000 / 4 + 20


def test_learned_latencies_are_exact_with_fake_timer_and_fake_gpu_arm(make_runtime) -> None:
    h = make_runtime({Backend.GPU: 123.0, Backend.SIMD: 456.0, Backend.SCALAR: 789.0})
    h.call_tracked(30)
    rows = {r.backend: r.mean_us for r in h.rt.history_snapshot()}
    assert rows == {Backend.GPU: 123.0, Backend.SIMD: 456.0, Backend.SCALAR: 789.0}


def test_result_and_arguments_pass_through_unchanged(make_runtime) -> None:
    h = make_runtime({Backend.SIMD: 1.0})
    payload = object()
    assert h.rt.run(h.op, 10, payload) == (Backend.SIMD, (10, payload))


def test_size_of_errors_reach_the_caller(clock, timer) -> None:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(), builtin_ops=False,
                            devices=DeviceProbe(gpu=False), clock=clock, timer=timer)
    op = rt.register("sized", size=lambda n: n)
    op.add_implementation(Backend.SIMD, lambda n: n)
    with pytest.raises(TypeError, match="input_size"):
        rt.run("sized", 2.5)
    with pytest.raises(ValueError, match="input_size"):
        rt.run("sized", -3)


# --------------------------------------------------------------------------- placement, floors


def _placed_runtime(make_runtime, floor=None):
    """Fake arms of an operation called as ``run(op, n, where)``, ``where`` "host" or
    "device" (its on_device hook); the GPU arm's floor is ``floor(n, where)``."""
    h = make_runtime({Backend.GPU: 60.0, Backend.SIMD: 100.0, Backend.SCALAR: 400.0},
                     op="unused", arms=())
    op = h.rt.register("placed", size=lambda n, _where: n, kind="vector",
                       on_device=lambda _n, where: where == "device")
    for backend in (Backend.SIMD, Backend.SCALAR):
        op.add_implementation(backend, h.arms.kernel(backend))
    op.add_implementation(Backend.GPU, h.arms.kernel(Backend.GPU), floor_us=floor)
    return h


def _gpu_samples(h, operation: str) -> int:
    return sum(r.samples for r in h.rt.history_snapshot()
               if r.operation == operation and r.backend is Backend.GPU)


def test_an_arm_whose_floor_is_well_over_the_best_measured_time_is_not_tried(
        make_runtime) -> None:
    # the GPU arm's copies alone would take 500 us on a host call, none on a device call
    h = _placed_runtime(make_runtime,
                        floor=lambda _n, where: 500.0 if where == "host" else 0.0)
    for _ in range(100):
        assert h.rt.run("placed", 4096, "host")[0] is not Backend.GPU
    assert _gpu_samples(h, "placed") == 0
    decision = h.rt.decide("placed", 4096)
    assert decision.backend is Backend.SIMD and decision.floors_us == {Backend.GPU: 500.0}
    # inputs already on the device: learned as "placed@device", where the GPU arm wins
    runs = [h.rt.run("placed", 4096, "device")[0] for _ in range(100)]
    assert runs[-1] is Backend.GPU and _gpu_samples(h, "placed@device") >= 3
    assert h.rt.decide("placed@device", 4096).backend is Backend.GPU


def test_a_floor_under_the_measured_times_leaves_the_arm_in_the_running(make_runtime) -> None:
    h = _placed_runtime(make_runtime, floor=lambda _n, _where: 20.0)
    runs = [h.rt.run("placed", 4096, "host")[0] for _ in range(100)]
    assert runs[-1] is Backend.GPU  # 60 us, measured: the floor (20 us) ruled nothing out


def test_a_floor_that_cannot_be_worked_out_only_means_the_arm_is_tried(make_runtime) -> None:
    def broken(_n, _where):
        raise RuntimeError("no device to measure the bandwidth on (test double)")

    h = _placed_runtime(make_runtime, floor=broken)
    runs = [h.rt.run("placed", 4096, "host")[0] for _ in range(100)]
    assert runs[-1] is Backend.GPU and h.rt.decide("placed", 4096).floors_us == {}


def test_no_device_route_where_the_gpu_arm_cannot_run(make_runtime) -> None:
    h = make_runtime({Backend.SIMD: 100.0, Backend.SCALAR: 400.0}, op="unused", gpu=False)
    asked = []
    op = h.rt.register("placed", size=lambda n, _where: n,
                       on_device=lambda _n, where: asked.append(where) or True)
    for backend in (Backend.GPU, Backend.SIMD, Backend.SCALAR):
        op.add_implementation(backend, h.arms.kernel(backend))
    for _ in range(20):
        h.rt.run("placed", 4096, "device")
    assert asked == []  # never asked: every call is learned under "placed"
    assert {r.operation for r in h.rt.history_snapshot()} == {"placed"}


def test_an_arm_added_later_resets_the_device_route_too(make_runtime) -> None:
    h = make_runtime({Backend.GPU: 60.0, Backend.SIMD: 100.0, Backend.SCALAR: 40.0},
                     op="unused", arms=())
    op = h.rt.register("placed", size=lambda n, _where: n,
                       on_device=lambda _n, where: where == "device")
    op.add_implementation(Backend.GPU, h.arms.kernel(Backend.GPU))
    op.add_implementation(Backend.SIMD, h.arms.kernel(Backend.SIMD))
    for _ in range(30):
        h.rt.run("placed", 4096, "device")
    assert h.rt.decide("placed@device", 4096).backend is Backend.GPU
    # a GPU variant, the fastest here (it runs the SCALAR double's 40 us kernel)
    op.add_implementation(Backend.GPU, h.arms.kernel(Backend.SCALAR), name="fast")
    runs = [h.rt.run("placed", 4096, "device")[0] for _ in range(60)]
    assert runs[-1] is Backend.SCALAR
    assert {r.operation for r in h.rt.history_snapshot()} == {"placed@device"}


def test_inputs_on_the_device_never_run_a_host_arm(make_runtime) -> None:
    """The device route's candidates are the implementations that run on the device: a
    faster host arm is never tried there (it would copy the inputs to the host and drop their
    autograd graph), while host calls of the same operation choose among every arm."""
    h = make_runtime({Backend.GPU: 60.0, Backend.SIMD: 100.0, Backend.SCALAR: 40.0},
                     op="unused", arms=())
    op = h.rt.register("placed", size=lambda n, _where: n,
                       on_device=lambda _n, where: where == "device")
    for backend in (Backend.GPU, Backend.SIMD, Backend.SCALAR):
        op.add_implementation(backend, h.arms.kernel(backend))
    device_runs = {h.rt.run("placed", 4096, "device")[0] for _ in range(60)}
    host_runs = [h.rt.run("placed", 4096, "host")[0] for _ in range(60)]
    assert device_runs == {Backend.GPU}
    assert set(host_runs) == {Backend.GPU, Backend.SIMD, Backend.SCALAR}
    assert host_runs[-1] is Backend.SCALAR
