"""Fork safety: what a forked child renews before it runs anything of ours.

``fork()`` copies only the thread that called it. A lock that another thread of the parent held
at that moment (the span worker, the OpenTelemetry metric reader running our callbacks, the
history saver, a Prometheus scrape) stays held forever in the child, and the child's first
call that takes it hangs: a DataLoader worker that never returns a batch. So every lock such a
thread can take is re-created in the child, right after the fork, before the child runs any
Python code of its own (``os.register_at_fork``). Only the forking thread exists then, so
assigning a new lock is safe.

Objects whose locks need renewing register with :func:`renew_after_fork` (weakly: a dropped
object is forgotten); module-level locks register a hook with :func:`after_fork_in_child`.
Hooks run in registration order, and this module's own hook is registered when the package is
imported, so our locks are renewed before the hooks of the OpenTelemetry SDK objects made later
(whose restarted threads may call back into us).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["after_fork_in_child", "renew_after_fork"]

_T = TypeVar("_T")

# object -> how it renews itself in a child (an unbound method or a function of the object)
_tracked: weakref.WeakKeyDictionary[Any, Callable[[Any], None]] = weakref.WeakKeyDictionary()


def after_fork_in_child(hook: Callable[[], None]) -> None:
    """Run ``hook`` in every forked child, right after the fork (no-op where there is no
    ``fork``)."""
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=hook)


def renew_after_fork(obj: _T, renew: Callable[[_T], None]) -> _T:
    """Call ``renew(obj)`` in every forked child while ``obj`` lives; returns ``obj``."""
    _tracked[obj] = renew
    return obj


def _renew_tracked() -> None:
    for obj, renew in list(_tracked.items()):
        renew(obj)


after_fork_in_child(_renew_tracked)
