"""Exceptions raised by adaptive_runtime. Every one names what was wrong and what is accepted."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "AdaptiveRuntimeError",
    "AllBackendsFailedError",
    "BackendUnavailableError",
    "ConfigError",
    "RegistrationError",
    "ResultMismatchError",
    "UnknownOperationError",
]


class AdaptiveRuntimeError(Exception):
    """Base class of every error this package raises on purpose."""


class ConfigError(AdaptiveRuntimeError, ValueError):
    """A configuration value (argument or environment variable) is out of its accepted range.

    ``field`` names the :class:`RuntimeConfig` field at fault, when there is one.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class MissingExtraError(AdaptiveRuntimeError, ModuleNotFoundError):
    """A feature needs an optional dependency that is not installed; the message names the
    extra that brings it (``pip install 'adaptive_runtime[otlp]'``)."""


class RegistrationError(AdaptiveRuntimeError, ValueError):
    """An operation or implementation was registered wrongly (duplicate, unknown arm, none)."""


class UnknownOperationError(AdaptiveRuntimeError, KeyError):
    """``run()`` was asked for an operation that is not registered."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""


class BackendUnavailableError(AdaptiveRuntimeError, RuntimeError):
    """A forced arm cannot run here (its library or device is missing, or it is disabled)."""


class AllBackendsFailedError(AdaptiveRuntimeError, RuntimeError):
    """Every candidate arm of one call raised.

    ``errors`` maps each tried backend to the exception it raised, in the order they were tried;
    the last one is also chained as ``__cause__``.
    """

    def __init__(self, operation: str, errors: Mapping[object, BaseException]) -> None:
        self.operation = operation
        self.errors = dict(errors)
        detail = "; ".join(f"{getattr(b, 'value', b)}: {type(e).__name__}: {e}"
                           for b, e in self.errors.items())
        super().__init__(f"every backend of operation {operation!r} failed ({detail})")


class ResultMismatchError(AdaptiveRuntimeError, RuntimeError):
    """An arm returned a wrong result: a shape or dtype other than another arm's for the same
    inputs, or (validation mode) values another arm does not agree with — NaN where it has
    none, or outside the dtype's tolerance. Treated as that arm's failure: the call falls
    back and the arm is quarantined. ``operation``, ``backend`` (the arm at fault),
    ``reference`` (the arm it was compared with) and ``detail`` say what differed.
    """

    def __init__(self, operation: str, backend: object, reference: object, detail: str) -> None:
        self.operation = operation
        self.backend = backend
        self.reference = reference
        self.detail = detail
        super().__init__(f"operation {operation!r}: the {getattr(backend, 'value', backend)} "
                         f"arm returned a wrong result ({detail}; compared with the "
                         f"{getattr(reference, 'value', reference)} arm)")

    def __reduce__(self) -> tuple[object, ...]:  # (args holds the message only)
        return (type(self), (self.operation, self.backend, self.reference, self.detail))
