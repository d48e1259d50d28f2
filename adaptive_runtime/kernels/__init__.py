"""Built-in operations, each registering real implementations per arm.

SCALAR arms are plain compiled loops (numba ``@njit`` without fastmath or parallel; pure Python
when numba is missing). SIMD arms are numpy or numba ``fastmath``/``parallel`` kernels,
whichever measured faster for that operation (each module's docstring has the figures). GPU
arms run torch on a CUDA device, or numba CUDA kernels where torch has no CUDA (``_gpu.py``).
Inputs: float32/float64 numpy arrays, torch tensors and JAX arrays (float16/bfloat16 too);
results come back in the caller's array type, dtype and device. Each input family (torch
tensors, JAX arrays: ``_families``) is learned apart, its SIMD arm being its own library's call
(``torch_arms``). ``register_builtins(rt)`` adds them all to a runtime.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from . import (
    activations,
    add,
    backward,
    conv1d,
    dot,
    jax_arms,
    layer_norm,
    linear,
    matmul,
    scale,
    softmax,
    torch_arms,
)
from . import sum as sum_op
from ._thread_counts import add_thread_variants

if TYPE_CHECKING:
    from ..operations import Registrar

__all__ = ["BUILTIN_OPERATIONS", "register_builtins"]

BUILTIN_OPERATIONS = (dot, add, scale, sum_op, activations, softmax, layer_norm, matmul,
                      linear, conv1d, backward)


def register_builtins(rt: Registrar, fallback: Callable[[], Registrar]) -> None:
    """Register every built-in operation on ``rt``, with the arms of every input family and
    each threaded implementation's variants at fewer threads (``_thread_counts``).
    ``fallback()`` is the runtime a torch backward pass runs on once ``rt`` is gone (the
    runtime hands in its process default: nothing here reaches up for it)."""
    for module in BUILTIN_OPERATIONS:
        module.register(rt)
    torch_arms.register(rt, fallback)
    jax_arms.register(rt)
    for module in BUILTIN_OPERATIONS:
        for name in getattr(module, "NAMES", None) or (module.NAME,):
            add_thread_variants(rt.operation(name))
