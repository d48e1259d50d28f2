"""The ``torch.ops.adaptive_runtime.*`` custom operators that ``torch.compile`` sees.

Opaque custom operators for torch.compile: the graph keeps a call into the runtime (which
chooses at run time), with a fake implementation for shapes and a registered backward made of
the same custom operators. Eager mode never goes through them (a custom operator costs ~40 µs
a call in eager mode here, the runtime's own dispatch ~3 µs).

Registered with torch when imported; :mod:`adaptive_runtime.torch` imports this module (it
imports torch), and its functional ops and adapted modules call these operators while
``torch.compile`` traces. Each is made from its operation's record (``kernels.all_records()``,
and their backward operations': :func:`_register`): its schema, its fake, its body (the runtime's
call of the operation) and, for a forward, the record's gradients run through the operators.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..kernels import OperationRecord, all_records
from ..kernels.record import with_backward
from ..runtime import get_runtime


def _same_as_first(x: torch.Tensor, *_rest: Any) -> torch.Tensor:
    return torch.empty_like(x)


def _save_inputs(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(*(t for t in inputs if isinstance(t, torch.Tensor)))
    ctx.layout = tuple(isinstance(t, torch.Tensor) for t in inputs)
    ctx.constants = tuple(t for t in inputs if not isinstance(t, torch.Tensor))


def _inputs(ctx: Any) -> tuple[Any, ...]:
    saved, constants = iter(ctx.saved_tensors), iter(ctx.constants)
    return tuple(next(saved) if is_tensor else next(constants) for is_tensor in ctx.layout)


def _save_output(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    del inputs  # (torch passes it by name)
    ctx.save_for_backward(output)


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


for _record in with_backward(all_records()):
    _register(_record)
