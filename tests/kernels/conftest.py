"""Fixtures for the built-in kernel tests: one runtime per forced CPU arm and built-in
variant."""

from __future__ import annotations

import pytest

import adaptive_runtime as ar

# The CPU arms, and every variant a built-in operation registers (checked on the operations
# that have it).
CPU_CHOICES = (ar.Backend.SCALAR, ar.Backend.SIMD, ar.Variant("simd", "numpy"),
               ar.Variant("simd", "numba"), ar.Variant("simd", "numba@1"),
               ar.Variant("simd", "blas@1"))


@pytest.fixture(scope="session")
def choice_runtimes() -> dict[ar.Backend | ar.Variant, ar.AdaptiveRuntime]:
    """A runtime forced onto each CPU arm and built-in variant (builtin operations
    registered)."""
    return {choice: ar.AdaptiveRuntime(ar.RuntimeConfig(force_backend=choice))
            for choice in CPU_CHOICES}


@pytest.fixture(scope="session")
def arm_runtimes(choice_runtimes) -> dict[ar.Backend, ar.AdaptiveRuntime]:
    """A runtime forced onto each CPU arm (its primary implementation)."""
    return {c: rt for c, rt in choice_runtimes.items() if not c.variant}  # type: ignore[misc]
