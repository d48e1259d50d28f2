"""How configure() reads its Prometheus setting (without starting anything)."""

from __future__ import annotations

import pytest

import adaptive_runtime as ar
from adaptive_runtime.telemetry.defaults import DEFAULT_PROMETHEUS_PORT
from adaptive_runtime_sdk.configure import resolve_prometheus_port


@pytest.mark.parametrize(("argument", "env", "port"), [
    (None, {}, None),
    (None, {"ADAPTIVE_RUNTIME_PROMETHEUS_PORT": ""}, None),
    (None, {"ADAPTIVE_RUNTIME_PROMETHEUS_PORT": "9100"}, 9100),
    (None, {"ADAPTIVE_RUNTIME_PROMETHEUS_PORT": "on"}, DEFAULT_PROMETHEUS_PORT),
    (True, {}, DEFAULT_PROMETHEUS_PORT),
    (9200, {"ADAPTIVE_RUNTIME_PROMETHEUS_PORT": "9100"}, 9200),  # the argument wins
])
def test_prometheus_port_from_argument_or_environment(argument, env, port) -> None:
    assert resolve_prometheus_port(argument, env) == port
    assert DEFAULT_PROMETHEUS_PORT == 9464


@pytest.mark.parametrize(("argument", "env", "named"), [
    (None, {"ADAPTIVE_RUNTIME_PROMETHEUS_PORT": "http"}, "ADAPTIVE_RUNTIME_PROMETHEUS_PORT"),
    (None, {"ADAPTIVE_RUNTIME_PROMETHEUS_PORT": "70000"}, "ADAPTIVE_RUNTIME_PROMETHEUS_PORT"),
    (-1, {}, "prometheus_port"),
    (False, {}, "prometheus_port"),
    ("9464", {}, "prometheus_port"),
])
def test_a_bad_prometheus_port_names_where_it_came_from(argument, env, named) -> None:
    with pytest.raises(ar.ConfigError, match=named):
        resolve_prometheus_port(argument, env)
