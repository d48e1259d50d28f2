"""PyTorch training loops: adaptive functional ops and ``adapt(model)``.

``import adaptive_runtime.torch as art`` (imported only when used: it imports torch).

- Functional ops for ``nn.Module.forward``: one per built-in operation (``art.linear``,
  ``art.matmul``, ...; the names in ``__all__``), made from the operation's record
  (``kernels/<op>.py``). Each runs on the arm the runtime picks among ATen (the call you
  would write anyway), numba and the GPU, with autograd intact (see ``kernels/torch_arms``): a
  tensor that requires grad gets a correct backward, itself run by adaptive operations.
- :func:`adapt` swaps supported modules of a model in place for adaptive ones (the
  ``torch.nn`` classes the records name, ``nn.Linear``, ``nn.GELU``, ...), and other
  libraries' modules whose ``forward`` is exactly one of the runtime's operations (Hugging
  Face's ``GELUActivation``: see ``torch._foreign``). A swapped module keeps its parameters,
  buffers, hooks and ``state_dict`` (only its class changes, to a subclass whose ``forward``
  is adaptive), so an optimiser made before or after still works.
- Under ``torch.compile`` the ops are opaque custom operators (``torch.ops.adaptive_runtime.*``,
  with fake implementations and registered backwards): the compiled graph calls the runtime at
  run time, where it chooses as in eager mode (see ``torch._compile``). ``torch.no_grad()`` and
  ``torch.inference_mode()`` record nothing, and are learned apart from calls under autograd.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import Any, cast

import torch
from torch import nn

from ..kernels import RECORDS, OperationRecord
from ..kernels.record import TorchModule
from ..runtime import AdaptiveRuntime, CallSite, get_runtime

# (imported for its side effect: it registers the torch.ops.adaptive_runtime.* custom
# operators, with their fakes and backwards, that _call runs under torch.compile)
from . import _compile  # noqa: F401
from ._autocast import autocast_on, cast_like_autocast
from ._foreign import adaptable_as, adapted_name, base_class

__all__ = ["adapt"]  # (and, below, the functional forms and adaptive classes of the records)

_log = logging.getLogger(__name__)
_Tensor = torch.Tensor
_is_compiling = torch.compiler.is_compiling


def _runtime(runtime: AdaptiveRuntime | None) -> AdaptiveRuntime:
    return runtime if runtime is not None else get_runtime()


def _call(runtime: AdaptiveRuntime | None, operation: str, args: tuple[Any, ...]) -> Any:
    """A functional op's call (and an adapted module's under ``torch.compile``): its inputs
    cast as ``torch.autocast`` would (where it is on), then run by the runtime — or, while
    ``torch.compile`` traces, the op's custom operator, which calls the default runtime when
    the compiled graph runs. (The casts are traced as torch's own ops: the custom operator
    sees one dtype, and autograd differentiates the casts.)"""
    if autocast_on(args[0]):
        args = cast_like_autocast(operation, args)
    if _is_compiling():
        return getattr(torch.ops.adaptive_runtime, operation)(*args)
    return _runtime(runtime).run(operation, *args)


# ---------------------------------------------------------------------------- functional ops


def _functional(record: OperationRecord) -> Callable[..., Any]:
    """``art.<name>``: the record's functional form (``CustomOp.functional``), else a call of
    one or two tensors; each calls :func:`_call`."""
    assert record.custom_op is not None
    made = record.custom_op.functional
    name = record.name
    if made is not None:
        fn = made(_call)
    elif record.arity == 1:
        def fn(x: _Tensor, *, runtime: AdaptiveRuntime | None = None) -> _Tensor:
            return _call(runtime, name, (x,))
    else:
        def fn(a: _Tensor, b: _Tensor, *,  # type: ignore[misc]
               runtime: AdaptiveRuntime | None = None) -> _Tensor:
            return _call(runtime, name, (a, b))
    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = __name__
    if record.custom_op.doc:
        fn.__doc__ = record.custom_op.doc
    return fn


# the built-in operations with a custom operator have a functional form (the public names)
_FUNCTIONAL: dict[str, Callable[..., Any]] = {
    r.name: _functional(r) for r in RECORDS if r.custom_op is not None and not r.is_backward}
globals().update(_FUNCTIONAL)
__all__ = sorted([*__all__, *_FUNCTIONAL])


# ---------------------------------------------------------------------------- modules

_grad_enabled = torch.is_grad_enabled
_autocast_on = autocast_on
def _run(module: Any, operation: str, args: tuple[Any, ...],
         params: tuple[_Tensor | None, ...] = ()) -> Any:
    """Run an adapted module's call of ``operation`` (input ``args[0]``, parameters
    ``params``) through its call site."""
    site = module._adaptive_site
    if site is None:
        runtime = module._adaptive_runtime
        site = module._adaptive_site = (
            runtime if runtime is not None else get_runtime()).call_site(operation)
    x = args[0]
    if _autocast_on(x):
        args = cast_like_autocast(operation, args)
        x = args[0]
    grad = False
    if _grad_enabled():
        grad = x.requires_grad
        if not grad:
            for p in params:
                if p is not None and p.requires_grad:
                    grad = True
                    break
    return site((x.shape, x.dtype, x.is_cuda, grad), args)


def _weight_and_bias(module: Any) -> tuple[Any, Any]:
    # (read from _parameters: ``module.weight`` goes through nn.Module.__getattr__, a Python
    # function, ~1-2 us a call here; a parametrized weight is a property: read it as such)
    params = module._parameters
    try:
        return params["weight"], params["bias"]
    except KeyError:
        return module.weight, module.bias


class _Adaptive:
    """What every adaptive module class has: its runtime (``None``: the process default)
    and call site, plain attributes (not in ``state_dict``)."""

    _adaptive_runtime: AdaptiveRuntime | None = None
    _adaptive_site: CallSite | None = None

    def __getstate__(self) -> dict[str, Any]:
        # (the call site is a cache of this process's runtime, made again on the first call:
        # a pickled or deep-copied module leaves it behind)
        state = dict(super().__getstate__())  # type: ignore[misc]
        state.pop("_adaptive_site", None)
        return state


def _module_forward(record: OperationRecord, spec: TorchModule) -> Callable[..., Any]:
    """The forward of ``Adaptive<spec.name>``: the operation's call through the module's call
    site (under ``torch.compile``: its custom operator). Its shape is picked here, once, so
    that a call does only what its module needs (as a forward written by hand would)."""
    operation, settings, reroute = record.name, spec.settings, spec.reroute
    if reroute is not None:
        functional = _FUNCTIONAL[operation]

        def forward(self: Any, input: _Tensor) -> _Tensor:
            further = reroute(self, input)
            if further is not None or _is_compiling():
                return functional(input, *(further or ()), runtime=self._adaptive_runtime)
            return _run(self, operation, (input,))
    elif settings is not None:
        def forward(self: Any, input: _Tensor) -> _Tensor:
            if _is_compiling():
                return _call(None, operation, (input, self.weight, self.bias, *settings(self)))
            weight, bias = _weight_and_bias(self)
            return _run(self, operation, (input, weight, bias, *settings(self)), (weight, bias))
    elif spec.weights:
        def forward(self: Any, input: _Tensor) -> _Tensor:
            if _is_compiling():
                return _call(None, operation, (input, self.weight, self.bias))
            weight, bias = _weight_and_bias(self)
            return _run(self, operation, (input, weight, bias), (weight, bias))
    else:
        def forward(self: Any, input: _Tensor) -> _Tensor:
            if _is_compiling():
                return _call(None, operation, (input,))
            return _run(self, operation, (input,))
    return forward


def _adaptive_module(record: OperationRecord, spec: TorchModule) -> type[nn.Module]:
    """``Adaptive<spec.name>``: the ``torch.nn`` class ``adapt()`` swaps, with the record's
    forward (kept in this module's namespace, so an adapted model pickles by reference)."""
    name = "Adaptive" + spec.name
    made: type[nn.Module] = type(name, (_Adaptive, getattr(nn, spec.name)), {
        "forward": _module_forward(record, spec), "__module__": __name__,
        "__qualname__": name, "__doc__": spec.doc})
    return made


# module class -> (adaptive class, why a module of it cannot be swapped, or None), and the
# forward of an adapted module of another library's class, by the operation it computes
_SWAPS: dict[type[nn.Module], tuple[type[nn.Module], Callable[[Any], str | None] | None]] = {}
_FORWARDS: dict[str, Callable[..., Any]] = {}
for _spec, _record in ((r.custom_op.module, r) for r in RECORDS if r.custom_op is not None):
    if _spec is not None:
        _made = globals()[f"Adaptive{_spec.name}"] = _adaptive_module(_record, _spec)
        _SWAPS[_made.__bases__[-1]] = (_made, _spec.why_not)
        _FORWARDS[_record.name] = _made.forward
__all__ = sorted([*__all__, *(adaptive.__name__ for adaptive, _ in _SWAPS.values())])


def _adapted_class(base: type[nn.Module], operation: str) -> type[nn.Module]:
    """The adapted subclass of another library's ``base`` (made once, kept in this module's
    namespace under :func:`adapted_name`, so that an adapted model pickles by reference)."""
    name = adapted_name(base)
    found = globals().get(name)
    if isinstance(found, type) and found.__bases__[-1] is base:
        return found
    made: type[nn.Module] = type(name, (_Adaptive, base), {
        "forward": _FORWARDS[operation], "__module__": __name__, "__qualname__": name,
        "__doc__": f"``{base.__module__}.{base.__qualname__}`` whose forward runs the "
                   f"adaptive :func:`{operation}`."})
    globals()[name] = made
    return made


def __getattr__(name: str) -> Any:
    # (an adapted class of another library's module, named by a pickle made in another
    # process: made again here, as adapt() made it there)
    found = base_class(name) if name.startswith("Adaptive") else None
    if found is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _adapted_class(*found)


def _swap_for(module: nn.Module) -> tuple[type[nn.Module] | None, str | None]:
    """The adaptive class ``module`` becomes, or ``None`` and why not (``None``: no adaptive
    operation computes it)."""
    if "forward" in vars(module):
        return None, "its forward is set on the instance"
    swap = _SWAPS.get(type(module))
    if swap is not None:
        adaptive, why_not = swap
        reason = why_not(module) if why_not is not None else None
        return (adaptive, None) if reason is None else (None, reason)
    operation, reason = adaptable_as(module)
    if operation is None:
        return None, reason
    return _adapted_class(type(module), operation), None


def adapt(model: nn.Module, *, runtime: AdaptiveRuntime | None = None) -> nn.Module:
    """Swap ``model``'s supported modules (itself included) in place for adaptive ones, and
    return it. They run on ``runtime`` (default: the process default, ``ar.get_runtime()``;
    under ``torch.compile`` always the default).

    Supported: the ``torch.nn`` classes below (each ``Adaptive<class>``'s docstring says
    which configurations it runs; the others are left as they are); and another library's
    module whose ``forward`` is exactly one of the runtime's operations, a call of torch's
    own function for it: Hugging Face's
    ``GELUActivation`` (torch's exact GELU; not its tanh approximations, ``gelu_new`` and the
    like, which the runtime has no operation for). Only exactly these classes are swapped (a
    subclass may override ``forward``). One INFO line (logger ``adaptive_runtime.torch``)
    says what was swapped and what was left as it was: each class, its count and why (a
    configuration the runtime cannot run, or no adaptive operation: ``Dropout``,
    ``Embedding``, ...), counting modules with no children (containers are not left out).
    Parameters, buffers, hooks and ``state_dict`` stay as they were: the module's class
    becomes a subclass whose ``forward`` is adaptive, so ``isinstance`` checks still hold.

    Classes swapped: SWAPPED.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"adapt() takes a torch.nn.Module, got {type(model).__name__}")
    swapped: Counter[str] = Counter()
    left: Counter[tuple[str, str]] = Counter()
    for module in model.modules():
        if isinstance(module, _Adaptive):
            continue  # (adapted before)
        kind = type(module).__name__
        adaptive, reason = _swap_for(module)
        if adaptive is None:
            if reason is not None or next(module.children(), None) is None:
                left[(kind, reason or "no adaptive operation")] += 1
            continue
        module.__class__ = adaptive
        if runtime is not None:
            # (a plain attribute: not in state_dict)
            cast(Any, module)._adaptive_runtime = runtime
        swapped[kind] += 1
    _log.info("adaptive_runtime.torch.adapt: swapped %s; left as they are: %s",
              ", ".join(f"{kind} {n}" for kind, n in swapped.most_common()) or "nothing",
              "; ".join(f"{kind} {n} ({why})" for (kind, why), n in left.most_common())
              or "nothing")
    return model


adapt.__doc__ = (adapt.__doc__ or "").replace("SWAPPED", ", ".join(
    f"``nn.{base.__name__}``" for base in _SWAPS))
