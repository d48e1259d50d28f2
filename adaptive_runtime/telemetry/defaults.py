"""Where telemetry goes unless told otherwise. A module of its own, importing nothing: the CLI
and ``adaptive-runtime doctor`` read these where the OpenTelemetry SDK (``sdk``) may not be
installed."""

__all__ = ["DEFAULT_DIRECTORY", "DEFAULT_PROMETHEUS_HOST", "DEFAULT_PROMETHEUS_PORT"]

# the embedded default's OTLP/JSON files, relative to the working directory
DEFAULT_DIRECTORY = "adaptive-runtime-telemetry"
DEFAULT_PROMETHEUS_PORT = 9464  # the port opentelemetry-exporter-prometheus documents
# where the scrape endpoint listens unless told: this machine only (a training node's other
# interfaces face its cluster; the specification's default is "localhost")
DEFAULT_PROMETHEUS_HOST = "127.0.0.1"
