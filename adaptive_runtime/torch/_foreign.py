"""Other libraries' module classes that :func:`adaptive_runtime.torch.adapt` recognises, named
by their import path, so that ``adaptive_runtime.torch`` imports none of those libraries.

The rule: a module is adapted when its ``forward`` computes exactly an operation the runtime
adapts, by a call of torch's own function for it (so the adapted module gives the same values,
within the arms' rounding, and the same gradients). Hugging Face's ``GELUActivation`` (BERT's
``hidden_act="gelu"``) calls ``torch.nn.functional.gelu``: adapted as the runtime's exact
``gelu``. Its ``use_gelu_python=True`` form (a formula of its own), and the tanh
approximations (``NewGELUActivation``, ``FastGELUActivation``, ``GELUTanh``,
``AccurateGELUActivation``: GPT-2's ``gelu_new`` and the like), are not: the runtime has no
tanh-approximate GELU. Those are named here with why, so that ``adapt()``'s log says it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["FOREIGN", "adaptable_as", "adapted_name", "base_class"]

_TORCH_GELU = torch.nn.functional.gelu
_HF = "transformers.activations"
_TANH = ("the tanh approximation of GELU: the runtime's gelu is the exact (erf) form")


def _hf_gelu(module: Any) -> str | None:
    # (GELUActivation.forward is ``self.act(input)``; ``act`` is torch's gelu unless the
    # module was made with use_gelu_python=True)
    if getattr(module, "act", None) is _TORCH_GELU:
        return None
    return "use_gelu_python=True: its own formula, not torch.nn.functional.gelu"


# (module path, class name) -> (the runtime's operation, why an instance cannot be adapted
# or None); an operation of None: never adapted, the function says why
FOREIGN: dict[tuple[str, str], tuple[str | None, Callable[[Any], str | None]]] = {
    (_HF, "GELUActivation"): ("gelu", _hf_gelu),
    (_HF, "NewGELUActivation"): (None, lambda _m: _TANH),
    (_HF, "FastGELUActivation"): (None, lambda _m: _TANH),
    (_HF, "AccurateGELUActivation"): (None, lambda _m: _TANH),
    (_HF, "GELUTanh"): (None, lambda _m: _TANH),
    (_HF, "QuickGELUActivation"): (None, lambda _m: "x * sigmoid(1.702 * x): not the "
                                                   "runtime's gelu"),
}


def _entry(cls: type) -> tuple[str | None, Callable[[Any], str | None]] | None:
    return FOREIGN.get((cls.__module__, cls.__qualname__))


def adaptable_as(module: Any) -> tuple[str | None, str | None]:
    """``(operation, None)`` where ``module`` (of a class in :data:`FOREIGN`) can run as the
    runtime's ``operation``; ``(None, why not)`` where it is in :data:`FOREIGN` but cannot;
    ``(None, None)`` for a class not there."""
    entry = _entry(type(module))
    if entry is None:
        return None, None
    operation, why_not = entry
    reason = why_not(module)
    if operation is None or reason is not None:
        return None, reason
    return operation, None


def adapted_name(cls: type) -> str:
    """The name of ``cls``'s adapted subclass in ``adaptive_runtime.torch``."""
    return f"Adaptive{cls.__qualname__}"


def base_class(name: str) -> tuple[type, str] | None:
    """The class whose adapted subclass is called ``name`` (:func:`adapted_name`) and the
    operation it runs as, for rebuilding that subclass by name (unpickling an adapted model
    in a new process): imports its library, as unpickling an instance of it does. ``None``
    where ``name`` is not one of :data:`FOREIGN`'s adaptable classes."""
    import importlib

    for (path, class_name), (operation, _why_not) in FOREIGN.items():
        if operation is not None and f"Adaptive{class_name}" == name:
            cls = getattr(importlib.import_module(path), class_name, None)
            return (cls, operation) if isinstance(cls, type) else None
    return None
