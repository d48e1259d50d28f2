"""``AdaptiveRuntime``: wires registry, history, policy, gates and dispatch; the process default."""

from __future__ import annotations

import atexit
import logging
import math
import numbers
import os
import pickle
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ._default import set_default_runtime
from ._dispatch import Dispatcher
from ._dispatch.call_site import CallSite
from ._forks import after_fork_in_child, renew_after_fork
from .backend import Backend, parse_choice
from .config import RuntimeConfig
from .decision import Decision, Reason
from .errors import BackendUnavailableError
from .gating import HotPathDetector, TraceGate
from .history import (
    LEGACY_HISTORY_FORMAT,
    HistoryFile,
    HistoryRecord,
    HistoryStore,
    HistoryWarning,
    Origins,
    history_document,
    move_aside,
    parse_history_document,
    read_history_file,
    record_from_json,
    record_to_json,
    write_history_file,
)
from .keys import size_bucket
from .operations import (
    DeviceProbe,
    Implementation,
    Kind,
    Operation,
    OperationRegistry,
    name_too_long,
    utf8_encodable,
)
from .policy import Policy, PolicyConfig
from .records import SelectionKey
from .telemetry import instrumentation
from .telemetry.call_log import DEFAULT_MAX_CALLS, CallRecorder
from .telemetry.sinks import NO_METRICS, NO_SPANS, MetricsSink, SpanSink, metrics_sink, span_sink

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider


__all__ = ["AdaptiveRuntime", "RuntimeStats", "get_runtime"]

_log = logging.getLogger(__name__)

# Settings of the trace gate that are derived, not configured.
# The share of fast routine calls sampled. The CPU budget (trace_cpu_share) binds long before
# it: a sampled call takes under sampling_threshold_us and its spans ~200 us of background
# CPU, so 0.5 % of its time pays for a span every 2,000 calls or more. Measured with
# benchmarks/tracing_overhead.py (its mixed loop): 2 and 4 spans/s, +1.23 % and +1.08 % of
# the loop with every routine call eligible, 2 and 9 spans/s, +1.10 % and +2.04 % with 1 %.
# It bounds sampling only where trace_cpu_share is lifted (inf).
_TRACE_SAMPLE_RATE = 0.01
# One key's share of the per-process span budget (spans_per_sec): a key whose every call is
# remarkable (an arm failing on each call, a decision each time) cannot take the spans of
# the others. A tenth: ten such keys at once still fill the budget.
_KEY_SPAN_SHARE = 0.1


class AdaptiveRuntime:
    """Chooses GPU, SIMD or SCALAR per call from measured history, and learns from every call.

    ``config`` defaults to :meth:`RuntimeConfig.from_env`. ``builtin_ops`` registers the
    built-in operations (``dot``, ``add``, ...). ``devices`` decides which arms can run (tests
    pass ``adaptive_runtime.operations.DeviceProbe(gpu=True)``, internal, to stand in for a
    GPU); ``clock`` (seconds) and ``timer``
    (nanoseconds) are injectable for tests.

    Raises :class:`BackendUnavailableError` at construction when a forced arm cannot run here.

    Processes: a forked child (a ``DataLoader`` worker) goes on with its copy of the runtime
    (history, operations and telemetry as they were at the fork; it never saves to the
    parent's history file). A runtime pickles — for a ``spawn`` worker, whose ``Dataset``
    holds one — as a recipe: unpickling makes a fresh runtime, in the receiving process, with
    the same :class:`RuntimeConfig`, a copy of the learned history (what
    :meth:`history_snapshot` shows) and the operations registered on it — the built-in ones
    registered afresh there, the user's own with their functions, which must pickle (defined
    at module level; a ``TypeError`` names the operation otherwise). Counters, hot-path and
    quarantine state start afresh, devices are probed there (a ``DeviceProbe`` stand-in
    given to the constructor goes along), and the copy is never attached to a
    ``history_path`` file: the file stays its first runtime's to load and save.
    """

    def __init__(self, config: RuntimeConfig | None = None, *, builtin_ops: bool = True,
                 devices: DeviceProbe | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 timer: Callable[[], int] = time.perf_counter_ns) -> None:
        cfg = config if config is not None else RuntimeConfig.from_env()
        if not isinstance(cfg, RuntimeConfig):
            raise TypeError(f"config must be a RuntimeConfig or None, got {type(cfg).__name__}")
        self._build(cfg, builtin_ops, devices, clock, timer)
        if cfg.history_path is not None:
            _start_history(self, cfg.history_path)
        instrumentation.register(self)

    def _build(self, cfg: RuntimeConfig, builtin_ops: bool, devices: DeviceProbe | None,
               clock: Callable[[], float], timer: Callable[[], int]) -> None:
        """Everything but the history file and telemetry (an unpickled copy has no file)."""
        self.config = cfg
        self._devices = devices if devices is not None else DeviceProbe()
        forced = cfg.force_backend
        if forced is not None and not self._devices.available(forced):
            raise BackendUnavailableError(
                f"backend {forced.value!r} is forced (force_backend / "
                f"ADAPTIVE_RUNTIME_FORCE_BACKEND) but is not available on this machine")
        self._clock = clock
        self._timer = timer
        # Telemetry behind a seam: no-op sinks until telemetry is switched on (see sinks)
        self._spans: SpanSink = NO_SPANS
        self._metrics: MetricsSink = NO_METRICS
        self._telemetry_lock = threading.Lock()
        # (a thread configuring telemetry may hold it at a fork: see _forks)
        renew_after_fork(self, AdaptiveRuntime._renew_lock)
        self._registry = OperationRegistry()
        self._history = HistoryStore(cfg.max_history_keys, on_evict=self._evicted)
        self._hot = HotPathDetector(cfg.hot_path_calls_per_sec,
                                    max_operations=cfg.max_history_keys)
        self._dispatcher = Dispatcher(
            config=cfg, registry=self._registry, history=self._history,
            policy=Policy(PolicyConfig(min_samples=cfg.min_samples_per_arm,
                                       switch_margin=cfg.switch_margin,
                                       drift_threshold=cfg.drift_threshold)),
            hot=self._hot,
            gate=TraceGate(tracing=cfg.tracing, sampling_threshold_us=cfg.sampling_threshold_us,
                           sample_rate=_TRACE_SAMPLE_RATE, spans_per_sec=cfg.spans_per_sec,
                           spans_per_sec_per_key=_KEY_SPAN_SHARE * cfg.spans_per_sec,
                           now_s=clock(),
                           max_keys=cfg.max_history_keys,
                           cpu_share=None if cfg.trace_cpu_share == math.inf
                           else cfg.trace_cpu_share,
                           key_interval_s=cfg.trace_key_interval_s),
            devices=self._devices, clock=clock, timer=timer)
        # Why an instance attribute: ``rt.run`` is the per-call hot path, and binding the
        # dispatcher's method here saves one Python frame (~0.1 us) on every call.
        self.run = self._dispatcher.run  # type: ignore[method-assign]
        self._builtin_ops = builtin_ops
        if builtin_ops:
            from .kernels import register_builtins

            register_builtins(self)
        # (what a pickled copy registers afresh rather than carrying along)
        self._builtin_names = frozenset(self.operations)

    def _renew_lock(self) -> None:
        self._telemetry_lock = threading.Lock()

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle as a recipe for a fresh runtime (see the class docstring)."""
        with self._dispatcher.lock:
            records = self._history.snapshot()
        operations = [_operation_recipe(op) for op in self._registry
                      if op.name not in self._builtin_names]
        return (_unpickle_runtime, (self.config, self._builtin_ops, self._devices, self._clock,
                                    self._timer, [record_to_json(r) for r in records],
                                    operations))

    def __repr__(self) -> str:
        return (f"<AdaptiveRuntime ops={len(self._registry)} keys={len(self._history)} "
                f"tracing={'on' if self.config.tracing else 'off'}>")

    # ------------------------------------------------------------------ operations

    def register(self, name: str, *, size: Callable[..., int] | None = None,
                 kind: Kind | str = Kind.OTHER,
                 on_device: Callable[..., bool] | None = None,
                 family: Callable[..., str] | None = None) -> Operation:
        """Register an operation; add its arms with ``@op.implementation(Backend.X)``.

        ``size(*args)`` returns the input's element count (default: the first argument's
        ``.size``, ``numel()`` or ``len()``); ``kind`` (vector, matrix, reduction, elementwise,
        other) guides cold-start choices. ``on_device(*args)`` (optional) tells whether a
        call's inputs are already on the GPU: where the GPU arm can run, such calls are learned
        apart, as ``"<name>@device"`` (a GPU arm pays no copies for them, a CPU arm does).
        ``family(*args)`` (optional) names a call's input family (``""`` for the default
        one): calls of family ``f`` are learned apart, as ``"<name>@f"``, and run the
        implementations registered with ``op.add_implementation(arm, fn, family=f)`` (the
        default family's where ``f`` has none) — numpy arrays and torch tensors, say, each
        with the library call its users would write.
        Raises :class:`RegistrationError` for a duplicate name, or one over 256 characters.
        """
        op = self._registry.register(name, size=size, kind=kind, owner=self,
                                     on_device=on_device, family=family)
        self._dispatcher.add_route(op)
        return op

    def operation(self, name: str) -> Operation:
        """The registered operation ``name`` (:class:`UnknownOperationError` if none)."""
        return self._registry.get(name)

    @property
    def operations(self) -> tuple[str, ...]:
        """Names of the registered operations."""
        return tuple(op.name for op in self._registry)

    def run(self, operation: str, /, *args: Any) -> Any:
        """Run ``operation`` on the arm the policy picks: select → execute → measure → learn.

        Arguments are positional (keyword arguments would cost a dict on every call; bind
        them with ``functools.partial`` in the implementation if needed).

        If the chosen arm raises, the call falls back to the next-best arm (the failure is
        recorded and the arm quarantined with back-off). Raises
        :class:`AllBackendsFailedError` only when every arm failed, with each arm's exception.
        """
        return self._dispatcher.run(operation, *args)  # replaced per instance

    # ------------------------------------------------------------------ telemetry hooks

    def _telemetry_on(self, tracer_provider: TracerProvider | None = None,
                      meter_provider: MeterProvider | None = None) -> None:
        """Export spans (when ``config.tracing``) and metrics; called by ``ar.telemetry``.

        Into the given providers, else the global ones. Already exporting: kept as it is,
        unless a provider is given (then what was admitted is flushed and export moves).
        No spans while ``configure()`` exports no traces (``OTEL_TRACES_EXPORTER=none``).
        """
        if tracer_provider is not None or meter_provider is not None:
            self._telemetry_off(timeout_s=5.0)
        with self._telemetry_lock:
            if not self._spans.recording:
                self._spans = span_sink(
                    enabled=self.config.tracing and instrumentation.records_spans(
                        tracer_provider),
                    timer=self._timer, tracer_provider=tracer_provider,
                    on_cost=self._span_cost_measured)
            if not self._metrics.recording:  # metrics whatever config.tracing says
                self._metrics = metrics_sink(self, meter_provider=meter_provider)
            self._hook_dispatcher()

    def _hook_dispatcher(self) -> None:
        """Hand the dispatcher the sinks (the no-ops while telemetry is off). Telemetry lock
        held."""
        self._dispatcher.attach(self._spans, self._metrics)

    def _span_cost_measured(self, cost_us: float) -> None:
        # (a float attribute store: atomic under the GIL, no lock on the worker thread)
        self._dispatcher.trace_gate.span_cost_us = cost_us

    def _telemetry_off(self, timeout_s: float) -> None:
        """Stop exporting; what was admitted before is flushed first."""
        with self._telemetry_lock:
            spans, self._spans = self._spans, NO_SPANS
            metrics, self._metrics = self._metrics, NO_METRICS
            self._hook_dispatcher()
        spans.shutdown(timeout_s)
        metrics.close()  # a last reading, so the shutdown export holds every call

    def flush_telemetry(self, timeout_s: float = 5.0) -> bool:
        """Turn every span admitted so far into spans handed to the SDK (``False``: timed
        out). Exporting them is the SDK's job (``ar.telemetry.shutdown()`` flushes it too).
        Spans of GPU calls timed with events whose events have completed by now go too; the
        others wait for a later flush or timed call (nothing waits for the device)."""
        self._dispatcher.learn_device_timings()
        return self._spans.flush(timeout_s)

    def _implementations_changed(self, name: str) -> None:
        self._dispatcher.reset_route(name)

    def _evicted(self, operation: str, bucket: int) -> None:
        self._dispatcher.forget(operation, bucket)

    # ------------------------------------------------------------------ Trueno-compatible core

    def select(self, operation: str, input_size: int) -> Backend:
        """The policy's full decision for one call, exploration included.

        Works for any operation name, registered or not. Code that runs its own kernels and
        reports with :meth:`record_performance` learns exactly as :meth:`run` does.

        Raises ``TypeError`` for an operation that is not a non-empty ``str`` or a non-integer
        size (``bool`` included), ``ValueError`` for a name that is not valid UTF-8 or over
        256 characters or a size out of ``0 .. 2**64 - 1``, and
        :class:`BackendUnavailableError` when no enabled arm can run here. A rejected call
        changes nothing. :meth:`decide`, :meth:`get_best_backend` and :meth:`is_hot_path`
        check their arguments alike.
        """
        return self._dispatcher.select(_name(operation), input_size).backend

    def call_site(self, operation: str) -> CallSite:
        """A call site of ``operation`` for a caller that knows its inputs' signature (a
        hashable tuple, e.g. shape, dtype, device): ``site(signature, args)`` runs the call,
        routed by the full checks of ``run`` the first time a signature is seen, directly
        after that (adapted torch modules use one per module)."""
        return CallSite(self._dispatcher, operation)

    def decide(self, operation: str, input_size: int) -> Decision:
        """What :meth:`select` would choose now, explained; changes nothing. Its
        ``choice`` names the implementation (an arm, or a :class:`Variant` of one) and its
        ``estimates_us`` hold each candidate's estimate."""
        return self._dispatcher.explain(_name(operation), input_size)

    def record_performance(self, operation: str, input_size: int, backend: Backend | str,
                           duration_us: float) -> None:
        """Learn one timing of ``operation`` at ``input_size`` on ``backend`` (an arm: its
        primary implementation; or a :class:`Variant`, or ``"<arm>:<variant>"``).

        Every sample counts (none is dropped for being short). Raises ``TypeError`` for an
        operation that is not a non-empty ``str``, a non-integer size or a non-numeric
        duration, ``ValueError`` for a name that is not valid UTF-8 or over 256 characters, a
        size out of ``0 .. 2**64 - 1``, an unknown backend, or a negative, NaN, infinite (or
        too large for a float) duration. A rejected call changes nothing.
        """
        operation = _name(operation)
        size_bucket(input_size)  # validates
        arm = parse_choice(backend)
        if isinstance(duration_us, bool) or not isinstance(duration_us, numbers.Real):
            raise TypeError(f"duration_us must be a number of microseconds, "
                            f"got {type(duration_us).__name__}: {duration_us!r}")
        try:
            duration = float(duration_us)
        except OverflowError:  # an int beyond a float's range: as infinite as it gets
            duration = math.inf
        if not (0.0 <= duration < math.inf):
            raise ValueError(f"duration_us must be finite and >= 0, got {duration_us!r}")
        self._dispatcher.record(operation, input_size, arm, duration)

    def get_best_backend(self, operation: str, input_size: int) -> Backend | None:
        """The arm of the fastest measured implementation for this key, or ``None`` when it
        has no history yet."""
        best = self._dispatcher.best(_name(operation), input_size)
        return best.arm if best is not None else None

    def is_hot_path(self, operation: str) -> bool:
        """Whether ``operation`` is called above ``hot_path_calls_per_sec`` (tracing off)."""
        return self._dispatcher.is_hot(_name(operation))

    def reset_history(self) -> None:
        """Forget all learned history and hot-path state (counters are kept)."""
        with self._dispatcher.lock:
            self._history.clear()
            self._hot.clear()

    # ------------------------------------------------------------------ history

    def history_snapshot(self) -> list[HistoryRecord]:
        """Frozen records of every (operation, size bucket, arm) with data."""
        with self._dispatcher.lock:
            return self._history.snapshot()

    def record_calls(self, path: str | os.PathLike[str],
                     max_calls: int = DEFAULT_MAX_CALLS) -> CallRecorder:
        """Record every timed call (operation, size, arm, ``duration_us``, ``time_s``, the
        calls it stands for) to ``path`` as JSON lines, at most ``max_calls`` of them, for
        ``adaptive-runtime replay`` (:mod:`adaptive_runtime.replay`). Returns the recorder:
        ``close()`` it, or use it as a context manager, to stop. Opt-in: off by default."""
        dispatcher = self._dispatcher
        recorder = CallRecorder(path, max_calls)

        def detach() -> None:
            if dispatcher.call_sink is recorder:
                dispatcher.call_sink = None

        recorder._detach = detach
        dispatcher.call_sink = recorder
        return recorder

    def save_history(self, path: str | os.PathLike[str]) -> None:
        """Write the history to ``path``: JSON (format ``adaptive_runtime.history/2``) with
        this process's hardware fingerprint, written atomically and durably (a temporary file
        in the same directory, fsync'ed, renamed over ``path``, the directory fsync'ed): a
        crash leaves the previous file or the new one, never a mix."""
        with self._dispatcher.lock:
            records = self._history.snapshot()
        write_history_file(path, records)

    def history_document(self) -> bytes:
        """The history as a history file holds it (JSON with this process's fingerprint), for
        keeping elsewhere — inside a training checkpoint, say: :meth:`load_history_document`
        reads it back."""
        with self._dispatcher.lock:
            records = self._history.snapshot()
        return history_document(records)

    def load_history_document(self, document: bytes | str, *, source: str,
                              force: bool = False) -> bool:
        """:meth:`load_history` for a document kept elsewhere (:meth:`history_document`);
        ``source`` names where it came from in warnings and errors."""
        raw = document.encode("utf-8") if isinstance(document, str) else bytes(document)
        loaded = parse_history_document(source, raw)
        return self._apply_history_file(loaded, force or self.config.history_force)

    def load_history(self, path: str | os.PathLike[str], force: bool = False) -> bool:
        """Merge the history saved at ``path`` into this runtime's if it was measured on this
        machine; ``True`` when applied.

        A file whose fingerprint differs from this process's (CPU model or count, BLAS,
        python, numpy, numba, torch or jax version, GPU model or driver: see
        :mod:`adaptive_runtime.fingerprint`) is not applied: one :class:`HistoryWarning`
        names the file and what differs, and ``False`` is returned. A file in the format
        before fingerprints (``adaptive_runtime.history/1``) is from an unknown machine:
        not applied either. ``force=True``, or ``history_force``
        (``ADAPTIVE_RUNTIME_HISTORY_FORCE=1``), applies it anyway, without a warning.

        Raises ``ValueError`` naming the file when it is truncated, corrupt, in another
        format or over ``MAX_HISTORY_FILE_BYTES`` (64 MiB); an explicit load leaves such a
        file where it is (the ``ADAPTIVE_RUNTIME_HISTORY`` load at start-up warns instead,
        moves it aside and starts cold). ``OSError`` when it cannot be read.
        """
        loaded = read_history_file(path)
        return self._apply_history_file(loaded, force or self.config.history_force)

    def _apply_history_file(self, loaded: HistoryFile, force: bool, *, note: str = "",
                            stacklevel: int = 3) -> bool:
        if not force:
            foreign = _foreign(loaded)
            if foreign is not None:
                warnings.warn(f"history file {loaded.path!r} not applied: {foreign}{note} "
                              "(load_history(path, force=True) or "
                              "ADAPTIVE_RUNTIME_HISTORY_FORCE=1 applies it)",
                              HistoryWarning, stacklevel=stacklevel)
                return False
        self.merge_history(list(loaded.records))
        return True

    def merge_history(self, records: list[HistoryRecord]) -> None:
        """Merge records (another process, rank or file) into this runtime's history."""
        with self._dispatcher.lock:
            self._history.merge(records)
        for name in self.operations:
            self._dispatcher.reset_route(name)

    def step_hooks(self) -> tuple[SpanSink, TraceGate]:
        """The span sink and trace gate a training step's span goes through
        (:func:`adaptive_runtime.train_step`): it is made and budgeted as this runtime's own
        spans are."""
        return self._spans, self._dispatcher.trace_gate

    def sync_history(self, group: Any = None) -> None:
        """Merge every rank's history over ``torch.distributed`` (``group``, default the
        default process group; gloo on CPU, nccl on GPUs): afterwards all ranks hold the same
        statistics and make the same choice for every key (see
        :mod:`adaptive_runtime.distributed`). Every rank of the group must call it (a
        collective); safe to call repeatedly. Nothing happens in a group of one. Timings
        other threads of this process learn while it runs are not kept.
        ``RuntimeError`` without torch or an initialised process group."""
        from .distributed import merged_history

        merged = merged_history(self._rank_rows, group)
        if merged is not None:  # (None: a group of one)
            self._replace_history(merged)

    def _rank_rows(self, rank: int) -> list[tuple[HistoryRecord, Origins]]:
        """What this runtime sends in a sync as ``rank`` (see ``HistoryStore.rank_rows``)."""
        with self._dispatcher.lock:
            return self._history.rank_rows(rank)

    def _replace_history(self, rows: list[tuple[HistoryRecord, Origins]]) -> None:
        """Forget this runtime's history and hold ``rows`` instead (a sync's merge), every
        key's policy state started afresh (what a sync needs: the same state on every rank)
        and every fast-path entry dropped."""
        with self._dispatcher.lock:
            self._history.replace(rows)
        for name in self.operations:
            self._dispatcher.reset_route(name)

    # ------------------------------------------------------------------ counters

    def stats(self) -> RuntimeStats:
        """One frozen reading of this runtime's per-call counters (every call, traced or
        not): selections by (operation, arm, reason), fallbacks, the operations on the hot
        path now, and what the trace gate did with the calls it saw."""
        traces = self.trace_counts()
        return RuntimeStats(
            selections=MappingProxyType(self.selection_counts()),
            fallbacks=MappingProxyType(self.fallback_counts()),
            hot_operations=tuple(self.hot_operations()),
            spans_admitted=self._dispatcher.spans_admitted(),
            spans_exported=MappingProxyType(dict(traces["exported"])),
            spans_suppressed=MappingProxyType(dict(traces["suppressed"])))

    def selection_counts(self) -> dict[SelectionKey, int]:
        """Every call so far, counted by (operation, arm, reason), traced or not."""
        return self._dispatcher.selection_counts()

    def fallback_counts(self) -> dict[tuple[str, Backend, Backend], int]:
        """Calls re-routed after an arm raised, by (operation, failed arm, fallback arm)."""
        return self._dispatcher.fallback_counts()

    def hot_operations(self) -> list[str]:
        """Operations on the hot path now (tracing off for them, learning on)."""
        return self._dispatcher.hot_operations()

    def trace_counts(self) -> dict[str, dict[str, int]]:
        """Measured calls whose spans the trace gate admitted / suppressed, by reason, and
        (``"steps"``, once there were any) the ``ar.train_step`` spans it exported /
        suppressed."""
        gate = self._dispatcher.trace_gate
        with self._dispatcher.lock:
            counts = {"exported": {r.value: n for r, n in gate.exported.items() if n},
                      "suppressed": {r.value: n for r, n in gate.suppressed.items() if n}}
            if gate.steps_exported or gate.steps_suppressed:
                counts["steps"] = {"exported": gate.steps_exported,
                                   "suppressed": gate.steps_suppressed}
        dropped = self._spans.dropped
        if dropped:
            counts["suppressed"]["buffer_full"] = dropped
        return counts


@dataclass(frozen=True)
class RuntimeStats:
    """A runtime's per-call counters at one moment (:meth:`AdaptiveRuntime.stats`).

    - ``selections``: calls by ``(operation, backend, reason)`` (a key with those three
      fields), traced or not; :meth:`calls` sums them;
    - ``fallbacks``: calls re-routed after an arm raised, by ``(operation, failed arm,
      fallback arm)``;
    - ``hot_operations``: operations on the hot path now (their spans off, learning on);
    - ``spans_admitted``: timed calls whose spans the trace gate admitted;
    - ``spans_exported`` / ``spans_suppressed``: those calls by the trace gate's reason
      (``decision``, ``slow``, ``sampled``, ... / ``hot_path``, ``not_sampled``, ``budget``,
      ``buffer_full``, ...).
    """

    selections: Mapping[SelectionKey, int]
    fallbacks: Mapping[tuple[str, Backend, Backend], int]
    hot_operations: tuple[str, ...]
    spans_admitted: int
    spans_exported: Mapping[str, int]
    spans_suppressed: Mapping[str, int]

    def calls(self, operation: str | None = None, backend: Backend | str | None = None,
              reason: Reason | str | None = None) -> int:
        """Calls counted in :attr:`selections`, all of them or those matching every filter
        given (``backend`` and ``reason`` as enums or their string values)."""
        arm = None if backend is None else Backend.parse(backend)
        why = None if reason is None else Reason(reason)
        return sum(n for key, n in self.selections.items()
                   if (operation is None or key.operation == operation)
                   and (arm is None or key.backend is arm)
                   and (why is None or key.reason is why))


def _name(operation: object) -> str:
    if not isinstance(operation, str) or not operation:
        raise TypeError(f"operation must be a non-empty str, got {operation!r}")
    if not (operation.isascii() or utf8_encodable(operation)):
        # (a lone surrogate would make every later OTLP export of its metrics fail)
        raise ValueError(f"operation must be valid Unicode text (encodable as UTF-8), "
                         f"got {operation!r}")
    too_long = name_too_long(operation)
    if too_long is not None:
        raise ValueError(too_long)
    return operation


# ---------------------------------------------------------------------------- pickling

# (operation name, size_of, kind, on_device, family, implementations, untimed families), an
# implementation being (family, arm, fn, compile_count, floor_us, warm_up, surcharge_us, sync,
# name), in registration order (an arm's first is its primary one)
_OperationRecipe = tuple[str, Callable[..., int], str, Any, Any, list[tuple[Any, ...]],
                         dict[str, Callable[..., Any]]]


def _operation_recipe(op: Operation) -> _OperationRecipe:
    """What an unpickled runtime registers ``op`` from; ``TypeError`` naming the operation
    and the function when a part of it does not pickle."""
    parts: list[tuple[str, object]] = [("size function", op.size_of),
                                       ("on_device function", op.on_device),
                                       ("family function", op.family)]
    impls = []
    for family, arms in (("", op._impls), *op._families.items()):
        where = f" (family {family!r})" if family else ""
        for impl in arms.values():
            arm = impl.backend.value
            count = _carried_compile_count(impl)
            impls.append((family, arm, impl.fn, count, impl.floor_us, impl.warm_up,
                          impl.surcharge_us, impl.sync, impl.name))
            parts += [(f"{arm} implementation{where}", impl.fn),
                      (f"compile_count of the {arm} arm{where}", count),
                      (f"floor_us of the {arm} arm{where}", impl.floor_us),
                      (f"surcharge_us of the {arm} arm{where}", impl.surcharge_us),
                      (f"sync of the {arm} arm{where}", impl.sync)]
    untimed = dict(op._untimed)
    parts += [(f"untimed implementation of family {family!r}", fn)
              for family, fn in untimed.items()]
    for what, value in parts:
        if value is None:
            continue
        try:
            pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise TypeError(
                f"cannot pickle AdaptiveRuntime: the {what} of operation {op.name!r} "
                f"({value!r}) does not pickle ({exc}); define it at module level, or register "
                f"the operation in the receiving process instead") from exc
    return (op.name, op.size_of, op.kind.value, op.on_device, op.family, impls, untimed)


def _carried_compile_count(impl: Implementation) -> Callable[[], int] | None:
    count = impl.compile_count
    if count is None or not callable(getattr(impl.fn, "py_func", None)):
        return count
    try:
        pickle.dumps(count, pickle.HIGHEST_PROTOCOL)
    except Exception:
        # (derived from the numba kernel's own overloads: derived again where it is unpickled)
        return None
    return count


def _unpickle_runtime(config: RuntimeConfig, builtin_ops: bool, devices: DeviceProbe,
                      clock: Callable[[], float], timer: Callable[[], int],
                      history: list[dict[str, object]],
                      operations: list[_OperationRecipe]) -> AdaptiveRuntime:
    """A pickled runtime, made afresh in this process (see ``AdaptiveRuntime``)."""
    rt = AdaptiveRuntime.__new__(AdaptiveRuntime)
    rt._build(config, builtin_ops, devices, clock, timer)
    for name, size_of, kind, on_device, family, impls, untimed in operations:
        op = rt.register(name, size=size_of, kind=kind, on_device=on_device, family=family)
        for untimed_family, fn in untimed.items():
            op.add_untimed(untimed_family, fn)
        for (impl_family, arm, fn, count, floor_us, warm_up, surcharge_us, sync,
             impl_name) in impls:
            op.add_implementation(arm, fn, name=impl_name, family=impl_family,
                                  compile_count=count,
                                  floor_us=floor_us, warm_up=warm_up,
                                  surcharge_us=surcharge_us, sync=sync)
    rt.merge_history([record_from_json(row) for row in history])
    instrumentation.register(rt)
    return rt


def _foreign(loaded: HistoryFile) -> str | None:
    """Why ``loaded`` does not describe this machine, or ``None`` when it does."""
    from .fingerprint import differences, hardware_fingerprint

    if loaded.fingerprint is None:
        return (f"it has no hardware fingerprint (format {LEGACY_HISTORY_FORMAT!r}): "
                "measured on an unknown machine")
    found = differences(hardware_fingerprint(), loaded.fingerprint)
    if not found:
        return None
    return "measured on other hardware or library versions: " + "; ".join(found)


def _start_history(rt: AdaptiveRuntime, path: str) -> None:
    """``history_path`` at start-up: apply the file if it was measured here, and save the
    history periodically and at exit. Never raises for a bad file: a truncated, corrupt or
    foreign-format one is moved aside (one warning) and the runtime starts cold. In a
    DataLoader worker the file is only read (and a bad one left where it is)."""
    # A DataLoader worker (a spawned one gets here afresh) reads the file and leaves it: the
    # file is its parent's, which saves what it learned; a worker's save would overwrite it.
    worker = _in_dataloader_worker()
    saving = not worker
    try:
        loaded = read_history_file(path)
    except FileNotFoundError:
        pass  # the first run: the file is written at the first save
    except ValueError as exc:
        if worker:
            moved = "left to the process that owns it (this is a DataLoader worker)"
            warnings.warn(f"{exc}; {moved}; starting with no history", HistoryWarning,
                          stacklevel=3)
            return
        try:
            moved = f"moved aside to {move_aside(path)!r}"
        except FileNotFoundError:
            moved = "already moved away"
        except OSError as move_error:
            # (saving would overwrite it: the file is kept, this runtime saves nothing)
            moved = (f"could not be moved aside ({move_error}): it is left as it is and this "
                     "runtime's history will not be saved")
            saving = False
        warnings.warn(f"{exc}; {moved}; starting with no history", HistoryWarning,
                      stacklevel=3)
    except OSError as exc:
        warnings.warn(f"history file {path!r} could not be read ({exc}); starting with no "
                      "history", HistoryWarning, stacklevel=3)
    else:
        rt._apply_history_file(loaded, rt.config.history_force, stacklevel=4,
                               note="" if worker else
                               "; this run's history will replace it when saved")
    if saving:
        saver = _HistorySaver(rt, path, rt.config.history_save_interval_s)
        rt._history_saver = saver  # type: ignore[attr-defined]
        saver.start()


class _HistorySaver:
    """Saves a runtime's history to its ``history_path``: every ``interval_s`` while it
    changed (a daemon thread that reads a change count, off the call path) and at exit.

    Only in the process that made it: a forked child (whose runtime is a copy of the
    parent's) saves nothing, so it never overwrites the parent's file; nor does a DataLoader
    worker (see :func:`_in_dataloader_worker`). Errors are logged, not raised: a save never
    breaks the program or its exit.
    """

    def __init__(self, rt: AdaptiveRuntime, path: str, interval_s: float) -> None:
        self._ref = weakref.ref(rt)
        self._path = path
        self._interval_s = interval_s
        self._pid = os.getpid()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        # (its thread may hold both at a fork; the child never saves, but an exit handler
        # still sets the event: see _forks)
        renew_after_fork(self, _HistorySaver._renew_locks)
        # (what the file holds now: the history just loaded, or none)
        self._saved = rt._history.change_count()
        self._failing = False
        self.saves = 0

    def _renew_locks(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def start(self) -> None:
        rt = self._ref()
        if rt is None:
            return
        weakref.finalize(rt, self._stop.set)  # (the thread ends with its runtime)
        if self._interval_s > 0:
            threading.Thread(target=self._run, name="adaptive-runtime-history-save",
                             daemon=True).start()
        atexit.register(self.at_exit)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            if os.getpid() != self._pid:
                return
            self.save_if_changed()

    def at_exit(self) -> None:
        self._stop.set()
        self.save_if_changed()

    def stop(self) -> None:
        """Save nothing more: no periodic save, no save at exit."""
        self._stop.set()
        atexit.unregister(self.at_exit)

    def save_if_changed(self) -> None:
        """Save now if the history changed since the last save (in this process only)."""
        if os.getpid() != self._pid or _in_dataloader_worker():
            return
        rt = self._ref()
        if rt is None:
            self._stop.set()
            return
        with self._lock:
            count = rt._history.change_count()
            if count == self._saved:
                return
            try:
                rt.save_history(self._path)
            except Exception as exc:  # never break the loop's thread or the exit
                # (logged once until a save succeeds again: a full disk must not spam)
                log = _log.debug if self._failing else _log.warning
                log("could not save adaptive_runtime history to %s: %s", self._path, exc)
                self._failing = True
                return
            self._failing = False
            self._saved = count
            self.saves += 1


def _in_dataloader_worker() -> bool:
    """Whether this process is a ``torch.utils.data.DataLoader`` worker (torch is not
    imported to ask: a process that has not imported it is no worker)."""
    data = sys.modules.get("torch.utils.data")
    get_worker_info = getattr(data, "get_worker_info", None)
    try:
        return get_worker_info is not None and get_worker_info() is not None
    except Exception:  # (a torch too unlike the one we know: assume no worker)
        return False


_default: AdaptiveRuntime | None = None
_default_lock = threading.Lock()


def _renew_default_lock() -> None:
    global _default_lock
    _default_lock = threading.Lock()  # (a forked child: see _forks)


after_fork_in_child(_renew_default_lock)


def get_runtime() -> AdaptiveRuntime:
    """The process-wide default runtime, configured from the environment on first use."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = AdaptiveRuntime()
    return _default


set_default_runtime(get_runtime)  # (what lower layers reach through _default)
