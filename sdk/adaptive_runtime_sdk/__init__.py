"""adaptive_runtime's telemetry, the OpenTelemetry SDK side: ``ar.telemetry.configure()`` and
everything it sets up, a distribution of its own (``adaptive_runtime_sdk``, installed by the
library's ``otlp`` extra) beside the library, as OpenTelemetry's SDK is beside its API. The
library (``adaptive_runtime.telemetry``: spans, metrics, the seam) speaks the API only; its
modules that import ``opentelemetry.sdk`` (or an exporter, or Prometheus) are here, and only
``adaptive_runtime.telemetry``'s lazy ``__getattr__`` (``configure``, ``shutdown``,
``Telemetry``) imports this package: ``import adaptive_runtime`` loads none of it
(``.importlinter``'s contract ``telemetry-sdk`` keeps it so). Elsewhere only
``telemetry.span_builders`` imports the SDK, on first use, where an SDK tracer makes step
spans (its id generator). What each module works around upstream, it cites.

- ``configure``: ``configure()`` and the resolution of its settings (arguments, ``OTEL_*``).
- ``providers``: the global tracer and meter providers, made once; the exporters (OTLP,
  files, console) and the Prometheus endpoint; stopping them within a bound.
- ``handle``: :class:`Telemetry`, what ``configure()`` returns; ``shutdown()`` and the one
  line saying what it could not send.
- ``lifecycle``: interpreter exit, forked children, ``multiprocessing`` workers' exit.
- ``export``: ``BoundedSpanProcessor``, the span processor of the tracer provider.
- ``exporters``: what wraps the SDK's exporters: one warning per outage, a traces-only
  backend's refusal of metrics, a forked child's own connection.
- ``otlp_json`` (the OTLP/JSON encoding), ``otlp_json_file`` (the file
  exporters), ``json_lines`` (the file they append to: locking, forks, rotation).
- ``credentials`` (export headers, the CA file), ``resource`` (the resource),
  ``prometheus`` (the scrape endpoint's reader, exemplars included).
"""

from adaptive_runtime.telemetry.defaults import DEFAULT_DIRECTORY

from .configure import configure
from .handle import Telemetry, shutdown
from .lifecycle import WORKER_EXIT_FLUSH_S

__all__ = ["DEFAULT_DIRECTORY", "WORKER_EXIT_FLUSH_S", "Telemetry", "configure", "shutdown"]
