"""Telemetry for adaptive_runtime: every admitted selection as OTLP spans, plus metrics.

This package is the instrumentation side: it speaks the OpenTelemetry API only, as
OpenTelemetry asks of a library. ``configure()`` — an OpenTelemetry SDK for applications that
have none (OTLP when an endpoint is configured, else OTLP/JSON lines files) — is the SDK side,
a sibling distribution (``adaptive_runtime_sdk``, which the ``otlp`` extra installs) served
here by name; it switches every runtime's export on, and ``shutdown()`` flushes it. An
application with its own SDK providers keeps them: runtimes export into those as soon as they
exist, or on ``instrument(rt)``; ``uninstrument(rt)`` stops one runtime's export.

Importing this package loads the OpenTelemetry API only: the SDK, the exporters and
Prometheus load with ``configure()``, or when a runtime first makes spans for an SDK the
application set up itself. A program that never configures telemetry pays for none, and runs
where only the API is installed (``pip install adaptive_runtime``; ``configure()`` needs the
``otlp`` extra, and says so).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import MissingExtraError
from .defaults import DEFAULT_DIRECTORY, INSTALL_SDK_SIDE
from .instrumentation import instrument, uninstrument
from .stats import TelemetryStats, stats

if TYPE_CHECKING:
    from adaptive_runtime_sdk import Telemetry, configure, shutdown

__all__ = ["DEFAULT_DIRECTORY", "Telemetry", "TelemetryStats", "configure",
           "instrument", "shutdown", "stats", "telemetry_setup", "uninstrument"]

# names served by ``adaptive_runtime_sdk``, which imports the SDK: imported on first use (PEP
# 562). This module's imports of it (that one, and the type-only one above) are the only ones
# from below the tools: .importlinter's contract "telemetry-sdk" ignores them.
_FROM_SDK = frozenset({"Telemetry", "configure", "shutdown"})


def telemetry_setup(needed_by: str) -> Any:
    """The ``adaptive_runtime_sdk`` package (it imports the OpenTelemetry SDK);
    :class:`MissingExtraError` (a ``ModuleNotFoundError``) naming the extra that brings it
    and the SDK where they are not installed (the package runs on the API alone; exporting
    needs the SDK)."""
    try:
        import adaptive_runtime_sdk as sdk
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith(("opentelemetry", "prometheus_client",
                                            "adaptive_runtime_sdk")):
            raise
        raise MissingExtraError(
            f"ar.telemetry.{needed_by} needs the OpenTelemetry SDK and exporters, not installed "
            f"here ({exc.name} is missing): {INSTALL_SDK_SIDE}",
            name=exc.name) from exc
    return sdk


def __getattr__(name: str) -> Any:
    if name in _FROM_SDK:
        sdk = telemetry_setup(name)

        value = getattr(sdk, name)
        globals()[name] = value  # (later lookups are plain module attributes)
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
