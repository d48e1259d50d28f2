"""Decisions inside profiler traces: while torch's profiler records (``torch.profiler.profile``,
or ``torch.autograd.profiler.emit_nvtx`` for Nsight, where ranges become NVTX ranges), every
timed call's kernel runs inside a ``record_function`` range named by its operation, arm and
reason — ``adaptive relu: simd:numpy (explore)`` — so a trace shows which arm ran and why
beside the kernels it launched. Nothing is imported, and a call pays one check (~0.1 us, on
timed calls only: the fast path is untouched) while no profiler records."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from .._imported import imported

__all__ = ["profiler_range"]


def profiler_range(operation: str, choice: Any, reason: Any) -> AbstractContextManager[Any] | None:
    """The range to run a timed call's kernel in, or ``None`` while no profiler records."""
    torch = imported("torch")
    if torch is None:
        return None
    try:
        if not torch.autograd._profiler_enabled():
            return None
        return torch.profiler.record_function(
            f"adaptive {operation}: {choice.value} ({reason.value})")
    except Exception:  # (a torch without these, or a partial import): no range
        return None
