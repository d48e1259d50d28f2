"""``ADAPTIVE_RUNTIME_*`` variables nothing reads (issue 41, finding 7): the runtime warns once
about each when it reads its configuration, naming the variable most likely meant; the lists
of variables the package reads stay complete (the package's sources and docs/configuration.md
name no other)."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

import adaptive_runtime as ar
from adaptive_runtime.config import (
    TELEMETRY_VARIABLES,
    ConfigWarning,
    config_variables,
    unknown_variables,
)

ROOT = Path(__file__).resolve().parents[2]
_NAME = re.compile(r"ADAPTIVE_RUNTIME_[A-Z0-9_]*[A-Z0-9]")


def test_an_unknown_variable_is_warned_about_once_naming_the_one_meant() -> None:
    env = {"ADAPTIVE_RUNTIME_SAMPLNG_THRESHOLD_US": "50"}
    with pytest.warns(ConfigWarning) as caught:
        config = ar.RuntimeConfig.from_env(env)
    assert config.sampling_threshold_us == 100.0  # (it changed nothing)
    assert [str(w.message) for w in caught] == [
        "ADAPTIVE_RUNTIME_SAMPLNG_THRESHOLD_US is not a variable adaptive_runtime reads, so it "
        "changes nothing: did you mean ADAPTIVE_RUNTIME_SAMPLING_THRESHOLD_US?"]
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        ar.RuntimeConfig.from_env(env)
    assert again == []


def test_a_runtime_made_from_the_environment_warns_about_a_misspelt_variable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADAPTIVE_RUNTIME_HOT_PATH_CALL_PER_SEC", "500")
    with pytest.warns(ConfigWarning, match="did you mean ADAPTIVE_RUNTIME_HOT_PATH_CALLS_PER_SEC"):
        rt = ar.AdaptiveRuntime(builtin_ops=False)
    assert rt.config.hot_path_calls_per_sec == 10_000.0


@pytest.mark.parametrize(("name", "meant"), [
    ("ADAPTIVE_RUNTIME_HISTORY_PATH", "ADAPTIVE_RUNTIME_HISTORY"),          # a field's name
    ("ADAPTIVE_RUNTIME_VALIDATE_SAMPLE_RATE", "ADAPTIVE_RUNTIME_VALIDATE"),
    ("ADAPTIVE_RUNTIME_DISABLED_BACKENDS", "ADAPTIVE_RUNTIME_DISABLE_BACKENDS"),
    ("ADAPTIVE_RUNTIME_sampling_threshold_us", "ADAPTIVE_RUNTIME_SAMPLING_THRESHOLD_US"),
    ("ADAPTIVE_RUNTIME_PROMETHEUS", "ADAPTIVE_RUNTIME_PROMETHEUS_PORT"),     # telemetry's
])
def test_an_unknown_name_points_at_the_variable_meant(name: str, meant: str) -> None:
    assert unknown_variables({name: "1"})[name].endswith(f"did you mean {meant}?")


def test_a_removed_variable_says_what_replaced_it_and_known_ones_pass() -> None:
    env = {"ADAPTIVE_RUNTIME_SPANS_PER_SEC_PER_KEY": "20", "ADAPTIVE_RUNTIME_TRACING": "off",
           "ADAPTIVE_RUNTIME_TELEMETRY_DIR": "/tmp/x", "OTEL_SERVICE_NAME": "job"}
    assert unknown_variables(env) == {
        "ADAPTIVE_RUNTIME_SPANS_PER_SEC_PER_KEY": "ADAPTIVE_RUNTIME_SPANS_PER_SEC_PER_KEY is no "
        "longer read: one key may take a tenth of ADAPTIVE_RUNTIME_SPANS_PER_SEC"}


def test_the_trace_cpu_share_variable_is_no_longer_read_and_warns_what_replaced_it() -> None:
    env = {"ADAPTIVE_RUNTIME_TRACE_CPU_SHARE": "inf"}
    assert unknown_variables(env)["ADAPTIVE_RUNTIME_TRACE_CPU_SHARE"].endswith(
        "no longer read: the span budget is ADAPTIVE_RUNTIME_SPANS_PER_SEC alone (inf lifts it)")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = ar.RuntimeConfig.from_env(env)
    assert config == ar.RuntimeConfig()
    assert [w.category for w in caught] == [ConfigWarning]


def test_every_variable_the_package_and_its_docs_name_is_known() -> None:
    known = {*config_variables(), *TELEMETRY_VARIABLES}
    named = {name for path in (ROOT / "adaptive_runtime").rglob("*.py")
             if path.name != "config.py"
             for name in _NAME.findall(path.read_text(encoding="utf-8"))}
    assert named and named <= known, named - known
    tables = [line for line in (ROOT / "docs" / "configuration.md").read_text().splitlines()
              if line.startswith("| `ADAPTIVE_RUNTIME_")]
    documented = {_NAME.findall(line)[0] for line in tables}
    assert documented == known  # (each variable read has its row, and no row names another)
