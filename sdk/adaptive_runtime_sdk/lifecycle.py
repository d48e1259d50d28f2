"""How what ``configure()`` set up ends: at interpreter exit, in forked children, as a
``multiprocessing`` worker ends.

Shutdown (also at interpreter exit) flushes the runtimes' span buffers first, then the
providers, so every span the trace gate admitted reaches the exporter.

Forked children (``DataLoader(num_workers=..., multiprocessing_context="fork")`` workers, a
``multiprocessing`` fork pool) use the runtime as their parent set it up, and:

- export their spans, through their own span worker and the SDK's batch processor (which the
  SDK restarts, empty, in the child): what the parent had queued is exported by the parent
  only. An OTLP exporter is made afresh in the child on its first export (the inherited one's
  connections are the parent's); the OTLP/JSON file is appended to beside the parent (see
  :mod:`~adaptive_runtime_sdk.json_lines`). Their spans carry ``process.pid``.
- export no metrics: the child's counters start as a copy of the parent's, and exporting them
  under the parent's resource would duplicate its series. The SDK restarts the periodic metric
  reader in every child; here its exporter is set to dropping and the reader shut down.
  Metrics stay the parent's. (The SDK renews none of its metric locks in a child: should the
  fork land while the parent's reader collects, that restarted thread waits forever on one.
  It exports nothing, and nothing the child's calls do takes that lock.)
- flush their spans when a ``multiprocessing`` worker ends (it leaves through ``os._exit``,
  which runs no ``atexit`` handler): at most ``WORKER_EXIT_FLUSH_S`` seconds.

A spawned worker starts a fresh interpreter: nothing is set up there unless it calls
``configure()`` itself (then it exports as any process does, at exit included).
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable, Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from adaptive_runtime._concurrency.forks import after_fork_in_child
from adaptive_runtime._imported import imported
from adaptive_runtime.telemetry import instrumentation
from adaptive_runtime.telemetry.deadline import exit_deadline, remaining
from adaptive_runtime.telemetry.spans import flush_all

from . import handle
from .providers import ProcessProviders, inherited_from_parent, installed

__all__ = ["WORKER_EXIT_FLUSH_S"]

_log = logging.getLogger(__name__)

#: At most this long, a ``multiprocessing`` worker (a DataLoader's) flushes its spans as it ends:
#: a DataLoader waits 5 s for a finished worker before it terminates it.
WORKER_EXIT_FLUSH_S = 2.0


def _at_exit() -> None:
    # (one deadline for the whole exit, the runtimes' own at-exit flushes included)
    deadline = exit_deadline()
    try:
        # After an explicit shutdown() everything was sent or given up on, and the exporters
        # are off: the providers are stopped without waiting on them again (a metric reader
        # still inside an export abandoned to a collector that never answers would hold the
        # exit for a second deadline).
        explicit = handle._current is None
        handle.shutdown(remaining(deadline))
        with handle._lock:
            installed.shutdown(0.0 if explicit else remaining(deadline))
    except Exception as exc:  # never turn a clean exit into a traceback
        _log.warning("adaptive_runtime telemetry shutdown at exit: %r", exc)


# Registered at import, before any span recorder exists: atexit runs handlers last-in
# first-out, so the recorders' own flushes come first and this one shuts the providers last
# (they are made with shutdown_on_exit=False; the SDK's handler would run too early, twice).
atexit.register(_at_exit)


# ---------------------------------------------------------------------------- forked children


def _after_fork_in_child() -> None:
    """Right after a fork, in the child (registered at import, see ``_concurrency.forks``)."""
    handle._lock = threading.Lock()  # (another thread may have been configuring at the fork)
    exporter = installed.span_exporter
    if exporter is not None and exporter.remake is not None and exporter.target is not None:
        # The inherited OTLP exporter's pooled connection (or gRPC channel) is the parent's:
        # two processes writing requests into one connection read each other's answers.
        # Kept referenced, never closed or finalised here; the child's own is made on its
        # first export, on the SDK's export thread rather than inside the fork.
        inherited_from_parent.append(exporter.replace(_MadeOnFirstUse(exporter.remake)))
    current = handle._current
    if current is not None and current._prometheus_server is not None:
        # No thread serves it here: shutdown() would wait for one forever. Close this
        # process's copy of the listening socket (the parent's keeps serving).
        server, current._prometheus_server = current._prometheus_server, None
        try:
            server.server_close()
        except OSError as exc:
            _log.debug("adaptive_runtime: closing the inherited Prometheus socket: %r", exc)
    mp_util = imported("multiprocessing.util")
    if mp_util is not None:
        # A multiprocessing child (a DataLoader worker) clears its finalizers as it starts,
        # then runs the after-fork hooks registered for it: ours registers the exit flush.
        mp_util.register_after_fork(installed, _at_worker_start)


after_fork_in_child(_after_fork_in_child)


def _at_worker_start(_process_providers: ProcessProviders) -> None:
    from multiprocessing.util import Finalize

    # exitpriority >= 0: run by the worker's exit, before its queues are closed (10)
    Finalize(None, _flush_at_worker_exit, exitpriority=20)


def _flush_at_worker_exit(timeout_s: float = WORKER_EXIT_FLUSH_S) -> None:
    """A multiprocessing worker ends: hand its queued spans to the SDK and export them,
    waiting at most ``timeout_s``."""
    if not instrumentation.is_active():
        return

    def flush() -> None:
        deadline = time.monotonic() + timeout_s
        try:
            flush_all(timeout_s)
            provider = installed.tracer_provider or trace.get_tracer_provider()
            force_flush = getattr(provider, "force_flush", None)
            if force_flush is not None:
                force_flush(max(int((deadline - time.monotonic()) * 1000), 0))
        except Exception as exc:  # never break the worker's exit
            _log.debug("adaptive_runtime: flushing spans as a worker ends: %r", exc)

    # (on a thread of its own: an exporter's own timeout may be longer than ours, and the
    # process ends right after, daemon threads and all)
    thread = threading.Thread(target=flush, name="adaptive-runtime-exit-flush", daemon=True)
    thread.start()
    thread.join(timeout_s)


class _MadeOnFirstUse(SpanExporter):
    """A span exporter made by ``make()`` on the first export (a forked child's own)."""

    def __init__(self, make: Callable[[], SpanExporter]) -> None:
        self._make = make
        self._exporter: SpanExporter | None = None

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._exporter is None:
            self._exporter = self._make()
        return self._exporter.export(spans)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._exporter.force_flush(timeout_millis) if self._exporter else True

    def shutdown(self) -> None:
        if self._exporter is not None:
            self._exporter.shutdown()
