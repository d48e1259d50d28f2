"""Bad input: the public API fuzzed, and a million distinct operation names.

Every call either works or raises what its docstring promises (``TypeError``, ``ValueError``
or one of the package's own errors); nothing else escapes (no ``AttributeError``,
``OverflowError``, ``IndexError``, ...), and a rejected call leaves the runtime as it was: the
next normal call works and the counts and history snapshot still add up.

Names invented by callers (``select()`` / ``record_performance()`` take any name) must not grow
memory or telemetry without bound: history, hot-path states and trace-gate buckets are capped at
``max_history_keys``; metric and span attributes name at most ``MAX_SELECT_LABELS`` /
``MAX_REPORTED_KEYS`` (256) operations, the rest under one ``_other`` value.

Hypothesis runs with the pinned profile of ``tests/conftest.py`` (derandomized, no database).
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from internals import hot_path_entries, select_labels, selection_counters, trace_gate_keys
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otlp_receiver import OtlpReceiver

import adaptive_runtime as ar
from adaptive_runtime._dispatch import MAX_SELECT_LABELS, OTHER_LABEL
from adaptive_runtime.config import _ENV_NAMES, ENV_PREFIX
from adaptive_runtime.keys import MAX_SIZE
from adaptive_runtime.operations import DeviceProbe
from adaptive_runtime.telemetry.metrics import MAX_REPORTED_KEYS, OTHER_OPERATION

Backend = ar.Backend
# What the public API documents it raises; anything else reaching the caller is a crash.
DOCUMENTED = (TypeError, ValueError, ar.AdaptiveRuntimeError)
ROOT = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------------------- strategies

operation_names = st.one_of(
    st.text(min_size=1, max_size=12),
    st.sampled_from(["dot", "matmul", "conv2d", "add", "_other", "x" * 2000, "\x00",
                     "\ud800", "a\udfffb", " spaced ", "op@device"]),
)
bad_names = st.one_of(st.none(), st.integers(), st.floats(), st.binary(max_size=4),
                      st.just(""), st.just(b"dot"), st.just(("dot",)), st.just(Backend.GPU))
any_name = st.one_of(operation_names, bad_names)

good_sizes = st.one_of(st.integers(min_value=0, max_value=MAX_SIZE - 1),
                       st.sampled_from([0, 1, MAX_SIZE - 1, 2**63, 2**31]))
any_size = st.one_of(
    good_sizes,
    st.integers(max_value=-1),
    st.integers(min_value=MAX_SIZE, max_value=2**4000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(), st.none(), st.text(max_size=3),
    st.sampled_from([np.int64(7), np.uint64(2**64 - 1), np.int8(-1), np.float64(3.0),
                     10**5000]),
)
any_backend = st.one_of(
    st.sampled_from(list(Backend)),
    st.sampled_from(["gpu", "SIMD", " scalar ", "cuda", "", "tpu"]),
    st.none(), st.integers(), st.booleans(), st.binary(max_size=3),
)
any_duration = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.booleans(), st.none(), st.text(max_size=3),
    st.sampled_from([np.float64("nan"), np.float32(2.5), np.int64(9), -0.0, 5e-324, 1e308,
                     10**5000]),
)
call = st.one_of(
    st.tuples(st.just("select"), any_name, any_size),
    st.tuples(st.just("decide"), any_name, any_size),
    st.tuples(st.just("get_best_backend"), any_name, any_size),
    st.tuples(st.just("is_hot_path"), any_name),
    st.tuples(st.just("record_performance"), any_name, any_size, any_backend, any_duration),
)


class Tally:
    """Examples tried and calls accepted / rejected across one test's examples."""

    def __init__(self) -> None:
        self.examples = 0
        self.calls: Counter[str] = Counter()

    def outcome(self, fn: Callable[[], Any]) -> tuple[bool, Any]:
        """Run ``fn``; ``(True, result)`` or ``(False, the documented error)``. An
        undocumented exception propagates and fails the test."""
        try:
            result = fn()
        except DOCUMENTED as exc:
            self.calls["rejected"] += 1
            return False, exc
        self.calls["accepted"] += 1
        return True, result


def fresh_runtime(**config: Any) -> ar.AdaptiveRuntime:
    return ar.AdaptiveRuntime(ar.RuntimeConfig(tracing=False, **config), builtin_ops=False,
                              devices=DeviceProbe(gpu=False))


def assert_coherent(rt: ar.AdaptiveRuntime, selects: int) -> None:
    """The runtime still works and its books add up after whatever came before."""
    counted = sum(n for key, n in rt.selection_counts().items())
    assert counted == selects, (counted, selects)
    for record in rt.history_snapshot():
        assert isinstance(record.operation, str) and record.operation
        assert 0 <= record.size_bucket <= 64
        assert record.samples >= 1 and record.failures >= 0
        # NaN: no timing since a drift alarm; never negative or infinite
        assert math.isnan(record.mean_us) or 0.0 <= record.mean_us < math.inf, record
    chosen = rt.select("probe_after_fuzz", 1000)
    assert chosen in (Backend.SIMD, Backend.SCALAR)
    rt.record_performance("probe_after_fuzz", 1000, chosen, 12.5)
    assert rt.get_best_backend("probe_after_fuzz", 1000) in (Backend.SIMD, Backend.SCALAR)


# ---------------------------------------------------------------------------- Trueno core

_core = Tally()


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(calls=st.lists(call, min_size=1, max_size=8))
def _fuzz_core(calls: list[tuple[Any, ...]]) -> None:
    _core.examples += 1
    rt = fresh_runtime()
    selects = 0
    for method, *args in calls:
        ok, _ = _core.outcome(lambda m=method, a=args: getattr(rt, m)(*a))
        if method == "select" and ok:
            selects += 1
        assert_coherent(rt, selects)
        selects += 1  # (the probe's own select)


def test_fuzzed_select_record_and_queries_raise_only_documented_errors(reliability) -> None:
    _fuzz_core()
    assert _core.calls["rejected"] > 0 and _core.calls["accepted"] > 0
    reliability.record(load="Hypothesis: select/decide/get_best_backend/is_hot_path/"
                            "record_performance with wrong types, NaN/inf/huge values",
                       examples=_core.examples, calls_accepted=_core.calls["accepted"],
                       calls_rejected=_core.calls["rejected"], undocumented_errors=0)


def test_rejected_durations_never_poison_history() -> None:
    rt = fresh_runtime()
    rt.record_performance("dot", 1000, Backend.SIMD, 10.0)
    for bad in (math.nan, math.inf, -math.inf, -1.0, 10**400, -(10**400), np.float64("nan")):
        with pytest.raises(ValueError, match="duration_us"):
            rt.record_performance("dot", 1000, Backend.SIMD, bad)
    for bad in (True, None, "10", b"10"):
        with pytest.raises(TypeError, match="duration_us"):
            rt.record_performance("dot", 1000, Backend.SIMD, bad)
    (record,) = rt.history_snapshot()
    assert (record.samples, record.mean_us) == (1, 10.0)
    rt.record_performance("dot", 1000, Backend.SIMD, np.int64(10))  # numpy numbers count
    assert rt.history_snapshot()[0].samples == 2


def test_sizes_past_2_to_the_64_and_unencodable_names_are_value_errors() -> None:
    rt = fresh_runtime()
    for size in (MAX_SIZE, 2**2000, 10**400):
        for method in ("select", "decide", "get_best_backend"):
            with pytest.raises(ValueError, match="2\\*\\*64"):
                getattr(rt, method)("dot", size)
        with pytest.raises(ValueError, match="2\\*\\*64"):
            rt.record_performance("dot", size, Backend.SIMD, 1.0)
    for name in ("\ud800", "op\udfff"):
        with pytest.raises(ValueError, match="UTF-8"):
            rt.select(name, 10)
        with pytest.raises(ValueError, match="UTF-8"):
            rt.is_hot_path(name)
        with pytest.raises(ar.RegistrationError, match="UTF-8"):
            rt.register(name)
    assert rt.history_snapshot() == [] and rt.selection_counts() == {}


def test_names_over_256_characters_are_rejected_showing_only_their_start() -> None:
    # A name is copied into every history key, span and metric label of its operation: a
    # megabyte of text passed as a name (a tensor's repr, say) is refused, not stored, and
    # the error does not repeat it.
    rt = fresh_runtime()
    longest, too_long = "n" * 256, "x" * 1_000_000
    for method in ("select", "decide", "get_best_backend"):
        with pytest.raises(ValueError, match="at most 256 characters") as raised:
            getattr(rt, method)(too_long, 10)
        assert len(str(raised.value)) < 200
    with pytest.raises(ValueError, match="at most 256 characters"):
        rt.record_performance(too_long, 10, Backend.SIMD, 1.0)
    with pytest.raises(ValueError, match="at most 256 characters"):
        rt.is_hot_path(too_long)
    with pytest.raises(ar.RegistrationError, match="at most 256 characters") as refused:
        rt.register(too_long)
    assert len(str(refused.value)) < 200
    assert rt.history_snapshot() == [] and rt.selection_counts() == {}
    rt.select(longest, 10)
    rt.record_performance(longest, 10, Backend.SIMD, 1.0)
    rt.register(longest)
    assert [r.operation for r in rt.history_snapshot()] == [longest]


def test_no_usable_arm_is_backend_unavailable_and_changes_nothing() -> None:
    # GPU is the only arm left enabled, on a machine without one
    rt = fresh_runtime(disabled_backends="simd,scalar")
    with pytest.raises(ar.BackendUnavailableError, match="unavailable"):
        rt.select("dot", 1000)
    assert rt.history_snapshot() == [] and rt.selection_counts() == {}


# ---------------------------------------------------------------------------- run / register


def _simd(n: Any) -> tuple[str, Any]:
    return "simd", n


def _scalar(n: Any) -> tuple[str, Any]:
    return "scalar", n


kinds = st.one_of(st.sampled_from([*ar.Kind, "vector", "MATRIX", "bogus", ""]), st.integers(),
                  st.none())
hooks = st.one_of(st.none(), st.just(lambda *a: ""), st.just(lambda *a: "torch"),
                  st.just(lambda *a: False), st.integers(), st.text(max_size=2))
arms = st.one_of(st.sampled_from(list(Backend)), st.sampled_from(["simd", "tpu", "", 3]))
REGISTERED = "<the name just registered>"
_run = Tally()


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(name=any_name, kind=kinds, on_device=hooks, family=hooks,
       impl_arms=st.lists(arms, max_size=3),
       calls=st.lists(st.tuples(st.one_of(st.sampled_from(["scale", REGISTERED]), any_name),
                                any_size), min_size=1, max_size=6))
def _fuzz_run(name: Any, kind: Any, on_device: Any, family: Any, impl_arms: list[Any],
              calls: list[tuple[Any, Any]]) -> None:
    _run.examples += 1
    rt = fresh_runtime()
    good = rt.register("scale", size=lambda n, *_: n, kind="vector")
    good.add_implementation(Backend.SIMD, _simd)
    good.add_implementation(Backend.SCALAR, _scalar)
    registered, op = _run.outcome(lambda: rt.register(name, size=lambda n, *_: n, kind=kind,
                                                       on_device=on_device, family=family))
    if registered:
        for arm in impl_arms:
            _run.outcome(lambda a=arm: op.add_implementation(a, _simd))
    made = 0
    for target, size in calls:
        target = name if target == REGISTERED else target
        ok, result = _run.outcome(lambda t=target, n=size: rt.run(t, n))
        if ok:
            made += 1
            assert result[1] is size or result[1] == size
        # a good call right after, and every call counted exactly once
        assert rt.run("scale", 1000)[1] == 1000
        made += 1
        assert sum(rt.selection_counts().values()) == made


def test_fuzzed_register_and_run_raise_only_documented_errors(reliability) -> None:
    _fuzz_run()
    assert _run.calls["rejected"] > 0 and _run.calls["accepted"] > 0
    reliability.record(load="Hypothesis: register (names, kinds, hooks, arms) and run "
                            "(unknown names, sizes of every type)",
                       examples=_run.examples, calls_accepted=_run.calls["accepted"],
                       calls_rejected=_run.calls["rejected"], undocumented_errors=0)


# ---------------------------------------------------------------------------- RuntimeConfig

FIELDS = [f.name for f in dataclasses.fields(ar.RuntimeConfig) if f.name != "history_path"]
values = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**6), max_value=10**6),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6),
    st.sampled_from([10**400, 10**5000, -(10**400), 1e308, 5e-324, 2**20, 2**21, 3,
                     ["gpu", "simd"], ["scalar"], frozenset({Backend.GPU}), "gpu,simd",
                     "gpu,simd,scalar", Backend.SIMD, object()]),
)
paths = st.one_of(st.none(), st.just(""), st.just("a\x00b"), st.integers(), st.just(b"x"))
_config = Tally()


def _exercise(cfg: ar.RuntimeConfig) -> None:
    """A runtime built from ``cfg`` runs, selects and learns."""
    try:
        rt = ar.AdaptiveRuntime(cfg, builtin_ops=False, devices=DeviceProbe(gpu=False))
    except ar.BackendUnavailableError:
        # a forced arm this machine lacks is refused at start-up, as documented
        assert cfg.force_backend is Backend.GPU
        return
    op = rt.register("scale", size=lambda n: n, kind="vector")
    op.add_implementation(Backend.SIMD, _simd)
    op.add_implementation(Backend.SCALAR, _scalar)
    forced = cfg.force_backend
    for _ in range(20):
        ok, _ = _config.outcome(lambda: rt.run("scale", 1000))
        # (only a forced arm that "scale" lacks, or GPU alone, may refuse)
        assert ok or forced is Backend.GPU or cfg.disabled_backends >= {Backend.SIMD,
                                                                        Backend.SCALAR}
    _config.outcome(lambda: rt.record_performance("x", 10, Backend.SCALAR, 1.0))
    rt.selection_counts()
    rt.history_snapshot()


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(kw=st.dictionaries(st.sampled_from(FIELDS), values, max_size=4), path=paths)
def _fuzz_config(kw: dict[str, Any], path: Any) -> None:
    _config.examples += 1
    if path is not None:
        kw["history_path"] = path  # (every value drawn here is a bad one: no file is touched)
    ok, cfg = _config.outcome(lambda: ar.RuntimeConfig(**kw))
    if ok:
        _exercise(cfg)
    elif not isinstance(cfg, ar.ConfigError):
        assert isinstance(cfg, TypeError)  # a keyword RuntimeConfig does not have


env_names = [ENV_PREFIX + _ENV_NAMES.get(f.name, f.name.upper())
             for f in dataclasses.fields(ar.RuntimeConfig) if f.name != "history_path"]
env_values = st.one_of(
    st.text(max_size=10),
    st.sampled_from(["nan", "inf", "-inf", "1e309", "-1", "0", "1", "1e300", "1e-300", "on",
                     "off", "gpu", "simd,scalar", "gpu,simd,scalar", " 7 ", "1_000", "0x10",
                     "9" * 5000, "2048", "3.5", "True", "\x00", "\ud800"]),
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(env=st.dictionaries(st.sampled_from(env_names), env_values, max_size=4))
def _fuzz_env(env: dict[str, str]) -> None:
    _config.examples += 1
    ok, cfg = _config.outcome(lambda: ar.RuntimeConfig.from_env(env))
    if ok:
        _exercise(cfg)
    else:
        assert isinstance(cfg, ar.ConfigError)
        assert any(name in str(cfg) for name in env), cfg  # it names the variable


def test_fuzzed_runtime_config_and_environment_are_config_errors_or_work(reliability) -> None:
    _fuzz_config()
    _fuzz_env()
    assert _config.calls["rejected"] > 0 and _config.calls["accepted"] > 0
    reliability.record(load="Hypothesis: RuntimeConfig(...) keywords and every "
                            "ADAPTIVE_RUNTIME_* variable (huge, NaN, inf, garbage)",
                       examples=_config.examples, calls_accepted=_config.calls["accepted"],
                       calls_rejected=_config.calls["rejected"], undocumented_errors=0)


# ---------------------------------------------------------------------------- configure()

# ``configure()`` installs the process-global OpenTelemetry providers, so it is fuzzed in a
# child interpreter of its own (running Hypothesis there), exporting to the real OTLP receiver.
# It is set once: the first accepted example installs; every later one is checked as fully
# (a bad setting is still a ConfigError) and then changes nothing, with a ConfigWarning.
CONFIGURE_FUZZ = textwrap.dedent('''
    import json, os, sys, tempfile, warnings
    import adaptive_runtime as ar
    from adaptive_runtime.config import ConfigWarning
    from adaptive_runtime.operations import DeviceProbe
    from hypothesis import HealthCheck, given, settings, strategies as st

    GRPC, HTTP, DIRECTORY, EXAMPLES = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(), builtin_ops=False,
                            devices=DeviceProbe(gpu=False))
    op = rt.register("scale", size=lambda n: n, kind="vector")
    op.add_implementation("simd", lambda n: 2 * n)
    op.add_implementation("scalar", lambda n: n + n)
    tally = {"examples": 0, "accepted": 0, "rejected": 0}
    warnings.simplefilter("ignore", ConfigWarning)  # (configure() again: set once)

    text = st.text(max_size=8)
    endpoints = st.one_of(st.none(), st.sampled_from([GRPC, HTTP, HTTP + "/v1/traces", ""]),
                          st.integers(), text)
    protocols = st.one_of(st.none(), st.sampled_from(["grpc", "http/protobuf", "GRPC", "http",
                                                      "", "http/json"]), st.integers(), text)
    exporters = st.one_of(st.none(), st.sampled_from(["otlp", "console", "none", "OTLP",
                                                      "otlp,console", ",,", "prometheus", ""]),
                          st.integers(), text)
    env_texts = lambda choices: st.one_of(st.sampled_from(choices), text)
    environ = st.fixed_dictionaries({}, optional={
        "OTEL_EXPORTER_OTLP_ENDPOINT": env_texts([GRPC, HTTP, "", "not a url"]),
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": env_texts([HTTP + "/v1/traces", ""]),
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": env_texts([HTTP + "/v1/metrics", ""]),
        "OTEL_EXPORTER_OTLP_PROTOCOL": env_texts(["grpc", "http/protobuf", "bogus"]),
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": env_texts(["grpc", "http/protobuf"]),
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": env_texts(["grpc", "http/protobuf"]),
        "OTEL_TRACES_EXPORTER": env_texts(["otlp", "console", "none", ",", "zipkin"]),
        "OTEL_METRICS_EXPORTER": env_texts(["otlp", "console", "none", "prometheus"]),
        "OTEL_EXPORTER_OTLP_HEADERS": env_texts(["x-test=1", "a=b=c", "novalue", "=x",
                                                 "%zz=1", "k=%E2%82"]),
        "OTEL_EXPORTER_OTLP_TIMEOUT": env_texts(["1", "0", "-5", "nan", "inf", "abc", "1e999"]),
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": env_texts(["2", "x"]),
        "OTEL_SERVICE_NAME": text,
        "OTEL_SDK_DISABLED": env_texts(["true", "TRUE", "false", "1"]),
        "ADAPTIVE_RUNTIME_PROMETHEUS_PORT": env_texts(["", "70000", "-1", "http", "nan"]),
        "ADAPTIVE_RUNTIME_TELEMETRY_DIR": st.sampled_from([DIRECTORY, ""]),
    })
    arguments = st.fixed_dictionaries({}, optional={
        "service_name": st.one_of(st.none(), text, st.integers()),
        "endpoint": endpoints,
        "prometheus_port": st.one_of(st.none(), st.sampled_from([False, -1, 70000, 1.5, "9464",
                                                                 2**70])),
        "protocol": protocols,
        "headers": st.one_of(st.none(), st.just({"x-test": "1"}), st.just({"x": 1}),
                             st.just(["x"])),
        "directory": st.one_of(st.none(), st.just(DIRECTORY), st.integers()),
        "metrics_interval_s": st.one_of(st.sampled_from([0.5, 10.0, 60]),
                                        st.floats(allow_nan=True, allow_infinity=True),
                                        st.sampled_from([0, -1, True, "10", 10**400, 1e300])),
        "traces_exporter": exporters,
        "metrics_exporter": exporters,
    })

    @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(arguments, environ)
    def fuzz(kwargs, env):
        tally["examples"] += 1
        try:
            ar.telemetry.configure(prometheus_host="127.0.0.1", environ=env, **kwargs)
        except ar.ConfigError:
            tally["rejected"] += 1
        else:
            tally["accepted"] += 1
        assert rt.run("scale", 1000) == 2000  # the loop goes on, configured or not
        ar.telemetry.shutdown(timeout_s=2.0)

    fuzz()
    print("RESULT " + json.dumps(tally), flush=True)
''')


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    receiver.start()
    try:
        yield receiver
    finally:
        receiver.stop()


def test_fuzzed_configure_arguments_and_otel_variables_are_config_errors_or_work(
        receiver: OtlpReceiver, tmp_path: Path, reliability) -> None:
    env = {k: v for k, v in __import__("os").environ.items()
           if not k.startswith(("OTEL_", "ADAPTIVE_RUNTIME_"))}
    env.update(OTEL_EXPORTER_OTLP_TIMEOUT="2", OTEL_BSP_SCHEDULE_DELAY="50",
               PYTHONDONTWRITEBYTECODE="1")
    http = receiver.http_traces_url.rsplit("/v1/", 1)[0]
    proc = subprocess.run(
        [sys.executable, "-W", "error", "-c", CONFIGURE_FUZZ,
         f"http://{receiver.grpc_endpoint}", http, str(tmp_path / "telemetry"), "40"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    tally = json.loads(lines[-1][7:])
    assert tally["rejected"] > 0 and tally["accepted"] > 0
    reliability.record(load="Hypothesis in a child: configure() arguments and the OTEL_* / "
                            "ADAPTIVE_RUNTIME_* variables it reads, real OTLP receiver",
                       examples=tally["examples"], configs_accepted=tally["accepted"],
                       configs_rejected=tally["rejected"], undocumented_errors=0)


# ---------------------------------------------------------------------------- cardinality


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def _operation_values(reader: InMemoryMetricReader) -> dict[str, set[str]]:
    """Distinct ``adaptive.operation`` values per metric in one collection."""
    found: dict[str, set[str]] = {}
    data = reader.get_metrics_data()
    for resource_metrics in data.resource_metrics if data else ():
        for scope in resource_metrics.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    op = point.attributes.get("adaptive.operation")
                    if op is not None:
                        found.setdefault(metric.name, set()).add(op)
    return found


NAMES = 1_000_000
SELECT_NAMES = 20_000


def test_a_million_distinct_names_keep_memory_and_metric_attributes_bounded(
        reliability) -> None:
    cap = 4096  # max_history_keys: small, so every cap is reached early and often
    rt = fresh_runtime(max_history_keys=cap)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    ar.telemetry.instrument(rt, meter_provider=provider)
    try:
        # select() feeds the selection counter, the hot-path detector and the trace gate
        for i in range(SELECT_NAMES):
            rt.select(f"sel{i}", 1000 + i)
        record = rt.record_performance
        simd = Backend.SIMD
        warm = NAMES // 5
        for i in range(warm):
            record(f"op{i}", 1000, simd, 10.0)
        rss_warm = _rss_mib()
        for i in range(warm, NAMES):
            record(f"op{i}", 1000, simd, 10.0)
        rss_end = _rss_mib()
        assert len(rt.history_snapshot()) <= cap
        assert len(hot_path_entries(rt)) <= cap
        assert len(trace_gate_keys(rt)) <= cap
        assert len(select_labels(rt)) <= MAX_SELECT_LABELS
        assert len(selection_counters(rt)) <= (MAX_SELECT_LABELS + 1) * 3 * len(ar.Reason)
        growth_mib = rss_end - rss_warm
        assert growth_mib < 16, (rss_warm, rss_end)  # 800k names at 20 B each would be 16 MiB

        values = _operation_values(reader)
        selection = values["adaptive.selection"]
        assert len(selection) <= MAX_SELECT_LABELS + 1 and OTHER_LABEL in selection
        latency = values["adaptive.learned.latency"]
        assert len(latency) <= MAX_REPORTED_KEYS + 1 and OTHER_OPERATION in latency
        widest = max(len(v) for v in values.values())
        assert widest <= max(MAX_SELECT_LABELS, MAX_REPORTED_KEYS) + 1, values.keys()
    finally:
        provider.shutdown()
    reliability.record(load=f"{NAMES:,} distinct names (record_performance) + {SELECT_NAMES:,} "
                            f"(select), max_history_keys={cap}",
                       distinct_names=NAMES + SELECT_NAMES,
                       history_keys=len(rt.history_snapshot()),
                       metric_operation_values_max=widest,
                       rss_growth_mib=round(growth_mib, 1))


def test_hot_path_spans_of_select_names_past_the_cap_are_named_other(reliability) -> None:
    now = [1_000.0]
    rt = ar.AdaptiveRuntime(ar.RuntimeConfig(hot_path_calls_per_sec=1.0), builtin_ops=False,
                            devices=DeviceProbe(gpu=False), clock=lambda: now[0])
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider(shutdown_on_exit=False)
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    ar.telemetry.instrument(rt, tracer_provider=tracer_provider,
                            meter_provider=MeterProvider(shutdown_on_exit=False))
    names = MAX_SELECT_LABELS + 44
    try:
        for i in range(names):  # three calls in one second: above 1 call/s, hot
            for step in (0.0, 0.5, 0.5):
                now[0] += step
                rt.select(f"invented{i}", 1000)
        assert rt.flush_telemetry(10.0)
        tracer_provider.force_flush()
        hot = [s for s in exporter.get_finished_spans() if s.name.startswith("adaptive.hot_path")]
        operations = {s.attributes["adaptive.operation"] for s in hot}
        span_names = {s.name for s in hot}
        assert len(hot) == names  # every one entered the hot path...
        assert len(operations) == MAX_SELECT_LABELS + 1 and OTHER_LABEL in operations
        assert len(span_names) == MAX_SELECT_LABELS + 1  # ...under bounded names
    finally:
        ar.telemetry.uninstrument(rt, timeout_s=5.0)
        tracer_provider.shutdown()
    reliability.record(load=f"{names} invented select() names each entering the hot path",
                       hot_path_spans=len(hot), distinct_span_operations=len(operations))
