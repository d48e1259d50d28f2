"""adaptive_runtime: per-call GPU / SIMD / SCALAR selection that learns, and shows why.

See DESIGN.md for the architecture; the names below are the public contract.
"""

from . import ops, telemetry
from .backend import Backend, Variant
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
from .operations import Kind, Operation
from .policy import Decision, Reason
from .runtime import AdaptiveRuntime, RuntimeStats, get_runtime
from .telemetry.steps import train_step

# The one place the version is written: pyproject.toml reads it from here (setuptools
# dynamic version, parsed without importing the package).
__version__ = "0.1.0"

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

