"""A call site: the route of each input signature of one operation, found once.

A caller that knows its inputs' signature (an adapted torch module: shape, dtype, device,
autograd) skips the per-call checks and family classification of ``rt.run``; the route comes
from the dispatcher's full checks the first time a signature is seen, and is kept while the
runtime's routes are unchanged (the dispatcher's ``generation``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .dispatcher import Dispatcher

__all__ = ["CallSite"]

# input signatures a call site keeps routes for (more: the oldest are forgotten)
_MAX_SIGNATURES = 64


class CallSite:
    """Where one call site's calls of ``operation`` go, per input signature, checked once
    (``rt.call_site(operation)``; ``site(signature, args)`` runs a call). Made for adapted
    torch modules (:mod:`adaptive_runtime.torch`).

    A module sees the same few input signatures (shape, dtype, device, whether autograd
    records) call after call; checking every input and classifying its family each time costs
    several microseconds a call when the kernels between leave the interpreter's caches cold
    (measured here: ~12 us a ``Linear`` call through ``rt.run`` against ~4 us this way). The
    route of a new signature comes from the runtime's full checks (so bad inputs raise the
    same clear errors) and is kept while the runtime's routes are unchanged.
    """

    __slots__ = ("dispatcher", "generation", "operation", "routes")

    def __init__(self, dispatcher: Dispatcher, operation: str) -> None:
        self.dispatcher = dispatcher
        self.operation = operation
        self.generation = -1
        self.routes: dict[tuple[Any, ...], tuple[Any, Any, int]] = {}

    def __call__(self, signature: tuple[Any, ...], args: tuple[Any, ...]) -> Any:
        dispatcher = self.dispatcher
        routes = self.routes
        if self.generation != dispatcher.generation:
            routes.clear()
            self.generation = dispatcher.generation
        route = routes.get(signature)
        if route is None:
            if len(routes) >= _MAX_SIGNATURES:
                routes.clear()
            route = routes[signature] = dispatcher.route(self.operation, args)
        return dispatcher.run_routed(route[0], route[1], route[2], args)
