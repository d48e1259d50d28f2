"""Built-in operations, each declared in one module as one record per operation.

SCALAR arms are plain compiled loops (numba ``@njit`` without fastmath or parallel; pure Python
when numba is missing). SIMD arms are numpy or numba ``fastmath``/``parallel`` kernels,
whichever measured faster for that operation (each module's docstring has the figures). GPU
arms run torch on a CUDA device, or numba CUDA kernels where torch has no CUDA (``_gpu.py``).
Inputs: float32/float64 numpy arrays, torch tensors and JAX arrays (float16/bfloat16 too);
results come back in the caller's array type, dtype and device. Each input family (torch
tensors, JAX arrays: ``_families``) is learned apart, its SIMD arm being its own library's call.

Each operation is a ``record.OperationRecord`` in ``kernels/<op>.py`` (its backward operation
beside it), listed once in :data:`RECORDS`; third-party operations publish theirs through the
entry-point group ``adaptive_runtime.operations`` (``entry_points``). The adapters read the
records at registration: ``record.register_host`` (the numpy family and the GPU arm),
``torch_arms`` and ``jax_arms`` (their families), and above the runtime ``ops``,
``torch._compile`` and ``torch._autocast``. ``register_builtins(rt)`` adds them all to a runtime.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..history.depends import KnownOperations
from . import jax_arms, torch_arms
from ._thread_counts import add_thread_variants
from .add import ADD
from .conv1d import CONV1D
from .dot import DOT
from .entry_points import third_party_records
from .gelu import GELU
from .layer_norm import LAYER_NORM
from .linear import LINEAR
from .matmul import MATMUL
from .record import OperationRecord, register_host, with_backward
from .relu import RELU
from .scale import SCALE
from .softmax import SOFTMAX
from .sum import SUM

if TYPE_CHECKING:
    from ..operations import Registrar

__all__ = ["RECORDS", "OperationRecord", "all_records", "known_operations",
           "register_builtins"]

# the built-in operations, one module each (their backward operations within)
RECORDS: tuple[OperationRecord, ...] = (DOT, ADD, SCALE, SUM, RELU, GELU, SOFTMAX, LAYER_NORM,
                                        MATMUL, LINEAR, CONV1D)


def all_records() -> tuple[OperationRecord, ...]:
    """The built-in records, then those of the entry-point group ``adaptive_runtime.operations``
    (read once per process: ``entry_points``)."""
    return RECORDS + third_party_records()


def known_operations() -> KnownOperations:
    """The built-in operations (backward ones too) and those of them that run torch on numpy
    inputs, for ``history.fingerprint_differences`` (what a history file's keys depend on)."""
    names = frozenset(r.name for r in with_backward(RECORDS))
    through_torch = frozenset(r.name for r in with_backward(RECORDS)
                              if any(arm.needs == "torch" for arm in r.host))
    return KnownOperations(names, through_torch)


def register_builtins(rt: Registrar, fallback: Callable[[], Registrar]) -> None:
    """Register every built-in operation, and every third-party one (:func:`all_records`), on
    ``rt``, with the arms of every input family and each threaded implementation's variants
    at fewer threads (``_thread_counts``). ``fallback()`` is the runtime a torch backward pass
    runs on once ``rt`` is gone (the runtime hands in its process default: nothing here
    reaches up for it)."""
    records = all_records()
    for record in with_backward(records):
        register_host(rt, record)
    torch_arms.register(rt, records, fallback)
    jax_arms.register(rt, records)
    for record in with_backward(records):
        add_thread_variants(rt.operation(record.name))
