"""The package's own threads never die: each unit of their work is guarded, what it raised is
counted and logged once, and a thread that ended anyway is started again.

The threads (by the name they are counted under, ``ar.telemetry.stats().thread_faults``):

- ``spans``: a runtime's span worker (``telemetry.span_worker``), per batch and per record;
- ``export``: ``configure()``'s span export worker (``adaptive_runtime_sdk.export``), per batch;
- ``metrics``: the OpenTelemetry SDK's metric reader thread, where it runs our callbacks and
  our exporter wrapper (the thread is the SDK's; the work we put on it is guarded);
- ``history``: a runtime's history saver (``runtime._history_file``), per save;
- ``thread_watch``: the reading of the thread pools' sizes, on a timed call;
- ``prepare``: a runtime's compiler of cold numba candidates (``_dispatch.prepare``), while it
  has work.

:func:`survive` guards one unit: an ``Exception`` raised in it is counted for its thread,
logged at WARNING with its traceback once per (thread, unit, exception type) — a failing
exporter must not write a traceback a second — and swallowed, so the thread goes on with its
next unit. A thread that ends abnormally all the same (a ``BaseException`` got through) is
counted too, and started again by the next call that needs it — the span worker by the next
span queued, the export worker by the next span ended, any registered with
:func:`keep_alive` by the next look (:func:`revive_threads`, from timed calls about once a
second) — which says so once per thread.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from types import TracebackType

from .forks import after_fork_in_child

__all__ = ["THREADS", "fault_counts", "keep_alive", "note_restart", "record_fault",
           "restart_counts", "revive_threads", "survive"]

_log = logging.getLogger("adaptive_runtime.threads")

THREADS = ("spans", "export", "metrics", "history", "thread_watch", "prepare")

_lock = threading.Lock()
_faults: dict[str, int] = dict.fromkeys(THREADS, 0)
_restarts: dict[str, int] = dict.fromkeys(THREADS, 0)
_logged: set[tuple[str, str, str]] = set()
_restart_logged: set[str] = set()


def _renew_lock() -> None:
    # (a thread counting a fault may hold it at a fork: see _concurrency.forks)
    global _lock
    _lock = threading.Lock()


after_fork_in_child(_renew_lock)


def record_fault(thread: str, unit: str, exc: BaseException) -> None:
    """Count ``exc``, raised in ``unit`` of ``thread``'s work; log it the first time its kind
    (thread, unit, exception type) is seen."""
    kind = (thread, unit, type(exc).__name__)
    with _lock:
        _faults[thread] = _faults.get(thread, 0) + 1
        first = kind not in _logged
        if first:
            _logged.add(kind)
    if first:
        _log.warning("adaptive_runtime: %s thread: %s raised %r; counted (ar.telemetry.stats()"
                     ".thread_faults), the thread goes on (logged once per kind)",
                     thread, unit, exc, exc_info=(type(exc), exc, exc.__traceback__))


class survive:
    """Guard one unit of a thread's work: an ``Exception`` it raises is counted, logged once
    per kind and swallowed (see the module)."""

    __slots__ = ("failed", "thread", "unit")

    def __init__(self, thread: str, unit: str) -> None:
        self.thread, self.unit = thread, unit
        self.failed = False  # whether the unit raised (a loop may pause before the next)

    def __enter__(self) -> survive:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 _tb: TracebackType | None) -> bool:
        if exc is None or not isinstance(exc, Exception):
            return False
        self.failed = True
        record_fault(self.thread, self.unit, exc)
        return True


def note_restart(thread: str) -> None:
    """Count a restart of ``thread`` (it had ended abnormally); say so once per thread."""
    with _lock:
        _restarts[thread] = _restarts.get(thread, 0) + 1
        first = thread not in _restart_logged
        _restart_logged.add(thread)
    if first:
        _log.warning("adaptive_runtime: the %s thread had ended abnormally; started again "
                     "(counted in ar.telemetry.stats().threads_restarted; said once)", thread)


def fault_counts() -> dict[str, int]:
    """Exceptions caught in each thread's work since the process started, by thread."""
    with _lock:
        return dict(_faults)


def restart_counts() -> dict[str, int]:
    """Times each thread was started again after ending abnormally, by thread."""
    with _lock:
        return dict(_restarts)


# Threads that only a look from outside can restart (see revive_threads): each owner's
# thread name and revive method, weakly (a dropped owner is forgotten).
_revive: weakref.WeakKeyDictionary[object, tuple[str, Callable[[object], None]]] = \
    weakref.WeakKeyDictionary()


def keep_alive(owner: object, thread: str, revive: Callable[[object], None]) -> None:
    """Have :func:`revive_threads` call ``revive(owner)`` while ``owner`` lives: it starts
    ``owner``'s ``thread`` again if it ended abnormally."""
    with _lock:
        _revive[owner] = (thread, revive)


def revive_threads() -> None:
    """Start again every registered thread that ended abnormally (see :func:`keep_alive`).
    Never raises: a revive that fails is counted as a fault of its thread."""
    with _lock:
        owners = list(_revive.items())
    for owner, (thread, revive) in owners:
        try:
            revive(owner)
        except Exception as exc:  # (the look is made on a user's call: it must not fail it)
            record_fault(thread, "restart", exc)
