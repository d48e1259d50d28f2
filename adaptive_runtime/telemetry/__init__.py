"""Telemetry for adaptive_runtime: every admitted selection as OTLP spans, plus metrics.

``configure()`` sets up an OpenTelemetry SDK for applications that have none (OTLP when an
endpoint is configured, else OTLP/JSON lines files) and switches every runtime's export on;
``shutdown()`` flushes it. An application with its own SDK providers keeps them: runtimes
export into those as soon as they exist, or on ``instrument(rt)``.
"""

from .instrumentation import instrument
from .setup import DEFAULT_DIRECTORY, Telemetry, configure, shutdown
from .spans import SpanRecorder
from .stats import TelemetryStats, stats
from .steps import TrainStep, train_step

__all__ = ["DEFAULT_DIRECTORY", "SpanRecorder", "Telemetry", "TelemetryStats", "TrainStep",
           "configure", "instrument", "shutdown", "stats", "train_step"]
