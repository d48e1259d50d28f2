"""What the span of a trial of a thread pool's count (``adaptive.threads {pool}``) says: the
counts before, tried and held now, and what explained the verdict (``_dispatch/pool_phase``:
the windows' mean timed calls and the gain judged, what started the trial, and where a change
in the machine's load brought it forward, that change). The load now is added as on a drift
or switch (``adaptive.load.*``, ``span_builders``)."""

from __future__ import annotations

from typing import Any

from ..records import PoolTrial

__all__ = ["trial_attributes"]


def trial_attributes(trial: PoolTrial) -> dict[str, Any]:
    """The attributes of ``trial``'s span."""
    attrs: dict[str, Any] = {
        "adaptive.pool": trial.pool,
        "adaptive.threads": trial.after,
        "adaptive.threads.before": trial.before,
        "adaptive.threads.trial": trial.trial,
        "adaptive.threads.kept": trial.kept,
        "adaptive.threads.gain": float(trial.gain),
        "adaptive.threads.reference_mean_us": float(trial.reference_mean_us),
        "adaptive.threads.trial_mean_us": float(trial.trial_mean_us),
        "adaptive.threads.window_calls": trial.window_calls,
        "adaptive.threads.trial_s": float(trial.trial_s),
        "adaptive.threads.trigger": trial.trigger,
    }
    if trial.trigger == "load":  # (the change in load that brought the trial forward)
        attrs["adaptive.load.involuntary_switches_per_s_change"] = float(trial.switches_change)
        attrs["adaptive.load.average_1m_change"] = float(trial.load_change)
    return attrs
