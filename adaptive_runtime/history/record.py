"""The frozen row of history: :class:`HistoryRecord`, what the store hands out
(:meth:`~adaptive_runtime.history.HistoryStore.snapshot`), ranks combine and history files
hold; and :data:`Origins`, the per-rank counts a distributed sync carries beside a row."""

from __future__ import annotations

from dataclasses import dataclass

from ..backend import Backend, Choice, choice_of

__all__ = ["HistoryRecord", "Origins"]


@dataclass(frozen=True, slots=True)
class HistoryRecord:
    """A frozen row of history: one implementation — an arm's primary one, or a variant
    (``variant`` its name) — of one (operation, size bucket)."""

    operation: str
    size_bucket: int
    backend: Backend
    samples: int
    mean_us: float
    failures: int
    last_update: float
    variance_us2: float = 0.0
    variant: str = ""

    @property
    def choice(self) -> Choice:
        """What the runtime learns the row as: the arm, or ``Variant(arm, variant)``."""
        return choice_of(self.backend, self.variant)


# rank -> (samples, failures) first learned there (see HistoryStore.rank_rows)
Origins = dict[int, tuple[int, int]]
