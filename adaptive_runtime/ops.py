"""Built-in operations on the process default runtime: ``ar.ops.dot(a, b)`` and friends.

Each takes float32/float64 numpy arrays, torch tensors or JAX arrays (of those dtypes or
float16/bfloat16) and returns the same type, dtype and device. On torch tensors that require
grad the result keeps the autograd graph.

The operations declared as records (``kernels.RECORDS``) are made from their records
(:func:`_from_record`); the others are written out below.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .kernels import RECORDS, OperationRecord
from .runtime import get_runtime

__all__ = ["conv1d", "layer_norm", "linear"]


def _from_record(record: OperationRecord) -> Callable[..., Any]:
    """``ar.ops.<name>``: the operation run on the default runtime (one, two or any number
    of arguments, as its record says: no argument tuple where the count is known)."""
    name = record.name
    if record.public is not None:
        return record.public(get_runtime)
    if record.arity == 1:
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
    op.__doc__ = record.doc
    return op


for _record in RECORDS:
    globals()[_record.name] = _from_record(_record)
    __all__.append(_record.name)
__all__.sort()


def layer_norm(x: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> Any:
    """Normalise over the last axis (biased variance), then ``* weight + bias`` where given
    (1-D, of the last axis' length), on the default runtime."""
    if weight is None and bias is None and eps == 1e-5:
        return get_runtime().run("layer_norm", x)
    return get_runtime().run("layer_norm", x, weight, bias, eps)


def linear(x: Any, weight: Any, bias: Any = None) -> Any:
    """``x @ weight.T + bias`` (x ``(..., in)``, weight ``(out, in)``), as ``nn.Linear``."""
    return get_runtime().run("linear", x, weight, bias)


def conv1d(x: Any, w: Any, bias: Any = None, padding: int = 0) -> Any:
    """Valid-mode cross-correlation of 1-D ``x`` with kernel ``w`` (n - k + 1 outputs); or the
    batched form of ``nn.Conv1d`` (stride 1): x ``(batch, channels, n)``, w ``(out, channels,
    k)``, optional bias ``(out,)`` and zero padding."""
    if bias is None and padding == 0:
        return get_runtime().run("conv1d", x, w)
    return get_runtime().run("conv1d", x, w, bias, padding)
