"""RuntimeConfig: validation at construction, from_env for every ADAPTIVE_RUNTIME_* variable."""

from __future__ import annotations

import math
import re

import pytest

import adaptive_runtime as ar
from adaptive_runtime.gating import TraceGate
from adaptive_runtime.knobs import KNOB_NAMES, PolicyConfig
from adaptive_runtime.offline.replay import parse_config
from adaptive_runtime.operations import DeviceProbe

Backend = ar.Backend
P = "ADAPTIVE_RUNTIME_"


def test_defaults_mirror_trueno() -> None:
    cfg = ar.RuntimeConfig()
    assert cfg.sampling_threshold_us == 100
    assert cfg.hot_path_calls_per_sec == 10_000
    assert cfg.force_backend is None
    assert cfg.disabled_backends == frozenset()
    assert cfg.tracing is True


def test_config_is_frozen() -> None:
    cfg = ar.RuntimeConfig()
    with pytest.raises(AttributeError):
        cfg.sampling_threshold_us = 5.0  # type: ignore[misc]


@pytest.mark.parametrize(("fields", "name", "range_text"), [
    ({"sampling_threshold_us": -1.0}, "sampling_threshold_us", ">= 0"),
    ({"sampling_threshold_us": float("nan")}, "sampling_threshold_us", "number"),
    ({"sampling_threshold_us": float("inf")}, "sampling_threshold_us", "finite"),
    ({"hot_path_calls_per_sec": 0}, "hot_path_calls_per_sec", "> 0"),
    ({"hot_path_calls_per_sec": -5.0}, "hot_path_calls_per_sec", "> 0"),
    ({"max_measure_period": 3}, "max_measure_period", "power of two"),
    ({"max_measure_period": 1000}, "max_measure_period", "power of two"),
    ({"max_measure_period": 0}, "max_measure_period", ">= 1"),
    ({"max_history_keys": 0}, "max_history_keys", ">= 1"),
    ({"switch_margin": 0.95}, "switch_margin", "<= 0.9"),
    ({"spans_per_sec": -1.0}, "spans_per_sec", ">= 0"),
    ({"spans_per_sec": float("nan")}, "spans_per_sec", "number"),
    ({"min_samples_per_arm": 0}, "min_samples_per_arm", ">= 1"),
    ({"tracing": "yes"}, "tracing", "True or False"),
    ({"host_arms_on_device": 1}, "host_arms_on_device", "True or False"),
    ({"choose_threads": "off"}, "choose_threads", "True or False"),
    ({"history_force": "no"}, "history_force", "True or False"),
    ({"sampling_threshold_us": True}, "sampling_threshold_us", "number"),
    ({"max_history_keys": 10.0}, "max_history_keys", "integer"),
])
def test_invalid_field_error_names_field_and_range(fields: dict[str, object], name: str,
                                                   range_text: str) -> None:
    with pytest.raises(ar.ConfigError) as info:
        ar.RuntimeConfig(**fields)  # type: ignore[arg-type]
    message = str(info.value)
    assert name in message
    assert range_text in message


def _trace_gate(config: ar.RuntimeConfig | None = None) -> TraceGate:
    """The trace gate of a runtime made with ``config`` (``rt.step_hooks()``: span sink, gate)."""
    _sink, gate = ar.AdaptiveRuntime(config, builtin_ops=False).step_hooks()
    return gate


def test_trace_cpu_share_is_accepted_with_a_deprecation_warning_and_changes_nothing() -> None:
    for share in (0.0, 0.01, math.inf):
        with pytest.warns(DeprecationWarning, match="trace_cpu_share has no effect"):
            config = ar.RuntimeConfig(trace_cpu_share=share)  # type: ignore[call-arg]
        assert config == ar.RuntimeConfig()
    with pytest.warns(DeprecationWarning, match="spans_per_sec"):
        ar.RuntimeConfig().replace(trace_cpu_share=0.01)


def test_an_infinite_spans_per_sec_lifts_every_span_budget() -> None:
    assert ar.RuntimeConfig(spans_per_sec=math.inf).spans_per_sec == math.inf
    env = ar.RuntimeConfig.from_env({"ADAPTIVE_RUNTIME_SPANS_PER_SEC": "inf"})
    assert env.spans_per_sec == math.inf
    gate = _trace_gate(env)
    assert gate.spans_per_sec_per_key == gate.routine_spans_per_sec == math.inf
    assert gate.step_spans_per_sec == math.inf


def test_the_keys_routine_and_step_span_budgets_are_shares_of_spans_per_sec() -> None:
    gate = _trace_gate(ar.RuntimeConfig(spans_per_sec=50.0))
    assert (gate.spans_per_sec_per_key, gate.routine_spans_per_sec,
            gate.step_spans_per_sec) == (5.0, 1.0, 5.0)
    default = _trace_gate()
    assert (default.spans_per_sec_per_key, default.routine_spans_per_sec,
            default.step_spans_per_sec) == (20.0, 4.0, 20.0)


def test_config_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        ar.RuntimeConfig(sampling_threshold_us=-1)


def test_forced_backend_that_is_also_disabled_is_rejected() -> None:
    with pytest.raises(ar.ConfigError, match=r"force_backend.*disabled_backends"):
        ar.RuntimeConfig(force_backend="gpu", disabled_backends={"gpu"})


def test_disabling_every_arm_is_rejected() -> None:
    with pytest.raises(ar.ConfigError, match="disabled_backends") as info:
        ar.RuntimeConfig(disabled_backends=["gpu", "simd", "scalar"])
    assert "at least one" in str(info.value)


def test_unknown_backend_name_in_config_lists_accepted_names() -> None:
    with pytest.raises(ar.ConfigError) as info:
        ar.RuntimeConfig(force_backend="tpu")
    message = str(info.value)
    assert "force_backend" in message and "tpu" in message
    assert all(b.value in message for b in Backend)


def test_friendly_backend_inputs_are_normalised() -> None:
    cfg = ar.RuntimeConfig(force_backend=" SIMD ", disabled_backends="gpu, scalar")
    assert cfg.force_backend is Backend.SIMD
    assert cfg.disabled_backends == frozenset({Backend.GPU, Backend.SCALAR})


def test_replace_validates_the_copy() -> None:
    cfg = ar.RuntimeConfig()
    assert cfg.replace(sampling_threshold_us=5).sampling_threshold_us == 5.0
    with pytest.raises(ar.ConfigError, match="sampling_threshold_us"):
        cfg.replace(sampling_threshold_us=-5)


# --------------------------------------------------------------------------- from_env


def test_from_env_with_no_variables_gives_defaults() -> None:
    assert ar.RuntimeConfig.from_env({}) == ar.RuntimeConfig()


def test_from_env_ignores_empty_values() -> None:
    assert ar.RuntimeConfig.from_env({P + "SAMPLING_THRESHOLD_US": "  "}) == ar.RuntimeConfig()


@pytest.mark.parametrize(("var", "raw", "field", "expected"), [
    ("FORCE_BACKEND", "scalar", "force_backend", Backend.SCALAR),
    ("FORCE_BACKEND", "GPU", "force_backend", Backend.GPU),
    ("DISABLE_BACKENDS", "gpu,scalar", "disabled_backends",
     frozenset({Backend.GPU, Backend.SCALAR})),
    ("DISABLE_BACKENDS", " gpu , ", "disabled_backends", frozenset({Backend.GPU})),
    ("SAMPLING_THRESHOLD_US", "250.5", "sampling_threshold_us", 250.5),
    ("HOT_PATH_CALLS_PER_SEC", "5000", "hot_path_calls_per_sec", 5000.0),
    ("HISTORY", "/tmp/adaptive-history.json", "history_path", "/tmp/adaptive-history.json"),
    ("TRACING", "off", "tracing", False),
    ("TRACING", "on", "tracing", True),
    ("TRACING", "OFF", "tracing", False),
    ("MAX_HISTORY_KEYS", "1000", "max_history_keys", 1000),
    ("MAX_MEASURE_PERIOD", "64", "max_measure_period", 64),
    ("HOST_ARMS_ON_DEVICE", "on", "host_arms_on_device", True),
    ("CHOOSE_THREADS", "off", "choose_threads", False),
    ("IMPORT_FRAMEWORKS", "yes", "import_frameworks", True),
])
def test_from_env_reads_each_variable(var: str, raw: str, field: str,
                                      expected: object) -> None:
    cfg = ar.RuntimeConfig.from_env({P + var: raw})
    assert getattr(cfg, field) == expected


def test_from_env_overrides_win_over_the_environment() -> None:
    cfg = ar.RuntimeConfig.from_env({P + "SAMPLING_THRESHOLD_US": "5"},
                                    sampling_threshold_us=7.0)
    assert cfg.sampling_threshold_us == 7.0


def test_from_env_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(P + "HOT_PATH_CALLS_PER_SEC", "1234")
    assert ar.RuntimeConfig.from_env().hot_path_calls_per_sec == 1234.0


@pytest.mark.parametrize(("var", "raw"), [
    ("FORCE_BACKEND", "tpu"),
    ("DISABLE_BACKENDS", "gpu,tpu"),
    ("DISABLE_BACKENDS", "gpu,simd,scalar"),
    ("SAMPLING_THRESHOLD_US", "fast"),
    ("SAMPLING_THRESHOLD_US", "-1"),
    ("SAMPLING_THRESHOLD_US", "nan"),
    ("SAMPLING_THRESHOLD_US", "inf"),
    ("HOT_PATH_CALLS_PER_SEC", "0"),
    ("HOT_PATH_CALLS_PER_SEC", "lots"),
    ("TRACING", "maybe"),
    ("HOST_ARMS_ON_DEVICE", "sometimes"),
    ("CHOOSE_THREADS", "fewer"),
    ("MAX_MEASURE_PERIOD", "100"),
])
def test_from_env_bad_value_raises_config_error_naming_the_variable(var: str, raw: str) -> None:
    with pytest.raises(ar.ConfigError) as info:
        ar.RuntimeConfig.from_env({P + var: raw})
    assert re.search(rf"\b{P + var}\b", str(info.value)), str(info.value)


def test_from_env_forced_and_disabled_conflict_names_a_variable() -> None:
    with pytest.raises(ar.ConfigError) as info:
        ar.RuntimeConfig.from_env({P + "FORCE_BACKEND": "gpu", P + "DISABLE_BACKENDS": "gpu"})
    assert P in str(info.value)


def test_from_env_error_names_the_variable_not_one_sharing_its_prefix() -> None:
    # HISTORY is a prefix of HISTORY_SAVE_INTERVAL_S: the error must blame the right one.
    env = {P + "HISTORY": "/tmp/adaptive-history.json", P + "HISTORY_SAVE_INTERVAL_S": "-1"}
    with pytest.raises(ar.ConfigError) as info:
        ar.RuntimeConfig.from_env(env)
    message = str(info.value)
    assert re.search(rf"\b{P}HISTORY_SAVE_INTERVAL_S\b", message), message
    assert not re.search(rf"\b{P}HISTORY\b(?!_)", message), message


# --------------------------------------------------------------------------- runtime start-up


def test_forced_gpu_without_gpu_is_backend_unavailable_at_construction() -> None:
    with pytest.raises(ar.BackendUnavailableError, match="gpu"):
        ar.AdaptiveRuntime(ar.RuntimeConfig(force_backend="gpu"), builtin_ops=False,
                           devices=DeviceProbe(gpu=False))


def test_forced_gpu_with_fake_gpu_constructs() -> None:
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(force_backend="gpu"), builtin_ops=False,
                            devices=DeviceProbe(gpu=True))
    assert rt.config.force_backend is Backend.GPU


def test_runtime_rejects_a_non_config() -> None:
    with pytest.raises(TypeError, match="RuntimeConfig"):
        ar.AdaptiveRuntime({"tracing": False}, builtin_ops=False)  # type: ignore[arg-type]


@pytest.mark.parametrize("field", ["disabled_backends", "force_backend", "sampling_threshold_us",
                                   "tracing", "history_path", "max_measure_period"])
@pytest.mark.parametrize("huge", [1 << 20_000, [1 << 20_000]], ids=["int", "in a list"])
def test_an_int_too_long_to_print_is_a_config_error_that_says_so(field: str, huge) -> None:
    # (Python refuses to print an int past 4,300 digits: the message must not try)
    with pytest.raises(ar.ConfigError) as raised:
        ar.RuntimeConfig(**{field: huge})
    assert raised.value.field == field


def test_the_trace_key_interval_comes_from_the_environment_and_must_be_positive() -> None:
    env = {"ADAPTIVE_RUNTIME_TRACE_KEY_INTERVAL_S": "2.5"}
    assert ar.RuntimeConfig.from_env(env).trace_key_interval_s == 2.5
    assert ar.RuntimeConfig.from_env({"ADAPTIVE_RUNTIME_TRACE_KEY_INTERVAL_S": "inf"}
                                     ).trace_key_interval_s == float("inf")
    assert ar.RuntimeConfig().trace_key_interval_s == 10.0
    for bad in ("0", "-1", "nan", "soon"):
        with pytest.raises(ar.ConfigError, match="TRACE_KEY_INTERVAL_S"):
            ar.RuntimeConfig.from_env({"ADAPTIVE_RUNTIME_TRACE_KEY_INTERVAL_S": bad})


def _other_value(name: str) -> int | float:
    """A valid value of knob ``name`` other than its default."""
    default = getattr(PolicyConfig(), name)
    if isinstance(default, int):
        return default + 1
    try:
        PolicyConfig(**{name: default * 2})
    except ar.ConfigError:  # (a share or a margin near its top)
        return default / 2
    return default * 2


@pytest.mark.parametrize("name", KNOB_NAMES)
def test_each_policy_knob_has_one_name_in_the_config_the_environment_and_replay(
        name: str) -> None:
    value = _other_value(name)
    variable = "ADAPTIVE_RUNTIME_" + name.upper()
    from_env = ar.RuntimeConfig.from_env({variable: str(value)})
    assert getattr(from_env, name) == value
    assert getattr(from_env.policy_config(), name) == value  # what the runtime's policy gets
    assert getattr(ar.RuntimeConfig(**{name: value}).policy_config(), name) == value
    assert getattr(parse_config(f"{name}={value}"), name) == value
    assert getattr(ar.RuntimeConfig(), name) == getattr(PolicyConfig(), name)


def test_a_policy_knob_out_of_range_names_its_variable() -> None:
    with pytest.raises(ar.ConfigError, match="ADAPTIVE_RUNTIME_EXPLORE_SHARE: policy knob "
                                             r"explore_share must be >= 0 and <= 1"):
        ar.RuntimeConfig.from_env({"ADAPTIVE_RUNTIME_EXPLORE_SHARE": "1.5"})
    with pytest.raises(ValueError, match="did you mean min_samples_per_arm"):
        parse_config("min_samples=3")
