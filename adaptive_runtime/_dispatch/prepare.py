"""Candidates whose code is not compiled yet: compiled off the caller's path when affordable,
explored once ready.

A numba implementation's first call in a process compiles its kernels, or loads them from
numba's cache, for the call's argument types: measured here, ~0.8 s (numba's import
included) inside the first exploring calls of an adapted training loop, which made a quiet
1,500-step digits loop 1.3-1.55x plain torch; with those candidates left out it ran as fast as
plain torch. Compiled on another thread instead, the cost stays: its import and compiler hold
the interpreter, and each of the loop's ATen calls waits for it on return (~0.1-0.3 s steps).
What pays for it is a run long enough to gain from the candidates. So:

- the arm the cold-start order runs first on a key compiles in its call, as it always did
  (something must run, and it is the arm a fixed rule would run), and so do its variants at
  other thread counts, which share its kernels;
- any other candidate whose code is not compiled yet is *cold*: left out of its keys
  (``Candidates.of``) and queued here by its key's first call, with a small copy of the
  call's inputs (``kernels._specimen``: numba compiles per type, not per size);
- this module's thread compiles the queue once it is affordable, as exploration is: when
  ``explore_share`` of the time the runtime's calls have taken (its timings tell) covers what
  the preparation is expected to take (numba's import where it is not loaded yet, then what
  the last ones took), less what preparations took so far — a quiet short run never pays it,
  a long one pays at most that share;
- once compiled, the operation's routes are made again (its keys keep what they learned) and
  the policy explores the new candidate as it does any arm a key has not timed.

``AdaptiveRuntime.wait_compiled()`` compiles everything queued now (a benchmark's warm-up).

Which implementations: those whose ``compile_count`` is numba's (``kernels._compile.
KernelCompiles``), and BLAS's variants at fewer threads, whose preparation is finding BLAS's
thread-count functions (``kernels._thread_counts.BlasSetter``: milliseconds, once; where there
are none to use, they stay out). JAX's arms compile per shape, so a small copy would not
prepare them; the device family's CPU arms are round trips through the host, whose copies a
small copy would not spare (their kernels are the torch family's, compiled where that
family's calls come).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from .._concurrency.forks import renew_after_fork
from .._concurrency.thread_faults import keep_alive, note_restart, record_fault
from .._imported import imported
from ..backend import Choice
from ..kernels._specimen import compiled_by_numba, prepare_ahead, prepared_ahead, specimen
from ..operations import DEVICE_FAMILY, FAMILY_SEPARATOR, Implementation, Operation

__all__ = ["Preparer"]

_log = logging.getLogger(__name__.rpartition(".")[0])

_DEVICE_TWIN = f"{FAMILY_SEPARATOR}{DEVICE_FAMILY}"

# What a preparation is expected to take before one was measured: the first in a process that
# has not imported numba (its import and first kernels: ~0.8 s measured here, in an adapted
# training loop's first steps), and one after it (a kernel loaded from numba's cache: tens of
# ms; compiled afresh, ~1 s — the measured cost then takes over).
FIRST_COMPILE_US = 800_000.0
KERNEL_COMPILE_US = 30_000.0
# Finding BLAS's thread-count functions (threadpoolctl's import and its reading of the loaded
# libraries: 1-7 ms measured here).
FIND_BLAS_US = 10_000.0
# Weight of a measured preparation in the expected cost of the next.
_COST_ALPHA = 0.5

# A preparation: (operation name, choice, the implementation, the inputs' specimen or None)
_Job = tuple[str, Choice, Implementation, "tuple[Any, ...] | None"]


class Preparer:
    """Compiles cold numba candidates on its own thread, as the time the runtime's calls have
    taken affords (``share`` of it: ``explore_share``), and says which operations gained a
    candidate (``finished``). The thread runs while there is affordable work, and ends when
    there is none."""

    def __init__(self, share: float) -> None:
        self._share = share
        self._lock = threading.Lock()
        # (operation name, choice) -> whether ready (False: queued or being compiled)
        self._ready: dict[tuple[str, Choice], bool] = {}
        self._jobs: deque[_Job] = deque()
        self._thread: threading.Thread | None = None
        self._idle = threading.Condition(self._lock)
        self._spent_us = 0.0  # what the runtime's calls have taken, as its timings tell
        self._used_us = 0.0  # what preparations have taken (wall time, their thread's)
        self._cost_us = KERNEL_COMPILE_US  # what the next is expected to take, numba loaded
        self._unbudgeted = False  # (wait() asked for everything now)
        # operations with a preparation done since the dispatcher last took them: their
        # routes are made again, so their keys see the new candidates
        self.finished: set[str] = set()
        renew_after_fork(self, Preparer._renew)
        keep_alive(self, "prepare", Preparer._revive)

    def cold(self, op: Operation, choice: Choice, impl: Implementation | None) -> bool:
        """Whether ``choice`` of ``op`` needs preparing: numba code whose kernels have
        compiled nothing in this process (another input type of theirs compiles in its call,
        as before) and that was not prepared here, or a BLAS variant whose thread-count
        functions are not found."""
        count = impl.compile_count if impl is not None else None
        return (prepared_ahead(count) and not self._ready.get((op.name, choice), False)
                and count() == 0 and not op.name.endswith(_DEVICE_TWIN))  # type: ignore[misc]

    def leave_out_cold(self, op: Operation, order: Sequence[Choice]) -> tuple[Choice, ...]:
        """``order`` (candidates, in heuristic order) without its cold choices but the first
        and those sharing its kernels (its variants at other thread counts): the arm the
        cold-start order runs first compiles in its call, as it always did."""
        if not order:
            return ()
        first = order[0]
        compiled_first = getattr(op.implementation_for(first), "compile_count", None)
        kept = [first]
        for choice in order:
            impl = op.implementation_for(choice)
            if not self.cold(op, choice, impl):
                if choice is not first:
                    kept.append(choice)
            elif choice is first or impl.compile_count is compiled_first:  # type: ignore[union-attr]
                # (the first compiles in its call, and so do the kernels of its variants at
                # other thread counts, which share them: candidates from now on — one left
                # out later would leave a key's plans and history naming a choice its entry
                # cannot run; a BLAS variant finds its setter here, once)
                usable = prepare_ahead(impl.compile_count, impl.fn, None)  # type: ignore[union-attr]
                self._ready[(op.name, choice)] = usable
                if choice is not first and usable:
                    kept.append(choice)
        return tuple(kept)

    def request(self, op: Operation, choices: Sequence[Choice], args: tuple[Any, ...]) -> None:
        """Queue ``choices`` of ``op`` (cold) to be compiled for calls like one on ``args``,
        before a key's candidates are found. Asked once per (operation, choice); a call
        whose inputs cannot be copied small makes them ready as they are (their first call
        compiles, as it did before)."""
        wanted = [c for c in choices if (op.name, c) not in self._ready]
        if not wanted:
            return
        small = specimen(args)
        with self._lock:
            for choice in wanted:
                impl = op.implementation_for(choice)
                if (op.name, choice) in self._ready or impl is None:
                    continue
                if small is None and compiled_by_numba(impl.compile_count):
                    # (asked before the key's candidates are found: no route to make again;
                    # its first call compiles, as it did before)
                    self._ready[(op.name, choice)] = True
                    continue
                self._ready[(op.name, choice)] = False
                self._jobs.append((op.name, choice, impl, small))
            self._start_if_affordable()

    def spend(self, duration_us: float) -> None:
        """The runtime's calls took ``duration_us`` more (a timed call, for the calls it
        stands for): a queued preparation may have become affordable."""
        self._spent_us += duration_us
        if self._jobs and self._thread is None:
            with self._lock:
                self._start_if_affordable()

    def take_finished(self) -> set[str]:
        """The operations that gained a candidate since the last call (and forget them)."""
        with self._lock:
            names, self.finished = self.finished, set()
        return names

    def wait(self, timeout_s: float | None = None) -> bool:
        """Compile everything queued now, affordable or not, and wait until it is done;
        ``False`` if ``timeout_s`` passed first."""
        with self._idle:
            self._unbudgeted = True
            try:
                if self._jobs and self._thread is None:
                    self._start()
                return self._idle.wait_for(lambda: not self._jobs and self._thread is None,
                                           timeout_s)
            finally:
                self._unbudgeted = False

    # ------------------------------------------------------------------ the budget

    def _affordable(self) -> bool:
        """Whether the next preparation fits what is left of the allowance: ``share`` of the
        time the runtime's calls have taken, less what preparations took. Lock held."""
        if self._unbudgeted:
            return True
        if not compiled_by_numba(self._jobs[0][2].compile_count):
            expected = FIND_BLAS_US
        elif imported("numba") is not None:
            expected = self._cost_us
        else:
            expected = FIRST_COMPILE_US
        return self._share * self._spent_us - self._used_us >= expected

    def _start_if_affordable(self) -> None:
        """Start the thread where there is work it can afford (lock held)."""
        if self._jobs and self._thread is None and self._affordable():
            self._start()

    # ------------------------------------------------------------------ the thread

    def _start(self) -> None:
        """Start the thread (lock held)."""
        self._thread = threading.Thread(target=self._run, name="adaptive-runtime-prepare",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while True:
                with self._lock:
                    if not self._jobs or not self._affordable():
                        self._thread = None
                        self._idle.notify_all()
                        return
                    name, choice, impl, small = self._jobs[0]
                    if self._ready.get((name, choice)):
                        # (made ready meanwhile: the cold-start order's first, compiled in its
                        # call — nothing to do, and no route to make again)
                        self._jobs.popleft()
                        continue
                started = time.perf_counter()
                usable = _prepare(name, choice, impl, small)
                took_us = (time.perf_counter() - started) * 1e6
                with self._lock:
                    self._jobs.popleft()
                    # (not usable: it stays cold, out of its keys, and is not asked for again)
                    self._ready[(name, choice)] = usable
                    self.finished.add(name)
                    self._used_us += took_us
                    if compiled_by_numba(impl.compile_count):
                        self._cost_us += _COST_ALPHA * (took_us - self._cost_us)
        except BaseException as exc:  # (what no guard stops): counted; the next look from a
            record_fault("prepare", "worker", exc)  # timed call starts it again (_revive)

    def _revive(self) -> None:
        """Start the thread again if it ended abnormally with work left (see :meth:`_run`)."""
        with self._lock:
            thread = self._thread
            if thread is not None and not thread.is_alive() and self._jobs:
                note_restart("prepare")
                self._start()

    def _renew(self) -> None:
        """In a forked child: new locks, no thread; what was queued is asked for again."""
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._thread = None
        self._ready = {k: v for k, v in self._ready.items() if v}
        self._jobs.clear()


def _prepare(name: str, choice: Choice, impl: Implementation,
             small: tuple[Any, ...] | None) -> bool:
    """Prepare ``impl`` (compile its kernels on the specimen ``small``, or find what it
    needs); whether it can run as meant. Raising there is no fault of the thread: a specimen
    is not every operation's valid input (the choice is then compiled by its first call, as
    before)."""
    try:
        return prepare_ahead(impl.compile_count, impl.fn, small)
    except Exception as exc:
        _log.debug("could not prepare %s of %s ahead (%r): its first call will",
                   choice.value, name, exc)
        return True
