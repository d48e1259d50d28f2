"""Where telemetry goes unless told otherwise, and how to install what ``configure()`` needs. A
module of its own, importing nothing: the CLI and ``adaptive-runtime doctor`` read these where
the SDK side (``adaptive_runtime_sdk``) may not be installed."""

__all__ = ["DEFAULT_DIRECTORY", "DEFAULT_PROMETHEUS_HOST", "DEFAULT_PROMETHEUS_PORT",
           "INSTALL_SDK_SIDE"]

# What brings the SDK side (its own distribution, with the OpenTelemetry SDK and exporters):
# the extra, or from a clone both directories in one command (the SDK side pins the package).
INSTALL_SDK_SIDE = ("pip install 'adaptive_runtime[otlp]' (from a clone of the repository: "
                    "pip install . ./sdk)")

# the embedded default's OTLP/JSON files, relative to the working directory
DEFAULT_DIRECTORY = "adaptive-runtime-telemetry"
DEFAULT_PROMETHEUS_PORT = 9464  # the port opentelemetry-exporter-prometheus documents
# where the scrape endpoint listens unless told: this machine only (a training node's other
# interfaces face its cluster; the specification's default is "localhost")
DEFAULT_PROMETHEUS_HOST = "127.0.0.1"
