"""Built-in operations, each registering real implementations per arm.

SCALAR arms are plain compiled loops (numba ``@njit`` without fastmath or parallel; pure Python
when numba is missing). SIMD arms are numpy or numba ``fastmath``/``parallel`` kernels,
whichever measured faster for that operation (each module's docstring has the figures). GPU
arms run torch on a CUDA device, or numba CUDA kernels where torch has no CUDA (``_gpu.py``).
Inputs: float32/float64 numpy arrays, torch tensors and JAX arrays (float16/bfloat16 too);
results come back in the caller's array type, dtype and device. Each input family (torch
tensors, JAX arrays: ``_families``) is learned apart, its SIMD arm being its own library's call
(``torch_arms``). ``register_builtins(rt)`` adds them all to a runtime.

An operation declared as a record (``record.OperationRecord``: everything about it in its own
module) is one entry of :data:`RECORDS`; the adapters (``record.register_host``, ``torch_arms``,
``jax_arms``, and above the runtime ``ops``, ``torch``) read the records. The operations not
yet declared so register through their module's ``register`` and the adapters' tables.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import (
    backward,
    conv1d,
    jax_arms,
    layer_norm,
    linear,
    torch_arms,
)
from ._thread_counts import add_thread_variants
from .add import ADD
from .dot import DOT
from .gelu import GELU
from .matmul import MATMUL
from .record import OperationRecord, register_host, with_backward
from .relu import RELU
from .scale import SCALE
from .softmax import SOFTMAX
from .sum import SUM

if TYPE_CHECKING:
    from ..operations import Registrar

__all__ = ["BUILTIN_OPERATIONS", "RECORDS", "OperationRecord", "register_builtins"]

# the built-in operations declared as records, one module each (their backward within)
RECORDS: tuple[OperationRecord, ...] = (DOT, ADD, SCALE, SUM, RELU, GELU, SOFTMAX, MATMUL)
BUILTIN_OPERATIONS = (layer_norm,
                      linear, conv1d, backward)
# each adds one library's arms (its families) to the operations registered above
LIBRARY_ARMS = (torch_arms, jax_arms)


def register_builtins(rt: Registrar) -> None:
    """Register every built-in operation on ``rt``, with the arms of every input family and
    each threaded implementation's variants at fewer threads (``_thread_counts``)."""
    for module in BUILTIN_OPERATIONS:
        module.register(rt)
    for record in with_backward(RECORDS):
        register_host(rt, record)
    for module in LIBRARY_ARMS:
        module.register(rt, RECORDS)
    names = [name for module in BUILTIN_OPERATIONS
             for name in getattr(module, "NAMES", None) or (module.NAME,)]
    for name in names + [record.name for record in with_backward(RECORDS)]:
        add_thread_variants(rt.operation(name))
