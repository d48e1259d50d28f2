"""``configure()``: an OpenTelemetry SDK for applications that have none, from OTEL_* settings.

- An OTLP endpoint (argument, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` /
  ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``) → OTLP exporters,
  over gRPC or HTTP/protobuf (``protocol`` / ``OTEL_EXPORTER_OTLP_PROTOCOL``; default
  ``http/protobuf`` as the specification says). Headers and certificate come from the
  argument or the standard ``OTEL_EXPORTER_OTLP_HEADERS`` / ``_CERTIFICATE`` variables; a
  malformed header setting is a ``ConfigError`` that never shows a value (see
  :mod:`~adaptive_runtime_sdk.credentials`), and the CA file wins over
  ``REQUESTS_CA_BUNDLE`` for OTLP/HTTP.
- No endpoint → the embedded default: OTLP/JSON lines files ``traces.jsonl`` and
  ``metrics.jsonl`` under ``directory`` (argument, ``ADAPTIVE_RUNTIME_TELEMETRY_DIR``, else
  ``./adaptive-runtime-telemetry``) — what the Collector's ``otlpjsonfile`` receiver reads, so
  a run can be replayed into Jaeger later.
- A Prometheus port (argument or ``ADAPTIVE_RUNTIME_PROMETHEUS_PORT``; ``True`` / ``on``
  for the default, 9464) → also a scrape endpoint, on ``prometheus_host`` /
  ``OTEL_EXPORTER_PROMETHEUS_HOST`` (default ``127.0.0.1``: this machine only). A port already
  taken (another rank's, say) is one warning line and no endpoint; nothing else changes.
- ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER`` (or ``traces_exporter`` /
  ``metrics_exporter``), one value each: ``otlp`` (to the endpoint; none configured → the
  specification's default, ``http://localhost:4318``, or ``:4317`` over gRPC), ``console``
  (the SDK's console exporters, on stdout) or ``none`` (that signal is not exported: no spans
  are even recorded; no periodic metric export); for metrics also ``prometheus`` (no push
  export; the scrape endpoint on ``OTEL_EXPORTER_PROMETHEUS_HOST`` /
  ``OTEL_EXPORTER_PROMETHEUS_PORT``, default ``127.0.0.1:9464``). Unset: an endpoint → OTLP,
  else the files.
- The resource: ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_SERVICE_NAME`` and the arguments, by the
  specification's precedence, with a ``service.instance.id`` per process (see
  :mod:`~adaptive_runtime_sdk.resource`).
- An endpoint without an OTLP metrics service (gRPC ``UNIMPLEMENTED``, HTTP 404/405: a
  traces-only backend such as Jaeger) gets one warning saying metrics export is off and why,
  then metric export stops; traces go on.
- ``OTEL_SDK_DISABLED=true`` → nothing is set up and nothing is exported.

An application that already set its own tracer or meter provider keeps it: ``configure()``
then only switches the runtimes' instrumentation on. Shutdown (also at interpreter exit)
flushes the runtimes' span buffers first, then the providers, so every span the trace gate
admitted reaches the exporter.

Set once, as OpenTelemetry's own providers are: the API accepts one global tracer and meter
provider per process, so the first ``configure()`` decides and its configuration stays. A later
call checks its settings (a bad one is still a ``ConfigError``), then warns
(:class:`~adaptive_runtime.config.ConfigWarning`) and returns the first handle unchanged.
After ``shutdown()`` too: OpenTelemetry cannot install global providers again, and an
application's own tracers hold the first, shut-down ones, so telemetry stays off in this
process; the warning says so. (Earlier versions re-pointed the installed providers' exporters
on every call; a program that sends elsewhere half-way through runs as two processes.)

Forked children, interpreter exit and ``multiprocessing`` workers' exit: see ``lifecycle``.
"""

from __future__ import annotations

import functools
import logging
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import ConsoleSpanExporter

from adaptive_runtime.config import ConfigWarning
from adaptive_runtime.errors import ConfigError
from adaptive_runtime.telemetry import instrumentation
from adaptive_runtime.telemetry.deadline import (
    DEFAULT_SHUTDOWN_TIMEOUT_S,
    resolve_shutdown_timeout,
    set_shutdown_timeout_s,
)
from adaptive_runtime.telemetry.defaults import (
    DEFAULT_DIRECTORY,
    DEFAULT_PROMETHEUS_HOST,
    DEFAULT_PROMETHEUS_PORT,
)
from adaptive_runtime.telemetry.stats import stats

from . import handle
from .credentials import check_header_settings
from .export import batch_settings
from .exporters import (
    GuardedMetricExporter,
    GuardedSpanExporter,
    quiet_repeated_exporter_logs,
)
from .handle import Telemetry
from .otlp_json_file import OtlpJsonFileSpanExporter
from .providers import (
    app_has_meter_provider,
    app_has_tracer_provider,
    install_meter_provider,
    install_tracer_provider,
    make_metric_exporter,
    make_span_exporter,
    serve_prometheus,
)
from .resource import make_resource

__all__ = ["configure", "resolve_prometheus_port"]

_log = logging.getLogger(__name__)

_PROTOCOLS = ("grpc", "http/protobuf")
_MAX_METRICS_INTERVAL_S = 365 * 24 * 3600.0
# the values of OTEL_{TRACES,METRICS}_EXPORTER we take
_EXPORTERS = {"TRACES": ("otlp", "console", "none"),
              "METRICS": ("otlp", "console", "prometheus", "none")}


@dataclass(frozen=True)
class _Settings:
    """What :func:`configure` resolved from its arguments and the environment, every value
    checked before anything is installed."""

    endpoint: str | None
    # (not in repr: the headers are credentials, and the environment holds them too)
    headers: dict[str, str] | None = field(repr=False)
    env: Any = field(repr=False)
    trace_protocol: str
    metric_protocol: str
    traces_choice: str | None
    metrics_choice: str | None
    port: int | None
    host: str
    resource: Resource
    metrics_interval_s: float


def configure(service_name: str | None = None, endpoint: str | None = None,
              prometheus_port: int | bool | None = None, *, protocol: str | None = None,
              headers: dict[str, str] | None = None, directory: str | None = None,
              metrics_interval_s: float = 10.0, prometheus_host: str | None = None,
              traces_exporter: str | None = None, metrics_exporter: str | None = None,
              environ: dict[str, str] | None = None,
              shutdown_timeout_s: float | None = None,
              default_service_name: str | None = None) -> Telemetry:
    """Set up tracing and metrics export for adaptive_runtime (see the module docstring).

    ``service_name`` names the service whatever the environment says;
    ``default_service_name`` only where ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``
    name none (a script's own name for itself).

    Every setting is checked before anything is installed: :class:`ConfigError` for a bad
    protocol, exporter, port, interval or resource attribute names the argument or variable
    it came from. Set once per process: a later call warns and returns the first handle (see
    the module docstring).
    """
    env = os.environ if environ is None else environ
    _check_arguments(service_name=service_name, endpoint=endpoint, headers=headers,
                     directory=directory, prometheus_host=prometheus_host,
                     default_service_name=default_service_name,
                     metrics_interval_s=metrics_interval_s)
    disabled = env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
    settings = None
    if not disabled:  # validate everything first: a bad setting installs nothing
        settings = _resolve(endpoint, prometheus_port, protocol, headers, metrics_interval_s,
                            prometheus_host, traces_exporter, metrics_exporter, env,
                            service_name, default_service_name)
    with handle._lock:
        if settings is not None:
            batch = batch_settings(env)
            bound = resolve_shutdown_timeout(shutdown_timeout_s, env)
        first = handle._first
        if first is not None:
            _warn_set_once(first)
            return first
        set_shutdown_timeout_s(DEFAULT_SHUTDOWN_TIMEOUT_S if settings is None else bound)
        if settings is None:
            handle._first = handle._current = Telemetry(enabled=False)
            return handle._first
        telemetry, record_spans = _install(settings, batch, directory)
        handle._first = handle._current = telemetry
    quiet_repeated_exporter_logs()
    instrumentation.activate(spans=record_spans)
    return telemetry


def _warn_set_once(first: Telemetry) -> None:
    """The warning of a ``configure()`` after the first (see the module docstring)."""
    if first._shut_down:
        now = "telemetry was shut down and stays off in this process"
    elif first.enabled:
        now = ("the first configuration stays (traces: "
               f"{first.traces_destination or 'not ours'}, metrics: "
               f"{first.metrics_destination or 'not ours'})")
    else:
        now = "the first configuration stays (telemetry off: OTEL_SDK_DISABLED)"
    warnings.warn(f"ar.telemetry.configure() was called before in this process; "
                  f"OpenTelemetry's providers are set once, so this call changes nothing and "
                  f"returns the first handle: {now}", ConfigWarning, stacklevel=3)


def _resolve(endpoint: str | None, prometheus_port: int | bool | None, protocol: str | None,
             headers: dict[str, str] | None, metrics_interval_s: float,
             prometheus_host: str | None, traces_exporter: str | None,
             metrics_exporter: str | None, env: Any, service_name: str | None,
             default_service_name: str | None) -> _Settings:
    """Every setting of :func:`configure`, checked (:class:`ConfigError` naming its argument
    or variable); nothing installed yet."""
    trace_protocol = _protocol("TRACES", protocol, env)
    metric_protocol = _protocol("METRICS", protocol, env)
    traces_choice = _exporter_choice("TRACES", traces_exporter, env)
    metrics_choice = _exporter_choice("METRICS", metrics_exporter, env)
    port = resolve_prometheus_port(prometheus_port, env)
    if port is None and metrics_choice == "prometheus":
        port = _otel_prometheus_port(env)
    host = prometheus_host or env.get("OTEL_EXPORTER_PROMETHEUS_HOST", "").strip() \
        or DEFAULT_PROMETHEUS_HOST
    check_header_settings(headers, env)  # (its errors never show a header's value)
    resource = make_resource(service_name, default_service_name, env)
    return _Settings(endpoint=endpoint, headers=headers, env=env,
                     trace_protocol=trace_protocol, metric_protocol=metric_protocol,
                     traces_choice=traces_choice, metrics_choice=metrics_choice, port=port,
                     host=host, resource=resource, metrics_interval_s=metrics_interval_s)


def _install(settings: _Settings, batch: tuple[int, int, float],
             directory: str | None) -> tuple[Telemetry, bool]:
    """Install the providers for ``settings``, under configure()'s lock: the new
    handle, and whether runtimes are to record spans."""
    # The scrape endpoint first: a port already taken (another rank's) is a warning and
    # no endpoint, decided before any provider is installed.
    port, server = settings.port, None
    if port is not None and not app_has_meter_provider():
        server = serve_prometheus(port, settings.host)
        if server is None:
            port = None
    folder = directory or settings.env.get("ADAPTIVE_RUNTIME_TELEMETRY_DIR") or DEFAULT_DIRECTORY
    telemetry = Telemetry(enabled=True)
    record_spans = _set_up_traces(telemetry, settings, batch, folder)
    server = _set_up_metrics(telemetry, settings, folder, port is not None, server)
    if server is not None:  # (not used after all: no meter provider of ours)
        server.shutdown()
        server.server_close()
    telemetry._baseline = stats()
    return telemetry, record_spans


def _set_up_traces(telemetry: Telemetry, settings: _Settings, batch: tuple[int, int, float],
                   folder: str) -> bool:
    """The tracer provider and its exporter (unless the application has its own); whether
    runtimes are to record spans."""
    choice = settings.traces_choice
    if app_has_tracer_provider():
        _log.info("adaptive_runtime: keeping the application's tracer provider")
    elif choice == "none":
        return False  # (no provider: runtimes make no spans only to have them dropped)
    else:
        make = functools.partial(make_span_exporter, choice, settings.endpoint,
                                 settings.trace_protocol, settings.headers, folder, settings.env)
        exporter, telemetry.traces_destination = make()
        # (the file and console exporters serve a forked child as they are; a network
        # exporter's connections would be shared with the parent: made afresh there)
        remake = (None if isinstance(exporter, OtlpJsonFileSpanExporter | ConsoleSpanExporter)
                  else lambda: make()[0])
        telemetry.tracer_provider = install_tracer_provider(
            settings.resource, GuardedSpanExporter(exporter, remake), batch)
    return True


def _set_up_metrics(telemetry: Telemetry, settings: _Settings, folder: str, prometheus: bool,
                    server: Any) -> Any:
    """The meter provider, its exporter and the scrape endpoint (unless the application has
    its own meter provider); the scrape endpoint's server if it was not used after all."""
    if app_has_meter_provider():
        _log.info("adaptive_runtime: keeping the application's meter provider")
        return server
    metric_exporter = None
    if settings.metrics_choice not in ("none", "prometheus"):
        target, telemetry.metrics_destination = make_metric_exporter(
            settings.metrics_choice, settings.endpoint, settings.metric_protocol,
            settings.headers, folder, settings.env)
        metric_exporter = GuardedMetricExporter(target, telemetry.metrics_destination)
    telemetry.meter_provider = install_meter_provider(
        settings.resource, metric_exporter, settings.metrics_interval_s, prometheus)
    if server is not None:
        telemetry._prometheus_server = server
        telemetry.prometheus_port = server.server_address[1]
        return None
    return server


def _check_arguments(*, metrics_interval_s: object, headers: object,
                     **texts: object) -> None:
    """:class:`ConfigError` naming the first argument of ``configure()`` of the wrong type or
    out of range (checked before anything is set up)."""
    for name, value in texts.items():
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{name} must be a str (or None), got {value!r}", field=name)
    if headers is not None and not (
            isinstance(headers, Mapping)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items())):
        # (the values are secrets: never shown)
        raise ConfigError("headers must be a dict of str names to str values",
                          field="headers")
    interval = metrics_interval_s
    # (at most a year: the SDK's reader thread waits this long, and a wait past what the
    # platform's clock can hold raises on that thread)
    if (isinstance(interval, bool) or not isinstance(interval, int | float)
            or not 0 < interval <= _MAX_METRICS_INTERVAL_S):
        shown = f"an int of {interval.bit_length()} bits" if isinstance(interval, int) \
            and interval.bit_length() > 1000 else repr(interval)
        raise ConfigError(f"metrics_interval_s must be a number > 0 and <= "
                          f"{_MAX_METRICS_INTERVAL_S:g} (a year), got {shown}",
                          field="metrics_interval_s")


def _exporter_choice(signal: str, argument: str | None, env: Any) -> str | None:
    """``otlp``, ``console``, ``none`` (metrics: also ``prometheus``) from the argument, else
    ``OTEL_{signal}_EXPORTER``; ``None`` when neither is set (the default: an endpoint →
    OTLP, else the files)."""
    exporters = _EXPORTERS[signal]
    accepted = ", ".join(exporters)
    for source, raw in ((f"{signal.lower()}_exporter={argument!r}", argument),
                        (f"OTEL_{signal}_EXPORTER", env.get(f"OTEL_{signal}_EXPORTER"))):
        if raw is not None and not isinstance(raw, str):
            raise ConfigError(f"{source}: the exporter must be one of {accepted}, a str")
        if raw is None or not raw.strip():
            continue
        values = [value.strip().lower() for value in raw.split(",") if value.strip()]
        if len(values) != 1:
            raise ConfigError(f"{source}: one exporter per signal is supported, one of "
                              f"{accepted}; got the list {raw!r}")
        if values[0] not in exporters:
            hint = (" (Prometheus scrapes metrics: OTEL_METRICS_EXPORTER=prometheus)"
                    if values[0] == "prometheus" else "")
            raise ConfigError(f"{source}: the exporter must be one of {accepted} (a single "
                              f"value), got {raw!r}{hint}")
        return values[0]
    return None


def _protocol(signal: str, protocol: str | None, env: Any) -> str:
    for source, value in ((f"protocol={protocol!r}", protocol),
                          (f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL",
                           env.get(f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL")),
                          ("OTEL_EXPORTER_OTLP_PROTOCOL", env.get("OTEL_EXPORTER_OTLP_PROTOCOL"))):
        if value:
            value = value.strip().lower() if isinstance(value, str) else value
            if value not in _PROTOCOLS:
                raise ConfigError(f"{source}: the OTLP protocol must be one of "
                                  f"{', '.join(_PROTOCOLS)}, got {value!r}")
            return value
    return "http/protobuf"


def resolve_prometheus_port(port: int | bool | None, env: Any) -> int | None:
    source = "prometheus_port"
    if port is None:
        raw = env.get("ADAPTIVE_RUNTIME_PROMETHEUS_PORT", "").strip()
        if not raw:
            return None
        source = "ADAPTIVE_RUNTIME_PROMETHEUS_PORT"
        if raw.lower() in ("on", "true", "yes", "default"):
            return DEFAULT_PROMETHEUS_PORT
        try:
            port = int(raw)
        except ValueError:
            raise ConfigError(f"{source}={raw!r} is not a port number (0-65535) or "
                              f"'on' (port {DEFAULT_PROMETHEUS_PORT})") from None
    if port is True:
        return DEFAULT_PROMETHEUS_PORT
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigError(f"{source} must be a port number 0-65535 (or True for "
                          f"{DEFAULT_PROMETHEUS_PORT}), got {port!r}", field="prometheus_port")
    return port


def _otel_prometheus_port(env: Any) -> int:
    """``OTEL_EXPORTER_PROMETHEUS_PORT`` (``OTEL_METRICS_EXPORTER=prometheus``), default 9464."""
    raw = env.get("OTEL_EXPORTER_PROMETHEUS_PORT", "").strip()
    if not raw:
        return DEFAULT_PROMETHEUS_PORT
    try:
        port = int(raw)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ConfigError(f"OTEL_EXPORTER_PROMETHEUS_PORT={raw!r} is not a port number "
                          f"(0-65535)")
    return port
