"""Combining the ranks' history rows into one history, the same on every rank
(:func:`combine_rank_rows`): what a distributed sync (:mod:`adaptive_runtime.history.distributed`)
merges with."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..backend import Backend
from .record import HistoryRecord, Origins

__all__ = ["combine_rank_rows"]


def combine_rank_rows(
        per_rank: Sequence[tuple[int, Sequence[tuple[HistoryRecord, Origins]]]],
) -> list[tuple[HistoryRecord, Origins]]:
    """Every rank's :meth:`HistoryStore.rank_rows` (``(rank, rows)``, in rank order) merged
    into one history — the same on every rank that combines the same input.

    Counts are a grow-only counter per rank: for each origin rank, the most any rank knows of
    it; the arm's count is their sum. So the first sync sums the ranks' counts, and syncing
    again (in the same group or in any other) counts nothing twice: repeated syncs are
    idempotent. An estimate is the ranks' estimates weighted by the samples each rank learned
    itself (equal weights where none did; exactly the common value where all agree), the
    variance pooled likewise; ``last_update`` is the latest. Keys and arms come in the order
    of first appearance, ranks in order.
    """
    groups: dict[tuple[str, int, Backend, str],
                 list[tuple[int, HistoryRecord, Origins]]] = {}
    for rank, rows in per_rank:
        for r, origins in rows:
            groups.setdefault((r.operation, r.size_bucket, r.backend, r.variant), []).append(
                (rank, r, origins))
    out = []
    for (operation, bucket, backend, variant), items in groups.items():
        known: dict[int, tuple[int, int]] = {}
        for _, _, origins in items:
            for o, (n, failed) in origins.items():
                seen = known.get(o, (0, 0))
                known[o] = (max(seen[0], n), max(seen[1], failed))
        known = dict(sorted(known.items()))
        measured = [(origins.get(rank, (0, 0))[0], r) for rank, r, origins in items
                    if not math.isnan(r.mean_us)]
        mean, var = math.nan, 0.0
        if measured:
            first = measured[0][1]
            if all(r.mean_us == first.mean_us and r.variance_us2 == first.variance_us2
                   for _, r in measured):
                mean, var = first.mean_us, first.variance_us2
            else:
                if not sum(w for w, _ in measured):
                    measured = [(1, r) for _, r in measured]
                total = sum(w for w, _ in measured)
                mean = sum(w * r.mean_us for w, r in measured) / total
                var = sum(w * (r.variance_us2 + (r.mean_us - mean) ** 2)
                          for w, r in measured) / total
        out.append((HistoryRecord(operation, bucket, backend,
                                  sum(n for n, _ in known.values()), mean,
                                  sum(f for _, f in known.values()),
                                  max(r.last_update for _, r, _ in items), var, variant),
                    known))
    return out
