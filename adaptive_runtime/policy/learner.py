"""The one online learning loop: the policy's state of every key, and what learning one timing
does to it and to the key's measured history.

:class:`~adaptive_runtime.policy.Policy` is a state machine that never writes the measured
history (so it can be replayed and tested with fake statistics); the few places where its
decisions and the history meet are here, and only here:

- a full decision that raises a ``drift`` alarm starts a new epoch of the key's estimates;
- a regular re-check's timing replaces its arm's estimate rather than joining it
  (:meth:`Policy.remeasures`);
- a timing is learned by the history first (at the key's reference size) and then observed by
  the policy, with the arm's statistics after it;
- a failure is recorded by the history (quarantine with back-off) and observed by the policy.

Every caller goes through one :class:`Learner`: the dispatcher on each timed call, the Trueno
API (``select`` / ``record_performance``) and :func:`adaptive_runtime.offline.replay.replay`, so an
offline replay runs exactly the loop production runs.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..backend import Choice
from ..decision import Decision, Reason
from ..history import HistoryStore, KeyHistory
from .policy import Policy, Step
from .state import KeyState

__all__ = ["Learner"]

# module globals: one dict lookup instead of two on a timed call
_DRIFT = Reason.DRIFT
_DECIDED = Step.DECIDED


class Learner:
    """Owns the policy's state of each key of ``history`` and learns timings into both.

    ``forced``: the choice every call runs when the runtime forces one (decisions are then
    counted, nothing is decided). Not thread-safe: the caller holds its lock.
    """

    __slots__ = ("_states", "forced", "history", "policy")

    def __init__(self, policy: Policy, history: HistoryStore,
                 forced: Choice | None = None) -> None:
        self.policy = policy
        self.history = history
        self.forced = forced
        # key id -> (the key's history, the policy's state of it): dropped with the key
        # (drop); a key made anew (forgotten, then seen again) gets a new state
        self._states: dict[tuple[str, int], tuple[KeyHistory, KeyState]] = {}

    # ------------------------------------------------------------------ state

    def state_of(self, key: KeyHistory) -> KeyState:
        """The policy's state of ``key`` (a new one for a key made anew)."""
        found = self._states.get(key.id)
        if found is None or found[0] is not key:
            found = self._states[key.id] = (key, KeyState())
        return found[1]

    def holds(self, key: KeyHistory) -> bool:
        """Whether ``key`` is the key this learner holds state for under its id (not dropped,
        nor made anew since)."""
        return self._states.get(key.id, (None,))[0] is key

    def drop(self, operation: str, bucket: int) -> None:
        """The history dropped this key: drop the policy's state of it."""
        self._states.pop((operation, bucket), None)

    def start(self, key: KeyHistory, floors: dict[Choice, float] | None) -> KeyState:
        """The state of a key seen for the first time, given what its arms take at least
        (``floors``: e.g. a GPU arm's copies; ``None``: nothing known)."""
        state = self.state_of(key)
        self.policy.set_floors(state, floors)
        return state

    # ------------------------------------------------------------------ decisions

    def decide(self, key: KeyHistory, state: KeyState, candidates: Sequence[Choice],
               now: float) -> Decision:
        """A full decision for ``key`` (its first call, a selection), applied."""
        if self.forced is not None:  # (its one candidate: the forced choice, resolved)
            return self.policy.forced(state, key, candidates[0])
        decision = self.policy.step(state, key, candidates, now, self.history, explain=False)
        if decision.reason is _DRIFT:
            key.start_epoch()  # every arm is measured afresh (see Policy.step)
        return decision

    def next(self, key: KeyHistory, state: KeyState, candidates: Sequence[Choice],
             now: float) -> tuple[Decision, Step]:
        """The decision for the key's next timed call, applied, and how it was reached
        (:class:`~adaptive_runtime.policy.Step`). Unexplained: :meth:`explained` fills in
        what a span shows."""
        if self.forced is not None:
            return self.policy.forced(state, key, candidates[0]), Step.REPEATED
        decision, how = self.policy.next(state, key, candidates, now, self.history,
                                         explain=False)
        if how is _DECIDED and decision.reason is _DRIFT:
            key.start_epoch()
        return decision, how

    def explained(self, decision: Decision, key: KeyHistory, state: KeyState,
                  candidates: Sequence[Choice]) -> Decision:
        """``decision`` with what it was based on, from the key's history as it is now."""
        return self.policy.explained(decision, state, key, candidates)

    # ------------------------------------------------------------------ learning

    def learn(self, key: KeyHistory, state: KeyState, choice: Choice, duration_us: float,
              size: int, decision: Decision | None = None, calls: int = 1) -> None:
        """Learn one timing of ``choice`` on ``key`` at ``size`` elements: into the history
        (a re-check of ``decision``'s that the policy re-measures replaces the arm's estimate),
        then into the policy's state. ``decision``: the one the timed call ran (``None``: a
        timing reported from outside, e.g. ``record_performance``); ``calls``: the calls the
        timing stands for (itself and the untimed ones since the key's previous timing)."""
        state.calls_us += duration_us * calls
        arms = key.arms
        if decision is not None and self.policy.remeasures(key, decision):
            arms[choice].start_epoch()
        learned_us = self.history.record(key, choice, duration_us, size)
        self.policy.observe(state, choice, learned_us, arms[choice])

    def fail(self, key: KeyHistory, state: KeyState, choice: Choice, now: float) -> None:
        """``choice`` failed on ``key``: quarantined (with back-off) in the history, and the
        policy's memo, plan and commitment to it dropped."""
        self.history.record_failure(key, choice, now)
        self.policy.observe_failure(state, choice)
