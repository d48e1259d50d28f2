"""Fixtures for the built-in kernel tests: one runtime per forced CPU arm."""

from __future__ import annotations

import pytest

import adaptive_runtime as ar


@pytest.fixture(scope="session")
def arm_runtimes() -> dict[ar.Backend, ar.AdaptiveRuntime]:
    """A runtime forced onto each CPU arm (builtin operations registered)."""
    return {arm: ar.AdaptiveRuntime(ar.RuntimeConfig(force_backend=arm))
            for arm in (ar.Backend.SCALAR, ar.Backend.SIMD)}
