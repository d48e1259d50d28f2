"""The selection policy: a state machine per (operation, size bucket).

The policy owns a :class:`KeyState` per key (the committed arm, the re-check schedule, the
memo, the prior, the floors, the exploration plan, the drift statistic) and reads the measured
:class:`~adaptive_runtime.history.ArmStats` of the key's arms, which it never writes: so
recorded timings can be replayed against another policy configuration offline
(:mod:`adaptive_runtime.offline.replay`), and tests drive it with fake statistics and a fake clock.
:meth:`Policy.decide` is pure; the transitions (:meth:`Policy.step`, :meth:`Policy.next`,
:meth:`Policy.apply`, :meth:`Policy.observe`, :meth:`Policy.observe_failure`) change only the
state. What touches the measured history is the :class:`Learner`'s, the one online loop every
caller runs (the dispatcher, the Trueno API, replay): after a ``drift`` decision it starts a
new epoch of the key's estimates (``KeyHistory.start_epoch``), and where
:meth:`Policy.remeasures` says so, a re-check timing replaces its arm's estimate.

Phases of one key:

1. *heuristic* — no data yet: Trueno's cold-start rules (matrix-like work above 10,000
   elements → GPU if available; under 1,000 elements → SCALAR; otherwise SIMD).
2. *explore* — each candidate arm is timed ``min_samples_per_arm`` times (by default once),
   round by round, whatever the cold-start order guessed it costs; an arm never timed whose
   floor (what it takes at least, e.g. the GPU arm's copies of a host call, or what it took on a
   smaller size bucket) is over ``floor_ratio`` x the best is not tried until the key's calls
   have taken 1/``explore_share`` times that floor. With
   ``min_samples_per_arm`` above one: an arm whose estimate after two timings is over
   ``prune_ratio`` x the best so far needs no more (one costly timing that lost clearly is
   enough too, unless it was the key's first call); while the two fastest are not told apart
   (under ``clear_confidence`` that the faster is faster), they are timed again, up to twice
   ``min_samples_per_arm`` times each; a round whose calls cost less than one look of the policy
   is planned through.
3. *exploit* — commit to the fastest; a challenger takes over only when faster by
   ``switch_margin`` (hysteresis), and timed at least three times in the epoch (a challenger timed
   less is re-timed first). Sparse *recheck* calls measure plausible other arms afresh, at
   intervals that double while the choice holds — starting after ``min_samples_per_arm`` decisions
   when the commitment was not clear (under ``clear_confidence`` that the chosen arm is
   faster than the runner-up, each timing taken to vary by ``noise_floor`` at least, or a
   runner-up left behind on one costly timing), after the runtime's ``recheck_interval``
   when it was; each within the key's exploration allowance (``explore_share`` of its time,
   spent by every timing of another arm once committed: ``KeyState.explored_us``), an arm
   timed once priced at twice its smaller bucket's time at most; a turn with no arm to look
   at passes, and the next comes an interval later.
4. *drift* — when the committed arm's Page-Hinkley statistic passes ``drift_threshold`` (its
   timings ran over its estimate by more than its own spread), or when a challenger beats it
   in an epoch older than ``stale_after_decisions`` (estimates formed at different times),
   the key is re-explored: that arm in full, the others once (fully when one of them beats
   it clearly) — each when its estimate from before the alarm fits the allowance.

A failing arm has an infinite estimate and sits out a quarantine; ``fallback`` is the reason of
a call re-routed after an arm raised (:meth:`Policy.fallback`), or of one that runs while every
arm is quarantined.

One module per phase, each function given the configuration and what it reads; a module
imports only those above it in this list, so :mod:`.policy`, last, is the one that knows them
all. What one phase reads of another has a public name in it; what a module keeps to itself
starts with an underscore (no private name crosses a module border: ``tools/check_sizes.py``):

- :class:`PolicyConfig`, the knobs every module reads, is declared in
  :mod:`adaptive_runtime.knobs` (at the bottom layer: ``RuntimeConfig`` has the same fields).
- :mod:`.heuristics` — cold start: Trueno's order (:func:`heuristic_preference`,
  :func:`heuristic_order`).
- :mod:`.state` — :class:`KeyState`, ``Round`` (what one evaluation works from), and the
  transitions more than one phase makes: ``commit_to``, ``next_recheck_turn``,
  ``start_epoch``, ``uncommit``, ``disarm``; the drift statistic's baseline (``follow``)
  and parameters.
- :mod:`.compare` — what the estimates say: :func:`best_arm`, ``two_fastest``,
  ``p_faster``, ``confidence_in`` (read by exploration, the commit rule, drift, the floors and
  the explained decisions alike).
- :mod:`.explain` — decisions and what they were based on (``explained_decision``,
  ``explained_exploit``, ``fill_in``), and those nobody looks at, built once
  (:func:`heuristic_decision`, :func:`explore_decision`).
- :mod:`.explore` — explore: ``evaluation_round``, ``exploration_decision``, ``_owed_round``,
  ``_checkpoints_pay``, ``_unsure_plan``, ``_prior_plan``, ``_schedule``, :func:`plan_steps`,
  and the exploration allowance (``explore_budget``, ``_affordable``).
- :mod:`.floors` — what the neighbouring size buckets say (:class:`Neighbours`):
  ``look_around``, ``_raise_floors``, ``_neighbours_measured``.
- :mod:`.commit` — commit, exploit and re-check: ``commit_decision``, ``_clearly_better``,
  ``_before_switch``, ``_left_on_first_timings``, ``_recheck_target``, ``first_recheck_turn``.
- :mod:`.drift` — drift: ``drift_decision``, the Page-Hinkley statistic (``observe_drift``),
  the memo (``reusable_memo``).
- :mod:`.policy` — :class:`Policy`, the transitions and the decision over the phases, and
  fallback (``_all_quarantined``, :meth:`Policy.fallback`); :class:`Step`.
- :mod:`.learner` — :class:`Learner`: each key's :class:`KeyState`, and learning a timing or a
  failure into the measured history and the state (the only place the two meet).
"""

from __future__ import annotations

from ..knobs import PolicyConfig
from .compare import best_arm
from .explain import explore_decision, heuristic_decision
from .explore import plan_steps
from .floors import Neighbours
from .heuristics import MATRIX_GPU_MIN_ELEMENTS as MATRIX_GPU_MIN_ELEMENTS
from .heuristics import SCALAR_MAX_ELEMENTS as SCALAR_MAX_ELEMENTS
from .heuristics import heuristic_order, heuristic_preference
from .learner import Learner
from .policy import Policy, Step
from .state import KeyState

__all__ = [
    "KeyState",
    "Learner",
    "Neighbours",
    "Policy",
    "PolicyConfig",
    "Step",
    "best_arm",
    "explore_decision",
    "heuristic_decision",
    "heuristic_order",
    "heuristic_preference",
    "plan_steps",
]
