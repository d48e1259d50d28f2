"""numba and numpy arms inside torch autograd: a ``torch.autograd.Function`` per operation.

An arm of a ``+grad`` family (a tensor requires grad, autograd is recording) must keep the
graph. ATen arms do by themselves: autograd records ATen's own backward. A numba or numpy arm
computes on detached arrays, so it runs as the forward of an autograd function whose backward
is given by the operation — the adaptive ``<op>.backward`` operation, or other adaptive
operations (a matmul's gradients are matmuls) — so the backward pass is chosen, timed and
learned like any other call.

torch is imported only when such an arm first runs (a tensor exists, so torch is loaded).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

__all__ = ["Backward", "autograd_arm"]

# backward(inputs, output, grad_output) -> one gradient (or None) per input
Backward = Callable[[tuple[Any, ...], Any, Any], tuple[Any, ...]]
_SAVED = object()  # (in a call's layout: this argument is a saved tensor)


def autograd_arm(name: str, forward: Callable[..., Any], backward: Backward, *,
                 save_output: bool = False) -> Callable[..., Any]:
    """The arm ``forward`` (a function of the operation's arguments returning a new tensor,
    e.g. a numba arm that works on detached numpy views) run inside an autograd function
    named after ``name``, whose backward is ``backward(inputs, output, grad_output)``:
    ``inputs`` the call's arguments, ``output`` its result when ``save_output`` (else
    ``None``). Gradients of non-tensor arguments must be ``None``."""
    made: list[Any] = []

    def arm(*args: Any) -> Any:
        if not made:
            made.append(_function(name, forward, backward, save_output))
        return made[0].apply(*args)

    arm.__name__ = arm.__qualname__ = f"{name}_autograd_{getattr(forward, '__name__', 'arm')}"
    return arm


def _function(name: str, forward: Callable[..., Any], backward: Backward,
              save_output: bool) -> type:
    torch = sys.modules["torch"]

    class AdaptiveFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *args: Any) -> Any:
            out = forward(*args)
            # Tensors go through save_for_backward (autograd checks they were not modified
            # in place before the backward); anything else (a scalar alpha) is kept as is.
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            if save_output:
                tensors.append(out)
            ctx.save_for_backward(*tensors)
            ctx.layout = tuple(_SAVED if isinstance(a, torch.Tensor) else a for a in args)
            return out

        @staticmethod
        def backward(ctx: Any, grad: Any) -> tuple[Any, ...]:
            saved = iter(ctx.saved_tensors)
            inputs = tuple(next(saved) if a is _SAVED else a for a in ctx.layout)
            output = next(saved) if save_output else None
            return tuple(backward(inputs, output, grad))

    label = "".join(part.capitalize() for part in name.replace(".", "_").split("_"))
    AdaptiveFunction.__name__ = AdaptiveFunction.__qualname__ = f"Adaptive{label}"
    return AdaptiveFunction
