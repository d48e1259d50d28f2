"""Which runtimes export telemetry, and switching them on and off together.

A runtime registers itself when it is built. Telemetry is *active* once ``configure()`` ran,
or once the application has installed an OpenTelemetry SDK tracer or meter provider of its
own; an active state attaches every registered runtime (and every later one). Until then a
runtime pays nothing for tracing: no span sink, so its trace gate is not even consulted.
``configure()`` told to export no traces (``OTEL_TRACES_EXPORTER=none``) activates runtimes
for metrics only: they record no spans either; so does an application that set a meter
provider and no tracer provider.

OpenTelemetry asks an instrumentation library to use whatever providers the application
sets, whenever it sets them. A provider set after the runtimes were made (OpenTelemetry set
up in ``main()`` after an import-time warm-up) is noticed by :func:`notice_providers`, which
the dispatcher calls about once a second on a timed call: two identity checks while nothing
changed; on a change, a short-lived thread attaches the runtimes (never the caller's thread:
it holds the dispatcher's lock there). A runtime ``uninstrument()`` switched off stays off.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Protocol

from opentelemetry import metrics, trace

from .._concurrency.forks import after_fork_in_child
from .._concurrency.thread_faults import survive

__all__ = ["Instrumentable", "activate", "app_has_sdk_provider", "deactivate", "instrument",
           "is_active", "notice_providers", "records_metrics", "records_spans", "register",
           "uninstrument"]


class Instrumentable(Protocol):
    """What the runtime offers telemetry: switch its span and metric export on or off."""

    def _telemetry_on(self, tracer_provider: trace.TracerProvider | None = None,
                      meter_provider: metrics.MeterProvider | None = None) -> None: ...

    def _telemetry_off(self, timeout_s: float) -> None: ...


_lock = threading.Lock()
_targets: weakref.WeakSet[Instrumentable] = weakref.WeakSet()  # type: ignore[type-var]
_configured = False
_spans_off = False  # configure() exports no traces: spans would be made only to be dropped
# runtimes uninstrument() switched off: a provider the application sets later leaves them off
_switched_off: weakref.WeakSet[Instrumentable] = weakref.WeakSet()  # type: ignore[type-var]
# the global (tracer, meter) providers at the last look (notice_providers)
_seen: tuple[object, object] | None = None


def _renew_lock() -> None:
    # (another thread may be configuring telemetry as the process forks: see _concurrency.forks)
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


def app_has_meter_provider() -> bool:
    """Whether the global meter provider is a real one set by the application."""
    return records_metrics(metrics.get_meter_provider())


def is_active() -> bool:
    return _configured or app_has_sdk_provider() or app_has_meter_provider()


def records_spans(tracer_provider: trace.TracerProvider | None = None) -> bool:
    """Whether a runtime attaching now records spans: when given a tracer provider of its
    own; after ``configure()``, unless it exports no traces; else where the application has
    set a tracer provider (one with a meter provider only gets metrics)."""
    if tracer_provider is not None:
        return True
    return not _spans_off if _configured else app_has_sdk_provider()


def notice_providers() -> None:
    """Attach the runtimes to providers the application set since the last look (see the
    module's doc). Cheap while nothing changed; never raises, never blocks the caller."""
    global _seen
    seen = (trace.get_tracer_provider(), metrics.get_meter_provider())
    last = _seen
    if last is not None and seen[0] is last[0] and seen[1] is last[1]:
        return
    _seen = seen
    if _configured or not is_active():
        return  # (configure() attached them all; or nothing real to attach to yet)
    threading.Thread(target=_attach_all, name="adaptive-runtime-attach", daemon=True).start()


def _attach_all() -> None:
    with _lock:
        targets = [t for t in _targets if t not in _switched_off]
    for target in targets:
        with survive("thread_watch", "attaching to the application's providers"):
            target._telemetry_on()


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
        _switched_off.discard(target)
    target._telemetry_on(tracer_provider, meter_provider)


def uninstrument(target: Instrumentable, *, timeout_s: float = 5.0) -> None:
    """Stop exporting ``target``'s spans and metrics now, whoever switched them on
    (:func:`instrument`, ``configure()`` or an application's SDK provider): what it admitted is
    made into spans first, within ``timeout_s`` (the rest is dropped, counted), and its metrics
    are read one last time. ``target`` stays known here: a later ``configure()`` or
    :func:`instrument` switches it on again (a provider the application sets later does
    not)."""
    with _lock:
        _switched_off.add(target)
    target._telemetry_off(timeout_s)


def activate(*, spans: bool = True) -> None:
    """Mark telemetry configured and attach every registered runtime (``spans=False``: for
    metrics only, no span recorder and so no span worker thread)."""
    global _configured, _spans_off, _seen
    with _lock:
        _seen = (trace.get_tracer_provider(), metrics.get_meter_provider())
        _configured = True
        _spans_off = not spans
        _switched_off.clear()
        targets = list(_targets)
    for target in targets:
        target._telemetry_on()


def deactivate(timeout_s: float = 5.0) -> None:
    """Flush and detach every registered runtime (before the providers shut down), all of
    them within ``timeout_s``: what a runtime has not flushed by then is dropped, counted."""
    global _configured, _spans_off, _seen
    deadline = time.monotonic() + timeout_s
    with _lock:
        # (the providers configure() set stay global, shut down: not the application's own
        # providers, set later, for notice_providers to attach to)
        _seen = (trace.get_tracer_provider(), metrics.get_meter_provider())
        _configured = False
        _spans_off = False
        targets = list(_targets)
    for target in targets:
        target._telemetry_off(max(deadline - time.monotonic(), 0.0))
