"""The built-in operations written in ``jax.numpy`` (forward and backward, :data:`PLAIN`): what
the JAX families' SIMD and GPU arms jit and traced calls run (see ``jax_arms``), and jax itself,
loaded on first use with its compilations counted from then on.

jax is never imported by this module: the first call of one of these functions loads it, and
such a call comes only with a JAX array, which can only exist where the caller imported jax.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import backward
from .layer_norm import EPS

__all__ = ["PLAIN", "jax_modules", "upcast"]

# the 1-D conv1d as a sum of shifted slices up to this many taps (unrolled when traced)
_SHIFTED_TAPS = 64

_libs: list[Any] = []  # [jax, jax.numpy, jax.lax, Precision.HIGHEST, jax.core.Tracer]


def _load() -> list[Any]:
    import jax
    import jax.numpy as jnp

    if not _libs:
        _libs[:] = [jax, jnp, jax.lax, jax.lax.Precision.HIGHEST, jax.core.Tracer]
        _listen_for_compilations(jax)
    return _libs


def _jax() -> list[Any]:
    return _libs or _load()


def jax_modules() -> list[Any]:
    """``[jax, jax.numpy, jax.lax, Precision.HIGHEST, jax.core.Tracer]``, jax loaded on the
    first call (which comes with a JAX array: see the module docstring)."""
    return _libs or _load()


# --------------------------------------------------------------------------- compilations

# Compilations JAX reported in this process (jaxpr traces and XLA compiles), and calls whose
# arms met a tracer (see ``jax_arms``' docstring): a call during which this grows is not learned.
_compilations = [0]
_COMPILE_EVENTS = frozenset({"/jax/core/compile/jaxpr_trace_duration",
                             "/jax/core/compile/backend_compile_duration"})


def _listen_for_compilations(jax: Any) -> None:
    """Count JAX's compilation events (``jax.monitoring``, public): a backstop to the jitted
    functions' cache sizes, for compilations they would not show. (Called once, by the first
    load: a second listener after a race would only count twice, which changes nothing.)"""

    def counted(event: str, _duration_s: float, **_kwargs: Any) -> None:
        if event in _COMPILE_EVENTS:
            _compilations[0] += 1

    try:
        from jax import monitoring

        monitoring.register_event_duration_secs_listener(counted)
    except Exception:  # pragma: no cover - (an older jax: the cache sizes still count)
        pass


# --------------------------------------------------------------------------- jax.numpy


def upcast(x: Any) -> Any:
    """float16/bfloat16 computed in float32 (as ATen does), rounded once at the end."""
    jnp = _jax()[1]
    return x.astype(jnp.float32) if x.dtype.itemsize < 4 else x


def jnp_layer_norm(x: Any, weight: Any = None, bias: Any = None, eps: float = EPS) -> Any:
    jnp = _jax()[1]
    xf = upcast(x)
    centred = xf - xf.mean(axis=-1, keepdims=True)
    y = centred / jnp.sqrt((centred * centred).mean(axis=-1, keepdims=True) + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y.astype(x.dtype)


def jnp_linear(x: Any, weight: Any, bias: Any = None) -> Any:
    _j, jnp, _lax, highest, _t = _jax()
    y = jnp.matmul(x, weight.T, precision=highest)
    return y if bias is None else y + bias


def jnp_conv1d(x: Any, w: Any, bias: Any = None, padding: int = 0) -> Any:
    _j, _jnp, lax, highest, _t = _jax()
    if x.ndim == 3:  # (batch, channels, n) with (out, channels, k): cross-correlation, as torch
        y = lax.conv_general_dilated(x, w, (1,), [(padding, padding)],
                                     dimension_numbers=("NCH", "OIH", "NCH"), precision=highest)
        return y if bias is None else y + bias[:, None]
    k = w.shape[0]
    if k > _SHIFTED_TAPS:
        return lax.conv_general_dilated(x[None, None], w[None, None], (1,), "VALID",
                                        dimension_numbers=("NCH", "OIH", "NCH"),
                                        precision=highest)[0, 0]
    # y = sum_j x[j:j+m] * w[j]: k shifted slices, fused by XLA into one pass (its convolution
    # of one channel is 20-40x slower on the CPU: see ``jax_arms``' docstring)
    m = x.shape[0] - k + 1
    y = x[:m] * w[0]
    for j in range(1, k):
        y = y + x[j:j + m] * w[j]
    return y


def jnp_layer_norm_backward(g: Any, x: Any, weight: Any = None, eps: float = EPS) -> Any:
    jnp = _jax()[1]
    gf, xf = upcast(g), upcast(x)
    centred = xf - xf.mean(axis=-1, keepdims=True)
    inv = 1.0 / jnp.sqrt((centred * centred).mean(axis=-1, keepdims=True) + eps)
    xhat = centred * inv
    gw = gf if weight is None else gf * upcast(weight)
    dx = (inv * (gw - gw.mean(axis=-1, keepdims=True)
                 - xhat * (gw * xhat).mean(axis=-1, keepdims=True))).astype(x.dtype)
    if weight is None:
        return dx
    lead = tuple(range(x.ndim - 1))
    return dx, (gf * xhat).sum(axis=lead).astype(x.dtype), gf.sum(axis=lead).astype(x.dtype)


# Each operation in jax.numpy (forward and backward), by name: the SIMD and GPU arms jit it,
# traced calls run it as it is.
PLAIN: dict[str, Callable[..., Any]] = {
    "layer_norm": jnp_layer_norm, "linear": jnp_linear, "conv1d": jnp_conv1d,
    backward.LAYER_NORM: jnp_layer_norm_backward,
}
