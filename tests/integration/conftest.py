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
