"""Decisions and what they were based on: ``_explained`` (a decision with the key's estimates,
samples and floors), ``_explained_exploit`` (and the exploit's confidence), ``_fill_in`` (a
decision made with ``explain=False``, explained when someone asks: :meth:`Policy.explained`),
and the decisions nobody will look at, built once: the cold start's (:func:`heuristic_decision`),
unexplained exploring (:func:`explore_decision`) and exploit ones."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from ..backend import Backend, Choice
from ..decision import EMPTY_ESTIMATES, Decision, Reason
from ..history import KeyHistory
from .compare import _confidence
from .state import KeyState

__all__ = ["explore_decision", "heuristic_decision"]

# Decisions nobody will look at, built once: with no span sink, the runtime needs only the arm
# and the reason (``Policy.explained`` fills in the rest when someone asks).
_UNEXPLAINED_EXPLORE: dict[tuple[Choice, tuple[Choice, ...]], Decision] = {}
_UNEXPLAINED_EXPLOIT: dict[Choice, Decision] = {
    b: Decision(b, Reason.EXPLOIT) for b in Backend}
_EXPLOIT = Reason.EXPLOIT
_HEURISTIC: dict[tuple[Choice, tuple[Choice, ...]], Decision] = {}  # no data: nothing to explain


def _estimates(key: KeyHistory) -> Mapping[Choice, float]:
    # (ArmStats.estimate_us of each arm measured in this epoch or failing, without the
    # property's calls: this is built for every span of a traced runtime)
    return MappingProxyType({b: math.inf if s.consecutive_failures else s.mean_us
                             for b, s in key.arms.items()
                             if s.epoch_samples or s.consecutive_failures})


def _floors_of(state: KeyState) -> Mapping[Choice, float]:
    return MappingProxyType(state.floors) if state.floors else EMPTY_ESTIMATES


def _explained(backend: Choice, reason: Reason, key: KeyHistory, state: KeyState,
               plan: tuple[Choice, ...] = ()) -> Decision:
    """A decision with what it was based on: the key's estimates, samples and floors."""
    return Decision(backend, reason, 0.0, _estimates(key), key.samples, plan,
                    _floors_of(state))


def heuristic_decision(backend: Choice, plan: tuple[Choice, ...]) -> Decision:
    """The cold-start decision for ``backend`` (nothing measured yet, nothing to explain)."""
    decision = _HEURISTIC.get((backend, plan))
    if decision is None:
        decision = _HEURISTIC[(backend, plan)] = Decision(backend, Reason.HEURISTIC, plan=plan)
    return decision


def explore_decision(backend: Choice, plan: tuple[Choice, ...], key: KeyHistory,
                     explain: bool, state: KeyState) -> Decision:
    """An exploring decision for ``backend``, with the rest of its round in ``plan``."""
    if explain:
        return _explained(backend, Reason.EXPLORE, key, state, plan=plan)
    decision = _UNEXPLAINED_EXPLORE.get((backend, plan))
    if decision is None:  # a handful of combinations of three arms: built once each
        decision = _UNEXPLAINED_EXPLORE[(backend, plan)] = Decision(
            backend, Reason.EXPLORE, plan=plan)
    return decision


def _explained_exploit(chosen: Choice, usable: Sequence[Choice], key: KeyHistory,
                       state: KeyState, noise_floor: float) -> Decision:
    # (built for every exploit span: one pass, no generator, positional fields)
    return Decision(chosen, _EXPLOIT, _confidence(chosen, usable, key.arms, noise_floor),
                    _estimates(key), key.samples, (), _floors_of(state))


def _fill_in(decision: Decision, state: KeyState, key: KeyHistory,
             candidates: Sequence[Choice], noise_floor: float) -> Decision:
    """``decision`` with its estimates (and an exploit's confidence) filled in from ``key``, if
    it was made with ``explain=False`` (:meth:`Policy.explained`)."""
    if decision.estimates_us or not key.arms:
        return decision
    if decision.reason is Reason.EXPLOIT:
        return _explained_exploit(decision.choice, candidates, key, state, noise_floor)
    return decision._replace(estimates_us=_estimates(key), samples=key.samples,
                             floors_us=_floors_of(state))
