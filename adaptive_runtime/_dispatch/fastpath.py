"""The fast path: the route table (operations, their family twins, their keys' entries) and
the call itself — a converged key's call runs its committed arm with no lock, no clock read
and no allocation; every other call goes to the timed path."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..backend import Backend
from ..gating import OperationRate
from ..keys import size_bucket, unchecked_bucket
from ..operations import DEVICE_FAMILY, Operation
from .candidates import Candidates
from .core import Core
from .counts import Counts
from .entry import Entry, FamilyRoute, Route, Twins

# (op, entries, n, args, entry or None, ticket) -> the call's result
SlowPath = Callable[[Operation, dict[int, Entry], int, tuple[Any, ...], Entry | None, int], Any]
# (op, entry, n, args, ticket, the exception) -> the call's result
FastFailure = Callable[[Operation, Entry, int, tuple[Any, ...], int, Exception], Any]


def _default_family(*_args: Any) -> str:
    return ""


class Router:
    """Routes calls of registered operations: the fast path and the route table."""

    def __init__(self, core: Core, candidates: Candidates, counts: Counts,
                 routes: dict[str, Route], rates: dict[str, OperationRate]) -> None:
        self._core = core
        self._registry = core.registry
        self._candidates = candidates
        self._counts = counts
        # operation name -> (size_of, {bucket: entry}, operation, family route or None); read
        # lock-free by run(). Family twins have routes of their own (no family route).
        self._routes = routes
        # registered operations' call-rate state, pinned in the detector
        self._rates = rates
        # bumped whenever routes are reset: routes kept by call sites (see route()) are stale
        self.generation = 0
        # the timed path, set by the dispatcher once it is made (instance attributes: one
        # lookup from run_routed)
        self._slow: SlowPath
        self._fast_failure: FastFailure

    def connect(self, slow: SlowPath, fast_failure: FastFailure) -> None:
        """Where calls that are not fast-path calls go."""
        self._slow = slow
        self._fast_failure = fast_failure

    def run(self, operation: str, /, *args: Any) -> Any:
        """:meth:`route`, then :meth:`run_routed`, in one frame: their bodies are inlined
        here, as every call of ``rt.run`` comes this way and a frame is a large share of a
        converged call's overhead. A change to either belongs here too."""
        # Positional arguments only: ``**kwargs`` would cost a dict per call on this path.
        try:
            size_of, entries, op, families = self._routes[operation]
        except KeyError:
            self._registry.get(operation)  # raises UnknownOperationError naming the known ones
            raise
        n = size_of(*args)
        if families is not None:
            family = families[0](*args)
            if family:  # not the default family: the operation's twin for it
                entries, op = self._twin(op, family, families[1])
                if entries is None:  # a family run untimed (Operation.add_untimed): ``op``
                    return op(*args)  # is the function that runs it
        try:
            entry = entries.get(unchecked_bucket(n))
        except TypeError:  # a size that is not a Python int (numpy integer, float, ...)
            entry = entries.get(size_bucket(n))
        if entry is not None:
            ticket = next(entry.ticks)
            if ticket & entry.mask:
                try:  # (free in CPython 3.11+ while nothing is raised)
                    return entry.impl(*args)  # type: ignore[misc]
                except Exception as exc:
                    return self._fast_failure(op, entry, n, args, ticket, exc)
            return self._slow(op, entries, n, args, entry, ticket)
        return self._slow(op, entries, n, args, None, -1)

    def route(self, operation: str, args: tuple[Any, ...]) -> tuple[Any, Any, int]:
        """Where a call of ``operation`` with ``args`` goes: ``(operation or its family twin,
        that one's entries, the call's size)`` — checked (``size_of`` raises for bad inputs).
        For an untimed family the entries are ``None`` and the first item is the function
        that runs its calls.

        A call site that sees the same input signature again and again (an adapted torch
        module) may keep a route per signature and call :meth:`run_routed` with it, skipping
        the checks: a kept route holds while :attr:`generation` is unchanged.
        """
        try:
            size_of, entries, op, families = self._routes[operation]
        except KeyError:
            self._registry.get(operation)  # raises UnknownOperationError naming the known ones
            raise
        n = size_of(*args)
        if families is not None:
            family = families[0](*args)
            if family:  # not the default family: the operation's twin for it
                entries, op = self._twin(op, family, families[1])
        return op, entries, n

    def _twin(self, op: Operation, family: str, twins: Twins) -> tuple[Any, Any]:
        """The entries and the operation of ``op``'s twin for input family ``family``."""
        try:
            return twins[family]
        except KeyError:
            return self._add_family(op, family)

    def run_routed(self, op: Any, entries: dict[int, Entry] | None, n: int,
                   args: tuple[Any, ...]) -> Any:
        """Run a call routed by :meth:`route`: its arm picked, timed or not, and learned.
        (Inlined in :meth:`run`: a change here belongs there too.)"""
        if entries is None:  # a family run untimed (Operation.add_untimed): ``op`` is the
            return op(*args)  # function that runs it
        try:
            entry = entries.get(unchecked_bucket(n))
        except TypeError:  # a size that is not a Python int (numpy integer, float, ...)
            entry = entries.get(size_bucket(n))
        if entry is not None:
            ticket = next(entry.ticks)
            if ticket & entry.mask:
                try:  # (free in CPython 3.11+ while nothing is raised)
                    return entry.impl(*args)  # type: ignore[misc]
                except Exception as exc:
                    return self._fast_failure(op, entry, n, args, ticket, exc)
            return self._slow(op, entries, n, args, entry, ticket)
        return self._slow(op, entries, n, args, None, -1)

    # ------------------------------------------------------------------ the route table

    def add_route(self, op: Operation) -> None:
        core = self._core
        with core.lock:
            self._rates[op.name] = core.hot.state(op.name, core.clock(), pin=True)
            self._routes[op.name] = (op.size_of, {}, op, self._family_route(op))

    def reset_route(self, operation: str) -> None:
        """Forget fast-path entries of ``operation`` and of its family twins (its arms
        changed); counts are kept. Its twins (and its device route) are made again as calls
        of their families come."""
        with self._core.lock:
            route = self._routes.get(operation)
            if route is None:
                return
            self.generation += 1
            routed = [(operation, route[1])]
            if route[3] is not None:
                routed += [(twin.name, entries) for entries, twin in route[3][1].values()
                           if entries is not None]
                for name, _entries in routed[1:]:
                    self._routes.pop(name, None)
                self._routes[operation] = (*route[:3], self._family_route(route[2]))
            for name, entries in routed:
                self._candidates.drop(name)
                for entry in entries.values():
                    self._counts.retire(name, entry)
                entries.clear()

    def drop_entry(self, operation: str, bucket: int) -> None:
        """History dropped this key: stop routing to its entry. Lock held."""
        route = self._routes.get(operation)
        if route is not None:
            entry = route[1].pop(bucket, None)
            if entry is not None:
                self._counts.retire(operation, entry)

    def entry(self, operation: str, bucket: int) -> Entry | None:
        """The fast-path entry of a key of a routed operation, if it has one."""
        route = self._routes.get(operation)
        return route[1].get(bucket) if route is not None else None

    # ------------------------------------------------------------------ input families

    def _add_family(self, op: Operation, family: str) -> tuple[dict[int, Entry], Operation]:
        """The route of ``op``'s twin for input family ``family``, made on its first call."""
        untimed = op.untimed(family)
        core = self._core
        host_arms = core.config.host_arms_on_device
        with core.lock:
            route = self._routes.get(op.name)
            if route is None or route[3] is None:  # (reset meanwhile: route this call anyway)
                return ((None, untimed) if untimed  # type: ignore[return-value]
                        else ({}, op.family_twin(family, host_arms=host_arms)))
            twins = route[3][1]
            found = twins.get(family)
            if found is not None:
                return found
            if untimed is not None:
                found = twins[family] = (None, untimed)  # type: ignore[assignment]
                return found
            twin = op.family_twin(family, host_arms=host_arms)
            twin_route = self._routes.get(twin.name)
            if twin_route is None:
                if twin.name not in self._rates:
                    self._rates[twin.name] = core.hot.state(twin.name, core.clock(), pin=True)
                twin_route = self._routes[twin.name] = (op.size_of, {}, twin, None)
            found = twins[family] = (twin_route[1], twin_route[2])
            return found

    def _family_route(self, op: Operation) -> FamilyRoute | None:
        """The family route of a newly registered (or reset) operation: ``None`` without
        input families; else one whose classifier, on the first call, decides whether calls
        with inputs on the GPU get a route of their own (only where the GPU arm can run: the
        probe is left until a call needs it), then classifies from then on."""
        if op.on_device is None:
            return (op.family, {}) if op.family is not None else None
        twins: Twins = {}

        def classify_first(*args: Any) -> str:
            return self._place(op, twins)(*args)

        return (classify_first, twins)

    def _place(self, op: Operation, twins: Twins) -> Callable[..., str]:
        """Decide ``op``'s classifier on its first call: its ``on_device`` hook sends calls
        with inputs already on the GPU to the family ``"device"`` where its GPU arm can run
        here; its ``family`` hook names the other families."""
        family, on_device = op.family, op.on_device
        core = self._core
        if not (Backend.GPU in op.backends and Backend.GPU in core.enabled
                and (core.forced is None or core.forced.arm is Backend.GPU)
                and core.devices.available(Backend.GPU)):
            on_device = None
        if on_device is None:
            classify = family if family is not None else _default_family
        elif family is None:
            def classify(*args: Any) -> str:
                return DEVICE_FAMILY if on_device(*args) else ""
        else:
            def classify(*args: Any) -> str:
                return DEVICE_FAMILY if on_device(*args) else family(*args)
        with core.lock:
            route = self._routes.get(op.name)
            if route is not None and route[3] is not None and route[3][1] is twins:
                self._routes[op.name] = (*route[:3], (classify, twins))
        return classify
