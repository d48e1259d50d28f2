"""The policy's knobs, declared once: :class:`PolicyKnobs` (each knob's default, type and range,
checked when a config is made), :class:`PolicyConfig` (the policy's tuning, what
``adaptive-runtime replay --config`` sets) and, through inheritance, the same fields of
:class:`~adaptive_runtime.config.RuntimeConfig` and the same ``ADAPTIVE_RUNTIME_<KNOB>``
variables. Which knob changes what, as replay measured it: docs/configuration.md.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from .errors import ConfigError

__all__ = ["KNOB_NAMES", "PolicyConfig", "PolicyKnobs"]


@dataclass(frozen=True, kw_only=True)
class PolicyKnobs:
    """The selection policy's knobs (see docs/policy.md for the phases they tune).

    Exploring
      min_samples_per_arm: timings each plausible arm gets before the key commits (1: one
        each, an unsure commitment re-checked soon; above 1, up to twice as many for the two
        fastest while they cannot be told apart).
      prune_ratio: with ``min_samples_per_arm`` above 1, an arm whose estimate after two
        timings is over this many times the best so far needs no more.
      floor_ratio: an arm never timed on a key whose floor (what it takes at least, e.g. a GPU
        arm's copies, or what it took on a smaller size bucket) is over this many times the
        best measured estimate is not tried there until the key's calls have taken
        1/``explore_share`` times that floor (a floor postpones an arm, never rules it out).
      clear_confidence: a commitment at least this sure that the chosen arm is faster than the
        runner-up is re-checked at ``recheck_interval``; a less sure one soon.
      noise_floor: what one timing is taken to vary at least, relative to its arm's estimate,
        when telling two arms apart (a few timings show no spread of their own; a shared
        machine's timings of one call vary by 20-40 %).
    Exploiting and re-checking
      switch_margin: a challenger must be this fraction faster than the committed arm to take
        over (hysteresis against flip-flopping on near-ties).
      recheck_interval: decisions between sparse re-checks of other plausible arms on a clear
        commitment (doubling while the choice holds, up to 64x).
      plausible_ratio: a re-check looks at arms whose estimate is within this many times the
        committed arm's.
      full_recheck_every: every Nth re-check considers every arm, not only plausible ones, so an
        arm that was slow for a while (contention, throttling) is eventually seen again.
      explore_free_us, explore_share: a re-check, or a re-trial after a drift alarm, is made
        when what it is expected to cost over the best arm fits what is left of the key's
        allowance: ``explore_free_us``, or ``explore_share`` of the time the key's calls have
        taken so far, less what timings of other arms have cost since the key committed.
      unknown_arm_ratio: an untried arm with no floor from a smaller bucket is expected to take
        this many times the best measured (a plain loop against vectorised code).
    Drift
      drift_threshold: Page-Hinkley alarm level, in units of the committed arm's mean latency;
        lower reacts faster to a slowdown, higher ignores more noise (``inf``: off).
      stale_after_decisions: an epoch older than this many decisions holds stale estimates of
        the arms not committed to: a switch they call for is re-measured first.

    Every knob is checked when a config is made: :class:`~adaptive_runtime.errors.ConfigError`
    naming the knob and its range for a value of the wrong type or out of range.
    """

    min_samples_per_arm: int = 1
    switch_margin: float = 0.05
    drift_threshold: float = 4.0
    recheck_interval: int = 64
    prune_ratio: float = 3.0
    plausible_ratio: float = 4.0
    full_recheck_every: int = 4
    clear_confidence: float = 0.95
    floor_ratio: float = 1.5
    stale_after_decisions: int = 16
    explore_free_us: float = 1000.0
    explore_share: float = 0.03
    unknown_arm_ratio: float = 3.0
    noise_floor: float = 0.1

    def __post_init__(self) -> None:
        for name, (least, most) in _KNOB_RANGES.items():
            _check_knob(self, name, least, most)

    def policy_config(self) -> PolicyConfig:
        """These knobs as a :class:`PolicyConfig` (what the policy is built with)."""
        if type(self) is PolicyConfig:
            return self
        return PolicyConfig(**{name: getattr(self, name) for name in KNOB_NAMES})


@dataclass(frozen=True, kw_only=True)
class PolicyConfig(PolicyKnobs):
    """The tuning of :class:`~adaptive_runtime.policy.Policy`: the knobs of
    :class:`PolicyKnobs`, alone (the runtime makes it from its
    :class:`~adaptive_runtime.config.RuntimeConfig`; ``adaptive-runtime replay --config``
    from ``KNOB=VALUE`` pairs)."""


# Each knob's accepted range (both ends included; inf: no upper bound). drift_threshold inf
# turns drift detection off.
_KNOB_RANGES: dict[str, tuple[float, float]] = {
    "min_samples_per_arm": (1, 1000), "switch_margin": (0.0, 0.9),
    "drift_threshold": (0.0, math.inf), "recheck_interval": (1, math.inf),
    "prune_ratio": (1.0, math.inf), "plausible_ratio": (1.0, math.inf),
    "full_recheck_every": (1, math.inf), "clear_confidence": (0.0, 1.0),
    "floor_ratio": (1.0, math.inf), "stale_after_decisions": (1, math.inf),
    "explore_free_us": (0.0, math.inf), "explore_share": (0.0, 1.0),
    "unknown_arm_ratio": (1.0, math.inf), "noise_floor": (0.0, math.inf),
}
_INTEGER_KNOBS = frozenset({"min_samples_per_arm", "full_recheck_every",
                            "stale_after_decisions", "recheck_interval"})
KNOB_NAMES = tuple(f.name for f in dataclasses.fields(PolicyKnobs))


def _check_knob(config: PolicyKnobs, name: str, least: float, most: float) -> None:
    """Raise :class:`ConfigError` unless knob ``name`` has the right type and is in
    [least, most]; a float knob given as an int is stored as a float."""
    value = getattr(config, name)
    shown = (f"an int of {value.bit_length()} bits"
             if isinstance(value, int) and value.bit_length() > 1000 else repr(value))
    integer = name in _INTEGER_KNOBS
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        what = "an integer" if integer else "a number"
        raise ConfigError(f"policy knob {name} must be {what}, got {shown}", field=name)
    if not integer and isinstance(value, int):
        try:
            value = float(value)
        except OverflowError:  # (an int too large for a float: out of range below)
            value = math.inf
        object.__setattr__(config, name, value)
    if not least <= value <= most:  # (NaN fails both)
        bound = f">= {least:g}" + ("" if most == math.inf else f" and <= {most:g}")
        raise ConfigError(f"policy knob {name} must be {bound}, got {shown}", field=name)
