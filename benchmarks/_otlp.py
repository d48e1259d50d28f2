"""The project's loopback OTLP receiver in a child process, and a local SDK pipeline to it.

The receiver (``tests/integration/otlp_receiver.py``) runs in a child process, as a collector
would: its decoding must not take the GIL from the loop being measured. A :class:`Pipeline` is
a local ``TracerProvider`` exporting to it; runtimes are attached with
``ar.telemetry.instrument`` (no global OpenTelemetry state is touched).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import threading
import time
from typing import Any

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import adaptive_runtime as ar
from adaptive_runtime.telemetry.spans import SpanRecorder

__all__ = ["Pipeline", "Receiver", "background_cpu_s"]

RECEIVER_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests",
                            "integration")


def _serve_receiver(conn: Any, receiver_dir: str) -> None:
    """Child process: run the OTLP receiver and answer the parent's questions over a pipe."""
    sys.path.insert(0, receiver_dir)
    from otlp_receiver import OtlpReceiver

    receiver = OtlpReceiver()
    receiver.start()
    conn.send(receiver.grpc_endpoint)
    while True:
        command = conn.recv()
        if command == "spans":
            conn.send([(s.name, dict(s.attributes), s.start_time_unix_nano)
                       for s in receiver.spans()])
        elif command == "count":
            conn.send(len(receiver.spans()))
        elif command == "clear":
            receiver.clear()
            conn.send(None)
        else:
            receiver.stop()
            conn.send(None)
            return


class Receiver:
    """The project's loopback OTLP receiver, in a child process (see the module docstring)."""

    def __init__(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=_serve_receiver, args=(child, RECEIVER_DIR),
                                    daemon=True)
        self._process.start()
        self.pid = self._process.pid
        self.grpc_endpoint: str = self._recv()

    def _recv(self) -> Any:
        if not self._conn.poll(60.0):
            raise RuntimeError(f"the OTLP receiver process (exit code "
                               f"{self._process.exitcode}) did not answer within 60 s")
        return self._conn.recv()

    def _ask(self, command: str) -> Any:
        self._conn.send(command)
        return self._recv()

    def spans(self) -> list[tuple[str, dict[str, Any], int]]:
        """(name, attributes, start_time_unix_nano) of every span received."""
        return self._ask("spans")

    def count(self) -> int:
        return self._ask("count")

    def clear(self) -> None:
        self._ask("clear")

    def stop(self) -> None:
        self._ask("stop")
        self._process.join(5)


class Pipeline:
    """A local SDK provider: BatchSpanProcessor → OTLP/gRPC exporter → the receiver."""

    def __init__(self, endpoint: str, service_name: str = "tracing-overhead-benchmark",
                 **batch: Any) -> None:
        self.provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service_name}),
                                       shutdown_on_exit=False)
        exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True)
        self.provider.add_span_processor(BatchSpanProcessor(exporter, **batch))
        self.meter_provider = MeterProvider(shutdown_on_exit=False)
        self.recorders: list[tuple[ar.AdaptiveRuntime, SpanRecorder]] = []

    def attach(self, rt: ar.AdaptiveRuntime) -> SpanRecorder:
        """Export ``rt``'s spans here (its metrics into a meter provider that no reader
        collects: this benchmark is about tracing)."""
        ar.telemetry.instrument(rt, tracer_provider=self.provider,
                                meter_provider=self.meter_provider)
        recorder = rt._parts.spans
        assert recorder.recording
        self.recorders.append((rt, recorder))
        return recorder

    def flush(self) -> None:
        """Every admitted call's spans made, handed to the exporter and received."""
        for rt, _recorder in self.recorders:
            assert rt.flush_telemetry(30.0), "span recorder did not drain"
        assert self.provider.force_flush(30_000), "BatchSpanProcessor did not flush"

    def shutdown(self) -> None:
        self.flush()
        for _rt, recorder in self.recorders:
            recorder.shutdown()
        self.provider.shutdown()
        self.meter_provider.shutdown()


def background_cpu_s() -> float:
    """CPU seconds used so far by every Python thread but this one (span worker, BSP)."""
    total = 0.0
    for thread in threading.enumerate():
        if thread is threading.current_thread() or thread.ident is None:
            continue
        with contextlib.suppress(OSError, ProcessLookupError):  # (it ended meanwhile)
            total += time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    return total
