"""Decisions and what they were based on: ``explained_decision`` (a decision with the key's
estimates, samples and floors), ``explained_exploit`` (and the exploit's confidence), ``fill_in`` (a
decision made with ``explain=False``, explained when someone asks: :meth:`Policy.explained`,
with each estimate's timings and standard deviation),
and the decisions nobody will look at, built once: the cold start's (:func:`heuristic_decision`),
unexplained exploring (:func:`explore_decision`) and exploit ones."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from ..backend import Backend, Choice
from ..decision import EMPTY_ESTIMATES, NO_TIMINGS, Decision, Reason
from ..history import KeyHistory
from .compare import confidence_in
from .state import KeyState

__all__ = ["explore_decision", "heuristic_decision"]

# Decisions nobody will look at, built once: with no span sink, the runtime needs only the arm
# and the reason (``Policy.explained`` fills in the rest when someone asks).
_UNEXPLAINED_EXPLORE: dict[tuple[Choice, tuple[Choice, ...]], Decision] = {}
UNEXPLAINED_EXPLOIT: dict[Choice, Decision] = {
    b: Decision(b, Reason.EXPLOIT) for b in Backend}
_EXPLOIT = Reason.EXPLOIT
_HEURISTIC: dict[tuple[Choice, tuple[Choice, ...]], Decision] = {}  # no data: nothing to explain


def _estimates(key: KeyHistory) -> Mapping[Choice, float]:
    # (ArmStats.estimate_us of each arm measured in this epoch or failing, without the
    # property's calls: this is built for every span of a traced runtime)
    return MappingProxyType({b: math.inf if s.consecutive_failures else s.mean_us
                             for b, s in key.arms.items()
                             if s.epoch_samples or s.consecutive_failures})


def _trust(key: KeyHistory, estimates: Mapping[Choice, float],
           ) -> tuple[Mapping[Choice, int], Mapping[Choice, float]]:
    """The timings each of ``estimates`` stands on (the epoch's) and their standard
    deviation (two timings or more, not failing): how far each estimate can be trusted. Only
    for decisions someone reads (a span, ``rt.decide()``)."""
    arms = key.arms
    timings: dict[Choice, int] = {}
    stdevs: dict[Choice, float] = {}
    for b in estimates:
        s = arms.get(b)
        if s is not None:
            n = timings[b] = s.epoch_samples
            if n > 1 and not s.consecutive_failures:
                stdevs[b] = math.sqrt(s.var_us2)
    return (MappingProxyType(timings) if timings else NO_TIMINGS,
            MappingProxyType(stdevs) if stdevs else EMPTY_ESTIMATES)


def _estimates_and_trust(key: KeyHistory) -> tuple[
        Mapping[Choice, float], Mapping[Choice, int], Mapping[Choice, float]]:
    """``_estimates(key)`` and ``_trust`` of them, in one pass over the arms (an exported
    span's decision is explained on the caller's thread)."""
    estimates: dict[Choice, float] = {}
    timings: dict[Choice, int] = {}
    stdevs: dict[Choice, float] = {}
    for b, s in key.arms.items():
        n = s.epoch_samples
        if s.consecutive_failures:
            estimates[b] = math.inf
            timings[b] = n
        elif n:
            estimates[b] = s.mean_us
            timings[b] = n
            if n > 1:
                stdevs[b] = math.sqrt(s.var_us2)
    if not estimates:
        return EMPTY_ESTIMATES, NO_TIMINGS, EMPTY_ESTIMATES
    return (MappingProxyType(estimates), MappingProxyType(timings),
            MappingProxyType(stdevs) if stdevs else EMPTY_ESTIMATES)


def _floors_of(state: KeyState) -> Mapping[Choice, float]:
    return MappingProxyType(state.floors) if state.floors else EMPTY_ESTIMATES


def explained_decision(backend: Choice, reason: Reason, key: KeyHistory, state: KeyState,
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
        return explained_decision(backend, Reason.EXPLORE, key, state, plan=plan)
    decision = _UNEXPLAINED_EXPLORE.get((backend, plan))
    if decision is None:  # a handful of combinations of three arms: built once each
        decision = _UNEXPLAINED_EXPLORE[(backend, plan)] = Decision(
            backend, Reason.EXPLORE, plan=plan)
    return decision


def explained_exploit(chosen: Choice, usable: Sequence[Choice], key: KeyHistory,
                      state: KeyState, noise_floor: float) -> Decision:
    # (built for every exploit span: one pass, no generator, positional fields)
    return Decision(chosen, _EXPLOIT, confidence_in(chosen, usable, key.arms, noise_floor),
                    _estimates(key), key.samples, (), _floors_of(state))


def fill_in(decision: Decision, state: KeyState, key: KeyHistory,
            candidates: Sequence[Choice], noise_floor: float) -> Decision:
    """``decision`` with its estimates (and an exploit's confidence) filled in from ``key``, if
    it was made with ``explain=False``, and each estimate's timings and standard deviation
    (:meth:`Policy.explained`)."""
    if decision.timings or not key.arms:
        return decision
    estimates = decision.estimates_us
    if estimates:  # explained when made (a re-check, a drift alarm...): only the trust to add
        confidence, samples, floors = decision.confidence, decision.samples, decision.floors_us
        timings, stdevs = _trust(key, estimates)
    else:
        estimates, timings, stdevs = _estimates_and_trust(key)
        samples, floors = key.samples, _floors_of(state)
        confidence = (confidence_in(decision.choice, candidates, key.arms, noise_floor)
                      if decision.reason is _EXPLOIT else decision.confidence)
    # (one construction, positional: this runs for every exported span, on the caller's thread)
    return Decision(decision.choice, decision.reason, confidence, estimates, samples,
                    decision.plan, floors, timings, stdevs)
