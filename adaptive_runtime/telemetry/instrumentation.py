"""Which runtimes export telemetry, and switching them on and off together.

A runtime registers itself when it is built. Telemetry is *active* once ``configure()`` ran,
or when the application already installed an OpenTelemetry SDK tracer provider of its own;
an active state attaches every registered runtime (and every later one). Until then a
runtime pays nothing for tracing: no span sink, so its trace gate is not even consulted.
``configure()`` told to export no traces (``OTEL_TRACES_EXPORTER=none``) activates runtimes
for metrics only: they record no spans either.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Protocol

from opentelemetry import metrics, trace

from .._forks import after_fork_in_child

__all__ = ["Instrumentable", "activate", "app_has_sdk_provider", "deactivate", "instrument",
           "is_active", "records_metrics", "records_spans", "register", "uninstrument"]


class Instrumentable(Protocol):
    """What the runtime offers telemetry: switch its span and metric export on or off."""

    def _telemetry_on(self, tracer_provider: trace.TracerProvider | None = None,
                      meter_provider: metrics.MeterProvider | None = None) -> None: ...

    def _telemetry_off(self, timeout_s: float) -> None: ...


_lock = threading.Lock()
_targets: weakref.WeakSet[Instrumentable] = weakref.WeakSet()  # type: ignore[type-var]
_configured = False
_spans_off = False  # configure() exports no traces: spans would be made only to be dropped


def _renew_lock() -> None:
    # (another thread may be configuring telemetry as the process forks: see _forks)
    global _lock
    _lock = threading.Lock()


after_fork_in_child(_renew_lock)


def app_has_sdk_provider() -> bool:
    """Whether the global tracer provider is a real SDK one set by the application."""
    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def records_metrics(provider: metrics.MeterProvider) -> bool:
    """Whether ``provider`` is a real meter provider: neither the API's no-op one nor the
    stand-in the API hands out until an application sets one.

    Told from public surface only (no ``opentelemetry.metrics._internal`` type): the
    specification requires a real provider to offer ``force_flush`` and ``shutdown`` (the SDK's
    does), and the API's two placeholders offer neither.
    """
    return (not isinstance(provider, metrics.NoOpMeterProvider)
            and callable(getattr(provider, "force_flush", None))
            and callable(getattr(provider, "shutdown", None)))


def is_active() -> bool:
    return _configured or app_has_sdk_provider()


def records_spans(tracer_provider: trace.TracerProvider | None = None) -> bool:
    """Whether a runtime attaching now records spans: not while ``configure()`` exports no
    traces, unless the runtime is given a tracer provider of its own."""
    return tracer_provider is not None or not _spans_off


def register(target: Instrumentable) -> None:
    """Track ``target``; attach it now if telemetry is already active."""
    with _lock:
        _targets.add(target)
        active = is_active()
    if active:
        target._telemetry_on()


def instrument(target: Instrumentable, *, tracer_provider: trace.TracerProvider | None = None,
               meter_provider: metrics.MeterProvider | None = None) -> None:
    """Export ``target``'s spans and metrics now, whatever the global state (an explicit
    opt-in): into ``tracer_provider`` / ``meter_provider`` when given (an application with
    several providers, a test), else into the global ones."""
    with _lock:
        _targets.add(target)
    target._telemetry_on(tracer_provider, meter_provider)


def uninstrument(target: Instrumentable, *, timeout_s: float = 5.0) -> None:
    """Stop exporting ``target``'s spans and metrics now, whoever switched them on
    (:func:`instrument`, ``configure()`` or an application's SDK provider): what it admitted is
    made into spans first, within ``timeout_s`` (the rest is dropped, counted), and its metrics
    are read one last time. ``target`` stays known here: a later ``configure()`` or
    :func:`instrument` switches it on again."""
    target._telemetry_off(timeout_s)


def activate(*, spans: bool = True) -> None:
    """Mark telemetry configured and attach every registered runtime (``spans=False``: for
    metrics only, no span recorder and so no span worker thread)."""
    global _configured, _spans_off
    with _lock:
        _configured = True
        _spans_off = not spans
        targets = list(_targets)
    for target in targets:
        target._telemetry_on()


def deactivate(timeout_s: float = 5.0) -> None:
    """Flush and detach every registered runtime (before the providers shut down), all of
    them within ``timeout_s``: what a runtime has not flushed by then is dropped, counted."""
    global _configured, _spans_off
    deadline = time.monotonic() + timeout_s
    with _lock:
        _configured = False
        _spans_off = False
        targets = list(_targets)
    for target in targets:
        target._telemetry_off(max(deadline - time.monotonic(), 0.0))
