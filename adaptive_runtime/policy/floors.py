"""What the key's neighbours say (a :class:`Neighbours`: the history of the operation's other
size buckets): the floors, what each arm takes at least on the key, raised to what it takes on
a smaller bucket (``_raise_floors``), and the arm the nearest buckets measured fastest, with
how far each arm was behind it there (``_neighbours_measured``); when to look
(``look_around``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

from ..backend import Choice
from ..history import KeyHistory
from .compare import best_arm
from .state import KeyState

__all__ = ["Neighbours"]


class Neighbours(Protocol):
    """What the policy reads of other keys (a :class:`~adaptive_runtime.history.HistoryStore`
    is one): a smaller size bucket's history, for the floors."""

    def find(self, operation: str, bucket: int) -> KeyHistory | None: ...


def look_around(state: KeyState, key: KeyHistory, candidates: Sequence[Choice],
                neighbours: Neighbours) -> None:
    """Raise the floors to what the smaller buckets measured: at the checkpoints after
    the first and second round of timings, not only when the key is created (a workload
    creates its keys together, long before any of them has converged), and at every full
    evaluation while an arm has been timed here fewer than twice — never, or once, maybe
    cold — as its floor may be what keeps it out or prices its re-check. (Replayed over
    twelve recordings of ``benchmarks/decision_quality.py``, with the floors made afresh
    each time: mean regret +5.99 % -> +5.84 %; +6.71 -> +6.70 % over the nine of ~30
    calls a key, +3.83 -> +3.27 % over the three of ~120. Either change alone: +6.00 %,
    +5.99 %.)

    On a key's first call, also the arm the neighbouring buckets measured fastest
    (``_neighbours_measured``), which goes first. It is no prior and rules no arm out:
    every arm is still timed — one far behind there only later, as the key's exploration
    allowance affords it (``_affordable``). (Replayed over seven recordings of
    ``benchmarks/decision_quality.py``: first calls on an arm the key did not commit to,
    538 -> 456; regret +6.48 / +6.51 %, the same. A prior timed in full and the others
    once cost regret in an earlier replay, 17.5% without against 19.0% with it, as
    crossovers between adjacent buckets are common on a shared machine.)"""
    if ((state.incumbent is None and state.decisions - state.epoch_start
         <= 2 * len(candidates))
            or any(b not in key.arms or key.arms[b].epoch_samples < 2
                   for b in candidates)):
        _raise_floors(state, key, candidates, neighbours)
        best, state.behind = _neighbours_measured(key, candidates, neighbours)
        if not key.samples:
            state.neighbours_best = best



def _raise_floors(state: KeyState, key: KeyHistory, candidates: Sequence[Choice],
                  neighbours: Neighbours) -> None:
    """Raise the key's own floors (``set_floors``) to what each arm is estimated to take on
    the nearest smaller size bucket of the same operation where it was timed. A kernel does
    not get faster on more elements, so that is what it takes here at least: an arm 50 times
    slower than ATen on batches of 64 is not tried on batches of 512. (One timing there is
    enough: noise only ever adds time, the floor ratio leaves slack, and every few re-checks
    look at every arm.) Made afresh each time, not raised from the last: a smaller bucket's
    estimate comes down when its first, cold timing is re-checked (a threaded dot's first
    call at ~5·10^5 elements took 5,962 us, its re-check 175), and a floor kept from it ruled
    the arm out on every larger key, where it was 1.6-2x faster."""
    floors = state.floors = dict(state.own_floors) if state.own_floors else None
    find, operation = neighbours.find, key.operation
    # (each smaller bucket looked up once for all arms, nearest first: this runs on a key's
    # first calls, where an arm measured nowhere yet would cost a lookup per bucket per arm)
    missing = list(candidates)
    for bucket in range(key.bucket - 1, max(key.bucket - _FLOOR_LOOKBACK, 0), -1):
        smaller = find(operation, bucket)
        if smaller is None:
            continue
        arms = smaller.arms
        still_missing = []
        for backend in missing:
            stats = arms.get(backend)
            if stats is None or not stats.epoch_samples or stats.consecutive_failures:
                still_missing.append(backend)
                continue
            if floors is None:
                floors = state.floors = {}
            if stats.mean_us > floors.get(backend, 0.0):
                floors[backend] = stats.mean_us
        if not still_missing:
            return
        missing = still_missing


# Smaller size buckets looked at for an arm's floor on a key (see _raise_floors).
_FLOOR_LOOKBACK = 8


def _neighbours_measured(key: KeyHistory, candidates: Sequence[Choice],
                         neighbours: Neighbours) -> tuple[Choice | None, dict[Choice, float]]:
    """What the nearest size bucket below and the nearest above the key (within
    ``_NEIGHBOUR_REACH``) where two of ``candidates`` or more were measured say: the fastest
    of them, where the two sides agree (or one side only measured; ``None`` otherwise: a
    crossover lies between them, or nothing was measured), and how far each was behind the
    fastest there (its estimate over the fastest's; of two sides, the lesser)."""
    find, operation, bucket = neighbours.find, key.operation, key.bucket
    found: Choice | None = None
    agree = True
    behind: dict[Choice, float] = {}
    for direction in (-1, 1):
        for distance in range(1, _NEIGHBOUR_REACH + 1):
            other = find(operation, bucket + direction * distance)
            if other is None:
                continue
            arms = other.arms
            measured = [b for b in candidates if b in arms
                        and arms[b].epoch_samples and not arms[b].consecutive_failures]
            if len(measured) < 2:
                continue
            fastest = best_arm(measured, arms)
            fastest_us = arms[fastest].estimate_us  # type: ignore[index]
            for b in measured:
                ratio = arms[b].estimate_us / fastest_us if fastest_us > 0.0 else 1.0
                if ratio < behind.get(b, math.inf):
                    behind[b] = ratio
            if found is not None and fastest is not found:
                agree = False
            found = fastest
            break  # (the nearest measured bucket on this side only)
    return (found if agree else None), behind


# Size buckets on either side of a key looked at for its first call's arm and for how far
# behind each arm starts (_neighbours_measured).
_NEIGHBOUR_REACH = 2
