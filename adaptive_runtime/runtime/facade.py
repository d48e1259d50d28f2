"""``AdaptiveRuntime``: the public face of a runtime. It has its parts (registry, history,
policy, gates, dispatch, the telemetry sinks: a :class:`~._wiring.RuntimeParts`) and hands each
method to the part that does it; the history file is :mod:`._history_file`'s, pickling
:mod:`._pickling`'s."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._concurrency.forks import after_fork_in_child
from .._dispatch.call_site import CallSite
from ..backend import Backend, Kind, parse_choice
from ..config import RuntimeConfig
from ..decision import Decision
from ..gating import TraceGate
from ..history import (
    HistoryRecord,
    history_document,
    parse_history_document,
    read_history_file,
    record_from_json,
    record_to_json,
    write_history_file,
)
from ..history.recording import DEFAULT_MAX_CALLS, CallRecorder
from ..keys import size_bucket
from ..operations import DeviceProbe, Operation
from ..records import SelectionKey
from ..telemetry import instrumentation
from ..telemetry.sinks import SpanSink
from ._arguments import duration_us_of, operation_name
from ._history_file import apply_history_file, start_history
from ._pickling import OperationRecipe, operation_recipe, register_recipes
from ._wiring import RuntimeParts, call_recorder
from .stats import RuntimeStats, read_stats, trace_counts

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

__all__ = ["AdaptiveRuntime", "get_runtime", "unpickle_runtime"]


class AdaptiveRuntime:
    """Chooses GPU, SIMD or SCALAR per call from measured history, and learns from every call.

    ``config`` defaults to :meth:`RuntimeConfig.from_env`. ``builtin_ops`` registers the
    built-in operations (``dot``, ``add``, ...). ``devices`` decides which arms can run (tests
    pass ``adaptive_runtime.operations.DeviceProbe(gpu=True)``, internal, to stand in for a
    GPU); ``clock`` (seconds) and ``timer`` (nanoseconds) are injectable for tests.

    Raises :class:`BackendUnavailableError` at construction when a forced arm cannot run here.

    Processes: a forked child (a ``DataLoader`` worker) goes on with its copy of the runtime
    (as it was at the fork; it never saves to the parent's history file). A runtime pickles
    (for a ``spawn`` worker's ``Dataset``) as a recipe: unpickling makes a fresh runtime with
    the same :class:`RuntimeConfig`, a copy of the learned history (:meth:`history_snapshot`)
    and its operations — the built-in ones registered afresh, the user's own with their
    functions, which must pickle (a ``TypeError`` names the operation otherwise). Counters,
    hot-path and quarantine state start afresh, devices are probed there (a ``DeviceProbe``
    given to the constructor goes along), and the copy is never attached to a
    ``history_path`` file: the file stays its first runtime's.
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
            start_history(self, cfg.history_path)
        instrumentation.register(self)

    def _build(self, cfg: RuntimeConfig, builtin_ops: bool, devices: DeviceProbe | None,
               clock: Callable[[], float], timer: Callable[[], int]) -> None:
        """Everything but the history file and telemetry (an unpickled copy has no file)."""
        parts = self._parts = RuntimeParts(cfg, devices, clock, timer)
        self.config, self._registry, self._history = cfg, parts.registry, parts.history
        # The parts the methods use are held here (no second look-up in a call); and ``rt.run``,
        # the per-call hot path, is an instance attribute: the dispatcher's method bound here
        # saves one Python frame (~0.1 us) on every call.
        self._dispatcher = parts.dispatcher
        self.run = self._dispatcher.run  # type: ignore[method-assign]
        self._builtin_ops = builtin_ops
        if builtin_ops:
            from ..kernels import register_builtins

            register_builtins(self, fallback=get_runtime)  # (for a backward pass outliving us)
        # (what a pickled copy registers afresh rather than carrying along)
        self._builtin_names = frozenset(self.operations)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle as a recipe for a fresh runtime (see the class docstring)."""
        parts, rows = self._parts, [record_to_json(r) for r in self.history_snapshot()]
        operations = [operation_recipe(op) for op in self._registry
                      if op.name not in self._builtin_names]
        return (unpickle_runtime, (self.config, self._builtin_ops, parts.devices, parts.clock,
                                   parts.timer, rows, operations))

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

    def _implementations_changed(self, name: str) -> None:  # (an operation's owner is told)
        self._dispatcher.reset_route(name)

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

    # ------------------------------------------------------------------ telemetry

    def _telemetry_on(self, tracer_provider: TracerProvider | None = None,
                      meter_provider: MeterProvider | None = None) -> None:  # (ar.telemetry's)
        self._parts.telemetry_on(self, tracer_provider, meter_provider)

    def _telemetry_off(self, timeout_s: float) -> None:  # (ar.telemetry's: see RuntimeParts)
        self._parts.telemetry_off(timeout_s)

    def flush_telemetry(self, timeout_s: float = 5.0) -> bool:
        """Turn every span admitted so far into spans handed to the SDK (``False``: timed
        out). Exporting them is the SDK's job (``ar.telemetry.shutdown()`` flushes it too).
        Spans of GPU calls timed with events whose events have completed by now go too; the
        others wait for a later flush or timed call (nothing waits for the device)."""
        self._dispatcher.learn_device_timings()
        return self._parts.spans.flush(timeout_s)

    def wait_compiled(self, timeout_s: float | None = None) -> bool:
        """Compile now the candidates left out of their keys until compiled off the callers'
        path (docs/policy.md, "Compiling off the caller's path"), and make them candidates;
        ``False`` if ``timeout_s`` passed first. A benchmark's warm-up, say."""
        return self._dispatcher.wait_compiled(timeout_s)

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
        return self._dispatcher.select(operation_name(operation), input_size).backend

    def call_site(self, operation: str) -> CallSite:
        """A call site of ``operation`` for a caller that knows its inputs' signature (a
        hashable tuple, e.g. shape, dtype, device): ``site(signature, args)`` runs the call,
        routed by the full checks of ``run`` the first time a signature is seen, directly
        after that (adapted torch modules use one per module)."""
        return CallSite(self._dispatcher, operation)

    def decide(self, operation: str, input_size: int) -> Decision:
        """What :meth:`select` would choose now, explained; changes nothing: its ``choice``
        (an arm, or a :class:`Variant` of one), each candidate's ``estimates_us``, the
        ``timings`` behind each and their standard deviation ``stdevs_us`` (:class:`Decision`)."""
        return self._dispatcher.explain(operation_name(operation), input_size)

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
        operation = operation_name(operation)
        size_bucket(input_size)  # validates
        arm = parse_choice(backend)
        self._dispatcher.record(operation, input_size, arm, duration_us_of(duration_us))

    def get_best_backend(self, operation: str, input_size: int) -> Backend | None:
        """The arm of the fastest measured implementation for this key, or ``None`` when it
        has no history yet."""
        best = self._dispatcher.best(operation_name(operation), input_size)
        return best.arm if best is not None else None

    def is_hot_path(self, operation: str) -> bool:
        """Whether ``operation`` is called above ``hot_path_calls_per_sec`` (tracing off)."""
        return self._dispatcher.is_hot(operation_name(operation))

    def reset_history(self) -> None:
        """Forget all learned history and hot-path state (counters are kept)."""
        self._parts.clear_history()

    # ------------------------------------------------------------------ history

    def history_snapshot(self) -> list[HistoryRecord]:
        """Frozen records of every (operation, size bucket, arm) with data."""
        return self._parts.history_snapshot()

    def record_calls(self, path: str | os.PathLike[str],
                     max_calls: int = DEFAULT_MAX_CALLS) -> CallRecorder:
        """Record every timed call (operation, size, arm, ``duration_us``, ``time_s``, the
        calls it stands for) to ``path`` as JSON lines, at most ``max_calls`` of them, for
        ``adaptive-runtime replay`` (:mod:`adaptive_runtime.offline.replay`). Returns the recorder:
        ``close()`` it, or use it as a context manager, to stop. Opt-in: off by default."""
        return call_recorder(self._dispatcher, path, max_calls)

    def save_history(self, path: str | os.PathLike[str]) -> None:
        """Write the history to ``path``: JSON (format ``adaptive_runtime.history/2``) with
        this process's hardware fingerprint, written atomically and durably (a temporary file
        in the same directory, fsync'ed, renamed over ``path``, the directory fsync'ed): a
        crash leaves the previous file or the new one, never a mix."""
        write_history_file(path, self.history_snapshot())

    def history_document(self) -> bytes:
        """The history as a history file holds it (JSON with this process's fingerprint), for
        keeping elsewhere — inside a training checkpoint, say: :meth:`load_history_document`
        reads it back."""
        return history_document(self.history_snapshot())

    def load_history_document(self, document: bytes | str, *, source: str,
                              force: bool = False) -> bool:
        """:meth:`load_history` for a document kept elsewhere (:meth:`history_document`);
        ``source`` names where it came from in warnings and errors."""
        raw = document.encode("utf-8") if isinstance(document, str) else bytes(document)
        loaded = parse_history_document(source, raw)
        return apply_history_file(self.merge_history, loaded, force or self.config.history_force)

    def load_history(self, path: str | os.PathLike[str], force: bool = False) -> bool:
        """Merge the history saved at ``path`` into this runtime's if it was measured on this
        machine; ``True`` when applied.

        A file whose fingerprint differs from this process's in what its keys depend on
        (CPU model or count, BLAS, python, numpy, numba; the torch or jax version where its
        keys ran on that library, the GPU model or driver where on the GPU: see
        :mod:`adaptive_runtime.history.depends`) is not applied: one :class:`HistoryWarning`
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
        return apply_history_file(self.merge_history, loaded, force or self.config.history_force)

    def merge_history(self, records: list[HistoryRecord]) -> None:
        """Merge records (another process, rank or file) into this runtime's history."""
        self._parts.merge_history(records)

    def step_hooks(self) -> tuple[SpanSink, TraceGate]:
        """The span sink and trace gate a training step's span goes through
        (:func:`adaptive_runtime.train_step`): it is made and budgeted as this runtime's own
        spans are."""
        return self._parts.spans, self._dispatcher.trace_gate

    def sync_history(self, group: Any = None) -> None:
        """Merge every rank's history over ``torch.distributed`` (``group``, default the
        default process group; gloo on CPU, nccl on GPUs): afterwards all ranks hold the same
        statistics and make the same choice for every key (see
        :mod:`adaptive_runtime.history.distributed`). Every rank of the group must call it (a
        collective); safe to call repeatedly. Nothing happens in a group of one. Timings
        other threads of this process learn while it runs are not kept.
        ``RuntimeError`` without torch or an initialised process group."""
        from ..history.distributed import merged_history

        merged = merged_history(self._parts.rank_rows, group)
        if merged is not None:  # (None: a group of one)
            self._parts.replace_history(merged)

    # ------------------------------------------------------------------ counters

    def stats(self) -> RuntimeStats:
        """One frozen reading of this runtime's per-call counters (every call, traced or
        not): selections by (operation, arm, reason), fallbacks, hot operations, the trace
        gate's verdicts, whether it records spans, torch's thread count and its trials."""
        return read_stats(self, self._dispatcher)

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
        return trace_counts(self._dispatcher.trace_gate, self._dispatcher.lock, self._parts.spans)


def unpickle_runtime(config: RuntimeConfig, builtin_ops: bool, devices: DeviceProbe,
                     clock: Callable[[], float], timer: Callable[[], int],
                     history: list[dict[str, object]],
                     operations: list[OperationRecipe]) -> AdaptiveRuntime:
    """A pickled runtime, made afresh in this process (see ``AdaptiveRuntime``)."""
    rt = AdaptiveRuntime.__new__(AdaptiveRuntime)
    rt._build(config, builtin_ops, devices, clock, timer)
    register_recipes(rt.register, operations)
    rt.merge_history([record_from_json(row) for row in history])
    instrumentation.register(rt)
    return rt


# Every pickled runtime names this function by one import path,
# ``adaptive_runtime.runtime._unpickle_runtime``: the one it had before the runtime became a
# package, where the package binds it (pickles made by earlier versions name it so too).
unpickle_runtime.__module__ = "adaptive_runtime.runtime"
unpickle_runtime.__qualname__ = "_unpickle_runtime"


_default: AdaptiveRuntime | None = None
_default_lock = threading.Lock()


def _renew_default_lock() -> None:
    global _default_lock
    _default_lock = threading.Lock()  # (a forked child: see _concurrency.forks)


after_fork_in_child(_renew_default_lock)


def get_runtime() -> AdaptiveRuntime:
    """The process-wide default runtime, configured from the environment on first use."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = AdaptiveRuntime()
    return _default
