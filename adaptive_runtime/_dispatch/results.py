"""Is an arm's result wrong? Cheap signatures for every timed call, values for validation.

Two checks, both off the fast path (see ``_dispatch``):

- *signature*: a result's ``(shape, dtype)`` against what another arm returned for inputs of
  the same shapes and dtypes (and the same values of the plain arguments that can shape a
  result: a length, an axis, a mode name). A few attribute reads; it catches an arm that
  returns a wrong shape or dtype (a broadcasting bug, a silently downcast kernel).
- *values* (validation mode, opt-in): a result against another arm's result for the very same
  call — NaN where the reference has none, else ``np.allclose`` within a tolerance set by the
  less precise dtype of the two and scaled to the reference's magnitude (arms sum in different
  orders: a float32 dot over a million elements differs in its fourth digit between a plain
  loop and a pairwise sum, and nobody's result is wrong).

Nothing here imports torch or JAX: a tensor is recognised by its methods (``detach``).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, NamedTuple

import numpy as np

__all__ = ["Mismatch", "compare_values", "describe_signature", "input_signature",
           "result_signature", "signatures_agree"]

# Relative tolerance by dtype name (the less precise of the two results decides); atol is
# this times the largest finite magnitude in the reference, so near-zero elements of a result
# whose scale is large are not held to a relative bound they cannot meet.
_RTOL = {"float16": 2e-2, "bfloat16": 5e-2, "float32": 1e-3, "complex64": 1e-3,
         "float64": 1e-7, "complex128": 1e-7}
_DEFAULT_RTOL = 1e-7  # float types not listed (longdouble): as float64
_ndarray = np.ndarray
_np_integers = (np.integer, np.bool_)
# Plain arguments by value: a length, a count, an axis or a mode name can shape a result
# (``ramp(5)`` and ``ramp(6)`` share a size bucket and answer shapes (5,) and (6,)). A float or
# complex one (a scale, a learning rate) by type alone: by value, a learning rate that changes
# every step would use up a key's signatures and leave its calls unchecked.
_BY_VALUE = frozenset({int, bool, str, type(None)})
_BY_TYPE = frozenset({float, complex})
_SEQUENCES = (tuple, list)
_SIGNED_BY_CONTENT = (*_SEQUENCES, *_np_integers)
# A tuple or list argument (a shape, a list of arrays) up to this long is signed element by
# element; a longer one by its length (signing every element of a long list on every timed
# call would cost more than the call).
_MAX_SIGNED_ITEMS = 8


def input_signature(args: tuple[Any, ...]) -> Hashable:
    """Shapes and dtypes of a call's arguments, and the values of its plain integer, boolean
    and string arguments: calls with equal signatures must get results of equal signatures
    from every arm."""
    # (on every timed call: numpy arrays, the common case, by their dtype's number — a
    # dtype object hashes slowly — in one flat tuple, about half the cost of pairs; a pair
    # added with ``+=``, fewer steps than two appends)
    sig: list[Any] = []
    for a in args:
        kind = type(a)
        if kind is _ndarray:
            sig += a.shape, a.dtype.num
        elif kind in _BY_VALUE:  # (a failed getattr raises inside: several times the cost)
            sig += kind, a
        elif kind in _BY_TYPE:
            sig.append(kind)
        elif isinstance(a, _SIGNED_BY_CONTENT):
            sig += _content_signature(a)
        else:  # a tensor, the usual case
            sig += getattr(a, "shape", None), getattr(a, "dtype", None)
    return tuple(sig)


def _content_signature(a: Any) -> tuple[Any, Any]:
    """The signature (a pair) of a tuple or list argument — its items' signatures, or its
    length when long — or of a numpy integer or bool: its value."""
    if isinstance(a, _SEQUENCES):
        if len(a) > _MAX_SIGNED_ITEMS:
            return type(a), len(a)
        return type(a), input_signature(tuple(a))
    return type(a), int(a)


def result_signature(result: Any) -> tuple[Any, Any]:
    """``(shape, dtype)`` of a result; ``(None, None)`` for one that has neither (a Python
    float, a tuple of a test double) or whose attributes raise."""
    try:
        return (getattr(result, "shape", None), getattr(result, "dtype", None))
    except Exception:  # (a user's object whose ``shape`` property raises: not checked)
        return (None, None)


def signatures_agree(a: tuple[Any, Any], b: tuple[Any, Any]) -> bool:
    """Whether two result signatures agree. A missing shape counts as a scalar's ``()`` and a
    missing dtype matches any (a plain Python float against a numpy float64 is no fault).
    Shapes that cannot be compared (a user's odd objects) agree: no fault can be shown."""
    (shape_a, dtype_a), (shape_b, dtype_b) = a, b
    try:
        if shape_a != shape_b and tuple(shape_a or ()) != tuple(shape_b or ()):
            return False
    except Exception:
        return True
    # (dtypes of one library are singletons; ``str`` compares any two without raising)
    return dtype_a is None or dtype_b is None or dtype_a is dtype_b or str(dtype_a) == str(
        dtype_b)


def describe_signature(sig: tuple[Any, Any]) -> str:
    """``"shape (3, 4) float32"`` and the like, for error messages."""
    shape, dtype = sig
    shape_text = "no shape" if shape is None else f"shape {tuple(shape)!r:.80}"
    return shape_text if dtype is None else f"{shape_text} {_dtype_name(dtype)}"


class Mismatch(NamedTuple):
    """What differed between a result and the reference's, and which side looks wrong:
    ``"result"``, ``"reference"`` (it has NaN where the result has none) or ``""`` (the
    values differ: two arms alone cannot tell which is right)."""

    detail: str
    suspect: str


def compare_values(result: Any, reference: Any) -> Mismatch | None:
    """``None`` when ``result`` agrees with ``reference``; else what differs. Results that are
    not numeric arrays or numbers (objects, strings) are compared by signature only; results
    that cannot be compared at all agree (no fault can be shown)."""
    try:
        return _compare(result, reference)
    except Exception:
        return None


def _compare(result: Any, reference: Any) -> Mismatch | None:
    a, b = _numeric(result), _numeric(reference)
    if a is None or b is None:
        if signatures_agree(result_signature(result), result_signature(reference)):
            return None
        return Mismatch(f"{describe_signature(result_signature(result))} where the reference "
                        f"has {describe_signature(result_signature(reference))}", "result")
    if a.shape != b.shape:
        return Mismatch(f"shape {a.shape} where the reference has {b.shape}", "result")
    if a.dtype.kind in "biu" and b.dtype.kind in "biu":
        wrong = int(np.count_nonzero(a != b))
        return None if not wrong else Mismatch(f"{wrong} of {a.size} values differ", "")
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    only_a = int(np.count_nonzero(nan_a & ~nan_b))
    if only_a:
        return Mismatch(f"{only_a} NaN of {a.size} values where the reference has none",
                        "result")
    only_b = int(np.count_nonzero(nan_b & ~nan_a))
    if only_b:
        return Mismatch(f"the reference has {only_b} NaN of {b.size} values where this result "
                        f"has none", "reference")
    rtol = max(_RTOL.get(_dtype_name(_dtype_of(result)), _DEFAULT_RTOL),
               _RTOL.get(_dtype_name(_dtype_of(reference)), _DEFAULT_RTOL))
    finite = np.abs(b[np.isfinite(b)])
    atol = rtol * float(finite.max()) if finite.size else 0.0
    if np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
        return None
    worst = float(np.max(np.abs(np.where(nan_a, 0.0, a - b)))) if a.size else 0.0
    return Mismatch(f"values differ by up to {worst:.3g} (tolerance {rtol:g} relative, "
                    f"{atol:.3g} absolute)", "")


def _dtype_of(x: Any) -> Any:
    dtype = getattr(x, "dtype", None)
    return dtype if dtype is not None else np.asarray(x).dtype  # (a Python number)


def _dtype_name(dtype: Any) -> str:
    name = str(dtype)
    return name[6:] if name.startswith("torch.") else name


def _numeric(x: Any) -> np.ndarray | None:
    """``x`` as a numpy array of numbers (a copy where it lives on a device), else ``None``."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch tensor
        x = x.detach().cpu()
        if _dtype_name(x.dtype) == "bfloat16":  # (numpy has no bfloat16)
            x = x.float()
        x = x.numpy()
    elif hasattr(x, "copy_to_host"):  # a numba device array
        x = x.copy_to_host()
    try:
        array = np.asarray(x)
    except Exception:  # (an object numpy cannot take in: compared by signature)
        return None
    return array if array.dtype.kind in "biufc" else None
