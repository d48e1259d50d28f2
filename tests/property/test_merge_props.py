"""Hypothesis properties of HistoryStore.merge (history from other processes, ranks, files)."""

from __future__ import annotations

import math
from collections import defaultdict

from hypothesis import given
from hypothesis import strategies as st

import adaptive_runtime as ar
from adaptive_runtime.history import HistoryRecord, HistoryStore

Backend = ar.Backend

_key = st.tuples(st.sampled_from(["dot", "add", "matmul"]), st.integers(0, 4),
                 st.sampled_from(list(Backend)))


@st.composite
def records(draw, *, min_samples: int = 0):
    op, bucket, backend = draw(_key)
    samples = draw(st.integers(min_samples, 10_000))
    failures = draw(st.integers(0, 50))
    if samples == 0 and failures == 0:
        failures = 1
    mean = draw(st.floats(0.01, 1e6)) if samples else math.nan
    var = draw(st.floats(0.0, 1e6)) if samples else 0.0
    last = draw(st.floats(0.0, 2e9))
    return HistoryRecord(op, bucket, backend, samples, mean, failures, last, var)


record_lists = st.lists(records(), max_size=25)


def _store(*batches) -> HistoryStore:
    store = HistoryStore(10_000)
    for batch in batches:
        store.merge(batch)
    return store


def _by_key(rows):
    return {(r.operation, r.size_bucket, r.backend): r for r in rows}


def _totals(batch):
    samples: dict = defaultdict(int)
    failures: dict = defaultdict(int)
    for r in batch:
        k = (r.operation, r.size_bucket, r.backend)
        samples[k] += r.samples
        failures[k] += r.failures
    return samples, failures


@given(record_lists, record_lists)
def test_merge_adds_sample_and_failure_counts(a, b) -> None:
    merged = _by_key(_store(a, b).snapshot())
    samples, failures = _totals(a + b)
    assert set(merged) == set(samples)
    for k, row in merged.items():
        assert row.samples == samples[k]
        assert row.failures == failures[k]


@given(record_lists)
def test_merge_with_empty_is_identity(a) -> None:
    store = _store(a)
    before = store.snapshot()
    store.merge([])
    assert _same_rows(store.snapshot(), before)
    assert _same_rows(_store([], a).snapshot(), before)


@given(st.lists(records(), max_size=25, unique_by=lambda r: (r.operation, r.size_bucket,
                                                             r.backend)))
def test_merging_distinct_records_into_an_empty_store_reproduces_them(a) -> None:
    rows = _store(a).snapshot()
    expected = sorted(a, key=lambda r: (r.operation, r.size_bucket, r.backend.value))
    assert _same_rows(rows, expected)


@given(records(min_samples=1), records(min_samples=1))
def test_merged_mean_is_the_sample_weighted_mean_and_lies_between(a, b) -> None:
    b = HistoryRecord(a.operation, a.size_bucket, a.backend, b.samples, b.mean_us, b.failures,
                      b.last_update, b.variance_us2)
    (row,) = _store([a], [b]).snapshot()
    weighted = (a.mean_us * a.samples + b.mean_us * b.samples) / (a.samples + b.samples)
    assert math.isclose(row.mean_us, weighted, rel_tol=1e-12)
    low, high = min(a.mean_us, b.mean_us), max(a.mean_us, b.mean_us)
    assert low * (1 - 1e-12) <= row.mean_us <= high * (1 + 1e-12)
    assert row.samples == a.samples + b.samples
    assert row.last_update == max(a.last_update, b.last_update)


@given(record_lists, record_lists, record_lists)
def test_merge_order_does_not_change_counts(a, b, c) -> None:
    orders = [_store(a, b, c), _store(c, b, a), _store(b, a, c), _store(a + b + c)]
    counts = [{k: (r.samples, r.failures) for k, r in _by_key(s.snapshot()).items()}
              for s in orders]
    assert all(x == counts[0] for x in counts[1:])


@given(record_lists, record_lists)
def test_merge_order_does_not_change_means_beyond_rounding(a, b) -> None:
    ab, ba = _by_key(_store(a, b).snapshot()), _by_key(_store(b, a).snapshot())
    assert set(ab) == set(ba)
    for k in ab:
        x, y = ab[k].mean_us, ba[k].mean_us
        assert (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=1e-9)


def _same_rows(xs, ys) -> bool:
    def norm(r):
        return (r.operation, r.size_bucket, r.backend, r.samples,
                None if math.isnan(r.mean_us) else r.mean_us, r.failures, r.last_update)
    return [norm(r) for r in xs] == [norm(r) for r in ys]
