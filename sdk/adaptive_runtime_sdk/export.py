"""The span processor of ``configure()``'s tracer provider: batches exported off the caller's
thread, every span accounted for, flushes and shutdowns that end on time.

Why not the SDK's ``BatchSpanProcessor``: its ``force_flush`` ignores its timeout and exports
on the calling thread for as long as the exporter takes (open-telemetry/opentelemetry-python
#4568, open; the SDK's source names it in a TODO as of 1.45), and it hands the exporter no
export timeout (#4555). Its ``shutdown`` waited for the export in progress and its retries
(a process with its collector down took 15-22 s to exit) until PR #4638 bounded it at its
``timeout_millis``, 30 s by default; a span it drops is counted only by the SDK's own metrics
(``OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED``), not beside the spans still pending.
``tests/unit/test_upstream_gaps.py`` fails once the SDK's flush keeps to its timeout. Here:

- ``on_end`` (whatever thread ends a span: the runtimes' span worker, the application's own
  threads) appends to a bounded queue and at most sets an event; full → the span is dropped
  and counted (``queue_full``). It never waits and never exports.
- Exports run only on the processor's worker thread, a batch at a time.
- :meth:`flush` asks the worker to export what is queued and waits at most its timeout;
  :meth:`abandon` then gives up on what is still queued, counted (``shutdown``). Whoever
  calls it also stops the exporter (see ``handle``), which cuts the export in progress short.
- Every span that reached the processor ends exactly once as exported, dropped (by reason) or
  still pending: ``received == exported + dropped + pending``.
- The worker never dies of what it runs (an exporter that raises, say): each wait and batch is
  guarded (``_concurrency.thread_faults``: counted, logged once per kind); should it end
  anyway, the next span ended (or a flush) starts it again.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Mapping
from typing import Any

from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, attach, detach, set_value
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from adaptive_runtime._concurrency.counters import counter, issued
from adaptive_runtime._concurrency.thread_faults import note_restart, record_fault, survive
from adaptive_runtime.errors import ConfigError

__all__ = ["DROP_REASONS", "BoundedSpanProcessor", "batch_settings"]

#: Why the export pipeline lost a span: its queue was full, the exporter gave up on it
#: (collector down or refusing, after the exporter's own retries), or telemetry shut down
#: before it was sent (the deadline passed, or it ended after shutdown).
DROP_REASONS = ("queue_full", "export_failed", "shutdown")

# The SDK's BatchSpanProcessor defaults, read from the same OTEL_BSP_* variables.
_BATCH_DEFAULTS = {"OTEL_BSP_MAX_QUEUE_SIZE": 2048, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": 512,
                   "OTEL_BSP_SCHEDULE_DELAY": 5000}


def batch_settings(env: Mapping[str, str]) -> tuple[int, int, float]:
    """``(max_queue_size, max_export_batch_size, schedule_delay_s)`` from ``OTEL_BSP_*``
    (the SDK's defaults where unset); :class:`ConfigError` naming the variable if bad."""
    values: dict[str, int] = {}
    for name, default in _BATCH_DEFAULTS.items():
        raw = env.get(name, "").strip()
        if not raw:
            values[name] = default
            continue
        try:
            values[name] = int(raw)
        except ValueError:
            raise ConfigError(f"{name}={raw!r} is not an integer (> 0)") from None
        if values[name] <= 0:
            raise ConfigError(f"{name} must be > 0, got {raw!r}")
    queue = values["OTEL_BSP_MAX_QUEUE_SIZE"]
    batch = values["OTEL_BSP_MAX_EXPORT_BATCH_SIZE"]
    if batch > queue:
        raise ConfigError(f"OTEL_BSP_MAX_EXPORT_BATCH_SIZE ({batch}) must be <= "
                          f"OTEL_BSP_MAX_QUEUE_SIZE ({queue})")
    return queue, batch, values["OTEL_BSP_SCHEDULE_DELAY"] / 1000.0


class BoundedSpanProcessor(SpanProcessor):
    """Batches ended spans to ``exporter`` on a worker thread of its own (see the module
    docstring). ``is_runtime_span(span)`` tells the runtimes' spans from the application's
    (counted apart: the runtimes count theirs as admitted when they queue the record)."""

    def __init__(self, exporter: SpanExporter, *, max_queue_size: int = 2048,
                 max_export_batch_size: int = 512, schedule_delay_s: float = 5.0,
                 is_runtime_span: Any = None) -> None:
        if max_queue_size < 1 or not 1 <= max_export_batch_size <= max_queue_size:
            raise ValueError(f"need 1 <= max_export_batch_size ({max_export_batch_size}) <= "
                             f"max_queue_size ({max_queue_size})")
        if schedule_delay_s <= 0:
            raise ValueError(f"schedule_delay_s must be > 0, got {schedule_delay_s}")
        self._exporter = exporter
        self._max_queue = max_queue_size
        self._max_batch = max_export_batch_size
        self._delay_s = schedule_delay_s
        self._is_runtime_span = is_runtime_span or (lambda span: False)
        self._queue: deque[ReadableSpan] = deque()
        # bumped on any thread ending a span (see _concurrency.counters)
        self._received = counter()
        self._received_runtime = counter()
        self._full = counter()
        self._closed_drops = counter()
        # the worker's and a flush's bookkeeping, under _lock
        self._lock = threading.Lock()
        self._exported = 0
        self._failed = 0
        self._abandoned = 0
        self._inflight = 0
        self._wake = threading.Event()
        self._done = threading.Condition(self._lock)
        self._closed = False  # after shutdown: later spans are dropped, counted
        self._stop = False
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._start_worker()
        if hasattr(os, "register_at_fork"):
            reinit = weakref.WeakMethod(self._after_fork)

            def after_fork_in_child() -> None:
                method = reinit()
                if method is not None:
                    method()

            os.register_at_fork(after_in_child=after_fork_in_child)

    # ------------------------------------------------------------------ any thread

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if not (span.context and span.context.trace_flags.sampled):
            return
        next(self._received)
        with survive("export", "span ended"):
            if self._is_runtime_span(span):
                next(self._received_runtime)
        if self._closed:
            next(self._closed_drops)
            return
        queue = self._queue
        if len(queue) >= self._max_queue:
            next(self._full)  # never wait for the exporter: drop, count
            return
        queue.append(span)
        if len(queue) >= self._max_batch and not self._wake.is_set():
            self._wake.set()
        thread = self._thread
        if thread is not None and not thread.is_alive() and not self._stop:
            self._restart()

    # ------------------------------------------------------------------ counts

    def counts(self) -> dict[str, int]:
        """``received`` (of which ``received_runtime``), ``exported``, ``pending`` and the
        drops by reason (:data:`DROP_REASONS`)."""
        with self._lock:
            exported, failed, abandoned = self._exported, self._failed, self._abandoned
            pending = len(self._queue) + self._inflight
        return {"received": issued(self._received),
                "received_runtime": issued(self._received_runtime),
                "exported": exported, "pending": pending,
                "queue_full": issued(self._full), "export_failed": failed,
                "shutdown": abandoned + issued(self._closed_drops)}

    # ------------------------------------------------------------------ worker

    def _start_worker(self) -> None:
        self._thread = threading.Thread(target=self._run, name="adaptive-runtime-export",
                                        daemon=True)
        self._thread.start()

    def _restart(self) -> None:
        """Start the worker again: it ended abnormally (see :meth:`_run`)."""
        with self._start_lock:
            thread = self._thread
            if self._stop or thread is None or thread.is_alive():
                return
            note_restart("export")
            with self._lock:  # (a batch it held when it ended is counted as failed)
                self._failed += self._inflight
                self._inflight = 0
                self._done.notify_all()
            self._start_worker()

    def _after_fork(self) -> None:
        # In a forked child: the parent's queue is the parent's to export, its worker thread
        # is not here, and its lock may have been held at the fork.
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._wake = threading.Event()
        self._queue = deque()
        self._inflight = 0
        self._start_lock = threading.Lock()
        self._start_worker()

    def _run(self) -> None:
        try:
            self._work()
        except BaseException as exc:  # (what no guard stops): counted; the next span ended
            record_fault("export", "worker", exc)  # or flush starts the thread again

    def _work(self) -> None:
        # Wakes when the queue holds a batch, on a flush, or every schedule delay; then
        # exports everything queued, a batch at a time.
        while not self._stop:
            with survive("export", "wait") as waiting:
                self._wake.wait(self._delay_s)
                self._wake.clear()
            if waiting.failed:  # (never spin on a wait that keeps failing)
                time.sleep(min(self._delay_s, 1.0))
            while self._queue and not self._stop:
                with survive("export", "batch") as batch:
                    self._export_batch()
                if batch.failed:
                    break

    def _export_batch(self) -> None:
        queue = self._queue
        batch: list[ReadableSpan] = []
        with self._lock:
            while queue and len(batch) < self._max_batch:
                try:
                    batch.append(queue.popleft())
                except IndexError:  # (abandon() emptied it meanwhile)
                    break
            self._inflight = len(batch)
        if not batch:
            return
        result = SpanExportResult.FAILURE
        try:
            # (no span of the exporter's own HTTP or gRPC calls, should they be instrumented)
            token = attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
            try:
                result = self._exporter.export(batch)
            finally:
                detach(token)
        except Exception as exc:  # an exporter bug: the batch fails, counted; the worker goes on
            record_fault("export", "export", exc)
        with self._lock:
            if self._inflight:  # (abandon() counted an in-flight batch already)
                if result is SpanExportResult.SUCCESS:
                    self._exported += len(batch)
                else:
                    self._failed += len(batch)
            self._inflight = 0
            self._done.notify_all()

    # ------------------------------------------------------------------ lifecycle

    def flush(self, timeout_s: float) -> bool:
        """Have the worker export everything queued now; ``False`` if ``timeout_s`` ran out
        first. Waits on the worker, never exports on the calling thread."""
        deadline = time.monotonic() + max(timeout_s, 0.0)
        thread = self._thread
        if thread is not None and not thread.is_alive() and not self._stop:
            self._restart()
        self._wake.set()
        with self._lock:
            # (a batch leaves the queue and becomes in flight under this lock: both zero
            # means every span queued before has been exported or counted)
            while self._queue or self._inflight:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._done.wait(min(remaining, 0.1))
                if self._queue and not self._inflight:
                    self._wake.set()  # (spans queued after the worker looked)
        return True

    def abandon(self) -> int:
        """Give up on every span not exported yet (still queued, or in the export in
        progress: its result, when it comes, is not counted again); count them as dropped
        (``shutdown``) and return how many."""
        with self._lock:
            queued = len(self._queue)
            self._queue.clear()
            lost = queued + self._inflight
            self._inflight = 0
            self._abandoned += lost
            self._done.notify_all()
        return lost

    def close(self) -> None:
        """Drop (and count) every span ended from now on."""
        self._closed = True

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.flush(timeout_millis / 1000.0)

    def shutdown(self) -> None:
        """Stop the worker (not waiting for an export in progress: see :meth:`abandon`)."""
        self._closed = True
        self._stop = True
        self._wake.set()
