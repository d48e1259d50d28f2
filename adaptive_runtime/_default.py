"""The process's default runtime, for the few lower-layer callers that need one at call time
(a torch backward pass that outlived the runtime it was recorded with).

The runtime module registers :func:`adaptive_runtime.runtime.get_runtime` here when it is
imported; this module imports nothing of the package, so kernels reach the default runtime
without importing the runtime (which imports them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["default_runtime", "set_default_runtime"]

_factory: Callable[[], Any] | None = None


def set_default_runtime(factory: Callable[[], Any]) -> None:
    """Make ``factory()`` what :func:`default_runtime` returns (the runtime module does)."""
    global _factory
    _factory = factory


def default_runtime() -> Any:
    """The process's default runtime (``adaptive_runtime.get_runtime()``)."""
    if _factory is None:  # (importing adaptive_runtime registers it: never seen in use)
        raise RuntimeError("no default runtime: import adaptive_runtime first")
    return _factory()
