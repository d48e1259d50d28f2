"""The one definition of a *size bucket*: the unit of history.

Sizes ``n`` and ``m`` share learned history exactly when ``size_bucket(n) == size_bucket(m)``.
Buckets are powers of two (``n.bit_length()``): bucket 0 holds size 0, bucket 1 holds 1,
bucket 2 holds 2-3, bucket k holds ``2**(k-1) .. 2**k - 1``. Kernel cost changes smoothly with
size, so one bucket per doubling keeps history small (at most 65 keys per operation: sizes are
below ``MAX_SIZE`` = ``2**64``) while separating sizes whose best arm differs.
"""

from __future__ import annotations

__all__ = ["MAX_SIZE", "bucket_bounds", "reference_size", "size_bucket", "unchecked_bucket"]

#: Sizes are element counts below this (no array holds more; torch and numpy sizes are
#: 64-bit). Larger ones are rejected: they would each make a bucket of their own, without bound,
#: and their reference sizes overflow a float.
MAX_SIZE = 1 << 64


#: :func:`size_bucket` without its checks, for the dispatcher's fast path, which only looks up
#: keys whose sizes :func:`size_bucket` has already accepted: ``int.bit_length`` itself, a C
#: method (no Python frame per call); it raises ``TypeError`` for anything but an ``int``.
unchecked_bucket = int.bit_length


def size_bucket(n: int) -> int:
    """Return the size bucket of an input of ``n`` elements (``n.bit_length()``).

    Raises ``TypeError`` for a non-integer (``bool`` included) and ``ValueError`` for a negative
    size or one of ``MAX_SIZE`` (``2**64``) or more.
    """
    if type(n) is not int:
        # numpy integers are accepted (they are sizes people naturally pass); bools are not.
        if isinstance(n, bool) or not hasattr(n, "__index__"):
            raise TypeError(f"input_size must be an int, got {type(n).__name__}: {n!r}")
        n = n.__index__()
    if n < 0:
        raise ValueError(f"input_size must be >= 0, got {n}")
    if n >= MAX_SIZE:
        raise ValueError(f"input_size must be < 2**64, got an int of {n.bit_length()} bits")
    return unchecked_bucket(n)


def reference_size(bucket: int) -> int:
    """The size a bucket's learned latencies stand for: its geometric middle, rounded
    (``2**(bucket - 1) * sqrt(2)``; 0 for bucket 0)."""
    if bucket == 0:
        return 0
    return round((1 << (bucket - 1)) * _SQRT2)


_SQRT2 = 2.0 ** 0.5


def bucket_bounds(bucket: int) -> tuple[int, int]:
    """Return the inclusive ``(smallest, largest)`` sizes that fall in ``bucket``."""
    if type(bucket) is not int or bucket < 0:
        raise ValueError(f"bucket must be an int >= 0, got {bucket!r}")
    if bucket == 0:
        return (0, 0)
    return (1 << (bucket - 1), (1 << bucket) - 1)
