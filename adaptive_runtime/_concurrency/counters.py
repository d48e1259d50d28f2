"""Counters any thread bumps without a lock and anyone reads without taking a count.

A counter is a range iterator: ``next(counter)`` counts one in a single C call (atomic under
the GIL, so threads never lose a count), and :func:`issued` reads how many were counted
from how many it has left (PEP 424's ``length_hint``), not by parsing a ``repr``.
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Iterator

__all__ = ["counter", "issued"]

# Counts a counter can take: ``sys.maxsize`` (a count a nanosecond for 292 years).
_CAPACITY = sys.maxsize


def counter() -> Iterator[int]:
    """A new counter at zero: ``next(c)`` counts one."""
    return iter(range(_CAPACITY))


def issued(c: Iterator[int]) -> int:
    """How many times ``next`` was called on the counter ``c``."""
    return _CAPACITY - operator.length_hint(c)
