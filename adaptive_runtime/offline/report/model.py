"""What a report shows, whatever it was read from: one row per (operation, size bucket) with
each arm's learned latency and the arm chosen, the traced decisions over time, and where the
fastest arm changes between size buckets (the crossovers)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from ...backend import Choice, choice_order
from ...keys import bucket_bounds, reference_size

__all__ = ["CLEAR_MARGIN", "SPEEDUP_MIN_TIMINGS", "Crossover", "DecisionEvent", "KeyRow", "Report",
           "ReportInputError", "compact_size", "crossovers", "fastest_arm"]


class ReportInputError(ValueError):
    """A report's input is missing, empty or corrupt; the message is one line saying which
    file and what is wrong (the CLI prints it and exits with status 2)."""


# Timings an arm needs before a speed-up over it (or of it) is shown: one timing of a small key
# measures a cold cache and the timing's own cost, not the kernel (a demo showed "13.46x"
# between two kernels of ~1 us each, from 3-4 timings of one and 1 of the other).
SPEEDUP_MIN_TIMINGS = 3


@dataclass(frozen=True, slots=True)
class KeyRow:
    """One (operation, size bucket): each measured arm's learned latency (µs, at the bucket's
    reference size), the timings learned on the key, and the arm chosen there. ``reason`` and
    ``confidence`` are those of the decision shown, where the source has one (a history file
    keeps no decisions). ``timings``: how many timings each arm's latency stands on, and
    ``stdev_us``: their standard deviation (µs; arms with two timings or more), where the
    source says (a history file, a live runtime and spans written since they carry
    ``adaptive.timings.<arm>`` do). ``threads``: the thread count the chosen arm ran at, where
    the runtime holds its pool at a count of its choosing (torch's: ``adaptive.threads`` on
    the spans, ``Decision.threads``); 0 where the source does not say."""

    operation: str
    size_bucket: int
    latency_us: Mapping[Choice, float]
    samples: int
    chosen: Choice | None
    reason: str | None = None
    confidence: float | None = None
    timings: Mapping[Choice, int] = field(default_factory=dict)
    stdev_us: Mapping[Choice, float] = field(default_factory=dict)
    threads: int = 0

    @property
    def reference_size(self) -> int:
        """The size the latencies stand for (the bucket's geometric middle)."""
        return reference_size(self.size_bucket)

    @property
    def sizes(self) -> tuple[int, int]:
        """The smallest and largest input size of the bucket."""
        return bucket_bounds(self.size_bucket)

    @property
    def fastest(self) -> Choice | None:
        """The arm with the lowest finite learned latency (``None``: none measured)."""
        return fastest_arm(self.latency_us)

    @property
    def speedup(self) -> float | None:
        """The slowest measured arm's latency over the chosen arm's: ``None`` unless both are
        known, at least two arms were measured and both latencies stand on
        ``SPEEDUP_MIN_TIMINGS`` timings each (where the source does not count them per arm:
        the key's timings, that many per arm measured)."""
        finite = {arm: us for arm, us in self.latency_us.items() if math.isfinite(us)}
        mine = self.latency_us.get(self.chosen) if self.chosen is not None else None
        if mine is None or len(finite) < 2 or not mine > 0:
            return None
        slowest = max(finite, key=finite.__getitem__)
        if self.timings:
            if min(self.timings.get(self.chosen, 0),  # type: ignore[arg-type]
                   self.timings.get(slowest, 0)) < SPEEDUP_MIN_TIMINGS:
                return None
        elif self.samples < SPEEDUP_MIN_TIMINGS * len(finite):
            return None
        return finite[slowest] / mine


def fastest_arm(latency_us: Mapping[Choice, float]) -> Choice | None:
    """The arm (or variant) with the lowest finite latency in ``latency_us`` (``None`` if
    none is finite; a tie goes to the first in ``choice_order``, so the answer never depends
    on dict order)."""
    finite = [(us, choice_order(b), b) for b, us in latency_us.items() if math.isfinite(us)]
    return min(finite, key=lambda t: t[:2])[2] if finite else None


@dataclass(frozen=True, slots=True)
class DecisionEvent:
    """One traced selection (an ``adaptive.select`` span): when (seconds from the first
    selection read), which key, the arm, why, how many calls the span stands for, and whether
    the key committed to the arm with it."""

    time_s: float
    operation: str
    input_size: int
    backend: Choice
    reason: str
    weight: float = 1.0
    commit: bool = False


# A crossover is *clear* when each arm leads by this much somewhere on its side: above the
# 5-15 % by which a busy machine's timing noise moves two tied arms' estimates apart.
CLEAR_MARGIN = 0.20


@dataclass(frozen=True, slots=True)
class Crossover:
    """The fastest arm changes from ``before`` (in bucket ``lower_bucket``) to ``after`` (in
    ``upper_bucket``, the next bucket with a measurement); ``size`` is where between them,
    on a log scale: the geometric mean of their reference sizes (the first size of the upper
    bucket when the two are adjacent)."""

    operation: str
    lower_bucket: int
    upper_bucket: int
    before: Choice
    after: Choice
    # how clearly each arm wins on its side: the widest lead (runner-up / winner - 1) over
    # the stretch of buckets it wins, the smaller of the two (inf: one arm measured there)
    margin: float = math.inf

    @property
    def clear(self) -> bool:
        """Whether each of the two arms wins its side by ``CLEAR_MARGIN`` somewhere. A
        change between arms that are nowhere far apart (a run of near-ties, or a single
        bucket where timing noise put the other arm ahead) may move from run to run."""
        return self.margin >= CLEAR_MARGIN

    @property
    def size(self) -> int:
        if self.upper_bucket == self.lower_bucket + 1:
            return bucket_bounds(self.upper_bucket)[0]
        return round(math.sqrt(reference_size(self.lower_bucket)
                               * reference_size(self.upper_bucket)))

    @property
    def label(self) -> str:
        """``"scalar→simd ≈1k"``: what the figure writes beside the crossover."""
        return f"{self.before.value}→{self.after.value} ≈{compact_size(self.size)}"


@dataclass(frozen=True, slots=True)
class Report:
    """Everything a report renders: ``rows`` sorted by (operation, bucket), ``events`` in time
    order (empty for a history file), ``source``: what was read, in a few words, and
    ``chosen_means``: how the source's "chosen" arm was found."""

    rows: tuple[KeyRow, ...]
    events: tuple[DecisionEvent, ...] = ()
    source: str = ""
    chosen_means: str = ""

    @property
    def operations(self) -> list[str]:
        """Operations with a row or an event, sorted."""
        return sorted({r.operation for r in self.rows} | {e.operation for e in self.events})

    def only(self, operations: Sequence[str]) -> Report:
        """The same report restricted to ``operations``."""
        keep = set(operations)
        return replace(self, rows=tuple(r for r in self.rows if r.operation in keep),
                       events=tuple(e for e in self.events if e.operation in keep))


def crossovers(rows: Sequence[KeyRow]) -> list[Crossover]:
    """Where the fastest arm changes between consecutive measured size buckets of each
    operation, in (operation, size) order. Each crossover's ``margin``: the smaller of the
    two arms' best leads over the stretches of buckets they win on either side (see
    :attr:`Crossover.clear`)."""
    out: list[Crossover] = []
    by_operation: dict[str, list[KeyRow]] = {}
    for row in rows:
        if row.fastest is not None:
            by_operation.setdefault(row.operation, []).append(row)
    for operation, measured in sorted(by_operation.items()):
        measured.sort(key=lambda r: r.size_bucket)
        # stretches of consecutive buckets won by one arm, with the widest lead in each
        stretches: list[tuple[Choice, int, int, float]] = []  # arm, first, last, lead
        for row in measured:
            arm, bucket, lead = row.fastest, row.size_bucket, _lead(row)
            assert arm is not None  # (rows without one were left out above)
            if stretches and stretches[-1][0] is arm:
                _, first, _, widest = stretches[-1]
                stretches[-1] = (arm, first, bucket, max(widest, lead))
            else:
                stretches.append((arm, bucket, bucket, lead))
        for below, above in itertools.pairwise(stretches):
            out.append(Crossover(operation, below[2], above[1], below[0], above[0],
                                 min(below[3], above[3])))
    return out


def _lead(row: KeyRow) -> float:
    """How much faster the fastest arm of ``row`` is than the next (inf: only one arm)."""
    finite = sorted(us for us in row.latency_us.values() if math.isfinite(us))
    if len(finite) < 2 or finite[0] <= 0:
        return math.inf
    return finite[1] / finite[0] - 1.0


def compact_size(n: int) -> str:
    """A size in binary thousands: ``2048`` -> ``"2k"``, ``1048576`` -> ``"1M"``, ``724`` ->
    ``"724"`` (buckets are powers of two, so these read exactly)."""
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("k", 1 << 10)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f}{unit}" if value >= 10 or value == int(value) else \
                f"{value:.1f}{unit}"
    return str(n)
