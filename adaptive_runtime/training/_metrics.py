"""What the training callbacks log into the trainer's own loggers (Lightning's
``trainer.loggers``, Hugging Face's ``report_to`` integrations): the runtime's learning read
through its public API (``rt.stats()``, ``rt.history_snapshot()``, ``rt.decide()``) at each
logging step, and at the end the arm each key committed to.

Every name starts with ``adaptive/``. Per logging step (see :class:`LearningLog`):

- ``adaptive/keys``: keys (operation, size bucket) with history; ``adaptive/keys_committed``:
  those committed to an arm (their next call exploits it, or re-checks another while it holds);
- ``adaptive/arm_switches``: commitments that replaced another arm, counted since training
  began, as seen at the logging steps (a key that switched and switched back between two of
  them counts none);
- ``adaptive/calls``: the runtime's calls since the previous logging step;
  ``adaptive/exploring_share``: the share of them that explored (reasons ``heuristic``,
  ``explore``, ``recheck``, ``drift``), by calls: the runtime counts calls by reason, not
  their time;
- the tracing cost: ``adaptive/spans_exported`` and ``adaptive/spans_suppressed`` (timed calls
  whose spans the trace gate let out / held back since the previous logging step),
  ``adaptive/traced_share`` (spans exported over calls) and ``adaptive/hot_operations``
  (operations on the hot path now: not traced at all).

At the end: ``adaptive/committed_keys/<arm>`` (keys committed to each arm) and, for a logger
that takes text, ``adaptive/committed_arms``: a Markdown table of each key's committed arm.
On resume, ``adaptive/history_restored`` (1: the checkpoint's history was applied; 0: it had
none, or it was refused) is logged with the first reading.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..decision import Reason
from ..keys import reference_size
from ..runtime import AdaptiveRuntime

__all__ = ["PREFIX", "KeyChoice", "LearningLog", "committed_table", "restored_message"]

PREFIX = "adaptive/"
# Rows of the end table: a model has tens of keys; a cap keeps a runaway one readable.
MAX_TABLE_ROWS = 256
_EXPLORING = frozenset({Reason.HEURISTIC, Reason.EXPLORE, Reason.RECHECK, Reason.DRIFT})
_COMMITTED = frozenset({Reason.EXPLOIT, Reason.FORCED})

_log = logging.getLogger("adaptive_runtime.training")


@dataclass(frozen=True)
class KeyChoice:
    """One key's state at a reading: ``choice`` the committed arm (``"simd"``, or an arm's
    variant ``"simd:numba@1"``), ``None`` while it explores."""

    operation: str
    size_bucket: int
    choice: str | None

    @property
    def arm(self) -> str | None:
        """The committed arm alone (``"simd"``), without a variant's name."""
        return None if self.choice is None else self.choice.partition(":")[0]


class LearningLog:
    """The readings of one training run: counters since the run began (:meth:`start`), and
    the arm each key was last seen committed to (a re-check or a drift alarm does not say
    it; a later commitment to another arm is a switch)."""

    def __init__(self) -> None:
        self._last_arm: dict[tuple[str, int], str] = {}
        self._switches = 0
        self._calls: dict[Reason, int] = {}
        self._exported = 0
        self._suppressed = 0
        self._pending: dict[str, float] = {}
        self.keys: list[KeyChoice] = []

    def start(self, runtime: AdaptiveRuntime) -> None:
        """Count from now: the runtime's counters also hold what ran before training."""
        stats = runtime.stats()
        self._calls = _by_reason(stats.selections)
        self._exported = sum(stats.spans_exported.values())
        self._suppressed = sum(stats.spans_suppressed.values())

    def note(self, name: str, value: float) -> None:
        """A value logged with the next reading (``adaptive/<name>``)."""
        self._pending[PREFIX + name] = float(value)

    def reading(self, runtime: AdaptiveRuntime) -> dict[str, float]:
        """This logging step's values (see the module docstring); the interval's counters
        start again."""
        self.keys = self._read_keys(runtime)
        stats = runtime.stats()
        calls = _by_reason(stats.selections)
        new = {r: n - self._calls.get(r, 0) for r, n in calls.items()}
        exported = sum(stats.spans_exported.values())
        suppressed = sum(stats.spans_suppressed.values())
        total = sum(new.values())
        exploring = sum(n for r, n in new.items() if r in _EXPLORING)
        values = {
            "keys": len(self.keys),
            "keys_committed": sum(1 for k in self.keys if k.choice is not None),
            "arm_switches": self._switches,
            "calls": total,
            "exploring_share": exploring / total if total else 0.0,
            "spans_exported": exported - self._exported,
            "spans_suppressed": suppressed - self._suppressed,
            "traced_share": (exported - self._exported) / total if total else 0.0,
            "hot_operations": len(stats.hot_operations),
        }
        self._calls, self._exported, self._suppressed = calls, exported, suppressed
        out = {PREFIX + name: float(v) for name, v in values.items()}
        out.update(self._pending)
        self._pending = {}
        return out

    def final(self, runtime: AdaptiveRuntime) -> dict[str, float]:
        """The last reading, with ``adaptive/committed_keys/<arm>`` for every arm a key
        committed to."""
        values = self.reading(runtime)
        for key in self.keys:
            if key.arm is not None:
                name = f"{PREFIX}committed_keys/{key.arm}"
                values[name] = values.get(name, 0.0) + 1.0
        return values

    def _read_keys(self, runtime: AdaptiveRuntime) -> list[KeyChoice]:
        """Every key with history and the arm it is committed to now, switches counted."""
        keys = sorted({(r.operation, r.size_bucket) for r in runtime.history_snapshot()})
        found = []
        for op, bucket in keys:
            decision = runtime.decide(op, reference_size(bucket))
            choice: str | None
            if decision.reason in _COMMITTED:
                choice = committed = str(decision.choice)
                before = self._last_arm.get((op, bucket))
                if before is not None and before != committed:
                    self._switches += 1
                self._last_arm[(op, bucket)] = committed
            elif decision.reason is Reason.RECHECK:
                # (a re-check times another arm while the commitment holds)
                choice = self._last_arm.get((op, bucket))
            else:
                choice = None
            found.append(KeyChoice(op, bucket, choice))
        return found


def committed_table(keys: list[KeyChoice]) -> str:
    """``keys`` as a Markdown table (operation, size bucket, committed arm), at most
    ``MAX_TABLE_ROWS`` rows."""
    rows = ["| operation | size bucket | committed arm |", "|---|---|---|"]
    rows += [f"| {k.operation} | {k.size_bucket} | {k.choice or '(exploring)'} |"
             for k in keys[:MAX_TABLE_ROWS]]
    if len(keys) > MAX_TABLE_ROWS:
        rows.append(f"| ... {len(keys) - MAX_TABLE_ROWS} more | | |")
    return "\n".join(rows)


def restored_message(log: LearningLog, runtime: AdaptiveRuntime, source: str,
                     applied: bool | None) -> None:
    """Say what became of a checkpoint's history (INFO, the ``adaptive_runtime.training``
    logger) and log ``adaptive/history_restored`` with the next reading. ``applied``:
    ``None`` where the checkpoint held none."""
    held = len(runtime.history_snapshot())
    if applied is None:
        _log.info("adaptive_runtime: %s holds no adaptive_runtime history (saved without "
                  "AdaptiveRuntimeCallback?); the runtime goes on from the %d records it "
                  "holds", source, held)
    elif applied:
        _log.info("adaptive_runtime: history restored from %s (the runtime holds %d "
                  "records now)", source, held)
    else:
        _log.info("adaptive_runtime: the history in %s was not applied (see the "
                  "HistoryWarning); the runtime goes on from the %d records it holds",
                  source, held)
    log.note("history_restored", 1.0 if applied else 0.0)


def _by_reason(selections: Mapping[Any, int]) -> dict[Reason, int]:
    counts: dict[Reason, int] = {}
    for key, n in selections.items():
        counts[key.reason] = counts.get(key.reason, 0) + n
    return counts
