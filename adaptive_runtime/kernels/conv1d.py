"""``conv1d(x, w)``: "valid" 1-D cross-correlation, ``y[i] = sum_j x[i + j] * w[j]``.

Like ``torch.nn.functional.conv1d`` with one channel and no padding (and
``numpy.correlate(x, w, "valid")``): a signal of length n and a kernel of length k,
1 <= k <= n, give n - k + 1 outputs.

The batched form, what ``torch.nn.Conv1d`` computes (stride 1, no dilation, one group):
``conv1d(x, w[, bias[, padding]])`` with x ``(batch, channels, n)``, w ``(out, channels, k)``,
bias ``(out,)`` or ``None`` and ``padding`` zeros on each side, giving ``(batch, out,
n + 2 * padding - k + 1)``. SCALAR: a numba loop per output over channels and taps. SIMD (numpy
arrays): the windows of x (a strided view) contracted with w by ``numpy.tensordot`` (BLAS);
torch tensors run ``torch.nn.functional.conv1d`` (see ``torch_arms``).

SCALAR: a numba loop per output over the taps, accumulating in the input dtype. SIMD: numba,
``prange`` over chunks of outputs; within a chunk the taps are the outer loop and the outputs
the inner one (``out[t] += x[t + j] * w[j]``), which vectorises across outputs whatever k is.

SIMD candidates measured on the development machine (2 shared cores, AMD EPYC with AVX-512,
numba 0.68; min of repeats after a warm-up compile, microseconds). "per output" is the plain
numba kernel (``prange`` over outputs, a fastmath reduction over the taps); "chunks" is the one
kept:

=========  =========  ==  ===============  ==========  ======
dtype      n          k   np.correlate     per output  chunks
=========  =========  ==  ===============  ==========  ======
float64    10 000     3               5.5          11     8.2
float64    10 000     31              182         123      29
float64    100 000    3                76          66      29
float64    100 000    31            1 158       1 198     184
float64    1 000 000  3               492         584     247
float64    1 000 000  31           12 000      11 740   2 179
float32    10 000     3               8.7         6.2     3.5
float32    10 000     31              209         116      11
float32    100 000    3                82          56      17
float32    100 000    31            3 258       1 144     138
float32    1 000 000  3               819         563     132
float32    1 000 000  31           33 300      11 970     972
=========  =========  ==  ===============  ==========  ======

It depends on k for numpy: up to k = 11 ``numpy.correlate`` runs an unrolled single-threaded
loop and is competitive; from k = 12 it calls a BLAS dot per output and falls off a cliff
(float64, n = 10^6: 3.1 ms at k = 11, 12.6 ms at k = 12). The chunked numba kernel is the
fastest from n = 10^5 at both k (2-34x) and loses only the smallest call (float64, n = 10^4,
k = 3: thread start-up), so it is the SIMD arm; ``numpy.correlate`` was dropped. The per-output
kernel does not vectorise across outputs and barely beats SCALAR.

On JAX arrays (``jax_arms``, which says how these were measured; float32, microseconds;
"jit": the SIMD arm, "numba": the SCALAR arm, "numpy": the numpy family's SIMD arm):

    operation            shape                   jit  jit sync    numba    numpy
    conv1d               n 100,000, k 31         277       231    2,047      242
    conv1d               (64, 8, 8) x (16, 8, 3) 120      57.0      362      232
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._imported import imported
from ..backend import Backend
from ._arrays import host_arm
from ._checks import conv1d_size
from ._compile import prange, scalar_jit, simd_jit
from ._gpu import gpu_arm, itemsize
from ._jax_numpy import jax_libraries
from .record import CustomOp, HostArm, OperationRecord, Run, TorchModule
from .torch_arms import torch_modules

__all__ = ["CONV1D"]

NAME = "conv1d"
# Outputs per parallel task of the SIMD kernel: its slice of x and of the output stay in L1.
CHUNK = 1024


@scalar_jit
def _conv1d_loop(x: Any, w: Any, out: Any) -> None:
    k = w.shape[0]
    for i in range(out.shape[0]):
        acc = x[i] * w[0]
        for j in range(1, k):
            acc += x[i + j] * w[j]
        out[i] = acc


@simd_jit
def _conv1d_chunks(x: Any, w: Any, out: Any) -> None:
    m = out.shape[0]
    k = w.shape[0]
    for c in prange((m + CHUNK - 1) // CHUNK):
        lo = c * CHUNK
        size = min(CHUNK, m - lo)
        # Zero-based slices: numba then knows the indices are not negative and vectorises.
        o = out[lo:lo + size]
        xs = x[lo:lo + size + k - 1]
        w0 = w[0]
        for t in range(size):
            o[t] = xs[t] * w0
        for j in range(1, k):
            wj = w[j]
            xj = xs[j:j + size]
            for t in range(size):
                o[t] += xj[t] * wj


@scalar_jit
def _conv1d_batched_loop(x: Any, w: Any, out: Any) -> None:
    # x padded already; out holds the bias (or zeros) and receives the sums
    batch, channels, _length = x.shape
    out_channels, _channels, k = w.shape
    for b in range(batch):
        for o in range(out_channels):
            for t in range(out.shape[2]):
                acc = out[b, o, t]
                for c in range(channels):
                    for j in range(k):
                        acc += x[b, c, t + j] * w[o, c, j]
                out[b, o, t] = acc


def _padded(x: np.ndarray, padding: int) -> np.ndarray:
    if not padding:
        return np.ascontiguousarray(x)
    return np.pad(x, ((0, 0), (0, 0), (padding, padding)))


def _batched_out(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    shape = (x.shape[0], w.shape[0], x.shape[2] - w.shape[2] + 1)
    if bias is None:
        return np.zeros(shape, dtype=x.dtype)
    return np.repeat(bias.astype(x.dtype)[None, :, None], shape[2], axis=2).repeat(
        shape[0], axis=0)


def _with(kernel: Any) -> Any:
    """A numpy function running ``kernel`` on contiguous ``x`` and ``w`` (the SCALAR loop
    for the batched form)."""

    def conv1d(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None,
               padding: int = 0) -> np.ndarray:
        if x.ndim == 3:
            xp = _padded(x, int(padding))
            out = _batched_out(xp, w, bias)
            _conv1d_batched_loop(xp, np.ascontiguousarray(w), out)
            return out
        out = np.empty(x.shape[0] - w.shape[0] + 1, dtype=x.dtype)
        kernel(np.ascontiguousarray(x), np.ascontiguousarray(w), out)
        return out

    return conv1d


def _conv1d_windows(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None,
                    padding: int = 0) -> np.ndarray:
    """The batched form on numpy: windows of x contracted with w (one BLAS call)."""
    if x.ndim != 3:
        return _conv1d_simd_1d(x, w)
    xp = _padded(x, int(padding))
    windows = np.lib.stride_tricks.sliding_window_view(xp, w.shape[2], axis=2)  # (b, c, t, k)
    out = np.tensordot(windows, w, axes=([1, 3], [1, 2])).transpose(0, 2, 1)  # (b, o, t)
    if bias is not None:
        out = out + bias[None, :, None]
    return np.ascontiguousarray(out, dtype=x.dtype)


_conv1d_simd_1d = _with(_conv1d_chunks)
conv1d_scalar = host_arm(_with(_conv1d_loop))
conv1d_simd = host_arm(_conv1d_windows)


def _conv1d_gpu(x: Any, w: Any, bias: Any = None, padding: int = 0) -> Any:
    functional = imported("torch").nn.functional
    if x.ndim == 3:
        return functional.conv1d(x, w, bias, padding=int(padding))
    return functional.conv1d(x.view(1, 1, -1), w.view(1, 1, -1)).view(-1)


def _conv1d_result_bytes(x: Any, w: Any, bias: Any = None, padding: int = 0) -> int:
    if x.ndim == 3:
        length = x.shape[2] + 2 * int(padding) - w.shape[2] + 1
        return x.shape[0] * w.shape[0] * length * itemsize(x)
    return (x.shape[0] - w.shape[0] + 1) * itemsize(x)


conv1d_gpu = gpu_arm(NAME, _conv1d_gpu, result_bytes=_conv1d_result_bytes)


def aten_conv1d(x: Any, w: Any, bias: Any = None, padding: int = 0) -> Any:
    functional = torch_modules()[1]
    if x.ndim == 3:
        return functional.conv1d(x, w, bias, padding=int(padding))
    return functional.conv1d(x.view(1, 1, -1), w.view(1, 1, -1)).view(-1)


# the 1-D conv1d in jax.numpy as a sum of shifted slices up to this many taps (unrolled when
# traced): XLA's single-channel convolution is 20-40x slower on the CPU (see ``jax_arms``)
_SHIFTED_TAPS = 64


def jnp_conv1d(x: Any, w: Any, bias: Any = None, padding: int = 0) -> Any:
    _j, _jnp, lax, highest, _t = jax_libraries()
    if x.ndim == 3:  # (batch, channels, n) with (out, channels, k): cross-correlation, as torch
        y = lax.conv_general_dilated(x, w, (1,), [(padding, padding)],
                                     dimension_numbers=("NCH", "OIH", "NCH"), precision=highest)
        return y if bias is None else y + bias[:, None]
    k = w.shape[0]
    if k > _SHIFTED_TAPS:
        return lax.conv_general_dilated(x[None, None], w[None, None], (1,), "VALID",
                                        dimension_numbers=("NCH", "OIH", "NCH"),
                                        precision=highest)[0, 0]
    m = x.shape[0] - k + 1  # y = sum_j x[j:j+m] * w[j]: k shifted slices, fused by XLA
    y = x[:m] * w[0]
    for j in range(1, k):
        y = y + x[j:j + m] * w[j]
    return y


def _jax_call(jit: Any, tracer_in: Any, traced: Any) -> Any:
    plain = jit.plain

    def call(x: Any, w: Any, bias: Any = None, padding: int = 0) -> Any:
        if tracer_in((x, w, bias)):
            return traced(plain, (x, w, bias, padding))
        return (jit.fn or jit.get())(x, w, bias, int(padding))  # (padding: static)

    return call


def _gradients(run: Run) -> Any:
    """conv1d's gradients: conv1d operations through ``run``."""

    def conv1d(inputs: tuple[Any, ...], _out: Any, g: Any) -> tuple[Any, ...]:
        x, w = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 else None
        padding = int(inputs[3]) if len(inputs) > 3 else 0
        functional = torch_modules()[1]
        k = w.shape[-1]
        if x.ndim == 1:  # y[i] = sum_j x[i+j] w[j]
            dx = run(NAME, functional.pad(g, (k - 1, k - 1)), w.flip(0))
            return dx, run(NAME, x, g)
        # dW[o,c,j] = sum_(n,t) g[n,o,t] xp[n,c,t+j]: a conv1d with batch and channels swapped
        xp = functional.pad(x, (padding, padding)) if padding else x
        dw = run(NAME, xp.transpose(0, 1), g.transpose(0, 1)).transpose(0, 1)
        # dxp[n,c,s] = sum_(o,j) g[n,o,s-j] w[o,c,j]: g fully padded against w flipped
        dxp = run(NAME, g, w.flip(-1).transpose(0, 1), None, k - 1)
        dx = dxp[..., padding:padding + x.shape[-1]] if padding else dxp
        dbias = g.sum((0, 2)) if bias is not None else None
        return (dx, dw, dbias, None)[:len(inputs)]

    return conv1d


def _compiled_gradients(run: Run) -> Any:
    """The same under ``torch.compile``: every operator call with all four arguments, its
    transposed inputs contiguous."""

    def conv1d(inputs: tuple[Any, ...], _out: Any, g: Any) -> tuple[Any, ...]:
        x, weight, bias, padding = inputs
        functional = torch_modules()[1]
        k = weight.shape[-1]
        if x.ndim == 1:
            padded = functional.pad(g, (k - 1, k - 1))
            return run(NAME, padded, weight.flip(0), None, 0), run(NAME, x, g, None, 0), None, None
        xp = functional.pad(x, (padding, padding)) if padding else x
        dweight = run(NAME, xp.transpose(0, 1).contiguous(), g.transpose(0, 1).contiguous(),
                      None, 0).transpose(0, 1)
        dxp = run(NAME, g, weight.flip(-1).transpose(0, 1).contiguous(), None, k - 1)
        dx = dxp[..., padding:padding + x.shape[-1]] if padding else dxp
        return dx, dweight, (g.sum((0, 2)) if bias is not None else None), None

    return conv1d


def _fake(x: Any, weight: Any, bias: Any, padding: int) -> Any:
    if x.ndim == 1:
        return x.new_empty((x.shape[0] - weight.shape[0] + 1,))
    return x.new_empty((x.shape[0], weight.shape[0],
                        x.shape[2] + 2 * padding - weight.shape[2] + 1))


def _functional(call: Run) -> Any:
    def conv1d(x: Any, weight: Any, bias: Any = None, padding: int = 0, *,
               runtime: Any = None) -> Any:
        """``torch.nn.functional.conv1d(x, weight, bias, padding=padding)`` with stride 1,
        dilation 1 and one group: x ``(batch, channels, n)``, weight ``(out, channels, k)``."""
        return call(runtime, NAME, (x, weight, bias, int(padding)))

    return conv1d


def _public(runtime: Any) -> Any:
    def conv1d(x: Any, w: Any, bias: Any = None, padding: int = 0) -> Any:
        """Valid-mode cross-correlation of 1-D ``x`` with kernel ``w`` (n - k + 1 outputs); or the
        batched form of ``nn.Conv1d`` (stride 1): x ``(batch, channels, n)``, w ``(out, channels,
        k)``, optional bias ``(out,)`` and zero padding."""
        if bias is None and padding == 0:
            return runtime().run(NAME, x, w)
        return runtime().run(NAME, x, w, bias, padding)

    return conv1d


def _module_padding(m: Any) -> tuple[int]:
    return (0 if isinstance(m.padding, str) else m.padding[0],)  # (str: "valid")


def _why_not_module(m: Any) -> str | None:
    if m.stride != (1,) or m.dilation != (1,) or m.groups != 1:
        return f"stride={m.stride}, dilation={m.dilation}, groups={m.groups}"
    if m.padding_mode != "zeros" or isinstance(m.padding, str):
        if m.padding == "valid":
            return None
        return f"padding={m.padding!r}, padding_mode={m.padding_mode!r}"
    return None


CONV1D = OperationRecord(
    name=NAME, kind="matrix", size=conv1d_size(NAME),
    host=(HostArm(Backend.SCALAR, conv1d_scalar, kernel=(_conv1d_loop, _conv1d_batched_loop)),
          HostArm(Backend.SIMD, conv1d_simd, threads="numba", kernel=_conv1d_chunks)),
    gpu=conv1d_gpu, aten=aten_conv1d, jnp=jnp_conv1d, jax_call=_jax_call, jax_static=(3,),
    gradients=_gradients,
    custom_op=CustomOp("(Tensor x, Tensor weight, Tensor? bias, int padding) -> Tensor",
                       fake=_fake, gradients=_compiled_gradients, functional=_functional,
                       module=TorchModule(
                           "Conv1d", weights=True, settings=_module_padding,
                           why_not=_why_not_module, doc=(
                               "``nn.Conv1d`` (stride 1, dilation 1, one group, zero padding) "
                               "whose forward runs the adaptive :func:`conv1d`."))),
    autocast=True, public=_public)
