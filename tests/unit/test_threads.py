"""One runtime, many threads: no exception, no call lost or counted twice."""

from __future__ import annotations

import sys
import threading

import pytest

import adaptive_runtime as ar
from adaptive_runtime.operations import DeviceProbe

Backend = ar.Backend
THREADS = 8
CALLS = 20_000


@pytest.fixture(autouse=True)
def _frequent_thread_switches():
    # Switch threads far more often than the default 5 ms, so interleavings that a real
    # multi-threaded loop would hit eventually show up within one test run.
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(previous)


def _hammer(rt: ar.AdaptiveRuntime, sizes: tuple[int, ...]) -> list[BaseException]:
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def work(seed: int) -> None:
        try:
            start.wait()
            run = rt.run
            for i in range(CALLS):
                assert run("op", sizes[(i + seed) % len(sizes)]) is not None
        except BaseException as exc:  # collected and reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def _runtime(**config) -> ar.AdaptiveRuntime:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(**config), builtin_ops=False,
                            devices=DeviceProbe(gpu=False))
    op = rt.register("op", size=lambda n: n, kind="vector")
    op.add_implementation(Backend.SIMD, lambda n: n + 1)
    op.add_implementation(Backend.SCALAR, lambda n: n + 1)
    return rt


def test_8_threads_x_20000_calls_are_all_counted_exactly_once() -> None:
    rt = _runtime()
    errors = _hammer(rt, (64, 5_000, 70_000))
    assert errors == []
    assert sum(rt.selection_counts().values()) == THREADS * CALLS


def test_8_threads_x_20000_timed_calls_are_all_counted_exactly_once() -> None:
    # max_measure_period=1: every call is timed and takes the locked path, so tickets taken by
    # racing threads reach the lock in any order.
    rt = _runtime(max_measure_period=1)
    errors = _hammer(rt, (64, 5_000))
    assert errors == []
    assert sum(rt.selection_counts().values()) == THREADS * CALLS
    assert sum(r.samples for r in rt.history_snapshot()) == THREADS * CALLS


def test_threads_calling_with_tracing_off_and_history_reset_do_not_fail() -> None:
    rt = _runtime(tracing=False)
    stop = threading.Event()

    def reset_now_and_then() -> None:
        while not stop.is_set():
            rt.reset_history()
            rt.selection_counts()
            stop.wait(0.001)

    resetter = threading.Thread(target=reset_now_and_then)
    resetter.start()
    try:
        errors = _hammer(rt, (64, 5_000, 70_000))
    finally:
        stop.set()
        resetter.join()
    assert errors == []
    assert sum(rt.selection_counts().values()) == THREADS * CALLS
