"""A runtime's parts and their wiring: :class:`RuntimeParts` builds them from the
:class:`RuntimeConfig` (the devices check, the policy's settings — ``RuntimeConfig`` →
``PolicyConfig``, here only —, the trace gate and the dispatcher that holds them), switches
the telemetry sinks on and off, and is a sync's two ends. ``AdaptiveRuntime`` (in
:mod:`.facade`) has one: the public face, it hands each method to the part that does it."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from .._concurrency.forks import renew_after_fork
from .._dispatch import Dispatcher
from .._imported import import_frameworks
from ..config import RuntimeConfig
from ..errors import BackendUnavailableError
from ..gating import HotPathDetector, TraceGate
from ..history import HistoryRecord, HistoryStore, Origins
from ..history.recording import CallRecorder
from ..operations import DeviceProbe, OperationRegistry
from ..policy import Policy
from ..telemetry import instrumentation
from ..telemetry.sinks import NO_METRICS, NO_SPANS, MetricsSink, SpanSink

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

    from ..telemetry.metrics import MetricsSource

__all__ = ["RuntimeParts", "call_recorder", "checked_devices", "dispatcher", "metrics_sink",
           "span_sink", "trace_gate"]

# Settings of the trace gate that are derived, not configured: shares of the one budget,
# spans_per_sec (the token buckets; spans_per_sec=inf lifts them all).
# The share of fast routine calls sampled, per key: a ceiling, reached only where the routine
# spans' bucket below is lifted; each sampled span's weight counts the calls it stands for.
_TRACE_SAMPLE_RATE = 0.01
# One key's share of the per-process span budget: a key whose every call is remarkable (an
# arm failing on each call, a decision each time) cannot take the spans of the others. A
# tenth: ten such keys at once still fill the budget.
_KEY_SPAN_SHARE = 0.1
# Routine (slow or sampled) call spans' share: 4 calls' spans a second at the default 200.
# What the loop pays for tracing is the span volume (making and exporting a call's two
# spans takes ~200 us of background CPU in the OpenTelemetry Python SDK): in
# benchmarks/tracing_overhead.py's mixed loop (~10,000 calls/s), 2-4 routine spans/s went
# out under the former CPU budget and tracing cost +1.1-1.2 %, against 35-37 spans/s and
# +4.8-5.3 % on the per-key and per-process buckets alone (target <= 2 %). (This share
# keeps that loop near the former volume; its own benchmark run is owed.)
_ROUTINE_SPAN_SHARE = 0.02
# Training-step spans' share, a key's: 20 step spans a second at the default, each ~70 us
# of background CPU (a span where a call has two), so a step span per step while steps take
# 50 ms or more, and about one per 50 steps of 1 ms (benchmarks/training_loop.py's target:
# tracing on within 1.02x of off).
_STEP_SPAN_SHARE = 0.1


def checked_devices(cfg: RuntimeConfig, devices: DeviceProbe | None) -> DeviceProbe:
    """``devices`` (default: a probe of this machine); :class:`BackendUnavailableError` when
    the arm ``cfg`` forces cannot run on them."""
    probe = devices if devices is not None else DeviceProbe()
    forced = cfg.force_backend
    if forced is not None and not probe.available(forced):
        raise BackendUnavailableError(
            f"backend {forced.value!r} is forced (force_backend / "
            f"ADAPTIVE_RUNTIME_FORCE_BACKEND) but is not available on this machine")
    return probe


def trace_gate(cfg: RuntimeConfig, now_s: float) -> TraceGate:
    """The gate that admits or suppresses each call's spans, budgeted as ``cfg`` says."""
    return TraceGate(tracing=cfg.tracing, sampling_threshold_us=cfg.sampling_threshold_us,
                     sample_rate=_TRACE_SAMPLE_RATE, spans_per_sec=cfg.spans_per_sec,
                     spans_per_sec_per_key=_KEY_SPAN_SHARE * cfg.spans_per_sec,
                     now_s=now_s,
                     max_keys=cfg.max_history_keys,
                     routine_spans_per_sec=_ROUTINE_SPAN_SHARE * cfg.spans_per_sec,
                     step_spans_per_sec=_STEP_SPAN_SHARE * cfg.spans_per_sec,
                     key_interval_s=cfg.trace_key_interval_s)


def dispatcher(cfg: RuntimeConfig, registry: OperationRegistry, history: HistoryStore,
               hot: HotPathDetector, devices: DeviceProbe, clock: Callable[[], float],
               timer: Callable[[], int]) -> Dispatcher:
    """The dispatcher over a runtime's parts, with its policy and trace gate made here."""
    return Dispatcher(config=cfg, registry=registry, history=history,
                      policy=Policy(cfg.policy_config()), hot=hot,
                      gate=trace_gate(cfg, clock()),
                      devices=devices, clock=clock, timer=timer)


def span_sink(*, enabled: bool, timer: Callable[[], int],
              tracer_provider: TracerProvider | None = None) -> SpanSink:
    """A :class:`~adaptive_runtime.telemetry.spans.SpanRecorder` into ``tracer_provider``
    (default: the global one) when ``enabled``, else :data:`NO_SPANS`."""
    if not enabled:
        return NO_SPANS
    from ..telemetry.spans import SpanRecorder

    return SpanRecorder(timer=timer, tracer_provider=tracer_provider)


def metrics_sink(source: MetricsSource, *,
                 meter_provider: MeterProvider | None = None) -> MetricsSink:
    """A :class:`~adaptive_runtime.telemetry.metrics.RuntimeMetrics` reading ``source``
    into ``meter_provider`` (default: the global one)."""
    from ..telemetry.metrics import RuntimeMetrics

    return RuntimeMetrics(source, meter_provider=meter_provider)

def call_recorder(dispatcher: Dispatcher, path: str | os.PathLike[str],
                  max_calls: int) -> CallRecorder:
    """A :class:`CallRecorder` of ``dispatcher``'s timed calls into ``path``, attached to it
    until closed."""
    recorder = CallRecorder(path, max_calls)

    def detach() -> None:
        if dispatcher.call_sink is recorder:
            dispatcher.call_sink = None

    recorder._detach = detach
    dispatcher.call_sink = recorder
    return recorder


class RuntimeParts:
    """The parts one runtime is made of, built from its config: the devices it runs on, the
    operation registry, the measured history, the hot-path detector and the dispatcher that
    holds them (with the policy and the trace gate); and its telemetry sinks, the no-ops until
    telemetry is switched on (:meth:`telemetry_on`, :meth:`telemetry_off`). An
    ``AdaptiveRuntime`` has one, and holds the parts its public methods use directly."""

    def __init__(self, cfg: RuntimeConfig, devices: DeviceProbe | None,
                 clock: Callable[[], float], timer: Callable[[], int]) -> None:
        """The parts; :class:`BackendUnavailableError` when a forced arm cannot run here."""
        if cfg.import_frameworks:  # (asked for: now, never inside a call)
            import_frameworks()
        self.config = cfg
        self.devices = checked_devices(cfg, devices)
        self.clock = clock
        self.timer = timer
        # Telemetry behind a seam: no-op sinks until telemetry is switched on (see sinks)
        self.spans: SpanSink = NO_SPANS
        self.metrics: MetricsSink = NO_METRICS
        self.telemetry_lock = threading.Lock()
        # (a thread configuring telemetry may hold it at a fork: see _concurrency.forks)
        renew_after_fork(self, RuntimeParts._renew_lock)
        self.registry = OperationRegistry()
        self.history = HistoryStore(cfg.max_history_keys, on_evict=self._evicted)
        self.hot = HotPathDetector(cfg.hot_path_calls_per_sec,
                                   max_operations=cfg.max_history_keys)
        self.dispatcher = dispatcher(cfg, self.registry, self.history, self.hot,
                                     self.devices, clock, timer)

    def _renew_lock(self) -> None:
        self.telemetry_lock = threading.Lock()

    # ------------------------------------------------------------------ telemetry

    def telemetry_on(self, source: MetricsSource, tracer_provider: TracerProvider | None = None,
                     meter_provider: MeterProvider | None = None) -> None:
        """Export spans (when ``config.tracing``) and metrics read from ``source`` (the
        runtime); what ``AdaptiveRuntime._telemetry_on`` does for ``ar.telemetry``.

        Into the given providers, else the global ones. Already exporting: kept as it is,
        unless a provider is given (then what was admitted is flushed and export moves).
        No spans while ``configure()`` exports no traces (``OTEL_TRACES_EXPORTER=none``).
        """
        if tracer_provider is not None or meter_provider is not None:
            self.telemetry_off(timeout_s=5.0)
        with self.telemetry_lock:
            if not self.spans.recording:
                self.spans = span_sink(
                    enabled=self.config.tracing and instrumentation.records_spans(
                        tracer_provider),
                    timer=self.timer, tracer_provider=tracer_provider)
            if not self.metrics.recording:  # metrics whatever config.tracing says
                self.metrics = metrics_sink(source, meter_provider=meter_provider)
            self._hook_dispatcher()

    def _hook_dispatcher(self) -> None:
        """Hand the dispatcher the sinks (the no-ops while telemetry is off). Telemetry lock
        held."""
        self.dispatcher.attach(self.spans, self.metrics)

    def telemetry_off(self, timeout_s: float) -> None:
        """Stop exporting; what was admitted before is flushed first."""
        with self.telemetry_lock:
            spans, self.spans = self.spans, NO_SPANS
            metrics, self.metrics = self.metrics, NO_METRICS
            self._hook_dispatcher()
        spans.shutdown(timeout_s)
        metrics.close()  # a last reading, so the shutdown export holds every call

    # ------------------------------------------------------------------ the history's callback

    def _evicted(self, operation: str, bucket: int) -> None:
        self.dispatcher.forget(operation, bucket)

    # ------------------------------------------------------------------ the history

    def history_snapshot(self) -> list[HistoryRecord]:
        """Frozen records of every key and arm with data (under the dispatcher's lock)."""
        with self.dispatcher.lock:
            return self.history.snapshot()

    def merge_history(self, records: list[HistoryRecord]) -> None:
        """Merge ``records`` into the history; every fast-path entry dropped."""
        with self.dispatcher.lock:
            self.history.merge(records)
        self._reset_routes()

    def clear_history(self) -> None:
        """Forget all learned history and hot-path state (counters are kept)."""
        with self.dispatcher.lock:
            self.history.clear()
            self.hot.clear()

    def _reset_routes(self) -> None:
        for op in self.registry:
            self.dispatcher.reset_route(op.name)

    # ------------------------------------------------------------------ a sync's two ends

    def rank_rows(self, rank: int) -> list[tuple[HistoryRecord, Origins]]:
        """What this runtime sends in a sync as ``rank`` (see ``HistoryStore.rank_rows``)."""
        with self.dispatcher.lock:
            return self.history.rank_rows(rank)

    def replace_history(self, rows: list[tuple[HistoryRecord, Origins]]) -> None:
        """Forget this runtime's history and hold ``rows`` instead (a sync's merge), every
        key's policy state started afresh (what a sync needs: the same state on every rank)
        and every fast-path entry dropped."""
        with self.dispatcher.lock:
            self.history.replace(rows)
        self._reset_routes()
