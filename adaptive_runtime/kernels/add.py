"""``add``: elementwise sum of two equal-shape arrays.

SCALAR: a numba loop over the flattened arrays. SIMD: ``numpy.add``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..backend import Backend
from ._checks import same_shape_size
from ._compile import scalar_jit

if TYPE_CHECKING:
    from ..runtime import AdaptiveRuntime

NAME = "add"


@scalar_jit
def _add_flat(a: Any, b: Any, out: Any) -> None:
    for i in range(a.shape[0]):
        out[i] = a[i] + b[i]


def add_scalar(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.empty(a.shape, dtype=np.result_type(a, b))
    _add_flat(a.reshape(-1), b.reshape(-1), out.reshape(-1))
    return out


def add_simd(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.add(a, b)


def register(rt: AdaptiveRuntime) -> None:
    op = rt.register(NAME, size=lambda a, b: same_shape_size(NAME, a, b), kind="elementwise")
    op.add_implementation(Backend.SCALAR, add_scalar,
                          compile_count=lambda: len(getattr(_add_flat, "signatures", ())))
    op.add_implementation(Backend.SIMD, add_simd)
