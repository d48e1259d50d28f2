"""The training step's span: ``with ar.train_step(step=i, epoch=e, batch_size=b): ...``.

A step span is the parent of the runtime's ``adaptive.select`` / ``adaptive.execute`` spans
made during the step (they are siblings under the caller's active span, captured when each call
is recorded), so in Jaeger a ``train_step`` trace holds the step's decisions. Attributes:
``train.step``, ``train.epoch``, ``train.batch_size`` where given, ``adaptive.rank`` and
``adaptive.world_size`` in a distributed job, and whatever the caller adds.

Step spans are sampled within the span budget, as the runtime's own spans are: a step whose
calls' spans were exported or whose ids user code read (for spans of its own, log lines: they
name it as their parent), the first step and a failed one always get theirs; other steps share
a tenth of ``RuntimeConfig.spans_per_sec`` (20 step spans a second at the default), so a step
span per step is exported while steps are long, one per several steps when they take a few ms.
A sampled step span's ``adaptive.sampling.weight`` says how many steps it stands for;
``spans_per_sec=math.inf`` exports every step. With a ``tracer_provider`` of the caller's,
the span is made when the step begins, so every step gets one. (Code that keeps the step's
context to make spans after the step has ended should read the step's ids while it runs —
``trace.get_current_span().get_span_context()`` — so that its step is exported and its ids
are its own.)

Usable as a context manager (one per step) and as a decorator (``@ar.train_step(epoch=0)``:
each call of the function is a step, numbered from 0 unless ``step=`` says otherwise). With
tracing off — the runtime exports no spans (telemetry not configured, ``OTEL_SDK_DISABLED``,
or its ``tracing=False``) — it creates nothing and attaches nothing: a step costs a function
call and a few attribute reads (~3 µs here). The step span goes where the runtime's spans go
(``ar.telemetry.configure()``, ``ar.telemetry.instrument(rt, tracer_provider=...)``).
``sync_every=N`` also merges the ranks' history every N steps (``runtime.sync_history(group)``
at the end of step N, 2N, ...; see the README).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace

from .._process import rank_attributes
from .._version import __version__
from ..runtime import AdaptiveRuntime, get_runtime
from ..telemetry.span_builders import StandInSpan, StepRecord
from ..telemetry.spans import SpanRecorder

__all__ = ["TrainStep", "train_step"]


F = TypeVar("F", bound=Callable[..., Any])

INSTRUMENTATION_NAME = "adaptive_runtime"


class TrainStep:
    """One training step's span (see the module docstring); made by :func:`train_step`."""

    __slots__ = ("_added", "_attributes", "_group", "_name", "_open", "_runtime",
                 "_sync_every", "_tracer_provider", "step")

    def __init__(self, step: int | None, attributes: dict[str, Any], name: str,
                 runtime: AdaptiveRuntime | None, sync_every: int | None, group: Any,
                 tracer_provider: trace.TracerProvider | None) -> None:
        self.step = step
        self._attributes = attributes
        self._name = name
        self._runtime = runtime
        self._sync_every = sync_every
        self._group = group
        self._tracer_provider = tracer_provider
        # while the step runs: (recorder, context token, StandInSpan, parent, trace gate, start
        # ns) for a span made later, or (None, the SDK's span scope, span) for one made now;
        # None with tracing off
        self._open: tuple[Any, ...] | None = None
        self._added: dict[str, Any] | None = None  # set_attribute's, while the step runs

    # ------------------------------------------------------------------ context manager

    def __enter__(self) -> TrainStep:
        runtime = self._runtime
        if runtime is None:
            runtime = self._runtime = get_runtime()
        if self._tracer_provider is not None:  # a provider of the caller's: a span now
            if runtime.config.tracing:
                self._open_sdk_span()
            return self
        recorder, gate = runtime.step_hooks()
        if not recorder.recording:  # the runtime exports no spans (its tracing=False too)
            return self
        # The span is made later, on the recorder's worker thread, as the runtime's spans are
        # (a span made now costs the loop ~100 us through the SDK): here a stand-in is made
        # current, so the step's calls are recorded as its children. Nothing else is built
        # until the step's end says its span is exported (most steps' spans are not): the
        # loop's share of a step span is the stand-in, two timestamps and the gate's verdict.
        # Amid a training step's cache traffic every line here costs several times what it
        # does in a tight loop, so the last step's stand-in is made current again when
        # nothing took it (see _take_stand_in) rather than a new one made.
        parent = otel_context.get_current()
        stand_in = _take_stand_in(parent)
        self._added = None
        self._open = (recorder, otel_context.attach(stand_in.context), stand_in, parent,
                      gate, recorder.timer())
        return self

    def _open_sdk_span(self) -> None:
        self._added = None
        tracer = self._tracer_provider.get_tracer(  # type: ignore[union-attr]
            INSTRUMENTATION_NAME, __version__)
        scope = tracer.start_as_current_span(
            self._name, attributes={**self._span_attributes(), **rank_attributes()},
            record_exception=True, set_status_on_exception=True)
        self._open = (None, scope, scope.__enter__())

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        opened, self._open = self._open, None
        try:
            if opened is None:
                pass
            elif opened[0] is None:  # (a span made now)
                opened[1].__exit__(exc_type, exc, tb)
            else:
                recorder, token, stand_in, parent, gate, start_ns = opened
                end_ns = recorder.timer()
                otel_context.detach(token)
                # Without the runtime's lock: only step ends touch the step budget, and steps
                # on two threads at once can at worst lose an update to it (a span more or
                # less). A step whose span something took — a traced call recorded under it,
                # user code that read its ids for spans of its own — is always exported.
                weight = gate.admit_step(exc_type is not None, stand_in.taken, end_ns * 1e-9)
                if weight:
                    self._submit(recorder, stand_in, parent, weight, start_ns, end_ns, exc)
                elif not stand_in.taken:
                    _IDLE[0] = stand_in  # (the next step's: see _take_stand_in)
        finally:
            if exc_type is None and self._sync_every is not None:
                self._maybe_sync()

    def _submit(self, recorder: SpanRecorder, stand_in: StandInSpan,
                parent: otel_context.Context, weight: float, start_ns: int, end_ns: int,
                exc: BaseException | None) -> None:
        attributes = self._span_attributes()
        if weight > 1.0:
            attributes["adaptive.sampling.weight"] = weight
        # (its ids are drawn on the worker, unless a traced call drew them already: StepRecord
        # carries the stand-in itself)
        recorder.submit_step(StepRecord(self._name, stand_in, parent, attributes, start_ns,
                                        end_ns, exc))

    def _span_attributes(self) -> dict[str, Any]:
        """The step span's attributes: the step's, its number, those set while it ran."""
        attributes = dict(self._attributes)
        if self.step is not None:
            attributes["train.step"] = self.step
        if self._added:
            attributes.update(self._added)
        return attributes

    def set_attribute(self, key: str, value: Any) -> None:
        """Add an attribute to the step's span (the loss, say); nothing with tracing off."""
        opened = self._open
        if opened is None:
            return
        if opened[0] is None:
            opened[2].set_attribute(key, value)
        elif self._added is None:
            self._added = {key: value}
        else:
            self._added[key] = value

    def _maybe_sync(self) -> None:
        every = self._sync_every
        if every is None or self.step is None or (self.step + 1) % every:
            return
        runtime = self._runtime
        if runtime is None:
            runtime = get_runtime()
        runtime.sync_history(self._group)

    # ------------------------------------------------------------------ decorator

    def __call__(self, fn: F) -> F:
        """Make each call of ``fn`` a step (numbered from this step's ``step``, or 0)."""
        first = self.step if self.step is not None else 0
        counter = [first]

        @functools.wraps(fn)
        def stepped(*args: Any, **kwargs: Any) -> Any:
            step = TrainStep(counter[0], self._attributes, self._name, self._runtime,
                             self._sync_every, self._group, self._tracer_provider)
            counter[0] += 1
            with step:
                return fn(*args, **kwargs)

        return stepped  # type: ignore[return-value]


def _take_stand_in(parent: otel_context.Context) -> StandInSpan:
    """The stand-in span of a step beginning under ``parent``: the last step's, if it had
    the same parent and nothing took its stand-in (the step left it in ``_IDLE``), else a
    new one.

    A stand-in nothing took (see :class:`~adaptive_runtime.telemetry.span_builders.StandInSpan`)
    was never seen outside its step, so one object can stand for a run of steps without a
    span of their own; the step that is exported, or that something took, keeps it. One
    slot for the process: ``dict.pop`` hands it to one thread only (a single C call, atomic),
    and steps on other threads, or under another parent, make their own."""
    idle = _IDLE.pop(0, None)
    if idle is not None and idle.parent_context is parent:
        return idle
    return StandInSpan(parent)


_IDLE: dict[int, StandInSpan] = {}  # {0: the last step's stand-in, nothing took it}


def train_step(step: int | None = None, *, epoch: int | None = None,
               batch_size: int | None = None, attributes: Mapping[str, Any] | None = None,
               runtime: AdaptiveRuntime | None = None, sync_every: int | None = None,
               group: Any = None, name: str = "train_step",
               tracer_provider: trace.TracerProvider | None = None) -> TrainStep:
    """The span of one training step (context manager) or of each call of a function
    (decorator). See the module docstring.

    ``attributes``: more span attributes (values: str, bool, int, float or sequences of
    them). ``runtime``: whose ``tracing`` setting applies and whose history ``sync_every``
    merges (default: the process default). ``tracer_provider``: default the global one.
    """
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
        raise ValueError(f"step must be an int >= 0, got {step!r}")
    if sync_every is not None and (isinstance(sync_every, bool)
                                   or not isinstance(sync_every, int) or sync_every < 1):
        raise ValueError(f"sync_every must be an int >= 1, got {sync_every!r}")
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty str, got {name!r}")
    attrs: dict[str, Any] = dict(attributes or {})
    if epoch is not None:
        attrs["train.epoch"] = epoch
    if batch_size is not None:
        attrs["train.batch_size"] = batch_size
    return TrainStep(step, attrs, name, runtime, sync_every, group, tracer_provider)
