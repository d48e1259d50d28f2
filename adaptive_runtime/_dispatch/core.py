"""What every part of a dispatcher shares: its collaborators, its settings and its one lock.

The parts (fast path, learner, fallback, result checks, Trueno API, telemetry emission) each
hold the :class:`Core` and read these through it, so the lock a forked child renews is the
one every part takes (see ``_concurrency.forks``).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

from .._concurrency.forks import renew_after_fork
from ..backend import Backend, Choice
from ..config import RuntimeConfig
from ..gating import HotPathDetector, TraceGate
from ..history import HistoryStore
from ..operations import DeviceProbe, OperationRegistry
from ..policy import Learner, Policy


class Core:
    """The dispatcher's collaborators and settings, and the lock that guards its state."""

    __slots__ = ("__weakref__", "clock", "config", "devices", "enabled", "forced", "gate",
                 "history", "hot", "learner", "lock", "min_samples", "policy", "registry", "timer",
                 "validate_mask")

    def __init__(self, *, config: RuntimeConfig, registry: OperationRegistry,
                 history: HistoryStore, policy: Policy, hot: HotPathDetector, gate: TraceGate,
                 devices: DeviceProbe, clock: Callable[[], float],
                 timer: Callable[[], int]) -> None:
        self.config = config
        self.registry = registry
        self.history = history
        self.policy = policy
        self.hot = hot
        self.gate = gate
        self.devices = devices
        self.clock = clock
        self.timer = timer
        self.lock = threading.Lock()
        # (the history saver and the metric reader's callbacks take it on their threads: a
        # forked child gets a fresh one, see _concurrency.forks)
        renew_after_fork(self, Core._renew_lock)
        # the implementation every call runs: an arm (its primary one) or a variant
        self.forced: Choice | None = config.force_backend
        # the one learning loop: the policy's state of each key, learning timings into it
        self.learner = Learner(policy, history, self.forced)
        self.min_samples = policy.config.min_samples_per_arm
        self.enabled = tuple(b for b in Backend if b not in config.disabled_backends)
        # validation mode: calls whose ticket is a multiple of 2**k are re-run on another arm
        # and compared (-1: off). Such calls are always timed, so the fast path is unchanged.
        rate = config.validate_sample_rate
        self.validate_mask = (1 << max(0, round(-math.log2(rate)))) - 1 if rate > 0 else -1

    def _renew_lock(self) -> None:
        self.lock = threading.Lock()

    def available_arms(self) -> list[str]:
        """The arms enabled and available here, by name (for error messages)."""
        return [b.value for b in self.enabled if self.devices.available(b)]
