"""A forked child never waits for a lock a thread of its parent held at the fork.

``fork()`` copies only the forking thread: a lock another thread held (the span worker, the
metric reader running our callbacks, the history saver, a Prometheus scrape) would stay held
in the child forever. Each case here holds one such lock on a thread of the parent across a
real ``os.fork()``, then has the child do what takes that lock. A child that hangs is killed
by its own ``SIGALRM`` (a deadlock guard, not a timing) and fails the test.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from internals import dispatcher_lock, registry_lock, telemetry_lock
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import adaptive_runtime as ar
from adaptive_runtime.history import fingerprint
from adaptive_runtime.kernels import _gpu
from adaptive_runtime.offline.report.otlp_files import decode_requests
from adaptive_runtime.operations import DeviceProbe
from adaptive_runtime.telemetry import instrumentation
from adaptive_runtime.telemetry import metrics as metrics_module
from adaptive_runtime.telemetry.metrics import RuntimeMetrics
from adaptive_runtime_sdk import handle as telemetry_handle
from adaptive_runtime_sdk.exporters import GuardedSpanExporter
from adaptive_runtime_sdk.otlp_json_file import OtlpJsonFileSpanExporter

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork (POSIX)")

CHILD_ALARM_S = 20  # a child still running after this is deadlocked: SIGALRM ends it
WAIT_S = 60.0


def _runtime() -> ar.AdaptiveRuntime:
    return ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False), builtin_ops=False,
                              devices=DeviceProbe(gpu=False))


@contextlib.contextmanager
def _held_by_a_thread(lock: Any) -> Iterator[None]:
    """``lock`` held by another thread of this process for the duration."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            release.wait(WAIT_S)

    thread = threading.Thread(target=hold, name="lock-holder", daemon=True)
    thread.start()
    assert held.wait(WAIT_S)
    try:
        yield
    finally:
        release.set()
        thread.join(WAIT_S)


def _fork(child: Callable[[], None]) -> int:
    """Run ``child`` in a forked child; its exit code (0: it returned)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # (fork with threads, 3.12+)
        # (JAX warns at fork when an earlier test started its threads: not this test's)
        warnings.simplefilter("ignore", RuntimeWarning)
        pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 70
        try:
            signal.alarm(CHILD_ALARM_S)
            child()
            code = 0
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            os._exit(code)
    deadline = time.monotonic() + WAIT_S
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:  # (the alarm failed too: do not hang the suite)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return -signal.SIGKILL
        time.sleep(0.01)


def _cases(tmp_path: Path) -> dict[str, tuple[Callable[[], Any], Callable[[], None]]]:
    """name -> (the lock a parent's thread holds, what the child does that takes it)."""
    rt = _runtime()
    metrics = RuntimeMetrics(rt, meter_provider=MeterProvider())
    exporter = OtlpJsonFileSpanExporter(tmp_path / "traces.jsonl")
    guarded = GuardedSpanExporter(exporter)
    probe = DeviceProbe()  # (not probed yet: the first question takes its lock)

    def learn() -> None:
        rt.record_performance("dot", 1000, "simd", 10.0)
        assert rt.history_snapshot()

    return {
        # the history saver and the metric callbacks read the history under it
        "dispatcher": (lambda: dispatcher_lock(rt), learn),
        "registry": (lambda: registry_lock(rt), lambda: rt.register("late", size=len)),
        # decide() on the metric reader's thread may probe the devices
        "device probe": (lambda: probe._lock, lambda: probe.gpu_available),
        "gpu device": (lambda: _gpu._lock, lambda: _gpu.set_device(None)),
        # the history saver's save fingerprints the machine
        "fingerprint": (lambda: fingerprint._lock, fingerprint.hardware_fingerprint),
        "runtime telemetry": (lambda: telemetry_lock(rt),
                              lambda: ar.telemetry.uninstrument(rt, timeout_s=1.0)),
        "instrumentation": (lambda: instrumentation._lock, _runtime),
        "configure": (lambda: telemetry_handle._lock, lambda: ar.telemetry.shutdown(1.0)),
        # the metric reader (or a Prometheus scrape) runs the hub's callbacks under them
        "metrics hub": (lambda: metrics._hub._lock, metrics.close),
        "metrics hubs": (lambda: metrics_module._hubs_lock,
                         lambda: RuntimeMetrics(rt, meter_provider=MeterProvider()).close()),
        # the metric reader's export turns off an endpoint that refuses metrics
        "exporter guard": (lambda: guarded._lock, lambda: guarded.replace(None)),
        # the SDK's export thread writes the span file
        "span file": (lambda: exporter._writer._lock, lambda: exporter.force_flush()),
    }


CASES = ("dispatcher", "registry", "device probe", "gpu device", "fingerprint",
         "runtime telemetry", "instrumentation", "configure", "metrics hub", "metrics hubs",
         "exporter guard", "span file")


@pytest.mark.parametrize("case", CASES)
def test_a_forked_child_does_not_wait_for_a_lock_its_parent_held(tmp_path: Path,
                                                                 case: str) -> None:
    lock, child = _cases(tmp_path)[case]
    with _held_by_a_thread(lock()):
        code = _fork(child)
    assert code == 0, f"the child exited with {code} ({-signal.SIGALRM}: it hung)"


def test_a_forked_child_reports_no_metrics_of_its_parents_runtimes() -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    rt = _runtime()
    metrics = RuntimeMetrics(rt, meter_provider=provider)
    try:
        for _ in range(5):
            rt.select("dot", 1000)

        def selections() -> list[Any]:
            data = reader.get_metrics_data()
            return [m for rm in (data.resource_metrics if data else ())
                    for sm in rm.scope_metrics for m in sm.metrics
                    if m.name == "adaptive.selection" and m.data.data_points]

        def child() -> None:
            rt.select("dot", 1000)
            found = selections()
            assert not found, f"a child reported its copy of the parent's counts: {found}"

        assert _fork(child) == 0
        assert selections(), "the parent reports its runtime's selections"
    finally:
        metrics.close()
        provider.shutdown()


def _spans(count: int) -> list[ReadableSpan]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("fork-test")
    for i in range(count):
        with tracer.start_as_current_span(f"span {i}", attributes={"i": i, "pad": "x" * 64}):
            pass
    provider.shutdown()
    return list(exporter.get_finished_spans())


def test_a_forked_child_and_its_parent_append_whole_lines_to_one_span_file(
        tmp_path: Path) -> None:
    path = tmp_path / "traces.jsonl"
    exporter = OtlpJsonFileSpanExporter(path)
    batch = _spans(200)  # lines of ~100 KiB: far over any I/O buffer
    # The child exports spans of its own, as a child does: spans the parent's thread was
    # encoding at the fork would come with that thread's hold on their event list's lock (the
    # SDK's BoundedList), and the child's encoding of them would wait forever (1 run in 10).
    child_batch = _spans(200)
    exports = 20

    def write(spans: list[ReadableSpan]) -> None:
        for _ in range(exports):
            assert exporter.export(spans).name == "SUCCESS"

    try:
        exporter.export(batch[:1])  # the parent's file is open before the fork
        writer = threading.Thread(target=write, args=(batch,), daemon=True)
        writer.start()  # the parent goes on writing while the child does
        code = _fork(lambda: write(child_batch))
        writer.join(WAIT_S)
        assert code == 0
        # (raises on a line that is not whole)
        requests = decode_requests(path, ExportTraceServiceRequest)
        assert len(requests) == 1 + 2 * exports
        assert sorted(len(r.resource_spans[0].scope_spans[0].spans) for r in requests) == [
            1, *[len(batch)] * (2 * exports)]
    finally:
        exporter.shutdown()


def test_a_forked_child_never_rotates_its_parents_span_file(tmp_path: Path) -> None:
    path = tmp_path / "traces.jsonl"
    exporter = OtlpJsonFileSpanExporter(path, max_bytes=1)  # the parent rotates every line
    one = _spans(1)
    try:
        exporter.export(one)

        def child() -> None:
            for _ in range(3):
                assert exporter.export(one).name == "SUCCESS"

        assert _fork(child) == 0
        assert not exporter.backup_path.exists(), "the child moved the parent's file aside"
        assert len(decode_requests(path, ExportTraceServiceRequest)) == 4
        exporter.export(one)  # the parent still rotates its own file
        assert exporter.backup_path.exists()
        assert len(decode_requests(path, ExportTraceServiceRequest)) == 1
    finally:
        exporter.shutdown()
