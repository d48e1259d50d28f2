"""adaptive_runtime: per-call GPU / SIMD / SCALAR selection that learns, and shows why.

See DESIGN.md for the architecture; the names below are the public contract.
"""

from . import ops, telemetry
from ._dispatch import SelectionKey
from .backend import Backend
from .config import RuntimeConfig
from .errors import (
    AdaptiveRuntimeError,
    AllBackendsFailedError,
    BackendUnavailableError,
    ConfigError,
    RegistrationError,
    ResultMismatchError,
    UnknownOperationError,
)
from .history import HistoryRecord, HistoryWarning
from .keys import size_bucket
from .operations import DeviceProbe, Kind, Operation
from .policy import Decision, Reason
from .runtime import AdaptiveRuntime, get_runtime
from .telemetry.steps import train_step

__version__ = "0.1.0"

__all__ = [
    "AdaptiveRuntime",
    "AdaptiveRuntimeError",
    "AllBackendsFailedError",
    "Backend",
    "BackendUnavailableError",
    "ConfigError",
    "Decision",
    "DeviceProbe",
    "HistoryRecord",
    "HistoryWarning",
    "Kind",
    "Operation",
    "Reason",
    "RegistrationError",
    "ResultMismatchError",
    "RuntimeConfig",
    "SelectionKey",
    "UnknownOperationError",
    "__version__",
    "get_runtime",
    "ops",
    "size_bucket",
    "telemetry",
    "train_step",
]
