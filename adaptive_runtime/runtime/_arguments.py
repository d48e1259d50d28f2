"""The checks of the Trueno-style API's arguments (``select``, ``record_performance``, ...):
an operation's name and a duration, each refused with the error the method's docstring names."""

from __future__ import annotations

import math
import numbers

from ..operations import name_too_long, utf8_encodable

__all__ = ["duration_us_of", "operation_name"]


def operation_name(operation: object) -> str:
    """``operation``, checked to be a name an operation can have (``TypeError``, ``ValueError``)."""
    if not isinstance(operation, str) or not operation:
        raise TypeError(f"operation must be a non-empty str, got {operation!r}")
    if not (operation.isascii() or utf8_encodable(operation)):
        # (a lone surrogate would make every later OTLP export of its metrics fail)
        raise ValueError(f"operation must be valid Unicode text (encodable as UTF-8), "
                         f"got {operation!r}")
    too_long = name_too_long(operation)
    if too_long is not None:
        raise ValueError(too_long)
    return operation


def duration_us_of(duration_us: object) -> float:
    """``duration_us`` as a float, checked as :meth:`AdaptiveRuntime.record_performance`
    says."""
    if isinstance(duration_us, bool) or not isinstance(duration_us, numbers.Real):
        raise TypeError(f"duration_us must be a number of microseconds, "
                        f"got {type(duration_us).__name__}: {duration_us!r}")
    try:
        duration = float(duration_us)
    except OverflowError:  # an int beyond a float's range: as infinite as it gets
        duration = math.inf
    if not (0.0 <= duration < math.inf):
        raise ValueError(f"duration_us must be finite and >= 0, got {duration_us!r}")
    return duration
