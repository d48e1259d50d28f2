"""Shared test doubles: a manual clock, a fake nanosecond timer, fake arms with set latencies.

Time in these tests never comes from the machine. The runtime reads its ``timer`` right before
and right after a kernel, so a fake kernel that advances the fake timer by its latency makes the
learned latency exact; the ``clock`` (seconds) drives hot-path windows and quarantines and only
moves when a test advances it.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import settings

import adaptive_runtime as ar
from adaptive_runtime.keys import reference_size
from adaptive_runtime.operations import DeviceProbe

# Pinned randomness: Hypothesis explores the same examples on every run and machine, and no
# example database is written; deadlines are off because CI machines are noisy.
settings.register_profile("pinned", derandomize=True, database=None, deadline=None,
                          print_blob=True)
settings.load_profile("pinned")


@pytest.fixture(autouse=True)
def _torch_at_its_own_size():
    """Each test starts as a new process does: torch at its pool's size. (A runtime holds
    torch at the count a trial measured faster, process-wide, and an earlier test's runtime
    may have left it at one thread: ``_dispatch/pool_phase``.)"""
    from adaptive_runtime.threads import set_torch_phase

    set_torch_phase(0)
    yield

Backend = ar.Backend
ALL_ARMS = (Backend.GPU, Backend.SIMD, Backend.SCALAR)
# The harness's default size: the reference size of bucket 13, at which a timing is learned as
# it is (timings of other sizes are rescaled to their bucket's reference size).
REFERENCE_SIZE = reference_size(13)


class FakeClock:
    """Manual clock in seconds: ``clock()`` reads it, ``clock.advance(s)`` moves it."""

    def __init__(self, start_s: float = 1_000.0) -> None:
        self.now_s = float(start_s)
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now_s

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        self.now_s += seconds


class FakeTimer:
    """Manual timer in integer nanoseconds, counting how often it is read."""

    def __init__(self, start_ns: int = 10**12) -> None:
        self.now_ns = int(start_ns)
        self.reads = 0

    def __call__(self) -> int:
        self.reads += 1
        return self.now_ns

    def advance_us(self, microseconds: float) -> None:
        self.now_ns += round(microseconds * 1000.0)


class ArmFailure(RuntimeError):
    """What a fake arm raises when told to fail."""


class FakeArms:
    """Fake kernels, one per arm, whose run "takes" a set latency on the fake timer.

    ``latency_us[arm]`` is a number or a zero-argument callable (for noisy latencies); set
    ``failing`` to make arms raise. ``calls`` counts runs per arm and ``ran`` lists the arm of
    every run in order.
    """

    def __init__(self, timer: FakeTimer, latency_us: dict[Backend, Any]) -> None:
        self.timer = timer
        self.latency_us: dict[Backend, Any] = dict(latency_us)
        self.failing: set[Backend] = set()
        self.calls: Counter[Backend] = Counter()
        self.ran: list[Backend] = []

    def kernel(self, backend: Backend) -> Callable[..., Any]:
        def run(*args: Any) -> tuple[Backend, tuple[Any, ...]]:
            self.calls[backend] += 1
            self.ran.append(backend)
            latency = self.latency_us[backend]
            self.timer.advance_us(latency() if callable(latency) else latency)
            if backend in self.failing:
                raise ArmFailure(f"{backend.value} arm failed (test double)")
            return backend, args

        run.__qualname__ = f"fake_{backend.value}_kernel"
        return run


@dataclass
class Harness:
    """A runtime wired to fake time and fake arms, with one registered operation."""

    rt: ar.AdaptiveRuntime
    clock: FakeClock
    timer: FakeTimer
    arms: FakeArms
    op: str
    size: int
    reasons: list[ar.Reason] = field(default_factory=list)

    def call(self, size: int | None = None) -> Any:
        return self.rt.run(self.op, self.size if size is None else size)

    def call_tracked(self, times: int = 1, size: int | None = None) -> list[tuple[ar.Backend,
                                                                                 ar.Reason]]:
        """Run ``times`` calls; return (arm that ran, reason of the selection) for each.

        The reason comes from the difference of ``selection_counts()`` around the call; fast
        path calls are counted there too (as exploit), so every call has exactly one reason.
        """
        out = []
        for _ in range(times):
            before = self.rt.selection_counts()
            before_ran = len(self.arms.ran)
            self.call(size)
            after = self.rt.selection_counts()
            diff = [k for k in after if after[k] != before.get(k, 0)]
            assert len(diff) == 1 and after[diff[0]] - before.get(diff[0], 0) == 1, diff
            reason = diff[0].reason
            self.reasons.append(reason)
            out.append((self.arms.ran[-1] if len(self.arms.ran) > before_ran else None, reason))
        return out

    def samples(self, op: str | None = None) -> int:
        return sum(r.samples for r in self.rt.history_snapshot() if r.operation == (op or self.op))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def timer() -> FakeTimer:
    return FakeTimer()


@pytest.fixture
def rng() -> random.Random:
    return random.Random(20240611)


def build_runtime(clock: FakeClock, timer: FakeTimer, *, gpu: bool = True,
                  config: ar.RuntimeConfig | None = None,
                  **config_fields: Any) -> ar.AdaptiveRuntime:
    cfg = config if config is not None else ar.RuntimeConfig(**config_fields)
    return ar.AdaptiveRuntime(cfg, builtin_ops=False, devices=DeviceProbe(gpu=gpu),
                              clock=clock, timer=timer)


@pytest.fixture
def make_runtime(clock: FakeClock, timer: FakeTimer) -> Callable[..., Harness]:
    """Factory: ``make_runtime({Backend.GPU: 50, ...}, kind=..., size=..., **config)``.

    Registers operation ``op`` (default ``"fakeop"``) with a fake kernel per arm in
    ``latency_us`` (a ``Variant`` key: a variant of its arm); the operation's size is its
    first argument (an int).
    """

    def make(latency_us: dict[Backend, Any], *, op: str = "fakeop", kind: str = "vector",
             size: int = REFERENCE_SIZE, gpu: bool = True, arms: Iterable[Backend] | None = None,
             config: ar.RuntimeConfig | None = None, **config_fields: Any) -> Harness:
        rt = build_runtime(clock, timer, gpu=gpu, config=config, **config_fields)
        fake = FakeArms(timer, latency_us)
        operation = rt.register(op, size=lambda n, *_rest: n, kind=kind)
        for backend in (arms if arms is not None else latency_us):
            # (a Variant key registers a variant of its arm)
            operation.add_implementation(backend.arm, fake.kernel(backend),
                                         name=backend.variant)
        return Harness(rt, clock, timer, fake, op, size)

    return make


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``gpu`` need a real CUDA device: they run where one exists."""
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a real CUDA device (none on this machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def pool_of_two():
    """torch's intra-op pool at 2 threads, nothing held by a runtime (an earlier test's may
    hold torch at one thread); the count before is put back after."""
    import torch

    from adaptive_runtime.threads import set_torch_phase

    set_torch_phase(0)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    set_torch_phase(0)
    torch.set_num_threads(before)
