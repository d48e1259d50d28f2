"""The policy's tuning: :class:`PolicyConfig`, each knob checked for type and range when made."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import ConfigError

__all__ = ["PolicyConfig"]


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """Tuning of :class:`Policy` (the runtime fills it from :class:`RuntimeConfig`). Every knob
    is checked when made: :class:`~adaptive_runtime.errors.ConfigError` naming the knob and
    its range for a value of the wrong type or out of range."""

    min_samples: int = 1
    switch_margin: float = 0.05
    drift_threshold: float = 4.0
    prune_ratio: float = 3.0
    plausible_ratio: float = 4.0
    # every Nth re-check considers every arm, not only plausible ones, so an arm that was
    # slow for a while (contention, throttling) is eventually seen again
    full_recheck_every: int = 4
    # a commitment at least this sure (P(chosen faster than the runner-up)) is re-checked at
    # the regular interval; a less sure one soon
    clear_confidence: float = 0.95
    # an arm never timed on a key whose floor (KeyHistory.floors) is over this many times the
    # best measured estimate is not tried there (slack for the floor being an estimate)
    floor_ratio: float = 1.5
    # an epoch older than this many decisions holds stale estimates of the arms not committed
    # to: a switch they call for is re-measured first
    stale_after_decisions: int = 16
    # Exploring within an allowance: a re-check, or a re-trial after a drift alarm, is made
    # when what it is expected to cost over the best arm fits in what is left of the key's
    # allowance — explore_free_us, or explore_share of the time the key's calls have taken
    # so far, less what timings of other arms have cost since the key committed (so a
    # re-check on a key of large calls waits until the key has run long enough to pay for
    # it, and an arm far behind is re-timed ever more rarely). An arm never timed on the key
    # is tried at once. An untried arm's expected time: twice its floor from the next
    # smaller size bucket (sizes double per bucket), else unknown_arm_ratio x the best
    # measured (a plain loop against vectorised code).
    explore_free_us: float = 1000.0
    explore_share: float = 0.03
    unknown_arm_ratio: float = 3.0
    # decisions between re-checks of a clear commitment at first (doubling while it holds, up
    # to 64x); RuntimeConfig.recheck_interval
    recheck_interval: int = 64
    # What one timing is taken to vary at least, relative to its arm's estimate, when telling
    # two arms apart (P(faster)): a few timings show no spread of their own, and a shared
    # machine's timings of one call vary by 20-40%
    noise_floor: float = 0.1

    def __post_init__(self) -> None:
        for name, (least, most) in _KNOB_RANGES.items():
            value = getattr(self, name)
            integer = name in _INTEGER_KNOBS
            if integer and (isinstance(value, bool) or not isinstance(value, int)):
                raise ConfigError(f"policy knob {name} must be an int, got {value!r}",
                                  field=name)
            if not integer and (isinstance(value, bool)
                                or not isinstance(value, (int, float))):
                raise ConfigError(f"policy knob {name} must be a number, got {value!r}",
                                  field=name)
            if not least <= value <= most:  # (NaN fails both)
                bound = f">= {least:g}" if most == math.inf else f"in [{least:g}, {most:g}]"
                raise ConfigError(f"policy knob {name} must be {bound}, got {value!r}",
                                  field=name)


# Each knob's accepted range (both ends included; inf: no upper bound). drift_threshold inf
# turns drift detection off.
_KNOB_RANGES: dict[str, tuple[float, float]] = {
    "min_samples": (1, math.inf), "switch_margin": (0.0, math.inf),
    "drift_threshold": (0.0, math.inf), "prune_ratio": (1.0, math.inf),
    "plausible_ratio": (1.0, math.inf), "full_recheck_every": (1, math.inf),
    "clear_confidence": (0.0, 1.0), "floor_ratio": (1.0, math.inf),
    "stale_after_decisions": (1, math.inf), "explore_free_us": (0.0, math.inf),
    "explore_share": (0.0, 1.0), "unknown_arm_ratio": (1.0, math.inf),
    "recheck_interval": (1, math.inf), "noise_floor": (0.0, math.inf),
}
_INTEGER_KNOBS = frozenset({"min_samples", "full_recheck_every", "stale_after_decisions",
                            "recheck_interval"})

