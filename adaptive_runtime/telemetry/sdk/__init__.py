"""The OpenTelemetry SDK side of telemetry: ``ar.telemetry.configure()`` and everything it
sets up. The package's modules that import ``opentelemetry.sdk`` (or an exporter, or
Prometheus) are here, and only ``adaptive_runtime.telemetry``'s lazy ``__getattr__``
(``configure``, ``shutdown``, ``Telemetry``) imports this package: ``import adaptive_runtime``
loads none of it. Elsewhere only ``telemetry.span_builders`` imports the SDK, on first use,
where an SDK tracer makes step spans (its id generator).

- ``providers``: ``configure()``, the providers and exporters it installs, ``shutdown()``,
  exit and fork handling (moved here from ``telemetry/setup.py`` as it was).
- ``export``: ``BoundedSpanProcessor``, the span processor of the tracer provider.
- ``switching``: exporters whose target a later ``configure()`` switches.
- ``otlp_json``: the embedded default, spans and metrics as OTLP/JSON Lines files.
- ``credentials`` (export headers, the CA file), ``resource`` (the resource),
  ``prometheus`` (the scrape endpoint's reader, exemplars included).
"""

from .providers import DEFAULT_DIRECTORY, WORKER_EXIT_FLUSH_S, Telemetry, configure, shutdown

__all__ = ["DEFAULT_DIRECTORY", "WORKER_EXIT_FLUSH_S", "Telemetry", "configure", "shutdown"]
