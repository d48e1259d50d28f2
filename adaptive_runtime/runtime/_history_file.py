"""A runtime's ``history_path`` file: read and applied at start-up (a file measured elsewhere
or in a bad state handled), saved periodically and at exit by :class:`HistorySaver`."""

from __future__ import annotations

import atexit
import logging
import os
import threading
import warnings
import weakref
from collections.abc import Callable
from typing import Protocol

from .._concurrency.forks import renew_after_fork
from .._concurrency.thread_faults import keep_alive, note_restart, record_fault, survive
from .._process import in_dataloader_worker
from ..config import RuntimeConfig
from ..history import (
    LEGACY_HISTORY_FORMAT,
    HistoryFile,
    HistoryRecord,
    HistoryStore,
    HistoryWarning,
    fingerprint_differences,
    move_aside,
    read_history_file,
)

__all__ = ["HistorySaver", "apply_history_file", "foreign", "start_history"]

# (the logger of the module this came from, which users may have configured)
_log = logging.getLogger("adaptive_runtime.runtime")


class HistoryOwner(Protocol):
    """What the history file needs of the runtime it belongs to."""

    config: RuntimeConfig
    _history: HistoryStore

    def merge_history(self, records: list[HistoryRecord]) -> None: ...

    def save_history(self, path: str | os.PathLike[str]) -> None: ...


def apply_history_file(merge: Callable[[list[HistoryRecord]], None], loaded: HistoryFile,
                       force: bool, *, note: str = "", stacklevel: int = 3) -> bool:
    """Merge ``loaded`` with ``merge`` unless it was measured elsewhere and ``force`` is off
    (then one :class:`HistoryWarning` naming the file and what differs); ``True`` when
    applied."""
    if not force:
        reason = foreign(loaded)
        if reason is not None:
            warnings.warn(f"history file {loaded.path!r} not applied: {reason}{note} "
                          "(load_history(path, force=True) or "
                          "ADAPTIVE_RUNTIME_HISTORY_FORCE=1 applies it)",
                          HistoryWarning, stacklevel=stacklevel)
            return False
    merge(list(loaded.records))
    return True


def foreign(loaded: HistoryFile) -> str | None:
    """Why ``loaded`` does not describe this machine, or ``None`` when it does."""
    from ..history.fingerprint import hardware_fingerprint
    from ..kernels import known_operations

    if loaded.fingerprint is None:
        return (f"it has no hardware fingerprint (format {LEGACY_HISTORY_FORMAT!r}): "
                "measured on an unknown machine")
    # (only what its keys depend on: a torch-only file does not care about JAX's version)
    found = fingerprint_differences(hardware_fingerprint(), loaded.fingerprint, loaded.records,
                                    known_operations())
    if not found:
        return None
    return "measured on other hardware or library versions: " + "; ".join(found)


def start_history(rt: HistoryOwner, path: str) -> None:
    """``history_path`` at start-up: apply the file if it was measured here, and save the
    history periodically and at exit. Never raises for a bad file: a truncated, corrupt or
    foreign-format one is moved aside (one warning) and the runtime starts cold. In a
    DataLoader worker the file is only read (and a bad one left where it is)."""
    # A DataLoader worker (a spawned one gets here afresh) reads the file and leaves it: the
    # file is its parent's, which saves what it learned; a worker's save would overwrite it.
    worker = in_dataloader_worker()
    saving = not worker
    try:
        loaded = read_history_file(path)
    except FileNotFoundError:
        pass  # the first run: the file is written at the first save
    except ValueError as exc:
        if worker:
            moved = "left to the process that owns it (this is a DataLoader worker)"
            warnings.warn(f"{exc}; {moved}; starting with no history", HistoryWarning,
                          stacklevel=3)
            return
        try:
            moved = f"moved aside to {move_aside(path)!r}"
        except FileNotFoundError:
            moved = "already moved away"
        except OSError as move_error:
            # (saving would overwrite it: the file is kept, this runtime saves nothing)
            moved = (f"could not be moved aside ({move_error}): it is left as it is and this "
                     "runtime's history will not be saved")
            saving = False
        warnings.warn(f"{exc}; {moved}; starting with no history", HistoryWarning,
                      stacklevel=3)
    except OSError as exc:
        warnings.warn(f"history file {path!r} could not be read ({exc}); starting with no "
                      "history", HistoryWarning, stacklevel=3)
    else:
        apply_history_file(rt.merge_history, loaded, rt.config.history_force, stacklevel=4,
                           note="" if worker else
                           "; this run's history will replace it when saved")
    if saving:
        saver = HistorySaver(rt, path, rt.config.history_save_interval_s)
        rt._history_saver = saver  # type: ignore[attr-defined]
        saver.start()


class HistorySaver:
    """Saves a runtime's history to its ``history_path``: every ``interval_s`` while it
    changed (a daemon thread that reads a change count, off the call path) and at exit.

    Only in the process that made it: a forked child (whose runtime is a copy of the
    parent's) saves nothing, so it never overwrites the parent's file; nor does a DataLoader
    worker (see :func:`in_dataloader_worker`). Errors are logged, not raised: a save never
    breaks the program or its exit.
    """

    def __init__(self, rt: HistoryOwner, path: str, interval_s: float) -> None:
        self._ref = weakref.ref(rt)
        self._path = path
        self._interval_s = interval_s
        self._pid = os.getpid()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        # (its thread may hold both at a fork; the child never saves, but an exit handler
        # still sets the event: see _concurrency.forks)
        renew_after_fork(self, HistorySaver._renew_locks)
        # (what the file holds now: the history just loaded, or none)
        self._saved = rt._history.change_count()
        self._failing = False
        self.saves = 0
        self._thread: threading.Thread | None = None
        self._revive_lock = threading.Lock()

    def _renew_locks(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._revive_lock = threading.Lock()

    def start(self) -> None:
        rt = self._ref()
        if rt is None:
            return
        weakref.finalize(rt, self._stop.set)  # (the thread ends with its runtime)
        if self._interval_s > 0:
            self._start_thread()
            # (should it end abnormally, the next look from a timed call starts it again)
            keep_alive(self, "history", HistorySaver._revive)
        atexit.register(self.at_exit)

    def _start_thread(self) -> None:
        self._thread = threading.Thread(target=self._run, name="adaptive-runtime-history-save",
                                        daemon=True)
        self._thread.start()

    def _revive(self) -> None:
        """Start the thread again if it ended abnormally (see :meth:`_run`)."""
        thread = self._thread
        if (thread is None or thread.is_alive() or self._stop.is_set()
                or os.getpid() != self._pid):
            return
        with self._revive_lock:  # (not _lock: a save holds it, and may wait for the runtime)
            if self._thread is thread:
                note_restart("history")
                self._start_thread()

    def _run(self) -> None:
        try:
            while not self._stop.wait(self._interval_s):
                if os.getpid() != self._pid:
                    return
                with survive("history", "save"):
                    self.save_if_changed()
        except BaseException as exc:  # (what no guard stops): counted; a later look from a
            record_fault("history", "worker", exc)  # timed call starts it again

    def at_exit(self) -> None:
        self._stop.set()
        self.save_if_changed()

    def stop(self) -> None:
        """Save nothing more: no periodic save, no save at exit."""
        self._stop.set()
        atexit.unregister(self.at_exit)

    def save_if_changed(self) -> None:
        """Save now if the history changed since the last save (in this process only)."""
        if os.getpid() != self._pid or in_dataloader_worker():
            return
        rt = self._ref()
        if rt is None:
            self._stop.set()
            return
        with self._lock:
            count = rt._history.change_count()
            if count == self._saved:
                return
            try:
                rt.save_history(self._path)
            except Exception as exc:  # never break the loop's thread or the exit
                # (logged once until a save succeeds again: a full disk must not spam)
                log = _log.debug if self._failing else _log.warning
                log("could not save adaptive_runtime history to %s: %s", self._path, exc)
                self._failing = True
                return
            self._failing = False
            self._saved = count
            self.saves += 1
