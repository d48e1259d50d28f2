"""adaptive_runtime: per-call GPU / SIMD / SCALAR selection that learns, and shows why.

See docs/architecture.md for the architecture; the names below are the public contract.
"""

from . import ops, telemetry
from ._version import __version__
from .backend import Backend, Variant
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
from .operations import Kind, Operation
from .runtime import AdaptiveRuntime, RuntimeStats, get_runtime
from .telemetry.steps import train_step

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

