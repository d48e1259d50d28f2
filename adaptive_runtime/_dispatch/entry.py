"""The fast-path state of one key (:class:`Entry`) and the route table's types."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._concurrency.counters import counter, issued
from ..backend import Choice
from ..decision import Decision, Reason
from ..gating import TIMED_CALL_COST_US, OperationRate
from ..history import KeyHistory
from ..operations import Implementation, Operation
from ..policy import KeyState

# An operation's candidates (arms and variants) for one cold-start preference, and their
# implementations.
Arms = tuple[tuple[Choice, ...], dict[Choice, Implementation]]


# An entry's timed calls by (choice, reason), not yet in the dispatcher's counters: slot
# Entry.slots[choice] + TALLY_REASON[reason] of ``Entry.tally``, whose (choice, reason) is
# Entry.label(slot). (A list slot, not a Counter keyed by a tuple built and hashed on every
# timed call: a third of the cost; the counters fold it in when read, Counts.flush.)
TALLY_REASONS = tuple(Reason)
TALLY_REASON = {r: i for i, r in enumerate(TALLY_REASONS)}

# The longest timing period a key can have (RuntimeConfig.max_measure_period's upper limit).
MAX_PERIOD = 1 << 20


class Entry:
    """Fast-path state of one (operation, size bucket). Mutated in place, never replaced, so
    tickets taken by racing threads are never lost.

    Counting without a per-call lock: every call that finds the entry takes a ticket from
    ``ticks``; a timed call also takes one from ``timed`` before anything else, and counts
    itself under the lock. So fast calls = tickets - timed tickets, exactly, whenever no call
    is between its two ``next()``; :meth:`~adaptive_runtime._dispatch.counts.Counts.flush`
    adds them to the counters. Tickets come from ``_concurrency.counters`` counters:
    ``next()`` on one is a single C call (concurrent threads each get a distinct ticket), and
    how many were handed out is read without taking one.
    """

    __slots__ = ("backend", "bucket", "candidates", "capturing", "commit_pending", "expected",
                 "fast_flushed", "fast_label", "guarded", "impl", "impls", "key", "last_ticket",
                 "last_timed_s", "mask", "max_period", "next", "rate", "size_of", "slots",
                 "state", "tally", "ticks", "timed", "timed_exploits", "timing_cost_us",
                 "watch_fixed_ns", "watch_limit_ns", "watch_per_element_ns", "watch_tripped",
                 "watched")

    def __init__(self, key: KeyHistory, state: KeyState, arms: Arms,
                 rate: OperationRate, size_of: Callable[..., int],
                 capturing: Callable[[], bool] | None = None) -> None:
        self.key = key
        self.size_of = size_of  # the operation's (a watched call reads its size)
        # (a device twin's) whether a CUDA graph is captured now, asked by a fast path
        # committed to a CPU arm: (that arm's function, it so guarded); see period.py
        self.capturing, self.guarded = capturing, None
        self.state = state  # the policy's state of the key
        self.rate = rate
        self.bucket = key.bucket
        self.candidates, self.impls = arms
        self.ticks = counter()
        self.timed = counter()
        self.mask = 0  # 0: every call takes the slow path
        # the longest timing period that times a call of the key every KEY_TIMING_SHARE of
        # the trace key interval at its call rate (Periods.keep_visible)
        self.max_period = MAX_PERIOD
        # the key just committed: its next call is timed (mask 0) so that the commitment's
        # span can be exported; the fast path's period comes back after it (Settler._next)
        self.commit_pending = False
        self.impl: Callable[..., Any] | None = None
        # a slow key's fast path runs its arm watched (see watch.py): (the arm's function,
        # its watched wrapper); the call time over which the next call is timed, fixed and
        # per element, and its least value in the bucket; and whether a watched call was
        # over it since the key's period was last set
        self.watched: tuple[Callable[..., Any], Callable[..., Any]] | None = None
        self.watch_fixed_ns = self.watch_per_element_ns = self.watch_limit_ns = 0.0
        self.watch_tripped = False
        self.backend: Choice | None = None  # the fast path's choice
        self.last_ticket = -1  # ticket of the latest timed call (for the call rate)
        self.last_timed_s: float | None = None  # ...and when it was learned from
        self.fast_flushed = 0  # fast calls already added to the counters
        # timed calls that ran the fast path's arm as a plain exploit: counted with the fast
        # calls (one int, not a dict update of a tuple key: cheaper bookkeeping)
        self.timed_exploits = 0
        self.fast_label: tuple[str, Choice, Reason] | None = None  # ...and where
        # every other timed call, by (choice, reason), since the counters last folded it in
        # (see TALLY_REASON); counted under the lock
        self.slots = {c: i * len(TALLY_REASONS) for i, c in enumerate(self.candidates)}
        self.tally = [0] * (len(TALLY_REASONS) * len(self.candidates))
        # the key's next timed call's decision, made with the previous one's learning (one
        # lock per timed call); None: decide when the call comes
        self.next: Decision | None = None
        # EWMA of a timed exploit's learning cost (kernel end to lock release; a lost
        # update only delays it): sets the fast path's timing period
        self.timing_cost_us = TIMED_CALL_COST_US
        # input signature -> (result signature, the arm that answered first): what every
        # arm must return for such inputs (see checks.ResultChecks.check)
        self.expected: dict[Any, tuple[tuple[Any, Any], Choice]] = {}

    def label(self, slot: int) -> tuple[Choice, Reason]:
        """The (choice, reason) whose timed calls ``tally[slot]`` counts."""
        position, reason = divmod(slot, len(TALLY_REASONS))
        return self.candidates[position], TALLY_REASONS[reason]

    def next_ticket(self) -> int:
        """The ticket the next call will take."""
        return issued(self.ticks)

    def fast_calls(self) -> int:
        """Calls that took the fast path so far, and timed plain exploits of its arm."""
        return issued(self.ticks) - issued(self.timed) + self.timed_exploits


# How run() finds a registered operation's entries: (size_of, {bucket: entry}, operation,
# family route). The family route, where the operation has input families (a ``family`` hook,
# or an ``on_device`` hook where the GPU arm can run), is (classifier, {family: ({bucket:
# entry}, twin)}): the classifier names a call's family ("" for the default one), and calls of
# another family go to the operation's twin for it (see Operation.family_twin).
# (An untimed family's twin is (None, the function that runs its calls).)
Twins = dict[str, tuple[dict[int, Entry], Operation]]
FamilyRoute = tuple[Callable[..., str], Twins]
Route = tuple[Callable[..., int], dict[int, Entry], Operation, FamilyRoute | None]
