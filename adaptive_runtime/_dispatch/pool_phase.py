"""torch's thread count between the runtime's calls, following what its keys chose.

Each torch key learns ATen at the pool's size (``simd``) and at fewer threads
(``simd:torch@1``: ``kernels/_thread_counts``), and commits to the faster. Which count torch is
held at between calls matters beyond those keys: autograd's backward and the optimizer step run
at it, and a key whose count differs switches the pool for its call and back. So about once a
second (``Settler._look_around``) the time the torch keys spent since the last look is summed
by the count of the choice each is committed to — calls times that choice's estimate — and
torch is held at the count that took at least ``SHARE`` of it (hysteresis: a near tie changes
nothing). When the load that made one thread win goes, the keys' own drift and exploration
bring them back to the pool's size, and the count follows them.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

from ..threads import set_torch_phase, torch_phase
from .entry import Entry

__all__ = ["SHARE", "PoolPhase"]

# the share of the torch keys' time a count must take to become the count between calls
SHARE = 2 / 3


class PoolPhase:
    """Holds torch at the count its committed keys spend most of their time at. Not
    thread-safe: the caller holds the runtime's lock."""

    def __init__(self) -> None:
        self._seen: dict[int, int] = {}  # entry id -> its calls at the last look

    def look(self, entries: Iterable[Entry]) -> int:
        """Weigh the calls since the last look and hold torch at the winning count; returns the
        count torch is held at now (0: the pool's own size)."""
        time_at: dict[int, float] = defaultdict(float)
        seen: dict[int, int] = {}
        for entry in entries:
            choice = entry.backend
            impl = entry.impls.get(choice) if choice is not None else None
            if impl is None or impl.threads != "torch":
                continue
            calls = entry.next_ticket()
            seen[id(entry)] = calls
            arm = entry.key.arms.get(choice)  # type: ignore[arg-type]
            estimate = arm.estimate_us if arm is not None else math.nan
            if math.isfinite(estimate):
                time_at[impl.thread_count] += (calls - self._seen.get(id(entry), 0)) * estimate
        self._seen = seen
        total = sum(time_at.values())
        if total > 0:
            count, spent = max(time_at.items(), key=lambda item: item[1])
            if count != torch_phase() and spent >= SHARE * total:
                set_torch_phase(count)
        return torch_phase()
