"""The hot-path gate: calls per second per operation over windows (1 s by default), and
whether the operation is hot (nothing of a hot operation is traced).

Time is an argument (an injected clock upstream), so tests drive it with a fake clock and no
sleeping.
"""

from __future__ import annotations

from collections import OrderedDict

from ..records import HotPathTransition

__all__ = ["HotPathDetector", "OperationRate"]


class OperationRate:
    """Call-rate window and hot state of one operation (see :class:`HotPathDetector`)."""

    __slots__ = ("detector", "hot", "last_call_s", "operation", "rate", "suppressed",
                 "window_calls", "window_start")

    def __init__(self, detector: HotPathDetector, operation: str, now_s: float) -> None:
        self.detector = detector
        self.operation = operation
        self.window_start = now_s
        self.window_calls = 0
        self.last_call_s = now_s
        self.rate = 0.0
        self.hot = False
        self.suppressed = 0

    def add(self, calls: int, now_s: float, since_s: float | None = None
            ) -> HotPathTransition | None:
        """Count ``calls`` calls made up to ``now_s`` (spread since ``since_s``, when they are
        a batch: the fast calls of one key since its previous timed call); return a
        transition if one happened."""
        if self.hot:
            self.suppressed += calls  # nothing of a hot operation is traced
        gap = now_s - self.last_call_s
        self.last_call_s = now_s
        window_s = self.detector.window_s
        if gap > window_s:
            # Nothing was counted for a whole window: what the window holds is older than one
            # window, and these calls (a batch: the fast calls since the key's previous timed
            # call) were spread over the gap; their rate over it is the most recent rate.
            self.window_calls = 0
            return self._close(now_s, calls / gap)
        if since_s is not None and since_s < self.window_start < now_s:
            # A batch that began before this window: only its share inside the window counts
            # here (calls spread evenly over the batch). Counted whole, the batches of several
            # keys of one operation, reported in one window after minutes of slow calls (keys
            # called in lockstep are timed together), would read as a burst that never was.
            calls = round(calls * (now_s - self.window_start) / (now_s - since_s))
        self.window_calls += calls
        # (close_window() inlined, on every timed call; its silence test is false here: the
        # last call is this one)
        elapsed = now_s - self.window_start
        if elapsed < window_s:
            return None
        return self._close(now_s, self.window_calls / elapsed)

    def close_window(self, now_s: float) -> HotPathTransition | None:
        """Close the window if it is over: its rate decides whether the operation is hot.

        The rate that counts is that of the most recent ``window_s``: after a whole window
        without a call it is zero, however busy the window before the silence was (its calls
        averaged over the silence would keep a quiet operation hot for several windows).
        """
        window_s = self.detector.window_s
        if now_s - self.last_call_s > window_s:
            return self._close(now_s, 0.0)
        elapsed = now_s - self.window_start
        if elapsed < window_s:
            return None
        return self._close(now_s, self.window_calls / elapsed)

    def _close(self, now_s: float, rate: float) -> HotPathTransition | None:
        self.rate = rate
        self.window_start = now_s
        self.window_calls = 0
        if not self.hot and rate > self.detector.enter_calls_per_sec:
            self.hot = True
            self.suppressed = 0
            return HotPathTransition(self.operation, True, rate, 0)
        if self.hot and rate < self.detector.leave_calls_per_sec:
            self.hot = False
            return HotPathTransition(self.operation, False, rate, self.suppressed)
        return None


class HotPathDetector:
    """Calls per second per operation over windows of ``window_s`` (1 s).

    An operation becomes hot when a window's rate is above ``enter_calls_per_sec`` and stops
    being hot when a window's rate is below half of it. A rate, not a lifetime total: 15,000
    calls spread over 3 s are 5,000 calls/s and never hot. Bounded: at most ``max_operations``
    unpinned operations are tracked, least recently seen dropped first; registered operations
    are pinned (there are few, and their state is looked up once per route).
    """

    def __init__(self, enter_calls_per_sec: float, *, window_s: float = 1.0,
                 max_operations: int = 16_384) -> None:
        if enter_calls_per_sec <= 0:
            raise ValueError(f"enter_calls_per_sec must be > 0, got {enter_calls_per_sec}")
        if window_s <= 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        self.enter_calls_per_sec = float(enter_calls_per_sec)
        self.leave_calls_per_sec = self.enter_calls_per_sec / 2.0
        self.window_s = float(window_s)
        self.max_operations = max_operations
        self._pinned: dict[str, OperationRate] = {}
        self._ops: OrderedDict[str, OperationRate] = OrderedDict()

    def state(self, operation: str, now_s: float, *, pin: bool = False) -> OperationRate:
        """The rate state of ``operation``, created if new (``pin``: never evicted)."""
        state = self._pinned.get(operation)
        if state is not None:
            return state
        state = self._ops.get(operation)
        if state is None:
            state = OperationRate(self, operation, now_s)
        if pin:
            self._ops.pop(operation, None)
            self._pinned[operation] = state
        elif operation in self._ops:
            self._ops.move_to_end(operation)
        else:
            self._ops[operation] = state
            if len(self._ops) > self.max_operations:
                self._ops.popitem(last=False)
        return state

    def observe(self, operation: str, calls: int, now_s: float, since_s: float | None = None
                ) -> HotPathTransition | None:
        """Count ``calls`` calls of ``operation`` made up to ``now_s`` (since ``since_s``, for
        a batch); return a transition if any."""
        return self.state(operation, now_s).add(calls, now_s, since_s)

    def _find(self, operation: str) -> OperationRate | None:
        state = self._pinned.get(operation)
        return state if state is not None else self._ops.get(operation)

    def check(self, operation: str, now_s: float) -> tuple[bool, HotPathTransition | None]:
        """Whether ``operation`` is hot now, and the transition if closing its stale window
        (a hot operation that went quiet) just ended the hot path."""
        state = self._find(operation)
        if state is None or not state.hot:
            return False, None
        transition = state.close_window(now_s)
        return state.hot, transition

    def is_hot(self, operation: str, now_s: float) -> bool:
        """Whether ``operation`` is hot now (a stale window is closed first)."""
        return self.check(operation, now_s)[0]

    def rate(self, operation: str) -> float:
        """Calls/s measured over the last closed window (0 before the first one closes)."""
        state = self._find(operation)
        return state.rate if state is not None else 0.0

    def hot_operations(self) -> list[str]:
        return [s.operation for s in (*self._pinned.values(), *self._ops.values()) if s.hot]

    def clear(self) -> None:
        """Forget every window (pinned states are reset in place, since routes hold them)."""
        self._ops.clear()
        for state in self._pinned.values():
            state.window_calls = 0
            state.rate = 0.0
            state.hot = False
            state.suppressed = 0
