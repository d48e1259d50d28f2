"""Which arms a call may run on: an operation's candidates at a size, in cold-start order, and
their kernels (cached per preference order); the same for any name ``select()`` is given."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from .._imported import imported, loaded_frameworks
from ..backend import Backend, Choice, Kind, infer_kind
from ..errors import BackendUnavailableError, RegistrationError
from ..operations import Implementation, Operation
from ..policy import heuristic_order, heuristic_preference
from .core import Core
from .entry import Arms, Route
from .prepare import Preparer

_log = logging.getLogger(__name__.rpartition(".")[0])


def floors(operation: str, impls: Mapping[Choice, Implementation],
           args: tuple[Any, ...]) -> dict[Choice, float] | None:
    """Each implementation's ``floor_us`` for a key's first call (``None``: none has one).
    A floor that cannot be worked out is left out: it only ever spares an arm a trial."""
    found: dict[Choice, float] = {}
    for backend, impl in impls.items():
        if impl.floor_us is not None:
            try:
                found[backend] = float(impl.floor_us(*args))
            except Exception as exc:  # e.g. a broken device: the arm is simply tried
                _log.debug("no floor for %s on %s: %s", operation, backend.value, exc)
    return found or None


def _ready(impl: Implementation | None) -> bool:
    """Whether ``impl`` can run without importing anything: the framework it needs, if any,
    is imported."""
    return impl is not None and (not impl.needs or imported(impl.needs) is not None)


class Candidates:
    """Candidates — arms, and variants of arms — of registered operations and of any other
    name."""

    def __init__(self, core: Core, routes: dict[str, Route], preparer: Preparer) -> None:
        self._core = core
        self._routes = routes
        self.preparer = preparer
        self._arms_cache: dict[tuple[Any, ...], Arms] = {}

    def arms_of(self, op: Operation, n: int) -> Arms:
        """Candidates of ``op`` at size ``n`` and their kernels, cached per preference order
        (there are three) and frameworks imported, until the operation's implementations
        change. Lock held."""
        # (which implementations' min_size the size reaches: one-thread variants start there)
        reached = tuple(n >= impl.min_size for impl in op.implementations() if impl.min_size)
        cache_key = (op.name, heuristic_preference(op.kind, n), loaded_frameworks(), reached)
        arms = self._arms_cache.get(cache_key)
        if arms is None:
            candidates = self.of(op, n)
            arms = self._arms_cache[cache_key] = (candidates, {
                b: impl for b in candidates if (impl := op.implementation_for(b)) is not None})
        return arms

    def drop(self, name: str) -> None:
        """Forget the cached arms of operation ``name`` (its implementations changed)."""
        for cache_key in [k for k in self._arms_cache if k[0] == name]:
            del self._arms_cache[cache_key]

    def of(self, op: Operation, n: int, *, compiled: bool = True) -> tuple[Choice, ...]:
        """Candidates of a registered operation at size ``n``: its implementations on the
        arms enabled and available here whose framework the program has imported (``needs``),
        from their ``min_size`` (thread-count variants where ``choose_threads``), in heuristic
        order — where ``compiled``, those whose code is not compiled yet left out
        (``prepare``: the runtime would compile it in the call) —; or the forced one."""
        backends = op.choices
        if not backends:
            raise RegistrationError(
                f"operation {op.name!r} has no implementation; add one with "
                f"@op.implementation(Backend.SIMD) (or GPU / SCALAR)")
        forced = self._core.forced
        if forced is not None:
            # (an arm: its primary implementation, else its first variant; a variant the
            # operation lacks: its arm's — a variant refines the device class forced, and a
            # model's other operations, their backward ones among them, may not have it)
            impl = op.implementation_for(forced) or op.implementation_for(forced.arm)
            if impl is not None and not _ready(impl):
                # (an arm whose primary kernel needs a framework not imported: its first
                # variant that runs without one)
                impl = next((op.implementation_for(c) for c in backends
                             if c.arm is forced.arm and _ready(op.implementation_for(c))),
                            impl)
            if impl is None:
                raise BackendUnavailableError(
                    f"backend {forced.value!r} is forced but operation {op.name!r} has "
                    f"no {forced.arm.value} implementation (it has: "
                    f"{', '.join(b.value for b in backends)})")
            return (impl.choice,)
        core = self._core
        usable = [b for b in backends if self._can_run(op, b, n)]
        if not usable:
            waiting = sorted({impl.needs for b in backends
                              if (impl := op.implementation_for(b)) is not None
                              and not _ready(impl)})
            hint = (f"; implementations that need {' or '.join(waiting)} run once the "
                    "program imports it (the runtime never imports a framework inside a call; "
                    "RuntimeConfig(import_frameworks=True) imports it when the runtime is "
                    "made)") if waiting else ""
            raise BackendUnavailableError(
                f"operation {op.name!r} has implementations for "
                f"{', '.join(b.value for b in backends)}, none of which can run here "
                f"(enabled and available: {', '.join(core.available_arms()) or 'none'})"
                f"{hint}")
        order = heuristic_order(op.kind, n, usable)
        if op.resident:  # (inputs on the GPU: tried there first, see Operation.resident)
            order = (*(c for c in order if c.arm is Backend.GPU),
                     *(c for c in order if c.arm is not Backend.GPU))
        return self.preparer.leave_out_cold(op, order) if compiled else order

    def prepare_cold(self, op: Operation, n: int, args: tuple[Any, ...]) -> None:
        """Have the implementations of ``op`` at size ``n`` whose code is not compiled yet
        compiled off the caller's path, for calls like one on ``args`` (``prepare``). Those
        whose inputs cannot be copied small become candidates at once. Lock held."""
        if self._core.forced is not None:
            return
        preparer = self.preparer
        cold = [c for c in op.choices if self._can_run(op, c, n)
                and preparer.cold(op, c, op.implementation_for(c))]
        if cold:
            preparer.request(op, cold, args)

    def _can_run(self, op: Operation, choice: Choice, n: int) -> bool:
        """Whether ``choice`` of ``op`` is a candidate at size ``n`` here (see :meth:`of`)."""
        core = self._core
        impl = op.implementation_for(choice)
        return (choice.arm in core.enabled and core.devices.available(choice)
                and _ready(impl) and impl is not None and impl.min_size <= n
                and (not impl.thread_count or core.config.choose_threads))

    def pool_of(self, operation: str, choice: Choice) -> str:
        """The thread pool ``choice`` of ``operation`` runs on (``Implementation.threads``;
        ``""``: none, or not a registered operation's)."""
        route = self._routes.get(operation)  # (a device twin is routed, not registered)
        op = route[2] if route is not None else self._core.registry.find(operation)
        impl = op.implementation_for(choice) if op is not None else None
        return impl.threads if impl is not None else ""

    def for_name(self, operation: str, n: int) -> tuple[Choice, ...]:
        """Candidate arms for any operation name (registered or not), in heuristic order
        (for ``select()``, whose caller runs its own code: none is left out uncompiled)."""
        core = self._core
        route = self._routes.get(operation)  # (a device twin is routed, not registered)
        op = route[2] if route is not None else core.registry.find(operation)
        if op is not None and op.backends:
            return self.of(op, n, compiled=False)
        if core.forced is not None:
            return (core.forced,)
        usable = [b for b in core.enabled if core.devices.available(b)]
        if not usable:  # (checked before anything is touched: a rejected call changes nothing)
            raise BackendUnavailableError(
                f"no arm can run operation {operation!r} here: every enabled arm "
                f"({', '.join(b.value for b in core.enabled)}) is unavailable on this machine")
        kind = op.kind if op is not None and op.kind is not Kind.OTHER else infer_kind(operation)
        return heuristic_order(kind, n, usable)
