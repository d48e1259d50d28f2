"""Built-in operations, each registering real implementations per arm.

SCALAR arms are plain compiled loops (numba ``@njit`` without fastmath or parallel; pure Python
when numba is missing). SIMD arms are numpy or numba ``fastmath``/``parallel`` kernels,
whichever measured faster for that operation (each module's docstring has the figures). GPU
arms run torch on a CUDA device, or numba CUDA kernels where torch has no CUDA (``_gpu.py``).
Inputs: float32/float64 numpy arrays or torch tensors; results come back in the caller's array
type, dtype and device. ``register_builtins(rt)`` adds them all to a runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import activations, add, conv1d, dot, layer_norm, matmul, scale, softmax
from . import sum as sum_op

if TYPE_CHECKING:
    from ..runtime import AdaptiveRuntime

__all__ = ["BUILTIN_OPERATIONS", "register_builtins"]

BUILTIN_OPERATIONS = (dot, add, scale, sum_op, activations, softmax, layer_norm, matmul,
                      conv1d)


def register_builtins(rt: AdaptiveRuntime) -> None:
    """Register every built-in operation on ``rt``."""
    for module in BUILTIN_OPERATIONS:
        module.register(rt)
