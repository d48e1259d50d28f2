"""Which shutdown bound is in force: the argument, the runtime's variable, the OTLP timeouts."""

from __future__ import annotations

import pytest

from adaptive_runtime.errors import ConfigError
from adaptive_runtime.telemetry.deadline import (
    DEFAULT_SHUTDOWN_TIMEOUT_S,
    ENV_VAR,
    resolve_shutdown_timeout,
)


def test_nothing_set_gives_the_documented_default() -> None:
    assert resolve_shutdown_timeout(None, {}) == DEFAULT_SHUTDOWN_TIMEOUT_S == 2.0


@pytest.mark.parametrize("variable", ["OTEL_EXPORTER_OTLP_TIMEOUT",
                                      "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
                                      "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT"])
def test_an_otlp_timeout_shorter_than_the_default_shortens_the_bound(variable: str) -> None:
    assert resolve_shutdown_timeout(None, {variable: "0.5"}) == 0.5


def test_an_otlp_timeout_longer_than_the_default_leaves_the_default() -> None:
    assert resolve_shutdown_timeout(None, {"OTEL_EXPORTER_OTLP_TIMEOUT": "30"}) == 2.0


def test_the_shortest_of_the_per_signal_timeouts_wins() -> None:
    env = {"OTEL_EXPORTER_OTLP_TIMEOUT": "1.5", "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT": "0.25"}
    assert resolve_shutdown_timeout(None, env) == 0.25


def test_the_runtime_variable_overrides_the_otlp_timeouts_and_the_default() -> None:
    env = {ENV_VAR: "7", "OTEL_EXPORTER_OTLP_TIMEOUT": "0.5"}
    assert resolve_shutdown_timeout(None, env) == 7.0


def test_the_argument_overrides_every_variable() -> None:
    env = {ENV_VAR: "7", "OTEL_EXPORTER_OTLP_TIMEOUT": "0.5"}
    assert resolve_shutdown_timeout(0.75, env) == 0.75
    assert resolve_shutdown_timeout(0, env) == 0.0


@pytest.mark.parametrize(("argument", "env", "named"), [
    (True, {}, "shutdown_timeout_s"),
    (-1.0, {}, "shutdown_timeout_s"),
    (float("nan"), {}, "shutdown_timeout_s"),
    (None, {ENV_VAR: "soon"}, ENV_VAR),
    (None, {ENV_VAR: "inf"}, ENV_VAR),
    (None, {"OTEL_EXPORTER_OTLP_TIMEOUT": "0"}, "OTEL_EXPORTER_OTLP_TIMEOUT"),
])
def test_a_bad_value_is_a_config_error_naming_its_source(argument: object, env: dict[str, str],
                                                         named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        resolve_shutdown_timeout(argument, env)  # type: ignore[arg-type]
