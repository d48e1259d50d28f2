"""An application's own tracer provider flushes the runtime's queued spans first.

The runtime makes its spans on a worker thread; at any moment some admitted calls are still
records. These cases hand a runtime a real SDK tracer provider whose batch processor would
wait 30 s, then flush or shut the provider down as an application does, and look at what the
SDK's in-memory exporter got. The last two cases watch the SDK internals the ordering relies
on (``telemetry/app_providers.py``): they fail once the SDK changes them, which is the time to
look again at whether a public way to order processors exists.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from opentelemetry.sdk.trace import SynchronousMultiSpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import adaptive_runtime as ar
from adaptive_runtime.operations import DeviceProbe
from adaptive_runtime.telemetry.app_providers import flush_first


def _provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=30_000))
    return provider, exporter


def _traced_runtime(provider: TracerProvider) -> ar.AdaptiveRuntime:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(), devices=DeviceProbe(gpu=False))
    ar.telemetry.instrument(rt, tracer_provider=provider)
    return rt


def _call_spans(exporter: InMemorySpanExporter, operation: str) -> list[str]:
    return [s.name for s in exporter.get_finished_spans()
            if (s.attributes or {}).get("adaptive.operation") == operation]


@pytest.mark.parametrize("ending", ["force_flush", "shutdown"])
def test_the_providers_flush_and_shutdown_deliver_the_runtimes_queued_spans(
        ending: str) -> None:
    provider, exporter = _provider()
    rt = _traced_runtime(provider)
    try:
        rt.run("add", np.ones(3001), np.ones(3001))  # a first call: exported, queued as a record
        getattr(provider, ending)()
        assert sorted(_call_spans(exporter, "add")) == ["adaptive.execute add",
                                                        "adaptive.select add"]
    finally:
        ar.telemetry.uninstrument(rt, timeout_s=1.0)
        provider.shutdown()


def test_the_flush_hook_runs_before_the_applications_processors() -> None:
    provider, _exporter = _provider()
    flushed: list[float] = []
    flush_first(provider, lambda timeout_s: flushed.append(timeout_s) or True)
    flush_first(provider, lambda timeout_s: True)  # (once per provider)
    processors = provider._active_span_processor._span_processors
    assert len(processors) == 2
    assert type(processors[0]).__name__ == "FlushFirst"
    provider.force_flush(1000)
    assert len(flushed) == 1 and 0.0 < flushed[0] <= 1.0  # (what is left of 1 s)


def test_the_sdk_still_keeps_its_processors_in_a_tuple_it_calls_in_order() -> None:
    """What ``flush_first`` moves its processor to the front of. Fails once the SDK keeps
    them otherwise: then the hook stays last (a flush still delivers; a shutdown does not)."""
    chain = TracerProvider()._active_span_processor
    assert isinstance(chain, SynchronousMultiSpanProcessor)
    assert isinstance(chain._span_processors, tuple)
    assert hasattr(chain, "_lock")


def test_the_sdk_still_adds_a_span_processor_last_only() -> None:
    """Fails once ``add_span_processor`` takes a position (a public way to go first)."""
    assert list(inspect.signature(TracerProvider.add_span_processor).parameters) == [
        "self", "span_processor"], (
        "TracerProvider.add_span_processor now takes more than the processor: if it is a "
        "position (open-telemetry/opentelemetry-specification#987), add FlushFirst first "
        "through it and remove the reordering of the SDK's tuple (telemetry/app_providers.py).")
