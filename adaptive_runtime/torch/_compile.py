"""The ``torch.ops.adaptive_runtime.*`` custom operators that ``torch.compile`` sees.

Opaque custom operators for torch.compile: the graph keeps a call into the runtime (which
chooses at run time), with a fake implementation for shapes and a registered backward made of
the same custom operators. Eager mode never goes through them (a custom operator costs ~40 µs
a call in eager mode here, the runtime's own dispatch ~3 µs).

Registered with torch when imported; :mod:`adaptive_runtime.torch` imports this module (it
imports torch), and its functional ops and adapted modules call these operators while
``torch.compile`` traces. The operations declared as records (``kernels.RECORDS``) get theirs
from their record (:func:`_register`: schema, fake, the record's gradients run through the
custom operators); the others are written out below.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..kernels import RECORDS, OperationRecord
from ..kernels.record import with_backward
from ..runtime import get_runtime

_Opt = torch.Tensor | None


@torch.library.custom_op("adaptive_runtime::linear", mutates_args=())
def _op_linear(x: torch.Tensor, weight: torch.Tensor, bias: _Opt) -> torch.Tensor:
    return get_runtime().run("linear", x, weight, bias)


@torch.library.custom_op("adaptive_runtime::layer_norm", mutates_args=())
def _op_layer_norm(x: torch.Tensor, weight: _Opt, bias: _Opt, eps: float) -> torch.Tensor:
    return get_runtime().run("layer_norm", x, weight, bias, eps)


@torch.library.custom_op("adaptive_runtime::conv1d", mutates_args=())
def _op_conv1d(x: torch.Tensor, weight: torch.Tensor, bias: _Opt,
               padding: int) -> torch.Tensor:
    return get_runtime().run("conv1d", x, weight, bias, padding)


@torch.library.custom_op("adaptive_runtime::layer_norm_backward", mutates_args=())
def _op_layer_norm_backward(g: torch.Tensor, x: torch.Tensor, weight: _Opt,
                            eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rt = get_runtime()
    if weight is None:
        empty = x.new_empty(0)
        return rt.run("layer_norm.backward", g, x, None, eps), empty, empty
    dx, dweight, dbias = rt.run("layer_norm.backward", g, x, weight, eps)
    return dx, dweight, dbias


def _same_as_first(x: torch.Tensor, *_rest: Any) -> torch.Tensor:
    return torch.empty_like(x)


_op_layer_norm.register_fake(_same_as_first)


@_op_linear.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, bias: _Opt) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


@_op_conv1d.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, bias: _Opt, padding: int) -> torch.Tensor:
    if x.ndim == 1:
        return x.new_empty((x.shape[0] - weight.shape[0] + 1,))
    return x.new_empty((x.shape[0], weight.shape[0],
                        x.shape[2] + 2 * padding - weight.shape[2] + 1))


@_op_layer_norm_backward.register_fake
def _(g: torch.Tensor, x: torch.Tensor, weight: _Opt,
      eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    n = x.shape[-1] if weight is not None else 0
    return torch.empty_like(x), x.new_empty((n,)), x.new_empty((n,))


def _save_inputs(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(*(t for t in inputs if isinstance(t, torch.Tensor)))
    ctx.layout = tuple(isinstance(t, torch.Tensor) for t in inputs)
    ctx.constants = tuple(t for t in inputs if not isinstance(t, torch.Tensor))


def _inputs(ctx: Any) -> tuple[Any, ...]:
    saved, constants = iter(ctx.saved_tensors), iter(ctx.constants)
    return tuple(next(saved) if is_tensor else next(constants) for is_tensor in ctx.layout)


def _linear_backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
    x, weight, bias = _inputs(ctx)
    ops = torch.ops.adaptive_runtime
    rows = x.reshape(-1, x.shape[-1])
    g_rows = g.reshape(-1, weight.shape[0])
    dx = ops.matmul(g_rows, weight).reshape(x.shape)
    dweight = ops.matmul(g_rows.t().contiguous(), rows)
    return dx, dweight, (g_rows.sum(0) if bias is not None else None)


def _save_output(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    del inputs  # (torch passes it by name)
    ctx.save_for_backward(output)


def _layer_norm_backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
    x, weight, bias, eps = _inputs(ctx)
    dx, dweight, dbias = torch.ops.adaptive_runtime.layer_norm_backward(g, x, weight, eps)
    if weight is None:
        dweight = None
        dbias = g.reshape(-1, x.shape[-1]).sum(0) if bias is not None else None
    elif bias is None:
        dbias = None
    return dx, dweight, dbias, None


def _conv1d_backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
    x, weight, bias, padding = _inputs(ctx)
    ops = torch.ops.adaptive_runtime
    k = weight.shape[-1]
    if x.ndim == 1:
        padded = torch.nn.functional.pad(g, (k - 1, k - 1))
        return ops.conv1d(padded, weight.flip(0), None, 0), ops.conv1d(x, g, None, 0), None, None
    xp = torch.nn.functional.pad(x, (padding, padding)) if padding else x
    dweight = ops.conv1d(xp.transpose(0, 1).contiguous(), g.transpose(0, 1).contiguous(), None,
                         0).transpose(0, 1)
    dxp = ops.conv1d(g, weight.flip(-1).transpose(0, 1).contiguous(), None, k - 1)
    dx = dxp[..., padding:padding + x.shape[-1]] if padding else dxp
    return dx, dweight, (g.sum((0, 2)) if bias is not None else None), None


_op_linear.register_autograd(_linear_backward, setup_context=_save_inputs)
_op_layer_norm.register_autograd(_layer_norm_backward, setup_context=_save_inputs)
_op_conv1d.register_autograd(_conv1d_backward, setup_context=_save_inputs)


# --------------------------------------------------------------------------- from the records


def _custom_run(name: str, *args: Any) -> Any:
    """An adaptive operation's call as its custom operator (what a record's gradients run
    under ``torch.compile``)."""
    return getattr(torch.ops.adaptive_runtime, name.replace(".", "_"))(*args)


def _runs(record: OperationRecord) -> Callable[..., Any]:
    name = record.name

    def run(*args: Any) -> Any:
        return get_runtime().run(name, *args)

    return run


def _calls(body: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        return body(get_runtime().run, *args)

    return call


def _backward_from(record: OperationRecord) -> Callable[..., tuple[Any, ...]]:
    made = (record.custom_op.gradients if record.custom_op is not None
            and record.custom_op.gradients is not None else record.gradients)
    assert made is not None
    gradients = made(_custom_run)
    if record.backward_needs == "output":
        def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
            (output,) = ctx.saved_tensors
            return tuple(gradients((), output, g))
    else:
        def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
            return tuple(gradients(_inputs(ctx), None, g))
    return backward


def _register(record: OperationRecord) -> None:
    """``record``'s custom operator, with its fake and (a forward's) registered backward."""
    spec = record.custom_op
    if spec is None:
        return
    op = torch.library.custom_op(f"adaptive_runtime::{record.custom_op_name}",
                                 _runs(record) if spec.call is None else _calls(spec.call),
                                 mutates_args=(), schema=spec.schema)
    op.register_fake(spec.fake or _same_as_first)
    if record.gradients is not None:
        op.register_autograd(_backward_from(record),
                             setup_context=_save_output if record.backward_needs == "output"
                             else _save_inputs)


for _record in with_backward(RECORDS):
    _register(_record)
