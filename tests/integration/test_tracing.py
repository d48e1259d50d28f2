"""Spans end to end: a real runtime, the real SDK, real OTLP exporters into a real OTLP receiver.

No global provider is ever set here: each test builds its own ``TracerProvider`` (shut down at
teardown) and attaches a runtime to it with :func:`export_into`, which is
``ar.telemetry.instrument(rt, tracer_provider=...)`` (metrics into a no-op provider), or, where a
test needs what ``instrument`` does not offer (a tiny span buffer, a recorder although
``config.tracing`` is off), with a recorder made by hand
(``internals.attach_span_recorder``). (Tests of ``ar.telemetry.configure()``, which does set
the global providers, live in ``test_configure.py`` and run in subprocesses.)

Time: ``clock`` (the ``FakeClock`` fixture of ``tests/conftest.py``) drives hot-path windows and
span budgets where a test needs them deterministic; the kernel timer is always the real one, so
span timestamps are real.
"""

from __future__ import annotations

import io
import itertools
import math
import os
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from internals import attach_span_recorder, span_worker_thread
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otlp_receiver import OtlpReceiver, ReceivedSpan

import adaptive_runtime as ar
from adaptive_runtime.keys import reference_size
from adaptive_runtime.offline.report import decision_table, from_telemetry, make_console
from adaptive_runtime.operations import DeviceProbe
from adaptive_runtime.telemetry.spans import SpanRecorder
from adaptive_runtime_sdk.otlp_json_file import OtlpJsonFileSpanExporter

Backend = ar.Backend
SIMD, SCALAR = Backend.SIMD, Backend.SCALAR
REASONS = {r.value for r in ar.Reason}
SAMPLING_REASONS = {"decision", "commit", "first_call", "interval", "error", "slow", "sampled"}

SELECT_ATTRIBUTES = {
    "adaptive.operation": str,
    "adaptive.input_size": int,
    "adaptive.size_bucket": int,
    "adaptive.backend": str,
    "adaptive.decision": str,
    "adaptive.has_history": bool,
    "adaptive.confidence": float,
    "adaptive.samples": int,
    "adaptive.sampling.reason": str,
    "adaptive.sampling.weight": float,
}
EXECUTE_ATTRIBUTES = {
    "adaptive.operation": str,
    "adaptive.backend": str,
    "adaptive.duration_us": float,
}
ESTIMATE_PREFIX = "adaptive.estimate_us."
TIMINGS_PREFIX = "adaptive.timings."
STDEV_PREFIX = "adaptive.stdev_us."

# No span budget: the token buckets lifted (spans_per_sec=inf).
NO_SPAN_BUDGET = {"spans_per_sec": math.inf}
# Every admitted call exported: no sampling (each timed call is "slow"), every call timed,
# no span budget.
EXPORT_ALL = ar.RuntimeConfig(sampling_threshold_us=0.0, max_measure_period=1,
                              **NO_SPAN_BUDGET)


class ArmBroken(RuntimeError):
    """What a broken test arm raises."""


# ---------------------------------------------------------------------------- wiring


def span_recorder(rt: ar.AdaptiveRuntime) -> SpanRecorder:
    """The span recorder ``rt`` hands its calls to now (its span sink: ``rt.step_hooks()``)."""
    sink, _gate = rt.step_hooks()
    assert isinstance(sink, SpanRecorder), f"no span recorder attached: {sink!r}"
    return sink


def export_into(rt: ar.AdaptiveRuntime, provider: TracerProvider) -> SpanRecorder:
    """Export ``rt``'s spans into ``provider`` (never the global one), its metrics into a no-op
    provider; the span recorder it now has. ``ar.telemetry.uninstrument(rt)`` stops it."""
    ar.telemetry.instrument(rt, tracer_provider=provider, meter_provider=NoOpMeterProvider())
    return span_recorder(rt)


def make_runtime(config: ar.RuntimeConfig | None = None, *,
                 clock: Callable[[], float] | None = None) -> ar.AdaptiveRuntime:
    kwargs: dict[str, Any] = {"clock": clock} if clock is not None else {}
    return ar.AdaptiveRuntime(config or ar.RuntimeConfig(), builtin_ops=False,
                              devices=DeviceProbe(gpu=False), **kwargs)


def two_arms(rt: ar.AdaptiveRuntime, name: str = "scale", *,
             simd: Callable[..., Any] | None = None,
             scalar: Callable[..., Any] | None = None) -> ar.Operation:
    """Register ``name`` (size = first argument) with a SIMD and a SCALAR arm; by default
    each returns ``(arm name, size)`` so a caller can see which arm ran."""
    op = rt.register(name, size=lambda n, *_rest: n, kind="vector")
    op.add_implementation(SIMD, simd or (lambda n, *_rest: ("simd", n)))
    op.add_implementation(SCALAR, scalar or (lambda n, *_rest: ("scalar", n)))
    return op


class Tracing:
    """A local TracerProvider exporting over real OTLP to the receiver, and the runtimes
    exporting into it."""

    def __init__(self, receiver: OtlpReceiver, *, transport: str = "grpc",
                 timeout_s: float = 5.0) -> None:
        self.receiver = receiver
        if transport == "grpc":
            exporter: SpanExporter = GrpcSpanExporter(endpoint=receiver.grpc_endpoint,
                                                      insecure=True, timeout=timeout_s)
        else:
            exporter = HttpSpanExporter(endpoint=receiver.http_traces_url, timeout=timeout_s)
        self.provider = TracerProvider(
            resource=Resource.create({"service.name": "test-tracing"}), shutdown_on_exit=False)
        # a queue large enough that the SDK never drops a span a test counts
        self.provider.add_span_processor(BatchSpanProcessor(
            exporter, max_queue_size=1 << 16, schedule_delay_millis=50))
        self.tracer = self.provider.get_tracer("tests.integration.test_tracing")
        self.runtimes: list[ar.AdaptiveRuntime] = []

    def attach(self, rt: ar.AdaptiveRuntime) -> SpanRecorder:
        """Export ``rt``'s spans here (see :func:`export_into`); its span recorder."""
        recorder = export_into(rt, self.provider)
        self.runtimes.append(rt)
        return recorder

    def attach_recorder(self, rt: ar.AdaptiveRuntime) -> SpanRecorder:
        """Export ``rt``'s spans here through a span recorder made by hand
        (:func:`internals.attach_span_recorder`): attached whatever ``config.tracing``
        says."""
        recorder = attach_span_recorder(rt, self.provider)
        self.runtimes.append(rt)
        return recorder

    def flush(self) -> list[ReceivedSpan]:
        """Every admitted call made into spans and exported; what the receiver holds."""
        for rt in self.runtimes:
            assert rt.flush_telemetry(10.0), "the span recorder did not drain in 10 s"
        assert self.provider.force_flush(10_000), "the SDK did not export in 10 s"
        return self.receiver.spans()

    def close(self) -> None:
        for rt in self.runtimes:
            ar.telemetry.uninstrument(rt, timeout_s=5.0)
        self.provider.shutdown()


@pytest.fixture
def tracing(otlp_receiver: OtlpReceiver) -> Iterator[Tracing]:
    t = Tracing(otlp_receiver)
    try:
        yield t
    finally:
        t.close()


def spans_of(spans: Sequence[ReceivedSpan], kind: str, op: str = "scale") -> list[ReceivedSpan]:
    return sorted((s for s in spans if s.name == f"adaptive.{kind} {op}"),
                  key=lambda s: s.start_time_unix_nano)


def pair_up(spans: Sequence[ReceivedSpan],
            op: str = "scale") -> list[tuple[ReceivedSpan, ReceivedSpan]]:
    """(select, execute) pairs of calls made with no active span: execute is select's child."""
    executes = {s.parent_span_id: s for s in spans_of(spans, "execute", op)}
    pairs = []
    for select in spans_of(spans, "select", op):
        execute = executes.get(select.span_id)
        assert execute is not None, f"select span {select.span_id} has no execute child"
        pairs.append((select, execute))
    assert len(pairs) == len(executes), "an execute span is not the child of a select span"
    return pairs


def busy_wait_ns(duration_ns: int) -> None:
    end = time.perf_counter_ns() + duration_ns
    while time.perf_counter_ns() < end:
        pass


# ---------------------------------------------------------------------------- 1. attributes


def test_select_and_execute_spans_carry_every_contract_attribute(tracing: Tracing) -> None:
    # (three timings of each arm before committing: six exploring calls, every one traced)
    rt = make_runtime(ar.RuntimeConfig(min_samples_per_arm=3))
    two_arms(rt)
    tracing.attach(rt)
    for _ in range(40):
        assert rt.run("scale", 4096)[1] == 4096
    spans = tracing.flush()
    pairs = pair_up(spans)
    # Every call that was not a plain exploit is traced, and the commitment after them. (How
    # many there are varies: the arms cost nothing, their timings are noise, and an arm that
    # reads 3x behind after two timings, or 6x after one, is owed no more.)
    explored = [s for s, _e in pairs if s.attributes["adaptive.decision"] != "exploit"]
    made = sum(n for k, n in rt.selection_counts().items() if k.reason is not ar.Reason.EXPLOIT)
    assert len(explored) == made >= 3, "the first call and the exploration are all traced"
    assert any(s.attributes.get("adaptive.commit") is True for s, _e in pairs)

    for select, execute in pairs:
        for name, kind in SELECT_ATTRIBUTES.items():
            assert name in select.attributes, f"select span lacks {name}: {select.attributes}"
            assert isinstance(select.attributes[name], kind), (name, select.attributes[name])
        for name, kind in EXECUTE_ATTRIBUTES.items():
            assert name in execute.attributes, f"execute span lacks {name}: {execute.attributes}"
            assert isinstance(execute.attributes[name], kind), (name, execute.attributes[name])
        attrs = select.attributes
        assert attrs["adaptive.operation"] == "scale"
        assert attrs["adaptive.input_size"] == 4096
        assert attrs["adaptive.size_bucket"] == ar.size_bucket(4096)
        assert attrs["adaptive.backend"] in {"simd", "scalar"}
        assert attrs["adaptive.decision"] in REASONS
        assert 0.0 <= attrs["adaptive.confidence"] <= 1.0
        assert attrs["adaptive.samples"] >= 0
        assert attrs["adaptive.sampling.reason"] in SAMPLING_REASONS
        assert attrs["adaptive.sampling.weight"] >= 1.0
        estimates = {k[len(ESTIMATE_PREFIX):]: v for k, v in attrs.items()
                     if k.startswith(ESTIMATE_PREFIX)}
        assert set(estimates) <= {"simd", "scalar"}, estimates
        assert all(isinstance(v, float) and v >= 0 for v in estimates.values()), estimates
        assert attrs["adaptive.has_history"] == bool(estimates)
        # each estimate with the timings it stands on, and their spread from two timings on
        timings = {k[len(TIMINGS_PREFIX):]: v for k, v in attrs.items()
                   if k.startswith(TIMINGS_PREFIX)}
        stdevs = {k[len(STDEV_PREFIX):]: v for k, v in attrs.items()
                  if k.startswith(STDEV_PREFIX)}
        assert set(timings) == set(estimates), attrs
        assert all(isinstance(v, int) and v >= 1 for v in timings.values()), timings
        assert set(stdevs) == {arm for arm, n in timings.items() if n >= 2}, attrs
        assert all(isinstance(v, float) and v >= 0 for v in stdevs.values()), stdevs
        # execute: the arm that ran, and how long it took
        assert execute.attributes["adaptive.operation"] == "scale"
        assert execute.attributes["adaptive.backend"] == attrs["adaptive.backend"]
        assert execute.attributes["adaptive.duration_us"] >= 0.0
        assert "error.type" not in execute.attributes
        assert execute.status_code == "UNSET"
        for span in (select, execute):
            assert span.kind == "INTERNAL"
            assert span.scope_name == "adaptive_runtime"
            assert span.resource_attributes["service.name"] == "test-tracing"

    first, _ = pairs[0]
    assert first.attributes["adaptive.sampling.reason"] == "first_call"
    assert first.attributes["adaptive.has_history"] is False
    assert first.attributes["adaptive.samples"] == 0
    assert not any(k.startswith(ESTIMATE_PREFIX) for k in first.attributes)
    # once both arms were timed, a selection carries an estimate for each of them
    assert any({f"{ESTIMATE_PREFIX}simd", f"{ESTIMATE_PREFIX}scalar"} <= set(s.attributes)
               for s, _ in pairs), [dict(s.attributes) for s, _ in pairs]
    assert {s.attributes["adaptive.decision"] for s, _ in pairs} & {"explore", "heuristic"}


def test_spans_name_the_variant_that_ran_and_estimate_every_candidate(tracing: Tracing) -> None:
    """A variant's calls carry ``adaptive.backend`` (its arm) and ``adaptive.variant`` (its
    name); the primary implementation's carry no variant; a select span estimates each
    candidate, a variant as ``adaptive.estimate_us.<arm>:<variant>``."""
    rt = make_runtime(EXPORT_ALL)
    op = two_arms(rt)
    op.add_implementation(SIMD, lambda n, *_rest: ("plain", n), name="plain")
    tracing.attach(rt)
    ran = {rt.run("scale", 4096)[0] for _ in range(40)}
    assert "plain" in ran
    pairs = pair_up(tracing.flush())
    by_variant = {}
    for select, execute in pairs:
        ran_variant = execute.attributes.get("adaptive.variant")
        assert select.attributes.get("adaptive.variant") == ran_variant
        by_variant.setdefault(ran_variant, execute.attributes["adaptive.backend"])
    assert by_variant == {None: by_variant[None], "plain": "simd"}
    assert by_variant[None] in {"simd", "scalar"}
    assert any({f"{ESTIMATE_PREFIX}simd", f"{ESTIMATE_PREFIX}simd:plain",
                f"{ESTIMATE_PREFIX}scalar"} <= set(s.attributes) for s, _e in pairs)


def test_select_spans_carry_each_estimates_timings_and_spread_into_the_report(
        tmp_path: Path, timer: Any) -> None:
    """``adaptive.timings.<arm>`` and ``adaptive.stdev_us.<arm>`` beside each estimate, through
    the SDK's in-memory exporter and the embedded OTLP/JSON files, read back by the report.
    The arms advance the runtime's timer by set costs (SIMD 100 and 120 µs in turn, SCALAR
    300 µs), so every timing is known."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "test-tracing"}),
                              shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonFileSpanExporter(
        tmp_path / "traces.jsonl")))
    rt = ar.AdaptiveRuntime(EXPORT_ALL, builtin_ops=False, devices=DeviceProbe(gpu=False),
                            timer=timer)
    simd_us = itertools.cycle([100.0, 120.0])

    def simd(n: int) -> str:
        timer.advance_us(next(simd_us))
        return "simd"

    def scalar(n: int) -> str:
        timer.advance_us(300.0)
        return "scalar"

    two_arms(rt, simd=simd, scalar=scalar)
    export_into(rt, provider)
    n = reference_size(12)  # (timings learned as they are: no rescaling to the bucket)
    try:
        for _ in range(40):
            rt.run("scale", n)
        assert rt.flush_telemetry(10.0)
        assert provider.force_flush(10_000)
        selects = sorted((s for s in memory.get_finished_spans()
                          if s.name == "adaptive.select scale"), key=lambda s: s.start_time)
        decided = rt.decide("scale", n)
    finally:
        ar.telemetry.uninstrument(rt, timeout_s=5.0)
        provider.shutdown()
    assert len(selects) == 40  # (every call exported)

    def prefixed(attrs: Any, prefix: str) -> dict[str, Any]:
        return {k[len(prefix):]: v for k, v in attrs.items() if k.startswith(prefix)}

    explained = [s for s in selects if prefixed(s.attributes, ESTIMATE_PREFIX)]
    assert explained
    ran_before = Counter[str]()
    for span in selects:
        attrs = span.attributes
        timings = prefixed(attrs, TIMINGS_PREFIX)
        stdevs = prefixed(attrs, STDEV_PREFIX)
        assert set(timings) == set(prefixed(attrs, ESTIMATE_PREFIX))
        # a span shows what its decision knew: the timings of the calls before it, at most
        assert all(1 <= count <= ran_before[arm] for arm, count in timings.items()), (
            timings, ran_before)
        assert set(stdevs) == {arm for arm, count in timings.items() if count >= 2}
        if "scalar" in stdevs:
            assert stdevs["scalar"] == 0.0  # (always 300 µs)
        if timings.get("simd", 0) >= 4:  # (100 and 120 in turn: a window's spread ~10.3 µs)
            assert 9.0 <= stdevs["simd"] <= 11.6, stdevs
        ran_before[attrs["adaptive.backend"]] += 1
    last = explained[-1].attributes
    assert prefixed(last, TIMINGS_PREFIX)["simd"] >= 4  # (committed to simd, timed every call)
    assert decided.backend is SIMD and decided.timings[SIMD] >= prefixed(
        last, TIMINGS_PREFIX)["simd"]

    # the files: the report reads the latest estimates with their timings and spread
    (row,) = from_telemetry(tmp_path).rows
    assert {arm.value: count for arm, count in row.timings.items()} == prefixed(
        last, TIMINGS_PREFIX)
    assert {arm.value: us for arm, us in row.stdev_us.items()} == pytest.approx(
        prefixed(last, STDEV_PREFIX))
    assert {arm.value: us for arm, us in row.latency_us.items()} == pytest.approx(
        prefixed(last, ESTIMATE_PREFIX))
    out = io.StringIO()
    make_console(out).print(decision_table([row]))
    cells = next(ln for ln in out.getvalue().splitlines() if ln.startswith("scale ")).split()
    assert f"(n={row.timings[SIMD]})" in cells[6] and "±" in cells[6], cells  # simd µs
    scalar_n = row.timings[SCALAR]  # (timed once at least: 3x behind, re-checked seldom)
    assert cells[7] == (f"300±0.00(n={scalar_n})" if scalar_n >= 2 else "300(n=1)"), cells


def test_select_spans_of_a_device_call_show_the_gpu_arms_floor_with_fake_gpu_arm(
        tracing: Tracing) -> None:
    """A GPU arm whose copies would lose is not tried, and the select span says why: its
    floor beside the measured estimates. Calls with inputs on the device are their own
    operation ("<name>@device") in the trace."""
    rt = ar.AdaptiveRuntime(EXPORT_ALL, builtin_ops=False, devices=DeviceProbe(gpu=True))
    op = rt.register("scale", size=lambda n, _where: n, kind="vector",
                     on_device=lambda _n, where: where == "device")
    op.add_implementation(SIMD, lambda n, _where: ("simd", n))
    op.add_implementation(SCALAR, lambda n, _where: ("scalar", n))
    op.add_implementation(ar.Backend.GPU, lambda n, _where: ("gpu", n),
                          floor_us=lambda _n, where: 1e6 if where == "host" else 0.0)
    tracing.attach(rt)
    for _ in range(20):
        rt.run("scale", 4096, "host")
        rt.run("scale", 4096, "device")
    spans = tracing.flush()
    host = [s for s, _e in pair_up(spans, "scale")]
    device = [s for s, _e in pair_up(spans, "scale@device")]
    assert host and device
    assert {s.attributes["adaptive.backend"] for s in host} <= {"simd", "scalar"}
    assert all(s.attributes["adaptive.floor_us.gpu"] == 1e6 for s in host
               if s.attributes["adaptive.has_history"])
    assert "gpu" in {s.attributes["adaptive.backend"] for s in device}
    assert all(s.attributes["adaptive.operation"] == "scale@device" for s in device)


class _DeviceEvents:
    """A call's timing events on a device double: complete at their second query."""

    def __init__(self) -> None:
        self.queries = 0

    def stop(self) -> None:
        pass

    def ready(self) -> bool:
        self.queries += 1
        return self.queries > 1

    def elapsed_us(self) -> float:
        return 777.0


def test_the_execute_span_of_a_call_timed_on_its_device_carries_the_device_time_with_fake_events(
        tracing: Tracing) -> None:
    """A GPU arm timed with events: its spans are held until the events complete (asked at
    later timed calls), then exported with the device time as the kernel's duration and the
    host's launch time beside it."""
    rt = ar.AdaptiveRuntime(EXPORT_ALL, builtin_ops=False, devices=DeviceProbe(gpu=True))
    op = rt.register("scale", size=lambda n: n, kind="vector")
    op.add_implementation(ar.Backend.GPU, lambda n: ("gpu", n),
                          device_timing=lambda _args: _DeviceEvents())
    tracing.attach(rt)
    calls = 12
    for _ in range(calls):
        assert rt.run("scale", 4096) == ("gpu", 4096)
    # (each call's events are asked about at later timed calls and at a flush: the last
    # call's are ready at the second flush)
    rt.flush_telemetry()
    rt.flush_telemetry()
    executes = [e for _s, e in pair_up(tracing.flush())]
    assert len(executes) == calls
    for execute in executes:
        assert execute.attributes["adaptive.device_time_us"] == 777.0
        assert execute.attributes["adaptive.duration_us"] == 777.0
        assert 0.0 <= execute.attributes["adaptive.launch_us"] < 777.0
        assert execute.end_time_unix_nano - execute.start_time_unix_nano == 777_000


# ---------------------------------------------------------------------------- 2. parenting


def test_select_and_execute_are_siblings_under_the_callers_span(tracing: Tracing) -> None:
    rt = make_runtime(EXPORT_ALL)
    two_arms(rt)
    tracing.attach(rt)
    with tracing.tracer.start_as_current_span("train_step"):
        for _ in range(3):
            rt.run("scale", 512)
    spans = tracing.flush()
    step = tracing.receiver.span("train_step")
    selects, executes = spans_of(spans, "select"), spans_of(spans, "execute")
    assert len(selects) == len(executes) == 3
    for span in (*selects, *executes):
        assert span.trace_id == step.trace_id
        assert span.parent_span_id == step.span_id, (
            f"{span.name} should be a child of train_step, is a child of {span.parent_span_id}")


def test_without_an_active_span_execute_is_the_child_of_select(tracing: Tracing) -> None:
    rt = make_runtime(EXPORT_ALL)
    two_arms(rt)
    tracing.attach(rt)
    for _ in range(3):
        rt.run("scale", 512)
    pairs = pair_up(tracing.flush())
    assert len(pairs) == 3
    assert len({select.trace_id for select, _ in pairs}) == 3, "one trace per call"
    for select, execute in pairs:
        assert select.is_root
        assert execute.trace_id == select.trace_id
        assert execute.parent_span_id == select.span_id


# ---------------------------------------------------------------------------- 3. timestamps


def test_execute_span_brackets_the_real_kernel_run(tracing: Tracing) -> None:
    kernel_ns = 2_000_000  # 2 ms of busy work: well above sampling_threshold_us, always traced
    ran: list[tuple[int, int]] = []

    def slow(n: int) -> int:
        start = time.perf_counter_ns()
        busy_wait_ns(kernel_ns)
        ran.append((start, time.perf_counter_ns()))
        return n

    rt = make_runtime()
    two_arms(rt, simd=slow, scalar=slow)
    tracing.attach(rt)
    # wall clock = perf counter + offset, measured here as the recorder measured it
    offset_ns = time.time_ns() - time.perf_counter_ns()
    for _ in range(2):  # the first call and the other arm's trial: both traced
        assert rt.run("scale", 100) == 100
    pairs = pair_up(tracing.flush())
    assert len(pairs) == len(ran) == 2

    slack_ns = 20_000_000  # two offset readings (time_ns vs perf_counter_ns) may differ a bit
    for (select, execute), (kernel_start, kernel_end) in zip(pairs, ran, strict=True):
        assert execute.duration_ns >= kernel_ns, "the execute span is shorter than the kernel"
        assert execute.attributes["adaptive.duration_us"] >= kernel_ns / 1000
        assert execute.start_time_unix_nano <= kernel_start + offset_ns + slack_ns
        assert execute.end_time_unix_nano >= kernel_end + offset_ns - slack_ns
        assert select.start_time_unix_nano <= select.end_time_unix_nano
        assert select.end_time_unix_nano <= execute.start_time_unix_nano
        assert execute.duration_ns < 10 * 1_000_000_000, "not a real kernel time"
    # consecutive calls do not overlap
    for (_, earlier), (later, _) in itertools.pairwise(pairs):
        assert earlier.end_time_unix_nano <= later.start_time_unix_nano


# ---------------------------------------------------------------------------- 4. failures


def test_a_failing_arm_gets_an_error_span_and_the_caller_the_fallback_result(
        tracing: Tracing) -> None:
    def broken(n: int) -> Any:
        raise ArmBroken(f"simd arm broken on {n}")

    rt = make_runtime()
    two_arms(rt, simd=broken)
    tracing.attach(rt)
    for _ in range(10):
        assert rt.run("scale", 4096) == ("scalar", 4096), "the caller gets the fallback's result"
    assert rt.fallback_counts().get(("scale", SIMD, SCALAR), 0) >= 1
    spans = tracing.flush()

    failed = [e for e in spans_of(spans, "execute") if e.attributes["adaptive.backend"] == "simd"]
    assert failed, "the failing simd run was not traced"
    for execute in failed:
        assert execute.attributes["error.type"] == "ArmBroken"
        assert execute.attributes["adaptive.fallback_to"] == "scalar"
        assert execute.status_code == "ERROR"
        assert "simd arm broken" in execute.status_message
        select = next(s for s in spans if s.span_id == execute.parent_span_id)
        assert select.attributes["adaptive.backend"] == "simd"
        assert select.attributes["adaptive.sampling.reason"] == "error"
    # the fallback run is traced too, as a selection whose reason is "fallback"
    fallback = [s for s in spans_of(spans, "select")
                if s.attributes["adaptive.decision"] == "fallback"]
    assert fallback
    for select, execute in pair_up(spans):
        if select in fallback:
            assert execute.attributes["adaptive.backend"] == "scalar"
            assert "error.type" not in execute.attributes
            assert execute.status_code == "UNSET"


# ---------------------------------------------------------------------------- 5. sampling


def _sampled(spans: Sequence[ReceivedSpan], op: str = "scale") -> list[ReceivedSpan]:
    return [s for s in spans_of(spans, "select", op)
            if s.attributes["adaptive.sampling.reason"] == "sampled"]


def _interesting_selections(rt: ar.AdaptiveRuntime, op: str = "scale") -> int:
    return sum(n for key, n in rt.selection_counts().items()
               if key.operation == op and key.reason is not ar.Reason.EXPLOIT)


def test_converged_cheap_op_exports_about_one_percent_with_weights(
        tracing: Tracing, clock: Any) -> None:
    calls = 20_000
    # Every call timed, so every call meets the trace gate; budgets far above the need.
    rt = make_runtime(ar.RuntimeConfig(max_measure_period=1,
                                       **NO_SPAN_BUDGET), clock=clock)
    two_arms(rt)
    tracing.attach(rt)
    for _ in range(calls):
        rt.run("scale", 1000)
        clock.advance(0.001)  # 1,000 calls/s: far from the hot path
    spans = tracing.flush()
    counts = rt.trace_counts()
    sampled = _sampled(spans)

    # ~1% of the calls, each standing for the ~100 calls since the previous one
    assert 0.005 * calls <= len(sampled) <= 0.015 * calls, len(sampled)
    weights = [s.attributes["adaptive.sampling.weight"] for s in sampled]
    assert all(w > 1 for w in weights)
    assert 0.8 * calls <= sum(weights) <= calls, sum(weights)
    # the weights account for exactly the calls the gate passed over (less the tail since
    # the last sampled span, which no span stands for yet)
    covered = counts["suppressed"].get("not_sampled", 0) + counts["exported"]["sampled"]
    assert covered - 1 / 0.01 <= sum(weights) <= covered
    assert counts["exported"]["sampled"] == len(sampled)

    # Interesting decisions (the first call, exploration, re-checks, drift) are all exported.
    interesting = [s for s in spans_of(spans, "select")
                   if s.attributes["adaptive.decision"] != "exploit"]
    assert len(interesting) == _interesting_selections(rt), "an interesting decision was dropped"
    assert all(s.attributes["adaptive.sampling.reason"] in {"first_call", "decision"}
               for s in interesting)
    assert all(s.attributes["adaptive.sampling.weight"] == 1.0 for s in interesting)
    assert "budget" not in counts["suppressed"]
    assert 2 * sum(counts["exported"].values()) == len(spans)


def test_default_measurement_exports_at_most_one_percent_weighted_by_calls(
        tracing: Tracing, clock: Any) -> None:
    calls = 50_000
    rt = make_runtime(ar.RuntimeConfig(**NO_SPAN_BUDGET),
                      clock=clock)
    two_arms(rt)
    tracing.attach(rt)
    for _ in range(calls):
        rt.run("scale", 1000)
        clock.advance(0.0005)  # 2,000 calls/s
    spans = tracing.flush()
    counts = rt.trace_counts()
    interesting = _interesting_selections(rt)
    selects = spans_of(spans, "select")
    sampled = _sampled(spans)
    # a converged key is timed 1-in-N, so at most ~1% of its calls are traced
    assert len(selects) <= 0.01 * calls + interesting + 50, (len(selects), interesting)
    assert sampled, "a converged op called 50,000 times exported no sampled span"
    weights = [s.attributes["adaptive.sampling.weight"] for s in sampled]
    assert all(w > 1 for w in weights)
    # together they stand for (nearly) all the calls of the converged key
    assert 0.5 * calls <= sum(weights) <= calls, sum(weights)
    assert counts["exported"]["sampled"] == len(sampled)


def test_banked_sampling_credit_does_not_oversample_later(
        tracing: Tracing, clock: Any, timer: Any) -> None:
    """A key timed 1-in-512 earns 5 sampling credits per timed call but can spend only one;
    what it banks must not make it export far more than ~1% once its calls get slower."""
    latency_us = {"now": 1.0}

    def kernel(n: int) -> int:
        timer.advance_us(latency_us["now"])
        return n

    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(**NO_SPAN_BUDGET),
                            builtin_ops=False, devices=DeviceProbe(gpu=False), clock=clock,
                            timer=timer)
    two_arms(rt, simd=kernel, scalar=kernel)
    tracing.attach(rt)
    for _ in range(200_000):  # cheap: timed 1-in-512
        rt.run("scale", 1000)
        clock.advance(0.0005)
    tracing.flush()
    tracing.receiver.clear()
    latency_us["now"] = 30.0  # now timed 1-in-16: ~1% means ~1 span per 100 calls
    calls = 20_000
    for _ in range(calls):
        rt.run("scale", 1000)
        clock.advance(0.0005)
    sampled = _sampled(tracing.flush())
    assert len(sampled) <= 0.02 * calls, (
        f"{len(sampled)} sampled spans for {calls} calls ({len(sampled) / calls:.1%}, wanted "
        f"~1%): TraceGate banks sampling credit without bound")


def test_the_span_budget_caps_exports_and_weights_still_cover_the_calls(
        tracing: Tracing, clock: Any) -> None:
    calls, step_s, per_key = 20_000, 0.001, 2.0
    # (a key's token bucket: a tenth of the process's)
    rt = make_runtime(ar.RuntimeConfig(max_measure_period=1, spans_per_sec=10 * per_key),
                      clock=clock)
    two_arms(rt)
    tracing.attach(rt)
    for _ in range(calls):
        rt.run("scale", 1000)
        clock.advance(step_s)
    spans = tracing.flush()
    counts = rt.trace_counts()
    selects = spans_of(spans, "select")
    # one key: its token bucket (burst of max(1, rate), refilled at rate/s) bounds every export
    assert len(selects) <= per_key + per_key * calls * step_s + 1, len(selects)
    assert counts["suppressed"].get("budget", 0) > 0
    sampled = _sampled(spans)
    assert sampled
    # a span the budget refused leaves its calls to the next one that goes out
    assert max(s.attributes["adaptive.sampling.weight"] for s in sampled) > 1 / 0.01
    assert sum(s.attributes["adaptive.sampling.weight"] for s in sampled) >= 0.5 * calls


def test_trace_counts_count_suppressed_calls_by_reason(tracing: Tracing, clock: Any) -> None:
    rt = make_runtime(ar.RuntimeConfig(tracing=False), clock=clock)
    two_arms(rt)
    tracing.attach_recorder(rt)  # attached anyway: the gate itself says no
    for _ in range(100):
        rt.run("scale", 1000)
        clock.advance(0.01)
    assert tracing.flush() == []
    counts = rt.trace_counts()
    assert counts["exported"] == {}
    assert counts["suppressed"].get("tracing_off", 0) > 0


def test_tracing_off_in_config_attaches_no_recorder() -> None:
    rt = make_runtime(ar.RuntimeConfig(tracing=False))
    two_arms(rt)
    ar.telemetry.instrument(rt)  # global provider is the API's no-op proxy here
    try:
        sink, _gate = rt.step_hooks()
        assert not sink.recording and not rt.stats().recording_spans
        rt.run("scale", 10)
        assert rt.trace_counts() == {"exported": {}, "suppressed": {}}
    finally:
        ar.telemetry.uninstrument(rt, timeout_s=1.0)


# ---------------------------------------------------------------------------- 6. hot path


def _hot_spans(spans: Sequence[ReceivedSpan], op: str = "scale") -> list[ReceivedSpan]:
    return spans_of(spans, "hot_path", op)


def _drive_hot(rt: ar.AdaptiveRuntime, clock: Any, calls: int, gap_s: float) -> None:
    for _ in range(calls):
        rt.run("scale", 1000)
        clock.advance(gap_s)


def test_hot_path_stops_tracing_and_records_entering_and_leaving(
        tracing: Tracing, clock: Any) -> None:
    rt = make_runtime(ar.RuntimeConfig(hot_path_calls_per_sec=100.0), clock=clock)
    two_arms(rt)
    tracing.attach(rt)
    _drive_hot(rt, clock, 20, 0.1)  # 10 calls/s: cool; exploration is traced
    _drive_hot(rt, clock, 3000, 0.001)  # 1,000 calls/s: hot
    assert rt.hot_operations() == ["scale"]
    spans = tracing.flush()
    entered = _hot_spans(spans)
    assert len(entered) == 1, entered
    enter = entered[0]
    assert enter.attributes["adaptive.hot_path.entered"] is True
    assert enter.attributes["adaptive.operation"] == "scale"
    assert enter.attributes["adaptive.hot_path.calls_per_sec"] > 100.0
    assert enter.attributes["adaptive.hot_path.suppressed_selections"] == 0
    before = len(spans_of(spans, "select"))
    assert before > 0
    assert all(s.start_time_unix_nano <= enter.start_time_unix_nano
               for s in spans_of(spans, "select"))

    _drive_hot(rt, clock, 3000, 0.001)  # still hot: nothing of "scale" is exported
    spans = tracing.flush()
    assert len(spans_of(spans, "select")) == before
    assert len(spans_of(spans, "execute")) == before
    assert rt.trace_counts()["suppressed"].get("hot_path", 0) >= 3000

    # slow down (without asking is_hot_path: see the test below) until it leaves
    for _ in range(4096):
        _drive_hot(rt, clock, 1, 1.0)
        if not rt.hot_operations():
            break
    assert rt.hot_operations() == []
    spans = tracing.flush()
    hot = _hot_spans(spans)
    assert [s.attributes["adaptive.hot_path.entered"] for s in hot] == [True, False]
    leave = hot[1]
    assert leave.attributes["adaptive.hot_path.suppressed_selections"] >= 3000
    assert leave.attributes["adaptive.hot_path.calls_per_sec"] < 50.0
    # nothing of the operation was exported while it was hot, except the call whose timing
    # closed the cool window (it started before the transition it caused, and is not hot)
    during = [s for s in spans_of(spans, "select")
              if enter.start_time_unix_nano < s.start_time_unix_nano < leave.start_time_unix_nano]
    assert len(during) <= 1, during


def test_leaving_the_hot_path_is_recorded_even_after_is_hot_path_was_asked(
        tracing: Tracing, clock: Any) -> None:
    rt = make_runtime(ar.RuntimeConfig(hot_path_calls_per_sec=100.0, max_measure_period=1),
                      clock=clock)
    two_arms(rt)
    tracing.attach(rt)
    _drive_hot(rt, clock, 3000, 0.001)
    assert rt.is_hot_path("scale")
    clock.advance(60.0)  # the operation went quiet: its open window's rate drops below 50/s
    assert not rt.is_hot_path("scale")  # asking closes the stale window...
    _drive_hot(rt, clock, 20, 1.0)
    hot = _hot_spans(tracing.flush())
    # ...and the transition it found must still be recorded
    assert [s.attributes["adaptive.hot_path.entered"] for s in hot] == [True, False], (
        "leaving the hot path was not recorded: HotPathDetector.is_hot() closed the window "
        "and dropped the transition")


# ---------------------------------------------------------------------------- 7. bounded buffer


class GatedExporter(SpanExporter):
    """Forwards to ``inner`` only once ``gate`` is set: an exporter as slow as a test wants."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.gate = threading.Event()
        self.waiting = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.waiting.set()
        self.gate.wait(30.0)
        return self.inner.export(spans)

    def shutdown(self) -> None:
        self.gate.set()
        self.inner.shutdown()


def test_a_full_span_buffer_drops_and_counts_without_blocking(
        otlp_receiver: OtlpReceiver) -> None:
    exporter = GatedExporter(GrpcSpanExporter(endpoint=otlp_receiver.grpc_endpoint,
                                              insecure=True, timeout=5))
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))  # export on the recorder thread
    rt = make_runtime(EXPORT_ALL)
    two_arms(rt)
    capacity, calls = 4, 200
    recorder = attach_span_recorder(rt, provider, capacity=capacity)
    try:
        rt.run("scale", 10)
        assert exporter.waiting.wait(10.0), "the recorder never reached the exporter"
        # the worker is stuck in export: the buffer fills, then every record is dropped
        for _ in range(calls):
            rt.run("scale", 10)
        assert recorder.pending <= capacity
        assert recorder.dropped >= calls - capacity - 1
        assert rt.trace_counts()["suppressed"]["buffer_full"] == recorder.dropped
        exporter.gate.set()
        assert recorder.flush(10.0)
        assert provider.force_flush(10_000)
        kept = calls + 1 - recorder.dropped
        assert recorder.spans_made == 2 * kept
        assert len(otlp_receiver.spans()) == 2 * kept
        assert recorder.errors == 0
    finally:
        exporter.gate.set()
        recorder.shutdown(5.0)
        provider.shutdown()


# ---------------------------------------------------------------------------- 8. collector down


def test_a_collector_that_goes_away_never_reaches_the_loop(otlp_receiver: OtlpReceiver) -> None:
    tracing = Tracing(otlp_receiver, transport="http", timeout_s=1.0)
    try:
        rt = make_runtime(EXPORT_ALL)
        two_arms(rt)
        recorder = tracing.attach(rt)

        def phase(size: int, calls: int = 30) -> None:
            for _ in range(calls):
                assert rt.run("scale", size)[1] == size

        def sized(size: int) -> Callable[[list[ReceivedSpan]], bool]:
            def enough(spans: list[ReceivedSpan]) -> bool:
                return sum(s.attributes.get("adaptive.input_size") == size
                           for s in spans_of(spans, "select")) >= 30
            return enough

        phase(100)
        tracing.flush()
        otlp_receiver.wait_for_spans(sized(100), timeout_s=10.0)

        otlp_receiver.stop()
        phase(200)  # no exception reaches the caller
        assert recorder.flush(10.0)
        tracing.provider.force_flush(10_000)  # the exporter fails (and gives up) in the SDK
        assert recorder.errors == 0
        assert recorder.spans_made == 2 * 60

        otlp_receiver.start()  # the collector comes back on the same port
        phase(300)
        tracing.flush()
        spans = otlp_receiver.wait_for_spans(sized(300), timeout_s=10.0)
        assert not [s for s in spans if s.attributes.get("adaptive.input_size") == 200]
        assert recorder.errors == 0
    finally:
        tracing.close()


# ---------------------------------------------------------------------------- 9. flush


def test_flush_delivers_every_admitted_span_pair(tracing: Tracing) -> None:
    rt = make_runtime()
    two_arms(rt, "scale")
    two_arms(rt, "shift")
    recorder = tracing.attach(rt)
    for i in range(4000):
        rt.run("scale", 1 << (i % 4 + 4))
        rt.run("shift", 1 << (i % 3 + 8))
    assert rt.flush_telemetry(10.0)
    assert tracing.provider.force_flush(10_000)
    exported = sum(rt.trace_counts()["exported"].values())
    spans = tracing.receiver.spans()
    assert recorder.dropped == 0
    assert len(spans) == 2 * exported
    selects = [s for s in spans if s.name.startswith("adaptive.select ")]
    executes = [s for s in spans if s.name.startswith("adaptive.execute ")]
    assert len(selects) == len(executes) == exported
    assert {s.attributes["adaptive.operation"] for s in selects} == {"scale", "shift"}


# ---------------------------------------------------------------------------- 10. fork


def _child_checks(rt: ar.AdaptiveRuntime, recorder: SpanRecorder,
                  exporter: InMemorySpanExporter, parent_thread: threading.Thread) -> str:
    """Run in the forked child; returns "" if all is well, else what went wrong."""
    if span_worker_thread(recorder) is not None:
        return "the recorder kept the parent's worker thread after fork"
    if recorder.pending:
        return f"the child inherited {recorder.pending} queued records"
    exporter.clear()
    for _ in range(3):
        result = rt.run("scale", 64)
        if result[1] != 64:
            return f"rt.run returned {result!r} in the child"
    thread = span_worker_thread(recorder)
    if thread is None or thread is parent_thread or not thread.is_alive():
        return f"no new live worker thread in the child: {thread!r}"
    if not recorder.flush(5.0):
        return "flush() timed out in the child"
    names = Counter(s.name for s in exporter.get_finished_spans())
    if names["adaptive.select scale"] < 3 or names["adaptive.execute scale"] < 3:
        return f"the child's spans were not made: {dict(names)}"
    return ""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork (POSIX)")
def test_a_forked_child_gets_a_fresh_span_worker(tmp_path: Any) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    rt = make_runtime(EXPORT_ALL)
    two_arms(rt)
    recorder = export_into(rt, provider)
    report = tmp_path / "child.txt"
    try:
        for _ in range(5):
            rt.run("scale", 64)
        assert recorder.flush(5.0)  # idle worker: no lock held across the fork
        parent_thread = span_worker_thread(recorder)
        assert parent_thread is not None and parent_thread.is_alive()
        made_before = recorder.spans_made

        with warnings.catch_warnings():
            # Python >= 3.12 warns about fork() with threads running: that is the point here
            # (a DataLoader worker forks a process whose recorder thread is running).
            warnings.simplefilter("ignore", DeprecationWarning)
            # (JAX warns at fork when an earlier test started its threads: not this test's)
            warnings.simplefilter("ignore", RuntimeWarning)
            pid = os.fork()
        if pid == 0:  # the child: never return into pytest
            code = 70
            try:
                problem = _child_checks(rt, recorder, exporter, parent_thread)
                report.write_text(problem or "ok")
                code = 1 if problem else 0
            except BaseException as exc:  # report anything, then leave
                try:
                    report.write_text(f"child raised {exc!r}")
                finally:
                    code = 2
            finally:
                os._exit(code)

        deadline = time.monotonic() + 30.0
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                pytest.fail("the forked child hung (recorder worker after fork?)")
            time.sleep(0.01)
        outcome = report.read_text() if report.exists() else "no report"
        assert os.waitstatus_to_exitcode(status) == 0, outcome

        # the parent's recorder goes on with its own thread
        for _ in range(3):
            rt.run("scale", 64)
        assert recorder.flush(5.0)
        assert span_worker_thread(recorder) is parent_thread and parent_thread.is_alive()
        assert recorder.spans_made == made_before + 6
    finally:
        ar.telemetry.uninstrument(rt, timeout_s=5.0)
        provider.shutdown()


# ---------------------------------------------------------------------------- public hook


def test_instrument_into_given_providers_exports_every_admitted_call_there() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    rt = make_runtime(EXPORT_ALL)
    two_arms(rt)
    ar.telemetry.instrument(rt, tracer_provider=provider)
    try:
        for _ in range(50):
            rt.run("scale", 10)
        recorder = span_recorder(rt)
        assert recorder.recording and rt.stats().recording_spans
        assert rt.flush_telemetry(10.0)
        names = Counter(s.name for s in exporter.get_finished_spans())
        assert names == {"adaptive.select scale": 50, "adaptive.execute scale": 50}
    finally:
        ar.telemetry.uninstrument(rt, timeout_s=5.0)
        provider.shutdown()


# ---------------------------------------------------------------------------- evidence links


def test_a_committing_select_span_links_the_execute_spans_that_decided_it(
        tracing: Tracing) -> None:
    """In Jaeger a decision leads to its measurements: each exploit select span links the
    latest traced execute span of every arm it weighed, and the receiver got those spans."""
    rt = make_runtime(EXPORT_ALL)
    two_arms(rt, simd=lambda n: busy_wait_ns(20_000) or ("simd", n),
             scalar=lambda n: busy_wait_ns(200_000) or ("scalar", n))
    tracing.attach(rt)
    for _ in range(30):
        rt.run("scale", 4096)
    spans = tracing.flush()
    by_id = {s.span_id: s for s in spans}
    exploits = [s for s in spans_of(spans, "select")
                if s.attributes["adaptive.decision"] == "exploit"]
    assert exploits, "the runtime never committed"
    for select in exploits:
        assert len(select.links) == 2, "a commitment links the evidence of both arms"
        linked = [by_id.get(span_id) for _trace, span_id in select.links]
        assert all(e is not None and e.name == "adaptive.execute scale" for e in linked), \
            "a link points at a span the receiver never got"
        assert {e.attributes["adaptive.backend"] for e in linked} == {"simd", "scalar"}
        assert all(e.start_time_unix_nano < select.start_time_unix_nano for e in linked)
    # exploring select spans decide nothing yet: no links
    assert all(not s.links for s in spans_of(spans, "select")
               if s.attributes["adaptive.decision"] == "explore")


def test_a_drift_and_the_switch_it_leads_to_carry_the_machines_load(
        tracing: Tracing, monkeypatch) -> None:
    """A neighbour taking the cores looks like any slowdown in the timings; the spans of the
    drift alarm and of the switch it leads to carry what the machine's load was
    (``adaptive.load.*``: involuntary context switches per second, the load average, CPUs),
    read about once a second on timed calls."""
    from adaptive_runtime import _load

    switches = itertools.count(0, 5000)  # (5,000 more at each reading)
    machine = _load.MachineLoad(switches=lambda: next(switches), average=lambda: 3.5, cpus=2)
    monkeypatch.setattr(_load, "_machine", machine)
    machine.poll(0.0)
    machine.poll(1.0)  # (a reading in place before the drift: 5,000 per second)
    slow = [False]
    rt = make_runtime(EXPORT_ALL)
    two_arms(rt, simd=lambda n: busy_wait_ns(2_000_000 if slow[0] else 20_000) or ("simd", n),
             scalar=lambda n: busy_wait_ns(200_000) or ("scalar", n))
    tracing.attach(rt)
    for _ in range(30):
        rt.run("scale", 4096)
    slow[0] = True  # (the neighbour arrives: SIMD takes 100x as long)
    for _ in range(30):
        rt.run("scale", 4096)
    assert rt.run("scale", 4096)[0] == "scalar"
    selects = spans_of(tracing.flush(), "select")
    explained = [s for s in selects if s.attributes["adaptive.decision"] == "drift"
                 or "adaptive.replaced_backend" in s.attributes]
    assert explained, "no drift or switch span"
    for span in explained:
        assert span.attributes["adaptive.load.cpus"] == 2
        assert span.attributes["adaptive.load.average_1m"] == 3.5
        assert span.attributes["adaptive.load.involuntary_switches_per_s"] > 0
    # (routine decisions carry no load)
    assert all("adaptive.load.cpus" not in s.attributes for s in selects
               if s.attributes["adaptive.decision"] == "explore")


# ---------------------------------------------------------------------------- what was decided


def test_at_default_settings_each_key_exports_its_commitment_and_stays_visible(
        tracing: Tracing) -> None:
    """The question a user opens Jaeger for — why does ``dot`` at 100k run on SIMD? — has a
    span at default settings: each key's commitment, linked to the execute spans that
    decided it, and then a select span in every key interval while it runs (here 2 s)."""
    import numpy as np

    interval_s = 2.0
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(trace_key_interval_s=interval_s))
    tracing.attach(rt)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(100_000), rng.standard_normal(100_000)
    rows = rng.standard_normal((1, 2_000))
    began = time.monotonic()
    calls = 0
    while time.monotonic() - began < 8.0:  # ~500 calls/s for 8 s, never hot
        rt.run("dot", x, y)
        rt.run("softmax", rows)
        calls += 2
        time.sleep(max(0.0, began + calls / 500.0 - time.monotonic()))
    spans = tracing.flush()
    by_id = {s.span_id: s for s in spans}
    end_ns = max(s.end_time_unix_nano for s in spans)
    for op in ("dot", "softmax"):
        selects = spans_of(spans, "select", op)
        commits = [s for s in selects if s.attributes.get("adaptive.commit") is True]
        reasons = Counter(s.attributes["adaptive.sampling.reason"] for s in selects)
        assert commits, f"{op}: no commitment span ({reasons})"
        first = commits[0]
        assert first.attributes["adaptive.decision"] == "exploit"
        assert first.attributes["adaptive.sampling.reason"] == "commit"
        assert first.links, f"{op}: the commitment links no evidence"
        linked = [by_id.get(span_id) for _trace, span_id in first.links]
        assert all(e is not None and e.name == f"adaptive.execute {op}" for e in linked), \
            "a link points at a span the receiver never got"
        # after the commitment, a select span of the key in every whole interval window
        window_ns = int(interval_s * 1e9)
        start = first.start_time_unix_nano
        windows = (end_ns - start) // window_ns
        assert windows >= 2
        for w in range(windows):
            low, high = start + w * window_ns, start + (w + 1) * window_ns
            assert any(low < s.start_time_unix_nano <= high for s in selects), \
                f"{op}: no select span in window {w} after the commitment"
        # what keeps the key visible after its commitment: routine spans within their share of
        # the span budget (sampled or slow), or an interval span where they leave a gap (the
        # gate's unit tests drive that case) — each standing for the calls it was picked from
        standing = [s for s in selects if s.start_time_unix_nano > start
                    and s.attributes["adaptive.sampling.reason"] in ("interval", "sampled",
                                                                     "slow")]
        assert standing and all(s.attributes["adaptive.sampling.weight"] >= 1.0
                                for s in standing)
