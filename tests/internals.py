"""The one place the tests touch a runtime's private state, and why.

Tests drive a runtime through its public API: ``rt.stats()`` (``recording_spans`` among
them), ``rt.step_hooks()`` (its span sink and trace gate), ``rt.flush_telemetry()``,
``ar.telemetry.instrument(rt, ...)`` and ``ar.telemetry.uninstrument(rt)``. A few are white-box
tests of insides no user has reason to reach, and a public seam for them would be API made for
tests only:

- fork safety: a forked child must not wait for a lock its parent's thread held (the
  dispatcher's, the registry's, the runtime's telemetry lock);
- bounds on internal state: the device timings kept waiting, the hot-path detector's and trace
  gate's per-operation and per-key entries, the selection counters' labels;
- the hot-path detector's rate, to say how far from the threshold an operation is;
- the history file's saver: saving as the exit handler does, in a parent and a forked child;
- faults injected into the package's threads (``tests/reliability/test_thread_faults.py``):
  a span recorder's span maker and CPU clock, the history a saver reads, the thread-pool
  watch a timed call polls;
- sinks the test makes, handed to the dispatcher (fake sinks that count or cost time, a
  ``RuntimeMetrics`` with its own queue bound, a span recorder with a tiny buffer, attached
  although ``config.tracing`` is off, or whose measured cost the trace gate never hears of),
  and a span recorder's worker thread and buffer.

Every such read and write is here, in a small function named for what it reaches, so a change
of the runtime's insides breaks this module and not tests all over the suite. Test modules
import it as ``internals`` (``tests/`` is on ``sys.path``, as for ``required``).
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Sized
from typing import Any

from opentelemetry.trace import TracerProvider

import adaptive_runtime as ar
from adaptive_runtime.telemetry.spans import SpanRecorder

__all__ = [
    "attach_sinks",
    "attach_span_recorder",
    "dispatcher_lock",
    "forget_logged_thread_faults",
    "history_saver",
    "history_store",
    "hot_path_entries",
    "hot_path_rate",
    "pending_device_timings",
    "registry_lock",
    "replace_span_buffer",
    "select_labels",
    "selection_counters",
    "span_builder",
    "span_worker_thread",
    "telemetry_lock",
    "thread_watch",
    "trace_gate_keys",
]


# ---------------------------------------------------------------------------- locks (fork safety)


def dispatcher_lock(rt: ar.AdaptiveRuntime) -> threading.Lock:
    """The lock the history, the policy and the counters are read and changed under."""
    return rt._dispatcher.lock


def registry_lock(rt: ar.AdaptiveRuntime) -> Any:
    """The operation registry's lock (taken by ``rt.register``)."""
    return rt._registry._lock


def telemetry_lock(rt: ar.AdaptiveRuntime) -> threading.Lock:
    """The lock switching the runtime's telemetry on and off takes."""
    return rt._parts.telemetry_lock


# ---------------------------------------------------------------------------- bounded state


def pending_device_timings(rt: ar.AdaptiveRuntime) -> Sized:
    """GPU calls timed with device events whose events have not completed yet (bounded by
    ``MAX_PENDING_TIMINGS``)."""
    return rt._dispatcher._settler.pending


def hot_path_entries(rt: ar.AdaptiveRuntime) -> Sized:
    """The hot-path detector's per-operation windows."""
    return rt._dispatcher._hot._ops


def hot_path_rate(rt: ar.AdaptiveRuntime, operation: str) -> float:
    """The hot-path detector's reading of ``operation``'s calls per second."""
    return rt._dispatcher._hot.rate(operation)


def trace_gate_keys(rt: ar.AdaptiveRuntime) -> Sized:
    """The trace gate's per-key state (token buckets, banked calls)."""
    _sink, gate = rt.step_hooks()
    return gate._keys


def select_labels(rt: ar.AdaptiveRuntime) -> Collection[str]:
    """The operation names ``select()`` counts under their own label (the rest: ``OTHER``)."""
    return rt._dispatcher._select_labels


def selection_counters(rt: ar.AdaptiveRuntime) -> Sized:
    """The selection counters, one per (label, arm, reason) seen."""
    return rt._dispatcher._selections


# ---------------------------------------------------------------------------- history file


def history_saver(rt: ar.AdaptiveRuntime) -> Any:
    """The saver of the runtime's ``history_path`` file (``save_if_changed()``, ``at_exit``,
    ``stop()``), or ``None`` when the runtime saves no file."""
    return getattr(rt, "_history_saver", None)


# ---------------------------------------------------------------------------- sinks


def attach_sinks(rt: ar.AdaptiveRuntime, *, spans: Any = None, metrics: Any = None) -> None:
    """Hand the dispatcher these sinks in place of the runtime's own (each kept where
    ``None``). The runtime still holds its own: ``rt.flush_telemetry()``, ``rt.trace_counts()``
    and switching telemetry off see those, not these."""
    rt._dispatcher.attach(rt._parts.spans if spans is None else spans,
                          rt._parts.metrics if metrics is None else metrics)


def attach_span_recorder(rt: ar.AdaptiveRuntime, tracer_provider: TracerProvider,
                         **recorder_args: Any) -> SpanRecorder:
    """A :class:`SpanRecorder` into ``tracer_provider`` on the runtime's timer, made with
    ``recorder_args`` (``capacity=``, ...) and attached as the runtime's span sink whatever
    ``config.tracing`` says: what ``ar.telemetry.instrument`` does otherwise. The runtime's
    metrics sink is kept. ``rt.flush_telemetry()``, ``rt.trace_counts()`` and
    ``ar.telemetry.uninstrument(rt)`` see it, as they see one ``instrument`` made."""
    parts = rt._parts
    recorder = SpanRecorder(timer=parts.timer, tracer_provider=tracer_provider, **recorder_args)
    with parts.telemetry_lock:
        parts.spans = recorder
        parts.dispatcher.attach(recorder, parts.metrics)
    return recorder


def span_worker_thread(recorder: SpanRecorder) -> threading.Thread | None:
    """The recorder's worker thread (``None`` until its first record, and in a forked child
    until the child's first record)."""
    return recorder._thread


def replace_span_buffer(recorder: SpanRecorder, buffer: Any) -> None:
    """Give the recorder ``buffer`` (a ``deque`` stand-in that watches its length) as the
    buffer its records queue in. Before its first record."""
    recorder._buffer = buffer


# ---------------------------------------------------------------------------- thread faults


def span_builder(recorder: SpanRecorder) -> Any:
    """What makes the recorder's spans (``call_spans``, ``step_span``, ``hot_path_span``),
    called on its worker thread."""
    return recorder._builder


def history_store(rt: ar.AdaptiveRuntime) -> Any:
    """The runtime's history (``change_count()`` is what its saver reads)."""
    return rt._history


def thread_watch(rt: ar.AdaptiveRuntime) -> Any:
    """The thread-pool watch timed calls poll (``_read`` reads the pools' sizes)."""
    return rt._dispatcher._settler._threads


def forget_logged_thread_faults() -> None:
    """Have each kind of thread fault logged again (once per kind per process, else: a test
    that asserts the one log line must not depend on which tests ran before it)."""
    from adaptive_runtime._concurrency import thread_faults as _thread_faults

    with _thread_faults._lock:
        _thread_faults._logged.clear()
