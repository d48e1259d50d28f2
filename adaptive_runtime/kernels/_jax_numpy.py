"""jax for the operations' ``jax.numpy`` functions (each record's ``jnp``, which the JAX
families' SIMD and GPU arms jit and traced calls run: see ``jax_arms``): loaded on first use
(:func:`jax_libraries`), with its compilations counted from then on, and :func:`upcast`.

jax is never imported by this module: the first call of one of those functions loads it, and
such a call comes only with a JAX array, which can only exist where the caller imported jax.
"""

from __future__ import annotations

from typing import Any

__all__ = ["jax_compilations", "jax_libraries", "upcast"]

_libs: list[Any] = []  # [jax, jax.numpy, jax.lax, Precision.HIGHEST, jax.core.Tracer]


def _load() -> list[Any]:
    import jax
    import jax.numpy as jnp

    if not _libs:
        _libs[:] = [jax, jnp, jax.lax, jax.lax.Precision.HIGHEST, jax.core.Tracer]
        _listen_for_compilations(jax)
    return _libs


def jax_libraries() -> list[Any]:
    """``[jax, jax.numpy, jax.lax, Precision.HIGHEST, jax.core.Tracer]``, jax loaded on the
    first call (which comes with a JAX array: see the module docstring)."""
    return _libs or _load()


# --------------------------------------------------------------------------- compilations

# Compilations JAX reported in this process (jaxpr traces and XLA compiles), and calls whose
# arms met a tracer (see ``jax_arms``' docstring): a call during which this grows is not learned.
jax_compilations = [0]
_COMPILE_EVENTS = frozenset({"/jax/core/compile/jaxpr_trace_duration",
                             "/jax/core/compile/backend_compile_duration"})


def _listen_for_compilations(jax: Any) -> None:
    """Count JAX's compilation events (``jax.monitoring``, public): a backstop to the jitted
    functions' cache sizes, for compilations they would not show. (Called once, by the first
    load: a second listener after a race would only count twice, which changes nothing.)"""

    def counted(event: str, _duration_s: float, **_kwargs: Any) -> None:
        if event in _COMPILE_EVENTS:
            jax_compilations[0] += 1

    try:
        from jax import monitoring

        monitoring.register_event_duration_secs_listener(counted)
    except Exception:  # pragma: no cover - (an older jax: the cache sizes still count)
        pass


# --------------------------------------------------------------------------- jax.numpy


def upcast(x: Any) -> Any:
    """float16/bfloat16 computed in float32 (as ATen does), rounded once at the end."""
    jnp = jax_libraries()[1]
    return x.astype(jnp.float32) if x.dtype.itemsize < 4 else x
