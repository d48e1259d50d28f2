"""The merge behind ``rt.sync_history()``, without torch: ranks simulated as HistoryStores.

Counts are grow-only per rank of origin, so any sequence of syncs, in any groups, counts every
sample exactly once; a sync leaves every rank of the group with identical state."""

from __future__ import annotations

import math

import adaptive_runtime as ar
from adaptive_runtime.history import HistoryRecord, HistoryStore, combine_rank_rows

Backend = ar.Backend


class Ranks:
    """``world`` stores standing in for ranks; ``learned`` counts what each arm was taught."""

    def __init__(self, world: int) -> None:
        self.clock = [100.0]
        self.stores = [HistoryStore(100, wall_clock=lambda: self.clock[0])
                       for _ in range(world)]
        self.learned: dict[tuple[str, int, Backend], int] = {}

    def learn(self, rank: int, op: str, backend: Backend, us: float, times: int = 1) -> None:
        store = self.stores[rank]
        key = store.key(op, 5)
        for _ in range(times):
            self.clock[0] += 1.0
            store.record(key, backend, us, 0)
        k = (op, 5, backend)
        self.learned[k] = self.learned.get(k, 0) + times

    def sync(self, group: list[int]) -> None:
        merged = combine_rank_rows([(r, self.stores[r].rank_rows(r)) for r in group])
        for r in group:
            self.stores[r].replace(merged)

    def counts(self, rank: int) -> dict[tuple[str, int, Backend], int]:
        return {(r.operation, r.size_bucket, r.backend): r.samples
                for r in self.stores[rank].snapshot()}


def _state(store: HistoryStore) -> list[tuple[object, ...]]:
    rows = []
    for key in store:
        rows.append((key.id, key.merges, key.samples, key.failures))
        for b, s in sorted(key.arms.items(), key=lambda item: item[0].value):
            rows.append((b, s.samples, s.epoch_samples, repr(s.mean_us), s.var_us2, s.failures,
                         s.consecutive_failures, s.quarantined_until_s, s.last_update,
                         s.origins))
    return rows


def test_a_first_sync_sums_the_ranks_counts_and_leaves_them_identical() -> None:
    ranks = Ranks(3)
    ranks.learn(0, "dot", Backend.SIMD, 10.0, 4)
    ranks.learn(1, "dot", Backend.SIMD, 20.0, 2)
    ranks.learn(1, "dot", Backend.SCALAR, 5.0, 3)
    ranks.learn(2, "matmul", Backend.GPU, 7.0, 1)
    ranks.sync([0, 1, 2])
    assert ranks.counts(0) == ranks.learned
    assert _state(ranks.stores[0]) == _state(ranks.stores[1]) == _state(ranks.stores[2])
    (simd,) = [r for r in ranks.stores[0].snapshot()
               if r.operation == "dot" and r.backend is Backend.SIMD]
    assert simd.mean_us == (10.0 * 4 + 20.0 * 2) / 6  # weighted by what each rank learned


def test_syncing_again_counts_nothing_twice() -> None:
    ranks = Ranks(4)
    for r in range(4):
        ranks.learn(r, "dot", Backend.SIMD, 10.0 + r, 3 + r)
    ranks.sync([0, 1, 2, 3])
    first = _state(ranks.stores[0])
    for _ in range(3):
        ranks.sync([0, 1, 2, 3])
    assert _state(ranks.stores[0]) == first  # idempotent: same counts, same estimates
    ranks.learn(2, "dot", Backend.SIMD, 12.0, 5)
    ranks.sync([0, 1, 2, 3])
    assert ranks.counts(0) == ranks.learned == ranks.counts(3)


def test_syncs_in_groups_then_in_the_world_count_every_sample_once() -> None:
    ranks = Ranks(4)
    for r in range(4):
        ranks.learn(r, "dot", Backend.SIMD, 10.0, 2 + r)
        ranks.learn(r, "dot", Backend.SCALAR, 30.0, 1)
    ranks.sync([0, 1])
    ranks.sync([2, 3])
    assert ranks.counts(0) != ranks.counts(2)
    ranks.sync([0, 1, 2, 3])
    assert ranks.counts(1) == ranks.learned
    ranks.learn(0, "dot", Backend.SIMD, 10.0, 7)
    ranks.sync([0, 1])  # a pair learns more and syncs; the world then syncs again
    ranks.learn(3, "add", Backend.SIMD, 3.0, 2)
    ranks.sync([0, 1, 2, 3])
    for r in range(4):
        assert ranks.counts(r) == ranks.learned
    assert _state(ranks.stores[0]) == _state(ranks.stores[3])


def test_a_sync_starts_every_key_afresh_and_lifts_local_quarantines() -> None:
    ranks = Ranks(2)
    store = ranks.stores[1]
    ranks.learn(1, "dot", Backend.SIMD, 10.0, 4)
    key = store.key("dot", 5)
    store.record_failure(key, Backend.SCALAR, now_s=1e9)  # quarantined on rank 1's clock
    ranks.learn(0, "dot", Backend.SCALAR, 50.0, 2)
    ranks.sync([0, 1])
    assert _state(ranks.stores[0]) == _state(store)
    key = store.find("dot", 5)
    assert key.merges == 0  # a new key (its policy state starts afresh: test_policy)
    scalar = key.arms[Backend.SCALAR]
    assert scalar.failures == 1 and scalar.consecutive_failures == 0
    assert scalar.quarantined_until_s == -math.inf
    # later timings are stamped after every merged time, whatever this rank's clock says
    ranks.clock[0] = 0.0
    ranks.learn(1, "dot", Backend.SIMD, 10.0)
    assert key.arms[Backend.SIMD].last_update > scalar.last_update


def test_keys_come_in_rank_order_and_an_arm_without_an_estimate_keeps_none() -> None:
    rows_a = [(HistoryRecord("b", 3, Backend.SIMD, 2, 5.0, 0, 10.0), {0: (2, 0)})]
    rows_b = [(HistoryRecord("a", 3, Backend.SIMD, 3, math.nan, 0, 20.0), {1: (3, 0)}),
              (HistoryRecord("b", 3, Backend.SIMD, 1, 7.0, 0, 30.0), {1: (1, 0)})]
    merged = combine_rank_rows([(0, rows_a), (1, rows_b)])
    assert [(r.operation, r.samples, r.last_update) for r, _ in merged] == [
        ("b", 3, 30.0), ("a", 3, 20.0)]
    assert merged[0][0].mean_us == (5.0 * 2 + 7.0) / 3
    assert math.isnan(merged[1][0].mean_us)
    store = HistoryStore(10)
    store.replace(merged)
    assert [k.id for k in store] == [("b", 3), ("a", 3)]
    assert store.find("a", 3).arms[Backend.SIMD].epoch_samples == 0
