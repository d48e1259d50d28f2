"""The package's version: the one place it is written (pyproject.toml reads it from here, and
the OpenTelemetry tracers and meters name it as their instrumentation scope's version)."""

__version__ = "0.1.0"
