"""``torch.autocast`` for the adaptive ops: their inputs cast as plain torch would cast them.

Under autocast, torch casts an op's floating inputs at dispatch, by a per-op, per-device
policy: ``linear``, ``matmul`` and ``conv1d`` run in the autocast dtype (float16 or
bfloat16), some ops run in float32, others in whatever their inputs are, promoted. The
runtime's operations take inputs of one dtype and learn per dtype (the families
``torch:bfloat16``, ``torch:float16``, ...), so an adapted op under autocast must see its
inputs already cast: a ``Linear`` after another ``Linear`` gets a bfloat16 activation and a
float32 weight, which no arm takes as they are.

:func:`cast_like_autocast` casts them to the dtype plain torch's own call returns for inputs
of those dtypes under the same autocast state: found once per (operation, device type,
autocast dtype, input dtypes) by running the plain ATen call on the call's own inputs (under
``torch.no_grad()``), then looked up. The policy is torch's, read from torch, whatever its
version's op lists say; every arm then runs, is compared and is learned at that dtype — under
autocast the keys of ``linear`` are ``linear@torch:bfloat16`` (``+grad``), apart from the
float32 calls outside it. An op whose autocast dtype is float32 is the float32 computation,
and shares its keys with float32 calls outside autocast. The casts are differentiable
(``Tensor.to``): gradients reach float32 parameters in float32, as with plain torch.

Imported by :mod:`adaptive_runtime.torch` (it imports torch).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..kernels import all_records

__all__ = ["autocast_on", "cast_like_autocast"]

# operation -> its plain ATen call, taking the runtime operation's arguments (from the records
# of the operations that autocast applies to)
_PLAIN: dict[str, Callable[..., Any]] = {r.name: r.aten for r in all_records()
                                         if r.autocast and r.aten is not None}

_is_enabled = torch.is_autocast_enabled
_Tensor = torch.Tensor
# (operation, device type, autocast dtype, the inputs' dtypes) -> the dtype to run at
_run_dtype: dict[tuple[Any, ...], torch.dtype] = {}


def autocast_on(x: torch.Tensor) -> bool:
    """Whether ``torch.autocast`` is enabled for ``x``'s device type (CPU or CUDA)."""
    return _is_enabled("cuda" if x.is_cuda else "cpu")


def cast_like_autocast(operation: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``args`` with every floating tensor cast to the dtype plain torch computes
    ``operation`` in under the autocast state now in force (call it only when
    :func:`autocast_on` says it is on); unchanged when nothing needs casting."""
    device_type = "cuda" if args[0].is_cuda else "cpu"
    dtypes = tuple(a.dtype if isinstance(a, _Tensor) else None for a in args)
    key = (operation, device_type, torch.get_autocast_dtype(device_type), dtypes)
    dtype = _run_dtype.get(key)
    if dtype is None:
        dtype = _run_dtype[key] = _probe(operation, args)
    if all(d is None or d is dtype or not d.is_floating_point for d in dtypes):
        return args
    return tuple(a.to(dtype) if isinstance(a, _Tensor) and a.dtype is not dtype
                 and a.is_floating_point() else a for a in args)


def _probe(operation: str, args: tuple[Any, ...]) -> torch.dtype:
    """The dtype plain torch's call of ``operation`` returns for ``args`` under the autocast
    state now in force (run once, on the call's own inputs: any shapes the op takes)."""
    plain = _PLAIN.get(operation)
    if plain is None:
        raise ValueError(f"{operation}: no autocast policy known (one of {sorted(_PLAIN)})")
    with torch.no_grad():
        return plain(*args).dtype
