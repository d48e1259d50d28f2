"""Measured history per (operation, size bucket, arm), bounded, mergeable, serialisable.

Per arm: a sample count, a spike-clipped EWMA of latency and its variance, failures and a
quarantine deadline, the time of the last update, and a Page-Hinkley statistic that grows when
the arm gets slower than it was when it was committed to. Per key: which arm the policy
committed to and when it next re-checks the others.

The store is not thread-safe on its own: the runtime serialises access with its lock. The
policy reads it and never writes; the runtime applies the policy's decisions here.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass

from .backend import Backend
from .keys import reference_size

__all__ = ["ArmStats", "HistoryRecord", "HistoryStore", "KeyHistory", "record_from_json",
           "record_to_json"]

HISTORY_FORMAT = "adaptive_runtime.history/1"

# Timings of an arm that are summarised robustly (min, then median) before the EWMA starts.
_WARMUP_SAMPLES = 3
# EWMA weight once an arm has enough samples; before that the weight is 1/n, so early samples
# count equally instead of the seed dominating.
_EWMA_ALPHA = 0.1
_EWMA_WARM_SAMPLES = int(1 / _EWMA_ALPHA)  # below this many samples, weight 1/(n+1) is larger
# A sample is clipped to 1.5x the mean before it enters the EWMA, so one preempted or
# page-faulting call moves the estimate by at most 5% (alpha 0.1 x 0.5) — the switching
# margin — and cannot make a near-tie flip. A real slowdown is still seen at once: the drift
# detector below reads the unclipped timing, and a drift alarm re-measures from scratch.
_CLIP_RATIO = 1.5
# Page-Hinkley on the ratio sample/baseline: each sample adds (ratio - 1 - slack), the ratio
# capped so one huge spike cannot raise an alarm alone. With the default alarm level 4 a 5x
# slowdown alarms on the 3rd slow sample; isolated spikes decay away at 0.2 per normal sample.
_PH_SLACK = 0.2
_PH_RATIO_CAP = 3.0
# A neighbouring size bucket's winner becomes an exploring key's prior only when it is this
# many times faster than every other arm there (and every neighbour found agrees): closer arms
# may cross over within one bucket. A timing here that contradicts the prior still turns it down.
PRIOR_MARGIN = 1.25
# ... and only from arms timed at least this many times there (their min-of-two estimate).
_PRIOR_MIN_SAMPLES = 2
# A failing arm sits out 1 s, doubling with each consecutive failure, up to 5 minutes.
_QUARANTINE_BASE_S = 1.0
# Timings are learned at the bucket's reference size: a bucket spans sizes up to 2x apart, and a
# large call's time grows with its size, so raw timings of one arm would differ by up to 2x from
# the sizes alone — more than most gaps between arms, and enough to raise false drift alarms.
# A timing is taken as this fixed per-call cost plus a part proportional to the size (the
# affine model of a kernel call), and that part is rescaled; a timing under it is kept as it is.
FIXED_CALL_COST_US = 10.0
_QUARANTINE_MAX_S = 300.0


@dataclass(slots=True)
class ArmStats:
    """Live statistics of one arm on one key (mutable; read them through snapshots)."""

    samples: int = 0
    epoch_samples: int = 0
    mean_us: float = math.nan
    var_us2: float = 0.0
    failures: int = 0
    consecutive_failures: int = 0
    quarantined_until_s: float = -math.inf
    last_update: float = 0.0
    drift_baseline_us: float = 0.0
    drift_sum: float = 0.0
    drift_min: float = 0.0
    warmup_us: tuple[float, ...] = ()

    @property
    def estimate_us(self) -> float:
        """Expected latency: the EWMA, infinite while the arm's last attempt failed."""
        if self.consecutive_failures:
            return math.inf
        return self.mean_us if self.epoch_samples else math.nan

    @property
    def drift_score(self) -> float:
        """Page-Hinkley statistic; 0 unless drift detection is armed for this arm."""
        return self.drift_sum - self.drift_min

    def add_sample(self, duration_us: float, wall_time: float) -> None:
        n = self.epoch_samples
        if n < _WARMUP_SAMPLES:
            # The first timings of an arm often include one-off costs (cold caches, lazy
            # allocation): estimate from the min of two, then the median of three, so one
            # outlier neither prunes a good arm nor seeds the EWMA.
            if n == 0:
                self.warmup_us = (duration_us,)
                self.mean_us = duration_us
            elif n == 1:
                # (a merged-in estimate has no raw timings: it stands in for them)
                first = self.warmup_us[0] if self.warmup_us else self.mean_us
                self.warmup_us = (first, duration_us)
                self.mean_us = first if first < duration_us else duration_us
            else:
                lo, hi = self.warmup_us if len(self.warmup_us) == 2 else (self.mean_us,) * 2
                if lo > hi:
                    lo, hi = hi, lo
                if duration_us < lo:  # median of three without sorting a new list
                    lo, mid = duration_us, lo
                elif duration_us > hi:
                    mid, hi = hi, duration_us
                else:
                    mid = duration_us
                hi = min(hi, mid * _CLIP_RATIO)
                self.mean_us = mid
                self.var_us2 = ((lo - mid) ** 2 + (hi - mid) ** 2) / 2.0
                self.warmup_us = ()
        else:
            mean = self.mean_us
            var = self.var_us2
            delta = duration_us - mean
            if duration_us > mean * _CLIP_RATIO:
                delta = mean * (_CLIP_RATIO - 1.0)
            alpha = 1.0 / (n + 1) if n < _EWMA_WARM_SAMPLES else _EWMA_ALPHA
            self.mean_us = mean + alpha * delta
            self.var_us2 = (1.0 - alpha) * (var + alpha * delta * delta)
        if self.drift_baseline_us > 0.0:
            ratio = duration_us / self.drift_baseline_us
            if ratio > _PH_RATIO_CAP:
                ratio = _PH_RATIO_CAP
            self.drift_sum += ratio - 1.0 - _PH_SLACK
            if self.drift_sum < self.drift_min:
                self.drift_min = self.drift_sum
        self.samples += 1
        self.epoch_samples = n + 1
        self.consecutive_failures = 0
        self.last_update = wall_time

    def add_failure(self, now_s: float, wall_time: float) -> None:
        self.failures += 1
        self.consecutive_failures += 1
        backoff = _QUARANTINE_BASE_S * 2.0 ** (self.consecutive_failures - 1)
        self.quarantined_until_s = now_s + min(backoff, _QUARANTINE_MAX_S)
        self.last_update = wall_time

    def arm_drift_detection(self) -> None:
        """Start watching this arm for a slowdown relative to its current estimate."""
        self.drift_baseline_us = self.mean_us if self.epoch_samples else 0.0
        self.drift_sum = self.drift_min = 0.0

    def disarm_drift_detection(self) -> None:
        self.drift_baseline_us = 0.0
        self.drift_sum = self.drift_min = 0.0

    def start_epoch(self) -> None:
        """Forget the current estimate (keep lifetime counts): the arm is measured afresh."""
        self.epoch_samples = 0
        self.mean_us = math.nan
        self.var_us2 = 0.0
        self.warmup_us = ()
        self.disarm_drift_detection()


class KeyHistory:
    """History of one (operation, size bucket): its arms and the policy's per-key state."""

    __slots__ = (
        "arms",
        "bucket",
        "decisions",
        "epoch",
        "epoch_start",
        "failures",
        "floors",
        "id",
        "incumbent",
        "memo",
        "memo_until",
        "next_recheck",
        "operation",
        "prior",
        "prior_rejected",
        "recheck_interval",
        "rechecks",
        "reference_size",
        "samples",
        "switches",
    )

    def __init__(self, operation: str, bucket: int) -> None:
        self.operation = operation
        self.bucket = bucket
        self.id = (operation, bucket)
        self.reference_size = reference_size(bucket)
        self.arms: dict[Backend, ArmStats] = {}
        self.incumbent: Backend | None = None
        self.decisions = 0
        self.epoch = 0
        self.epoch_start = 0  # decisions made when the current epoch began
        self.next_recheck = 0
        self.recheck_interval = 0
        self.rechecks = 0
        self.switches = 0
        self.samples = 0  # timings of all arms, lifetime
        self.failures = 0
        # the policy's last full exploit Decision, reused until memo_until decisions
        self.memo: object | None = None
        self.memo_until = 0
        # the arm expected to win: the neighbouring size buckets' clear winner (looked up
        # while the key explores), or the committed arm after a drift alarm; exploration
        # times it fully and the others once (see Policy.decide)
        self.prior: Backend | None = None
        # a timing here contradicted a prior in this epoch: explore in full, look no further
        self.prior_rejected = False
        # what each arm with a floor_us (operations.Implementation) takes at least here, from
        # the key's first call: an arm whose floor is well over another arm's measured time
        # is not tried (the GPU arm of a host call that its copies alone would lose)
        self.floors: dict[Backend, float] | None = None

    def reusable_memo(self, drift_threshold: float) -> object | None:
        """The memoised exploit decision while it still stands — fewer than ``memo_until``
        decisions made (which is never past the next re-check), the committed arm neither
        drifting past ``drift_threshold`` nor failing — else ``None``."""
        memo = self.memo
        if memo is None or self.decisions >= self.memo_until:
            return None
        stats = self.arms[self.incumbent]  # type: ignore[index]  # (a memo implies one)
        if stats.drift_sum - stats.drift_min > drift_threshold or stats.consecutive_failures:
            return None
        return memo

    def remember(self, decision: object, decisions: int) -> None:
        """Memoise ``decision`` (a full exploit decision) for up to ``decisions`` decisions,
        never past the next re-check."""
        self.memo = decision
        self.memo_until = min(self.decisions + decisions, self.next_recheck)

    def arm(self, backend: Backend) -> ArmStats:
        stats = self.arms.get(backend)
        if stats is None:
            stats = self.arms[backend] = ArmStats()
        return stats

    def commit(self, backend: Backend, recheck_interval: int) -> None:
        """Make ``backend`` the committed arm and watch it for drift (a prior has served)."""
        self.prior = None
        if self.incumbent is not None and self.incumbent is not backend:
            self.switches += 1
            self.arm(self.incumbent).disarm_drift_detection()
        self.incumbent = backend
        self.memo = None
        self.arm(backend).arm_drift_detection()
        self.recheck_interval = recheck_interval
        self.next_recheck = self.decisions + recheck_interval

    def start_epoch(self) -> None:
        """Re-explore from scratch (after drift): every arm is measured afresh."""
        self.epoch += 1
        self.epoch_start = self.decisions
        self.incumbent = None
        self.memo = None
        self.prior_rejected = False
        for stats in self.arms.values():
            stats.start_epoch()


@dataclass(frozen=True, slots=True)
class HistoryRecord:
    """A frozen row of history: one arm of one (operation, size bucket)."""

    operation: str
    size_bucket: int
    backend: Backend
    samples: int
    mean_us: float
    failures: int
    last_update: float
    variance_us2: float = 0.0


class HistoryStore:
    """All keys' history, least recently used evicted beyond ``max_keys``.

    Memory is bounded by ``max_keys`` keys of at most three arms each (a few hundred bytes a
    key), whatever the number of distinct operations and sizes seen.
    """

    def __init__(self, max_keys: int, *, wall_clock: Callable[[], float] = time.time,
                 on_evict: Callable[[str, int], None] | None = None) -> None:
        if max_keys < 1:
            raise ValueError(f"max_keys must be >= 1, got {max_keys}")
        self.max_keys = max_keys
        self._keys: OrderedDict[tuple[str, int], KeyHistory] = OrderedDict()
        self._wall_clock = wall_clock
        self._on_evict = on_evict
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[KeyHistory]:
        return iter(list(self._keys.values()))

    def neighbour_prior(self, operation: str, bucket: int, candidates: Sequence[Backend],
                        margin: float = PRIOR_MARGIN) -> Backend | None:
        """The arm that clearly wins the nearest size buckets of ``operation`` on each side
        (up to two buckets away): ``margin`` times faster than every other candidate there,
        each timed at least twice in the current epoch — committed or still exploring (the
        keys of a workload explore alongside each other) — when every neighbour found
        agrees. ``None`` otherwise."""
        # (asked at every exploring checkpoint of every key: a plain loop, no allocation)
        winner = None
        keys = self._keys
        for side in (-1, 1):
            for distance in (1, 2):
                near = keys.get((operation, bucket + side * distance))
                if near is None:
                    continue
                arms = near.arms
                best = None
                best_us = runner_us = math.inf
                for b in candidates:
                    stats = arms.get(b)
                    if (stats is None or stats.epoch_samples < _PRIOR_MIN_SAMPLES
                            or stats.consecutive_failures):
                        continue
                    us = stats.mean_us
                    if us < best_us:
                        best, best_us, runner_us = b, us, best_us
                    elif us < runner_us:
                        runner_us = us
                if runner_us == math.inf:
                    continue  # fewer than two arms measured there
                if best_us * margin > runner_us or (winner is not None and best is not winner):
                    return None
                winner = best
                break
        return winner

    def find(self, operation: str, bucket: int) -> KeyHistory | None:
        """The key's history, or ``None``; does not change recency."""
        return self._keys.get((operation, bucket))

    def key(self, operation: str, bucket: int) -> KeyHistory:
        """The key's history, created if new; marks it most recently used."""
        k = (operation, bucket)
        keys = self._keys
        hist = keys.get(k)
        if hist is not None:
            keys.move_to_end(k)
            return hist
        hist = keys[k] = KeyHistory(operation, bucket)
        if len(keys) > self.max_keys:
            (old_op, old_bucket), _ = keys.popitem(last=False)
            self.evictions += 1
            if self._on_evict is not None:
                self._on_evict(old_op, old_bucket)
        return hist

    def touch(self, key: KeyHistory) -> None:
        """Mark ``key`` most recently used (no-op if it was evicted meanwhile)."""
        keys = self._keys
        if key.id in keys:
            keys.move_to_end(key.id)

    def record(self, key: KeyHistory, backend: Backend, duration_us: float,
               size: int) -> ArmStats:
        """Learn one timing of ``backend`` on ``key`` (from :meth:`key`), of a call of
        ``size`` elements, rescaled to the key's reference size (see FIXED_CALL_COST_US)."""
        stats = key.arms.get(backend)
        if stats is None:
            stats = key.arms[backend] = ArmStats()
        if duration_us > FIXED_CALL_COST_US and size:
            ref = key.reference_size
            if size != ref:  # (see FIXED_CALL_COST_US)
                duration_us = (FIXED_CALL_COST_US
                               + (duration_us - FIXED_CALL_COST_US) * ref / size)
        stats.add_sample(duration_us, self._wall_clock())
        key.samples += 1
        if backend is not key.incumbent:
            key.memo = None  # another arm's estimate moved: the next decision is a full one
        return stats

    def record_failure(self, key: KeyHistory, backend: Backend, now_s: float) -> ArmStats:
        """Count one failure of ``backend`` on ``key``: quarantined with back-off."""
        stats = key.arm(backend)
        stats.add_failure(now_s, self._wall_clock())
        key.failures += 1
        key.memo = None
        return stats

    def clear(self) -> None:
        evicted = list(self._keys)
        self._keys.clear()
        if self._on_evict is not None:
            for op, bucket in evicted:
                self._on_evict(op, bucket)

    def snapshot(self) -> list[HistoryRecord]:
        """Frozen records of every arm with data, sorted by (operation, bucket, backend)."""
        rows = [
            HistoryRecord(h.operation, h.bucket, b, s.samples,
                          s.mean_us if s.epoch_samples else math.nan,
                          s.failures, s.last_update, s.var_us2)
            for h in self._keys.values() for b, s in h.arms.items()
            if s.samples or s.failures
        ]
        rows.sort(key=lambda r: (r.operation, r.size_bucket, r.backend.value))
        return rows

    def merge(self, records: Iterable[HistoryRecord]) -> None:
        """Combine ``records`` (another process, rank or saved file) into this store.

        Sample counts and failures add; latency means combine weighted by sample count;
        ``last_update`` keeps the later one. Keys with a committed arm are re-decided from the
        merged numbers on their next call.
        """
        for r in records:
            hist = self.key(r.operation, r.size_bucket)
            stats = hist.arm(r.backend)
            if r.samples > 0 and not math.isnan(r.mean_us):
                mine = stats.epoch_samples if not math.isnan(stats.mean_us) else 0
                total = mine + r.samples
                if mine == 0:
                    stats.mean_us = r.mean_us
                    stats.var_us2 = r.variance_us2
                else:
                    mean = (stats.mean_us * mine + r.mean_us * r.samples) / total
                    # pooled variance: within-group plus between-group spread
                    stats.var_us2 = ((stats.var_us2 * mine + r.variance_us2 * r.samples) / total
                                     + mine * r.samples * (stats.mean_us - r.mean_us) ** 2
                                     / (total * total))
                    stats.mean_us = mean
                stats.epoch_samples = total
            stats.samples += r.samples
            stats.failures += r.failures
            hist.samples += r.samples
            hist.failures += r.failures
            stats.last_update = max(stats.last_update, r.last_update)
            # the committed arm may no longer be the best: let the policy commit again
            if hist.incumbent is not None:
                hist.arm(hist.incumbent).disarm_drift_detection()
                hist.incumbent = None

    # persistence -------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the history as JSON, atomically (a crash never leaves a half-written file)."""
        path = os.fspath(path)
        doc = {"format": HISTORY_FORMAT,
               "records": [record_to_json(r) for r in self.snapshot()]}
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".history-", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(doc, f, indent=1, allow_nan=True)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    @staticmethod
    def read(path: str | os.PathLike[str]) -> list[HistoryRecord]:
        """Parse a history file written by :meth:`save`; ``ValueError`` says what is wrong."""
        path = os.fspath(path)
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"history file {path!r} is not valid JSON: {exc}") from None
        if not isinstance(doc, dict) or doc.get("format") != HISTORY_FORMAT:
            raise ValueError(f"history file {path!r} is not in format {HISTORY_FORMAT!r}")
        try:
            return [record_from_json(row) for row in doc["records"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"history file {path!r} has a malformed record: {exc}") from None


def record_to_json(r: HistoryRecord) -> dict[str, object]:
    """A record as a JSON object (what a history file holds per row)."""
    row = asdict(r)
    row["backend"] = r.backend.value
    return row


def record_from_json(row: dict[str, object]) -> HistoryRecord:
    """A record from a JSON object; ``ValueError`` / ``TypeError`` / ``KeyError`` if bad."""
    bucket = row["size_bucket"]
    samples = row["samples"]
    failures = row["failures"]
    if type(bucket) is not int or bucket < 0 or bucket > 128:
        raise ValueError(f"size_bucket {bucket!r} is not a bucket number")
    if type(samples) is not int or samples < 0 or type(failures) is not int or failures < 0:
        raise ValueError(f"samples/failures must be counts, got {samples!r}/{failures!r}")
    mean = float(row["mean_us"])  # type: ignore[arg-type]
    if mean < 0 or math.isinf(mean):
        raise ValueError(f"mean_us {mean!r} is not a latency")
    return HistoryRecord(
        operation=str(row["operation"]), size_bucket=bucket,
        backend=Backend.parse(row["backend"]), samples=samples, mean_us=mean,
        failures=failures, last_update=float(row["last_update"]),  # type: ignore[arg-type]
        variance_us2=float(row.get("variance_us2", 0.0)))  # type: ignore[arg-type]

