"""The built-in operations' variants: each one is checked by the kernel tests (every CPU
choice of every operation is forced there), and the runtime chooses among them."""

from __future__ import annotations

import numpy as np
from conftest import CPU_CHOICES

import adaptive_runtime as ar


def _cpu_choices(op: ar.Operation) -> set[ar.Backend | ar.Variant]:
    families = [op, *(op.family_twin(f) for f in op.families)]
    return {c for twin in families for c in twin.choices if c.arm is not ar.Backend.GPU}


def test_every_cpu_variant_of_a_builtin_operation_is_forced_by_the_kernel_tests() -> None:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig())
    seen = set()
    for name in rt.operations:
        seen |= _cpu_choices(rt.operation(name))
    assert seen <= set(CPU_CHOICES), seen - set(CPU_CHOICES)
    assert {c for c in seen if c.variant}, "no built-in operation has a variant"


def test_relu_has_numpys_own_call_beside_the_threaded_loop_and_both_agree() -> None:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig())
    op = rt.operation("relu")
    numpy_relu = ar.Variant("simd", "numpy")
    assert {ar.Backend.SIMD, numpy_relu} <= set(op.choices)
    x = np.random.default_rng(0).standard_normal(1000)
    x[3] = np.nan
    threaded = op.implementation_for(ar.Backend.SIMD).fn(x)
    plain = op.implementation_for(numpy_relu).fn(x)
    np.testing.assert_array_equal(plain, threaded)
    assert plain.dtype == x.dtype and np.isnan(plain[3])
