"""The registry of operations by name, strict about names (:class:`OperationRegistry`), and
what registering operations needs of a runtime (:class:`Registrar`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from .._concurrency.forks import renew_after_fork
from ..backend import Kind
from ..errors import RegistrationError, UnknownOperationError
from .operation import DEVICE_SUFFIX, FAMILY_SEPARATOR, Operation, OperationOwner

__all__ = ["MAX_NAME_LENGTH", "OperationRegistry", "Registrar", "name_too_long",
           "utf8_encodable"]


# Operation names are identifiers: a longer one is a mistake (a tensor's repr passed as a name,
# say) and would be copied into every history key, span and metric label of the operation.
# (How many names there may be is bounded elsewhere: max_history_keys, the metrics' label cap.)
MAX_NAME_LENGTH = 256


def name_too_long(name: str) -> str | None:
    """Why ``name`` cannot name an operation, if it is over ``MAX_NAME_LENGTH`` characters
    (the message shows its start, not all of it); else ``None``."""
    if len(name) <= MAX_NAME_LENGTH:
        return None
    return (f"operation names are at most {MAX_NAME_LENGTH} characters, got one of "
            f"{len(name):,} starting {name[:40]!r}")


def utf8_encodable(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (no lone surrogate): operation names travel in
    OTLP protobuf strings, which must be valid UTF-8, or the whole export fails."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _default_size_of(*args: Any, **_kwargs: Any) -> int:
    """Elements of the first argument: ``.size``, else ``len()``, else 1 (a scalar)."""
    if not args:
        return 0
    first = args[0]
    size = getattr(first, "size", None)
    if isinstance(size, int):
        return size
    if callable(size):  # torch.Tensor.size is a method; numel() is the element count
        numel = getattr(first, "numel", None)
        if callable(numel):
            return int(numel())
    try:
        return len(first)
    except TypeError:
        return 1


class Registrar(Protocol):
    """What registering operations needs of a runtime (``kernels``' ``register(rt)``)."""

    def register(self, name: str, *, size: Callable[..., int] | None = None,
                 kind: Kind | str = Kind.OTHER,
                 on_device: Callable[..., bool] | None = None,
                 family: Callable[..., str] | None = None) -> Operation: ...

    def operation(self, name: str) -> Operation: ...

    def run(self, name: str, *args: Any) -> Any: ...


class OperationRegistry:
    """Operations by name. Thread-safe for registration; lookups are plain dict reads."""

    def __init__(self) -> None:
        self._ops: dict[str, Operation] = {}
        self._lock = threading.Lock()
        renew_after_fork(self, OperationRegistry._renew_lock)

    def _renew_lock(self) -> None:
        self._lock = threading.Lock()  # (a forked child: see adaptive_runtime._concurrency.forks)

    def register(self, name: str, *, size: Callable[..., int] | None = None,
                 kind: Kind | str = Kind.OTHER, owner: OperationOwner | None = None,
                 on_device: Callable[..., bool] | None = None,
                 family: Callable[..., str] | None = None) -> Operation:
        if (not isinstance(name, str) or not name.strip() or name != name.strip()
                or not utf8_encodable(name)):
            raise RegistrationError(
                f"operation name must be a non-empty string (valid UTF-8) without surrounding "
                f"spaces, got {name!r}")
        too_long = name_too_long(name)
        if too_long is not None:
            raise RegistrationError(too_long)
        if size is not None and not callable(size):
            raise RegistrationError(
                f"size= of operation {name!r} must be a callable returning the element count, "
                f"got {size!r}")
        if on_device is not None and not callable(on_device):
            raise RegistrationError(
                f"on_device= of operation {name!r} must be a callable telling whether a call's "
                f"inputs are on the GPU, got {on_device!r}")
        if family is not None and not callable(family):
            raise RegistrationError(
                f"family= of operation {name!r} must be a callable naming a call's input "
                f"family, got {family!r}")
        if FAMILY_SEPARATOR in name:
            raise RegistrationError(
                f"operation name {name!r} must not contain {FAMILY_SEPARATOR!r} (it names an "
                f"operation's calls of one input family, such as {DEVICE_SUFFIX!r}: inputs "
                f"on the GPU)")
        op = Operation(name, size or _default_size_of, Kind.parse(kind), owner, on_device,
                       family)
        with self._lock:
            if name in self._ops:
                raise RegistrationError(f"operation {name!r} is already registered")
            self._ops[name] = op
        return op

    def get(self, name: str) -> Operation:
        try:
            return self._ops[name]
        except KeyError:
            known = ", ".join(sorted(self._ops)) or "none"
            raise UnknownOperationError(
                f"operation {name!r} is not registered (registered: {known})") from None

    def find(self, name: str) -> Operation | None:
        return self._ops.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._ops

    def __iter__(self) -> Iterator[Operation]:
        return iter(list(self._ops.values()))

    def __len__(self) -> int:
        return len(self._ops)

