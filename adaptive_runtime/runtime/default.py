"""The process-wide default runtime: :func:`get_runtime`, registered with ``_default`` for the
lower layers that reach it at call time."""

from __future__ import annotations

import threading

from .._concurrency.forks import after_fork_in_child
from .._default import set_default_runtime
from .facade import AdaptiveRuntime

__all__ = ["get_runtime"]

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


set_default_runtime(get_runtime)  # (what lower layers reach through _default)
