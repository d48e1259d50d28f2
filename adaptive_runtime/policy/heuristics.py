"""Trueno's cold-start order: which arm to try first on a key nothing was measured on."""

from __future__ import annotations

from collections.abc import Sequence

from ..backend import Backend, Choice, Kind

__all__ = ["MATRIX_GPU_MIN_ELEMENTS", "SCALAR_MAX_ELEMENTS", "heuristic_order",
           "heuristic_preference"]

# Trueno's cold-start thresholds (elements).
MATRIX_GPU_MIN_ELEMENTS = 10_000
SCALAR_MAX_ELEMENTS = 1_000


_GPU_FIRST = (Backend.GPU, Backend.SIMD, Backend.SCALAR)
_SCALAR_FIRST = (Backend.SCALAR, Backend.SIMD, Backend.GPU)
_SIMD_FIRST = (Backend.SIMD, Backend.SCALAR, Backend.GPU)


def heuristic_preference(kind: Kind, input_size: int) -> tuple[Backend, ...]:
    """All arms in Trueno's cold-start preference order for this kind and size: matrix-like
    work above 10,000 elements → GPU first; under 1,000 elements → SCALAR first; else SIMD."""
    if kind is Kind.MATRIX and input_size > MATRIX_GPU_MIN_ELEMENTS:
        return _GPU_FIRST
    if input_size < SCALAR_MAX_ELEMENTS:
        return _SCALAR_FIRST
    return _SIMD_FIRST


def heuristic_order(kind: Kind, input_size: int,
                    candidates: Sequence[Choice]) -> tuple[Choice, ...]:
    """``candidates`` with their arms in Trueno's cold-start preference order for this kind
    and size (an arm's variants after it, in the order given)."""
    return tuple(c for b in heuristic_preference(kind, input_size)
                 for c in candidates if c.arm is b)
