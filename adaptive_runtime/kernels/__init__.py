"""Built-in operations, each registering real implementations per arm.

SCALAR arms are plain compiled loops (numba ``@njit`` without fastmath or parallel; pure Python
when numba is missing); SIMD arms are vectorised (numpy). ``register_builtins(rt)`` adds them
all to a runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import add, dot

if TYPE_CHECKING:
    from ..runtime import AdaptiveRuntime

__all__ = ["BUILTIN_OPERATIONS", "register_builtins"]

BUILTIN_OPERATIONS = (dot, add)


def register_builtins(rt: AdaptiveRuntime) -> None:
    """Register every built-in operation on ``rt``."""
    for module in BUILTIN_OPERATIONS:
        module.register(rt)
