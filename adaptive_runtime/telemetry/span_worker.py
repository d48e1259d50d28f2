"""A span recorder's machinery: its bounded buffer, worker thread, flush, shutdown and fork.

The loop appends one tuple per admitted record to the buffer (:meth:`SpanWorker._enqueue`);
when it is full, records are dropped and counted, never waited for. A worker thread, started
at the first record and parked while there is nothing to do, drains the buffer in batches
and hands each record to the recorder's :class:`~.span_builders.SpanBuilder`.

In a forked child (a DataLoader worker) a recorder starts afresh: an empty buffer (what the
parent had queued is the parent's to export) and, at its first record, one worker thread of its
own; its spans carry ``process.pid`` and ``process.parent_pid``.

Every live recorder is known here: :func:`flush_all` flushes them, each flushes at exit, and
:func:`recorder_counts` counts the spans of them all, process-wide.

The worker never dies of what it runs: each record and the batch's set-up are guarded
(``_concurrency.thread_faults.survive``); should it end anyway, the next record queued (or a
flush) starts it again.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
import weakref
from collections import deque
from typing import Any

from .._concurrency.counters import counter, issued
from .._concurrency.thread_faults import note_restart, record_fault, survive
from .._process import rank_attributes
from .app_providers import flush_first
from .deadline import exit_deadline, remaining
from .span_builders import SpanBuilder

__all__ = ["DEFAULT_CAPACITY", "SpanWorker", "flush_all", "process_counts", "recorder_counts",
           "track"]

DEFAULT_CAPACITY = 8192
# Spans a queued record becomes: a call's select and execute; a step's or a hot-path change's one.
_SPANS_PER_ITEM = {"call": 2, "step": 1, "hot": 1}


class _ProcessCounts:
    """Every recorder's spans, process-wide, counted where they are admitted, made or lost
    (``_concurrency.counters``: ``next()`` is atomic, no lock on the loop's side)."""

    def __init__(self) -> None:
        self.calls = counter()  # call records queued or dropped at the buffer
        self.singles = counter()  # step and hot-path records, likewise
        self.made = counter()  # spans made that the SDK records (sent on to export)
        # spans lost before export: buffer full, telemetry shut down first, the SDK raised
        # making them, or the SDK did not record them (an unsampled parent, no SDK provider)
        self.lost = {reason: counter()
                     for reason in ("buffer_full", "shutdown", "error", "not_recorded")}

    def lose(self, reason: str, spans: int) -> None:
        counter = self.lost[reason]
        for _ in range(spans):
            next(counter)


process_counts = _ProcessCounts()


def recorder_counts() -> dict[str, int]:
    """The runtimes' spans in this process: ``admitted`` (by the trace gates; every one
    queued or dropped as the buffer was full), ``made`` (handed to the tracer provider),
    ``pending`` (queued, not made yet) and the losses before export by reason."""
    pending = 0
    for recorder in list(_recorders):
        if recorder._pid == os.getpid():
            pending += sum(_SPANS_PER_ITEM[item[0]] for item in list(recorder._buffer))
    return {"admitted": 2 * issued(process_counts.calls) + issued(process_counts.singles),
            "made": issued(process_counts.made), "pending": pending,
            **{reason: issued(counter) for reason, counter in process_counts.lost.items()}}


class SpanWorker:
    """The buffer and worker thread of a span recorder (``spans.SpanRecorder``), which sets
    ``_builder``, the maker of its records' spans, and queues records with ``_enqueue``.

    Validates ``capacity`` (records the buffer holds) and ``flush_interval_s`` (how long a
    batch may gather). Never raises into the caller, and its thread never dies of what it
    runs: an SDK or exporter error is logged once per kind and counted in ``errors`` (and in
    ``ar.telemetry.stats().thread_faults``).
    """

    _builder: SpanBuilder

    def __init__(self, *, capacity: int, flush_interval_s: float) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        if flush_interval_s <= 0:
            raise ValueError(f"flush_interval_s must be > 0, got {flush_interval_s}")
        self.capacity = capacity
        self._flush_interval_s = flush_interval_s
        self._buffer: deque[tuple[Any, ...]] = deque()
        # counters bumped from any thread (see _concurrency.counters)
        self._dropped = counter()
        self._spans = counter()
        self._errors = counter()
        self._item_spans = 0  # spans made of the record being turned into spans (worker)
        self._wake = threading.Event()
        self._parked = False  # the worker sleeps until woken (see _park)
        self._idle = threading.Event()
        self._idle.set()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._start_lock = threading.Lock()
        self._append_lock = threading.Lock()
        # the span attributes saying a forked child made the spans (none in the first process)
        self._process_attrs: dict[str, int] = {}

    # ------------------------------------------------------------------ loop side

    def _enqueue(self, item: tuple[Any, ...]) -> None:
        if self._stop:
            next(self._dropped)
            process_counts.lose("shutdown", _SPANS_PER_ITEM[item[0]])
            return
        buffer = self._buffer
        if len(buffer) >= self.capacity:
            next(self._dropped)  # full: drop and count, never block the loop
            process_counts.lose("buffer_full", _SPANS_PER_ITEM[item[0]])
            return
        # Look again under a lock: look-then-append is not atomic, and producers on other
        # threads overtaking each other between the two took the buffer past its bound (by
        # up to one record per thread). Only the worker's pops run outside it, and they only
        # shorten the buffer. (Taken per admitted record, not per call: the trace gate
        # admits a few hundred a second; a full buffer is refused above without it.)
        with self._append_lock:
            if len(buffer) >= self.capacity:
                next(self._dropped)
                process_counts.lose("buffer_full", _SPANS_PER_ITEM[item[0]])
                return
            buffer.append(item)
        thread = self._thread
        if thread is None or not thread.is_alive():
            self._start_worker()  # first use, a forked child (see _after_fork), or a restart
        elif self._parked:  # the first record after a quiet spell wakes the worker, once
            self._parked = False
            self._wake.set()
        elif len(buffer) >= self.capacity // 2:
            self._wake.set()  # drain early rather than drop

    # ------------------------------------------------------------------ counters

    @property
    def dropped(self) -> int:
        """Records dropped because the buffer was full (or the recorder shut down)."""
        return issued(self._dropped)

    @property
    def spans_made(self) -> int:
        return issued(self._spans)

    @property
    def errors(self) -> int:
        return issued(self._errors)

    @property
    def pending(self) -> int:
        return len(self._buffer)

    # ------------------------------------------------------------------ worker

    def _start_worker(self) -> None:
        with self._start_lock:
            if self._pid != os.getpid():
                self._after_fork()
            thread = self._thread
            if self._stop or (thread is not None and thread.is_alive()):
                return
            if thread is not None:  # it ended abnormally (see _run): start it again
                note_restart("spans")
                self._parked = False
                self._idle.set()
            self._thread = threading.Thread(target=self._run, name="adaptive-runtime-spans",
                                            daemon=True)
            self._thread.start()

    def _after_fork(self) -> None:
        # In a forked child (a DataLoader worker) the parent's worker thread does not exist:
        # start afresh with an empty buffer (the parent exports what it had queued).
        parent, self._pid = self._pid, os.getpid()
        if parent != self._pid:
            self._process_attrs = {"process.pid": self._pid, "process.parent_pid": parent}
        self._buffer = deque()
        self._thread = None
        self._wake = threading.Event()
        self._parked = False
        self._idle = threading.Event()
        self._idle.set()
        self._start_lock = threading.Lock()
        self._append_lock = threading.Lock()

    def _run(self) -> None:
        try:
            self._work()
        except BaseException as exc:  # (what no guard stops): counted; the next record or
            record_fault("spans", "worker", exc)  # flush starts the thread again
            self._idle.set()

    def _work(self) -> None:
        while True:
            with survive("spans", "wait") as waiting:
                if not self._buffer and not self._stop:
                    self._park()
                if not self._stop:
                    # let a batch gather (a flush, a half-full buffer or shutdown cut this
                    # short; not after shutdown woke the parked worker: it would wait the
                    # whole interval)
                    self._wake.wait(self._flush_interval_s)
                    self._wake.clear()
            if waiting.failed:  # (never spin on a wait that keeps failing)
                time.sleep(self._flush_interval_s)
            self._drain()
            if self._stop and not self._buffer:
                return

    def _park(self) -> None:
        # Sleep until there is work: a thread waking on a timer costs the loop GIL hand-offs
        # and CPU even when it finds nothing to do. Announce first, then look again, so a
        # record appended meanwhile is either seen here or sees _parked and wakes us.
        self._parked = True
        if not self._buffer and not self._stop:
            self._wake.wait()
        self._parked = False
        self._wake.clear()

    def _drain(self) -> None:
        """Make the spans of everything queued."""
        buffer = self._buffer
        if not buffer:
            self._idle.set()
            return
        self._idle.clear()
        builder = self._builder
        try:
            tracer = None
            with survive("spans", "tracer"):
                tracer = builder.tracer()  # (None: each record below fails, counted lost)
                # (the provider's flush and shutdown make queued spans first: app_providers)
                flush_first(builder.tracer_provider, flush_all)
            # (a distributed job's rank, read per batch: the process group may come up later)
            rank: dict[str, int] = {}
            with survive("spans", "rank lookup"):
                rank = rank_attributes()
            builder.rank_attrs = {**rank, **self._process_attrs}
            while buffer:
                try:
                    item = buffer.popleft()
                except IndexError:  # (shutdown() gave up on the rest meanwhile)
                    break
                self._item_spans = 0
                try:
                    if item[0] == "call":
                        builder.call_spans(tracer, item[1], item[2])
                    elif item[0] == "step":
                        builder.step_span(*item[1:])
                    else:
                        builder.transition_span(tracer, item[1], item[2], item[3])
                except BaseException as exc:  # observability never breaks the caller
                    process_counts.lose("error", _SPANS_PER_ITEM[item[0]] - self._item_spans)
                    next(self._errors)
                    if not isinstance(exc, Exception):
                        raise  # (counted lost; _run counts the fault, the thread ends)
                    record_fault("spans", f"{item[0]} record", exc)
        finally:
            self._idle.set()

    def _ended(self, recording: bool) -> None:
        """Count one span made (``recording``: the SDK recorded it and passed it on)."""
        self._item_spans += 1
        next(self._spans)
        if recording:
            next(process_counts.made)
        else:
            process_counts.lose("not_recorded", 1)

    # ------------------------------------------------------------------ lifecycle

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Make spans of everything queued so far; ``False`` if ``timeout_s`` ran out."""
        deadline = time.monotonic() + timeout_s
        if self._stop:  # (shut down: nothing is queued any more, and no worker to start)
            return not self._buffer
        if self._thread is None or self._pid != os.getpid():
            self._drain()  # no worker (yet): do it here
            return not self._buffer
        if not self._thread.is_alive():
            self._start_worker()  # (it ended abnormally: see _run)
        while self._buffer or not self._idle.is_set():
            self._wake.set()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._idle.wait(min(remaining, 0.05))
            if self._buffer:
                time.sleep(0.001)
        return True

    def shutdown(self, timeout_s: float = 5.0) -> bool:
        """Flush, stop the worker; later submissions are dropped (and counted). Returns
        within about ``timeout_s``: what is still queued then is given up on, counted as
        dropped (``shutdown``), and ``False`` is returned."""
        deadline = time.monotonic() + timeout_s
        flushed = self.flush(timeout_s)
        self._stop = True
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(max(deadline - time.monotonic(), 0.0))
        if self._pid == os.getpid():
            # (the worker may still be draining: each record is popped by one thread only)
            buffer = self._buffer
            while True:
                try:
                    item = buffer.popleft()
                except IndexError:
                    break
                flushed = False
                next(self._dropped)
                process_counts.lose("shutdown", _SPANS_PER_ITEM[item[0]])
        return flushed


_recorders: weakref.WeakSet[SpanWorker] = weakref.WeakSet()


def track(recorder: SpanWorker) -> None:
    _recorders.add(recorder)
    # Flush at exit. Registered per recorder, when it is made: atexit runs handlers last-in
    # first-out, so this runs before the shutdown of a tracer provider made earlier (the SDK
    # registers one per provider) — the spans reach the provider while it still exports.
    ref = weakref.ref(recorder)

    def flush_at_exit() -> None:
        live = ref()
        if live is not None:
            # (within the exit's one telemetry deadline, shared with the providers' shutdown)
            live.flush(timeout_s=remaining(exit_deadline()))

    atexit.register(flush_at_exit)


def flush_all(timeout_s: float) -> bool:
    """Make the spans of every live recorder's queued records (``False``: ``timeout_s`` ran
    out first). What the SDK then does with them is the tracer provider's business."""
    deadline = time.monotonic() + timeout_s
    flushed = True
    for recorder in list(_recorders):
        flushed = recorder.flush(max(deadline - time.monotonic(), 0.0)) and flushed
    return flushed


def _reinit_after_fork() -> None:
    for recorder in list(_recorders):
        recorder._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_after_fork)
