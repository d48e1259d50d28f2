"""The Trueno-style API for any operation name, registered or not: ``select``, ``record``,
``best``, ``is_hot`` and ``explain`` — the same pieces as a call, without a kernel."""

from __future__ import annotations

import math

from ..backend import Choice
from ..decision import Decision, Reason
from ..history import KeyHistory
from ..keys import size_bucket
from ..policy import KeyState, best_arm
from .candidates import Candidates
from .core import Core
from .counts import Counts
from .emission import Emission, relabelled
from .fastpath import Router
from .settle import Settler


class TruenoApi:
    """Selections, recorded timings and questions about any name's keys."""

    def __init__(self, core: Core, router: Router, settler: Settler, candidates: Candidates,
                 counts: Counts, emission: Emission) -> None:
        self._core = core
        self._router = router
        self._settler = settler
        self._learner = core.learner
        self._candidates = candidates
        self._counts = counts
        self._emission = emission

    def select(self, operation: str, n: int) -> Decision:
        bucket = size_bucket(n)
        candidates = self._candidates.for_name(operation, n)
        core = self._core
        with core.lock:
            now = core.clock()
            key = core.history.key(operation, bucket)
            transition = core.hot.observe(operation, 1, now)
            decision = self._learner.decide(key, self._learner.state_of(key), candidates, now)
            label = self._counts.label(operation)
            self._counts.selections[(label, decision.choice, decision.reason)] += 1
            self._reset_entry(operation, bucket, key)
        if transition is not None:
            self._emission.spans.submit_transition(
                transition if label is operation else relabelled(transition, label))
        return decision

    def explain(self, operation: str, n: int) -> Decision:
        """The decision the next call of this key will run with, explained; changes nothing.

        For a registered operation that is the decision ``run()`` already holds for the key:
        the committed arm when the next call takes the fast path, else the decision made for
        the next timed call. Otherwise the policy's answer now (what ``select()`` returns).
        A choice on torch's pool names the threads torch runs at now (``threads``).
        """
        decision = self._explain(operation, n)
        if self._candidates.pool_of(operation, decision.choice) == "torch":
            return decision._replace(threads=self._settler.torch.threads())
        return decision

    def _explain(self, operation: str, n: int) -> Decision:
        bucket = size_bucket(n)
        candidates = self._candidates.for_name(operation, n)
        core = self._core
        with core.lock:
            key = core.history.find(operation, bucket)
            if core.forced is not None:
                return self._forced(key, candidates[0])
            entry = self._router.entry(operation, bucket)
            state = self._learner.state_of(key) if key is not None else KeyState()
            if entry is not None and key is not None and entry.key is key:
                fast_next = entry.mask and entry.next_ticket() & entry.mask
                pending = None if fast_next else entry.next
                if pending is not None:
                    return self._explained_now(pending, state, key, entry.candidates)
            decision = core.policy.decide(state, key, candidates, core.clock())
            if key is None:
                return decision
            return self._explained_now(decision, state, key, candidates)

    def _explained_now(self, decision: Decision, state: KeyState, key: KeyHistory,
                       candidates: tuple[Choice, ...]) -> Decision:
        """``decision`` explained from the history as it is now, not as it was when it was
        made (a memoised exploit, or a decision made before the latest timings): its
        estimates (and their timings) are left out, so that Policy.explained fills them in
        afresh."""
        return self._core.policy.explained(decision._replace(estimates_us={}, timings={}),
                                           state, key, candidates)

    def _forced(self, key: KeyHistory | None, forced: Choice) -> Decision:
        """The forced decision: ``forced`` is the choice forced, as the operation has it (a
        variant it lacks: its arm)."""
        stats = key.arms.get(forced) if key is not None else None
        if stats is None:
            return Decision(forced, Reason.FORCED, 1.0)
        n = stats.epoch_samples
        spread = n > 1 and not stats.consecutive_failures
        return Decision(forced, Reason.FORCED, 1.0, {forced: stats.estimate_us}, stats.samples,
                        timings={forced: n},
                        stdevs_us={forced: math.sqrt(stats.var_us2)} if spread else {})

    def record(self, operation: str, n: int, backend: Choice, duration_us: float) -> None:
        bucket = size_bucket(n)
        core = self._core
        with core.lock:
            key = core.history.key(operation, bucket)
            # (no decision: a re-check's timing is not known to be one, and joins the arm's
            # estimate rather than replacing it)
            self._learner.learn(key, self._learner.state_of(key), backend, duration_us, n)
            self._emission.calls((operation, n, backend, duration_us, core.clock(), 1))
            self._reset_entry(operation, bucket, key)

    def best(self, operation: str, n: int) -> Choice | None:
        bucket = size_bucket(n)
        candidates = self._candidates.for_name(operation, n)
        with self._core.lock:
            key = self._core.history.find(operation, bucket)
            if key is None:
                return None
            return best_arm(candidates, key.arms)

    def is_hot(self, operation: str) -> bool:
        with self._core.lock:
            hot = self._emission.hot_now(operation, self._core.clock())
        if self._emission.pending:
            self._emission.deliver_transitions()
        return hot

    def hot_operations(self) -> list[str]:
        with self._core.lock:
            return self._core.hot.hot_operations()

    def _reset_entry(self, operation: str, bucket: int, key: KeyHistory) -> None:
        entry = self._router.entry(operation, bucket)
        if entry is not None:
            self._settler.reset_entry(entry, key)
