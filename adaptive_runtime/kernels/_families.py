"""Input families of the built-in operations: which library's arrays a call got.

A call's family decides its key and its implementations (``Operation.family_twin``): numpy
arrays are the default family (``"gelu"``), torch CPU tensors ``"gelu@torch"``, JAX arrays
``"gelu@jax"``. Each family's SIMD arm is its own library's call — the one its users would
write anyway — so an adaptive program is never slower than the plain one by more than the
runtime's overhead and exploration; numba loops compete where they win.

- ``torch`` / ``jax``: float32 or float64; ``torch:float16``, ``torch:bfloat16`` (and the same
  for ``jax``) for mixed precision, whose arms are only those whose library computes in them;
- ``+grad`` (torch): a tensor requires grad and autograd is recording — the arms keep the graph
  (ATen records its own backward; a numba arm runs inside an autograd function whose backward
  is the adaptive ``<op>.backward``), and their timings include that, so they are learned apart
  from calls under ``torch.no_grad()``;
- ``jax:traced``: a JAX tracer (under ``jax.jit``, ``jax.grad``, ``jax.vmap``): the JAX
  implementation records into the trace, untimed (a timing would be the tracing).

CUDA tensors are the family ``device`` (the operations' ``on_device`` hook), where the GPU arm
can run. Neither torch nor JAX is imported here (see ``_arrays``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .._imported import imported
from ..backend import Backend

if TYPE_CHECKING:
    from ..operations import Implementation, Operation

__all__ = ["GRAD", "JAX", "JAX_TRACED", "TORCH", "input_family", "jax_families",
           "numba_arms", "torch_families"]

TORCH = "torch"
JAX = "jax"
GRAD = "+grad"
JAX_TRACED = "jax:traced"

_ndarray = np.ndarray
# family of a torch dtype / JAX dtype name, filled on first sight (None: no arm computes in it)
_TORCH_BASE: dict[Any, str | None] = {}
_JAX_BASE = {"float32": JAX, "float64": JAX, "float16": "jax:float16",
             "bfloat16": "jax:bfloat16"}
_FLOAT_NAMES = {"float32": "", "float64": "", "float16": ":float16", "bfloat16": ":bfloat16"}


def torch_families(*, grad: bool | None = None) -> tuple[str, ...]:
    """Every torch family name (``grad``: only those with / without ``+grad``)."""
    bases = tuple(dict.fromkeys(TORCH + suffix for suffix in _FLOAT_NAMES.values()))
    plain = bases if grad is not True else ()
    graded = tuple(b + GRAD for b in bases) if grad is not False else ()
    return plain + graded


def jax_families() -> tuple[str, ...]:
    """Every JAX family name that is timed (``jax:traced`` is not)."""
    return tuple(dict.fromkeys(_JAX_BASE.values()))


def input_family(*args: Any) -> str:
    """The family of a call's inputs, told by its first array (``size_of`` has checked that
    they are all of one kind and dtype): ``""`` for numpy."""
    for a in args:
        if type(a) is _ndarray:
            return ""
        torch = imported("torch")
        if torch is not None and isinstance(a, torch.Tensor):
            return _torch_family(torch, a, args)
        jax = imported("jax")
        if jax is not None and isinstance(a, jax.Array):
            return _jax_family(jax, a, args)
    return ""


def _jax_family(jax: Any, first: Any, args: tuple[Any, ...]) -> str:
    tracer = jax.core.Tracer
    for a in args:  # (any tracer: jax.grad with respect to a weight traces only the weight)
        if isinstance(a, tracer):
            return JAX_TRACED
    dtype = first.dtype
    family = _JAX_FAMILY.get(dtype)
    if family is None:  # (str() of a JAX dtype costs microseconds: once per dtype)
        family = _JAX_FAMILY[dtype] = _JAX_BASE.get(str(dtype), JAX)
    return family


_JAX_FAMILY: dict[Any, str] = {}


def _torch_family(torch: Any, first: Any, args: tuple[Any, ...]) -> str:
    dtype = first.dtype
    base = _TORCH_BASE.get(dtype)
    if base is None:
        suffix = _FLOAT_NAMES.get(str(dtype)[6:])
        base = _TORCH_BASE[dtype] = TORCH + (suffix if suffix is not None else "")
    if torch.is_grad_enabled():
        for a in args:
            if isinstance(a, torch.Tensor) and a.requires_grad:
                return base + GRAD
    return base


def numba_arms(op: Operation) -> list[tuple[Backend, str, Implementation]]:
    """The numba kernels of ``op``'s default (numpy) family that the torch and JAX families
    run too, on views of their arrays: the SCALAR loop as their SCALAR arm, and the threaded
    loop (``threads="numba"``, where the operation has one) as their SIMD variant ``numba``,
    beside their library's own call — which of the two wins depends on the size and the
    machine (numba's threaded relu was 4-8x numpy's from 10^5 elements; see
    ``benchmarks/variants.py``)."""
    arms: list[tuple[Backend, str, Implementation]] = []
    scalar = op.implementation_for(Backend.SCALAR)
    if scalar is not None:
        arms.append((Backend.SCALAR, "", scalar))
    threaded = next((i for i in op.implementations()
                     if i.backend is Backend.SIMD and i.threads == "numba"), None)
    if threaded is not None:
        arms.append((Backend.SIMD, "numba", threaded))
    return arms
