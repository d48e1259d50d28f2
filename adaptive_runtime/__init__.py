"""adaptive_runtime: per-call GPU / SIMD / SCALAR selection that learns, and shows why.

See docs/architecture.md for the architecture; the names below are the public contract.
The wings that need a framework or more than the runtime are imported on first access
(``ar.torch``, ``ar.offline``; ``ar.training`` is imported with the package, its framework
callbacks ``adaptive_runtime.training.lightning`` and ``.transformers`` are not), or as usual
(``import adaptive_runtime.torch as art``): ``import adaptive_runtime`` never imports torch.
Paths that moved (``adaptive_runtime.lightning``, ``.report``, ...) still import for one
release, with a ``DeprecationWarning`` (``_moved``).
"""

from importlib import import_module
from types import ModuleType

from . import _moved, ops, telemetry
from ._version import __version__
from .backend import Backend, Kind, Variant
from .config import RuntimeConfig
from .decision import Decision, Reason
from .errors import (
    AdaptiveRuntimeError,
    AllBackendsFailedError,
    BackendUnavailableError,
    ConfigError,
    MissingExtraError,
    RegistrationError,
    ResultMismatchError,
    UnknownOperationError,
)
from .history import HistoryRecord, HistoryWarning
from .keys import size_bucket
from .operations import Operation
from .runtime import AdaptiveRuntime, RuntimeStats, get_runtime
from .training import train_step

__all__ = [
    "AdaptiveRuntime",
    "AdaptiveRuntimeError",
    "AllBackendsFailedError",
    "Backend",
    "BackendUnavailableError",
    "ConfigError",
    "Decision",
    "HistoryRecord",
    "HistoryWarning",
    "Kind",
    "MissingExtraError",
    "Operation",
    "Reason",
    "RegistrationError",
    "ResultMismatchError",
    "RuntimeConfig",
    "RuntimeStats",
    "UnknownOperationError",
    "Variant",
    "__version__",
    "get_runtime",
    "ops",
    "size_bucket",
    "telemetry",
    "train_step",
]

_moved.install()

# Public submodules that import a framework (torch) or more than the runtime needs (rich
# tables, the replay): not imported with the package, so that `import adaptive_runtime` stays
# cheap, but reachable as attributes the way users write them (`ar.torch.adapt(model)`),
# imported on first access (PEP 562); and the old paths of moved ones (a DeprecationWarning).
_LAZY_SUBMODULES = frozenset({"offline", "torch", *(old for old in _moved.MOVED if "." not in old)})


def __getattr__(name: str) -> ModuleType:
    if name in _LAZY_SUBMODULES:
        try:
            # (import_module also binds the submodule on this package: later lookups are plain)
            return import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != name or isinstance(exc, MissingExtraError):
                raise
            # (`ar.torch` without torch: the extra of the same name brings it)
            raise MissingExtraError(f"ar.{name} needs {name}, not installed here: pip install "
                                    f"'adaptive_runtime[{name}]'", name=name) from exc
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
