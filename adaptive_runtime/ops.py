"""Built-in operations on the process default runtime: ``ar.ops.dot(a, b)`` and friends.

Each takes float32/float64 numpy arrays, torch tensors or JAX arrays (of those dtypes or
float16/bfloat16) and returns the same type, dtype and device. On torch tensors that require
grad the result keeps the autograd graph.

One function per built-in operation, made from its record (``kernels.RECORDS``): its name,
its docstring and its parameters (:func:`_from_record`). Backward operations have none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .kernels import RECORDS, OperationRecord
from .runtime import get_runtime

__all__: list[str] = []


def _from_record(record: OperationRecord) -> Callable[..., Any]:
    """``ar.ops.<name>``: the operation run on the default runtime — the record's own
    function where it takes optional arguments, else one of one, two or any number of
    arguments, as its record says (no argument tuple where the count is known)."""
    name = record.name
    if record.public is not None:
        op = record.public(get_runtime)
    elif record.arity == 1:
        def op(x: Any) -> Any:
            return get_runtime().run(name, x)
    elif record.arity == 2:
        def op(a: Any, b: Any) -> Any:  # type: ignore[misc]
            return get_runtime().run(name, a, b)
    else:
        def op(*args: Any) -> Any:  # type: ignore[misc]
            return get_runtime().run(name, *args)
    op.__name__ = op.__qualname__ = name
    op.__module__ = __name__
    if record.doc:
        op.__doc__ = record.doc
    return op


for _record in RECORDS:
    globals()[_record.name] = _from_record(_record)
    __all__.append(_record.name)
__all__.sort()
