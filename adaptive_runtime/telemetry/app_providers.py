"""The runtime's spans flushed first when an application flushes or shuts down its own
tracer provider.

A runtime's spans are made after the fact, on its span worker (see :mod:`.spans`): at any
moment some admitted calls are still records in the worker's buffer. An application that
calls ``tracer_provider.force_flush()`` or ``shutdown()`` on its own SDK provider expects every
span of the work done so far to be delivered, the runtime's included. So the first time a
worker makes spans into an SDK tracer provider it adds one span processor to it,
:class:`FlushFirst`, that does nothing per span and, on ``force_flush`` and ``shutdown``,
makes the spans of every queued record first.

Order matters: the SDK calls its processors in the order they were added, and an application
adds its exporting processor (``BatchSpanProcessor``) before any runtime exists. A flush of
ours that came after the batch processor's would queue the spans into it once it had
exported; a shutdown of ours after its shutdown would hand them to a stopped processor, which
drops them. The specification has processors invoked in the order they were registered, and
the SDK offers no public way to add one anywhere but last (the order's cost to processors
added later: open-telemetry/opentelemetry-specification#987, closed with the order kept). So
ours is put first in the SDK's own processor tuple, under its lock; where that tuple is not
found (another SDK, a later version), it stays last and a flush of ours then flushes the
provider again, which delivers what it queued (the re-entered flush of ours returns at once;
a shutdown there still loses the queued spans). ``tests/unit/test_flush_first.py`` fails
once the SDK's tuple is gone, or once ``add_span_processor`` takes a position.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["flush_first"]

_log = logging.getLogger(__name__)

_hooked: weakref.WeakSet[Any] = weakref.WeakSet()  # providers given a FlushFirst
_hooked_lock = threading.Lock()
_inside = threading.local()  # (a flush of ours re-entered through the provider's flush)


def flush_first(provider: Any, flush: Callable[[float], bool]) -> None:
    """Give ``provider`` (an OpenTelemetry SDK tracer provider; any other is left alone) a
    :class:`FlushFirst` processor calling ``flush(timeout_s)`` — making every queued
    record's spans — before its own processors flush or shut down. Once per provider."""
    add = getattr(provider, "add_span_processor", None)
    if add is None:  # (the API's no-op or proxy provider: nothing is exported there)
        return
    with _hooked_lock:
        try:
            if provider in _hooked:
                return
            _hooked.add(provider)
        except TypeError:  # not weak-referenceable: hooked on every batch would pile up
            return
    processor = _processor_class()(provider, flush)
    add(processor)
    _move_first(provider, processor)


def _move_first(provider: Any, processor: Any) -> None:
    """Put ``processor`` before the provider's other processors (see the module's doc)."""
    chain = getattr(provider, "_active_span_processor", None)
    processors = getattr(chain, "_span_processors", None)
    lock = getattr(chain, "_lock", None)
    if not isinstance(processors, tuple) or lock is None:
        _log.debug("adaptive_runtime: the tracer provider's processors are not a tuple here; "
                   "the runtime's flush runs after theirs and flushes them again")
        return
    with lock:
        rest = tuple(p for p in chain._span_processors if p is not processor)
        chain._span_processors = (processor, *rest)


_made: type | None = None


def _processor_class() -> type:
    """:class:`FlushFirst`, made on first use: it subclasses the SDK's ``SpanProcessor``
    (the SDK calls hooks the API does not define), and importing this module must not load
    the SDK (``import adaptive_runtime`` runs on the API alone)."""
    global _made
    if _made is None:
        from opentelemetry.sdk.trace import SpanProcessor

        class FlushFirst(SpanProcessor):
            """Makes the runtime's queued spans before the provider's processors flush or
            shut down; nothing per span."""

            def __init__(self, provider: Any, flush: Callable[[float], bool]) -> None:
                self._provider = weakref.ref(provider)
                self._flush = flush

            def force_flush(self, timeout_millis: int = 30_000) -> bool:
                if getattr(_inside, "flushing", False):
                    return True
                try:
                    flushed = self._flush(timeout_millis / 1000.0)
                    provider = self._provider()
                    if provider is not None and not _is_first(provider, self):
                        # (last in line: the processors before ours flushed already; again)
                        _inside.flushing = True
                        try:
                            flushed = provider.force_flush(timeout_millis) and flushed
                        finally:
                            _inside.flushing = False
                    return flushed
                except Exception as exc:  # (the application's flush: never broken by ours)
                    _log.warning("adaptive_runtime: flushing the runtime's spans: %r", exc)
                    return False

            def shutdown(self) -> None:
                try:
                    self._flush(_SHUTDOWN_FLUSH_S)
                except Exception as exc:  # (likewise the application's shutdown)
                    _log.warning("adaptive_runtime: flushing the runtime's spans: %r", exc)

        _made = FlushFirst
    return _made


# (the SDK gives a processor's shutdown no deadline; the runtime's own exit bound is 2 s)
_SHUTDOWN_FLUSH_S = 2.0


def _is_first(provider: Any, processor: Any) -> bool:
    processors = getattr(getattr(provider, "_active_span_processor", None),
                         "_span_processors", ())
    return bool(processors) and processors[0] is processor
