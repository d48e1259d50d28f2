"""The per-call counters: selections by (operation, arm, reason), fallbacks, and the label cap
that keeps them bounded whatever names callers give ``select()``."""

from __future__ import annotations

from collections import Counter, deque

from ..backend import Backend, Choice
from ..decision import Reason
from ..records import SelectionKey
from .core import Core
from .entry import Entry, Route

MAX_SELECT_LABELS = 256
RETIRED_ENTRIES = 1024
OTHER_LABEL = "_other"

_EXPLOIT = Reason.EXPLOIT


class Counts:
    """Every call counted, fast-path calls included (folded in from their entries' tickets
    when the counters are read). Methods whose docstring says so need the lock held."""

    def __init__(self, core: Core, routes: dict[str, Route]) -> None:
        self._core = core
        self._routes = routes  # the fast path's table (read: registered names, entries)
        # (operation, backend, reason) -> calls; plain tuples because this is counted per call
        self.selections: Counter[tuple[str, Choice, Reason]] = Counter()
        self.fallbacks: Counter[tuple[str, Choice, Choice]] = Counter()
        self.select_labels: set[str] = set()
        self._retired: deque[tuple[str, Entry]] = deque(maxlen=RETIRED_ENTRIES)

    def label(self, operation: str) -> str:
        """The counter label of ``operation``: its name if registered or among the first
        ``MAX_SELECT_LABELS`` names given to ``select()``, else ``OTHER_LABEL`` — counters
        (and metric attributes) stay bounded whatever names callers invent. Lock held."""
        if operation in self._routes or operation in self.select_labels:
            return operation
        if len(self.select_labels) < MAX_SELECT_LABELS:
            self.select_labels.add(operation)
            return operation
        return OTHER_LABEL

    def flush(self, operation: str, entry: Entry) -> None:
        """Add the entry's fast-path calls since the last flush, and its other timed calls
        (its tally), to the counters. Lock held."""
        tally = entry.tally
        if any(tally):
            for slot, calls in enumerate(tally):
                if calls:
                    backend, reason = entry.label(slot)
                    self.selections[(operation, backend, reason)] += calls
                    tally[slot] = 0
        fast = entry.fast_calls()
        delta = fast - entry.fast_flushed
        if delta > 0 and entry.backend is not None:
            entry.fast_label = (operation, entry.backend,
                                _EXPLOIT if self._core.forced is None else Reason.FORCED)
        label = entry.fast_label
        if delta and label is not None:
            # (a negative delta undoes a call counted fast while it was between its two
            # tickets; it is taken back from where it was added)
            self.selections[label] += delta
            entry.fast_flushed = fast

    def retire(self, operation: str, entry: Entry) -> None:
        """Stop routing calls to ``entry``, keeping its calls counted. Lock held."""
        # Threads may still hold the entry (a call in flight): its calls keep being counted
        # from the retired list, so none is lost or counted twice. Bounded: only calls that
        # stay on an entry through RETIRED_ENTRIES later retirements could go uncounted.
        entry.mask = 0  # new calls on it take the slow path
        self.flush(operation, entry)
        self._retired.append((operation, entry))

    def selection_counts(self) -> dict[SelectionKey, int]:
        """Every call counted by (operation, arm, reason), fast-path calls included."""
        with self._core.lock:
            for operation, (_size_of, entries, _op, _device) in self._routes.items():
                for entry in entries.values():
                    self.flush(operation, entry)
            for operation, entry in self._retired:
                self.flush(operation, entry)
            return {SelectionKey(op, choice.arm, reason, choice.variant): n
                    for (op, choice, reason), n in self.selections.items() if n}

    def fallback_counts(self) -> dict[tuple[str, Backend, Backend], int]:
        """Fallbacks by (operation, arm that raised, arm that answered): a variant's
        counted with its arm."""
        with self._core.lock:
            by_arm: Counter[tuple[str, Backend, Backend]] = Counter()
            for (operation, failed, answered), n in self.fallbacks.items():
                by_arm[(operation, failed.arm, answered.arm)] += n
            return dict(by_arm)
