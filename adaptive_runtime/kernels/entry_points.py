"""Third-party operations: records published under the entry-point group
``adaptive_runtime.operations``.

A distribution declares, in its packaging metadata (``pyproject.toml``)::

    [project.entry-points."adaptive_runtime.operations"]
    cube = "my_package.ops:CUBE"

where ``CUBE`` is an :class:`~adaptive_runtime.kernels.record.OperationRecord` (or a tuple of
them), declared as a built-in operation is (``kernels/<op>.py``). Every runtime made with its
built-in operations registers these too, through the same adapters (numpy family, GPU arm,
torch and JAX families, ``torch.compile`` custom operators, autocast), so the operation is
``rt.run("cube", x)`` like any other. The group is read once per process, on the first runtime
made (:func:`third_party_records`; ``cache_clear()`` reads it again): nothing is imported at
``import adaptive_runtime``.

Strict, as the registry is: an entry point that fails to load or is not a record is a
:class:`~adaptive_runtime.errors.RegistrationError` naming the entry point; a record whose name
is taken (by a built-in operation or another entry point) is the registry's own
``RegistrationError`` ("already registered") when a runtime registers it.
"""

from __future__ import annotations

import functools
import importlib.metadata

from ..errors import RegistrationError
from .record import OperationRecord

__all__ = ["GROUP", "third_party_records"]

GROUP = "adaptive_runtime.operations"


@functools.cache
def third_party_records() -> tuple[OperationRecord, ...]:
    """The records of every entry point in :data:`GROUP`, in the order found."""
    found: list[OperationRecord] = []
    for entry in importlib.metadata.entry_points(group=GROUP):
        where = f"entry point {entry.name!r} ({entry.value}) of group {GROUP!r}"
        try:
            loaded = entry.load()
        except Exception as exc:
            raise RegistrationError(f"{where} failed to load: {exc!r}") from exc
        records = loaded if isinstance(loaded, tuple | list) else (loaded,)
        for record in records:
            if not isinstance(record, OperationRecord):
                raise RegistrationError(
                    f"{where} must name an OperationRecord (or a tuple of them), got "
                    f"{type(record).__name__}")
        found.extend(records)
    return tuple(found)
