"""The three arms a call can run on, and the named implementations ("variants") an arm may hold.

A call runs one *choice*: an arm's primary implementation — identified by the arm itself, a
:class:`Backend` — or another implementation registered on the arm under a name, a
:class:`Variant`. Both answer ``.arm`` (the device class) and ``.variant`` (the name, ``""``
for the primary one), so code that learns per choice never asks which it holds.

Also :class:`Kind`, the shape of work an operation is (a cold-start hint), and
:func:`infer_kind` for names used without registration.
"""

from __future__ import annotations

import enum
import re
import threading
from typing import Any, ClassVar, TypeVar

from .errors import RegistrationError

__all__ = ["Backend", "Choice", "Kind", "Variant", "choice_of", "choice_order", "infer_kind",
           "parse_choice"]


class Backend(str, enum.Enum):
    """An execution arm. A ``str`` enum, so ``Backend.GPU == "gpu"``.

    ``GPU``: a device kernel (torch CUDA, JAX GPU, numba CUDA). ``SIMD``: vectorised CPU code
    (numpy, numba ``fastmath``/``parallel``). ``SCALAR``: a plain compiled (or Python) loop.
    """

    GPU = "gpu"
    SIMD = "simd"
    SCALAR = "scalar"

    def __str__(self) -> str:
        return self.value

    @property
    def arm(self) -> Backend:
        """The arm itself (what a :class:`Variant` answers with its arm)."""
        return self

    @property
    def variant(self) -> str:
        """``""``: an arm stands for its primary implementation."""
        return ""

    @classmethod
    def parse(cls, value: object, *, what: str = "backend") -> Backend:
        """Return the backend named by ``value`` (a ``Backend`` or its case-insensitive name).

        Raises ``ValueError`` naming ``what`` and the accepted names otherwise.
        """
        return _member(cls, value, what, ValueError)


# A variant's name: what spans, metric labels and history files carry ("@" names a thread
# count: "numba@1", see kernels/_thread_counts.py).
VARIANT_NAME = re.compile(r"[A-Za-z0-9_.+@-]{1,64}")
# How a choice is written where one string names it: "simd" or "simd:numpy".
VARIANT_SEPARATOR = ":"


class Variant:
    """An implementation of ``arm`` other than its primary one, registered under ``variant``
    (``@op.implementation("simd", name="numpy")``).

    Interned: ``Variant(arm, name)`` is the same object for the same pair, so choices compare
    by identity (the policy's ``is``) however they were made — parsed from a history file,
    unpickled or built by hand. ``str()`` is ``"<arm>:<name>"``.
    """

    __slots__ = ("arm", "variant")
    _interned: ClassVar[dict[tuple[Backend, str], Variant]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()
    arm: Backend
    variant: str

    def __new__(cls, arm: Backend | str, variant: str) -> Variant:
        arm = Backend.parse(arm, what="the arm of a variant")
        found = cls._interned.get((arm, variant)) if isinstance(variant, str) else None
        if found is not None:
            return found
        if not isinstance(variant, str) or not VARIANT_NAME.fullmatch(variant):
            raise ValueError(f"a variant's name is 1-64 letters, digits and _ . + - @, "
                             f"got {variant!r}")
        with cls._lock:
            found = cls._interned.get((arm, variant))
            if found is None:
                found = object.__new__(cls)
                object.__setattr__(found, "arm", arm)
                object.__setattr__(found, "variant", variant)
                cls._interned[(arm, variant)] = found
        return found

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("a Variant is immutable")

    def __reduce__(self) -> tuple[Any, ...]:
        return (Variant, (self.arm, self.variant))  # (unpickled: the interned one)

    def __copy__(self) -> Variant:
        return self

    def __deepcopy__(self, _memo: object) -> Variant:
        return self

    @property
    def value(self) -> str:
        """``"<arm>:<name>"``, as :func:`parse_choice` reads it."""
        return f"{self.arm.value}{VARIANT_SEPARATOR}{self.variant}"

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return f"Variant({self.arm.value!r}, {self.variant!r})"


# What a call runs: an arm's primary implementation (the arm) or a named variant of it.
Choice = Backend | Variant


def choice_of(arm: Backend, variant: str) -> Choice:
    """The choice for ``arm`` and ``variant`` (``""``: the arm's primary implementation)."""
    return Variant(arm, variant) if variant else arm


_ARM_ORDER = {b: i for i, b in enumerate(Backend)}


def choice_order(choice: Choice) -> tuple[int, str]:
    """A sort key: arms in ``Backend`` order, each arm's primary implementation first and its
    variants after it by name."""
    return _ARM_ORDER[choice.arm], choice.variant


def parse_choice(value: object, *, what: str = "backend") -> Choice:
    """The choice named by ``value``: a :class:`Backend` or :class:`Variant`, or a string —
    an arm (``"simd"``) or an arm and a variant (``"simd:numpy"``). ``ValueError`` naming
    ``what`` otherwise."""
    if isinstance(value, Variant):
        return value
    if isinstance(value, str) and not isinstance(value, Backend) and VARIANT_SEPARATOR in value:
        arm, _, name = value.strip().partition(VARIANT_SEPARATOR)
        try:
            return Variant(Backend.parse(arm, what=what), name)
        except ValueError as exc:
            raise ValueError(f"{what}: {exc} (a variant is written <arm>:<name>)") from None
    return Backend.parse(value, what=what)


# ---------------------------------------------------------------------------- kinds of work


class Kind(str, enum.Enum):
    """What shape of work an operation is: a hint for cold-start choices only."""

    VECTOR = "vector"
    MATRIX = "matrix"
    REDUCTION = "reduction"
    ELEMENTWISE = "elementwise"
    OTHER = "other"

    @property
    def matrix_like(self) -> bool:
        """Work that grows faster than its input (GEMM, convolution): worth a GPU early."""
        return self is Kind.MATRIX

    @classmethod
    def parse(cls, value: object) -> Kind:
        """The kind named by ``value`` (a ``Kind`` or its case-insensitive name);
        :class:`RegistrationError` naming the accepted kinds otherwise."""
        return _member(cls, value, "kind", RegistrationError)


_MATRIX_NAMES = re.compile(r"mat|mm|gemm|conv|bmm|einsum|attention")
_VECTOR_NAMES = re.compile(r"dot|add|scale|axpy|mul|sub|norm|sum|relu|gelu|max|exp")


def infer_kind(operation: str) -> Kind:
    """Kind guessed from an operation name, for names used without registration.

    ``matrix``/``matmul``/``conv``/``gemm`` → matrix-like; ``dot``/``add``/``scale``/… → vector;
    anything else → other.
    """
    lowered = operation.lower()
    if _MATRIX_NAMES.search(lowered):
        return Kind.MATRIX
    if _VECTOR_NAMES.search(lowered):
        return Kind.VECTOR
    return Kind.OTHER


_E = TypeVar("_E", bound=enum.Enum)


def _member(cls: type[_E], value: object, what: str, error: type[Exception]) -> _E:
    """The member of the ``str`` enum ``cls`` that ``value`` is or names (any case); else
    ``error`` naming ``what`` and the accepted names."""
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        try:
            return cls(value.strip().lower())
        except ValueError:
            pass
    accepted = ", ".join(str(m.value) for m in cls)
    raise error(f"{what} must be one of {accepted}; got {value!r}")

