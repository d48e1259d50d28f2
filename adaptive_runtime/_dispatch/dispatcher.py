"""``Dispatcher``: the facade the runtime holds. It makes the parts and wires them together;
each job is done by one part (see the package docstring)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..backend import Backend, Choice
from ..config import RuntimeConfig
from ..decision import Decision
from ..gating import HotPathDetector, OperationRate, TraceGate
from ..history import HistoryStore
from ..operations import DeviceProbe, Operation, OperationRegistry
from ..policy import Policy
from ..records import CallTiming, SelectionKey
from ..telemetry.sinks import MetricsSink, SpanSink
from .attempt import Attempt
from .candidates import Candidates
from .checks import ResultChecks
from .core import Core
from .counts import Counts
from .emission import Emission
from .entry import Route
from .fallback import Fallback
from .fastpath import Router
from .period import Periods
from .prepare import Preparer
from .settle import Settler
from .timed import TimedCalls
from .trueno import TruenoApi


class Dispatcher:
    """Routes calls of registered operations and Trueno-style selections for any name.

    ``run``, ``route`` and ``run_routed`` are the fast path's own bound methods, set per
    instance: a call pays for no forwarding frame.
    """

    def __init__(self, *, config: RuntimeConfig, registry: OperationRegistry,
                 history: HistoryStore, policy: Policy, hot: HotPathDetector, gate: TraceGate,
                 devices: DeviceProbe, clock: Callable[[], float],
                 timer: Callable[[], int]) -> None:
        core = self._core = Core(config=config, registry=registry, history=history,
                                 policy=policy, hot=hot, gate=gate, devices=devices,
                                 clock=clock, timer=timer)
        routes: dict[str, Route] = {}
        rates: dict[str, OperationRate] = {}
        counts = self._counts = Counts(core, routes)
        emission = self._emission = Emission(core, counts)
        preparer = self._preparer = Preparer(config.explore_share)
        candidates = Candidates(core, routes, preparer)
        periods = Periods(core, counts)
        settler = self._settler = Settler(core, periods, emission, candidates, rates, routes)
        attempt = Attempt(timer, ResultChecks(core, settler, periods))
        fallback = Fallback(core, settler, periods, counts, emission, attempt)
        timed = TimedCalls(core, settler, emission, attempt, fallback, preparer)
        router = self._router = Router(core, candidates, counts, routes, rates)
        router.connect(timed.slow, fallback.fast_failure)
        timed.reroute = self._frameworks_imported
        timed.compiled = self._compiled
        self._trueno = TruenoApi(core, router, settler, candidates, counts, emission)
        self.run = router.run
        self.route = router.route
        self.run_routed = router.run_routed
        self.spans_admitted = emission.spans_admitted
        # (a training step's span asks the gate directly: see telemetry.steps)
        self.trace_gate = gate

    def _frameworks_imported(self, names: frozenset[str]) -> None:
        """The program imported ``names`` (frameworks) since the runtime last looked: the
        operations with implementations that need one — and those with a GPU arm, which a
        framework may bring — are routed afresh, their keys' candidates found again (what
        they learned is kept)."""
        for op in list(self._core.registry):
            if op.frameworks_needed() & names or Backend.GPU in op.backends:
                self._router.reset_route(op.name)

    def _compiled(self) -> None:
        """Candidates left out of their keys until their code was compiled (``prepare``)
        are ready: their operations are routed afresh (what they learned is kept)."""
        for name in self._preparer.take_finished():
            self._router.reset_route(name)

    def wait_compiled(self, timeout_s: float | None = None) -> bool:
        """Wait until the candidates being compiled off the callers' path are ready, and
        make them candidates of their keys now; ``False`` if ``timeout_s`` passed first."""
        done = self._preparer.wait(timeout_s)
        self._compiled()
        return done

    # ------------------------------------------------------------------ telemetry

    def attach(self, spans: SpanSink, metrics: MetricsSink) -> None:
        """Hand what calls do to these sinks from now on (the no-ops: telemetry off)."""
        self._emission.attach(spans, metrics)

    @property
    def tracing(self) -> bool:
        """Whether timed calls are offered to the trace gate (a span sink records)."""
        return self._emission.tracing

    @property
    def call_sink(self) -> Callable[[CallTiming], None] | None:
        """A call recorder's hook (``rt.record_calls``): every timing learned, as
        (operation, size, arm, duration_us, time_s, calls), lock held; ``None``: none."""
        calls = self._emission.calls
        return None if calls is Emission.no_calls else calls

    @call_sink.setter
    def call_sink(self, sink: Callable[[CallTiming], None] | None) -> None:
        self._emission.calls = Emission.no_calls if sink is None else sink
        self._emission.recording_calls = sink is not None

    def learn_device_timings(self) -> None:
        """Learn the device timings that are ready now (never waiting for the others) and
        emit their calls' held spans."""
        with self._core.lock:
            ready = self._settler.learn_ready() if self._settler.pending else []
        for held, device_us in ready:
            self._emission.emit(*held, device_us=device_us)

    # ------------------------------------------------------------------ Trueno-style API

    def select(self, operation: str, n: int) -> Decision:
        return self._trueno.select(operation, n)

    def explain(self, operation: str, n: int) -> Decision:
        return self._trueno.explain(operation, n)

    def record(self, operation: str, n: int, backend: Choice, duration_us: float) -> None:
        self._trueno.record(operation, n, backend, duration_us)

    def best(self, operation: str, n: int) -> Choice | None:
        return self._trueno.best(operation, n)

    def is_hot(self, operation: str) -> bool:
        return self._trueno.is_hot(operation)

    def hot_operations(self) -> list[str]:
        return self._trueno.hot_operations()

    # ------------------------------------------------------------------ routes and counts

    @property
    def generation(self) -> int:
        """Bumped whenever routes are reset: routes kept by call sites are stale."""
        return self._router.generation

    def add_route(self, op: Operation) -> None:
        self._router.add_route(op)

    def reset_route(self, operation: str) -> None:
        self._router.reset_route(operation)

    def forget(self, operation: str, bucket: int) -> None:
        """History dropped this key (LRU or reset): drop its fast-path entry and the
        policy's state of it. Lock held."""
        self._core.learner.drop(operation, bucket)
        self._router.drop_entry(operation, bucket)

    def selection_counts(self) -> dict[SelectionKey, int]:
        return self._counts.selection_counts()

    def fallback_counts(self) -> dict[tuple[str, Backend, Backend], int]:
        return self._counts.fallback_counts()

    def torch_trials(self) -> dict[str, int]:
        """torch's thread count and the trials of another (``TorchPool.trials``)."""
        with self._core.lock:
            return self._settler.torch.trials()

    @property
    def lock(self) -> threading.Lock:
        return self._core.lock

    # (read by tests and benchmarks that look inside a runtime)
    @property
    def _hot(self) -> HotPathDetector:
        return self._core.hot

    @property
    def _select_labels(self) -> set[str]:
        return self._counts.select_labels

    @property
    def _selections(self) -> Any:
        return self._counts.selections
