"""Fixtures for integration tests: a real OTLP receiver (gRPC + HTTP) on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from otlp_receiver import OtlpReceiver


@pytest.fixture
def otlp_receiver() -> Iterator[OtlpReceiver]:
    """A started :class:`OtlpReceiver` on fresh loopback ports, stopped at teardown however the
    test ends. Point the SDK's gRPC exporters at ``grpc_endpoint`` (``insecure=True``) and its
    HTTP exporters at ``http_traces_url`` / ``http_metrics_url``."""
    receiver = OtlpReceiver()
    receiver.start()
    try:
        yield receiver
    finally:
        receiver.stop()


# ---------------------------------------------------------------------------- Prometheus

from collections.abc import Callable, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402

from opentelemetry.exporter.prometheus import PrometheusMetricReader  # noqa: E402
from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from prometheus_client import CollectorRegistry, start_http_server  # noqa: E402
from prometheus_server import PrometheusServer  # noqa: E402
from required import require_binary  # noqa: E402


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[..., PrometheusServer]]:
    """Factory: ``prometheus(["127.0.0.1:PORT"])`` starts a real Prometheus scraping those
    targets every second (ready when it returns; ``features=["exemplar-storage"]`` turns
    feature flags on); every server started is stopped at
    teardown. Skips when the ``prometheus`` binary is missing (``make test`` installs the
    Debian package ``prometheus``, which also provides ``promtool``)."""
    require_binary("prometheus", "prometheus")
    servers: list[PrometheusServer] = []

    def start(targets: Sequence[str], features: Sequence[str] = ()) -> PrometheusServer:
        server = PrometheusServer(targets, workdir=tmp_path / f"prometheus-{len(servers)}",
                                  features=features)
        servers.append(server)
        return server.start()

    try:
        yield start
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def prometheus_endpoint() -> Iterator[tuple[MeterProvider, str]]:
    """A MeterProvider whose PrometheusMetricReader is served on a free loopback port, by
    ``prometheus_client``'s HTTP server. The reader gets a registry of its own, so nothing is
    left on ``prometheus_client.REGISTRY`` (a process global) after the test."""
    registry = CollectorRegistry()
    reader = PrometheusMetricReader(registry=registry)
    provider = MeterProvider(metric_readers=[reader])
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        yield provider, f"127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
        provider.shutdown()  # the reader unregisters its collector
