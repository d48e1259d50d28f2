"""Telemetry faults: the collector down from the start, killed mid-run, slow, refusing, flapping.

Each test runs a real program (``ar.telemetry.configure()`` from OTEL_* variables, real numpy
calls on a real runtime) in a fresh interpreter against the real OTLP receiver of
``tests/integration/otlp_receiver.py`` in this process, over gRPC and HTTP/protobuf. The
program runs in phases; between two phases it flushes, reports ``ar.telemetry.stats()`` and
waits while the test changes the receiver (stops it, restarts it on the same ports, makes it
slow or refuse). Asserted, for every fault:

- nothing raises into the caller (the program completes, no traceback);
- every admitted span is accounted for exactly: admitted == exported + counted drops (the
  program ends with ``ar.telemetry.shutdown()``: nothing pending), and the receiver holds
  exactly the spans counted as exported;
- the spans admitted while the receiver was up all arrive (counted per phase at the
  receiver);
- exports never run on the calling thread: the program records the thread of every span and
  metric export, and the main thread is never one of them.

How long the loop takes under each fault, against tracing off and against the plain SDK
batch processor, is measured by ``benchmarks/telemetry_faults.py`` (no speed in tests).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from otlp_receiver import OtlpReceiver

from adaptive_runtime_sdk.providers import GRPC_RECONNECT

CALLS_PER_PHASE = 300

# The program: phases of calls; after each, flush and report; then wait for the test.
PROGRAM = r'''
import json, sys, threading
import numpy as np
import adaptive_runtime as ar
from adaptive_runtime_sdk import exporters

export_threads = set()
for cls in (exporters.GuardedSpanExporter, exporters.GuardedMetricExporter):
    original = cls.export
    def export(self, *args, _original=original, **kwargs):
        export_threads.add(threading.current_thread().name)
        return _original(self, *args, **kwargs)
    cls.export = export

tel = ar.telemetry.configure(service_name="faults", metrics_interval_s=0.5)
rt = ar.AdaptiveRuntime()
phases = int(sys.argv[1]); calls = int(sys.argv[2])

def report(tag):
    rt.flush_telemetry()
    s = ar.telemetry.stats()
    print("STATS " + json.dumps({"tag": tag, "admitted": s.spans_admitted,
                                 "exported": s.spans_exported, "dropped": s.spans_dropped,
                                 "by_reason": dict(s.dropped), "pending": s.spans_pending,
                                 "elsewhere": s.spans_elsewhere,
                                 "metric_exports": s.metric_exports,
                                 "metric_exports_failed": s.metric_exports_failed,
                                 "threads": sorted(export_threads)}), flush=True)

arrays = [np.ones(64 << k) for k in range(8)]
for phase in range(phases):
    # an operation of its own per phase: its first calls and explorations are traced
    op = rt.register(f"scale{phase}", size=lambda x: x.size, kind="vector")
    op.add_implementation("simd", lambda x: x * 2.0)
    op.add_implementation("scalar", lambda x: x + x)
    for i in range(calls):
        rt.run(f"scale{phase}", arrays[i % 8])
    # let what this phase admitted be exported (or fail) before the receiver changes
    rt.flush_telemetry()
    tel.tracer_provider.force_flush(5_000)
    report(f"phase{phase}")
    sys.stdin.readline()
ar.telemetry.shutdown()
report("end")
'''


class Program:
    """The program above, run phase by phase."""

    def __init__(self, receiver: OtlpReceiver, protocol: str, phases: int, cwd: Path) -> None:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("OTEL_", "ADAPTIVE_RUNTIME_"))}
        endpoint = receiver.grpc_endpoint if protocol == "grpc" else receiver.http_endpoint
        env.update(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_EXPORTER_OTLP_PROTOCOL=protocol,
                   OTEL_EXPORTER_OTLP_TIMEOUT="1", OTEL_BSP_SCHEDULE_DELAY="100",
                   ADAPTIVE_RUNTIME_SHUTDOWN_TIMEOUT_S="2", PYTHONDONTWRITEBYTECODE="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", PROGRAM, str(phases), str(CALLS_PER_PHASE)], cwd=cwd,
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)

    def phase(self) -> dict[str, Any]:
        """The stats the program reported at the end of its next phase (it then waits)."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("STATS "):
                return json.loads(line[6:])
        raise AssertionError(f"the program ended early:\n{self._stderr()}")

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()

    def finish(self) -> tuple[dict[str, Any], str]:
        self.go()
        end = self.phase()
        assert self.proc.wait(timeout=60) == 0, self._stderr()
        return end, self._stderr()

    def _stderr(self) -> str:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        return self.proc.stderr.read() if self.proc.stderr else ""

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def _check_accounting(end: dict[str, Any], receiver: OtlpReceiver, stderr: str) -> None:
    assert "Traceback" not in stderr, stderr
    assert end["pending"] == 0 and end["elsewhere"] == 0, end
    assert end["admitted"] == end["exported"] + end["dropped"], end
    assert len(receiver.spans()) == end["exported"], (len(receiver.spans()), end)
    assert "MainThread" not in end["threads"], end["threads"]


# (fault, phases, what the test does after each phase but the last)
def _down(receiver: OtlpReceiver, phase: int) -> None:
    pass  # never started


def _killed(receiver: OtlpReceiver, phase: int) -> None:
    receiver.stop()  # after the first phase, for good


def _slow(receiver: OtlpReceiver, phase: int) -> None:
    pass  # slow from the start (each export answered after 0.3 s: within the timeout)


def _refusing(receiver: OtlpReceiver, phase: int) -> None:
    receiver.fail_with = grpc.StatusCode.UNAVAILABLE if phase == 0 else None


def _flapping(receiver: OtlpReceiver, phase: int) -> None:
    if phase == 0:
        receiver.stop()
    else:
        receiver.start()  # the same ports again
        # A gRPC channel that failed dials again only after its reconnect back-off, which the
        # runtime caps at 2 s (providers.GRPC_RECONNECT; gRPC's own default grows to 120 s): from
        # then on the collector is up as the program sees it.
        time.sleep(max(ms for _, ms in GRPC_RECONNECT) / 1000 + 0.5)


FAULTS = {"down": (_down, 2), "killed": (_killed, 2), "slow": (_slow, 2),
          "refusing": (_refusing, 3), "flapping": (_flapping, 3)}


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
@pytest.mark.parametrize("fault", list(FAULTS))
def test_telemetry_fault(reliability, tmp_path: Path, fault: str, protocol: str) -> None:
    change, phases = FAULTS[fault]
    receiver = OtlpReceiver(delay_s=0.3 if fault == "slow" else 0.0)
    receiver.start()
    if fault == "down":
        receiver.stop()  # bound once (its ports known), down before the program starts
    program = Program(receiver, protocol, phases, tmp_path)
    try:
        reports = []
        up_phases: list[tuple[int, int]] = []  # (spans admitted in it, spans it delivered)
        for phase in range(phases):
            received_before = len(receiver.spans())
            report = program.phase()
            admitted = report["admitted"] - (reports[-1]["admitted"] if reports else 0)
            if receiver.running and receiver.fail_with is None:
                up_phases.append((admitted, len(receiver.spans()) - received_before))
            reports.append(report)
            if phase < phases - 1:
                change(receiver, phase)
                program.go()
        end, stderr = program.finish()
    finally:
        program.close()
        receiver.stop()
    _check_accounting(end, receiver, stderr)
    # spans admitted while the receiver was up (and answering) all arrived
    for admitted, delivered in up_phases:
        assert delivered == admitted, (fault, up_phases, reports)
    if fault in ("down", "killed", "refusing", "flapping"):
        assert end["dropped"] > 0, end  # the fault lost spans, and they were counted
    if fault == "slow":
        assert end["dropped"] == 0, end
    reliability.record(
        load=f"collector {fault} ({protocol}), {phases} x {CALLS_PER_PHASE} calls",
        spans_admitted=end["admitted"], spans_exported=end["exported"],
        spans_dropped=end["dropped"],
        dropped_by=", ".join(f"{k} {v}" for k, v in end["by_reason"].items() if v) or "none",
        spans_received=len(receiver.spans()))
