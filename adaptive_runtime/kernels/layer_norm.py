"""``layer_norm(x[, weight, bias[, eps]])``: normalise over the last axis,
``(x - mean) / sqrt(var + eps) * weight + bias``.

The variance is the biased one (divided by the row length), as
``torch.nn.functional.layer_norm(x, x.shape[-1:], weight, bias, eps)``; ``weight`` and
``bias`` (each optional: ``None``) are 1-D of the last axis' length, eps defaults to ``1e-5``.
Any array of at least one dimension: it is seen as rows of its last axis, and the result has
its shape and dtype.

SCALAR: a numba loop per row, two passes (mean, then variance of the centred row), sums in
float64. SIMD: the same in numba with ``prange`` over rows and fastmath (vectorised row sums).

SIMD candidates measured on the development machine (2 shared cores, AMD EPYC with AVX-512,
numba 0.68; min of repeats after a warm-up compile, best of three runs, microseconds):

=========  ============  ======  =====
dtype      shape         numpy   numba
=========  ============  ======  =====
float64    (1000, 64)       143     13
float64    (10000, 256)  12 800    513
float32    (1000, 64)       103     20
float32    (10000, 256)   3 812    506
=========  ============  ======  =====

numpy is ``mean``, ``x - mean``, ``mean(c * c)``, ``c / sqrt(var + eps)``: five passes over the
data and three temporaries, where the numba kernel reads each row three times from cache and
writes once, on both cores. numba wins at every size, so it is the SIMD arm. (Measured with
both cores free: while another process keeps one busy, the parallel kernel's OpenMP threads
wait for it and a (1000, 64) call took about 4 ms instead of 20 µs; the runtime learns that
like any other latency.)

Its gradient, ``layer_norm.backward(g, x[, weight[, eps]])``: the gradient of x, and with a
weight the gradients of weight and bias too, as a tuple ``(dx, dweight, dbias)`` — an adaptive
operation of its own (SCALAR: a numba loop per row; SIMD: numpy). Both are declared here, one
record each (see ``record``). Torch tensors run ATen's ``layer_norm`` and
``native_layer_norm_backward``; JAX arrays the same written in ``jax.numpy``, jitted.

On JAX arrays (``jax_arms``, which says how these were measured; float32, microseconds;
"jit": the SIMD arm, "numba": the SCALAR arm, "numpy": the numpy family's SIMD arm):

    operation            shape                   jit  jit sync    numba    numpy
    layer_norm           (64, 16)               18.7      15.2     19.7      6.0
    layer_norm           (1000, 64)              230      94.9      191      164
    layer_norm           (10000, 256)          1,135     1,058    5,849    5,607
    layer_norm.backward  (1000, 64), weight      438       262      405      517
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._imported import imported
from ..backend import Backend
from ._arrays import host_arm
from ._checks import layer_norm_size, same_shape_size
from ._compile import prange, scalar_jit, simd_jit
from ._gpu import gpu_arm, nbytes
from ._jax_numpy import jax_libraries, upcast
from .record import CustomOp, HostArm, OperationRecord, Run, TorchModule
from .torch_arms import torch_modules

__all__ = ["EPS", "LAYER_NORM", "LAYER_NORM_BACKWARD", "NO_ARRAY", "row_moments"]

NAME = "layer_norm"
BACKWARD = NAME + ".backward"
EPS = 1e-5


@scalar_jit
def row_moments(x: Any, r: int, eps: float) -> tuple[float, float]:
    """Row ``r``'s mean and ``1 / sqrt(biased variance + eps)``: two passes, sums in float64
    (the forward and the backward kernels share it)."""
    n = x.shape[1]
    total = 0.0
    for j in range(n):
        total += x[r, j]
    mean = total / n
    squares = 0.0
    for j in range(n):
        d = x[r, j] - mean
        squares += d * d
    return mean, 1.0 / np.sqrt(squares / n + eps)


def _rows(x: Any, weight: Any, bias: Any, eps: float, out: Any) -> None:
    rows, n = x.shape
    scaled = weight.shape[0] > 0  # (empty: no weight / no bias)
    shifted = bias.shape[0] > 0
    for r in prange(rows):  # (a plain range in the SCALAR build)
        mean, inv = row_moments(x, r, eps)
        for j in range(n):
            v = (x[r, j] - mean) * inv
            if scaled:
                v = v * weight[j]
            if shifted:
                v = v + bias[j]
            out[r, j] = v


# One loop, two builds: SCALAR (sequential, exact order) and SIMD (fastmath, rows in parallel).
_layer_norm_rows = scalar_jit(_rows)
_layer_norm_rows_parallel = simd_jit(_rows)


def _on_rows(kernel: Any) -> Any:
    """A numpy function running ``kernel`` on ``x`` as contiguous rows of its last axis."""

    def layer_norm(x: np.ndarray, weight: np.ndarray | None = None,
                   bias: np.ndarray | None = None, eps: float = EPS) -> np.ndarray:
        rows = np.ascontiguousarray(x).reshape(-1, x.shape[-1])
        out = np.empty(rows.shape, dtype=x.dtype)
        none = NO_ARRAY[x.dtype.char]
        kernel(rows, none if weight is None else np.ascontiguousarray(weight),
               none if bias is None else np.ascontiguousarray(bias), float(eps), out)
        return out.reshape(x.shape)

    return layer_norm


# "no weight" / "no bias", as the kernels read it: an empty array of the input's dtype (one
# type signature for the affine and plain cases)
NO_ARRAY = {np.dtype(t).char: np.empty(0, dtype=t) for t in (np.float32, np.float64)}


layer_norm_scalar = host_arm(_on_rows(_layer_norm_rows))
layer_norm_simd = host_arm(_on_rows(_layer_norm_rows_parallel))


def _layer_norm_gpu(x: Any, weight: Any = None, bias: Any = None, eps: float = EPS) -> Any:
    functional = imported("torch").nn.functional
    return functional.layer_norm(x, x.shape[-1:], weight, bias, eps)


layer_norm_gpu = gpu_arm(NAME, _layer_norm_gpu, result_bytes=lambda x, *_: nbytes(x),
                         workspace=1.0)


def aten_layer_norm(x: Any, weight: Any = None, bias: Any = None, eps: float = EPS) -> Any:
    return torch_modules()[1].layer_norm(x, x.shape[-1:], weight, bias, eps)


def jnp_layer_norm(x: Any, weight: Any = None, bias: Any = None, eps: float = EPS) -> Any:
    jnp = jax_libraries()[1]
    xf = upcast(x)
    centred = xf - xf.mean(axis=-1, keepdims=True)
    y = centred / jnp.sqrt((centred * centred).mean(axis=-1, keepdims=True) + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y.astype(x.dtype)


def _jax_call(jit: Any, tracer_in: Any, traced: Any) -> Any:
    plain = jit.plain

    def call(x: Any, weight: Any = None, bias: Any = None, eps: float = EPS) -> Any:
        if (weight is not None or bias is not None) and tracer_in((x, weight, bias)):
            return traced(plain, (x, weight, bias, eps))
        return (jit.fn or jit.get())(x, weight, bias, float(eps))

    return call


def _gradients(run: Run) -> Any:
    """x's gradient by the adaptive ``layer_norm.backward`` (with weight's and bias' where
    the call had a weight); bias' alone is the rows' sum of ``g``."""

    def layer_norm(inputs: tuple[Any, ...], _out: Any, g: Any) -> tuple[Any, ...]:
        x = inputs[0]
        weight = inputs[1] if len(inputs) > 1 else None
        bias = inputs[2] if len(inputs) > 2 else None
        eps = inputs[3] if len(inputs) > 3 else EPS
        if weight is None:
            dx, dweight = run(BACKWARD, g, x, None, eps), None
            dbias = g.reshape(-1, x.shape[-1]).sum(0) if bias is not None else None
        else:
            dx, dweight, dbias = run(BACKWARD, g, x, weight, eps)
            if bias is None:
                dbias = None
        return (dx, dweight, dbias, None)[:len(inputs)]

    return layer_norm


def _compiled_gradients(run: Run) -> Any:
    """The same under ``torch.compile``, where the backward operator returns three tensors
    (empty ones without a weight)."""

    def layer_norm(inputs: tuple[Any, ...], _out: Any, g: Any) -> tuple[Any, ...]:
        x, weight, bias, eps = inputs
        dx, dweight, dbias = run(BACKWARD, g, x, weight, eps)
        if weight is None:
            dweight = None
            dbias = g.reshape(-1, x.shape[-1]).sum(0) if bias is not None else None
        elif bias is None:
            dbias = None
        return dx, dweight, dbias, None

    return layer_norm


def _functional(call: Run) -> Any:
    def layer_norm(x: Any, weight: Any = None, bias: Any = None, eps: float = EPS, *,
                   runtime: Any = None) -> Any:
        """Layer normalisation over the last axis, as ``torch.nn.functional.layer_norm(x,
        x.shape[-1:], weight, bias, eps)``."""
        return call(runtime, NAME, (x, weight, bias, float(eps)))

    return layer_norm


def _public(runtime: Any) -> Any:
    def layer_norm(x: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> Any:
        """Normalise over the last axis (biased variance), then ``* weight + bias`` where given
        (1-D, of the last axis' length), on the default runtime."""
        if weight is None and bias is None and eps == 1e-5:
            return runtime().run(NAME, x)
        return runtime().run(NAME, x, weight, bias, eps)

    return layer_norm


# --------------------------------------------------------------------------- backward


@scalar_jit
def _backward_rows(g: Any, x: Any, weight: Any, eps: float, dx: Any, dweight: Any,
                     dbias: Any) -> None:
    rows, n = x.shape
    scaled = weight.shape[0] > 0
    for r in range(rows):
        mean, inv = row_moments(x, r, eps)
        # dx = inv * (gw - mean(gw) - xhat * mean(gw * xhat)), gw = g * weight
        sum_gw = 0.0
        sum_gw_xhat = 0.0
        for j in range(n):
            xhat = (x[r, j] - mean) * inv
            gw = g[r, j] * weight[j] if scaled else g[r, j]
            sum_gw += gw
            sum_gw_xhat += gw * xhat
            if scaled:
                dweight[j] += g[r, j] * xhat
                dbias[j] += g[r, j]
        mean_gw = sum_gw / n
        mean_gw_xhat = sum_gw_xhat / n
        for j in range(n):
            xhat = (x[r, j] - mean) * inv
            gw = g[r, j] * weight[j] if scaled else g[r, j]
            dx[r, j] = inv * (gw - mean_gw - xhat * mean_gw_xhat)


def _backward_scalar(g: np.ndarray, x: np.ndarray, weight: np.ndarray | None = None,
                       eps: float = EPS) -> Any:
    rows = np.ascontiguousarray(x).reshape(-1, x.shape[-1])
    n = rows.shape[1]
    dx = np.empty(rows.shape, dtype=x.dtype)
    # weight and bias gradients summed over rows in float64, rounded once
    dweight = np.zeros(n if weight is not None else 0)
    dbias = np.zeros(n if weight is not None else 0)
    _backward_rows(np.ascontiguousarray(g).reshape(rows.shape), rows,
                     NO_ARRAY[x.dtype.char] if weight is None else np.ascontiguousarray(weight),
                     float(eps), dx, dweight, dbias)
    if weight is None:
        return dx.reshape(x.shape)
    return dx.reshape(x.shape), dweight.astype(x.dtype), dbias.astype(x.dtype)


def _backward_simd(g: np.ndarray, x: np.ndarray, weight: np.ndarray | None = None,
                     eps: float = EPS) -> Any:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    inv = 1.0 / np.sqrt((centred * centred).mean(axis=-1, keepdims=True) + eps)
    xhat = centred * inv
    gw = g if weight is None else g * weight
    dx = inv * (gw - gw.mean(axis=-1, keepdims=True)
                - xhat * (gw * xhat).mean(axis=-1, keepdims=True))
    dx = dx.astype(x.dtype, copy=False)
    if weight is None:
        return dx
    lead = tuple(range(x.ndim - 1))
    return dx, (g * xhat).sum(axis=lead).astype(x.dtype), g.sum(axis=lead).astype(x.dtype)


def _backward_size(g: Any, x: Any, weight: Any = None, eps: Any = EPS) -> int:
    size = _pair_size(g, x)
    if weight is not None and tuple(weight.shape) != (x.shape[-1],):
        raise ValueError(f"{BACKWARD}: weight must be 1-D of the last axis' length "
                         f"{x.shape[-1]}, got shape {tuple(weight.shape)}")
    return size


_pair_size = same_shape_size(BACKWARD)


def aten_layer_norm_backward(g: Any, x: Any, weight: Any = None, eps: float = EPS) -> Any:
    aten = torch_modules()[0].ops.aten
    shape = [x.shape[-1]]
    _out, mean, rstd = aten.native_layer_norm(x, shape, weight, None, eps)
    if weight is None:
        return aten.native_layer_norm_backward(g, x, shape, mean, rstd, None, None,
                                               [True, False, False])[0]
    # (ATen's bias gradient wants a bias tensor: it is the rows' sum of g, done here)
    dx, dweight, _ = aten.native_layer_norm_backward(g, x, shape, mean, rstd, weight, None,
                                                     [True, True, False])
    return dx, dweight, g.reshape(-1, shape[0]).sum(0)


def jnp_layer_norm_backward(g: Any, x: Any, weight: Any = None, eps: float = EPS) -> Any:
    jnp = jax_libraries()[1]
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


def _backward_jax_call(jit: Any, tracer_in: Any, traced: Any) -> Any:
    plain = jit.plain

    def call(g: Any, x: Any, weight: Any = None, eps: float = EPS) -> Any:
        if tracer_in((g, x, weight)):
            return traced(plain, (g, x, weight, eps))
        return (jit.fn or jit.get())(g, x, weight, float(eps))

    return call


def _backward_op(run: Run, g: Any, x: Any, weight: Any, eps: float) -> Any:
    """The ``torch.compile`` operator's body: always three tensors (empty ones without a
    weight: an operator's outputs are fixed)."""
    if weight is None:
        empty = x.new_empty(0)
        return run(BACKWARD, g, x, None, eps), empty, empty
    dx, dweight, dbias = run(BACKWARD, g, x, weight, eps)
    return dx, dweight, dbias


def _backward_fake(g: Any, x: Any, weight: Any, eps: float) -> Any:
    n = x.shape[-1] if weight is not None else 0
    return imported("torch").empty_like(x), x.new_empty((n,)), x.new_empty((n,))


LAYER_NORM_BACKWARD = OperationRecord(
    name=BACKWARD, kind="elementwise", size=_backward_size, is_backward=True,
    host=(HostArm(Backend.SCALAR, host_arm(_backward_scalar, template=1),
                  kernel=_backward_rows),
          HostArm(Backend.SIMD, host_arm(_backward_simd, template=1))),
    aten=aten_layer_norm_backward, jnp=jnp_layer_norm_backward, jax_call=_backward_jax_call,
    jax_template=1,
    custom_op=CustomOp("(Tensor g, Tensor x, Tensor? weight, float eps) "
                       "-> (Tensor, Tensor, Tensor)", fake=_backward_fake, call=_backward_op))

def _why_not_module(m: Any) -> str | None:
    if len(m.normalized_shape) != 1:
        return f"normalized_shape={tuple(m.normalized_shape)} (only the last axis)"
    return None


LAYER_NORM = OperationRecord(
    name=NAME, kind="vector", size=layer_norm_size(NAME),
    host=(HostArm(Backend.SCALAR, layer_norm_scalar, kernel=_layer_norm_rows),
          HostArm(Backend.SIMD, layer_norm_simd, threads="numba",
                  kernel=_layer_norm_rows_parallel)),
    gpu=layer_norm_gpu, aten=aten_layer_norm, jnp=jnp_layer_norm, jax_call=_jax_call,
    gradients=_gradients, backward=LAYER_NORM_BACKWARD,
    custom_op=CustomOp("(Tensor x, Tensor? weight, Tensor? bias, float eps) -> Tensor",
                       gradients=_compiled_gradients, functional=_functional,
                       module=TorchModule(
                           "LayerNorm", weights=True, settings=lambda m: (float(m.eps),),
                           why_not=_why_not_module, doc=(
                               "``nn.LayerNorm`` over the last axis whose forward runs the "
                               "adaptive :func:`layer_norm`."))),
    autocast=True, public=_public)
