"""What an adaptive runtime chose and learned, read by the benchmarks that judge it (issue 40).

- :class:`ChoiceWatch`: while a run goes on, each key's committed choice (an arm or a
  variant: ``simd:numba@1``) and, where torch is loaded, the thread count the runtime holds
  torch at (:func:`adaptive_runtime.threads.torch_phase`), each change stamped with
  ``time.monotonic()`` — system-wide on Linux, so a parent process's stamps compare with it.
  ``contention.py`` reads from it how long each key took to switch after a phase change.
- :func:`untimed`: at the end of a run, the keys with at least ``MIN_CALLS`` calls and, on
  each, the candidates never timed (the target: none); the candidates left out of a key until
  their code is compiled off the caller's path (``_dispatch/prepare.py``) are listed apart
  when they are still left out at the end — such a candidate is not available until
  compiled. :func:`untimed_table` prints them with a verdict.

Both read inside the runtime — its route table: each key's fast-path entry, the entry's
candidates, call count and the policy's committed arm — as the tests do. No public API lists a
key's candidates or says when its committed arm changes (no callback fires), and
``rt.decide()``, which says what a key would run now, costs ~30 us a call here: more than many
of the calls it would watch. A read here is a few attribute lookups.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from _table import print_table

__all__ = ["MIN_CALLS", "ChoiceWatch", "key_label", "untimed", "untimed_table"]

# keys with at least this many calls must have timed every available candidate (issue 40)
MIN_CALLS = 200
# the watch looks for keys made since it last looked every this many steps
_REFRESH_STEPS = 25
# entries listed in a table cell before "+N more"
_LISTED = 6


def key_label(operation: str, bucket: int) -> str:
    """How a key is named in the tables: ``sum b17`` (operation, size bucket)."""
    return f"{operation} b{bucket}"


def _routes(rt: Any) -> dict[str, Any]:
    """The runtime's route table: operation name (family twins too) -> (size_of, {bucket:
    entry}, operation, family route)."""
    return rt._dispatcher._router._routes  # type: ignore[no-any-return]


class ChoiceWatch:
    """Each key's committed choice over a run, and torch's held thread count (see the module
    docstring). The loop calls :meth:`step` at each step (a training step, or a pass over a
    workload's keys) — it stamps the step and reads every key — or, to read one key right
    after each of its calls, :meth:`step` with ``read=False`` and :meth:`after_call`.

    A change is recorded as ``[key, monotonic time, steps done, choice]``: a key's first
    commitment, then every commitment to another choice (the policy's state between an
    alarm and the next commitment, no arm committed, is not a change). ``steps done`` is
    the steps whose calls the read saw. :meth:`result` hands the record over as JSON, with
    each key's calls per step (to turn steps into the key's calls).
    """

    def __init__(self, rt: Any, *, torch_pool: bool = False) -> None:
        self._rt = rt
        self._dispatcher = rt._dispatcher
        self._generation = -1
        self._entries: dict[str, Any] = {}  # label -> the key's fast-path entry
        self._names: dict[str, tuple[str, int]] = {}  # label -> (operation, bucket)
        self._committed: dict[str, Any] = {}  # label -> its last committed choice
        # label -> (entry, steps when first read, its call count then): calls per step
        self._seen: dict[str, tuple[Any, int, int]] = {}
        self._torch_phase: Any = None
        self._pool = -1
        if torch_pool:
            from adaptive_runtime.threads import torch_phase

            self._torch_phase = torch_phase
        self.stamps: list[float] = []  # monotonic time at the start of each step
        self.events: list[list[Any]] = []
        self.pool: list[list[Any]] = []  # [time, steps done, count held] (0: the pool's own)
        self.start = time.monotonic()
        self.reads = 0  # keys read

    def watch(self, operation: str, bucket: int) -> str:
        """Follow this key (its label back); keys found in the route table are followed too."""
        label = key_label(operation, bucket)
        self._names[label] = (operation, bucket)
        return label

    def _find(self) -> None:
        """Every key of the route table now (entries are made anew when a route is reset)."""
        self._generation = self._dispatcher.generation
        self._entries.clear()
        for name, route in list(_routes(self._rt).items()):
            for bucket, entry in list(route[1].items()):
                label = key_label(name, bucket)
                self._names[label] = (name, bucket)
                self._entries[label] = entry

    def step(self, *, read: bool = True) -> None:
        """A step begins: stamp it; ``read``: read every key (and torch's count) first."""
        now = time.monotonic()
        done = len(self.stamps)
        self.stamps.append(now)
        if read:
            self._read_all(now, done)

    def _read_all(self, now: float, done: int) -> None:
        if (self._generation != self._dispatcher.generation or done < _REFRESH_STEPS
                or done % _REFRESH_STEPS == 0):
            self._find()
        for label, entry in self._entries.items():
            self._read(label, entry, now, done)
        if self._torch_phase is not None:
            count = self._torch_phase()
            if count != self._pool:
                self._pool = count
                self.pool.append([now, done, count])

    def after_call(self, label: str) -> None:
        """Read one key right after its call in the current step."""
        entry = self._entries.get(label)
        if entry is None or self._generation != self._dispatcher.generation:
            if self._generation != self._dispatcher.generation:
                self._find()
            entry = self._entries.get(label)
            if entry is None:
                operation, bucket = self._names[label]
                route = _routes(self._rt).get(operation)
                entry = route[1].get(bucket) if route is not None else None
                if entry is None:
                    return
                self._entries[label] = entry
        self._read(label, entry, time.monotonic(), len(self.stamps))

    def _read(self, label: str, entry: Any, now: float, done: int) -> None:
        self.reads += 1
        seen = self._seen.get(label)
        if seen is None or seen[0] is not entry:
            self._seen[label] = (entry, done, entry.next_ticket())
        choice = entry.state.incumbent
        if choice is not None and choice != self._committed.get(label):
            self._committed[label] = choice
            self.events.append([label, now, done, choice.value])

    def result(self) -> dict[str, Any]:
        """The record, JSON-ready: ``stamps``, ``events``, ``pool``, ``start``, ``end``,
        ``per_step`` (each key's calls per step, from its call count since first read),
        ``reads`` and ``read_us`` (what the run's reads cost: the keys read, and one read's
        time measured after the run, the least of a few tries — a read timed inside the
        loop would also time whatever thread took the GIL meanwhile), after a last read of
        every key."""
        done = len(self.stamps)
        end = time.monotonic()
        self._read_all(end, done)  # (what the last step left)
        reads, tries, labels = self.reads, [], list(self._entries)
        for _ in range(5):
            began = time.perf_counter()
            for _ in range(20):
                for label in labels:
                    self.after_call(label)
            tries.append((time.perf_counter() - began) / (20 * max(len(labels), 1)))
        self.reads = reads
        per_step = {}
        for label, (entry, first, calls) in self._seen.items():
            steps = done - first
            per_step[label] = (entry.next_ticket() - calls) / steps if steps > 0 else 1.0
        return {"stamps": self.stamps, "events": self.events, "pool": self.pool,
                "start": self.start, "end": end, "per_step": per_step, "reads": reads,
                "read_us": min(tries) * 1e6}


def untimed(rt: Any, calls: Mapping[tuple[str, int], int] | None = None,
            min_calls: int = MIN_CALLS) -> dict[str, list[list[Any]]]:
    """Every key with at least ``min_calls`` calls and its candidates never timed, at the
    end of a run. ``calls``: each key's calls (operation, bucket) where the caller counted
    them; else the runtime's own count, since the key's entry was last made (a route reset
    after a compile makes it anew: a lower bound).

    Returns JSON-ready lists: ``judged`` ``[key, calls]``; ``never_timed`` ``[key, choice]``
    — a candidate of the key with no timing (and no failure) in the history; ``left_out``
    ``[key, choice, why]`` — one the key would have were its code compiled, with no timing:
    ``cold`` (not compiled yet) or ``not routed`` (compiled since; the key's next route
    takes it)."""
    router = rt._dispatcher._router
    tried = {(r.operation, r.size_bucket, r.choice) for r in rt.history_snapshot()
             if r.samples > 0 or r.failures > 0}
    preparer = router._candidates.preparer
    judged: list[list[Any]] = []
    never: list[list[Any]] = []
    left_out: list[list[Any]] = []
    from adaptive_runtime.keys import reference_size

    for name, route in list(_routes(rt).items()):
        op = route[2]
        for bucket, entry in list(route[1].items()):
            count = calls.get((name, bucket)) if calls is not None else None
            if count is None:
                count = entry.next_ticket()
            if count < min_calls:
                continue
            label = key_label(name, bucket)
            judged.append([label, count])
            never += [[label, c.value] for c in entry.candidates
                      if (name, bucket, c) not in tried]
            try:
                every = router._candidates.of(op, reference_size(bucket), compiled=False)
            except Exception:  # (no candidate runs here at that size: nothing left out)
                every = ()
            for c in every:
                if c not in entry.candidates and (name, bucket, c) not in tried:
                    cold = preparer.cold(op, c, op.implementation_for(c))
                    left_out.append([label, c.value, "cold" if cold else "not routed"])
    return {"judged": judged, "never_timed": never, "left_out": left_out}


def _listed(counts: Counter[str], runs: int) -> str:
    """``key: choice (in k of n runs)``, the most frequent first, the rest as "+N more"."""
    if not counts:
        return "-"
    shown = [f"{what}" + (f" ({k}/{runs} runs)" if runs > 1 else "")
             for what, k in counts.most_common(_LISTED)]
    more = len(counts) - _LISTED
    return "; ".join(shown) + (f"; +{more} more" if more > 0 else "")


def untimed_table(title: str, groups: Sequence[tuple[str, Sequence[dict[str, Any]]]]) -> None:
    """Print :func:`untimed`'s findings, one row per group of runs (``(name, [result of
    each run])``), and the verdict over all: "meets" when no judged key has a candidate
    never timed (over more than zero judged keys), "MISSES" when one has, "not judged"
    when no key reached ``MIN_CALLS`` calls. Candidates still left out of a key at the end
    (not compiled yet) are counted in the table and listed under it, not judged."""
    rows: list[list[object]] = []
    judged = missed = 0
    listed: list[str] = []
    for name, results in groups:
        results = [r for r in results if r]
        keys = sum(len(r["judged"]) for r in results)
        with_untimed = sum(len({k for k, _c in r["never_timed"]}) for r in results)
        never: Counter[str] = Counter()
        out: Counter[str] = Counter()
        for r in results:
            never.update({f"{k}: {c}" for k, c in r["never_timed"]})
            out.update({f"{k}: {c} ({why})" for k, c, why in r["left_out"]})
        judged, missed = judged + keys, missed + with_untimed
        left = sum(len(r["left_out"]) for r in results)
        rows.append([name, len(results), keys, with_untimed, _listed(never, len(results)),
                     left])
        if out:
            listed.append(f"  {name}: " + "; ".join(
                what + (f" ({k}/{len(results)} runs)" if len(results) > 1 else "")
                for what, k in sorted(out.items())))
    if not judged:
        outcome = "not judged (no key reached the calls)"
    elif missed:
        outcome = f"MISSES ({missed} of {judged} judged keys)"
    else:
        outcome = f"meets (0 of {judged} judged keys)"
    rows.append(["verdict: no judged key with a candidate never timed", "-", judged, missed,
                 outcome, "(not judged)"])
    print_table(f"{title}: keys with >= {MIN_CALLS} calls at the end of each run, their "
                "available candidates never timed (target: none), and candidates still left "
                "out of a judged key at the end until compiled", [
                    "runs", "n", "keys judged", "keys with one never timed",
                    "never timed (key: choice)", "left out at the end"], rows)
    if listed:
        print("left out of judged keys at the end, never timed (cold: not compiled yet, so "
              "not a candidate; not routed: compiled, a candidate from the key's next route):")
        print("\n".join(listed))
