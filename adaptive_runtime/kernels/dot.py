"""``dot``: inner product of two equal-length 1-D arrays.

SCALAR: a sequential numba loop (exact left-to-right summation order). SIMD: ``numpy.dot``
(BLAS, vectorised and unrolled).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..backend import Backend
from ._checks import vector_pair_size
from ._compile import scalar_jit

if TYPE_CHECKING:
    from ..runtime import AdaptiveRuntime

NAME = "dot"


@scalar_jit
def dot_scalar(a: Any, b: Any) -> Any:
    acc = a[0] * b[0]
    for i in range(1, a.shape[0]):
        acc += a[i] * b[i]
    return acc


def dot_simd(a: np.ndarray, b: np.ndarray) -> Any:
    return np.dot(a, b)


def register(rt: AdaptiveRuntime) -> None:
    op = rt.register(NAME, size=lambda a, b: vector_pair_size(NAME, a, b), kind="vector")
    op.add_implementation(Backend.SCALAR, dot_scalar)
    op.add_implementation(Backend.SIMD, dot_simd)
