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

import time
from collections.abc import Callable
from typing import Any

from .._imported import imported

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
    ``None``). Gradients of non-tensor arguments must be ``None``.

    The arm's ``surcharge_us(*args)`` is the wall time its backward passes took (an EWMA per
    size bucket of the first tensor argument): register it as the implementation's
    ``surcharge_us``, so its forward timings carry the backward it adds — ATen's own backward
    is native, a call's worth of Python autograd node costs ~10-25 µs here.
    """
    made: list[Any] = []
    backward_us: dict[int, float] = {}

    def arm(*args: Any) -> Any:
        if not made:
            made.append(_function(name, forward, backward, save_output, backward_us))
        return made[0].apply(*args)

    def surcharge_us(*args: Any) -> float:
        bucket = _bucket(args)
        known = backward_us.get(bucket)
        if known is None:
            if backward_us:  # (a new size: the nearest one measured)
                known = backward_us[min(backward_us, key=lambda b: abs(b - bucket))]
            else:  # (none measured yet: what other operations' backward passes took)
                known = _TYPICAL_BACKWARD_US[0]
        return known

    arm.__name__ = arm.__qualname__ = f"{name}_autograd_{getattr(forward, '__name__', 'arm')}"
    arm.surcharge_us = surcharge_us  # type: ignore[attr-defined]
    return arm


def _bucket(args: tuple[Any, ...]) -> int:
    for a in args:
        numel = getattr(a, "numel", None)
        if numel is not None:
            return int(numel()).bit_length()
    return 0


# weight of a new backward timing in its bucket's average
_ALPHA = 0.25
# the latest backward pass of any autograd arm (µs): the surcharge of an arm whose own backward
# was never measured, so its first timings do not look cheaper than they are
_TYPICAL_BACKWARD_US = [0.0]


def _function(name: str, forward: Callable[..., Any], backward: Backward,
              save_output: bool, backward_us: dict[int, float]) -> type:
    torch = imported("torch")

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
            start_ns = time.perf_counter_ns()
            saved = iter(ctx.saved_tensors)
            inputs = tuple(next(saved) if a is _SAVED else a for a in ctx.layout)
            output = next(saved) if save_output else None
            grads = tuple(backward(inputs, output, grad))
            took_us = (time.perf_counter_ns() - start_ns) / 1000.0
            # (lost updates between threads only delay the average)
            bucket = _bucket(inputs)
            previous = backward_us.get(bucket)
            backward_us[bucket] = (took_us if previous is None
                                   else previous + _ALPHA * (took_us - previous))
            _TYPICAL_BACKWARD_US[0] = took_us
            return grads

    label = "".join(part.capitalize() for part in name.replace(".", "_").split("_"))
    AdaptiveFunction.__name__ = AdaptiveFunction.__qualname__ = f"Adaptive{label}"
    return AdaptiveFunction
