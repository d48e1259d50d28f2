"""What a selection is: :class:`Decision` (the implementation chosen, why, how sure, from which
estimates) and :class:`Reason`. The bottom layer's vocabulary: the policy makes decisions,
the trace gate, the spans, the metrics and the replay read them."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from .backend import Backend, Choice

__all__ = ["EMPTY_ESTIMATES", "NO_TIMINGS", "Decision", "Reason"]


class Reason(str, enum.Enum):
    """Why an arm was chosen."""

    HEURISTIC = "heuristic"
    EXPLORE = "explore"
    EXPLOIT = "exploit"
    RECHECK = "recheck"
    DRIFT = "drift"
    FORCED = "forced"
    FALLBACK = "fallback"

    def __str__(self) -> str:
        return self.value

    @property
    def is_routine(self) -> bool:
        """A plain exploit: the one decision that is not interesting enough to trace by itself."""
        return self is Reason.EXPLOIT


_EMPTY: Mapping[Any, Any] = MappingProxyType({})
#: An empty, read-only ``estimates_us`` / ``floors_us`` / ``stdevs_us`` (shared: one per
#: decision would cost)
EMPTY_ESTIMATES: Mapping[Choice, float] = _EMPTY
NO_TIMINGS: Mapping[Choice, int] = _EMPTY  # (the same object: an empty ``timings``)


class Decision(NamedTuple):
    """One selection: the implementation chosen (``choice``: an arm, or a variant of one),
    why, how sure, and the latency estimates it was based on. ``backend`` is the arm it runs
    on (``choice.arm``), ``variant`` the variant's name (``""``: the arm's primary
    implementation).

    Immutable. A ``NamedTuple`` rather than a frozen dataclass because one is built on every
    exploring call, and a frozen dataclass costs ~4x as much to construct.

    ``confidence`` is in [0, 1]: 0 while guessing or exploring, 1 when forced; for exploit the
    probability (normal approximation) that the chosen arm really is faster than the runner-up.
    ``estimates_us`` holds the expected latency of each choice with history (``inf`` for an arm
    whose last attempt failed). ``plan``, on an exploring decision, lists the arms this round
    of exploration times next, in order (the runtime follows it without asking again).
    ``floors_us`` holds what arms with a known floor take at least here (the GPU arm of a
    host call: its copies at the measured bandwidth); an arm never timed whose floor is over
    ``floor_ratio`` x the best measured estimate is not tried yet (see ``PolicyConfig``).

    How much each estimate can be trusted, on the decisions that are explained
    (``rt.decide()`` and the ones a span shows; empty on the others, which nobody reads):

    - ``timings``: for each choice in ``estimates_us``, the number of timings its estimate
      stands on: those learned in the arm's current epoch (a drift alarm, a re-measure or an
      arm found faster starts again from its first timing; loaded or merged history counts
      as the timings it holds). The estimate is read from the latest 16 of them (the mean; of
      the first three, their lower or median: docs/policy.md).
    - ``stdevs_us``: the standard deviation (µs) of those timings: the square root of the
      variance the history keeps of the same window as the estimate (a stall far over every
      other timing left out, as from the estimate); only for choices timed twice or more and
      not failing (one timing has no spread). The spread of single timings, not the error of
      the estimate.
    - ``threads``: where the choice runs on torch's intra-op pool (``Implementation.threads``
      ``"torch"``), the threads it ran at (a span's) or runs at now (``rt.decide()``): the
      count the runtime holds torch at for a phase (``_dispatch/pool_phase``), else the
      pool's size. 0 for a choice on no such pool (a numba count is in the variant's name,
      ``simd:numba@1``).
    """

    choice: Choice
    reason: Reason
    confidence: float = 0.0
    estimates_us: Mapping[Choice, float] = EMPTY_ESTIMATES
    samples: int = 0
    plan: tuple[Choice, ...] = ()
    floors_us: Mapping[Choice, float] = EMPTY_ESTIMATES
    timings: Mapping[Choice, int] = NO_TIMINGS
    stdevs_us: Mapping[Choice, float] = EMPTY_ESTIMATES
    threads: int = 0

    @property
    def backend(self) -> Backend:
        """The arm the chosen implementation runs on."""
        return self.choice.arm

    @property
    def variant(self) -> str:
        """The chosen variant's name; ``""`` for the arm's primary implementation."""
        return self.choice.variant

    @property
    def has_history(self) -> bool:
        return bool(self.estimates_us)
