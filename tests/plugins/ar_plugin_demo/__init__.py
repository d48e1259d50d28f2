"""A third-party operation for the tests: ``cube(x)`` (``x ** 3`` elementwise), published
through the entry-point group ``adaptive_runtime.operations`` — as a distribution would in its
``pyproject.toml``::

    [project.entry-points."adaptive_runtime.operations"]
    cube = "ar_plugin_demo:CUBE"

``tests/unit/test_operation_entry_points.py`` installs it for a test: this directory on
``sys.path`` and a ``dist-info`` with that ``entry_points.txt`` in a temporary one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from adaptive_runtime import Backend
from adaptive_runtime.kernels.record import HostArm, OperationRecord, host_arm


def _size(x: Any) -> int:
    return int(x.numel()) if hasattr(x, "numel") else int(x.size)


def _cube_loop(x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    flat, result = x.reshape(-1), out.reshape(-1)
    for i in range(flat.shape[0]):
        result[i] = flat[i] * flat[i] * flat[i]
    return out


def _cube_numpy(x: np.ndarray) -> np.ndarray:
    return x * x * x


def _aten_cube(x: Any) -> Any:
    return x * x * x


def _gradients(_run: Any) -> Any:
    def cube(inputs: tuple[Any, ...], _out: Any, g: Any) -> tuple[Any, ...]:
        x = inputs[0]
        return (3 * x * x * g,)

    return cube


CUBE = OperationRecord(
    name="cube", kind="elementwise", size=_size,
    host=(HostArm(Backend.SCALAR, host_arm(_cube_loop)),
          HostArm(Backend.SIMD, host_arm(_cube_numpy))),
    aten=_aten_cube, gradients=_gradients, arity=1, doc="``x ** 3`` elementwise.")
