"""CPU arms for inputs already on the GPU, where the user asks for them
(``RuntimeConfig.host_arms_on_device``; off by default).

A CPU arm on CUDA tensors is a round trip: the inputs are copied to the host, the torch
family's CPU implementation of that arm runs on the copies (ATen on the CPU for SIMD, the numba
loop for SCALAR), and its result is copied back to the inputs' device. Made of torch's own
copies (``Tensor.to``), which autograd records, so gradients flow back through the round trip
to the device tensors — and through the numba loop's autograd function where that ran.

What it costs is priced where the runtime looks:

- the timing of a call covers the whole trip: the copy to the host waits for the device's
  queued work (the stream's earlier kernels), then the copies and the computation run, and
  the copy back returns once done (torch's blocking copy); nothing runs after the timer;
- its ``floor_us`` prices the copies at the measured bandwidth before the arm is ever tried,
  so a key whose GPU time is under what the copies alone take never runs it;
- under autograd, its ``surcharge_us`` adds the backward pass's copies (the gradient of the
  result to the host, the inputs' gradients back) to the CPU implementation's own surcharge.

While a CUDA graph is captured nothing may be read on the host: the dispatcher then runs the
key's GPU arm instead, on the timed path and on the fast path of a key committed to a round
trip (the only keys that ask whether a capture is on: ``_dispatch.period``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._imported import imported
from ..backend import Choice
from ._arrays import is_tensor
from ._families import input_family
from ._gpu import device, nbytes, transfer_estimate_us

if TYPE_CHECKING:
    from ..operations import Implementation

__all__ = ["HostArmUnsupportedError", "host_round_trip"]

# the torch family's implementation of the arm's choice, by family name (None: it has none)
ImplementationOf = Callable[[str], "Implementation | None"]


class HostArmUnsupportedError(RuntimeError):
    """The CPU arm has no implementation for these tensors' dtype (numba has no bfloat16):
    the runtime runs the call on another arm, and leaves this one aside for the key."""


def host_round_trip(operation: str, choice: Choice, implementation_of: ImplementationOf,
                    gpu: Callable[..., Any]) -> Callable[..., Any]:
    """The CPU arm ``choice`` of ``operation`` for inputs on the GPU: a round trip through
    the host to ``implementation_of(family)``'s kernel (``family`` that of the call's
    tensors: dtype, and ``+grad`` while autograd records). ``gpu`` is the operation's GPU arm
    (made by ``gpu_arm``), for the size of the result and which argument it is shaped like.
    Returns the arm, with ``floor_us`` and ``surcharge_us`` attached for its registration."""
    result_bytes: Callable[..., int] = gpu.result_bytes  # type: ignore[attr-defined]
    template: int = gpu.template  # type: ignore[attr-defined]

    def kernel_for(args: tuple[Any, ...]) -> Implementation:
        return _kernel_for(operation, choice, implementation_of, args)

    def arm(*args: Any) -> Any:
        dev = device()
        on_host = tuple(a.to("cpu") if dev.is_on_device(a) else a for a in args)
        out = kernel_for(on_host).fn(*on_host)
        model = args[template]
        if isinstance(out, tuple):  # (a backward operation's several gradients)
            return tuple(_back(dev, o, model) for o in out)
        return _back(dev, out, model)

    def floor_us(*args: Any) -> float:
        """The copies at the measured bandwidth: the inputs on the device to the host, the
        result back."""
        dev = device()
        moved = sum(nbytes(a) for a in args if dev.is_on_device(a)) + result_bytes(*args)
        return transfer_estimate_us(moved)

    def surcharge_us(*args: Any) -> float:
        """Under autograd, the backward pass's copies (the result's gradient to the host,
        the inputs' gradients back), and the CPU kernel's own surcharge (a numba loop's
        autograd node and adaptive backward)."""
        torch = imported("torch")
        grads = [a for a in args if is_tensor(a) and a.requires_grad]
        if torch is None or not grads or not torch.is_grad_enabled():
            return 0.0
        extra = kernel_for(args).surcharge_us
        inner = extra(*args) if extra is not None else 0.0
        return inner + transfer_estimate_us(result_bytes(*args) + sum(map(nbytes, grads)))

    arm.__name__ = arm.__qualname__ = f"{operation}_{choice.value.replace(':', '_')}_round_trip"
    arm.floor_us = floor_us  # type: ignore[attr-defined]
    arm.surcharge_us = surcharge_us  # type: ignore[attr-defined]
    return arm


def _kernel_for(operation: str, choice: Choice, implementation_of: ImplementationOf,
                args: tuple[Any, ...]) -> Implementation:
    """The host implementation of ``choice`` for the family of ``args``' tensors."""
    family = input_family(*args)
    impl = implementation_of(family)
    if impl is None:
        raise HostArmUnsupportedError(f"{operation}: no {choice.value} implementation on the "
                                      f"host for {family or 'these'} tensors")
    return impl


def _back(dev: Any, value: Any, model: Any) -> Any:
    """A result of the host kernel, as a tensor on ``model``'s device (anything else, a
    ``None`` gradient say, as it is)."""
    return dev.to_device(value, like=model) if is_tensor(value) else value
